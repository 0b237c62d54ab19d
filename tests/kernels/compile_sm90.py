"""Compile every kernel ahead of time for sm_90 (H100/H200) with the launch arguments and
block sizes the CUDA path uses. Needs no GPU (Triton ships ptxas), and catches what the CPU
interpreter lets through: type mismatches across runtime branches, unsupported ops, tiles
that do not fit in shared memory.

Run as a script without TRITON_INTERPRET (the interpreter replaces @triton.jit functions
with objects the compiler cannot take); test_compile_sm90.py does that in a subprocess.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hybridllm.kernels.sampler_ref import SamplingTensors
from hybridllm.kernels.testing import build_metadata

SM90_MAX_SHARED = 227 * 1024
PTR = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16",
       torch.int32: "*i32", torch.int64: "*i64"}


def _type(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return PTR[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    assert isinstance(value, float), type(value)
    return "fp32"


def _compile_launches(module_name: str, kernels: list[str], call: Callable[[], Any]) -> int:
    """Run call() with the module's kernels replaced by recorders, then compile each launch."""
    module = importlib.import_module(module_name)
    launches: list[tuple[Any, tuple, dict]] = []

    class Recorder:
        def __init__(self, kernel: Any) -> None:
            self.kernel = kernel

        def __getitem__(self, grid: Any) -> Callable[..., None]:
            return lambda *args, **kwargs: launches.append((self.kernel, args, kwargs))

    originals = {name: getattr(module, name) for name in kernels}
    for name, kernel in originals.items():
        setattr(module, name, Recorder(kernel))
    try:
        call()
    finally:
        for name, kernel in originals.items():
            setattr(module, name, kernel)
    assert launches
    for kernel, args, kwargs in launches:
        names = kernel.arg_names
        options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
        signature = {n: _type(v) for n, v in zip(names, args)}
        signature.update({n: "constexpr" for n in kwargs})
        constexprs = {(names.index(n),): v for n, v in kwargs.items()}
        src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        shared = compiled.metadata.shared
        # Checked only when loaded on a device otherwise; H100/H200 allow 227 KiB per block.
        assert shared <= SM90_MAX_SHARED, f"{kernel.__name__}: {shared} B of shared memory"
        print(f"  {kernel.__name__}: {shared} B shared, {compiled.metadata.num_warps} warps")
    return len(launches)


def compile_attention(dtype: torch.dtype) -> None:
    from hybridllm.kernels import paged_attention, paged_decode_split

    meta = build_metadata([(300, 300), (1, 4000)], 16, 300, "cpu")
    decode = build_metadata([(1, 4000)], 16, 300, "cpu")
    q = torch.zeros(301, 32, 128, dtype=dtype)
    cache = torch.zeros(300, 16, 8, 128, dtype=dtype)
    _compile_launches(
        paged_attention.__name__, ["_unified_attention_kernel"],
        lambda: paged_attention.unified_attention(q, cache, cache, meta, 0.1),
    )
    n = _compile_launches(
        paged_decode_split.__name__, ["_split_decode_kernel", "_split_reduce_kernel"],
        lambda: paged_decode_split.split_kv_decode(q[:1], cache, cache, decode, 0.1, 8),
    )
    assert n == 2


def compile_elementwise() -> None:
    from hybridllm.kernels import activation, reshape_and_cache, rms_norm, rotary

    bf16 = torch.bfloat16
    x = torch.zeros(4, 2048, dtype=bf16)
    w = torch.ones(2048, dtype=bf16)
    _compile_launches(rms_norm.__name__, ["_rms_norm_kernel"], lambda: (
        rms_norm.rms_norm(x, w, 1e-5), rms_norm.add_rms_norm(x, x.clone(), w, 1e-5)))
    _compile_launches(activation.__name__, ["_silu_and_mul_kernel"],
                      lambda: activation.silu_and_mul(torch.zeros(4, 16384, dtype=bf16)))
    qkv = torch.zeros(4, 48 * 64, dtype=bf16)
    q = qkv[:, : 32 * 64].view(4, 32, 64)
    k = qkv[:, 32 * 64 : 40 * 64].view(4, 8, 64)
    pos = torch.zeros(4, dtype=torch.int64)
    _compile_launches(rotary.__name__, ["_rotary_kernel"],
                      lambda: rotary.rotary_embedding_(q, k, pos, torch.zeros(64, 64)))
    cache = torch.zeros(10, 16, 8, 64, dtype=bf16)
    _compile_launches(
        reshape_and_cache.__name__, ["_reshape_and_cache_kernel"],
        lambda: reshape_and_cache.reshape_and_cache(
            k, k, cache, cache, torch.zeros(4, dtype=torch.int64)),
    )


def compile_sampler() -> None:
    from hybridllm.kernels import sampler

    b, v = 4, 128256
    f = torch.zeros(b)
    params = SamplingTensors(
        temperature=f, top_k=f.int(), top_p=f, min_p=f, repetition_penalty=f,
        presence_penalty=f, frequency_penalty=f, seeds=f.long(), steps=f.long(),
        prompt_counts=torch.zeros(b, v, dtype=torch.int32),
        output_counts=torch.zeros(b, v, dtype=torch.int32),
    )
    _compile_launches(sampler.__name__, ["_sampler_kernel"],
                      lambda: sampler.sample(torch.zeros(b, v), params, return_logits=True))


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), "unset TRITON_INTERPRET"
    for dtype in (torch.bfloat16, torch.float32):
        compile_attention(dtype)
        print(f"attention kernels compiled for sm_90 ({dtype})")
    compile_elementwise()
    print("elementwise kernels compiled for sm_90")
    compile_sampler()
    print("sampler kernel compiled for sm_90")

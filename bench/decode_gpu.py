"""Decode benchmark of a dummy-weight Llama on CUDA with the Triton attention backend.

Each timed step is one decode token for every sequence of the batch (forward + LM head) over a
context of --context cached tokens per sequence. Prints tokens/s per batch size and, for
batch 1, the fraction of the memory-bandwidth roofline: (weight bytes + KV bytes read) per
step / step time / peak bandwidth. Steps are CUDA-graph replays (the engine's DecodeGraphs,
static-buffer copies included) unless --enforce-eager. The step is replayed at a fixed position
(the cache slot is rewritten), which costs the same as advancing. By default the model uses
the fused Triton norm / rotary / SiLU ops (--torch-layers keeps the torch ones).

--runner times the real engine step instead: ModelRunner.execute() on a decode schedule of
real Sequence objects (host preparation, graph replay, LM head, sampler, token list to host).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from hybridllm.attention.triton_backend import TritonAttentionBackend
from hybridllm.executor.cuda_graph import DecodeGraphs
from hybridllm.kernels.testing import build_metadata
from hybridllm.models.interfaces import CausalLM, DecoderConfig
from hybridllm.models.loader import load_model
from hybridllm.models.registry import generation_config
from hybridllm.step_types import AttentionMetadata

ROOT = Path(__file__).resolve().parent.parent


def weight_bytes(model: CausalLM) -> int:
    # Every parameter is read once per step (the tied embedding as the LM head).
    assert isinstance(model, torch.nn.Module)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def kv_bytes(cfg: DecoderConfig, num_keys: int, dtype: torch.dtype) -> int:
    per_token = 2 * cfg.num_key_value_heads * cfg.head_dim * dtype.itemsize
    return num_keys * per_token * cfg.num_hidden_layers


def time_steps(step: Callable[[], None], iters: int, device: torch.device) -> float:
    """Mean seconds per step after warm-up."""
    for _ in range(3):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - t0) / iters


def bench_batch(
    model: CausalLM,
    kv_caches: list[torch.Tensor],
    num_blocks: int,
    batch: int,
    context: int,
    eager: bool,
    iters: int,
) -> float:
    cfg, device = model.cfg, kv_caches[0].device
    block_size = kv_caches[0].shape[2]
    g = torch.Generator().manual_seed(batch)
    meta: AttentionMetadata = build_metadata(
        [(1, context + 1)] * batch, block_size, num_blocks, device, g
    )
    input_ids = torch.randint(0, cfg.vocab_size, (batch,), generator=g).to(device)
    positions = torch.full((batch,), context, dtype=torch.int64, device=device)
    backend = TritonAttentionBackend()
    out: dict[str, torch.Tensor] = {}

    @torch.inference_mode()
    def step() -> None:
        hidden = model.forward(input_ids, positions, kv_caches, meta, backend)
        out["logits"] = model.compute_logits(hidden)

    if eager or device.type != "cuda":
        return time_steps(step, iters, device)
    # The engine's graph path: one graph of this size, max_seqlen_k bucket = the context
    # rounded up as max_model_len would be, inputs copied into its static buffers each step.
    graphs = DecodeGraphs(model, backend, kv_caches, [batch],
                          max_blocks_per_seq=meta.block_tables.shape[1],
                          max_seqlen_k=meta.block_tables.shape[1] * block_size)
    graphs.capture()

    @torch.inference_mode()
    def graph_step() -> None:
        hidden = graphs.run(input_ids, positions, meta)
        out["logits"] = model.compute_logits(hidden)

    return time_steps(graph_step, iters, device)


def bench_runner(folder: Path, batches: list[int], context: int, block_size: int,
                 eager: bool, iters: int, sampled: bool) -> tuple[list[float], bool]:
    """Seconds per ModelRunner.execute() decode step for each batch size; graphs used?"""
    from hybridllm.config import EngineArgs
    from hybridllm.executor.model_runner import ModelRunner
    from hybridllm.sampling import build_sampler
    from hybridllm.sampling_params import SamplingParams
    from hybridllm.sequence import Request, Sequence
    from hybridllm.step_types import SchedulerOutput

    blocks_per_seq = -(-(context + 1) // block_size)
    args = EngineArgs(
        model=str(folder), load_format="dummy", max_model_len=blocks_per_seq * block_size,
        max_num_seqs=max(batches), block_size=block_size, enforce_eager=eager,
        num_gpu_blocks_override=max(batches) * blocks_per_seq, attention_backend="triton",
    )
    config = args.resolve()
    runner = ModelRunner(config, build_sampler(config.model, config.args.seed, config.device))
    params = (SamplingParams(temperature=0.8, top_p=0.95, top_k=50) if sampled
              else SamplingParams(temperature=0))
    g = torch.Generator().manual_seed(0)
    times = []
    for batch in batches:
        seqs = []
        for i in range(batch):
            ids = torch.randint(0, runner.config.model.vocab_size, (context + 1,), generator=g)
            seq = Sequence(Request(f"b{i}", None, ids.tolist(), params, 16), 0, None)
            seq.num_computed_tokens = context
            seq.block_table = list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq))
            seqs.append(seq)
        sched = SchedulerOutput(seqs, [1] * len(seqs))
        # execute() ends with the sampled tokens on the host: each step is synchronous.
        step = functools.partial(runner.execute, sched)
        times.append(time_steps(step, iters, torch.device("cpu")))
    return times, runner.graphs is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/llama-1b-dummy.json")
    parser.add_argument("--batch-sizes", default="1,16,64,256")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--peak-bw", type=float, default=4.8e12, help="bytes/s (H200: 4.8e12)")
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    parser.add_argument("--torch-layers", action="store_true", help="keep torch norm/rope/act")
    parser.add_argument("--runner", action="store_true",
                        help="time ModelRunner.execute() (the engine step) instead")
    parser.add_argument("--sampled", action="store_true",
                        help="with --runner: temperature/top-p/top-k rows (GPU sampler)")
    parser.add_argument("--device", default="cuda", help="cpu only for a smoke run under "
                        "TRITON_INTERPRET=1 with a tiny --config")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("decode_gpu: no CUDA device")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    batches = [int(b) for b in args.batch_sizes.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(args.config, Path(tmp) / "config.json")
        cfg = generation_config(tmp)
        model = load_model(Path(tmp), cfg, dtype, device, args.context + 64, load_format="dummy")
        if args.runner:
            report_runner(args, Path(tmp), cfg, model, dtype, batches)
            return
    if not args.torch_layers:
        from hybridllm.models.fused_ops import triton_ops

        model.set_layer_ops(triton_ops())
    blocks_per_seq = (args.context + 1 + args.block_size - 1) // args.block_size
    num_blocks = max(batches) * blocks_per_seq + 1
    kv_caches = [
        torch.randn(2, num_blocks, args.block_size, cfg.num_key_value_heads, cfg.head_dim,
                    dtype=dtype, device=device)
        for _ in range(cfg.num_hidden_layers)
    ]
    w_bytes = weight_bytes(model)
    mode = "eager" if args.enforce_eager or device.type != "cuda" else "cuda-graph"
    layer_kind = "torch layers" if args.torch_layers else "fused Triton layers"
    print(f"decode bench: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
          f"{w_bytes / 1e9:.2f} GB weights ({dtype}), context {args.context}, {mode}, "
          f"{layer_kind}, Triton attention")
    for batch in batches:
        step_s = bench_batch(model, kv_caches, num_blocks, batch, args.context,
                             args.enforce_eager, args.iters)
        line = (f"batch {batch:4d}: step {step_s * 1e3:8.3f} ms  "
                f"{batch / step_s:10.1f} tokens/s")
        if batch == 1:
            moved = w_bytes + kv_bytes(cfg, args.context + 1, dtype)
            frac = moved / step_s / args.peak_bw
            line += (f"  roofline {frac * 100:5.1f}% ({moved / 1e9:.3f} GB/step, peak "
                     f"{args.peak_bw / 1e12:.1f} TB/s; target >= 60% with CUDA graphs)")
        print(line, flush=True)


def report_runner(args: argparse.Namespace, folder: Path, cfg: DecoderConfig,
                  model: CausalLM, dtype: torch.dtype, batches: list[int]) -> None:
    w_bytes = weight_bytes(model)
    del model  # the runner loads its own copy
    times, graphs = bench_runner(folder, batches, args.context, args.block_size, args.enforce_eager,
                         args.iters, args.sampled)
    mode = "cuda-graph" if graphs else "eager"
    print(f"runner bench: ModelRunner.execute decode steps, {mode}, "
          f"{'sampled' if args.sampled else 'greedy'}, context {args.context}")
    for batch, step_s in zip(batches, times):
        line = (f"runner batch {batch:4d}: step {step_s * 1e3:8.3f} ms  "
                f"{batch / step_s:10.1f} tokens/s")
        if batch == 1:
            moved = w_bytes + kv_bytes(cfg, args.context + 1, dtype)
            line += (f"  roofline {moved / step_s / args.peak_bw * 100:5.1f}% "
                     "(engine step, host work included; target >= 60%)")
        print(line, flush=True)


if __name__ == "__main__":
    main()

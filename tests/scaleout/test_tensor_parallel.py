"""Tensor parallelism on gloo (CPU): greedy tokens of TP=3 on the bundled model (9 heads, 3 KV
heads, tied LM head), of TP=2 on a small random checkpoint (8 heads, 4 KV heads, untied
head) and of TP=2 on tiny random Qwen3 checkpoints (4 heads, 2 KV heads, per-head q/k norms
replicated; once with attention_bias, so q/k/v biases are split and o_proj's is rank 0's
alone) equal TP=1's, fp32, 8 prompts x 32 tokens. Where a token differs the test demands a
near-tie at that position in the TP=1 run (its top two logprobs within 1e-4, the other run's
token among them) and compares no further in that sequence, as vLLM's check_logprobs_close
does. Two "nodes" over 127.0.0.1 (node 0 serving with the Rust frontend, node 1 headless)
answer with the same text. A split the model does not allow is refused naming the numbers."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import torch
from safetensors.torch import save_file

from hybridllm import LLM, SamplingParams
from tests.golden.kinds import PROMPTS
from tests.launch import CLI, alive, free_port, process_tree, spawn, start, stop
from tests.models.checkpoints import make_checkpoint

MAX_TOKENS = 32
# A small KV cache per rank: the default (2 GiB) is sized for serving, not for this test.
ENGINE = dict(max_model_len=256, kv_cache_memory=32 << 20, max_num_seqs=8)


def _generate(model: str, tp: int) -> list[tuple[list[int], list[dict], str]]:
    threads = torch.get_num_threads()
    llm = LLM(model=model, tensor_parallel_size=tp, **ENGINE)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS,
                                                    ignore_eos=True, logprobs=2))
    finally:
        llm.engine.shutdown()
        torch.set_num_threads(threads)  # rank 0 took its share of the cores
    return [(list(o.outputs[0].token_ids), o.outputs[0].logprobs, o.outputs[0].text)
            for o in outs]


def assert_same_or_near_tie(ref: list[tuple], got: list[tuple]) -> int:
    """Returns how many sequences ended at a near-tie (compared up to there)."""
    ties = 0
    for i, ((ref_ids, ref_lps, _), (got_ids, _, _)) in enumerate(zip(ref, got)):
        assert len(ref_ids) == len(got_ids) == MAX_TOKENS
        for pos, (a, b) in enumerate(zip(ref_ids, got_ids)):
            if a == b:
                continue
            top = sorted(ref_lps[pos].items(), key=lambda kv: -kv[1].logprob)[:2]
            assert b in dict(top), f"prompt {i} position {pos}: {b} not in TP=1's top 2 {top}"
            gap = top[0][1].logprob - top[1][1].logprob
            assert gap <= 1e-4, f"prompt {i} position {pos}: {a} != {b}, logprob gap {gap}"
            ties += 1
            break
    return ties


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, model_path: Path) -> Path:
    """8 heads, 4 KV heads (head_dim 16), untied LM head, random weights; the bundled
    tokenizer (so the vocabulary is its 49,152)."""
    folder = tmp_path_factory.mktemp("tp-small")
    for f in model_path.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json",
                                                        "generation_config.json"):
            shutil.copy(f, folder / f.name)
    cfg = dict(architectures=["LlamaForCausalLM"], vocab_size=49152, hidden_size=128,
               intermediate_size=256, num_hidden_layers=2, num_attention_heads=8,
               num_key_value_heads=4, head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
               max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1,
               eos_token_id=2)
    (folder / "config.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(0)

    def w(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=g) - 0.5) * 0.2

    h, q, kv, inter = 128, 8 * 16, 4 * 16, 256
    tensors = {"model.embed_tokens.weight": w(49152, h), "model.norm.weight": 1 + w(h),
               "lm_head.weight": w(49152, h)}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors |= {p + "input_layernorm.weight": 1 + w(h),
                    p + "post_attention_layernorm.weight": 1 + w(h),
                    p + "self_attn.q_proj.weight": w(q, h), p + "self_attn.k_proj.weight": w(kv, h),
                    p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, q),
                    p + "mlp.gate_proj.weight": w(inter, h), p + "mlp.up_proj.weight": w(inter, h),
                    p + "mlp.down_proj.weight": w(h, inter)}
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def small_reference(small_model: Path) -> list[tuple]:
    return _generate(str(small_model), 1)


def test_tp3_bundled_model_equals_tp1(model_path: Path) -> None:
    ref = _generate(str(model_path), 1)
    got = _generate(str(model_path), 3)
    ties = assert_same_or_near_tie(ref, got)
    assert ties <= 2, f"{ties} of 8 sequences ended at a near-tie"


def test_tp2_small_model_equals_tp1(small_model: Path, small_reference) -> None:
    got = _generate(str(small_model), 2)
    ties = assert_same_or_near_tie(small_reference, got)
    assert ties <= 2, f"{ties} of 8 sequences ended at a near-tie"


@pytest.mark.parametrize("bias", [False, True], ids=["qwen3", "qwen3_attention_bias"])
def test_tp2_qwen3_equals_tp1(bias: bool, tmp_path: Path, model_path: Path) -> None:
    make_checkpoint("qwen3", tmp_path, model_path, attention_bias=bias)
    ref = _generate(str(tmp_path), 1)
    got = _generate(str(tmp_path), 2)
    ties = assert_same_or_near_tie(ref, got)
    assert ties <= 2, f"{ties} of 8 sequences ended at a near-tie"


def test_tp2_is_refused_for_9_heads(model_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--tensor-parallel-size 2 must divide the attention "
                                         r"heads \(9\) and the KV heads \(3\)"):
        LLM(model=str(model_path), tensor_parallel_size=2, **ENGINE)


@pytest.fixture
def two_nodes(small_model: Path, tmp_path: Path) -> Iterator[tuple]:
    port = free_port()
    common = ["--model", str(small_model), "-tp", "2", "--nnodes", "2", "--master-addr",
              "127.0.0.1", "--master-port", str(port), "--max-num-seqs", "8",
              "--kv-cache-memory", str(32 << 20)]
    log = tmp_path / "node1.log"
    node1 = spawn([*CLI, "serve", *common, "--node-rank", "1", "--headless"], log)
    try:
        node0 = start("rust", tmp_path, *common, "--max-model-len", "256")
    except RuntimeError:
        node1.kill()
        raise
    yield node0, node1, log
    if node0.proc.poll() is None:
        stop(node0)
    if node1.poll() is None:
        node1.kill()


def test_two_nodes_over_loopback(two_nodes, small_reference) -> None:
    """The same greedy text as the one-process TP=1 engine (the small model's tokens are
    random byte pieces: equal text means equal tokens here)."""
    node0, node1, log = two_nodes
    assert "mode rust" in node0.output()
    client = openai.OpenAI(base_url=node0.url + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    for prompt, (_, _, text) in zip(PROMPTS, small_reference):
        r = client.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS,
                                      temperature=0, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == MAX_TOKENS
        assert r.choices[0].text == text
    assert node1.poll() is None
    # Node 0 stopping releases node 1's rank, which exits 0.
    assert stop(node0) == 0
    assert node1.wait(timeout=30) == 0, log.read_text()


def test_headless_node_exits_when_node0_dies(two_nodes) -> None:
    node0, node1, log = two_nodes
    tree = process_tree(node0.proc.pid)
    for pid in tree:  # kill -9 of node 0, workers and all
        try:
            __import__("os").kill(pid, 9)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 60
    while node1.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert node1.poll() == 1, log.read_text()
    assert not any(alive(p) for p in process_tree(node1.pid) if p != node1.pid)

"""Greedy parity of Qwen2, Qwen3 and Mistral-style checkpoints (tiny, random, fp32 on CPU):
LLM.generate equals transformers' generate token for token, 8 prompts x 64 tokens, under the
same schedulings tests/engine/test_greedy_parity.py runs for Llama (prefix-cache hits, no
prefix caching, chunked prefill on a small budget, no chunked prefill, forced preemption), then
each prompt with its first 48 reference tokens appended, to its last 16 (block-sized prefix-cache
hits of generated tokens).

The comparison is exact, as for Llama. What makes that a fair demand of random weights is
checked on the reference: at every step its top two logits are at least MIN_GAP apart, far
above the fp32 noise of another GEMM summation order (oneDNN's packed weights here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hybridllm import LLM, SamplingParams
from tests.engine.test_greedy_parity import CONFIGS, check_greedy
from tests.golden.kinds import PROMPTS, prompt_ids
from tests.models.checkpoints import ARCHS, EOS, make_checkpoint

MAX_TOKENS = 64
MIN_GAP = 1e-4

@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """These models are tiny: one thread runs them faster than a pool on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def hf_greedy(model, label: str) -> list[list[int]]:
    """transformers' greedy tokens for PROMPTS, EOS masked as min_new_tokens does; asserts the
    reference has no near-tie."""
    tokens = []
    for ids in map(prompt_ids, PROMPTS):
        x = torch.tensor([ids])
        with torch.inference_mode():
            out = model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_TOKENS,
                min_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=EOS,
                output_scores=True, return_dict_in_generate=True,
            )
        top2 = torch.cat(out.scores).topk(2, dim=-1).values
        gap = float((top2[:, 0] - top2[:, 1]).min())
        assert gap >= MIN_GAP, f"{label}: a near-tie ({gap}) in the reference"
        tokens.append(out.sequences[0, x.shape[1]:].tolist())
    return tokens


@pytest.fixture(scope="module", params=ARCHS)
def checkpoint(request, tmp_path_factory, model_path: Path) -> tuple[Path, list[list[int]]]:
    """A tiny checkpoint of the architecture and transformers' greedy tokens on it."""
    folder = tmp_path_factory.mktemp(request.param)
    model = make_checkpoint(request.param, folder, model_path)
    return folder, hf_greedy(model, request.param)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_matches_transformers(name: str, checkpoint) -> None:
    folder, expected = checkpoint
    assert [len(t) for t in expected] == [MAX_TOKENS] * len(PROMPTS)
    llm = LLM(model=str(folder), **CONFIGS[name])
    cfg, max_len = llm.engine.config.model, llm.engine.config.max_model_len
    windows = [cfg.layer_window(i) or max_len for i in range(cfg.num_hidden_layers)]
    if name == "default" and min(windows) < max_len:
        # The windowed layers' KV in their own pool, blocks out of the window let go.
        assert llm.engine.kv.window_pool is not None
    outputs = check_greedy(llm, name, expected, MAX_TOKENS)
    # Those prompts are shorter than a block, so the hits above are none. Prompt + the first
    # 48 generated tokens (51 to 58 tokens) must go on as the reference does; with prefix
    # caching on, from the blocks the generation filled.
    cut = MAX_TOKENS - 16
    longer = [list(o.prompt_token_ids) + e[:cut] for o, e in zip(outputs, expected)]
    rest = SamplingParams(temperature=0, max_tokens=16, min_tokens=16)
    resumed = llm.generate(longer, rest)
    assert [o.outputs[0].token_ids for o in resumed] == [e[cut:] for e in expected]
    if name == "default":
        hits = [o.num_cached_tokens for o in resumed]
        assert hits == [(len(o.prompt_token_ids) - 1) // 16 * 16 for o in resumed]
        assert min(hits) > 0


def test_qwen3_with_attention_bias(tmp_path: Path, model_path: Path) -> None:
    """attention_bias (no released Qwen3 sets it): biases on q / k / v and on o_proj."""
    model = make_checkpoint("qwen3", tmp_path, model_path, attention_bias=True)
    assert model.model.layers[0].self_attn.o_proj.bias is not None
    expected = hf_greedy(model, "qwen3 attention_bias")
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS)
    outputs = LLM(model=str(tmp_path)).generate(PROMPTS, params)
    assert [o.outputs[0].token_ids for o in outputs] == expected


@pytest.mark.parametrize("name", ["default", "forced_preemption"])
def test_speculation_over_window_blocks(name: str, checkpoint) -> None:
    """N-gram speculation on the architectures, windowed ones included (their KV in the
    window pool): greedy output still transformers'; a verify step's rejected drafts give
    back their blocks (every block of both pools free at the end)."""
    folder, expected = checkpoint
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
            "prompt_lookup_min": 1}
    llm = LLM(model=str(folder), speculative_config=spec, **CONFIGS[name])
    kv = llm.engine.kv
    check_greedy(llm, name, expected, MAX_TOKENS)
    # Random weights seldom repeat themselves: prompts that repeat a phrase make drafts (and
    # rejected ones across block boundaries); the reference is the same model unspeculated.
    loops = [([(7 * i + j) % 50 + 3 for j in range(10)] * 5)[:44 + i % 4] for i in range(6)]
    params = SamplingParams(temperature=0, max_tokens=40, min_tokens=40)
    plain = LLM(model=str(folder), **CONFIGS[name]).generate(loops, params)
    spec_out = llm.generate(loops, params)
    assert [o.outputs[0].token_ids for o in spec_out] == [
        o.outputs[0].token_ids for o in plain]
    # Drafts were verified (random weights accept few: acceptance is
    # tests/engine/test_spec_decode.py's, on the real model; trimming window blocks is
    # tests/core/test_window_pool.py's).
    assert llm.engine.stats.spec_decode_num_draft_tokens > 0
    assert kv.num_free_blocks == kv.num_blocks
    if name == "default" and folder.name.startswith(("mistral-window", "gemma3")):
        assert kv.window_pool is not None
    if kv.window_pool is not None:
        assert len(kv.free_window_blocks) == kv.window_pool.num_blocks

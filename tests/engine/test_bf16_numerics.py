"""bf16 on CPU (the bf16 panel linears, the bf16 paged-decode kernel) against the fp32 engine.

bf16 rounds every activation to 8 significant bits, so its choice may differ from fp32's
where fp32's two best tokens are close; nowhere else:
- prefill (teacher-forced: prompt logprobs over prompt + transformers' greedy tokens, the
  `greedy` golden reference): wherever fp32's best token leads the next one by more than
  MARGIN nats, bf16's best token is the same;
- decode (bf16's own greedy run): every token bf16 generates is within MARGIN nats of fp32's
  best at that place (fp32 teacher-forced on bf16's tokens).
"""

from __future__ import annotations

import pytest
import torch

from hybridllm import LLM, SamplingParams
from hybridllm.models import cpu_linear
from tests import golden
from tests.golden.kinds import GREEDY_MAX_TOKENS, PROMPTS, prompt_ids

MARGIN = 1.0  # nats

pytestmark = pytest.mark.skipif(
    not cpu_linear.available(torch.bfloat16), reason="no bf16 oneDNN on this CPU"
)


def _ranked(entry: dict, eos: frozenset[int]) -> list[tuple[int, float]]:
    """(token, logprob) by rank from one position's prompt logprobs, end-of-sequence tokens
    left out (both greedy runs mask them, as min_tokens does)."""
    ranked = sorted(entry.items(), key=lambda kv: kv[1].rank)
    return [(t, lp.logprob) for t, lp in ranked if t not in eos]


def test_bf16_agrees_with_fp32_outside_near_ties(model_path) -> None:
    expected = golden.load("greedy")["tokens"]
    fp32 = LLM(model=str(model_path), enable_prefix_caching=False)
    bf16 = LLM(model=str(model_path), dtype="bfloat16", enable_prefix_caching=False)
    eos = frozenset(fp32.engine.config.model.eos_token_ids)
    # The two best that are not end-of-sequence (the scored token itself always comes too).
    forced = SamplingParams(max_tokens=1, prompt_logprobs=len(eos) + 2, temperature=0)
    prompts = [prompt_ids(p) for p in PROMPTS]
    n = GREEDY_MAX_TOKENS

    def score(llm: LLM, seqs: list[list[int]]) -> list:
        return llm.generate([{"prompt_token_ids": s} for s in seqs], forced, use_tqdm=False)

    # Prefill, on the golden path.
    teacher = [p + g for p, g in zip(prompts, expected)]
    clear = 0
    for p, g, r, o in zip(prompts, expected, score(fp32, teacher), score(bf16, teacher)):
        for j, token in enumerate(g):
            ref = _ranked(r.prompt_logprobs[len(p) + j], eos)
            assert ref[0][0] == token  # the fp32 engine is transformers' greedy
            if ref[0][1] - ref[1][1] > MARGIN:
                clear += 1
                assert _ranked(o.prompt_logprobs[len(p) + j], eos)[0][0] == token, (p, j)
    # The check has teeth: 135 of the 256 positions are clear of the margin on a Zen 4.
    assert clear >= 110, clear

    # Decode, on bf16's own path.
    greedy = SamplingParams(temperature=0, max_tokens=n, min_tokens=n)
    runs = bf16.generate([{"prompt_token_ids": p} for p in prompts], greedy, use_tqdm=False)
    paths = [p + list(run.outputs[0].token_ids) for p, run in zip(prompts, runs)]
    assert [len(s) - len(p) for s, p in zip(paths, prompts)] == [n] * len(prompts)
    for p, s, r in zip(prompts, paths, score(fp32, paths)):
        for j in range(len(p), len(s)):
            best = _ranked(r.prompt_logprobs[j], eos)[0][1]
            assert r.prompt_logprobs[j][s[j]].logprob >= best - MARGIN, (p, j - len(p))

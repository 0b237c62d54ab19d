"""N-gram speculative decoding (issue #31): the proposer's drafts, the verification's output
distribution, and greedy output token-identical with speculation off and on under every kind
of scheduling (prefix-cache hits, chunked prefill, preemption, n > 1)."""

from __future__ import annotations

import math

import pytest
import torch

from hybridllm import LLM, SamplingParams
from hybridllm.bench.spec import PARAGRAPHS, copy_prompt
from hybridllm.sampling.sampler import Sampler
from hybridllm.sequence import Request, Sequence, make_generator
from hybridllm.spec_decode.ngram_proposer import NgramProposer
from hybridllm.spec_decode.verify import draft_rows, emitted_rows
from tests.engine.test_greedy_parity import CONFIGS, check_greedy
from tests.golden.kinds import GREEDY_MAX_TOKENS

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
        "prompt_lookup_min": 2}


# --- the proposer ---------------------------------------------------------------------------

@pytest.mark.parametrize("tokens, k, lo, hi, drafts", [
    # The last 2 tokens (5, 6) occurred at 1..2: what followed them.
    ([4, 5, 6, 7, 8, 9, 5, 6], 3, 2, 2, [7, 8, 9]),
    # k caps the draft; the most recent of two occurrences wins.
    ([5, 6, 1, 2, 5, 6, 3, 4, 5, 6], 2, 2, 2, [3, 4]),
    # The longest suffix match wins over a more recent shorter one: (2, 5, 6) at 1..3.
    ([1, 2, 5, 6, 7, 0, 5, 6, 9, 2, 5, 6], 2, 2, 3, [7, 0]),
    # Near the end: only the tokens there are.
    ([3, 1, 2, 3, 1, 2], 5, 2, 3, [3, 1, 2]),
    # A run of one token: overlapping occurrences.
    ([7, 7, 7, 7], 3, 2, 3, [7]),
    # No earlier occurrence of a long enough suffix.
    ([1, 2, 3, 4, 5, 6], 3, 1, 3, []),
    ([1, 2, 9, 3, 2], 3, 2, 2, []),  # the last token recurs, the 2-gram does not
    ([5], 3, 1, 1, []),
    ([5, 5], 3, 2, 2, []),  # too short for a 2-gram and an earlier occurrence
])
def test_proposer_drafts(tokens: list[int], k: int, lo: int, hi: int,
                         drafts: list[int]) -> None:
    assert NgramProposer(k, lo, hi).propose(tokens) == drafts


def test_proposer_k_argument() -> None:
    p = NgramProposer(4, 1, 2)
    assert p.propose([1, 2, 3, 4, 1], k=2) == [2, 3]
    assert p.propose([1, 2, 3, 4, 1], k=0) == []


# --- verification ---------------------------------------------------------------------------

def _seq(params: SamplingParams, prompt: list[int], index: int = 0) -> Sequence:
    request = Request("r", None, prompt, params, max_tokens=64)
    seq = Sequence(request, index, make_generator(params.seed, index))
    request.seqs.append(seq)
    return seq


def test_draft_rows_see_the_drafts_before_them() -> None:
    seq = _seq(SamplingParams(), [1, 2, 3])
    seq.token_ids.append(4)
    seq.spec_token_ids = [5, 6]
    rows = draft_rows([seq])
    assert rows[0] is seq
    assert [r.token_ids for r in rows] == [[1, 2, 3, 4], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]]
    assert [r.num_output_tokens for r in rows] == [1, 2, 3]
    assert all(r.origin is seq and r.generator is seq.generator for r in rows)
    assert seq.token_ids == [1, 2, 3, 4]  # the sequence itself is untouched
    # Greedy rule: drafts accepted while equal to the row's token, then the bonus token.
    assert emitted_rows([seq], [5, 6, 9]) == [(0, 3)]
    assert emitted_rows([seq], [5, 8, 9]) == [(0, 2)]
    assert emitted_rows([seq], [7, 6, 9]) == [(0, 1)]


def _chi_square_p(observed: list[int], expected: list[float]) -> float:
    """The p-value of Pearson's chi-square test (scipy's when installed)."""
    total = sum(expected)
    expected = [e * sum(observed) / total for e in expected]  # float32 probabilities' slack
    try:
        from scipy.stats import chisquare

        return float(chisquare(observed, expected).pvalue)
    except ImportError:  # Wilson-Hilferty normal approximation of the chi-square tail
        stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
        dof = len(observed) - 1
        z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
        return 0.5 * math.erfc(z / math.sqrt(2))


def _target(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    x = logits.double() / temperature
    kth = x.topk(top_k).values[-1]
    return x.masked_fill(x < kth, float("-inf")).softmax(-1)


@pytest.mark.parametrize("draft", [0, 3])  # the most likely token, and a less likely one
def test_verification_samples_the_target_distribution(draft: int) -> None:
    """Over many seeded draws on forced logits, the first emitted token (accepted draft or
    resampled) follows the target distribution after temperature and top-k; the draft is
    accepted with probability p(draft); after an accepted draft, the bonus token follows the
    next position's distribution. A verification that ignored the target would fail."""
    vocab, draws = 6, 6000
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -1.0],
                           [0.0, 1.0, 2.0, 0.5, -0.5, 1.5]])
    params = SamplingParams(temperature=0.8, top_k=5, seed=1234)
    p0, p1 = _target(logits[0], 0.8, 5), _target(logits[1], 0.8, 5)
    sampler = Sampler(vocab, eos_token_ids=(vocab - 1,), seed=0)
    seq = _seq(params, [1, 2, 3])
    seq.spec_token_ids = [draft]
    first = [0] * vocab
    bonus = [0] * vocab
    accepted = 0
    rows = draft_rows([seq])
    for _ in range(draws):
        out = sampler(logits.clone(), rows)
        (start, n), = emitted_rows([seq], out.token_ids)
        emitted = out.token_ids[start:start + n]  # what the engine appends
        first[emitted[0]] += 1
        if n == 2:
            assert emitted[0] == draft
            accepted += 1
            bonus[emitted[1]] += 1
    assert first[5] == 0  # outside top-k: never emitted
    kept = [i for i in range(vocab) if p0[i] > 0]
    assert _chi_square_p([first[i] for i in kept], [draws * float(p0[i]) for i in kept]) > 1e-3
    rate = accepted / draws
    assert abs(rate - float(p0[draft])) < 4 * math.sqrt(p0[draft] * (1 - p0[draft]) / draws)
    kept = [i for i in range(vocab) if p1[i] > 0]
    assert _chi_square_p([bonus[i] for i in kept],
                         [accepted * float(p1[i]) for i in kept]) > 1e-3


def test_penalties_and_min_tokens_at_a_draft_row_see_the_drafts_before_it() -> None:
    """Row j is processed as if drafts[:j] were output: a frequency penalty on the first
    draft's token turns row 1's argmax away from a repeat of it (without the drafts in view
    the repeat would be accepted), and min_tokens stops banning the EOS once the drafts
    before a row reach it."""
    vocab, eos = 8, 7
    logits = torch.zeros(3, vocab)
    logits[0, 4] = 10.0
    logits[1, 4], logits[1, 5] = 5.0, 4.0  # 4 wins unless penalized for the draft before
    logits[2, eos] = 10.0
    seq = _seq(SamplingParams(temperature=0, frequency_penalty=2.0), [1, 2, 3])
    seq.spec_token_ids = [4, 4]
    out = Sampler(vocab, (eos,), seed=0)(logits.clone(), draft_rows([seq]))
    assert out.token_ids[:2] == [4, 5]
    assert emitted_rows([seq], out.token_ids) == [(0, 2)]
    # min_tokens 2: rows 0 and 1 (0 and 1 tokens of output before them) may not end; row 2
    # (two drafts before it) may.
    logits[:, eos] = 10.0
    seq = _seq(SamplingParams(temperature=0, min_tokens=2), [1, 2, 3])
    seq.spec_token_ids = [4, 5]
    out = Sampler(vocab, (eos,), seed=0)(logits.clone(), draft_rows([seq]))
    assert out.token_ids == [4, 4, eos]


def test_verification_is_deterministic_per_seed() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    runs = []
    for _ in range(2):
        seq = _seq(SamplingParams(temperature=1.0, seed=7), [1, 2, 3])
        seq.spec_token_ids = [4, 5]
        out = Sampler(50, (0,), seed=0)(logits.clone(), draft_rows([seq]))
        runs.append(out.token_ids)
    assert runs[0] == runs[1]


# --- the engine -----------------------------------------------------------------------------

COPY_PROMPTS = [copy_prompt(p) for p in PARAGRAPHS[:2]]
COPY_MAX_TOKENS = 40
COPY_PARAMS = SamplingParams(temperature=0, max_tokens=COPY_MAX_TOKENS)


@pytest.fixture(scope="module")
def expected(model_path) -> list[list[int]]:
    from tests import golden

    return golden.load("greedy")["tokens"]


@pytest.fixture(scope="module")
def copy_expected(model_path) -> list[list[int]]:
    """The copy prompts' greedy tokens without speculation."""
    outs = LLM(model=str(model_path)).generate(COPY_PROMPTS, COPY_PARAMS, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.mark.parametrize("name", ["default", "chunked_small_budget", "forced_preemption"])
def test_greedy_identical_with_speculation(name: str, expected: list[list[int]],
                                           copy_expected: list[list[int]], model_path) -> None:
    llm = LLM(model=str(model_path), speculative_config=SPEC, **CONFIGS[name])
    check_greedy(llm, name, expected, GREEDY_MAX_TOKENS)
    stats = llm.engine.stats
    before = stats.spec_decode_num_accepted_tokens
    outs = llm.generate(COPY_PROMPTS, COPY_PARAMS, use_tqdm=False)
    # A smaller max_model_len (forced_preemption's) leaves some prompts less room.
    room = [llm.engine.max_model_len - len(o.prompt_token_ids) for o in outs]
    assert [o.outputs[0].token_ids for o in outs] == [
        ref[:r] for ref, r in zip(copy_expected, room)]
    if name == "forced_preemption":
        assert llm.engine.scheduler.num_preemptions > 0
    # Speculation really happened on the copy set: drafts were verified and accepted.
    assert stats.spec_decode_num_accepted_tokens - before > COPY_MAX_TOKENS // 2
    assert stats.spec_decode_num_draft_tokens >= stats.spec_decode_num_accepted_tokens
    assert sum(stats.spec_decode_num_accepted_tokens_per_pos) == (
        stats.spec_decode_num_accepted_tokens)
    if name == "default":  # the copy prompts again: prefix-cache hits, same tokens
        again = llm.generate(COPY_PROMPTS, COPY_PARAMS, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in again] == copy_expected
        assert all(o.num_cached_tokens > 0 for o in again)
    kv = llm.engine.kv
    assert kv.num_free_blocks == kv.num_blocks  # every block back, none leaked by a rollback


def test_n_greater_than_one(copy_expected: list[list[int]], model_path) -> None:
    """n = 2: each sequence speculates on its own; greedy samples equal the reference, and
    seeded random samples are reproducible with speculation on."""
    llm = LLM(model=str(model_path), speculative_config=SPEC)
    outs = llm.generate(COPY_PROMPTS[:1], SamplingParams(n=2, temperature=0,
                                                         max_tokens=COPY_MAX_TOKENS),
                        use_tqdm=False)
    assert [c.token_ids for c in outs[0].outputs] == [copy_expected[0]] * 2
    params = SamplingParams(n=2, temperature=0.7, seed=11, max_tokens=24, logprobs=1)
    runs = [llm.generate(COPY_PROMPTS[:1], params, use_tqdm=False)[0] for _ in range(2)]
    assert [c.token_ids for c in runs[0].outputs] == [c.token_ids for c in runs[1].outputs]
    for c in runs[0].outputs:  # a logprob entry per emitted token, the token's among them
        assert len(c.logprobs) == len(c.token_ids)
        assert all(t in entry for t, entry in zip(c.token_ids, c.logprobs))
    assert llm.engine.stats.spec_decode_num_accepted_tokens > 0


def test_stops_inside_an_accepted_run(copy_expected: list[list[int]], model_path) -> None:
    """A stop token id and max_tokens falling inside a verify step's accepted tokens cut the
    rest: outputs equal the reference's prefix, as without speculation."""
    llm = LLM(model=str(model_path), speculative_config=SPEC)
    ref = copy_expected[0]
    stop_at = 20
    outs = llm.generate(COPY_PROMPTS[:1], SamplingParams(
        temperature=0, max_tokens=COPY_MAX_TOKENS, stop_token_ids=[ref[stop_at]]),
        use_tqdm=False)
    first = ref.index(ref[stop_at])
    assert outs[0].outputs[0].token_ids == ref[:first + 1]
    assert outs[0].outputs[0].finish_reason == "stop"
    for max_tokens in (13, 17):
        outs = llm.generate(COPY_PROMPTS[:1], SamplingParams(temperature=0, max_tokens=max_tokens),
                            use_tqdm=False)
        assert outs[0].outputs[0].token_ids == ref[:max_tokens]
        assert outs[0].outputs[0].finish_reason == "length"


def test_penalties_see_the_accepted_tokens(model_path) -> None:
    """Greedy with penalties, logit_bias and min_tokens through the engine: the tokens equal
    those without speculation, and drafts were accepted."""
    # Output-only penalties (a repetition penalty would also punish copying the prompt),
    # strong enough to change some tokens once the output repeats itself.
    params = SamplingParams(temperature=0, max_tokens=40, frequency_penalty=1.0,
                            presence_penalty=0.5, min_tokens=30, logit_bias={13: -1.0})
    prompts = COPY_PROMPTS[:1]
    off = LLM(model=str(model_path)).generate(prompts, params, use_tqdm=False)
    llm = LLM(model=str(model_path), speculative_config=SPEC)
    on = llm.generate(prompts, params, use_tqdm=False)
    assert on[0].outputs[0].token_ids == off[0].outputs[0].token_ids
    assert llm.engine.stats.spec_decode_num_accepted_tokens > 0


def test_structured_outputs_do_not_speculate(model_path) -> None:
    from hybridllm.sampling_params import StructuredOutputsParams

    llm = LLM(model=str(model_path), speculative_config=SPEC)
    choices = ["yes yes yes yes yes", "no no no no no no no"]
    params = SamplingParams(temperature=0, max_tokens=24,
                            structured_outputs=StructuredOutputsParams(choice=choices))
    out = llm.generate(COPY_PROMPTS[:1], params, use_tqdm=False)[0].outputs[0]
    assert out.text in choices
    assert llm.engine.stats.spec_decode_num_drafts == 0


def test_beams_beside_speculating_sequences(copy_expected: list[list[int]], model_path) -> None:
    """A beam group never speculates, and its candidates are read from its own row when a
    speculating sequence shares the step (its rows shift the sampled rows)."""
    from hybridllm.sampling_params import BeamSearchParams

    llm = LLM(model=str(model_path), speculative_config=SPEC)
    engine = llm.engine
    beam = BeamSearchParams(beam_width=2, max_tokens=12)

    def run(with_copy: bool) -> tuple[list[list[int]], list[int] | None]:
        rid = f"beam-{with_copy}"
        if with_copy:  # first: its draft rows come before the beams' rows
            engine.add_request("copy", COPY_PROMPTS[0], COPY_PARAMS)
        engine.add_request(rid, "The capital of France is", beam)
        done = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    done[out.request_id] = out
        copy = done["copy"].outputs[0].token_ids if with_copy else None
        return [c.token_ids for c in done[rid].outputs], copy

    alone, _ = run(False)
    before = engine.stats.spec_decode_num_accepted_tokens
    together, copy = run(True)
    assert together == alone
    assert copy == copy_expected[0]
    assert engine.stats.spec_decode_num_accepted_tokens > before

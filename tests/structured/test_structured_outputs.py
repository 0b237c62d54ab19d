"""Structured outputs offline (LLM.generate / LLM.chat with the bundled model): each kind of
constraint holds on what comes out, and each interaction the engine has (n and seed, stop
strings, min_tokens, ignore_eos, max_tokens, abort, dead ends, beam search) ends as
docs/structured_outputs.md says."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch

from hybridllm import LLM, BeamSearchParams, SamplingParams, StructuredOutputsParams
from hybridllm.proto import engine_pb2 as pb
from hybridllm.sequence import SequenceStatus
from hybridllm.server.proto_convert import request_params_from_proto, sampling_params_to_proto
from hybridllm.structured.grammar import GrammarCompiler
from hybridllm.structured.masks import GrammarMasks

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
CODE = r"[A-Z]{2}-[0-9]{3}"
CHOICES = ["positive", "negative", "neutral"]


def chat(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


@pytest.fixture(scope="module")
def llm(model_path) -> LLM:
    return LLM(model=str(model_path), seed=0)


def constrained(so: StructuredOutputsParams, **kw) -> SamplingParams:
    return SamplingParams(**{"temperature": 0, "max_tokens": 40, **kw}, structured_outputs=so)


# -- parameters ----------------------------------------------------------------------------


def test_exactly_one_constraint_is_required() -> None:
    # The API core's rules and messages, as for a served request.
    with pytest.raises(ValueError, match=r"^structured_outputs must set exactly one of json, "
                       r"regex, choice, grammar or json_object, got json, regex\.$"):
        StructuredOutputsParams(json=PERSON, regex=CODE)
    with pytest.raises(ValueError, match="got none"):
        StructuredOutputsParams()
    with pytest.raises(ValueError, match=r'^structured_outputs: invalid type: string "yes", '
                       r"expected a sequence\.$"):
        StructuredOutputsParams(choice="yes")
    with pytest.raises(ValueError, match=r"^structured_outputs\.choice must be a non-empty "
                       r"list of strings\.$"):
        StructuredOutputsParams(choice=[])
    with pytest.raises(ValueError, match="must be a StructuredOutputsParams"):
        SamplingParams(structured_outputs={"regex": CODE})  # type: ignore[arg-type]


def test_beam_search_with_a_grammar_is_refused_naming_both() -> None:
    so = StructuredOutputsParams(regex=CODE)
    with pytest.raises(ValueError, match=r"beam search cannot be combined with structured "
                       r"outputs \(structured_outputs\)"):
        BeamSearchParams(beam_width=2, max_tokens=8, structured_outputs=so)
    # Over gRPC: a beam_search request whose sampling_params carry a grammar.
    req = pb.GenerateRequest(
        request_id="b", prompt_token_ids=[1, 2],
        sampling_params=sampling_params_to_proto(constrained(so)),
        beam_search=pb.BeamSearchParams(beam_width=2, max_tokens=8),
    )
    with pytest.raises(ValueError, match="beam search cannot be combined with structured"):
        request_params_from_proto(req)


def test_the_grammar_travels_as_llguidance_grammar_over_grpc() -> None:
    so = StructuredOutputsParams(json=PERSON)
    msg = sampling_params_to_proto(constrained(so))
    assert json.loads(msg.grammar) == json.loads(so.llguidance_grammar())
    # The core writes the JSON options out (vLLM's default: flexible whitespace).
    assert json.loads(msg.grammar)["grammars"][0]["json_schema"] == {
        **PERSON, "x-guidance": {"whitespace_flexible": True}}
    back = request_params_from_proto(pb.GenerateRequest(sampling_params=msg))
    assert isinstance(back, SamplingParams)
    assert back.grammar == msg.grammar
    assert not sampling_params_to_proto(SamplingParams()).grammar


def test_bitmask_masks_only_its_rows(tokenizer) -> None:
    vocab = 49152
    compiler = GrammarCompiler(tokenizer, vocab, (2,))
    masks = GrammarMasks(vocab, pin_memory=False)

    class Row:  # what the fill reads of a sequence
        def __init__(self, matcher) -> None:
            self.matcher, self.num_output_tokens = matcher, 0
            self.params, self.stop_ids = SamplingParams(), frozenset()

    (matcher,) = compiler.matchers(StructuredOutputsParams(regex="[BD]+").llguidance_grammar(), 1)
    rows = [Row(None), Row(matcher), Row(None)]
    bitmask = masks.start(rows).wait()  # type: ignore[arg-type]
    allowed = bitmask.allowed_ids(0)
    b, d = tokenizer.token_to_id("B"), tokenizer.token_to_id("D")
    assert bitmask.rows == [1] and {b, d} <= set(allowed)
    assert all(re.fullmatch("[BD]+", tokenizer.decode([t])) for t in allowed)
    logits = torch.randn(3, vocab)
    before = logits.clone()
    bitmask.apply(logits)
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    assert torch.isfinite(logits[1]).nonzero()[:, 0].tolist() == allowed
    assert torch.equal(logits[1, allowed], before[1, allowed])
    assert masks.start(rows[::2]) is None  # no constrained row: nothing to fill


# -- each constraint holds -----------------------------------------------------------------


def test_json_schema_output_validates(llm: LLM) -> None:
    so = StructuredOutputsParams(json=PERSON)
    out = llm.chat(chat("Describe a person living in Oslo as JSON."),
                   constrained(so, max_tokens=60), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop"
    jsonschema.validate(json.loads(out.text), PERSON)
    # The EOS that ended it is the last token and not in the text.
    assert out.token_ids[-1] in llm.engine.config.model.eos_token_ids


def test_regex_choice_and_json_object(llm: LLM) -> None:
    params = [
        constrained(StructuredOutputsParams(regex=CODE)),
        constrained(StructuredOutputsParams(choice=CHOICES)),
        constrained(StructuredOutputsParams(json_object=True), max_tokens=60),
    ]
    prompts = [chat("Give me a product code."), chat("Is 'I love it' positive or negative?"),
               chat("Return a JSON object with the key \"ok\" set to true.")]
    code, choice, obj = (o.outputs[0] for o in llm.chat(prompts, params, use_tqdm=False))
    assert code.finish_reason == "stop" and re.fullmatch(CODE, code.text), code.text
    assert choice.finish_reason == "stop" and choice.text in CHOICES
    assert obj.finish_reason == "stop"
    assert json.loads(obj.text) == {"ok": True}


def test_lark_grammar(llm: LLM) -> None:
    grammar = 'start: "The answer is " NUM "."\nNUM: /[0-9]{1,3}/'
    out = llm.generate("What is 6 times 7?", constrained(StructuredOutputsParams(
        grammar=grammar)), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop"
    assert re.fullmatch(r"The answer is [0-9]{1,3}\.", out.text)


def test_max_tokens_ends_with_length(llm: LLM) -> None:
    out = llm.generate("A person:", constrained(StructuredOutputsParams(json=PERSON),
                       max_tokens=4), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 4
    assert out.text.startswith("{")


# -- interactions --------------------------------------------------------------------------


def test_n_with_seed_each_sample_constrained_and_reproducible(llm: LLM) -> None:
    params = SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=20,
                            structured_outputs=StructuredOutputsParams(regex=CODE))
    first = llm.generate("Product code:", params, use_tqdm=False)[0].outputs
    again = llm.generate("Product code:", params, use_tqdm=False)[0].outputs
    assert [o.text for o in first] == [o.text for o in again]
    assert len({o.text for o in first}) > 1  # the samples are really drawn
    for o in first:
        assert o.finish_reason == "stop" and re.fullmatch(CODE, o.text), o.text


def test_stop_string_ends_a_constrained_output(llm: LLM) -> None:
    params = constrained(StructuredOutputsParams(regex=CODE), stop=["-"])
    out = llm.generate("Product code:", params, use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == "-"
    assert re.fullmatch("[A-Z]{2}", out.text), out.text


def test_min_tokens_holds_until_the_grammar_is_complete(llm: LLM) -> None:
    # An open-ended grammar: EOS is banned for min_tokens tokens.
    free = constrained(StructuredOutputsParams(regex="[a-z ]+"), min_tokens=6, max_tokens=12)
    out = llm.generate("Say hi:", free, use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) >= 6 and re.fullmatch("[a-z ]+", out.text), out.text
    # A complete grammar allows nothing but EOS: it ends the output before min_tokens.
    done = constrained(StructuredOutputsParams(choice=["yes", "no"]), min_tokens=8)
    out = llm.generate("Yes or no?", done, use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.text in ("yes", "no")
    assert len(out.token_ids) < 8


def test_ignore_eos_is_ignored_once_the_grammar_is_complete(llm: LLM) -> None:
    params = constrained(StructuredOutputsParams(choice=CHOICES), ignore_eos=True)
    out = llm.chat(chat("Is 'I love it' positive or negative?"), params,
                   use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.text in CHOICES
    assert len(out.token_ids) < 40


def test_bad_grammar_refuses_that_request_alone(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("good", "Product code:", constrained(StructuredOutputsParams(regex=CODE)))
    bad = StructuredOutputsParams(json={"type": "object", "properties": {"a": {"type": "strin"}}})
    with pytest.raises(ValueError, match="the grammar cannot be enforced: .*strin"):
        engine.add_request("bad", "Product code:", constrained(bad))
    with pytest.raises(ValueError, match="unclosed group"):
        engine.add_request("bad2", "x", constrained(StructuredOutputsParams(regex="(ab")))
    assert "bad" not in engine.requests and "bad2" not in engine.requests
    outs = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            outs[o.request_id] = o
    good = outs["good"].outputs[0]
    assert good.finish_reason == "stop" and re.fullmatch(CODE, good.text)


def test_a_refused_grammar_in_a_batch_leaves_nothing_queued(llm: LLM) -> None:
    """LLM.generate refuses the call, and the prompts added before the bad one are dropped."""
    bad = StructuredOutputsParams(regex="(ab")
    with pytest.raises(ValueError, match="unclosed group"):
        llm.generate(["a", "b", "c"], [constrained(StructuredOutputsParams(regex=CODE))] * 2
                     + [constrained(bad)], use_tqdm=False)
    assert not llm.engine.has_unfinished_requests() and not llm.engine.requests


def test_dead_end_ends_that_sequence_alone_with_an_error(llm: LLM) -> None:
    engine = llm.engine
    so = StructuredOutputsParams(regex=CODE)
    engine.add_request("doomed", "Code:", constrained(so))
    engine.add_request("fine", "Code:", constrained(so))
    engine.step()
    doomed = engine.requests["doomed"].seqs[0]
    doomed.matcher.consume_token(0)  # a token the grammar refuses: the matcher is in error
    outs = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            outs[o.request_id] = o
    d = outs["doomed"].outputs[0]
    assert d.finish_reason == "error"
    assert str(d.stop_reason).startswith("structured_outputs: the output left the grammar")
    assert "doesn't satisfy the grammar" in str(d.stop_reason)
    assert "<state>" not in str(d.stop_reason)
    f = outs["fine"].outputs[0]
    assert f.finish_reason == "stop" and re.fullmatch(CODE, f.text)


def test_abort_frees_the_matcher(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("gone", "Person:", constrained(StructuredOutputsParams(json=PERSON)))
    engine.step()
    seq = engine.requests["gone"].seqs[0]
    assert seq.matcher is not None
    engine.abort_request("gone")
    outs = engine.step()
    assert seq.status is SequenceStatus.FINISHED and seq.matcher is None
    assert [o.outputs[0].finish_reason for o in outs if o.request_id == "gone"] == ["abort"]
    assert not engine.has_unfinished_requests()


def test_mock_engine_accepts_grammars(model_path) -> None:
    mock = LLM(model=str(model_path), mock_engine=True)
    params = [constrained(StructuredOutputsParams(choice=CHOICES)),
              constrained(StructuredOutputsParams(json=PERSON), max_tokens=200)]
    choice, person = (o.outputs[0] for o in mock.generate(["a", "b"], params, use_tqdm=False))
    assert choice.finish_reason == "stop" and choice.text in CHOICES
    assert person.finish_reason in ("stop", "length")
    if person.finish_reason == "stop":
        jsonschema.validate(json.loads(person.text), PERSON)

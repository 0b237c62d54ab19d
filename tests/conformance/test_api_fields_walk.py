"""docs/api_fields.md's honoured rows, walked (#33): every field the table calls honoured has a
probe here that sends it, merged into a small greedy request, and asserts exactly what vLLM
answers: against the same request without it (the baseline), against an independent reference
(transformers' forward pass with vLLM's penalty and beam-search rules, the tokenizer, another
endpoint given the same tokens), or, where vLLM gives the field no effect, that the answer is
the baseline's to the byte. Every request goes to every frontend, whose answers must be equal.
The probe tables' keys are the doc's honoured rows, so a new honoured row needs a probe.

Fields whose whole effect needs a server started otherwise name the test that starts one:
`priority` (tests/reliability/test_priority.py), `session_id` (tests/scaleout/
test_internal_lb.py), `include_reasoning` (tests/tools/test_reasoning.py); here each is shown
doing what it does on these servers."""

from __future__ import annotations

import base64
import copy
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np
import pytest

from hybridllm.models.resolve import DEFAULT_EMBEDDING_MODEL, resolve_model
from hybridllm.text.tokenizer import load_tokenizer
from tests.conformance.conftest import (
    MAX_MODEL_LEN,
    MODEL,
    Server,
    assert_equal,
    assert_same,
    normalise,
    parse_named_sse,
    parse_sse,
    start_all,
)
from tests.conformance.test_api_fields_doc import BASES, _rows
from tests.conformance.test_embeddings import FLAGS as EMBED_FLAGS

EOS = 2  # <|im_end|>, SmolLM2's EOS
IM_START = 1  # <|im_start|>: a special token that is no EOS
COLON = 42  # ":"
HI = [{"role": "user", "content": "Hi"}]
CHAT = "ChatCompletionRequest"
COMPLETIONS = "CompletionRequest"
RESPONSES = "ResponsesRequest"
EMBEDDINGS = "EmbeddingCompletionRequest"
# Small greedy requests: 4 tokens each.
BASE: dict[str, dict[str, Any]] = {
    CHAT: {"messages": HI, "max_tokens": 4, "temperature": 0},
    COMPLETIONS: {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0},
    RESPONSES: {"input": "Hi", "max_output_tokens": 4, "temperature": 0, "store": False},
    EMBEDDINGS: {"input": "Hello world"},
}
_CALL_IDS = re.compile(r"(fc|call)_[0-9a-f]{32}")  # the Responses API's call items


def masked(value: Any) -> Any:
    """conftest's normalise, and the Responses API's function-call ids masked too."""
    value = normalise(value)
    if isinstance(value, dict):
        return {k: masked(x) for k, x in value.items()}
    if isinstance(value, list):
        return [masked(x) for x in value]
    if isinstance(value, str) and _CALL_IDS.fullmatch(value):
        return "ID"
    return value


class Walk:
    """One endpoint seen by its probes: `ask` merges fields into the base request, sends it to
    every frontend at once, asserts the status and that all frontends answer alike, and gives
    the Rust frontend's answer (ids and timestamps masked); answers are memoised by request
    unless `fresh`. `walks` holds the other endpoints' walks (a probe may ask them too)."""

    def __init__(self, servers: dict[str, Server], cls: str, pool: ThreadPoolExecutor,
                 tol: float = 1e-4) -> None:
        self.servers, self.cls, self.pool, self.tol = servers, cls, pool, tol
        self.path = BASES[cls][0]
        self.base = BASE[cls]
        self.memo: dict[str, Any] = {}
        self.walks: dict[str, Walk] = {}
        self._baseline: Any = None
        self.tok = load_tokenizer(MODEL)[0]

    # -- requests ------------------------------------------------------------------------------

    def body(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {**self.base, **fields}

    def each(self, call: Callable[[str, Server], Any]) -> dict[str, Any]:
        """`call(mode, server)` for every frontend at once."""
        futures = {m: self.pool.submit(call, m, s) for m, s in self.servers.items()}
        return {m: f.result() for m, f in futures.items()}

    def ask(self, fields: dict[str, Any] | None = None, *, status: int = 200,
            stream: bool = False, fresh: bool = False, path: str | None = None,
            merge: bool = True) -> Any:
        """`fields` merged into the base request (as they are with merge false)."""
        if self._baseline is None and (fields or stream or path):
            self.baseline  # noqa: B018  (first: the prompt's blocks cached as for the rest)
        body = self.body(fields or {}) if merge else dict(fields or {})
        if stream:
            body["stream"] = True
        path = path or self.path
        key = json.dumps([path, body], sort_keys=True)
        if not fresh and key in self.memo:
            return self.memo[key]

        def call(mode: str, s: Server) -> Any:
            r = s.post(path, body)
            assert r.status_code == status, (mode, path, body, r.text[:2000])
            if stream and status == 200:
                events = (parse_named_sse(r.content) if path == "/v1/responses"
                          else parse_sse(r.content))
                return masked(events)
            return masked(json.loads(r.content))

        answers = self.each(call)
        assert_same(answers, self.tol)
        self.memo[key] = answers["rust"]
        return answers["rust"]

    def error(self, fields: dict[str, Any], status: int = 400) -> dict[str, Any]:
        return self.ask(fields, status=status)["error"]

    @property
    def baseline(self) -> Any:
        """The base request's answer, asked twice so that its prompt's full KV blocks are
        cached, as they are for every later request with the same prompt."""
        if self._baseline is None:
            self.ask(fresh=True)
            self._baseline = self.ask(fresh=True)
        return self._baseline

    # -- reading answers -----------------------------------------------------------------------

    def text(self, v: Any) -> str:
        if self.cls == CHAT:
            return v["choices"][0]["message"]["content"]
        if self.cls == COMPLETIONS:
            return v["choices"][0]["text"]
        (message,) = v["output"]
        assert message["type"] == "message", message
        (part,) = message["content"]
        return part["text"]

    def finish(self, v: Any) -> str:
        """finish_reason; a response's status read as one ("length": incomplete at
        max_output_tokens, "stop": completed)."""
        if self.cls != RESPONSES:
            return v["choices"][0]["finish_reason"]
        if v["status"] == "completed":
            assert v["incomplete_details"] is None, v
            return "stop"
        assert (v["status"], v["incomplete_details"]) == (
            "incomplete", {"reason": "max_output_tokens"}), v
        return "length"

    def stop_reason(self, v: Any) -> Any:
        return v["choices"][0]["stop_reason"]

    def out_tokens(self, v: Any) -> int:
        return v["usage"]["output_tokens" if self.cls == RESPONSES else "completion_tokens"]

    def in_tokens(self, v: Any) -> int:
        return v["usage"]["input_tokens" if self.cls == RESPONSES else "prompt_tokens"]

    @property
    def limit(self) -> str:
        return "max_output_tokens" if self.cls == RESPONSES else "max_tokens"

    def ids(self, fields: dict[str, Any] | None = None) -> tuple[list[int], list[list[int]]]:
        """The output's token ids and, per position, the top two alternatives' ids (chat and
        completions: through logprobs and return_tokens_as_token_ids)."""
        if self.cls == CHAT:
            v = self.ask({**(fields or {}), "logprobs": True, "top_logprobs": 2,
                          "return_tokens_as_token_ids": True})
            content = v["choices"][0]["logprobs"]["content"]
            return ([_id(t["token"]) for t in content],
                    [[_id(a["token"]) for a in t["top_logprobs"]] for t in content])
        assert self.cls == COMPLETIONS
        v = self.ask({**(fields or {}), "logprobs": 2, "return_tokens_as_token_ids": True})
        lp = v["choices"][0]["logprobs"]
        return ([_id(t) for t in lp["tokens"]],
                [[_id(k) for k, _ in sorted(top.items(), key=lambda kv: -kv[1])]
                 for top in lp["top_logprobs"]])

    @property
    def base_ids(self) -> list[int]:
        """The baseline's output ids. The Responses API renders input "Hi" as chat's one user
        message "Hi": the same prompt, so chat's greedy tokens (its text shows it)."""
        if self.cls == RESPONSES:
            ids = self.walks[CHAT].base_ids
            assert self.text(self.baseline) == self.tok.decode(ids)
            return ids
        ids = self.ids()[0]
        assert self.tok.decode(ids) == self.text(self.baseline)
        return ids

    def prompt_ids(self, fields: dict[str, Any] | None = None) -> list[int]:
        """What /tokenize makes of the base request's prompt with `fields` (chat: messages
        and template fields; completions: the prompt)."""
        body = self.body(fields or {})
        keep = ("messages", "prompt", "add_generation_prompt", "continue_final_message",
                "chat_template", "chat_template_kwargs", "documents", "tools",
                "add_special_tokens")
        if self.cls == RESPONSES:
            body = {"messages": [{"role": "user", "content": body["input"]}]}
        return self.ask({k: v for k, v in body.items() if k in keep}, path="/tokenize",
                        merge=False)["tokens"]

    def complete(self, prompt: list[int]) -> tuple[str, int]:
        """/v1/completions of token ids, greedy, as long as this walk's requests: its text and
        prompt tokens."""
        v = self.walks[COMPLETIONS].ask({"prompt": prompt, "max_tokens": self.base[self.limit]})
        return v["choices"][0]["text"], v["usage"]["prompt_tokens"]


def _id(name: str) -> int:
    assert name.startswith("token_id:"), name
    return int(name.removeprefix("token_id:"))


def same_but(v: Any, base: Any, **changed: Any) -> None:
    """`v` is `base` with only the top-level fields `changed` changed, to the byte."""
    assert_equal(v, {**base, **changed}, 0.0, "probe vs baseline")


# -- references: transformers' logits with vLLM's rules -------------------------------------------

@lru_cache(maxsize=4096)
def _logits(ids: tuple[int, ...]) -> Any:
    """transformers' next-token logits after `ids` (float64; callers must not change them)."""
    import torch

    from tests.golden.kinds import hf_model

    with torch.no_grad():
        return hf_model()(torch.tensor([ids])).logits[0, -1].double()


def penalty_decisions(prompt: list[int], out: list[int], repetition: float = 1.0,
                      frequency: float = 0.0, presence: float = 0.0) -> list[tuple[int, int]]:
    """Per output position, given the output before it: transformers' argmax under vLLM's
    penalties, and without them (one forward pass over the prompt and the output). vLLM's
    rules: repetition over the prompt's and the output's tokens (a positive logit divided by
    it, a negative one multiplied), then frequency and presence over the output's (minus
    count × frequency, minus presence)."""
    import torch

    from tests.golden.kinds import hf_model

    with torch.no_grad():
        rows = hf_model()(torch.tensor([prompt + out[:-1]])).logits[0, len(prompt) - 1:]
    decisions = []
    for k, row in enumerate(rows.double()):
        x, before = row.clone(), out[:k]
        if repetition != 1.0:
            seen = torch.tensor(sorted(set(prompt + before)))
            x[seen] = torch.where(x[seen] > 0, x[seen] / repetition, x[seen] * repetition)
        for t, count in Counter(before).items():
            x[t] -= frequency * count + presence
        decisions.append((int(x.argmax()), int(row.argmax())))
    return decisions


# -- probes shared by chat, completions and Responses ---------------------------------------------

def p_model(w: Walk) -> None:
    name = w.servers["rust"].http.get("/v1/models").json()["data"][0]["id"]
    same_but(w.ask({"model": name}), w.baseline)
    assert w.error({"model": "no-such-model"}, 404) == {
        "message": "The model `no-such-model` does not exist.", "type": "NotFoundError",
        "param": None, "code": 404}


def p_user(w: Walk) -> None:
    """No effect on chat and completions (vLLM's); the Responses object echoes it."""
    v = w.ask({"user": "user-1"})
    if w.cls == RESPONSES:
        assert w.baseline["user"] is None
        same_but(v, w.baseline, user="user-1")
    else:
        same_but(v, w.baseline)


def p_logit_bias(w: Walk) -> None:
    """+100 makes a token every token; -100 on the greedy first token makes the runner-up
    first."""
    v = w.ask({"logit_bias": {str(COLON): 100}})
    assert w.text(v) == w.tok.decode([COLON] * 4) == "::::"
    assert (w.out_tokens(v), w.finish(v)) == (4, "length")
    ids = w.base_ids
    alternatives = (w.walks[CHAT] if w.cls == RESPONSES else w).ids()[1]
    banned = {"logit_bias": {str(ids[0]): -100}}
    if w.cls == RESPONSES:  # chat's answer (the same prompt), chat's tokens
        chat = w.walks[CHAT].ids(banned)[0]
        assert chat[0] == alternatives[0][1] and w.text(w.ask(banned)) == w.tok.decode(chat)
    else:
        assert w.ids(banned)[0][0] == alternatives[0][1]


def p_limit(w: Walk) -> None:
    """max_tokens / max_output_tokens 2: the baseline's first two tokens, cut at the limit."""
    v = w.ask({w.limit: 2})
    assert w.text(v) == w.tok.decode(w.base_ids[:2])
    assert (w.out_tokens(v), w.finish(v), w.in_tokens(v)) == (2, "length",
                                                               w.in_tokens(w.baseline))
    if w.cls == RESPONSES:
        assert v["max_output_tokens"] == 2 and v["output"][0]["status"] == "incomplete"


def p_max_completion_tokens(w: Walk) -> None:
    """Wins over max_tokens: the answer is max_tokens 2's."""
    assert w.ask({"max_completion_tokens": 2}) == w.ask({"max_tokens": 2})
    assert w.out_tokens(w.ask({"max_tokens": 2})) == 2


def p_n(w: Walk) -> None:
    """n 2, greedy: two choices, each the baseline's."""
    v = w.ask({"n": 2})
    (choice,) = w.baseline["choices"]
    assert v["choices"] == [choice, {**choice, "index": 1}]
    base = w.baseline["usage"]
    assert (v["usage"]["prompt_tokens"], v["usage"]["completion_tokens"]) == (
        base["prompt_tokens"], 2 * base["completion_tokens"])


def p_seed(w: Walk) -> None:
    """Sampling at temperature 1: one seed gives one answer, asked again; another seed another."""
    hot = {"temperature": 1.0, "seed": 11}
    first = w.text(w.ask(hot, fresh=True))
    assert w.text(w.ask(hot, fresh=True)) == first
    assert w.text(w.ask({**hot, "seed": 12})) != first


def p_temperature(w: Walk) -> None:
    """0 is greedy whatever the seed; 1 samples (the seed's answer is not the greedy one)."""
    same_but(w.ask({"seed": 11}), w.baseline)
    hot = w.ask({"temperature": 1.0, "seed": 11})
    assert w.text(hot) != w.text(w.baseline)
    if w.cls == RESPONSES:
        assert hot["temperature"] == 1.0


def _truncating(w: Walk, field: str, value: float) -> None:
    """A sampler that keeps only the most likely token makes temperature 1 greedy (the same
    seed without it samples something else)."""
    hot = {"temperature": 1.0, "seed": 11}
    assert w.text(w.ask(hot)) != w.text(w.baseline)
    v = w.ask({**hot, field: value})
    assert w.text(v) == w.text(w.baseline)
    assert (w.out_tokens(v), w.finish(v)) == (4, "length")


def p_top_p(w: Walk) -> None:
    _truncating(w, "top_p", 1e-9)


def p_top_k(w: Walk) -> None:
    _truncating(w, "top_k", 1)


def p_min_p(w: Walk) -> None:
    _truncating(w, "min_p", 1.0)


def p_stop(w: Walk) -> None:
    """A stop string: the output ends before it, finish_reason stop, stop_reason the string;
    the token that completed it is counted."""
    ids = w.base_ids
    stop = w.tok.decode([ids[1]])
    v = w.ask({"stop": [stop]})
    assert w.text(v) == w.tok.decode(ids[:1])
    assert (w.out_tokens(v), w.finish(v)) == (2, "stop")
    if w.cls != RESPONSES:
        assert w.stop_reason(v) == stop
        assert w.ask({"stop": stop}) == v  # a string is a list of one


def p_include_stop_str_in_output(w: Walk) -> None:
    ids = w.base_ids
    stop = w.tok.decode([ids[1]])
    v = w.ask({"stop": [stop], "include_stop_str_in_output": True})
    assert w.text(v) == w.tok.decode(ids[:2])
    assert (w.out_tokens(v), w.finish(v)) == (2, "stop")
    if w.cls != RESPONSES:
        assert w.stop_reason(v) == stop
    same_but(w.ask({"include_stop_str_in_output": True}), w.baseline)  # no stop: no effect


def p_stop_token_ids(w: Walk) -> None:
    ids = w.base_ids
    v = w.ask({"stop_token_ids": [ids[1]]})
    assert w.text(v) == w.tok.decode(ids[:1])
    assert (w.out_tokens(v), w.finish(v), w.stop_reason(v)) == (2, "stop", ids[1])


def p_ignore_eos(w: Walk) -> None:
    """With EOS forced (+100), the answer ends at once; ignore_eos keeps going to the limit
    (its EOS tokens decode to nothing)."""
    forced = {"logit_bias": {str(EOS): 100}}
    ended = w.ask(forced)
    assert (w.text(ended), w.out_tokens(ended), w.finish(ended)) == ("", 1, "stop")
    if w.cls != RESPONSES:
        assert w.stop_reason(ended) is None
    v = w.ask({**forced, "ignore_eos": True})
    assert (w.text(v), w.out_tokens(v), w.finish(v)) == ("", 4, "length")


def p_min_tokens(w: Walk) -> None:
    """EOS forced (+100) but banned for the first 3 tokens: those are the greedy ones, then
    EOS ends it."""
    v = w.ask({"logit_bias": {str(EOS): 100}, "min_tokens": 3})
    assert w.text(v) == w.tok.decode(w.base_ids[:3])
    assert (w.out_tokens(v), w.finish(v)) == (4, "stop")
    assert w.ids({"logit_bias": {str(EOS): 100}, "min_tokens": 3})[0] == w.base_ids[:3] + [EOS]


def vllm_text(tok: Any, prompt: list[int], out: list[int], skip_special_tokens: bool) -> str:
    """vLLM's text for the output `out` after `prompt` with a fast tokenizer, as SmolLM2's
    (FastIncrementalDetokenizer, vllm/v1/engine/detokenizer.py): the tokenizers library's
    DecodeStream, primed with the prompt's shortest suffix of 4 to 23 tokens that decodes
    without a replacement character, then stepped through the output token by token."""
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(skip_special_tokens=skip_special_tokens)
    suffix = prompt
    if len(prompt) > 4:
        suffix = next((prompt[-i:] for i in range(4, min(len(prompt) + 1, 24))
                       if "\ufffd" not in tok.decode(prompt[-i:])), prompt)
    for t in suffix:
        stream.step(tok, t)
    return "".join(stream.step(tok, t) or "" for t in out)


def p_skip_special_tokens(w: Walk) -> None:
    """<|im_start|> forced twice: dropped from the text by default, shown with false."""
    forced = {"logit_bias": {str(IM_START): 100}, w.limit: 2}
    assert w.text(w.ask(forced)) == ""
    shown = w.ask({**forced, "skip_special_tokens": False})
    assert w.out_tokens(shown) == 2
    want = vllm_text(w.tok, w.prompt_ids(), [IM_START] * 2, skip_special_tokens=False)
    # BUG: vLLM detokenizes SmolLM2's fast tokenizer with the tokenizers library's
    # DecodeStream, which puts no spaces around special tokens: "<|im_start|><|im_start|>".
    # hybridllm writes " <|im_start|> <|im_start|>" (the slow, transformers-style
    # spaces_between_special_tokens join, which vLLM's fast path never applies).
    assert w.text(shown) == want == "<|im_start|><|im_start|>"


def p_spaces_between_special_tokens(w: Walk) -> None:
    """With special tokens shown: vLLM's fast detokenizer puts no spaces between them
    whatever this says (false only strips spaces a tokenizer's DecodeStream would add, and
    SmolLM2's adds none). With special tokens skipped there is nothing to space."""
    forced = {"logit_bias": {str(IM_START): 100}, w.limit: 2, "skip_special_tokens": False}
    want = vllm_text(w.tok, w.prompt_ids(), [IM_START] * 2, skip_special_tokens=False)
    assert w.text(w.ask({**forced, "spaces_between_special_tokens": False})) == want
    # BUG: as in p_skip_special_tokens: true (the default) gives " <|im_start|> <|im_start|>"
    # here, vLLM "<|im_start|><|im_start|>".
    assert w.text(w.ask({**forced, "spaces_between_special_tokens": True})) == want
    same_but(w.ask({"spaces_between_special_tokens": False}), w.baseline)


def p_logprobs(w: Walk) -> None:
    """One entry per output token, its text the output's; the answer otherwise the
    baseline's."""
    ids = w.base_ids
    if w.cls == CHAT:
        v = w.ask({"logprobs": True})
        content = v["choices"][0]["logprobs"]["content"]
        assert [c["token"] for c in content] == [w.tok.decode([i]) for i in ids]
        assert all(c["top_logprobs"] == [] and c["logprob"] <= 0 and
                   c["bytes"] == list(c["token"].encode()) for c in content)
        assert len(content) == w.out_tokens(v) == 4
        same_but(v, w.baseline, choices=[{**w.baseline["choices"][0],
                                          "logprobs": v["choices"][0]["logprobs"]}])
        return
    v = w.ask({"logprobs": 0})
    lp = v["choices"][0]["logprobs"]
    tokens = [w.tok.decode([i]) for i in ids]
    assert lp["tokens"] == tokens and len(lp["token_logprobs"]) == w.out_tokens(v) == 4
    assert lp["text_offset"] == [sum(len(t) for t in tokens[:i]) for i in range(4)]
    two = w.ask({"logprobs": 2})["choices"][0]["logprobs"]
    assert_equal(two["token_logprobs"], lp["token_logprobs"], 1e-6)
    assert [len(top) for top in two["top_logprobs"]] == [2] * 4  # greedy: the token is top 1
    # BUG: vLLM lists the top logprobs plus the sampled token ("the top
    # num_output_top_logprobs + 1 logprobs, as defined in the openai API",
    # serving_completion.py: `if num_output_top_logprobs >= i`): with logprobs 0 each entry
    # is {token: its logprob}. hybridllm returns {} (logprobs.rs pushes the sampled token
    # only when top_n > 0).
    assert lp["top_logprobs"] == [{t: x} for t, x in zip(tokens, lp["token_logprobs"])]
    same_but(v, w.baseline, choices=[{**w.baseline["choices"][0], "logprobs": lp}])


def p_top_logprobs(w: Walk) -> None:
    """3 alternatives per token, the most likely first (greedy: the token itself)."""
    v = w.ask({"logprobs": True, "top_logprobs": 3})
    for c in v["choices"][0]["logprobs"]["content"]:
        top = c["top_logprobs"]
        assert len(top) == 3 and top[0]["token"] == c["token"], c
        assert top[0]["logprob"] == c["logprob"]
        assert top[0]["logprob"] >= top[1]["logprob"] >= top[2]["logprob"]
    assert w.text(v) == w.text(w.baseline)


def p_return_tokens_as_token_ids(w: Walk) -> None:
    """Logprob tokens named token_id:N (N the token); without logprobs, no effect."""
    ids, _ = w.ids()
    plain = w.ask({"logprobs": True, "top_logprobs": 2} if w.cls == CHAT else {"logprobs": 2})
    as_ids = w.ask({"logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True}
                   if w.cls == CHAT else {"logprobs": 2, "return_tokens_as_token_ids": True})
    if w.cls == CHAT:
        a = as_ids["choices"][0]["logprobs"]["content"]
        p = plain["choices"][0]["logprobs"]["content"]
        assert [x["token"] for x in a] == [f"token_id:{i}" for i in ids]
        assert [x["logprob"] for x in a] == [x["logprob"] for x in p]
        assert [x["bytes"] for x in a] == [list(f"token_id:{i}".encode()) for i in ids]
    else:
        a, p = as_ids["choices"][0]["logprobs"], plain["choices"][0]["logprobs"]
        assert a["tokens"] == [f"token_id:{i}" for i in ids]
        assert a["token_logprobs"] == p["token_logprobs"]
        # vLLM's offsets count the names as written.
        assert a["text_offset"] == [sum(len(f"token_id:{i}") for i in ids[:k]) for k in range(4)]
    same_but(w.ask({"return_tokens_as_token_ids": True}), w.baseline)


def p_return_token_ids(w: Walk) -> None:
    """The prompt's ids (/tokenize's) and each choice's output ids (the logprobs' tokens):
    chat's prompt_token_ids at the top, completions' in each choice; streamed, the first
    chunk carries the prompt's and every chunk its tokens'. false: the baseline."""
    prompt, ids = w.prompt_ids(), w.base_ids
    v = w.ask({"return_token_ids": True})
    (choice,) = w.baseline["choices"]
    if w.cls == CHAT:
        same_but(v, w.baseline, choices=[{**choice, "token_ids": ids}], prompt_token_ids=prompt)
    else:
        same_but(v, w.baseline,
                 choices=[{**choice, "prompt_token_ids": prompt, "token_ids": ids}])
    same_but(w.ask({"return_token_ids": False}), w.baseline)
    events = w.ask({"return_token_ids": True}, stream=True)
    assert _stream_text(w, events) == _stream_text(w, w.ask(stream=True))
    assert [c["choices"][0]["token_ids"] for c in events] == (
        [[]] + [[i] for i in ids] if w.cls == CHAT else [[i] for i in ids])
    first = events[0] if w.cls == CHAT else events[0]["choices"][0]
    assert first["prompt_token_ids"] == prompt
    later = events[1:] if w.cls == CHAT else [c["choices"][0] for c in events[1:]]
    assert all("prompt_token_ids" not in c for c in later)


def _stream_text(w: Walk, chunks: list[Any]) -> list[str]:
    if w.cls == CHAT:
        return [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    return [c["choices"][0]["text"] for c in chunks if c["choices"]]


def p_stream(w: Walk) -> None:
    """SSE: one event per token, their texts the baseline's tokens; the last event carries
    the finish; no usage unless asked."""
    tokens = [w.tok.decode([i]) for i in w.base_ids]
    events = w.ask(stream=True)
    if w.cls == RESPONSES:
        names = [n for n, _ in events]
        assert names == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added",
                         *["response.output_text.delta"] * 4, "response.output_text.done",
                         "response.content_part.done", "response.output_item.done",
                         "response.incomplete"]
        assert [d["delta"] for n, d in events if n.endswith(".delta")] == tokens
        assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
        assert_equal(events[-1][1]["response"], w.baseline, 0.0, "last event")
        return
    obj = "chat.completion.chunk" if w.cls == CHAT else "text_completion"
    assert {c["object"] for c in events} == {obj} and {c["id"] for c in events} == {"ID"}
    assert all(c.get("usage") is None for c in events)
    texts = _stream_text(w, events)
    if w.cls == CHAT:
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        texts = texts[1:]
    assert texts == tokens
    last = events[-1]["choices"][0]
    assert (last["finish_reason"], last["stop_reason"]) == ("length", None)
    assert [c["choices"][0]["finish_reason"] for c in events[:-1]] == [None] * (len(events) - 1)


def p_stream_options(w: Walk) -> None:
    """include_usage: a last chunk with no choices and the baseline's usage; chunks before it
    carry a null usage. Not streamed it is accepted (vLLM: a 400) and changes nothing."""
    events = w.ask({"stream_options": {"include_usage": True}}, stream=True)
    assert events[-1]["choices"] == [] and events[-1]["usage"] == w.baseline["usage"]
    assert all(c["usage"] is None for c in events[:-1])
    assert _stream_text(w, events[:-1]) == _stream_text(w, w.ask(stream=True))
    same_but(w.ask({"stream_options": {"include_usage": True}}), w.baseline)


def p_continuous_usage_stats(w: Walk) -> None:
    """Every chunk's usage: the prompt and the tokens sent so far."""
    events = w.ask({"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
                   stream=True)
    prompt = w.baseline["usage"]["prompt_tokens"]
    sent = [0, 1, 2, 3, 4] if w.cls == CHAT else [1, 2, 3, 4]  # chat: the role chunk first
    assert [c["usage"] for c in events[:-1]] == [
        {"prompt_tokens": prompt, "completion_tokens": k, "total_tokens": prompt + k}
        for k in sent]
    assert events[-1]["usage"] == w.baseline["usage"]


def p_truncate_prompt_tokens(w: Walk) -> None:
    """The prompt's last N tokens: counted in usage, and the answer is that of those tokens
    given to /v1/completions; -1 (the context window) changes nothing."""
    keep = 7 if w.cls == CHAT else 3
    v = w.ask({"truncate_prompt_tokens": keep})
    assert w.in_tokens(v) == keep
    assert w.complete(w.prompt_ids()[-keep:]) == (w.text(v), keep)
    same_but(w.ask({"truncate_prompt_tokens": -1}), w.baseline)


def p_prompt_logprobs(w: Walk) -> None:
    """One entry per prompt token, the first null; each holds the prompt token (with its
    rank) and, when that is not the most likely, the rank-1 token too. Not streamed only."""
    v = w.ask({"prompt_logprobs": 1})
    prompt = w.prompt_ids()
    entries = v["prompt_logprobs"] if w.cls == CHAT else v["choices"][0]["prompt_logprobs"]
    assert len(entries) == len(prompt) == w.in_tokens(v) and entries[0] is None
    for token, entry in zip(prompt[1:], entries[1:]):
        mine = entry[str(token)]
        assert mine["decoded_token"] == w.tok.decode([token], skip_special_tokens=False)
        ranks = sorted(e["rank"] for e in entry.values())
        assert ranks == ([1] if mine["rank"] == 1 else [1, mine["rank"]]), entry
    assert w.text(v) == w.text(w.baseline)
    err = w.error({"prompt_logprobs": 1, "stream": True})
    assert (err["param"], err["message"]) == (
        "prompt_logprobs", "prompt_logprobs are not available when stream=true.")


def p_allowed_token_ids(w: Walk) -> None:
    """Only these ids are sampled: one id, every token; the greedy tokens, the greedy answer."""
    v = w.ask({"allowed_token_ids": [COLON]})
    assert (w.text(v), w.out_tokens(v)) == ("::::", 4)
    ids = w.base_ids
    assert w.ids({"allowed_token_ids": sorted(set(ids))})[0] == ids


def p_bad_words(w: Walk) -> None:
    """A word banned: as vLLM, its bare and its spaced spellings' tokens are biased away, so
    the answer is that of logit_bias -100 on them (and not the baseline's)."""
    word = w.tok.decode([w.base_ids[0]]).strip()
    spellings = [w.tok.encode(s, add_special_tokens=False).ids for s in (word, " " + word)]
    assert all(len(s) == 1 for s in spellings), spellings
    v = w.ask({"bad_words": [word]})
    assert w.text(v) != w.text(w.baseline)
    biased = w.ask({"logit_bias": {str(s[0]): -100 for s in spellings}})
    assert w.text(v) == w.text(biased) and w.out_tokens(v) == w.out_tokens(biased)


def p_add_special_tokens(w: Walk) -> None:
    """SmolLM2's tokenizer adds no special tokens (no BOS): vLLM's prompt, and so its answer,
    is the same either way."""
    assert w.prompt_ids({"add_special_tokens": True}) == w.prompt_ids(
        {"add_special_tokens": False})
    flip = w.cls == CHAT  # chat's default is false, completions' true
    same_but(w.ask({"add_special_tokens": flip}), w.baseline)


def p_response_format(w: Walk) -> None:
    """A JSON schema with one possible value: exactly that JSON, then EOS."""
    fmt = {"type": "json_schema",
           "json_schema": {"name": "city", "schema": {"type": "string", "enum": ["Paris"]}}}
    v = w.ask({"response_format": fmt, w.limit: 8})
    assert (w.text(v), w.finish(v)) == ('"Paris"', "stop")
    assert w.ask({"response_format": {"type": "text"}}) == w.baseline


def p_structured_outputs(w: Walk) -> None:
    v = w.ask({"structured_outputs": {"choice": ["Paris"]}, w.limit: 8})
    assert (w.text(v), w.finish(v)) == ("Paris", "stop")
    regex = w.ask({"structured_outputs": {"regex": "[0-9]{3}"}, w.limit: 8})
    assert re.fullmatch("[0-9]{3}", w.text(regex)) and w.finish(regex) == "stop"


def p_priority(w: Walk) -> None:
    """These servers run the default FCFS policy: 0 changes nothing and anything else is
    vLLM's 400 (the ordering under --scheduling-policy priority:
    tests/reliability/test_priority.py)."""
    same_but(w.ask({"priority": 0}), w.baseline)
    assert w.error({"priority": 2}) == {
        "message": "Got priority 2 but Priority scheduling is not enabled (start the server "
                   "with --scheduling-policy priority).",
        "type": "BadRequestError", "param": "priority", "code": 400}


def p_request_id(w: Walk) -> None:
    """The response's id: chatcmpl-<id>, cmpl-<id>, and on the Responses API the id itself."""
    want = {CHAT: "chatcmpl-walk-1", COMPLETIONS: "cmpl-walk-1", RESPONSES: "walk-1"}[w.cls]
    v = w.ask({"request_id": "walk-1"})
    same_but(v, w.baseline, id=want)
    assert w.error({"request_id": ""}) == {
        "message": "request_id must be 1 to 512 bytes long, got 0.", "type": "BadRequestError",
        "param": "request_id", "code": 400}


def p_session_id(w: Walk) -> None:
    """One engine serves every session alike (routing by session: tests/scaleout/
    test_internal_lb.py)."""
    same_but(w.ask({"session_id": "session-1"}), w.baseline)


def p_cache_salt(w: Walk) -> None:
    """A prompt of two or more full KV blocks: hits only from requests with the same salt."""
    words = " ".join(f"w{i}" for i in range(20))
    prompt = ({"messages": [{"role": "user", "content": words}]} if w.cls == CHAT else
              {"input": words} if w.cls == RESPONSES else {"prompt": words})

    def cached(salt: str | None) -> tuple[int, str]:
        v = w.ask({**prompt, **({} if salt is None else {"cache_salt": salt})}, fresh=True)
        if w.cls == RESPONSES:
            return v["usage"]["input_tokens_details"]["cached_tokens"], w.text(v)
        details = v["usage"]["prompt_tokens_details"]  # vLLM's: null without a hit
        assert details is None or details["cached_tokens"] > 0, details
        return 0 if details is None else details["cached_tokens"], w.text(v)

    text = cached(None)[1]
    hit = cached(None)[0]
    assert hit >= 32 and hit % 16 == 0, hit  # whole blocks
    salt = f"{w.cls}-a"  # Responses render chat's prompt: a salt of their own
    assert cached(salt) == (0, text)
    assert cached(salt) == (hit, text)
    assert cached(f"{w.cls}-b") == (0, text)
    assert cached(None) == (hit, text)
    assert w.error({"cache_salt": ""}) == {
        "message": "cache_salt must be a non-empty string.", "type": "BadRequestError",
        "param": "cache_salt", "code": 400}


def _penalty(w: Walk, field: str, value: float, content: str, n: int) -> None:
    """Every greedy token under the penalty is transformers' argmax under vLLM's rule, and
    the penalty changes at least one of them. The Responses API answers as chat (its prompt
    is chat's rendering of the same message)."""
    kw = {"repetition_penalty": "repetition", "frequency_penalty": "frequency",
          "presence_penalty": "presence"}[field]
    chatlike = w.walks[CHAT] if w.cls == RESPONSES else w
    fields = {"max_tokens": n,
              **({} if w.cls == COMPLETIONS else {"messages": [{"role": "user",
                                                                "content": content}]})}
    out = chatlike.ids({**fields, field: value})[0]
    decisions = penalty_decisions(chatlike.prompt_ids(fields), out, **{kw: value})
    assert [penalised for penalised, _ in decisions] == out
    assert any(penalised != plain for penalised, plain in decisions), decisions
    assert len(out) == n or out[-1] == EOS
    if w.cls == RESPONSES:
        v = w.ask({"input": content, "max_output_tokens": n, field: value})
        assert (w.text(v), w.out_tokens(v)) == (w.tok.decode(out), len(out))


def p_frequency_penalty(w: Walk) -> None:
    _penalty(w, "frequency_penalty", 2.0, "Echo: go go go", 6)


def p_presence_penalty(w: Walk) -> None:
    _penalty(w, "presence_penalty", 2.0, "Repeat: the the the", 6)


def p_repetition_penalty(w: Walk) -> None:
    _penalty(w, "repetition_penalty", 1.3, "Repeat: the the the", 6)


YES_NO = [{"role": "user", "content": "Answer yes or no: is water wet?"}]
BEAM_TOKENS = 4


def _beams(w: Walk, length_penalty: float) -> tuple[list[str], list[str]]:
    """Width 2, 4 tokens (chat: YES_NO; completions: the base prompt): transformers' beams
    (hybridllm's beam search follows transformers' rules, docs/api_fields.md; the EOS that
    ends a beam is not in its text) and the served ones, as texts."""
    from tests.golden.kinds import hf_beams

    fields: dict[str, Any] = {"messages": YES_NO} if w.cls == CHAT else {}
    refs = hf_beams(w.prompt_ids(fields), 2, BEAM_TOKENS, False,
                    length_penalty=length_penalty)
    want = [w.tok.decode([t for t in gen if t != EOS]) for gen, _ in refs]
    v = w.ask({**fields, "use_beam_search": True, "n": 2, "max_tokens": BEAM_TOKENS,
               "length_penalty": length_penalty})
    assert [c["index"] for c in v["choices"]] == [0, 1]
    return want, [w.text({"choices": [c]}) for c in v["choices"]]


def p_use_beam_search(w: Walk) -> None:
    """n is the beam width and the beams are transformers' (length_penalty 0: ranked by
    cumulative logprob alone); a width of 1 is greedy. (vLLM's own beam search also keeps
    EOS candidates ranked below the width: "The capital of France is", 4 tokens, gives
    [" Paris.\n\n", " Paris."] there, [" Paris.\n\n", " Paris.\n-"] here.)"""
    want, got = _beams(w, 0.0)
    assert got == want
    one = w.ask({"use_beam_search": True, "n": 1})
    assert w.text(one) == w.text(w.baseline)


def p_length_penalty(w: Walk) -> None:
    """Beam scores are cumulative logprob / length ** length_penalty, which decides between
    beams that ended and longer ones (here the answer changes with it). Without beam search:
    no effect (vLLM's)."""
    answers = {}
    for penalty in (1.0, 10.0):
        # transformers' length is the output's (vLLM's counts the prompt too: chat "Answer
        # yes or no: is water wet?", 4 tokens, 1.0 gives ["No.", "No. Water is"] there).
        want, got = _beams(w, penalty)
        assert got == want, penalty
        answers[penalty] = want
    if w.cls == CHAT:  # YES_NO is chosen so that the penalty changes the answer
        assert len({tuple(a) for a in answers.values()} | {tuple(_beams(w, 0.0)[0])}) > 1
    same_but(w.ask({"length_penalty": 2.0}), w.baseline)


# -- chat only ------------------------------------------------------------------------------------

def c_messages(w: Walk) -> None:
    """Text parts are the string they join with newlines; another conversation is its own
    prompt (/tokenize's count) and answer."""
    same_but(w.ask({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}),
             w.baseline)
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                          {"type": "text", "text": "there"}]}]
    joined = [{"role": "user", "content": "Hi\nthere"}]
    w.ask({"messages": joined})  # its prompt's blocks cached, for both answers below
    v = w.ask({"messages": joined}, fresh=True)
    assert w.ask({"messages": parts}) == v
    assert w.in_tokens(v) == len(w.prompt_ids({"messages": joined})) != w.in_tokens(w.baseline)
    assert w.complete(w.prompt_ids({"messages": joined}))[0] == w.text(v)


def c_echo(w: Walk) -> None:
    """The reply starts with the last message when it is the assistant's; a user message
    last: no effect."""
    start = "The capital of France is"
    prefill = {"messages": [*HI, {"role": "assistant", "content": start}],
               "continue_final_message": True, "add_generation_prompt": False}
    plain = w.ask(prefill)
    v = w.ask({**prefill, "echo": True})
    assert w.text(v) == start + w.text(plain) and w.out_tokens(v) == w.out_tokens(plain)
    same_but(w.ask({"echo": True}), w.baseline)


def _rendered(w: Walk, fields: dict[str, Any]) -> None:
    """The prompt is /tokenize's rendering of the same fields, and the answer that of those
    tokens given to /v1/completions."""
    v = w.ask(fields)
    prompt = w.prompt_ids(fields)
    assert w.complete(prompt) == (w.text(v), w.in_tokens(v))


def c_add_generation_prompt(w: Walk) -> None:
    """false: the prompt lacks the template's "<|im_start|>assistant\\n" (4 tokens)."""
    _rendered(w, {"add_generation_prompt": False})
    assert w.prompt_ids({"add_generation_prompt": False}) == w.prompt_ids()[:-4]
    assert w.error({"add_generation_prompt": True, "continue_final_message": True}) == {
        "message": "continue_final_message and add_generation_prompt are not compatible. Use "
                   "continue_final_message when you want the model to continue the final "
                   "message, and add_generation_prompt when you want to add a header that will "
                   "prompt it to start a new assistant message instead.",
        "type": "BadRequestError", "param": None, "code": 400}


def c_continue_final_message(w: Walk) -> None:
    fields = {"messages": [*HI, {"role": "assistant", "content": "The capital of France is"}],
              "continue_final_message": True, "add_generation_prompt": False}
    _rendered(w, fields)
    # The assistant message stays open: the prompt ends with its text, no end-of-turn.
    assert w.tok.decode(w.prompt_ids(fields)[-5:]) == "The capital of France is"


def c_chat_template(w: Walk) -> None:
    """A template of the messages' text alone: the prompt is "Hi" (1 token), the answer
    /v1/completions'."""
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    _rendered(w, {"chat_template": template})
    assert w.prompt_ids({"chat_template": template}) == w.tok.encode(
        "Hi", add_special_tokens=False).ids
    assert w.error({"chat_template": "{% for %}"}) == {
        "message": "invalid chat template: syntax error: unexpected end of block, expected in "
                   "(in chat:1)",
        "type": "BadRequestError", "param": "chat_template", "code": 400}


def c_chat_template_kwargs(w: Walk) -> None:
    template = "{{ lead }}{% for m in messages %}{{ m.content }}{% endfor %}"
    fields = {"chat_template": template, "chat_template_kwargs": {"lead": "Say: "}}
    _rendered(w, fields)
    assert w.prompt_ids(fields) == w.tok.encode("Say: Hi", add_special_tokens=False).ids


def c_documents(w: Walk) -> None:
    template = ("{% for d in documents %}[{{ d.title }}: {{ d.text }}]{% endfor %}"
                "{% for m in messages %}{{ m.content }}{% endfor %}")
    fields = {"chat_template": template,
              "documents": [{"title": "Atlas", "text": "Paris is in France."}]}
    _rendered(w, fields)
    assert w.prompt_ids(fields) == w.tok.encode("[Atlas: Paris is in France.]Hi",
                                                add_special_tokens=False).ids


NOW = {"type": "function", "function": {"name": "now", "description": "The time."}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}}
# '<tool_call>\n{"name":"now","arguments":{}}\n</tool_call>' and EOS (Hermes' format)
CALL_TOKENS = 22


def c_tools(w: Walk) -> None:
    """Given to the chat template (SmolLM2's ignores them: a template that writes their names
    shows them); with tools, the default tool_choice is auto, which needs vLLM's flags."""
    template = ("{% for t in tools %}{{ t.function.name }};{% endfor %}"
                "{% for m in messages %}{{ m.content }}{% endfor %}")
    fields = {"chat_template": template, "tools": [NOW, WEATHER], "tool_choice": "none"}
    _rendered(w, fields)
    assert w.prompt_ids(fields) == w.tok.encode("now;get_weather;Hi",
                                                add_special_tokens=False).ids
    assert w.ask({"tools": [NOW], "tool_choice": "none"}) == w.baseline
    assert w.error({"tools": [NOW]}) == {
        "message": "\"auto\" tool choice requires --enable-auto-tool-choice and "
                   "--tool-call-parser to be set",
        "type": "BadRequestError", "param": "tool_choice", "code": 400}


def _one_call(w: Walk, v: Any) -> None:
    """Exactly one call of `now` (no parameters: arguments {}), which ends the answer."""
    choice = v["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"]) == ("tool_calls", None)
    assert choice["message"]["tool_calls"] == [
        {"id": "ID", "type": "function", "function": {"name": "now", "arguments": "{}"}}]
    assert w.out_tokens(v) == CALL_TOKENS


def c_tool_choice(w: Walk) -> None:
    """A named tool: exactly its call (Hermes' format without a parser flag); none: the
    baseline."""
    named = {"type": "function", "function": {"name": "now"}}
    _one_call(w, w.ask({"tools": [NOW, WEATHER], "tool_choice": named, "max_tokens": 30}))
    assert w.ask({"tools": [NOW, WEATHER], "tool_choice": "none"}) == w.baseline


def c_parallel_tool_calls(w: Walk) -> None:
    """tool_choice required: false allows one call, which then ends the answer; true lets the
    model open a second call (here it does, so the same limit cuts it)."""
    forced = {"tools": [NOW], "tool_choice": "required", "max_tokens": CALL_TOKENS}
    _one_call(w, w.ask({**forced, "parallel_tool_calls": False}))
    more = w.ask({**forced, "parallel_tool_calls": True})
    assert (more["choices"][0]["finish_reason"], w.out_tokens(more)) == ("length", CALL_TOKENS)


def c_include_reasoning(w: Walk) -> None:
    """Without --reasoning-parser there is no reasoning to leave out: no effect (with one:
    tests/tools/test_reasoning.py::test_include_reasoning_false_drops_it)."""
    same_but(w.ask({"include_reasoning": False}), w.baseline)
    same_but(w.ask({"include_reasoning": True}), w.baseline)


# -- completions only -----------------------------------------------------------------------------

def k_prompt(w: Walk) -> None:
    """Token ids are the text's; a list of prompts gives a choice each, in order."""
    ids = w.prompt_ids()
    same_but(w.ask({"prompt": ids}), w.baseline)
    other = "Water boils at"
    v = w.ask({"prompt": [BASE[COMPLETIONS]["prompt"], other]})
    alone = w.ask({"prompt": other})
    assert v["choices"] == [w.baseline["choices"][0], {**alone["choices"][0], "index": 1}]
    assert v["usage"]["prompt_tokens"] == w.in_tokens(w.baseline) + w.in_tokens(alone)
    assert v["usage"]["completion_tokens"] == 8


def k_echo(w: Walk) -> None:
    """The prompt, then the completion; with logprobs the prompt's come first (its first
    token's null)."""
    prompt = BASE[COMPLETIONS]["prompt"]
    v = w.ask({"echo": True})
    assert w.text(v) == prompt + w.text(w.baseline)
    same_but(v, w.baseline, choices=[{**w.baseline["choices"][0], "text": w.text(v)}])
    lp = w.ask({"echo": True, "logprobs": 1})["choices"][0]["logprobs"]
    ids = w.prompt_ids() + w.base_ids
    assert lp["tokens"] == [w.tok.decode([i]) for i in ids]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:k]) for k in range(len(ids))]


# -- Responses only -------------------------------------------------------------------------------

def r_input(w: Walk) -> None:
    """Message items and text parts are the string; the prompt is chat's rendering of them."""
    for form in ([{"role": "user", "content": "Hi"}],
                 [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "Hi"}]}]):
        same_but(w.ask({"input": form}), w.baseline)
    chat = w.walks[CHAT].baseline
    assert w.text(w.baseline) == w.walks[CHAT].text(chat)
    assert w.in_tokens(w.baseline) == chat["usage"]["prompt_tokens"]


def r_instructions(w: Walk) -> None:
    """A system message before the input: chat's answer to the same two messages."""
    v = w.ask({"instructions": "Answer briefly."})
    messages = [{"role": "system", "content": "Answer briefly."}, *HI]
    chat = w.walks[CHAT].ask({"messages": messages})
    assert w.text(v) == w.walks[CHAT].text(chat)
    assert w.in_tokens(v) == chat["usage"]["prompt_tokens"] != w.in_tokens(w.baseline)
    assert v["instructions"] == "Answer briefly."


def _echoed(w: Walk, field: str, value: Any, default: Any) -> None:
    assert w.baseline[field] == default
    same_but(w.ask({field: value}), w.baseline, **{field: value})


def r_max_tool_calls(w: Walk) -> None:
    _echoed(w, "max_tool_calls", 3, None)


def r_metadata(w: Walk) -> None:
    _echoed(w, "metadata", {"run": "walk", "k": "v"}, {})


def r_parallel_tool_calls(w: Walk) -> None:
    _echoed(w, "parallel_tool_calls", False, True)


def r_prompt_cache_key(w: Walk) -> None:
    _echoed(w, "prompt_cache_key", "tenant-7", None)


def r_service_tier(w: Walk) -> None:
    _echoed(w, "service_tier", "flex", "auto")
    assert w.error({"service_tier": "gold"}) == {
        "message": 'service_tier must be one of auto, default, flex, scale, priority, got "gold".',
        "type": "BadRequestError", "param": "service_tier", "code": 400}


def r_truncation(w: Walk) -> None:
    """auto on a prompt that fits changes nothing but the echo; on one that does not (with
    the output's room), it drops the oldest turns: the prompt is the remaining turns'."""
    _echoed(w, "truncation", "auto", "disabled")
    long = "The quick brown fox jumps over the lazy dog. " * 25
    turns = [{"role": "user", "content": long}, {"role": "assistant", "content": "Yes."}, *HI]
    fields = {"input": turns, "max_output_tokens": MAX_MODEL_LEN - 200,
              "logit_bias": {str(EOS): 100}}  # EOS at once: one token
    whole = len(w.walks[CHAT].prompt_ids({"messages": turns}))
    room = MAX_MODEL_LEN - 200
    assert w.error(fields) == {  # truncation disabled: vLLM's context-length 400
        "message": f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, "
                   f"you requested {whole + room} tokens ({whole} in the messages, {room} in "
                   "the completion). Please reduce the length of the messages or completion.",
        "type": "BadRequestError", "param": None, "code": 400}
    v = w.ask({**fields, "truncation": "auto"})
    kept = w.walks[CHAT].prompt_ids({"messages": turns[1:]})
    assert w.in_tokens(v) == len(kept) and whole + room > MAX_MODEL_LEN >= len(kept) + room
    assert (w.text(v), w.out_tokens(v), w.finish(v)) == ("", 1, "stop")


def r_store(w: Walk) -> None:
    """store: the response can be retrieved, as it was given; store false: it cannot."""
    def run(mode: str, s: Server) -> tuple[Any, Any, int]:
        stored = s.post("/v1/responses", {**w.base, "store": True}).json()
        got = s.http.get(f"/v1/responses/{stored['id']}").json()
        gone = s.post("/v1/responses", w.base).json()
        return (masked(stored), masked(got),
                s.http.get(f"/v1/responses/{gone['id']}").status_code)

    results = w.each(run)
    assert_same(results)
    stored, got, missing = results["rust"]
    assert stored == got and missing == 404
    same_but(stored, w.baseline, store=True)


def r_previous_response_id(w: Walk) -> None:
    """The stored turn, then the new input: chat's answer to the whole conversation."""
    def run(mode: str, s: Server) -> Any:
        first = s.post("/v1/responses", {**w.base, "store": True}).json()
        second = s.post("/v1/responses", {**w.base, "input": "And you?",
                                          "previous_response_id": first["id"]})
        assert second.status_code == 200, second.text
        assert second.json()["previous_response_id"] == first["id"]
        return masked(second.json())

    results = w.each(run)
    assert_same(results)
    v = results["rust"]
    conversation = [*HI, {"role": "assistant", "content": w.text(w.baseline)},
                    {"role": "user", "content": "And you?"}]
    chat = w.walks[CHAT].ask({"messages": conversation})
    assert w.text(v) == w.walks[CHAT].text(chat)
    assert w.in_tokens(v) == chat["usage"]["prompt_tokens"]
    missing = "resp_" + "0" * 32
    assert w.error({"previous_response_id": missing}, 404) == {
        "message": f"Previous response with id '{missing}' not found.",
        "type": "NotFoundError", "param": None, "code": 404}


def r_text(w: Walk) -> None:
    fmt = {"format": {"type": "json_schema", "name": "city",
                      "schema": {"type": "string", "enum": ["Paris"]}}}
    v = w.ask({"text": fmt, "max_output_tokens": 8})
    assert (w.text(v), w.finish(v)) == ('"Paris"', "stop")
    assert v["text"]["format"]["type"] == "json_schema"
    same_but(w.ask({"text": {"format": {"type": "text"}}}), w.baseline)


R_NOW = {"type": "function", "name": "now", "description": "The time."}


def r_tools(w: Walk) -> None:
    """Echoed; with tool_choice none, the answer is the baseline's (SmolLM2's template does
    not render tools); alone, the default auto needs vLLM's tool flags."""
    v = w.ask({"tools": [R_NOW], "tool_choice": "none"})
    same_but(v, w.baseline, tools=[R_NOW], tool_choice="none")
    assert w.error({"tools": [R_NOW]}) == {
        "message": "\"auto\" tool choice requires --enable-auto-tool-choice and "
                   "--tool-call-parser to be set",
        "type": "BadRequestError", "param": "tool_choice", "code": 400}


def r_tool_choice(w: Walk) -> None:
    """A named tool: exactly its call, as one function_call item (required: chat's
    parallel_tool_calls probe)."""
    choice = {"type": "function", "name": "now"}
    v = w.ask({"tools": [R_NOW, {"type": "function", "name": "later"}], "tool_choice": choice,
               "max_output_tokens": 30})
    assert v["output"] == [{"type": "function_call", "id": "ID", "call_id": "ID",
                            "name": "now", "arguments": "{}", "status": "completed"}]
    assert (v["status"], w.out_tokens(v), v["tool_choice"]) == ("completed", CALL_TOKENS, choice)


LOGPROBS_INCLUDE = "message.output_text.logprobs"


def r_include(w: Walk) -> None:
    """The message's token logprobs (vLLM's shape: chat's entries, top_logprobs empty at 0),
    the answer otherwise the baseline's with top_logprobs echoed."""
    v = copy.deepcopy(w.ask({"include": [LOGPROBS_INCLUDE]}))
    lps = v["output"][0]["content"][0].pop("logprobs")
    chat = w.walks[CHAT].ask({"logprobs": True})["choices"][0]["logprobs"]["content"]
    assert_equal(lps, chat, 1e-4, "responses vs chat logprobs")
    same_but(v, w.baseline, top_logprobs=0)


def r_top_logprobs(w: Walk) -> None:
    """The alternatives: vLLM's logprobs dict in order (the sampled token, then the most
    likely others), so with greedy sampling chat's top_logprobs."""
    v = w.ask({"include": [LOGPROBS_INCLUDE], "top_logprobs": 3})
    chat = w.walks[CHAT].ask({"logprobs": True, "top_logprobs": 3})
    assert_equal(v["output"][0]["content"][0]["logprobs"],
                 chat["choices"][0]["logprobs"]["content"], 1e-4, "responses vs chat")
    assert v["top_logprobs"] == 3


def r_background(w: Walk) -> None:
    """Answered at once as queued, then (polled) the baseline's answer."""
    def run(mode: str, s: Server) -> Any:
        q = s.post("/v1/responses", {**w.base, "store": True, "background": True}).json()
        assert (q["status"], q["output"], q["usage"]) == ("queued", [], None), q
        deadline = time.monotonic() + 60
        while (got := s.http.get(f"/v1/responses/{q['id']}").json())["status"] in (
                "queued", "in_progress"):
            assert time.monotonic() < deadline, got
            time.sleep(0.05)
        return masked(got)

    results = w.each(run)
    assert_same(results)
    same_but(results["rust"], w.baseline, background=True, store=True)


# -- the tables -----------------------------------------------------------------------------------

Probe = Callable[[Walk], None]
SAMPLING: dict[str, Probe] = {
    "model": p_model, "user": p_user, "logit_bias": p_logit_bias, "seed": p_seed,
    "temperature": p_temperature, "top_p": p_top_p, "top_k": p_top_k, "stop": p_stop,
    "include_stop_str_in_output": p_include_stop_str_in_output, "ignore_eos": p_ignore_eos,
    "skip_special_tokens": p_skip_special_tokens, "stream": p_stream,
    "repetition_penalty": p_repetition_penalty, "priority": p_priority,
    "request_id": p_request_id, "cache_salt": p_cache_salt,
}
CHAT_AND_COMPLETIONS: dict[str, Probe] = {
    **SAMPLING, "max_tokens": p_limit, "n": p_n, "min_p": p_min_p,
    "frequency_penalty": p_frequency_penalty, "presence_penalty": p_presence_penalty,
    "stop_token_ids": p_stop_token_ids, "min_tokens": p_min_tokens,
    "spaces_between_special_tokens": p_spaces_between_special_tokens, "logprobs": p_logprobs,
    "return_tokens_as_token_ids": p_return_tokens_as_token_ids,
    "return_token_ids": p_return_token_ids, "stream_options": p_stream_options,
    "stream_options.continuous_usage_stats": p_continuous_usage_stats,
    "truncate_prompt_tokens": p_truncate_prompt_tokens, "prompt_logprobs": p_prompt_logprobs,
    "allowed_token_ids": p_allowed_token_ids, "bad_words": p_bad_words,
    "add_special_tokens": p_add_special_tokens, "response_format": p_response_format,
    "structured_outputs": p_structured_outputs, "session_id": p_session_id,
    "use_beam_search": p_use_beam_search, "length_penalty": p_length_penalty,
}
PROBES: dict[str, dict[str, Probe]] = {
    CHAT: {
        **CHAT_AND_COMPLETIONS, "messages": c_messages, "top_logprobs": p_top_logprobs,
        "max_completion_tokens": p_max_completion_tokens, "tools": c_tools,
        "tool_choice": c_tool_choice, "parallel_tool_calls": c_parallel_tool_calls,
        "include_reasoning": c_include_reasoning, "echo": c_echo,
        "add_generation_prompt": c_add_generation_prompt,
        "continue_final_message": c_continue_final_message, "documents": c_documents,
        "chat_template": c_chat_template, "chat_template_kwargs": c_chat_template_kwargs,
    },
    COMPLETIONS: {**CHAT_AND_COMPLETIONS, "prompt": k_prompt, "echo": k_echo},
    RESPONSES: {
        **SAMPLING, "input": r_input, "instructions": r_instructions,
        "max_output_tokens": p_limit, "max_tool_calls": r_max_tool_calls,
        "metadata": r_metadata, "parallel_tool_calls": r_parallel_tool_calls,
        "previous_response_id": r_previous_response_id, "service_tier": r_service_tier,
        "store": r_store, "text": r_text, "tool_choice": r_tool_choice, "tools": r_tools,
        "truncation": r_truncation, "prompt_cache_key": r_prompt_cache_key,
        "include": r_include, "top_logprobs": r_top_logprobs, "background": r_background,
    },
}
GENERATE = [(cls, field) for cls, probes in PROBES.items() for field in probes]


# -- embeddings -----------------------------------------------------------------------------------

def _vectors(v: Any) -> list[np.ndarray]:
    out = []
    for d in v["data"]:
        e = d["embedding"]
        out.append(np.frombuffer(base64.b64decode(e), dtype="<f4") if isinstance(e, str)
                   else np.array(e, dtype=np.float32))
    return out


def e_model(w: Walk) -> None:
    same_but(w.ask({"model": "all-MiniLM-L6-v2"}), w.baseline)
    assert w.error({"model": "nope"}, 404) == {
        "message": "The model `nope` does not exist.", "type": "NotFoundError", "param": None,
        "code": 404}


def e_user(w: Walk) -> None:
    same_but(w.ask({"user": "user-1"}), w.baseline)


def e_cache_salt(w: Walk) -> None:
    """An embedding step keeps no KV cache: nothing to isolate, no effect."""
    same_but(w.ask({"cache_salt": "tenant-a"}), w.baseline)


def e_request_id(w: Walk) -> None:
    same_but(w.ask({"request_id": "walk-1"}), w.baseline, id="embd-walk-1")


def e_input(w: Walk) -> None:
    """A list: one vector per input, each that input's alone, usage summed; token ids are
    the text's."""
    ids = w.ask({"prompt": "Hello world"}, path="/tokenize", merge=False)["tokens"]
    same_but(w.ask({"input": ids}), w.baseline)
    both = w.ask({"input": ["Hello world", "Good night"]})
    alone = w.ask({"input": "Good night"})
    assert [d["index"] for d in both["data"]] == [0, 1]
    assert_equal(both["data"], [w.baseline["data"][0], {**alone["data"][0], "index": 1}],
                 1e-6, "batched vs alone")
    assert both["usage"]["prompt_tokens"] == (w.baseline["usage"]["prompt_tokens"]
                                              + alone["usage"]["prompt_tokens"])


def e_truncate_prompt_tokens(w: Walk) -> None:
    """The first N tokens, [CLS] and [SEP] kept: the vector of those ids."""
    text = "The quick brown fox jumps over the lazy dog"
    ids = w.ask({"prompt": text}, path="/tokenize", merge=False)["tokens"]
    v = w.ask({"input": text, "truncate_prompt_tokens": 4})
    assert v["usage"]["prompt_tokens"] == 4
    cut = w.ask({"input": ids[:3] + ids[-1:]})
    same_but(v, cut)
    full = w.ask({"input": text})
    assert full["usage"]["prompt_tokens"] == len(ids) > 4
    same_but(w.ask({"input": text, "truncate_prompt_tokens": -1}), full)


def e_add_special_tokens(w: Walk) -> None:
    """false: no [CLS]/[SEP], two tokens fewer, the vector of the bare ids."""
    ids = w.ask({"prompt": "Hello world"}, path="/tokenize", merge=False)["tokens"]
    v = w.ask({"add_special_tokens": False})
    assert v["usage"]["prompt_tokens"] == w.baseline["usage"]["prompt_tokens"] - 2 == 2
    same_but(v, w.ask({"input": ids[1:-1]}))


def e_encoding_format(w: Walk) -> None:
    """base64: the float32 vector's little-endian bytes; vLLM's bytes and bytes_only: those
    bytes as the body (test_embeddings.py::test_bytes_encoding_as_vllm)."""
    v = w.ask({"encoding_format": "base64"})
    assert isinstance(v["data"][0]["embedding"], str)
    (got,), (want,) = _vectors(v), _vectors(w.baseline)
    assert got.tobytes() == want.tobytes()
    for fmt in ("bytes", "bytes_only"):
        raw = w.each(lambda m, s, fmt=fmt: s.post(w.path, {**w.base, "encoding_format": fmt}))
        assert all(r.status_code == 200 and r.content == want.astype("<f4").tobytes()
                   for r in raw.values()), fmt
    same_but(w.ask({"encoding_format": "float"}), w.baseline)


# The chat form (vLLM's EmbeddingChatRequest). all-MiniLM-L6-v2 has no chat template: each
# probe gives one, and the rendered text, embedded without the tokenizer's special tokens
# (the chat form's default), is that text's vector as input with add_special_tokens false.
HELLO = [{"role": "user", "content": "Hello world"}]
CONTENT_ONLY = "{% for m in messages %}{{ m.content }}{% endfor %}"


def _as_text(w: Walk, text: str) -> Any:
    return w.ask({"input": text, "add_special_tokens": False})


def e_messages(w: Walk) -> None:
    """Two messages: the template's text of both, one vector; with add_special_tokens, the
    text's vector with [CLS]/[SEP] (the baseline's)."""
    turns = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": " world"}]
    v = w.ask({"messages": turns, "chat_template": CONTENT_ONLY}, merge=False)
    same_but(v, _as_text(w, "Hello world"))
    same_but(w.ask({"messages": turns, "chat_template": CONTENT_ONLY,
                    "add_special_tokens": True}, merge=False), w.baseline)
    assert w.error({"messages": HELLO, "chat_template": CONTENT_ONLY})["param"] == "messages"


def e_chat_template(w: Walk) -> None:
    """The request's template renders the messages; without one this model has none."""
    v = w.ask({"messages": HELLO, "chat_template":
               "{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}"}, merge=False)
    same_but(v, _as_text(w, "user: Hello world"))
    assert w.ask({"messages": HELLO}, merge=False, status=400)["error"]["message"] == (
        "This model has no chat template; pass `chat_template` or use /v1/completions.")


def e_add_generation_prompt(w: Walk) -> None:
    """The template's generation prompt, off by default (vLLM's EmbeddingChatRequest)."""
    template = CONTENT_ONLY + "{% if add_generation_prompt %} Answer:{% endif %}"
    on = w.ask({"messages": HELLO, "chat_template": template, "add_generation_prompt": True},
               merge=False)
    same_but(on, _as_text(w, "Hello world Answer:"))
    same_but(w.ask({"messages": HELLO, "chat_template": template}, merge=False),
             _as_text(w, "Hello world"))


def e_continue_final_message(w: Walk) -> None:
    """The rendered text cut after the last message's content; not with the generation
    prompt (vLLM's 400)."""
    template = "{% for m in messages %}{{ m.content }} END{% endfor %}"
    v = w.ask({"messages": HELLO, "chat_template": template, "continue_final_message": True},
              merge=False)
    same_but(v, _as_text(w, "Hello world"))
    same_but(w.ask({"messages": HELLO, "chat_template": template}, merge=False),
             _as_text(w, "Hello world END"))
    err = w.ask({"messages": HELLO, "chat_template": template, "continue_final_message": True,
                 "add_generation_prompt": True}, merge=False, status=400)["error"]
    assert err["message"] == ("Cannot set both `continue_final_message` and "
                              "`add_generation_prompt` to True.")


def e_chat_template_kwargs(w: Walk) -> None:
    """More template variables."""
    v = w.ask({"messages": HELLO, "chat_template": "{{ lead }}" + CONTENT_ONLY,
               "chat_template_kwargs": {"lead": "Say: "}}, merge=False)
    same_but(v, _as_text(w, "Say: Hello world"))


def e_dimensions(w: Walk) -> None:
    """The model's own size: no effect; another (all-MiniLM-L6-v2 is no matryoshka model):
    a 400, as vLLM refuses it."""
    same_but(w.ask({"dimensions": 384}), w.baseline)
    assert w.error({"dimensions": 128}) == {
        "message": "dimensions (128) is not supported: this model's embeddings have 384 "
                   "dimensions and it cannot shorten them (not a matryoshka model).",
        "type": "BadRequestError", "param": "dimensions", "code": 400}


def e_use_activation(w: Walk) -> None:
    """false: the pooled vector, not normalised; normalised, it is the baseline's."""
    (raw,) = _vectors(w.ask({"use_activation": False}))
    (unit,) = _vectors(w.baseline)
    norm = float(np.linalg.norm(raw.astype(np.float64)))
    assert norm > 1.5
    np.testing.assert_allclose(raw / norm, unit, rtol=0, atol=1e-6)
    assert w.ask({"use_activation": False}) == w.ask({"normalize": False})


def _base64_as(vector: np.ndarray, dtype: str, order: str) -> bytes:
    """vLLM's base64 payload: the float32 vector cast as torch casts (round to nearest even)
    to `dtype`, its bytes in `order` ("<" little, ">" big)."""
    import torch

    bits = torch.tensor(vector).to(getattr(torch, dtype))
    wide = dtype == "float32"
    ints = bits.view(torch.int32 if wide else torch.int16).numpy()
    return ints.astype(f"{order}{'i4' if wide else 'i2'}").tobytes()


def e_embed_dtype(w: Walk) -> None:
    """base64 of the vector cast to float16 / bfloat16 (float32 the default); no effect on
    float output, as vLLM; vLLM's fp8 types a 400."""
    (vector,) = _vectors(w.baseline)
    b64 = w.ask({"encoding_format": "base64"})
    same_but(w.ask({"encoding_format": "base64", "embed_dtype": "float32"}), b64)
    for dtype in ("float16", "bfloat16"):
        v = w.ask({"encoding_format": "base64", "embed_dtype": dtype})
        assert base64.b64decode(v["data"][0]["embedding"]) == _base64_as(vector, dtype, "<")
        same_but(v, b64, data=[{**b64["data"][0], "embedding": v["data"][0]["embedding"]}])
        same_but(w.ask({"embed_dtype": dtype}), w.baseline)
    assert w.error({"encoding_format": "base64", "embed_dtype": "fp8_e4m3"}) == {
        "message": "embed_dtype must be 'float32', 'float16' or 'bfloat16', got 'fp8_e4m3'.",
        "type": "BadRequestError", "param": "embed_dtype", "code": 400}


def e_endianness(w: Walk) -> None:
    """The base64 bytes' order: big swaps each value's bytes; native is little here."""
    (vector,) = _vectors(w.baseline)
    b64 = w.ask({"encoding_format": "base64"})
    for order in ("native", "little"):
        same_but(w.ask({"encoding_format": "base64", "endianness": order}), b64)
    for dtype in ("float32", "bfloat16"):
        v = w.ask({"encoding_format": "base64", "embed_dtype": dtype, "endianness": "big"})
        assert base64.b64decode(v["data"][0]["embedding"]) == _base64_as(vector, dtype, ">")
    same_but(w.ask({"endianness": "big"}), w.baseline)


EMBED_PROBES: dict[str, Probe] = {
    "model": e_model, "user": e_user, "truncate_prompt_tokens": e_truncate_prompt_tokens,
    "request_id": e_request_id, "cache_salt": e_cache_salt, "input": e_input,
    "add_special_tokens": e_add_special_tokens, "encoding_format": e_encoding_format,
    "dimensions": e_dimensions, "use_activation": e_use_activation,
    "embed_dtype": e_embed_dtype, "endianness": e_endianness, "messages": e_messages,
    "chat_template": e_chat_template, "add_generation_prompt": e_add_generation_prompt,
    "continue_final_message": e_continue_final_message,
    "chat_template_kwargs": e_chat_template_kwargs,
}


# -- tests ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [CHAT, COMPLETIONS, RESPONSES, EMBEDDINGS])
def test_every_honoured_row_has_a_probe(cls: str) -> None:
    probes = EMBED_PROBES if cls == EMBEDDINGS else PROBES[cls]
    assert sorted(probes) == sorted(_rows(cls, "honoured"))


@pytest.fixture(scope="module")
def walks(servers: dict[str, Server]) -> Iterator[dict[str, Walk]]:
    with ThreadPoolExecutor(len(servers)) as pool:
        ws = {cls: Walk(servers, cls, pool) for cls in PROBES}
        for w in ws.values():
            w.walks = ws
        yield ws


@pytest.fixture(scope="module")
def embed_walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    for servers in start_all(tmp_path_factory, resolve_model(DEFAULT_EMBEDDING_MODEL),
                             EMBED_FLAGS):
        with ThreadPoolExecutor(len(servers)) as pool:
            # Vectors across frontends within 1e-6, as test_embeddings compares them.
            yield Walk(servers, EMBEDDINGS, pool, tol=1e-6)


@pytest.mark.parametrize(("cls", "field"), GENERATE, ids=[f"{c}.{f}" for c, f in GENERATE])
def test_honoured_field_acts_as_in_vllm(walks: dict[str, Walk], cls: str, field: str) -> None:
    PROBES[cls][field](walks[cls])


@pytest.mark.parametrize("field", list(EMBED_PROBES))
def test_honoured_embedding_field_acts_as_in_vllm(embed_walk: Walk, field: str) -> None:
    EMBED_PROBES[field](embed_walk)

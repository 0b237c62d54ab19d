"""Every request shape lm-eval-harness's `local-completions` model sends (lm_eval 0.4.x:
`models/openai_completions.py` and the `RemoteTokenizer` in `utils.py`), answered alike by all
three frontends and in the shape lm-eval parses.

1. GET /tokenizer_info — auto-detection needs `eos_token`; bos/eos/chat template are read.
2. POST /tokenize {"prompt", "add_special_tokens": false} — its encoder (and eos/bos ids).
3. POST /detokenize {"tokens"} — its decoder.
4. POST /v1/completions {"model", "prompt": ids or [ids, ...], "temperature": 0,
   "max_tokens": 1, "logprobs": 1, "seed", "echo": true} — loglikelihood: lm-eval sums
   `token_logprobs[ctxlen:-1]` and checks greediness against `max(top_logprobs[i].values())`.
5. POST /v1/completions {"prompt": [ids, ...], "model", "max_tokens", "temperature": 0,
   "stop": [..., eos], "seed"} — generate_until.
"""

from __future__ import annotations

import math
from typing import Any

from tests.conformance.conftest import MAX_MODEL_LEN, assert_equal, assert_same, parsed

EOS = "<|im_end|>"
SEED = 1234


def _all(servers: dict, method: str, path: str, body: Any = None) -> Any:
    """The Rust frontend's parsed answer, after checking the others give the same."""
    out = {}
    for mode, s in servers.items():
        r = s.post(path, body) if method == "POST" else s.http.get(path)
        assert r.status_code == 200, (mode, r.text)
        assert r.headers["content-type"] == "application/json", mode
        out[mode] = parsed(r)
    assert_same(out)
    return out["rust"]


def _model(servers: dict) -> str:
    return servers["rust"].http.get("/v1/models").json()["data"][0]["id"]


def _ids(servers: dict, text: str) -> list[int]:
    body = {"prompt": text, "add_special_tokens": False}
    return _all(servers, "POST", "/tokenize", body)["tokens"]


def test_tokenizer_info(servers: dict) -> None:
    info = _all(servers, "GET", "/tokenizer_info")
    assert info["eos_token"] == EOS and info["bos_token"] == "<|im_start|>"
    assert info["pad_token"] == EOS and info["unk_token"] == "<|endoftext|>"
    assert info["model_max_length"] == MAX_MODEL_LEN
    assert info["tokenizer_class"] and "added_tokens_decoder" not in info
    assert info["chat_template"].startswith("{% for message in messages %}")
    # lm-eval's eos/bos ids: the special tokens encode to exactly one id each
    assert _ids(servers, EOS) == [2] and _ids(servers, "<|im_start|>") == [1]


def test_tokenize_detokenize_round_trip(servers: dict) -> None:
    text = "Question: What is the capital of France?\nAnswer: Paris"
    ids = _ids(servers, text)
    assert len(ids) == 13
    assert _all(servers, "POST", "/detokenize", {"tokens": ids}) == {"prompt": text}


def _loglikelihood(servers: dict, prompt: Any) -> Any:
    return _all(servers, "POST", "/v1/completions", {
        "model": _model(servers), "prompt": prompt, "temperature": 0, "max_tokens": 1,
        "logprobs": 1, "seed": SEED, "echo": True})


def test_loglikelihood_request(servers: dict) -> None:
    ctx = _ids(servers, "Question: What is the capital of France?\nAnswer:")
    cont = _ids(servers, " Paris")
    value = _loglikelihood(servers, [ctx + cont])  # lm-eval sends a batch of id lists
    (choice,) = value["choices"]
    lp = choice["logprobs"]
    n = len(ctx) + len(cont)
    # every prompt token, then the one generated token
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n + 1
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"][0] == 0
    assert all(x < 0 for x in lp["token_logprobs"][1:])
    for tok, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
        assert tok in top.values() and 1 <= len(top) <= 2  # the top-1 and the token itself
    assert choice["text"].startswith("Question: What is the capital of France?\nAnswer: Paris")
    assert value["usage"]["prompt_tokens"] == n and value["usage"]["completion_tokens"] == 1
    # the echoed logprobs are vLLM's prompt_logprobs, as lm-eval would sum them
    prompt_lps = choice["prompt_logprobs"]
    assert len(prompt_lps) == n and prompt_lps[0] is None
    ids = ctx + cont
    for i in range(1, n):
        assert math.isclose(prompt_lps[i][str(ids[i])]["logprob"], lp["token_logprobs"][i])
        # lm-eval's is_greedy compares with max(top): that is the rank-1 token's logprob
        (best,) = [x["logprob"] for x in prompt_lps[i].values() if x["rank"] == 1]
        assert max(lp["top_logprobs"][i].values()) == best >= lp["token_logprobs"][i]


def test_loglikelihood_batch_and_single_prompt(servers: dict) -> None:
    a = _ids(servers, "The sky is blue")
    b = _ids(servers, "Two plus two is four")
    batch = _loglikelihood(servers, [a, b])
    assert [c["index"] for c in batch["choices"]] == [0, 1]
    assert [len(c["logprobs"]["tokens"]) for c in batch["choices"]] == [len(a) + 1, len(b) + 1]
    single = _loglikelihood(servers, a)  # batch_size 1 with a flat id list
    # (batch mates change the float sums a little)
    assert_equal(single["choices"][0]["logprobs"], batch["choices"][0]["logprobs"], 1e-4)


def test_loglikelihood_when_the_generated_token_is_eos(servers: dict) -> None:
    """lm-eval drops the last entry as the generated token: it must be there even when that
    token ends the sequence."""
    a = _ids(servers, "The sky is blue")
    value = _all(servers, "POST", "/v1/completions", {
        "prompt": [a], "temperature": 0, "max_tokens": 1, "logprobs": 1, "echo": True,
        "logit_bias": {"2": 100}})
    (choice,) = value["choices"]
    assert choice["finish_reason"] == "stop"
    assert len(choice["logprobs"]["tokens"]) == len(a) + 1
    assert choice["logprobs"]["tokens"][-1] == EOS


def test_generate_until_request(servers: dict) -> None:
    ids = _ids(servers, "The capital of France is")
    value = _all(servers, "POST", "/v1/completions", {
        "prompt": [ids], "model": _model(servers), "max_tokens": 12, "temperature": 0,
        "stop": ["\n", EOS], "seed": SEED})
    (choice,) = value["choices"]
    assert choice["text"] and "\n" not in choice["text"] and choice["logprobs"] is None

"""vLLM's `use_beam_search` through every frontend: the same JSON value for the same request,
n choices in score order equal to the offline LLM.beam_search beams (which tests/beam checks
against transformers), through the official `openai` client, the same 400 for each refused
combination, and nothing left running or holding KV blocks after a client hangs up."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from hybridllm import LLM, BeamSearchParams
from tests.conformance.conftest import API_KEY, ENGINE_FLAGS, MAX_MODEL_LEN, assert_same, parsed
from tests.conformance.test_errors import assert_same_error
from tests.golden.kinds import PROMPTS

C, P = "/v1/chat/completions", "/v1/completions"
HI = '[{"role":"user","content":"hi"}]'
CHAT = [{"role": "user", "content": "Name one primary color. One word."}]

CASES: list[tuple[str, dict[str, Any]]] = [
    (P, {"prompt": "The capital of France is", "max_tokens": 12, "n": 2,
         "use_beam_search": True, "ignore_eos": True}),
    (P, {"prompt": ["Water boils at", "List three colors:"], "max_tokens": 10, "n": 3,
         "use_beam_search": True, "length_penalty": 2.0}),
    (C, {"messages": CHAT, "max_tokens": 16, "n": 4, "use_beam_search": True}),
    (C, {"messages": CHAT, "max_tokens": 16, "n": 2, "use_beam_search": True,
         "include_stop_str_in_output": True, "length_penalty": 0.5, "temperature": 0}),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_same_beams_everywhere(servers: dict, case: tuple[str, dict[str, Any]]) -> None:
    path, body = case
    results = {}
    for mode, s in servers.items():
        r = s.post(path, body)
        assert r.status_code == 200, (mode, r.text)
        results[mode] = parsed(r)
    assert_same(results)
    prompts = len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1
    assert len(results["rust"]["choices"]) == body["n"] * prompts


def test_openai_client_equals_offline(servers: dict, model_path) -> None:
    """k = 2 and 4 on six prompts, ignore_eos, 24 tokens: every frontend's choices are the
    offline beams, in score order."""
    llm = LLM(model=str(model_path), max_model_len=MAX_MODEL_LEN,
              kv_cache_memory=int(ENGINE_FLAGS[3]))
    tok = llm.get_tokenizer()
    for k in (2, 4):
        offline = llm.beam_search(PROMPTS[:6], BeamSearchParams(k, 24, ignore_eos=True))
        want = [[tok.decode(s.tokens[len(tok.encode(p).ids) :]) for s in o.sequences]
                for p, o in zip(PROMPTS, offline)]
        for mode, s in servers.items():
            client = openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0)
            model = client.models.list().data[0].id

            def complete(prompt: str, client=client, model=model, k=k):
                return client.completions.create(
                    model=model, prompt=prompt, max_tokens=24, n=k, temperature=0,
                    extra_body={"use_beam_search": True, "ignore_eos": True})

            # The six requests at once: the server batches their beam groups (as the offline
            # call does), one server at a time.
            with ThreadPoolExecutor(len(want)) as pool:
                comps = list(pool.map(complete, PROMPTS[: len(want)]))
            for prompt, texts, comp in zip(PROMPTS, want, comps):
                assert [c.index for c in comp.choices] == list(range(k)), mode
                assert [c.text for c in comp.choices] == texts, (mode, prompt)
                assert comp.usage.completion_tokens == 24 * k, mode


BEAM_ERRORS: list[tuple[str, str, int, str | None]] = [
    (C, '{"messages":' + HI + ',"use_beam_search":true,"stream":true}', 400,
     "use_beam_search does not support streaming: set stream to false."),
    (P, '{"prompt":"hi","use_beam_search":true,"n":17}', 400,
     "n (the beam width) must be at most 16 (the server's --max-beam-width), got 17."),
    # Within --max-beam-width but wider than the engine's --max-num-seqs 8 (ENGINE_FLAGS).
    (C, '{"messages":' + HI + ',"use_beam_search":true,"n":9}', 400,
     "n (the beam width) must be at most 8 (the engine's --max-num-seqs: a beam search runs "
     "n sequences at once), got 9."),
    (P, '{"prompt":"hi","use_beam_search":true,"n":0}', 400, None),
    (P, '{"prompt":"hi","use_beam_search":true,"temperature":0.7}', 400,
     "temperature must be 0 with use_beam_search, got 0.7."),
    (C, '{"messages":' + HI + ',"use_beam_search":true,"logprobs":true}', 400,
     "logprobs are not supported with use_beam_search."),
    (P, '{"prompt":"hi","use_beam_search":true,"logprobs":21}', 400, None),
]


@pytest.mark.parametrize("case", BEAM_ERRORS, ids=[f"{i}" for i in range(len(BEAM_ERRORS))])
def test_beam_refusals(servers: dict, case: tuple) -> None:
    assert_same_error(servers, *case)
    param = {"stream": "stream", "n": "n", "temperature": "temperature"}
    body = case[1]
    for mode, s in servers.items():
        error = s.post(case[0], raw=body.encode()).json()["error"]
        named = next((v for k, v in param.items() if f'"{k}"' in body), "logprobs")
        assert error["param"] == named, (mode, error)


def _gauge(s: Any, name: str) -> float:
    text = s.http.get("/metrics").text
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, (s.kind, name)
    return float(m.group(1))


def test_disconnect_mid_search_frees_the_group(servers: dict) -> None:
    # Long enough (4 beams x 500 steps) that running to its end would take far longer than the
    # bound below: only an abort on the hang-up frees the group in time.
    body = {"prompt": "Once upon a time", "max_tokens": 500, "n": 4, "use_beam_search": True,
            "ignore_eos": True}
    for mode, s in servers.items():
        with pytest.raises(httpx.ReadTimeout):
            s.http.post(P, json=body, timeout=3.0)
        hung_up = time.monotonic()
        while time.monotonic() - hung_up < 10:
            if (_gauge(s, "hybridllm:num_requests_running") == 0
                    and _gauge(s, "hybridllm:kv_cache_usage_perc") == 0):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"{mode}: the beam group was not freed after the hang-up")
        print(f"\n{mode}: beam group freed {time.monotonic() - hung_up:.2f} s after the hang-up")
        # Still serving.
        r = s.post(P, {"prompt": "Hi", "max_tokens": 2, "n": 2, "use_beam_search": True})
        assert r.status_code == 200 and len(r.json()["choices"]) == 2, mode

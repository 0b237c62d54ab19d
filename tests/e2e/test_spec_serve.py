"""N-gram speculative decoding served (`serve --speculative-config`) by both frontends through
the official openai client: a copy-heavy chat answers, streamed and not, exactly the greedy
text of the offline engine without speculation, and /metrics counts the drafts as vLLM names
them (drafts, draft tokens, accepted tokens, accepted tokens by position)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import openai
import pytest

from hybridllm import LLM, SamplingParams
from hybridllm.bench.spec import COPY_ASKS, PARAGRAPHS
from tests.launch import Server, start, stop

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
        "prompt_lookup_min": 2}
MAX_TOKENS = 48
MESSAGES = [{"role": "user", "content": COPY_ASKS[0].format(PARAGRAPHS[1])}]


@pytest.fixture(scope="module")
def plain_text() -> str:
    """The greedy answer without speculation (offline engine)."""
    llm = LLM(max_model_len=512)
    out = llm.chat([MESSAGES], SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                   use_tqdm=False)
    del llm
    return out[0].outputs[0].text


@pytest.fixture(scope="module", params=["rust", "python"])
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(request.param, tmp_path_factory.mktemp("spec"), "--max-model-len", "512",
                "--speculative-config", json.dumps(SPEC))
    yield srv
    assert stop(srv) == 0


def _counters(text: str) -> dict[str, int]:
    return {m[0]: int(float(m[1])) for m in
            re.findall(r"^hybridllm:(spec_decode_\w+?(?:\{position=\"\d+\"\})?) (\S+)$", text,
                       re.M)}


def test_speculative_answers_equal_plain_greedy_and_are_counted(server: Server,
                                                                plain_text: str) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    before = _counters(server.http.get("/metrics").text)
    assert before["spec_decode_num_drafts_total"] == 0
    kw = dict(model=client.models.list().data[0].id, messages=MESSAGES, temperature=0,
              max_tokens=MAX_TOKENS)
    answer = client.chat.completions.create(**kw)
    assert answer.choices[0].message.content == plain_text
    assert answer.usage.completion_tokens == MAX_TOKENS  # the copy runs past the limit
    streamed = "".join(c.choices[0].delta.content or ""
                       for c in client.chat.completions.create(stream=True, **kw) if c.choices)
    assert streamed == plain_text
    after = _counters(server.http.get("/metrics").text)
    drafts = after["spec_decode_num_drafts_total"]
    draft_tokens = after["spec_decode_num_draft_tokens_total"]
    accepted = after["spec_decode_num_accepted_tokens_total"]
    # Two answers copying real prose: prompt lookup drafts, and some drafts are right.
    assert 0 < drafts and drafts <= draft_tokens <= 4 * drafts
    assert 0 < accepted <= draft_tokens
    per_pos = [after.get(f'spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}', 0)
               for i in range(4)]
    assert sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True)  # position i+1 needs position i accepted
    # Every accepted draft is an output token besides each verify step's own: two answers.
    assert accepted + drafts <= 2 * MAX_TOKENS

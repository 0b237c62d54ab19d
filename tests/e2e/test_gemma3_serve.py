"""Gemma 3 270M served by both frontends, with its own chat template, through the official
openai client: the greedy chat answer (streamed and not) is the same text on the Rust frontend,
on the Python fallback and from the offline LLM's chat(); the prompt the server rendered is
transformers' rendering of the folder's template (Google's published Gemma 3 template, written
by the conversion since the GGUF has none); /v1/models names the model.

The model is the base one: it does not end its turn, so the answers run to max_tokens (kept
small, as the servers run fp32 on CPU)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from hybridllm import LLM, SamplingParams
from hybridllm.models.chat_templates import GEMMA3_CHAT_TEMPLATE
from hybridllm.models.resolve import GEMMA3_MODEL, resolve_model
from tests.launch import Server, start, stop

MAX_TOKENS = 16
MAX_MODEL_LEN = "512"
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": "Name a primary colour."},
     {"role": "assistant", "content": "Red."},
     {"role": "user", "content": "  And another one?  "}],
]


@pytest.fixture(scope="module")
def folder() -> Path:
    return resolve_model(GEMMA3_MODEL)


@pytest.fixture(scope="module")
def offline(folder: Path) -> list[tuple[list[int], str]]:
    """(prompt ids, greedy text) of each chat from the offline LLM."""
    llm = LLM(model=GEMMA3_MODEL, max_model_len=int(MAX_MODEL_LEN))
    outs = llm.chat(CHATS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS), use_tqdm=False)
    result = [(list(o.prompt_token_ids), o.outputs[0].text) for o in outs]
    del llm
    return result


@pytest.fixture(scope="module", params=["rust", "python"])
def server(request: pytest.FixtureRequest, folder: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(request.param, tmp_path_factory.mktemp("gemma3"), "--max-model-len",
                MAX_MODEL_LEN, model=GEMMA3_MODEL)
    yield srv
    assert stop(srv) == 0


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def test_template_is_gemmas(folder: Path) -> None:
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(folder).chat_template == GEMMA3_CHAT_TEMPLATE


def test_models_names_it(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [GEMMA3_MODEL]


@pytest.mark.parametrize("index", range(len(CHATS)))
def test_chat_equals_offline_and_transformers_template(
    client: openai.OpenAI, folder: Path, offline: list[tuple[list[int], str]], index: int
) -> None:
    from transformers import AutoTokenizer

    messages = CHATS[index]
    kw = dict(model=GEMMA3_MODEL, messages=messages, temperature=0, max_tokens=MAX_TOKENS)
    full = client.chat.completions.create(**kw, extra_body={"return_token_ids": True})
    chunks = list(client.chat.completions.create(**kw, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    text = full.choices[0].message.content
    prompt_ids, offline_text = offline[index]
    assert text == offline_text
    assert streamed == text
    assert full.usage.completion_tokens == MAX_TOKENS
    # The server's prompt is transformers' (Jinja2) rendering of the same template, tokenized.
    tok = AutoTokenizer.from_pretrained(folder)
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("<bos><start_of_turn>user\n") and rendered.count("<bos>") == 1
    want = tok(rendered, add_special_tokens=False).input_ids
    assert full.model_extra["prompt_token_ids"] == want == prompt_ids


def test_roles_must_alternate(client: openai.OpenAI) -> None:
    """The template's own refusal reaches the client as a 400."""
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(openai.BadRequestError, match="alternate"):
        client.chat.completions.create(model=GEMMA3_MODEL, messages=messages, max_tokens=2)

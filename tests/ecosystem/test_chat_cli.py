"""`hybridllm chat` driven through a pseudo-terminal against `hybridllm serve --rust-frontend`,
and `hybridllm complete`. What the terminal shows is compared with the same greedy request
sent by the openai client; what the chat sent (its history, system prompt, clearing) is read
back exactly from the server's prompt-token counter."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pexpect
import pytest

from tests.e2e.conftest import API_KEY
from tests.launch import Server, metric, start, stop

MAX_TOKENS = 8
FLAGS = ["--api-key", API_KEY, "--temperature", "0", "--max-tokens", str(MAX_TOKENS)]


@pytest.fixture(scope="module")
def server(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start("rust", tmp_path_factory.mktemp("chat"), "--max-model-len", "512", "--api-key",
                API_KEY)
    yield srv
    assert stop(srv) == 0


def _reply(server: Server, messages: list[dict[str, str]]) -> str:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY)
    out = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages,
                                         temperature=0, max_tokens=MAX_TOKENS)
    return out.choices[0].message.content


def _prompt_tokens(server: Server, messages: list[dict[str, str]]) -> int:
    r = httpx.post(server.url + "/tokenize", json={"messages": messages},
                   headers={"Authorization": f"Bearer {API_KEY}"})
    return r.json()["count"]


def test_chat_in_a_terminal(server: Server) -> None:
    child = pexpect.spawn(sys.executable, ["-m", "hybridllm.cli.main", "chat", "--base-url",
                                           server.url + "/v1", *FLAGS],
                          encoding="utf-8", timeout=60, dimensions=(50, 200))
    child.expect("Chatting with SmolLM2-135M-Instruct")
    history: list[dict[str, str]] = []
    system: list[dict[str, str]] = []

    def turn(text: str) -> None:
        history.append({"role": "user", "content": text})
        sent = system + history
        expected = _reply(server, sent)  # counted too: read the counter after it
        before = metric(server, "hybridllm:prompt_tokens_total")
        child.expect_exact("> ")
        child.sendline(text)
        child.expect_exact(text + "\r\n")  # the terminal's echo of the line
        child.expect_exact(expected.replace("\n", "\r\n") + "\r\n")  # the streamed reply
        history.append({"role": "assistant", "content": expected})
        # exactly this conversation was sent: system prompt, history, the new line
        after = metric(server, "hybridllm:prompt_tokens_total")
        assert after - before == _prompt_tokens(server, sent), text

    turn("What is the capital of France?")
    turn("And of Germany?")  # sent with the first turn as history
    child.expect_exact("> ")
    child.sendline("/system You are a pirate.")
    child.expect_exact("(system prompt set)")
    system.append({"role": "system", "content": "You are a pirate."})
    turn("Who are you?")
    child.expect_exact("> ")
    child.sendline("/clear")
    child.expect_exact("(conversation cleared)")
    history.clear()
    turn("Hello!")  # only the system prompt and this line
    child.expect_exact("> ")
    child.sendline("/nope")
    child.expect_exact("(unknown command /nope; commands: /system TEXT, /clear, /exit)")
    child.expect_exact("> ")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_complete_one_shot(server: Server) -> None:
    prompt = "The capital of France is"
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY)
    expected = client.completions.create(model="SmolLM2-135M-Instruct", prompt=prompt,
                                         temperature=0, max_tokens=MAX_TOKENS).choices[0].text
    r = subprocess.run([sys.executable, "-m", "hybridllm.cli.main", "complete", prompt,
                        "--base-url", server.url + "/v1", *FLAGS],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected + "\n"

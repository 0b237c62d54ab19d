"""Deployment checks of #34, both frontends: behind a path-prefix proxy (`--root-path /llm`)
the official openai client with `base_url=.../llm/v1` works for chat, completions and
embeddings, whether the proxy strips the prefix or passes it on; with `--uds` the server
answers on a Unix socket (curl --unix-socket, and the openai client over it)."""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from hybridllm.models.resolve import DEFAULT_EMBEDDING_MODEL, resolve_model
from tests.launch import Server, both_frontends, start, stop

ROOT = "/llm"
NAME = "SmolLM2-135M-Instruct"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


class _StripProxy(BaseHTTPRequestHandler):
    """A reverse proxy that takes `ROOT` off the path (as an ingress rewrite does) and
    passes the answer on as it comes, chunk by chunk (streams included)."""

    protocol_version = "HTTP/1.1"
    upstream = ""

    def _forward(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        path = self.path[len(ROOT):] if self.path.startswith(ROOT + "/") else self.path
        up = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        conn.request(self.command, path, body, headers)
        resp = conn.getresponse()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(k, v)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        while chunk := resp.read1(65536):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        conn.close()

    do_GET = do_POST = _forward

    def log_message(self, *args: object) -> None:
        pass


def _proxy(upstream: str) -> Iterator[str]:
    handler = type("Proxy", (_StripProxy,), {"upstream": upstream})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def prefixed(tmp_path_factory: pytest.TempPathFactory, model_path: Path
             ) -> Iterator[dict[str, Server]]:
    yield from both_frontends(tmp_path_factory.mktemp, model_path, "--max-model-len", "512",
                              "--root-path", ROOT, "--served-model-name", NAME)


def _bases(s: Server) -> Iterator[tuple[str, str]]:
    """(how, base_url): the prefix passed on to the server, and taken off by a proxy."""
    yield "passed on", s.url + ROOT + "/v1"
    for url in _proxy(s.url):
        yield "stripped", url + ROOT + "/v1"


def test_openai_client_behind_a_prefix(prefixed: dict[str, Server]) -> None:
    kw = {"model": NAME, "temperature": 0, "max_tokens": 8}
    for kind, s in prefixed.items():
        direct = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        want_chat = direct.chat.completions.create(messages=CHAT, **kw).choices[0].message
        want_text = direct.completions.create(prompt="The sky is", **kw).choices[0].text
        assert want_chat.content and want_text, kind
        for how, base in _bases(s):
            client = openai.OpenAI(base_url=base, api_key="none")
            assert [m.id for m in client.models.list()] == [NAME], how
            chat = client.chat.completions.create(messages=CHAT, **kw)
            assert chat.choices[0].message.content == want_chat.content, (kind, how)
            text = client.completions.create(prompt="The sky is", **kw).choices[0].text
            assert text == want_text, (kind, how)
            stream = client.chat.completions.create(messages=CHAT, stream=True, **kw)
            joined = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert joined == want_chat.content, (kind, how)
        # A path that only shares the prefix's letters is not under it.
        assert httpx.get(s.url + ROOT + "x/v1/models").status_code == 404, kind
        assert httpx.get(s.url + ROOT + "/health").status_code == 200, kind


@pytest.fixture(scope="module")
def embedders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    yield from both_frontends(tmp_path_factory.mktemp, resolve_model(DEFAULT_EMBEDDING_MODEL),
                              "--root-path", ROOT, "--served-model-name", "all-MiniLM-L6-v2")


def test_embeddings_behind_a_prefix(embedders: dict[str, Server]) -> None:
    for kind, s in embedders.items():
        direct = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        want = direct.embeddings.create(model="all-MiniLM-L6-v2", input=["a cat", "a dog"])
        assert [len(d.embedding) for d in want.data] == [384, 384], kind
        for how, base in _bases(s):
            got = openai.OpenAI(base_url=base, api_key="none").embeddings.create(
                model="all-MiniLM-L6-v2", input=["a cat", "a dog"])
            assert [d.embedding for d in got.data] == [d.embedding for d in want.data], how


@pytest.mark.parametrize("kind", ["rust", "python"])
def test_unix_socket(kind: str, tmp_path: Path, model_path: Path) -> None:
    path = str(tmp_path / "api.sock")
    s = start(kind, tmp_path, "--uds", path, "--max-model-len", "512", "--disable-log-requests",
              "--served-model-name", NAME, model=model_path, wait="log")
    try:
        assert Path(path).is_socket()
        curl = ["curl", "-sS", "--unix-socket", path, "-w", "\\n%{http_code}"]
        out = subprocess.run([*curl, "http://localhost/health"], capture_output=True,
                             text=True, check=True).stdout
        assert out == "\n200", out
        body = {"model": NAME, "messages": CHAT, "max_tokens": 5,
                "temperature": 0, "ignore_eos": True}
        out = subprocess.run([*curl, "-H", "content-type: application/json", "-d",
                              json.dumps(body), "http://localhost/v1/chat/completions"],
                             capture_output=True, text=True, check=True).stdout
        text, status = out.rsplit("\n", 1)
        answer = json.loads(text)
        assert status == "200" and answer["object"] == "chat.completion", out
        assert answer["usage"]["completion_tokens"] == 5
        # The openai client over the same socket gives the same greedy reply.
        client = openai.OpenAI(base_url="http://localhost/v1", api_key="none",
                               http_client=httpx.Client(transport=httpx.HTTPTransport(uds=path)))
        again = client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=5,
                                               temperature=0, extra_body={"ignore_eos": True})
        assert again.choices[0].message.content == answer["choices"][0]["message"]["content"]
    finally:
        assert stop(s) == 0

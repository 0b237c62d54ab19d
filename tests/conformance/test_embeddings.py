"""/v1/embeddings on the bundled all-MiniLM-L6-v2, three frontends: the same bodies (vectors
within 1e-6: batch mates may differ), the same errors, the reference tokenizer's ids, and
sentence-transformers' embeddings through the official openai client, float and base64."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from hybridllm.models.resolve import DEFAULT_EMBEDDING_MODEL, resolve_model
from tests import golden
from tests.conformance.conftest import API_KEY, Server, assert_same, parsed, start_all
from tests.conformance.test_api_fields_doc import walk_refused
from tests.conformance.test_errors import TYPE_ERROR, Foreign, assert_same_error
from tests.golden.kinds import decode_embeddings, embedding_model
from tests.openapi_doc import response_validator
from tests.pooling.conftest import reference_ids
from tests.pooling.corpus import CORPUS

E = "/v1/embeddings"
MAX_LEN = 256  # the model's max_seq_length
FLAGS = ["--max-num-seqs", "64", "--served-model-name", "all-MiniLM-L6-v2"]
MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def embed_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    yield from start_all(tmp_path_factory, resolve_model(DEFAULT_EMBEDDING_MODEL), FLAGS)


@pytest.fixture(scope="module")
def embed_folder() -> Path:
    return resolve_model(DEFAULT_EMBEDDING_MODEL)


def _decoded(body: Any) -> Any:
    """base64 vectors as float lists, so that bodies compare within a tolerance."""
    for d in body.get("data", []):
        if isinstance(d.get("embedding"), str):
            raw = base64.b64decode(d["embedding"])
            d["embedding"] = np.frombuffer(raw, dtype="<f4").astype(float).tolist()
    return body


def _same(servers: dict, body: Any, path: str = E) -> Any:
    out = {}
    for mode, s in servers.items():
        r = s.post(path, body)
        assert r.status_code == 200, (mode, r.text)
        assert r.headers["content-type"] == "application/json", mode
        out[mode] = parsed(r)
        assert response_validator(path, "POST", 200).is_valid(out[mode]), (mode, r.text[:300])
        out[mode] = _decoded(out[mode])
    assert_same(out, tol=1e-6)
    return out["rust"]


BODIES: list[dict[str, Any]] = [
    {"input": "The cat sat on the mat."},
    {"input": ["hello", "Hello world!", "日本語のテキスト 🎉"], "encoding_format": "float"},
    {"input": ["hello", "Hello world!"], "encoding_format": "base64"},
    {"input": [101, 7592, 102]},
    {"input": [[101, 7592, 102], [101, 2088, 2003, 102]], "encoding_format": "base64"},
    {"input": "word " * 400, "truncate_prompt_tokens": -1},
    {"input": ["word " * 400, "a b c d e f"], "truncate_prompt_tokens": 5},
    {"input": [[101] + [2088] * 300 + [102]], "truncate_prompt_tokens": 4},
    {"input": "Hello world", "add_special_tokens": False},
    {"input": "Hello world", "normalize": False, "dimensions": 384, "user": "u-1"},
    {"input": "Hello", "model": "all-MiniLM-L6-v2"},
    {"input": "Hello world", "use_activation": False},  # vLLM's current name for normalize
    # No KV cache is shared between embedding requests: a salt changes nothing.
    {"input": "Hello world", "cache_salt": "tenant-a", "padding": "do_not_pad"},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_bodies_are_identical(embed_servers: dict, body: dict) -> None:
    value = _same(embed_servers, body)
    inputs = body["input"]
    n = 1 if isinstance(inputs, str) or isinstance(inputs[0], int) else len(inputs)
    assert [d["index"] for d in value["data"]] == list(range(n))
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 384
               for d in value["data"])
    assert value["object"] == "list" and value["model"] == "all-MiniLM-L6-v2"
    usage = value["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] and usage["completion_tokens"] == 0
    norms = [np.linalg.norm(d["embedding"]) for d in value["data"]]
    if body.get("normalize", body.get("use_activation")) is False:
        assert min(norms) > 1.5  # mean-pooled, not normalized
    else:
        assert np.allclose(norms, 1.0, atol=1e-5)


def test_usage_counts_truncated_tokens(embed_servers: dict) -> None:
    assert _same(embed_servers, BODIES[6])["usage"]["prompt_tokens"] == 5 + 5
    assert _same(embed_servers, BODIES[5])["usage"]["prompt_tokens"] == MAX_LEN
    assert _same(embed_servers, BODIES[7])["usage"]["prompt_tokens"] == 4
    assert _same(embed_servers, BODIES[8])["usage"]["prompt_tokens"] == 2  # no [CLS]/[SEP]


def test_token_ids_equal_reference(embed_servers: dict, embed_folder: Path) -> None:
    """Each frontend's ids (what /tokenize shows, and what usage counts) are transformers'."""
    from transformers import AutoTokenizer

    ref = reference_ids(AutoTokenizer.from_pretrained(str(embed_folder)), CORPUS, 10**6)
    for mode, s in embed_servers.items():
        for text, ids in zip(CORPUS, ref):
            r = s.post("/tokenize", {"prompt": text})
            assert r.status_code == 200 and r.json()["tokens"] == ids, (mode, text[:40])


def _embed(client: openai.OpenAI, fmt: str | None) -> np.ndarray:
    """fmt None: the client asks for base64 itself and decodes it; asked for explicitly, it
    hands the base64 text over as it came."""
    kwargs: dict[str, Any] = {} if fmt is None else {"encoding_format": fmt}
    r = client.embeddings.create(model="all-MiniLM-L6-v2", input=CORPUS,
                                 extra_body={"truncate_prompt_tokens": -1}, **kwargs)
    assert [d.index for d in r.data] == list(range(len(CORPUS)))
    if fmt == "base64":
        return np.array([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4")  # type: ignore[arg-type]
                         for d in r.data], dtype=np.float64)
    return np.array([d.embedding for d in r.data], dtype=np.float64)


def test_openai_client_matches_sentence_transformers(
    embed_servers: dict, embed_folder: Path
) -> None:
    assert len(CORPUS) >= 50
    assert embed_folder.resolve() == embedding_model().resolve()
    # sentence-transformers' embeddings (tests/golden; test_live.py recomputes some).
    ref = decode_embeddings(golden.load("st_embeddings")["corpus"], len(CORPUS))
    for mode, s in embed_servers.items():
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0)
        for fmt in ("float", "base64", None):
            ours = _embed(client, fmt)
            assert ours.shape == ref.shape == (len(CORPUS), 384)
            cos = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
            worst = int(cos.argmin())
            assert cos.min() >= MIN_COSINE, (mode, fmt, CORPUS[worst][:50], cos.min())


V = "30522"
ERRORS: list[tuple[str, int, str | Foreign | None]] = [
    ('{"input":[]}', 400, "input must not be empty."),
    ('{"input":""}', 400, "input must not be an empty string."),
    ('{"input":["a",""]}', 400, "input[1] must not be an empty string."),
    ('{"input":[[101],[]]}', 400, "input[1] must not be an empty list of token ids."),
    ('{"input":[101,30522]}', 400, f"input: token id 30522 is out of vocabulary (size {V})."),
    ('{"input":[[5],[-1]]}', 400, f"input[1]: token id -1 is out of vocabulary (size {V})."),
    ('{"input":[[5],[1.5]]}', 400, "input[1] must be a list of token ids (integers)."),
    ('{"input":["a",[5]]}', 400, None),
    ('{"input":[true]}', 400, None),
    ('{"input":5}', 400, None),
    ('{"input":null}', 400, None),
    ('{"input":{"a":1}}', 400, None),
    ('{"input":' + json.dumps(["x"] * 2049) + "}", 400,
     "input holds 2049 inputs; at most 2048 are allowed per request."),
    ('{"input":"' + "word " * 300 + '"}', 400, "input has 302 tokens, more than the model's "
     "maximum input length of 256 tokens; pass truncate_prompt_tokens to truncate it."),
    ('{"input":["a","' + "word " * 300 + '"]}', 400, None),
    ('{"input":"   ","add_special_tokens":false}', 400,
     "input has no tokens after tokenization."),
    ('{"input":"a","truncate_prompt_tokens":0}', 400, None),
    ('{"input":"a","truncate_prompt_tokens":-2}', 400, None),
    ('{"input":"a","truncate_prompt_tokens":257}', 400, "truncate_prompt_tokens (257) is "
     "larger than the model's maximum input length of 256 tokens."),
    ('{"input":"a b c","truncate_prompt_tokens":2}', 400, None),
    ('{"input":"a","encoding_format":"int8"}', 400,
     "encoding_format must be 'float', 'base64', 'bytes' or 'bytes_only', got 'int8'."),
    ('{"input":"a","dimensions":128}', 400, None),
    ('{"input":"a","dimensions":"x"}', 400, TYPE_ERROR),
    ('{"input":"a","encoding_format":1}', 400, TYPE_ERROR),
    ('{"input":"a","truncate_prompt_tokens":1.5}', 400, TYPE_ERROR),
    ('{"input":"a","normalize":"yes"}', 400, TYPE_ERROR),
    ("{}", 400, "input is required (or, vLLM's chat form, messages)."),
    ('{"input":"a","model":"nope"}', 404, "The model `nope` does not exist."),
    ('{"input":"a","cache_salt":""}', 400, "cache_salt must be a non-empty string."),
    ('{"input":"a","priority":2}', 400, "priority is not supported: an embedding step takes "
     "every waiting input in arrival order."),
    ('{"input":"a","embed_dtype":"fp8_e4m3"}', 400, "embed_dtype must be 'float32', "
     "'float16' or 'bfloat16', got 'fp8_e4m3'."),
    ('{"input":"a","endianness":"middle"}', 400, "endianness must be 'native', 'little' or "
     "'big', got 'middle'."),
    ('{"input":"a","truncation_side":"left"}', 400, "truncation_side is not supported: "
     'truncate_prompt_tokens keeps an input\'s first tokens ("right" is served).'),
]
PARAMS = {"input": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 26],
          "truncate_prompt_tokens": [16, 17, 18, 19], "encoding_format": [20],
          "dimensions": [21], "priority": [len(ERRORS) - 4], "embed_dtype": [len(ERRORS) - 3],
          "endianness": [len(ERRORS) - 2], "truncation_side": [len(ERRORS) - 1],
          "cache_salt": [len(ERRORS) - 5]}


@pytest.mark.parametrize("case", ERRORS, ids=range(len(ERRORS)))
def test_errors_are_identical(embed_servers: dict, case: tuple) -> None:
    raw, status, message = case
    assert_same_error(embed_servers, E, raw, status, message)
    i = ERRORS.index(case)
    want = next((p for p, cases in PARAMS.items() if i in cases), None)
    if want is not None:  # the field and the limit are named
        r = embed_servers["rust"].post(E, raw=raw.encode())
        assert r.json()["error"]["param"] == want
    for s in embed_servers.values():  # and the server keeps serving
        assert s.post(E, {"input": "still here"}).status_code == 200


def test_models_tokenize_and_other_endpoints(embed_servers: dict) -> None:
    models = {m: parsed(s.http.get("/v1/models")) for m, s in embed_servers.items()}
    assert_same(models, tol=0.0)
    assert models["rust"]["data"][0]["id"] == "all-MiniLM-L6-v2"
    assert models["rust"]["data"][0]["max_model_len"] == MAX_LEN
    info = {m: parsed(s.http.get("/tokenizer_info")) for m, s in embed_servers.items()}
    assert_same(info, tol=0.0)
    assert info["rust"]["model_max_length"] == MAX_LEN
    msg = ("The model does not support the {} API: `all-MiniLM-L6-v2` is an embedding model "
           "(task 'embed').")
    assert_same_error(embed_servers, "/v1/chat/completions",
                      '{"messages":[{"role":"user","content":"hi"}]}', 400,
                      msg.format("Chat Completions"))
    assert_same_error(embed_servers, "/v1/completions", '{"prompt":"hi"}', 400,
                      msg.format("Completions"))


def test_generative_model_refuses_embeddings(servers: dict) -> None:
    name = servers["rust"].http.get("/v1/models").json()["data"][0]["id"]
    assert_same_error(servers, E, '{"input":"hi"}', 400,
                      f"The model does not support the Embeddings API: `{name}` is a generative "
                      "model (task 'generate').")


def test_every_refused_field_is_a_400_naming_it(embed_servers: dict) -> None:
    """docs/api_fields.md's refused embedding rows (multimodal options, padding, ...),
    walked as test_api_fields_doc walks the generate endpoints'."""
    walk_refused(embed_servers, "EmbeddingCompletionRequest")


def test_request_id_names_the_response(embed_servers: dict) -> None:
    """vLLM's: `embd-<request_id>`, an X-Request-Id header winning; the same request id
    twice at once still runs (the engine's ids stay unique)."""
    bodies = {}
    for mode, s in embed_servers.items():
        r = s.post(E, {"input": ["a", "b"], "request_id": "my-embed-1"})
        assert r.json()["id"] == "embd-my-embed-1", mode
        r = s.http.post(E, json={"input": "a", "request_id": "body-id"},
                        headers={"X-Request-Id": "header-id"})
        assert r.json()["id"] == "embd-header-id", mode
        with ThreadPoolExecutor(4) as pool:
            same = list(pool.map(s.post, [E] * 4, [{"input": "c", "request_id": "dup"}] * 4))
        assert [x.json()["id"] for x in same] == ["embd-dup"] * 4, mode
        bad = s.post(E, {"input": "a", "request_id": ""})
        assert bad.status_code == 400, mode
        bodies[mode] = bad.json()
    assert_same(bodies)
    assert bodies["rust"]["error"] == {
        "message": "request_id must be 1 to 512 bytes long, got 0.",
        "type": "BadRequestError", "param": "request_id", "code": 400}


def _waiting(s: Server) -> float:
    text = s.http.get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("hybridllm:num_requests_waiting"))
    return float(line.split()[-1])


def test_client_gone_frees_its_inputs(embed_servers: dict) -> None:
    """A request the client gave up on leaves the engine: its queued inputs never run."""
    body = {"input": ["word " * 250] * 2048, "truncate_prompt_tokens": -1}
    for mode, s in embed_servers.items():
        with pytest.raises(httpx.TimeoutException):
            s.http.post(E, json=body, timeout=1.5)
        deadline = time.monotonic() + 15
        while _waiting(s) > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _waiting(s) == 0, (mode, s.log.read_text()[-3000:])
        t0 = time.monotonic()
        assert s.post(E, {"input": "next"}).status_code == 200
        assert time.monotonic() - t0 < 5, mode


def test_invocations_of_an_embedding_model(embed_servers: dict) -> None:
    """vLLM's /invocations on an embedding model: `input` is an embeddings request."""
    body = {"input": ["hello", "Hello world!"]}
    for mode, s in embed_servers.items():
        via = _decoded(parsed(s.post("/invocations", body)))
        direct = _decoded(parsed(s.post(E, body)))
        assert via == direct, mode
        r = s.post("/invocations", {"prompt": "x"})
        assert r.status_code == 400 and r.json()["error"]["message"].endswith(
            "['EmbeddingCompletionRequest', 'EmbeddingChatRequest']"), mode


def test_pooling_endpoint(embed_servers: dict, servers: dict) -> None:
    """vLLM's /pooling: the embeddings of the same inputs as `pooling` objects (`data`), the
    model's own task `embed` or none; another task or `dimensions` is a 400 naming it; a
    generation model has no Pooling API (400, not 404)."""
    body = {"input": ["hello", "Hello world!"]}
    for mode, s in embed_servers.items():
        direct = _decoded(parsed(s.post(E, body)))
        for extra in ({}, {"task": "embed"}, {"encoding_format": "base64"}):
            r = s.post("/pooling", {**body, **extra})
            assert r.status_code == 200, (mode, r.text)
            raw = r.json()
            assert raw["id"].startswith("pooling-") and raw["object"] == "list", mode
            assert [(d["index"], d["object"]) for d in raw["data"]] == [
                (0, "pooling"), (1, "pooling")], mode
            for d in raw["data"]:
                d["embedding"] = d.pop("data")
            pooled = _decoded(raw)
            # As float32 (base64's exact values; JSON's shortest decimal forms of the same).
            got = np.asarray([d["embedding"] for d in pooled["data"]], dtype=np.float32)
            want = np.asarray([d["embedding"] for d in direct["data"]], dtype=np.float32)
            assert np.array_equal(got, want), (mode, extra)
            assert pooled["usage"] == direct["usage"], mode
        for field, value, message in (
                ("task", "classify", "Unsupported task: 'classify' Supported tasks: ('embed',)"),
                ("dimensions", 384, "dimensions is currently not supported")):
            r = s.post("/pooling", {**body, field: value})
            assert r.status_code == 400 and r.json()["error"]["param"] == field, (mode, r.text)
            assert r.json()["error"]["message"] == message, mode
    for mode, s in servers.items():
        r = s.post("/pooling", body)
        assert r.status_code == 400, (mode, r.text)
        assert r.json()["error"]["message"] == "The model does not support Pooling API", mode


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("endianness", ["native", "little", "big"])
def test_embed_dtype_and_endianness(embed_servers: dict, dtype: str, endianness: str) -> None:
    """vLLM's base64 options: the float vector cast to `embed_dtype` (round to nearest even,
    as torch casts) in `endianness` byte order; floats ignore them, as vLLM's."""
    import torch

    body = {"input": ["hello", "Hello world!"]}
    for mode, s in embed_servers.items():
        floats = parsed(s.post(E, body))["data"]
        r = s.post(E, {**body, "encoding_format": "base64", "embed_dtype": dtype,
                       "endianness": endianness})
        assert r.status_code == 200, (mode, r.text)
        wide = dtype == "float32"
        unsigned = ">" if endianness == "big" else "<"
        unsigned += "u4" if wide else "u2"
        for got, want in zip(r.json()["data"], floats):
            raw = np.frombuffer(base64.b64decode(got["embedding"]), dtype=unsigned)
            cast = torch.tensor(np.asarray(want["embedding"], dtype=np.float32))
            bits = cast.to(getattr(torch, dtype)).view(torch.int32 if wide else torch.int16)
            expect = bits.numpy().astype(np.uint32 if wide else np.uint16)
            assert np.array_equal(raw, expect), (mode, dtype, endianness)
        same = parsed(s.post(E, {**body, "embed_dtype": dtype, "endianness": endianness}))
        assert same["data"] == floats, mode  # encoding_format float: no effect
    r = embed_servers["rust"].post(E, {**body, "embed_dtype": "fp8_e4m3"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "embed_dtype"


@pytest.mark.parametrize(("dtype", "endianness"),
                         [("float32", "native"), ("float16", "big"), ("bfloat16", "little")])
def test_bytes_encoding_as_vllm(embed_servers: dict, dtype: str, endianness: str) -> None:
    """vLLM's encoding_format "bytes" (pooling/embed/serving.py and pooling/utils.py,
    vLLM main at 00d8e27a / 055e47c2): the body is every vector's bytes one after the other
    (application/octet-stream), the base64 answer's bytes exactly; the `metadata` header is
    json.dumps of {id, created, model, data: [{index, embed_dtype, endianness, start, end,
    shape}], usage}; "bytes_only" is the same body without the header."""
    body = {"input": ["hello", "Hello world!"], "embed_dtype": dtype, "endianness": endianness,
            "request_id": "bytes-1"}
    width = 4 if dtype == "float32" else 2
    for mode, s in embed_servers.items():
        b64 = s.post(E, {**body, "encoding_format": "base64"}).json()
        want = b"".join(base64.b64decode(d["embedding"]) for d in b64["data"])
        r = s.post(E, {**body, "encoding_format": "bytes"})
        assert r.status_code == 200, (mode, r.text)
        assert r.headers["content-type"] == "application/octet-stream", mode
        assert r.content == want, mode
        meta_text = r.headers["metadata"]
        meta = json.loads(meta_text)
        assert meta_text == json.dumps(meta), mode  # Python's separators, as vLLM's
        assert meta["created"] > 0
        assert {**meta, "created": 0} == {
            "id": "embd-bytes-1", "created": 0, "model": "all-MiniLM-L6-v2",
            "data": [{"index": i, "embed_dtype": dtype, "endianness": endianness,
                      "start": i * 384 * width, "end": (i + 1) * 384 * width, "shape": [384]}
                     for i in range(2)],
            "usage": {"prompt_tokens": b64["usage"]["prompt_tokens"],
                      "total_tokens": b64["usage"]["total_tokens"]}}, mode
        only = s.post(E, {**body, "encoding_format": "bytes_only"})
        assert only.status_code == 200 and only.content == want, mode
        assert "metadata" not in only.headers, mode


def test_chat_form_as_vllm(embed_servers: dict) -> None:
    """vLLM's EmbeddingChatRequest (pooling/base/protocol.py at 020638a6): messages rendered
    by the chat template (all-MiniLM-L6-v2 has none: the request's), embedded as one input
    without special tokens by default; the same vector and usage as that text given as input
    with add_special_tokens false. Both input and messages, or no template, are 400s."""
    template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    turns = [{"role": "user", "content": "Hello world"}, {"role": "assistant", "content": "Hi"}]
    text = "user: Hello world\nassistant: Hi\n"
    for mode, s in embed_servers.items():
        r = s.post(E, {"messages": turns, "chat_template": template})
        assert r.status_code == 200, (mode, r.text)
        chat = r.json()
        plain = s.post(E, {"input": text, "add_special_tokens": False}).json()
        assert chat["usage"] == plain["usage"], mode
        assert np.allclose(chat["data"][0]["embedding"], plain["data"][0]["embedding"],
                           atol=1e-6), mode
        with_special = s.post(E, {"messages": turns, "chat_template": template,
                                  "add_special_tokens": True}).json()
        assert with_special["usage"]["prompt_tokens"] == chat["usage"]["prompt_tokens"] + 2
        both = s.post(E, {"input": "x", "messages": turns, "chat_template": template})
        assert both.status_code == 400 and both.json()["error"]["param"] == "messages", mode
        none = s.post(E, {"messages": turns})
        assert none.status_code == 400, mode
        assert none.json()["error"]["message"] == (
            "This model has no chat template; pass `chat_template` or use /v1/completions.")

"""vLLM's chunked processing of long embedding inputs (`--pooler-config
'{"enable_chunked_processing": true, "max_embed_len": N}'`), three frontends on the bundled
all-MiniLM-L6-v2 (256 tokens).

As vLLM's OpenAIServingEmbedding (entrypoints/pooling/embed/serving.py, `_process_chunked_request`
and `_collect_batch`): an input longer than max_model_len is cut into pieces of max_model_len
tokens of its full ids (the first keeps [CLS], the last [SEP]), each piece is pooled (and
normalized as the request asks) as an input of its own, and the answer is the pieces' vectors
averaged with each weighted by its token count, not normalized again; usage counts the whole
input; an input over max_embed_len is vLLM's 400."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import numpy as np
import openai
import pytest

from hybridllm.config import EngineArgs
from hybridllm.models.resolve import DEFAULT_EMBEDDING_MODEL, DEFAULT_MODEL, resolve_model
from tests.conformance.conftest import API_KEY, Server, start_all
from tests.pooling.corpus import CORPUS

E = "/v1/embeddings"
MAX_LEN = 256  # the model's max_seq_length: the piece size
MAX_EMBED_LEN = 1000
POOLER = {"enable_chunked_processing": True, "max_embed_len": MAX_EMBED_LEN}
FLAGS = ["--max-num-seqs", "64", "--served-model-name", "all-MiniLM-L6-v2",
         "--pooler-config", json.dumps(POOLER)]
LONG = " ".join(CORPUS[:42])  # real sentences, 728 tokens: pieces of 256, 256 and 216


@pytest.fixture(scope="module")
def chunk_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    yield from start_all(tmp_path_factory, resolve_model(DEFAULT_EMBEDDING_MODEL), FLAGS)


def _ids(s: Server, text: str) -> list[int]:
    r = s.post("/tokenize", {"prompt": text})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def _vectors(s: Server, body: dict) -> tuple[np.ndarray, dict]:
    r = s.post(E, body)
    assert r.status_code == 200, r.text
    out = r.json()
    return np.asarray([d["embedding"] for d in out["data"]], dtype=np.float64), out["usage"]


def _pieces_mean(s: Server, ids: list[int], normalize: bool = True) -> np.ndarray:
    """The pieces embedded as id inputs of their own, averaged by token count."""
    pieces = [ids[i:i + MAX_LEN] for i in range(0, len(ids), MAX_LEN)]
    vecs, _ = _vectors(s, {"input": pieces, "normalize": normalize})
    weights = np.asarray([len(p) for p in pieces], dtype=np.float64)
    return (vecs * weights[:, None]).sum(0) / weights.sum()


def test_long_input_is_the_token_weighted_mean_of_its_pieces(chunk_servers: dict) -> None:
    answers = {}
    for mode, s in chunk_servers.items():
        ids = _ids(s, LONG)
        assert 2 * MAX_LEN < len(ids) <= MAX_EMBED_LEN, len(ids)  # three pieces, the last short
        got, usage = _vectors(s, {"input": LONG})
        assert got.shape == (1, 384), mode
        assert usage["prompt_tokens"] == usage["total_tokens"] == len(ids), mode
        want = _pieces_mean(s, ids)
        assert np.abs(got[0] - want).max() < 1e-6, mode
        # The mean of unit vectors pointing different ways: shorter than 1, left so (vLLM).
        assert 0.5 < np.linalg.norm(got[0]) < 0.999, (mode, np.linalg.norm(got[0]))
        # Not what the first 256 tokens alone give (truncation would).
        first, _ = _vectors(s, {"input": [ids[:MAX_LEN]]})
        assert np.abs(got[0] - first[0]).max() > 1e-3, mode
        raw, _ = _vectors(s, {"input": LONG, "normalize": False})
        assert np.abs(raw[0] - _pieces_mean(s, ids, normalize=False)).max() < 1e-5, mode
        answers[mode] = got[0]
    for mode, v in answers.items():
        assert np.abs(v - answers["rust"]).max() < 1e-6, mode


def test_long_and_short_inputs_in_one_request(chunk_servers: dict) -> None:
    """Each input keeps its index: a long one between short ones gets its own mean."""
    for mode, s in chunk_servers.items():
        short_a, short_b = "Hello world!", "The cat sat on the mat."
        mixed, usage = _vectors(s, {"input": [short_a, LONG, short_b]})
        alone, _ = _vectors(s, {"input": [short_a, short_b]})
        long_alone, _ = _vectors(s, {"input": LONG})
        assert mixed.shape == (3, 384), mode
        assert np.abs(mixed[[0, 2]] - alone).max() < 1e-6, mode
        assert np.abs(mixed[1] - long_alone[0]).max() < 1e-6, mode
        n = len(_ids(s, LONG)) + len(_ids(s, short_a)) + len(_ids(s, short_b))
        assert usage["prompt_tokens"] == n, mode


def test_every_encoding_and_pooling_merge_the_pieces(chunk_servers: dict) -> None:
    """base64, vLLM's raw bytes and /pooling carry the same merged vector."""
    for mode, s in chunk_servers.items():
        want, _ = _vectors(s, {"input": LONG})
        b64 = s.post(E, {"input": LONG, "encoding_format": "base64"}).json()
        got = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
        assert np.array_equal(got, want[0].astype(np.float32)), mode
        r = s.post(E, {"input": LONG, "encoding_format": "bytes", "embed_dtype": "float32",
                       "endianness": "little"})
        assert r.status_code == 200, (mode, r.text)
        meta = json.loads(r.headers["metadata"])
        assert [d["shape"] for d in meta["data"]] == [[384]], mode
        assert np.array_equal(np.frombuffer(r.content, dtype="<f4"),
                              want[0].astype(np.float32)), mode
        pooled = s.post("/pooling", {"input": LONG}).json()
        assert np.array_equal(np.asarray(pooled["data"][0]["data"], dtype=np.float32),
                              want[0].astype(np.float32)), mode


def test_over_max_embed_len_is_vllms_400(chunk_servers: dict) -> None:
    for mode, s in chunk_servers.items():
        for n in (MAX_EMBED_LEN + 1, 3000):
            r = s.post(E, {"input": [[101] + [2088] * (n - 2) + [102]]})
            assert r.status_code == 400, (mode, r.text)
            err = r.json()["error"]
            assert err["param"] == "input", mode
            assert err["message"] == (
                f"This model's maximum embedding input length is {MAX_EMBED_LEN} tokens. "
                f"However, you requested {n} tokens in the input for embedding generation. "
                "Please reduce the length of the input."), mode
        ok, usage = _vectors(s, {"input": [[101] + [2088] * (MAX_EMBED_LEN - 2) + [102]]})
        assert ok.shape == (1, 384) and usage["prompt_tokens"] == MAX_EMBED_LEN, mode


def test_openai_client_embeds_a_long_text(chunk_servers: dict) -> None:
    s = chunk_servers["rust"]
    client = openai.OpenAI(base_url=f"{s.url}/v1", api_key=API_KEY)
    out = client.embeddings.create(model="all-MiniLM-L6-v2", input=LONG)
    want, usage = _vectors(s, {"input": LONG})
    assert out.usage.prompt_tokens == usage["prompt_tokens"] > 2 * MAX_LEN
    assert np.abs(np.asarray(out.data[0].embedding) - want[0]).max() < 1e-6


def test_pooler_config_is_checked_at_start_up() -> None:
    embed = str(resolve_model(DEFAULT_EMBEDDING_MODEL))
    pooler = EngineArgs(model=embed, pooler_config=json.dumps(
        {"pooling_type": "CLS", "normalize": False, **POOLER})).resolve().pooler
    assert (pooler.pooling_type, pooler.normalize, pooler.enable_chunked_processing,
            pooler.max_embed_len) == ("cls", False, True, MAX_EMBED_LEN)
    assert EngineArgs(model=embed).resolve().pooler.enable_chunked_processing is False
    for value, message in (
            ('{"softmax": true}', "pooler_config: unknown field(s) softmax; allowed: "
                                  "pooling_type, normalize, enable_chunked_processing, "
                                  "max_embed_len"),
            ('{"pooling_type": "STEP"}', "pooler_config.pooling_type must be one of auto, "
                                         "MEAN, CLS, LAST; got 'STEP'"),
            ('{"max_embed_len": 0}', "pooler_config.max_embed_len must be an integer of at "
                                     "least 1; got 0"),
            ('{"enable_chunked_processing": "yes"}',
             "pooler_config.enable_chunked_processing must be true or false; got 'yes'"),
            ("[1]", "pooler_config must be a JSON object (a dict), got list")):
        with pytest.raises(ValueError) as e:
            EngineArgs(model=embed, pooler_config=value).resolve()
        assert str(e.value) == message
    with pytest.raises(ValueError, match="is a generative model; pooling settings apply"):
        EngineArgs(model=DEFAULT_MODEL, pooler_config="{}").resolve()


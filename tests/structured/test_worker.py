"""Structured outputs through a real worker over gRPC: the grammar travels in SamplingParams
(field `grammar`, llguidance's serialized form); a grammar that does not compile is refused
with INVALID_ARGUMENT while the good request beside it on the same call finishes; so is a
beam search with one."""

from __future__ import annotations

import re

import grpc

from hybridllm import SamplingParams, StructuredOutputsParams
from hybridllm.proto import engine_pb2 as pb
from hybridllm.server.engine_client import GrpcEngineClient
from tests.structured.test_structured_outputs import CODE
from tests.worker.conftest import worker  # noqa: F401 - the fixture
from tests.worker.test_generate_stream import StreamCall, tokens_of


async def test_bad_grammar_refused_alone_good_one_finishes(worker: str, tokenizer) -> None:  # noqa: F811
    client = GrpcEngineClient(worker)
    await client.start()
    ids = tokenizer.encode("Product code:").ids
    good = SamplingParams(temperature=0, max_tokens=24,
                          structured_outputs=StructuredOutputsParams(regex=CODE))
    call = StreamCall(client)
    call.generate("good", ids, good)
    call.generate("bad", ids, pb.SamplingParams(grammar='start: /(ab/'))
    call.generate("lark", ids, pb.SamplingParams(grammar='start: "x"'))
    beam = pb.GenerateRequest(
        request_id="beam", prompt_token_ids=ids, sampling_params=pb.SamplingParams(
            grammar='start: "x"'), beam_search=pb.BeamSearchParams(beam_width=2, max_tokens=4))
    call.outbox.put_nowait(pb.GenerateStreamRequest(generate=[beam]))
    call.half_close()
    by_id: dict[str, list[pb.GenerateResponse]] = {}
    for batch in await call.read():
        for r in batch.responses:
            by_id.setdefault(r.request_id, []).append(r)
    (bad,) = by_id["bad"]
    assert bad.finished and bad.rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "structured_outputs: the grammar cannot be enforced" in bad.rejected.message
    assert "unclosed group" in bad.rejected.message
    (beam,) = by_id["beam"]
    assert beam.rejected.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "beam search cannot be combined with structured outputs" in beam.rejected.message
    rs = by_id["good"]
    assert rs[-1].finished and rs[-1].sequences[0].finish_reason == pb.FINISH_REASON_STOP
    out = tokens_of(rs)
    assert out[-1] == rs[-1].sequences[0].stop_token_id  # ended by the EOS
    assert re.fullmatch(CODE, tokenizer.decode(out[:-1]))
    assert tokenizer.decode(tokens_of(by_id["lark"])[:-1]) == "x"
    await client.close()

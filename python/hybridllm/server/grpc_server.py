"""The engine worker: serves the proto contract around AsyncLLMEngine over grpc.aio."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from collections.abc import AsyncIterator

import grpc

from hybridllm.engine.async_llm_engine import AsyncLLMEngine
from hybridllm.proto import engine_pb2 as pb
from hybridllm.proto import engine_pb2_grpc as pb_grpc
from hybridllm.server.generate_stream import GenerateStreamCall

logger = logging.getLogger("hybridllm.worker")

# Long prompts (128k+ token ids) and their logprobs must fit in one message.
MAX_MESSAGE_BYTES = 512 << 20
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


class EngineServicer(pb_grpc.EngineServicer):
    def __init__(self, engine: AsyncLLMEngine, served_model_name: str) -> None:
        self.engine = engine
        self.served_model_name = served_model_name
        self.calls: set[GenerateStreamCall] = set()
        self.draining = False

    async def GenerateStream(  # noqa: N802 - gRPC method names are the proto's
        self,
        requests: AsyncIterator[pb.GenerateStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        """Yields GenerateStreamResponses already serialized (see _register)."""
        call = GenerateStreamCall(self.engine, draining=self.draining)
        self.calls.add(call)
        reader = asyncio.create_task(call.read(requests))
        try:
            async for batch in call.responses():
                yield batch
        finally:
            reader.cancel()
            call.close()
            self.calls.discard(call)

    def drain(self) -> None:
        """Refuse new requests; each GenerateStream call ends once its last request has."""
        self.draining = True
        for call in self.calls:
            call.drain()

    async def Abort(  # noqa: N802
        self, request: pb.AbortRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortResponse:
        for rid in request.request_ids:
            self.engine.abort(rid)
        return pb.AbortResponse()

    async def Health(  # noqa: N802
        self, request: pb.HealthRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthResponse:
        ok = self.engine.error is None and not self.engine.dead.is_set()
        status = pb.HealthResponse.SERVING if ok else pb.HealthResponse.NOT_SERVING
        return pb.HealthResponse(status=status)

    async def GetModelInfo(  # noqa: N802
        self, request: pb.ModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelInfo:
        engine = self.engine.engine
        cfg, info = engine.config, engine.tokenizer_info
        tok_path = cfg.model_path / "tokenizer.json"
        embed = cfg.task == "embed"
        msg = pb.ModelInfo(
            served_model_name=self.served_model_name,
            model_path=str(cfg.model_path),
            max_model_len=cfg.max_model_len,
            vocab_size=cfg.model.vocab_size,
            eos_token_ids=list(getattr(cfg.model, "eos_token_ids", ())),
            tokenizer_path=str(tok_path),
            chat_template=info.chat_template or "",
            kind=pb.ModelInfo.EMBED if embed else pb.ModelInfo.GENERATE,
            bos_token=info.bos_token or "",
            eos_token=info.eos_token or "",
            hidden_size=cfg.model.hidden_size,
            lowercase_inputs=bool(embed and cfg.pooler.do_lower_case),
            max_num_seqs=cfg.scheduler.max_num_seqs,
            priority_scheduling=cfg.scheduler.policy == "priority",
            chunked_processing=bool(embed and cfg.pooler.enable_chunked_processing),
            max_embed_len=(embed and cfg.pooler.max_embed_len) or 0,
        )
        if getattr(cfg.model, "bos_token_id", None) is not None:
            msg.bos_token_id = cfg.model.bos_token_id
        return msg

    async def GetLoad(  # noqa: N802
        self, request: pb.LoadRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoadResponse:
        engine = self.engine.engine
        if engine.config.task == "embed":  # nothing stays running or cached between steps
            return pb.LoadResponse(
                num_waiting=len(engine.scheduler.waiting),
                prompt_tokens_total=engine.stats.prompt_tokens_total,
                requests_finished_total=engine.stats.requests_finished_total,
            )
        sched, kv, stats = engine.scheduler, engine.kv, engine.stats
        return pb.LoadResponse(
            num_running=len(sched.running),
            num_waiting=len(sched.waiting),
            kv_cache_usage=kv.usage,
            prompt_tokens_total=stats.prompt_tokens_total,
            generation_tokens_total=stats.generation_tokens_total,
            prefix_cache_queries_total=kv.prefix_queries,
            prefix_cache_hits_total=kv.prefix_hits,
            num_preemptions_total=sched.num_preemptions,
            num_free_blocks=kv.num_free_blocks,
            num_total_blocks=kv.num_blocks,
            requests_finished_total=stats.requests_finished_total,
            spec_decode_num_drafts_total=stats.spec_decode_num_drafts,
            spec_decode_num_draft_tokens_total=stats.spec_decode_num_draft_tokens,
            spec_decode_num_accepted_tokens_total=stats.spec_decode_num_accepted_tokens,
            spec_decode_num_accepted_tokens_per_pos=stats.spec_decode_num_accepted_tokens_per_pos,
        )


class _HandlerRecorder:
    """Stands in for the server while the generated code lists its method handlers."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.service, self.handlers = service, dict(handlers)


def _register(servicer: EngineServicer, server: grpc.aio.Server) -> None:
    """The generated handlers, except that GenerateStream's responses leave as the bytes the
    engine thread serialized."""
    rec = _HandlerRecorder()
    pb_grpc.add_EngineServicer_to_server(servicer, rec)
    rec.handlers["GenerateStream"] = rec.handlers["GenerateStream"]._replace(
        response_serializer=None
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(rec.service, rec.handlers),)
    )
    server.add_registered_method_handlers(rec.service, rec.handlers)


def _bind_address(address: str) -> str:
    if address.startswith("unix://"):
        path = address[len("unix://") :]
        if os.path.exists(path):
            os.unlink(path)  # a stale socket from a previous run
    return address


async def serve(engine: AsyncLLMEngine, address: str, served_model_name: str,
                shutdown_timeout: float) -> int:
    """Serve until SIGTERM/SIGINT (exit 0) or until the engine loop dies (exit 1)."""
    # Everything built so far (model, tokenizer, engine) lives as long as the process: keep it
    # out of the garbage collector's passes, which otherwise rescan it on every collection.
    gc.collect()
    gc.freeze()
    server = grpc.aio.server(options=GRPC_OPTIONS)
    servicer = EngineServicer(engine, served_model_name)
    _register(servicer, server)
    server.add_insecure_port(_bind_address(address))
    await server.start()
    engine.start()
    logger.info("engine worker serving on %s", address)
    print(f"hybridllm worker: serving on {address}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopper = asyncio.create_task(stop.wait())
    dead = asyncio.create_task(engine.dead.wait())
    await asyncio.wait([stopper, dead], return_when=asyncio.FIRST_COMPLETED)
    if engine.dead.is_set():
        logger.error("engine loop died: %r; exiting", engine.error)
        print(f"hybridllm worker: engine loop died: {engine.error!r}", flush=True)
        await asyncio.sleep(0.5)  # let the failed streams flush their error messages
        await server.stop(grace=1.0)
        await engine.shutdown()
        return 1
    # Graceful: stop accepting, let in-flight requests finish, then abort the rest.
    servicer.drain()
    await server.stop(grace=shutdown_timeout)
    await engine.shutdown()
    return 0

"""The Python fallback over a separate worker (`serve --connect-engine`): the worker is not
our child, so nothing else notices when it dies. Probe it; once it has failed several probes
in a row, stop serving and exit non-zero, as `serve --rust-frontend` does when its worker
exits (a supervisor then restarts the pair)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hybridllm.server.engine_client import EngineClient

logger = logging.getLogger("hybridllm.frontend")


class EngineWatchdog:
    """`lost` turns True, and uvicorn's server is asked to exit, after `failures` failed
    probes `interval_s` apart (each at most `interval_s`): a dead worker stops `serve` within
    about failures x interval_s, while one slow probe does not."""

    def __init__(self, engine: EngineClient, server: Any, interval_s: float = 1.0,
                 failures: int = 3) -> None:
        self.engine, self.server = engine, server
        self.interval_s, self.failures = interval_s, failures
        self.lost = False

    async def run(self) -> None:
        while not self.server.started:  # the lifespan connects the client first
            if self.server.should_exit:
                return
            await asyncio.sleep(0.1)
        failed = 0
        while not self.server.should_exit:
            try:
                ok = await asyncio.wait_for(self.engine.health(), self.interval_s)
            except Exception:  # noqa: BLE001 - any failure to answer is a failed probe
                ok = False
            failed = 0 if ok else failed + 1
            if failed >= self.failures:
                logger.error("the engine worker stopped answering (%d probes); shutting down",
                             failed)
                self.lost = True
                self.server.should_exit = True
                return
            await asyncio.sleep(self.interval_s)

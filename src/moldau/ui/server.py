"""The console's HTTP server: the JSON API of every module in API_MODULES under
/api/, the static front end at /, and the sampling task that keeps the cluster's
view and history fresh. `UiServer` owns the aiohttp runner and that task; it
installs no signal handlers, so it runs as well inside `moldau serve`'s loop as in
`moldau ui`'s."""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

from aiohttp import web
from aiohttp.typedefs import Middleware
from confluent_kafka import KafkaException

from moldau.cli.admin_call import CallError
from moldau.cli.errors import CliError
from moldau.ui.cluster import ClusterClient
from moldau.ui.json import UiError, error
from moldau.ui.view import ViewSampler

log = logging.getLogger(__name__)

#: moldau.ui.api_<name>: each has `routes(cluster) -> list[web.RouteDef]` and may
#: have `async sample(cluster, now_ms)`, called every SAMPLE_INTERVAL_S.
API_MODULES = ("cluster", "topics", "messages", "groups", "reassignments", "security")
SAMPLE_INTERVAL_S = 2.0
STATIC = Path(__file__).parent / "static"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def api_modules() -> list[ModuleType]:
    return [importlib.import_module(f"moldau.ui.api_{name}") for name in API_MODULES]


def _errors(cluster: ClusterClient) -> Middleware:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every failure of an /api/ call as {"error": ...}: the page shows it.
        A call that timed out while the cluster refuses the console's login or
        certificate says that instead."""
        try:
            # The cluster page shows the last sample, whose error says why.
            if request.path.startswith("/api/") and request.path != "/api/cluster":
                cluster.check()
            return await handler(request)
        except UiError as e:
            return error(e.status, e.message)
        except KafkaException as e:
            return error(502, cluster.explain(e))
        except (CallError, CliError) as e:
            # CliError: a wire request's login or certificate was refused.
            return error(502, str(e))
        except TimeoutError:
            return error(504, cluster.refused or "the cluster did not answer in time")
        except web.HTTPException:
            raise
        except Exception as e:
            log.exception("%s %s failed", request.method, request.path)
            return error(500, f"{type(e).__name__}: {e}")

    return errors


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


def create_app(cluster: ClusterClient) -> web.Application:
    app = web.Application(middlewares=[_errors(cluster)])
    for module in api_modules():
        app.add_routes(module.routes(cluster))
    app.router.add_get("/", _index)
    app.router.add_static("/", STATIC, append_version=False)
    return app


class UiServer:
    """The console on one address; `start` then `stop` (also on a failed start)."""

    def __init__(self, cluster: ClusterClient, clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.clock = clock
        self._runner: web.AppRunner | None = None
        self._sampler = ViewSampler(cluster)
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0: any free port); returns the bound port."""
        self._runner = web.AppRunner(
            create_app(self.cluster), handle_signals=False, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self._task = asyncio.create_task(self._sample_forever(), name="ui-sampler")
        return self.port

    async def _sample_forever(self) -> None:
        samplers = [self._sampler.sample] + [
            functools.partial(m.sample, self.cluster) for m in api_modules() if hasattr(m, "sample")
        ]
        while True:
            for i, sample in enumerate(samplers):
                # The modules' samplers wait while the view's could not reach the
                # cluster: their blocking calls would each hold a thread (and the
                # console's stop) for a timeout.
                if i and (self.cluster.view.error or self.cluster.refused):
                    break
                try:
                    await sample(int(self.clock() * 1000))
                except Exception:
                    log.exception("console sampling failed")
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._sampler.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.get_running_loop().run_in_executor(None, self.cluster.close)

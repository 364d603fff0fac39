"""The console's connection to a cluster: a confluent-kafka AdminClient (and the
settings for Producers and Consumers), a thread pool for librdkafka's blocking
calls, and one-off wire requests (moldau.cli.admin_call) for what the AdminClient
cannot ask. Everything the console shows comes through here, over the Kafka
protocol, so it works against any Kafka-compatible cluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from moldau.cli.common import TIMEOUT_S
from moldau.ui.history import History
from moldau.ui.json import UiError, kafka_message
from moldau.ui.view import ClusterView

T = TypeVar("T")

Address = tuple[str, int]

#: librdkafka's errors for a login or a certificate the cluster refused: trying
#: again cannot help, so the pages say so at once instead of timing out.
REFUSALS = ("_AUTHENTICATION", "_SSL")
#: librdkafka's errors for a broker it cannot reach: a timeout's likely cause.
UNREACHABLE = ("_TRANSPORT", "_RESOLVE")
#: How long such an error explains the timeouts that follow it.
UNREACHABLE_FRESH_S = 30.0
#: Topic series kept (three a topic at most, from its first traffic).
TOPIC_SERIES = 600
#: How often a call waiting for an answer looks for such a refusal.
REFUSAL_POLL_S = 0.25
_AFTER = re.compile(r" \(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\)$")


class ClusterClient:
    def __init__(
        self,
        bootstrap: str,
        config: Mapping[str, str] | None = None,
        metrics_urls: Sequence[str] = (),
    ) -> None:
        """`config`: client settings (librdkafka names, as --command-config gives
        them: TLS, SASL); `metrics_urls`: the brokers' Prometheus endpoints, if known."""
        self.bootstrap = bootstrap
        self.config = dict(config or {})
        self.metrics_urls = list(metrics_urls)
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="ui-client")
        # AdminCalls runs its own event loop: one thread keeps it to one loop.
        self._calls_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ui-calls")
        self._admin: Any = None
        self._calls: Any = None
        #: The last refused login or certificate (Kafka's error name first), and
        #: when (time.monotonic()); None once the cluster answers again.
        self.refused: str | None = None
        self._refused_at = 0.0
        self._unreachable: tuple[str, float] | None = None
        #: Charted numbers (bounded rings), and the last sample of the cluster.
        self.history = History()
        #: Each topic's throughput, apart: many topics must not push out the rest.
        self.topic_history = History(max_series=TOPIC_SERIES)
        self.view = ClusterView()

    def client_config(self, **extra: str) -> dict[str, Any]:
        """Settings for a Producer, Consumer or AdminClient of this cluster: quiet
        librdkafka logs, the security settings, then `extra`."""
        conf: dict[str, Any] = {"log_level": 0, **self.config, **extra}
        conf["bootstrap.servers"] = self.bootstrap
        conf["error_cb"] = self._on_error
        return conf

    def _on_error(self, err: Any) -> None:
        """librdkafka's error callback (run by `poll`): remembers a refused login
        or certificate; other errors come back with the calls."""
        message = f"{err.name()}: {_AFTER.sub('', str(err.str()))}"
        if err.name() in REFUSALS:
            self.refused = message
            self._refused_at = time.monotonic()
        elif err.name() in UNREACHABLE:
            self._unreachable = (message, time.monotonic())

    def check(self) -> None:
        """Fail at once, with the reason, while the cluster refuses the console
        or cannot be reached (until a call of the sampler's gets an answer again),
        rather than let every page wait for its own timeout."""
        if self.refused is not None:
            raise UiError(502, self.refused)
        if self.view.error is not None:
            raise UiError(502, f"cannot reach the cluster at {self.bootstrap}: {self.view.error}")

    def explain(self, exc: BaseException) -> str:
        """A failed call's message for a page: a refused login or certificate
        (the call only timed out) explains it better than the timeout; a broker
        that could not be reached lately is said beside it."""
        if self.refused is not None:
            return self.refused
        message = kafka_message(exc)
        unreachable = self._unreachable
        if (
            message.startswith(("_TIMED_OUT", "_TRANSPORT"))
            and unreachable is not None
            and time.monotonic() - unreachable[1] < UNREACHABLE_FRESH_S
        ):
            return f"{message} (lately: {unreachable[0]})"
        return message

    @property
    def admin(self) -> Any:
        """The AdminClient, made on first use (making it does not connect)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self.client_config())
        return self._admin

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking client call, on the client's own threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def wait(self, future: concurrent.futures.Future[T], timeout: float = TIMEOUT_S) -> T:
        """An AdminClient future, awaited without a thread (librdkafka completes it)."""
        return await self._answer(asyncio.wrap_future(future), timeout + 2.0)

    async def metadata(self, topic: str | None = None) -> Any:
        """Cluster metadata (librdkafka's ClusterMetadata), all topics or one."""
        args = () if topic is None else (topic,)
        call = self.run(self.admin.list_topics, *args, timeout=TIMEOUT_S)
        return await self._answer(asyncio.ensure_future(call), TIMEOUT_S + 2.0)

    async def _answer(self, future: asyncio.Future[T], timeout: float) -> T:
        """`future`'s result; a UiError as soon as librdkafka reports a refused
        login or certificate after the call began (it would only time out).
        An answer ends any refusal reported before the call began."""
        began = time.monotonic()
        async with asyncio.timeout(timeout):
            while not future.done():
                await asyncio.wait({future}, timeout=REFUSAL_POLL_S)
                # Non-blocking: runs the error callback for what librdkafka queued.
                self.admin.poll(0)
                if self.refused is not None and self._refused_at >= began:
                    raise UiError(502, self.refused)
        result = future.result()
        if self._refused_at < began:
            self.refused = None
        return result

    async def call(
        self, address: Address, api_key: int, version: int, fields: Mapping[str, Any]
    ) -> Any:
        """One request of the wire protocol to the broker at `address`, decoded;
        raises moldau.cli.admin_call.CallError when it gets no usable answer."""
        return await asyncio.get_running_loop().run_in_executor(
            self._calls_pool, self._call, address, api_key, version, dict(fields)
        )

    def _call(self, address: Address, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        if self._calls is None:
            from moldau.cli.admin_call import AdminCalls

            self._calls = AdminCalls("moldau-ui", TIMEOUT_S, self.config)
        return self._calls.call(address, api_key, version, fields)

    def close(self) -> None:
        """Stop the threads; waits for calls under way (each bounded by TIMEOUT_S)."""
        if self._calls is not None:
            self._calls_pool.submit(self._calls.close).result()
        self._calls_pool.shutdown()
        self._pool.shutdown(cancel_futures=True)

"""The console's connection to a cluster: a confluent-kafka AdminClient (and the
settings for Producers and Consumers), a thread pool for librdkafka's blocking
calls, and one-off wire requests (moldau.cli.admin_call) for what the AdminClient
cannot ask. Everything the console shows comes through here, over the Kafka
protocol, so it works against any Kafka-compatible cluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from moldau.cli.common import TIMEOUT_S
from moldau.ui.history import History
from moldau.ui.view import ClusterView

T = TypeVar("T")

Address = tuple[str, int]


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
        #: Charted numbers (bounded rings), and the last sample of the cluster.
        self.history = History()
        self.view = ClusterView()

    def client_config(self, **extra: str) -> dict[str, Any]:
        """Settings for a Producer, Consumer or AdminClient of this cluster: quiet
        librdkafka logs, the security settings, then `extra`."""
        conf: dict[str, Any] = {"log_level": 0, **self.config, **extra}
        conf["bootstrap.servers"] = self.bootstrap
        return conf

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
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout + 2.0)

    async def metadata(self, topic: str | None = None) -> Any:
        """Cluster metadata (librdkafka's ClusterMetadata), all topics or one."""
        if topic is None:
            return await self.run(self.admin.list_topics, timeout=TIMEOUT_S)
        return await self.run(self.admin.list_topics, topic, timeout=TIMEOUT_S)

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

"""The broker's client quotas: Kafka's QuotaManagers (Produce, Fetch, Request,
ControllerMutation), fed from the quota configs in /config/users and
/config/clients, kept current by the config change notifications, and asked by
the request path for each client's throttle time.

KIP-219: a throttled client's response goes out at once, carrying
throttle_time_ms, and the broker then reads nothing more from that connection
until the throttle time has passed (`Connection.throttle`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from moldau.clock import Clock
from moldau.metadata.client import MetadataClient
from moldau.metadata.znodes import sanitize
from moldau.quota.entities import QuotaEntity, entity_of_path, quota_values
from moldau.quota.manager import ClientQuotaManager, ControllerMutationQuotaManager, QuotaType

if TYPE_CHECKING:
    from moldau.config.broker import BrokerConfig
    from moldau.server.request import RequestContext

log = logging.getLogger(__name__)

# request_percentage is a share of request-handling time per second, as in Kafka,
# where 100 is one of its threads (num.io.threads + num.network.threads of them).
# Moldau handles every request on one event loop: 100 is that whole loop, so a
# client with request_percentage=20 may take a fifth of the broker's time.
_PERCENT_PER_NS = 100.0 / 1e9


class BrokerQuotas:
    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        self.clock = clock
        samples = config["quota.window.num"]
        window_ms = config["quota.window.size.seconds"] * 1000
        self.produce = ClientQuotaManager(QuotaType.PRODUCE, clock, samples, window_ms)
        self.fetch = ClientQuotaManager(QuotaType.FETCH, clock, samples, window_ms)
        self.request = ClientQuotaManager(QuotaType.REQUEST, clock, samples, window_ms)
        self.request.max_throttle_ms = window_ms
        self.controller_mutation = ControllerMutationQuotaManager(
            QuotaType.CONTROLLER_MUTATION,
            clock,
            config["controller.quota.window.num"],
            config["controller.quota.window.size.seconds"] * 1000,
        )
        self.managers: tuple[ClientQuotaManager, ...] = (
            self.produce,
            self.fetch,
            self.request,
            self.controller_mutation,
        )
        # Some quota is set: until then the request path skips all of this.
        self.enabled = False

    # -- the quotas set ------------------------------------------------------------------

    def apply(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        values = quota_values(config)
        for manager in self.managers:
            manager.update_quota(entity, values.get(manager.quota_type.config_key))
        self.enabled = any(m.enabled for m in self.managers)
        if values:
            log.info("quotas of %s are now %s", entity.path, values)

    async def load(self, client: MetadataClient) -> None:
        for path in await client.get_quota_entity_paths():
            await self.on_change(client, path)

    async def on_change(self, client: MetadataClient, path: str) -> None:
        entity = entity_of_path(path)
        if entity is not None:
            self.apply(entity, await client.get_entity_config(path))

    # -- the request path ----------------------------------------------------------------

    @staticmethod
    def identity(ctx: RequestContext) -> tuple[str, str]:
        """(sanitized user, client id), as Kafka's sensors name a client."""
        _, _, name = ctx.principal.partition(":")
        return sanitize(name), ctx.header.client_id or ""

    def _request_time(self, ctx: RequestContext) -> float:
        """The request's share of the loop, in request_percentage's units: its
        handling time, less what it spent waiting for others (a fetch's long poll)."""
        spent = self.clock.monotonic_ns() - ctx.started_ns - ctx.waited_ns
        return max(spent, 0) * _PERCENT_PER_NS

    def _record_request(self, ctx: RequestContext, user: str, client: str) -> int:
        ctx.quota_recorded = True
        if not self.request.enabled:
            return 0
        return self.request.record(user, client, self._request_time(ctx))

    def _throttle(
        self,
        ctx: RequestContext,
        user: str,
        client: str,
        manager: ClientQuotaManager,
        own_ms: int,
        request_ms: int,
    ) -> int:
        """The larger throttle wins, and is counted as that quota's (Kafka)."""
        ms = max(own_ms, request_ms)
        if ms > 0:
            (manager if own_ms > request_ms else self.request).throttled(user, client, ms)
            ctx.throttle_ms = ms
        return ms

    def on_produce(self, ctx: RequestContext, size: int, acks: int) -> int:
        """A produce of `size` request bytes: its throttle time."""
        user, client = self.identity(ctx)
        own = self.produce.record(user, client, size)
        # Kafka leaves acks=0 produces out of the request quota: there is no answer
        # to carry its throttle time.
        request = 0 if acks == 0 else self._record_request(ctx, user, client)
        ctx.quota_recorded = True
        return self._throttle(ctx, user, client, self.produce, own, request)

    def fetch_max_bytes(self, ctx: RequestContext) -> float:
        """At most what a consumer may fetch at once without being throttled for it."""
        user, client = self.identity(ctx)
        return self.fetch.max_value_in_window(user, client)

    def on_fetch(self, ctx: RequestContext, size: int) -> int:
        """A consumer's fetch whose answer would be `size` bytes: its throttle time;
        when > 0 the answer goes without records, and they are not counted."""
        user, client = self.identity(ctx)
        request = self._record_request(ctx, user, client)
        own = self.fetch.record(user, client, size)
        ms = self._throttle(ctx, user, client, self.fetch, own, request)
        if ms > 0:
            self.fetch.unrecord(user, client, size)
        return ms

    def on_request(self, ctx: RequestContext) -> int:
        """Any other request, once handled: the throttle time of the request quota
        (or of what the handler found before, a controller mutation's)."""
        if ctx.quota_recorded:
            return ctx.throttle_ms
        user, client = self.identity(ctx)
        request = self._record_request(ctx, user, client)
        own = ctx.throttle_ms
        return self._throttle(ctx, user, client, self.controller_mutation, own, request)

    def record_mutation(self, ctx: RequestContext, partitions: int, strict: bool) -> bool:
        """A topic's partitions about to be created or deleted (KIP-599): False if
        the mutation is refused (strict: THROTTLING_QUOTA_EXCEEDED). The request's
        throttle time becomes the longest its mutations found."""
        if not self.controller_mutation.enabled:
            return True
        user, client = self.identity(ctx)
        ms = self.controller_mutation.record_mutation(user, client, partitions, strict)
        ctx.throttle_ms = max(ctx.throttle_ms, ms)
        return not (strict and ms > 0)

"""SaslHandshake (17) and SaslAuthenticate (36): the login on a SASL listener, as
Kafka's SaslServerAuthenticator runs it, on the connection's Session.

Handshake picks a mechanism the listener enables (else UNSUPPORTED_SASL_MECHANISM
with the enabled list); each SaslAuthenticate feeds the client's token to that
mechanism's server. Once it completes, the session has its principal and is
authenticated. A failed login is answered SASL_AUTHENTICATION_FAILED after
`connection.failed.authentication.delay.ms` (to slow guessing, as Kafka), and the
connection is closed after the answer. With `connections.max.reauth.ms` > 0 the
client is told its session lifetime (KIP-368) and may log in again on the same
connection, as the same principal."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_response
from moldau.protocol.errors import (
    ErrorCode,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UndisclosedSaslFailureError,
)
from moldau.security.sasl import SaslServer
from moldau.server.request import CloseAfter, RequestContext, Response, Session

if TYPE_CHECKING:
    from moldau.server.broker import Broker

log = logging.getLogger(__name__)


def _is_sasl(session: Session) -> bool:
    return session.security_protocol.startswith("SASL_")


def _may_reauthenticate(broker: Broker, session: Session) -> bool:
    return session.authenticated and broker.config["connections.max.reauth.ms"] > 0


async def handle_sasl_handshake(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    session = ctx.session
    enabled = broker.sasl_mechanisms(session.listener)

    def answer(error: ErrorCode) -> Any:
        return build_response(
            ApiKey.SASL_HANDSHAKE, ctx.version, {"error_code": error, "mechanisms": enabled}
        )

    if not _is_sasl(session) or (
        session.authenticated and not _may_reauthenticate(broker, session)
    ):
        # Kafka's KafkaApis answers a handshake it should never see (no SASL on this
        # listener, or after the login) this way, and keeps the connection.
        return answer(ErrorCode.illegal_sasl_state)
    if session.sasl is not None:
        return CloseAfter(answer(ErrorCode.illegal_sasl_state), "second SaslHandshake")
    server = broker.sasl_server(session.listener, req.mechanism)
    if server is None:
        # Kafka closes the connection after telling the client what is enabled.
        return CloseAfter(
            answer(ErrorCode.unsupported_sasl_mechanism),
            f"unsupported SASL mechanism {req.mechanism!r}",
        )
    session.sasl = server
    return answer(ErrorCode.none)


async def handle_sasl_authenticate(broker: Broker, ctx: RequestContext) -> Response:
    req = ctx.body()
    session = ctx.session

    def answer(error: ErrorCode, message: str | None = None, token: bytes = b"") -> Any:
        lifetime = broker.config["connections.max.reauth.ms"] if error == ErrorCode.none else 0
        return build_response(
            ApiKey.SASL_AUTHENTICATE,
            ctx.version,
            {
                "error_code": error,
                "error_message": message,
                "auth_bytes": token,
                "session_lifetime": lifetime,
            },
        )

    server = session.sasl
    if not _is_sasl(session) or server is None:
        message = "SaslAuthenticate request received without a SaslHandshake"
        if not _is_sasl(session) or session.authenticated:
            # After a login (or off SASL) Kafka's KafkaApis answers so, and goes on.
            return answer(ErrorCode.illegal_sasl_state, message)
        return CloseAfter(answer(ErrorCode.illegal_sasl_state, message), message)
    relogin, mechanism = session.authenticated, cast(SaslServer, server).mechanism
    try:
        token = await evaluate_token(broker, session, bytes(req.auth_bytes))
    except SaslAuthenticationFailedError as e:
        return CloseAfter(
            answer(ErrorCode.sasl_authentication_failed, client_message(e, mechanism, relogin)),
            "failed authentication",
        )
    except IllegalSaslStateError as e:
        return CloseAfter(answer(ErrorCode.illegal_sasl_state, e.message or None), e.message)
    return answer(ErrorCode.none, None, token)


def client_message(e: SaslAuthenticationFailedError, mechanism: str, relogin: bool) -> str:
    """What the client is told of a failed login: Kafka's words naming only the
    mechanism when the reason is not for it to know (the log has the reason)."""
    if isinstance(e, UndisclosedSaslFailureError):
        phase = "re-authentication" if relogin else "authentication"
        return (
            f"Authentication failed during {phase} due to invalid credentials with SASL "
            f"mechanism {mechanism}"
        )
    return e.message


async def evaluate_token(broker: Broker, session: Session, token: bytes) -> bytes:
    """Feed the session's mechanism one client token; its answer. On completion the
    session has its principal. A failed login raises SaslAuthenticationFailedError
    after `connection.failed.authentication.delay.ms` (as Kafka, to slow guessing);
    either error ends the exchange. Shared by SaslAuthenticate and the raw tokens
    that follow a SaslHandshake v0."""
    sasl = cast(SaslServer, session.sasl)
    try:
        answer = sasl.evaluate(token)
        if sasl.complete and session.authenticated and sasl.principal != session.principal:
            raise SaslAuthenticationFailedError(
                f"Cannot change principals during re-authentication from {session.principal}"
                f" to {sasl.principal}"
            )
    except SaslAuthenticationFailedError as e:
        session.sasl = None
        log.info(
            "failed %s authentication from %s (%s): %s",
            sasl.mechanism, session.host, session.listener, e.message,
        )  # fmt: skip
        await asyncio.sleep(broker.config["connection.failed.authentication.delay.ms"] / 1000)
        raise
    except IllegalSaslStateError:
        session.sasl = None
        raise
    if sasl.complete:
        session.principal = sasl.principal
        session.authenticated = True
        session.sasl = None
    return answer

"""One request of Kafka's wire protocol from a tool to a broker, for the admin APIs
confluent-kafka has no call for (partition reassignments, transactions).

The tool names the broker by its address (from Metadata); the request is given as
the fields of its kio schema and the response comes back decoded. A broker that
cannot be reached, times out or answers nonsense raises `CallError`; the caller
decides whether to look the broker up again and retry or to give up. Connections
speak the TLS and SASL of the tool's --command-config (cli/client_security.py); a
refused login or certificate is a CliError, since trying again cannot help.

The request and response headers are those of the version: v2 and v1 for a
flexible one, v1 and v0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from moldau.cli.client_security import client_security
from moldau.cli.common import TIMEOUT_S, read_config_file
from moldau.cli.errors import CliError
from moldau.protocol.codec import build_entity, decode_response, encode_body, request_class
from moldau.protocol.wire import DecodeError
from moldau.server.control_client import NetworkTransport
from moldau.server.inter_broker_sasl import SaslLoginRefused, sasl_authenticator

Address = tuple[str, int]


class CallError(Exception):
    """The broker at an address did not answer a request usably."""

    def __init__(self, address: Address, reason: str) -> None:
        super().__init__(f"{address[0]}:{address[1]}: {reason}")
        self.address = address
        self.reason = reason


def encode_request(api_key: int, version: int, fields: Mapping[str, Any]) -> bytes:
    """The body of a request given its fields by their kio names."""
    cls = request_class(api_key, version)
    if cls is None:
        raise ValueError(f"no schema for api key {api_key} version {version}")
    return encode_body(build_entity(cls, dict(fields)))


class AdminCalls:
    """A tool's connections to brokers: one per address, kept for the tool's life so
    that a command of many requests connects once. Use as a context manager."""

    def __init__(
        self, client_id: str, timeout_s: float, settings: Mapping[str, str] | None = None
    ) -> None:
        """`settings`: the tool's client settings (librdkafka names), for TLS and SASL."""
        security = client_security(settings or {})
        self._ids: dict[Address, int] = {}
        self._runner = asyncio.Runner()
        # NetworkTransport names brokers by id; an address is given one on first use.
        self._transport = NetworkTransport(
            -1,
            self._address_of,
            int(timeout_s * 1000),
            client_id=client_id,
            ssl_context=security.ssl_context,
            authenticate=(
                sasl_authenticator(security.login, client_id) if security.login else None
            ),
        )

    def _address_of(self, key: int) -> Address | None:
        for address, k in self._ids.items():
            if k == key:
                return address
        return None

    def call(self, address: Address, api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
        """Send one request to `address` and return its decoded response."""
        body = encode_request(api_key, version, fields)
        key = self._ids.setdefault(address, len(self._ids))
        try:
            raw = self._runner.run(self._transport.request(key, api_key, version, body))
            return decode_response(api_key, version, memoryview(bytes(raw)))
        except TimeoutError:
            raise CallError(address, "no answer in time") from None
        except SaslLoginRefused as e:
            raise CliError(str(e)) from None
        except ssl.SSLCertVerificationError as e:
            raise CliError(f"{address[0]}:{address[1]}: TLS: {e.verify_message}") from None
        except (OSError, ConnectionError, DecodeError) as e:
            reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise CallError(address, reason) from None

    def close(self) -> None:
        try:
            self._runner.run(self._transport.close())
        finally:
            self._runner.close()

    def __enter__(self) -> AdminCalls:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def tool_calls(args: argparse.Namespace, client_id: str) -> AdminCalls:
    """The connections of a tool whose `--command-config` holds its client settings."""
    settings = read_config_file(args.command_config, "--command-config")
    return AdminCalls(client_id, TIMEOUT_S, settings)

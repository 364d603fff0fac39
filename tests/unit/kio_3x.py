"""kio 0.5.0, generated from Kafka 3.x's schemas (which carry the versions Kafka 4.0
dropped), as a reference for the codecs of those versions. scripts/test.sh installs it
apart, in .venv/kio-0.5.0; it runs in its own interpreter since it shares kio's name."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

KIO_3X = Path(sys.prefix) / "kio-0.5.0"

# Decodes with kio 0.5.0 and encodes again: prints, per case, the bytes (hex) and
# the decoded fields.
_REFERENCE = """
import dataclasses, importlib, io, json, sys
sys.path.insert(0, sys.argv[1])
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.serial import entity_reader, entity_writer
out = {}
for name, (module, cls, hexed) in json.loads(sys.stdin.read()).items():
    if isinstance(module, list):  # [api key, version, "request" or "response"]
        key, version, kind = module
        module, cls = schema_name_map[api_key_map[key]][version][EntityType[kind]].split(":")
    schema = getattr(importlib.import_module(module), cls)
    entity, _ = entity_reader(schema)(memoryview(bytes.fromhex(hexed)), 0)
    buf = io.BytesIO()
    entity_writer(schema)(buf, entity)
    out[name] = (buf.getvalue().hex(), json.dumps(dataclasses.asdict(entity), default=str))
print(json.dumps(out))
"""


def decode(cls: type, data: bytes) -> object:
    value, _ = entity_reader(cls)(memoryview(data).toreadonly(), 0)
    return value


def encode(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def fields_of(entity: object) -> str:
    return json.dumps(dataclasses.asdict(entity), default=str)  # type: ignore[call-overload]


def through_kio_3x(cases: dict[str, tuple[Any, str, bytes]]) -> dict[str, tuple[bytes, str]]:
    """Per case (module or [api key, version, "request"/"response"], class name,
    bytes): the bytes kio 0.5.0 writes back after reading them, and the fields it read
    (JSON)."""
    if not (KIO_3X / "kio").is_dir():
        pytest.fail(f"kio 0.5.0 is not installed in {KIO_3X} (scripts/test.sh installs it)")
    done = subprocess.run(
        [sys.executable, "-c", _REFERENCE, str(KIO_3X)],
        input=json.dumps({k: (m, c, b.hex()) for k, (m, c, b) in cases.items()}),
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return {k: (bytes.fromhex(h), f) for k, (h, f) in json.loads(done.stdout).items()}

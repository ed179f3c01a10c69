"""Kafka request/response framing over kio entities (sans-io).

A request frame (after the 4-byte size prefix) starts with the request
header: ``api_key int16, api_version int16, correlation_id int32,
client_id nullable legacy string`` and, for flexible versions, tagged fields
(header v2). A response frame is ``size int32, correlation_id int32`` plus an
empty tagged-field section (header v1) for flexible versions, except that
ApiVersions responses always use header v0 (KIP-511) so that a client can read
them before it knows which versions the broker speaks.
"""

from __future__ import annotations

import struct
from dataclasses import fields, is_dataclass
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_entity_module
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import is_optional
from kio.static.constants import EntityType

from dmq.protocol import fast
from dmq.protocol.bounds import BoundsError, check_request
from dmq.protocol.extensions import EXTENSIONS
from dmq.protocol.splice import ByteSource, SpliceRecords

API_VERSIONS_KEY = 18
_HEAD = struct.Struct(">hhi")
_RESPONSE_HEAD = struct.Struct(">ii")


class FrameError(Exception):
    """The frame cannot be parsed; the connection should be closed."""


class RequestHeader:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, or FrameError."""
    if len(frame) < _HEAD.size:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header")
    return _HEAD.unpack_from(frame, 0)


def _load_module(api_key: int, version: int, kind: EntityType) -> ModuleType:
    """kio's module of an API version, or one of dmq's extension APIs."""
    extension = EXTENSIONS.get(api_key)
    if extension is not None:
        if version not in extension:
            raise LookupError(f"no version {version} of dmq's API {api_key}")
        return extension[version][0 if kind == EntityType.request else 1]
    return load_entity_module(api_key_map[api_key], version, kind)  # type: ignore[arg-type]


@cache
def _entity_class(api_key: int, version: int, kind: EntityType) -> type[Any]:
    module = _load_module(api_key, version, kind)
    name = module.__name__
    for attr in vars(module).values():
        if isinstance(attr, type) and getattr(attr, "__type__", None) == kind:
            return attr
    raise LookupError(f"no {kind.name} entity for {name} v{version}")


def request_class(api_key: int, version: int) -> type[Any]:
    return _entity_class(api_key, version, EntityType.request)


def response_class(api_key: int, version: int) -> type[Any]:
    return _entity_class(api_key, version, EntityType.response)


@cache
def request_module(api_key: int, version: int) -> ModuleType:
    return _load_module(api_key, version, EntityType.request)


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    return _load_module(api_key, version, EntityType.response)


@cache
def _request_readers(api_key: int, version: int) -> tuple[type[Any], Any, Any, Any]:
    """(class, header reader, body reader, null check) of a request version."""
    cls = request_class(api_key, version)
    return (cls, entity_reader(cls.__header_schema__), entity_reader(cls),
            fast.NULL_CHECKS.get(cls))


def decode_request(frame: bytes, api_key: int, api_version: int) -> tuple[RequestHeader, Any]:
    """Decode header and body; raise FrameError if the bytes do not parse."""
    return _decode_request(frame, api_key, api_version, quick_null_check=True)


def decode_request_with_kio(frame: bytes, api_key: int, api_version: int) -> tuple[RequestHeader, Any]:
    """``decode_request`` with the generic null walk only (what fast.NULL_CHECKS must match)."""
    return _decode_request(frame, api_key, api_version, quick_null_check=False)


def _decode_request(frame: bytes, api_key: int, api_version: int,
                    quick_null_check: bool) -> tuple[RequestHeader, Any]:
    cls, read_header, read_body, no_nulls = _request_readers(api_key, api_version)
    try:
        check_request(cls.__header_schema__, cls, frame)  # before kio: see dmq.protocol.bounds
    except BoundsError as e:
        raise FrameError(f"cannot decode {cls.__name__} v{api_version}: {e}") from None
    try:
        header, size = read_header(frame, 0)
    except Exception as e:  # kio raises several kinds of errors for bad bytes
        # kio refuses a tagged field it does not know (a request header, v2, knows none) and a
        # client_id length below -1; Kafka's RequestHeaderData skips unknown tags and reads
        # any negative length as null: such a header is read here (never on the common path).
        skipped = _header_skipping_tags(frame, cls.__header_schema__.__flexible__)
        if skipped is None:
            raise FrameError(f"cannot decode {cls.__name__} v{api_version}: {e}") from None
        header, size = skipped
    try:
        body, _ = read_body(frame, size)
    except Exception as e:  # kio raises several kinds of errors for bad bytes
        raise FrameError(f"cannot decode {cls.__name__} v{api_version}: {e}") from None
    # Produce and Fetch have a quick check (fast.NULL_CHECKS); when it finds a null, the
    # generic walk names the field.
    if not quick_null_check or no_nulls is None or not no_nulls(body):
        try:
            _check_nulls(body)
        except ValueError as e:
            raise FrameError(f"{cls.__name__} v{api_version}: {e}") from None
    # Trailing bytes are ignored, as Kafka's own request parser does (librdkafka
    # sends a few after Metadata v12 requests).
    return (
        RequestHeader(header.request_api_key, header.request_api_version,
                      header.correlation_id, header.client_id),
        body,
    )


class _SkippedTagsHeader:
    """A request header read by ``_header_skipping_tags``: kio's header's field names."""

    __slots__ = ("request_api_key", "request_api_version", "correlation_id", "client_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
        self.request_api_key = api_key
        self.request_api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id


def _header_skipping_tags(frame: bytes, flexible: bool) -> tuple[Any, int] | None:
    """A request header read as Kafka's RequestHeaderData.read does: a negative client_id
    length is null, and a flexible header's (v2) tagged fields are skipped (Kafka keeps
    unknown ones aside): (header, size), or None where the bytes do not parse."""
    end = len(frame)
    if end < _HEAD.size + 2:
        return None
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    n = int.from_bytes(frame[_HEAD.size:_HEAD.size + 2], "big", signed=True)
    pos = _HEAD.size + 2
    client_id: str | None = None
    if n >= 0:
        if pos + n > end:
            return None
        try:
            client_id = bytes(frame[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            return None
        pos += n
    if not flexible:
        return _SkippedTagsHeader(api_key, api_version, correlation_id, client_id), pos
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        if pos < 0:
            return None
        _tag, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos) if pos >= 0 else (0, -1)
        if pos < 0 or pos + size > end:
            return None
        pos += size
    if pos < 0:
        return None
    return _SkippedTagsHeader(api_key, api_version, correlation_id, client_id), pos


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos`` and the position after it; (0, -1) if it runs past the
    end or beyond 5 bytes."""
    if pos < 0:
        return 0, -1
    value = shift = 0
    for i in range(pos, min(pos + 5, len(frame))):
        b = frame[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i + 1
        shift += 7
    return 0, -1


class _SpliceWriter:
    def __init__(self) -> None:
        self.parts: list[bytes | ByteSource] = []
        self.current = bytearray()
        self.size = 0

    def write(self, data: bytes) -> int:
        if isinstance(data, SpliceRecords):
            self.parts.append(bytes(self.current))
            self.current = bytearray()
            self.parts.append(data.source)
            self.size += data.source.length
            return data.source.length
        self.current += data
        self.size += len(data)
        return len(data)


Frame = bytes | list[bytes | ByteSource]


def encode_response(correlation_id: int, api_key: int, response: Any) -> Frame:
    """The whole response frame, size prefix included.

    Returns bytes, or a list of bytes and ByteSources when the response holds
    SpliceRecords (concatenated, they are the frame).
    """
    fast_encode = fast.RESPONSE_ENCODERS.get(type(response))
    if fast_encode is not None:
        try:
            return fast_encode(correlation_id, response)
        except Exception:
            pass  # off the fast path (say a tagged field set) or invalid: kio writes it or says why
    return encode_response_with_kio(correlation_id, api_key, response)


def encode_response_with_kio(correlation_id: int, api_key: int, response: Any) -> Frame:
    """``encode_response`` by kio's generic writer (what the fast encoders must match)."""
    buf = _SpliceWriter()
    buf.write(b"\0\0\0\0")
    buf.write(struct.pack(">i", correlation_id))
    if type(response).__flexible__ and api_key != API_VERSIONS_KEY:
        buf.write(b"\0")  # response header v1: no tagged fields
    entity_writer(type(response))(buf, response)  # type: ignore[arg-type]
    size = struct.pack(">i", buf.size - 4)
    if not buf.parts:
        data = buf.current
        data[0:4] = size
        return bytes(data)
    parts = [*buf.parts, bytes(buf.current)]
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = size + first[4:]
    return parts


@cache
def _non_nullable_fields(cls: type[Any]) -> tuple[tuple[str, bool], ...]:
    """(name, may hold nested entities) for the fields of ``cls`` that must not be null."""
    out = []
    for f in fields(cls):
        optional = is_optional(f)
        out.append((f.name, not optional))
    return tuple(out)


def _check_nulls(entity: Any) -> None:
    """Reject null where the schema does not allow it (kio decodes -1 lengths as None)."""
    for name, required in _non_nullable_fields(type(entity)):  # type: ignore[arg-type]
        value = getattr(entity, name)
        if value is None:
            if required:
                raise ValueError(f"null value for non-nullable field {name}")
            continue
        if isinstance(value, tuple):
            for item in value:
                if is_dataclass(item):
                    _check_nulls(item)
        elif is_dataclass(value) and not isinstance(value, type):
            _check_nulls(value)


@cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type[Any], **values: Any) -> Any:
    """Build a kio entity, dropping values for fields this version does not have."""
    names = _field_names(cls)  # type: ignore[arg-type]
    return cls(**{k: v for k, v in values.items() if k in names})


@cache
def constructor(cls: type[Any], *names: str) -> Any:
    """A function of positional values for ``names`` that builds ``cls`` as ``make`` would
    from those keywords: the values of fields this version lacks are dropped. Generated
    once per class and name list, for the hot handlers (no dict built per entity)."""
    have = _field_names(cls)  # type: ignore[arg-type]
    params = ", ".join(f"v{i}" for i in range(len(names)))
    kwargs = ", ".join(f"{n}=v{i}" for i, n in enumerate(names) if n in have)
    namespace: dict[str, Any] = {"cls": cls}
    exec(f"def build({params}):\n    return cls({kwargs})\n", namespace)  # noqa: S102
    build = namespace["build"]
    build.__qualname__ = f"constructor({cls.__name__})"
    return build

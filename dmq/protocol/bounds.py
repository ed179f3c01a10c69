"""Checks a request frame's array counts before kio decodes it.

kio's native reader (0.6.5) reserves room for an array's items from the count the
bytes give, before it reads any of them. A count near 2^32 (a five-byte varint,
or a negative legacy count read as unsigned) asks for tens of GB; the allocation
fails and Rust aborts the process. One 27-byte Produce request stopped a broker
that way, before any authentication.

``check_request(header_cls, body_cls, frame)`` walks the frame with the classes'
schemas and raises BoundsError where an array's count exceeds the bytes left
(every item takes at least one), where a varint runs past five bytes, or where
the bytes end early. It builds no values: strings and bytes are skipped by their
lengths (kio checks those itself), fixed-size fields by their widths.

A class's schema is compiled once into a plan: a tuple of ``(op, arg)`` steps,
from the same dataclass field metadata kio's writer reads (``kafka_type``, tags,
nullability, flexible versions, the request header's legacy ``client_id``).
Pure functions of bytes; thread-safe (plans are immutable, built under the GIL).
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)


class BoundsError(Exception):
    """A frame whose counts or lengths run past its end."""


# Steps of a plan.
FIXED = 0  # arg: width in bytes
LEGACY_STRING = 1  # int16 length, -1 null
LEGACY_BYTES = 2  # int32 length, -1 null
COMPACT_BYTES = 3  # unsigned varint length + 1, 0 null (strings, bytes, records)
LEGACY_ARRAY = 4  # arg: the item's step; int32 count, -1 null
COMPACT_ARRAY = 5  # arg: the item's step; unsigned varint count + 1, 0 null
ENTITY = 6  # arg: the entity's plan
NULLABLE_ENTITY = 7  # arg: the entity's plan; an int8 marker first (-1 null)
TAGS = 8  # arg: {tag: step}; unsigned varint count, then tag, size and value each

Step = tuple[int, Any]

_WIDTHS = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "float64": 8, "bool": 1,
           "uuid": 16, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8}


def _primitive(kafka_type: str, flexible: bool) -> Step:
    width = _WIDTHS.get(kafka_type)
    if width is not None:
        return FIXED, width
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            return COMPACT_BYTES, None
        return (LEGACY_STRING, None) if kafka_type == "string" else (LEGACY_BYTES, None)
    raise ValueError(f"no bounds step for kafka_type {kafka_type!r}")


_PLANS: dict[type[Any], tuple[Step, ...]] = {}


def plan_of(entity: type[Any]) -> tuple[Step, ...]:
    """The steps that walk one ``entity`` (a kio dataclass), its tagged fields last."""
    plan = _PLANS.get(entity)
    if plan is None:
        plan = _PLANS[entity] = _compile(entity)
    return plan


def _compile(entity: type[Any]) -> tuple[Step, ...]:
    flexible = bool(entity.__flexible__)
    header = entity.__name__ == "RequestHeader"
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    for f in fields(entity):
        tag = get_field_tag(f)
        if header and f.name == "client_id":
            step: Step = (LEGACY_STRING, None)  # legacy in every header version, as in Kafka
        else:
            kind = classify_field(f)
            if isinstance(kind, PrimitiveField):
                step = _primitive(get_schema_field_type(f), flexible)
            elif isinstance(kind, PrimitiveTupleField):
                step = (COMPACT_ARRAY if flexible else LEGACY_ARRAY, _primitive(get_schema_field_type(f), flexible))
            elif isinstance(kind, EntityField):
                assert is_dataclass(kind.type_)
                nullable = tag is None and is_optional(f)  # a tagged field is absent, not null
                step = (NULLABLE_ENTITY if nullable else ENTITY, plan_of(kind.type_))
            else:
                assert isinstance(kind, EntityTupleField)
                step = (COMPACT_ARRAY if flexible else LEGACY_ARRAY, (ENTITY, plan_of(kind.type_)))
        if tag is not None:
            tagged[int(tag)] = step
        else:
            steps.append(step)
    if flexible:
        steps.append((TAGS, tagged))
    return tuple(steps)


def check_request(header_cls: type[Any], body_cls: type[Any], frame: bytes | bytearray | memoryview) -> None:
    """Raise BoundsError if a count in ``frame`` (a request without its size) could make kio
    reserve more than the frame holds; return quietly otherwise (kio then decodes it, and
    raises its own errors for what else is wrong)."""
    try:
        pos = walk_plan(plan_of(header_cls), frame, 0)
        walk_plan(plan_of(body_cls), frame, pos)
    except ValueError as e:
        raise BoundsError(str(e)) from None


def walk_plan_py(plan: tuple[Step, ...], frame: bytes | bytearray | memoryview, pos: int) -> int:
    """The position after walking ``plan`` over ``frame`` from ``pos``; ValueError where a
    count or length runs past the frame's end. (The C walk, ``_bounds.walk_plan``, gives the
    same answers; this one stands in where the extension is not built.)"""
    end = len(frame)
    if not 0 <= pos <= end:
        raise _short()
    return _walk(plan, frame, pos, end)


def _short() -> ValueError:
    return ValueError("the request ends before its fields do")


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(pos, min(pos + 5, end)):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i + 1
        shift += 7
    if pos + 5 <= end:
        raise ValueError("a varint in the request runs past five bytes")
    raise _short()


def _int(buf: Any, pos: int, width: int, end: int) -> int:
    if pos + width > end:
        raise _short()
    return int.from_bytes(buf[pos:pos + width], "big", signed=True)


def _walk(plan: tuple[Step, ...], buf: Any, pos: int, end: int) -> int:
    for op, arg in plan:
        pos = _step(op, arg, buf, pos, end)
    return pos


def _step(op: int, arg: Any, buf: Any, pos: int, end: int) -> int:
    if op == FIXED:
        pos += arg
    elif op == COMPACT_BYTES:
        n, pos = _uvarint(buf, pos, end)
        if n:
            pos += n - 1
    elif op == LEGACY_STRING:
        n = _int(buf, pos, 2, end)
        pos += 2 + max(n, 0)
    elif op == LEGACY_BYTES:
        n = _int(buf, pos, 4, end)
        pos += 4 + max(n, 0)
    elif op == COMPACT_ARRAY or op == LEGACY_ARRAY:
        if op == COMPACT_ARRAY:
            count, pos = _uvarint(buf, pos, end)
            count -= 1
        else:
            count = _int(buf, pos, 4, end)
            pos += 4
        if count > end - pos:
            raise ValueError(f"an array in the request counts {count} items in {max(end - pos, 0)} bytes")
        item_op, item_arg = arg
        if item_op == FIXED:
            pos += max(count, 0) * item_arg
        else:
            for _ in range(count):
                pos = _step(item_op, item_arg, buf, pos, end)
    elif op == ENTITY:
        pos = _walk(arg, buf, pos, end)
    elif op == NULLABLE_ENTITY:
        marker = _int(buf, pos, 1, end)
        pos += 1
        if marker >= 0:
            pos = _walk(arg, buf, pos, end)
    else:  # TAGS
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise ValueError(f"the request counts {count} tagged fields in {max(end - pos, 0)} bytes")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            stop = pos + size
            if stop > end:
                raise _short()
            step = arg.get(tag)
            if step is not None:  # a known tag: its value is read by kio, within its size
                _step(step[0], step[1], buf, pos, stop)
            pos = stop
    if pos > end:
        raise _short()
    return pos


try:
    from dmq.protocol._bounds import walk_plan  # type: ignore[import-not-found]

    IMPLEMENTATION = "c"
except ImportError:  # the C extension is optional (setup.py): the same walk in Python
    walk_plan = walk_plan_py
    IMPLEMENTATION = "python"

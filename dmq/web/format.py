"""How the console shows values: sizes, times, rates and record bytes (JSON, text, hex)."""

from __future__ import annotations

import json
import time

FORMATS = ("json", "text", "hex")


def size(n: int | None) -> str:
    """``812 B``, ``97.7 KiB``, ``1.2 GiB``; ``?`` when unknown."""
    if n is None or n < 0:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def timestamp(ms: int | None) -> str:
    """UTC, to the millisecond: ``2026-11-27 12:00:01.250``; ``-`` for none."""
    if ms is None or ms < 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


def age(ms: int | None, now_ms: int | None = None) -> str:
    """How long ago: ``42 s``, ``5 min 3 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if ms is None or ms < 0:
        return "-"
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    s = max(0, (now_ms - ms) // 1000)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def rate(per_second: float | None) -> str:
    if per_second is None:
        return "-"
    if per_second >= 1000:
        return f"{per_second / 1000:.1f} k/s"
    return f"{per_second:.1f}/s"


def show_bytes(data: bytes | None, fmt: str) -> str:
    """Record bytes as ``fmt``: ``json`` pretty-prints a JSON document (other bytes shown as
    text), ``text`` is UTF-8 (undecodable bytes as U+FFFD), ``hex`` is spaced hex pairs."""
    if data is None:
        return "null"
    if fmt == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def matches(search: str, *values: bytes | str | None) -> bool:
    """Whether ``search`` occurs in any of the values (bytes compared as UTF-8)."""
    needle = search.encode()
    for v in values:
        if v is None:
            continue
        if needle in (v.encode() if isinstance(v, str) else v):
            return True
    return False

"""The site's /favicon.ico: static/favicon.svg's shapes drawn at 32x32 into a PNG inside an ICO.

A browser asks for /favicon.ico by itself for any page without an icon link (the README's host pages,
a user's own page at the site's root): served, that request succeeds instead of logging a 404."""
from __future__ import annotations

import math
import struct
import zlib
from typing import List, Sequence, Tuple

SIZE = 32
#: static/favicon.svg (viewBox 0 0 32 32): a rounded square and a rising line ending in a dot
BACKGROUND = (0x1F, 0x4E, 0x8C)
LINE = (0xFF, 0xD1, 0x66)
CORNER = 6.0
POLYLINE = ((6.0, 22.0), (12.0, 14.0), (17.0, 18.0), (26.0, 8.0))
STROKE = 3.0
DOT = (26.0, 8.0, 2.5)
#: samples per pixel side (anti-aliasing)
SAMPLES = 4


def _in_rounded_square(x: float, y: float) -> bool:
    cx = min(max(x, CORNER), SIZE - CORNER)
    cy = min(max(y, CORNER), SIZE - CORNER)
    return (x - cx) ** 2 + (y - cy) ** 2 <= CORNER ** 2


def _segment_distance(x: float, y: float, a: Tuple[float, float], b: Tuple[float, float]) -> float:
    dx, dy = b[0] - a[0], b[1] - a[1]
    t = max(0.0, min(1.0, ((x - a[0]) * dx + (y - a[1]) * dy) / (dx * dx + dy * dy)))
    return math.hypot(x - a[0] - t * dx, y - a[1] - t * dy)


def _on_line(x: float, y: float) -> bool:
    # round caps and joins: within half the stroke of any segment
    if any(_segment_distance(x, y, a, b) <= STROKE / 2 for a, b in zip(POLYLINE, POLYLINE[1:])):
        return True
    return math.hypot(x - DOT[0], y - DOT[1]) <= DOT[2]


def _pixel(px: int, py: int) -> Sequence[int]:
    """RGBA of one pixel: the share of its samples in each shape."""
    inside = line = 0
    for i in range(SAMPLES):
        for j in range(SAMPLES):
            x, y = px + (i + 0.5) / SAMPLES, py + (j + 0.5) / SAMPLES
            if _in_rounded_square(x, y):
                inside += 1
                line += _on_line(x, y)
    if inside == 0:
        return (0, 0, 0, 0)
    mix = [round((c0 * (inside - line) + c1 * line) / inside) for c0, c1 in zip(BACKGROUND, LINE)]
    return tuple(mix) + (round(255 * inside / SAMPLES ** 2),)


def _png(rows: List[bytes]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\0" + row for row in rows)    # filter 0 on every row
    header = struct.pack(">IIBBBBB", SIZE, SIZE, 8, 6, 0, 0, 0)   # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def favicon_ico() -> bytes:
    """The icon as an ICO file holding one 32x32 PNG (every browser since 2013 reads PNG in ICO)."""
    rows = [bytes(v for px in range(SIZE) for v in _pixel(px, py)) for py in range(SIZE)]
    png = _png(rows)
    header = struct.pack("<HHH", 0, 1, 1)          # reserved, type 1 (icon), one image
    entry = struct.pack("<BBBBHHII", SIZE, SIZE, 0, 0, 1, 32, len(png), 6 + 16)
    return header + entry + png

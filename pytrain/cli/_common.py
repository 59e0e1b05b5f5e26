"""Shared pieces of the ``pytrain`` command: one-line error reporting, formatting, atomic writes."""
from __future__ import annotations

import argparse
import sys
from typing import IO, Iterable, List, NoReturn, Optional, Sequence

from pytrain.errors import PytrainError

PROG = "pytrain"


class CliError(PytrainError):
    """A bad command line the parser cannot catch (conflicting options, an existing output...)."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is ONE line ``pytrain: error: ...`` (exit 2), like every other."""

    def error(self, message: str) -> NoReturn:
        hint = " (see '{} --help')".format(self.prog)
        self.exit(2, "{}: error: {}{}\n".format(PROG, message, hint))


def error_line(exc: BaseException) -> str:
    """The single line printed for ``exc``: its message with newlines folded."""
    if isinstance(exc, OSError) and exc.strerror:
        text = "{}: {}".format(exc.filename, exc.strerror) if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return "{}: error: {}".format(PROG, " ".join(text.split()))


def say(msg: str = "", stream: Optional[IO[str]] = None) -> None:
    """Print to stdout (results) or the given stream, flushing so order holds with stderr."""
    out = stream if stream is not None else sys.stdout
    out.write(msg + "\n")
    out.flush()


def note(msg: str) -> None:
    """A remark on stderr that is not an error."""
    say("{}: {}".format(PROG, msg), sys.stderr)


def count(n: int) -> str:
    """12345 -> '12,345'."""
    return "{:,}".format(int(n))


def shape_str(shape: Optional[Sequence[object]]) -> str:
    """[None, 'N', 64] -> '[?, N, 64]'; None (unknown rank) -> '?'."""
    if shape is None:
        return "?"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def size_str(nbytes: int) -> str:
    """Bytes as B/KB/MB with one decimal."""
    value = float(nbytes)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return "{:.0f} {}".format(value, unit) if unit == "B" else "{:.1f} {}".format(value, unit)
        value /= 1024
    return str(nbytes)


def table(rows: Iterable[Sequence[object]], indent: str = "  ") -> List[str]:
    """Left-aligned columns; numbers are right-aligned."""
    rows = [[str(c) for c in r] for r in rows]
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    out = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            numeric = c.replace(",", "").replace(".", "").isdigit()
            cells.append(c.rjust(widths[i]) if numeric else c.ljust(widths[i]))
        out.append((indent + "  ".join(cells)).rstrip())
    return out

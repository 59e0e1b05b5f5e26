"""Turn what a caller hands us (a path, raw bytes, or text) into bytes/text plus a name for messages.

The CLI passes paths; the browser passes file contents it read through a file picker, so every
loader accepts both and needs a display name for error messages either way.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple, Union

from pytrain.errors import DataError

Source = Union[str, bytes, bytearray, memoryview, "os.PathLike[str]"]


def is_pathlike(src: object) -> bool:
    """True for a filesystem path (str without a newline, or os.PathLike)."""
    if isinstance(src, os.PathLike):
        return True
    return isinstance(src, str) and "\n" not in src and "\r" not in src


def read_bytes(src: Source, name: Optional[str], what: str) -> Tuple[bytes, str]:
    """The content of ``src`` as bytes and the name to use in messages.

    ``what`` says which kind of file this is ("data file", "expected file") for the error text.
    """
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src), name or "<{} bytes>".format(what)
    if not is_pathlike(src):
        raise DataError("{} must be a path or bytes, got {}".format(what, type(src).__name__))
    path = os.fspath(src)
    label = name or path
    if os.path.isdir(path):
        raise DataError("{} {!r} is a directory, expected a file".format(what, label))
    try:
        with open(path, "rb") as f:
            return f.read(), label
    except FileNotFoundError:
        raise DataError("{} {!r} does not exist".format(what, label)) from None
    except OSError as e:
        raise DataError("cannot read {} {!r}: {}".format(what, label, e.strerror or e)) from None


def read_text(src: Source, name: Optional[str], what: str) -> Tuple[str, str]:
    """Like :func:`read_bytes` but decoded as UTF-8 (a leading BOM is dropped); a str holding a
    newline is taken as the text itself rather than a path."""
    if isinstance(src, str) and not is_pathlike(src):
        text, label = src, name or "<{} text>".format(what)
    else:
        raw, label = read_bytes(src, name, what)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError("{} {!r} is not UTF-8 text (bad byte at offset {})".format(
                what, label, e.start)) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, label


def extension(src: object, name: Optional[str]) -> str:
    """Lower-case file extension (".csv") from ``name`` or a path source; "" when unknown."""
    candidate = name
    if candidate is None and is_pathlike(src):
        candidate = os.fspath(src)  # type: ignore[arg-type]
    if not candidate:
        return ""
    return os.path.splitext(str(candidate))[1].lower()

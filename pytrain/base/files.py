"""Atomic file writes: a crash, a kill -9 or a full disk leaves either the old file or the new one, never
half of one, and the temporaries of a writer that died are removed by the next writer or reader."""
from __future__ import annotations

import os
import re
from typing import Union

from pytrain.errors import SaveError

PathLike = Union[str, "os.PathLike[str]"]


def _temporary(path: str, pid: int) -> str:
    return os.path.join(os.path.dirname(path), ".%s.tmp-%d" % (os.path.basename(path), pid))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    kill = getattr(os, "kill", None)
    if kill is None:  # Pyodide: one process, so any other writer is gone
        return False
    try:
        kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(path: PathLike) -> int:
    """Delete the temporaries that writers of ``path`` left when they were killed mid-write; returns how
    many. Those of live processes (a save under way) are kept."""
    path = os.path.abspath(os.fspath(path))
    directory, base = os.path.split(path)
    pattern = re.compile(r"\.%s\.tmp-(\d+)$" % re.escape(base))
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        m = pattern.match(name)
        if m and not _alive(int(m.group(1))):
            try:
                os.unlink(os.path.join(directory, name))
                removed += 1
            except OSError:
                pass
    return removed


def write_atomic(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (write a temporary beside it, fsync, rename).

    Raises SaveError naming ``path`` when it cannot be written (a directory, no permission, ...).
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        raise SaveError("cannot save to %s: it is a directory, expected a file path" % path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise SaveError("cannot save to %s: the directory %s does not exist" % (path, directory))
    remove_stale_temporaries(path)
    tmp = _temporary(path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            try:
                os.fsync(f.fileno())
            except OSError:  # some virtual file systems (Pyodide's MEMFS) cannot fsync
                pass
        os.replace(tmp, path)
    except OSError as e:
        raise SaveError("cannot save to %s: %s" % (path, e.strerror or e)) from None
    finally:
        if os.path.exists(tmp):
            try:
                os.unlink(tmp)
            except OSError:
                pass

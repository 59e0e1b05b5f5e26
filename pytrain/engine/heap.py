"""Keep freed large buffers in the process for reuse across training steps (glibc only).

A training step allocates and frees the same large temporaries every time (im2col columns,
activations, their gradients). glibc serves blocks above its mmap threshold with fresh pages
and hands them back to the kernel on free, so every step page-faults and zero-fills them again:
on the LeNet benchmark that was about 40% of the step. Raising the mmap threshold and the
trim threshold keeps that memory in the heap, where the next step's allocations find it, the
way onnxruntime's arena allocator keeps its buffers. Peak memory does not grow (the memory is
reused, not added); it is only returned to the OS when the process exits.

Set ``PYTRAIN_KEEP_HEAP=0`` to leave the C allocator alone.
"""
from __future__ import annotations

import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's upper limit for M_MMAP_THRESHOLD on 64-bit systems (larger values are refused)
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
_TRIM_THRESHOLD = 2 ** 31 - 1

_done = False


def keep_freed_memory() -> bool:
    """Apply the setting once per process; True if glibc accepted it (False elsewhere: other
    allocators, Pyodide, or ``PYTRAIN_KEEP_HEAP=0``)."""
    global _done
    if _done:
        return True
    if os.environ.get("PYTRAIN_KEEP_HEAP", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        _done = bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False
    return _done

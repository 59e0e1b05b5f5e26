"""Size limits for everything that comes from outside: tensors a model declares or computes, checkpoint
archives and their members, data files.

The defaults fit a browser tab (Pyodide's WebAssembly heap is at most 2 GiB) and are far above any model
pytrain is meant to train on a device. Raise them for a bigger machine::

    import pytrain.base.limits
    pytrain.base.limits.set_limits(max_tensor_bytes=4 << 30)

or with the environment variables ``PYTRAIN_MAX_TENSOR_BYTES``, ``PYTRAIN_MAX_FILE_BYTES`` and
``PYTRAIN_MAX_HEAP_BYTES``.
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, Optional, Tuple

from pytrain.errors import LimitError


def _env(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


#: the largest single tensor (declared or computed), in bytes
max_tensor_bytes = _env("PYTRAIN_MAX_TENSOR_BYTES", 512 << 20)
#: the largest file or archive member read (a model, a checkpoint, one array in a checkpoint), in bytes
max_file_bytes = _env("PYTRAIN_MAX_FILE_BYTES", 1 << 30)
#: the memory a training run may need by its estimate (``Module.memory_estimate``), in bytes: Pyodide 0.17.1's
#: WebAssembly memory grows to at most 2 GiB ("maximum": 2147483648 in its pyodide.asm.js), shared with the
#: interpreter, numpy and the data
max_heap_bytes = _env("PYTRAIN_MAX_HEAP_BYTES", 2 << 30)
#: where the heap is shared and bounded (a browser tab, whose worker installs it: pytrain/webapp/memory.py), a
#: function returning (the bytes the heap holds now, the heap's limit or None for ``max_heap_bytes``); a run must
#: then fit in what is left. None natively, where ``max_heap_bytes`` is the budget of the run alone.
heap_now: Optional[Callable[[], Tuple[int, Optional[int]]]] = None


def set_limits(max_tensor_bytes: Optional[int] = None, max_file_bytes: Optional[int] = None,
               max_heap_bytes: Optional[int] = None) -> None:
    """Change the limits for this process (positive byte counts)."""
    g = globals()
    for name, value in (("max_tensor_bytes", max_tensor_bytes), ("max_file_bytes", max_file_bytes),
                        ("max_heap_bytes", max_heap_bytes)):
        if value is not None:
            if int(value) < 1:
                raise ValueError("%s must be a positive number of bytes, got %r" % (name, value))
            g[name] = int(value)


def check_tensor(shape: Iterable[int], itemsize: int, what: str) -> int:
    """The element count of ``shape``; raises LimitError (before anything is allocated) when a tensor of
    that shape would be larger than ``max_tensor_bytes``, or when a dimension is negative."""
    count = 1
    dims = [int(d) for d in shape]
    for d in dims:
        if d < 0:
            raise LimitError("%s: negative dimension in shape %s" % (what, dims))
        count *= d
    if count * max(1, int(itemsize)) > max_tensor_bytes:
        raise LimitError("%s: a tensor of shape %s (%d bytes) exceeds pytrain's tensor limit of %d bytes; raise it "
                         "with pytrain.base.limits.set_limits(max_tensor_bytes=...) or PYTRAIN_MAX_TENSOR_BYTES"
                         % (what, dims, count * max(1, int(itemsize)), max_tensor_bytes))
    return count


def check_file(size: int, what: str) -> None:
    """Raise LimitError when a file or archive member of ``size`` bytes exceeds ``max_file_bytes``."""
    if size > max_file_bytes:
        raise LimitError("%s is %d bytes, over pytrain's file limit of %d bytes; raise it with "
                         "pytrain.limits.set_limits(max_file_bytes=...) or PYTRAIN_MAX_FILE_BYTES"
                         % (what, size, max_file_bytes))


def heap_budget(held: int = 0) -> Tuple[int, int]:
    """(the memory limit, the bytes of it left for a run) in bytes. Natively both are ``max_heap_bytes``; where
    ``heap_now`` is set, what is left is the limit less what the heap already holds besides the ``held`` bytes
    (what the run itself holds already: its model's parameters, counted in its estimate)."""
    if heap_now is None:
        return max_heap_bytes, max_heap_bytes
    used, limit = heap_now()
    limit = int(limit or max_heap_bytes)
    return limit, limit - max(0, int(used) - int(held))


def check_heap(size: int, what: str, held: int = 0,
               advice: str = "train with a smaller batch or fewer trainable parameters (LoRA)") -> None:
    """Raise LimitError when ``what`` needs ``size`` bytes, over what is left of the limit (:func:`heap_budget`,
    ``held`` of them already in the heap); ``advice``: what to do instead."""
    limit, left = heap_budget(held)
    if size > left:
        other = "" if left == limit else (" less the %d bytes (%.1f MiB) the heap already holds besides this model"
                                          % (limit - left, (limit - left) / 2.0 ** 20))
        raise LimitError("%s (%d bytes), over pytrain's memory limit of %d bytes (%.1f MiB%s; Pyodide's WebAssembly "
                         "heap is 2 GiB in all); %s, or raise the limit with "
                         "pytrain.limits.set_limits(max_heap_bytes=...) or PYTRAIN_MAX_HEAP_BYTES"
                         % (what, size, limit, limit / 2.0 ** 20, other, advice))

"""Layer 3, ops: the browser's WebGPU device (web/gpu/webgpu.js) seen from Python: tensors held on the
GPU by id, the transfers between the wasm heap and the GPU (counted), and the WGSL kernels as plan
kernels (:mod:`.kernels`).

Design (Pyodide 0.17 cannot await inside a synchronous call):

- Python plans the step as on the CPU (:class:`pytrain.engine.executor.Plan`); a plan built with
  :func:`.kernels.choose` as its kernel chooser runs each node whose op has a shader as a GPU kernel,
  taking and returning :class:`GpuTensor` handles. A kernel only enqueues: the JS device's
  ``dispatch`` records a compute pass and submits it (``queue.submit`` does not block), so the
  straight-line plan runs to its end at once, and tensors stay on the GPU between ops and between
  steps (parameters and optimizer state are updated in place there).
- A node without a shader (or a case its shader declines) runs its numpy/wasm kernel. Its CPU
  inputs are read as they are; a GPU input is given as its host copy when it has one (a fed batch),
  as a zero-stride stand-in of its shape when the op reads only shapes (Shape, CastLike's target,
  SumToShape's target), and otherwise is refused with :class:`GpuTransferError` naming the node: a
  GPU -> CPU copy is asynchronous, so it cannot happen inside the step. CPU results a later shader
  reads are uploaded (``queue.writeBuffer``, synchronous from here), and every upload is counted; those
  computed from constants and shapes alone are kept while their bytes stay the same, and go up once
  (:func:`.kernels.on_cpu`, :meth:`Device.constant`).
- Only the loss (and metrics) come back: :meth:`GpuTensor.read_into` enqueues a copy whose promise
  writes the bytes into a numpy array in the wasm heap; the worker's JS awaits the device's
  ``settle()`` between training slices, after Python has returned, and the next slice reads them.

A GpuTensor frees its buffer when Python drops it (the plan frees a slot after its last reader), and
the JS device reuses freed buffers of the same size: the queue runs in order, so work enqueued
before the free has read the buffer before any later use writes it.
"""
from __future__ import annotations

import json
import struct
import weakref
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import PytrainError
from pytrain.ops.wasm.address import ptr

class GpuTransferError(PytrainError):
    """A node would need a GPU tensor's values on the CPU in the middle of a step."""


#: dtypes a GPU tensor holds: float32, and integer labels as int32 (WGSL has no 64-bit integers)
_STORED = {np.dtype(np.float32): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32),
           np.dtype(np.int32): np.dtype(np.int32)}


#: the GPU memory pytrain assumes when the browser says nothing (WebGPU reports no memory size): what an
#: integrated laptop GPU commonly has to give; a device's ``memory`` may say otherwise
GPU_MEMORY = 2 * 1024 ** 3


class Device:
    """The page's WebGPU device (the JS object registered as ``pytrain_webgpu``) and the transfers
    counted on the Python side.

    Its limits: ``max_buffer``, the largest tensor (the adapter's ``maxStorageBufferBindingSize`` and
    ``maxBufferSize``, the smaller), and ``memory``, the bytes the tensors alive at once may take
    (:data:`GPU_MEMORY` unless the page says); ``allocated`` is what they take now. A tensor past either is
    refused (:class:`GpuTransferError` naming it and the limit) before it is allocated."""

    def __init__(self, js: Any) -> None:
        self.js = js
        self.adapter = str(js.adapter)
        self.max_binding = int(js.max_binding)
        self.max_buffer = min(self.max_binding, int(getattr(js, "max_buffer", self.max_binding)))
        self.memory = int(getattr(js, "memory", 0) or GPU_MEMORY)
        self.allocated = 0
        self.uploads = 0
        self.upload_bytes = 0
        self.readbacks = 0
        self._alloc, self._free, self._write = js.alloc, js.free, js.write
        self._read_into, self._call = js.read_into, js.call
        self._constants: Dict[Tuple[int, str], Tuple[Any, "GpuTensor"]] = {}

    def upload(self, array: np.ndarray, keep_host: bool = False) -> "GpuTensor":
        """``array`` copied to a new GPU tensor (int64 labels as int32, refused beyond its range);
        ``keep_host`` keeps the array as the tensor's host copy for CPU kernels that read it."""
        a = np.asarray(array)
        stored = _STORED.get(a.dtype)
        if stored is None:
            raise GpuTransferError("the GPU holds float32 and integer tensors, not %s" % a.dtype)
        if stored != a.dtype:
            if a.size and (a.min() < -2 ** 31 or a.max() >= 2 ** 31):
                raise GpuTransferError("an int64 tensor holds values beyond int32, which the GPU stores")
        data = np.ascontiguousarray(a, dtype=stored)
        t = self.empty(a.shape, a.dtype)
        if data.nbytes:
            self._write(t.id, ptr(data), data.nbytes)
        self.uploads += 1
        self.upload_bytes += data.nbytes
        if keep_host:
            t.host = a
        return t

    def constant(self, array: np.ndarray, form: str = "", make: Optional[Callable[[], "GpuTensor"]] = None) \
            -> "GpuTensor":
        """A read-only array (a plan's constant) on the GPU, uploaded once and kept while the array lives (a
        read-only view made in a step is uploaded each time, and its copy freed with it). ``make``: the tensor to
        keep for it instead of its plain upload, named ``form`` (Gather's indices made non-negative)."""
        if array.flags.writeable:
            return self.upload(array) if make is None else make()
        key = (id(array), form)
        hit = self._constants.get(key)
        if hit is None or hit[0]() is not array:
            hit = (weakref.ref(array), self.upload(array) if make is None else make())
            self._constants[key] = hit
            weakref.finalize(array, self._constants.pop, key, None)
        return hit[1]

    def empty(self, shape: Sequence[int], dtype: Any = np.float32) -> "GpuTensor":
        """A new GPU tensor of ``shape`` (uninitialized)."""
        dt = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64))
        nbytes = size * _STORED[dt].itemsize
        self.check("a %s tensor" % list(shape), nbytes, nbytes)
        t = GpuTensor(self, int(self._alloc(nbytes)), tuple(int(d) for d in shape), dt)
        self.allocated += nbytes
        return t

    def zeros(self, shape: Sequence[int], dtype: Any = np.float32) -> "GpuTensor":
        """A new GPU tensor of ``shape`` filled with zeros on the GPU (no upload: nothing of its size in the heap)."""
        t = self.empty(shape, dtype)
        self.js.zero(t.id)
        return t

    def renewed(self) -> None:
        """The JS device was replaced after a loss (web/gpu/webgpu.js ``renew``): the constants kept on the lost one
        are gone (each goes up again when next used); the tensors of the lost one only free."""
        self._constants.clear()

    def check(self, what: str, largest: int, total: int) -> None:
        """Refuse (GpuTransferError naming ``what`` and the limit) a tensor of ``largest`` bytes past
        ``max_buffer``, or ``total`` more bytes past what is left of ``memory``."""
        if largest > self.max_buffer:
            raise GpuTransferError("%s of %d bytes exceeds this GPU's largest buffer (maxStorageBufferBindingSize, "
                                   "maxBufferSize: %d bytes)" % (what, largest, self.max_buffer))
        if self.allocated + total > self.memory:
            raise GpuTransferError("%s (%.1f MiB) does not fit the GPU memory left (%.1f MiB of the %.1f MiB pytrain "
                                   "assumes this GPU has)" % (what, total / 2.0 ** 20,
                                                              (self.memory - self.allocated) / 2.0 ** 20,
                                                              self.memory / 2.0 ** 20))

    def dispatch(self, kernel: str, items: int, tensors: Sequence[Any], params: Sequence[Any],
                 per_group: int = 64) -> None:
        """Enqueue ``kernel`` over ``items`` threads (``per_group`` a workgroup; y carries past 65535
        groups) on ``tensors`` (GpuTensor or None) with ``params`` (ints, and floats as float32 bits)."""
        groups = max(1, -(-items // per_group))
        gx, gy = (groups, 1) if groups <= 65535 else (65535, -(-groups // 65535))
        self.grid(kernel, (gx, gy, 1), tensors, params)

    def grid(self, kernel: str, grid: Tuple[int, int, int], tensors: Sequence[Any], params: Sequence[Any]) -> None:
        """Enqueue ``kernel`` on a grid of workgroups (see :meth:`dispatch`)."""
        ids = [0 if t is None else t.id for t in tensors]
        words = [_word(p) for p in params]
        self._call(kernel, grid[0], grid[1], grid[2], len(ids), *(ids + words))

    def free(self, buffer_id: int, nbytes: int = 0) -> None:
        """Give buffer ``buffer_id`` (of ``nbytes``) back to the JS device's pool (GpuTensor does when dropped)."""
        self.allocated -= nbytes
        self._free(buffer_id)

    def read_into(self, buffer_id: int, out: np.ndarray) -> None:
        """Enqueue the copy of buffer ``buffer_id`` into ``out`` (see :meth:`GpuTensor.read_into`)."""
        self.readbacks += 1
        self._read_into(buffer_id, ptr(out), out.nbytes)

    def counts(self) -> Dict[str, int]:
        """The JS device's counters: dispatches, uploads, uploadBytes, readbacks, readbackBytes."""
        return json.loads(str(self.js.counts()))


def _word(p: Any) -> int:
    """A kernel parameter as the u32 the shader reads: an int as itself (negative as two's complement),
    a float as its float32 bits."""
    if isinstance(p, (bool, int, np.integer)):
        return int(p) & 0xFFFFFFFF
    return struct.unpack("<I", struct.pack("<f", float(p)))[0]


class GpuTensor:
    """A tensor in a GPU buffer: its shape and logical dtype (int64 labels are stored as int32),
    and optionally the host array it was uploaded from."""

    __slots__ = ("device", "id", "shape", "dtype", "host", "base", "__weakref__")

    def __init__(self, device: Device, id: int, shape: Tuple[int, ...], dtype: np.dtype) -> None:
        self.device = device
        self.id = id
        self.shape = shape
        self.dtype = dtype
        self.host: Optional[np.ndarray] = None
        self.base: Optional["GpuTensor"] = None   # a view's tensor, which owns the buffer (kept alive by the view)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def stand_in(self) -> np.ndarray:
        """A zero-stride array of this shape and dtype, for kernels that read only shapes."""
        return np.broadcast_to(np.zeros((), self.dtype), self.shape)

    def read_into(self, out: np.ndarray) -> None:
        """Enqueue a copy of the values into ``out`` (float32, C-contiguous, this size), there once the
        worker's JS has awaited the device's settle(); keep ``out`` alive until then."""
        if out.dtype != np.float32 or not out.flags.c_contiguous or out.size != self.size:
            raise GpuTransferError("read_into takes a C-contiguous float32 array of %d values" % self.size)
        self.device.read_into(self.id, out)

    def __del__(self) -> None:
        if self.base is not None:   # a view: its base frees the buffer
            return
        try:
            self.device.free(self.id, self.size * _STORED[self.dtype].itemsize)
        except Exception:  # the page is going away
            pass

    def __repr__(self) -> str:
        return "GpuTensor(%s, %s, id=%d)" % (list(self.shape), self.dtype, self.id)


_device: Optional[Device] = None
_absent = False   # looked for and not registered (the page registers it before pytrain's session exists)
_use = [True, 0]  # whether the page lets the device train (the user's choice), and how many times that was set


def use(on: bool) -> None:
    """Let the page's registered device train (``on``) or not (the user turned it off, or only a software
    adapter is there and the user did not ask for it): :func:`device` returns None while off. Every call
    starts the device's training afresh (:func:`choice`), as the CPU may have trained in between."""
    global _absent
    _use[0], _use[1] = bool(on), _use[1] + 1
    if on:
        _absent = False   # (registered since it was last looked for)


def choice() -> int:
    """How many times :func:`use` was called: a GPU training made under another choice is stale."""
    return _use[1]


def device() -> Optional[Device]:
    """The page's WebGPU device, or None when the page registered none (no adapter, turned off, CPython)."""
    global _device, _absent
    if not _use[0]:
        return None
    if _device is None and not _absent:
        try:  # registered by the page when the user turned the GPU on (web/gpu/webgpu.js registerWithPyodide)
            import pytrain_webgpu  # type: ignore
        except ImportError:
            _absent = True
            return None
        _device = Device(pytrain_webgpu)
    return _device


def on_gpu(x: Any) -> GpuTensor:
    """``x`` as a GPU kernel's input: itself, a read-only array (a plan's constant) uploaded once and kept while it
    lives (:meth:`Device.constant`), or another array uploaded (counted)."""
    if isinstance(x, GpuTensor):
        return x
    dev = device()
    return dev.constant(x) if isinstance(x, np.ndarray) else dev.upload(np.asarray(x))

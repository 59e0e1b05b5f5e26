"""Layer 9, webapp: the checkpoint of a GPU training whose optimizer state lives on the GPU only (past the wasm
heap's budget, :func:`pytrain.webapp.gpu_slices.check_heap`), streamed: the parameters from the heap (read back
first, as for any save), then each moment read back alone into an array of its own, written into the checkpoint's
stream (:func:`pytrain.checkpoint.encode_chunks`, the very bytes :meth:`CheckpointState.to_bytes` writes) and let
go, so the heap holds at most one moment at a time. The worker's JS drives it: each call of :meth:`SaveStream.next`
either enqueues the next read back (the JS then awaits the device) or writes what has landed, and hands out the
checkpoint's pieces, which the JS copies out of the heap and joins."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from pytrain.checkpoint import OptimizerState, encode_chunks
from pytrain.errors import PytrainError


class SaveStream:
    """One streamed save of ``gpu``'s (a GpuTraining with ``keep_moments``) module's checkpoint."""

    def __init__(self, gpu: Any) -> None:
        state = gpu.module.state
        slots = gpu.slot_names
        self._order: List[Tuple[str, str, Any]] = [
            (p, s, t) for p in sorted(gpu.moments) for s, t in sorted(zip(slots, gpu.moments[p]))]
        self._box: Optional[np.ndarray] = None   # the moment read back, landed once the JS awaited the device
        self._read = False   # the box's read is enqueued (the next call writes it)
        self._next = 0   # the index in _order of the moment the writer asks for next
        opt = state.optimizer_state
        lazy = {p: _Landed(self, p, sorted(slots)) for p in gpu.moments}
        self._chunks: Iterator[Any] = encode_chunks(state.parameters, state.properties,
                                                    OptimizerState(opt.step, opt.learning_rate, lazy))
        #: the largest array this stream held at once (bytes): one moment
        self.held = 0

    def next(self) -> Dict[str, Any]:
        """Enqueue the next moment's read back (``pending``: the JS awaits the device, then calls again), or write
        the checkpoint up to and with the moment landed; ``chunks``: the checkpoint's pieces so far, in order;
        ``done``: the last of them."""
        if self._next < len(self._order) and not self._read:
            _, _, t = self._order[self._next]
            self._box = np.empty(t.shape, np.float32)
            self.held = max(self.held, self._box.nbytes)
            t.read_into(self._box)
            self._read = True
            return {"chunks": [], "pending": True, "done": False}
        chunks: List[Any] = []
        wanted = self._next
        for member in self._chunks:   # (up to the member of the moment landed, or to the end)
            chunks.extend(member)
            if self._next > wanted:
                return {"chunks": chunks, "pending": False, "done": False}
        return {"chunks": chunks, "pending": False, "done": True}

    def take(self, p: str, slot: str) -> np.ndarray:
        """The moment the writer asks for: the one landed (it must be the next in order)."""
        want = self._order[self._next] if self._next < len(self._order) else None
        if want is None or (want[0], want[1]) != (p, slot) or not self._read or self._box is None:
            raise PytrainError("the streamed save asked for moment %s of %r before it was read back" % (slot, p))
        box, self._box, self._read = self._box, None, False
        self._next += 1
        return box


class _Landed(Mapping):
    """Parameter ``p``'s moments as the checkpoint writer reads them: each one read back when asked for."""

    def __init__(self, stream: SaveStream, p: str, slots: List[str]) -> None:
        self._stream, self._p, self._slots = stream, p, slots

    def __getitem__(self, slot: str) -> np.ndarray:
        return self._stream.take(self._p, slot)

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

"""pytrain/ops/wasm/address.py's ptr(): the wasm kernels' byte addresses read from numpy's array struct instead of
``__array_interface__``, natively (CPython 64-bit here; tests/browser/test_wasm_routing.py runs the same checks in
Pyodide 0.17.1's wasm32). The oracle is ``__array_interface__["data"][0]``; an address that is not the array's
own would be a kernel reading or writing another array's memory."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from pytrain.ops import wasm
from pytrain.ops.wasm import address


def _oracle(a) -> int:
    return a.__array_interface__["data"][0]


def test_the_direct_read_is_taken_here():
    assert address.DIRECT
    assert wasm.ptr is address.ptr


def _views():
    base = np.arange(7 * 9 * 5, dtype=np.float32).reshape(7, 9, 5)
    return [base, base[1:], base[3:, 2:, 1:], base[2, 4], base[..., 4], base[::-1], base[:, ::-2, 1:],
            base.reshape(-1)[17:], base.T, np.empty(0, np.float32), base[7:], np.zeros((), np.float64),
            np.frombuffer(bytearray(64), np.float32, offset=12), np.arange(10, dtype=np.int64)[3:]]


@pytest.mark.parametrize("i", range(14))
def test_views_at_offsets_read_their_own_first_element(i):
    a = _views()[i]
    assert address.ptr(a) == _oracle(a)


def test_an_id_reused_after_collection_reads_the_new_array():
    """ids come back after garbage collection: the same id must give the new array's address, never the old."""
    seen = {}
    reused = 0
    for k in range(2000):
        a = np.full(16 + (k % 7) * 8, k, np.float32)[k % 3:]   # a view: its own struct, the base's buffer
        p = address.ptr(a)
        assert p == _oracle(a)
        if id(a) in seen and seen[id(a)] != p:
            reused += 1
        seen[id(a)] = p
        del a
        if k % 500 == 0:
            gc.collect()
    assert reused > 0  # (the check above ran on reused ids with other buffers)


def test_an_array_resized_in_place_reads_its_new_buffer():
    a = np.zeros(8, np.float32)
    address.ptr(a)
    a.resize(1 << 20, refcheck=False)  # (a new buffer for the same object, 4 MiB: not grown in place)
    assert address.ptr(a) == _oracle(a)


def test_other_objects_take_the_interface():
    class Sub(np.ndarray):
        pass

    sub = np.arange(12, dtype=np.float32).view(Sub)[2:]

    class Exporter:
        def __init__(self, target):
            self.__array_interface__ = target.__array_interface__

    own = np.ones(5, np.float32)
    for a in (sub, own[1:].view(Sub), Exporter(own[2:])):
        assert address.ptr(a) == _oracle(a)


def test_a_layout_that_fails_the_check_falls_back(monkeypatch):
    monkeypatch.setattr(address, "_word_reader", lambda: None)
    assert address._make_ptr() is address.interface_ptr

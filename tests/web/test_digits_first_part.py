"""The digits' first part (pytrain.webapp.demo.mnist_part): a run that starts on it and gets the whole
file later trains exactly as one given the whole file at once, and never draws a sample it lacks."""
from __future__ import annotations

import numpy as np
import pytest

from pytrain import data as _data
from pytrain import webapp
from pytrain.errors import DataError
from pytrain.webapp.demo import mnist_part, read_mnist_part
from synthetic_digits import digits_blob


def _session(blob: bytes) -> webapp.Session:
    s = webapp.Session()
    s.use_digits(blob, n_train=500, n_val=100)
    s.build_digits("mlp", "AdamW")
    s.configure(batch_size=32, lr=0.003)
    return s


def test_part_round_trip_and_bad_bytes():
    blob = digits_blob(seed=1, noise=60)
    images, labels = webapp.read_mnist(blob)
    part = mnist_part(blob, [5, 0, 77])
    got, all_labels, idx = read_mnist_part(part)
    assert idx.tolist() == [5, 0, 77] and np.array_equal(got, images[[5, 0, 77]])
    assert np.array_equal(all_labels, labels)
    with pytest.raises(DataError, match="truncated"):
        read_mnist_part(part[:-1])
    with pytest.raises(DataError, match="bad magic"):
        read_mnist_part(blob)
    with pytest.raises(DataError, match="distinct"):
        mnist_part(blob, [1, 1])


def test_run_on_first_part_then_rest_matches_whole_file():
    blob = digits_blob(seed=1, noise=60)
    first = _data.epoch_order(500, 0, 0)[:64]          # the first two batches of 32 of the default run
    part = mnist_part(blob, first)

    whole = _session(blob)
    want = whole.train_for(budget_ms=1e9, max_steps=40)["losses"]   # one epoch is 16 batches: stops at its end
    want += whole.train_for(budget_ms=1e9, max_steps=5)["losses"]

    s = _session(part)
    assert s.data_summary() == dict(whole.data_summary(), loading=True)
    r = s.train_for(budget_ms=1e9, max_steps=40)
    assert len(r["losses"]) == 2 and r["loading"] and not r["epoch_end"]   # its two batches, no further
    again = s.train_for(budget_ms=1e9, max_steps=40)
    assert again["losses"] == [] and again["step"] == 2
    with pytest.raises(webapp.WebappError, match="still loading"):
        s.add_samples(np.zeros((1, 784), np.float32), [1])
    s.use_digits(blob, rest=True)
    assert not s.data_summary()["loading"]
    got = r["losses"] + s.train_for(budget_ms=1e9, max_steps=40)["losses"]
    got += s.train_for(budget_ms=1e9, max_steps=5)["losses"]
    assert got == want                                    # the same samples in the same order: the same floats
    assert np.array_equal(s.source.data["val_x"], whole.source.data["val_x"]) and s.evaluate() == whole.evaluate()
    assert s.use_digits(blob, rest=True)["train"] == 500  # nothing waits any more: a no-op


def test_rest_from_another_file_is_refused():
    blob = digits_blob(seed=1, noise=60)
    s = _session(mnist_part(blob, [0, 1]))
    other = bytearray(blob)
    other[16] = (other[16] + 1) % 10                      # another label for sample 0
    with pytest.raises(DataError, match="does not match"):
        s.use_digits(bytes(other), rest=True)

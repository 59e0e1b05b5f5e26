"""Shuffling, batching and train/validation splits, all reproducible from a seed.

Each epoch's order comes from (seed, epoch) rather than from one running generator, so a run
resumed at epoch k sees exactly the batches an uninterrupted run would have seen.
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import numpy as np

from pytrain.errors import DataError

# Distinct SeedSequence entropy per purpose so the split and the epoch orders are independent.
_EPOCH_STREAM = 1
_SPLIT_STREAM = 2


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DataError("seed must be an integer >= 0, got {!r}".format(seed))
    return int(seed)


def rng_for(seed: int, *stream: int) -> np.random.Generator:
    """A numpy Generator determined by ``seed`` and the stream numbers."""
    return np.random.default_rng([_check_seed(seed)] + [int(s) for s in stream])


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order (a permutation of ``range(n)``) for ``epoch`` of a run seeded ``seed``."""
    if epoch < 0:
        raise DataError("epoch must be >= 0, got {}".format(epoch))
    return rng_for(seed, _EPOCH_STREAM, epoch).permutation(n)


def num_batches(n: int, batch_size: int, drop_last: bool = False) -> int:
    """How many batches :func:`batch_indices` yields for ``n`` samples."""
    _check_batch_size(batch_size)
    return n // batch_size if drop_last else -(-n // batch_size)


def _check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise DataError("batch size must be an integer >= 1, got {!r}".format(batch_size))


def batch_indices(order: np.ndarray, batch_size: int, drop_last: bool = False) -> List[np.ndarray]:
    """Split ``order`` into consecutive batches; the last one may be smaller unless ``drop_last``."""
    _check_batch_size(batch_size)
    order = np.asarray(order)
    count = num_batches(len(order), batch_size, drop_last)
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(count)]


def iter_batches(x: np.ndarray, y: np.ndarray, batch_size: int, order: Optional[np.ndarray] = None,
                 drop_last: bool = False) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """Yield ``(x_batch, y_batch)`` in ``order`` (default: the stored order)."""
    if len(x) != len(y):
        raise DataError("x has {} samples but y has {}".format(len(x), len(y)))
    if order is None:
        order = np.arange(len(x))
    for idx in batch_indices(order, batch_size, drop_last):
        yield x[idx], y[idx]


def split_indices(n: int, fraction: float, seed: int,
                  stratify: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted ``(train, validation)`` index arrays covering ``range(n)``.

    ``fraction`` of the samples (rounded, at least one, leaving at least one for training) go to
    validation. With ``stratify`` (class ids) each class is split in that proportion, so small
    classes still appear on both sides when they have two or more samples.
    """
    if not 0.0 < float(fraction) < 1.0:
        raise DataError("validation fraction must be between 0 and 1 (exclusive), got {}"
                        .format(fraction))
    if n < 2:
        raise DataError("cannot split {} sample(s) into training and validation sets".format(n))
    rng = rng_for(seed, _SPLIT_STREAM)
    if stratify is None:
        n_val = min(n - 1, max(1, int(round(n * float(fraction)))))
        perm = rng.permutation(n)
        val = perm[:n_val]
    else:
        labels = np.asarray(stratify)
        if len(labels) != n:
            raise DataError("stratify has {} labels for {} samples".format(len(labels), n))
        picks = []
        for c in np.unique(labels):
            members = np.flatnonzero(labels == c)
            members = members[rng.permutation(len(members))]
            k = int(round(len(members) * float(fraction)))
            if len(members) >= 2:
                k = min(len(members) - 1, max(1, k))
            picks.append(members[:k])
        val = np.concatenate(picks)
        if len(val) == 0:
            val = rng.permutation(n)[:1]
        if len(val) == n:
            val = val[1:]
    mask = np.zeros(n, dtype=bool)
    mask[val] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)

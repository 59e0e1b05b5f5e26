"""A continuation of a prompt from a causal language model's logits: greedy, or top-k sampling with a
seed. The model is any ``logits(ids) -> (1, length, vocab)`` function (an inference session of the
current weights); a model of a fixed length takes the last ``length`` ids, padded after: a causal
model's logits at a position do not see the positions after it, so the padding changes nothing."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np

from pytrain.errors import DataError

Logits = Callable[[np.ndarray], np.ndarray]


def continue_ids(logits: Logits, prompt: Sequence[int], new_tokens: int, length: Optional[int] = None,
                 top_k: int = 0, seed: int = 0, pad: int = 0, stop: Optional[int] = None) -> List[int]:
    """``new_tokens`` ids after ``prompt``: each the argmax of the next-token logits (``top_k`` 0), else
    drawn from the ``top_k`` most likely with softmax weights (``numpy.random.RandomState(seed)``).
    ``length``: the model's fixed sequence length (None: it takes any). Stops early at id ``stop``."""
    ids = [int(i) for i in prompt]
    if not ids:
        raise DataError("the prompt gives no tokens: type a few words to continue")
    rng = np.random.RandomState(int(seed))
    out: List[int] = []
    for _ in range(int(new_tokens)):
        window = ids[-length:] if length else ids
        feed = np.asarray([window + [int(pad)] * ((length or len(window)) - len(window))], dtype=np.int64)
        scores = np.asarray(logits(feed), dtype=np.float64)[0, len(window) - 1]
        if top_k and int(top_k) > 0:
            best = np.argsort(-scores, kind="stable")[:int(top_k)]
            p = np.exp(scores[best] - scores[best].max())
            nxt = int(best[rng.choice(len(best), p=p / p.sum())])
        else:
            nxt = int(np.argmax(scores))
        ids.append(nxt)
        out.append(nxt)
        if stop is not None and nxt == int(stop):
            break
    return out

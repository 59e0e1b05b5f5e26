"""A greedy continuation from a tiny GPT-2 exported to ONNX (pytrain.text.generate.continue_ids, fed through
onnxruntime) against the greedy loop of transformers' own model on the same weights; a fixed-length model
padded after the prompt gives the same tokens (causal attention does not look ahead); top-k sampling is
repeatable from its seed and stays in the top k."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

from pytrain.errors import DataError  # noqa: E402
from pytrain.text.generate import continue_ids  # noqa: E402
from tiny_lm import LENGTH  # noqa: E402


@pytest.fixture(scope="module")
def lm(lm):
    """The session's tiny GPT-2 with a function running its export in onnxruntime."""
    sess = ort.InferenceSession(lm.onnx, providers=["CPUExecutionProvider"])
    return lm, lambda ids: sess.run(None, {"input_ids": ids})[0]


def _torch_greedy(hf, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = hf(input_ids=torch.tensor([ids[-LENGTH:]])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):]


def test_greedy_continuation_of_the_fixed_length_export_equals_transformers_greedy_loop(lm):
    m, logits = lm
    prompt = [5, 17, 80, 3]
    want = _torch_greedy(m.torch_model, prompt, 20)   # 24 tokens in all: the window slides past 16
    assert continue_ids(logits, prompt, 20, length=LENGTH, pad=0) == want
    assert continue_ids(logits, prompt, 20, length=LENGTH, pad=7) == want   # what pads the window changes nothing


def test_top_k_sampling_is_repeatable_from_its_seed_and_picks_among_the_k_best(lm):
    m, logits = lm
    prompt = [5, 17]
    a = continue_ids(logits, prompt, 8, length=LENGTH, top_k=3, seed=4)
    assert a == continue_ids(logits, prompt, 8, length=LENGTH, top_k=3, seed=4)
    feed = np.zeros((1, LENGTH), np.int64)
    feed[0, :2] = prompt
    best = np.argsort(-logits(feed)[0, 1])[:3]
    assert a[0] in best.tolist()


def test_stops_at_the_stop_id_and_refuses_an_empty_prompt(lm):
    _, logits = lm
    first = continue_ids(logits, [5], 1, length=LENGTH)[0]
    assert continue_ids(logits, [5], 10, length=LENGTH, stop=first) == [first]
    with pytest.raises(DataError, match="no tokens"):
        continue_ids(logits, [], 3, length=LENGTH)

"""The Hugging Face Hub-style fixtures of tests/fixtures/hub (tiny models exported by Optimum as transformers.js
loads them, with transformers' oracle numbers; tests/fixtures/hub/make_fixtures.py made them) and the greedy loops
onnxruntime runs on them, with and without the cache."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
CAUSAL = ("gpt2", "llama", "qwen2", "phi3", "gemma")                 # text-generation-with-past
NO_PAST = ("gpt2-no-past", "phi3-no-past")                          # text-generation
CLASSIFIERS = ("bert", "distilbert")                                # text-classification
CORPUS = (HUB / "corpus.txt").read_text(encoding="utf-8")


class Hub(NamedTuple):
    name: str
    folder: Path
    model: bytes            # onnx/model.onnx
    config: Dict[str, Any]
    oracle: Dict[str, Any]

    @property
    def tokenizer(self) -> Path:
        return self.folder / "tokenizer.json"

    @property
    def path(self) -> Path:
        return self.folder / "onnx" / "model.onnx"


def hub(name: str) -> Hub:
    d = HUB / name
    return Hub(name, d, (d / "onnx" / "model.onnx").read_bytes(), json.loads((d / "config.json").read_text()),
               json.loads((d / "oracle.json").read_text()))


def specs(model: Any) -> List[tuple]:
    """(name, element type, shape) of a model's data inputs (bytes or an onnx ModelProto)."""
    import onnx

    m = onnx.load_from_string(model) if isinstance(model, (bytes, bytearray)) else model
    init = {t.name for t in m.graph.initializer}
    return [(i.name, i.type.tensor_type.elem_type,
             [d.dim_value if d.HasField("dim_value") else d.dim_param for d in i.type.tensor_type.shape.dim])
            for i in m.graph.input if i.name not in init]


def greedy(sess: Any, feed_plan: Any, prompt: List[int], n: int, cached: bool) -> List[int]:
    """``n`` greedy tokens after ``prompt`` from an onnxruntime (or pytrain.runtime) session of a causal LM: with
    the cache (the prompt once, then one token at a time with the ``present.*`` outputs fed back as the past, as
    transformers.js generates), or recomputed from the whole sequence with an empty past each time."""
    seq = list(prompt)
    names = [o.name for o in sess.get_outputs()] if hasattr(sess, "get_outputs") else sess.output_names()
    feeds = feed_plan.arrays(np.asarray([seq], dtype=np.int64))
    for _ in range(n):
        outs = dict(zip(names, sess.run(None, feeds)))
        seq.append(int(np.argmax(outs["logits"][0, -1])))
        if not cached:
            feeds = feed_plan.arrays(np.asarray([seq], dtype=np.int64))
            continue
        feeds = feed_plan.arrays(np.asarray([seq[-1:]], dtype=np.int64))   # the new token, then its cache:
        for p in feed_plan.past:   # past_key_values.N.key <- present.N.key
            feeds[p] = outs["present" + p[len("past_key_values"):]]
        if "attention_mask" in feeds:
            feeds["attention_mask"] = np.ones((1, len(seq)), dtype=np.int64)
        if "position_ids" in feeds:
            feeds["position_ids"] = np.asarray([[len(seq) - 1]], dtype=np.int64)
        if "cache_position" in feeds:
            feeds["cache_position"] = np.asarray([len(seq) - 1], dtype=np.int64)
    return seq[len(prompt):]


def first_batch_loss(oracle: Dict[str, Any], batch: int, seed: int = 0) -> float:
    """transformers' loss on the CLI's first batch of the corpus blocks (batch ``batch``, no validation split)."""
    from pytrain.run.loop import epoch_batches

    losses = np.asarray(oracle["corpus_blocks"]["losses"])
    return float(losses[epoch_batches(len(losses), seed, 0, batch)[0]].mean())


def ort_session(model: Any) -> Optional[Any]:
    import onnxruntime as ort

    return ort.InferenceSession(model if isinstance(model, (bytes, str)) else model.SerializeToString(),
                                providers=["CPUExecutionProvider"])


def open_past_heads(model: bytes) -> bytes:
    """``model`` with every axis of its ``past_key_values.*`` inputs symbolic, as an exporter that does not fix the
    heads writes it: only the model's config.json then says the empty past's heads and head size."""
    import onnx

    m = onnx.load_from_string(model)
    for i in m.graph.input:
        if i.name.startswith("past_key_values."):
            for axis, d in enumerate(i.type.tensor_type.shape.dim):
                d.dim_param = "d%d" % axis
    return m.SerializeToString()

"""The page's "Your text": an uploaded ONNX language or classification model with its ``tokenizer.json``,
fine-tuned (LoRA by default) on a text file (a causal LM: blocks of token ids, next-token loss read from
the model's own ids, :class:`pytrain.losses.CausalLMLoss`) or a CSV of texts and labels (a classifier:
padded ids, attention mask, cross-entropy). Training, validation, the exported (merged) model and the
saved run are the :class:`~pytrain.webapp.session.Session`'s own; this room encodes the data, builds the
artifacts, estimates the memory and answers samples (a greedy continuation, or predictions on held-out
texts), the tab's logits and the adapters alone. The worker calls ``Session.text(op, **args)``."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import DataError
from pytrain.text import Tokenizer
from pytrain.text.datasets import classification_rows, lm_blocks, pad_id, read_text_csv
from pytrain.text.generate import continue_ids
from pytrain.webapp.common import WebappError, _inference_session, load_upload
from pytrain.webapp.demo import generate_bytes
from pytrain.webapp.inspect_model import describe_model, refuse_unsupported
from pytrain.webapp.model_source import lora_info, lora_spec

INT_TYPES = (6, 7)   # INT32, INT64
MASK_NAMES = ("attention_mask",)


def dispatch(session: Any, op: str, args: Dict[str, Any]) -> Any:
    ops: Dict[str, Callable[..., Any]] = {"use": use, "samples": samples, "logits": logits, "adapters": adapters}
    if op not in ops:
        raise WebappError("unknown text operation %r (expected one of %s)" % (op, ", ".join(sorted(ops))))
    return ops[op](session, **args)


def _ids_input(inputs: List[Dict[str, Any]], name: str) -> str:
    ints = [i["name"] for i in inputs if i["elem_type"] in INT_TYPES and i["name"] not in MASK_NAMES]
    if not ints:
        raise DataError("%s takes no integer input for token ids (inputs: %s); a language model takes input_ids"
                        % (name, ", ".join("%s (type %d)" % (i["name"], i["elem_type"]) for i in inputs)))
    return "input_ids" if "input_ids" in ints else ints[0]


def _vocab_size(model: Any, ids: str) -> Optional[int]:
    """Rows of the embedding table the ids index (the first Gather of an initializer by them)."""
    inits = {t.name: t for t in model.graph.initializer}
    seen = {ids}
    for n in model.graph.node:   # the ids may pass through a Cast or Reshape first
        if n.op_type in ("Cast", "Reshape", "Unsqueeze", "Flatten") and n.input and n.input[0] in seen:
            seen.add(n.output[0])
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] in seen and n.input[0] in inits:
            return int(inits[n.input[0]].dims[0])
    return None


def _fixed(shape: Sequence[Any], axis: int) -> Optional[int]:
    d = shape[axis] if len(shape) > axis else None
    return int(d) if isinstance(d, int) and d > 0 else None


def _feeder(names: List[str], ids: str, labelled: bool) -> Callable[..., Tuple[np.ndarray, ...]]:
    """What the training model takes for a batch (x, y): the model's inputs ``names`` in order (ids; a mask
    of ones, or x's second row; zeros for other integer inputs such as token_type_ids), then the labels."""

    def feeds(xb: np.ndarray, yb: Optional[np.ndarray] = None) -> Tuple[np.ndarray, ...]:
        tokens, mask = (xb[:, 0], xb[:, 1]) if xb.ndim == 3 else (xb, np.ones_like(xb))
        by = {n: (tokens if n == ids else mask if n in MASK_NAMES else np.zeros_like(tokens)) for n in names}
        out = tuple(np.ascontiguousarray(by[n], dtype=np.int64) for n in names)
        return out + (np.ascontiguousarray(yb, dtype=np.int64),) if labelled and yb is not None else out
    return feeds


def use(session: Any, model: bytes, tokenizer: Any, text: Optional[str] = None, csv: Optional[str] = None,
        block_size: int = 64, lora: Optional[Dict[str, Any]] = None, optimizer: str = "AdamW",
        text_column: Optional[str] = None, label_column: Optional[str] = None, val_fraction: float = 0.1,
        seed: int = 0, name: str = "the uploaded model", output: Optional[str] = None,
        extra_files: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
    """Encode ``text`` (a causal LM) or ``csv`` (texts and labels) with ``tokenizer`` (a tokenizer.json's text
    or bytes), generate artifacts for ``model`` with LoRA (``lora``: {rank, alpha, targets}; None or
    {"rank": 0}: every parameter trains) and use them. A model of a fixed sequence length sets the block size."""
    from pytrain.losses import CausalLMLoss, CrossEntropyLoss

    if (text is None) == (csv is None):
        raise WebappError("give either a text file (a causal language model) or a CSV of texts and labels")
    tok = Tokenizer.from_json(tokenizer if isinstance(tokenizer, str) else bytes(tokenizer))
    m = load_upload(model, name, extra_files)
    refuse_unsupported(m, name)
    desc = describe_model(m)
    ids = _ids_input(desc["inputs"], name)
    for i in desc["inputs"]:
        if i["name"] != ids and i["elem_type"] not in INT_TYPES:
            raise DataError("%s also takes %r (type %d), which a text does not give" % (name, i["name"], i["elem_type"]))
    out = output or desc["outputs"][0]["name"]
    out_shape = next((o["shape"] for o in desc["outputs"] if o["name"] == out), None)
    if out_shape is None:
        raise WebappError("%s has no output %r" % (name, out))
    length = _fixed(next(i["shape"] for i in desc["inputs"] if i["name"] == ids), 1) or int(block_size)
    vocab = _vocab_size(m, ids)
    notes = [] if length == int(block_size) else ["%s takes %d tokens at a time: blocks of %d" % (name, length, length)]
    if text is not None:
        if len(out_shape) != 3:
            raise DataError("a text file trains a causal language model, whose output is (batch, length, "
                            "vocabulary); %s's output %r has shape %s" % (name, out, out_shape))
        x = lm_blocks(tok, text, length, vocab)
        y, task, classes, loss = x, "lm", None, CausalLMLoss(ids_name=ids)
        notes.append("%d blocks of %d tokens (the last partial block is left out)" % (len(x), length))
    else:
        texts, labels = read_text_csv(csv, text_column, label_column)
        n_out = _fixed(out_shape, len(out_shape) - 1)
        rows = classification_rows(tok, texts, labels, length, vocab)
        if len(out_shape) != 2 or (n_out is not None and n_out != len(rows.classes)):
            raise DataError("the CSV has %d labels (%s) but %s's output %r has shape %s; a classifier's is "
                            "(batch, %d)" % (len(rows.classes), ", ".join(rows.classes), name, out, out_shape,
                                             len(rows.classes)))
        masked = any(i["name"] in MASK_NAMES for i in desc["inputs"])
        x = np.stack([rows.ids, rows.mask], axis=1) if masked else rows.ids
        y, task, classes, loss = rows.labels, "classification", rows.classes, CrossEntropyLoss()
    spec = lora_spec(m, lora, seed)
    head = None
    if spec is not None and task != "lm":   # a new classifier head trains whole, as peft's modules_to_save
        head = [p["name"] for p in desc["params"] if p["layer"] == 1 and p["trains"]]
        notes.append("the classifier head trains whole too (%s)" % ", ".join(head))
    arts = generate_bytes(m, loss, optimizer, output_name=out, lora=spec, requires_grad=head)
    kind = "text" if text is not None else "text_csv"
    raw = tokenizer.encode("utf-8") if isinstance(tokenizer, str) else bytes(tokenizer)
    source = {"kind": kind, "task": task, "classes": classes, "val_fraction": float(val_fraction), "seed": int(seed)}
    _use_data(session, x, y, source, tok, raw, [i["name"] for i in desc["inputs"]], ids)
    info = {"origin": "text", "input": ids, "output": out, "loss": "CausalLMLoss" if task == "lm" else "CrossEntropyLoss",
            "optimizer": optimizer, "sample_shape": [int(d) for d in x.shape[1:]], "lora": lora_info(m, spec),
            "text": {"kind": kind, "block_size": length, "vocab": vocab, "tokenizer_vocab": tok.vocab_size,
                     "pad": pad_id(tok), "inputs": [i["name"] for i in desc["inputs"]]}}
    summary = session._use(arts, info)
    return {"model": summary, "data": session.data_summary(), "memory": summary.get("memory"), "notes": notes}


def _use_data(session: Any, x: np.ndarray, y: np.ndarray, source: Dict[str, Any], tok: Tokenizer, raw: bytes,
              inputs: List[str], ids: str) -> None:
    feeds = _feeder(inputs, ids, source["task"] != "lm")
    extra = {"feeds": feeds, "tokenizer": tok,
             "outputs": None if source["task"] == "lm" else (lambda xb: _logits(session, feeds(xb)))}
    session.source.use_encoded(x, y, source["task"], source["classes"], source["val_fraction"], source["seed"], source,
                               extra, {"tokenizer": np.frombuffer(raw, dtype=np.uint8)})


def restore_data(session: Any, meta: Dict[str, Any], arrays: Dict[str, np.ndarray]) -> None:
    """The data of a saved "Your text" run again (the ids, labels and tokenizer :func:`use` kept), split as it was."""
    raw = arrays["tokenizer"].tobytes()
    model = meta["model"]
    _use_data(session, arrays["x"], arrays["y"], meta["data_source"], Tokenizer.from_json(raw), raw,
              model["text"]["inputs"], model["input"])


def _text_data(session: Any) -> Dict[str, Any]:
    session._need_model()
    d = session._need_data()
    if "tokenizer" not in d:
        raise WebappError("no text loaded: choose a model, its tokenizer.json and a text file or CSV first")
    return d


def _logits(session: Any, feeds: Sequence[np.ndarray]) -> np.ndarray:
    """The exported model's first output for ``feeds`` (the model's inputs in order), at the current weights."""
    if session._infer is None or session._infer_step != session.step:
        session._infer = _inference_session(session.export(raw_rows=False))
        session._infer_step = session.step
    names = session.model["text"]["inputs"]
    return np.asarray(session._infer.run(None, dict(zip(names, feeds)))[0])


def logits(session: Any, ids: Any, mask: Any = None) -> Dict[str, Any]:
    """The tab's outputs for token ids (batch, length) through the exported (merged) model: float32 bytes."""
    d = _text_data(session)
    x = np.asarray(ids, dtype=np.int64).reshape(len(ids), -1)
    if mask is not None:
        x = np.stack([x, np.asarray(mask, dtype=np.int64).reshape(x.shape)], axis=1)
    out = np.ascontiguousarray(_logits(session, d["feeds"](x)), dtype=np.float32)
    return {"logits": out.tobytes(), "shape": [int(s) for s in out.shape], "step": session.step}


def samples(session: Any, prompt: Optional[str] = None, new_tokens: int = 20, top_k: int = 0, seed: int = 0,
            count: int = 4) -> Dict[str, Any]:
    """A causal LM's continuation of ``prompt`` (default: the start of the first held-out block), or a
    classifier's predictions on ``count`` held-out texts, from the current weights."""
    d = _text_data(session)
    tok: Tokenizer = d["tokenizer"]
    info = session.model["text"]
    if d["task"] == "lm":
        source = d["val_x"] if len(d["val_x"]) else d["train_x"]
        ids = tok.encode(prompt, add_special_tokens=False) if prompt else [int(i) for i in source[0][:8]]
        feeds = d["feeds"]

        def step_logits(window: np.ndarray) -> np.ndarray:
            return _logits(session, feeds(window))

        new = continue_ids(step_logits, ids, int(new_tokens), info["block_size"], int(top_k), int(seed), info["pad"])
        return {"kind": "lm", "prompt": tok.decode(ids), "continuation": tok.decode(new), "ids": new,
                "step": session.step}
    n = min(int(count), len(d["val_x"]))
    rows = []
    if n:
        out = d["outputs"](d["val_x"][:n])
        z = out - out.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        for k in range(n):
            c = int(np.argmax(p[k]))
            row = d["val_x"][k]
            kept = row[0][row[1] == 1] if row.ndim == 2 else row[row != info["pad"]]
            rows.append({"text": tok.decode([int(i) for i in kept]),
                         "label": d["classes"][int(d["val_y"][k])], "predicted": d["classes"][c],
                         "probability": float(p[k, c])})
    return {"kind": "classification", "predictions": rows, "step": session.step}


def adapters(session: Any, format: str = "onnx") -> bytes:
    """The LoRA adapters alone (:func:`pytrain.lora.save_adapters`: ``onnx`` or ``npz``)."""
    from pytrain.lora import save_adapters

    session._need_model()
    if not session.model.get("lora"):
        raise WebappError("this model trains without LoRA adapters: download the model itself instead")
    return save_adapters(session.state, None, format=str(format))

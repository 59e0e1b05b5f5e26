"""The page's "Your text": an uploaded ONNX language or classification model with its ``tokenizer.json``,
fine-tuned (LoRA by default) on a text file (a causal LM: blocks of token ids, next-token loss read from
the model's own ids, :class:`pytrain.generator.losses.CausalLMLoss`) or a CSV of texts and labels (a classifier:
padded ids, attention mask, cross-entropy). Training, validation, the exported (merged) model and the
saved run are the :class:`~pytrain.webapp.session.Session`'s own; this room encodes the data, builds the
artifacts, estimates the memory and answers samples (a greedy continuation, or predictions on held-out
texts), the tab's logits, the adapters alone and the folder transformers.js loads (a Hub folder or its zip is taken
as an upload too, :mod:`pytrain.text.hub_folder`). The worker calls ``Session.text(op, **args)``."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain.base.dtypes import INT64
from pytrain.text import Tokenizer
from pytrain.run.text import TextInput, block_length, encode, vocab_size
from pytrain.text.hub_folder import read_folder, unpack, zip_folder
from pytrain.text.hub_inputs import plan, read_config
from pytrain.text.datasets import pad_id
from pytrain.text.generate import continue_ids
from pytrain.webapp.common import WebappError, load_upload
from pytrain.webapp.demo import generate_bytes
from pytrain.webapp.inspect_model import describe_model, refuse_unsupported
from pytrain.webapp.memory import check_generation
from pytrain.webapp.run_options import TAB_RUN
from pytrain.webapp.model_source import lora_info, lora_spec


class TextUse(NamedTuple):
    """The page's "Your text" choice (the worker's ``use``): the ONNX ``model`` (bytes) and its ``tokenizer`` (a
    tokenizer.json's text or bytes), ``text`` (a causal LM) or ``csv`` (texts in ``text_column``, labels in
    ``label_column``), the block size, LoRA (``lora``: {rank, alpha, targets}; None or {"rank": 0}: every
    parameter trains), the optimizer, the validation fraction and split seed, the model's name in messages, the
    output trained on (default: the first), the files chosen with the model (``extra_files``, as the Hub has
    them) and which of a Hub folder's models trains (``dtype``). The defaults are the page's: it passes only what the user set."""
    model: bytes
    tokenizer: Any = None
    text: Optional[str] = None
    csv: Optional[str] = None
    block_size: int = 64
    lora: Optional[Dict[str, Any]] = None
    optimizer: str = TAB_RUN.optimizer
    text_column: Optional[str] = None
    label_column: Optional[str] = None
    val_fraction: float = 0.1
    seed: int = 0
    name: str = "the uploaded model"
    output: Optional[str] = None
    extra_files: Optional[Dict[str, bytes]] = None
    dtype: str = "auto"


def dispatch(session: Any, op: str, args: Dict[str, Any]) -> Any:
    ops: Dict[str, Callable[..., Any]] = {"use": lambda s, **a: use(s, TextUse(**a)), "samples": samples,
                                          "logits": logits, "adapters": adapters, "transformers_js": transformers_js}
    if op not in ops:
        raise WebappError("unknown text operation %r (expected one of %s)" % (op, ", ".join(sorted(ops))))
    return ops[op](session, **args)


def use(session: Any, req: TextUse) -> Dict[str, Any]:
    """Encode ``req.text`` (a causal LM) or ``req.csv`` (texts and labels) with ``req.tokenizer`` (default: the one
    among the model's files), generate artifacts for ``req.model`` with LoRA (``req.lora``) and use them. A model of
    a fixed sequence length sets the block size; a ``config.json`` among ``req.extra_files`` says an empty past's
    heads and head size where the model's shapes do not (:mod:`pytrain.text.hub_inputs`). ``req.model`` and
    ``req.extra_files`` may be a Hub folder's files or its zip: ``req.dtype`` then picks its model (``fp32``:
    onnx/model.onnx, ``q8``: onnx/model_quantized.onnx, ...; ``auto``: the one transformers.js loads)."""
    from pytrain.generator.losses import CausalLMLoss, CrossEntropyLoss

    model, tokenizer, text, csv, name = req.model, req.tokenizer, req.text, req.csv, req.name
    zipped = bytes(model[:4]) == b"PK\x03\x04"
    key = name if zipped or name.lower().endswith((".onnx", ".zip")) else name + ".onnx"   # the widget's "model"
    up = read_folder(dict(req.extra_files or {}, **{key: model}), req.dtype, name)
    if tokenizer is None and up.tokenizer is None:
        raise WebappError("choose the model's tokenizer.json (with the model's files or on its own)")
    tokenizer = up.tokenizer if tokenizer is None else tokenizer
    name = name if up.model_name == key else "%s (%s)" % (up.model_name, name)
    model = up.model
    extra_files = dict(up.external, **{k.split("/")[-1]: v for k, v in up.files.items()})
    tok = Tokenizer.from_json(tokenizer if isinstance(tokenizer, str) else bytes(tokenizer))
    check_generation(model, name, extra_files)
    m = load_upload(model, name, extra_files)
    refuse_unsupported(m, name)
    desc = describe_model(m)
    config = read_config((extra_files or {}).get("config.json"))
    feed = plan([(i["name"], i["elem_type"], i["shape"]) for i in desc["inputs"]], config, name)
    ids = feed.ids
    out = req.output or desc["outputs"][0]["name"]
    out_shape = next((o["shape"] for o in desc["outputs"] if o["name"] == out), None)
    if out_shape is None:
        raise WebappError("%s has no output %r" % (name, out))
    length, notes = block_length(next(i["shape"] for i in desc["inputs"] if i["name"] == ids), req.block_size, name)
    vocab = vocab_size(m.graph, ids, {t.name: list(t.dims) for t in m.graph.initializer})
    enc = encode(tok, out_shape, length, vocab, feed.masked,
                 TextInput(text, csv, req.text_column, req.label_column), where=name)
    x, y, task, classes = enc.x, enc.y, enc.task, enc.classes
    notes += enc.notes
    if len(up.dtypes) > 1:   # which of a Hub folder's files trains ("Model file" chooses another)
        notes.append("%s trains (%s; the folder also holds %s)" % (up.model_name, up.dtype, ", ".join(
            d for d in up.dtypes if d != up.dtype)))
    loss = CausalLMLoss(ids_name=ids) if task == "lm" else CrossEntropyLoss()
    spec = lora_spec(m, req.lora, req.seed)
    head = None
    if spec is not None and task != "lm":   # a new classifier head trains whole, as peft's modules_to_save
        head = [p["name"] for p in desc["params"] if p["layer"] == 1 and p["trains"]]
        notes.append("the classifier head trains whole too (%s)" % ", ".join(head))
    arts = generate_bytes(m, loss, req.optimizer, output_name=out, lora=spec, requires_grad=head)
    kind = "text" if text is not None else "text_csv"
    raw = tokenizer.encode("utf-8") if isinstance(tokenizer, str) else bytes(tokenizer)
    source = {"kind": kind, "task": task, "classes": classes, "val_fraction": float(req.val_fraction),
              "seed": int(req.seed), "text_column": req.text_column, "label_column": req.label_column,
              "hub_dtype": up.dtype}
    _use_data(session, x, y, source, tok, raw, feed.specs(), str(text if text is not None else csv))
    session.source.encoded["hub"] = np.frombuffer(zip_folder(hub_files(up.files)), dtype=np.uint8)
    info = {"origin": "text", "input": ids, "output": out,
            "loss": "CausalLMLoss" if task == "lm" else "CrossEntropyLoss", "optimizer": req.optimizer,
            "sample_shape": [int(d) for d in x.shape[1:]], "lora": lora_info(m, spec),
            "text": {"kind": kind, "block_size": length, "vocab": vocab, "tokenizer_vocab": tok.vocab_size,
                     "pad": pad_id(tok), "inputs": feed.names,
                     "input_specs": [list(sp) for sp in feed.specs()]}}
    if feed.past:   # the export keeps present.*, the next step's past (transformers.js generates with it)
        info["outputs"] = [o["name"] for o in desc["outputs"]]
    del m   # its weights are in the artifacts now: not held while the module is built on them
    summary = session.use_model(arts, info)
    return {"model": summary, "data": session.data_summary(), "memory": summary.get("memory"), "notes": notes}


def _specs(info: Dict[str, Any]) -> List[Any]:
    """The kept inputs of a run's model (a run saved before they were kept: their names, integer inputs)."""
    if info.get("input_specs"):
        return [tuple(sp) for sp in info["input_specs"]]
    return [(n, INT64, None) for n in info["inputs"]]


def _use_data(session: Any, x: np.ndarray, y: np.ndarray, source: Dict[str, Any], tok: Tokenizer, raw: bytes,
              specs: List[Any], text: str) -> None:
    feeds = plan(specs, None, "the run's model").feeder(source["task"] != "lm")
    extra = {"feeds": feeds, "tokenizer": tok,
             "outputs": None if source["task"] == "lm" else (lambda xb: _logits(session, feeds(xb)))}
    keep = {"tokenizer": np.frombuffer(raw, dtype=np.uint8),
            "text": np.frombuffer(text.encode("utf-8"), dtype=np.uint8)}
    session.source.use_encoded(x, y, source, extra, keep)


def restore_data(session: Any, meta: Dict[str, Any], arrays: Dict[str, np.ndarray]) -> None:
    """The data of a saved "Your text" run again (the ids, labels and tokenizer :func:`use` kept), split as it was."""
    raw = arrays["tokenizer"].tobytes()
    model = meta["model"]
    _use_data(session, arrays["x"], arrays["y"], meta["data_source"], Tokenizer.from_json(raw), raw,
              _specs(model["text"]), arrays["text"].tobytes().decode("utf-8") if "text" in arrays else "")
    if "hub" in arrays:
        session.source.encoded["hub"] = arrays["hub"]


def kept_text(session: Any) -> Tuple[bytes, str]:
    """(the tokenizer.json, the text file or CSV as uploaded) of the session's "Your text" run: what its run
    file carries."""
    enc = session.source.encoded
    if "tokenizer" not in enc or "text" not in enc:
        raise WebappError("the run's text is not kept (a run saved by an older page); load the text file again")
    return enc["tokenizer"].tobytes(), enc["text"].tobytes().decode("utf-8")


def use_run_file(session: Any, texts: Dict[str, Any], run: Dict[str, Any]) -> Dict[str, Any]:
    """Load a run file's text (its tokenizer.json and text file or CSV, see :data:`pytrain.run.runfile.TEXT_FILES`)
    into ``session``, encoded and split as the run had it (block size, vocabulary, columns, classes, seed)."""
    src, model = run.get("data_source") or {}, run.get("model") or {}
    info = model.get("text") or {}
    kind = src.get("kind")
    if kind not in ("text", "text_csv") or "tokenizer" not in texts or kind not in texts or not info:
        raise WebappError("the run file holds %s, not the tokenizer.json and text of a \"Your text\" run with its "
                          "description (pytrain-run.json); choose the whole run's .zip" % ", ".join(sorted(texts)))
    raw, body = bytes(texts["tokenizer"]), str(texts[kind])
    tok = Tokenizer.from_json(raw)
    classes = src.get("classes")
    out_shape = [None, None, None] if kind == "text" else [None, len(classes or ())]   # checked when the run began
    feed = plan(_specs(info), None, "the run's model")
    enc = encode(tok, out_shape, int(info["block_size"]), info.get("vocab"), feed.masked,
                 TextInput(body if kind == "text" else None, body if kind == "text_csv" else None,
                           src.get("text_column"), src.get("label_column"), classes), where="the run's model")
    _use_data(session, enc.x, enc.y, src, tok, raw, feed.specs(), body)
    return session.data_summary()


def _text_data(session: Any) -> Dict[str, Any]:
    session.need_model()
    d = session.need_data()
    if "tokenizer" not in d:
        raise WebappError("no text loaded: choose a model, its tokenizer.json and a text file or CSV first")
    return d


def _logits(session: Any, feeds: Sequence[np.ndarray]) -> np.ndarray:
    """The exported model's first output for ``feeds`` (the model's inputs in order), at the current weights."""
    names = session.model["text"]["inputs"]
    return np.asarray(session.inference().run(None, dict(zip(names, feeds)))[0])


def logits(session: Any, ids: Any, mask: Any = None) -> Dict[str, Any]:
    """The tab's outputs for token ids (batch, length) through the exported (merged) model: float32 bytes."""
    d = _text_data(session)
    x = np.asarray(ids, dtype=np.int64).reshape(len(ids), -1)
    if mask is not None:
        x = np.stack([x, np.asarray(mask, dtype=np.int64).reshape(x.shape)], axis=1)
    out = np.ascontiguousarray(_logits(session, d["feeds"](x)), dtype=np.float32)
    return {"logits": out.tobytes(), "shape": [int(s) for s in out.shape], "step": session.run.at.step}


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
                "step": session.run.at.step}
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
    return {"kind": "classification", "predictions": rows, "step": session.run.at.step}


def adapters(session: Any, format: str = "onnx") -> bytes:
    """The LoRA adapters alone (:func:`pytrain.engine.lora.save_adapters`: ``onnx`` or ``npz``)."""
    from pytrain.engine.lora import save_adapters

    session.need_model()
    if not session.model.get("lora"):
        raise WebappError("this model trains without LoRA adapters: download the model itself instead")
    return save_adapters(session.run.state, None, format=str(format))


def hub_files(files: Dict[str, bytes]) -> Dict[str, bytes]:
    """The files of an upload a transformers.js folder takes back (config.json, tokenizer and generation files):
    the small JSON and text files, not the model nor its weights."""
    return {k: v for k, v in files.items() if k.lower().endswith((".json", ".txt", ".model", ".jinja"))}


def transformers_js(session: Any) -> bytes:
    """The model at the current weights as the zip of a folder transformers.js loads as it is
    (:func:`pytrain.run.hub_export.export_transformers_js`: config.json and the tokenizer files uploaded with it,
    onnx/model.onnx, and the quantized variant requantized in its scheme when the upload was quantized)."""
    from pytrain.run.hub_export import export_transformers_js

    session.need_model()
    enc = session.source.encoded
    if "tokenizer" not in enc:
        raise WebappError("this model was not built in \"Your text\": its tokenizer and config.json are unknown")
    files = unpack({"hub.zip": enc["hub"].tobytes()}) if "hub" in enc else {}
    files.setdefault("tokenizer.json", enc["tokenizer"].tobytes())
    dtype = session.source.source.get("hub_dtype")
    folder = export_transformers_js(session.run.module, session.model.get("outputs", [session.model["output"]]),
                                    files, None if dtype in (None, "fp32") else dtype)
    return zip_folder(folder)

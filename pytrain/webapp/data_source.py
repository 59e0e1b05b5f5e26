"""The data of one browser tab: what the page loaded (the digits, a CSV table, decoded samples),
its training/validation split, the samples added to it, and the bytes a saved run needs to load
it again."""
from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain import data as _data
from pytrain.errors import DataError
from pytrain.webapp.common import MNIST_PART_MAGIC, WebappError
from pytrain.webapp.demo import read_mnist, read_mnist_part


#: the fraction of a table or of decoded samples held out for validation when the page says none
VAL_FRACTION = 0.2


class Split(NamedTuple):
    """Training and validation samples with their labels."""
    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray


class DataSource:
    """The loaded data: ``data`` (train/val arrays, task, classes, ...), ``source`` (how it was
    loaded, saved with the run), the CSV text or the samples as given, and those added since."""

    def __init__(self) -> None:
        self.data: Dict[str, Any] = {}
        self.source: Dict[str, Any] = {}
        self.version = 0
        self.csv_text = ""
        self.arrays: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self.added: List[Tuple[np.ndarray, np.ndarray]] = []
        self.encoded: Dict[str, np.ndarray] = {}   # "Your text": ids, labels and the tokenizer, as a resume needs them
        # The digits loaded from their first part: which rows are in (the others are zeros until the
        # whole file completes them, use_digits(rest=True)) and the array train_x and val_x view.
        self.loaded: Optional[np.ndarray] = None
        self._digits_x: Optional[np.ndarray] = None

    def _set(self, split: Split, task: str, classes: Optional[List[str]], feature_names: Optional[List[str]],
             source: Dict[str, Any], extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        train_x, train_y, val_x, val_y = split
        if len(train_x) == 0:
            raise DataError("no training samples left after the validation split")
        num_classes = 0
        if task == "classification":
            seen = np.concatenate([train_y, val_y]) if len(val_y) else train_y
            num_classes = int(seen.max()) + 1 if len(seen) else 0
            if classes:
                num_classes = max(num_classes, len(classes))
        self.data = {"train_x": train_x, "train_y": train_y, "val_x": val_x, "val_y": val_y,
                     "task": task, "classes": classes, "feature_names": feature_names,
                     "num_classes": num_classes, "added": 0}
        self.data.update(extra or {})
        self.source = source
        self.added = []
        self.encoded = {}
        self.loaded = self._digits_x = None
        self.version += 1
        return self.summary()

    def summary(self) -> Dict[str, Any]:
        """Sizes, task and label names of the loaded data."""
        d = self.data
        if not d:
            return {"loaded": False}
        return {"loaded": True, "kind": self.source.get("kind"), "train": int(len(d["train_x"])),
                "val": int(len(d["val_x"])), "task": d["task"], "classes": d["classes"],
                "num_classes": d["num_classes"], "features": d["feature_names"],
                "sample_shape": [int(s) for s in d["train_x"].shape[1:]], "added": d["added"],
                "task_reason": d.get("task_reason"), "notes": d.get("notes") or [], "loading": self.loaded is not None,
                "columns": [{"name": c["name"], "kind": c["kind"], "values": c.get("values")}
                            for c in d.get("columns") or []] or None}

    def need(self) -> Dict[str, Any]:
        """The loaded data, or the error the page shows when there is none."""
        if not self.data:
            raise WebappError("no data loaded yet: choose digits, a CSV table or images first")
        return self.data

    def use_digits(self, blob: bytes, n_train: int = 8000, n_val: int = 1000, rest: bool = False) -> Dict[str, Any]:
        """The bundled MNIST digits: the first ``n_train`` for training, the last ``n_val`` held out.

        ``blob`` may be the site's first part (:func:`pytrain.webapp.demo.mnist_part`): the samples it
        lacks are zeros, not ``loaded``, and :meth:`ready_batches` holds training back from them until
        the whole file comes with ``rest``, which fills them in place (a no-op once no part waits)."""
        if rest:
            return self._complete_digits(blob)
        part = bytes(blob[:8]) == MNIST_PART_MAGIC
        images, labels, rows = read_mnist_part(blob) if part else read_mnist(blob) + (None,)
        n = len(labels)
        n_val = max(1, min(int(n_val), n - 1))
        n_train = max(1, min(int(n_train), n - n_val))
        if rows is None:
            x = _pixels(images)
        else:
            x = np.zeros((n, int(np.prod(images.shape[1:]))), dtype=np.float32)
            x[rows] = _pixels(images)
        source = {"kind": "digits", "n_train": n_train, "n_val": n_val}
        self._set(Split(x[:n_train], labels[:n_train], x[n - n_val:], labels[n - n_val:]),
                  "classification", [str(i) for i in range(10)], None, source)
        if rows is not None:
            self.loaded, self._digits_x = np.zeros(n, dtype=bool), x
            self.loaded[rows] = True
        return self.summary()

    def _complete_digits(self, blob: bytes) -> Dict[str, Any]:
        if self.loaded is None or self._digits_x is None:
            return self.summary()
        images, labels = read_mnist(blob)
        d, x = self.data, self._digits_x
        n, n_train, n_val = len(labels), len(d["train_y"]), len(d["val_y"])
        if (n != len(x) or not np.array_equal(labels[:n_train], d["train_y"])
                or not np.array_equal(labels[n - n_val:], d["val_y"])):
            raise DataError("the digits file does not match their first part (two builds of the site?)")
        for a in range(0, n, 1000):   # in place, in slices: no second copy of every sample at once
            x[a:a + 1000] = _pixels(images[a:a + 1000])
        self.loaded = self._digits_x = None
        return self.summary()

    def ready_batches(self, batches: Sequence[np.ndarray], start: int) -> int:
        """How many of ``batches`` from ``start`` on draw loaded samples only (all of them but while
        the digits' first part waits for the rest)."""
        if self.loaded is None:
            return max(0, len(batches) - start)
        count = 0
        for idx in batches[start:]:
            if not self.loaded[idx].all():
                break
            count += 1
        return count

    def use_csv(self, text: str, label: str, task: Optional[str] = None, val_fraction: float = VAL_FRACTION,
                seed: int = 0, exclude: Sequence[str] = (), missing: str = "error",
                onehot: bool = False) -> Dict[str, Any]:
        """A CSV table (text) with ``label`` as target; a stratified validation set split off."""
        ds = _data.load_csv(str(text), label=label, task=task or None, name="the CSV file", delimiter=None,
                            drop=[c for c in exclude if c != label], missing=missing, onehot=bool(onehot))
        idx_train, idx_val = _data.split_indices(
            len(ds), float(val_fraction), int(seed),
            stratify=ds.y if ds.task == "classification" else None)
        train, val = ds.subset(idx_train), ds.subset(idx_val)
        classes = ds.classes
        if ds.task == "classification" and classes is None:
            classes = [str(i) for i in range(int(ds.y.max()) + 1)]
        source = {"kind": "csv", "label": label, "task": ds.task, "val_fraction": float(val_fraction),
                  "seed": int(seed), "exclude": list(exclude), "missing": missing, "onehot": bool(onehot)}
        self.csv_text = str(text)
        why = getattr(ds, "task_reason", "chosen")
        return self._set(Split(train.x, train.y, val.x, val.y), ds.task, classes, ds.feature_names, source,
                         {"task_reason": None if why == "chosen" else why, "columns": ds.columns,
                          "text_classes": ds.classes, "notes": getattr(ds, "notes", [])})

    def use_arrays(self, x: np.ndarray, y: np.ndarray, task: str = "classification",
                   classes: Optional[List[str]] = None, val_fraction: float = VAL_FRACTION,
                   seed: int = 0) -> Dict[str, Any]:
        """Decoded samples (e.g. images the page decoded) with labels; validation split off."""
        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y, dtype=np.int64 if task == "classification" else np.float32)
        if len(x) != len(y):
            raise DataError("got %d samples but %d labels" % (len(x), len(y)))
        if len(x) < 2:
            raise DataError("need at least 2 samples, got %d" % len(x))
        idx_train, idx_val = _data.split_indices(len(x), float(val_fraction), int(seed),
                                                 stratify=y if task == "classification" else None)
        source = {"kind": "arrays", "task": task, "val_fraction": float(val_fraction), "seed": int(seed)}
        summary = self._set(Split(x[idx_train], y[idx_train], x[idx_val], y[idx_val]), task, classes, None, source)
        self.arrays = (x, y)
        return summary

    def use_encoded(self, x: np.ndarray, y: np.ndarray, source: Dict[str, Any], extra: Dict[str, Any],
                    keep: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, Any]:
        """Samples encoded elsewhere (token ids of "Your text", kept as they are: int64) with labels; a
        validation split (stratified for classification) when there are at least 2 samples, as ``source``
        says (its task, classes, val_fraction and seed). ``keep``: more arrays a saved run needs (the
        tokenizer), saved with ``x`` and ``y``."""
        task = source["task"]
        from pytrain.run.text import split as text_split   # (the text stack: not at the tab's start)
        idx_train, idx_val = text_split(y, task, source["val_fraction"], source["seed"])
        summary = self._set(Split(x[idx_train], y[idx_train], x[idx_val], y[idx_val]), task, source["classes"], None,
                            source, extra)
        self.encoded = dict(keep or {}, x=x, y=y)
        return summary

    def add_samples(self, x: np.ndarray, y: Sequence[int]) -> Dict[str, Any]:
        """Append labelled samples (e.g. drawn digits) to the training set (personalization)."""
        d = self.need()
        if self.loaded is not None:
            raise WebappError("the digits are still loading: add samples once they are in")
        x = np.asarray(x, dtype=np.float32).reshape((-1,) + d["train_x"].shape[1:])
        y = np.asarray(y, dtype=d["train_y"].dtype).reshape(-1)
        if len(x) != len(y):
            raise DataError("got %d samples but %d labels" % (len(x), len(y)))
        d["train_x"] = np.concatenate([d["train_x"], x])
        d["train_y"] = np.concatenate([d["train_y"], y])
        d["added"] += len(x)
        self.added.append((x, y))
        self.version += 1
        return self.summary()

    def samples(self) -> Optional[Dict[str, np.ndarray]]:
        """The decoded samples as given and those added since ({"x", "y", "added_x"?, "added_y"?}),
        or None for data the page can load again by itself."""
        if self.arrays is None:
            return None
        out = {"x": self.arrays[0], "y": self.arrays[1]}
        if self.added:
            out["added_x"] = np.concatenate([a.reshape((-1,) + self.arrays[0].shape[1:]) for a, _ in self.added])
            out["added_y"] = np.concatenate([b for _, b in self.added])
        return out

    @staticmethod
    def inspect_csv(text: str) -> Dict[str, Any]:
        """Columns (numeric or text, missing cells, text values), the separator and a suggested
        label column (the last), read with the parser use_csv uses."""
        from pytrain.data.tabular import describe_csv
        desc = describe_csv(str(text))
        cols = desc["columns"]
        return {"columns": [c["name"] for c in cols], "numeric": [c["numeric"] for c in cols], "details": cols,
                "rows": desc["rows"], "delimiter": desc["delimiter"], "label": cols[-1]["name"] if cols else None}

    def examples(self, backbone: Any) -> Dict[str, Any]:
        """The samples of a run on decoded examples as the gallery shows them (see ``Session.examples``)."""
        got = self.samples()
        if self.source.get("kind") != "arrays" or got is None or not self.data:
            return {"loaded": False}
        x = np.ascontiguousarray(np.concatenate([got["x"]] + ([got["added_x"]] if "added_x" in got else [])),
                                 dtype=np.float32)
        y = np.concatenate([got["y"]] + ([got["added_y"]] if "added_y" in got else []))
        return {"loaded": True, "x": x.tobytes(), "shape": [int(s) for s in x.shape],
                "y": [int(v) for v in y.tolist()], "task": self.data["task"],
                "classes": list(self.data.get("classes") or [str(i) for i in range(int(self.data["num_classes"]))]),
                "backbone": backbone.blob if backbone is not None else None,
                "backbone_info": dict(backbone.info) if backbone is not None else None}

    def saved(self) -> Dict[str, np.ndarray]:
        """The arrays a resume cannot fetch again: CSV text, decoded samples, added samples."""
        arrays: Dict[str, np.ndarray] = {}
        kind = self.source.get("kind")
        if kind == "csv":
            arrays["csv"] = np.frombuffer(self.csv_text.encode("utf-8"), dtype=np.uint8)
        elif kind == "arrays" and self.arrays is not None:
            arrays["x"], arrays["y"] = self.arrays
        elif kind in ("text", "text_csv"):
            arrays.update(self.encoded)
        if self.added:
            arrays["added_x"] = np.concatenate([a for a, _ in self.added])
            arrays["added_y"] = np.concatenate([b for _, b in self.added])
        return arrays

    def load_saved(self, src: Dict[str, Any], arrays: Dict[str, np.ndarray], classes: Optional[List[str]],
                   digits: Optional[bytes]) -> None:
        """Load the data of a saved run again (``src`` its source, ``arrays`` from :meth:`saved`)."""
        kind = src.get("kind")
        if kind == "digits":
            if digits is None:
                raise WebappError("resuming a digits run needs the digits file")
            self.use_digits(digits, src["n_train"], src["n_val"])
        elif kind == "csv":
            self.use_csv(arrays["csv"].tobytes().decode("utf-8"), src["label"], src["task"],
                         src["val_fraction"], src["seed"], src.get("exclude", ()), src.get("missing", "error"),
                         src.get("onehot", False))
        elif kind == "arrays":
            self.use_arrays(arrays["x"], arrays["y"], src["task"], classes, src["val_fraction"], src["seed"])
        else:
            raise WebappError("the saved run has unknown data kind %r" % kind)
        if "added_y" in arrays:
            self.add_samples(arrays["added_x"], arrays["added_y"])


def _pixels(images: np.ndarray) -> np.ndarray:
    """uint8 images [N, ...] as the float32 rows [N, features] in [0, 1] the digits train on."""
    return images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)


def pack_arrays(arrays: Dict[str, np.ndarray]) -> bytes:
    """A tiny container (JSON header + raw buffers): np.savez needs zipfile seeking we do not need."""
    header = {}
    chunks = []
    offset = 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        raw = arr.tobytes()
        header[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset, "size": len(raw)}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode("utf-8")
    return len(head).to_bytes(4, "little") + head + b"".join(chunks)


def unpack_arrays(blob: bytes) -> Dict[str, np.ndarray]:
    """Inverse of :func:`pack_arrays`."""
    n = int.from_bytes(blob[:4], "little")
    header = json.loads(blob[4:4 + n].decode("utf-8"))
    base = 4 + n
    out = {}
    for name, h in header.items():
        start = base + h["offset"]
        arr = np.frombuffer(blob[start:start + h["size"]], dtype=np.dtype(h["dtype"]))
        out[name] = arr.reshape(h["shape"])
    return out

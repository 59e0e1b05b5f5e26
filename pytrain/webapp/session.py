"""The Session: everything one browser tab trains (data, artifacts, training state, progress)."""
from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pytrain import data as _data
from pytrain.errors import DataError, DivergenceError, ModelFormatError
from pytrain.webapp.common import ARTIFACT_FILES, WebappError, _core, _inference_session, _load_upload
from pytrain.webapp import feature_head, runfile, scaling
from pytrain.webapp.demo import _generate, digits_artifacts, read_mnist
from pytrain.webapp.inspect_model import _label_consumer_output, describe_model


EXPLODING_FACTOR = 100  # a loss this many times its first values means the run diverged


class Session:
    """Everything one browser tab trains: data, model artifacts, the training state and progress."""

    def __init__(self) -> None:
        self.seed = 0
        self.batch_size = 32
        self.lr = 1e-3
        self.data: Dict[str, Any] = {}
        self.data_source: Dict[str, Any] = {}
        self.data_version = 0
        self.model: Dict[str, Any] = {}
        self.artifacts: Dict[str, bytes] = {}
        self.artifacts_version = 0
        self.state: Any = None
        self.module: Any = None
        self.optimizer: Any = None
        self.epoch = 0          # completed epochs
        self.epoch_step = 0     # batches done in the current epoch
        self.step = 0           # batches done in total
        self._order: Optional[np.ndarray] = None
        self._order_epoch = -1
        self._epoch_n = 0       # training-set size the current epoch's order was drawn for
        self._epoch_n_for = -1
        self._infer: Any = None
        self._infer_step = -1
        self._csv_text = ""
        self._arrays: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self._added: List[Tuple[np.ndarray, np.ndarray]] = []
        self._good: Optional[Dict[str, Any]] = None   # last good checkpoint (bytes + position), see train_for
        self._loss_ref: List[float] = []              # first losses of the run: what "exploding" is relative to
        self.backbone: Optional[feature_head.Backbone] = None   # a frozen pretrained feature extractor

    # ------------------------------------------------------------ data

    def _set_data(self, train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray,
                  task: str, classes: Optional[List[str]], feature_names: Optional[List[str]],
                  source: Dict[str, Any], extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
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
        self.data_source = source
        self._added = []
        self.data_version += 1
        self._order_epoch = self._epoch_n_for = -1
        return self.data_summary()

    def data_summary(self) -> Dict[str, Any]:
        """Sizes, task and label names of the loaded data."""
        d = self.data
        if not d:
            return {"loaded": False}
        return {"loaded": True, "kind": self.data_source.get("kind"), "train": int(len(d["train_x"])),
                "val": int(len(d["val_x"])), "task": d["task"], "classes": d["classes"],
                "num_classes": d["num_classes"], "features": d["feature_names"],
                "sample_shape": [int(s) for s in d["train_x"].shape[1:]], "added": d["added"],
                "task_reason": d.get("task_reason"), "notes": d.get("notes") or []}

    def use_digits(self, blob: bytes, n_train: int = 8000, n_val: int = 1000) -> Dict[str, Any]:
        """Load the bundled MNIST digits: the first ``n_train`` for training, the last ``n_val`` held out."""
        images, labels = read_mnist(blob)
        n = len(labels)
        n_val = max(1, min(int(n_val), n - 1))
        n_train = max(1, min(int(n_train), n - n_val))
        x = images.reshape(n, -1).astype(np.float32) / np.float32(255.0)
        source = {"kind": "digits", "n_train": n_train, "n_val": n_val}
        return self._set_data(x[:n_train], labels[:n_train], x[n - n_val:], labels[n - n_val:],
                              "classification", [str(i) for i in range(10)], None, source)

    @staticmethod
    def inspect_csv(text: str) -> Dict[str, Any]:
        """Columns (numeric or text, missing cells, text values), the separator and a suggested
        label column (the last), read with the parser use_csv uses."""
        from pytrain.data.tabular import describe_csv
        desc = describe_csv(str(text))
        cols = desc["columns"]
        return {"columns": [c["name"] for c in cols], "numeric": [c["numeric"] for c in cols], "details": cols,
                "rows": desc["rows"], "delimiter": desc["delimiter"], "label": cols[-1]["name"] if cols else None}

    def use_csv(self, text: str, label: str, task: Optional[str] = None, val_fraction: float = 0.2,
                seed: int = 0, exclude: Sequence[str] = (), missing: str = "error",
                onehot: bool = False) -> Dict[str, Any]:
        """Load a CSV table (text) with ``label`` as target; split off a stratified validation set.
        ``exclude``: columns to leave out; ``missing``/``onehot``: see pytrain.data.load_csv."""
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
        self._csv_text = str(text)
        why = getattr(ds, "task_reason", "chosen")
        return self._set_data(train.x, train.y, val.x, val.y, ds.task, classes, ds.feature_names, source,
                              {"task_reason": None if why == "chosen" else why,
                               "text_classes": ds.classes, "notes": getattr(ds, "notes", [])})

    def use_arrays(self, x: np.ndarray, y: np.ndarray, task: str = "classification",
                   classes: Optional[List[str]] = None, val_fraction: float = 0.2,
                   seed: int = 0) -> Dict[str, Any]:
        """Load decoded samples (e.g. images the page decoded) with labels; split off validation."""
        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y, dtype=np.int64 if task == "classification" else np.float32)
        if len(x) != len(y):
            raise DataError("got %d samples but %d labels" % (len(x), len(y)))
        if len(x) < 2:
            raise DataError("need at least 2 samples, got %d" % len(x))
        idx_train, idx_val = _data.split_indices(len(x), float(val_fraction), int(seed),
                                                 stratify=y if task == "classification" else None)
        source = {"kind": "arrays", "task": task, "val_fraction": float(val_fraction), "seed": int(seed)}
        summary = self._set_data(x[idx_train], y[idx_train], x[idx_val], y[idx_val], task, classes, None, source)
        self._arrays = (x, y)
        return summary

    def add_samples(self, x: np.ndarray, y: Sequence[int]) -> Dict[str, Any]:
        """Append labelled samples (e.g. drawn digits) to the training set (personalization)."""
        d = self._need_data()
        x = np.asarray(x, dtype=np.float32).reshape((-1,) + d["train_x"].shape[1:])
        y = np.asarray(y, dtype=d["train_y"].dtype).reshape(-1)
        if len(x) != len(y):
            raise DataError("got %d samples but %d labels" % (len(x), len(y)))
        d["train_x"] = np.concatenate([d["train_x"], x])
        d["train_y"] = np.concatenate([d["train_y"], y])
        d["added"] += len(x)
        self._added.append((x, y))
        self.data_version += 1
        # The current epoch's order no longer covers every sample; the next epoch includes them.
        return self.data_summary()

    def examples(self) -> Dict[str, Any]:
        """The samples of a run on decoded examples as the page's "By example" gallery shows them
        (after a resume or a run file): ``x`` float32 bytes of shape ``shape`` (the samples in the
        order given, then those added), ``y`` their class ids, ``classes`` the names; with a
        backbone, its extractor's bytes (``backbone``) and description (``backbone_info``), so a
        rebuild from the gallery trains on what the run trained on."""
        if self.data_source.get("kind") != "arrays" or self._arrays is None or not self.data:
            return {"loaded": False}
        xs, ys = [self._arrays[0]], [self._arrays[1]]
        for a, b in self._added:
            xs.append(a.reshape((-1,) + self._arrays[0].shape[1:]))
            ys.append(b)
        x = np.ascontiguousarray(np.concatenate(xs), dtype=np.float32)
        y = np.concatenate(ys)
        bb = self.backbone
        return {"loaded": True, "x": x.tobytes(), "shape": [int(s) for s in x.shape],
                "y": [int(v) for v in y.tolist()], "task": self.data["task"],
                "classes": list(self.data.get("classes") or [str(i) for i in range(int(self.data["num_classes"]))]),
                "backbone": bb.blob if bb is not None else None,
                "backbone_info": dict(bb.info) if bb is not None else None}

    def _need_data(self) -> Dict[str, Any]:
        if not self.data:
            raise WebappError("no data loaded yet: choose digits, a CSV table or images first")
        return self.data

    # ------------------------------------------------------------ models and artifacts

    @staticmethod
    def inspect_backbone(blob: bytes, name: str = "the backbone", extra_files: Optional[Dict[str, bytes]] = None,
                         size: Optional[int] = None, normalize: str = "unit") -> Dict[str, Any]:
        """Check and describe an uploaded feature extractor (see feature_head.describe)."""
        return feature_head.describe(blob, name, extra_files, size, normalize)

    @staticmethod
    def inspect_model(blob: bytes, name: str = "the uploaded model",
                      extra_files: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
        """Describe an uploaded inference model (raises ModelFormatError when it is not ONNX);
        ``extra_files``: {file name: bytes} uploaded with it (its ``.onnx.data`` external data)."""
        return describe_model(_load_upload(blob, name, extra_files))

    def build_digits(self, kind: str = "mlp", optimizer: str = "AdamW",
                     prebuilt: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
        """Use the digits MLP/CNN: the site's prebuilt artifacts when given, else generate them here."""
        arts = prebuilt if prebuilt and optimizer == "AdamW" else digits_artifacts(kind, optimizer)
        info = {"origin": "digits", "kind": kind, "input": "input", "output": "output",
                "loss": "CrossEntropyLoss", "optimizer": optimizer,
                "sample_shape": [784] if kind == "mlp" else [1, 28, 28]}
        return self._use(arts, info)

    def build_mlp(self, hidden: Sequence[int] = (64,), activation: str = "relu", optimizer: str = "AdamW",
                  standardize: bool = True, seed: int = 0) -> Dict[str, Any]:
        """An MLP sized for the loaded table (classification: cross-entropy; regression: MSE)."""
        _, models, _ = _core()
        d = self._need_data()
        n_in = int(np.prod(d["train_x"].shape[1:]))
        classification = d["task"] == "classification"
        n_out = d["num_classes"] if classification else (1 if d["train_y"].ndim == 1 else d["train_y"].shape[1])
        if classification and n_out < 2:
            raise DataError("classification needs at least 2 classes in the label column, found %d" % n_out)
        model = models.mlp(input_size=n_in, hidden_sizes=[int(h) for h in hidden], output_size=int(n_out),
                           activation=activation, seed=int(seed))
        frozen = None
        stats = None
        if standardize:
            st = _data.Standardizer.fit(d["train_x"].reshape(len(d["train_x"]), -1))
            # baked into the graph, so the exported model takes raw rows like the uploaded CSV
            model, frozen = models.with_standardization(model, st.mean, st.std)
            stats = st.to_dict()
        loss = "CrossEntropyLoss" if classification else "MSELoss"
        arts = _generate(model, loss, optimizer, frozen=frozen, output_name="output")
        info = {"origin": "mlp", "hidden": [int(h) for h in hidden], "activation": activation,
                "input": "input", "output": "output", "loss": loss, "optimizer": optimizer,
                "sample_shape": [n_in], "standardizer": stats,
                # regression targets are learnt in standard units; the export answers in the column's
                "scaling": scaling.fit(None, d["train_y"]) if not classification else None}
        return self._use(arts, info)

    def build_cnn(self, optimizer: str = "AdamW", seed: int = 0,
                  backbone: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """A small CNN from scratch for the loaded images (the "teach it by example" flow); with a
        ``backbone`` ({bytes, name, extra_files, size, normalize}) only a new head trains on its
        features (see :mod:`pytrain.webapp.feature_head`)."""
        if backbone:
            return self._use(*feature_head.build(self, backbone, optimizer, seed))
        _, models, _ = _core()
        d = self._need_data()
        shape = [int(s) for s in d["train_x"].shape[1:]]
        if len(shape) != 3 or d["task"] != "classification" or d["num_classes"] < 2:
            raise DataError("a CNN needs images [C, H, W] of at least 2 classes; got samples of shape %s, %d class(es)"
                            % (shape, d["num_classes"]))
        model = models.cnn(input_shape=shape, num_classes=int(d["num_classes"]), seed=int(seed))
        arts = _generate(model, "CrossEntropyLoss", optimizer, output_name="output")
        info = {"origin": "cnn", "input": "input", "output": "output", "loss": "CrossEntropyLoss",
                "optimizer": optimizer, "sample_shape": shape}
        return self._use(arts, info)

    def generate(self, blob: bytes, loss: str = "CrossEntropyLoss", optimizer: str = "AdamW",
                 requires_grad: Optional[Sequence[str]] = None, output: Optional[str] = None,
                 name: str = "the uploaded model", batchnorm: Any = "auto",
                 extra_files: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
        """Generate artifacts for an uploaded inference model, then use them.

        batchnorm: 'auto' (BatchNorm whose scale/bias train uses batch statistics, a frozen one its
        running statistics), 'train', 'eval', or {node or scale name: mode} (generate_artifacts).
        extra_files: {file name: bytes} uploaded with the model (its ``.onnx.data`` external data).
        """
        model = _load_upload(blob, name, extra_files)
        desc = describe_model(model)
        out = output or desc["outputs"][0]["name"]
        arts = _generate(model, loss, optimizer, requires_grad=requires_grad, output_name=out, batchnorm=batchnorm)
        shape = desc["inputs"][0]["shape"][1:]
        info = {"origin": "upload", "input": desc["inputs"][0]["name"], "output": out, "loss": loss,
                "optimizer": optimizer, "batchnorm": batchnorm,
                "sample_shape": [int(s) if isinstance(s, int) and s > 0 else None for s in shape]}
        return self._use(arts, info)

    def use_artifacts(self, training: bytes, eval: bytes, optimizer: bytes, checkpoint: bytes,
                      output: Optional[str] = None) -> Dict[str, Any]:
        """Use ready-made artifacts (e.g. from ORT's or pytrain's generate_artifacts)."""
        names = {"training": training, "eval": eval, "optimizer": optimizer, "checkpoint": checkpoint}
        models_ = {}
        for key in ("training", "eval", "optimizer"):
            models_[key] = _load_upload(names[key], ARTIFACT_FILES[key])
        tdesc = describe_model(models_["training"])
        if len(tdesc["inputs"]) < 2:
            raise ModelFormatError("the training model should take the data and the labels as its "
                                   "first two inputs; it has %d input(s)" % len(tdesc["inputs"]))
        data_in, label_in = tdesc["inputs"][0], tdesc["inputs"][1]
        eval_outs = [o["name"] for o in describe_model(models_["eval"])["outputs"]]
        out = output or (eval_outs[1] if len(eval_outs) > 1 else
                         _label_consumer_output(models_["training"], label_in["name"]))
        loss = "CrossEntropyLoss" if label_in["elem_type"] == 7 else "MSELoss"  # 7 = INT64
        info = {"origin": "artifacts", "input": data_in["name"], "output": out, "loss": loss,
                "optimizer": "as uploaded",
                "sample_shape": [s if isinstance(s, int) and s > 0 else None for s in data_in["shape"][1:]]}
        return self._use({k: bytes(v) for k, v in names.items()}, info)

    def _use(self, arts: Dict[str, bytes], info: Dict[str, Any]) -> Dict[str, Any]:
        _, _, api = _core()
        state = api.CheckpointState.load_checkpoint(arts["checkpoint"])
        module = api.Module(arts["training"], state, arts["eval"])
        optimizer = api.Optimizer(arts["optimizer"], module)
        self.artifacts, self.model = dict(arts), dict(info)
        self.backbone = feature_head.attach(arts, info, self.backbone)
        self.state, self.module, self.optimizer = state, module, optimizer
        self.artifacts_version += 1
        self.epoch = self.epoch_step = self.step = 0
        self._order_epoch = self._epoch_n_for = -1
        self._infer = None
        self._apply_lr()
        self._loss_ref = []
        self._remember_good()
        return self.model_summary()

    def model_summary(self) -> Dict[str, Any]:
        """What the page shows about the current model."""
        if not self.model:
            return {"ready": False}
        out = dict(self.model)
        out.update({"ready": True, "params": self._param_count(), "epoch": self.epoch, "step": self.step})
        return out

    def _param_count(self) -> int:
        return int(self.module.get_parameters_size(trainable_only=True)) if self.module is not None else 0

    def _need_model(self) -> None:
        if self.module is None:
            raise WebappError("no model yet: build or upload a model first")

    # ------------------------------------------------------------ training

    def configure(self, batch_size: Optional[int] = None, lr: Optional[float] = None,
                  seed: Optional[int] = None) -> Dict[str, Any]:
        """Set batch size, learning rate and shuffling seed (applies from the next step)."""
        if batch_size is not None:
            if int(batch_size) < 1:
                raise WebappError("batch size must be at least 1, got %s" % batch_size)
            if int(batch_size) != self.batch_size:
                self.batch_size = int(batch_size)
                self._order_epoch = -1
        if lr is not None:
            if not float(lr) > 0:
                raise WebappError("learning rate must be positive, got %s" % lr)
            self.lr = float(lr)
            self._apply_lr()
        if seed is not None:
            self.seed = int(seed)
        return {"batch_size": self.batch_size, "lr": self.lr, "seed": self.seed}

    def change_optimizer(self, optimizer: str) -> Dict[str, Any]:
        """Switch to another optimizer keeping the weights (its moments start fresh), also after
        training has started: only the optimizer model is made again."""
        from pytrain import dtypes
        from pytrain.optim import OptimType, build_optimizer_model, resolve
        from pytrain.proto import load_model, opset_version
        from pytrain.webapp.common import OPTIMIZERS

        self._need_model()
        if optimizer not in OPTIMIZERS:
            raise WebappError("unknown optimizer %r: expected one of %s" % (optimizer, ", ".join(OPTIMIZERS)))
        if optimizer == self.model.get("optimizer"):
            return self.model_summary()
        _, _, api = _core()
        params = list(self.optimizer._params)
        ps = self.state.parameters
        opset = opset_version(load_model(self.artifacts["optimizer"], "optimizer model"))
        new = build_optimizer_model(resolve(getattr(OptimType, optimizer)), params,
                                    {p: list(ps[p].shape) for p in params},
                                    {p: dtypes.from_numpy(ps[p].dtype) for p in params}, opset)
        self.artifacts["optimizer"] = new.SerializeToString()
        self.artifacts_version += 1
        self.state.optimizer_state = None
        self.optimizer = api.Optimizer(self.artifacts["optimizer"], self.module)
        self.model["optimizer"] = optimizer
        self._apply_lr()
        return self.model_summary()

    def _apply_lr(self) -> None:
        if self.optimizer is not None and hasattr(self.optimizer, "set_learning_rate"):
            self.optimizer.set_learning_rate(self.lr)

    def steps_per_epoch(self) -> int:
        """Batches in the current epoch."""
        self._need_data()
        return len(self._batches())

    def _batches(self) -> List[np.ndarray]:
        if self._order_epoch != self.epoch or self._order is None:
            # Samples added mid-epoch join at the next epoch: the running epoch keeps the size it
            # started with (saved with the run, so a resumed run replays the same batches).
            n = self._epoch_n if self._epoch_n_for == self.epoch else len(self.data["train_x"])
            self._order = _data.epoch_order(n, self.seed, self.epoch)
            self._order_epoch = self.epoch
            self._epoch_n, self._epoch_n_for = n, self.epoch
        return _data.batch_indices(self._order, self.batch_size)

    def _shape_x(self, x: np.ndarray) -> np.ndarray:
        shape = self.model.get("sample_shape") or []
        if shape and all(isinstance(s, int) for s in shape) and int(np.prod(shape)) == int(np.prod(x.shape[1:])):
            return np.ascontiguousarray(x.reshape([len(x)] + list(shape)), dtype=np.float32)
        return np.ascontiguousarray(x, dtype=np.float32)

    def _model_x(self, x: np.ndarray) -> np.ndarray:
        """Samples as the training graph takes them (standardised when the page scales features;
        the exported model does that itself)."""
        if self.backbone is not None:   # the head trains on the frozen backbone's (cached) features
            return self.backbone.features(self._shape_x(x))
        return scaling.features(self._shape_x(x), self.model.get("scaling"))

    def set_scaling(self, features: bool = False, targets: Optional[bool] = None) -> Dict[str, Any]:
        """Standardise features and/or scale regression targets (from the training rows) while
        training; both are built into the exported model. Only before the first step."""
        self._need_model()
        d = self._need_data()
        if targets is None:
            targets = d["task"] == "regression"
        fitted = scaling.fit(d["train_x"] if features else None,
                             d["train_y"] if targets and d["task"] == "regression" else None)
        if fitted != (self.model.get("scaling") or {}) and self.step > 0:
            raise WebappError("scaling can change only before training starts (the weights learnt so far "
                              "expect the current one); build or generate the model again to change it")
        self.model["scaling"] = fitted or None
        self._infer = None
        return self.model_summary()

    def _targets(self, y: np.ndarray, width: Optional[int] = None) -> np.ndarray:
        if self.model.get("loss") == "CrossEntropyLoss":
            return np.ascontiguousarray(y, dtype=np.int64)
        d = self.data
        if d["task"] == "classification" and (width or d["num_classes"]) > 1 and y.ndim == 1:
            k = width or d["num_classes"]
            return np.eye(k, dtype=np.float32)[y.astype(np.int64)]
        y = y.astype(np.float32)
        return scaling.targets(y.reshape(len(y), -1), self.model.get("scaling"))

    def train_for(self, budget_ms: float = 200.0, max_steps: int = 1000000) -> Dict[str, Any]:
        """Train batches until ``budget_ms`` has passed or the epoch ends; report the losses.

        Short slices let the worker answer pause/stop/predict between them.
        """
        self._need_model()
        d = self._need_data()
        self.module.train()
        batches = self._batches()
        losses: List[float] = []
        start = time.perf_counter()
        diverged = None
        while self.epoch_step < len(batches) and len(losses) < int(max_steps):
            idx = batches[self.epoch_step]
            try:
                loss = self.module(self._model_x(d["train_x"][idx]), self._targets(d["train_y"][idx]))
            except DivergenceError as e:   # non-finite loss or gradient: refused before any update
                diverged = self._divergence(str(e).split(";")[0].replace("train step refused: ", ""), None)
                break
            value = _scalar(loss)
            if self._exploding(value):     # finite but far above where the run started: stop before the update
                diverged = self._divergence("the loss jumped to %.3g, over %d times its first value %.3g"
                                            % (value, EXPLODING_FACTOR, float(np.median(self._loss_ref))), value)
                break
            self.optimizer.step()
            self.module.lazy_reset_grad()
            if len(self._loss_ref) < 10:
                self._loss_ref.append(value)
            losses.append(value)
            self.epoch_step += 1
            self.step += 1
            if (time.perf_counter() - start) * 1000.0 >= budget_ms:
                break
        elapsed = time.perf_counter() - start
        epoch_end = self.epoch_step >= len(batches)
        if epoch_end:
            self.epoch += 1
            self.epoch_step = 0
            self._remember_good()
        self._save_progress()
        return {"losses": losses, "step": self.step, "epoch": self.epoch, "epoch_step": self.epoch_step,
                "steps_per_epoch": len(batches), "epoch_end": epoch_end, "seconds": elapsed,
                "diverged": diverged}

    def _exploding(self, value: float) -> bool:
        if not self._loss_ref:
            return False
        ref = float(np.median(self._loss_ref))
        return value > EXPLODING_FACTOR * ref and value > ref + 10.0

    def _remember_good(self) -> None:
        """Keep the checkpoint of this step (model built, epoch ends) to go back to after a divergence."""
        self._save_progress()
        self._good = {"checkpoint": bytes(self.state.to_bytes(include_optimizer_state=True)),
                      "epoch": self.epoch, "epoch_step": self.epoch_step, "step": self.step}

    def _divergence(self, what: str, loss: Optional[float]) -> Dict[str, Any]:
        """What the page shows when a step diverged (that step's update was not applied)."""
        good = self.last_good()
        message = ("training diverged at epoch %d, step %d: %s. Training stopped. Lower the learning rate, "
                   "then go back to the last good checkpoint (epoch %d, step %d)."
                   % (self.epoch + 1, self.step + 1, what, good["epoch"], good["step"]))
        return {"message": message, "good": good, "step": self.step + 1,
                "loss": float(loss) if loss is not None and np.isfinite(loss) else None}

    def last_good(self) -> Dict[str, Any]:
        """Position of the last good checkpoint (taken when the model was built and after each epoch)."""
        g = self._good or {"epoch": 0, "step": 0, "epoch_step": 0}
        return {"epoch": g["epoch"], "step": g["step"], "epoch_step": g["epoch_step"]}

    def restore_good(self) -> Dict[str, Any]:
        """Go back to the last good checkpoint (after a divergence); the learning rate stays as set now."""
        self._need_model()
        if self._good is None:
            raise WebappError("there is no earlier checkpoint to go back to")
        g, lr = self._good, self.lr
        arts = dict(self.artifacts)
        arts["checkpoint"] = g["checkpoint"]
        self._use(arts, self.model)
        self.lr = lr
        self._apply_lr()
        self.epoch, self.epoch_step, self.step = g["epoch"], g["epoch_step"], g["step"]
        self._order_epoch = -1
        self._loss_ref = []
        self._good = g
        return {"model": self.model_summary(), "epoch": self.epoch, "step": self.step, "digest": self.digest()}

    def _save_progress(self) -> None:
        props = getattr(self.state, "properties", None)
        if props is None:
            return
        props["epoch"] = int(self.epoch)
        props["epoch_step"] = int(self.epoch_step)
        props["step"] = int(self.step)
        props["batch_size"] = int(self.batch_size)
        props["lr"] = float(self.lr)
        props["seed"] = int(self.seed)

    def _outputs(self, x: np.ndarray) -> np.ndarray:
        """Forward outputs of the current parameters (through the exported inference model)."""
        if self.backbone is not None:   # the head on cached features: export() composes the same two graphs
            return self.backbone.head_outputs(self.module, self.model["output"], self.step, self._shape_x(x))
        if self._infer is None or self._infer_step != self.step:
            self._infer = _inference_session(self.export())
            self._infer_step = self.step
        out = self._infer.run(None, {self.model["input"]: self._shape_x(x)})[0]
        return np.asarray(out)

    def evaluate(self, batch: int = 500) -> Dict[str, Any]:
        """Validation loss and accuracy (classification) or RMSE/MAE (regression)."""
        self._need_model()
        d = self._need_data()
        x, y = d["val_x"], d["val_y"]
        if len(x) == 0:
            return {"loss": None, "metric": None, "metric_name": None, "n": 0}
        self.module.eval()
        total = 0.0
        outs = []
        for i in range(0, len(x), batch):
            xb, yb = x[i:i + batch], y[i:i + batch]
            res = self.module(self._model_x(xb), self._targets(yb))
            total += _scalar(res) * len(xb)
            outs.append(self._outputs(xb))
        self.module.train()
        out = np.concatenate(outs)
        result: Dict[str, Any] = {"loss": total / len(x), "n": int(len(x)), "epoch": self.epoch, "step": self.step}
        if d["task"] == "classification":
            pred = self._predict_classes(out)
            result.update({"metric": float(np.mean(pred == y)), "metric_name": "accuracy"})
        else:
            err = out.reshape(len(out), -1) - y.reshape(len(y), -1).astype(np.float32)
            result.update({"metric": float(np.sqrt(np.mean(err ** 2))), "metric_name": "rmse",
                           "mae": float(np.mean(np.abs(err)))})
        return result

    def _predict_classes(self, out: np.ndarray) -> np.ndarray:
        out = out.reshape(len(out), -1)
        if out.shape[1] == 1:  # one logit: binary classification
            return (out[:, 0] > 0).astype(np.int64)
        return np.argmax(out, axis=1)

    def predict(self, x: np.ndarray) -> Dict[str, Any]:
        """Model outputs for samples ``x``; for classification also probabilities and the class."""
        self._need_model()
        d = self.data or {"task": "classification", "classes": None}
        x = np.asarray(x, dtype=np.float32)
        shape = self.model.get("sample_shape") or []
        if shape and all(isinstance(s, int) for s in shape) and x.size == int(np.prod(shape)):
            x = x.reshape([1] + list(shape))
        elif x.ndim == 1:
            x = x.reshape(1, -1)
        out = self._outputs(x).reshape(len(x), -1)
        res: Dict[str, Any] = {"outputs": out.tolist()}
        if d["task"] == "classification":
            if out.shape[1] == 1:
                p1 = 1.0 / (1.0 + np.exp(-out[:, 0]))
                probs = np.stack([1 - p1, p1], axis=1)
            else:
                z = out - out.max(axis=1, keepdims=True)
                e = np.exp(z)
                probs = e / e.sum(axis=1, keepdims=True)
            cls = np.argmax(probs, axis=1)
            names = d.get("classes")
            res.update({"probabilities": probs.tolist(), "class": cls.tolist(),
                        "label": [names[c] if names and c < len(names) else str(c) for c in cls.tolist()]})
        return res

    # ------------------------------------------------------------ checkpoints, export, resume

    def checkpoint(self, include_optimizer_state: bool = True) -> bytes:
        """The current checkpoint (parameters, optimizer state, progress properties) as bytes."""
        self._need_model()
        self._save_progress()
        return bytes(self.state.to_bytes(include_optimizer_state=bool(include_optimizer_state)))

    def export(self) -> bytes:
        """The inference model with the current parameters, serialized."""
        self._need_model()
        raw = bytes(self.module.export_model_for_inferencing(None, [self.model["output"]]))
        if self.backbone is not None:   # one graph: the frozen backbone, then the trained head
            raw = self.backbone.compose(raw)
        return scaling.bake(raw, self.model.get("scaling"), self.model["output"])

    def digest(self) -> str:
        """A short hash of the current parameters (to check a resumed run continues the same one)."""
        self._need_model()
        flat = np.ascontiguousarray(self.module.get_contiguous_parameters(trainable_only=False))
        return hashlib.sha256(flat.tobytes()).hexdigest()[:16]

    def snapshot(self, data_version: int = -1, artifacts_version: int = -1) -> Dict[str, Any]:
        """Everything needed to resume this run; data/artifacts only when newer than the given versions."""
        self._need_model()
        self._need_data()
        meta = {"model": self.model, "data_source": self.data_source, "epoch": self.epoch,
                "epoch_step": self.epoch_step, "step": self.step, "batch_size": self.batch_size,
                "lr": self.lr, "seed": self.seed, "data_version": self.data_version,
                "artifacts_version": self.artifacts_version, "digest": self.digest(),
                "classes": self.data.get("classes"),
                "epoch_n": self._epoch_n if self._epoch_n_for == self.epoch else None}
        out: Dict[str, Any] = {"meta": meta, "checkpoint": self.checkpoint()}
        if int(artifacts_version) != self.artifacts_version:
            out["artifacts"] = dict(self.artifacts)
        if int(data_version) != self.data_version:
            out["data"] = self._data_blob()
        return out

    def _data_blob(self) -> bytes:
        """The data a resume cannot fetch again: CSV text, decoded samples, added samples."""
        arrays: Dict[str, np.ndarray] = {}
        kind = self.data_source.get("kind")
        if kind == "csv":
            arrays["csv"] = np.frombuffer(self._csv_text.encode("utf-8"), dtype=np.uint8)
        elif kind == "arrays" and self._arrays is not None:
            arrays["x"], arrays["y"] = self._arrays
        if self._added:
            arrays["added_x"] = np.concatenate([a for a, _ in self._added])
            arrays["added_y"] = np.concatenate([b for _, b in self._added])
        if self.backbone is not None and "x" in arrays:
            # The features the head trains on, as this run computed them: recomputed after a reload
            # in other batches they could differ in the last bits, and the resumed run with them.
            rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
            arrays["features"] = self.backbone.features(self._shape_x(rows))
        return _pack_arrays(arrays)

    def restore(self, meta: Dict[str, Any], artifacts: Dict[str, bytes], checkpoint: bytes,
                data: bytes = b"", digits: Optional[bytes] = None) -> Dict[str, Any]:
        """Rebuild a saved run: data, artifacts, then the checkpoint and the saved position."""
        src = meta["data_source"]
        kind = src.get("kind")
        arrays = _unpack_arrays(bytes(data)) if data else {}
        if kind == "digits":
            if digits is None:
                raise WebappError("resuming a digits run needs the digits file")
            self.use_digits(digits, src["n_train"], src["n_val"])
        elif kind == "csv":
            self.use_csv(arrays["csv"].tobytes().decode("utf-8"), src["label"], src["task"],
                         src["val_fraction"], src["seed"], src.get("exclude", ()), src.get("missing", "error"),
                         src.get("onehot", False))
        elif kind == "arrays":
            self.use_arrays(arrays["x"], arrays["y"], src["task"], meta.get("classes"), src["val_fraction"],
                            src["seed"])
        else:
            raise WebappError("the saved run has unknown data kind %r" % kind)
        if "added_y" in arrays:
            self.add_samples(arrays["added_x"], arrays["added_y"])
        arts = dict(artifacts)
        arts["checkpoint"] = bytes(checkpoint)
        self._use(arts, meta["model"])
        if self.backbone is not None and "features" in arrays and "x" in arrays:   # the features as saved
            rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
            self.backbone = feature_head.with_features(self.backbone.blob, self.backbone.info, rows,
                                                       arrays["features"])
        self.batch_size, self.lr, self.seed = int(meta["batch_size"]), float(meta["lr"]), int(meta["seed"])
        self._apply_lr()
        self.epoch, self.epoch_step, self.step = int(meta["epoch"]), int(meta["epoch_step"]), int(meta["step"])
        self._order_epoch = -1
        if meta.get("epoch_n"):
            self._epoch_n, self._epoch_n_for = int(meta["epoch_n"]), self.epoch
        self._remember_good()
        return {"model": self.model_summary(), "data": self.data_summary(), "digest": self.digest(),
                "epoch": self.epoch, "step": self.step, "epoch_step": self.epoch_step}

    def insights(self) -> Dict[str, Any]:
        """What the model learned (see :mod:`pytrain.webapp.insights`)."""
        from pytrain.webapp import insights
        return insights.describe(self)

    def run_file(self, epochs: Optional[int] = None) -> bytes:
        """The whole run as one zip the page, the widget and ``pytrain train --resume`` take back
        (see :mod:`pytrain.webapp.runfile`)."""
        self._need_model()
        return runfile.run_file(self, epochs)

    def use_artifact_files(self, files: Dict[str, bytes]) -> Dict[str, Any]:
        """Use uploaded artifacts or a run file, recognised by content; a run continues at its step
        (and with its table, when the run file holds one)."""
        found, run, table, seen = runfile.sort_files(files)
        missing = [k for k in ("training", "eval", "optimizer", "checkpoint") if k not in found]
        if missing:
            raise WebappError("no %s among the chosen files (%s); choose the run's .zip, or the training, eval "
                              "and optimizer models with a checkpoint"
                              % (" or ".join(missing), "; ".join("%s: %s" % kv for kv in seen.items()) or "none"))
        _, _, api = _core()
        props = dict(api.CheckpointState.load_checkpoint(found["checkpoint"]).properties.items())
        data = None
        src = run.get("data_source") or {}
        if table is not None and src.get("kind") == "csv":
            data = self.use_csv(table, src["label"], src.get("task"), src.get("val_fraction", 0.2), src.get("seed", 0),
                                src.get("exclude", ()), src.get("missing", "error"), src.get("onehot", False))
        elif isinstance(table, dict) and src.get("kind") == "arrays":   # examples (and a backbone) of "By example"
            data = runfile.use_examples(self, table, run, found.get(feature_head.ARTIFACT_KEY))
        if run.get("model"):
            model = self._use(found, run["model"])
        else:
            model = self.use_artifacts(found["training"], found["eval"], found["optimizer"], found["checkpoint"])
        self.epoch, self.epoch_step, self.step = (int(props.get(k, 0)) for k in ("epoch", "epoch_step", "step"))
        if "batch_size" in props:
            self.batch_size = int(props["batch_size"])
        if "lr" in props:
            self.lr = float(props["lr"])
            self._apply_lr()
        self.seed = int(props.get("seed", self.seed))
        self._order_epoch = -1
        self._remember_good()
        model.update({"epoch": self.epoch, "step": self.step})
        return {"model": model, "data": data or self.data_summary(), "files": seen, "epoch": self.epoch,
                "step": self.step, "batch_size": self.batch_size, "lr": self.lr,
                "data_source": src or None}

    def status(self) -> Dict[str, Any]:
        """Data, model and progress in one answer."""
        out = {"data": self.data_summary(), "model": self.model_summary(), "epoch": self.epoch,
               "epoch_step": self.epoch_step, "step": self.step, "batch_size": self.batch_size, "lr": self.lr,
               "data_version": self.data_version, "artifacts_version": self.artifacts_version}
        if self.data and self.module is not None:
            out["steps_per_epoch"] = self.steps_per_epoch()
        return out

    def ort(self, op: str, **args: Any) -> Any:
        """onnxruntime-web's TrainingSession calls (web/pytrain-ort.js), independent of this tab's run."""
        from pytrain.webapp.training_session import dispatch
        return dispatch(self, op, args)

    def federation(self, op: str, **args: Any) -> Any:
        """"Join a federation": this tab's model and data as a Flower node (see pytrain.webapp.federation)."""
        from pytrain.webapp.federation import dispatch as federation_dispatch
        return federation_dispatch(self, op, args)


def _scalar(step_result: Any) -> float:
    """The loss of a Module step (which returns a list when there are additional outputs)."""
    first = step_result[0] if isinstance(step_result, (list, tuple)) else step_result
    return float(np.asarray(first).reshape(-1)[0])


def _pack_arrays(arrays: Dict[str, np.ndarray]) -> bytes:
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


def _unpack_arrays(blob: bytes) -> Dict[str, np.ndarray]:
    n = int.from_bytes(blob[:4], "little")
    header = json.loads(blob[4:4 + n].decode("utf-8"))
    base = 4 + n
    out = {}
    for name, h in header.items():
        start = base + h["offset"]
        arr = np.frombuffer(blob[start:start + h["size"]], dtype=np.dtype(h["dtype"]))
        out[name] = arr.reshape(h["shape"])
    return out



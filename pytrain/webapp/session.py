"""The Session: everything one browser tab trains, a thin facade the worker drives (see
:mod:`pytrain.webapp.bridge`). The data comes from a :class:`~pytrain.webapp.data_source.DataSource`,
the model from :mod:`pytrain.webapp.model_source`, and training and validation are the one run of
:mod:`pytrain.run`; the dicts returned here are what the page reads."""
from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import DivergenceError
from pytrain.run import rows, scaling
from pytrain.run.loop import Position, steps
from pytrain.webapp import feature_head, gpu_resume, memory, model_source, predictions, saved_run
from pytrain.webapp.common import WebappError, core_api
from pytrain.webapp.data_source import VAL_FRACTION, DataSource
from pytrain.webapp.gpu_slices import GpuSlices, Slice
from pytrain.webapp.predictions import ExportCache
from pytrain.webapp.run_options import TAB_RUN
from pytrain.webapp.run_state import TrainingRun

if TYPE_CHECKING:   # imported when first used: the worker starts answering sooner, its import chain stays short
    from pytrain.webapp.federation import FederationFlow, TrainerData
    from pytrain.webapp.ort_session import OrtSessions
from pytrain.webapp.held_artifacts import Artifacts


class Session:
    """Everything one browser tab trains: the facade the worker calls. Its jobs are rooms of their own: the
    data (:attr:`source`, a DataSource), the run (:attr:`run`, a TrainingRun: module, optimizer, settings,
    position, epoch order, last good checkpoint), the exported model kept for predictions (:attr:`exports`),
    the federation flow (:attr:`flow`) and onnxruntime-web's sessions (:attr:`ort_sessions`); the session
    itself holds the model's description and artifacts."""

    def __init__(self) -> None:
        self.source = DataSource()
        self.run = TrainingRun()
        self.exports = ExportCache()
        self.flow: Optional[FederationFlow] = None          # made when the tab first joins a federation
        self.ort_sessions: Optional[OrtSessions] = None     # made at onnxruntime-web's first call
        self.model: Dict[str, Any] = {}
        self.artifacts = Artifacts({})
        self.artifacts_version = 0
        self.backbone: Optional[feature_head.Backbone] = None   # a frozen pretrained feature extractor
        self.gpu = GpuSlices()   # training on the page's WebGPU device, when it registered one

    # ------------------------------------------------------------ data

    def _loaded(self, summary: Dict[str, Any]) -> Dict[str, Any]:
        self.run.new_data()
        return summary

    def data_summary(self) -> Dict[str, Any]:
        """Sizes, task and label names of the loaded data."""
        return self.source.summary()

    def use_digits(self, blob: bytes, n_train: int = 8000, n_val: int = 1000, rest: bool = False) -> Dict[str, Any]:
        """Load the bundled MNIST digits: the first ``n_train`` for training, the last ``n_val`` held out
        (``blob`` may be their first part, then ``rest`` the whole file: see DataSource.use_digits)."""
        return self._loaded(self.source.use_digits(blob, n_train, n_val, rest))

    @staticmethod
    def inspect_csv(text: str) -> Dict[str, Any]:
        """Columns (numeric or text, missing cells, text values), the separator and a suggested
        label column (the last), read with the parser use_csv uses."""
        return DataSource.inspect_csv(text)

    def use_csv(self, text: str, label: str, task: Optional[str] = None, val_fraction: float = VAL_FRACTION,
                seed: int = 0, exclude: Sequence[str] = (), missing: str = "error",
                onehot: bool = False) -> Dict[str, Any]:
        """Load a CSV table (text) with ``label`` as target; split off a stratified validation set.
        ``exclude``: columns to leave out; ``missing``/``onehot``: see pytrain.data.load_csv."""
        return self._loaded(self.source.use_csv(text, label, task, val_fraction, seed, exclude, missing, onehot))

    def use_arrays(self, x: np.ndarray, y: np.ndarray, task: str = "classification",
                   classes: Optional[List[str]] = None, val_fraction: float = VAL_FRACTION,
                   seed: int = 0) -> Dict[str, Any]:
        """Load decoded samples (e.g. images the page decoded) with labels; split off validation."""
        return self._loaded(self.source.use_arrays(x, y, task, classes, val_fraction, seed))

    def add_samples(self, x: np.ndarray, y: Sequence[int]) -> Dict[str, Any]:
        """Append labelled samples (e.g. drawn digits) to the training set (personalization)."""
        # The current epoch's order no longer covers every sample; the next epoch includes them.
        return self.source.add_samples(x, y)

    def examples(self) -> Dict[str, Any]:
        """The samples of a run on decoded examples as the page's "By example" gallery shows them (after a
        resume or a run file): ``x`` float32 bytes of shape ``shape`` (the samples in the order given, then those
        added), ``y`` their class ids, ``classes`` the names; with a backbone, its extractor's bytes (``backbone``)
        and description (``backbone_info``), so a rebuild from the gallery trains on what the run trained on."""
        return self.source.examples(self.backbone)

    def need_data(self) -> Dict[str, Any]:
        """The loaded data (raises the page's error when none is)."""
        return self.source.need()

    # ------------------------------------------------------------ models and artifacts

    @staticmethod
    def inspect_backbone(blob: bytes, *args: Any, **options: Any) -> Dict[str, Any]:
        """Check and describe an uploaded feature extractor: name, extra_files, size, normalize, as
        feature_head.extractor takes them (its defaults for those unset)."""
        return feature_head.describe(blob, *args, **options)

    @staticmethod
    def inspect_model(blob: bytes, name: str = "the uploaded model",
                      extra_files: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
        """Describe an uploaded inference model (raises ModelFormatError when it is not ONNX);
        ``extra_files``: {file name: bytes} uploaded with it (its ``.onnx.data`` external data)."""
        from pytrain.webapp.inspect_model import inspect_upload   # (the generator and autodiff: not at the start)
        return inspect_upload(blob, name, extra_files)

    def build_digits(self, kind: str = "mlp", optimizer: str = TAB_RUN.optimizer,
                     prebuilt: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
        """Use the digits MLP/CNN: the site's prebuilt artifacts when given, else generate them here."""
        return self.use_model(*model_source.digits(kind, optimizer, prebuilt))

    def build_mlp(self, hidden: Sequence[int] = TAB_RUN.hidden, activation: str = "relu",
                  optimizer: str = TAB_RUN.optimizer,
                  standardize: bool = True, seed: int = 0) -> Dict[str, Any]:
        """An MLP sized for the loaded table (classification: cross-entropy; regression: MSE)."""
        return self.use_model(*model_source.mlp(self.need_data(), hidden, activation, optimizer, standardize, seed))

    def build_cnn(self, optimizer: str = TAB_RUN.optimizer, seed: int = 0,
                  backbone: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """A small CNN from scratch for the loaded images (the "teach it by example" flow); with a
        ``backbone`` ({bytes, name, extra_files, size, normalize}) only a new head trains on its
        features (see :mod:`pytrain.webapp.feature_head`)."""
        if backbone:
            return self.use_model(*feature_head.build(self, backbone, optimizer, seed))
        return self.use_model(*model_source.cnn(self.need_data(), optimizer, seed))

    def generate(self, blob: bytes, **options: Any) -> Dict[str, Any]:
        """Generate artifacts for an uploaded inference model, then use them; ``options``: the fields of
        :class:`~pytrain.webapp.model_source.GenerateOptions` the page chose (the others keep their defaults)."""
        return self.use_model(*model_source.upload(blob, model_source.GenerateOptions(**options)))

    def use_artifacts(self, training: bytes, eval: bytes, optimizer: bytes, checkpoint: bytes,
                      output: Optional[str] = None) -> Dict[str, Any]:
        """Use ready-made artifacts (e.g. from ORT's or pytrain's generate_artifacts)."""
        return self.use_model(*model_source.ready_made(training, eval, optimizer, checkpoint, output))

    def use_model(self, arts: Mapping[str, bytes], info: Dict[str, Any]) -> Dict[str, Any]:
        """Train ``arts`` (artifacts by role) from their checkpoint; ``info``: the model's description."""
        from pytrain.device import api   # (not core_api(): prebuilt artifacts need no generator)
        state = api.CheckpointState.load_checkpoint(arts["checkpoint"])
        # the models of the artifacts in use when going back (restore_good): read again, not copied
        models = arts.models if isinstance(arts, Artifacts) else {}
        module = api.Module(models.get("training") or arts["training"], state, models.get("eval") or arts["eval"])
        optimizer = api.Optimizer(arts["optimizer"], module)
        # The training and eval models pytrain made are serialized again from the module when saved, not held
        # twice more; artifacts uploaded as they are (ORT's ones, which the module converts) keep their bytes.
        self.artifacts = Artifacts(arts, module.models if info.get("origin") != "artifacts" else None)
        if isinstance(arts, dict):   # the caller's bytes of those models go too (the generator's fresh dict)
            for role in self.artifacts.models:
                arts.pop(role, None)
        self.model = dict(info)
        self.backbone = feature_head.attach(arts, info, self.backbone)
        self.artifacts_version += 1
        self.exports.forget()
        self.run.start(state, module, optimizer)
        return self.model_summary()

    def model_summary(self) -> Dict[str, Any]:
        """What the page shows about the current model."""
        if not self.model:
            return {"ready": False}
        out = dict(self.model)
        module = self.run.module
        params = int(module.get_parameters_size(trainable_only=True)) if module is not None else 0
        out.update({"ready": True, "params": params, "epoch": self.run.at.epoch, "step": self.run.at.step})
        out["memory"] = memory.summary(self)   # the estimate against what the tab has left
        return out

    def need_model(self) -> None:
        """Raise the page's error when no model was built or uploaded yet."""
        self.run.need_model()

    # ------------------------------------------------------------ training

    def configure(self, batch_size: Optional[int] = None, lr: Optional[float] = None,
                  seed: Optional[int] = None) -> Dict[str, Any]:
        """Set batch size, learning rate and shuffling seed (applies from the next step)."""
        return self.run.configure(batch_size, lr, seed)

    def run_options(self, **given: Any) -> Dict[str, Any]:
        """A tab's training options: what the caller set (None: unset), the rest TabRun's defaults."""
        return TAB_RUN.with_given(given).as_dict()

    def start_run(self, **given: Any) -> Dict[str, Any]:
        """Resolve a training loop's options (as :meth:`run_options`) and apply its batch size, learning rate
        and seed; the worker's loop paces itself by the rest of the answer."""
        opts = TAB_RUN.with_given(given)
        self.configure(opts.batch_size, opts.learning_rate, opts.seed)
        return opts.as_dict()

    def change_optimizer(self, optimizer: str) -> Dict[str, Any]:
        """Switch to another optimizer keeping the weights (its moments start fresh), also after
        training has started: only the optimizer model is made again."""
        self.need_model()
        if optimizer == self.model.get("optimizer") and optimizer in model_source.OPTIMIZERS:
            return self.model_summary()
        _, _, api = core_api()
        run = self.run
        # the parameters the current optimizer model updates (api.Optimizer keeps them privately)
        self.artifacts["optimizer"] = model_source.optimizer_model(optimizer, run.optimizer.parameter_names, run.state,
                                                                   self.artifacts["optimizer"])
        self.artifacts_version += 1
        run.use_optimizer(api.Optimizer(self.artifacts["optimizer"], run.module))
        self.model["optimizer"] = optimizer
        return self.model_summary()

    def steps_per_epoch(self) -> int:
        """Batches in the current epoch."""
        return len(self._batches())

    def _batches(self) -> List[np.ndarray]:
        return self.run.batches(len(self.need_data()["train_x"]))

    def shape_x(self, x: np.ndarray) -> np.ndarray:
        """Samples in the model's sample shape (as the page sends them flat), float32."""
        shape = self.model.get("sample_shape") or []
        if shape and all(isinstance(s, int) for s in shape) and int(np.prod(shape)) == int(np.prod(x.shape[1:])):
            return np.ascontiguousarray(x.reshape([len(x)] + list(shape)), dtype=np.float32)
        return np.ascontiguousarray(x, dtype=np.float32)

    def model_x(self, x: np.ndarray) -> np.ndarray:
        """Samples as the training graph takes them (standardised when the page scales features;
        the exported model does that itself)."""
        if self.backbone is not None:   # the head trains on the frozen backbone's (cached) features
            return self.backbone.features(self.shape_x(x))
        return scaling.features(self.shape_x(x), self.model.get("scaling"))

    def set_scaling(self, features: bool = False, targets: Optional[bool] = None) -> Dict[str, Any]:
        """Standardise features and/or scale regression targets (from the training rows) while
        training; both are built into the exported model. Only before the first step."""
        self.need_model()
        d = self.need_data()
        if targets is None:
            targets = d["task"] == "regression"
        fitted = scaling.fit(d["train_x"] if features else None,
                             d["train_y"] if targets and d["task"] == "regression" else None)
        if fitted != (self.model.get("scaling") or {}) and self.run.at.step > 0:
            raise WebappError("scaling can change only before training starts (the weights learnt so far "
                              "expect the current one); build or generate the model again to change it")
        self.model["scaling"] = fitted or None
        self.exports.forget()
        return self.model_summary()

    def targets(self, y: np.ndarray, width: Optional[int] = None) -> np.ndarray:
        """Labels as the training graph's loss takes them (class ids, one-hot rows or scaled values)."""
        if self.model.get("loss") == "CrossEntropyLoss":
            return np.ascontiguousarray(y, dtype=np.int64)
        d = self.source.data
        if d["task"] == "classification" and (width or d["num_classes"]) > 1 and y.ndim == 1:
            k = width or d["num_classes"]
            return np.eye(k, dtype=np.float32)[y.astype(np.int64)]
        y = y.astype(np.float32)
        return scaling.targets(y.reshape(len(y), -1), self.model.get("scaling"))

    def batch(self, idx: np.ndarray) -> Tuple[np.ndarray, ...]:
        """Training samples ``idx`` as the training graph takes them: (inputs, targets), or a
        "Your text" model's feeds (``d["feeds"]``, see :mod:`pytrain.webapp.text_source`)."""
        d = self.need_data()
        if "feeds" in d:
            return d["feeds"](d["train_x"][idx], d["train_y"][idx])
        return self.model_x(d["train_x"][idx]), self.targets(d["train_y"][idx])

    def train_for(self, budget_ms: float = TAB_RUN.budget_ms, max_steps: int = 1000000) -> Dict[str, Any]:
        """Train batches until ``budget_ms`` has passed or the epoch ends; report the losses.

        Short slices let the worker answer pause/stop/predict between them.
        """
        self.need_model()
        run = self.run
        run.module.train()
        batches = self._batches()
        losses: List[float] = []
        start = time.perf_counter()
        diverged = None
        ended = False
        at = run.at
        max_steps = min(int(max_steps), self.source.ready_batches(batches, at.epoch_step))   # the digits' first part
        if at.epoch_step < len(batches) and max_steps > 0:
            pending = self.gpu.run(run.module, run.optimizer, at, Slice(batches, self.batch, budget_ms, max_steps))
            if pending is not None:   # enqueued on the GPU: the JS awaits the device, then calls gpu_finish
                return {"losses": [], "pending": pending, "step": at.step, "epoch": at.epoch,
                        "epoch_step": at.epoch_step, "steps_per_epoch": len(batches), "epoch_end": self.gpu.epoch_end,
                        "seconds": time.perf_counter() - start, "diverged": None,
                        "loading": self.source.loaded is not None}
            try:
                for st in steps(run.module, run.optimizer, at, lambda epoch: batches, self.batch, watch=run.watch):
                    losses.append(st.loss)
                    ended = st.epoch_end
                    if ended or len(losses) >= max_steps or (time.perf_counter() - start) * 1000.0 >= budget_ms:
                        break
            except DivergenceError as e:   # non-finite, or finite far above where the run started: refused
                diverged = self._divergence(e.reason, e.loss)
        elif at.epoch_step >= len(batches):   # the epoch ran out under a larger batch size
            at.epoch, at.epoch_step = at.epoch + 1, 0
            ended = True
        elapsed = time.perf_counter() - start
        if ended:
            run.remember_good()
        run.save_progress()
        return {"losses": losses, "step": at.step, "epoch": at.epoch, "epoch_step": at.epoch_step,
                "steps_per_epoch": len(batches), "epoch_end": ended, "seconds": elapsed,
                "diverged": diverged, "loading": self.source.loaded is not None,
                "gpu_refused": self.gpu.refused}   # (the reason the page's WebGPU device does not train this model)

    def gpu_finish(self) -> Dict[str, Any]:
        """After the worker's JS awaited the WebGPU device: the slice's losses (and the divergence a non-finite
        one means: the GPU does not refuse the step before its update), and train_for's end of a slice."""
        losses = self.gpu.finish()
        self.exports.forget()   # (a prediction made while the parameters were coming back saw the old ones)
        streamed = self.gpu.epoch_end and self.gpu.moments_on_gpu   # (the worker streams and keeps it: gpu_save(good))
        if self.gpu.epoch_end and not streamed:
            self.run.remember_good()
        self.run.save_progress()
        bad = [v for v in losses if not np.isfinite(v)]
        return {"losses": losses, "diverged": self._divergence("the loss is %s" % bad[0], None) if bad else None,
                "device": self.gpu.describe() or self.gpu.refused, "good_streamed": streamed}

    def gpu_sync(self, drop: bool = False) -> Dict[str, Any]:
        """Enqueue the read back of the GPU's parameters and optimizer state when the heap's are older (``pending``:
        the worker's JS awaits the device, then calls gpu_commit); ``drop``: the command that follows changes the
        state or the model, so the GPU training is let go once read back (the next slice uploads anew)."""
        return {"pending": self.gpu.sync(self.run.at, drop)}

    def gpu_commit(self) -> Dict[str, Any]:
        """After the worker's JS awaited the device: the state read back into the CheckpointState."""
        self.gpu.commit()
        self.exports.forget()
        return {"step": self.run.at.step}

    def gpu_save(self, start: bool = False, good: bool = False) -> Dict[str, Any]:
        """The checkpoint streamed from the GPU when its optimizer state lives there only (gpu_resume.save)."""
        return gpu_resume.save(self, start, good)

    def gpu_resume(self, size: int = 0) -> Dict[str, Any]:
        """A renewed device resumes from the worker's last good checkpoint, streamed (gpu_resume.resume)."""
        return gpu_resume.resume(self, size)

    def gpu_lost(self, reason: str) -> Dict[str, Any]:
        """The device failed: the CPU retrains from the last read back, or a new device from the good (gpu_resume)."""
        return gpu_resume.lost(self, reason)

    def _divergence(self, what: str, loss: Optional[float]) -> Dict[str, Any]:
        """What the page shows when a step diverged (that step's update was not applied)."""
        good, at = self.last_good(), self.run.at
        message = ("training diverged at epoch %d, step %d: %s. Training stopped. Lower the learning rate, "
                   "then go back to the last good checkpoint (epoch %d, step %d)."
                   % (at.epoch + 1, at.step + 1, what, good["epoch"], good["step"]))
        return {"message": message, "good": good, "step": at.step + 1,
                "loss": float(loss) if loss is not None and np.isfinite(loss) else None}

    def last_good(self) -> Dict[str, Any]:
        """Position of the last good checkpoint (taken when the model was built and after each epoch)."""
        return self.run.last_good()

    def restore_good(self, size: int = 0) -> Dict[str, Any]:
        """Go back to the last good checkpoint (after a divergence); the learning rate stays as set now. One the worker
        holds (streamed, ``size`` bytes: the optimizer state on the GPU only) comes back range by range (gpu_resume)."""
        self.need_model()
        run = self.run
        g, lr = run.good(), run.lr
        if g is None:
            raise WebappError("there is no earlier checkpoint to go back to")
        if g.checkpoint is None:
            return gpu_resume.resume(self, size, back=True)
        arts = self.artifacts.copy()
        arts["checkpoint"] = g.checkpoint
        self.use_model(arts, self.model)
        run.lr = lr
        run.apply_lr()
        run.resume(Position(g.epoch, g.epoch_step, g.step))
        run.keep_good(g)
        return {"model": self.model_summary(), "epoch": run.at.epoch, "step": run.at.step, "digest": self.digest()}

    def outputs(self, x: np.ndarray) -> np.ndarray:
        """Forward outputs of the current parameters (through the exported inference model)."""
        if self.backbone is not None:   # the head on cached features: export() composes the same two graphs
            return self.backbone.head_outputs(self.run.module, self.model["output"], self.run.at.step,
                                              self.shape_x(x))
        out = self.inference().run(None, {self.model["input"]: self.shape_x(x)})[0]
        return np.asarray(out)

    def inference(self) -> Any:
        """The exported model of the current step as an InferenceSession (kept until the weights change)."""
        return self.exports.session(self.run.at.step, lambda: self.export(raw_rows=False))

    def evaluate(self, batch: int = 500) -> Dict[str, Any]:
        """Validation loss and accuracy (classification) or RMSE/MAE (regression)."""
        return predictions.evaluate(self, batch)

    def predict(self, x: Optional[np.ndarray] = None, row: Optional[List[str]] = None) -> Dict[str, Any]:
        """Outputs for samples ``x`` or a table's ``row`` as typed (through the export); see predictions."""
        return predictions.predict(self, x, row)

    # ------------------------------------------------------------ checkpoints, export, resume

    def checkpoint(self, include_optimizer_state: bool = True) -> bytes:
        """The current checkpoint (parameters, optimizer state, progress properties) as bytes."""
        return self.run.checkpoint(include_optimizer_state)

    def export(self, raw_rows: bool = True) -> bytes:
        """The inference model with the current parameters, serialized; a table's takes its rows as
        typed (:mod:`pytrain.run.rows`), or with ``raw_rows`` False the features as they train."""
        self.need_model()
        raw = bytes(self.run.module.export_model_for_inferencing(None, self.model.get("outputs", [self.model["output"]])))
        if self.backbone is not None:   # one graph: the frozen backbone, then the trained head
            raw = self.backbone.compose(raw)
        raw = scaling.bake(raw, self.model.get("scaling"), self.model["output"])
        return rows.bake(raw, self.source.data.get("columns")) if raw_rows else raw

    def digest(self) -> str:
        """A short hash of the current parameters (to check a resumed run continues the same one)."""
        self.need_model()
        flat = np.ascontiguousarray(self.run.module.get_contiguous_parameters(trainable_only=False))
        return hashlib.sha256(flat.tobytes()).hexdigest()[:16]

    def snapshot(self, data_version: int = -1, artifacts_version: int = -1, checkpoint: bool = True) -> Dict[str, Any]:
        """Everything needed to resume this run; data/artifacts only when newer than the given versions;
        without ``checkpoint`` when the worker streams it (:meth:`gpu_save`)."""
        return saved_run.snapshot(self, data_version, artifacts_version, checkpoint)

    def restore(self, meta: Dict[str, Any], artifacts: Dict[str, bytes], checkpoint: bytes,
                data: bytes = b"", digits: Optional[bytes] = None, checkpoint_size: int = 0) -> Dict[str, Any]:
        """Rebuild a saved run: data, artifacts, then the checkpoint (or one the worker holds, ``checkpoint_size``
        bytes, range by range) and the saved position (see saved_run.restore)."""
        return saved_run.restore(self, meta, artifacts, checkpoint, data, digits, checkpoint_size)

    def insights(self) -> Dict[str, Any]:
        """What the model learned (see :mod:`pytrain.webapp.insights`)."""
        from pytrain.webapp import insights
        return insights.describe(self)

    def run_file(self, epochs: Optional[int] = None, history: Optional[Dict[str, Any]] = None) -> bytes:
        """The whole run as one zip the page, the widget and ``pytrain train --resume`` take back, with the
        plots' ``history`` (see :mod:`pytrain.webapp.runfile`)."""
        from pytrain.webapp import runfile   # (the text stack: not at the tab's start)
        self.need_model()
        return runfile.run_file(self, epochs, history)

    def use_artifact_files(self, files: Dict[str, bytes]) -> Dict[str, Any]:
        """Use uploaded artifacts or a run file, recognised by content; a run continues at its step
        (and with its table, when the run file holds one)."""
        return saved_run.use_artifact_files(self, files)

    def status(self) -> Dict[str, Any]:
        """Data, model and progress in one answer."""
        run = self.run
        out = {"data": self.data_summary(), "model": self.model_summary(), "epoch": run.at.epoch,
               "epoch_step": run.at.epoch_step, "step": run.at.step, "batch_size": run.batch_size, "lr": run.lr,
               "data_version": self.source.version, "artifacts_version": self.artifacts_version}
        if self.source.data and run.module is not None:
            out["steps_per_epoch"] = self.steps_per_epoch()
        return out

    def ort(self, op: str, **args: Any) -> Any:
        """onnxruntime-web's TrainingSession calls (web/pytrain-ort.js), independent of this tab's run."""
        from pytrain.webapp.ort_session import OrtSessions, dispatch
        if self.ort_sessions is None:
            self.ort_sessions = OrtSessions()
        return dispatch(self.ort_sessions, op, args)

    def text(self, op: str, **args: Any) -> Any:
        """"Your text": a language or classification model fine-tuned on text (see pytrain.webapp.text_source)."""
        from pytrain.webapp.text_source import dispatch as text_dispatch
        return text_dispatch(self, op, args)

    def federation(self, op: str, **args: Any) -> Any:
        """"Join a federation": this tab's model and data as a Flower node (see pytrain.webapp.federation)."""
        from pytrain.webapp.federation import FederationFlow, JoinOptions
        if self.flow is None:
            self.flow = FederationFlow(self.run, self.exports)
        if op == "start":
            return self.flow.start(self._trainer_data, self.model.get("loss"), JoinOptions(**args))
        return self.flow.dispatch(op, args)

    def _trainer_data(self) -> "TrainerData":
        """The training and evaluation samples as the graph takes them, for a Flower trainer."""
        from pytrain.webapp.federation import TrainerData
        self.need_model()
        d = self.need_data()
        if "feeds" in d:   # Flower's trainer takes (x, y) arrays; a text model's feeds are the text room's
            raise WebappError("a \"Your text\" model cannot join a federation here yet: train it in this tab")
        x, y = self.model_x(d["train_x"]), self.targets(d["train_y"])
        if len(d["val_x"]):
            return TrainerData(x, y, self.model_x(d["val_x"]), self.targets(d["val_y"]))
        return TrainerData(x, y, x, y)

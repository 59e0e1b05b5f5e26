"""``pytrain train``: epochs over a dataset, validation, a checkpoint after every epoch.

Each epoch's shuffle is derived from (seed, epoch), and the checkpoint records the position
(epoch, batch within the epoch, step) with the optimizer state, so ``--resume`` after an
interruption reproduces the uninterrupted run's parameters exactly.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np

from pytrain import data
from pytrain.cli import _artifacts as A
from pytrain.cli import _dataset, _metrics
from pytrain.cli._common import CliError, note, say
from pytrain.cli._log import RunLog, check_log_name
from pytrain.cli._progress import Progress
from pytrain.errors import CheckpointError, DivergenceError

DEFAULTS = {"epochs": 10, "batch_size": 32, "lr": None, "scheduler": "none", "warmup": 0, "seed": 0,
            "validation_split": None, "standardize": False}
# settings a resumed run must share with the interrupted one to reproduce it exactly
_FIXED_ON_RESUME = ("batch_size", "lr", "scheduler", "warmup", "seed", "validation_split", "standardize")
EXIT_INTERRUPTED = 130


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train the model in an artifact directory",
                       description="Train, validating and saving DIR/checkpoint after every epoch.")
    p.add_argument("dir", metavar="DIR", help="artifact directory from 'pytrain generate'")
    _dataset.add_data_options(p)
    p.add_argument("--task", choices=data.TASKS,
                   help="checked against the model's loss (ce: classification, else regression)")
    p.add_argument("--epochs", type=int, help="total epochs (default {})".format(DEFAULTS["epochs"]))
    p.add_argument("--batch-size", type=int, help="default {}".format(DEFAULTS["batch_size"]))
    p.add_argument("--lr", type=float, help="learning rate (default: the optimizer's, 1e-3 for "
                                            "Adam/AdamW, 0.01 for SGD)")
    p.add_argument("--scheduler", choices=("none", "linear"),
                   help="linear: warm up, then decay linearly to 0 at the last step")
    p.add_argument("--warmup", type=int, metavar="N", help="warm-up steps of --scheduler linear")
    val = p.add_mutually_exclusive_group()
    val.add_argument("--validation-split", type=float, metavar="F",
                     help="hold out this fraction of --data for validation (stratified by class)")
    val.add_argument("--validation", metavar="FILE", help="separate validation data")
    p.add_argument("--validation-expected", metavar="FILE",
                   help="raw expected file of --validation (raw float32 data)")
    p.add_argument("--metric", choices=_metrics.METRICS,
                   help="validation metric (default: accuracy for ce/bce, mae otherwise)")
    p.add_argument("--standardize", action="store_true", default=None,
                   help="standardise features with the training set's mean/std (kept in the "
                        "checkpoint; eval applies it and export builds it into the model)")
    p.add_argument("--seed", type=int, help="shuffle/split seed (default 0)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted or finished run recorded in DIR/checkpoint")
    p.add_argument("--log", metavar="FILE", help="per-step/per-epoch log, .csv or .jsonl")
    p.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    p.set_defaults(run=run)


def _settings(args: argparse.Namespace, state, where: str) -> Dict[str, Any]:
    """The run's settings: from the command line, or the interrupted run's with --resume."""
    given = {k: getattr(args, k) for k in DEFAULTS}
    if not args.resume:
        out = dict(DEFAULTS)
        out.update({k: v for k, v in given.items() if v is not None})
        return out
    stored = A.read_settings(state)
    if A.P_EPOCH not in state.properties or not stored:
        raise CheckpointError("nothing to resume: {} holds no training progress (run 'pytrain train' "
                              "without --resume first)".format(where))
    if state.properties.get(A.P_NO_RESUME):
        raise CliError("{} holds a run from the web page that the CLI cannot continue exactly: {}. Continue it in "
                       "the page or the widget (they take the run file back), or train on without --resume"
                       .format(where, state.properties[A.P_NO_RESUME]))
    for k in _FIXED_ON_RESUME:
        if given[k] is not None and given[k] != stored.get(k):
            raise CliError("--{} {} differs from the interrupted run's {}; a resumed run must keep "
                           "it (drop the option)".format(k.replace("_", "-"), given[k], stored.get(k)))
    out = dict(DEFAULTS)
    out.update(stored)
    if given["epochs"] is not None:
        out["epochs"] = given["epochs"]
    return out


def _check(settings: Dict[str, Any], log: Optional[str]) -> None:
    if settings["epochs"] < 1:
        raise CliError("--epochs must be at least 1, got {}".format(settings["epochs"]))
    if settings["batch_size"] < 1:
        raise CliError("--batch-size must be at least 1, got {}".format(settings["batch_size"]))
    if settings["lr"] is not None and not (math.isfinite(settings["lr"]) and settings["lr"] > 0):
        raise CliError("--lr must be a positive finite number, got {}".format(settings["lr"]))
    if settings["warmup"] < 0:
        raise CliError("--warmup must be >= 0, got {}".format(settings["warmup"]))
    if settings["seed"] < 0:
        raise CliError("--seed must be >= 0, got {}".format(settings["seed"]))
    if log is not None:
        check_log_name(log)


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def prepare_data(args, art, state, settings, inp, label_spec, task):
    """(train set, validation set or None, standardizer or None, target scaling or None) fitted
    to the model: the training set as the model trains on it (standardised features, targets in
    the units of the run's target scaling), the validation set with standardised features and raw
    targets (it is evaluated through :class:`pytrain.cli._artifacts.TargetScaledModule`).

    ``args.data`` may be bytes (a CSV table): the web app's run file checks with this very
    function that ``pytrain train --resume`` will see its data as the page does.
    """
    out_specs = art.eval_outputs()
    num_classes = None
    if task == "classification" and out_specs and out_specs[0].shape:
        last = out_specs[0].shape[-1]
        num_classes = last if isinstance(last, int) and last > 0 else None
    classes = A.json_property(state, A.P_CLASSES) if args.resume else None
    full = _dataset.fit_to_model(_dataset.load(args.data, args, inp, task, classes), inp,
                                 label_spec, task, num_classes)
    if task == "classification" and len(full) and len(np.unique(full.y)) < 2:
        only = full.y[0] if full.classes is None else full.classes[int(full.y[0])]
        raise CliError("{} holds one class only ({!r}, {} samples): a classifier learns nothing from it; "
                       "add samples of other classes, or train a regression (--task regression)"
                       .format(full.source or args.data, only, len(full)))
    val: Optional[data.Dataset] = None
    train = full
    if settings["validation_split"] is not None:
        tr, va = data.split_indices(len(full), settings["validation_split"], settings["seed"],
                                    stratify=full.y if task == "classification" else None)
        train, val = full.subset(tr), full.subset(va)
    elif args.validation is not None:
        vargs = argparse.Namespace(**vars(args))
        vargs.expected = args.validation_expected
        val = _dataset.fit_to_model(
            _dataset.load(args.validation, vargs, inp, task, full.classes), inp, label_spec, task,
            num_classes)
    elif args.validation_expected is not None:
        raise CliError("--validation-expected needs --validation FILE")
    std = None
    if settings["standardize"]:
        if args.resume and state.properties.get(A.P_STANDARDIZER):
            std = data.Standardizer.from_json(str(state.properties[A.P_STANDARDIZER]))
        else:
            std = data.Standardizer.fit(train.x)
        train = data.Dataset(std.transform(train.x), train.y, train.classes, train.feature_names,
                             train.task, train.source)
        if val is not None:
            val = data.Dataset(std.transform(val.x), val.y, val.classes, val.feature_names,
                               val.task, val.source)
    # a property of the model (the units its output learnt), so new runs on its weights keep it too
    scaling = A.target_scaling(state)
    if scaling is not None:
        if task != "regression":
            raise CliError("the checkpoint scales regression targets ({}) but the model's {} loss trains "
                           "classes".format(A.P_TARGET_SCALING, art.loss_kind(state)))
        train = data.Dataset(train.x, scaling.scale(train.y), train.classes, train.feature_names, train.task,
                             train.source)
    return train, val, std, scaling


class _StopFlag:
    """First Ctrl-C asks the loop to stop after the current step; a second one stops at once."""

    def __init__(self) -> None:
        self.requested = False
        self._installed = False
        self._old: Any = None

    def install(self) -> None:
        import signal  # imported here: the web app imports this module (prepare_data) in Pyodide
        import threading

        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
            self._installed = True

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def uninstall(self) -> None:
        import signal

        if self._installed:
            signal.signal(signal.SIGINT, self._old if self._old is not None else signal.default_int_handler)
            self._installed = False


def run(args: argparse.Namespace) -> int:
    from pytrain.api import CheckpointState, LinearLRScheduler

    art = A.ArtifactDir(args.dir)
    state = art.load_state()
    if getattr(state, "nominal", False):
        raise CheckpointError("{} is a nominal checkpoint (shapes only, no weights); generate the "
                              "artifacts without --nominal to train from the CLI".format(art.checkpoint_path))
    settings = _settings(args, state, art.checkpoint_path)
    _check(settings, args.log)
    data_inputs, label_spec = art.inputs(state)
    if len(data_inputs) != 1:
        raise CliError("the CLI trains models with one data input; this one takes {}".format(
            ", ".join(repr(s.name) for s in data_inputs)))
    inp = data_inputs[0]
    loss_kind = art.loss_kind(state)
    task = art.task(state)
    if args.task is not None and args.task != task and not (loss_kind == "bce"):
        raise CliError("--task {} does not fit the model: its {} loss takes {}".format(
            args.task, loss_kind, "int64 class ids" if task == "classification" else "float targets"))
    metric = _metrics.check_metric(args.metric or _metrics.default_metric(loss_kind), loss_kind)
    reduction = str(state.properties.get(A.P_REDUCTION, "mean"))

    train, val, std, scaling = prepare_data(args, art, state, settings, inp, label_spec, task)
    digest = _digest(train.x, train.y)
    if args.resume:
        stored = A.read_settings(state)
        if stored.get("samples") not in (None, len(train)):
            raise CliError("the training data differs from the interrupted run's ({} training samples now, "
                           "{} then); resume with the same --data and options".format(
                               len(train), stored.get("samples")))
        if stored.get("data_digest") not in (None, digest):
            raise CliError("the training data differs from the interrupted run's ({} samples now, "
                           "{} then); resume with the same --data and options".format(
                               len(train), stored.get("samples", "?")))
    already = state.properties.get(A.P_EPOCH) if not args.resume else None
    settings["samples"] = len(train)
    settings["data_digest"] = digest

    if not args.resume:
        state.optimizer_state = None  # a new run starts with fresh moments and step count
    module, optimizer = art.open(state, seed=int(settings["seed"]))
    if settings["lr"] is None:
        # the optimizer's default, not the checkpoint's current rate (a schedule may have moved it)
        settings["lr"] = art.default_lr()
    base_lr = float(settings["lr"])
    optimizer.set_learning_rate(base_lr)
    bs = int(settings["batch_size"])
    epochs = int(settings["epochs"])
    per_epoch = data.num_batches(len(train), bs)
    start_epoch = int(state.properties.get(A.P_EPOCH, 0)) if args.resume else 0
    first_batch = int(state.properties.get(A.P_EPOCH_STEP, 0)) if args.resume else 0
    step = int(state.properties.get(A.P_STEP, 0)) if args.resume else 0
    scheduler = None
    if settings["scheduler"] == "linear":
        if int(settings["warmup"]) > epochs * per_epoch:
            raise CliError("--warmup {} is longer than the whole run ({} epochs x {} steps = {} "
                           "steps)".format(settings["warmup"], epochs, per_epoch, epochs * per_epoch))
        scheduler = LinearLRScheduler(optimizer, warmup_step_count=int(settings["warmup"]),
                                      total_step_count=epochs * per_epoch, initial_lr=base_lr)
        for _ in range(step):  # replay: the schedule is a function of the step count
            scheduler.step()
    if args.resume and start_epoch >= epochs:
        say("{} already trained {} epoch(s) of {}; nothing to do (raise --epochs to train more)"
            .format(art.checkpoint_path, start_epoch, epochs))
        return 0

    # everything the checkpoint needs besides parameters and optimizer state
    props = state.properties
    props[A.P_SEED] = int(settings["seed"])
    props[A.P_TRAIN] = json.dumps(settings, sort_keys=True)
    props.pop(A.P_NO_RESUME, None)  # this run, made here, the CLI continues
    # a new run must not inherit the previous run's label mapping or standardisation
    if train.classes is not None:
        props[A.P_CLASSES] = json.dumps(train.classes)
    else:
        props.pop(A.P_CLASSES, None)
    if std is not None:
        props[A.P_STANDARDIZER] = std.to_json()
    else:
        props.pop(A.P_STANDARDIZER, None)

    epoch_loss = float(props.get(A.P_EPOCH_LOSS, 0.0)) if args.resume and first_batch else 0.0
    epoch_seen = int(props.get(A.P_EPOCH_SEEN, 0)) if args.resume and first_batch else 0

    def save(epoch: int, batch: int) -> Tuple[int, int]:
        broken = [n for n, p in state.parameters.items()
                  if p.data is not None and p.data.dtype.kind == "f" and not np.isfinite(p.data).all()]
        if broken:  # never replace a good checkpoint with NaN weights
            raise CliError("training diverged: {} holds NaN or infinite values after step {}; {} keeps the last "
                           "good state; try a lower --lr".format(", ".join(broken[:3]) + (" ..." if len(broken) > 3
                                                                                           else ""), step,
                                                                 art.checkpoint_path))
        if batch >= per_epoch:
            epoch, batch = epoch + 1, 0
        props[A.P_EPOCH] = epoch
        props[A.P_EPOCH_STEP] = batch
        props[A.P_STEP] = step
        props[A.P_EPOCH_LOSS] = epoch_loss if batch else 0.0
        props[A.P_EPOCH_SEEN] = epoch_seen if batch else 0
        CheckpointState.save_checkpoint(state, art.checkpoint_path, include_optimizer_state=True)
        return epoch, batch

    def interrupted(epoch: int, batch: int) -> int:
        say("pytrain: interrupted; saved {} at epoch {} + {} of {} batches (step {}). Continue with "
            "--resume.".format(art.checkpoint_path, epoch, batch, per_epoch, step), sys.stderr)
        return EXIT_INTERRUPTED

    log = RunLog(args.log, append=args.resume) if args.log else None
    if already:
        note("{} already holds {} trained epoch(s); starting a new run from its weights with a "
             "fresh optimizer state (--resume continues that run instead)".format(
                 art.checkpoint_path, already))
    progress = Progress(enabled=not args.quiet)
    stop = _StopFlag()
    stop.install()
    pos = (start_epoch, first_batch)
    phase = "idle"
    try:
        for epoch in range(start_epoch, epochs):
            batches = data.batch_indices(data.epoch_order(len(train), int(settings["seed"]), epoch), bs)
            first = first_batch if epoch == start_epoch else 0
            if first == 0:
                epoch_loss, epoch_seen = 0.0, 0
            pos = (epoch, first)
            progress.start("epoch {}/{}".format(epoch + 1, epochs), per_epoch, first)
            t0 = time.monotonic()
            for b in range(first, per_epoch):
                if stop.requested:
                    progress.finish()
                    return interrupted(*save(epoch, b))
                idx = batches[b]
                lr = float(optimizer.get_learning_rate())
                module.train()
                phase = "forward"
                try:
                    loss, _ = _metrics.split_outputs(module(train.x[idx], train.y[idx]))
                except DivergenceError as e:
                    progress.finish()
                    raise CliError("training diverged at epoch {}, step {}: {}; {} keeps the last epoch's "
                                   "weights".format(epoch + 1, step + 1, e, art.checkpoint_path)) from None
                phase = "step"
                optimizer.step()
                module.lazy_reset_grad()
                if scheduler is not None:
                    scheduler.step()
                phase = "idle"
                step += 1
                pos = (epoch, b + 1)
                epoch_loss += loss * _metrics.batch_loss_weight(reduction, len(idx))
                epoch_seen += len(idx)
                if log is not None:
                    log.write({"kind": "step", "epoch": epoch + 1, "step": step, "loss": loss, "lr": lr})
                progress.update(b + 1, loss)
            progress.finish()
            phase = "validate"
            train_loss = epoch_loss / max(1, epoch_seen)
            result = None
            if val is not None:
                judged = module if scaling is None else A.TargetScaledModule(module, scaling)
                result = _metrics.evaluate(judged, val, max(bs, 256), loss_kind, reduction, metric)
            phase = "idle"
            save(epoch, per_epoch)
            pos = (epoch + 1, 0)
            seconds = time.monotonic() - t0
            line = "epoch {}/{}  loss {:.4f}".format(epoch + 1, epochs, train_loss)
            if result is not None:
                line += "  " + _metrics.describe(result, "val ")
            say(line + "  ({:.1f} s)".format(seconds))
            if log is not None:
                row: Dict[str, Any] = {"kind": "epoch", "epoch": epoch + 1, "step": step,
                                       "train_loss": train_loss, "seconds": round(seconds, 3)}
                if result is not None:
                    row["val_loss"] = result["loss"]
                    for m in _metrics.METRICS:
                        if m in result:
                            row["val_" + m] = result[m]
                log.write(row)
            if stop.requested and epoch + 1 < epochs:
                return interrupted(epoch + 1, 0)
    except KeyboardInterrupt:
        progress.finish()
        if phase == "step":
            # parameters may be half-updated: keep the last checkpoint on disk as it is
            say("pytrain: interrupted during an optimizer step; {} keeps the last saved state. "
                "Continue with --resume.".format(art.checkpoint_path), sys.stderr)
            return EXIT_INTERRUPTED
        module.lazy_reset_grad()
        return interrupted(*save(*pos))
    finally:
        stop.uninstall()
        if log is not None:
            log.close()
    say("saved {} (epoch {}, step {})".format(art.checkpoint_path, epochs, step))
    return 0

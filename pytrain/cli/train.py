"""``pytrain train``: epochs over a dataset, validation, a checkpoint after every epoch.

Each epoch's shuffle is derived from (seed, epoch), and the checkpoint records the position
(epoch, batch within the epoch, step) with the optimizer state, so ``--resume`` after an
interruption reproduces the uninterrupted run's parameters exactly.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

from pytrain import data
from pytrain.cli._dataset import add_data_options, add_text_options
from pytrain.cli._common import CliError, note, say
from pytrain.cli._log import RunLog, check_log_name
from pytrain.cli._progress import Progress
from pytrain.cli.evaluate import describe
from pytrain.errors import CheckpointError, DivergenceError
from pytrain.run import properties as P
from pytrain.run.artifact_dir import ArtifactDir
from pytrain.run.dataset import DataRequest, digest, prepare_data
from pytrain.run.evaluate import METRICS, batch_loss_weight, check_metric, default_metric, evaluate_dataset
from pytrain.run.loop import Position, epoch_batches, steps
from pytrain.run.scaling import TargetScaledModule
from pytrain.run.text import TextRequest, prepare_text
from pytrain.text.hub_inputs import INT_TYPES

DEFAULTS = {"epochs": 10, "batch_size": 32, "lr": None, "scheduler": "none", "warmup": 0, "seed": 0,
            "validation_split": None, "standardize": False}
# settings a resumed run must share with the interrupted one to reproduce it exactly
_FIXED_ON_RESUME = ("batch_size", "lr", "scheduler", "warmup", "seed", "validation_split", "standardize")
EXIT_INTERRUPTED = 130


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train the model in an artifact directory",
                       description="Train, validating and saving DIR/checkpoint after every epoch.")
    p.add_argument("dir", metavar="DIR", help="artifact directory from 'pytrain generate'")
    p.epilog = ("text: --text FILE --tokenizer tokenizer.json trains a causal LM (generated with --loss clm) on "
                "blocks of the file's tokens; --text-csv FILE a classifier on texts and labels")
    add_data_options(p, required=False)
    add_text_options(p)
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
    p.add_argument("--metric", choices=METRICS,
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
    stored = P.read_settings(state)
    if P.P_EPOCH not in state.properties or not stored:
        raise CheckpointError("nothing to resume: {} holds no training progress (run 'pytrain train' "
                              "without --resume first)".format(where))
    if state.properties.get(P.P_NO_RESUME):
        raise CliError("{} holds a run from the web page that the CLI cannot continue exactly: {}. Continue it in "
                       "the page or the widget (they take the run file back), or train on without --resume"
                       .format(where, state.properties[P.P_NO_RESUME]))
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


class _StopFlag:
    """First Ctrl-C asks the loop to stop after the current step; a second one stops at once."""

    def __init__(self) -> None:
        self.requested = False
        self._installed = False
        self._old: Any = None

    def install(self) -> None:
        import signal  # imported here: only a run in the main thread of a terminal needs it
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


class _Data(NamedTuple):
    """A run's data: training and validation sets, the standardizer and target scaling fitted on them, the
    validation metric, and a text model's feeds (None: a batch is (x, y))."""
    train: Any
    val: Any
    std: Any
    scaling: Any
    metric: Optional[str]
    feeds: Any


def run(args: argparse.Namespace) -> int:
    art = ArtifactDir(args.dir)
    state = art.load_state()
    if getattr(state, "nominal", False):
        raise CheckpointError("{} is a nominal checkpoint (shapes only, no weights); generate the "
                              "artifacts without --nominal to train from the CLI".format(art.checkpoint_path))
    settings = _settings(args, state, art.checkpoint_path)
    _check(settings, args.log)
    text = TextRequest.of(args)
    _check_data_options(args, art, state, text)
    got = _run_data(args, art, state, settings, text)
    _check_same_data(args, state, got.train)
    already = state.properties.get(P.P_EPOCH) if not args.resume else None
    settings["samples"] = len(got.train)
    settings["data_digest"] = digest(got.train.x, got.train.y)
    job = _Training(args, art, state, settings, got)
    if args.resume and job.at.epoch >= job.epochs:
        say("{} already trained {} epoch(s) of {}; nothing to do (raise --epochs to train more)"
            .format(art.checkpoint_path, job.at.epoch, job.epochs))
        return 0
    _record_run(state.properties, settings, got)
    if already:
        note("{} already holds {} trained epoch(s); starting a new run from its weights with a "
             "fresh optimizer state (--resume continues that run instead)".format(
                 art.checkpoint_path, already))
    return job.run()


def _check_data_options(args: argparse.Namespace, art: ArtifactDir, state: Any, text: Optional[TextRequest]) -> None:
    """The data options fit the model: --data for a table's, --text/--text-csv with a tokenizer for a text model's."""
    if text is not None and args.data is not None:
        raise CliError("give --data (a table, arrays or images) or --text/--text-csv (text), not both")
    if text is None and art.text_inputs() is not None:
        raise CliError("{} holds a causal language model (loss {}, no label input): it trains on text; give --text "
                       "FILE --tokenizer tokenizer.json{}".format(args.dir, art.loss_kind(state),
                                                                  ", not --data" if args.data else ""))
    if text is None and (args.tokenizer or args.block_size or args.text_column or args.label_column
                         or args.model_config):
        raise CliError("--tokenizer, --block-size, --text-column, --label-column and --model-config go with --text or "
                       "--text-csv")
    if text is None and args.data is None:
        raise CliError("give --data FILE (or --text/--text-csv FILE with --tokenizer tokenizer.json for a text model)")


def _run_data(args: argparse.Namespace, art: ArtifactDir, state: Any, settings: Dict[str, Any],
              text: Optional[TextRequest]) -> _Data:
    """The run's data: a table's (:func:`_table_data`) or a text's, encoded by the model's tokenizer."""
    loss_kind = art.loss_kind(state)
    if text is None:
        return _Data(*_table_data(args, art, state, settings, loss_kind), None)
    if args.validation is not None or settings["standardize"]:
        raise CliError("--validation and --standardize take a table; hold out part of the text with "
                       "--validation-split F")
    prepared = prepare_text(text.sized(settings.get("block_size")), art, state,
                            settings, P.json_property(state, P.P_CLASSES) if args.resume else None)
    settings["block_size"] = prepared.length
    for line in prepared.notes:
        note(line)
    metric = None if loss_kind == "clm" else check_metric(args.metric or default_metric(loss_kind), loss_kind)
    return _Data(prepared.train, prepared.val, None, None, metric, prepared.feeds)


def _check_same_data(args: argparse.Namespace, state: Any, train: Any) -> None:
    """A resumed run trains on the interrupted run's data (its sample count and digest)."""
    if not args.resume:
        return
    stored = P.read_settings(state)
    if stored.get("samples") not in (None, len(train)):
        raise CliError("the training data differs from the interrupted run's ({} training samples now, "
                       "{} then); resume with the same --data and options".format(len(train), stored.get("samples")))
    if stored.get("data_digest") not in (None, digest(train.x, train.y)):
        raise CliError("the training data differs from the interrupted run's ({} samples now, "
                       "{} then); resume with the same --data and options".format(
                           len(train), stored.get("samples", "?")))


def _record_run(props: Any, settings: Dict[str, Any], got: _Data) -> None:
    """Everything the checkpoint needs besides parameters and optimizer state."""
    props[P.P_SEED] = int(settings["seed"])
    props[P.P_TRAIN] = json.dumps(settings, sort_keys=True)
    props.pop(P.P_NO_RESUME, None)  # this run, made here, the CLI continues
    # a new run must not inherit the previous run's label mapping or standardisation
    if got.train.classes is not None:
        props[P.P_CLASSES] = json.dumps(got.train.classes)
    else:
        props.pop(P.P_CLASSES, None)
    if got.std is not None:
        props[P.P_STANDARDIZER] = got.std.to_json()
    else:
        props.pop(P.P_STANDARDIZER, None)


class _Training:
    """One ``pytrain train`` run from its position: the steps, each epoch's validation and checkpoint, the log,
    and what Ctrl-C leaves behind."""

    def __init__(self, args: argparse.Namespace, art: ArtifactDir, state: Any, settings: Dict[str, Any],
                 got: _Data) -> None:
        from pytrain.device.api import LinearLRScheduler

        self.args, self.art, self.state, self.settings, self.data = args, art, state, settings, got
        if not args.resume:
            state.optimizer_state = None  # a new run starts with fresh moments and step count
        self.module, self.optimizer = art.open(state, seed=int(settings["seed"]))
        if settings["lr"] is None:
            # the optimizer's default, not the checkpoint's current rate (a schedule may have moved it)
            settings["lr"] = art.default_lr()
        base_lr = float(settings["lr"])
        self.optimizer.set_learning_rate(base_lr)
        self.bs, self.epochs = int(settings["batch_size"]), int(settings["epochs"])
        self.per_epoch = data.num_batches(len(got.train), self.bs)
        props = state.properties
        self.at = Position(props.get(P.P_EPOCH, 0), props.get(P.P_EPOCH_STEP, 0), props.get(P.P_STEP, 0)) \
            if args.resume else Position()
        self.scheduler = None
        if settings["scheduler"] == "linear":
            total = self.epochs * self.per_epoch
            if int(settings["warmup"]) > total:
                raise CliError("--warmup {} is longer than the whole run ({} epochs x {} steps = {} "
                               "steps)".format(settings["warmup"], self.epochs, self.per_epoch, total))
            self.scheduler = LinearLRScheduler(self.optimizer, warmup_step_count=int(settings["warmup"]),
                                               total_step_count=total, initial_lr=base_lr)
            for _ in range(self.at.step):  # replay: the schedule is a function of the step count
                self.scheduler.step()
        self.reduction = str(props.get(P.P_REDUCTION, "mean"))
        self.loss_kind = art.loss_kind(state)
        self.sums = _EpochLoss()
        if args.resume and self.at.epoch_step:
            self.sums.loss, self.sums.seen = float(props.get(P.P_EPOCH_LOSS, 0.0)), int(props.get(P.P_EPOCH_SEEN, 0))
        self.log: Optional[RunLog] = None
        self.progress = Progress(enabled=not args.quiet)

    def save(self) -> None:
        """The checkpoint at this position (refused when a parameter is not finite)."""
        from pytrain.device.api import CheckpointState

        at, props = self.at, self.state.properties
        broken = [n for n, p in self.state.parameters.items()
                  if p.data is not None and p.data.dtype.kind == "f" and not np.isfinite(p.data).all()]
        if broken:  # never replace a good checkpoint with NaN weights
            raise CliError("training diverged: {} holds NaN or infinite values after step {}; {} keeps the last "
                           "good state; try a lower --lr".format(", ".join(broken[:3]) + (" ..." if len(broken) > 3
                                                                                           else ""), at.step,
                                                                 self.art.checkpoint_path))
        props[P.P_EPOCH] = at.epoch
        props[P.P_EPOCH_STEP] = at.epoch_step
        props[P.P_STEP] = at.step
        props[P.P_EPOCH_LOSS] = self.sums.loss if at.epoch_step else 0.0
        props[P.P_EPOCH_SEEN] = self.sums.seen if at.epoch_step else 0
        CheckpointState.save_checkpoint(self.state, self.art.checkpoint_path, include_optimizer_state=True)

    def interrupted(self) -> int:
        at = self.at
        say("pytrain: interrupted; saved {} at epoch {} + {} of {} batches (step {}). Continue with "
            "--resume.".format(self.art.checkpoint_path, at.epoch, at.epoch_step, self.per_epoch, at.step), sys.stderr)
        return EXIT_INTERRUPTED

    def fetch(self, idx: np.ndarray) -> Tuple[np.ndarray, ...]:
        train, feeds = self.data.train, self.data.feeds
        return feeds(train.x[idx], train.y[idx]) if feeds is not None else (train.x[idx], train.y[idx])

    def run(self) -> int:
        """Train to the last epoch; returns the exit code (0, or EXIT_INTERRUPTED after Ctrl-C)."""
        args, at = self.args, self.at
        self.log = RunLog(args.log, append=args.resume) if args.log else None
        stop = _StopFlag()
        stop.install()
        n, seed = len(self.data.train), int(self.settings["seed"])
        plan = steps(self.module, self.optimizer, at, lambda epoch: epoch_batches(n, seed, epoch, self.bs),
                     self.fetch, self.epochs, self.scheduler)
        try:
            code = self._epochs(plan, stop)
            if code is not None:
                return code
        except KeyboardInterrupt:
            self.progress.finish()
            if at.phase == "step":
                # parameters may be half-updated: keep the last checkpoint on disk as it is
                say("pytrain: interrupted during an optimizer step; {} keeps the last saved state. "
                    "Continue with --resume.".format(self.art.checkpoint_path), sys.stderr)
                return EXIT_INTERRUPTED
            self.module.lazy_reset_grad()
            self.save()
            return self.interrupted()
        finally:
            stop.uninstall()
            if self.log is not None:
                self.log.close()
        say("saved {} (epoch {}, step {})".format(self.art.checkpoint_path, self.epochs, at.step))
        return 0

    def _epochs(self, plan: Any, stop: _StopFlag) -> Optional[int]:
        """The steps until the last epoch ends; an exit code when Ctrl-C stopped them, else None."""
        at, sums, progress = self.at, self.sums, self.progress
        epoch_started = False
        t0 = time.monotonic()
        while at.epoch < self.epochs:
            if stop.requested:
                progress.finish()
                self.save()
                return self.interrupted()
            if not epoch_started:
                if at.epoch_step == 0:
                    sums.loss, sums.seen = 0.0, 0
                progress.start("epoch {}/{}".format(at.epoch + 1, self.epochs), self.per_epoch, at.epoch_step)
                t0 = time.monotonic()
                epoch_started = True
            try:
                st = next(plan, None)
            except DivergenceError as e:
                progress.finish()
                raise CliError("training diverged at epoch {}, step {}: {}; {} keeps the last epoch's "
                               "weights".format(at.epoch + 1, at.step + 1, e, self.art.checkpoint_path)) from None
            if st is None:   # no batch at all (an empty training set)
                break
            sums.loss += st.loss * batch_loss_weight(self.reduction, st.samples)
            sums.seen += st.samples
            if self.log is not None:
                self.log.write({"kind": "step", "epoch": st.epoch + 1, "step": st.step, "loss": st.loss, "lr": st.lr})
            progress.update(st.batch + 1, st.loss)
            if not st.epoch_end:
                continue
            epoch_started = False
            progress.finish()
            self._epoch_end(st, t0)
            if stop.requested and at.epoch < self.epochs:
                return self.interrupted()
        return None

    def _epoch_end(self, st: Any, t0: float) -> None:
        """Validate, save the checkpoint, say and log the epoch's numbers (``t0``: when the epoch started)."""
        got = self.data
        train_loss = self.sums.loss / max(1, self.sums.seen)
        result = None
        if got.val is not None:
            judged = self.module if got.scaling is None else TargetScaledModule(self.module, got.scaling)
            result = evaluate_dataset(judged, got.val, max(self.bs, 256), self.loss_kind, self.reduction, got.metric,
                                      prepare=got.feeds)
        self.save()
        seconds = time.monotonic() - t0
        line = "epoch {}/{}  loss {:.4f}".format(st.epoch + 1, self.epochs, train_loss)
        if result is not None:
            line += "  " + describe(result, "val ")
        say(line + "  ({:.1f} s)".format(seconds))
        if self.log is not None:
            row: Dict[str, Any] = {"kind": "epoch", "epoch": st.epoch + 1, "step": st.step,
                                   "train_loss": train_loss, "seconds": round(seconds, 3)}
            if result is not None:
                row["val_loss"] = result["loss"]
                for m in METRICS:
                    if m in result:
                        row["val_" + m] = result[m]
            self.log.write(row)


def _table_data(args: argparse.Namespace, art: ArtifactDir, state: Any, settings: Dict[str, Any],
                loss_kind: str) -> Tuple[Any, Any, Any, Any, str]:
    """(train, val, standardizer, target scaling, metric) of --data for a model with one data input."""
    data_inputs, label_spec = art.inputs(state)
    if len(data_inputs) != 1:
        ints = all(s.elem_type in INT_TYPES for s in data_inputs)
        raise CliError("the CLI trains models with one data input; this one takes {}{}".format(
            ", ".join(repr(s.name) for s in data_inputs),
            " (token ids: train it on text, --text-csv FILE --tokenizer tokenizer.json)" if ints else ""))
    task = art.task(state)
    if args.task is not None and args.task != task and not (loss_kind == "bce"):
        raise CliError("--task {} does not fit the model: its {} loss takes {}".format(
            args.task, loss_kind, "int64 class ids" if task == "classification" else "float targets"))
    metric = check_metric(args.metric or default_metric(loss_kind), loss_kind)
    train, val, std, scaling = prepare_data(DataRequest.of(args), art, state, settings, data_inputs[0], label_spec,
                                            task)
    return train, val, std, scaling, metric


class _EpochLoss:
    """The running sum of the current epoch's batch losses (as sums over samples), for its mean."""

    def __init__(self) -> None:
        self.loss = 0.0
        self.seen = 0

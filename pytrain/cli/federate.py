"""``pytrain federate``: join a Flower federation (a SuperLink's Fleet API) as a node that trains
DIR's model on local data. Only parameters, example counts and loss/accuracy leave the machine.

The server's ConfigRecord sets each round's local epochs, batch size and learning rate
(``local-epochs``, ``batch-size``, ``lr``); the options here are the defaults when it does not.
After every training round DIR/checkpoint holds the model this node sent.
"""
from __future__ import annotations

import argparse
import time

from pytrain import data
from pytrain.cli._dataset import add_data_options
from pytrain.cli._common import CliError, note, say
from pytrain.run.artifact_dir import ArtifactDir

#: seconds a node that trained its last round waits for that round's evaluate message
EVALUATE_WAIT = 60.0


def add_parser(sub) -> None:
    p = sub.add_parser("federate", help="join a Flower federation and train on local data",
                       description="Join the Flower SuperLink at --superlink (its Fleet API, flwr 1.40+) "
                                   "and answer its train and evaluate messages with DIR's model.")
    p.add_argument("dir", metavar="DIR", help="artifact directory from 'pytrain generate'")
    p.add_argument("--superlink", required=True, metavar="URL",
                   help="the SuperLink's Fleet API, e.g. http://127.0.0.1:9092 (flower-superlink --insecure)")
    add_data_options(p)
    p.add_argument("--validation-split", type=float, metavar="F",
                   help="hold out this fraction of --data for the evaluate messages (default: evaluate "
                        "on the training data)")
    p.add_argument("--epochs", type=int, default=1, help="local epochs when the server does not say (1)")
    p.add_argument("--batch-size", type=int, default=32, help="when the server does not say (32)")
    p.add_argument("--lr", type=float, help="when the server does not say (default: the optimizer's)")
    p.add_argument("--seed", type=int, default=0, help="shuffle/split seed (default 0)")
    p.add_argument("--heartbeat", type=float, default=30.0, metavar="S",
                   help="heartbeat interval in seconds, 10..1800 (default 30)")
    p.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between polls (default 1)")
    p.add_argument("--rounds", type=int, metavar="N",
                   help="leave after N training rounds (and the Nth round's evaluate message, once the "
                        "SuperLink has handed the replies to the ServerApp)")
    p.add_argument("--timeout", type=float, metavar="S", help="leave after S seconds")
    p.add_argument("--local-dp", metavar="CLIP,SENSITIVITY,EPSILON,DELTA",
                   help="local differential privacy as Flower's LocalDpMod: clip each update to L2 norm CLIP, "
                        "then add Gaussian noise of std SENSITIVITY*sqrt(2 ln(1.25/DELTA))/EPSILON")
    p.add_argument("--require-clipping", action="store_true",
                   help="refuse train messages without the 'clipping_norm' a ServerApp wrapped in "
                        "DifferentialPrivacyClientSideFixedClipping sends (a node always clips to it when sent)")
    p.add_argument("--no-save", action="store_true", help="do not write DIR/checkpoint after each round")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pytrain.device.api import CheckpointState
    from pytrain.cli.evaluate import prepared_data
    from pytrain.flower import FlowerNode, PytrainTrainer
    from pytrain.flower.mods import Answer, Handler, Task, privacy_mods
    from pytrain.flower.trainer import LocalTraining

    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            raise CliError("--{} must be at least 1".format(name.replace("_", "-")))
    if args.rounds is not None and args.rounds < 1:
        raise CliError("--rounds must be at least 1")
    if not args.superlink.startswith(("http://", "https://")):
        raise CliError("--superlink takes a URL such as http://127.0.0.1:9092, got {!r}".format(args.superlink))
    local_dp = _local_dp(args.local_dp)
    art = ArtifactDir(args.dir)
    state = art.load_state()
    if getattr(state, "nominal", False):
        raise CliError("{} is a nominal checkpoint (no weights); generate the artifacts without --nominal"
                       .format(art.checkpoint_path))
    ds = prepared_data(args, art, state)
    train, val = ds, ds
    if args.validation_split is not None:
        tr, va = data.split_indices(len(ds), args.validation_split, args.seed,
                                    stratify=ds.y if ds.task == "classification" else None)
        train, val = ds.subset(tr), ds.subset(va)
    module, optimizer = art.open(state, seed=args.seed)
    lr = args.lr if args.lr is not None else art.default_lr()
    optimizer.set_learning_rate(lr)
    trainer = PytrainTrainer(module, optimizer, train.x, train.y, val.x, val.y,
                             LocalTraining(args.epochs, args.batch_size, lr, args.seed, art.loss_kind(state)))
    log = (lambda s: None) if args.quiet else say
    trained, evaluated, evaluated_before_last, last = [0], [0], [0], [time.monotonic()]

    def count_and_save(task: Task, call_next: Handler) -> Answer:
        # outermost: the checkpoint saved holds what was sent (after privacy)
        out = call_next(task)
        if task.message_type == "train":
            trained[0] += 1
            evaluated_before_last[0] = evaluated[0]
            if not args.no_save:
                CheckpointState.save_checkpoint(state, art.checkpoint_path, include_optimizer_state=True)
        else:
            evaluated[0] += 1
        last[0] = time.monotonic()
        return out
    node = FlowerNode(args.superlink, trainer, heartbeat_interval=args.heartbeat, poll_interval=args.poll,
                      log=log, mods=[count_and_save] + privacy_mods(local_dp, args.require_clipping))

    def done() -> bool:
        # after the Nth training round, stay for its evaluate message (or EVALUATE_WAIT s without one);
        # run() then leaves only once the ServerApp has taken the replies
        return args.rounds is not None and trained[0] >= args.rounds and (
            evaluated[0] > evaluated_before_last[0] or time.monotonic() - last[0] > EVALUATE_WAIT)
    log("{} samples for training, {} for evaluation; joining {}".format(len(train), len(val), args.superlink))
    if local_dp is not None:
        log("local DP: each update clipped to L2 norm {:g}, Gaussian noise std {:.4g}".format(
            local_dp.clipping_norm, local_dp.noise_std))
    t0 = time.monotonic()
    try:
        node.run(stop=done, timeout=args.timeout)
    except KeyboardInterrupt:
        note("interrupted: left the federation")  # run() left before the exception got here
        return 130
    log("left after {} training round(s) in {:.0f} s".format(trained[0], time.monotonic() - t0))
    return 0


def _local_dp(spec):
    """``--local-dp CLIP,SENSITIVITY,EPSILON,DELTA`` as a LocalDp, or None."""
    if spec is None:
        return None
    from pytrain.errors import InputError
    from pytrain.flower.privacy import LocalDp

    parts = spec.split(",")
    try:
        values = [float(v) for v in parts]
    except ValueError:
        values = []
    if len(values) != 4:
        raise CliError("--local-dp takes four numbers CLIP,SENSITIVITY,EPSILON,DELTA (e.g. 1.0,1.0,2.0,1e-5), "
                       "got {!r}".format(spec))
    try:
        return LocalDp(*values)
    except InputError as e:
        raise CliError("--local-dp: {}".format(e))

"""How far pytrain's Flower nodes go on this machine (a bench, not a test).

    python bench/flower_scale.py bytes            # bytes per round per node: digits MLP, page MLP, page CNN
    python bench/flower_scale.py scale 10 50      # rounds per minute with 10 and 50 native nodes
    python bench/flower_scale.py sim 100 500      # the same with virtual SuperNodes (Simulation Engine, Ray)

A real flwr 1.42 SuperLink (build/venv-flwr, made by tests/flower/test_flower.py's helper when missing) on
loopback, the FedAvg ServerApp of tests/flower/flower_app, and pytrain nodes in threads of this process;
for ``sim``, a ``flower-superlink --simulation`` running pytrain's ClientApp (pytrainfl.pytrain_client) as
virtual SuperNodes on Ray, one CPU each, and the peak memory (RSS) of the SuperLink's whole process
tree (SuperLink, ServerApp, simulation, Ray and its workers) sampled every 0.5 s.
Bytes are request and response bodies (protobuf) as the node's FleetClient counts them; HTTP
headers (about 450 bytes a request, the signature headers included) are not in them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path[:0] = [str(ROOT / "tests" / "flower"), str(ROOT / "tests" / "helpers")]

from pytrain import artifacts, models  # noqa: E402
from pytrain.flower import FlowerNode  # noqa: E402
import test_flower as T  # noqa: E402  (the SuperLink and venv helpers)
import test_simulation as S  # noqa: E402  (the simulation app)

MODELS = {
    "digits MLP 64-32-10": (lambda: models.mlp(64, [32], 10), (64,)),
    "page MLP 784-128-10": (lambda: models.mlp(784, [128], 10), (784,)),
    "page CNN 1x28x28": (lambda: models.cnn((1, 28, 28), 10), (1, 28, 28)),
}


def federation(workdir: Path, model, sample_shape, n_nodes: int, rounds: int, samples: int = 64,
               poll: float = 0.5):
    """Run FedAvg with ``n_nodes`` pytrain nodes; returns (nodes, seconds per round list)."""
    venv = T.ensure_flwr_venv() if hasattr(T, "ensure_flwr_venv") else T.VENV
    arts = artifacts.generate_artifacts(model, optimizer=artifacts.SGD(), additional_output_names=["output"])
    rng = np.random.RandomState(0)
    link = T.SuperLink(venv, workdir / "home").start()
    stop = threading.Event()
    nodes, threads = [], []
    out = workdir / "out"
    try:
        init = workdir / "init.npz"
        for k in range(n_nodes):
            x = rng.rand(samples, *sample_shape).astype(np.float32)
            y = rng.randint(0, 10, samples).astype(np.int64)
            t = T.make_trainer(arts, x, y, seed=k)
            if k == 0:
                np.savez(str(init), **t.get_parameters())
            node = FlowerNode(link.url, t, heartbeat_interval=30, poll_interval=poll)
            node.join()
            nodes.append(node)
            threads.append(threading.Thread(target=node.run, kwargs={"stop": stop.is_set, "timeout": 1800},
                                            daemon=True))
        for th in threads:
            th.start()
        link.run_app(out, init, **{"num-nodes": n_nodes, "num-server-rounds": rounds, "local-epochs": 1,
                                   "round-timeout": 600.0})
        T.wait_until(lambda: (out / "result.json").exists(), 600 + 60 * rounds, "the run", link.proc, link.log)
        result = json.loads((out / "result.json").read_text())
        if "error" in result:
            raise RuntimeError(result["error"])
        stamps = [os.path.getmtime(str(out / ("round_%d.npz" % r))) for r in range(rounds + 1)]
        return nodes, list(np.diff(stamps))
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=60)
        link.stop()


def measure_bytes(rounds: int = 3) -> None:
    print("| model | parameters | sent per round | received per round | reply objects |")
    print("|---|---|---|---|---|")
    for name, (make, shape) in MODELS.items():
        model = make()
        work = Path(tempfile.mkdtemp(prefix="flbytes"))
        try:
            nodes, _ = federation(work, model, shape, n_nodes=2, rounds=rounds)
        finally:
            shutil.rmtree(str(work), ignore_errors=True)
        n_params = sum(int(np.prod(p.shape)) for p in nodes[0].trainer._params.values())
        sent = np.mean([n.fleet.bytes_sent for n in nodes]) / rounds
        recv = np.mean([n.fleet.bytes_received for n in nodes]) / rounds
        print("| %s | %d (%.1f KiB float32) | %.1f KiB | %.1f KiB | %s |" % (
            name, n_params, n_params * 4 / 1024, sent / 1024, recv / 1024,
            "one train reply + one evaluate reply"))


def measure_scale(counts, rounds: int = 3) -> None:
    print("| nodes | seconds per round (train + evaluate) | rounds per minute |")
    print("|---|---|---|")
    make, shape = MODELS["digits MLP 64-32-10"]
    for n in counts:
        work = Path(tempfile.mkdtemp(prefix="flscale"))
        try:
            _, per_round = federation(work, make(), shape, n_nodes=n, rounds=rounds,
                                      poll=0.5 if n <= 10 else 1.0)
        finally:
            shutil.rmtree(str(work), ignore_errors=True)
        print("| %d | %s | %.1f |" % (n, ", ".join("%.1f" % s for s in per_round), 60.0 / np.mean(per_round)))


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (Linux /proc)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    total = 0
    for p in tree:
        try:
            with open("/proc/%d/statm" % p) as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    return total


def simulation(workdir: Path, n_nodes: int, rounds: int, samples: int = 64):
    """FedAvg over ``n_nodes`` virtual SuperNodes; returns (seconds per round, seconds from
    ``flwr run`` to the result, peak RSS bytes)."""
    import time
    make, shape = MODELS["digits MLP 64-32-10"]
    arts = artifacts.generate_artifacts(make(), optimizer=artifacts.SGD(), additional_output_names=["output"])
    rng = np.random.RandomState(0)
    parts = [(rng.rand(samples, *shape).astype(np.float32), rng.randint(0, 10, samples).astype(np.int64))
             for _ in range(n_nodes)]
    S.write_parts(workdir, arts, parts)
    init = workdir / "init.npz"
    np.savez(str(init), **T.make_trainer(arts, *parts[0]).get_parameters())
    link = T.SuperLink(T.ensure_flwr_venv(), workdir / "home", simulation=True).start()
    out, peak, done = workdir / "out", [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], tree_rss(link.proc.pid))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        t0 = time.monotonic()
        link.run_app(out, init, app=S.simulation_app(workdir),
                     federation={"num-supernodes": n_nodes, "client-resources-num-cpus": 1},
                     **{"num-nodes": n_nodes, "num-server-rounds": rounds, "local-epochs": 1,
                        "round-timeout": 1800.0, "sim-dir": str(workdir)})
        T.wait_until(lambda: (out / "result.json").exists(), 600 + 120 * rounds, "the run", link.proc, link.log)
        wall = time.monotonic() - t0
        result = json.loads((out / "result.json").read_text())
        if "error" in result:
            raise RuntimeError(result["error"])
        stamps = [os.path.getmtime(str(out / ("round_%d.npz" % r))) for r in range(rounds + 1)]
        return list(np.diff(stamps)), wall, peak[0]
    finally:
        done.set()
        sampler.join(timeout=5)
        link.stop()


def measure_simulation(counts, rounds: int = 3) -> None:
    print("| virtual SuperNodes | seconds per round (train + evaluate) | rounds per minute after round 1 | "
          "flwr run to result | peak memory (RSS) |")
    print("|---|---|---|---|---|")
    for n in counts:
        work = Path(tempfile.mkdtemp(prefix="flsim"))
        try:
            per_round, wall, peak = simulation(work, n, rounds)
        finally:
            shutil.rmtree(str(work), ignore_errors=True)
        # round 1 includes starting Ray and its actors
        print("| %d | %s | %.1f | %.0f s | %.2f GiB |" % (n, ", ".join("%.1f" % s for s in per_round),
                                                       60.0 / np.mean(per_round[1:]), wall, peak / 2 ** 30))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("bytes", "scale", "sim"))
    ap.add_argument("counts", nargs="*", type=int, default=[10, 50])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.what == "bytes":
        measure_bytes(args.rounds)
    elif args.what == "sim":
        measure_simulation(args.counts, args.rounds)
    else:
        measure_scale(args.counts, args.rounds)


if __name__ == "__main__":
    main()

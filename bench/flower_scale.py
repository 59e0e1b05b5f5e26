"""How far pytrain's Flower nodes go on this machine (a bench, not a test).

    python bench/flower_scale.py bytes            # bytes per round per node: digits MLP, page MLP, page CNN
    python bench/flower_scale.py scale 10 50      # rounds per minute with 10 and 50 native nodes
    python bench/flower_scale.py scale 200 --poll 2   # ... with the nodes polling every 2 s
    python bench/flower_scale.py sim 100 500      # the same with virtual SuperNodes (Simulation Engine, Ray)

A real flwr 1.42 SuperLink (build/venv-flwr, made by tests/flower/test_flower.py's helper when missing) on
loopback, the FedAvg ServerApp of tests/flower/flower_app, and pytrain nodes in threads of this process;
for ``sim``, a ``flower-superlink --simulation`` running pytrain's ClientApp (pytrainfl.pytrain_client) as
virtual SuperNodes on Ray, one CPU each, and the peak memory (RSS) of the SuperLink's whole process
tree (SuperLink, ServerApp, simulation, Ray and its workers) sampled every 0.5 s.
``scale`` also counts the nodes' requests (by route) and the CPU seconds of this process (the nodes)
and of the SuperLink's process tree (SuperLink and ServerApp) per round.
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
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path[:0] = [str(ROOT / "tests" / "flower"), str(ROOT / "tests" / "helpers")]

from pytrain.generator import artifacts, models  # noqa: E402
from pytrain.flower import FlowerNode, HttpTransport  # noqa: E402
import test_flower as T  # noqa: E402  (the SuperLink and venv helpers)
import test_simulation as S  # noqa: E402  (the simulation app)

MODELS = {
    "digits MLP 64-32-10": (lambda: models.mlp(64, [32], 10), (64,)),
    "page MLP 784-128-10": (lambda: models.mlp(784, [128], 10), (784,)),
    "page CNN 1x28x28": (lambda: models.cnn((1, 28, 28), 10), (1, 28, 28)),
}


class Counted:
    """Requests and the seconds spent in them, over the transports of all nodes (:meth:`wrap`)."""

    def __init__(self) -> None:
        self.lock, self.requests, self.seconds, self.routes = threading.Lock(), 0, 0.0, {}

    def wrap(self, inner):
        def send(url, body, headers, timeout):
            t0 = time.monotonic()
            try:
                return inner(url, body, headers, timeout)
            finally:
                with self.lock:
                    self.requests += 1
                    self.seconds += time.monotonic() - t0
                    route = url.rsplit("/", 1)[-1]
                    self.routes[route] = self.routes.get(route, 0) + 1
        return send


def tree_cpu(root: int, seen: dict) -> None:
    """Note in ``seen`` (pid -> CPU seconds) the user + system time of ``root`` and its descendants."""
    for p in tree_pids(root):
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            seen[p] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass


def federation(workdir: Path, model, sample_shape, n_nodes: int, rounds: int, samples: int = 64,
               poll: float = 0.5, stats: "dict | None" = None):
    """Run FedAvg with ``n_nodes`` pytrain nodes; returns (nodes, seconds per round list). ``stats``
    gets the nodes' requests and seconds in them, and the CPU seconds of this process and of the
    SuperLink's process tree (SuperLink and ServerApp), from ``flwr run`` to the result."""
    venv = T.ensure_flwr_venv() if hasattr(T, "ensure_flwr_venv") else T.VENV
    arts = artifacts.generate_artifacts(model, optimizer=artifacts.SGD(), additional_output_names=["output"])
    rng = np.random.RandomState(0)
    link = T.SuperLink(venv, workdir / "home").start()
    stop = threading.Event()
    nodes, threads = [], []
    out = workdir / "out"
    counting, cpu, done = Counted(), {}, threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            tree_cpu(link.proc.pid, cpu)
    try:
        init = workdir / "init.npz"
        for k in range(n_nodes):
            x = rng.rand(samples, *sample_shape).astype(np.float32)
            y = rng.randint(0, 10, samples).astype(np.int64)
            t = T.make_trainer(arts, x, y, seed=k)
            if k == 0:
                np.savez(str(init), **t.get_parameters())
            node = FlowerNode(link.url, t, heartbeat_interval=30, poll_interval=poll,
                              transport=counting.wrap(HttpTransport()))
            node.join()
            nodes.append(node)
            threads.append(threading.Thread(target=node.run, kwargs={"stop": stop.is_set, "timeout": 1800},
                                            daemon=True))
        for th in threads:
            th.start()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        own0, req0, in0, link0 = sum(os.times()[:2]), counting.requests, counting.seconds, sum(cpu.values())
        routes0 = dict(counting.routes)
        link.run_app(out, init, **{"num-nodes": n_nodes, "num-server-rounds": rounds, "local-epochs": 1,
                                   "round-timeout": 600.0})
        T.wait_until(lambda: (out / "result.json").exists(), 600 + 60 * rounds, "the run", link.proc, link.log)
        done.set()
        sampler.join(timeout=5)
        if stats is not None:
            stats.update(requests=counting.requests - req0, request_s=counting.seconds - in0,
                         own_cpu=sum(os.times()[:2]) - own0, link_cpu=sum(cpu.values()) - link0,
                         load=os.getloadavg()[0],
                         routes={k: v - routes0.get(k, 0) for k, v in counting.routes.items()})
        result = json.loads((out / "result.json").read_text())
        if "error" in result:
            raise RuntimeError(result["error"])
        stamps = [os.path.getmtime(str(out / ("round_%d.npz" % r))) for r in range(rounds + 1)]
        return nodes, list(np.diff(stamps))
    finally:
        done.set()
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


def measure_scale(counts, rounds: int = 3, poll: "float | None" = None) -> None:
    print("| nodes | poll s | seconds per round (train + evaluate) | rounds per minute | requests per node "
          "per round | CPU s per round: nodes / SuperLink+ServerApp | load |")
    print("|---|---|---|---|---|---|---|")
    make, shape = MODELS["digits MLP 64-32-10"]
    for n in counts:
        work = Path(tempfile.mkdtemp(prefix="flscale"))
        every = poll if poll is not None else (0.5 if n <= 10 else 1.0)
        stats: dict = {}
        try:
            nodes, per_round = federation(work, make(), shape, n_nodes=n, rounds=rounds, poll=every, stats=stats)
        finally:
            shutil.rmtree(str(work), ignore_errors=True)
        print("| %d | %g | %s | %.1f | %.1f | %.1f / %.1f | %.0f |" % (
            n, every, ", ".join("%.1f" % s for s in per_round), 60.0 / np.mean(per_round),
            stats["requests"] / n / rounds, stats["own_cpu"] / rounds, stats["link_cpu"] / rounds, stats["load"]))
        print("    objects per node per round: %.1f pulled, %.1f reused from the last message, %.1f pull-objects "
              "answered 'not available yet'" % (
                  sum(x.objects_pulled for x in nodes) / n / rounds, sum(x.objects_reused for x in nodes) / n / rounds,
                  sum(x.fleet.object_waits for x in nodes) / n / rounds))
        print("    requests per node per round by route: " + ", ".join(
            "%s %.1f" % (k, v / n / rounds) for k, v in sorted(stats["routes"].items(), key=lambda kv: -kv[1])))


def tree_pids(root: int) -> set:
    """``root`` and all its descendants (Linux /proc)."""
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
    return tree


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (Linux /proc)."""
    total = 0
    for p in tree_pids(root):
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
    ap.add_argument("--poll", type=float, default=None, help="scale: the nodes' poll interval (default 0.5 s "
                    "up to 10 nodes, 1 s above)")
    args = ap.parse_args()
    if args.what == "bytes":
        measure_bytes(args.rounds)
    elif args.what == "sim":
        measure_simulation(args.counts, args.rounds)
    else:
        measure_scale(args.counts, args.rounds, args.poll)


if __name__ == "__main__":
    main()

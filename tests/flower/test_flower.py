"""pytrain nodes in a real Flower federation (flwr 1.42 SuperLink on loopback, FedAvg ServerApp).

flwr needs Python >= 3.11 and numpy >= 1.26, so it lives in its own venv (build/venv-flwr, made
here when missing, with the system site-packages so its ClientApp can use the installed torch).
pytrain's nodes run in this process, in threads, through pytrain.flower (no flwr). Every wait is
bounded; every process started here is stopped by its process group.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pytest

from pytrain.generator import artifacts, models
from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.flower import FlowerNode, PytrainTrainer
from pytrain.flower import messages as pb
from pytrain.flower import objects as ob
from pytrain.flower.trainer import LocalTraining
from pytrain.flower.transport import EcdsaSigner
from waits import wait_s

from buildsite.installs import FLWR_VENV as VENV, FLWR_VERSION  # noqa: E402,F401  (bench/flower_scale.py reads VENV)

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).resolve().parent / "flower_app"
ROUNDS = 5
RECIPE = {"lr": 0.2, "local-epochs": 4, "batch-size": 32}  # 3 non-IID nodes reach ~94% in 5 rounds


# -- the flwr venv -------------------------------------------------------------------------------------
def ensure_flwr_venv() -> Path:
    """build/venv-flwr with flwr[simulation] 1.42.0 (buildsite/installs.py; python build.py test makes it
    before the suite runs)."""
    from buildsite.installs import ensure_flwr_venv as ensure

    venv = ensure()
    if venv is None:
        pytest.skip("flwr %s needs Python >= 3.11 for its venv" % FLWR_VERSION)
    return venv


@pytest.fixture(scope="module")
def venv() -> Path:
    return ensure_flwr_venv()


@pytest.fixture(scope="module", autouse=True)
def cryptography_installed() -> None:
    """Native nodes sign with 'cryptography' (flwr's venv has it; this interpreter may not)."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "cryptography"], check=True, timeout=600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout: float, what: str, proc: Optional[subprocess.Popen] = None, log: Optional[Path] = None):
    deadline = time.monotonic() + wait_s(timeout)
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    raise AssertionError("timed out after %.0f s waiting for %s\n%s" % (timeout, what, tail))


class SuperLink:
    """``flower-superlink --insecure`` on free loopback ports, with its own FLWR_HOME."""

    def __init__(self, venv: Path, home: Path, simulation: bool = False) -> None:
        self.venv, self.home, self.simulation = venv, home, simulation
        # flwr 1.42 serves the Fleet, Control and Runtime APIs on one HTTP port
        self.port = free_port()
        self.env = dict(os.environ, FLWR_HOME=str(home), PATH=str(venv / "bin") + os.pathsep + os.environ["PATH"])
        self.env.pop("PYTHONPATH", None)
        # the SuperExecs (the SuperLink's, which starts the ServerApp, and each flower-supernode's, which
        # starts a ClientApp per message) look for a task every second by default: every run and every
        # message of a SuperNode waited up to that second
        self.env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.1"
        if simulation:  # the virtual SuperNodes run pytrain's ClientApp inside flwr's processes
            self.env["PYTHONPATH"] = str(ROOT)
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:%d"\ninsecure = true\n'
            % self.port)
        self.log = home / "superlink.log"
        self.procs: List[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def start(self) -> "SuperLink":
        cmd = [str(self.venv / "bin" / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
               "--host", "127.0.0.1", "--port", str(self.port)]
        if self.simulation:  # the Simulation Engine (Ray) runs the app's ClientApp as virtual SuperNodes
            cmd += ["--simulation", "--isolation", "subprocess"]
        self.proc = self.spawn(cmd, self.log)

        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                return False
        try:
            wait_until(up, 60, "the SuperLink's ports", self.proc, self.log)
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self, cmd: List[str], log: Path, **kw) -> subprocess.Popen:
        f = open(str(log), "ab")
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
                             cwd=str(self.home), **kw)
        f.close()
        self.procs.append(p)
        return p

    def run_app(self, out: Path, init: Path, app: Path = APP, federation: Optional[Dict[str, int]] = None,
                **config) -> None:
        """``flwr run`` the test app (it returns once the run is submitted); ``federation``: the
        Simulation Engine's options (``num-supernodes``, ``client-resources-num-cpus``...)."""
        cfg = dict(RECIPE, **{"num-server-rounds": ROUNDS, "out": str(out), "init": str(init)})
        cfg.update(config)
        overrides = " ".join("%s=%s" % (k, json.dumps(v)) for k, v in cfg.items())
        cmd = [str(self.venv / "bin" / "flwr"), "run", str(app), "test", "--run-config", overrides]
        if federation:
            cmd += ["--federation-config", " ".join("%s=%s" % kv for kv in federation.items())]
        res = subprocess.run(cmd, env=self.env, cwd=str(self.home), capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)


def supernode_cmd(venv: Path) -> List[str]:
    """``flower-supernode`` from flwr's venv, pulling every 0.2 s instead of every 3 s when idle
    (tests/flower/prompt_supernode.py): each message of a round reached it up to 3 s late."""
    return [str(venv / "bin" / "python"), str(Path(__file__).resolve().parent / "prompt_supernode.py")]


def app_with_clientapp(work: Path, clientapp: str) -> Path:
    """A copy of the test Flower App (in ``work/app``) whose ``clientapp`` component is ``clientapp``."""
    app = work / "app"
    shutil.copytree(str(APP), str(app), ignore=shutil.ignore_patterns("__pycache__"))
    toml = app / "pyproject.toml"
    toml.write_text(toml.read_text().replace('"pytrainfl.client_app:app"', '"%s"' % clientapp))
    return app


# -- data and model ----------------------------------------------------------------------------------
def digits_splits(n_clients: int, seed: int = 0):
    """Non-IID splits of scikit-learn's digits: each client holds 80% of its 'home' classes and 10%
    of the others' (before the 20% test hold-out, which every split shares)."""
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype(np.float32), y.astype(np.int64)
    rng = np.random.RandomState(seed)
    order = rng.permutation(len(x))
    test = order[: len(x) // 5]
    train = order[len(x) // 5:]
    parts: List[List[int]] = [[] for _ in range(n_clients)]
    for c in range(10):
        idx = train[y[train] == c]
        rng.shuffle(idx)
        home = c * n_clients // 10
        share = np.full(n_clients, 0.2 / max(n_clients - 1, 1))
        share[home] = 0.8
        cuts = (np.cumsum(share)[:-1] * len(idx)).astype(int)
        for k, chunk in enumerate(np.split(idx, cuts)):
            parts[k].extend(chunk.tolist())
    return [(x[p], y[p]) for p in parts], (x[test], y[test])


@pytest.fixture(scope="module")
def arts():
    # the eval model also reports the logits ("output"), for accuracy
    return artifacts.generate_artifacts(models.mlp(64, [32], 10), loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.SGD(), additional_output_names=["output"])


def make_trainer(arts, x, y, seed: int = 0) -> PytrainTrainer:
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    return PytrainTrainer(module, opt, x, y, settings=LocalTraining(seed=seed))


def global_accuracy(arts, params: Dict[str, np.ndarray], x, y) -> float:
    t = make_trainer(arts, x, y)
    t.set_parameters(params)
    return float(t.local_metrics(x, y)[1])


def run_federation(tmp: Path, venv: Path, arts, native: int, torch_nodes: int = 0, cli_nodes: int = 0,
                   rounds: int = ROUNDS):
    """A SuperLink, ``native`` pytrain nodes in threads, ``cli_nodes`` ``pytrain federate`` processes
    and ``torch_nodes`` flower-supernodes running the app's PyTorch ClientApp; FedAvg for ``rounds`` rounds."""
    total = native + cli_nodes + torch_nodes
    splits, test = digits_splits(total)
    link = SuperLink(venv, tmp / "home").start()
    nodes, threads, errors, clis = [], [], [], []
    stop = threading.Event()
    out = tmp / "out"
    try:
        init = tmp / "init.npz"
        np.savez(str(init), **make_trainer(arts, *splits[0]).get_parameters())
        for k in range(native):
            node = FlowerNode(link.url, make_trainer(arts, *splits[k], seed=k), heartbeat_interval=10,
                              poll_interval=0.1, keep_replies=True)
            node.join()
            nodes.append(node)

            def work(n=node):
                try:
                    n.run(stop=stop.is_set, timeout=wait_s(240))
                except Exception as e:  # reported by the test
                    errors.append(e)
            threads.append(threading.Thread(target=work, daemon=True))
        for k in range(native, native + cli_nodes):
            d = tmp / ("cli%d" % k)
            arts.write(str(d))
            np.savez(str(d / "data.npz"), x=splits[k][0], y=splits[k][1])
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            f = open(str(tmp / ("cli%d.log" % k)), "wb")
            clis.append(subprocess.Popen(
                [sys.executable, "-m", "pytrain", "federate", str(d), "--superlink", link.url, "--data",
                 str(d / "data.npz"), "--rounds", str(rounds), "--poll", "0.1", "--heartbeat", "10",
                 "--timeout", "240", "--seed", str(k)], stdout=f, stderr=subprocess.STDOUT, env=env,
                start_new_session=True))
            f.close()
        for k in range(native + cli_nodes, total):
            data = tmp / ("node%d.npz" % k)
            np.savez(str(data), x=splits[k][0], y=splits[k][1])
            link.spawn(supernode_cmd(venv) + ["--insecure", "--superlink",
                        "127.0.0.1:%d" % link.port, "--port", str(free_port()),
                        "--node-config", 'data="%s"' % data], tmp / ("supernode%d.log" % k))
        for t in threads:
            t.start()
        link.run_app(out, init, **{"num-nodes": total, "num-server-rounds": rounds})
        wait_until(lambda: (out / "result.json").exists(), 150, "the ServerApp's result", link.proc, link.log)
        for p in clis:  # each leaves by itself after its last round
            p.wait(timeout=60)
        return link, nodes, splits, test, out, errors, clis
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        for p in clis:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=15)
        link.stop()


# -- object format against flwr's own classes ----------------------------------------------------------
ORACLE = r"""
import json, sys
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
case = json.load(open(sys.argv[1]))
a = {k: np.asarray(v, dtype=np.float32) for k, v in case["arrays"].items()}
rd = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in a.items()}),
                 "metrics": MetricRecord(case["metrics"]), "config": ConfigRecord(case["config"])})
contents = {k: bytes.fromhex(v) for k, v in case["objects"].items()}
msg = inflate_object_from_contents(case["message"], contents)
print(json.dumps({"recorddict": rd.object_id, "message": msg.object_id, "type": msg.metadata.message_type,
                  "w": msg.content["arrays"]["w"].numpy().tolist(), "error": msg.has_error()}))
"""


def test_objects_match_flwr(tmp_path, venv):
    arrays = {"w": [[1.5, -2.0, 3.0], [0.0, 4.25, -1.0]], "b": [0.5, 0.25]}
    metrics = {"num-examples": 120, "train_loss": 0.25, "big": 2 ** 63 + 5, "neg": -7, "lst": [1.0, 2.5]}
    config = {"lr": 0.1, "server-round": 3, "flag": True, "name": "x", "raw": b"\x00\x01",
              "ints": [1, -2, 3], "bools": [True, False]}
    recs = {"arrays": ob.ArrayRecord((k, np.asarray(v, np.float32)) for k, v in arrays.items()),
            "metrics": ob.MetricRecord(metrics), "config": ob.ConfigRecord(config)}
    md = ob.metadata(run_id=2 ** 60 + 3, src_node_id=2 ** 63 + 11, dst_node_id=1, reply_to_message_id="ab" * 32,
                     group_id="1", ttl=42.5, message_type="train", created_at=time.time(), dst_task_id=7)
    msg = ob.deflate_message(md, recs)
    case = {"arrays": arrays, "metrics": metrics, "config": {k: (list(v) if isinstance(v, bytes) else v)
                                                             for k, v in config.items()},
            "objects": {k: v.hex() for k, v in msg.all_objects().items()}, "message": msg.id}
    case["config"]["raw"] = None
    del case["config"]["raw"]
    (tmp_path / "case.json").write_text(json.dumps(case))
    res = subprocess.run([str(venv / "bin" / "python"), "-c", ORACLE, str(tmp_path / "case.json")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    recs_no_raw = dict(recs)
    recs_no_raw["config"] = ob.ConfigRecord((k, v) for k, v in config.items() if k != "raw")
    assert got["recorddict"] == ob.deflate_recorddict(recs_no_raw).id
    assert got["message"] == msg.id and got["type"] == "train" and not got["error"]
    assert got["w"] == arrays["w"]
    # and back: what we deflate, we inflate to the same values
    objs = msg.all_objects()
    body, content = ob.inflate_message(msg.id, objs.__getitem__)
    assert body.metadata.message_type == "train"
    assert dict(content["metrics"]) == metrics and dict(content["config"]) == config
    np.testing.assert_array_equal(content["arrays"]["w"], np.asarray(arrays["w"], np.float32))


# -- bad server input ----------------------------------------------------------------------------------
class FakeLink:
    """A transport answering the Fleet routes from memory: one crafted message, then nothing.
    It records the reply the node pushes."""

    def __init__(self, message: pb.FlwrMessage, tree: pb.ObjectTree, objects: Dict[str, bytes]) -> None:
        self.pending = [(message, tree)]
        self.objects = dict(objects)
        self.pushed: List[pb.FlwrMessage] = []
        self.pushed_objects: Dict[str, bytes] = {}
        self.pulled: List[str] = []  # object ids, in the order the node asked for them

    def add(self, message: pb.FlwrMessage, tree: pb.ObjectTree, objects: Dict[str, bytes]) -> None:
        """Queue another message; the node pulls one per poll."""
        self.pending.append((message, tree))
        self.objects.update(objects)

    def __call__(self, url: str, body: bytes, headers: Dict[str, str], timeout: float):
        for h in ("flwr-public-key", "flwr-timestamp", "flwr-signature"):
            assert h in headers
        route = url.rsplit("/", 1)[1]
        if route in ("register-node", "activate-node"):
            return 200, pb.NodeIdResponse(node_id=77).SerializeToString()
        if route == "send-node-heartbeat":
            return 200, pb.SendNodeHeartbeatResponse(success=1).SerializeToString()
        if route == "pull-messages":
            got, self.pending = self.pending[:1], self.pending[1:]
            return 200, pb.PullMessagesResponse(messages_list=[m for m, _ in got],
                                                message_object_trees=[t for _, t in got]).SerializeToString()
        if route == "pull-object":
            oid = pb.PullObjectRequest.FromString(body).object_id
            self.pulled.append(oid)
            found = oid in self.objects
            return 200, pb.PullObjectResponse(object_found=int(found), object_available=int(found),
                                              object_content=self.objects.get(oid, b"")).SerializeToString()
        if route == "push-messages":
            req = pb.PushMessagesRequest.FromString(body)
            self.pushed.extend(req.messages_list)
            ids = ob.tree_ids(req.message_object_trees[0])
            return 200, pb.PushMessagesResponse(objects_to_push=ids, session_id="s").SerializeToString()
        if route == "push-object":
            req = pb.PushObjectRequest.FromString(body)
            assert ob.object_id(req.object_content) == req.object_id
            self.pushed_objects[req.object_id] = req.object_content
            return 200, pb.PushObjectResponse(stored=1).SerializeToString()
        return 200, b""


def train_message(arrays: Dict[str, np.ndarray]):
    md = ob.metadata(run_id=1, src_node_id=1, dst_node_id=77, group_id="1", ttl=600.0, message_type="train",
                     created_at=time.time(), src_task_id=3)
    d = ob.deflate_message(md, {"arrays": ob.ArrayRecord(arrays), "config": ob.ConfigRecord(
        [("lr", 0.1), ("local-epochs", 1), ("batch-size", 32), ("server-round", 1)])})
    md.message_id = d.id
    return pb.FlwrMessage(metadata=md, content=pb.RecordDict()), d


def _corrupt(case: str, params: Dict[str, np.ndarray]):
    """A train message whose content is bad in the way ``case`` says."""
    if case == "shape":
        bad = dict(params)
        bad["fc1.weight"] = np.zeros((64, 32), np.float32)  # transposed
        msg, d = train_message(bad)
        return msg, d.tree(), d.all_objects()
    msg, d = train_message(params)
    objs = d.all_objects()
    chunk = next(k for k, v in objs.items() if v.startswith(b"ArrayChunk "))
    if case == "sha256":
        raw = bytearray(objs[chunk])
        raw[-1] ^= 1  # one flipped bit in a weight: its id no longer matches
        objs[chunk] = bytes(raw)
    else:  # malformed: an Array whose metadata is not JSON (its id is right for its bytes)
        good = {k: ob.deflate_array(v) for k, v in params.items()}
        good["fc1.bias"] = ob.Deflated("Array", good["fc1.bias"].children, b"{not json")
        ar = ob.Deflated("ArrayRecord", list(good.values()),
                         json.dumps({k: v.id for k, v in good.items()}).encode())
        cfg = ob.deflate_record(ob.ConfigRecord([("lr", 0.1), ("server-round", 1)]))
        rd = ob.Deflated("RecordDict", [ar, cfg], json.dumps({"arrays": ar.id, "config": cfg.id}).encode())
        body = pb.FlwrMessage.FromString(d.content.split(b"\x00", 1)[1]).SerializeToString()
        m = ob.Deflated("Message", [rd], body)
        msg.metadata.message_id = m.id
        return msg, m.tree(), m.all_objects()
    return msg, d.tree(), objs


@pytest.mark.parametrize("case,expect", [("malformed", "not JSON"), ("sha256", "sha256 mismatch"),
                                         ("shape", "shape [64, 32]")])
def test_bad_server_input_is_refused(arts, case, expect):
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, *parts[0])
    before = trainer.get_parameters()
    sent = {k: v + 0.5 for k, v in before.items()}
    msg, tree, objs = _corrupt(case, sent)
    link = FakeLink(msg, tree, objs)
    node = FlowerNode("http://fleet.invalid", trainer, signer=EcdsaSigner(), transport=link, keep_replies=True)
    assert node.run(max_messages=1, timeout=wait_s(30)) == 1
    assert len(link.pushed) == 1
    reply = link.pushed[0]
    assert reply.error is not None and expect in reply.error.reason, reply.error
    assert "refused" in reply.error.reason
    assert reply.metadata.reply_to_message_id == tree.object_id
    assert reply.metadata.ttl > 0
    for k, v in trainer.get_parameters().items():  # the model is untouched
        np.testing.assert_array_equal(v, before[k])


def test_good_message_trains_and_replies(arts):
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, *parts[0])
    sent = trainer.get_parameters()
    msg, d = train_message(sent)
    link = FakeLink(msg, d.tree(), d.all_objects())
    node = FlowerNode("http://fleet.invalid", trainer, signer=EcdsaSigner(), transport=link, keep_replies=True)
    node.run(max_messages=1, timeout=wait_s(60))
    reply = link.pushed[0]
    assert reply.error is None and reply.content is not None
    _, content = ob.inflate_message(reply.metadata.message_id, link.pushed_objects.__getitem__)
    assert list(content) == ["arrays", "metrics"]
    assert content["metrics"]["num-examples"] == len(parts[0][0])
    for k, v in content["arrays"].items():
        np.testing.assert_array_equal(v, trainer.get_parameters()[k])
        assert not np.array_equal(v, sent[k])  # it trained


# -- real federations ----------------------------------------------------------------------------------
def test_federation_of_pytrain_nodes(tmp_path, venv, arts):
    link, nodes, splits, (xt, yt), out, errors, clis = run_federation(tmp_path, venv, arts, native=2,
                                                                      cli_nodes=1)
    assert not errors, errors
    result = json.loads((out / "result.json").read_text())
    assert "error" not in result, result["error"]
    log = (tmp_path / "cli2.log").read_text()
    assert clis[0].returncode == 0, log
    assert "left after %d training round(s)" % ROUNDS in log, log
    acc = []
    for r in range(ROUNDS + 1):
        with np.load(str(out / ("round_%d.npz" % r))) as z:
            acc.append(global_accuracy(arts, {k: z[k] for k in z.files}, xt, yt))
    print("global accuracy by round:", ["%.3f" % a for a in acc])
    assert all(b > a for a, b in zip(acc, acc[1:])), acc
    assert acc[-1] >= 0.90, acc
    # every node trained and evaluated in each of the 5 rounds, and left
    for n in nodes:
        kinds = [(r.message_type, r.server_round) for r in n.replies if r.error is None]
        assert [k for k in kinds if k[0] == "train"] == [("train", r) for r in range(1, ROUNDS + 1)], kinds
        assert sum(1 for k in kinds if k[0] == "evaluate") == ROUNDS
        assert not n.joined
        # a training message carries the model the previous evaluate message did: its ArrayRecord, 4
        # Arrays and their chunks come from the node's copy, not pulled again
        print("objects pulled %d, reused %d" % (n.objects_pulled, n.objects_reused))
        assert n.objects_reused >= 9 * (ROUNDS - 1), (n.objects_pulled, n.objects_reused)
    # FedAvg's aggregate of the last round is the example-weighted mean of what the nodes sent (the
    # CLI node's checkpoint holds what it sent in its last training round)
    sent = [next(x for x in n.replies if x.message_type == "train" and x.server_round == ROUNDS).arrays
            for n in nodes]
    cli_state = CheckpointState.load_checkpoint(str(tmp_path / "cli2" / "checkpoint"))
    sent.append({k: p.data for k, p in cli_state.parameters.items()})
    weights = np.array([len(s[0]) for s in splits], np.float64)
    assert [x.metrics["num-examples"] for n in nodes for x in n.replies if x.message_type == "train"
            and x.server_round == ROUNDS] == list(weights[:2])
    with np.load(str(out / ("round_%d.npz" % ROUNDS))) as z:
        for name in z.files:
            expect = sum(w / weights.sum() * s[name].astype(np.float64) for w, s in zip(weights, sent))
            np.testing.assert_allclose(z[name], expect, rtol=0, atol=2e-6)
            assert not np.allclose(z[name], sent[0][name], atol=1e-4)  # a real mix, not one node's
    assert sorted(result["train"]) == [str(r) for r in range(1, ROUNDS + 1)]


#: rounds of the federation with a PyTorch node: flwr's SuperNode starts one ClientApp process per message,
#: each importing torch (most of the test's time: ~13 s a message at load 8-10). Two rounds keep what the
#: test asserts: a second round that starts from the first's mix, the torch node's weight in the last
#: aggregate, and >= 0.85 global accuracy (the deterministic recipe gives 0.70, 0.886, 0.891 after rounds
#: 1, 2, 3: the third round added 0.005)
MIXED_ROUNDS = 2


def test_federation_mixed_with_flower_torch_client(tmp_path, venv, arts):
    link, nodes, splits, (xt, yt), out, errors, _ = run_federation(tmp_path, venv, arts, native=2, torch_nodes=1,
                                                                   rounds=MIXED_ROUNDS)
    assert not errors, errors
    result = json.loads((out / "result.json").read_text())
    assert "error" not in result, result["error"]
    assert sorted(result["train"]) == [str(r) for r in range(1, MIXED_ROUNDS + 1)]
    for n in nodes:
        assert sum(1 for x in n.replies if x.message_type == "train" and x.error is None) == MIXED_ROUNDS
    # the torch node's examples count in the weights: the aggregate is not the two pytrain nodes' mean
    with np.load(str(out / ("round_%d.npz" % MIXED_ROUNDS))) as z:
        acc = global_accuracy(arts, {k: z[k] for k in z.files}, xt, yt)
        last = [next(x for x in n.replies if x.message_type == "train" and x.server_round == MIXED_ROUNDS)
                for n in nodes]
        w = np.array([x.metrics["num-examples"] for x in last], np.float64)
        two = sum(wi / w.sum() * x.arrays["fc2.bias"] for wi, x in zip(w, last))
        assert not np.allclose(z["fc2.bias"], two, atol=1e-6)
    print("global accuracy after %d rounds with a PyTorch node: %.3f" % (MIXED_ROUNDS, acc))
    assert acc >= 0.85, acc


# -- the ClientApp for devices that run flwr -------------------------------------------------------------
CLIENT_APP = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from pytrain.device.api import CheckpointState
from pytrain.flower import client_app

TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1  # to build messages by hand
arts, data = sys.argv[2], sys.argv[3]
app = client_app(arts, data)
params = {k: p.data + 0.01 for k, p in CheckpointState.load_checkpoint(arts + "/checkpoint").parameters.items()}
ctx = Context(run_id=1, node_id=2, node_config={}, state=RecordDict(), run_config={})
out = {}
for mtype in ("train", "evaluate"):
    msg = Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in params.items()}),
                              "config": ConfigRecord({"lr": 0.1, "local-epochs": 2, "batch-size": 16})}),
                  dst_node_id=2, message_type=mtype)
    msg.metadata.__dict__["_message_id"] = msg.object_id
    reply = app(msg, ctx)
    assert not reply.has_error(), reply.error
    out[mtype] = {"metrics": dict(reply.content["metrics"]), "keys": list(reply.content.keys())}
    if mtype == "train":
        got = {k: v.numpy() for k, v in reply.content["arrays"].items()}
        out["moved"] = {k: float(np.abs(got[k] - params[k]).max()) for k in params}
print(json.dumps(out))
"""


def run_client_app_script(script: str, tmp_path: Path, venv: Path, arts, x, y):
    """``script`` in flwr's venv with argv: pytrain's root, an artifact directory, an .npz of ``x, y``;
    returns the JSON its last line prints."""
    d = tmp_path / "arts"
    arts.write(str(d))
    np.savez(str(tmp_path / "data.npz"), x=x, y=y)
    res = subprocess.run([str(venv / "bin" / "python"), "-c", script, str(ROOT), str(d), str(tmp_path / "data.npz")],
                         capture_output=True, text=True, timeout=wait_s(120))
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_client_app_answers_flwr_messages(tmp_path, venv, arts):
    (parts, _) = digits_splits(1)
    out = run_client_app_script(CLIENT_APP, tmp_path, venv, arts, *parts[0])
    assert out["train"]["keys"] == ["arrays", "metrics"] and out["evaluate"]["keys"] == ["metrics"]
    assert out["train"]["metrics"]["num-examples"] == len(parts[0][0])
    assert set(out["evaluate"]["metrics"]) == {"eval_loss", "eval_acc", "num-examples"}
    assert all(v > 0 for v in out["moved"].values())  # every parameter trained
    # the same steps as a pytrain node given the same message
    t = make_trainer(arts, *parts[0])
    sent = {k: v + 0.01 for k, v in t.get_parameters().items()}
    _, _, metrics = t.fit(sent, {"lr": 0.1, "local-epochs": 2, "batch-size": 16})
    assert abs(metrics["train_loss"] - out["train"]["metrics"]["train_loss"]) < 1e-6


# -- the node on the browser's Python (3.8 + numpy 1.17.5) ------------------------------------------------
PY38_NODE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.flower import FlowerNode, PytrainTrainer
from pytrain.flower import messages as pb
from pytrain.flower import objects as ob

case = json.load(open(sys.argv[2]))
z = np.load(sys.argv[3])
state = CheckpointState.load_checkpoint(z["checkpoint"].tobytes())
module = Module(z["training"].tobytes(), state, z["eval"].tobytes())
trainer = PytrainTrainer(module, Optimizer(z["optimizer"].tobytes(), module), z["x"], z["y"])
objects = {k: bytes.fromhex(v) for k, v in case["objects"].items()}
queue = [(pb.FlwrMessage.FromString(bytes.fromhex(m)), pb.ObjectTree.FromString(bytes.fromhex(t)))
         for m, t in case["messages"]]
pushed, stored = [], {}

def transport(url, body, headers, timeout):   # the Fleet routes, from memory
    route = url.rsplit("/", 1)[1]
    if route in ("register-node", "activate-node"):
        return 200, pb.NodeIdResponse(node_id=77).SerializeToString()
    if route == "pull-messages":
        got = [queue.pop(0)] if queue else []
        return 200, pb.PullMessagesResponse(messages_list=[m for m, _ in got],
                                            message_object_trees=[t for _, t in got]).SerializeToString()
    if route == "pull-object":
        oid = pb.PullObjectRequest.FromString(body).object_id
        found = oid in objects  # the node's own replies: taken (by no ServerApp here)
        return 200, pb.PullObjectResponse(object_found=int(found), object_available=int(found),
                                          object_content=objects.get(oid, b"")).SerializeToString()
    if route == "push-messages":
        req = pb.PushMessagesRequest.FromString(body)
        pushed.append(req.messages_list[0])
        return 200, pb.PushMessagesResponse(objects_to_push=ob.tree_ids(req.message_object_trees[0]),
                                            session_id="s").SerializeToString()
    if route == "push-object":
        req = pb.PushObjectRequest.FromString(body)
        stored[req.object_id] = req.object_content
    return 200, b""

class Signer:   # the browser plugs WebCrypto in here; this transport checks nothing
    public_key_pem = b"-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"
    def sign(self, data):
        return b"0"

node = FlowerNode("http://fleet.invalid", trainer, signer=Signer(), transport=transport)
node.run(max_messages=len(queue), timeout=60)
out = {"numpy": np.__version__, "python": list(sys.version_info[:2]),
       "errors": [m.error.reason if m.error is not None else None for m in pushed],
       "replies": [m.metadata.message_id for m in pushed], "objects": {k: v.hex() for k, v in stored.items()}}
print(json.dumps(out))
"""


def test_node_on_python38_numpy117(tmp_path, arts):
    from test_python38_numpy117 import _python38
    exe = _python38()
    py = ROOT / "build" / "py38-numpy117" / "bin" / "python"
    if exe is None or not py.exists():
        pytest.skip("no Python 3.8 + numpy 1.17.5 venv (tests/api/test_python38_numpy117.py builds it)")
    (parts, _) = digits_splits(1)
    x, y = parts[0][0][:200], parts[0][1][:200]
    here = make_trainer(arts, x, y)
    sent = {k: v + 0.01 for k, v in here.get_parameters().items()}
    good, d = train_message(sent)
    bad_msg, bad_tree, bad_objs = _corrupt("sha256", {k: v + 1 for k, v in sent.items()})  # no shared chunk
    objs = dict(d.all_objects(), **bad_objs)
    case = {"objects": {k: v.hex() for k, v in objs.items()},
            "messages": [[good.SerializeToString().hex(), d.tree().SerializeToString().hex()],
                         [bad_msg.SerializeToString().hex(), bad_tree.SerializeToString().hex()]]}
    (tmp_path / "case.json").write_text(json.dumps(case))
    np.savez(str(tmp_path / "arts.npz"), x=x, y=y, **{k: np.frombuffer(getattr(arts, a), np.uint8) for k, a in (
        ("training", "training_model"), ("eval", "eval_model"), ("optimizer", "optimizer_model"),
        ("checkpoint", "checkpoint"))})
    res = subprocess.run([str(py), "-c", PY38_NODE, str(ROOT), str(tmp_path / "case.json"), str(tmp_path / "arts.npz")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["numpy"] == "1.17.5" and out["python"] == [3, 8]
    assert out["errors"][0] is None and "sha256 mismatch" in out["errors"][1]
    stored = {k: bytes.fromhex(v) for k, v in out["objects"].items()}
    _, content = ob.inflate_message(out["replies"][0], stored.__getitem__)
    new, n, metrics = here.fit(sent, {"lr": 0.1, "local-epochs": 1, "batch-size": 32, "server-round": 1})
    assert content["metrics"]["num-examples"] == n == 200
    for k, v in new.items():  # the same training on both Pythons, to float32 rounding
        np.testing.assert_allclose(content["arrays"][k], v, rtol=1e-4, atol=1e-5)


def test_signer_without_cryptography_names_the_extra(monkeypatch):
    from pytrain.flower.transport import FederationError
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")] + ["cryptography"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    with pytest.raises(FederationError, match=r'pip install "pytrain\[flower\]"'):
        EcdsaSigner()

"""Secure aggregation: the node's side of Flower's SecAgg+ (flwr's ``secaggplus_mod``), so that a
ServerApp running ``SecAggPlusWorkflow`` learns only the (weighted) sum of the nodes' parameters.

A SecAgg+ round is four ``train`` messages, each carrying a ConfigRecord ``secaggplus_configs``
whose ``stage`` says which:

1. ``setup``: the protocol's numbers (shares, threshold, quantization); the node makes two P-384
   key pairs and answers ``pk1``, ``pk2``;
2. ``share_keys``: its neighbours' public keys (``"<node id>": [pk1, pk2]``); the node draws its
   self-mask seed, Shamir-shares the seed and its first secret key, and answers each neighbour's
   shares Fernet-encrypted under the key agreed with that neighbour's ``pk2`` (``dsts``, ``ctxts``);
3. ``collect_masked_vectors``: the neighbours' encrypted shares for this node (``srcs``, ``ctxts``)
   and the legacy ``fitins`` (parameters by position, config); the node trains, quantizes
   ``[weight] + weight * parameters``, adds its self mask and the pairwise masks (agreed with each
   neighbour's ``pk1``) modulo ``mod_range``, and answers ``masked_params`` (``.npy`` bytes) with
   the legacy ``fitres`` records (their parameters empty, as ``secaggplus_mod`` leaves them);
4. ``unmask``: which neighbours are ``active_nids`` / ``dead_nids``; the node answers the seed
   shares of the active ones and the key shares of the dead ones (``nids``, ``shares``).

Anything malformed (a stage out of order, a config of the wrong type, a key that is not P-384, a
share for or from an unknown node) raises :class:`SecAggError`: the node answers with an error reply.

The public-key work (key pairs, key agreement, Fernet) is yielded as
:class:`~pytrain.flower.secagg_crypto.CryptoStep`: :func:`mod_steps` performs it in Python or
hands it out to the node's driver (a browser tab's worker does it with WebCrypto).
"""
from __future__ import annotations

import math
import os
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pytrain.flower import objects as ob
from pytrain.flower import secagg_crypto as sc
from pytrain.flower.fleet import Steps
from pytrain.flower.mods import Answer, Handler, Task
from pytrain.flower.secagg_crypto import CryptoStep, SecAggError

CONFIGS = "secaggplus_configs"
SETUP, SHARE_KEYS, COLLECT, UNMASK = "setup", "share_keys", "collect_masked_vectors", "unmask"
STAGES = (SETUP, SHARE_KEYS, COLLECT, UNMASK)
FITINS_PARAMS, FITINS_CONFIG = "fitins.parameters", "fitins.config"
#: neighbours a node accepts (each costs a key agreement and a mask over the whole model)
MAX_NEIGHBOURS = 1024
#: train(arrays in the server's order, config) -> (updated arrays in that order, examples, metrics)
Train = Callable[[List[np.ndarray], Dict[str, Any]], Tuple[List[np.ndarray], int, Dict[str, Any]]]


def is_secagg(content: Mapping[str, Any]) -> bool:
    """Whether a message's content is a SecAgg+ stage (flwr's mod looks for the same record)."""
    return isinstance(content.get(CONFIGS), ob.ConfigRecord)


def _int(cfg: Mapping[str, Any], key: str, lo: int, hi: int) -> int:
    v = cfg.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise SecAggError("stage setup: %r must be an int in [%d, %d], got %r" % (key, lo, hi, v))
    return v


def _float(cfg: Mapping[str, Any], key: str) -> float:
    v = cfg.get(key)
    if type(v) is not float or not (math.isfinite(v) and v > 0):
        raise SecAggError("stage setup: %r must be a positive float, got %r" % (key, v))
    return v


def _int_list(cfg: Mapping[str, Any], key: str, stage: str) -> List[int]:
    v = cfg.get(key, None)
    if not isinstance(v, list) or any(type(x) is not int for x in v) or len(v) > MAX_NEIGHBOURS:
        raise SecAggError("stage %s: %r must be a list of node ids, got %r" % (stage, key, type(v).__name__))
    return v


class SecAggPlusClient:
    """One node's SecAgg+ state for one run (what ``secaggplus_mod`` keeps in the Context)."""

    def __init__(self) -> None:
        self.stage = UNMASK
        self.nid = 0
        self.share_num = self.threshold = self.target_range = self.mod_range = 0
        self.clipping_range = self.max_weight = 0.0
        self.sk1 = self.pk1 = self.sk2 = self.pk2 = self.rd_seed = b""
        self.public_keys: Dict[int, Tuple[bytes, bytes]] = {}
        self.seed_shares: Dict[int, bytes] = {}
        self.sk1_shares: Dict[int, bytes] = {}
        self.ss2: Dict[int, bytes] = {}
        #: the last masked vector sent (for tests and logs: never the update itself)
        self.last_masked: Optional[List[np.ndarray]] = None

    def handle_steps(self, node_id: int, content: Mapping[str, Any], train: Train) -> Steps:
        """Yields CryptoSteps, returns the reply content for one stage message; SecAggError (state
        unchanged) when it is refused."""
        cfg = OrderedDict(content[CONFIGS])
        stage = cfg.pop("stage", None)
        if not isinstance(stage, str):
            raise SecAggError("the SecAgg+ config has no 'stage' string")
        if stage != SETUP and stage in STAGES:
            want = STAGES[(STAGES.index(self.stage) + 1) % len(STAGES)]
            if stage != want:
                raise SecAggError("abort secure aggregation: expected stage %r, got %r" % (want, stage))
        reply: "OrderedDict[str, Any]" = OrderedDict()
        if stage == SETUP:
            res = yield from self._setup(int(node_id), cfg)
        elif stage == SHARE_KEYS:
            res = yield from self._share_keys(cfg)
        elif stage == COLLECT:
            res, reply = yield from self._collect(cfg, content, train)
        elif stage == UNMASK:
            res = self._unmask(cfg)
        else:
            raise SecAggError("unknown SecAgg+ stage %r" % stage)
        self.stage = stage
        reply[CONFIGS] = ob.ConfigRecord(res)
        return reply

    # -- the four stages ---------------------------------------------------------------------------------
    def _setup(self, nid: int, cfg: Mapping[str, Any]) -> Steps:
        _int(cfg, "sample_num", 1, 1 << 31)
        share_num = _int(cfg, "share_num", 1, MAX_NEIGHBOURS)
        threshold = _int(cfg, "threshold", 1, share_num)
        clipping_range = _float(cfg, "clipping_range")
        mod_range = _int(cfg, "mod_range", 2, 1 << 62)
        target_range = _int(cfg, "target_range", 1, mod_range - 1)
        max_weight = _float(cfg, "max_weight")
        if mod_range & (mod_range - 1):
            raise SecAggError("stage setup: 'mod_range' must be a power of 2, got %d" % mod_range)
        sk1, pk1 = yield CryptoStep("key_pair")
        sk2, pk2 = yield CryptoStep("key_pair")
        self.__init__()  # a new round starts from nothing
        self.nid, self.share_num, self.threshold = nid, share_num, threshold
        self.clipping_range, self.target_range, self.mod_range, self.max_weight = (
            clipping_range, target_range, mod_range, max_weight)
        self.sk1, self.pk1, self.sk2, self.pk2 = sk1, pk1, sk2, pk2
        return OrderedDict([("pk1", pk1), ("pk2", pk2)])

    def _share_keys(self, cfg: Mapping[str, Any]) -> Steps:
        keys: Dict[int, Tuple[bytes, bytes]] = OrderedDict()
        for k, v in cfg.items():
            if not (isinstance(v, list) and len(v) == 2 and all(isinstance(b, bytes) for b in v)):
                raise SecAggError("stage share_keys: the value for %r must be a list of two bytes" % k)
            try:
                keys[int(k)] = (v[0], v[1])
            except ValueError:
                raise SecAggError("stage share_keys: %r is not a node id" % k) from None
        if len(keys) < self.threshold:
            raise SecAggError("stage share_keys: %d neighbours, fewer than the threshold %d"
                              % (len(keys), self.threshold))
        if len(keys) > self.share_num:
            raise SecAggError("stage share_keys: %d neighbours, more than the %d shares" % (len(keys), self.share_num))
        flat = [b for pair in keys.values() for b in pair]
        if len(set(flat)) != len(flat):
            raise SecAggError("stage share_keys: some public keys are identical")
        if keys.get(self.nid) != (self.pk1, self.pk2):
            raise SecAggError("stage share_keys: this node's own public keys are missing or wrong")
        ss2 = OrderedDict()
        for nid, (pk1, pk2) in keys.items():
            if nid != self.nid:
                sc.load_public_key(pk1)  # refused now, not when masking
                ss2[nid] = yield CryptoStep("shared_key", self.sk2, pk2)
        rd_seed = os.urandom(32)
        b_shares = sc.create_shares(rd_seed, self.threshold, self.share_num)
        sk1_shares = sc.create_shares(self.sk1, self.threshold, self.share_num)
        dsts, ctxts = [], []
        for idx, nid in enumerate(keys):
            if nid == self.nid:
                self.seed_shares[nid], self.sk1_shares[nid] = b_shares[idx], sk1_shares[idx]
            else:
                dsts.append(nid)
                plaintext = sc.plaintext_concat(self.nid, nid, b_shares[idx], sk1_shares[idx])
                ctxts.append((yield CryptoStep("encrypt", ss2[nid], plaintext)))
        self.public_keys, self.ss2, self.rd_seed = keys, ss2, rd_seed
        return OrderedDict([("dsts", dsts), ("ctxts", ctxts)])

    def _collect(self, cfg: Mapping[str, Any], content: Mapping[str, Any], train: Train) -> Steps:
        ctxts, srcs = cfg.get("ctxts"), _int_list(cfg, "srcs", COLLECT)
        if not isinstance(ctxts, list) or any(type(c) is not bytes for c in ctxts) or len(ctxts) != len(srcs):
            raise SecAggError("stage collect_masked_vectors: 'ctxts' must be a list of bytes, one per source")
        if len(ctxts) + 1 < self.threshold:
            raise SecAggError("stage collect_masked_vectors: not enough neighbours (%d)" % len(ctxts))
        seed_shares, sk1_shares = dict(self.seed_shares), dict(self.sk1_shares)
        for src, token in zip(srcs, ctxts):
            if src not in self.ss2:
                raise SecAggError("stage collect_masked_vectors: a share from node %d, not a neighbour" % src)
            actual, dst, b_share, sk_share = sc.plaintext_separate((yield CryptoStep("decrypt", self.ss2[src], token)))
            if actual != src or dst != self.nid:
                raise SecAggError("stage collect_masked_vectors: a share says it is from %d to %d, "
                                  "received from %d" % (actual, dst, src))
            seed_shares[src], sk1_shares[src] = b_share, sk_share
        params = content.get(FITINS_PARAMS)
        if not isinstance(params, ob.ArrayRecord):
            raise SecAggError("stage collect_masked_vectors: no %r ArrayRecord to train" % FITINS_PARAMS)
        pairwise = OrderedDict()
        for nid in srcs:
            pairwise[nid] = yield CryptoStep("shared_key", self.sk1, self.public_keys[nid][0])
        fit_cfg = content.get(FITINS_CONFIG)
        arrays, num, metrics = train(list(params.values()), dict(fit_cfg) if isinstance(fit_cfg, Mapping) else {})
        masked = self.mask(arrays, num, pairwise)
        self.seed_shares, self.sk1_shares = seed_shares, sk1_shares
        reply: "OrderedDict[str, Any]" = OrderedDict([
            ("fitres.metrics", ob.ConfigRecord(metrics)),
            ("fitres.num_examples", ob.MetricRecord([("num_examples", int(num))])),
            ("fitres.parameters", ob.ArrayRecord()),  # cleared, as secaggplus_mod does
            ("fitres.status", ob.ConfigRecord([("code", 0), ("message", "Success")]))])
        self.last_masked = masked
        return OrderedDict([("masked_params", [ob.npy_bytes(a) for a in masked])]), reply

    def mask(self, arrays: Sequence[np.ndarray], num_examples: int,
             pairwise: Mapping[int, bytes]) -> List[np.ndarray]:
        """``[q] + quantize(q / target_range * arrays)`` plus the self mask and the pairwise masks
        (``pairwise``: neighbour -> the key agreed with its ``pk1``), modulo ``mod_range`` (int64
        arrays, as ``secaggplus_mod`` sends them)."""
        q_ratio = int(round(num_examples / self.max_weight * self.target_range))
        dq = q_ratio / self.target_range
        vec = [np.array([q_ratio], dtype=np.int64)] + sc.quantize(
            [np.asarray(a, dtype=np.float64) * dq for a in arrays], self.clipping_range, self.target_range)
        shapes = [a.shape for a in vec]
        vec = [v + m for v, m in zip(vec, sc.pseudo_rand_gen(self.rd_seed, self.mod_range, shapes))]
        for nid, key in pairwise.items():
            masks = sc.pseudo_rand_gen(key, self.mod_range, shapes)
            vec = [v + m if self.nid > nid else v - m for v, m in zip(vec, masks)]
        return [v & (self.mod_range - 1) for v in vec]

    def _unmask(self, cfg: Mapping[str, Any]) -> Dict[str, Any]:
        active, dead = _int_list(cfg, "active_nids", UNMASK), _int_list(cfg, "dead_nids", UNMASK)
        if len(active) < self.threshold:
            raise SecAggError("stage unmask: %d active neighbours, fewer than the threshold %d"
                              % (len(active), self.threshold))
        if set(active) & set(dead):
            raise SecAggError("stage unmask: a node is listed both active and dead")
        try:
            shares = [self.seed_shares[n] for n in active] + [self.sk1_shares[n] for n in dead]
        except KeyError as e:
            raise SecAggError("stage unmask: no share of node %s (not a neighbour that shared)" % e) from None
        return OrderedDict([("nids", active + dead), ("shares", shares)])


def declared_check(check: Optional[Callable[[Any], Any]], names: Sequence[str]) -> Callable[[Any], Any]:
    """The node's check of an ArrayRecord's declared arrays, also taking flwr's legacy ``Parameters``
    (arrays "0".."n-1" with no declared dtype or shape: the model's parameters by position; each
    array's ``.npy`` header then says its shape, checked by the trainer before any use)."""
    def run(declared: Mapping[str, Tuple[Any, str]]) -> Any:
        if declared and all(dt == "" for _, dt in declared.values()):
            want = [str(i) for i in range(len(names))]
            if list(declared) != want:
                raise SecAggError("legacy parameters must be the model's %d arrays by position ('0'..), got %d "
                                  "named %s" % (len(names), len(declared), list(declared)[:5]))
            return None
        return check(declared) if check is not None else None
    return run


def mod_steps(clients: "Dict[int, SecAggPlusClient]", run_id: int, node_id: int, content: Mapping[str, Any],
              call_next: Handler, names: Sequence[str], crypto_outside: bool = False) -> Steps:
    """flwr's ``secaggplus_mod`` around the node's handler: returns (reply content, Answer) for a SecAgg+ stage
    message of run ``run_id``; the collect stage trains through ``call_next`` (parameters go by position, in
    the model's order ``names``). Its CryptoSteps are yielded when ``crypto_outside`` (the driver answers
    each), else performed here (:func:`pytrain.flower.secagg_crypto.perform`)."""
    client = clients.setdefault(int(run_id), SecAggPlusClient())
    names = list(names)
    got: List[Answer] = []

    def train(arrays: List[np.ndarray], config: Dict[str, Any]):
        if len(arrays) != len(names):
            raise SecAggError("the server sent %d parameters, the model has %d" % (len(arrays), len(names)))
        answer = call_next(Task("train", OrderedDict(zip(names, arrays)), config))
        got.append(answer)
        return [answer.arrays[n] for n in names], answer.num_examples, answer.metrics

    steps = client.handle_steps(node_id, content, train)
    result: Any = None
    while True:
        try:
            step = steps.send(result)
        except StopIteration as done:
            reply = done.value
            break
        result = (yield step) if crypto_outside else sc.perform(step)
    trained = got[-1] if got else Answer(None, 0, OrderedDict())
    metrics = OrderedDict([("secagg", client.stage)] + list(trained.metrics.items()))
    return reply, Answer(None, trained.num_examples, metrics, trained.privacy)

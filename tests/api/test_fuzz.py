"""Seeded mutation fuzzing of models and checkpoints: every mutant runs the whole user path in
a worker process with a memory cap and a time limit (tests/helpers/fuzz_harness.py). What must hold:

* no mutant escapes as anything but a ``pytrain.errors`` exception: no other exception, no crash, no hang,
  no allocation past the cap;
* every model pytrain accepts exports a model that ``onnx.checker`` accepts (full check).
"""
from __future__ import annotations

import random
from typing import Dict, List

import onnx
import pytest
import torch

import fuzz_harness as F
import torch_models as TM
from pytrain.generator import models

MODEL_MUTANTS = 2000
CHECKPOINT_MUTANTS = 600


def _seeds() -> Dict[str, bytes]:
    torch.manual_seed(0)
    return {
        "mlp": models.to_bytes(models.mlp(6, [5], 3)),
        "cnn": models.to_bytes(models.cnn((1, 8, 8), 3, channels=(2,), hidden=4)),
        "torch-cnn-bn": TM.export(TM.CNN().eval(), torch.zeros(2, 1, 12, 12)),
        "torch-tokens": TM.export(TM.TokenModel().eval(), torch.zeros(2, 5, dtype=torch.long)),
    }


@pytest.fixture(scope="module")
def fuzzer():
    f = F.Fuzzer()
    yield f
    f.close()


def _report(escaped: List[str], checker: List[str], counts: Dict[str, int]) -> str:
    lines = ["outcomes: %s" % counts]
    lines += ["ESCAPED " + e for e in escaped[:15]]
    lines += ["CHECKER " + c for c in checker[:15]]
    return "\n".join(lines)


def test_seed_models_pass_the_whole_path(fuzzer):
    for name, data in _seeds().items():
        kind, exported = fuzzer.run("model", data)
        assert kind == "accepted", (name, exported)
        onnx.checker.check_model(onnx.load_from_string(exported), full_check=True)


def test_model_mutants_only_raise_pytrain_errors(fuzzer):
    seeds = _seeds()
    names = sorted(seeds)
    counts = {k: 0 for k in F.RESULT_KINDS}
    escaped: List[str] = []
    checker: List[str] = []
    for i in range(MODEL_MUTANTS):
        rng = random.Random(i)
        name = names[i % len(names)]
        try:
            mutant = F.structural(seeds[name], rng) if i % 3 == 0 else rng.choice(F.BYTE_MUTATORS)(seeds[name], rng)
        except Exception:  # onnx could not parse a structurally mutated seed: use a byte mutant
            mutant = F.flip_bits(seeds[name], rng)
        if i == 7:
            mutant = F.deep_nesting_bytes()
        kind, detail = fuzzer.run("model", mutant)
        counts[kind] += 1
        if kind == "escaped":
            escaped.append("mutant %d of %s: %s" % (i, name, detail))
        elif kind == "accepted":
            try:
                onnx.checker.check_model(onnx.load_from_string(detail), full_check=True)
            except Exception as e:  # noqa: BLE001
                checker.append("mutant %d of %s: %s" % (i, name, str(e).splitlines()[0][:200]))
    assert not escaped and not checker, _report(escaped, checker, counts)
    assert counts["refused"] > MODEL_MUTANTS // 4  # the mutators do break models


def test_checkpoint_mutants_only_raise_pytrain_errors(fuzzer):
    arts, checkpoint = F.trained_mlp()  # with optimizer state, as a saved run has
    blob = ('{"training": "%s", "eval": "%s", "optimizer": "%s"}' % (
        arts.training_model.hex(), arts.eval_model.hex(), arts.optimizer_model.hex())).encode()
    counts = {k: 0 for k in F.RESULT_KINDS}
    escaped: List[str] = []
    assert fuzzer.run("checkpoint", checkpoint, blob)[0] == "accepted"
    for i in range(CHECKPOINT_MUTANTS):
        rng = random.Random(10_000 + i)
        mutant = F.checkpoint_mutant(checkpoint, rng)
        kind, detail = fuzzer.run("checkpoint", mutant, blob)
        counts[kind] += 1
        if kind == "escaped":
            escaped.append("checkpoint mutant %d: %s" % (i, detail))
    assert not escaped, _report(escaped, [], counts)
    assert counts["refused"] > CHECKPOINT_MUTANTS // 2

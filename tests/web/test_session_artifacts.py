"""The session holds each frozen weight once (issue 21, item 6): the training and eval models of artifacts pytrain
made are not kept as bytes beside the Module (pytrain/webapp/held_artifacts.py) but serialized again from it, byte
for byte what the generator made, for a saved run and a run file; going back to the last good checkpoint builds
the Module on the same models (no copy) and the same weights; ready-made artifacts keep their bytes as uploaded."""
from __future__ import annotations

import io
import zipfile

import numpy as np

from pytrain.generator import models
from pytrain import webapp
from pytrain.generator.artifacts import ARTIFACT_FILES
from pytrain.webapp import model_source


def _upload() -> bytes:
    return models.to_bytes(models.mlp(6, [16], 2, seed=0))


def _session(blob: bytes) -> webapp.Session:
    s = webapp.Session()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 6)).astype(np.float32)
    s.use_arrays(x, (x[:, 0] > 0).astype(np.int64), classes=["no", "yes"])
    s.configure(batch_size=8, lr=0.05)
    s.generate(blob, lora={"rank": 2})
    return s


def test_generated_models_are_held_once_and_saved_byte_for_byte_and_restore_good_shares_them():
    blob = _upload()
    made, _ = model_source.upload(blob, model_source.GenerateOptions(lora={"rank": 2}))   # the generator's bytes, the oracle
    s = _session(blob)
    assert sorted(s.artifacts.models) == ["eval", "training"]
    assert s.artifacts.held_bytes() == len(made["optimizer"]) + len(made["checkpoint"])
    assert dict(s.artifacts) == made
    assert s.snapshot()["artifacts"] == made
    with zipfile.ZipFile(io.BytesIO(s.run_file())) as z:
        for role in ("training", "eval", "optimizer"):
            assert z.read(ARTIFACT_FILES[role]) == made[role], role

    good = s.digest()
    held = s.run.module.models
    s.train_for(budget_ms=1e9, max_steps=3)
    assert s.run.at.step == 3 and s.digest() != good
    back = s.restore_good()
    assert back["digest"] == good and s.run.at.step == 0
    assert all(s.run.module.models[role] is held[role] for role in ("training", "eval"))   # read again, not copied
    assert all(s.artifacts[role] == made[role] for role in ("training", "eval", "optimizer"))
    assert s.train_for(budget_ms=1e9, max_steps=3)["losses"] == _session(blob).train_for(budget_ms=1e9, max_steps=3)["losses"]


def test_ready_made_artifacts_keep_their_bytes():
    made, _ = model_source.upload(_upload(), model_source.GenerateOptions(lora={"rank": 2}))
    s = webapp.Session()
    s.use_artifacts(made["training"], made["eval"], made["optimizer"], made["checkpoint"])
    assert s.artifacts.models == {} and s.artifacts.held_bytes() == sum(len(v) for v in made.values())
    assert dict(s.artifacts) == made

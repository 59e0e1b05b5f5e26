"""Layer 8, the run. One training run, as the CLI, the page and a Flower node share it (they are thin drivers):

* :mod:`~pytrain.run.loop`: the resumable step generator (epochs, batches, divergence stop);
* :mod:`~pytrain.run.evaluate`: one batched evaluation and its metrics;
* :mod:`~pytrain.run.scaling`: the one scaler for features and regression targets;
* :mod:`~pytrain.run.properties`: the checkpoint properties a run records;
* :mod:`~pytrain.run.artifact_dir`, :mod:`~pytrain.run.dataset`: the artifacts and the data of a run;
* :mod:`~pytrain.run.runfile`: the run file (one zip for a whole run).
"""
from __future__ import annotations

from pytrain.run.evaluate import Evaluation, evaluate
from pytrain.run.loop import LossExploded, LossWatch, Position, Step, epoch_batches, steps

__all__ = ["Evaluation", "LossExploded", "LossWatch", "Position", "Step", "epoch_batches", "evaluate", "steps"]

"""Layer 8, the run: one training run as the CLI, the page and a Flower node share it (they are thin drivers): the
step loop, evaluation, the scaler, checkpoint properties, a run's artifacts and data, the run file."""
# loop: the resumable step generator (epochs, batches, divergence stop); evaluate: one batched evaluation and
# its metrics; scaling: the one scaler for features and regression targets; properties: the checkpoint
# properties a run records; artifact_dir, dataset: the artifacts and the data of a run; runfile: the run file
# (one zip for a whole run).
from __future__ import annotations

from pytrain.run.evaluate import Evaluation, evaluate
from pytrain.run.loop import LossExploded, LossWatch, Position, Step, epoch_batches, steps

__all__ = ["Evaluation", "LossExploded", "LossWatch", "Position", "Step", "epoch_batches", "evaluate", "steps"]

"""The checkpoint properties a training run records, spelled once: what the CLI, the page and
the run file read and write besides parameters and optimizer state."""
from __future__ import annotations

import json
from typing import Any, Dict

from pytrain.errors import CheckpointError

# "epoch", "step" and "seed" are plain names so other tools (and the browser UI) can read them;
# the rest are namespaced.
P_EPOCH = "epoch"            # completed epochs
P_STEP = "step"              # optimizer steps taken in all
P_SEED = "seed"
P_EPOCH_STEP = "epoch_step"  # batches done in the current, unfinished epoch (0 at a boundary)
P_BATCH_SIZE = "batch_size"  # the page's settings, kept with its progress
P_LR = "lr"
P_LOSS = "pytrain.loss"      # ce / mse / bce / l1
P_REDUCTION = "pytrain.reduction"
P_OUTPUTS = "pytrain.outputs"  # JSON list: the inference model's outputs
P_TRAIN = "pytrain.train"    # JSON: settings of the run, checked on --resume
P_CLASSES = "pytrain.classes"  # JSON list: text class labels, id = position
P_STANDARDIZER = "pytrain.standardizer"  # JSON, see pytrain.data.Standardizer.to_json
# JSON {"output", "mean", "std"}: the model learns regression targets as (y - mean) / std (the
# page's target scaling); train and eval scale the targets, metrics and export un-scale the output
P_TARGET_SCALING = "pytrain.target_scaling"
# JSON list: a table's columns as typed (see pytrain.run.rows); exports take its rows as typed
P_ROWS = "pytrain.rows"
# why ``pytrain train --resume`` cannot continue this checkpoint's run exactly (set by the page's run file)
P_NO_RESUME = "pytrain.no_resume"
P_EPOCH_LOSS = "pytrain.epoch_loss_sum"  # sum over the unfinished epoch's batches, for its mean
P_EPOCH_SEEN = "pytrain.epoch_samples"

#: the page's loss names and the kinds recorded in :data:`P_LOSS`
LOSS_KINDS = {"CrossEntropyLoss": "ce", "MSELoss": "mse", "BCEWithLogitsLoss": "bce", "L1Loss": "l1",
              "CausalLMLoss": "clm"}


def json_property(state: Any, key: str, default: Any = None) -> Any:
    """A JSON-encoded checkpoint property, or ``default`` when absent."""
    raw = state.properties.get(key)
    if raw is None:
        return default
    try:
        return json.loads(str(raw))
    except ValueError:
        raise CheckpointError("checkpoint property {!r} is not valid JSON: {!r}".format(key, raw)) from None


def read_settings(state: Any) -> Dict[str, Any]:
    """The training settings recorded by the last ``pytrain train`` (or run file) on this checkpoint."""
    return json_property(state, P_TRAIN, {}) or {}

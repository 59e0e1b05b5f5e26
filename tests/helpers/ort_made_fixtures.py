"""Reading the ORT-made fixtures (tests/compat/fixtures/ort_made_models/<case>/steps.npz)."""
from __future__ import annotations

from typing import List

import numpy as np


def batch_inputs(steps) -> List[np.ndarray]:
    """The user inputs' batches a steps.npz holds: ``x``, or ``x0``, ``x1``, .. (float16 where the
    fixture stored them so: the values ORT was given, exactly, widened back to float32)."""
    names = ["x"] if "x" in steps.files else sorted(k for k in steps.files if k[0] == "x" and k[1:].isdigit())
    return [steps[k].astype(np.float32) if steps[k].dtype == np.float16 else steps[k] for k in names]

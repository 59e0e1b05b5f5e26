"""A small synthetic digits binary in the site's format (pytrain.webapp.demo.read_mnist): class k lights
up row band k over noise, so a model learns it in a few steps."""
from __future__ import annotations

import numpy as np

from pytrain import webapp


def digits_blob(n: int = 600, seed: int = 0, noise: int = 40) -> bytes:
    """``n`` 28x28 uint8 digits with their labels, seeded."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=n).astype(np.uint8)
    images = (rng.rand(n, 28, 28) * noise).astype(np.uint8)
    for i, k in enumerate(labels):
        images[i, 2 + 2 * k:4 + 2 * k, 4:24] = 255
    return (webapp.MNIST_MAGIC + n.to_bytes(4, "little") + (28).to_bytes(2, "little") + (28).to_bytes(2, "little")
            + labels.tobytes() + images.tobytes())

"""Image folders: one sub-folder per class, its name the label. Needs Pillow (optional)."""
from __future__ import annotations

import io
import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pytrain.data.dataset import Dataset
from pytrain.errors import DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".pbm",
                    ".tif", ".tiff")
_MODES = {"L": 1, "RGB": 3}


def _pillow():
    try:
        from PIL import Image  # type: ignore
    except ImportError:
        raise DataError("reading images needs Pillow, which is not installed "
                        "(pip install pillow)") from None
    return Image


def _to_array(Image, data: bytes, where: str, mode: str,
              size: Optional[Tuple[int, int]]) -> np.ndarray:
    """One image as float32 [C, H, W] in [0, 1]."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            img = img.convert(mode)
            if size is not None and (img.height, img.width) != tuple(size):
                resample = getattr(Image, "BILINEAR", 2)
                img = img.resize((int(size[1]), int(size[0])), resample)
            arr = np.asarray(img, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError) as e:
        raise DataError("{} is not a readable image ({})".format(where, e)) from None
    if arr.ndim == 2:
        arr = arr[None, :, :]
    else:
        arr = arr.transpose(2, 0, 1)
    return arr.astype(np.float32) / np.float32(255.0)


def load_images(images: Mapping[str, Sequence[Tuple[str, bytes]]], *,
                size: Optional[Tuple[int, int]] = None, color: str = "L",
                classes: Optional[Sequence[str]] = None, source: str = "<images>") -> Dataset:
    """Images held in memory, ``{label: [(file name, bytes), ...]}``, as an NCHW float32 Dataset.

    ``size`` is (height, width) to resize to (None: every image must already share one size);
    ``color`` is "L" (grayscale, C=1) or "RGB" (C=3). Class ids follow the sorted labels, or
    ``classes`` when given (the training set's, for a validation set).
    """
    if color not in _MODES:
        raise DataError("color must be 'L' (grayscale) or 'RGB', got {!r}".format(color))
    if size is not None:
        if len(size) != 2 or min(int(s) for s in size) <= 0:
            raise DataError("image size must be (height, width) with positive values, got {!r}"
                            .format(size))
    Image = _pillow()
    labels = sorted(images) if classes is None else [str(c) for c in classes]
    for lab in images:
        if lab not in labels:
            raise DataError("{}: class {!r} is not one of the known classes: {}".format(
                source, lab, ", ".join(labels)))
    xs: List[np.ndarray] = []
    ys: List[int] = []
    first: Optional[Tuple[str, tuple]] = None
    for cid, lab in enumerate(labels):
        for fname, data in images.get(lab, ()):
            where = "{}/{}".format(lab, fname)
            arr = _to_array(Image, data, "{} image {!r}".format(source, where), color, size)
            if first is None:
                first = (where, arr.shape)
            elif arr.shape != first[1]:
                raise DataError("{}: image {!r} is {}x{} (width x height) but {!r} is {}x{}; pass "
                                "a size to resize them all".format(source, where, arr.shape[2],
                                                                   arr.shape[1], first[0],
                                                                   first[1][2], first[1][1]))
            xs.append(arr)
            ys.append(cid)
    if not xs:
        raise DataError("{}: no images found (expected one sub-folder per class holding {} files)"
                        .format(source, "/".join(IMAGE_EXTENSIONS[:4])))
    return Dataset(np.stack(xs), np.array(ys, dtype=np.int64), labels, None, "classification",
                   source)


def load_image_folder(path: str, *, size: Optional[Tuple[int, int]] = None, color: str = "L",
                      classes: Optional[Sequence[str]] = None) -> Dataset:
    """Load ``path/<label>/<image files>`` as an NCHW float32 Dataset scaled to [0, 1].

    See :func:`load_images` for ``size``, ``color`` and ``classes``. Hidden files and files
    without an image extension are skipped.
    """
    _pillow()
    if not os.path.isdir(path):
        raise DataError("image folder {!r} does not exist or is not a directory".format(path))
    subdirs = sorted(d for d in os.listdir(path)
                     if not d.startswith(".") and os.path.isdir(os.path.join(path, d)))
    if not subdirs:
        raise DataError("image folder {!r} has no class sub-folders (expected {}/<label>/<images>)"
                        .format(path, path))
    images: Dict[str, List[Tuple[str, bytes]]] = {}
    for d in subdirs:
        files = sorted(f for f in os.listdir(os.path.join(path, d))
                       if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS))
        entries = []
        for f in files:
            with open(os.path.join(path, d, f), "rb") as fh:
                entries.append((f, fh.read()))
        images[d] = entries
    return load_images(images, size=size, color=color, classes=classes, source=path)

"""The data options shared by ``train``, ``eval`` and ``federate`` (read by
:class:`pytrain.run.dataset.DataRequest`)."""
from __future__ import annotations

import argparse


def add_data_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--data and the options that say how to read it."""
    p.add_argument("--data", required=required, metavar="FILE",
                   help=".npz (arrays x, y), .csv (needs --label), an image folder "
                        "(one sub-folder per class), or a raw float32 input file (with --expected)")
    p.add_argument("--label", metavar="COL", help="label column of a CSV file")
    p.add_argument("--expected", metavar="FILE",
                   help="raw little-endian float32 expected outputs (onert_train format)")
    p.add_argument("--input-shape", type=int, nargs="+", metavar="D",
                   help="one sample's shape in a raw input file (default: the model input's)")
    p.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"),
                   help="resize images to H x W (default: the model input's)")

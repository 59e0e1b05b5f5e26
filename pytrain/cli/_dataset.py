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


def add_text_options(p: argparse.ArgumentParser) -> None:
    """--text / --text-csv (instead of --data) and the options that say how to encode it
    (read by :class:`pytrain.run.text.TextRequest`)."""
    p.add_argument("--text", metavar="FILE", help="a text file a causal language model (generated with --loss clm) "
                                                  "trains on, cut into blocks of --block-size tokens")
    p.add_argument("--text-csv", metavar="FILE", help="a CSV of texts and labels a text classifier trains on")
    p.add_argument("--tokenizer", metavar="FILE", help="the model's tokenizer.json (needed with --text/--text-csv)")
    p.add_argument("--block-size", type=int, metavar="N",
                   help="tokens per sample (default: the model's fixed sequence length, else 64)")
    p.add_argument("--text-column", metavar="COL", help="text column of --text-csv (default: the first)")
    p.add_argument("--label-column", metavar="COL", help="label column of --text-csv (default: the last)")
    p.add_argument("--model-config", metavar="FILE", help="the model's config.json (Hugging Face), read for the heads "
                                                          "and head size of an empty past when the model's shapes do "
                                                          "not fix them")

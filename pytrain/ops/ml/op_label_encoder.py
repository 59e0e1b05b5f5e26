"""LabelEncoder (ai.onnx.ml, versions 2 and 3 without tensor attributes): each value of X mapped
through keys -> values, the default for a value that is no key. The page's table exports use it
to turn a text column's cells into category ids (``pytrain.run.rows``)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import ModelFormatError
from pytrain.ops.registry import kernel

ML_DOMAIN = "ai.onnx.ml"


def _one(what, **given):
    got = [(k, v) for k, v in given.items() if v is not None]
    if len(got) != 1:
        raise ModelFormatError("LabelEncoder: expected exactly one of the %s attributes, got %s"
                               % (what, ", ".join(k for k, _ in got) or "none"))
    return got[0]


@kernel("LabelEncoder", domain=ML_DOMAIN)
def label_encoder(ctx, X, *, keys_strings=None, keys_int64s=None, keys_floats=None, values_strings=None,
                  values_int64s=None, values_floats=None, default_string="_Unused", default_int64=-1,
                  default_float=-0.0):
    key_name, keys = _one("keys_*", keys_strings=keys_strings, keys_int64s=keys_int64s, keys_floats=keys_floats)
    value_name, values = _one("values_*", values_strings=values_strings, values_int64s=values_int64s,
                              values_floats=values_floats)
    if len(keys) != len(values):
        raise ModelFormatError("LabelEncoder: %d keys but %d values" % (len(keys), len(values)))
    if value_name == "values_strings":
        dtype, default = np.dtype(object), default_string
    elif value_name == "values_int64s":
        dtype, default = np.dtype(np.int64), default_int64
    else:
        dtype, default = np.dtype(np.float32), default_float
    if key_name == "keys_strings":
        keys = [k.decode("utf-8") if isinstance(k, bytes) else str(k) for k in keys]
        cells = [c.decode("utf-8") if isinstance(c, bytes) else str(c) for c in np.asarray(X).reshape(-1).tolist()]
    else:
        cells = np.asarray(X).reshape(-1).tolist()
    table = dict(zip(keys, values))
    out = np.array([table.get(c, default) for c in cells], dtype=dtype)
    return (out.reshape(np.shape(X)),)

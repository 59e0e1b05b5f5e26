"""A table's rows as typed: the exported model of a table with text columns or missing values takes
the raw cells, the one-hot encoding and the missing-value fill the page applied while loading
(:func:`pytrain.data.load_csv` with ``onehot``/``missing``) built into the graph, as the scaling is
(:mod:`pytrain.run.scaling`).

The columns are described as :func:`pytrain.data.load_csv` reports them (``dataset.columns``): in
the table's order, ``{"name", "kind": "number", "fill"}`` or ``{"name", "kind": "text", "values"}``.
The exported model then has two inputs (see ``docs/web.md``, "Exports of tables"):

* the model's own input (``input``), float32 ``[N, number columns]``: the number columns in the
  table's order, NaN for a missing value (filled with the column's mean over the training table);
* ``text``, string ``[N, text columns]``: the text columns in the table's order, each cell as
  typed (without surrounding spaces); a value the table did not have (or a missing one) sets none
  of its column's one-hot values.

Inside, each text cell goes through ``ai.onnx.ml`` LabelEncoder (text -> category id) and an
Equal against the ids (-> the column's 0/1 values), so onnxruntime and pytrain run it as it is.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import DataError

#: the name of the exported model's string input (the text columns)
TEXT_INPUT = "text"
ML_DOMAIN = "ai.onnx.ml"
ML_OPSET = 2   # LabelEncoder-2: keys_strings -> values_int64s

Columns = List[Dict[str, Any]]


def numbers(columns: Columns) -> List[str]:
    return [c["name"] for c in columns if c["kind"] == "number"]


def texts(columns: Columns) -> List[str]:
    return [c["name"] for c in columns if c["kind"] == "text"]


def split_cells(rows: Sequence[Sequence[str]], columns: Columns,
                is_missing: Any) -> Tuple[np.ndarray, np.ndarray]:
    """Typed rows (one string per column, in the table's order) as the export's two inputs: the
    number columns (float32, NaN where ``is_missing``) and the text columns (strings, stripped).
    A number column holding a word is an error naming the column and what it expects."""
    nums, words = [], []
    for row in rows:
        if len(row) != len(columns):
            raise DataError("Type {} values separated by commas, one per column ({}); got {}".format(
                len(columns), ", ".join(c["name"] for c in columns), len(row)))
        num_row, text_row = [], []
        for cell, col in zip(row, columns):
            cell = str(cell).strip()
            if col["kind"] == "text":
                text_row.append(cell)
                continue
            value = math.nan
            if not is_missing(cell):
                try:
                    value = float(cell)
                except ValueError:
                    value = math.nan
                if not math.isfinite(value):
                    raise DataError("Column {!r} takes a number, not {!r}{}".format(
                        col["name"], cell, " (leave it empty when it is not known)" if "fill" in col else ""))
            num_row.append(value)
        nums.append(num_row)
        words.append(text_row)
    return (np.asarray(nums, dtype=np.float32).reshape(len(rows), -1),
            np.asarray(words, dtype=object).reshape(len(rows), -1))


def feeds(model_input: str, columns: Columns, nums: np.ndarray, words: np.ndarray) -> Dict[str, np.ndarray]:
    """The exported model's inputs for :func:`split_cells`'s arrays."""
    out: Dict[str, np.ndarray] = {}
    if numbers(columns):
        out[model_input] = nums
    if texts(columns):
        out[TEXT_INPUT] = words
    return out


def bake(model_bytes: bytes, columns: Optional[Columns]) -> bytes:
    """The exported model taking raw rows (see the module's docstring); unchanged without ``columns``."""
    from pytrain.engine.graph import NameScope, NodeBuilder, all_names
    from pytrain.proto import ModelProto, make_opsetid, make_value_info
    from pytrain.base.dtypes import FLOAT, STRING

    if not columns:
        return model_bytes
    model = ModelProto.FromString(bytes(model_bytes))
    g = model.graph
    inits = {t.name for t in g.initializer}
    inp = [v for v in g.input if v.name not in inits][0]
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inp.type.tensor_type.shape.dim]
    scope = NameScope(all_names(g) | {TEXT_INPUT})
    b = NodeBuilder(scope, "rows/")
    encoded = scope.fresh(inp.name + ".encoded")
    nums_in, text_in = inp.name, TEXT_INPUT
    if numbers(columns):
        fills = [float(c["fill"]) for c in columns if c["kind"] == "number"]
        filled = b.op("Where", b.op("IsNaN", nums_in), b.const(fills), nums_in)
    pieces, j, t = [], 0, 0
    for col in columns:
        if col["kind"] == "number":
            pieces.append(b.op("Slice", filled, b.const([j], np.int64), b.const([j + 1], np.int64),
                               b.const([1], np.int64)))
            j += 1
            continue
        cell = b.op("Slice", text_in, b.const([t], np.int64), b.const([t + 1], np.int64), b.const([1], np.int64))
        t += 1
        values = list(col["values"])
        ids = b.op("LabelEncoder", cell, domain=ML_DOMAIN, keys_strings=values,
                   values_int64s=list(range(len(values))), default_int64=-1)
        hot = b.op("Equal", ids, b.const(np.arange(len(values)), np.int64))
        pieces.append(b.op("Cast", hot, to=FLOAT))
    joined = b.op("Concat", *pieces, axis=1) if len(pieces) > 1 else b.op("Identity", pieces[0])
    if len(dims) == 2 or not all(isinstance(d, int) and d > 0 for d in dims[1:]):
        b.nodes[-1].output[:] = [encoded]
    else:   # a model whose input is no flat row: its sample shape
        b.op("Reshape", joined, b.const([-1] + dims[1:], np.int64), out_names=[encoded])
    for n in g.node:
        n.input[:] = [encoded if i == inp.name else i for i in n.input]
    g.node[0:0] = b.nodes
    g.initializer.extend(b.initializer_protos())
    inputs = [v for v in g.input if v.name != inp.name]
    head = []
    if numbers(columns):
        head.append(make_value_info(nums_in, FLOAT, ["N", len(numbers(columns))]))
    if texts(columns):
        head.append(make_value_info(text_in, STRING, ["N", len(texts(columns))]))
    g.input[:] = head + inputs
    if not any(o.domain == ML_DOMAIN for o in model.opset_import):
        model.opset_import.append(make_opsetid(ML_DOMAIN, ML_OPSET))
    return model.SerializeToString()

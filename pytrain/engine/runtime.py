"""Inference with pytrain's own kernels, onnxruntime-style (for places with no onnxruntime,
such as the browser)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import InputError
from pytrain.engine import heap
from pytrain.engine.executor import Plan
from pytrain.proto import opset_version, value_info_type
from pytrain.engine.validate import load_model


class InferenceSession:
    """``InferenceSession(model).run(output_names or None, {input_name: array})``."""

    def __init__(self, model: Any, external_data: Optional[Mapping[str, bytes]] = None) -> None:
        """model: a path, bytes or ModelProto; external_data: {location: bytes} of its ONNX
        external-data files when ``model`` is not a path (a path reads them from its folder)."""
        heap.keep_freed_memory()  # every run reuses the last run's buffers, as a training step does
        self._model = load_model(model, external_data=external_data)
        g = self._model.graph
        inits = {t.name for t in g.initializer}
        self._inputs = [v for v in g.input if v.name not in inits]
        self._outputs = [v.name for v in g.output]
        self._plans: Dict[tuple, Plan] = {}

    def get_inputs(self) -> List[Any]:
        return list(self._inputs)

    def input_names(self) -> List[str]:
        return [v.name for v in self._inputs]

    def output_names(self) -> List[str]:
        return list(self._outputs)

    def run(self, output_names: Optional[Sequence[str]], feeds: Mapping[str, Any]) -> List[np.ndarray]:
        names = list(output_names or self._outputs)
        key = tuple(names)
        if key not in self._plans:
            self._plans[key] = Plan(self._model.graph, self.input_names(), names,
                                    opset=opset_version(self._model))
        values = []
        for v in self._inputs:
            if v.name not in feeds:
                raise InputError("missing input %r (the model's inputs: %s)" % (v.name, ", ".join(self.input_names())))
            et, _ = value_info_type(v)
            arr = np.asarray(feeds[v.name])
            if et and dtypes.is_four_bit(dtypes.to_numpy(et)):
                arr = dtypes.to_four_bit(arr, dtypes.to_numpy(et), "input %r" % v.name)
            elif et and arr.dtype != dtypes.to_numpy(et):
                arr = arr.astype(dtypes.to_numpy(et))
            values.append(arr)
        return [np.asarray(o) for o in self._plans[key].run(values)]

"""A backbone may name its tensors anything: one whose output is called ``features`` (and with a
tensor called ``pooled``, the names the page gives its own neck) builds, trains, and exports one
graph that onnxruntime runs like the page."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from pytrain.webapp.session import Session  # noqa: E402

SIDE = 16


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)), x.mean(dim=1, keepdim=True)


def _backbone() -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Net().eval(), torch.zeros(2, 3, SIDE, SIDE), buf, dynamo=False, input_names=["img"],
                          output_names=["features", "pooled"], dynamic_axes={"img": {0: "b"}}, opset_version=17)
    return buf.getvalue()


def test_backbone_output_named_features_builds_trains_and_exports():
    blob = _backbone()
    assert [o.name for o in onnx.load_from_string(blob).graph.output] == ["features", "pooled"]
    rng = np.random.default_rng(0)
    y = np.arange(12) % 2
    x = (rng.random((12, 3, SIDE, SIDE)) * 0.2 + 0.8 * y[:, None, None, None]).astype(np.float32)
    s = Session()
    s.use_arrays(x, y, classes=["dark", "bright"], val_fraction=0.25)
    model = s.build_cnn("AdamW", backbone={"bytes": blob, "name": "features.onnx", "size": SIDE})
    assert model["origin"] == "backbone" and model["head_params"] == 4 * 2 + 2
    s.configure(batch_size=4, lr=0.05)
    s.train_for(budget_ms=1e9)
    exported = s.export()
    m = onnx.load_from_string(exported)
    onnx.checker.check_model(m)
    outs = [t for n in m.graph.node for t in n.output]
    assert len(outs) == len(set(outs)), "a tensor is defined twice"
    got = ort.InferenceSession(exported, providers=["CPUExecutionProvider"]).run(None, {"input": x[:3]})[0]
    page = np.array([s.predict(xi)["outputs"][0] for xi in x[:3]], np.float32)
    np.testing.assert_allclose(got, page, rtol=1e-4, atol=1e-4)

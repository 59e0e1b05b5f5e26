"""``pytrain inspect`` names a tied weight's exporter copy: on the exported model (what generate will tie)
and on the artifacts generate made from it (``summary["tied"]``, kept in the training layout), for a tiny
GPT-2 whose lm_head is its token embedding (TorchScript writes the lm_head's transposed use as a second
initializer, ``onnx::MatMul_<n>``)."""
from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_families import build, export  # noqa: E402
from pytrain.generator import artifacts  # noqa: E402
from pytrain.cli import main  # noqa: E402


def test_inspect_lists_the_tied_copy_of_the_model_and_of_its_artifacts(tmp_path, capsys):
    model, names = build("gpt2", "torchscript", tied=True)
    path = export(model, "gpt2", names, "torchscript", str(tmp_path))
    tied = artifacts.generate_artifacts(path, loss=artifacts.LossType.CrossEntropyLoss).summary["tied"]
    assert [t["parameter"] for t in tied] == ["hf.transformer.wte.weight"]
    copy = tied[0]["copy"]
    assert copy.startswith("onnx::MatMul_")
    row = re.compile(r"^\s+%s\s+= transpose of\s+hf\.transformer\.wte\.weight$" % re.escape(copy), re.M)

    capsys.readouterr()
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "tied: 1 exporter copy of a tied weight" in out and row.search(out), out

    art = str(tmp_path / "art")
    assert main(["generate", path, "-o", art]) == 0
    capsys.readouterr()
    assert main(["inspect", art]) == 0
    out = capsys.readouterr().out
    assert "tied: 1 exporter copy of a tied weight" in out and row.search(out), out
    assert main(["inspect", os.path.join(art, "training_model.onnx")]) == 0
    assert row.search(capsys.readouterr().out)


def test_inspect_of_an_untied_model_shows_no_tied_line(tmp_path, capsys):
    model, names = build("gpt2", "torchscript")
    path = export(model, "gpt2", names, "torchscript", str(tmp_path))
    capsys.readouterr()
    assert main(["inspect", path]) == 0
    assert "tied:" not in capsys.readouterr().out

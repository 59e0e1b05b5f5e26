"""The transformers.js folder of a model fine-tuned in "Your text" (natively, the tab's own Python) and by
``pytrain export --format transformers.js``: a Hub folder's zip is taken as the upload (its quantized file by
default, as transformers.js loads it in a browser), and the download holds config.json, the tokenizer files,
onnx/model.onnx (the float merge: the tab's logits in onnxruntime, past and present kept) and
onnx/model_quantized.onnx requantized in the upload's scheme (within a quantization step of the float merge); a q4
upload comes back as onnx/model_q4.onnx, named the default in config.json."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from hub_fixtures import CORPUS, HUB, hub, ort_session, specs  # noqa: E402
from quant_oracle import exact_integer_matmuls  # noqa: E402

from pytrain.cli import main  # noqa: E402
from pytrain.text.hub_folder import unpack, zip_folder  # noqa: E402
from pytrain.text.hub_inputs import plan_model  # noqa: E402
from pytrain.webapp import Session  # noqa: E402

LORA = {"rank": 4, "alpha": 8, "targets": None}


def _zip(name):
    d = HUB / name
    return zip_folder({p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file()}, name)


@pytest.fixture(scope="module")
def quantized_tab():
    """The tab on the GPT-2 folder's zip (model_quantized.onnx by default), 4 AdamW steps, and its download."""
    s = Session()
    s.configure(batch_size=4, lr=0.02)
    res = s.text("use", model=_zip("gpt2"), name="gpt2.zip", text=CORPUS, block_size=16, lora=LORA)
    s.train_for(budget_ms=1e9, max_steps=4)
    return s, res, unpack({"download.zip": s.text("transformers_js")})


def test_a_hub_folders_zip_trains_its_quantized_file_and_downloads_both_forms(quantized_tab):
    s, res, folder = quantized_tab
    h = hub("gpt2")
    assert all(w.endswith("_quantized") for w in res["model"]["lora"]["weights"])   # the q8 file's blocks
    assert "onnx/model_quantized.onnx trains (q8; the folder also holds fp32)" in res["notes"]
    assert sorted(k for k in folder if k != "oracle.json") == [
        "config.json", "onnx/model.onnx", "onnx/model_quantized.onnx", "tokenizer.json", "tokenizer_config.json"]
    assert folder["tokenizer.json"] == h.tokenizer.read_bytes()
    assert "transformers.js_config" not in json.loads(folder["config.json"])   # each runtime finds its default
    merged, requant = folder["onnx/model.onnx"], folder["onnx/model_quantized.onnx"]
    assert merged == s.export(raw_rows=False)
    ops = {n.op_type for n in onnx.load_from_string(requant).graph.node}
    assert "MatMulInteger" in ops and "MatMul" in ops   # the upload's blocks, the float lm_head
    for blob in (merged, requant):
        assert specs(blob) == specs(h.model)
        assert [o.name for o in ort_session(blob).get_outputs()] == [o.name for o in ort_session(h.model).get_outputs()]
    ids = np.asarray(h.oracle["inputs"]["input_ids"], dtype=np.int64)
    feeds = plan_model(merged, h.config).arrays(ids)
    out = s.text("logits", ids=ids.tolist())
    tab = np.frombuffer(out["logits"], dtype=np.float32).reshape(out["shape"])

    def exact(blob):   # onnxruntime with the unadapted q8 blocks' MatMulInteger exact (docs/quantized.md)
        return ort_session(exact_integer_matmuls(onnx.load_from_string(blob))).run(["logits"], feeds)[0]

    np.testing.assert_allclose(exact(merged), tab, atol=1e-4, rtol=1e-4)
    assert np.abs(exact(requant) - tab).max() <= 0.02 * np.ptp(tab)   # a quantization step of the adapted weights


def test_the_float_file_chosen_downloads_model_onnx_alone_for_every_runtime_also_after_a_resume():
    s = Session()
    s.configure(batch_size=4, lr=0.02)
    s.text("use", model=_zip("gpt2"), name="gpt2.zip", text=CORPUS, block_size=16, lora=LORA, dtype="fp32")
    s.train_for(budget_ms=1e9, max_steps=1)
    folder = unpack({"d.zip": s.text("transformers_js")})
    assert [k for k in folder if k.startswith("onnx/")] == ["onnx/model.onnx"]
    assert json.loads(folder["config.json"])["transformers.js_config"] == {"dtype": "fp32"}
    snap = s.snapshot()   # a saved run (the page's resume after a reload) downloads the same folder
    again = Session()
    again.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], snap["data"])
    assert unpack({"d.zip": again.text("transformers_js")}) == folder


def test_the_cli_exports_the_transformers_js_folder_of_a_quantized_run(capsys, tmp_path):
    h = hub("gpt2")
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    arts = tmp_path / "arts"
    assert main(["generate", str(h.folder / "onnx" / "model_quantized.onnx"), "-o", str(arts), "--loss", "clm",
                 "--lora", "4:8", "--lora-targets", "c_attn"]) == 0
    assert main(["train", str(arts), "--text", str(tmp_path / "corpus.txt"), "--tokenizer", str(h.tokenizer),
                 "--block-size", "16", "--batch-size", "4", "--epochs", "1", "--quiet"]) == 0
    out = tmp_path / "tjs"
    assert main(["export", str(arts), "-o", str(out), "--format", "transformers.js", "--hub", str(h.folder)]) == 0
    assert (out / "onnx" / "model.onnx").is_file() and (out / "tokenizer_config.json").is_file()
    requant = (out / "onnx" / "model_quantized.onnx").read_bytes()
    assert "MatMulInteger" in {n.op_type for n in onnx.load_from_string(requant).graph.node}
    assert [o.name for o in ort_session(requant).get_outputs()] == [o.name for o in ort_session(h.model).get_outputs()]
    with pytest.raises(SystemExit, match="needs --hub"):
        main(["export", str(arts), "-o", str(tmp_path / "t.zip"), "--format", "transformers.js"])


def test_a_q4_upload_downloads_model_q4_onnx_requantized_and_names_it_the_default():
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    from test_qlora import gemm_as_matmul

    h = hub("gpt2")
    q = MatMulNBitsQuantizer(gemm_as_matmul(onnx.load_from_string(h.model)),
                             algo_config=DefaultWeightOnlyQuantConfig(block_size=16, is_symmetric=True))
    q.process()
    s = Session()
    s.configure(batch_size=4, lr=0.02)
    s.text("use", model=q.model.model.SerializeToString(), name="onnx/model_q4.onnx",
           tokenizer=h.tokenizer.read_text(encoding="utf-8"), text=CORPUS, block_size=16, lora=LORA,
           extra_files={"config.json": (h.folder / "config.json").read_bytes()})
    s.train_for(budget_ms=1e9, max_steps=1)
    folder = unpack({"d.zip": s.text("transformers_js")})
    assert [k for k in sorted(folder) if k.startswith("onnx/")] == ["onnx/model.onnx", "onnx/model_q4.onnx"]
    assert json.loads(folder["config.json"])["transformers.js_config"] == {"dtype": "q4"}   # no q8 file to find
    requant = folder["onnx/model_q4.onnx"]
    assert "MatMulNBits" in {n.op_type for n in onnx.load_from_string(requant).graph.node}
    assert [o.name for o in ort_session(requant).get_outputs()] == [o.name for o in ort_session(h.model).get_outputs()]

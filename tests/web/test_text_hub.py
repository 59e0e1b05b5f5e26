"""The page's "Your text" on models as the Hugging Face Hub has them (tests/fixtures/hub, Optimum's default task:
with past; Phi-3 also without): the tab takes them with the config.json chosen beside them, its first loss is
transformers' on the same blocks, its logits are onnxruntime's on the same upload (positions from the mask, an
empty past), and its greedy sample is onnxruntime's greedy loop with the cache on its export."""
from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from hub_fixtures import CORPUS, first_batch_loss, greedy, hub, open_past_heads, ort_session, specs  # noqa: E402

from pytrain.text import hub_inputs  # noqa: E402
from pytrain.webapp import Session  # noqa: E402


@pytest.mark.parametrize("name", ["llama", "phi3-no-past"])
def test_the_tabs_first_loss_logits_and_samples_are_transformers_and_onnxruntimes(name):
    h = hub(name)
    s = Session()
    s.configure(batch_size=4, lr=0.01)
    res = s.text("use", model=h.model, tokenizer=h.tokenizer.read_text(encoding="utf-8"), text=CORPUS, block_size=16,
                 val_fraction=0.0, lora={"rank": 4, "alpha": 8, "targets": ["o_proj"]}, name=name,
                 extra_files={"config.json": (h.folder / "config.json").read_bytes()})
    assert res["model"]["text"]["inputs"] == [n for n, _, _ in specs(h.model)]
    np.testing.assert_allclose(s.train_for(budget_ms=1e9, max_steps=1)["losses"][0], first_batch_loss(h.oracle, 4), rtol=1e-5)

    ids = np.asarray(h.oracle["inputs"]["input_ids"])
    mask = np.ones_like(ids)
    mask[1, :4] = 0
    out = s.text("logits", ids=ids.tolist(), mask=mask.tolist())
    got = np.frombuffer(out["logits"], dtype=np.float32).reshape(out["shape"])
    feed = hub_inputs.plan(specs(h.model), h.config)
    export = s.export(raw_rows=False)
    assert specs(export) == specs(h.model)
    assert [o.name for o in ort_session(export).get_outputs()] == [o.name for o in ort_session(h.model).get_outputs()]
    want = ort_session(export).run(["logits"], feed.arrays(ids, mask))[0]
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)

    prompt = h.oracle["greedy"]["prompt"]
    sample = s.text("samples", prompt=None, new_tokens=6)
    window = [int(i) for i in np.asarray(s.source.data["train_x"])[0][:8]]
    assert sample["ids"] == greedy(ort_session(export), feed, window, 6, cached=bool(feed.past))
    assert prompt == window[:len(prompt)]


def test_a_past_whose_heads_the_shapes_leave_open_needs_the_config_json_chosen_with_the_model():
    from pytrain.errors import DataError

    h = hub("qwen2")
    blob = open_past_heads(h.model)
    args = dict(model=blob, tokenizer=h.tokenizer.read_text(encoding="utf-8"), text=CORPUS, block_size=16, name="q.onnx",
                lora={"rank": 4, "alpha": 8, "targets": ["q_proj"]})
    with pytest.raises(DataError, match="'past_key_values.0.key' does not fix its heads.*config.json"):
        Session().text("use", **args)
    s = Session()
    s.configure(batch_size=4)
    s.text("use", extra_files={"config.json": (h.folder / "config.json").read_bytes()}, **args)
    s.train_for(budget_ms=1e9, max_steps=1)
    kept = s.model["text"]["input_specs"]
    assert [sp[1:] for sp in kept if sp[0] == "past_key_values.1.value"] == [[1, ["batch", 2, "past", 8]]]
    # the saved run (the page's snapshot) and the run file feed the past again without the config.json
    snap = s.snapshot()
    again = Session()
    again.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], snap["data"])
    file = Session()
    file.use_artifact_files({"run.zip": s.run_file(epochs=2)})
    want = s.train_for(budget_ms=1e9, max_steps=2)["losses"]
    assert again.train_for(budget_ms=1e9, max_steps=2)["losses"] == want == file.train_for(budget_ms=1e9, max_steps=2)["losses"]

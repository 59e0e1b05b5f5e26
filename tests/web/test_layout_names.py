"""The artifact file names have one spelling: web/js/layout.js (what the widget reads) equals
pytrain.base.layout.ARTIFACT_FILES, and no other web file spells them."""
import json
import re
from pathlib import Path

from pytrain.base.layout import ARTIFACT_FILES

WEB = Path(__file__).resolve().parents[2] / "web"


def _js_artifact_files():
    text = (WEB / "js" / "layout.js").read_text(encoding="utf-8")
    m = re.search(r"export const ARTIFACT_FILES = Object\.freeze\((\{.*?\})\);", text, re.S)
    assert m, "web/js/layout.js no longer declares ARTIFACT_FILES as a frozen object literal"
    return json.loads(m.group(1))


def test_js_artifact_files_equal_python():
    js = _js_artifact_files()
    assert js == ARTIFACT_FILES
    assert list(js) == list(ARTIFACT_FILES)   # same roles in the same order


def test_web_files_take_the_names_from_layout_js():
    spelled = []
    for path in sorted(WEB.rglob("*.js")):
        if path == WEB / "js" / "layout.js":
            continue
        text = path.read_text(encoding="utf-8")
        if any('"%s"' % name in text for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")):
            spelled.append(path.relative_to(WEB).as_posix())
    assert spelled == []
    assert 'from "./js/layout.js"' in (WEB / "pytrain-widget.js").read_text(encoding="utf-8")

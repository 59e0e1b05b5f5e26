"""web/pytrain-ort.d.ts and web/pytrain-widget.d.ts, checked with TypeScript (tsc --strict) against
onnxruntime-common 1.19.2's own types, both npm-installed into build/npm/ort-types (gitignored):

- tests/web/ort_types/training_example.ts uses pytrain-ort.js exactly as onnxruntime-training-examples'
  web demo and onnxruntime-web's docs use onnxruntime-web/training (only the import differs);
- tests/web/ort_types/assignable.ts assigns pytrain-ort's values to onnxruntime-common's types (and back);
- tests/web/ort_types/widget_example.ts uses pytrain-widget.js as the README and docs/web.md show it.

A type error in a deliberately wrong file is reported, so a passing check means the files type-check."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from buildsite.installs import ORT_TYPES_NPM, ensure_npm_folder
from build import ROOT

HERE = Path(__file__).resolve().parent / "ort_types"
DECLARATIONS = [ROOT / "web" / "pytrain-ort.d.ts", ROOT / "web" / "pytrain-widget.d.ts"]
TSC_OPTIONS = ["--strict", "--noEmit", "--target", "ES2020", "--module", "ES2020", "--moduleResolution", "bundler",
               "--lib", "ES2020,DOM"]

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm (Node.js)")


@pytest.fixture(scope="module")
def tsc(tmp_path_factory):
    """Run tsc on .ts files placed beside the two .d.ts files, in the folder where onnxruntime-common resolves."""
    folder = ensure_npm_folder("ort-types", ORT_TYPES_NPM)
    work = folder / "check"   # under node_modules' parent, so "onnxruntime-common" resolves
    if work.exists():
        shutil.rmtree(str(work))
    work.mkdir()
    for d in DECLARATIONS:
        shutil.copyfile(str(d), str(work / d.name))
    compiler = folder / "node_modules" / "typescript" / "bin" / "tsc"

    def run(files: Dict[str, str]):
        for name, text in files.items():
            (work / name).write_text(text, encoding="utf-8")
        return subprocess.run(["node", str(compiler)] + TSC_OPTIONS + sorted(files), cwd=str(work),
                              capture_output=True, text=True)
    return run


def test_declarations_type_check_against_onnxruntime_common(tsc):
    names = ["training_example.ts", "assignable.ts", "widget_example.ts"]   # one tsc run checks each file
    done = tsc({n: (HERE / n).read_text(encoding="utf-8") for n in names})
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_type_error_is_reported(tsc):
    done = tsc({"wrong.ts": 'import * as ort from "./pytrain-ort.js";\n'
                            'import * as ortc from "onnxruntime-common";\n'
                            'const t: ortc.TrainingSession = ort.Tensor;\n'
                            'ort.TrainingSession.create({ trainModel: "training_model.onnx" });\n'})
    assert done.returncode != 0
    assert "wrong.ts(3," in done.stdout and "wrong.ts(4," in done.stdout, done.stdout
    assert "checkpointState" in done.stdout

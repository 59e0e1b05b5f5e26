"""pytrain's own ClientApp (``pytrain.flower.client_app``) for the Simulation Engine: ``sim-dir`` (run
config) holds the artifacts (``arts/``) and one ``.npz`` of (x, y) per virtual SuperNode
(``part<partition-id>.npz``). The tests and bench/flower_scale.py run this app with
``clientapp = "pytrainfl.pytrain_client:app"`` in its pyproject.toml (tests/flower/test_simulation.py)."""
import os

from pytrain.flower import client_app


def _artifacts(context) -> str:
    return os.path.join(str(context.run_config["sim-dir"]), "arts")


def _data(context) -> str:
    return os.path.join(str(context.run_config["sim-dir"]), "part%d.npz" % int(context.node_config["partition-id"]))


app = client_app(_artifacts, _data)

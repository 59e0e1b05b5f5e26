"""Flower's own ClientApp under SecAgg+ (``secaggplus_mod``), in plain numpy: the digits MLP of
pytrain's nodes in the tests (64 -> 32 -> 10, the legacy parameters in pytrain's order: fc1.weight
(32, 64), fc1.bias, fc2.weight (10, 32), fc2.bias), plain SGD with the learning rate, local epochs and
batch size of the server's fit config. Its data is the .npz (x, y) named by the node config ``data``;
it writes what it sends (before masking) to the node config's ``out`` (.npz: the arrays and
``num_examples``) for the test's FedAvg. Selected with ``clientapp = "pytrainfl.secagg_client:app"``."""
import numpy as np
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp


def _sgd(params, x, y, cfg):
    w1, b1, w2, b2 = [p.astype(np.float64) for p in params]
    lr, bs = float(cfg["lr"]), int(cfg["batch-size"])
    rng = np.random.RandomState(int(cfg.get("server-round", 0)))
    for _ in range(int(cfg["local-epochs"])):
        order = rng.permutation(len(x))
        for i in range(0, len(x), bs):
            xb, yb = x[order[i:i + bs]], y[order[i:i + bs]]
            h = np.maximum(xb @ w1.T + b1, 0.0)
            z = h @ w2.T + b2
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(yb)), yb] -= 1.0
            dz = p / len(yb)  # d(mean cross-entropy)/d(logits)
            dh = (dz @ w2) * (h > 0)
            w2, b2 = w2 - lr * dz.T @ h, b2 - lr * dz.sum(0)
            w1, b1 = w1 - lr * dh.T @ xb, b1 - lr * dh.sum(0)
    return [a.astype(np.float32) for a in (w1, b1, w2, b2)]


class DigitsClient(NumPyClient):
    def __init__(self, data: str, out: str) -> None:
        with np.load(data) as z:
            self.x, self.y = z["x"].astype(np.float64), z["y"].astype(np.int64)
        self.out = out

    def fit(self, parameters, config):
        params = _sgd(parameters, self.x, self.y, config)
        if self.out:
            np.savez(self.out, *params, num_examples=len(self.x))
        return params, len(self.x), {}


def client_fn(context):
    cfg = context.node_config
    return DigitsClient(str(cfg["data"]), str(cfg.get("out", ""))).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])

"""Flower's own ClientApp running PyTorch, with the recipe of pytrain's nodes in the tests: the
digits MLP (64 -> 32 -> 10, parameters named as pytrain's ``models.mlp``), plain SGD, the learning
rate, local epochs and batch size from the server's ConfigRecord. Its data is the .npz (x, y) named
by the node config ``data``."""
import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _load(context: Context):
    with np.load(str(context.node_config["data"])) as z:
        return torch.tensor(z["x"], dtype=torch.float32), torch.tensor(z["y"], dtype=torch.int64)


def _net(msg: Message) -> Net:
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    return net


@app.train()
def train(msg: Message, context: Context) -> Message:
    x, y = _load(context)
    net = _net(msg)
    cfg = msg.content["config"]
    opt = torch.optim.SGD(net.parameters(), lr=float(cfg["lr"]))
    gen = torch.Generator().manual_seed(int(cfg.get("server-round", 0)))
    bs = int(cfg["batch-size"])
    total, seen = 0.0, 0
    for _ in range(int(cfg["local-epochs"])):
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), bs):
            idx = order[i:i + bs]
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            seen += len(idx)
    content = RecordDict({"arrays": ArrayRecord(net.state_dict()),
                          "metrics": MetricRecord({"train_loss": total / seen, "num-examples": len(x)})})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    x, y = _load(context)
    net = _net(msg)
    with torch.no_grad():
        out = net(x)
        loss = float(torch.nn.functional.cross_entropy(out, y))
        acc = float((out.argmax(1) == y).float().mean())
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": acc, "num-examples": len(x)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)

"""Optimizer choices (hyper-parameters fixed at generation time, PyTorch's defaults) and the
optimizer model that applies them. The learning rate is an input, set at run time."""
from __future__ import annotations

import enum
import math
from typing import Dict, Optional, Sequence, Tuple, Union

from pytrain.device.api import build_optimizer_model  # noqa: F401  (the optimizer model's one builder)
from pytrain.errors import ArtifactError


class OptimType(enum.Enum):
    """ORT's names for the built-in optimizers (with PyTorch's default hyper-parameters)."""

    SGD = "SGD"
    Adam = "Adam"
    AdamW = "AdamW"


def _hyper(optimizer: str, name: str, value: object, below: Optional[float] = None) -> float:
    """A hyper-parameter as a finite float >= 0 (and < ``below`` when given), as torch.optim checks them:
    a NaN or infinite setting would silently destroy every weight at the first step."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ArtifactError("%s: %s must be a number, got %r" % (optimizer, name, value)) from None
    if not math.isfinite(v) or v < 0 or (below is not None and v >= below):
        raise ArtifactError("%s: %s must be a finite number >= 0%s, got %r"
                            % (optimizer, name, " and < %g" % below if below is not None else "", value))
    return v


class _Optim:
    op_type = ""
    state_names: Tuple[str, ...] = ()
    lr = 1e-3

    def __init__(self, max_grad_norm: Optional[float] = None) -> None:
        if max_grad_norm is not None and not (_hyper(type(self).__name__, "max_grad_norm", max_grad_norm) > 0):
            raise ArtifactError("max_grad_norm must be positive, got %r" % (max_grad_norm,))
        self.max_grad_norm = max_grad_norm

    def attributes(self) -> Dict[str, object]:
        raise NotImplementedError

    def describe(self) -> str:
        attrs = ", ".join("%s=%s" % kv for kv in sorted(self.attributes().items()))
        return "%s(%s%s)" % (type(self).__name__, attrs,
                             ", max_grad_norm=%s" % self.max_grad_norm if self.max_grad_norm else "")


class SGD(_Optim):
    """torch.optim.SGD (default learning rate 0.01 when none is set at run time)."""

    op_type = "SGDStep"
    lr = 0.01

    def __init__(self, momentum: float = 0.0, dampening: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, max_grad_norm: Optional[float] = None) -> None:
        super().__init__(max_grad_norm)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ArtifactError("Nesterov momentum requires a momentum and zero dampening (as in torch.optim.SGD)")
        self.momentum, self.dampening = _hyper("SGD", "momentum", momentum), _hyper("SGD", "dampening", dampening)
        self.nesterov, self.weight_decay = bool(nesterov), _hyper("SGD", "weight_decay", weight_decay)
        self.state_names = ("momentum_buffer",) if self.momentum else ()

    def attributes(self) -> Dict[str, object]:
        return {"momentum": self.momentum, "dampening": self.dampening,
                "nesterov": int(self.nesterov), "weight_decay": self.weight_decay}


class Adam(_Optim):
    """torch.optim.Adam: L2 weight decay added to the gradient (default 0)."""

    op_type = "AdamStep"
    state_names = ("exp_avg", "exp_avg_sq")
    decoupled = 0

    def __init__(self, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, max_grad_norm: Optional[float] = None) -> None:
        super().__init__(max_grad_norm)
        name = type(self).__name__
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise ArtifactError("%s: betas must be two numbers, got %r" % (name, betas))
        self.betas = (_hyper(name, "betas[0]", betas[0], below=1.0), _hyper(name, "betas[1]", betas[1], below=1.0))
        self.eps, self.weight_decay = _hyper(name, "eps", eps), _hyper(name, "weight_decay", weight_decay)

    def attributes(self) -> Dict[str, object]:
        return {"beta1": self.betas[0], "beta2": self.betas[1], "epsilon": self.eps,
                "weight_decay": self.weight_decay, "decoupled": self.decoupled}


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay (default 0.01)."""

    decoupled = 1

    def __init__(self, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, max_grad_norm: Optional[float] = None) -> None:
        super().__init__(betas, eps, weight_decay, max_grad_norm)


OptimizerSpec = Union[OptimType, str, _Optim]


def resolve(optimizer: OptimizerSpec) -> _Optim:
    """An optimizer object from ORT's enum, its name, or an object carrying hyper-parameters."""
    if isinstance(optimizer, _Optim):
        return optimizer
    name = optimizer.value if isinstance(optimizer, OptimType) else str(optimizer)
    table = {"sgd": SGD, "adam": Adam, "adamw": AdamW}
    if name.lower() not in table:
        raise ArtifactError("unknown optimizer %r: use OptimType.SGD, Adam or AdamW, or an "
                            "SGD/Adam/AdamW object" % (optimizer,))
    return table[name.lower()]()

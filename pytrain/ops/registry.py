"""The kernel registry: one numpy function per (domain, op_type).

A kernel reads like the ONNX spec of its op::

    @kernel("Gemm")
    def gemm(ctx, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
        ...
        return (Y,)

* Inputs come positionally, in the order of the op's schema; a missing optional input is ``None``.
* Attributes come as keyword arguments with the ONNX attribute names and the spec's defaults
  (ints/floats/strings as Python values, lists as lists, tensor attributes as numpy arrays).
* The kernel returns a tuple with one entry per output it can produce, in schema order; it may put
  ``None`` for an output that ``ctx.wants(i)`` says nobody reads (so optional work can be skipped).
* A kernel never mutates its inputs, except kernels registered with ``inplace=True``
  (optimizer updates), which update their state inputs in place and return them.
* :func:`accelerate` puts a faster implementation in front of a kernel (the browser's
  WebAssembly kernels); it answers the cases it handles and returns None for the rest.
"""
from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

#: pytrain's own operator domain: training-only forward ops, gradient ops and optimizer ops.
PYTRAIN_DOMAIN = "ai.pytrain"

Kernel = Callable[..., Tuple[Any, ...]]


class KernelInfo:
    """A registered kernel and the facts the planner needs about it."""

    __slots__ = ("fn", "numpy_fn", "op_type", "domain", "inplace", "since", "module")

    def __init__(self, fn: Kernel, op_type: str, domain: str, inplace: bool, since: int = 1,
                 module: str = "") -> None:
        self.fn = fn
        self.numpy_fn = fn  # the registered kernel, whatever accelerate() put in front of it
        self.op_type = op_type
        self.domain = domain
        self.inplace = inplace
        self.since = since  # the oldest schema version of the op whose meaning the kernel implements
        self.module = module or fn.__module__  # the module whose import registers it (pytrain.ops.kernel_index)


_KERNELS: Dict[Tuple[str, str], KernelInfo] = {}


def _norm_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def kernel(op_type: str, domain: str = "", inplace: bool = False, since: int = 1) -> Callable[[Kernel], Kernel]:
    """Register ``fn`` as the kernel of ``op_type`` in ``domain`` (default: the standard ONNX domain).

    ``since``: the oldest schema version of the op the kernel means. Older versions that differ only in
    attributes or inputs are refused anyway (an attribute the kernel does not take is an error); set it
    where an older version means something else with the same attributes (Softmax before 13)."""

    def register(fn: Kernel) -> Kernel:
        key = (_norm_domain(domain), op_type)
        if key in _KERNELS:
            raise RuntimeError("kernel for %s registered twice" % (key,))
        # the registering module, not fn's: kernel("ReluGrad", domain=ORT)(relu_grad) registers another's function
        caller = inspect.currentframe().f_back  # type: ignore[union-attr]
        _KERNELS[key] = info = KernelInfo(fn, op_type, key[0], inplace, since, caller.f_globals.get("__name__", ""))
        if key in _ACCELERATED:
            _put_in_front(info, _ACCELERATED[key])
        return fn

    return register


def get_kernel(op_type: str, domain: str = "") -> Optional[KernelInfo]:
    """The kernel of ``op_type`` in ``domain``, or None when pytrain has none."""
    key = (_norm_domain(domain), op_type)
    info = _KERNELS.get(key)
    if info is None and not _loaded:
        _load_for(key)
        info = _KERNELS.get(key)
    return info


#: (domain, op_type) -> the fast kernel accelerate() put in front, applied on registration too
_ACCELERATED: Dict[Tuple[str, str], Kernel] = {}


def accelerate(op_type: str, fast: Optional[Kernel], domain: str = "") -> None:
    """Run ``fast(ctx, *inputs, **attrs)`` first for ``op_type``: its outputs are used unless it
    returns None, which hands the case to the registered kernel (``fast=None`` removes it).
    Plans built afterwards pick it up; kernel modules not imported yet are not imported now."""
    key = (_norm_domain(domain), op_type)
    if fast is None:
        _ACCELERATED.pop(key, None)
    else:
        _ACCELERATED[key] = fast
    info = _KERNELS.get(key)
    if info is not None:
        _put_in_front(info, fast)


def _put_in_front(info: KernelInfo, fast: Optional[Kernel]) -> None:
    base = info.numpy_fn
    if fast is None:
        info.fn = base
        return

    def run(ctx: "OpContext", *args: Any, **attrs: Any) -> Tuple[Any, ...]:
        out = fast(ctx, *args, **attrs)
        return base(ctx, *args, **attrs) if out is None else out

    info.fn = run


def supported_ops(domain: str = "") -> Sequence[str]:
    """Sorted op types with a kernel in ``domain``."""
    _load_all()
    d = _norm_domain(domain)
    return sorted(op for (dom, op) in _KERNELS if dom == d)


class OpContext:
    """What a kernel may know beyond its inputs: bound once per node when a graph is planned."""

    __slots__ = ("training", "rng", "opset", "node_name", "output_mask", "_memo")

    def __init__(
        self,
        training: bool = False,
        rng: Optional[np.random.Generator] = None,
        opset: int = 17,
        node_name: str = "",
        output_mask: Sequence[bool] = (True,),
    ) -> None:
        self.training = training
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.opset = opset
        self.node_name = node_name
        self.output_mask = tuple(output_mask)
        self._memo: Optional[tuple] = None

    def constant_memo(self, inputs: Sequence[Optional[np.ndarray]], compute: Callable[[], Any]) -> Any:
        """``compute()``, kept for the next call of this node while ``inputs`` are the very same arrays
        and none of them can ever change (each None or a read-only view of an immutable ``bytes``: an
        InferenceSession's initializers). Anything else (a training Module's parameters, a feed, any
        writable array) is computed afresh on every call, so a weight that changes stays right."""
        memo = self._memo  # (kept inputs were immutable when kept, and so are still: only their identity is checked)
        if memo is not None and len(memo[0]) == len(inputs) and all(map(operator.is_, memo[0], inputs)):
            return memo[1]
        if not all(a is None or _immutable(a) for a in inputs):
            return compute()
        value = compute()
        self._memo = (tuple(inputs), value)  # (holds the inputs: their ids cannot be reused meanwhile)
        return value

    def wants(self, i: int) -> bool:
        """Whether output ``i`` of this node is read by anyone (optional outputs may be skipped)."""
        return i < len(self.output_mask) and self.output_mask[i]


def _immutable(a: Any) -> bool:
    """Whether ``a`` is an array whose values can never change: read-only, its memory a ``bytes``."""
    if not isinstance(a, np.ndarray) or a.flags.writeable:
        return False
    base = a
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return isinstance(base, bytes)


_loaded = False


def _load_for(key: Tuple[str, str]) -> None:
    # Only the module pytrain.ops.kernel_index names for the op: a plan imports the kernels of its own nodes,
    # not all ~130 modules (0.3 s of the tab's start). An op the index does not know (a kernel added since it
    # was written: tests/ops/test_kernel_index.py says so) or one its module did not register loads them all.
    import importlib

    from pytrain.ops.kernel_index import KERNELS

    name = KERNELS.get("%s:%s" % key)
    if name is not None:
        importlib.import_module(name)
    if key not in _KERNELS:
        _load_all()


def kernel_index_source() -> str:
    """The text of pytrain/ops/kernel_index.py for the kernels registered now (after :func:`_load_all`):
    each kernel's ``domain:op_type`` with the module that registers it."""
    _load_all()
    lines = ['"""Layer 3, the kernels: which module registers each kernel (``domain:op_type``), so a plan imports',
             'the modules of its own nodes only (pytrain.ops.registry.get_kernel). Written by',
             '``registry.kernel_index_source()``; tests/ops/test_kernel_index.py checks it is current."""',
             "from __future__ import annotations", "", "from typing import Dict", "",
             "KERNELS: Dict[str, str] = {"]
    for (domain, op), info in sorted(_KERNELS.items()):
        if ".op_" not in info.module:
            continue   # (registered where it is used: legacy_broadcast's kernel, by the engine's import of it)
        lines.append('    "%s:%s": "%s",' % (domain, op, info.module))
    return "\n".join(lines + ["}", ""])


def _load_all() -> None:
    # Importing the kernel modules registers them; done lazily so importing the registry is cheap
    # and so one broken module names itself instead of breaking ``import pytrain``.
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    import pkgutil

    from pytrain import ops

    for pkg in (ops,):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            leaf = info.name.rsplit(".", 1)[-1]
            if leaf.startswith("op_"):
                importlib.import_module(info.name)

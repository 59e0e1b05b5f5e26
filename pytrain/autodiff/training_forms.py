"""The training forms of ops whose training behaviour differs from inference: BatchNormalization
becomes ``ai.pytrain.BatchNormTraining`` (batch statistics, running statistics updated; its
gradient rule is in :mod:`pytrain.autodiff.rules.normalization`) or stays on its running
statistics, and Dropout gets ``training_mode = true``. The generator applies these to the training
model's forward before it builds the gradients."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from pytrain.autodiff.engine import carried
from pytrain.autodiff.quant_forms import fuse_dequantized_weights, fuse_fake_quant, fuse_int8_blocks
from pytrain.errors import ArtifactError
from pytrain.engine.export import inference_rewrite
from pytrain.engine.graph import NameScope
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.proto import NodeProto, make_node, node_attributes

#: how a BatchNormalization may run in the training model (``generate_artifacts(batchnorm=...)``)
BATCHNORM_MODES = ("auto", "train", "eval")


def batchnorm_modes(nodes: Sequence[NodeProto], option: Any, trainable: Sequence[str]) -> Dict[int, str]:
    """{index of a BatchNormalization node: 'train' or 'eval'} for the training model.

    'auto' (the rule): a BatchNormalization exported in training mode (``training_mode=1``: the
    module was in train()) or whose scale or bias trains uses the batch's statistics and updates
    its running statistics (as a PyTorch module in train(), and as ONNX Runtime does); one exported
    in inference mode whose scale and bias both do not train (frozen, or not parameters) stays on
    its running statistics, which do not change (as a frozen backbone in eval()). The gradient
    still flows through it to X. ``option`` is 'auto', 'train', 'eval', or a dict {node name or scale
    initializer name: 'auto'|'train'|'eval'} (nodes it does not name follow 'auto').
    """
    bns = [(i, n) for i, n in enumerate(nodes) if n.op_type == "BatchNormalization" and not n.domain]
    if isinstance(option, str) or option is None:
        per: Dict[str, str] = {}
        default = option or "auto"
    elif isinstance(option, dict):
        per, default = dict(option), "auto"
        names = {n.name for _, n in bns if n.name} | {n.input[1] for _, n in bns if len(n.input) > 1}
        unknown = sorted(k for k in per if k not in names)
        if unknown:
            raise ArtifactError("batchnorm names %s, which is no BatchNormalization node or scale initializer "
                                "of the model (BatchNormalization nodes: %s)" % (
                                    ", ".join(repr(k) for k in unknown),
                                    ", ".join(repr(n.name or n.output[0]) for _, n in bns) or "none"))
    else:
        raise ArtifactError("batchnorm must be 'auto', 'train', 'eval' or a dict {node or scale name: mode}, got %r"
                            % (option,))
    for mode in [default] + list(per.values()):
        if mode not in BATCHNORM_MODES:
            raise ArtifactError("batchnorm mode %r is not one of %s" % (mode, ", ".join(BATCHNORM_MODES)))
    carries = carried(nodes, trainable)
    modes: Dict[int, str] = {}
    for i, n in bns:
        mode = per.get(n.name, per.get(n.input[1], default)) if n.name or len(n.input) > 1 else default
        if mode == "auto":
            exported_training = int(node_attributes(n).get("training_mode", 0) or 0) == 1
            mode = "train" if exported_training or any(x in carries for x in n.input[1:3]) else "eval"
        modes[i] = mode
    return modes


def training_rewrite(nodes: List[NodeProto], scope: NameScope, params: Sequence[str],
                      add_const: Any, bn_modes: Dict[int, str]) -> Dict[str, str]:
    """Switch nodes to training behaviour; returns {state update output: buffer it replaces}.

    A BatchNormalization in 'train' mode becomes BatchNormTraining (batch statistics, running
    stats updated as torch does); one in 'eval' mode runs on its running statistics (the
    training_mode attribute of the source is dropped; running-stat outputs a training-mode export
    declared pass the statistics through unchanged). Dropout gets training_mode = true. A q8 matmul block
    becomes DynamicQuantMatMul (pytrain.autodiff.quant_forms).
    """
    updates: Dict[str, str] = {}
    passthrough: List[NodeProto] = []
    for idx, n in enumerate(nodes):
        if n.op_type == "BatchNormalization" and not n.domain and bn_modes.get(idx) == "eval":
            declared = list(n.output)
            inference_rewrite(n)
            for k, stat in ((1, 3), (2, 4)):
                if k < len(declared) and declared[k]:
                    passthrough.append(make_node("Identity", [n.input[stat]], [declared[k]],
                                                 name=scope.fresh("%s/frozen_stat%d" % (n.name or declared[0], k))))
        elif n.op_type == "BatchNormalization" and not n.domain:
            attrs = {a.name: a for a in n.attribute}
            eps = attrs["epsilon"].f if "epsilon" in attrs else 1e-5
            momentum = attrs["momentum"].f if "momentum" in attrs else 0.9
            base = n.name or n.output[0]
            # keep the names of running-stat outputs a TRAINING-mode export already declares
            outs = [n.output[0]] + [n.output[k] if k < len(n.output) and n.output[k] else
                                    scope.fresh("%s/%s" % (base, s)) for k, s in
                                    ((1, "running_mean"), (2, "running_var"), (3, "saved_mean"), (4, "saved_invstd"))]
            mean, var = n.input[3], n.input[4]
            if mean in params:
                updates[outs[1]] = mean
            if var in params:
                updates[outs[2]] = var
            nodes[idx] = make_node("BatchNormTraining", list(n.input[:5]), outs, name=n.name,
                                   domain=PYTRAIN_DOMAIN, epsilon=float(eps), momentum=float(momentum))
        elif n.op_type == "Dropout" and not n.domain:
            ins = list(n.input) + [""] * (3 - len(n.input))
            ins[2] = add_const(np.array(True), "dropout_training_mode")
            del n.input[:]
            n.input.extend(ins)
    nodes.extend(passthrough)
    fuse_int8_blocks(nodes)  # q8 matmul blocks: one node the gradient passes (QLoRA, docs/quantized.md)
    fuse_dequantized_weights(nodes)  # MatMul by a dequantized weight: recomputed in the backward pass
    fuse_fake_quant(nodes)  # Q -> DQ pairs on activations: PyTorch's fake-quantize gradient
    return updates

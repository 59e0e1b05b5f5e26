"""Gradient rules of the ops in ``pytrain/ops/normalization``: BatchNormalization (and its training
form), LayerNormalization, InstanceNormalization, GroupNormalization, RMSNormalization. See
:mod:`pytrain.autodiff.rules` for what a rule is."""
from __future__ import annotations

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient


@gradient("BatchNormTraining", domain="ai.pytrain", inputs=(0, 1, 2), outputs=(0,))
def _batch_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("BatchNormGrad", [dy[0], n.x(0), n.x(1), n.saved(3), n.saved(4)],
                        [n.needs(0), n.needs(1), n.needs(2)])


@gradient("BatchNormalization", inputs=(0, 1, 2), outputs=(0,))
def _batch_norm_inference(b: B, n: N, dy: G) -> G:
    # Inference mode (running statistics): the training graph keeps a BatchNormalization whose
    # scale and bias do not train as is (a frozen backbone in eval()); the generator rewrites every
    # other one to BatchNormTraining, so training_mode=1 never reaches this rule.
    if int(n.attr("training_mode", 0)):
        from pytrain.errors import UnsupportedOpError
        raise UnsupportedOpError("BatchNormalization node %r has training_mode=1: its gradient is that of "
                                 "ai.pytrain.BatchNormTraining (generate_artifacts rewrites it)" % n.node.name)
    return b.pt_outputs("BatchNormInferenceGrad", [dy[0], n.x(0), n.x(1), n.x(3), n.x(4)],
                        [n.needs(0), n.needs(1), n.needs(2)], epsilon=float(n.attr("epsilon", 1e-5)))


@gradient("LayerNormalization", inputs=(0, 1, 2), outputs=(0,))
def _layer_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("LayerNormalizationGrad", [dy[0], n.x(0), n.x(1), n.saved(1), n.saved(2)],
                        [n.needs(0), n.needs(1), n.x(2) is not None and n.needs(2)],
                        axis=int(n.attr("axis", -1)), epsilon=float(n.attr("epsilon", 1e-5)))


@gradient("InstanceNormalization", inputs=(0, 1, 2))
def _instance_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("InstanceNormalizationGrad", [dy[0], n.x(0), n.x(1)],
                        [n.needs(0), n.needs(1), n.needs(2)], epsilon=float(n.attr("epsilon", 1e-5)))


@gradient("GroupNormalization", inputs=(0, 1, 2))
def _group_norm(b: B, n: N, dy: G) -> G:
    # One kernel for both forms: scale's shape says per group (opset 18) or per channel (opset 21).
    return b.pt_outputs("GroupNormalizationGrad", [dy[0], n.x(0), n.x(1)],
                        [n.needs(0), n.needs(1), n.needs(2)], num_groups=n.attr("num_groups"),
                        epsilon=float(n.attr("epsilon", 1e-5)), stash_type=int(n.attr("stash_type", 1)))


@gradient("RMSNormalization", inputs=(0, 1))
def _rms_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("RMSNormalizationGrad", [dy[0], n.x(0), n.x(1)], [n.needs(0), n.needs(1)],
                        axis=int(n.attr("axis", -1)), epsilon=float(n.attr("epsilon", 1e-5)),
                        stash_type=int(n.attr("stash_type", 1)))

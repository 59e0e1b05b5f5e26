"""The WebGPU shaders a MobileNetV2's step reaches (web/gpu/shaders_nn.js, pytrain/ops/webgpu/mobile.py and conv.py's
groups) in headless Chromium's SwiftShader adapter, each against the numpy kernel forward and gradient on odd sizes,
pads, strides and dilations: grouped and depthwise Conv and ConvGrad, BatchNormalization on running statistics and
its gradient, Clip (ReLU6) and ClipGrad, GlobalAveragePool, AveragePool and their gradients, Dropout as the
identity. Then a reduced-width MobileNetV2 (inverted residual blocks, depthwise convolutions, BatchNorm in eval
mode, ReLU6, global pooling; every parameter trains) 20 AdamW steps on the GPU against the same steps on the CPU:
the bench's MobileNetV2 (width 0.35, 96x96, batch 16) takes minutes a step on SwiftShader, so it is measured by
bench/webgpu_bench.py, not here. BatchNormalization on the batch's statistics (BatchNormTraining, BatchNormGrad,
ONNX's training_mode=1) on 1-D/2-D/3-D spatial shapes, (N, C), N = 1 and a large channel, and a small CNN whose
BatchNormalizations train, 20 AdamW steps against the CPU with its running statistics."""
from __future__ import annotations

import json

import pytest
from test_webgpu import ENQUEUE_OPS, artifacts_setup, assert_within_float32, shader_errors, train_on_page

CASES = ENQUEUE_OPS[:ENQUEUE_OPS.index('case("gemm_transB_row_bias"')] + r"""
mask3 = lambda: OpContext(output_mask=(True, True, True))
dw = {"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 1]}
case("conv_depthwise_odd", "Conv", [f32(2, 6, 9, 7), f32(6, 1, 3, 3), f32(6)], dw)
grouped = {"group": 2, "pads": [1, 0, 0, 1], "dilations": [2, 1]}
case("conv_grouped_dilated", "Conv", [f32(2, 6, 8, 7), f32(4, 3, 3, 2)], grouped)
case("conv_grad_depthwise", "ConvGrad", [f32(2, 6, 5, 7), f32(2, 6, 9, 7), f32(6, 1, 3, 3)], dw,
     domain=PYTRAIN_DOMAIN, ctx=mask3())
case("conv_grad_grouped", "ConvGrad", [f32(2, 4, 5, 7), f32(2, 6, 8, 7), f32(4, 3, 3, 2)], grouped,
     domain=PYTRAIN_DOMAIN, ctx=mask3())
var = lambda *s: np.abs(f32(*s)) + 0.5
case("batchnorm_4d", "BatchNormalization", [f32(3, 5, 4, 7) * 2 + 1, f32(5), f32(5), f32(5), var(5)],
     {"epsilon": 1e-3})
case("batchnorm_2d", "BatchNormalization", [f32(6, 5), f32(5), f32(5), f32(5), var(5)])
case("batchnorm_inference_grad", "BatchNormInferenceGrad", [f32(3, 5, 4, 7), f32(3, 5, 4, 7), f32(5), f32(5),
     var(5)], {"epsilon": 1e-3}, domain=PYTRAIN_DOMAIN, ctx=mask3())
zero, six = np.array(0.0, np.float32), np.array(6.0, np.float32)
case("clip_relu6", "Clip", [f32(1001) * 5, zero, six])
case("clip_min_only", "Clip", [f32(37, 11), np.array(-0.5, np.float32)])
edge = f32(37, 11) * 5
edge[0, :3] = [0.0, 6.0, 6.5]
case("clip_grad_relu6_bounds_inclusive", "ClipGrad", [f32(37, 11), edge, zero, six], domain=PYTRAIN_DOMAIN)
case("global_average_pool", "GlobalAveragePool", [f32(3, 5, 7, 9)])
case("global_average_pool_grad", "GlobalAveragePoolGrad", [f32(3, 5, 1, 1), f32(3, 5, 7, 9)], domain=PYTRAIN_DOMAIN)
ceil = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}
with_pad = {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 0], "count_include_pad": 1}
case("average_pool_ceil_pads", "AveragePool", [f32(2, 3, 9, 7)], ceil)
case("average_pool_count_include_pad", "AveragePool", [f32(2, 3, 8, 7)], with_pad)
for name, x, attrs in (("average_pool_grad_ceil_pads", f32(2, 3, 9, 7), ceil),
                       ("average_pool_grad_count_include_pad", f32(2, 3, 8, 7), with_pad)):
    y = get_kernel("AveragePool").numpy_fn(OpContext(), x, **attrs)[0]
    case(name, "AveragePoolGrad", [f32(*y.shape), x], attrs, domain=PYTRAIN_DOMAIN)
# BatchNormalization on the batch's statistics (training): odd sizes, 1-D/2-D/3-D spatial, (N, C), N = 1, a channel
# of 7,585 values (each workgroup thread sums 60 of them); the gradient on the forward's saved statistics
train5 = lambda: OpContext(output_mask=(True,) * 5)
bn_shapes = (("4d", (3, 5, 4, 7)), ("2d", (6, 5)), ("3d_n1", (1, 5, 13)), ("5d", (2, 5, 3, 4, 5)),
             ("large", (5, 5, 37, 41)))
for tag, shape in bn_shapes:
    xs = f32(*shape) * 2 + 1
    params = [f32(5), f32(5), f32(5), var(5)]
    case("bn_training_" + tag, "BatchNormTraining", [xs] + params, {"epsilon": 1e-3, "momentum": 0.8},
         domain=PYTRAIN_DOMAIN, ctx=train5())
    saved = get_kernel("BatchNormTraining", PYTRAIN_DOMAIN).numpy_fn(train5(), xs, *params, epsilon=1e-3)
    case("bn_grad_" + tag, "BatchNormGrad", [f32(*shape), xs, params[0], saved[3], saved[4]], domain=PYTRAIN_DOMAIN,
         ctx=mask3())
case("bn_grad_no_dx", "BatchNormGrad", [f32(3, 5, 4, 7), xs[:3, :, :4, :7].copy(), f32(5), f32(5), var(5)],
     domain=PYTRAIN_DOMAIN, ctx=OpContext(output_mask=(False, True, True)))
case("batchnorm_training_mode_biased_running_var", "BatchNormalization",
     [f32(4, 5, 3, 7) * 2 + 1, f32(5), f32(5), f32(5), var(5)], {"training_mode": 1, "momentum": 0.7}, ctx=mask3())
case("batchnorm_training_mode_y_only", "BatchNormalization", [f32(1, 5, 9), f32(5), f32(5), f32(5), var(5)],
     {"training_mode": 1}, ctx=OpContext(output_mask=(True, False, False)))
case("sum_three_broadcast", "Sum", [f32(4, 1, 5), f32(3, 1), f32(5)])
case("dropout_ratio_zero_identity", "Dropout", [f32(4, 5), np.array(0.0, np.float32), np.array(True)],
     ctx=OpContext(output_mask=(True, False)))
len(CASES)
"""

OPS = ["conv_depthwise_odd", "conv_grouped_dilated", "conv_grad_depthwise", "conv_grad_grouped", "batchnorm_4d",
       "batchnorm_2d", "batchnorm_inference_grad", "clip_relu6", "clip_min_only", "clip_grad_relu6_bounds_inclusive",
       "global_average_pool", "global_average_pool_grad", "average_pool_ceil_pads", "average_pool_count_include_pad",
       "average_pool_grad_ceil_pads", "average_pool_grad_count_include_pad", "sum_three_broadcast",
       "dropout_ratio_zero_identity"] + ["bn_%s_%s" % (kind, tag) for tag in ("4d", "2d", "3d_n1", "5d", "large")
                                         for kind in ("training", "grad")] + \
    ["bn_grad_no_dx", "batchnorm_training_mode_biased_running_var", "batchnorm_training_mode_y_only"]


@pytest.fixture(scope="module")
def op_errors(gpu_page):
    return shader_errors(gpu_page, CASES)


@pytest.mark.parametrize("name", OPS)
def test_mobilenet_shader_matches_the_numpy_kernel(op_errors, name):
    assert_within_float32(name, op_errors[name])


def test_every_mobilenet_case_ran(op_errors):
    assert sorted(op_errors) == sorted(OPS)


def tiny_mobilenet() -> bytes:
    """A reduced-width MobileNetV2 (stem, an inverted residual block with its skip, a strided one, global pooling
    and a classifier), BatchNorm in eval mode, every parameter training; exported at batch 8, 3x16x16."""
    import torch
    from torch import nn

    from pytrain.generator.torch_export import torch_export

    def cbr(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1, act: bool = True) -> list:
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + [nn.ReLU6()] if act else layers

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            mid = cin * 2
            self.body = nn.Sequential(*cbr(cin, mid), *cbr(mid, mid, 3, stride, mid), *cbr(mid, cout, act=False))
            self.skip = stride == 1 and cin == cout

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.body(x) if self.skip else self.body(x)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(*cbr(3, 8, 3, 2), Inverted(8, 8, 1), Inverted(8, 12, 2))
            self.head = nn.Linear(12, 10)

        def train(self, mode: bool = True) -> "Tiny":
            super().train(mode)
            self.features.eval()   # BatchNorm on its running statistics, as a transfer's backbone
            return self

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    torch.manual_seed(0)
    model = Tiny()
    with torch.no_grad():   # running statistics other than 0 / 1, so the normalization means something
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return torch_export(model.train(), (torch.rand(8, 3, 16, 16),), input_names=["input"], output_names=["logits"],
                        opset=17, dynamic_batch=False)


@pytest.fixture(scope="module")
def mobile_run(gpu_page):
    from pytrain.generator import artifacts as gen

    # batchnorm="eval": the scales and biases train on the running statistics (BatchNormInferenceGrad)
    arts = gen.generate_artifacts(tiny_mobilenet(), loss=gen.LossType.CrossEntropyLoss, optimizer=gen.OptimType.AdamW,
                                  batchnorm="eval")
    return train_on_page(gpu_page, artifacts_setup(arts) + "KIND, SHAPE, OPTIMIZER, VOCAB = 'given', (8, 3, 16, 16), "
                         "'AdamW', 0\n")


def test_a_mobilenet_trains_on_the_gpu_with_the_cpu_losses(mobile_run):
    cpu, gpu = mobile_run["cpu"], mobile_run["gpu"]
    assert len(gpu) == len(cpu) == 20
    for step, (c, g) in enumerate(zip(cpu, gpu)):
        assert abs(g - c) <= 1e-5 * abs(c), (step, c, g)
    assert cpu[-1] < cpu[0]   # it learns
    assert mobile_run["step"] == 20
    for name, err in mobile_run["params"].items():
        assert err <= 1e-4, (name, err)
    # every node ran on the GPU: the batch and its labels went up, the loss came down (the parameters once)
    counts, params = mobile_run["counts"], len(mobile_run["params"])
    assert counts["readbacks"] <= 20 + 3 * params, counts
    assert counts["uploads"] <= 4 * 20 + 3 * params + 10, counts
    print("mobilenet: losses %s, counts %s" % (gpu[:3], counts))


def tiny_bn_cnn() -> bytes:
    """Conv, BatchNorm2d, ReLU twice (odd maps, a stride), global pooling, Linear, BatchNorm1d on (N, C), Linear: every
    BatchNormalization trains on the batch's statistics (the generator's 'auto': its scale and bias train) and
    updates its running statistics; exported at batch 6, 3x9x11."""
    import torch
    from torch import nn

    from pytrain.generator.torch_export import torch_export

    torch.manual_seed(0)
    # no bias before a BatchNormalization: its true gradient is 0, and Adam would amplify either device's rounding
    # noise there into different biases (and different running means)
    model = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1, bias=False), nn.BatchNorm2d(5), nn.ReLU(),
                          nn.Conv2d(5, 6, 3, stride=2, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 7, bias=False), nn.BatchNorm1d(7),
                          nn.ReLU(), nn.Linear(7, 10))
    return torch_export(model.train(), (torch.rand(6, 3, 9, 11),), input_names=["input"], output_names=["logits"],
                        opset=17, dynamic_batch=False)


@pytest.fixture(scope="module")
def bn_run(gpu_page):
    from pytrain.generator import artifacts as gen

    arts = gen.generate_artifacts(tiny_bn_cnn(), loss=gen.LossType.CrossEntropyLoss, optimizer=gen.OptimType.AdamW)
    out = train_on_page(gpu_page, artifacts_setup(arts) + "KIND, SHAPE, OPTIMIZER, VOCAB = 'given', (6, 3, 9, 11), "
                        "'AdamW', 0\n")
    out["trainable"] = json.loads(gpu_page.evaluate("code => window.__py(code)",
                                                    "json.dumps(cpu_module.trainable_names)"))
    return out


def test_batchnorm_trains_on_the_batch_statistics_on_the_gpu_with_the_cpu_losses(bn_run):
    cpu, gpu = bn_run["cpu"], bn_run["gpu"]
    assert len(gpu) == len(cpu) == 20
    for step, (c, g) in enumerate(zip(cpu, gpu)):
        assert abs(g - c) <= 1e-5 * abs(c), (step, c, g)
    assert cpu[-1] < cpu[0]
    # the running statistics (frozen parameters the step replaces) came back equal, as did every trained parameter
    stats = [n for n in bn_run["params"] if n not in bn_run["trainable"]]
    assert len(stats) == 6, stats
    for name, err in bn_run["params"].items():
        assert err <= 1e-4, (name, err)
    print("batchnorm: parameter errors %s, counts %s" % (bn_run["params"], bn_run["counts"]))
    counts = bn_run["counts"]   # nothing fell back to the CPU: the batch and labels up, the loss down
    assert bn_run["later_uploads"] == 2 * 19, bn_run
    assert counts["uploads"] <= 4 * 20 + 3 * len(bn_run["params"]) + 10, counts
    assert counts["readbacks"] <= 20 + 3 * len(bn_run["params"]), counts


BN_REFUSED = r"""
import numpy as np
from pytrain.engine.executor import Plan
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.ops.webgpu import device, kernels as K
from pytrain.proto import make_graph, make_node, make_value_info
from pytrain.base import dtypes
c = 65536   # more channels than a grid's row of workgroups (one a channel): a form the shaders do not take
ins = [make_value_info("x", dtypes.FLOAT, [2, c])] + [make_value_info(n, dtypes.FLOAT, [c]) for n in "sbmv"]
g = make_graph([make_node("BatchNormTraining", ["x", "s", "b", "m", "v"], ["y", "rm", "rv", "sm", "si"],
                          name="wide_bn", domain=PYTRAIN_DOMAIN)], "g", ins, [make_value_info("y", dtypes.FLOAT, [2, c])])
plan = Plan(g, ["x", "s", "b", "m", "v"], ["y"], opset=17, kernels=K.choose)
try:
    plan.run([device().upload(np.ones((2, c), np.float32))] + [np.ones(c, np.float32)] * 4)
    msg = "ran"
except Exception as e:
    msg = type(e).__name__ + ": " + str(e)
msg
"""


def test_a_batchnorm_form_without_a_shader_is_refused_naming_the_node(gpu_page):
    err = gpu_page.evaluate("code => window.__py(code)", BN_REFUSED)
    assert "GpuTransferError" in err and "wide_bn" in err and "BatchNormTraining" in err, err

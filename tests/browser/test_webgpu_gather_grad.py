"""GatherGrad (an embedding's gradient) on the WebGPU device where it really runs, headless Chromium's SwiftShader
adapter: web/gpu/shaders_nn.js ``gather_rows_grad`` (axis 0) and shaders_text.js ``gather_axis_grad`` (other axes)
sum, for each element of dX, only its row's positions from the row list pytrain/ops/webgpu/nn.py builds on the
indices' host copy (``row_list``), not every index. Against the numpy kernel on repeated and negative indices and
rows never indexed (exactly 0); a constant's row list goes up once; and bit for bit the sums of the shaders that
scanned every index for every element (registered here under their own names), the same additions in the same
order. The WebGPU page (``gpu_page``) is conftest.py's, shared by the WebGPU modules."""
from __future__ import annotations

import json

import pytest
from test_webgpu import ENQUEUE_OPS, assert_within_float32, shader_errors

CASES = ENQUEUE_OPS[:ENQUEUE_OPS.index('case("gemm_transB_row_bias"')] + r"""
# 11 rows: 4 four times (once as -7), -1 is row 10, rows 2 and 9 never indexed
ids = np.array([[4, -1, 0, 4], [-7, 3, 10, 4], [0, 5, 6, 7], [8, 1, 4, 3]], np.int64)
assert not np.isin([2, 9], np.where(ids < 0, ids + 11, ids)).any()
grad = lambda name, dy, x, attrs=None: case(name, "GatherGrad", [dy, ids, x], attrs, domain=PYTRAIN_DOMAIN)
grad("rows_repeats_negative_unused", f32(4, 4, 3, 5), np.zeros((11, 3, 5), np.float32))
grad("rows_one_column", f32(4, 4), np.zeros(11, np.float32))
grad("axis1_repeats_negative_unused", f32(3, 4, 4, 2), np.zeros((3, 11, 2), np.float32), {"axis": 1})
grad("last_axis_negative", f32(2, 3, 4, 4), np.zeros((2, 3, 11), np.float32), {"axis": -1})
unused = {"rows_repeats_negative_unused": 0, "rows_one_column": 0, "axis1_repeats_negative_unused": 1,
          "last_axis_negative": 2}   # each case's axis of the rows

# a constant's indices (read-only: GPT-2's positions): its row list goes up once, then is reused
const = ids.copy()
const.flags.writeable = False
cdy_host = f32(4, 4, 5)
cdy, cx = dev.upload(cdy_host), dev.upload(np.zeros((11, 5), np.float32))
grad_kernel = K.KERNELS[(PYTRAIN_DOMAIN, "GatherGrad")]
before = dev.uploads
first = grad_kernel(OpContext(), cdy, const, cx)[0]
again = grad_kernel(OpContext(), cdy, const, cx)[0]
const_uploads = dev.uploads - before
const_boxes = [np.full((11, 5), np.nan, np.float32) for _ in range(2)]
first.read_into(const_boxes[0])
again.read_into(const_boxes[1])
len(CASES)
"""

RESULTS = r"""
import json
want = get_kernel("GatherGrad", PYTRAIN_DOMAIN).numpy_fn(OpContext(), cdy_host, ids, np.zeros((11, 5), np.float32))[0]
json.dumps({"unused": {name: float(np.abs(np.take(boxes[0], [2, 9], axis=unused[name])).max())
                       for name, op, domain, args, attrs, ctx, outs, boxes in CASES},
            "const_uploads": const_uploads, "const_same": bool(np.array_equal(const_boxes[0], const_boxes[1])),
            "const_err": float(np.abs(const_boxes[0] - want).max())})
"""

# the shaders before the row list: every element of dX scans every index (their bodies as they were)
SCAN_KERNELS = {
    "gather_rows_grad_scan": [["r", "ri", "w"], [64, 1, 1], """
  let i = flat(g);
  let inner = P[1];
  if (i >= P[2]) { return; }
  let r = i32(i / inner); let j = i % inner;
  var acc = 0.0;
  for (var q = 0u; q < P[0]; q = q + 1u) { if (T2[q] == r) { acc = acc + T1[q * inner + j]; } }
  T3[i] = acc;"""],
    "gather_axis_grad_scan": [["r", "ri", "w"], [64, 1, 1], """
  let i = flat(g);
  let count = P[1]; let inner = P[2]; let rows = P[3];
  if (i >= P[0] * rows * inner) { return; }
  let k = i % inner; let r = i / inner; let row = r % rows; let o = r / rows;
  var acc = 0.0;
  for (var j = 0u; j < count; j = j + 1u) {
    if (u32(T2[j]) == row) { acc = acc + T1[(o * count + j) * inner + k]; }
  }
  T3[i] = acc;"""],
}

BITS = r"""
from pytrain.ops.webgpu import nn as gnn
brng = np.random.RandomState(11)
PAIRS = {}   # name -> (row list's box, scan's box)

def both(name, x_shape, ids_shape, axis):
    # dY of wide magnitudes (the order of the additions shows in the bits), indices repeating, negative too
    a = axis % len(x_shape)
    rows = x_shape[a]
    ids = brng.randint(-rows, rows, ids_shape).astype(np.int64)
    dy_shape = tuple(x_shape[:a]) + ids_shape + tuple(x_shape[a + 1:])
    dy = (brng.standard_normal(dy_shape) * 10.0 ** brng.randint(-4, 5, dy_shape)).astype(np.float32)
    gdy = dev.upload(dy)
    new = K.KERNELS[(PYTRAIN_DOMAIN, "GatherGrad")](OpContext(), gdy, ids, dev.upload(np.zeros(x_shape, np.float32)),
                                                    axis=axis)[0]
    outer, inner = int(np.prod(x_shape[:a])), int(np.prod(x_shape[a + 1:]))
    count = int(np.prod(ids_shape))
    old = dev.empty(x_shape)
    idx = gnn.row_indices(ids, rows)
    if a == 0:
        dev.dispatch("gather_rows_grad_scan", old.size, [gdy, idx, old], [count, inner, old.size])
    else:
        dev.dispatch("gather_axis_grad_scan", old.size, [gdy, idx, old], [outer, count, inner, rows])
    boxes = [np.full(x_shape, np.nan, np.float32) for _ in range(2)]
    new.read_into(boxes[0])
    old.read_into(boxes[1])
    PAIRS[name] = boxes

both("rows_crowded", (50, 16), (8, 64), 0)
both("rows_table", (300, 2, 4), (16, 32), 0)
both("axis1", (3, 40, 6), (5, 7), 1)
both("last_axis", (4, 3, 9), (2, 30), -1)
len(PAIRS)
"""

BITS_RESULTS = r"""
import json
json.dumps({name: [bool(np.isnan(a).any()), int((a.view(np.uint32) != b.view(np.uint32)).sum()), int(a.size)]
            for name, (a, b) in PAIRS.items()})
"""

NAMES = ["rows_repeats_negative_unused", "rows_one_column", "axis1_repeats_negative_unused", "last_axis_negative"]


@pytest.fixture(scope="module")
def grad_errors(gpu_page):
    errors = shader_errors(gpu_page, CASES)
    return errors, json.loads(gpu_page.evaluate("code => window.__py(code)", RESULTS))


@pytest.mark.parametrize("name", NAMES)
def test_gather_grad_matches_the_numpy_kernel(grad_errors, name):
    assert_within_float32(name, grad_errors[0][name])


def test_every_case_is_compared(grad_errors):
    assert sorted(grad_errors[0]) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_row_never_indexed_gets_exactly_zero(grad_errors, name):
    assert grad_errors[1]["unused"][name] == 0.0


def test_a_constants_row_list_goes_up_once(grad_errors):
    res = grad_errors[1]
    assert res["const_uploads"] == 1, res   # the first call's row list; the second reuses it
    assert res["const_same"] and res["const_err"] <= 2e-6 * 4, res


@pytest.fixture(scope="module")
def scan_pairs(gpu_page):
    gpu_page.evaluate("k => PytrainGPU.addKernels(k)", SCAN_KERNELS)
    gpu_page.evaluate("code => window.__py(code)", ENQUEUE_OPS[:ENQUEUE_OPS.index("CASES = []")] + BITS)
    gpu_page.evaluate("window.__settle()")
    return json.loads(gpu_page.evaluate("code => window.__py(code)", BITS_RESULTS))


@pytest.mark.parametrize("name", ["rows_crowded", "rows_table", "axis1", "last_axis"])
def test_the_row_list_gives_the_bits_of_the_scan_over_every_index(scan_pairs, name):
    has_nan, differing, size = scan_pairs[name]
    assert size > 0 and not has_nan, scan_pairs[name]
    assert differing == 0, scan_pairs[name]

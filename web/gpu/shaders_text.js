/* pytrain's WebGPU kernels for text models (tiny BERT, GPT-2 with LoRA), added to gpu/webgpu.js's (load after it):
 * the same form (name -> [tensor bindings, workgroup size, WGSL body, its own WGSL functions if any]; P the u32 parameters, pf(i) a float among
 * them; one thread per output element, each summing in index order). Python's side: pytrain/ops/webgpu/text.py. */
(function (root) {
  "use strict";
  // erf as pytrain.ops.special.erf_single: x clamped to [-4, 4], x * P(x^2) / Q(x^2) (here in float32)
  const ERF = `
fn erf1(v: f32) -> f32 {
  let x = clamp(v, -4.0, 4.0);
  let z = x * x;
  var p = z * 2.105944621725523e-06 + 0.00028571993752013274;
  p = p * z + 0.003674815088940624; p = p * z + 0.05247153814046868; p = p * z + 0.1879018511435623;
  p = p * z + 1.1283791032725294;
  var q = z * 3.871681258014943e-05 + 0.0011460361351554428;
  q = q * z + 0.014782575459286245; q = q * z + 0.11312373386134407; q = q * z + 0.49985618611570737;
  q = q * z + 1.0;
  return clamp((x * p) / q, -1.0, 1.0);
}
`;
  root.PytrainGPU.addKernels({
    // Y = f(X): P = size, f (0 Neg, 1 Exp, 2 Tanh, 3 Erf, 4 x^2, 5 x^3 as (x * x) * x, 6 copy)
    unary_text: [["r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  let x = T1[i];
  var y: f32;
  switch (P[1]) {
    case 0u: { y = -x; }
    case 1u: { y = exp(x); }
    case 2u: { y = tanh(clamp(x, -15.0, 15.0)); }
    case 3u: { y = erf1(x); }
    case 4u: { y = x * x; }
    case 5u: { y = (x * x) * x; }
    default: { y = x; }
  }
  T2[i] = y;`, ERF],
    // Y[out index] = X[in index] for a permutation: P = size, rank, then rank output dims, rank strides of X
    // along the output's axes
    transpose: [["r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  let rank = P[1];
  T2[i] = T1[at(i, rank, 2u, 2u + rank)];`],
    // dst[o * dstRow + dstOff + j] = src[o * srcRow + srcOff + j], j < n: a slab of Concat/Split and their
    // gradients. P = outer, n, srcRow, srcOff, dstRow, dstOff
    copy_block: [["r", "w"], [64, 1, 1], `
  let i = flat(g);
  let n = P[1];
  if (i >= P[0] * n) { return; }
  let o = i / n; let j = i % n;
  T2[o * P[4] + P[5] + j] = T1[o * P[2] + P[3] + j];`],
    // Dropout with the CPU generator's keep-mask M (1.0 / 0.0): Y = (X * M) * scale. P = size, scale
    dropout: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  T3[i] = (T1[i] * T2[i]) * pf(1);`],
    // dX = dY * scale where the mask kept, else 0 (selected: an inf upstream does not leak). P = size, scale
    dropout_grad: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  T3[i] = select(0.0, T1[i] * pf(1), T2[i] != 0.0);`],
    // Gather along an axis: X viewed as (outer, rows, inner), Y as (outer, count, inner), indices in range.
    // P = outer, count, inner, rows
    gather_axis: [["r", "ri", "w"], [64, 1, 1], `
  let i = flat(g);
  let count = P[1]; let inner = P[2];
  if (i >= P[0] * count * inner) { return; }
  let k = i % inner; let r = i / inner; let j = r % count; let o = r / count;
  T3[i] = T1[(o * P[3] + u32(T2[j])) * inner + k];`],
    // its gradient: dX[o, row, k] sums, in index order, dY[o, j, k] over the j whose index is row: the row list's
    // T2[rows + 1 + p] for p in T2[row] .. T2[row + 1] (pytrain/ops/webgpu/nn.py's row_list)
    gather_axis_grad: [["r", "ri", "w"], [64, 1, 1], `
  let i = flat(g);
  let count = P[1]; let inner = P[2]; let rows = P[3];
  if (i >= P[0] * rows * inner) { return; }
  let k = i % inner; let r = i / inner; let row = r % rows; let o = r / rows;
  var acc = 0.0;
  for (var p = u32(T2[row]); p < u32(T2[row + 1u]); p = p + 1u) {
    acc = acc + T1[(o * count + u32(T2[rows + 1u + p])) * inner + k];
  }
  T3[i] = acc;`],
    // C[b] = op(A[b]) @ op(B[b]) with broadcast batch axes: P = m, n, k, transA, transB, batch rank, batch dims,
    // A's batch strides, B's (elements; 0 along a broadcast axis); one thread per output element, summing over k
    // in order
    matmul_nd: [["r", "r", "w"], [8, 8, 1], `
  let m = P[0]; let n = P[1]; let k = P[2]; let rank = P[5];
  let row = g.y; let col = g.x; let b = g.z;
  if (row >= m || col >= n) { return; }
  let oa = at(b, rank, 6u, 6u + rank); let ob = at(b, rank, 6u, 6u + 2u * rank);
  let acc = dot_rc(oa, ob, row, col, m, n, k);
  T3[b * m * n + row * n + col] = acc;`, root.PytrainGPU.MATMUL_DOT],
  });
})(typeof globalThis !== "undefined" ? globalThis : this);

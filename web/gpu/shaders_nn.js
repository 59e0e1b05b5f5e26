/* pytrain's WebGPU kernels for CNNs and embedding models, added to gpu/webgpu.js's (load after it): the same
 * form (name -> [tensor bindings, workgroup size, the statements of main]; P the u32 parameters and the
 * prelude's helpers, pf(i), flat(g), win(), tap_in, tap_out: see webgpu.js's PRELUDE; one thread per output
 * element or row, each summing in index order). */
(function (root) {
  "use strict";
  // the workgroup's 128 shares summed in a tree (part[0] + part[64] ..., then pairs): every thread gets the sum;
  // the barriers after the read let the caller fill part again
  const BN_TREE = `
var<workgroup> part: array<f32, 128>;
fn tree(lid: u32) -> f32 {
  for (var s = 64u; s > 0u; s = s >> 1u) {
    workgroupBarrier();
    if (lid < s) { part[lid] = part[lid] + part[lid + s]; }
  }
  workgroupBarrier();
  let total = part[0];
  workgroupBarrier();
  return total;
}
`;
  root.PytrainGPU.addKernels({
    // 2-D convolution of G groups (depthwise when G = C), one thread per output element summing over its group's
    // (c, kh, kw) in order, then the bias. Window P (all kernels below): n, c, m, flag, inH, inW, outH, outW, kH, kW,
    // sH, sW, dH, dW, pH, pW, G
    conv2d: [["r", "r", "r", "w"], [64, 1, 1], `
  let i = flat(g); let w = win();
  if (i >= w.n * w.m * w.outH * w.outW) { return; }
  let ow = i % w.outW; var r = i / w.outW; let oh = r % w.outH; r = r / w.outH; let mm = r % w.m; let nn = r / w.m;
  let Cg = w.c / w.groups; let c0 = (mm / (w.m / w.groups)) * Cg;
  var acc = 0.0;
  for (var c = 0u; c < Cg; c = c + 1u) {
    for (var kh = 0u; kh < w.kH; kh = kh + 1u) {
      let ih = tap_in(oh, kh, w.sH, w.dH, w.pH);
      if (ih < 0 || ih >= i32(w.inH)) { continue; }
      for (var kw = 0u; kw < w.kW; kw = kw + 1u) {
        let iw = tap_in(ow, kw, w.sW, w.dW, w.pW);
        if (iw < 0 || iw >= i32(w.inW)) { continue; }
        acc = acc + T1[((nn * w.c + c0 + c) * w.inH + u32(ih)) * w.inW + u32(iw)] *
          T2[((mm * Cg + c) * w.kH + kh) * w.kW + kw];
      }
    }
  }
  if (w.flag == 1u) { acc = acc + T3[mm]; }
  T4[i] = acc;`],
    // dX of conv2d: each input element sums dY * W over its group's (m, kh, kw) of the outputs whose window holds it
    conv2d_grad_x: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g); let w = win();
  if (i >= w.n * w.c * w.inH * w.inW) { return; }
  let iw = i % w.inW; var r = i / w.inW; let ih = r % w.inH; r = r / w.inH; let cc = r % w.c; let nn = r / w.c;
  let Cg = w.c / w.groups; let Mg = w.m / w.groups; let m0 = (cc / Cg) * Mg; let cl = cc % Cg;
  var acc = 0.0;
  for (var m = m0; m < m0 + Mg; m = m + 1u) {
    for (var kh = 0u; kh < w.kH; kh = kh + 1u) {
      let oh = tap_out(ih, kh, w.sH, w.dH, w.pH, w.outH);
      if (oh < 0) { continue; }
      for (var kw = 0u; kw < w.kW; kw = kw + 1u) {
        let ow = tap_out(iw, kw, w.sW, w.dW, w.pW, w.outW);
        if (ow < 0) { continue; }
        acc = acc + T1[((nn * w.m + m) * w.outH + u32(oh)) * w.outW + u32(ow)] * T2[((m * Cg + cl) * w.kH + kh) * w.kW + kw];
      }
    }
  }
  T3[i] = acc;`],
    // dW of conv2d: each weight (m, c of its group, kh, kw) sums dY * X over (n, oh, ow) in order
    conv2d_grad_w: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g); let w = win();
  let Cg = w.c / w.groups;
  if (i >= w.m * Cg * w.kH * w.kW) { return; }
  let kw = i % w.kW; var r = i / w.kW; let kh = r % w.kH; r = r / w.kH; let cl = r % Cg; let mm = r / Cg;
  let cc = (mm / (w.m / w.groups)) * Cg + cl;
  var acc = 0.0;
  for (var n = 0u; n < w.n; n = n + 1u) {
    for (var oh = 0u; oh < w.outH; oh = oh + 1u) {
      let ih = tap_in(oh, kh, w.sH, w.dH, w.pH);
      if (ih < 0 || ih >= i32(w.inH)) { continue; }
      for (var ow = 0u; ow < w.outW; ow = ow + 1u) {
        let iw = tap_in(ow, kw, w.sW, w.dW, w.pW);
        if (iw < 0 || iw >= i32(w.inW)) { continue; }
        acc = acc + T1[((n * w.m + mm) * w.outH + oh) * w.outW + ow] * T2[((n * w.c + cc) * w.inH + u32(ih)) * w.inW + u32(iw)];
      }
    }
  }
  T3[i] = acc;`],
    // dB of conv2d: dY summed over (n, oh, ow) in order, one thread per output channel
    conv2d_grad_b: [["r", "w"], [64, 1, 1], `
  let mm = g.x; let w = win();
  let size = w.outH * w.outW;
  if (mm >= w.m) { return; }
  var acc = 0.0;
  for (var n = 0u; n < w.n; n = n + 1u) {
    for (var j = 0u; j < size; j = j + 1u) { acc = acc + T1[(n * w.m + mm) * size + j]; }
  }
  T2[mm] = acc;`],
    // 2-D MaxPool: the first maximum in scan order (strict >), its flat index in X (row-major) when P[3] is 1
    max_pool2d: [["r", "w", "wi"], [64, 1, 1], `
  let i = flat(g); let w = win();
  if (i >= w.n * w.c * w.outH * w.outW) { return; }
  let ow = i % w.outW; let oh = (i / w.outW) % w.outH; let plane = i / (w.outW * w.outH);
  var best = 0.0; var at = 0u; var found = false;   // (a window always holds an element: pads < kernel)
  for (var kh = 0u; kh < w.kH; kh = kh + 1u) {
    let ih = tap_in(oh, kh, w.sH, w.dH, w.pH);
    if (ih < 0 || ih >= i32(w.inH)) { continue; }
    for (var kw = 0u; kw < w.kW; kw = kw + 1u) {
      let iw = tap_in(ow, kw, w.sW, w.dW, w.pW);
      if (iw < 0 || iw >= i32(w.inW)) { continue; }
      let k = u32(ih) * w.inW + u32(iw);
      let v = T1[plane * w.inH * w.inW + k];
      if (!found || v > best) { best = v; at = k; found = true; }
    }
  }
  T2[i] = best;
  if (w.flag == 1u) { T3[i] = i32(plane * w.inH * w.inW + at); }`],
    // MaxPoolGrad: each X element sums, in order, the dY of its plane whose index is it. P = planes, in, out sizes
    max_pool2d_grad: [["r", "ri", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0] * P[1]) { return; }
  let plane = i / P[1];
  var acc = 0.0;
  for (var j = 0u; j < P[2]; j = j + 1u) {
    let k = plane * P[2] + j;
    if (T2[k] == i32(i)) { acc = acc + T1[k]; }
  }
  T3[i] = acc;`],
    // BatchNormalization on running statistics: y = x * a + b, a = scale / sqrt(var + eps), b = B - mean * a for
    // its channel. P (all batchnorm kernels) = n, c, spatial size, eps bits
    batchnorm: [["r", "r", "r", "r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0] * P[1] * P[2]) { return; }
  let ch = (i / P[2]) % P[1];
  let a = T2[ch] / sqrt(T5[ch] + pf(3));
  let b = T3[ch] - T4[ch] * a;
  T6[i] = T1[i] * a + b;`],
    // dX of BatchNormalization on running statistics: dY * (scale * invstd)
    batchnorm_grad_x: [["r", "r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0] * P[1] * P[2]) { return; }
  let ch = (i / P[2]) % P[1];
  T4[i] = T1[i] * (T2[ch] * (1.0 / sqrt(T3[ch] + pf(3))));`],
    // dScale[ch] = sum of dY * (x - mean) * invstd, dB[ch] = sum of dY, over (n, spatial) in order
    batchnorm_grad_params: [["r", "r", "r", "r", "w", "w"], [64, 1, 1], `
  let ch = g.x;
  let C = P[1]; let S = P[2];
  if (ch >= C) { return; }
  let inv = 1.0 / sqrt(T4[ch] + pf(3)); let mean = T3[ch];
  var ds = 0.0; var db = 0.0;
  for (var n = 0u; n < P[0]; n = n + 1u) {
    for (var j = 0u; j < S; j = j + 1u) {
      let k = (n * C + ch) * S + j;
      ds = ds + T1[k] * ((T2[k] - mean) * inv); db = db + T1[k];
    }
  }
  T5[ch] = ds; T6[ch] = db;`],
    // Clip by scalar bounds: P = size, lo bits, hi bits, hasLo, hasHi
    clip: [["r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  var y = T1[i];
  if (P[3] == 1u) { y = max(y, pf(1)); }
  if (P[4] == 1u) { y = min(y, pf(2)); }
  T2[i] = y;`],
    // ClipGrad: dY where lo <= x <= hi, else 0 (selected). P as clip's
    clip_grad: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  let x = T2[i];
  let keep = (P[3] == 0u || x >= pf(1)) && (P[4] == 0u || x <= pf(2));
  T3[i] = select(0.0, T1[i], keep);`],
    // dX[i] = dY[i / plane] * scale (GlobalAveragePoolGrad). P = size, plane, scale bits
    plane_scale: [["r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  T2[i] = T1[i / P[1]] * pf(2);`],
    // 2-D AveragePool: the window's elements in the input summed in (kh, kw) order (pads add nothing), divided by
    // T2[output position] (onnxruntime's count, from the host). Window P as conv2d's
    avg_pool2d: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g); let w = win();
  if (i >= w.n * w.c * w.outH * w.outW) { return; }
  let ow = i % w.outW; let oh = (i / w.outW) % w.outH; let plane = i / (w.outW * w.outH);
  var acc = 0.0;
  for (var kh = 0u; kh < w.kH; kh = kh + 1u) {
    let ih = tap_in(oh, kh, w.sH, w.dH, w.pH);
    if (ih < 0 || ih >= i32(w.inH)) { continue; }
    for (var kw = 0u; kw < w.kW; kw = kw + 1u) {
      let iw = tap_in(ow, kw, w.sW, w.dW, w.pW);
      if (iw < 0 || iw >= i32(w.inW)) { continue; }
      acc = acc + T1[(plane * w.inH + u32(ih)) * w.inW + u32(iw)];
    }
  }
  T3[i] = acc / T2[oh * w.outW + ow];`],
    // AveragePoolGrad: each input element sums, in (kh, kw) order, dY * (1 / max(count, 1)) of the windows holding it
    avg_pool2d_grad: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g); let w = win();
  if (i >= w.n * w.c * w.inH * w.inW) { return; }
  let iw = i % w.inW; let ih = (i / w.inW) % w.inH; let plane = i / (w.inW * w.inH);
  var acc = 0.0;
  for (var kh = 0u; kh < w.kH; kh = kh + 1u) {
    let oh = tap_out(ih, kh, w.sH, w.dH, w.pH, w.outH);
    if (oh < 0) { continue; }
    for (var kw = 0u; kw < w.kW; kw = kw + 1u) {
      let ow = tap_out(iw, kw, w.sW, w.dW, w.pW, w.outW);
      if (ow < 0) { continue; }
      let o = u32(oh) * w.outW + u32(ow);
      acc = acc + T1[plane * w.outH * w.outW + o] * (1.0 / max(T2[o], 1.0));
    }
  }
  T3[i] = acc;`],
    // Gather of rows (axis 0): Y[q, j] = X[I[q], j]. P = count, inner
    gather_rows: [["r", "ri", "w"], [64, 1, 1], `
  let i = flat(g);
  let inner = P[1];
  if (i >= P[0] * inner) { return; }
  T3[i] = T1[u32(T2[i / inner]) * inner + i % inner];`],
    // GatherGrad of rows: dX[r, j] sums, in index order, dY[q, j] over the q whose index is r: row r's q are
    // T2[P[2] + 1 + p] for p in T2[r] .. T2[r + 1] (pytrain/ops/webgpu/nn.py's row_list). P = inner, size, rows
    gather_rows_grad: [["r", "ri", "w"], [64, 1, 1], `
  let i = flat(g);
  let inner = P[0];
  if (i >= P[1]) { return; }
  let r = i / inner; let j = i % inner; let base = P[2] + 1u;
  var acc = 0.0;
  for (var p = u32(T2[r]); p < u32(T2[r + 1u]); p = p + 1u) { acc = acc + T1[u32(T2[base + p]) * inner + j]; }
  T3[i] = acc;`],
    // LayerNormalization over rows of n: mean, 1 / sqrt(var + eps), y = (x - mean) * inv * scale (+ b).
    // P = rows, n, eps bits, hasB
    layernorm: [["r", "r", "r", "w", "w", "w"], [64, 1, 1], `
  let r = flat(g);
  let n = P[1];
  if (r >= P[0]) { return; }
  let o = r * n;
  var s = 0.0;
  for (var j = 0u; j < n; j = j + 1u) { s = s + T1[o + j]; }
  let mean = s / f32(n);
  var v = 0.0;
  for (var j = 0u; j < n; j = j + 1u) { let d = T1[o + j] - mean; v = v + d * d; }
  let inv = 1.0 / sqrt(v * (1.0 / f32(n)) + pf(2));
  for (var j = 0u; j < n; j = j + 1u) {
    var y = ((T1[o + j] - mean) * inv) * T2[j];
    if (P[3] == 1u) { y = y + T3[j]; }
    T4[o + j] = y;
  }
  T5[r] = mean; T6[r] = inv;`],
    // dX of LayerNormalization: inv * (g - mean(g) - xhat * mean(g * xhat)), g = dY * scale. P = rows, n
    layernorm_grad_x: [["r", "r", "r", "r", "r", "w"], [64, 1, 1], `
  let r = flat(g);
  let n = P[1];
  if (r >= P[0]) { return; }
  let o = r * n; let mean = T4[r]; let inv = T5[r];
  var sg = 0.0; var sgx = 0.0;
  for (var j = 0u; j < n; j = j + 1u) {
    let gj = T1[o + j] * T3[j];
    sg = sg + gj; sgx = sgx + gj * ((T2[o + j] - mean) * inv);
  }
  let mg = sg * (1.0 / f32(n)); let mgx = sgx * (1.0 / f32(n));
  for (var j = 0u; j < n; j = j + 1u) {
    let xh = (T2[o + j] - mean) * inv;
    T6[o + j] = inv * ((T1[o + j] * T3[j] - mg) - xh * mgx);
  }`],
    // dScale[j] = sum over rows of dY * xhat, dB[j] = sum of dY, in row order. P = rows, n
    layernorm_grad_params: [["r", "r", "r", "r", "w", "w"], [64, 1, 1], `
  let j = g.x;
  let n = P[1];
  if (j >= n) { return; }
  var ds = 0.0; var db = 0.0;
  for (var r = 0u; r < P[0]; r = r + 1u) {
    let dy = T1[r * n + j];
    ds = ds + dy * ((T2[r * n + j] - T3[r]) * T4[r]); db = db + dy;
  }
  T5[j] = ds; T6[j] = db;`],
    // Softmax of rows of n: exp(x - max) / their sum (in order). P = rows, n
    softmax_rows: [["r", "w"], [64, 1, 1], `
  let r = flat(g);
  let n = P[1];
  if (r >= P[0]) { return; }
  let o = r * n;
  var mx = T1[o];
  for (var j = 1u; j < n; j = j + 1u) { mx = max(mx, T1[o + j]); }
  var s = 0.0;
  for (var j = 0u; j < n; j = j + 1u) { let e = exp(T1[o + j] - mx); T2[o + j] = e; s = s + e; }
  for (var j = 0u; j < n; j = j + 1u) { T2[o + j] = T2[o + j] / s; }`],
    // SoftmaxGrad of rows: Y * (dY - sum(dY * Y)). P = rows, n
    softmax_grad_rows: [["r", "r", "w"], [64, 1, 1], `
  let r = flat(g);
  let n = P[1];
  if (r >= P[0]) { return; }
  let o = r * n;
  var s = 0.0;
  for (var j = 0u; j < n; j = j + 1u) { s = s + T1[o + j] * T2[o + j]; }
  for (var j = 0u; j < n; j = j + 1u) { T3[o + j] = T2[o + j] * (T1[o + j] - s); }`],
    // BatchNormalization on the batch's statistics (training): a workgroup of 128 threads per channel, each summing
    // a strided share of the channel's n * spatial values, then a tree over the shares (any size, odd or large).
    // bn_stats: T2 mean, T3 biased variance (over the centred values: a second pass), T4 1 / sqrt(var + eps).
    // P = n, c, spatial size, 1 / (n * spatial) bits, eps bits
    bn_stats: [["r", "w", "w", "w"], [128, 1, 1], `
  let C = P[1]; let S = P[2]; let cnt = P[0] * S;
  let ch = g.x / 128u; let lid = g.x % 128u;
  var acc = 0.0;
  for (var e = lid; e < cnt; e = e + 128u) { acc = acc + T1[((e / S) * C + ch) * S + e % S]; }
  part[lid] = acc;
  let mean = tree(lid) * pf(3);
  acc = 0.0;
  for (var e = lid; e < cnt; e = e + 128u) { let d = T1[((e / S) * C + ch) * S + e % S] - mean; acc = acc + d * d; }
  part[lid] = acc;
  let v = tree(lid) * pf(3);
  if (lid == 0u) { T2[ch] = mean; T3[ch] = v; T4[ch] = 1.0 / sqrt(v + pf(4)); }`, BN_TREE],
    // the running statistics: T5 = T3 * m + T1 * (1 - m), T6 = T4 * m + T2 * factor * (1 - m) (factor n / (n - 1):
    // the unbiased variance, BatchNormTraining's; 1: ONNX BatchNormalization's). P = c, m bits, 1 - m bits, factor bits
    bn_running: [["r", "r", "r", "r", "w", "w"], [64, 1, 1], `
  let ch = flat(g);
  if (ch >= P[0]) { return; }
  T5[ch] = T3[ch] * pf(1) + T1[ch] * pf(2);
  var v = T2[ch];
  if (pf(3) != 1.0) { v = v * pf(3); }
  T6[ch] = T4[ch] * pf(1) + v * pf(2);`],
    // Y from the batch's statistics: mode 0 (BatchNormTraining) (x - mean) * (invstd * scale) + B with T3 = invstd;
    // mode 1 (ONNX BatchNormalization) x * a + (B - mean * a), a = scale / sqrt(var + eps), T3 = var.
    // P = n, c, spatial size, eps bits, mode
    bn_apply: [["r", "r", "r", "r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0] * P[1] * P[2]) { return; }
  let ch = (i / P[2]) % P[1];
  if (P[4] == 0u) { T6[i] = (T1[i] - T2[ch]) * (T3[ch] * T4[ch]) + T5[ch]; return; }
  let a = T4[ch] / sqrt(T3[ch] + pf(3));
  T6[i] = T1[i] * a + (T5[ch] - T2[ch] * a);`],
    // BatchNormGrad's sums per channel (a workgroup each, as bn_stats): T5 dScale = sum dY * xhat, T6 dB = sum dY,
    // xhat = (x - mean) * invstd. P = n, c, spatial size
    bn_grad_sums: [["r", "r", "r", "r", "w", "w"], [128, 1, 1], `
  let C = P[1]; let S = P[2]; let cnt = P[0] * S;
  let ch = g.x / 128u; let lid = g.x % 128u;
  let mean = T3[ch]; let inv = T4[ch];
  var ds = 0.0; var db = 0.0;
  for (var e = lid; e < cnt; e = e + 128u) {
    let k = ((e / S) * C + ch) * S + e % S;
    ds = ds + T1[k] * ((T2[k] - mean) * inv); db = db + T1[k];
  }
  part[lid] = ds;
  let s = tree(lid);
  part[lid] = db;
  let b = tree(lid);
  if (lid == 0u) { T5[ch] = s; T6[ch] = b; }`, BN_TREE],
    // BatchNormGrad's per-channel coefficients into T5 (3 c): k = scale * invstd, k * dScale / count, k * dB / count.
    // P = c, 1 / count bits
    bn_grad_coef: [["r", "r", "r", "r", "w"], [64, 1, 1], `
  let ch = flat(g); let C = P[0];
  if (ch >= C) { return; }
  let k = T1[ch] * T2[ch];
  T5[ch] = k; T5[C + ch] = (k * T3[ch]) * pf(1); T5[2u * C + ch] = (k * T4[ch]) * pf(1);`],
    // dX = dY * k - xhat * (k dScale / count) - k dB / count, xhat = (x - mean) * invstd. P = n, c, spatial size
    bn_grad_x: [["r", "r", "r", "r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0] * P[1] * P[2]) { return; }
  let C = P[1]; let ch = (i / P[2]) % C;
  let xhat = (T2[i] - T3[ch]) * T4[ch];
  T6[i] = (T1[i] * T5[ch] - xhat * T5[C + ch]) - T5[2u * C + ch];`],
  });
})(typeof globalThis !== "undefined" ? globalThis : this);

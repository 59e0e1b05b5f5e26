/* Element-wise kernels (linked into kernels.wasm by build.sh): one SIMD pass where numpy in
 * Pyodide (no SIMD, a temporary per step) needs several scalar ones. Results are bit for bit
 * those of the numpy kernels in pytrain/ops (op_activation.relu, train/op_relu_grad, Clip). */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

/* y = np.maximum(x, 0): x < 0 ? 0 : x, so NaN and -0.0 pass through as numpy lets them. */
EXPORT("pytrain_relu")
void relu(const float *x, float *y, int n) {
    v128_t zero = wasm_f32x4_splat(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, wasm_f32x4_pmax(wasm_v128_load(x + i), zero));
    for (; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* dx = np.where(y > 0, dy, 0): the bits of dy where y > 0, +0.0 elsewhere (NaN y included). */
EXPORT("pytrain_relu_grad")
void relu_grad(const float *dy, const float *y, float *dx, int n) {
    v128_t zero = wasm_f32x4_splat(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        wasm_v128_store(dx + i, wasm_v128_and(wasm_v128_load(dy + i), wasm_f32x4_gt(wasm_v128_load(y + i), zero)));
    for (; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* out[j] = sum over i of g[i][j] for a C-contiguous (rows x cols) g: the bias gradient. Rows are
 * added one after the other, as numpy reduces a leading axis, so the sums are numpy's to the bit. */
EXPORT("pytrain_sum_rows")
void sum_rows(const float *g, float *out, int rows, int cols) {
    int c4 = cols & ~3;
    for (int j = 0; j < cols; j++) out[j] = g[j];
    for (int i = 1; i < rows; i++) {
        const float *row = g + (long)i * cols;
        int j = 0;
        for (; j < c4; j += 4) wasm_v128_store(out + j, wasm_f32x4_add(wasm_v128_load(out + j), wasm_v128_load(row + j)));
        for (; j < cols; j++) out[j] += row[j];
    }
}

/* y = a (op) b for float32, one IEEE operation per element as numpy's ufunc (the same bits):
 * op 0 add, 1 sub, 2 mul, 3 div. b is n elements (b_len == n), one scalar (b_len == 1) or a row of
 * b_len repeated along a (a trailing-axes broadcast, n a multiple of b_len); `swap` computes
 * b (op) a instead, for a broadcast left operand of Sub or Div. */
#define BINARY_LOOP(VOP, SOP)                                                                        \
    if (b_len == n) {                                                                                \
        int i = 0;                                                                                   \
        for (; i + 4 <= n; i += 4)                                                                   \
            wasm_v128_store(y + i, VOP(wasm_v128_load(a + i), wasm_v128_load(b + i)));               \
        for (; i < n; i++) y[i] = SOP(a[i], b[i]);                                                   \
    } else if (b_len == 1) {                                                                         \
        float s = b[0];                                                                              \
        v128_t vb = wasm_f32x4_splat(s);                                                             \
        int i = 0;                                                                                   \
        for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, VOP(wasm_v128_load(a + i), vb));           \
        for (; i < n; i++) y[i] = SOP(a[i], s);                                                      \
    } else {                                                                                         \
        for (int r = 0; r < n; r += b_len) {                                                         \
            const float *ar = a + r;                                                                 \
            float *yr = y + r;                                                                       \
            int j = 0;                                                                               \
            for (; j + 4 <= b_len; j += 4)                                                           \
                wasm_v128_store(yr + j, VOP(wasm_v128_load(ar + j), wasm_v128_load(b + j)));         \
            for (; j < b_len; j++) yr[j] = SOP(ar[j], b[j]);                                         \
        }                                                                                            \
    }

/* the operations with their operands reversed, for `swap` (a broadcast left operand) */
#define V_RSUB(x, z) wasm_f32x4_sub((z), (x))
#define V_RDIV(x, z) wasm_f32x4_div((z), (x))
#define S_RSUB(x, z) ((z) - (x))
#define S_RDIV(x, z) ((z) / (x))
#define S_ADD(x, z) ((x) + (z))
#define S_SUB(x, z) ((x) - (z))
#define S_MUL(x, z) ((x) * (z))
#define S_DIV(x, z) ((x) / (z))

EXPORT("pytrain_binary")
void binary(int op, const float *a, const float *b, float *y, int n, int b_len, int swap) {
    if (op == 0) { BINARY_LOOP(wasm_f32x4_add, S_ADD) }       /* (a + b and b + a: the same bits) */
    else if (op == 2) { BINARY_LOOP(wasm_f32x4_mul, S_MUL) }
    else if (op == 1 && !swap) { BINARY_LOOP(wasm_f32x4_sub, S_SUB) }
    else if (op == 1) { BINARY_LOOP(V_RSUB, S_RSUB) }
    else if (!swap) { BINARY_LOOP(wasm_f32x4_div, S_DIV) }
    else { BINARY_LOOP(V_RDIV, S_RDIV) }
}

/* ---- Clip ------------------------------------------------------------------------------------ */

/* y = np.minimum(np.maximum(x, lo), hi) with numpy's NaN rule (a NaN operand wins: wasm's
 * f32x4.min/max propagate NaN the same way). Absent bounds come as -inf / +inf. */
EXPORT("pytrain_clip")
void clip(const float *x, float *y, int n, float lo, float hi) {
    v128_t vlo = wasm_f32x4_splat(lo), vhi = wasm_f32x4_splat(hi);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        wasm_v128_store(y + i, wasm_f32x4_min(wasm_f32x4_max(wasm_v128_load(x + i), vlo), vhi));
    for (; i < n; i++) {
        float v = x[i];
        v = (v >= lo || v != v) ? v : lo;
        y[i] = (v <= hi || v != v) ? v : hi;
    }
}

/* ---- rows broadcast, hard activations ---------------------------------------------------------- */

/* y[r, :] = a[r, :] (op) b[r] over (rows x cols) float32, op as `binary` (swap: b[r] (op) a[r, :]): a
 * (N, C, H, W) tensor with an (N, C, 1, 1) one, squeeze-and-excite's channel scale, which numpy's
 * broadcasting loop in Pyodide runs one short row at a time. The same IEEE operation per element. */
EXPORT("pytrain_binary_rows")
void binary_rows(int op, const float *a, const float *b, float *y, int rows, int cols, int swap) {
    for (int r = 0; r < rows; r++)
        binary(op, a + (long)r * cols, b + r, y + (long)r * cols, cols, 1, swap);
}

/* In place over n float32: kind 1 HardSigmoid y = clip(y * alpha + beta, 0, 1); kind 2 HardSwish
 * y = y * clip(y * alpha + beta, 0, 1) (alpha = float32(1/6), beta = 0.5): the float32 operations of
 * FusedConv's numpy activation (op_conv_fused._activate) in its order, one pass instead of four
 * numpy ones with their temporaries. NaN stays NaN (wasm's min/max propagate it, as np.clip). */
EXPORT("pytrain_hard_activation")
void hard_activation(float *y, int n, int kind, float alpha, float beta) {
    v128_t va = wasm_f32x4_splat(alpha), vb = wasm_f32x4_splat(beta);
    v128_t zero = wasm_f32x4_splat(0.0f), one = wasm_f32x4_splat(1.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v128_t v = wasm_v128_load(y + i);
        v128_t g = wasm_f32x4_add(wasm_f32x4_mul(v, va), vb);
        g = wasm_f32x4_min(wasm_f32x4_max(g, zero), one);
        wasm_v128_store(y + i, kind == 2 ? wasm_f32x4_mul(v, g) : g);
    }
    for (; i < n; i++) {
        float v = y[i];
        float g = v * alpha;
        g = g + beta;
        g = (g >= 0.0f || g != g) ? g : 0.0f;
        g = (g <= 1.0f || g != g) ? g : 1.0f;
        y[i] = kind == 2 ? v * g : g;
    }
}

/* The gradient of hard_activation in one pass (pytrain/ops/train/op_hard_activations_grad.py's formulas,
 * the same float32 operations): kind 1 HardSigmoid, dx = alpha * dy where 0 < alpha * x + beta < 1, else 0
 * (NaN x: 0); kind 2 HardSwish, s = x / 6, z = s + 1/2, dx = dy * (clip(z, 0, 1) + (s where 0 < z < 1))
 * (NaN x: NaN). */
EXPORT("pytrain_hard_activation_grad")
void hard_activation_grad(const float *dy, const float *x, float *dx, int n, int kind, float alpha, float beta) {
    v128_t zero = wasm_f32x4_splat(0.0f), one = wasm_f32x4_splat(1.0f);
    int i = 0;
    if (kind == 1) {
        v128_t va = wasm_f32x4_splat(alpha), vb = wasm_f32x4_splat(beta);
        for (; i + 4 <= n; i += 4) {
            v128_t z = wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(x + i), va), vb);
            v128_t in = wasm_v128_and(wasm_f32x4_gt(z, zero), wasm_f32x4_lt(z, one));
            wasm_v128_store(dx + i, wasm_v128_and(wasm_f32x4_mul(wasm_v128_load(dy + i), va), in));
        }
        for (; i < n; i++) {
            float z = x[i] * alpha;
            z = z + beta;
            dx[i] = (z > 0.0f && z < 1.0f) ? dy[i] * alpha : 0.0f;
        }
        return;
    }
    v128_t six = wasm_f32x4_splat(6.0f), half = wasm_f32x4_splat(0.5f);
    for (; i + 4 <= n; i += 4) {
        v128_t s = wasm_f32x4_div(wasm_v128_load(x + i), six);
        v128_t z = wasm_f32x4_add(s, half);
        v128_t in = wasm_v128_and(wasm_f32x4_gt(z, zero), wasm_f32x4_lt(z, one));
        v128_t slope = wasm_f32x4_min(wasm_f32x4_max(z, zero), one);
        slope = wasm_f32x4_add(slope, wasm_v128_and(s, in));
        wasm_v128_store(dx + i, wasm_f32x4_mul(slope, wasm_v128_load(dy + i)));
    }
    for (; i < n; i++) {
        float s = x[i] / 6.0f;
        float z = s + 0.5f;
        float slope = z != z ? z : (z < 0.0f ? 0.0f : (z > 1.0f ? 1.0f : z));
        if (z > 0.0f && z < 1.0f) slope = slope + s;
        dx[i] = slope * dy[i];
    }
}

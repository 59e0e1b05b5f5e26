/* Element-wise kernels (linked into gemm.wasm by build.sh): one SIMD pass where numpy in
 * Pyodide (no SIMD, a temporary per step) needs several scalar ones. Results are bit for bit
 * those of the numpy kernels in pytrain/ops (op_activation.relu, train/op_relu_grad). */
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

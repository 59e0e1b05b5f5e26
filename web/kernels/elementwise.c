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

/* BatchNormalization in inference form (linked into kernels.wasm by build.sh): one pass where numpy
 * in Pyodide makes a multiply and an add, each with its temporary. Results equal the numpy kernel
 * to the bit (the same float32 operations in the same order, no FMA in wasm). */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

/* ---- BatchNormalization (inference), per-channel affine ---------------------------------------- */

/* y[n, c, :] = x[n, c, :] * a[c] + b[c] over (N, C, S) float32: the numpy kernel's `X * a` then
 * `+= b`, two float32 roundings each (wasm has no fused multiply-add, so the same bits). */
EXPORT("pytrain_channel_affine")
void channel_affine(const float *x, float *y, const float *a, const float *b, int n, int c, int s) {
    for (int i = 0; i < n * c; i++) {
        const float *xi = x + (long)i * s;
        float *yi = y + (long)i * s;
        float ai = a[i % c], bi = b[i % c];
        v128_t va = wasm_f32x4_splat(ai), vb = wasm_f32x4_splat(bi);
        int j = 0;
        for (; j + 4 <= s; j += 4)
            wasm_v128_store(yi + j, wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(xi + j), va), vb));
        for (; j < s; j++) yi[j] = xi[j] * ai + bi;
    }
}

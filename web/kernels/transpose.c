/* 2-D transpose of 32-bit elements (linked into kernels.wasm by build.sh): the batch-first <->
 * batch-last moves around a convolution, (N, C*H*W) <-> (C*H*W, N). numpy in Pyodide copies such
 * views one element at a time through its generic strided loop; here 4x4 tiles are transposed
 * in registers. */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

/* dst (cols x rows) = src (rows x cols)^T, both C-contiguous. */
EXPORT("pytrain_transpose")
void transpose(const float *src, float *dst, int rows, int cols) {
    int r4 = rows & ~3, c4 = cols & ~3;
    for (int i = 0; i < r4; i += 4) {
        const float *s = src + (long)i * cols;
        for (int j = 0; j < c4; j += 4) {
            v128_t a = wasm_v128_load(s + j);
            v128_t b = wasm_v128_load(s + cols + j);
            v128_t c = wasm_v128_load(s + 2 * cols + j);
            v128_t d = wasm_v128_load(s + 3 * cols + j);
            v128_t t0 = wasm_i32x4_shuffle(a, b, 0, 4, 1, 5);
            v128_t t1 = wasm_i32x4_shuffle(c, d, 0, 4, 1, 5);
            v128_t t2 = wasm_i32x4_shuffle(a, b, 2, 6, 3, 7);
            v128_t t3 = wasm_i32x4_shuffle(c, d, 2, 6, 3, 7);
            float *o = dst + (long)j * rows + i;
            wasm_v128_store(o, wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5));
            wasm_v128_store(o + rows, wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7));
            wasm_v128_store(o + 2 * rows, wasm_i32x4_shuffle(t2, t3, 0, 1, 4, 5));
            wasm_v128_store(o + 3 * rows, wasm_i32x4_shuffle(t2, t3, 2, 3, 6, 7));
        }
        for (int j = c4; j < cols; j++)
            for (int k = 0; k < 4; k++) dst[(long)j * rows + i + k] = s[(long)k * cols + j];
    }
    for (int i = r4; i < rows; i++)
        for (int j = 0; j < cols; j++) dst[(long)j * rows + i] = src[(long)i * cols + j];
}

/* The Adam/AdamW update in one pass over each parameter (linked into kernels.wasm by build.sh).
 *
 * numpy in Pyodide has no SIMD and makes a separate pass per operation (about ten for Adam),
 * which made the optimizer a third of a browser training step. This loop does the same float32
 * operations in the same order as pytrain.ops.train.op_optimizers._adam_update, so the results
 * are the same bit for bit (every step is an IEEE operation per lane, sqrt included):
 *   [decoupled] p *= 1 - lr*wd            [else] g = g + wd*p
 *   m = m*b1 + g*(1-b1);  v = v*b2 + (g*g)*(1-b2)
 *   p -= (m / (sqrt(v)*inv_sqrt_bc2 + eps)) * step_size
 * wasm has no fused multiply-add in the baseline, so clang cannot contract these.
 */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

typedef struct {
    float one_minus_b1, b1, one_minus_b2, b2, inv_sqrt_bc2, eps, step_size, wd, decay;
    int decoupled;
} AdamScalars;

static void adam_one(int n, float *p, const float *g, float *m, float *v, const AdamScalars *s) {
    v128_t omb1 = wasm_f32x4_splat(s->one_minus_b1), b1 = wasm_f32x4_splat(s->b1);
    v128_t omb2 = wasm_f32x4_splat(s->one_minus_b2), b2 = wasm_f32x4_splat(s->b2);
    v128_t ibc2 = wasm_f32x4_splat(s->inv_sqrt_bc2), eps = wasm_f32x4_splat(s->eps);
    v128_t step = wasm_f32x4_splat(s->step_size), wd = wasm_f32x4_splat(s->wd);
    v128_t decay = wasm_f32x4_splat(s->decay);
    int use_wd = s->wd != 0.0f, decoupled = s->decoupled;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v128_t gi = wasm_v128_load(g + i), pi = wasm_v128_load(p + i);
        if (use_wd) {
            if (decoupled) pi = wasm_f32x4_mul(pi, decay);
            else gi = wasm_f32x4_add(gi, wasm_f32x4_mul(wd, pi));
        }
        v128_t mi = wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(m + i), b1), wasm_f32x4_mul(gi, omb1));
        v128_t vi = wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(v + i), b2),
                                   wasm_f32x4_mul(wasm_f32x4_mul(gi, gi), omb2));
        wasm_v128_store(m + i, mi);
        wasm_v128_store(v + i, vi);
        v128_t denom = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_sqrt(vi), ibc2), eps);
        wasm_v128_store(p + i, wasm_f32x4_sub(pi, wasm_f32x4_mul(wasm_f32x4_div(mi, denom), step)));
    }
    for (; i < n; i++) {
        float gi = g[i];
        float pi = p[i];
        if (use_wd) {
            if (decoupled) pi = pi * s->decay;
            else gi = gi + s->wd * pi;
        }
        float mi = m[i] * s->b1 + gi * s->one_minus_b1;
        float vi = v[i] * s->b2 + (gi * gi) * s->one_minus_b2;
        m[i] = mi;
        v[i] = vi;
        float denom = __builtin_sqrtf(vi) * s->inv_sqrt_bc2 + s->eps;
        p[i] = pi - (mi / denom) * s->step_size;
    }
}

/* Every parameter of a model in one call: `table` holds (n, p, g, m, v) per parameter, the
 * float arrays' byte addresses as ints. */
EXPORT("pytrain_adam")
void adam(const int *table, int count, float one_minus_b1, float b1, float one_minus_b2, float b2,
          float inv_sqrt_bc2, float eps, float step_size, float wd, int decoupled, float decay) {
    AdamScalars s = {one_minus_b1, b1, one_minus_b2, b2, inv_sqrt_bc2, eps, step_size, wd, decay, decoupled};
    for (int k = 0; k < count; k++, table += 5)
        adam_one(table[0], (float *)table[1], (const float *)table[2], (float *)table[3], (float *)table[4], &s);
}

/* The guard before a step (pytrain.device.module._first_non_finite): the index of the first of `count`
 * float32 arrays, table = (n, pointer) pairs, holding a NaN or an infinity, or -1. One SIMD pass
 * each: |x| <= FLT_MAX is false exactly for NaN and +-inf; four independent masks per pass. */
EXPORT("pytrain_first_non_finite")
int first_non_finite(const int *table, int count) {
    const v128_t big = wasm_f32x4_splat(3.40282346638528859812e+38f);
    for (int k = 0; k < count; k++) {
        int n = table[2 * k];
        const float *x = (const float *)table[2 * k + 1];
        v128_t ok0 = wasm_i32x4_splat(-1), ok1 = ok0, ok2 = ok0, ok3 = ok0;
        int i = 0;
        for (; i + 16 <= n; i += 16) {
            ok0 = wasm_v128_and(ok0, wasm_f32x4_le(wasm_f32x4_abs(wasm_v128_load(x + i)), big));
            ok1 = wasm_v128_and(ok1, wasm_f32x4_le(wasm_f32x4_abs(wasm_v128_load(x + i + 4)), big));
            ok2 = wasm_v128_and(ok2, wasm_f32x4_le(wasm_f32x4_abs(wasm_v128_load(x + i + 8)), big));
            ok3 = wasm_v128_and(ok3, wasm_f32x4_le(wasm_f32x4_abs(wasm_v128_load(x + i + 12)), big));
        }
        int bad = !wasm_i32x4_all_true(wasm_v128_and(wasm_v128_and(ok0, ok1), wasm_v128_and(ok2, ok3)));
        for (; i < n; i++) bad |= !(__builtin_fabsf(x[i]) <= 3.40282346638528859812e+38f);
        if (bad) return k;
    }
    return -1;
}

/* Exp and Erf of float32 tensors (linked into kernels.wasm by build.sh): BERT's GELU and its gradient.
 * In Pyodide numpy's Erf is a dozen float64 passes plus masks; here one pass, one call. Computed
 * in double precision as numpy's are (with expmath.h's exp, since there is no libm), so the
 * results equal numpy's to float32 rounding.
 */
#include <wasm_simd128.h>

#include "erf64.h"

#define EXPORT(name) __attribute__((export_name(name)))

/* y = float32(f(x)) computed in double, four floats at a time: through the two-lane form `pair`
 * when `in_range` holds for both halves, else element by element through the scalar `one` (which
 * gives the same bits). Always inlined with constant function arguments, so the calls are direct
 * and inlined too (no call_indirect, no table). */
static inline __attribute__((always_inline)) void map_f32_via_f64(const float *x, float *y, int n,
                                                                  v128_t (*pair)(v128_t), int (*in_range)(v128_t),
                                                                  double (*one)(double)) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v128_t v = wasm_v128_load(x + i);
        v128_t lo = wasm_f64x2_promote_low_f32x4(v), hi = promote_high(v);
        if (in_range(lo) && in_range(hi)) {
            wasm_v128_store(y + i, demote_pair(pair(lo), pair(hi)));
        } else {
            for (int j = 0; j < 4; j++) y[i + j] = (float)one((double)x[i + j]);
        }
    }
    for (; i < n; i++) y[i] = (float)one((double)x[i]);
}

/* y = float32(e^x), as np.exp in float32 (correctly rounded but for rare double-rounding ties). */
EXPORT("pytrain_exp")
void exp_f32(const float *x, float *y, int n) {
    map_f32_via_f64(x, y, n, exp_f64x2, exp_fast_range, exp_f64);
}

/* y = float32(erf(x)), as pytrain.ops.special.erf in float32. */
EXPORT("pytrain_erf")
void erf_f32(const float *x, float *y, int n) {
    map_f32_via_f64(x, y, n, erf_small_f64x2, erf_small_range, erf_f64);
}


/* ---- tanh in float32 (the tab's GPT-2 GELU: 4 lanes, within 3 ulps) ------------------------------------ */

#include "expf32.h"

/* tanh(x) in float32: below |x| = 0.625 Cephes' tanhf odd polynomial x + x^3 P(x^2), else (1 - e) / (1 + e)
 * with e = e^(-2|x|) (expf32.h) and x's sign; NaN stays NaN, +-inf gives +-1, -0 stays -0. */
static inline v128_t tanh_f32x4(v128_t x) {
    v128_t a = wasm_f32x4_abs(x);
    v128_t z = wasm_f32x4_mul(x, x);
    v128_t p = wasm_f32x4_splat(-5.70498872745e-3f);
    p = wasm_f32x4_add(wasm_f32x4_mul(p, z), wasm_f32x4_splat(2.06390887954e-2f));
    p = wasm_f32x4_add(wasm_f32x4_mul(p, z), wasm_f32x4_splat(-5.37397155531e-2f));
    p = wasm_f32x4_add(wasm_f32x4_mul(p, z), wasm_f32x4_splat(1.33314422036e-1f));
    p = wasm_f32x4_add(wasm_f32x4_mul(p, z), wasm_f32x4_splat(-3.33332819422e-1f));
    v128_t small = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_mul(p, z), x), x);
    v128_t e = exp_nonpositive_f32x4(wasm_f32x4_neg(wasm_f32x4_add(a, a)));
    v128_t one = wasm_f32x4_splat(1.0f);
    v128_t big = wasm_f32x4_div(wasm_f32x4_sub(one, e), wasm_f32x4_add(one, e));
    v128_t y = wasm_v128_bitselect(small, big, wasm_f32x4_lt(a, wasm_f32x4_splat(0.625f)));
    return wasm_v128_or(y, wasm_v128_and(x, wasm_f32x4_splat(-0.0f)));   /* x's sign (-0 too) */
}

/* y = tanh(x) in float32 arithmetic, within 3 float32 ulps of the float64 tanh rounded (twice the speed of a
 * double-precision path on GPT-2's GELU). */
EXPORT("pytrain_tanh")
void tanh_f32(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, tanh_f32x4(wasm_v128_load(x + i)));
    for (; i < n; i++) y[i] = wasm_f32x4_extract_lane(tanh_f32x4(wasm_f32x4_splat(x[i])), 0);
}

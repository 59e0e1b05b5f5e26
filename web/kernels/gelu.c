/* GELU and its gradient in one pass each (linked into kernels.wasm by build.sh): the training model's Gelu and
 * GeluGrad nodes (pytrain.autodiff.gelu_forms fuses the exporters' chains into them; routed by
 * pytrain/ops/wasm/gelu.py). Unfused, GPT-2's tanh GELU was eight element-wise nodes forward and a dozen
 * backward, each a pass over the activations and a call.
 *
 * The tanh form (GPT-2's gelu_new) in float32 arithmetic, four lanes, through (1 + tanh(u)) / 2 = 1 / (1 + e^-2u)
 * with expf32.h's exp: within a few float32 ulps of the numpy kernels (closer to the exact value where x is
 * negative: they round 1 + tanh(u)). The erf form (BERT's)
 * in double precision, two lanes, with erf64.h's erf and exp (those of exp_erf.c's Erf and Exp), rounded once to
 * float32: within float32 rounding of the numpy kernels.
 */
#include <wasm_simd128.h>

#include "erf64.h"
#include "expf32.h"

#define EXPORT(name) __attribute__((export_name(name)))

#define GELU_SQRT_2_OVER_PI 0.7978845608028654   /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715
#define GELU_INV_SQRT2 0.7071067811865476
#define GELU_INV_SQRT_2PI 0.3989422804014327

/* ---- tanh form, float32 ---------------------------------------------------------------------------------- */

/* (1 + tanh(u)) / 2 is the logistic function of 2u: with e = e^(-2|u|) (expf32.h's float32 exp, within 2 ulps) and
 * r = 1 / (1 + e), s = (1 + tanh(u)) / 2 is r for u >= 0, e r below, and 1 - s the other one. One exponential and
 * one division, no tanh polynomial; and no cancellation where 1 + tanh(u) is small (the numpy kernels round
 * it). NaN stays NaN; u = +-inf gives (1, 0) and (0, 1). */
static inline void gelu_halves_f32x4(v128_t u, v128_t *s, v128_t *rest) {
    v128_t e = exp_nonpositive_f32x4(wasm_f32x4_mul(wasm_f32x4_abs(u), wasm_f32x4_splat(-2.0f)));
    v128_t r = wasm_f32x4_div(wasm_f32x4_splat(1.0f), wasm_f32x4_add(wasm_f32x4_splat(1.0f), e));
    v128_t er = wasm_f32x4_mul(e, r);
    v128_t up = wasm_f32x4_ge(u, wasm_f32x4_splat(0.0f));
    *s = wasm_v128_bitselect(r, er, up);
    *rest = wasm_v128_bitselect(er, r, up);
}

/* x (1 + tanh(u)) / 2 with u = (x + 0.044715 x x x) sqrt(2/pi), as op_gelu's Gelu (approximate="tanh"). */
static inline v128_t gelu_tanh_f32x4(v128_t x) {
    v128_t cube = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_splat((float)GELU_CUBIC), x), x), x);
    v128_t u = wasm_f32x4_mul(wasm_f32x4_add(x, cube), wasm_f32x4_splat((float)GELU_SQRT_2_OVER_PI));
    v128_t s, rest;
    gelu_halves_f32x4(u, &s, &rest);
    return wasm_f32x4_mul(x, s);
}

/* dy ((1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)), t = tanh(u), as op_gelu_grad's GeluGrad
 * (approximate="tanh"): with s = (1 + t)/2, (1 - t^2) / 2 = 2 s (1 - s). */
static inline v128_t gelu_tanh_grad_f32x4(v128_t dy, v128_t x) {
    const v128_t one = wasm_f32x4_splat(1.0f);
    v128_t x2 = wasm_f32x4_mul(x, x);
    v128_t u = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_splat((float)GELU_SQRT_2_OVER_PI), x),
                              wasm_f32x4_add(one, wasm_f32x4_mul(wasm_f32x4_splat((float)GELU_CUBIC), x2)));
    v128_t s, rest;
    gelu_halves_f32x4(u, &s, &rest);
    v128_t slope = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_mul(
                                      wasm_f32x4_splat((float)(2.0 * GELU_SQRT_2_OVER_PI)), x), s), rest),
                                  wasm_f32x4_add(one, wasm_f32x4_mul(wasm_f32x4_splat((float)(3.0 * GELU_CUBIC)), x2)));
    return wasm_f32x4_mul(dy, wasm_f32x4_add(s, slope));
}

EXPORT("pytrain_gelu_tanh")
void gelu_tanh(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, gelu_tanh_f32x4(wasm_v128_load(x + i)));
    for (; i < n; i++) y[i] = wasm_f32x4_extract_lane(gelu_tanh_f32x4(wasm_f32x4_splat(x[i])), 0);
}

EXPORT("pytrain_gelu_tanh_grad")
void gelu_tanh_grad(const float *dy, const float *x, float *dx, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4)
        wasm_v128_store(dx + i, gelu_tanh_grad_f32x4(wasm_v128_load(dy + i), wasm_v128_load(x + i)));
    for (; i < n; i++)
        dx[i] = wasm_f32x4_extract_lane(gelu_tanh_grad_f32x4(wasm_f32x4_splat(dy[i]), wasm_f32x4_splat(x[i])), 0);
}

/* ---- erf form, double ------------------------------------------------------------------------------------ */

/* x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, one element (the rare groups with a lane out of the two-lane range:
 * not inlined, which keeps kernels.wasm 10 KB smaller) */
static __attribute__((noinline)) double gelu_erf_f64(double x) {
    return x * (0.5 * (1.0 + erf_f64(x * GELU_INV_SQRT2)));
}

/* Phi(x) + x phi(x), one element */
static __attribute__((noinline)) double gelu_erf_slope_f64(double x) {
    return 0.5 * (1.0 + erf_f64(x * GELU_INV_SQRT2)) + x * (exp_f64(-0.5 * x * x) * GELU_INV_SQRT_2PI);
}

/* the same two lanes at a time, where the erf argument is in erf_small_range (|x| <= 2 sqrt 2: most activations;
 * e^(-x^2/2) is then in exp_f64x2's range) */
static inline v128_t gelu_erf_f64x2(v128_t x) {
    v128_t e = erf_small_f64x2(wasm_f64x2_mul(x, wasm_f64x2_splat(GELU_INV_SQRT2)));
    return wasm_f64x2_mul(x, wasm_f64x2_mul(wasm_f64x2_splat(0.5), wasm_f64x2_add(wasm_f64x2_splat(1.0), e)));
}

static inline v128_t gelu_erf_slope_f64x2(v128_t x) {
    v128_t e = erf_small_f64x2(wasm_f64x2_mul(x, wasm_f64x2_splat(GELU_INV_SQRT2)));
    v128_t p = exp_f64x2(wasm_f64x2_mul(wasm_f64x2_splat(-0.5), wasm_f64x2_mul(x, x)));
    return wasm_f64x2_add(wasm_f64x2_mul(wasm_f64x2_splat(0.5), wasm_f64x2_add(wasm_f64x2_splat(1.0), e)),
                          wasm_f64x2_mul(x, wasm_f64x2_mul(p, wasm_f64x2_splat(GELU_INV_SQRT_2PI))));
}

static inline int gelu_erf_lanes(v128_t x) {
    return erf_small_range(wasm_f64x2_mul(x, wasm_f64x2_splat(GELU_INV_SQRT2)));
}

EXPORT("pytrain_gelu_erf")
void gelu_erf(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v128_t v = wasm_v128_load(x + i);
        v128_t lo = wasm_f64x2_promote_low_f32x4(v), hi = promote_high(v);
        if (gelu_erf_lanes(lo) && gelu_erf_lanes(hi)) {
            wasm_v128_store(y + i, demote_pair(gelu_erf_f64x2(lo), gelu_erf_f64x2(hi)));
        } else {
            for (int j = 0; j < 4; j++) y[i + j] = (float)gelu_erf_f64((double)x[i + j]);
        }
    }
    for (; i < n; i++) y[i] = (float)gelu_erf_f64((double)x[i]);
}

EXPORT("pytrain_gelu_erf_grad")
void gelu_erf_grad(const float *dy, const float *x, float *dx, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v128_t v = wasm_v128_load(x + i), d = wasm_v128_load(dy + i);
        v128_t lo = wasm_f64x2_promote_low_f32x4(v), hi = promote_high(v);
        if (gelu_erf_lanes(lo) && gelu_erf_lanes(hi)) {
            v128_t dlo = wasm_f64x2_promote_low_f32x4(d), dhi = promote_high(d);
            wasm_v128_store(dx + i, demote_pair(wasm_f64x2_mul(dlo, gelu_erf_slope_f64x2(lo)),
                                                wasm_f64x2_mul(dhi, gelu_erf_slope_f64x2(hi))));
        } else {
            for (int j = 0; j < 4; j++) dx[i + j] = (float)((double)dy[i + j] * gelu_erf_slope_f64((double)x[i + j]));
        }
    }
    for (; i < n; i++) dx[i] = (float)((double)dy[i] * gelu_erf_slope_f64((double)x[i]));
}

/* Exp and Erf of float32 tensors (linked into kernels.wasm by build.sh): BERT's GELU and its gradient.
 * In Pyodide numpy's Erf is a dozen float64 passes plus masks; here one pass, one call. Computed
 * in double precision as numpy's are (with expmath.h's exp, since there is no libm), so the
 * results equal numpy's to float32 rounding.
 */
#include <wasm_simd128.h>

#include "expmath.h"

#define EXPORT(name) __attribute__((export_name(name)))

/* ---- exp and erf in double precision ---------------------------------------------------------- */

/* e^x for any double (expmath.h's series to r^11, which exp_f64x2 below repeats lane-wise). */
static double exp_f64(double x) {
    if (x != x) return x;
    if (x > 709.782712893384) return __builtin_inf();
    if (x < -745.2) return 0.0;
    return exp_reduced(x, 0);
}

/* The same e^x as exp_f64, two lanes at a time, for -700 <= x <= 709 (normal results: 2^k is
 * then added to the exponent bits, which is the exact product t * 2^k). The same operations in
 * the same order, so the same bits as exp_f64; independent lanes also hide the Horner chain's
 * latency, which bounds the scalar loop. */
static inline v128_t exp_f64x2(v128_t x) {
    const v128_t magic = wasm_f64x2_splat(6755399441055744.0); /* 2^52 + 2^51: k in the low bits */
    v128_t kb = wasm_f64x2_add(wasm_f64x2_mul(x, wasm_f64x2_splat(1.44269504088896338700e+00)), magic);
    v128_t kd = wasm_f64x2_sub(kb, magic);
    v128_t r = wasm_f64x2_sub(wasm_f64x2_sub(x, wasm_f64x2_mul(kd, wasm_f64x2_splat(6.93147180369123816490e-01))),
                              wasm_f64x2_mul(kd, wasm_f64x2_splat(1.90821492927058770002e-10)));
#define STEP(c) t = wasm_f64x2_add(wasm_f64x2_mul(t, r), wasm_f64x2_splat(c))
    v128_t t = wasm_f64x2_splat(1.0 / 39916800.0);
    STEP(1.0 / 3628800.0); STEP(1.0 / 362880.0);
    STEP(1.0 / 40320.0); STEP(1.0 / 5040.0); STEP(1.0 / 720.0); STEP(1.0 / 120.0); STEP(1.0 / 24.0);
    STEP(1.0 / 6.0); STEP(0.5); STEP(1.0); STEP(1.0);
#undef STEP
    v128_t k = wasm_i64x2_sub(kb, magic);
    return wasm_i64x2_add(t, wasm_i64x2_shl(k, 52));
}

/* Whether both lanes are in exp_f64x2's range (false for NaN). */
static inline int exp_fast_range(v128_t x) {
    return wasm_i64x2_all_true(wasm_v128_and(wasm_f64x2_ge(x, wasm_f64x2_splat(-700.0)),
                                             wasm_f64x2_le(x, wasm_f64x2_splat(709.0))));
}

static inline v128_t promote_high(v128_t v) {
    return wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 2, 3));
}

static inline v128_t demote_pair(v128_t lo, v128_t hi) {
    return wasm_i32x4_shuffle(wasm_f32x4_demote_f64x2_zero(lo), wasm_f32x4_demote_f64x2_zero(hi), 0, 1, 4, 5);
}

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

/* pytrain.ops.special.erf's two polynomials (the same coefficients, the same Horner order, in
 * double precision) and its three ranges; the float32 result is that of the numpy kernel. */
static double erf_f64(double v) {
    double a = __builtin_fabs(v);
    if (a <= 2.0) {
        double t = v * v, p = 2.535338653295029e-16;
        p = p * t + -1.2607637423650852e-14;
        p = p * t + 3.2581765021957387e-13;
        p = p * t + -6.014155981587672e-12;
        p = p * t + 9.121942112153645e-11;
        p = p * t + -1.219236140028941e-09;
        p = p * t + 1.4782742167864878e-08;
        p = p * t + -1.6361189630837133e-07;
        p = p * t + 1.6461439093069568e-06;
        p = p * t + -1.4925576438465212e-05;
        p = p * t + 0.00012055326978754767;
        p = p * t + -0.0008548326671451455;
        p = p * t + 0.005223977611158615;
        p = p * t + -0.026866170641385575;
        p = p * t + 0.11283791670898612;
        p = p * t + -0.37612638903179757;
        p = p * t + 1.128379167095512;
        return v * p;
    }
    if (v != v) return v;
    double s = v < 0 ? -1.0 : 1.0;
    if (a > 6.0) return s;
    double t = 1.0 / a, q = -8.771863169692933;
    q = q * t + 50.75746390667977;
    q = q * t + -137.21063899396535;
    q = q * t + 229.37168386805146;
    q = q * t + -263.89536973093277;
    q = q * t + 219.16677686903233;
    q = q * t + -133.10681418439376;
    q = q * t + 57.91555429963938;
    q = q * t + -16.893867836220107;
    q = q * t + 3.073144872592949;
    q = q * t + -0.7978674323335889;
    q = q * t + 0.5440257410535283;
    q = q * t + -0.014089867286294872;
    q = q * t + -0.2808749836587697;
    q = q * t + -7.382351139909385e-05;
    q = q * t + 0.5641923679241525;
    q = q * t + -4.920116422613141e-08;
    return s * (1.0 - exp_f64(-a * a) * q);
}

/* erf_f64's |x| <= 2 polynomial, two lanes at a time (the same operations, so the same bits). */
static inline v128_t erf_small_f64x2(v128_t v) {
    v128_t t = wasm_f64x2_mul(v, v);
#define STEP(c) p = wasm_f64x2_add(wasm_f64x2_mul(p, t), wasm_f64x2_splat(c))
    v128_t p = wasm_f64x2_splat(2.535338653295029e-16);
    STEP(-1.2607637423650852e-14); STEP(3.2581765021957387e-13); STEP(-6.014155981587672e-12);
    STEP(9.121942112153645e-11); STEP(-1.219236140028941e-09); STEP(1.4782742167864878e-08);
    STEP(-1.6361189630837133e-07); STEP(1.6461439093069568e-06); STEP(-1.4925576438465212e-05);
    STEP(0.00012055326978754767); STEP(-0.0008548326671451455); STEP(0.005223977611158615);
    STEP(-0.026866170641385575); STEP(0.11283791670898612); STEP(-0.37612638903179757);
    STEP(1.128379167095512);
#undef STEP
    return wasm_f64x2_mul(v, p);
}

static inline int erf_small_range(v128_t v) {
    return wasm_i64x2_all_true(wasm_f64x2_le(wasm_f64x2_abs(v), wasm_f64x2_splat(2.0)));
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

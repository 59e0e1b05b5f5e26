/* e^x and erf(x) in double precision, one and two lanes (exp_erf.c's Exp and Erf, gelu.c's erf GELU and its
 * gradient): pytrain.ops.special.erf's polynomials and expmath.h's series, so float32 results equal the numpy
 * kernels' to float32 rounding. */
#ifndef PYTRAIN_ERF64_H
#define PYTRAIN_ERF64_H

#include <wasm_simd128.h>

#include "expmath.h"

/* ---- exp and erf in double precision ---------------------------------------------------------- */

/* e^x for any double (expmath.h's series to r^11, which exp_f64x2 below repeats lane-wise). */
static __attribute__((unused)) double exp_f64(double x) {
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

/* pytrain.ops.special.erf's two polynomials (the same coefficients, the same Horner order, in
 * double precision) and its three ranges; the float32 result is that of the numpy kernel. */
static __attribute__((unused)) double erf_f64(double v) {
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

#endif

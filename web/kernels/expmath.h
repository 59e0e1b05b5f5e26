/* e^x in double precision for the kernels that need it (kernels.wasm links no libm): exp_erf.c,
 * softmax.c and softmax_ce.c include this header. x = k ln2 + r with |r| <= ln2/2, e^r by its
 * Taylor series, times 2^k built in the exponent bits. */
#ifndef PYTRAIN_EXPMATH_H
#define PYTRAIN_EXPMATH_H

typedef union { double d; unsigned long long u; } Bits;

/* e^x for -745.2 <= x <= 709.79 (callers deal with NaN, overflow and underflow first). The series
 * goes to r^13 when `to_r13` (relative error < 2e-17), else to r^11 (< 7e-15: exp_erf.c's SIMD
 * twin repeats that form operation for operation); both are far below a float32 result's rounding
 * (6e-8). Horner with 1/j! written out: a table would be a data segment in the host's memory.
 * Always inlined with a constant `to_r13`, so each caller gets its own straight-line code. */
static inline __attribute__((always_inline)) double exp_reduced(double x, int to_r13) {
    /* k = x / ln2 rounded to nearest, by the 2^52 + 2^51 trick */
    double kd = (x * 1.44269504088896338700e+00 + 6755399441055744.0) - 6755399441055744.0;
    double r = (x - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    double t;
    if (to_r13) {
        t = 1.0 / 6227020800.0;
        t = t * r + 1.0 / 479001600.0;
        t = t * r + 1.0 / 39916800.0;
    } else {
        t = 1.0 / 39916800.0;
    }
    t = t * r + 1.0 / 3628800.0;
    t = t * r + 1.0 / 362880.0;
    t = t * r + 1.0 / 40320.0;
    t = t * r + 1.0 / 5040.0;
    t = t * r + 1.0 / 720.0;
    t = t * r + 1.0 / 120.0;
    t = t * r + 1.0 / 24.0;
    t = t * r + 1.0 / 6.0;
    t = t * r + 0.5;
    t = t * r + 1.0;
    t = t * r + 1.0;
    int k = (int)kd;
    Bits b;
    if (k < -1021) { /* scale in two steps so 2^k stays a normal number */
        b.u = (unsigned long long)(k + 600 + 1023) << 52;
        return t * b.d * 2.409919865102884e-181; /* 2^-600 */
    }
    if (k > 1023) { /* e^x just below the overflow threshold: 2^k / 2 * 2 */
        b.u = (unsigned long long)(k - 1 + 1023) << 52;
        return t * b.d * 2.0;
    }
    b.u = (unsigned long long)(k + 1023) << 52;
    return t * b.d;
}

/* e^x for x <= 0 (a softmax row shifted by its maximum, a log-probability). */
static inline double exp_nonpositive(double x) {
    return x < -745.0 ? 0.0 : exp_reduced(x, 1);
}

#ifdef __wasm_simd128__
#include <wasm_simd128.h>

/* exp_nonpositive for -700 <= x <= 0, two lanes at a time: exp_reduced(x, 1)'s operations in the same
 * order (so the same bits), 2^k added to the exponent bits (k >= -1010: the result is normal). */
static inline v128_t exp_nonpositive_f64x2(v128_t x) {
    const v128_t magic = wasm_f64x2_splat(6755399441055744.0);
    v128_t kb = wasm_f64x2_add(wasm_f64x2_mul(x, wasm_f64x2_splat(1.44269504088896338700e+00)), magic);
    v128_t kd = wasm_f64x2_sub(kb, magic);
    v128_t r = wasm_f64x2_sub(wasm_f64x2_sub(x, wasm_f64x2_mul(kd, wasm_f64x2_splat(6.93147180369123816490e-01))),
                              wasm_f64x2_mul(kd, wasm_f64x2_splat(1.90821492927058770002e-10)));
#define EXPMATH_STEP(c) t = wasm_f64x2_add(wasm_f64x2_mul(t, r), wasm_f64x2_splat(c))
    v128_t t = wasm_f64x2_splat(1.0 / 6227020800.0);
    EXPMATH_STEP(1.0 / 479001600.0); EXPMATH_STEP(1.0 / 39916800.0); EXPMATH_STEP(1.0 / 3628800.0);
    EXPMATH_STEP(1.0 / 362880.0); EXPMATH_STEP(1.0 / 40320.0); EXPMATH_STEP(1.0 / 5040.0);
    EXPMATH_STEP(1.0 / 720.0); EXPMATH_STEP(1.0 / 120.0); EXPMATH_STEP(1.0 / 24.0); EXPMATH_STEP(1.0 / 6.0);
    EXPMATH_STEP(0.5); EXPMATH_STEP(1.0); EXPMATH_STEP(1.0);
#undef EXPMATH_STEP
    v128_t k = wasm_i64x2_sub(kb, magic);
    return wasm_i64x2_add(t, wasm_i64x2_shl(k, 52));
}

/* Whether both lanes are in exp_nonpositive_f64x2's range. */
static inline int exp_nonpositive_range(v128_t x) {
    return wasm_i64x2_all_true(wasm_v128_and(wasm_f64x2_ge(x, wasm_f64x2_splat(-700.0)),
                                             wasm_f64x2_le(x, wasm_f64x2_splat(0.0))));
}
#endif

#endif

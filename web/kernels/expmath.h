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

#endif

/* SoftmaxCrossEntropyLoss and its gradient over (N, C, d1, ...) scores in their own layout, class axis 1 (linked
 * into kernels.wasm by build.sh; (N, C) rows are softmax.c's).
 *
 * In numpy the loss is a dozen small array operations, each a Python -> C round trip that in
 * Pyodide costs more than the arithmetic; here it is one pass per plane.
 * There is no libm, so exp (expmath.h) and log (here) are computed in double precision (errors
 * ~1e-16, far below float32's rounding), and every position is summed in double: the results agree with
 * pytrain/ops/op_softmax_cross_entropy_loss.py to float32 rounding (tests compare them).
 * A position with a NaN or an infinity, or a label outside [0, C), makes the kernel return nonzero
 * without finishing: the caller then leaves the node to numpy, which has the exact semantics
 * and names a bad label.
 */
#include "expmath.h"

#define EXPORT(name) __attribute__((export_name(name)))

static const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;

/* ln(s) for s >= 1 (a sum of exponentials that includes e^0): s = 2^k m with m in
 * [sqrt(1/2), sqrt(2)), ln m = 2 atanh(u), u = (m-1)/(m+1), |u| < 0.172, series to u^23. */
static double log_ge1(double s) {
    Bits b = {s};
    int k = (int)((b.u >> 52) & 0x7ff) - 1023;
    b.u = (b.u & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* m in [1, 2) */
    double m = b.d;
    if (m > 1.4142135623730951) { m *= 0.5; k += 1; }
    double u = (m - 1.0) / (m + 1.0), u2 = u * u;
    double t = 1.0 / 23.0;
    for (int i = 21; i >= 1; i -= 2) t = t * u2 + 1.0 / i;
    return 2.0 * u * t + k * LN2_HI + k * LN2_LO;
}

static int finite(float x) { return x == x && x - x == 0.0f; }

/* The same loss over (N, C, S) scores, class axis 1 with S spatial positions (DBNet's (N, 2, H, W) per-pixel
 * logits): plane by plane, so each pass reads S contiguous floats. labels (N, S); log_prob (may be 0) (N, C, S);
 * scratch: 2 * S doubles (each position's maximum, then its log-sum-exp). The mean is over N * S. */
EXPORT("pytrain_softmax_ce_planes")
int softmax_ce_planes(const float *x, const long long *labels, int n, int c, int s, float *log_prob, int mean,
                      float *loss, double *scratch) {
    double total = 0.0, *mx = scratch, *lse = scratch + s;
    for (int b = 0; b < n; b++, x += (long)c * s, labels += s) {
        for (int p = 0; p < s; p++) {
            long long t = labels[p];
            if (t < 0 || t >= c) return 1;
            mx[p] = x[p];
            lse[p] = 0.0;
        }
        for (int j = 0; j < c; j++) {
            const float *row = x + (long)j * s;
            for (int p = 0; p < s; p++) {
                if (!finite(row[p])) return 2;
                mx[p] = row[p] > mx[p] ? row[p] : mx[p];
            }
        }
        for (int j = 0; j < c; j++) {
            const float *row = x + (long)j * s;
            int p = 0;
            for (; p + 2 <= s; p += 2) {
                v128_t d = wasm_f64x2_sub(wasm_f64x2_make((double)row[p], (double)row[p + 1]),
                                          wasm_v128_load(mx + p));
                v128_t e = exp_nonpositive_range(d)
                    ? exp_nonpositive_f64x2(d)
                    : wasm_f64x2_make(exp_nonpositive((double)row[p] - mx[p]),
                                      exp_nonpositive((double)row[p + 1] - mx[p + 1]));
                wasm_v128_store(lse + p, wasm_f64x2_add(wasm_v128_load(lse + p), e));
            }
            for (; p < s; p++) lse[p] += exp_nonpositive((double)row[p] - mx[p]);
        }
        for (int p = 0; p < s; p++) {
            lse[p] = log_ge1(lse[p]);
            total -= (double)x[labels[p] * s + p] - mx[p] - lse[p];
        }
        if (log_prob) {
            for (int j = 0; j < c; j++)
                for (int p = 0; p < s; p++)
                    log_prob[(long)j * s + p] = (float)((double)x[(long)j * s + p] - mx[p] - lse[p]);
            log_prob += (long)c * s;
        }
    }
    *loss = (float)(mean ? total / ((double)n * s) : total);
    return 0;
}

/* Its gradient, dx = coef * (exp(log_prob) - onehot(label)) over (N, C, S), as the numpy gradient kernel:
 * g = exp(lp); g[label] -= 1; g *= coef (each step rounded to float32). */
EXPORT("pytrain_softmax_ce_planes_grad")
int softmax_ce_planes_grad(const float *log_prob, const long long *labels, int n, int c, int s, float coef,
                           float *dx) {
    long size = (long)n * c * s, k = 0;
    for (; k + 2 <= size; k += 2) {
        v128_t d = wasm_f64x2_make((double)log_prob[k], (double)log_prob[k + 1]);
        if (!exp_nonpositive_range(d)) break;   /* the scalar loop checks and finishes */
        v128_t e = exp_nonpositive_f64x2(d);
        dx[k] = (float)wasm_f64x2_extract_lane(e, 0);
        dx[k + 1] = (float)wasm_f64x2_extract_lane(e, 1);
    }
    for (; k < size; k++) {
        if (!(log_prob[k] <= 0.0f)) return 2;   /* NaN, or not a log-probability */
        dx[k] = (float)exp_nonpositive((double)log_prob[k]);
    }
    for (int b = 0; b < n; b++)
        for (int p = 0; p < s; p++) {
            long long t = labels[(long)b * s + p];
            if (t < 0 || t >= c) return 1;
            float *v = dx + ((long)b * c + t) * s + p;
            *v = *v - 1.0f;
        }
    for (k = 0; k < size; k++) dx[k] = dx[k] * coef;
    return 0;
}

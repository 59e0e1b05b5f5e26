/* Softmax over the last axis, and SoftmaxCrossEntropyLoss with its gradient on class-last rows (a language
 * model's (tokens, vocabulary) logits), linked into kernels.wasm by build.sh: one call where numpy in Pyodide
 * makes five to a dozen passes with temporaries. The exponentials are float32 (expf32.h, four lanes, within 2
 * ulps), the row sums double: the results equal the numpy kernels to a few float32 ulps (tests/web compare
 * them with tolerances). softmax_ce.c's kernels compute the same loss in double precision, 3.6x (the loss) and 5x (its gradient)
 * slower on GPT-2's (512, 1000) logits.
 */
#include "expf32.h"

#define EXPORT(name) __attribute__((export_name(name)))

/* The row's maximum; 1 when the row holds a NaN or an infinity (max/min propagate NaN, then the
 * extremes are checked), else 0. */
static int row_max(const float *x, int n, float *out) {
    v128_t mx = wasm_f32x4_splat(x[0]), mn = mx;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        v128_t v = wasm_v128_load(x + j);
        mx = wasm_f32x4_max(mx, v);
        mn = wasm_f32x4_min(mn, v);
    }
    /* across the lanes: max/min propagate a NaN */
    mx = wasm_f32x4_max(mx, wasm_i32x4_shuffle(mx, mx, 2, 3, 0, 1));
    mx = wasm_f32x4_max(mx, wasm_i32x4_shuffle(mx, mx, 1, 0, 3, 2));
    mn = wasm_f32x4_min(mn, wasm_i32x4_shuffle(mn, mn, 2, 3, 0, 1));
    mn = wasm_f32x4_min(mn, wasm_i32x4_shuffle(mn, mn, 1, 0, 3, 2));
    float m = wasm_f32x4_extract_lane(mx, 0), lo = wasm_f32x4_extract_lane(mn, 0);
    for (; j < n; j++) {
        float v = x[j];
        if (v - v != 0.0f) return 1;
        m = v > m ? v : m;
    }
    *out = m;
    return (m - m != 0.0f || lo - lo != 0.0f) ? 1 : 0;
}

/* y = e^(x - shift) (y may be 0: not stored); returns the sum of the float32 values, added in double. */
static double exp_row(const float *x, float *y, int n, float shift) {
    v128_t acc = wasm_f64x2_splat(0.0), sv = wasm_f32x4_splat(shift);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        v128_t e = exp_nonpositive_f32x4(wasm_f32x4_sub(wasm_v128_load(x + j), sv));
        if (y) wasm_v128_store(y + j, e);
        acc = wasm_f64x2_add(acc, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(e),
                                                 wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(e, e, 2, 3, 2, 3))));
    }
    double s = wasm_f64x2_extract_lane(acc, 0) + wasm_f64x2_extract_lane(acc, 1);
    for (; j < n; j++) {
        float e = exp_nonpositive_f32(x[j] - shift);
        if (y) y[j] = e;
        s += e;
    }
    return s;
}

/* Softmax over rows of n float32: e = exp(x - max), e / sum(e). Returns 1 at the first row holding a NaN or
 * an infinity (rows before it are written): the caller then leaves the whole node to numpy, whose NaN/inf
 * semantics it does not copy. */
EXPORT("pytrain_softmax")
int softmax(const float *x, float *y, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * n;
        float *yr = y + (long)r * n;
        float mx;
        if (row_max(xr, n, &mx)) return 1;
        v128_t sv = wasm_f32x4_splat((float)exp_row(xr, yr, n, mx));
        int j = 0;
        for (; j + 4 <= n; j += 4) wasm_v128_store(yr + j, wasm_f32x4_div(wasm_v128_load(yr + j), sv));
        float sf = wasm_f32x4_extract_lane(sv, 0);
        for (; j < n; j++) yr[j] = yr[j] / sf;
    }
    return 0;
}

static const double LN2 = 6.93147180559945309417e-01;

/* ln(s) for s >= 1 (a row's sum of exponentials, which includes e^0 = 1): s = 2^k m, m in [sqrt(1/2),
 * sqrt(2)), ln m = 2 atanh(u), u = (m - 1) / (m + 1), |u| < 0.172, the series to u^15 (error < 1e-13). */
static double ln_sum(double s) {
    union { double d; unsigned long long u; } b = {s};
    int k = (int)((b.u >> 52) & 0x7ff) - 1023;
    b.u = (b.u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m = b.d;
    if (m > 1.4142135623730951) { m *= 0.5; k += 1; }
    double u = (m - 1.0) / (m + 1.0), u2 = u * u;
    double t = 1.0 / 15.0;
    for (int i = 13; i >= 1; i -= 2) t = t * u2 + 1.0 / i;
    return 2.0 * u * t + k * LN2;
}

/* SoftmaxCrossEntropyLoss of n rows of c scores with int64 labels: the loss (the mean over rows when `mean`,
 * else the sum) into *loss, log_prob (may be 0) = (x - max) - ln(sum e^(x - max)). Returns 1 for a label
 * outside [0, c), 2 for a row with a NaN or an infinity (the caller leaves the node to numpy, which names
 * the label or propagates the NaN). */
EXPORT("pytrain_softmax_ce")
int softmax_ce(const float *x, const long long *labels, int n, int c, float *log_prob, int mean,
               float *loss) {
    double total = 0.0;
    for (int i = 0; i < n; i++, x += c) {
        long long t = labels[i];
        if (t < 0 || t >= c) return 1;
        float mx;
        if (row_max(x, c, &mx)) return 2;
        float lse = (float)ln_sum(exp_row(x, 0, c, mx));
        if (log_prob) {
            v128_t mv = wasm_f32x4_splat(mx), lv = wasm_f32x4_splat(lse);
            int j = 0;
            for (; j + 4 <= c; j += 4)
                wasm_v128_store(log_prob + j, wasm_f32x4_sub(wasm_f32x4_sub(wasm_v128_load(x + j), mv), lv));
            for (; j < c; j++) log_prob[j] = (x[j] - mx) - lse;
            log_prob += c;
        }
        total -= (double)((x[t] - mx) - lse);
    }
    *loss = (float)(mean ? total / n : total);
    return 0;
}

/* Its gradient: dx = coef * (e^log_prob - onehot(label)) (the numpy kernel's g = exp(lp); g[label] -= 1;
 * g *= coef, each step in float32). Returns 1 for a label outside [0, c), 2 for a log-probability that is
 * not <= 0 (NaN), leaving the node to numpy. */
EXPORT("pytrain_softmax_ce_grad")
int softmax_ce_grad(const float *log_prob, const long long *labels, int n, int c, float coef, float *dx) {
    const v128_t zero = wasm_f32x4_splat(0.0f), cv = wasm_f32x4_splat(coef);
    for (int i = 0; i < n; i++, log_prob += c, dx += c) {
        long long t = labels[i];
        if (t < 0 || t >= c) return 1;
        v128_t ok = wasm_i32x4_splat(-1);
        int j = 0;
        for (; j + 4 <= c; j += 4) {
            v128_t lp = wasm_v128_load(log_prob + j);
            ok = wasm_v128_and(ok, wasm_f32x4_le(lp, zero));
            wasm_v128_store(dx + j, wasm_f32x4_mul(exp_nonpositive_f32x4(lp), cv));
        }
        if (!wasm_i32x4_all_true(ok)) return 2;
        for (; j < c; j++) {
            if (!(log_prob[j] <= 0.0f)) return 2;
            dx[j] = exp_nonpositive_f32(log_prob[j]) * coef;
        }
        dx[t] = (exp_nonpositive_f32(log_prob[t]) - 1.0f) * coef;
    }
    return 0;
}

/* Row-wise kernels for transformers (linked into gemm.wasm by build.sh): LayerNormalization over
 * the last axes and its gradient, Softmax over the last axis, and Gather's gradient (an embedding's
 * backward). In Pyodide each is five to fifteen numpy passes with temporaries; here one call.
 *
 * Statistics and row sums are accumulated in double precision, so they are at least as accurate
 * as numpy's float32 pairwise sums: the results equal the numpy kernels to float32 rounding, and
 * every element-wise step is the numpy kernel's float32 operation in its order (no FMA in wasm).
 */
#define EXPORT(name) __attribute__((export_name(name)))

/* e^x, x <= 0 (a softmax row shifted by its maximum), in double: x = k ln2 + r, |r| <= ln2/2,
 * Taylor to r^13, 2^k in the exponent (two steps near the subnormal range). */
typedef union { double d; unsigned long long u; } Bits;
static double exp_nonpos(double x) {
    if (x < -745.0) return 0.0;
    double kd = (x * 1.44269504088896338700e+00 + 6755399441055744.0) - 6755399441055744.0;
    double r = (x - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    double t = 1.0 / 6227020800.0;
    t = t * r + 1.0 / 479001600.0;
    t = t * r + 1.0 / 39916800.0;
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
    if (k < -1021) {
        b.u = (unsigned long long)(k + 600 + 1023) << 52;
        return t * b.d * 2.409919865102884e-181; /* 2^-600 */
    }
    b.u = (unsigned long long)(k + 1023) << 52;
    return t * b.d;
}

/* LayerNormalization of `rows` rows of n float32 (the normalised axes flattened), float32
 * statistics: d = x - mean, inv_std = 1 / sqrt(mean(d^2) + eps), y = d * inv_std * scale + bias
 * (bias may be 0), as pytrain/ops/normalization/_standardize.py and op_layernorm.py compute them;
 * mean_out / inv_std_out (per row) are written when nonzero. */
EXPORT("pytrain_layernorm")
void layernorm(const float *x, const float *scale, const float *bias, float *y, float *mean_out,
               float *inv_std_out, int rows, int n, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * n;
        float *yr = y + (long)r * n;
        double s = 0.0;
        for (int j = 0; j < n; j++) s += xr[j];
        float mean = (float)(s / n);
        double q = 0.0;
        for (int j = 0; j < n; j++) {
            float d = xr[j] - mean;
            q += (double)(d * d);
        }
        float var = (float)(q / n);
        float inv_std = 1.0f / __builtin_sqrtf(var + eps);
        for (int j = 0; j < n; j++) {
            float v = (xr[j] - mean) * inv_std;
            v = v * scale[j];
            yr[j] = bias ? v + bias[j] : v;
        }
        if (mean_out) mean_out[r] = mean;
        if (inv_std_out) inv_std_out[r] = inv_std;
    }
}

/* LayerNormalizationGrad from the saved per-row mean / inv_std: xhat = (x - mean) * inv_std,
 * g = dy * scale, dx = inv_std * (g - sum(g) / n - xhat * (sum(g * xhat) / n)) (dx nonzero);
 * dscale = sum over rows of dy * xhat, dbias = sum over rows of dy (each when nonzero), rows added
 * in order as numpy reduces a leading axis. */
EXPORT("pytrain_layernorm_grad")
void layernorm_grad(const float *dy, const float *x, const float *scale, const float *mean, const float *inv_std,
                    float *dx, float *dscale, float *dbias, int rows, int n) {
    float inv_n = (float)(1.0 / (n > 0 ? n : 1));
    if (dscale) for (int j = 0; j < n; j++) dscale[j] = 0.0f;
    if (dbias) for (int j = 0; j < n; j++) dbias[j] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *dyr = dy + (long)r * n, *xr = x + (long)r * n;
        float m = mean[r], is = inv_std[r];
        if (dx) {
            double sg = 0.0, sgx = 0.0;
            for (int j = 0; j < n; j++) {
                float xh = (xr[j] - m) * is, g = dyr[j] * scale[j];
                sg += g;
                sgx += (double)(g * xh);
            }
            float mg = (float)sg * inv_n, mgx = (float)sgx * inv_n;
            float *dxr = dx + (long)r * n;
            for (int j = 0; j < n; j++) {
                float xh = (xr[j] - m) * is, g = dyr[j] * scale[j];
                dxr[j] = is * ((g - mg) - xh * mgx);
            }
        }
        if (dscale || dbias) {
            for (int j = 0; j < n; j++) {
                if (dscale) dscale[j] += dyr[j] * ((xr[j] - m) * is);
                if (dbias) dbias[j] += dyr[j];
            }
        }
    }
}

/* Softmax over rows of n float32: e = exp(x - max), e / sum(e) (sum in double). Returns 1 at
 * the first row holding a NaN or an infinity (rows before it are written): the caller then
 * leaves the whole node to numpy, whose NaN/inf semantics it does not copy. */
EXPORT("pytrain_softmax")
int softmax(const float *x, float *y, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * n;
        float *yr = y + (long)r * n;
        float mx = xr[0];
        for (int j = 0; j < n; j++) {
            float v = xr[j];
            if (v - v != 0.0f) return 1; /* NaN or +-inf */
            mx = v > mx ? v : mx;
        }
        double s = 0.0;
        for (int j = 0; j < n; j++) {
            float e = (float)exp_nonpos((double)(xr[j] - mx));
            yr[j] = e;
            s += e;
        }
        float sf = (float)s;
        for (int j = 0; j < n; j++) yr[j] = yr[j] / sf;
    }
    return 0;
}

/* GatherGrad along axis 0: dx (rows x inner, zero on entry) gets the sum of dy's rows per index,
 * summed in double in index order (acc: rows x inner doubles, seen: rows ints, zero on entry),
 * as the numpy kernel's float64 bincount does. Returns 1 (having written nothing to dx) when an
 * index is outside [-rows, rows): the numpy kernel then reports it. */
EXPORT("pytrain_gather_grad")
int gather_grad(const float *dy, const long long *idx, int count, float *dx, double *acc, int *seen, int rows,
                int inner) {
    for (int i = 0; i < count; i++)
        if (idx[i] < -(long long)rows || idx[i] >= rows) return 1;
    for (int i = 0; i < count; i++) {
        int r = (int)(idx[i] < 0 ? idx[i] + rows : idx[i]);
        double *ar = acc + (long)r * inner;
        const float *g = dy + (long)i * inner;
        if (!seen[r]) { /* from 0.0, as bincount starts its sums (-0.0 + 0.0 is +0.0) */
            seen[r] = 1;
            for (int j = 0; j < inner; j++) ar[j] = 0.0;
        }
        for (int j = 0; j < inner; j++) ar[j] += g[j];
    }
    for (int r = 0; r < rows; r++) {
        if (!seen[r]) continue;
        const double *ar = acc + (long)r * inner;
        float *o = dx + (long)r * inner;
        for (int j = 0; j < inner; j++) o[j] = (float)ar[j];
    }
    return 0;
}

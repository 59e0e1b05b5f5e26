/* LayerNormalization over the last axes and its gradient (linked into kernels.wasm by build.sh): in
 * Pyodide each is five to fifteen numpy passes with temporaries; here one call.
 *
 * Statistics and row sums are accumulated in double precision, so they are at least as accurate
 * as numpy's float32 pairwise sums: the results equal the numpy kernels to float32 rounding, and
 * every element-wise step is the numpy kernel's float32 operation in its order (no FMA in wasm).
 */
#define EXPORT(name) __attribute__((export_name(name)))

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

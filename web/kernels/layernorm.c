/* LayerNormalization over the last axes and its gradient (linked into kernels.wasm by build.sh): in
 * Pyodide each is five to fifteen numpy passes with temporaries; here one call.
 *
 * Statistics and row sums are accumulated in double precision, so they are at least as accurate
 * as numpy's float32 pairwise sums: the results equal the numpy kernels to float32 rounding, and
 * every element-wise step is the numpy kernel's float32 operation in its order (no FMA in wasm), four lanes at a
 * time (f32x4 multiplies and adds round as the scalar ones; the double sums add two lanes, then the pair).
 */
#include <wasm_simd128.h>
#define EXPORT(name) __attribute__((export_name(name)))

/* The four floats of v added into the two double lanes of acc. */
static inline v128_t add_f64(v128_t acc, v128_t v) {
    return wasm_f64x2_add(acc, wasm_f64x2_add(wasm_f64x2_promote_low_f32x4(v),
                                              wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(v, v, 2, 3, 2, 3))));
}

static inline double lanes(v128_t acc) {
    return wasm_f64x2_extract_lane(acc, 0) + wasm_f64x2_extract_lane(acc, 1);
}

/* LayerNormalization of `rows` rows of n float32 (the normalised axes flattened), float32
 * statistics: d = x - mean, inv_std = 1 / sqrt(mean(d^2) + eps), y = d * inv_std * scale + bias
 * (bias may be 0), as pytrain/ops/normalization/_standardize.py and op_layernorm.py compute them;
 * mean_out / inv_std_out (per row) are written when nonzero. */
EXPORT("pytrain_layernorm")
void layernorm(const float *x, const float *scale, const float *bias, float *y, float *mean_out,
               float *inv_std_out, int rows, int n, float eps) {
    int n4 = n & ~3;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * n;
        float *yr = y + (long)r * n;
        v128_t acc = wasm_f64x2_splat(0.0);
        for (int j = 0; j < n4; j += 4) acc = add_f64(acc, wasm_v128_load(xr + j));
        double s = lanes(acc);
        for (int j = n4; j < n; j++) s += xr[j];
        float mean = (float)(s / n);
        v128_t mv = wasm_f32x4_splat(mean);
        acc = wasm_f64x2_splat(0.0);
        for (int j = 0; j < n4; j += 4) {
            v128_t d = wasm_f32x4_sub(wasm_v128_load(xr + j), mv);
            acc = add_f64(acc, wasm_f32x4_mul(d, d));
        }
        double q = lanes(acc);
        for (int j = n4; j < n; j++) {
            float d = xr[j] - mean;
            q += (double)(d * d);
        }
        float var = (float)(q / n);
        float inv_std = 1.0f / __builtin_sqrtf(var + eps);
        v128_t iv = wasm_f32x4_splat(inv_std);
        for (int j = 0; j < n4; j += 4) {
            v128_t v = wasm_f32x4_mul(wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(xr + j), mv), iv),
                                      wasm_v128_load(scale + j));
            wasm_v128_store(yr + j, bias ? wasm_f32x4_add(v, wasm_v128_load(bias + j)) : v);
        }
        for (int j = n4; j < n; j++) {
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
    int n4 = n & ~3;
    if (dscale) for (int j = 0; j < n; j++) dscale[j] = 0.0f;
    if (dbias) for (int j = 0; j < n; j++) dbias[j] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *dyr = dy + (long)r * n, *xr = x + (long)r * n;
        float m = mean[r], is = inv_std[r];
        v128_t mv = wasm_f32x4_splat(m), iv = wasm_f32x4_splat(is);
        if (dx) {
            v128_t ag = wasm_f64x2_splat(0.0), agx = ag;
            for (int j = 0; j < n4; j += 4) {
                v128_t xh = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(xr + j), mv), iv);
                v128_t g = wasm_f32x4_mul(wasm_v128_load(dyr + j), wasm_v128_load(scale + j));
                ag = add_f64(ag, g);
                agx = add_f64(agx, wasm_f32x4_mul(g, xh));
            }
            double sg = lanes(ag), sgx = lanes(agx);
            for (int j = n4; j < n; j++) {
                float xh = (xr[j] - m) * is, g = dyr[j] * scale[j];
                sg += g;
                sgx += (double)(g * xh);
            }
            float mg = (float)sg * inv_n, mgx = (float)sgx * inv_n;
            v128_t mgv = wasm_f32x4_splat(mg), mgxv = wasm_f32x4_splat(mgx);
            float *dxr = dx + (long)r * n;
            for (int j = 0; j < n4; j += 4) {
                v128_t xh = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(xr + j), mv), iv);
                v128_t g = wasm_f32x4_mul(wasm_v128_load(dyr + j), wasm_v128_load(scale + j));
                wasm_v128_store(dxr + j, wasm_f32x4_mul(iv, wasm_f32x4_sub(wasm_f32x4_sub(g, mgv),
                                                                           wasm_f32x4_mul(xh, mgxv))));
            }
            for (int j = n4; j < n; j++) {
                float xh = (xr[j] - m) * is, g = dyr[j] * scale[j];
                dxr[j] = is * ((g - mg) - xh * mgx);
            }
        }
        if (dscale || dbias) {
            for (int j = 0; j < n4; j += 4) {
                v128_t d = wasm_v128_load(dyr + j);
                if (dscale) {
                    v128_t xh = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(xr + j), mv), iv);
                    wasm_v128_store(dscale + j, wasm_f32x4_add(wasm_v128_load(dscale + j), wasm_f32x4_mul(d, xh)));
                }
                if (dbias) wasm_v128_store(dbias + j, wasm_f32x4_add(wasm_v128_load(dbias + j), d));
            }
            for (int j = n4; j < n; j++) {
                if (dscale) dscale[j] += dyr[j] * ((xr[j] - m) * is);
                if (dbias) dbias[j] += dyr[j];
            }
        }
    }
}

/* BatchNormalization in inference form (linked into kernels.wasm by build.sh): one pass where numpy
 * in Pyodide makes a multiply and an add, each with its temporary. Results equal the numpy kernel
 * to the bit (the same float32 operations in the same order, no FMA in wasm). */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

/* ---- BatchNormalization (inference), per-channel affine ---------------------------------------- */

/* y[n, c, :] = x[n, c, :] * a[c] + b[c] over (N, C, S) float32: the numpy kernel's `X * a` then
 * `+= b`, two float32 roundings each (wasm has no fused multiply-add, so the same bits). */
EXPORT("pytrain_channel_affine")
void channel_affine(const float *x, float *y, const float *a, const float *b, int n, int c, int s) {
    for (int i = 0; i < n * c; i++) {
        const float *xi = x + (long)i * s;
        float *yi = y + (long)i * s;
        float ai = a[i % c], bi = b[i % c];
        v128_t va = wasm_f32x4_splat(ai), vb = wasm_f32x4_splat(bi);
        int j = 0;
        for (; j + 4 <= s; j += 4)
            wasm_v128_store(yi + j, wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(xi + j), va), vb));
        for (; j < s; j++) yi[j] = xi[j] * ai + bi;
    }
}

/* ---- BatchNormalization in training mode and its gradient (pytrain's BatchNormTraining / BatchNormGrad) ---- */

/* The sum of s floats in four float32 lanes, the lanes added in double (a plane's part of a channel sum). */
static double plane_sum(const float *p, int s) {
    v128_t acc = wasm_f32x4_splat(0.0f);
    int j = 0;
    for (; j + 4 <= s; j += 4) acc = wasm_f32x4_add(acc, wasm_v128_load(p + j));
    double t = (double)wasm_f32x4_extract_lane(acc, 0) + wasm_f32x4_extract_lane(acc, 1)
               + wasm_f32x4_extract_lane(acc, 2) + wasm_f32x4_extract_lane(acc, 3);
    for (; j < s; j++) t += p[j];
    return t;
}

/* The running statistics' update of one channel as the numpy kernel's running_statistics() makes it on float32
 * vectors (numpy casts the Python floats momentum, 1 - momentum and count / (count - 1) to float32 and rounds
 * every product and sum to float32; wasm has no fused multiply-add, so the same bits): the old value weighed by
 * momentum, the batch mean and the unbiased batch variance by 1 - momentum. Either output may be 0 (not asked). */
static void running_update(int ch, float m, float v, const float *running_mean, const float *running_var,
                           float *new_mean, float *new_var, float fm, float fm1, float unbias) {
    if (new_mean) new_mean[ch] = running_mean[ch] * fm + m * fm1;
    if (new_var) new_var[ch] = running_var[ch] * fm + (v * unbias) * fm1;
}

/* BatchNormTraining over (N, C, S) float32: per channel the batch mean (rounded to float32, as the numpy
 * kernel's), the biased variance of x - mean, invstd = 1 / sqrt(var + eps) (double, rounded once), then
 * y = (x - mean) * (invstd * scale) + bias in float32 as numpy does. Writes mean, var (biased; var may be 0)
 * and invstd per channel; the sums run per plane in float32 lanes, across planes in double. With new_mean or
 * new_var (else 0) also the updated running statistics of float32 running_mean / running_var (running_update):
 * the node's five outputs in one call instead of seven small numpy operations after it. */
EXPORT("pytrain_batchnorm_training")
void batchnorm_training(const float *x, float *y, const float *scale, const float *bias, float *mean, float *var,
                        float *invstd, int n, int c, int s, float eps, const float *running_mean,
                        const float *running_var, float *new_mean, float *new_var, double momentum) {
    double count = (double)n * s;
    float fm = (float)momentum, fm1 = (float)(1.0 - momentum), unbias = (float)(count / (count - 1.0));
    for (int ch = 0; ch < c; ch++) {
        double t = 0.0;
        for (int img = 0; img < n; img++) t += plane_sum(x + ((long)img * c + ch) * s, s);
        float m = (float)(t / count);
        v128_t vm = wasm_f32x4_splat(m);
        double q = 0.0;
        for (int img = 0; img < n; img++) {
            const float *p = x + ((long)img * c + ch) * s;
            v128_t acc = wasm_f32x4_splat(0.0f);
            int j = 0;
            for (; j + 4 <= s; j += 4) {
                v128_t d = wasm_f32x4_sub(wasm_v128_load(p + j), vm);
                acc = wasm_f32x4_add(acc, wasm_f32x4_mul(d, d));
            }
            double r = (double)wasm_f32x4_extract_lane(acc, 0) + wasm_f32x4_extract_lane(acc, 1)
                       + wasm_f32x4_extract_lane(acc, 2) + wasm_f32x4_extract_lane(acc, 3);
            for (; j < s; j++) { float d = p[j] - m; r += d * d; }
            q += r;
        }
        float v = (float)(q / count);
        float is = (float)(1.0 / __builtin_sqrt((double)v + (double)eps));
        mean[ch] = m; invstd[ch] = is;
        if (var) var[ch] = v;
        running_update(ch, m, v, running_mean, running_var, new_mean, new_var, fm, fm1, unbias);
        float k = is * scale[ch], b = bias[ch];
        v128_t vk = wasm_f32x4_splat(k), vb = wasm_f32x4_splat(b);
        for (int img = 0; img < n; img++) {
            const float *p = x + ((long)img * c + ch) * s;
            float *o = y + ((long)img * c + ch) * s;
            int j = 0;
            for (; j + 4 <= s; j += 4)
                wasm_v128_store(o + j, wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(p + j), vm), vk), vb));
            for (; j < s; j++) o[j] = (p[j] - m) * k + b;
        }
    }
}

/* BatchNormGrad over (N, C, S) float32: per channel dB = sum dy, dScale = sum dy * xhat with xhat = (x - mean)
 * * invstd (sums per plane in float32 lanes, across planes in double), then (dx != 0) with k = scale * invstd,
 * dx = dy * k - xhat * (k * dScale / count) - k * dB / count in numpy's float32 order. */
EXPORT("pytrain_batchnorm_grad")
void batchnorm_grad(const float *dy, const float *x, const float *scale, const float *mean, const float *invstd,
                    float *dx, float *dscale, float *dbias, int n, int c, int s) {
    float inv_count = (float)(1.0 / ((double)n * s));
    for (int ch = 0; ch < c; ch++) {
        float m = mean[ch], is = invstd[ch];
        v128_t vm = wasm_f32x4_splat(m), vis = wasm_f32x4_splat(is);
        double db = 0.0, ds = 0.0;
        for (int img = 0; img < n; img++) {
            const float *g = dy + ((long)img * c + ch) * s, *p = x + ((long)img * c + ch) * s;
            v128_t a = wasm_f32x4_splat(0.0f), b = a;
            int j = 0;
            for (; j + 4 <= s; j += 4) {
                v128_t gv = wasm_v128_load(g + j);
                v128_t xh = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(p + j), vm), vis);
                a = wasm_f32x4_add(a, gv);
                b = wasm_f32x4_add(b, wasm_f32x4_mul(gv, xh));
            }
            db += (double)wasm_f32x4_extract_lane(a, 0) + wasm_f32x4_extract_lane(a, 1)
                  + wasm_f32x4_extract_lane(a, 2) + wasm_f32x4_extract_lane(a, 3);
            ds += (double)wasm_f32x4_extract_lane(b, 0) + wasm_f32x4_extract_lane(b, 1)
                  + wasm_f32x4_extract_lane(b, 2) + wasm_f32x4_extract_lane(b, 3);
            for (; j < s; j++) { float xh = (p[j] - m) * is; db += g[j]; ds += g[j] * xh; }
        }
        float fdb = (float)db, fds = (float)ds;
        dbias[ch] = fdb; dscale[ch] = fds;
        if (!dx) continue;
        float k = scale[ch] * is;
        float kp = k * fds * inv_count, kb = k * fdb * inv_count;
        v128_t vk = wasm_f32x4_splat(k), vkp = wasm_f32x4_splat(kp), vkb = wasm_f32x4_splat(kb);
        for (int img = 0; img < n; img++) {
            const float *g = dy + ((long)img * c + ch) * s, *p = x + ((long)img * c + ch) * s;
            float *o = dx + ((long)img * c + ch) * s;
            int j = 0;
            for (; j + 4 <= s; j += 4) {
                v128_t xh = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(p + j), vm), vis);
                v128_t r = wasm_f32x4_sub(wasm_f32x4_mul(wasm_v128_load(g + j), vk), wasm_f32x4_mul(xh, vkp));
                wasm_v128_store(o + j, wasm_f32x4_sub(r, vkb));
            }
            for (; j < s; j++) { float xh = (p[j] - m) * is; o[j] = (g[j] * k - xh * kp) - kb; }
        }
    }
}

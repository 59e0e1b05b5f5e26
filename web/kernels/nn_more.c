/* The kernels the real models spend their browser time in (linked into gemm.wasm by build.sh):
 * Clip (MobileNet's ReLU6), BatchNormalization in inference form, 2-D depthwise and pointwise (1x1)
 * convolutions (MobileNetV2's backbone), Erf and Exp (BERT's GELU and its gradient).
 *
 * In Pyodide numpy has no SIMD and makes a temporary per operation: Clip is two passes, Erf a
 * dozen float64 passes plus masks, a depthwise convolution an im2col copy, two layout
 * transposes and a batched matmul of 1 x 9 rows. Each kernel here is one pass, one call.
 * Results equal the numpy kernels of pytrain/ops to the bit (Clip, BatchNormalization, the
 * convolutions: same float32 operations in the same order, no FMA in wasm) or to float32
 * rounding (Erf, Exp: computed in double precision as numpy's are, with our own exp since
 * there is no libm).
 */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

/* ---- Clip ------------------------------------------------------------------------------------ */

/* y = np.minimum(np.maximum(x, lo), hi) with numpy's NaN rule (a NaN operand wins: wasm's
 * f32x4.min/max propagate NaN the same way). Absent bounds come as -inf / +inf. */
EXPORT("pytrain_clip")
void clip(const float *x, float *y, int n, float lo, float hi) {
    v128_t vlo = wasm_f32x4_splat(lo), vhi = wasm_f32x4_splat(hi);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        wasm_v128_store(y + i, wasm_f32x4_min(wasm_f32x4_max(wasm_v128_load(x + i), vlo), vhi));
    for (; i < n; i++) {
        float v = x[i];
        v = (v >= lo || v != v) ? v : lo;
        y[i] = (v <= hi || v != v) ? v : hi;
    }
}

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

/* ---- convolutions --------------------------------------------------------------------------- */

/* One output of a depthwise convolution: the taps inside the input, (ky, kx) row-major. */
static float depthwise_one(const float *xc, const float *wo, int h, int wd, int kh, int kw, int dh, int dw,
                           int iy0, int ix0) {
    float acc = 0.0f;
    for (int ky = 0; ky < kh; ky++) {
        int iy = iy0 + ky * dh;
        if (iy < 0 || iy >= h) continue;
        for (int kx = 0; kx < kw; kx++) {
            int ix = ix0 + kx * dw;
            if (ix >= 0 && ix < wd) acc += xc[(long)iy * wd + ix] * wo[ky * kw + kx];
        }
    }
    return acc;
}

/* Depthwise 2-D convolution, NCHW: group == C, W (C*mult, 1, kh, kw), output channel o reads
 * input channel o / mult. Each output is a float32 sum over the taps in row-major (ky, kx)
 * order starting from 0, as numpy's matmul of the im2col rows sums them (taps in the padding
 * contribute +-0 there and are skipped here); the bias (bias != 0) is added afterwards.
 * Four neighbouring outputs of a row whose windows lie inside the input columns share one SIMD
 * accumulator (each lane sums its own taps in the same order); the border columns go one by one. */
EXPORT("pytrain_depthwise_conv2d")
void depthwise_conv2d(const float *x, const float *w, const float *bias, float *y, int n, int c, int mult,
                      int h, int wd, int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw,
                      int ph, int pw) {
    int m = c * mult;
    /* output columns whose whole window lies inside the input's columns: [ox_lo, ox_hi) */
    int ox_lo = pw > 0 ? (pw + sw - 1) / sw : 0;
    int last = wd - 1 - (kw - 1) * dw + pw; /* ox * sw <= last */
    int ox_hi = last < 0 ? 0 : last / sw + 1;
    if (ox_lo > ow) ox_lo = ow;
    if (ox_hi > ow) ox_hi = ow;
    if (ox_hi < ox_lo) ox_hi = ox_lo;
    int ox_simd = ox_lo + (ox_hi - ox_lo) / 4 * 4;
    for (int img = 0; img < n; img++) {
        for (int o = 0; o < m; o++) {
            const float *xc = x + ((long)img * c + o / mult) * h * wd;
            const float *wo = w + (long)o * kh * kw;
            float *yo = y + ((long)img * m + o) * oh * ow;
            float bo = bias ? bias[o] : 0.0f;
            v128_t vb = wasm_f32x4_splat(bo);
            for (int oy = 0; oy < oh; oy++) {
                int iy0 = oy * sh - ph;
                float *yr = yo + (long)oy * ow;
                for (int ox = 0; ox < ox_lo; ox++) {
                    float acc = depthwise_one(xc, wo, h, wd, kh, kw, dh, dw, iy0, ox * sw - pw);
                    yr[ox] = bias ? acc + bo : acc;
                }
                int ox = ox_lo;
                if (kh == 3 && kw == 3 && sw == 1 && dw == 1) {
                    /* MobileNet's case: the nine weights in registers, eight outputs per pass */
                    v128_t w0 = wasm_f32x4_splat(wo[0]), w1 = wasm_f32x4_splat(wo[1]), w2 = wasm_f32x4_splat(wo[2]);
                    v128_t w3 = wasm_f32x4_splat(wo[3]), w4 = wasm_f32x4_splat(wo[4]), w5 = wasm_f32x4_splat(wo[5]);
                    v128_t w6 = wasm_f32x4_splat(wo[6]), w7 = wasm_f32x4_splat(wo[7]), w8 = wasm_f32x4_splat(wo[8]);
                    int r0 = iy0 >= 0 && iy0 < h, r1 = iy0 + dh >= 0 && iy0 + dh < h;
                    int r2 = iy0 + 2 * dh >= 0 && iy0 + 2 * dh < h;
                    const float *x0 = xc + (long)iy0 * wd - pw, *x1 = x0 + (long)dh * wd, *x2 = x1 + (long)dh * wd;
#define TAPS(A, P)                                                                                  \
    if (r0) { A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x0 + (P)), w0));                  \
              A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x0 + (P) + 1), w1));              \
              A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x0 + (P) + 2), w2)); }            \
    if (r1) { A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x1 + (P)), w3));                  \
              A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x1 + (P) + 1), w4));              \
              A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x1 + (P) + 2), w5)); }            \
    if (r2) { A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x2 + (P)), w6));                  \
              A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x2 + (P) + 1), w7));              \
              A = wasm_f32x4_add(A, wasm_f32x4_mul(wasm_v128_load(x2 + (P) + 2), w8)); }
                    for (; ox + 8 <= ox_simd; ox += 8) {
                        v128_t a = wasm_f32x4_splat(0.0f), b = a;
                        TAPS(a, ox)
                        TAPS(b, ox + 4)
                        if (bias) { a = wasm_f32x4_add(a, vb); b = wasm_f32x4_add(b, vb); }
                        wasm_v128_store(yr + ox, a);
                        wasm_v128_store(yr + ox + 4, b);
                    }
                    for (; ox < ox_simd; ox += 4) {
                        v128_t a = wasm_f32x4_splat(0.0f);
                        TAPS(a, ox)
                        if (bias) a = wasm_f32x4_add(a, vb);
                        wasm_v128_store(yr + ox, a);
                    }
#undef TAPS
                } else if (kh == 3 && kw == 3 && sw == 2 && dw == 1) {
                    /* stride 2: three loads give the even, odd and shifted-even columns of a row
                     * (only where the third load stays inside the row) */
                    v128_t wv[9];
                    for (int t = 0; t < 9; t++) wv[t] = wasm_f32x4_splat(wo[t]);
                    for (; ox < ox_simd && ox * 2 - pw + 12 <= wd; ox += 4) {
                        v128_t a = wasm_f32x4_splat(0.0f);
                        for (int ky = 0; ky < 3; ky++) {
                            int iy = iy0 + ky * dh;
                            if (iy < 0 || iy >= h) continue;
                            const float *p = xc + (long)iy * wd + ox * 2 - pw;
                            v128_t v0 = wasm_v128_load(p), v1 = wasm_v128_load(p + 4), v2 = wasm_v128_load(p + 8);
                            v128_t ev = wasm_i32x4_shuffle(v0, v1, 0, 2, 4, 6);
                            v128_t od = wasm_i32x4_shuffle(v0, v1, 1, 3, 5, 7);
                            v128_t e2 = wasm_i32x4_shuffle(ev, v2, 1, 2, 3, 4);
                            a = wasm_f32x4_add(a, wasm_f32x4_mul(ev, wv[ky * 3]));
                            a = wasm_f32x4_add(a, wasm_f32x4_mul(od, wv[ky * 3 + 1]));
                            a = wasm_f32x4_add(a, wasm_f32x4_mul(e2, wv[ky * 3 + 2]));
                        }
                        if (bias) a = wasm_f32x4_add(a, vb);
                        wasm_v128_store(yr + ox, a);
                    }
                }
                for (; ox < ox_simd; ox += 4) {
                    v128_t acc = wasm_f32x4_splat(0.0f);
                    for (int ky = 0; ky < kh; ky++) {
                        int iy = iy0 + ky * dh;
                        if (iy < 0 || iy >= h) continue;
                        const float *xr = xc + (long)iy * wd + ox * sw - pw;
                        const float *wr = wo + ky * kw;
                        for (int kx = 0; kx < kw; kx++) {
                            const float *p = xr + kx * dw;
                            v128_t xv = sw == 1 ? wasm_v128_load(p) : wasm_f32x4_make(p[0], p[sw], p[2 * sw], p[3 * sw]);
                            acc = wasm_f32x4_add(acc, wasm_f32x4_mul(xv, wasm_f32x4_splat(wr[kx])));
                        }
                    }
                    if (bias) acc = wasm_f32x4_add(acc, vb);
                    wasm_v128_store(yr + ox, acc);
                }
                for (int ox = ox_simd; ox < ow; ox++) {
                    float acc = depthwise_one(xc, wo, h, wd, kh, kw, dh, dw, iy0, ox * sw - pw);
                    yr[ox] = bias ? acc + bo : acc;
                }
            }
        }
    }
}

void sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
           const float *B, int ldb, float beta, float *C, int ldc, void *work);

/* Pointwise (1x1, stride 1, no padding, group 1) convolution, NCHW: Y[img] (M x S) =
 * W (M x C) @ X[img] (C x S), then the bias (bias != 0) added per channel: the products the
 * im2col path makes, without its copies and layout transposes, in one call. With few positions
 * per image (S small: late MobileNet stages have 3 x 3) per-image products are too thin for the
 * GEMM's 8-wide tiles, so when the caller passes scratch `tmp` (C*N*S + M*N*S floats) the images
 * go side by side: X as (C, N*S), one product, the result put back as (N, M, S). The sums are the
 * same either way (each output sums its C terms in order). */
EXPORT("pytrain_conv1x1")
void conv1x1(const float *x, const float *w, const float *bias, float *y, int n, int c, int m, int s,
             float *tmp, void *work) {
    if (tmp) {
        long ns = (long)n * s;
        float *xt = tmp, *yt = tmp + (long)c * ns;
        for (int img = 0; img < n; img++)
            for (int ch = 0; ch < c; ch++) {
                const float *src = x + ((long)img * c + ch) * s;
                float *dst = xt + ch * ns + (long)img * s;
                for (int j = 0; j < s; j++) dst[j] = src[j];
            }
        sgemm(0, 0, m, (int)ns, c, 1.0f, w, c, xt, (int)ns, 0.0f, yt, (int)ns, work);
        for (int img = 0; img < n; img++)
            for (int o = 0; o < m; o++) {
                const float *src = yt + o * ns + (long)img * s;
                float *dst = y + ((long)img * m + o) * s;
                if (bias) {
                    float b = bias[o];
                    for (int j = 0; j < s; j++) dst[j] = src[j] + b;
                } else {
                    for (int j = 0; j < s; j++) dst[j] = src[j];
                }
            }
        return;
    }
    for (int img = 0; img < n; img++) {
        float *yi = y + (long)img * m * s;
        sgemm(0, 0, m, s, c, 1.0f, w, c, x + (long)img * c * s, s, 0.0f, yi, s, work);
        if (!bias) continue;
        for (int o = 0; o < m; o++) {
            float *yo = yi + (long)o * s;
            v128_t vb = wasm_f32x4_splat(bias[o]);
            int j = 0;
            for (; j + 4 <= s; j += 4) wasm_v128_store(yo + j, wasm_f32x4_add(wasm_v128_load(yo + j), vb));
            for (; j < s; j++) yo[j] += bias[o];
        }
    }
}

/* A stack of `count` products C[i] = op(A[i]) @ op(B[i]) (beta 0), operand i at A + i * stride_a
 * etc. (strides in elements): attention's per-head products in one call instead of one each. */
EXPORT("pytrain_sgemm_batched")
void sgemm_batched(int count, int transA, int transB, int M, int N, int K, const float *A, int stride_a, int lda,
                   const float *B, int stride_b, int ldb, float *C, int stride_c, int ldc, void *work) {
    for (int i = 0; i < count; i++)
        sgemm(transA, transB, M, N, K, 1.0f, A + (long)i * stride_a, lda, B + (long)i * stride_b, ldb, 0.0f,
              C + (long)i * stride_c, ldc, work);
}

/* ONNX Gemm with alpha 1 and beta 1 in one call: Y = op(A) @ op(B), then + C as numpy's `y += C`
 * adds it afterwards (the same float32 sums, then one rounding per add: the same bits as the
 * product followed by the numpy add). c_kind: 0 no C, 1 a row of N broadcast down, 2 a full M x N. */
EXPORT("pytrain_gemm")
void gemm_bias(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
               const float *C, int c_kind, float *Y, void *work) {
    sgemm(transA, transB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, Y, N, work);
    if (c_kind == 0) return;
    for (int i = 0; i < M; i++) {
        float *y = Y + (long)i * N;
        const float *c = c_kind == 1 ? C : C + (long)i * N;
        int j = 0;
        for (; j + 4 <= N; j += 4) wasm_v128_store(y + j, wasm_f32x4_add(wasm_v128_load(y + j), wasm_v128_load(c + j)));
        for (; j < N; j++) y[j] += c[j];
    }
}

/* ---- exp and erf in double precision ---------------------------------------------------------- */

typedef union { double d; unsigned long long u; } Bits;

/* e^x for any double: x = k ln2 + r, |r| <= ln2/2, e^r by its Taylor series to r^11, times 2^k
 * built in the exponent (in two steps near the subnormal range and near overflow). */
static double exp_f64(double x) {
    if (x != x) return x;
    if (x > 709.782712893384) return __builtin_inf();
    if (x < -745.2) return 0.0;
    /* k = x / ln2 rounded to nearest, by the 2^52 + 2^51 trick (as exp_f64x2 does it) */
    double kd = (x * 1.44269504088896338700e+00 + 6755399441055744.0) - 6755399441055744.0;
    double r = (x - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    /* Horner with 1/j! written out (a table would be a data segment in the host's memory), to
     * r^11: relative error < 7e-15, far below a float32 result's rounding (6e-8) */
    double t = 1.0 / 39916800.0;
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
    if (k > 1023) { /* e^x just below the overflow threshold: 2^k / 2 * 2 */
        b.u = (unsigned long long)(k - 1 + 1023) << 52;
        return t * b.d * 2.0;
    }
    b.u = (unsigned long long)(k + 1023) << 52;
    return t * b.d;
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

/* y = float32(e^x), as np.exp in float32 (correctly rounded but for rare double-rounding ties). */
EXPORT("pytrain_exp")
void exp_f32(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v128_t v = wasm_v128_load(x + i);
        v128_t lo = wasm_f64x2_promote_low_f32x4(v), hi = promote_high(v);
        if (exp_fast_range(lo) && exp_fast_range(hi)) {
            wasm_v128_store(y + i, demote_pair(exp_f64x2(lo), exp_f64x2(hi)));
        } else {
            for (int j = 0; j < 4; j++) y[i + j] = (float)exp_f64((double)x[i + j]);
        }
    }
    for (; i < n; i++) y[i] = (float)exp_f64((double)x[i]);
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

EXPORT("pytrain_erf")
void erf_f32(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v128_t v = wasm_v128_load(x + i);
        v128_t lo = wasm_f64x2_promote_low_f32x4(v), hi = promote_high(v);
        if (erf_small_range(lo) && erf_small_range(hi)) {
            wasm_v128_store(y + i, demote_pair(erf_small_f64x2(lo), erf_small_f64x2(hi)));
        } else {
            for (int j = 0; j < 4; j++) y[i + j] = (float)erf_f64((double)x[i + j]);
        }
    }
    for (; i < n; i++) y[i] = (float)erf_f64((double)x[i]);
}

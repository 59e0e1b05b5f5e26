/* The 2-D convolutions im2col serves worst (linked into kernels.wasm by build.sh): depthwise
 * (MobileNetV2's 3x3 per-channel filters) and pointwise (1x1). In Pyodide a depthwise convolution
 * is an im2col copy, two layout transposes and a batched matmul of 1 x 9 rows; here one pass, one
 * call. Results equal the numpy kernels of pytrain/ops to the bit (the same float32 sums in the
 * same order, no FMA in wasm).
 */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))


/* Whether the k values at w are all finite (x - x is 0 for them, NaN for an inf or a NaN). */
static int all_finite(const float *w, int k) {
    for (int t = 0; t < k; t++) if (w[t] - w[t] != 0.0f) return 0;
    return 1;
}

/* One output as numpy's im2col columns make it: every tap, the padding read as 0 (0 * an inf weight is NaN). */
static float depthwise_one_padded(const float *xc, const float *wo, int h, int wd, int kh, int kw, int dh, int dw,
                                  int iy0, int ix0) {
    float acc = 0.0f;
    for (int ky = 0; ky < kh; ky++) {
        int iy = iy0 + ky * dh;
        for (int kx = 0; kx < kw; kx++) {
            int ix = ix0 + kx * dw;
            float xv = iy >= 0 && iy < h && ix >= 0 && ix < wd ? xc[(long)iy * wd + ix] : 0.0f;
            acc += xv * wo[ky * kw + kx];
        }
    }
    return acc;
}

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

/* depthwise.c: the images as SIMD lanes */
void depthwise_lanes(const float *x, const float *w, const float *bias, float *y, int n, int c, int mult, int h,
                     int wd, int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw, int ph, int pw, float *t);
void depthwise_grad_lanes(const float *x, const float *w, const float *dy, float *dx, float *dwt, int n, int c, int m,
                          int h, int wd, int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw, int ph, int pw,
                          float *tmp);

/* Depthwise 2-D convolution, NCHW: group == C, W (C*mult, 1, kh, kw), output channel o reads
 * input channel o / mult. Each output is a float32 sum over the taps in row-major (ky, kx)
 * order starting from 0, as numpy's matmul of the im2col rows sums them (taps in the padding
 * contribute +-0 there and are skipped here, unless a weight of the channel is not finite: then every tap,
 * numpy's 0 * inf = NaN included); the bias (bias != 0) is added afterwards.
 * Four neighbouring outputs of a row whose windows lie inside the input columns share one SIMD
 * accumulator (each lane sums its own taps in the same order); the border columns go one by one. With
 * scratch `tmp` (depthwise_lanes' size) the images go as SIMD lanes over padded planes instead. */
EXPORT("pytrain_depthwise_conv2d")
void depthwise_conv2d(const float *x, const float *w, const float *bias, float *y, int n, int c, int mult,
                      int h, int wd, int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw,
                      int ph, int pw, float *tmp) {
    if (tmp) {
        depthwise_lanes(x, w, bias, y, n, c, mult, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw, tmp);
        return;
    }
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
            if (!all_finite(wo, kh * kw)) { /* the padding's products matter (NaN): numpy's, output by output */
                for (int p = 0; p < oh * ow; p++) {
                    float acc = depthwise_one_padded(xc, wo, h, wd, kh, kw, dh, dw, p / ow * sh - ph, p % ow * sw - pw);
                    yo[p] = bias ? acc + bo : acc;
                }
                continue;
            }
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

/* One image's im2col from the unpadded NCHW input, padding read as zeros: cols (C*KH*KW x L), row
 * (c*KH + i)*KW + j, column y*OW + x (+ col0 within rows of `ld` columns: the images side by side)
 * = x[c][y*SH - PH + i*DH][x*SW - PW + j*DW]. */
static void image_columns(const float *x, float *cols, int ld, int col0, int c, int h, int wd, int kh, int kw,
                          int oh, int ow, int sh, int sw, int dh, int dw, int ph, int pw) {
    for (int ci = 0; ci < c; ci++) {
        const float *xc = x + (long)ci * h * wd;
        for (int i = 0; i < kh; i++)
            for (int j = 0; j < kw; j++) {
                float *dst = cols + (long)((ci * kh + i) * kw + j) * ld + col0;
                int off = j * dw - pw;
                /* output columns reading inside the row: lo <= ox < hi */
                int lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int hi = wd - off <= 0 ? 0 : (wd - off - 1) / sw + 1;
                if (hi > ow) hi = ow;
                if (lo > hi) lo = hi;
                for (int oy = 0; oy < oh; oy++, dst += ow) {
                    int iy = oy * sh - ph + i * dh;
                    if (iy < 0 || iy >= h) {
                        for (int ox = 0; ox < ow; ox++) dst[ox] = 0.0f;
                        continue;
                    }
                    const float *src = xc + (long)iy * wd + off;
                    for (int ox = 0; ox < lo; ox++) dst[ox] = 0.0f;
                    if (sw == 1) {
                        for (int ox = lo; ox < hi; ox++) dst[ox] = src[ox];
                    } else {
                        for (int ox = lo; ox < hi; ox++) dst[ox] = src[ox * sw];
                    }
                    for (int ox = hi; ox < ow; ox++) dst[ox] = 0.0f;
                }
            }
    }
}

/* A 2-D convolution, group 1, any kernel, strides, dilations and zero padding, NCHW in and out: per
 * image its im2col (padding read as zeros, no padded copy) and Y[img] (M x L) = W (M x C*K) @ cols,
 * then the bias (bias != 0) per channel; one call where the numpy path pads, moves the batch last,
 * builds the columns, multiplies, moves the batch first and adds the bias in five passes. Each output
 * sums its C*K terms in the order the batch-last path does, through the same GEMM. `tmp`: scratch of
 * C*K*L floats, or with `fold` (few positions per image) C*K*N*L + M*N*L: the images side by side in
 * one product, as conv1x1 does. */
EXPORT("pytrain_conv2d")
void conv2d(const float *x, const float *w, const float *bias, float *y, int n, int c, int h, int wd, int m,
            int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw, int ph, int pw, int fold,
            float *tmp, void *work) {
    int l = oh * ow, ck = c * kh * kw;
    if (fold) {
        long nl = (long)n * l;
        float *yt = tmp + (long)ck * nl;
        for (int img = 0; img < n; img++)
            image_columns(x + (long)img * c * h * wd, tmp, (int)nl, img * l, c, h, wd, kh, kw, oh, ow, sh, sw,
                          dh, dw, ph, pw);
        sgemm(0, 0, m, (int)nl, ck, 1.0f, w, ck, tmp, (int)nl, 0.0f, yt, (int)nl, work);
        for (int img = 0; img < n; img++)
            for (int o = 0; o < m; o++) {
                const float *src = yt + o * nl + (long)img * l;
                float *dst = y + ((long)img * m + o) * l;
                float b = bias ? bias[o] : 0.0f;
                if (bias) for (int j = 0; j < l; j++) dst[j] = src[j] + b;
                else for (int j = 0; j < l; j++) dst[j] = src[j];
            }
        return;
    }
    for (int img = 0; img < n; img++) {
        image_columns(x + (long)img * c * h * wd, tmp, l, 0, c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw);
        float *yi = y + (long)img * m * l;
        sgemm(0, 0, m, l, ck, 1.0f, w, ck, tmp, l, 0.0f, yi, l, work);
        if (!bias) continue;
        for (int o = 0; o < m; o++) {
            float *yo = yi + (long)o * l;
            v128_t vb = wasm_f32x4_splat(bias[o]);
            int j = 0;
            for (; j + 4 <= l; j += 4) wasm_v128_store(yo + j, wasm_f32x4_add(wasm_v128_load(yo + j), vb));
            for (; j < l; j++) yo[j] += bias[o];
        }
    }
}

/* A 2-D ConvTranspose whose kernel equals its strides (no overlap, no dilation, no padding: DBNet's
 * x2 upsampling 2x2 / stride 2), group 1, NCHW: per image T (M*KH*KW x H*W) = W^T (W: C x M*KH*KW) @
 * X[img] (C x H*W), one product, then every tap's plane put in its place, the bias added:
 * Y[img][o][y*KH + i][x*KW + j] = T[(o*KH + i)*KW + j][y*W + x] + bias[o]. Each output is one sum over
 * the C input channels (the numpy path's product, then its col2im adds it to a zero). tmp: M*KH*KW*H*W floats. */
EXPORT("pytrain_conv_transpose_tiles")
void conv_transpose_tiles(const float *x, const float *w, const float *bias, float *y, int n, int c, int h,
                          int wd, int m, int kh, int kw, float *tmp, void *work) {
    int mk = m * kh * kw, l = h * wd, ow = wd * kw;
    for (int img = 0; img < n; img++) {
        sgemm(1, 0, mk, l, c, 1.0f, w, mk, x + (long)img * c * l, l, 0.0f, tmp, l, work);
        float *yi = y + (long)img * m * l * kh * kw;
        for (int o = 0; o < m; o++) {
            float b = bias ? bias[o] : 0.0f;
            float *yo = yi + (long)o * l * kh * kw;
            for (int i = 0; i < kh; i++)
                for (int j = 0; j < kw; j++) {
                    const float *t = tmp + (long)((o * kh + i) * kw + j) * l;
                    for (int yy = 0; yy < h; yy++) {
                        float *dst = yo + (long)(yy * kh + i) * ow + j;
                        const float *src = t + (long)yy * wd;
                        if (bias) for (int xx = 0; xx < wd; xx++) dst[xx * kw] = src[xx] + b;
                        else for (int xx = 0; xx < wd; xx++) dst[xx * kw] = src[xx];
                    }
                }
        }
    }
}

/* The adjoint of image_columns: every column entry (row (c*KH + i)*KW + j, column y*OW + x + col0 within
 * rows of `ld`) added back onto the input position it was read from; entries read from the padding are
 * dropped. x (one image, NCHW) must be zeroed by the caller; overlapping windows accumulate, tap by tap. */
static void image_columns_adjoint(const float *cols, int ld, int col0, float *x, int c, int h, int wd, int kh,
                                  int kw, int oh, int ow, int sh, int sw, int dh, int dw, int ph, int pw) {
    for (int ci = 0; ci < c; ci++) {
        float *xc = x + (long)ci * h * wd;
        for (int i = 0; i < kh; i++)
            for (int j = 0; j < kw; j++) {
                const float *src = cols + (long)((ci * kh + i) * kw + j) * ld + col0;
                int off = j * dw - pw;
                int lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int hi = wd - off <= 0 ? 0 : (wd - off - 1) / sw + 1;
                if (hi > ow) hi = ow;
                if (lo > hi) lo = hi;
                for (int oy = 0; oy < oh; oy++, src += ow) {
                    int iy = oy * sh - ph + i * dh;
                    if (iy < 0 || iy >= h) continue;
                    float *dst = xc + (long)iy * wd + off;
                    if (sw == 1) {
                        for (int ox = lo; ox < hi; ox++) dst[ox] += src[ox];
                    } else {
                        for (int ox = lo; ox < hi; ox++) dst[ox * sw] += src[ox];
                    }
                }
            }
    }
}

/* ConvGrad of an ungrouped 2-D convolution (conv2d's geometry), NCHW: dW (M x C*K) = sum over the images
 * of dY[img] (M x L) @ cols[img]^T, dX[img] = col2im(W^T @ dY[img]) with the padding dropped; dw == 0 or
 * dx == 0 skips that gradient, dx must be zeroed by the caller. `tmp`: C*K*L floats, or with `fold` (few
 * positions per image) C*K*N*L + M*N*L: the images side by side, one product for each gradient (the
 * columns' buffer is reused for W^T @ dY once dW is made). */
EXPORT("pytrain_conv2d_grad")
void conv2d_grad(const float *x, const float *w, const float *dy, float *dx, float *dwt, int n, int c, int h,
                 int wd, int m, int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw, int ph, int pw,
                 int fold, float *tmp, void *work) {
    int l = oh * ow, ck = c * kh * kw;
    long chw = (long)c * h * wd;
    if (fold) {
        long nl = (long)n * l;
        float *dyt = tmp + (long)ck * nl;
        for (int img = 0; img < n; img++)
            for (int o = 0; o < m; o++) {
                const float *src = dy + ((long)img * m + o) * l;
                float *dst = dyt + o * nl + (long)img * l;
                for (int j = 0; j < l; j++) dst[j] = src[j];
            }
        if (dwt) {
            for (int img = 0; img < n; img++)
                image_columns(x + img * chw, tmp, (int)nl, img * l, c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw,
                              ph, pw);
            sgemm(0, 1, m, ck, (int)nl, 1.0f, dyt, (int)nl, tmp, (int)nl, 0.0f, dwt, ck, work);
        }
        if (dx) {
            sgemm(1, 0, ck, (int)nl, m, 1.0f, w, ck, dyt, (int)nl, 0.0f, tmp, (int)nl, work);
            for (int img = 0; img < n; img++)
                image_columns_adjoint(tmp, (int)nl, img * l, dx + img * chw, c, h, wd, kh, kw, oh, ow, sh, sw,
                                      dh, dw, ph, pw);
        }
        return;
    }
    for (int img = 0; img < n; img++) {
        const float *dyi = dy + (long)img * m * l;
        if (dwt) {
            image_columns(x + img * chw, tmp, l, 0, c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw);
            sgemm(0, 1, m, ck, l, 1.0f, dyi, l, tmp, l, img ? 1.0f : 0.0f, dwt, ck, work);
        }
        if (dx) {
            sgemm(1, 0, ck, l, m, 1.0f, w, ck, dyi, l, 0.0f, tmp, l, work);
            image_columns_adjoint(tmp, l, 0, dx + img * chw, c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw);
        }
    }
}

/* ConvGrad of a depthwise 2-D convolution (group == C, W (C*mult, 1, kh, kw): output channel o reads input
 * channel o / mult), NCHW, direct: dW[o][tap] = the sum over the images and output positions of dY times
 * the tap's input (per output row a float32 sum, the rows' sums in double, rounded once; dY times the
 * padding's zeros added too, so an inf of dY there gives numpy's NaN), dX[ci] += dY[o]
 * times the tap's weight at the tap's shift (padding dropped). dw == 0 or dx == 0 skips that gradient; dx
 * must be zeroed by the caller. With scratch `tmp` (depthwise_grad_lanes' size) the images go as SIMD lanes
 * over padded planes instead, and dx is written whole. */
EXPORT("pytrain_depthwise_conv2d_grad")
void depthwise_conv2d_grad(const float *x, const float *w, const float *dy, float *dx, float *dwt, int n,
                           int c, int mult, int h, int wd, int kh, int kw, int oh, int ow, int sh, int sw, int dh,
                           int dw, int ph, int pw, float *tmp) {
    if (tmp) {
        depthwise_grad_lanes(x, w, dy, dx, dwt, n, c, mult, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw, tmp);
        return;
    }
    int m = c * mult, k = kh * kw;
    for (int o = 0; o < m; o++) {
        int ci = o / mult;
        for (int i = 0; i < kh; i++)
            for (int j = 0; j < kw; j++) {
                int off = j * dw - pw;
                int lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int hi = wd - off <= 0 ? 0 : (wd - off - 1) / sw + 1;
                if (hi > ow) hi = ow;
                if (lo > hi) lo = hi;
                float wt = w[o * k + i * kw + j];
                v128_t vw = wasm_f32x4_splat(wt);
                double total = 0.0;
                float pz = 0.0f; /* dY times the padding's zeros, as numpy's columns have them: 0, or NaN */
                v128_t vzero = wasm_f32x4_splat(0.0f), vz = vzero;
                for (int img = 0; img < n; img++) {
                    const float *xc = x + ((long)img * c + ci) * h * wd;
                    float *dxc = dx ? dx + ((long)img * c + ci) * h * wd : 0;
                    const float *dyo = dy + ((long)img * m + o) * oh * ow;
                    for (int oy = 0; oy < oh; oy++) {
                        int iy = oy * sh - ph + i * dh;
                        const float *g = dyo + (long)oy * ow;
                        if (dwt) {
                            int in = iy >= 0 && iy < h, a = in ? lo : ow, b = in ? hi : ow, q = 0;
                            for (; q + 4 <= a; q += 4) /* (a padding row: whole, four at a time) */
                                vz = wasm_f32x4_add(vz, wasm_f32x4_mul(wasm_v128_load(g + q), vzero));
                            for (; q < a; q++) pz += g[q] * 0.0f;
                            for (q = b; q < ow; q++) pz += g[q] * 0.0f;
                        }
                        if (iy < 0 || iy >= h) continue;
                        const float *src = xc + (long)iy * wd + off;
                        int ox = lo;
                        if (sw == 1) {
                            if (dwt) {
                                v128_t acc = wasm_f32x4_splat(0.0f);
                                for (; ox + 4 <= hi; ox += 4)
                                    acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(g + ox),
                                                                             wasm_v128_load(src + ox)));
                                float s = (wasm_f32x4_extract_lane(acc, 0) + wasm_f32x4_extract_lane(acc, 1))
                                          + (wasm_f32x4_extract_lane(acc, 2) + wasm_f32x4_extract_lane(acc, 3));
                                for (; ox < hi; ox++) s += g[ox] * src[ox];
                                total += s;
                            }
                            if (dxc) {
                                float *d = dxc + (long)iy * wd + off;
                                int q = lo;
                                for (; q + 4 <= hi; q += 4)
                                    wasm_v128_store(d + q, wasm_f32x4_add(wasm_v128_load(d + q),
                                                                          wasm_f32x4_mul(wasm_v128_load(g + q), vw)));
                                for (; q < hi; q++) d[q] += g[q] * wt;
                            }
                        } else {
                            float s = 0.0f;
                            float *d = dxc ? dxc + (long)iy * wd + off : 0;
                            for (; ox < hi; ox++) {
                                s += g[ox] * src[ox * sw];
                                if (d) d[ox * sw] += g[ox] * wt;
                            }
                            total += s;
                        }
                    }
                }
                pz += wasm_f32x4_extract_lane(vz, 0) + wasm_f32x4_extract_lane(vz, 1) + wasm_f32x4_extract_lane(vz, 2)
                      + wasm_f32x4_extract_lane(vz, 3);
                if (dwt) dwt[o * k + i * kw + j] = (float)(total + pz);
            }
    }
}

/* The depthwise convolution and its gradients with the images as SIMD lanes (linked into kernels.wasm by
 * build.sh; conv.c's depthwise_conv2d and depthwise_conv2d_grad take these paths when the caller gives
 * scratch). Per input channel a padded plane holds each position's N images side by side (N rounded up to 4,
 * the padding and the lanes past N zeros), so every tap is one walk over the output positions with no bounds
 * to test, four images a vector: MobileNetV3's 5x5 taps over 2x6 and 3x12 planes, where conv.c's row walk
 * pays its per-row and per-border work for rows of 2 to 12 values. The products are numpy's im2col ones
 * (the padding's zeros included), so NaN and infinities land where numpy puts them.
 */
#include <wasm_simd128.h>

/* One input channel's padded plane with the images as SIMD lanes (the depthwise lanes paths): dst (Hp x Wp
 * positions of np4 floats, input (y, x) at ((y + ph) * Wp + x + pw) * np4 + image) zeroed, then the input's
 * values that fall inside it copied in; the padding and the lanes past N stay 0. */
static void lanes_plane(const float *x, float *dst, int n, int c, int ci, int h, int wd, int hp, int wp, int ph,
                        int pw, int np4) {
    long plane = (long)hp * wp * np4, hw = (long)h * wd;
    int y0 = ph > 0 ? 0 : -ph, y1 = h < hp - ph ? h : hp - ph;
    int x0 = pw > 0 ? 0 : -pw, x1 = wd < wp - pw ? wd : wp - pw;
    v128_t zero = wasm_f32x4_splat(0.0f);
    for (long q = 0; q < plane; q += 4) wasm_v128_store(dst + q, zero);
    for (int img = 0; img < n; img++) {
        const float *xc = x + ((long)img * c + ci) * hw;
        for (int y = y0; y < y1; y++) {
            float *d = dst + ((long)(y + ph) * wp + pw) * np4 + img;
            const float *src = xc + (long)y * wd;
            for (int xx = x0; xx < x1; xx++) d[(long)xx * np4] = src[xx];
        }
    }
}

/* The depthwise Conv with the images as SIMD lanes (depthwise_conv2d's path when the caller gives scratch):
 * per input channel its padded plane (lanes_plane), then per output channel every tap's product added over
 * all output positions, taps in row-major order from 0 (numpy's im2col columns times W: the padding's zeros
 * times the weight included), the bias after; for small planes (MobileNetV3's 5x5 taps over 2x6 and 3x12),
 * where the row walk goes output by output. tmp: (Hp * Wp + OH * OW) * np4 floats. */
void depthwise_lanes(const float *x, const float *w, const float *bias, float *y, int n, int c, int mult,
                            int h, int wd, int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw, int ph,
                            int pw, float *tmp) {
    int np4 = (n + 3) & ~3, k = kh * kw;
    int hp = (oh - 1) * sh + (kh - 1) * dh + 1, wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    long outs = (long)oh * ow * np4, l = (long)oh * ow;
    float *xp = tmp, *yt = tmp + (long)hp * wp * np4;
    v128_t zero = wasm_f32x4_splat(0.0f);
    for (int ci = 0; ci < c; ci++) {
        lanes_plane(x, xp, n, c, ci, h, wd, hp, wp, ph, pw, np4);
        for (int jm = 0; jm < mult; jm++) {
            int o = ci * mult + jm;
            for (long q = 0; q < outs; q += 4) wasm_v128_store(yt + q, zero);
            for (int i = 0; i < kh; i++)
                for (int j = 0; j < kw; j++) {
                    v128_t vw = wasm_f32x4_splat(w[(long)o * k + i * kw + j]);
                    const float *a0 = xp + ((long)i * dh * wp + (long)j * dw) * np4;
                    for (int oy = 0; oy < oh; oy++) {
                        const float *a = a0 + (long)oy * sh * wp * np4;
                        float *t = yt + (long)oy * ow * np4;
                        if (sw == 1) {
                            for (long q = 0; q < (long)ow * np4; q += 4)
                                wasm_v128_store(t + q, wasm_f32x4_add(wasm_v128_load(t + q),
                                                                      wasm_f32x4_mul(wasm_v128_load(a + q), vw)));
                        } else {
                            long step = (long)sw * np4;
                            for (int q = 0; q < np4; q += 4) {
                                float *tq = t + q;
                                const float *aq = a + q;
                                for (int ox = 0; ox < ow; ox++, tq += np4, aq += step)
                                    wasm_v128_store(tq, wasm_f32x4_add(wasm_v128_load(tq),
                                                                       wasm_f32x4_mul(wasm_v128_load(aq), vw)));
                            }
                        }
                    }
                }
            float b = bias ? bias[o] : 0.0f;
            for (int img = 0; img < n; img++) {
                float *dst = y + ((long)img * c * mult + o) * l;
                const float *src = yt + img;
                if (bias) for (long p = 0; p < l; p++) dst[p] = src[p * np4] + b;
                else for (long p = 0; p < l; p++) dst[p] = src[p * np4];
            }
        }
    }
}

/* The depthwise gradients with the images as SIMD lanes (depthwise_conv2d_grad's path when the caller gives
 * scratch): per input channel its padded plane Xp (Hp x Wp positions of np4 = N rounded up to 4 floats, image
 * n in lane n, the padding and the lanes past N zeros), per output channel dY as (OH x OW x np4), and dXp the
 * padded dX. Every tap is then one walk over the output positions with no bounds to test, 4 images a vector,
 * however small the planes (MobileNetV3's 5x5 taps over 2x6 and 3x12 planes, where the row walk pays per row
 * of 2 to 12 values). The products are numpy's: dW[o][tap] sums dY times the padded input over every output
 * position (so 0 * an inf of dY in the padding is NaN, as numpy's columns give), per output row in float32 and
 * the rows in double; dX adds W[o][tap] * dY into the padded plane tap by tap, as numpy's col2im does, and the
 * padding's sums are dropped (an inf of X never meets a padding zero: X enters dW alone, at its own taps).
 * dx is written whole (positions no window reaches get 0). tmp: (2 * Hp * Wp + OH * OW) * np4 floats. */
void depthwise_grad_lanes(const float *x, const float *w, const float *dy, float *dx, float *dwt, int n,
                                 int c, int mult, int h, int wd, int kh, int kw, int oh, int ow, int sh, int sw,
                                 int dh, int dw, int ph, int pw, float *tmp) {
    int np4 = (n + 3) & ~3, k = kh * kw;
    int hp = (oh - 1) * sh + (kh - 1) * dh + 1, wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    long plane = (long)hp * wp * np4, outs = (long)oh * ow * np4, hw = (long)h * wd;
    float *xp = tmp, *dxp = tmp + plane, *dyt = dxp + plane;
    /* the rows and columns of the padded plane that hold input: [y0, y1) x [x0, x1) in input coordinates */
    int y0 = ph > 0 ? 0 : -ph, y1 = h < hp - ph ? h : hp - ph;
    int x0 = pw > 0 ? 0 : -pw, x1 = wd < wp - pw ? wd : wp - pw;
    v128_t zero = wasm_f32x4_splat(0.0f);
    for (long q = 0; q < outs; q += 4) wasm_v128_store(dyt + q, zero); /* (lanes past N stay 0) */
    for (int ci = 0; ci < c; ci++) {
        if (dwt) lanes_plane(x, xp, n, c, ci, h, wd, hp, wp, ph, pw, np4);
        if (dx)
            for (long q = 0; q < plane; q += 4) wasm_v128_store(dxp + q, zero);
        for (int jm = 0; jm < mult; jm++) {
            int o = ci * mult + jm;
            for (int img = 0; img < n; img++) {
                const float *src = dy + ((long)img * c * mult + o) * oh * ow;
                for (int p = 0; p < oh * ow; p++) dyt[(long)p * np4 + img] = src[p];
            }
            for (int i = 0; i < kh; i++)
                for (int j = 0; j < kw; j++) {
                    long tap0 = ((long)i * dh * wp + (long)j * dw) * np4;
                    if (dwt) {
                        v128_t lo = wasm_f64x2_splat(0.0), hi = lo;
                        for (int oy = 0; oy < oh; oy++) {
                            const float *a = xp + tap0 + (long)oy * sh * wp * np4;
                            const float *g = dyt + (long)oy * ow * np4;
                            v128_t acc = zero;
                            if (sw == 1) { /* (two chains: a row is 2 to 12 dependent adds otherwise) */
                                long q = 0, len = (long)ow * np4;
                                v128_t acc2 = zero;
                                for (; q + 8 <= len; q += 8) {
                                    acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(g + q),
                                                                             wasm_v128_load(a + q)));
                                    acc2 = wasm_f32x4_add(acc2, wasm_f32x4_mul(wasm_v128_load(g + q + 4),
                                                                               wasm_v128_load(a + q + 4)));
                                }
                                if (q < len)
                                    acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(g + q),
                                                                             wasm_v128_load(a + q)));
                                acc = wasm_f32x4_add(acc, acc2);
                            } else {
                                long step = (long)sw * np4;
                                for (int q = 0; q < np4; q += 4) {
                                    const float *gq = g + q, *aq = a + q;
                                    for (int ox = 0; ox < ow; ox++, gq += np4, aq += step)
                                        acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(gq),
                                                                                 wasm_v128_load(aq)));
                                }
                            }
                            lo = wasm_f64x2_add(lo, wasm_f64x2_promote_low_f32x4(acc));
                            hi = wasm_f64x2_add(hi, wasm_f64x2_promote_low_f32x4(
                                                        wasm_i32x4_shuffle(acc, acc, 2, 3, 0, 1)));
                        }
                        v128_t s = wasm_f64x2_add(lo, hi);
                        dwt[(long)o * k + i * kw + j] =
                            (float)(wasm_f64x2_extract_lane(s, 0) + wasm_f64x2_extract_lane(s, 1));
                    }
                    if (dx) {
                        v128_t vw = wasm_f32x4_splat(w[(long)o * k + i * kw + j]);
                        for (int oy = 0; oy < oh; oy++) {
                            float *d = dxp + tap0 + (long)oy * sh * wp * np4;
                            const float *g = dyt + (long)oy * ow * np4;
                            if (sw == 1) {
                                for (long q = 0; q < (long)ow * np4; q += 4)
                                    wasm_v128_store(d + q, wasm_f32x4_add(wasm_v128_load(d + q),
                                                                          wasm_f32x4_mul(wasm_v128_load(g + q), vw)));
                            } else {
                                long step = (long)sw * np4;
                                for (int q = 0; q < np4; q += 4) {
                                    float *dq = d + q;
                                    const float *gq = g + q;
                                    for (int ox = 0; ox < ow; ox++, gq += np4, dq += step)
                                        wasm_v128_store(dq, wasm_f32x4_add(wasm_v128_load(dq),
                                                                           wasm_f32x4_mul(wasm_v128_load(gq), vw)));
                                }
                            }
                        }
                    }
                }
        }
        if (dx)
            for (int img = 0; img < n; img++) {
                float *dc = dx + ((long)img * c + ci) * hw;
                for (int y = 0; y < h; y++) {
                    float *dst = dc + (long)y * wd;
                    if (y < y0 || y >= y1) {
                        for (int xx = 0; xx < wd; xx++) dst[xx] = 0.0f;
                        continue;
                    }
                    const float *src = dxp + ((long)(y + ph) * wp + pw) * np4 + img;
                    for (int xx = 0; xx < wd; xx++) dst[xx] = xx >= x0 && xx < x1 ? src[(long)xx * np4] : 0.0f;
                }
            }
    }
}

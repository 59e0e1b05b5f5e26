/* MaxPool for 2-D windows (linked into kernels.wasm by build.sh).
 *
 * numpy in Pyodide has no SIMD and pays a full pass (plus a temporary) per kernel tap and
 * per comparison; here every output element reads its window once, four outputs at a time.
 * Same results as pytrain/ops/op_maxpool.py, element for element:
 *   y = the running np.maximum over the taps in scan order (a NaN anywhere gives NaN);
 *   the winning tap is the last one that was strictly greater than the running maximum
 *   (the first maximum on ties; a NaN never wins), and its flat index into the unpadded
 *   input, batch and channel included, is onnxruntime's Indices output (row-major spatial
 *   offsets, or column-major when storage_order is 1).
 * xp is the padded input, C-contiguous (N*C planes of HP x WP); idx may be 0 (not wanted).
 * Comparisons are SIMD masks, never branches: on real data they are coin flips, and V8 turns
 * scalar selects into mispredicted jumps (measured 17 ns per output for a 2x2 window).
 */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

static inline v128_t gather4(const float *p, int stride) {
    return wasm_f32x4_make(p[0], p[stride], p[2 * stride], p[3 * stride]);
}

EXPORT("pytrain_maxpool2d")
void maxpool2d(const float *xp, float *y, long long *idx, int planes, int hp, int wp,
               int kh, int kw, int oh, int ow, int sh, int sw, int dh, int dw,
               int h, int w, int pad_h, int pad_w, int storage_order) {
    /* offsets of one spatial step along H and W in the Indices numbering */
    int step_h = storage_order ? 1 : w;
    int step_w = storage_order ? h : 1;
    for (int p = 0; p < planes; p++) {
        const float *plane = xp + (long)p * hp * wp;
        long long plane_base = (long long)p * h * w;
        for (int oy = 0; oy < oh; oy++) {
            const float *row0 = plane + oy * sh * wp;
            long long row_base = plane_base + (long long)(oy * sh - pad_h) * step_h;
            int ox = 0;
            for (; ox + 4 <= ow; ox += 4) {
                const float *origin = row0 + ox * sw;
                v128_t best = gather4(origin, sw);
                v128_t win = wasm_i32x4_splat(0); /* Indices offset of the winning tap */
                for (int i = 0; i < kh; i++) {
                    for (int j = (i == 0); j < kw; j++) {
                        v128_t v = gather4(origin + i * dh * wp + j * dw, sw);
                        v128_t gt = wasm_f32x4_gt(v, best);
                        win = wasm_v128_bitselect(wasm_i32x4_splat(i * dh * step_h + j * dw * step_w), win, gt);
                        best = wasm_f32x4_max(best, v); /* NaN-propagating, like np.maximum */
                    }
                }
                wasm_v128_store(y, best);
                y += 4;
                if (idx) {
                    long long base = row_base + (long long)(ox * sw - pad_w) * step_w;
                    long long lane_step = (long long)sw * step_w;
                    idx[0] = base + wasm_i32x4_extract_lane(win, 0);
                    idx[1] = base + lane_step + wasm_i32x4_extract_lane(win, 1);
                    idx[2] = base + 2 * lane_step + wasm_i32x4_extract_lane(win, 2);
                    idx[3] = base + 3 * lane_step + wasm_i32x4_extract_lane(win, 3);
                    idx += 4;
                }
            }
            for (; ox < ow; ox++) { /* the row's last ow % 4 outputs, one lane at a time */
                const float *origin = row0 + ox * sw;
                v128_t best = wasm_f32x4_splat(origin[0]);
                v128_t win = wasm_i32x4_splat(0);
                for (int i = 0; i < kh; i++) {
                    for (int j = (i == 0); j < kw; j++) {
                        v128_t v = wasm_f32x4_splat(origin[i * dh * wp + j * dw]);
                        v128_t gt = wasm_f32x4_gt(v, best);
                        win = wasm_v128_bitselect(wasm_i32x4_splat(i * dh * step_h + j * dw * step_w), win, gt);
                        best = wasm_f32x4_max(best, v);
                    }
                }
                *y++ = wasm_f32x4_extract_lane(best, 0);
                if (idx) *idx++ = row_base + (long long)(ox * sw - pad_w) * step_w + wasm_i32x4_extract_lane(win, 0);
            }
        }
    }
}

/* MaxPoolGrad from those Indices: dx (zeroed by the caller, `size` elements) += dy at idx, in
 * float32 (numpy's bincount sums in float64: equal unless windows overlap, then within a
 * rounding).  Returns 1, having stopped, at the first index outside [0, size): the caller then
 * leaves the node to the numpy kernel, which names the problem. */
EXPORT("pytrain_maxpool_grad")
int maxpool_grad(const float *dy, const long long *idx, float *dx, int n, int size) {
    for (int k = 0; k < n; k++) {
        long long i = idx[k];
        if (i < 0 || i >= size) return 1;
        dx[i] += dy[k];
    }
    return 0;
}

/* ---- nearest upsampling by whole factors ------------------------------------------------------- */

/* y[p][oy][ox] = x[p][oy / fh][ox / fw] over `planes` (N*C) planes of h x w: Resize's nearest mode
 * where output o reads input o // k (DBNet's x2 / x4 upsampling), one pass instead of numpy's two
 * np.repeat copies. Pure copies: the same bits. */
EXPORT("pytrain_upsample_nearest")
void upsample_nearest(const float *x, float *y, int planes, int h, int w, int fh, int fw) {
    int ow = w * fw;
    for (int p = 0; p < planes; p++) {
        const float *xp = x + (long)p * h * w;
        float *yp = y + (long)p * h * fh * ow;
        for (int iy = 0; iy < h; iy++) {
            const float *xr = xp + (long)iy * w;
            float *yr = yp + (long)iy * fh * ow;
            int ix = 0;
            if (fw == 2) {
                for (; ix + 4 <= w; ix += 4) {
                    v128_t v = wasm_v128_load(xr + ix);
                    wasm_v128_store(yr + 2 * ix, wasm_i32x4_shuffle(v, v, 0, 0, 1, 1));
                    wasm_v128_store(yr + 2 * ix + 4, wasm_i32x4_shuffle(v, v, 2, 2, 3, 3));
                }
            }
            for (; ix < w; ix++)
                for (int k = 0; k < fw; k++) yr[ix * fw + k] = xr[ix];
            for (int r = 1; r < fh; r++) {
                float *dst = yr + (long)r * ow;
                int j = 0;
                for (; j + 4 <= ow; j += 4) wasm_v128_store(dst + j, wasm_v128_load(yr + j));
                for (; j < ow; j++) dst[j] = yr[j];
            }
        }
    }
}

/* ---- GlobalAveragePool ------------------------------------------------------------------------- */

/* y[r] = (sum of x[r][0..cols)) / cols over C-contiguous rows (N*C rows of the spatial positions): four
 * running lane sums from the row's start, combined, the tail added, then divided as the mean divides.
 * The order depends on the row alone, so a sample pools to the same bits alone or in a batch. */
EXPORT("pytrain_row_means")
void row_means(const float *x, float *y, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * cols;
        v128_t acc = wasm_f32x4_splat(0.0f);
        int j = 0;
        for (; j + 4 <= cols; j += 4) acc = wasm_f32x4_add(acc, wasm_v128_load(xr + j));
        float s = (wasm_f32x4_extract_lane(acc, 0) + wasm_f32x4_extract_lane(acc, 1))
                + (wasm_f32x4_extract_lane(acc, 2) + wasm_f32x4_extract_lane(acc, 3));
        for (; j < cols; j++) s += xr[j];
        y[r] = s / (float)cols;
    }
}

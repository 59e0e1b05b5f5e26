/* im2col for 2-D convolutions (linked into gemm.wasm by build.sh).
 *
 * numpy builds this matrix through a 6-D transposed strided view, a generic element-by-element
 * copy that in Pyodide (no SIMD) cost more than the convolution's product itself. Here it is a
 * row copy per (channel, tap, sample, output row). Layout as pytrain.ops.windows.conv_columns:
 *   cols[(c*KH + i)*KW + j][n*OH*OW + y*OW + x] = xp[n][c][y*SH + i*DH][x*SW + j*DW]
 * where xp is the padded input, C-contiguous (N, C, H, W).
 */
#define EXPORT(name) __attribute__((export_name(name)))

EXPORT("pytrain_im2col")
void im2col(const float *xp, float *cols, int n, int c, int h, int w, int kh, int kw,
            int oh, int ow, int sh, int sw, int dh, int dw) {
    int l = oh * ow;
    int nl = n * l;
    for (int ci = 0; ci < c; ci++) {
        for (int i = 0; i < kh; i++) {
            for (int j = 0; j < kw; j++) {
                float *dst = cols + ((ci * kh + i) * kw + j) * nl;
                for (int ni = 0; ni < n; ni++) {
                    const float *plane = xp + (ni * c + ci) * h * w;
                    for (int y = 0; y < oh; y++) {
                        const float *src = plane + (y * sh + i * dh) * w + j * dw;
                        if (sw == 1) {
                            for (int x = 0; x < ow; x++) dst[x] = src[x];
                        } else {
                            for (int x = 0; x < ow; x++) dst[x] = src[x * sw];
                        }
                        dst += ow;
                    }
                }
            }
        }
    }
}

/* The adjoint (col2im): add every column entry back onto the input position it was read from.
 * xp must be zeroed by the caller; overlapping windows accumulate. */
EXPORT("pytrain_col2im")
void col2im(const float *cols, float *xp, int n, int c, int h, int w, int kh, int kw,
            int oh, int ow, int sh, int sw, int dh, int dw) {
    int l = oh * ow;
    int nl = n * l;
    for (int ci = 0; ci < c; ci++) {
        for (int i = 0; i < kh; i++) {
            for (int j = 0; j < kw; j++) {
                const float *src = cols + ((ci * kh + i) * kw + j) * nl;
                for (int ni = 0; ni < n; ni++) {
                    float *plane = xp + (ni * c + ci) * h * w;
                    for (int y = 0; y < oh; y++) {
                        float *dst = plane + (y * sh + i * dh) * w + j * dw;
                        if (sw == 1) {
                            for (int x = 0; x < ow; x++) dst[x] += src[x];
                        } else {
                            for (int x = 0; x < ow; x++) dst[x * sw] += src[x];
                        }
                        src += ow;
                    }
                }
            }
        }
    }
}

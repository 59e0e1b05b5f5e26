/* im2col for 2-D convolutions (linked into kernels.wasm by build.sh).
 *
 * numpy builds this matrix through a 6-D strided view, a generic element-by-element copy that
 * in Pyodide (no SIMD) cost more than the convolution's product itself. Here it is one run copy
 * per (channel, tap, output row). Layout as pytrain.ops.windows.conv_columns, batch innermost:
 *   cols[(c*KH + i)*KW + j][(y*OW + x)*N + n] = xt[c][y*SH + i*DH][x*SW + j*DW][n]
 * where xt is the padded input in the batch-last layout, C-contiguous (C, H, W, N). With a unit
 * column stride a whole output row of every sample, OW*N floats, is one contiguous run.
 */
#define EXPORT(name) __attribute__((export_name(name)))

EXPORT("pytrain_im2col")
void im2col(const float *xt, float *cols, int n, int c, int h, int w, int kh, int kw,
            int oh, int ow, int sh, int sw, int dh, int dw) {
    int run = ow * n;
    for (int ci = 0; ci < c; ci++) {
        for (int i = 0; i < kh; i++) {
            for (int j = 0; j < kw; j++) {
                float *dst = cols + ((ci * kh + i) * kw + j) * oh * run;
                for (int y = 0; y < oh; y++) {
                    const float *src = xt + ((ci * h + y * sh + i * dh) * w + j * dw) * n;
                    if (sw == 1) {
                        for (int e = 0; e < run; e++) dst[e] = src[e];
                    } else {
                        for (int x = 0; x < ow; x++)
                            for (int e = 0; e < n; e++) dst[x * n + e] = src[x * sw * n + e];
                    }
                    dst += run;
                }
            }
        }
    }
}

/* The adjoint (col2im): add every column entry back onto the input position it was read from.
 * xt must be zeroed by the caller; overlapping windows accumulate. */
EXPORT("pytrain_col2im")
void col2im(const float *cols, float *xt, int n, int c, int h, int w, int kh, int kw,
            int oh, int ow, int sh, int sw, int dh, int dw) {
    int run = ow * n;
    for (int ci = 0; ci < c; ci++) {
        for (int i = 0; i < kh; i++) {
            for (int j = 0; j < kw; j++) {
                const float *src = cols + ((ci * kh + i) * kw + j) * oh * run;
                for (int y = 0; y < oh; y++) {
                    float *dst = xt + ((ci * h + y * sh + i * dh) * w + j * dw) * n;
                    if (sw == 1) {
                        for (int e = 0; e < run; e++) dst[e] += src[e];
                    } else {
                        for (int x = 0; x < ow; x++)
                            for (int e = 0; e < n; e++) dst[x * sw * n + e] += src[x * n + e];
                    }
                    src += run;
                }
            }
        }
    }
}

/* LSTM inference steps (linked into kernels.wasm by build.sh): CRNN's recogniser steps a bidirectional
 * LSTM over 8 x 256 gate pre-activations, where numpy in Pyodide pays a dozen calls a step (a product
 * without BLAS, two exps for the sigmoid, two tanh, the state updates). Here every step of every
 * direction in one call: the recurrent product through the GEMM, then each gate in double rounded to
 * float32 (numpy's float32 exp/tanh round each operation: the results agree to float32 rounding).
 * ONNX's gate order i, o, f, c; activations the default Sigmoid, Tanh, Tanh; no peepholes or clip.
 */
#include "expmath.h"

#define EXPORT(name) __attribute__((export_name(name)))

void sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
           const float *B, int ldb, float beta, float *C, int ldc, void *work);

static inline float sigmoid_f(float v) {
    double x = v;
    if (x != x) return v;
    double e = exp_nonpositive(x < 0 ? x : -x); /* e^-|x| */
    return (float)(x < 0 ? e / (1.0 + e) : 1.0 / (1.0 + e));
}

static inline float tanh_f(float v) {
    double x = v, a = __builtin_fabs(x);
    if (x != x || a < 1e-8) return v;
    if (a >= 20.0) return x < 0 ? -1.0f : 1.0f;
    double e = exp_nonpositive(-2.0 * a); /* tanh|x| = (1 - e^-2|x|) / (1 + e^-2|x|) */
    double r = (1.0 - e) / (1.0 + e);
    return (float)(x < 0 ? -r : r);
}

/* xw (T, D, N, 4H): each direction's input projection plus both biases, in its processing order;
 * rt (D, H, 4H): R transposed; h0, c0 (D, N, H); ys (T, D, N, H) gets every step's h (processing
 * order); hT, cT (D, N, H) the last states; pre: scratch of N*4H floats. */
EXPORT("pytrain_lstm_steps")
void lstm_steps(const float *xw, const float *rt, const float *h0, const float *c0, float *ys, float *ht,
                float *ct, float *pre, int t_len, int d_len, int n, int hs, void *work) {
    int g4 = 4 * hs;
    for (int i = 0; i < d_len * n * hs; i++) ct[i] = c0[i];
    for (int t = 0; t < t_len; t++)
        for (int d = 0; d < d_len; d++) {
            const float *h = t ? ys + ((long)(t - 1) * d_len + d) * n * hs : h0 + (long)d * n * hs;
            const float *x = xw + ((long)t * d_len + d) * n * g4;
            float *c = ct + (long)d * n * hs, *hn = ys + ((long)t * d_len + d) * n * hs;
            sgemm(0, 0, n, g4, hs, 1.0f, h, hs, rt + (long)d * hs * g4, g4, 0.0f, pre, g4, work);
            for (int r = 0; r < n; r++) {
                const float *p = pre + (long)r * g4, *xr = x + (long)r * g4;
                float *cr = c + (long)r * hs, *hr = hn + (long)r * hs;
                for (int j = 0; j < hs; j++) {
                    float gi = sigmoid_f(p[j] + xr[j]);
                    float go = sigmoid_f(p[hs + j] + xr[hs + j]);
                    float gf = sigmoid_f(p[2 * hs + j] + xr[2 * hs + j]);
                    float gc = tanh_f(p[3 * hs + j] + xr[3 * hs + j]);
                    float cn = gf * cr[j];
                    cn = cn + gi * gc;
                    cr[j] = cn;
                    hr[j] = go * tanh_f(cn);
                }
            }
        }
    for (int d = 0; d < d_len; d++)
        for (int i = 0; i < n * hs; i++) ht[(long)d * n * hs + i] = ys[((long)(t_len - 1) * d_len + d) * n * hs + i];
}

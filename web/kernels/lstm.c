/* LSTM steps, inference's and LSTMGrad's (linked into kernels.wasm by build.sh): CRNN's recogniser steps a
 * bidirectional LSTM over 8 x 256 gate pre-activations, where numpy in Pyodide pays a dozen calls a step (a product
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

/* One step of one direction for every row: pre (n, 4H) holds h_prev R^T, x the step's input projection with
 * both biases; c_prev -> c (may be the same buffer), h gets the new h. With `gates` (n, 4H) and `hc` (n, H) the
 * step also keeps what the gradient reads: i, o, f, c~ after their activations and tanh(C). */
static void cell_rows(const float *pre, const float *x, const float *c_prev, float *c, float *h, float *gates,
                      float *hc, int n, int hs) {
    int g4 = 4 * hs;
    for (int r = 0; r < n; r++) {
        const float *p = pre + (long)r * g4, *xr = x + (long)r * g4, *cp = c_prev + (long)r * hs;
        float *cr = c + (long)r * hs, *hr = h + (long)r * hs;
        for (int j = 0; j < hs; j++) {
            float gi = sigmoid_f(p[j] + xr[j]);
            float go = sigmoid_f(p[hs + j] + xr[hs + j]);
            float gf = sigmoid_f(p[2 * hs + j] + xr[2 * hs + j]);
            float gc = tanh_f(p[3 * hs + j] + xr[3 * hs + j]);
            float cn = gf * cp[j];
            cn = cn + gi * gc;
            cr[j] = cn;
            float th = tanh_f(cn);
            hr[j] = go * th;
            if (gates) {
                float *gr = gates + (long)r * g4;
                gr[j] = gi; gr[hs + j] = go; gr[2 * hs + j] = gf; gr[3 * hs + j] = gc;
                hc[(long)r * hs + j] = th;
            }
        }
    }
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
            float *c = ct + (long)d * n * hs;
            sgemm(0, 0, n, g4, hs, 1.0f, h, hs, rt + (long)d * hs * g4, g4, 0.0f, pre, g4, work);
            cell_rows(pre, xw + ((long)t * d_len + d) * n * g4, c, c, ys + ((long)t * d_len + d) * n * hs, 0, 0,
                      n, hs);
        }
    for (int d = 0; d < d_len; d++)
        for (int i = 0; i < n * hs; i++) ht[(long)d * n * hs + i] = ys[((long)(t_len - 1) * d_len + d) * n * hs + i];
}

/* The walk back of one step (pytrain/ops/train/op_lstm_grad.py's _plain_backward, its float32 operations in
 * its order): gates (n, 4H) holds the step's i, o, f, c~ and gets the pre-activations' gradient in their
 * place; dh (read), dc (read, then the gradient reaching C_prev) are (n, H). */
static void cell_rows_back(float *gates, const float *hc, const float *c_prev, const float *dy, const float *dh,
                           float *dc, int n, int hs) {
    int g4 = 4 * hs;
    for (int r = 0; r < n; r++) {
        float *g = gates + (long)r * g4;
        long o = (long)r * hs;
        for (int j = 0; j < hs; j++) {
            float gi = g[j], go = g[hs + j], gf = g[2 * hs + j], gcc = g[3 * hs + j], th = hc[o + j];
            float gh = dy[o + j] + dh[o + j];
            float gc = th * th;
            gc = 1.0f - gc;
            gc = gc * go;
            gc = gc * gh;
            gc = gc + dc[o + j];
            float ui = gc * gcc, uo = gh * th, uf = gc * c_prev[o + j];
            float s = 1.0f - gi; s = s * gi; g[j] = s * ui;
            s = 1.0f - go; s = s * go; g[hs + j] = s * uo;
            s = 1.0f - gf; s = s * gf; g[2 * hs + j] = s * uf;
            s = gcc * gcc; s = 1.0f - s; s = s * gc; g[3 * hs + j] = s * gi;
            dc[o + j] = gc * gf;
        }
    }
}

/* LSTMGrad's recurrence (no peepholes, clip, input_forget or padding; Sigmoid/Tanh/Tanh): every step of every
 * direction forward keeping the gates, then back. Direction-major layouts: xw (D, T, N, 4H) as lstm_steps';
 * rt (D, H, 4H); h0, c0 (D, N, H); dy (D, T, N, H): dY in processing order; ys, cs, hc (D, T, N, H) get each
 * step's h, C and tanh(C); g (D, T, N, 4H) the gradient of each step's gate pre-activations; dh, dc (D, N, H):
 * dY_h and dY_c in, the gradients of initial_h and initial_c out; pre: scratch of N*4H floats. */
EXPORT("pytrain_lstm_grad_steps")
void lstm_grad_steps(const float *xw, const float *rt, const float *h0, const float *c0, const float *dy, float *ys,
                     float *cs, float *hc, float *g, float *dh, float *dc, float *pre, int t_len, int d_len, int n,
                     int hs, void *work) {
    int g4 = 4 * hs;
    long nh = (long)n * hs, ng = (long)n * g4;
    for (int d = 0; d < d_len; d++) {
        const float *rd = rt + (long)d * hs * g4;
        long sh = (long)d * t_len * nh, sg = (long)d * t_len * ng;
        for (int t = 0; t < t_len; t++) {
            const float *h = t ? ys + sh + (t - 1) * nh : h0 + d * nh;
            const float *cp = t ? cs + sh + (t - 1) * nh : c0 + d * nh;
            sgemm(0, 0, n, g4, hs, 1.0f, h, hs, rd, g4, 0.0f, pre, g4, work);
            cell_rows(pre, xw + sg + t * ng, cp, cs + sh + t * nh, ys + sh + t * nh, g + sg + t * ng,
                      hc + sh + t * nh, n, hs);
        }
        for (int t = t_len - 1; t >= 0; t--) {
            const float *cp = t ? cs + sh + (t - 1) * nh : c0 + d * nh;
            float *gt = g + sg + t * ng;
            cell_rows_back(gt, hc + sh + t * nh, cp, dy + sh + t * nh, dh + d * nh, dc + d * nh, n, hs);
            /* dh_prev = dpre R: (n, 4H) x (4H, H), R^T stored as rt (H, 4H) */
            sgemm(0, 1, n, hs, g4, 1.0f, gt, g4, rd, g4, 0.0f, dh + d * nh, hs, work);
        }
    }
}

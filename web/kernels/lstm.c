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

/* Two lanes of sigmoid_f and tanh_f (their operations in their order, exp_nonpositive_f64x2 giving
 * exp_nonpositive's bits: the same results), for lanes the scalar forms would not special-case: *_ok says
 * whether both lanes are such (no NaN; for the sigmoid e^-|x| in exp_nonpositive_f64x2's range, for tanh
 * 1e-8 <= |x| < 20). */
static inline int sigmoid2_ok(v128_t x) {
    return exp_nonpositive_range(wasm_f64x2_neg(wasm_f64x2_abs(x)));
}

static inline v128_t sigmoid2(v128_t x) {
    v128_t one = wasm_f64x2_splat(1.0);
    v128_t e = exp_nonpositive_f64x2(wasm_f64x2_neg(wasm_f64x2_abs(x)));
    v128_t num = wasm_v128_bitselect(e, one, wasm_f64x2_lt(x, wasm_f64x2_splat(0.0)));
    return wasm_f64x2_div(num, wasm_f64x2_add(one, e));
}

static inline int tanh2_ok(v128_t x) {
    v128_t a = wasm_f64x2_abs(x);
    return wasm_i64x2_all_true(wasm_v128_and(wasm_f64x2_ge(a, wasm_f64x2_splat(1e-8)),
                                             wasm_f64x2_lt(a, wasm_f64x2_splat(20.0))));
}

static inline v128_t tanh2(v128_t x) {
    v128_t one = wasm_f64x2_splat(1.0);
    v128_t e = exp_nonpositive_f64x2(wasm_f64x2_mul(wasm_f64x2_splat(-2.0), wasm_f64x2_abs(x)));
    v128_t r = wasm_f64x2_div(wasm_f64x2_sub(one, e), wasm_f64x2_add(one, e));
    return wasm_v128_bitselect(wasm_f64x2_neg(r), r, wasm_f64x2_lt(x, wasm_f64x2_splat(0.0)));
}

/* A gate's pre-activations at columns k, k + 1 of a row: h R^T + the input projection, in float32 as the
 * scalar path adds them, then widened. */
static inline v128_t pre2(const float *p, const float *xr, int k) {
    return wasm_f64x2_make((double)(p[k] + xr[k]), (double)(p[k + 1] + xr[k + 1]));
}

/* The cell at column j of a row from its four gates: C, h, and with `gr` (the row's gates) what the gradient
 * reads. */
static inline void cell_out(int j, int hs, float gi, float go, float gf, float gc, const float *cp, float *cr,
                            float *hr, float *gr, float *hcr) {
    float cn = gf * cp[j];
    cn = cn + gi * gc;
    cr[j] = cn;
    float th = tanh_f(cn);
    hr[j] = go * th;
    if (gr) {
        gr[j] = gi; gr[hs + j] = go; gr[2 * hs + j] = gf; gr[3 * hs + j] = gc;
        hcr[j] = th;
    }
}

/* One step of one direction for every row: pre (n, 4H) holds h_prev R^T, x the step's input projection with
 * both biases; c_prev -> c (may be the same buffer), h gets the new h. With `gates` (n, 4H) and `hc` (n, H) the
 * step also keeps what the gradient reads: i, o, f, c~ after their activations and tanh(C). The gates two
 * columns at a time in double lanes where no lane needs a special case, else one at a time: the same bits. */
static void cell_rows(const float *pre, const float *x, const float *c_prev, float *c, float *h, float *gates,
                      float *hc, int n, int hs) {
    int g4 = 4 * hs;
    for (int r = 0; r < n; r++) {
        const float *p = pre + (long)r * g4, *xr = x + (long)r * g4, *cp = c_prev + (long)r * hs;
        float *cr = c + (long)r * hs, *hr = h + (long)r * hs;
        float *gr = gates ? gates + (long)r * g4 : 0, *hcr = gates ? hc + (long)r * hs : 0;
        int j = 0;
        for (; j + 2 <= hs; j += 2) {
            v128_t vi = pre2(p, xr, j), vo = pre2(p, xr, hs + j), vf = pre2(p, xr, 2 * hs + j);
            v128_t vc = pre2(p, xr, 3 * hs + j);
            if (!(sigmoid2_ok(vi) && sigmoid2_ok(vo) && sigmoid2_ok(vf) && tanh2_ok(vc))) {
                for (int q = j; q < j + 2; q++)
                    cell_out(q, hs, sigmoid_f(p[q] + xr[q]), sigmoid_f(p[hs + q] + xr[hs + q]),
                             sigmoid_f(p[2 * hs + q] + xr[2 * hs + q]), tanh_f(p[3 * hs + q] + xr[3 * hs + q]), cp,
                             cr, hr, gr, hcr);
                continue;
            }
            vi = sigmoid2(vi); vo = sigmoid2(vo); vf = sigmoid2(vf); vc = tanh2(vc);
            float gi0 = (float)wasm_f64x2_extract_lane(vi, 0), gi1 = (float)wasm_f64x2_extract_lane(vi, 1);
            float go0 = (float)wasm_f64x2_extract_lane(vo, 0), go1 = (float)wasm_f64x2_extract_lane(vo, 1);
            float gf0 = (float)wasm_f64x2_extract_lane(vf, 0), gf1 = (float)wasm_f64x2_extract_lane(vf, 1);
            float gc0 = (float)wasm_f64x2_extract_lane(vc, 0), gc1 = (float)wasm_f64x2_extract_lane(vc, 1);
            float cn0 = gf0 * cp[j], cn1 = gf1 * cp[j + 1];
            cn0 = cn0 + gi0 * gc0;
            cn1 = cn1 + gi1 * gc1;
            cr[j] = cn0;
            cr[j + 1] = cn1;
            v128_t vn = wasm_f64x2_make((double)cn0, (double)cn1);
            float th0, th1;
            if (tanh2_ok(vn)) {
                vn = tanh2(vn);
                th0 = (float)wasm_f64x2_extract_lane(vn, 0);
                th1 = (float)wasm_f64x2_extract_lane(vn, 1);
            } else {
                th0 = tanh_f(cn0);
                th1 = tanh_f(cn1);
            }
            hr[j] = go0 * th0;
            hr[j + 1] = go1 * th1;
            if (gr) {
                gr[j] = gi0; gr[hs + j] = go0; gr[2 * hs + j] = gf0; gr[3 * hs + j] = gc0; hcr[j] = th0;
                gr[j + 1] = gi1; gr[hs + j + 1] = go1; gr[2 * hs + j + 1] = gf1; gr[3 * hs + j + 1] = gc1;
                hcr[j + 1] = th1;
            }
        }
        for (; j < hs; j++)
            cell_out(j, hs, sigmoid_f(p[j] + xr[j]), sigmoid_f(p[hs + j] + xr[hs + j]),
                     sigmoid_f(p[2 * hs + j] + xr[2 * hs + j]), tanh_f(p[3 * hs + j] + xr[3 * hs + j]), cp, cr, hr,
                     gr, hcr);
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

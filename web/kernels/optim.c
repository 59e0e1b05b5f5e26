/* The Adam/AdamW update in one pass over each parameter (linked into gemm.wasm by build.sh).
 *
 * numpy in Pyodide has no SIMD and makes a separate pass per operation (about ten for Adam),
 * which made the optimizer a third of a browser training step. This loop does the same float32
 * operations in the same order as pytrain.ops.train.op_optimizers.adam_step, so the results are
 * the same bit for bit:
 *   [decoupled] p *= 1 - lr*wd            [else] g = g + wd*p
 *   m = m*b1 + g*(1-b1);  v = v*b2 + (g*g)*(1-b2)
 *   p -= (m / (sqrt(v)*inv_sqrt_bc2 + eps)) * step_size
 * wasm has no fused multiply-add in the baseline, so clang cannot contract these.
 */
#define EXPORT(name) __attribute__((export_name(name)))

EXPORT("pytrain_adam")
void adam(int n, float *p, const float *g, float *m, float *v, float one_minus_b1, float b1,
          float one_minus_b2, float b2, float inv_sqrt_bc2, float eps, float step_size,
          float wd, int decoupled, float decay) {
    for (int i = 0; i < n; i++) {
        float gi = g[i];
        float pi = p[i];
        if (wd != 0.0f) {
            if (decoupled) pi = pi * decay;
            else gi = gi + wd * pi;
        }
        float mi = m[i] * b1 + gi * one_minus_b1;
        float vi = v[i] * b2 + (gi * gi) * one_minus_b2;
        m[i] = mi;
        v[i] = vi;
        float denom = __builtin_sqrtf(vi) * inv_sqrt_bc2 + eps;
        p[i] = pi - (mi / denom) * step_size;
    }
}

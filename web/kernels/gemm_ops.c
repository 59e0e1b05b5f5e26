/* ONNX Gemm (the product and its bias in one call) and stacks of products (attention's per-head
 * MatMul), on top of gemm.c's sgemm (linked into kernels.wasm by build.sh). */
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

void sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
           const float *B, int ldb, float beta, float *C, int ldc, void *work);

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

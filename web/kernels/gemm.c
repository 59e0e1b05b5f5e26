/*
 * Single-precision GEMM for WebAssembly SIMD (wasm32 + simd128), no libc.
 *
 *   C[M,N] = alpha * op(A) @ op(B) + beta * C          (row-major float32)
 *   op(A) = A (M x K, row stride lda)  or, when transA, A^T with A stored K x M
 *   op(B) = B (K x N, row stride ldb)  or, when transB, B^T with B stored N x K
 *
 * The module imports its memory (Pyodide's heap in the browser), so every
 * pointer is a byte offset into that memory and the kernel works in place on
 * numpy's buffers.  Because the memory belongs to someone else the module must
 * own no static data and never touch the C shadow stack: all scratch space
 * comes from the caller's `work` buffer (pytrain_sgemm_work_bytes() bytes), and every
 * temporary lives in wasm locals (build.sh checks that __stack_pointer is
 * never used).
 *
 * Structure (Goto/BLIS style): op(B) is packed KC x NC at a time into NR-wide
 * column panels, op(A) MC x KC at a time into MR-tall row panels; the MR x NR
 * micro-kernel then streams both panels with unit stride while the MR x NR
 * tile of C stays in SIMD registers.  Packing zero-pads the ragged edges, so
 * the micro-kernel has a single shape and only its write-back cares about
 * edges.  Transposition is absorbed by packing, which is why one kernel
 * serves NN, NT, TN and TT.
 */
#include <wasm_simd128.h>

/* Tile shape and blocking are -D knobs; 4x8 without k-unroll measured fastest in
 * V8 (larger tiles or unrolls spill: bench/README.md has the numbers). */
#ifndef MR
#define MR 4 /* rows of the register tile */
#endif
#ifndef NV
#define NV 2 /* f32x4 vectors per row of the register tile */
#endif
#ifndef KU
#define KU 1 /* unroll of the micro-kernel's k-loop */
#endif
#define NR (4 * NV) /* columns of the register tile */
#ifndef KC
#define KC 256 /* depth of a packed block: A panel (MR x KC) stays in L1 */
#endif
#ifndef MC
#define MC ((128 / MR) * MR) /* rows of a packed A block (multiple of MR) */
#endif
#ifndef NC
#define NC ((512 / NR) * NR) /* columns of a packed B block (multiple of NR), ~512 KiB */
#endif

#define MC_PAD (((MC + MR - 1) / MR) * MR)
#define WORK_FLOATS (MC_PAD * KC + KC * NC + MR * NR + 4)

#define EXPORT(name) __attribute__((export_name(name)))

/* c + a * b. kernels-fma*.wasm (build.sh with -DPYTRAIN_FMA) make it one relaxed
 * multiply-add, which V8 compiles to one fused instruction (vfmadd on x86 with FMA3): twice the
 * multiply-adds an instruction, one rounding instead of two. Every thread of a page runs the same
 * build, so a split product and an unsplit one still give the same bits. Relaxed SIMD is this file's
 * feature alone (the pragma, not -mrelaxed-simd for every file): elsewhere clang 22 turns a clip by
 * f32x4.min/max into f32x4.relaxed_min, whose NaN result the engine may choose. */
#ifdef PYTRAIN_FMA
#pragma clang attribute push (__attribute__((target("relaxed-simd"))), apply_to = function)
#define MADD(a, b, c) wasm_f32x4_relaxed_madd(a, b, c)
#else
#define MADD(a, b, c) wasm_f32x4_add(c, wasm_f32x4_mul(a, b))
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }

/* Bytes of scratch the caller must pass as `work` (any alignment is fine). */
EXPORT("pytrain_sgemm_work_bytes") int sgemm_work_bytes(void) { return WORK_FLOATS * 4; }

/* C = beta * C, with beta == 0 writing exact zeros (so NaN/Inf in C vanish, as BLAS does). */
static void scale_c(int m, int n, float beta, float *c, int ldc) {
    if (beta == 1.0f) return;
    v128_t vb = wasm_f32x4_splat(beta);
    v128_t zero = wasm_f32x4_splat(0.0f);
    for (int i = 0; i < m; i++) {
        float *row = c + (long)i * ldc;
        int j = 0;
        if (beta == 0.0f) {
            for (; j + 4 <= n; j += 4) wasm_v128_store(row + j, zero);
            for (; j < n; j++) row[j] = 0.0f;
        } else {
            for (; j + 4 <= n; j += 4)
                wasm_v128_store(row + j, wasm_f32x4_mul(vb, wasm_v128_load(row + j)));
            for (; j < n; j++) row[j] *= beta;
        }
    }
}

/*
 * Pack a block whose panel dimension is contiguous in memory: element
 * (p, k) of the block is src[k * ld + p], p < rows (< w), k < kc.
 * Output: for each k, w consecutive floats (zero beyond `rows`).
 * Used for B when not transposed and for A when transposed.
 */
static void pack_contig(int rows, int kc, const float *src, int ld, int w, float *dst) {
    if (rows == w && w % 4 == 0) {
        for (int k = 0; k < kc; k++) {
            const float *s = src + (long)k * ld;
            for (int p = 0; p < w; p += 4) wasm_v128_store(dst + p, wasm_v128_load(s + p));
            dst += w;
        }
    } else {
        for (int k = 0; k < kc; k++) {
            const float *s = src + (long)k * ld;
            int p = 0;
            for (; p < rows; p++) dst[p] = s[p];
            for (; p < w; p++) dst[p] = 0.0f;
            dst += w;
        }
    }
}

/* 4x4 transpose of rows r0..r3 into columns, written to d, d+w, d+2w, d+3w. */
#define TRANSPOSE4_STORE(r0, r1, r2, r3, d, w)                                  \
    do {                                                                        \
        v128_t t0 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5);                     \
        v128_t t1 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5);                     \
        v128_t t2 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7);                     \
        v128_t t3 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);                     \
        wasm_v128_store((d), wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5));           \
        wasm_v128_store((d) + (w), wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7));     \
        wasm_v128_store((d) + 2 * (w), wasm_i32x4_shuffle(t2, t3, 0, 1, 4, 5)); \
        wasm_v128_store((d) + 3 * (w), wasm_i32x4_shuffle(t2, t3, 2, 3, 6, 7)); \
    } while (0)

/*
 * Pack a block whose depth dimension is contiguous: element (p, k) is
 * src[p * ld + k].  Same output layout as pack_contig; the SIMD path reads
 * four k at a time from each row and transposes 4x4 tiles in registers.
 * Used for A when not transposed and for B when transposed.
 */
static void pack_strided(int rows, int kc, const float *src, int ld, int w, float *dst) {
    int full = rows & ~3; /* rows handled by 4x4 register transposes */
    int k4 = kc & ~3;
    for (int k = 0; k < k4; k += 4) {
        for (int p = 0; p < full; p += 4) {
            const float *s = src + (long)p * ld + k;
            v128_t r0 = wasm_v128_load(s);
            v128_t r1 = wasm_v128_load(s + ld);
            v128_t r2 = wasm_v128_load(s + 2 * ld);
            v128_t r3 = wasm_v128_load(s + 3 * ld);
            TRANSPOSE4_STORE(r0, r1, r2, r3, dst + k * w + p, w);
        }
    }
    for (int k = 0; k < kc; k++) {
        float *d = dst + k * w;
        for (int p = k < k4 ? full : 0; p < rows; p++) d[p] = src[(long)p * ld + k];
        for (int p = rows; p < w; p++) d[p] = 0.0f;
    }
}

/* Pack rows [0, mc) x depth [0, kc) of op(A) (already offset) into MR-tall panels. */
static void pack_a(int mc, int kc, const float *a, int lda, int trans, float *dst) {
    for (int i = 0; i < mc; i += MR) {
        int rows = imin(MR, mc - i);
        if (trans)
            pack_contig(rows, kc, a + i, lda, MR, dst);
        else
            pack_strided(rows, kc, a + (long)i * lda, lda, MR, dst);
        dst += MR * kc;
    }
}

/* Pack depth [0, kc) x columns [0, nc) of op(B) (already offset) into NR-wide panels. */
static void pack_b(int kc, int nc, const float *b, int ldb, int trans, float *dst) {
    for (int j = 0; j < nc; j += NR) {
        int cols = imin(NR, nc - j);
        if (trans)
            pack_strided(cols, kc, b + (long)j * ldb, ldb, NR, dst);
        else
            pack_contig(cols, kc, b + j, ldb, NR, dst);
        dst += NR * kc;
    }
}

/*
 * Register tile: MR rows x NV f32x4 vectors.  The whole tile is spelled out
 * with X-macros so clang keeps every accumulator in a wasm local (an array
 * would risk a trip through the shadow stack).
 */
#if NV == 2
#define VECS(Y, r) Y(r, 0) Y(r, 1)
#elif NV == 3
#define VECS(Y, r) Y(r, 0) Y(r, 1) Y(r, 2)
#elif NV == 4
#define VECS(Y, r) Y(r, 0) Y(r, 1) Y(r, 2) Y(r, 3)
#else
#error "NV must be 2, 3 or 4"
#endif

#if MR == 2
#define ROWS(X) X(0) X(1)
#elif MR == 3
#define ROWS(X) X(0) X(1) X(2)
#elif MR == 4
#define ROWS(X) X(0) X(1) X(2) X(3)
#elif MR == 5
#define ROWS(X) X(0) X(1) X(2) X(3) X(4)
#elif MR == 6
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#elif MR == 8
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#else
#error "MR must be 2..6 or 8"
#endif

#define ACC_DECL1(r, v) v128_t c##r##_##v = wasm_f32x4_splat(0.0f);
#define ACC_DECL(r) VECS(ACC_DECL1, r)
#define B_LOAD1(o, v) v128_t b##v = wasm_v128_load(b + (o) * NR + 4 * (v));
#define ACC_FMA1(r, v) c##r##_##v = MADD(av, b##v, c##r##_##v);
#define ACC_STEP(r)                                             \
    {                                                           \
        v128_t av = wasm_v128_load32_splat(a + k_off * MR + r); \
        VECS(ACC_FMA1, r)                                       \
    }
#define ACC_STORE1(r, v)                                                   \
    {                                                                      \
        float *cp = c + (long)(r) * ldc + 4 * (v);                         \
        wasm_v128_store(cp, wasm_f32x4_add(wasm_v128_load(cp), wasm_f32x4_mul(va, c##r##_##v))); \
    }
#define ACC_STORE(r) VECS(ACC_STORE1, r)

#define K_STEP(o)                       \
    {                                   \
        const int k_off = (o);          \
        VECS(B_LOAD1, o)                \
        ROWS(ACC_STEP)                  \
    }

/*
 * c[0:MR, 0:NR] += alpha * (packed A panel) @ (packed B panel), c with row
 * stride ldc.  The k-loop is unrolled by KU so the loop overhead is amortised.
 */
static void micro_kernel(int kc, const float *a, const float *b, float *c, int ldc, float alpha) {
    ROWS(ACC_DECL)
    int k = 0;
#if KU == 4
    for (; k + 4 <= kc; k += 4) {
        K_STEP(0) K_STEP(1) K_STEP(2) K_STEP(3)
        a += 4 * MR;
        b += 4 * NR;
    }
#elif KU == 2
    for (; k + 2 <= kc; k += 2) {
        K_STEP(0) K_STEP(1)
        a += 2 * MR;
        b += 2 * NR;
    }
#endif
    for (; k < kc; k++) {
        K_STEP(0)
        a += MR;
        b += NR;
    }
    v128_t va = wasm_f32x4_splat(alpha);
    ROWS(ACC_STORE)
}

/* Add an m x n corner of the scratch tile (row stride NR) into C. */
static void add_edge(int m, int n, const float *tile, float *c, int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(long)i * ldc + j] += tile[i * NR + j];
}

/* Sum of the four lanes of a f32x4. */
static inline float hsum(v128_t v) {
    v = wasm_f32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
    return wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1);
}

/* C[i][j] += alpha * dot(A row i, B row j) over k in [0, kc), for one row of A and `nb` (1..4)
 * rows of B, both contiguous along k.  Four independent accumulators per row of B. */
static void dot_rows(int nb, int kc, const float *a, const float *b, int ldb, float *c, float alpha) {
    const float *b0 = b, *b1 = b + (nb > 1 ? ldb : 0), *b2 = b + (nb > 2 ? 2 * ldb : 0),
                *b3 = b + (nb > 3 ? 3 * ldb : 0);
    v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0, s2 = s0, s3 = s0;
    int k = 0;
    for (; k + 4 <= kc; k += 4) {
        v128_t av = wasm_v128_load(a + k);
        s0 = MADD(av, wasm_v128_load(b0 + k), s0);
        s1 = MADD(av, wasm_v128_load(b1 + k), s1);
        s2 = MADD(av, wasm_v128_load(b2 + k), s2);
        s3 = MADD(av, wasm_v128_load(b3 + k), s3);
    }
    float t0 = hsum(s0), t1 = hsum(s1), t2 = hsum(s2), t3 = hsum(s3);
    for (; k < kc; k++) {
        t0 += a[k] * b0[k];
        t1 += a[k] * b1[k];
        t2 += a[k] * b2[k];
        t3 += a[k] * b3[k];
    }
    c[0] += alpha * t0;
    if (nb > 1) c[1] += alpha * t1;
    if (nb > 2) c[2] += alpha * t2;
    if (nb > 3) c[3] += alpha * t3;
}

/* Depth of a k-chunk in the dot-product path: a chunk of every row of A and B stays in cache. */
#define DOT_KC 2048

/*
 * A @ B^T with A (M x K) and B (N x K) both row-major: every C element is a dot product of
 * two contiguous rows.  For a small C and a long K (a convolution's weight gradient: 6 x 25
 * outputs over 36864 positions) this beats packing, which would copy both operands whole to
 * fill a mostly padded register tile.
 */
static void sgemm_dot(int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float *C, int ldc) {
    for (int pc = 0; pc < K; pc += DOT_KC) {
        int kc = imin(DOT_KC, K - pc);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j += 4)
                dot_rows(imin(4, N - j), kc, A + (long)i * lda + pc, B + (long)j * ldb + pc, ldb,
                         C + (long)i * ldc + j, alpha);
    }
}

/* The dot-product path pays off when C is small and K long. */
static inline int use_dot(int transA, int transB, int M, int N, int K) {
    return !transA && transB && M * N <= 4096 && K >= 4 * (M + N);
}

/*
 * The entry point.  Pointers are byte offsets into the imported memory;
 * leading dimensions are in elements; trans flags are 0 or 1.
 */
EXPORT("pytrain_sgemm")
void sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
           const float *B, int ldb, float beta, float *C, int ldc, void *work) {
    if (M <= 0 || N <= 0) return;
    scale_c(M, N, beta, C, ldc);
    if (K <= 0 || alpha == 0.0f) return;
    if (use_dot(transA, transB, M, N, K)) {
        sgemm_dot(M, N, K, alpha, A, lda, B, ldb, C, ldc);
        return;
    }

    /* Carve the scratch buffer: 16-byte aligned packed A, packed B, edge tile. */
    float *ws = (float *)(((unsigned long)work + 15) & ~15ul);
    float *pa = ws;
    float *pb = pa + MC_PAD * KC;
    float *tile = pb + KC * NC;

    for (int jc = 0; jc < N; jc += NC) {
        int nc = imin(NC, N - jc);
        for (int pc = 0; pc < K; pc += KC) {
            int kc = imin(KC, K - pc);
            const float *bsrc = transB ? B + (long)jc * ldb + pc : B + (long)pc * ldb + jc;
            pack_b(kc, nc, bsrc, ldb, transB, pb);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = imin(MC, M - ic);
                const float *asrc = transA ? A + (long)pc * lda + ic : A + (long)ic * lda + pc;
                pack_a(mc, kc, asrc, lda, transA, pa);
                for (int jr = 0; jr < nc; jr += NR) {
                    int n = imin(NR, nc - jr);
                    const float *bp = pb + jr * kc;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int m = imin(MR, mc - ir);
                        const float *ap = pa + ir * kc;
                        float *cp = C + (long)(ic + ir) * ldc + jc + jr;
                        if (m == MR && n == NR) {
                            micro_kernel(kc, ap, bp, cp, ldc, alpha);
                        } else {
                            for (int t = 0; t < MR * NR; t++) tile[t] = 0.0f;
                            micro_kernel(kc, ap, bp, tile, NR, alpha);
                            add_edge(m, n, tile, cp, ldc);
                        }
                    }
                }
            }
        }
    }
}

#ifdef PYTRAIN_FMA
#pragma clang attribute pop
#endif

/* e^x in float32, four lanes at a time, for the kernels whose results are float32 to a few ulps (softmax.c's
 * Softmax and language-model loss): Cephes' expf (x = k ln2 + r, |r| <= ln2/2, a degree-7 polynomial, relative
 * error under 2 float32 ulps): on GPT-2's (512, 1000) logits the loss 3.6x and its gradient 5x as fast as with
 * expmath.h's double-precision series on two lanes, where those kernels spent most of their time (Node 20,
 * fastest of 40 calls). */
#ifndef PYTRAIN_EXPF32_H
#define PYTRAIN_EXPF32_H

#include <wasm_simd128.h>

/* e^x for x <= 0 (a row shifted by its maximum, a log-probability); x < -87.3 gives 0 (float32's
 * subnormal results flushed), NaN lanes give NaN. */
static inline v128_t exp_nonpositive_f32x4(v128_t x) {
    const v128_t lo = wasm_f32x4_splat(-87.33654f);
    v128_t under = wasm_f32x4_lt(x, lo);
    v128_t xc = wasm_f32x4_pmax(x, lo);   /* x < lo ? lo : x, so NaN lanes stay NaN */
    v128_t k = wasm_f32x4_nearest(wasm_f32x4_mul(xc, wasm_f32x4_splat(1.44269504088896341f)));
    v128_t r = wasm_f32x4_sub(xc, wasm_f32x4_mul(k, wasm_f32x4_splat(0.693359375f)));
    r = wasm_f32x4_sub(r, wasm_f32x4_mul(k, wasm_f32x4_splat(-2.12194440e-4f)));
#define EXPF32_STEP(c) p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(c))
    v128_t p = wasm_f32x4_splat(1.9875691500e-4f);
    EXPF32_STEP(1.3981999507e-3f); EXPF32_STEP(8.3334519073e-3f); EXPF32_STEP(4.1665795894e-2f);
    EXPF32_STEP(1.6666665459e-1f); EXPF32_STEP(5.0000001201e-1f);
#undef EXPF32_STEP
    p = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_mul(p, r), r), r), wasm_f32x4_splat(1.0f));
    /* 2^k in the exponent bits: k >= -126 here, a normal number */
    v128_t scale = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(k), wasm_i32x4_splat(127)), 23);
    return wasm_v128_andnot(wasm_f32x4_mul(p, scale), under);
}

/* The same e^x for one float (a row's tail: the lane computation, so the same bits). */
static inline float exp_nonpositive_f32(float x) {
    return wasm_f32x4_extract_lane(exp_nonpositive_f32x4(wasm_f32x4_splat(x)), 0);
}

#endif

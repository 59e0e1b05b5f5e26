/* Softmax over the last axis (linked into kernels.wasm by build.sh): one call where numpy in Pyodide
 * makes five passes with temporaries. The row sums are accumulated in double precision, with
 * expmath.h's exp (there is no libm): the results equal the numpy kernel to float32 rounding.
 */
#include "expmath.h"

#define EXPORT(name) __attribute__((export_name(name)))

/* Softmax over rows of n float32: e = exp(x - max), e / sum(e) (sum in double). Returns 1 at
 * the first row holding a NaN or an infinity (rows before it are written): the caller then
 * leaves the whole node to numpy, whose NaN/inf semantics it does not copy. */
EXPORT("pytrain_softmax")
int softmax(const float *x, float *y, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * n;
        float *yr = y + (long)r * n;
        float mx = xr[0];
        for (int j = 0; j < n; j++) {
            float v = xr[j];
            if (v - v != 0.0f) return 1; /* NaN or +-inf */
            mx = v > mx ? v : mx;
        }
        double s = 0.0;
        for (int j = 0; j < n; j++) {
            float e = (float)exp_nonpositive((double)(xr[j] - mx));
            yr[j] = e;
            s += e;
        }
        float sf = (float)s;
        for (int j = 0; j < n; j++) yr[j] = yr[j] / sf;
    }
    return 0;
}

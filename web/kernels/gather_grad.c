/* Gather's gradient along axis 0, an embedding's backward (linked into kernels.wasm by build.sh): one
 * call where the numpy kernel makes a float64 bincount per column block. */
#define EXPORT(name) __attribute__((export_name(name)))

/* GatherGrad along axis 0: dx (rows x inner, zero on entry) gets the sum of dy's rows per index,
 * summed in double in index order (acc: rows x inner doubles, seen: rows ints, zero on entry),
 * as the numpy kernel's float64 bincount does. Returns 1 (having written nothing to dx) when an
 * index is outside [-rows, rows): the numpy kernel then reports it. */
EXPORT("pytrain_gather_grad")
int gather_grad(const float *dy, const long long *idx, int count, float *dx, double *acc, int *seen, int rows,
                int inner) {
    for (int i = 0; i < count; i++)
        if (idx[i] < -(long long)rows || idx[i] >= rows) return 1;
    for (int i = 0; i < count; i++) {
        int r = (int)(idx[i] < 0 ? idx[i] + rows : idx[i]);
        double *ar = acc + (long)r * inner;
        const float *g = dy + (long)i * inner;
        if (!seen[r]) { /* from 0.0, as bincount starts its sums (-0.0 + 0.0 is +0.0) */
            seen[r] = 1;
            for (int j = 0; j < inner; j++) ar[j] = 0.0;
        }
        for (int j = 0; j < inner; j++) ar[j] += g[j];
    }
    for (int r = 0; r < rows; r++) {
        if (!seen[r]) continue;
        const double *ar = acc + (long)r * inner;
        float *o = dx + (long)r * inner;
        for (int j = 0; j < inner; j++) o[j] = (float)ar[j];
    }
    return 0;
}

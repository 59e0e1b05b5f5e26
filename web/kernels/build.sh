#!/bin/sh
# Build kernels.wasm from gemm.c (+ gemm_ops.c, optim.c, im2col.c, pool.c, conv.c, batchnorm.c, elementwise.c,
# exp_erf.c, transpose.c, layernorm.c, softmax.c, softmax_ce.c, gather_grad.c; expmath.h is shared)
# with clang + lld (no emscripten, no libc).
# Usage: build.sh [out.wasm] [extra clang flags...]   (default out: kernels.wasm next to this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/kernels.wasm}
[ $# -gt 0 ] && shift
CC=${CC:-clang}
# --import-memory: the kernel runs inside the host's memory (Pyodide's heap).
# Exports come from the export_name attributes in the .c files.
# -fno-builtin: keep clang from turning loops into memset/memcpy calls (there is no libc).
# stack-size=0 + the check below: nothing may live on the shadow stack, which
# would otherwise sit at a fixed address inside the host's memory.
# Second build, $shared (kernels-shared.wasm next to $out): the same code against a shared
# memory (atomics + bulk-memory, a 1 GiB maximum), for the helper threads of kernels.js that
# splits big products across threads when the page is cross-origin isolated.
shared=${out%.wasm}-shared.wasm
build() {
    target=$1; shift
    $CC --target=wasm32 -msimd128 -O3 -ffreestanding -fno-builtin -nostdlib \
        -Wl,--no-entry -Wl,--import-memory -Wl,-z,stack-size=0 -Wl,--strip-all \
        "$@" -o "$target" "$here/gemm.c" "$here/gemm_ops.c" "$here/optim.c" "$here/im2col.c" "$here/pool.c" \
        "$here/conv.c" "$here/batchnorm.c" "$here/elementwise.c" "$here/exp_erf.c" "$here/transpose.c" \
        "$here/layernorm.c" "$here/softmax.c" "$here/softmax_ce.c" "$here/gather_grad.c"
}
build "$out" "$@"
build "$shared" -matomics -mbulk-memory -Wl,--shared-memory -Wl,--max-memory=1073741824 "$@"
for out in "$out" "$shared"; do
if command -v llvm-objdump >/dev/null 2>&1; then
    # global 0 is __stack_pointer; any access means a spill into host memory.
    if llvm-objdump -d "$out" | grep -Eq 'global\.(get|set)'; then
        echo "build.sh: $out uses the shadow stack (global.get/set); refusing" >&2
        rm -f "$out"; exit 1
    fi
    # a data segment (a constant table, a static) would be written into the host's heap
    if llvm-objdump -h "$out" | grep -Eq ' DATA '; then
        echo "build.sh: $out has a data segment; refusing" >&2
        rm -f "$out"; exit 1
    fi
fi
echo "built $out ($(wc -c < "$out") bytes)"
done

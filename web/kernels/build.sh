#!/bin/sh
# Build kernels.wasm from gemm.c (+ gemm_ops.c, optim.c, im2col.c, pool.c, conv.c, batchnorm.c, elementwise.c,
# exp_erf.c, transpose.c, layernorm.c, softmax.c, softmax_ce.c, gather_grad.c, lstm.c, depthwise.c, gelu.c;
# expmath.h, erf64.h and expf32.h are shared)
# with clang + lld (no emscripten, no libc).
# Usage: build.sh [out.wasm] [extra clang flags...]   (default out: kernels.wasm next to this script)
# Third and fourth builds, kernels-fma.wasm and kernels-fma-shared.wasm: the same two with -DPYTRAIN_FMA
# (gemm.c's multiply-adds as f32x4.relaxed_madd; relaxed SIMD enabled in gemm.c alone, by a pragma), for
# browsers with relaxed SIMD (kernels.js picks them by feature detection). Debian's clang 14 emits the
# proposal's pre-standard relaxed opcodes, so these need a newer clang: $FMA_CC, by default the clang 22
# of PyPI's `ziglang` (a dev-time tool: the built files are checked in), which names its target
# wasm32-freestanding ($FMA_TARGET). Without it the FMA files are left as they are (FMA=0 skips them on
# purpose).
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
    $CC --target=$TARGET -msimd128 -O3 -ffreestanding -fno-builtin -nostdlib \
        -Wl,--no-entry -Wl,--import-memory -Wl,-z,stack-size=0 -Wl,--strip-all \
        "$@" -o "$target" "$here/gemm.c" "$here/gemm_ops.c" "$here/optim.c" "$here/im2col.c" "$here/pool.c" \
        "$here/conv.c" "$here/batchnorm.c" "$here/elementwise.c" "$here/exp_erf.c" "$here/transpose.c" \
        "$here/layernorm.c" "$here/softmax.c" "$here/softmax_ce.c" "$here/gather_grad.c" "$here/lstm.c" \
        "$here/depthwise.c" "$here/gelu.c"
}
TARGET=wasm32
build "$out" "$@"
build "$shared" -matomics -mbulk-memory -Wl,--shared-memory -Wl,--max-memory=1073741824 "$@"
built="$out $shared"
fma=${out%.wasm}-fma.wasm
fma_shared=${out%.wasm}-fma-shared.wasm
if [ "${FMA:-1}" != 0 ]; then
    if [ -z "${FMA_CC:-}" ] && python3 -c "import ziglang" 2>/dev/null; then
        FMA_CC="python3 -m ziglang cc"; FMA_TARGET=${FMA_TARGET:-wasm32-freestanding}
    fi
    if [ -n "${FMA_CC:-}" ]; then
        CC=$FMA_CC; TARGET=${FMA_TARGET:-wasm32}
        # -mcpu=mvp: the features of the clang 14 builds (a newer clang's default adds bulk memory and more)
        build "$fma" -mcpu=mvp -DPYTRAIN_FMA "$@"
        build "$fma_shared" -mcpu=mvp -DPYTRAIN_FMA -matomics -mbulk-memory -Wl,--shared-memory \
            -Wl,--max-memory=1073741824 "$@"
        built="$built $fma $fma_shared"
    else
        echo "build.sh: no clang with standard relaxed SIMD (FMA_CC, or pip install ziglang): $fma not rebuilt" >&2
    fi
fi
for out in $built; do
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

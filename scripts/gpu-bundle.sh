#!/bin/sh
# Builds everything here and gathers what a GPU machine needs to run it into
# one folder (default .gpubin, git-ignored): the binaries, flat, and in lib/
# the shared libraries they need that a bare CUDA image may lack (Criterion
# and its dependencies). Carry the folder and run scripts/gpu.sh there with
# GEMMD_BIN pointing at it.
set -eu
dest=${1:-.gpubin}
# A build of its own for the H100 alone (sm_90a, no sm_80 or PTX): the
# carried tree is capped at 64 MiB and the kernels are most of each binary.
b=build-sm90a
bdir=$b
want="$b/gemmd $b/gemmd-fi $b/gemmctl $b/gemmbench $b/demo_client $b/libgemmd.so
      $b/tests/test_gpu_kernels $b/tests/test_gpu_e2e $b/soak $b/gemmbench-latency"
# shellcheck disable=SC2086
make -j"$(nproc)" BUILD=$b NVCC_GENCODE="-gencode=arch=compute_90a,code=sm_90a" $want >/dev/null
mkdir -p "$dest/lib"
for b in $want; do
        [ -e "$b" ] && cp -f "$b" "$dest/"
done
# A client asking for device memory in a loop, and the wrapper that runs it
# beside gemmbench under service-ab.sh (bench/results/devmem-share.txt).
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
cc -O2 -Iinclude -I"$cuda/include" -o "$dest/register-loop" scripts/register-loop.c "$bdir/libgemmd.a" \
        "$(cc -print-file-name=libprotobuf-c.a)" -L"$cuda/lib64" -lcudart_static -lstdc++ -lpthread -ldl -lrt -lm
cp -f scripts/with-register-loop.sh "$dest/"
# Debug info is most of their size and the carried tree is capped.
strip --strip-debug "$dest"/* 2>/dev/null || true
# Everything ldd resolves except the C library itself, which the GPU image
# has in a newer version.
for b in "$dest"/test_gpu_e2e; do
        [ -e "$b" ] || continue
        ldd "$b" | awk '/=> \// {print $3}' | while read -r lib; do
                case "$(basename "$lib")" in
                libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;
                *) cp -fL "$lib" "$dest/lib/" ;;
                esac
        done
done
du -sh "$dest"

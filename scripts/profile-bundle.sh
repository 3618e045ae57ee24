#!/bin/sh
# Gathers what a GPU machine needs to profile the daemon's threads by
# sampling, into one folder (default .gpubin-prof, git-ignored): a gemmd
# built for sm_90a with frame pointers (so that perf's call chains pass
# through the daemon's own functions), gemmbench and gemmctl, and this
# machine's perf with the shared libraries it needs that a bare CUDA image
# may lack (everything but the C library's own). Carry the folder and run
# scripts/profile-threads.sh there.
set -eu
dest=${1:-.gpubin-prof}
b=build-fp
make -j"$(nproc)" BUILD=$b EXTRA_CFLAGS=-fno-omit-frame-pointer \
        NVCC_GENCODE="-gencode=arch=compute_90a,code=sm_90a" $b/gemmd $b/gemmbench $b/gemmctl >/dev/null
mkdir -p "$dest/perf/lib"
cp -f $b/gemmd $b/gemmbench $b/gemmctl "$dest/"
strip --strip-debug "$dest/gemmd" "$dest/gemmbench" "$dest/gemmctl"
perf=$(command -v perf) || { echo "profile-bundle: no perf here (Debian: linux-perf)" >&2; exit 1; }
cp -fL "$perf" "$dest/perf/perf"
ldd "$perf" | awk '/=> \// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
        *) cp -fL "$lib" "$dest/perf/lib/" ;;
        esac
done
cp -f scripts/perf-threads.py "$dest/"
du -sh "$dest"

#!/bin/sh
# Builds gemmd's Debian package with dpkg-deb (no debhelper) from a tree that
# `make install PREFIX=/usr DESTDIR=STAGE` filled, adding the maintainer
# scripts of deploy/deb/, the copyright file and the deploy/ examples.
#   scripts/build-deb.sh STAGE VERSION OUTDIR   (make deb runs it)
# Depends: is found from the binaries' ELF NEEDED entries: the package that
# ships each library (dpkg -S), with libc6 at the newest GLIBC_ symbol
# version used. libuv, protobuf-c and the CUDA runtime are linked statically.
set -eu

stage=$1
version=$2
outdir=$3
top=$(cd "$(dirname "$0")/.." && pwd)

[ -x "$stage/usr/sbin/gemmd" ] || { echo "build-deb: $stage has no usr/sbin/gemmd" >&2; exit 1; }
arch=$(dpkg --print-architecture)
elfs="$stage/usr/sbin/gemmd $stage/usr/bin/gemmctl $(readlink -f "$stage/usr/lib/libgemmd.so")"

doc=$stage/usr/share/doc/gemmd
install -d "$doc/examples"
install -m 0644 "$top/LICENSE" "$doc/copyright"
install -m 0644 "$top/deploy/systemd/metrics-tcp.conf" "$top/deploy/k8s/daemonset.yaml" "$doc/examples/"

deps=""
glibc=$(objdump -T $elfs | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
for lib in $(objdump -p $elfs | awk '$1 == "NEEDED" { print $2 }' | sort -u); do
        case $lib in
        libgemmd.so*) continue ;;
        esac
        path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
        [ -n "$path" ] || { echo "build-deb: $lib not found" >&2; exit 1; }
        pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path" | head -n 1)
        pkg=${pkg%%:*}
        case $pkg in
        libc6) continue ;;
        esac
        case " $deps " in
        *" $pkg "*) ;;
        *) deps="$deps $pkg" ;;
        esac
done
depends="libc6 (>= $glibc)"
for p in $deps; do
        depends="$depends, $p"
done

install -d -m 0755 "$stage/DEBIAN"
install -m 0755 "$top/deploy/deb/postinst" "$top/deploy/deb/prerm" "$top/deploy/deb/postrm" "$stage/DEBIAN/"
install -m 0644 "$top/deploy/deb/triggers" "$stage/DEBIAN/triggers"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CONTROL
Package: gemmd
Version: $version
Architecture: $arch
Maintainer: The gemmd authors <maintainers@gemmd.invalid>
Installed-Size: $size
Depends: $depends
Recommends: systemd
Section: science
Priority: optional
Description: GEMM/SYR2K service daemon for shared GPU nodes
 gemmd owns a node's GPUs (or runs on its CPUs) and serves matrix
 multiplications (GEMM) and symmetric rank-2k updates (SYR2K) to client
 processes over a Unix socket, batching their ops and sharing each device
 fairly between users.
 .
 This package has the daemon, gemmctl, the client library libgemmd with its
 header and pkg-config file, the systemd units (gemmd.socket, enabled on
 installation) and the man pages.
CONTROL
mkdir -p "$outdir"
deb=$outdir/gemmd_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"

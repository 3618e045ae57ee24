#!/bin/sh
# Builds gemmd's OCI image without a registry: the root filesystem comes from
# Debian's packages (mmdebstrap, the essential set and passwd), this build's
# `make deb` tree is copied in and the same user, directory and settings as
# deploy/Dockerfile are added, and podman imports the tarball.
#   scripts/build-image.sh [TAG]        (default gemmd:VERSION)
# Environment: MIRROR (default http://deb.debian.org/debian), SUITE
# (bookworm), WITH_CUDA (passed to make). Without podman it stops after
# build/image/rootfs.tar, which `docker import` takes as well.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
version=$(sed -n 's/^VERSION := //p' Makefile)
tag=${1:-gemmd:$version}
mirror=${MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}
out=build/image
stage=build/deb/root

command -v mmdebstrap >/dev/null || { echo "build-image: needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
make --no-print-directory ${WITH_CUDA:+WITH_CUDA=$WITH_CUDA} deb >/dev/null
mkdir -p "$out"
rm -f "$out/rootfs.tar"
# The package's systemd files and examples have no use in a container.
mmdebstrap --quiet --variant=essential --include=passwd \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook="tar -C '$stage' --exclude=./DEBIAN --exclude=./usr/lib/systemd \
                --exclude=./usr/lib/sysusers.d --exclude=./usr/lib/tmpfiles.d \
                --exclude=./usr/share/doc/gemmd/examples -c . | tar -C \"\$1\" -x" \
        --customize-hook='chroot "$1" ldconfig' \
        --customize-hook='chroot "$1" groupadd --system --gid 9464 gemmd' \
        --customize-hook='chroot "$1" useradd --system --uid 9464 --gid gemmd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --comment "gemmd GEMM service" gemmd' \
        --customize-hook='install -d -o 9464 -g 9464 -m 0755 "$1/run/gemmd"' \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
        "$suite" "$out/rootfs.tar" "$mirror"
echo "build-image: $out/rootfs.tar"

if ! command -v podman >/dev/null; then
        echo "build-image: podman is not installed; import $out/rootfs.tar with podman or docker import" >&2
        exit 0
fi
podman import \
        --change 'ENV NVIDIA_VISIBLE_DEVICES=all' \
        --change 'ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility' \
        --change 'USER 9464:9464' \
        --change 'EXPOSE 9464' \
        --change 'VOLUME /run/gemmd' \
        --change 'ENTRYPOINT ["/usr/sbin/gemmd"]' \
        --change 'CMD ["--backend=auto", "--socket=/run/gemmd/gemmd.sock", "--metrics-listen=tcp:0.0.0.0:9464"]' \
        "$out/rootfs.tar" "$tag" >/dev/null
echo "build-image: $tag"

#!/bin/sh
# Installs the Debian packages gemmd's build and tests use, when missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -eu

PKGS="build-essential pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler \
libcriterion-dev python3 python3-numpy python3-venv systemd"
# tests/test_deploy.sh reads deploy/k8s/daemonset.yaml.
PKGS="$PKGS python3-yaml"
# tests/test_blas_*.sh: the reference BLAS and its testers, NumPy's test suite.
PKGS="$PKGS libblas3 libblas-test python3-pytest python3-hypothesis"

missing=""
for p in $PKGS; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
                missing="$missing $p"
        fi
done
[ -z "$missing" ] && exit 0

cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" -ne 0 ]; then
        echo "gemmd: missing Debian packages:$missing" >&2
        echo "gemmd: run as root:  apt-get update && $cmd" >&2
        exit 1
fi
echo "gemmd: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null

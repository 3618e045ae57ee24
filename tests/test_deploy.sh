#!/bin/sh
# tests/test_deploy.sh: light checks of deploy/: the DaemonSet parses and
# has what gemmd needs (python3-yaml; skipped without it), `make deb`
# packages exactly what `make install PREFIX=/usr` installs plus the
# copyright and the examples (dpkg-deb; skipped without it), the metrics
# drop-in passes systemd-analyze verify (where it can run), and the image,
# the build script and the DaemonSet agree on the daemon's uid.
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${GEMMD_BIN:-$top/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() {
        echo "FAIL: $*"
        fails=$((fails + 1))
}
skip() {
        echo "SKIP: $*"
}
unset MAKEFLAGS MFLAGS MAKELEVEL
mk() {
        make -s --no-print-directory -C "$top" BUILD="$build" -o bins LDCONFIG=true "$@"
}

# The DaemonSet.
py=""
for p in python3 /usr/bin/python3; do
        if "$p" -c 'import yaml' 2>/dev/null; then
                py=$p
                break
        fi
done
if [ -z "$py" ]; then
        skip "DaemonSet: no python3 with yaml"
elif ! "$py" - deploy/k8s/daemonset.yaml <<'PY'; then
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
bad = []
def need(cond, what):
    if not cond:
        bad.append(what)
ds = [d for d in docs if d.get("kind") == "DaemonSet"]
need(len(ds) == 1 and ds[0].get("apiVersion") == "apps/v1", "one apps/v1 DaemonSet")
spec = ds[0]["spec"]
need(spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items(),
     "the selector matches the pod template")
pod = spec["template"]["spec"]
vols = {v["name"]: v for v in pod["volumes"]}
host = [n for n, v in vols.items() if v.get("hostPath", {}).get("path") == "/run/gemmd"]
need(len(host) == 1, "a hostPath volume of /run/gemmd")
c = [c for c in pod["containers"] if c["name"] == "gemmd"][0]
args = c.get("command", []) + c.get("args", [])
need("--socket=/run/gemmd/gemmd.sock" in args, "--socket=/run/gemmd/gemmd.sock")
need("--backend=auto" in args, "--backend=auto")
metrics = [a for a in args if a.startswith("--metrics-listen=tcp:")]
need(len(metrics) == 1, "--metrics-listen=tcp:")
ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
need(metrics and ports.get("metrics") == int(metrics[0].rsplit(":", 1)[1]), "the metrics port is the one served")
need(any(m["name"] in host and m["mountPath"] == "/run/gemmd" for m in c["volumeMounts"]),
     "/run/gemmd mounted in the daemon's container")
need("nvidia.com/gpu" in c["resources"]["limits"], "nvidia.com/gpu")
r = c.get("readinessProbe", {}).get("exec", {}).get("command", [])
need("status" in r and "/run/gemmd/gemmd.sock" in r, "readiness by gemmctl status on the socket")
l = c.get("livenessProbe", {}).get("httpGet", {})
need(l.get("path") == "/metrics" and l.get("port") in ("metrics", ports.get("metrics")), "liveness by GET /metrics")
sc = c.get("securityContext", {})
need(sc.get("runAsUser") == 9464 and sc.get("capabilities", {}).get("drop") == ["ALL"], "unprivileged, no capabilities")
for b in bad:
    print("FAIL: DaemonSet:", b)
sys.exit(1 if bad else 0)
PY
        fails=$((fails + 1))
else
        echo "ok: DaemonSet"
fi

# The image, its registry-less build and the DaemonSet run the daemon as the same user.
grep -q '^USER 9464:9464$' deploy/Dockerfile || fail "Dockerfile: USER 9464:9464"
grep -q "USER 9464:9464" scripts/build-image.sh || fail "build-image.sh: USER 9464:9464"
grep -q -- "--uid 9464" deploy/Dockerfile && grep -q -- "--uid 9464" scripts/build-image.sh ||
        fail "the image's gemmd user is uid 9464"

# The Debian package.
if ! command -v dpkg-deb >/dev/null; then
        skip "make deb: no dpkg-deb"
elif ! mk deb >"$tmp/deb.out" 2>&1; then
        cat "$tmp/deb.out"
        fail "make deb"
else
        deb=$(tail -n 1 "$tmp/deb.out")
        mk install PREFIX=/usr DESTDIR="$tmp/root" >/dev/null || fail "make install"
        (cd "$tmp/root" && find . ! -type d | sort) >"$tmp/want"
        printf '%s\n' ./usr/share/doc/gemmd/copyright ./usr/share/doc/gemmd/examples/daemonset.yaml \
                ./usr/share/doc/gemmd/examples/metrics-tcp.conf >>"$tmp/want"
        sort -o "$tmp/want" "$tmp/want"
        dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | sort >"$tmp/got"
        if ! diff -u "$tmp/want" "$tmp/got"; then
                fail "the package's files are not make install's"
        fi
        dpkg-deb -f "$deb" Package Depends >"$tmp/control"
        grep -q '^Package: gemmd$' "$tmp/control" && grep -q '^Depends: libc6 (>= 2\.[0-9]*)' "$tmp/control" ||
                fail "control: $(cat "$tmp/control")"
        dpkg-deb -e "$deb" "$tmp/ctl"
        for s in postinst prerm postrm; do
                [ -x "$tmp/ctl/$s" ] && sh -n "$tmp/ctl/$s" || fail "$s missing or not sh"
        done
        grep -q 'systemd-sysusers' "$tmp/ctl/postinst" && grep -q 'enable gemmd.socket' "$tmp/ctl/postinst" ||
                fail "postinst creates the user and enables gemmd.socket"
        echo "ok: make deb ($(wc -l <"$tmp/got") files)"
fi

# The drop-in for metrics over TCP, with the units as installed.
grep -q '^PrivateNetwork=no$' deploy/systemd/metrics-tcp.conf &&
        grep -q '^RestrictAddressFamilies=.*AF_INET' deploy/systemd/metrics-tcp.conf &&
        grep -q -- '--metrics-listen tcp:' deploy/systemd/metrics-tcp.conf ||
        fail "metrics-tcp.conf lifts PrivateNetwork= and AF_UNIX only, and listens on tcp:"
u=$tmp/units
mkdir -p "$u/gemmd.service.d"
sed "s|@BINDIR@|$build|" systemd/gemmd.service >"$u/gemmd.service"
cp systemd/gemmd.socket "$u/"
sed "s|/usr/sbin/gemmd|$build/gemmd|" deploy/systemd/metrics-tcp.conf >"$u/gemmd.service.d/metrics-tcp.conf"
printf '[Unit]\nDescription=probe\n[Service]\nType=oneshot\nExecStart=/bin/true\n' >"$tmp/probe.service"
if ! command -v systemd-analyze >/dev/null; then
        skip "drop-in: no systemd-analyze"
elif ! systemd-analyze verify --man=no "$tmp/probe.service" >/dev/null 2>&1; then
        skip "drop-in: systemd-analyze cannot verify units here"
else
        SYSTEMD_UNIT_PATH=$u: systemd-analyze verify --man=no "$u/gemmd.socket" "$u/gemmd.service" \
                >"$tmp/verify" 2>&1
        if [ $? -ne 0 ] || grep -q 'gemmd\.\|metrics-tcp' "$tmp/verify"; then
                cat "$tmp/verify"
                fail "systemd-analyze verify with the drop-in"
        fi
        # The drop-in is read: a bad value in it is reported.
        sed -i 's/^PrivateNetwork=no$/PrivateNetwork=maybe/' "$u/gemmd.service.d/metrics-tcp.conf"
        SYSTEMD_UNIT_PATH=$u: systemd-analyze verify --man=no "$u/gemmd.service" >"$tmp/verify" 2>&1
        grep -q 'metrics-tcp.conf' "$tmp/verify" || fail "systemd-analyze did not read the drop-in"
        echo "ok: drop-in"
fi

[ "$fails" -eq 0 ] || { echo "test_deploy: $fails failed"; exit 1; }
echo "test_deploy: ok"

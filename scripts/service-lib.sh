# Sourced by scripts/service-sweep.sh and scripts/service-ab.sh: a private
# temporary directory ($tmp, also $TMPDIR), the driver's tools on PATH, and
# one gemmd at a time ($dpid) on $tmp/gemmd.sock. The caller sets $1 to a
# name for the directory and installs service_cleanup on EXIT.

# The driver's tools (nvidia-smi, nvidia-cuda-mps-control) may live here.
[ -d /usr/local/nvidia/bin ] && PATH=$PATH:/usr/local/nvidia/bin
export PATH

tmp=$(mktemp -d "/tmp/$1-XXXXXX") || exit 1
export TMPDIR=$tmp
dpid=""

accepts() { # the Unix socket $1 accepts a connection
        python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$1" 2>/dev/null
}

# start_daemon GEMMD LOG [ARGS...]: starts GEMMD --backend ${GEMMD_BACKEND:-cuda}
# on $tmp/gemmd.sock and waits until it accepts; returns 1 if it does not.
start_daemon() {
        local bin=$1 log=$2
        shift 2
        rm -f "$tmp/gemmd.sock"
        "$bin" --socket "$tmp/gemmd.sock" --backend "${GEMMD_BACKEND:-cuda}" "$@" >>"$log" 2>&1 &
        dpid=$!
        for _ in $(seq 600); do
                accepts "$tmp/gemmd.sock" && return 0
                kill -0 "$dpid" 2>/dev/null || { dpid=""; return 1; }
                sleep 0.05
        done
        return 1
}

stop_daemon() {
        [ -n "$dpid" ] || return 0
        kill -TERM "$dpid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$dpid" 2>/dev/null
        wait "$dpid" 2>/dev/null
        dpid=""
}

service_cleanup() {
        stop_daemon
        # An MPS control daemon left by a gemmbench that was killed: ask it
        # to quit through its own private pipe directory.
        for p in "$tmp"/gemmbench-*/mps-pipe; do
                [ -d "$p" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$p timeout 20 nvidia-cuda-mps-control
        done
        rm -rf "$tmp"
}

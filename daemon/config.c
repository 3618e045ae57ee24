/*
 * config.c - defaults and the command line of gemmd.
 */
#include "daemon/config.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemmd.h"
#include "kernels/cuda_gemm.h"
#include "scheduler/cost.h"

void config_defaults(struct gemmd_config *cfg)
{
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        const char *env = getenv("GEMMD_SOCKET");

        memset(cfg, 0, sizeof(*cfg));
        cfg->socket_path = env && *env ? env : GEMMD_DEFAULT_SOCKET;
        cfg->backend = BACKEND_AUTO;
        cfg->threads = ncpu > 0 ? (int)ncpu : 1;
        /* auto: sorted, the best or near-best mode on groups of short
         * tiles (every 16-bit service group: lpt's runs of one problem per
         * CTA lose L2 reuse there), and split where the tiles are long and
         * the model predicts it well ahead (long K, f64, exact f32), where
         * the GPU runs it as predicted (docs/performance.md). */
        cfg->mode = SCHED_AUTO;
        cfg->max_groups_inflight = 0; /* the backend's (struct backend) */
        cfg->batch_window_us = 0;
        /* A lone request crosses three of the daemon's threads (loop,
         * worker, completion); waking one that slept costs 5-15 us on a
         * server, so each keeps polling a while after its last work. On
         * the CPU backend, or with few cores, the cores are better left to
         * the compute threads and the clients. Resolved after parsing. */
        cfg->spin_us = SPIN_AUTO;
        cfg->client_poll_max = CLIENT_POLL_AUTO;
        /* A request answered when its own C is whole need not wait for
         * the larger problems of its group. */
        cfg->early_completion = 1;
        cfg->loop_launch = -1; /* auto: the backend's (struct backend) */
        /* A lone request on a GPU skips a launch's host path and start;
         * auto: wherever the device can (backend_cuda_new), but not under
         * a device process, where it has not been measured. */
        cfg->resident = -1;
        cfg->resident_readers = 2;
        /* Timing events cost each launch host time and round trip, so a
         * GPU times two consecutive groups in every 16 (the pair gives the
         * idle gap between them) and the stats report the sample. */
        cfg->timing_every = 16;
        cfg->wide_tiles = 1;
        cfg->narrow_tiles = 1;
        cfg->rings = 1;
        /* 2048 tiles of 128 x 128 are some 15 waves of an H100: a larger
         * group fills the device no better, and under a backlog larger
         * groups only made the worker's launches fall behind. */
        cfg->max_group_tiles = 2048;
        cfg->max_group_bytes = 8ull << 30;
        cfg->max_group_ops = 4096;
        cfg->lim.max_frame_bytes = 20u << 20;
        cfg->lim.max_ops_per_submit = 4096;
        cfg->lim.max_inline_bytes = 16u << 20;
        cfg->lim.max_inflight_ops = 4096;
        cfg->lim.max_buffers = 1024;
        cfg->lim.max_buffer_bytes = 64ull << 30;
        cfg->lim.max_queue_ops = 65536;
        cfg->lim.max_sessions = 1024;
        /* Replies a session leaves unread stay the daemon's memory, for each
         * of a user's sessions: enough for every small reply of a full
         * window and a large inline result, no more (inline results are
         * budgeted apart, --max-session-inline-bytes). */
        cfg->lim.max_output_bytes = 16u << 20;
        cfg->lim.max_user_inflight_ops = 16384;
        cfg->lim.max_user_buffer_bytes = 256ull << 30;
        cfg->lim.max_user_share = 100;
        /* A new client's first open can take tens of ms and a close
         * stops the device's groups for milliseconds: a client opening
         * and closing memory in a loop would otherwise hold everyone's
         * work up. 2% of the worker, after a burst of WORKER_SHARE_BURST_NS
         * and whenever the device is idle, leaves a client's set-up
         * untouched and such a loop nearly harmless. */
        cfg->lim.max_user_task_share = 2;
        cfg->user_sessions_arg = 0;       /* config_session_limits */
        cfg->first_slots_arg = SLOTS_AUTO;
        cfg->lim.hello_timeout_ms = 10000;
        /* The kernel's default vm.max_map_count is 65530: one user's
         * sessions may hold a sixteenth of that, all users together half
         * (resolved after parsing); the other half is the daemon's own. */
        cfg->lim.max_user_buffers = 4096;
        cfg->lim.max_mappings = MAPPINGS_AUTO;
        /* 32 inline results of the largest submit (16 MiB, counted twice:
         * the result and the reply that carries it) per session, 128 per
         * user: far more than a client needs to keep a device busy (large
         * operands belong in shared memory), far less than a node's memory. */
        cfg->lim.max_session_inline_bytes = 1ull << 30;
        cfg->lim.max_user_inline_bytes = 4ull << 30;
        /* A client writes each frame whole: one still unfinished as long
         * after its first byte as a Hello may take is held open on
         * purpose, with the descriptors sent with it. */
        cfg->lim.frame_timeout_ms = 10000;
        /* Clients keep one connection for hours between calls: a session
         * that holds nothing costs a descriptor and its read buffer, which
         * the per-user and first-session limits already bound. */
        cfg->lim.idle_timeout_ms = 0;
        config_session_limits(cfg);
}

/* One user gets a quarter of the sessions, so that it takes four to fill
 * the daemon, but at least 16 (a user's parallel clients; all of them
 * where there are fewer); an eighth of them is kept for users' first
 * sessions, so that a user with none gets one while others hold the
 * rest. What was given stands, up to --max-sessions. */
void config_session_limits(struct gemmd_config *cfg)
{
        struct limits *lim = &cfg->lim;
        uint32_t n = lim->max_sessions, u = cfg->user_sessions_arg, r = cfg->first_slots_arg;

        if (!u) {
                u = n / 4;
                if (u < 16)
                        u = n < 16 ? n : 16;
        }
        lim->max_user_sessions = u < n ? u : n;
        if (r == SLOTS_AUTO)
                r = n / 8;
        lim->first_session_slots = r < n ? r : n - 1;
}

enum {
        OPT_THREADS = 256,
        OPT_DEVICES,
        OPT_MODE,
        OPT_GROUPS,
        OPT_WINDOW,
        OPT_GROUP_TILES,
        OPT_GROUP_OPS,
        OPT_MAX_FRAME,
        OPT_MAX_OPS,
        OPT_MAX_INLINE,
        OPT_MAX_INFLIGHT,
        OPT_MAX_BUFFERS,
        OPT_MAX_QUEUE,
        OPT_MAX_SESSIONS,
        OPT_VERSION,
        OPT_METRICS,
        OPT_MAX_BUFFER_BYTES,
        OPT_MAX_OUTPUT,
        OPT_USER_INFLIGHT,
        OPT_USER_BYTES,
        OPT_USER_SHARE,
        OPT_USER_TASK_SHARE,
        OPT_ALLOW_UID,
        OPT_ALLOW_GID,
        OPT_CONFIG,
        OPT_USER_SESSIONS,
        OPT_HELLO_TIMEOUT,
        OPT_SPIN,
        OPT_TIMING,
        OPT_F32_KERNEL,
        OPT_LOOPS,
        OPT_DEVPROC,
        OPT_WIDE,
        OPT_NARROW,
        OPT_RINGS,
        OPT_RESIDENT,
        OPT_RESIDENT_READERS,
        OPT_LOOP_LAUNCH,
        OPT_CLIENT_POLL,
        OPT_EARLY,
        OPT_ONE_KERNEL,
        OPT_CPU_ALT_TILES,
        OPT_CPU_WAVE_CUT,
        OPT_CPU_EARLY,
        OPT_COST,
        OPT_ADMIN_GID,
        OPT_USER_BUFFERS,
        OPT_MAPPINGS,
        OPT_SESSION_INLINE,
        OPT_USER_INLINE,
        OPT_FIRST_SLOTS,
        OPT_FRAME_TIMEOUT,
        OPT_IDLE_TIMEOUT,
};

static const struct option options[] = {
        {"socket", required_argument, NULL, 's'},
        {"backend", required_argument, NULL, 'b'},
        {"foreground", no_argument, NULL, 'f'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"devices", required_argument, NULL, OPT_DEVICES},
        {"mode", required_argument, NULL, OPT_MODE},
        {"max-groups-inflight", required_argument, NULL, OPT_GROUPS},
        {"batch-window-us", required_argument, NULL, OPT_WINDOW},
        {"max-group-tiles", required_argument, NULL, OPT_GROUP_TILES},
        {"max-group-ops", required_argument, NULL, OPT_GROUP_OPS},
        {"max-frame-bytes", required_argument, NULL, OPT_MAX_FRAME},
        {"max-ops-per-submit", required_argument, NULL, OPT_MAX_OPS},
        {"max-inline-bytes", required_argument, NULL, OPT_MAX_INLINE},
        {"max-inflight-ops", required_argument, NULL, OPT_MAX_INFLIGHT},
        {"max-buffers", required_argument, NULL, OPT_MAX_BUFFERS},
        {"max-queue-ops", required_argument, NULL, OPT_MAX_QUEUE},
        {"max-sessions", required_argument, NULL, OPT_MAX_SESSIONS},
        {"metrics-listen", required_argument, NULL, OPT_METRICS},
        {"max-buffer-bytes", required_argument, NULL, OPT_MAX_BUFFER_BYTES},
        {"max-output-bytes", required_argument, NULL, OPT_MAX_OUTPUT},
        {"max-user-inflight-ops", required_argument, NULL, OPT_USER_INFLIGHT},
        {"max-user-buffer-bytes", required_argument, NULL, OPT_USER_BYTES},
        {"max-user-share", required_argument, NULL, OPT_USER_SHARE},
        {"max-user-task-share", required_argument, NULL, OPT_USER_TASK_SHARE},
        {"allow-uid", required_argument, NULL, OPT_ALLOW_UID},
        {"allow-gid", required_argument, NULL, OPT_ALLOW_GID},
        {"admin-gid", required_argument, NULL, OPT_ADMIN_GID},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"max-user-sessions", required_argument, NULL, OPT_USER_SESSIONS},
        {"hello-timeout-ms", required_argument, NULL, OPT_HELLO_TIMEOUT},
        {"first-session-slots", required_argument, NULL, OPT_FIRST_SLOTS},
        {"frame-timeout-ms", required_argument, NULL, OPT_FRAME_TIMEOUT},
        {"idle-timeout-ms", required_argument, NULL, OPT_IDLE_TIMEOUT},
        {"spin-us", required_argument, NULL, OPT_SPIN},
        {"timing-every", required_argument, NULL, OPT_TIMING},
        {"f32-kernel", required_argument, NULL, OPT_F32_KERNEL},
        {"loops", required_argument, NULL, OPT_LOOPS},
        {"device-process", required_argument, NULL, OPT_DEVPROC},
        {"wide-tiles", required_argument, NULL, OPT_WIDE},
        {"narrow-tiles", required_argument, NULL, OPT_NARROW},
        {"rings", required_argument, NULL, OPT_RINGS},
        {"resident", required_argument, NULL, OPT_RESIDENT},
        {"resident-readers", required_argument, NULL, OPT_RESIDENT_READERS},
        {"loop-launch", required_argument, NULL, OPT_LOOP_LAUNCH},
        {"client-poll-max", required_argument, NULL, OPT_CLIENT_POLL},
        {"early-completion", required_argument, NULL, OPT_EARLY},
        {"one-kernel-groups", required_argument, NULL, OPT_ONE_KERNEL},
        {"cpu-alt-tiles", required_argument, NULL, OPT_CPU_ALT_TILES},
        {"cpu-wave-cut", required_argument, NULL, OPT_CPU_WAVE_CUT},
        {"cpu-early", required_argument, NULL, OPT_CPU_EARLY},
        {"cost", required_argument, NULL, OPT_COST},
        {"max-user-buffers", required_argument, NULL, OPT_USER_BUFFERS},
        {"max-mappings", required_argument, NULL, OPT_MAPPINGS},
        {"max-session-inline-bytes", required_argument, NULL, OPT_SESSION_INLINE},
        {"max-user-inline-bytes", required_argument, NULL, OPT_USER_INLINE},
        {NULL, 0, NULL, 0},
};

/* A byte count as --help shows it: with the largest suffix that keeps it
 * whole (64G, 20M), as parse_bytes reads it back. Returns buf. */
static const char *size_str(char buf[24], unsigned long long v)
{
        static const char units[] = "KMGT";
        int i = 0;

        while (i < 4 && v && !(v & 1023)) {
                v >>= 10;
                i++;
        }
        if (i)
                snprintf(buf, 24, "%llu%c", v, units[i - 1]);
        else
                snprintf(buf, 24, "%llu", v);
        return buf;
}

static void usage(FILE *f, const struct gemmd_config *d)
{
        char b[7][24];

        fprintf(f,
                "usage: gemmd [options]\n"
                "\n"
                "GEMM and SYR2K as a service: clients connect over a Unix socket.\n"
                "\n"
                "  -s, --socket PATH            listening socket (default: $GEMMD_SOCKET, else %s)\n"
                "  -b, --backend cpu|cuda|auto  compute backend (default: auto = cuda if a GPU is usable, else cpu)\n"
                "  -f, --foreground             stay in the foreground (gemmd never forks; kept for scripts)\n"
                "      --threads N              CPU backend threads (default: %d, the online CPUs)\n"
                "      --devices LIST           CUDA devices to use, e.g. 0,1 (default: all)\n"
                "      --mode rr|sorted|lpt|split|device|spt|auto  tile schedule of each group (default: %s)\n"
                "      --max-groups-inflight D  groups launched and unfinished per device, 1 to 8 (default: 8 on\n"
                "                               a GPU with the resident kernel, 4 on one without, 2 on the CPU\n"
                "                               backend)\n"
                "      --batch-window-us US     an idle device waits this long for more requests (default: %u)\n"
                "      --spin-us US             the daemon's threads poll this long after their last work before\n"
                "                               they sleep (default: 50, or 0 with --backend cpu or under 4 CPUs)\n"
                "      --timing-every N         a GPU measures device time and idle gaps on 2 groups in every N\n"
                "                               (default: %u; 1: every group)\n"
                "      --client-poll-max N|auto  clients poll for their completions while at most N sessions have\n"
                "                               work in flight, and sleep on their sockets past that (default: auto,\n"
                "                               the online CPUs less the daemon's threads that poll or compute)\n"
                "      --loops N                event loops (threads) serving the connections, 1 to 64\n"
                "                               (default: 4 on a GPU with 8 or more CPUs, else 1)\n"
                "      --device-process yes|no  drive each device from a process of its own, replaced after a\n"
                "                               fault its context cannot survive (default: no)\n"
                "      --wide-tiles yes|no      let a group of large GEMMs take the GPU's wide tile (128x192 on\n"
                "                               an sm_90 GPU) where the cost model predicts it faster (default: yes)\n"
                "      --narrow-tiles yes|no    let a group of GEMMs too small to fill an otherwise idle GPU take\n"
                "                               its narrow tile (128x64 on an sm_90 GPU) where those still fit\n"
                "                               one wave (default: yes)\n"
                "      --rings yes|no           let clients submit and take completions through rings in\n"
                "                               shared memory beside the socket (default: yes)\n"
                "      --resident yes|no|auto   a GPU keeps its 16-bit GEMM kernel running between groups and\n"
                "                               feeds it through pinned memory instead of a launch per group;\n"
                "                               it holds every SM while requests keep coming and stops 2 ms\n"
                "                               after the last (default: auto: yes on an sm_90 GPU, not with\n"
                "                               --device-process yes)\n"
                "      --resident-readers N     CTAs of the resident kernel that read the groups posted to it,\n"
                "                               each every N-th group, 1 to 4 (default: 2)\n"
                "      --loop-launch yes|no|auto  a request that finds its device idle is launched by the event\n"
                "                               loop that read it, not handed to the device's worker (default:\n"
                "                               auto: on the CPU backend, not on a GPU, where it was no faster)\n"
                "      --early-completion yes|no  a GPU answers each request of a 16-bit GEMM group once its own\n"
                "                               tiles are done, before the whole group is (default: yes)\n"
                "      --one-kernel-groups yes|no  groups hold ops of one kernel configuration on the CPU backend\n"
                "                               too, as on a GPU (default: no; a GPU always does)\n"
                "      --cpu-alt-tiles yes|no   the CPU backend offers a wide (64x96) and a narrow (64x32) tile\n"
                "                               beside its 64x64, as a GPU does (default: no)\n"
                "      --cpu-wave-cut yes|no    the CPU backend's 16-bit groups are cut at one wave while little\n"
                "                               work is outstanding, as on a GPU with the resident kernel\n"
                "                               (default: no)\n"
                "      --cpu-early yes|no       the CPU backend answers each op of a group once its own tiles are\n"
                "                               done, as a GPU does under --early-completion (default: no)\n"
                "      --cost SPEC              the scheduler's cost model, name=value,... (what `gemmbench\n"
                "                               calibrate` measures; default: the built-in H100 figures)\n"
                "      --f32-kernel split|ffma  exact f32 on an sm_90 GPU: each operand split into two TF32\n"
                "                               parts on tensor cores (default), or fused multiply-adds\n"
                "      --max-group-tiles N      tiles in one group (default: %llu)\n"
                "      --max-group-ops N        ops in one group (default: %u)\n"
                "      --max-frame-bytes SIZE   largest frame accepted, at least the inline limit + 1 MiB\n"
                "                               (default: %s, or the inline limit + 1 MiB if larger)\n"
                "      --max-ops-per-submit N   ops in one submit (default: %u)\n"
                "      --max-inline-bytes SIZE  inline operand bytes in one submit (default: %s)\n"
                "      --max-inflight-ops N     unfinished ops per session (default: %u)\n"
                "      --max-buffers N          registered buffers per session (default: %u)\n"
                "      --max-queue-ops N        unfinished ops in the whole daemon (default: %u)\n"
                "      --max-sessions N         concurrent connections (default: %u, fewer where the descriptor\n"
                "                               limit cannot carry them)\n"
                "      --metrics-listen ADDR    serve Prometheus metrics over HTTP on unix:PATH or tcp:HOST:PORT\n"
                "                               (tcp::PORT: every address; default: off)\n"
                "      --max-buffer-bytes SIZE  bytes of one registered buffer (default: %s)\n"
                "      --max-output-bytes SIZE  unread reply bytes per session before it is read no more (default: %s)\n"
                "      --max-user-inflight-ops N  unfinished ops of one user, all sessions (default: %u)\n"
                "      --max-user-buffer-bytes SIZE  registered bytes of one user, all sessions (default: %s)\n"
                "      --max-user-share PCT     share of a device one user keeps while others wait (default: %u)\n"
                "      --max-user-task-share PCT  share of a device's worker time one user's device memory\n"
                "                               requests (open, allocate, close, free) take; past it, its opens\n"
                "                               and allocations wait (default: %u; 100: no bound)\n"
                "      --max-user-sessions N    concurrent connections of one user (default: %u, a quarter of\n"
                "                               --max-sessions but at least 16)\n"
                "      --first-session-slots N  the last N sessions go only to users that have none (default: %u,\n"
                "                               an eighth of --max-sessions)\n"
                "      --max-user-buffers N     buffers and rings one user's sessions hold mapped (default: %u)\n"
                "      --max-mappings N|auto    buffers and rings of all users together (default: auto, half of\n"
                "                               /proc/sys/vm/max_map_count)\n"
                "      --max-session-inline-bytes SIZE  bytes held for one session's inline operands and the\n"
                "                               replies carrying inline results (default: %s)\n"
                "      --max-user-inline-bytes SIZE  the same for one user, all sessions (default: %s)\n"
                "      --hello-timeout-ms MS    close a connection that sends no Hello this long (default: %u)\n"
                "      --frame-timeout-ms MS    close a session whose frame is not whole this long after its first\n"
                "                               byte (default: %u; 0: never)\n"
                "      --idle-timeout-ms MS     close a session that has nothing in flight and sends nothing this\n"
                "                               long (default: %u, never)\n"
                "      --allow-uid LIST         only these users may connect (uids or names, comma-separated)\n"
                "      --allow-gid LIST         ... or members of these groups (gids or names)\n"
                "      --admin-gid LIST         members of these groups see every user's sessions in the\n"
                "                               stats, as root does (default: none; others see their own)\n"
                "      --config FILE            read `option = value` lines first (the command line wins)\n"
                "  -v, --verbose                log every connection and group\n"
                "  -h, --help                   this text\n"
                "      --version                print the version\n"
                "\n"
                "SIZE: bytes, or with a K, M, G or T suffix for powers of 1024 (64G, 512KiB).\n"
                "SIGTERM or SIGINT: stop accepting, finish in-flight work, reply, exit 0.\n",
                GEMMD_DEFAULT_SOCKET, d->threads, sched_mode_name(d->mode),
                d->batch_window_us, d->timing_every,
                (unsigned long long)d->max_group_tiles, d->max_group_ops,
                size_str(b[0], d->lim.max_frame_bytes), d->lim.max_ops_per_submit,
                size_str(b[1], d->lim.max_inline_bytes), d->lim.max_inflight_ops,
                d->lim.max_buffers, d->lim.max_queue_ops, d->lim.max_sessions,
                size_str(b[2], d->lim.max_buffer_bytes),
                size_str(b[3], d->lim.max_output_bytes), d->lim.max_user_inflight_ops,
                size_str(b[4], d->lim.max_user_buffer_bytes), d->lim.max_user_share,
                d->lim.max_user_task_share,
                d->lim.max_user_sessions, d->lim.first_session_slots, d->lim.max_user_buffers,
                size_str(b[5], d->lim.max_session_inline_bytes),
                size_str(b[6], d->lim.max_user_inline_bytes), d->lim.hello_timeout_ms,
                d->lim.frame_timeout_ms, d->lim.idle_timeout_ms);
}

/* Half of the kernel's limit on this process's memory mappings: the most
 * buffers and rings all users may hold mapped, leaving the other half to
 * the daemon's own (libraries, thread stacks, large allocations). */
static uint32_t auto_mappings(void)
{
        unsigned long long n = 65530; /* the kernel's default */
        FILE *f = fopen("/proc/sys/vm/max_map_count", "re");

        if (f) {
                if (fscanf(f, "%llu", &n) != 1 || n < 64)
                        n = 65530;
                fclose(f);
        }
        return n / 2 > INT32_MAX ? INT32_MAX : (uint32_t)(n / 2);
}

/* Parses yes or no into *out; returns 0, or -EINVAL (and *out untouched). */
static int parse_yes_no(const char *s, int *out)
{
        if (strcmp(s, "yes") && strcmp(s, "no"))
                return -EINVAL;
        *out = !strcmp(s, "yes");
        return 0;
}

/* Parses a decimal count in [lo, hi]; returns 0 or -EINVAL. */
static int parse_u64(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out)
{
        char *end;
        unsigned long long v;

        if (!s || !*s || *s == '-')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || *end || v < lo || v > hi)
                return -EINVAL;
        *out = v;
        return 0;
}

/* Parses a byte count in [lo, hi]: decimal, with an optional K, M, G or T
 * (either case, "iB" may follow) for powers of 1024, so that "64G" and
 * "64GiB" both mean 64 << 30. Returns 0 or -EINVAL. */
static int parse_bytes(const char *s, unsigned long long lo, unsigned long long hi,
                       unsigned long long *out)
{
        static const char units[] = "kmgt";
        unsigned long long v;
        const char *u;
        char *end;
        int shift;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -EINVAL;
        if (*end == '\0')
                return parse_u64(s, lo, hi, out);
        u = strchr(units, *end | 0x20);
        if (!u || (end[1] && strcmp(end + 1, "iB")))
                return -EINVAL;
        shift = 10 * (int)(u - units + 1);
        if (v > hi >> shift || v << shift < lo)
                return -EINVAL;
        *out = v << shift;
        return 0;
}

/* Parses a comma-separated list of uids (groups: gids), numbers or names,
 * into a new array that replaces *out. Returns 0 or 1 (bad entry). */
static int parse_ids(const char *s, int groups, uint32_t **out, uint32_t *n)
{
        char *copy = strdup(s), *tok, *save = NULL;
        uint32_t *v = NULL, cnt = 0;
        int bad = !copy;

        for (tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !bad;
             tok = strtok_r(NULL, ",", &save)) {
                unsigned long long id;
                uint32_t *grown;

                if (parse_u64(tok, 0, UINT32_MAX - 1, &id) != 0) {
                        struct passwd *pw = groups ? NULL : getpwnam(tok);
                        struct group *gr = groups ? getgrnam(tok) : NULL;

                        if (!pw && !gr) {
                                fprintf(stderr, "gemmd: no such %s: %s\n", groups ? "group" : "user",
                                        tok);
                                bad = 1;
                                break;
                        }
                        id = pw ? pw->pw_uid : gr->gr_gid;
                }
                grown = realloc(v, (cnt + 1) * sizeof(*v));
                if (!grown) {
                        bad = 1;
                        break;
                }
                v = grown;
                v[cnt++] = (uint32_t)id;
        }
        free(copy);
        if (bad || cnt == 0) {
                free(v);
                return 1;
        }
        free(*out);
        *out = v;
        *n = cnt;
        return 0;
}

/* Parses --devices: comma-separated device indices, each listed once, into
 * a new array that replaces *out. Returns 0, or 1 after saying what is
 * wrong. */
static int parse_devices(const char *s, uint32_t **out, uint32_t *n)
{
        uint32_t *v = calloc(strlen(s) / 2 + 1, sizeof(*v)), cnt = 0;
        const char *p = s;

        if (!v)
                return 1;
        for (;;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                unsigned long long id = 0;
                size_t i;

                for (i = 0; i < len && p[i] >= '0' && p[i] <= '9' && id <= DEVICE_MAX; i++)
                        id = id * 10 + (unsigned)(p[i] - '0');
                if (len == 0 || i < len || id > DEVICE_MAX) {
                        fprintf(stderr, "gemmd: --devices takes device indices from 0 to %d, "
                                        "comma-separated: \"%.*s\" is not one\n",
                                DEVICE_MAX, (int)len, p);
                        goto bad;
                }
                for (i = 0; i < cnt; i++)
                        if (v[i] == id) {
                                fprintf(stderr, "gemmd: --devices lists device %llu twice\n", id);
                                goto bad;
                        }
                v[cnt++] = (uint32_t)id;
                if (!end)
                        break;
                p = end + 1;
        }
        free(*out);
        *out = v;
        *n = cnt;
        return 0;
bad:
        free(v);
        return 1;
}

static char *trim(char *s)
{
        char *e;

        while (*s == ' ' || *s == '\t')
                s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
                *--e = '\0';
        return s;
}

/* Set while the lines of a config file are parsed one by one: the values
 * derived from others are settled once, after the command line. */
static int in_file;

static int parse_args(struct gemmd_config *cfg, int argc, char **argv);

/* A copy of a config file's value that lives as long as the config, which
 * may point into it (paths, lists), or NULL when out of memory. */
static char *keep_value(struct gemmd_config *cfg, const char *val)
{
        size_t n = strlen(val) + 1;
        struct config_value *v = malloc(sizeof(*v) + n);

        if (!v)
                return NULL;
        memcpy(v->s, val, n);
        v->next = cfg->file_values;
        cfg->file_values = v;
        return v->s;
}

void config_release(struct gemmd_config *cfg)
{
        while (cfg->file_values) {
                struct config_value *v = cfg->file_values;

                cfg->file_values = v->next;
                free(v);
        }
        free(cfg->allow_uids);
        free(cfg->allow_gids);
        free(cfg->admin_gids);
        free(cfg->device_ids);
        cfg->allow_uids = cfg->allow_gids = cfg->admin_gids = cfg->device_ids = NULL;
        cfg->n_allow_uids = cfg->n_allow_gids = cfg->n_admin_gids = cfg->n_device_ids = 0;
}

int config_load_file(struct gemmd_config *cfg, const char *path)
{
        FILE *f = fopen(path, "re");
        char *line = NULL;
        size_t cap = 0;
        int lineno = 0, rc = 0;

        if (!f) {
                fprintf(stderr, "gemmd: cannot read %s: %s\n", path, strerror(errno));
                return -EINVAL;
        }
        while (rc == 0 && getline(&line, &cap, f) >= 0) {
                char *key = trim(line), *val = strchr(key, '='), opt[80], *argv[4];
                const struct option *o;

                lineno++;
                if (*key == '\0' || *key == '#')
                        continue;
                if (val)
                        *val++ = '\0';
                key = trim(key);
                val = val ? trim(val) : NULL;
                for (o = options; o->name && strcmp(o->name, key); o++)
                        ;
                if (!o->name || o->val == OPT_CONFIG || o->val == 'h' || o->val == OPT_VERSION) {
                        fprintf(stderr, "gemmd: %s:%d: unknown key \"%s\"\n", path, lineno, key);
                        rc = -EINVAL;
                        break;
                }
                snprintf(opt, sizeof(opt), "--%s", key);
                argv[0] = "gemmd";
                argv[1] = opt;
                argv[2] = NULL;
                if (o->has_arg == no_argument) {
                        if (val && (!strcmp(val, "no") || !strcmp(val, "false") || !strcmp(val, "0")))
                                continue;
                        if (val && *val && strcmp(val, "yes") && strcmp(val, "true") && strcmp(val, "1")) {
                                fprintf(stderr, "gemmd: %s:%d: %s takes yes or no\n", path, lineno, key);
                                rc = -EINVAL;
                                break;
                        }
                } else {
                        if (!val || !*val) {
                                fprintf(stderr, "gemmd: %s:%d: %s needs a value\n", path, lineno, key);
                                rc = -EINVAL;
                                break;
                        }
                        argv[2] = keep_value(cfg, val);
                        if (!argv[2]) {
                                rc = -ENOMEM;
                                break;
                        }
                        argv[3] = NULL;
                }
                in_file = 1;
                rc = parse_args(cfg, argv[2] ? 3 : 2, argv);
                in_file = 0;
                if (rc != 0) {
                        fprintf(stderr, "gemmd: in %s, line %d\n", path, lineno);
                        rc = -EINVAL;
                }
        }
        free(line);
        fclose(f);
        return rc;
}

/* A frame must be able to carry the inline bytes a submit is allowed, with
 * 1 MiB for the rest of it. The default frame limit grows to fit; one that
 * was given is refused rather than silently changed. Returns 0 or -EINVAL
 * after saying why. */
static int check_frame_bytes(struct gemmd_config *cfg)
{
        uint64_t need = cfg->lim.max_inline_bytes + (1u << 20);

        if (cfg->lim.max_frame_bytes >= need)
                return 0;
        if (!cfg->max_frame_given) {
                cfg->lim.max_frame_bytes = need;
                return 0;
        }
        fprintf(stderr, "gemmd: --max-frame-bytes %llu is too small for --max-inline-bytes %llu: "
                        "a frame must hold the inline bytes and 1 MiB more, %llu in all; raise "
                        "--max-frame-bytes or lower --max-inline-bytes\n",
                (unsigned long long)cfg->lim.max_frame_bytes,
                (unsigned long long)cfg->lim.max_inline_bytes, (unsigned long long)need);
        return -EINVAL;
}

/* Says which option getopt_long refused (c is '?' or ':'), in one line:
 * the daemon's whole help would bury it. */
static void bad_option(int c, char **argv)
{
        const char *arg = argv[optind - 1];

        if (c == ':')
                fprintf(stderr, "gemmd: option '%s' needs a value\n", arg);
        else if (optopt && strncmp(arg, "--", 2))
                fprintf(stderr, "gemmd: unknown option '-%c'\n", optopt);
        else
                fprintf(stderr, "gemmd: unknown option '%s'\n", arg);
}

static int parse_args(struct gemmd_config *cfg, int argc, char **argv)
{
        struct gemmd_config defaults = *cfg;
        unsigned long long v;
        int c;

        /* The file first, so the command line overrides it. */
        for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
                const char *path = NULL;

                if (!strcmp(argv[i], "--config") && i + 1 < argc)
                        path = argv[++i];
                else if (!strncmp(argv[i], "--config=", 9))
                        path = argv[i] + 9;
                if (path && config_load_file(cfg, path) != 0)
                        return -EINVAL;
                if (path)
                        cfg->config_file = path;
        }
        optind = 1;
        int li = -1;

        /* li names the long option just parsed (-1 for a short one). */
        opterr = 0; /* bad_option says it in one line */
        while ((c = getopt_long(argc, argv, ":s:b:fvh", options, &li)) != -1) {
                int bad = 0;

                switch (c) {
                case 's':
                        cfg->socket_path = optarg;
                        break;
                case 'b':
                        if (!strcmp(optarg, "cpu"))
                                cfg->backend = BACKEND_CPU;
                        else if (!strcmp(optarg, "cuda"))
                                cfg->backend = BACKEND_CUDA;
                        else if (!strcmp(optarg, "auto"))
                                cfg->backend = BACKEND_AUTO;
                        else
                                bad = 1;
                        break;
                case 'f':
                        cfg->foreground = 1;
                        break;
                case 'v':
                        cfg->verbose = 1;
                        break;
                case 'h':
                        usage(stdout, &defaults);
                        return 1;
                case OPT_VERSION:
                        printf("gemmd %s (protocol %d)\n", GEMMD_VERSION, GEMMD_PROTOCOL_VERSION);
                        return 1;
                case OPT_THREADS:
                        bad = parse_u64(optarg, 1, 1024, &v);
                        cfg->threads = (int)v;
                        break;
                case OPT_DEVICES:
                        bad = parse_devices(optarg, &cfg->device_ids, &cfg->n_device_ids);
                        cfg->devices = optarg;
                        break;
                case OPT_MODE:
                        bad = sched_mode_parse(optarg, &cfg->mode) != 0;
                        break;
                case OPT_GROUPS:
                        /* At most 8: half the resident kernel's slots
                         * (CUDA_RES_SLOTS), which its CTAs rely on. */
                        bad = parse_u64(optarg, 1, 8, &v);
                        cfg->max_groups_inflight = (uint32_t)v;
                        break;
                case OPT_WINDOW:
                        bad = parse_u64(optarg, 0, 1000000, &v);
                        cfg->batch_window_us = (uint32_t)v;
                        break;
                case OPT_SPIN:
                        bad = parse_u64(optarg, 0, 100000, &v);
                        cfg->spin_us = (uint32_t)v;
                        break;
                case OPT_LOOPS:
                        bad = parse_u64(optarg, 1, LOOPS_MAX, &v);
                        cfg->loops = (int)v;
                        break;
                case OPT_DEVPROC:
                        bad = parse_yes_no(optarg, &cfg->device_process) != 0;
                        break;
                case OPT_WIDE:
                        bad = parse_yes_no(optarg, &cfg->wide_tiles) != 0;
                        break;
                case OPT_NARROW:
                        bad = parse_yes_no(optarg, &cfg->narrow_tiles) != 0;
                        break;
                case OPT_RINGS:
                        bad = parse_yes_no(optarg, &cfg->rings) != 0;
                        break;
                case OPT_RESIDENT:
                        if (!strcmp(optarg, "auto"))
                                cfg->resident = -1;
                        else
                                bad = parse_yes_no(optarg, &cfg->resident) != 0;
                        break;
                case OPT_RESIDENT_READERS:
                        bad = parse_u64(optarg, 1, CUDA_RES_DISPATCHERS_MAX, &v);
                        cfg->resident_readers = (uint32_t)v;
                        break;
                case OPT_LOOP_LAUNCH:
                        if (!strcmp(optarg, "auto"))
                                cfg->loop_launch = -1;
                        else
                                bad = parse_yes_no(optarg, &cfg->loop_launch) != 0;
                        break;
                case OPT_EARLY:
                        bad = parse_yes_no(optarg, &cfg->early_completion) != 0;
                        break;
                case OPT_CPU_ALT_TILES:
                        bad = parse_yes_no(optarg, &cfg->cpu_alt_tiles) != 0;
                        break;
                case OPT_CPU_WAVE_CUT:
                        bad = parse_yes_no(optarg, &cfg->cpu_wave_cut) != 0;
                        break;
                case OPT_CPU_EARLY:
                        bad = parse_yes_no(optarg, &cfg->cpu_early) != 0;
                        break;
                case OPT_ONE_KERNEL:
                        bad = parse_yes_no(optarg, &cfg->one_kernel_groups) != 0;
                        break;
                case OPT_CLIENT_POLL:
                        if (!strcmp(optarg, "auto")) {
                                cfg->client_poll_max = CLIENT_POLL_AUTO;
                        } else {
                                bad = parse_u64(optarg, 0, 1000000, &v);
                                cfg->client_poll_max = (uint32_t)v;
                        }
                        break;
                case OPT_COST: {
                        /* Installed at once: plans are built only once the
                         * server runs. */
                        struct sched_cost c = *sched_cost_get();

                        bad = sched_cost_parse(&c, optarg) || sched_cost_set(&c);
                        if (!bad)
                                cfg->cost = optarg;
                        break;
                }
                case OPT_F32_KERNEL:
                        bad = strcmp(optarg, "split") && strcmp(optarg, "ffma");
                        cfg->f32_ffma = !strcmp(optarg, "ffma");
                        break;
                case OPT_TIMING:
                        bad = parse_u64(optarg, 1, 1u << 20, &v);
                        cfg->timing_every = (uint32_t)v;
                        break;
                case OPT_GROUP_TILES:
                        bad = parse_u64(optarg, 1, UINT32_MAX, &v);
                        cfg->max_group_tiles = v;
                        break;
                case OPT_GROUP_OPS:
                        bad = parse_u64(optarg, 1, 65536, &v);
                        cfg->max_group_ops = (uint32_t)v;
                        break;
                case OPT_MAX_FRAME:
                        bad = parse_bytes(optarg, 4096, 1u << 30, &v);
                        cfg->lim.max_frame_bytes = v;
                        cfg->max_frame_given = 1;
                        break;
                case OPT_MAX_OPS:
                        bad = parse_u64(optarg, 1, 65536, &v);
                        cfg->lim.max_ops_per_submit = (uint32_t)v;
                        break;
                case OPT_MAX_INLINE:
                        bad = parse_bytes(optarg, 0, 1u << 30, &v);
                        cfg->lim.max_inline_bytes = v;
                        break;
                case OPT_MAX_INFLIGHT:
                        bad = parse_u64(optarg, 1, UINT32_MAX, &v);
                        cfg->lim.max_inflight_ops = (uint32_t)v;
                        break;
                case OPT_MAX_BUFFERS:
                        bad = parse_u64(optarg, 1, 1u << 20, &v);
                        cfg->lim.max_buffers = (uint32_t)v;
                        break;
                case OPT_MAX_QUEUE:
                        bad = parse_u64(optarg, 1, UINT32_MAX, &v);
                        cfg->lim.max_queue_ops = (uint32_t)v;
                        break;
                case OPT_MAX_SESSIONS:
                        bad = parse_u64(optarg, 1, 1u << 20, &v);
                        cfg->lim.max_sessions = (uint32_t)v;
                        break;
                case OPT_MAX_BUFFER_BYTES:
                        bad = parse_bytes(optarg, 1, 1ull << 48, &v);
                        cfg->lim.max_buffer_bytes = v;
                        break;
                case OPT_MAX_OUTPUT:
                        bad = parse_bytes(optarg, 1u << 16, 1ull << 40, &v);
                        cfg->lim.max_output_bytes = v;
                        break;
                case OPT_USER_INFLIGHT:
                        bad = parse_u64(optarg, 1, UINT32_MAX, &v);
                        cfg->lim.max_user_inflight_ops = (uint32_t)v;
                        break;
                case OPT_USER_BYTES:
                        bad = parse_bytes(optarg, 1, 1ull << 52, &v);
                        cfg->lim.max_user_buffer_bytes = v;
                        break;
                case OPT_USER_SHARE:
                        bad = parse_u64(optarg, 1, 100, &v);
                        cfg->lim.max_user_share = (uint32_t)v;
                        break;
                case OPT_USER_TASK_SHARE:
                        bad = parse_u64(optarg, 1, 100, &v);
                        cfg->lim.max_user_task_share = (uint32_t)v;
                        break;
                case OPT_ALLOW_UID:
                        bad = parse_ids(optarg, 0, &cfg->allow_uids, &cfg->n_allow_uids);
                        break;
                case OPT_ALLOW_GID:
                        bad = parse_ids(optarg, 1, &cfg->allow_gids, &cfg->n_allow_gids);
                        break;
                case OPT_ADMIN_GID:
                        bad = parse_ids(optarg, 1, &cfg->admin_gids, &cfg->n_admin_gids);
                        break;
                case OPT_CONFIG:
                        break; /* read before the other options */
                case OPT_USER_SESSIONS:
                        bad = parse_u64(optarg, 1, 1u << 20, &v);
                        cfg->user_sessions_arg = (uint32_t)v;
                        break;
                case OPT_FIRST_SLOTS:
                        bad = parse_u64(optarg, 0, 1u << 20, &v);
                        cfg->first_slots_arg = (uint32_t)v;
                        break;
                case OPT_FRAME_TIMEOUT:
                        v = 0; /* 0: never */
                        bad = strcmp(optarg, "0") && parse_u64(optarg, 10, 3600000, &v);
                        cfg->lim.frame_timeout_ms = (uint32_t)v;
                        break;
                case OPT_IDLE_TIMEOUT:
                        v = 0; /* 0: never */
                        bad = strcmp(optarg, "0") && parse_u64(optarg, 10, 86400000, &v);
                        cfg->lim.idle_timeout_ms = (uint32_t)v;
                        break;
                case OPT_USER_BUFFERS:
                        bad = parse_u64(optarg, 1, 1u << 24, &v);
                        cfg->lim.max_user_buffers = (uint32_t)v;
                        break;
                case OPT_MAPPINGS:
                        v = MAPPINGS_AUTO;
                        bad = strcmp(optarg, "auto") && parse_u64(optarg, 1, INT32_MAX, &v);
                        cfg->lim.max_mappings = (uint32_t)v;
                        break;
                case OPT_SESSION_INLINE:
                        bad = parse_bytes(optarg, 1, 1ull << 48, &v);
                        cfg->lim.max_session_inline_bytes = v;
                        break;
                case OPT_USER_INLINE:
                        bad = parse_bytes(optarg, 1, 1ull << 52, &v);
                        cfg->lim.max_user_inline_bytes = v;
                        break;
                case OPT_HELLO_TIMEOUT:
                        bad = parse_u64(optarg, 10, 3600000, &v);
                        cfg->lim.hello_timeout_ms = (uint32_t)v;
                        break;
                case OPT_METRICS:
                        bad = strncmp(optarg, "unix:", 5) && strncmp(optarg, "tcp:", 4);
                        cfg->metrics_listen = optarg;
                        break;
                default:
                        bad_option(c, argv);
                        return -EINVAL;
                }
                if (bad) {
                        if (li >= 0)
                                fprintf(stderr, "gemmd: invalid value for --%s: %s\n",
                                        options[li].name, optarg);
                        else
                                fprintf(stderr, "gemmd: invalid value for -%c: %s\n", c, optarg);
                        return -EINVAL;
                }
                li = -1;
        }
        if (optind < argc) {
                fprintf(stderr, "gemmd: unexpected argument: %s\n", argv[optind]);
                return -EINVAL;
        }
        if (in_file)
                return 0;
        /* The CPU backend answers early only under early completion:
         * said once here for the daemon and its device processes. */
        cfg->cpu_early = cfg->cpu_early && cfg->early_completion;
        if (cfg->spin_us == SPIN_AUTO) {
                long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

                cfg->spin_us = cfg->backend != BACKEND_CPU && ncpu >= 4 ? 50 : 0;
        }
        config_session_limits(cfg);
        if (cfg->lim.max_mappings == MAPPINGS_AUTO)
                cfg->lim.max_mappings = auto_mappings();
        if (cfg->lim.max_session_inline_bytes > cfg->lim.max_user_inline_bytes)
                cfg->lim.max_session_inline_bytes = cfg->lim.max_user_inline_bytes;
        return check_frame_bytes(cfg);
}

/* Parses the command line (and the --config file it names); returns 0, 1
 * after --help or --version, or -EINVAL after saying what is wrong in a
 * line or two and where to look. */
int config_parse_args(struct gemmd_config *cfg, int argc, char **argv)
{
        int rc = parse_args(cfg, argc, argv);

        if (rc < 0)
                fprintf(stderr, "Try 'gemmd --help'.\n");
        return rc;
}

/*
 * metrics.c - Prometheus metrics: the counters only this module keeps, the
 * rendering of every metric, and a minimal HTTP/1.x endpoint on libuv.
 */
#include "daemon/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/cpuacct.h"
#include "daemon/log.h"
#include "daemon/pcount.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/unixsock.h"
#include "gemmd.h"

/* Wire codes (gemmd.v1.Code) as label values; the same words as stats.c. */
static const char *const code_names[] = {
        "ok",       "protocol", "version",      "too_big",    "invalid",   "bounds",
        "overflow", "no_buffer", "busy",        "limit",      "unsupported", "device",
        "shutdown", "canceled", "disconnected", "permission", "no_ticket", "resource",
};
#define NNAMED (sizeof(code_names) / sizeof(code_names[0]))
#define NCODES 32 /* as server.rejections; codes past NNAMED print as numbers */
#define NKINDS 2  /* gemm, syr2k */
#define NDTYPES 4 /* f32, f16, bf16, f64 */

static const char *const kind_names[NKINDS] = {"gemm", "syr2k"};

/* What one uid did, as one thread counted it. The slot with other == 1
 * collects every uid past METRICS_MAX_UIDS, so the number of series stays
 * bounded. The table (M.uids) holds the first thread's slot of each uid;
 * every other thread that counts for the uid gets a slot of its own,
 * chained from that one (`more`), so that no two threads add to one cache
 * line (pcount.h says why); a render sums the chain. */
struct uid_counts {
        uid_t uid;
        int other;
        const void *owner; /* the counting thread's token */
        struct uid_counts *more;
        uint64_t ops[NKINDS][NDTYPES][NCODES];
        uint64_t requests[NCODES];
        uint64_t errors[NCODES];
};

/* One HTTP connection. It owns two handles (the stream and its deadline)
 * and frees itself after the second close callback. */
struct mconn {
        union {
                uv_handle_t h;
                uv_stream_t s;
                uv_tcp_t tcp;
                uv_pipe_t pipe;
        } u;
        uv_timer_t timer;
        struct mconn *next, *prev;
        int closing;
        int pending_closes;
        size_t len;
        char req[METRICS_MAX_REQUEST];
        uv_write_t wr;
        uv_shutdown_t sd;
        char *head, *body; /* the response, freed with the connection */
};

static struct {
        struct server *srv;
        union {
                uv_handle_t h;
                uv_stream_t s;
                uv_tcp_t tcp;
                uv_pipe_t pipe;
        } lis;
        int listening;
        int is_unix;
        char *unix_path; /* the socket file we created, unlinked on stop */
        struct mconn *conns;
        uint32_t nconns;
        uint64_t scrapes, refused;

        struct uid_counts **uids;
        uint32_t nuids;
        struct uid_counts *other;
} M;

/* ---- counters --------------------------------------------------------- */

/* The table of per-uid counts: every event loop counts, and loop 0
 * renders. The counts themselves are added to without it. */
static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;

/* The counts of `uid`, created on first use; NULL only when out of memory. */
static struct uid_counts *uid_slot(uid_t uid)
{
        static uint32_t last; /* the slot found last time: most lookups repeat */
        struct uid_counts *u;

        if (last < M.nuids && M.uids[last]->uid == uid)
                return M.uids[last];
        for (uint32_t i = 0; i < M.nuids; i++)
                if (M.uids[i]->uid == uid) {
                        last = i;
                        return M.uids[i];
                }
        if (M.nuids >= METRICS_MAX_UIDS) {
                if (!M.other) {
                        M.other = calloc(1, sizeof(*M.other));
                        if (M.other)
                                M.other->other = 1;
                }
                return M.other;
        }
        u = calloc(1, sizeof(*u));
        if (!u)
                return NULL;
        if (M.nuids % 16 == 0) {
                struct uid_counts **v = realloc(M.uids, (M.nuids + 16) * sizeof(*v));

                if (!v) {
                        free(u);
                        return NULL;
                }
                M.uids = v;
        }
        u->uid = uid;
        M.uids[M.nuids] = u;
        last = M.nuids++;
        return u;
}

/* The calling thread's own slot in the chain of `head` (the table's slot
 * of a uid), made on first use; NULL when out of memory. With
 * counts_lock held. */
static struct uid_counts *own_slot(struct uid_counts *head)
{
        const void *me = pc_thread_token();
        struct uid_counts *u;

        if (!head->owner)
                head->owner = me;
        for (u = head; u; u = u->more)
                if (u->owner == me)
                        return u;
        if (posix_memalign((void **)&u, 64, sizeof(*u)))
                return NULL;
        memset(u, 0, sizeof(*u));
        u->uid = head->uid;
        u->other = head->other;
        u->owner = me;
        u->more = head->more;
        head->more = u;
        return u;
}

/* The counts of `uid` for a counting thread, its own slot, through its
 * own small cache of slots found before (a slot lives as long as the
 * daemon), so that the loops take the table's lock only for a uid new to
 * them. */
static struct uid_counts *uid_counts_of(uid_t uid)
{
        static __thread struct {
                uid_t uid;
                struct uid_counts *u;
        } cache[8];
        const unsigned h = (unsigned)uid % 8;
        struct uid_counts *u;

        if (cache[h].u && cache[h].uid == uid)
                return cache[h].u;
        pthread_mutex_lock(&counts_lock);
        u = uid_slot(uid);
        if (u)
                u = own_slot(u);
        pthread_mutex_unlock(&counts_lock);
        if (u) {
                cache[h].uid = uid;
                cache[h].u = u;
        }
        return u;
}

/* One more event on counter *c, seen by a render at any time. */
static void bump(uint64_t *c, uint64_t by)
{
        __atomic_fetch_add(c, by, __ATOMIC_RELAXED);
}

/* A counter as a render reads it while others count. */
static uint64_t ld(const uint64_t *c)
{
        return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static unsigned code_index(int err)
{
        int code = frame_err_to_code(err);

        return code >= 0 && code < NCODES ? (unsigned)code : GEMMD__V1__CODE__DEVICE;
}

void metrics_count_request(const struct request *r)
{
        struct uid_counts *u = uid_counts_of(r->s->cred.uid);
        uint64_t queue_ns = 0, run_ns = 0;
        int status = 0;

        for (uint32_t i = 0; i < r->nops; i++) {
                const struct op *o = &r->ops[i];
                unsigned kind = o->kp.kind == SCHED_SYR2K, dt = o->kp.dtype;

                if (o->status && !status)
                        status = o->status;
                if (u && dt < NDTYPES)
                        bump(&u->ops[kind][dt][code_index(o->status)], 1);
                if (!o->t_launch_ns)
                        continue; /* dropped before it ran */
                if (o->t_launch_ns > r->t_admit_ns)
                        queue_ns += o->t_launch_ns - r->t_admit_ns;
                if (o->t_done_ns > o->t_launch_ns && o->group_size)
                        run_ns += (o->t_done_ns - o->t_launch_ns) / o->group_size;
        }
        if (u)
                bump(&u->requests[code_index(status)], 1);
        if (queue_ns)
                pc_add(&r->s->srv->counts, PC_QUEUE_SUM_NS, queue_ns);
        if (run_ns)
                pc_add(&r->s->srv->counts, PC_RUN_SUM_NS, run_ns);
}

void metrics_count_error(uid_t uid, int code)
{
        struct uid_counts *u = uid_counts_of(uid);

        if (u && code >= 0 && code < NCODES)
                bump(&u->errors[code], 1);
}

/* ---- rendering -------------------------------------------------------- */

static void code_label(char *buf, size_t len, unsigned code)
{
        if (code < NNAMED)
                snprintf(buf, len, "%s", code_names[code]);
        else
                snprintf(buf, len, "%u", code);
}

static void uid_label(char *buf, size_t len, const struct uid_counts *u)
{
        if (u->other)
                snprintf(buf, len, "other");
        else
                snprintf(buf, len, "%u", (unsigned)u->uid);
}

/* Writes s as a label value: backslash, double quote and newline escaped. */
static void put_label_value(FILE *f, const char *s)
{
        for (; *s; s++) {
                if (*s == '\\' || *s == '"')
                        fprintf(f, "\\%c", *s);
                else if (*s == '\n')
                        fputs("\\n", f);
                else
                        fputc(*s, f);
        }
}

static void header(FILE *f, const char *name, const char *type, const char *help)
{
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metric_u64(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
        header(f, name, type, help);
        fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void metric_f(FILE *f, const char *name, const char *type, const char *help, double v)
{
        header(f, name, type, help);
        fprintf(f, "%s %.9g\n", name, v);
}

/* The counter at byte offset `off` of struct uid_counts, summed over
 * u's chain (every thread's slot of u's uid). With counts_lock held. */
static uint64_t chain_sum(const struct uid_counts *u, size_t off)
{
        uint64_t sum = 0;

        for (; u; u = u->more)
                sum += ld((const uint64_t *)((const char *)u + off));
        return sum;
}

#define SUM(u, field) chain_sum((u), offsetof(struct uid_counts, field))

/* Every uid slot, the overflow one last. */
static struct uid_counts *uid_at(uint32_t i)
{
        return i < M.nuids ? M.uids[i] : M.other;
}

static uint32_t uid_slots(void)
{
        return M.nuids + (M.other != NULL);
}

static void render_counts(FILE *f)
{
        char code[16], uid[16];

        header(f, "gemmd_requests_total", "counter",
               "Admitted requests (submits) answered, by uid and status (the first failing op's code)");
        for (uint32_t i = 0; i < uid_slots(); i++) {
                const struct uid_counts *u = uid_at(i);

                uid_label(uid, sizeof(uid), u);
                for (unsigned c = 0; c < NCODES; c++) {
                        const uint64_t v = SUM(u, requests[c]);

                        if (!v)
                                continue;
                        code_label(code, sizeof(code), c);
                        fprintf(f, "gemmd_requests_total{uid=\"%s\",status=\"%s\"} %llu\n", uid,
                                code, (unsigned long long)v);
                }
        }
        header(f, "gemmd_ops_total", "counter",
               "Ops of admitted requests answered, by op, dtype, status and uid");
        for (uint32_t i = 0; i < uid_slots(); i++) {
                const struct uid_counts *u = uid_at(i);

                uid_label(uid, sizeof(uid), u);
                for (unsigned k = 0; k < NKINDS; k++)
                        for (unsigned d = 0; d < NDTYPES; d++)
                                for (unsigned c = 0; c < NCODES; c++) {
                                        const uint64_t v = SUM(u, ops[k][d][c]);

                                        if (!v)
                                                continue;
                                        code_label(code, sizeof(code), c);
                                        fprintf(f, "gemmd_ops_total{op=\"%s\",dtype=\"%s\","
                                                   "status=\"%s\",uid=\"%s\"} %llu\n",
                                                kind_names[k], dtype_name(d), code, uid,
                                                (unsigned long long)v);
                                }
        }
        header(f, "gemmd_error_replies_total", "counter",
               "Error replies sent to sessions (rejected submits, failed registrations, protocol errors), by uid and code");
        for (uint32_t i = 0; i < uid_slots(); i++) {
                const struct uid_counts *u = uid_at(i);

                uid_label(uid, sizeof(uid), u);
                for (unsigned c = 0; c < NCODES; c++) {
                        const uint64_t v = SUM(u, errors[c]);

                        if (!v)
                                continue;
                        code_label(code, sizeof(code), c);
                        fprintf(f, "gemmd_error_replies_total{uid=\"%s\",code=\"%s\"} %llu\n", uid,
                                code, (unsigned long long)v);
                }
        }
}

static void render_server(FILE *f, struct server *srv, double up_s)
{
        const struct limits *lim = &srv->cfg->lim;
        uint64_t nbuf[2] = {0, 0}, bytes[2] = {0, 0};
        char code[16];

        header(f, "gemmd_build_info", "gauge", "Version of this daemon (always 1)");
        fprintf(f, "gemmd_build_info{version=\"%s\",protocol=\"%d\"} 1\n", GEMMD_VERSION,
                GEMMD_PROTOCOL_VERSION);
        metric_f(f, "gemmd_uptime_seconds", "gauge", "Seconds since the daemon started", up_s);
        metric_u64(f, "gemmd_draining", "gauge", "1 while the daemon finishes its work before exiting",
                   (uint64_t)srv->draining);
        pthread_mutex_lock(&srv->lock);
        metric_u64(f, "gemmd_sessions", "gauge", "Open client sessions", srv->nsessions);
        metric_u64(f, "gemmd_sessions_opened_total", "counter", "Client sessions accepted",
                   srv->sessions_total);
        metric_u64(f, "gemmd_sessions_limit", "gauge", "Most concurrent sessions (--max-sessions)",
                   lim->max_sessions);
        metric_u64(f, "gemmd_requests_admitted_total", "counter",
                   "Requests (submits) that passed validation and admission", pc_read(&srv->counts, PC_REQUESTS));
        metric_u64(f, "gemmd_queue_ops", "gauge",
                   "Ops admitted and not yet answered, all sessions (the queue depth)",
                   srv->queued_ops);
        for (int l = 0; l < srv->nloops; l++)
                for (struct session *s = srv->loops[l].sessions; s; s = s->next)
                        for (uint32_t i = 0; i < s->bufs.n; i++) {
                                const struct gbuf *b = s->bufs.v[i];
                                int k = b->kind == GBUF_CUDA;

                                nbuf[k]++;
                                bytes[k] += b->bytes;
                        }
        pthread_mutex_unlock(&srv->lock);
        metric_u64(f, "gemmd_queue_ops_limit", "gauge",
                   "Most ops admitted and not yet answered (--max-queue-ops)", lim->max_queue_ops);
        /* Every request crosses an event loop thread: busy seconds that
         * grow as fast as uptime mean a loop, not a device, sets the pace. */
        header(f, "gemmd_loop_busy_seconds_total", "counter",
               "Seconds each event loop thread spent in its callbacks (reading, admitting, taking "
               "completions in)");
        for (int l = 0; l < srv->nloops; l++)
                fprintf(f, "gemmd_loop_busy_seconds_total{loop=\"%d\"} %.6f\n", l,
                        srv->loops[l].loop_busy_ns / 1e9);
        header(f, "gemmd_registered_buffers", "gauge", "Buffers registered by open sessions, by kind");
        fprintf(f, "gemmd_registered_buffers{kind=\"shm\"} %llu\n", (unsigned long long)nbuf[0]);
        fprintf(f, "gemmd_registered_buffers{kind=\"cuda\"} %llu\n", (unsigned long long)nbuf[1]);
        header(f, "gemmd_registered_bytes", "gauge", "Bytes of the buffers registered by open sessions, by kind");
        fprintf(f, "gemmd_registered_bytes{kind=\"shm\"} %llu\n", (unsigned long long)bytes[0]);
        fprintf(f, "gemmd_registered_bytes{kind=\"cuda\"} %llu\n", (unsigned long long)bytes[1]);

        header(f, "gemmd_rejections_total", "counter",
               "Errors answered by code, including connections refused past --max-sessions");
        for (unsigned c = 1; c < NCODES; c++) {
                if (!srv->rejections[c])
                        continue;
                code_label(code, sizeof(code), c);
                fprintf(f, "gemmd_rejections_total{code=\"%s\"} %llu\n", code,
                        (unsigned long long)srv->rejections[c]);
        }
}

/* What the host's CPUs paid, by thread role. The roles but device-process
 * add up to the daemon's process; rate() over gemmd_device_ops_total gives
 * the CPU time per op. */
static void render_cpu(FILE *f, struct server *srv)
{
        struct cpuacct a;

        cpuacct_read(srv, &a);
        header(f, "gemmd_cpu_seconds_total", "counter",
               "CPU seconds used since the start, by thread role (other: the daemon's process time "
               "no role names; device-process: the device processes)");
        for (int r = 0; r < CPU_ROLES; r++)
                fprintf(f, "gemmd_cpu_seconds_total{role=\"%s\"} %.6f\n", cpuacct_role_name(r), a.s[r]);
}

/* Writes a log2 histogram (bucket i holds the values v with i ==
 * hist_bucket(v): [2^i, 2^(i+1)) and 0 in bucket 0) as a Prometheus
 * histogram. Bucket i's bound is 2^(i+1) * scale, less `minus` (1 for
 * integer counts, whose bucket ends at 2^(i+1) - 1); the last bucket, which
 * also holds every larger value, only counts towards +Inf. */
static void histogram(FILE *f, const char *name, const char *help, const uint64_t *h,
                      double scale, double minus, double sum)
{
        uint64_t cum = 0;

        header(f, name, "histogram", help);
        for (int i = 0; i < HIST_BUCKETS - 1; i++) {
                cum += h[i];
                fprintf(f, "%s_bucket{le=\"%.9g\"} %llu\n", name,
                        (double)(2ull << i) * scale - minus, (unsigned long long)cum);
        }
        cum += h[HIST_BUCKETS - 1];
        fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
        fprintf(f, "%s_sum %.9g\n", name, sum);
        fprintf(f, "%s_count %llu\n", name, (unsigned long long)cum);
}

/* Per-device metrics, and the histograms summed over devices. */
static void render_devices(FILE *f, struct server *srv, double up_s)
{
        int n = srv->nworkers;
        struct worker_stats *st = calloc(n ? (size_t)n : 1, sizeof(*st));
        uint32_t *pending = calloc(n ? (size_t)n : 1, sizeof(*pending));
        uint32_t *inflight = calloc(n ? (size_t)n : 1, sizeof(*inflight));
        uint64_t gs[HIST_BUCKETS] = {0}, qu[HIST_BUCKETS] = {0}, ru[HIST_BUCKETS] = {0};
        uint64_t ops = 0;

        if (!st || !pending || !inflight)
                goto out;
        for (int i = 0; i < n; i++)
                worker_get_stats(&srv->workers[i], &st[i], &pending[i], &inflight[i]);

        header(f, "gemmd_device_info", "gauge", "The daemon's devices (always 1)");
        for (int i = 0; i < n; i++) {
                fprintf(f, "gemmd_device_info{device=\"%d\",backend=\"%s\",name=\"", i,
                        srv->backends[i]->kind);
                put_label_value(f, srv->backends[i]->name);
                fprintf(f, "\"} 1\n");
        }
#define PER_DEVICE(name, type, help, fmt, expr)                                     \
        do {                                                                        \
                header(f, name, type, help);                                        \
                for (int i = 0; i < n; i++)                                         \
                        fprintf(f, name "{device=\"%d\"} " fmt "\n", i, (expr));    \
        } while (0)
        PER_DEVICE("gemmd_device_queued_ops", "gauge", "Ops queued on the device, not yet in a group",
                   "%u", pending[i]);
        PER_DEVICE("gemmd_device_groups_inflight", "gauge", "Groups launched and not finished",
                   "%u", inflight[i]);
        PER_DEVICE("gemmd_device_groups_total", "counter", "Groups run", "%llu",
                   (unsigned long long)st[i].groups);
        PER_DEVICE("gemmd_device_ops_total", "counter", "Ops run in groups", "%llu",
                   (unsigned long long)st[i].ops);
        PER_DEVICE("gemmd_device_ops_failed_total", "counter", "Ops whose group failed", "%llu",
                   (unsigned long long)st[i].ops_failed);
        PER_DEVICE("gemmd_device_process_restarts_total", "counter",
                   "Times the device's process was replaced (after a fault it could not survive)",
                   "%llu", (unsigned long long)backend_proc_restarts(srv->backends[i]));
        PER_DEVICE("gemmd_device_tiles_total", "counter", "Tiles computed", "%llu",
                   (unsigned long long)st[i].tiles);
        PER_DEVICE("gemmd_device_flops_total", "counter",
                   "Floating-point operations of the ops that succeeded (2mnk each)", "%llu",
                   (unsigned long long)st[i].flops);
        PER_DEVICE("gemmd_device_busy_seconds_total", "counter",
                   "Seconds with at least one group in flight", "%.9g", st[i].busy_ns / 1e9);
        PER_DEVICE("gemmd_device_loaded_seconds_total", "counter",
                   "Seconds with ops queued or groups in flight (busy over loaded: the share of the time "
                   "with work that the device ran some)",
                   "%.9g", st[i].loaded_ns / 1e9);
        PER_DEVICE("gemmd_device_busy_ratio", "gauge",
                   "Fraction of the uptime with at least one group in flight", "%.9g",
                   up_s > 0 ? st[i].busy_ns / 1e9 / up_s : 0.0);
        PER_DEVICE("gemmd_device_flops_per_second", "gauge",
                   "Achieved FLOP/s while busy, since the start", "%.9g",
                   st[i].busy_ns ? st[i].flops / (st[i].busy_ns / 1e9) : 0.0);
        PER_DEVICE("gemmd_device_plan_seconds_total", "counter", "Seconds spent building plans",
                   "%.9g", st[i].plan_ns / 1e9);
        PER_DEVICE("gemmd_device_launch_seconds_total", "counter",
                   "Host seconds spent launching groups (copies, encoding, launch calls)", "%.9g",
                   st[i].launch_ns / 1e9);
        PER_DEVICE("gemmd_device_seconds_total", "counter",
                   "Device seconds of the timed groups, where the backend measures it", "%.9g",
                   st[i].device_ns / 1e9);
        PER_DEVICE("gemmd_device_timed_groups_total", "counter",
                   "Groups whose device time was measured (see --timing-every)", "%llu",
                   (unsigned long long)st[i].timed_groups);
        PER_DEVICE("gemmd_device_wide_groups_total", "counter",
                   "Groups run on the device's wide tile (--wide-tiles)", "%llu",
                   (unsigned long long)st[i].wide_groups);
        PER_DEVICE("gemmd_device_narrow_groups_total", "counter",
                   "Groups run on the device's narrow tile (--narrow-tiles)", "%llu",
                   (unsigned long long)st[i].narrow_groups);
        PER_DEVICE("gemmd_device_split_groups_total", "counter",
                   "Groups run on a split plan (--mode split, or auto's choice)", "%llu",
                   (unsigned long long)st[i].split_groups);
        PER_DEVICE("gemmd_device_fill_groups_total", "counter",
                   "Of the groups on a split plan, those of one wave cut to fill the device (the fill split)", "%llu",
                   (unsigned long long)st[i].fill_groups);
        PER_DEVICE("gemmd_device_resident_groups_total", "counter",
                   "Groups its resident kernel took (--resident)", "%llu",
                   (unsigned long long)st[i].resident_groups);
        PER_DEVICE("gemmd_device_loop_groups_total", "counter",
                   "Groups launched by the event loop that read them, onto an idle device (--loop-launch)", "%llu",
                   (unsigned long long)st[i].loop_groups);
        PER_DEVICE("gemmd_device_packed_groups_total", "counter",
                   "Groups run with packed copies of 16-bit operands the Hopper kernel cannot read in place", "%llu",
                   (unsigned long long)st[i].packed_groups);
        PER_DEVICE("gemmd_device_ops_early_total", "counter",
                   "Ops answered before their group ended (--early-completion)", "%llu",
                   (unsigned long long)st[i].ops_early);
        PER_DEVICE("gemmd_device_ops_word_total", "counter",
                   "Ops the GPU answered itself, in their clients' completion words", "%llu",
                   (unsigned long long)st[i].ops_word_dev);
        PER_DEVICE("gemmd_device_idle_gaps_total", "counter",
                   "Idle gaps between groups while work was waiting", "%llu",
                   (unsigned long long)st[i].idle_gaps);
        PER_DEVICE("gemmd_device_idle_gap_seconds_total", "counter",
                   "Seconds of those idle gaps", "%.9g", st[i].idle_gap_ns / 1e9);
        PER_DEVICE("gemmd_device_capped_seconds_total", "counter",
                   "Seconds with ops waiting while every group slot was in flight (--max-groups-inflight)", "%.9g",
                   st[i].capped_ns / 1e9);
        PER_DEVICE("gemmd_device_tasks_total", "counter",
                   "Clients' device memory opened, allocated, closed or freed on the device's worker thread", "%llu",
                   (unsigned long long)st[i].tasks);
        PER_DEVICE("gemmd_device_task_seconds_total", "counter",
                   "Seconds the device's worker thread spent on those tasks, launching nothing", "%.9g",
                   st[i].task_ns / 1e9);
        PER_DEVICE("gemmd_device_tasks_held_total", "counter",
                   "Of those tasks, the ones that waited for their user's share (--max-user-task-share)", "%llu",
                   (unsigned long long)st[i].tasks_held);
        PER_DEVICE("gemmd_device_worker_seconds_total", "counter",
                   "Seconds of the loaded time the device's worker thread was at work, neither polling for work nor asleep", "%.9g",
                   st[i].worker_ns / 1e9);
#undef PER_DEVICE

        for (int i = 0; i < n; i++) {
                for (int b = 0; b < HIST_BUCKETS; b++) {
                        gs[b] += st[i].group_size_hist[b];
                        qu[b] += st[i].queue_us_hist[b];
                        ru[b] += st[i].run_us_hist[b];
                }
                ops += st[i].ops;
        }
        /* The buckets come from the workers; the sums of the times are added
         * up here as requests are answered, so a scrape may see a sum a few
         * groups behind its buckets. */
        histogram(f, "gemmd_group_size_ops", "Ops per group, all devices", gs, 1, 1, (double)ops);
        histogram(f, "gemmd_queue_time_seconds",
                  "Per op: admitted to its group's launch, all devices", qu, 1e-6, 0,
                  pc_read(&srv->counts, PC_QUEUE_SUM_NS) / 1e9);
        histogram(f, "gemmd_run_time_seconds", "Per group: launch to done, all devices", ru, 1e-6, 0,
                  pc_read(&srv->counts, PC_RUN_SUM_NS) / 1e9);
out:
        free(st);
        free(pending);
        free(inflight);
}

int metrics_render(struct server *srv, char **out, size_t *len)
{
        double up_s = (now_ns() - srv->t_start_ns) / 1e9;
        FILE *f = open_memstream(out, len);

        if (!f)
                return -ENOMEM;
        render_server(f, srv, up_s);
        render_devices(f, srv, up_s);
        render_cpu(f, srv);
        pthread_mutex_lock(&counts_lock);
        render_counts(f);
        pthread_mutex_unlock(&counts_lock);
        metric_u64(f, "gemmd_metrics_scrapes_total", "counter", "Answers of this endpoint",
                   M.scrapes);
        metric_u64(f, "gemmd_metrics_refused_total", "counter",
                   "Metrics connections refused past the connection cap", M.refused);
        if (fclose(f) != 0) {
                free(*out);
                *out = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* ---- HTTP ------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h)
{
        struct mconn *c = h->data;

        if (--c->pending_closes == 0) {
                free(c->head);
                free(c->body);
                free(c);
        }
}

static void conn_close(struct mconn *c)
{
        if (c->closing)
                return;
        c->closing = 1;
        if (c->prev)
                c->prev->next = c->next;
        else
                M.conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        M.nconns--;
        uv_close(&c->u.h, on_conn_closed);
        uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timeout(uv_timer_t *t)
{
        conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
        conn_close(req->data);
}

static void on_written(uv_write_t *req, int status)
{
        struct mconn *c = req->data;

        if (status || c->closing || uv_shutdown(&c->sd, &c->u.s, on_shutdown))
                conn_close(c);
}

/* Queues the response and closes the connection once it is written. */
static void respond(struct mconn *c, const char *status, const char *extra, char *body,
                    size_t body_len, int send_body)
{
        uv_buf_t bufs[2];
        int n;

        uv_read_stop(&c->u.s);
        c->body = body;
        n = asprintf(&c->head,
                     "HTTP/1.1 %s\r\n"
                     "Content-Type: %s\r\n"
                     "Content-Length: %zu\r\n"
                     "%s"
                     "Connection: close\r\n"
                     "\r\n",
                     status, body && !strncmp(status, "200", 3)
                                     ? "text/plain; version=0.0.4; charset=utf-8"
                                     : "text/plain; charset=utf-8",
                     body_len, extra ? extra : "");
        if (n < 0) {
                c->head = NULL;
                conn_close(c);
                return;
        }
        bufs[0] = uv_buf_init(c->head, (unsigned)n);
        bufs[1] = uv_buf_init(body, send_body ? (unsigned)body_len : 0);
        c->wr.data = c;
        c->sd.data = c;
        if (uv_write(&c->wr, &c->u.s, bufs, 2, on_written))
                conn_close(c);
}

static void respond_text(struct mconn *c, const char *status, const char *extra,
                         const char *text, int send_body)
{
        char *body = strdup(text);

        if (!body) {
                conn_close(c);
                return;
        }
        respond(c, status, extra, body, strlen(body), send_body);
}

/* Answers the request line in c->req (whose headers are complete). */
static void handle_request(struct mconn *c)
{
        char method[8], path[256], version[16];
        size_t plen;
        char *body;
        size_t len;
        int head;

        if (sscanf(c->req, "%7s %255s %15s", method, path, version) != 3 ||
            strncmp(version, "HTTP/1.", 7)) {
                respond_text(c, "400 Bad Request", NULL, "bad request\n", 1);
                return;
        }
        head = !strcmp(method, "HEAD");
        if (strcmp(method, "GET") && !head) {
                respond_text(c, "405 Method Not Allowed", "Allow: GET, HEAD\r\n",
                             "only GET and HEAD\n", 1);
                return;
        }
        plen = strcspn(path, "?#");
        if (plen != strlen("/metrics") || strncmp(path, "/metrics", plen)) {
                respond_text(c, "404 Not Found", NULL, "not found: try /metrics\n", !head);
                return;
        }
        M.scrapes++; /* this answer included */
        if (metrics_render(M.srv, &body, &len)) {
                respond_text(c, "500 Internal Server Error", NULL, "out of memory\n", !head);
                return;
        }
        respond(c, "200 OK", NULL, body, len, !head);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
        struct mconn *c = h->data;

        /* One byte stays free for the NUL that ends the request text. */
        *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
        struct mconn *c = s->data;

        if (nread < 0) {
                conn_close(c); /* end of stream or error before a whole request */
                return;
        }
        c->len += (size_t)nread;
        c->req[c->len] = '\0';
        if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n"))
                handle_request(c);
        else if (c->len == sizeof(c->req) - 1)
                respond_text(c, "431 Request Header Fields Too Large", NULL,
                             "request too large\n", 1);
}

static void on_connection(uv_stream_t *lis, int status)
{
        struct mconn *c;
        int rc;

        if (status < 0) {
                log_warn("metrics: accept: %s", uv_strerror(status));
                return;
        }
        c = calloc(1, sizeof(*c));
        if (!c) {
                log_warn("metrics: out of memory for a connection");
                return; /* left in the backlog; the next callback retries */
        }
        rc = M.is_unix ? uv_pipe_init(lis->loop, &c->u.pipe, 0) : uv_tcp_init(lis->loop, &c->u.tcp);
        if (rc) {
                free(c);
                return;
        }
        uv_timer_init(lis->loop, &c->timer);
        c->u.h.data = c;
        c->timer.data = c;
        c->pending_closes = 2;
        c->next = M.conns;
        if (M.conns)
                M.conns->prev = c;
        M.conns = c;
        M.nconns++;
        if (uv_accept(lis, &c->u.s)) {
                conn_close(c);
                return;
        }
        if (M.nconns > METRICS_MAX_CONNS) {
                M.refused++;
                conn_close(c);
                return;
        }
        uv_timer_start(&c->timer, on_timeout, METRICS_CONN_TIMEOUT_MS, 0);
        if (uv_read_start(&c->u.s, on_alloc, on_read))
                conn_close(c);
}

/* ---- the listener ----------------------------------------------------- */


/* Splits "HOST:PORT" into host (a name, an IPv4 address, or an IPv6
 * address in brackets; empty for all addresses) and port. Returns 0 or
 * -EINVAL. */
static int split_tcp(const char *spec, char *host, size_t cap, char *port)
{
        const char *h = spec, *colon;
        size_t hlen, plen;

        if (*spec == '[') {
                const char *close_br = strchr(spec, ']');

                if (!close_br || close_br[1] != ':' || close_br == spec + 1)
                        return -EINVAL;
                h = spec + 1;
                hlen = (size_t)(close_br - h);
                colon = close_br + 1;
        } else {
                colon = strrchr(spec, ':');
                if (!colon)
                        return -EINVAL;
                hlen = (size_t)(colon - spec);
        }
        plen = strlen(colon + 1);
        if (hlen >= cap || plen == 0 || plen > 5 || strspn(colon + 1, "0123456789") != plen ||
            atoi(colon + 1) > 65535)
                return -EINVAL;
        memcpy(host, h, hlen);
        host[hlen] = '\0';
        memcpy(port, colon + 1, plen + 1);
        return 0;
}

/* A listening socket on one address; returns it or -errno. An IPv6
 * socket for all addresses takes IPv4 too, where the system allows. */
static int listen_on(const struct addrinfo *ai, int any)
{
        int fd, one = 1, off = 0, rc;

        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (any && ai->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
                rc = -errno;
                close(fd);
                return rc;
        }
        return fd;
}

/* Binds "HOST:PORT" (split_tcp): a host name is resolved and its first
 * address that can be bound serves; an empty host means every address,
 * IPv6 and IPv4 on one socket, or IPv4 alone on a host without IPv6.
 * Returns the socket, or -errno with *why saying what went wrong. */
static int bind_tcp(const char *spec, const char **why)
{
        struct addrinfo hints = {0}, *res, *ai;
        char host[256], port[6];
        int fd = -EADDRNOTAVAIL, rc;

        if (split_tcp(spec, host, sizeof(host), port))
                return -EINVAL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
        rc = getaddrinfo(*host ? host : NULL, port, &hints, &res);
        if (rc) {
                *why = gai_strerror(rc);
                return -EADDRNOTAVAIL;
        }
        /* For all addresses glibc lists 0.0.0.0 before ::, whose socket
         * would take both: IPv6 goes first. */
        for (int pass = *host ? 1 : 0; pass < 2 && fd < 0; pass++)
                for (ai = res; ai && fd < 0; ai = ai->ai_next)
                        if (pass || ai->ai_family == AF_INET6)
                                fd = listen_on(ai, !*host);
        freeaddrinfo(res);
        if (fd < 0)
                *why = strerror(-fd);
        return fd;
}

int metrics_start(struct server *srv)
{
        const char *spec = srv->cfg->metrics_listen, *why = NULL;
        int fd, rc;

        M.srv = srv;
        if (!spec)
                return 0;
        /* The socket is made with plain calls, so that a failure leaves no
         * libuv handle that the loop would have to close. */
        if (!strncmp(spec, "unix:", 5)) {
                M.is_unix = 1;
                fd = unixsock_listen(spec + 5, 64);
                if (fd >= 0) {
                        M.unix_path = strdup(spec + 5);
                        if (!M.unix_path) {
                                unlink(spec + 5);
                                close(fd);
                                fd = -ENOMEM;
                        }
                }
        } else if (!strncmp(spec, "tcp:", 4)) {
                M.is_unix = 0;
                fd = bind_tcp(spec + 4, &why);
        } else {
                fd = -EINVAL;
        }
        if (fd < 0) {
                if (fd == -EINVAL)
                        why = "expected unix:PATH or tcp:HOST:PORT";
                else if (!why)
                        why = strerror(-fd);
                log_err("--metrics-listen %s: %s", spec, why);
                return fd;
        }
        if (M.is_unix) {
                uv_pipe_init(srv->loop, &M.lis.pipe, 0);
                rc = uv_pipe_open(&M.lis.pipe, fd);
        } else {
                uv_tcp_init(srv->loop, &M.lis.tcp);
                rc = uv_tcp_open(&M.lis.tcp, fd);
        }
        if (rc)
                close(fd); /* not the handle's yet */
        M.listening = 1;
        if (!rc)
                rc = uv_listen(&M.lis.s, 64, on_connection);
        if (rc) {
                log_err("--metrics-listen %s: %s", spec, uv_strerror(rc));
                metrics_stop();
                return rc;
        }
        log_info("metrics on %s", spec);
        return 0;
}

void metrics_stop(void)
{
        if (M.listening) {
                M.listening = 0;
                uv_close(&M.lis.h, NULL);
                if (M.unix_path)
                        unlink(M.unix_path);
                free(M.unix_path);
                M.unix_path = NULL;
        }
        while (M.conns)
                conn_close(M.conns);
}

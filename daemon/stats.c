/*
 * stats.c - the daemon's counters as text for people or JSON for scripts,
 * answered to `gemmctl stats`.
 */
#include "daemon/stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cpuacct.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/users.h"
#include "gemmd.h"

static const char *code_names[] = {
        "ok",      "protocol", "version",     "too_big", "invalid",  "bounds",
        "overflow", "no_buffer", "busy",       "limit",   "unsupported", "device",
        "shutdown", "canceled", "disconnected", "permission", "no_ticket", "resource",
};
#define NCODES (sizeof(code_names) / sizeof(code_names[0]))

static void hist_text(FILE *f, const char *name, const char *unit, const uint64_t *h)
{
        int last = -1;

        for (int i = 0; i < HIST_BUCKETS; i++)
                if (h[i])
                        last = i;
        fprintf(f, "  %s:\n", name);
        if (last < 0) {
                fprintf(f, "    (none)\n");
                return;
        }
        for (int i = 0; i <= last; i++)
                fprintf(f, "    %8llu .. %-8llu %s  %llu\n", i ? 1ull << i : 0ull,
                        (2ull << i) - 1, unit, (unsigned long long)h[i]);
}

static void hist_json(FILE *f, const char *name, const uint64_t *h)
{
        fprintf(f, "\"%s\":[", name);
        for (int i = 0; i < HIST_BUCKETS; i++)
                fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)h[i]);
        fprintf(f, "]");
}

/* The loops' accounts summed (each loop's thread writes its own; a read
 * a moment old does here), and the busiest loop's busy time. */
struct loop_sum {
        uint64_t callbacks, busy_ns, busiest_ns, hist[HIST_BUCKETS], part_ns[LOOP_PARTS];
};

static struct loop_sum loop_sum(const struct server *srv)
{
        struct loop_sum a;

        memset(&a, 0, sizeof(a));
        for (int i = 0; i < srv->nloops; i++) {
                const struct evloop *ev = &srv->loops[i];

                a.callbacks += ev->loop_callbacks;
                a.busy_ns += ev->loop_busy_ns;
                if (ev->loop_busy_ns > a.busiest_ns)
                        a.busiest_ns = ev->loop_busy_ns;
                for (int j = 0; j < HIST_BUCKETS; j++)
                        a.hist[j] += ev->loop_hist[j];
                for (int j = 0; j < LOOP_PARTS; j++)
                        a.part_ns[j] += ev->loop_part_ns[j];
        }
        return a;
}

/* CPU microseconds per op of s seconds over `ops` ops (0 before any). */
static double us_per_op(double s, uint64_t ops)
{
        return ops ? s * 1e6 / (double)ops : 0.0;
}

/* What the host's CPUs paid: seconds per thread role since the start, and
 * per op run. A role shows once it has a thread or has used any time. */
static void cpu_text(struct server *srv, FILE *f)
{
        struct cpuacct a;

        cpuacct_read(srv, &a);
        fprintf(f, "cpu: %.3f s since the start (this process %.3f, device processes %.3f); %llu ops "
                   "run, %.1f us per op\n",
                a.total_s, a.process_s, a.s[CPU_DEVICE_PROCESS], (unsigned long long)a.ops,
                us_per_op(a.total_s, a.ops));
        for (int r = 0; r < CPU_ROLES; r++) {
                if (!a.n[r] && a.s[r] <= 0)
                        continue;
                fprintf(f, "  %-15s %9.3f s  %9.1f us per op", cpuacct_role_name(r), a.s[r],
                        us_per_op(a.s[r], a.ops));
                if (r == CPU_DEVICE_PROCESS)
                        fprintf(f, "  (%u process%s)", a.n[r], a.n[r] == 1 ? "" : "es");
                else if (r != CPU_OTHER)
                        fprintf(f, "  (%u thread%s)", a.n[r], a.n[r] == 1 ? "" : "s");
                fprintf(f, "\n");
        }
}

/* The same as "cpu":{...}, last in the object: a reader that looks for
 * the first "ops" finds the devices' as before. */
static void cpu_json(struct server *srv, FILE *f)
{
        struct cpuacct a;

        cpuacct_read(srv, &a);
        fprintf(f, "\"cpu\":{\"total_s\":%.6f,\"process_s\":%.6f,\"device_process_s\":%.6f,"
                   "\"ops\":%llu,\"us_per_op\":%.3f,\"roles\":{",
                a.total_s, a.process_s, a.s[CPU_DEVICE_PROCESS], (unsigned long long)a.ops,
                us_per_op(a.total_s, a.ops));
        for (int r = 0; r < CPU_ROLES; r++) {
                fprintf(f, "%s\"%s\":{\"s\":%.6f,\"us_per_op\":%.3f", r ? "," : "",
                        cpuacct_role_name(r), a.s[r], us_per_op(a.s[r], a.ops));
                /* Live threads, or processes; "other" has no count. */
                if (r != CPU_OTHER)
                        fprintf(f, ",\"%s\":%u", r == CPU_DEVICE_PROCESS ? "processes" : "threads",
                                a.n[r]);
                fprintf(f, "}");
        }
        fprintf(f, "}}");
}

/* Whether the viewer of the stats (only_uid, as stats_render) sees what
 * uid holds. */
static int shown(long long only_uid, uint32_t uid)
{
        return only_uid < 0 || (uint32_t)only_uid == uid;
}

static void render_text(struct server *srv, FILE *f, double up_s, long long only_uid)
{
        const struct loop_sum ls = loop_sum(srv);
        uint64_t pc[PC_N];

        fprintf(f, "gemmd %s, up %.1f s, %s\n", GEMMD_VERSION, up_s,
                srv->draining ? "draining" : "serving");
        pthread_mutex_lock(&srv->lock);
        pc_read_all(&srv->counts, pc);
        fprintf(f, "sessions: %u now, %llu in all\n", srv->nsessions,
                (unsigned long long)srv->sessions_total);
        fprintf(f, "requests: %llu admitted, %u ops unfinished\n", (unsigned long long)pc[PC_REQUESTS],
                srv->queued_ops);
        pthread_mutex_unlock(&srv->lock);
        fprintf(f, "replies: %llu after device work (%llu written by the completing thread, "
                   "%llu put in rings by it, %llu by completion word), done to reply packed %.1f us "
                   "mean; %llu submits came through rings; %u sessions have rings\n",
                (unsigned long long)pc[PC_REPLIES], (unsigned long long)pc[PC_REPLIES_NOW],
                (unsigned long long)pc[PC_REPLIES_RING], (unsigned long long)pc[PC_REPLIES_WORD],
                pc[PC_REPLIES] ? pc[PC_REPLY_WAIT_NS] / 1e3 / pc[PC_REPLIES] : 0.0,
                (unsigned long long)pc[PC_SUBMITS_RING], (unsigned)atomic_load(&srv->rings_now));
        fprintf(f, "client polling: %u sessions with work in flight, clients poll while at most %u "
                   "do; %llu answers asked theirs to sleep\n",
                (unsigned)atomic_load(&srv->busy_sessions), srv->poll_max,
                (unsigned long long)pc[PC_NO_POLL_REPLIES]);
        {
                const uint64_t *p = ls.part_ns;
                double busy = ls.busy_ns ? (double)ls.busy_ns : 1.0;

                fprintf(f, "loop: %d event loop%s, %llu callbacks, the busiest busy %.1f%% of the time up; "
                           "of all their busy time, recv %.0f%%, frames %.0f%% (handing ops to workers "
                           "%.0f%%), taking completions in %.0f%%\n",
                        srv->nloops, srv->nloops == 1 ? "" : "s", (unsigned long long)ls.callbacks,
                        up_s > 0 ? ls.busiest_ns / 1e7 / up_s : 0.0, 100.0 * p[LOOP_RECV] / busy,
                        100.0 * p[LOOP_FRAMES] / busy, 100.0 * p[LOOP_ENQUEUE] / busy,
                        100.0 * p[LOOP_REAP] / busy);
        }
        hist_text(f, "loop callback", "us ", ls.hist);
        fprintf(f, "rejections:");
        for (unsigned i = 1; i < NCODES; i++)
                if (srv->rejections[i])
                        fprintf(f, " %s=%llu", code_names[i], (unsigned long long)srv->rejections[i]);
        fprintf(f, "\n");
        cpu_text(srv, f);
        for (int i = 0; i < srv->nworkers; i++) {
                struct worker_stats st;
                uint32_t pending, inflight;
                struct backend *b = srv->backends[i];

                worker_get_stats(&srv->workers[i], &st, &pending, &inflight);
                double busy = up_s > 0 ? st.busy_ns / 1e9 / up_s : 0;
                double busy_loaded = st.loaded_ns ? (double)st.busy_ns / st.loaded_ns : 0;
                double tfs = st.busy_ns ? st.flops / (st.busy_ns / 1e9) / 1e12 : 0;

                fprintf(f, "device %d (%s, %s):\n", i, b->kind, b->name);
                if (backend_proc_pid(b))
                        fprintf(f, "  device process %d, started again %llu times\n",
                                backend_proc_pid(b), (unsigned long long)backend_proc_restarts(b));
                fprintf(f, "  groups %llu, ops %llu (failed %llu), tiles %llu, mean group %.1f ops\n",
                        (unsigned long long)st.groups, (unsigned long long)st.ops,
                        (unsigned long long)st.ops_failed, (unsigned long long)st.tiles,
                        st.groups ? (double)st.ops / st.groups : 0.0);
                /* Busy over the time it had work, and over the uptime: a
                 * run's share of the device, apart from the idle hours. */
                fprintf(f, "  queued %u, groups in flight %u, busy %.1f%% of the %.3f s it had work "
                           "(%.1f%% of the time up), %.3f TFLOP/s while busy\n",
                        pending, inflight, 100 * (busy_loaded > 1 ? 1 : busy_loaded), st.loaded_ns / 1e9,
                        100 * busy, tfs);
                /* Where a group's time goes: the worker's plan build and
                 * launch call, the device's time (where the backend measures
                 * it) and launch to done as the worker saw it. */
                char dev[80] = "";
                if (b->collect)
                        snprintf(dev, sizeof(dev), ", device %.1f us (%llu groups timed)",
                                 st.timed_groups ? st.device_ns / 1e3 / st.timed_groups : 0.0,
                                 (unsigned long long)st.timed_groups);
                fprintf(f, "  per group: plan build %.1f us, launch %.1f us%s, launch to done seen "
                           "%.1f us; idle gaps %llu, mean %.1f us\n",
                        st.groups ? st.plan_ns / 1e3 / st.groups : 0.0,
                        st.groups ? st.launch_ns / 1e3 / st.groups : 0.0, dev,
                        st.groups ? st.run_ns / 1e3 / st.groups : 0.0,
                        (unsigned long long)st.idle_gaps,
                        st.idle_gaps ? st.idle_gap_ns / 1e3 / st.idle_gaps : 0.0);
                if (st.recoveries)
                        fprintf(f, "  device recoveries after a device error: %llu\n",
                                (unsigned long long)st.recoveries);
                if (st.tasks)
                        fprintf(f, "  clients' device memory opened, allocated, closed or freed: %llu times, "
                                   "%.1f ms on the worker thread; %llu waited for their user's share\n",
                                (unsigned long long)st.tasks, st.task_ns / 1e6,
                                (unsigned long long)st.tasks_held);
                if (b->wide_shape)
                        fprintf(f, "  groups on the wide tile: %llu\n", (unsigned long long)st.wide_groups);
                if (b->narrow_shape)
                        fprintf(f, "  groups on the narrow tile: %llu\n", (unsigned long long)st.narrow_groups);
                if (st.split_groups)
                        fprintf(f, "  groups on split plans: %llu (%llu of one wave cut to fill the device)\n",
                                (unsigned long long)st.split_groups, (unsigned long long)st.fill_groups);
                if (st.resident_groups)
                        fprintf(f, "  groups taken by the resident kernel: %llu\n",
                                (unsigned long long)st.resident_groups);
                if (st.loop_groups)
                        fprintf(f, "  groups launched by the event loop that read them: %llu\n",
                                (unsigned long long)st.loop_groups);
                if (st.packed_groups)
                        fprintf(f, "  groups with packed copies of operands: %llu\n",
                                (unsigned long long)st.packed_groups);
                if (st.ops_early)
                        fprintf(f, "  ops answered before their group ended: %llu\n",
                                (unsigned long long)st.ops_early);
                if (st.ops_word_dev)
                        fprintf(f, "  ops answered by the GPU itself, in their completion words: %llu\n",
                                (unsigned long long)st.ops_word_dev);
                /* The queue time's parts (worker_stats.staged_ns). */
                if (st.ops)
                        fprintf(f, "  per op, admitted to launched: staged by its loop %.1f us, waiting for a "
                                   "group %.1f us, in its group before the launch %.1f us\n",
                                st.staged_ns / 1e3 / st.ops, st.waiting_ns / 1e3 / st.ops,
                                st.forming_ns / 1e3 / st.ops);
                /* How long --max-groups-inflight held work back. */
                fprintf(f, "  ops waiting with every group slot in flight: %.3f s, %.1f%% of the time it had work\n",
                        st.capped_ns / 1e9, st.loaded_ns ? 100.0 * (double)st.capped_ns / (double)st.loaded_ns : 0.0);
                /* Near 100% while ops wait for a group: the worker thread
                 * is what they wait for. */
                fprintf(f, "  its worker thread at work (not polling or asleep): %.3f s, %.1f%% of the time it had work\n",
                        st.worker_ns / 1e9, st.loaded_ns ? 100.0 * (double)st.worker_ns / (double)st.loaded_ns : 0.0);
                hist_text(f, "group size", "ops", st.group_size_hist);
                hist_text(f, "queue time", "us ", st.queue_us_hist);
                hist_text(f, "run time", "us ", st.run_us_hist);
        }
        fprintf(f, only_uid < 0 ? "sessions:\n" : "sessions (yours):\n");
        pthread_mutex_lock(&srv->lock);
        for (int i = 0; i < srv->nloops; i++) {
                for (struct session *s = srv->loops[i].sessions; s; s = s->next) {
                        if (!shown(only_uid, s->cred.uid))
                                continue;
                        fprintf(f, "  %llu: pid %d uid %d, submits %llu, ops ok %llu failed %llu, "
                                   "rejected %llu, in flight %u, buffers %u (%llu bytes)\n",
                                (unsigned long long)s->id, (int)s->cred.pid, (int)s->cred.uid,
                                (unsigned long long)s->submits, (unsigned long long)s->ops_ok,
                                (unsigned long long)s->ops_failed, (unsigned long long)s->rejected,
                                s->inflight_ops, s->bufs.n, (unsigned long long)s->bufs.bytes);
                }
        }
        fprintf(f, only_uid < 0 ? "users:\n" : "users (you):\n");
        for (struct user *u = srv->users; u; u = u->next) {
                if (!shown(only_uid, u->uid))
                        continue;
                fprintf(f, "  uid %u: %u sessions, %u ops in flight, %llu bytes registered, %u buffers "
                           "and rings mapped, %llu inline bytes held\n",
                        u->uid, u->sessions, u->inflight_ops, (unsigned long long)u->buffer_bytes,
                        (unsigned)atomic_load(&u->mappings),
                        (unsigned long long)atomic_load(&u->inline_held));
        }
        pthread_mutex_unlock(&srv->lock);
}

static void render_json(struct server *srv, FILE *f, double up_s, long long only_uid)
{
        const struct loop_sum ls = loop_sum(srv);
        uint64_t pc[PC_N];
        int first = 1;

        fprintf(f, "{\"version\":\"%s\",\"uptime_s\":%.3f,\"draining\":%s,", GEMMD_VERSION, up_s,
                srv->draining ? "true" : "false");
        pthread_mutex_lock(&srv->lock);
        pc_read_all(&srv->counts, pc);
        fprintf(f, "\"sessions_now\":%u,\"sessions_total\":%llu,\"requests\":%llu,\"queued_ops\":%u,",
                srv->nsessions, (unsigned long long)srv->sessions_total,
                (unsigned long long)pc[PC_REQUESTS], srv->queued_ops);
        fprintf(f, "\"mappings\":%u,\"max_mappings\":%u,", (unsigned)atomic_load(&srv->mappings),
                srv->cfg->lim.max_mappings);
        pthread_mutex_unlock(&srv->lock);
        fprintf(f, "\"replies\":%llu,\"replies_now\":%llu,\"replies_ring\":%llu,\"replies_word\":%llu,"
                   "\"submits_ring\":%llu,\"rings_now\":%u,"
                   "\"reply_wait_s\":%.6f,\"busy_sessions\":%u,\"client_poll_max\":%u,\"no_poll_replies\":%llu,",
                (unsigned long long)pc[PC_REPLIES], (unsigned long long)pc[PC_REPLIES_NOW],
                (unsigned long long)pc[PC_REPLIES_RING], (unsigned long long)pc[PC_REPLIES_WORD],
                (unsigned long long)pc[PC_SUBMITS_RING], (unsigned)atomic_load(&srv->rings_now),
                pc[PC_REPLY_WAIT_NS] / 1e9, (unsigned)atomic_load(&srv->busy_sessions), srv->poll_max,
                (unsigned long long)pc[PC_NO_POLL_REPLIES]);
        fprintf(f, "\"loops\":%d,\"loop_callbacks\":%llu,\"loop_busy_s\":%.6f,\"loop_busy_max_s\":%.6f,"
                   "\"loop_recv_s\":%.6f,\"loop_frames_s\":%.6f,\"loop_enqueue_s\":%.6f,\"loop_reap_s\":%.6f,",
                srv->nloops, (unsigned long long)ls.callbacks, ls.busy_ns / 1e9, ls.busiest_ns / 1e9,
                ls.part_ns[LOOP_RECV] / 1e9, ls.part_ns[LOOP_FRAMES] / 1e9,
                ls.part_ns[LOOP_ENQUEUE] / 1e9, ls.part_ns[LOOP_REAP] / 1e9);
        hist_json(f, "loop_callback_us_log2", ls.hist);
        fprintf(f, ",");
        fprintf(f, "\"rejections\":{");
        for (unsigned i = 1, first = 1; i < NCODES; i++) {
                if (!srv->rejections[i])
                        continue;
                fprintf(f, "%s\"%s\":%llu", first ? "" : ",", code_names[i],
                        (unsigned long long)srv->rejections[i]);
                first = 0;
        }
        fprintf(f, "},\"devices\":[");
        for (int i = 0; i < srv->nworkers; i++) {
                struct worker_stats st;
                uint32_t pending, inflight;
                struct backend *b = srv->backends[i];

                worker_get_stats(&srv->workers[i], &st, &pending, &inflight);
                fprintf(f, "%s{\"index\":%d,\"backend\":\"%s\",\"name\":\"%s\",\"groups\":%llu,"
                           "\"ops\":%llu,\"ops_failed\":%llu,\"tiles\":%llu,\"flops\":%llu,"
                           "\"busy_s\":%.6f,\"loaded_s\":%.6f,\"plan_s\":%.6f,\"launch_s\":%.6f,\"device_s\":%.6f,"
                           "\"timed_groups\":%llu,\"run_s\":%.6f,\"idle_gaps\":%llu,\"idle_gap_s\":%.6f,"
                           "\"queued\":%u,\"inflight_groups\":%u,\"process_pid\":%d,"
                           "\"process_restarts\":%llu,\"wide_groups\":%llu,\"narrow_groups\":%llu,\"split_groups\":%llu,"
                           "\"fill_groups\":%llu,\"resident_groups\":%llu,\"packed_groups\":%llu,\"ops_early\":%llu,"
                           "\"ops_word_dev\":%llu,\"queue_staged_s\":%.6f,\"queue_waiting_s\":%.6f,\"queue_forming_s\":%.6f,",
                        i ? "," : "", i, b->kind, b->name, (unsigned long long)st.groups,
                        (unsigned long long)st.ops, (unsigned long long)st.ops_failed,
                        (unsigned long long)st.tiles, (unsigned long long)st.flops,
                        st.busy_ns / 1e9, st.loaded_ns / 1e9, st.plan_ns / 1e9, st.launch_ns / 1e9, st.device_ns / 1e9,
                        (unsigned long long)st.timed_groups, st.run_ns / 1e9, (unsigned long long)st.idle_gaps,
                        st.idle_gap_ns / 1e9, pending, inflight, backend_proc_pid(b),
                        (unsigned long long)backend_proc_restarts(b), (unsigned long long)st.wide_groups,
                        (unsigned long long)st.narrow_groups, (unsigned long long)st.split_groups,
                        (unsigned long long)st.fill_groups, (unsigned long long)st.resident_groups,
                        (unsigned long long)st.packed_groups, (unsigned long long)st.ops_early,
                        (unsigned long long)st.ops_word_dev, st.staged_ns / 1e9, st.waiting_ns / 1e9, st.forming_ns / 1e9);
                fprintf(f, "\"recoveries\":%llu,\"loop_groups\":%llu,\"capped_s\":%.6f,\"worker_s\":%.6f,",
                        (unsigned long long)st.recoveries, (unsigned long long)st.loop_groups, st.capped_ns / 1e9,
                        st.worker_ns / 1e9);
                fprintf(f, "\"tasks\":%llu,\"task_s\":%.6f,\"tasks_held\":%llu,", (unsigned long long)st.tasks,
                        st.task_ns / 1e9, (unsigned long long)st.tasks_held);
                hist_json(f, "group_size_log2", st.group_size_hist);
                fprintf(f, ",");
                hist_json(f, "queue_us_log2", st.queue_us_hist);
                fprintf(f, ",");
                hist_json(f, "run_us_log2", st.run_us_hist);
                fprintf(f, "}");
        }
        /* all_sessions: false when only the viewer's own are listed. */
        fprintf(f, "],\"all_sessions\":%s,\"sessions\":[", only_uid < 0 ? "true" : "false");
        pthread_mutex_lock(&srv->lock);
        for (int i = 0; i < srv->nloops; i++) {
                for (struct session *s = srv->loops[i].sessions; s; s = s->next) {
                        if (!shown(only_uid, s->cred.uid))
                                continue;
                        fprintf(f, "%s{\"id\":%llu,\"pid\":%d,\"uid\":%d,\"submits\":%llu,\"ops_ok\":%llu,"
                                   "\"ops_failed\":%llu,\"rejected\":%llu,\"inflight\":%u,\"buffers\":%u,"
                                   "\"buffer_bytes\":%llu}",
                                first ? "" : ",", (unsigned long long)s->id, (int)s->cred.pid,
                                (int)s->cred.uid, (unsigned long long)s->submits,
                                (unsigned long long)s->ops_ok, (unsigned long long)s->ops_failed,
                                (unsigned long long)s->rejected, s->inflight_ops, s->bufs.n,
                                (unsigned long long)s->bufs.bytes);
                        first = 0;
                }
        }
        fprintf(f, "],\"users\":[");
        first = 1;
        for (struct user *u = srv->users; u; u = u->next) {
                if (!shown(only_uid, u->uid))
                        continue;
                fprintf(f, "%s{\"uid\":%u,\"sessions\":%u,\"inflight\":%u,\"buffer_bytes\":%llu,"
                           "\"mappings\":%u,\"inline_held\":%llu}",
                        first ? "" : ",", u->uid, u->sessions, u->inflight_ops,
                        (unsigned long long)u->buffer_bytes, (unsigned)atomic_load(&u->mappings),
                        (unsigned long long)atomic_load(&u->inline_held));
                first = 0;
        }
        pthread_mutex_unlock(&srv->lock);
        fprintf(f, "],");
        cpu_json(srv, f);
        fprintf(f, "}\n");
}

int stats_render(struct server *srv, int json, long long only_uid, char **out)
{
        double up_s = (now_ns() - srv->t_start_ns) / 1e9;
        size_t len;
        FILE *f = open_memstream(out, &len);

        if (!f)
                return -errno;
        if (json)
                render_json(srv, f, up_s, only_uid);
        else
                render_text(srv, f, up_s, only_uid);
        if (fclose(f) != 0)
                return -ENOMEM;
        return 0;
}

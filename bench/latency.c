/*
 * latency.c - gemmbench-latency: the round trip of a lone small request
 * through gemmd, which is what the daemon itself adds to a call (socket
 * hops, thread hand-offs, the launch). It needs nothing but libgemmd, so
 * it is built without CUDA too and runs against any backend, the CPU one
 * included (gemmbench proper needs CUDA and cuBLAS).
 *
 *   gemmbench-latency [--clients N] [--requests R] [--warmup W] [--dim D]
 *                     [--memory inline|shm] [--socket PATH | --backend B ...]
 *                     [--json]          (--help lists all)
 *
 * Each of N client processes keeps exactly one D x D x D f32 GEMM in
 * flight: it submits, waits in gemmd_wait (asleep in poll(), as an
 * ordinary client is), and submits the next one at once. A sample is the
 * time from just before gemmd_submit to gemmd_wait's return. The clients
 * set up, run W unmeasured requests each, and then start the measured R
 * together; the report gives percentiles over all N * R samples and the
 * means of the daemon's own account of them (admitted -> launched,
 * launched -> done). Every result is checked against a double-precision
 * reference; any error makes the exit status 1.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "include/gemmd.h"

#define MAX_CLIENTS 256
#define START_MS 30000
#define STOP_MS 20000

struct lat_opts {
        int nclients, requests, warmup, dim, shm, json;
        const char *socket, *backend, *gemmd;
        const char *daemon_args[BENCH_MAX_DAEMON_ARGS];
        int ndaemon_args;
};

/* What a client reports after its run, followed by `n` float samples (us). */
struct lat_report {
        int32_t status; /* 0, or the first failure's code */
        uint32_t n;
        uint64_t errors;
        struct bench_account account; /* the daemon's own account */
        /* From the daemon's stamps (same clock): submit -> admitted, reply
         * packed -> the wait's return. */
        struct bench_hops hops;
        char msg[160];
};

/* ---- one client ------------------------------------------------------- */

struct lat_client {
        const struct lat_opts *o;
        gemmd_client *gc;
        struct gemmd_op op;
        float *a, *b, *c; /* in the shared buffer (shm) or private (inline) */
        double *ref;
        struct lat_report rep;
};

static void fail(struct lat_client *c, int err, const char *what)
{
        c->rep.errors++;
        if (!c->rep.status) {
                c->rep.status = err ? err : -EIO;
                snprintf(c->rep.msg, sizeof(c->rep.msg), "%s: %s", what, gemmd_strerror(err));
        }
}

/* Operands with random values that are never zero, and the reference. */
static int client_setup(struct lat_client *c)
{
        int64_t d = c->o->dim;
        size_t elems = (size_t)(d * d), bytes = elems * sizeof(float);
        unsigned seed = (unsigned)getpid();
        int err;

        err = gemmd_connect(c->o->socket, &c->gc);
        if (err) {
                fail(c, err, "gemmd_connect");
                return err;
        }
        if (c->o->shm) {
                gemmd_buffer buf;
                void *p;

                err = gemmd_buffer_alloc(c->gc, 3 * bytes, &buf, &p);
                if (err) {
                        fail(c, err, "gemmd_buffer_alloc");
                        return err;
                }
                c->a = p;
                c->b = c->a + elems;
                c->c = c->b + elems;
                c->op.a = (struct gemmd_operand){.buffer = buf, .offset = 0};
                c->op.b = (struct gemmd_operand){.buffer = buf, .offset = bytes};
                c->op.c = (struct gemmd_operand){.buffer = buf, .offset = 2 * bytes};
        } else {
                c->a = malloc(3 * bytes);
                if (!c->a) {
                        fail(c, -ENOMEM, "malloc");
                        return -ENOMEM;
                }
                c->b = c->a + elems;
                c->c = c->b + elems;
                c->op.a = (struct gemmd_operand){.data = c->a, .bytes = bytes};
                c->op.b = (struct gemmd_operand){.data = c->b, .bytes = bytes};
                c->op.c = (struct gemmd_operand){.out = c->c, .bytes = bytes};
        }
        c->ref = calloc(elems, sizeof(double));
        if (!c->ref) {
                fail(c, -ENOMEM, "calloc");
                return -ENOMEM;
        }
        for (size_t i = 0; i < 2 * elems; i++)
                c->a[i] = (float)(rand_r(&seed) % 1999 - 999) / 1000.0f + 0.0005f;
        for (int64_t j = 0; j < d; j++)
                for (int64_t l = 0; l < d; l++)
                        for (int64_t i = 0; i < d; i++)
                                c->ref[j * d + i] += (double)c->a[l * d + i] * c->b[j * d + l];
        c->op.kind = GEMMD_GEMM;
        c->op.dtype = GEMMD_F32;
        c->op.m = c->op.n = c->op.k = d;
        c->op.lda = c->op.ldb = c->op.ldc = d;
        c->op.alpha = 1.0f;
        c->op.beta = 0.0f;
        return 0;
}

/* One request, from just before the submit to the wait's return. C is
 * poisoned first, so an unwritten element fails the check. Returns the
 * latency in microseconds, or -1. */
static double one_request(struct lat_client *c, struct gemmd_result *res, uint64_t *t_sub,
                          uint64_t *t_got)
{
        int64_t d = c->o->dim;
        gemmd_ticket t;
        uint64_t t0;
        int err;

        for (int64_t i = 0; i < d * d; i++)
                c->c[i] = NAN;
        t0 = bench_now_ns();
        err = gemmd_submit(c->gc, &c->op, 1, GEMMD_PRIO_NORMAL, &t);
        if (!err)
                err = gemmd_wait(c->gc, t, 10000, res, 1);
        if (err) {
                fail(c, err, "request");
                return -1;
        }
        *t_sub = t0;
        *t_got = bench_now_ns();
        double us = (double)(*t_got - t0) / 1000.0;

        for (int64_t i = 0; i < d * d; i++)
                if (!(fabs(c->c[i] - c->ref[i]) <= 1e-4 * (1.0 + fabs(c->ref[i])))) {
                        fail(c, -EIO, "wrong result");
                        return -1;
                }
        return us;
}

static int client_main(const struct lat_opts *o, int fd)
{
        struct lat_client c = {.o = o};
        struct gemmd_result res;
        float *samples = calloc((size_t)o->requests, sizeof(float));
        uint64_t t_sub, t_got;
        char go = 0;

        if (!samples)
                fail(&c, -ENOMEM, "calloc");
        else if (!client_setup(&c))
                for (int i = 0; i < o->warmup && !c.rep.status; i++)
                        one_request(&c, &res, &t_sub, &t_got);
        /* Ready (or failed); then wait for the common start. */
        if (bench_write_all(fd, &c.rep.status, sizeof(c.rep.status)) || bench_read_all(fd, &go, 1) || !go)
                return 1;
        for (int i = 0; i < o->requests && !c.rep.status; i++) {
                double us = one_request(&c, &res, &t_sub, &t_got);

                if (us < 0)
                        break;
                samples[c.rep.n++] = (float)us;
                bench_account_add(&c.rep.account, &res);
                bench_hops_add(&c.rep.hops, &res, t_sub, t_got);
        }
        gemmd_disconnect(c.gc);
        if (bench_write_all(fd, &c.rep, sizeof(c.rep)) ||
            bench_write_all(fd, samples, c.rep.n * sizeof(float)))
                return 1;
        return c.rep.status ? 1 : 0;
}

/* ---- the daemon ------------------------------------------------------- */

/* Starts the gemmd beside this binary (or --gemmd) on `sock`, logging to
 * `log`, and waits until it accepts. Returns its pid, or -1. */
static pid_t daemon_start(const struct lat_opts *o, const char *sock, const char *log)
{
        char path[PATH_MAX];
        uint64_t deadline = bench_now_ns() + START_MS * 1000000ull;
        pid_t pid;

        if (o->gemmd)
                snprintf(path, sizeof(path), "%s", o->gemmd);
        else if (bench_default_gemmd(path, sizeof(path)))
                return -1;
        pid = bench_gemmd_spawn(path, sock, o->backend, o->daemon_args, o->ndaemon_args, log);
        if (pid < 0)
                return -1;
        while (!bench_socket_accepts(sock)) {
                struct timespec ts = {0, 5000000};

                if (waitpid(pid, NULL, WNOHANG) == pid || bench_now_ns() > deadline) {
                        fprintf(stderr, "gemmbench-latency: %s did not come up (log: %s)\n", path,
                                log);
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        return -1;
                }
                nanosleep(&ts, NULL);
        }
        return pid;
}

/* SIGTERM and a drain. Returns the daemon's exit status (128 + signal). */
static int daemon_stop(pid_t pid)
{
        uint64_t deadline = bench_now_ns() + STOP_MS * 1000000ull;
        int st;

        kill(pid, SIGTERM);
        while (waitpid(pid, &st, WNOHANG) != pid) {
                struct timespec ts = {0, 10000000};

                if (bench_now_ns() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &st, 0);
                        break;
                }
                nanosleep(&ts, NULL);
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- the parent ------------------------------------------------------- */

static void usage(FILE *f)
{
        fprintf(f,
                "usage: gemmbench-latency [options]\n"
                "\n"
                "N client processes each keep one D x D x D f32 GEMM in flight through gemmd;\n"
                "prints the round-trip latency percentiles of R requests per client.\n"
                "\n"
                "  --clients N         client processes (default 1, at most %d)\n"
                "  --requests R        measured requests per client (default 5000)\n"
                "  --warmup W          unmeasured requests per client before them (default 500)\n"
                "  --dim D             m = n = k (default 8)\n"
                "  --memory M          inline (operands in the request) or shm (a shared buffer)\n"
                "                      (default inline)\n"
                "  --socket PATH       use this running gemmd instead of starting one\n"
                "  --backend B         --backend of the gemmd started (default cpu)\n"
                "  --gemmd PATH        the gemmd to start (default: beside this binary)\n"
                "  --daemon-arg ARG    one more argument for the gemmd started (repeatable)\n"
                "  --json              print one JSON object\n"
                "  --help              this text\n",
                MAX_CLIENTS);
}

static int parse_args(struct lat_opts *o, int argc, char **argv)
{
        static const struct option opts[] = {
                {"clients", required_argument, NULL, 'c'},
                {"requests", required_argument, NULL, 'r'},
                {"warmup", required_argument, NULL, 'w'},
                {"dim", required_argument, NULL, 'd'},
                {"memory", required_argument, NULL, 'm'},
                {"socket", required_argument, NULL, 's'},
                {"backend", required_argument, NULL, 'b'},
                {"gemmd", required_argument, NULL, 'g'},
                {"daemon-arg", required_argument, NULL, 'a'},
                {"json", no_argument, NULL, 'j'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        int ch, li = -1;

        optind = 1;
        opterr = 0; /* bench_getopt_error says it in one line */
        while ((ch = getopt_long(argc, argv, ":", opts, &li)) != -1) {
                int bad = 0;

                switch (ch) {
                case 'c':
                        bad = bench_parse_int(optarg, 1, MAX_CLIENTS, &o->nclients);
                        break;
                case 'r':
                        bad = bench_parse_int(optarg, 1, 100000000, &o->requests);
                        break;
                case 'w':
                        bad = bench_parse_int(optarg, 0, 100000000, &o->warmup);
                        break;
                case 'd':
                        bad = bench_parse_int(optarg, 1, 1024, &o->dim);
                        break;
                case 'm':
                        bad = strcmp(optarg, "inline") && strcmp(optarg, "shm");
                        o->shm = !strcmp(optarg, "shm");
                        break;
                case 's':
                        o->socket = optarg;
                        break;
                case 'b':
                        o->backend = optarg;
                        break;
                case 'g':
                        o->gemmd = optarg;
                        break;
                case 'a':
                        bad = o->ndaemon_args == BENCH_MAX_DAEMON_ARGS;
                        if (!bad)
                                o->daemon_args[o->ndaemon_args++] = optarg;
                        break;
                case 'j':
                        o->json = 1;
                        break;
                case 'h':
                        usage(stdout);
                        exit(0);
                default:
                        return bench_getopt_error("gemmbench-latency", ch, argv);
                }
                if (bad)
                        return bench_usage_error("gemmbench-latency", "invalid value for --%s: %s",
                                                 opts[li].name, optarg);
        }
        if (optind != argc)
                return bench_usage_error("gemmbench-latency", "unexpected argument: %s", argv[optind]);
        return 0;
}

/* Forks the clients, starts them together, and gathers their samples into
 * *all (sorted). Returns the number of clients that failed. */
static int run_clients(const struct lat_opts *o, struct lat_report *sum, float **all, size_t *nall)
{
        int fds[MAX_CLIENTS];
        pid_t pids[MAX_CLIENTS];
        int failed = 0, n = 0;
        char go = 1;

        memset(sum, 0, sizeof(*sum));
        *nall = 0;
        *all = malloc((size_t)o->nclients * o->requests * sizeof(float));
        if (!*all)
                return o->nclients;
        for (; n < o->nclients; n++) {
                int sv[2];

                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                        break;
                fflush(NULL);
                pids[n] = fork();
                if (pids[n] == 0) {
                        close(sv[0]);
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        _exit(client_main(o, sv[1]));
                }
                close(sv[1]);
                if (pids[n] < 0) {
                        close(sv[0]);
                        break;
                }
                fds[n] = sv[0];
        }
        failed = o->nclients - n;
        for (int i = 0; i < n; i++) {
                int32_t st = -1;

                if (bench_read_all(fds[i], &st, sizeof(st)) || st)
                        go = 0;
        }
        for (int i = 0; i < n; i++)
                bench_write_all(fds[i], &go, 1);
        for (int i = 0; i < n; i++) {
                struct lat_report r;

                if (!go || bench_read_all(fds[i], &r, sizeof(r)) || r.n > (uint32_t)o->requests ||
                    bench_read_all(fds[i], *all + *nall, r.n * sizeof(float))) {
                        failed++;
                } else {
                        *nall += r.n;
                        sum->errors += r.errors;
                        bench_account_merge(&sum->account, &r.account);
                        bench_hops_merge(&sum->hops, &r.hops);
                        if (r.status && !sum->status) {
                                sum->status = r.status;
                                memcpy(sum->msg, r.msg, sizeof(sum->msg));
                        }
                        failed += r.status != 0;
                }
                close(fds[i]);
        }
        for (int i = 0; i < n; i++)
                waitpid(pids[i], NULL, 0);
        bench_sort(*all, *nall);
        return failed;
}

static void report(const struct lat_opts *o, const struct lat_report *sum, const float *s,
                   size_t n, int failed, int daemon_exit)
{
        /* Samples, requests that carried the daemon's account, hops measured. */
        double mean = 0, k = n ? (double)n : 1;
        double ka = sum->account.n ? (double)sum->account.n : 1, ks = sum->hops.n ? (double)sum->hops.n : 1;
        /* p50, p90, p99, p99.9; 0 without samples, as the JSON has no NaN */
        double q[4] = {0, 0, 0, 0};

        for (size_t i = 0; i < n; i++)
                mean += s[i];
        mean /= k;
        if (n) {
                q[0] = bench_pct(s, n, 0.5);
                q[1] = bench_pct(s, n, 0.9);
                q[2] = bench_pct(s, n, 0.99);
                q[3] = bench_pct(s, n, 0.999);
        }
        if (o->json) {
                printf("{\"clients\":%d,\"dim\":%d,\"memory\":\"%s\",\"requests\":%zu,"
                       "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,"
                       "\"min_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f,"
                       "\"queue_us_mean\":%.2f,\"run_us_mean\":%.2f,\"group_size_mean\":%.3f,"
                       "\"submit_to_admit_us_mean\":%.2f,\"reply_to_client_us_mean\":%.2f,"
                       "\"errors\":%llu,\"clients_failed\":%d,\"daemon_exit\":%d,"
                       "\"first_error\":\"%s\"}\n",
                       o->nclients, o->dim, o->shm ? "shm" : "inline", n, q[0], q[1], q[2], q[3],
                       n ? s[0] : 0, n ? s[n - 1] : 0, mean, sum->account.queue_us / ka, sum->account.run_us / ka,
                       sum->account.group_size / ka, sum->hops.in_us / ks, sum->hops.out_us / ks,
                       (unsigned long long)sum->errors, failed,
                       daemon_exit, sum->msg);
                return;
        }
        printf("# %d client(s), one %dx%dx%d f32 GEMM in flight each, %s operands\n",
               o->nclients, o->dim, o->dim, o->dim, o->shm ? "shm" : "inline");
        printf("requests %zu  p50 %.1f us  p90 %.1f  p99 %.1f  p99.9 %.1f  min %.1f  max %.1f  "
               "mean %.1f\n",
               n, q[0], q[1], q[2], q[3], n ? s[0] : 0, n ? s[n - 1] : 0, mean);
        printf("daemon's account: queue %.2f us, run %.2f us, group size %.3f (means)\n",
               sum->account.queue_us / ka, sum->account.run_us / ka, sum->account.group_size / ka);
        printf("hops: submit to admitted %.2f us, reply packed to client %.2f us (means)\n",
               sum->hops.in_us / ks, sum->hops.out_us / ks);
        if (sum->errors || failed || daemon_exit)
                printf("errors %llu, clients failed %d, daemon exit %d: %s\n",
                       (unsigned long long)sum->errors, failed, daemon_exit, sum->msg);
}

int main(int argc, char **argv)
{
        struct lat_opts o = {.nclients = 1, .requests = 5000, .warmup = 500, .dim = 8,
                             .backend = "cpu"};
        char dir[] = "/tmp/gemmbench-lat-XXXXXX", sock[64], log[64];
        struct lat_report sum;
        pid_t dpid = 0;
        float *all = NULL;
        size_t nall = 0;
        int rc, failed, daemon_exit = 0;

        rc = parse_args(&o, argc, argv);
        if (rc)
                return rc;
        if (!o.socket) {
                if (!mkdtemp(dir)) {
                        perror("gemmbench-latency: mkdtemp");
                        return 1;
                }
                snprintf(sock, sizeof(sock), "%s/gemmd.sock", dir);
                snprintf(log, sizeof(log), "%s/gemmd.log", dir);
                dpid = daemon_start(&o, sock, log);
                if (dpid < 0)
                        return 1;
                o.socket = sock;
        }
        failed = run_clients(&o, &sum, &all, &nall);
        if (dpid > 0) {
                daemon_exit = daemon_stop(dpid);
                if (daemon_exit == 0) {
                        unlink(sock);
                        unlink(log);
                        rmdir(dir);
                } else {
                        fprintf(stderr, "gemmbench-latency: gemmd exited with status %d; its log "
                                "is %s\n", daemon_exit, log);
                }
        }
        report(&o, &sum, all, nall, failed, daemon_exit);
        free(all);
        return failed || sum.errors || daemon_exit ? 1 : 0;
}

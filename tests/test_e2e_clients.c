/*
 * test_e2e_clients.c - many client processes against one daemon: 8 library
 * clients with 1000 mixed ops each, a client killed with ops in flight,
 * clients that answer replies at once or leave them unread, and gemmctl on
 * .npy files.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_util.h"
#include "tests/hard_util.h"
#include "tests/e2e_assert.h"

TestSuite(e2e, .init = e2e_setup, .fini = e2e_teardown, .timeout = 240);

/* What a client process gets: the daemon and its number. */
struct child {
        const struct e2e_daemon *d;
        int id;
};

/* ---- 8 processes x 1000 ops ------------------------------------------- */

#define STRESS_CLIENTS 8
#define STRESS_OPS 1000
#define WINDOW 8          /* submits in flight per client */
#define MAX_PER_SUBMIT 3
#define SLOT_BYTES (256u << 10)

struct slot {
        gemmd_ticket t;
        int busy;
        size_t n;
        struct e2e_prob p[MAX_PER_SUBMIT];
};

static int fail(int id, const char *what)
{
        fprintf(stderr, "client %d: %s\n", id, what);
        return 1;
}

/* Submits a random 1-3 op request in slot s (ops in the slot's part of the
 * shared buffer, or inline). Returns the number of ops, or -1. */
static int submit_slot(gemmd_client *c, struct e2e_arena *ar, int k, struct slot *s,
                       uint64_t *seed, size_t left)
{
        struct gemmd_op ops[MAX_PER_SUBMIT];
        size_t n = (size_t)e2e_rand_int(seed, 1, MAX_PER_SUBMIT);

        if (n > left)
                n = left;
        ar->used = (uint64_t)k * SLOT_BYTES;
        ar->size = (uint64_t)(k + 1) * SLOT_BYTES;
        for (size_t i = 0; i < n; i++) {
                struct e2e_spec sp;
                int rc;

                e2e_spec_random(&sp, seed, 48);
                rc = e2e_rand(seed) % 4 == 0 ? e2e_prob_inline(&s->p[i], &sp, seed)
                                             : e2e_prob_place(&s->p[i], &sp, ar, seed);
                if (rc)
                        return -1;
                ops[i] = s->p[i].op;
        }
        if (gemmd_submit(c, ops, n, (int)(e2e_rand(seed) % 3), &s->t))
                return -1;
        s->n = n;
        s->busy = 1;
        return (int)n;
}

/* One client process: STRESS_OPS ops, WINDOW submits in flight, every
 * completion found through gemmd_poll exactly once and checked. Returns
 * the process exit status. */
static int stress_client(void *ctx, int fd)
{
        const struct child *ch = ctx;
        int id = ch->id;
        struct slot slots[WINDOW] = {0};
        struct gemmd_result res[MAX_PER_SUBMIT];
        struct e2e_arena ar;
        uint64_t seed = 1000 + (uint64_t)id, deadline = e2e_now_us() + 180000000ull;
        gemmd_ticket first = 0, t;
        size_t submitted = 0, done = 0;
        gemmd_client *c;
        /* Half the clients go without completion words, so that their
         * results carry the group and timings; the others' may not. */
        const int words = id % 2 == 0;

        setenv("GEMMD_WORDS", words ? "1" : "0", 1);
        c = e2e_connect(ch->d);
        char why[300];
        double err;

        if (!c || e2e_arena_init(&ar, c, (uint64_t)WINDOW * SLOT_BYTES))
                return fail(id, "no connection or buffer");
        while (done < STRESS_OPS) {
                int rc;

                for (int k = 0; k < WINDOW && submitted < STRESS_OPS; k++) {
                        if (slots[k].busy)
                                continue;
                        rc = submit_slot(c, &ar, k, &slots[k], &seed, STRESS_OPS - submitted);
                        if (rc < 0)
                                return fail(id, "submit failed");
                        if (!first)
                                first = slots[k].t;
                        submitted += (size_t)rc;
                }
                rc = gemmd_poll(c, &t);
                if (rc < 0)
                        return fail(id, gemmd_strerror(rc));
                if (rc == 0) {
                        struct pollfd pf = {gemmd_fd(c), POLLIN, 0};

                        if (e2e_now_us() > deadline)
                                return fail(id, "timed out waiting for completions");
                        poll(&pf, 1, 1000);
                        continue;
                }
                int k = 0;

                while (k < WINDOW && !(slots[k].busy && slots[k].t == t))
                        k++;
                if (k == WINDOW) {
                        snprintf(why, sizeof(why), "ticket %llu completed twice or unknown",
                                 (unsigned long long)t);
                        return fail(id, why);
                }
                rc = gemmd_wait(c, t, 0, res, slots[k].n);
                if (rc) {
                        snprintf(why, sizeof(why), "ticket %llu: %s", (unsigned long long)t,
                                 gemmd_strerror(rc));
                        return fail(id, why);
                }
                for (size_t i = 0; i < slots[k].n; i++) {
                        if (res[i].status || (!words && (!res[i].group_id || !res[i].group_size)))
                                return fail(id, "bad per-op result");
                        if (e2e_prob_check(&slots[k].p[i], &err, why, sizeof(why)))
                                return fail(id, why);
                        e2e_prob_free(&slots[k].p[i]);
                }
                slots[k].busy = 0;
                done += slots[k].n;
        }
        /* Nothing more may complete, and a collected ticket is gone. */
        if (gemmd_poll(c, &t) != 0)
                return fail(id, "a completion after the last one");
        if (gemmd_wait(c, first, 0, NULL, 0) != GEMMD_ENOTICKET)
                return fail(id, "a collected ticket is still known");
        gemmd_disconnect(c);
        return 0;
}

Test(e2e, eight_clients_1000_mixed_ops_each_all_correct)
{
        struct e2e_daemon d;
        struct child ch[STRESS_CLIENTS];
        pid_t pids[STRESS_CLIENTS];
        gemmd_client *c;
        char *json = NULL;

        START(&d, "--threads", "2", NULL);
        for (int i = 0; i < STRESS_CLIENTS; i++) {
                ch[i] = (struct child){&d, i};
                pids[i] = e2e_fork(stress_client, &ch[i], NULL);
                cr_assert_gt(pids[i], 0);
        }
        for (int i = 0; i < STRESS_CLIENTS; i++)
                cr_assert_eq(e2e_wait_child(pids[i], 200000), 0, "client %d failed", i);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        cr_expect_geq(hard_json_number(json, "ops"), STRESS_CLIENTS * STRESS_OPS, "%s", json);
        cr_expect_eq(hard_json_number(json, "ops_failed"), 0, "%s", json);
        free(json);
        gemmd_disconnect(c);
        STOP(&d);
}

/* ---- a client killed with ops in flight -------------------------------- */

#define DOOMED_OPS 200
#define DOOMED_CS 16

/* Queues DOOMED_OPS big ops (about two seconds of work on two threads:
 * with half that, a loaded machine now and then finished them all before
 * the test could see them queued), says so on ready_fd, and waits to be
 * killed. */
static int doomed_client(void *ctx, int ready_fd)
{
        const struct e2e_daemon *d = ctx;
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 256, .n = 256,
                             .k = 512, .alpha = 1, .beta = 1};
        gemmd_client *c = e2e_connect(d);
        struct e2e_arena ar;
        struct e2e_prob p[DOOMED_CS];
        uint64_t seed = 77;
        gemmd_ticket t;

        if (!c || e2e_arena_init(&ar, c, 16u << 20))
                return 2;
        for (int i = 0; i < DOOMED_CS; i++) {
                s.kind = i % 3 ? GEMMD_GEMM : GEMMD_SYR2K;
                s.dtype = (enum gemmd_dtype)(i % 3);
                if (e2e_prob_place(&p[i], &s, &ar, &seed))
                        return 3;
        }
        for (int i = 0; i < DOOMED_OPS; i++)
                if (gemmd_submit(c, &p[i % DOOMED_CS].op, 1, GEMMD_PRIO_NORMAL, &t))
                        return 4;
        /* Admitted, not only sent: with several loops the test's own
         * session may otherwise be answered before this one is read. */
        if (e2e_round_trip(c))
                return 6;
        if (write(ready_fd, "x", 1) != 1)
                return 5;
        for (;;)
                pause();
}

Test(e2e, client_killed_with_ops_in_flight_costs_others_nothing)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[16];
        gemmd_client *c;
        uint64_t seed = 8;
        char why[300], b, *json = NULL;
        int fd, st;
        pid_t pid;

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 4u << 20), 0);
        for (int round = 0; round < 2; round++) {
                pid = e2e_fork(doomed_client, &d, &fd);
                cr_assert_gt(pid, 0);
                cr_assert_eq(read(fd, &b, 1), 1, "the doomed client did not submit");
                close(fd);
                cr_assert_eq(gemmd_stats(c, 1, &json), 0);
                cr_assert_gt(hard_json_number(json, "queued_ops"), 0, "nothing in flight: %s", json);
                free(json);
                json = NULL;
                kill(pid, SIGKILL);
                cr_assert_eq(waitpid(pid, &st, 0), pid);

                ar.used = 0;
                for (int i = 0; i < 16; i++) {
                        struct e2e_spec s;

                        e2e_spec_random(&s, &seed, 64);
                        cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
                }
                cr_assert_eq(e2e_run_checked(c, p, 16, 2, NULL, why, sizeof(why)), 0, "%s", why);
                for (int i = 0; i < 16; i++)
                        e2e_prob_free(&p[i]);
                /* The dead session goes away. */
                for (int tries = 0; tries < 500; tries++) {
                        free(json);
                        json = NULL;
                        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
                        if (hard_json_number(json, "sessions_now") == 1)
                                break;
                        usleep(10000);
                }
                cr_assert_eq(hard_json_number(json, "sessions_now"), 1, "%s", json);
                free(json);
                json = NULL;
        }
        gemmd_disconnect(c);
        STOP(&d);
}

/* ---- replies ------------------------------------------------------------ */

/* The sum of every number that follows `key` in a JSON text. */
static long long json_sum(const char *json, const char *key)
{
        char pat[64];
        long long sum = 0;

        snprintf(pat, sizeof(pat), "\"%s\":", key);
        for (const char *p = strstr(json, pat); p; p = strstr(p + 1, pat))
                sum += strtoll(p + strlen(pat), NULL, 10);
        return sum;
}

/* A reply may be written by the thread that finished the request, before
 * the daemon's loop has taken the request back; a client that answers it
 * at once must still find the request accounted for. With every cap at
 * one op, each submit is admitted only if the one before it (from the same
 * session or the other one of the same user) has been. */
Test(e2e, a_submit_sent_the_moment_a_reply_arrives_finds_the_caps_freed)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 8, .n = 8, .k = 8,
                             .alpha = 1.0f, .beta = 0.0f};
        enum { ROUNDS = 2000 };
        struct e2e_daemon d;
        struct e2e_prob p;
        gemmd_client *c[2];
        uint64_t seed = 51;
        char why[256], *json = NULL;
        double err;

        START(&d, "--threads", "1", "--max-inflight-ops", "1", "--max-user-inflight-ops", "1",
              "--max-queue-ops", "1", NULL);
        c[0] = e2e_connect(&d);
        c[1] = e2e_connect(&d);
        cr_assert(c[0] && c[1]);
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        for (int i = 0; i < ROUNDS; i++) {
                gemmd_client *x = c[e2e_rand(&seed) & 1];
                gemmd_ticket t;
                int rc = gemmd_submit(x, &p.op, 1, GEMMD_PRIO_NORMAL, &t);

                cr_assert_eq(rc, 0, "submit %d: %s", i, gemmd_strerror(rc));
                rc = gemmd_wait(x, t, 10000, NULL, 0);
                cr_assert_eq(rc, 0, "request %d: %s (%s)", i, gemmd_strerror(rc),
                             gemmd_last_error(x));
        }
        cr_assert_eq(e2e_prob_check(&p, &err, why, sizeof(why)), 0, "%s", why);
        /* So do the counts a stats request sent at once reads. */
        cr_assert_eq(gemmd_stats(c[0], 1, &json), 0);
        cr_assert_eq(json_sum(json, "ops_ok"), ROUNDS, "%s", json);
        cr_assert_eq(json_sum(json, "queued_ops"), 0, "%s", json);
        free(json);
        e2e_prob_free(&p);
        gemmd_disconnect(c[1]);
        gemmd_disconnect(c[0]);
        STOP(&d);
}

/* Replies that pile up past what the socket holds while the client reads
 * nothing (64 inline results of 32 KiB) are written in parts as it reads:
 * each arrives whole, once. The requests go one at a time, so that each
 * runs alone and is answered by the thread that ran it, until the socket
 * is full. */
Test(e2e, replies_left_unread_arrive_whole_and_once)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 64, .n = 128, .k = 8,
                             .alpha = 1.0f, .beta = 0.0f};
        enum { N = 64 };
        struct e2e_daemon d;
        struct e2e_prob p[N];
        gemmd_ticket t[N], extra;
        gemmd_client *c;
        uint64_t seed = 52;
        char why[256], *json = NULL;
        double err;

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        for (int i = 0; i < N; i++) {
                cr_assert_eq(e2e_prob_inline(&p[i], &s, &seed), 0);
                cr_assert_eq(gemmd_submit(c, &p[i].op, 1, GEMMD_PRIO_NORMAL, &t[i]), 0);
                usleep(2000);
        }
        usleep(200000);
        for (int i = 0; i < N; i++) {
                int rc = gemmd_wait(c, t[i], 60000, NULL, 0);

                cr_assert_eq(rc, 0, "request %d: %s", i, gemmd_strerror(rc));
                cr_assert_eq(e2e_prob_check(&p[i], &err, why, sizeof(why)), 0, "request %d: %s",
                             i, why);
                e2e_prob_free(&p[i]);
        }
        cr_assert_eq(gemmd_poll(c, &extra), 0, "a reply after the last one");
        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        cr_assert_eq(json_sum(json, "ops_ok"), N, "%s", json);
        free(json);
        gemmd_disconnect(c);
        STOP(&d);
}

/* ---- gemmctl ------------------------------------------------------------ */

struct ctl {
        const struct e2e_daemon *d;
        char *bin;
        char out[PATH_MAX], err[PATH_MAX];
        char *stdout_text, *stderr_text;
};

/* gemmctl's command line, built up one word at a time. */
struct args {
        const char *v[40];
        int n;
};

static void add(struct args *a, const char *word)
{
        cr_assert_lt(a->n, 38);
        a->v[a->n++] = word;
        a->v[a->n] = NULL;
}

/* Runs gemmctl --socket <sock> <args>; returns its exit status, with its
 * output in x->stdout_text and x->stderr_text. */
static int ctl_run(struct ctl *x, const char *sock, const struct args *args)
{
        char *argv[44];
        int argc = 0, st;

        argv[argc++] = x->bin;
        argv[argc++] = "--socket";
        argv[argc++] = (char *)sock;
        for (int i = 0; i < args->n; i++)
                argv[argc++] = (char *)args->v[i];
        argv[argc] = NULL;
        snprintf(x->out, sizeof(x->out), "%s/ctl.out", e2e_dir);
        snprintf(x->err, sizeof(x->err), "%s/ctl.err", e2e_dir);
        st = e2e_run(argv, x->out, x->err, 30000);
        free(x->stdout_text);
        free(x->stderr_text);
        x->stdout_text = e2e_read_file(x->out, NULL);
        x->stderr_text = e2e_read_file(x->err, NULL);
        cr_assert(x->stdout_text && x->stderr_text);
        return st;
}

/* ctl_run with the words as arguments, NULL-terminated. */
static int ctl(struct ctl *x, const char *sock, ...) __attribute__((sentinel));
static int ctl(struct ctl *x, const char *sock, ...)
{
        struct args a = {.n = 0};
        const char *w;
        va_list ap;

        va_start(ap, sock);
        while ((w = va_arg(ap, const char *)))
                add(&a, w);
        va_end(ap);
        return ctl_run(x, sock, &a);
}

static char *path_in_dir(const char *name)
{
        char *p;

        cr_assert_geq(asprintf(&p, "%s/%s", e2e_dir, name), 0);
        return p;
}

/* Writes operand x of p (stored rows x cols, C order) as .npy. bf16 data
 * is written as float32 (gemmctl --dtype bf16 takes float32 files). */
static void write_operand(const struct e2e_prob *p, const void *x, int64_t rows, int64_t cols,
                          const char *path)
{
        if (p->s.dtype == GEMMD_BF16) {
                float *f = malloc((size_t)(rows * cols) * sizeof(float));

                cr_assert_not_null(f);
                for (int64_t i = 0; i < rows * cols; i++)
                        f[i] = (float)e2e_get(GEMMD_BF16, x, (uint64_t)i);
                cr_assert_eq(e2e_npy_write(path, 4, rows, cols, f), 0);
                free(f);
        } else {
                cr_assert_eq(e2e_npy_write(path, (int)gemmd_dtype_size(p->s.dtype), rows, cols, x),
                             0);
        }
}

/* Reads OUT.npy into p->c, checking its dtype and shape. */
static void read_result(struct e2e_prob *p, const char *path, int64_t rows, int64_t cols)
{
        int64_t r, c;
        int esz, want = p->s.dtype == GEMMD_F16 ? 2 : p->s.dtype == GEMMD_F64 ? 8 : 4;
        void *data;

        cr_assert_eq(e2e_npy_read(path, &esz, &r, &c, &data), 0, "%s is not a 2-D .npy", path);
        cr_assert(esz == want && r == rows && c == cols, "OUT is %lldx%lld of %d-byte floats",
                  (long long)r, (long long)c, esz);
        for (int64_t i = 0; i < rows * cols; i++) {
                double v = esz == 8   ? ((double *)data)[i]
                           : esz == 4 ? ((float *)data)[i]
                                      : e2e_get(GEMMD_F16, data, (uint64_t)i);

                e2e_set(p->s.dtype, p->c, (uint64_t)i, v);
                if (p->s.dtype == GEMMD_BF16)
                        cr_assert(e2e_get(GEMMD_BF16, p->c, (uint64_t)i) == v || isnan(v),
                                  "a --dtype bf16 result that is not a bf16 value: %g", v);
        }
        free(data);
}

/* Runs `gemmctl <args> [--dtype bf16] [--alpha X] [--beta Y] A.npy B.npy
 * [-c C.npy] -o OUT.npy` for problem p (row-major, no padding: each operand
 * is a C-order array as stored), -c only when beta != 0, and checks OUT
 * (crows x ccols) against the reference. */
static void ctl_compute(struct ctl *x, struct e2e_prob *p, struct args *args, int64_t arows,
                        int64_t acols, int64_t brows, int64_t bcols)
{
        const struct e2e_spec *s = &p->s;
        int64_t crows = s->kind == GEMMD_SYR2K ? s->n : s->m;
        char *a = path_in_dir("a.npy"), *b = path_in_dir("b.npy"), *c = path_in_dir("c.npy");
        char *o = path_in_dir("out.npy");
        char al[32], be[32], why[300];
        double err;
        int st;

        write_operand(p, p->a, arows, acols, a);
        write_operand(p, p->b, brows, bcols, b);
        write_operand(p, p->c0, crows, s->n, c);
        snprintf(al, sizeof(al), "%.17g", s->alpha);
        snprintf(be, sizeof(be), "%.17g", s->beta);
        if (s->dtype == GEMMD_BF16) {
                add(args, "--dtype");
                add(args, "bf16");
        }
        add(args, "--alpha");
        add(args, al);
        if (s->beta != 0.0f) {
                add(args, "--beta");
                add(args, be);
        }
        add(args, a);
        add(args, b);
        if (s->beta != 0.0f) {
                add(args, "-c");
                add(args, c);
        }
        add(args, "-o");
        add(args, o);
        st = ctl_run(x, x->d->sock, args);
        cr_assert_eq(st, 0, "gemmctl %s failed: %s", args->v[0], x->stderr_text);
        read_result(p, o, crows, s->n);
        cr_assert_eq(e2e_prob_check(p, &err, why, sizeof(why)), 0, "gemmctl %s: %s", args->v[0],
                     why);
        free(a);
        free(b);
        free(c);
        free(o);
}

/* gemmctl gemm for spec s. */
static void ctl_gemm(struct ctl *x, const struct e2e_spec *s, uint64_t *seed)
{
        struct args args = {.n = 0};
        struct e2e_prob p;

        cr_assert_eq(e2e_prob_inline(&p, s, seed), 0);
        add(&args, "gemm");
        add(&args, "--op-a");
        add(&args, s->ta ? "t" : "n");
        add(&args, "--op-b");
        add(&args, s->tb ? "t" : "n");
        ctl_compute(x, &p, &args, s->ta ? s->k : s->m, s->ta ? s->m : s->k, s->tb ? s->n : s->k,
                    s->tb ? s->k : s->n);
        e2e_prob_free(&p);
}

/* gemmctl syr2k for spec s; without C (beta == 0) the other triangle must
 * come back zero. */
static void ctl_syr2k(struct ctl *x, const struct e2e_spec *s, uint64_t *seed)
{
        int64_t rows = s->ta ? s->k : s->n, cols = s->ta ? s->n : s->k;
        struct args args = {.n = 0};
        struct e2e_prob p;

        cr_assert_eq(e2e_prob_inline(&p, s, seed), 0);
        add(&args, "syr2k");
        add(&args, "--uplo");
        add(&args, s->uplo == GEMMD_LOWER ? "lower" : "upper");
        add(&args, "--trans");
        add(&args, s->ta ? "t" : "n");
        ctl_compute(x, &p, &args, rows, cols, rows, cols);
        if (s->beta == 0.0f)
                for (int64_t i = 0; i < s->n; i++)
                        for (int64_t j = 0; j < s->n; j++)
                                if (s->uplo == GEMMD_LOWER ? i < j : i > j)
                                        cr_assert_eq(e2e_get(s->dtype, p.c, (uint64_t)(i * s->n + j)),
                                                     0.0, "OUT(%lld,%lld) outside the triangle",
                                                     (long long)i, (long long)j);
        e2e_prob_free(&p);
}

/* Asserts a failed run: non-zero exit and exactly one line on stderr. */
static void expect_one_line_failure(struct ctl *x, int st, const char *what)
{
        cr_assert_neq(st, 0, "%s: gemmctl exited 0", what);
        cr_assert_gt(st, 0, "%s: gemmctl crashed or hung", what);
        cr_assert_eq(e2e_count_lines(x->stderr_text), 1, "%s: stderr is not one line:\n%s", what,
                     x->stderr_text);
}

Test(e2e, gemmctl_status_stats_gemm_syr2k_and_errors)
{
        struct e2e_daemon d;
        struct ctl x = {.d = &d};
        uint64_t seed = 9;
        char *a, *b, *o, *nosock;
        int st;

        START(&d, "--threads", "2", NULL);
        x.bin = e2e_build_path("gemmctl");

        st = ctl(&x, d.sock, "status", NULL);
        cr_assert_eq(st, 0, "status: %s", x.stderr_text);
        cr_assert_neq(x.stdout_text[0], '\0');
        cr_assert(strstr(x.stdout_text, "dtypes f32 f16 bf16 f64"), "%s", x.stdout_text);
        st = ctl(&x, d.sock, "stats", NULL);
        cr_assert_eq(st, 0, "stats: %s", x.stderr_text);
        cr_assert(strstr(x.stdout_text, "group size"), "%s", x.stdout_text);

        /* f64 files, with scalars no float holds: computed in f64. */
        for (int dt = 0; dt < 4; dt++)
                for (int ta = 0; ta < 2; ta++) {
                        struct e2e_spec g = {.kind = GEMMD_GEMM, .dtype = (enum gemmd_dtype)dt,
                                             .ta = (enum gemmd_trans)ta,
                                             .tb = (enum gemmd_trans)(ta ^ (dt == 1)),
                                             .row_major = 1, .m = 17, .n = 6, .k = 33,
                                             .alpha = dt == 3 ? 1.0 / 3 : ta ? -1.5 : 1.0,
                                             .beta = dt == 2 ? 0.0 : dt == 3 ? 0.1 : 0.5};
                        struct e2e_spec s = {.kind = GEMMD_SYR2K, .dtype = (enum gemmd_dtype)dt,
                                             .ta = (enum gemmd_trans)ta,
                                             .uplo = (enum gemmd_uplo)(ta ^ (dt & 1)),
                                             .row_major = 1, .n = 13, .k = 7,
                                             .alpha = 0.75f, .beta = ta ? 0.0f : -2.0f};

                        ctl_gemm(&x, &g, &seed);
                        ctl_syr2k(&x, &s, &seed);
                }

        /* stats --json, now with some work in it. */
        st = ctl(&x, d.sock, "stats", "--json", NULL);
        cr_assert_eq(st, 0, "stats --json: %s", x.stderr_text);
        cr_assert_eq(x.stdout_text[0], '{', "%s", x.stdout_text);
        cr_assert(strstr(x.stdout_text, "\"devices\""), "%s", x.stdout_text);
        cr_assert_geq(hard_json_number(x.stdout_text, "ops"), 16, "%s", x.stdout_text);
        /* Every one of those requests was answered after device work, and
         * waited a measured, sane time for its reply. */
        cr_assert_geq(hard_json_number(x.stdout_text, "replies"), 16, "%s", x.stdout_text);
        /* Small results and no Launched messages: the completing thread
         * answered every one of them itself, in gemmctl's ring (a slot or a word) while it
         * polled, else (with one event loop) on its socket; with several
         * loops, those not put in the ring the loops answer. */
        if (hard_json_number(x.stdout_text, "loops") == 1)
                cr_assert_eq(hard_json_number(x.stdout_text, "replies_now") +
                                     hard_json_number(x.stdout_text, "replies_ring") +
                                     hard_json_number(x.stdout_text, "replies_word"),
                             hard_json_number(x.stdout_text, "replies"), "%s", x.stdout_text);
        else
                cr_assert_eq(hard_json_number(x.stdout_text, "replies_now"), 0, "%s", x.stdout_text);
        /* The loop's account: its parts lie within its busy time (give or
         * take the read that carried this stats request, counted in part). */
        cr_assert_gt(hard_json_number(x.stdout_text, "loop_callbacks"), 0, "%s", x.stdout_text);
        cr_assert_gt(hard_json_double(x.stdout_text, "loop_frames_s"), 0.0, "%s", x.stdout_text);
        cr_assert_gt(hard_json_double(x.stdout_text, "loop_enqueue_s"), 0.0, "%s", x.stdout_text);
        cr_assert_leq(hard_json_double(x.stdout_text, "loop_recv_s") + hard_json_double(x.stdout_text, "loop_frames_s"),
                      hard_json_double(x.stdout_text, "loop_busy_s") + 1e-3, "%s", x.stdout_text);
        cr_assert_leq(hard_json_double(x.stdout_text, "loop_enqueue_s"), hard_json_double(x.stdout_text, "loop_frames_s"),
                      "%s", x.stdout_text);
        cr_assert_geq(hard_json_double(x.stdout_text, "reply_wait_s"), 0.0, "%s", x.stdout_text);
        cr_assert_lt(hard_json_double(x.stdout_text, "reply_wait_s"), 60.0, "%s", x.stdout_text);

        /* Failures: one line on stderr, non-zero exit. */
        a = path_in_dir("a.npy");
        b = path_in_dir("b.npy");
        o = path_in_dir("bad-out.npy");
        nosock = path_in_dir("nobody.sock");
        {
                float m34[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

                cr_assert_eq(e2e_npy_write(a, 4, 3, 4, m34), 0);
                cr_assert_eq(e2e_npy_write(b, 4, 3, 4, m34), 0); /* 3x4 @ 3x4: mismatch */
        }
        st = ctl(&x, d.sock, "gemm", a, b, "-o", o, NULL);
        expect_one_line_failure(&x, st, "gemm with mismatched shapes");
        cr_assert(access(o, F_OK) != 0, "an output file was left after a failure");
        st = ctl(&x, d.sock, "gemm", a, "/nonexistent/b.npy", "-o", o, NULL);
        expect_one_line_failure(&x, st, "gemm with a missing file");
        cr_assert_eq(e2e_npy_write(b, 4, 4, 2, (float[8]){1, 2, 3, 4, 5, 6, 7, 8}), 0);
        st = ctl(&x, d.sock, "gemm", "--beta", "1", a, b, "-c", a, "-o", o, NULL);
        expect_one_line_failure(&x, st, "gemm with C of the wrong shape");
        {
                FILE *f = fopen(b, "w");

                cr_assert_not_null(f);
                fputs("not a numpy file\n", f);
                fclose(f);
        }
        st = ctl(&x, d.sock, "gemm", a, b, "-o", o, NULL);
        expect_one_line_failure(&x, st, "gemm with a file that is not .npy");
        st = ctl(&x, d.sock, "syr2k", "--uplo", "sideways", a, a, "-o", o, NULL);
        expect_one_line_failure(&x, st, "syr2k with a bad --uplo");
        st = ctl(&x, nosock, "status", NULL);
        expect_one_line_failure(&x, st, "status without a daemon");

        /* The daemon is none the worse. */
        st = ctl(&x, d.sock, "status", NULL);
        cr_assert_eq(st, 0, "status: %s", x.stderr_text);
        free(a);
        free(b);
        free(o);
        free(nosock);
        free(x.stdout_text);
        free(x.stderr_text);
        free(x.bin);
        STOP(&d);
}

/* Writes a .npy file of descr and shape (as Python writes them, "(2, 3)")
 * around raw data, as NumPy and ml_dtypes do. */
static void npy_raw(const char *path, const char *descr, const char *shape, const void *data,
                    size_t n)
{
        char dict[160];
        uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
        size_t len = (size_t)snprintf(dict, sizeof(dict),
                                      "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                                      descr, shape);
        size_t total = (10 + len + 1 + 63) / 64 * 64;
        FILE *f = fopen(path, "wb");

        cr_assert_not_null(f);
        pre[8] = (uint8_t)(total - 10);
        pre[9] = (uint8_t)((total - 10) >> 8);
        fwrite(pre, 1, 10, f);
        fwrite(dict, 1, len, f);
        for (size_t i = 10 + len; i < total - 1; i++)
                fputc(' ', f);
        fputc('\n', f);
        fwrite(data, 1, n, f);
        fclose(f);
}

/* Reads a .npy file whole and checks its header holds `want` (e.g.
 * "'descr': '|V2'") and that its data is the n bytes of `data`. */
static void npy_expect(const char *path, const char *want, const void *data, size_t n)
{
        size_t len;
        char *f = e2e_read_file(path, &len);

        cr_assert_not_null(f, "%s was not written", path);
        cr_assert_geq(len, 64 + n, "%s: %zu bytes", path, len);
        cr_assert(memmem(f, len - n, want, strlen(want)), "%s: no %s in %.*s", path, want,
                  (int)(len - n), f);
        cr_assert_arr_eq(f + len - n, data, n, "%s: wrong data", path);
        free(f);
}

/* A client that runs 32x32x32 GEMMs until it is killed, so that top has
 * something to show. */
static pid_t start_load(const struct e2e_daemon *d)
{
        pid_t pid = fork();

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                struct gemmd_result res;
                struct gemmd_op op;
                gemmd_client *c = e2e_connect(d);

                if (!c || e2e_timed_op(c, 32, 32, 32, &op))
                        _exit(1);
                for (int i = 0; i < 2000000 && !gemmd_run(c, &op, 1, &res); i++)
                        ;
                _exit(0);
        }
        return pid;
}

/* gemmctl top and stats --watch in a pipe, under load: one block per
 * refresh, rates that show the load, no escape codes. */
Test(e2e, gemmctl_top_and_stats_watch_in_a_pipe)
{
        struct e2e_daemon d;
        struct ctl x = {.d = &d};
        const char *p, *q;
        char load[32];
        double busy = -1, tf = -1, ops = -1;
        int st, blocks = 0;
        pid_t pid;

        START(&d, "--threads", "2", NULL);
        x.bin = e2e_build_path("gemmctl");
        pid = start_load(&d);
        snprintf(load, sizeof(load), " %d ", (int)pid);
        usleep(200 * 1000);
        st = ctl(&x, d.sock, "top", "--interval", "0.5", "--count", "3", NULL);
        cr_assert_eq(st, 0, "top: %s", x.stderr_text);
        cr_assert_null(strchr(x.stdout_text, '\033'), "escape codes in a pipe:\n%s",
                       x.stdout_text);
        for (p = x.stdout_text; (p = strstr(p, "gemmd ")); p++)
                blocks += p == x.stdout_text || p[-1] == '\n';
        cr_assert_eq(blocks, 3, "%d blocks, not 3:\n%s", blocks, x.stdout_text);
        /* The last block's device line: DEV KIND BUSY TFLOP/s OPS/s ... */
        q = strstr(x.stdout_text, "\nDEV ");
        for (p = q; p && (p = strstr(p + 1, "\nDEV ")); q = p)
                ;
        cr_assert_not_null(q, "%s", x.stdout_text);
        q = strchr(q + 1, '\n');
        cr_assert_eq(sscanf(q, " 0 cpu %lf%% %lf %lf", &busy, &tf, &ops), 3, "%s", q);
        cr_assert_gt(ops, 10, "%s", x.stdout_text);
        cr_assert(busy > 0 && busy <= 100, "%s", x.stdout_text);
        cr_assert(strstr(x.stdout_text, "requests/s"), "%s", x.stdout_text);
        cr_assert(strstr(q, load), "the loading client (pid%s) is not listed:\n%s", load, q);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);

        st = ctl(&x, d.sock, "stats", "--json", "--watch", "0.2", "--count", "2", NULL);
        cr_assert_eq(st, 0, "stats --watch: %s", x.stderr_text);
        cr_assert_eq(e2e_count_lines(x.stdout_text), 2, "%s", x.stdout_text);
        cr_assert(x.stdout_text[0] == '{' && strstr(x.stdout_text, "}\n{"), "%s",
                  x.stdout_text);
        st = ctl(&x, d.sock, "stats", "--watch", "0.2", "--count", "2", NULL);
        cr_assert_eq(st, 0, "stats --watch: %s", x.stderr_text);
        p = strstr(x.stdout_text, "\ngemmd ");
        cr_assert(p && !strstr(p + 1, "\ngemmd "), "not 2 blocks:\n%s", x.stdout_text);
        st = ctl(&x, d.sock, "top", "--interval", "0", NULL);
        cr_assert_eq(st, 2, "top --interval 0: %d", st);
        free(x.stdout_text);
        free(x.stderr_text);
        free(x.bin);
        STOP(&d);
}

/* gemmctl's files: bfloat16 as ml_dtypes saves it, '-' for standard input
 * and output, 1-D operands as numpy.matmul takes them, stacks refused, and
 * the rule of C and beta. */
Test(e2e, gemmctl_bf16_pipes_vectors_and_beta_rule)
{
        /* A = [[1, 2, 3], [4, 5, 6]], B = [[1, 0], [0, 1], [1, 1]]:
         * A @ B = [[4, 5], [10, 11]]; A @ [1, 2, 3] = [14, 32]. */
        static const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, v[3] = {1, 2, 3};
        static const float ab[4] = {4, 5, 10, 11}, av[2] = {14, 32}, vv = 14;
        static const uint16_t a16[6] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0};
        static const uint16_t b16[6] = {0x3f80, 0, 0, 0x3f80, 0x3f80, 0x3f80};
        static const uint16_t ab16[4] = {0x4080, 0x40a0, 0x4120, 0x4130};
        struct e2e_daemon d;
        struct ctl x = {.d = &d};
        char *pa = path_in_dir("a.npy"), *pb = path_in_dir("b.npy"), *pv = path_in_dir("v.npy");
        char *p16a = path_in_dir("a16.npy"), *p16b = path_in_dir("b16.npy");
        char *ps = path_in_dir("s.npy"), *po = path_in_dir("o.npy"), *cmd;
        float zero[8] = {0};
        int st;

        START(&d, "--threads", "2", NULL);
        x.bin = e2e_build_path("gemmctl");
        npy_raw(pa, "<f4", "(2, 3)", a, sizeof(a));
        npy_raw(pb, "<f4", "(3, 2)", b, sizeof(b));
        npy_raw(pv, "<f4", "(3,)", v, sizeof(v));
        npy_raw(p16a, "|V2", "(2, 3)", a16, sizeof(a16));
        npy_raw(p16b, "|V2", "(3, 2)", b16, sizeof(b16));
        npy_raw(ps, "<f4", "(2, 2, 2)", zero, sizeof(zero));

        st = ctl(&x, d.sock, "gemm", p16a, p16b, "-o", po, NULL);
        cr_assert_eq(st, 0, "bf16 gemm: %s", x.stderr_text);
        npy_expect(po, "'descr': '|V2', 'fortran_order': False, 'shape': (2, 2)", ab16,
                   sizeof(ab16));
        st = ctl(&x, d.sock, "gemm", pa, p16b, "-o", po, NULL);
        cr_assert_eq(st, 1, "f32 @ bf16: %d", st);
        cr_assert(strstr(x.stderr_text, "bfloat16"), "%s", x.stderr_text);

        /* A from a pipe, the result to one; nothing is named '-'. */
        cr_assert_geq(asprintf(&cmd, "cd %s && %s --socket %s gemm - %s -o - < %s > %s",
                               e2e_dir, x.bin, d.sock, pb, pa, po), 0);
        st = e2e_run((char *[]){"/bin/sh", "-c", cmd, NULL}, x.out, x.err, 30000);
        cr_assert_eq(st, 0, "%s", cmd);
        npy_expect(po, "'shape': (2, 2)", ab, sizeof(ab));
        cr_assert_neq(access(path_in_dir("-"), F_OK), 0, "a file named '-' was written");
        free(cmd);
        st = ctl(&x, d.sock, "gemm", "-", "-", "-o", po, NULL);
        cr_assert_eq(st, 2, "two inputs from stdin: %d", st);

        /* 1-D: A @ v is (2,), v @ v is (). */
        st = ctl(&x, d.sock, "gemm", pa, pv, "-o", po, NULL);
        cr_assert_eq(st, 0, "A @ v: %s", x.stderr_text);
        npy_expect(po, "'shape': (2,)", av, sizeof(av));
        st = ctl(&x, d.sock, "gemm", "--op-b", "t", pv, pv, "-o", po, NULL);
        cr_assert_eq(st, 0, "v @ v: %s", x.stderr_text);
        npy_expect(po, "'shape': ()", &vv, sizeof(vv));
        st = ctl(&x, d.sock, "gemm", ps, pb, "-o", po, NULL);
        cr_assert_eq(st, 1, "a stack: %d", st);
        cr_assert(strstr(x.stderr_text, "1-D and 2-D") && e2e_count_lines(x.stderr_text) == 1,
                  "%s", x.stderr_text);

        /* beta: 1 with C, refused without unless 0. */
        st = ctl(&x, d.sock, "gemm", pa, pb, "-c", pb, "-o", po, NULL);
        cr_assert_eq(st, 1, "C of the wrong shape: %d", st);
        npy_raw(pv, "<f4", "(2, 2)", ab, sizeof(ab));
        st = ctl(&x, d.sock, "gemm", pa, pb, "-c", pv, "-o", po, NULL);
        cr_assert_eq(st, 0, "with C: %s", x.stderr_text);
        npy_expect(po, "'shape': (2, 2)", (float[4]){8, 10, 20, 22}, 4 * sizeof(float));
        st = ctl(&x, d.sock, "gemm", "--beta", "0", pa, pb, "-o", po, NULL);
        cr_assert_eq(st, 0, "--beta 0 without C: %s", x.stderr_text);
        npy_expect(po, "'shape': (2, 2)", ab, sizeof(ab));
        st = ctl(&x, d.sock, "syr2k", "--beta", "0.5", pa, pa, "-o", po, NULL);
        cr_assert_eq(st, 2, "--beta 0.5 without C: %d", st);
        cr_assert(strstr(x.stderr_text, "needs -c") && e2e_count_lines(x.stderr_text) == 1,
                  "%s", x.stderr_text);

        free(pa);
        free(pb);
        free(pv);
        free(p16a);
        free(p16b);
        free(ps);
        free(po);
        free(x.stdout_text);
        free(x.stderr_text);
        free(x.bin);
        STOP(&d);
}

/* ---- SIGTERM drains ------------------------------------------------------ */

#define DRAIN_OPS 120
#define DRAIN_CS 8

Test(e2e, sigterm_finishes_in_flight_work_replies_and_exits_0)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 256, .n = 256, .k = 256,
                             .pad = 3, .alpha = 0.5f, .beta = 0.0f};
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[DRAIN_CS];
        gemmd_ticket t[DRAIN_OPS], late;
        gemmd_client *c, *c2 = NULL;
        uint64_t seed = 10;
        char why[300];
        double err;
        int rc;

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 16u << 20), 0);
        for (int i = 0; i < DRAIN_CS; i++)
                cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
        for (int i = 0; i < DRAIN_OPS; i++)
                cr_assert_eq(gemmd_submit(c, &p[i % DRAIN_CS].op, 1, GEMMD_PRIO_NORMAL, &t[i]), 0);
        /* Every submit admitted before the signal is sent. */
        cr_assert_eq(e2e_round_trip(c), 0);
        kill(d.pid, SIGTERM);
        /* Draining: the socket stops accepting... */
        for (int tries = 0; tries < 500; tries++) {
                rc = gemmd_connect(d.sock, &c2);
                if (rc)
                        break;
                gemmd_disconnect(c2);
                c2 = NULL;
                usleep(10000);
        }
        cr_assert_neq(rc, 0, "connections are still accepted after SIGTERM");
        /* ...and takes no new work. */
        cr_assert_eq(gemmd_submit(c, &p[0].op, 1, GEMMD_PRIO_NORMAL, &late), 0);
        /* ...but everything admitted before finishes and is answered. */
        for (int i = 0; i < DRAIN_OPS; i++) {
                rc = gemmd_wait(c, t[i], 60000, NULL, 0);
                cr_assert_eq(rc, 0, "op %d admitted before SIGTERM: %s", i, gemmd_strerror(rc));
        }
        /* Refused, or unanswered if the drain was already over. */
        rc = gemmd_wait(c, late, 60000, NULL, 0);
        cr_assert(rc == GEMMD_ESHUTDOWN || rc == GEMMD_EDISCONNECT, "op sent after SIGTERM: %s",
                  gemmd_strerror(rc));
        for (int i = 0; i < DRAIN_CS; i++) {
                cr_assert_eq(e2e_prob_check(&p[i], &err, why, sizeof(why)), 0, "%s", why);
                e2e_prob_free(&p[i]);
        }
        STOP(&d);
        gemmd_disconnect(c);
}

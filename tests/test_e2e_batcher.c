/*
 * test_e2e_batcher.c - the batcher seen through the real daemon: a lone
 * request is not delayed, the batch window, a session's interleaved types
 * batched by type, bursts served in groups, auto's and the narrow tile's
 * choices, result bits independent of the group and of the plan mode, admission
 * rejections, priorities, and fairness between a flooding session and a
 * light one.
 *
 * These tests measure time, so this suite runs its tests one at a time
 * (see main at the bottom) rather than in parallel as Criterion would.
 */
#include <criterion/criterion.h>
#include <criterion/options.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_util.h"
#include "tests/hard_util.h"
#include "tests/e2e_assert.h"

/* These tests read each result's group and queue time, which a request
 * answered by its completion word does not carry: their clients go
 * without words. */
static void batcher_setup(void)
{
        setenv("GEMMD_WORDS", "0", 1);
        e2e_setup();
}

TestSuite(e2e, .init = batcher_setup, .fini = e2e_teardown, .timeout = 180);

static const struct e2e_spec big_f32 = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 256,
                                        .n = 256, .k = 256, .alpha = 1.0f, .beta = 0.0f};

/* About 1.8 GFLOP, a tenth of a second or more of a CPU thread: it holds
 * the device while a test queues work behind it. Too costly to check
 * against the double reference, so only its status is checked. */
static const struct e2e_spec long_f32 = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 768,
                                         .n = 768, .k = 1536, .alpha = 1.0f, .beta = 0.0f};

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

/* Submits one op, returns the ticket (asserting success). */
static gemmd_ticket submit1(gemmd_client *c, const struct gemmd_op *op, int prio)
{
        gemmd_ticket t;
        int rc = gemmd_submit(c, op, 1, prio, &t);

        cr_assert_eq(rc, 0, "gemmd_submit: %s", gemmd_strerror(rc));
        return t;
}

static void wait1(gemmd_client *c, gemmd_ticket t, struct gemmd_result *r)
{
        int rc = gemmd_wait(c, t, 60000, r, 1);

        cr_assert_eq(rc, 0, "gemmd_wait: %s", gemmd_strerror(rc));
}

/* The value of --max-group-tiles for a batch-window test whose ops have
 * `tiles` tiles in all (the CPU backend's tiles are 64 x 64: spec_tiles):
 * the window then closes once every op is in, not after a time that a
 * client starved of CPU (Criterion runs a suite's tests side by side)
 * could miss. */
static const char *all_in(char buf[16], int tiles)
{
        snprintf(buf, 16, "%d", tiles);
        return buf;
}

/* The CPU backend's tiles of one op of spec s. */
static int spec_tiles(const struct e2e_spec *s)
{
        return (int)(((s->m + 63) / 64) * ((s->n + 63) / 64));
}

/* Submits the n problems at once, one op each, then waits for each and
 * asserts it succeeded with the right result (r[i]: op i's). */
static void run_all(gemmd_client *c, struct e2e_prob *p, struct gemmd_result *r, int n)
{
        gemmd_ticket t[64];
        char why[256];
        double err;

        cr_assert_leq(n, 64);
        for (int i = 0; i < n; i++)
                t[i] = submit1(c, &p[i].op, GEMMD_PRIO_NORMAL);
        for (int i = 0; i < n; i++) {
                wait1(c, t[i], &r[i]);
                cr_assert_eq(r[i].status, 0, "op %d: %s", i, gemmd_strerror(r[i].status));
                cr_assert_eq(e2e_prob_check(&p[i], &err, why, sizeof(why)), 0, "op %d: %s", i, why);
        }
}

/* ---- (a) a lone request ----------------------------------------------- */

Test(e2e, lone_request_on_idle_daemon_is_not_delayed)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .m = 64, .n = 64, .k = 64,
                             .alpha = 1.0f, .beta = 0.5f};
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p;
        struct gemmd_result r;
        uint64_t q[7], seed = 21;
        gemmd_client *c;
        char why[256];

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 1u << 20), 0);
        cr_assert_eq(e2e_prob_place(&p, &s, &ar, &seed), 0);
        for (int i = 0; i < 7; i++) {
                usleep(20000); /* let the device go idle */
                e2e_prob_reset(&p);
                cr_assert_eq(e2e_run_checked(c, &p, 1, 1, &r, why, sizeof(why)), 0, "%s", why);
                cr_assert_eq(r.group_size, 1, "a lone request shared a group of %u", r.group_size);
                q[i] = r.queue_us;
        }
        qsort(q, 7, sizeof(q[0]), cmp_u64);
        cr_assert_lt(q[3], 2000, "median queue time %llu us (min %llu, max %llu)",
                     (unsigned long long)q[3], (unsigned long long)q[0], (unsigned long long)q[6]);
        e2e_prob_free(&p);
        gemmd_disconnect(c);
        STOP(&d);
}

/* A request that finds its device idle is launched by the event loop that
 * read it (--loop-launch yes, and auto, the default, on the CPU backend),
 * which gemmctl stats counts; with --loop-launch no, with a batch window,
 * or from a device process (whose launches stay with the worker) the
 * worker launches every group. Each result is checked either way. */
Test(e2e, lone_requests_are_launched_by_the_loop_that_read_them)
{
        static const char *const flags[][2] = {
                {"--loop-launch", "yes"}, {"--loop-launch", "no"}, {"--batch-window-us", "200"},
                {"--loop-launch", "auto"}};
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 48, .n = 40, .k = 56,
                             .alpha = 1.0f, .beta = 0.5f};

        for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p;
                struct gemmd_result r;
                uint64_t seed = 31 + (uint64_t)f;
                long long groups, by_loop;
                int devproc;
                gemmd_client *c;
                char why[256];

                START(&d, "--threads", "2", flags[f][0], flags[f][1], NULL);
                c = e2e_connect(&d);
                cr_assert_not_null(c);
                cr_assert_eq(e2e_arena_init(&ar, c, 1u << 20), 0);
                cr_assert_eq(e2e_prob_place(&p, &s, &ar, &seed), 0);
                for (int i = 0; i < 20; i++) {
                        usleep(2000); /* the device goes idle between requests */
                        e2e_prob_reset(&p);
                        cr_assert_eq(e2e_run_checked(c, &p, 1, 1, &r, why, sizeof(why)), 0, "%s %s: %s",
                                     flags[f][0], flags[f][1], why);
                }
                groups = hard_device_number(c, "groups");
                by_loop = hard_device_number(c, "loop_groups");
                devproc = hard_device_number(c, "process_pid") > 0;
                fprintf(stderr, "%s %s%s: %lld of %lld groups launched by the loop\n", flags[f][0], flags[f][1],
                        devproc ? " (device process)" : "", by_loop, groups);
                cr_expect_eq(groups, 20);
                if ((f == 0 || f == 3) && !devproc)
                        /* (the worker thread may take the odd one first) */
                        cr_expect_geq(by_loop, 15, "%lld of %lld groups launched by the loop", by_loop, groups);
                else
                        cr_expect_eq(by_loop, 0, "%s %s: %lld groups launched by the loop", flags[f][0],
                                     flags[f][1], by_loop);
                e2e_prob_free(&p);
                gemmd_disconnect(c);
                STOP(&d);
        }
}

Test(e2e, batch_window_holds_a_lone_request_for_company)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 32, .n = 32, .k = 32,
                             .alpha = 1.0f, .beta = 0.0f};
        struct e2e_daemon d;
        struct e2e_arena ar1, ar2;
        struct e2e_prob p1, p2;
        struct gemmd_result r1, r2;
        gemmd_client *c1, *c2;
        gemmd_ticket t1, t2;
        uint64_t seed = 22;
        char why[256];
        double err;

        /* A window long against the 5 ms between the submits, which a
         * client starved of CPU (the suite's other tests run beside it)
         * may stretch. */
        START(&d, "--threads", "2", "--batch-window-us", "300000", NULL);
        c1 = e2e_connect(&d);
        c2 = e2e_connect(&d);
        cr_assert(c1 && c2);
        cr_assert_eq(e2e_arena_init(&ar1, c1, 1u << 20), 0);
        cr_assert_eq(e2e_arena_init(&ar2, c2, 1u << 20), 0);
        cr_assert_eq(e2e_prob_place(&p1, &s, &ar1, &seed), 0);
        cr_assert_eq(e2e_prob_place(&p2, &s, &ar2, &seed), 0);
        t1 = submit1(c1, &p1.op, GEMMD_PRIO_NORMAL);
        usleep(5000);
        t2 = submit1(c2, &p2.op, GEMMD_PRIO_NORMAL);
        wait1(c1, t1, &r1);
        wait1(c2, t2, &r2);
        cr_assert_eq(e2e_prob_check(&p1, &err, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(e2e_prob_check(&p2, &err, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(r1.group_id, r2.group_id, "two requests inside the window ran apart");
        cr_assert_eq(r1.group_size, 2);
        cr_assert_geq(r1.queue_us, 250000, "the window was not waited for: %llu us",
                      (unsigned long long)r1.queue_us);
        cr_assert_lt(r1.queue_us, 1000000);
        /* The stats split the queue time: the window is spent waiting for
         * a group, not staged by the loop or forming the group, and the
         * parts add up to the two requests' queue times. */
        char *json = NULL;
        cr_assert_eq(gemmd_stats(c1, 1, &json), 0);
        const double staged = hard_json_double(json, "queue_staged_s"), waiting = hard_json_double(json, "queue_waiting_s"),
                     forming = hard_json_double(json, "queue_forming_s");
        const double queued = (r1.queue_us + r2.queue_us) / 1e6;
        cr_assert_geq(waiting, 0.06, "waiting %.6f s of %.6f s queued", waiting, queued);
        cr_assert(staged >= 0 && staged < 0.01 && forming >= 0 && forming < 0.01, "staged %.6f s, forming %.6f s",
                  staged, forming);
        cr_assert_lt(fabs(staged + waiting + forming - queued), 0.001, "parts %.6f + %.6f + %.6f s against %.6f s",
                     staged, waiting, forming, queued);
        free(json);
        e2e_prob_free(&p1);
        e2e_prob_free(&p2);
        gemmd_disconnect(c2);
        gemmd_disconnect(c1);
        STOP(&d);
}

/* ---- early completion -------------------------------------------------- */

/*
 * With --cpu-early the CPU backend answers each op of a group once its own
 * tiles are done, as a GPU does under --early-completion: eight small ops
 * in the group of a larger one (the batch window puts them together, spt
 * deals their tiles first) are answered before it, each right, those in
 * shared memory and those inline; without it, or without early completion,
 * every op waits for the group. Run again through a device process (make test's second pass),
 * where the ops answered early go up its ring.
 */
Test(e2e, early_completion_answers_each_op_once_its_tiles_are_done)
{
        /* --cpu-early, and --early-completion, which it needs. */
        static const char *const early[] = {"yes", "no", "yes"}, *const completion[] = {"yes", "yes", "no"};
        static const struct e2e_spec mid = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 384, .n = 384,
                                            .k = 768, .alpha = 1.0f, .beta = 0.0f};
        static const struct e2e_spec small = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 24, .n = 40,
                                              .k = 32, .alpha = 1.0f, .beta = 0.5f};
        enum { NSMALL = 8, N = NSMALL + 1 };

        for (int v = 0; v < 3; v++) {
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p[N];
                struct gemmd_result r[N];
                gemmd_ticket t[N];
                int order[N];
                uint64_t seed = 77;
                gemmd_client *c;
                char why[256];
                double err;

                char tiles[16];

                START(&d, "--threads", "2", "--cpu-early", early[v], "--early-completion", completion[v],
                      "--batch-window-us", "1000000", "--max-group-tiles",
                      all_in(tiles, spec_tiles(&mid) + NSMALL * spec_tiles(&small)), "--mode", "spt", NULL);
                c = e2e_connect(&d);
                cr_assert_not_null(c);
                cr_assert_eq(e2e_arena_init(&ar, c, 16u << 20), 0);
                /* Every other small op carries its operands in the request:
                 * through a device process its C comes back inline. */
                for (int i = 0; i < N; i++)
                        cr_assert_eq(i && i % 2 ? e2e_prob_inline(&p[i], &small, &seed)
                                                : e2e_prob_place(&p[i], i ? &small : &mid, &ar, &seed),
                                     0);
                for (int i = 0; i < N; i++)
                        t[i] = submit1(c, &p[i].op, GEMMD_PRIO_NORMAL);
                for (int n = 0; n < N; n++) {
                        gemmd_ticket got;
                        int i = 0;

                        cr_assert_eq(gemmd_wait_any(c, 60000, &got), 1);
                        while (i < N && t[i] != got)
                                i++;
                        cr_assert_lt(i, N, "a ticket not submitted came back");
                        wait1(c, got, &r[i]);
                        order[n] = i;
                }
                for (int i = 0; i < N; i++) {
                        cr_assert_eq(r[i].status, 0, "--cpu-early %s, op %d: %s", early[v], i,
                                     gemmd_strerror(r[i].status));
                        cr_assert_eq(e2e_prob_check(&p[i], &err, why, sizeof(why)), 0, "--cpu-early %s, op %d: %s",
                                     early[v], i, why);
                        cr_assert_eq(r[i].group_id, r[0].group_id, "op %d ran in another group", i);
                }
                const long long answered_early = hard_device_number(c, "ops_early");

                fprintf(stderr, "--cpu-early %s --early-completion %s: %lld of %d ops answered before their group "
                                "ended, the larger one answered %s of %d\n",
                        early[v], completion[v], answered_early, N, order[N - 1] == 0 ? "last" : "not last", N);
                if (v == 0) {
                        cr_expect_geq(answered_early, NSMALL, "%lld ops answered early", answered_early);
                        cr_expect_eq(order[N - 1], 0, "a small op was answered after the larger one");
                } else {
                        cr_expect_eq(answered_early, 0, "--cpu-early %s --early-completion %s answered %lld ops early",
                                     early[v], completion[v], answered_early);
                }
                for (int i = 0; i < N; i++)
                        e2e_prob_free(&p[i]);
                gemmd_disconnect(c);
                STOP(&d);
        }
}

/* ---- (b) a burst is served in groups ----------------------------------- */

#define BURST_CLIENTS 8
#define BURST_OPS 16

/* What a client process gets: the daemon and its number. */
struct child {
        const struct e2e_daemon *d;
        int id;
};

/* One burst client: waits for the start signal on fd, submits BURST_OPS
 * ops at once, checks them, and writes the largest group size it saw to
 * fd. */
static int burst_client(void *ctx, int fd)
{
        const struct e2e_daemon *d = ((struct child *)ctx)->d;
        int id = ((struct child *)ctx)->id;
        struct e2e_prob p[BURST_OPS];
        struct gemmd_result r[BURST_OPS];
        struct e2e_arena ar;
        uint64_t seed = 300 + (uint64_t)id;
        uint32_t biggest = 0;
        gemmd_client *c = e2e_connect(d);
        char why[256], go;

        if (!c || e2e_arena_init(&ar, c, 4u << 20))
                return 2;
        for (int i = 0; i < BURST_OPS; i++) {
                struct e2e_spec s;

                e2e_spec_random(&s, &seed, 96);
                if (e2e_prob_place(&p[i], &s, &ar, &seed))
                        return 3;
        }
        if (read(fd, &go, 1) != 1)
                return 4;
        if (e2e_run_checked(c, p, BURST_OPS, 1, r, why, sizeof(why))) {
                fprintf(stderr, "burst client %d: %s\n", id, why);
                return 1;
        }
        for (int i = 0; i < BURST_OPS; i++)
                if (r[i].group_size > biggest)
                        biggest = r[i].group_size;
        if (write(fd, &biggest, sizeof(biggest)) != sizeof(biggest))
                return 5;
        gemmd_disconnect(c);
        return 0;
}

/* The counts of the text stats' group-size histogram in buckets of 2 ops
 * or more. */
static long long grouped_in_text(const char *text)
{
        const char *p = strstr(text, "group size:");
        long long n = 0;

        cr_assert_not_null(p, "no group-size histogram in:\n%s", text);
        for (p = strchr(p, '\n'); p && p[1] == ' ' && p[2] == ' ' && p[3] == ' '; p = strchr(p + 1, '\n')) {
                unsigned long long lo, hi, count;

                if (sscanf(p + 1, " %llu .. %llu ops %llu", &lo, &hi, &count) == 3 && lo >= 2)
                        n += (long long)count;
        }
        return n;
}

/* A session that interleaves f16 and bf16 ops, with groups of one kernel
 * configuration (--one-kernel-groups, what a GPU does): the batch window
 * gathers them into one group per type, not a group per op, because a
 * group looks past its session's head for ops of its type. */
Test(e2e, a_session_interleaving_types_is_batched_by_type)
{
        enum { N = 16 };
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[N];
        struct gemmd_result r[N];
        uint64_t seed = 24, gid[2] = {0, 0};
        gemmd_client *c;

        char tiles[16];

        /* Each op is one tile. */
        START(&d, "--threads", "2", "--batch-window-us", "1000000", "--max-group-tiles", all_in(tiles, N),
              "--one-kernel-groups", "yes", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 4u << 20), 0);
        for (int i = 0; i < N; i++) {
                struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = i & 1 ? GEMMD_BF16 : GEMMD_F16,
                                     .m = 40 + i, .n = 24 + 2 * i, .k = 64, .alpha = 1.0f, .beta = 0.0f};

                cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
        }
        run_all(c, p, r, N);
        for (int i = 0; i < N; i++) {
                const int type = i & 1;

                if (!gid[type])
                        gid[type] = r[i].group_id;
                cr_assert_eq(r[i].group_id, gid[type], "op %d (%s) ran in group %llu, the first of its type in %llu",
                             i, type ? "bf16" : "f16", (unsigned long long)r[i].group_id,
                             (unsigned long long)gid[type]);
                cr_assert_eq(r[i].group_size, N / 2, "op %d: a group of %u", i, r[i].group_size);
        }
        cr_assert_neq(gid[0], gid[1], "f16 and bf16 ops shared a group of one kernel configuration");
        for (int i = 0; i < N; i++)
                e2e_prob_free(&p[i]);
        gemmd_disconnect(c);
        STOP(&d);
}

/*
 * A GPU with the resident kernel cuts 16-bit groups at one wave while at
 * most two waves of tiles are outstanding (worker.c, group_tile_cap), so
 * that no group is launched and stops that kernel; the CPU backend does
 * it under --cpu-wave-cut (a wave there: the 8 work lists of --threads 2;
 * each 64 x 64 op is one tile). The batch window gathers the ops first.
 * 12 ops (12 tiles, at most 16 outstanding): a group of 8, then one of
 * the other 4; without the cut, one group of 12. 20 ops (more than two
 * waves): one group of 20 either way.
 */
Test(e2e, sixteen_bit_groups_are_cut_at_one_wave_while_little_is_outstanding)
{
        static const struct {
                const char *cut;
                int n, big, want_big, want_small; /* ops in groups of `big`, in groups of 4 */
        } cases[] = {{"yes", 12, 8, 8, 4}, {"no", 12, 12, 12, 0}, {"yes", 20, 20, 20, 0}};

        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p[20];
                struct gemmd_result r[20];
                uint64_t seed = 29;
                gemmd_client *c;
                const int n = cases[k].n, big = cases[k].big;
                int nbig = 0, nsmall = 0;

                char tiles[16];

                /* Each 64 x 64 op is one tile. */
                START(&d, "--threads", "2", "--batch-window-us", "1000000", "--max-group-tiles", all_in(tiles, n),
                      "--cpu-wave-cut", cases[k].cut, NULL);
                c = e2e_connect(&d);
                cr_assert_not_null(c);
                cr_assert_eq(e2e_arena_init(&ar, c, 4u << 20), 0);
                for (int i = 0; i < n; i++) {
                        const struct e2e_spec sp = {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .m = 64, .n = 64,
                                                    .k = 64, .alpha = 1.0f, .beta = 0.0f};

                        cr_assert_eq(e2e_prob_place(&p[i], &sp, &ar, &seed), 0);
                }
                run_all(c, p, r, n);
                for (int i = 0; i < n; i++) {
                        nbig += (int)r[i].group_size == big;
                        nsmall += r[i].group_size == 4;
                }
                cr_assert_eq(nbig, cases[k].want_big, "--cpu-wave-cut %s, %d ops: %d in groups of %d, want %d",
                             cases[k].cut, n, nbig, big, cases[k].want_big);
                cr_assert_eq(nsmall, cases[k].want_small, "--cpu-wave-cut %s, %d ops: %d in groups of 4, want %d",
                             cases[k].cut, n, nsmall, cases[k].want_small);
                for (int i = 0; i < n; i++)
                        e2e_prob_free(&p[i]);
                gemmd_disconnect(c);
                STOP(&d);
        }
}

Test(e2e, burst_from_eight_processes_is_served_in_groups)
{
        struct e2e_daemon d;
        struct child ch[BURST_CLIENTS];
        int fds[BURST_CLIENTS];
        pid_t pids[BURST_CLIENTS];
        uint32_t biggest = 0;
        gemmd_client *c;
        char *json = NULL, *text = NULL, *hist;
        int grouped = 0;

        START(&d, "--threads", "2", NULL);
        for (int i = 0; i < BURST_CLIENTS; i++) {
                ch[i] = (struct child){&d, i};
                pids[i] = e2e_fork(burst_client, &ch[i], &fds[i]);
                cr_assert_gt(pids[i], 0);
        }
        usleep(200000); /* every client connected and ready */
        for (int i = 0; i < BURST_CLIENTS; i++)
                cr_assert_eq(write(fds[i], "g", 1), 1);
        for (int i = 0; i < BURST_CLIENTS; i++) {
                uint32_t b;

                cr_assert_eq(e2e_wait_child(pids[i], 60000), 0, "burst client %d failed", i);
                cr_assert_eq(read(fds[i], &b, sizeof(b)), sizeof(b));
                close(fds[i]);
                if (b > biggest)
                        biggest = b;
        }
        cr_assert_gt(biggest, 1, "every op of the burst ran alone");

        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        hist = strstr(json, "\"group_size_log2\":[");
        cr_assert_not_null(hist, "%s", json);
        hist += strlen("\"group_size_log2\":[");
        for (int b = 0; b < 24 && hist; b++) {
                long long v = strtoll(hist, NULL, 10);

                if (b >= 1)
                        grouped += v > 0;
                hist = strchr(hist, ',');
                hist = hist ? hist + 1 : NULL;
        }
        cr_assert_gt(grouped, 0, "no group of 2 or more ops in the stats: %s", json);
        cr_assert_eq(gemmd_stats(c, 0, &text), 0);
        cr_assert_gt(grouped_in_text(text), 0, "text stats show no group of 2+ ops:\n%s", text);
        free(json);
        free(text);
        gemmd_disconnect(c);

        /* gemmctl stats shows the same histogram. */
        {
                char *ctl = e2e_build_path("gemmctl"), out_path[256];
                char *argv[] = {ctl, "--socket", d.sock, "stats", NULL};
                char *shown;

                snprintf(out_path, sizeof(out_path), "%s/stats.txt", e2e_dir);
                cr_assert_eq(e2e_run(argv, out_path, NULL, 30000), 0, "gemmctl stats failed");
                shown = e2e_read_file(out_path, NULL);
                cr_assert_not_null(shown);
                cr_assert_gt(grouped_in_text(shown), 0, "gemmctl stats:\n%s", shown);
                free(shown);
                free(ctl);
        }
        STOP(&d);
}

/* ---- (b2) auto mode ------------------------------------------------------ */

/* A count of the daemon's JSON stats ("split_groups", ...), asserted present. */
static long long stats_count(gemmd_client *c, const char *key)
{
        char *json = NULL;
        long long v;

        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        v = hard_json_number(json, key);
        cr_assert_geq(v, 0, "no %s in %s", key, json);
        free(json);
        return v;
}

/* The bits of p's result the first time a test sees it (kept in *first),
 * which the same problem's later runs must equal. */
static const uint8_t *first_bits(uint8_t **first, const struct e2e_prob *p)
{
        if (!*first) {
                *first = malloc(p->cbytes);
                cr_assert_not_null(*first);
                memcpy(*first, p->c, p->cbytes);
        }
        return *first;
}

/* One group whose sorted plan leaves a CTA two tiles where the bound is
 * one: a GEMM of K 8192 and eight of K 2048 (one 64 x 64 tile each, long
 * exact-f32 tiles) on the 8 CTAs of --threads 2. --mode auto, which is
 * also the default, runs it on a split plan (lpt gives the long tile a CTA
 * of its own), --mode sorted does not, and all give every result right. */
Test(e2e, auto_mode_takes_split_where_sorted_is_unbalanced)
{
        /* NULL: the default */
        static const char *const modes[] = {"auto", "sorted", NULL};

        for (int m = 0; m < 3; m++) {
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p[9];
                struct gemmd_result r[9];
                uint64_t seed = 5;
                gemmd_client *c;
                char why[256];
                const int sorted = modes[m] && !strcmp(modes[m], "sorted");

                if (modes[m])
                        START(&d, "--threads", "2", "--mode", modes[m], NULL);
                else
                        START(&d, "--threads", "2", NULL);
                c = e2e_connect(&d);
                cr_assert_not_null(c);
                cr_assert_eq(e2e_arena_init(&ar, c, 16u << 20), 0);
                for (int i = 0; i < 9; i++) {
                        const struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 64, .n = 64,
                                                   .k = i ? 2048 : 8192, .alpha = 1.0f, .beta = 0.5f};

                        cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
                }
                cr_assert_eq(e2e_run_checked(c, p, 9, 9, r, why, sizeof(why)), 0, "%s", why);
                cr_assert_eq(r[0].group_size, 9, "the nine ops did not share a group");
                cr_assert_eq(stats_count(c, "split_groups"), sorted ? 0 : 1, "--mode %s: %s", modes[m] ? modes[m] : "(default)",
                             sorted ? "ran a split plan" : "kept sorted's unbalanced plan");
                gemmd_disconnect(c);
                STOP(&d);
        }
}

/* A lone GEMM of one tile and long K (f32, 64 x 64 x 8192: 16 chunks) on
 * the 8 CTAs of --threads 2: auto, the default, and split cut its K to
 * fill them (the fill split, counted in fill_groups) and sorted does not;
 * the result is right either way, and the same bits. */
Test(e2e, auto_mode_fills_the_device_with_a_lone_long_k_gemm)
{
        static const char *const modes[] = {"auto", "split", "sorted"};
        uint8_t *first = NULL;

        for (int m = 0; m < 3; m++) {
                const struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 64, .n = 60, .k = 8192,
                                           .pad = 3, .alpha = 0.5f, .beta = 1.0f};
                const int sorted = m == 2;
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p;
                struct gemmd_result r;
                uint64_t seed = 11;
                gemmd_client *c;
                char why[256];

                START(&d, "--threads", "2", "--mode", modes[m], NULL);
                c = e2e_connect(&d);
                cr_assert_not_null(c);
                cr_assert_eq(e2e_arena_init(&ar, c, 16u << 20), 0);
                cr_assert_eq(e2e_prob_place(&p, &s, &ar, &seed), 0);
                cr_assert_eq(e2e_run_checked(c, &p, 1, 1, &r, why, sizeof(why)), 0, "%s", why);
                cr_assert_eq(stats_count(c, "fill_groups"), sorted ? 0 : 1, "--mode %s", modes[m]);
                cr_assert_eq(stats_count(c, "split_groups"), sorted ? 0 : 1, "--mode %s", modes[m]);
                cr_assert_eq(memcmp(first_bits(&first, &p), p.c, p.cbytes), 0, "--mode %s: other bits",
                             modes[m]);
                gemmd_disconnect(c);
                STOP(&d);
        }
        free(first);
}

/* ---- (b3) the narrow tile ------------------------------------------------ */

/* Lone GEMMs in the layout a GPU's own tiles read (A m x k and B n x k
 * along K), whose 64 x 32 tiles fit the 8 CTAs of --threads 2 and
 * outnumber their 64 x 64 ones. */
static const struct e2e_spec narrow_specs[] = {
        {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .ta = GEMMD_OP_T, .m = 128, .n = 96, .k = 600,
         .alpha = 1.0f, .beta = 0.0f},
        {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .ta = GEMMD_OP_T, .m = 100, .n = 64, .k = 1032,
         .pad = 8, .alpha = -0.5f, .beta = 1.0f},
        {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .ta = GEMMD_OP_T, .m = 64, .n = 130, .k = 200,
         .alpha = 2.0f, .beta = 0.25f},
        {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .ta = GEMMD_OP_T, .m = 70, .n = 33, .k = 64,
         .alpha = 1.0f, .beta = -1.0f},
};
#define NNARROW (sizeof(narrow_specs) / sizeof(narrow_specs[0]))

/*
 * A backend with a narrow tile (the CPU's, --cpu-alt-tiles) runs a group
 * on it only when the group is alone on the device and its narrow tiles
 * fit one wave: each lone call below takes it; an op that arrives while a
 * long one runs does not, though it would fit; --narrow-tiles no never
 * takes it. The same through a device process, which reports its
 * backend's tiles to the daemon. Every result is checked against the
 * reference, and the lone calls' results are the same bits on either tile.
 */
Test(e2e, narrow_tile_only_for_a_group_alone_on_the_device)
{
        static const char *const flags[] = {"yes", "no", "yes"};
        static const char *const devproc[] = {"no", "no", "yes"};
        uint8_t *first[NNARROW] = {0};

        for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
                const int narrow = !strcmp(flags[f], "yes");
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p[NNARROW], lp, bp;
                struct gemmd_result r;
                gemmd_ticket lt, bt;
                uint64_t seed = 41;
                gemmd_client *c;
                double err;
                char why[256];

                START(&d, "--threads", "2", "--cpu-alt-tiles", "yes", "--narrow-tiles", flags[f],
                      "--one-kernel-groups", "yes", "--device-process", devproc[f], NULL);
                c = e2e_connect(&d);
                cr_assert_not_null(c);
                cr_assert_eq(e2e_arena_init(&ar, c, 64u << 20), 0);
                for (size_t i = 0; i < NNARROW; i++) {
                        cr_assert_eq(e2e_prob_place(&p[i], &narrow_specs[i], &ar, &seed), 0);
                        wait1(c, submit1(c, &p[i].op, GEMMD_PRIO_NORMAL), &r);
                        cr_assert_eq(r.status, 0, "op %zu: %s", i, gemmd_strerror(r.status));
                        cr_assert_eq(r.group_size, 1);
                        cr_assert_eq(e2e_prob_check(&p[i], &err, why, sizeof(why)), 0, "op %zu: %s", i, why);
                        cr_assert_eq(memcmp(first_bits(&first[i], &p[i]), p[i].c, p[i].cbytes), 0,
                                     "op %zu: bits differ between the narrow and the usual tile", i);
                }
                cr_assert_eq(stats_count(c, "narrow_groups"), narrow ? (long long)NNARROW : 0,
                             "--narrow-tiles %s, --device-process %s: lone calls", flags[f], devproc[f]);
                /* A long f32 op holds the device; the f16 op after it (a
                 * group of its own: one kernel configuration a group) is
                 * formed while it runs. */
                cr_assert_eq(e2e_prob_place(&lp, &long_f32, &ar, &seed), 0);
                cr_assert_eq(e2e_prob_place(&bp, &narrow_specs[0], &ar, &seed), 0);
                lt = submit1(c, &lp.op, GEMMD_PRIO_NORMAL);
                bt = submit1(c, &bp.op, GEMMD_PRIO_NORMAL);
                wait1(c, bt, &r);
                cr_assert_eq(r.status, 0);
                cr_assert_eq(e2e_prob_check(&bp, &err, why, sizeof(why)), 0, "%s", why);
                wait1(c, lt, &r);
                cr_assert_eq(r.status, 0);
                cr_assert_eq(stats_count(c, "narrow_groups"), narrow ? (long long)NNARROW : 0,
                             "--narrow-tiles %s, --device-process %s: a group formed beside a running one "
                             "took the narrow tile",
                             flags[f], devproc[f]);
                for (size_t i = 0; i < NNARROW; i++)
                        free(p[i].c0);
                free(lp.c0);
                free(bp.c0);
                gemmd_disconnect(c);
                STOP(&d);
        }
        for (size_t i = 0; i < NNARROW; i++)
                free(first[i]);
}

/*
 * Eight GEMMs of spec ws in one group on a daemon with the CPU's wide and
 * narrow tiles (--cpu-alt-tiles) and --wide-tiles wide, checked: the group
 * ran on the wide tile exactly when expect_wide says so (stats). With
 * first, each op's C bits are compared with those of the first call
 * (first_bits), so that calls on either tile must agree.
 */
static void eight_on_alt_tiles(const struct e2e_spec *ws, uint64_t seed, const char *wide, int expect_wide,
                               uint8_t **first)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[8];
        struct gemmd_result r[8];
        gemmd_client *c;
        char why[256];

        START(&d, "--threads", "2", "--cpu-alt-tiles", "yes", "--wide-tiles", wide, NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 64u << 20), 0);
        for (int i = 0; i < 8; i++)
                cr_assert_eq(e2e_prob_place(&p[i], ws, &ar, &seed), 0);
        cr_assert_eq(e2e_run_checked(c, p, 8, 8, r, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(r[0].group_size, 8, "the eight ops did not share a group");
        cr_assert_eq(stats_count(c, "wide_groups"), expect_wide ? 1 : 0, "--wide-tiles %s, beta %g", wide,
                     ws->beta);
        for (int i = 0; i < 8; i++) {
                if (first)
                        cr_assert_eq(memcmp(first_bits(&first[i], &p[i]), p[i].c, p[i].cbytes), 0,
                                     "op %d: bits differ between the wide and the usual tile", i);
                free(p[i].c0);
        }
        gemmd_disconnect(c);
        STOP(&d);
}

/*
 * The wide tile (the CPU's 64 x 96, --cpu-alt-tiles) for a group of many
 * waves where the cost model predicts it faster: eight GEMMs of 256 x 768
 * make 384 usual tiles (48 waves of the 8 CTAs of --threads 2) and 256
 * wide ones. With --wide-tiles no the same group stays on the usual tile;
 * the results are right and the same bits either way.
 */
Test(e2e, wide_tile_for_a_group_of_many_waves)
{
        static const struct e2e_spec ws = {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .ta = GEMMD_OP_T, .m = 256,
                                           .n = 768, .k = 136, .alpha = 1.0f, .beta = 0.5f};
        uint8_t *first[8] = {0};

        eight_on_alt_tiles(&ws, 43, "yes", 1, first);
        eight_on_alt_tiles(&ws, 43, "no", 0, first);
        for (int i = 0; i < 8; i++)
                free(first[i]);
}

/*
 * An f32 group that reads C (beta != 0) stays on the usual tile, where the
 * Hopper kernel stages C; the same group with beta 0 takes the wide one
 * (the group of the test above, in f32). Results right both ways.
 */
Test(e2e, f32_group_that_reads_c_keeps_the_usual_tile)
{
        struct e2e_spec ws = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .ta = GEMMD_OP_T, .m = 256,
                              .n = 768, .k = 136, .alpha = 1.0, .beta = 0.5};

        eight_on_alt_tiles(&ws, 47, "yes", 0, NULL);
        ws.beta = 0.0;
        eight_on_alt_tiles(&ws, 47, "yes", 1, NULL);
}

/* ---- (c) result bits independent of the group and of the mode ---------- */

/* Problems whose bits must not depend on company: K spanning several
 * canonical chunks (split mode cuts those when the tile count is low). */
static const struct e2e_spec bit_specs[] = {
        {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .ta = GEMMD_OP_T, .m = 64, .n = 61, .k = 1500,
         .pad = 1, .alpha = 1.25f, .beta = 0.5f},
        {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .tb = GEMMD_OP_T, .row_major = 1, .m = 100,
         .n = 37, .k = 1100, .alpha = -0.5f, .beta = 1.0f},
        {.kind = GEMMD_SYR2K, .dtype = GEMMD_BF16, .uplo = GEMMD_UPPER, .n = 70, .k = 1030,
         .pad = 2, .alpha = 0.75f, .beta = -1.0f},
        {.kind = GEMMD_SYR2K, .dtype = GEMMD_F32, .ta = GEMMD_OP_T, .row_major = 1, .n = 33,
         .k = 2049, .alpha = 1.0f, .beta = 0.0f},
        {.kind = GEMMD_GEMM, .dtype = GEMMD_F64, .ta = GEMMD_OP_T, .tb = GEMMD_OP_T,
         .row_major = 1, .m = 50, .n = 67, .k = 1600, .pad = 3, .alpha = 1.0 / 3, .beta = 0.1},
        {.kind = GEMMD_SYR2K, .dtype = GEMMD_F64, .uplo = GEMMD_LOWER, .n = 45, .k = 1300,
         .pad = 1, .alpha = -0.7, .beta = 0.0},
};
#define NBITS (sizeof(bit_specs) / sizeof(bit_specs[0]))
#define FILLERS 24

Test(e2e, result_bits_do_not_depend_on_group_or_plan_mode)
{
        static const char *modes[] = {"lpt", "rr", "sorted", "split", "device", "spt", "auto"};
        uint8_t *first[NBITS] = {0};

        for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
                struct e2e_daemon d;
                struct e2e_arena ar, far;
                struct e2e_prob p[NBITS], f[FILLERS];
                struct gemmd_result r;
                gemmd_ticket ft[FILLERS], t[NBITS];
                gemmd_client *c, *busy;
                uint64_t seed = 23, fseed = 99;
                int shared[NBITS] = {0}, nshared = 0;
                char why[256];

                START(&d, "--threads", "2", "--mode", modes[m], NULL);
                c = e2e_connect(&d);
                busy = e2e_connect(&d);
                cr_assert(c && busy);
                cr_assert_eq(e2e_arena_init(&ar, c, 8u << 20), 0);
                cr_assert_eq(e2e_arena_init(&far, busy, 32u << 20), 0);

                /* Each problem alone on an idle daemon, with the same inputs
                 * in every daemon: the bits must agree across modes. */
                for (size_t i = 0; i < NBITS; i++) {
                        cr_assert_eq(e2e_prob_place(&p[i], &bit_specs[i], &ar, &seed), 0);
                        usleep(10000);
                        cr_assert_eq(e2e_run_checked(c, &p[i], 1, 1, &r, why, sizeof(why)), 0,
                                     "%s: %s", modes[m], why);
                        cr_assert_eq(r.group_size, 1, "%s: not alone", modes[m]);
                        cr_assert_eq(memcmp(first_bits(&first[i], &p[i]), p[i].c, p[i].cbytes), 0,
                                     "problem %zu: bits under %s and %s differ", i, modes[0], modes[m]);
                }

                /* Again, in the middle of other work from another session:
                 * everything submitted at once behind a long op that holds
                 * the device while the rest queues up. */
                for (int j = 0; j < FILLERS; j++) {
                        struct e2e_spec fs = long_f32;

                        if (j > 0)
                                e2e_spec_random(&fs, &fseed, 128);
                        cr_assert_eq(e2e_prob_place(&f[j], &fs, &far, &fseed), 0);
                }
                for (int tries = 0; tries < 10 && nshared < (int)NBITS; tries++) {
                        size_t next = 0;

                        for (int j = 0; j < FILLERS; j++)
                                e2e_prob_reset(&f[j]);
                        for (size_t i = 0; i < NBITS; i++)
                                e2e_prob_reset(&p[i]);
                        for (int j = 0; j < FILLERS; j++) {
                                ft[j] = submit1(busy, &f[j].op, GEMMD_PRIO_NORMAL);
                                if (j % 4 == 2 && next < NBITS) {
                                        t[next] = submit1(c, &p[next].op, GEMMD_PRIO_NORMAL);
                                        next++;
                                }
                        }
                        for (size_t i = 0; i < NBITS; i++) {
                                wait1(c, t[i], &r);
                                cr_assert_eq(memcmp(first[i], p[i].c, p[i].cbytes), 0,
                                             "%s: problem %zu: bits alone and in a group of %u "
                                             "differ",
                                             modes[m], i, r.group_size);
                                if (r.group_size > 1 && !shared[i]) {
                                        shared[i] = 1;
                                        nshared++;
                                }
                        }
                        for (int j = 0; j < FILLERS; j++) {
                                double err;

                                wait1(busy, ft[j], &r);
                                if (j > 0)
                                        cr_assert_eq(e2e_prob_check(&f[j], &err, why, sizeof(why)),
                                                     0, "%s: filler: %s", modes[m], why);
                        }
                }
                cr_assert_eq(nshared, NBITS, "%s: only %d of %zu problems ever shared a group",
                             modes[m], nshared, NBITS);
                for (int j = 0; j < FILLERS; j++)
                        e2e_prob_free(&f[j]);
                for (size_t i = 0; i < NBITS; i++)
                        e2e_prob_free(&p[i]);
                gemmd_disconnect(busy);
                gemmd_disconnect(c);
                STOP(&d);
        }
        for (size_t i = 0; i < NBITS; i++)
                free(first[i]);
}

/* ---- (d) admission ------------------------------------------------------ */

Test(e2e, inflight_cap_rejects_the_excess_with_busy)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[5];
        struct gemmd_op ops[5];
        gemmd_ticket t[5];
        gemmd_client *c;
        uint64_t seed = 24;
        char why[256], *json = NULL;
        double err;
        int rc;

        START(&d, "--threads", "1", "--max-inflight-ops", "4", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 32u << 20), 0);
        for (int i = 0; i < 5; i++) {
                cr_assert_eq(e2e_prob_place(&p[i], i ? &big_f32 : &long_f32, &ar, &seed), 0);
                ops[i] = p[i].op;
        }
        /* Five outstanding submits behind a long op: the fifth is over the
         * cap. */
        for (int i = 0; i < 5; i++)
                t[i] = submit1(c, &ops[i], GEMMD_PRIO_NORMAL);
        for (int i = 0; i < 5; i++) {
                rc = gemmd_wait(c, t[i], 60000, NULL, 0);
                if (i < 4) {
                        cr_assert_eq(rc, 0, "op %d: %s", i, gemmd_strerror(rc));
                        if (i > 0)
                                cr_assert_eq(e2e_prob_check(&p[i], &err, why, sizeof(why)), 0,
                                             "%s", why);
                } else {
                        cr_assert_eq(rc, GEMMD_EBUSY, "op 4: %s", gemmd_strerror(rc));
                        cr_assert_eq(memcmp(p[4].c, p[4].c0, p[4].cbytes), 0,
                                     "a rejected op wrote C");
                }
        }
        /* Five ops in one submit are over the cap even on an idle session;
         * four are not. */
        rc = gemmd_submit(c, &ops[0], 5, GEMMD_PRIO_NORMAL, &t[0]);
        cr_assert_eq(rc, 0);
        rc = gemmd_wait(c, t[0], 60000, NULL, 0);
        cr_assert_eq(rc, GEMMD_EBUSY, "5 ops at once: %s", gemmd_strerror(rc));
        for (int i = 1; i < 5; i++)
                e2e_prob_reset(&p[i]);
        cr_assert_eq(e2e_run_checked(c, &p[1], 4, 4, NULL, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        cr_assert(strstr(json, "\"busy\":2"), "rejections not counted: %s", json);
        free(json);
        for (int i = 0; i < 5; i++)
                e2e_prob_free(&p[i]);
        gemmd_disconnect(c);
        STOP(&d);
}

Test(e2e, queue_cap_rejects_the_excess_across_sessions)
{
        struct e2e_daemon d;
        struct e2e_arena ar[2];
        struct e2e_prob p[2][4];
        gemmd_ticket t[2][4];
        gemmd_client *c[2];
        uint64_t seed = 25;
        char why[256];
        double err;

        START(&d, "--threads", "1", "--max-queue-ops", "6", NULL);
        for (int s = 0; s < 2; s++) {
                c[s] = e2e_connect(&d);
                cr_assert_not_null(c[s]);
                cr_assert_eq(e2e_arena_init(&ar[s], c[s], 32u << 20), 0);
                for (int i = 0; i < 4; i++)
                        cr_assert_eq(e2e_prob_place(&p[s][i], s || i ? &big_f32 : &long_f32,
                                                    &ar[s], &seed),
                                     0);
        }
        /* Session 0 takes 4 places (a long op first), session 1 the last 2. */
        for (int i = 0; i < 4; i++)
                t[0][i] = submit1(c[0], &p[0][i].op, GEMMD_PRIO_NORMAL);
        /* Session 0's submits admitted before session 1's are read. */
        cr_assert_eq(e2e_round_trip(c[0]), 0);
        for (int i = 0; i < 4; i++)
                t[1][i] = submit1(c[1], &p[1][i].op, GEMMD_PRIO_NORMAL);
        for (int s = 0; s < 2; s++)
                for (int i = 0; i < 4; i++) {
                        int rc = gemmd_wait(c[s], t[s][i], 60000, NULL, 0);

                        if (s == 0 || i < 2) {
                                cr_assert_eq(rc, 0, "session %d op %d: %s", s, i,
                                             gemmd_strerror(rc));
                                if (s || i)
                                        cr_assert_eq(e2e_prob_check(&p[s][i], &err, why,
                                                                    sizeof(why)),
                                                     0, "%s", why);
                        } else {
                                cr_assert_eq(rc, GEMMD_EBUSY, "session 1 op %d: %s", i,
                                             gemmd_strerror(rc));
                                cr_assert_eq(memcmp(p[s][i].c, p[s][i].c0, p[s][i].cbytes), 0);
                        }
                }
        /* Once drained, there is room again. */
        cr_assert_eq(e2e_run_checked(c[1], &p[1][2], 2, 1, NULL, why, sizeof(why)), 0, "%s", why);
        for (int s = 0; s < 2; s++) {
                for (int i = 0; i < 4; i++)
                        e2e_prob_free(&p[s][i]);
                gemmd_disconnect(c[s]);
        }
        STOP(&d);
}

/* ---- (e) priorities ------------------------------------------------------ */

#define NLOW 40
#define NNORMAL 10

Test(e2e, high_priority_overtakes_queued_low_priority_work)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p;
        struct gemmd_result low[NLOW], normal[NNORMAL], high;
        gemmd_ticket tl[NLOW], tn[NNORMAL], th;
        gemmd_client *c;
        uint64_t seed = 26;
        char why[256];
        double err;
        int after_high = 0, after_normal = 0;

        /* One op per group and one group at a time, so the queue order is
         * the launch order, which group ids record. */
        START(&d, "--threads", "1", "--max-group-ops", "1", "--max-groups-inflight", "1", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 2u << 20), 0);
        cr_assert_eq(e2e_prob_place(&p, &big_f32, &ar, &seed), 0);
        for (int i = 0; i < NLOW; i++)
                tl[i] = submit1(c, &p.op, GEMMD_PRIO_LOW);
        for (int i = 0; i < NNORMAL; i++)
                tn[i] = submit1(c, &p.op, GEMMD_PRIO_NORMAL);
        th = submit1(c, &p.op, GEMMD_PRIO_HIGH);
        wait1(c, th, &high);
        for (int i = 0; i < NNORMAL; i++)
                wait1(c, tn[i], &normal[i]);
        for (int i = 0; i < NLOW; i++)
                wait1(c, tl[i], &low[i]);
        cr_assert_eq(e2e_prob_check(&p, &err, why, sizeof(why)), 0, "%s", why);
        /* Ops launched before the high one had started before it came;
         * everything still queued then must have waited for it. */
        for (int i = 0; i < NNORMAL; i++)
                after_high += normal[i].group_id > high.group_id;
        for (int i = 0; i < NLOW; i++) {
                after_high += low[i].group_id > high.group_id;
                after_normal += low[i].group_id > normal[NNORMAL - 1].group_id;
        }
        cr_assert_geq(after_high, (NLOW + NNORMAL) * 3 / 4,
                      "only %d of %d earlier ops ran after the high one (group %llu)", after_high,
                      NLOW + NNORMAL, (unsigned long long)high.group_id);
        cr_assert_geq(after_normal, NLOW * 3 / 4,
                      "only %d of %d low ops ran after the normal ones", after_normal, NLOW);
        cr_assert_lt(high.queue_us, low[NLOW - 1].queue_us);
        e2e_prob_free(&p);
        gemmd_disconnect(c);
        STOP(&d);
}

/*
 * The stats say how long --max-groups-inflight held work back: ops
 * waiting while every group slot was in flight. A burst on one slot
 * waits behind it for most of its time; one synchronous call at a time
 * never finds the slots full (the worker frees a group's slot before its
 * client has the answer), so its figure stays at zero.
 */
Test(e2e, stats_count_the_time_the_group_slot_limit_held_work_back)
{
        static const char *const limits[] = {"1", "2"};

        for (int run = 0; run < 2; run++) {
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p;
                struct gemmd_result r;
                gemmd_ticket t[8];
                gemmd_client *c;
                uint64_t seed = 27;
                char *json = NULL;
                double capped, loaded;

                START(&d, "--threads", "1", "--max-group-ops", "1", "--max-groups-inflight", limits[run], NULL);
                c = e2e_connect(&d);
                cr_assert_not_null(c);
                cr_assert_eq(e2e_arena_init(&ar, c, 2u << 20), 0);
                cr_assert_eq(e2e_prob_place(&p, &big_f32, &ar, &seed), 0);
                if (run == 0) {
                        for (int i = 0; i < 8; i++)
                                t[i] = submit1(c, &p.op, GEMMD_PRIO_NORMAL);
                        for (int i = 0; i < 8; i++)
                                wait1(c, t[i], &r);
                } else {
                        for (int i = 0; i < 8; i++)
                                wait1(c, submit1(c, &p.op, GEMMD_PRIO_NORMAL), &r);
                }
                cr_assert_eq(r.status, 0);
                cr_assert_eq(gemmd_stats(c, 1, &json), 0);
                capped = hard_json_double(json, "capped_s");
                loaded = hard_json_double(json, "loaded_s");
                free(json);
                if (run == 0) {
                        /* Seven of eight ops queued behind the one slot. */
                        cr_assert_gt(capped, 0.0, "a burst on one group slot: capped_s %g", capped);
                        cr_assert_leq(capped, loaded, "capped_s %g beyond loaded_s %g", capped, loaded);
                } else {
                        cr_assert_eq(capped, 0.0, "one call at a time found every slot in flight for %g s", capped);
                }
                e2e_prob_free(&p);
                gemmd_disconnect(c);
                STOP(&d);
        }
}

/*
 * The stats say how long each device's worker thread was at work (neither
 * polling for work nor asleep) while the device had work: some of that
 * time, not all of it while groups compute, and nothing while no work
 * comes (an idle daemon's worker sleeps).
 */
Test(e2e, stats_count_the_worker_threads_time_at_work_and_none_while_idle)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p;
        struct gemmd_result r;
        gemmd_client *c;
        uint64_t seed = 28;
        char *json = NULL;
        double worker, loaded, later;

        START(&d, "--threads", "1", "--max-group-ops", "1", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 2u << 20), 0);
        cr_assert_eq(e2e_prob_place(&p, &big_f32, &ar, &seed), 0);
        /* Bursts: a loop may launch onto the idle device itself
         * (--loop-launch), but the ops queued behind go by the worker. */
        for (int b = 0; b < 25; b++) {
                gemmd_ticket t[8];

                for (int i = 0; i < 8; i++)
                        t[i] = submit1(c, &p.op, GEMMD_PRIO_NORMAL);
                for (int i = 0; i < 8; i++) {
                        wait1(c, t[i], &r);
                        cr_assert_eq(r.status, 0);
                }
        }
        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        worker = hard_json_double(json, "worker_s");
        loaded = hard_json_double(json, "loaded_s");
        free(json);
        cr_assert_gt(worker, 0.0, "200 groups formed and launched in no time at work");
        cr_assert_leq(worker, loaded + 1e-6, "worker_s %g beyond the time with work %g", worker, loaded);
        /* Each op is milliseconds of a compute thread, each group tens of
         * microseconds of the worker's: it waits through most of that. */
        cr_assert_lt(worker, 0.5 * loaded, "the worker at work %g s of the %g s with work, waiting for groups to end",
                     worker, loaded);
        usleep(300 * 1000);
        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        later = hard_json_double(json, "worker_s");
        free(json);
        cr_assert_lt(later - worker, 0.03, "the worker was at work %g s of 0.3 s with nothing to do", later - worker);
        e2e_prob_free(&p);
        gemmd_disconnect(c);
        STOP(&d);
}

/* ---- (f) fairness -------------------------------------------------------- */

#define FLOOD_OPS 500
#define FLOOD_CS 16 /* distinct C matrices, more than can run at once */
#define LIGHT_OPS 10

/* The flooding session: queues FLOOD_OPS big ops at once, says so on
 * ready_fd, waits for all and writes the microseconds from its first
 * submit to its last completion to ready_fd. */
static int flood_client(void *ctx, int ready_fd)
{
        const struct e2e_daemon *d = ctx;
        gemmd_client *c = e2e_connect(d);
        struct e2e_arena ar;
        struct e2e_prob p[FLOOD_CS];
        gemmd_ticket *t = calloc(FLOOD_OPS, sizeof(*t));
        uint64_t seed = 27, t0, drain;

        if (!c || !t || e2e_arena_init(&ar, c, 16u << 20))
                return 2;
        for (int i = 0; i < FLOOD_CS; i++)
                if (e2e_prob_place(&p[i], &big_f32, &ar, &seed))
                        return 3;
        t0 = e2e_now_us();
        for (int i = 0; i < FLOOD_OPS; i++)
                if (gemmd_submit(c, &p[i % FLOOD_CS].op, 1, GEMMD_PRIO_NORMAL, &t[i]))
                        return 4;
        if (write(ready_fd, "r", 1) != 1)
                return 5;
        for (int i = 0; i < FLOOD_OPS; i++) {
                int rc = gemmd_wait(c, t[i], 120000, NULL, 0);

                if (rc) {
                        fprintf(stderr, "flood: op %d: %s\n", i, gemmd_strerror(rc));
                        return 1;
                }
        }
        drain = e2e_now_us() - t0;
        if (write(ready_fd, &drain, sizeof(drain)) != sizeof(drain))
                return 6;
        gemmd_disconnect(c);
        free(t);
        return 0;
}

Test(e2e, light_session_is_not_starved_by_a_flooding_one)
{
        struct e2e_spec s = {.kind = GEMMD_SYR2K, .dtype = GEMMD_BF16, .n = 64, .k = 64,
                             .alpha = 1.0f, .beta = 1.0f};
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p;
        struct gemmd_result r;
        uint64_t seed = 28, drain = 0, worst_wall = 0, worst_queue = 0, light_t0, light_total;
        gemmd_client *c;
        int fd;
        char why[256], b;
        pid_t pid;

        START(&d, "--threads", "1", "--max-group-ops", "4", NULL);
        pid = e2e_fork(flood_client, &d, &fd);
        cr_assert_gt(pid, 0);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 1u << 20), 0);
        cr_assert_eq(e2e_prob_place(&p, &s, &ar, &seed), 0);
        cr_assert_eq(read(fd, &b, 1), 1, "the flood did not start");
        light_t0 = e2e_now_us();
        for (int i = 0; i < LIGHT_OPS; i++) {
                uint64_t t0 = e2e_now_us(), wall;

                e2e_prob_reset(&p);
                cr_assert_eq(e2e_run_checked(c, &p, 1, 1, &r, why, sizeof(why)), 0, "%s", why);
                wall = e2e_now_us() - t0;
                if (wall > worst_wall)
                        worst_wall = wall;
                if (r.queue_us > worst_queue)
                        worst_queue = r.queue_us;
                usleep(5000);
        }
        light_total = e2e_now_us() - light_t0;
        cr_assert_eq(read(fd, &drain, sizeof(drain)), sizeof(drain), "no drain time");
        close(fd);
        cr_assert_eq(e2e_wait_child(pid, 60000), 0, "the flooding client failed");
        cr_assert_lt(light_total, drain, "the light session finished after the flood (%llu us vs %llu us)",
                     (unsigned long long)light_total, (unsigned long long)drain);
        cr_assert_lt(worst_queue * 4, drain, "light queue time %llu us vs flood drain %llu us",
                     (unsigned long long)worst_queue, (unsigned long long)drain);
        cr_assert_lt(worst_wall * 4, drain, "light latency %llu us vs flood drain %llu us",
                     (unsigned long long)worst_wall, (unsigned long long)drain);
        e2e_prob_free(&p);
        gemmd_disconnect(c);
        STOP(&d);
}

/* Timing tests: one at a time, whatever the machine's CPU count. */
int main(int argc, char *argv[])
{
        struct criterion_test_set *tests = criterion_initialize();
        int ok = 1;

        if (criterion_handle_args(argc, argv, true)) {
                criterion_options.jobs = 1;
                ok = criterion_run_all_tests(tests);
        }
        criterion_finalize(tests);
        return ok ? 0 : 1;
}

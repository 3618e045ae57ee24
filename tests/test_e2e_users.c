/*
 * test_e2e_users.c - users and limits through the real daemon: every limit
 * from flags and from a config file, reported in the handshake; the uid and
 * gid allow-lists; per-user caps on in-flight ops and registered bytes that
 * span a user's sessions; and fair shares of the device between users, one
 * with a single session against one with four, with and without a cap on a
 * user's share (these act as other users, so they need root).
 */
#include <criterion/criterion.h>
#include <criterion/options.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/hard_util.h"
#include "tests/e2e_assert.h"

TestSuite(e2e, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static char *write_file(const char *name, const char *text)
{
        char *path;
        FILE *f;

        cr_assert_geq(asprintf(&path, "%s/%s", e2e_dir, name), 0);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(text, f);
        fclose(f);
        return path;
}

/* ---- limits, flags and the config file ---------------------------------- */

Test(e2e, every_limit_comes_from_flags_or_config_file_and_is_in_the_handshake)
{
        char *conf = write_file("gemmd.conf", "# limits of a shared node\n"
                                              "max-sessions = 7\n"
                                              "\n"
                                              "  max-user-inflight-ops=123\n"
                                              "max-user-buffer-bytes = 1048576\n"
                                              "max-user-share = 40\n"
                                              "max-user-sessions = 5\n"
                                              "max-inflight-ops = 50\n"
                                              "max-buffer-bytes = 65536\n"
                                              "f32-kernel = ffma\n"
                                              "cost = kiter_f32=6,tile_fixed=3\n"
                                              "verbose = yes\n");
        struct e2e_daemon d;
        struct gemmd_info info;
        gemmd_client *c;
        gemmd_buffer id;
        void *ptr;

        /* The command line wins over the file, wherever --config stands. */
        START(&d, "--max-inflight-ops", "60", "--config", conf, NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_get_info(c, &info), 0);
        cr_expect_eq(info.max_sessions, 7);
        cr_expect_eq(info.max_user_inflight_ops, 123);
        cr_expect_eq(info.max_user_buffer_bytes, 1048576);
        cr_expect_eq(info.max_user_share, 40);
        cr_expect_eq(info.max_user_sessions, 5);
        cr_expect_eq(info.max_inflight_ops, 60);
        cr_expect_eq(info.max_buffer_bytes, 65536);
        cr_expect_eq(gemmd_buffer_alloc(c, 65537, &id, &ptr), GEMMD_ELIMIT);
        gemmd_disconnect(c);
        STOP(&d);
        {
                /* The cost model the file gave is the one installed. */
                char *log = e2e_read_file(d.log, NULL);

                cr_expect(log && strstr(log, "cost model: kiter_f32=6,tile_fixed=3"), "log: %s",
                          log ? log : "(none)");
                free(log);
        }
        free(conf);
}

Test(e2e, config_file_mistakes_name_the_file_and_line)
{
        static const char *bad[] = {
                "max-sessions = 7\nno-such-option = 1\n",
                "max-sessions = 7\nmax-sessions = lots\n",
                "max-sessions = 7\nmax-user-share\n",
                "max-sessions = 7\nverbose = maybe\n",
                "max-sessions = 7\nconfig = /etc/passwd\n",
                "max-sessions = 7\ntiming-every = 0\n",
                "max-sessions = 7\nf32-kernel = fast\n",
                "max-sessions = 7\ncost = tile_fixed=-1\n",
                "max-sessions = 7\ncost = no_such_cost=1\n",
        };
        char *bin = e2e_build_path("gemmd");

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *conf = write_file("bad.conf", bad[i]), err[PATH_MAX], want[PATH_MAX + 8];
                char *argv[] = {bin, "--config", conf, "--backend", "cpu", NULL}, *text;

                snprintf(err, sizeof(err), "%s/err.txt", e2e_dir);
                cr_expect_eq(e2e_run(argv, NULL, err, 10000), 2, "case %zu", i);
                text = e2e_read_file(err, NULL);
                snprintf(want, sizeof(want), "%s:2", conf);
                cr_expect(text && (strstr(text, want) || strstr(text, "line 2")),
                          "case %zu: %s", i, text ? text : "(no output)");
                free(text);
                free(conf);
        }
        {
                char *argv[] = {bin, "--config", "/nonexistent/gemmd.conf", NULL};

                cr_expect_eq(e2e_run(argv, NULL, NULL, 10000), 2);
        }
        free(bin);
}

/* ---- allow-lists ----------------------------------------------------------- */

/* A raw Hello on a daemon that refuses us: Error PERMISSION answering it,
 * then end of stream. */
static void expect_refused(const struct e2e_daemon *d)
{
        struct hard_raw r;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;
        gemmd_client *c = NULL;
        int rc = gemmd_connect(d->sock, &c);

        cr_expect_eq(rc, GEMMD_EPERM, "connect: %s", gemmd_strerror(rc));
        cr_expect_null(c);
        cr_assert_eq(hard_raw_open(&r, d->sock), 0);
        h.protocol_version = GEMMD_PROTOCOL_VERSION;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        cr_assert_eq(hard_raw_send(&r, 77, &env, NULL, 0, 0), 0);
        rep = hard_raw_recv(&r, 10000);
        cr_assert_not_null(rep);
        cr_expect_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR);
        if (rep->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR) {
                cr_expect_eq(rep->error->code, GEMMD__V1__CODE__PERMISSION);
                cr_expect_eq(rep->request_id, 77);
                cr_expect(strstr(rep->error->message, "not allowed"), "%s", rep->error->message);
        }
        cr_expect(hard_raw_wait_eof(&r, 10000), "the refused connection stayed open");
        hard_raw_close(&r);
}

static void expect_admitted(const struct e2e_daemon *d)
{
        gemmd_client *c = e2e_connect(d);
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .m = 9, .n = 5, .k = 7,
                             .alpha = 1.0f, .beta = 0.5f};
        struct e2e_prob p;
        uint64_t seed = 3;
        char why[256];

        cr_assert_not_null(c);
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        cr_expect_eq(e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why)), 0, "%s", why);
        e2e_prob_free(&p);
        gemmd_disconnect(c);
}

Test(e2e, allow_lists_admit_listed_users_and_groups_and_refuse_others)
{
        struct passwd *pw = getpwuid(getuid());
        struct group *gr = getgrgid(getgid());
        char me[32], other[32], other2[64], mygid[32], othergid[32];
        struct e2e_daemon d;

        snprintf(me, sizeof(me), "%u", (unsigned)getuid());
        snprintf(other, sizeof(other), "%u", (unsigned)getuid() + 4242);
        snprintf(other2, sizeof(other2), "%u,%u", (unsigned)getuid() + 1, (unsigned)getuid() + 2);
        snprintf(mygid, sizeof(mygid), "%u", (unsigned)getgid());
        snprintf(othergid, sizeof(othergid), "%u", (unsigned)getgid() + 4242);

        START(&d, "--allow-uid", other, NULL);
        expect_refused(&d);
        STOP(&d);

        START(&d, "--allow-uid", other2, "--allow-gid", othergid, NULL);
        expect_refused(&d);
        STOP(&d);

        {
                char list[64];

                snprintf(list, sizeof(list), "%s,%s", other, me);
                START(&d, "--allow-uid", list, NULL);
                expect_admitted(&d);
                STOP(&d);
        }
        START(&d, "--allow-uid", other, "--allow-gid", mygid, NULL);
        expect_admitted(&d);
        STOP(&d);
        if (pw) {
                START(&d, "--allow-uid", pw->pw_name, NULL);
                expect_admitted(&d);
                STOP(&d);
        }
        if (gr) {
                START(&d, "--allow-gid", gr->gr_name, NULL);
                expect_admitted(&d);
                STOP(&d);
        }
}

Test(e2e, sessions_past_the_limit_hear_limit_in_answer_to_hello)
{
        struct e2e_daemon d;
        gemmd_client *c[2], *extra = NULL;
        int rc;

        START(&d, "--max-sessions", "2", NULL);
        usleep(100000); /* the readiness probe's connection goes away */
        c[0] = e2e_connect(&d);
        c[1] = e2e_connect(&d);
        cr_assert(c[0] && c[1]);
        for (int i = 0; i < 3; i++) {
                rc = gemmd_connect(d.sock, &extra);
                cr_expect_eq(rc, GEMMD_ELIMIT, "session %d too many: %s", 3 + i, gemmd_strerror(rc));
        }
        gemmd_disconnect(c[1]);
        for (int tries = 0; tries < 200 && !extra; tries++)
                if (gemmd_connect(d.sock, &extra))
                        usleep(10000);
        cr_expect_not_null(extra, "a place freed by a closed session is not given out");
        gemmd_disconnect(extra);
        gemmd_disconnect(c[0]);
        STOP(&d);
}

/* ---- per-user caps over several sessions -------------------------------- */

Test(e2e, a_users_sessions_past_its_limit_hear_limit)
{
        struct e2e_daemon d;
        gemmd_client *c[3], *extra = NULL;
        int rc;

        START(&d, "--max-user-sessions", "3", NULL);
        usleep(100000);
        for (int i = 0; i < 3; i++) {
                c[i] = e2e_connect(&d);
                cr_assert_not_null(c[i]);
        }
        rc = gemmd_connect(d.sock, &extra);
        cr_expect_eq(rc, GEMMD_ELIMIT, "the user's fourth session: %s", gemmd_strerror(rc));
        gemmd_disconnect(c[0]);
        for (int tries = 0; tries < 200 && !extra; tries++)
                if (gemmd_connect(d.sock, &extra))
                        usleep(10000);
        cr_expect_not_null(extra);
        gemmd_disconnect(extra);
        gemmd_disconnect(c[1]);
        gemmd_disconnect(c[2]);
        STOP(&d);
}

/* Returns once the daemon has handled everything c sent before. */
static void sync_session(gemmd_client *c)
{
        char *text = NULL;

        cr_assert_eq(gemmd_stats(c, 0, &text), 0);
        free(text);
}

Test(e2e, user_inflight_cap_spans_the_users_sessions)
{
        struct e2e_daemon d;
        gemmd_client *a, *b;
        struct gemmd_op slow, quick;
        gemmd_ticket t[5];
        int rc;

        START(&d, "--threads", "1", "--max-groups-inflight", "1", "--max-inflight-ops", "100",
              "--max-user-inflight-ops", "3", NULL);
        a = e2e_connect(&d);
        b = e2e_connect(&d);
        cr_assert(a && b);
        cr_assert_eq(e2e_timed_op(a, 512, 512, 2048, &slow), 0);
        cr_assert_eq(e2e_timed_op(b, 16, 16, 16, &quick), 0);
        cr_assert_eq(gemmd_submit(a, &slow, 1, GEMMD_PRIO_NORMAL, &t[0]), 0);
        cr_assert_eq(gemmd_submit(a, &slow, 1, GEMMD_PRIO_NORMAL, &t[1]), 0);
        /* Two connections race to the daemon: a round trip on each (its
         * replies come in order) proves its submits were admitted first. */
        sync_session(a);
        cr_assert_eq(gemmd_submit(b, &quick, 1, GEMMD_PRIO_NORMAL, &t[2]), 0);
        sync_session(b);
        /* The user's fourth op, from either session, is one too many. */
        cr_assert_eq(gemmd_submit(b, &quick, 1, GEMMD_PRIO_NORMAL, &t[3]), 0);
        rc = gemmd_wait(b, t[3], 60000, NULL, 0);
        cr_expect_eq(rc, GEMMD_EBUSY, "b's second op: %s", gemmd_strerror(rc));
        cr_expect(strstr(gemmd_last_error(b), "uid"), "%s", gemmd_last_error(b));
        for (int i = 0; i < 3; i++) {
                rc = gemmd_wait(i < 2 ? a : b, t[i], 60000, NULL, 0);
                cr_expect_eq(rc, 0, "op %d: %s", i, gemmd_strerror(rc));
        }
        /* Finished ops free the user's places. */
        cr_assert_eq(gemmd_submit(b, &quick, 1, GEMMD_PRIO_NORMAL, &t[4]), 0);
        cr_expect_eq(gemmd_wait(b, t[4], 60000, NULL, 0), 0);
        gemmd_disconnect(a);
        gemmd_disconnect(b);
        STOP(&d);
}

Test(e2e, user_registered_bytes_cap_spans_the_users_sessions)
{
        struct e2e_daemon d;
        gemmd_client *a, *b;
        gemmd_buffer ida, idb, idb2;
        void *p;
        int rc;

        START(&d, "--max-user-buffer-bytes", "1048576", NULL);
        a = e2e_connect(&d);
        b = e2e_connect(&d);
        cr_assert(a && b);
        cr_assert_eq(gemmd_buffer_alloc(a, 786432, &ida, &p), 0);
        rc = gemmd_buffer_alloc(b, 524288, &idb, &p);
        cr_expect_eq(rc, GEMMD_ELIMIT, "over the user's bytes: %s", gemmd_strerror(rc));
        cr_expect(strstr(gemmd_last_error(b), "registered"), "%s", gemmd_last_error(b));
        cr_assert_eq(gemmd_buffer_alloc(b, 262144, &idb, &p), 0);
        /* Released bytes and a closed session's bytes are the user's again. */
        cr_assert_eq(gemmd_buffer_free(a, ida), 0);
        cr_assert_eq(gemmd_buffer_alloc(b, 524288, &idb2, &p), 0);
        cr_assert_eq(gemmd_buffer_alloc(a, 262144, &ida, &p), 0);
        cr_expect_eq(gemmd_buffer_alloc(b, 1, &idb2, &p), GEMMD_ELIMIT);
        {
                char *json = NULL, want[96];

                cr_assert_eq(gemmd_stats(b, 1, &json), 0);
                /* The user's other counts follow. */
                snprintf(want, sizeof(want), "{\"uid\":%u,\"sessions\":2,\"inflight\":0,"
                         "\"buffer_bytes\":1048576,", (unsigned)getuid());
                cr_expect(strstr(json, want), "stats do not show the user: %s", json);
                free(json);
        }
        gemmd_disconnect(a);
        for (int tries = 0; tries < 200 && (rc = gemmd_buffer_alloc(b, 262144, &idb2, &p)); tries++)
                usleep(10000);
        cr_expect_eq(rc, 0, "the closed session's bytes were not given back: %s", gemmd_strerror(rc));
        gemmd_disconnect(b);
        STOP(&d);
}

/* ---- fair shares between users -------------------------------------------- */

#define SHARE_OPS 400 /* per user */
#define B_SESSIONS 4

struct share_child {
        pid_t pid;
        int ready, go, result; /* parent's ends */
        int user;              /* 0: A, 1: B */
};

/* A flooding client process acting as uid: connects, says ready, waits
 * for go, submits n one-op requests and writes each one's group id. */
static int share_client(const char *sock, uid_t uid, int n, int prio, int ready_fd, int go_fd,
                        int out_fd)
{
        struct gemmd_op op;
        gemmd_ticket *t = calloc((size_t)n, sizeof(*t));
        gemmd_client *c = NULL;
        char b;

        if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) {
                perror("setuid");
                return 2;
        }
        /* Each result's group is the evidence: no completion words, whose
         * answers carry none. */
        setenv("GEMMD_WORDS", "0", 1);
        if (!t || gemmd_connect(sock, &c))
                return 3;
        {
                struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 64, .n = 64,
                                     .k = 64, .alpha = 1.0f, .beta = 0.0f};
                struct e2e_prob p;
                gemmd_buffer id;
                void *ptr;

                e2e_prob_shape(&p, &s);
                if (gemmd_buffer_alloc(c, p.abytes + p.bbytes + p.cbytes, &id, &ptr))
                        return 4;
                op = p.op;
                op.a = (struct gemmd_operand){.buffer = id, .offset = 0};
                op.b = (struct gemmd_operand){.buffer = id, .offset = p.abytes};
                op.c = (struct gemmd_operand){.buffer = id, .offset = p.abytes + p.bbytes};
        }
        if (write(ready_fd, "r", 1) != 1 || read(go_fd, &b, 1) != 1)
                return 5;
        for (int i = 0; i < n; i++)
                if (gemmd_submit(c, &op, 1, prio, &t[i]))
                        return 6;
        for (int i = 0; i < n; i++) {
                struct gemmd_result r;

                if (gemmd_wait(c, t[i], 120000, &r, 1))
                        return 7;
                if (write(out_fd, &r.group_id, sizeof(r.group_id)) != sizeof(r.group_id))
                        return 8;
        }
        gemmd_disconnect(c);
        return 0;
}

struct tagged {
        uint64_t group;
        int user;
};

static int cmp_tagged(const void *x, const void *y)
{
        const struct tagged *a = x, *b = y;

        return a->group < b->group ? -1 : a->group > b->group;
}

/* User A floods from one session at priority prio_a, user B from four at
 * normal priority, with equal ops and equal totals, queued behind a plug op
 * of a third user. Returns A's share of the first half of the ops to run. */
static double share_of_a(const char *share_flag, int prio_a)
{
        struct e2e_daemon d;
        struct share_child ch[1 + B_SESSIONS];
        struct tagged *all = calloc(2 * SHARE_OPS, sizeof(*all));
        size_t nall = 0;
        gemmd_client *plug;
        struct gemmd_op big;
        gemmd_ticket pt;
        int na = 0;

        cr_assert_not_null(all);
        START(&d, "--threads", "1", "--max-groups-inflight", "1", "--max-group-ops", "2",
              "--max-user-share", share_flag, NULL);
        /* The acting users must reach the socket. */
        cr_assert_eq(chmod(e2e_dir, 0711), 0);
        cr_assert_eq(chmod(d.sock, 0666), 0);
        for (int i = 0; i < 1 + B_SESSIONS; i++) {
                int rp[2], gp[2], op[2];

                cr_assert_eq(pipe(rp) | pipe(gp) | pipe(op), 0);
                ch[i].user = i > 0;
                fflush(NULL);
                ch[i].pid = fork();
                cr_assert_geq(ch[i].pid, 0);
                if (ch[i].pid == 0) {
                        close(rp[0]);
                        close(gp[1]);
                        close(op[0]);
                        _exit(share_client(d.sock, i ? 60002 : 60001,
                                           i ? SHARE_OPS / B_SESSIONS : SHARE_OPS,
                                           i ? GEMMD_PRIO_NORMAL : prio_a, rp[1], gp[0], op[1]));
                }
                close(rp[1]);
                close(gp[0]);
                close(op[1]);
                ch[i].ready = rp[0];
                ch[i].go = gp[1];
                ch[i].result = op[0];
        }
        for (int i = 0; i < 1 + B_SESSIONS; i++) {
                char b;

                cr_assert_eq(read(ch[i].ready, &b, 1), 1, "client %d did not get ready", i);
        }
        /* The plug keeps the only thread busy while the floods queue up. */
        plug = e2e_connect(&d);
        cr_assert_not_null(plug);
        cr_assert_eq(e2e_timed_op(plug, 512, 512, 4096, &big), 0);
        cr_assert_eq(gemmd_submit(plug, &big, 1, GEMMD_PRIO_NORMAL, &pt), 0);
        usleep(20000);
        for (int i = 0; i < 1 + B_SESSIONS; i++)
                cr_assert_eq(write(ch[i].go, "g", 1), 1);
        for (int i = 0; i < 1 + B_SESSIONS; i++) {
                uint64_t g;

                while (read(ch[i].result, &g, sizeof(g)) == sizeof(g) && nall < 2 * SHARE_OPS)
                        all[nall++] = (struct tagged){g, ch[i].user};
                cr_assert_eq(e2e_wait_child(ch[i].pid, 120000), 0, "client %d failed", i);
                close(ch[i].ready);
                close(ch[i].go);
                close(ch[i].result);
        }
        cr_assert_eq(gemmd_wait(plug, pt, 120000, NULL, 0), 0);
        cr_assert_eq(nall, 2 * SHARE_OPS);
        qsort(all, nall, sizeof(*all), cmp_tagged);
        cr_assert_gt(all[0].group, 1, "a flood op ran before the plug was queued");
        for (size_t i = 0; i < SHARE_OPS; i++)
                na += all[i].user == 0;
        gemmd_disconnect(plug);
        STOP(&d);
        free(all);
        return (double)na / SHARE_OPS;
}

Test(e2e, users_get_equal_device_shares_whatever_their_session_counts)
{
        double a;

        if (geteuid() != 0)
                cr_skip_test("acting as two users needs root");
        a = share_of_a("100", GEMMD_PRIO_NORMAL);
        /* Per session it would be 1/5; per user it is 1/2. */
        cr_expect(a > 0.4 && a < 0.6, "user A ran %.0f%% of the contended ops, not half", 100 * a);
        fprintf(stderr, "fair share: user A (1 session) %.0f%%, user B (4 sessions) %.0f%%\n",
                100 * a, 100 * (1 - a));
}

Test(e2e, user_over_its_share_loses_its_priority)
{
        double a, capped;

        if (geteuid() != 0)
                cr_skip_test("acting as two users needs root");
        /* Priorities are strict: high-priority work of A goes first... */
        a = share_of_a("100", GEMMD_PRIO_HIGH);
        cr_expect(a > 0.9, "user A at high priority ran only %.0f%%", 100 * a);
        /* ...but not beyond A's share while B waits. */
        capped = share_of_a("60", GEMMD_PRIO_HIGH);
        cr_expect(capped > 0.5 && capped < 0.7, "user A ran %.0f%% of the contended ops, cap 60%%",
                  100 * capped);
        fprintf(stderr, "user A at high priority: %.0f%% uncapped, %.0f%% with --max-user-share 60\n",
                100 * a, 100 * capped);
}

/* The share tests time a shared thread: one test at a time. */
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

/*
 * sessions.c - a hostile local user against everyone else through its
 * connections: idle sessions that exhaust the daemon's descriptors, a
 * descriptor limit too low for --max-sessions, large frames whose decoding
 * buffers an idle session would keep, partial frames held open with
 * descriptors, and one user taking every session (these act as other users,
 * so they need root).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(attack_sessions, .init = e2e_setup, .fini = e2e_teardown, .timeout = 150);

/* An answer that does not come within this long is a hang. */
#define ANSWER_MS 5000
/* The descriptors a session may hold with a frame not yet whole
 * (SESSION_MAX_FDS in daemon/server.h). */
#define SESSION_FDS 8

/* Sends Hello on r and waits up to timeout_ms for the answer. Returns 1 for
 * HelloReply, 0 for an Error (its wire code in *code, its text in why), or
 * -1 when nothing came. A daemon that refused the connection at once may
 * have closed it before the Hello: its Error is read all the same. */
static int hello_answer(struct hard_raw *r, int timeout_ms, int *code, char *why, size_t len)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;

        h.protocol_version = GEMMD_PROTOCOL_VERSION;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        (void)hard_raw_send(r, 1, &env, NULL, 0, 0);
        rep = hard_raw_recv(r, timeout_ms);
        if (!rep)
                return -1;
        if (rep->body_case == GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY) {
                *code = 0;
                if (why)
                        snprintf(why, len, "max_sessions %llu",
                                 (unsigned long long)rep->hello_reply->limits->max_sessions);
                return 1;
        }
        if (rep->body_case != GEMMD__V1__ENVELOPE__BODY_ERROR)
                return -1;
        *code = rep->error->code;
        if (why)
                snprintf(why, len, "%s", rep->error->message);
        return 0;
}

/* The daemon's CPU time so far (user and system, all threads), in seconds. */
static double cpu_seconds(pid_t pid)
{
        char path[64], buf[1024], *p;
        unsigned long long ut = 0, st = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        p = fgets(buf, sizeof(buf), f);
        fclose(f);
        /* After the command's closing parenthesis: state is field 3,
         * utime and stime fields 14 and 15. */
        p = p ? strrchr(buf, ')') : NULL;
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                         &st) != 2)
                return -1;
        return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Lines of the daemon's log that contain `what`. */
static int log_lines_with(const struct e2e_daemon *d, const char *what)
{
        char *text = e2e_read_file(d->log, NULL), *p = text;
        int n = 0;

        while (p && (p = strstr(p, what))) {
                n++;
                p += strlen(what);
        }
        free(text);
        return n;
}

static int log_lines(const struct e2e_daemon *d)
{
        char *text = e2e_read_file(d->log, NULL);
        int n = text ? e2e_count_lines(text) : -1;

        free(text);
        return n;
}

/* A small GEMM on c, checked. Returns 0 or -1. */
static int run_gemm(gemmd_client *c)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 5, .n = 3, .k = 7,
                             .alpha = 1.0f, .beta = 0.5f};
        struct e2e_prob p;
        uint64_t seed = 5;
        char why[256];
        int rc;

        if (e2e_prob_inline(&p, &s, &seed))
                return -1;
        rc = e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why));
        if (rc)
                fprintf(stderr, "sessions: %s\n", why);
        e2e_prob_free(&p);
        return rc;
}

/* The same on a new connection: the daemon serves a newcomer. */
static int served(const char *sock)
{
        gemmd_client *c = NULL;
        int rc = gemmd_connect(sock, &c);

        if (rc) {
                fprintf(stderr, "sessions: connect: %s\n", gemmd_strerror(rc));
                return -1;
        }
        rc = run_gemm(c);
        gemmd_disconnect(c);
        return rc;
}

/* The first bytes of a BufferRegister frame (its length and part of the
 * envelope), the rest never sent. */
static const uint8_t partial_register[] = {40, 0, 0, 0, 0x08, 0x07, 0x52};

/* Sends the start of a registration with n new memfds and keeps it
 * unfinished: the daemon holds the descriptors until the frame ends. */
static int hold_descriptors(struct hard_raw *r, int n)
{
        int fds[SESSION_FDS];
        int rc;

        for (int i = 0; i < n; i++)
                fds[i] = hard_memfd(4096);
        rc = hard_raw_write(r, partial_register, sizeof(partial_register), fds, n);
        for (int i = 0; i < n; i++)
                close(fds[i]);
        return rc;
}

/* ---- descriptors ---------------------------------------------------------- */

Test(attack_sessions, out_of_descriptors_a_client_is_refused_at_once_and_the_daemon_does_not_spin)
{
        enum { EXTRA = 40, MAX_CONNS = 200, AFTER = 20 };
        struct hard_raw *r = calloc(MAX_CONNS + AFTER, sizeof(*r));
        struct e2e_daemon d;
        struct hard_res base, after;
        struct rlimit rl;
        int n = 0, code = -1, got;
        char why[256] = "";
        double cpu0, cpu;
        uint64_t t0;

        cr_assert_not_null(r);
        START(&d, "--threads", "1", NULL);
        usleep(100000); /* the readiness probe's connection goes away */
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        /* As under a supervisor's low limit: room for EXTRA descriptors
         * past what the daemon has open, far fewer than --max-sessions'
         * 1024 idle sessions take. */
        rl.rlim_cur = rl.rlim_max = (rlim_t)base.fds + EXTRA;
        cr_assert_eq(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL), 0, "prlimit: %s", strerror(errno));
        cpu0 = cpu_seconds(d.pid);
        t0 = e2e_now_us();
        /* Idle sessions until one is refused; none may go unanswered. */
        for (; n < MAX_CONNS; n++) {
                cr_assert_eq(hard_raw_open(&r[n], d.sock), 0);
                got = hello_answer(&r[n], ANSWER_MS, &code, why, sizeof(why));
                cr_assert_geq(got, 0, "client %d (of a descriptor limit %d past the daemon's %d) "
                                      "had no answer within %d ms",
                              n + 1, EXTRA, base.fds, ANSWER_MS);
                if (got == 0) {
                        n++;
                        break;
                }
        }
        cr_assert_eq(code, GEMMD__V1__CODE__RESOURCE, "client %d: code %d, %s", n, code, why);
        cr_expect(strstr(why, "too many connections") && strstr(why, "descriptors"), "%s", why);
        /* Every client that comes meanwhile is told at once too. */
        for (int i = 0; i < AFTER; i++, n++) {
                cr_assert_eq(hard_raw_open(&r[n], d.sock), 0);
                got = hello_answer(&r[n], ANSWER_MS, &code, why, sizeof(why));
                cr_assert_eq(got, 0, "a client at the descriptor limit had no answer");
                cr_expect_eq(code, GEMMD__V1__CODE__RESOURCE, "%s", why);
                hard_raw_close(&r[n]);
        }
        /* The library reads the refusal as its handshake's answer. */
        {
                gemmd_client *c = NULL;
                int rc = gemmd_connect(d.sock, &c);

                cr_expect_eq(rc, GEMMD_ERESOURCE, "connect at the limit: %s", gemmd_strerror(rc));
                cr_expect_null(c);
        }
        sleep(2);
        cpu = cpu_seconds(d.pid) - cpu0;
        fprintf(stderr, "out of descriptors: %d clients in %.1f s, daemon CPU %.2f s, %d log lines\n",
                n, (double)(e2e_now_us() - t0) / 1e6, cpu, log_lines(&d));
        cr_expect_lt(cpu, 1.0, "the daemon spun: %.2f s of CPU", cpu);
        /* At most a warning a second, however many were refused. */
        cr_expect_leq(log_lines_with(&d, "accept:"), (int)((e2e_now_us() - t0) / 1000000) + 2);
        cr_expect_lt(log_lines(&d), 100);
        /* The descriptors back, the daemon serves again. */
        for (int i = 0; i < n; i++)
                hard_raw_close(&r[i]);
        cr_assert_eq(hard_res_back(d.pid, &base, &after, 10000), 0);
        cr_expect_eq(after.fds, base.fds);
        cr_expect_eq(served(d.sock), 0, "the daemon does not serve once descriptors are back");
        STOP(&d);
        free(r);
}

Test(attack_sessions, buffers_that_keep_descriptors_run_out_with_a_clear_error_for_all)
{
        enum { EXTRA = 40, MAX_BUFS = 200, MAX_CONNS = 10 };
        struct hard_raw r, x[MAX_CONNS];
        struct e2e_daemon d;
        struct hard_res base, want, after;
        struct rlimit rl;
        int nbufs = 0, n = 0, code = -1, got = 1;
        char why[256] = "";
        double cpu0, cpu;

        /* A device process maps a client's shared memory itself, so each
         * registered buffer keeps a descriptor in the daemon. */
        START(&d, "--threads", "1", "--device-process", "yes", NULL);
        cr_assert_eq(hard_raw_open(&r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        rl.rlim_cur = rl.rlim_max = (rlim_t)base.fds + EXTRA;
        cr_assert_eq(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL), 0, "prlimit: %s", strerror(errno));
        cpu0 = cpu_seconds(d.pid);
        for (; nbufs < MAX_BUFS; nbufs++) {
                int64_t id = hard_raw_register(&r, 100 + (uint64_t)nbufs, 4096, 4096);

                cr_assert_neq(id, INT64_MIN, "registration %d had no answer", nbufs + 1);
                if (id < 0) {
                        code = (int)-id;
                        break;
                }
        }
        cr_assert_eq(code, GEMMD__V1__CODE__RESOURCE, "registration %d: code %d", nbufs + 1, code);
        /* Whoever comes next is answered: served while a descriptor is
         * left, then told RESOURCE; nobody hangs. */
        for (; n < MAX_CONNS && got; n++) {
                cr_assert_eq(hard_raw_open(&x[n], d.sock), 0);
                got = hello_answer(&x[n], ANSWER_MS, &code, why, sizeof(why));
                cr_assert_geq(got, 0, "client %d had no answer within %d ms", n + 1, ANSWER_MS);
        }
        cr_expect_eq(got, 0, "%d clients served with the descriptors gone", n);
        cr_expect_eq(code, GEMMD__V1__CODE__RESOURCE, "%s", why);
        sleep(1);
        cpu = cpu_seconds(d.pid) - cpu0;
        fprintf(stderr, "%d buffers registered before the descriptors ran out; %d clients after; "
                        "daemon CPU %.2f s, %d log lines\n",
                nbufs, n, cpu, log_lines(&d));
        cr_expect_lt(cpu, 1.0, "the daemon spun: %.2f s of CPU", cpu);
        cr_expect_lt(log_lines(&d), 100);
        /* The registering session is still served, and its buffers go
         * back with it. */
        cr_expect_eq(hard_raw_register(&r, 99, 4096, 4096), -GEMMD__V1__CODE__RESOURCE);
        for (int i = 0; i < n; i++)
                hard_raw_close(&x[i]);
        hard_raw_close(&r);
        /* Wait for one descriptor fewer than with the session open: the
         * buffers' descriptors and the session's socket close at different
         * moments, and the count passes through base.fds on the way. */
        want = base;
        want.fds--;
        cr_assert_eq(hard_res_back(d.pid, &want, &after, 10000), 0);
        cr_expect_eq(after.fds, want.fds, "%d descriptors, %d before with one session",
                     after.fds, base.fds);
        cr_expect_eq(served(d.sock), 0);
        STOP(&d);
}

/* Acting as uid: a process of that user that opens sessions. */
static int become(uid_t uid)
{
        if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) {
                perror("setuid");
                return -1;
        }
        return 0;
}

/* One first session of a user of its own that holds the most descriptors
 * a session can, until the parent lets go (writes a byte to fd: a later
 * child holds a copy of the parent's end, so closing it says nothing). */
struct holder {
        const char *sock;
        uid_t uid;
};

static int hold_child(void *ctx, int fd)
{
        struct holder *h = ctx;
        struct hard_raw r;
        int code = -1;
        char b = 0;

        if (become(h->uid) || hard_raw_open(&r, h->sock))
                return 2;
        b = hello_answer(&r, ANSWER_MS, &code, NULL, 0) == 1 &&
                    hold_descriptors(&r, SESSION_FDS) == 0
            ? 'y'
            : 'n';
        if (write(fd, &b, 1) != 1)
                return 3;
        (void)!read(fd, &b, 1);
        hard_raw_close(&r);
        return 0;
}

Test(attack_sessions, a_descriptor_limit_too_low_for_max_sessions_lowers_it_and_nothing_runs_out)
{
        enum { LIMIT = 256, CONNS = 64, ROOT_HOLDERS = 8 };
        struct hard_raw *r = calloc(CONNS, sizeof(*r));
        struct e2e_daemon d;
        struct hard_res base, peak, after;
        struct rlimit old, low = {LIMIT, LIMIT};
        int code, served_n = 0, limited = 0, nkids = 0, kid_fd[ROOT_HOLDERS];
        pid_t kid[ROOT_HOLDERS];
        unsigned long long max_sessions = 0;
        char why[256];

        cr_assert_not_null(r);
        /* The daemon inherits a limit of 256 descriptors, hard and soft,
         * and keeps the default --max-sessions 1024; the user may have all
         * of them, so the descriptors are what runs out first. */
        cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
        {
                int rc = e2e_daemon_start(&d, "--threads", "1", "--max-user-sessions", "1024",
                                          NULL);

                (void)setrlimit(RLIMIT_NOFILE, &old); /* root may raise it again */
                cr_assert_eq(rc, 0, "gemmd did not start");
        }
        usleep(100000);
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        /* Every session it serves holds its socket and all the descriptors
         * a session may (a registration begun and not finished). */
        for (int i = 0; i < CONNS; i++) {
                int got;

                cr_assert_eq(hard_raw_open(&r[i], d.sock), 0);
                got = hello_answer(&r[i], ANSWER_MS, &code, why, sizeof(why));
                cr_assert_geq(got, 0, "client %d had no answer within %d ms", i + 1, ANSWER_MS);
                if (got == 1) {
                        sscanf(why, "max_sessions %llu", &max_sessions);
                        cr_assert_eq(hold_descriptors(&r[i], SESSION_FDS), 0);
                        served_n++;
                } else {
                        cr_expect_eq(code, GEMMD__V1__CODE__LIMIT, "client %d: %s", i + 1, why);
                        limited++;
                }
        }
        cr_assert_lt(max_sessions, 1024, "--max-sessions was not fitted to %d descriptors", LIMIT);
        cr_expect_geq(max_sessions, 1);
        cr_expect_eq(log_lines_with(&d, "does not fit the descriptor limit"), 1);
        /* The places kept for users' first sessions, taken by users of
         * their own, each holding as many descriptors. */
        if (geteuid() == 0) {
                cr_assert_eq(chmod(e2e_dir, 0711), 0);
                cr_assert_eq(chmod(d.sock, 0666), 0);
                for (; nkids < ROOT_HOLDERS && served_n < (int)max_sessions; nkids++) {
                        struct holder h = {d.sock, 61000 + (uid_t)nkids};
                        char b = 0;

                        kid[nkids] = e2e_fork(hold_child, &h, &kid_fd[nkids]);
                        cr_assert_gt(kid[nkids], 0);
                        cr_assert_eq(read(kid_fd[nkids], &b, 1), 1);
                        cr_assert_eq(b, 'y', "user %u's first session was not served",
                                     (unsigned)h.uid);
                        served_n++;
                }
        }
        cr_assert_eq(hard_res_read(d.pid, &peak), 0);
        fprintf(stderr, "descriptor limit %d: --max-sessions 1024 fitted to %llu; %d served holding "
                        "%d descriptors each, %d refused; daemon %d fds\n",
                LIMIT, max_sessions, served_n, 1 + SESSION_FDS, limited, peak.fds);
        /* Full, and still descriptors to spare: a newcomer reads LIMIT. */
        {
                struct hard_raw x;

                cr_assert_eq(hard_raw_open(&x, d.sock), 0);
                cr_assert_eq(hello_answer(&x, ANSWER_MS, &code, why, sizeof(why)), 0,
                             "a client past the sessions had no answer");
                cr_expect_eq(code, GEMMD__V1__CODE__LIMIT, "%s", why);
                hard_raw_close(&x);
        }
        cr_expect_lt(peak.fds, LIMIT);
        cr_expect_eq(log_lines_with(&d, "accept:"), 0, "the daemon ran out of descriptors");
        cr_expect_eq(log_lines_with(&d, "truncated"), 0);
        for (int i = 0; i < nkids; i++) {
                cr_expect_eq(write(kid_fd[i], "x", 1), 1);
                cr_expect_eq(e2e_wait_child(kid[i], 10000), 0);
                close(kid_fd[i]);
        }
        for (int i = 0; i < CONNS; i++)
                hard_raw_close(&r[i]);
        cr_assert_eq(hard_res_back(d.pid, &base, &after, 10000), 0);
        cr_expect_eq(after.fds, base.fds);
        cr_expect_eq(served(d.sock), 0);
        STOP(&d);
        free(r);
}

/* ---- decode buffers -------------------------------------------------------- */

Test(attack_sessions, sessions_give_back_a_large_frames_buffers_once_it_is_done)
{
        enum { SESSIONS = 16, K = 2000000 }; /* A and B: 1 x K and K x 1 f32, 16 MB inline */
        struct hard_raw r[SESSIONS];
        struct e2e_daemon d;
        struct hard_res base, first, after;
        float *a = malloc((size_t)K * 4), *b = malloc((size_t)K * 4), c = 0;
        char b1[128], b2[128], b3[128];

        cr_assert(a && b);
        for (int i = 0; i < K; i++) {
                a[i] = 1.0f;
                b[i] = (i % 2) ? 0.5f : -0.25f;
        }
        START(&d, "--threads", "1", NULL);
        for (int i = 0; i < SESSIONS; i++) {
                cr_assert_eq(hard_raw_open(&r[i], d.sock), 0);
                cr_assert_eq(hard_raw_hello(&r[i]), 0);
        }
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        /* One legitimate large request each, in a frame over 16 MB that the
         * daemon decodes by protobuf-c's general path, answered; then every
         * session sits idle. */
        for (int i = 0; i < SESSIONS; i++) {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
                Gemmd__V1__Submit sub = GEMMD__V1__SUBMIT__INIT;
                Gemmd__V1__Op op = GEMMD__V1__OP__INIT, *ops[1] = {&op};
                Gemmd__V1__Operand oa = GEMMD__V1__OPERAND__INIT, ob = GEMMD__V1__OPERAND__INIT,
                                   oc = GEMMD__V1__OPERAND__INIT;

                oa.data = (ProtobufCBinaryData){(size_t)K * 4, (uint8_t *)a};
                ob.data = (ProtobufCBinaryData){(size_t)K * 4, (uint8_t *)b};
                oc.data = (ProtobufCBinaryData){4, (uint8_t *)&c};
                op.kind = GEMMD__V1__OP_KIND__GEMM;
                op.dtype = GEMMD__V1__DTYPE__F32;
                op.m = op.n = 1;
                op.k = K;
                op.lda = op.ldc = 1;
                op.ldb = K;
                op.alpha = 1.0f;
                op.a = &oa;
                op.b = &ob;
                op.c = &oc;
                sub.n_ops = 1;
                sub.ops = ops;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
                env.submit = &sub;
                cr_assert_eq(hard_raw_send(&r[i], 10, &env, NULL, 0, 0), 0);
                rep = hard_raw_recv(&r[i], 60000);
                cr_assert_not_null(rep, "session %d: no answer to its large request", i);
                cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_COMPLETION, "session %d: %s",
                             i,
                             rep->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR ? rep->error->message
                                                                              : "not a completion");
                cr_assert_eq(rep->completion->n_results, 1);
                cr_expect_eq(rep->completion->results[0]->status, GEMMD__V1__CODE__OK);
                /* What the first one leaves is the daemon's for good (a
                 * device process's launch slots grow to the largest
                 * group); what each one after it leaves is its session's. */
                if (i == 0) {
                        usleep(300000);
                        cr_assert_eq(hard_res_read(d.pid, &first), 0);
                }
        }
        usleep(300000);
        cr_assert_eq(hard_res_read(d.pid, &after), 0);
        fprintf(stderr, "%d idle sessions after a 16 MB frame each: daemon before %s, after the "
                        "first %s, after all %s\n",
                SESSIONS, hard_res_str(&base, b1, sizeof(b1)), hard_res_str(&first, b2, sizeof(b2)),
                hard_res_str(&after, b3, sizeof(b3)));
        /* A session's small read buffer and arena, not the frame's size. */
        cr_expect_leq(after.rss_kb, first.rss_kb + 8192,
                      "%d idle sessions hold %ld kB more after one large frame each", SESSIONS - 1,
                      after.rss_kb - first.rss_kb);
        cr_expect_leq(after.rss_kb, base.rss_kb + 32768, "VmRSS %ld kB -> %ld kB", base.rss_kb,
                      after.rss_kb);
        /* They are still served. */
        for (int i = 0; i < SESSIONS; i++)
                hard_raw_close(&r[i]);
        cr_expect_eq(served(d.sock), 0);
        STOP(&d);
        free(a);
        free(b);
}

/* ---- partial frames --------------------------------------------------------- */

Test(attack_sessions, partial_frames_are_closed_after_the_timeout_with_their_descriptors)
{
        enum { WITH_FDS = 20, ONE_BYTE = 10, N = WITH_FDS + ONE_BYTE };
        struct hard_raw r[N];
        struct e2e_daemon d;
        struct hard_res base, held, after;
        gemmd_client *idle;
        uint64_t t0, first_us = 0;
        long long got;
        char b1[128], b2[128];

        /* The defaults: a frame may take 10 s from its first byte. */
        START(&d, "--threads", "1", NULL);
        idle = e2e_connect(&d);
        cr_assert_not_null(idle);
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        for (int i = 0; i < N; i++) {
                cr_assert_eq(hard_raw_open(&r[i], d.sock), 0);
                cr_assert_eq(hard_raw_hello(&r[i]), 0);
        }
        t0 = e2e_now_us();
        for (int i = 0; i < N; i++) {
                static const uint8_t one = 200;

                if (i < WITH_FDS)
                        cr_assert_eq(hold_descriptors(&r[i], SESSION_FDS), 0);
                else
                        cr_assert_eq(hard_raw_write(&r[i], &one, 1, NULL, 0), 0);
        }
        usleep(300000);
        cr_assert_eq(hard_res_read(d.pid, &held), 0);
        cr_expect_geq(held.fds, base.fds + N + WITH_FDS * SESSION_FDS,
                      "the daemon does not hold the descriptors sent: %s",
                      hard_res_str(&held, b1, sizeof(b1)));
        /* Each one is told why and closed, not before its time. */
        for (int i = 0; i < N; i++) {
                Gemmd__V1__Envelope *rep = hard_raw_recv(&r[i], 25000);

                cr_assert_not_null(rep, "session %d: its partial frame is held after %.1f s", i,
                                   (double)(e2e_now_us() - t0) / 1e6);
                if (!first_us)
                        first_us = e2e_now_us() - t0;
                cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR);
                cr_expect_eq(rep->error->code, GEMMD__V1__CODE__PROTOCOL);
                cr_expect(strstr(rep->error->message, "--frame-timeout-ms"), "%s",
                          rep->error->message);
                if (i == 0)
                        fprintf(stderr, "partial frame: %s\n", rep->error->message);
                cr_expect(hard_raw_wait_eof(&r[i], 10000), "session %d stays open", i);
        }
        cr_expect_geq(first_us, 9000000, "closed after %.1f s, before the timeout",
                      (double)first_us / 1e6);
        cr_assert_eq(hard_res_back(d.pid, &base, &after, 10000), 0);
        fprintf(stderr, "%d partial frames (%d with %d descriptors): daemon held %s, after %s\n", N,
                WITH_FDS, SESSION_FDS, hard_res_str(&held, b1, sizeof(b1)),
                hard_res_str(&after, b2, sizeof(b2)));
        cr_expect_eq(after.fds, base.fds);
        cr_expect_eq(hard_wait_sessions(idle, 1, 10000, &got), 0, "%lld sessions", got);
        /* A session that sent nothing for as long is no partial frame: it
         * stays, and is served. */
        cr_expect_eq(e2e_round_trip(idle), 0);
        for (int i = 0; i < N; i++)
                hard_raw_close(&r[i]);
        gemmd_disconnect(idle);
        STOP(&d);
}

/* ---- one user against the others ----------------------------------------------- */

/* A user's process that opens `sessions` connections with Hello, then
 * `silent` ones that say nothing, reports how they were answered, and
 * holds them until the parent lets go. */
struct flood {
        const char *sock;
        uid_t uid;
        int sessions, silent;
};

struct flood_result {
        int served, limited, other, hung;
        char why[160]; /* the first refusal's */
};

static int flood_child(void *ctx, int fd)
{
        struct flood *f = ctx;
        struct hard_raw *r = calloc((size_t)(f->sessions + f->silent), sizeof(*r));
        struct flood_result res = {0};
        char why[160], b;

        if (!r || become(f->uid))
                return 2;
        for (int i = 0; i < f->sessions; i++) {
                int code = -1, got;

                if (hard_raw_open(&r[i], f->sock)) {
                        res.other++;
                        continue;
                }
                got = hello_answer(&r[i], ANSWER_MS, &code, why, sizeof(why));
                if (got == 1) {
                        res.served++;
                        continue;
                }
                if (got < 0)
                        res.hung++;
                else if (code == GEMMD__V1__CODE__LIMIT)
                        res.limited++;
                else
                        res.other++;
                if (got == 0 && !res.why[0])
                        snprintf(res.why, sizeof(res.why), "%s", why);
                hard_raw_close(&r[i]);
        }
        for (int i = f->sessions; i < f->sessions + f->silent; i++)
                (void)hard_raw_open(&r[i], f->sock);
        if (write(fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
                return 3;
        (void)!read(fd, &b, 1);
        for (int i = 0; i < f->sessions + f->silent; i++)
                hard_raw_close(&r[i]);
        return 0;
}

/* Starts a flood of user uid; its result in *res, its pid returned, the
 * parent's end of its socket in *fd (closing it ends the flood). */
static pid_t start_flood(struct flood *f, struct flood_result *res, int *fd)
{
        pid_t pid = e2e_fork(flood_child, f, fd);

        cr_assert_gt(pid, 0);
        cr_assert_eq(read(*fd, res, sizeof(*res)), (ssize_t)sizeof(*res), "the flood failed");
        fprintf(stderr, "uid %u: %d sessions served, %d refused with LIMIT, %d other, %d hung (%s)\n",
                (unsigned)f->uid, res->served, res->limited, res->other, res->hung, res->why);
        return pid;
}

/* A user's process that connects (twice with `second`) and is served. */
struct visitor {
        const char *sock;
        uid_t uid;
        int second; /* 1: a second session must be served, -1: refused, 0: not tried */
};

static int visitor_child(void *ctx, int fd)
{
        struct visitor *v = ctx;
        gemmd_client *c = NULL, *c2 = NULL;
        int rc;

        (void)fd;
        if (become(v->uid))
                return 2;
        rc = gemmd_connect(v->sock, &c);
        if (rc) {
                fprintf(stderr, "uid %u: connect: %s\n", (unsigned)v->uid, gemmd_strerror(rc));
                return 3;
        }
        if (run_gemm(c))
                return 4;
        if (v->second) {
                rc = gemmd_connect(v->sock, &c2);
                fprintf(stderr, "uid %u: a session beside its first: %s\n", (unsigned)v->uid,
                        rc ? gemmd_strerror(rc) : "served");
                if (v->second > 0 ? rc != 0 : rc != GEMMD_ELIMIT)
                        return 5;
                gemmd_disconnect(c2);
        }
        gemmd_disconnect(c);
        return 0;
}

static int visit(const char *sock, uid_t uid, int second)
{
        struct visitor v = {sock, uid, second};
        pid_t pid = e2e_fork(visitor_child, &v, NULL);

        return pid > 0 ? e2e_wait_child(pid, 30000) : -1;
}

Test(attack_sessions, one_user_cannot_take_every_session_by_default)
{
        struct e2e_daemon d;
        struct flood f = {.uid = 60051, .sessions = 64};
        struct flood_result res;
        pid_t pid;
        int fd;

        if (geteuid() != 0)
                cr_skip_test("acting as two users needs root");
        START(&d, "--threads", "1", "--max-sessions", "64", NULL);
        cr_assert_eq(chmod(e2e_dir, 0711), 0);
        cr_assert_eq(chmod(d.sock, 0666), 0);
        f.sock = d.sock;
        /* One user asks for every session there is. */
        pid = start_flood(&f, &res, &fd);
        cr_expect_eq(res.hung, 0);
        cr_expect_eq(res.served + res.limited, 64);
        cr_expect_leq(res.served, 16, "one user holds %d of 64 sessions", res.served);
        cr_expect(strstr(res.why, "per user"), "%s", res.why);
        /* Another user is served, beside its first session too. */
        cr_expect_eq(visit(d.sock, 60052, 1), 0, "another user was not served");
        close(fd);
        cr_expect_eq(e2e_wait_child(pid, 30000), 0);
        STOP(&d);
}

Test(attack_sessions, a_user_with_no_session_gets_one_when_another_filled_the_daemon)
{
        struct e2e_daemon d;
        /* 80 silent connections on top keep the daemon's queue of sessions
         * waiting to be refused full. */
        struct flood f = {.uid = 60061, .sessions = 40, .silent = 80};
        struct flood_result res;
        pid_t pid;
        int fd;

        if (geteuid() != 0)
                cr_skip_test("acting as two users needs root");
        /* The operator lets one user have every session. */
        START(&d, "--threads", "1", "--max-sessions", "32", "--max-user-sessions", "32", NULL);
        cr_assert_eq(chmod(e2e_dir, 0711), 0);
        cr_assert_eq(chmod(d.sock, 0666), 0);
        f.sock = d.sock;
        pid = start_flood(&f, &res, &fd);
        cr_expect_eq(res.hung, 0);
        cr_expect_lt(res.served, 32, "one user holds every session");
        cr_expect(strstr(res.why, "first sessions"), "%s", res.why);
        /* Users with none still get one each (within the flood's silent
         * connections' 10 s), and only one. */
        cr_expect_eq(visit(d.sock, 60062, -1), 0, "a user with no session was not served");
        cr_expect_eq(served(d.sock), 0, "root, with no session, was not served");
        close(fd);
        cr_expect_eq(e2e_wait_child(pid, 30000), 0);
        STOP(&d);
}

/* ---- idle sessions ------------------------------------------------------------ */

Test(attack_sessions, idle_sessions_are_closed_where_the_operator_asks_and_busy_ones_stay)
{
        struct e2e_daemon d;
        struct hard_raw r;
        gemmd_client *busy;
        Gemmd__V1__Envelope *rep;
        uint64_t t0;

        /* Off by default (the partial-frame case shows an idle session
         * kept); an operator who wants idle sessions gone sets it. */
        START(&d, "--threads", "1", "--idle-timeout-ms", "1000", NULL);
        busy = e2e_connect(&d);
        cr_assert_not_null(busy);
        cr_assert_eq(hard_raw_open(&r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);
        t0 = e2e_now_us();
        /* A client that calls every 200 ms is never idle that long. */
        while (e2e_now_us() - t0 < 3000000) {
                cr_assert_eq(e2e_round_trip(busy), 0, "a busy session was closed");
                usleep(200000);
        }
        rep = hard_raw_recv(&r, 100);
        cr_assert_not_null(rep, "an idle session stayed open");
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR);
        cr_expect(strstr(rep->error->message, "--idle-timeout-ms"), "%s", rep->error->message);
        cr_expect(hard_raw_wait_eof(&r, 5000));
        hard_raw_close(&r);
        cr_expect_eq(run_gemm(busy), 0);
        gemmd_disconnect(busy);
        STOP(&d);
}

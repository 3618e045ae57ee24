/*
 * small.c - the smaller holes one local user could use against the
 * others: another user's sessions read through stats, 32-bit fields
 * given more than 32 bits, a launch that fails for a reason of its own
 * taken for a broken device, and the startup options that were read
 * otherwise than they were written (--devices, --max-frame-bytes).
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(attack_small, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

/* ---- startup options ------------------------------------------------------- */

/* Runs build/gemmd with the flags (NULL-terminated, at most 8) on a socket
 * of the test's directory, expecting it to refuse them: returns its exit
 * status (-1 when it was still running after 10 s, and was killed) and
 * what it wrote, which the caller frees. */
static int run_refused(char **err, ...)
{
        char *bin = e2e_build_path("gemmd"), sock[256], errp[256], *argv[16];
        const char *flag;
        int argc = 0, st;
        va_list ap;

        snprintf(sock, sizeof(sock), "%s/refused.sock", e2e_dir);
        snprintf(errp, sizeof(errp), "%s/refused.err", e2e_dir);
        argv[argc++] = bin;
        argv[argc++] = "--backend";
        argv[argc++] = "cpu";
        argv[argc++] = "--socket";
        argv[argc++] = sock;
        va_start(ap, err);
        while ((flag = va_arg(ap, const char *)) && argc < 14)
                argv[argc++] = (char *)flag;
        va_end(ap);
        argv[argc] = NULL;
        st = e2e_run(argv, NULL, errp, 10000);
        *err = e2e_read_file(errp, NULL);
        free(bin);
        return st;
}

/* --devices was matched as a substring of the list ("10" also selected 1
 * and 0) and took anything: a list that is not distinct indices is
 * refused at startup, saying what is wrong. */
Test(attack_small, devices_takes_only_a_list_of_distinct_indices)
{
        static const char *const bad[][2] = {
                {"1,1", "twice"}, {"10,x", "\"x\""}, {"1,,2", "\"\""}, {"0x1", "\"0x1\""},
                {"-1", "\"-1\""}, {"99999999999999999999", "99999999999999999999"},
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *err = NULL;
                int st = run_refused(&err, "--devices", bad[i][0], NULL);

                cr_expect_eq(st, 2, "--devices %s: exit status %d", bad[i][0], st);
                cr_expect(err && strstr(err, "--devices") && strstr(err, bad[i][1]),
                          "--devices %s: %s", bad[i][0], err ? err : "(no output)");
                free(err);
        }
}

/* --max-frame-bytes 1048576 was raised to the inline limit + 1 MiB
 * (17825792) without a word: a limit the operator set is now refused
 * when it cannot hold the inline bytes, and only the default grows. */
Test(attack_small, a_frame_limit_below_the_inline_limit_is_refused)
{
        struct e2e_daemon d;
        struct gemmd_info info;
        gemmd_client *c;
        char *err = NULL;
        int st = run_refused(&err, "--max-frame-bytes", "1048576", NULL);

        cr_expect_eq(st, 2, "exit status %d", st);
        cr_expect(err && strstr(err, "--max-frame-bytes 1048576") &&
                          strstr(err, "--max-inline-bytes 16777216") && strstr(err, "17825792"),
                  "%s", err ? err : "(no output)");
        free(err);

        /* Set both, consistently, and the daemon keeps them as given. */
        START(&d, "--max-frame-bytes", "1052672", "--max-inline-bytes", "4096", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_get_info(c, &info), 0);
        cr_expect_eq(info.max_frame_bytes, 1052672);
        gemmd_disconnect(c);
        STOP(&d);

        /* Not given, the frame limit grows with the inline one. */
        START(&d, "--max-inline-bytes", "33554432", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_get_info(c, &info), 0);
        cr_expect_eq(info.max_frame_bytes, 33554432 + 1048576);
        gemmd_disconnect(c);
        STOP(&d);
}

/* ---- 32-bit fields given more than 32 bits ------------------------------- */

/* Appends varint v to *p. */
static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
        while (v >= 0x80) {
                *p++ = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        *p++ = (uint8_t)v;
        return p;
}

/* Appends a length-delimited field of n bytes at src to *p. */
static uint8_t *put_bytes(uint8_t *p, uint32_t field, const uint8_t *src, size_t n)
{
        p = put_varint(p, (uint64_t)field << 3 | 2);
        p = put_varint(p, n);
        memcpy(p, src, n);
        return p + n;
}

/* Writes the frame of request `rid`: the 2 x 2 x 2 inline GEMM whose Op
 * ends with varint field op_field = op_v and whose Submit ends with
 * varint field sub_field = sub_v (a field 0: none). protobuf-c keeps the
 * last of a field sent twice, so these override what the Op says. */
static void send_gemm2_with(struct hard_raw *r, uint64_t rid, uint32_t op_field, uint64_t op_v,
                            uint32_t sub_field, uint64_t sub_v)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        struct hard_gemm2 g;
        static uint8_t op[1024], sub[1024], frame[2048];
        uint8_t *p;
        size_t n;

        hard_gemm2_submit(&g, &env);
        cr_assert_lt(gemmd__v1__op__get_packed_size(&g.op), sizeof(op) - 32);
        p = op + gemmd__v1__op__pack(&g.op, op);
        if (op_field) {
                p = put_varint(p, (uint64_t)op_field << 3);
                p = put_varint(p, op_v);
        }
        n = (size_t)(p - op);
        p = put_bytes(sub, 1, op, n);
        if (sub_field) {
                p = put_varint(p, (uint64_t)sub_field << 3);
                p = put_varint(p, sub_v);
        }
        n = (size_t)(p - sub);
        p = put_varint(frame + 4, 1 << 3);
        p = put_varint(p, rid);
        p = put_bytes(p, 16, sub, n);
        n = (size_t)(p - frame - 4);
        frame[0] = (uint8_t)n;
        frame[1] = (uint8_t)(n >> 8);
        frame[2] = (uint8_t)(n >> 16);
        frame[3] = (uint8_t)(n >> 24);
        cr_assert_eq(hard_raw_write(r, frame, n + 4, NULL, 0), 0);
}

/* Reads the answer to the frame just sent: PROTOCOL naming `field`. */
static void expect_wide_refused(struct hard_raw *r, const char *field)
{
        Gemmd__V1__Envelope *e = hard_raw_recv(r, 10000);

        cr_assert_not_null(e, "no answer");
        cr_assert_eq(e->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR,
                     "%s past 32 bits was accepted (answer %d)", field, (int)e->body_case);
        cr_expect_eq(e->error->code, GEMMD__V1__CODE__PROTOCOL);
        cr_expect(e->error->message && strstr(e->error->message, field), "%s",
                  e->error->message ? e->error->message : "(no message)");
}

/* protobuf-c keeps the low 32 bits of a 32-bit field: trans_b = 2^32 + 1
 * read as 1 (T) and priority = 2^32 as 0, values that pass every check
 * after decoding. The daemon now answers such a frame with PROTOCOL, and
 * the session, and the daemon, go on. */
Test(attack_small, a_32_bit_field_past_32_bits_is_a_protocol_error)
{
        struct e2e_daemon d;
        struct hard_raw r;
        Gemmd__V1__Envelope *e;

        START(&d, "--threads", "1", NULL);
        cr_assert_eq(hard_raw_open(&r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);

        send_gemm2_with(&r, 2, 4, (1ull << 32) + 1, 0, 0);
        expect_wide_refused(&r, "Op.trans_b");
        send_gemm2_with(&r, 3, 0, 0, 2, 1ull << 32);
        expect_wide_refused(&r, "Submit.priority");
        send_gemm2_with(&r, 4, 1, (1ull << 32) | GEMMD__V1__OP_KIND__GEMM, 0, 0);
        expect_wide_refused(&r, "Op.kind");

        /* The same frames with values that fit are served. */
        send_gemm2_with(&r, 5, 4, 1, 2, 2);
        e = hard_raw_recv(&r, 10000);
        cr_assert(e && e->body_case == GEMMD__V1__ENVELOPE__BODY_COMPLETION,
                  "a valid submit was not served");
        cr_expect_eq(e->request_id, 5);
        cr_assert_eq(e->completion->n_results, 1);
        cr_expect_eq(e->completion->results[0]->status, GEMMD__V1__CODE__OK);
        hard_raw_close(&r);
        STOP(&d);
}

/* ---- launch failures that are not the device's ---------------------------- */

/* Runs n random inline ops on c, checked against the reference. */
static void run_checked(gemmd_client *c, uint64_t *seed, int n)
{
        for (int i = 0; i < n; i++)
                e2e_assert_random_op(c, seed, 24);
}

/* Every launch failure was answered GEMMD_EDEVICE and replaced the device
 * process (a recovery: every group in flight on the device lost), so any
 * op whose launch ran out of memory, or whose plan was refused, cost the
 * other users the device's work. Such a failure (injected by a debug op
 * in the fault-injection build) now answers its cause, and the device,
 * its process and the other clients' work go on as they were. */
Test(attack_small, a_launch_failure_not_the_devices_keeps_the_device)
{
        static const struct {
                const char *err; /* GEMMD_FI_LAUNCH_ERROR; NULL: a device fault */
                int status, recoveries;
        } cases[] = {
                {"ENOMEM", GEMMD_ERESOURCE, 0},
                {"EINVAL", GEMMD_EINVAL, 0},
                {NULL, GEMMD_EDEVICE, 1}, /* what the others are told apart from */
        };
        char *fi = e2e_build_path("gemmd-fi");

        cr_assert(fi && access(fi, X_OK) == 0, "no gemmd-fi beside gemmd");
        free(fi);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct e2e_daemon d;
                struct e2e_spec s;
                struct e2e_prob p;
                gemmd_client *victim, *other;
                uint64_t seed = 91 + i;
                const char *what = cases[i].err ? cases[i].err : "a device fault";
                long long pid;
                int rc;

                setenv("E2E_GEMMD", "gemmd-fi", 1);
                if (cases[i].err)
                        setenv("GEMMD_FI_LAUNCH_ERROR", cases[i].err, 1);
                rc = e2e_daemon_start(&d, "--device-process", "yes", "--threads", "2", NULL);
                unsetenv("E2E_GEMMD");
                unsetenv("GEMMD_FI_LAUNCH_ERROR");
                cr_assert_eq(rc, 0);
                victim = e2e_connect(&d);
                other = e2e_connect(&d);
                cr_assert(victim && other);
                run_checked(other, &seed, 2);
                pid = hard_device_number(other, "process_pid");
                cr_assert_gt(pid, 0);

                e2e_spec_random(&s, &seed, 24);
                cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
                p.op.flags |= GEMMD_OPF_DEBUG_FAULT;
                rc = gemmd_run(victim, &p.op, 1, NULL);
                cr_expect_eq(rc, cases[i].status, "launch failing with %s: %s", what,
                             gemmd_strerror(rc));
                e2e_prob_free(&p);

                run_checked(other, &seed, 3);
                run_checked(victim, &seed, 2);
                cr_expect_eq(hard_device_number(other, "recoveries"), cases[i].recoveries, "%s", what);
                cr_expect_eq(hard_device_number(other, "process_restarts"), cases[i].recoveries,
                             "%s", what);
                if (!cases[i].recoveries)
                        cr_expect_eq(hard_device_number(other, "process_pid"), pid, "%s", what);
                cr_expect_eq(hard_device_number(other, "ops_failed"), 1);
                gemmd_disconnect(victim);
                gemmd_disconnect(other);
                STOP(&d);
        }
}

/* ---- stats seen by another user ------------------------------------------- */

struct as_user {
        const char *sock;
        uid_t uid;
        gid_t gid;
        gid_t extra; /* a supplementary group, or 0 for none */
};

/* Child of stats_as: becomes the user, connects, and writes its stats in
 * JSON, a NUL, then as text, to fd. */
static int stats_child(void *ctx, int fd)
{
        const struct as_user *u = ctx;
        gemmd_client *c = NULL;
        char *json = NULL, *text = NULL;

        if (setgroups(u->extra ? 1 : 0, &u->extra) || setgid(u->gid) || setuid(u->uid))
                return 2;
        if (gemmd_connect(u->sock, &c) || gemmd_stats(c, 1, &json) || gemmd_stats(c, 0, &text))
                return 3;
        if (write(fd, json, strlen(json) + 1) < 0 || write(fd, text, strlen(text)) < 0)
                return 4;
        gemmd_disconnect(c);
        return 0;
}

/* The stats a client of user u gets (JSON, then text at *text; both
 * freed by the caller with the first). */
static char *stats_as(const struct as_user *u, char **text)
{
        size_t len = 0, cap = 1 << 20;
        char *buf = calloc(1, cap);
        pid_t pid;
        int fd;
        ssize_t got;

        cr_assert_not_null(buf);
        pid = e2e_fork(stats_child, (void *)u, &fd);
        cr_assert_gt(pid, 0);
        while (len < cap - 1 && (got = read(fd, buf + len, cap - 1 - len)) > 0)
                len += (size_t)got;
        close(fd);
        cr_assert_eq(e2e_wait_child(pid, 30000), 0, "the client of uid %d failed", (int)u->uid);
        *text = buf + strlen(buf) + 1;
        cr_assert_leq((size_t)(*text - buf), len);
        return buf;
}

/* A root client that holds a buffer and has run an op: what the others
 * must not see. */
static gemmd_client *root_session(struct e2e_daemon *d, struct e2e_arena *ar)
{
        gemmd_client *c = e2e_connect(d);
        uint64_t seed = 7;

        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(ar, c, 3u << 20), 0);
        run_checked(c, &seed, 1);
        /* The acting users must reach the socket. */
        cr_assert_eq(chmod(e2e_dir, 0711), 0);
        cr_assert_eq(chmod(d->sock, 0666), 0);
        return c;
}

/* Any user who could connect read every session's pid, uid and holdings
 * (and the per-user table) through stats. Another user now sees the
 * daemon-wide totals and its own sessions only, in JSON and in text. */
Test(attack_small, another_user_sees_only_its_own_sessions)
{
        struct as_user u = {.uid = 60011, .gid = 60011};
        struct e2e_daemon d;
        struct e2e_arena ar;
        gemmd_client *root;
        char *json, *text, pid[32];

        if (geteuid() != 0)
                cr_skip_test("acting as another user needs root");
        START(&d, "--threads", "1", NULL);
        root = root_session(&d, &ar);
        u.sock = d.sock;
        json = stats_as(&u, &text);
        snprintf(pid, sizeof(pid), "\"pid\":%d,", (int)getpid());

        cr_expect_eq(hard_json_number(json, "sessions_now"), 2, "%s", json);
        cr_expect(strstr(json, "\"all_sessions\":false"), "%s", json);
        cr_expect_not(strstr(json, "\"uid\":0,") || strstr(json, "\"uid\":0}") ||
                              strstr(json, pid) || strstr(json, "\"buffer_bytes\":3145728"),
                      "user 60011 sees root's session: %s", json);
        cr_expect(strstr(json, "{\"uid\":60011,\"sessions\":1,"), "its own user is missing: %s",
                  json);
        cr_expect_not(strstr(text, " uid 0,") || strstr(text, "uid 0:") ||
                              strstr(text, "3145728 bytes"),
                      "user 60011 sees root's session: %s", text);
        cr_expect(strstr(text, " uid 60011,"), "its own session is missing: %s", text);
        free(json);
        gemmd_disconnect(root);
        STOP(&d);
}

/* Root and the members of an --admin-gid group, by their primary or a
 * supplementary group, still see every session; other groups do not. */
Test(attack_small, root_and_admin_groups_see_every_session)
{
        static const struct {
                uid_t uid;
                gid_t gid, extra;
                int all;
        } who[] = {{60012, 4242, 0, 1}, {60013, 60013, 4242, 1}, {60014, 60014, 4243, 0}};
        struct e2e_daemon d;
        struct e2e_arena ar;
        gemmd_client *root;
        char *json, pid[32];

        if (geteuid() != 0)
                cr_skip_test("acting as other users needs root");
        START(&d, "--threads", "1", "--admin-gid", "4242", NULL);
        root = root_session(&d, &ar);
        snprintf(pid, sizeof(pid), "\"pid\":%d,", (int)getpid());
        cr_assert_eq(gemmd_stats(root, 1, &json), 0);
        cr_expect(strstr(json, "\"all_sessions\":true") && strstr(json, pid), "root: %s", json);
        free(json);
        for (size_t i = 0; i < sizeof(who) / sizeof(who[0]); i++) {
                struct as_user u = {d.sock, who[i].uid, who[i].gid, who[i].extra};
                char *text;

                json = stats_as(&u, &text);
                cr_expect_eq(strstr(json, pid) != NULL, who[i].all, "uid %d: %s", (int)who[i].uid,
                             json);
                cr_expect_eq(strstr(text, "3145728 bytes") != NULL, who[i].all, "uid %d: %s",
                             (int)who[i].uid, text);
                free(json);
        }
        gemmd_disconnect(root);
        STOP(&d);
}

/*
 * budget.c - what one user's client can make the daemon hold, and what the
 * daemon does when it runs out anyway.
 *
 * Memory mappings: every registered shared-memory buffer is a mapping in
 * the daemon, and the kernel allows a process only vm.max_map_count of
 * them. One user registering tens of thousands of small buffers over many
 * sessions must meet a per-user cap, not the kernel's limit; and when an
 * allocation on the worker's path fails all the same (the fault-injection
 * build makes it fail on demand: GEMMD_FAULT_ALLOC), the ops concerned
 * fail with GEMMD_ERESOURCE and the worker goes on serving.
 *
 * Memory: a submit of 51 bytes can ask for a 16 MiB inline result, which
 * the daemon computes and packs into a reply. A client that sends many and
 * reads no reply must meet the session's and the user's byte budgets, and
 * the daemon's memory must stay under the bound gemmd(8) gives for the
 * limits in force.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "proto/ring.h"
#include "tests/hard_util.h"

TestSuite(attack_budget, .init = e2e_setup, .fini = e2e_teardown, .timeout = 240);

#define WAIT_MS 20000


/* Starts build/gemmd-fi with GEMMD_FAULT_ALLOC=site: a debug op then fails
 * the worker's allocation at that site instead of faulting the device. */
static void start_fi(struct e2e_daemon *d, const char *site)
{
        static const char *const flags[] = {"--threads", "2", NULL};

        cr_assert_eq(e2e_fi_daemon_startv(d, "GEMMD_FAULT_ALLOC", site, flags), 0, "gemmd-fi did not start");
}

/* The worker finds no memory for an op at `site` (the room for it in a
 * group, or its group's plan): the op fails with GEMMD_ERESOURCE within a
 * generous deadline, instead of the worker spinning on it; the same client
 * and another are served at once after it, and SIGTERM still ends the
 * daemon with status 0. */
static void worker_out_of_memory(const char *site)
{
        struct e2e_daemon d;
        struct e2e_spec s;
        struct e2e_prob p;
        struct gemmd_result res;
        gemmd_client *c1, *c2;
        gemmd_ticket t;
        uint64_t seed = 27;
        int rc;

        start_fi(&d, site);
        c1 = e2e_connect(&d);
        c2 = e2e_connect(&d);
        cr_assert(c1 && c2);
        e2e_assert_random_op(c1, &seed, 48);

        e2e_spec_random(&s, &seed, 32);
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        p.op.flags |= GEMMD_OPF_DEBUG_FAULT;
        cr_assert_eq(gemmd_submit(c1, &p.op, 1, GEMMD_PRIO_NORMAL, &t), 0);
        rc = gemmd_wait(c1, t, WAIT_MS, &res, 1);
        cr_assert_eq(rc, GEMMD_ERESOURCE, "the op the worker had no memory for (%s): %s", site,
                     gemmd_strerror(rc));
        cr_expect_eq(res.status, GEMMD_ERESOURCE);
        e2e_prob_free(&p);

        for (int i = 0; i < 4; i++) {
                e2e_assert_random_op(c2, &seed, 48);
                e2e_assert_random_op(c1, &seed, 48);
        }
        cr_expect_eq(hard_device_number(c2, "ops_failed"), 1);
        /* Nothing was left to repair: no device process was replaced. */
        cr_expect_leq(hard_device_number(c2, "process_restarts"), 0);
        gemmd_disconnect(c1);
        gemmd_disconnect(c2);
        STOP(&d);
}

Test(attack_budget, no_room_for_an_op_in_a_group_fails_it_and_the_worker_serves_on)
{
        worker_out_of_memory("group");
}

Test(attack_budget, no_memory_for_a_groups_plan_fails_its_ops_and_the_worker_serves_on)
{
        worker_out_of_memory("plan");
}

/* ---- memory mappings ------------------------------------------------------ */

#define HOG_SESSIONS 16
#define HOG_TRIES 2048

/* What a hog reports: the buffers it registered, and the Error that
 * stopped it (code 0: none did). */
struct hog_report {
        int registered;
        int code;
        char message[240];
};

struct hog {
        const char *sock;
        uid_t uid;
};

/* A client of user h->uid that registers 4 KiB buffers over HOG_SESSIONS
 * sessions in turn, up to HOG_TRIES, until the daemon refuses one; it
 * writes its report on fd and holds its sessions until fd reads end of
 * file. Runs in a child process (no Criterion here). */
static int hog_main(void *ctx, int fd)
{
        const struct hog *h = ctx;
        struct hard_raw r[HOG_SESSIONS];
        struct hog_report rep = {0};
        char b;

        if (setgroups(0, NULL) || setgid(h->uid) || setuid(h->uid))
                return 2;
        for (int i = 0; i < HOG_SESSIONS; i++)
                if (hard_raw_open(&r[i], h->sock) || hard_raw_hello(&r[i]))
                        return 3;
        for (int i = 0; i < HOG_TRIES && !rep.code; i++) {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
                Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
                struct hard_raw *x = &r[i % HOG_SESSIONS];
                int mfd = hard_memfd(4096), rc;

                if (mfd < 0)
                        return 4;
                reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
                reg.bytes = 4096;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
                env.buffer_register = &reg;
                rc = hard_raw_send(x, (uint64_t)i + 1, &env, &mfd, 1, 0);
                close(mfd);
                if (rc || !(e = hard_raw_recv(x, WAIT_MS)))
                        return 5;
                if (e->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY) {
                        rep.registered++;
                } else if (e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR) {
                        rep.code = e->error->code;
                        snprintf(rep.message, sizeof(rep.message), "%s", e->error->message);
                } else {
                        return 6;
                }
        }
        if (write(fd, &rep, sizeof(rep)) != sizeof(rep))
                return 7;
        while (read(fd, &b, 1) > 0)
                ;
        for (int i = 0; i < HOG_SESSIONS; i++)
                hard_raw_close(&r[i]);
        return 0;
}

/* Starts a hog of user uid and reads its report; *fd keeps it holding. */
static pid_t hog_start(const char *sock, uid_t uid, struct hog_report *rep, int *fd)
{
        struct hog h = {sock, uid};
        pid_t pid = e2e_fork(hog_main, &h, fd);

        cr_assert_gt(pid, 0);
        cr_assert_eq(read(*fd, rep, sizeof(*rep)), (ssize_t)sizeof(*rep), "hog of uid %d: no report",
                     (int)uid);
        fprintf(stderr, "uid %d registered %d buffers of 4 KiB; then %d: %s\n", (int)uid,
                rep->registered, rep->code, rep->message);
        return pid;
}

/* Lets a hog go and waits for it. */
static void hog_stop(pid_t pid, int fd)
{
        close(fd);
        cr_assert_eq(e2e_wait_child(pid, WAIT_MS), 0, "the hog failed");
}

/* A top-level number of the daemon's JSON stats, or -1. */
static long long stats_number(gemmd_client *c, const char *key)
{
        char *json = NULL;
        long long v = -1;

        if (gemmd_stats(c, 1, &json) == 0)
                v = hard_json_number(json, key);
        free(json);
        return v;
}

/* Run as another user: connects, registers a buffer and runs an op on it.
 * Returns 0 when all of that worked. */
static int bystander_main(void *ctx, int fd)
{
        const struct hog *h = ctx;
        struct e2e_arena ar;
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 24, .n = 16, .k = 8,
                             .alpha = 1.0f};
        struct e2e_prob p;
        gemmd_client *c;
        uint64_t seed = 5;
        char why[256];

        if (setgroups(0, NULL) || setgid(h->uid) || setuid(h->uid))
                return 2;
        if (gemmd_connect(h->sock, &c) || e2e_arena_init(&ar, c, 1u << 20) ||
            e2e_prob_place(&p, &s, &ar, &seed))
                return 3;
        if (e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why))) {
                fprintf(stderr, "bystander: %s\n", why);
                return 4;
        }
        gemmd_disconnect(c);
        return 0;
}

/* One user registers small buffers over many sessions, as fast as it can,
 * as one that wants to take the node's memory mappings would (by default
 * 1024 buffers x 1024 sessions are allowed: 65,000 of them reach the
 * kernel's vm.max_map_count in seconds). It meets --max-user-buffers with
 * a LIMIT that names it, holding no more mappings than that; another user
 * is served meanwhile; a third meets the daemon-wide --max-mappings; and
 * what the first held comes back when it leaves. */
Test(attack_budget, a_user_registering_thousands_of_buffers_meets_its_mapping_cap)
{
        struct e2e_daemon d;
        struct hard_res base, held, after;
        struct hog_report rep, rep3;
        struct hog by = {NULL, 60032};
        gemmd_client *mon;
        long long before_all;
        char b1[128], b2[128];
        int fd, fd3;
        pid_t pid, pid3, bp;

        START(&d, "--max-user-buffers", "200", "--max-mappings", "300", NULL);
        cr_assert_eq(chmod(e2e_dir, 0711), 0);
        cr_assert_eq(chmod(d.sock, 0666), 0);
        mon = e2e_connect(&d);
        cr_assert_not_null(mon);
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        before_all = stats_number(mon, "mappings");
        cr_assert_geq(before_all, 0, "no mappings in the stats");

        pid = hog_start(d.sock, 60031, &rep, &fd);
        cr_expect_eq(rep.registered, 200, "one user holds %d buffers (--max-user-buffers 200)",
                     rep.registered);
        cr_expect_eq(rep.code, GEMMD__V1__CODE__LIMIT);
        cr_expect(strstr(rep.message, "--max-user-buffers"), "the refusal does not name the cap: %s",
                  rep.message);
        cr_assert_eq(hard_res_read(d.pid, &held), 0);
        cr_expect_leq(held.shm_maps, base.shm_maps + 200, "the daemon maps %d client memfds (%d before)",
                      held.shm_maps, base.shm_maps);
        cr_expect_eq(stats_number(mon, "mappings"), before_all + 200);

        /* Another user is served while the hog holds its buffers. */
        by.sock = d.sock;
        bp = e2e_fork(bystander_main, &by, NULL);
        cr_assert_gt(bp, 0);
        cr_expect_eq(e2e_wait_child(bp, WAIT_MS), 0, "another user was not served");

        /* A third takes what is left of the daemon's mappings, and no more. */
        pid3 = hog_start(d.sock, 60033, &rep3, &fd3);
        cr_expect_eq(rep3.registered, 300 - 200 - (int)before_all,
                     "a second hog got %d buffers of the daemon's 300", rep3.registered);
        cr_expect_eq(rep3.code, GEMMD__V1__CODE__LIMIT);
        cr_expect(strstr(rep3.message, "--max-mappings"), "the refusal does not name the cap: %s",
                  rep3.message);
        hog_stop(pid3, fd3);

        /* What the hog held comes back with its sessions. */
        hog_stop(pid, fd);
        cr_assert_eq(hard_res_back(d.pid, &base, &after, 10000), 0);
        fprintf(stderr, "mapping hogs: daemon before %s, after %s\n", hard_res_str(&base, b1, sizeof(b1)),
                hard_res_str(&after, b2, sizeof(b2)));
        cr_expect_eq(after.shm_maps, base.shm_maps);
        for (int i = 0; i < 100 && stats_number(mon, "mappings") != before_all; i++)
                usleep(20000);
        cr_expect_eq(stats_number(mon, "mappings"), before_all);
        pid = hog_start(d.sock, 60031, &rep, &fd);
        cr_expect_eq(rep.registered, 200, "after it left, the user got %d buffers", rep.registered);
        hog_stop(pid, fd);
        gemmd_disconnect(mon);
        STOP(&d);
}

/* ---- memory: inline results never read ------------------------------------- */

#define AMP_N 2048 /* C is AMP_N x AMP_N f32: 16 MiB, inline, sent without data */
#define AMP_SESSIONS 4
#define AMP_FIRST 96 /* submits of the first session */
#define AMP_MORE 8   /* of each of the others */
#define MIB (1ull << 20)

/* The daemon's VmHWM (its peak resident set), in kB, or -1. */
static long peak_kb(pid_t pid)
{
        char path[64], *text, *p;
        long kb = -1;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        text = e2e_read_file(path, NULL);
        if (text && (p = strstr(text, "VmHWM:")))
                kb = strtol(p + 6, NULL, 10);
        free(text);
        return kb;
}

/* Submits the daemon refused with BUSY so far (its JSON stats), or -1. */
static long long busy_count(gemmd_client *c)
{
        char *json = NULL;
        long long v = -1;

        if (gemmd_stats(c, 1, &json) == 0) {
                const char *rej = strstr(json, "\"rejections\":{");

                v = !rej ? -1 : strstr(rej, "\"busy\":") && strstr(rej, "\"busy\":") < strchr(rej, '}')
                                    ? hard_json_number(rej, "busy")
                                    : 0;
        }
        free(json);
        return v;
}

/* The first Error of r's frames, its message copied to msg. Returns its
 * code, or -1 when none came. */
static int first_error(struct hard_raw *r, char *msg, size_t len)
{
        for (int i = 0; i < 64; i++) {
                Gemmd__V1__Envelope *e = hard_raw_recv(r, WAIT_MS);

                if (!e)
                        return -1;
                if (e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR) {
                        snprintf(msg, len, "%s", e->error->message);
                        return e->error->code;
                }
        }
        return -1;
}

/* The amplification of a submit of 51 bytes into a reply of 16 MiB: one
 * session sends 96 of them and reads nothing, three more of the same user
 * 8 each. With the default limits the daemon grew by 1.5 GB for the first
 * session alone, whatever --max-output-bytes said: the results were
 * allocated at admission and packed into replies that were never read.
 * Now the session's and the user's byte budgets refuse what does not fit,
 * with BUSY, and the daemon's peak memory stays under the bound gemmd(8)
 * gives for the limits in force (MEMORY):
 *   sessions x (read buffer + frame body + decode arena + unread replies +
 *   1 KiB per op in flight + ring) + min(sessions x session budget, user
 *   budget), and with --device-process the group slots' copies. */
Test(attack_budget, inline_results_never_read_meet_the_byte_budgets_and_memory_stays_bounded)
{
        const uint64_t frame = 20 * MIB, out = MIB, session_budget = 64 * MIB, user_budget = 128 * MIB;
        const uint64_t inflight = 4096, ops_per_submit = 4096, slots = 3;
        struct e2e_daemon d;
        struct hard_raw r[AMP_SESSIONS];
        uint64_t buf[AMP_SESSIONS], per_session, inline_part, bound;
        long hwm0, hwm1;
        gemmd_client *mon;
        char msg[256];
        int sent = 0;

        START(&d, "--threads", "2", "--max-output-bytes", "1048576", "--max-frame-bytes", "20971520",
              "--max-session-inline-bytes", "67108864", "--max-user-inline-bytes", "134217728", NULL);
        mon = e2e_connect(&d);
        cr_assert_not_null(mon);
        for (int i = 0; i < AMP_SESSIONS; i++) {
                cr_assert_eq(hard_raw_open(&r[i], d.sock), 0);
                cr_assert_eq(hard_raw_hello(&r[i]), 0);
                buf[i] = (uint64_t)hard_raw_register(&r[i], 1, 2 * AMP_N * 4, 2 * AMP_N * 4);
                cr_assert_gt((int64_t)buf[i], 0);
        }
        cr_assert_eq(e2e_round_trip(mon), 0);
        hwm0 = peak_kb(d.pid);
        cr_assert_gt(hwm0, 0);

        /* The first session alone, then the others: with several event
         * loops, sessions are read in no given order. */
        for (int j = 0; j < AMP_FIRST; j++, sent++)
                cr_assert_eq(hard_raw_amplify(&r[0], (uint64_t)j + 2, buf[0], AMP_N), 0);
        for (int i = 0; i < 1000 && busy_count(mon) < AMP_FIRST - 2; i++)
                usleep(20000);
        cr_expect_eq(busy_count(mon), AMP_FIRST - 2, "the first session's refusals");
        for (int i = 1; i < AMP_SESSIONS; i++)
                for (int j = 0; j < AMP_MORE; j++, sent++)
                        cr_assert_eq(hard_raw_amplify(&r[i], (uint64_t)j + 2, buf[i], AMP_N), 0);
        /* Everything admitted runs; its replies stay unread. */
        for (int i = 0; i < 1000 && hard_device_number(mon, "ops") < 4; i++)
                usleep(20000);
        cr_assert_eq(e2e_round_trip(mon), 0);
        usleep(300000);
        hwm1 = peak_kb(d.pid);
        cr_expect_eq(hard_device_number(mon, "ops"), 4,
                     "%lld of %d submits of 32 MiB each ran within budgets of 64 and 128 MiB",
                     hard_device_number(mon, "ops"), sent);
        for (int i = 0; i < 1000 && busy_count(mon) < sent - 4; i++)
                usleep(20000);
        cr_expect_eq(busy_count(mon), sent - 4, "%lld of %d submits were refused", busy_count(mon), sent);

        /* The bound of gemmd(8)'s MEMORY for these limits: the monitor's
         * session and the attacker's, one user's inline budget, and with a
         * device process its group slots (max-groups-inflight + 1 on the
         * CPU backend), each with at most the inline bytes admitted. */
        per_session = 64 * 1024 + frame + (2 * frame + 512 * ops_per_submit) + out + 1024 * inflight +
                      RING_FILE_BYTES(GEMMD_RING_VERSION);
        inline_part = (AMP_SESSIONS + 1) * session_budget < user_budget ? (AMP_SESSIONS + 1) * session_budget
                                                                        : user_budget;
        bound = (AMP_SESSIONS + 1) * per_session + inline_part;
        if (e2e_devproc())
                bound += slots * inline_part;
        fprintf(stderr, "%d submits of 16 MiB inline results never read: daemon peak %ld kB -> %ld kB, "
                        "bound %llu kB\n", sent, hwm0, hwm1, (unsigned long long)(bound >> 10));
        cr_expect_leq((uint64_t)(hwm1 - hwm0), bound >> 10, "the daemon's peak grew by %ld kB, over %llu kB",
                      hwm1 - hwm0, (unsigned long long)(bound >> 10));

        /* The refusals say which budget. The first session filled its own;
         * of the others, which took the user's last 64 MiB depends on the
         * order they were read in, but a session that got one submit or
         * none in met the user's budget first. */
        cr_expect_eq(first_error(&r[0], msg, sizeof(msg)), GEMMD__V1__CODE__BUSY);
        cr_expect(strstr(msg, "--max-session-inline-bytes"), "session refusal: %s", msg);
        {
                int user_refused = 0;

                for (int i = 1; i < AMP_SESSIONS; i++) {
                        cr_expect_eq(first_error(&r[i], msg, sizeof(msg)), GEMMD__V1__CODE__BUSY);
                        user_refused += strstr(msg, "--max-user-inline-bytes") != NULL;
                }
                cr_expect_geq(user_refused, AMP_SESSIONS - 2, "sessions refused for the user's budget: %d",
                              user_refused);
        }

        /* Once the attacker leaves, what it held is free: the budgets serve
         * the user's next client. */
        for (int i = 0; i < AMP_SESSIONS; i++)
                hard_raw_close(&r[i]);
        {
                long long got;
                uint64_t seed = 11;

                cr_assert_eq(hard_wait_sessions(mon, 1, WAIT_MS, &got), 0);
                e2e_assert_random_op(mon, &seed, 48);
        }
        gemmd_disconnect(mon);
        STOP(&d);
}

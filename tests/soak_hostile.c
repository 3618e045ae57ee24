/*
 * soak_hostile.c - the hostile user of `soak --hostile`. Each process
 * speaks the protocol by hand (tests/hard_util.h) and runs one attack
 * after another until it is killed: every attack here once crashed,
 * hung or bloated the daemon, or would have (issue #27's list), and the
 * soak runs them together, for a while, beside an honest user.
 */
#include "tests/soak_hostile.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "proto/ring.h"
#include "tests/hard_util.h"

/* Small caps, so that the bounds the man page gives for them (MEMORY)
 * are tight enough to mean something on a test machine. */
const char *const hostile_flags[] = {
        "--max-sessions", "48",
        "--max-user-sessions", "16",
        "--max-inline-bytes", "4194304",
        "--max-frame-bytes", "5242880",
        "--max-ops-per-submit", "256",
        "--max-buffers", "64",
        "--max-user-buffers", "256",
        "--max-inflight-ops", "128",
        "--max-user-inflight-ops", "1024",
        "--max-output-bytes", "1048576",
        "--max-session-inline-bytes", "33554432",
        "--max-user-inline-bytes", "67108864",
        "--hello-timeout-ms", "2000",
        "--frame-timeout-ms", "2000",
        NULL,
};

/* The same limits as numbers, for the bounds. */
#define SESSIONS 48
#define USER_SESSIONS 16
#define INLINE_BYTES (4L << 20)
#define FRAME_BYTES (5L << 20)
#define OPS_PER_SUBMIT 256L
#define USER_BUFFERS 256
#define INFLIGHT_OPS 128L
#define OUTPUT_BYTES (1L << 20)
#define SESSION_INLINE (32L << 20)
#define USER_INLINE (64L << 20)
#define SESSION_FDS 8 /* SESSION_MAX_FDS: descriptors a session may hold unread */

void hostile_bounds(int users, int slot_copies, long base_fds, long base_rss_kb,
                    struct hostile_bounds *b)
{
        /* gemmd(8), MEMORY: what one session may make the daemon hold. */
        const long f = (64L << 10) + 3 * FRAME_BYTES + 512 * OPS_PER_SUBMIT + OUTPUT_BYTES +
                       (1L << 10) * INFLIGHT_OPS + (1L << 20);
        const long per_user_inline = USER_SESSIONS * SESSION_INLINE < USER_INLINE
                                             ? USER_SESSIONS * SESSION_INLINE
                                             : USER_INLINE;

        /* Each session: its socket and the descriptors it may hold unread;
         * each buffer (with a device process) one more. */
        b->fds = base_fds + (long)SESSIONS * (1 + SESSION_FDS) + (long)users * USER_BUFFERS;
        /* Each buffer or ring is one mapping, capped per user. */
        b->shm_maps = (long)users * USER_BUFFERS;
        /* A group slot's copy of the inline operands of the largest group
         * it carried: at most what was admitted at once. */
        b->kept_kb = (long)slot_copies * users * per_user_inline / 1024;
        b->rss_kb = base_rss_kb + ((long)SESSIONS * f + (long)users * per_user_inline) / 1024 +
                    b->kept_kb;
}

/* ---- one attack each ------------------------------------------------------ */

/* Opens a session and says Hello, with short timeouts: a hostile client
 * never waits long on the daemon. Returns 0, or -1 (refused, or full). */
static int open_session(struct hard_raw *r, const char *sock)
{
        struct timeval tv = {2, 0};

        if (hard_raw_open(r, sock))
                return -1;
        setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(r->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (hard_raw_hello(r)) {
                hard_raw_close(r);
                return -1;
        }
        return 0;
}

static void spin(uint64_t *seed, unsigned span)
{
        volatile unsigned sink = 0;
        unsigned n = (unsigned)(e2e_rand(seed) % span);

        for (unsigned i = 0; i < n; i++)
                sink += i;
}

/* Sends fd as a registration (a buffer, or with ring set a ring), then
 * truncates it to nothing and seals it, hoping the daemon looked at the
 * size before and the seals after. */
static void race_one(struct hard_raw *r, uint64_t rid, int ring, uint64_t *seed)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        Gemmd__V1__RingAttach ra = GEMMD__V1__RING_ATTACH__INIT;
        uint64_t bytes = ring ? RING_FILE_BYTES(GEMMD_RING_VERSION) : 65536;
        int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0)
                goto out;
        if (ring) {
                ra.version = GEMMD_RING_VERSION;
                ra.bytes = bytes;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_RING_ATTACH;
                env.ring_attach = &ra;
        } else {
                reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
                reg.bytes = bytes;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
                env.buffer_register = &reg;
        }
        if (hard_raw_send(r, rid, &env, &fd, 1, 0) == 0) {
                spin(seed, 40000);
                (void)!ftruncate(fd, 0);
                (void)!fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
                hard_raw_recv(r, 2000);
        }
out:
        if (fd >= 0)
                close(fd);
}

static void attack_race(const char *sock, uint64_t *seed)
{
        struct hard_raw r;

        if (open_session(&r, sock))
                return;
        for (uint64_t i = 0; i < 50; i++)
                race_one(&r, 10 + i, 0, seed);
        hard_raw_close(&r);
        for (int i = 0; i < 10; i++) {
                if (open_session(&r, sock))
                        return;
                race_one(&r, 10, 1, seed);
                hard_raw_close(&r);
        }
}

/* Submits of some 50 bytes whose inline C of 4 MiB (the inline limit)
 * comes with no data, A and B in a registered buffer, and replies never
 * read. */
static void attack_amplify(const char *sock)
{
        struct hard_raw r;
        int64_t buf;

        if (open_session(&r, sock))
                return;
        buf = hard_raw_register(&r, 2, 65536, 65536);
        for (uint64_t i = 0; buf > 0 && i < 96; i++)
                if (hard_raw_amplify(&r, 100 + i, (uint64_t)buf, 1024))
                        break;
        usleep(1500000);
        hard_raw_close(&r);
}

/* Registers small buffers over several sessions until refused, and holds
 * them a while. */
static void attack_buffers(const char *sock)
{
        struct hard_raw r[8];
        int n = 0;

        for (; n < 8; n++) {
                if (open_session(&r[n], sock))
                        break;
                for (uint64_t i = 0; i < 80; i++)
                        if (hard_raw_register(&r[n], 10 + i, 4096, 4096) <= 0)
                                break;
        }
        usleep(1000000);
        while (n > 0)
                hard_raw_close(&r[--n]);
}

/* Sessions that start a frame, pass descriptors with it, and say no more. */
static void attack_partial(const char *sock)
{
        static const uint8_t start[2] = {0x40, 0x00};
        struct hard_raw r[8];
        int n = 0;

        for (; n < 8; n++) {
                int fds[SESSION_FDS];

                if (open_session(&r[n], sock))
                        break;
                for (int i = 0; i < SESSION_FDS; i++)
                        fds[i] = hard_memfd(4096);
                hard_raw_write(&r[n], start, sizeof(start), fds, SESSION_FDS);
                for (int i = 0; i < SESSION_FDS; i++)
                        if (fds[i] >= 0)
                                close(fds[i]);
        }
        usleep(3000000);
        while (n > 0)
                hard_raw_close(&r[--n]);
}

/* As many idle sessions as the daemon gives, held a while. */
static void attack_sessions(const char *sock)
{
        struct hard_raw r[64];
        int n = 0;

        while (n < 64 && open_session(&r[n], sock) == 0)
                n++;
        usleep(1000000);
        while (n > 0)
                hard_raw_close(&r[--n]);
}

/* Frames of random bytes, none of them read back. */
static void attack_garbage(const char *sock, uint64_t *seed)
{
        uint8_t frame[68];
        struct hard_raw r;

        if (open_session(&r, sock))
                return;
        for (int i = 0; i < 2000; i++) {
                frame[0] = 64;
                frame[1] = frame[2] = frame[3] = 0;
                for (int j = 4; j < (int)sizeof(frame); j++)
                        frame[j] = (uint8_t)e2e_rand(seed);
                if (hard_raw_write(&r, frame, sizeof(frame), NULL, 0))
                        break;
        }
        hard_raw_close(&r);
}

void hostile_main(const char *sock, int id, uint64_t seed)
{
        (void)id;
        for (;;) {
                switch (e2e_rand(&seed) % 6) {
                case 0:
                        attack_race(sock, &seed);
                        break;
                case 1:
                        attack_amplify(sock);
                        break;
                case 2:
                        attack_buffers(sock);
                        break;
                case 3:
                        attack_partial(sock);
                        break;
                case 4:
                        attack_sessions(sock);
                        break;
                default:
                        attack_garbage(sock, &seed);
                        break;
                }
        }
}

/*
 * hard_util.h - what the hardening suites (users, hostile input, faults,
 * systemd, soak) share on top of e2e_util.h: the daemon's resources as
 * /proc shows them, a connection spoken by hand (frames, descriptors), a
 * daemon on a socket path of the caller's choosing, and numbers out of the
 * JSON stats.
 *
 * Like e2e_util, nothing here calls Criterion: functions report through
 * their return value and a line on stderr.
 */
#ifndef GEMMD_HARD_UTIL_H
#define GEMMD_HARD_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gemmd.h"
#include "proto/frame.h"
#include "tests/e2e_util.h"

/* ---- the daemon's resources ------------------------------------------- */

struct hard_res {
        int fds;          /* open descriptors (/proc/PID/fd) */
        long rss_kb;      /* VmRSS */
        int shm_maps;     /* mappings of clients' memfds (/proc/PID/maps) */
};

/* Reads pid's resources. Returns 0 or -1. */
int hard_res_read(pid_t pid, struct hard_res *r);

/* Reads pid's resources once its descriptors and shared mappings have not
 * changed for 100 ms (a session leaves the daemon's count a moment before
 * its descriptor is closed), or after timeout_ms. Returns 0 or -1. */
int hard_res_settled(pid_t pid, struct hard_res *r, int timeout_ms);

/* Reads pid's resources once its descriptors and shared mappings are back
 * at base's, or after timeout_ms (a leak: the caller's comparison then
 * fails). What a killed client held is released when the device is done
 * with it: its buffer stays mapped while an op that reads it runs (on a
 * busy device process, say), which can outlast hard_res_settled's 100 ms
 * without change. Returns 0 or -1. */
int hard_res_back(pid_t pid, const struct hard_res *base, struct hard_res *r, int timeout_ms);

/* One line, e.g. "fds 12, VmRSS 5120 kB, shared mappings 0". */
const char *hard_res_str(const struct hard_res *r, char *buf, size_t len);

/* A number that follows "key": in a JSON text (the first occurrence), or -1. */
long long hard_json_number(const char *json, const char *key);
/* The same for a number with a fraction (-1.0: absent). */
double hard_json_double(const char *json, const char *key);

/* A number of the first device in the daemon's JSON stats, or -1. */
long long hard_device_number(gemmd_client *c, const char *key);

/* Polls the daemon's stats over connection c until "sessions_now" is
 * `want`, for up to timeout_ms. Returns 0, or -1 with the last value in
 * *got. */
int hard_wait_sessions(gemmd_client *c, long long want, int timeout_ms, long long *got);

/* ---- a daemon on a path of the caller's choosing ------------------------ */

/* Starts build/gemmd --socket sock --backend cpu <flags...> with its output
 * appended to log, and waits up to 10 s until the socket accepts. The
 * process dies with the caller. Returns its pid, or -1 after printing the
 * log. Stop it with kill() and e2e_wait_child(). */
pid_t hard_spawn_daemon(const char *sock, const char *log, ...) __attribute__((sentinel));

/* ---- a connection spoken by hand ---------------------------------------- */

struct hard_raw {
        int fd;
        struct frame_arena arena;
        uint8_t *body;
        int eof; /* the last hard_raw_recv saw end of stream */
};

/* Connects to sock (receive timeout 10 s). Returns 0 or -1. */
int hard_raw_open(struct hard_raw *r, const char *sock);
void hard_raw_close(struct hard_raw *r);

/* Writes n bytes, passing the descriptors fds[0 .. nfds) with the first
 * byte (SCM_RIGHTS). Returns 0 or -1 (the peer is gone). */
int hard_raw_write(struct hard_raw *r, const void *buf, size_t n, const int *fds, int nfds);

/* Packs env with request_id rid as one frame and writes it (with fds, as
 * hard_raw_write), all at once or one byte per write trickle_us apart. */
int hard_raw_send(struct hard_raw *r, uint64_t rid, Gemmd__V1__Envelope *env, const int *fds,
                  int nfds, int trickle_us);

/* Receives one frame within timeout_ms. Returns the envelope (valid until
 * the next call), or NULL at end of stream (r->eof set), on timeout or on
 * a frame that does not decode. */
Gemmd__V1__Envelope *hard_raw_recv(struct hard_raw *r, int timeout_ms);

/* 1 if the peer closed the connection within timeout_ms (frames still
 * arriving are read and dropped), else 0. */
int hard_raw_wait_eof(struct hard_raw *r, int timeout_ms);

/* Sends, as request rid, an n x n x 1 f32 GEMM whose A and B lie in the
 * session's buffer buf (2 n floats) and whose C is inline, its data left
 * out: some 50 bytes on the wire for n x n x 4 bytes of result, the
 * amplification the daemon's byte budgets bound. Returns as
 * hard_raw_send. */
int hard_raw_amplify(struct hard_raw *r, uint64_t rid, uint64_t buf, int64_t n);

/* Sends Hello and expects HelloReply. Returns 0 or -1. */
int hard_raw_hello(struct hard_raw *r);

/* Registers `bytes` of a new memfd of `file_bytes` bytes (filled with
 * `fill`). Returns the buffer id (> 0), or minus the wire code of the Error
 * the daemon answered, or INT64_MIN when nothing sensible came back. The
 * memfd is closed before returning. */
int64_t hard_raw_register(struct hard_raw *r, uint64_t rid, uint64_t bytes, uint64_t file_bytes);

/* Sends, as request rid, a registration of `bytes` of device memory of
 * registration kind `kind` (CUDA_IPC, or a bad value) through the IPC
 * handle whose first byte is `tag` (the rest zeros), without waiting for
 * the answer. Returns as hard_raw_send. */
int hard_raw_send_ipc(struct hard_raw *r, uint64_t rid, int kind, uint8_t tag, uint64_t bytes);

/* A memfd of `bytes` bytes, sealed against shrinking as libgemmd seals
 * them, or -1. */
/* A 2 x 2 x 2 f32 GEMM with inline operands (column-major A = 1 2 3 4,
 * B = 5 6 7 8, alpha 1, beta 0) as a Submit in *env, built in storage g
 * holds (it must outlive the send); HARD_GEMM2_C is its C. */
struct hard_gemm2 {
        Gemmd__V1__Submit sub;
        Gemmd__V1__Op op, *ops[1];
        Gemmd__V1__Operand a, b, c;
};
#define HARD_GEMM2_C {23.f, 34.f, 31.f, 46.f}
void hard_gemm2_submit(struct hard_gemm2 *g, Gemmd__V1__Envelope *env);

int hard_memfd(uint64_t bytes);

#endif

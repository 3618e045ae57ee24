/*
 * e2e_util.h - what the end-to-end suites share: a per-test fixture that
 * runs the real build/gemmd, child processes, random problems checked
 * against a double-precision reference, and tiny .npy files.
 *
 * Fixture
 * -------
 * Every test gets its own temporary directory (made by e2e_setup, the
 * Criterion .init of each e2e test, and removed by e2e_teardown, its .fini).
 * e2e_daemon_start() forks and execs build/gemmd on a socket inside that
 * directory with its stderr in a log file there, and returns once the socket
 * accepts a connection. e2e_daemon_stop() sends SIGTERM and returns 0 only
 * if gemmd exits with status 0 in time. Whenever something about a daemon
 * fails (it does not come up, it exits badly, or a test ends without
 * stopping it because an assertion aborted the test) its log is printed on
 * stderr. A daemon dies with the test process that started it
 * (PR_SET_PDEATHSIG), so a test killed by a timeout leaves nothing behind.
 *
 * Nothing here calls Criterion: functions report through their return value
 * and a line on stderr, so forked client processes and the demo client can
 * use them too. Tests turn the return values into assertions.
 */
#ifndef GEMMD_E2E_UTIL_H
#define GEMMD_E2E_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gemmd.h"

/* ---- fixture ---------------------------------------------------------- */

/* The current test's temporary directory (empty outside a test). */
extern char e2e_dir[128];

/* Criterion .init/.fini of every end-to-end test. e2e_setup aborts the test
 * process if no directory can be made; e2e_teardown kills any daemon still
 * running (printing its log) and removes the directory. */
void e2e_setup(void);
void e2e_teardown(void);

struct e2e_daemon {
        pid_t pid; /* 0 once stopped */
        char sock[PATH_MAX];
        char log[PATH_MAX];
};

/* Starts build/gemmd --socket <e2e_dir>/gemmd-N.sock --backend cpu followed
 * by the given flags (a NULL-terminated list of strings; a later --backend
 * overrides the first), and waits up to 10 s until its socket accepts a
 * connection. Returns 0, or -1 after printing why and the daemon's log. */
int e2e_daemon_start(struct e2e_daemon *d, ...) __attribute__((sentinel));
/* The same with the flags in a NULL-terminated array. */
int e2e_daemon_startv(struct e2e_daemon *d, const char *const *flags);
/* The same with build/gemmd-fi, the fault-injection build, and `name` set
 * to `value` in its environment. Returns -1 too when there is no gemmd-fi. */
int e2e_fi_daemon_startv(struct e2e_daemon *d, const char *name, const char *value,
                         const char *const *flags);

/* Whether the daemons these tests start drive their devices from device
 * processes (E2E_DEVPROC=yes). */
int e2e_devproc(void);

/* Sends SIGTERM and waits up to 20 s. Returns 0 if gemmd exited with
 * status 0; otherwise prints what happened and its log, kills it if it was
 * still running, and returns -1. */
int e2e_daemon_stop(struct e2e_daemon *d);

/* Prints the daemon's log on stderr under a header naming `why`. */
void e2e_daemon_print_log(const struct e2e_daemon *d, const char *why);

/* Tries one connection to a Unix socket path. Returns 1 if it was
 * accepted, else 0. */
int e2e_socket_accepts(const char *path);

/* Connects a client; on failure prints the reason and returns NULL. */
gemmd_client *e2e_connect(const struct e2e_daemon *d);

/* A round trip on c (a stats request): once it is answered, the daemon
 * has read, and admitted, every submit c sent before it; with several
 * event loops another session's frames may otherwise be read first.
 * Returns 0 or gemmd_stats's error. */
int e2e_round_trip(gemmd_client *c);

/* The sum of figure `key` over every device in JSON stats (a fault may
 * land on any device of several), or -1 when no device has it. */
long long e2e_devices_sum(const char *json, const char *key);

/* The daemon's JSON stats once every device has nothing queued and no
 * group in flight or waiting to be counted: a client can have its answers
 * (from the GPU's completion words) before the worker counts their group,
 * and a killed client's memory stays mapped until the group that reads it
 * is done. NULL on an error or after timeout_ms; the caller frees it. */
char *e2e_idle_stats(gemmd_client *c, int timeout_ms);

/* ---- processes -------------------------------------------------------- */

/* Path of a program in the build directory, found from this executable's
 * own path (build/tests/X or build/X), e.g. e2e_build_path("gemmctl") ->
 * ".../build/gemmctl", so tests work from any working directory. The
 * caller frees the result. */
char *e2e_build_path(const char *name);

/* Runs argv[0] (a path) with stdout and stderr in the given files (NULL:
 * /dev/null) and waits up to timeout_ms. Returns the exit status, or -1
 * (killed, signaled or timed out, after printing why). */
int e2e_run(char *const argv[], const char *out_path, const char *err_path, int timeout_ms);

/* Forks a child process that runs fn(ctx, fd) and _exits with what it
 * returns. With parent_fd, fd is one end of a socket pair whose other end
 * the parent gets in *parent_fd (closing it makes the child read end of
 * file); without, fd is -1. Returns the child's pid, or -1. */
pid_t e2e_fork(int (*fn)(void *ctx, int fd), void *ctx, int *parent_fd);

/* Waits up to timeout_ms for a child (a daemon of e2e_daemon_start too,
 * which the fixture then forgets). Returns its exit status, 128 + the
 * signal that killed it, or -1 on timeout (the child is then killed). */
int e2e_wait_child(pid_t pid, int timeout_ms);

/* Reads a whole file as a NUL-terminated string (malloc'd), or NULL. */
char *e2e_read_file(const char *path, size_t *len);

/* Number of lines in s (a last line without its newline counts). */
int e2e_count_lines(const char *s);

/* Monotonic time in microseconds. */
uint64_t e2e_now_us(void);

/* ---- numbers ---------------------------------------------------------- */

/* A small deterministic generator (splitmix64). */
uint64_t e2e_rand(uint64_t *state);
/* Uniform in [lo, hi]. */
int64_t e2e_rand_int(uint64_t *state, int64_t lo, int64_t hi);
/* Uniform in +-[0.125, 1]: never zero, so a product that was skipped shows. */
double e2e_rand_val(uint64_t *state);

/* Element i of an array of dtype dt, widened to double; and the store of v
 * rounded to the dtype (round to nearest even). */
double e2e_get(enum gemmd_dtype dt, const void *p, uint64_t i);
void e2e_set(enum gemmd_dtype dt, void *p, uint64_t i, double v);

/* Norm-wise relative error bound a dtype's result must meet. */
double e2e_tol(enum gemmd_dtype dt);

/* ---- problems --------------------------------------------------------- */

/* What a test asks for; e2e_prob_make turns it into an op with operands. */
struct e2e_spec {
        enum gemmd_op_kind kind;
        enum gemmd_dtype dtype;
        enum gemmd_trans ta, tb; /* SYR2K: ta only */
        enum gemmd_uplo uplo;
        int row_major;
        int64_t m, n, k; /* SYR2K: m is ignored */
        int64_t pad;     /* leading dimensions exceed the minimum by this */
        double alpha, beta; /* sent as they are for f64, rounded to float for the others */
};

/* A problem placed in memory: `op` is ready to submit. A, B and C live in
 * a shared buffer (e2e_prob_place) or in malloc'd memory sent inline
 * (e2e_prob_inline, where `c` receives the result). `c0` is C before the
 * op, to check elements that must stay untouched. */
struct e2e_prob {
        struct e2e_spec s;
        struct gemmd_op op;
        void *a, *b, *c, *c0;
        uint64_t abytes, bbytes, cbytes;
        int owns; /* a, b, c are malloc'd (inline) */
};

/* A bump allocator over one shared buffer of a client. */
struct e2e_arena {
        gemmd_buffer id;
        uint8_t *base;
        uint64_t size, used;
};

/* Allocates a shared buffer of `bytes` for the arena. Returns 0 or the
 * library's code. */
int e2e_arena_init(struct e2e_arena *ar, gemmd_client *c, uint64_t bytes);
/* Takes `bytes` at a 64-byte aligned offset; returns the offset, or
 * UINT64_MAX when the arena is full. */
uint64_t e2e_arena_take(struct e2e_arena *ar, uint64_t bytes);

/* Fills in the op of spec s (sizes, leading dimensions, flags) with no
 * operands, and the bytes each operand spans. */
void e2e_prob_shape(struct e2e_prob *p, const struct e2e_spec *s);

/* Shapes p, takes A, B and C from the arena and fills them with random
 * values (C: NaN where beta == 0, so a read of it shows; every element of
 * C's span outside the result, padding and the other SYR2K triangle, gets
 * a random value that must survive bit for bit). Returns 0 or -ENOSPC. */
int e2e_prob_place(struct e2e_prob *p, const struct e2e_spec *s, struct e2e_arena *ar,
                   uint64_t *seed);

/* The same with A, B and C inline (C's input sent unless beta == 0; the
 * result comes back into p->c). Returns 0 or -ENOMEM. */
int e2e_prob_inline(struct e2e_prob *p, const struct e2e_spec *s, uint64_t *seed);

/* Frees what e2e_prob_inline and e2e_prob_place allocated. */
void e2e_prob_free(struct e2e_prob *p);

/* Compares C with the long double reference computed from A, B and
 * c0: *err receives max|C - ref| / max(|alpha| |op(A)| |op(B)| + |beta| |C0|)
 * over the result, and the elements that must be untouched are compared
 * bit for bit. Returns 0 if the error is within e2e_tol and nothing else
 * changed, else -1 with the reason in why. */
int e2e_prob_check(const struct e2e_prob *p, double *err, char *why, size_t whylen);

/* Restores C to c0 (to run the same problem again). */
void e2e_prob_reset(struct e2e_prob *p);

/* Submits problems p[0 .. n) in submits of `per_submit` ops (every submit
 * before the first wait, so they can share groups), waits for them all and
 * checks every result. `res` (n entries, may be NULL) receives the per-op
 * outcomes. Returns 0, or -1 with the first failure in why. */
int e2e_run_checked(gemmd_client *c, struct e2e_prob *p, size_t n, size_t per_submit,
                    struct gemmd_result *res, char *why, size_t whylen);

/* An f32 GEMM of m x n x k in a new shared buffer of c, its operands left
 * as the zeros of a fresh buffer: an op for timing, not for checking.
 * Returns 0 and *op, or the library's code. */
int e2e_timed_op(gemmd_client *c, int64_t m, int64_t n, int64_t k, struct gemmd_op *op);

/* A random small spec: any kind, dtype (f64 too), ops, layout, sizes in
 * [1, maxdim], pad in [0, 3], alpha and beta (beta sometimes 0). */
void e2e_spec_random(struct e2e_spec *s, uint64_t *seed, int64_t maxdim);

/* One line describing a spec, e.g. "gemm f16 nt row 7x33x65 ld+2". */
const char *e2e_spec_str(const struct e2e_spec *s, char *buf, size_t len);

const char *e2e_dtype_name(enum gemmd_dtype dt);

/* ---- .npy ------------------------------------------------------------- */

/* Writes a 2-D C-order array of float64 (esz 8), float32 (4) or float16 (2). */
int e2e_npy_write(const char *path, int esz, int64_t rows, int64_t cols, const void *data);

/* Reads a 2-D C-order float64/float32/float16 array; *data is malloc'd. Returns 0
 * or -1 (the file is not such an array). */
int e2e_npy_read(const char *path, int *esz, int64_t *rows, int64_t *cols, void **data);

#endif /* GEMMD_E2E_UTIL_H */

/*
 * e2e_util.c - fixture, processes, problems and .npy files for the
 * end-to-end suites (see e2e_util.h).
 */
#include "tests/e2e_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/half.h"

#define START_TIMEOUT_MS 10000
#define STOP_TIMEOUT_MS 20000
#define MAX_DAEMONS 16
#define MAX_FLAGS 64

char e2e_dir[128];

/* Daemons started by this test and not yet stopped. Copies, not pointers
 * to the caller's struct: an aborted test's stack is gone by teardown. */
static struct e2e_daemon running[MAX_DAEMONS];
static int ndaemons_started;

uint64_t e2e_now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* ---- fixture ---------------------------------------------------------- */

static pid_t setup_pid; /* the test process, not a client forked from it */

/* A skipped test (cr_skip) exits without its .fini: remove its directory
 * on the way out anyway. */
static void remove_dir_at_exit(void)
{
        if (getpid() == setup_pid && e2e_dir[0])
                e2e_teardown();
}

void e2e_setup(void)
{
        const char *tmp = getenv("TMPDIR");

        /* A Unix socket path must fit in 108 bytes: fall back to /tmp when
         * $TMPDIR is long. */
        if (!tmp || !*tmp || strlen(tmp) > 60)
                tmp = "/tmp";
        snprintf(e2e_dir, sizeof(e2e_dir), "%s/gemmd-e2e-XXXXXX", tmp);
        if (!mkdtemp(e2e_dir)) {
                fprintf(stderr, "e2e: mkdtemp %s: %s\n", e2e_dir, strerror(errno));
                abort();
        }
        memset(running, 0, sizeof(running));
        ndaemons_started = 0;
        if (!setup_pid)
                atexit(remove_dir_at_exit);
        setup_pid = getpid();
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

void e2e_teardown(void)
{
        for (int i = 0; i < MAX_DAEMONS; i++) {
                struct e2e_daemon *d = &running[i];

                if (!d->pid)
                        continue;
                /* The test did not reach its e2e_daemon_stop: it failed. */
                kill(d->pid, SIGKILL);
                waitpid(d->pid, NULL, 0);
                e2e_daemon_print_log(d, "the test ended with gemmd still running");
                d->pid = 0;
        }
        /* E2E_KEEP=1 leaves the daemons' logs for a look after the run. */
        const char *keep = getenv("E2E_KEEP");

        if (e2e_dir[0] && keep && *keep && strcmp(keep, "0"))
                fprintf(stderr, "e2e: kept %s\n", e2e_dir);
        else if (e2e_dir[0])
                nftw(e2e_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        e2e_dir[0] = '\0';
}

void e2e_daemon_print_log(const struct e2e_daemon *d, const char *why)
{
        char *text = e2e_read_file(d->log, NULL);

        fprintf(stderr, "---- gemmd log (%s) [%s] ----\n%s%s---- end of gemmd log ----\n", why,
                d->sock, text ? text : "(no log)\n",
                text && *text && text[strlen(text) - 1] != '\n' ? "\n" : "");
        free(text);
}

static void forget(const struct e2e_daemon *d)
{
        for (int i = 0; i < MAX_DAEMONS; i++)
                if (running[i].pid == d->pid)
                        running[i].pid = 0;
}

int e2e_socket_accepts(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int ok;

        if (fd < 0 || strlen(path) >= sizeof(sa.sun_path)) {
                if (fd >= 0)
                        close(fd);
                return 0;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        return ok;
}

/* Child side of e2e_daemon_start: never returns. */
static void exec_daemon(const char *log, char **argv)
{
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        /* Dies with the test, whatever kills the test. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
                _exit(126);
        execv(argv[0], argv);
        fprintf(stderr, "e2e: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
}

int e2e_daemon_start(struct e2e_daemon *d, ...)
{
        const char *flags[MAX_FLAGS + 1];
        int n = 0;
        va_list ap;

        va_start(ap, d);
        while (n < MAX_FLAGS && (flags[n] = va_arg(ap, const char *)))
                n++;
        va_end(ap);
        flags[n] = NULL;
        return e2e_daemon_startv(d, flags);
}

int e2e_fi_daemon_startv(struct e2e_daemon *d, const char *name, const char *value,
                         const char *const *flags)
{
        char *fi = e2e_build_path("gemmd-fi");
        int rc = -1;

        if (!fi || access(fi, X_OK) != 0) {
                fprintf(stderr, "e2e: no gemmd-fi beside gemmd\n");
        } else {
                setenv("E2E_GEMMD", "gemmd-fi", 1);
                setenv(name, value, 1);
                rc = e2e_daemon_startv(d, flags);
                unsetenv("E2E_GEMMD");
                unsetenv(name);
        }
        free(fi);
        return rc;
}

int e2e_devproc(void)
{
        const char *v = getenv("E2E_DEVPROC");

        return v && !strcmp(v, "yes");
}

int e2e_daemon_startv(struct e2e_daemon *d, const char *const *flags)
{
        char *argv[MAX_FLAGS + 20]; /* the flags after at most 17 of its own */
        /* E2E_GEMMD names another daemon binary beside it (gemmd-fi). */
        const char *name = getenv("E2E_GEMMD");
        /* Flags every daemon gets from the environment: E2E_LOOPS=N serves
         * with N event loops and E2E_DEVPROC=yes from a device process
         * (make test's second pass); E2E_RESIDENT=no runs the GPU suites
         * and the soak with a launch per group, where by default an sm_90
         * GPU keeps the resident kernel (the CPU backend ignores it);
         * E2E_GROUPS=N runs N groups in flight per device,
         * E2E_READERS=N N readers of the resident kernel's posts and
         * E2E_SPIN=US has the daemon's threads poll US microseconds after
         * their last work, as on a GPU host (make test's second pass). */
        static const struct {
                const char *env, *flag;
        } env_flags[] = {{"E2E_LOOPS", "--loops"},
                         {"E2E_DEVPROC", "--device-process"},
                         {"E2E_RESIDENT", "--resident"},
                         {"E2E_GROUPS", "--max-groups-inflight"},
                         {"E2E_READERS", "--resident-readers"},
                         {"E2E_SPIN", "--spin-us"}};
        char *bin = e2e_build_path(name && *name ? name : "gemmd");
        int argc = 0, slot = -1, n = ndaemons_started++;
        uint64_t deadline;
        pid_t pid;

        memset(d, 0, sizeof(*d));
        snprintf(d->sock, sizeof(d->sock), "%s/gemmd-%d.sock", e2e_dir, n);
        snprintf(d->log, sizeof(d->log), "%s/gemmd-%d.log", e2e_dir, n);
        argv[argc++] = bin;
        argv[argc++] = "--socket";
        argv[argc++] = d->sock;
        argv[argc++] = "--backend";
        argv[argc++] = "cpu";
        for (size_t i = 0; i < sizeof(env_flags) / sizeof(env_flags[0]); i++) {
                const char *v = getenv(env_flags[i].env);

                if (v && *v) {
                        argv[argc++] = (char *)env_flags[i].flag;
                        argv[argc++] = (char *)v;
                }
        }
        for (int i = 0; flags[i] && argc < MAX_FLAGS + 19; i++)
                argv[argc++] = (char *)flags[i];
        argv[argc] = NULL;
        for (int i = 0; i < MAX_DAEMONS && slot < 0; i++)
                if (!running[i].pid)
                        slot = i;
        if (slot < 0 || !e2e_dir[0]) {
                fprintf(stderr, "e2e: no fixture directory or too many daemons\n");
                free(bin);
                return -1;
        }

        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                fprintf(stderr, "e2e: fork: %s\n", strerror(errno));
                free(bin);
                return -1;
        }
        if (pid == 0)
                exec_daemon(d->log, argv);
        free(bin);
        d->pid = pid;
        running[slot] = *d;

        deadline = e2e_now_us() + START_TIMEOUT_MS * 1000ull;
        for (;;) {
                int st;

                if (waitpid(pid, &st, WNOHANG) == pid) {
                        forget(d);
                        d->pid = 0;
                        fprintf(stderr, "e2e: gemmd exited before it was ready (status 0x%x)\n", st);
                        e2e_daemon_print_log(d, "gemmd did not start");
                        return -1;
                }
                if (e2e_socket_accepts(d->sock))
                        return 0;
                if (e2e_now_us() > deadline) {
                        fprintf(stderr, "e2e: gemmd not ready after %d ms\n", START_TIMEOUT_MS);
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        forget(d);
                        d->pid = 0;
                        e2e_daemon_print_log(d, "gemmd did not become ready");
                        return -1;
                }
                sleep_ms(5);
        }
}

int e2e_daemon_stop(struct e2e_daemon *d)
{
        int st;

        if (!d->pid)
                return -1;
        kill(d->pid, SIGTERM);
        st = e2e_wait_child(d->pid, STOP_TIMEOUT_MS);
        forget(d);
        d->pid = 0;
        if (st == 0)
                return 0;
        if (st < 0)
                fprintf(stderr, "e2e: gemmd did not exit within %d ms of SIGTERM\n",
                        STOP_TIMEOUT_MS);
        else if (st > 128)
                fprintf(stderr, "e2e: gemmd was killed by signal %d after SIGTERM\n", st - 128);
        else
                fprintf(stderr, "e2e: gemmd exited with status %d after SIGTERM\n", st);
        e2e_daemon_print_log(d, "unclean exit");
        return -1;
}

gemmd_client *e2e_connect(const struct e2e_daemon *d)
{
        gemmd_client *c = NULL;
        int rc = gemmd_connect(d->sock, &c);

        if (rc) {
                fprintf(stderr, "e2e: gemmd_connect %s: %s\n", d->sock, gemmd_strerror(rc));
                return NULL;
        }
        return c;
}

int e2e_round_trip(gemmd_client *c)
{
        char *text = NULL;
        int rc = gemmd_stats(c, 0, &text);

        free(text);
        return rc;
}

long long e2e_devices_sum(const char *json, const char *key)
{
        const char *dev = strstr(json, "\"devices\":[");
        char pat[64];
        long long sum = -1;

        snprintf(pat, sizeof(pat), "\"%s\":", key);
        for (const char *p = dev; p && (p = strstr(p, pat)); p += strlen(pat))
                sum = (sum < 0 ? 0 : sum) + strtoll(p + strlen(pat), NULL, 10);
        return sum;
}

char *e2e_idle_stats(gemmd_client *c, int timeout_ms)
{
        for (int waited = 0; waited <= timeout_ms; waited += 10) {
                char *json = NULL;

                if (gemmd_stats(c, 1, &json))
                        return NULL;
                /* Both counts from one snapshot; each a sum of counts,
                 * 0 only where every device has none. */
                if (e2e_devices_sum(json, "queued") == 0 && e2e_devices_sum(json, "inflight_groups") == 0)
                        return json;
                free(json);
                usleep(10000);
        }
        return NULL;
}

/* ---- processes -------------------------------------------------------- */

char *e2e_build_path(const char *name)
{
        char exe[PATH_MAX], *path;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        char *slash;

        if (n <= 0)
                return strdup(name);
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        *slash = '\0';
        /* Test suites live in build/tests/, the demo client in build/. */
        if (strcmp(strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe, "tests") == 0)
                *strrchr(exe, '/') = '\0';
        if (asprintf(&path, "%s/%s", exe, name) < 0)
                return NULL;
        return path;
}

pid_t e2e_fork(int (*fn)(void *ctx, int fd), void *ctx, int *parent_fd)
{
        int sv[2] = {-1, -1};
        pid_t pid;

        if (parent_fd && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -1;
        fflush(NULL);
        pid = fork();
        if (pid == 0) {
                if (parent_fd)
                        close(sv[0]);
                _exit(fn(ctx, sv[1]));
        }
        if (parent_fd) {
                close(sv[1]);
                if (pid < 0)
                        close(sv[0]);
                else
                        *parent_fd = sv[0];
        }
        return pid;
}

int e2e_wait_child(pid_t pid, int timeout_ms)
{
        uint64_t deadline = e2e_now_us() + (uint64_t)timeout_ms * 1000u;
        int st;

        for (;;) {
                pid_t r = waitpid(pid, &st, WNOHANG);

                if (r == pid)
                        break;
                if (r < 0 && errno != EINTR)
                        return -1;
                if (e2e_now_us() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        return -1;
                }
                sleep_ms(2);
        }
        /* A daemon waited for here is reaped: the fixture no longer stops it. */
        for (int i = 0; i < MAX_DAEMONS; i++)
                if (running[i].pid == pid)
                        running[i].pid = 0;
        if (WIFEXITED(st))
                return WEXITSTATUS(st);
        return 128 + WTERMSIG(st);
}

static int open_out(const char *path)
{
        return open(path ? path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
}

int e2e_run(char *const argv[], const char *out_path, const char *err_path, int timeout_ms)
{
        pid_t pid;
        int st;

        fflush(NULL);
        pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                int out = open_out(out_path), err = open_out(err_path);

                if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 ||
                    dup2(err, STDERR_FILENO) < 0)
                        _exit(126);
                execv(argv[0], argv);
                _exit(127);
        }
        st = e2e_wait_child(pid, timeout_ms);
        if (st < 0 || st >= 128) {
                fprintf(stderr, "e2e: %s %s %s\n", argv[0], argv[1] ? argv[1] : "",
                        st < 0 ? "timed out" : "was killed by a signal");
                return -1;
        }
        return st;
}

char *e2e_read_file(const char *path, size_t *len)
{
        FILE *f = fopen(path, "rb");
        char *buf = NULL;
        size_t n = 0, cap = 0, got;

        if (!f)
                return NULL;
        do {
                if (cap - n < 4096) {
                        char *p = realloc(buf, cap += 65536);

                        if (!p) {
                                free(buf);
                                fclose(f);
                                return NULL;
                        }
                        buf = p;
                }
                got = fread(buf + n, 1, cap - n - 1, f);
                n += got;
        } while (got > 0);
        fclose(f);
        buf[n] = '\0';
        if (len)
                *len = n;
        return buf;
}

int e2e_count_lines(const char *s)
{
        int n = 0;

        for (; s && *s; s++)
                if (*s == '\n' || s[1] == '\0')
                        n++;
        return n;
}

/* ---- numbers ---------------------------------------------------------- */

uint64_t e2e_rand(uint64_t *state)
{
        uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

int64_t e2e_rand_int(uint64_t *state, int64_t lo, int64_t hi)
{
        return lo + (int64_t)(e2e_rand(state) % (uint64_t)(hi - lo + 1));
}

double e2e_rand_val(uint64_t *state)
{
        uint64_t r = e2e_rand(state);
        double v = 0.125 + 0.875 * (double)(r >> 11) / (double)(1ull << 53);

        return (r & 1) ? -v : v;
}

double e2e_get(enum gemmd_dtype dt, const void *p, uint64_t i)
{
        switch (dt) {
        case GEMMD_F32:
                return ((const float *)p)[i];
        case GEMMD_F16:
                return gemmd_f16_to_f32(((const uint16_t *)p)[i]);
        case GEMMD_BF16:
                return gemmd_bf16_to_f32(((const uint16_t *)p)[i]);
        case GEMMD_F64:
                return ((const double *)p)[i];
        }
        return NAN;
}

void e2e_set(enum gemmd_dtype dt, void *p, uint64_t i, double v)
{
        switch (dt) {
        case GEMMD_F32:
                ((float *)p)[i] = (float)v;
                break;
        case GEMMD_F16:
                ((uint16_t *)p)[i] = gemmd_f32_to_f16((float)v);
                break;
        case GEMMD_BF16:
                ((uint16_t *)p)[i] = gemmd_f32_to_bf16((float)v);
                break;
        case GEMMD_F64:
                ((double *)p)[i] = v;
                break;
        }
}

double e2e_tol(enum gemmd_dtype dt)
{
        switch (dt) {
        case GEMMD_F32:
                return 1e-5;
        case GEMMD_F16:
                return 2e-3;
        case GEMMD_BF16:
                return 1.5e-2;
        case GEMMD_F64:
                /* f32's bound in f64 ulps: about 900 of 2^-53. */
                return 1e-13;
        }
        return 0;
}

const char *e2e_dtype_name(enum gemmd_dtype dt)
{
        static const char *names[] = {"f32", "f16", "bf16", "f64"};

        return (unsigned)dt < 4 ? names[dt] : "?";
}

/* ---- problems --------------------------------------------------------- */

/* How an operand is stored: rows x cols of the matrix as stored (before
 * op), its leading dimension and layout. */
struct layout {
        int64_t rows, cols, ld;
        int row_major;
};

static uint64_t lay_index(const struct layout *l, int64_t i, int64_t j)
{
        return l->row_major ? (uint64_t)(i * l->ld + j) : (uint64_t)(i + j * l->ld);
}

static uint64_t lay_span(const struct layout *l)
{
        return l->row_major ? (uint64_t)((l->rows - 1) * l->ld + l->cols)
                            : (uint64_t)((l->cols - 1) * l->ld + l->rows);
}

/* The stored shapes of A, B and C of spec s (minimal leading dimension +
 * pad). */
static void layouts(const struct e2e_spec *s, struct layout *a, struct layout *b,
                    struct layout *c)
{
        int syr2k = s->kind == GEMMD_SYR2K;
        int64_t m = syr2k ? s->n : s->m, n = s->n, k = s->k;

        if (syr2k) {
                a->rows = b->rows = s->ta ? k : n;
                a->cols = b->cols = s->ta ? n : k;
        } else {
                a->rows = s->ta ? k : m;
                a->cols = s->ta ? m : k;
                b->rows = s->tb ? n : k;
                b->cols = s->tb ? k : n;
        }
        c->rows = m;
        c->cols = n;
        a->row_major = b->row_major = c->row_major = s->row_major;
        a->ld = (s->row_major ? a->cols : a->rows) + s->pad;
        b->ld = (s->row_major ? b->cols : b->rows) + s->pad;
        c->ld = (s->row_major ? c->cols : c->rows) + s->pad;
}

/* Whether C(i, j) is part of the result (SYR2K: the stored triangle). */
static int in_result(const struct e2e_spec *s, int64_t i, int64_t j)
{
        if (s->kind != GEMMD_SYR2K)
                return 1;
        return s->uplo == GEMMD_LOWER ? i >= j : i <= j;
}

void e2e_prob_shape(struct e2e_prob *p, const struct e2e_spec *s)
{
        struct layout a, b, c;
        size_t esz = gemmd_dtype_size(s->dtype);

        memset(p, 0, sizeof(*p));
        p->s = *s;
        layouts(s, &a, &b, &c);
        p->op.kind = s->kind;
        p->op.dtype = s->dtype;
        p->op.trans_a = s->ta;
        p->op.trans_b = s->kind == GEMMD_SYR2K ? GEMMD_OP_N : s->tb;
        p->op.uplo = s->uplo;
        p->op.flags = s->row_major ? GEMMD_OPF_ROW_MAJOR : 0;
        p->op.m = s->kind == GEMMD_SYR2K ? s->n : s->m;
        p->op.n = s->n;
        p->op.k = s->k;
        p->op.lda = a.ld;
        p->op.ldb = b.ld;
        p->op.ldc = c.ld;
        p->op.alpha = s->alpha;
        p->op.beta = s->beta;
        p->abytes = lay_span(&a) * esz;
        p->bbytes = lay_span(&b) * esz;
        p->cbytes = lay_span(&c) * esz;
}

/* Fills A, B, C (and c0) with the values e2e_prob_place describes. */
static void fill(struct e2e_prob *p, uint64_t *seed)
{
        const struct e2e_spec *s = &p->s;
        size_t esz = gemmd_dtype_size(s->dtype);
        struct layout a, b, c;
        uint64_t span;

        layouts(s, &a, &b, &c);
        for (uint64_t i = 0; i < p->abytes / esz; i++)
                e2e_set(s->dtype, p->a, i, e2e_rand_val(seed));
        for (uint64_t i = 0; i < p->bbytes / esz; i++)
                e2e_set(s->dtype, p->b, i, e2e_rand_val(seed));
        span = p->cbytes / esz;
        for (uint64_t e = 0; e < span; e++)
                e2e_set(s->dtype, p->c, e, e2e_rand_val(seed));
        if (s->beta == 0.0)
                for (int64_t i = 0; i < c.rows; i++)
                        for (int64_t j = 0; j < c.cols; j++)
                                if (in_result(s, i, j))
                                        e2e_set(s->dtype, p->c, lay_index(&c, i, j), NAN);
        memcpy(p->c0, p->c, p->cbytes);
}

int e2e_arena_init(struct e2e_arena *ar, gemmd_client *c, uint64_t bytes)
{
        void *ptr = NULL;
        int rc;

        memset(ar, 0, sizeof(*ar));
        rc = gemmd_buffer_alloc(c, bytes, &ar->id, &ptr);
        if (rc)
                return rc;
        ar->base = ptr;
        ar->size = bytes;
        return 0;
}

uint64_t e2e_arena_take(struct e2e_arena *ar, uint64_t bytes)
{
        uint64_t off = (ar->used + 63) & ~(uint64_t)63;

        if (off > ar->size || bytes > ar->size - off)
                return UINT64_MAX;
        ar->used = off + bytes;
        return off;
}

int e2e_prob_place(struct e2e_prob *p, const struct e2e_spec *s, struct e2e_arena *ar,
                   uint64_t *seed)
{
        uint64_t oa, ob, oc;

        e2e_prob_shape(p, s);
        oa = e2e_arena_take(ar, p->abytes);
        ob = e2e_arena_take(ar, p->bbytes);
        oc = e2e_arena_take(ar, p->cbytes);
        p->c0 = malloc(p->cbytes);
        if (oa == UINT64_MAX || ob == UINT64_MAX || oc == UINT64_MAX || !p->c0) {
                free(p->c0);
                p->c0 = NULL;
                return -ENOSPC;
        }
        p->a = ar->base + oa;
        p->b = ar->base + ob;
        p->c = ar->base + oc;
        p->op.a = (struct gemmd_operand){.buffer = ar->id, .offset = oa};
        p->op.b = (struct gemmd_operand){.buffer = ar->id, .offset = ob};
        p->op.c = (struct gemmd_operand){.buffer = ar->id, .offset = oc};
        fill(p, seed);
        return 0;
}

int e2e_prob_inline(struct e2e_prob *p, const struct e2e_spec *s, uint64_t *seed)
{
        e2e_prob_shape(p, s);
        p->owns = 1;
        p->a = malloc(p->abytes);
        p->b = malloc(p->bbytes);
        p->c = malloc(p->cbytes);
        p->c0 = malloc(p->cbytes);
        if (!p->a || !p->b || !p->c || !p->c0) {
                e2e_prob_free(p);
                return -ENOMEM;
        }
        fill(p, seed);
        /* The result lands in c: poison it (all-ones is NaN in every dtype). */
        memset(p->c, 0xff, p->cbytes);
        p->op.a = (struct gemmd_operand){.data = p->a, .bytes = p->abytes};
        p->op.b = (struct gemmd_operand){.data = p->b, .bytes = p->bbytes};
        p->op.c = (struct gemmd_operand){.data = s->beta != 0.0 ? p->c0 : NULL,
                                         .out = p->c,
                                         .bytes = p->cbytes};
        return 0;
}

void e2e_prob_free(struct e2e_prob *p)
{
        if (p->owns) {
                free(p->a);
                free(p->b);
                free(p->c);
        }
        free(p->c0);
        p->a = p->b = p->c = p->c0 = NULL;
}

void e2e_prob_reset(struct e2e_prob *p)
{
        if (p->owns)
                memset(p->c, 0xff, p->cbytes);
        else
                memcpy(p->c, p->c0, p->cbytes);
}

/* op(X)(i, p) of a stored matrix: X(i, p), or X(p, i) when transposed. */
static double opx(const struct e2e_prob *p, const void *x, const struct layout *l, int trans,
                  int64_t i, int64_t q)
{
        return e2e_get(p->s.dtype, x, trans ? lay_index(l, q, i) : lay_index(l, i, q));
}

/* Reference value of C(i, j), summed in long double (a reference for f64
 * too), and the scale its error is judged against: |alpha| sum |terms| +
 * |beta| |c0|. alpha and beta are what the op carries: as they are for
 * f64, rounded to float for the other dtypes. */
static double reference(const struct e2e_prob *p, const struct layout *la,
                        const struct layout *lb, const struct layout *lc, int64_t i, int64_t j,
                        double *scale)
{
        const struct e2e_spec *s = &p->s;
        int f64 = s->dtype == GEMMD_F64;
        long double alpha = f64 ? s->alpha : (float)s->alpha, beta = f64 ? s->beta : (float)s->beta;
        long double sum = 0, abs_sum = 0, c0, v;

        for (int64_t q = 0; q < s->k; q++) {
                long double t;

                if (s->kind == GEMMD_SYR2K) {
                        long double t1 = (long double)opx(p, p->a, la, s->ta, i, q) *
                                         opx(p, p->b, lb, s->ta, j, q);
                        long double t2 = (long double)opx(p, p->b, lb, s->ta, i, q) *
                                         opx(p, p->a, la, s->ta, j, q);

                        sum += t1 + t2;
                        abs_sum += fabsl(t1) + fabsl(t2);
                        continue;
                }
                t = (long double)opx(p, p->a, la, s->ta, i, q) * opx(p, p->b, lb, !s->tb, j, q);
                sum += t;
                abs_sum += fabsl(t);
        }
        v = alpha * sum;
        *scale = (double)(fabsl(alpha) * abs_sum);
        if (beta != 0) {
                c0 = e2e_get(s->dtype, p->c0, lay_index(lc, i, j));
                v += beta * c0;
                *scale += (double)fabsl(beta * c0);
        }
        return (double)v;
}

int e2e_prob_check(const struct e2e_prob *p, double *err, char *why, size_t whylen)
{
        const struct e2e_spec *s = &p->s;
        size_t esz = gemmd_dtype_size(s->dtype);
        struct layout la, lb, lc;
        double max_diff = 0, max_scale = 0, e;
        int64_t bad_i = -1, bad_j = -1;
        int rest_known = !(p->owns && s->beta == 0.0);
        char desc[96];

        layouts(s, &la, &lb, &lc);
        e2e_spec_str(s, desc, sizeof(desc));
        for (int64_t i = 0; i < lc.rows; i++) {
                for (int64_t j = 0; j < lc.cols; j++) {
                        uint64_t at = lay_index(&lc, i, j);
                        double scale, ref, got, diff;

                        if (!in_result(s, i, j)) {
                                if (rest_known &&
                                    memcmp((char *)p->c + at * esz, (char *)p->c0 + at * esz, esz)) {
                                        snprintf(why, whylen,
                                                 "%s: C(%lld,%lld) outside the triangle changed",
                                                 desc, (long long)i, (long long)j);
                                        *err = INFINITY;
                                        return -1;
                                }
                                continue;
                        }
                        ref = reference(p, &la, &lb, &lc, i, j, &scale);
                        got = e2e_get(s->dtype, p->c, at);
                        diff = fabs(got - ref);
                        if (isnan(diff))
                                diff = INFINITY;
                        if (diff > max_diff) {
                                max_diff = diff;
                                bad_i = i;
                                bad_j = j;
                        }
                        if (scale > max_scale)
                                max_scale = scale;
                }
        }
        /* Padding between columns (or rows) must be untouched too. */
        for (uint64_t at = 0; rest_known && at < p->cbytes / esz; at++) {
                int64_t i = lc.row_major ? (int64_t)(at / lc.ld) : (int64_t)(at % lc.ld);
                int64_t j = lc.row_major ? (int64_t)(at % lc.ld) : (int64_t)(at / lc.ld);

                if ((i >= lc.rows || j >= lc.cols) &&
                    memcmp((char *)p->c + at * esz, (char *)p->c0 + at * esz, esz)) {
                        snprintf(why, whylen, "%s: padding element %llu of C changed", desc,
                                 (unsigned long long)at);
                        *err = INFINITY;
                        return -1;
                }
        }
        e = max_scale > 0 ? max_diff / max_scale : max_diff;
        *err = e;
        if (e <= e2e_tol(s->dtype))
                return 0;
        snprintf(why, whylen, "%s: relative error %.3g > %.3g (worst at C(%lld,%lld))", desc, e,
                 e2e_tol(s->dtype), (long long)bad_i, (long long)bad_j);
        return -1;
}

int e2e_run_checked(gemmd_client *c, struct e2e_prob *p, size_t n, size_t per_submit,
                    struct gemmd_result *res, char *why, size_t whylen)
{
        size_t nsub = (n + per_submit - 1) / per_submit, i;
        gemmd_ticket *t = calloc(nsub ? nsub : 1, sizeof(*t));
        struct gemmd_result *r = calloc(per_submit, sizeof(*r));
        struct gemmd_op *ops = calloc(per_submit, sizeof(*ops));
        int rc = -1;
        double err;

        if (!t || !r || !ops) {
                snprintf(why, whylen, "out of memory");
                goto out;
        }
        for (i = 0; i < nsub; i++) {
                size_t first = i * per_submit, cnt = n - first < per_submit ? n - first : per_submit;
                int sr;

                for (size_t j = 0; j < cnt; j++)
                        ops[j] = p[first + j].op;
                sr = gemmd_submit(c, ops, cnt, GEMMD_PRIO_NORMAL, &t[i]);
                if (sr) {
                        snprintf(why, whylen, "gemmd_submit: %s", gemmd_strerror(sr));
                        goto out;
                }
        }
        for (i = 0; i < nsub; i++) {
                size_t first = i * per_submit, cnt = n - first < per_submit ? n - first : per_submit;
                int wr = gemmd_wait(c, t[i], 60000, r, cnt);

                if (wr) {
                        snprintf(why, whylen, "gemmd_wait: %s", gemmd_strerror(wr));
                        goto out;
                }
                for (size_t j = 0; j < cnt; j++) {
                        if (res)
                                res[first + j] = r[j];
                        if (e2e_prob_check(&p[first + j], &err, why, whylen))
                                goto out;
                }
        }
        rc = 0;
out:
        free(ops);
        free(r);
        free(t);
        return rc;
}

int e2e_timed_op(gemmd_client *c, int64_t m, int64_t n, int64_t k, struct gemmd_op *op)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = m, .n = n, .k = k,
                             .alpha = 1.0f, .beta = 0.0f};
        struct e2e_prob p;
        gemmd_buffer id;
        void *ptr;
        int rc;

        e2e_prob_shape(&p, &s);
        rc = gemmd_buffer_alloc(c, p.abytes + p.bbytes + p.cbytes, &id, &ptr);
        if (rc)
                return rc;
        p.op.a = (struct gemmd_operand){.buffer = id, .offset = 0};
        p.op.b = (struct gemmd_operand){.buffer = id, .offset = p.abytes};
        p.op.c = (struct gemmd_operand){.buffer = id, .offset = p.abytes + p.bbytes};
        *op = p.op;
        return 0;
}

void e2e_spec_random(struct e2e_spec *s, uint64_t *seed, int64_t maxdim)
{
        /* 1/3 and 0.1 have no float: f64 ops must use them as doubles. */
        static const double alphas[] = {1.0, -0.5, 1.25, 2.0, 1.0 / 3};
        static const double betas[] = {0.0, 1.0, -0.75, 0.5, 0.1};

        memset(s, 0, sizeof(*s));
        s->kind = e2e_rand(seed) % 3 == 0 ? GEMMD_SYR2K : GEMMD_GEMM;
        s->dtype = (enum gemmd_dtype)(e2e_rand(seed) % 4);
        s->ta = (enum gemmd_trans)(e2e_rand(seed) & 1);
        s->tb = (enum gemmd_trans)(e2e_rand(seed) & 1);
        s->uplo = (enum gemmd_uplo)(e2e_rand(seed) & 1);
        s->row_major = (int)(e2e_rand(seed) & 1);
        s->m = e2e_rand_int(seed, 1, maxdim);
        s->n = e2e_rand_int(seed, 1, maxdim);
        s->k = e2e_rand_int(seed, 1, maxdim);
        s->pad = e2e_rand_int(seed, 0, 3);
        s->alpha = alphas[e2e_rand(seed) % 5];
        s->beta = betas[e2e_rand(seed) % 5];
}

const char *e2e_spec_str(const struct e2e_spec *s, char *buf, size_t len)
{
        if (s->kind == GEMMD_SYR2K)
                snprintf(buf, len, "syr2k %s %c %s %s n=%lld k=%lld ld+%lld a=%g b=%g",
                         e2e_dtype_name(s->dtype), "nt"[s->ta],
                         s->uplo == GEMMD_LOWER ? "lower" : "upper", s->row_major ? "row" : "col",
                         (long long)s->n, (long long)s->k, (long long)s->pad, s->alpha, s->beta);
        else
                snprintf(buf, len, "gemm %s %c%c %s %lldx%lldx%lld ld+%lld a=%g b=%g",
                         e2e_dtype_name(s->dtype), "nt"[s->ta], "nt"[s->tb],
                         s->row_major ? "row" : "col", (long long)s->m, (long long)s->n,
                         (long long)s->k, (long long)s->pad, s->alpha, s->beta);
        return buf;
}

/* ---- .npy ------------------------------------------------------------- */

int e2e_npy_write(const char *path, int esz, int64_t rows, int64_t cols, const void *data)
{
        char hdr[128];
        int len;
        FILE *f;
        size_t bytes = (size_t)(rows * cols) * (size_t)esz;
        int ok;

        len = snprintf(hdr + 10, sizeof(hdr) - 10,
                       "{'descr': '<f%d', 'fortran_order': False, 'shape': (%lld, %lld), }", esz,
                       (long long)rows, (long long)cols);
        /* Pad with spaces and a newline so the data starts 64-aligned. */
        while ((10 + len + 1) % 64)
                hdr[10 + len++] = ' ';
        hdr[10 + len++] = '\n';
        memcpy(hdr, "\x93NUMPY\x01\x00", 8);
        hdr[8] = (char)(len & 0xff);
        hdr[9] = (char)(len >> 8);
        f = fopen(path, "wb");
        if (!f)
                return -1;
        ok = fwrite(hdr, 1, (size_t)(10 + len), f) == (size_t)(10 + len) &&
             fwrite(data, 1, bytes, f) == bytes;
        return fclose(f) == 0 && ok ? 0 : -1;
}

int e2e_npy_read(const char *path, int *esz, int64_t *rows, int64_t *cols, void **data)
{
        size_t len, hlen, off, bytes;
        char *buf = e2e_read_file(path, &len), *hdr, *shape;
        long long r, c;

        *data = NULL;
        if (!buf || len < 10 || memcmp(buf, "\x93NUMPY", 6) || buf[6] != 1)
                goto bad;
        hlen = (uint8_t)buf[8] | (size_t)(uint8_t)buf[9] << 8;
        off = 10 + hlen;
        if (off > len)
                goto bad;
        hdr = strndup(buf + 10, hlen);
        if (!hdr)
                goto bad;
        *esz = strstr(hdr, "'<f8'") ? 8 : strstr(hdr, "'<f4'") ? 4 : strstr(hdr, "'<f2'") ? 2 : 0;
        shape = strstr(hdr, "'shape': (");
        if (!*esz || !strstr(hdr, "'fortran_order': False") || !shape ||
            sscanf(shape, "'shape': (%lld, %lld)", &r, &c) != 2) {
                free(hdr);
                goto bad;
        }
        free(hdr);
        bytes = (size_t)(r * c) * (size_t)*esz;
        if (len - off != bytes)
                goto bad;
        *rows = r;
        *cols = c;
        *data = malloc(bytes ? bytes : 1);
        if (!*data)
                goto bad;
        memcpy(*data, buf + off, bytes);
        free(buf);
        return 0;
bad:
        free(buf);
        return -1;
}

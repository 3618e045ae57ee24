/*
 * route.c - sends a checked GEMM or SYR2K to gemmd, or says it must go to
 * the fallback BLAS.
 *
 * Connection: one per process, made on the first call that goes to gemmd
 * ($GEMMD_SOCKET or the default path, as libgemmd does). A gemmd_client is
 * not thread-safe, so every use of it is under conn.lock; the copies in and
 * out of shared memory are not, so threads copy in parallel. When the
 * daemon cannot be reached, calls go to the fallback and a new connection
 * is tried at most every RETRY_NS. A forked child never uses its parent's
 * connection: it drops its copy (gemmd_disconnect only closes and unmaps
 * on this side) and connects anew.
 *
 * Transport: the program's matrices are in its own memory, which the daemon
 * cannot map, so each thread keeps a staging buffer from gemmd_buffer_alloc
 * (registered once, grown geometrically, reused by every call) and each
 * operand is copied into it once, packed: only the rows of each column the
 * op reads, and for C only what the op writes (the m rows of each column,
 * SYR2K's triangle), so columns' gaps that other threads may own are never
 * written back. A call whose operands do not fit one buffer of the daemon
 * (gemmd_info.max_buffer_bytes) goes to the fallback rather than being
 * split.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blas/blas_internal.h"

/* The default threshold, in flops: 2 * 256^3, a 256-cube GEMM, where gemmd
 * on an H100 began to beat a 16-CPU OpenBLAS for all four routines
 * (docs/performance.md); build/blas/blasbench measures a machine's own. */
#define DEFAULT_THRESHOLD 33554432.0
/* How long after a failed connection the next one is tried. */
#define RETRY_NS 2000000000ull
/* The smallest staging buffer, and its alignment of operands. */
#define STAGE_MIN (1u << 20)
#define ALIGN 64u

static struct {
        pthread_mutex_t lock;
        gemmd_client *c;
        pid_t pid;       /* the process that made c */
        uint64_t gen;    /* bumped with every connection made or dropped */
        uint64_t max_buffer;
        uint64_t retry_ns;
        /* [kind][dtype]: the daemon refused such ops as unsupported. */
        unsigned char refused[2][4];
        /* Threads copying through their staging buffers now: a dropped
         * handle, whose disconnect unmaps them, waits in `zombies` until
         * the last of them is done. */
        unsigned users;
        struct zombie *zombies;
} conn = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct zombie {
        gemmd_client *c;
        struct zombie *next;
};

/* A thread's staging buffer; valid while gen == conn.gen. */
struct stage {
        gemmd_buffer id;
        uint8_t *ptr;
        uint64_t bytes;
        uint64_t gen;
};
static __thread struct stage stage;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init(void);
static pthread_key_t stage_key;
static double threshold = DEFAULT_THRESHOLD;
static int verbose;

void blas_note(const char *fmt, ...)
{
        va_list ap;

        pthread_once(&init_once, init);
        if (!verbose)
                return;
        va_start(ap, fmt);
        fputs("gemmd-blas: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
}

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* fork: hold the lock across it, so the child's copy is consistent. */
static void fork_prepare(void)
{
        pthread_mutex_lock(&conn.lock);
}

static void fork_parent(void)
{
        pthread_mutex_unlock(&conn.lock);
}

/* The child keeps the parent's handle only until its next call, which sees
 * the pid differ and drops it (conn_ready). */
static void fork_child(void)
{
        conn.users = 0; /* the threads that were copying are not in the child */
        pthread_mutex_unlock(&conn.lock);
}

/* A thread that ends gives its staging buffer back to the daemon. */
static void stage_release(void *arg)
{
        struct stage *s = arg;

        pthread_mutex_lock(&conn.lock);
        if (conn.c && s->gen == conn.gen && conn.pid == getpid())
                gemmd_buffer_free(conn.c, s->id);
        pthread_mutex_unlock(&conn.lock);
        memset(s, 0, sizeof(*s));
}

/* Reads the environment once per process. */
static void init(void)
{
        const char *v = getenv("GEMMD_BLAS_VERBOSE");
        const char *t = getenv("GEMMD_BLAS_THRESHOLD");

        verbose = v && *v && strcmp(v, "0") != 0;
        if (t && *t) {
                char *end;
                double x = strtod(t, &end);

                if (*end == '\0' && x >= 0)
                        threshold = x;
                else
                        fprintf(stderr,
                                "gemmd-blas: GEMMD_BLAS_THRESHOLD=%s is not a number of flops; "
                                "using %.0f\n",
                                t, DEFAULT_THRESHOLD);
        }
        pthread_key_create(&stage_key, stage_release);
        pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int blas_above_threshold(double flops)
{
        pthread_once(&init_once, init);
        return flops >= threshold;
}

/* Forgets the connection (under conn.lock); the next try waits RETRY_NS. */
static void conn_drop(const char *why)
{
        struct zombie *z;

        if (why)
                blas_note("dropping the connection to gemmd: %s", why);
        if (conn.users && (z = malloc(sizeof(*z)))) {
                *z = (struct zombie){.c = conn.c, .next = conn.zombies};
                conn.zombies = z;
        } else if (!conn.users) {
                gemmd_disconnect(conn.c);
        } /* else keep its mappings alive for good: no memory to remember it */
        conn.c = NULL;
        conn.gen++;
        memset(conn.refused, 0, sizeof(conn.refused));
        conn.retry_ns = now_ns() + RETRY_NS;
}

/* One thread is done with its staging buffer (under conn.lock); the last
 * one out closes the dropped handles. */
static void conn_unuse(void)
{
        struct zombie *z;

        if (--conn.users)
                return;
        while ((z = conn.zombies)) {
                conn.zombies = z->next;
                gemmd_disconnect(z->c);
                free(z);
        }
}

/* Makes sure conn.c is this process's live connection (under conn.lock).
 * Returns 0, or -1 when there is none now. */
static int conn_ready(void)
{
        struct gemmd_info info;
        int rc;

        if (conn.c && conn.pid != getpid()) {
                conn_drop(NULL);
                conn.retry_ns = 0; /* a forked child connects at once */
        }
        if (conn.c)
                return 0;
        if (now_ns() < conn.retry_ns)
                return -1;
        rc = gemmd_connect(NULL, &conn.c);
        if (rc == 0)
                rc = gemmd_get_info(conn.c, &info);
        if (rc != 0) {
                blas_note("cannot connect to gemmd (%s); using the fallback BLAS, retrying in %llu s",
                          gemmd_strerror(rc), (unsigned long long)(RETRY_NS / 1000000000ull));
                if (conn.c)
                        gemmd_disconnect(conn.c);
                conn.c = NULL;
                conn.retry_ns = now_ns() + RETRY_NS;
                return -1;
        }
        conn.pid = getpid();
        conn.gen++;
        conn.max_buffer = info.max_buffer_bytes;
        return 0;
}

/* Gives this thread a staging buffer of at least `bytes` (under
 * conn.lock). Returns 0, or -1 (the call falls back). */
static int stage_ensure(uint64_t bytes)
{
        uint64_t size = STAGE_MIN;
        gemmd_buffer id;
        void *ptr;
        int rc;

        if (stage.gen == conn.gen && stage.bytes >= bytes)
                return 0;
        if (stage.gen == conn.gen && stage.id) {
                gemmd_buffer_free(conn.c, stage.id);
                size = stage.bytes * 2;
        }
        memset(&stage, 0, sizeof(stage));
        while (size < bytes)
                size *= 2;
        if (conn.max_buffer && size > conn.max_buffer)
                size = conn.max_buffer;
        rc = gemmd_buffer_alloc(conn.c, size, &id, &ptr);
        if (rc != 0) {
                blas_note("cannot allocate %llu bytes of shared memory with gemmd (%s); using "
                          "the fallback BLAS",
                          (unsigned long long)size, gemmd_strerror(rc));
                if (rc == GEMMD_EDISCONNECT || rc == -EPIPE || rc == -ECONNRESET)
                        conn_drop(gemmd_strerror(rc));
                return -1;
        }
        stage = (struct stage){.id = id, .ptr = ptr, .bytes = size, .gen = conn.gen};
        pthread_setspecific(stage_key, &stage);
        return 0;
}

/* Copies rows [lo(j), hi(j)) of each of `cols` columns between a matrix of
 * leading dimension ld and a packed one of leading dimension rows; tri: 0
 * all rows, 1 the upper triangle, 2 the lower. out: packed -> matrix. */
static void copy_cols(uint8_t *packed, uint8_t *mat, int64_t rows, int64_t cols, int64_t ld,
                      size_t esz, int tri, int out)
{
        if (tri == 0 && ld == rows) {
                if (out)
                        memcpy(mat, packed, (size_t)(rows * cols) * esz);
                else
                        memcpy(packed, mat, (size_t)(rows * cols) * esz);
                return;
        }
        for (int64_t j = 0; j < cols; j++) {
                int64_t lo = tri == 2 ? j : 0, hi = tri == 1 ? j + 1 : rows;
                uint8_t *p = packed + (size_t)(j * rows + lo) * esz;
                uint8_t *m = mat + (size_t)(j * ld + lo) * esz;

                if (out)
                        memcpy(m, p, (size_t)(hi - lo) * esz);
                else
                        memcpy(p, m, (size_t)(hi - lo) * esz);
        }
}

static uint64_t align_up(uint64_t x)
{
        return (x + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
}

/* The op on the staged operands: packed, so every leading dimension is its
 * matrix's row count. */
struct staged {
        struct gemmd_op op;
        int64_t ar, ac, br, bc;
        uint64_t bytes;
        int tri;
};

static void shape(const struct blas_call *k, struct staged *s)
{
        size_t esz = gemmd_dtype_size(k->dtype);
        uint64_t boff, coff;

        if (k->kind == GEMMD_GEMM) {
                s->ar = k->trans_a ? k->k : k->m;
                s->ac = k->trans_a ? k->m : k->k;
                s->br = k->trans_b ? k->n : k->k;
                s->bc = k->trans_b ? k->k : k->n;
                s->tri = 0;
        } else {
                s->ar = s->br = k->trans_a ? k->k : k->n;
                s->ac = s->bc = k->trans_a ? k->n : k->k;
                s->tri = k->upper ? 1 : 2;
        }
        boff = align_up((uint64_t)(s->ar * s->ac) * esz);
        coff = align_up(boff + (uint64_t)(s->br * s->bc) * esz);
        s->bytes = coff + (uint64_t)(k->m * k->n) * esz;
        s->op = (struct gemmd_op){
                .kind = k->kind,
                .dtype = k->dtype,
                .trans_a = k->trans_a ? GEMMD_OP_T : GEMMD_OP_N,
                .trans_b = k->trans_b ? GEMMD_OP_T : GEMMD_OP_N,
                .uplo = k->upper ? GEMMD_UPPER : GEMMD_LOWER,
                .m = k->m, .n = k->n, .k = k->k,
                .lda = s->ar, .ldb = s->br, .ldc = k->m,
                .alpha = k->alpha, .beta = k->beta,
                .a = {.offset = 0}, .b = {.offset = boff}, .c = {.offset = coff},
        };
}

/* Whether a code means the connection is gone. */
static int is_lost(int rc)
{
        return rc == GEMMD_EDISCONNECT || rc == GEMMD_ESHUTDOWN || rc == -EPIPE ||
               rc == -ECONNRESET || rc == -ENOTCONN;
}

/* Runs the staged op (under conn.lock), once more after a short pause if the
 * daemon is busy. Returns the op's status. */
static int run_locked(struct gemmd_op *op, uint64_t gen)
{
        struct gemmd_result res;
        int rc;

        for (int attempt = 0;; attempt++) {
                if (!conn.c || conn.gen != gen)
                        return GEMMD_EDISCONNECT; /* dropped while this thread copied */
                rc = gemmd_run(conn.c, op, 1, &res);
                if (rc == 0)
                        rc = res.status;
                if (rc != GEMMD_EBUSY || attempt == 1)
                        return rc;
                pthread_mutex_unlock(&conn.lock);
                usleep(1000);
                pthread_mutex_lock(&conn.lock);
        }
}

int blas_route(const struct blas_call *k)
{
        size_t esz = gemmd_dtype_size(k->dtype);
        struct staged s;
        uint64_t gen;
        uint8_t *base;
        int rc;

        pthread_once(&init_once, init);
        shape(k, &s);
        pthread_mutex_lock(&conn.lock);
        if (conn_ready() != 0 || conn.refused[k->kind][k->dtype]) {
                pthread_mutex_unlock(&conn.lock);
                return -1;
        }
        if (conn.max_buffer && s.bytes > conn.max_buffer) {
                pthread_mutex_unlock(&conn.lock);
                blas_note("operands of %llu bytes exceed gemmd's buffer limit; using the "
                          "fallback BLAS",
                          (unsigned long long)s.bytes);
                return -1;
        }
        if (stage_ensure(s.bytes) != 0) {
                pthread_mutex_unlock(&conn.lock);
                return -1;
        }
        conn.users++;
        gen = stage.gen;
        base = stage.ptr;
        s.op.a.buffer = s.op.b.buffer = s.op.c.buffer = stage.id;
        pthread_mutex_unlock(&conn.lock);

        copy_cols(base, (uint8_t *)k->a, s.ar, s.ac, k->lda, esz, 0, 0);
        copy_cols(base + s.op.b.offset, (uint8_t *)k->b, s.br, s.bc, k->ldb, esz, 0, 0);
        if (k->beta != 0)
                copy_cols(base + s.op.c.offset, k->c, k->m, k->n, k->ldc, esz, s.tri, 0);

        pthread_mutex_lock(&conn.lock);
        rc = run_locked(&s.op, gen);
        if (rc == GEMMD_EUNSUPPORTED)
                conn.refused[k->kind][k->dtype] = 1;
        else if (rc != 0 && is_lost(rc) && conn.gen == gen)
                conn_drop(gemmd_strerror(rc));
        if (rc != 0) {
                conn_unuse();
                pthread_mutex_unlock(&conn.lock);
                blas_note("gemmd did not run a %s %s (%s); using the fallback BLAS",
                          k->dtype == GEMMD_F64 ? "f64" : "f32",
                          k->kind == GEMMD_GEMM ? "GEMM" : "SYR2K", gemmd_strerror(rc));
                return -1;
        }
        pthread_mutex_unlock(&conn.lock);
        copy_cols(base + s.op.c.offset, k->c, k->m, k->n, k->ldc, esz, s.tri, 1);
        pthread_mutex_lock(&conn.lock);
        conn_unuse();
        pthread_mutex_unlock(&conn.lock);
        return 0;
}

/*
 * clients_loop.c - one client process of `gemmbench clients` (clients.h).
 *
 * The client owns CLIENTS_PROBLEMS random bf16 GEMMs, m, n and k each
 * uniform in {64, 128, ..., max_dim} (steps of 64), laid out as
 * gemmbench lays them out: A stored m x k and B stored n x k, both contiguous along K
 * (BLAS: op(A) = T with lda = k, op(B) = N with ldb = k), C m x n
 * column-major, alpha = 1, beta = 0 (--beta: another). A and B hold random
 * values, never zero; C starts poisoned (NaN), so an unwritten result
 * fails the check, or random where beta != 0 (C is then read).
 *
 * Setup (CUDA context, memory, daemon connection) happens after the fork, in
 * this process; then every problem runs once, so that first-use costs (module
 * loads, cuBLAS heuristics, the daemon's mappings) stay out of the numbers.
 * The client reports READY and waits for the parent's start time. From then
 * it keeps `window` requests in flight, cycling through its problems: a
 * warm-up, the measured window of `seconds`, then a drain in which nothing
 * new is submitted and everything in flight is waited for. A request counts
 * in the measured window when it completes inside it; its latency is from
 * just before the submit call to the moment the client sees it complete.
 *
 * Windows:
 *   gemmd   W submits in flight on the one connection; completions are
 *           collected with gemmd_wait_any, which polls the rings and the
 *           socket for as long as the library's waits do (gemmd_spin_us),
 *           then sleeps. With --spin it never sleeps: it looks, yielding
 *           the CPU between rounds that find nothing.
 *   cublas  W CUDA streams (non-blocking), one request in flight on each:
 *           cublasSetStream + cublasGemmEx + an event record. One cuBLAS
 *           handle; cublasSetStream gives each stream its own workspace from
 *           cuBLAS's default pool. Completions are found by polling the
 *           events with cudaEventQuery, yielding the CPU (sched_yield)
 *           between rounds that find none, so that many clients on few cores
 *           still progress.
 *
 * Afterwards up to four problems that completed are checked at 16 sampled
 * elements of C each against a double-precision dot product of A and B
 * (with beta != 0: each such problem is run once more, alone, and checked
 * against A B plus beta times its C from before that run).
 */
#include "bench/clients.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_fill.h"
#include "bench/bench_util.h"
#include "include/gemmd.h"
#include "kernels/half.h"

#define ALIGN 256u
#define CHECK_PROBLEMS 4
#define CHECK_SAMPLES 16
#define MAX_SAMPLES (8u << 20)
#define BF16_NAN 0xffffu

struct problem {
        int64_t m, n, k;
        uint64_t aoff, boff, coff; /* byte offsets in the client's buffer */
        double flops;
        int done_once;
};

struct slot {
        int busy;
        int problem;
        uint64_t t_submit;
        gemmd_ticket ticket; /* gemmd */
};

struct client {
        const struct clients_opts *o;
        int index;
        struct problem p[CLIENTS_PROBLEMS];
        uint64_t bytes;
        int next_problem;

        /* gemmd */
        gemmd_client *gc;
        gemmd_buffer buf;
        uint8_t *host;  /* shm mapping */
        /* ipc, cublas */
        uint8_t *dev;
        cublasHandle_t h;
        cudaStream_t st[CLIENTS_MAX_WINDOW];
        cudaEvent_t ev[CLIENTS_MAX_WINDOW];
        int nstreams, nevents;

        struct slot slot[CLIENTS_MAX_WINDOW];
        int inflight;
        uint64_t t_warm_end, t_end;
        int stop; /* a hard failure: submit nothing more */

        struct clients_result r;
        float *samples;
        uint64_t cap_samples;
};

static uint64_t splitmix(uint64_t *s)
{
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* Records the first failure of this client, with a printf-style reason. */
static void note_error(struct client *c, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void note_error(struct client *c, int code, const char *fmt, ...)
{
        va_list ap;

        if (c->r.first_error)
                return;
        c->r.first_error = code ? code : -1;
        va_start(ap, fmt);
        vsnprintf(c->r.first_error_msg, sizeof(c->r.first_error_msg), fmt, ap);
        va_end(ap);
}

/* ---- problems and memory ---------------------------------------------- */

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static void make_problems(struct client *c)
{
        uint64_t s = c->o->seed ^ (0x51ed270b27d3f1a5ull * (uint64_t)(c->index + 1)), off = 0;
        int64_t steps = c->o->max_dim / 64;

        for (int i = 0; i < CLIENTS_PROBLEMS; i++) {
                struct problem *p = &c->p[i];

                p->m = 64 * (1 + (int64_t)(splitmix(&s) % (uint64_t)steps));
                p->n = 64 * (1 + (int64_t)(splitmix(&s) % (uint64_t)steps));
                p->k = 64 * (1 + (int64_t)(splitmix(&s) % (uint64_t)steps));
                if (c->o->k)
                        p->k = c->o->k; /* (drawn anyway: m and n stay those of the default) */
                p->flops = 2.0 * (double)p->m * (double)p->n * (double)p->k;
        }
        /* A's, then B's, then C's. */
        for (int i = 0; i < CLIENTS_PROBLEMS; i++, off = align_up(off))
                c->p[i].aoff = off, off += 2 * (uint64_t)(c->p[i].m * c->p[i].k);
        for (int i = 0; i < CLIENTS_PROBLEMS; i++, off = align_up(off))
                c->p[i].boff = off, off += 2 * (uint64_t)(c->p[i].n * c->p[i].k);
        for (int i = 0; i < CLIENTS_PROBLEMS; i++, off = align_up(off))
                c->p[i].coff = off, off += 2 * (uint64_t)(c->p[i].m * c->p[i].n);
        c->bytes = off;
}

/* Random bf16 in +-[0.125, 1): an exponent of -3, -2 or -1 and random
 * mantissa and sign bits, so never zero. */
static void fill_host_bf16(uint16_t *p, uint64_t n, uint64_t seed)
{
        for (uint64_t i = 0; i < n; i += 4) {
                uint64_t r = splitmix(&seed);

                for (int j = 0; j < 4 && i + j < n; j++, r >>= 16) {
                        uint16_t sign = (uint16_t)(r & 0x8000u);
                        uint16_t exp = (uint16_t)(124 + (r >> 7) % 3);
                        uint16_t man = (uint16_t)(r & 0x7fu);

                        p[i + j] = (uint16_t)(sign | exp << 7 | man);
                }
        }
}

/* C's start: NaN where beta is 0 (C must be written), random values
 * where C is read. */
static void fill_host_c(struct client *c)
{
        if (c->o->beta != 0) {
                fill_host_bf16((uint16_t *)(c->host + c->p[0].coff), (c->bytes - c->p[0].coff) / 2,
                               c->o->seed + 15485863u * (c->index + 1));
                return;
        }
        for (int i = 0; i < CLIENTS_PROBLEMS; i++) {
                uint16_t *cc = (uint16_t *)(c->host + c->p[i].coff);

                for (int64_t e = 0; e < c->p[i].m * c->p[i].n; e++)
                        cc[e] = BF16_NAN;
        }
}

static int cuda_fail(struct client *c, const char *what, cudaError_t e)
{
        note_error(c, -EIO, "%s: %s", what, cudaGetErrorString(e));
        return -EIO;
}

/* Device memory for ipc and cublas: random A and B, C NaN (or random
 * where beta != 0). */
static int setup_device_memory(struct client *c)
{
        cudaError_t e;

        /* Spread round-robin, so every device gets clients of each kind. */
        if ((e = cudaSetDevice(c->o->device + c->index % c->o->ndevices)) != cudaSuccess)
                return cuda_fail(c, "cudaSetDevice", e);
        if ((e = cudaMalloc((void **)&c->dev, c->bytes)) != cudaSuccess)
                return cuda_fail(c, "cudaMalloc", e);
        if (bench_fill(c->dev, c->p[0].coff / 2, GEMMD_BF16, c->o->seed + 7919u * (c->index + 1)))
                return cuda_fail(c, "bench_fill", cudaGetLastError());
        if (c->o->beta != 0) {
                if (bench_fill(c->dev + c->p[0].coff, (c->bytes - c->p[0].coff) / 2, GEMMD_BF16,
                               c->o->seed + 15485863u * (c->index + 1)))
                        return cuda_fail(c, "bench_fill", cudaGetLastError());
        } else {
                for (int i = 0; i < CLIENTS_PROBLEMS; i++)
                        if ((e = cudaMemset(c->dev + c->p[i].coff, 0xff,
                                            2 * (size_t)(c->p[i].m * c->p[i].n))) != cudaSuccess)
                                return cuda_fail(c, "cudaMemset", e);
        }
        if ((e = cudaDeviceSynchronize()) != cudaSuccess)
                return cuda_fail(c, "cudaDeviceSynchronize", e);
        return 0;
}

/* ---- completions ------------------------------------------------------ */

static void add_sample(struct client *c, float us)
{
        if (c->r.nsamples == c->cap_samples) {
                uint64_t cap = c->cap_samples ? 2 * c->cap_samples : 4096;
                float *s;

                if (cap > MAX_SAMPLES)
                        return;
                s = realloc(c->samples, cap * sizeof(*s));
                if (!s)
                        return;
                c->samples = s;
                c->cap_samples = cap;
        }
        c->samples[c->r.nsamples++] = us;
}

/* Accounts for the request in slot s, completed at `now` with `status`. */
static void complete(struct client *c, struct slot *s, uint64_t now, int status,
                     const struct gemmd_result *res)
{
        struct problem *p = &c->p[s->problem];

        if (status) {
                const char *why = c->gc ? gemmd_last_error(c->gc) : "";

                c->r.errors++;
                note_error(c, status, "request (%lldx%lldx%lld): %s%s%s", (long long)p->m,
                           (long long)p->n, (long long)p->k, gemmd_strerror(status), *why ? ": " : "",
                           why);
        } else {
                c->r.ok++;
                p->done_once = 1;
                if (now >= c->t_warm_end && now <= c->t_end) {
                        c->r.window_requests++;
                        c->r.window_flops += p->flops;
                        add_sample(c, (float)((now - s->t_submit) / 1e3));
                        if (res) {
                                bench_account_add(&c->r.account, res);
                                bench_hops_add(&c->r.hops, res, s->t_submit, now);
                        }
                }
        }
        s->busy = 0;
        c->inflight--;
}

/* Gives up on everything in flight: each request counts as a timeout (the
 * oldest passed its deadline) or an error (the connection or the context
 * broke). No further request is submitted. */
static void abandon(struct client *c, int timeout)
{
        for (int i = 0; i < c->o->window; i++)
                if (c->slot[i].busy) {
                        if (timeout)
                                c->r.timeouts++;
                        else
                                c->r.errors++;
                        c->slot[i].busy = 0;
                }
        c->inflight = 0;
        c->stop = 1;
}

/* The oldest request in flight passed its deadline? */
static int timed_out(struct client *c, uint64_t now, uint64_t *oldest)
{
        uint64_t t = UINT64_MAX;

        for (int i = 0; i < c->o->window; i++)
                if (c->slot[i].busy && c->slot[i].t_submit < t)
                        t = c->slot[i].t_submit;
        if (oldest)
                *oldest = t;
        if (t != UINT64_MAX && now > t + (uint64_t)c->o->timeout_ms * 1000000u) {
                note_error(c, -ETIMEDOUT, "a request got no completion in %d ms", c->o->timeout_ms);
                return 1;
        }
        return 0;
}

static struct slot *free_slot(struct client *c)
{
        for (int i = 0; i < c->o->window; i++)
                if (!c->slot[i].busy)
                        return &c->slot[i];
        return NULL;
}

static int take_problem(struct client *c)
{
        int i = c->next_problem;

        c->next_problem = (i + 1) % CLIENTS_PROBLEMS;
        return i;
}

/* ---- gemmd ------------------------------------------------------------ */

static void gemmd_op_of(const struct client *c, const struct problem *p, struct gemmd_op *op)
{
        memset(op, 0, sizeof(*op));
        op->kind = GEMMD_GEMM;
        op->dtype = GEMMD_BF16;
        op->trans_a = GEMMD_OP_T;
        op->trans_b = GEMMD_OP_N;
        op->m = p->m;
        op->n = p->n;
        op->k = p->k;
        op->lda = p->k;
        op->ldb = p->k;
        op->ldc = p->m;
        op->alpha = 1.f;
        op->beta = c->o->beta;
        op->a = (struct gemmd_operand){.buffer = c->buf, .offset = p->aoff};
        op->b = (struct gemmd_operand){.buffer = c->buf, .offset = p->boff};
        op->c = (struct gemmd_operand){.buffer = c->buf, .offset = p->coff};
}

static int gemmd_setup(struct client *c)
{
        int err = gemmd_connect(c->o->socket, &c->gc);

        if (err) {
                note_error(c, err, "gemmd_connect %s: %s", c->o->socket, gemmd_strerror(err));
                return err;
        }
        if (c->o->memory == CLIENTS_MEM_SHM) {
                err = gemmd_buffer_alloc(c->gc, c->bytes, &c->buf, (void **)&c->host);
                if (err) {
                        note_error(c, err, "gemmd_buffer_alloc %llu bytes: %s",
                                   (unsigned long long)c->bytes, gemmd_strerror(err));
                        return err;
                }
                fill_host_bf16((uint16_t *)c->host, c->p[0].coff / 2,
                               c->o->seed + 7919u * (c->index + 1));
                fill_host_c(c);
        } else {
                err = setup_device_memory(c);
                if (err)
                        return err;
                err = gemmd_register_device(c->gc, c->dev, c->bytes, &c->buf);
                if (err) {
                        note_error(c, err, "gemmd_register_device: %s", gemmd_strerror(err));
                        return err;
                }
        }
        return 0;
}

/* Submits the problem of a free slot. Returns 0, or the local failure
 * (which ends the client: the connection is gone or the library refused). */
static int gemmd_submit_slot(struct client *c, struct slot *s, int problem)
{
        struct gemmd_op op;
        int err;

        gemmd_op_of(c, &c->p[problem], &op);
        s->problem = problem;
        s->t_submit = bench_now_ns();
        c->r.submitted++;
        err = gemmd_submit(c->gc, &op, 1, GEMMD_PRIO_NORMAL, &s->ticket);
        if (err) {
                c->r.errors++;
                note_error(c, err, "gemmd_submit: %s", gemmd_strerror(err));
                c->stop = 1;
                return err;
        }
        s->busy = 1;
        c->inflight++;
        return 0;
}

/* Collects every completion that is ready, waiting up to wait_ms (0: not
 * at all) for the first. Returns how many, or a negative code when the
 * connection is lost. gemmd_wait_any polls before it sleeps, and never
 * asks the daemon to wake the socket while it polls. */
static int gemmd_collect(struct client *c, int wait_ms)
{
        int n = 0;

        for (;;) {
                struct gemmd_result res;
                gemmd_ticket t;
                int r = gemmd_wait_any(c->gc, n ? 0 : wait_ms, &t), st;
                struct slot *s = NULL;

                if (r < 0)
                        return r;
                if (r == 0)
                        return n;
                memset(&res, 0, sizeof(res));
                st = gemmd_wait(c->gc, t, 0, &res, 1);
                for (int i = 0; i < c->o->window && !s; i++)
                        if (c->slot[i].busy && c->slot[i].ticket == t)
                                s = &c->slot[i];
                if (!s)
                        continue; /* not ours: cannot happen */
                complete(c, s, bench_now_ns(), st, &res);
                n++;
        }
}

/* Keeps the window full until t_end, then drains. */
static void gemmd_loop(struct client *c)
{
        for (;;) {
                uint64_t now = bench_now_ns(), oldest;
                struct slot *s;
                int r, wait_ms;

                while (!c->stop && now < c->t_end && (s = free_slot(c)))
                        if (gemmd_submit_slot(c, s, take_problem(c)))
                                break;
                if (!c->inflight)
                        return;
                now = bench_now_ns();
                if (timed_out(c, now, &oldest)) {
                        abandon(c, 1);
                        return;
                }
                wait_ms = (int)((oldest + (uint64_t)c->o->timeout_ms * 1000000u - now) / 1000000u) + 1;
                r = gemmd_collect(c, c->o->spin ? 0 : wait_ms);
                if (r < 0) {
                        note_error(c, r, "connection: %s", gemmd_strerror(r));
                        abandon(c, 0);
                        return;
                }
                if (r == 0 && c->o->spin)
                        sched_yield();
        }
}

/* ---- cuBLAS ----------------------------------------------------------- */

static int cublas_setup(struct client *c)
{
        cublasStatus_t bs;
        cudaError_t e;
        int err = setup_device_memory(c);

        if (err)
                return err;
        if ((bs = cublasCreate(&c->h)) != CUBLAS_STATUS_SUCCESS) {
                note_error(c, -EIO, "cublasCreate: %s", cublasGetStatusString(bs));
                return -EIO;
        }
        for (int i = 0; i < c->o->window; i++) {
                if ((e = cudaStreamCreateWithFlags(&c->st[i], cudaStreamNonBlocking)) != cudaSuccess)
                        return cuda_fail(c, "cudaStreamCreate", e);
                c->nstreams++;
                if ((e = cudaEventCreateWithFlags(&c->ev[i], cudaEventDisableTiming)) != cudaSuccess)
                        return cuda_fail(c, "cudaEventCreate", e);
                c->nevents++;
        }
        return 0;
}

static cublasStatus_t cublas_gemm(struct client *c, const struct problem *p, cudaStream_t st)
{
        const float one = 1.f, beta = (float)c->o->beta;
        cublasStatus_t bs = cublasSetStream(c->h, st);

        if (bs != CUBLAS_STATUS_SUCCESS)
                return bs;
        return cublasGemmEx(c->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->m, (int)p->n, (int)p->k, &one,
                            c->dev + p->aoff, CUDA_R_16BF, (int)p->k, c->dev + p->boff, CUDA_R_16BF,
                            (int)p->k, &beta, c->dev + p->coff, CUDA_R_16BF, (int)p->m,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static void cublas_submit_slot(struct client *c, struct slot *s, int problem)
{
        int idx = (int)(s - c->slot);
        cublasStatus_t bs;
        cudaError_t e;

        s->problem = problem;
        s->t_submit = bench_now_ns();
        c->r.submitted++;
        bs = cublas_gemm(c, &c->p[problem], c->st[idx]);
        if (bs != CUBLAS_STATUS_SUCCESS) {
                c->r.errors++;
                note_error(c, -EIO, "cublasGemmEx: %s", cublasGetStatusString(bs));
                c->stop = 1;
                return;
        }
        if ((e = cudaEventRecord(c->ev[idx], c->st[idx])) != cudaSuccess) {
                c->r.errors++;
                cuda_fail(c, "cudaEventRecord", e);
                c->stop = 1;
                return;
        }
        s->busy = 1;
        c->inflight++;
}

static void cublas_loop(struct client *c)
{
        for (;;) {
                uint64_t now = bench_now_ns();
                struct slot *s;
                int done = 0;

                while (!c->stop && now < c->t_end && (s = free_slot(c)))
                        cublas_submit_slot(c, s, take_problem(c));
                if (!c->inflight)
                        return;
                for (int i = 0; i < c->o->window; i++) {
                        cudaError_t e;

                        if (!c->slot[i].busy)
                                continue;
                        e = cudaEventQuery(c->ev[i]);
                        if (e == cudaErrorNotReady)
                                continue;
                        if (e != cudaSuccess) {
                                cuda_fail(c, "cudaEventQuery", e);
                                abandon(c, 0);
                                return;
                        }
                        complete(c, &c->slot[i], bench_now_ns(), 0, NULL);
                        done++;
                }
                if (done)
                        continue;
                if (timed_out(c, bench_now_ns(), NULL)) {
                        abandon(c, 1);
                        return;
                }
                sched_yield();
        }
}

/* ---- warm-up of every problem and the final check ----------------------- */

/* Runs problems first .. first + n - 1 once each and waits for them: the
 * warm-up of every problem, and the check's last run of one where beta
 * != 0. Returns 0, or the first failure, noted as `what`'s. */
static int run_problems(struct client *c, int first, int n, const char *what)
{
        if (c->o->mode == CLIENTS_GEMMD) {
                gemmd_ticket t[CLIENTS_PROBLEMS];
                int err = 0;

                for (int i = 0; i < n; i++) {
                        struct gemmd_op op;

                        gemmd_op_of(c, &c->p[first + i], &op);
                        err = gemmd_submit(c->gc, &op, 1, GEMMD_PRIO_NORMAL, &t[i]);
                        if (err) {
                                note_error(c, err, "%s gemmd_submit: %s", what, gemmd_strerror(err));
                                return err;
                        }
                }
                for (int i = 0; i < n; i++) {
                        int st = gemmd_wait(c->gc, t[i], c->o->timeout_ms, NULL, 0);

                        if (st && !err) {
                                note_error(c, st, "%s request: %s", what, gemmd_strerror(st));
                                err = st;
                        }
                }
                return err;
        }
        for (int i = 0; i < n; i++) {
                cublasStatus_t bs = cublas_gemm(c, &c->p[first + i], c->st[0]);

                if (bs != CUBLAS_STATUS_SUCCESS) {
                        note_error(c, -EIO, "%s cublasGemmEx: %s", what, cublasGetStatusString(bs));
                        return -EIO;
                }
        }
        cudaError_t e = cudaStreamSynchronize(c->st[0]);
        return e == cudaSuccess ? 0 : cuda_fail(c, what, e);
}

/* Fetches one operand region to the host (device memory) or points at it
 * (shared memory). Returns NULL on failure. */
static const uint16_t *fetch(struct client *c, uint64_t off, uint64_t bytes, uint16_t **tmp)
{
        if (c->host)
                return (const uint16_t *)(c->host + off);
        *tmp = malloc(bytes);
        if (!*tmp || cudaMemcpy(*tmp, c->dev + off, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
                return NULL;
        return *tmp;
}

/* p's C as it is before the check runs p again (beta != 0): a
 * copy the caller frees, NULL on failure. */
static uint16_t *c_before(struct client *c, const struct problem *p)
{
        const uint64_t bytes = 2 * (uint64_t)(p->m * p->n);
        uint16_t *tmp = NULL, *copy;
        const uint16_t *cc = fetch(c, p->coff, bytes, &tmp);

        if (!cc) {
                free(tmp);
                return NULL;
        }
        if (tmp)
                return tmp; /* device memory: fetch made a copy */
        copy = malloc(bytes); /* shared memory: the next run writes over it */
        if (copy)
                memcpy(copy, cc, bytes);
        return copy;
}

/* Checks sampled elements of a few completed problems: A B, plus beta
 * times C from before a last run of the problem where beta != 0. */
static void check_results(struct client *c)
{
        uint64_t s = c->o->seed + 104729u * (c->index + 1);
        const double beta = c->o->beta;
        int checked = 0;

        for (int i = 0; i < CLIENTS_PROBLEMS && checked < CHECK_PROBLEMS; i++) {
                const struct problem *p = &c->p[i];
                uint16_t *ta = NULL, *tb = NULL, *tc = NULL, *cb = NULL;
                const uint16_t *a, *b, *cc = NULL;
                int ran = 1;

                if (!p->done_once)
                        continue;
                checked++;
                if (beta != 0) {
                        cb = c_before(c, p);
                        ran = cb && !run_problems(c, i, 1, "check:");
                }
                a = fetch(c, p->aoff, 2 * (uint64_t)(p->m * p->k), &ta);
                b = fetch(c, p->boff, 2 * (uint64_t)(p->n * p->k), &tb);
                if (ran)
                        cc = fetch(c, p->coff, 2 * (uint64_t)(p->m * p->n), &tc);
                if (!a || !b || !cc) {
                        c->r.check_errors++;
                        note_error(c, -EIO, "check: cannot read the operands back");
                } else {
                        for (int j = 0; j < CHECK_SAMPLES; j++) {
                                int64_t r = (int64_t)(splitmix(&s) % (uint64_t)p->m);
                                int64_t col = (int64_t)(splitmix(&s) % (uint64_t)p->n);
                                double ref = 0, mag = 0, got;

                                for (int64_t l = 0; l < p->k; l++) {
                                        double x = gemmd_bf16_to_f32(a[r * p->k + l]);
                                        double y = gemmd_bf16_to_f32(b[col * p->k + l]);

                                        ref += x * y;
                                        mag += fabs(x * y);
                                }
                                if (cb) {
                                        const double old = beta * gemmd_bf16_to_f32(cb[r + col * p->m]);

                                        ref += old;
                                        mag += fabs(old);
                                }
                                got = gemmd_bf16_to_f32(cc[r + col * p->m]);
                                /* bf16 output: 2^-8 relative rounding, plus slack. */
                                if (!(fabs(got - ref) <= 1e-2 * mag + 1e-6)) {
                                        c->r.check_errors++;
                                        note_error(c, -EIO,
                                                   "check: C(%lld,%lld) of %lldx%lldx%lld is %g, expected %g",
                                                   (long long)r, (long long)col, (long long)p->m,
                                                   (long long)p->n, (long long)p->k, got, ref);
                                }
                        }
                }
                free(ta);
                free(tb);
                free(tc);
                free(cb);
        }
}

/* ---- the client process ----------------------------------------------- */

static void teardown(struct client *c)
{
        for (int i = 0; i < c->nevents; i++)
                cudaEventDestroy(c->ev[i]);
        for (int i = 0; i < c->nstreams; i++)
                cudaStreamDestroy(c->st[i]);
        if (c->h)
                cublasDestroy(c->h);
        /* Disconnecting unregisters; the device memory goes after that. */
        gemmd_disconnect(c->gc);
        if (c->dev)
                cudaFree(c->dev);
        free(c->samples);
}

static int send_msg(int fd, uint32_t type, const void *body, size_t len, const void *extra,
                    size_t elen)
{
        struct clients_msg m = {type, (uint32_t)(len + elen)};
        int err = bench_write_all(fd, &m, sizeof(m));

        if (!err)
                err = bench_write_all(fd, body, len);
        if (!err && elen)
                err = bench_write_all(fd, extra, elen);
        return err;
}

int clients_child(const struct clients_opts *o, int index, int fd)
{
        struct client *c = calloc(1, sizeof(*c));
        struct clients_ready ready;
        uint64_t t_go;
        int err;

        if (!c)
                return 1;
        c->o = o;
        c->index = index;
        make_problems(c);
        if (o->mode == CLIENTS_GEMMD)
                err = gemmd_setup(c);
        else
                err = cublas_setup(c);
        if (!err)
                err = run_problems(c, 0, CLIENTS_PROBLEMS, "warm-up");

        memset(&ready, 0, sizeof(ready));
        ready.status = err;
        if (err)
                snprintf(ready.msg, sizeof(ready.msg), "%s", c->r.first_error_msg);
        if (send_msg(fd, CLIENTS_MSG_READY, &ready, sizeof(ready), NULL, 0) || err ||
            bench_read_all(fd, &t_go, sizeof(t_go)) || !t_go) {
                teardown(c);
                free(c);
                return 1;
        }
        c->t_warm_end = t_go + (uint64_t)(o->warmup * 1e9);
        c->t_end = c->t_warm_end + (uint64_t)(o->seconds * 1e9);
        while (bench_now_ns() < t_go)
                ;
        if (o->mode == CLIENTS_GEMMD)
                gemmd_loop(c);
        else
                cublas_loop(c);
        if (!c->stop)
                check_results(c);
        err = send_msg(fd, CLIENTS_MSG_RESULT, &c->r, sizeof(c->r), c->samples,
                       c->r.nsamples * sizeof(float));
        teardown(c);
        free(c);
        return err ? 1 : 0;
}

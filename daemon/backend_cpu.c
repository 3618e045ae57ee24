/*
 * backend_cpu.c - the CPU "device": a thread pool that runs the CTAs of
 * launched groups in launch order, with the same plans a GPU would run.
 *
 * Pool threads claim CTAs of the oldest launched group one at a time; the
 * thread that finishes a group's last CTA reports it done. CTAs with no
 * work (a plan has a few per thread, a small group fills few of them) are
 * never claimed, and a launch wakes no more threads than it has CTAs to
 * run. A group's workspace (split-K chunk sums and arrival counters) lives
 * in its slot. With early completion (--cpu-early), each op is answered
 * once its own tiles are done, before the group's end, as a GPU answers
 * them.
 */
#include <errno.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/backend.h"
#include "daemon/cpuacct.h"
#include "daemon/devproc.h"
#include "daemon/log.h"
#include "gemmd.h"
#include "daemon/worker.h"
#include "kernels/cpu_gemm.h"

struct cpu_slot {
        struct group *next; /* run queue link */
        uint32_t next_cta;  /* next CTA to claim, under the pool lock */
        uint32_t work_ctas; /* CTAs with work: the group is done after these */
        atomic_uint done_ctas;
        struct cpu_workspace ws;
        size_t ws_elems, ws_arrivals;
        int early;       /* this group's ops are answered as they are done */
        uint32_t *left;  /* per op: plan entries not yet run (early) */
        uint32_t left_cap;
};

struct cpu_backend {
        struct backend b;
        int nthreads;
        pthread_t *threads;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct group *head, *tail;
        int stopping;
        int early; /* --cpu-early with --early-completion */
};

static const struct sched_shape cpu_shape = {64, 64, 64};
/* With --cpu-alt-tiles: the same tm and tk, as a GPU's wide and narrow tiles. */
static const struct sched_shape cpu_wide = {64, 96, 64}, cpu_narrow = {64, 32, 64};

static struct sched_shape shape(struct backend *b, uint32_t key)
{
        return cpu_shape;
}

static struct sched_shape wide_shape(struct backend *b, uint32_t key)
{
        return cpu_wide;
}

static struct sched_shape narrow_shape(struct backend *b, uint32_t key)
{
        return cpu_narrow;
}

static const char *kernel_name(struct backend *b, uint32_t key)
{
        static const char *names[] = {"cpu-f32", "cpu-f16", "cpu-bf16", "cpu-f64",
                                      "cpu-f32", "cpu-f16", "cpu-bf16", "cpu-f64"};

        return names[key & 7];
}

static int reserve_ws(struct cpu_slot *s, const struct group *g)
{
        size_t elems = (size_t)g->plan.ws_chunks * g->cfg.shape.tm * g->cfg.shape.tn;
        size_t arrivals = g->plan.nsplit;

        if (elems > s->ws_elems) {
                void *p = realloc(s->ws.chunks, elems * CPU_WS_ELEM_BYTES);

                if (!p)
                        return GEMMD_ERESOURCE;
                s->ws.chunks = p;
                s->ws_elems = elems;
        }
        if (arrivals > s->ws_arrivals) {
                uint32_t *p = realloc(s->ws.arrivals, arrivals * sizeof(uint32_t));

                if (!p)
                        return GEMMD_ERESOURCE;
                s->ws.arrivals = p;
                s->ws_arrivals = arrivals;
        }
        if (arrivals)
                memset(s->ws.arrivals, 0, arrivals * sizeof(uint32_t));
        return 0;
}

/* Whether CTA c of g's plan runs anything: a work list with entries, or
 * in device mode a CTA below the tile count. A plan without tiles keeps
 * CTA 0, so that the group still completes through the pool. */
static int cta_has_work(const struct group *g, uint32_t c)
{
        const struct sched_plan *p = &g->plan;

        if (p->nentries)
                return p->cta_begin[c] < p->cta_begin[c + 1];
        return p->tiles ? c < p->tiles : c == 0;
}

/* The first CTA at or after c that has work, or nctas. */
static uint32_t next_work(const struct group *g, uint32_t c)
{
        while (c < g->plan.nctas && !cta_has_work(g, c))
                c++;
        return c;
}

#ifdef GEMMD_FAULT_INJECTION
/* A launch failure that is not the device's, in place of the injected
 * device fault: GEMMD_FI_LAUNCH_ERROR=ENOMEM or EINVAL in the daemon's
 * environment makes a debug_fault op's launch fail with that errno, as a
 * plan or an allocation can. Returns it negated, or 0. */
static int fi_launch_error(void)
{
        const char *e = getenv("GEMMD_FI_LAUNCH_ERROR");

        if (e && !strcmp(e, "ENOMEM"))
                return -ENOMEM;
        if (e && !strcmp(e, "EINVAL"))
                return -EINVAL;
        return 0;
}
#endif

#ifdef GEMMD_FAULT_INJECTION
/* GEMMD_FI_DEVMEM_MS=N in the daemon's environment: the CPU backend takes
 * CUDA IPC registrations and device allocations as a GPU's does, in host
 * memory, each open, allocation, close and free holding its worker for N
 * ms as the driver's calls do; the handle is not read. The worker's share
 * of those tasks per user (worker.c) is tested this way without a GPU. */
#define FI_DEVMEM_MAX (64ull << 20)

static void fi_devmem_wait(void)
{
        const char *e = getenv("GEMMD_FI_DEVMEM_MS");
        struct timespec ts;
        long ms = e ? strtol(e, NULL, 10) : 0;

        ts.tv_sec = ms / 1000;
        ts.tv_nsec = ms % 1000 * 1000000L;
        while (nanosleep(&ts, &ts) && errno == EINTR)
                ;
}

static int fi_ipc_open(struct backend *be, const uint8_t handle[64], uint64_t offset, uint64_t bytes,
                       uint64_t *addr, void **token)
{
        void *p;

        (void)be;
        (void)handle;
        fi_devmem_wait();
        if (offset > FI_DEVMEM_MAX || bytes > FI_DEVMEM_MAX - offset)
                return GEMMD_EBOUNDS;
        if (!(p = calloc(1, offset + bytes)))
                return -ENOMEM;
        *addr = (uint64_t)(uintptr_t)p + offset;
        *token = p;
        return 0;
}

static int fi_dev_alloc(struct backend *be, uint64_t bytes, uint64_t *addr, uint8_t handle[64],
                        void **token)
{
        memset(handle, 0, 64);
        return fi_ipc_open(be, handle, 0, bytes, addr, token);
}

static void fi_devmem_free(struct backend *be, void *token)
{
        (void)be;
        fi_devmem_wait();
        free(token);
}
#endif

/* Counts each op's plan entries for early completion (s->early), or
 * leaves it off: a lone op, a plan without entries (device mode, whose
 * CTAs walk the tiles), or no memory for the counts. */
static void arm_early(struct cpu_backend *cb, struct cpu_slot *s, const struct group *g)
{
        s->early = cb->early && g->nops > 1 && g->plan.nentries;
        if (!s->early)
                return;
        if (g->nops > s->left_cap) {
                uint32_t *p = realloc(s->left, g->nops * sizeof(*p));

                if (!p) {
                        s->early = 0;
                        return;
                }
                s->left = p;
                s->left_cap = g->nops;
        }
        memset(s->left, 0, g->nops * sizeof(*s->left));
        for (uint32_t j = 0; j < g->plan.nentries; j++)
                s->left[g->plan.entries[j].problem]++;
}

/* What early_ran needs: the group and its slot. */
struct early_ctx {
        struct group *g;
        struct cpu_slot *s;
};

/* After one of a CTA's tiles of `problem` ran: answers the op once its
 * last tile has. Before the CTA counts as done, so the group cannot end
 * (and its slot be reused) meanwhile; the count that reaches zero sees
 * every other thread's stores of that op's C. */
static void early_ran(void *arg, uint32_t problem)
{
        const struct early_ctx *x = arg;

        if (__atomic_sub_fetch(&x->s->left[problem], 1, __ATOMIC_ACQ_REL) == 0)
                worker_ops_done(x->g, &problem, 1);
}

static int launch(struct backend *be, struct group *g)
{
        struct cpu_backend *cb = (struct cpu_backend *)be;
        struct cpu_slot *s = g->bdata;
        uint32_t work = 0;
        int rc = reserve_ws(s, g);

        if (rc)
                return rc;
#ifdef GEMMD_FAULT_INJECTION
        /* The CPU's device fault: in a device process, the process dies
         * (as one whose CUDA context broke ends); in the daemon, the
         * group fails. */
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->debug_fault) {
                        if (fi_launch_error())
                                return fi_launch_error();
                        if (devhost_active) {
                                log_warn("cpu: injecting a device fault: the device process dies");
                                raise(SIGKILL);
                        }
                        return GEMMD_EDEVICE;
                }
#endif
        for (uint32_t c = 0; c < g->plan.nctas; c++)
                work += cta_has_work(g, c) != 0;
        if (!work)
                return -EINVAL; /* a plan without CTAs */
        arm_early(cb, s, g);
        s->next = NULL;
        s->next_cta = next_work(g, 0);
        s->work_ctas = work;
        atomic_store(&s->done_ctas, 0);
        pthread_mutex_lock(&cb->lock);
        if (cb->tail)
                ((struct cpu_slot *)cb->tail->bdata)->next = g;
        else
                cb->head = g;
        cb->tail = g;
        pthread_mutex_unlock(&cb->lock);
        /* Threads that are busy find the group when they come back for
         * more; of the sleeping ones, as many as it has CTAs to run. */
        if (work >= (uint32_t)cb->nthreads)
                pthread_cond_broadcast(&cb->cond);
        else
                for (uint32_t i = 0; i < work; i++)
                        pthread_cond_signal(&cb->cond);
        return 0;
}

static void *pool_main(void *arg)
{
        struct cpu_backend *cb = arg;

        cpuacct_thread_start(CPU_COMPUTE);
        pthread_mutex_lock(&cb->lock);
        for (;;) {
                struct group *g = cb->head;
                struct cpu_slot *s;
                uint32_t cta, work;

                if (!g) {
                        if (cb->stopping)
                                break;
                        pthread_cond_wait(&cb->cond, &cb->lock);
                        continue;
                }
                s = g->bdata;
                work = s->work_ctas;
                cta = s->next_cta;
                s->next_cta = next_work(g, cta + 1);
                if (s->next_cta >= g->plan.nctas) {
                        /* Every CTA is claimed: later claims go to the next group. */
                        cb->head = s->next;
                        if (!cb->head)
                                cb->tail = NULL;
                }
                pthread_mutex_unlock(&cb->lock);
                if (s->early) {
                        struct early_ctx x = {g, s};

                        cpu_gemm_run_cta_each(g->kp, g->sp, &g->plan, &g->cfg, cta, &s->ws, early_ran, &x);
                } else {
                        cpu_gemm_run_cta(g->kp, g->sp, &g->plan, &g->cfg, cta, &s->ws);
                }
                if (atomic_fetch_add_explicit(&s->done_ctas, 1, memory_order_acq_rel) + 1 == work)
                        worker_group_done(g, 0);
                pthread_mutex_lock(&cb->lock);
        }
        pthread_mutex_unlock(&cb->lock);
        return NULL;
}

static int slot_init(struct backend *b, struct group *g)
{
        g->bdata = calloc(1, sizeof(struct cpu_slot));
        return g->bdata ? 0 : -ENOMEM;
}

static void slot_deinit(struct backend *b, struct group *g)
{
        struct cpu_slot *s = g->bdata;

        if (!s)
                return;
        free(s->ws.chunks);
        free(s->ws.arrivals);
        free(s->left);
        free(s);
        g->bdata = NULL;
}

static void destroy(struct backend *be)
{
        struct cpu_backend *cb = (struct cpu_backend *)be;

        pthread_mutex_lock(&cb->lock);
        cb->stopping = 1;
        pthread_cond_broadcast(&cb->cond);
        pthread_mutex_unlock(&cb->lock);
        for (int i = 0; i < cb->nthreads; i++)
                pthread_join(cb->threads[i], NULL);
        free(cb->threads);
        pthread_cond_destroy(&cb->cond);
        pthread_mutex_destroy(&cb->lock);
        free(cb);
}

int backend_cpu_new(int threads, int alt_tiles, int wave_cut, int early, struct backend **out)
{
        struct cpu_backend *cb = calloc(1, sizeof(*cb));
        int rc;

        if (!cb)
                return -ENOMEM;
        cb->b.kind = "cpu";
        cb->early = early;
        snprintf(cb->b.name, sizeof(cb->b.name), "cpu (%d threads)", threads);
        cb->b.units = (uint32_t)threads;
        /* A few work lists per thread: the plan balances them, the pool
         * evens out what the plan could not know (preemption). */
        cb->b.ctas = (uint32_t)threads * 4;
        cb->b.mixed_keys = 1;
        cb->b.dtypes = BACKEND_DTYPE(GEMMD_F32) | BACKEND_DTYPE(GEMMD_F16) |
                       BACKEND_DTYPE(GEMMD_BF16) | BACKEND_DTYPE(GEMMD_F64);
        /* One group computing while the next is formed: more would only
         * split the same threads. */
        cb->b.groups_inflight = 2;
        cb->b.shape = shape;
        if (alt_tiles) {
                cb->b.wide_shape = wide_shape;
                cb->b.narrow_shape = narrow_shape;
        }
        /* Only the worker's cut of groups at one wave (--cpu-wave-cut):
         * no kernel here stays resident. */
        cb->b.resident = wave_cut != 0;
        cb->b.kernel_name = kernel_name;
        cb->b.launch = launch;
        cb->b.launch_any_thread = 1;
        cb->b.loop_launch_pays = 1; /* the worker thread's wake-up is the hop it saves */
        cb->b.slot_init = slot_init;
        cb->b.slot_deinit = slot_deinit;
        cb->b.destroy = destroy;
#ifdef GEMMD_FAULT_INJECTION
        if (getenv("GEMMD_FI_DEVMEM_MS")) {
                cb->b.ipc_open = fi_ipc_open;
                cb->b.ipc_close = fi_devmem_free;
                cb->b.dev_alloc = fi_dev_alloc;
                cb->b.dev_free = fi_devmem_free;
        }
#endif
        pthread_mutex_init(&cb->lock, NULL);
        pthread_cond_init(&cb->cond, NULL);
        cb->threads = calloc((size_t)threads, sizeof(pthread_t));
        if (!cb->threads) {
                rc = -ENOMEM;
                goto err;
        }
        for (cb->nthreads = 0; cb->nthreads < threads; cb->nthreads++) {
                rc = -pthread_create(&cb->threads[cb->nthreads], NULL, pool_main, cb);
                if (!rc) {
                        char name[16];

                        snprintf(name, sizeof(name), "gemmd-cpu%d", cb->nthreads);
                        pthread_setname_np(cb->threads[cb->nthreads], name);
                }
                if (rc)
                        goto err;
        }
        *out = &cb->b;
        return 0;
err:
        destroy(&cb->b);
        return rc;
}

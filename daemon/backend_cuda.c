/*
 * backend_cuda.c - one GPU: a stream and pinned plan buffers per group slot,
 * staging of host operands, the grouped kernels, and a completion thread.
 *
 * A group's launch is one sequence on its slot's stream: copy the host
 * operands in, copy the problems and the plan (one pinned blob, one copy),
 * run the kernel and copy host results out; the completion thread watches
 * the stream. The worker builds the next group's plan into
 * another slot's pinned blob while this one runs. Slots have streams of
 * their own: a group of a few small problems leaves most SMs idle, and the
 * next group then runs beside it rather than after it. Groups in flight
 * together are independent (ops in flight have no order, include/gemmd.h).
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/backend.h"
#include "daemon/cpuacct.h"
#include "daemon/lock.h"
#include "daemon/log.h"
#include "daemon/worker.h"
#include "gemmd.h"
#include "kernels/cuda_gemm.h"

#define EVENT_RING 16

#ifdef GEMMD_FAULT_INJECTION
int cuda_debug_fault(void *stream); /* daemon/fault_cuda.cu */
#endif

/* Device memory a buffer lives in, as the backend's token for it. The
 * base is looked up at every launch: a rebuilt context maps it anew. */
struct cuda_mem {
        void *base; /* NULL when lost with a context */
        int daemon_owned;
};

/* One opened CUDA IPC allocation, shared by every registration of it. */
struct ipc_map {
        struct cuda_mem mem; /* first: the token is a struct cuda_mem * */
        struct ipc_map *next;
        uint8_t handle[64];
        size_t size;
        int refs;
};

/* Device memory the daemon allocated for a client. */
struct dev_mem {
        struct cuda_mem mem;
        struct dev_mem *next;
};

/* An outgrown slot buffer, kept until the backend goes (see grow). */
struct retired {
        struct retired *next;
        void *p;
        int pinned;
};

/* The steps of launch(), timed on the host (worker thread only) and
 * logged at exit: where a group's launch time goes. */
enum { LS_PREPARE, LS_FILL, LS_MAPS, LS_COPY, LS_KERNEL, LS_AFTER, LS_N };
static const char *const ls_names[LS_N] = {"prepare", "fill", "maps", "copy", "kernel", "after"};

struct cuda_backend {
        struct backend b;
        int ordinal;
        uint64_t ls_ns[LS_N], ls_groups;
        struct ipc_map *maps; /* worker thread only */
        struct dev_mem *allocs; /* worker thread only */
        struct cuda_slot *slots; /* every group slot, for a context rebuild */
        cudaStream_t stream;
        /* Start and end events per launch, in a ring indexed by launch
         * number: the gap before launch j needs the end of launch j - 1,
         * which stays in the ring long after its slot is reused. Only the
         * timed launches (2 in every timing_every) record them: a group is
         * done when its slot's stream is (each slot has one group at a
         * time), which needs no event. */
        cudaEvent_t ev_start[EVENT_RING], ev_end[EVENT_RING];
        uint8_t timed[EVENT_RING]; /* whether launch j (at j % EVENT_RING) was */
        uint32_t timing_every;
        /* Launch data of the largest group the config allows (plan, problems,
         * tensor maps): what each slot's blob is allocated at to begin with. */
        size_t blob_init;
        struct retired *retired; /* worker thread only */
        /* Exact f32 groups run split into TF32 parts on the sm_90 kernel
         * (they carry tensor maps); else on fused multiply-adds. */
        int f32_split;
        struct sched_shape wide[8]; /* by key; all zero: no wide tile */
        /* Interprocess events recorded after each launch, with their IPC
         * handles, for clients that wait on the device (Launched). A client
         * that waits on a later recording of the same event only waits
         * longer: the stream is in order. */
        cudaEvent_t ev_ipc[EVENT_RING];
        cudaIpcEventHandle_t ev_ipc_handle[EVENT_RING];
        uint64_t launches;

        /* The completion thread (done_main): watches the launched groups'
         * streams. It polls them for a short while (a small group's
         * completion is then noticed within a microsecond or two) and then
         * blocks in cudaStreamSynchronize (the device is set to blocking
         * sync), so an idle or long-running device burns no core. */
        pthread_t done_thread;
        pthread_mutex_t done_lock;
        pthread_cond_t done_cond;
        struct cuda_slot *done_head, *done_tail;
        int done_stop;
        /* After its last group, the completion thread polls done_head this
         * long before it sleeps (cfg->spin_us), so a steady stream of
         * groups costs no wake-up each. */
        uint64_t spin_ns;

        /* The resident kernel (cfg->resident, cuda_gemm_res_launch): the
         * worker posts groups to it and starts it; the completion thread
         * stops it when the device has been idle for RES_IDLE_NS; anything
         * that may wait for the whole device (a free, a host unregister)
         * stops it first (res_stop). Under res_lock. */
        int res_on;
        int early_on; /* --early-completion (cuda_group.early_*) */
        pthread_mutex_t res_lock;
        struct cuda_res_host *res_host; /* pinned, mapped */
        void *res_area;
        cudaStream_t res_stream;
        uint64_t res_seq; /* the last group posted */
        uint32_t res_rot; /* where the next group's CTAs begin (cuda_res_post.rot) */
        uint64_t res_gen; /* of the last launch */
        int res_alive;    /* launched and not stopped (atomic reads outside the lock) */
        int res_dtype;
        /* Where a resident group's time goes, summed by the completion
         * thread and logged when the backend goes: host time from post
         * to done seen, and on the device, post seen to handed over and
         * handed over to done. */
        uint64_t res_groups, res_host_ns, res_take_ns, res_run_ns;
        uint64_t res_queried_ns; /* when res_query last asked the stream */

        /* The pin thread (pin_main) and its queue of tasks. */
        pthread_t pin_thread;
        pthread_mutex_t pin_lock;
        pthread_cond_t pin_cond;
        struct pin_task *pin_head, *pin_tail;
        int pin_stop;
};

struct cuda_slot {
        struct cuda_backend *cb;
        struct cuda_slot *next_slot;
        struct group *g;
        struct cuda_slot *done_next; /* completion thread's queue */
        uint64_t seq;
        void *h_blob, *d_blob;   /* [kproblems | sproblems | plan blob], pinned and device */
        size_t blob_cap;
        char *d_stage;           /* device copies of host operands */
        size_t stage_cap;
        /* Pinned bounce buffer: the part of the staging area from in_lo on
         * (the bounced operands; pinned ones are copied from where they
         * are), so only as much pinned memory as is bounced. */
        char *h_bounce;
        size_t bounce_cap;
        uint64_t in_lo;
        uint64_t *stage_off;     /* per op and operand, or UINT64_MAX */
        uint8_t *bounce;         /* per op: bit j set if operand j goes through h_bounce */
        uint32_t stage_ops;
        uint64_t out_lo, out_hi; /* the bounced Cs, together at the end of the staging area */
        /* Each slot's groups go on a stream of their own, so that a group
         * that leaves SMs idle (a few small problems) runs beside the one
         * before it instead of behind it. */
        cudaStream_t stream;
        float *d_ws;
        size_t ws_cap;
        uint32_t *d_arr;
        size_t arr_cap;
        /* Its group went to the resident kernel as rseq at host time
         * posted_ns; device clock when handed over and done (res_query). */
        int res;
        uint64_t rseq, rt0, rt1, posted_ns;
        cudaEvent_t ev_fence; /* what the resident kernel waits for (res_post) */
        /* Early completion (cuda_group.early_*): its group's kernel counts
         * arrivals per problem in d_early_cnt and writes early_seq into
         * h_early_flag[i] once op i's C is whole; early_done[i] once the
         * completion thread handed op i back (early_left not yet). A
         * failed group may leave counts behind: early_reset zeroes them
         * before the next. */
        int early, early_reset;
        uint32_t early_seq;
        uint32_t early_left;
        uint32_t *d_early_cnt;
        size_t early_cnt_cap;
        uint32_t *h_early_flag;
        size_t early_flag_cap;
        uint8_t *early_done;
        uint32_t early_done_cap;
};

#define CK(call)                                                                          \
        do {                                                                              \
                cudaError_t e_ = (call);                                                  \
                if (e_ != cudaSuccess) {                                                  \
                        log_err("cuda %d: %s: %s", cb->ordinal, #call, cudaGetErrorString(e_)); \
                        cudaGetLastError();                                               \
                        return -EIO;                                              \
                }                                                                         \
        } while (0)

int backend_cuda_count(void)
{
        int n = 0;

        if (cudaGetDeviceCount(&n) != cudaSuccess) {
                cudaGetLastError();
                return 0;
        }
        return n;
}

static struct sched_shape shape(struct backend *b, uint32_t key)
{
        return cuda_gemm_shape((int)(key & 3), (int)(key >> 2) & 1);
}

static struct sched_shape wide_shape(struct backend *b, uint32_t key)
{
        return ((struct cuda_backend *)b)->wide[key & 7];
}

static const char *kernel_name(struct backend *b, uint32_t key)
{
        const struct cuda_backend *cb = (const struct cuda_backend *)b;

        if (key == GEMMD_F32 && cb->f32_split)
                return "f32-split-tf32-128x128x32";
        return cuda_gemm_kernel_name((int)(key & 3), (int)(key >> 2) & 1);
}

static size_t align256(size_t v)
{
        return (v + 255) & ~(size_t)255;
}

/*
 * The resident kernel. A group it takes costs the worker a few stores
 * into pinned memory instead of a launch (8-12 us of host time on the
 * H100 machine), and the device a poll instead of a launch's round trip.
 * It holds every SM while it runs, so any other kernel, and any call that
 * waits for the whole device, comes after res_stop.
 */
/* Launch data of a group it takes (problems, plan, tensor maps): groups
 * with more go through a launch. */
#define RES_SLOT_BYTES (96u << 10)
/* How long it outlives the device's last group: a steady stream of
 * groups keeps it, an idle device gets its SMs (and its power) back. */
#define RES_IDLE_NS 2000000ull
/* How often the completion thread asks whether it has ended (res_query). */
#define RES_QUERY_NS 20000ull

static void res_stop_locked(struct cuda_backend *cb)
{
        if (!cb->res_alive)
                return;
        __atomic_store_n(&cb->res_host->stop, cb->res_gen, __ATOMIC_RELEASE);
        __atomic_store_n(&cb->res_alive, 0, __ATOMIC_RELEASE);
        log_debug("cuda %d: resident kernel %llu stops after group %llu", cb->ordinal,
                  (unsigned long long)cb->res_gen, (unsigned long long)cb->res_seq);
}

/* Ends the resident kernel (if one runs) once its groups are done. */
static void res_stop(struct cuda_backend *cb)
{
        if (!cb->res_on)
                return;
        pthread_mutex_lock(&cb->res_lock);
        res_stop_locked(cb);
        pthread_mutex_unlock(&cb->res_lock);
}

/* Its pinned and device memory and stream, in the current context; off
 * (with a warning) when they cannot be had. */
static void res_init(struct cuda_backend *cb)
{
        const size_t area = cuda_gemm_res_area_bytes(RES_SLOT_BYTES);

        cb->res_host = NULL;
        cb->res_area = NULL;
        cb->res_alive = 0;
        /* Numbered afresh with the zeroed memory below. */
        cb->res_seq = cb->res_gen = 0;
        cb->res_rot = 0;
        if (cudaMallocHost((void **)&cb->res_host, sizeof(*cb->res_host)) != cudaSuccess ||
            cudaMalloc(&cb->res_area, area) != cudaSuccess || cudaMemset(cb->res_area, 0, area) != cudaSuccess ||
            cudaStreamCreateWithFlags(&cb->res_stream, cudaStreamNonBlocking) != cudaSuccess) {
                log_warn("cuda %d: no resident kernel: %s", cb->ordinal, cudaGetErrorString(cudaGetLastError()));
                cb->res_on = 0;
                return;
        }
        memset(cb->res_host, 0, sizeof(*cb->res_host));
}

/* Posts a group to the resident kernel, starting one for its type if
 * none runs; s->rseq names it. -EAGAIN: its slot still holds a group in
 * flight (more groups in flight than slots), for a launch instead. */
static int res_post(struct cuda_backend *cb, struct cuda_slot *s, int dtype, struct cuda_res_post *rp)
{
        struct cuda_res_post *p;
        uint64_t seq = cb->res_seq + 1;

        if (seq > CUDA_RES_SLOTS &&
            __atomic_load_n(&cb->res_host->done[seq % CUDA_RES_SLOTS].seq, __ATOMIC_ACQUIRE) <
                    seq - CUDA_RES_SLOTS)
                return -EAGAIN;
        pthread_mutex_lock(&cb->res_lock);
        if (cb->res_alive && cb->res_dtype != dtype)
                res_stop_locked(cb);
        if (!cb->res_alive) {
                int rc = 0;

                /* After every kernel launched before it: it takes every SM
                 * and keeps them, so a kernel still waiting for some
                 * would wait for ever. */
                for (struct cuda_slot *o = cb->slots; o && !rc; o = o->next_slot)
                        if (!o->res && (cudaEventRecord(o->ev_fence, o->stream) != cudaSuccess ||
                                        cudaStreamWaitEvent(cb->res_stream, o->ev_fence, 0) != cudaSuccess))
                                rc = -EIO;
                if (!rc)
                        rc = cuda_gemm_res_launch(dtype, cb->res_host, cb->res_area, RES_SLOT_BYTES, cb->res_seq + 1,
                                              cb->res_gen + 1, cb->b.ctas, cb->res_stream);

                if (rc) {
                        pthread_mutex_unlock(&cb->res_lock);
                        log_err("cuda %d: cannot start the resident kernel (%d): %s", cb->ordinal, rc,
                                cudaGetErrorString(cudaGetLastError()));
                        return rc;
                }
                cb->res_gen++;
                cb->res_dtype = dtype;
                log_debug("cuda %d: resident kernel %llu starts at group %llu", cb->ordinal,
                          (unsigned long long)cb->res_gen, (unsigned long long)cb->res_seq + 1);
                __atomic_store_n(&cb->res_alive, 1, __ATOMIC_RELEASE);
        }
        seq = ++cb->res_seq; /* the worker's alone: as checked above */
        p = &cb->res_host->post[seq % CUDA_RES_SLOTS];
        rp->gen = cb->res_gen;
        rp->rot = cb->res_rot;
        cb->res_rot = (cb->res_rot + rp->nctas) % cb->b.ctas;
        rp->seq = p->seq;
        *p = *rp;
        __atomic_store_n(&p->seq, seq, __ATOMIC_RELEASE);
        s->rseq = seq;
        s->posted_ns = now_ns();
        pthread_mutex_unlock(&cb->res_lock);
        return 0;
}

/* Whether a resident group is done: cudaSuccess, cudaErrorNotReady, or the
 * error that ended the kernel before it. */
static cudaError_t res_query(struct cuda_backend *cb, struct cuda_slot *s)
{
        const struct cuda_res_done *d = &cb->res_host->done[s->rseq % CUDA_RES_SLOTS];
        cudaError_t st;

        for (int again = 0;; again = 1) {
                if (__atomic_load_n(&d->seq, __ATOMIC_ACQUIRE) >= s->rseq) {
                        s->rt0 = d->t0;
                        s->rt1 = d->t1;
                        cb->res_groups++;
                        cb->res_host_ns += now_ns() - s->posted_ns;
                        cb->res_take_ns += d->t0 > d->tp ? d->t0 - d->tp : 0;
                        cb->res_run_ns += d->t1 > d->t0 ? d->t1 - d->t0 : 0;
                        return cudaSuccess;
                }
                if (again)
                        break;
                /* Whether the kernel has ended, now and then: each asking
                 * is a driver call of about a microsecond, and the
                 * completion thread polls every group in flight. */
                if (now_ns() - cb->res_queried_ns < RES_QUERY_NS)
                        return cudaErrorNotReady;
                cb->res_queried_ns = now_ns();
                st = cudaStreamQuery(cb->res_stream);
                if (st == cudaErrorNotReady)
                        return st;
        }
        /* The kernel ended without it. */
        return st == cudaSuccess ? cudaErrorLaunchFailure : st;
}

enum mem_kind { MEM_DEVICE, MEM_PINNED };

/* Grows a device or pinned host allocation to at least `need` bytes
 * (geometrically, from 64 KB), zeroing a new device one if asked. The old
 * one is not freed here: cudaFree and cudaFreeHost wait for the whole
 * device, every slot's group, so a grow on the launch path would stall
 * every group in flight for milliseconds. It is retired, and
 * freed with the backend: growing geometrically, the retired buffers hold
 * less than the live ones. */
static int grow(struct cuda_backend *cb, void **p, size_t *cap, size_t need, enum mem_kind kind,
                int zero)
{
        size_t n = *cap ? *cap : 1u << 16;

        if (need <= *cap)
                return 0;
        res_stop(cb); /* an allocation may wait for the device */
        while (n < need)
                n *= 2;
        if (*p) {
                struct retired *r = malloc(sizeof(*r));

                if (!r)
                        return -ENOMEM;
                r->p = *p;
                r->pinned = kind == MEM_PINNED;
                r->next = cb->retired;
                cb->retired = r;
        }
        *p = NULL;
        *cap = 0;
        if (kind == MEM_PINNED)
                CK(cudaMallocHost(p, n));
        else
                CK(cudaMalloc(p, n));
        if (zero && kind == MEM_DEVICE)
                CK(cudaMemset(*p, 0, n));
        *cap = n;
        return 0;
}

/* The bounce buffer's copy of staging offset off (off >= s->in_lo). */
static char *bounced(const struct cuda_slot *s, uint64_t off)
{
        return s->h_bounce + (off - s->in_lo);
}

/* Copies cols columns of `bytes` bytes, ld apart in both. */
static void copy_cols(char *dst, const char *src, uint64_t ld, uint64_t bytes, uint64_t cols)
{
        for (uint64_t c = 0; c < cols; c++)
                memcpy(dst + c * ld, src + c * ld, bytes);
}

/* Grows a pinned host buffer and its device twin, which always have the
 * same size, to at least `need` bytes. */
/* Frees the retired buffers (with nothing in flight: it waits for the
 * device); after a context rebuild they are gone with it: forget them. */
static void free_retired(struct cuda_backend *cb, int forget)
{
        while (cb->retired) {
                struct retired *r = cb->retired;

                cb->retired = r->next;
                if (!forget && r->pinned)
                        cudaFreeHost(r->p);
                else if (!forget)
                        cudaFree(r->p);
                free(r);
        }
}

static int grow_pair(struct cuda_backend *cb, void **h, void **d, size_t *cap, size_t need)
{
        size_t hcap = *cap; /* the twin's size until d has grown too */
        int rc = grow(cb, h, &hcap, need, MEM_PINNED, 0);

        return rc ? rc : grow(cb, d, cap, need, MEM_DEVICE, 0);
}

/* How long the completion thread polls before it blocks. */
#define DONE_SPIN_NS 200000ull

static void operand_dims(const struct op *o, int which, uint64_t *rows, uint64_t *cols);

/* Copies the bounced Cs of a finished group from the pinned buffer to
 * where their requests want them. */
static void unbounce(struct cuda_slot *s)
{
        const struct group *g = s->g;
        const size_t esz = gemmd_dtype_size((enum gemmd_dtype)(g->key & 3));

        if (s->out_hi == s->out_lo)
                return;
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];
                uint64_t rows, cols;

                if (!(s->bounce[i] & 4))
                        continue;
                operand_dims(o, 2, &rows, &cols);
                copy_cols((char *)o->buf[2]->host + o->off[2], bounced(s, s->stage_off[i * 3 + 2]),
                          o->kp.ldc * esz, rows * esz, cols);
        }
}

/* Hands a finished group back to its worker. */
static void finish(struct cuda_backend *cb, struct cuda_slot *s, cudaError_t st)
{
        if (st != cudaSuccess && s->early)
                s->early_reset = 1;
        s->early = 0;
        if (st != cudaSuccess) {
                log_err("cuda %d: group %llu failed: %s", cb->ordinal, (unsigned long long)s->g->id,
                        cudaGetErrorString(st));
                cudaGetLastError();
        } else {
                unbounce(s);
        }
        worker_group_done(s->g, st == cudaSuccess ? 0 : GEMMD_EDEVICE);
}

/* Hands back each op of s's group whose C its kernel has said is whole
 * (cuda_group.early_*), before the group ends: a request of a small
 * problem in a large group is answered when its own tiles are done. */
static void early_scan(struct cuda_slot *s)
{
        uint32_t idx[64], n = 0;

        for (uint32_t i = 0; i < s->g->nops && s->early_left; i++) {
                if (s->early_done[i] ||
                    __atomic_load_n(&s->h_early_flag[i], __ATOMIC_ACQUIRE) != s->early_seq)
                        continue;
                s->early_done[i] = 1;
                s->early_left--;
                idx[n++] = i;
                if (n == 64) {
                        worker_ops_done(s->g, idx, n);
                        n = 0;
                }
        }
        if (n)
                worker_ops_done(s->g, idx, n); /* under one lock, handed back together */
}

/*
 * The completion thread. It polls the streams of every group in flight,
 * not only the oldest: groups run on streams of their own, and a small one
 * launched after a large one finishes first, so its requests are answered
 * without waiting for the large one. When none has finished for
 * DONE_SPIN_NS, it blocks on the oldest.
 */
static void *done_main(void *arg)
{
        struct cuda_backend *cb = arg;
        struct cuda_slot *watched = NULL, **wtail = &watched; /* in launch order */
        uint64_t active = 0, since = 0;

        cpuacct_thread_start(CPU_COMPLETION);
        cudaSetDevice(cb->ordinal);
        for (;;) {
                struct cuda_slot **pp;
                int finished = 0;

                if (!watched || __atomic_load_n(&cb->done_head, __ATOMIC_ACQUIRE)) {
                        pthread_mutex_lock(&cb->done_lock);
                        while (!watched && !cb->done_head && !cb->done_stop) {
                                if (cb->spin_ns && now_ns() - active < cb->spin_ns) {
                                        /* watch() stores done_head atomically. */
                                        pthread_mutex_unlock(&cb->done_lock);
                                        while (!__atomic_load_n(&cb->done_head, __ATOMIC_ACQUIRE) &&
                                               now_ns() - active < cb->spin_ns)
                                                cpu_relax();
                                        pthread_mutex_lock(&cb->done_lock);
                                        continue;
                                }
                                if (__atomic_load_n(&cb->res_alive, __ATOMIC_ACQUIRE)) {
                                        /* The resident kernel outlives the last
                                         * group by RES_IDLE_NS, then stops. */
                                        const uint64_t until = active + RES_IDLE_NS;
                                        struct timespec ts;

                                        if (now_ns() < until) {
                                                clock_gettime(CLOCK_REALTIME, &ts);
                                                ts.tv_nsec += (long)(until - now_ns());
                                                ts.tv_sec += ts.tv_nsec / 1000000000L;
                                                ts.tv_nsec %= 1000000000L;
                                                pthread_cond_timedwait(&cb->done_cond, &cb->done_lock, &ts);
                                                continue;
                                        }
                                        pthread_mutex_unlock(&cb->done_lock);
                                        res_stop(cb);
                                        pthread_mutex_lock(&cb->done_lock);
                                        continue;
                                }
                                pthread_cond_wait(&cb->done_cond, &cb->done_lock);
                        }
                        if (cb->done_head) {
                                if (!watched)
                                        since = now_ns();
                                *wtail = cb->done_head;
                                wtail = &cb->done_tail->done_next;
                                cb->done_head = cb->done_tail = NULL;
                        }
                        pthread_mutex_unlock(&cb->done_lock);
                        if (!watched)
                                break; /* stopping, nothing in flight */
                }
                for (pp = &watched; *pp;) {
                        struct cuda_slot *s = *pp;
                        cudaError_t st = s->res ? res_query(cb, s) : cudaStreamQuery(s->stream);

                        if (st == cudaErrorNotReady) {
                                if (s->early && s->early_left)
                                        early_scan(s);
                                pp = &s->done_next;
                                continue;
                        }
                        *pp = s->done_next;
                        if (!*pp)
                                wtail = pp;
                        finish(cb, s, st);
                        finished = 1;
                }
                if (finished) {
                        active = since = now_ns();
                } else if (now_ns() - since >= DONE_SPIN_NS) {
                        /* A long group: sleep until the oldest is done (a
                         * resident one, or one with ops still to be answered
                         * early, by short naps). */
                        if (watched->res || (watched->early && watched->early_left)) {
                                struct timespec nap = {0, 20000};

                                nanosleep(&nap, NULL);
                        } else {
                                cudaStreamSynchronize(watched->stream);
                                since = now_ns();
                        }
                }
        }
        return NULL;
}

static void watch(struct cuda_backend *cb, struct cuda_slot *s)
{
        s->done_next = NULL;
        pthread_mutex_lock(&cb->done_lock);
        if (cb->done_tail)
                cb->done_tail->done_next = s;
        else
                __atomic_store_n(&cb->done_head, s, __ATOMIC_RELEASE);
        cb->done_tail = s;
        pthread_cond_signal(&cb->done_cond);
        pthread_mutex_unlock(&cb->done_lock);
}

/* Rows and columns of a column-major operand of op o, as validated. */
static void operand_dims(const struct op *o, int which, uint64_t *rows, uint64_t *cols)
{
        const struct gemmd_kproblem *p = &o->kp;

        if (which == 2) {
                *rows = p->m;
                *cols = p->n;
        } else if (p->kind == SCHED_SYR2K) {
                *rows = p->trans_a ? p->k : p->n;
                *cols = p->trans_a ? p->n : p->k;
        } else if (which == 0) {
                *rows = p->trans_a ? p->k : p->m;
                *cols = p->trans_a ? p->m : p->k;
        } else {
                *rows = p->trans_b ? p->n : p->k;
                *cols = p->trans_b ? p->k : p->n;
        }
}

/* Shared memory to page-lock (buf, with a reference), or to unlock and
 * unmap (host, bytes). */
struct pin_task {
        struct pin_task *next;
        struct gbuf *buf;
        void *host;
        uint64_t bytes;
};

static void pin_enqueue(struct cuda_backend *cb, struct pin_task *t)
{
        t->next = NULL;
        pthread_mutex_lock(&cb->pin_lock);
        if (cb->pin_tail)
                cb->pin_tail->next = t;
        else
                cb->pin_head = t;
        cb->pin_tail = t;
        pthread_cond_signal(&cb->pin_cond);
        pthread_mutex_unlock(&cb->pin_lock);
}

/* A buffer's last reference hands its mapping here (any thread). */
static void unpin(void *ctx, void *host, uint64_t bytes)
{
        struct cuda_backend *cb = ctx;
        struct pin_task *t = calloc(1, sizeof(*t));

        if (!t) {
                munmap(host, bytes); /* the driver drops the lock with the pages */
                return;
        }
        t->host = host;
        t->bytes = bytes;
        pin_enqueue(cb, t);
}

/*
 * The pin thread page-locks and unlocks shared memory. Locking a buffer of
 * gigabytes takes the driver a long time (hundreds of milliseconds); on the
 * worker thread that held up every client's groups. Until a buffer is
 * locked its operands go through the bounce buffer.
 */
static void *pin_main(void *arg)
{
        struct cuda_backend *cb = arg;

        cpuacct_thread_start(CPU_PIN);
        cudaSetDevice(cb->ordinal);
        pthread_mutex_lock(&cb->pin_lock);
        for (;;) {
                struct pin_task *t;

                while (!cb->pin_head && !cb->pin_stop)
                        pthread_cond_wait(&cb->pin_cond, &cb->pin_lock);
                if (!(t = cb->pin_head))
                        break; /* stopping, and every task done */
                cb->pin_head = t->next;
                if (!cb->pin_head)
                        cb->pin_tail = NULL;
                pthread_mutex_unlock(&cb->pin_lock);
                res_stop(cb); /* both calls may wait for the device */
                if (t->buf) {
                        struct gbuf *b = t->buf;

                        if (cudaHostRegister(b->host, b->bytes, cudaHostRegisterPortable) == cudaSuccess) {
                                b->unpin = unpin;
                                b->unpin_ctx = cb;
                                __atomic_store_n(&b->pinned, 1, __ATOMIC_RELEASE);
                        } else {
                                cudaGetLastError(); /* works unpinned, only slower */
                        }
                        gbuf_unref(b);
                } else {
                        if (cudaHostUnregister(t->host) != cudaSuccess)
                                cudaGetLastError();
                        munmap(t->host, t->bytes);
                }
                free(t);
                pthread_mutex_lock(&cb->pin_lock);
        }
        pthread_mutex_unlock(&cb->pin_lock);
        return NULL;
}

/* Stops the pin thread once it has done every queued task. */
static void pin_thread_stop(struct cuda_backend *cb)
{
        pthread_mutex_lock(&cb->pin_lock);
        cb->pin_stop = 1;
        pthread_cond_signal(&cb->pin_cond);
        pthread_mutex_unlock(&cb->pin_lock);
        pthread_join(cb->pin_thread, NULL);
}

/* Asks for a session's shared memory to be page-locked the first time a
 * group stages it: copies from and to it are then truly asynchronous, so
 * the worker goes on building the next group while the device copies,
 * instead of waiting on a pageable copy. Inline operands are short-lived
 * and stay pageable. Returns whether b is locked now. */
static int pin(struct cuda_backend *cb, struct gbuf *b)
{
        struct pin_task *t;

        if (b->kind != GBUF_SHM)
                return 0;
        if (__atomic_load_n(&b->pinned, __ATOMIC_ACQUIRE))
                return 1;
        if (__atomic_exchange_n(&b->pin_asked, 1, __ATOMIC_ACQ_REL) || !(t = calloc(1, sizeof(*t))))
                return 0;
        gbuf_ref(b);
        t->buf = b;
        pin_enqueue(cb, t);
        return 0;
}

/* Whether a client waits on a launch event for one of g's requests
 * (Launched messages, which must come before its Completion). */
static int launch_notices(const struct group *g)
{
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->req->notify_launch)
                        return 1;
        return 0;
}

/* Whether the resident kernel takes group g: 16-bit GEMMs on the usual
 * tile, every one on the Hopper kernel, operands in device memory, launch
 * data that fits its slot, and no client waiting on a launch event; and
 * no more tiles than CTAs. Groups on it finish in order, and a larger
 * group holds up the small ones behind it, where on streams of their own
 * a small group launched after it finishes first, so larger groups run
 * better launched. */
static int res_takes(struct cuda_backend *cb, const struct group *g, int nfast, uint32_t nsyr2k, size_t stage,
                     size_t blob, int notify)
{
        const int dt = (int)(g->key & 3);

        if ((dt != GEMMD_F16 && dt != GEMMD_BF16) || nfast != (int)g->nops || nsyr2k || stage ||
            blob > RES_SLOT_BYTES || g->cfg.shape.tn != shape(&cb->b, g->key).tn || !g->plan.nentries ||
            g->plan.nctas > cb->b.ctas || g->tiles > cb->b.ctas || notify)
                return 0;
#ifdef GEMMD_FAULT_INJECTION
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->debug_fault)
                        return 0;
#endif
        return 1;
}

static int launch(struct backend *be, struct group *g)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct cuda_slot *s = g->bdata;
        const struct sched_plan *plan = &g->plan;
        size_t kp_bytes = g->nops * sizeof(struct gemmd_kproblem);
        size_t sp_off = align256(kp_bytes);
        size_t plan_off = sp_off + align256(g->nops * sizeof(struct sched_problem));
        /* Tensor maps of the Hopper path, 64-byte aligned (256 here). */
        size_t tm_off = plan_off + align256(plan->blob_bytes);
        /* Every group but exact f32 on fused multiply-adds (key: dtype in
         * bits 0-1, tf32 in bit 2). */
        size_t tm_bytes = g->key != GEMMD_F32 || cb->f32_split ? cuda_gemm_tmaps_bytes(g->nops) : 0;
        size_t blob = tm_off + tm_bytes, stage = 0, in_lo, in_hi = 0, need_off = 0;
        const int dt = (int)(g->key & 3), notify = launch_notices(g);
        int nfast = 0, early;
        uint32_t nsyr2k = 0;
        size_t esz = gemmd_dtype_size((enum gemmd_dtype)(g->key & 3));
        struct gemmd_kproblem *kp;
        struct cuda_group cg;
        unsigned ring;
        int rc;
        uint64_t lt = now_ns(), lt1, ls[LS_N] = {0};
#define LSTEP(step) (lt1 = now_ns(), ls[step] = lt1 - lt, lt = lt1)

        CK(cudaSetDevice(cb->ordinal));
        s->g = g;
        s->seq = cb->launches++;
        ring = (unsigned)(s->seq % EVENT_RING);
        /* Launches j and j + 1 of every timing_every: the pair also gives
         * the idle gap between them. */
        g->timed = cb->timing_every <= 2 || s->seq % cb->timing_every < 2;
        cb->timed[ring] = (uint8_t)g->timed;
        if (s->stage_ops < g->nops) {
                uint64_t *p = realloc(s->stage_off, (size_t)g->nops * 3 * sizeof(*p));
                uint8_t *q = realloc(s->bounce, g->nops);

                if (p)
                        s->stage_off = p;
                if (q)
                        s->bounce = q;
                if (!p || !q)
                        return -ENOMEM;
                s->stage_ops = g->nops;
        }
        /*
         * Host operands get a place in the staging area. Those in pinned
         * memory are copied straight from it. The others (inline data, and
         * shared memory that could not be pinned) go through the slot's
         * pinned bounce buffer (bounced(), from in_lo on): a copy from pageable
         * memory holds the calling thread until the device has caught up
         * with the stream, and costs tens of microseconds even when small.
         * The bounced operands come after the pinned ones, As and Bs, then
         * Cs, so that each direction is one copy.
         */
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];

                s->bounce[i] = 0;
                for (int j = 0; j < 3; j++) {
                        if (o->buf[j]->kind == GBUF_CUDA) {
                                s->stage_off[i * 3 + j] = UINT64_MAX;
                                continue;
                        }
                        if (!pin(cb, o->buf[j])) {
                                s->bounce[i] |= (uint8_t)(1u << j);
                                continue; /* placed below */
                        }
                        s->stage_off[i * 3 + j] = stage;
                        stage += align256(o->span[j]);
                }
        }
        in_lo = stage;
        s->in_lo = in_lo;
        for (int j = 0; j < 3; j++) {
                if (j == 2)
                        s->out_lo = stage;
                for (uint32_t i = 0; i < g->nops; i++)
                        if (s->bounce[i] & (1u << j)) {
                                s->stage_off[i * 3 + j] = stage;
                                stage += align256(g->ops[i]->span[j]);
                        }
        }
        s->out_hi = stage;
        /* Early completion: 16-bit GEMMs with their operands in device
         * memory (nothing to copy back after the kernel), on a plan; the
         * Hopper kernel alone, checked once the tensor maps are built. The
         * arrivals each problem needs go at the end of the launch data. */
        early = cb->early_on && !stage && plan->nentries && (dt == GEMMD_F16 || dt == GEMMD_BF16) && !notify;
        if (early) {
                need_off = (blob + 15) & ~(size_t)15;
                blob = need_off + g->nops * sizeof(uint32_t);
        }
        if ((rc = grow_pair(cb, &s->h_blob, &s->d_blob, &s->blob_cap, blob)) ||
            (rc = grow(cb, (void **)&s->d_stage, &s->stage_cap, stage, MEM_DEVICE, 0)) ||
            (rc = grow(cb, (void **)&s->h_bounce, &s->bounce_cap, stage - in_lo, MEM_PINNED, 0)))
                return rc;
        if (plan->nsplit) {
                rc = grow(cb, (void **)&s->d_ws, &s->ws_cap, cuda_gemm_ws_bytes(plan, g->cfg.shape),
                          MEM_DEVICE, 0);
                if (!rc)
                        rc = grow(cb, (void **)&s->d_arr, &s->arr_cap,
                                  cuda_gemm_arrivals_bytes(plan), MEM_DEVICE, 1);
                if (rc)
                        return rc;
        }

        LSTEP(LS_PREPARE);
        /* The group's device time starts at its first copy or kernel, not
         * at the host work before them. Pinned host operands are copied as
         * their addresses are resolved, below. */
        if (in_lo > 0 && g->timed)
                CK(cudaEventRecord(cb->ev_start[ring], s->stream));
        kp = s->h_blob;
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];
                uint64_t *addr[3] = {&kp[i].a, &kp[i].b, &kp[i].c};

                kp[i] = o->kp;
                for (int j = 0; j < 3; j++) {
                        uint64_t off = s->stage_off[i * 3 + j], rows, cols, ld;
                        const char *src;
                        char *dst;

                        if (off == UINT64_MAX) {
                                const struct cuda_mem *mem = o->buf[j]->ipc_base;

                                if (!mem->base) {
                                        log_warn("cuda %d: an operand's memory was lost with a "
                                                 "failed context", cb->ordinal);
                                        return GEMMD_EDEVICE;
                                }
                                *addr[j] = (uint64_t)(uintptr_t)mem->base + o->buf[j]->alloc_off +
                                           o->off[j];
                                continue;
                        }
                        dst = s->d_stage + off;
                        *addr[j] = (uint64_t)(uintptr_t)dst;
                        /* A GEMM C with beta == 0 is not read. */
                        if (j == 2 && o->kp.kind == SCHED_GEMM && o->kp.beta == 0.0f)
                                continue;
                        operand_dims(o, j, &rows, &cols);
                        ld = j == 0 ? o->kp.lda : j == 1 ? o->kp.ldb : o->kp.ldc;
                        src = (const char *)o->buf[j]->host + o->off[j];
                        if (s->bounce[i] & (1u << j)) {
                                copy_cols(bounced(s, off), src, ld * esz, rows * esz, cols);
                                if (off + o->span[j] > in_hi)
                                        in_hi = off + o->span[j];
                        } else {
                                CK(cudaMemcpy2DAsync(dst, ld * esz, src, ld * esz, rows * esz, cols,
                                                     cudaMemcpyHostToDevice, s->stream));
                        }
                }
        }
        /* The bounced inputs, in one copy. */
        if (in_hi > in_lo)
                CK(cudaMemcpyAsync(s->d_stage + in_lo, bounced(s, in_lo), in_hi - in_lo,
                                   cudaMemcpyHostToDevice, s->stream));
        memcpy((char *)s->h_blob + sp_off, g->sp, g->nops * sizeof(struct sched_problem));
        memcpy((char *)s->h_blob + plan_off, plan->blob, plan->blob_bytes);
        if (early) {
                /* Both consumer warpgroups of a CTA arrive once per entry. */
                uint32_t *need = (uint32_t *)((char *)s->h_blob + need_off);

                memset(need, 0, g->nops * sizeof(*need));
                for (uint32_t e = 0; e < plan->nentries; e++)
                        need[plan->entries[e].problem] += 2;
        }
        LSTEP(LS_FILL);
        /* Encoded on the host, from the device addresses just resolved. */
        if (tm_bytes) {
                nfast = cuda_gemm_tmaps_build(kp, g->nops, g->cfg.shape, (char *)s->h_blob + tm_off);
                if (nfast < 0)
                        nfast = 0;
                nsyr2k = cuda_gemm_tmaps_syr2k((char *)s->h_blob + tm_off, g->nops);
        }
        /* The worker gives a group the wide tile only when every op takes
         * the Hopper kernel (take_wide); that kernel alone runs it. */
        if (g->cfg.shape.tn != shape(be, g->key).tn && nfast != (int)g->nops) {
                log_err("cuda %d: a group on the wide tile has %u ops the Hopper kernel cannot take",
                        cb->ordinal, g->nops - (uint32_t)nfast);
                return -EINVAL;
        }
        LSTEP(LS_MAPS);
        s->res = cb->res_on && res_takes(cb, g, nfast, nsyr2k, stage, blob, notify);
        if (s->res) {
                struct cuda_res_post rp;

                memset(&rp, 0, sizeof(rp));
                /* Pinned: the same address on the device (res_init). */
                rp.src = (uint64_t)(uintptr_t)s->h_blob;
                rp.bytes = (uint32_t)((blob + 15) & ~(size_t)15);
                rp.nprobs = g->nops;
                rp.nctas = plan->nctas;
                rp.probs = 0;
                rp.cta_begin = plan_off + plan->off_cta_begin;
                rp.entries = plan_off + plan->off_entries;
                rp.split_parts = plan_off + plan->off_split_parts;
                rp.split_ws = plan_off + plan->off_split_ws;
                rp.tmaps = tm_off;
                rp.ws = plan->nsplit ? (uint64_t)(uintptr_t)s->d_ws : 0;
                rp.arrivals = plan->nsplit ? (uint64_t)(uintptr_t)s->d_arr : 0;
                rc = res_post(cb, s, (int)(g->key & 3), &rp);
                if (!rc) {
                        g->resident = 1;
                        watch(cb, s);
                        return 0;
                }
                if (rc != -EAGAIN)
                        return rc;
                s->res = 0;
        }
        /* Any other kernel needs the SMs the resident one holds. */
        res_stop(cb);
        if (in_lo == 0 && g->timed)
                CK(cudaEventRecord(cb->ev_start[ring], s->stream));
        /* A small group whose every problem takes the Hopper kernel sends
         * its launch data with the launch (cuda_group.inline_*): no copy
         * before the kernel. */
        const int inl = blob <= CUDA_GEMM_INLINE_MAX && nfast == (int)g->nops && cuda_gemm_fast_available();

        if (!inl)
                CK(cudaMemcpyAsync(s->d_blob, s->h_blob, blob, cudaMemcpyHostToDevice, s->stream));
        memset(&cg, 0, sizeof(cg));
        if (inl) {
                cg.inline_host = s->h_blob;
                cg.inline_dev = (uint64_t)(uintptr_t)s->d_blob;
                cg.inline_bytes = (uint32_t)blob;
        }
        cg.problems = s->d_blob;
        cg.nproblems = g->nops;
        cg.dtype = (int)(g->key & 3);
        cg.tf32 = (int)(g->key >> 2) & 1;
        cg.plan_blob = plan->nentries ? (char *)s->d_blob + plan_off : NULL;
        cg.plan = plan;
        cg.cfg = g->cfg;
        cg.ws = plan->nsplit ? s->d_ws : NULL;
        cg.arrivals = plan->nsplit ? s->d_arr : NULL;
        cg.tmaps = nfast ? (char *)s->d_blob + tm_off : NULL;
        cg.nfast = (uint32_t)nfast;
        cg.nfast_syr2k = nsyr2k;
        s->early = early && nfast == (int)g->nops && !nsyr2k;
        if (s->early) {
                size_t had = s->early_flag_cap;

                if ((rc = grow(cb, (void **)&s->d_early_cnt, &s->early_cnt_cap, g->nops * sizeof(uint32_t),
                               MEM_DEVICE, 1)) ||
                    (rc = grow(cb, (void **)&s->h_early_flag, &s->early_flag_cap, g->nops * sizeof(uint32_t),
                               MEM_PINNED, 0))) {
                        s->early = 0;
                        return rc;
                }
                if (s->early_flag_cap != had)
                        memset(s->h_early_flag, 0, s->early_flag_cap);
                if (s->early_reset) {
                        CK(cudaMemsetAsync(s->d_early_cnt, 0, s->early_cnt_cap, s->stream));
                        s->early_reset = 0;
                }
                if (s->early_done_cap < g->nops) {
                        uint8_t *d = realloc(s->early_done, g->nops);

                        if (!d) {
                                s->early = 0;
                                return -ENOMEM;
                        }
                        s->early_done = d;
                        s->early_done_cap = g->nops;
                }
                memset(s->early_done, 0, g->nops);
                s->early_left = g->nops;
                /* Nonzero (the flags start at 0) and new to the slot. */
                s->early_seq = (uint32_t)(s->seq % 0xffffffffu) + 1;
                cg.early_cnt = s->d_early_cnt;
                cg.early_need = (const uint32_t *)((char *)s->d_blob + need_off);
                cg.early_flag = s->h_early_flag;
                cg.early_seq = s->early_seq;
        }
        LSTEP(LS_COPY);
        rc = cuda_gemm_launch(&cg, s->stream);
        LSTEP(LS_KERNEL);
        if (rc) {
                log_err("cuda %d: kernel launch failed (%d)", cb->ordinal, rc);
                return rc;
        }
#ifdef GEMMD_FAULT_INJECTION
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->debug_fault) {
                        log_warn("cuda %d: injecting a device fault (debug op)", cb->ordinal);
                        cuda_debug_fault(s->stream);
                        break;
                }
#endif
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];
                uint64_t off = s->stage_off[i * 3 + 2], rows, cols;

                if (off == UINT64_MAX || (s->bounce[i] & 4))
                        continue;
                operand_dims(o, 2, &rows, &cols);
                CK(cudaMemcpy2DAsync((char *)o->buf[2]->host + o->off[2], o->kp.ldc * esz,
                                     s->d_stage + off, o->kp.ldc * esz, rows * esz, cols,
                                     cudaMemcpyDeviceToHost, s->stream));
        }
        if (s->out_hi > s->out_lo)
                CK(cudaMemcpyAsync(bounced(s, s->out_lo), s->d_stage + s->out_lo, s->out_hi - s->out_lo,
                                   cudaMemcpyDeviceToHost, s->stream));
        if (g->timed)
                CK(cudaEventRecord(cb->ev_end[ring], s->stream));
        /* The interprocess event only when a client will wait on it: each
         * record is an API call on the launch path. */
        if (notify) {
                CK(cudaEventRecord(cb->ev_ipc[ring], s->stream));
                /* Before the group is watched, so it cannot complete first. */
                worker_notify_launch(g, (const uint8_t *)&cb->ev_ipc_handle[ring], cb->ordinal);
        }
        LSTEP(LS_AFTER);
#undef LSTEP
        for (int i = 0; i < LS_N; i++)
                cb->ls_ns[i] += ls[i];
        cb->ls_groups++;
        watch(cb, s);
        return 0;
}

static void collect(struct backend *be, struct group *g, uint64_t *device_ns, uint64_t *gap_ns)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct cuda_slot *s = g->bdata;
        unsigned ring = (unsigned)(s->seq % EVENT_RING);
        unsigned prev = (ring + EVENT_RING - 1) % EVENT_RING;
        float ms;

        *device_ns = 0;
        if (s->res) {
                /* The device clock, from hand-over to done; no gap. */
                *device_ns = s->rt1 > s->rt0 ? s->rt1 - s->rt0 : 0;
                return;
        }
        if (cudaEventElapsedTime(&ms, cb->ev_start[ring], cb->ev_end[ring]) == cudaSuccess)
                *device_ns = (uint64_t)(ms * 1e6);
        /* Not measured when launch j - 1 was not timed, or has not finished
         * yet (groups on different streams finish in any order). */
        if (s->seq > 0 && cb->timed[prev] &&
            cudaEventElapsedTime(&ms, cb->ev_end[prev], cb->ev_start[ring]) == cudaSuccess)
                *gap_ns = ms > 0 ? (uint64_t)(ms * 1e6) : 0;
        cudaGetLastError();
}

typedef int (*addr_range_fn)(unsigned long long *base, size_t *size, unsigned long long dptr);

/* The true extent of the allocation that holds p, from the driver. */
static int alloc_range(void *p, void **base, size_t *size)
{
        static addr_range_fn range;
        enum cudaDriverEntryPointQueryResult q;
        unsigned long long b;

        if (!range && (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&range,
                                                        12000, cudaEnableDefault, &q) != cudaSuccess ||
                       q != cudaDriverEntryPointSuccess))
                return -ENOSYS;
        if (range(&b, size, (unsigned long long)(uintptr_t)p) != 0)
                return -EIO;
        *base = (void *)(uintptr_t)b;
        return 0;
}

static int ipc_open(struct backend *be, const uint8_t handle[64], uint64_t offset, uint64_t bytes,
                    uint64_t *addr, void **token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct ipc_map *m;
        cudaIpcMemHandle_t h;
        void *base;

        for (m = cb->maps; m; m = m->next)
                if (!memcmp(m->handle, handle, 64))
                        break;
        if (!m) {
                m = calloc(1, sizeof(*m));
                if (!m)
                        return -ENOMEM;
                memcpy(m->handle, handle, 64);
                memcpy(&h, handle, sizeof(h));
                CK(cudaSetDevice(cb->ordinal));
                if (cudaIpcOpenMemHandle(&m->mem.base, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
                        log_warn("cuda %d: cudaIpcOpenMemHandle: %s", cb->ordinal,
                                 cudaGetErrorString(cudaGetLastError()));
                        free(m);
                        return GEMMD_EINVAL;
                }
                /* The client's claim is checked against what the driver says
                 * the allocation really is. */
                if (alloc_range(m->mem.base, &base, &m->size) || base != m->mem.base) {
                        log_warn("cuda %d: cannot read the extent of an IPC allocation", cb->ordinal);
                        cudaIpcCloseMemHandle(m->mem.base);
                        free(m);
                        return GEMMD_EDEVICE;
                }
                m->next = cb->maps;
                cb->maps = m;
        }
        if (offset > m->size || bytes > m->size - offset) {
                if (m->refs == 0) {
                        cb->maps = m->next;
                        cudaIpcCloseMemHandle(m->mem.base);
                        free(m);
                }
                return GEMMD_EBOUNDS;
        }
        m->refs++;
        *addr = (uint64_t)(uintptr_t)m->mem.base + offset;
        *token = m;
        return 0;
}

static void ipc_close(struct backend *be, void *token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct ipc_map *m = token, **pp;

        if (--m->refs > 0)
                return;
        for (pp = &cb->maps; *pp; pp = &(*pp)->next)
                if (*pp == m) {
                        *pp = m->next;
                        break;
                }
        cudaSetDevice(cb->ordinal);
        res_stop(cb); /* the close may wait for the device */
        /* Groups that used it are done: their ops held the buffer. */
        if (cudaIpcCloseMemHandle(m->mem.base) != cudaSuccess)
                log_warn("cuda %d: cudaIpcCloseMemHandle: %s", cb->ordinal,
                         cudaGetErrorString(cudaGetLastError()));
        free(m);
}

static int dev_alloc(struct backend *be, uint64_t bytes, uint64_t *addr, uint8_t handle[64],
                     void **token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        cudaIpcMemHandle_t h;
        void *p;

        CK(cudaSetDevice(cb->ordinal));
        res_stop(cb); /* the allocation may wait for the device */
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
                cudaGetLastError();
                return -ENOMEM;
        }
        if (cudaIpcGetMemHandle(&h, p) != cudaSuccess) {
                cudaGetLastError();
                cudaFree(p);
                return GEMMD_EDEVICE;
        }
        struct dev_mem *d = calloc(1, sizeof(*d));

        if (!d) {
                cudaFree(p);
                return -ENOMEM;
        }
        d->mem.base = p;
        d->mem.daemon_owned = 1;
        d->next = cb->allocs;
        cb->allocs = d;
        memcpy(handle, &h, 64);
        *addr = (uint64_t)(uintptr_t)p;
        *token = d;
        return 0;
}

static void dev_free(struct backend *be, void *token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct dev_mem *d = token, **pp;

        for (pp = &cb->allocs; *pp; pp = &(*pp)->next)
                if (*pp == d) {
                        *pp = d->next;
                        break;
                }
        cudaSetDevice(cb->ordinal);
        res_stop(cb); /* cudaFree waits for the device */
        /* Groups that used it are done: their ops held the buffer. */
        if (d->mem.base && cudaFree(d->mem.base) != cudaSuccess)
                log_warn("cuda %d: cudaFree: %s", cb->ordinal, cudaGetErrorString(cudaGetLastError()));
        free(d);
}

/* Creates the stream and the events of a (new) context. */
static int make_stream_events(struct cuda_backend *cb)
{
        CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
        CK(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
        for (int i = 0; i < EVENT_RING; i++) {
                CK(cudaEventCreate(&cb->ev_start[i]));
                CK(cudaEventCreate(&cb->ev_end[i]));
                CK(cudaEventCreateWithFlags(&cb->ev_ipc[i],
                                            cudaEventInterprocess | cudaEventDisableTiming));
                CK(cudaIpcGetEventHandle(&cb->ev_ipc_handle[i], cb->ev_ipc[i]));
        }
        return 0;
}

/*
 * After a failed group, with nothing in flight: a sticky error (an illegal
 * address, say) leaves the context unusable, so it is destroyed and built
 * again. Everything of the old context goes with it: the slots' buffers
 * (they regrow at the next launch), the events (clients open the new ones
 * from the next Launched), and the mappings of clients' memory, which are
 * opened again. Memory the daemon had allocated for clients is lost: ops
 * on it fail until the client frees it. Returns 0 when the device works.
 */
static int recover(struct backend *be)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        cudaError_t e;

        cudaSetDevice(cb->ordinal);
        res_stop(cb);
        e = cudaDeviceSynchronize();
        if (e == cudaSuccess) {
                cudaGetLastError();
                return 0; /* not sticky: the context is fine */
        }
        log_warn("cuda %d: %s: rebuilding the context", cb->ordinal, cudaGetErrorString(e));
        cudaDeviceReset();
        cuda_gemm_forget_attributes();
        free_retired(cb, 1);
        for (struct cuda_slot *s = cb->slots; s; s = s->next_slot) {
                s->h_blob = s->d_blob = NULL;
                s->blob_cap = 0;
                s->d_stage = s->h_bounce = NULL;
                s->stage_cap = s->bounce_cap = 0;
                s->d_ws = NULL;
                s->ws_cap = 0;
                s->d_arr = NULL;
                s->arr_cap = 0;
                s->d_early_cnt = NULL;
                s->early_cnt_cap = 0;
                s->h_early_flag = NULL;
                s->early_flag_cap = 0;
                s->early = s->early_reset = 0;
        }
        for (struct dev_mem *d = cb->allocs; d; d = d->next)
                d->mem.base = NULL;
        cudaGetLastError();
        CK(cudaSetDevice(cb->ordinal));
        if (make_stream_events(cb))
                return -EIO;
        for (struct cuda_slot *s = cb->slots; s; s = s->next_slot) {
                CK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
                CK(cudaEventCreateWithFlags(&s->ev_fence, cudaEventDisableTiming));
        }
        if (cb->res_on)
                res_init(cb);
        for (struct ipc_map *m = cb->maps; m; m = m->next) {
                cudaIpcMemHandle_t h;

                memcpy(&h, m->handle, sizeof(h));
                if (cudaIpcOpenMemHandle(&m->mem.base, h, cudaIpcMemLazyEnablePeerAccess) !=
                    cudaSuccess) {
                        log_warn("cuda %d: cannot map a client's memory again: %s", cb->ordinal,
                                 cudaGetErrorString(cudaGetLastError()));
                        m->mem.base = NULL;
                }
        }
        /* A context rebuilt in a process whose old context took a sticky
         * error is not always usable (CUDA documents only a new process as
         * a cure): prove it with a small round trip before trusting it. */
        {
                void *probe = NULL;
                int ok = cudaMalloc(&probe, 4096) == cudaSuccess &&
                         cudaMemsetAsync(probe, 0x5a, 4096, cb->stream) == cudaSuccess &&
                         cudaStreamSynchronize(cb->stream) == cudaSuccess;

                if (probe)
                        cudaFree(probe);
                if (!ok) {
                        log_err("cuda %d: the rebuilt context does not work: %s", cb->ordinal,
                                cudaGetErrorString(cudaGetLastError()));
                        return -EIO;
                }
        }
        log_info("cuda %d: context rebuilt, serving again", cb->ordinal);
        return 0;
}

static int slot_init(struct backend *be, struct group *g)
{
        struct cuda_slot *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        s->cb = (struct cuda_backend *)be;
        cudaSetDevice(s->cb->ordinal);
        if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess) {
                cudaGetLastError();
                free(s);
                return -EIO;
        }
        if (cudaEventCreateWithFlags(&s->ev_fence, cudaEventDisableTiming) != cudaSuccess) {
                cudaGetLastError();
                cudaStreamDestroy(s->stream);
                free(s);
                return -EIO;
        }
        /* Launch data of any group the limits allow, from the start: no
         * allocation on the launch path (see grow). Best effort. */
        if (grow_pair(s->cb, &s->h_blob, &s->d_blob, &s->blob_cap, s->cb->blob_init))
                log_warn("cuda %d: cannot allocate %zu bytes of launch data ahead", s->cb->ordinal,
                         s->cb->blob_init);
        s->next_slot = s->cb->slots;
        s->cb->slots = s;
        g->bdata = s;
        return 0;
}

static void slot_deinit(struct backend *be, struct group *g)
{
        struct cuda_slot *s = g->bdata;

        if (!s)
                return;
        cudaSetDevice(s->cb->ordinal);
        res_stop(s->cb); /* the frees wait for the device */
        cudaFreeHost(s->h_blob);
        cudaFree(s->d_blob);
        cudaFree(s->d_stage);
        cudaFreeHost(s->h_bounce);
        cudaFree(s->d_ws);
        cudaFree(s->d_arr);
        cudaFree(s->d_early_cnt);
        cudaFreeHost(s->h_early_flag);
        cudaStreamDestroy(s->stream);
        cudaEventDestroy(s->ev_fence);
        free(s->early_done);
        free(s->stage_off);
        free(s->bounce);
        free(s);
        g->bdata = NULL;
}

static void destroy(struct backend *be)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;

        cudaSetDevice(cb->ordinal);
        res_stop(cb);
        cudaDeviceSynchronize();
        free_retired(cb, 0);
        pthread_mutex_lock(&cb->done_lock);
        cb->done_stop = 1;
        pthread_cond_signal(&cb->done_cond);
        pthread_mutex_unlock(&cb->done_lock);
        pthread_join(cb->done_thread, NULL);
        pthread_cond_destroy(&cb->done_cond);
        pthread_mutex_destroy(&cb->done_lock);
        /* Every buffer is released by now; the thread finishes the unlocks
         * queued before it stops. */
        pin_thread_stop(cb);
        pthread_cond_destroy(&cb->pin_cond);
        pthread_mutex_destroy(&cb->pin_lock);
        for (int i = 0; i < EVENT_RING; i++) {
                cudaEventDestroy(cb->ev_start[i]);
                cudaEventDestroy(cb->ev_end[i]);
                cudaEventDestroy(cb->ev_ipc[i]);
        }
        cudaStreamDestroy(cb->stream);
        if (cb->ls_groups) {
                char line[256];
                int n = 0;

                for (int i = 0; i < LS_N && n < (int)sizeof(line); i++)
                        n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%s %.2f", i ? ", " : "",
                                      ls_names[i], cb->ls_ns[i] / 1e3 / cb->ls_groups);
                log_info("cuda %d: launch path, host us per launched group (%llu groups): %s", cb->ordinal,
                         (unsigned long long)cb->ls_groups, line);
        }
        if (cb->res_groups)
                log_info("cuda %d: resident kernel: %llu groups in %llu launches; per group %.1f us from "
                         "post to done seen, of which on the device %.1f us from post seen to handed over "
                         "and %.1f us from handed over to done",
                         cb->ordinal, (unsigned long long)cb->res_groups, (unsigned long long)cb->res_gen,
                         cb->res_host_ns / 1e3 / cb->res_groups, cb->res_take_ns / 1e3 / cb->res_groups,
                         cb->res_run_ns / 1e3 / cb->res_groups);
        if (cb->res_on) {
                cudaFreeHost(cb->res_host);
                cudaFree(cb->res_area);
                cudaStreamDestroy(cb->res_stream);
        }
        pthread_mutex_destroy(&cb->res_lock);
        free(cb);
}

int backend_cuda_new(int ordinal, const struct gemmd_config *cfg, struct backend **out)
{
        struct cuda_backend *cb = calloc(1, sizeof(*cb));
        struct cudaDeviceProp prop;

        if (!cb)
                return -ENOMEM;
        cb->ordinal = ordinal;
        cb->spin_ns = cfg->spin_us * 1000ull;
        cb->timing_every = cfg->timing_every;
        {
                /* Every op has a tile: a group has at most that many ops.
                 * Its plan: a CTA index, an entry per tile, and at most as
                 * many again for split mode's cut tiles. */
                const size_t tiles = cfg->max_group_tiles, ops = tiles < cfg->max_group_ops ? tiles : cfg->max_group_ops;

                cb->blob_init = align256(ops * sizeof(struct gemmd_kproblem)) +
                                align256(ops * sizeof(struct sched_problem)) +
                                align256((2 * tiles + 1024) * sizeof(struct sched_entry)) +
                                cuda_gemm_tmaps_bytes((uint32_t)ops);
                /* Past this (limits raised far beyond the defaults), the
                 * rare larger group grows its slot's buffer. */
                if (cb->blob_init > (64u << 20))
                        cb->blob_init = 64u << 20;
        }
        /* Blocking waits sleep instead of spinning (make_stream_events sets
         * the flag): the completion thread spins only as long as it chooses. */
        if (cudaSetDevice(ordinal) != cudaSuccess ||
            cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess || make_stream_events(cb)) {
                log_err("cuda %d: cannot initialize: %s", ordinal,
                        cudaGetErrorString(cudaGetLastError()));
                free(cb);
                return -EIO;
        }
        cb->f32_split = !cfg->f32_ffma && cuda_gemm_fast_available();
        /* The kernel writes the flags into pinned memory at its host address. */
        /* A worker in another process (--device-process) answers at the
         * group's end (worker_ops_done). */
        cb->early_on = cfg->early_completion && !cfg->device_process && cuda_gemm_fast_available() &&
                       prop.unifiedAddressing && prop.canMapHostMemory;
        pthread_mutex_init(&cb->res_lock, NULL);
        /* The resident kernel reads launch data where the host wrote it:
         * pinned memory at the same address on the device. */
        cb->res_on = cfg->resident && cuda_gemm_fast_available() && prop.unifiedAddressing &&
                     prop.canMapHostMemory;
        if (cfg->resident && !cb->res_on)
                log_warn("cuda %d: no resident kernel on this device (it needs sm_90 and mapped host memory)",
                         ordinal);
        if (cb->res_on)
                res_init(cb);
        for (uint32_t k = 0; k < 8; k++)
                cb->wide[k] = cuda_gemm_shape_wide((int)(k & 3), (int)(k >> 2) & 1);
        lock_init(&cb->done_lock);
        pthread_cond_init(&cb->done_cond, NULL);
        pthread_mutex_init(&cb->pin_lock, NULL);
        pthread_cond_init(&cb->pin_cond, NULL);
        if (pthread_create(&cb->pin_thread, NULL, pin_main, cb) != 0) {
                log_err("cuda %d: cannot start the pin thread", ordinal);
                cudaStreamDestroy(cb->stream);
                free(cb);
                return -EAGAIN;
        }
        if (pthread_create(&cb->done_thread, NULL, done_main, cb) != 0) {
                log_err("cuda %d: cannot start the completion thread", ordinal);
                pin_thread_stop(cb);
                cudaStreamDestroy(cb->stream);
                free(cb);
                return -EAGAIN;
        }
        {
                char name[16];

                snprintf(name, sizeof(name), "gemmd-done%d", ordinal);
                pthread_setname_np(cb->done_thread, name);
                snprintf(name, sizeof(name), "gemmd-pin%d", ordinal);
                pthread_setname_np(cb->pin_thread, name);
        }
        cb->b.kind = "cuda";
        snprintf(cb->b.name, sizeof(cb->b.name), "%.63s", prop.name);
        cb->b.index = ordinal;
        cb->b.units = (uint32_t)prop.multiProcessorCount;
        cb->b.ctas = (uint32_t)prop.multiProcessorCount;
        cb->b.memory_bytes = prop.totalGlobalMem;
        cb->b.mixed_keys = 0;
        /* The dtypes the kernels run; f64 joins once kernels/ has it. */
        cb->b.dtypes = BACKEND_DTYPE(GEMMD_F32) | BACKEND_DTYPE(GEMMD_F16) | BACKEND_DTYPE(GEMMD_BF16);
        /* Each in flight on a stream of its own: four let small groups
         * pass large ones, and more only added variance. */
        cb->b.groups_inflight = 4;
        cb->b.shape = shape;
        cb->b.wide_shape = wide_shape;
        cb->b.kernel_name = kernel_name;
        cb->b.launch = launch;
        cb->b.collect = collect;
        cb->b.ipc_open = ipc_open;
        cb->b.ipc_close = ipc_close;
        cb->b.dev_alloc = dev_alloc;
        cb->b.recover = recover;
        cb->b.dev_free = dev_free;
        cb->b.slot_init = slot_init;
        cb->b.slot_deinit = slot_deinit;
        cb->b.destroy = destroy;
        *out = &cb->b;
        return 0;
}

/*
 * cuda_backend.h - the CUDA backend's own parts, shared by its files:
 * backend_cuda.c (the backend's life: creation, context rebuild, slots,
 * destruction), cuda_launch.c (a group's launch), cuda_completion.c (the
 * completion thread), cuda_memory.c (buffers, pinning, device memory of
 * clients) and cuda_resident.c (the resident kernel).
 *
 * One GPU: a stream and pinned plan buffers per group slot, staging of
 * host operands, the grouped kernels, and a completion thread. A group's
 * launch is one sequence on its slot's stream: copy the host operands in,
 * copy the problems and the plan (one pinned blob, one copy), run the
 * kernel and copy host results out; the completion thread watches the
 * stream. The worker builds the next group's plan into another slot's
 * pinned blob while this one runs. Slots have streams of their own: a
 * group of a few small problems leaves most SMs idle, and the next group
 * then runs beside it rather than after it. Groups in flight together are
 * independent (ops in flight have no order, include/gemmd.h).
 */
#ifndef GEMMD_CUDA_BACKEND_H
#define GEMMD_CUDA_BACKEND_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "daemon/backend.h"
#include "daemon/log.h"
#include "daemon/worker.h"
#include "kernels/cuda_gemm.h"

#define EVENT_RING 16

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

struct cuda_backend {
        struct backend b;
        int ordinal;
        uint64_t ls_ns[LS_N], ls_groups;
        /* The same for groups posted to the resident kernel: its steps up
         * to the maps, then the post (in LS_COPY's place). */
        uint64_t ps_ns[LS_COPY + 1], ps_groups;
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
        struct sched_shape narrow[8]; /* by key; all zero: no narrow tile */
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
        int words_on; /* the GPU stores clients' completion words (cuda_group.early_word) */
        pthread_mutex_t res_lock;
        struct cuda_res_host *res_host; /* pinned, mapped */
        struct cuda_res_posts *res_posts; /* pinned, mapped, write-combined: written only */
        void *res_area;
        cudaStream_t res_stream;
        uint64_t res_seq; /* the last group posted */
        uint32_t res_rot; /* where the next group's CTAs begin (cuda_res_post.rot) */
        uint64_t res_gen; /* of the last launch */
        int res_alive;    /* launched and not stopped (atomic reads outside the lock) */
        int res_dtype;
        uint32_t res_readers; /* CTAs reading the posts (cfg->resident_readers) */
        /* Where a resident group's time goes, summed by the completion
         * thread and logged when the backend goes: host time from post
         * to done seen, and on the device, post seen to handed over and
         * handed over to done. */
        uint64_t res_groups, res_host_ns, res_take_ns, res_run_ns;
        /* A GEMMD_RTRACE build's finer steps of handed over to done
         * (cuda_res_done.pad: mark seen, first stage full, C's stores
         * issued, last arrival counted; then done), summed likewise. */
        uint64_t res_tr_groups;
        int64_t res_tr_ns[5];
        uint64_t res_queried_ns; /* when res_query last asked the stream */
        /* Closes of clients' memory (map_close, worker thread): how many,
         * the time spent stopping the resident kernel for them and in the
         * driver's close, and the longest; logged when the backend goes. */
        uint64_t close_n, close_stop_ns, close_unmap_ns, close_max_ns;

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
        /* Packed copies of operands the Hopper kernel cannot read in place (cuda_gemm_pack_bytes). */
        void *d_pack;
        size_t pack_cap;
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

/* Launch data of a group it takes (problems, plan, tensor maps): groups
 * with more go through a launch. */
#define RES_SLOT_BYTES (96u << 10)
/* How long it outlives the device's last group: a steady stream of
 * groups keeps it, an idle device gets its SMs (and its power) back. */
#define RES_IDLE_NS 2000000ull

enum mem_kind { MEM_DEVICE, MEM_PINNED };

static inline size_t align256(size_t v)
{
        return (v + 255) & ~(size_t)255;
}

static inline size_t align64(size_t v)
{
        return (v + 63) & ~(size_t)63;
}

/* The bounce buffer's copy of staging offset off (off >= s->in_lo). */
static inline char *bounced(const struct cuda_slot *s, uint64_t off)
{
        return s->h_bounce + (off - s->in_lo);
}

/* Copies cols columns of `bytes` bytes, ld apart in both. */
static inline void copy_cols(char *dst, const char *src, uint64_t ld, uint64_t bytes, uint64_t cols)
{
        for (uint64_t c = 0; c < cols; c++)
                memcpy(dst + c * ld, src + c * ld, bytes);
}

/* backend_cuda.c */
/* The tile of a key's kernel (struct backend's shape). */
struct sched_shape shape(struct backend *b, uint32_t key);

/* cuda_launch.c */
/* Launches group g (struct backend's launch). */
int launch(struct backend *be, struct group *g);
/* Rows and columns of a column-major operand of op o, as validated. */
void operand_dims(const struct op *o, int which, uint64_t *rows, uint64_t *cols);

/* cuda_completion.c */
/* The completion thread's body (arg: the backend). */
void *done_main(void *arg);
/* Hands launched slot s to the completion thread. */
void watch(struct cuda_backend *cb, struct cuda_slot *s);
/* A finished group's device time and the idle gap before it (struct
 * backend's collect). */
void collect(struct backend *be, struct group *g, uint64_t *device_ns, uint64_t *gap_ns);

/* cuda_memory.c */
int grow(struct cuda_backend *cb, void **p, size_t *cap, size_t need, enum mem_kind kind, int zero);
int grow_pair(struct cuda_backend *cb, void **h, void **d, size_t *cap, size_t need);
void free_retired(struct cuda_backend *cb, int forget);
int pin(struct cuda_backend *cb, struct gbuf *b);
/* The pin thread's body (arg: the backend), and its stop. */
void *pin_main(void *arg);
void pin_thread_stop(struct cuda_backend *cb);
/* struct backend's device memory calls. */
int ipc_open(struct backend *be, const uint8_t handle[64], uint64_t offset, uint64_t bytes,
             uint64_t *addr, void **token);
void ipc_close(struct backend *be, void *token);
int dev_alloc(struct backend *be, uint64_t bytes, uint64_t *addr, uint8_t handle[64], void **token);
void dev_free(struct backend *be, void *token);

/* cuda_resident.c */
void res_stop(struct cuda_backend *cb);
void res_init(struct cuda_backend *cb);
void res_free(struct cuda_backend *cb);
int res_post(struct cuda_backend *cb, struct cuda_slot *s, int dtype, struct cuda_res_post *rp, const void *blob);
cudaError_t res_query(struct cuda_backend *cb, struct cuda_slot *s);

#endif

/*
 * cuda_resident.c - the CUDA backend's resident kernel (cuda_backend.h):
 * started, fed with groups through pinned memory, asked whether a group
 * is done, and stopped.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "daemon/cuda_backend.h"
#include "kernels/res_post.h"

/*
 * The resident kernel. A group it takes costs the worker a few stores
 * into pinned memory instead of a launch (8-12 us of host time on the
 * H100 machine), and the device a poll instead of a launch's round trip.
 * It holds every SM while it runs, so any other kernel, and any call that
 * waits for the whole device, comes after res_stop.
 */
/* How often the completion thread asks whether it has ended (res_query). */
#define RES_QUERY_NS 20000ull

/* Orders every store before it (write-combined ones too) before every
 * store after it, and sends the write-combining buffers out. */
static inline void store_fence(void)
{
#if defined(__x86_64__) || defined(__i386__)
        __asm__ __volatile__("sfence" ::: "memory");
#else
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

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
void res_stop(struct cuda_backend *cb)
{
        if (!cb->res_on)
                return;
        pthread_mutex_lock(&cb->res_lock);
        res_stop_locked(cb);
        pthread_mutex_unlock(&cb->res_lock);
}

/* Frees its pinned and device memory (its stream is the caller's). */
void res_free(struct cuda_backend *cb)
{
        cudaFreeHost(cb->res_host);
        cudaFreeHost(cb->res_posts);
        cudaFree(cb->res_area);
        cb->res_host = NULL;
        cb->res_posts = NULL;
        cb->res_area = NULL;
}

/* Its pinned and device memory and stream, in the current context; off
 * (with a warning) when they cannot be had. The backend says which
 * (b.resident), for the worker's choice of tile. Pinned memory has the
 * same address on the device (unified addressing, as on every GPU that
 * runs this kernel). */
void res_init(struct cuda_backend *cb)
{
        const size_t area = cuda_gemm_res_area_bytes(RES_SLOT_BYTES);

        cb->res_host = NULL;
        cb->res_posts = NULL;
        cb->res_area = NULL;
        cb->res_alive = 0;
        /* Numbered afresh with the zeroed memory below. */
        cb->res_seq = cb->res_gen = 0;
        cb->res_rot = 0;
        if (cudaMallocHost((void **)&cb->res_host, sizeof(*cb->res_host)) != cudaSuccess ||
            cudaHostAlloc((void **)&cb->res_posts, sizeof(*cb->res_posts),
                          cudaHostAllocMapped | cudaHostAllocWriteCombined) != cudaSuccess ||
            cudaMalloc(&cb->res_area, area) != cudaSuccess || cudaMemset(cb->res_area, 0, area) != cudaSuccess ||
            cudaStreamCreateWithFlags(&cb->res_stream, cudaStreamNonBlocking) != cudaSuccess) {
                log_warn("cuda %d: no resident kernel: %s", cb->ordinal, cudaGetErrorString(cudaGetLastError()));
                res_free(cb); /* (the stream is the last made: none) */
                cb->res_on = cb->b.resident = 0;
                return;
        }
        memset(cb->res_host, 0, sizeof(*cb->res_host));
        memset(cb->res_posts, 0, sizeof(*cb->res_posts));
        cb->b.resident = 1;
}

/* Posts a group to the resident kernel, starting one for its type if
 * none runs; s->rseq names it. rp: the post's fields but src; its launch
 * data is rp->bytes of blob (pinned: the same address on the device,
 * res_init), which goes in the post itself when it fits (src 0). -EAGAIN:
 * its slot still holds a group in flight (more groups in flight than
 * slots), for a launch instead. */
int res_post(struct cuda_backend *cb, struct cuda_slot *s, int dtype, struct cuda_res_post *rp, const void *blob)
{
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
                        rc = cuda_gemm_res_launch(dtype, cb->res_host, cb->res_posts, cb->res_area,
                                                  RES_SLOT_BYTES, cb->res_seq + 1, cb->res_gen + 1, cb->b.ctas,
                                                  cb->res_readers, cb->res_stream);

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
        rp->gen = cb->res_gen;
        rp->rot = cb->res_rot;
        cb->res_rot = (cb->res_rot + rp->nctas) % cb->b.ctas;
        rp->src = rp->bytes <= CUDA_RES_INLINE ? 0 : (uint64_t)(uintptr_t)blob;
        rp->seq = seq | (rp->src ? 0 : (uint64_t)rp->bytes << 48);
        /* Launch data read from src is read after the fields say so:
         * the blob's stores (write-back memory) out before the post's
         * (write-combined, which may pass them otherwise). */
        store_fence();
        res_post_put(cb->res_posts->post[seq % CUDA_RES_SLOTS], rp, blob, seq);
        /* Out of the write-combining buffers now, not when they are next
         * needed; and before a stop stored after it (res_stop). */
        store_fence();
        s->rseq = seq;
        s->posted_ns = now_ns();
        pthread_mutex_unlock(&cb->res_lock);
        return 0;
}

/* Adds a GEMMD_RTRACE build's stamps of a done group (none: pad[3] 0)
 * to the backend's sums: t0, then pad[0..3], then t1, step by step. */
static void res_trace(struct cuda_backend *cb, const struct cuda_res_done *d)
{
        const uint64_t at[6] = {d->t0, d->pad[0], d->pad[1], d->pad[2], d->pad[3], d->t1};

        if (!d->pad[3])
                return;
        for (int i = 0; i < 5; i++)
                cb->res_tr_ns[i] += (int64_t)(at[i + 1] - at[i]);
        cb->res_tr_groups++;
}

/* Whether a resident group is done: cudaSuccess, cudaErrorNotReady, or the
 * error that ended the kernel before it. */
cudaError_t res_query(struct cuda_backend *cb, struct cuda_slot *s)
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
                        res_trace(cb, d);
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

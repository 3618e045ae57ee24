/*
 * backend_cuda.c - one GPU as a backend (cuda_backend.h): its creation,
 * its slots, the rebuild of a broken context, and its destruction. The
 * launch, the completion thread, memory and the resident kernel have
 * files of their own (cuda_launch.c, cuda_completion.c, cuda_memory.c,
 * cuda_resident.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cuda_backend.h"
#include "daemon/lock.h"
#include "gemmd.h"

static const char *const ls_names[LS_N] = {"prepare", "fill", "maps", "copy", "kernel", "after"};
/* A posted group's steps (cuda_backend.ps_ns): the post in LS_COPY's place. */
static const char *const ps_names[LS_COPY + 1] = {"prepare", "fill", "maps", "post"};

/* Logs the mean host time of each of n steps (sums ns over `groups`). */
static void log_steps(const struct cuda_backend *cb, const char *what, const char *const *names,
                      const uint64_t *ns, int n, uint64_t groups)
{
        char line[256];
        int len = 0;

        if (!groups)
                return;
        for (int i = 0; i < n && len < (int)sizeof(line); i++)
                len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s %.2f", i ? ", " : "", names[i],
                                ns[i] / 1e3 / groups);
        log_info("cuda %d: %s (%llu groups): %s", cb->ordinal, what, (unsigned long long)groups, line);
}

int backend_cuda_count(void)
{
        int n = 0;

        if (cudaGetDeviceCount(&n) != cudaSuccess) {
                cudaGetLastError();
                return 0;
        }
        return n;
}

struct sched_shape shape(struct backend *b, uint32_t key)
{
        return cuda_gemm_shape((int)(key & 3), (int)(key >> 2) & 1);
}

static struct sched_shape wide_shape(struct backend *b, uint32_t key)
{
        return ((struct cuda_backend *)b)->wide[key & 7];
}

static struct sched_shape narrow_shape(struct backend *b, uint32_t key)
{
        return ((struct cuda_backend *)b)->narrow[key & 7];
}

static const char *kernel_name(struct backend *b, uint32_t key)
{
        const struct cuda_backend *cb = (const struct cuda_backend *)b;

        if (key == GEMMD_F32 && cb->f32_split)
                return "f32-split-tf32-128x128x32";
        return cuda_gemm_kernel_name((int)(key & 3), (int)(key >> 2) & 1);
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
                s->d_pack = NULL;
                s->pack_cap = 0;
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
        cudaFree(s->d_pack);
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
        log_steps(cb, "launch path, host us per launched group", ls_names, cb->ls_ns, LS_N, cb->ls_groups);
        log_steps(cb, "resident path, host us per posted group", ps_names, cb->ps_ns, LS_COPY + 1, cb->ps_groups);
        if (cb->res_groups)
                log_info("cuda %d: resident kernel: %llu groups in %llu launches; per group %.1f us from "
                         "post to done seen, of which on the device %.1f us from post seen to handed over "
                         "and %.1f us from handed over to done",
                         cb->ordinal, (unsigned long long)cb->res_groups, (unsigned long long)cb->res_gen,
                         cb->res_host_ns / 1e3 / cb->res_groups, cb->res_take_ns / 1e3 / cb->res_groups,
                         cb->res_run_ns / 1e3 / cb->res_groups);
        if (cb->res_tr_groups) {
                const double n = 1e3 * (double)cb->res_tr_groups;

                log_info("cuda %d: resident kernel, handed over to done by step (%llu groups, us): mark seen "
                         "%.2f, first stage full %.2f, C's stores issued %.2f, last arrival counted %.2f, "
                         "done %.2f",
                         cb->ordinal, (unsigned long long)cb->res_tr_groups, cb->res_tr_ns[0] / n,
                         cb->res_tr_ns[1] / n, cb->res_tr_ns[2] / n, cb->res_tr_ns[3] / n, cb->res_tr_ns[4] / n);
        }
        if (cb->close_n)
                log_info("cuda %d: %llu closes of clients' memory: %.1f ms stopping the resident kernel for "
                         "them, %.1f ms in the driver's close, the longest %.1f ms",
                         cb->ordinal, (unsigned long long)cb->close_n, cb->close_stop_ns / 1e6,
                         cb->close_unmap_ns / 1e6, cb->close_max_ns / 1e6);
        if (cb->res_on) {
                res_free(cb);
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
        cb->early_on = cfg->early_completion && cuda_gemm_fast_available() && prop.unifiedAddressing &&
                       prop.canMapHostMemory;
        /* And the clients' completion words, page-locked by the pin
         * thread, at their host addresses too: not in a device process,
         * which does not map the clients' rings. */
        cb->words_on = cb->early_on && !cfg->device_process && prop.canUseHostPointerForRegisteredMem;
        pthread_mutex_init(&cb->res_lock, NULL);
        /* The resident kernel reads launch data where the host wrote it:
         * pinned memory at the same address on the device. */
        cb->res_on = (cfg->resident < 0 ? !cfg->device_process : cfg->resident) && cuda_gemm_fast_available() &&
                     prop.unifiedAddressing && prop.canMapHostMemory;
        if (cfg->resident > 0 && !cb->res_on)
                log_warn("cuda %d: no resident kernel on this device (it needs sm_90 and mapped host memory)",
                         ordinal);
        cb->res_readers = cfg->resident_readers;
        if (cb->res_on)
                res_init(cb);
        for (uint32_t k = 0; k < 8; k++) {
                cb->wide[k] = cuda_gemm_shape_wide((int)(k & 3), (int)(k >> 2) & 1);
                /* With the resident kernel, whose one kernel runs the
                 * usual tile, a 16-bit lone group's narrow tile is the
                 * half tile (64 x 128), which that kernel also runs. */
                const struct sched_shape h = cuda_gemm_shape_half((int)(k & 3), (int)(k >> 2) & 1);
                cb->narrow[k] = cb->res_on && h.tn ? h : cuda_gemm_shape_narrow((int)(k & 3), (int)(k >> 2) & 1);
        }
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
        /* The dtypes the kernels run (f64 on the FP64 tensor cores, dmma_gemm.cuh). */
        cb->b.dtypes = BACKEND_DTYPE(GEMMD_F32) | BACKEND_DTYPE(GEMMD_F16) | BACKEND_DTYPE(GEMMD_BF16) |
                       BACKEND_DTYPE(GEMMD_F64);
        /* Each in flight on a stream of its own: four let small groups
         * pass large ones, and more launches only added variance. A post
         * to the resident kernel costs a few stores, and there four held
         * ops back from clients with one request in flight each, which
         * eight (read by two CTAs, --resident-readers) do not
         * (bench/results/resident-readers.txt). */
        cb->b.groups_inflight = cb->res_on ? 8 : 4;
        cb->b.shape = shape;
        cb->b.wide_shape = wide_shape;
        cb->b.narrow_shape = narrow_shape;
        cb->b.kernel_name = kernel_name;
        cb->b.launch = launch;
        cb->b.launch_any_thread = 1;
        /* Not by default: on an H200 a lone request was no faster
         * launched by its loop than by the spinning worker. */
        cb->b.loop_launch_pays = 0;
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

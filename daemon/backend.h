/*
 * backend.h - what a worker needs from the device it drives.
 *
 * A backend runs groups asynchronously: launch() returns once the group is
 * on its way and the backend later calls worker_group_done() from any
 * thread. The CPU backend is one "device" with a thread pool; the CUDA
 * backend is one per GPU.
 */
#ifndef GEMMD_BACKEND_H
#define GEMMD_BACKEND_H

#include <stdint.h>

#include "daemon/config.h"
#include "scheduler/plan.h"

struct group;

/* The bit of a dtype (enum gemmd_dtype) in struct backend's dtypes. */
#define BACKEND_DTYPE(d) (1u << (d))

struct backend {
        const char *kind;     /* "cpu" or "cuda" */
        char name[64];        /* device name for the handshake */
        int index;            /* device ordinal */
        uint32_t units;       /* SMs or threads */
        uint32_t ctas;        /* CTAs (work lists) of a plan */
        uint64_t memory_bytes;
        int mixed_keys;       /* 1 if ops of any key can share one group */
        uint32_t groups_inflight; /* --max-groups-inflight unless given */
        /* The dtypes its kernels run (BACKEND_DTYPE bits): the daemon
         * refuses an op of any other at validation (validate.h) and never
         * routes one here (server_pick_worker). */
        uint32_t dtypes;
        /* 1 if launch() may run on any thread (one at a time), so that a
         * loop thread may launch onto an idle device (worker.c,
         * launch_here); 0: only on the worker thread. */
        int launch_any_thread;
        /* Whether a loop thread launches onto an idle device unless told
         * (--loop-launch auto): where it measured faster. */
        int loop_launch_pays;
        /* 1 if its 16-bit groups may go to a kernel that stays running
         * (--resident): small groups there skip a launch, and so take
         * the usual tile rather than the narrow one, and groups are cut
         * at one wave while little work is outstanding (worker.c,
         * group_tile_cap). */
        int resident;

        /* Tile shape for ops of kernel-config key `key`. */
        struct sched_shape (*shape)(struct backend *b, uint32_t key);
        /* Optional: a wider tile for ops of `key`, all zero when there is
         * none. A group may take it (worker.c) when every op's layout is
         * kproblem_tma_layout's, with A and B 16-byte aligned where they
         * are already on the device, and sched_prefer_wide predicts it
         * faster; launch() then gets a plan built with it. */
        struct sched_shape (*wide_shape)(struct backend *b, uint32_t key);
        /* Optional: a narrower tile for ops of `key`, all zero when there
         * is none, taken under the same conditions as the wide one when
         * sched_prefer_narrow says so (a group that would leave SMs idle). */
        struct sched_shape (*narrow_shape)(struct backend *b, uint32_t key);
        /* Name of the kernel that runs ops of `key` (static string). */
        const char *(*kernel_name)(struct backend *b, uint32_t key);
        /* Starts g (its plan is built). Returns 0, after which exactly one
         * worker_group_done(g, status) follows, or a negative code, after
         * which none does: GEMMD_ERESOURCE when host memory (or a mapping)
         * ran out before anything reached the device, which then needs no
         * repair (its ops fail with that code). */
        int (*launch)(struct backend *b, struct group *g);
        /* Prepares a group slot's backend state; called once per slot. */
        int (*slot_init)(struct backend *b, struct group *g);
        void (*slot_deinit)(struct backend *b, struct group *g);
        /* Optional: after a group that launch() marked g->timed is done,
         * its device time and the device's idle gap before it (0 when the
         * two overlapped; left alone when the group before was not timed).
         * Called by the worker thread. */
        void (*collect)(struct backend *b, struct group *g, uint64_t *device_ns,
                        uint64_t *gap_ns);
        /* Optional, worker thread: opens device memory another process
         * exported (a 64-byte CUDA IPC handle of an allocation) and checks
         * that [offset, offset + bytes) lies inside it. Sets *addr to the
         * address of byte `offset` and *token for ipc_close. The same
         * allocation opened twice shares one mapping. */
        int (*ipc_open)(struct backend *b, const uint8_t handle[64], uint64_t offset,
                        uint64_t bytes, uint64_t *addr, void **token);
        void (*ipc_close)(struct backend *b, void *token);
        /* Optional, worker thread: allocates device memory for a client and
         * exports it (a 64-byte CUDA IPC handle); *token is for dev_free. */
        int (*dev_alloc)(struct backend *b, uint64_t bytes, uint64_t *addr, uint8_t handle[64],
                         void **token);
        void (*dev_free)(struct backend *b, void *token);
        /* Optional, worker thread, nothing in flight: called after a group
         * failed on the device; repairs the device if it can (a CUDA
         * context with a sticky error is rebuilt). Returns 0 when usable. */
        int (*recover)(struct backend *b);
        /* Waits for nothing: all groups are done when it is called. */
        void (*destroy)(struct backend *b);
};

/* Creates the CPU backend with `threads` threads. With alt_tiles it also
 * offers a wide and a narrow tile beside its usual one, as a GPU does
 * (--cpu-alt-tiles), so that tests drive the daemon's choice of tile; with
 * wave_cut its groups are cut at one wave as a GPU's with the resident
 * kernel (--cpu-wave-cut); with early it answers each op of a group once
 * its own tiles are done (--cpu-early). */
int backend_cpu_new(int threads, int alt_tiles, int wave_cut, int early, struct backend **out);

/* Creates a backend of `kind` (BACKEND_CPU or BACKEND_CUDA, device
 * `ordinal`) that runs in a device process of its own (devproc.h). */
int backend_proc_new(int kind, int ordinal, const struct gemmd_config *cfg, struct backend **out);
/* Of such a backend: how many times its process was replaced, and the
 * pid of the one now; 0 for other backends. */
uint64_t backend_proc_restarts(const struct backend *be);
int backend_proc_pid(const struct backend *be);

#ifdef GEMMD_WITH_CUDA
/* Number of usable CUDA devices (0 when there is no driver or GPU). */
int backend_cuda_count(void);
/* Creates the CUDA backend of device `ordinal`. */
int backend_cuda_new(int ordinal, const struct gemmd_config *cfg, struct backend **out);
#endif

#endif

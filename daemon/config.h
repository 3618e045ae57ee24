/*
 * config.h - every tunable of the daemon, with its default in config.c.
 */
#ifndef GEMMD_CONFIG_H
#define GEMMD_CONFIG_H

#include <stdint.h>

#include "scheduler/plan.h"

enum backend_kind { BACKEND_AUTO = 0, BACKEND_CPU = 1, BACKEND_CUDA = 2 };

struct limits {
        uint64_t max_frame_bytes;
        uint32_t max_ops_per_submit;
        uint64_t max_inline_bytes;   /* inline operand bytes of one submit, in + out */
        uint32_t max_inflight_ops;   /* per session: admitted, not yet completed */
        uint32_t max_buffers;        /* per session */
        uint64_t max_buffer_bytes;   /* per buffer */
        uint32_t max_queue_ops;      /* whole daemon: admitted, not yet completed */
        uint32_t max_sessions;
        uint64_t max_output_bytes;   /* per session: replies not yet read by the client */
        /* Per user (uid), over all of its sessions. */
        uint32_t max_user_inflight_ops;
        uint64_t max_user_buffer_bytes; /* registered bytes */
        uint32_t max_user_share;        /* percent of a device a user keeps while others wait */
        /* Percent of a device's worker time that one user's requests for
         * device memory (opened, allocated, closed, freed) take over time:
         * past it, its opens and allocations wait (100: no bound). */
        uint32_t max_user_task_share;
        uint32_t max_user_sessions;
        uint32_t first_session_slots;   /* the last sessions, kept for users that have none */
        uint32_t hello_timeout_ms;      /* a connection that sends no Hello is closed */
        /* Memory mappings (registered buffers and rings, users.h): one
         * user's, and all users' together, which is below the kernel's
         * vm.max_map_count (read at start when MAPPINGS_AUTO). */
        uint32_t max_user_buffers;
        uint32_t max_mappings;
#define MAPPINGS_AUTO 0
        /* Bytes the daemon holds for inline operands and the replies that
         * carry inline results, from admission until the reply is written:
         * per session and per user (users.h). */
        uint64_t max_session_inline_bytes;
        uint64_t max_user_inline_bytes;
        uint32_t frame_timeout_ms;      /* a frame begun and not finished is closed (0: never) */
        uint32_t idle_timeout_ms;       /* a session that holds and sends nothing (0: never) */
};

struct gemmd_config {
        const char *socket_path;
        enum backend_kind backend;
        int foreground;
        int threads;          /* CPU backend worker threads */
        const char *devices;  /* CUDA devices as given, "0,1"; NULL: all */
        uint32_t *device_ids; /* the same, parsed: n_device_ids distinct indices */
        uint32_t n_device_ids;
#define DEVICE_MAX 1023
        const char *metrics_listen; /* "unix:PATH" or "tcp:HOST:PORT"; NULL: no metrics */
        enum sched_mode mode; /* plan mode of every group */
        uint32_t max_groups_inflight; /* D: groups launched and not done, per device; 0: the backend's */
        uint32_t batch_window_us;     /* wait this long on an idle device for company */
        uint32_t spin_us;             /* threads poll this long after work before sleeping */
#define SPIN_AUTO UINT32_MAX          /* spin_us before parsing: decided by backend and cores */
        uint32_t timing_every;        /* a GPU times 2 groups in every this many (1: all) */
        int f32_ffma;                 /* exact f32 on FMA cores, not split into TF32 parts */
        /* Each device driven by a process of its own, replaced after a
         * fault that its context cannot survive (devproc.h). Off by
         * default: the extra hop costs throughput when many requests are
         * in flight (docs/performance.md). */
        int device_process;
        /* A group may take a backend's wide tile (backend.h, wide_shape)
         * where the cost model predicts it faster (sched_prefer_wide). */
        int wide_tiles;
        /* ... or its narrow tile, where a group's usual tiles would leave
         * SMs idle and its narrow ones fit one wave (sched_prefer_narrow). */
        int narrow_tiles;
        int rings;                    /* sessions may attach shared-memory rings (proto/ring.h) */
        /* A GPU keeps its 16-bit GEMM kernel resident between groups
         * (cuda_gemm_res_launch) instead of launching one per group; -1:
         * where the device can (auto), not under a device process. */
        int resident;
        /* Of the resident kernel, the CTAs that read its posts, each
         * every resident_readers-th group (cuda_gemm_res_launch); 2 by
         * default. */
        uint32_t resident_readers;
        /* A request that finds its device idle is launched by the loop
         * thread that read it (worker.c, launch_here); -1: where the
         * backend says it pays (auto). */
        int loop_launch;
        /* A GPU answers each op of a 16-bit GEMM group once its own C is
         * whole, before the group ends (cuda_group.early_*). */
        int early_completion;
        /* Groups hold ops of one kernel configuration even on a backend
         * whose kernel can mix them (the CPU's): it then batches as a GPU
         * does, which is how the tests see that batching without one. */
        int one_kernel_groups;
        /* The CPU backend offers a wide and a narrow tile beside its usual
         * one, as a GPU does: how the tests see the choice of tile. */
        int cpu_alt_tiles;
        /* The CPU backend has its 16-bit groups cut at one wave while
         * little work is outstanding, as a GPU with the resident kernel
         * does (worker.c, group_tile_cap): how the tests see that rule. */
        int cpu_wave_cut;
        /* The CPU backend answers each op of a group once its own tiles
         * are done, as a GPU does under early completion (cleared after
         * parsing without early_completion): how the tests see that path,
         * in the daemon and through a device process. */
        int cpu_early;
        const char *cost;             /* --cost: the cost model installed (sched_cost_set), or NULL */
        /* Clients are asked to sleep rather than poll while more sessions
         * than this have work in flight (proto/ring.h, cq.no_poll). */
        uint32_t client_poll_max;
#define CLIENT_POLL_AUTO UINT32_MAX   /* the CPUs the daemon's own threads leave */
        int loops;                    /* event loops (threads) serving the sessions */
#define LOOPS_AUTO 0                  /* not given: the server decides by backend and cores */
#define LOOPS_MAX 64
        uint64_t max_group_tiles;
        uint64_t max_group_bytes;
        uint32_t max_group_ops;
        struct limits lim;
        int max_frame_given;          /* --max-frame-bytes set: checked, never raised */
        int verbose;
        /* Who may connect: when either list is non-empty, a peer whose uid
         * is in allow_uids or one of whose groups is in allow_gids. */
        uint32_t *allow_uids;
        uint32_t *allow_gids;
        uint32_t n_allow_uids, n_allow_gids;
        /* Whose stats show every session: root and these groups' members;
         * everyone else sees the totals and its own sessions. */
        uint32_t *admin_gids;
        uint32_t n_admin_gids;
        const char *config_file; /* --config, already applied */
        struct config_value *file_values; /* the values read from it, which strings above may point into */
        /* --max-user-sessions and --first-session-slots as given (0 and
         * SLOTS_AUTO: not given); lim's values follow from them and from
         * lim.max_sessions (config_session_limits). */
        uint32_t user_sessions_arg, first_slots_arg;
#define SLOTS_AUTO UINT32_MAX
};

/* A value read from a --config file, kept while the config may point
 * into it. */
struct config_value {
        struct config_value *next;
        char s[];
};

/* Fills *cfg with the defaults. */
void config_defaults(struct gemmd_config *cfg);

/* Frees what parsing allocated (lists of ids, the values of config files);
 * the strings of *cfg that pointed there are gone with them. */
void config_release(struct gemmd_config *cfg);

/* Parses the command line into *cfg. A --config FILE is read first,
 * wherever it appears, so the command line overrides the file. Returns 0 to
 * run, 1 when --help or --version was printed, or -EINVAL after printing a
 * usage error. Strings of *cfg point into argv or into memory kept for the
 * life of the process. */
int config_parse_args(struct gemmd_config *cfg, int argc, char **argv);

/* Sets lim.max_user_sessions and lim.first_session_slots from what was
 * given and lim.max_sessions: called after parsing, and again when the
 * descriptor limit lowers max_sessions (main.c). */
void config_session_limits(struct gemmd_config *cfg);

/*
 * The event loops a daemon runs when --loops is not given, for `ndevices`
 * backends (GPU ones when `gpu`) on a host of `cpus` online CPUs. The CPU
 * backend's cores compute, so it gets one. On GPUs every op crosses a loop
 * twice, so the loops bound how many ops a second reach the devices: four
 * serve two GPUs, and they grow with the devices, two a device, and past
 * four never more than a quarter of the host's CPUs (a loop takes a core
 * while it polls; more loops cost each op more CPU).
 * docs/performance.md, "More GPUs", has the runs behind the numbers.
 */
static inline int config_auto_loops(int gpu, int ndevices, long cpus)
{
        int want = 2 * ndevices, cap = (int)(cpus / 4);

        if (!gpu || cpus < 8)
                return 1;
        if (cap > LOOPS_MAX)
                cap = LOOPS_MAX;
        if (want > cap)
                want = cap;
        return want > 4 ? want : 4;
}

/* Reads a config file: `key = value` lines with the long option names as
 * keys ("max-sessions = 64"), `key` alone or `key = yes|no` for options
 * without a value, blank lines and lines starting with '#' ignored.
 * Returns 0, or -EINVAL after printing FILE:LINE and what is wrong. */
int config_load_file(struct gemmd_config *cfg, const char *path);

#endif

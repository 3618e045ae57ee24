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
};

struct gemmd_config {
        const char *socket_path;
        enum backend_kind backend;
        int foreground;
        int threads;          /* CPU backend worker threads */
        const char *devices;  /* CUDA devices, "0,1"; NULL: all */
        enum sched_mode mode; /* plan mode of every group */
        uint32_t max_groups_inflight; /* D: groups launched and not done, per device */
        uint32_t batch_window_us;     /* wait this long on an idle device for company */
        uint64_t max_group_tiles;
        uint64_t max_group_bytes;
        uint32_t max_group_ops;
        struct limits lim;
        int verbose;
};

/* Fills *cfg with the defaults. */
void config_defaults(struct gemmd_config *cfg);

/* Parses the command line into *cfg. Returns 0 to run, 1 when --help or
 * --version was printed, or -EINVAL after printing a usage error. */
int config_parse_args(struct gemmd_config *cfg, int argc, char **argv);

#endif

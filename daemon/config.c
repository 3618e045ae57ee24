/*
 * config.c - defaults and the command line of gemmd.
 */
#include "daemon/config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemmd.h"

void config_defaults(struct gemmd_config *cfg)
{
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        const char *env = getenv("GEMMD_SOCKET");

        memset(cfg, 0, sizeof(*cfg));
        cfg->socket_path = env && *env ? env : GEMMD_DEFAULT_SOCKET;
        cfg->backend = BACKEND_AUTO;
        cfg->threads = ncpu > 0 ? (int)ncpu : 1;
        cfg->mode = SCHED_LPT;
        cfg->max_groups_inflight = 2;
        cfg->batch_window_us = 0;
        cfg->max_group_tiles = 1u << 16;
        cfg->max_group_bytes = 8ull << 30;
        cfg->max_group_ops = 4096;
        cfg->lim.max_frame_bytes = 20u << 20;
        cfg->lim.max_ops_per_submit = 4096;
        cfg->lim.max_inline_bytes = 16u << 20;
        cfg->lim.max_inflight_ops = 4096;
        cfg->lim.max_buffers = 1024;
        cfg->lim.max_buffer_bytes = 64ull << 30;
        cfg->lim.max_queue_ops = 65536;
        cfg->lim.max_sessions = 1024;
        cfg->lim.max_output_bytes = 256u << 20;
}

enum {
        OPT_THREADS = 256,
        OPT_DEVICES,
        OPT_MODE,
        OPT_GROUPS,
        OPT_WINDOW,
        OPT_GROUP_TILES,
        OPT_GROUP_OPS,
        OPT_MAX_FRAME,
        OPT_MAX_OPS,
        OPT_MAX_INLINE,
        OPT_MAX_INFLIGHT,
        OPT_MAX_BUFFERS,
        OPT_MAX_QUEUE,
        OPT_MAX_SESSIONS,
        OPT_VERSION,
};

static const struct option options[] = {
        {"socket", required_argument, NULL, 's'},
        {"backend", required_argument, NULL, 'b'},
        {"foreground", no_argument, NULL, 'f'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"devices", required_argument, NULL, OPT_DEVICES},
        {"mode", required_argument, NULL, OPT_MODE},
        {"max-groups-inflight", required_argument, NULL, OPT_GROUPS},
        {"batch-window-us", required_argument, NULL, OPT_WINDOW},
        {"max-group-tiles", required_argument, NULL, OPT_GROUP_TILES},
        {"max-group-ops", required_argument, NULL, OPT_GROUP_OPS},
        {"max-frame-bytes", required_argument, NULL, OPT_MAX_FRAME},
        {"max-ops-per-submit", required_argument, NULL, OPT_MAX_OPS},
        {"max-inline-bytes", required_argument, NULL, OPT_MAX_INLINE},
        {"max-inflight-ops", required_argument, NULL, OPT_MAX_INFLIGHT},
        {"max-buffers", required_argument, NULL, OPT_MAX_BUFFERS},
        {"max-queue-ops", required_argument, NULL, OPT_MAX_QUEUE},
        {"max-sessions", required_argument, NULL, OPT_MAX_SESSIONS},
        {NULL, 0, NULL, 0},
};

static void usage(FILE *f, const struct gemmd_config *d)
{
        fprintf(f,
                "usage: gemmd [options]\n"
                "\n"
                "GEMM and SYR2K as a service: clients connect over a Unix socket.\n"
                "\n"
                "  -s, --socket PATH            listening socket (default: $GEMMD_SOCKET, else %s)\n"
                "  -b, --backend cpu|cuda|auto  compute backend (default: auto = cuda if a GPU is usable, else cpu)\n"
                "  -f, --foreground             stay in the foreground (gemmd never forks; kept for scripts)\n"
                "      --threads N              CPU backend threads (default: %d, the online CPUs)\n"
                "      --devices LIST           CUDA devices to use, e.g. 0,1 (default: all)\n"
                "      --mode rr|sorted|lpt|split|device  tile schedule of each group (default: %s)\n"
                "      --max-groups-inflight D  groups launched and unfinished per device (default: %u)\n"
                "      --batch-window-us US     an idle device waits this long for more requests (default: %u)\n"
                "      --max-group-tiles N      tiles in one group (default: %llu)\n"
                "      --max-group-ops N        ops in one group (default: %u)\n"
                "      --max-frame-bytes N      largest frame accepted (default: %llu)\n"
                "      --max-ops-per-submit N   ops in one submit (default: %u)\n"
                "      --max-inline-bytes N     inline operand bytes in one submit (default: %llu)\n"
                "      --max-inflight-ops N     unfinished ops per session (default: %u)\n"
                "      --max-buffers N          registered buffers per session (default: %u)\n"
                "      --max-queue-ops N        unfinished ops in the whole daemon (default: %u)\n"
                "      --max-sessions N         concurrent connections (default: %u)\n"
                "  -v, --verbose                log every connection and group\n"
                "  -h, --help                   this text\n"
                "      --version                print the version\n"
                "\n"
                "SIGTERM or SIGINT: stop accepting, finish in-flight work, reply, exit 0.\n",
                GEMMD_DEFAULT_SOCKET, d->threads, sched_mode_name(d->mode),
                d->max_groups_inflight, d->batch_window_us,
                (unsigned long long)d->max_group_tiles, d->max_group_ops,
                (unsigned long long)d->lim.max_frame_bytes, d->lim.max_ops_per_submit,
                (unsigned long long)d->lim.max_inline_bytes, d->lim.max_inflight_ops,
                d->lim.max_buffers, d->lim.max_queue_ops, d->lim.max_sessions);
}

/* Parses a decimal count in [lo, hi]; returns 0 or -EINVAL. */
static int parse_u64(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out)
{
        char *end;
        unsigned long long v;

        if (!s || !*s || *s == '-')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || *end || v < lo || v > hi)
                return -EINVAL;
        *out = v;
        return 0;
}

int config_parse_args(struct gemmd_config *cfg, int argc, char **argv)
{
        struct gemmd_config defaults = *cfg;
        unsigned long long v;
        int c;

        optind = 1;
        while ((c = getopt_long(argc, argv, "s:b:fvh", options, NULL)) != -1) {
                int bad = 0;

                switch (c) {
                case 's':
                        cfg->socket_path = optarg;
                        break;
                case 'b':
                        if (!strcmp(optarg, "cpu"))
                                cfg->backend = BACKEND_CPU;
                        else if (!strcmp(optarg, "cuda"))
                                cfg->backend = BACKEND_CUDA;
                        else if (!strcmp(optarg, "auto"))
                                cfg->backend = BACKEND_AUTO;
                        else
                                bad = 1;
                        break;
                case 'f':
                        cfg->foreground = 1;
                        break;
                case 'v':
                        cfg->verbose = 1;
                        break;
                case 'h':
                        usage(stdout, &defaults);
                        return 1;
                case OPT_VERSION:
                        printf("gemmd %s (protocol %d)\n", GEMMD_VERSION, GEMMD_PROTOCOL_VERSION);
                        return 1;
                case OPT_THREADS:
                        bad = parse_u64(optarg, 1, 1024, &v);
                        cfg->threads = (int)v;
                        break;
                case OPT_DEVICES:
                        cfg->devices = optarg;
                        break;
                case OPT_MODE:
                        bad = sched_mode_parse(optarg, &cfg->mode) != 0;
                        break;
                case OPT_GROUPS:
                        bad = parse_u64(optarg, 1, 8, &v);
                        cfg->max_groups_inflight = (uint32_t)v;
                        break;
                case OPT_WINDOW:
                        bad = parse_u64(optarg, 0, 1000000, &v);
                        cfg->batch_window_us = (uint32_t)v;
                        break;
                case OPT_GROUP_TILES:
                        bad = parse_u64(optarg, 1, UINT32_MAX, &v);
                        cfg->max_group_tiles = v;
                        break;
                case OPT_GROUP_OPS:
                        bad = parse_u64(optarg, 1, 65536, &v);
                        cfg->max_group_ops = (uint32_t)v;
                        break;
                case OPT_MAX_FRAME:
                        bad = parse_u64(optarg, 4096, 1u << 30, &v);
                        cfg->lim.max_frame_bytes = v;
                        break;
                case OPT_MAX_OPS:
                        bad = parse_u64(optarg, 1, 65536, &v);
                        cfg->lim.max_ops_per_submit = (uint32_t)v;
                        break;
                case OPT_MAX_INLINE:
                        bad = parse_u64(optarg, 0, 1u << 30, &v);
                        cfg->lim.max_inline_bytes = v;
                        break;
                case OPT_MAX_INFLIGHT:
                        bad = parse_u64(optarg, 1, UINT32_MAX, &v);
                        cfg->lim.max_inflight_ops = (uint32_t)v;
                        break;
                case OPT_MAX_BUFFERS:
                        bad = parse_u64(optarg, 1, 1u << 20, &v);
                        cfg->lim.max_buffers = (uint32_t)v;
                        break;
                case OPT_MAX_QUEUE:
                        bad = parse_u64(optarg, 1, UINT32_MAX, &v);
                        cfg->lim.max_queue_ops = (uint32_t)v;
                        break;
                case OPT_MAX_SESSIONS:
                        bad = parse_u64(optarg, 1, 1u << 20, &v);
                        cfg->lim.max_sessions = (uint32_t)v;
                        break;
                default:
                        usage(stderr, &defaults);
                        return -EINVAL;
                }
                if (bad) {
                        fprintf(stderr, "gemmd: invalid value for %s: %s\n", argv[optind - 1], optarg);
                        return -EINVAL;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "gemmd: unexpected argument: %s\n", argv[optind]);
                return -EINVAL;
        }
        /* A frame must be able to carry the inline bytes it is allowed. */
        if (cfg->lim.max_frame_bytes < cfg->lim.max_inline_bytes + (1u << 20))
                cfg->lim.max_frame_bytes = cfg->lim.max_inline_bytes + (1u << 20);
        return 0;
}

/*
 * main.c - gemmd: parse the command line, start the server, run the loop,
 * tear down in reverse order through one path.
 */
#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/cpuacct.h"
#include "daemon/devproc.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
#include "daemon/server.h"
#include "daemon/session.h"
#include "daemon/watchdog.h"
#include "gemmd.h"

/* Descriptors the daemon opens while it serves, besides its sessions':
 * a device process started again, a connection refused on the spare. */
#define FDS_SPARE 16

/*
 * How many sessions `nofile` descriptors carry, with `base` open before
 * the first: the daemon's own, a reserve for what it opens while serving
 * (FDS_SPARE, and the metrics endpoint's connections), the sessions held
 * to be told LIMIT or PERMISSION (their socket alone: descriptors sent
 * before Hello are closed), and per session its socket and the
 * descriptors it may hold for a frame not yet whole. With
 * --device-process a registered shared-memory buffer keeps a descriptor
 * as well (gbuf_keep_fds); --max-buffers allows far more per session than
 * a fit could grant, so those come out of the headroom, and a
 * registration that finds none left is refused. The one place where
 * sessions and descriptors are weighed against each other.
 */
static uint64_t sessions_that_fit(const struct gemmd_config *cfg, uint64_t nofile, uint64_t base)
{
        uint64_t keep = base + FDS_SPARE + SESSION_MAX_DENIED;

        if (cfg->metrics_listen)
                keep += METRICS_MAX_CONNS + 1;
        return nofile > keep ? (nofile - keep) / (1 + SESSION_MAX_FDS) : 0;
}

/* Raises the soft descriptor limit to the hard one, as a service that
 * needs many is expected to (the soft limit stays low for programs that
 * still use select()). Returns the limit in force. */
static uint64_t raise_nofile(void)
{
        struct rlimit rl;
        rlim_t was;

        if (getrlimit(RLIMIT_NOFILE, &rl))
                return 1024;
        was = rl.rlim_cur;
        if (rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                /* An unlimited hard limit still stops at fs.nr_open. */
                if (setrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_max == RLIM_INFINITY) {
                        rl.rlim_cur = 1u << 20;
                        setrlimit(RLIMIT_NOFILE, &rl);
                }
                getrlimit(RLIMIT_NOFILE, &rl);
                if (rl.rlim_cur != was)
                        log_info("descriptor limit raised from %llu to %llu",
                                 (unsigned long long)was, (unsigned long long)rl.rlim_cur);
        }
        return rl.rlim_cur;
}

/* Descriptors open in this process now, or 0 when /proc cannot say. */
static uint64_t open_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        uint64_t n = 0;

        if (!d)
                return 0;
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own */
}

/* Lowers --max-sessions (and what follows from it) to what the descriptor
 * limit carries, with a warning; called once the server is up and before
 * it accepts, so that idle sessions can never exhaust the descriptors. */
static void fit_sessions(struct gemmd_config *cfg, uint64_t nofile)
{
        uint64_t fit = sessions_that_fit(cfg, nofile, open_fds());

        if (fit >= cfg->lim.max_sessions)
                return;
        if (fit == 0)
                fit = 1;
        log_warn("--max-sessions %u does not fit the descriptor limit of %llu (a session may hold "
                 "%d): serving at most %llu sessions",
                 cfg->lim.max_sessions, (unsigned long long)nofile, 1 + SESSION_MAX_FDS,
                 (unsigned long long)fit);
        cfg->lim.max_sessions = (uint32_t)fit;
        config_session_limits(cfg);
}

int main(int argc, char **argv)
{
        struct gemmd_config cfg;
        struct server srv;
        uv_loop_t loop;
        uint64_t nofile;
        int rc, exit_code = 0;

        /* The daemon starts its device processes as itself (devproc.h). */
        if (argc == 3 && strcmp(argv[1], "--device-host") == 0)
                return devhost_main(atoi(argv[2]));
        cpuacct_thread_start(CPU_LOOP); /* this thread runs loop 0 */
        config_defaults(&cfg);
        rc = config_parse_args(&cfg, argc, argv);
        if (rc) {
                config_release(&cfg);
                return rc > 0 ? 0 : 2;
        }
        if (cfg.verbose)
                log_verbosity = LOG_DEBUG;
        /* A client that hangs up must cost an EPIPE, never the daemon. */
        signal(SIGPIPE, SIG_IGN);
        /* Large frame bodies and inline operands are mapped and go back to
         * the system when freed. Without a fixed threshold glibc raises it
         * after the first such free, and a flood of large frames would
         * leave the heap grown for good. */
        mallopt(M_MMAP_THRESHOLD, 256 << 10);
        nofile = raise_nofile();

        rc = uv_loop_init(&loop);
        if (rc) {
                log_err("uv_loop_init: %s", uv_strerror(rc));
                return 1;
        }
        rc = server_init(&srv, &loop, &cfg);
        if (rc) {
                log_err("cannot start: %s", gemmd_strerror(rc));
                /* What server_init closed on its way out (the metrics
                 * listener) finishes closing in one turn of the loop. */
                uv_run(&loop, UV_RUN_NOWAIT);
                goto out_loop;
        }
        fit_sessions(&cfg, nofile);
        log_info("gemmd %s ready (protocol %d, mode %s)", GEMMD_VERSION, GEMMD_PROTOCOL_VERSION,
                 sched_mode_name(cfg.mode));
        if (cfg.cost)
                log_info("cost model: %s", cfg.cost);
        notify_send("READY=1\nSTATUS=serving");
        if (watchdog_start(&srv))
                log_warn("no STATUS or WATCHDOG notifications: out of memory");
        server_run(&srv);
        exit_code = srv.exit_code;
        server_deinit(&srv);
        log_info("stopped");
out_loop:
        if (uv_loop_close(&loop) != 0) {
                log_err("uv_loop_close: handles left open");
                rc = rc ? rc : -1;
        }
        config_release(&cfg);
        return rc ? 1 : exit_code;
}

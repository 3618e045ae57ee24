/*
 * main.c - gemmd: parse the command line, start the server, run the loop,
 * tear down in reverse order through one path.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/cpuacct.h"
#include "daemon/devproc.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/server.h"
#include "daemon/watchdog.h"
#include "gemmd.h"

int main(int argc, char **argv)
{
        struct gemmd_config cfg;
        struct server srv;
        uv_loop_t loop;
        int rc, exit_code = 0;

        /* The daemon starts its device processes as itself (devproc.h). */
        if (argc == 3 && strcmp(argv[1], "--device-host") == 0)
                return devhost_main(atoi(argv[2]));
        cpuacct_thread_start(CPU_LOOP); /* this thread runs loop 0 */
        config_defaults(&cfg);
        rc = config_parse_args(&cfg, argc, argv);
        if (rc)
                return rc > 0 ? 0 : 2;
        if (cfg.verbose)
                log_verbosity = LOG_DEBUG;
        /* A client that hangs up must cost an EPIPE, never the daemon. */
        signal(SIGPIPE, SIG_IGN);
        /* Large frame bodies and inline operands are mapped and go back to
         * the system when freed. Without a fixed threshold glibc raises it
         * after the first such free, and a flood of large frames would
         * leave the heap grown for good. */
        mallopt(M_MMAP_THRESHOLD, 256 << 10);

        rc = uv_loop_init(&loop);
        if (rc) {
                log_err("uv_loop_init: %s", uv_strerror(rc));
                return 1;
        }
        rc = server_init(&srv, &loop, &cfg);
        if (rc) {
                log_err("cannot start: %s", gemmd_strerror(rc));
                goto out_loop;
        }
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
        return rc ? 1 : exit_code;
}

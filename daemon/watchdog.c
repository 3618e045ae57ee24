/*
 * watchdog.c - STATUS and progress-tied WATCHDOG notifications.
 */
#include "daemon/watchdog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/server.h"

#define STATUS_EVERY_NS 5000000000ull /* without a watchdog */

/* One timer per process: its state is file-static, like the endpoint of
 * metrics.c. Loop thread only. */
static struct {
        uv_timer_t timer;
        int started, closing;
        struct server *srv;
        uint64_t period_ns; /* WATCHDOG_USEC in ns, 0 without a watchdog */
        uint64_t tick_ns;
        uint64_t *seen;     /* per worker: progress when it last moved */
        uint64_t *moved_ns; /* per worker: when it last moved (or was idle) */
        int *stalled;       /* per worker: reported as stalled */
} wd;

/* $WATCHDOG_USEC if it is meant for this process, else 0. */
static uint64_t watchdog_period_ns(void)
{
        const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
        char *end;
        unsigned long long v;

        if (!usec || !*usec)
                return 0;
        if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
                return 0;
        v = strtoull(usec, &end, 10);
        if (*end || v == 0 || v > 24ull * 3600 * 1000000)
                return 0;
        return v * 1000;
}

static void on_tick(uv_timer_t *t)
{
        struct server *srv = wd.srv;
        uint64_t now = now_ns(), served = pc_read(&srv->counts, PC_REQUESTS);
        char msg[512];
        int healthy = 1, n;
        uint32_t nsessions, queued;

        pthread_mutex_lock(&srv->lock);
        nsessions = srv->nsessions;
        queued = srv->queued_ops;
        pthread_mutex_unlock(&srv->lock);
        n = snprintf(msg, sizeof(msg), "STATUS=%s: %u sessions, %u ops in flight, %llu requests",
                     srv->draining ? "draining" : "serving", nsessions, queued,
                     (unsigned long long)served);
        for (int i = 0; i < srv->nworkers; i++) {
                uint64_t progress;
                int busy;

                worker_progress(&srv->workers[i], &progress, &busy);
                if (progress != wd.seen[i] || !busy) {
                        if (wd.stalled[i])
                                log_info("device %d: making progress again", i);
                        wd.seen[i] = progress;
                        wd.moved_ns[i] = now;
                        wd.stalled[i] = 0;
                        continue;
                }
                if (!wd.period_ns || now - wd.moved_ns[i] <= wd.period_ns / 2)
                        continue;
                healthy = 0;
                if (!wd.stalled[i])
                        log_err("device %d: no progress for %.1f s with work pending; "
                                "withholding the watchdog ping", i, (now - wd.moved_ns[i]) / 1e9);
                wd.stalled[i] = 1;
                if (n > 0 && (size_t)n < sizeof(msg))
                        n += snprintf(msg + n, sizeof(msg) - (size_t)n, "; device %d stalled %.0f s",
                                      i, (now - wd.moved_ns[i]) / 1e9);
        }
        if (wd.period_ns && healthy && n > 0 && (size_t)n < sizeof(msg))
                snprintf(msg + n, sizeof(msg) - (size_t)n, "\nWATCHDOG=1");
        notify_send(msg);
}

int watchdog_start(struct server *srv)
{
        const char *sock = getenv("NOTIFY_SOCKET");
        int rc;

        if (!sock || !*sock || wd.started)
                return 0;
        wd.srv = srv;
        wd.period_ns = watchdog_period_ns();
        wd.tick_ns = wd.period_ns ? wd.period_ns / 4 : STATUS_EVERY_NS;
        if (wd.tick_ns < 1000000)
                wd.tick_ns = 1000000;
        wd.seen = calloc((size_t)srv->nworkers + 1, sizeof(*wd.seen));
        wd.moved_ns = calloc((size_t)srv->nworkers + 1, sizeof(*wd.moved_ns));
        wd.stalled = calloc((size_t)srv->nworkers + 1, sizeof(*wd.stalled));
        if (!wd.seen || !wd.moved_ns || !wd.stalled) {
                rc = -ENOMEM;
                goto err;
        }
        for (int i = 0; i < srv->nworkers; i++)
                wd.moved_ns[i] = now_ns();
        rc = uv_timer_init(srv->loop, &wd.timer);
        if (rc)
                goto err;
        wd.started = 1;
        uv_timer_start(&wd.timer, on_tick, wd.tick_ns / 1000000, wd.tick_ns / 1000000);
        if (wd.period_ns)
                log_info("watchdog: ping every %.3f s while the devices make progress",
                         wd.tick_ns / 1e9);
        on_tick(&wd.timer);
        return 0;
err:
        free(wd.seen);
        free(wd.moved_ns);
        free(wd.stalled);
        memset(&wd, 0, sizeof(wd));
        return rc;
}

static void on_closed(uv_handle_t *h)
{
        free(wd.seen);
        free(wd.moved_ns);
        free(wd.stalled);
        memset(&wd, 0, sizeof(wd));
}

void watchdog_stop(void)
{
        if (!wd.started || wd.closing)
                return;
        wd.closing = 1;
        uv_close((uv_handle_t *)&wd.timer, on_closed);
}

/*
 * server.c - the listener, the backends and their workers, signals, the
 * completion hand-off, and the orderly drain on SIGTERM/SIGINT.
 */
#include "daemon/server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/cpuacct.h"
#include "daemon/dispatch.h"
#include "daemon/lock.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
#include "daemon/reply.h"
#include "daemon/ring.h"
#include "daemon/session.h"
#include "daemon/unixsock.h"
#include "daemon/watchdog.h"
#include "gemmd.h"

/* Takes the listening socket from systemd (LISTEN_FDS/LISTEN_PID) when it
 * passed one. Returns the descriptor or -1. */
static int activated_fd(void)
{
        const char *pid = getenv("LISTEN_PID"), *n = getenv("LISTEN_FDS");

        if (!pid || !n || strtol(pid, NULL, 10) != (long)getpid() || strtol(n, NULL, 10) < 1)
                return -1;
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
        /* SD_LISTEN_FDS_START. systemd passes it blocking and inheritable;
         * on_listen accepts until EAGAIN, and children must not keep it. */
        int fd = 3, type = 0, listening = 0;
        socklen_t len = sizeof(type);

        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM ||
            (len = sizeof(listening), getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len)) < 0 ||
            !listening) {
                log_err("LISTEN_FDS: descriptor 3 is not a listening stream socket");
                return -1;
        }
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
            fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
                log_err("LISTEN_FDS: %s", strerror(errno));
                return -1;
        }
        return fd;
}

/* Listens on `path`, with a log line for each way it can fail. */
static int listen_unix(const char *path, int *out)
{
        int fd = unixsock_listen(path, 128);

        if (fd == -EADDRINUSE)
                log_err("another gemmd is serving %s", path);
        else if (fd < 0)
                log_err("cannot listen on %s: %s", path, strerror(-fd));
        if (fd < 0)
                return fd;
        *out = fd;
        return 0;
}

/* Where a session hands its frames: the protocol layer (dispatch.c). */
static const struct session_up session_up = {
        .frame = dispatch_frame,
        .frames_done = dispatch_frames_done,
        .closing = dispatch_session_closing,
};

/* What the layers below ask of the server, through their loop (loop.h):
 * nothing below calls server.c by name. */
static const struct loop_up loop_up = {
        .reap = server_reap,
        .settled = server_maybe_finish,
};

/* Hands an accepted connection to loop ev (loop 0's thread). */
static void hand_to_loop(struct evloop *ev, int fd)
{
        if (ev->index == 0) {
                session_accept(ev, fd, &session_up);
                return;
        }
        pthread_mutex_lock(&ev->done_lock);
        if (ev->nnew == ev->capnew) {
                uint32_t cap = ev->capnew ? 2 * ev->capnew : 16;
                int *v = realloc(ev->newfds, cap * sizeof(*v));

                if (!v) {
                        pthread_mutex_unlock(&ev->done_lock);
                        log_warn("out of memory: a connection is closed unserved");
                        close(fd);
                        return;
                }
                ev->newfds = v;
                ev->capnew = cap;
        }
        ev->newfds[ev->nnew++] = fd;
        pthread_mutex_unlock(&ev->done_lock);
        loop_wake(ev);
}

/* Refuses the connection fd at once: best effort, one Error frame (err, a
 * library code, and why), then end of stream. */
static void refuse_now(struct server *srv, int fd, int err, const char *why)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Error e = GEMMD__V1__ERROR__INIT;
        uint8_t *buf;
        size_t n;

        e.code = (Gemmd__V1__Code)frame_err_to_code(err);
        e.message = (char *)why;
        e.op_index = -1;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_ERROR;
        env.error = &e;
        if (frame_pack(&env, 0, UINT32_MAX, &buf, &n) == 0) {
                (void)!send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
                free(buf);
        }
        if ((unsigned)e.code < sizeof(srv->rejections) / sizeof(srv->rejections[0]))
                atomic_fetch_add(&srv->rejections[e.code], 1);
        close(fd);
}

/* Says that accept() failed with err, at most once a second, with the
 * connections refused for it since the last time (`refused` more now): a
 * full descriptor table meets every client that comes. */
static void accept_warn(struct server *srv, int err, uint32_t refused)
{
        uint64_t now = now_ns();
        struct rlimit rl = {0};

        srv->accept_refused += refused;
        if ((srv->accept_warn_ns && now - srv->accept_warn_ns < 1000000000ull) ||
            ((err == EMFILE || err == ENFILE) && !srv->accept_refused))
                return; /* the last descriptor was just taken: nobody refused yet */
        getrlimit(RLIMIT_NOFILE, &rl);
        if (err == EMFILE || err == ENFILE)
                log_warn("accept: %s (descriptor limit %llu): %u connection(s) refused since the "
                         "last warning",
                         strerror(err), (unsigned long long)rl.rlim_cur, srv->accept_refused);
        else
                log_warn("accept: %s: new connections wait", strerror(err));
        srv->accept_warn_ns = now;
        srv->accept_refused = 0;
}

/* The spare descriptor: /dev/null, held to be given up for a connection
 * the daemon has no descriptor for, so that it can be told and closed. */
static void take_spare(struct server *srv)
{
        if (srv->spare_fd < 0)
                srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_listen(uv_poll_t *h, int status, int events);

static void on_rested(uv_timer_t *t)
{
        struct server *srv = t->data;

        if (srv->listening)
                uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen);
}

/* No descriptor is left even to refuse a connection with: the listener,
 * still readable, would be called again at once for as long as that
 * lasts, so it rests a while (its backlog waits). */
#define LISTEN_REST_MS 100

static void rest_listener(struct server *srv)
{
        uv_poll_stop(&srv->listen_poll);
        uv_timer_start(&srv->listen_rest, on_rested, LISTEN_REST_MS, 0);
}

/* Out of descriptors, where accept() fails whether a connection waits or
 * not: the spare is given up, the next pending connection accepted on it,
 * told RESOURCE and closed, and the spare taken again (as libuv's users
 * do). Returns 1 when one was refused, 0 when none was pending, or -1
 * when there was no spare or the accept still failed (another thread took
 * the descriptor). */
static int refuse_on_spare(struct server *srv)
{
        int fd, err;

        if (srv->spare_fd < 0)
                return -1;
        close(srv->spare_fd);
        srv->spare_fd = -1;
        fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        err = errno;
        if (fd >= 0)
                refuse_now(srv, fd, GEMMD_ERESOURCE,
                           "too many connections: the daemon is out of file descriptors");
        take_spare(srv);
        return fd >= 0 ? 1 : err == EAGAIN || err == EWOULDBLOCK ? 0 : -1;
}

static void on_listen(uv_poll_t *h, int status, int events)
{
        struct server *srv = h->data;
        char why[128];

        for (int i = 0; i < 64; i++) {
                int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                int full, err;

                if (fd < 0) {
                        err = errno;
                        if (err == EAGAIN || err == EWOULDBLOCK)
                                return;
                        if (err == EINTR || err == ECONNABORTED)
                                continue;
                        if (err == EMFILE || err == ENFILE) {
                                int rc = refuse_on_spare(srv);

                                if (rc >= 0) {
                                        accept_warn(srv, err, (uint32_t)rc);
                                        if (rc)
                                                continue;
                                        return;
                                }
                        }
                        /* ENOBUFS, ENOMEM, or no spare: the connection stays
                         * in the backlog until the listener is back. */
                        accept_warn(srv, err, 0);
                        rest_listener(srv);
                        return;
                }
                take_spare(srv); /* one refusal took it and could not take it back */
                /* Past a limit a session answers its Hello with LIMIT
                 * (session_accept), so that its client knows why. Past
                 * SESSION_MAX_DENIED of them, a connection that would be
                 * refused is refused here, with its reason; one that would
                 * be served (a user's first session, say) still is. */
                pthread_mutex_lock(&srv->lock);
                full = srv->ndenied >= SESSION_MAX_DENIED;
                pthread_mutex_unlock(&srv->lock);
                if (full && (err = session_admissible(srv, fd, why, sizeof(why)))) {
                        refuse_now(srv, fd, err, why);
                        continue;
                }
                hand_to_loop(&srv->loops[srv->next_loop++ % (uint32_t)srv->nloops], fd);
        }
}

void server_post_control(struct wctl *c, void *ctx)
{
        struct server *srv = ctx;
        struct evloop *ev = c->home ? c->home : &srv->loops[0];

        c->next = NULL;
        pthread_mutex_lock(&ev->done_lock);
        if (ev->ctl_tail)
                ev->ctl_tail->next = c;
        else
                ev->ctl_head = c;
        ev->ctl_tail = c;
        pthread_mutex_unlock(&ev->done_lock);
        loop_wake(ev);
}

void server_reap(struct evloop *ev)
{
        struct server *srv = ev->srv;
        struct request *r, *next;
        struct wctl *c, *cnext;
        int *fds;
        uint32_t nfds;
        uint64_t t0 = now_ns();

        ev->active_ns = t0;

        pthread_mutex_lock(&ev->done_lock);
        r = ev->done_head;
        ev->done_head = ev->done_tail = NULL;
        c = ev->ctl_head;
        ev->ctl_head = ev->ctl_tail = NULL;
        fds = ev->newfds;
        nfds = ev->nnew;
        if (nfds) {
                ev->newfds = NULL;
                ev->nnew = ev->capnew = 0;
        }
        pthread_mutex_unlock(&ev->done_lock);
        for (uint32_t i = 0; i < nfds; i++)
                session_accept(ev, fds[i], &session_up);
        if (nfds)
                free(fds);
        ev->defer_flush++;
        for (; c; c = cnext) {
                cnext = c->next;
                c->done(c);
        }
        if (ev->index == 0 && atomic_load(&srv->device_lost) && !atomic_load(&srv->draining)) {
                log_err("a device is lost: finishing in-flight work, then exiting for a restart");
                srv->exit_code = 1;
                server_drain(srv);
        }
        for (; r; r = next) {
                next = r->next;
                dispatch_completion(r);
        }
        /* Inside a read, the replies go out with the read's. */
        if (--ev->defer_flush == 0)
                session_flush_dirty(ev);
        ev->loop_part_ns[LOOP_REAP] += now_ns() - t0;
}

static void on_async(uv_async_t *h);

/* Runs loop ev until its handles are closed (loop 0) or it is told to
 * stop (the others). */
static void run_loop(struct evloop *ev)
{
        const uint64_t win = ev->srv->cfg->spin_us * 1000ull;

        while (!atomic_load(&ev->stop)) {
                int polling = win && now_ns() - ev->active_ns < win;

                /* Before it blocks, the loop tells the threads that hand it
                 * work (loop_wake) and its sessions' rings that it sleeps;
                 * a hand-off or a Submit that came meanwhile keeps it
                 * polling. */
                if (polling != atomic_load_explicit(&ev->polling, memory_order_relaxed))
                        atomic_store(&ev->polling, polling);
                if (!polling && (atomic_load(&ev->handed) || !ring_sleep(ev)))
                        polling = 1;
                if (!uv_run(ev->loop, polling ? UV_RUN_NOWAIT : UV_RUN_ONCE))
                        break;
                if (ev->rings)
                        ring_drain(ev);
                if (atomic_load_explicit(&ev->handed, memory_order_relaxed))
                        on_async(&ev->async);
        }
}

void server_run(struct server *srv)
{
        run_loop(&srv->loops[0]);
}

static void *loop_main(void *arg)
{
        cpuacct_thread_start(CPU_LOOP);
        run_loop(arg);
        return NULL;
}

static void on_async(uv_async_t *h)
{
        struct evloop *ev = h->data;
        uint64_t t0 = now_ns();

        /* Cleared before the queues are taken: a hand-off after this
         * sets it again for the next turn. */
        atomic_store(&ev->handed, 0);
        if (atomic_load(&ev->stop))
                return;
        if (atomic_load(&ev->srv->draining))
                ev->draining = 1;
        server_reap(ev);
        if (atomic_load(&ev->srv->draining))
                server_maybe_finish(ev);
        loop_account(ev, t0);
}

/* A worker's device is beyond repair (worker thread): the loop drains and
 * the daemon exits 1, so that systemd (Restart=on-failure) starts a new
 * process with a fresh device context. */
static void device_lost(void *ctx)
{
        struct server *srv = ctx;

        atomic_store(&srv->device_lost, 1);
        loop_wake(&srv->loops[0]);
}

static void on_signal(uv_signal_t *h, int signum)
{
        struct server *srv = h->data;

        log_info("signal %d: finishing in-flight work", signum);
        server_drain(srv);
}

static void close_listener(struct server *srv)
{
        if (!srv->listening)
                return;
        srv->listening = 0;
        uv_close((uv_handle_t *)&srv->listen_poll, NULL);
        uv_close((uv_handle_t *)&srv->listen_rest, NULL);
        close(srv->listen_fd);
        if (srv->listen_owned)
                unlink(srv->cfg->socket_path);
}

void server_drain(struct server *srv)
{
        if (atomic_load(&srv->draining))
                return;
        atomic_store(&srv->draining, 1);
        srv->loops[0].draining = 1; /* this thread's; the others see it at their wake-up */
        notify_send("STOPPING=1\nSTATUS=finishing in-flight work");
        close_listener(srv);
        /* The drain waits for every task: none is held back any more. */
        for (int i = 0; i < srv->nworkers; i++)
                worker_hurry(&srv->workers[i]);
        loop_wake_all(srv);
        server_maybe_finish(&srv->loops[0]);
}

/* Loop 0, once every loop has drained: stops the other loops' threads,
 * then the workers, and closes every handle, so that server_run returns. */
static void finish(struct server *srv)
{
        for (int i = 1; i < srv->nloops; i++) {
                struct evloop *ev = &srv->loops[i];

                atomic_store(&ev->stop, 1);
                loop_wake(ev);
                pthread_join(ev->thread, NULL);
        }
        /* Nothing is queued or running: the workers exit at once. */
        for (int i = 0; i < srv->nworkers; i++)
                worker_stop(&srv->workers[i]);
        for (int i = 1; i < srv->nloops; i++) {
                struct evloop *ev = &srv->loops[i];

                uv_close((uv_handle_t *)&ev->async, NULL);
                uv_close((uv_handle_t *)&ev->sweep_timer, NULL);
                uv_run(ev->loop, UV_RUN_DEFAULT);
                if (uv_loop_close(ev->loop))
                        log_warn("loop %d: handles left open", i);
        }
        uv_close((uv_handle_t *)&srv->sigterm, NULL);
        uv_close((uv_handle_t *)&srv->sigint, NULL);
        uv_close((uv_handle_t *)&srv->loops[0].async, NULL);
        uv_close((uv_handle_t *)&srv->loops[0].sweep_timer, NULL);
        metrics_stop();
        watchdog_stop();
}

void server_maybe_finish(struct evloop *ev)
{
        struct server *srv = ev->srv;
        struct session *s, *next;
        int busy;

        if (!atomic_load(&srv->draining) || atomic_load(&ev->finished))
                return;
        pthread_mutex_lock(&srv->lock);
        busy = srv->queued_ops || srv->pending_controls;
        pthread_mutex_unlock(&srv->lock);
        if (busy)
                return;
        for (s = ev->sessions; s; s = s->next)
                if (session_has_output(s))
                        return; /* replies still being written */
        /* Set first: closing a session calls this again. */
        atomic_store(&ev->finished, 1);
        for (s = ev->sessions; s; s = next) {
                next = s->next;
                session_close(s);
        }
        if (ev->index > 0) {
                loop_wake(&srv->loops[0]); /* loop 0 waits for every loop */
                return;
        }
        for (int i = 1; i < srv->nloops; i++)
                if (!atomic_load(&srv->loops[i].finished)) {
                        atomic_store(&ev->finished, 0); /* checked again when loop i is done */
                        return;
                }
        finish(srv);
}

#ifdef GEMMD_WITH_CUDA
/* Whether --devices names device d: an exact match of an index, so that
 * "10" does not also select 1 and 0. */
static int device_listed(const struct gemmd_config *cfg, uint32_t d)
{
        for (uint32_t i = 0; i < cfg->n_device_ids; i++)
                if (cfg->device_ids[i] == d)
                        return 1;
        return 0;
}
#endif

static int start_backends(struct server *srv)
{
        const struct gemmd_config *cfg = srv->cfg;
        enum backend_kind kind = cfg->backend;
        int rc = 0, n = 0;

#ifdef GEMMD_WITH_CUDA
        int ncuda = backend_cuda_count();

        if (kind == BACKEND_AUTO)
                kind = ncuda > 0 ? BACKEND_CUDA : BACKEND_CPU;
        if (kind == BACKEND_CUDA) {
                if (ncuda <= 0) {
                        log_err("--backend cuda: no usable CUDA device");
                        return -ENODEV;
                }
                srv->backends = calloc((size_t)ncuda, sizeof(*srv->backends));
                if (!srv->backends)
                        return -ENOMEM;
                for (uint32_t i = 0; i < cfg->n_device_ids; i++)
                        if (cfg->device_ids[i] >= (uint32_t)ncuda) {
                                log_err("--devices %s: there is no device %u (%d found)",
                                        cfg->devices, cfg->device_ids[i], ncuda);
                                return -ENODEV;
                        }
                for (int d = 0; d < ncuda; d++) {
                        if (cfg->devices && !device_listed(cfg, (uint32_t)d))
                                continue;
                        rc = cfg->device_process
                                     ? backend_proc_new(BACKEND_CUDA, d, cfg, &srv->backends[n])
                                     : backend_cuda_new(d, cfg, &srv->backends[n]);
                        if (rc)
                                return rc;
                        srv->nbackends = ++n;
                }
                if (n == 0) {
                        log_err("--devices %s selects no device", cfg->devices);
                        return -ENODEV;
                }
        }
#else
        if (kind == BACKEND_CUDA) {
                log_err("--backend cuda: this gemmd was built without CUDA");
                return -ENODEV;
        }
        kind = BACKEND_CPU;
#endif
        if (kind == BACKEND_CPU) {
                srv->backends = calloc(1, sizeof(*srv->backends));
                if (!srv->backends)
                        return -ENOMEM;
                rc = cfg->device_process
                             ? backend_proc_new(BACKEND_CPU, 0, cfg, &srv->backends[0])
                             : backend_cpu_new(cfg->threads, cfg->cpu_alt_tiles, cfg->cpu_wave_cut, cfg->cpu_early,
                                               &srv->backends[0]);
                if (rc)
                        return rc;
                srv->nbackends = n = 1;
        }
        srv->workers = calloc((size_t)n, sizeof(*srv->workers));
        srv->dev_dtypes = calloc((size_t)n, sizeof(*srv->dev_dtypes));
        if (!srv->workers || !srv->dev_dtypes)
                return -ENOMEM;
        /* What validation accepts: a dtype some device runs. */
        for (int i = 0; i < n; i++) {
                srv->dev_dtypes[i] = srv->backends[i]->dtypes;
                srv->caps.any |= srv->backends[i]->dtypes;
        }
        srv->caps.dev = srv->dev_dtypes;
        srv->caps.ndev = n;
        for (int i = 0; i < n; i++) {
                rc = worker_start(&srv->workers[i], i, srv->backends[i], cfg,
                                  reply_post, server_post_control,
                                  launch_notice_send, srv);
                srv->workers[i].device_lost = device_lost;
                if (rc)
                        return rc;
                srv->nworkers++;
                log_info("device %d: %s backend, %s", i, srv->backends[i]->kind,
                         srv->backends[i]->name);
        }
        return 0;
}

/*
 * How many sessions with work in flight may have their clients poll: what
 * --client-poll-max says, or the online CPUs less the daemon's threads that
 * keep one busy (the loops, and each device's worker and completion thread,
 * while they poll; the CPU backend's compute threads). Each polling client
 * holds a CPU as they do; past that, the daemon's threads wait for one,
 * so many polling clients slow everyone, while few gain a few
 * microseconds a request (docs/performance.md).
 */
static uint32_t client_poll_max(const struct server *srv)
{
        const struct gemmd_config *cfg = srv->cfg;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN), busy = 0;

        if (cfg->client_poll_max != CLIENT_POLL_AUTO)
                return cfg->client_poll_max;
        if (cfg->spin_us)
                busy += srv->nloops + 2L * srv->nworkers;
        for (int i = 0; i < srv->nbackends; i++)
                if (!strcmp(srv->backends[i]->kind, "cpu"))
                        busy += cfg->threads;
        return ncpu > busy ? (uint32_t)(ncpu - busy) : 0;
}

/* Sets up loop ev (index i; loop 0 is the main thread's `main`). */
static int loop_init(struct server *srv, struct evloop *ev, int i, uv_loop_t *main)
{
        const struct limits *lim = &srv->cfg->lim;
        uint64_t every = lim->hello_timeout_ms;
        int rc;

        ev->srv = srv;
        ev->up = &loop_up;
        ev->index = i;
        if (i == 0) {
                ev->loop = main;
        } else {
                rc = uv_loop_init(&ev->own);
                if (rc) {
                        log_err("uv_loop_init: %s", uv_strerror(rc));
                        return rc;
                }
                ev->loop = &ev->own;
        }
        lock_init(&ev->done_lock);
        uv_async_init(ev->loop, &ev->async, on_async);
        ev->async.data = ev;
        uv_timer_init(ev->loop, &ev->sweep_timer);
        ev->sweep_timer.data = ev;
        /* At half the shortest timeout, and at least once a second. */
        if (lim->frame_timeout_ms && lim->frame_timeout_ms < every)
                every = lim->frame_timeout_ms;
        if (lim->idle_timeout_ms && lim->idle_timeout_ms < every)
                every = lim->idle_timeout_ms;
        every = every / 2 > 1000 ? 1000 : every / 2;
        uv_timer_start(&ev->sweep_timer, session_sweep, every, every);
        return 0;
}

int server_init(struct server *srv, uv_loop_t *loop, const struct gemmd_config *cfg)
{
        int rc, want;

        memset(srv, 0, sizeof(*srv));
        srv->spare_fd = -1;
        srv->loop = loop;
        srv->cfg = cfg;
        srv->t_start_ns = now_ns();
        pthread_mutex_init(&srv->lock, NULL);
        if (pcounts_init(&srv->counts)) {
                pthread_mutex_destroy(&srv->lock);
                return -ENOMEM;
        }
        rc = start_backends(srv);
        if (rc)
                goto err;
        {
                const int gpu = strcmp(srv->backends[0]->kind, "cpu") != 0;

                want = cfg->loops != LOOPS_AUTO
                               ? cfg->loops
                               : config_auto_loops(gpu, (int)srv->nbackends, sysconf(_SC_NPROCESSORS_ONLN));
        }
        srv->loops = calloc((size_t)want, sizeof(*srv->loops));
        if (!srv->loops) {
                rc = -ENOMEM;
                goto err;
        }
        /* Metrics first: a client that finds the socket accepting (a
         * probe, a test) may scrape at once. */
        rc = metrics_start(srv);
        if (rc)
                goto err;
        srv->listen_fd = activated_fd();
        if (srv->listen_fd < 0) {
                rc = listen_unix(cfg->socket_path, &srv->listen_fd);
                if (rc) {
                        metrics_stop();
                        goto err;
                }
                srv->listen_owned = 1;
        } else {
                log_info("using the listening socket passed by systemd");
        }
        take_spare(srv);
        if (srv->spare_fd < 0)
                log_warn("cannot open /dev/null (%s): out of descriptors, the listener rests instead of refusing",
                         strerror(errno));
        /* The loops: 0 here, the others each on a thread of its own. A
         * loop that cannot start leaves the daemon with fewer. */
        loop_init(srv, &srv->loops[0], 0, loop);
        srv->nloops = 1;
        for (int i = 1; i < want; i++) {
                struct evloop *ev = &srv->loops[i];

                if (loop_init(srv, ev, i, loop))
                        break;
                if (pthread_create(&ev->thread, NULL, loop_main, ev) != 0) {
                        log_err("cannot start event loop %d: serving with %d", i, srv->nloops);
                        uv_close((uv_handle_t *)&ev->async, NULL);
                        uv_close((uv_handle_t *)&ev->sweep_timer, NULL);
                        uv_run(ev->loop, UV_RUN_DEFAULT);
                        uv_loop_close(ev->loop);
                        break;
                }
                {
                        char name[16];

                        snprintf(name, sizeof(name), "gemmd-loop%u", (unsigned)i & 63u);
                        pthread_setname_np(ev->thread, name);
                }
                srv->nloops = i + 1;
        }
        srv->poll_max = client_poll_max(srv);
        uv_signal_init(loop, &srv->sigterm);
        uv_signal_init(loop, &srv->sigint);
        srv->sigterm.data = srv->sigint.data = srv;
        uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
        uv_signal_start(&srv->sigint, on_signal, SIGINT);
        uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
        srv->listen_poll.data = srv;
        uv_timer_init(loop, &srv->listen_rest);
        srv->listen_rest.data = srv;
        uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen);
        srv->listening = 1;
        log_info("listening on %s (%d event loop%s)", srv->listen_owned ? cfg->socket_path : "(socket activation)",
                 srv->nloops, srv->nloops == 1 ? "" : "s");
        return 0;
err:
        server_deinit(srv);
        return rc;
}

void server_deinit(struct server *srv)
{
        for (int i = 0; i < srv->nworkers; i++)
                worker_stop(&srv->workers[i]);
        for (int i = 0; i < srv->nbackends; i++)
                srv->backends[i]->destroy(srv->backends[i]);
        free(srv->workers);
        free(srv->backends);
        free(srv->dev_dtypes);
        srv->workers = NULL;
        srv->backends = NULL;
        srv->dev_dtypes = NULL;
        srv->caps = (struct dtype_caps){0};
        srv->nworkers = 0;
        srv->nbackends = 0;
        for (int i = 0; i < srv->nloops; i++) {
                pthread_mutex_destroy(&srv->loops[i].done_lock);
                free(srv->loops[i].newfds);
        }
        free(srv->loops);
        srv->loops = NULL;
        srv->nloops = 0;
        if (srv->spare_fd >= 0)
                close(srv->spare_fd);
        srv->spare_fd = -1;
        pcounts_deinit(&srv->counts);
        pthread_mutex_destroy(&srv->lock);
}

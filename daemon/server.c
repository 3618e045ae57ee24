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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
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

static void on_listen(uv_poll_t *h, int status, int events)
{
        struct server *srv = h->data;

        for (int i = 0; i < 64; i++) {
                int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (fd < 0) {
                        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                                log_warn("accept: %s", strerror(errno));
                        return;
                }
                if (srv->nsessions - srv->ndenied >= srv->cfg->lim.max_sessions &&
                    srv->ndenied >= SESSION_MAX_DENIED) {
                        /* Past the limit a session answers its Hello with
                         * LIMIT (session_accept). Past that many of them too:
                         * best effort, one Error frame, then end of stream. */
                        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
                        Gemmd__V1__Error e = GEMMD__V1__ERROR__INIT;
                        uint8_t *buf;
                        size_t n;

                        e.code = GEMMD__V1__CODE__LIMIT;
                        e.message = "too many connections";
                        e.op_index = -1;
                        env.body_case = GEMMD__V1__ENVELOPE__BODY_ERROR;
                        env.error = &e;
                        if (frame_pack(&env, 0, UINT32_MAX, &buf, &n) == 0) {
                                (void)!send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
                                free(buf);
                        }
                        srv->rejections[GEMMD__V1__CODE__LIMIT]++;
                        close(fd);
                        continue;
                }
                session_accept(srv, fd);
        }
}

void server_queue_done_list(struct server *srv, struct request *head, struct request *tail)
{
        tail->next = NULL;
        pthread_mutex_lock(&srv->done_lock);
        if (srv->done_tail)
                srv->done_tail->next = head;
        else
                srv->done_head = head;
        srv->done_tail = tail;
        pthread_mutex_unlock(&srv->done_lock);
}

/* The thread that completes a group answers its requests itself, with
 * one write per session, and the loop thread only takes them in. (When
 * the loop packed and wrote the replies of every group of more than four
 * requests, on the H100 at 8 clients x 8 in flight it was busy for 94% of
 * the run in callbacks of 8-31 us, and a submit waited 64 us for it.) */
void server_post_completions(struct request *done, void *ctx)
{
        struct server *srv = ctx;
        struct request *r = done, *tail;
        int stuck = 0;

        /* In order, while each can be answered here: once one must wait
         * for the loop, the ones after it wait too, so that no reply of a
         * session overtakes one the loop still has to write. */
        while (r && !stuck)
                r = session_reply_now(r, &stuck);
        /* The rest, for the loop, under one lock. */
        if (r) {
                for (tail = r; tail->next; tail = tail->next)
                        ;
                server_queue_done_list(srv, r, tail);
        }
        uv_async_send(&srv->async);
}

void server_post_control(struct wctl *c, void *ctx)
{
        struct server *srv = ctx;

        c->next = NULL;
        pthread_mutex_lock(&srv->done_lock);
        if (srv->ctl_tail)
                srv->ctl_tail->next = c;
        else
                srv->ctl_head = c;
        srv->ctl_tail = c;
        pthread_mutex_unlock(&srv->done_lock);
        uv_async_send(&srv->async);
}

void server_reap(struct server *srv)
{
        struct request *r, *next;
        struct wctl *c, *cnext;
        uint64_t t0 = now_ns();

        srv->active_ns = t0;

        pthread_mutex_lock(&srv->done_lock);
        r = srv->done_head;
        srv->done_head = srv->done_tail = NULL;
        c = srv->ctl_head;
        srv->ctl_head = srv->ctl_tail = NULL;
        pthread_mutex_unlock(&srv->done_lock);
        srv->defer_flush++;
        for (; c; c = cnext) {
                cnext = c->next;
                c->done(c);
        }
        if (atomic_load(&srv->device_lost) && !srv->draining) {
                log_err("a device is lost: finishing in-flight work, then exiting for a restart");
                srv->exit_code = 1;
                server_drain(srv);
        }
        for (; r; r = next) {
                next = r->next;
                dispatch_completion(r);
        }
        /* Inside a read, the replies go out with the read's. */
        if (--srv->defer_flush == 0)
                server_flush_dirty(srv);
        srv->loop_part_ns[LOOP_REAP] += now_ns() - t0;
}

void server_run(struct server *srv)
{
        const uint64_t win = srv->cfg->spin_us * 1000ull;

        for (;;) {
                const int polling = win && now_ns() - srv->active_ns < win;

                if (!uv_run(srv->loop, polling ? UV_RUN_NOWAIT : UV_RUN_ONCE))
                        break;
        }
}

void server_loop_account(struct server *srv, uint64_t t0)
{
        uint64_t dt = now_ns() - t0;

        srv->loop_callbacks++;
        srv->loop_busy_ns += dt;
        srv->loop_hist[hist_bucket(dt / 1000)]++;
}

static void on_async(uv_async_t *h)
{
        uint64_t t0 = now_ns();

        server_reap(h->data);
        server_loop_account(h->data, t0);
}

struct worker *server_pick_worker(struct server *srv, const struct request *r)
{
        struct worker *best = &srv->workers[0];
        uint32_t best_pending = UINT32_MAX;

        /* Device memory must run where it lives. */
        for (uint32_t i = 0; i < r->nops; i++)
                for (int j = 0; j < 3; j++)
                        if (r->ops[i].buf[j] && r->ops[i].buf[j]->kind == GBUF_CUDA)
                                return &srv->workers[r->ops[i].buf[j]->device];
        for (int i = 0; i < srv->nworkers; i++) {
                struct worker *w = &srv->workers[i];
                uint32_t pending = w->pending_ops + w->inflight; /* a racy read is fine here */

                if (pending < best_pending) {
                        best = w;
                        best_pending = pending;
                }
        }
        return best;
}

/* A worker's device is beyond repair (worker thread): the loop drains and
 * the daemon exits 1, so that systemd (Restart=on-failure) starts a new
 * process with a fresh device context. */
static void device_lost(void *ctx)
{
        struct server *srv = ctx;

        atomic_store(&srv->device_lost, 1);
        uv_async_send(&srv->async);
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
        close(srv->listen_fd);
        if (srv->listen_owned)
                unlink(srv->cfg->socket_path);
}

void server_drain(struct server *srv)
{
        if (srv->draining)
                return;
        srv->draining = 1;
        notify_send("STOPPING=1\nSTATUS=finishing in-flight work");
        close_listener(srv);
        server_maybe_finish(srv);
}

void server_maybe_finish(struct server *srv)
{
        struct session *s, *next;

        if (!srv->draining || srv->queued_ops || srv->pending_controls)
                return;
        for (s = srv->sessions; s; s = s->next)
                if (session_has_output(s))
                        return; /* replies still being written */
        for (s = srv->sessions; s; s = next) {
                next = s->next;
                session_close(s);
        }
        if (!uv_is_closing((uv_handle_t *)&srv->async)) {
                /* Nothing is queued or running: the workers exit at once. */
                for (int i = 0; i < srv->nworkers; i++)
                        worker_stop(&srv->workers[i]);
                uv_close((uv_handle_t *)&srv->sigterm, NULL);
                uv_close((uv_handle_t *)&srv->sigint, NULL);
                uv_close((uv_handle_t *)&srv->async, NULL);
                uv_close((uv_handle_t *)&srv->hello_timer, NULL);
                metrics_stop();
                watchdog_stop();
        }
}

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
                for (int d = 0; d < ncuda; d++) {
                        char want[16];

                        snprintf(want, sizeof(want), "%d", d);
                        if (cfg->devices && !strstr(cfg->devices, want))
                                continue;
                        rc = backend_cuda_new(d, cfg, &srv->backends[n]);
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
                rc = backend_cpu_new(cfg->threads, &srv->backends[0]);
                if (rc)
                        return rc;
                srv->nbackends = n = 1;
        }
        srv->workers = calloc((size_t)n, sizeof(*srv->workers));
        if (!srv->workers)
                return -ENOMEM;
        for (int i = 0; i < n; i++) {
                rc = worker_start(&srv->workers[i], i, srv->backends[i], cfg,
                                  server_post_completions, server_post_control, srv);
                srv->workers[i].device_lost = device_lost;
                if (rc)
                        return rc;
                srv->nworkers++;
                log_info("device %d: %s backend, %s", i, srv->backends[i]->kind,
                         srv->backends[i]->name);
        }
        return 0;
}

int server_init(struct server *srv, uv_loop_t *loop, const struct gemmd_config *cfg)
{
        int rc;

        memset(srv, 0, sizeof(*srv));
        srv->loop = loop;
        srv->cfg = cfg;
        srv->t_start_ns = now_ns();
        pthread_mutex_init(&srv->done_lock, NULL);
        rc = start_backends(srv);
        if (rc)
                goto err;
        srv->listen_fd = activated_fd();
        if (srv->listen_fd < 0) {
                rc = listen_unix(cfg->socket_path, &srv->listen_fd);
                if (rc)
                        goto err;
                srv->listen_owned = 1;
        } else {
                log_info("using the listening socket passed by systemd");
        }
        rc = metrics_start(srv);
        if (rc)
                goto err;
        uv_async_init(loop, &srv->async, on_async);
        srv->async.data = srv;
        uv_signal_init(loop, &srv->sigterm);
        uv_signal_init(loop, &srv->sigint);
        srv->sigterm.data = srv->sigint.data = srv;
        uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
        uv_signal_start(&srv->sigint, on_signal, SIGINT);
        uv_timer_init(loop, &srv->hello_timer);
        srv->hello_timer.data = srv;
        {
                uint64_t every = cfg->lim.hello_timeout_ms / 2;

                every = every > 1000 ? 1000 : every;
                uv_timer_start(&srv->hello_timer, session_sweep_hello, every, every);
        }
        uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
        srv->listen_poll.data = srv;
        uv_poll_start(&srv->listen_poll, UV_READABLE, on_listen);
        srv->listening = 1;
        log_info("listening on %s", srv->listen_owned ? cfg->socket_path : "(socket activation)");
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
        srv->workers = NULL;
        srv->backends = NULL;
        srv->nworkers = 0;
        srv->nbackends = 0;
        pthread_mutex_destroy(&srv->done_lock);
}

/*
 * session.c - one client connection: framed input with file descriptors,
 * queued output, and the session's lifetime.
 *
 * libuv's pipe API cannot receive arbitrary descriptors, so a session polls
 * its socket with a uv_poll_t and does its own recvmsg/send. A session is
 * freed when its connection is closed and no request of it is in flight.
 *
 * Whole frames go up through the session's struct session_up (session.h),
 * which the server wires to the protocol layer; nothing here calls that
 * layer by name.
 *
 * Output is written by the loop thread, and by the thread that completes a
 * request when that one can answer it at once (session_out_begin, from
 * reply.c), so the output queue and the writes are under out_lock. The
 * session outlives such a writer: the writer's request holds a reference,
 * which the loop drops only after session_reply_taken has waited for the
 * writer to let go.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/lock.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/ring.h"
#include "daemon/session.h"
#include "daemon/users.h"
#include "gemmd.h"

static void on_io(uv_poll_t *h, int status, int events);

void session_set_state(struct session *s, enum session_state st)
{
        s->state = st;
        s->t_state_ns = now_ns();
}

static void update_poll(struct session *s)
{
        int ev = 0;

        if (s->state == SESSION_CLOSED)
                return;
        pthread_mutex_lock(&s->out_lock);
        /* Stop reading while the client leaves its replies unread. */
        if (s->state != SESSION_CLOSING && s->out_bytes <= s->srv->cfg->lim.max_output_bytes)
                ev |= UV_READABLE;
        if (s->out_head)
                ev |= UV_WRITABLE;
        pthread_mutex_unlock(&s->out_lock);
        if (ev == s->poll_events)
                return;
        s->poll_events = ev;
        if (ev)
                uv_poll_start(&s->poll, ev, on_io);
        else
                uv_poll_stop(&s->poll);
}

/* Whether the daemon serves one more session of user u (NULL: a user with
 * none), whose count already includes `self` (0 or 1) for that session:
 * under --max-sessions, under the user's --max-user-sessions, and within
 * the last --first-session-slots only as the user's first, so that one
 * user holding everything it may still leaves a place for a user with
 * none. Called with srv->lock held. Returns 0, or GEMMD_ELIMIT with the
 * reason in why. */
static int admit(const struct server *srv, const struct user *u, uint32_t self, char *why,
                 size_t len)
{
        const struct limits *lim = &srv->cfg->lim;
        uint32_t live = srv->nsessions - srv->ndenied;
        uint32_t held = u ? u->sessions - u->denied - self : 0;

        if (live >= lim->max_sessions)
                snprintf(why, len, "too many connections (at most %u)", lim->max_sessions);
        else if (held >= lim->max_user_sessions)
                snprintf(why, len, "too many connections: uid %u has %u sessions (at most %u per user)",
                         u->uid, held, lim->max_user_sessions);
        else if (held && live >= lim->max_sessions - lim->first_session_slots)
                snprintf(why, len,
                         "too many connections: the last %u of %u are kept for users' first sessions",
                         lim->first_session_slots, lim->max_sessions);
        else
                return 0;
        return GEMMD_ELIMIT;
}

int session_admissible(struct server *srv, int fd, char *why, size_t len)
{
        struct ucred cred;
        socklen_t clen = sizeof(cred);
        struct user *u;
        int rc;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0)
                return 0; /* session_accept finds out and closes it */
        if (!users_allowed(srv->cfg, fd, &cred)) {
                snprintf(why, len, "uid %d is not allowed to use this daemon", (int)cred.uid);
                return GEMMD_EPERM;
        }
        pthread_mutex_lock(&srv->lock);
        for (u = srv->users; u && u->uid != cred.uid; u = u->next)
                ;
        rc = admit(srv, u, 0, why, len);
        pthread_mutex_unlock(&srv->lock);
        return rc;
}

/* Logs a refused connection, at most one line a second over all loops:
 * refusals may come in floods. */
static void warn_refused(const struct session *s, const char *why)
{
        static _Atomic uint64_t last_ns;
        uint64_t now = now_ns(), last = atomic_load(&last_ns);

        if (now - last < 1000000000ull || !atomic_compare_exchange_strong(&last_ns, &last, now))
                return;
        log_warn("refused a connection from uid %d gid %d pid %d: %s", (int)s->cred.uid,
                 (int)s->cred.gid, (int)s->cred.pid, why);
}

int session_accept(struct evloop *ev, int fd, const struct session_up *up)
{
        struct server *srv = ev->srv;
        struct session *s = calloc(1, sizeof(*s));
        socklen_t len = sizeof(s->cred);
        int rc = -ENOMEM;

        if (!s)
                goto err;
        lock_init(&s->out_lock);
        lock_init(&s->ring_lock);
        s->rbuf = malloc(SESSION_RBUF);
        s->lanes = calloc((size_t)srv->nworkers * NPRIO, sizeof(*s->lanes));
        if (!s->rbuf || !s->lanes)
                goto err_mem;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &s->cred, &len) < 0) {
                rc = -errno;
                goto err_mem;
        }
        pthread_mutex_lock(&srv->lock);
        s->user = users_get(srv, s->cred.uid);
        pthread_mutex_unlock(&srv->lock);
        if (!s->user)
                goto err_mem;
        for (int i = 0; i < srv->nworkers * NPRIO; i++)
                s->lanes[i].u = &s->user->ulanes[i];
        rc = uv_poll_init(ev->loop, &s->poll, fd);
        if (rc)
                goto err_user;
        s->poll.data = s;
        s->srv = srv;
        s->up = up;
        s->ev = ev;
        s->fd = fd;
        s->out_open = 1;
        s->refs = 1;
        s->t_accept_ns = s->t_active_ns = now_ns();
        session_set_state(s, SESSION_HELLO);
        /* A Submit's decoded form may be much larger than its frame (an
         * empty Op is 2 bytes on the wire): the arena bounds it. */
        frame_arena_init(&s->arena, 2 * srv->cfg->lim.max_frame_bytes +
                                            (size_t)srv->cfg->lim.max_ops_per_submit * 512);
        gbuf_table_init(&s->bufs);
        pthread_mutex_lock(&srv->lock);
        s->id = ++srv->next_session_id;
        if (admit(srv, s->user, 1, s->denied_why, sizeof(s->denied_why))) {
                s->denied = GEMMD_ELIMIT;
                s->user->denied++;
                srv->ndenied++;
        }
        s->next = ev->sessions;
        if (ev->sessions)
                ev->sessions->prev = s;
        ev->sessions = s;
        srv->nsessions++;
        pthread_mutex_unlock(&srv->lock);
        atomic_fetch_add(&srv->sessions_total, 1);
        update_poll(s);
        if (srv->cfg->verbose)
                log_info("session %llu: connected (pid %d, uid %d)", (unsigned long long)s->id,
                         (int)s->cred.pid, (int)s->cred.uid);
        s->admin = users_admin(srv->cfg, fd, &s->cred);
        /* A session denied above answers its Hello with LIMIT (dispatch.c). */
        if (s->denied)
                warn_refused(s, s->denied_why);
        if (!s->denied && !users_allowed(srv->cfg, fd, &s->cred)) {
                warn_refused(s, "not allowed");
                /* Its Hello is answered with PERMISSION (dispatch.c). */
                pthread_mutex_lock(&srv->lock);
                s->denied = GEMMD_EPERM;
                s->user->denied++;
                srv->ndenied++;
                pthread_mutex_unlock(&srv->lock);
        }
        return 0;

err_user:
        pthread_mutex_lock(&srv->lock);
        users_put(srv, s->user);
        pthread_mutex_unlock(&srv->lock);
err_mem:
        pthread_mutex_destroy(&s->out_lock);
        pthread_mutex_destroy(&s->ring_lock);
        free(s->lanes);
        free(s->rbuf);
        free(s);
err:
        close(fd);
        return rc;
}

/* Closes the descriptors that came with a frame not yet whole, and drops
 * its body: nothing more will be read. */
static void drop_partial(struct session *s)
{
        while (s->nfds)
                close(session_take_fd(s));
        free(s->body);
        s->body = NULL;
        s->t_frame_ns = 0;
}

/* Whether s holds nothing and waits for nothing: no frame begun, no
 * request in flight, no reply unwritten. */
static int idle(struct session *s)
{
        return s->state == SESSION_READY && !s->t_frame_ns && !s->inflight_ops && !s->staged &&
               !session_has_output(s);
}

/* Tells the client why it is closed, and closes it once that is written. */
static void expire(struct session *s, const char *why)
{
        session_send_error(s, 0, GEMMD_EPROTO, -1, "%s", why);
        session_close_after_flush(s);
}

/* What came of the frame not yet whole, in words ("123 of 4096 bytes"). */
static void partial_str(const struct session *s, char *buf, size_t len)
{
        uint32_t n;

        if (s->body)
                snprintf(buf, len, "%u of %u bytes", FRAME_HDR_BYTES + s->body_got,
                         FRAME_HDR_BYTES + s->body_len);
        else if (s->rlen >= FRAME_HDR_BYTES && !frame_len_decode(s->rbuf, UINT32_MAX, &n))
                snprintf(buf, len, "%zu of %llu bytes", s->rlen,
                         (unsigned long long)FRAME_HDR_BYTES + n);
        else
                snprintf(buf, len, "%zu bytes of its length", s->rlen);
}

void session_sweep(uv_timer_t *t)
{
        struct evloop *ev = t->data;
        const struct limits *lim = &ev->srv->cfg->lim;
        const uint64_t ms = 1000000ull, now = now_ns();
        struct session *s, *next;
        char why[200], part[64];

        for (s = ev->sessions; s; s = next) {
                next = s->next;
                /* While the client leaves its replies unread its frames are
                 * not read either: that is --max-output-bytes' business, and
                 * the frame's clock starts again when reading does. */
                if (s->t_frame_ns && session_output_full(s))
                        s->t_frame_ns = now;
                if (s->state == SESSION_HELLO && now - s->t_accept_ns > lim->hello_timeout_ms * ms) {
                        snprintf(why, sizeof(why), "no Hello within %u ms (--hello-timeout-ms): closed",
                                 lim->hello_timeout_ms);
                        expire(s, why);
                } else if (s->state == SESSION_READY && s->t_frame_ns && lim->frame_timeout_ms &&
                           now - s->t_frame_ns > lim->frame_timeout_ms * ms) {
                        partial_str(s, part, sizeof(part));
                        snprintf(why, sizeof(why),
                                 "a frame not whole %u ms after its first byte (%s came; "
                                 "--frame-timeout-ms): closed with the %d descriptor(s) sent with it",
                                 lim->frame_timeout_ms, part, s->nfds);
                        expire(s, why);
                } else if (lim->idle_timeout_ms && idle(s) &&
                           now - s->t_active_ns > lim->idle_timeout_ms * ms) {
                        snprintf(why, sizeof(why),
                                 "idle for %u ms, nothing in flight (--idle-timeout-ms): closed",
                                 lim->idle_timeout_ms);
                        expire(s, why);
                } else if (s->state == SESSION_CLOSING &&
                         now - s->t_state_ns > lim->hello_timeout_ms * ms)
                        session_close(s); /* it does not read its last error */
        }
}

int session_take_fd(struct session *s)
{
        int fd;

        if (s->nfds == 0)
                return -1;
        fd = s->fds[0];
        memmove(&s->fds[0], &s->fds[1], (size_t)(s->nfds - 1) * sizeof(int));
        s->nfds--;
        return fd;
}

void session_no_fd(struct session *s, uint64_t rid, const char *what)
{
        if (s->fds_dropped)
                session_send_error(s, rid, GEMMD_ERESOURCE, -1,
                                   "%s: the daemon is out of file descriptors and could not "
                                   "receive the one sent with it",
                                   what);
        else
                session_send_error(s, rid, GEMMD_EPROTO, -1, "%s without a file descriptor", what);
        s->fds_dropped = 0;
}

static void free_session(struct session *s)
{
        struct outbuf *o, *next;

        for (o = s->out_head; o; o = next) {
                next = o->next;
                users_inline_give(s, o->held);
                free(o);
        }
        frame_arena_deinit(&s->arena);
        ring_free(s); /* gives back its user's count of it */
        pthread_mutex_lock(&s->srv->lock);
        users_put(s->srv, s->user);
        pthread_mutex_unlock(&s->srv->lock);
        pthread_mutex_destroy(&s->out_lock);
        pthread_mutex_destroy(&s->ring_lock);
        free(s->lanes);
        free(s->rbuf);
        free(s->body);
        free(s);
}

void session_unref(struct session *s)
{
        if (--s->refs == 0)
                free_session(s);
}

static void on_poll_closed(uv_handle_t *h)
{
        struct session *s = h->data;

        close(s->fd);
        s->fd = -1;
        session_unref(s);
}

void session_close(struct session *s)
{
        struct server *srv = s->srv;
        struct gbuf_table dead;

        if (s->state == SESSION_CLOSED)
                return;
        session_set_state(s, SESSION_CLOSED);
        /* No other thread writes from here on; the descriptor is closed
         * only once the poll handle is (on_poll_closed). */
        pthread_mutex_lock(&s->out_lock);
        s->out_open = 0;
        pthread_mutex_unlock(&s->out_lock);
        ring_close(s);
        if (srv->cfg->verbose)
                log_info("session %llu: closed", (unsigned long long)s->id);
        s->up->closing(s);
        while (s->nfds)
                close(session_take_fd(s));
        pthread_mutex_lock(&srv->lock);
        s->user->buffer_bytes -= s->bufs.bytes;
        dead = s->bufs; /* released below, out of the lock */
        gbuf_table_init(&s->bufs);
        if (s->prev)
                s->prev->next = s->next;
        else
                s->ev->sessions = s->next;
        if (s->next)
                s->next->prev = s->prev;
        srv->nsessions--;
        if (s->denied) {
                srv->ndenied--;
                s->user->denied--;
        }
        pthread_mutex_unlock(&srv->lock);
        gbuf_table_deinit(&dead);
        uv_close((uv_handle_t *)&s->poll, on_poll_closed);
        s->ev->up->settled(s->ev);
}

void session_close_after_flush(struct session *s)
{
        int empty;

        if (s->state == SESSION_CLOSED)
                return;
        session_set_state(s, SESSION_CLOSING);
        drop_partial(s); /* nothing more is read */
        /* Replies from now on queue behind what is queued (the loop's). */
        pthread_mutex_lock(&s->out_lock);
        s->out_open = 0;
        empty = !s->out_head;
        pthread_mutex_unlock(&s->out_lock);
        if (empty)
                session_close(s);
        else
                update_poll(s);
}

int session_has_output(struct session *s)
{
        int has;

        pthread_mutex_lock(&s->out_lock);
        has = s->out_head != NULL;
        pthread_mutex_unlock(&s->out_lock);
        return has;
}

static void parse_rbuf(struct session *s);

/* Whether the client has left so many replies unread that its requests
 * wait: a small request can have a large answer, so this is checked
 * between frames, not only between reads. */
int session_output_full(struct session *s)
{
        /* Without the lock, which a thread answering completions may hold
         * through its write: a count a moment old does as well here. */
        return atomic_load_explicit(&s->out_bytes, memory_order_relaxed) >
               s->srv->cfg->lim.max_output_bytes;
}

/* Appends o to the output queue. Called with out_lock held. */
static void enqueue(struct session *s, struct outbuf *o)
{
        o->next = NULL;
        if (s->out_tail)
                s->out_tail->next = o;
        else
                s->out_head = o;
        s->out_tail = o;
        s->out_bytes += o->len;
}

/* Writes queued frames until the socket would block, many frames per
 * system call. Called with out_lock held, by any thread. Returns 0, or a
 * negative errno when the connection is broken. */
static int write_out(struct session *s)
{
        while (s->out_head) {
                struct iovec iov[64];
                struct msghdr mh = {.msg_iov = iov};
                struct outbuf *o = s->out_head;
                size_t skip = s->out_off;
                ssize_t n;

                for (; o && mh.msg_iovlen < 64; o = o->next, skip = 0) {
                        iov[mh.msg_iovlen].iov_base = o->data + skip;
                        iov[mh.msg_iovlen].iov_len = o->len - skip;
                        mh.msg_iovlen++;
                }
                n = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                break;
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                s->out_bytes -= (uint64_t)n;
                while (n > 0) {
                        o = s->out_head;
                        size_t left = o->len - s->out_off;

                        if ((size_t)n < left) {
                                s->out_off += (size_t)n;
                                break;
                        }
                        n -= (ssize_t)left;
                        s->out_head = o->next;
                        if (!s->out_head)
                                s->out_tail = NULL;
                        s->out_off = 0;
                        users_inline_give(s, o->held);
                        free(o);
                }
        }
        return 0;
}

/* Loop thread: writes what is queued, then lets requests that waited for
 * room go on. */
static void flush(struct session *s)
{
        int err, more;

        pthread_mutex_lock(&s->out_lock);
        err = write_out(s);
        more = s->out_head != NULL;
        pthread_mutex_unlock(&s->out_lock);
        if (err || (!more && s->state == SESSION_CLOSING)) {
                session_close(s);
                return;
        }
        /* Requests left waiting while the output was full go on now. */
        if (!s->parsing && s->rlen && !s->body && !session_output_full(s) &&
            (s->state == SESSION_HELLO || s->state == SESSION_READY))
                parse_rbuf(s);
        if (s->state == SESSION_CLOSED)
                return;
        update_poll(s);
        if (!session_has_output(s))
                s->ev->up->settled(s->ev);
}

void session_queue_frame(struct session *s, int rc, uint8_t *buf, size_t n, uint64_t held)
{
        struct outbuf *o;
        int first;

        if (rc) {
                log_err("session %llu: cannot pack a reply: %s", (unsigned long long)s->id,
                        gemmd_strerror(rc));
                session_close(s);
                return;
        }
        o = (struct outbuf *)buf;
        o->len = n;
        o->held = held;
        pthread_mutex_lock(&s->out_lock);
        enqueue(s, o);
        first = s->out_head == o;
        pthread_mutex_unlock(&s->out_lock);
        if (s->ev->defer_flush) {
                /* Inside a batch (a read, a round of completions): one write
                 * at its end carries every reply. */
                if (!s->dirty) {
                        s->dirty = 1;
                        s->refs++;
                        s->next_dirty = s->ev->dirty;
                        s->ev->dirty = s;
                }
        } else if (first) {
                flush(s);
        } else {
                update_poll(s);
        }
}

void session_send(struct session *s, const Gemmd__V1__Envelope *env)
{
        uint8_t *buf = NULL;
        size_t n = 0;
        int rc;

        if (s->state == SESSION_CLOSED)
                return;
        rc = frame_pack(env, offsetof(struct outbuf, data), UINT32_MAX, &buf, &n);
        session_queue_frame(s, rc, buf, n, 0);
}

int session_out_begin(struct session *s)
{
        pthread_mutex_lock(&s->out_lock);
        return s->out_open;
}

void session_out_put(struct session *s, struct outbuf *o)
{
        enqueue(s, o);
}

void session_out_end(struct session *s, int write)
{
        int rc = write ? write_out(s) : 0;

        if (rc) {
                s->out_err = rc;
                s->out_open = 0;
        }
        pthread_mutex_unlock(&s->out_lock);
}

void session_reply_taken(struct session *s)
{
        int err, more;

        /* Waits for the writer: it lets go of the session with the lock. */
        pthread_mutex_lock(&s->out_lock);
        err = s->out_err;
        more = s->out_head != NULL;
        pthread_mutex_unlock(&s->out_lock);
        if (s->state == SESSION_CLOSED)
                return;
        if (err)
                session_close(s);
        else if (more)
                update_poll(s); /* what the socket did not take, the loop writes */
}

void session_flush_dirty(struct evloop *ev)
{
        while (ev->dirty) {
                struct session *s = ev->dirty;

                ev->dirty = s->next_dirty;
                s->dirty = 0;
                if (s->state != SESSION_CLOSED)
                        flush(s);
                session_unref(s);
        }
}

void session_send_error(struct session *s, uint64_t request_id, int err, int op_index,
                        const char *fmt, ...)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Error e = GEMMD__V1__ERROR__INIT;
        char text[256];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        e.code = (Gemmd__V1__Code)frame_err_to_code(err);
        e.message = text;
        e.op_index = op_index;
        env.request_id = request_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_ERROR;
        env.error = &e;
        if ((unsigned)e.code < sizeof(s->srv->rejections) / sizeof(s->srv->rejections[0]))
                atomic_fetch_add(&s->srv->rejections[e.code], 1);
        s->rejected++;
        metrics_count_error(s->cred.uid, e.code);
        session_send(s, &env);
}

/* Whether this process has no descriptor left (EMFILE, ENFILE): a
 * descriptor a client sent is then dropped by the kernel (MSG_CTRUNC),
 * through no fault of the client. */
static int out_of_fds(int fd)
{
        int t = fcntl(fd, F_DUPFD_CLOEXEC, 0);

        if (t >= 0) {
                close(t);
                return 0;
        }
        return errno == EMFILE || errno == ENFILE;
}

/* Receives into buf, collecting passed descriptors. Returns bytes read,
 * 0 at end of stream, or a negative code. */
static ssize_t recv_some(struct session *s, void *buf, size_t len)
{
        union {
                struct cmsghdr h;
                char space[CMSG_SPACE(sizeof(int) * SESSION_MAX_FDS)];
        } ctl;
        struct iovec iov = {buf, len};
        struct msghdr mh = {0};
        struct cmsghdr *c;
        ssize_t n;
        int bad = 0, early = 0;

        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl.space;
        mh.msg_controllen = sizeof(ctl.space);
        do
                n = recvmsg(s->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                int nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                int *fds = (int *)CMSG_DATA(c);

                for (int i = 0; i < nfd; i++) {
                        /* Nothing before Hello takes a descriptor: one
                         * sent then is not kept, so that a session
                         * waiting for its Hello (or to be refused) holds
                         * only its socket. */
                        if (s->state == SESSION_HELLO) {
                                close(fds[i]);
                                early++;
                        } else if (s->nfds < SESSION_MAX_FDS) {
                                s->fds[s->nfds++] = fds[i];
                        } else {
                                close(fds[i]);
                                bad = 1;
                        }
                }
        }
        if (mh.msg_flags & MSG_CTRUNC) {
                if (out_of_fds(s->fd))
                        s->fds_dropped = 1; /* the frame that needs it says so */
                else
                        bad = 1;
        }
        if (early && !bad)
                session_send_error(s, 0, GEMMD_EPROTO, -1,
                                   "%d file descriptor(s) came before Hello: closed", early);
        if (bad) {
                session_send_error(s, 0, GEMMD_EPROTO, -1,
                                   "too many or truncated file descriptors (at most %d pending)",
                                   SESSION_MAX_FDS);
                session_close_after_flush(s);
                return -EPROTO;
        }
        return n;
}

/* Descriptors arrive with the first bytes of the frame they were sent with,
 * so once no partial frame is left, any descriptor that no registration
 * took came with something else: it is closed and the client told. */
static void check_stray_fds(struct session *s)
{
        int n = s->nfds;

        if (!n || s->rlen || s->body || (s->state != SESSION_HELLO && s->state != SESSION_READY))
                return;
        while (s->nfds)
                close(session_take_fd(s));
        session_send_error(s, 0, GEMMD_EPROTO, -1,
                           "%d file descriptor(s) came without a shared-memory registration: closed",
                           n);
}

/* After a read's frames: a large message's decoded form goes back at once
 * (frame_arena_reset keeps only a small chunk), so that an idle session
 * holds its read buffer and little else. */
static void frames_done(struct session *s)
{
        frame_arena_reset(&s->arena);
        check_stray_fds(s);
        if (!s->rlen && !s->body)
                s->fds_dropped = 0; /* its frame is done */
}

/* Handles every whole frame in the read buffer; keeps the partial rest,
 * then says the batch is done (frames_done: what they admitted goes on). */
static void parse_rbuf(struct session *s)
{
        uint32_t max = (uint32_t)s->srv->cfg->lim.max_frame_bytes;
        size_t off = 0;

        s->parsing = 1;
        while (s->state == SESSION_HELLO || s->state == SESSION_READY) {
                uint32_t len;
                size_t avail = s->rlen - off;

                if (avail < FRAME_HDR_BYTES || session_output_full(s))
                        break;
                if (frame_len_decode(s->rbuf + off, max, &len)) {
                        session_send_error(s, 0, GEMMD_ETOOBIG, -1,
                                           "frame of %u bytes exceeds the limit of %u bytes",
                                           (unsigned)(s->rbuf[off] | s->rbuf[off + 1] << 8 |
                                                      s->rbuf[off + 2] << 16 |
                                                      (uint32_t)s->rbuf[off + 3] << 24),
                                           max);
                        session_close_after_flush(s);
                        break;
                }
                if (avail - FRAME_HDR_BYTES >= len) {
                        s->up->frame(s, s->rbuf + off + FRAME_HDR_BYTES, len, 0);
                        off += FRAME_HDR_BYTES + len;
                        continue;
                }
                if (FRAME_HDR_BYTES + (size_t)len > SESSION_RBUF) {
                        /* Too big for the read buffer: read the body in place. */
                        s->body = malloc(len);
                        if (!s->body) {
                                s->parsing = 0;
                                session_close(s);
                                return;
                        }
                        s->body_len = len;
                        s->body_got = (uint32_t)(avail - FRAME_HDR_BYTES);
                        memcpy(s->body, s->rbuf + off + FRAME_HDR_BYTES, s->body_got);
                        off = s->rlen;
                }
                break;
        }
        s->parsing = 0;
        s->up->frames_done(s);
        if (s->state == SESSION_CLOSED)
                return;
        memmove(s->rbuf, s->rbuf + off, s->rlen - off);
        s->rlen -= off;
        /* What is left began with this read, unless nothing was taken. */
        if (!s->rlen && !s->body)
                s->t_frame_ns = 0;
        else if (off || !s->t_frame_ns)
                s->t_frame_ns = now_ns();
        frames_done(s);
}

static void on_readable(struct session *s)
{
        uint64_t t0 = now_ns(); /* each read's start, for the loop's account */

        /* A bounded number of reads per wakeup keeps the loop fair. */
        for (int i = 0; i < 16 && (s->state == SESSION_HELLO || s->state == SESSION_READY) &&
                        !session_output_full(s); i++) {
                ssize_t n;
                size_t want;

                if (s->body) {
                        want = s->body_len - s->body_got;
                        n = recv_some(s, s->body + s->body_got, want);
                } else {
                        want = SESSION_RBUF - s->rlen;
                        n = recv_some(s, s->rbuf + s->rlen, want);
                }
                uint64_t t1 = now_ns();

                s->ev->loop_part_ns[LOOP_RECV] += t1 - t0;
                if (n == -EAGAIN || n == -EWOULDBLOCK)
                        return;
                if (n <= 0) {
                        /* A client that dies with bytes unread resets. */
                        if (n < 0 && n != -EPROTO && n != -ECONNRESET)
                                log_warn("session %llu: read: %s", (unsigned long long)s->id,
                                         strerror((int)-n));
                        if (n == 0 || n != -EPROTO)
                                session_close(s);
                        return;
                }
                /* What was just read may answer a reply that another thread
                 * wrote (reply.c queued its request before writing it): the
                 * protocol layer takes such requests in before it acts
                 * on anything that depends on them. A read keeps the loop
                 * polling (server_run) as a reap does. */
                s->ev->active_ns = s->t_active_ns = t1;
                if (s->body) {
                        s->body_got += (uint32_t)n;
                        if (s->body_got == s->body_len) {
                                uint8_t *body = s->body;

                                s->body = NULL;
                                s->up->frame(s, body, s->body_len, 0);
                                s->up->frames_done(s);
                                free(body);
                                s->t_frame_ns = 0; /* the read buffer is empty */
                                if (s->state != SESSION_CLOSED)
                                        frames_done(s);
                        }
                } else {
                        s->rlen += (size_t)n;
                        parse_rbuf(s);
                }
                t0 = now_ns();
                s->ev->loop_part_ns[LOOP_FRAMES] += t0 - t1;
                /* A short read emptied the socket: another recvmsg would
                 * only say EAGAIN. The poll is level-triggered, so bytes
                 * that arrive meanwhile bring the loop back. */
                if ((size_t)n < want)
                        return;
        }
}

static void on_io(uv_poll_t *h, int status, int events)
{
        struct session *s = h->data;
        struct evloop *ev = s->ev;
        uint64_t t0 = now_ns();

        s->refs++;
        if (status < 0) {
                session_close(s);
        } else {
                if (events & UV_WRITABLE)
                        flush(s);
                if ((events & UV_READABLE) && s->state != SESSION_CLOSED) {
                        /* A read that starts after the drain refuses
                         * submits; one under way when it starts admits
                         * the rest of what it reads. */
                        if (atomic_load(&s->srv->draining))
                                ev->draining = 1;
                        ev->defer_flush++;
                        on_readable(s);
                        ev->defer_flush--;
                        session_flush_dirty(ev);
                }
                if (events & UV_DISCONNECT && s->state != SESSION_CLOSED &&
                    !session_has_output(s))
                        session_close(s);
        }
        session_unref(s);
        loop_account(ev, t0);
}

/*
 * devmem.c - device memory of sessions, opened or allocated on the device's
 * worker. Both kinds become a GBUF_CUDA buffer whose last reference sends
 * the release back to that worker.
 */
#include "daemon/devmem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/dispatch.h"
#include "daemon/log.h"
#include "daemon/users.h"
#include "gemmd.h"

/* Opens (owned == 0) or allocates (owned == 1) device memory, counted as
 * one of its user's mappings (users_map_take) from the start. */
struct dev_task {
        struct wctl c;
        struct session *s;
        uint64_t rid;
        struct worker *w;
        int owned;
        uint8_t handle[64]; /* the client's (opened) or the daemon's (allocated) */
        uint64_t offset;    /* of the registered range in the client's allocation */
        uint64_t bytes;
        int rc;
        uint64_t addr;
        void *token;
};

/* A reply the session is owed once a worker task is done: the session is
 * held, and the drain waits for it (pending_controls). Loop thread. */
static void pending_start(struct session *s)
{
        s->refs++;
        pthread_mutex_lock(&s->srv->lock);
        s->srv->pending_controls++;
        pthread_mutex_unlock(&s->srv->lock);
}

/* That task is done: a drain waiting for it is woken on every loop. The
 * caller still drops its reference to the session. Loop thread. */
static void pending_end(struct server *srv)
{
        int idle;

        pthread_mutex_lock(&srv->lock);
        idle = --srv->pending_controls == 0 && srv->queued_ops == 0;
        pthread_mutex_unlock(&srv->lock);
        if (idle && atomic_load(&srv->draining))
                loop_wake_all(srv);
}

struct release_task {
        struct wctl c;
        struct backend *be;
        void *token;
        int owned;
        struct session *ack; /* answered when done (devmem_release), or NULL */
        uint64_t ack_rid;
};

static void release_run(struct wctl *c, struct worker *w)
{
        struct release_task *t = (struct release_task *)c;

        if (t->owned)
                t->be->dev_free(t->be, t->token);
        else
                t->be->ipc_close(t->be, t->token);
        if (!t->ack)
                free(t);
}

/* Back on the session's loop thread, the memory closed: the release is
 * answered (if the session is still there). */
static void release_done(struct wctl *c)
{
        struct release_task *t = (struct release_task *)c;
        struct session *s = t->ack;
        struct evloop *ev = s->ev;

        if (s->state != SESSION_CLOSED)
                dispatch_ack(s, t->ack_rid);
        pending_end(s->srv);
        session_unref(s); /* may free s */
        free(t);
        ev->up->settled(ev);
}

/* The last reference to device memory: unmap or free it on its worker. */
static void release_device(struct gbuf *b)
{
        struct worker *w = b->owner;
        struct release_task *t = calloc(1, sizeof(*t));

        if (!t) {
                log_err("out of memory: leaking device memory of %llu bytes",
                        (unsigned long long)b->bytes);
                return;
        }
        t->c.run = release_run;
        t->c.what = b->dev_owned ? "freeing a client's device memory" : "closing a client's memory";
        /* Charged to its user, but never held: it gives back. */
        t->c.uid = b->uid;
        t->c.charged = 1;
        t->be = w->be;
        t->token = b->ipc_base;
        t->owned = b->dev_owned;
        if ((t->ack = b->ack_session)) {
                t->ack_rid = b->ack_rid;
                t->c.done = release_done;
                t->c.home = t->ack->ev;
        }
        worker_control(w, &t->c);
}

int devmem_release(struct session *s, struct gbuf *b, uint64_t rid)
{
        if (b->kind != GBUF_CUDA || b->dev_owned || b->ack_session)
                return 0;
        pending_start(s);
        b->ack_session = s;
        b->ack_rid = rid;
        return 1;
}

static void open_run(struct wctl *c, struct worker *w)
{
        struct dev_task *t = (struct dev_task *)c;

        if (t->owned)
                t->rc = w->be->dev_alloc(w->be, t->bytes, &t->addr, t->handle, &t->token);
        else
                t->rc = w->be->ipc_open(w->be, t->handle, t->offset, t->bytes, &t->addr, &t->token);
}

/* Back on the loop thread: the buffer joins the session (if it still fits
 * the limits and the session is still there) and the client is answered. */
static void open_done(struct wctl *c)
{
        struct dev_task *t = (struct dev_task *)c;
        struct session *s = t->s;
        struct server *srv = s->srv;
        const struct limits *lim = &srv->cfg->lim;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferReply r = GEMMD__V1__BUFFER_REPLY__INIT;
        struct gbuf *b = NULL;
        int rc = t->rc;

        struct evloop *ev = s->ev;
        pending_end(srv);
        if (!rc && !(b = calloc(1, sizeof(*b)))) {
                struct gbuf tmp = {.owner = t->w, .ipc_base = t->token, .dev_owned = t->owned,
                                   .uid = s->user->uid};

                release_device(&tmp);
                rc = GEMMD_ERESOURCE;
        }
        if (!b)
                users_map_give(s);
        if (b) {
                atomic_init(&b->refs, 1);
                b->kind = GBUF_CUDA;
                b->bytes = t->bytes;
                b->device = t->w->index;
                b->dev_addr = t->addr;
                b->ipc_base = t->token;
                b->alloc_off = t->owned ? 0 : t->offset;
                b->dev_owned = t->owned;
                b->uid = s->user->uid;
                b->owner = t->w;
                b->release = release_device;
                /* Its last reference gives back the mapping counted at start. */
                users_map_pass(s, b);
                /* The limits are checked again: other requests of the
                 * session may have used them up meanwhile. */
                int over;

                /* Under the lock that the user's sessions on other loops,
                 * and the metrics, take too. */
                pthread_mutex_lock(&srv->lock);
                over = s->state == SESSION_CLOSED || s->bufs.n >= lim->max_buffers ||
                       s->user->buffer_bytes + b->bytes > lim->max_user_buffer_bytes;
                if (!over && (rc = gbuf_table_add(&s->bufs, b)) == 0)
                        s->user->buffer_bytes += b->bytes;
                pthread_mutex_unlock(&srv->lock);
                if (over || rc) {
                        gbuf_unref(b);
                        b = NULL;
                        if (!rc)
                                rc = GEMMD_ELIMIT;
                }
        }
        if (rc) {
                session_send_error(s, t->rid, rc, -1, "cannot %s %llu bytes of device memory: %s",
                                   t->owned ? "allocate" : "open", (unsigned long long)t->bytes,
                                   gemmd_strerror(rc));
        } else {
                r.buffer_id = b->id;
                if (t->owned) {
                        r.ipc_handle.data = t->handle;
                        r.ipc_handle.len = 64;
                        r.device = (uint32_t)srv->backends[t->w->index]->index;
                }
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY;
                env.buffer_reply = &r;
                env.request_id = t->rid;
                session_send(s, &env);
        }
        session_unref(s); /* may free s */
        free(t);
        ev->up->settled(ev);
}

/* The worker of device ordinal `device` whose backend can do `owned`'s
 * kind of work, or NULL. */
static struct worker *device_worker(struct server *srv, uint32_t device, int owned)
{
        for (int i = 0; i < srv->nworkers; i++) {
                struct backend *be = srv->backends[i];

                if (be->index == (int)device && (owned ? be->dev_alloc != NULL : be->ipc_open != NULL))
                        return &srv->workers[i];
        }
        return NULL;
}

static void start(struct session *s, uint64_t rid, struct worker *w, struct dev_task *t)
{
        t->c.run = open_run;
        t->c.done = open_done;
        t->c.what = t->owned ? "allocating device memory for a client" : "opening a client's memory";
        /* The user asked for it: it waits while that user is over its
         * share of the worker (worker.h). */
        t->c.uid = s->user->uid;
        t->c.charged = 1;
        t->c.may_wait = 1;
        t->s = s;
        t->rid = rid;
        t->w = w;
        pending_start(s);
        t->c.home = s->ev;
        worker_control(w, &t->c);
}

void devmem_register(struct session *s, uint64_t rid, const Gemmd__V1__BufferRegister *m)
{
        struct worker *w = device_worker(s->srv, m->device, 0);
        struct dev_task *t;

        if (!w) {
                session_send_error(s, rid, GEMMD_EUNSUPPORTED, -1,
                                   "device memory on device %u is not served by this daemon",
                                   m->device);
                return;
        }
        if (m->ipc_handle.len != 64 || m->bytes == 0) {
                session_send_error(s, rid, GEMMD_EINVAL, -1,
                                   "a CUDA IPC registration needs a 64-byte handle and a size");
                return;
        }
        if (users_map_take(s, rid))
                return;
        t = calloc(1, sizeof(*t));
        if (!t) {
                users_map_give(s);
                session_send_error(s, rid, GEMMD_ERESOURCE, -1, "out of memory");
                return;
        }
        memcpy(t->handle, m->ipc_handle.data, 64);
        t->offset = m->offset;
        t->bytes = m->bytes;
        start(s, rid, w, t);
}

void devmem_alloc(struct session *s, uint64_t rid, const Gemmd__V1__DeviceAlloc *m)
{
        const struct limits *lim = &s->srv->cfg->lim;
        struct worker *w = device_worker(s->srv, m->device, 1);
        struct dev_task *t;

        if (!w) {
                session_send_error(s, rid, GEMMD_EUNSUPPORTED, -1,
                                   "no device %u with memory to allocate in this daemon", m->device);
                return;
        }
        if (m->bytes == 0 || m->bytes > lim->max_buffer_bytes) {
                session_send_error(s, rid, m->bytes ? GEMMD_ELIMIT : GEMMD_EINVAL, -1,
                                   "buffer size %llu is not in [1, %llu]",
                                   (unsigned long long)m->bytes,
                                   (unsigned long long)lim->max_buffer_bytes);
                return;
        }
        uint64_t held;

        pthread_mutex_lock(&s->srv->lock);
        held = s->user->buffer_bytes;
        pthread_mutex_unlock(&s->srv->lock);
        if (s->bufs.n >= lim->max_buffers || held + m->bytes > lim->max_user_buffer_bytes) {
                session_send_error(s, rid, GEMMD_ELIMIT, -1,
                                   "over the buffer limits (%u per session, %llu bytes per user)",
                                   lim->max_buffers,
                                   (unsigned long long)lim->max_user_buffer_bytes);
                return;
        }
        if (users_map_take(s, rid))
                return;
        t = calloc(1, sizeof(*t));
        if (!t) {
                users_map_give(s);
                session_send_error(s, rid, GEMMD_ERESOURCE, -1, "out of memory");
                return;
        }
        t->owned = 1;
        t->bytes = m->bytes;
        start(s, rid, w, t);
}

/*
 * dispatch.c - what the daemon does with each decoded message, and how a
 * finished request is answered.
 */
#include "daemon/dispatch.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/devmem.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/reply.h"
#include "daemon/ring.h"
#include "daemon/session.h"
#include "daemon/stats.h"
#include "daemon/users.h"
#include "daemon/validate.h"
#include "gemmd.h"

static void reply(struct session *s, uint64_t request_id, Gemmd__V1__Envelope *env)
{
        env->request_id = request_id;
        session_send(s, env);
}

static void on_hello(struct session *s, uint64_t rid, const Gemmd__V1__Hello *h)
{
        struct server *srv = s->srv;
        const struct limits *lim = &srv->cfg->lim;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__HelloReply r = GEMMD__V1__HELLO_REPLY__INIT;
        Gemmd__V1__Limits l = GEMMD__V1__LIMITS__INIT;
        Gemmd__V1__Device dev[16], *devp[16];
        int ndev = srv->nworkers < 16 ? srv->nworkers : 16;

        if (h->protocol_version != GEMMD_PROTOCOL_VERSION) {
                session_send_error(s, rid, GEMMD_EVERSION, -1,
                                   "protocol version %u is not supported (this daemon speaks %d)",
                                   h->protocol_version, GEMMD_PROTOCOL_VERSION);
                session_close_after_flush(s);
                return;
        }
        l.max_frame_bytes = lim->max_frame_bytes;
        l.max_ops_per_submit = lim->max_ops_per_submit;
        l.max_inline_bytes = lim->max_inline_bytes;
        l.max_inflight_ops = lim->max_inflight_ops;
        l.max_buffers = lim->max_buffers;
        l.max_buffer_bytes = lim->max_buffer_bytes;
        l.max_queue_ops = lim->max_queue_ops;
        l.max_sessions = lim->max_sessions;
        l.max_output_bytes = lim->max_output_bytes;
        l.max_user_inflight_ops = lim->max_user_inflight_ops;
        l.max_user_buffer_bytes = lim->max_user_buffer_bytes;
        l.max_user_share = lim->max_user_share;
        l.max_user_sessions = lim->max_user_sessions;
        for (int i = 0; i < ndev; i++) {
                struct backend *b = srv->backends[i];

                gemmd__v1__device__init(&dev[i]);
                dev[i].index = (uint32_t)b->index;
                dev[i].name = b->name;
                dev[i].backend = (char *)b->kind;
                dev[i].units = b->units;
                dev[i].memory_bytes = b->memory_bytes;
                dev[i].dtypes = b->dtypes;
                devp[i] = &dev[i];
        }
        r.protocol_version = GEMMD_PROTOCOL_VERSION;
        r.server_version = GEMMD_VERSION;
        r.limits = &l;
        r.n_devices = (size_t)ndev;
        r.devices = devp;
        r.session_id = s->id;
        r.ring_version = srv->cfg->rings ? GEMMD_RING_VERSION : 0;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY;
        env.hello_reply = &r;
        session_set_state(s, SESSION_READY);
        reply(s, rid, &env);
}

/* A registration of `bytes` more that the user's registered `held` leaves
 * no room for. */
static void refuse_user_bytes(struct session *s, uint64_t rid, uint64_t held, uint64_t bytes)
{
        session_send_error(s, rid, GEMMD_ELIMIT, -1, "uid %d has %llu bytes registered; %llu more exceed its %llu",
                           (int)s->cred.uid, (unsigned long long)held, (unsigned long long)bytes,
                           (unsigned long long)s->srv->cfg->lim.max_user_buffer_bytes);
}

static void on_register(struct session *s, uint64_t rid, const Gemmd__V1__BufferRegister *m)
{
        const struct limits *lim = &s->srv->cfg->lim;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferReply r = GEMMD__V1__BUFFER_REPLY__INIT;
        struct gbuf *b;
        uint64_t held;
        int fd, rc;

        pthread_mutex_lock(&s->srv->lock);
        held = s->user->buffer_bytes;
        pthread_mutex_unlock(&s->srv->lock);
        if (m->bytes <= lim->max_buffer_bytes && held + m->bytes > lim->max_user_buffer_bytes) {
                /* The descriptor that came with it, if any, is not kept. */
                if (m->kind == GEMMD__V1__BUFFER_REGISTER__KIND__SHM && (fd = session_take_fd(s)) >= 0)
                        close(fd);
                refuse_user_bytes(s, rid, held, m->bytes);
                return;
        }
        if (m->kind == GEMMD__V1__BUFFER_REGISTER__KIND__CUDA_IPC) {
                if (s->bufs.n >= lim->max_buffers)
                        session_send_error(s, rid, GEMMD_ELIMIT, -1, "at most %u buffers per session",
                                           lim->max_buffers);
                else if (m->bytes > lim->max_buffer_bytes)
                        session_send_error(s, rid, GEMMD_ELIMIT, -1, "buffer size %llu over %llu",
                                           (unsigned long long)m->bytes,
                                           (unsigned long long)lim->max_buffer_bytes);
                else
                        devmem_register(s, rid, m);
                return;
        }
        if (m->kind != GEMMD__V1__BUFFER_REGISTER__KIND__SHM) {
                session_send_error(s, rid, GEMMD_EINVAL, -1, "unknown buffer kind %d", (int)m->kind);
                return;
        }
        fd = session_take_fd(s);
        if (fd < 0) {
                session_no_fd(s, rid, "shared-memory registration");
                return;
        }
        if (s->bufs.n >= lim->max_buffers) {
                close(fd);
                session_send_error(s, rid, GEMMD_ELIMIT, -1, "at most %u buffers per session",
                                   lim->max_buffers);
                return;
        }
        if (m->bytes == 0 || m->bytes > lim->max_buffer_bytes) {
                close(fd);
                session_send_error(s, rid, m->bytes ? GEMMD_ELIMIT : GEMMD_EINVAL, -1,
                                   "buffer size %llu is not in [1, %llu]",
                                   (unsigned long long)m->bytes,
                                   (unsigned long long)lim->max_buffer_bytes);
                return;
        }
        if (users_map_take(s, rid)) {
                close(fd);
                return;
        }
        rc = gbuf_new_shm(fd, m->bytes, &b);
        close(fd);
        if (rc) {
                users_map_give(s);
                session_send_error(s, rid, rc, -1, "cannot map the buffer: %s",
                                   rc == GEMMD_EINVAL ? "shared memory must be a memfd on tmpfs (not "
                                                        "hugetlbfs), sealed against shrinking "
                                                        "(F_SEAL_SHRINK) and not against writes"
                                                      : gemmd_strerror(rc));
                return;
        }
        users_map_pass(s, b);
        /* Checked again with the add, under the lock that the user's
         * sessions on other loops, and the metrics, take too. */
        pthread_mutex_lock(&s->srv->lock);
        held = s->user->buffer_bytes;
        rc = held + b->bytes > lim->max_user_buffer_bytes ? GEMMD_ELIMIT : gbuf_table_add(&s->bufs, b);
        if (!rc)
                s->user->buffer_bytes += b->bytes;
        pthread_mutex_unlock(&s->srv->lock);
        if (rc == GEMMD_ELIMIT) {
                gbuf_unref(b);
                refuse_user_bytes(s, rid, held, m->bytes);
                return;
        }
        if (rc) {
                gbuf_unref(b);
                session_send_error(s, rid, rc, -1, "out of memory");
                return;
        }
        r.buffer_id = b->id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY;
        env.buffer_reply = &r;
        reply(s, rid, &env);
}

void dispatch_ack(struct session *s, uint64_t rid)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Ack ack = GEMMD__V1__ACK__INIT;

        env.body_case = GEMMD__V1__ENVELOPE__BODY_ACK;
        env.ack = &ack;
        reply(s, rid, &env);
}

static void on_release(struct session *s, uint64_t rid, const Gemmd__V1__BufferRelease *m)
{
        struct gbuf *b = gbuf_table_find(&s->bufs, m->buffer_id);
        int rc;

        int later = b && devmem_release(s, b, rid); /* a client's CUDA memory: answered once closed */

        /* The table changes under the lock that the metrics read it with. */
        pthread_mutex_lock(&s->srv->lock);
        if (b)
                s->user->buffer_bytes -= b->bytes;
        rc = gbuf_table_remove(&s->bufs, m->buffer_id);
        pthread_mutex_unlock(&s->srv->lock);
        if (rc) {
                session_send_error(s, rid, GEMMD_ENOBUF, -1, "no buffer %llu in this session",
                                   (unsigned long long)m->buffer_id);
                return;
        }
        if (!later)
                dispatch_ack(s, rid);
}

static void free_request(struct request *r, uint32_t nvalid)
{
        for (uint32_t i = 0; i < nvalid; i++)
                op_release(&r->ops[i]);
        free(r);
}

/* Adds n to *c unless that passes cap, without a lock: the count of ops
 * in flight of a user, or of the daemon, which every loop's submits and
 * completions move. Returns 0 when it added, else 1; *seen is the count
 * it found. */
static int reserve(atomic_uint *c, uint32_t n, uint32_t cap, uint32_t *seen)
{
        unsigned v = atomic_load_explicit(c, memory_order_relaxed);

        do {
                *seen = v;
                if (v + n > cap)
                        return 1;
        } while (!atomic_compare_exchange_weak_explicit(c, &v, v + n, memory_order_acq_rel,
                                                        memory_order_relaxed));
        return 0;
}

/*
 * Counts n more ops for the session, its user and the daemon, unless that
 * would pass one of their caps: then returns 1 and, with `refuse` set,
 * tells the client which. The user's other sessions, and the daemon's
 * queue, are also counted by other loops: each count is reserved with a
 * compare and swap, and the user's is given back when the daemon's is
 * full, so that no cap is ever passed.
 */
static int admit(struct session *s, uint64_t rid, uint32_t n, int refuse)
{
        struct server *srv = s->srv;
        const struct limits *lim = &srv->cfg->lim;
        uint32_t user_ops, queued = 0;
        int user_over, over;

        if (s->inflight_ops + n > lim->max_inflight_ops) {
                if (refuse)
                        session_send_error(s, rid, GEMMD_EBUSY, -1,
                                           "session has %u ops in flight (at most %u)", s->inflight_ops,
                                           lim->max_inflight_ops);
                return 1;
        }
        user_over = reserve(&s->user->inflight_ops, n, lim->max_user_inflight_ops, &user_ops);
        over = user_over || reserve(&srv->queued_ops, n, lim->max_queue_ops, &queued);
        if (!over) {
                if (!s->inflight_ops)
                        atomic_fetch_add_explicit(&srv->busy_sessions, 1, memory_order_relaxed);
                s->inflight_ops += n;
                return 0;
        }
        if (!user_over)
                atomic_fetch_sub_explicit(&s->user->inflight_ops, n, memory_order_acq_rel);
        if (!refuse)
                return 1;
        if (user_over)
                session_send_error(s, rid, GEMMD_EBUSY, -1, "uid %d has %u ops in flight (at most %u)",
                                   (int)s->cred.uid, user_ops, lim->max_user_inflight_ops);
        else
                session_send_error(s, rid, GEMMD_EBUSY, -1, "daemon queue full (%u ops)", queued);
        return 1;
}

/* Takes back what admit counted for n ops over the user and the daemon;
 * once the drain starts, wakes every loop when the daemon's queue empties
 * (they wait for it). */
void dispatch_uncount_shared(struct session *s, uint32_t n)
{
        struct server *srv = s->srv;
        int idle;

        atomic_fetch_sub_explicit(&s->user->inflight_ops, n, memory_order_acq_rel);
        idle = atomic_fetch_sub_explicit(&srv->queued_ops, n, memory_order_acq_rel) == n;
        if (idle && atomic_load(&srv->draining))
                loop_wake_all(srv);
}

/* The session's own count of ops in flight, less n; the daemon's count of
 * busy sessions follows (server.h, busy_sessions). */
static void uncount_session(struct session *s, uint32_t n)
{
        s->inflight_ops -= n;
        if (!s->inflight_ops)
                atomic_fetch_sub_explicit(&s->srv->busy_sessions, 1, memory_order_relaxed);
}

/* Takes back all that admit counted for n ops. */
static void uncount(struct session *s, uint32_t n)
{
        uncount_session(s, n);
        dispatch_uncount_shared(s, n);
}

/* A submit whose inline operands and results need `asked` bytes (or more:
 * validation stops at the first that does not fit) that the session's or
 * its user's byte budget has no room for. BUSY while the room may come
 * back: what is held goes as the client reads its replies. */
static void refuse_inline(struct session *s, uint64_t rid, uint64_t asked)
{
        const struct limits *lim = &s->srv->cfg->lim;
        unsigned long long mine = atomic_load(&s->inline_held);
        unsigned long long user = atomic_load(&s->user->inline_held);

        if (asked > lim->max_session_inline_bytes)
                session_send_error(s, rid, GEMMD_ELIMIT, -1,
                                   "inline operands and results of %llu bytes or more, over a "
                                   "session's budget of %llu (--max-session-inline-bytes)",
                                   (unsigned long long)asked,
                                   (unsigned long long)lim->max_session_inline_bytes);
        else if (mine + asked > lim->max_session_inline_bytes)
                session_send_error(s, rid, GEMMD_EBUSY, -1,
                                   "the session holds %llu bytes of inline operands and unread "
                                   "results; %llu more exceed its %llu (--max-session-inline-bytes)",
                                   mine, (unsigned long long)asked,
                                   (unsigned long long)lim->max_session_inline_bytes);
        else
                session_send_error(s, rid, GEMMD_EBUSY, -1,
                                   "uid %d holds %llu bytes of inline operands and unread results; "
                                   "%llu more exceed its %llu (--max-user-inline-bytes)",
                                   (int)s->cred.uid, user, (unsigned long long)asked,
                                   (unsigned long long)lim->max_user_inline_bytes);
}

/* The dtypes of a request's ops, as struct backend's dtypes bits. */
static uint32_t request_dtypes(const struct request *r)
{
        uint32_t need = 0;

        for (uint32_t i = 0; i < r->nops; i++)
                need |= BACKEND_DTYPE(r->ops[i].kp.dtype);
        return need;
}

/* The worker for a request's ops: where its device memory lives, else the
 * one with the least pending of those that run all its dtypes (what
 * admission hands ops to, so the protocol layer chooses); NULL when no
 * device runs them all. */
static struct worker *pick_worker(struct server *srv, const struct request *r)
{
        struct worker *best = NULL;
        uint32_t best_pending = UINT32_MAX, need = request_dtypes(r);

        /* Device memory must run where it lives. */
        for (uint32_t i = 0; i < r->nops; i++)
                for (int j = 0; j < 3; j++)
                        if (r->ops[i].buf[j] && r->ops[i].buf[j]->kind == GBUF_CUDA) {
                                int d = r->ops[i].buf[j]->device;

                                return (srv->backends[d]->dtypes & need) == need ? &srv->workers[d]
                                                                                 : NULL;
                        }
        for (int i = 0; i < srv->nworkers; i++) {
                struct worker *w = &srv->workers[i];
                uint32_t pending = w->pending_ops + w->inflight; /* a racy read is fine here */

                if ((srv->backends[i]->dtypes & need) != need)
                        continue;
                if (pending < best_pending) {
                        best = w;
                        best_pending = pending;
                }
        }
        return best;
}

/*
 * Whether r may be answered by its completion word (proto/ring.h): not
 * one that sends Launched messages (its Completion comes after them) or
 * brings back an inline C. And whether the GPU may store the word itself
 * (word_dev), as soon as r's only op is done: that answer reaches the
 * client before its counts are given back, so only while the session,
 * its user and the daemon are under half their caps, lest a client that
 * answers it at once with a new submit find one full.
 */
static void word_arm(struct session *s, struct request *r, uint32_t word)
{
        const struct limits *lim = &s->srv->cfg->lim;

        if (!word || r->notify_launch)
                return;
        for (uint32_t i = 0; i < r->nops; i++)
                if (r->ops[i].buf[2]->kind == GBUF_INLINE)
                        return;
        r->word = word;
        r->words = s->words;
        r->word_dev = r->nops == 1 && s->inflight_ops <= lim->max_inflight_ops / 2 &&
                      atomic_load_explicit(&s->user->inflight_ops, memory_order_relaxed) <=
                              lim->max_user_inflight_ops / 2 &&
                      atomic_load_explicit(&s->srv->queued_ops, memory_order_relaxed) <= lim->max_queue_ops / 2;
}

static void on_submit(struct session *s, uint64_t rid, const Gemmd__V1__Submit *m)
{
        struct server *srv = s->srv;
        const struct limits *lim = &srv->cfg->lim;
        uint32_t n = (uint32_t)m->n_ops;
        struct inline_tally tally = {0};
        struct request *r;
        struct worker *w;
        char msg[256];

        s->submits++;
        if (rid == 0) {
                session_send_error(s, rid, GEMMD_EINVAL, -1, "a submit needs a nonzero request_id");
                return;
        }
        if (s->ev->draining) {
                session_send_error(s, rid, GEMMD_ESHUTDOWN, -1, "the daemon is shutting down");
                return;
        }
        if (n == 0 || n > lim->max_ops_per_submit) {
                session_send_error(s, rid, n ? GEMMD_ELIMIT : GEMMD_EINVAL, -1,
                                   "a submit carries 1 to %u ops, not %u", lim->max_ops_per_submit, n);
                return;
        }
        if (m->priority > GEMMD_PRIO_HIGH) {
                session_send_error(s, rid, GEMMD_EINVAL, -1, "priority %u is not 0, 1 or 2",
                                   m->priority);
                return;
        }
        if (m->word && (!s->words || m->word > RING_WORDS)) {
                session_send_error(s, rid, GEMMD_EINVAL, -1,
                                   s->words ? "completion word %u: there are %u" :
                                              "completion word %u: the session has none (rings of version 2 bring them)",
                                   m->word - 1, RING_WORDS);
                return;
        }
        /* Admission: reject rather than queue without bound. The counts
         * may still hold requests that are done and answered but not yet
         * taken in by this thread (the completing thread answers them
         * itself): those are reaped before any verdict, so a client
         * is judged by counts that include every reply it has. */
        if (admit(s, rid, n, 0)) {
                s->ev->up->reap(s->ev);
                if (admit(s, rid, n, 1))
                        return;
        }
        r = calloc(1, sizeof(*r) + n * sizeof(struct op));
        if (!r) {
                uncount(s, n);
                session_send_error(s, rid, GEMMD_ERESOURCE, -1, "the daemon is out of memory");
                return;
        }
        /* The byte budgets are checked as inline operands are met, before
         * they are allocated, and counted once all are. */
        tally.room = users_inline_room(s);
        for (uint32_t i = 0; i < n; i++) {
                int rc = validate_op(m->ops[i], &s->bufs, lim, &srv->caps, &r->ops[i], &tally, msg,
                                     sizeof(msg));

                if (rc) {
                        free_request(r, i);
                        uncount(s, n);
                        if (rc == GEMMD_EBUSY)
                                refuse_inline(s, rid, tally.held);
                        else
                                session_send_error(s, rid, rc, (int)i, "op %u: %s", i, msg);
                        return;
                }
                r->ops[i].req = r;
        }
        r->nops = n;
        /* Each op runs on some device; together they must run on one. */
        w = pick_worker(srv, r);
        if (!w) {
                free_request(r, n);
                uncount(s, n);
                session_send_error(s, rid, GEMMD_EUNSUPPORTED, -1,
                                   "no device runs all the dtypes of this submit's ops where "
                                   "their operands are; submit them apart");
                return;
        }
        if (users_inline_take(s, tally.held)) {
                free_request(r, n);
                uncount(s, n);
                refuse_inline(s, rid, tally.held);
                return;
        }
        r->held = tally.held;
        r->s = s;
        r->home = s->ev;
        r->id = rid;
        r->priority = (int)m->priority;
        r->notify_launch = m->notify_launch;
        word_arm(s, r, m->word);
        r->t_admit_ns = now_ns();
        atomic_init(&r->remaining, n);
        s->refs++;
        pc_add(&srv->counts, PC_REQUESTS, 1);
        /* Handed to the worker with the rest of this read's requests
         * (dispatch_frames_done): one lock for all of them. */
        lane_stage(&s->lanes[w->index * NPRIO + r->priority], r->ops, n);
        s->staged = 1;
}

static void on_stats(struct session *s, uint64_t rid, const Gemmd__V1__StatsRequest *m)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsReply r = GEMMD__V1__STATS_REPLY__INIT;
        char *text = NULL;
        /* Other users' sessions (pids, holdings) are theirs to see. */
        int rc = stats_render(s->srv, m->json, s->admin ? -1 : (long long)s->cred.uid, &text);

        if (rc) {
                session_send_error(s, rid, rc, -1, "cannot render stats");
                return;
        }
        r.text = text;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REPLY;
        env.stats_reply = &r;
        reply(s, rid, &env);
        free(text);
}

void dispatch_frame(struct session *s, const uint8_t *buf, uint32_t len, int from_ring)
{
        Gemmd__V1__Envelope *env;
        uint64_t rid;

        /* The client's Submits in the ring came before this frame: a stats
         * round trip then covers them, and a buffer released after them is
         * not released under them. Taken before this frame is decoded:
         * they are decoded in the same arena. */
        if (!from_ring && s->ring) {
                ring_take(s);
                if (s->state != SESSION_READY)
                        return; /* it broke its ring: the session ends */
        }
        env = frame_unpack(&s->arena, buf, len);

        if (!env) {
                if (s->arena.exhausted)
                        session_send_error(s, 0, GEMMD_ELIMIT, -1,
                                           "message too large to decode (more than %u ops?)",
                                           s->srv->cfg->lim.max_ops_per_submit);
                else if (s->arena.wide_field)
                        session_send_error(s, 0, GEMMD_EPROTO, -1,
                                           "%s.%s is a 32-bit field and was sent a larger value",
                                           s->arena.wide_message, s->arena.wide_field);
                else
                        session_send_error(s, 0, GEMMD_EPROTO, -1, "malformed message (%u bytes)", len);
                if (s->state == SESSION_HELLO)
                        session_close_after_flush(s);
                return;
        }
        rid = env->request_id;
        if (s->state == SESSION_HELLO && s->denied) {
                if (s->denied == GEMMD_EPERM)
                        session_send_error(s, rid, GEMMD_EPERM, -1,
                                           "uid %d is not allowed to use this daemon",
                                           (int)s->cred.uid);
                else
                        session_send_error(s, rid, GEMMD_ELIMIT, -1, "%s", s->denied_why);
                session_close_after_flush(s);
                return;
        }
        if (s->state == SESSION_HELLO && env->body_case != GEMMD__V1__ENVELOPE__BODY_HELLO) {
                session_send_error(s, rid, GEMMD_EPROTO, -1, "the first message must be Hello");
                session_close_after_flush(s);
                return;
        }
        /* Anything but a submit (a buffer release, say) may answer a reply
         * that a completing thread wrote: its request is taken in first.
         * Submits do it only when a cap would refuse them (on_submit), so
         * that a busy read is not held up packing other sessions' replies. */
        if (from_ring && env->body_case != GEMMD__V1__ENVELOPE__BODY_SUBMIT) {
                session_send_error(s, rid, GEMMD_EPROTO, -1,
                                   "only Submit may come through the ring (body %d)",
                                   (int)env->body_case);
                return;
        }
        if (env->body_case != GEMMD__V1__ENVELOPE__BODY_SUBMIT)
                s->ev->up->reap(s->ev);
        switch (env->body_case) {
        case GEMMD__V1__ENVELOPE__BODY_HELLO:
                if (s->state != SESSION_HELLO) {
                        session_send_error(s, rid, GEMMD_EPROTO, -1, "Hello was already sent");
                        break;
                }
                on_hello(s, rid, env->hello);
                break;
        case GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER:
                on_register(s, rid, env->buffer_register);
                break;
        case GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE:
                on_release(s, rid, env->buffer_release);
                break;
        case GEMMD__V1__ENVELOPE__BODY_SUBMIT:
                on_submit(s, rid, env->submit);
                break;
        case GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST:
                on_stats(s, rid, env->stats_request);
                break;
        case GEMMD__V1__ENVELOPE__BODY_DEVICE_ALLOC:
                devmem_alloc(s, rid, env->device_alloc);
                break;
        case GEMMD__V1__ENVELOPE__BODY_RING_ATTACH:
                if (!ring_attach(s, rid, env->ring_attach))
                        dispatch_ack(s, rid);
                break;
        case GEMMD__V1__ENVELOPE__BODY_RING_KICK:
                break; /* the loop looks at its rings after every turn */
        default:
                session_send_error(s, rid, GEMMD_EPROTO, -1, "unexpected message (body %d)",
                                   (int)env->body_case);
                break;
        }
}

void dispatch_frames_done(struct session *s)
{
        struct server *srv = s->srv;
        uint64_t t0;

        if (!s->staged)
                return;
        t0 = now_ns();
        s->staged = 0;
        for (int i = 0; i < srv->nworkers; i++)
                for (int p = 0; p < NPRIO; p++)
                        worker_enqueue(&srv->workers[i], &s->lanes[i * NPRIO + p], p);
        s->ev->loop_part_ns[LOOP_ENQUEUE] += now_ns() - t0;
}

void dispatch_session_closing(struct session *s)
{
        struct server *srv = s->srv;

        /* Queued ops are dropped; running ones finish and are discarded by
         * dispatch_completion. */
        dispatch_frames_done(s);
        for (int i = 0; i < srv->nworkers; i++)
                worker_cancel(&srv->workers[i], &s->lanes[i * NPRIO]);
}

void launch_notice_send(struct wctl *c)
{
        struct launch_notice *n = (struct launch_notice *)c;
        struct session *s = n->r->s;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Launched l = GEMMD__V1__LAUNCHED__INIT;

        l.event_handle.data = n->handle;
        l.event_handle.len = 64;
        l.device = (uint32_t)n->device;
        l.nops = n->nops;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_LAUNCHED;
        env.launched = &l;
        reply(s, n->r->id, &env);
        free(n);
}

/* Counts a reply packed at t_reply: how long a finished request waits for
 * it is the part of a round trip between the device and the socket
 * (gemmctl stats). */
static void count_reply(const struct request *r, uint64_t t_reply)
{
        uint64_t t_done = 0;

        for (uint32_t i = 0; i < r->nops; i++)
                if (r->ops[i].t_done_ns > t_done)
                        t_done = r->ops[i].t_done_ns;
        if (t_done) {
                pc_add(&r->s->srv->counts, PC_REPLIES, 1);
                pc_add(&r->s->srv->counts, PC_REPLY_WAIT_NS, t_reply > t_done ? t_reply - t_done : 0);
        }
}

/* Packs r's Completion at dst (cap bytes, no frame header) or, with dst
 * NULL, into a new allocation (dispatch_pack_completion's), and counts
 * the reply once it is packed. */
static int pack(const struct request *r, uint8_t *dst, size_t cap, uint8_t **buf, size_t *n)
{
        Gemmd__V1__OpResult small[64], *res = small;
        uint32_t nres = r->nops;
        uint64_t now = now_ns();
        int rc;

        if (nres == 0)
                return -EINVAL; /* every request has an op (on_submit) */
        if (nres > sizeof(small) / sizeof(small[0])) {
                res = malloc(nres * sizeof(*res));
                if (!res)
                        return -ENOMEM;
        }
        for (uint32_t i = 0; i < nres; i++) {
                const struct op *o = &r->ops[i];
                Gemmd__V1__OpResult *x = &res[i];

                gemmd__v1__op_result__init(x);
                x->status = (Gemmd__V1__Code)frame_err_to_code(o->status);
                if (o->status)
                        x->message = (char *)gemmd_strerror(o->status);
                /* An inline C goes back to the client. */
                if (!o->status && o->buf[2] && o->buf[2]->kind == GBUF_INLINE) {
                        x->c_data.data = o->buf[2]->host;
                        x->c_data.len = o->span[2];
                }
                x->queue_us = o->t_launch_ns > r->t_admit_ns
                                      ? (o->t_launch_ns - r->t_admit_ns) / 1000
                                      : 0;
                x->run_us = (o->t_done_ns - o->t_launch_ns) / 1000;
                x->group_id = o->group_id;
                x->group_size = o->group_size;
                x->kernel = (char *)(o->kernel ? o->kernel : "");
                x->admit_ns = r->t_admit_ns;
                x->reply_ns = now;
        }
        rc = dst ? frame_pack_completion_body(r->id, res, nres, dst, cap, n)
                 : frame_pack_completion(r->id, res, nres, offsetof(struct outbuf, data), UINT32_MAX,
                                         buf, n);
        if (res != small)
                free(res);
        if (!rc)
                count_reply(r, now);
        return rc;
}

void dispatch_count_reply(const struct request *r)
{
        count_reply(r, now_ns());
}

int dispatch_pack_completion(const struct request *r, uint8_t **buf, size_t *n)
{
        return pack(r, NULL, 0, buf, n);
}

int dispatch_pack_completion_body(const struct request *r, uint8_t *dst, size_t cap, size_t *n)
{
        return pack(r, dst, cap, NULL, n);
}

void dispatch_completion(struct request *r)
{
        struct session *s = r->s;
        struct evloop *ev = s->ev;
        uint32_t n = r->nops;
        int answered = reply_answered_now(r) || s->state != SESSION_CLOSED;

        /* A request answered through the ring had the user's and the
         * daemon's counts given back by the thread that answered it. The
         * session's own count goes after the reply: until then it is busy,
         * as its client's polling hint says (ring_hint). */
        if (!reply_counts_returned(r))
                dispatch_uncount_shared(s, n);
        metrics_count_request(r);
        /* A request dropped with its session counts only its failures. */
        for (uint32_t i = 0; i < n; i++) {
                if (r->ops[i].status)
                        s->ops_failed++;
                else if (answered)
                        s->ops_ok++;
        }
        reply_take(r);
        /* Unless its reply took them (a socket reply, reply.c), the bytes
         * it held are free now: the reply is written or in the ring, or
         * there is none. */
        users_inline_give(s, r->held);
        uncount_session(s, n);
        free_request(r, n);
        session_unref(s); /* may free s */
        ev->up->settled(ev);
}

/*
 * client.c - libgemmd: the connection to gemmd, buffers, submits, tickets.
 *
 * A handle owns one non-blocking Unix stream socket. Everything the daemon
 * sends is read by read_some(), cut into frames and dispatched by
 * handle_frame():
 *
 *   - a Completion or an Error whose request_id is a pending ticket
 *     completes that ticket; its results stay in the ticket table until
 *     gemmd_wait() collects them, and an inline C is copied to its `out`
 *     at once (the caller keeps `out` valid until the wait);
 *   - any other reply answers the one synchronous call in progress
 *     (handshake, buffer register or release, stats), recorded in
 *     struct sync_call.
 *
 * So a synchronous call never loses a completion that overtakes its own
 * reply, and gemmd_wait() for one ticket stashes the others it reads.
 * Writes that find the socket full keep reading while they wait, so neither
 * side can block the other for good.
 *
 * A daemon that takes rings (HelloReply.ring_version) gets a pair of them
 * in shared memory at connect (proto/ring.h; GEMMD_RING=0 keeps to the
 * socket): a Submit that fits a slot goes into the submission ring, and
 * Completions come back through the completion ring as well as the
 * socket. take_ring() reads that ring whenever read_some() reads the
 * socket, so everything above sees one stream of frames. Before a wait
 * sleeps in poll(), or when gemmd_poll() finds nothing (its caller may
 * then sleep on gemmd_fd()), the handle says so in the ring: the daemon
 * then answers on the socket, which wakes it (and sends a RingKick after a
 * Completion it had just put in the ring). A daemon loop that sleeps says
 * so too: a Submit then takes the socket.
 *
 * Once the connection is lost (end of file, a socket error, or a frame the
 * library refuses) the handle is dead: pending tickets complete with
 * GEMMD_EDISCONNECT and every later call returns it. The socket stays open
 * until gemmd_disconnect(), so an event loop watching gemmd_fd() sees it
 * readable and learns of the loss through gemmd_poll().
 */
#include "gemmd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "proto/frame.h"
#include "proto/ring.h"

/* What we accept from the daemon before its handshake tells us its limit. */
#define PRE_HELLO_FRAME_BYTES (1u << 20)
/* A daemon started by socket activation may take a while to answer. */
#define HANDSHAKE_TIMEOUT_MS 30000
/* The receive buffer's usual size; a larger frame grows it for a while. */
#define RBUF_BYTES (64u << 10)
/* Unpacking a frame may take more memory than its wire size (an empty
 * submessage costs two bytes on the wire, ~128 in memory); bound it. */
#define ARENA_PER_WIRE_BYTE 128u
#define ARENA_SLACK (64u << 10)

/* Where an inline C's result goes when its completion arrives. */
struct inline_out {
        void *out;
        uint64_t bytes;
};

/* One submit, from gemmd_submit() until gemmd_wait() collects it. */
struct ticket {
        gemmd_ticket id;
        uint32_t nops;
        int done;
        int status;                   /* 0 or the first failing op's code */
        int listed;                   /* on the done list */
        struct ticket *prev, *next;   /* done list: completed, not yet polled */
        uint32_t launched;            /* ops the daemon said are on the device */
        int launched_all;             /* launched == nops, or done */
        int has_event;                /* event: the last Launched event */
        uint8_t event[GEMMD__IPC_HANDLE_BYTES];
        uint32_t word;                /* 1 + its completion word, or 0 */
        struct gemmd_result *results; /* nops of them, after the struct */
        struct inline_out *outs;      /* nops of them, after the results */
};

/* A buffer this handle registered: host shared memory (ptr != NULL) or a
 * range of device memory (ptr == NULL). */
struct buffer {
        struct buffer *next;
        gemmd_buffer id;
        void *ptr;
        uint64_t bytes;
        void *dev; /* device memory the daemon allocated, opened here */
        int ipc;   /* this process's device memory, opened by the daemon */
};

/* The synchronous request in flight; id 0 when there is none. */
struct sync_call {
        uint64_t id;
        int done;
        int err;
        uint64_t buffer_id; /* BufferReply */
        int has_handle;     /* BufferReply of a DeviceAlloc */
        uint8_t handle[GEMMD__IPC_HANDLE_BYTES];
        char *text;         /* StatsReply, malloc'd, handed to the caller */
};

struct gemmd_client {
        int fd;
        int dead;
        uint32_t max_rx; /* largest frame body we accept */
        uint32_t max_tx; /* largest frame body the daemon accepts */
        uint64_t next_id;

        uint8_t *rbuf;
        size_t rlen, rcap;
        size_t rwant; /* bytes the frame at the start of rbuf needs */
        struct frame_arena arena;

        struct sync_call sync;

        /* Pending and completed tickets: open addressing on the id, which
         * grows by one per request, so `id & mask` spreads them well. */
        struct ticket **tab;
        size_t tab_cap, tab_n;
        struct ticket *done_head, *done_tail;

        struct buffer *buffers;

        struct gemmd_info info;
        struct gemmd_device *devices;
        char last_error[256]; /* the daemon's text of its last Error reply */
        uint64_t spin_ns; /* how long a wait polls the socket before sleeping */

        /* The rings shared with the daemon, or NULL; our own indices. */
        uint32_t ring_version; /* the daemon's (HelloReply) */
        struct gemmd_ring *ring;
        uint64_t ring_bytes; /* of its mapping */
        uint32_t sq_head, cq_tail;

        /* Completion words (proto/ring.h), or NULL: word_id[k] is the
         * request that named word k (0: free); the free ones are stacked
         * in word_free, the named ones listed in word_busy (word_pos[k]:
         * where). */
        _Atomic uint64_t *words;
        uint64_t word_id[RING_WORDS];
        uint16_t word_free[RING_WORDS], word_busy[RING_WORDS], word_pos[RING_WORDS];
        uint32_t nfree, nbusy;
};

/* ---- tickets ---------------------------------------------------------- */

static struct ticket *ticket_new(uint32_t nops)
{
        struct ticket *t;
        size_t size = sizeof(*t) + (size_t)nops * (sizeof(struct gemmd_result) +
                                                   sizeof(struct inline_out));

        t = calloc(1, size);
        if (!t)
                return NULL;
        t->nops = nops;
        t->results = (struct gemmd_result *)(t + 1);
        t->outs = (struct inline_out *)(t->results + nops);
        return t;
}

static struct ticket *tab_find(const struct gemmd_client *c, uint64_t id)
{
        size_t mask = c->tab_cap - 1, i;

        if (!c->tab_cap)
                return NULL;
        for (i = id & mask; c->tab[i]; i = (i + 1) & mask)
                if (c->tab[i]->id == id)
                        return c->tab[i];
        return NULL;
}

static void tab_put(struct ticket **tab, size_t cap, struct ticket *t)
{
        size_t i;

        for (i = t->id & (cap - 1); tab[i]; i = (i + 1) & (cap - 1))
                ;
        tab[i] = t;
}

/* Adds t, keeping the table at most half full. Returns 0 or -ENOMEM. */
static int tab_insert(struct gemmd_client *c, struct ticket *t)
{
        if ((c->tab_n + 1) * 2 > c->tab_cap) {
                size_t cap = c->tab_cap ? c->tab_cap * 2 : 64, i;
                struct ticket **tab = calloc(cap, sizeof(*tab));

                if (!tab)
                        return -ENOMEM;
                for (i = 0; i < c->tab_cap; i++)
                        if (c->tab[i])
                                tab_put(tab, cap, c->tab[i]);
                free(c->tab);
                c->tab = tab;
                c->tab_cap = cap;
        }
        tab_put(c->tab, c->tab_cap, t);
        c->tab_n++;
        return 0;
}

/* Removes t from the table (backward-shift deletion, no tombstones). */
static void tab_remove(struct gemmd_client *c, struct ticket *t)
{
        size_t mask = c->tab_cap - 1, i, j, home;

        for (i = t->id & mask; c->tab[i] != t; i = (i + 1) & mask)
                ;
        c->tab[i] = NULL;
        c->tab_n--;
        for (j = (i + 1) & mask; c->tab[j]; j = (j + 1) & mask) {
                home = c->tab[j]->id & mask;
                /* Entry j may move to the hole at i unless its home slot
                 * lies cyclically in (i, j]. */
                if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                        continue;
                c->tab[i] = c->tab[j];
                c->tab[j] = NULL;
                i = j;
        }
}

static void done_unlink(struct gemmd_client *c, struct ticket *t)
{
        if (!t->listed)
                return;
        if (t->prev)
                t->prev->next = t->next;
        else
                c->done_head = t->next;
        if (t->next)
                t->next->prev = t->prev;
        else
                c->done_tail = t->prev;
        t->prev = t->next = NULL;
        t->listed = 0;
}

/* Marks t complete and queues it for gemmd_poll(). */
static void ticket_finish(struct gemmd_client *c, struct ticket *t)
{
        uint32_t i;

        t->status = 0;
        for (i = 0; i < t->nops && !t->status; i++)
                t->status = t->results[i].status;
        t->done = 1;
        t->launched_all = 1;
        t->listed = 1;
        t->prev = c->done_tail;
        t->next = NULL;
        if (c->done_tail)
                c->done_tail->next = t;
        else
                c->done_head = t;
        c->done_tail = t;
}

/* Completes t with `err` for every op. */
static void ticket_fail(struct gemmd_client *c, struct ticket *t, int err)
{
        uint32_t i;

        for (i = 0; i < t->nops; i++)
                t->results[i].status = err;
        ticket_finish(c, t);
}

/* ---- completion words (proto/ring.h) ---------------------------------- */

/* Names a free word for request id, or returns 0 when none is free. */
static uint32_t word_take(struct gemmd_client *c, uint64_t id)
{
        uint32_t k;

        if (!c->words || !c->nfree)
                return 0;
        k = c->word_free[--c->nfree];
        c->word_id[k] = id;
        c->word_pos[k] = (uint16_t)c->nbusy;
        c->word_busy[c->nbusy++] = (uint16_t)k;
        return k + 1;
}

/* Word k is free again: the daemon will store nothing more to it. */
static void word_give(struct gemmd_client *c, uint32_t k)
{
        uint32_t at = c->word_pos[k], last = c->word_busy[--c->nbusy];

        c->word_busy[at] = (uint16_t)last;
        c->word_pos[last] = (uint16_t)at;
        c->word_id[k] = 0;
        c->word_free[c->nfree++] = (uint16_t)k;
}

/* A Completion or Error came for request id (t, when it is still known):
 * the daemon answered it there, and stores nothing more to its word. */
static void word_answered(struct gemmd_client *c, uint64_t id, const struct ticket *t)
{
        if (!c->words || !id)
                return;
        if (t && t->word) {
                if (c->word_id[t->word - 1] == id)
                        word_give(c, t->word - 1);
                return;
        }
        for (uint32_t i = 0; i < c->nbusy; i++)
                if (c->word_id[c->word_busy[i]] == id) {
                        word_give(c, c->word_busy[i]);
                        return;
                }
}

/* Looks at every named word: a request whose word says WORD_OK is done,
 * every op a success; a word that says WORD_FINAL is free again. Returns
 * how many requests it completed. */
static int take_words(struct gemmd_client *c)
{
        int done = 0;

        for (uint32_t i = 0; i < c->nbusy;) {
                const uint32_t k = c->word_busy[i];
                const uint64_t v = atomic_load_explicit(&c->words[k], memory_order_acquire);
                const uint64_t id = c->word_id[k];
                struct ticket *t;

                if (!(v & (WORD_OK | WORD_FINAL)) || !WORD_ID_MATCH(v, id)) {
                        i++;
                        continue;
                }
                if ((v & WORD_OK) && (t = tab_find(c, id)) && !t->done) {
                        for (uint32_t j = 0; j < t->nops; j++)
                                t->results[j].status = 0;
                        ticket_finish(c, t);
                        done++;
                }
                if (v & WORD_FINAL)
                        word_give(c, k); /* moves the last named word to i */
                else
                        i++;
        }
        return done;
}

/* Copies a string the daemon sent into a fixed field, truncating. */
static void copy_str(char *dst, size_t cap, const char *src)
{
        size_t n = src ? strnlen(src, cap - 1) : 0;

        if (n)
                memcpy(dst, src, n);
        dst[n] = '\0';
}

static void ticket_complete(struct gemmd_client *c, struct ticket *t,
                            const Gemmd__V1__Completion *cp)
{
        uint32_t i;

        for (i = 0; i < t->nops; i++) {
                struct gemmd_result *r = &t->results[i];
                const Gemmd__V1__OpResult *o;

                if (i >= cp->n_results || !cp->results[i]) {
                        r->status = GEMMD_EPROTO; /* the daemon skipped an op */
                        continue;
                }
                o = cp->results[i];
                r->status = frame_code_to_err(o->status);
                r->queue_us = o->queue_us;
                r->run_us = o->run_us;
                r->group_id = o->group_id;
                r->group_size = o->group_size;
                copy_str(r->kernel, sizeof(r->kernel), o->kernel);
                r->admit_ns = o->admit_ns;
                r->reply_ns = o->reply_ns;
                if (r->status == 0 && t->outs[i].out && o->c_data.len) {
                        size_t n = o->c_data.len < t->outs[i].bytes ? o->c_data.len
                                                                     : t->outs[i].bytes;
                        memcpy(t->outs[i].out, o->c_data.data, n);
                }
        }
        ticket_finish(c, t);
}

/* ---- receiving -------------------------------------------------------- */

/* Marks the connection lost: pending tickets and the synchronous call in
 * flight fail with GEMMD_EDISCONNECT. Idempotent. */
static void lose(struct gemmd_client *c)
{
        size_t i;

        if (c->dead)
                return;
        c->dead = 1;
        /* Wake an event loop watching the fd, and tell the daemon. */
        shutdown(c->fd, SHUT_RDWR);
        for (i = 0; i < c->tab_cap; i++)
                if (c->tab[i] && !c->tab[i]->done)
                        ticket_fail(c, c->tab[i], GEMMD_EDISCONNECT);
        if (c->sync.id && !c->sync.done) {
                c->sync.done = 1;
                c->sync.err = GEMMD_EDISCONNECT;
        }
        free(c->rbuf);
        c->rbuf = NULL;
        c->rlen = c->rcap = 0;
}

/* Takes the daemon's handshake answer into c->info and c->devices.
 * Returns 0, GEMMD_EVERSION, GEMMD_EPROTO or -ENOMEM. */
static int take_hello(struct gemmd_client *c, const Gemmd__V1__HelloReply *h)
{
        const Gemmd__V1__Limits *l = h->limits;
        struct gemmd_info *in = &c->info;
        size_t i;

        if (h->protocol_version != GEMMD_PROTOCOL_VERSION)
                return GEMMD_EVERSION;
        if (!l || l->max_frame_bytes < FRAME_HDR_BYTES || !l->max_ops_per_submit)
                return GEMMD_EPROTO;
        free(c->devices);
        c->devices = calloc(h->n_devices ? h->n_devices : 1, sizeof(*c->devices));
        if (!c->devices)
                return -ENOMEM;
        in->protocol_version = h->protocol_version;
        copy_str(in->server_version, sizeof(in->server_version), h->server_version);
        in->ndevices = (uint32_t)h->n_devices;
        in->session_id = h->session_id;
        in->max_frame_bytes = l->max_frame_bytes;
        in->max_ops_per_submit = l->max_ops_per_submit;
        in->max_inline_bytes = l->max_inline_bytes;
        in->max_inflight_ops = l->max_inflight_ops;
        in->max_buffers = l->max_buffers;
        in->max_buffer_bytes = l->max_buffer_bytes;
        in->max_queue_ops = l->max_queue_ops;
        in->max_sessions = l->max_sessions;
        in->max_user_inflight_ops = l->max_user_inflight_ops;
        in->max_user_buffer_bytes = l->max_user_buffer_bytes;
        in->max_user_share = l->max_user_share;
        in->max_user_sessions = l->max_user_sessions;
        copy_str(in->backend, sizeof(in->backend), "none");
        for (i = 0; i < h->n_devices; i++) {
                const Gemmd__V1__Device *d = h->devices[i];
                struct gemmd_device *o = &c->devices[i];

                o->index = d->index;
                copy_str(o->name, sizeof(o->name), d->name);
                copy_str(o->backend, sizeof(o->backend), d->backend);
                o->units = d->units;
                o->memory_bytes = d->memory_bytes;
                /* A daemon from before the field ran these three. */
                o->dtypes = d->dtypes ? d->dtypes
                                      : 1u << GEMMD_F32 | 1u << GEMMD_F16 | 1u << GEMMD_BF16;
                /* One GPU makes it a CUDA daemon, whatever else it runs. */
                if (i == 0 || !strcmp(o->backend, "cuda"))
                        copy_str(in->backend, sizeof(in->backend), o->backend);
        }
        c->max_rx = c->max_tx =
                l->max_frame_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)l->max_frame_bytes;
        c->ring_version = h->ring_version;
        return 0;
}

/* Records the answer to the synchronous call in flight. */
static void take_sync(struct gemmd_client *c, const Gemmd__V1__Envelope *env)
{
        struct sync_call *s = &c->sync;

        s->done = 1;
        switch (env->body_case) {
        case GEMMD__V1__ENVELOPE__BODY_ERROR:
                copy_str(c->last_error, sizeof(c->last_error), env->error->message);
                s->err = frame_code_to_err(env->error->code);
                if (!s->err)
                        s->err = GEMMD_EPROTO; /* an error that says OK */
                break;
        case GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY:
                s->err = take_hello(c, env->hello_reply);
                break;
        case GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY:
                s->buffer_id = env->buffer_reply->buffer_id;
                s->err = s->buffer_id ? 0 : GEMMD_EPROTO;
                if (env->buffer_reply->ipc_handle.len == GEMMD__IPC_HANDLE_BYTES) {
                        memcpy(s->handle, env->buffer_reply->ipc_handle.data, GEMMD__IPC_HANDLE_BYTES);
                        s->has_handle = 1;
                }
                break;
        case GEMMD__V1__ENVELOPE__BODY_ACK:
                s->err = 0;
                break;
        case GEMMD__V1__ENVELOPE__BODY_STATS_REPLY:
                s->text = strdup(env->stats_reply->text ? env->stats_reply->text : "");
                s->err = s->text ? 0 : -ENOMEM;
                break;
        default:
                s->err = GEMMD_EPROTO;
                break;
        }
}

/* Dispatches one frame body. Returns 0, or GEMMD_EPROTO for a frame that
 * does not decode (the connection is then unusable). */
static int handle_frame(struct gemmd_client *c, const uint8_t *body, uint32_t len)
{
        Gemmd__V1__Envelope *env;
        struct ticket *t;

        c->arena.cap = (size_t)len * ARENA_PER_WIRE_BYTE + ARENA_SLACK;
        env = frame_unpack(&c->arena, body, len);
        if (!env)
                return GEMMD_EPROTO;
        if (env->request_id && env->request_id == c->sync.id && !c->sync.done) {
                take_sync(c, env);
                return 0;
        }
        /* An Error of no request while the Hello (the first call) waits:
         * the daemon refuses the connection itself, perhaps before it read
         * the Hello (out of descriptors, too many connections). */
        if (!env->request_id && env->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR &&
            c->sync.id == 1 && !c->sync.done) {
                take_sync(c, env);
                return 0;
        }
        t = env->request_id ? tab_find(c, env->request_id) : NULL;
        if (env->body_case == GEMMD__V1__ENVELOPE__BODY_COMPLETION ||
            env->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR)
                word_answered(c, env->request_id, t);
        if (!t || t->done)
                return 0; /* a late or unsolicited reply, or one its word answered first */
        if (env->body_case == GEMMD__V1__ENVELOPE__BODY_LAUNCHED) {
                const Gemmd__V1__Launched *l = env->launched;

                /* The stream is in order: the last event covers the earlier. */
                if (l->event_handle.len == GEMMD__IPC_HANDLE_BYTES) {
                        memcpy(t->event, l->event_handle.data, GEMMD__IPC_HANDLE_BYTES);
                        t->has_event = 1;
                }
                t->launched += l->nops;
                if (t->launched >= t->nops)
                        t->launched_all = 1;
        } else if (env->body_case == GEMMD__V1__ENVELOPE__BODY_COMPLETION) {
                ticket_complete(c, t, env->completion);
        } else if (env->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR) {
                int err = frame_code_to_err(env->error->code);

                copy_str(c->last_error, sizeof(c->last_error), env->error->message);
                ticket_fail(c, t, err ? err : GEMMD_EPROTO);
        } else {
                ticket_fail(c, t, GEMMD_EPROTO);
        }
        return 0;
}

/* Dispatches every complete frame in rbuf and keeps the partial rest.
 * Returns 0 or a negative code that makes the connection unusable. */
static int parse_frames(struct gemmd_client *c)
{
        size_t pos = 0;
        uint32_t len;
        int err = 0;

        c->rwant = FRAME_HDR_BYTES;
        while (c->rlen - pos >= FRAME_HDR_BYTES) {
                err = frame_len_decode(c->rbuf + pos, c->max_rx, &len);
                if (err)
                        break;
                if (c->rlen - pos - FRAME_HDR_BYTES < len) {
                        c->rwant = FRAME_HDR_BYTES + (size_t)len;
                        break;
                }
                err = handle_frame(c, c->rbuf + pos + FRAME_HDR_BYTES, len);
                if (err)
                        break;
                pos += FRAME_HDR_BYTES + (size_t)len;
        }
        if (pos) {
                memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
                c->rlen -= pos;
        }
        return err;
}

/* Makes room in rbuf for the frame being received. Returns 0 or -ENOMEM. */
static int rbuf_reserve(struct gemmd_client *c)
{
        size_t want = c->rwant > RBUF_BYTES ? c->rwant : RBUF_BYTES;
        uint8_t *p;

        /* Give back the room a large frame needed once it has gone. */
        if (c->rcap > RBUF_BYTES && want == RBUF_BYTES && c->rlen <= RBUF_BYTES / 2) {
                p = realloc(c->rbuf, RBUF_BYTES);
                if (p) {
                        c->rbuf = p;
                        c->rcap = RBUF_BYTES;
                }
        }
        if (c->rcap >= want)
                return 0;
        p = realloc(c->rbuf, want);
        if (!p)
                return -ENOMEM;
        c->rbuf = p;
        c->rcap = want;
        return 0;
}

/* Dispatches every Completion waiting in the completion ring. A ring the
 * daemon left in a state it cannot be in loses the connection. */
static void take_ring(struct gemmd_client *c)
{
        struct gemmd_ring *ring = c->ring;
        int n = ring ? ring_avail(&ring->cq, c->cq_tail, RING_CQ) : 0;

        if (n < 0) {
                lose(c);
                return;
        }
        while (n-- > 0 && !c->dead) {
                const struct ring_slot *sl = &ring->c[c->cq_tail % RING_CQ];

                if (sl->len == 0 || sl->len > RING_BODY || handle_frame(c, sl->body, sl->len)) {
                        lose(c);
                        return;
                }
                ring_release(&ring->cq, ++c->cq_tail);
        }
}

/* Reads whatever the rings and the socket hold, without blocking, and
 * dispatches every complete frame. Returns 0, or GEMMD_EDISCONNECT when
 * the connection is (or has just been found) lost. */
static int read_some(struct gemmd_client *c)
{
        ssize_t r;

        take_words(c);
        take_ring(c);
        while (!c->dead) {
                if (rbuf_reserve(c)) {
                        lose(c);
                        break;
                }
                r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
                if (r > 0) {
                        c->rlen += (size_t)r;
                        if (parse_frames(c))
                                lose(c);
                        continue;
                }
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return 0;
                lose(c); /* end of file or a socket error */
        }
        return GEMMD_EDISCONNECT;
}

static int64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads and dispatches replies until *flag is set (flag NULL: until some
 * ticket is done and not yet polled), for at most timeout_ms (-1: no
 * limit). Returns 0 once it is, -ETIMEDOUT, or a negative errno from
 * poll(). Connection loss sets every flag this waits on.
 *
 * It first polls the rings and the socket without sleeping for c->spin_ns:
 * a small request's reply usually comes within tens of microseconds, and
 * waking a thread that slept in poll() costs several of them (a CUDA
 * stream synchronize spins the same way). Then it tells the daemon it
 * sleeps (a Completion put in the ring then brings a RingKick) and sleeps
 * in poll(). */
static int wait_for(struct gemmd_client *c, const int *flag, int timeout_ms)
{
        int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
        struct pollfd p = { .fd = c->fd, .events = POLLIN };
        int left = -1, err = 0;
        /* A wait of 0 only looks. A daemon whose host has no CPU to spare
         * for polling clients asks them to sleep at once (cq.no_poll). */
        int poll_ok = !c->ring || !atomic_load_explicit(&c->ring->cq.no_poll, memory_order_relaxed);
        uint64_t spin_end = c->spin_ns && timeout_ms != 0 && poll_ok ? now_ns() + c->spin_ns : 0;

        for (;;) {
                read_some(c);
                if (flag ? *flag : c->done_head != NULL)
                        break;
                if (c->dead) {
                        err = GEMMD_EDISCONNECT; /* lose() sets every flag; be safe */
                        break;
                }
                if (spin_end && now_ns() < spin_end) {
                        /* On a host with more runnable threads than CPUs
                         * (many clients, the daemon's polling threads),
                         * a poll that does not yield holds a CPU they need. */
                        sched_yield();
                        continue;
                }
                if (timeout_ms >= 0) {
                        int64_t d = deadline - now_ms();

                        if (d <= 0) {
                                err = -ETIMEDOUT;
                                break;
                        }
                        left = d > INT32_MAX ? INT32_MAX : (int)d;
                }
                if (c->ring && !ring_arm(&c->ring->cq, c->cq_tail))
                        continue; /* a Completion came meanwhile */
                if (take_words(c)) {
                        ring_disarm(&c->ring->cq); /* a word answered meanwhile */
                        continue;
                }
                if (poll(&p, 1, left) < 0 && errno != EINTR) {
                        err = -errno;
                        break;
                }
        }
        if (c->ring)
                ring_disarm(&c->ring->cq);
        return err;
}

/* ---- sending ---------------------------------------------------------- */

/* Sends n bytes whole; the first sendmsg that moves any byte carries
 * pass_fd (when >= 0) as SCM_RIGHTS. While the socket is full it keeps
 * reading replies. Returns 0 or GEMMD_EDISCONNECT. */
static int send_all(struct gemmd_client *c, const uint8_t *buf, size_t n, int pass_fd)
{
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } ctl;
        struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLOUT };
        size_t off = 0;

        while (off < n) {
                struct iovec iov = { .iov_base = (void *)(buf + off), .iov_len = n - off };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                ssize_t r;

                if (c->dead)
                        return GEMMD_EDISCONNECT;
                if (pass_fd >= 0 && off == 0) {
                        struct cmsghdr *cm;

                        memset(&ctl, 0, sizeof(ctl));
                        mh.msg_control = ctl.buf;
                        mh.msg_controllen = sizeof(ctl.buf);
                        cm = CMSG_FIRSTHDR(&mh);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
                }
                r = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (r >= 0) {
                        off += (size_t)r;
                        continue;
                }
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK) {
                        /* The daemon may have said why before it closed
                         * (an Error refusing the connection): read it. */
                        read_some(c);
                        lose(c);
                        return GEMMD_EDISCONNECT;
                }
                if (poll(&p, 1, -1) < 0 && errno != EINTR) {
                        lose(c);
                        return GEMMD_EDISCONNECT;
                }
                read_some(c);
        }
        return 0;
}

/* Sends env as a synchronous request (filling in its request_id) and waits
 * for the answer, at most timeout_ms (-1: no limit). Replies to other
 * requests are dispatched meanwhile. Returns 0 with the answer in c->sync,
 * or a negative code. */
static int call(struct gemmd_client *c, Gemmd__V1__Envelope *env, int pass_fd, int timeout_ms)
{
        uint8_t *buf;
        size_t n;
        int err;

        if (c->dead)
                return GEMMD_EDISCONNECT;
        env->request_id = c->next_id++;
        err = frame_pack(env, 0, c->max_tx, &buf, &n);
        if (err)
                return err;
        free(c->sync.text);
        memset(&c->sync, 0, sizeof(c->sync));
        c->sync.id = env->request_id;
        c->last_error[0] = '\0'; /* an error now is this call's, not an older one's */
        err = send_all(c, buf, n, pass_fd);
        free(buf);
        if (err && c->sync.done)
                err = c->sync.err; /* answered before the send failed */
        if (!err)
                err = wait_for(c, &c->sync.done, timeout_ms);
        if (!err)
                err = c->sync.err;
        c->sync.id = 0;
        return err;
}

/* ---- connection ------------------------------------------------------- */

static int handshake(struct gemmd_client *c)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Hello hello = GEMMD__V1__HELLO__INIT;

        hello.protocol_version = GEMMD_PROTOCOL_VERSION;
        hello.client_name = program_invocation_short_name;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &hello;
        return call(c, &env, -1, HANDSHAKE_TIMEOUT_MS);
}

/* $GEMMD_SPIN_US: microseconds a wait polls before it sleeps (0 never
 * polls); without it, or with a malformed or out-of-range value, the
 * default (include/gemmd.h). */
static uint64_t spin_from_env(void)
{
        const char *v = getenv("GEMMD_SPIN_US");
        char *end;
        unsigned long us;

        if (v && *v) {
                errno = 0;
                us = strtoul(v, &end, 10);
                if (!errno && !*end && us <= 1000000ul)
                        return (uint64_t)us * 1000ull;
        }
        /* With few cores a polling client takes the one the daemon needs. */
        return sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? GEMMD_DEFAULT_SPIN_US * 1000ull : 0;
}

/* A memfd of `bytes` for the daemon to map, sealed, and mapped here at
 * *p. Returns its descriptor, or a negative errno. The seals let the
 * daemon trust the size: we can no longer shrink the file under its
 * mapping (which would SIGBUS it). */
static int shared_memfd(const char *name, uint64_t bytes, void **p)
{
        int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), err;

        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t)bytes) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0 ||
            (*p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
                err = -errno;
                close(fd);
                return err;
        }
        return fd;
}

/* $GEMMD_RING: 0 keeps the handle to the socket alone. */
static int ring_wanted(void)
{
        const char *v = getenv("GEMMD_RING");

        return !v || strcmp(v, "0");
}

/* Whether requests may be answered by completion words ($GEMMD_WORDS=0
 * asks for Completions only, with their timings). */
static int words_wanted(void)
{
        const char *v = getenv("GEMMD_WORDS");

        return !v || strcmp(v, "0");
}

/* Offers the daemon a pair of rings in a sealed memfd (proto/ring.h).
 * Returns 0 with c->ring set, or a negative code (the handle then keeps
 * to the socket; GEMMD_EDISCONNECT: it has no connection left). */
static int attach_ring(struct gemmd_client *c)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__RingAttach m = GEMMD__V1__RING_ATTACH__INIT;
        void *p;
        int fd, err;

        /* Version 2 brings the completion words, after the rings. */
        const uint32_t version = c->ring_version < GEMMD_RING_VERSION ? c->ring_version : GEMMD_RING_VERSION;
        const uint64_t bytes = RING_FILE_BYTES(version);

        fd = shared_memfd("gemmd-ring", bytes, &p);
        if (fd < 0)
                return fd;
        m.version = version;
        m.bytes = bytes;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_RING_ATTACH;
        env.ring_attach = &m;
        err = call(c, &env, fd, HANDSHAKE_TIMEOUT_MS);
        close(fd);
        if (err) {
                munmap(p, bytes);
                return err;
        }
        c->ring = p;
        c->ring_bytes = bytes;
        if (version >= 2 && words_wanted()) {
                c->words = (_Atomic uint64_t *)((char *)p + RING_WORDS_OFF);
                for (uint32_t k = 0; k < RING_WORDS; k++)
                        c->word_free[c->nfree++] = (uint16_t)(RING_WORDS - 1 - k);
        }
        return 0;
}

int gemmd_connect(const char *socket_path, gemmd_client **out)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct gemmd_client *c;
        int err;

        if (!out)
                return -EINVAL;
        *out = NULL;
        if (!socket_path || !*socket_path)
                socket_path = getenv("GEMMD_SOCKET");
        if (!socket_path || !*socket_path)
                socket_path = GEMMD_DEFAULT_SOCKET;
        if (strlen(socket_path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, socket_path);

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        frame_arena_init(&c->arena, ARENA_SLACK);
        c->next_id = 1;
        c->spin_ns = spin_from_env();
        c->max_rx = c->max_tx = PRE_HELLO_FRAME_BYTES;
        c->rwant = FRAME_HDR_BYTES;
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
                err = -errno;
                goto free_client;
        }
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0) {
                err = -errno;
                goto free_client;
        }
        err = handshake(c);
        if (err)
                goto free_client;
        /* A daemon of version 1's rings takes them without words. */
        if (c->ring_version >= 1 && ring_wanted()) {
                err = attach_ring(c);
                if (err == GEMMD_EDISCONNECT)
                        goto free_client;
                /* Otherwise the socket alone serves. */
                err = 0;
        }
        *out = c;
        return 0;

free_client:
        gemmd_disconnect(c);
        return err;
}

/* Releases this process's device memory registered with the daemon and
 * waits (up to DISCONNECT_WAIT_MS for all) until the daemon has closed it,
 * unless requests are still in flight: the process may then free it (CUDA
 * leaves freeing memory another process still maps undefined), or exit. */
#define DISCONNECT_WAIT_MS 10000

static int release_buffer(struct gemmd_client *c, gemmd_buffer id, int timeout_ms);

static void release_device_memory(struct gemmd_client *c)
{
        const uint64_t end = now_ns() + DISCONNECT_WAIT_MS * 1000000ull;
        struct buffer **pp = &c->buffers, *b;

        /* With requests still in flight the daemon is to drop what it has
         * queued, not run it first: the connection just closes. */
        for (size_t i = 0; i < c->tab_cap; i++)
                if (c->tab[i] && !c->tab[i]->done)
                        return;
        for (;;) {
                uint64_t now = now_ns();

                while ((b = *pp) && !b->ipc)
                        pp = &b->next;
                if (!b || now >= end || release_buffer(c, b->id, (int)((end - now) / 1000000u) + 1))
                        break;
        }
}

void gemmd_disconnect(gemmd_client *c)
{
        struct buffer *b, *next;
        size_t i;

        if (!c)
                return;
        if (c->fd >= 0) {
                release_device_memory(c);
                close(c->fd);
        }
        for (i = 0; i < c->tab_cap; i++)
                free(c->tab[i]);
        free(c->tab);
        for (b = c->buffers; b; b = next) {
                next = b->next;
                if (b->ptr)
                        munmap(b->ptr, b->bytes);
                free(b);
        }
        if (c->ring)
                munmap(c->ring, c->ring_bytes);
        free(c->rbuf);
        free(c->sync.text);
        free(c->devices);
        frame_arena_deinit(&c->arena);
        free(c);
}

int gemmd_get_info(const gemmd_client *c, struct gemmd_info *info)
{
        if (!c || !info)
                return -EINVAL;
        *info = c->info;
        return 0;
}

uint32_t gemmd_spin_us(const gemmd_client *c)
{
        return c ? (uint32_t)(c->spin_ns / 1000u) : 0;
}

int gemmd_get_device(const gemmd_client *c, uint32_t i, struct gemmd_device *dev)
{
        if (!c || !dev || i >= c->info.ndevices)
                return -EINVAL;
        *dev = c->devices[i];
        return 0;
}

int gemmd_fd(const gemmd_client *c)
{
        return c ? c->fd : -EINVAL;
}

/* ---- buffers ---------------------------------------------------------- */

/* Registers a buffer described by `reg` (with `pass_fd` for SHM) and
 * remembers it. Returns 0 and the daemon's id in *id, or a negative code. */
static int register_buffer(struct gemmd_client *c, Gemmd__V1__BufferRegister *reg, int pass_fd,
                           void *ptr, gemmd_buffer *id)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        struct buffer *b;
        int err;

        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = reg;
        err = call(c, &env, pass_fd, -1);
        if (err) {
                free(b);
                return err;
        }
        b->id = c->sync.buffer_id;
        b->ptr = ptr;
        b->bytes = reg->bytes;
        b->next = c->buffers;
        c->buffers = b;
        *id = b->id;
        return 0;
}

/* Forgets buffer `id` here and releases it in the daemon, waiting up to
 * timeout_ms (-1: no limit). The local side (the mapping) goes even when
 * the daemon cannot be told. */
static int release_buffer(struct gemmd_client *c, gemmd_buffer id, int timeout_ms)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferRelease rel = GEMMD__V1__BUFFER_RELEASE__INIT;
        struct buffer **pp, *b;

        for (pp = &c->buffers; *pp && (*pp)->id != id; pp = &(*pp)->next)
                ;
        b = *pp;
        if (!b)
                return GEMMD_ENOBUF;
        *pp = b->next;
        if (b->ptr)
                munmap(b->ptr, b->bytes);
        if (b->dev)
                gemmd__cuda_ipc_close(b->dev);
        free(b);
        rel.buffer_id = id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE;
        env.buffer_release = &rel;
        return call(c, &env, -1, timeout_ms);
}

int gemmd_buffer_alloc(gemmd_client *c, uint64_t bytes, gemmd_buffer *id, void **ptr)
{
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        void *p;
        int fd, err;

        if (!c || !id || !ptr || !bytes)
                return -EINVAL;
        if (c->dead)
                return GEMMD_EDISCONNECT;
        if (c->info.max_buffer_bytes && bytes > c->info.max_buffer_bytes)
                return GEMMD_ELIMIT;
        if (bytes > (uint64_t)INT64_MAX || bytes > SIZE_MAX)
                return -EFBIG;
        fd = shared_memfd("gemmd", bytes, &p);
        if (fd < 0)
                return fd;
        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = bytes;
        err = register_buffer(c, &reg, fd, p, id);
        close(fd);
        if (err)
                munmap(p, bytes);
        else
                *ptr = p;
        return err;
}

int gemmd_buffer_free(gemmd_client *c, gemmd_buffer id)
{
        if (!c)
                return -EINVAL;
        return release_buffer(c, id, -1);
}

int gemmd_register_device(gemmd_client *c, const void *dptr, uint64_t bytes, gemmd_buffer *id)
{
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        struct gemmd__ipc ipc;
        int err;

        if (!c || !dptr || !bytes || !id)
                return -EINVAL;
        if (c->dead)
                return GEMMD_EDISCONNECT;
        err = gemmd__cuda_ipc_get(dptr, bytes, &ipc);
        if (err)
                return err;
        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__CUDA_IPC;
        reg.bytes = bytes;
        reg.ipc_handle.data = ipc.handle;
        reg.ipc_handle.len = sizeof(ipc.handle);
        reg.device = ipc.device;
        reg.offset = ipc.offset;
        err = register_buffer(c, &reg, -1, NULL, id);
        if (!err)
                c->buffers->ipc = 1; /* register_buffer puts it first */
        return err;
}

int gemmd_device_alloc(gemmd_client *c, uint64_t bytes, uint32_t device, gemmd_buffer *id,
                       void **dptr)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__DeviceAlloc da = GEMMD__V1__DEVICE_ALLOC__INIT;
        struct buffer *b;
        void *p = NULL;
        int err;

        if (!c || !bytes || !id || !dptr)
                return -EINVAL;
        if (c->dead)
                return GEMMD_EDISCONNECT;
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        da.bytes = bytes;
        da.device = device;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_DEVICE_ALLOC;
        env.device_alloc = &da;
        err = call(c, &env, -1, -1);
        if (!err && !c->sync.has_handle)
                err = GEMMD_EPROTO;
        b->id = c->sync.buffer_id;
        if (!err)
                err = gemmd__cuda_ipc_open(c->sync.handle, &p);
        if (err) {
                free(b);
                if (c->sync.buffer_id) {
                        /* The daemon allocated it, but we cannot use it. */
                        Gemmd__V1__BufferRelease rel = GEMMD__V1__BUFFER_RELEASE__INIT;
                        Gemmd__V1__Envelope renv = GEMMD__V1__ENVELOPE__INIT;

                        rel.buffer_id = c->sync.buffer_id;
                        renv.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE;
                        renv.buffer_release = &rel;
                        call(c, &renv, -1, -1);
                }
                return err;
        }
        b->dev = p;
        b->bytes = bytes;
        b->next = c->buffers;
        c->buffers = b;
        *id = b->id;
        *dptr = p;
        return 0;
}

int gemmd_stream_wait(gemmd_client *c, gemmd_ticket ticket, void *stream, int timeout_ms)
{
        struct ticket *t;
        int err;

        if (!c)
                return -EINVAL;
        t = ticket ? tab_find(c, ticket) : NULL;
        if (!t)
                return GEMMD_ENOTICKET;
        if (!t->launched_all && !t->done) {
                err = wait_for(c, &t->launched_all, timeout_ms);
                if (err)
                        return err;
        }
        if (t->done && t->status)
                return t->status;
        if (t->done && !t->has_event)
                return 0; /* finished already: nothing to wait for */
        if (!t->has_event)
                return GEMMD_EUNSUPPORTED; /* submitted without GEMMD_SUBMIT_LAUNCH_EVENTS */
        return gemmd__cuda_stream_wait(t->event, stream);
}

int gemmd_unregister(gemmd_client *c, gemmd_buffer id)
{
        if (!c)
                return -EINVAL;
        return release_buffer(c, id, -1);
}

/* ---- submits ---------------------------------------------------------- */

/* Checks an op's enums and flags, the fields whose wire form could not
 * carry a bad value faithfully. The daemon checks everything else. */
static int check_op(const struct gemmd_op *op)
{
        if ((unsigned)op->kind > GEMMD_SYR2K || (unsigned)op->dtype > GEMMD_F64 ||
            (unsigned)op->trans_a > GEMMD_OP_T || (unsigned)op->trans_b > GEMMD_OP_T ||
            (unsigned)op->uplo > GEMMD_UPPER ||
            (op->flags & ~(GEMMD_OPF_ROW_MAJOR | GEMMD_OPF_ALLOW_TF32 | GEMMD_OPF_DEBUG_FAULT)))
                return GEMMD_EINVAL;
        return 0;
}

/* Fills the wire form of one operand. Inline bytes are referenced, not
 * copied: they are copied once, by frame_pack. Adds the inline bytes to
 * *inline_total. Returns 0, GEMMD_EINVAL or GEMMD_EOVERFLOW. */
static int put_operand(Gemmd__V1__Operand *w, const struct gemmd_operand *o, int is_c,
                       uint64_t *inline_total)
{
        gemmd__v1__operand__init(w);
        if (o->buffer) {
                w->buffer_id = o->buffer;
                w->offset = o->offset;
                return 0;
        }
        if (!o->data && o->bytes && !is_c)
                return GEMMD_EINVAL; /* only C may go without input bytes */
        if (o->bytes > SIZE_MAX || __builtin_add_overflow(*inline_total, o->bytes, inline_total))
                return GEMMD_EOVERFLOW;
        if (o->data) {
                w->data.data = (uint8_t *)o->data;
                w->data.len = (size_t)o->bytes;
        }
        return 0;
}

struct op_msg {
        Gemmd__V1__Op op;
        Gemmd__V1__Operand a, b, c;
};

/* Builds the Submit for ops[0 .. nops) into msgs/ptrs and records each
 * inline C's destination in t. Returns 0 or a negative code. */
static int build_submit(const struct gemmd_client *c, const struct gemmd_op *ops, size_t nops,
                        struct op_msg *msgs, Gemmd__V1__Op **ptrs, struct ticket *t)
{
        uint64_t inline_total = 0;
        size_t i;
        int err;

        for (i = 0; i < nops; i++) {
                const struct gemmd_op *o = &ops[i];
                Gemmd__V1__Op *w = &msgs[i].op;

                err = check_op(o);
                if (!err)
                        err = put_operand(&msgs[i].a, &o->a, 0, &inline_total);
                if (!err)
                        err = put_operand(&msgs[i].b, &o->b, 0, &inline_total);
                if (!err)
                        err = put_operand(&msgs[i].c, &o->c, 1, &inline_total);
                if (err)
                        return err;
                gemmd__v1__op__init(w);
                w->kind = (Gemmd__V1__OpKind)o->kind;
                w->dtype = (Gemmd__V1__DType)o->dtype;
                w->trans_a = (Gemmd__V1__Trans)o->trans_a;
                w->trans_b = (Gemmd__V1__Trans)o->trans_b;
                w->uplo = (Gemmd__V1__Uplo)o->uplo;
                w->row_major = !!(o->flags & GEMMD_OPF_ROW_MAJOR);
                w->allow_tf32 = !!(o->flags & GEMMD_OPF_ALLOW_TF32);
                w->debug_fault = !!(o->flags & GEMMD_OPF_DEBUG_FAULT);
                w->m = o->m;
                w->n = o->n;
                w->k = o->k;
                w->lda = o->lda;
                w->ldb = o->ldb;
                w->ldc = o->ldc;
                if (o->dtype == GEMMD_F64) {
                        w->alpha_f64 = o->alpha;
                        w->beta_f64 = o->beta;
                } else {
                        w->alpha = (float)o->alpha;
                        w->beta = (float)o->beta;
                }
                w->a = &msgs[i].a;
                w->b = &msgs[i].b;
                w->c = &msgs[i].c;
                ptrs[i] = w;
                if (!o->c.buffer) {
                        t->outs[i].out = o->c.out;
                        t->outs[i].bytes = o->c.bytes;
                }
        }
        if (inline_total > c->info.max_inline_bytes)
                return GEMMD_ELIMIT;
        return 0;
}

/* Puts a frame body in the submission ring, kicking a daemon that sleeps.
 * Returns 1, or 0 when there is no ring, the body does not fit a slot or
 * the ring is full (the socket takes it then). */
static int ring_put(struct gemmd_client *c, const uint8_t *body, size_t len)
{
        struct gemmd_ring *ring = c->ring;
        struct ring_slot *sl;

        /* A daemon loop that sleeps is woken by the socket: the Submit
         * itself goes there then, not in the ring with a RingKick after it. */
        if (!ring || len == 0 || len > RING_BODY || ring_room(&ring->sq, c->sq_head, RING_SQ) <= 0 ||
            atomic_load_explicit(&ring->sq.flag, memory_order_relaxed))
                return 0;
        sl = &ring->s[c->sq_head % RING_SQ];
        sl->len = (uint32_t)len;
        memcpy(sl->body, body, len);
        if (ring_publish(&ring->sq, ++c->sq_head)) {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
                Gemmd__V1__RingKick kick = GEMMD__V1__RING_KICK__INIT;
                uint8_t *buf;
                size_t n;

                env.body_case = GEMMD__V1__ENVELOPE__BODY_RING_KICK;
                env.ring_kick = &kick;
                /* Sent with the Submit already in the ring: a failure to
                 * send shows as the lost connection at the next read. */
                if (!frame_pack(&env, 0, c->max_tx, &buf, &n)) {
                        (void)send_all(c, buf, n, -1);
                        free(buf);
                }
        }
        return 1;
}

/* Whether t brings back an inline C (its Completion carries it): such a
 * request cannot be answered by a word. */
static int inline_results(const struct ticket *t)
{
        for (uint32_t i = 0; i < t->nops; i++)
                if (t->outs[i].out)
                        return 1;
        return 0;
}

int gemmd_submit(gemmd_client *c, const struct gemmd_op *ops, size_t nops, int priority,
                 gemmd_ticket *ticket)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Submit sub = GEMMD__V1__SUBMIT__INIT;
        Gemmd__V1__Op **ptrs = NULL;
        struct op_msg *msgs = NULL;
        struct ticket *t = NULL;
        uint8_t *buf = NULL;
        size_t n;
        int err;

        if (!c || !ops || !ticket)
                return -EINVAL;
        if (c->dead)
                return GEMMD_EDISCONNECT;
        int flags = priority & ~0xff;

        priority &= 0xff;
        if (!nops || priority < GEMMD_PRIO_LOW || priority > GEMMD_PRIO_HIGH ||
            (flags & ~GEMMD_SUBMIT_LAUNCH_EVENTS))
                return GEMMD_EINVAL;
        if (nops > c->info.max_ops_per_submit)
                return GEMMD_ELIMIT;
        msgs = calloc(nops, sizeof(*msgs));
        ptrs = calloc(nops, sizeof(*ptrs));
        t = ticket_new((uint32_t)nops);
        if (!msgs || !ptrs || !t) {
                err = -ENOMEM;
                goto out;
        }
        err = build_submit(c, ops, nops, msgs, ptrs, t);
        if (err)
                goto out;
        sub.n_ops = nops;
        sub.ops = ptrs;
        sub.priority = (uint32_t)priority;
        sub.notify_launch = (flags & GEMMD_SUBMIT_LAUNCH_EVENTS) != 0;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        env.submit = &sub;
        env.request_id = c->next_id++;
        t->id = env.request_id;
        if (!sub.notify_launch && !inline_results(t))
                sub.word = t->word = word_take(c, t->id);
        err = frame_pack(&env, 0, c->max_tx, &buf, &n);
        if (err)
                goto out;
        /* In the table before the first byte goes out: replies read while
         * the send waits for room must find it. */
        err = tab_insert(c, t);
        if (err)
                goto out;
        if (!sub.notify_launch && ring_put(c, buf + FRAME_HDR_BYTES, n - FRAME_HDR_BYTES))
                err = 0;
        else
                err = send_all(c, buf, n, -1);
        if (err) {
                done_unlink(c, t);
                tab_remove(c, t);
                goto out;
        }
        *ticket = t->id;
        t = NULL;
out:
        if (t && t->word)
                word_give(c, t->word - 1); /* never sent */
        free(buf);
        free(t);
        free(ptrs);
        free(msgs);
        return err;
}

int gemmd_wait(gemmd_client *c, gemmd_ticket ticket, int timeout_ms,
               struct gemmd_result *results, size_t nresults)
{
        struct ticket *t;
        int err;

        if (!c)
                return -EINVAL;
        t = ticket ? tab_find(c, ticket) : NULL;
        if (!t)
                return GEMMD_ENOTICKET;
        if (!t->done) {
                err = wait_for(c, &t->done, timeout_ms);
                if (err)
                        return err;
        }
        if (results && nresults)
                memcpy(results, t->results,
                       (nresults < t->nops ? nresults : t->nops) * sizeof(*results));
        err = t->status;
        done_unlink(c, t);
        tab_remove(c, t);
        free(t);
        return err;
}

int gemmd_poll(gemmd_client *c, gemmd_ticket *ticket)
{
        struct ticket *t;

        if (!c || !ticket)
                return -EINVAL;
        /* A caller polling is awake: Completions may take the ring. */
        if (c->ring)
                ring_disarm(&c->ring->cq);
        read_some(c);
        /* Nothing yet: the caller may sleep on gemmd_fd() now, so the
         * daemon is told to use the socket, which wakes it. */
        if (!c->done_head && c->ring && !c->dead) {
                if (!ring_arm(&c->ring->cq, c->cq_tail))
                        take_ring(c);
                take_words(c);
        }
        t = c->done_head;
        if (t) {
                done_unlink(c, t);
                *ticket = t->id;
                return 1;
        }
        return c->dead ? GEMMD_EDISCONNECT : 0;
}

int gemmd_wait_any(gemmd_client *c, int timeout_ms, gemmd_ticket *ticket)
{
        struct ticket *t;
        int err;

        if (!c || !ticket)
                return -EINVAL;
        if (!c->done_head) {
                err = wait_for(c, NULL, timeout_ms);
                if (err == -ETIMEDOUT)
                        return 0;
                if (err)
                        return err;
        }
        t = c->done_head;
        done_unlink(c, t);
        *ticket = t->id;
        return 1;
}

int gemmd_run(gemmd_client *c, const struct gemmd_op *ops, size_t nops,
              struct gemmd_result *results)
{
        gemmd_ticket t;
        int err = gemmd_submit(c, ops, nops, GEMMD_PRIO_NORMAL, &t);

        if (err)
                return err;
        return gemmd_wait(c, t, -1, results, results ? nops : 0);
}

int gemmd_stats(gemmd_client *c, int json, char **text)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsRequest req = GEMMD__V1__STATS_REQUEST__INIT;
        int err;

        if (!c || !text)
                return -EINVAL;
        req.json = !!json;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &req;
        err = call(c, &env, -1, -1);
        if (err)
                return err;
        *text = c->sync.text;
        c->sync.text = NULL;
        return 0;
}

/* ---- small things ----------------------------------------------------- */

static const char *const gemmd_errors[] = {
        [0] = "success",
        [1] = "malformed frame or message",
        [2] = "protocol version not supported",
        [3] = "frame larger than the daemon's limit",
        [4] = "invalid op field",
        [5] = "op reaches outside its buffer",
        [6] = "size arithmetic overflows",
        [7] = "unknown buffer id",
        [8] = "daemon busy: queue or in-flight cap full",
        [9] = "limit exceeded",
        [10] = "not supported by this daemon or backend",
        [11] = "device failure",
        [12] = "daemon shutting down",
        [13] = "operation canceled before it ran",
        [14] = "connection to the daemon lost",
        [15] = "permission denied by the daemon",
        [16] = "unknown ticket",
        [17] = "the daemon ran out of memory or another resource",
};

const char *gemmd_last_error(const gemmd_client *c)
{
        return c ? c->last_error : "";
}

const char *gemmd_strerror(int code)
{
        const char *s;

        if (code == 0)
                return gemmd_errors[0];
        if (code <= GEMMD_EBASE && code > GEMMD_EBASE - 1000) {
                int i = GEMMD_EBASE - code;

                if (i > 0 && i < (int)(sizeof(gemmd_errors) / sizeof(gemmd_errors[0])))
                        return gemmd_errors[i];
                return "unknown gemmd error";
        }
        if (code < 0 && code > -4096) { /* the errno range */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
                /* strerror() may write a shared buffer; this never does. */
                s = strerrordesc_np(-code);
#else
                s = strerror(-code);
#endif
                if (s)
                        return s;
        }
        return "unknown error";
}

size_t gemmd_dtype_size(enum gemmd_dtype dtype)
{
        switch (dtype) {
        case GEMMD_F32:
                return 4;
        case GEMMD_F16:
        case GEMMD_BF16:
                return 2;
        case GEMMD_F64:
                return 8;
        }
        return 0;
}

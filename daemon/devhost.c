/*
 * devhost.c - the device process: one backend (CPU or CUDA) serving the
 * daemon's worker over a socket and two rings (devproc.h).
 *
 * Its main thread takes the daemon's messages (launches from the down
 * ring, polled while there is work; the rest from the socket) and makes
 * every backend call a worker would make (launch, opening and allocating
 * device memory, repair). A group is rebuilt from its slot's shared memory
 * into the same struct group a worker hands its backend, with this
 * process's addresses; the backend's own threads report the group done,
 * which goes up the other ring (worker.hosted_done). When the daemon goes,
 * so does this process: at end of file on the socket, which it looks at
 * even while it polls the ring.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/backend.h"
#include "daemon/devproc.h"
#include "daemon/log.h"
#include "daemon/worker.h"
#include "gemmd.h"

/* One of the daemon's group slots, as this process sees it. */
struct hslot {
        struct group g;
        uint32_t index;
        void *map; /* the daemon's launch data (X_SLOT_MAP) */
        size_t bytes;
        struct op *ops;
        struct request *reqs; /* one per op: only notify_launch is read */
        struct gbuf *tmp;     /* 3 per op: device memory and inline operands */
        uint32_t cap;
        int ready; /* slot_init done */
};

static struct {
        int fd;
        struct xshared *sh; /* the rings (devproc.h) */
        pthread_mutex_t up_lock; /* the up ring has a producer per backend thread */
        struct backend *be;
        struct worker w; /* only what a backend reads of its worker */
        struct hslot **slots;
        uint32_t nslots;
        uint64_t spin_ns;
        _Atomic uint64_t active_ns; /* the last message in or out: polling goes on spin_ns after */
} H;

int devhost_active; /* read by backends that act differently in a device process */

static int xsend(const void *m, size_t len)
{
        /* One packet per message: sends from the main and the backend's
         * threads never interleave. */
        return send(H.fd, m, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

static void reply(const struct xmsg *req, int rc, uint64_t a, uint64_t b, const uint8_t *handle)
{
        struct xmsg m = {.type = X_REPLY, .seq = req->seq, .rc = rc, .a = a, .b = b};

        if (handle)
                memcpy(m.handle, handle, 64);
        xsend(&m, sizeof(m));
}

static struct hslot *slot_of(const struct group *g)
{
        return (struct hslot *)((char *)g - offsetof(struct hslot, g));
}

/* Any thread: a message up the ring, and a kick if the daemon's reader
 * sleeps. */
static void up(const struct xmsg *m)
{
        int kick;

        pthread_mutex_lock(&H.up_lock);
        kick = xring_push(&H.sh->up, m);
        pthread_mutex_unlock(&H.up_lock);
        atomic_store_explicit(&H.active_ns, now_ns(), memory_order_relaxed);
        if (kick) {
                struct xmsg k = {.type = X_KICK};

                if (xsend(&k, sizeof(k)))
                        _exit(0); /* the daemon is gone */
        }
}

/* A backend thread: the group is done. Its device time is collected here,
 * where the daemon's worker would have asked for it. */
static void hosted_done(struct group *g, int status)
{
        struct xmsg m = {.type = X_DONE, .slot = slot_of(g)->index, .rc = status, .b = UINT64_MAX};

        if (g->timed && H.be->collect) {
                H.be->collect(H.be, g, &m.a, &m.b);
                m.c = 1;
        }
        m.flags = (g->packed ? XDONE_PACKED : 0) | (g->resident ? XDONE_RESIDENT : 0);
        g->resident = 0; /* the slot's next group sets it again if it takes the kernel */
        up(&m);
}

/* A backend thread: ops idx[0 .. n) of g are done before the group (early
 * completion); the daemon's worker answers them. Up the ring in the same
 * thread's order as the group's X_DONE, so they come before it. */
static void hosted_early(struct group *g, const uint32_t *idx, uint32_t n)
{
        for (uint32_t i = 0; i < n; i += XEARLY_MAX) {
                struct xmsg m = {.type = X_EARLY, .slot = slot_of(g)->index};

                m.a = n - i < XEARLY_MAX ? n - i : XEARLY_MAX;
                memcpy(m.handle, idx + i, m.a * sizeof(uint32_t));
                up(&m);
        }
}

static void hosted_launched(struct group *g, const uint8_t handle[64], int device)
{
        struct xmsg m = {.type = X_LAUNCHED, .slot = slot_of(g)->index, .rc = device};

        memcpy(m.handle, handle, 64);
        up(&m);
}

/* Receives one message into buf (len bytes at most) and the descriptor
 * that came with it, if any (*fd, else -1). Returns its length, 0 at end
 * of file, or a negative code (-EAGAIN: none waiting, with MSG_DONTWAIT). */
static ssize_t xrecv(void *buf, size_t len, int *fd, int flags)
{
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {buf, len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                            .msg_controllen = sizeof(cbuf)};
        ssize_t n;

        *fd = -1;
        do
                n = recvmsg(H.fd, &mh, MSG_CMSG_CLOEXEC | flags);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                        memcpy(fd, CMSG_DATA(c), sizeof(int));
        return n;
}

static struct hslot *get_slot(uint32_t index)
{
        if (index >= H.nslots) {
                struct hslot **v = realloc(H.slots, (index + 1) * sizeof(*v));

                if (!v)
                        return NULL;
                memset(v + H.nslots, 0, (index + 1 - H.nslots) * sizeof(*v));
                H.slots = v;
                H.nslots = index + 1;
        }
        if (!H.slots[index]) {
                struct hslot *s = calloc(1, sizeof(*s));

                if (!s)
                        return NULL;
                s->index = index;
                s->g.w = &H.w;
                sched_plan_init(&s->g.plan);
                H.slots[index] = s;
        }
        return H.slots[index];
}

static int slot_map(const struct xmsg *m, int fd)
{
        struct hslot *s = get_slot(m->slot);
        void *p;

        if (!s || fd < 0)
                return -EINVAL;
        p = mmap(NULL, m->a, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
                return -errno;
        if (s->map)
                munmap(s->map, s->bytes);
        s->map = p;
        s->bytes = m->a;
        if (!s->ready) {
                int rc = H.be->slot_init ? H.be->slot_init(H.be, &s->g) : 0;

                if (rc)
                        return rc;
                s->ready = 1;
        }
        return 0;
}

static int reserve(struct hslot *s, uint32_t n)
{
        if (n <= s->cap)
                return 0;
        free(s->ops);
        free(s->reqs);
        free(s->tmp);
        free(s->g.ops);
        free(s->g.kp);
        s->ops = calloc(n, sizeof(*s->ops));
        s->reqs = calloc(n, sizeof(*s->reqs));
        s->tmp = calloc((size_t)n * 3, sizeof(*s->tmp));
        s->g.ops = calloc(n, sizeof(*s->g.ops));
        s->g.kp = calloc(n, sizeof(*s->g.kp));
        s->cap = s->ops && s->reqs && s->tmp && s->g.ops && s->g.kp ? n : 0;
        return s->cap ? 0 : -ENOMEM;
}

/* Rebuilds the slot's group from its launch data and launches it. */
static int launch(struct hslot *s)
{
        const struct xlaunch *h = s->map;
        struct group *g = &s->g;
        char *base = s->map;
        int rc;

        if (!s->map || !s->ready || h->blob_off + h->blob_bytes > s->bytes)
                return -EINVAL;
        if ((rc = reserve(s, h->nops)))
                return rc;
        g->id = h->id;
        g->key = h->key;
        g->nops = h->nops;
        g->cfg = h->cfg;
        g->sp = (struct sched_problem *)(base + h->sp_off);
        g->timed = 0;
        g->status = 0;
        /* The plan as sched_plan_build left it, its blob in the slot. */
        {
                struct sched_plan *p = &g->plan;
                char *blob = base + h->blob_off;

                p->blob_bytes = h->blob_bytes;
                p->nctas = h->nctas;
                p->nproblems = h->nproblems;
                p->nentries = h->nentries;
                p->nsplit = h->nsplit;
                p->ws_chunks = h->ws_chunks;
                p->reduce_apart = (uint8_t)(h->reduce_apart != 0);
                p->tiles = h->tiles;
                p->off_cta_begin = h->off_cta_begin;
                p->off_entries = h->off_entries;
                p->off_split_parts = h->off_split_parts;
                p->off_split_ws = h->off_split_ws;
                p->cta_begin = (const uint32_t *)(blob + h->off_cta_begin);
                p->entries = (const struct sched_entry *)(blob + h->off_entries);
                p->split_parts = (const uint32_t *)(blob + h->off_split_parts);
                p->split_ws = (const uint32_t *)(blob + h->off_split_ws);
                p->blob = blob; /* the slot's: this plan is never freed */
        }
        for (uint32_t i = 0; i < h->nops; i++) {
                const struct xop *x = (const struct xop *)(base + h->ops_off) + i;
                struct op *o = &s->ops[i];
                uint64_t *addr[3] = {&o->kp.a, &o->kp.b, &o->kp.c};

                memset(o, 0, sizeof(*o));
                s->reqs[i].notify_launch = x->notify_launch;
                o->req = &s->reqs[i];
                o->kp = x->kp;
                o->sp = g->sp[i];
                o->key = x->key;
                o->debug_fault = x->debug_fault;
                for (int j = 0; j < 3; j++) {
                        const struct xoperand *xo = &x->x[j];
                        struct gbuf *t = &s->tmp[i * 3 + j];

                        o->span[j] = xo->span;
                        o->off[j] = xo->off;
                        o->bytes += xo->span;
                        switch (xo->where) {
                        case XW_SHM:
                                o->buf[j] = (struct gbuf *)(uintptr_t)xo->ref;
                                *addr[j] = (uint64_t)(uintptr_t)o->buf[j]->host + xo->off;
                                break;
                        case XW_CUDA:
                                memset(t, 0, sizeof(*t));
                                t->kind = GBUF_CUDA;
                                t->bytes = xo->bytes;
                                t->ipc_base = (void *)(uintptr_t)xo->ref;
                                t->alloc_off = xo->alloc_off;
                                t->fd = -1;
                                o->buf[j] = t; /* the backend resolves the address */
                                break;
                        case XW_SLOT:
                                if (xo->ref + xo->span > s->bytes)
                                        return -EINVAL;
                                memset(t, 0, sizeof(*t));
                                t->kind = GBUF_INLINE;
                                t->bytes = xo->span;
                                t->host = base + xo->ref;
                                t->fd = -1;
                                o->buf[j] = t;
                                o->off[j] = 0;
                                *addr[j] = (uint64_t)(uintptr_t)t->host;
                                break;
                        default:
                                return -EINVAL;
                        }
                }
                g->ops[i] = o;
                g->kp[i] = o->kp;
        }
        return H.be->launch(H.be, g);
}

#ifdef GEMMD_WITH_CUDA
#define CUDA_NEW(ordinal, cfg, be) backend_cuda_new(ordinal, cfg, be)
#else
#define CUDA_NEW(ordinal, cfg, be) (-ENODEV)
#endif

/* Creates the backend X_INIT asks for and answers X_READY. */
static int start(void)
{
        struct xinit in;
        struct xready r = {.type = X_READY, .pid = getpid()};
        int fd, rc;
        ssize_t n = xrecv(&in, sizeof(in), &fd, 0);

        if (n != (ssize_t)sizeof(in) || in.type != X_INIT || fd < 0)
                return -EPROTO;
        H.sh = mmap(NULL, sizeof(struct xshared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (H.sh == MAP_FAILED)
                return -EPROTO;
        pthread_mutex_init(&H.up_lock, NULL);
        {
                char name[16];

                snprintf(name, sizeof(name), "gemmd-dev%d", in.ordinal & 0xff);
                prctl(PR_SET_NAME, name);
        }
        rc = in.kind == BACKEND_CUDA ? CUDA_NEW(in.ordinal, &in.cfg, &H.be)
                                     : backend_cpu_new(in.cfg.threads, in.cfg.cpu_alt_tiles, in.cfg.cpu_wave_cut,
                                                       in.cfg.cpu_early, &H.be);
        r.rc = rc;
        if (!rc) {
                struct backend *be = H.be;

                snprintf(r.name, sizeof(r.name), "%s", be->name);
                r.units = be->units;
                r.ctas = be->ctas;
                r.memory_bytes = be->memory_bytes;
                r.mixed_keys = be->mixed_keys;
                r.groups_inflight = be->groups_inflight;
                r.resident = be->resident;
                r.dtypes = be->dtypes;
                r.has_ipc = be->ipc_open != NULL;
                r.has_alloc = be->dev_alloc != NULL;
                r.has_collect = be->collect != NULL;
                r.has_recover = be->recover != NULL;
                for (uint32_t k = 0; k < XKEYS; k++) {
                        r.shapes[k] = be->shape(be, k);
                        if (be->wide_shape)
                                r.wide[k] = be->wide_shape(be, k);
                        if (be->narrow_shape)
                                r.narrow[k] = be->narrow_shape(be, k);
                        snprintf(r.kernels[k], sizeof(r.kernels[k]), "%s", be->kernel_name(be, k));
                }
                H.w.be = be;
                H.w.index = in.ordinal;
                H.spin_ns = in.cfg.spin_us * 1000ull;
                H.w.hosted_done = hosted_done;
                H.w.hosted_early = hosted_early;
                H.w.hosted_launched = hosted_launched;
        }
        xsend(&r, sizeof(r));
        return rc;
}

/* One message from the daemon (a descriptor with it in fd, else -1). */
static void handle(const struct xmsg *m, int xfd)
{
        int rc;

        switch (m->type) {
        case X_SLOT_MAP:
                rc = slot_map(m, xfd);
                if (rc)
                        log_err("device process: cannot map slot %u: %s", m->slot,
                                gemmd_strerror(rc));
                reply(m, rc, 0, 0, NULL);
                break;
        case X_SHM_MAP: {
                struct gbuf *b = NULL;

                rc = xfd >= 0 ? gbuf_new_shm(xfd, m->a, &b) : -EINVAL;
                reply(m, rc, (uint64_t)(uintptr_t)b, 0, NULL);
                break;
        }
        case X_SHM_UNMAP:
                gbuf_unref((struct gbuf *)(uintptr_t)m->a);
                break;
        case X_LAUNCH: {
                struct hslot *s = m->slot < H.nslots ? H.slots[m->slot] : NULL;

                rc = s ? launch(s) : -EINVAL;
                if (rc) {
                        /* Its cause, not always the device's: the daemon's
                         * worker replaces this process only for GEMMD_EDEVICE. */
                        struct xmsg d = {.type = X_DONE, .slot = m->slot, .b = UINT64_MAX,
                                         .rc = worker_launch_status(rc)};

                        log_err("device process: launch of group %llu failed: %s",
                                s ? (unsigned long long)s->g.id : 0ull, gemmd_strerror(rc));
                        up(&d);
                }
                break;
        }
        case X_IPC_OPEN: {
                uint64_t addr = 0;
                void *token = NULL;

                rc = H.be->ipc_open ? H.be->ipc_open(H.be, m->handle, m->a, m->b, &addr, &token)
                                    : GEMMD_EUNSUPPORTED;
                reply(m, rc, addr, (uint64_t)(uintptr_t)token, NULL);
                break;
        }
        case X_IPC_CLOSE:
                if (H.be->ipc_close)
                        H.be->ipc_close(H.be, (void *)(uintptr_t)m->a);
                reply(m, 0, 0, 0, NULL); /* the client may free the memory now */
                break;
        case X_DEV_ALLOC: {
                uint64_t addr = 0;
                void *token = NULL;
                uint8_t exported[64] = {0};

                rc = H.be->dev_alloc ? H.be->dev_alloc(H.be, m->a, &addr, exported, &token)
                                     : GEMMD_EUNSUPPORTED;
                reply(m, rc, addr, (uint64_t)(uintptr_t)token, exported);
                break;
        }
        case X_DEV_FREE:
                if (H.be->dev_free)
                        H.be->dev_free(H.be, (void *)(uintptr_t)m->a);
                reply(m, 0, 0, 0, NULL);
                break;
        case X_RECOVER:
                rc = H.be->recover ? H.be->recover(H.be) : 0;
                reply(m, rc, 0, 0, NULL);
                if (rc)
                        _exit(3); /* the daemon starts another */
                break;
        case X_KICK:
                break; /* the ring is looked at next */
        default:
                log_err("device process: unknown message %u", m->type);
                _exit(1);
        }
}

int devhost_main(int fd)
{
        H.fd = fd;
        devhost_active = 1;
        signal(SIGPIPE, SIG_IGN);
        if (start())
                return 1;
        for (uint32_t idle = 0;;) {
                struct xmsg m;
                int xfd = -1;
                ssize_t n;

                /* Launches come up the ring; the socket is looked at every
                 * so often while polling (it carries nothing urgent), and
                 * blocked on once the polling window is over. */
                if (xring_pop(&H.sh->down, &m)) {
                        atomic_store_explicit(&H.active_ns, now_ns(), memory_order_relaxed);
                        handle(&m, -1);
                        atomic_fetch_add_explicit(&H.sh->launched, 1, memory_order_release);
                        idle = 0;
                        continue;
                }
                if (++idle % 64 && now_ns() - atomic_load_explicit(&H.active_ns, memory_order_relaxed) <
                                           H.spin_ns) {
                        cpu_relax();
                        continue;
                }
                n = xrecv(&m, sizeof(m), &xfd, MSG_DONTWAIT);
                if (n == -EAGAIN &&
                    now_ns() - atomic_load_explicit(&H.active_ns, memory_order_relaxed) < H.spin_ns)
                        continue;
                if (n == -EAGAIN) {
                        if (!xring_sleep(&H.sh->down))
                                continue;
                        n = xrecv(&m, sizeof(m), &xfd, 0);
                        xring_awake(&H.sh->down);
                }
                if (n <= 0)
                        break; /* the daemon closed its end, or is gone */
                if (n != (ssize_t)sizeof(m)) {
                        log_err("device process: a message of %zd bytes", n);
                        break;
                }
                atomic_store_explicit(&H.active_ns, now_ns(), memory_order_relaxed);
                handle(&m, xfd);
                if (xfd >= 0)
                        close(xfd);
        }
        /* The daemon is gone or has stopped its worker: nothing of ours
         * is in flight that anyone waits for, and exit frees the device. */
        _exit(0);
}

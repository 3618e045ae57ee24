/*
 * backend_proc.c - a device driven by a process of its own (devproc.h).
 *
 * The worker sees an ordinary backend. Each call goes to the device
 * process: a launch as the group written into its slot's shared memory
 * and one message naming the slot, on a ring; the worker then waits until
 * the device process has launched it, as it would wait on its own launch
 * calls. Completions come back to a reader thread, which polls for them
 * while groups are in flight and hands them to the worker as a backend's
 * completion thread would. When the device process dies (a sticky CUDA error makes it exit
 * after the repair it is asked for fails, or anything kills it), the
 * groups it had are failed with GEMMD_EDEVICE, and the worker's repair
 * starts another: shared memory and slots are mapped there again as they
 * are next used, clients' device memory is opened again at once, and
 * memory the daemon had allocated for clients is lost (ops on it fail).
 * Sessions, their buffers and queued ops stay.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/backend.h"
#include "daemon/cpuacct.h"
#include "daemon/devproc.h"
#include "daemon/log.h"
#include "daemon/worker.h"
#include "gemmd.h"

/* How long a new device process may take to start (a CUDA context on a
 * large GPU takes about a second). */
#define START_TIMEOUT_MS 120000

/* How long the reader polls for a group in flight before it sleeps: a
 * longer group costs a wake-up, which it can afford. */
#define DONE_POLL_NS 200000ull

/* A group slot's launch data, shared with the device process. */
struct pslot {
        struct group *g;
        uint32_t index;
        int fd;       /* memfd */
        char *map;
        size_t cap;
        uint32_t gen; /* of the device process that mapped it; 0: none */
        int inflight; /* under the backend's lock */
        uint64_t *c_inline; /* per op: offset of its inline C in the slot, or UINT64_MAX */
        uint32_t ops_cap;
        uint64_t dev_ns, gap_ns; /* the last group's device timing */
};

/* Device memory opened or allocated in the device process: the backend's
 * token, kept to open it again in the next device process. */
struct pmem {
        struct pmem *next, *prev;
        uint8_t handle[64];
        uint64_t offset, bytes;
        int owned; /* allocated by the daemon: lost with its process */
        /* Of the process its xtoken belongs to: memory of an earlier one
         * (not opened again, or the daemon's own) is lost. */
        uint32_t gen;
        uint64_t xtoken; /* that process's token */
};

struct proc_backend {
        struct backend b;
        int kind, ordinal, index;
        const struct gemmd_config *cfg;
        pid_t pid;
        int chan; /* under send_lock; -1 between processes */
        struct xshared *sh; /* the rings shared with the process */
        uint64_t launches;  /* X_LAUNCHes sent to it (worker thread) */
        _Atomic uint32_t ninflight; /* slots in flight: the reader polls while any is */
        /* Bumped by every new device process; read by gbuf_forget on any
         * thread, under send_lock. */
        uint32_t gen;
        pthread_mutex_t send_lock;
        pthread_t reader;
        int reader_started;
        /* The reader's state: a reply to the worker's request, whether the
         * process is gone, the slots in flight. */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int dead;
        uint64_t seq;
        int have_reply;
        struct xmsg reply;
        struct pslot **slots;
        uint32_t nslots;
        struct pmem *mems; /* worker thread only */
        struct sched_shape shapes[XKEYS];
        struct sched_shape wide[XKEYS];
        struct sched_shape narrow[XKEYS];
        char kernels[XKEYS][48];
        uint64_t restarts;
};

static struct proc_backend *procs[GBUF_XPROCS];
static int nprocs;

static size_t align64(size_t v)
{
        return (v + 63) & ~(size_t)63;
}

/* Sends one message, with descriptor fd when it is not -1. */
static int xsend(struct proc_backend *p, const void *m, size_t len, int fd)
{
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {(void *)m, len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t n;

        if (fd >= 0) {
                struct cmsghdr *c;

                memset(cbuf, 0, sizeof(cbuf));
                mh.msg_control = cbuf;
                mh.msg_controllen = sizeof(cbuf);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &fd, sizeof(int));
        }
        pthread_mutex_lock(&p->send_lock);
        do
                n = p->chan >= 0 ? sendmsg(p->chan, &mh, MSG_NOSIGNAL) : -1;
        while (n < 0 && p->chan >= 0 && errno == EINTR);
        pthread_mutex_unlock(&p->send_lock);
        return n == (ssize_t)len ? 0 : -EPIPE;
}

/* Worker thread: sends a request and waits for its reply. */
static int call(struct proc_backend *p, struct xmsg *m, int fd, struct xmsg *out)
{
        int rc;

        pthread_mutex_lock(&p->lock);
        if (p->dead) {
                pthread_mutex_unlock(&p->lock);
                return -EPIPE;
        }
        m->seq = ++p->seq;
        p->have_reply = 0;
        pthread_mutex_unlock(&p->lock);
        if ((rc = xsend(p, m, sizeof(*m), fd)))
                return rc;
        pthread_mutex_lock(&p->lock);
        while (!p->dead && !(p->have_reply && p->reply.seq == m->seq))
                pthread_cond_wait(&p->cond, &p->lock);
        rc = p->have_reply && p->reply.seq == m->seq ? 0 : -EPIPE;
        if (!rc)
                *out = p->reply;
        pthread_mutex_unlock(&p->lock);
        return rc;
}

/* Op i's result, when it travels inline through the slot's launch data
 * (results in clients' memory need no copy), into its request. */
static void copy_inline(const struct pslot *s, uint32_t i)
{
        const struct op *o = s->g->ops[i];

        if (o && s->c_inline[i] != UINT64_MAX)
                memcpy((char *)o->buf[2]->host + o->off[2], s->map + s->c_inline[i], o->span[2]);
}

/* A finished group back to the worker, its inline results first (but
 * those of ops answered early, X_EARLY, which are gone from it). */
static void finish(struct pslot *s, int status, uint32_t flags, int timed, uint64_t dev_ns, uint64_t gap_ns)
{
        struct group *g = s->g;

        g->packed = (flags & XDONE_PACKED) != 0;
        g->resident = (flags & XDONE_RESIDENT) != 0;

        if (status == 0)
                for (uint32_t i = 0; i < g->nops; i++)
                        copy_inline(s, i);
        g->timed = timed;
        s->dev_ns = dev_ns;
        s->gap_ns = gap_ns;
        worker_group_done(g, status);
}

/* Ops of s's group done early (X_EARLY): answered now, each inline
 * result copied first as at the group's end (the device process sent
 * this after the op's last store, through the ring). Indices out of
 * range, or of ops already answered, are dropped. */
static void early(struct proc_backend *p, struct pslot *s, const struct xmsg *m)
{
        uint32_t idx[XEARLY_MAX], n = 0, nops;
        int mine;

        pthread_mutex_lock(&p->lock);
        mine = s->inflight;
        pthread_mutex_unlock(&p->lock);
        if (!mine || m->a > XEARLY_MAX)
                return;
        nops = s->g->nops;
        for (uint32_t i = 0; i < (uint32_t)m->a; i++) {
                uint32_t v;

                memcpy(&v, m->handle + 4 * i, 4);
                if (v < nops && s->g->ops[v]) {
                        copy_inline(s, v);
                        idx[n++] = v;
                }
        }
        if (n)
                worker_ops_done(s->g, idx, n);
}

/* A message up the ring: a launch notice, ops done early or a finished
 * group. */
static void handle_up(struct proc_backend *p, const struct xmsg *m)
{
        struct pslot *s;
        int mine;

        if (m->slot >= p->nslots)
                return;
        s = p->slots[m->slot];
        if (m->type == X_LAUNCHED) {
                worker_notify_launch(s->g, m->handle, m->rc);
        } else if (m->type == X_EARLY) {
                early(p, s, m);
        } else if (m->type == X_DONE) {
                pthread_mutex_lock(&p->lock);
                mine = s->inflight;
                s->inflight = 0;
                pthread_mutex_unlock(&p->lock);
                if (mine) {
                        atomic_fetch_sub_explicit(&p->ninflight, 1, memory_order_relaxed);
                        finish(s, m->rc, m->flags, (int)m->c, m->a, m->b);
                }
        }
}

/* The reader thread: completions, launch notices and replies, until the
 * device process is gone; then its groups fail. */
static void *reader_main(void *arg)
{
        struct proc_backend *p = arg;
        const uint64_t spin_ns = p->cfg->spin_us * 1000ull;
        uint64_t active = 0;
        int st = 0;

        cpuacct_thread_start(CPU_DEVPROC_READER);
        for (uint32_t idle = 0;;) {
                struct xmsg m;
                ssize_t n;

                if (xring_pop(&p->sh->up, &m)) {
                        handle_up(p, &m);
                        active = now_ns();
                        idle = 0;
                        continue;
                }
                /* Polls while groups are in flight (their completions come
                 * within DONE_POLL_NS, or the group is a long one) and for
                 * spin_ns after the last message; looks at the socket every
                 * so often meanwhile (replies, and the end of the process). */
                uint64_t since = now_ns() - active;
                int polling = since < spin_ns ||
                              (atomic_load_explicit(&p->ninflight, memory_order_relaxed) &&
                               since < DONE_POLL_NS);

                if (polling && ++idle % 64) {
                        cpu_relax();
                        continue;
                }
                if (polling) {
                        n = recv(p->chan, &m, sizeof(m), MSG_DONTWAIT);
                } else {
                        if (!xring_sleep(&p->sh->up))
                                continue; /* a message came: the process kicks no more */
                        n = recv(p->chan, &m, sizeof(m), 0);
                        xring_awake(&p->sh->up);
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (n != (ssize_t)sizeof(m))
                        break;
                active = now_ns();
                if (m.type == X_REPLY) {
                        pthread_mutex_lock(&p->lock);
                        p->reply = m;
                        p->have_reply = 1;
                        pthread_cond_broadcast(&p->cond);
                        pthread_mutex_unlock(&p->lock);
                }
        }
        /* Under the lock a launch checks it before it marks its slot:
         * no slot goes in flight after this. */
        pthread_mutex_lock(&p->lock);
        __atomic_store_n(&p->dead, 1, __ATOMIC_RELEASE); /* read unlocked by wait_launched */
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
                ;
        if (WIFSIGNALED(st))
                log_err("device %d: its process %d was killed by signal %d", p->ordinal, (int)p->pid,
                        WTERMSIG(st));
        else if (WEXITSTATUS(st))
                log_err("device %d: its process %d exited with %d", p->ordinal, (int)p->pid,
                        WEXITSTATUS(st));
        for (uint32_t i = 0; i < p->nslots; i++) {
                struct pslot *s = p->slots[i];
                int mine;

                pthread_mutex_lock(&p->lock);
                mine = s->inflight;
                s->inflight = 0;
                pthread_mutex_unlock(&p->lock);
                if (!mine)
                        continue;
                atomic_fetch_sub_explicit(&p->ninflight, 1, memory_order_relaxed);
                log_err("device %d: group %llu failed with its device process", p->ordinal,
                        (unsigned long long)s->g->id);
                finish(s, GEMMD_EDEVICE, 0, 0, 0, UINT64_MAX);
        }
        return NULL;
}

/* Starts a device process and waits for it to be ready. */
static int spawn(struct proc_backend *p, struct xready *r)
{
        struct xinit in = {.type = X_INIT, .kind = p->kind, .ordinal = p->ordinal, .cfg = *p->cfg};
        int sv[2];
        char fdarg[16];
        pid_t parent = getpid(), pid;
        struct pollfd pfd;
        struct xshared *sh;
        int shfd, rc;

        /* A device reads only numbers of the config. */
        in.cfg.socket_path = in.cfg.devices = in.cfg.metrics_listen = in.cfg.config_file = NULL;
        in.cfg.cost = NULL;
        in.cfg.allow_uids = in.cfg.allow_gids = NULL;
        /* The rings, fresh for each process. */
        shfd = memfd_create("gemmd-rings", MFD_CLOEXEC);
        if (shfd < 0)
                return -errno;
        if (ftruncate(shfd, sizeof(struct xshared)) < 0 ||
            (sh = mmap(NULL, sizeof(struct xshared), PROT_READ | PROT_WRITE, MAP_SHARED, shfd, 0)) ==
                    MAP_FAILED) {
                int rc = -errno;

                close(shfd);
                return rc;
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                int rc = -errno;

                munmap(sh, sizeof(*sh));
                close(shfd);
                return rc;
        }
        snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
        pid = fork();
        if (pid < 0) {
                int rc = -errno;

                close(sv[0]);
                close(sv[1]);
                munmap(sh, sizeof(*sh));
                close(shfd);
                return rc;
        }
        if (pid == 0) {
                /* Only async-signal-safe calls until exec: the daemon has
                 * threads. Nothing of the daemon's but the socket goes along
                 * (clients' connections and memory least of all). */
                char *argv[] = {"gemmd", "--device-host", fdarg, NULL};
                sigset_t all;

                /* No parent-death signal: it follows the forking thread,
                 * and a worker thread that restarted a device process ends
                 * before the daemon does. The process ends at end of file
                 * on its socket instead, which the daemon's death closes. */
                if (getppid() != parent)
                        _exit(127);
                fcntl(sv[1], F_SETFD, 0);
                if (sv[1] > 3)
                        syscall(SYS_close_range, 3u, (unsigned)sv[1] - 1, 0u);
                syscall(SYS_close_range, (unsigned)sv[1] + 1, ~0u, 0u);
                sigemptyset(&all);
                sigprocmask(SIG_SETMASK, &all, NULL);
                execv("/proc/self/exe", argv);
                _exit(127);
        }
        close(sv[1]);
        __atomic_store_n(&p->pid, pid, __ATOMIC_RELAXED);
        p->chan = sv[0];
        p->sh = sh;
        p->launches = 0;
        memset(r, 0, sizeof(*r));
        rc = xsend(p, &in, sizeof(in), shfd);
        close(shfd);
        if (rc)
                goto fail;
        pfd.fd = sv[0];
        pfd.events = POLLIN;
        if (poll(&pfd, 1, START_TIMEOUT_MS) != 1 ||
            recv(sv[0], r, sizeof(*r), 0) != (ssize_t)sizeof(*r) || r->type != X_READY)
                goto fail;
        if (r->rc) {
                log_err("device %d: its process could not start the %s backend: %s", p->ordinal,
                        p->kind == BACKEND_CUDA ? "cuda" : "cpu", gemmd_strerror(r->rc));
                goto fail_rc;
        }
        return 0;
fail:
        log_err("device %d: its process %d did not start", p->ordinal, (int)pid);
        r->rc = -EIO;
fail_rc:
        close(sv[0]);
        p->chan = -1;
        munmap(sh, sizeof(*sh));
        p->sh = NULL;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return r->rc;
}

/* Worker thread, nothing in flight: the process before is gone (or about
 * to go); starts the next one and opens clients' device memory there. */
static int restart(struct proc_backend *p)
{
        struct xready r;
        int rc;

        if (p->reader_started) {
                /* The reader reaps the old process and fails what it had. */
                pthread_mutex_lock(&p->send_lock);
                shutdown(p->chan, SHUT_RDWR);
                pthread_mutex_unlock(&p->send_lock);
                pthread_join(p->reader, NULL);
                p->reader_started = 0;
        }
        pthread_mutex_lock(&p->send_lock);
        if (p->chan >= 0)
                close(p->chan);
        p->chan = -1;
        __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE); /* every mapping of the old one is stale */
        pthread_mutex_unlock(&p->send_lock);
        if (p->sh)
                munmap(p->sh, sizeof(*p->sh));
        p->sh = NULL;

        rc = spawn(p, &r);
        if (rc)
                return rc;
        pthread_mutex_lock(&p->lock);
        p->dead = 0;
        pthread_mutex_unlock(&p->lock);
        if ((rc = -pthread_create(&p->reader, NULL, reader_main, p)) != 0) {
                kill(p->pid, SIGKILL);
                waitpid(p->pid, NULL, 0);
                close(p->chan);
                p->chan = -1;
                munmap(p->sh, sizeof(*p->sh));
                p->sh = NULL;
                return rc;
        }
        p->reader_started = 1;
        {
                char name[16];

                snprintf(name, sizeof(name), "gemmd-proc%d", p->index & 0xff);
                pthread_setname_np(p->reader, name);
        }
        if (p->gen > 1) {
                uint32_t reopened = 0, lost = 0;

                __atomic_add_fetch(&p->restarts, 1, __ATOMIC_RELAXED);
                for (struct pmem *m = p->mems; m; m = m->next) {
                        struct xmsg q = {.type = X_IPC_OPEN, .a = m->offset, .b = m->bytes}, a;

                        if (m->gen != p->gen - 1)
                                continue; /* lost before */
                        memcpy(q.handle, m->handle, 64);
                        if (m->owned || call(p, &q, -1, &a) || a.rc) {
                                lost++;
                                continue;
                        }
                        m->xtoken = a.b;
                        m->gen = p->gen;
                        reopened++;
                }
                log_info("device %d: process %d serves it now (restart %llu); %u device "
                         "allocations opened again, %u lost",
                         p->ordinal, (int)p->pid, (unsigned long long)p->restarts, reopened, lost);
        }
        return 0;
}

/* Worker thread: the device process, started again if it is gone. */
static int alive(struct proc_backend *p)
{
        int dead;

        pthread_mutex_lock(&p->lock);
        dead = p->dead;
        pthread_mutex_unlock(&p->lock);
        if (!dead)
                return 0;
        log_warn("device %d: its process is gone: starting another", p->ordinal);
        return restart(p) ? GEMMD_EDEVICE : 0;
}

static struct sched_shape shape(struct backend *b, uint32_t key)
{
        return ((struct proc_backend *)b)->shapes[key % XKEYS];
}

static struct sched_shape wide_shape(struct backend *b, uint32_t key)
{
        return ((struct proc_backend *)b)->wide[key % XKEYS];
}

static struct sched_shape narrow_shape(struct backend *b, uint32_t key)
{
        return ((struct proc_backend *)b)->narrow[key % XKEYS];
}

static const char *kernel_name(struct backend *b, uint32_t key)
{
        return ((struct proc_backend *)b)->kernels[key % XKEYS];
}

/* Makes slot s hold `need` bytes: a larger memfd, mapped there anew. */
static int grow(struct pslot *s, size_t need)
{
        size_t cap = s->cap ? s->cap : 1 << 16;
        int fd;
        void *m;

        if (need <= s->cap)
                return 0;
        while (cap < need)
                cap *= 2;
        fd = memfd_create("gemmd-slot", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t)cap) < 0 ||
            (m = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
                int rc = -errno;

                close(fd);
                return rc;
        }
        if (s->map) {
                munmap(s->map, s->cap);
                close(s->fd);
        }
        s->fd = fd;
        s->map = m;
        s->cap = cap;
        s->gen = 0; /* to be sent again */
        return 0;
}

/* Where operand j of op o is, for the device process; copies an inline
 * operand into the slot at *inl. */
static int place(struct proc_backend *p, struct pslot *s, const struct op *o, int j,
                 struct xoperand *x, size_t *inl)
{
        struct gbuf *b = o->buf[j];
        const int i = p->index;

        x->off = o->off[j];
        x->span = o->span[j];
        x->bytes = b->bytes;
        switch (b->kind) {
        case GBUF_SHM:
                if (b->xgen[i] != p->gen) {
                        struct xmsg q = {.type = X_SHM_MAP, .a = b->bytes}, a;
                        int rc = b->fd >= 0 ? call(p, &q, b->fd, &a) : -EINVAL;

                        if (rc || a.rc) {
                                log_err("device %d: cannot map shared memory in the device "
                                        "process: %s", p->ordinal, gemmd_strerror(rc ? rc : a.rc));
                                /* The device process said why: out of
                                 * mappings is not a broken device. */
                                return rc ? GEMMD_EDEVICE : worker_launch_status(a.rc);
                        }
                        b->xref[i] = a.a;
                        b->xgen[i] = p->gen;
                }
                x->where = XW_SHM;
                x->ref = b->xref[i];
                return 0;
        case GBUF_CUDA: {
                const struct pmem *m = b->ipc_base;

                if (m->gen != p->gen) {
                        log_warn("device %d: an operand's device memory was lost with an "
                                 "earlier device process", p->ordinal);
                        return GEMMD_EDEVICE;
                }
                x->where = XW_CUDA;
                x->ref = m->xtoken;
                x->alloc_off = b->alloc_off;
                return 0;
        }
        case GBUF_INLINE:
                x->where = XW_SLOT;
                x->ref = *inl;
                memcpy(s->map + *inl, (const char *)b->host + o->off[j], o->span[j]);
                *inl += align64(o->span[j]);
                return 0;
        }
        return -EINVAL;
}

/* Waits until the device process has carried out every launch sent (see
 * xshared.launched), or is gone. Polls: a launch takes some 10 us. */
static void wait_launched(struct proc_backend *p)
{
        const uint64_t t0 = now_ns();

        while (atomic_load_explicit(&p->sh->launched, memory_order_acquire) < p->launches) {
                if (__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
                        return;
                if (now_ns() - t0 < 2000000)
                        cpu_relax();
                else
                        usleep(50); /* a first launch loads the kernels */
        }
}

static int launch(struct backend *be, struct group *g)
{
        struct proc_backend *p = (struct proc_backend *)be;
        struct pslot *s = g->bdata;
        const struct sched_plan *plan = &g->plan;
        size_t ops_off = align64(sizeof(struct xlaunch));
        size_t sp_off = ops_off + align64(g->nops * sizeof(struct xop));
        size_t blob_off = sp_off + align64(g->nops * sizeof(struct sched_problem));
        size_t inl = blob_off + align64(plan->blob_bytes), need = inl;
        struct xlaunch *h;
        struct xmsg m = {.type = X_LAUNCH, .slot = s->index};
        int rc, was;

        if ((rc = alive(p)))
                return rc;
        for (uint32_t i = 0; i < g->nops; i++)
                for (int j = 0; j < 3; j++)
                        if (g->ops[i]->buf[j]->kind == GBUF_INLINE)
                                need += align64(g->ops[i]->span[j]);
        /* Nothing has reached the device process yet: memory that runs
         * out here fails the group's ops and no more (backend.h). */
        if ((rc = grow(s, need)))
                return rc == -ENOMEM || rc == -EMFILE || rc == -ENFILE ? GEMMD_ERESOURCE : rc;
        if (s->ops_cap < g->nops) {
                uint64_t *v = realloc(s->c_inline, g->nops * sizeof(*v));

                if (!v)
                        return GEMMD_ERESOURCE;
                s->c_inline = v;
                s->ops_cap = g->nops;
        }
        if (s->gen != p->gen) {
                /* Answered, so that the launch (on the ring) finds it mapped. */
                struct xmsg q = {.type = X_SLOT_MAP, .slot = s->index, .a = s->cap}, a;

                if (call(p, &q, s->fd, &a) || a.rc)
                        return GEMMD_EDEVICE;
                s->gen = p->gen;
        }
        h = (struct xlaunch *)s->map;
        memset(h, 0, sizeof(*h));
        h->id = g->id;
        h->key = g->key;
        h->nops = g->nops;
        h->cfg = g->cfg;
        h->nctas = plan->nctas;
        h->nproblems = plan->nproblems;
        h->nentries = plan->nentries;
        h->nsplit = plan->nsplit;
        h->ws_chunks = plan->ws_chunks;
        h->reduce_apart = plan->reduce_apart;
        h->tiles = plan->tiles;
        h->off_cta_begin = plan->off_cta_begin;
        h->off_entries = plan->off_entries;
        h->off_split_parts = plan->off_split_parts;
        h->off_split_ws = plan->off_split_ws;
        h->blob_bytes = plan->blob_bytes;
        h->ops_off = ops_off;
        h->sp_off = sp_off;
        h->blob_off = blob_off;
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];
                struct xop *x = (struct xop *)(s->map + ops_off) + i;

                memset(x, 0, sizeof(*x));
                x->kp = o->kp;
                x->key = o->key;
                x->notify_launch = (uint8_t)o->req->notify_launch;
                x->debug_fault = (uint8_t)o->debug_fault;
                for (int j = 0; j < 3; j++)
                        if ((rc = place(p, s, o, j, &x->x[j], &inl)))
                                return rc;
                s->c_inline[i] = x->x[2].where == XW_SLOT ? x->x[2].ref : UINT64_MAX;
        }
        memcpy(s->map + sp_off, g->sp, g->nops * sizeof(struct sched_problem));
        if (plan->blob_bytes)
                memcpy(s->map + blob_off, plan->blob, plan->blob_bytes);

        pthread_mutex_lock(&p->lock);
        if (p->dead) {
                pthread_mutex_unlock(&p->lock);
                return GEMMD_EDEVICE;
        }
        s->inflight = 1;
        atomic_fetch_add_explicit(&p->ninflight, 1, memory_order_relaxed);
        pthread_mutex_unlock(&p->lock);
        p->launches++;
        if (xring_push(&p->sh->down, &m)) {
                struct xmsg k = {.type = X_KICK};

                if (xsend(p, &k, sizeof(k), -1))
                        goto gone;
        }
        wait_launched(p);
        return 0;
gone:
        /* The process went: the reader fails the group, unless it had
         * already looked at the slots. */
        pthread_mutex_lock(&p->lock);
        was = s->inflight;
        s->inflight = 0;
        pthread_mutex_unlock(&p->lock);
        if (was)
                atomic_fetch_sub_explicit(&p->ninflight, 1, memory_order_relaxed);
        return was ? GEMMD_EDEVICE : 0;
}

static void collect(struct backend *be, struct group *g, uint64_t *device_ns, uint64_t *gap_ns)
{
        const struct pslot *s = g->bdata;

        *device_ns = s->dev_ns;
        if (s->gap_ns != UINT64_MAX)
                *gap_ns = s->gap_ns;
}

static int open_mem(struct proc_backend *p, struct xmsg *q, int owned, uint64_t *addr,
                    void **token, uint8_t handle[64])
{
        struct pmem *m;
        struct xmsg a;
        int rc;

        if ((rc = alive(p)))
                return rc;
        if (!(m = calloc(1, sizeof(*m))))
                return -ENOMEM;
        if ((rc = call(p, q, -1, &a)) || (rc = a.rc)) {
                free(m);
                return rc == -EPIPE ? GEMMD_EDEVICE : rc;
        }
        memcpy(m->handle, owned ? a.handle : q->handle, 64);
        if (owned)
                memcpy(handle, a.handle, 64);
        m->offset = q->a;
        m->bytes = owned ? q->a : q->b;
        m->owned = owned;
        m->gen = p->gen;
        m->xtoken = a.b;
        m->next = p->mems;
        if (p->mems)
                p->mems->prev = m;
        p->mems = m;
        *addr = a.a;
        *token = m;
        return 0;
}

static int ipc_open(struct backend *be, const uint8_t handle[64], uint64_t offset, uint64_t bytes,
                    uint64_t *addr, void **token)
{
        struct xmsg q = {.type = X_IPC_OPEN, .a = offset, .b = bytes};

        memcpy(q.handle, handle, 64);
        return open_mem((struct proc_backend *)be, &q, 0, addr, token, NULL);
}

static int dev_alloc(struct backend *be, uint64_t bytes, uint64_t *addr, uint8_t handle[64],
                     void **token)
{
        struct xmsg q = {.type = X_DEV_ALLOC, .a = bytes};

        return open_mem((struct proc_backend *)be, &q, 1, addr, token, handle);
}

static void close_mem(struct backend *be, void *token)
{
        struct proc_backend *p = (struct proc_backend *)be;
        struct pmem *m = token;

        if (m->gen == p->gen) {
                struct xmsg q = {.type = m->owned ? X_DEV_FREE : X_IPC_CLOSE, .a = m->xtoken}, a;

                /* Waited for: a client's release is answered once its
                 * memory is closed (devmem_release). A process that is
                 * gone took it along. */
                call(p, &q, -1, &a);
        }
        if (m->prev)
                m->prev->next = m->next;
        else
                p->mems = m->next;
        if (m->next)
                m->next->prev = m->prev;
        free(m);
}

/* After a failed group, nothing in flight: the device process repairs its
 * device, or says it cannot and exits; then another starts. */
static int recover(struct backend *be)
{
        struct proc_backend *p = (struct proc_backend *)be;
        struct xmsg q = {.type = X_RECOVER}, a;
        int dead;

        pthread_mutex_lock(&p->lock);
        dead = p->dead;
        pthread_mutex_unlock(&p->lock);
        if (!dead && call(p, &q, -1, &a) == 0 && a.rc == 0)
                return 0;
        log_warn("device %d: its process cannot go on: starting another", p->ordinal);
        return restart(p);
}

static int slot_init(struct backend *be, struct group *g)
{
        struct proc_backend *p = (struct proc_backend *)be;
        struct pslot *s = calloc(1, sizeof(*s));
        struct pslot **v;

        if (!s)
                return -ENOMEM;
        pthread_mutex_lock(&p->lock);
        v = realloc(p->slots, (p->nslots + 1) * sizeof(*v));
        if (v) {
                p->slots = v;
                s->index = p->nslots;
                v[p->nslots++] = s;
        }
        pthread_mutex_unlock(&p->lock);
        if (!v) {
                free(s);
                return -ENOMEM;
        }
        s->fd = -1;
        s->g = g;
        g->bdata = s;
        /* Its memfd now rather than at its first group, so the daemon's
         * open descriptors stay the same while it serves: a count that
         * grows then means a leak (the fault and soak suites check it). */
        return grow(s, 1);
}

static void slot_deinit(struct backend *be, struct group *g)
{
        struct pslot *s = g->bdata;

        if (!s)
                return;
        if (s->map) {
                munmap(s->map, s->cap);
                close(s->fd);
                s->map = NULL;
                s->cap = 0;
        }
        free(s->c_inline);
        s->c_inline = NULL;
        s->ops_cap = 0;
        g->bdata = NULL; /* the pslot stays in p->slots until destroy */
}

/* Any thread, a buffer's last reference: the device processes that
 * mapped it unmap it too. */
static void forget(struct gbuf *b)
{
        for (int i = 0; i < nprocs; i++) {
                struct proc_backend *p = procs[i];
                struct xmsg q = {.type = X_SHM_UNMAP, .a = b->xref[i]};

                if (!p || !b->xgen[i])
                        continue;
                /* Under send_lock, which a restart takes to change the
                 * generation: a handle of an old process never goes to a
                 * new one. */
                pthread_mutex_lock(&p->send_lock);
                if (b->xgen[i] == p->gen && p->chan >= 0)
                        send(p->chan, &q, sizeof(q), MSG_NOSIGNAL);
                pthread_mutex_unlock(&p->send_lock);
        }
}

static void destroy(struct backend *be)
{
        struct proc_backend *p = (struct proc_backend *)be;

        if (p->reader_started) {
                /* The device process sees the end and exits; the reader
                 * reaps it. */
                pthread_mutex_lock(&p->send_lock);
                shutdown(p->chan, SHUT_RDWR);
                pthread_mutex_unlock(&p->send_lock);
                pthread_join(p->reader, NULL);
        }
        pthread_mutex_lock(&p->send_lock);
        if (p->chan >= 0)
                close(p->chan);
        p->chan = -1;
        pthread_mutex_unlock(&p->send_lock);
        if (p->sh)
                munmap(p->sh, sizeof(*p->sh));
        procs[p->index] = NULL;
        while (p->mems) {
                struct pmem *m = p->mems;

                p->mems = m->next;
                free(m);
        }
        for (uint32_t i = 0; i < p->nslots; i++)
                free(p->slots[i]);
        free(p->slots);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->send_lock);
        pthread_cond_destroy(&p->cond);
        free(p);
}

/* Read by the stats on a loop thread while the worker may restart. */
uint64_t backend_proc_restarts(const struct backend *be)
{
        return be->launch == launch
                       ? __atomic_load_n(&((const struct proc_backend *)be)->restarts, __ATOMIC_RELAXED)
                       : 0;
}

int backend_proc_pid(const struct backend *be)
{
        return be->launch == launch
                       ? (int)__atomic_load_n(&((const struct proc_backend *)be)->pid, __ATOMIC_RELAXED)
                       : 0;
}

int backend_proc_new(int kind, int ordinal, const struct gemmd_config *cfg, struct backend **out)
{
        struct proc_backend *p;
        struct xready r;
        int rc;

        if (nprocs >= GBUF_XPROCS)
                return -ENOSPC;
        if (!(p = calloc(1, sizeof(*p))))
                return -ENOMEM;
        p->kind = kind;
        p->ordinal = ordinal;
        p->cfg = cfg;
        p->chan = -1;
        p->index = nprocs;
        pthread_mutex_init(&p->lock, NULL);
        pthread_mutex_init(&p->send_lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        /* The first process: its description becomes the backend's. */
        p->gen = 1;
        if ((rc = spawn(p, &r))) {
                pthread_mutex_destroy(&p->lock);
                pthread_mutex_destroy(&p->send_lock);
                pthread_cond_destroy(&p->cond);
                free(p);
                return rc;
        }
        p->b.kind = kind == BACKEND_CUDA ? "cuda" : "cpu";
        memcpy(p->b.name, r.name, sizeof(p->b.name));
        p->b.name[sizeof(p->b.name) - 1] = 0;
        p->b.index = ordinal;
        p->b.units = r.units;
        p->b.ctas = r.ctas;
        p->b.memory_bytes = r.memory_bytes;
        p->b.mixed_keys = r.mixed_keys;
        p->b.groups_inflight = r.groups_inflight;
        p->b.resident = r.resident;
        p->b.dtypes = r.dtypes;
        memcpy(p->shapes, r.shapes, sizeof(p->shapes));
        memcpy(p->wide, r.wide, sizeof(p->wide));
        memcpy(p->narrow, r.narrow, sizeof(p->narrow));
        memcpy(p->kernels, r.kernels, sizeof(p->kernels));
        for (int k = 0; k < XKEYS; k++)
                p->kernels[k][sizeof(p->kernels[k]) - 1] = 0;
        p->b.shape = shape;
        p->b.wide_shape = wide_shape;
        p->b.narrow_shape = narrow_shape;
        p->b.kernel_name = kernel_name;
        p->b.launch = launch;
        p->b.slot_init = slot_init;
        p->b.slot_deinit = slot_deinit;
        p->b.collect = r.has_collect ? collect : NULL;
        p->b.ipc_open = r.has_ipc ? ipc_open : NULL;
        p->b.ipc_close = r.has_ipc ? close_mem : NULL;
        p->b.dev_alloc = r.has_alloc ? dev_alloc : NULL;
        p->b.dev_free = r.has_alloc ? close_mem : NULL;
        p->b.recover = recover; /* a process can always be replaced */
        p->b.destroy = destroy;
        if ((rc = -pthread_create(&p->reader, NULL, reader_main, p)) != 0) {
                kill(p->pid, SIGKILL);
                waitpid(p->pid, NULL, 0);
                close(p->chan);
                munmap(p->sh, sizeof(*p->sh));
                free(p);
                return rc;
        }
        p->reader_started = 1;
        procs[nprocs++] = p;
        gbuf_keep_fds = 1;
        gbuf_forget = forget;
        *out = &p->b;
        return 0;
}

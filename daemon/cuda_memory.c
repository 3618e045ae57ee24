/*
 * cuda_memory.c - the CUDA backend's memory (cuda_backend.h): the slots'
 * buffers, grown and retired; shared memory page-locked on the pin
 * thread; clients' device memory opened through CUDA IPC, and device
 * memory the daemon allocates for them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/cpuacct.h"
#include "daemon/cuda_backend.h"
#include "gemmd.h"

/* Grows a device or pinned host allocation to at least `need` bytes
 * (geometrically, from 64 KB), zeroing a new device one if asked. The old
 * one is not freed here: cudaFree and cudaFreeHost wait for the whole
 * device, every slot's group, so a grow on the launch path would stall
 * every group in flight for milliseconds. It is retired, and
 * freed with the backend: growing geometrically, the retired buffers hold
 * less than the live ones. */
int grow(struct cuda_backend *cb, void **p, size_t *cap, size_t need, enum mem_kind kind,
                int zero)
{
        size_t n = *cap ? *cap : 1u << 16;

        if (need <= *cap)
                return 0;
        res_stop(cb); /* an allocation may wait for the device */
        while (n < need)
                n *= 2;
        if (*p) {
                struct retired *r = malloc(sizeof(*r));

                if (!r)
                        return -ENOMEM;
                r->p = *p;
                r->pinned = kind == MEM_PINNED;
                r->next = cb->retired;
                cb->retired = r;
        }
        *p = NULL;
        *cap = 0;
        if (kind == MEM_PINNED)
                CK(cudaMallocHost(p, n));
        else
                CK(cudaMalloc(p, n));
        if (zero && kind == MEM_DEVICE)
                CK(cudaMemset(*p, 0, n));
        *cap = n;
        return 0;
}

/* Frees the retired buffers (with nothing in flight: it waits for the
 * device); after a context rebuild they are gone with it: forget them. */
void free_retired(struct cuda_backend *cb, int forget)
{
        while (cb->retired) {
                struct retired *r = cb->retired;

                cb->retired = r->next;
                if (!forget && r->pinned)
                        cudaFreeHost(r->p);
                else if (!forget)
                        cudaFree(r->p);
                free(r);
        }
}

/* Grows a pinned host buffer and its device twin, which always have the
 * same size, to at least `need` bytes. */
int grow_pair(struct cuda_backend *cb, void **h, void **d, size_t *cap, size_t need)
{
        size_t hcap = *cap; /* the twin's size until d has grown too */
        int rc = grow(cb, h, &hcap, need, MEM_PINNED, 0);

        return rc ? rc : grow(cb, d, cap, need, MEM_DEVICE, 0);
}

/* Shared memory to page-lock (buf, with a reference), or to unlock and
 * unmap (host, bytes). */
struct pin_task {
        struct pin_task *next;
        struct gbuf *buf;
        void *host;
        uint64_t bytes;
};

static void pin_enqueue(struct cuda_backend *cb, struct pin_task *t)
{
        t->next = NULL;
        pthread_mutex_lock(&cb->pin_lock);
        if (cb->pin_tail)
                cb->pin_tail->next = t;
        else
                cb->pin_head = t;
        cb->pin_tail = t;
        pthread_cond_signal(&cb->pin_cond);
        pthread_mutex_unlock(&cb->pin_lock);
}

/* A buffer's last reference hands its mapping here (any thread). */
static void unpin(void *ctx, void *host, uint64_t bytes)
{
        struct cuda_backend *cb = ctx;
        struct pin_task *t = calloc(1, sizeof(*t));

        if (!t) {
                munmap(host, bytes); /* the driver drops the lock with the pages */
                return;
        }
        t->host = host;
        t->bytes = bytes;
        pin_enqueue(cb, t);
}

/*
 * The pin thread page-locks and unlocks shared memory. Locking a buffer of
 * gigabytes takes the driver a long time (hundreds of milliseconds); on the
 * worker thread that held up every client's groups. Until a buffer is
 * locked its operands go through the bounce buffer.
 */
void *pin_main(void *arg)
{
        struct cuda_backend *cb = arg;

        cpuacct_thread_start(CPU_PIN);
        cudaSetDevice(cb->ordinal);
        pthread_mutex_lock(&cb->pin_lock);
        for (;;) {
                struct pin_task *t;

                while (!cb->pin_head && !cb->pin_stop)
                        pthread_cond_wait(&cb->pin_cond, &cb->pin_lock);
                if (!(t = cb->pin_head))
                        break; /* stopping, and every task done */
                cb->pin_head = t->next;
                if (!cb->pin_head)
                        cb->pin_tail = NULL;
                pthread_mutex_unlock(&cb->pin_lock);
                res_stop(cb); /* both calls may wait for the device */
                if (t->buf) {
                        struct gbuf *b = t->buf;

                        /* Mapped: a completion word (proto/ring.h) is stored by the kernel. */
                        if (cudaHostRegister(b->host, b->bytes,
                                             cudaHostRegisterPortable | cudaHostRegisterMapped) == cudaSuccess) {
                                b->unpin = unpin;
                                b->unpin_ctx = cb;
                                __atomic_store_n(&b->pinned, 1, __ATOMIC_RELEASE);
                        } else {
                                cudaGetLastError(); /* works unpinned, only slower */
                        }
                        gbuf_unref(b);
                } else {
                        if (cudaHostUnregister(t->host) != cudaSuccess)
                                cudaGetLastError();
                        munmap(t->host, t->bytes);
                }
                free(t);
                pthread_mutex_lock(&cb->pin_lock);
        }
        pthread_mutex_unlock(&cb->pin_lock);
        return NULL;
}

/* Stops the pin thread once it has done every queued task. */
void pin_thread_stop(struct cuda_backend *cb)
{
        pthread_mutex_lock(&cb->pin_lock);
        cb->pin_stop = 1;
        pthread_cond_signal(&cb->pin_cond);
        pthread_mutex_unlock(&cb->pin_lock);
        pthread_join(cb->pin_thread, NULL);
}

/* Asks for a session's shared memory to be page-locked the first time a
 * group stages it: copies from and to it are then truly asynchronous, so
 * the worker goes on building the next group while the device copies,
 * instead of waiting on a pageable copy. Inline operands are short-lived
 * and stay pageable. Returns whether b is locked now. */
int pin(struct cuda_backend *cb, struct gbuf *b)
{
        struct pin_task *t;

        if (b->kind != GBUF_SHM)
                return 0;
        if (__atomic_load_n(&b->pinned, __ATOMIC_ACQUIRE))
                return 1;
        if (__atomic_exchange_n(&b->pin_asked, 1, __ATOMIC_ACQ_REL) || !(t = calloc(1, sizeof(*t))))
                return 0;
        gbuf_ref(b);
        t->buf = b;
        pin_enqueue(cb, t);
        return 0;
}

typedef int (*addr_range_fn)(unsigned long long *base, size_t *size, unsigned long long dptr);

/* The true extent of the allocation that holds p, from the driver. */
static int alloc_range(void *p, void **base, size_t *size)
{
        static addr_range_fn range;
        enum cudaDriverEntryPointQueryResult q;
        unsigned long long b;

        if (!range && (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&range,
                                                        12000, cudaEnableDefault, &q) != cudaSuccess ||
                       q != cudaDriverEntryPointSuccess))
                return -ENOSYS;
        if (range(&b, size, (unsigned long long)(uintptr_t)p) != 0)
                return -EIO;
        *base = (void *)(uintptr_t)b;
        return 0;
}

/* Unmaps m, unlinked and unused, and frees it. The close may wait for
 * the device, which the resident kernel would keep until idle: that is
 * stopped first. */
static void map_close(struct cuda_backend *cb, struct ipc_map *m)
{
        const uint64_t t0 = now_ns();
        uint64_t t1, t2;

        cudaSetDevice(cb->ordinal);
        res_stop(cb);
        t1 = now_ns();
        if (cudaIpcCloseMemHandle(m->mem.base) != cudaSuccess)
                log_warn("cuda %d: cudaIpcCloseMemHandle: %s", cb->ordinal,
                         cudaGetErrorString(cudaGetLastError()));
        t2 = now_ns();
        free(m);
        cb->close_n++;
        cb->close_stop_ns += t1 - t0;
        cb->close_unmap_ns += t2 - t1;
        if (t2 - t0 > cb->close_max_ns)
                cb->close_max_ns = t2 - t0;
}

int ipc_open(struct backend *be, const uint8_t handle[64], uint64_t offset, uint64_t bytes,
                    uint64_t *addr, void **token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct ipc_map *m;
        cudaIpcMemHandle_t h;
        void *base;

        for (m = cb->maps; m; m = m->next)
                if (!memcmp(m->handle, handle, 64))
                        break;
        if (!m) {
                m = calloc(1, sizeof(*m));
                if (!m)
                        return -ENOMEM;
                memcpy(m->handle, handle, 64);
                memcpy(&h, handle, sizeof(h));
                CK(cudaSetDevice(cb->ordinal));
                if (cudaIpcOpenMemHandle(&m->mem.base, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
                        log_warn("cuda %d: cudaIpcOpenMemHandle: %s", cb->ordinal,
                                 cudaGetErrorString(cudaGetLastError()));
                        free(m);
                        return GEMMD_EINVAL;
                }
                /* The client's claim is checked against what the driver says
                 * the allocation really is. */
                if (alloc_range(m->mem.base, &base, &m->size) || base != m->mem.base) {
                        log_warn("cuda %d: cannot read the extent of an IPC allocation", cb->ordinal);
                        cudaIpcCloseMemHandle(m->mem.base);
                        free(m);
                        return GEMMD_EDEVICE;
                }
                m->next = cb->maps;
                cb->maps = m;
        }
        if (offset > m->size || bytes > m->size - offset) {
                if (m->refs == 0) {
                        cb->maps = m->next;
                        map_close(cb, m);
                }
                return GEMMD_EBOUNDS;
        }
        m->refs++;
        *addr = (uint64_t)(uintptr_t)m->mem.base + offset;
        *token = m;
        return 0;
}

void ipc_close(struct backend *be, void *token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct ipc_map *m = token, **pp;

        if (--m->refs > 0)
                return;
        for (pp = &cb->maps; *pp; pp = &(*pp)->next)
                if (*pp == m) {
                        *pp = m->next;
                        break;
                }
        /* Groups that used it are done: their ops held the buffer. */
        map_close(cb, m);
}

int dev_alloc(struct backend *be, uint64_t bytes, uint64_t *addr, uint8_t handle[64],
                     void **token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        cudaIpcMemHandle_t h;
        void *p;

        CK(cudaSetDevice(cb->ordinal));
        res_stop(cb); /* the allocation may wait for the device */
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
                cudaGetLastError();
                return -ENOMEM;
        }
        if (cudaIpcGetMemHandle(&h, p) != cudaSuccess) {
                cudaGetLastError();
                cudaFree(p);
                return GEMMD_EDEVICE;
        }
        struct dev_mem *d = calloc(1, sizeof(*d));

        if (!d) {
                cudaFree(p);
                return -ENOMEM;
        }
        d->mem.base = p;
        d->mem.daemon_owned = 1;
        d->next = cb->allocs;
        cb->allocs = d;
        memcpy(handle, &h, 64);
        *addr = (uint64_t)(uintptr_t)p;
        *token = d;
        return 0;
}

void dev_free(struct backend *be, void *token)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct dev_mem *d = token, **pp;

        for (pp = &cb->allocs; *pp; pp = &(*pp)->next)
                if (*pp == d) {
                        *pp = d->next;
                        break;
                }
        cudaSetDevice(cb->ordinal);
        res_stop(cb); /* cudaFree waits for the device */
        /* Groups that used it are done: their ops held the buffer. */
        if (d->mem.base && cudaFree(d->mem.base) != cudaSuccess)
                log_warn("cuda %d: cudaFree: %s", cb->ordinal, cudaGetErrorString(cudaGetLastError()));
        free(d);
}

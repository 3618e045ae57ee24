/*
 * buffers.h - memory a session registered, and the per-session table of it.
 *
 * A buffer is reference counted: the session's table holds one reference
 * and every admitted op holds one per operand, so a buffer released (or a
 * session closed) while ops still use it is unmapped only after they
 * finish. The count is atomic because the last reference may be dropped by
 * a worker thread; everything else here belongs to the loop thread.
 */
#ifndef GEMMD_BUFFERS_H
#define GEMMD_BUFFERS_H

#include <stdatomic.h>
#include <stdint.h>

enum gbuf_kind { GBUF_SHM = 0, GBUF_CUDA = 1, GBUF_INLINE = 2 };

#define GBUF_XPROCS 16 /* device processes a buffer can be mapped in */

struct gbuf {
        atomic_int refs;
        uint64_t id;
        enum gbuf_kind kind;
        uint64_t bytes;
        void *host;          /* SHM/inline: the daemon's mapping */
        int device;          /* CUDA: index of the worker of its device */
        uint64_t dev_addr;   /* CUDA: the daemon's address of byte 0 */
        void *ipc_base;      /* CUDA: the backend's token for the open mapping */
        void *owner;         /* CUDA: the worker that opened it */
        uint64_t alloc_off;  /* CUDA: offset of byte 0 in its allocation */
        int dev_owned;       /* CUDA: allocated by the daemon, not a client's */
        uint32_t uid;        /* CUDA: the user whose worker share its release is charged to */
        /* CUDA: a release (BufferRelease) answered once the memory is
         * closed (devmem_release): the session (a reference) and request. */
        void *ack_session;
        uint64_t ack_rid;
        /* Called with the last reference, from any thread. */
        void (*release)(struct gbuf *b);
        /* Set (atomically, after unpin and unpin_ctx) by a GPU backend
         * that page-locked this host memory: the last reference then hands
         * the mapping to unpin(), which unlocks and unmaps it off the
         * caller's thread, instead of unmapping it here. pin_asked: a
         * backend has asked for the lock (atomic). */
        int pinned, pin_asked;
        void (*unpin)(void *ctx, void *host, uint64_t bytes);
        void *unpin_ctx;
        /* SHM, when gbuf_keep_fds: the memory's descriptor, kept so that
         * a device process (backend_proc.c) can map it, and map it again
         * after a restart; else -1. xgen[i]: the generation of device
         * process i that mapped it (0: none), xref[i] its handle there;
         * written by that process's worker thread only. */
        int fd;
        uint32_t xgen[GBUF_XPROCS];
        uint64_t xref[GBUF_XPROCS];
        /* The counts of mappings this buffer is one of (its user's and the
         * daemon's, users.h), given back by its last reference: a buffer
         * released while ops still use it stays mapped, and counted. */
        atomic_uint *counted[2];
};

/* Set before the first buffer when device processes serve: shared memory
 * then keeps its descriptor, and gbuf_forget (backend_proc.c) hears of
 * every such buffer's last reference, before it is unmapped. */
extern int gbuf_keep_fds;
extern void (*gbuf_forget)(struct gbuf *b);

/* Maps `bytes` of `fd` read-write and shared, if nothing the client can
 * do later makes the mapping unreadable (a read past a file's end is a
 * SIGBUS in the daemon): fd must be a memfd on shared memory (not
 * hugetlbfs) sealed against shrinking (F_SEAL_SHRINK) and at least
 * `bytes` long, and not sealed against writes; then seals it against
 * further seals (F_SEAL_SEAL), so that what mapped it once maps it again
 * (a device process, after a restart). Returns 0 and the mapping
 * in *out, or a negative code: GEMMD_EINVAL when fd is not such a memfd,
 * GEMMD_EBOUNDS when it is shorter, GEMMD_ERESOURCE when the daemon has
 * no mapping left, or another -errno. */
int gbuf_map_sealed(int fd, uint64_t bytes, void **out);
/* The same for bytes [off, off + bytes) of fd (off a multiple of the page
 * size); the file must be at least off + bytes long. */
int gbuf_map_sealed_at(int fd, uint64_t off, uint64_t bytes, void **out);

/* Maps `bytes` of the memfd `fd` (which the caller keeps ownership of) as
 * gbuf_map_sealed does. Returns 0 and a buffer with one reference, or
 * gbuf_map_sealed's codes (GEMMD_EINVAL also for bytes == 0), or
 * GEMMD_ERESOURCE when no descriptor is left to keep (gbuf_keep_fds). */
int gbuf_new_shm(int fd, uint64_t bytes, struct gbuf **out);

/* The same, for bytes [off, off + bytes) of fd (off a multiple of the
 * page size), without keeping a descriptor (device processes never map
 * it): a session's completion words (daemon/ring.c). */
int gbuf_new_shm_at(int fd, uint64_t off, uint64_t bytes, struct gbuf **out);

/* A malloc'd buffer for inline operands, `bytes` long: a copy of `init`,
 * or zeroed when init is NULL. Header and bytes are one allocation. */
int gbuf_new_inline(uint64_t bytes, const void *init, struct gbuf **out);

/* The address of byte 0 where the buffer is: the device address of CUDA
 * memory, the daemon's mapping of anything else. */
static inline uint64_t gbuf_addr(const struct gbuf *b)
{
        return b->kind == GBUF_CUDA ? b->dev_addr : (uint64_t)(uintptr_t)b->host;
}

void gbuf_ref(struct gbuf *b);
void gbuf_unref(struct gbuf *b); /* accepts NULL */

/* A session's buffers, sorted by id (ids only grow), searched by bisection. */
struct gbuf_table {
        struct gbuf **v;
        uint32_t n, cap;
        uint64_t next_id;
        uint64_t bytes; /* registered bytes in all */
};

void gbuf_table_init(struct gbuf_table *t);
/* Drops the table's reference to every buffer. */
void gbuf_table_deinit(struct gbuf_table *t);
/* Adds b (taking over the caller's reference) and assigns its id. */
int gbuf_table_add(struct gbuf_table *t, struct gbuf *b);
/* Returns the buffer (no new reference) or NULL. */
struct gbuf *gbuf_table_find(const struct gbuf_table *t, uint64_t id);
/* Removes id and drops the table's reference; GEMMD_ENOBUF if unknown. */
int gbuf_table_remove(struct gbuf_table *t, uint64_t id);

#endif

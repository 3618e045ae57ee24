/*
 * buffers.c - registered memory and the per-session buffer table.
 */
#include "daemon/buffers.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include "gemmd.h"

int gbuf_keep_fds;
void (*gbuf_forget)(struct gbuf *b);

static void release_shm(struct gbuf *b)
{
        if (b->fd >= 0) {
                if (gbuf_forget)
                        gbuf_forget(b);
                close(b->fd);
        }
        if (__atomic_load_n(&b->pinned, __ATOMIC_ACQUIRE) && b->unpin)
                b->unpin(b->unpin_ctx, b->host, b->bytes);
        else
                munmap(b->host, b->bytes);
}

int gbuf_map_sealed(int fd, uint64_t bytes, void **out)
{
        return gbuf_map_sealed_at(fd, 0, bytes, out);
}

int gbuf_map_sealed_at(int fd, uint64_t off, uint64_t bytes, void **out)
{
        struct statfs fs;
        struct stat st;
        int seals;
        void *p;

        /* The seal first: once F_SEAL_SHRINK is on, the size read next can
         * only grow. Read the other way round, a client could truncate and
         * seal between the two and have the daemon map a file that is
         * already shorter than the mapping. */
        seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0 || !(seals & F_SEAL_SHRINK))
                return GEMMD_EINVAL;
        if (fstat(fd, &st) < 0 || fstatfs(fd, &fs) < 0)
                return -errno;
        /* Shared memory (tmpfs) only: a hugetlbfs memfd can be sealed too,
         * but a page of it punched out under the mapping may find no huge
         * page to come back in, and that fault is a SIGBUS. A hole punched
         * in tmpfs reads as zeros. */
        if (!S_ISREG(st.st_mode) || fs.f_type != TMPFS_MAGIC)
                return GEMMD_EINVAL;
        if ((uint64_t)st.st_size < bytes || (uint64_t)st.st_size - bytes < off)
                return GEMMD_EBOUNDS;
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
        if (p == MAP_FAILED) {
                /* A write seal (the daemon writes C there), or the process
                 * out of mappings: the client's fault, or the daemon's. */
                if (errno == EPERM || errno == EACCES)
                        return GEMMD_EINVAL;
                return errno == ENOMEM ? GEMMD_ERESOURCE : -errno;
        }
        /* No seal may follow: a write seal added later would keep a device
         * process, which maps the file only when a group first needs it,
         * from mapping it at all (the daemon's own mapping predates it). */
        if (!(seals & F_SEAL_SEAL) && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0) {
                munmap(p, bytes);
                return GEMMD_EINVAL;
        }
        *out = p;
        return 0;
}

/* gbuf_new_shm and gbuf_new_shm_at: bytes [off, off + bytes) of fd, and
 * the descriptor kept when keep_fd (and gbuf_keep_fds) says so. */
static int new_shm(int fd, uint64_t off, uint64_t bytes, int keep_fd, struct gbuf **out)
{
        struct gbuf *b;
        void *p;
        int rc;

        if (bytes == 0 || off % (uint64_t)sysconf(_SC_PAGESIZE))
                return GEMMD_EINVAL;
        rc = gbuf_map_sealed_at(fd, off, bytes, &p);
        if (rc)
                return rc;
        b = calloc(1, sizeof(*b));
        if (!b) {
                munmap(p, bytes);
                return -ENOMEM;
        }
        b->fd = -1;
        if (keep_fd && gbuf_keep_fds && (b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                /* Out of descriptors is the daemon's state, not the client's
                 * mistake (main.c: sessions and descriptors). */
                int rc = errno == EMFILE || errno == ENFILE ? GEMMD_ERESOURCE : -errno;

                munmap(p, bytes);
                free(b);
                return rc;
        }
        atomic_init(&b->refs, 1);
        b->kind = GBUF_SHM;
        b->bytes = bytes;
        b->host = p;
        b->release = release_shm;
        *out = b;
        return 0;
}

int gbuf_new_shm(int fd, uint64_t bytes, struct gbuf **out)
{
        return new_shm(fd, 0, bytes, 1, out);
}

int gbuf_new_shm_at(int fd, uint64_t off, uint64_t bytes, struct gbuf **out)
{
        return new_shm(fd, off, bytes, 0, out);
}

int gbuf_new_inline(uint64_t bytes, const void *init, struct gbuf **out)
{
        /* One allocation: the bytes follow the header and end where the
         * allocation does, so a read past them is caught by checkers. */
        size_t head = (sizeof(struct gbuf) + _Alignof(max_align_t) - 1) &
                      ~(_Alignof(max_align_t) - 1);
        struct gbuf *b;

        if (bytes > SIZE_MAX - head)
                return -ENOMEM;
        /* Without init the bytes must read as zeros (an output C's padding
         * goes back to the client): calloc takes large ones from fresh
         * pages instead of clearing them. */
        b = init ? malloc(head + bytes) : calloc(1, head + bytes);
        if (!b)
                return -ENOMEM;
        if (init) {
                memset(b, 0, sizeof(*b));
                memcpy((char *)b + head, init, bytes);
        }
        b->host = (char *)b + head;
        b->fd = -1;
        atomic_init(&b->refs, 1);
        b->kind = GBUF_INLINE;
        b->bytes = bytes;
        *out = b;
        return 0;
}

void gbuf_ref(struct gbuf *b)
{
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void gbuf_unref(struct gbuf *b)
{
        if (!b)
                return;
        if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
                return;
        if (b->release)
                b->release(b);
        for (int i = 0; i < 2; i++)
                if (b->counted[i])
                        atomic_fetch_sub_explicit(b->counted[i], 1, memory_order_relaxed);
        free(b);
}

void gbuf_table_init(struct gbuf_table *t)
{
        memset(t, 0, sizeof(*t));
        t->next_id = 1;
}

void gbuf_table_deinit(struct gbuf_table *t)
{
        for (uint32_t i = 0; i < t->n; i++)
                gbuf_unref(t->v[i]);
        free(t->v);
        memset(t, 0, sizeof(*t));
}

int gbuf_table_add(struct gbuf_table *t, struct gbuf *b)
{
        if (t->n == t->cap) {
                uint32_t cap = t->cap ? t->cap * 2 : 16;
                struct gbuf **v = realloc(t->v, cap * sizeof(*v));

                if (!v)
                        return -ENOMEM;
                t->v = v;
                t->cap = cap;
        }
        b->id = t->next_id++;
        t->v[t->n++] = b;
        t->bytes += b->bytes;
        return 0;
}

static int64_t find_index(const struct gbuf_table *t, uint64_t id)
{
        uint32_t lo = 0, hi = t->n;

        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;

                if (t->v[mid]->id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < t->n && t->v[lo]->id == id ? (int64_t)lo : -1;
}

struct gbuf *gbuf_table_find(const struct gbuf_table *t, uint64_t id)
{
        int64_t i = find_index(t, id);

        return i < 0 ? NULL : t->v[i];
}

int gbuf_table_remove(struct gbuf_table *t, uint64_t id)
{
        int64_t i = find_index(t, id);
        struct gbuf *b;

        if (i < 0)
                return GEMMD_ENOBUF;
        b = t->v[i];
        memmove(&t->v[i], &t->v[i + 1], (t->n - (uint32_t)i - 1) * sizeof(*t->v));
        t->n--;
        t->bytes -= b->bytes;
        gbuf_unref(b);
        return 0;
}

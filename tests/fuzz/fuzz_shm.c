/*
 * fuzz_shm.c - libFuzzer target: the mapping of a client's memfd, as a
 * buffer registration (gbuf_new_shm) and as a ring attach (ring.c's
 * map_ring, which is gbuf_map_sealed of RING_BYTES, and its completion
 * words, gbuf_new_shm_at past them), while a second
 * thread plays the client: it truncates, punches, grows and seals the
 * same file in an order and with timings taken from the input. Whatever
 * the race, a mapping the daemon accepts must stay readable and writable
 * to its end: every page of it is touched after the client is done (a
 * page past the file's end would be a SIGBUS here, as in the daemon), and
 * the file must still be sealed against shrinking and long enough.
 *
 * Input: a flags byte (bit 0: the ring path; bit 1: the memfd allows
 * sealing; bits 2-5: seals put on before the map: shrink, grow, write,
 * future write), the file's size and the size asked for (3 bytes each,
 * below 1 MiB), then the client's script, two bytes a step: an action
 * (truncate, punch, grow, seal shrink, seal grow and future write, seal
 * write, spin) and its argument.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gemmd.h"
#include "proto/ring.h"
#include "tests/fuzz/fuzz_common.h"

#define PAGE 4096u
#define MAX_STEPS 32

struct client {
        int fd;
        const uint8_t *script;
        size_t steps;
        atomic_int go;
};

static uint64_t rd(const uint8_t **p, size_t *n, int bytes)
{
        uint64_t v = 0;

        for (int i = 0; i < bytes && *n; i++, (*p)++, (*n)--)
                v |= (uint64_t)**p << (8 * i);
        return v;
}

/* One step of the client's script on its file. Errors are the point of
 * some steps (a shrink of a sealed file fails) and are ignored. */
static void step(int fd, uint8_t action, uint8_t arg)
{
        volatile unsigned sink = 0;

        switch (action % 7) {
        case 0:
                (void)!ftruncate(fd, (off_t)arg * PAGE);
                break;
        case 1:
                (void)!fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)arg * PAGE,
                                 (off_t)(arg + 1) * PAGE);
                break;
        case 2:
                (void)!ftruncate(fd, (off_t)(arg + 256) * PAGE);
                break;
        case 3:
                (void)!fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
                break;
        case 4:
                (void)!fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_FUTURE_WRITE);
                break;
        case 5:
                (void)!fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE);
                break;
        default:
                for (unsigned i = 0; i < (unsigned)arg * 64; i++)
                        sink += i;
                break;
        }
}

/* The client: waits for the map to start, then runs its script. */
static void *client_main(void *arg)
{
        struct client *c = arg;

        while (!atomic_load_explicit(&c->go, memory_order_acquire))
                ;
        for (size_t i = 0; i < c->steps; i++)
                step(c->fd, c->script[2 * i], c->script[2 * i + 1]);
        return NULL;
}

/* Aborts unless a mapping of `bytes` of fd can never be cut short: fd is
 * sealed against shrinking and at least that long. */
static void check_sealed(int fd, uint64_t bytes)
{
        struct stat st;
        int seals = fcntl(fd, F_GET_SEALS);

        if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 ||
            (uint64_t)st.st_size < bytes) {
                fprintf(stderr, "fuzz_shm: a mapping of %llu bytes was accepted on a file of %lld "
                                "bytes, seals %#x\n",
                        (unsigned long long)bytes, (long long)st.st_size, seals);
                abort();
        }
}

/* Reads and writes one byte of every page of the mapping. */
static void touch(volatile uint8_t *p, uint64_t bytes)
{
        for (uint64_t off = 0; off < bytes; off += PAGE)
                p[off] = (uint8_t)(p[off] + 1);
        if (bytes)
                p[bytes - 1] = p[bytes - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const uint8_t *p = data;
        size_t n = size;
        uint8_t flags = (uint8_t)rd(&p, &n, 1);
        uint64_t file = rd(&p, &n, 3) % (1u << 20), want = rd(&p, &n, 3) % (1u << 20);
        int ring = flags & 1, seals = 0, rc;
        struct client c = {.script = p, .steps = n / 2 > MAX_STEPS ? MAX_STEPS : n / 2};
        struct gbuf *b = NULL;
        void *map = NULL;
        pthread_t t;

        c.fd = memfd_create("fuzz-shm", MFD_CLOEXEC | ((flags & 2) ? MFD_ALLOW_SEALING : 0));
        if (c.fd < 0)
                return 0;
        if (ring)
                want = RING_BYTES;
        struct gbuf *words = NULL;
        if (ftruncate(c.fd, (off_t)file) < 0)
                goto out;
        seals |= (flags & 4) ? F_SEAL_SHRINK : 0;
        seals |= (flags & 8) ? F_SEAL_GROW : 0;
        seals |= (flags & 16) ? F_SEAL_WRITE : 0;
        seals |= (flags & 32) ? F_SEAL_FUTURE_WRITE : 0;
        if (seals)
                (void)!fcntl(c.fd, F_ADD_SEALS, seals);
        if (pthread_create(&t, NULL, client_main, &c) != 0)
                goto out;
        atomic_store_explicit(&c.go, 1, memory_order_release);
        if (ring) {
                rc = gbuf_map_sealed(c.fd, want, &map);
                if (!rc && gbuf_new_shm_at(c.fd, RING_WORDS_OFF, RING_WORDS * sizeof(uint64_t), &words))
                        words = NULL;
        } else {
                rc = gbuf_new_shm(c.fd, want, &b);
                map = rc ? NULL : b->host;
        }
        /* Touched while the client may still change the file, and again
         * once it is done. */
        if (!rc)
                touch(map, want);
        if (words)
                touch(words->host, words->bytes);
        pthread_join(t, NULL);
        if (!rc) {
                check_sealed(c.fd, want);
                touch(map, want);
        }
        if (words) {
                check_sealed(c.fd, RING_WORDS_OFF + words->bytes);
                touch(words->host, words->bytes);
                gbuf_unref(words);
        }
        if (b)
                gbuf_unref(b);
        else if (map)
                munmap(map, want);
out:
        close(c.fd);
        return 0;
}

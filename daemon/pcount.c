/*
 * pcount.c - per-thread counter blocks (pcount.h).
 */
#include "daemon/pcount.h"

#include <stdlib.h>
#include <string.h>

/* The calling thread's token: its address is unique among live threads. */
static __thread char token;
__thread struct pc_last pc_last;

const void *pc_thread_token(void)
{
        return &token;
}
static atomic_uint_fast64_t next_gen = 1;

int pcounts_init(struct pcounts *p)
{
        memset(p, 0, sizeof(*p));
        atomic_init(&p->head, NULL);
        p->gen = atomic_fetch_add(&next_gen, 1);
        return pthread_mutex_init(&p->lock, NULL) ? -1 : 0;
}

void pcounts_deinit(struct pcounts *p)
{
        struct pc_block *b = atomic_load(&p->head), *next;

        for (; b; b = next) {
                next = b->next;
                free(b);
        }
        atomic_store(&p->head, NULL);
        pthread_mutex_destroy(&p->lock);
}

/* The block of p whose owner is this thread, found or made under p's lock.
 * A thread that ended leaves its block to the next thread that takes its
 * token's address, which keeps one writer a block in practice; the adds
 * are atomic all the same. */
struct pc_block *pc_block_find(struct pcounts *p)
{
        struct pc_block *b;

        pthread_mutex_lock(&p->lock);
        for (b = atomic_load(&p->head); b; b = b->next)
                if (b->owner == &token)
                        break;
        if (!b && !posix_memalign((void **)&b, 64, sizeof(*b))) {
                memset(b, 0, sizeof(*b));
                b->owner = &token;
                b->next = atomic_load(&p->head);
                atomic_store(&p->head, b);
        }
        pthread_mutex_unlock(&p->lock);
        if (!b)
                return &p->spill; /* out of memory: shared, still counted */
        pc_last = (struct pc_last){p, p->gen, b};
        return b;
}

void pc_read_all(struct pcounts *p, uint64_t *out)
{
        for (int c = 0; c < PC_N; c++)
                out[c] = atomic_load_explicit(&p->spill.v[c], memory_order_relaxed);
        for (struct pc_block *b = atomic_load(&p->head); b; b = b->next)
                for (int c = 0; c < PC_N; c++)
                        out[c] += atomic_load_explicit(&b->v[c], memory_order_relaxed);
}

uint64_t pc_read(struct pcounts *p, enum pc_counter c)
{
        uint64_t all[PC_N];

        pc_read_all(p, all);
        return all[c];
}

/*
 * pcount.h - counters that many threads add to and few read.
 *
 * Each thread adds to a block of its own and a reader sums the blocks.
 * One shared counter that every loop, worker and completion thread adds
 * to once an op moves its cache line from core to core on each add, and
 * the more threads count, the longer each add waits for the line: with
 * two GPUs' threads it held the loops, which bounded the daemon
 * (docs/performance.md, "What the host's threads cost"). A block is the
 * thread's alone, so an add stays in that core's cache.
 *
 * Blocks belong to one `struct pcounts` (the server's) and live until it
 * is freed: the daemon's counting threads live as long as it does. A
 * reader's sum is as of some moment during the read, as with one atomic
 * counter read while others add.
 */
#ifndef GEMMD_PCOUNT_H
#define GEMMD_PCOUNT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* What the server counts this way (struct server, stats.c, metrics.c). */
enum pc_counter {
        PC_REQUESTS,        /* submits admitted */
        PC_REPLIES,         /* Completions packed after device work */
        PC_REPLIES_NOW,     /* of those, written by the completing thread */
        PC_REPLIES_RING,    /* put in rings by the completing thread */
        PC_REPLIES_WORD,    /* answered by a completion word */
        PC_REPLY_WAIT_NS,   /* summed time from an op done to its reply packed */
        PC_SUBMITS_RING,    /* Submits taken from rings */
        PC_NO_POLL_REPLIES, /* answers that asked their client to sleep */
        PC_QUEUE_SUM_NS,    /* of answered ops that ran: their queue times */
        PC_RUN_SUM_NS,      /* and their groups' run times, each group once */
        PC_N
};

/* One thread's counts, alone on its cache lines. */
struct pc_block {
        _Alignas(64) atomic_uint_fast64_t v[PC_N];
        const void *owner; /* the thread's token (pcount.c) */
        struct pc_block *next;
};

struct pcounts {
        pthread_mutex_t lock; /* adding a block */
        uint64_t gen;         /* unique to this init: a thread's cached block is of this one */
        _Atomic(struct pc_block *) head;
        struct pc_block spill; /* for threads whose block could not be allocated */
};

int pcounts_init(struct pcounts *p);
void pcounts_deinit(struct pcounts *p);

/* The calling thread's block found last (pcount.c): most adds go to one
 * server's counts, so the add itself finds it without a call. */
struct pc_last {
        struct pcounts *p;
        uint64_t gen;
        struct pc_block *b;
};
extern __thread struct pc_last pc_last;

/* What tells the calling thread from every other live one (the address
 * of a thread-local): the owner of its blocks here, and of its own slots
 * of other per-thread counts (metrics.c). */
const void *pc_thread_token(void);

/* The calling thread's block of p, found or made under p's lock. */
struct pc_block *pc_block_find(struct pcounts *p);

/* Adds v to counter c, in the calling thread's block. Any thread. */
static inline void pc_add(struct pcounts *p, enum pc_counter c, uint64_t v)
{
        struct pc_block *b = pc_last.p == p && pc_last.gen == p->gen ? pc_last.b : pc_block_find(p);

        atomic_fetch_add_explicit(&b->v[c], v, memory_order_relaxed);
}

/* Counter c summed over every thread's block. Any thread. */
uint64_t pc_read(struct pcounts *p, enum pc_counter c);

/* Every counter summed (out[PC_N]), in one walk of the blocks. */
void pc_read_all(struct pcounts *p, uint64_t *out);

#endif

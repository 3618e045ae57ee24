/*
 * test_pcount: per-thread counter blocks (daemon/pcount.h). Many threads
 * add at once and the reader's sum is exact; each thread adds to a block
 * of its own; a set of counters made where a freed one was starts from
 * zero for a thread that counted in the old one; one walk reads them all.
 */
#include <criterion/criterion.h>
#include <pthread.h>

#include "daemon/pcount.h"

#define THREADS 8
#define ADDS 200000

static struct pcounts counts;
static pthread_barrier_t all_alive;

/* Adds 1 to PC_REQUESTS and its index to PC_REPLY_WAIT_NS, ADDS times. */
static void *adder(void *arg)
{
        const uint64_t k = (uint64_t)(uintptr_t)arg;

        for (int i = 0; i < ADDS; i++) {
                pc_add(&counts, PC_REQUESTS, 1);
                pc_add(&counts, PC_REPLY_WAIT_NS, k);
        }
        /* Every thread is alive until all have counted: their tokens differ. */
        pthread_barrier_wait(&all_alive);
        return pc_block_find(&counts);
}

Test(pcount, concurrent_adds_sum_exactly_and_each_thread_has_its_block)
{
        pthread_t t[THREADS];
        void *blocks[THREADS];
        uint64_t want_wait = 0;

        cr_assert_eq(pcounts_init(&counts), 0);
        cr_assert_eq(pthread_barrier_init(&all_alive, NULL, THREADS), 0);
        for (uintptr_t i = 0; i < THREADS; i++)
                cr_assert_eq(pthread_create(&t[i], NULL, adder, (void *)(i + 1)), 0);
        for (int i = 0; i < THREADS; i++) {
                cr_assert_eq(pthread_join(t[i], &blocks[i]), 0);
                want_wait += (uint64_t)(i + 1) * ADDS;
        }
        cr_assert_eq(pc_read(&counts, PC_REQUESTS), (uint64_t)THREADS * ADDS);
        cr_assert_eq(pc_read(&counts, PC_REPLY_WAIT_NS), want_wait);
        cr_assert_eq(pc_read(&counts, PC_REPLIES), 0);
        /* Threads alive at once have blocks of their own, each on its own
         * cache lines. */
        for (int i = 0; i < THREADS; i++) {
                cr_assert_not_null(blocks[i]);
                cr_assert_eq((uintptr_t)blocks[i] % 64, 0, "a block starts a cache line");
                for (int j = 0; j < i; j++)
                        cr_assert_neq(blocks[i], blocks[j], "threads %d and %d share a block", i, j);
        }
        pthread_barrier_destroy(&all_alive);
        pcounts_deinit(&counts);
}

Test(pcount, the_calling_thread_counts_in_one_block_and_a_new_set_starts_at_zero)
{
        struct pc_block *b;

        cr_assert_eq(pcounts_init(&counts), 0);
        pc_add(&counts, PC_SUBMITS_RING, 5);
        b = pc_block_find(&counts);
        pc_add(&counts, PC_SUBMITS_RING, 2);
        cr_assert_eq(pc_block_find(&counts), b);
        cr_assert_eq(pc_last.b, b, "an add finds the thread's block without a call");
        cr_assert_eq(pc_read(&counts, PC_SUBMITS_RING), 7);
        pc_add(&counts, PC_RUN_SUM_NS, 11);
        {
                uint64_t all[PC_N];

                pc_read_all(&counts, all);
                for (int c = 0; c < PC_N; c++)
                        cr_assert_eq(all[c], pc_read(&counts, (enum pc_counter)c), "counter %d", c);
                cr_assert_eq(all[PC_SUBMITS_RING], 7);
                cr_assert_eq(all[PC_RUN_SUM_NS], 11);
        }
        pcounts_deinit(&counts);
        /* Same address, new set: this thread's cached block is not reused. */
        cr_assert_eq(pcounts_init(&counts), 0);
        cr_assert_eq(pc_read(&counts, PC_SUBMITS_RING), 0);
        pc_add(&counts, PC_SUBMITS_RING, 3);
        cr_assert_eq(pc_read(&counts, PC_SUBMITS_RING), 3);
        pcounts_deinit(&counts);
}

/*
 * lock.h - the mutexes that threads hand work through.
 *
 * The event loops, the workers and the completion threads pass requests
 * and groups to each other under mutexes that each holds for a few
 * microseconds, hundreds of thousands of times a second. A plain mutex
 * puts a waiter to sleep at once, and a futex sleep and wake-up cost more
 * than the wait: lock_init makes a glibc adaptive mutex, whose waiter
 * spins a little first, which serves many clients measurably faster
 * (docs/performance.md).
 */
#ifndef GEMMD_LOCK_H
#define GEMMD_LOCK_H

#include <pthread.h>

static inline void lock_init(pthread_mutex_t *m)
{
        pthread_mutexattr_t a;

        pthread_mutexattr_init(&a);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
        pthread_mutex_init(m, &a);
        pthread_mutexattr_destroy(&a);
}

#endif /* GEMMD_LOCK_H */

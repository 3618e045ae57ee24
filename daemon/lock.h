/*
 * lock.h - the mutexes that threads hand work through.
 *
 * The workers and the completion threads pass groups and finished
 * requests to each other and to the event loops under mutexes that each
 * holds for a few microseconds, hundreds of thousands of times a second
 * (the loops hand ops to a worker without one: worker_enqueue). A plain mutex
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

/*
 * cuda_completion.c - the CUDA backend's completion thread
 * (cuda_backend.h): it watches the launched groups' streams (and the
 * resident kernel's groups), hands back each op whose C is whole before
 * its group ends (early completion), copies bounced results out and
 * hands finished groups back to the worker; and a group's device time
 * read back from its events (collect).
 */
#include <time.h>

#include "daemon/cpuacct.h"
#include "daemon/cuda_backend.h"
#include "gemmd.h"

/* How long the completion thread polls before it blocks. */
#define DONE_SPIN_NS 200000ull

/* Copies the bounced Cs of a finished group from the pinned buffer to
 * where their requests want them. */
static void unbounce(struct cuda_slot *s)
{
        const struct group *g = s->g;
        const size_t esz = gemmd_dtype_size((enum gemmd_dtype)(g->key & 3));

        if (s->out_hi == s->out_lo)
                return;
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];
                uint64_t rows, cols;

                if (!(s->bounce[i] & 4))
                        continue;
                operand_dims(o, 2, &rows, &cols);
                copy_cols((char *)o->buf[2]->host + o->off[2], bounced(s, s->stage_off[i * 3 + 2]),
                          o->kp.ldc * esz, rows * esz, cols);
        }
}

/* Hands a finished group back to its worker. */
static void finish(struct cuda_backend *cb, struct cuda_slot *s, cudaError_t st)
{
        if (st != cudaSuccess && s->early)
                s->early_reset = 1;
        s->early = 0;
        if (st != cudaSuccess) {
                log_err("cuda %d: group %llu failed: %s", cb->ordinal, (unsigned long long)s->g->id,
                        cudaGetErrorString(st));
                cudaGetLastError();
        } else {
                unbounce(s);
        }
        worker_group_done(s->g, st == cudaSuccess ? 0 : GEMMD_EDEVICE);
}

/* Hands back each op of s's group whose C its kernel has said is whole
 * (cuda_group.early_*), before the group ends: a request of a small
 * problem in a large group is answered when its own tiles are done. */
static void early_scan(struct cuda_slot *s)
{
        uint32_t idx[64], n = 0;

        for (uint32_t i = 0; i < s->g->nops && s->early_left; i++) {
                if (s->early_done[i] ||
                    __atomic_load_n(&s->h_early_flag[i], __ATOMIC_ACQUIRE) != s->early_seq)
                        continue;
                s->early_done[i] = 1;
                s->early_left--;
                idx[n++] = i;
                if (n == 64) {
                        worker_ops_done(s->g, idx, n);
                        n = 0;
                }
        }
        if (n)
                worker_ops_done(s->g, idx, n); /* under one lock, handed back together */
}

/*
 * The completion thread. It polls the streams of every group in flight,
 * not only the oldest: groups run on streams of their own, and a small one
 * launched after a large one finishes first, so its requests are answered
 * without waiting for the large one. When none has finished for
 * DONE_SPIN_NS, it blocks on the oldest.
 */
void *done_main(void *arg)
{
        struct cuda_backend *cb = arg;
        struct cuda_slot *watched = NULL, **wtail = &watched; /* in launch order */
        uint64_t active = 0, since = 0;

        cpuacct_thread_start(CPU_COMPLETION);
        cudaSetDevice(cb->ordinal);
        for (;;) {
                struct cuda_slot **pp;
                int finished = 0;

                if (!watched || __atomic_load_n(&cb->done_head, __ATOMIC_ACQUIRE)) {
                        pthread_mutex_lock(&cb->done_lock);
                        while (!watched && !cb->done_head && !cb->done_stop) {
                                if (cb->spin_ns && now_ns() - active < cb->spin_ns) {
                                        /* watch() stores done_head atomically. */
                                        pthread_mutex_unlock(&cb->done_lock);
                                        while (!__atomic_load_n(&cb->done_head, __ATOMIC_ACQUIRE) &&
                                               now_ns() - active < cb->spin_ns)
                                                cpu_relax();
                                        pthread_mutex_lock(&cb->done_lock);
                                        continue;
                                }
                                if (__atomic_load_n(&cb->res_alive, __ATOMIC_ACQUIRE)) {
                                        /* The resident kernel outlives the last
                                         * group by RES_IDLE_NS, then stops. */
                                        const uint64_t until = active + RES_IDLE_NS;
                                        struct timespec ts;

                                        if (now_ns() < until) {
                                                clock_gettime(CLOCK_REALTIME, &ts);
                                                ts.tv_nsec += (long)(until - now_ns());
                                                ts.tv_sec += ts.tv_nsec / 1000000000L;
                                                ts.tv_nsec %= 1000000000L;
                                                pthread_cond_timedwait(&cb->done_cond, &cb->done_lock, &ts);
                                                continue;
                                        }
                                        pthread_mutex_unlock(&cb->done_lock);
                                        res_stop(cb);
                                        pthread_mutex_lock(&cb->done_lock);
                                        continue;
                                }
                                pthread_cond_wait(&cb->done_cond, &cb->done_lock);
                        }
                        if (cb->done_head) {
                                if (!watched)
                                        since = now_ns();
                                *wtail = cb->done_head;
                                wtail = &cb->done_tail->done_next;
                                cb->done_head = cb->done_tail = NULL;
                        }
                        pthread_mutex_unlock(&cb->done_lock);
                        if (!watched)
                                break; /* stopping, nothing in flight */
                }
                for (pp = &watched; *pp;) {
                        struct cuda_slot *s = *pp;
                        cudaError_t st = s->res ? res_query(cb, s) : cudaStreamQuery(s->stream);

                        if (st == cudaErrorNotReady) {
                                if (s->early && s->early_left)
                                        early_scan(s);
                                pp = &s->done_next;
                                continue;
                        }
                        *pp = s->done_next;
                        if (!*pp)
                                wtail = pp;
                        finish(cb, s, st);
                        finished = 1;
                }
                if (finished) {
                        active = since = now_ns();
                } else if (now_ns() - since >= DONE_SPIN_NS) {
                        /* A long group: sleep until the oldest is done (a
                         * resident one, or one with ops still to be answered
                         * early, by short naps). */
                        if (watched->res || (watched->early && watched->early_left)) {
                                struct timespec nap = {0, 20000};

                                nanosleep(&nap, NULL);
                        } else {
                                cudaStreamSynchronize(watched->stream);
                                since = now_ns();
                        }
                }
        }
        return NULL;
}

void watch(struct cuda_backend *cb, struct cuda_slot *s)
{
        s->done_next = NULL;
        pthread_mutex_lock(&cb->done_lock);
        if (cb->done_tail)
                cb->done_tail->done_next = s;
        else
                __atomic_store_n(&cb->done_head, s, __ATOMIC_RELEASE);
        cb->done_tail = s;
        pthread_cond_signal(&cb->done_cond);
        pthread_mutex_unlock(&cb->done_lock);
}

void collect(struct backend *be, struct group *g, uint64_t *device_ns, uint64_t *gap_ns)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct cuda_slot *s = g->bdata;
        unsigned ring = (unsigned)(s->seq % EVENT_RING);
        unsigned prev = (ring + EVENT_RING - 1) % EVENT_RING;
        float ms;

        *device_ns = 0;
        if (s->res) {
                /* The device clock, from hand-over to done; no gap. */
                *device_ns = s->rt1 > s->rt0 ? s->rt1 - s->rt0 : 0;
                return;
        }
        if (cudaEventElapsedTime(&ms, cb->ev_start[ring], cb->ev_end[ring]) == cudaSuccess)
                *device_ns = (uint64_t)(ms * 1e6);
        /* Not measured when launch j - 1 was not timed, or has not finished
         * yet (groups on different streams finish in any order). */
        if (s->seq > 0 && cb->timed[prev] &&
            cudaEventElapsedTime(&ms, cb->ev_end[prev], cb->ev_start[ring]) == cudaSuccess)
                *gap_ns = ms > 0 ? (uint64_t)(ms * 1e6) : 0;
        cudaGetLastError();
}

/*
 * worker.c - the per-device thread: continuous batching, plans, launches.
 */
#include "daemon/worker.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/cpuacct.h"
#include "daemon/lock.h"
#include "daemon/log.h"
#include "gemmd.h"
#include "scheduler/cost.h"

/* A task on the worker thread longer than this is logged as it ends. */
#define WORKER_TASK_SLOW_NS 5000000ull

#ifdef GEMMD_WTRACE
/* Adds ns to step i's sum (each step's writer is one thread). */
static void wt_add(struct worker *w, int i, uint64_t ns)
{
        w->wt_ns[i] += ns;
        w->wt_n[i]++;
}

/* Adds the worker thread's time since its last mark to step i. */
static void wt(struct worker *w, int i)
{
        uint64_t n = now_ns();

        wt_add(w, i, n - w->wt_last);
        w->wt_last = n;
}
#define WT(w, i) wt(w, i)
#else
#define WT(w, i) ((void)0)
#endif

/* Links a lane that just got work into its user's ring at priority p, and
 * the user into the worker's ring of users at p if it was not there. A user
 * that comes back after a pause starts at the worker's virtual clock: time
 * it did not ask for is not owed to it. */
static void lane_link(struct worker *w, int p, struct lane *l)
{
        struct ulane *u = l->u, *head;

        /* Before the head: the newcomer waits for one full turn. */
        if (!u->ring) {
                l->next = l->prev = l;
                u->ring = l;
        } else {
                l->next = u->ring;
                l->prev = u->ring->prev;
                u->ring->prev->next = l;
                u->ring->prev = l;
        }
        l->linked = 1;
        if (u->linked)
                return;
        head = w->ring[p];
        if (!head) {
                u->next = u->prev = u;
                w->ring[p] = u;
        } else {
                u->next = head;
                u->prev = head->prev;
                head->prev->next = u;
                head->prev = u;
        }
        u->linked = 1;
        if (u->sh->active++ == 0 && u->sh->vtime < w->vclock)
                u->sh->vtime = w->vclock;
}

/* Unlinks an emptied lane, and its user when that was its last lane at p. */
static void lane_unlink(struct worker *w, int p, struct lane *l)
{
        struct ulane *u = l->u;

        if (l->next == l) {
                u->ring = NULL;
        } else {
                l->prev->next = l->next;
                l->next->prev = l->prev;
                if (u->ring == l)
                        u->ring = l->next;
        }
        l->next = l->prev = NULL;
        l->linked = 0;
        if (u->ring)
                return;
        if (u->next == u) {
                w->ring[p] = NULL;
        } else {
                u->prev->next = u->next;
                u->next->prev = u->prev;
                if (w->ring[p] == u)
                        w->ring[p] = u->next;
        }
        u->next = u->prev = NULL;
        u->linked = 0;
        u->sh->active--;
}

static struct op *lane_pop(struct lane *l)
{
        struct op *o = l->head;

        l->head = o->next;
        if (!l->head)
                l->tail = NULL;
        o->next = NULL;
        l->queued--;
        return o;
}

/* Takes the op after `prev` (the head when prev is NULL) out of l. */
static struct op *lane_take(struct lane *l, struct op *prev)
{
        if (!prev)
                return lane_pop(l);
        struct op *o = prev->next;

        prev->next = o->next;
        if (l->tail == o)
                l->tail = prev;
        o->next = NULL;
        l->queued--;
        return o;
}

/* How far into a session's queue a group looks for an op of its kernel
 * configuration: far enough for a client that interleaves types, short
 * enough to keep the walk cheap under the worker's lock (each pick may
 * walk this far into every lane that does not match: eight times the
 * cost of looking at the heads alone, at worst). */
#define LANE_LOOK 8

/* The first op of key `key` among the first LANE_LOOK of lane l, and in
 * *prev the op before it (NULL: the head); NULL when none. */
static struct op *lane_find(struct lane *l, uint32_t key, struct op **prev)
{
        struct op *before = NULL, *o = l->head;

        for (int i = 0; o && i < LANE_LOOK; i++, before = o, o = o->next)
                if (o->key == key) {
                        *prev = before;
                        return o;
                }
        return NULL;
}

static uint64_t op_tiles(struct worker *w, const struct op *o)
{
        struct sched_shape s = w->be->shape(w->be, o->key);

        return sched_tile_count(&o->sp, s);
}

/* An op's estimated device time, which is what users are given equal
 * shares of: its tiles at the plan's cost model (scheduler/cost.h), in
 * sixteenths of a unit. The model weighs the data types as the device
 * runs them; counting tile_k steps alone would undercharge an exact f32
 * op, whose steps are shorter in K but each costs several bf16 steps. */
static uint64_t op_cost(struct worker *w, const struct op *o)
{
        struct sched_shape s = w->be->shape(w->be, o->key);
        double tile = sched_cost_entry(sched_cost_get(), &o->sp, s, 0, sched_kchunks(o->kp.k), 0);

        return (uint64_t)((double)op_tiles(w, o) * tile * 16.0 + 0.5);
}

#define SHARE_HALFLIFE_NS 1e9

static void decay(double *usage, uint64_t *since, uint64_t now)
{
        if (now > *since && *usage > 0) {
                *usage *= exp2(-(double)(now - *since) / SHARE_HALFLIFE_NS);
                *since = now;
        }
}

static uint64_t op_flops(const struct op *o)
{
        const struct gemmd_kproblem *p = &o->kp;

        return 2ull * p->m * p->n * p->k;
}

/* The worker's allocations a fault-injection build can make fail. */
enum alloc_site { ALLOC_GROUP, ALLOC_PLAN };

#ifdef GEMMD_FAULT_INJECTION
/* In a fault-injection build, GEMMD_FAULT_ALLOC=group or =plan turns a
 * debug op (Op.debug_fault) into a failed allocation of the worker's
 * instead of a device fault: the room for the op in its group, or its
 * group's plan. That is what the worker meets when the node's memory or
 * memory mappings run out, without having to exhaust them. */
static int alloc_fault(const struct op *o, enum alloc_site site)
{
        static const char *names[] = {"group", "plan"};
        const char *env = getenv("GEMMD_FAULT_ALLOC");

        return o->debug_fault && env && !strcmp(env, names[site]);
}
#else
static inline int alloc_fault(const struct op *o, enum alloc_site site)
{
        return 0;
}
#endif

/* Whether an op of g is set to fail the allocation at `site`. */
static int group_alloc_fault(const struct group *g, enum alloc_site site)
{
        for (uint32_t i = 0; i < g->nops; i++)
                if (alloc_fault(g->ops[i], site))
                        return 1;
        return 0;
}

/* Requests whose last op finished under the worker's lock, in order: they
 * are handed back (hand_back) once the lock is released, so that answering
 * them never holds up the loop thread's enqueues. */
struct done_list {
        struct request *head, **tail;
};

#define DONE_LIST_INIT(l) {NULL, &(l).head}

/* Hands an op back to its request; a request whose last op this was goes
 * on `done`. The op must not be touched afterwards: once handed back, the
 * loop may free it. */
static void op_finish(struct op *o, struct done_list *done)
{
        struct request *r = o->req;

        if (atomic_fetch_sub_explicit(&r->remaining, 1, memory_order_acq_rel) == 1) {
                r->next = NULL;
                *done->tail = r;
                done->tail = &r->next;
        }
}

/* Passes the finished requests on. Called without the lock. */
static void hand_back(struct worker *w, struct done_list *done)
{
        if (done->head)
                w->complete(done->head, w->ctx);
}

/* Fails op o, already taken off its lane, with GEMMD_ERESOURCE: the worker
 * had no memory to put it in a group. Called with the lock held. */
static void refuse_op(struct worker *w, struct op *o, struct done_list *done)
{
        o->status = GEMMD_ERESOURCE;
        o->t_launch_ns = o->t_done_ns = now_ns();
        w->st.ops++;
        w->st.ops_failed++;
        op_finish(o, done);
}

/* Sets timed state s to `on` at time t; an interval that ends is added
 * to *sum. */
static void timed_set(struct timed_state *s, int on, uint64_t t, uint64_t *sum)
{
        if (on == s->on)
                return;
        if (on)
                s->since_ns = t;
        else
                *sum += t - s->since_ns;
        s->on = on;
}

/* The part of s's interval that has not ended by t (0 while it is off). */
static uint64_t timed_open(const struct timed_state *s, uint64_t t)
{
        return s->on ? t - s->since_ns : 0;
}

/* Times the worker thread's waits for work while the device has work
 * (worker_stats.worker_ns is the rest of that time), after w->idle or
 * w->loaded changed at t. Lock held. */
static void idle_sync(struct worker *w, uint64_t t)
{
        timed_set(&w->idle_loaded, w->idle && w->loaded.on, t, &w->idle_loaded_ns);
}

/* Notes when the device gains or loses work (ops queued or groups in
 * flight), for worker_stats.loaded_ns: the time it had work, of which
 * busy_ns is the part it was running some; and when ops wait with no
 * group slot free (worker_stats.capped_ns). A group being formed counts
 * as its ops did (they left the queue for a launch). Lock held. */
static void loaded_update(struct worker *w)
{
        const int loaded = w->pending_ops || w->inflight;
        const int capped = w->pending_ops && w->inflight >= w->max_inflight;

        if (atomic_load_explicit(&w->inflight_hint, memory_order_relaxed) != (w->inflight != 0))
                atomic_store_explicit(&w->inflight_hint, w->inflight != 0, memory_order_relaxed);
        if (loaded == w->loaded.on && capped == w->capped.on)
                return;
        const uint64_t t = now_ns();

        timed_set(&w->loaded, loaded, t, &w->st.loaded_ns);
        timed_set(&w->capped, capped, t, &w->st.capped_ns);
        idle_sync(w, t);
}

/* Called after any change the worker thread may have to act on (under
 * the lock, or after a push on the inbox): a spinning worker sees the
 * count move. */
static void nudge(struct worker *w)
{
        atomic_fetch_add_explicit(&w->nudges, 1, memory_order_release);
}

/* Under the lock: moves the batches on the inbox onto their lanes, oldest
 * first (each lane's ops keep their order: one loop thread pushes them),
 * and counts them as pending. */
static void inbox_drain(struct worker *w)
{
        struct op *b = atomic_exchange_explicit(&w->inbox, NULL, memory_order_acquire), *oldest = NULL;

        if (!b)
                return;
        while (b) {
                struct op *n = b->in_next;

                b->in_next = oldest;
                oldest = b;
                b = n;
        }
        for (b = oldest; b; b = b->in_next) {
                struct lane *l = b->in_lane;
                struct op *last = b;
                uint32_t n = 0;

                /* Walked before the lane's next batch is linked after it. */
                for (struct op *o = b; o; o = o->next) {
                        w->pending_tiles += op_tiles(w, o);
                        last = o;
                        n++;
                }
                if (l->tail)
                        l->tail->next = b;
                else
                        l->head = b;
                l->tail = last;
                l->queued += n;
                w->pending_ops += n;
                if (!l->linked)
                        lane_link(w, b->in_prio, l);
        }
        loaded_update(w);
}

void worker_cancel(struct worker *w, struct lane *lanes)
{
        struct done_list done = DONE_LIST_INIT(done);

        pthread_mutex_lock(&w->lock);
        inbox_drain(w); /* the session's last batches may still be there */
        for (int p = 0; p < NPRIO; p++) {
                struct lane *l = &lanes[p];

                if (l->linked)
                        lane_unlink(w, p, l);
                while (l->head) {
                        struct op *o = lane_pop(l);

                        w->pending_ops--;
                        w->pending_tiles -= op_tiles(w, o);
                        o->status = GEMMD_ECANCELED;
                        op_finish(o, &done);
                }
        }
        loaded_update(w);
        pthread_mutex_unlock(&w->lock);
        hand_back(w, &done);
}

static struct group *free_slot(struct worker *w)
{
        for (uint32_t i = 0; i < w->nslots; i++)
                if (!w->slots[i].busy)
                        return &w->slots[i];
        return NULL;
}

static int launch_next(struct worker *w, struct group *g);

/*
 * On a device with nothing in flight, the thread that hands over a batch
 * (a loop thread) launches its group itself, instead of waking the worker
 * thread to do it: the hop between them is on the path of every request
 * of a client with one in flight. Only where the backend's launch may run
 * on any thread, and never while the worker is busy (its lock taken,
 * groups in flight, a launch, a repair or a batch window): the worker's
 * fair share, priorities and caps form the group as they would on its
 * own thread. Returns 1 when nothing is left for the worker thread to do,
 * 0 when the caller must wake it as usual.
 */
static int launch_here(struct worker *w)
{
        struct group *g;
        int left;

        if (!w->loop_launch || atomic_load_explicit(&w->inflight_hint, memory_order_relaxed) ||
            pthread_mutex_trylock(&w->lock))
                return 0;
        inbox_drain(w);
        if (w->pending_ops && !w->inflight && !w->backend_busy && !w->recover_pending && !w->stopping &&
            !w->ctl_head && (g = free_slot(w)))
                w->st.loop_groups += launch_next(w, g);
        /* What only the worker does, or ops beyond the group: the lock is
         * held from the worker's last look to its wait, so a signal here
         * cannot be missed. */
        left = w->pending_ops || w->ctl_head || w->done || w->recover_pending ||
               atomic_load(&w->inbox) || w->stopping;
        if (left) {
                nudge(w);
                pthread_cond_signal(&w->cond);
        }
        pthread_mutex_unlock(&w->lock);
        return 1;
}

void worker_enqueue(struct worker *w, struct lane *l, int prio)
{
        struct op *first = l->st_head;

        if (!first)
                return;
        const uint64_t t = now_ns();

        for (struct op *o = first; o; o = o->next)
                o->t_enq_ns = t;
        first->in_lane = l;
        first->in_prio = prio;
        l->st_head = l->st_tail = NULL;
        l->staged = 0;
        struct op *old = atomic_load_explicit(&w->inbox, memory_order_relaxed);

        do
                first->in_next = old;
        while (!atomic_compare_exchange_weak_explicit(&w->inbox, &old, first, memory_order_seq_cst,
                                                      memory_order_relaxed));
        if (launch_here(w))
                return;
        nudge(w); /* a polling worker sees the count move */
        /* The worker sets sleeping and then looks at the inbox once more
         * (both sequentially consistent, as the push and this load are),
         * so either it sees the batch or this sees it sleeping. It holds
         * the lock until it waits, so the signal cannot come first. (The
         * loop thread is the one that stops workers, so the worker
         * outlives this call.) */
        if (atomic_load_explicit(&w->sleeping, memory_order_seq_cst)) {
                pthread_mutex_lock(&w->lock);
                pthread_cond_signal(&w->cond);
                pthread_mutex_unlock(&w->lock);
        }
}

static int group_reserve(struct group *g, uint32_t n)
{
        if (n <= g->cap)
                return 0;
        uint32_t cap = g->cap ? g->cap : 64;

        while (cap < n)
                cap *= 2;
        struct op **ops = realloc(g->ops, cap * sizeof(*ops));
        if (!ops)
                return -ENOMEM;
        g->ops = ops;
        struct gemmd_kproblem *kp = realloc(g->kp, cap * sizeof(*kp));
        if (!kp)
                return -ENOMEM;
        g->kp = kp;
        struct sched_problem *sp = realloc(g->sp, cap * sizeof(*sp));
        if (!sp)
                return -ENOMEM;
        g->sp = sp;
        g->cap = cap;
        return 0;
}

/* The session lane to take from next, its priority in *prio and, in
 * *prev, the op before the one to take (NULL: the head): of the users
 * with a queued op (at a lane head, or unless `match` is 0, the first of
 * kernel-config key `key` near one: lane_find), those whose recent usage
 * is at most `cap` (no limit when cap is 0) come first, highest priority
 * first, then the least virtual time (ties: ring order). When every such
 * user is over its share, priorities no longer count: the least virtual
 * time wins. Within the chosen user, its next session lane in turn. NULL
 * when no queued op fits.
 *
 * Looking past a lane's head lets a session that interleaves types (f16
 * and bf16, say) be batched: taking the head alone, each of its groups
 * would hold one op. The API promises no order between ops in flight
 * (gemmd_submit), and the head is not starved: a user whose head no
 * group matches stops gaining virtual time, so it soon leads a group of
 * its head's key. */
static struct lane *pick(struct worker *w, int match, uint32_t key, double cap, int *prio,
                         struct op **prev)
{
        struct ulane *best = NULL;
        struct lane *best_l = NULL;
        struct op *best_prev = NULL;

        for (int under = 1; under >= 0 && !best; under--) {
                for (int p = NPRIO - 1; p >= 0 && !(under && best); p--) {
                        struct ulane *u = w->ring[p];

                        if (!u)
                                continue;
                        do {
                                struct lane *l = u->ring;
                                struct op *before = NULL, *found = NULL;

                                if (match) {
                                        while (!(found = lane_find(l, key, &before)) && l->next != u->ring)
                                                l = l->next;
                                        if (!found) {
                                                u = u->next;
                                                continue;
                                        }
                                }
                                if (under && cap > 0 && u->sh->usage > cap) {
                                        u = u->next;
                                        continue;
                                }
                                if (!best || u->sh->vtime < best->sh->vtime) {
                                        best = u;
                                        best_l = l;
                                        best_prev = before;
                                        *prio = p;
                                }
                                u = u->next;
                        } while (u != w->ring[p]);
                }
        }
        *prev = best_prev;
        return best_l;
}

/* Outstanding tiles (queued, and in groups not yet finished; usual
 * tiles) up to which a backend with a resident kernel gets groups of at
 * most one wave (group_tile_cap). */
#define RES_CAP_WAVES 2

/*
 * The most tiles group g, being formed, may hold once its first op is in
 * it (which sets its key). A backend whose 16-bit kernel stays resident
 * (backend.resident) takes groups of at most one wave of its CTAs; a
 * larger group is launched, and a launch stops that kernel for every
 * group behind it until it ends and the kernel starts again.
 * While little work is outstanding (a few clients with a request or two
 * in flight each), groups are cut at one wave, so that all of them stay
 * on it and no request waits behind a stop; with more, larger groups
 * launched run better, so the cut counts the tiles in flight too, not
 * only the queued ones, which ebb as each large group is formed
 * (docs/performance.md, "Latency").
 */
static uint64_t group_tile_cap(const struct worker *w, const struct group *g)
{
        const uint64_t cap = w->cfg->max_group_tiles, wave = w->be->ctas;
        uint64_t out = w->pending_tiles + g->tiles;

        if (!w->be->resident || !wave || wave >= cap ||
            ((g->key & 3) != GEMMD_F16 && (g->key & 3) != GEMMD_BF16))
                return cap;
        for (uint32_t i = 0; i < w->nslots; i++)
                if (w->slots[i].busy && &w->slots[i] != g)
                        out += w->slots[i].tiles;
        return out <= RES_CAP_WAVES * wave ? wave : cap;
}

/* Takes pending ops into g. Within a priority, higher priorities first,
 * users are served by start-time fair queuing on each op's estimated
 * device time (op_cost), and a user's sessions one op each in turn, so
 * neither a flooding session nor a user with many sessions starves a light
 * one. With --max-user-share below 100, a user whose recent usage (1 s
 * half-life) is over that share of the recent usage of all users with work
 * loses its priority while a user under the share has work: priorities
 * cannot buy more than the share (the device never idles for it: with
 * nobody under the share, everyone is served in fair turn). Stops at the
 * group caps (group_tile_cap).
 * An op that finds no memory in a group still empty fails with
 * GEMMD_ERESOURCE and goes on `refused`, to be handed back once the lock
 * is released. Called with the lock held. */
static void form_group(struct worker *w, struct group *g, struct done_list *refused)
{
        const struct gemmd_config *cfg = w->cfg;
        double cap = cfg->lim.max_user_share < 100 ? cfg->lim.max_user_share / 100.0 : 0;
        double active = 0;
        int have_key = 0;
        const uint64_t t_pick = now_ns();
        uint64_t max_tiles = cfg->max_group_tiles;
        /* Once the first op set the group's key, the others must match it. */
        const int one_key = !w->be->mixed_keys || cfg->one_kernel_groups;

        g->nops = 0;
        g->tiles = 0;
        g->bytes = 0;
        /* The share is of what the users with work used lately. */
        if (cap > 0) {
                uint64_t now = now_ns();

                for (int p = 0; p < NPRIO; p++) {
                        struct ulane *u = w->ring[p];

                        for (int first = 1; u && (first || u != w->ring[p]); first = 0, u = u->next) {
                                if (u->sh->usage_ns == now)
                                        continue; /* counted at a higher priority */
                                decay(&u->sh->usage, &u->sh->usage_ns, now);
                                u->sh->usage_ns = now;
                                active += u->sh->usage;
                        }
                }
        }
        for (;;) {
                int p = 0;
                struct op *prev = NULL;
                struct lane *l = pick(w, have_key && one_key, g->key, cap * active, &p, &prev);
                struct ulane *u;
                struct op *o;
                uint64_t tiles, cost;
                int refuse;

                if (!l)
                        break; /* nothing, or other kernel configs that wait for a later group */
                u = l->u;
                o = prev ? prev->next : l->head;
                tiles = op_tiles(w, o);
                if (g->nops > 0 && (g->nops >= cfg->max_group_ops ||
                                    g->tiles + tiles > max_tiles ||
                                    g->bytes + o->bytes > cfg->max_group_bytes ||
                                    alloc_fault(o, ALLOC_GROUP) || group_reserve(g, g->nops + 1)))
                        break; /* a later group takes it */
                refuse = g->nops == 0 && (alloc_fault(o, ALLOC_GROUP) || group_reserve(g, 1));
                lane_take(l, prev);
                u->ring = l->next;
                w->ring[p] = u->next;
                if (!l->head)
                        lane_unlink(w, p, l);
                w->pending_ops--;
                w->pending_tiles -= tiles;
                if (refuse) {
                        /* No room for even one op: it fails, instead of
                         * staying queued for groups that could never take
                         * it while the worker went round forming them,
                         * holding its lock. One op per group formed: memory
                         * that comes back serves the rest. */
                        refuse_op(w, o, refused);
                        break;
                }
                cost = op_cost(w, o);
                w->vclock = u->sh->vtime;
                u->sh->vtime += cost;
                u->sh->usage += (double)cost;
                active += (double)cost;
                if (!have_key) {
                        g->key = o->key;
                        have_key = 1;
                }
                o->t_pick_ns = t_pick;
                g->ops[g->nops] = o;
                g->kp[g->nops] = o->kp;
                g->sp[g->nops] = o->sp;
                g->nops++;
                g->tiles += tiles;
                g->bytes += o->bytes;
                if (g->nops == 1)
                        max_tiles = group_tile_cap(w, g);
        }
}

/* Hands op i of g back with `status`, done at t_done; the request it
 * finishes goes on `done`. Called with the lock held. */
static void complete_op(struct worker *w, struct group *g, uint32_t i, int status, uint64_t t_done,
                        const char *kname, struct done_list *done)
{
        struct op *o = g->ops[i];
        uint64_t queue_us = (g->t_launch_ns - o->req->t_admit_ns) / 1000;

        o->status = status;
        o->t_launch_ns = g->t_launch_ns;
        o->t_done_ns = t_done;
        o->group_id = g->id;
        o->group_size = g->nops;
        /* The CPU backend mixes keys in a group: name each op's own. */
        o->kernel = w->be->mixed_keys ? w->be->kernel_name(w->be, o->key) : kname;
        w->st.ops++;
        if (status)
                w->st.ops_failed++;
        else
                w->st.flops += op_flops(o);
        w->st.queue_us_hist[hist_bucket(queue_us)]++;
        /* Every op here was stamped in order: admitted, enqueued, picked, launched. */
        w->st.staged_ns += o->t_enq_ns - o->req->t_admit_ns;
        w->st.waiting_ns += o->t_pick_ns - o->t_enq_ns;
        w->st.forming_ns += g->t_launch_ns - o->t_pick_ns;
        g->ops[i] = NULL;
        op_finish(o, done);
}

/* Hands every op of a finished group not handed back early
 * (worker_ops_done) back to its request, with the group's status; the
 * requests this finishes go on `done`. Called with the lock held, by
 * whichever thread learns first that the group is done (the backend's
 * completion thread, to save the latency of a hop through the worker).
 * Makes no device calls. */
static void complete_ops(struct worker *w, struct group *g, struct done_list *done)
{
        const char *kname = w->be->kernel_name(w->be, g->key);

        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i])
                        complete_op(w, g, i, g->status, g->t_done_ns, kname, done);
}

void worker_ops_done(struct group *g, const uint32_t *idx, uint32_t n)
{
        struct worker *w = g->w;
        struct done_list done = DONE_LIST_INIT(done);
        const char *kname = w->be->kernel_name(w->be, g->key);
        uint64_t t = now_ns();

        if (w->hosted_done) {
                w->hosted_early(g, idx, n); /* the daemon's worker answers them */
                return;
        }
        pthread_mutex_lock(&w->lock);
        for (uint32_t j = 0; j < n; j++)
                if (g->ops[idx[j]]) {
                        complete_op(w, g, idx[j], 0, t, kname, &done);
                        w->st.ops_early++;
                }
        pthread_mutex_unlock(&w->lock);
        hand_back(w, &done);
}

/* The worker's bookkeeping of a finished group (its ops are already
 * completed): device timings, histograms, and the slot freed. Called with
 * the lock held, on the worker thread when the backend timed the group
 * (its collect() runs there), else on the thread that completed it. */
static void finish_group(struct worker *w, struct group *g)
{
        uint64_t run_us = (g->t_done_ns - g->t_launch_ns) / 1000;

        w->st.groups++;
        w->st.group_size_hist[hist_bucket(g->nops)]++;
        w->st.run_us_hist[hist_bucket(run_us)]++;
        w->st.run_ns += g->t_done_ns - g->t_launch_ns;
        w->st.tiles += g->tiles;
        const struct sched_shape usual = w->be->shape(w->be, g->key);

        w->st.wide_groups += g->cfg.shape.tn > usual.tn;
        /* narrow: fewer columns, or (the half tile) fewer rows */
        w->st.narrow_groups += g->cfg.shape.tn < usual.tn || g->cfg.shape.tm < usual.tm;
        w->st.resident_groups += g->resident != 0;
        w->st.packed_groups += g->packed != 0;
        w->st.ops_word_dev += g->words_dev;
        if (g->status == GEMMD_EDEVICE && w->be->recover)
                w->recover_pending = 1;
        if (w->be->collect && g->timed) {
                uint64_t dev_ns = 0, gap_ns = UINT64_MAX;

                w->be->collect(w->be, g, &dev_ns, &gap_ns);
                w->st.device_ns += dev_ns;
                w->st.timed_groups++;
                if (g->b2b && gap_ns != UINT64_MAX) {
                        w->st.idle_gap_ns += gap_ns;
                        w->st.idle_gaps++;
                }
        }
        g->timed = 0;
        g->resident = 0;
        g->packed = 0;
        g->words_dev = 0;
        g->nops = 0;
        g->busy = 0;
}

/*
 * Whether every op of g can run on a tile of the Hopper kernel's own (wide
 * or narrow): GEMMs with the layout of its tensor maps, A and B 16-byte
 * aligned. Operands already in device memory are checked here; host
 * operands are staged at 256-byte offsets.
 */
static int hopper_tiles_fit(const struct group *g)
{
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];

                if (o->kp.kind != SCHED_GEMM || !kproblem_tma_layout(&o->kp))
                        return 0;
                for (int j = 0; j < 2; j++)
                        if (o->buf[j]->kind == GBUF_CUDA && (gbuf_addr(o->buf[j]) + o->off[j]) % 16)
                                return 0;
        }
        return 1;
}

/*
 * Whether g is an f32 group with an op that reads C (beta != 0). Such a
 * group stays on the usual tile: there the Hopper kernel reads C through
 * the staging buffer that only the usual tile leaves room for, where the
 * wide tile's f32 epilogue reads it from the fragments' addresses, four
 * elements at a time (1.85x the time on 256 TF32 GEMMs with beta 1,
 * bench/results/beta-epilogue.txt, call 6).
 */
static int f32_reads_c(const struct group *g)
{
        if ((g->key & 3) != GEMMD_F32)
                return 0;
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->kp.beta != 0.0f)
                        return 1;
        return 0;
}

/*
 * Gives g the backend's wide tile when the cost model predicts it faster
 * (sched_prefer_wide: a wide tile loads a third less per product, which
 * pays on groups of many large tiles; not an f32 group that reads C,
 * f32_reads_c), or its narrow tile when g's usual
 * tiles would leave SMs idle and its narrow ones fit one wave
 * (sched_prefer_narrow: a lone small GEMM on twice the SMs). Only a group
 * with the device to itself takes the narrow tile: beside groups in
 * flight, the SMs its usual tiles leave idle are theirs, as for the wide
 * tile's threshold. (A backend with the resident kernel gives its 16-bit
 * groups a narrow tile of half the rows, which that kernel runs; not in
 * device mode, whose kernels map tiles of the usual rows themselves.)
 * The kernels sum the same chunks on every tile, so no result depends on
 * the choice.
 * Returns g's tiles on the shape it takes (g->tiles counts usual ones).
 */
static uint64_t take_tile(struct worker *w, struct group *g)
{
        const struct sched_shape ws = w->cfg->wide_tiles && w->be->wide_shape && !f32_reads_c(g)
                                              ? w->be->wide_shape(w->be, g->key)
                                              : (struct sched_shape){0, 0, 0};
        struct sched_shape ns = w->cfg->narrow_tiles && w->be->narrow_shape && g->alone
                                        ? w->be->narrow_shape(w->be, g->key)
                                        : (struct sched_shape){0, 0, 0};

        uint64_t tiles = 0;

        if (g->cfg.mode == SCHED_DEVICE && ns.tm != g->cfg.shape.tm)
                ns = (struct sched_shape){0, 0, 0};
        if ((!ws.tn && !ns.tn) || !hopper_tiles_fit(g))
                return g->tiles;
        if (ws.tn && sched_prefer_wide(sched_cost_get(), g->sp, g->nops, g->cfg.shape, ws, g->cfg.ctas))
                g->cfg.shape = ws;
        else if (ns.tn && sched_prefer_narrow(g->sp, g->nops, g->cfg.shape, ns, g->cfg.ctas))
                g->cfg.shape = ns;
        else
                return g->tiles;
        for (uint32_t i = 0; i < g->nops; i++)
                tiles += sched_tile_count(&g->sp[i], g->cfg.shape);
        return tiles;
}

/* Builds g's plan on its shape, whose tiles number `tiles`. */
static int plan_group(struct worker *w, struct group *g, uint64_t tiles)
{
        g->cfg.ctas = w->be->ctas;
        /* No more CTAs than tiles: the idle ones would only take SMs that
         * the next group, on another stream, can use. Split mode keeps them
         * all: it cuts K to give every CTA work; auto too, and cuts them
         * itself when it leaves the tiles whole. */
        if (g->cfg.mode != SCHED_SPLIT && g->cfg.mode != SCHED_DEVICE && g->cfg.mode != SCHED_AUTO &&
            tiles < g->cfg.ctas)
                g->cfg.ctas = tiles ? (uint32_t)tiles : 1;
        return sched_plan_build(&g->plan, g->sp, g->nops, &g->cfg);
}

/* Builds g's plan and launches it. Called with the lock released; sets
 * *launch_ns to the host time the backend's launch() took (0 when it was
 * not called), for the caller to count under the lock it takes next.
 * Returns 0, or the failure that the caller answers g's ops with
 * (worker_launch_status: memory that ran out is not the device's). */
static int launch_group(struct worker *w, struct group *g, uint64_t *launch_ns)
{
        const struct sched_shape usual = w->be->shape(w->be, g->key);
        uint64_t t0 = now_ns(), tiles;
        int rc;

        *launch_ns = 0;
        if (w->broken)
                return GEMMD_EDEVICE;
        g->cfg.mode = w->cfg->mode;
        g->cfg.shape = usual;
        g->cfg.ctas = w->be->ctas; /* the cost model's, in take_tile */
        tiles = take_tile(w, g);
        rc = group_alloc_fault(g, ALLOC_PLAN) ? -ENOMEM : plan_group(w, g, tiles);
        /* A tile of fewer rows is a whole tile's (cuda_gemm_shape_half):
         * a plan that cuts K (a lone long-K GEMM's fill) takes the usual
         * tile instead. */
        if (!rc && g->plan.nsplit && g->cfg.shape.tm != usual.tm) {
                g->cfg.shape = usual;
                rc = plan_group(w, g, g->tiles);
        }
        WT(w, WT_PLAN);
        pthread_mutex_lock(&w->lock);
        w->st.plan_ns += now_ns() - t0;
        if (rc) {
                pthread_mutex_unlock(&w->lock);
                log_err("worker %d: plan of group %llu failed: %s", w->index,
                        (unsigned long long)g->id, gemmd_strerror(rc));
                return rc;
        }
        w->st.split_groups += g->plan.mode == SCHED_SPLIT; /* its plan built just now */
        w->st.fill_groups += g->plan.reduce_apart;
        g->t_launch_ns = now_ns();
        g->b2b = w->inflight > 0;
        const int was_idle = w->inflight++ == 0;

        /* (a cancel while it formed may have cleared the loaded state; its
         * slot may have been the last free one) */
        loaded_update(w);
        if (was_idle) {
                w->busy_since_ns = g->t_launch_ns;
                /* Without device timing, the host's view of an idle device
                 * that had work waiting is the gap. */
                if (!w->be->collect && w->last_done_ns &&
                    g->ops[0]->req->t_admit_ns < w->last_done_ns) {
                        w->st.idle_gap_ns += g->t_launch_ns - w->last_done_ns;
                        w->st.idle_gaps++;
                }
        }
        pthread_mutex_unlock(&w->lock);
        WT(w, WT_LOCKED);
        rc = w->be->launch(w->be, g);
        WT(w, WT_LAUNCH);
        *launch_ns = now_ns() - g->t_launch_ns;
        if (rc) {
                pthread_mutex_lock(&w->lock);
                if (--w->inflight == 0)
                        w->st.busy_ns += now_ns() - w->busy_since_ns;
                loaded_update(w);
                pthread_mutex_unlock(&w->lock);
                log_err("worker %d: launch of group %llu failed: %s", w->index,
                        (unsigned long long)g->id, gemmd_strerror(rc));
        }
        return rc;
}

/*
 * Forms a group in free slot g from the pending ops and launches it: the
 * launch path of the worker thread, and of a loop thread that launches
 * itself onto an idle device (launch_here). Called with the lock held,
 * released around the launch; w->backend_busy keeps the backend to one
 * thread at a time, whichever thread launches. Returns 1 when a group
 * went to the backend, 0 when every op was refused.
 */
static int launch_next(struct worker *w, struct group *g)
{
        struct done_list refused = DONE_LIST_INIT(refused);
        int formed;

        w->backend_busy = 1;
        g->busy = 1;
        g->id = ++w->next_group_id;
        g->alone = w->inflight == 0;
        form_group(w, g, &refused);
        if (refused.head) {
                pthread_mutex_unlock(&w->lock);
                hand_back(w, &refused);
                pthread_mutex_lock(&w->lock);
        }
        formed = g->nops > 0;
        WT(w, WT_FORM);
        if (!formed) {
                g->busy = 0;
                loaded_update(w); /* every op refused */
        } else {
                uint64_t launch_ns;

                pthread_mutex_unlock(&w->lock);
                int rc = launch_group(w, g, &launch_ns);
                pthread_mutex_lock(&w->lock);
                /* What the launch path costs the launching thread: with
                 * device_ns and run_ns, where a group's time goes. */
                w->st.launch_ns += launch_ns;
                if (rc) {
                        struct done_list done = DONE_LIST_INIT(done);

                        /* A recovery (finish_group) only for what the
                         * device did. */
                        g->status = worker_launch_status(rc);
                        g->timed = 0; /* nothing to measure */
                        g->t_done_ns = g->t_launch_ns = now_ns();
                        complete_ops(w, g, &done);
                        finish_group(w, g);
                        pthread_mutex_unlock(&w->lock);
                        hand_back(w, &done);
                        pthread_mutex_lock(&w->lock);
                }
        }
        w->backend_busy = 0;
        WT(w, WT_TAIL);
        return formed;
}

int worker_launch_status(int rc)
{
        switch (rc) {
        case -ENOMEM:
        case -ENOSPC:
        case -EAGAIN:
        case -EMFILE:
        case -ENFILE:
        case -ENOBUFS:
                return GEMMD_ERESOURCE;
        case -EINVAL:
                return GEMMD_EINVAL;
        case -EOVERFLOW:
        case -ERANGE:
                return GEMMD_EOVERFLOW;
        }
        if (rc <= GEMMD_EBASE - 1 && rc >= GEMMD_ELAST)
                return rc;
        return GEMMD_EDEVICE;
}

/* Notes a task the worker thread ran for ns, and says so when it held
 * the groups behind it up for long (a new client's memory opened while
 * others' work waits, say): at most once a second, with the number of
 * such tasks since the last line. */
static void task_note(struct worker *w, const char *what, uint64_t ns)
{
        uint64_t t;

        if (ns > w->task_max_ns) {
                w->task_max_ns = ns;
                w->task_max_what = what;
        }
        if (ns <= WORKER_TASK_SLOW_NS)
                return;
        w->task_slow_unsaid++;
        t = now_ns();
        if (t - w->task_said_ns < 1000000000ull && w->task_said_ns)
                return;
        log_info("device %d: %s took %.1f ms on its worker thread, which launched nothing meanwhile "
                 "(%llu such tasks since the last line)",
                 w->index, what ? what : "a task", (double)ns / 1e6, (unsigned long long)w->task_slow_unsaid);
        w->task_said_ns = t;
        w->task_slow_unsaid = 0;
}

/* Links c at the tail of the task list head .. tail. */
static void wctl_append(struct wctl **head, struct wctl **tail, struct wctl *c)
{
        c->next = NULL;
        if (*tail)
                (*tail)->next = c;
        else
                *head = c;
        *tail = c;
}

/* Fills s's credit for the time since it was last filled. */
static void share_fill(const struct worker *w, struct task_share *s, uint64_t now)
{
        const uint64_t pct = w->cfg->lim.max_user_task_share;

        if (now > s->at_ns)
                s->credit_ns += (int64_t)((now - s->at_ns) * pct / 100);
        if (s->credit_ns > WORKER_SHARE_BURST_NS)
                s->credit_ns = WORKER_SHARE_BURST_NS;
        s->at_ns = now;
}

/* The share of uid, filled up to now. A user not seen lately takes a free
 * entry or one whose credit is full again (it records nothing), else the
 * entry with the most credit, and starts with a full credit. */
static struct task_share *share_of(struct worker *w, uint32_t uid, uint64_t now)
{
        struct task_share *s, *best = NULL;

        for (int i = 0; i < WORKER_SHARES; i++) {
                s = &w->shares[i];
                if (s->live && s->uid == uid) {
                        share_fill(w, s, now);
                        return s;
                }
        }
        for (int i = 0; i < WORKER_SHARES; i++) {
                s = &w->shares[i];
                if (s->live)
                        share_fill(w, s, now);
                if (!s->live || s->credit_ns >= WORKER_SHARE_BURST_NS) {
                        best = s;
                        break;
                }
                if (!best || s->credit_ns > best->credit_ns)
                        best = s;
        }
        *best = (struct task_share){.uid = uid, .live = 1, .credit_ns = WORKER_SHARE_BURST_NS, .at_ns = now};
        return best;
}

/* How long task c must wait for its user's share (0: it may run now).
 * Nothing waits once the daemon drains, or without a bound; nor while the
 * device has had nothing to run for WORKER_SHARE_IDLE_NS: the share keeps
 * a user's tasks from holding others' work up, and there is none (a job
 * starting many processes at once on an idle GPU opens their memory at
 * once). */
static uint64_t share_wait(struct worker *w, const struct wctl *c, uint64_t now)
{
        const uint64_t pct = w->cfg->lim.max_user_task_share;
        struct task_share *s;
        uint64_t wait;

        if (!c->may_wait || pct >= 100 || w->stopping || w->hurry)
                return 0;
        s = share_of(w, c->uid, now);
        if (s->credit_ns >= 0)
                return 0;
        wait = (uint64_t)-s->credit_ns * 100 / (pct ? pct : 1) + 1;
        if (!w->pending_ops && !w->inflight && !atomic_load(&w->inbox)) {
                const uint64_t idle_at = w->last_done_ns + WORKER_SHARE_IDLE_NS;

                if (now >= idle_at)
                        return 0;
                if (idle_at - now < wait)
                        wait = idle_at - now;
        }
        return wait;
}

/* Takes a task's time from its user's credit. */
static void share_charge(struct worker *w, uint32_t uid, uint64_t ns)
{
        if (w->cfg->lim.max_user_task_share < 100) {
                struct task_share *s = share_of(w, uid, now_ns());

                /* A debt of one burst at most: closes are charged but never
                 * held, and a user's next open should not wait longer than
                 * a burst takes to fill. */
                s->credit_ns -= (int64_t)ns;
                if (s->credit_ns < -WORKER_SHARE_BURST_NS)
                        s->credit_ns = -WORKER_SHARE_BURST_NS;
        }
}

/* Under the lock, on the worker thread: says (at most every 10 s) that a
 * user's tasks wait for its share, the first sign of a client opening and
 * closing memory in a loop. */
static void held_note(struct worker *w, uint32_t uid)
{
        uint64_t t = now_ns();

        w->st.tasks_held++;
        if (w->held_said_ns && t - w->held_said_ns < 10000000000ull)
                return;
        log_info("device %d: user %u's requests for device memory took more than its share of the "
                 "worker's time (%u%%); the next ones wait (%llu have waited)",
                 w->index, uid, w->cfg->lim.max_user_task_share, (unsigned long long)w->st.tasks_held);
        w->held_said_ns = t;
}

/* Under the lock, on the worker thread: the next task that may run now,
 * unlinked, or NULL. Held tasks come first (they are older); a new task
 * whose user is over its share joins them, behind that user's others.
 * *wake: when the first held task may run (0: none is held). */
static struct wctl *task_next(struct worker *w, uint64_t *wake)
{
        struct wctl *c, *prev = NULL;
        uint64_t now, t;

        *wake = 0;
        if (!w->held_head && !w->ctl_head)
                return NULL; /* every turn of the worker: no clock read */
        now = now_ns();
        for (c = w->held_head; c; prev = c, c = c->next) {
                if ((t = share_wait(w, c, now)) == 0) {
                        if (prev)
                                prev->next = c->next;
                        else
                                w->held_head = c->next;
                        if (w->held_tail == c)
                                w->held_tail = prev;
                        return c;
                }
                if (!*wake || now + t < *wake)
                        *wake = now + t;
        }
        while ((c = w->ctl_head)) {
                w->ctl_head = c->next;
                if (!w->ctl_head)
                        w->ctl_tail = NULL;
                if ((t = share_wait(w, c, now)) == 0)
                        return c;
                wctl_append(&w->held_head, &w->held_tail, c);
                if (!*wake || now + t < *wake)
                        *wake = now + t;
                held_note(w, c->uid);
        }
        return NULL;
}

/* The CLOCK_REALTIME deadline that pthread_cond_timedwait needs for the
 * CLOCK_MONOTONIC time `due`. */
static struct timespec deadline_of(uint64_t due)
{
        struct timespec ts;
        uint64_t now = now_ns(), abs;

        clock_gettime(CLOCK_REALTIME, &ts);
        abs = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (due > now ? due - now : 0);
        ts.tv_sec = (time_t)(abs / 1000000000ull);
        ts.tv_nsec = (long)(abs % 1000000000ull);
        return ts;
}

void worker_control(struct worker *w, struct wctl *c)
{
        pthread_mutex_lock(&w->lock);
        wctl_append(&w->ctl_head, &w->ctl_tail, c);
        nudge(w);
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
}

void worker_group_done(struct group *g, int status)
{
        struct worker *w = g->w;
        struct done_list done = DONE_LIST_INIT(done);

        if (w->hosted_done) {
                w->hosted_done(g, status);
                return;
        }
#ifdef GEMMD_WTRACE
        const uint64_t wt0 = now_ns();
#endif
        pthread_mutex_lock(&w->lock);
#ifdef GEMMD_WTRACE
        const uint64_t wt1 = now_ns();

        wt_add(w, WT_DONE_WAIT, wt1 - wt0);
#endif
        g->status = status;
        g->t_done_ns = now_ns();
        complete_ops(w, g, &done);
        if (--w->inflight == 0) {
                w->st.busy_ns += g->t_done_ns - w->busy_since_ns;
                w->last_done_ns = g->t_done_ns;
        }
        loaded_update(w);
        atomic_fetch_add_explicit(&w->progress, 1, memory_order_relaxed);
        nudge(w);
        if (w->be->collect && g->timed) {
                g->next_done = w->done;
                w->done = g;
                pthread_cond_signal(&w->cond);
        } else {
                /* Nothing here needs the worker thread: an idle worker is
                 * not woken just to free the slot, only when the slot (or a
                 * repair) lets it go on, when the device idles with a task
                 * held for its user's share (share_wait), or when it is
                 * stopping. The signal stays under the lock: once it is
                 * released, the loop may stop the worker. */
                finish_group(w, g);
                if (w->sleeping && (w->pending_ops || w->recover_pending || w->stopping ||
                                    (w->held_head && !w->inflight)))
                        pthread_cond_signal(&w->cond);
        }
#ifdef GEMMD_WTRACE
        wt_add(w, WT_DONE_HOLD, now_ns() - wt1);
#endif
        pthread_mutex_unlock(&w->lock);
        hand_back(w, &done);
}

/* The earliest admission time among the queued lane heads. */
static uint64_t oldest_pending(struct worker *w)
{
        uint64_t t = UINT64_MAX;

        for (int p = 0; p < NPRIO; p++) {
                struct ulane *u = w->ring[p];

                if (!u)
                        continue;
                do {
                        struct lane *l = u->ring;

                        do {
                                if (l->head->req->t_admit_ns < t)
                                        t = l->head->req->t_admit_ns;
                                l = l->next;
                        } while (l != u->ring);
                        u = u->next;
                } while (u != w->ring[p]);
        }
        return t;
}

/* Waits on the worker's condition (until *until, if given) unless a
 * batch is on the inbox: sleeping is set first and worker_enqueue looks
 * at it after its push, so a batch pushed in between is seen here or
 * signals the wait. The wait is timed as idle (worker_stats.worker_ns).
 * Lock held. */
static void sleep_unless_inbox(struct worker *w, const struct timespec *until)
{
        WT(w, WT_TURN);
        w->sleeping = 1;
        if (!atomic_load(&w->inbox)) {
                w->idle = 1;
                idle_sync(w, now_ns());
                if (until)
                        pthread_cond_timedwait(&w->cond, &w->lock, until);
                else
                        pthread_cond_wait(&w->cond, &w->lock);
                w->idle = 0;
                idle_sync(w, now_ns());
        }
        w->sleeping = 0;
        WT(w, WT_SLEEP);
}

/*
 * Before it sleeps, a worker that was busy within the last cfg->spin_us
 * polls the nudge count with the lock released, until it moves or the
 * window since that work ends: at a steady request rate the next request
 * is then taken without the 5-15 us of a futex wake-up. Returns 1 (lock
 * held again) when the caller should look at its state once more, 0 when
 * the window is over and it should sleep.
 */
static int spin(struct worker *w)
{
        const uint64_t win = w->cfg->spin_us * 1000ull;
        const uint_fast32_t seen = atomic_load_explicit(&w->nudges, memory_order_acquire);
        uint64_t now = now_ns();
        int moved = 0;

        if (!win || now - w->active_ns >= win)
                return 0;
        /* A batch pushed after the caller drained the inbox but nudged
         * before `seen` was read: look again now, not after the window. */
        if (atomic_load(&w->inbox))
                return 1;
        WT(w, WT_TURN);
        w->idle = 1; /* the poll is idle time too */
        idle_sync(w, now);
        pthread_mutex_unlock(&w->lock);
        while (now - w->active_ns < win) {
                if (atomic_load_explicit(&w->nudges, memory_order_acquire) != seen) {
                        moved = 1;
                        break;
                }
                cpu_relax();
                now = now_ns();
        }
        pthread_mutex_lock(&w->lock);
        now = now_ns();
        w->idle = 0;
        idle_sync(w, now);
        if (moved)
                w->active_ns = now;
        WT(w, WT_SPIN);
        return 1;
}

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        const struct gemmd_config *cfg = w->cfg;
        uint64_t held_wake = 0; /* when a task held for its user's share may run */

        cpuacct_thread_start(CPU_WORKER);
#ifdef GEMMD_WTRACE
        w->wt_last = now_ns();
#endif
        pthread_mutex_lock(&w->lock);
        for (;;) {
                WT(w, WT_TURN);
                inbox_drain(w);
                WT(w, WT_DRAIN);
                /* A loop thread launching onto the idle device (launch_here)
                 * has the backend to itself: tasks, collects, repairs and
                 * launches wait for it, and it signals when done. Past this
                 * point the worker holds the lock or the backend itself for
                 * the rest of the turn, so no loop takes it meanwhile. */
                if (w->backend_busy) {
                        if (!spin(w))
                                sleep_unless_inbox(w, NULL);
                        continue;
                }
                struct wctl *c;

                while ((c = task_next(w, &held_wake))) {
                        /* A task without done() may free itself in run(). */
                        int has_done = c->done != NULL, charged = c->charged;
                        const char *what = c->what;
                        const uint32_t uid = c->uid;

                        w->backend_busy = 1;
                        pthread_mutex_unlock(&w->lock);
                        const uint64_t t0 = now_ns();

                        c->run(c, w);
                        const uint64_t ns = now_ns() - t0;

                        task_note(w, what, ns);
                        atomic_fetch_add_explicit(&w->progress, 1, memory_order_relaxed);
                        if (has_done)
                                w->control_done(c, w->ctx);
                        pthread_mutex_lock(&w->lock);
                        w->backend_busy = 0;
                        w->st.tasks++;
                        w->st.task_ns += ns;
                        if (charged)
                                share_charge(w, uid, ns);
                }
                WT(w, WT_TASKS);
                while (w->done) {
                        struct group *g = w->done;

                        w->done = g->next_done;
                        finish_group(w, g);
                }
                WT(w, WT_DONE);
                if (w->recover_pending && !w->inflight) {
                        /* A failed group may have broken the device: repair
                         * it before anything else is launched. */
                        w->backend_busy = 1;
                        pthread_mutex_unlock(&w->lock);
                        int rc = w->be->recover(w->be);
                        pthread_mutex_lock(&w->lock);
                        w->backend_busy = 0;
                        w->recover_pending = 0;
                        w->st.recoveries++;
                        if (rc) {
                                /* Nothing more can run here: fail what comes
                                 * and have the daemon drain and exit non-zero,
                                 * so its supervisor starts a fresh process. */
                                log_err("worker %d: the device cannot be repaired (%d)", w->index, rc);
                                w->broken = 1;
                                if (w->device_lost)
                                        w->device_lost(w->ctx);
                        }
                        continue;
                }
                if (w->pending_ops && w->inflight < w->max_inflight && !w->recover_pending) {
                        struct group *g = free_slot(w);

                        /* On an idle device, the batch window (if any) lets
                         * company arrive; a lone request otherwise goes now. */
                        if (g && cfg->batch_window_us && w->inflight == 0 && !w->stopping &&
                            w->pending_tiles < cfg->max_group_tiles) {
                                uint64_t due = oldest_pending(w) + cfg->batch_window_us * 1000ull;
                                uint64_t now = now_ns();

                                if (now < due) {
                                        struct timespec ts = deadline_of(held_wake && held_wake < due ? held_wake : due);

                                        sleep_unless_inbox(w, &ts);
                                        continue;
                                }
                        }
                        if (g) {
                                launch_next(w, g);
                                w->active_ns = now_ns();
                                continue;
                        }
                }
                if (w->stopping && !w->pending_ops && !w->inflight && !w->done && !w->ctl_head &&
                    !w->held_head && !atomic_load(&w->inbox))
                        break;
                if (spin(w))
                        continue;
                if (held_wake) {
                        struct timespec ts = deadline_of(held_wake);

                        sleep_unless_inbox(w, &ts);
                } else {
                        sleep_unless_inbox(w, NULL);
                }
                w->active_ns = now_ns();
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

int worker_start(struct worker *w, int index, struct backend *be, const struct gemmd_config *cfg,
                 worker_complete_fn complete, worker_control_fn control_done,
                 worker_notice_fn launch_notice, void *ctx)
{
        int rc;

        memset(w, 0, sizeof(*w));
        w->index = index;
        w->be = be;
        w->cfg = cfg;
        w->complete = complete;
        w->control_done = control_done;
        w->launch_notice = launch_notice;
        w->ctx = ctx;
        w->max_inflight = cfg->max_groups_inflight ? cfg->max_groups_inflight : be->groups_inflight;
        /* --loop-launch, auto the backend's choice; never where its
         * launches must stay on this thread, nor with a batch window,
         * which only the worker's wait applies. */
        w->loop_launch = (cfg->loop_launch < 0 ? be->loop_launch_pays : cfg->loop_launch) && be->launch_any_thread &&
                         !cfg->batch_window_us;
        w->nslots = w->max_inflight + 1;
        w->slots = calloc(w->nslots, sizeof(*w->slots));
        if (!w->slots)
                return -ENOMEM;
        for (uint32_t i = 0; i < w->nslots; i++) {
                w->slots[i].w = w;
                sched_plan_init(&w->slots[i].plan);
                if (be->slot_init && (rc = be->slot_init(be, &w->slots[i])) != 0)
                        goto err_slots;
                /* A group's first ops need no allocation while it forms. */
                if ((rc = group_reserve(&w->slots[i], 64)) != 0)
                        goto err_slots;
        }
        /* The loops, the worker and the completion thread each take it for
         * microseconds, many times per group. */
        lock_init(&w->lock);
        pthread_cond_init(&w->cond, NULL);
        rc = -pthread_create(&w->thread, NULL, worker_main, w);
        if (rc)
                goto err_sync;
        {
                char name[16]; /* what top -H and /proc/PID/task show */

                snprintf(name, sizeof(name), "gemmd-work%d", index);
                pthread_setname_np(w->thread, name);
        }
        w->started = 1;
        return 0;

err_sync:
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
err_slots:
        for (uint32_t i = 0; i < w->nslots; i++) {
                if (be->slot_deinit)
                        be->slot_deinit(be, &w->slots[i]);
                sched_plan_deinit(&w->slots[i].plan);
                free(w->slots[i].ops);
                free(w->slots[i].kp);
                free(w->slots[i].sp);
        }
        free(w->slots);
        w->slots = NULL;
        return rc;
}

/* Any thread: sets one of the worker's flags and wakes it to see it. */
static void set_and_wake(struct worker *w, int *flag)
{
        pthread_mutex_lock(&w->lock);
        *flag = 1;
        nudge(w);
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
}

void worker_hurry(struct worker *w)
{
        if (w->started)
                set_and_wake(w, &w->hurry);
}

void worker_stop(struct worker *w)
{
        if (!w->started)
                return;
        set_and_wake(w, &w->stopping);
        pthread_join(w->thread, NULL);
        if (w->st.tasks)
                log_info("device %d: %llu tasks on its worker thread, %.1f ms in all, the longest %.2f ms (%s)",
                         w->index, (unsigned long long)w->st.tasks, (double)w->st.task_ns / 1e6,
                         (double)w->task_max_ns / 1e6, w->task_max_what ? w->task_max_what : "a task");
        if (w->st.tasks_held)
                log_info("device %d: %llu tasks waited for their user's share of its worker's time",
                         w->index, (unsigned long long)w->st.tasks_held);
#ifdef GEMMD_WTRACE
        static const char *const wt_names[WT_N] = {
                [WT_DRAIN] = "drain", [WT_TASKS] = "tasks",   [WT_DONE] = "done",          [WT_FORM] = "form",
                [WT_PLAN] = "plan",   [WT_LOCKED] = "locked", [WT_LAUNCH] = "launch",      [WT_TAIL] = "tail",
                [WT_TURN] = "turn",   [WT_SPIN] = "spin",     [WT_SLEEP] = "sleep",        [WT_DONE_WAIT] = "done-wait",
                [WT_DONE_HOLD] = "done-hold"};
        const double groups = w->st.groups ? (double)w->st.groups : 1.0;

        for (int i = 0; i < WT_N; i++)
                log_info("device %d: worker trace %-9s %9.1f ms, %10llu times, %7.3f us each, %7.3f us a group",
                         w->index, wt_names[i], w->wt_ns[i] / 1e6, (unsigned long long)w->wt_n[i],
                         w->wt_n[i] ? w->wt_ns[i] / 1e3 / (double)w->wt_n[i] : 0.0, w->wt_ns[i] / 1e3 / groups);
#endif
        for (uint32_t i = 0; i < w->nslots; i++) {
                struct group *g = &w->slots[i];

                if (w->be->slot_deinit)
                        w->be->slot_deinit(w->be, g);
                sched_plan_deinit(&g->plan);
                free(g->ops);
                free(g->kp);
                free(g->sp);
        }
        free(w->slots);
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        w->started = 0;
}

void worker_progress(struct worker *w, uint64_t *progress, int *busy)
{
        pthread_mutex_lock(&w->lock);
        *busy = w->pending_ops || w->inflight || w->ctl_head || atomic_load(&w->inbox);
        pthread_mutex_unlock(&w->lock);
        *progress = atomic_load_explicit(&w->progress, memory_order_relaxed);
}

void worker_get_stats(struct worker *w, struct worker_stats *st, uint32_t *pending,
                      uint32_t *inflight)
{
        pthread_mutex_lock(&w->lock);
        inbox_drain(w);
        const uint64_t now = now_ns();
        const uint64_t idle = w->idle_loaded_ns + timed_open(&w->idle_loaded, now);

        *st = w->st;
        if (w->inflight)
                st->busy_ns += now - w->busy_since_ns;
        st->loaded_ns += timed_open(&w->loaded, now);
        st->capped_ns += timed_open(&w->capped, now);
        st->worker_ns = st->loaded_ns > idle ? st->loaded_ns - idle : 0;
        *pending = w->pending_ops;
        *inflight = w->inflight;
        for (struct group *g = w->done; g; g = g->next_done)
                ++*inflight;
        pthread_mutex_unlock(&w->lock);
}

void worker_notify_launch(struct group *g, const uint8_t handle[64], int device)
{
        struct worker *w = g->w;

        if (w->hosted_launched) {
                w->hosted_launched(g, handle, device);
                return;
        }
        for (uint32_t i = 0; i < g->nops; i++) {
                struct request *r = g->ops[i]->req;
                struct launch_notice *n;
                uint32_t nops = 0;

                if (!r->notify_launch || r->launch_gid == g->id)
                        continue;
                r->launch_gid = g->id;
                for (uint32_t j = i; j < g->nops; j++)
                        nops += g->ops[j]->req == r;
                n = calloc(1, sizeof(*n));
                if (!n)
                        continue; /* the client then learns at completion */
                n->c.done = w->launch_notice;
                n->c.home = r->home;
                n->r = r;
                memcpy(n->handle, handle, 64);
                n->device = device;
                n->nops = nops;
                /* Posted before the group can complete, so the request (and
                 * its session) outlive the notice. */
                w->control_done(&n->c, w->ctx);
        }
}

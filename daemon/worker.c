/*
 * worker.c - the per-device thread: continuous batching, plans, launches.
 */
#include "daemon/worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/log.h"
#include "gemmd.h"

uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int hist_bucket(uint64_t v)
{
        int b = 0;

        while (v > 1 && b < HIST_BUCKETS - 1) {
                v >>= 1;
                b++;
        }
        return b;
}

static void lane_link(struct worker *w, int p, struct lane *l)
{
        struct lane *head = w->ring[p];

        if (!head) {
                l->next = l->prev = l;
                w->ring[p] = l;
        } else {
                /* Before the head: the newcomer waits for one full turn. */
                l->next = head;
                l->prev = head->prev;
                head->prev->next = l;
                head->prev = l;
        }
        l->linked = 1;
}

static void lane_unlink(struct worker *w, int p, struct lane *l)
{
        if (l->next == l) {
                w->ring[p] = NULL;
        } else {
                l->prev->next = l->next;
                l->next->prev = l->prev;
                if (w->ring[p] == l)
                        w->ring[p] = l->next;
        }
        l->next = l->prev = NULL;
        l->linked = 0;
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

static uint64_t op_tiles(struct worker *w, const struct op *o)
{
        struct sched_shape s = w->be->shape(w->be, o->key);

        return sched_tile_count(&o->sp, s);
}

static uint64_t op_flops(const struct op *o)
{
        const struct gemmd_kproblem *p = &o->kp;

        return 2ull * p->m * p->n * p->k;
}

/* Hands an op back to its request; completes the request with its last op.
 * The op must not be touched afterwards: the loop may free it. */
static void op_finish(struct worker *w, struct op *o)
{
        struct request *r = o->req;

        if (atomic_fetch_sub_explicit(&r->remaining, 1, memory_order_acq_rel) == 1)
                w->complete(r, w->ctx);
}

void worker_enqueue(struct worker *w, struct lane *lanes, struct op **ops, uint32_t n, int prio)
{
        struct lane *l = &lanes[prio];

        pthread_mutex_lock(&w->lock);
        for (uint32_t i = 0; i < n; i++) {
                struct op *o = ops[i];

                o->next = NULL;
                if (l->tail)
                        l->tail->next = o;
                else
                        l->head = o;
                l->tail = o;
                l->queued++;
                w->pending_ops++;
                w->pending_tiles += op_tiles(w, o);
        }
        if (!l->linked && l->head)
                lane_link(w, prio, l);
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
}

void worker_cancel(struct worker *w, struct lane *lanes)
{
        pthread_mutex_lock(&w->lock);
        for (int p = 0; p < NPRIO; p++) {
                struct lane *l = &lanes[p];

                if (l->linked)
                        lane_unlink(w, p, l);
                while (l->head) {
                        struct op *o = lane_pop(l);

                        w->pending_ops--;
                        w->pending_tiles -= op_tiles(w, o);
                        o->status = GEMMD_ECANCELED;
                        op_finish(w, o);
                }
        }
        pthread_mutex_unlock(&w->lock);
}

static struct group *free_slot(struct worker *w)
{
        for (uint32_t i = 0; i < w->nslots; i++)
                if (!w->slots[i].busy)
                        return &w->slots[i];
        return NULL;
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

/* Takes pending ops into g: higher priorities first; within a priority one
 * op per session in turn, so a flooding session cannot starve a light one.
 * Stops at the group caps. Called with the lock held. */
static void form_group(struct worker *w, struct group *g)
{
        const struct gemmd_config *cfg = w->cfg;
        int have_key = 0, full = 0;

        g->nops = 0;
        g->tiles = 0;
        g->bytes = 0;
        for (int p = NPRIO - 1; p >= 0 && !full; p--) {
                uint32_t skipped = 0;

                while (w->ring[p] && !full) {
                        struct lane *l = w->ring[p];
                        struct op *o = l->head;
                        uint64_t tiles;

                        if (!w->be->mixed_keys && have_key && o->key != g->key) {
                                /* Another kernel config: it waits for a later group. */
                                w->ring[p] = l->next;
                                if (++skipped > w->pending_ops)
                                        break;
                                continue;
                        }
                        tiles = op_tiles(w, o);
                        if (g->nops > 0 && (g->nops >= cfg->max_group_ops ||
                                            g->tiles + tiles > cfg->max_group_tiles ||
                                            g->bytes + o->bytes > cfg->max_group_bytes ||
                                            group_reserve(g, g->nops + 1))) {
                                full = 1;
                                break;
                        }
                        if (g->nops == 0 && group_reserve(g, 1)) {
                                full = 1;
                                break;
                        }
                        skipped = 0;
                        lane_pop(l);
                        w->ring[p] = l->next;
                        if (!l->head)
                                lane_unlink(w, p, l);
                        w->pending_ops--;
                        w->pending_tiles -= tiles;
                        if (!have_key) {
                                g->key = o->key;
                                have_key = 1;
                        }
                        g->ops[g->nops] = o;
                        g->kp[g->nops] = o->kp;
                        g->sp[g->nops] = o->sp;
                        g->nops++;
                        g->tiles += tiles;
                        g->bytes += o->bytes;
                }
        }
}

/* Hands every op of a finished group back to its request. Called with the
 * lock held, by whichever thread learns first that the group is done (the
 * backend's completion thread, to save the latency of a hop through the
 * worker). Makes no device calls. */
static void complete_ops(struct worker *w, struct group *g)
{
        const char *kname = w->be->kernel_name(w->be, g->key);

        for (uint32_t i = 0; i < g->nops; i++) {
                struct op *o = g->ops[i];
                uint64_t queue_us = (g->t_launch_ns - o->req->t_admit_ns) / 1000;

                o->status = g->status;
                o->t_launch_ns = g->t_launch_ns;
                o->t_done_ns = g->t_done_ns;
                o->group_id = g->id;
                o->group_size = g->nops;
                o->kernel = kname;
                w->st.ops++;
                if (g->status)
                        w->st.ops_failed++;
                else
                        w->st.flops += op_flops(o);
                w->st.queue_us_hist[hist_bucket(queue_us)]++;
                g->ops[i] = NULL;
                op_finish(w, o);
        }
}

/* The worker's bookkeeping of a finished group (its ops are already
 * completed): device timings, histograms, and the slot freed. Called with
 * the lock held on the worker thread. */
static void finish_group(struct worker *w, struct group *g)
{
        uint64_t run_us = (g->t_done_ns - g->t_launch_ns) / 1000;

        w->st.groups++;
        w->st.group_size_hist[hist_bucket(g->nops)]++;
        w->st.run_us_hist[hist_bucket(run_us)]++;
        w->st.tiles += g->tiles;
        if (w->be->collect) {
                uint64_t dev_ns = 0, gap_ns = 0;

                w->be->collect(w->be, g, &dev_ns, &gap_ns);
                w->st.device_ns += dev_ns;
                if (g->b2b) {
                        w->st.b2b_groups++;
                        w->st.idle_gap_ns += gap_ns;
                        w->st.idle_gaps++;
                }
        }
        g->nops = 0;
        g->busy = 0;
}

/* Builds g's plan and launches it. Called with the lock released. */
static int launch_group(struct worker *w, struct group *g)
{
        uint64_t t0 = now_ns();
        int rc;

        g->cfg.mode = w->cfg->mode;
        g->cfg.shape = w->be->shape(w->be, g->key);
        g->cfg.ctas = w->be->ctas;
        rc = sched_plan_build(&g->plan, g->sp, g->nops, &g->cfg);
        pthread_mutex_lock(&w->lock);
        w->st.plan_ns += now_ns() - t0;
        if (rc) {
                pthread_mutex_unlock(&w->lock);
                log_err("worker %d: plan of group %llu failed: %d", w->index,
                        (unsigned long long)g->id, rc);
                return rc;
        }
        g->t_launch_ns = now_ns();
        g->b2b = w->inflight > 0;
        if (w->inflight++ == 0) {
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
        rc = w->be->launch(w->be, g);
        if (rc) {
                pthread_mutex_lock(&w->lock);
                if (--w->inflight == 0)
                        w->st.busy_ns += now_ns() - w->busy_since_ns;
                pthread_mutex_unlock(&w->lock);
                log_err("worker %d: launch of group %llu failed: %d", w->index,
                        (unsigned long long)g->id, rc);
        }
        return rc;
}

void worker_control(struct worker *w, struct wctl *c)
{
        c->next = NULL;
        pthread_mutex_lock(&w->lock);
        if (w->ctl_tail)
                w->ctl_tail->next = c;
        else
                w->ctl_head = c;
        w->ctl_tail = c;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
}

void worker_group_done(struct group *g, int status)
{
        struct worker *w = g->w;

        pthread_mutex_lock(&w->lock);
        g->status = status;
        g->t_done_ns = now_ns();
        complete_ops(w, g);
        g->next_done = w->done;
        w->done = g;
        if (--w->inflight == 0) {
                w->st.busy_ns += g->t_done_ns - w->busy_since_ns;
                w->last_done_ns = g->t_done_ns;
        }
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
}

/* The earliest admission time among the queued lane heads. */
static uint64_t oldest_pending(struct worker *w)
{
        uint64_t t = UINT64_MAX;

        for (int p = 0; p < NPRIO; p++) {
                struct lane *l = w->ring[p];

                if (!l)
                        continue;
                do {
                        if (l->head->req->t_admit_ns < t)
                                t = l->head->req->t_admit_ns;
                        l = l->next;
                } while (l != w->ring[p]);
        }
        return t;
}

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        const struct gemmd_config *cfg = w->cfg;

        pthread_mutex_lock(&w->lock);
        for (;;) {
                while (w->ctl_head) {
                        struct wctl *c = w->ctl_head;

                        w->ctl_head = c->next;
                        if (!w->ctl_head)
                                w->ctl_tail = NULL;
                        pthread_mutex_unlock(&w->lock);
                        c->run(c, w);
                        if (c->done)
                                w->control_done(c, w->ctx);
                        pthread_mutex_lock(&w->lock);
                }
                while (w->done) {
                        struct group *g = w->done;

                        w->done = g->next_done;
                        finish_group(w, g);
                }
                if (w->pending_ops && w->inflight < cfg->max_groups_inflight) {
                        struct group *g = free_slot(w);

                        /* On an idle device, the batch window (if any) lets
                         * company arrive; a lone request otherwise goes now. */
                        if (g && cfg->batch_window_us && w->inflight == 0 && !w->stopping &&
                            w->pending_tiles < cfg->max_group_tiles) {
                                uint64_t due = oldest_pending(w) + cfg->batch_window_us * 1000ull;
                                uint64_t now = now_ns();

                                if (now < due) {
                                        struct timespec ts;

                                        clock_gettime(CLOCK_REALTIME, &ts);
                                        uint64_t abs = (uint64_t)ts.tv_sec * 1000000000ull +
                                                       (uint64_t)ts.tv_nsec + (due - now);
                                        ts.tv_sec = (time_t)(abs / 1000000000ull);
                                        ts.tv_nsec = (long)(abs % 1000000000ull);
                                        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
                                        continue;
                                }
                        }
                        if (g) {
                                g->busy = 1;
                                g->id = ++w->next_group_id;
                                form_group(w, g);
                                if (g->nops == 0) {
                                        g->busy = 0;
                                } else {
                                        pthread_mutex_unlock(&w->lock);
                                        int rc = launch_group(w, g);
                                        pthread_mutex_lock(&w->lock);
                                        if (rc) {
                                                g->status = GEMMD_EDEVICE;
                                                g->t_done_ns = g->t_launch_ns = now_ns();
                                                complete_ops(w, g);
                                                finish_group(w, g);
                                        }
                                }
                                continue;
                        }
                }
                if (w->stopping && !w->pending_ops && !w->inflight && !w->done && !w->ctl_head)
                        break;
                pthread_cond_wait(&w->cond, &w->lock);
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

int worker_start(struct worker *w, int index, struct backend *be, const struct gemmd_config *cfg,
                 worker_complete_fn complete, worker_control_fn control_done, void *ctx)
{
        int rc;

        memset(w, 0, sizeof(*w));
        w->index = index;
        w->be = be;
        w->cfg = cfg;
        w->complete = complete;
        w->control_done = control_done;
        w->ctx = ctx;
        w->nslots = cfg->max_groups_inflight + 1;
        w->slots = calloc(w->nslots, sizeof(*w->slots));
        if (!w->slots)
                return -ENOMEM;
        for (uint32_t i = 0; i < w->nslots; i++) {
                w->slots[i].w = w;
                sched_plan_init(&w->slots[i].plan);
                if (be->slot_init && (rc = be->slot_init(be, &w->slots[i])) != 0)
                        goto err_slots;
        }
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        rc = -pthread_create(&w->thread, NULL, worker_main, w);
        if (rc)
                goto err_sync;
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
        }
        free(w->slots);
        w->slots = NULL;
        return rc;
}

void worker_stop(struct worker *w)
{
        if (!w->started)
                return;
        pthread_mutex_lock(&w->lock);
        w->stopping = 1;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
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

void worker_get_stats(struct worker *w, struct worker_stats *st, uint32_t *pending,
                      uint32_t *inflight)
{
        pthread_mutex_lock(&w->lock);
        *st = w->st;
        if (w->inflight)
                st->busy_ns += now_ns() - w->busy_since_ns;
        *pending = w->pending_ops;
        *inflight = w->inflight;
        pthread_mutex_unlock(&w->lock);
}

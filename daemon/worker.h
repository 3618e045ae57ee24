/*
 * worker.h - one thread per device: queue, batcher, plan, launch, done.
 *
 * The loop thread enqueues ops; the worker forms groups from what is
 * pending (priorities first, then fairly across users, then one op per
 * session of the chosen user in turn; see form_group), builds each
 * group's plan while the previous group runs, launches it on its backend,
 * and hands every finished request back through the `complete` callback.
 * At most max_inflight groups are launched and unfinished at once;
 * an idle device launches a lone request at once (or after the optional
 * batch window).
 */
#ifndef GEMMD_WORKER_H
#define GEMMD_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "daemon/backend.h"
#include "daemon/config.h"
#include "daemon/work.h"

struct ulane;

/* One session's queue at one priority on one worker. Embedded in the
 * session; only touched under the worker's lock, except the staged ops,
 * which are the loop thread's until worker_enqueue hands them over. */
struct lane {
        struct op *head, *tail;
        struct lane *next, *prev; /* ring of its user's non-empty lanes of a priority */
        struct ulane *u;          /* its user's lanes at this priority */
        uint32_t queued;
        int linked;
        struct op *st_head, *st_tail; /* admitted, not yet handed to the worker */
        uint32_t staged;
};

/* One user's (uid's) standing on one worker, shared by its priorities:
 * the fair-share clock and the recent usage. Embedded in the user (see
 * users.h); only touched under the worker's lock. */
struct ushare {
        uint64_t vtime;    /* estimated device time taken so far, in cost units */
        double usage;      /* the same, decaying with a half-life of 1 s */
        uint64_t usage_ns; /* when usage was last decayed */
        uint32_t active;   /* linked ulanes */
};

/* One user's non-empty session lanes at one priority on one worker. */
struct ulane {
        struct lane *ring;          /* the session lane served next */
        struct ulane *next, *prev;  /* ring of users with work at this priority */
        struct ushare *sh;
        int linked;
};

/* A group slot. A worker owns max_inflight + 1 of them, so the next
 * group's plan can be built while the others run. */
struct group {
        struct worker *w;
        uint64_t id;
        uint32_t key;
        uint32_t nops, cap;
        struct op **ops;
        struct gemmd_kproblem *kp;
        struct sched_problem *sp;
        struct sched_config cfg;
        struct sched_plan plan;
        uint64_t tiles, bytes;
        uint64_t t_launch_ns, t_done_ns;
        int status;
        int busy;
        int b2b; /* launched while another group was in flight */
        int alone; /* formed while no other group was in flight: the device is its own */
        /* Set by launch() when the backend times this group on the device
         * (backend.collect): only those go back to the worker thread. */
        int timed;
        int resident; /* set by launch() when the backend's resident kernel took it */
        int packed;   /* set by launch() when it made packed copies of operands */
        uint32_t words_dev; /* set by launch(): ops whose completion word the GPU stores */
        struct group *next_done;
        void *bdata; /* the backend's per-slot state */
};

/* A state timed while it holds: on since since_ns. */
struct timed_state {
        int on;
        uint64_t since_ns;
};

/* Counters a worker keeps; read under its lock by the stats reply. */
struct worker_stats {
        uint64_t groups, ops, ops_failed, tiles, flops;
        uint64_t busy_ns;   /* time with at least one group in flight */
        uint64_t loaded_ns; /* time with ops queued or groups in flight: busy_ns's share of it
                             * says how much of the time the device had work it ran some */
        uint64_t plan_ns;   /* time spent building plans */
        uint64_t launch_ns; /* host time in the backend's launch() (copies, encoding, launch) */
        uint64_t run_ns;    /* launch to done seen, summed over groups */
        uint64_t group_size_hist[HIST_BUCKETS]; /* log2 buckets of ops */
        uint64_t queue_us_hist[HIST_BUCKETS];   /* log2 buckets of us */
        uint64_t run_us_hist[HIST_BUCKETS];
        uint64_t idle_gap_ns;    /* idle time between back-to-back groups */
        uint64_t idle_gaps;      /* how many such gaps */
        uint64_t device_ns;      /* device time of the timed groups (if the backend measures it) */
        uint64_t timed_groups;   /* groups whose device time was measured */
        uint64_t wide_groups;    /* groups on the backend's wide tile */
        uint64_t narrow_groups;  /* groups on the backend's narrow tile */
        uint64_t split_groups;   /* groups on a split plan (--mode split, or auto's choice) */
        uint64_t fill_groups;    /* of them, one wave cut to fill the device (the fill split) */
        uint64_t resident_groups; /* groups its resident kernel took (--resident) */
        uint64_t loop_groups;     /* groups a loop thread launched onto the idle device (--loop-launch) */
        uint64_t packed_groups;   /* groups run with packed copies of operands (cuda_gemm_pack_bytes) */
        uint64_t ops_early; /* ops answered before their group ended (--early-completion) */
        uint64_t ops_word_dev; /* of all ops, those whose completion word the GPU stored itself */
        /* An op's queue time in three parts, summed over ops: admitted to
         * handed to the worker (staged by its loop), to taken into a group
         * (waiting for the worker and a free slot), to launched (the
         * group's forming and plan build). */
        uint64_t staged_ns, waiting_ns, forming_ns;
        /* Time with ops waiting while every group slot was in flight
         * (--max-groups-inflight): how long that limit held work back. */
        uint64_t capped_ns;
        /* The part of loaded_ns the worker thread was at work: neither
         * polling for work (--spin-us) nor asleep. How near the one
         * thread that forms and launches a device's groups is to being
         * what ops wait for. (Its tasks while the device has no work,
         * such as opening a new client's memory, are not counted.) */
        uint64_t worker_ns;
        uint64_t recoveries; /* device recoveries after a group failed with GEMMD_EDEVICE */
        /* Tasks on the worker thread (clients' device memory opened,
         * allocated, closed, freed): how many, their time, and how many
         * waited for their user's share (--max-user-task-share). */
        uint64_t tasks, task_ns, tasks_held;
};

/* Hands back requests whose last op has finished, linked through their
 * `next` in the order they finished. Called without the worker's lock, on
 * whichever thread finished them (a backend's completion thread, the
 * worker, or the loop thread for cancelled ops). */
typedef void (*worker_complete_fn)(struct request *done, void *ctx);

/* A task for the worker thread that is not a group: work that needs the
 * device's context (opening a CUDA IPC handle, say). run() executes on the
 * worker thread between launches; then, if done is set, done() runs on the
 * loop thread. Whoever runs last frees the task. */
struct wctl {
        struct wctl *next;
        void *home; /* the event loop whose thread runs done (server.h); NULL: the first */
        const char *what; /* what run() does, for the log ("opening a client's memory") */
        void (*run)(struct wctl *c, struct worker *w);
        void (*done)(struct wctl *c);
        /* The user whose request this is: run()'s time is charged to its
         * share of the worker (task_share) when `charged`; a task that
         * `may_wait` (an open or an allocation, which the user asked for;
         * never a close or a free, which give back) waits while that user
         * is over its share, so that no user's memory tasks keep a device
         * from everyone's groups. */
        uint32_t uid;
        uint8_t charged, may_wait;
};

/* A user's credit of worker time for its tasks: it fills at
 * cfg->lim.max_user_task_share percent of the time that passes, up to
 * WORKER_SHARE_BURST_NS, and each task's time is taken from it. */
struct task_share {
        uint32_t uid;
        int live;
        int64_t credit_ns;
        uint64_t at_ns; /* when credit_ns was last filled */
};

#define WORKER_SHARES 32
#define WORKER_SHARE_BURST_NS 250000000ll
#define WORKER_SHARE_IDLE_NS 1000000ull

typedef void (*worker_control_fn)(struct wctl *c, void *ctx);

/* Loop thread: sends a Launched message (struct launch_notice, below) to
 * its client and frees it. The protocol layer does that (the server wires
 * dispatch.c's launch_notice_send in through worker_start): the worker
 * only builds the notice and posts it to the loop. */
typedef void (*worker_notice_fn)(struct wctl *c);

/* A GEMMD_WTRACE build's sums of where the worker thread's turns go
 * (logged at exit): its steps, and the completing thread's hold of the
 * lock in worker_group_done. */
enum wt_step {
        WT_DRAIN,      /* inbox_drain at the top of a turn */
        WT_TASKS,      /* the task lists */
        WT_DONE,       /* finish_group of timed groups */
        WT_FORM,       /* launch_next up to the plan: form_group */
        WT_PLAN,       /* take_tile and the plan */
        WT_LOCKED,     /* launch_group's two short holds of the lock, with their waits */
        WT_LAUNCH,     /* the backend's launch() */
        WT_TAIL,       /* launch_next after the launch */
        WT_TURN,       /* the rest of a turn that launched or did work */
        WT_SPIN,       /* polling for a nudge, with the lock taken again after */
        WT_SLEEP,      /* asleep on the condition */
        WT_DONE_WAIT,  /* the completing thread waiting for the lock */
        WT_DONE_HOLD,  /* and holding it */
        WT_N
};

struct worker {
        int index;
        struct backend *be;
        const struct gemmd_config *cfg;
        worker_complete_fn complete;
        worker_control_fn control_done;
        worker_notice_fn launch_notice;
        void *ctx;

        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int stopping;
        int started;

        struct ulane *ring[NPRIO];
        uint64_t vclock;       /* vtime of the op taken last (start-time fair queuing) */
        uint32_t pending_ops;  /* queued, not yet in a group */
        uint64_t pending_tiles;
        uint32_t inflight;     /* groups launched, not done */
        int loop_launch;          /* loop threads launch onto the idle device (launch_here) */
        atomic_int inflight_hint; /* inflight != 0, read without the lock (launch_here) */
        /* A thread uses the backend outside the lock: forms or launches a
         * group (launch_next), runs a task or repairs the device. One at a
         * time, so the backend sees launches, tasks and collects in turn,
         * as on one thread. */
        int backend_busy;
        int recover_pending;   /* a group failed: repair before launching */
        atomic_int sleeping;   /* waiting on cond: enqueues must signal */
        /* Batches handed over by the loops (worker_enqueue), newest first,
         * linked through their first ops' in_next: the loops never wait
         * for the lock the worker holds while it forms a group. Whoever
         * holds the lock moves them onto their lanes before it reads a
         * lane (inbox_drain). */
        _Atomic(struct op *) inbox;
        /* Bumped by every change the worker thread acts on (under the
         * lock, or after an inbox push), read without it by a worker
         * that polls before sleeping; and
         * when the worker thread last had work (worker thread only). */
        atomic_uint_fast32_t nudges;
        uint64_t active_ns;
        int broken;            /* the device cannot run anything any more */
        /* Called (worker thread) once when the device is found broken. */
        void (*device_lost)(void *ctx);
        /* Set in a device process (devhost.c), whose backend runs groups
         * for a worker in another process: worker_group_done and
         * worker_notify_launch (and worker_ops_done) go to these instead. */
        void (*hosted_done)(struct group *g, int status);
        void (*hosted_early)(struct group *g, const uint32_t *idx, uint32_t n);
        void (*hosted_launched)(struct group *g, const uint8_t handle[64], int device);
#ifdef GEMMD_WTRACE
        /* Each step's sum and count (enum wt_step), and the worker
         * thread's last mark. */
        uint64_t wt_ns[WT_N], wt_n[WT_N], wt_last;
#endif
        uint64_t busy_since_ns;
        /* Timed while they hold (loaded_update): ops queued or groups in
         * flight; ops queued and no group slot free. */
        struct timed_state loaded, capped;
        /* Set while the worker thread waits for work (spin,
         * sleep_unless_inbox); timed in idle_loaded while the device also
         * has work (idle_sync): the rest of loaded is
         * worker_stats.worker_ns. */
        int idle;
        struct timed_state idle_loaded;
        uint64_t idle_loaded_ns;
        uint64_t last_done_ns; /* when the device last became idle */
        struct group *done;    /* finished groups for the worker thread's collect() */
        struct wctl *ctl_head, *ctl_tail;
        struct group *slots;
        uint32_t nslots;
        uint32_t max_inflight; /* groups launched and unfinished at most */
        uint64_t next_group_id;
        struct worker_stats st;
        /* The longest task run on the worker thread, and those over
         * WORKER_TASK_SLOW_NS, logged as they end (task_note; worker
         * thread only): every group behind one waits for it. Their count
         * and time are in st (tasks, task_ns). */
        uint64_t task_max_ns;
        const char *task_max_what;
        uint64_t task_said_ns, task_slow_unsaid; /* the last such line; slow tasks since */
        /* Tasks waiting for their user's share (worker thread, under the
         * lock), oldest first; the shares of the users seen last; when a
         * wait was last logged (their count is st.tasks_held). */
        struct wctl *held_head, *held_tail;
        struct task_share shares[WORKER_SHARES];
        uint64_t held_said_ns;
        int hurry; /* the daemon drains: no task waits (worker_hurry) */
        /* Bumped by every finished group and control task, read by the
         * watchdog without the lock. */
        atomic_uint_fast64_t progress;
};

/* Starts the worker thread for backend `be`. Finished requests go to
 * complete, control tasks and launch notices to control_done, and each
 * notice is sent by launch_notice on the loop thread; ctx is theirs. */
int worker_start(struct worker *w, int index, struct backend *be, const struct gemmd_config *cfg,
                 worker_complete_fn complete, worker_control_fn control_done,
                 worker_notice_fn launch_notice, void *ctx);

/* Queues a control task (see struct wctl). */
void worker_control(struct worker *w, struct wctl *c);

/* Any thread: the daemon drains, and waits for the worker's tasks; from
 * now on none waits for its user's share. */
void worker_hurry(struct worker *w);

/* Hands the ops staged on lane l (the session's lane of this worker at
 * priority prio, filled by lane_stage) to the worker as one batch on its
 * inbox, without its lock (only a sleeping worker's wake-up takes it).
 * Never blocks on the device. */
void worker_enqueue(struct worker *w, struct lane *l, int prio);

/* Loop thread: appends the n ops of one request (its ops[] array) to l's
 * staged ops. */
static inline void lane_stage(struct lane *l, struct op *ops, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++) {
                ops[i].next = NULL;
                if (l->st_tail)
                        l->st_tail->next = &ops[i];
                else
                        l->st_head = &ops[i];
                l->st_tail = &ops[i];
        }
        l->staged += n;
}

/* Removes every op still queued on `lanes`, marks it GEMMD_ECANCELED and
 * completes its request if nothing else of it remains. Ops already in a
 * group run to the end. */
void worker_cancel(struct worker *w, struct lane *lanes);

/* Called by a backend from launch(), once g's work is queued on the device
 * behind the IPC event `handle` and before g can complete: tells every
 * request of g that asked for it (Submit.notify_launch). */
void worker_notify_launch(struct group *g, const uint8_t handle[64], int device);

/* A Launched message on its way to the loop thread, which sends it with
 * the worker's launch_notice (worker_notice_fn) and frees it. */
struct launch_notice {
        struct wctl c;
        struct request *r;
        uint8_t handle[64];
        int device;
        uint32_t nops;
};

/* The status the ops of a group get when its launch failed with `rc` (a
 * plan's or a backend's launch()): a gemmd code as it is, resource
 * exhaustion (-ENOMEM, -ENOSPC, -EAGAIN, descriptors) as GEMMD_ERESOURCE,
 * a refused argument (-EINVAL, -EOVERFLOW, -ERANGE) as GEMMD_EINVAL or
 * GEMMD_EOVERFLOW, and anything else as GEMMD_EDEVICE. Only the last
 * starts a device recovery. */
int worker_launch_status(int rc);

/* Called by the backend when a launched group has finished (any thread).
 * The finished requests are handed back from the calling thread, after
 * the worker's lock is released. Without a collect() the group's
 * bookkeeping is done here too, and the worker thread is woken only when
 * the freed slot lets it launch (or it is stopping). */
void worker_group_done(struct group *g, int status);

/* Called by the backend's completion thread while g still runs, when ops
 * idx[0 .. n) are done (their C whole): answers them now, with success,
 * instead of at the group's end (worker_group_done then skips them). For
 * a worker in another process (hosted_done) they go up to the daemon's
 * worker, which answers them. */
void worker_ops_done(struct group *g, const uint32_t *idx, uint32_t n);

/* Finishes what is queued and in flight, then joins the thread. */
void worker_stop(struct worker *w);

/* The progress counter, and whether work is queued or running. */
void worker_progress(struct worker *w, uint64_t *progress, int *busy);

/* Copies the counters under the worker's lock. *inflight: groups launched
 * and not yet accounted for, those done on the device whose counters the
 * worker thread has yet to add (finish_group) among them, so that a
 * reader that sees none knows the counters hold every group. */
void worker_get_stats(struct worker *w, struct worker_stats *st, uint32_t *pending,
                      uint32_t *inflight);

#endif

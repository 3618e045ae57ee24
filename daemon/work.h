/*
 * work.h - the units of work that travel from the loop thread to a worker
 * and back: a request (one Submit) holds its ops; a group is what a worker
 * launches at once.
 */
#ifndef GEMMD_WORK_H
#define GEMMD_WORK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "daemon/buffers.h"
#include "kernels/kproblem.h"
#include "scheduler/plan.h"

#define NPRIO 3 /* GEMMD_PRIO_LOW .. GEMMD_PRIO_HIGH */

struct request;
struct session;
struct worker;
struct lane;

/* One validated op. Created by the loop thread, queued on a worker, run in
 * a group, and handed back inside its request. */
struct op {
        struct op *next; /* queue link, owned by the worker's lock */
        struct request *req;
        struct gemmd_kproblem kp; /* normalized; host addresses of operands */
        struct sched_problem sp;
        struct gbuf *buf[3];      /* A, B, C: one reference each */
        uint64_t off[3];          /* byte offset of each operand in its buffer */
        uint64_t span[3];         /* bytes each operand touches */
        uint64_t bytes;           /* span[0] + span[1] + span[2] */
        uint32_t key;             /* kernel config: ops of one key can share a launch */
        int debug_fault;          /* inject a device fault (fault-injection builds only) */
        /* Outcome, written by the worker before the request completes. */
        int status;
        /* Where its queue time went: handed to the worker (from the loop's
         * staging), then taken into a group; then launched (t_launch_ns). */
        uint64_t t_enq_ns, t_pick_ns;
        uint64_t t_launch_ns, t_done_ns;
        uint64_t group_id;
        uint32_t group_size;
        const char *kernel;
        /* The first op of a batch handed to a worker without its lock
         * (worker_enqueue) carries the batch on the worker's inbox: the
         * next batch, and the lane and priority it joins (the batch's ops
         * follow through `next`). */
        struct op *in_next;
        struct lane *in_lane;
        int in_prio;
};

/*
 * Where a request stands on its one way back to its client (daemon/reply.c).
 * The thread that completes its last op sets one of the states after
 * REQ_RUNNING before it hands the request to its session's loop; the loop
 * then acts on that state and frees the request. The states say who
 * answered it and what the loop still owes:
 *
 *   REQ_RUNNING -+-> REQ_DONE ---> REQ_ANSWERED or REQ_DROPPED  (its loop answers)
 *                +-> REQ_SENT ---> REQ_SENT_LAST    (the completing thread wrote it)
 *                +-> REQ_RINGED -> REQ_RINGED_LAST  (the completing thread put it in the ring)
 *
 * (X --> X_LAST is the completing thread's own step, on the last request
 * of its write or run.) A request is created REQ_RUNNING (its zero).
 */
enum request_state {
        REQ_RUNNING,    /* admitted: its ops are queued or running */
        REQ_DONE,       /* its last op is done and nobody answered it: its loop does */
        REQ_SENT,       /* the completing thread queued its reply on the socket and wrote it */
        REQ_SENT_LAST,  /* REQ_SENT, the last of its session's in that write: the loop
                         * waits for that thread to let go of the session's output
                         * (session_reply_taken) before the session may be freed */
        REQ_RINGED,     /* the completing thread put its Completion in the session's
                         * completion ring and gave back its ops' user and
                         * daemon counts */
        REQ_RINGED_LAST, /* REQ_RINGED, the last of that run: the loop takes the ring's
                          * lock once more (ring_taken) before the ring may be unmapped */
        REQ_ANSWERED,   /* its loop answered it, in the ring or on the socket */
        REQ_DROPPED,    /* its session closed before anyone answered: no reply */
        REQ_STATES
};

/* Which dtypes the daemon's devices run (struct backend's dtypes bits):
 * dev[i] for device (worker) i of ndev, any for their union. */
struct dtype_caps {
        uint32_t any;
        const uint32_t *dev;
        int ndev;
};

/* One Submit. The loop thread owns it, except that workers decrement
 * `remaining` and the one that reaches zero hands it back. */
struct request {
        struct request *next; /* completion queue link */
        struct session *s;
        uint64_t id; /* the client's request_id: its ticket */
        uint32_t nops;
        atomic_uint remaining;
        int priority;
        int notify_launch; /* send Launched for each group of its ops */
        /* 1 + its completion word, if it may be answered by one (reply.c,
         * proto/ring.h), else 0; word_dev: the GPU may store it too, as
         * soon as its only op is done (dispatch.c word_arm). */
        uint32_t word;
        int word_dev;
        struct gbuf *words; /* its session's completion words (the session holds them) */
        enum request_state state; /* changed only by request_set_state (reply.c) */
        uint64_t launch_gid; /* the worker's: last group that noticed it */
        void *home; /* the event loop of its session (server.h), for its control tasks */
        uint64_t t_admit_ns;
        /* Bytes counted against its session's and user's budgets at
         * admission (users_inline_take): handed with its reply to the
         * frame that carries it, or given back when it is dropped. */
        uint64_t held;
        struct op ops[];
};

/* The kernel-config key of an op: data type and whether TF32 is allowed.
 * Ops of different keys never share a CUDA launch. */
static inline uint32_t op_key(const struct op *o)
{
        return (uint32_t)o->kp.dtype | (uint32_t)o->kp.tf32 << 2;
}

/* The monotonic clock in ns: every layer times with it. */
static inline uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define HIST_BUCKETS 24

/* Index of the log2 histogram bucket for v (the stats' histograms). */
static inline int hist_bucket(uint64_t v)
{
        int b = 0;

        while (v > 1 && b < HIST_BUCKETS - 1) {
                v >>= 1;
                b++;
        }
        return b;
}

/* The name of a dtype (enum gemmd_dtype) in messages, logs and metrics:
 * "f32", "f16", "bf16", "f64", or "?" for another value. */
static inline const char *dtype_name(unsigned dtype)
{
        static const char *const names[] = {"f32", "f16", "bf16", "f64"};

        return dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "?";
}

/* One step of a polling loop: tells the core it is spinning (it yields
 * the pipeline to its sibling hyperthread and saves power). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
}

#endif

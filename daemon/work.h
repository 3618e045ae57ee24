/*
 * work.h - the units of work that travel from the loop thread to a worker
 * and back: a request (one Submit) holds its ops; a group is what a worker
 * launches at once.
 */
#ifndef GEMMD_WORK_H
#define GEMMD_WORK_H

#include <stdatomic.h>
#include <stdint.h>

#include "daemon/buffers.h"
#include "kernels/kproblem.h"
#include "scheduler/plan.h"

#define NPRIO 3 /* GEMMD_PRIO_LOW .. GEMMD_PRIO_HIGH */

struct request;
struct session;
struct worker;

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
        int replied; /* answered by the thread that completed it (session_reply_now) */
        int reply_sync; /* replied, and the last of its session's in that write */
        int ring_sync;  /* put in the session's completion ring (daemon/ring.c), the
                         * last of that run: the loop waits for the ring's lock */
        int uncounted;  /* its ops' user and daemon counts were already given back */
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

/* The name of a dtype (enum gemmd_dtype) in messages, logs and metrics:
 * "f32", "f16", "bf16", "f64", or "?" for another value. */
static inline const char *dtype_name(unsigned dtype)
{
        static const char *const names[] = {"f32", "f16", "bf16", "f64"};

        return dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "?";
}

uint64_t now_ns(void);

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

/*
 * devproc.h - what the daemon and its device processes say to each other.
 *
 * With --device-process (off by default), each device is driven by
 * a process of its own: the daemon re-executes itself as `gemmd
 * --device-host FD` (devhost.c), and its worker talks to it through a
 * backend that forwards every call (backend_proc.c). A CUDA context that
 * took a sticky error cannot be used again by its process, not even after
 * a reset (scripts/cuda-recovery-probe.cu), so the
 * daemon replaces the device process instead, and keeps its sessions.
 *
 * The two talk over a SOCK_SEQPACKET socket pair, one message per packet,
 * descriptors of shared memory riding along (SCM_RIGHTS), and, for the
 * launches and completions, through two rings in memory they share (struct
 * xshared). A group's launch data (problems, plan, operand descriptors,
 * inline operands) is written by the daemon into its slot's shared memory,
 * which the device process maps once; the launch message itself only names
 * the slot. Both ends are the same binary, so structs travel as they are.
 */
#ifndef GEMMD_DEVPROC_H
#define GEMMD_DEVPROC_H

#include <stdatomic.h>
#include <stdint.h>

#include "daemon/config.h"
#include "daemon/work.h"
#include "kernels/kproblem.h"
#include "scheduler/plan.h"

enum xtype {
        X_INIT = 1,  /* daemon, fd of struct xshared: struct xinit; answered by X_READY */
        X_READY,
        X_SLOT_MAP,  /* daemon, fd: slot `slot`'s launch data is now this memory, a bytes; replied */
        X_SHM_MAP,   /* daemon, fd: map a bytes of shared memory; reply a = its handle */
        X_SHM_UNMAP, /* daemon: a = the handle; its last use is done */
        X_LAUNCH,    /* daemon: launch the group in slot `slot` */
        X_DONE,      /* device: slot's group finished with rc; c = timed, a = device ns, b = gap ns,
                      * flags = XDONE_* */
        X_LAUNCHED,  /* device: slot's group is queued behind IPC event `handle` of device rc */
        X_IPC_OPEN,  /* daemon: handle, a = offset, b = bytes; reply a = address, b = token */
        X_IPC_CLOSE, /* daemon: a = token; replied once closed */
        X_DEV_ALLOC, /* daemon: a = bytes; reply a = address, b = token, handle */
        X_DEV_FREE,  /* daemon: a = token; replied once freed */
        X_RECOVER,   /* daemon, nothing in flight: repair the device or say it cannot */
        X_REPLY,     /* device: the answer to the request numbered seq */
        X_KICK,      /* either: look at your ring (you said you would sleep) */
        X_EARLY,     /* device: a ops of slot's group done early, their indices in handle (XEARLY_MAX) */
};

/* X_DONE's flags: how the device process ran the group, for the daemon's
 * counts (gemmctl stats). */
#define XDONE_PACKED 1u   /* its operands went through packed copies */
#define XDONE_RESIDENT 2u /* the resident kernel took it */

/* Op indices an X_EARLY carries (uint32_t each, in handle). */
#define XEARLY_MAX 16u

struct xmsg {
        uint32_t type;
        uint32_t slot;
        int32_t rc;
        uint32_t flags; /* X_DONE: XDONE_* */
        uint64_t seq;
        uint64_t a, b, c;
        uint8_t handle[64];
};

/*
 * The hot messages, X_LAUNCH down and X_DONE and X_LAUNCHED up, go through
 * two rings in memory the two processes share instead of the socket: a
 * thread that polls (--spin-us) then sees one within a few hundred
 * nanoseconds and no system call is made. A consumer that goes to sleep
 * says so (sleeping) and blocks on the socket; a producer that sees it
 * sends X_KICK there. Everything else, rare and needing descriptors or a
 * reply, stays on the socket; the daemon sends X_LAUNCH only after the
 * slot it names is mapped (X_SLOT_MAP is answered), so the two paths need
 * no order between them.
 */
#define XRING 256

struct xring {
        _Atomic uint64_t head; /* the producer's */
        char pad0[56];
        _Atomic uint64_t tail; /* the consumer's */
        char pad1[56];
        _Atomic uint32_t sleeping; /* the consumer blocks (or is about to) on the socket */
        char pad2[60];
        struct xmsg m[XRING];
};

struct xshared {
        struct xring down; /* daemon to device: X_LAUNCH */
        struct xring up;   /* device to daemon: X_DONE, X_LAUNCHED */
        /* X_LAUNCHes the device process has carried out (launched on the
         * device, or failed): the daemon's worker waits for its launch to
         * be counted, as it would wait for its own launch calls, so that
         * it forms the next group no sooner than in the daemon's process
         * (a group formed sooner is smaller, and waits all the same). */
        _Atomic uint64_t launched;
        char pad[56];
};

/* Producer (one thread at a time): appends m; returns 1 when the consumer
 * sleeps and must be kicked. */
static inline int xring_push(struct xring *r, const struct xmsg *m)
{
        uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);

        while (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= XRING)
                cpu_relax(); /* never with a slot per group in flight */
        r->m[h % XRING] = *m;
        atomic_store_explicit(&r->head, h + 1, memory_order_release);
        /* Against the consumer's sleeping store then head load: one of the
         * two sees the other's. */
        atomic_thread_fence(memory_order_seq_cst);
        return atomic_load_explicit(&r->sleeping, memory_order_relaxed) != 0;
}

/* Consumer: takes the oldest message into *m; 0 when there is none. */
static inline int xring_pop(struct xring *r, struct xmsg *m)
{
        uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);

        if (t == atomic_load_explicit(&r->head, memory_order_acquire))
                return 0;
        *m = r->m[t % XRING];
        atomic_store_explicit(&r->tail, t + 1, memory_order_release);
        return 1;
}

/* Consumer, before it blocks on the socket: 1 if it may (the ring is
 * empty and a producer will kick), 0 if a message came meanwhile. */
static inline int xring_sleep(struct xring *r)
{
        atomic_store_explicit(&r->sleeping, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&r->head, memory_order_relaxed) !=
            atomic_load_explicit(&r->tail, memory_order_relaxed)) {
                atomic_store_explicit(&r->sleeping, 0, memory_order_relaxed);
                return 0;
        }
        return 1;
}

static inline void xring_awake(struct xring *r)
{
        atomic_store_explicit(&r->sleeping, 0, memory_order_relaxed);
}

#define XKEYS 8 /* kernel-config keys: dtype in bits 0-1, tf32 in bit 2 */

struct xinit {
        uint32_t type;
        int kind; /* BACKEND_CPU or BACKEND_CUDA */
        int ordinal;
        struct gemmd_config cfg; /* its pointers cleared: a device reads only numbers */
};

struct xready {
        uint32_t type;
        int32_t rc;
        int32_t pid;
        char name[64];
        uint32_t units, ctas;
        uint64_t memory_bytes;
        int32_t mixed_keys;
        uint32_t groups_inflight;
        uint8_t has_ipc, has_alloc, has_collect, has_recover;
        struct sched_shape shapes[XKEYS];
        struct sched_shape wide[XKEYS]; /* all zero: none */
        struct sched_shape narrow[XKEYS]; /* all zero: none */
        char kernels[XKEYS][48];
        uint32_t dtypes; /* struct backend's */
        int32_t resident; /* struct backend's */
};

/* Where an operand of a launched op is, for the device process. */
enum xwhere {
        XW_SHM = 0,  /* shared memory mapped by X_SHM_MAP: ref = its handle */
        XW_CUDA = 1, /* device memory: ref = the device process's token */
        XW_SLOT = 2, /* copied into the slot (an inline operand): ref = offset there */
        XW_LOST = 3, /* device memory lost with an earlier device process */
};

struct xoperand {
        uint64_t ref;
        uint64_t off;      /* of the operand in its buffer */
        uint64_t span;     /* bytes it touches */
        uint64_t bytes;    /* of the buffer */
        uint64_t alloc_off; /* CUDA: of the registered range in its allocation */
        uint32_t where;
        uint32_t pad;
};

struct xop {
        struct gemmd_kproblem kp;
        struct xoperand x[3];
        uint32_t key;
        uint8_t notify_launch;
        uint8_t debug_fault;
        uint8_t pad[2];
};

/* The head of a slot's launch data: then nops struct xop, nops struct
 * sched_problem, the plan's blob, and the inline operands (each at
 * offsets aligned to 64 from the start). */
struct xlaunch {
        uint64_t id;
        uint32_t key, nops;
        struct sched_config cfg;
        uint32_t nctas, nproblems, nentries, nsplit, ws_chunks;
        uint32_t reduce_apart; /* sched_plan.reduce_apart */
        uint64_t tiles;
        uint64_t off_cta_begin, off_entries, off_split_parts, off_split_ws;
        uint64_t blob_bytes;
        uint64_t ops_off, sp_off, blob_off; /* from the start of the slot */
};

/* The device process's main: serves the daemon on descriptor fd. */
int devhost_main(int fd);

/* 1 in a device process (a backend may act on it: fault injection). */
extern int devhost_active;

#endif

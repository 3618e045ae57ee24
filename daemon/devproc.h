/*
 * devproc.h - what the daemon and its device processes say to each other.
 *
 * With --device-process (the default on a GPU), each device is driven by
 * a process of its own: the daemon re-executes itself as `gemmd
 * --device-host FD` (devhost.c), and its worker talks to it through a
 * backend that forwards every call (backend_proc.c). A CUDA context that
 * took a sticky error cannot be used again by its process (on the H100
 * not even after a reset: bench/results/cuda-recovery-probe.txt), so the
 * daemon replaces the device process instead, and keeps its sessions.
 *
 * The two talk over a SOCK_SEQPACKET socket pair, one message per packet,
 * descriptors of shared memory riding along (SCM_RIGHTS). A group's launch
 * data (problems, plan, operand descriptors, inline operands) is written
 * by the daemon into its slot's shared memory, which the device process
 * maps once; the launch message itself only names the slot. Both ends are
 * the same binary, so structs travel as they are.
 */
#ifndef GEMMD_DEVPROC_H
#define GEMMD_DEVPROC_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

#include "daemon/config.h"
#include "daemon/work.h"
#include "kernels/kproblem.h"
#include "scheduler/plan.h"

enum xtype {
        X_INIT = 1,  /* daemon: struct xinit; answered by X_READY (struct xready) */
        X_READY,
        X_SLOT_MAP,  /* daemon, fd: slot `slot`'s launch data is now this memory, a bytes */
        X_SHM_MAP,   /* daemon, fd: map a bytes of shared memory; reply a = its handle */
        X_SHM_UNMAP, /* daemon: a = the handle; its last use is done */
        X_LAUNCH,    /* daemon: launch the group in slot `slot` */
        X_DONE,      /* device: slot's group finished with rc; c = timed, a = device ns, b = gap ns */
        X_LAUNCHED,  /* device: slot's group is queued behind IPC event `handle` of device rc */
        X_IPC_OPEN,  /* daemon: handle, a = offset, b = bytes; reply a = address, b = token */
        X_IPC_CLOSE, /* daemon: a = token */
        X_DEV_ALLOC, /* daemon: a = bytes; reply a = address, b = token, handle */
        X_DEV_FREE,  /* daemon: a = token */
        X_RECOVER,   /* daemon, nothing in flight: repair the device or say it cannot */
        X_REPLY,     /* device: the answer to the request numbered seq */
};

struct xmsg {
        uint32_t type;
        uint32_t slot;
        int32_t rc;
        uint32_t pad;
        uint64_t seq;
        uint64_t a, b, c;
        uint8_t handle[64];
};

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
        char kernels[XKEYS][48];
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
        uint32_t pad;
        uint64_t tiles;
        uint64_t off_cta_begin, off_entries, off_split_parts, off_split_ws;
        uint64_t blob_bytes;
        uint64_t ops_off, sp_off, blob_off; /* from the start of the slot */
};

/* Receives one message. Within spin_ns of `since` (the reader's last
 * message) it polls rather than sleeps: at a steady rate of groups the
 * next one is then taken without the 5-15 us of a wake-up, as the
 * daemon's other threads do (--spin-us). */
static inline ssize_t xrecv_polled(int fd, struct msghdr *mh, int flags, uint64_t spin_ns,
                                   uint64_t since)
{
        ssize_t n;

        while (spin_ns && now_ns() - since < spin_ns) {
                n = recvmsg(fd, mh, flags | MSG_DONTWAIT);
                if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                        return n;
                cpu_relax();
        }
        do
                n = recvmsg(fd, mh, flags);
        while (n < 0 && errno == EINTR);
        return n;
}

/* The device process's main: serves the daemon on descriptor fd. */
int devhost_main(int fd);

/* 1 in a device process (a backend may act on it: fault injection). */
extern int devhost_active;

#endif

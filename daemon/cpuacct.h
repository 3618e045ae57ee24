/*
 * cpuacct.h - what the daemon costs the host's CPUs, by thread role.
 *
 * Every thread the daemon starts calls cpuacct_thread_start() once with its
 * role; the module keeps that thread's CPU clock and, when the thread ends,
 * folds the clock's last value into its role's past. Nothing is done per
 * op: the clocks are read only when the stats or the metrics are rendered.
 * What no role names (the time before the main thread registered, threads
 * that libraries start, such as the CUDA driver's) is the process's total
 * less the roles' sum. A device process (--device-process) is a process of
 * its own: its time is read from its CPU clock while it lives and, once
 * it is reaped, from the children's rusage.
 *
 * All functions are thread-safe.
 */
#ifndef GEMMD_CPUACCT_H
#define GEMMD_CPUACCT_H

#include <stdint.h>
#include <sys/types.h>

struct server;

enum cpu_role {
        CPU_LOOP,           /* the event loops; loop 0 is the main thread */
        CPU_WORKER,         /* a device's worker: groups, plans, launches */
        CPU_COMPLETION,     /* the CUDA backend's completion thread */
        CPU_PIN,            /* the CUDA backend's pinning thread */
        CPU_COMPUTE,        /* the CPU backend's compute pool */
        CPU_DEVPROC_READER, /* the reader of a device process's messages */
        CPU_THREAD_ROLES,
        CPU_OTHER = CPU_THREAD_ROLES, /* the process's time no role names */
        CPU_DEVICE_PROCESS, /* the device processes, all their threads */
        CPU_ROLES,
};

/* The role's name as stats and metrics print it ("devproc-reader"). */
const char *cpuacct_role_name(enum cpu_role role);

/* Registers the calling thread under `role` until it exits. Called once,
 * first thing, by each thread the daemon starts (and by the main thread
 * for loop 0). A thread that cannot be registered (no memory) is counted
 * under "other". */
void cpuacct_thread_start(enum cpu_role role);

struct cpuacct {
        double s[CPU_ROLES];      /* CPU seconds since the start, per role */
        uint32_t n[CPU_ROLES];    /* live threads (device processes) per role */
        double process_s;         /* the daemon's process, every thread */
        double total_s;           /* process_s and the device processes */
        uint64_t ops;             /* ops run on the devices */
};

/* Reads every clock: the registered threads', the process's, the device
 * processes' of srv's backends, and the ops srv's devices have run. */
void cpuacct_read(struct server *srv, struct cpuacct *out);

#endif

/*
 * cpuacct.c - CPU seconds per thread role (cpuacct.h).
 */
#include "daemon/cpuacct.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "daemon/backend.h"
#include "daemon/server.h"

static const char *role_names[CPU_ROLES] = {
        [CPU_LOOP] = "loop",
        [CPU_WORKER] = "worker",
        [CPU_COMPLETION] = "completion",
        [CPU_PIN] = "pin",
        [CPU_COMPUTE] = "compute",
        [CPU_DEVPROC_READER] = "devproc-reader",
        [CPU_OTHER] = "other",
        [CPU_DEVICE_PROCESS] = "device-process",
};

struct slot {
        clockid_t clock;
        int role; /* -1: free */
};

/* The live threads' clocks, and what the ended ones used. A thread that
 * ends folds its time in under the lock before it is gone, so a clock in
 * the table always belongs to a live thread. */
static struct {
        pthread_mutex_t lock;
        struct slot *v;
        uint32_t n, cap;
        uint64_t ended_ns[CPU_THREAD_ROLES];
        double devproc_s; /* the last figure given: it only grows */
} A = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

const char *cpuacct_role_name(enum cpu_role role)
{
        return role >= 0 && role < CPU_ROLES ? role_names[role] : "?";
}

static uint64_t clock_ns(clockid_t clock)
{
        struct timespec ts;

        if (clock_gettime(clock, &ts) != 0)
                return 0;
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The key's destructor, run by the ending thread itself: its clock is
 * still valid here, and its slot is freed before anyone could read a
 * clock that no longer exists. */
static void thread_end(void *arg)
{
        uint32_t i = (uint32_t)(uintptr_t)arg - 1;
        uint64_t ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);

        pthread_mutex_lock(&A.lock);
        if (i < A.n && A.v[i].role >= 0) {
                A.ended_ns[A.v[i].role] += ns;
                A.v[i].role = -1;
        }
        pthread_mutex_unlock(&A.lock);
}

static void make_key(void)
{
        if (pthread_key_create(&exit_key, thread_end) != 0)
                exit_key = (pthread_key_t)-1;
}

/* A free slot of the table, grown if needed; lock held. Returns its
 * index or -ENOMEM. */
static int64_t free_slot(void)
{
        struct slot *v;
        uint32_t cap;

        for (uint32_t i = 0; i < A.n; i++)
                if (A.v[i].role < 0)
                        return i;
        if (A.n == A.cap) {
                cap = A.cap ? 2 * A.cap : 32;
                v = realloc(A.v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                A.v = v;
                A.cap = cap;
        }
        return A.n++;
}

void cpuacct_thread_start(enum cpu_role role)
{
        clockid_t clock;
        int64_t i;

        if (role < 0 || role >= CPU_THREAD_ROLES)
                return;
        pthread_once(&key_once, make_key);
        if (exit_key == (pthread_key_t)-1 || pthread_getcpuclockid(pthread_self(), &clock) != 0)
                return;
        pthread_mutex_lock(&A.lock);
        i = free_slot();
        if (i >= 0) {
                A.v[i].clock = clock;
                A.v[i].role = (int)role;
        }
        pthread_mutex_unlock(&A.lock);
        if (i >= 0 && pthread_setspecific(exit_key, (void *)(uintptr_t)(i + 1)) != 0) {
                pthread_mutex_lock(&A.lock);
                A.v[i].role = -1; /* never folded in: its time shows as "other" */
                pthread_mutex_unlock(&A.lock);
        }
}

static double tv_s(struct timeval tv)
{
        return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

/* CPU seconds of process pid, every thread of it, if it is a child of
 * ours (the pid of a device process that was reaped may already name
 * another process), else 0. Its CPU clock counts nanoseconds; /proc's
 * figures come in ticks of 10 ms, more than a short burst of work. */
static double child_s(pid_t pid)
{
        char path[64], buf[1024], *p;
        clockid_t clock;
        int ppid;
        FILE *f;
        size_t n;

        if (pid <= 0)
                return 0;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        if (!(f = fopen(path, "r")))
                return 0;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        /* The command name may hold spaces and parentheses: the fields
         * that follow start after its last ')'. */
        if (!(p = strrchr(buf, ')')))
                return 0;
        if (sscanf(p + 1, " %*c %d", &ppid) != 1 || ppid != (int)getpid() ||
            clock_getcpuclockid(pid, &clock) != 0)
                return 0;
        return clock_ns(clock) / 1e9;
}

/* The device processes' seconds: the reaped ones' (the children's rusage:
 * a device process is the daemon's only kind of child) and the live
 * ones'. Between a process's end and its reaping it may be counted in
 * neither or both for a moment; the figure given never goes down. */
static double devproc_s(struct server *srv, uint32_t *n)
{
        struct rusage ru;
        double s = 0;

        *n = 0;
        for (int i = 0; i < srv->nbackends; i++) {
                pid_t pid = backend_proc_pid(srv->backends[i]);

                if (pid > 0) {
                        s += child_s(pid);
                        ++*n;
                }
        }
        if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
                s += tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
        pthread_mutex_lock(&A.lock);
        if (s < A.devproc_s)
                s = A.devproc_s;
        A.devproc_s = s;
        pthread_mutex_unlock(&A.lock);
        return s;
}

void cpuacct_read(struct server *srv, struct cpuacct *out)
{
        struct rusage ru;
        double named = 0;

        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&A.lock);
        for (int r = 0; r < CPU_THREAD_ROLES; r++)
                out->s[r] = A.ended_ns[r] / 1e9;
        for (uint32_t i = 0; i < A.n; i++) {
                if (A.v[i].role < 0)
                        continue;
                out->s[A.v[i].role] += clock_ns(A.v[i].clock) / 1e9;
                out->n[A.v[i].role]++;
        }
        pthread_mutex_unlock(&A.lock);
        /* Read after the threads' clocks, so that it is not the smaller. */
        if (getrusage(RUSAGE_SELF, &ru) == 0)
                out->process_s = tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
        for (int r = 0; r < CPU_THREAD_ROLES; r++)
                named += out->s[r];
        out->s[CPU_OTHER] = out->process_s > named ? out->process_s - named : 0;
        out->s[CPU_DEVICE_PROCESS] = devproc_s(srv, &out->n[CPU_DEVICE_PROCESS]);
        out->total_s = out->process_s + out->s[CPU_DEVICE_PROCESS];
        for (int i = 0; i < srv->nworkers; i++) {
                struct worker_stats st;
                uint32_t pending, inflight;

                worker_get_stats(&srv->workers[i], &st, &pending, &inflight);
                out->ops += st.ops;
        }
}

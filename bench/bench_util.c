/*
 * bench_util.c - helpers of the client benchmarks (bench_util.h).
 */
#include "bench/bench_util.h"
#include "include/gemmd.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int bench_parse_int(const char *s, long lo, long hi, int *out)
{
        char *end;
        long v;

        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < lo || v > hi)
                return -1;
        *out = (int)v;
        return 0;
}

int bench_usage_error(const char *prog, const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "%s: ", prog);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry '%s --help'.\n", prog);
        return 2;
}

int bench_getopt_error(const char *prog, int c, char **argv)
{
        const char *arg = argv[optind - 1];

        if (c == ':')
                return bench_usage_error(prog, "option '%s' needs a value", arg);
        if (optopt && strncmp(arg, "--", 2))
                return bench_usage_error(prog, "unknown option '-%c'", optopt);
        return bench_usage_error(prog, "unknown option '%s'", arg);
}

int bench_socket_accepts(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t len = strlen(path);
        int fd, ok;

        if (len >= sizeof(sa.sun_path))
                return 0;
        memcpy(sa.sun_path, path, len + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return 0;
        ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        return ok;
}

int bench_default_gemmd(char *out, size_t len)
{
        char exe[PATH_MAX + 8];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        char *slash;

        if (n <= 0)
                return -1;
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (!slash)
                return -1;
        if ((size_t)(slash - exe) + sizeof("/gemmd") > len)
                return -1;
        memcpy(slash, "/gemmd", sizeof("/gemmd"));
        memcpy(out, exe, strlen(exe) + 1);
        return 0;
}

pid_t bench_gemmd_spawn(const char *path, const char *sock, const char *backend,
                        const char *const *extra, int nextra, const char *log)
{
        char *argv[BENCH_MAX_DAEMON_ARGS + 6];
        int argc = 0, fd;
        pid_t pid;

        if (nextra < 0 || nextra > BENCH_MAX_DAEMON_ARGS)
                return -1;
        argv[argc++] = (char *)path;
        argv[argc++] = "--socket";
        argv[argc++] = (char *)sock;
        argv[argc++] = "--backend";
        argv[argc++] = (char *)backend;
        for (int i = 0; i < nextra; i++)
                argv[argc++] = (char *)extra[i];
        argv[argc] = NULL;
        fflush(NULL);
        pid = fork();
        if (pid != 0)
                return pid;
        fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        /* Whatever ends the benchmark ends its daemon too. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
                _exit(126);
        close(fd);
        execv(path, argv);
        fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
        _exit(127);
}

static int cmpf(const void *a, const void *b)
{
        float x = *(const float *)a, y = *(const float *)b;

        return (x > y) - (x < y);
}

void bench_sort(float *s, size_t n)
{
        if (n)
                qsort(s, n, sizeof(float), cmpf);
}

double bench_pct(const float *s, size_t n, double q)
{
        size_t i;

        if (!n)
                return NAN;
        i = (size_t)ceil(q * (double)n);
        return s[i ? i - 1 : 0];
}

uint64_t bench_now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int bench_write_all(int fd, const void *p, size_t n)
{
        const uint8_t *b = p;

        while (n) {
                ssize_t w = write(fd, b, n);

                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EPIPE;
                b += w;
                n -= (size_t)w;
        }
        return 0;
}

int bench_read_all(int fd, void *p, size_t n)
{
        uint8_t *b = p;

        while (n) {
                ssize_t r = read(fd, b, n);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return r < 0 ? -errno : -EPIPE;
                b += r;
                n -= (size_t)r;
        }
        return 0;
}

void bench_account_add(struct bench_account *a, const struct gemmd_result *r)
{
        if (!r->group_size)
                return;
        a->queue_us += (double)r->queue_us;
        a->run_us += (double)r->run_us;
        a->group_size += r->group_size;
        a->n++;
}

void bench_hops_add(struct bench_hops *h, const struct gemmd_result *r, uint64_t t_submit,
                    uint64_t t_got)
{
        if (!r->admit_ns || r->admit_ns < t_submit || r->reply_ns < r->admit_ns || t_got < r->reply_ns)
                return;
        h->in_us += (double)(r->admit_ns - t_submit) / 1e3;
        h->out_us += (double)(t_got - r->reply_ns) / 1e3;
        h->n++;
}

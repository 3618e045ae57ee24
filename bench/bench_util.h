/*
 * bench_util.h - what `gemmbench clients` and gemmbench-latency share:
 * option parsing, latency percentiles, starting a gemmd of their own, and
 * the clock and pipe I/O between a benchmark and its client processes.
 * Plain C, no CUDA, so gemmbench-latency builds without it.
 */
#ifndef GEMMD_BENCH_UTIL_H
#define GEMMD_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Most --daemon-arg values a benchmark passes on. */
#define BENCH_MAX_DAEMON_ARGS 16

/* Parses a decimal integer in [lo, hi] into *out. Returns 0, or -1. */
int bench_parse_int(const char *s, long lo, long hi, int *out);

/* A usage error in one line, "PROG: MESSAGE", then where the help is
 * ("Try 'PROG --help'."), on stderr. Returns 2, the exit status. */
int bench_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The usage error for what getopt_long returned as c ('?' or ':', with
 * opterr 0 and a ':' first in its optstring): the option it does not know,
 * or the one missing its value. Returns 2. */
int bench_getopt_error(const char *prog, int c, char **argv);

/* 1 when a Unix socket at path accepts a connection. */
int bench_socket_accepts(const char *path);

/* The gemmd beside this binary (build/gemmd next to build/gemmbench) into
 * out. Returns 0, or -1. */
int bench_default_gemmd(char *out, size_t len);

/* Forks `gemmd --socket sock --backend backend [extra...]` from path, its
 * output to log; the daemon dies with the benchmark. Does not wait for it
 * to accept. Returns its pid, or -1. */
pid_t bench_gemmd_spawn(const char *path, const char *sock, const char *backend,
                        const char *const *extra, int nextra, const char *log);

/* Sorts n samples ascending, for bench_pct. */
void bench_sort(float *s, size_t n);

/* The q quantile (0 < q <= 1) of n sorted samples, NAN when n is 0. */
double bench_pct(const float *s, size_t n, double q);

/* Monotonic time in nanoseconds. */
uint64_t bench_now_ns(void);

/* Writes or reads all n bytes (retrying on EINTR and short transfers).
 * Return 0, -errno, or (end of file, or a write of nothing) -EPIPE. */
int bench_write_all(int fd, const void *p, size_t n);
int bench_read_all(int fd, void *p, size_t n);

struct gemmd_result;

/* The hops around the daemon, summed over n requests: submit -> admitted
 * and reply packed -> received, in us. */
struct bench_hops {
        double in_us, out_us;
        uint64_t n;
};

/* Adds one request's hops, from the stamps in its result (the daemon's
 * CLOCK_MONOTONIC) and the caller's bench_now_ns() at submit and at
 * receipt; a result without usable stamps adds nothing. */
void bench_hops_add(struct bench_hops *h, const struct gemmd_result *r, uint64_t t_submit,
                    uint64_t t_got);

/* Adds the sums of b to a. */
static inline void bench_hops_merge(struct bench_hops *a, const struct bench_hops *b)
{
        a->in_us += b->in_us;
        a->out_us += b->out_us;
        a->n += b->n;
}

/* Sums of the daemon's own account of its requests (admitted -> launched,
 * launched -> done, group size) over the n results that carried one. */
struct bench_account {
        double queue_us, run_us, group_size;
        uint64_t n;
};

/* Adds one request's account; a result without one (answered by its
 * completion word: no group) adds nothing. */
void bench_account_add(struct bench_account *a, const struct gemmd_result *r);

/* Adds the sums of b to a. */
static inline void bench_account_merge(struct bench_account *a, const struct bench_account *b)
{
        a->queue_us += b->queue_us;
        a->run_us += b->run_us;
        a->group_size += b->group_size;
        a->n += b->n;
}

#endif /* GEMMD_BENCH_UTIL_H */

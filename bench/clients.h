/*
 * clients.h - `gemmbench clients`: many client processes on one GPU, served
 * by gemmd, by cuBLAS in each process, or by cuBLAS under MPS.
 *
 * clients.c is the parent: options, the daemon or MPS it starts, the fork of
 * the clients, the start barrier, GPU memory sampling, the aggregate report.
 * clients_loop.c is one client process: its problems, its memory, its
 * window of requests, and its report to the parent.
 *
 * A client talks to the parent over one stream socketpair. The client sends
 * records, each a struct clients_msg header followed by `len` bytes:
 *
 *   CLIENTS_MSG_READY   struct clients_ready, once setup is done (or failed);
 *   CLIENTS_MSG_RESULT  struct clients_result followed by `nsamples` floats,
 *                       the latencies in microseconds of the requests that
 *                       completed inside the measured window.
 *
 * The parent answers READY with one uint64_t: the CLOCK_MONOTONIC time in
 * nanoseconds at which the warm-up starts, or 0 to tell the client to quit.
 */
#ifndef GEMMD_BENCH_CLIENTS_H
#define GEMMD_BENCH_CLIENTS_H

#include <stddef.h>
#include <stdint.h>

#include "bench/bench_util.h"

/* Problems each client owns; it cycles through them, so a window of at most
 * this many requests never has two in flight on the same C. */
#define CLIENTS_PROBLEMS 64
#define CLIENTS_MAX_WINDOW CLIENTS_PROBLEMS

enum clients_mode { CLIENTS_GEMMD, CLIENTS_CUBLAS, CLIENTS_MPS };
enum clients_memory { CLIENTS_MEM_AUTO, CLIENTS_MEM_IPC, CLIENTS_MEM_SHM };

/* What every client is told; filled in by the parent before the fork. */
struct clients_opts {
        enum clients_mode mode;
        enum clients_memory memory; /* resolved (never AUTO) before the fork */
        int nclients;
        int window;
        int max_dim;
        int k;          /* every GEMM's k; 0: drawn as m and n are */
        double beta;    /* every GEMM's beta (C = A B + beta C); 0: C only written */
        int device;
        int ndevices; /* clients spread over device .. device + ndevices - 1 */
        int timeout_ms; /* a request older than this ends its client */
        int spin;       /* gemmd mode: busy-poll for completions, never sleep */
        double seconds;
        double warmup;
        uint64_t seed;
        const char *socket; /* gemmd mode */
};

enum { CLIENTS_MSG_READY = 1, CLIENTS_MSG_RESULT = 2 };

struct clients_msg {
        uint32_t type;
        uint32_t len;
};

struct clients_ready {
        int32_t status; /* 0, or the code that ended setup */
        char msg[160];  /* why, when status != 0 */
};

/* Counts of one client. Every request it submitted ends in exactly one of
 * ok, errors or timeouts: submitted == ok + errors + timeouts. */
struct clients_result {
        uint64_t submitted;
        uint64_t ok;
        uint64_t errors;   /* non-zero statuses and failed submits */
        uint64_t timeouts; /* in flight when the client gave up waiting */
        uint64_t check_errors; /* sampled elements of C that were wrong */
        uint64_t window_requests; /* completed inside the measured window */
        double window_flops;
        /* gemmd mode: the daemon's own account of the window's requests
         * (one answered by its completion word carries none). */
        struct bench_account account;
        /* ... and of the hops around it, from the daemon's stamps (same
         * clock): submit -> admitted, reply packed -> seen here. */
        struct bench_hops hops;
        int32_t first_error;
        char first_error_msg[160];
        uint64_t nsamples;
};

/* gemmbench's `clients` subcommand; argv[0] is "clients". Returns the exit
 * status: 0 when every request succeeded, 1 otherwise, 2 on bad usage. */
int bench_clients_main(int argc, char **argv);

/* Runs client `index` in a freshly forked process, reporting on fd; never
 * uses anything of the parent's but `o`. Returns the process's exit status. */
int clients_child(const struct clients_opts *o, int index, int fd);

#endif /* GEMMD_BENCH_CLIENTS_H */

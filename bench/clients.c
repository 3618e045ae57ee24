/*
 * clients.c - `gemmbench clients`: the parent of many client processes on
 * one GPU (see clients.h, and clients_loop.c for one client).
 *
 *   gemmbench clients --clients N --window W --max-dim D --seconds S
 *                     --mode gemmd|cublas|mps [--memory auto|ipc|shm]
 *                     [--socket PATH] [--json] ...   (--help lists all)
 *
 * The parent never touches CUDA: it starts what the mode needs (a gemmd on
 * a socket in a temporary directory unless --socket names one; or an MPS
 * control daemon with private pipe and log directories), forks the clients,
 * waits until every client has set itself up, gives them one common start
 * time, samples the GPU memory of the processes involved with nvidia-smi
 * while they run, collects their reports, stops what it started and prints
 * the aggregate: TF/s and requests/s of the measured window, latency
 * percentiles, errors, memory. Every request is accounted for: one that
 * failed, timed out or computed a wrong sampled element is an error, a
 * client that could not set up or report counts as one, and any error makes
 * the exit status 1 (the report is printed all the same).
 *
 * Memory: the peak over the run of the summed used_memory that
 * `nvidia-smi --query-compute-apps` gives for the client pids and the
 * server's (the gemmd daemon, found by SO_PEERCRED on its socket, or the
 * MPS server); also the peak of the device's memory.used and its value
 * before the clients started. nvidia-smi is sampled every 500 ms.
 */
#include "bench/clients.h"
#include "bench/bench_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "include/gemmd.h"

#define MAX_CLIENTS 512
/* Processes coming and going beside the clients at most (--churn). */
#define MAX_CHURN 16
#define DAEMON_START_MS 60000
#define DAEMON_STOP_MS 20000
#define MPS_CMD_MS 20000
#define SAMPLE_NS 500000000ull
#define DRAIN_SLACK_NS 30000000000ull

struct child {
        pid_t pid;
        int fd;
        uint8_t *buf;
        size_t len, cap;
        int eof;
        int ready; /* 0 not yet, 1 set up, -1 failed */
        struct clients_ready rd;
        int have_result;
        int go; /* a churn process: its start time sent */
        struct clients_result res;
        float *samples;
        int status; /* from waitpid; -1 before */
};

struct mem {
        int available;
        int samples;
        double clients, server, all, device; /* peaks, MiB */
        double total;                        /* peak of clients + server */
        double device_base;
};

struct run {
        struct clients_opts o;
        int json;
        int setup_timeout_s;
        const char *backend;
        const char *gemmd_path;
        const char *daemon_args[BENCH_MAX_DAEMON_ARGS];
        int ndaemon_args;

        char dir[128]; /* short: socket paths must fit in 108 bytes */
        char sock[160];
        char daemon_log[160];
        pid_t daemon_pid;  /* a gemmd we started */
        pid_t server_pid;  /* the gemmd serving us, started or not */
        int daemon_exit;   /* its exit status once stopped, -1 unknown */
        char daemon_backend[16];

        int mps_started;
        char mps_pipe[160];
        char mps_log[160];

        struct child *ch;
        int nforked;
        /* --churn: slots of short-lived clients started one after another
         * while the clients run, each a new process that sets up (its
         * context, connection and memory), runs a few requests and exits:
         * what a node's scripts and jobs coming and going do to the
         * clients. They are counted, not measured. */
        int nchurn;
        struct clients_opts churn_o;
        struct child churn[MAX_CHURN];
        uint64_t churned, churn_failed;
        char churn_error[160];
        double setup_s;
        struct mem mem;
        char fatal[160]; /* why no client could run, if so */
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) { interrupted = sig; }

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

        nanosleep(&ts, NULL);
}

/* ---- options ---------------------------------------------------------- */

static void usage(FILE *f)
{
        fprintf(f,
                "usage: gemmbench clients [options]\n"
                "\n"
                "N client processes, each with its own %d random bf16 GEMMs (m, n, k uniform in\n"
                "{64, 128, ..., D}), keep W requests in flight for S seconds after a warm-up.\n"
                "\n"
                "  --clients N         client processes (default 1)\n"
                "  --window W          requests in flight per client, 1..%d (default 1)\n"
                "  --max-dim D         largest m, n, k; a multiple of 64 (default 1024)\n"
                "  --k K               every GEMM's k instead, a multiple of 64 up to 65536\n"
                "                      (a lone GEMM of long K: few tiles, many steps)\n"
                "  --beta X            every GEMM adds X times C (C = A B + X C; default 0: C\n"
                "                      is only written); C then starts random, not NaN\n"
                "  --seconds S         measured window (default 2)\n"
                "  --warmup S          unmeasured warm-up before it (default 0.5)\n"
                "  --mode M            gemmd | cublas | mps (default gemmd)\n"
                "  --memory M          gemmd mode: ipc (cudaMalloc + CUDA IPC), shm (shared\n"
                "                      memory, the daemon stages it) or auto: ipc when the\n"
                "                      daemon's backend is cuda, else shm (default auto)\n"
                "  --socket PATH       use this running gemmd instead of starting one\n"
                "  --backend B         --backend of the gemmd started (default auto)\n"
                "  --gemmd PATH        the gemmd to start (default: beside this binary)\n"
                "  --daemon-arg ARG    one more argument for the gemmd started (repeatable)\n"
                "  --device N          CUDA device of the clients and nvidia-smi (default 0)\n"
                "  --devices N         spread the clients over N devices from --device on,\n"
                "                      client i on device + i %% N (default 1)\n"
                "  --timeout-ms MS     a request older than this ends its client (default 10000)\n"
                "  --setup-timeout S   time allowed for the clients' setup (default 120)\n"
                "  --seed N            problem and data seed (default 1)\n"
                "  --churn N           keep N more client processes coming and going while\n"
                "                      the clients run: each sets up as a client does, runs a\n"
                "                      short window of one request at a time and exits, and\n"
                "                      another takes its place; counted, not measured (0..%d,\n"
                "                      default 0)\n"
                "  --spin              gemmd mode: clients busy-poll for completions and never\n"
                "                      sleep (default: poll as long as libgemmd's waits do,\n"
                "                      $GEMMD_SPIN_US or 200 us, then sleep in poll())\n"
                "  --json              print one JSON object\n"
                "  --help              this text\n",
                CLIENTS_PROBLEMS, CLIENTS_MAX_WINDOW, MAX_CHURN);
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
        char *end;
        double v;

        errno = 0;
        v = strtod(s, &end);
        if (errno || end == s || *end || !(v >= lo && v <= hi))
                return -1;
        *out = v;
        return 0;
}

enum {
        OPT_CLIENTS = 256, OPT_WINDOW, OPT_MAXDIM, OPT_K, OPT_BETA, OPT_SECONDS, OPT_WARMUP, OPT_MODE, OPT_MEMORY,
        OPT_SOCKET, OPT_BACKEND, OPT_GEMMD, OPT_DARG, OPT_DEVICE, OPT_DEVICES, OPT_TIMEOUT, OPT_SETUP,
        OPT_SEED, OPT_CHURN, OPT_SPIN, OPT_JSON, OPT_HELP,
};

static const struct option options[] = {
        {"clients", required_argument, NULL, OPT_CLIENTS},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"max-dim", required_argument, NULL, OPT_MAXDIM},
        {"k", required_argument, NULL, OPT_K},
        {"beta", required_argument, NULL, OPT_BETA},
        {"seconds", required_argument, NULL, OPT_SECONDS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"mode", required_argument, NULL, OPT_MODE},
        {"memory", required_argument, NULL, OPT_MEMORY},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"gemmd", required_argument, NULL, OPT_GEMMD},
        {"daemon-arg", required_argument, NULL, OPT_DARG},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"devices", required_argument, NULL, OPT_DEVICES},
        {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
        {"setup-timeout", required_argument, NULL, OPT_SETUP},
        {"seed", required_argument, NULL, OPT_SEED},
        {"churn", required_argument, NULL, OPT_CHURN},
        {"spin", no_argument, NULL, OPT_SPIN},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
};

static int parse_args(struct run *r, int argc, char **argv)
{
        int c, seed, idx = 0;

        r->o.nclients = 1;
        r->o.window = 1;
        r->o.max_dim = 1024;
        r->o.seconds = 2;
        r->o.warmup = 0.5;
        r->o.mode = CLIENTS_GEMMD;
        r->o.memory = CLIENTS_MEM_AUTO;
        r->o.timeout_ms = 10000;
        r->o.ndevices = 1;
        r->o.seed = 1;
        r->setup_timeout_s = 120;
        r->backend = "auto";
        optind = 1;
        opterr = 0; /* bench_getopt_error says it in one line */
        while ((c = getopt_long(argc, argv, ":", options, &idx)) != -1) {
                int bad = 0;

                switch (c) {
                case OPT_CLIENTS:
                        bad = bench_parse_int(optarg, 1, MAX_CLIENTS, &r->o.nclients);
                        break;
                case OPT_WINDOW:
                        bad = bench_parse_int(optarg, 1, CLIENTS_MAX_WINDOW, &r->o.window);
                        break;
                case OPT_MAXDIM:
                        bad = bench_parse_int(optarg, 64, 16384, &r->o.max_dim) || r->o.max_dim % 64;
                        break;
                case OPT_K:
                        bad = bench_parse_int(optarg, 64, 65536, &r->o.k) || r->o.k % 64;
                        break;
                case OPT_BETA:
                        /* |beta| <= 1: C accumulates thousands of results a second. */
                        bad = parse_double(optarg, -1, 1, &r->o.beta);
                        break;
                case OPT_SECONDS:
                        bad = parse_double(optarg, 0.01, 3600, &r->o.seconds);
                        break;
                case OPT_WARMUP:
                        bad = parse_double(optarg, 0, 3600, &r->o.warmup);
                        break;
                case OPT_MODE:
                        if (!strcmp(optarg, "gemmd"))
                                r->o.mode = CLIENTS_GEMMD;
                        else if (!strcmp(optarg, "cublas"))
                                r->o.mode = CLIENTS_CUBLAS;
                        else if (!strcmp(optarg, "mps"))
                                r->o.mode = CLIENTS_MPS;
                        else
                                bad = 1;
                        break;
                case OPT_MEMORY:
                        if (!strcmp(optarg, "ipc"))
                                r->o.memory = CLIENTS_MEM_IPC;
                        else if (!strcmp(optarg, "shm"))
                                r->o.memory = CLIENTS_MEM_SHM;
                        else if (!strcmp(optarg, "auto"))
                                r->o.memory = CLIENTS_MEM_AUTO;
                        else
                                bad = 1;
                        break;
                case OPT_SOCKET:
                        r->o.socket = optarg;
                        break;
                case OPT_BACKEND:
                        r->backend = optarg;
                        bad = strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda");
                        break;
                case OPT_GEMMD:
                        r->gemmd_path = optarg;
                        break;
                case OPT_DARG:
                        bad = r->ndaemon_args == BENCH_MAX_DAEMON_ARGS;
                        if (!bad)
                                r->daemon_args[r->ndaemon_args++] = optarg;
                        break;
                case OPT_DEVICE:
                        bad = bench_parse_int(optarg, 0, 1023, &r->o.device);
                        break;
                case OPT_DEVICES:
                        bad = bench_parse_int(optarg, 1, 64, &r->o.ndevices);
                        break;
                case OPT_TIMEOUT:
                        bad = bench_parse_int(optarg, 1, 3600000, &r->o.timeout_ms);
                        break;
                case OPT_SETUP:
                        bad = bench_parse_int(optarg, 1, 3600, &r->setup_timeout_s);
                        break;
                case OPT_SEED:
                        bad = bench_parse_int(optarg, 0, INT32_MAX, &seed);
                        r->o.seed = (uint64_t)seed;
                        break;
                case OPT_CHURN:
                        bad = bench_parse_int(optarg, 0, MAX_CHURN, &r->nchurn);
                        break;
                case OPT_SPIN:
                        r->o.spin = 1;
                        break;
                case OPT_JSON:
                        r->json = 1;
                        break;
                case OPT_HELP:
                        usage(stdout);
                        return 1;
                default:
                        return bench_getopt_error("gemmbench clients", c, argv);
                }
                if (bad)
                        return bench_usage_error("gemmbench clients", "invalid value for --%s: %s",
                                                 options[idx].name, optarg);
        }
        if (optind < argc)
                return bench_usage_error("gemmbench clients", "unexpected argument: %s",
                                         argv[optind]);
        if (r->o.mode != CLIENTS_GEMMD && (r->o.socket || r->o.memory != CLIENTS_MEM_AUTO)) {
                fprintf(stderr, "gemmbench clients: --socket and --memory belong to --mode gemmd\n");
                return 2;
        }
        return 0;
}

static const char *mode_name(enum clients_mode m)
{
        return m == CLIENTS_GEMMD ? "gemmd" : m == CLIENTS_CUBLAS ? "cublas" : "mps";
}

static const char *memory_name(const struct run *r)
{
        if (r->o.mode != CLIENTS_GEMMD)
                return "device";
        return r->o.memory == CLIENTS_MEM_IPC ? "ipc" : r->o.memory == CLIENTS_MEM_SHM ? "shm" : "auto";
}

/* ---- temporary directory and child processes ------------------------- */

static int make_dir(struct run *r)
{
        const char *tmp = getenv("TMPDIR");

        /* Socket paths must fit in 108 bytes. */
        if (!tmp || !*tmp || strlen(tmp) > 60)
                tmp = "/tmp";
        snprintf(r->dir, sizeof(r->dir), "%s/gemmbench-XXXXXX", tmp);
        if (!mkdtemp(r->dir)) {
                fprintf(stderr, "gemmbench clients: mkdtemp %s: %s\n", r->dir, strerror(errno));
                r->dir[0] = '\0';
                return -1;
        }
        return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st, (void)flag, (void)ftw;
        return remove(path);
}

static void remove_dir(struct run *r)
{
        if (r->dir[0])
                nftw(r->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        r->dir[0] = '\0';
}

/* Waits up to ms for pid. Returns its status, or -1 if it is still running. */
static int wait_pid(pid_t pid, int ms)
{
        uint64_t deadline = bench_now_ns() + (uint64_t)ms * 1000000u;
        int st;

        for (;;) {
                pid_t w = waitpid(pid, &st, WNOHANG);

                if (w == pid)
                        return st;
                if (w < 0 && errno != EINTR)
                        return 0; /* not our child any more */
                if (bench_now_ns() >= deadline)
                        return -1;
                sleep_ms(10);
        }
}

/* Runs argv (searched in $PATH) with stdin from `input` (NULL: /dev/null)
 * and stdout and stderr to `log` (NULL: inherited), waiting up to ms.
 * Returns its exit status, or -1 (not started, killed, timed out). */
static int run_cmd(char *const argv[], const char *input, const char *log, int ms)
{
        int in[2], st;
        pid_t pid;

        if (pipe(in) < 0)
                return -1;
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                close(in[0]);
                close(in[1]);
                return -1;
        }
        if (pid == 0) {
                int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;

                dup2(in[0], STDIN_FILENO);
                close(in[0]);
                close(in[1]);
                if (fd >= 0) {
                        dup2(fd, STDOUT_FILENO);
                        dup2(fd, STDERR_FILENO);
                        close(fd);
                }
                execvp(argv[0], argv);
                fprintf(stderr, "gemmbench clients: exec %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        close(in[0]);
        if (input)
                bench_write_all(in[1], input, strlen(input));
        close(in[1]);
        st = wait_pid(pid, ms);
        if (st == -1) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                fprintf(stderr, "gemmbench clients: %s did not finish in %d ms\n", argv[0], ms);
                return -1;
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void print_file(const char *path, const char *what)
{
        FILE *f = fopen(path, "r");
        char line[512];

        if (!f)
                return;
        fprintf(stderr, "---- %s (%s) ----\n", what, path);
        while (fgets(line, sizeof(line), f))
                fputs(line, stderr);
        fprintf(stderr, "---- end of %s ----\n", what);
        fclose(f);
}

/* ---- gemmd ------------------------------------------------------------ */

/* Starts gemmd on a socket in r->dir and waits until it accepts. */
static int daemon_start(struct run *r)
{
        char path[PATH_MAX];
        uint64_t deadline;
        pid_t pid;

        if (r->gemmd_path)
                snprintf(path, sizeof(path), "%s", r->gemmd_path);
        else if (bench_default_gemmd(path, sizeof(path)))
                return -1;
        snprintf(r->sock, sizeof(r->sock), "%s/gemmd.sock", r->dir);
        snprintf(r->daemon_log, sizeof(r->daemon_log), "%s/gemmd.log", r->dir);
        pid = bench_gemmd_spawn(path, r->sock, r->backend, r->daemon_args, r->ndaemon_args, r->daemon_log);
        if (pid < 0)
                return -1;
        r->daemon_pid = pid;
        deadline = bench_now_ns() + DAEMON_START_MS * 1000000ull;
        while (!bench_socket_accepts(r->sock)) {
                int st;

                if (waitpid(pid, &st, WNOHANG) == pid) {
                        r->daemon_pid = 0;
                        r->daemon_exit = st;
                        fprintf(stderr, "gemmbench clients: %s exited before it was ready\n", path);
                        print_file(r->daemon_log, "gemmd log");
                        return -1;
                }
                if (bench_now_ns() > deadline || interrupted) {
                        fprintf(stderr, "gemmbench clients: %s did not come up\n", path);
                        print_file(r->daemon_log, "gemmd log");
                        return -1;
                }
                sleep_ms(5);
        }
        r->o.socket = r->sock;
        return 0;
}

/* SIGTERM, then a drain of up to DAEMON_STOP_MS; SIGKILL after that.
 * Returns 0 if the daemon exited with status 0. */
static int daemon_stop(struct run *r)
{
        int st;

        if (!r->daemon_pid)
                return 0;
        kill(r->daemon_pid, SIGTERM);
        st = wait_pid(r->daemon_pid, DAEMON_STOP_MS);
        if (st == -1) {
                kill(r->daemon_pid, SIGKILL);
                waitpid(r->daemon_pid, &st, 0);
                fprintf(stderr, "gemmbench clients: gemmd did not stop on SIGTERM\n");
        }
        r->daemon_pid = 0;
        r->daemon_exit = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r->daemon_exit) {
                fprintf(stderr, "gemmbench clients: gemmd exited with status %d\n", r->daemon_exit);
                print_file(r->daemon_log, "gemmd log");
                return -1;
        }
        return 0;
}

/* Learns the daemon's backend, the memory path to use, and its pid. */
static int daemon_probe(struct run *r)
{
        struct ucred cred;
        socklen_t len = sizeof(cred);
        struct gemmd_info info;
        gemmd_client *c;
        int err = gemmd_connect(r->o.socket, &c);

        if (err) {
                fprintf(stderr, "gemmbench clients: cannot connect to %s: %s\n", r->o.socket,
                        gemmd_strerror(err));
                return -1;
        }
        gemmd_get_info(c, &info);
        snprintf(r->daemon_backend, sizeof(r->daemon_backend), "%s", info.backend);
        if (!getsockopt(gemmd_fd(c), SOL_SOCKET, SO_PEERCRED, &cred, &len))
                r->server_pid = cred.pid;
        gemmd_disconnect(c);
        if (r->o.memory == CLIENTS_MEM_AUTO)
                r->o.memory = !strcmp(r->daemon_backend, "cuda") ? CLIENTS_MEM_IPC : CLIENTS_MEM_SHM;
        return 0;
}

/* ---- MPS -------------------------------------------------------------- */

/* Calls fn(pid) for every process whose environment carries our MPS pipe
 * directory: the control daemon we started and the server it started. */
static int mps_procs(const struct run *r, void (*fn)(pid_t pid, const struct run *r))
{
        char want[192], path[64];
        size_t wlen;
        struct dirent *de;
        DIR *d = opendir("/proc");
        int n = 0;

        if (!d)
                return 0;
        wlen = (size_t)snprintf(want, sizeof(want), "CUDA_MPS_PIPE_DIRECTORY=%s", r->mps_pipe) + 1;
        while ((de = readdir(d))) {
                char *env;
                long pid = strtol(de->d_name, &env, 10);
                char buf[65536];
                ssize_t got;
                int fd;

                if (*env || pid <= 0 || pid == getpid())
                        continue;
                snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                got = read(fd, buf, sizeof(buf));
                close(fd);
                for (ssize_t i = 0; got > 0 && i + (ssize_t)wlen <= got;) {
                        if (!memcmp(buf + i, want, wlen)) {
                                /* Clients carry it too: count only MPS's own. */
                                char comm[64] = "";
                                FILE *f;

                                snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
                                if ((f = fopen(path, "r"))) {
                                        if (!fgets(comm, sizeof(comm), f))
                                                comm[0] = '\0';
                                        fclose(f);
                                }
                                if (!strncmp(comm, "nvidia-cuda-mps", 15)) {
                                        if (fn)
                                                fn((pid_t)pid, r);
                                        n++;
                                }
                                break;
                        }
                        i += (ssize_t)strlen(buf + i) + 1;
                }
        }
        closedir(d);
        return n;
}

static int mps_start(struct run *r)
{
        char *argv[] = {"nvidia-cuda-mps-control", "-d", NULL};
        char log[192];

        snprintf(r->mps_pipe, sizeof(r->mps_pipe), "%s/mps-pipe", r->dir);
        snprintf(r->mps_log, sizeof(r->mps_log), "%s/mps-log", r->dir);
        if (mkdir(r->mps_pipe, 0700) || mkdir(r->mps_log, 0700)) {
                fprintf(stderr, "gemmbench clients: mkdir: %s\n", strerror(errno));
                return -1;
        }
        /* The control daemon and every client find each other through these. */
        setenv("CUDA_MPS_PIPE_DIRECTORY", r->mps_pipe, 1);
        setenv("CUDA_MPS_LOG_DIRECTORY", r->mps_log, 1);
        snprintf(log, sizeof(log), "%s/start.log", r->mps_log);
        if (run_cmd(argv, NULL, log, MPS_CMD_MS) != 0) {
                fprintf(stderr, "gemmbench clients: nvidia-cuda-mps-control -d failed\n");
                print_file(log, "nvidia-cuda-mps-control");
                return -1;
        }
        r->mps_started = 1;
        return 0;
}

static void mps_print_logs(const struct run *r)
{
        char path[192];

        snprintf(path, sizeof(path), "%s/control.log", r->mps_log);
        print_file(path, "MPS control log");
        snprintf(path, sizeof(path), "%s/server.log", r->mps_log);
        print_file(path, "MPS server log");
}

static void kill_pid(pid_t pid, const struct run *r)
{
        (void)r;
        kill(pid, SIGKILL);
}

/* Asks the control daemon to quit, waits for it and its server to go, and
 * kills by pid whatever of them is left. */
static void mps_stop(struct run *r)
{
        char *argv[] = {"nvidia-cuda-mps-control", NULL};
        char log[192];
        uint64_t deadline;

        if (!r->mps_started)
                return;
        snprintf(log, sizeof(log), "%s/stop.log", r->mps_log);
        if (run_cmd(argv, "quit\n", log, MPS_CMD_MS) != 0)
                fprintf(stderr, "gemmbench clients: 'quit' to nvidia-cuda-mps-control failed\n");
        deadline = bench_now_ns() + 10000000000ull;
        while (mps_procs(r, NULL) && bench_now_ns() < deadline)
                sleep_ms(20);
        if (mps_procs(r, kill_pid))
                fprintf(stderr, "gemmbench clients: MPS did not quit; killed it\n");
        r->mps_started = 0;
}

/* ---- GPU memory ------------------------------------------------------- */

static int is_client(const struct run *r, long pid)
{
        for (int i = 0; i < r->nforked; i++)
                if (r->ch[i].pid == pid)
                        return 1;
        return 0;
}

/* The devices the clients use, as nvidia-smi -i takes them ("0,1,2"). */
static void device_list(const struct run *r, char *out, size_t len)
{
        size_t n = 0;

        out[0] = 0;
        for (int i = 0; i < r->o.ndevices && n < len; i++)
                n += (size_t)snprintf(out + n, len - n, "%s%d", i ? "," : "", r->o.device + i);
}

/* One nvidia-smi sample, summed over the clients' devices. Returns 0, or
 * -1 when nvidia-smi gave nothing. */
static int mem_sample(struct run *r, int baseline)
{
        char cmd[1024], line[512], ids[512];
        double clients = 0, server = 0, all = 0, device = -1;
        FILE *f;

        device_list(r, ids, sizeof(ids));
        snprintf(cmd, sizeof(cmd),
                 "nvidia-smi -i %s --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null", ids);
        if ((f = popen(cmd, "r"))) {
                while (fgets(line, sizeof(line), f))
                        device = (device < 0 ? 0 : device) + strtod(line, NULL);
                pclose(f);
        }
        if (device < 0)
                return -1;
        if (baseline) {
                r->mem.device_base = device;
                return 0;
        }
        snprintf(cmd, sizeof(cmd),
                 "nvidia-smi -i %s --query-compute-apps=pid,used_memory,process_name "
                 "--format=csv,noheader,nounits 2>/dev/null",
                 ids);
        if ((f = popen(cmd, "r"))) {
                while (fgets(line, sizeof(line), f)) {
                        char *p = line, *end;
                        long pid = strtol(p, &end, 10);
                        double mib;

                        if (end == p || *end != ',')
                                continue;
                        p = end + 1;
                        mib = strtod(p, &end);
                        if (end == p)
                                continue; /* "[N/A]" */
                        all += mib;
                        if (is_client(r, pid))
                                clients += mib;
                        else if ((r->server_pid && pid == r->server_pid) ||
                                 strstr(end, "nvidia-cuda-mps-server"))
                                server += mib;
                }
                pclose(f);
        }
        r->mem.available = 1;
        r->mem.samples++;
        if (device > r->mem.device)
                r->mem.device = device;
        if (clients > r->mem.clients)
                r->mem.clients = clients;
        if (server > r->mem.server)
                r->mem.server = server;
        if (all > r->mem.all)
                r->mem.all = all;
        if (clients + server > r->mem.total)
                r->mem.total = clients + server;
        return 0;
}

/* ---- clients ---------------------------------------------------------- */

/* In a freshly forked client: dies with the parent, takes the default
 * signal actions back, and closes the other clients' sockets (its own
 * slot has no pid and no socket yet in this process). */
static void child_enter(struct run *r)
{
        pid_t parent = getppid();

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
                _exit(1);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGPIPE, SIG_IGN);
        for (int i = 0; i < r->nforked; i++)
                if (r->ch[i].fd >= 0)
                        close(r->ch[i].fd);
        for (int i = 0; i < r->nchurn; i++)
                if (r->churn[i].pid > 0)
                        close(r->churn[i].fd);
}

/* Forks client `index` of options o into c, which reports on c->fd (non-
 * blocking here). Returns 0, or -errno with nothing left open. */
static int child_fork(struct run *r, struct child *c, const struct clients_opts *o, int index)
{
        int sv[2], err;

        c->status = -1;
        c->fd = -1;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        fflush(NULL);
        c->pid = fork();
        if (c->pid < 0) {
                err = errno;
                c->pid = 0;
                close(sv[0]);
                close(sv[1]);
                return -err;
        }
        if (c->pid == 0) {
                close(sv[0]);
                child_enter(r);
                _exit(clients_child(o, index, sv[1]));
        }
        close(sv[1]);
        c->fd = sv[0];
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        return 0;
}

static int fork_clients(struct run *r)
{
        for (int i = 0; i < r->o.nclients; i++) {
                int err = child_fork(r, &r->ch[i], &r->o, i);

                if (err) {
                        fprintf(stderr, "gemmbench clients: cannot start client %d: %s\n", i, strerror(-err));
                        return -1;
                }
                r->nforked++;
        }
        return 0;
}

/* Sends c (ready, blocking for this write) its start time t; 0 tells it
 * to quit. Returns 0 or -1. */
static int child_start(struct child *c, uint64_t t)
{
        int fl = fcntl(c->fd, F_GETFL), rc;

        fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
        rc = bench_write_all(c->fd, &t, sizeof(t)) ? -1 : 0;
        fcntl(c->fd, F_SETFL, fl);
        return rc;
}

/* Takes the complete records at the start of c->buf. */
static void child_parse(struct child *c)
{
        size_t off = 0;

        while (c->len - off >= sizeof(struct clients_msg)) {
                struct clients_msg m;
                const uint8_t *body;

                memcpy(&m, c->buf + off, sizeof(m));
                if (c->len - off - sizeof(m) < m.len)
                        break;
                body = c->buf + off + sizeof(m);
                if (m.type == CLIENTS_MSG_READY && m.len == sizeof(c->rd)) {
                        memcpy(&c->rd, body, sizeof(c->rd));
                        c->rd.msg[sizeof(c->rd.msg) - 1] = '\0';
                        c->ready = c->rd.status ? -1 : 1;
                } else if (m.type == CLIENTS_MSG_RESULT && m.len >= sizeof(c->res)) {
                        memcpy(&c->res, body, sizeof(c->res));
                        c->res.first_error_msg[sizeof(c->res.first_error_msg) - 1] = '\0';
                        if (m.len == sizeof(c->res) + c->res.nsamples * sizeof(float)) {
                                c->samples = malloc(c->res.nsamples * sizeof(float) + 1);
                                if (c->samples) {
                                        memcpy(c->samples, body + sizeof(c->res),
                                               c->res.nsamples * sizeof(float));
                                        c->have_result = 1;
                                }
                        }
                }
                off += sizeof(m) + m.len;
        }
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
}

/* Reads what a client has sent. */
static void child_read(struct child *c)
{
        for (;;) {
                ssize_t n;

                if (c->cap - c->len < 65536) {
                        size_t cap = c->cap ? 2 * c->cap : 131072;
                        uint8_t *b = realloc(c->buf, cap);

                        if (!b) {
                                c->eof = 1;
                                return;
                        }
                        c->buf = b;
                        c->cap = cap;
                }
                n = read(c->fd, c->buf + c->len, c->cap - c->len);
                if (n > 0) {
                        c->len += (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        break;
                c->eof = 1;
                break;
        }
        child_parse(c);
}

/* Polls the clients' sockets for up to ms and reads what came. */
static void pump(struct run *r, int ms)
{
        struct pollfd pfd[MAX_CLIENTS + MAX_CHURN];
        struct child *map[MAX_CLIENTS + MAX_CHURN];
        int n = 0;

        for (int i = 0; i < r->nforked; i++)
                if (!r->ch[i].eof) {
                        pfd[n] = (struct pollfd){.fd = r->ch[i].fd, .events = POLLIN};
                        map[n++] = &r->ch[i];
                }
        for (int i = 0; i < r->nchurn; i++)
                if (r->churn[i].pid > 0 && !r->churn[i].eof) {
                        pfd[n] = (struct pollfd){.fd = r->churn[i].fd, .events = POLLIN};
                        map[n++] = &r->churn[i];
                }
        if (!n) {
                sleep_ms(ms);
                return;
        }
        if (poll(pfd, (nfds_t)n, ms) <= 0)
                return;
        for (int j = 0; j < n; j++)
                if (pfd[j].revents)
                        child_read(map[j]);
}

/* ---- churn ------------------------------------------------------------ */

static void churn_note(struct run *r, const char *why)
{
        r->churn_failed++;
        if (!r->churn_error[0])
                snprintf(r->churn_error, sizeof(r->churn_error), "a process coming and going: %.120s", why);
}

/* Starts slot i's next process: a client of churn_o, numbered after the
 * clients. */
static void churn_start(struct run *r, int i)
{
        struct child *c = &r->churn[i];
        int err;

        memset(c, 0, sizeof(*c));
        if ((err = child_fork(r, c, &r->churn_o, r->o.nclients + i)))
                churn_note(r, strerror(-err));
}

/* Counts slot c's process once its socket is closed (it exited, or was
 * killed), and frees the slot. */
static void churn_end(struct run *r, struct child *c)
{
        int st = 0;
        const struct clients_result *x = &c->res;

        if (waitpid(c->pid, &st, 0) < 0)
                st = 0;
        if (c->have_result && !x->errors && !x->timeouts && !x->check_errors && x->submitted == x->ok &&
            WIFEXITED(st) && WEXITSTATUS(st) == 0)
                r->churned++;
        else
                churn_note(r, c->ready == -1 && c->rd.msg[0] ? c->rd.msg
                              : c->have_result && x->first_error_msg[0] ? x->first_error_msg
                              : "it did not finish its requests");
        close(c->fd);
        free(c->buf);
        free(c->samples);
        memset(c, 0, sizeof(*c));
}

/* Moves each slot on: a process set up gets its start (now), one that
 * ended is counted, and an empty slot gets a new process before t_stop. */
static void churn_step(struct run *r, uint64_t now, uint64_t t_stop)
{
        for (int i = 0; i < r->nchurn; i++) {
                struct child *c = &r->churn[i];

                if (c->pid > 0) {
                        if (c->ready == 1 && !c->go && !c->eof) {
                                if (child_start(c, bench_now_ns()))
                                        kill(c->pid, SIGKILL);
                                c->go = 1;
                        }
                        if (!c->eof)
                                continue;
                        churn_end(r, c);
                }
                if (now < t_stop)
                        churn_start(r, i);
        }
}

/* After the clients: lets the processes under way finish (within the
 * setup timeout), starting no more. */
static void churn_finish(struct run *r)
{
        uint64_t deadline = bench_now_ns() + (uint64_t)r->setup_timeout_s * 1000000000ull;

        for (;;) {
                int live = 0;

                churn_step(r, 0, 0);
                for (int i = 0; i < r->nchurn; i++)
                        live += r->churn[i].pid > 0;
                if (!live)
                        return;
                if (interrupted || bench_now_ns() > deadline) {
                        for (int i = 0; i < r->nchurn; i++)
                                if (r->churn[i].pid > 0) {
                                        kill(r->churn[i].pid, SIGKILL);
                                        r->churn[i].rd.msg[0] = '\0';
                                        churn_end(r, &r->churn[i]);
                                }
                        return;
                }
                pump(r, 50);
        }
}

/* Waits until every client reported READY (or failed). Returns 0 when at
 * least one client is ready, -1 otherwise. */
static int wait_ready(struct run *r)
{
        uint64_t t0 = bench_now_ns();
        uint64_t deadline = t0 + (uint64_t)r->setup_timeout_s * 1000000000ull;
        int pending, nready;

        do {
                pending = 0;
                nready = 0;
                for (int i = 0; i < r->nforked; i++) {
                        struct child *c = &r->ch[i];

                        if (!c->ready && c->eof)
                                c->ready = -1;
                        pending += !c->ready;
                        nready += c->ready == 1;
                }
                if (!pending || interrupted)
                        break;
                pump(r, 100);
        } while (bench_now_ns() < deadline);
        r->setup_s = (double)(bench_now_ns() - t0) / 1e9;
        for (int i = 0; i < r->nforked; i++)
                if (!r->ch[i].ready) {
                        r->ch[i].ready = -1;
                        snprintf(r->ch[i].rd.msg, sizeof(r->ch[i].rd.msg), "no setup in %d s",
                                 r->setup_timeout_s);
                        kill(r->ch[i].pid, SIGKILL);
                }
        return nready && !interrupted ? 0 : -1;
}

/* Sends the start time (or 0: quit) to every client that is ready. */
static uint64_t send_go(struct run *r, int go)
{
        uint64_t t = go ? bench_now_ns() + 20000000u : 0;

        for (int i = 0; i < r->nforked; i++)
                if (r->ch[i].ready == 1 && child_start(&r->ch[i], t))
                        r->ch[i].ready = -1;
        return t;
}

/* Runs until every client has reported, sampling memory until t_end. */
static void collect(struct run *r, uint64_t t_go)
{
        uint64_t t_end = t_go + (uint64_t)((r->o.warmup + r->o.seconds) * 1e9);
        uint64_t deadline = t_end + (uint64_t)r->o.timeout_ms * 1000000u + DRAIN_SLACK_NS;
        uint64_t next_sample = t_go + (uint64_t)(r->o.warmup * 1e9 / 2);
        int mem_ok = 1;

        r->churn_o = r->o;
        r->churn_o.window = 1;
        r->churn_o.warmup = 0;
        r->churn_o.seconds = 0.05;
        for (;;) {
                uint64_t now = bench_now_ns();
                int open = 0;

                for (int i = 0; i < r->nforked; i++)
                        open += !r->ch[i].eof;
                if (!open || now > deadline || interrupted)
                        break;
                churn_step(r, now, now >= t_go ? t_end : 0);
                if (mem_ok && now >= next_sample && now < t_end) {
                        mem_ok = mem_sample(r, 0) == 0;
                        next_sample += SAMPLE_NS;
                        continue;
                }
                pump(r, 50);
        }
        for (int i = 0; i < r->nforked; i++)
                if (!r->ch[i].eof)
                        kill(r->ch[i].pid, SIGKILL);
        churn_finish(r);
}

static void reap_clients(struct run *r)
{
        for (int i = 0; i < r->nforked; i++) {
                struct child *c = &r->ch[i];

                if (c->pid > 0 && c->status == -1) {
                        if (waitpid(c->pid, &c->status, 0) < 0)
                                c->status = 0;
                }
                if (c->fd > 0)
                        close(c->fd);
                c->fd = -1;
        }
}

/* ---- report ----------------------------------------------------------- */

struct agg {
        uint64_t requests, submitted, ok, status_errors, timeouts, check_errors, errors;
        uint64_t req_min, req_max;
        int clients_ok, failed;
        double flops, tflops, rps;
        double p50, p90, p99, max, mean;
        struct bench_account account; /* means once aggregated */
        struct bench_hops hops;       /* likewise */
        const char *first_error;
        uint64_t nsamples;
};

static void aggregate(struct run *r, struct agg *a)
{
        uint64_t n = 0;
        float *all;
        double sum = 0;

        memset(a, 0, sizeof(*a));
        a->req_min = UINT64_MAX;
        a->first_error = r->fatal;
        for (int i = 0; i < r->o.nclients; i++) {
                struct child *c = &r->ch[i];
                const struct clients_result *x = &c->res;

                if (!c->have_result) {
                        a->failed++;
                        if (!*a->first_error)
                                a->first_error = c->rd.msg[0] ? c->rd.msg : "a client did not report";
                        continue;
                }
                a->clients_ok++;
                a->requests += x->window_requests;
                a->flops += x->window_flops;
                a->submitted += x->submitted;
                a->ok += x->ok;
                a->status_errors += x->errors;
                a->timeouts += x->timeouts;
                a->check_errors += x->check_errors;
                bench_account_merge(&a->account, &x->account);
                bench_hops_merge(&a->hops, &x->hops);
                if (x->window_requests < a->req_min)
                        a->req_min = x->window_requests;
                if (x->window_requests > a->req_max)
                        a->req_max = x->window_requests;
                if (x->first_error && !*a->first_error)
                        a->first_error = x->first_error_msg;
                /* A request the client lost track of is an error too. */
                if (x->submitted != x->ok + x->errors + x->timeouts)
                        a->status_errors += 1;
                n += x->nsamples;
        }
        if (a->req_min == UINT64_MAX)
                a->req_min = 0;
        a->errors = a->status_errors + a->timeouts + a->check_errors + (uint64_t)a->failed;
        a->tflops = a->flops / r->o.seconds / 1e12;
        a->rps = (double)a->requests / r->o.seconds;
        if (a->account.n) {
                a->account.queue_us /= (double)a->account.n;
                a->account.run_us /= (double)a->account.n;
                a->account.group_size /= (double)a->account.n;
        }
        if (a->hops.n) {
                a->hops.in_us /= (double)a->hops.n;
                a->hops.out_us /= (double)a->hops.n;
        }
        a->nsamples = n;
        a->p50 = a->p90 = a->p99 = a->max = a->mean = NAN;
        all = malloc((n ? n : 1) * sizeof(float));
        if (!all || !n) {
                free(all);
                return;
        }
        n = 0;
        for (int i = 0; i < r->o.nclients; i++)
                if (r->ch[i].have_result) {
                        memcpy(all + n, r->ch[i].samples, r->ch[i].res.nsamples * sizeof(float));
                        n += r->ch[i].res.nsamples;
                }
        bench_sort(all, n);
        for (uint64_t i = 0; i < n; i++)
                sum += all[i];
        a->mean = sum / (double)n;
        a->p50 = bench_pct(all, n, 0.50);
        a->p90 = bench_pct(all, n, 0.90);
        a->p99 = bench_pct(all, n, 0.99);
        a->max = all[n - 1];
        free(all);
}

/* A JSON number, or null for NaN / unavailable. */
static void jnum(const char *key, double v, int ok)
{
        if (ok && isfinite(v))
                printf(",\"%s\":%.6g", key, v);
        else
                printf(",\"%s\":null", key);
}

static void jstr(const char *key, const char *s)
{
        printf(",\"%s\":\"", key);
        for (; *s; s++) {
                if (*s == '"' || *s == '\\')
                        printf("\\%c", *s);
                else if ((unsigned char)*s < 0x20)
                        printf("\\u%04x", *s);
                else
                        putchar(*s);
        }
        putchar('"');
}

static void report(struct run *r, const struct agg *a)
{
        const struct mem *m = &r->mem;
        int gemmd = r->o.mode == CLIENTS_GEMMD;

        if (r->json) {
                printf("{\"mode\":\"%s\"", mode_name(r->o.mode));
                jstr("memory", memory_name(r));
                jstr("backend", gemmd ? r->daemon_backend : "cuda");
                printf(",\"clients\":%d,\"window\":%d,\"max_dim\":%d,\"dims\":\"64..%d step 64\",\"k\":%d,"
                       "\"problems_per_client\":%d,\"devices\":%d",
                       r->o.nclients, r->o.window, r->o.max_dim, r->o.max_dim, r->o.k, CLIENTS_PROBLEMS,
                       r->o.ndevices);
                jnum("beta", r->o.beta, 1);
                jnum("seconds", r->o.seconds, 1);
                jnum("warmup_s", r->o.warmup, 1);
                printf(",\"spin\":%s", r->o.spin ? "true" : "false");
                printf(",\"requests\":%llu,\"submitted\":%llu,\"ok\":%llu,\"errors\":%llu,"
                       "\"status_errors\":%llu,\"timeouts\":%llu,\"check_errors\":%llu,"
                       "\"failed_clients\":%d,\"clients_ok\":%d",
                       (unsigned long long)a->requests, (unsigned long long)a->submitted,
                       (unsigned long long)a->ok, (unsigned long long)a->errors,
                       (unsigned long long)a->status_errors, (unsigned long long)a->timeouts,
                       (unsigned long long)a->check_errors, a->failed, a->clients_ok);
                printf(",\"churn\":%d,\"churn_clients\":%llu,\"churn_failed\":%llu", r->nchurn,
                       (unsigned long long)r->churned, (unsigned long long)r->churn_failed);
                jnum("tflops", a->tflops, 1);
                jnum("req_per_s", a->rps, 1);
                printf(",\"req_min_client\":%llu,\"req_max_client\":%llu",
                       (unsigned long long)a->req_min, (unsigned long long)a->req_max);
                jnum("lat_p50_us", a->p50, 1);
                jnum("lat_p90_us", a->p90, 1);
                jnum("lat_p99_us", a->p99, 1);
                jnum("lat_max_us", a->max, 1);
                jnum("lat_mean_us", a->mean, 1);
                printf(",\"lat_samples\":%llu", (unsigned long long)a->nsamples);
                jnum("gpu_mem_mib", m->total, m->available);
                jnum("gpu_mem_clients_mib", m->clients, m->available);
                jnum("gpu_mem_server_mib", m->server, m->available);
                jnum("gpu_mem_all_apps_mib", m->all, m->available);
                jnum("gpu_mem_device_mib", m->device, m->available);
                jnum("gpu_mem_device_base_mib", m->device_base, m->available);
                printf(",\"gpu_mem_samples\":%d", m->samples);
                jnum("daemon_queue_us_mean", a->account.queue_us, gemmd && a->account.n);
                jnum("daemon_run_us_mean", a->account.run_us, gemmd && a->account.n);
                jnum("group_size_mean", a->account.group_size, gemmd && a->account.n);
                jnum("submit_to_admit_us_mean", a->hops.in_us, gemmd && a->hops.n);
                jnum("reply_to_client_us_mean", a->hops.out_us, gemmd && a->hops.n);
                if (gemmd)
                        printf(",\"daemon\":\"%s\",\"daemon_exit\":%d",
                               r->daemon_log[0] ? "started" : "external", r->daemon_exit);
                jnum("setup_s", r->setup_s, 1);
                jstr("first_error", a->first_error);
                printf("}\n");
                fflush(stdout);
                return;
        }
        printf("gemmbench clients: mode %s (%s memory, %s backend), %d clients x window %d on %d "
               "device(s), m, n%s in 64..%d step 64",
               mode_name(r->o.mode), memory_name(r), gemmd ? r->daemon_backend : "cuda",
               r->o.nclients, r->o.window, r->o.ndevices, r->o.k ? "" : ", k", r->o.max_dim);
        if (r->o.k)
                printf(", k %d", r->o.k);
        if (r->o.beta != 0)
                printf(", beta %g", r->o.beta);
        printf(", %.2f s after %.2f s warm-up (setup %.2f s)\n", r->o.seconds, r->o.warmup, r->setup_s);
        printf("  requests    %llu in the window; %llu submitted in all, %llu ok, %llu errors "
               "(%llu statuses, %llu timeouts, %llu wrong results, %d failed clients)\n",
               (unsigned long long)a->requests, (unsigned long long)a->submitted,
               (unsigned long long)a->ok, (unsigned long long)a->errors,
               (unsigned long long)a->status_errors, (unsigned long long)a->timeouts,
               (unsigned long long)a->check_errors, a->failed);
        printf("  throughput  %.3f TF/s, %.0f requests/s (per client: min %llu, max %llu)\n",
               a->tflops, a->rps, (unsigned long long)a->req_min, (unsigned long long)a->req_max);
        printf("  latency     p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us, mean %.1f us\n", a->p50,
               a->p90, a->p99, a->max, a->mean);
        if (r->nchurn)
                printf("  churn       %llu processes came and went beside the clients, %d at a time "
                       "(%llu failed)\n",
                       (unsigned long long)r->churned, r->nchurn, (unsigned long long)r->churn_failed);
        if (m->available)
                printf("  gpu memory  %.0f MiB (clients %.0f + server %.0f); all apps %.0f MiB; "
                       "device %.0f MiB, %.0f before the clients\n",
                       m->total, m->clients, m->server, m->all, m->device, m->device_base);
        else
                printf("  gpu memory  n/a (no nvidia-smi)\n");
        if (gemmd && a->account.n)
                printf("  daemon      queue %.1f us, run %.1f us, group size %.2f (means)\n",
                       a->account.queue_us, a->account.run_us, a->account.group_size);
        if (gemmd && a->hops.n)
                printf("  hops        submit to admitted %.1f us, reply packed to client %.1f us (means)\n",
                       a->hops.in_us, a->hops.out_us);
        if (*a->first_error)
                printf("  first error %s\n", a->first_error);
        fflush(stdout);
}

/* ---- main ------------------------------------------------------------- */

static void install_signals(void)
{
        struct sigaction sa;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
}

int bench_clients_main(int argc, char **argv)
{
        struct run *r = calloc(1, sizeof(*r));
        struct agg a;
        int rc = 1, err;
        uint64_t t_go;

        if (!r)
                return 1;
        r->daemon_exit = -1;
        err = parse_args(r, argc, argv);
        if (err) {
                free(r);
                return err == 1 ? 0 : 2; /* --help, or a bad option */
        }
        r->ch = calloc((size_t)r->o.nclients, sizeof(*r->ch));
        if (!r->ch || make_dir(r))
                goto out;
        install_signals();

        if (r->o.mode == CLIENTS_GEMMD) {
                if (!r->o.socket && daemon_start(r)) {
                        snprintf(r->fatal, sizeof(r->fatal), "gemmd did not start");
                        goto out_stop;
                }
                if (daemon_probe(r)) {
                        snprintf(r->fatal, sizeof(r->fatal), "cannot connect to gemmd");
                        goto out_stop;
                }
        } else if (r->o.mode == CLIENTS_MPS && mps_start(r)) {
                snprintf(r->fatal, sizeof(r->fatal), "the MPS control daemon did not start");
                goto out_stop;
        }
        mem_sample(r, 1);

        if (fork_clients(r)) {
                snprintf(r->fatal, sizeof(r->fatal), "fork failed");
                goto out_clients;
        }
        if (wait_ready(r)) {
                send_go(r, 0);
                fprintf(stderr, "gemmbench clients: %s\n",
                        interrupted ? "interrupted" : "no client finished its setup");
        } else {
                t_go = send_go(r, 1);
                collect(r, t_go);
        }
out_clients:
        for (int i = 0; i < r->nforked; i++)
                if (!r->ch[i].eof && !r->ch[i].have_result)
                        kill(r->ch[i].pid, SIGKILL);
        reap_clients(r);
out_stop:
        for (int i = 0, shown = 0; i < r->nforked && shown < 4; i++)
                if (r->ch[i].ready == -1) {
                        fprintf(stderr, "gemmbench clients: client %d: %s\n", i,
                                r->ch[i].rd.msg[0] ? r->ch[i].rd.msg : "died during setup");
                        shown++;
                }
        daemon_stop(r);
        if (r->mps_started) {
                if (r->nforked && r->ch[0].ready == -1)
                        mps_print_logs(r);
                mps_stop(r);
        }
        if (interrupted) {
                fprintf(stderr, "gemmbench clients: interrupted by signal %d\n", (int)interrupted);
        } else {
                aggregate(r, &a);
                if (!*a.first_error && r->churn_error[0])
                        a.first_error = r->churn_error;
                report(r, &a);
                rc = a.errors || r->churn_failed || !a.requests || (r->daemon_log[0] && r->daemon_exit != 0) ? 1 : 0;
        }
out:
        remove_dir(r);
        for (int i = 0; i < r->nforked; i++) {
                free(r->ch[i].buf);
                free(r->ch[i].samples);
        }
        free(r->ch);
        free(r);
        return rc;
}

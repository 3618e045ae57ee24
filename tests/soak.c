/*
 * soak.c - many client processes against one gemmd for a while, with
 * clients killed at random: every result checked, every completion counted,
 * and the daemon's resources compared with their baseline at the end.
 *
 *   soak [--clients N] [--seconds S] [--kill-ms MS] [--threads T] [--seed X]
 *
 * The daemon runs on the CPU backend (or --backend cuda) in a temporary directory. First a
 * short warm-up (a few clients, then none) sets the baseline of its open
 * descriptors, VmRSS and shared mappings. Then N client processes each keep
 * a few requests in flight: 1 to 3 random ops (GEMM or SYR2K, f32, f16 or
 * bf16, any layout, sizes up to 64) with operands in shared memory or
 * inline; each completion is found through gemmd_poll exactly once and
 * checked against a double-precision reference. Now and then a client drops
 * its connection with requests in flight and reconnects (those tickets are
 * abandoned on purpose). About every --kill-ms the parent SIGKILLs a random
 * client and starts another in its place. At the end the survivors are
 * told to stop: they wait for everything they submitted (a ticket that never
 * completes is lost) and report. The run passes when no result is wrong,
 * no completion is lost or repeated, no client failed, the daemon's
 * descriptors and shared mappings are back to the baseline, its VmRSS
 * within a few MiB of it, and it exits 0 on SIGTERM.
 *
 * With --hostile H (as root), the clients above act as one user (uid
 * SOAK_HONEST_UID) and are not killed, while H processes of another user
 * (SOAK_HOSTILE_UID) attack the daemon for the whole run, each picking one
 * attack after another: memfds truncated and sealed during registration
 * and ring attach, inline outputs at the limit whose replies are never read,
 * buffers, sessions and partial frames with descriptors held up to the
 * caps, floods of garbage frames; about every --kill-ms one of them is
 * SIGKILLed mid-attack and replaced. The daemon runs with small per-user
 * limits (hostile_flags), and its descriptors, shared mappings and VmRSS
 * are sampled throughout: the run passes when, beside the above, the
 * honest user lost nothing and waited at most HONEST_MAX_MS for any
 * request, and the daemon stayed within the bounds the man page gives for
 * those limits (hostile_bounds).
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grp.h>
#include <sys/stat.h>

#include "gemmd.h"
#include "tests/hard_util.h"
#include "tests/soak_hostile.h"

#define WINDOW 4          /* requests in flight per client */
#define MAX_PER_SUBMIT 3
#define SLOT_BYTES (256u << 10)
#define MAX_CLIENTS 512
#define RSS_SLACK_KB (16 * 1024)
#define HONEST_MAX_MS 5000 /* the longest an honest request may take beside attackers */

struct report {
        uint64_t requests, ops; /* completed and checked */
        uint64_t wrong, lost, repeated, failed;
        uint64_t reconnects, abandoned;
        uint64_t lat_hist[32]; /* submit to checked result, log2 us buckets */
        uint64_t lat_max_us;
};

struct slot {
        gemmd_ticket t;
        int busy;
        uint64_t t_submit_us;
        size_t n;
        struct e2e_prob p[MAX_PER_SUBMIT];
};

/* Counts every client adds to as it goes, in memory shared by all the
 * processes, so the work of clients killed later is counted too. */
struct tally {
        atomic_ullong requests, ops, wrong;
};

static struct tally *tally;
static volatile sig_atomic_t stop_flag;

static void on_term(int sig)
{
        (void)sig;
        stop_flag = 1;
}

/* ---- one client process ------------------------------------------------- */

struct client {
        int id;
        gemmd_client *c;
        struct e2e_arena ar;
        struct slot slots[WINDOW];
        uint64_t seed;
        struct report rep;
};

static int cl_connect(struct client *k, const char *sock)
{
        for (int tries = 0; tries < 200; tries++) {
                if (gemmd_connect(sock, &k->c) == 0) {
                        if (e2e_arena_init(&k->ar, k->c, (uint64_t)WINDOW * SLOT_BYTES) == 0)
                                return 0;
                        gemmd_disconnect(k->c);
                }
                k->c = NULL;
                usleep(20000);
        }
        fprintf(stderr, "soak client %d: cannot connect\n", k->id);
        return -1;
}

static void slot_free(struct slot *s)
{
        for (size_t i = 0; i < s->n; i++)
                e2e_prob_free(&s->p[i]);
        s->n = 0;
        s->busy = 0;
}

static int cl_submit(struct client *k, int i)
{
        struct slot *s = &k->slots[i];
        struct gemmd_op ops[MAX_PER_SUBMIT];
        size_t n = (size_t)e2e_rand_int(&k->seed, 1, MAX_PER_SUBMIT);
        int rc;

        k->ar.used = (uint64_t)i * SLOT_BYTES;
        k->ar.size = (uint64_t)(i + 1) * SLOT_BYTES;
        s->n = 0;
        for (size_t j = 0; j < n; j++) {
                struct e2e_spec sp;

                e2e_spec_random(&sp, &k->seed, 64);
                rc = e2e_rand(&k->seed) % 3 == 0 ? e2e_prob_inline(&s->p[j], &sp, &k->seed)
                                                 : e2e_prob_place(&s->p[j], &sp, &k->ar, &k->seed);
                if (rc) {
                        fprintf(stderr, "soak client %d: cannot place a problem\n", k->id);
                        return -1;
                }
                s->n++;
                ops[j] = s->p[j].op;
        }
        rc = gemmd_submit(k->c, ops, n, (int)(e2e_rand(&k->seed) % 3), &s->t);
        if (rc) {
                fprintf(stderr, "soak client %d: submit: %s\n", k->id, gemmd_strerror(rc));
                return -1;
        }
        s->busy = 1;
        s->t_submit_us = e2e_now_us();
        return 0;
}

/* Adds one request's latency to the client's report. */
static void count_latency(struct report *rep, uint64_t us)
{
        int b = 0;

        while (b < 31 && (1ull << (b + 1)) <= us)
                b++;
        rep->lat_hist[b]++;
        if (us > rep->lat_max_us)
                rep->lat_max_us = us;
}

/* The latency below which a fraction q of the report's requests finished
 * (the upper edge of its log2 bucket, in us). */
static uint64_t latency_quantile(const struct report *rep, double q)
{
        uint64_t n = 0, seen = 0;

        for (int b = 0; b < 32; b++)
                n += rep->lat_hist[b];
        for (int b = 0; b < 32; b++) {
                seen += rep->lat_hist[b];
                if (n && seen >= q * (double)n)
                        return 2ull << b;
        }
        return 0;
}

/* Collects ticket t: exactly once, every op right. */
static void cl_collect(struct client *k, gemmd_ticket t, int timeout_ms)
{
        struct gemmd_result res[MAX_PER_SUBMIT];
        struct slot *s = NULL;
        char why[300];
        double err;
        int rc;

        for (int i = 0; i < WINDOW; i++)
                if (k->slots[i].busy && k->slots[i].t == t)
                        s = &k->slots[i];
        if (!s) {
                fprintf(stderr, "soak client %d: ticket %llu completed twice or unknown\n", k->id,
                        (unsigned long long)t);
                k->rep.repeated++;
                return;
        }
        rc = gemmd_wait(k->c, t, timeout_ms, res, s->n);
        if (rc == -ETIMEDOUT || rc == GEMMD_EDISCONNECT || rc == GEMMD_ENOTICKET) {
                fprintf(stderr, "soak client %d: ticket %llu lost: %s\n", k->id,
                        (unsigned long long)t, gemmd_strerror(rc));
                k->rep.lost++;
        } else if (rc) {
                fprintf(stderr, "soak client %d: ticket %llu failed: %s (%s)\n", k->id,
                        (unsigned long long)t, gemmd_strerror(rc), gemmd_last_error(k->c));
                k->rep.failed++;
        } else {
                for (size_t i = 0; i < s->n; i++) {
                        if (e2e_prob_check(&s->p[i], &err, why, sizeof(why))) {
                                fprintf(stderr, "soak client %d: wrong result: %s\n", k->id, why);
                                k->rep.wrong++;
                                atomic_fetch_add(&tally->wrong, 1);
                        }
                }
                k->rep.requests++;
                k->rep.ops += s->n;
                count_latency(&k->rep, e2e_now_us() - s->t_submit_us);
                atomic_fetch_add(&tally->requests, 1);
                atomic_fetch_add(&tally->ops, s->n);
        }
        slot_free(s);
}

/* Drops the connection with requests in flight and connects again. */
static int cl_reconnect(struct client *k, const char *sock)
{
        for (int i = 0; i < WINDOW; i++) {
                if (k->slots[i].busy)
                        k->rep.abandoned++;
                slot_free(&k->slots[i]);
        }
        gemmd_disconnect(k->c);
        k->c = NULL;
        k->rep.reconnects++;
        return cl_connect(k, sock);
}

static int client_main(const char *sock, int id, uint64_t seed, int report_fd)
{
        static struct client k;
        uint64_t deadline;

        memset(&k, 0, sizeof(k));
        k.id = id;
        k.seed = seed;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (cl_connect(&k, sock))
                return 2;
        while (!stop_flag) {
                gemmd_ticket t;
                int rc;

                for (int i = 0; i < WINDOW && !stop_flag; i++)
                        if (!k.slots[i].busy && cl_submit(&k, i))
                                return 3;
                if (e2e_rand(&k.seed) % 500 == 0 && cl_reconnect(&k, sock))
                        return 4;
                rc = gemmd_poll(k.c, &t);
                if (rc < 0) {
                        fprintf(stderr, "soak client %d: poll: %s\n", id, gemmd_strerror(rc));
                        return 5;
                }
                if (rc == 1) {
                        cl_collect(&k, t, 0);
                } else {
                        struct pollfd pf = {gemmd_fd(k.c), POLLIN, 0};

                        poll(&pf, 1, 100);
                }
        }
        /* Told to stop: everything submitted must complete, once. */
        deadline = e2e_now_us() + 60000000u;
        for (int i = 0; i < WINDOW; i++) {
                if (!k.slots[i].busy)
                        continue;
                int left = (int)((deadline - e2e_now_us()) / 1000);

                cl_collect(&k, k.slots[i].t, left > 0 ? left : 0);
        }
        {
                gemmd_ticket t;

                if (gemmd_poll(k.c, &t) != 0) {
                        fprintf(stderr, "soak client %d: a completion after the last one\n", id);
                        k.rep.repeated++;
                }
        }
        gemmd_disconnect(k.c);
        if (write(report_fd, &k.rep, sizeof(k.rep)) != sizeof(k.rep))
                return 6;
        return k.rep.wrong || k.rep.lost || k.rep.repeated || k.rep.failed ? 1 : 0;
}

/* ---- the parent ----------------------------------------------------------- */

struct child {
        pid_t pid;
        int fd; /* report pipe */
};

static uint64_t next_seed = 1;

/* Who a child acts as: the clients of a plain soak run as the caller,
 * those of a hostile one as two other users. */
enum role { AS_CALLER, HONEST, HOSTILE };

/* Takes the uid (and gid) of role in a child; 0, or -1. */
static int become(enum role role)
{
        uid_t uid = role == HONEST ? SOAK_HONEST_UID : SOAK_HOSTILE_UID;

        if (role == AS_CALLER)
                return 0;
        return setgroups(0, NULL) || setgid(uid) || setuid(uid) ? -1 : 0;
}

static int spawn_as(struct child *ch, const char *sock, int id, enum role role)
{
        int p[2];

        sigset_t term, old;

        if (pipe(p))
                return -1;
        /* SIGTERM means "stop and report": it waits until the child has
         * its handler. */
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        sigprocmask(SIG_BLOCK, &term, &old);
        fflush(NULL);
        ch->pid = fork();
        if (ch->pid == 0) {
                signal(SIGTERM, on_term);
                sigprocmask(SIG_SETMASK, &old, NULL);
                close(p[0]);
                if (become(role)) {
                        perror("soak: setuid");
                        _exit(7);
                }
                if (role == HOSTILE)
                        hostile_main(sock, id, next_seed * 0x9E3779B97F4A7C15ull);
                _exit(client_main(sock, id, next_seed * 0x9E3779B97F4A7C15ull, p[1]));
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (ch->pid < 0)
                return -1;
        next_seed++;
        close(p[1]);
        ch->fd = p[0];
        return 0;
}

static enum role client_role = AS_CALLER;

static int spawn(struct child *ch, const char *sock, int id)
{
        return spawn_as(ch, sock, id, client_role);
}

/* Stops every child and adds up the reports. Returns the number of
 * children that failed. */
static int stop_all(struct child *ch, int n, struct report *sum)
{
        int bad = 0;

        for (int i = 0; i < n; i++)
                kill(ch[i].pid, SIGTERM);
        for (int i = 0; i < n; i++) {
                struct report r;
                int st = e2e_wait_child(ch[i].pid, 120000);

                if (read(ch[i].fd, &r, sizeof(r)) == sizeof(r)) {
                        sum->requests += r.requests;
                        sum->ops += r.ops;
                        sum->wrong += r.wrong;
                        sum->lost += r.lost;
                        sum->repeated += r.repeated;
                        sum->failed += r.failed;
                        sum->reconnects += r.reconnects;
                        sum->abandoned += r.abandoned;
                        for (int b = 0; b < 32; b++)
                                sum->lat_hist[b] += r.lat_hist[b];
                        if (r.lat_max_us > sum->lat_max_us)
                                sum->lat_max_us = r.lat_max_us;
                } else {
                        bad++;
                }
                if (st != 0) {
                        fprintf(stderr, "soak: client %d exited with status %d\n", i, st);
                        bad++;
                }
                close(ch[i].fd);
        }
        return bad;
}

static void usage(FILE *f)
{
        fprintf(f, "usage: soak [--clients N] [--seconds S] [--kill-ms MS] [--threads T] "
                   "[--seed X] [--backend cpu|cuda] [--hostile H] [--help]\n");
}

/* A usage error: what is wrong in one line, then where the help is. */
static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "soak: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'soak --help'.\n");
        exit(2);
}

/* The daemon's resources at their highest while it was sampled. */
static void res_peak(struct hard_res *peak, const struct hard_res *now)
{
        if (now->fds > peak->fds)
                peak->fds = now->fds;
        if (now->shm_maps > peak->shm_maps)
                peak->shm_maps = now->shm_maps;
        if (now->rss_kb > peak->rss_kb)
                peak->rss_kb = now->rss_kb;
}

/*
 * The hostile run: nclients honest clients (started by the caller, in ch)
 * serve beside nhostile attackers for `seconds`, one attacker killed and
 * replaced about every kill_ms; the daemon's resources are sampled every
 * 20 ms. Stops the attackers, and returns how many things went wrong:
 * attackers that could not start, and peaks past the man page's bounds.
 */
static int hostile_run(const struct e2e_daemon *d, const struct hard_res *base, int nhostile,
                       int seconds, int kill_ms, uint64_t *rng, struct hostile_bounds *b)
{
        static struct child hc[MAX_CLIENTS];
        struct hard_res peak = *base, now;
        uint64_t deadline = e2e_now_us() + (uint64_t)seconds * 1000000u, next_kill;
        int bad = 0, kills = 0;

        for (int i = 0; i < nhostile; i++)
                if (spawn_as(&hc[i], d->sock, 1000 + i, HOSTILE))
                        return 1;
        next_kill = e2e_now_us() + (uint64_t)kill_ms * 1000u;
        while (e2e_now_us() < deadline) {
                usleep(20000);
                if (hard_res_read(d->pid, &now) == 0)
                        res_peak(&peak, &now);
                if (e2e_now_us() < next_kill)
                        continue;
                int victim = (int)(e2e_rand(rng) % (uint64_t)nhostile);

                kill(hc[victim].pid, SIGKILL);
                waitpid(hc[victim].pid, NULL, 0);
                close(hc[victim].fd);
                kills++;
                if (spawn_as(&hc[victim], d->sock, 1000 + victim, HOSTILE))
                        return bad + 1;
                next_kill = e2e_now_us() + (uint64_t)(kill_ms / 2 + e2e_rand(rng) % (uint64_t)kill_ms) * 1000u;
        }
        for (int i = 0; i < nhostile; i++) {
                kill(hc[i].pid, SIGKILL);
                waitpid(hc[i].pid, NULL, 0);
                close(hc[i].fd);
        }
        printf("soak: %d attackers of uid %d, %d killed mid-attack and replaced; daemon peaks: "
               "fds %d (bound %ld), shared mappings %d (bound %ld), VmRSS %ld kB (bound %ld kB)\n",
               nhostile, SOAK_HOSTILE_UID, kills, peak.fds, b->fds, peak.shm_maps, b->shm_maps,
               peak.rss_kb, b->rss_kb);
        if (peak.fds > b->fds || peak.shm_maps > b->shm_maps || peak.rss_kb > b->rss_kb) {
                fprintf(stderr, "soak: the daemon went past the bounds of its limits\n");
                bad++;
        }
        return bad;
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                {"clients", required_argument, NULL, 'c'}, {"seconds", required_argument, NULL, 's'},
                {"kill-ms", required_argument, NULL, 'k'}, {"threads", required_argument, NULL, 't'},
                {"seed", required_argument, NULL, 'x'},    {"backend", required_argument, NULL, 'b'},
                {"hostile", required_argument, NULL, 'H'}, {"help", no_argument, NULL, 'h'},
                {NULL, 0, NULL, 0},
        };
        static struct child ch[MAX_CLIENTS];
        int nclients = 16, seconds = 10, kill_ms = 150, o, bad = 0, kills = 0, ok, nhostile = 0;
        const char *threads = "2", *backend = "cpu";
        struct report warm = {0}, sum = {0};
        int nwarm;
        struct hard_res base, after;
        struct hostile_bounds bounds = {0};
        struct e2e_daemon d;
        gemmd_client *mon;
        uint64_t rng, deadline, start;
        char b1[128], b2[128];
        long long got;

        opterr = 0; /* usage_error says it in one line */
        while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
                switch (o) {
                case 'c':
                        nclients = atoi(optarg);
                        break;
                case 's':
                        seconds = atoi(optarg);
                        break;
                case 'k':
                        kill_ms = atoi(optarg);
                        break;
                case 't':
                        threads = optarg;
                        break;
                case 'x':
                        next_seed = strtoull(optarg, NULL, 0);
                        break;
                case 'b':
                        backend = optarg;
                        break;
                case 'H':
                        nhostile = atoi(optarg);
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case ':':
                        usage_error("option '%s' needs a value", argv[optind - 1]);
                default:
                        usage_error("unknown option '%s'", argv[optind - 1]);
                }
        }
        if (optind < argc)
                usage_error("unexpected argument: %s", argv[optind]);
        if (nclients < 1 || nclients > MAX_CLIENTS || seconds < 1 || kill_ms < 1 || nhostile < 0 ||
            nhostile > MAX_CLIENTS)
                usage_error("--clients and --hostile take 1 to %d (--hostile may be 0), "
                            "--seconds and --kill-ms at least 1", MAX_CLIENTS);
        if (nhostile && geteuid() != 0) {
                fprintf(stderr, "soak: --hostile acts as two other users, which needs root\n");
                return 77;
        }
        rng = next_seed;
        signal(SIGPIPE, SIG_IGN);
        tally = mmap(NULL, sizeof(*tally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (tally == MAP_FAILED)
                return 1;
        e2e_setup();
        {
                const char *flags[64] = {"--threads", threads, "--backend", backend};
                int n = 4;

                for (int i = 0; nhostile && hostile_flags[i] && n < 63; i++)
                        flags[n++] = hostile_flags[i];
                flags[n] = NULL;
                if (e2e_daemon_startv(&d, flags)) {
                        e2e_teardown();
                        return 1;
                }
        }
        /* The users the clients act as must reach the socket. */
        if (nhostile) {
                client_role = HONEST;
                if (chmod(e2e_dir, 0711) || chmod(d.sock, 0666))
                        goto fail;
        }
        mon = e2e_connect(&d);
        if (!mon)
                goto fail;

        /* Warm-up with as many clients: the daemon's heap, pools and plan
         * buffers reach their working size; then the baseline, with only
         * the monitor connected. */
        nwarm = nclients < 64 ? nclients : 64;
        for (int i = 0; i < nwarm; i++)
                if (spawn(&ch[i], d.sock, i))
                        goto fail;
        usleep(2000000);
        bad += stop_all(ch, nwarm, &warm);
        if (hard_wait_sessions(mon, 1, 30000, &got) || hard_res_settled(d.pid, &base, 5000)) {
                fprintf(stderr, "soak: warm-up sessions did not go away (%lld left)\n", got);
                goto fail;
        }
        if (nhostile)
                printf("soak: %d clients of uid %d for %d s beside %d attackers of uid %d; warm-up "
                       "%llu requests; baseline %s\n",
                       nclients, SOAK_HONEST_UID, seconds, nhostile, SOAK_HOSTILE_UID,
                       (unsigned long long)warm.requests, hard_res_str(&base, b1, sizeof(b1)));
        else
                printf("soak: %d clients for %d s, one killed about every %d ms; warm-up %llu "
                       "requests; baseline %s\n",
                       nclients, seconds, kill_ms, (unsigned long long)warm.requests,
                       hard_res_str(&base, b1, sizeof(b1)));
        fflush(stdout);

        atomic_store(&tally->requests, 0);
        atomic_store(&tally->ops, 0);
        for (int i = 0; i < nclients; i++)
                if (spawn(&ch[i], d.sock, i))
                        goto fail;
        start = e2e_now_us();
        deadline = start + (uint64_t)seconds * 1000000u;
        if (nhostile) {
                int copies = strcmp(backend, "cpu") ? 8 : e2e_devproc() ? 3 : 0;

                /* Three users: the honest one, the hostile one, and the
                 * monitor. */
                hostile_bounds(3, copies, base.fds, base.rss_kb, &bounds);
                bad += hostile_run(&d, &base, nhostile, seconds, kill_ms, &rng, &bounds);
        }
        while (!nhostile && e2e_now_us() < deadline) {
                int victim, st;

                usleep((useconds_t)(kill_ms / 2 + e2e_rand(&rng) % (uint64_t)kill_ms) * 1000u);
                /* A client that ended by itself has failed. */
                for (int i = 0; i < nclients; i++) {
                        if (waitpid(ch[i].pid, &st, WNOHANG) == ch[i].pid) {
                                fprintf(stderr, "soak: client %d ended on its own (status 0x%x)\n",
                                        i, st);
                                bad++;
                                close(ch[i].fd);
                                if (spawn(&ch[i], d.sock, i))
                                        goto fail;
                        }
                }
                victim = (int)(e2e_rand(&rng) % (uint64_t)nclients);
                kill(ch[victim].pid, SIGKILL);
                waitpid(ch[victim].pid, NULL, 0);
                close(ch[victim].fd);
                kills++;
                if (spawn(&ch[victim], d.sock, victim))
                        goto fail;
        }
        bad += stop_all(ch, nclients, &sum);
        if (hard_wait_sessions(mon, 1, 30000, &got)) {
                fprintf(stderr, "soak: %lld sessions left after every client ended\n", got - 1);
                bad++;
        }
        /* Give the daemon a moment to release what the last ones held. */
        hard_res_back(d.pid, &base, &after, 10000);
        sum.wrong = atomic_load(&tally->wrong); /* killed clients' too, and the warm-up's */
        printf("soak: %llu requests (%llu ops) completed and checked in %.0f s, %llu of them by "
               "the %d clients alive at the end, whose every ticket completed once: %llu wrong, "
               "%llu lost, %llu repeated, %llu failed; %d clients killed mid-flight and "
               "replaced; %llu reconnects abandoning %llu requests\n",
               (unsigned long long)atomic_load(&tally->requests),
               (unsigned long long)atomic_load(&tally->ops), (e2e_now_us() - start) / 1e6,
               (unsigned long long)sum.requests, nclients, (unsigned long long)sum.wrong,
               (unsigned long long)sum.lost, (unsigned long long)sum.repeated,
               (unsigned long long)sum.failed, kills, (unsigned long long)sum.reconnects,
               (unsigned long long)sum.abandoned);
        printf("soak: daemon before %s\nsoak: daemon after  %s\n", hard_res_str(&base, b1, sizeof(b1)),
               hard_res_str(&after, b2, sizeof(b2)));
        printf("soak: request latency of the clients alive at the end: p50 %llu us, p99 %llu us, "
               "max %llu us\n",
               (unsigned long long)latency_quantile(&sum, 0.5),
               (unsigned long long)latency_quantile(&sum, 0.99), (unsigned long long)sum.lat_max_us);
        ok = !bad && !sum.wrong && !sum.lost && !sum.repeated && !sum.failed && sum.requests > 0;
        if (nhostile && sum.lat_max_us > HONEST_MAX_MS * 1000ull) {
                fprintf(stderr, "soak: an honest request waited %llu ms beside the attackers\n",
                        (unsigned long long)sum.lat_max_us / 1000);
                ok = 0;
        }
        if (after.fds != base.fds || after.shm_maps != base.shm_maps) {
                fprintf(stderr, "soak: descriptors or shared mappings not back to the baseline\n");
                ok = 0;
        }
        if (after.rss_kb > base.rss_kb + RSS_SLACK_KB + bounds.kept_kb) {
                fprintf(stderr, "soak: VmRSS grew by %ld kB\n", after.rss_kb - base.rss_kb);
                ok = 0;
        }
        gemmd_disconnect(mon);
        if (e2e_daemon_stop(&d)) {
                fprintf(stderr, "soak: gemmd did not exit 0 on SIGTERM\n");
                ok = 0;
        }
        printf("soak: %s\n", ok ? "PASS" : "FAIL");
        if (!ok)
                e2e_daemon_print_log(&d, "soak failed");
        e2e_teardown();
        return ok ? 0 : 1;

fail:
        fprintf(stderr, "soak: could not run\n");
        e2e_teardown();
        return 1;
}

/*
 * demo_client.c - a small gemmd client: connects, allocates one host
 * shared buffer, submits a few random GEMM and SYR2K ops in f32, f16 and
 * bf16, row- and column-major, all at once so the daemon may batch them,
 * then checks each result against a double-precision reference.
 *
 *   demo_client [SOCKET [SEED]]     (SOCKET defaults to $GEMMD_SOCKET)
 *
 * Prints one line per op and exits 0 only if every op passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_util.h"

#define NOPS 12
#define BUFFER_BYTES (8u << 20)

/* --help, or a usage error: demo_client takes no options. Returns the exit
 * status, or -1 to go on. */
static int check_args(int argc, char **argv)
{
        if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
                printf("usage: demo_client [SOCKET [SEED]]\n"
                       "Submits %d random GEMM and SYR2K ops to gemmd at SOCKET (default:\n"
                       "$GEMMD_SOCKET, else the system socket) and checks each result.\n", NOPS);
                return 0;
        }
        for (int i = 1; i < argc; i++)
                if (argv[i][0] == '-' && argv[i][1]) {
                        fprintf(stderr, "demo_client: unknown option '%s'\n"
                                        "Try 'demo_client --help'.\n", argv[i]);
                        return 2;
                }
        if (argc > 3) {
                fprintf(stderr, "demo_client: unexpected argument: %s\n"
                                "Try 'demo_client --help'.\n", argv[3]);
                return 2;
        }
        return -1;
}

int main(int argc, char **argv)
{
        int early = check_args(argc, argv);
        const char *sock = argc > 1 ? argv[1] : NULL;
        uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : (uint64_t)getpid();
        struct e2e_prob p[NOPS];
        gemmd_ticket t[NOPS];
        struct e2e_arena ar;
        struct gemmd_info info;
        gemmd_client *c;
        int rc, failed = 0;

        if (early >= 0)
                return early;
        rc = gemmd_connect(sock, &c);
        if (rc) {
                fprintf(stderr, "demo_client: cannot connect: %s\n", gemmd_strerror(rc));
                return 1;
        }
        gemmd_get_info(c, &info);
        rc = e2e_arena_init(&ar, c, BUFFER_BYTES);
        if (rc) {
                fprintf(stderr, "demo_client: cannot allocate a shared buffer: %s\n",
                        gemmd_strerror(rc));
                gemmd_disconnect(c);
                return 1;
        }

        /* GEMM and SYR2K, row- and column-major, in each dtype, with random
         * sizes, transposes, padding, alpha and beta. */
        for (int i = 0; i < NOPS; i++) {
                struct e2e_spec s;

                e2e_spec_random(&s, &seed, 160);
                s.kind = i % 4 < 2 ? GEMMD_GEMM : GEMMD_SYR2K;
                s.row_major = i % 2;
                s.dtype = (enum gemmd_dtype)(i / 4);
                if (e2e_prob_place(&p[i], &s, &ar, &seed) != 0) {
                        fprintf(stderr, "demo_client: the shared buffer is too small\n");
                        return 1;
                }
                rc = gemmd_submit(c, &p[i].op, 1, GEMMD_PRIO_NORMAL, &t[i]);
                if (rc) {
                        fprintf(stderr, "demo_client: submit: %s\n", gemmd_strerror(rc));
                        return 1;
                }
        }

        for (int i = 0; i < NOPS; i++) {
                struct gemmd_result r = {0};
                char desc[96], why[256] = "";
                double err = 0;
                int ok;

                e2e_spec_str(&p[i].s, desc, sizeof(desc));
                rc = gemmd_wait(c, t[i], 60000, &r, 1);
                if (rc) {
                        printf("[pid %d] FAIL %-52s %s\n", (int)getpid(), desc, gemmd_strerror(rc));
                        failed++;
                        continue;
                }
                ok = e2e_prob_check(&p[i], &err, why, sizeof(why)) == 0;
                if (r.group_size)
                        printf("[pid %d] %s %-52s max rel err %.1e (bound %.1e)  group %llu of %u ops, "
                               "queued %llu us, ran %llu us on %s\n",
                               (int)getpid(), ok ? "ok  " : "FAIL", desc, err, e2e_tol(p[i].s.dtype),
                               (unsigned long long)r.group_id, r.group_size,
                               (unsigned long long)r.queue_us, (unsigned long long)r.run_us, r.kernel);
                else /* answered by its completion word: no account of where it ran */
                        printf("[pid %d] %s %-52s max rel err %.1e (bound %.1e)  answered by its "
                               "completion word\n",
                               (int)getpid(), ok ? "ok  " : "FAIL", desc, err, e2e_tol(p[i].s.dtype));
                if (!ok) {
                        printf("[pid %d]      %s\n", (int)getpid(), why);
                        failed++;
                }
                e2e_prob_free(&p[i]);
        }
        printf("[pid %d] %d of %d ops correct (daemon: %s backend, session %llu)\n",
               (int)getpid(), NOPS - failed, NOPS, info.backend,
               (unsigned long long)info.session_id);
        gemmd_disconnect(c);
        return failed ? 1 : 0;
}

/*
 * register-loop.c - a client that asks the daemon for device-memory work in a
 * loop, as a hostile or careless user could: each round is a task on the
 * device's worker thread, which launches no group meanwhile. Run it beside
 * `gemmbench clients` to see what it costs everyone else. Ways:
 *
 *   register  registers and unregisters one buffer (the daemon opens and
 *             closes the client's allocation each round);
 *   bounds    registers a range past the end of the allocation (opened,
 *             found too small, closed, refused);
 *   alloc     has the daemon allocate a buffer and unregisters it (the
 *             daemon allocates and frees device memory each round).
 *
 * Runs SECONDS, or until SIGTERM or SIGINT. Prints rounds, refusals and failures, and the rounds' latency percentiles.
 *
 *   cc -O2 -Iinclude -I$CUDA_HOME/include -o register-loop scripts/register-loop.c \
 *      build/libgemmd.a $(cc -print-file-name=libprotobuf-c.a) \
 *      -L$CUDA_HOME/lib64 -lcudart_static -lstdc++ -lpthread -ldl -lrt -lm
 *   ./register-loop SOCKET SECONDS register|bounds|alloc [BYTES]
 */
#include <signal.h>

#include "gemmd.h"
#include "probe.h"

#define MAX_ROUNDS 1000000

static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig; stop = 1; }

/* One round of `way`: 0, or the daemon's refusal code. */
static int one_round(gemmd_client *c, const char *way, void *dev, uint64_t bytes)
{
        gemmd_buffer id;
        void *p;
        int err;

        if (!strcmp(way, "register"))
                err = gemmd_register_device(c, dev, bytes, &id);
        else if (!strcmp(way, "bounds"))
                err = gemmd_register_device(c, dev, 2 * bytes + (64u << 20), &id);
        else
                err = gemmd_device_alloc(c, bytes, 0, &id, &p);
        if (err)
                return err;
        return gemmd_unregister(c, id);
}

int main(int argc, char **argv)
{
        uint64_t bytes = argc > 4 ? strtoull(argv[4], NULL, 0) : 1u << 20;
        static double lat[MAX_ROUNDS];
        double p[3];
        long rounds = 0, refused = 0;
        int first_err = 0;
        gemmd_client *c;
        void *dev = NULL;
        double t0, t_end;

        if (argc < 4 || (strcmp(argv[3], "register") && strcmp(argv[3], "bounds") &&
                         strcmp(argv[3], "alloc"))) {
                fprintf(stderr, "usage: %s SOCKET SECONDS register|bounds|alloc [BYTES]\n", argv[0]);
                return 2;
        }
        if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess) {
                fprintf(stderr, "register-loop: cannot allocate %llu bytes on device 0\n",
                        (unsigned long long)bytes);
                return 1;
        }
        int err = gemmd_connect(argv[1], &c);

        if (err) {
                fprintf(stderr, "register-loop: gemmd_connect: %s\n", gemmd_strerror(err));
                return 1;
        }
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        t0 = now_us();
        t_end = t0 + atof(argv[2]) * 1e6;
        for (double t = t0; t < t_end && !stop && rounds < MAX_ROUNDS; rounds++) {
                err = one_round(c, argv[3], dev, bytes);
                double t1 = now_us();

                lat[rounds] = t1 - t;
                t = t1;
                if (err) {
                        refused++;
                        if (!first_err)
                                first_err = err;
                        if (err != GEMMD_EBOUNDS && err != GEMMD_ELIMIT && err != GEMMD_EBUSY)
                                break;
                }
        }
        double secs = (now_us() - t0) / 1e6;

        if (rounds)
                percentiles(lat, (int)rounds, p);
        printf("register-loop %s: %ld rounds in %.2f s (%.0f/s), %ld refused%s%s; round us p50 %.0f "
               "p99 %.0f max %.0f\n",
               argv[3], rounds, secs, rounds / secs, refused, first_err ? ", first: " : "",
               first_err ? gemmd_strerror(first_err) : "", rounds ? p[0] : 0.0, rounds ? p[2] : 0.0,
               rounds ? lat[rounds - 1] : 0.0);
        gemmd_disconnect(c);
        cudaFree(dev);
        return 0;
}

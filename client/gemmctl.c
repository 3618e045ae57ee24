/*
 * gemmctl.c - the command-line client of gemmd.
 *
 *   gemmctl [--socket PATH] status | stats | top | gemm | syr2k | plan ...
 *
 * gemm and syr2k take NumPy .npy files and give NumPy's meaning to them
 * (row-major, OUT = alpha * A @ B + beta * C); the operands travel in one
 * host shared buffer, so their size is bounded by the daemon's buffer
 * limit, not by its inline limit. Every failure prints one line,
 * "gemmctl: <what>: <reason>", and exits with 1, or 2 when the command line
 * does not parse.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "client/gemmctl.h"
#include "client/npy.h"
#include "gemmd.h"
#include "kernels/half.h"

#define EXIT_USAGE 2
/* Returned by the parsers after printing the help: exit 0 at once. */
#define DONE (-1)
/* Operands start on this boundary inside the shared buffer, which suits
 * vector loads and TMA alike. */
#define OPERAND_ALIGN 256u

static const char usage_text[] =
        "usage: gemmctl [--socket PATH] COMMAND [ARGS]\n"
        "\n"
        "Options before the command:\n"
        "  --socket PATH    the daemon's socket (default: $GEMMD_SOCKET, else\n"
        "                   " GEMMD_DEFAULT_SOCKET ")\n"
        "  -h, --help       show this help and exit\n"
        "  --version        show gemmctl's version and exit\n"
        "\n"
        "Commands:\n"
        "  status           show the daemon's backend, version, session, devices and limits\n"
        "  stats [--json] [--watch [SECONDS]] [--count N]\n"
        "                   show the daemon's statistics, as text (default) or JSON;\n"
        "                   --watch shows them again every SECONDS (default 1), --count\n"
        "                   times (default: until interrupted)\n"
        "  top [--interval|-n SECONDS] [--count N]\n"
        "                   a live view, refreshed every SECONDS (default 1), --count\n"
        "                   times (default: until interrupted): per device busy, TFLOP/s,\n"
        "                   ops/s, queue and latency percentiles; requests, refusals and\n"
        "                   host CPU; the busiest sessions and the users\n"
        "\n"
        "  gemm [OPTIONS] A.npy B.npy [-c C.npy] -o OUT.npy\n"
        "      OUT = alpha * op(A) @ op(B) + beta * C, with NumPy's (row-major) meaning\n"
        "      --op-a n|t       op(A) is A (n) or A.T (t) (default: n)\n"
        "      --op-b n|t       op(B) is B (n) or B.T (t) (default: n)\n"
        "      --alpha X        (default: 1)\n"
        "      --beta Y         (default: 1 with -c; without -c, C is zero and Y\n"
        "                       must be 0)\n"
        "      --tf32           let a GPU use TF32 tensor cores for f32 (default: exact f32)\n"
        "      --dtype f32|f16|bf16|f64\n"
        "                       compute in this type: the inputs are rounded to it (to\n"
        "                       nearest, ties to even) and the result is written in the\n"
        "                       files' dtype (default: the files' dtype)\n"
        "      -c C.npy         the input C (default: none)\n"
        "      -o OUT.npy       the result (required)\n"
        "\n"
        "  syr2k [OPTIONS] A.npy B.npy [-c C.npy] -o OUT.npy\n"
        "      OUT = alpha * (op(A) @ op(B).T + op(B) @ op(A).T) + beta * C on the --uplo\n"
        "      triangle; the other triangle is C's (zero without -c)\n"
        "      --uplo lower|upper  the triangle computed (default: lower)\n"
        "      --trans n|t      op(X) is X, n x k (n), or X.T with X k x n (t) (default: n)\n"
        "      --alpha X        (default: 1)\n"
        "      --beta Y         (default: 1 with -c; without -c, C is zero and Y\n"
        "                       must be 0)\n"
        "      --dtype f32|f16|bf16|f64  as for gemm (default: the files' dtype)\n"
        "      -c C.npy         the input C, n x n (default: none)\n"
        "      -o OUT.npy       the result (required)\n"
        "\n"
        "  plan ...         build and show tile schedules, no daemon needed\n"
        "                   (see gemmctl plan --help)\n"
        "\n"
        "gemm and syr2k read float32 ('<f4'), float16 ('<f2'), bfloat16 ('|V2', as\n"
        "ml_dtypes saves it) or float64 ('<f8') .npy files of one dtype, in C or\n"
        "Fortran order, and write\n"
        "the result in C order. gemm takes 1-D and 2-D arrays as numpy.matmul does\n"
        "(not stacks of matrices), syr2k 2-D ones. A file '-' is standard input (one\n"
        "input at most) or, for -o, standard output.\n";

/* Prints "gemmctl: <what>: <reason of err>" and returns exit status 1. */
static int die(int err, const char *fmt, ...)
{
        va_list ap;

        fputs("gemmctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, ": %s\n", gemmd_strerror(err));
        return 1;
}

/* Like die() for a command line that does not parse. */
static int usage_error(const char *fmt, ...)
{
        va_list ap;

        fputs("gemmctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, " (see gemmctl --help): %s\n", gemmd_strerror(-EINVAL));
        return EXIT_USAGE;
}

/* ---- command lines ---------------------------------------------------- */

/* One option of a command: a switch (value == NULL) sets *flag; any other
 * option stores its argument in *value. */
struct opt {
        const char *name; /* long name, without the dashes */
        char short_name;  /* or 0 */
        const char **value;
        int *flag;
};

/* Parses the arguments of command `cmd` (argv[0] is the command) into opts
 * and up to maxpos positional arguments. "--name value", "--name=value",
 * "-x value" and "--" are understood. Returns 0, DONE after printing the
 * help for -h/--help, or EXIT_USAGE after a usage error. */
static int parse_args(const char *cmd, int argc, char **argv, const struct opt *opts,
                      const char **pos, int maxpos, int *npos)
{
        int i, only_pos = 0;

        *npos = 0;
        for (i = 1; i < argc; i++) {
                const char *arg = argv[i], *eq = NULL, *name;
                const struct opt *o;
                size_t len;

                if (only_pos || arg[0] != '-' || !arg[1]) {
                        if (*npos == maxpos) {
                                return usage_error("%s: unexpected argument '%s'", cmd, arg);
                        }
                        pos[(*npos)++] = arg;
                        continue;
                }
                if (!strcmp(arg, "--")) {
                        only_pos = 1;
                        continue;
                }
                if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
                        fputs(usage_text, stdout);
                        return DONE;
                }
                if (arg[1] == '-') {
                        name = arg + 2;
                        eq = strchr(name, '=');
                        len = eq ? (size_t)(eq - name) : strlen(name);
                        for (o = opts; o->name; o++)
                                if (strlen(o->name) == len && !strncmp(o->name, name, len))
                                        break;
                } else {
                        for (o = opts; o->name; o++)
                                if (o->short_name == arg[1] && !arg[2])
                                        break;
                }
                if (!o->name)
                        return usage_error("%s: unknown option '%s'", cmd, arg);
                if (!o->value) {
                        if (eq)
                                return usage_error("%s: option '--%s' takes no value", cmd,
                                                   o->name);
                        *o->flag = 1;
                } else if (eq) {
                        *o->value = eq + 1;
                } else if (i + 1 < argc) {
                        *o->value = argv[++i];
                } else {
                        return usage_error("%s: option '%s' needs a value", cmd, arg);
                }
        }
        return 0;
}

/* Reads a scalar as a double: an f64 op takes it as it is, the others
 * round it to float (check_scalars). */
static int parse_scalar(const char *cmd, const char *name, const char *s, double *v)
{
        char *end;

        errno = 0;
        *v = strtod(s, &end);
        if (!*s || *end || errno == ERANGE)
                return usage_error("%s: %s: '%s' is not a number", cmd, name, s);
        return 0;
}

/* The name of a gemmd dtype as gemmctl prints it. */
static const char *dtype_name(enum gemmd_dtype t)
{
        static const char *const names[] = {"f32", "f16", "bf16", "f64"};

        return (unsigned)t < 4 ? names[t] : "?";
}

/* Reads one of two spellings (case-insensitive, or their first letter). */
static int parse_choice(const char *cmd, const char *name, const char *s, const char *zero,
                        const char *one, int *v)
{
        if (!strcasecmp(s, zero) || (s[0] && !s[1] && tolower(s[0]) == zero[0]))
                *v = 0;
        else if (!strcasecmp(s, one) || (s[0] && !s[1] && tolower(s[0]) == one[0]))
                *v = 1;
        else
                return usage_error("%s: %s must be %s or %s, not '%s'", cmd, name, zero, one, s);
        return 0;
}

/* ---- status and stats ------------------------------------------------- */

static int connect_to(const char *socket, gemmd_client **c)
{
        int err = gemmd_connect(socket, c);

        if (err)
                return die(err, "connect to %s", socket);
        return 0;
}

static void print_bytes(uint64_t b)
{
        static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        double v = (double)b;
        int u = 0;

        while (v >= 1024 && u < 4) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                printf("%llu B", (unsigned long long)b);
        else
                printf("%.1f %s", v, unit[u]);
}

static int cmd_status(const char *socket, int argc, char **argv)
{
        static const struct opt opts[] = { { 0 } };
        struct gemmd_info in;
        struct gemmd_device d;
        gemmd_client *c;
        int npos, err;
        uint32_t i;

        err = parse_args("status", argc, argv, opts, NULL, 0, &npos);
        if (err)
                return err == DONE ? 0 : err;
        if (connect_to(socket, &c))
                return 1;
        gemmd_get_info(c, &in);
        printf("socket          %s\n", socket);
        printf("backend         %s\n", in.backend);
        printf("server version  %s\n", in.server_version);
        printf("protocol        %u\n", in.protocol_version);
        printf("session         %llu\n", (unsigned long long)in.session_id);
        printf("devices         %u\n", in.ndevices);
        for (i = 0; i < in.ndevices && !gemmd_get_device(c, i, &d); i++) {
                printf("  %u: %-4s  %s, %u units, ", d.index, d.backend, d.name, d.units);
                print_bytes(d.memory_bytes);
                printf(", dtypes");
                for (int t = GEMMD_F32; t <= GEMMD_F64; t++)
                        if (d.dtypes & (1u << t))
                                printf(" %s", dtype_name((enum gemmd_dtype)t));
                putchar('\n');
        }
        printf("limits\n");
        printf("  max_frame_bytes     %llu\n", (unsigned long long)in.max_frame_bytes);
        printf("  max_ops_per_submit  %u\n", in.max_ops_per_submit);
        printf("  max_inline_bytes    %llu\n", (unsigned long long)in.max_inline_bytes);
        printf("  max_inflight_ops    %u (per session)\n", in.max_inflight_ops);
        printf("  max_buffers         %u (per session)\n", in.max_buffers);
        printf("  max_buffer_bytes    %llu (per buffer)\n",
               (unsigned long long)in.max_buffer_bytes);
        printf("  max_queue_ops       %u (whole daemon)\n", in.max_queue_ops);
        gemmd_disconnect(c);
        return 0;
}

/* Reads a refresh interval in seconds, 0.1 to a day. */
static int parse_interval(const char *cmd, const char *name, const char *s, double *v)
{
        char *end;

        errno = 0;
        *v = strtod(s, &end);
        if (!*s || *end || errno || !(*v >= 0.1 && *v <= 86400))
                return usage_error("%s: %s: '%s' is not a number of seconds from 0.1 to 86400",
                                   cmd, name, s);
        return 0;
}

/* Reads a --count: how many refreshes, 0 for no end. */
static int parse_count(const char *cmd, const char *s, long *v)
{
        char *end;

        errno = 0;
        *v = strtol(s, &end, 10);
        if (!*s || *end || errno || *v < 0)
                return usage_error("%s: --count: '%s' is not a count", cmd, s);
        return 0;
}

static void sleep_seconds(double s)
{
        struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* Takes "--watch [SECONDS]" out of argv (its value is optional, which
 * parse_args does not know), leaving *watch NULL when absent, "1" when
 * given bare. Returns the new argc. */
static int take_watch(int argc, char **argv, const char **watch)
{
        int i, n = 0;

        *watch = NULL;
        for (i = 0; i < argc; i++) {
                if (i && !strncmp(argv[i], "--watch=", 8)) {
                        *watch = argv[i] + 8;
                } else if (i && !strcmp(argv[i], "--watch")) {
                        *watch = "1";
                        if (i + 1 < argc && (isdigit((unsigned char)argv[i + 1][0]) ||
                                             argv[i + 1][0] == '.'))
                                *watch = argv[++i];
                } else {
                        argv[n++] = argv[i];
                }
        }
        return n;
}

/* Prints the statistics once, or every `interval` seconds `count` times
 * (0: no end): on a terminal each replaces the last, in a pipe they
 * follow each other (JSON: one object a line). */
static int show_stats(gemmd_client *c, int json, int watching, double interval, long count)
{
        int tty = watching && isatty(STDOUT_FILENO), err;
        char *text;
        size_t len;
        long i;

        for (i = 0; !watching || !count || i < count; i++) {
                if (i)
                        sleep_seconds(interval);
                err = gemmd_stats(c, json, &text);
                if (err)
                        return die(err, "stats");
                if (tty)
                        fputs("\033[H\033[2J", stdout);
                else if (i && !json)
                        putchar('\n');
                len = strlen(text);
                fputs(text, stdout);
                if (!len || text[len - 1] != '\n')
                        putchar('\n');
                fflush(stdout);
                free(text);
                if (!watching)
                        break;
        }
        return 0;
}

static int cmd_stats(const char *socket, int argc, char **argv)
{
        int json = 0, npos, err;
        const char *watch, *count_arg = "0";
        const struct opt opts[] = { { "json", 0, NULL, &json },
                                    { "count", 0, &count_arg, NULL },
                                    { 0 } };
        gemmd_client *c;
        double interval = 1;
        long count;

        argc = take_watch(argc, argv, &watch);
        err = parse_args("stats", argc, argv, opts, NULL, 0, &npos);
        if (err)
                return err == DONE ? 0 : err;
        if (watch && parse_interval("stats", "--watch", watch, &interval))
                return EXIT_USAGE;
        if (parse_count("stats", count_arg, &count))
                return EXIT_USAGE;
        if (connect_to(socket, &c))
                return 1;
        err = show_stats(c, json, watch != NULL, interval, count);
        gemmd_disconnect(c);
        return err;
}

static int cmd_top(const char *socket, int argc, char **argv)
{
        const char *interval_arg = "1", *count_arg = "0";
        const struct opt opts[] = { { "interval", 'n', &interval_arg, NULL },
                                    { "count", 0, &count_arg, NULL },
                                    { 0 } };
        double interval;
        long count;
        int npos, err;

        err = parse_args("top", argc, argv, opts, NULL, 0, &npos);
        if (err)
                return err == DONE ? 0 : err;
        if (parse_interval("top", "--interval", interval_arg, &interval) ||
            parse_count("top", count_arg, &count))
                return EXIT_USAGE;
        return gemmctl_top_run(socket, interval, count);
}

/* ---- gemm and syr2k --------------------------------------------------- */

/* One matrix operand of a job. */
struct mat {
        const char *path; /* NULL: absent */
        struct npy_array a;
        uint64_t rows, cols; /* a 1-D A is one row, a 1-D B one column */
        uint64_t off; /* in the shared buffer */
};

/* What gemm and syr2k share: the files, the compute dtype, the result. */
struct job {
        const char *cmd;
        const char *socket;
        struct mat m[3]; /* A, B, C */
        const char *out;
        int out_ndim;            /* NumPy's shape of the result */
        uint64_t out_shape[2];
        const char *dtype_arg;
        enum gemmd_dtype file_dt; /* of every input, and of the result */
        enum gemmd_dtype dt;      /* computed in */
        double alpha, beta;
};

static enum gemmd_dtype npy_to_gemmd(enum npy_dtype t)
{
        return t == NPY_F16    ? GEMMD_F16
               : t == NPY_BF16 ? GEMMD_BF16
               : t == NPY_F64  ? GEMMD_F64
                               : GEMMD_F32;
}

static enum npy_dtype gemmd_to_npy(enum gemmd_dtype t)
{
        return t == GEMMD_F16    ? NPY_F16
               : t == GEMMD_BF16 ? NPY_BF16
               : t == GEMMD_F64  ? NPY_F64
                                 : NPY_F32;
}

static double load_elem(const void *p, size_t i, enum gemmd_dtype t)
{
        uint16_t h;
        double d;
        float f;

        if (t == GEMMD_F64) {
                memcpy(&d, (const char *)p + 8 * i, 8);
                return d;
        }
        if (t == GEMMD_F32) {
                memcpy(&f, (const char *)p + 4 * i, 4);
                return f;
        }
        memcpy(&h, (const char *)p + 2 * i, 2);
        return t == GEMMD_F16 ? gemmd_f16_to_f32(h) : gemmd_bf16_to_f32(h);
}

/* Stores v rounded to t: to nearest even, f16 and bf16 by way of f32 (a
 * float64 file's value can then round twice, off by one unit of the last
 * place in a rare tie). */
static void store_elem(void *p, size_t i, enum gemmd_dtype t, double v)
{
        float f = (float)v;
        uint16_t h;

        if (t == GEMMD_F64) {
                memcpy((char *)p + 8 * i, &v, 8);
                return;
        }
        if (t == GEMMD_F32) {
                memcpy((char *)p + 4 * i, &f, 4);
                return;
        }
        h = t == GEMMD_F16 ? gemmd_f32_to_f16(f) : gemmd_f32_to_bf16(f);
        memcpy((char *)p + 2 * i, &h, 2);
}

/* Copies n elements, rounding to nearest even where dst_t is narrower. */
static void convert(void *dst, enum gemmd_dtype dst_t, const void *src, enum gemmd_dtype src_t,
                    size_t n)
{
        size_t i;

        if (dst_t == src_t) {
                memcpy(dst, src, n * gemmd_dtype_size(dst_t));
                return;
        }
        for (i = 0; i < n; i++)
                store_elem(dst, i, dst_t, load_elem(src, i, src_t));
}

static void free_job(struct job *j)
{
        int i;

        for (i = 0; i < 3; i++)
                npy_free(&j->m[i].a);
}

/* Sets m's rows and cols from its shape as numpy.matmul reads it: gemm
 * takes 2-D arrays and 1-D ones (A as a row, B as a column; a 0-D C for
 * the 0-D product of two), syr2k 2-D ones only. Returns 0 or an exit
 * status. */
static int mat_shape(const struct job *j, int i, struct mat *m)
{
        int gemm = !strcmp(j->cmd, "gemm");

        if (m->a.ndim == 2) {
                m->rows = m->a.shape[0];
                m->cols = m->a.shape[1];
        } else if (gemm && m->a.ndim == 1) {
                m->rows = i == 1 ? m->a.shape[0] : 1;
                m->cols = i == 1 ? 1 : m->a.shape[0];
        } else if (gemm && m->a.ndim == 0 && i == 2) {
                m->rows = m->cols = 1;
        } else if (gemm) {
                return die(-EINVAL, "%s: gemm takes 1-D and 2-D arrays as numpy.matmul does, "
                                    "but not stacks of matrices; this one is %d-D",
                           m->path, m->a.ndim);
        } else {
                return die(-EINVAL, "%s: syr2k takes 2-D arrays, this one is %d-D", m->path,
                           m->a.ndim);
        }
        return 0;
}

/* Loads the job's files, checks they are non-empty arrays of a shape the
 * command takes and of one dtype, and settles the compute dtype. Returns 0
 * or an exit status. */
static int load_job(struct job *j)
{
        char why[256];
        int i, err;

        if (j->m[0].path && j->m[1].path && !strcmp(j->m[0].path, "-") +
            !strcmp(j->m[1].path, "-") + (j->m[2].path && !strcmp(j->m[2].path, "-")) > 1)
                return usage_error("%s: only one input can be '-' (standard input)", j->cmd);
        for (i = 0; i < 3; i++) {
                struct mat *m = &j->m[i];

                if (!m->path)
                        continue;
                err = npy_load(m->path, &m->a, why, sizeof(why));
                if (err)
                        return die(err, "%s: %s", m->path, why);
                err = mat_shape(j, i, m);
                if (err)
                        return err;
                if (!m->rows || !m->cols)
                        return die(-EINVAL, "%s: empty arrays (%llux%llu) are not supported",
                                   m->path, (unsigned long long)m->rows,
                                   (unsigned long long)m->cols);
                if (m->a.dtype != j->m[0].a.dtype)
                        return die(-EINVAL, "%s: %s is %s but %s is %s; use one dtype", j->cmd,
                                   j->m[0].path, npy_dtype_name(j->m[0].a.dtype), m->path,
                                   npy_dtype_name(m->a.dtype));
        }
        j->file_dt = npy_to_gemmd(j->m[0].a.dtype);
        j->dt = j->file_dt;
        if (!j->dtype_arg)
                return 0;
        if (!strcasecmp(j->dtype_arg, "f32") || !strcasecmp(j->dtype_arg, "float32"))
                j->dt = GEMMD_F32;
        else if (!strcasecmp(j->dtype_arg, "f16") || !strcasecmp(j->dtype_arg, "float16"))
                j->dt = GEMMD_F16;
        else if (!strcasecmp(j->dtype_arg, "bf16") || !strcasecmp(j->dtype_arg, "bfloat16"))
                j->dt = GEMMD_BF16;
        else if (!strcasecmp(j->dtype_arg, "f64") || !strcasecmp(j->dtype_arg, "float64"))
                j->dt = GEMMD_F64;
        else
                return usage_error("%s: --dtype must be f32, f16, bf16 or f64, not '%s'", j->cmd,
                                   j->dtype_arg);
        return 0;
}

/* alpha and beta of an op that is not f64 travel as floats: one past
 * float's range is refused rather than sent as infinity. */
static int check_scalars(const struct job *j)
{
        if (j->dt == GEMMD_F64)
                return 0;
        if (isinf((float)j->alpha) || isinf((float)j->beta))
                return usage_error("%s: alpha %g and beta %g must fit a float for %s", j->cmd,
                                   j->alpha, j->beta, dtype_name(j->dt));
        return 0;
}

/* Places the operands in one shared buffer, runs `op` on them and writes
 * the C region as the result (rows x cols). Returns an exit status. */
static int run_job(struct job *j, struct gemmd_op *op, uint64_t rows, uint64_t cols)
{
        size_t esz = gemmd_dtype_size(j->dt);
        uint64_t total = 0, count, bytes[3];
        struct gemmd_result res;
        struct npy_array out = { 0 };
        gemmd_client *c = NULL;
        gemmd_buffer id = 0;
        char why[256];
        void *buf;
        int i, err, status = 1;

        for (i = 0; i < 3; i++) {
                struct mat *m = &j->m[i];
                uint64_t r = i < 2 ? m->rows : rows, cl = i < 2 ? m->cols : cols;

                if (__builtin_mul_overflow(r, cl, &count) ||
                    __builtin_mul_overflow(count, esz, &bytes[i]) ||
                    __builtin_add_overflow(total, OPERAND_ALIGN - 1, &total))
                        return die(-EOVERFLOW, "%s: the operands are too large", j->cmd);
                total &= ~(uint64_t)(OPERAND_ALIGN - 1);
                m->off = total;
                if (__builtin_add_overflow(total, bytes[i], &total))
                        return die(-EOVERFLOW, "%s: the operands are too large", j->cmd);
        }
        if (connect_to(j->socket, &c))
                return 1;
        err = gemmd_buffer_alloc(c, total, &id, &buf);
        if (err == GEMMD_ELIMIT) {
                struct gemmd_info in;

                gemmd_get_info(c, &in);
                status = die(err, "%s: the operands need %llu bytes, the daemon's buffers hold "
                                  "at most %llu", j->cmd, (unsigned long long)total,
                             (unsigned long long)in.max_buffer_bytes);
                goto disconnect;
        }
        if (err) {
                status = die(err, "%s: allocate a shared buffer of %llu bytes", j->cmd,
                             (unsigned long long)total);
                goto disconnect;
        }
        /* The buffer starts zeroed, which is the C of a job without one. */
        for (i = 0; i < 3; i++)
                if (j->m[i].path)
                        convert((char *)buf + j->m[i].off, j->dt, j->m[i].a.data, j->file_dt,
                                (size_t)(bytes[i] / esz));
        op->dtype = j->dt;
        op->alpha = j->alpha;
        op->beta = j->beta;
        op->a.buffer = op->b.buffer = op->c.buffer = id;
        op->a.offset = j->m[0].off;
        op->b.offset = j->m[1].off;
        op->c.offset = j->m[2].off;
        err = gemmd_run(c, op, 1, &res);
        if (err) {
                const char *why = gemmd_last_error(c);

                status = *why ? die(err, "%s: %s", j->cmd, why) : die(err, "%s", j->cmd);
                goto free_buffer;
        }
        out.dtype = gemmd_to_npy(j->file_dt);
        out.ndim = j->out_ndim;
        out.shape[0] = j->out_shape[0];
        out.shape[1] = j->out_shape[1];
        out.nbytes = (size_t)(rows * cols * gemmd_dtype_size(j->file_dt));
        out.data = malloc(out.nbytes);
        if (!out.data) {
                status = die(-ENOMEM, "%s: the result", j->cmd);
                goto free_buffer;
        }
        convert(out.data, j->file_dt, (char *)buf + j->m[2].off, j->dt, (size_t)(rows * cols));
        err = npy_save(j->out, out.dtype, out.ndim, out.shape, out.data, why, sizeof(why));
        if (err)
                status = die(err, "%s: %s", j->out, why);
        else
                status = 0;
        npy_free(&out);
free_buffer:
        gemmd_buffer_free(c, id);
disconnect:
        gemmd_disconnect(c);
        return status;
}

/* The rule of C and beta, shared with the C API and Python: with C, beta
 * defaults to 1; without C, C is zero and beta may only be 0. Returns 0
 * or an exit status. */
static int parse_beta(struct job *j, const char *beta)
{
        int err;

        j->beta = j->m[2].path ? 1.0 : 0.0;
        if (!beta)
                return 0;
        err = parse_scalar(j->cmd, "--beta", beta, &j->beta);
        if (!err && !j->m[2].path && j->beta != 0.0)
                return usage_error("%s: --beta %s needs -c C.npy (without C, C is zero and "
                                   "beta must be 0)", j->cmd, beta);
        return err;
}

/* Parses what gemm and syr2k share, adding their common options to opts
 * (which has room), and loads the files. Returns 0, DONE or an exit
 * status. */
static int parse_job(struct job *j, int argc, char **argv, struct opt *opts)
{
        const char *pos[2], *alpha = "1", *beta = NULL;
        int npos, err, n = 0;

        while (opts[n].name)
                n++;
        opts[n++] = (struct opt){ "alpha", 0, &alpha, NULL };
        opts[n++] = (struct opt){ "beta", 0, &beta, NULL };
        opts[n++] = (struct opt){ "dtype", 0, &j->dtype_arg, NULL };
        opts[n++] = (struct opt){ "c", 'c', &j->m[2].path, NULL };
        opts[n++] = (struct opt){ "out", 'o', &j->out, NULL };
        opts[n] = (struct opt){ 0 };
        err = parse_args(j->cmd, argc, argv, opts, pos, 2, &npos);
        if (err)
                return err;
        if (npos != 2)
                return usage_error("%s: needs two input files, A.npy and B.npy", j->cmd);
        if (!j->out)
                return usage_error("%s: -o OUT.npy is required", j->cmd);
        j->m[0].path = pos[0];
        j->m[1].path = pos[1];
        err = parse_scalar(j->cmd, "--alpha", alpha, &j->alpha);
        if (!err)
                err = parse_beta(j, beta);
        if (!err)
                err = load_job(j);
        if (!err)
                err = check_scalars(j);
        return err;
}

/* The shape numpy.matmul gives op(A) @ op(B), m x n: the dimension of a
 * 1-D operand is dropped. */
static void gemm_out_shape(struct job *j, uint64_t m, uint64_t n)
{
        j->out_ndim = 0;
        if (j->m[0].a.ndim == 2)
                j->out_shape[j->out_ndim++] = m;
        if (j->m[1].a.ndim == 2)
                j->out_shape[j->out_ndim++] = n;
}

static int same_shape(const struct npy_array *a, int ndim, const uint64_t *shape)
{
        int i;

        if (a->ndim != ndim)
                return 0;
        for (i = 0; i < ndim; i++)
                if (a->shape[i] != shape[i])
                        return 0;
        return 1;
}

/* Writes a shape as NumPy prints it, "(3, 4)", "(5,)" or "()", into buf. */
static const char *shape_str(int ndim, const uint64_t *shape, char buf[64])
{
        int i, n = snprintf(buf, 64, "(");

        for (i = 0; i < ndim && i < 2 && n < 64; i++)
                n += snprintf(buf + n, (size_t)(64 - n), i ? ", %llu" : "%llu",
                              (unsigned long long)shape[i]);
        if (n < 64)
                snprintf(buf + n, (size_t)(64 - n), ndim == 1 ? ",)" : ")");
        return buf;
}

static int cmd_gemm(const char *socket, int argc, char **argv)
{
        const char *op_a = "n", *op_b = "n";
        int tf32 = 0, ta = 0, tb = 0, status;
        struct opt opts[16] = {
                { "op-a", 0, &op_a, NULL },
                { "op-b", 0, &op_b, NULL },
                { "tf32", 0, NULL, &tf32 },
                { 0 },
        };
        struct job j = { .cmd = "gemm", .socket = socket };
        struct gemmd_op op = { .kind = GEMMD_GEMM, .flags = GEMMD_OPF_ROW_MAJOR };
        struct mat *a = &j.m[0], *b = &j.m[1], *c = &j.m[2];
        char sa[64], sb[64];
        uint64_t m, n, k, kb;

        status = parse_job(&j, argc, argv, opts);
        if (!status)
                status = parse_choice("gemm", "--op-a", op_a, "n", "t", &ta);
        if (!status)
                status = parse_choice("gemm", "--op-b", op_b, "n", "t", &tb);
        if (status)
                goto out;
        /* A 1-D array is its own transpose, as in NumPy. */
        ta &= a->a.ndim == 2;
        tb &= b->a.ndim == 2;
        m = ta ? a->cols : a->rows;
        k = ta ? a->rows : a->cols;
        kb = tb ? b->cols : b->rows;
        n = tb ? b->rows : b->cols;
        if (k != kb) {
                status = die(-EINVAL, "gemm: op(A) is %llux%llu and op(B) is %llux%llu: their "
                                      "inner dimensions differ", (unsigned long long)m,
                             (unsigned long long)k, (unsigned long long)kb,
                             (unsigned long long)n);
                goto out;
        }
        gemm_out_shape(&j, m, n);
        if (c->path && !same_shape(&c->a, j.out_ndim, j.out_shape)) {
                status = die(-EINVAL, "gemm: %s is %s but op(A) @ op(B) is %s", c->path,
                             shape_str(c->a.ndim, c->a.shape, sa),
                             shape_str(j.out_ndim, j.out_shape, sb));
                goto out;
        }
        if (tf32 && j.dt != GEMMD_F32) {
                status = die(-EINVAL, "gemm: --tf32 applies to f32, not %s", dtype_name(j.dt));
                goto out;
        }
        op.trans_a = ta ? GEMMD_OP_T : GEMMD_OP_N;
        op.trans_b = tb ? GEMMD_OP_T : GEMMD_OP_N;
        op.flags |= tf32 ? GEMMD_OPF_ALLOW_TF32 : 0;
        op.m = (int64_t)m;
        op.n = (int64_t)n;
        op.k = (int64_t)k;
        op.lda = (int64_t)a->cols;
        op.ldb = (int64_t)b->cols;
        op.ldc = (int64_t)n;
        status = run_job(&j, &op, m, n);
out:
        free_job(&j);
        return status == DONE ? 0 : status;
}

static int cmd_syr2k(const char *socket, int argc, char **argv)
{
        const char *uplo = "lower", *trans = "n";
        int up = 0, tr = 0, status;
        struct opt opts[16] = {
                { "uplo", 0, &uplo, NULL },
                { "trans", 0, &trans, NULL },
                { 0 },
        };
        struct job j = { .cmd = "syr2k", .socket = socket };
        struct gemmd_op op = { .kind = GEMMD_SYR2K, .flags = GEMMD_OPF_ROW_MAJOR };
        struct mat *a = &j.m[0], *b = &j.m[1], *c = &j.m[2];
        uint64_t n, k;

        status = parse_job(&j, argc, argv, opts);
        if (!status)
                status = parse_choice("syr2k", "--uplo", uplo, "lower", "upper", &up);
        if (!status)
                status = parse_choice("syr2k", "--trans", trans, "n", "t", &tr);
        if (status)
                goto out;
        if (a->rows != b->rows || a->cols != b->cols) {
                status = die(-EINVAL, "syr2k: %s is %llux%llu but %s is %llux%llu: A and B "
                                      "must have one shape", a->path,
                             (unsigned long long)a->rows, (unsigned long long)a->cols, b->path,
                             (unsigned long long)b->rows, (unsigned long long)b->cols);
                goto out;
        }
        n = tr ? a->cols : a->rows;
        k = tr ? a->rows : a->cols;
        if (c->path && (c->rows != n || c->cols != n)) {
                status = die(-EINVAL, "syr2k: %s is %llux%llu but the result is %llux%llu",
                             c->path, (unsigned long long)c->rows, (unsigned long long)c->cols,
                             (unsigned long long)n, (unsigned long long)n);
                goto out;
        }
        j.out_ndim = 2;
        j.out_shape[0] = j.out_shape[1] = n;
        op.trans_a = op.trans_b = tr ? GEMMD_OP_T : GEMMD_OP_N;
        op.uplo = up ? GEMMD_UPPER : GEMMD_LOWER;
        op.m = op.n = (int64_t)n;
        op.k = (int64_t)k;
        op.lda = op.ldb = (int64_t)a->cols;
        op.ldc = (int64_t)n;
        status = run_job(&j, &op, n, n);
out:
        free_job(&j);
        return status == DONE ? 0 : status;
}

/* ---- main ------------------------------------------------------------- */

int main(int argc, char **argv)
{
        const char *socket = NULL, *cmd;
        int i;

        for (i = 1; i < argc && argv[i][0] == '-'; i++) {
                const char *arg = argv[i];

                if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
                        fputs(usage_text, stdout);
                        return 0;
                }
                if (!strcmp(arg, "--version")) {
                        printf("gemmctl %s (protocol %d)\n", GEMMD_VERSION,
                               GEMMD_PROTOCOL_VERSION);
                        return 0;
                }
                if (!strncmp(arg, "--socket=", 9)) {
                        socket = arg + 9;
                } else if (!strcmp(arg, "--socket")) {
                        if (++i == argc)
                                return usage_error("option '--socket' needs a value");
                        socket = argv[i];
                } else {
                        return usage_error("unknown option '%s'", arg);
                }
        }
        if (i == argc)
                return usage_error("no command given");
        cmd = argv[i];
        if (!strcmp(cmd, "plan"))
                return gemmctl_plan_main(argc - i, argv + i);
        if (!socket || !*socket)
                socket = getenv("GEMMD_SOCKET");
        if (!socket || !*socket)
                socket = GEMMD_DEFAULT_SOCKET;
        if (!strcmp(cmd, "status"))
                return cmd_status(socket, argc - i, argv + i);
        if (!strcmp(cmd, "stats"))
                return cmd_stats(socket, argc - i, argv + i);
        if (!strcmp(cmd, "top"))
                return cmd_top(socket, argc - i, argv + i);
        if (!strcmp(cmd, "gemm"))
                return cmd_gemm(socket, argc - i, argv + i);
        if (!strcmp(cmd, "syr2k"))
                return cmd_syr2k(socket, argc - i, argv + i);
        return usage_error("unknown command '%s'", cmd);
}

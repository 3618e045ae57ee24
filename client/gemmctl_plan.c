/*
 * gemmctl_plan.c - `gemmctl plan`: builds the scheduler's plans for a group
 * of problems read from a file and reports how good and how fast they are.
 * Works without a daemon.
 *
 *   gemmctl plan [--mode rr|sorted|lpt|split|device|spt|auto|all] [--ctas N]
 *                [--tile MxNxK] [--cost SPEC] [--reps N] [--json] FILE
 *
 * FILE ("-" for stdin) holds one problem per line:
 *
 *   gemm M N K [dtype]
 *   syr2k N K [dtype] [lower|upper]
 *
 * dtype is f32, tf32 (f32 allowed to use TF32), f16, bf16 (the default) or f64;
 * a SYR2K is lower unless it says upper. `#` starts a comment; blank lines
 * are skipped.
 *
 * For each mode (auto as "auto>MODE", with the mode it chose) it prints the
 * tiles and entries of the plan, its predicted makespan and lower bound
 * (cost units, see scheduler/cost.h), their ratio, and the median build
 * time over --reps builds (after one warm-up build that sizes the plan's
 * buffer, as a long-running daemon's would be).
 * Exit status: 0, 1 for bad input (file or group), 2 for bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/gemmctl.h"
#include "gemmd.h"
#include "scheduler/cost.h"
#include "scheduler/plan.h"

#define EXIT_INPUT 1
#define EXIT_USAGE 2

/* Stop repeating builds of one mode after this much time. */
#define TIME_BUDGET_US 200000.0

struct opts {
        int modes[SCHED_NMODES]; /* which modes to run */
        uint32_t ctas;
        struct sched_shape shape;
        struct sched_cost cost;
        unsigned reps;
        int json;
        const char *file;
};

/* The problems read from FILE, with the line each came from. */
struct group {
        struct sched_problem *probs;
        unsigned *lines;
        uint32_t n, cap;
};

static void usage(FILE *f)
{
        fprintf(f, "usage: gemmctl plan [--mode rr|sorted|lpt|split|device|spt|auto|all] [--ctas N] "
                   "[--tile MxNxK] [--cost SPEC] [--reps N] [--json] FILE\n"
                   "  FILE: one problem per line, \"gemm M N K [dtype]\" or "
                   "\"syr2k N K [dtype] [lower|upper]\";\n"
                   "        dtype f32|tf32|f16|bf16|f64 (default bf16); '#' starts a comment; "
                   "- reads stdin\n"
                   "  --mode   plan mode, or all (rr, sorted, lpt, split, device, spt); default all\n"
                   "  --ctas   CTAs of the persistent launch; default 132\n"
                   "  --tile   tile shape; default 128x128x64\n"
                   "  --cost   cost model overrides, name=value,... (see scheduler/cost.h)\n"
                   "  --reps   builds timed per mode (median reported); default 21\n"
                   "  --json   print a JSON array, one object per mode\n");
}

static int usage_error(const char *fmt, const char *arg)
{
        fprintf(stderr, "gemmctl plan: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\nTry 'gemmctl plan --help'.\n");
        return EXIT_USAGE;
}

/* Parses a decimal number in [1, max]. Returns 0 or -EINVAL. */
static int parse_u32(const char *s, unsigned long max, uint32_t *out)
{
        unsigned long v;
        char *end;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno != 0 || *end != '\0' || v == 0 || v > max)
                return -EINVAL;
        *out = (uint32_t)v;
        return 0;
}

static int parse_shape(const char *s, struct sched_shape *shape)
{
        char buf[64], *x1, *x2;

        if (strlen(s) >= sizeof(buf))
                return -EINVAL;
        strcpy(buf, s);
        x1 = strchr(buf, 'x');
        x2 = x1 ? strchr(x1 + 1, 'x') : NULL;
        if (x1 == NULL || x2 == NULL)
                return -EINVAL;
        *x1 = *x2 = '\0';
        if (parse_u32(buf, 4096, &shape->tm) != 0 || parse_u32(x1 + 1, 4096, &shape->tn) != 0 ||
            parse_u32(x2 + 1, SCHED_KCHUNK, &shape->tk) != 0 || SCHED_KCHUNK % shape->tk != 0)
                return -EINVAL;
        return 0;
}

/* Parses the command line into *o. Returns 0, or an exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
        int i, m;

        memset(o, 0, sizeof(*o));
        o->ctas = 132;
        o->shape = (struct sched_shape){128, 128, 64};
        o->cost = *sched_cost_get();
        o->reps = 21;
        for (i = 1; i < argc; i++) {
                const char *a = argv[i], *v = NULL, *eq;
                char name[16];
                size_t len;

                if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                        usage(stdout);
                        return -1;
                }
                if (strcmp(a, "--json") == 0) {
                        o->json = 1;
                        continue;
                }
                if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
                        if (o->file != NULL)
                                return usage_error("more than one FILE (%s)", a);
                        o->file = a;
                        continue;
                }
                eq = strchr(a, '=');
                len = eq ? (size_t)(eq - a) : strlen(a);
                if (len >= sizeof(name))
                        return usage_error("unknown option %s", a);
                memcpy(name, a, len);
                name[len] = '\0';
                if (strcmp(name, "--mode") != 0 && strcmp(name, "--ctas") != 0 &&
                    strcmp(name, "--tile") != 0 && strcmp(name, "--cost") != 0 &&
                    strcmp(name, "--reps") != 0)
                        return usage_error("unknown option %s", a);
                if (eq != NULL)
                        v = eq + 1;
                else if (i + 1 < argc)
                        v = argv[++i];
                else
                        return usage_error("%s needs a value", name);

                if (strcmp(name, "--mode") == 0) {
                        enum sched_mode mode;

                        if (strcmp(v, "all") == 0) {
                                for (m = 0; m < SCHED_NMODES; m++)
                                        o->modes[m] = 1;
                        } else if (sched_mode_parse(v, &mode) == 0) {
                                o->modes[mode] = 1;
                        } else {
                                return usage_error("unknown mode %s", v);
                        }
                } else if (strcmp(name, "--ctas") == 0) {
                        if (parse_u32(v, 65536, &o->ctas) != 0)
                                return usage_error("bad --ctas %s (1..65536)", v);
                } else if (strcmp(name, "--tile") == 0) {
                        if (parse_shape(v, &o->shape) != 0)
                                return usage_error("bad --tile %s (MxNxK, K dividing 512)", v);
                } else if (strcmp(name, "--cost") == 0) {
                        if (sched_cost_parse(&o->cost, v) != 0)
                                return usage_error("bad --cost %s", v);
                } else {
                        uint32_t r;

                        if (parse_u32(v, 100000, &r) != 0)
                                return usage_error("bad --reps %s", v);
                        o->reps = r;
                }
        }
        if (o->file == NULL)
                return usage_error("%s", "no FILE given");
        for (m = 0; m < SCHED_NMODES && !o->modes[m]; m++)
                ;
        if (m == SCHED_NMODES)
                for (m = 0; m < SCHED_NMODES; m++)
                        o->modes[m] = 1;
        return 0;
}

static int group_add(struct group *g, const struct sched_problem *p, unsigned line)
{
        if (g->n == g->cap) {
                uint32_t cap = g->cap ? 2 * g->cap : 64;
                struct sched_problem *np = realloc(g->probs, cap * sizeof(*np));
                unsigned *nl;

                if (np == NULL)
                        return -ENOMEM;
                g->probs = np;
                nl = realloc(g->lines, cap * sizeof(*nl));
                if (nl == NULL)
                        return -ENOMEM;
                g->lines = nl;
                g->cap = cap;
        }
        g->probs[g->n] = *p;
        g->lines[g->n] = line;
        g->n++;
        return 0;
}

/* Sets dtype (and tf32) from a token; returns 0 or -EINVAL. */
static int parse_dtype(const char *s, struct sched_problem *p)
{
        p->tf32 = 0;
        if (strcmp(s, "f32") == 0)
                p->dtype = GEMMD_F32;
        else if (strcmp(s, "tf32") == 0)
                p->dtype = GEMMD_F32, p->tf32 = 1;
        else if (strcmp(s, "f16") == 0)
                p->dtype = GEMMD_F16;
        else if (strcmp(s, "bf16") == 0)
                p->dtype = GEMMD_BF16;
        else if (strcmp(s, "f64") == 0)
                p->dtype = GEMMD_F64;
        else
                return -EINVAL;
        return 0;
}

/* Parses one line's tokens into *p. Returns 0, or -EINVAL with a message
 * in err. */
static int parse_problem(char **tok, int ntok, struct sched_problem *p, char *err, size_t errlen)
{
        int syr2k, nsizes, i, seen_dtype = 0, seen_uplo = 0;
        uint32_t v[3];

        memset(p, 0, sizeof(*p));
        p->dtype = GEMMD_BF16;
        if (strcmp(tok[0], "gemm") == 0)
                syr2k = 0;
        else if (strcmp(tok[0], "syr2k") == 0)
                syr2k = 1;
        else {
                snprintf(err, errlen, "unknown op '%s' (gemm or syr2k)", tok[0]);
                return -EINVAL;
        }
        nsizes = syr2k ? 2 : 3;
        if (ntok < 1 + nsizes) {
                snprintf(err, errlen, "%s needs %s", tok[0], syr2k ? "N K" : "M N K");
                return -EINVAL;
        }
        for (i = 0; i < nsizes; i++) {
                if (parse_u32(tok[1 + i], (1ul << 31) - 1, &v[i]) != 0) {
                        snprintf(err, errlen, "bad size '%s' (1 .. 2^31-1)", tok[1 + i]);
                        return -EINVAL;
                }
        }
        for (i = 1 + nsizes; i < ntok; i++) {
                int is_uplo = strcmp(tok[i], "lower") == 0 || strcmp(tok[i], "upper") == 0;

                if (syr2k && is_uplo && !seen_uplo) {
                        p->uplo = tok[i][0] == 'u';
                        seen_uplo = 1;
                } else if (!is_uplo && !seen_dtype && parse_dtype(tok[i], p) == 0) {
                        seen_dtype = 1;
                } else if (is_uplo || (seen_dtype && parse_dtype(tok[i], p) == 0)) {
                        snprintf(err, errlen, "unexpected '%s' (%s)", tok[i],
                                 syr2k ? "syr2k N K [dtype] [lower|upper]" : "gemm M N K [dtype]");
                        return -EINVAL;
                } else {
                        snprintf(err, errlen, "unknown dtype '%s' (f32, tf32, f16, bf16 or f64)",
                                 tok[i]);
                        return -EINVAL;
                }
        }
        p->kind = syr2k ? SCHED_SYR2K : SCHED_GEMM;
        p->m = v[0];
        p->n = syr2k ? v[0] : v[1];
        p->k = syr2k ? v[1] : v[2];
        if (p->k > SCHED_MAX_K) {
                snprintf(err, errlen, "K %u is over the largest K a plan takes (%u)", p->k,
                         SCHED_MAX_K);
                return -EINVAL;
        }
        return 0;
}

/* Reads the problem file. Returns 0 or an exit status (message printed). */
static int read_group(const char *path, struct group *g)
{
        FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
        const char *name = f == stdin ? "<stdin>" : path;
        char *line = NULL, err[160];
        size_t cap = 0;
        unsigned lineno = 0;
        int rc = 0;

        if (f == NULL) {
                fprintf(stderr, "gemmctl plan: %s: %s\n", path, strerror(errno));
                return EXIT_INPUT;
        }
        while (getline(&line, &cap, f) >= 0) {
                char *tok[16], *save = NULL, *t, *hash = strchr(line, '#');
                struct sched_problem p;
                int ntok = 0;

                lineno++;
                if (hash != NULL)
                        *hash = '\0';
                for (t = strtok_r(line, " \t\r\n", &save); t != NULL;
                     t = strtok_r(NULL, " \t\r\n", &save)) {
                        if (ntok == 16)
                                break;
                        tok[ntok++] = t;
                }
                if (ntok == 0)
                        continue;
                if (ntok == 16 || parse_problem(tok, ntok, &p, err, sizeof(err)) != 0) {
                        fprintf(stderr, "gemmctl plan: %s:%u: %s\n", name, lineno,
                                ntok == 16 ? "too many fields" : err);
                        rc = EXIT_INPUT;
                        break;
                }
                if (group_add(g, &p, lineno) != 0) {
                        fprintf(stderr, "gemmctl plan: out of memory\n");
                        rc = EXIT_INPUT;
                        break;
                }
        }
        if (rc == 0 && ferror(f)) {
                fprintf(stderr, "gemmctl plan: %s: read error\n", name);
                rc = EXIT_INPUT;
        }
        if (rc == 0 && g->n == 0) {
                fprintf(stderr, "gemmctl plan: %s: no problems\n", name);
                rc = EXIT_INPUT;
        }
        free(line);
        if (f != stdin)
                fclose(f);
        return rc;
}

static int cmp_double(const void *x, const void *y)
{
        double a = *(const double *)x, b = *(const double *)y;

        return (a > b) - (a < b);
}

/* Explains why the planner rejected the group: the first problem it cannot
 * plan alone, else the group as a whole. */
static void explain(const struct opts *o, const struct group *g, const struct sched_config *cfg,
                    int rc)
{
        const char *name = strcmp(o->file, "-") == 0 ? "<stdin>" : o->file;
        uint32_t tm = cfg->shape.tm, tn = cfg->shape.tn, i;
        struct sched_plan one;

        if (rc == -ENOMEM) {
                fprintf(stderr, "gemmctl plan: out of memory building the plan\n");
                return;
        }
        sched_plan_init(&one);
        for (i = 0; i < g->n; i++) {
                const struct sched_problem *p = &g->probs[i];

                if (sched_plan_build_cost(&one, p, 1, cfg, &o->cost) != -EINVAL)
                        continue;
                if (p->kind == SCHED_SYR2K && (tm > tn ? tm % tn : tn % tm) != 0)
                        fprintf(stderr,
                                "gemmctl plan: %s:%u: a SYR2K needs a tile whose M and N "
                                "divide one another, not %ux%u\n",
                                name, g->lines[i], tm, tn);
                else
                        fprintf(stderr,
                                "gemmctl plan: %s:%u: more than 2^32 tiles of %ux%u\n", name,
                                g->lines[i], tm, tn);
                sched_plan_deinit(&one);
                return;
        }
        sched_plan_deinit(&one);
        fprintf(stderr, "gemmctl plan: the group has too many tiles for one plan\n");
}

struct result {
        enum sched_mode mode, chosen; /* chosen: the plan's own (auto's choice) */
        uint64_t tiles;
        uint32_t entries, nsplit, ctas;
        int apart; /* split tiles added apart (the fill split) */
        double makespan, lower_bound, ratio, build_us;
};

/* Builds the plan of one mode reps times; fills *r with the last plan's
 * figures and the median build time. Returns 0 or the planner's error. */
static int run_mode(const struct opts *o, const struct group *g, enum sched_mode mode,
                    struct result *r, double *times)
{
        struct sched_config cfg = {mode, o->shape, o->ctas};
        struct sched_plan plan;
        double spent = 0;
        unsigned i, n = 0;
        int rc;

        sched_plan_init(&plan);
        rc = sched_plan_build_cost(&plan, g->probs, g->n, &cfg, &o->cost); /* warm-up */
        if (rc != 0) {
                sched_plan_deinit(&plan);
                explain(o, g, &cfg, rc);
                return rc;
        }
        for (i = 0; i < o->reps && (i < 5 || spent < TIME_BUDGET_US); i++) {
                sched_plan_build_cost(&plan, g->probs, g->n, &cfg, &o->cost);
                times[n++] = plan.build_us;
                spent += plan.build_us;
        }
        qsort(times, n, sizeof(*times), cmp_double);
        r->mode = mode;
        r->chosen = plan.mode;
        r->tiles = plan.tiles;
        r->entries = plan.nentries;
        r->nsplit = plan.nsplit;
        r->ctas = plan.nctas;
        r->apart = plan.reduce_apart;
        r->makespan = plan.makespan;
        r->lower_bound = plan.lower_bound;
        r->ratio = plan.lower_bound > 0 ? plan.makespan / plan.lower_bound : 1.0;
        r->build_us = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
        sched_plan_deinit(&plan);
        return 0;
}

static void print_table(const struct opts *o, const struct group *g, const struct result *res,
                        int nres)
{
        int i;

        printf("%u problems, %u CTAs, tile %ux%ux%u\n", g->n, o->ctas, o->shape.tm, o->shape.tn,
               o->shape.tk);
        printf("%-16s %9s %6s %9s %6s %12s %12s %7s %9s %8s\n", "mode", "tiles", "ctas", "entries", "split",
               "makespan", "lower_bound", "ratio", "build_us", "ns/tile");
        for (i = 0; i < nres; i++) {
                const struct result *r = &res[i];
                char name[32];

                /* "+fill": one wave cut to fill the CTAs, its sums added apart */
                snprintf(name, sizeof(name), "%s%s%s%s", sched_mode_name(r->mode), r->chosen != r->mode ? ">" : "",
                         r->chosen != r->mode ? sched_mode_name(r->chosen) : "", r->apart ? "+fill" : "");
                printf("%-16s %9llu %6u %9u %6u %12.1f %12.1f %7.3f %9.1f %8.1f\n",
                       name, (unsigned long long)r->tiles, r->ctas, r->entries,
                       r->nsplit, r->makespan, r->lower_bound, r->ratio, r->build_us,
                       r->tiles ? r->build_us * 1e3 / (double)r->tiles : 0.0);
        }
}

static void print_json(const struct result *res, int nres)
{
        int i;

        printf("[");
        for (i = 0; i < nres; i++) {
                const struct result *r = &res[i];

                printf("%s\n  {\"mode\": \"%s\", \"chosen\": \"%s\", \"tiles\": %llu, \"ctas\": %u, "
                       "\"entries\": %u, \"split\": %u, \"reduce_apart\": %s, "
                       "\"makespan\": %.3f, \"lower_bound\": %.3f, \"ratio\": %.5f, "
                       "\"build_us\": %.2f}",
                       i ? "," : "", sched_mode_name(r->mode), sched_mode_name(r->chosen),
                       (unsigned long long)r->tiles, r->ctas, r->entries, r->nsplit,
                       r->apart ? "true" : "false", r->makespan, r->lower_bound, r->ratio, r->build_us);
        }
        printf("\n]\n");
}

int gemmctl_plan_main(int argc, char **argv)
{
        struct group g = {0};
        struct result res[SCHED_NMODES];
        struct opts o;
        double *times = NULL;
        int rc, m, nres = 0;

        rc = parse_args(argc, argv, &o);
        if (rc != 0)
                return rc < 0 ? 0 : rc;
        rc = read_group(o.file, &g);
        if (rc != 0)
                goto out_group;
        times = malloc(o.reps * sizeof(*times));
        if (times == NULL) {
                fprintf(stderr, "gemmctl plan: out of memory\n");
                rc = EXIT_INPUT;
                goto out_group;
        }
        for (m = 0; m < SCHED_NMODES; m++) {
                if (!o.modes[m])
                        continue;
                if (run_mode(&o, &g, (enum sched_mode)m, &res[nres], times) != 0) {
                        rc = EXIT_INPUT;
                        goto out_times;
                }
                nres++;
        }
        if (o.json)
                print_json(res, nres);
        else
                print_table(&o, &g, res, nres);
out_times:
        free(times);
out_group:
        free(g.probs);
        free(g.lines);
        return rc;
}

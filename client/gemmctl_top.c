/*
 * gemmctl_top.c - `gemmctl top`, a live view of the daemon for operators.
 *
 * It asks for the daemon's JSON statistics (what `gemmctl stats --json`
 * prints) once per interval and shows what changed between two samples as
 * rates, in plain words: per device how busy it was, TFLOP/s, ops/s and
 * the percentiles of the time ops waited and groups ran; for the daemon
 * the requests, what is in flight and queued, refusals, the host CPU it
 * used; then the busiest sessions and the users. On a terminal each block
 * replaces the last; in a pipe the blocks follow each other, without
 * escape codes.
 */
#include <errno.h>
#include <math.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/gemmctl.h"
#include "gemmd.h"

/* Sessions shown, busiest first; the rest are counted. */
#define TOP_SESSIONS 10

/* ---- a small JSON reader ---------------------------------------------- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

/* One JSON value; an object's members carry their key. */
struct jv {
        enum jtype t;
        double n;
        char *s;
        char *key;
        struct jv *kids;
        int nkids;
};

struct jparse {
        const char *p;
        int depth;
};

static void jv_free(struct jv *v)
{
        int i;

        for (i = 0; i < v->nkids; i++)
                jv_free(&v->kids[i]);
        free(v->kids);
        free(v->s);
        free(v->key);
        memset(v, 0, sizeof(*v));
}

static void jskip(struct jparse *jp)
{
        while (*jp->p == ' ' || *jp->p == '\n' || *jp->p == '\t' || *jp->p == '\r')
                jp->p++;
}

/* Reads a string at jp->p (at its quote) into a malloc'd C string; escapes
 * outside ASCII become '?', which names and numbers never need. */
static int jstring(struct jparse *jp, char **out)
{
        size_t n = 0, cap = 16;
        char *s = malloc(cap), ch;

        if (!s)
                return -ENOMEM;
        for (jp->p++; *jp->p != '"'; jp->p++) {
                if (!*jp->p)
                        goto bad;
                ch = *jp->p;
                if (ch == '\\') {
                        ch = *++jp->p;
                        if (ch == 'n' || ch == 't' || ch == 'r' || ch == 'b' || ch == 'f')
                                ch = ' ';
                        else if (ch == 'u') {
                                if (strspn(jp->p + 1, "0123456789abcdefABCDEF") < 4)
                                        goto bad;
                                jp->p += 4;
                                ch = '?';
                        } else if (ch != '"' && ch != '\\' && ch != '/')
                                goto bad;
                }
                if (n + 1 == cap) {
                        char *t = realloc(s, cap *= 2);

                        if (!t)
                                goto bad;
                        s = t;
                }
                s[n++] = ch;
        }
        jp->p++;
        s[n] = '\0';
        *out = s;
        return 0;
bad:
        free(s);
        return -EINVAL;
}

static int jvalue(struct jparse *jp, struct jv *v);

/* Reads the members of an array or object, up to `close`. */
static int jlist(struct jparse *jp, struct jv *v, char close)
{
        int err;

        jp->p++;
        jskip(jp);
        if (*jp->p == close) {
                jp->p++;
                return 0;
        }
        for (;;) {
                struct jv *k = realloc(v->kids, (size_t)(v->nkids + 1) * sizeof(*k));

                if (!k)
                        return -ENOMEM;
                v->kids = k;
                k = &v->kids[v->nkids++];
                memset(k, 0, sizeof(*k));
                jskip(jp);
                if (close == '}') {
                        if (*jp->p != '"')
                                return -EINVAL;
                        err = jstring(jp, &k->key);
                        if (err)
                                return err;
                        jskip(jp);
                        if (*jp->p++ != ':')
                                return -EINVAL;
                }
                err = jvalue(jp, k);
                if (err)
                        return err;
                jskip(jp);
                if (*jp->p == close) {
                        jp->p++;
                        return 0;
                }
                if (*jp->p++ != ',')
                        return -EINVAL;
        }
}

static int jvalue(struct jparse *jp, struct jv *v)
{
        char *end;
        int err;

        jskip(jp);
        if (*jp->p == '{' || *jp->p == '[') {
                if (++jp->depth > 16)
                        return -EINVAL;
                v->t = *jp->p == '{' ? J_OBJ : J_ARR;
                err = jlist(jp, v, *jp->p == '{' ? '}' : ']');
                jp->depth--;
                return err;
        }
        if (*jp->p == '"') {
                v->t = J_STR;
                return jstring(jp, &v->s);
        }
        if (!strncmp(jp->p, "true", 4) || !strncmp(jp->p, "false", 5)) {
                v->t = J_BOOL;
                v->n = *jp->p == 't';
                jp->p += *jp->p == 't' ? 4 : 5;
                return 0;
        }
        if (!strncmp(jp->p, "null", 4)) {
                jp->p += 4;
                return 0;
        }
        v->t = J_NUM;
        v->n = strtod(jp->p, &end);
        if (end == jp->p)
                return -EINVAL;
        jp->p = end;
        return 0;
}

/* Parses a whole JSON text into *v. Returns 0 or -EINVAL / -ENOMEM. */
static int jparse(const char *text, struct jv *v)
{
        struct jparse jp = { text, 0 };
        int err;

        memset(v, 0, sizeof(*v));
        err = jvalue(&jp, v);
        if (!err) {
                jskip(&jp);
                if (*jp.p)
                        err = -EINVAL;
        }
        if (err)
                jv_free(v);
        return err;
}

/* The member `key` of object o, or NULL. */
static const struct jv *jget(const struct jv *o, const char *key)
{
        int i;

        if (o && o->t == J_OBJ)
                for (i = 0; i < o->nkids; i++)
                        if (!strcmp(o->kids[i].key, key))
                                return &o->kids[i];
        return NULL;
}

/* The number `key` of object o, 0 when absent. */
static double jnum(const struct jv *o, const char *key)
{
        const struct jv *v = jget(o, key);

        return v && (v->t == J_NUM || v->t == J_BOOL) ? v->n : 0.0;
}

static const char *jstr(const struct jv *o, const char *key)
{
        const struct jv *v = jget(o, key);

        return v && v->t == J_STR ? v->s : "";
}

/* The element of array a whose `key` equals `id`, or NULL. */
static const struct jv *jfind(const struct jv *a, const char *key, double id)
{
        int i;

        if (a && a->t == J_ARR)
                for (i = 0; i < a->nkids; i++)
                        if (jnum(&a->kids[i], key) == id)
                                return &a->kids[i];
        return NULL;
}

static int jcount(const struct jv *a)
{
        return a && a->t == J_ARR ? a->nkids : 0;
}

/* ---- rates and words -------------------------------------------------- */

/* What changed of number `key` between the samples, per second. */
static double rate(const struct jv *cur, const struct jv *prev, const char *key, double dt)
{
        double d = jnum(cur, key) - (prev ? jnum(prev, key) : 0.0);

        return d > 0 && dt > 0 ? d / dt : 0.0;
}

/* The q-quantile, in microseconds, of the counts histogram `key` gained
 * between the samples: bucket i holds [2^i, 2^(i+1)) us (bucket 0 from 0),
 * and the rank is placed linearly inside its bucket. Negative when the
 * interval added nothing. */
static double hist_quantile(const struct jv *cur, const struct jv *prev, const char *key,
                            double q)
{
        const struct jv *h = jget(cur, key), *g = prev ? jget(prev, key) : NULL;
        double d[64], total = 0, seen = 0, want;
        int i, n = jcount(h) < 64 ? jcount(h) : 64;

        for (i = 0; i < n; i++) {
                d[i] = h->kids[i].n - (i < jcount(g) ? g->kids[i].n : 0.0);
                if (d[i] < 0)
                        d[i] = 0;
                total += d[i];
        }
        if (total <= 0)
                return -1;
        want = q * total;
        for (i = 0; i < n; i++) {
                double lo = i ? ldexp(1, i) : 0, hi = ldexp(1, i + 1);

                if (d[i] > 0 && seen + d[i] >= want)
                        return lo + (hi - lo) * (want - seen) / d[i];
                seen += d[i];
        }
        return ldexp(1, n);
}

/* Writes microseconds as "850 us", "1.5 ms" or "2.3 s" ("-" for none). */
static const char *fmt_us(double us, char buf[16])
{
        if (us < 0)
                snprintf(buf, 16, "-");
        else if (us < 1000)
                snprintf(buf, 16, "%.0f us", us);
        else if (us < 1e6)
                snprintf(buf, 16, "%.1f ms", us / 1e3);
        else
                snprintf(buf, 16, "%.1f s", us / 1e6);
        return buf;
}

static const char *fmt_bytes(double b, char buf[16])
{
        static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        int u = 0;

        while (b >= 1024 && u < 4) {
                b /= 1024;
                u++;
        }
        snprintf(buf, 16, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
        return buf;
}

static const char *fmt_uptime(double s, char buf[32])
{
        long t = (long)s;

        if (t >= 86400)
                snprintf(buf, 32, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
        else if (t >= 3600)
                snprintf(buf, 32, "%ldh%02ldm", t / 3600, t % 3600 / 60);
        else
                snprintf(buf, 32, "%ldm%02lds", t / 60, t % 60);
        return buf;
}

/* The daemon's rejection codes (daemon/stats.c) in an operator's words. */
static const char *refusal_words(const char *code)
{
        static const char *const words[][2] = {
                { "busy", "queue full" },         { "limit", "over a limit" },
                { "too_big", "too big" },         { "invalid", "invalid op" },
                { "bounds", "outside its buffer" }, { "overflow", "size overflow" },
                { "no_buffer", "unknown buffer" }, { "unsupported", "unsupported" },
                { "device", "device failed" },    { "shutdown", "shutting down" },
                { "canceled", "canceled" },       { "disconnected", "client left" },
                { "permission", "not permitted" }, { "no_ticket", "unknown ticket" },
                { "resource", "out of resources" }, { "protocol", "protocol error" },
                { "version", "wrong version" },
        };
        size_t i;

        for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
                if (!strcmp(code, words[i][0]))
                        return words[i][1];
        return code;
}

static const char *user_name(unsigned uid, char buf[32])
{
        struct passwd *pw = getpwuid(uid);

        if (pw)
                snprintf(buf, 32, "%s", pw->pw_name);
        else
                snprintf(buf, 32, "%u", uid);
        return buf;
}

/* The command name of process pid, "?" where /proc does not show it. */
static const char *proc_comm(int pid, char buf[32])
{
        char path[64];
        FILE *f;

        snprintf(buf, 32, "?");
        snprintf(path, sizeof(path), "/proc/%d/comm", pid);
        f = fopen(path, "r");
        if (f) {
                if (fgets(buf, 32, f))
                        buf[strcspn(buf, "\n")] = '\0';
                fclose(f);
        }
        return buf;
}

/* ---- the block -------------------------------------------------------- */

/* The daemon's lines: requests, work in flight, refusals, CPU. */
static void top_daemon(FILE *f, const struct jv *cur, const struct jv *prev, double dt)
{
        const struct jv *rc = jget(cur, "rejections"), *rp = jget(prev, "rejections");
        const struct jv *users = jget(cur, "users"), *cpu = jget(cur, "cpu");
        double inflight = 0, refused = 0, total = 0, ops = 0;
        char more[256] = "";
        size_t len = 0;
        int i;

        for (i = 0; i < jcount(users); i++)
                inflight += jnum(&users->kids[i], "inflight");
        for (i = 0; i < jcount(jget(cur, "devices")); i++)
                ops += rate(&jget(cur, "devices")->kids[i],
                            jfind(jget(prev, "devices"), "index",
                                  jnum(&jget(cur, "devices")->kids[i], "index")), "ops", dt);
        fprintf(f, "clients   %.0f sessions of %d user%s; %.0f requests/s, %.0f ops/s; "
                   "%.0f ops in flight, %.0f not yet done\n",
                jnum(cur, "sessions_now"), jcount(users), jcount(users) == 1 ? "" : "s",
                rate(cur, prev, "requests", dt), ops, inflight, jnum(cur, "queued_ops"));
        for (i = 0; rc && rc->t == J_OBJ && i < rc->nkids; i++) {
                double d = rc->kids[i].n - jnum(rp, rc->kids[i].key);

                total += rc->kids[i].n;
                refused += d;
                if (d > 0 && len < sizeof(more) - 64)
                        len += (size_t)snprintf(more + len, sizeof(more) - len, "%s%.0f %s",
                                                len ? ", " : " (", d,
                                                refusal_words(rc->kids[i].key));
        }
        fprintf(f, "refused   %.1f/s%s%s, %.0f since the start\n", dt > 0 ? refused / dt : 0.0,
                more, len ? ")" : "", total);
        if (cpu)
                fprintf(f, "host CPU  %.2f cores (event loops %.2f, workers %.2f, compute %.2f, "
                           "device processes %.2f)\n",
                        rate(cpu, jget(prev, "cpu"), "total_s", dt),
                        rate(jget(jget(cpu, "roles"), "loop"),
                             jget(jget(jget(prev, "cpu"), "roles"), "loop"), "s", dt),
                        rate(jget(jget(cpu, "roles"), "worker"),
                             jget(jget(jget(prev, "cpu"), "roles"), "worker"), "s", dt),
                        rate(jget(jget(cpu, "roles"), "compute"),
                             jget(jget(jget(prev, "cpu"), "roles"), "compute"), "s", dt),
                        rate(cpu, jget(prev, "cpu"), "device_process_s", dt));
}

/* One line per device: how busy, how fast, how long ops waited. */
static void top_devices(FILE *f, const struct jv *cur, const struct jv *prev, double dt)
{
        const struct jv *devs = jget(cur, "devices");
        int i;

        fprintf(f, "\n%-3s %-5s %5s %8s %8s %7s %7s %8s %9s %9s %9s %9s\n", "DEV", "KIND",
                "BUSY", "TFLOP/s", "OPS/s", "FAIL/s", "QUEUED", "GROUPS/s", "WAIT p50",
                "WAIT p99", "RUN p50", "RUN p99");
        for (i = 0; i < jcount(devs); i++) {
                const struct jv *d = &devs->kids[i];
                const struct jv *p = jfind(jget(prev, "devices"), "index", jnum(d, "index"));
                char w50[16], w99[16], r50[16], r99[16];
                double busy = rate(d, p, "busy_s", dt) * 100;

                fprintf(f, "%-3.0f %-5s %4.0f%% %8.3f %8.0f %7.0f %7.0f %8.0f %9s %9s %9s %9s\n",
                        jnum(d, "index"), jstr(d, "backend"), busy > 100 ? 100 : busy,
                        rate(d, p, "flops", dt) / 1e12, rate(d, p, "ops", dt),
                        rate(d, p, "ops_failed", dt), jnum(d, "queued"),
                        rate(d, p, "groups", dt),
                        fmt_us(hist_quantile(d, p, "queue_us_log2", 0.50), w50),
                        fmt_us(hist_quantile(d, p, "queue_us_log2", 0.99), w99),
                        fmt_us(hist_quantile(d, p, "run_us_log2", 0.50), r50),
                        fmt_us(hist_quantile(d, p, "run_us_log2", 0.99), r99));
        }
        fprintf(f, "(WAIT: an op's time from its request to its group's launch; RUN: a group's "
                   "from launch to done;\n percentiles of this interval, from power-of-two "
                   "histograms)\n");
}

/* Orders sessions by ops/s, the busiest first (their rates are in n). */
static int by_rate(const void *a, const void *b)
{
        double x = ((const struct jv *)a)->n, y = ((const struct jv *)b)->n;

        return x < y ? 1 : x > y ? -1 : 0;
}

/* The busiest sessions (not this one), then every user. */
static void top_clients(FILE *f, const struct jv *cur, const struct jv *prev, double dt,
                        uint64_t self)
{
        const struct jv *ss = jget(cur, "sessions"), *us = jget(cur, "users");
        struct jv *rows = calloc((size_t)jcount(ss) + 1, sizeof(*rows));
        char name[32], comm[32], bytes[16];
        int i, n = 0;

        if (!rows)
                return;
        for (i = 0; i < jcount(ss); i++) {
                const struct jv *s = &ss->kids[i];

                if (jnum(s, "id") == (double)self)
                        continue;
                rows[n] = *s;
                rows[n++].n = rate(s, jfind(jget(prev, "sessions"), "id", jnum(s, "id")),
                                   "ops_ok", dt);
        }
        qsort(rows, (size_t)n, sizeof(*rows), by_rate);
        fprintf(f, "\n%-8s %-8s %-10s %-15s %8s %9s %8s %10s %8s\n", "SESSION", "PID", "USER",
                "COMMAND", "OPS/s", "IN FLIGHT", "BUFFERS", "REGISTERED", "REFUSED");
        for (i = 0; i < n && i < TOP_SESSIONS; i++)
                fprintf(f, "%-8.0f %-8.0f %-10s %-15s %8.0f %9.0f %8.0f %10s %8.0f\n",
                        jnum(&rows[i], "id"), jnum(&rows[i], "pid"),
                        user_name((unsigned)jnum(&rows[i], "uid"), name),
                        proc_comm((int)jnum(&rows[i], "pid"), comm), rows[i].n,
                        jnum(&rows[i], "inflight"), jnum(&rows[i], "buffers"),
                        fmt_bytes(jnum(&rows[i], "buffer_bytes"), bytes),
                        jnum(&rows[i], "rejected"));
        if (n > TOP_SESSIONS)
                fprintf(f, "... and %d more sessions\n", n - TOP_SESSIONS);
        if (!n)
                fprintf(f, "(no other sessions)\n");
        if (!jnum(cur, "all_sessions"))
                fprintf(f, "(only your own sessions and user: root and gemmd's --admin-gid "
                           "groups see all)\n");
        free(rows);
        fprintf(f, "\n%-10s %8s %9s %10s\n", "USER", "SESSIONS", "IN FLIGHT", "REGISTERED");
        for (i = 0; i < jcount(us); i++)
                fprintf(f, "%-10s %8.0f %9.0f %10s\n",
                        user_name((unsigned)jnum(&us->kids[i], "uid"), name),
                        jnum(&us->kids[i], "sessions"), jnum(&us->kids[i], "inflight"),
                        fmt_bytes(jnum(&us->kids[i], "buffer_bytes"), bytes));
}

int gemmctl_top_block(FILE *f, const char *socket, const char *prev_json, const char *cur_json,
                      double dt, uint64_t self)
{
        struct jv cur, prev;
        char up[32];
        int err;

        err = jparse(cur_json, &cur);
        if (err)
                return err;
        err = jparse(prev_json, &prev);
        if (err || cur.t != J_OBJ || prev.t != J_OBJ) {
                jv_free(&cur);
                if (!err)
                        jv_free(&prev);
                return -EINVAL;
        }
        fprintf(f, "gemmd %s at %s, up %s, %s; rates over the last %.1f s\n",
                jstr(&cur, "version"), socket, fmt_uptime(jnum(&cur, "uptime_s"), up),
                jnum(&cur, "draining") ? "draining (shutting down)" : "serving", dt);
        top_daemon(f, &cur, &prev, dt);
        top_devices(f, &cur, &prev, dt);
        top_clients(f, &cur, &prev, dt, self);
        jv_free(&cur);
        jv_free(&prev);
        return 0;
}

/* ---- the loop --------------------------------------------------------- */

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
        struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

int gemmctl_top_run(const char *socket, double interval, long count)
{
        struct gemmd_info info;
        gemmd_client *c;
        char *prev = NULL, *cur = NULL;
        double t_prev, t_cur;
        int tty = isatty(STDOUT_FILENO), err;
        long i;

        err = gemmd_connect(socket, &c);
        if (err) {
                fprintf(stderr, "gemmctl: connect to %s: %s\n", socket, gemmd_strerror(err));
                return 1;
        }
        gemmd_get_info(c, &info);
        err = gemmd_stats(c, 1, &prev);
        t_prev = now_s();
        for (i = 0; !err && (count <= 0 || i < count); i++) {
                sleep_s(interval);
                err = gemmd_stats(c, 1, &cur);
                if (err)
                        break;
                t_cur = now_s();
                if (tty)
                        fputs("\033[H\033[2J", stdout);
                else if (i)
                        putchar('\n');
                err = gemmctl_top_block(stdout, socket, prev, cur, t_cur - t_prev,
                                        info.session_id);
                fflush(stdout);
                free(prev);
                prev = cur;
                cur = NULL;
                t_prev = t_cur;
        }
        free(prev);
        gemmd_disconnect(c);
        if (err) {
                fprintf(stderr, "gemmctl: top: %s\n", gemmd_strerror(err));
                return 1;
        }
        return 0;
}

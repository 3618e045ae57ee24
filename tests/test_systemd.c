/*
 * test_systemd.c - gemmd as a system service: `make install` and
 * `make uninstall` in a scratch tree, the installed units checked by
 * systemd-analyze, the daemon started by systemd-socket-activate serving
 * clients, and its sd_notify messages (READY, STATUS, STOPPING, and the
 * WATCHDOG pings that stop while a device makes no progress). Tests that
 * need a tool this machine lacks skip with the reason.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/hard_util.h"
#include "tests/e2e_assert.h"

#ifndef GEMMD_SRCDIR
#define GEMMD_SRCDIR "."
#endif

TestSuite(systemd, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

/* The path of program `name` in $PATH, or NULL. The string lives as long
 * as the test. */
static const char *find_tool(const char *name)
{
        char path[PATH_MAX];
        const char *env = getenv("PATH");
        char *dirs = strdup(env && *env ? env : "/usr/bin:/bin"), *save = NULL, *d;

        for (d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                snprintf(path, sizeof(path), "%s/%s", d, name);
                if (access(path, X_OK) == 0) {
                        free(dirs);
                        return strdup(path);
                }
        }
        free(dirs);
        return NULL;
}

/* Runs `make -C <source tree> BUILD=<this build> -o bins <target> <vars>`
 * (the binaries are built already) and returns its exit status. */
static int run_make(const char *target, const char *destdir, const char *prefix)
{
        char *build = e2e_build_path(""), dv[PATH_MAX + 16], pv[PATH_MAX + 16], bv[PATH_MAX + 16];
        char out[PATH_MAX], *make = (char *)find_tool("make");
        /* No ldconfig: the scratch prefix is nothing the system should know. */
        char *argv[] = {make, "-s", "--no-print-directory", "-C", GEMMD_SRCDIR, bv, "-o", "bins",
                        (char *)target, dv, pv, "LDCONFIG=true", NULL};
        int st;

        cr_assert_not_null(make, "make is not installed");
        build[strlen(build) - 1] = '\0'; /* the trailing slash */
        snprintf(bv, sizeof(bv), "BUILD=%s", build);
        snprintf(dv, sizeof(dv), "DESTDIR=%s", destdir);
        snprintf(pv, sizeof(pv), "PREFIX=%s", prefix);
        snprintf(out, sizeof(out), "%s/make.out", e2e_dir);
        /* A parent make's jobserver does not reach this far. */
        unsetenv("MAKEFLAGS");
        unsetenv("MFLAGS");
        unsetenv("MAKELEVEL");
        st = e2e_run(argv, out, out, 120000);
        if (st) {
                char *text = e2e_read_file(out, NULL);

                fprintf(stderr, "make %s: status %d\n%s\n", target, st, text ? text : "");
                free(text);
        }
        free(build);
        return st;
}

/* Every file and symlink under root, as sorted "./path" lines. */
static char *list_tree(const char *root)
{
        char out[PATH_MAX], cmd[PATH_MAX * 2 + 64];

        snprintf(out, sizeof(out), "%s/tree.txt", e2e_dir);
        snprintf(cmd, sizeof(cmd), "cd '%s' && find . \\( -type f -o -type l \\) | LC_ALL=C sort > '%s'",
                 root, out);
        cr_assert_eq(system(cmd), 0);
        return e2e_read_file(out, NULL);
}

Test(systemd, install_and_uninstall_put_exactly_the_files_and_take_them_back)
{
        char stage[PATH_MAX], path[PATH_MAX * 2], want[2048], *tree, *text, link[64];
        struct stat st;
        void *lib;
        ssize_t n;

        snprintf(stage, sizeof(stage), "%s/stage", e2e_dir);
        cr_assert_eq(run_make("install", stage, "/usr"), 0);
        snprintf(want, sizeof(want),
                 "./usr/bin/gemmctl\n./usr/include/gemmd.h\n./usr/lib/gemmd/libblas.so.3\n"
                 "./usr/lib/libgemmd.a\n"
                 "./usr/lib/libgemmd.so\n./usr/lib/libgemmd.so.1\n./usr/lib/libgemmd.so.1.0.0\n"
                 "./usr/lib/pkgconfig/gemmd.pc\n./usr/lib/systemd/system/gemmd.service\n"
                 "./usr/lib/systemd/system/gemmd.socket\n./usr/lib/sysusers.d/gemmd.conf\n"
                 "./usr/lib/tmpfiles.d/gemmd.conf\n./usr/sbin/gemmd\n%s"
                 "./usr/share/man/man7/gemmd-blas.7\n%s",
                 access(GEMMD_SRCDIR "/man/gemmctl.1", F_OK) == 0 ? "./usr/share/man/man1/gemmctl.1\n" : "",
                 access(GEMMD_SRCDIR "/man/gemmd.8", F_OK) == 0 ? "./usr/share/man/man8/gemmd.8\n" : "");
        tree = list_tree(stage);
        cr_expect_str_eq(tree, want);
        free(tree);

        /* The library under its soname, with the development link. */
        snprintf(path, sizeof(path), "%s/usr/lib/libgemmd.so.1", stage);
        n = readlink(path, link, sizeof(link) - 1);
        cr_assert_gt(n, 0);
        link[n] = '\0';
        cr_expect_str_eq(link, "libgemmd.so.1.0.0");
        snprintf(path, sizeof(path), "%s/usr/lib/libgemmd.so", stage);
        n = readlink(path, link, sizeof(link) - 1);
        cr_assert_gt(n, 0);
        link[n] = '\0';
        cr_expect_str_eq(link, "libgemmd.so.1");
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        cr_assert_not_null(lib, "%s", dlerror());
        cr_expect_not_null(dlsym(lib, "gemmd_connect"));
        cr_expect_null(dlsym(lib, "frame_pack"), "internal names are exported");
        dlclose(lib);
        snprintf(path, sizeof(path), "%s/usr/sbin/gemmd", stage);
        cr_assert_eq(stat(path, &st), 0);
        cr_expect(st.st_mode & S_IXUSR);

        /* The prefix went into the pkg-config file and the units. */
        snprintf(path, sizeof(path), "%s/usr/lib/pkgconfig/gemmd.pc", stage);
        text = e2e_read_file(path, NULL);
        cr_assert_not_null(text);
        cr_expect(strstr(text, "prefix=/usr\n"), "%s", text);
        cr_expect(strstr(text, "Version: 0.1.0"), "%s", text);
        free(text);
        snprintf(path, sizeof(path), "%s/usr/lib/systemd/system/gemmd.service", stage);
        text = e2e_read_file(path, NULL);
        cr_assert_not_null(text);
        cr_expect(strstr(text, "ExecStart=/usr/sbin/gemmd "), "%s", text);
        cr_expect(!strstr(text, "@BINDIR@"));
        cr_expect(strstr(text, "Type=notify") && strstr(text, "WatchdogSec="));
        free(text);

        cr_assert_eq(run_make("uninstall", stage, "/usr"), 0);
        tree = list_tree(stage);
        cr_expect_str_eq(tree, "", "left behind:\n%s", tree);
        free(tree);
}

/* Whether systemd-analyze can verify anything here (a container without
 * systemd may refuse even a trivial unit). */
static int analyze_works(const char *tool)
{
        char unit[PATH_MAX], out[PATH_MAX];
        char *argv[] = {(char *)tool, "verify", "--man=no", unit, NULL};
        FILE *f;

        snprintf(unit, sizeof(unit), "%s/probe.service", e2e_dir);
        snprintf(out, sizeof(out), "%s/probe.out", e2e_dir);
        f = fopen(unit, "w");
        if (!f)
                return 0;
        fputs("[Unit]\nDescription=probe\n[Service]\nType=oneshot\nExecStart=/bin/true\n", f);
        fclose(f);
        return e2e_run(argv, out, out, 60000) == 0;
}

Test(systemd, installed_units_pass_systemd_analyze_verify)
{
        const char *tool = find_tool("systemd-analyze");
        char prefix[PATH_MAX], service[PATH_MAX + 64], socket_[PATH_MAX + 64], out[PATH_MAX];
        char *argv[] = {(char *)tool, "verify", "--man=no", socket_, service, NULL}, *text;
        int st;

        if (!tool)
                cr_skip_test("systemd-analyze is not installed");
        if (!analyze_works(tool))
                cr_skip_test("systemd-analyze cannot verify units in this environment");
        /* Installed for real (no DESTDIR), so ExecStart names a binary
         * that exists. */
        snprintf(prefix, sizeof(prefix), "%s/prefix", e2e_dir);
        cr_assert_eq(run_make("install", "", prefix), 0);
        snprintf(service, sizeof(service), "%s/lib/systemd/system/gemmd.service", prefix);
        snprintf(socket_, sizeof(socket_), "%s/lib/systemd/system/gemmd.socket", prefix);
        snprintf(out, sizeof(out), "%s/verify.out", e2e_dir);
        st = e2e_run(argv, out, out, 60000);
        text = e2e_read_file(out, NULL);
        cr_expect_eq(st, 0, "systemd-analyze verify: status %d\n%s", st, text ? text : "");
        cr_expect(!text || !strstr(text, "gemmd."), "systemd-analyze complained:\n%s", text);
        free(text);

        /* The sysusers and tmpfiles snippets parse too, where the tools exist. */
        if ((tool = find_tool("systemd-tmpfiles"))) {
                char root[PATH_MAX], conf[PATH_MAX + 64], rootarg[PATH_MAX + 16], dir[PATH_MAX * 2];
                char *targv[] = {(char *)tool, rootarg, "--create", conf, NULL};
                struct stat sb;

                snprintf(root, sizeof(root), "%s/root", e2e_dir);
                mkdir(root, 0755);
                snprintf(rootarg, sizeof(rootarg), "--root=%s", root);
                snprintf(conf, sizeof(conf), "%s/lib/tmpfiles.d/gemmd.conf", prefix);
                cr_expect_eq(e2e_run(targv, out, out, 60000), 0, "systemd-tmpfiles");
                snprintf(dir, sizeof(dir), "%s/run/gemmd", root);
                cr_expect(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), "no /run/gemmd");
        }
        if ((tool = find_tool("systemd-sysusers"))) {
                char conf[PATH_MAX + 64];
                char *sargv[] = {(char *)tool, "--dry-run", conf, NULL};

                snprintf(conf, sizeof(conf), "%s/lib/sysusers.d/gemmd.conf", prefix);
                st = e2e_run(sargv, out, out, 60000);
                text = e2e_read_file(out, NULL);
                cr_expect_eq(st, 0, "systemd-sysusers --dry-run: %s", text ? text : "");
                cr_expect(!text || !strstr(text, "gemmd.conf:"), "%s", text);
                free(text);
        }
        cr_assert_eq(run_make("uninstall", "", prefix), 0);
}

Test(systemd, socket_activation_serves_requests)
{
        const char *tool = find_tool("systemd-socket-activate");
        char sock[PATH_MAX], log[PATH_MAX], *bin = e2e_build_path("gemmd"), *text;
        gemmd_client *c[4];
        struct stat st;
        uint64_t seed = 17, deadline;
        pid_t pid;

        if (!tool)
                cr_skip_test("systemd-socket-activate is not installed (Debian package systemd)");
        snprintf(sock, sizeof(sock), "%s/activated.sock", e2e_dir);
        snprintf(log, sizeof(log), "%s/activated.log", e2e_dir);
        fflush(NULL);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                FILE *f = freopen(log, "w", stderr);

                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (!f || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
                        _exit(126);
                execl(tool, tool, "-l", sock, bin, "--backend", "cpu", "--threads", "1",
                      "--verbose", (char *)NULL);
                _exit(127);
        }
        free(bin);
        for (deadline = e2e_now_us() + 10000000u; stat(sock, &st) != 0; usleep(5000))
                cr_assert_lt(e2e_now_us(), deadline, "systemd-socket-activate did not listen");

        /* The first connection starts gemmd; it must go on accepting. */
        for (int i = 0; i < 4; i++) {
                int rc = gemmd_connect(sock, &c[i]);

                cr_assert_eq(rc, 0, "client %d: %s", i, gemmd_strerror(rc));
        }
        for (int i = 0; i < 4; i++) {
                struct e2e_spec s;
                struct e2e_prob p;
                char why[256];

                e2e_spec_random(&s, &seed, 40);
                cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
                cr_expect_eq(e2e_run_checked(c[i], &p, 1, 1, NULL, why, sizeof(why)), 0, "%s", why);
                e2e_prob_free(&p);
                gemmd_disconnect(c[i]);
        }
        kill(pid, SIGTERM);
        cr_expect_eq(e2e_wait_child(pid, 20000), 0, "gemmd did not exit 0 on SIGTERM");
        text = e2e_read_file(log, NULL);
        cr_expect(text && strstr(text, "passed by systemd"), "gemmd did not use the socket:\n%s",
                  text ? text : "");
        free(text);
}

/* ---- sd_notify ------------------------------------------------------------ */

#define MAX_MSGS 20000

struct notes {
        int fd;
        volatile int stop;
        int n;
        uint64_t t_us[MAX_MSGS];
        char *text[MAX_MSGS];
        pthread_t thread;
};

static void *listen_notes(void *arg)
{
        struct notes *nt = arg;
        struct timeval tv = {0, 20000};

        setsockopt(nt->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        while (!nt->stop && nt->n < MAX_MSGS) {
                char buf[1024];
                ssize_t k = recv(nt->fd, buf, sizeof(buf) - 1, 0);

                if (k <= 0)
                        continue;
                buf[k] = '\0';
                nt->t_us[nt->n] = e2e_now_us();
                nt->text[nt->n] = strdup(buf);
                nt->n++;
        }
        return NULL;
}

/* Index of the first message at or after `from` containing s, or -1. */
static int find_note(const struct notes *nt, int from, const char *s)
{
        for (int i = from; i < nt->n; i++)
                if (strstr(nt->text[i], s))
                        return i;
        return -1;
}

/* The longest gap between WATCHDOG=1 pings that overlaps [t0, t1]. */
static uint64_t longest_ping_gap(const struct notes *nt, uint64_t t0, uint64_t t1, uint64_t *idle_gap)
{
        uint64_t last = 0, gap = 0;

        *idle_gap = 0;
        for (int i = 0; i < nt->n; i++) {
                if (!strstr(nt->text[i], "WATCHDOG=1"))
                        continue;
                if (last && nt->t_us[i] > t0 && last < t1 && nt->t_us[i] - last > gap)
                        gap = nt->t_us[i] - last;
                if (last && nt->t_us[i] <= t0 && nt->t_us[i] - last > *idle_gap)
                        *idle_gap = nt->t_us[i] - last;
                last = nt->t_us[i];
        }
        return gap;
}

Test(systemd, notify_ready_status_and_watchdog_that_follows_device_progress)
{
        static struct notes nt;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct e2e_daemon d;
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 512, .n = 512,
                             .alpha = 1.0f, .beta = 0.0f};
        struct e2e_prob p;
        struct gemmd_result r;
        uint64_t t0, t1, gap, idle_gap, k;
        gemmd_client *c;
        gemmd_buffer id;
        void *ptr;
        char *log;
        int i;

        memset(&nt, 0, sizeof(nt));
        cr_assert_lt(strlen(e2e_dir) + 13, sizeof(sa.sun_path));
        memcpy(sa.sun_path, e2e_dir, strlen(e2e_dir));
        memcpy(sa.sun_path + strlen(e2e_dir), "/notify.sock", 13);
        nt.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(nt.fd, 0);
        cr_assert_eq(bind(nt.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(pthread_create(&nt.thread, NULL, listen_notes, &nt), 0);
        setenv("NOTIFY_SOCKET", sa.sun_path, 1);
        setenv("WATCHDOG_USEC", "200000", 1); /* pings every 50 ms, stall after 100 ms */
        START(&d, "--threads", "1", "--max-groups-inflight", "1", NULL);
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        usleep(400000);

        /* How long K takes here, to size an op of about 1.5 s. */
        s.k = 256;
        e2e_prob_shape(&p, &s);
        cr_assert_eq(gemmd_buffer_alloc(c, (512 + 512) * 32768ull * 4 + 512 * 512 * 4, &id, &ptr), 0);
        p.op.a = (struct gemmd_operand){.buffer = id, .offset = 0};
        p.op.b = (struct gemmd_operand){.buffer = id, .offset = 512 * 32768ull * 4};
        p.op.c = (struct gemmd_operand){.buffer = id, .offset = 2 * 512 * 32768ull * 4};
        cr_assert_eq(gemmd_run(c, &p.op, 1, &r), 0);
        k = r.run_us ? 256 * 1500000ull / r.run_us : 32768;
        k = k < 256 ? 256 : k > 32768 ? 32768 : k;
        p.op.k = (int64_t)k;
        p.op.ldb = (int64_t)k;
        usleep(300000);
        t0 = e2e_now_us();
        cr_assert_eq(gemmd_run(c, &p.op, 1, &r), 0);
        t1 = e2e_now_us();
        usleep(400000);
        gemmd_disconnect(c);
        STOP(&d);
        usleep(100000);
        nt.stop = 1;
        pthread_join(nt.thread, NULL);

        i = find_note(&nt, 0, "READY=1");
        cr_assert_geq(i, 0, "no READY=1 (%d messages)", nt.n);
        cr_expect_lt(i, find_note(&nt, 0, "WATCHDOG=1"), "a ping before READY");
        cr_expect_geq(find_note(&nt, 0, "STATUS=serving"), 0);
        cr_expect_geq(find_note(&nt, i, "STOPPING=1"), 0, "no STOPPING=1 on SIGTERM");
        gap = longest_ping_gap(&nt, t0, t1, &idle_gap);
        fprintf(stderr, "watchdog: %d messages; a group of %.2f s silenced the pings for %.2f s; "
                        "longest gap while idle %.3f s\n",
                nt.n, r.run_us / 1e6, gap / 1e6, idle_gap / 1e6);
        cr_expect_lt(idle_gap, 600000, "an idle daemon missed pings for %llu us",
                     (unsigned long long)idle_gap);
        if (r.run_us >= 600000) {
                cr_expect_geq(gap + 350000, r.run_us,
                              "pings went on while the device made no progress (gap %llu us, group %llu us)",
                              (unsigned long long)gap, (unsigned long long)r.run_us);
                cr_expect_geq(find_note(&nt, 0, "stalled"), 0, "STATUS never named the stall");
                log = e2e_read_file(d.log, NULL);
                cr_expect(log && strstr(log, "no progress"), "%s", log ? log : "");
                free(log);
        }
        /* And they resumed once it was done. */
        cr_expect_geq(find_note(&nt, 0, "WATCHDOG=1"), 0);
        {
                int after = 0;

                for (int j = 0; j < nt.n; j++)
                        after += nt.t_us[j] > t1 && strstr(nt.text[j], "WATCHDOG=1") != NULL;
                cr_expect_geq(after, 2, "no pings after the long group");
        }
        for (int j = 0; j < nt.n; j++)
                free(nt.text[j]);
        close(nt.fd);
}

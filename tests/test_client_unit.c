/*
 * test_client_unit.c - libgemmd, the .npy module and gemmctl top's block,
 * without a daemon.
 *
 * The library tests talk to a scripted stand-in for the daemon: a thread
 * that accepts one connection on a socket in the test's own temporary
 * directory and plays a script of frames (struct mock). A script never
 * asserts from its thread; it records its first failed check, which the
 * test asserts after joining it.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/gemmctl.h"
#include "client/npy.h"
#include "gemmd.h"
#include "proto/frame.h"

/* ---- a temporary directory per test ----------------------------------- */

static char tmpdir[64];

static void make_tmpdir(void)
{
        strcpy(tmpdir, "/tmp/gemmd-client-XXXXXX");
        cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
                cr_log_warn("could not remove %s", tmpdir);
}

static const char *tmp_path(const char *name)
{
        static char buf[4][256];
        static int i;

        i = (i + 1) % 4;
        snprintf(buf[i], sizeof(buf[i]), "%s/%s", tmpdir, name);
        return buf[i];
}

/* ---- the scripted daemon ---------------------------------------------- */

struct mock {
        char path[256];
        int lfd, fd;
        pthread_t thread;
        void (*script)(struct mock *m);
        struct frame_arena arena;
        uint8_t *body;
        int rx_fd;          /* a descriptor that came with the last frame */
        char fail[512];     /* the script's first failed check */
        Gemmd__V1__Limits limits;
        uint64_t ids[8];    /* request ids the script remembers */
        void *shm;          /* a buffer the script mapped */
        size_t shm_bytes;
        int flag;
};

#define MCHECK(m, cond)                                                                      \
        do {                                                                                 \
                if (!(cond) && !(m)->fail[0])                                                \
                        snprintf((m)->fail, sizeof((m)->fail), "%s:%d: %s", __FILE__,        \
                                 __LINE__, #cond);                                           \
        } while (0)

static struct mock mk;

/* Reads exactly n bytes, noting any descriptor passed with them. */
static int mock_read(struct mock *m, void *buf, size_t n)
{
        size_t got = 0;

        while (got < n) {
                union {
                        char b[CMSG_SPACE(sizeof(int) * 4)];
                        struct cmsghdr align;
                } ctl;
                struct iovec iov = { (char *)buf + got, n - got };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                                     .msg_controllen = sizeof(ctl.b) };
                struct cmsghdr *cm;
                ssize_t r = recvmsg(m->fd, &mh, MSG_CMSG_CLOEXEC);

                if (r <= 0)
                        return -1;
                for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                                memcpy(&m->rx_fd, CMSG_DATA(cm), sizeof(int));
                got += (size_t)r;
        }
        return 0;
}

/* The next frame from the client, or NULL at end of file. Valid until the
 * next call. */
static Gemmd__V1__Envelope *mock_recv(struct mock *m)
{
        uint8_t hdr[4];
        uint32_t len;

        if (mock_read(m, hdr, 4))
                return NULL;
        if (frame_len_decode(hdr, 1u << 30, &len))
                return NULL;
        free(m->body);
        m->body = malloc(len ? len : 1);
        if (mock_read(m, m->body, len))
                return NULL;
        return frame_unpack(&m->arena, m->body, len);
}

static void mock_send_raw(struct mock *m, const void *buf, size_t n)
{
        size_t done = 0;

        while (done < n) {
                ssize_t r = send(m->fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);

                if (r <= 0)
                        return;
                done += (size_t)r;
        }
}

static void mock_send(struct mock *m, Gemmd__V1__Envelope *env)
{
        uint8_t *buf;
        size_t n;

        if (frame_pack(env, 0, UINT32_MAX, &buf, &n)) {
                MCHECK(m, !"frame_pack failed");
                return;
        }
        mock_send_raw(m, buf, n);
        free(buf);
}

static void mock_error(struct mock *m, uint64_t id, int code, int op_index)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Error e = GEMMD__V1__ERROR__INIT;

        e.code = code;
        e.message = "scripted error";
        e.op_index = op_index;
        env.request_id = id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_ERROR;
        env.error = &e;
        mock_send(m, &env);
}

static void mock_ack(struct mock *m, uint64_t id)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Ack ack = GEMMD__V1__ACK__INIT;

        env.request_id = id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_ACK;
        env.ack = &ack;
        mock_send(m, &env);
}

/* Completes ticket `id` of nops ops with the given statuses (NULL: all OK),
 * giving op i the c_data `cdata` (when not NULL, for op 0 only). */
static void mock_complete(struct mock *m, uint64_t id, size_t nops, const int *status,
                          const void *cdata, size_t clen)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Completion cp = GEMMD__V1__COMPLETION__INIT;
        Gemmd__V1__OpResult res[8], *ptrs[8];
        size_t i;

        for (i = 0; i < nops; i++) {
                gemmd__v1__op_result__init(&res[i]);
                res[i].status = status ? status[i] : 0;
                res[i].queue_us = 10 + i;
                res[i].run_us = 20 + i;
                res[i].group_id = 30 + i;
                res[i].group_size = (uint32_t)nops;
                res[i].admit_ns = 1000000000ull + i;
                res[i].reply_ns = 2000000000ull + i;
                res[i].kernel = "cpu-f32-test-kernel-name-that-is-longer-than-32";
                ptrs[i] = &res[i];
        }
        if (cdata) {
                res[0].c_data.data = (uint8_t *)cdata;
                res[0].c_data.len = clen;
        }
        cp.n_results = nops;
        cp.results = ptrs;
        env.request_id = id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_COMPLETION;
        env.completion = &cp;
        mock_send(m, &env);
}

/* Answers the client's Hello with m->limits and two devices. */
static void mock_hello(struct mock *m)
{
        Gemmd__V1__Envelope *in = mock_recv(m), env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__HelloReply hr = GEMMD__V1__HELLO_REPLY__INIT;
        Gemmd__V1__Device d0 = GEMMD__V1__DEVICE__INIT, d1 = GEMMD__V1__DEVICE__INIT;
        Gemmd__V1__Device *devs[2] = { &d0, &d1 };

        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_HELLO);
        if (!in || in->body_case != GEMMD__V1__ENVELOPE__BODY_HELLO)
                return;
        MCHECK(m, in->hello->protocol_version == GEMMD_PROTOCOL_VERSION);
        MCHECK(m, in->request_id != 0);
        d0.index = 0;
        d0.name = "cpu";
        d0.backend = "cpu";
        d0.units = 16;
        d0.memory_bytes = 1ull << 30;
        d1.index = 1;
        d1.name = "NVIDIA H100 80GB HBM3";
        d1.backend = "cuda";
        d1.units = 132;
        d1.memory_bytes = 80ull << 30;
        hr.protocol_version = GEMMD_PROTOCOL_VERSION;
        hr.server_version = "9.8.7";
        hr.limits = &m->limits;
        hr.n_devices = 2;
        hr.devices = devs;
        hr.session_id = 42;
        env.request_id = in->request_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY;
        env.hello_reply = &hr;
        mock_send(m, &env);
}

/* Reads until the client hangs up, checking it sends nothing more. */
static void mock_expect_eof(struct mock *m)
{
        Gemmd__V1__Envelope *env = mock_recv(m);

        MCHECK(m, env == NULL);
}

static void *mock_main(void *arg)
{
        struct mock *m = arg;

        m->fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (m->fd < 0) {
                MCHECK(m, !"accept failed");
                return NULL;
        }
        m->script(m);
        close(m->fd);
        return NULL;
}

static void mock_start(void (*script)(struct mock *m))
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct mock *m = &mk;

        memset(m, 0, sizeof(*m));
        m->rx_fd = -1;
        frame_arena_init(&m->arena, 1u << 30);
        gemmd__v1__limits__init(&m->limits);
        m->limits.max_frame_bytes = 64u << 20;
        m->limits.max_ops_per_submit = 4;
        m->limits.max_inline_bytes = 16u << 20;
        m->limits.max_inflight_ops = 64;
        m->limits.max_buffers = 8;
        m->limits.max_buffer_bytes = 1u << 30;
        m->limits.max_queue_ops = 1024;
        m->script = script;
        snprintf(m->path, sizeof(m->path), "%s", tmp_path("sock"));
        strcpy(sa.sun_path, m->path);
        m->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(m->lfd >= 0);
        cr_assert_eq(bind(m->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(listen(m->lfd, 4), 0);
}

/* Starts the script thread; the limits may be changed before this. */
static void mock_run(void)
{
        cr_assert_eq(pthread_create(&mk.thread, NULL, mock_main, &mk), 0);
}

static void mock_join(void)
{
        pthread_join(mk.thread, NULL);
        close(mk.lfd);
        free(mk.body);
        frame_arena_deinit(&mk.arena);
        if (mk.shm)
                munmap(mk.shm, mk.shm_bytes);
        cr_assert_eq(mk.fail[0], '\0', "script: %s", mk.fail);
}

static gemmd_client *connect_mock(void)
{
        gemmd_client *c = NULL;
        int err = gemmd_connect(mk.path, &c);

        cr_assert_eq(err, 0, "connect: %s", gemmd_strerror(err));
        cr_assert_not_null(c);
        return c;
}

static void setup(void)
{
        make_tmpdir();
}

static void teardown(void)
{
        remove_tmpdir();
}

TestSuite(strerror);
TestSuite(args, .init = setup, .fini = teardown, .timeout = 20);
TestSuite(lib, .init = setup, .fini = teardown, .timeout = 20);
TestSuite(npy, .init = setup, .fini = teardown, .timeout = 20);
TestSuite(top, .timeout = 20);

/* ---- gemmd_strerror and small functions ------------------------------- */

Test(strerror, every_code_has_its_own_text)
{
        int a, b;

        for (a = GEMMD_EPROTO; a >= GEMMD_ELAST; a--) {
                const char *s = gemmd_strerror(a);

                cr_assert_not_null(s);
                cr_assert(strlen(s) > 3, "code %d", a);
                cr_assert_null(strstr(s, "unknown g"), "code %d: %s", a, s);
                for (b = GEMMD_EPROTO; b > a; b--)
                        cr_assert_str_neq(s, gemmd_strerror(b), "codes %d and %d", a, b);
        }
        cr_assert_str_eq(gemmd_strerror(GEMMD_EDISCONNECT), "connection to the daemon lost");
        cr_assert_str_eq(gemmd_strerror(GEMMD_ENOTICKET), "unknown ticket");
}

Test(strerror, errno_unknown_and_success)
{
        cr_assert_str_eq(gemmd_strerror(0), "success");
        cr_assert_str_eq(gemmd_strerror(-ENOENT), "No such file or directory");
        cr_assert_str_eq(gemmd_strerror(-ETIMEDOUT), "Connection timed out");
        cr_assert_str_eq(gemmd_strerror(GEMMD_ELAST - 1), "unknown gemmd error");
        cr_assert_str_eq(gemmd_strerror(GEMMD_EBASE), "unknown gemmd error");
        cr_assert_str_eq(gemmd_strerror(-1999), "unknown gemmd error");
        cr_assert_str_eq(gemmd_strerror(-100000), "unknown error");
        cr_assert_str_eq(gemmd_strerror(INT_MIN), "unknown error");
        cr_assert_str_eq(gemmd_strerror(7), "unknown error");
}

Test(strerror, codes_match_the_wire)
{
        cr_assert_eq(frame_code_to_err(GEMMD__V1__CODE__BOUNDS), GEMMD_EBOUNDS);
        cr_assert_eq(frame_code_to_err(GEMMD__V1__CODE__NO_TICKET), GEMMD_ENOTICKET);
        cr_assert_eq(frame_code_to_err(GEMMD__V1__CODE__DISCONNECTED), GEMMD_EDISCONNECT);
}

Test(strerror, dtype_size)
{
        cr_assert_eq(gemmd_dtype_size(GEMMD_F32), 4);
        cr_assert_eq(gemmd_dtype_size(GEMMD_F16), 2);
        cr_assert_eq(gemmd_dtype_size(GEMMD_BF16), 2);
        cr_assert_eq(gemmd_dtype_size(GEMMD_F64), 8);
        cr_assert_eq(gemmd_dtype_size((enum gemmd_dtype)7), 0);
}

/* ---- argument checks -------------------------------------------------- */

Test(args, null_handle)
{
        struct gemmd_op op = { 0 };
        struct gemmd_info in;
        struct gemmd_device d;
        gemmd_buffer id;
        gemmd_ticket t;
        char *text;
        void *p;

        gemmd_disconnect(NULL);
        cr_assert_eq(gemmd_connect(NULL, NULL), -EINVAL);
        cr_assert_eq(gemmd_get_info(NULL, &in), -EINVAL);
        cr_assert_eq(gemmd_get_device(NULL, 0, &d), -EINVAL);
        cr_assert_eq(gemmd_buffer_alloc(NULL, 64, &id, &p), -EINVAL);
        cr_assert_eq(gemmd_buffer_free(NULL, 1), -EINVAL);
        cr_assert_eq(gemmd_register_device(NULL, &op, 64, &id), -EINVAL);
        cr_assert_eq(gemmd_unregister(NULL, 1), -EINVAL);
        cr_assert_eq(gemmd_submit(NULL, &op, 1, 1, &t), -EINVAL);
        cr_assert_eq(gemmd_wait(NULL, 1, 0, NULL, 0), -EINVAL);
        cr_assert_eq(gemmd_fd(NULL), -EINVAL);
        cr_assert_eq(gemmd_poll(NULL, &t), -EINVAL);
        cr_assert_eq(gemmd_run(NULL, &op, 1, NULL), -EINVAL);
        cr_assert_eq(gemmd_stats(NULL, 0, &text), -EINVAL);
}

Test(args, connect_errors)
{
        gemmd_client *c = (gemmd_client *)1;
        char longpath[200];

        cr_assert_eq(gemmd_connect(tmp_path("absent.sock"), &c), -ENOENT);
        cr_assert_null(c);
        memset(longpath, 'x', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = '\0';
        cr_assert_eq(gemmd_connect(longpath, &c), -ENAMETOOLONG);
        /* A path that is no socket. */
        close(open(tmp_path("file"), O_CREAT | O_WRONLY, 0600));
        cr_assert_eq(gemmd_connect(tmp_path("file"), &c), -ECONNREFUSED);
}

Test(args, socket_from_environment)
{
        gemmd_client *c = NULL;

        setenv("GEMMD_SOCKET", tmp_path("env.sock"), 1);
        cr_assert_eq(gemmd_connect(NULL, &c), -ENOENT);
        cr_assert_eq(gemmd_connect("", &c), -ENOENT);
        setenv("GEMMD_SOCKET", "", 1);
        /* Falls back to the default path, absent on a test machine. */
        if (access(GEMMD_DEFAULT_SOCKET, F_OK) != 0)
                cr_assert_eq(gemmd_connect(NULL, &c), -ENOENT);
}

static void script_hangup(struct mock *m)
{
        mock_recv(m);
}

Test(args, daemon_hangs_up_in_handshake)
{
        gemmd_client *c = NULL;

        mock_start(script_hangup);
        mock_run();
        cr_assert_eq(gemmd_connect(mk.path, &c), GEMMD_EDISCONNECT);
        cr_assert_null(c);
        mock_join();
}

static void script_version_error(struct mock *m)
{
        Gemmd__V1__Envelope *in = mock_recv(m);

        MCHECK(m, in != NULL);
        if (in)
                mock_error(m, in->request_id, GEMMD__V1__CODE__VERSION, -1);
}

Test(args, version_refused)
{
        gemmd_client *c = NULL;

        mock_start(script_version_error);
        mock_run();
        cr_assert_eq(gemmd_connect(mk.path, &c), GEMMD_EVERSION);
        mock_join();
}

static void script_wrong_version(struct mock *m)
{
        Gemmd__V1__Envelope *in = mock_recv(m), env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__HelloReply hr = GEMMD__V1__HELLO_REPLY__INIT;

        if (!in)
                return;
        hr.protocol_version = GEMMD_PROTOCOL_VERSION + 1;
        hr.limits = &m->limits;
        env.request_id = in->request_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY;
        env.hello_reply = &hr;
        mock_send(m, &env);
}

Test(args, version_mismatch)
{
        gemmd_client *c = NULL;

        mock_start(script_wrong_version);
        mock_run();
        cr_assert_eq(gemmd_connect(mk.path, &c), GEMMD_EVERSION);
        mock_join();
}

static void script_hello_then_eof(struct mock *m)
{
        mock_hello(m);
        mock_expect_eof(m);
}

Test(args, local_checks_send_nothing)
{
        static const char data[64];
        struct gemmd_op ops[5], bad;
        gemmd_client *c;
        gemmd_buffer id;
        gemmd_ticket t;
        void *p;
        int i;

        mock_start(script_hello_then_eof);
        mock_run();
        c = connect_mock();
        memset(ops, 0, sizeof(ops));
        for (i = 0; i < 5; i++) {
                ops[i].m = ops[i].n = ops[i].k = 4;
                ops[i].lda = ops[i].ldb = ops[i].ldc = 4;
                ops[i].a.buffer = ops[i].b.buffer = ops[i].c.buffer = 1;
        }
        cr_assert_eq(gemmd_submit(c, NULL, 1, 1, &t), -EINVAL);
        cr_assert_eq(gemmd_submit(c, ops, 1, 1, NULL), -EINVAL);
        cr_assert_eq(gemmd_submit(c, ops, 0, 1, &t), GEMMD_EINVAL);
        cr_assert_eq(gemmd_submit(c, ops, 5, 1, &t), GEMMD_ELIMIT); /* max_ops_per_submit 4 */
        cr_assert_eq(gemmd_submit(c, ops, 1, 3, &t), GEMMD_EINVAL);
        cr_assert_eq(gemmd_submit(c, ops, 1, -1, &t), GEMMD_EINVAL);
        bad = ops[0];
        bad.kind = (enum gemmd_op_kind)2;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_EINVAL);
        bad = ops[0];
        bad.dtype = (enum gemmd_dtype)4;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_EINVAL);
        bad = ops[0];
        bad.trans_b = (enum gemmd_trans)2;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_EINVAL);
        bad = ops[0];
        bad.uplo = (enum gemmd_uplo)-1;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_EINVAL);
        bad = ops[0];
        bad.flags = 0x80;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_EINVAL);
        /* Inline A without its bytes. */
        bad = ops[0];
        bad.a.buffer = 0;
        bad.a.bytes = 64;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_EINVAL);
        /* Inline bytes over max_inline_bytes, counted over the submit. */
        bad = ops[0];
        bad.a.buffer = 0;
        bad.a.data = data;
        bad.a.bytes = (16u << 20) - 32;
        bad.b.buffer = 0;
        bad.b.data = data;
        bad.b.bytes = 64;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_ELIMIT);
        bad.b.bytes = UINT64_MAX - 8;
        cr_assert_eq(gemmd_submit(c, &bad, 1, 1, &t), GEMMD_EOVERFLOW);
        /* Buffers. */
        cr_assert_eq(gemmd_buffer_alloc(c, 0, &id, &p), -EINVAL);
        cr_assert_eq(gemmd_buffer_alloc(c, (1u << 30) + 1, &id, &p), GEMMD_ELIMIT);
        cr_assert_eq(gemmd_buffer_free(c, 99), GEMMD_ENOBUF);
        cr_assert_eq(gemmd_unregister(c, 99), GEMMD_ENOBUF);
        cr_assert_eq(gemmd_register_device(c, NULL, 64, &id), -EINVAL);
        /* Tickets. */
        cr_assert_eq(gemmd_wait(c, 0, 0, NULL, 0), GEMMD_ENOTICKET);
        cr_assert_eq(gemmd_wait(c, 12345, -1, NULL, 0), GEMMD_ENOTICKET);
        cr_assert_eq(gemmd_poll(c, &t), 0);
        gemmd_disconnect(c);
        mock_join();
}

static int have_cuda_runtime(void)
{
        static const char *const names[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                             "libcudart.so.11.0", NULL };
        int i;

        for (i = 0; names[i]; i++)
                if (dlopen(names[i], RTLD_NOW | RTLD_LOCAL))
                        return 1;
        return 0;
}

Test(args, register_device_without_cuda)
{
        gemmd_client *c;
        gemmd_buffer id;
        int host_memory[16];

        mock_start(script_hello_then_eof);
        mock_run();
        c = connect_mock();
        if (have_cuda_runtime())
                /* Host memory is no device memory, or there is no GPU. */
                cr_assert(gemmd_register_device(c, host_memory, sizeof(host_memory), &id) < 0);
        else
                cr_assert_eq(gemmd_register_device(c, host_memory, sizeof(host_memory), &id),
                             GEMMD_EUNSUPPORTED);
        gemmd_disconnect(c);
        mock_join();
}

Test(args, frame_over_the_daemons_limit)
{
        static char data[8192];
        struct gemmd_op op = { .m = 4, .n = 4, .k = 4, .lda = 4, .ldb = 4, .ldc = 4 };
        gemmd_client *c;
        gemmd_ticket t;

        mock_start(script_hello_then_eof);
        mk.limits.max_frame_bytes = 4096;
        mock_run();
        c = connect_mock();
        op.a.data = data;
        op.a.bytes = sizeof(data);
        op.b.buffer = op.c.buffer = 1;
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t), GEMMD_ETOOBIG);
        gemmd_disconnect(c);
        mock_join();
}

/* ---- the library against the scripted daemon -------------------------- */

Test(lib, handshake_info_and_devices)
{
        struct gemmd_info in;
        struct gemmd_device d;
        gemmd_client *c;

        mock_start(script_hello_then_eof);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_get_info(c, &in), 0);
        cr_assert_eq(in.protocol_version, GEMMD_PROTOCOL_VERSION);
        cr_assert_str_eq(in.server_version, "9.8.7");
        cr_assert_str_eq(in.backend, "cuda");
        cr_assert_eq(in.ndevices, 2);
        cr_assert_eq(in.session_id, 42);
        cr_assert_eq(in.max_frame_bytes, 64u << 20);
        cr_assert_eq(in.max_ops_per_submit, 4);
        cr_assert_eq(in.max_inline_bytes, 16u << 20);
        cr_assert_eq(in.max_inflight_ops, 64);
        cr_assert_eq(in.max_buffers, 8);
        cr_assert_eq(in.max_buffer_bytes, 1u << 30);
        cr_assert_eq(in.max_queue_ops, 1024);
        cr_assert_eq(gemmd_get_device(c, 1, &d), 0);
        cr_assert_eq(d.index, 1);
        cr_assert_str_eq(d.name, "NVIDIA H100 80GB HBM3");
        cr_assert_str_eq(d.backend, "cuda");
        cr_assert_eq(d.units, 132);
        cr_assert_eq(d.memory_bytes, 80ull << 30);
        cr_assert_eq(gemmd_get_device(c, 2, &d), -EINVAL);
        cr_assert(gemmd_fd(c) >= 0);
        cr_assert(fcntl(gemmd_fd(c), F_GETFD) & FD_CLOEXEC);
        gemmd_disconnect(c);
        mock_join();
}

/* Registers: checks the descriptor and writes a pattern through the
 * daemon's own mapping; then a second register is refused; then release. */
static void script_buffers(struct mock *m)
{
        Gemmd__V1__Envelope *in, env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferReply br = GEMMD__V1__BUFFER_REPLY__INIT;
        struct stat st;
        int seals;

        mock_hello(m);
        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER);
        if (!in || in->body_case != GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER)
                return;
        MCHECK(m, in->buffer_register->kind == GEMMD__V1__BUFFER_REGISTER__KIND__SHM);
        MCHECK(m, in->buffer_register->bytes == 10000);
        MCHECK(m, m->rx_fd >= 0);
        if (m->rx_fd < 0)
                return;
        MCHECK(m, fstat(m->rx_fd, &st) == 0 && st.st_size == 10000);
        seals = fcntl(m->rx_fd, F_GET_SEALS);
        MCHECK(m, seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW));
        m->shm_bytes = 10000;
        m->shm = mmap(NULL, 10000, PROT_READ | PROT_WRITE, MAP_SHARED, m->rx_fd, 0);
        MCHECK(m, m->shm != MAP_FAILED);
        close(m->rx_fd);
        m->rx_fd = -1;
        if (m->shm == MAP_FAILED) {
                m->shm = NULL;
                return;
        }
        memset(m->shm, 0xab, 10000);
        br.buffer_id = 7;
        env.request_id = in->request_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY;
        env.buffer_reply = &br;
        mock_send(m, &env);

        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER);
        MCHECK(m, m->rx_fd >= 0);
        close(m->rx_fd);
        m->rx_fd = -1;
        if (in)
                mock_error(m, in->request_id, GEMMD__V1__CODE__LIMIT, -1);

        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE);
        if (!in || in->body_case != GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE)
                return;
        MCHECK(m, in->buffer_release->buffer_id == 7);
        MCHECK(m, ((unsigned char *)m->shm)[0] == 0x11); /* what the client wrote */
        mock_ack(m, in->request_id);
        mock_expect_eof(m);
}

/* $GEMMD_SPIN_US sets how long a handle's waits poll before sleeping; a
 * malformed or out-of-range value keeps the default. */
Test(lib, spin_window_from_environment)
{
        const uint32_t dflt = sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? GEMMD_DEFAULT_SPIN_US : 0;
        const char *val[] = {"7", "0", "1000000", "junk", "1000001", NULL};
        const uint32_t want[] = {7, 0, 1000000, dflt, dflt, dflt};

        for (int i = 0; i < 6; i++) {
                gemmd_client *c;

                if (val[i])
                        setenv("GEMMD_SPIN_US", val[i], 1);
                else
                        unsetenv("GEMMD_SPIN_US");
                unlink(tmp_path("sock")); /* the previous round's */
                mock_start(script_hello_then_eof);
                mock_run();
                c = connect_mock();
                cr_assert_eq(gemmd_spin_us(c), want[i], "GEMMD_SPIN_US=%s: %u", val[i] ? val[i] : "(unset)",
                             gemmd_spin_us(c));
                gemmd_disconnect(c);
                mock_join();
        }
        unsetenv("GEMMD_SPIN_US");
        cr_assert_eq(gemmd_spin_us(NULL), 0);
}

Test(lib, buffer_alloc_passes_a_sealed_memfd)
{
        gemmd_client *c;
        gemmd_buffer id = 0, id2 = 0;
        unsigned char *p;
        void *p2 = NULL;
        int i;

        mock_start(script_buffers);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_buffer_alloc(c, 10000, &id, (void **)&p), 0);
        cr_assert_eq(id, 7);
        for (i = 0; i < 10000; i++)
                cr_assert_eq(p[i], 0xab, "byte %d", i);
        p[0] = 0x11;
        cr_assert_eq(gemmd_buffer_alloc(c, 100, &id2, &p2), GEMMD_ELIMIT);
        cr_assert_eq(id2, 0);
        cr_assert_null(p2);
        cr_assert_eq(gemmd_buffer_free(c, 7), 0);
        cr_assert_eq(gemmd_buffer_free(c, 7), GEMMD_ENOBUF);
        gemmd_disconnect(c);
        mock_join();
}

/* Checks that the submit carries the op faithfully, then completes it with
 * an inline C. */
static void script_submit_fields(struct mock *m)
{
        static const float result[4] = { 1, 2, 3, 4 };
        Gemmd__V1__Envelope *in;
        Gemmd__V1__Op *o;
        int status[2] = { 0, 0 };

        mock_hello(m);
        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_SUBMIT);
        if (!in || in->body_case != GEMMD__V1__ENVELOPE__BODY_SUBMIT)
                return;
        MCHECK(m, in->submit->n_ops == 2);
        MCHECK(m, in->submit->priority == GEMMD_PRIO_HIGH);
        o = in->submit->ops[0];
        MCHECK(m, o->kind == GEMMD__V1__OP_KIND__GEMM && o->dtype == GEMMD__V1__DTYPE__BF16);
        MCHECK(m, o->trans_a == GEMMD__V1__TRANS__T && o->trans_b == GEMMD__V1__TRANS__N);
        MCHECK(m, o->row_major && o->allow_tf32);
        MCHECK(m, o->m == 3 && o->n == 5 && o->k == 7);
        MCHECK(m, o->lda == 11 && o->ldb == 13 && o->ldc == 17);
        MCHECK(m, o->alpha == 1.5f && o->beta == -2.0f);
        MCHECK(m, o->a->buffer_id == 9 && o->a->offset == 256 && o->a->data.len == 0);
        MCHECK(m, o->b->buffer_id == 0 && o->b->data.len == 6 &&
                          !memcmp(o->b->data.data, "abcdef", 6));
        MCHECK(m, o->c->buffer_id == 0 && o->c->data.len == 0);
        o = in->submit->ops[1];
        MCHECK(m, o->kind == GEMMD__V1__OP_KIND__SYR2K && o->uplo == GEMMD__V1__UPLO__UPPER);
        MCHECK(m, !o->row_major && !o->allow_tf32);
        MCHECK(m, o->c->buffer_id == 9 && o->c->offset == 4096);
        mock_complete(m, in->request_id, 2, status, result, sizeof(result));
        mock_expect_eof(m);
}

Test(lib, submit_carries_every_field)
{
        struct gemmd_op ops[2];
        struct gemmd_result res[3];
        float out[3] = { -1, -1, -1 };
        gemmd_client *c;
        gemmd_ticket t = 0;

        mock_start(script_submit_fields);
        mock_run();
        c = connect_mock();
        memset(ops, 0, sizeof(ops));
        ops[0] = (struct gemmd_op){
                .kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .trans_a = GEMMD_OP_T,
                .flags = GEMMD_OPF_ROW_MAJOR | GEMMD_OPF_ALLOW_TF32,
                .m = 3, .n = 5, .k = 7, .lda = 11, .ldb = 13, .ldc = 17,
                .alpha = 1.5f, .beta = -2.0f,
                .a = { .buffer = 9, .offset = 256 },
                .b = { .data = "abcdef", .bytes = 6 },
                .c = { .out = out, .bytes = sizeof(out) },
        };
        ops[1] = (struct gemmd_op){ .kind = GEMMD_SYR2K, .uplo = GEMMD_UPPER,
                                    .a = { .buffer = 9 }, .b = { .buffer = 9 },
                                    .c = { .buffer = 9, .offset = 4096 } };
        cr_assert_eq(gemmd_submit(c, ops, 2, GEMMD_PRIO_HIGH, &t), 0);
        cr_assert_neq(t, 0);
        memset(res, 0x5a, sizeof(res));
        cr_assert_eq(gemmd_wait(c, t, 5000, res, 3), 0);
        cr_assert_eq(res[0].status, 0);
        cr_assert_eq(res[1].status, 0);
        cr_assert_eq(res[0].queue_us, 10);
        cr_assert_eq(res[1].run_us, 21);
        cr_assert_eq(res[1].group_id, 31);
        cr_assert_eq(res[0].group_size, 2);
        cr_assert_str_eq(res[0].kernel, "cpu-f32-test-kernel-name-that-i");
        cr_assert_eq(res[0].admit_ns, 1000000000ull);
        cr_assert_eq(res[1].reply_ns, 2000000001ull);
        cr_assert_eq(((unsigned char *)&res[2])[0], 0x5a, "only nops results are written");
        /* The 16-byte c_data was cut to the 12 bytes of `out`. */
        cr_assert_eq(out[0], 1);
        cr_assert_eq(out[1], 2);
        cr_assert_eq(out[2], 3);
        cr_assert_eq(gemmd_wait(c, t, 0, NULL, 0), GEMMD_ENOTICKET);
        gemmd_disconnect(c);
        mock_join();
}

/* Three submits answered in reverse order, one rejected, one with a failed
 * op. */
static void script_out_of_order(struct mock *m)
{
        Gemmd__V1__Envelope *in;
        int status[2] = { 0, GEMMD__V1__CODE__DEVICE };
        int i;

        mock_hello(m);
        for (i = 0; i < 3; i++) {
                in = mock_recv(m);
                MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_SUBMIT);
                if (!in)
                        return;
                m->ids[i] = in->request_id;
        }
        MCHECK(m, m->ids[0] && m->ids[0] != m->ids[1] && m->ids[1] != m->ids[2]);
        mock_complete(m, m->ids[2], 1, NULL, NULL, 0);
        mock_error(m, m->ids[0], GEMMD__V1__CODE__BOUNDS, 1);
        mock_complete(m, m->ids[1], 2, status, NULL, 0);
        mock_error(m, 999, GEMMD__V1__CODE__BUSY, -1); /* nobody's: ignored */
        mock_expect_eof(m);
}

Test(lib, replies_out_of_order)
{
        struct gemmd_op ops[2] = { { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 },
                                   { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 } };
        struct gemmd_result res[2];
        gemmd_ticket t[3];
        gemmd_client *c;

        mock_start(script_out_of_order);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_submit(c, ops, 2, 1, &t[0]), 0);
        cr_assert_eq(gemmd_submit(c, ops, 2, 1, &t[1]), 0);
        cr_assert_eq(gemmd_submit(c, ops, 1, 1, &t[2]), 0);
        cr_assert_eq(gemmd_wait(c, t[1], 5000, res, 2), GEMMD_EDEVICE);
        cr_assert_eq(res[0].status, 0);
        cr_assert_eq(res[1].status, GEMMD_EDEVICE);
        /* The others arrived first and were stashed. */
        cr_assert_eq(gemmd_wait(c, t[0], 0, res, 2), GEMMD_EBOUNDS);
        cr_assert_eq(res[0].status, GEMMD_EBOUNDS);
        cr_assert_eq(res[1].status, GEMMD_EBOUNDS);
        cr_assert_eq(gemmd_wait(c, t[2], 0, res, 1), 0);
        gemmd_disconnect(c);
        mock_join();
}

/* A completion and an unrelated ack arrive while the client waits for its
 * stats and its buffer. */
static void script_stash_during_sync(struct mock *m)
{
        Gemmd__V1__Envelope *in, env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsReply sr = GEMMD__V1__STATS_REPLY__INIT;
        Gemmd__V1__BufferReply br = GEMMD__V1__BUFFER_REPLY__INIT;
        uint64_t stats_id;

        mock_hello(m);
        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_SUBMIT);
        if (!in)
                return;
        m->ids[0] = in->request_id;
        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_SUBMIT);
        if (!in)
                return;
        m->ids[1] = in->request_id;
        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST);
        if (!in)
                return;
        MCHECK(m, in->stats_request->json);
        stats_id = in->request_id;
        mock_complete(m, m->ids[0], 1, NULL, NULL, 0);
        mock_ack(m, 12345); /* stray */
        sr.text = "{\"groups\": 3}";
        env.request_id = stats_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REPLY;
        env.stats_reply = &sr;
        mock_send(m, &env);

        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER);
        if (!in)
                return;
        close(m->rx_fd);
        mock_error(m, m->ids[1], GEMMD__V1__CODE__BUSY, -1);
        br.buffer_id = 3;
        env.request_id = in->request_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY;
        env.buffer_reply = &br;
        mock_send(m, &env);
        mock_expect_eof(m);
}

Test(lib, completions_stashed_during_sync_calls)
{
        struct gemmd_op op = { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 };
        gemmd_ticket t1, t2;
        gemmd_buffer id;
        gemmd_client *c;
        char *text = NULL;
        void *p;

        mock_start(script_stash_during_sync);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t1), 0);
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t2), 0);
        cr_assert_eq(gemmd_stats(c, 1, &text), 0);
        cr_assert_str_eq(text, "{\"groups\": 3}");
        free(text);
        cr_assert_eq(gemmd_buffer_alloc(c, 4096, &id, &p), 0);
        cr_assert_eq(id, 3);
        cr_assert_eq(gemmd_wait(c, t2, 0, NULL, 0), GEMMD_EBUSY);
        cr_assert_eq(gemmd_wait(c, t1, 0, NULL, 0), 0);
        gemmd_disconnect(c);
        mock_join();
}

/* Answers nothing until the stats request, then completes the submit. */
static void script_late(struct mock *m)
{
        Gemmd__V1__Envelope *in, env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsReply sr = GEMMD__V1__STATS_REPLY__INIT;

        mock_hello(m);
        in = mock_recv(m);
        if (!in)
                return;
        m->ids[0] = in->request_id;
        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST);
        if (!in)
                return;
        MCHECK(m, !in->stats_request->json);
        sr.text = "text";
        env.request_id = in->request_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REPLY;
        env.stats_reply = &sr;
        mock_send(m, &env);
        mock_complete(m, m->ids[0], 1, NULL, NULL, 0);
        mock_expect_eof(m);
}

static int64_t ms_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Test(lib, wait_times_out_and_the_ticket_stays)
{
        struct gemmd_op op = { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 };
        gemmd_ticket t, got = 0;
        gemmd_client *c;
        char *text;
        int64_t t0;
        struct pollfd p;

        mock_start(script_late);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t), 0);
        cr_assert_eq(gemmd_wait(c, t, 0, NULL, 0), -ETIMEDOUT);
        t0 = ms_now();
        cr_assert_eq(gemmd_wait(c, t, 60, NULL, 0), -ETIMEDOUT);
        cr_assert_geq(ms_now() - t0, 59);
        cr_assert_eq(gemmd_poll(c, &got), 0);
        cr_assert_eq(gemmd_stats(c, 0, &text), 0);
        cr_assert_str_eq(text, "text");
        free(text);
        /* The completion follows the stats reply, maybe read with it. */
        p.fd = gemmd_fd(c);
        p.events = POLLIN;
        while (gemmd_poll(c, &got) == 0)
                cr_assert_eq(poll(&p, 1, 5000), 1);
        cr_assert_eq(got, t);
        cr_assert_eq(gemmd_poll(c, &got), 0, "reported once");
        cr_assert_eq(gemmd_wait(c, t, 0, NULL, 0), 0);
        gemmd_disconnect(c);
        mock_join();
}

static void script_complete_three(struct mock *m)
{
        Gemmd__V1__Envelope *in;
        int i;

        mock_hello(m);
        for (i = 0; i < 3; i++) {
                in = mock_recv(m);
                if (!in)
                        return;
                m->ids[i] = in->request_id;
        }
        mock_complete(m, m->ids[1], 1, NULL, NULL, 0);
        mock_complete(m, m->ids[0], 1, NULL, NULL, 0);
        mock_complete(m, m->ids[2], 1, NULL, NULL, 0);
        mock_expect_eof(m);
}

Test(lib, poll_reports_each_completion_once_in_order)
{
        struct gemmd_op op = { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 };
        gemmd_ticket t[3], got[3];
        gemmd_client *c;
        int n = 0, r;
        struct pollfd p;

        mock_start(script_complete_three);
        mock_run();
        c = connect_mock();
        for (r = 0; r < 3; r++)
                cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t[r]), 0);
        p.fd = gemmd_fd(c);
        p.events = POLLIN;
        while (n < 3) {
                cr_assert_eq(poll(&p, 1, 5000), 1);
                while ((r = gemmd_poll(c, &got[n])) == 1)
                        n++;
                cr_assert_eq(r, 0);
        }
        cr_assert_eq(got[0], t[1]);
        cr_assert_eq(got[1], t[0]);
        cr_assert_eq(got[2], t[2]);
        /* A ticket collected by gemmd_wait is never polled. */
        for (r = 0; r < 3; r++)
                cr_assert_eq(gemmd_wait(c, t[r], 0, NULL, 0), 0);
        gemmd_disconnect(c);
        mock_join();
}

/* Reads two submits and hangs up. */
static void script_drop(struct mock *m)
{
        mock_hello(m);
        mock_recv(m);
        mock_recv(m);
}

Test(lib, connection_loss_fails_pending_and_later_calls)
{
        struct gemmd_op op = { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 };
        struct gemmd_result res;
        gemmd_ticket t1, t2, got;
        gemmd_buffer id;
        gemmd_client *c;
        char *text;
        void *p;

        mock_start(script_drop);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t1), 0);
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t2), 0);
        cr_assert_eq(gemmd_wait(c, t1, 5000, &res, 1), GEMMD_EDISCONNECT);
        cr_assert_eq(res.status, GEMMD_EDISCONNECT);
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t1), GEMMD_EDISCONNECT);
        cr_assert_eq(gemmd_stats(c, 0, &text), GEMMD_EDISCONNECT);
        cr_assert_eq(gemmd_buffer_alloc(c, 64, &id, &p), GEMMD_EDISCONNECT);
        /* t2 failed too: poll hands it over, then reports the loss. */
        cr_assert_eq(gemmd_poll(c, &got), 1);
        cr_assert_eq(got, t2);
        cr_assert_eq(gemmd_poll(c, &got), GEMMD_EDISCONNECT);
        cr_assert_eq(gemmd_wait(c, t2, -1, NULL, 0), GEMMD_EDISCONNECT);
        gemmd_disconnect(c);
        mock_join();
}

/* Sends a frame over the client's limit (the handshake's max_frame_bytes). */
static void script_oversized(struct mock *m)
{
        uint8_t hdr[4] = { 0x01, 0x10, 0x00, 0x00 }; /* 4097 bytes */

        mock_hello(m);
        mock_recv(m);
        mock_send_raw(m, hdr, sizeof(hdr));
        mock_expect_eof(m);
}

Test(lib, oversized_frame_drops_the_connection)
{
        struct gemmd_op op = { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 };
        gemmd_ticket t;
        gemmd_client *c;

        mock_start(script_oversized);
        mk.limits.max_frame_bytes = 4096;
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t), 0);
        cr_assert_eq(gemmd_wait(c, t, 5000, NULL, 0), GEMMD_EDISCONNECT);
        gemmd_disconnect(c);
        mock_join();
}

static void script_garbage(struct mock *m)
{
        static const uint8_t junk[] = { 5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff };

        mock_hello(m);
        mock_recv(m);
        mock_send_raw(m, junk, sizeof(junk));
        mock_expect_eof(m);
}

Test(lib, malformed_frame_drops_the_connection)
{
        struct gemmd_op op = { .a.buffer = 1, .b.buffer = 1, .c.buffer = 1 };
        gemmd_ticket t;
        gemmd_client *c;

        mock_start(script_garbage);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t), 0);
        cr_assert_eq(gemmd_wait(c, t, 5000, NULL, 0), GEMMD_EDISCONNECT);
        gemmd_disconnect(c);
        mock_join();
}

#define BIG (6u << 20)

/* Takes a large inline submit slowly (so the client's sends block) and
 * answers with a large inline C, sent in small pieces. */
static void script_big(struct mock *m)
{
        Gemmd__V1__Envelope *in, env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Completion cp = GEMMD__V1__COMPLETION__INIT;
        Gemmd__V1__OpResult res = GEMMD__V1__OP_RESULT__INIT, *ptr = &res;
        uint8_t *data, *frame;
        size_t i, n;

        mock_hello(m);
        usleep(100 * 1000);
        in = mock_recv(m);
        MCHECK(m, in && in->body_case == GEMMD__V1__ENVELOPE__BODY_SUBMIT);
        if (!in)
                return;
        MCHECK(m, in->submit->ops[0]->a->data.len == BIG);
        for (i = 0; i < BIG && in->submit->ops[0]->a->data.data[i] == (uint8_t)(i * 7); i++)
                ;
        MCHECK(m, i == BIG);
        data = malloc(BIG);
        for (i = 0; i < BIG; i++)
                data[i] = (uint8_t)(i * 13);
        res.c_data.data = data;
        res.c_data.len = BIG;
        cp.n_results = 1;
        cp.results = &ptr;
        env.request_id = in->request_id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_COMPLETION;
        env.completion = &cp;
        MCHECK(m, frame_pack(&env, 0, UINT32_MAX, &frame, &n) == 0);
        for (i = 0; i < n; i += 1000)
                mock_send_raw(m, frame + i, n - i < 1000 ? n - i : 1000);
        free(frame);
        free(data);
        mock_expect_eof(m);
}

Test(lib, large_frames_both_ways)
{
        struct gemmd_op op = { .b.buffer = 1 };
        uint8_t *a = malloc(BIG), *out = malloc(BIG);
        gemmd_client *c;
        gemmd_ticket t;
        size_t i;

        for (i = 0; i < BIG; i++)
                a[i] = (uint8_t)(i * 7);
        memset(out, 0, BIG);
        op.a.data = a;
        op.a.bytes = BIG;
        op.c.out = out;
        op.c.bytes = BIG;
        mock_start(script_big);
        mock_run();
        c = connect_mock();
        cr_assert_eq(gemmd_submit(c, &op, 1, 1, &t), 0);
        memset(a, 0, BIG); /* the submit copied it */
        cr_assert_eq(gemmd_wait(c, t, 10000, NULL, 0), 0);
        for (i = 0; i < BIG; i++)
                if (out[i] != (uint8_t)(i * 13))
                        cr_assert_fail("byte %zu of C", i);
        gemmd_disconnect(c);
        mock_join();
        free(a);
        free(out);
}

/* ---- npy -------------------------------------------------------------- */

/* Writes a .npy file from a raw header dict (padded and terminated here)
 * and raw data. */
static void write_raw(const char *path, int major, const char *dict, const void *data,
                      size_t n)
{
        FILE *f = fopen(path, "wb");
        size_t pre = major == 1 ? 10 : 12, len = strlen(dict);
        size_t total = (pre + len + 1 + 63) / 64 * 64, hlen = total - pre, i;
        uint8_t p[12] = { 0x93, 'N', 'U', 'M', 'P', 'Y', (uint8_t)major, 0 };

        cr_assert_not_null(f);
        for (i = 0; i < pre - 8; i++)
                p[8 + i] = (uint8_t)(hlen >> (8 * i));
        fwrite(p, 1, pre, f);
        fwrite(dict, 1, len, f);
        for (i = pre + len; i < total - 1; i++)
                fputc(' ', f);
        fputc('\n', f);
        if (n)
                fwrite(data, 1, n, f);
        fclose(f);
}

static void write_bytes(const char *path, const void *b, size_t n)
{
        FILE *f = fopen(path, "wb");

        cr_assert_not_null(f);
        fwrite(b, 1, n, f);
        fclose(f);
}

Test(npy, header_matches_numpy)
{
        /* np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)), numpy 1.24 */
        static const char numpy_hdr[] =
                "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
                "                                                          \n";
        uint8_t buf[512];
        uint64_t shape[2] = { 2, 3 };
        long n = npy_format_header(NPY_F32, 2, shape, buf, sizeof(buf));

        cr_assert_eq(n, 128);
        cr_assert_eq(sizeof(numpy_hdr) - 1, 128);
        cr_assert_arr_eq(buf, numpy_hdr, 128);
        cr_assert_eq(npy_format_header(NPY_F32, 2, shape, buf, 127), -ENOSPC);
        cr_assert_eq(npy_format_header(NPY_F32, NPY_MAX_DIMS + 1, shape, buf, sizeof(buf)),
                     -EINVAL);
        cr_assert_eq(npy_format_header((enum npy_dtype)5, 2, shape, buf, sizeof(buf)), -EINVAL);
}

Test(npy, reads_version_2_from_numpy)
{
        /* numpy.lib.format.write_array(f, np.arange(3, dtype='<f2'), version=(2, 0)) */
        static const char file[] =
                "\x93NUMPY\x02\x00t\x00\x00\x00{'descr': '<f2', 'fortran_order': False, 'shape': "
                "(3,), }                                                          \n"
                "\x00\x00\x00<\x00@";
        struct npy_array a;
        uint16_t v[3];
        char why[128];

        write_bytes(tmp_path("v2.npy"), file, sizeof(file) - 1);
        cr_assert_eq(npy_load(tmp_path("v2.npy"), &a, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(a.dtype, NPY_F16);
        cr_assert_eq(a.ndim, 1);
        cr_assert_eq(a.shape[0], 3);
        cr_assert_eq(a.nbytes, 6);
        memcpy(v, a.data, 6);
        cr_assert_eq(v[0], 0x0000); /* 0.0 */
        cr_assert_eq(v[1], 0x3c00); /* 1.0 */
        cr_assert_eq(v[2], 0x4000); /* 2.0 */
        npy_free(&a);
}

struct shape_case {
        enum npy_dtype dtype;
        int ndim;
        uint64_t shape[4];
};

ParameterizedTestParameters(npy, round_trip)
{
        static struct shape_case cases[] = {
                { NPY_F32, 2, { 3, 5 } },    { NPY_F16, 2, { 7, 1 } },  { NPY_F32, 1, { 9 } },
                { NPY_F16, 3, { 2, 3, 4 } }, { NPY_F32, 0, { 0 } },     { NPY_F32, 2, { 0, 4 } },
                { NPY_F16, 4, { 1, 2, 1, 3 } }, { NPY_F32, 2, { 1000, 33 } },
                { NPY_BF16, 2, { 4, 6 } },   { NPY_BF16, 1, { 5 } },
        };

        return cr_make_param_array(struct shape_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct shape_case *sc, npy, round_trip, .init = setup, .fini = teardown)
{
        size_t count = 1, esz = npy_dtype_size(sc->dtype), i;
        struct npy_array a;
        uint8_t *data;
        char why[128];
        struct stat st;
        int d;

        for (d = 0; d < sc->ndim; d++)
                count *= sc->shape[d];
        data = malloc(count * esz + 1);
        for (i = 0; i < count * esz; i++)
                data[i] = (uint8_t)(i * 31 + 7);
        cr_assert_eq(npy_save(tmp_path("a.npy"), sc->dtype, sc->ndim, sc->shape, data, why,
                              sizeof(why)),
                     0, "%s", why);
        cr_assert_eq(stat(tmp_path("a.npy"), &st), 0);
        cr_assert_eq((size_t)st.st_size % 64, (count * esz) % 64, "data starts 64-aligned");
        cr_assert_eq(npy_load(tmp_path("a.npy"), &a, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(a.dtype, sc->dtype);
        cr_assert_eq(a.ndim, sc->ndim);
        for (d = 0; d < sc->ndim; d++)
                cr_assert_eq(a.shape[d], sc->shape[d]);
        cr_assert_eq(a.nbytes, count * esz);
        cr_assert_arr_eq(a.data, data, count * esz);
        npy_free(&a);
        npy_free(&a);
        npy_free(NULL);
        free(data);
}

Test(npy, fortran_order_is_transposed)
{
        /* The 2x3 matrix [[0,1,2],[3,4,5]] stored column by column. */
        static const float cols[6] = { 0, 3, 1, 4, 2, 5 };
        struct npy_array a;
        float v[6];
        char why[128];
        int i;

        write_raw(tmp_path("f.npy"), 1,
                  "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", cols,
                  sizeof(cols));
        cr_assert_eq(npy_load(tmp_path("f.npy"), &a, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(a.shape[0], 2);
        cr_assert_eq(a.shape[1], 3);
        memcpy(v, a.data, sizeof(v));
        for (i = 0; i < 6; i++)
                cr_assert_eq(v[i], (float)i);
        npy_free(&a);
}

Test(npy, lenient_but_valid_headers)
{
        static const float one = 1.0f;
        static const char *const dicts[] = {
                "{'shape': (1,), 'fortran_order': False, 'descr': '<f4'}",
                "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(1L,)}",
                "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 1 , ) , }",
                "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }",
        };
        struct npy_array a;
        char why[128];
        size_t i;

        for (i = 0; i < sizeof(dicts) / sizeof(dicts[0]); i++) {
                write_raw(tmp_path("l.npy"), 1, dicts[i], &one, sizeof(one));
                cr_assert_eq(npy_load(tmp_path("l.npy"), &a, why, sizeof(why)), 0, "%s: %s",
                             dicts[i], why);
                cr_assert_eq(a.ndim, 1);
                cr_assert_eq(a.shape[0], 1);
                npy_free(&a);
        }
}

/* Parameters reach each test's process by value: arrays, no pointers. */
struct bad_case {
        int major;
        char dict[160];
        size_t data_bytes;
        int err;
        char why[32]; /* a substring of the reason */
};

ParameterizedTestParameters(npy, malformed)
{
        static struct bad_case cases[] = {
                { 1, "{'descr': '<f4', 'fortran_order': False}", 0, -EINVAL, "missing 'shape'" },
                { 1, "{'fortran_order': False, 'shape': (1,)}", 4, -EINVAL, "missing 'descr'" },
                { 1, "{'descr': '<f4', 'shape': (1,)}", 4, -EINVAL, "missing 'fortran_order'" },
                { 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
                  4, -EINVAL, "repeated key 'descr'" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4,
                  -EINVAL, "key 'x'" },
                { 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,)}", 8, -ENOTSUP,
                  "'<i8' is not supported" },
                { 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (1,)}", 8, -ENOTSUP,
                  "big-endian" },
                { 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,)}", 4, -ENOTSUP,
                  "big-endian" },
                { 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)}", 1, -ENOTSUP,
                  "not supported" },
                { 1, "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, "
                     "'shape': (1,)}", 8, -ENOTSUP, "structured" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3)}", 0, -EINVAL,
                  "negative" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5, 3)}", 0, -EINVAL,
                  "shape" },
                { 1, "{'descr': '<f4', 'fortran_order': False, "
                     "'shape': (99999999999999999999999, 1)}", 0, -EINVAL, "bad dimension" },
                { 1, "{'descr': '<f4', 'fortran_order': False, "
                     "'shape': (4294967296, 4294967296)}", 0, -EFBIG, "overflows" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,"
                     "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}", 4, -EINVAL,
                  "more than 32" },
                { 1, "{'descr': '<f4', 'fortran_order': maybe, 'shape': (1,)}", 4, -EINVAL,
                  "not a bool" },
                { 1, "{'descr': '<f4', 'fortran_order': Falsehood, 'shape': (1,)}", 4, -EINVAL,
                  "not a bool" },
                { 1, "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", 4, -EINVAL,
                  "malformed" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", 4, -EINVAL,
                  "after the dict" },
                { 1, "{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", 4, -EINVAL,
                  "expected ','" },
                { 1, "['descr', '<f4']", 4, -EINVAL, "not a dict" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': 1}", 4, -EINVAL,
                  "not a tuple" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}", 8, -EINVAL,
                  "expected ','" },
                { 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4)}", 10, -EINVAL,
                  "truncated" },
                { 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2, 2)}", 32,
                  -ENOTSUP, "Fortran" },
                { 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, -ENOTSUP,
                  "version 4.0" },
        };

        return cr_make_param_array(struct bad_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct bad_case *bc, npy, malformed, .init = setup, .fini = teardown)
{
        static const uint8_t data[64];
        struct npy_array a;
        char why[256] = "";

        write_raw(tmp_path("bad.npy"), bc->major, bc->dict, data, bc->data_bytes);
        cr_assert_eq(npy_load(tmp_path("bad.npy"), &a, why, sizeof(why)), bc->err, "%s: %s",
                     bc->dict, why);
        cr_assert_not_null(strstr(why, bc->why), "%s: '%s' lacks '%s'", bc->dict, why, bc->why);
        cr_assert_null(a.data);
}

Test(npy, malformed_preambles)
{
        static const uint8_t empty[1];
        static const uint8_t short_magic[] = { 0x93, 'N', 'U', 'M' };
        static const uint8_t bad_magic[] = { 0x93, 'N', 'U', 'M', 'P', 'X', 1, 0, 0, 0 };
        /* Header length 0xffff, file ends at once. */
        static const uint8_t cut[] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0xff, '{' };
        /* Version 2 claims a 4 GiB header. */
        static const uint8_t huge[] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff,
                                        0xff, '{' };
        struct npy_header h;
        struct npy_array a;
        char why[128];

        write_bytes(tmp_path("e.npy"), empty, 0);
        cr_assert_eq(npy_load(tmp_path("e.npy"), &a, why, sizeof(why)), -EINVAL);
        cr_assert_not_null(strstr(why, "magic"));
        write_bytes(tmp_path("s.npy"), short_magic, sizeof(short_magic));
        cr_assert_eq(npy_load(tmp_path("s.npy"), &a, why, sizeof(why)), -EINVAL);
        write_bytes(tmp_path("m.npy"), bad_magic, sizeof(bad_magic));
        cr_assert_eq(npy_load(tmp_path("m.npy"), &a, why, sizeof(why)), -EINVAL);
        write_bytes(tmp_path("c.npy"), cut, sizeof(cut));
        cr_assert_eq(npy_load(tmp_path("c.npy"), &a, why, sizeof(why)), -EINVAL);
        cr_assert_not_null(strstr(why, "truncated"), "%s", why);
        write_bytes(tmp_path("h.npy"), huge, sizeof(huge));
        cr_assert_eq(npy_load(tmp_path("h.npy"), &a, why, sizeof(why)), -EINVAL);
        cr_assert_not_null(strstr(why, "too long"), "%s", why);
        cr_assert_eq(npy_load(tmp_path("absent.npy"), &a, NULL, 0), -ENOENT);
        cr_assert_eq(npy_parse_header(cut, sizeof(cut), &h, NULL, 0), -EINVAL);
        cr_assert_eq(npy_parse_header(empty, 0, &h, NULL, 0), -EINVAL);
}

Test(npy, parse_header_from_memory)
{
        static const char hdr[] =
                "\x93NUMPY\x01\x00v\x00{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }"
                "                                                          \n";
        struct npy_header h;
        enum npy_dtype dt;

        cr_assert_eq(npy_parse_header(hdr, sizeof(hdr) - 1, &h, NULL, 0), 0);
        cr_assert_eq(h.major, 1);
        cr_assert_str_eq(h.descr, "<f2");
        cr_assert_eq(h.fortran_order, 0);
        cr_assert_eq(h.ndim, 2);
        cr_assert_eq(h.shape[0], 2);
        cr_assert_eq(h.shape[1], 3);
        cr_assert_eq(h.data_offset, 128);
        cr_assert_eq(npy_descr_dtype(h.descr, &dt, NULL, 0), 0);
        cr_assert_eq(dt, NPY_F16);
        /* One byte short of the header. */
        cr_assert_eq(npy_parse_header(hdr, sizeof(hdr) - 2, &h, NULL, 0), -EINVAL);
}

/* A descr must be exactly one the module reads: a NUL, a control byte or
 * anything else after '<f4' is refused, naming the problem. */
Test(npy, descr_with_trailing_bytes_is_refused)
{
        static const struct {
                const char *descr;
                size_t len;
                int err;
                const char *why;
        } cases[] = {
                {"<f4\0", 4, -EINVAL, "printable"},
                {"<f4\0\0\0\0", 7, -EINVAL, "printable"},
                {"<f2\t", 4, -EINVAL, "printable"},
                {"\0<f4", 4, -EINVAL, "printable"},
                {"<f4 ", 4, -ENOTSUP, "'<f4 ' is not supported"},
                {"<f4x", 4, -ENOTSUP, "'<f4x' is not supported"},
                {"<f44", 4, -ENOTSUP, "'<f44' is not supported"},
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char hdr[128], why[160] = "";
                struct npy_header h;
                enum npy_dtype dt;
                size_t n = 0;
                int rc;

                memset(hdr, ' ', sizeof(hdr));
                memcpy(hdr, "\x93NUMPY\x01\x00v\x00{'descr': '", 21);
                n = 21;
                memcpy(hdr + n, cases[i].descr, cases[i].len);
                n += cases[i].len;
                memcpy(hdr + n, "', 'fortran_order': False, 'shape': (2, 3), }", 45);
                hdr[127] = '\n';
                rc = npy_parse_header(hdr, sizeof(hdr), &h, why, sizeof(why));
                if (rc == 0)
                        rc = npy_descr_dtype(h.descr, &dt, why, sizeof(why));
                cr_expect_eq(rc, cases[i].err, "case %zu: %d (%s)", i, rc, why);
                cr_expect(strstr(why, cases[i].why), "case %zu: %s", i, why);
        }
}

/* ml_dtypes saves bfloat16 arrays with the descr '|V2' (NumPy has no
 * bfloat16): such a file reads as bf16 and a bf16 array saves as one. */
Test(npy, bf16_is_a_two_byte_void_as_ml_dtypes_writes_it)
{
        /* np.save(f, np.array([[1, 2, 3], [-2, 0.5, 1e3]], ml_dtypes.bfloat16)) */
        static const uint16_t bits[6] = { 0x3f80, 0x4000, 0x4040, 0xc000, 0x3f00, 0x447a };
        uint64_t shape[2] = { 2, 3 };
        uint8_t hdr[256];
        struct npy_array a;
        char why[160] = "";
        long n;

        write_raw(tmp_path("bf.npy"), 1, "{'descr': '|V2', 'fortran_order': False, 'shape': (2, 3), }",
                  bits, sizeof(bits));
        cr_assert_eq(npy_load(tmp_path("bf.npy"), &a, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(a.dtype, NPY_BF16);
        cr_assert_str_eq(npy_dtype_name(a.dtype), "bfloat16");
        cr_assert_eq(a.ndim, 2);
        cr_assert_eq(a.nbytes, sizeof(bits));
        cr_assert_arr_eq(a.data, bits, sizeof(bits));
        npy_free(&a);
        n = npy_format_header(NPY_BF16, 2, shape, hdr, sizeof(hdr));
        cr_assert_gt(n, 0);
        cr_assert(memmem(hdr, (size_t)n, "'descr': '|V2'", 14), "%.*s", (int)n, hdr);
        /* Other voids are not bf16, and the refusal names what is read. */
        write_raw(tmp_path("v4.npy"), 1, "{'descr': '|V4', 'fortran_order': False, 'shape': (1,), }",
                  bits, 4);
        cr_assert_eq(npy_load(tmp_path("v4.npy"), &a, why, sizeof(why)), -ENOTSUP);
        cr_assert(strstr(why, "'|V2'"), "%s", why);
}

/* float64 ('<f8') reads as NPY_F64, in C and in Fortran order, and saves
 * as '<f8' with every bit kept. */
Test(npy, f64_reads_and_writes_as_f8)
{
        /* 1/3, 0.1 and 1e300: nothing a float holds. */
        static const double v[6] = { 1.0 / 3, 0.1, 1e300, -2.5, 0x1p-1070, -0.0 };
        uint64_t shape[2] = { 2, 3 };
        struct npy_array a;
        char why[160] = "";

        write_raw(tmp_path("f8.npy"), 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
                  v, sizeof(v));
        cr_assert_eq(npy_load(tmp_path("f8.npy"), &a, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(a.dtype, NPY_F64);
        cr_assert_eq(npy_dtype_size(a.dtype), 8);
        cr_assert_str_eq(npy_dtype_name(a.dtype), "float64");
        cr_assert_eq(a.nbytes, sizeof(v));
        cr_assert_arr_eq(a.data, v, sizeof(v));
        npy_free(&a);
        /* Fortran order: element (i, j) of the file is v[i + 2 j]. */
        write_raw(tmp_path("f8f.npy"), 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }",
                  v, sizeof(v));
        cr_assert_eq(npy_load(tmp_path("f8f.npy"), &a, why, sizeof(why)), 0, "%s", why);
        for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++)
                        cr_assert(!memcmp((double *)a.data + i * 3 + j, &v[i + 2 * j], 8),
                                  "(%d, %d)", i, j);
        npy_free(&a);
        cr_assert_eq(npy_save(tmp_path("out8.npy"), NPY_F64, 2, shape, v, why, sizeof(why)), 0,
                     "%s", why);
        cr_assert_eq(npy_load(tmp_path("out8.npy"), &a, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(a.dtype, NPY_F64);
        cr_assert_arr_eq(a.data, v, sizeof(v));
        npy_free(&a);
}

/* "-" is standard input for npy_load and standard output for npy_save,
 * both left open; nothing named "-" is created. */
Test(npy, dash_is_stdin_and_stdout)
{
        static const float v[6] = { 1, 2, 3, 4, 5, 6 };
        uint64_t shape[2] = { 3, 2 };
        struct npy_array a;
        char why[160] = "";
        int fd, saved;

        cr_assert_eq(chdir(tmp_path("")), 0);
        saved = dup(STDOUT_FILENO);
        fd = open(tmp_path("out.npy"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        cr_assert(fd >= 0 && saved >= 0);
        cr_assert_eq(dup2(fd, STDOUT_FILENO), STDOUT_FILENO);
        cr_assert_eq(npy_save("-", NPY_F32, 2, shape, v, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(fcntl(STDOUT_FILENO, F_GETFD), 0, "stdout was closed");
        cr_assert_eq(dup2(saved, STDOUT_FILENO), STDOUT_FILENO);
        close(fd);
        cr_assert_eq(access(tmp_path("-"), F_OK), -1, "a file named '-' was written");

        fd = open(tmp_path("out.npy"), O_RDONLY);
        cr_assert_eq(dup2(fd, STDIN_FILENO), STDIN_FILENO);
        close(fd);
        cr_assert_eq(npy_load("-", &a, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(fcntl(STDIN_FILENO, F_GETFD), 0, "stdin was closed");
        cr_assert_eq(a.dtype, NPY_F32);
        cr_assert_eq(a.ndim, 2);
        cr_assert_eq(a.shape[0], 3);
        cr_assert_arr_eq(a.data, v, sizeof(v));
        npy_free(&a);
}

Test(npy, save_errors)
{
        static const float v[4];
        uint64_t shape[2] = { 2, 2 }, huge[2] = { UINT64_MAX, 2 };
        char why[128];

        cr_assert_eq(npy_save(tmp_path("no/such/dir.npy"), NPY_F32, 2, shape, v, why,
                              sizeof(why)),
                     -ENOENT);
        cr_assert_eq(npy_save(tmp_path("x.npy"), NPY_F32, 2, huge, v, why, sizeof(why)), -EFBIG);
        cr_assert_eq(access(tmp_path("x.npy"), F_OK), -1);
}

/* ---- gemmctl top's block ---------------------------------------------- */

/* Two samples of the daemon's JSON statistics, 2 s apart: device 0 did
 * 200 ops (100 queued 64-127 us, 4 groups run 1-2 ms) and 2e12 flops;
 * session 7 did 60 ops, session 8 (the one asking) is left out; 4 more
 * requests were refused as busy. */
#define TOP_PREV "{\"version\":\"9.9\",\"uptime_s\":3700,\"draining\":false," \
        "\"sessions_now\":2,\"requests\":10,\"queued_ops\":0,\"rejections\":{\"busy\":3}," \
        "\"devices\":[{\"index\":0,\"backend\":\"cpu\",\"name\":\"cpu \\\"x\\\"\",\"groups\":1," \
        "\"ops\":50,\"ops_failed\":0,\"flops\":1e12,\"busy_s\":1.0,\"queued\":0," \
        "\"queue_us_log2\":[0,0,0,0,0,0,5],\"run_us_log2\":[0,0,0,0,0,0,0,0,0,0,1]}]," \
        "\"all_sessions\":true,\"sessions\":[{\"id\":7,\"pid\":1,\"uid\":0,\"ops_ok\":40," \
        "\"inflight\":0,\"buffers\":1,\"buffer_bytes\":1024,\"rejected\":0}]," \
        "\"users\":[{\"uid\":0,\"sessions\":2,\"inflight\":0,\"buffer_bytes\":1024}]," \
        "\"cpu\":{\"total_s\":1.0,\"device_process_s\":0,\"roles\":{\"loop\":{\"s\":0.5}}}}"
#define TOP_CUR "{\"version\":\"9.9\",\"uptime_s\":3702,\"draining\":false," \
        "\"sessions_now\":2,\"requests\":210,\"queued_ops\":3,\"rejections\":{\"busy\":7}," \
        "\"devices\":[{\"index\":0,\"backend\":\"cpu\",\"name\":\"cpu \\\"x\\\"\",\"groups\":5," \
        "\"ops\":250,\"ops_failed\":0,\"flops\":5e12,\"busy_s\":2.5,\"queued\":3," \
        "\"queue_us_log2\":[0,0,0,0,0,0,105],\"run_us_log2\":[0,0,0,0,0,0,0,0,0,0,5]}]," \
        "\"all_sessions\":true,\"sessions\":[{\"id\":7,\"pid\":1,\"uid\":0,\"ops_ok\":160," \
        "\"inflight\":2,\"buffers\":1,\"buffer_bytes\":1024,\"rejected\":4}," \
        "{\"id\":8,\"pid\":2,\"uid\":0,\"ops_ok\":0,\"inflight\":0,\"buffers\":0," \
        "\"buffer_bytes\":0,\"rejected\":0}]," \
        "\"users\":[{\"uid\":0,\"sessions\":2,\"inflight\":2,\"buffer_bytes\":1024}]," \
        "\"cpu\":{\"total_s\":3.0,\"device_process_s\":0,\"roles\":{\"loop\":{\"s\":1.5}}}}"

/* Renders the block of TOP_PREV -> TOP_CUR into a malloc'd string. */
static char *top_text(const char *prev, const char *cur, int *rc)
{
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);

        cr_assert_not_null(f);
        *rc = gemmctl_top_block(f, "S", prev, cur, 2.0, 8);
        fclose(f);
        return text;
}

/* A line of text that holds every one of the words, in order. */
static int has_line(const char *text, const char *const *words)
{
        const char *line = text;

        while (line && *line) {
                const char *end = strchr(line, '\n'), *p = line;
                int i;

                for (i = 0; words[i] && p; i++) {
                        p = strstr(p, words[i]);
                        if (p && end && p > end)
                                p = NULL;
                        if (p)
                                p += strlen(words[i]);
                }
                if (!words[i] && p)
                        return 1;
                line = end ? end + 1 : NULL;
        }
        return 0;
}

#define EXPECT_LINE(text, ...)                                                                  \
        cr_expect(has_line(text, (const char *const[]){ __VA_ARGS__, NULL }),                   \
                  "no line with " #__VA_ARGS__ " in:\n%s", text)

Test(top, block_shows_rates_between_samples)
{
        int rc;
        char *t = top_text(TOP_PREV, TOP_CUR, &rc);

        cr_assert_eq(rc, 0, "%s", t);
        EXPECT_LINE(t, "gemmd 9.9 at S", "up 1h01m", "serving", "2.0 s");
        EXPECT_LINE(t, "2 sessions of 1 user;", "100 requests/s", "100 ops/s",
                    "2 ops in flight", "3 not yet done");
        EXPECT_LINE(t, "refused", "2.0/s (4 queue full)", "7 since the start");
        EXPECT_LINE(t, "host CPU", "1.00 cores", "event loops 0.50");
        /* busy 75%, 2 TFLOP/s, 100 ops/s, 2 groups/s; 100 ops queued
         * 64-127 us: p50 96 us, p99 127 us; 4 groups run 1024-2047 us. */
        EXPECT_LINE(t, "0", "cpu", "75%", "2.000", "100", "0", "3", "2", "96 us", "127 us",
                    "1.5 ms", "2.0 ms");
        EXPECT_LINE(t, "7", "1", "root", "60", "2", "1", "1.0 KiB", "4");
        cr_expect(!has_line(t, (const char *const[]){ "8 ", "2 ", "root", NULL }),
                  "the asking session is shown:\n%s", t);
        EXPECT_LINE(t, "root", "2", "2", "1.0 KiB");
        cr_expect_null(strchr(t, '\033'), "escape codes in a block");
        free(t);
}

/* An interval without ops has no percentiles, and no rates. */
Test(top, idle_interval_shows_no_percentiles)
{
        int rc;
        char *t = top_text(TOP_CUR, TOP_CUR, &rc);

        cr_assert_eq(rc, 0, "%s", t);
        EXPECT_LINE(t, "0 requests/s", "0 ops/s");
        EXPECT_LINE(t, "0", "cpu", "0%", "0.000", "-", "-", "-", "-");
        EXPECT_LINE(t, "refused", "0.0/s, 7 since the start");
        free(t);
}

Test(top, a_sample_that_is_not_json_is_refused)
{
        static const char *const bad[] = {
                "", "[]", "{", "{\"a\":}", "{\"a\":1,}", "{\"a\":\"x}", "{} x", "nope",
                "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        };
        int rc;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                free(top_text(TOP_PREV, bad[i], &rc));
                cr_expect_eq(rc, -EINVAL, "'%s' taken", bad[i]);
                free(top_text(bad[i], TOP_CUR, &rc));
                cr_expect_eq(rc, -EINVAL, "'%s' taken", bad[i]);
        }
}

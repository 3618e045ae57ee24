/*
 * hard_util.c - helpers of the hardening suites (see hard_util.h).
 */
#include "tests/hard_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the daemon's resources ------------------------------------------- */

int hard_res_read(pid_t pid, struct hard_res *r)
{
        char path[64], line[512];
        struct dirent *e;
        DIR *dir;
        FILE *f;

        memset(r, 0, sizeof(*r));
        r->rss_kb = -1;
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        dir = opendir(path);
        if (!dir)
                return -1;
        while ((e = readdir(dir)))
                if (e->d_name[0] != '.')
                        r->fds++;
        closedir(dir);
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (!strncmp(line, "VmRSS:", 6))
                        r->rss_kb = strtol(line + 6, NULL, 10);
        fclose(f);
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        /* Clients' memory; not the launch slots the daemon shares with its
         * device process (memfds "gemmd-slot", "gemmd-rings"). */
        while (fgets(line, sizeof(line), f))
                if (strstr(line, "/memfd:") && !strstr(line, "/memfd:gemmd-"))
                        r->shm_maps++;
        fclose(f);
        return r->rss_kb < 0 ? -1 : 0;
}

int hard_res_settled(pid_t pid, struct hard_res *r, int timeout_ms)
{
        struct hard_res prev;
        int same = 0;

        if (hard_res_read(pid, &prev))
                return -1;
        for (int waited = 0; waited < timeout_ms && same < 5; waited += 20) {
                usleep(20000);
                if (hard_res_read(pid, r))
                        return -1;
                same = r->fds == prev.fds && r->shm_maps == prev.shm_maps ? same + 1 : 0;
                prev = *r;
        }
        *r = prev;
        return 0;
}

int hard_res_back(pid_t pid, const struct hard_res *base, struct hard_res *r, int timeout_ms)
{
        for (int waited = 0;; waited += 20) {
                if (hard_res_read(pid, r))
                        return -1;
                if ((r->fds == base->fds && r->shm_maps == base->shm_maps) || waited >= timeout_ms)
                        return 0;
                usleep(20000);
        }
}

const char *hard_res_str(const struct hard_res *r, char *buf, size_t len)
{
        snprintf(buf, len, "fds %d, VmRSS %ld kB, shared mappings %d", r->fds, r->rss_kb,
                 r->shm_maps);
        return buf;
}

/* Where the number that follows "key": starts in json, or NULL. */
static const char *json_value(const char *json, const char *key)
{
        char pat[64];
        const char *p;

        if (!json)
                return NULL;
        snprintf(pat, sizeof(pat), "\"%s\":", key);
        p = strstr(json, pat);
        return p ? p + strlen(pat) : NULL;
}

long long hard_json_number(const char *json, const char *key)
{
        const char *v = json_value(json, key);

        return v ? strtoll(v, NULL, 10) : -1;
}

double hard_json_double(const char *json, const char *key)
{
        const char *v = json_value(json, key);

        return v ? strtod(v, NULL) : -1.0;
}

int hard_wait_sessions(gemmd_client *c, long long want, int timeout_ms, long long *got)
{
        uint64_t deadline = e2e_now_us() + (uint64_t)timeout_ms * 1000u;
        long long v = -1;

        for (;;) {
                char *json = NULL;

                if (gemmd_stats(c, 1, &json) == 0)
                        v = hard_json_number(json, "sessions_now");
                free(json);
                if (v == want || e2e_now_us() > deadline)
                        break;
                usleep(10000);
        }
        if (got)
                *got = v;
        return v == want ? 0 : -1;
}

/* ---- a daemon on a path of the caller's choosing ------------------------ */

pid_t hard_spawn_daemon(const char *sock, const char *log, ...)
{
        char *argv[48], *bin = e2e_build_path("gemmd");
        int argc = 0, st;
        const char *flag;
        uint64_t deadline;
        va_list ap;
        pid_t pid;

        argv[argc++] = bin;
        argv[argc++] = "--socket";
        argv[argc++] = (char *)sock;
        argv[argc++] = "--backend";
        argv[argc++] = "cpu";
        va_start(ap, log);
        while ((flag = va_arg(ap, const char *)) && argc < 46)
                argv[argc++] = (char *)flag;
        va_end(ap);
        argv[argc] = NULL;
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                free(bin);
                return -1;
        }
        if (pid == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
                        _exit(126);
                execv(argv[0], argv);
                _exit(127);
        }
        free(bin);
        deadline = e2e_now_us() + 10000000u;
        for (;;) {
                if (waitpid(pid, &st, WNOHANG) == pid)
                        break;
                if (e2e_socket_accepts(sock))
                        return pid;
                if (e2e_now_us() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        break;
                }
                usleep(5000);
        }
        {
                char *text = e2e_read_file(log, NULL);

                fprintf(stderr, "hard: gemmd on %s did not start\n---- log ----\n%s\n----\n", sock,
                        text ? text : "(none)");
                free(text);
        }
        return -1;
}

/* ---- a connection spoken by hand ---------------------------------------- */

int hard_raw_open(struct hard_raw *r, const char *sock)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {10, 0};

        memset(r, 0, sizeof(*r));
        r->fd = -1;
        if (strlen(sock) >= sizeof(sa.sun_path))
                return -1;
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                fprintf(stderr, "hard: connect %s: %s\n", sock, strerror(errno));
                if (r->fd >= 0)
                        close(r->fd);
                r->fd = -1;
                return -1;
        }
        setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        frame_arena_init(&r->arena, 64u << 20);
        return 0;
}

void hard_raw_close(struct hard_raw *r)
{
        if (r->fd >= 0)
                close(r->fd);
        r->fd = -1;
        frame_arena_deinit(&r->arena);
        free(r->body);
        r->body = NULL;
}

int hard_raw_write(struct hard_raw *r, const void *buf, size_t n, const int *fds, int nfds)
{
        const uint8_t *p = buf;

        while (n || nfds) {
                union {
                        struct cmsghdr h;
                        char space[CMSG_SPACE(sizeof(int) * 32)];
                } ctl;
                struct iovec iov = {(void *)p, n ? n : 0};
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
                ssize_t w;

                if (nfds > 32)
                        return -1;
                if (nfds) {
                        struct cmsghdr *c;

                        memset(&ctl, 0, sizeof(ctl));
                        mh.msg_control = ctl.space;
                        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
                        c = CMSG_FIRSTHDR(&mh);
                        c->cmsg_level = SOL_SOCKET;
                        c->cmsg_type = SCM_RIGHTS;
                        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
                        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
                        if (!n) /* descriptors need at least one byte */
                                return -1;
                }
                w = sendmsg(r->fd, &mh, MSG_NOSIGNAL);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                p += w;
                n -= (size_t)w;
                nfds = 0;
        }
        return 0;
}

int hard_raw_send(struct hard_raw *r, uint64_t rid, Gemmd__V1__Envelope *env, const int *fds,
                  int nfds, int trickle_us)
{
        uint8_t *buf;
        size_t n;
        int rc = 0;

        env->request_id = rid;
        if (frame_pack(env, 0, UINT32_MAX, &buf, &n))
                return -1;
        if (!trickle_us) {
                rc = hard_raw_write(r, buf, n, fds, nfds);
        } else {
                for (size_t i = 0; i < n && !rc; i++) {
                        rc = hard_raw_write(r, buf + i, 1, i ? NULL : fds, i ? 0 : nfds);
                        usleep((useconds_t)trickle_us);
                }
        }
        free(buf);
        return rc;
}

/* Reads exactly n bytes. Returns 1, 0 at end of stream before the first
 * byte, -1 on error or timeout. */
static int read_full(int fd, void *buf, size_t n, int timeout_ms)
{
        uint8_t *p = buf;
        size_t got = 0;

        while (got < n) {
                struct pollfd pf = {fd, POLLIN, 0};
                ssize_t k;

                if (poll(&pf, 1, timeout_ms) <= 0)
                        return -1;
                k = recv(fd, p + got, n - got, 0);
                if (k == 0)
                        return got ? -1 : 0;
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == ECONNRESET && !got ? 0 : -1;
                }
                got += (size_t)k;
        }
        return 1;
}

Gemmd__V1__Envelope *hard_raw_recv(struct hard_raw *r, int timeout_ms)
{
        uint8_t hdr[FRAME_HDR_BYTES];
        uint32_t len;
        int rc = read_full(r->fd, hdr, sizeof(hdr), timeout_ms);

        r->eof = rc == 0;
        if (rc != 1 || frame_len_decode(hdr, 256u << 20, &len))
                return NULL;
        free(r->body);
        r->body = malloc(len ? len : 1);
        if (!r->body || (len && read_full(r->fd, r->body, len, timeout_ms) != 1))
                return NULL;
        return frame_unpack(&r->arena, r->body, len);
}

int hard_raw_wait_eof(struct hard_raw *r, int timeout_ms)
{
        uint64_t deadline = e2e_now_us() + (uint64_t)timeout_ms * 1000u;
        uint8_t buf[4096];

        for (;;) {
                struct pollfd pf = {r->fd, POLLIN, 0};
                int left = (int)((deadline - e2e_now_us()) / 1000);
                ssize_t k;

                if (e2e_now_us() >= deadline || poll(&pf, 1, left > 0 ? left : 0) <= 0)
                        return 0;
                k = recv(r->fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (k == 0 || (k < 0 && errno == ECONNRESET))
                        return 1;
                if (k < 0 && errno != EAGAIN && errno != EINTR)
                        return 0;
        }
}

int hard_raw_hello(struct hard_raw *r)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;

        h.protocol_version = GEMMD_PROTOCOL_VERSION;
        h.client_name = "hard";
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        if (hard_raw_send(r, 1, &env, NULL, 0, 0))
                return -1;
        rep = hard_raw_recv(r, 10000);
        return rep && rep->body_case == GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY ? 0 : -1;
}

void hard_gemm2_submit(struct hard_gemm2 *g, Gemmd__V1__Envelope *env)
{
        static const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};

        gemmd__v1__submit__init(&g->sub);
        gemmd__v1__op__init(&g->op);
        gemmd__v1__operand__init(&g->a);
        gemmd__v1__operand__init(&g->b);
        gemmd__v1__operand__init(&g->c);
        g->a.data = (ProtobufCBinaryData){sizeof(a), (uint8_t *)a};
        g->b.data = (ProtobufCBinaryData){sizeof(b), (uint8_t *)b};
        g->c.data = (ProtobufCBinaryData){sizeof(c), (uint8_t *)c};
        g->op.kind = GEMMD__V1__OP_KIND__GEMM;
        g->op.dtype = GEMMD__V1__DTYPE__F32;
        g->op.m = g->op.n = g->op.k = 2;
        g->op.lda = g->op.ldb = g->op.ldc = 2;
        g->op.alpha = 1.0f;
        g->op.a = &g->a;
        g->op.b = &g->b;
        g->op.c = &g->c;
        g->ops[0] = &g->op;
        g->sub.n_ops = 1;
        g->sub.ops = g->ops;
        env->body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        env->submit = &g->sub;
}

int hard_memfd(uint64_t bytes)
{
        int fd = memfd_create("hard", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        if (fd < 0)
                return -1;
        if (ftruncate(fd, (off_t)bytes) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

int64_t hard_raw_register(struct hard_raw *r, uint64_t rid, uint64_t bytes, uint64_t file_bytes)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        int fd = hard_memfd(file_bytes), rc;

        if (fd < 0)
                return INT64_MIN;
        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = bytes;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        rc = hard_raw_send(r, rid, &env, &fd, 1, 0);
        close(fd);
        if (rc)
                return INT64_MIN;
        rep = hard_raw_recv(r, 10000);
        if (!rep || rep->request_id != rid)
                return INT64_MIN;
        if (rep->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY)
                return (int64_t)rep->buffer_reply->buffer_id;
        if (rep->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR)
                return -(int64_t)rep->error->code;
        return INT64_MIN;
}

int hard_raw_send_ipc(struct hard_raw *r, uint64_t rid, int kind, uint8_t tag, uint64_t bytes)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        uint8_t handle[64] = {tag};

        reg.kind = kind;
        reg.bytes = bytes;
        reg.ipc_handle.data = handle;
        reg.ipc_handle.len = sizeof(handle);
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        return hard_raw_send(r, rid, &env, NULL, 0, 0);
}

long long hard_device_number(gemmd_client *c, const char *key)
{
        char *json = NULL;
        long long v = -1;

        if (gemmd_stats(c, 1, &json) == 0) {
                const char *dev = strstr(json, "\"devices\":");

                v = dev ? hard_json_number(dev, key) : -1;
        }
        free(json);
        return v;
}

int hard_raw_amplify(struct hard_raw *r, uint64_t rid, uint64_t buf, int64_t n)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Submit sub = GEMMD__V1__SUBMIT__INIT;
        Gemmd__V1__Op op = GEMMD__V1__OP__INIT, *ops[1] = {&op};
        Gemmd__V1__Operand a = GEMMD__V1__OPERAND__INIT, b = GEMMD__V1__OPERAND__INIT;
        Gemmd__V1__Operand c = GEMMD__V1__OPERAND__INIT;

        op.kind = GEMMD__V1__OP_KIND__GEMM;
        op.dtype = GEMMD__V1__DTYPE__F32;
        op.m = op.n = n;
        op.k = 1;
        op.lda = op.ldc = n;
        op.ldb = 1;
        op.alpha = 1.0f;
        a.buffer_id = b.buffer_id = buf;
        b.offset = (uint64_t)n * 4;
        op.a = &a;
        op.b = &b;
        op.c = &c;
        sub.n_ops = 1;
        sub.ops = ops;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        env.submit = &sub;
        return hard_raw_send(r, rid, &env, NULL, 0, 0);
}

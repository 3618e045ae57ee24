/*
 * seeds.c - writes the seed corpus of the fuzz targets into
 * tests/fuzz/corpus/{frame,validate}/ (`make fuzz-seeds`): streams of valid
 * frames of every message (the fuzzer mutates from there) and a few inputs
 * of the validate target.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gemmd.h"
#include "proto/frame.h"

static uint8_t stream[1 << 16];
static size_t slen;

static void add(uint64_t rid, Gemmd__V1__Envelope *env)
{
        uint8_t *buf;
        size_t n;

        env->request_id = rid;
        if (frame_pack(env, 0, UINT32_MAX, &buf, &n) || slen + n > sizeof(stream))
                exit(1);
        memcpy(stream + slen, buf, n);
        slen += n;
        free(buf);
}

static void add_raw(const void *p, size_t n)
{
        if (slen + n > sizeof(stream))
                exit(1);
        memcpy(stream + slen, p, n);
        slen += n;
}

static void flush(const char *dir, const char *name)
{
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "wb");
        if (!f || fwrite(stream, 1, slen, f) != slen || fclose(f)) {
                perror(path);
                exit(1);
        }
        slen = 0;
}

static void hello(void)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;

        h.protocol_version = GEMMD_PROTOCOL_VERSION;
        h.client_name = "seed";
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        add(1, &env);
}

/* A submit of n ops: GEMM or SYR2K, in buffer 4 (12 KiB of f32 64 x 64
 * room per operand) or inline. */
static void submit(uint64_t rid, int n, int kind, int dtype, int inl, int row, int trans)
{
        static uint8_t zeros[64 * 64 * 8];
        size_t esz = dtype == 3 ? 8 : dtype == 0 ? 4 : 2;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Submit sub = GEMMD__V1__SUBMIT__INIT;
        Gemmd__V1__Op op[8], *ops[8];
        Gemmd__V1__Operand a[8], b[8], c[8];

        for (int i = 0; i < n; i++) {
                int64_t d = 8 + 8 * i;

                gemmd__v1__op__init(&op[i]);
                gemmd__v1__operand__init(&a[i]);
                gemmd__v1__operand__init(&b[i]);
                gemmd__v1__operand__init(&c[i]);
                op[i].kind = kind;
                op[i].dtype = dtype;
                op[i].row_major = row;
                op[i].trans_a = trans;
                op[i].trans_b = trans ^ (i & 1);
                op[i].uplo = i & 1;
                op[i].m = op[i].n = op[i].k = d;
                op[i].lda = op[i].ldb = op[i].ldc = d;
                op[i].alpha = 1.0f;
                op[i].beta = i & 1 ? 0.5f : 0.0f;
                op[i].alpha_f64 = 1.0 / 3;
                op[i].beta_f64 = i & 1 ? 0.1 : 0.0;
                if (inl) {
                        a[i].data.data = b[i].data.data = c[i].data.data = zeros;
                        a[i].data.len = b[i].data.len = c[i].data.len = (size_t)(d * d) * esz;
                } else {
                        a[i].buffer_id = b[i].buffer_id = c[i].buffer_id = 4;
                        b[i].offset = 64 * 64 * 4;
                        c[i].offset = 2 * 64 * 64 * 4;
                }
                op[i].a = &a[i];
                op[i].b = &b[i];
                op[i].c = &c[i];
                ops[i] = &op[i];
        }
        sub.n_ops = (size_t)n;
        sub.ops = ops;
        sub.priority = 1;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        env.submit = &sub;
        add(rid, &env);
}

static void frames(const char *dir)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;

        hello();
        flush(dir, "hello");

        hello();
        {
                Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;

                reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
                reg.bytes = 4096;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
                env.buffer_register = &reg;
                add(2, &env);
        }
        submit(3, 1, 0, 0, 0, 0, 0);
        {
                Gemmd__V1__StatsRequest st = GEMMD__V1__STATS_REQUEST__INIT;

                st.json = 1;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
                env.stats_request = &st;
                add(4, &env);
        }
        flush(dir, "session");

        submit(5, 2, 1, 2, 1, 0, 0);
        flush(dir, "syr2k-inline-bf16");
        submit(6, 3, 0, 1, 0, 1, 1);
        flush(dir, "gemm-rowmajor-f16");
        submit(10, 2, 1, 3, 1, 0, 1);
        flush(dir, "syr2k-inline-f64");
        submit(11, 3, 0, 3, 0, 1, 0);
        flush(dir, "gemm-rowmajor-f64");
        submit(7, 5, 0, 0, 0, 0, 1);
        submit(8, 4, 1, 0, 0, 1, 0);
        flush(dir, "submits");

        {
                Gemmd__V1__BufferRelease rel = GEMMD__V1__BUFFER_RELEASE__INIT;
                Gemmd__V1__Error err = GEMMD__V1__ERROR__INIT;
                Gemmd__V1__Completion comp = GEMMD__V1__COMPLETION__INIT;
                Gemmd__V1__OpResult res = GEMMD__V1__OP_RESULT__INIT, *resp = &res;
                Gemmd__V1__Ack ack = GEMMD__V1__ACK__INIT;

                rel.buffer_id = 1;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE;
                env.buffer_release = &rel;
                add(9, &env);
                err.code = GEMMD__V1__CODE__BOUNDS;
                err.message = "op 0: A: bytes [0, 4100) reach past the end of buffer 1";
                err.op_index = 0;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_ERROR;
                env.error = &err;
                add(10, &env);
                res.status = GEMMD__V1__CODE__OK;
                res.kernel = "cpu-f32";
                res.group_id = 3;
                res.group_size = 2;
                res.c_data.data = (uint8_t *)"0123456789abcdef";
                res.c_data.len = 16;
                comp.n_results = 1;
                comp.results = &resp;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_COMPLETION;
                env.completion = &comp;
                add(11, &env);
                env.body_case = GEMMD__V1__ENVELOPE__BODY_ACK;
                env.ack = &ack;
                add(12, &env);
        }
        flush(dir, "replies");

        {
                Gemmd__V1__HelloReply hr = GEMMD__V1__HELLO_REPLY__INIT;
                Gemmd__V1__Limits lim = GEMMD__V1__LIMITS__INIT;
                Gemmd__V1__Device dev = GEMMD__V1__DEVICE__INIT, *devp = &dev;

                lim.max_frame_bytes = 1u << 20;
                lim.max_ops_per_submit = 4096;
                lim.max_user_share = 100;
                dev.name = "cpu (2 threads)";
                dev.backend = "cpu";
                dev.units = 2;
                hr.protocol_version = 1;
                hr.server_version = "0.1.0";
                hr.limits = &lim;
                hr.n_devices = 1;
                hr.devices = &devp;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY;
                env.hello_reply = &hr;
                add(1, &env);
        }
        flush(dir, "hello-reply");

        {
                static const uint8_t zero_len[4] = {0, 0, 0, 0};
                static const uint8_t junk[] = {6, 0, 0, 0, 0xff, 0x01, 0x82, 0x01, 0x7f, 0x00};
                static const uint8_t huge[] = {0xff, 0xff, 0xff, 0x7f, 0x08};

                add_raw(zero_len, sizeof(zero_len));
                add_raw(junk, sizeof(junk));
                add_raw(huge, sizeof(huge));
        }
        flush(dir, "odd-frames");
}

static void validate_seeds(const char *dir)
{
        uint64_t x = 0x9E3779B97F4A7C15ull;

        for (int s = 0; s < 8; s++) {
                size_t n = 48 + (size_t)s * 8;
                char name[32];

                for (size_t i = 0; i < n; i++) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        stream[i] = (uint8_t)x;
                }
                /* Mostly small, sensible sizes in the first seeds. */
                if (s < 4)
                        for (size_t i = 0; i < n; i += 3)
                                stream[i] = (uint8_t)(12 + (i % 2));
                slen = n;
                snprintf(name, sizeof(name), "seed-%d", s);
                flush(dir, name);
        }
}

/* One input of fuzz_shm: flags, the file's size, the size asked for,
 * then the client's script as (action, argument) pairs. */
static void shm_seed(const char *dir, const char *name, uint8_t flags, uint32_t file, uint32_t want,
                     const uint8_t *script, size_t steps)
{
        slen = 0;
        stream[slen++] = flags;
        for (int i = 0; i < 3; i++)
                stream[slen++] = (uint8_t)(file >> (8 * i));
        for (int i = 0; i < 3; i++)
                stream[slen++] = (uint8_t)(want >> (8 * i));
        memcpy(stream + slen, script, 2 * steps);
        slen += 2 * steps;
        flush(dir, name);
}

/* The attacks on a mapping that fuzz_shm starts from: truncated and then
 * sealed during the map, with and without a pause first, on both paths;
 * a sealed file punched, grown and sealed further; write seals. Actions:
 * 0 truncate, 1 punch, 2 grow, 3 seal shrink, 4 seal grow and future
 * write, 5 seal write, 6 spin. */
static void shm_seeds(const char *dir)
{
        static const uint8_t cut[] = {0, 0, 3, 0};
        static const uint8_t wait_cut[] = {6, 40, 0, 0, 3, 0};
        static const uint8_t churn[] = {1, 2, 2, 0, 0, 0, 4, 0, 5, 0, 1, 0, 0, 1};
        static const uint8_t seal_late[] = {6, 200, 3, 0, 0, 0};

        shm_seed(dir, "buffer-cut-then-sealed", 2, 64 << 10, 64 << 10, cut, 2);
        shm_seed(dir, "buffer-wait-cut-sealed", 2, 64 << 10, 64 << 10, wait_cut, 3);
        shm_seed(dir, "ring-cut-then-sealed", 3, 328064, 0, cut, 2);
        shm_seed(dir, "ring-wait-cut-sealed", 3, 328064, 0, wait_cut, 3);
        shm_seed(dir, "buffer-sealed-churn", 2 | 4, 64 << 10, 64 << 10, churn, 7);
        shm_seed(dir, "ring-sealed-churn", 1 | 2 | 4, 328064, 0, churn, 7);
        shm_seed(dir, "buffer-write-sealed", 2 | 4 | 16, 64 << 10, 64 << 10, churn, 7);
        shm_seed(dir, "buffer-future-write-sealed", 2 | 4 | 32, 64 << 10, 4096, churn, 7);
        shm_seed(dir, "buffer-sealed-late", 2, 64 << 10, 64 << 10, seal_late, 3);
        shm_seed(dir, "buffer-unsealable", 0, 64 << 10, 64 << 10, cut, 2);
        shm_seed(dir, "buffer-short", 2 | 4, 4096, 64 << 10, churn, 7);
}

int main(int argc, char **argv)
{
        char frame_dir[512], validate_dir[512], shm_dir[512];
        const char *root = argc > 1 ? argv[1] : "tests/fuzz/corpus";

        snprintf(frame_dir, sizeof(frame_dir), "%s/frame", root);
        snprintf(validate_dir, sizeof(validate_dir), "%s/validate", root);
        snprintf(shm_dir, sizeof(shm_dir), "%s/shm", root);
        mkdir(root, 0755);
        mkdir(frame_dir, 0755);
        mkdir(validate_dir, 0755);
        mkdir(shm_dir, 0755);
        frames(frame_dir);
        validate_seeds(validate_dir);
        shm_seeds(shm_dir);
        return 0;
}

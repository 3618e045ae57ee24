/*
 * validate.c - op validation and normalization.
 *
 * Row-major ops are rewritten here into the column-major problem the
 * kernels compute: a row-major m x n C is a column-major n x m matrix, so
 * GEMM swaps A with B and m with n, and SYR2K flips its op and triangle.
 * All size arithmetic is checked for overflow before it is trusted.
 */
#include "daemon/validate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "daemon/backend.h"
#include "gemmd.h"

/* Largest m, n or k accepted: fits the kernels' 32-bit sizes and the plan's
 * 16-bit chunk counts. */
#define MAX_DIM ((int64_t)INT32_MAX)
#define MAX_K ((int64_t)UINT16_MAX * SCHED_KCHUNK)

struct operand_shape {
        const char *name;    /* as the client named it: "A", "B", "C" */
        const char *ldname;  /* "lda", "ldb", "ldc" */
        const Gemmd__V1__Operand *in;
        int64_t rows, cols, ld;
};

static int fail(char *msg, size_t len, int code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int fail(char *msg, size_t len, int code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
        return code;
}

/* Bytes a column-major rows x cols matrix with leading dimension ld spans:
 * ((cols - 1) * ld + rows) * esz. Returns 0 or GEMMD_EOVERFLOW. */
static int span_bytes(int64_t rows, int64_t cols, int64_t ld, size_t esz, uint64_t *out)
{
        uint64_t v;

        if (__builtin_mul_overflow((uint64_t)(cols - 1), (uint64_t)ld, &v) ||
            __builtin_add_overflow(v, (uint64_t)rows, &v) ||
            __builtin_mul_overflow(v, (uint64_t)esz, &v))
                return GEMMD_EOVERFLOW;
        *out = v;
        return 0;
}

void op_release(struct op *o)
{
        for (int i = 0; i < 3; i++) {
                gbuf_unref(o->buf[i]);
                o->buf[i] = NULL;
        }
}

/* Resolves one operand to a buffer reference and an offset. */
static int resolve(const struct operand_shape *sh, int is_c, double beta, size_t esz,
                   const struct gbuf_table *t, struct op *out, int idx, struct inline_tally *tally,
                   uint64_t max_inline, char *msg, size_t len)
{
        const Gemmd__V1__Operand *in = sh->in;
        uint64_t span, end;
        struct gbuf *b;
        int rc;

        if (sh->ld < 1 || sh->ld < sh->rows)
                return fail(msg, len, GEMMD_EINVAL, "%s (%lld) is smaller than the rows of %s as stored (%lld)",
                            sh->ldname, (long long)sh->ld, sh->name, (long long)sh->rows);
        rc = span_bytes(sh->rows, sh->cols, sh->ld, esz, &span);
        if (rc)
                return fail(msg, len, rc, "%s: size overflows", sh->name);
        out->span[idx] = span;

        if (in && in->buffer_id != 0) {
                b = gbuf_table_find(t, in->buffer_id);
                if (!b)
                        return fail(msg, len, GEMMD_ENOBUF, "%s: no buffer %llu in this session",
                                    sh->name, (unsigned long long)in->buffer_id);
                if (in->offset % esz)
                        return fail(msg, len, GEMMD_EINVAL, "%s: offset %llu is not a multiple of the element size %zu",
                                    sh->name, (unsigned long long)in->offset, esz);
                if (__builtin_add_overflow(in->offset, span, &end))
                        return fail(msg, len, GEMMD_EOVERFLOW, "%s: offset + size overflows", sh->name);
                if (end > b->bytes)
                        return fail(msg, len, GEMMD_EBOUNDS,
                                    "%s: bytes [%llu, %llu) reach past the end of buffer %llu (%llu bytes)",
                                    sh->name, (unsigned long long)in->offset,
                                    (unsigned long long)end, (unsigned long long)b->id,
                                    (unsigned long long)b->bytes);
                gbuf_ref(b);
                out->buf[idx] = b;
                out->off[idx] = in->offset;
                return 0;
        }

        /* Inline operand. */
        size_t have = in ? in->data.len : 0;

        if (is_c) {
                if (have == 0 && beta != 0.0)
                        return fail(msg, len, GEMMD_EINVAL, "C: beta is not 0 but no C was sent");
        } else if (have == 0) {
                return fail(msg, len, GEMMD_EINVAL, "%s: no buffer and no inline data", sh->name);
        }
        if (have != 0 && have < span)
                return fail(msg, len, GEMMD_EBOUNDS, "%s: %zu inline bytes, the op reads %llu",
                            sh->name, have, (unsigned long long)span);
        /* An inline C counts once: its result replaces its input. Checked
         * before allocating: an output C sent without data costs nothing on
         * the wire, whatever its size. */
        if (tally->bytes > max_inline || span > max_inline - tally->bytes)
                return fail(msg, len, GEMMD_ELIMIT, "inline operands exceed %llu bytes",
                            (unsigned long long)max_inline);
        tally->bytes += span;
        /* Within max_inline (at most 2^30): no overflow. */
        tally->held += is_c ? 2 * span : span;
        if (tally->held > tally->room)
                return fail(msg, len, GEMMD_EBUSY, "inline operands over the byte budget");
        rc = gbuf_new_inline(span, have ? in->data.data : NULL, &b);
        if (rc)
                return fail(msg, len, GEMMD_ERESOURCE, "%s: the daemon is out of memory for %llu inline bytes",
                            sh->name, (unsigned long long)span);
        out->buf[idx] = b;
        out->off[idx] = 0;
        return 0;
}

static int ranges_overlap(const struct op *o, int i, int j)
{
        if (o->buf[i] != o->buf[j])
                return 0;
        return o->off[i] < o->off[j] + o->span[j] && o->off[j] < o->off[i] + o->span[i];
}

/* Refuses an op whose operand lives in the memory of a device that does
 * not run its dtype: it could run nowhere else. */
static int check_device_dtype(const struct op *o, unsigned dtype, const struct dtype_caps *caps,
                              char *msg, size_t len)
{
        static const char *const names[3] = {"A", "B", "C"};

        for (int i = 0; i < 3; i++) {
                const struct gbuf *b = o->buf[i];

                if (!b || b->kind != GBUF_CUDA || b->device < 0 || b->device >= caps->ndev)
                        continue;
                if (!(caps->dev[b->device] & BACKEND_DTYPE(dtype)))
                        return fail(msg, len, GEMMD_EUNSUPPORTED,
                                    "%s is not supported by device %d, where %s lives",
                                    dtype_name(dtype), b->device, names[i]);
        }
        return 0;
}

int validate_op(const Gemmd__V1__Op *in, const struct gbuf_table *t, const struct limits *lim,
                const struct dtype_caps *caps, struct op *out, struct inline_tally *tally,
                char *msg, size_t len)
{
        struct operand_shape sh[3];
        int64_t m = in->m, n = in->n, k = in->k;
        int syr2k = in->kind == GEMMD__V1__OP_KIND__SYR2K;
        int row = in->row_major;
        int ta = in->trans_a, tb = in->trans_b, uplo = in->uplo;
        int f64 = in->dtype == GEMMD__V1__DTYPE__F64;
        double beta = f64 ? in->beta_f64 : in->beta;
        size_t esz;
        int rc;

        memset(out, 0, sizeof(*out));
        if ((unsigned)in->kind > 1)
                return fail(msg, len, GEMMD_EINVAL, "unknown op kind %d", (int)in->kind);
        esz = gemmd_dtype_size((enum gemmd_dtype)in->dtype);
        if ((unsigned)in->dtype > 3 || !esz)
                return fail(msg, len, GEMMD_EINVAL, "unknown dtype %d", (int)in->dtype);
        if (!(caps->any & BACKEND_DTYPE(in->dtype)))
                return fail(msg, len, GEMMD_EUNSUPPORTED, "%s is not supported by this daemon's devices",
                            dtype_name(in->dtype));
        if ((unsigned)ta > 1 || (unsigned)tb > 1)
                return fail(msg, len, GEMMD_EINVAL, "op must be n or t");
        if ((unsigned)uplo > 1)
                return fail(msg, len, GEMMD_EINVAL, "uplo must be lower or upper");
        if (syr2k)
                m = n;
        if (m < 1 || n < 1 || k < 1)
                return fail(msg, len, GEMMD_EINVAL, "sizes must be at least 1 (m=%lld n=%lld k=%lld)",
                            (long long)m, (long long)n, (long long)k);
        if (m > MAX_DIM || n > MAX_DIM || k > MAX_K)
                return fail(msg, len, GEMMD_EOVERFLOW, "sizes too large (m=%lld n=%lld k=%lld; k at most %lld)",
                            (long long)m, (long long)n, (long long)k, (long long)MAX_K);

        sh[0] = (struct operand_shape){"A", "lda", in->a, 0, 0, in->lda};
        sh[1] = (struct operand_shape){"B", "ldb", in->b, 0, 0, in->ldb};
        sh[2] = (struct operand_shape){"C", "ldc", in->c, 0, 0, in->ldc};

        if (!syr2k) {
                int64_t M = m, N = n;

                if (row) {
                        /* C^T = op(B)^T op(A)^T in column-major terms. */
                        struct operand_shape tmp = sh[0];
                        int tt = ta;

                        sh[0] = sh[1];
                        sh[1] = tmp;
                        ta = tb;
                        tb = tt;
                        M = n;
                        N = m;
                }
                sh[0].rows = ta ? k : M;
                sh[0].cols = ta ? M : k;
                sh[1].rows = tb ? N : k;
                sh[1].cols = tb ? k : N;
                sh[2].rows = M;
                sh[2].cols = N;
                m = M;
                n = N;
        } else {
                if (row) {
                        ta ^= 1;
                        uplo ^= 1;
                }
                tb = ta;
                sh[0].rows = sh[1].rows = ta ? k : n;
                sh[0].cols = sh[1].cols = ta ? n : k;
                sh[2].rows = sh[2].cols = n;
        }
        for (int i = 0; i < 3; i++) {
                rc = resolve(&sh[i], i == 2, beta, esz, t, out, i, tally,
                             lim->max_inline_bytes, msg, len);
                if (rc)
                        goto err;
        }
        rc = check_device_dtype(out, in->dtype, caps, msg, len);
        if (rc)
                goto err;
        if (ranges_overlap(out, 2, 0) || ranges_overlap(out, 2, 1)) {
                rc = fail(msg, len, GEMMD_EINVAL, "C overlaps an input operand");
                goto err;
        }
        if (tally->bytes > lim->max_inline_bytes) {
                rc = fail(msg, len, GEMMD_ELIMIT, "inline operands exceed %llu bytes",
                          (unsigned long long)lim->max_inline_bytes);
                goto err;
        }

        out->kp.a = gbuf_addr(out->buf[0]) + out->off[0];
        out->kp.b = gbuf_addr(out->buf[1]) + out->off[1];
        out->kp.c = gbuf_addr(out->buf[2]) + out->off[2];
        out->kp.lda = sh[0].ld;
        out->kp.ldb = sh[1].ld;
        out->kp.ldc = sh[2].ld;
        out->kp.m = (uint32_t)m;
        out->kp.n = (uint32_t)n;
        out->kp.k = (uint32_t)k;
        /* The f64 kernels read the scalars as sent, the others as float. */
        out->kp.alpha_f64 = f64 ? in->alpha_f64 : in->alpha;
        out->kp.beta_f64 = beta;
        out->kp.alpha = (float)out->kp.alpha_f64;
        out->kp.beta = (float)beta;
        out->kp.kind = syr2k ? SCHED_SYR2K : SCHED_GEMM;
        out->kp.dtype = (uint8_t)in->dtype;
        out->kp.trans_a = (uint8_t)ta;
        out->kp.trans_b = (uint8_t)tb;
        out->kp.uplo = (uint8_t)uplo;
        out->kp.tf32 = in->allow_tf32 && in->dtype == GEMMD__V1__DTYPE__F32;
        out->sp.kind = out->kp.kind;
        out->sp.dtype = out->kp.dtype;
        out->sp.uplo = out->kp.uplo;
        out->sp.tf32 = out->kp.tf32;
        out->sp.m = out->kp.m;
        out->sp.n = out->kp.n;
        out->sp.k = out->kp.k;
        out->bytes = out->span[0] + out->span[1] + out->span[2];
        if (in->debug_fault) {
#ifdef GEMMD_FAULT_INJECTION
                out->debug_fault = 1;
#else
                rc = fail(msg, len, GEMMD_EUNSUPPORTED, "fault injection is not built into this daemon");
                goto err;
#endif
        }
        out->key = op_key(out);
        return 0;
err:
        op_release(out);
        return rc;
}

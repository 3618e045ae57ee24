/*
 * frame.c - length-prefixed frames and the bounded unpacking arena.
 */
#include "proto/frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gemmd.h"

struct frame_chunk {
        struct frame_chunk *next;
        size_t size, used;
        max_align_t data[];
};

int frame_len_decode(const uint8_t hdr[FRAME_HDR_BYTES], uint32_t max, uint32_t *len)
{
        uint32_t v = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
                     (uint32_t)hdr[3] << 24;

        if (v > max)
                return GEMMD_ETOOBIG;
        *len = v;
        return 0;
}

int frame_pack(const Gemmd__V1__Envelope *env, size_t front, uint32_t max, uint8_t **out,
               size_t *n)
{
        size_t body = gemmd__v1__envelope__get_packed_size(env);
        uint8_t *buf, *p;

        if (body > max)
                return GEMMD_ETOOBIG;
        buf = malloc(front + FRAME_HDR_BYTES + body);
        if (!buf)
                return -ENOMEM;
        p = buf + front;
        p[0] = body & 0xff;
        p[1] = (body >> 8) & 0xff;
        p[2] = (body >> 16) & 0xff;
        p[3] = (body >> 24) & 0xff;
        if (gemmd__v1__envelope__pack(env, p + FRAME_HDR_BYTES) != body) {
                /* protobuf-c promises equal sizes; a mismatch is a bug. */
                free(buf);
                return GEMMD_EPROTO;
        }
        *out = buf;
        *n = FRAME_HDR_BYTES + body;
        return 0;
}

/* The chunk size of small messages, the one chunk a reset arena keeps. */
#define ARENA_CHUNK 16384

static size_t arena_round(size_t size)
{
        return (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
}

/* Counts `size` bytes against the arena's bound. Returns 0, or -1 (and
 * marks the arena exhausted) past the bound. */
static int arena_charge(struct frame_arena *a, size_t size)
{
        size_t need = arena_round(size);

        if (need < size || a->used + need > a->cap || a->used + need < a->used) {
                a->exhausted = 1;
                return -1;
        }
        a->used += need;
        return 0;
}

static void *arena_alloc(void *data, size_t size)
{
        struct frame_arena *a = data;
        struct frame_chunk *c = a->chunks;
        size_t need = arena_round(size);
        size_t csize;
        void *p;

        if (arena_charge(a, size))
                return NULL;
        if (!c || c->size - c->used < need) {
                csize = need > ARENA_CHUNK ? need : ARENA_CHUNK;
                c = malloc(sizeof(*c) + csize);
                if (!c) {
                        a->used -= need;
                        a->exhausted = 1;
                        return NULL;
                }
                c->size = csize;
                c->used = 0;
                c->next = a->chunks;
                a->chunks = c;
        }
        p = (char *)c->data + c->used;
        c->used += need;
        return p;
}

static void arena_free(void *data, void *ptr)
{
        /* Released all at once by frame_arena_reset. */
}

void frame_arena_init(struct frame_arena *a, size_t cap)
{
        memset(a, 0, sizeof(*a));
        a->alloc.alloc = arena_alloc;
        a->alloc.free = arena_free;
        a->alloc.allocator_data = a;
        a->cap = cap;
}

void frame_arena_reset(struct frame_arena *a)
{
        struct frame_chunk *c = a->chunks, *next, *keep = NULL;

        /* One small chunk stays for the next message; the rest, and a
         * large message's chunks in particular, go back to the system,
         * or every idle session would keep the largest message it once
         * sent. */
        for (; c; c = next) {
                next = c->next;
                if (!keep && c->size == ARENA_CHUNK) {
                        keep = c;
                        keep->next = NULL;
                        keep->used = 0;
                } else {
                        free(c);
                }
        }
        a->chunks = keep;
        a->used = 0;
        a->exhausted = 0;
        a->wide_message = a->wide_field = NULL;
}

void frame_arena_deinit(struct frame_arena *a)
{
        struct frame_chunk *c = a->chunks, *next;

        if (!a)
                return;
        for (; c; c = next) {
                next = c->next;
                free(c);
        }
        a->chunks = NULL;
}

/* ---- the request path without protobuf-c's generic walk ----------------
 *
 * A Submit is nearly every message a busy daemon reads, and a Completion
 * nearly every one it writes; protobuf-c's reflective unpack and its
 * size-then-pack walk cost more than the rest of a request's handling. The
 * decoder below accepts only plainly encoded Submits (every field once, in
 * its own wire type, no unknown fields, short tags and lengths)
 * and builds exactly the structs protobuf-c would; anything else goes to
 * protobuf-c, which stays the reference. The encoder writes the bytes
 * protobuf-c would write. */

/* Most bytes protobuf-c can allocate per byte of input, with margin: per
 * field of at least 2 wire bytes, its message struct, its share of the
 * scanned-member slabs, a pointer in a repeated array and arena rounding. */
#define UNPACK_BYTES_PER_BYTE 256
_Static_assert(sizeof(Gemmd__V1__Op) <= 256 && sizeof(Gemmd__V1__Envelope) <= 256 &&
                       sizeof(Gemmd__V1__HelloReply) <= 256 && sizeof(Gemmd__V1__Limits) <= 256,
               "UNPACK_BYTES_PER_BYTE assumes small messages");

struct rd {
        const uint8_t *p, *end;
};

/* A varint of at most `max` bytes. For 10 bytes, the last may only carry
 * bit 63. Returns 0, or -1 for anything else. */
static inline int rd_varint(struct rd *r, int max, uint64_t *v)
{
        uint64_t x = 0;

        /* Most fields of a Submit are small: one byte. */
        if (r->p < r->end && *r->p < 0x80) {
                *v = *r->p++;
                return 0;
        }
        for (int i = 0; i < max && r->p < r->end; i++) {
                uint8_t b = *r->p++;

                if (i == 9 && b > 1)
                        return -1;
                x |= (uint64_t)(b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        *v = x;
                        return 0;
                }
        }
        return -1;
}

/* A tag: its field number and wire type. Tags of fields up to 2047 only. */
static int rd_tag(struct rd *r, uint32_t *field, int *wt)
{
        uint64_t v;

        if (rd_varint(r, 2, &v) || (v >> 3) == 0)
                return -1;
        *field = (uint32_t)(v >> 3);
        *wt = (int)(v & 7);
        return 0;
}

/* A length-delimited field's body, which must fit in what is left. */
static int rd_len(struct rd *r, struct rd *body)
{
        uint64_t n;

        if (rd_varint(r, 5, &n) || n > (uint64_t)(r->end - r->p))
                return -1;
        body->p = r->p;
        body->end = r->p + n;
        r->p += n;
        return 0;
}

/* A varint for a 32-bit field: one that protobuf-c reads the same for
 * enums, uint32 and bool alike (below 2^31; bools 0 or 1). */
static int rd_small(struct rd *r, int wt, uint32_t lim, uint32_t *out)
{
        uint64_t v;

        if (wt != 0 || rd_varint(r, 5, &v) || v > lim)
                return -1;
        *out = (uint32_t)v;
        return 0;
}

static int rd_u64(struct rd *r, int wt, uint64_t *out)
{
        return wt != 0 ? -1 : rd_varint(r, 10, out);
}

/* Marks field f seen; a second sighting returns -1 (protobuf-c merges or
 * overwrites repeated singular fields: left to it). */
static int once(uint32_t *seen, uint32_t f)
{
        if (*seen & (1u << f))
                return -1;
        *seen |= 1u << f;
        return 0;
}

static int dec_operand(struct frame_arena *a, struct rd r, Gemmd__V1__Operand **out)
{
        Gemmd__V1__Operand *o = arena_alloc(a, sizeof(*o));
        uint32_t seen = 0, f;
        int wt;

        if (!o)
                return -1;
        gemmd__v1__operand__init(o);
        while (r.p < r.end) {
                if (rd_tag(&r, &f, &wt) || f > 3 || once(&seen, f))
                        return -1;
                switch (f) {
                case 1:
                        if (rd_u64(&r, wt, &o->buffer_id))
                                return -1;
                        break;
                case 2:
                        if (rd_u64(&r, wt, &o->offset))
                                return -1;
                        break;
                case 3: {
                        struct rd b;

                        if (wt != 2 || rd_len(&r, &b))
                                return -1;
                        o->data.len = (size_t)(b.end - b.p);
                        /* Inline operands are not copied: they point into
                         * the frame (see frame_unpack). The arena is charged
                         * for them all the same, so that it bounds a message
                         * exactly as protobuf-c's decoding would. */
                        if (o->data.len) {
                                if (arena_charge(a, o->data.len))
                                        return -1;
                                o->data.data = (uint8_t *)b.p;
                        }
                        break;
                }
                default:
                        return -1;
                }
        }
        *out = o;
        return 0;
}

static int dec_op(struct frame_arena *a, struct rd r, Gemmd__V1__Op **out)
{
        Gemmd__V1__Op *op = arena_alloc(a, sizeof(*op));
        uint32_t seen = 0, f, u;
        uint64_t v;
        int wt;

        if (!op)
                return -1;
        gemmd__v1__op__init(op);
        while (r.p < r.end) {
                if (rd_tag(&r, &f, &wt) || f > 21 || once(&seen, f))
                        return -1;
                if (f <= 7) {
                        if (rd_small(&r, wt, f <= 5 ? INT32_MAX : 1, &u))
                                return -1;
                        switch (f) {
                        case 1: op->kind = (Gemmd__V1__OpKind)u; break;
                        case 2: op->dtype = (Gemmd__V1__DType)u; break;
                        case 3: op->trans_a = (Gemmd__V1__Trans)u; break;
                        case 4: op->trans_b = (Gemmd__V1__Trans)u; break;
                        case 5: op->uplo = (Gemmd__V1__Uplo)u; break;
                        case 6: op->row_major = (protobuf_c_boolean)u; break;
                        default: op->allow_tf32 = (protobuf_c_boolean)u; break;
                        }
                } else if (f <= 13) {
                        int64_t *dst[] = {&op->m, &op->n, &op->k, &op->lda, &op->ldb, &op->ldc};

                        if (rd_u64(&r, wt, &v))
                                return -1;
                        *dst[f - 8] = (int64_t)v;
                } else if (f <= 15) {
                        if (wt != 5 || r.end - r.p < 4)
                                return -1;
                        memcpy(f == 14 ? &op->alpha : &op->beta, r.p, 4);
                        r.p += 4;
                } else if (f <= 18) {
                        Gemmd__V1__Operand **dst = f == 16 ? &op->a : f == 17 ? &op->b : &op->c;
                        struct rd b;

                        if (wt != 2 || rd_len(&r, &b) || dec_operand(a, b, dst))
                                return -1;
                } else if (f == 19) {
                        if (rd_small(&r, wt, 1, &u))
                                return -1;
                        op->debug_fault = (protobuf_c_boolean)u;
                } else {
                        /* alpha_f64, beta_f64: an f64 op's scalars. */
                        if (wt != 1 || r.end - r.p < 8)
                                return -1;
                        memcpy(f == 20 ? &op->alpha_f64 : &op->beta_f64, r.p, 8);
                        r.p += 8;
                }
        }
        *out = op;
        return 0;
}

static int dec_submit(struct frame_arena *a, struct rd r, Gemmd__V1__Submit **out)
{
        Gemmd__V1__Submit *m = arena_alloc(a, sizeof(*m));
        struct rd scan = r;
        uint32_t seen = 0, f, u;
        size_t nops = 0;
        int wt;

        if (!m)
                return -1;
        gemmd__v1__submit__init(m);
        /* protobuf-c sizes the ops array exactly: count them first. */
        while (scan.p < scan.end) {
                struct rd b;
                uint64_t v;

                if (rd_tag(&scan, &f, &wt))
                        return -1;
                if (f == 1 && wt == 2) {
                        if (rd_len(&scan, &b))
                                return -1;
                        nops++;
                } else if (f >= 2 && f <= 4 && wt == 0) {
                        if (rd_varint(&scan, 5, &v))
                                return -1;
                } else {
                        return -1;
                }
        }
        if (nops) {
                m->ops = arena_alloc(a, nops * sizeof(*m->ops));
                if (!m->ops)
                        return -1;
        }
        while (r.p < r.end) {
                struct rd b;

                if (rd_tag(&r, &f, &wt))
                        return -1;
                if (f == 1) {
                        if (rd_len(&r, &b) || dec_op(a, b, &m->ops[m->n_ops]))
                                return -1;
                        m->n_ops++;
                } else if (f == 2) {
                        if (once(&seen, f) || rd_small(&r, wt, INT32_MAX, &m->priority))
                                return -1;
                } else if (f == 3) {
                        if (once(&seen, f) || rd_small(&r, wt, 1, &u))
                                return -1;
                        m->notify_launch = (protobuf_c_boolean)u;
                } else {
                        if (once(&seen, f) || rd_small(&r, wt, UINT32_MAX, &m->word))
                                return -1;
                }
        }
        *out = m;
        return 0;
}

/* An Envelope carrying a Submit, or NULL for protobuf-c to decode. */
static Gemmd__V1__Envelope *fast_unpack(struct frame_arena *a, const uint8_t *buf, size_t len)
{
        struct rd r = {buf, buf + len};
        Gemmd__V1__Envelope *env;
        uint32_t seen = 0, f;
        int wt;

        /* Only where protobuf-c could not run out of arena either: the
         * arena's verdict on a large message stays protobuf-c's. */
        if (a->cap < a->used + 4096 || len > (a->cap - a->used - 4096) / UNPACK_BYTES_PER_BYTE)
                return NULL;
        env = arena_alloc(a, sizeof(*env));
        if (!env)
                return NULL;
        gemmd__v1__envelope__init(env);
        while (r.p < r.end) {
                struct rd b;

                if (rd_tag(&r, &f, &wt))
                        return NULL;
                if (f == 1) {
                        if (once(&seen, 1) || rd_u64(&r, wt, &env->request_id))
                                return NULL;
                } else if (f == 16 && wt == 2) {
                        if (once(&seen, 16) || rd_len(&r, &b) || dec_submit(a, b, &env->submit))
                                return NULL;
                        env->body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
                } else {
                        return NULL;
                }
        }
        return env->body_case == GEMMD__V1__ENVELOPE__BODY_SUBMIT ? env : NULL;
}

Gemmd__V1__Envelope *frame_unpack(struct frame_arena *a, const uint8_t *buf, size_t len)
{
        Gemmd__V1__Envelope *env;

        frame_arena_reset(a);
        env = fast_unpack(a, buf, len);
        if (env)
                return env;
        frame_arena_reset(a);
        env = gemmd__v1__envelope__unpack(&a->alloc, len, buf);
        /* After protobuf-c, so that its verdict on the arena stands; the
         * plain Submits above never get here (rd_small checks their
         * fields), so the walk costs the request path nothing. */
        if (env && frame_check_widths(&gemmd__v1__envelope__descriptor, buf, len,
                                      &a->wide_message, &a->wide_field))
                return NULL;
        return env;
}

/* ---- 32-bit fields given more than 32 bits ----------------------------
 *
 * protobuf-c keeps the low 32 bits of a varint read into a 32-bit field,
 * so a trans_b of 2^32 + 1 would read as 1 and pass every check of the
 * field. The wire bytes are walked again with the message descriptors,
 * after protobuf-c has accepted them, and such a message is refused. */

/* Nesting of messages that the walk follows: gemmd.v1's is at most 4 deep
 * (Envelope, Submit, Op, Operand) and none contains itself. */
#define WIDTH_MAX_DEPTH 16

enum width { W_ANY, W_U32, W_I32 };

/* What a varint of field f must fit in. */
static enum width width_of(const ProtobufCFieldDescriptor *f)
{
        switch (f->type) {
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_SINT32: /* zigzag: 32 bits on the wire */
        case PROTOBUF_C_TYPE_BOOL:
                return W_U32;
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_ENUM:
                return W_I32;
        default:
                return W_ANY;
        }
}

/* A varint of up to 10 bytes, as protobuf-c reads one; *over is set when
 * its tenth byte carries bits past the 64th. Returns 0, or -1 when the
 * bytes end first or run past 10. */
static int wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v, int *over)
{
        uint64_t x = 0;

        *over = 0;
        for (int i = 0; i < 10 && *p < end; i++) {
                uint8_t b = *(*p)++;

                x |= (uint64_t)(b & 0x7f) << (7 * i);
                if (i == 9 && (b & 0x7f) > 1)
                        *over = 1;
                if (!(b & 0x80)) {
                        *v = x;
                        return 0;
                }
        }
        return -1;
}

/* Whether varint v (with *over from wire_varint) fits width w. A negative
 * int32 or enum is written as its 64-bit sign extension, so exactly those
 * values above INT32_MAX are accepted for them. */
static int width_fits(enum width w, uint64_t v, int over)
{
        if (w == W_ANY)
                return 1;
        if (over)
                return 0;
        if (w == W_U32)
                return v <= UINT32_MAX;
        return v <= INT32_MAX || v >= 0xffffffff80000000ull;
}

/* The walk of frame_check_widths over one message's bytes [p, end). */
static int check_widths(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                        int depth, const char **message, const char **field)
{
        const ProtobufCFieldDescriptor *f;

        while (p < end) {
                uint64_t tag, v;
                int over;

                if (wire_varint(&p, end, &tag, &over) || over)
                        return -1;
                f = NULL;
                if (tag >> 3 <= UINT32_MAX)
                        f = protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3));
                switch (tag & 7) {
                case 0:
                        if (wire_varint(&p, end, &v, &over))
                                return -1;
                        if (f && !width_fits(width_of(f), v, over))
                                goto wide;
                        break;
                case 1:
                case 5:
                        v = (tag & 7) == 1 ? 8 : 4;
                        if ((uint64_t)(end - p) < v)
                                return -1;
                        p += v;
                        break;
                case 2: {
                        const uint8_t *q, *q_end;

                        if (wire_varint(&p, end, &v, &over) || over || v > (uint64_t)(end - p))
                                return -1;
                        q = p;
                        q_end = p + v;
                        p = q_end;
                        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                                if (depth >= WIDTH_MAX_DEPTH ||
                                    check_widths(f->descriptor, q, q_end, depth + 1, message, field))
                                        return -1;
                                break;
                        }
                        /* A packed repeated field: varints back to back.
                         * (protobuf-c reads a bool sent length-delimited as
                         * true when any of its bytes is non-zero: not a
                         * truncation, and left to it.) */
                        while (f && f->label == PROTOBUF_C_LABEL_REPEATED &&
                               width_of(f) != W_ANY && q < q_end) {
                                if (wire_varint(&q, q_end, &v, &over))
                                        return -1;
                                if (!width_fits(width_of(f), v, over))
                                        goto wide;
                        }
                        break;
                }
                default:
                        return -1; /* groups: protobuf-c refuses them too */
                }
        }
        return 0;
wide:
        if (message)
                *message = d->short_name;
        if (field)
                *field = f->name;
        return -1;
}

int frame_check_widths(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                       const char **message, const char **field)
{
        if (message)
                *message = NULL;
        if (field)
                *field = NULL;
        return check_widths(desc, buf, buf + len, 0, message, field);
}

/* ---- Completion encoding ----------------------------------------------- */

static size_t varint_size(uint64_t v)
{
        size_t n = 1;

        while (v >= 0x80) {
                v >>= 7;
                n++;
        }
        return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
        while (v >= 0x80) {
                *p++ = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        *p++ = (uint8_t)v;
        return p;
}

/* An enum as protobuf-c writes an int32: negatives take 10 bytes. */
static uint64_t enum_wire(int32_t v)
{
        return (uint64_t)(int64_t)v;
}

/* protobuf-c leaves out proto3 fields that are 0, NULL or empty. */
static size_t result_size(const Gemmd__V1__OpResult *r)
{
        size_t n = 0, l;

        if (r->status)
                n += 1 + varint_size(enum_wire(r->status));
        if (r->message && (l = strlen(r->message)))
                n += 1 + varint_size(l) + l;
        if (r->c_data.len)
                n += 1 + varint_size(r->c_data.len) + r->c_data.len;
        if (r->queue_us)
                n += 1 + varint_size(r->queue_us);
        if (r->run_us)
                n += 1 + varint_size(r->run_us);
        if (r->group_id)
                n += 1 + varint_size(r->group_id);
        if (r->group_size)
                n += 1 + varint_size(r->group_size);
        if (r->kernel && (l = strlen(r->kernel)))
                n += 1 + varint_size(l) + l;
        if (r->admit_ns)
                n += 1 + varint_size(r->admit_ns);
        if (r->reply_ns)
                n += 1 + varint_size(r->reply_ns);
        return n;
}

static uint8_t *put_bytes(uint8_t *p, uint8_t tag, const void *data, size_t len)
{
        *p++ = tag;
        p = put_varint(p, len);
        memcpy(p, data, len);
        return p + len;
}

static uint8_t *put_result(uint8_t *p, const Gemmd__V1__OpResult *r, size_t size)
{
        size_t l;

        *p++ = 0x0a; /* Completion.results, length-delimited */
        p = put_varint(p, size);
        if (r->status) {
                *p++ = 0x08;
                p = put_varint(p, enum_wire(r->status));
        }
        if (r->message && (l = strlen(r->message)))
                p = put_bytes(p, 0x12, r->message, l);
        if (r->c_data.len)
                p = put_bytes(p, 0x1a, r->c_data.data, r->c_data.len);
        if (r->queue_us) {
                *p++ = 0x20;
                p = put_varint(p, r->queue_us);
        }
        if (r->run_us) {
                *p++ = 0x28;
                p = put_varint(p, r->run_us);
        }
        if (r->group_id) {
                *p++ = 0x30;
                p = put_varint(p, r->group_id);
        }
        if (r->group_size) {
                *p++ = 0x38;
                p = put_varint(p, r->group_size);
        }
        if (r->kernel && (l = strlen(r->kernel)))
                p = put_bytes(p, 0x42, r->kernel, l);
        if (r->admit_ns) {
                *p++ = 0x48;
                p = put_varint(p, r->admit_ns);
        }
        if (r->reply_ns) {
                *p++ = 0x50;
                p = put_varint(p, r->reply_ns);
        }
        return p;
}

/* The sizes of a Completion envelope's results (sizes[i]), of the
 * Completion (*comp) and of the whole envelope, which it returns. */
static size_t completion_sizes(uint64_t request_id, const Gemmd__V1__OpResult *res, size_t nres,
                               size_t *sizes, size_t *comp)
{
        *comp = 0;
        for (size_t i = 0; i < nres; i++) {
                sizes[i] = result_size(&res[i]);
                *comp += 1 + varint_size(sizes[i]) + sizes[i];
        }
        /* Envelope: request_id (1), then completion (17: a 2-byte tag). */
        return (request_id ? 1 + varint_size(request_id) : 0) + 2 + varint_size(*comp) + *comp;
}

/* Writes the envelope that completion_sizes measured at p; returns its end. */
static uint8_t *put_completion(uint8_t *p, uint64_t request_id, const Gemmd__V1__OpResult *res,
                               size_t nres, const size_t *sizes, size_t comp)
{
        if (request_id) {
                *p++ = 0x08;
                p = put_varint(p, request_id);
        }
        *p++ = 0x8a;
        *p++ = 0x01;
        p = put_varint(p, comp);
        for (size_t i = 0; i < nres; i++)
                p = put_result(p, &res[i], sizes[i]);
        return p;
}

/* Packs the envelope at dst (cap bytes) or into a new allocation with
 * `front` bytes and a frame header before it (dst NULL). */
static int pack_completion(uint64_t request_id, const Gemmd__V1__OpResult *res, size_t nres,
                           uint8_t *dst, size_t cap, size_t front, uint8_t **out, size_t *n)
{
        size_t small[64], *sizes = small, comp, body;
        uint8_t *buf, *p;
        int rc = 0;

        if (nres > sizeof(small) / sizeof(small[0])) {
                sizes = malloc(nres * sizeof(*sizes));
                if (!sizes)
                        return -ENOMEM;
        }
        body = completion_sizes(request_id, res, nres, sizes, &comp);
        if (body > cap) {
                rc = GEMMD_ETOOBIG;
                goto out;
        }
        buf = dst ? dst : malloc(front + FRAME_HDR_BYTES + body);
        if (!buf) {
                rc = -ENOMEM;
                goto out;
        }
        p = buf;
        if (!dst) {
                p += front;
                p[0] = body & 0xff;
                p[1] = (body >> 8) & 0xff;
                p[2] = (body >> 16) & 0xff;
                p[3] = (body >> 24) & 0xff;
                p += FRAME_HDR_BYTES;
        }
        if (put_completion(p, request_id, res, nres, sizes, comp) != p + body) {
                /* A bug: the sizes above and the writes disagree. */
                if (!dst)
                        free(buf);
                rc = GEMMD_EPROTO;
                goto out;
        }
        if (!dst)
                *out = buf;
        *n = dst ? body : FRAME_HDR_BYTES + body;
out:
        if (sizes != small)
                free(sizes);
        return rc;
}

int frame_pack_completion(uint64_t request_id, const Gemmd__V1__OpResult *res, size_t nres,
                          size_t front, uint32_t max, uint8_t **out, size_t *n)
{
        return pack_completion(request_id, res, nres, NULL, max, front, out, n);
}

int frame_pack_completion_body(uint64_t request_id, const Gemmd__V1__OpResult *res, size_t nres,
                               uint8_t *dst, size_t cap, size_t *n)
{
        return pack_completion(request_id, res, nres, dst, cap, 0, NULL, n);
}

int frame_code_to_err(int code)
{
        return code == 0 ? 0 : GEMMD_EBASE - code;
}

int frame_err_to_code(int err)
{
        if (err == 0)
                return 0;
        if (err <= GEMMD_EBASE - 1 && err >= GEMMD_ELAST)
                return GEMMD_EBASE - err;
        /* Out of memory, descriptors or mappings is the daemon's state,
         * not the device's; any other system error inside the daemon
         * surfaces as a device failure. */
        if (err == -ENOMEM || err == -EMFILE || err == -ENFILE || err == -EAGAIN)
                return GEMMD__V1__CODE__RESOURCE;
        return GEMMD__V1__CODE__DEVICE;
}

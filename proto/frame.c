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

static void *arena_alloc(void *data, size_t size)
{
        struct frame_arena *a = data;
        struct frame_chunk *c = a->chunks;
        size_t need = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
        size_t csize;
        void *p;

        if (need < size || a->used + need > a->cap || a->used + need < a->used) {
                a->exhausted = 1;
                return NULL;
        }
        if (!c || c->size - c->used < need) {
                csize = need > 16384 ? need : 16384;
                c = malloc(sizeof(*c) + csize);
                if (!c) {
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
        a->used += need;
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
        struct frame_chunk *c = a->chunks, *next;

        /* Keep one chunk for the next message; free the rest. */
        if (c) {
                next = c->next;
                c->next = NULL;
                c->used = 0;
                while (next) {
                        struct frame_chunk *n2 = next->next;
                        free(next);
                        next = n2;
                }
        }
        a->used = 0;
        a->exhausted = 0;
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

Gemmd__V1__Envelope *frame_unpack(struct frame_arena *a, const uint8_t *buf, size_t len)
{
        frame_arena_reset(a);
        return gemmd__v1__envelope__unpack(&a->alloc, len, buf);
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
        /* A system error inside the daemon surfaces as a device failure. */
        return GEMMD__V1__CODE__DEVICE;
}

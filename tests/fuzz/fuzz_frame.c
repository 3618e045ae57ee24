/*
 * fuzz_frame.c - libFuzzer target: a byte stream as the daemon reads it
 * from a socket. Frames are cut by frame_len_decode against the limit,
 * each body unpacked by frame_unpack through a bounded arena, and every
 * decoded message handled as far as the daemon and the library would
 * without a socket: a Submit's ops validated against the session's
 * buffers (and checked with fuzz_check_op), the other messages' fields
 * read. Every message that decodes must also pack again and decode to
 * the same bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemmd.h"
#include "proto/frame.h"
#include "tests/fuzz/fuzz_common.h"

#define MAX_FRAME (1u << 20)

static struct frame_arena arena, arena2;
static struct gbuf_table table;
static struct limits lim;
static volatile size_t sink;

static void setup(void)
{
        static const uint64_t sizes[] = {4096, 65536, 1, 3 * 64 * 64 * 4};
        static int done;

        if (done)
                return;
        done = 1;
        fuzz_limits(&lim);
        lim.max_frame_bytes = MAX_FRAME;
        /* As session_accept bounds a session's decoding. */
        frame_arena_init(&arena, 2 * MAX_FRAME + (size_t)lim.max_ops_per_submit * 512);
        frame_arena_init(&arena2, 2 * MAX_FRAME + (size_t)lim.max_ops_per_submit * 512);
        gbuf_table_init(&table);
        fuzz_table_set(&table, sizes, 4);
}

static void read_str(const char *s)
{
        if (s)
                sink += strlen(s);
}

static void read_bytes(ProtobufCBinaryData d)
{
        for (size_t i = 0; i < d.len; i++)
                sink += d.data[i];
}

static void on_submit(const Gemmd__V1__Submit *m)
{
        struct inline_tally tally = {.room = UINT64_MAX};
        /* One device that runs every dtype, as the CPU backend. */
        static const uint32_t dev = 0xf;
        struct dtype_caps caps = {.any = dev, .dev = &dev, .ndev = 1};
        char msg[256];

        /* dispatch.c refuses more ops than the limit before looking. */
        if (m->n_ops > lim.max_ops_per_submit)
                return;
        for (size_t i = 0; i < m->n_ops; i++) {
                struct op o;

                if (validate_op(m->ops[i], &table, &lim, &caps, &o, &tally, msg, sizeof(msg)) != 0) {
                        read_str(msg);
                        break; /* the daemon rejects the whole submit */
                }
                fuzz_check_op(&o);
                op_release(&o);
        }
}

/* What the daemon or the library reads of each message. */
static void handle(const Gemmd__V1__Envelope *e)
{
        switch (e->body_case) {
        case GEMMD__V1__ENVELOPE__BODY_HELLO:
                sink += e->hello->protocol_version;
                read_str(e->hello->client_name);
                break;
        case GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY: {
                const Gemmd__V1__HelloReply *h = e->hello_reply;

                read_str(h->server_version);
                if (h->limits)
                        sink += h->limits->max_frame_bytes + h->limits->max_user_share;
                for (size_t i = 0; i < h->n_devices; i++) {
                        read_str(h->devices[i]->name);
                        read_str(h->devices[i]->backend);
                }
                break;
        }
        case GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER:
                read_bytes(e->buffer_register->ipc_handle);
                sink += e->buffer_register->bytes + e->buffer_register->kind;
                break;
        case GEMMD__V1__ENVELOPE__BODY_SUBMIT:
                on_submit(e->submit);
                break;
        case GEMMD__V1__ENVELOPE__BODY_COMPLETION:
                for (size_t i = 0; i < e->completion->n_results; i++) {
                        const Gemmd__V1__OpResult *r = e->completion->results[i];

                        sink += (size_t)frame_code_to_err(r->status);
                        read_str(r->message);
                        read_str(r->kernel);
                        read_bytes(r->c_data);
                }
                break;
        case GEMMD__V1__ENVELOPE__BODY_ERROR: {
                int code = e->error->code, err = frame_code_to_err(code);

                read_str(e->error->message);
                /* Known codes map both ways. */
                if (code >= 0 && code <= GEMMD_EBASE - GEMMD_ELAST && frame_err_to_code(err) != code)
                        abort();
                break;
        }
        case GEMMD__V1__ENVELOPE__BODY_STATS_REPLY:
                read_str(e->stats_reply->text);
                break;
        default:
                break;
        }
}

/* Whether m or a message inside it kept fields it did not know. */
static int has_unknown(const ProtobufCMessage *m)
{
        const ProtobufCMessageDescriptor *d = m->descriptor;

        if (m->n_unknown_fields)
                return 1;
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                const char *base = (const char *)m + f->offset;

                if (f->type != PROTOBUF_C_TYPE_MESSAGE)
                        continue;
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
                        ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)base;

                        for (size_t j = 0; j < n; j++)
                                if (v[j] && has_unknown(v[j]))
                                        return 1;
                } else {
                        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)base;

                        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
                            *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
                                continue;
                        if (sub && has_unknown(sub))
                                return 1;
                }
        }
        return 0;
}

/* Packs e, unpacks the result and packs that again: the two packings must
 * be equal. Messages that kept unknown fields are exempt: protobuf-c keeps
 * them as they came and may write them back in a form it then refuses (a
 * tag 0 sent as the overlong varint 80 00 comes back as 00), which gemmd
 * never meets because it never packs a message it received. */
static void roundtrip(const Gemmd__V1__Envelope *e)
{
        uint8_t *a, *b;
        size_t na, nb;
        Gemmd__V1__Envelope *e2;

        if (frame_pack(e, 0, UINT32_MAX, &a, &na) != 0)
                abort();
        if (has_unknown(&e->base)) {
                free(a);
                return;
        }
        e2 = frame_unpack(&arena2, a + FRAME_HDR_BYTES, na - FRAME_HDR_BYTES);
        if (!e2) {
                if (arena2.exhausted) {
                        free(a);
                        return;
                }
                fprintf(stderr, "fuzz: a packed message does not decode\n");
                abort();
        }
        if (frame_pack(e2, 0, UINT32_MAX, &b, &nb) != 0)
                abort();
        if (na != nb || memcmp(a, b, na) != 0) {
                fprintf(stderr, "fuzz: packing is not stable (%zu vs %zu bytes)\n", na, nb);
                abort();
        }
        free(a);
        free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        size_t off = 0;

        setup();
        while (size - off >= FRAME_HDR_BYTES) {
                Gemmd__V1__Envelope *env;
                uint8_t *body;
                uint32_t len;

                if (frame_len_decode(data + off, MAX_FRAME, &len) != 0)
                        break; /* the daemon answers TOO_BIG and closes */
                off += FRAME_HDR_BYTES;
                if (len > size - off)
                        break; /* a partial frame: the daemon waits for more */
                /* Exactly the body, so that reading past it is caught. */
                body = malloc(len ? len : 1);
                if (!body)
                        abort();
                memcpy(body, data + off, len);
                env = frame_unpack(&arena, body, len);
                if (env) {
                        handle(env);
                        roundtrip(env);
                }
                free(body);
                off += len;
        }
        return 0;
}

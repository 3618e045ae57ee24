/*
 * frame.h - length-prefixed protobuf frames, shared by daemon and client.
 *
 * A frame is a 4-byte little-endian length followed by one packed
 * gemmd.v1.Envelope. Receivers check the length against their limit before
 * allocating; unpacking goes through a bounded arena so a hostile frame
 * cannot make the receiver allocate without bound.
 */
#ifndef GEMMD_FRAME_H
#define GEMMD_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "proto/gemmd.pb-c.h"

#define FRAME_HDR_BYTES 4u

/* Reads a length prefix. Returns 0 and stores the body length in *len, or
 * GEMMD_ETOOBIG when it exceeds `max`. */
int frame_len_decode(const uint8_t hdr[FRAME_HDR_BYTES], uint32_t max, uint32_t *len);

/* Packs `env` as one frame into a new malloc'd buffer of *n bytes, placed
 * `front` bytes after the start of the allocation (room for a caller's
 * header, such as a write request). *out is the allocation; the caller
 * frees it. Returns 0, -ENOMEM, or GEMMD_ETOOBIG past `max` bytes. */
int frame_pack(const Gemmd__V1__Envelope *env, size_t front, uint32_t max, uint8_t **out,
               size_t *n);

/* Packs an Envelope with `request_id` and a Completion of res[0 .. nres)
 * as frame_pack would, byte for byte, without building the Envelope: the
 * same buffer layout, ownership and return codes. */
int frame_pack_completion(uint64_t request_id, const Gemmd__V1__OpResult *res, size_t nres,
                          size_t front, uint32_t max, uint8_t **out, size_t *n);

/* The same envelope written at dst, without the frame header (a ring's
 * slot): *n is its length. Returns 0, or GEMMD_ETOOBIG (nothing written)
 * when it is longer than cap. */
int frame_pack_completion_body(uint64_t request_id, const Gemmd__V1__OpResult *res, size_t nres,
                               uint8_t *dst, size_t cap, size_t *n);

/* A bump allocator for protobuf-c unpacking, bounded by `cap` bytes in
 * all. Memory is released in one go by frame_arena_reset (which keeps one
 * small chunk for the next message) or frame_arena_deinit. */
struct frame_arena {
        ProtobufCAllocator alloc;
        struct frame_chunk *chunks;
        size_t used; /* bytes handed out since the last reset */
        size_t cap;
        int exhausted; /* an allocation was refused since the last reset */
        /* The last unpack was refused for a 32-bit field given more than
         * 32 bits (frame_check_widths): its message and field names. */
        const char *wide_message, *wide_field;
};

void frame_arena_init(struct frame_arena *a, size_t cap);
void frame_arena_reset(struct frame_arena *a);
void frame_arena_deinit(struct frame_arena *a);

/* Unpacks `len` bytes into an Envelope allocated from the arena (reset
 * first), as protobuf-c would (plain Submits take a shorter path to the
 * same structs, whose inline operand bytes point into buf instead of being
 * copied: buf must outlive the Envelope), except that a 32-bit field given
 * more than 32 bits is refused (frame_check_widths) where protobuf-c would
 * keep the low 32. Returns NULL for malformed input, for such a field (its
 * names in a->wide_message and a->wide_field) or when the arena's cap
 * would be exceeded (a->exhausted). */
Gemmd__V1__Envelope *frame_unpack(struct frame_arena *a, const uint8_t *buf, size_t len);

/* Walks the wire bytes of a message of type `desc` (and of every message
 * inside it) for a varint of a 32-bit field that does not fit: a uint32,
 * bool or sint32 above 2^32 - 1, or an int32 or enum that is neither below
 * 2^31 nor a negative number's 64-bit sign extension. Returns 0; or -1,
 * setting *message and *field (either may be NULL) to the names of the
 * first such field, or to NULL for bytes that do not parse. */
int frame_check_widths(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                       const char **message, const char **field);

/* Maps a gemmd.v1.Code to the library's negative code and back. */
int frame_code_to_err(int code);
int frame_err_to_code(int err);

#endif /* GEMMD_FRAME_H */

/*
 * dispatch.h - the protocol layer: what the daemon does with each decoded
 * message (decode, validate, admit, hand ops to the device side), and the
 * Completion of a finished request packed for the wire.
 */
#ifndef GEMMD_DISPATCH_H
#define GEMMD_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/session.h"
#include "daemon/work.h"

struct wctl;

/* Acts on one frame body (struct session_up's frame); from_ring: it came
 * through the session's submission ring, where only Submit may come. */
void dispatch_frame(struct session *s, const uint8_t *buf, uint32_t len, int from_ring);
/* Answers request rid with Ack. */
void dispatch_ack(struct session *s, uint64_t rid);
/* Loop thread: the protocol's end of request r, taken in from its loop's
 * completion queue: its counts are given back, it is answered if nobody
 * answered it (reply_take), and it is freed. */
void dispatch_completion(struct request *r);
/* The session's struct session_up (the server wires them in): hands the
 * ops its submits admitted (staged on its lanes) to the workers, after a
 * batch of frames; drops what it queued as it closes. */
void dispatch_frames_done(struct session *s);
void dispatch_session_closing(struct session *s);
/* Gives back the user's and the daemon's counts of n ops of s (any thread;
 * the session's own count is its loop's). */
void dispatch_uncount_shared(struct session *s, uint32_t n);
/* Packs the Completion of r (per op: status, timings, an inline C's bytes)
 * into a new allocation with room for a struct outbuf before the frame, as
 * frame_pack_completion, and counts the reply in the daemon's stats. Reads
 * only r, so any thread may call it once r's last op is done. */
int dispatch_pack_completion(const struct request *r, uint8_t **buf, size_t *n);
/* The same Completion written at dst (a ring's slot, cap bytes) without a
 * frame header; GEMMD_ETOOBIG, with nothing written or counted, when it
 * does not fit. */
int dispatch_pack_completion_body(const struct request *r, uint8_t *dst, size_t cap, size_t *n);
/* Counts r's reply in the daemon's stats as packing it does, for a
 * request answered by its completion word (reply.c). Any thread. */
void dispatch_count_reply(const struct request *r);
/* Loop thread: sends the Launched message of a struct launch_notice
 * (worker.h) to its request's client and frees it (the workers'
 * worker_notice_fn, wired in by the server). */
void launch_notice_send(struct wctl *c);

#endif

/*
 * ring.h - the rings a client shares with the daemon beside its socket.
 *
 * A request's socket round trip costs two system calls on each side and,
 * at many requests in flight, the event loop's turn to read and to write
 * them. A session may instead offer a memfd
 * laid out as struct gemmd_ring (RingAttach in proto/gemmd.proto):
 *
 *   sq: Submit envelopes, client to daemon. The daemon's event loop looks
 *       at the ring on each of its turns while it polls (--spin-us); before
 *       it sleeps it sets sq.flag, and clients then send their Submits on
 *       the socket, which wakes it.
 *   cq: Completion envelopes, daemon to client, written by the thread that
 *       saw the group finish (or, for a large group, by the event loop). A
 *       client about to sleep on the socket sets cq.flag, and the daemon
 *       then answers it on the socket.
 *
 * With each Completion, on the ring or the socket, the daemon refreshes
 * cq.no_poll: set, it asks the client to sleep on its socket while it
 * waits instead of polling first. The daemon sets it while more sessions
 * have work in flight than the host has CPUs to spare for polling
 * (gemmd --client-poll-max): past that, polling clients take the CPUs the
 * daemon's own threads need. A zero-filled ring (a daemon that does not
 * know the field) lets clients poll, as before.
 *
 * A message put in a ring just as the other side fell asleep is followed
 * by a RingKick on the socket (the handshake below makes sure one of the
 * two sides sees the other).
 *
 * The daemon takes a session's Submits from its ring before it acts on a
 * frame from its socket, so a frame comes after every Submit the client
 * put in the ring before sending it (a stats round trip covers them; a
 * buffer released after them is not released under them).
 *
 * Each slot holds one frame body (an Envelope, as on the socket without
 * its length prefix) of at most RING_BODY bytes; what does not fit, or
 * finds its ring full, takes the socket instead. Both ways are the same
 * protocol, and tickets complete in no given order, so a client reads
 * both and needs no order between them.
 *
 * Every index in the shared memory is written by one side and only read by
 * the other. Each side keeps its own index privately (never reading back
 * what the other could have changed) and checks the other's before use:
 * the daemon trusts nothing in a client's ring (ring_avail, ring_room),
 * and copies a body out of its slot before it decodes it.
 *
 * The sleep handshake is the usual one: the producer publishes, issues a
 * full fence, then reads the flag; the consumer sets the flag, issues a
 * full fence, then looks at the ring again. One of the two sees the other.
 *
 * Completion words. A Completion is a message to pack, put in a slot and
 * decode; a request that only wants to hear "every op succeeded" can be
 * answered by one 8-byte store instead. Rings of version 2 are followed,
 * in the same memfd, by an array of RING_WORDS words (at RING_WORDS_OFF,
 * mapped apart), and a Submit may name one (Submit.word, 1 + its
 * index). The daemon then
 * answers that request in one of two ways, never both:
 *
 *   - with a Completion, as any other (every failure, and whatever the
 *     daemon chooses not to answer by word). The daemon writes nothing
 *     more to the word for that request.
 *   - by the word: WORD_VALUE(id, WORD_OK | WORD_FINAL), stored with
 *     release order after the request's results are in place, under the
 *     completion ring's sleep handshake (cq.flag: a client that said it
 *     sleeps is answered on its socket instead).
 *
 * Before that, the GPU that ran a request's only op may already have
 * stored WORD_VALUE(id, WORD_OK) there, as soon as its C was whole, with
 * no thread of the daemon in between; the daemon's own answer follows.
 * A client takes WORD_OK for its request's success, and may name the word
 * again once it holds WORD_FINAL for that request or a Completion for it
 * came (a Completion can then follow a WORD_OK: the client ignores it).
 * The word is the client's memory: the daemon and its GPUs only ever
 * store to it, at an index the daemon checked.
 */
#ifndef GEMMD_RING_H
#define GEMMD_RING_H

#include <stdatomic.h>
#include <stdint.h>

#define GEMMD_RING_VERSION 2 /* 2: the completion words follow the rings; 1 (still taken): none */
#define RING_SQ 64          /* submission slots */
#define RING_CQ 256         /* completion slots */
#define RING_SLOT 1024      /* bytes per slot */
#define RING_BODY (RING_SLOT - 8)

/* One direction's indices, each on a cache line of its own. */
struct ring_ctl {
        _Atomic uint32_t head; /* the producer's: slots filled */
        char pad0[60];
        _Atomic uint32_t tail; /* the consumer's: slots taken */
        char pad1[60];
        _Atomic uint32_t flag; /* the consumer sleeps (or is about to) */
        _Atomic uint32_t no_poll; /* cq only, the daemon's: clients should not poll */
        char pad2[56];
};

struct ring_slot {
        uint32_t len; /* of body */
        uint32_t pad;
        uint8_t body[RING_BODY];
};

struct gemmd_ring {
        struct ring_ctl sq;
        struct ring_ctl cq;
        struct ring_slot s[RING_SQ];
        struct ring_slot c[RING_CQ];
};

#define RING_BYTES ((uint64_t)sizeof(struct gemmd_ring))

/* Completion words (above). A word holds a request id's low 62 bits
 * and two flags; 0 is never a request's answer. */
#define RING_WORDS 512
#define WORD_OK 1ull    /* every op of the request succeeded */
#define WORD_FINAL 2ull /* the daemon answered: nothing more comes to this word */
#define WORD_VALUE(id, flags) ((uint64_t)(id) << 2 | (flags))
#define WORD_ID_MATCH(v, id) ((((uint64_t)(v) ^ (uint64_t)(id) << 2) >> 2) == 0)

/* Where the words lie in the memfd (on a 64 KiB boundary, which every
 * page size divides: the daemon maps them apart), and its size for a
 * RingAttach of version v. */
#define RING_WORDS_OFF ((RING_BYTES + 65535) & ~(uint64_t)65535)
#define RING_FILE_BYTES(v) ((v) >= 2 ? RING_WORDS_OFF + RING_WORDS * sizeof(uint64_t) : RING_BYTES)

/* Producer: free slots after `head` (its own count), or -1 when the
 * consumer's tail is impossible (a corrupt ring). */
static inline int ring_room(struct ring_ctl *r, uint32_t head, uint32_t slots)
{
        uint32_t used = head - atomic_load_explicit(&r->tail, memory_order_acquire);

        return used > slots ? -1 : (int)(slots - used);
}

/* Producer: makes the slots before `head` visible. Returns 1 when the
 * consumer said it sleeps and must be kicked. */
static inline int ring_publish(struct ring_ctl *r, uint32_t head)
{
        atomic_store_explicit(&r->head, head, memory_order_release);
        atomic_thread_fence(memory_order_seq_cst);
        return atomic_load_explicit(&r->flag, memory_order_relaxed) != 0;
}

/* Consumer: filled slots after `tail` (its own count), or -1 when the
 * producer's head is impossible. */
static inline int ring_avail(struct ring_ctl *r, uint32_t tail, uint32_t slots)
{
        uint32_t n = atomic_load_explicit(&r->head, memory_order_acquire) - tail;

        return n > slots ? -1 : (int)n;
}

/* Consumer: gives the slots before `tail` back. */
static inline void ring_release(struct ring_ctl *r, uint32_t tail)
{
        atomic_store_explicit(&r->tail, tail, memory_order_release);
}

/* Consumer, before it sleeps: sets the flag and returns 1 if it may sleep
 * (nothing came meanwhile), else clears it again and returns 0. */
static inline int ring_arm(struct ring_ctl *r, uint32_t tail)
{
        atomic_store_explicit(&r->flag, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&r->head, memory_order_relaxed) != tail) {
                atomic_store_explicit(&r->flag, 0, memory_order_relaxed);
                return 0;
        }
        return 1;
}

static inline void ring_disarm(struct ring_ctl *r)
{
        atomic_store_explicit(&r->flag, 0, memory_order_relaxed);
}

#endif /* GEMMD_RING_H */

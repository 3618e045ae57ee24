/*
 * users.h - the people behind the sessions: who may connect at all, and
 * what each user (uid) holds over all of its sessions.
 *
 * Every session belongs to the user of its peer's SO_PEERCRED uid. The
 * user counts what its sessions hold together (in-flight ops, registered
 * bytes), which the per-user limits of struct limits bound, and carries
 * its standing in each worker's fair queue (struct ushare, struct ulane:
 * see worker.h). A user lives while it has sessions; sessions outlive
 * their requests, so nothing that is queued or running can outlive it.
 * Under the server's lock (struct server: the event loops share users),
 * except the ushare/ulane parts, which belong to the workers' locks.
 */
#ifndef GEMMD_USERS_H
#define GEMMD_USERS_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "daemon/config.h"
#include "daemon/worker.h"

struct server;

struct user {
        struct user *next, *prev;
        uint32_t uid;
        uint32_t sessions;     /* references: one per session */
        uint32_t denied;       /* of those, sessions refused (see struct session) */
        /* Admitted, not yet completed, all sessions (admit): every op of
         * the user moves it, from the loops and the completing threads,
         * so it has a cache line of its own. */
        _Alignas(64) atomic_uint inflight_ops;
        _Alignas(64) uint64_t buffer_bytes; /* registered, all sessions */
        /* Buffers and rings the daemon holds mapped for it (released
         * buffers that ops still use included); taken under the server's
         * lock (users_map_take), given back by any thread. */
        atomic_uint mappings;
        /* Bytes held for its sessions' inline operands and the replies
         * carrying inline results; as for mappings. */
        atomic_uint_fast64_t inline_held;
        struct ushare *shares; /* one per worker */
        struct ulane *ulanes;  /* nworkers * NPRIO: worker i, priority p at i * NPRIO + p */
};

/* Whether the peer of the connected socket `fd`, with credentials `cred`,
 * may use the daemon: always when neither --allow-uid nor --allow-gid was
 * given; otherwise when its uid is listed, or its primary group or one of
 * its supplementary groups (SO_PEERGROUPS) is. Returns 1 or 0. */
int users_allowed(const struct gemmd_config *cfg, int fd, const struct ucred *cred);

/* Whether the peer may see every user's sessions in the stats: root, or a
 * member (primary or supplementary group) of an --admin-gid group.
 * Returns 1 or 0. */
int users_admin(const struct gemmd_config *cfg, int fd, const struct ucred *cred);

/* The user of `uid`, created on first use, with one more session
 * reference. Returns NULL when out of memory. Both with srv->lock held. */
struct user *users_get(struct server *srv, uint32_t uid);

/* Drops a session reference; the last one frees the user. Accepts NULL. */
void users_put(struct server *srv, struct user *u);

struct session;
struct gbuf;

/* Counts one more mapping (a buffer or a ring) for s's user and for the
 * daemon, unless that passes --max-user-buffers or --max-mappings: then
 * answers request rid with LIMIT, naming the cap, and returns
 * GEMMD_ELIMIT. Loop thread. */
int users_map_take(struct session *s, uint64_t rid);
/* Gives back a mapping that users_map_take counted for s. Any thread. */
void users_map_give(struct session *s);
/* The same for one thing of the user's held in n of the daemon's mappings
 * (rings with their completion words: 2), against --max-mappings. */
int users_map_take_n(struct session *s, uint64_t rid, unsigned n);
void users_map_give_n(struct session *s, unsigned n);
/* Hands the mapping counted for s to buffer b: b's last reference gives
 * it back, whichever thread drops it. */
void users_map_pass(struct session *s, struct gbuf *b);

/* The inline bytes s may still take before its budget or its user's is
 * full (--max-session-inline-bytes, --max-user-inline-bytes). Loop thread. */
uint64_t users_inline_room(struct session *s);
/* Counts n more inline bytes for s and its user, unless the user's budget
 * has filled meanwhile (its sessions on other loops take too): then
 * returns GEMMD_EBUSY. Loop thread. */
int users_inline_take(struct session *s, uint64_t n);
/* Gives back n bytes counted by users_inline_take. Any thread. */
void users_inline_give(struct session *s, uint64_t n);

#endif

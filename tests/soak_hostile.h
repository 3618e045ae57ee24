/*
 * soak_hostile.h - the hostile user of `soak --hostile`: one process that
 * attacks the daemon until it is killed, and the limits and bounds that
 * the soak holds the daemon to while it does.
 */
#ifndef GEMMD_SOAK_HOSTILE_H
#define GEMMD_SOAK_HOSTILE_H

#include <stdint.h>

#define SOAK_HONEST_UID 60031
#define SOAK_HOSTILE_UID 60032

/* The daemon's flags for a hostile soak (a NULL-terminated list): small
 * per-user caps, so that the bounds below are tight enough to mean
 * something on a test machine. */
extern const char *const hostile_flags[];

/* What the man page says the daemon may hold at most, for hostile_flags,
 * `users` users and the baseline it started from: descriptors, shared
 * mappings and resident memory (kB), and of that memory what it may keep
 * once every client has left: its device's group slots' copies of inline
 * operands, `slot_copies` of them (0 on the CPU backend in the daemon's
 * process; 3 with a device process of the CPU backend's 2 slots; 8 on a
 * GPU's 4, each with what it outgrew). */
struct hostile_bounds {
        long fds, shm_maps, rss_kb, kept_kb;
};
void hostile_bounds(int users, int slot_copies, long base_fds, long base_rss_kb,
                    struct hostile_bounds *b);

/* Attacks the daemon on sock, one attack after another picked with seed,
 * until the process is killed. Never returns. */
void hostile_main(const char *sock, int id, uint64_t seed) __attribute__((noreturn));

#endif

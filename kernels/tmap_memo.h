/*
 * tmap_memo.h - a memo of encoded tensor maps.
 *
 * A tensor map (CUtensorMap, 128 bytes) is a pure function of what it is
 * encoded from: an operand's address, element type, sizes, row pitch and
 * box. Encoding one is a driver call on the launch path, up to three per
 * problem on every launch; clients send the same operands again and
 * again (a training step's weights, a solver's panels), so a launch finds
 * most of its maps here and copies them.
 * Nothing can go stale: a key holds every input, and a new allocation at
 * an old address with the same shape encodes to the same bytes.
 *
 * Four ways: a key may sit in any of the four slots of its set, and a
 * new key takes a free one or the one found least recently. One memo per
 * thread (no lock); plain C, so that tests can drive it without a GPU
 * (tests/test_tmap_memo.c).
 */
#ifndef GEMMD_TMAP_MEMO_H
#define GEMMD_TMAP_MEMO_H

#include <stdint.h>
#include <string.h>

#define TMAP_MEMO_WAYS 4u
#define TMAP_MEMO_SETS 2048u /* a power of two: 8192 maps, 1.4 MiB */
#define TMAP_BYTES_ONE 128u

/* Everything a map is encoded from that changes between maps. */
struct tmap_key {
        uint64_t addr;
        int64_t ld;       /* row pitch, elements */
        uint32_t rows, k; /* sizes: rows of k elements */
        uint32_t dtype;   /* enum gemmd_dtype */
        uint32_t box;     /* rows a box */
};

struct tmap_memo_slot {
        struct tmap_key key;
        uint64_t seen; /* the memo's clock when last found or put; 0: free */
        uint8_t map[TMAP_BYTES_ONE];
};

struct tmap_memo {
        struct tmap_memo_slot slot[TMAP_MEMO_SETS][TMAP_MEMO_WAYS];
        uint64_t clock, hits, misses;
};

/* The set of k. */
static inline uint32_t tmap_memo_index(const struct tmap_key *k)
{
        uint64_t h = k->addr * 0x9e3779b97f4a7c15ull;

        h ^= ((uint64_t)k->ld * 0xc2b2ae3d27d4eb4full) ^ ((uint64_t)k->rows << 32 | k->k) * 0x165667b19e3779f9ull;
        h ^= ((uint64_t)k->dtype << 32 | k->box) * 0x27d4eb2f165667c5ull;
        h ^= h >> 29;
        return (uint32_t)h & (TMAP_MEMO_SETS - 1);
}

static inline int tmap_key_eq(const struct tmap_key *a, const struct tmap_key *b)
{
        return a->addr == b->addr && a->ld == b->ld && a->rows == b->rows && a->k == b->k &&
               a->dtype == b->dtype && a->box == b->box;
}

/* Copies the map memoized for k to out and returns 1, or returns 0. */
static inline int tmap_memo_get(struct tmap_memo *m, const struct tmap_key *k, void *out)
{
        struct tmap_memo_slot *set = m->slot[tmap_memo_index(k)];

        for (uint32_t w = 0; w < TMAP_MEMO_WAYS; w++)
                if (set[w].seen && tmap_key_eq(&set[w].key, k)) {
                        memcpy(out, set[w].map, TMAP_BYTES_ONE);
                        set[w].seen = ++m->clock;
                        m->hits++;
                        return 1;
                }
        m->misses++;
        return 0;
}

/* Memoizes map (TMAP_BYTES_ONE bytes) for k, in a free slot of its set
 * or in place of the map found least recently there. */
static inline void tmap_memo_put(struct tmap_memo *m, const struct tmap_key *k, const void *map)
{
        struct tmap_memo_slot *set = m->slot[tmap_memo_index(k)], *s = &set[0];

        for (uint32_t w = 0; w < TMAP_MEMO_WAYS; w++) {
                if (set[w].seen && tmap_key_eq(&set[w].key, k)) {
                        s = &set[w];
                        break;
                }
                if (set[w].seen < s->seen)
                        s = &set[w];
        }
        s->key = *k;
        s->seen = ++m->clock;
        memcpy(s->map, map, TMAP_BYTES_ONE);
}

#endif /* GEMMD_TMAP_MEMO_H */

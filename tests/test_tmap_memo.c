/*
 * test_tmap_memo.c - kernels/tmap_memo.h: a map comes back only for the
 * very inputs it was put with (every field of the key counts), bytes
 * intact; a full set gives up its least recently found map, and a key
 * whose map went is a miss, never answered with another's map; a working
 * set of 1536 maps is found nearly always; the counts say so.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "kernels/tmap_memo.h"

static struct tmap_memo *memo;

static void setup(void)
{
        memo = calloc(1, sizeof(*memo));
        cr_assert_not_null(memo);
}

static void teardown(void) { free(memo); }

TestSuite(tmap_memo, .init = setup, .fini = teardown);

/* A map whose bytes name its key, to tell maps apart. */
static void fake_map(const struct tmap_key *k, uint8_t out[TMAP_BYTES_ONE])
{
        for (uint32_t i = 0; i < TMAP_BYTES_ONE; i++)
                out[i] = (uint8_t)(k->addr + 7u * k->rows + 13u * k->k + 17u * (uint64_t)k->ld + 19u * k->dtype +
                                   23u * k->box + i);
}

Test(tmap_memo, a_map_comes_back_for_its_own_key_only)
{
        const struct tmap_key k = {0x7f0000001000ull, 1024, 512, 768, 2, 128};
        uint8_t map[TMAP_BYTES_ONE], got[TMAP_BYTES_ONE];

        cr_assert_eq(tmap_memo_get(memo, &k, got), 0, "an empty memo has nothing");
        fake_map(&k, map);
        tmap_memo_put(memo, &k, map);
        memset(got, 0, sizeof(got));
        cr_assert_eq(tmap_memo_get(memo, &k, got), 1);
        cr_assert_arr_eq(got, map, sizeof(map));
        /* Each field on its own makes another key. */
        struct tmap_key o[6];
        for (int i = 0; i < 6; i++)
                o[i] = k;
        o[0].addr += 16;
        o[1].ld += 8;
        o[2].rows += 1;
        o[3].k += 64;
        o[4].dtype = 1;
        o[5].box = 64;
        for (int i = 0; i < 6; i++)
                cr_assert_eq(tmap_memo_get(memo, &o[i], got), 0, "field %d", i);
        cr_assert_eq(memo->hits, 1);
        cr_assert_eq(memo->misses, 7);
}

Test(tmap_memo, a_full_set_gives_up_its_least_recent_map_and_never_anothers)
{
        /* TMAP_MEMO_WAYS + 1 keys of one set. */
        struct tmap_key k[TMAP_MEMO_WAYS + 1];
        uint8_t map[TMAP_BYTES_ONE], got[TMAP_BYTES_ONE];
        uint32_t n = 0;

        for (uint64_t a = 0x1000; n < TMAP_MEMO_WAYS + 1; a += 16) {
                k[n] = (struct tmap_key){a, 64, 64, 64, 1, 128};
                if (n == 0 || tmap_memo_index(&k[n]) == tmap_memo_index(&k[0]))
                        n++;
        }
        for (uint32_t i = 0; i < TMAP_MEMO_WAYS; i++) {
                fake_map(&k[i], map);
                tmap_memo_put(memo, &k[i], map);
        }
        /* Key 0 found again: key 1 is now the least recent. */
        cr_assert_eq(tmap_memo_get(memo, &k[0], got), 1);
        cr_assert_eq(tmap_memo_get(memo, &k[TMAP_MEMO_WAYS], got), 0, "not put yet");
        fake_map(&k[TMAP_MEMO_WAYS], map);
        tmap_memo_put(memo, &k[TMAP_MEMO_WAYS], map);
        cr_assert_eq(tmap_memo_get(memo, &k[1], got), 0, "key 1 gave its slot up");
        for (uint32_t i = 0; i <= TMAP_MEMO_WAYS; i++) {
                if (i == 1)
                        continue;
                cr_assert_eq(tmap_memo_get(memo, &k[i], got), 1, "key %u", i);
                fake_map(&k[i], map);
                cr_assert_arr_eq(got, map, sizeof(map), "key %u has its own map", i);
        }
}

Test(tmap_memo, a_working_set_of_operands_mostly_hits)
{
        /* 8 clients of 64 problems, three maps each, sent again and
         * again: after the first round all but a few are found. */
        static struct tmap_key keys[1536];
        uint8_t map[TMAP_BYTES_ONE], got[TMAP_BYTES_ONE];

        for (int i = 0; i < 1536; i++)
                keys[i] = (struct tmap_key){0x7f0000000000ull + (uint64_t)i * 0x200000ull, 64 * (1 + i % 16),
                                            64 * (1 + i % 13), 64 * (1 + i % 11), 2, i % 3 ? 128 : 64};
        for (int round = 0; round < 10; round++)
                for (int i = 0; i < 1536; i++)
                        if (!tmap_memo_get(memo, &keys[i], got)) {
                                fake_map(&keys[i], map);
                                tmap_memo_put(memo, &keys[i], map);
                        } else {
                                fake_map(&keys[i], map);
                                cr_assert_arr_eq(got, map, sizeof(map), "key %d", i);
                        }
        cr_assert_eq(memo->hits + memo->misses, 15360);
        /* Of the 13824 lookups after the first round, at least 97% hit. */
        cr_assert_geq(memo->hits, 13824 * 97 / 100, "hits %llu of 15360", (unsigned long long)memo->hits);
}

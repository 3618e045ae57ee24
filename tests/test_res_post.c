/*
 * test_res_post: how a group's post reaches the resident kernel
 * (kernels/res_post.h): the host's writer and the device's rule for
 * taking a post, which must take a post whole or not at all whatever mix
 * of old and new words a read sees, across the wrap of seq's low 32 bits
 * too; plain C, no GPU.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "kernels/res_post.h"

struct slot {
        uint64_t w[CUDA_RES_WORDS];
};

static uint64_t rnd(uint64_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

/* A post for group seq with `bytes` of random launch data inside it (or in
 * pinned memory elsewhere, src, when bytes is 0 and src is not). */
static void make_post(struct cuda_res_post *p, uint64_t seq, uint32_t bytes, uint64_t src, uint64_t *r)
{
        memset(p, 0, sizeof(*p));
        p->src = src;
        p->bytes = src ? 65536 : bytes;
        p->rot = (uint32_t)(rnd(r) % 132);
        p->nprobs = 1 + (uint32_t)(rnd(r) % 8);
        p->nctas = 1 + (uint32_t)(rnd(r) % 132);
        p->probs = 0;
        p->cta_begin = rnd(r) % 4096;
        p->entries = rnd(r) % 4096;
        p->tmaps = rnd(r) % 4096;
        p->gen = 1 + rnd(r) % 7;
        p->seq = seq | (src ? 0 : (uint64_t)bytes << 48);
        for (uint32_t i = 0; i < bytes; i++)
                p->data[i] = (unsigned char)rnd(r);
}

/* The slot after writing p for seq on top of `before`. */
static void put(struct slot *after, const struct slot *before, const struct cuda_res_post *p, uint64_t seq)
{
        *after = *before;
        res_post_put(after->w, p, p->data, seq);
}

/* Whether post seq, taken from words w, is p exactly (its fields and the
 * launch data it carries); -1: not taken. */
static int taken_as(const uint64_t *w, uint64_t seq, const struct cuda_res_post *p)
{
        struct cuda_res_post got;
        unsigned char data[CUDA_RES_INLINE];

        memset(&got, 0, sizeof(got));
        if (!res_post_take(w, seq, &got, data))
                return -1;
        const uint32_t nd = p->src ? 0 : (uint32_t)(p->seq >> 48);
        return memcmp(&got, p, offsetof(struct cuda_res_post, data)) == 0 && memcmp(data, p->data, nd) == 0;
}

/* Reads of the write from `before` to `after` in which each word is old
 * or new at random (as the device's loads may each land before or after
 * the host's store of that word), and the prefixes and suffixes of the
 * writer's order: how many were taken, and how many of those were not
 * exactly p. */
static void mixes(const struct slot *before, const struct slot *after, uint64_t seq, const struct cuda_res_post *p,
                  uint64_t *r, int *took, int *wrong)
{
        static struct slot mix;

        *took = *wrong = 0;
        for (int trial = 0; trial < 3000; trial++) {
                const int kind = trial % 3;
                const uint32_t cut = (uint32_t)(rnd(r) % (CUDA_RES_WORDS + 1));
                /* Dense mixes (almost every word new) matter most. */
                const uint64_t odds = 1 + rnd(r) % 64;

                for (uint32_t i = 0; i < CUDA_RES_WORDS; i++) {
                        int fresh = kind == 0   ? rnd(r) % odds != 0
                                    : kind == 1 ? i >= cut /* the launch data first, then the fields */
                                                : i < cut;
                        mix.w[i] = fresh ? after->w[i] : before->w[i];
                }
                const int t = taken_as(mix.w, seq, p);
                *took += t >= 0;
                *wrong += t == 0;
        }
}

Test(res_post, a_post_is_taken_as_written_and_only_for_its_seq)
{
        static const uint32_t sizes[] = {0, 16, 1024, 2176, 3968};
        static struct slot zero, s;
        uint64_t r = 7;

        for (unsigned i = 0; i <= sizeof(sizes) / sizeof(sizes[0]); i++) {
                struct cuda_res_post p;
                const uint64_t seq = 40 + i; /* past the first round's refill */
                const int src = i == sizeof(sizes) / sizeof(sizes[0]);

                make_post(&p, seq, src ? 0 : sizes[i], src ? 0x7f0000001000ull : 0, &r);
                put(&s, &zero, &p, seq);
                cr_assert_eq(taken_as(s.w, seq, &p), 1, "post of %u bytes%s", src ? 0 : sizes[i],
                             src ? " (src)" : "");
                cr_assert_eq(res_post_words(&p), RES_POST_FIELD_WORDS + (src ? 0 : sizes[i] / 4));
                cr_assert_eq(taken_as(s.w, seq + CUDA_RES_SLOTS, &p), -1, "taken for the slot's next seq");
                cr_assert_eq(taken_as(s.w, seq - CUDA_RES_SLOTS, &p), -1, "taken for the slot's last seq");
        }
}

Test(res_post, any_mix_of_old_and_new_words_is_taken_whole_or_not_at_all)
{
        static struct slot zero, s1, s2;
        struct cuda_res_post a, b;
        uint64_t r = 11;
        int took, wrong;

        /* A long post, then the slot's next one, shorter, over it. */
        make_post(&a, 3 + 5 * CUDA_RES_SLOTS, 3968, 0, &r);
        put(&s1, &zero, &a, 3 + 5 * CUDA_RES_SLOTS);
        make_post(&b, 3 + 6 * CUDA_RES_SLOTS, 1024, 0, &r);
        put(&s2, &s1, &b, 3 + 6 * CUDA_RES_SLOTS);
        mixes(&s1, &s2, 3 + 6 * CUDA_RES_SLOTS, &b, &r, &took, &wrong);
        cr_expect_eq(wrong, 0, "%d of %d posts taken were not the post written", wrong, took);
        cr_expect_gt(took, 0, "no read took the post");
        cr_expect_lt(took, 3000, "every read took the post, even half-written ones");
}

Test(res_post, no_word_from_the_last_round_of_seqs_passes)
{
        static struct slot zero, sa, sb, sc, sd;
        const uint64_t round = 1ull << 32, slot = 3;
        const uint64_t a_seq = slot + 5 * CUDA_RES_SLOTS, b_seq = round + slot, c_seq = a_seq + round;
        struct cuda_res_post a, b, c;
        uint64_t r = 13;
        int took, wrong;

        /* Post a, long, in the first round of seqs; b, short, the slot's
         * first post of the next round (which rewrites the slot first);
         * then c, whose tag is a's. */
        make_post(&a, a_seq, 3968, 0, &r);
        put(&sa, &zero, &a, a_seq);
        make_post(&b, b_seq, 64, 0, &r);
        put(&sb, &sa, &b, b_seq);
        make_post(&c, c_seq, 3968, 0, &r);
        put(&sc, &sb, &c, c_seq);
        cr_assert(res_tag_ok(sa.w[100], c_seq), "a's words carry c's tag: the case under test");
        mixes(&sb, &sc, c_seq, &c, &r, &took, &wrong);
        cr_expect_eq(wrong, 0, "%d of %d posts taken held words of the last round", wrong, took);
        cr_expect_gt(took, 0, "no read took the post");

        /* Without b, the slot's turn in the new round, a's words would
         * pass for c's: the rule needs every seq posted in turn, and this
         * check sees the difference. */
        put(&sd, &sa, &c, c_seq);
        mixes(&sa, &sd, c_seq, &c, &r, &took, &wrong);
        cr_expect_gt(wrong, 0, "a's words never passed for c's without the refill: the check above proves nothing");
}

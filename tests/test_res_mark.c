/*
 * test_res_mark: the resident kernel's slot marks (kernels/res_mark.h),
 * the rule by which each of its CTAs takes a group, passes it or waits,
 * and ends its launch; plain C, no GPU.
 */
#include <criterion/criterion.h>

#include "kernels/res_mark.h"

#define GRID 132u

/* res_step for CTA cta of GRID, with the exit (if any) at exit_seq. */
static enum res_step step(uint64_t r, uint64_t seq, uint64_t gen, uint64_t exit_seq, uint32_t cta, uint32_t *v)
{
        return res_step(r, seq, gen, exit_seq, cta, GRID, v);
}

Test(res_mark, a_plan_of_few_ctas_takes_only_its_own_rotated)
{
        /* Group 7 on 5 CTAs from CTA 130 on: 130, 131, 0, 1, 2. */
        const uint64_t m = res_mark(7, 5, 130);
        uint32_t v = 99;

        for (uint32_t cta = 0; cta < GRID; cta++) {
                const int mine = cta >= 130 || cta <= 2;

                v = 99;
                cr_assert_eq(step(m, 7, 1, 0, cta, &v), mine ? RES_TAKE : RES_PASS, "CTA %u", cta);
                if (mine)
                        cr_assert_eq(v, (cta + GRID - 130) % GRID, "CTA %u's place in the plan", cta);
        }
}

Test(res_mark, a_whole_grid_plan_takes_every_cta)
{
        uint32_t v;

        for (uint32_t cta = 0; cta < GRID; cta++) {
                cr_assert_eq(step(res_mark(3, GRID, 17), 3, 1, 0, cta, &v), RES_TAKE);
                cr_assert_eq(v, (cta + GRID - 17) % GRID);
        }
}

Test(res_mark, waits_for_an_earlier_mark_and_passes_a_later_one)
{
        uint32_t v;

        /* The slot of group 20 still holds group 4's mark (20 - 16): not marked yet. */
        cr_assert_eq(step(res_mark(4, 10, 0), 20, 1, 0, 0, &v), RES_WAIT);
        /* Nothing marked yet at all (a zeroed area). */
        cr_assert_eq(step(0, 1, 1, 0, 0, &v), RES_WAIT);
        /* It holds group 36's: group 20 was done and its slot reused, without this CTA. */
        cr_assert_eq(step(res_mark(36, GRID, 0), 20, 1, 0, 5, &v), RES_PASS);
}

Test(res_mark, an_exit_ends_the_launch_only_at_its_own_seq)
{
        uint32_t v;
        const uint64_t gen = 9, ex = RES_EXIT_BIT | gen;

        cr_assert_eq(step(ex, 40, gen, 40, 0, &v), RES_EXIT);
        /* The exit at 56 in the slot of group 40: group 40 went on without this CTA. */
        cr_assert_eq(step(ex, 40, gen, 56, 0, &v), RES_PASS);
        /* An earlier launch's exit, left in the slot: this launch's group is still to come. */
        cr_assert_eq(step(RES_EXIT_BIT | (gen - 1), 40, gen, 40, 0, &v), RES_WAIT);
}

Test(res_mark, fields_survive_their_largest_values)
{
        const uint64_t seq = RES_SEQ_MASK;
        uint32_t v;

        cr_assert_eq(res_mark(seq, RES_MARK_MAX_CTAS, RES_MARK_MAX_CTAS - 1) & RES_EXIT_BIT, 0, "never an exit");
        cr_assert_eq(res_step(res_mark(seq, RES_MARK_MAX_CTAS, 254), seq, 1, 0, 253, RES_MARK_MAX_CTAS, &v),
                     RES_TAKE);
        cr_assert_eq(v, (253 + 255 - 254) % 255);
        /* The plan's CTAs and rotation never reach the seq's bits. */
        cr_assert_eq(res_mark(5, RES_MARK_MAX_CTAS, RES_MARK_MAX_CTAS) & RES_SEQ_MASK, 5);
}

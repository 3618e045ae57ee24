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

/* One run of the exits of `nd` dispatchers of launch 7 after its last
 * post (base - 1): ev[] names the order of their 2 nd stores (dispatcher
 * d raising exit_seq to base + d is event 2d, its mark event 2d + 1,
 * always after it), and a CTA walking from base reads whatever has been
 * stored when it looks. Every interleaving of the CTA's looks with the
 * stores is tried (recursively: `done` stores so far). The CTA must end
 * at an exit, never wait once all is stored, and never pass the highest
 * exit. */
#define S 100u
struct exits {
        uint64_t ready[16], exit_seq, base;
        uint32_t nd;
        const int *ev;
};

static void apply(struct exits *x, int e)
{
        const uint64_t seq = x->base + (uint32_t)e / 2;

        if (e % 2 == 0)
                x->exit_seq = seq > x->exit_seq ? seq : x->exit_seq;
        else
                x->ready[seq % 16] = RES_EXIT_BIT | 7;
}

static void walk_exits(struct exits x, uint32_t done, uint64_t seq)
{
        uint32_t v;

        cr_assert_lt(seq, x.base + x.nd, "passed the highest exit");
        const enum res_step st = res_step(x.ready[seq % 16], seq, 7, x.exit_seq, 0, GRID, &v);

        /* It looks now (an exit ends this branch), or after the next store. */
        cr_assert_neq(st, RES_TAKE);
        if (st == RES_PASS)
                walk_exits(x, done, seq + 1);
        else if (st == RES_WAIT)
                cr_assert_lt(done, 2 * x.nd, "waits at %llu with every exit marked", (unsigned long long)seq);
        if (done < 2 * x.nd) {
                apply(&x, x.ev[done]);
                walk_exits(x, done + 1, seq);
        }
}

/* Orders of three dispatchers' stores, each raise before its mark. */
static const int orders[][6] = {
        {0, 1, 2, 3, 4, 5}, {4, 5, 2, 3, 0, 1}, {2, 3, 0, 1, 4, 5}, {0, 2, 4, 1, 3, 5},
        {4, 2, 0, 5, 3, 1}, {2, 4, 0, 1, 5, 3}, {4, 0, 5, 2, 1, 3}, {0, 4, 1, 2, 5, 3},
};

Test(res_mark, with_several_dispatchers_every_cta_ends_at_an_exit_in_any_order)
{
        for (uint32_t o = 0; o < sizeof(orders) / sizeof(orders[0]); o++) {
                struct exits x = {.nd = 3, .ev = orders[o], .base = S};

                /* The slots still hold the groups before, a lap back. */
                for (uint32_t i = 0; i < 16; i++)
                        x.ready[(S + i) % 16] = res_mark(S + i - 16, GRID, 0);
                walk_exits(x, 0, S);
        }
}

/* Launch 6, of three dispatchers too, ended with its exits at S, S + 1
 * and S + 2, leaving exit_seq at S + 2; launch 7 started at S, took the
 * post there and ends with exits at S + 1 to S + 3. Its CTAs pass the
 * old exits as not yet theirs, and end at one of the new ones. */
Test(res_mark, an_earlier_launchs_higher_exit_seq_never_keeps_a_cta_from_ending)
{
        for (uint32_t o = 0; o < sizeof(orders) / sizeof(orders[0]); o++) {
                struct exits x = {.nd = 3, .ev = orders[o], .base = S + 1, .exit_seq = S + 2};

                for (uint32_t i = 0; i < 16; i++)
                        x.ready[(S + i) % 16] = res_mark(S + i - 16, GRID, 0);
                x.ready[S % 16] = res_mark(S, GRID, 0);
                x.ready[(S + 1) % 16] = x.ready[(S + 2) % 16] = RES_EXIT_BIT | 6;
                walk_exits(x, 0, S + 1);
        }
}
#undef S

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

/*
 * cuda_launch.c - the CUDA backend's launch of a group (cuda_backend.h):
 * host operands staged (pinned ones copied from where they are, the
 * others through the slot's bounce buffer), the launch data (problems,
 * plan, tensor maps) written into the slot's pinned blob, then the group
 * posted to the resident kernel or copied in and launched, and its host
 * results copied out; the completion thread takes it from there.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cuda_backend.h"
#include "proto/ring.h"
#include "gemmd.h"

#ifdef GEMMD_FAULT_INJECTION
int cuda_debug_fault(void *stream); /* daemon/fault_cuda.cu */
#endif

/* Rows and columns of a column-major operand of op o, as validated. */
void operand_dims(const struct op *o, int which, uint64_t *rows, uint64_t *cols)
{
        const struct gemmd_kproblem *p = &o->kp;

        if (which == 2) {
                *rows = p->m;
                *cols = p->n;
        } else if (p->kind == SCHED_SYR2K) {
                *rows = p->trans_a ? p->k : p->n;
                *cols = p->trans_a ? p->n : p->k;
        } else if (which == 0) {
                *rows = p->trans_a ? p->k : p->m;
                *cols = p->trans_a ? p->m : p->k;
        } else {
                *rows = p->trans_b ? p->n : p->k;
                *cols = p->trans_b ? p->k : p->n;
        }
}

/* Whether a client waits on a launch event for one of g's requests
 * (Launched messages, which must come before its Completion). */
static int launch_notices(const struct group *g)
{
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->req->notify_launch)
                        return 1;
        return 0;
}

/* The rows of g's tiles where its plan is on the half tile, else 0
 * (cuda_gemm_half_rows). */
static uint32_t half_rows(const struct group *g)
{
        return cuda_gemm_half_rows((int)(g->key & 3), (int)(g->key >> 2) & 1, g->cfg.shape);
}

/* Whether the resident kernel takes group g: 16-bit GEMMs on the usual
 * tile, or on the half tile (rows: half_rows) with none split, every one
 * on the Hopper kernel, operands in device memory, launch
 * data that fits its slot, and no client waiting on a launch event; and
 * no more tiles than CTAs, whole in them (the kernel that adds split
 * tiles apart is launched after the group's). Groups on it finish in
 * order, and a larger group holds up the small ones behind it, where on
 * streams of their own a small group launched after it finishes first,
 * so larger groups run better launched. */
static int res_takes(struct cuda_backend *cb, const struct group *g, uint32_t rows, int nfast, uint32_t nsyr2k,
                     size_t stage, size_t blob, int notify)
{
        const int dt = (int)(g->key & 3);

        if ((dt != GEMMD_F16 && dt != GEMMD_BF16) || nfast != (int)g->nops || nsyr2k || stage ||
            blob > RES_SLOT_BYTES || g->cfg.shape.tn != shape(&cb->b, g->key).tn || !g->plan.nentries ||
            g->plan.reduce_apart || (rows && g->plan.nsplit) ||
            g->plan.nctas > cb->b.ctas || g->tiles > cb->b.ctas || notify)
                return 0;
#ifdef GEMMD_FAULT_INJECTION
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->debug_fault)
                        return 0;
#endif
        return 1;
}

/* What launch() works out for one group on its way: where each part of
 * the launch data goes in the slot's blob, the staging area of the host
 * operands, the kernel's choices, and the host time of each step (LS_*). */
struct launch_state {
        size_t plan_off, tm_off; /* in the blob: the plan, the tensor maps */
        size_t tm_bytes;
        size_t blob;     /* the blob's bytes */
        size_t need_off; /* early completion's arrivals per problem, at the blob's end */
        size_t word_off; /* then each problem's completion word and value (cuda_group.early_word) */
        uint32_t nwords; /* problems whose completion word the GPU stores */
        size_t stage;    /* staging area: all of it; in_lo on is bounced; in_hi ends the bounced inputs */
        size_t in_lo, in_hi;
        size_t esz;      /* bytes per element */
        size_t pack;     /* packed copies' bytes (cuda_gemm_pack_bytes), 0: none */
        int dt, notify, early, nfast;
        uint32_t nsyr2k;
        unsigned ring;   /* the launch's events in cb's rings */
        uint64_t lt, ls[LS_N];
};

/* Ends host step `step` of the launch: its time since the last. */
static void lstep(struct launch_state *st, int step)
{
        uint64_t t = now_ns();

        st->ls[step] = t - st->lt;
        st->lt = t;
}

/* Numbers the launch on slot s, decides whether it is timed, and lays out
 * the blob: the problems, the plan and the tensor maps, each as aligned
 * as it must be. */
static int launch_begin(struct cuda_backend *cb, struct cuda_slot *s, struct group *g,
                        struct launch_state *st)
{
        size_t kp_bytes = g->nops * sizeof(struct gemmd_kproblem);

        memset(st, 0, sizeof(*st));
        /* No more than each part's alignment between them: a resident
         * group's launch data travels inside its post, read over PCIe,
         * and the whole of a larger post takes another round trip. */
        st->plan_off = align64(kp_bytes);
        /* Tensor maps of the Hopper path, 64-byte aligned. */
        st->tm_off = align64(st->plan_off + g->plan.blob_bytes);
        /* Every group but exact f32 on fused multiply-adds (key: dtype in
         * bits 0-1, tf32 in bit 2). */
        st->tm_bytes = (g->key != GEMMD_F32 || cb->f32_split) && (g->key & 3) != GEMMD_F64
                               ? cuda_gemm_tmaps_bytes(g->nops)
                               : 0; /* f64: no Hopper kernel takes it */
        st->blob = st->tm_off + st->tm_bytes;
        st->dt = (int)(g->key & 3);
        st->notify = launch_notices(g);
        st->esz = gemmd_dtype_size((enum gemmd_dtype)(g->key & 3));
        st->lt = now_ns();

        CK(cudaSetDevice(cb->ordinal));
        s->g = g;
        s->seq = cb->launches++;
        st->ring = (unsigned)(s->seq % EVENT_RING);
        /* Launches j and j + 1 of every timing_every: the pair also gives
         * the idle gap between them. */
        g->timed = cb->timing_every <= 2 || s->seq % cb->timing_every < 2;
        cb->timed[st->ring] = (uint8_t)g->timed;
        return 0;
}

/* Room in slot s for the staging records of g's ops (stage_off, bounce). */
static int stage_room(struct cuda_slot *s, const struct group *g)
{
        if (s->stage_ops < g->nops) {
                uint64_t *p = realloc(s->stage_off, (size_t)g->nops * 3 * sizeof(*p));
                uint8_t *q = realloc(s->bounce, g->nops);

                if (p)
                        s->stage_off = p;
                if (q)
                        s->bounce = q;
                if (!p || !q)
                        return -ENOMEM;
                s->stage_ops = g->nops;
        }
        return 0;
}

/*
 * Host operands get a place in the staging area. Those in pinned
 * memory are copied straight from it. The others (inline data, and
 * shared memory that could not be pinned) go through the slot's
 * pinned bounce buffer (bounced(), from in_lo on): a copy from pageable
 * memory holds the calling thread until the device has caught up
 * with the stream, and costs tens of microseconds even when small.
 * The bounced operands come after the pinned ones, As and Bs, then
 * Cs, so that each direction is one copy.
 */
static void place_operands(struct cuda_backend *cb, struct cuda_slot *s, const struct group *g,
                           struct launch_state *st)
{
        size_t stage = 0;

        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];

                s->bounce[i] = 0;
                for (int j = 0; j < 3; j++) {
                        if (o->buf[j]->kind == GBUF_CUDA) {
                                s->stage_off[i * 3 + j] = UINT64_MAX;
                                continue;
                        }
                        if (!pin(cb, o->buf[j])) {
                                s->bounce[i] |= (uint8_t)(1u << j);
                                continue; /* placed below */
                        }
                        s->stage_off[i * 3 + j] = stage;
                        stage += align256(o->span[j]);
                }
        }
        st->in_lo = stage;
        s->in_lo = st->in_lo;
        for (int j = 0; j < 3; j++) {
                if (j == 2)
                        s->out_lo = stage;
                for (uint32_t i = 0; i < g->nops; i++)
                        if (s->bounce[i] & (1u << j)) {
                                s->stage_off[i * 3 + j] = stage;
                                stage += align256(g->ops[i]->span[j]);
                        }
        }
        s->out_hi = stage;
        st->stage = stage;
}

/* Early completion: 16-bit GEMMs with their operands in device memory
 * (nothing to copy back after the kernel), on a plan whose tiles are whole
 * when their CTAs end (not added apart); the Hopper kernel alone, checked
 * once the tensor maps are built. The arrivals each problem needs go at
 * the end of the launch data. */
static void plan_early(const struct cuda_backend *cb, const struct group *g, struct launch_state *st)
{
        st->early = cb->early_on && !st->stage && g->plan.nentries && !g->plan.reduce_apart &&
                    (st->dt == GEMMD_F16 || st->dt == GEMMD_BF16) && !st->notify;
        if (st->early) {
                st->need_off = (st->blob + 15) & ~(size_t)15;
                st->blob = st->need_off + g->nops * sizeof(uint32_t);
                /* The words' array only when some request may take one. */
                uint32_t i = 0;

                while (cb->words_on && i < g->nops && !g->ops[i]->req->word_dev)
                        i++;
                if (cb->words_on && i < g->nops) {
                        st->word_off = (st->blob + 15) & ~(size_t)15;
                        st->blob = st->word_off + g->nops * 2 * sizeof(uint64_t);
                }
        }
}

/* Grows slot s's buffers to what g needs: the blob and its device twin,
 * the staging area and its bounce buffer, and split mode's workspace and
 * arrival counters. */
static int grow_buffers(struct cuda_backend *cb, struct cuda_slot *s, const struct group *g,
                        const struct launch_state *st)
{
        const struct sched_plan *plan = &g->plan;
        int rc;

        if ((rc = grow_pair(cb, &s->h_blob, &s->d_blob, &s->blob_cap, st->blob)) ||
            (rc = grow(cb, (void **)&s->d_stage, &s->stage_cap, st->stage, MEM_DEVICE, 0)) ||
            (rc = grow(cb, (void **)&s->h_bounce, &s->bounce_cap, st->stage - st->in_lo, MEM_PINNED, 0)))
                return rc;
        if (plan->nsplit) {
                rc = grow(cb, (void **)&s->d_ws, &s->ws_cap, cuda_gemm_ws_bytes(plan, g->cfg.shape, st->dt),
                          MEM_DEVICE, 0);
                if (!rc)
                        rc = grow(cb, (void **)&s->d_arr, &s->arr_cap,
                                  cuda_gemm_arrivals_bytes(plan), MEM_DEVICE, 1);
                if (rc)
                        return rc;
        }
        return 0;
}

/* Resolves operand j of g's op i (o) to its device address in *addr: its
 * device memory, or its place in the staging area, into which a host
 * operand is copied (from pinned memory on the stream at once; otherwise
 * into the bounce buffer, which fill_problems copies in one go). */
static int stage_operand(struct cuda_backend *cb, struct cuda_slot *s, const struct op *o, uint32_t i,
                         int j, struct launch_state *st, uint64_t *addr)
{
        uint64_t off = s->stage_off[i * 3 + j], rows, cols, ld;
        const size_t esz = st->esz;
        const char *src;
        char *dst;

        if (off == UINT64_MAX) {
                const struct cuda_mem *mem = o->buf[j]->ipc_base;

                if (!mem->base) {
                        log_warn("cuda %d: an operand's memory was lost with a "
                                 "failed context", cb->ordinal);
                        return GEMMD_EDEVICE;
                }
                *addr = (uint64_t)(uintptr_t)mem->base + o->buf[j]->alloc_off + o->off[j];
                return 0;
        }
        dst = s->d_stage + off;
        *addr = (uint64_t)(uintptr_t)dst;
        /* A GEMM C with beta == 0 is not read (an f64 op's beta as sent:
         * a tiny one rounds to a float 0). */
        if (j == 2 && o->kp.kind == SCHED_GEMM &&
            (o->kp.dtype == GEMMD_F64 ? o->kp.beta_f64 == 0.0 : o->kp.beta == 0.0f))
                return 0;
        operand_dims(o, j, &rows, &cols);
        ld = j == 0 ? o->kp.lda : j == 1 ? o->kp.ldb : o->kp.ldc;
        src = (const char *)o->buf[j]->host + o->off[j];
        if (s->bounce[i] & (1u << j)) {
                copy_cols(bounced(s, off), src, ld * esz, rows * esz, cols);
                if (off + o->span[j] > st->in_hi)
                        st->in_hi = off + o->span[j];
        } else {
                CK(cudaMemcpy2DAsync(dst, ld * esz, src, ld * esz, rows * esz, cols,
                                     cudaMemcpyHostToDevice, s->stream));
        }
        return 0;
}

/* Writes g's problems into the blob with their operands' device
 * addresses, copying the host operands in as they are placed, and the
 * bounced ones after them in one copy. */
static int fill_problems(struct cuda_backend *cb, struct cuda_slot *s, const struct group *g,
                         struct launch_state *st)
{
        struct gemmd_kproblem *kp = s->h_blob;
        int rc;

        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];
                uint64_t *addr[3] = {&kp[i].a, &kp[i].b, &kp[i].c};

                kp[i] = o->kp;
                for (int j = 0; j < 3; j++)
                        if ((rc = stage_operand(cb, s, o, i, j, st, addr[j])))
                                return rc;
        }
        /* The bounced inputs, in one copy. */
        if (st->in_hi > st->in_lo)
                CK(cudaMemcpyAsync(s->d_stage + st->in_lo, bounced(s, st->in_lo), st->in_hi - st->in_lo,
                                   cudaMemcpyHostToDevice, s->stream));
        return 0;
}

/* Writes the plan and early completion's arrival counts into the blob
 * after the problems. (The kernels work out each problem's schedule
 * problem from the problem itself.) */
static void fill_plan(struct cuda_slot *s, const struct group *g, const struct launch_state *st)
{
        const struct sched_plan *plan = &g->plan;

        memcpy((char *)s->h_blob + st->plan_off, plan->blob, plan->blob_bytes);
        if (st->early) {
                /* Both consumer warpgroups of a CTA arrive once per entry. */
                uint32_t *need = (uint32_t *)((char *)s->h_blob + st->need_off);

                memset(need, 0, g->nops * sizeof(*need));
                for (uint32_t e = 0; e < plan->nentries; e++)
                        need[plan->entries[e].problem] += 2;
        }
}

/*
 * The completion words the kernel stores (proto/ring.h): for each op whose
 * request may be answered by the GPU (request.word_dev: its only op, the
 * counts under half their caps), the address of its word in the client's
 * page-locked words and WORD_OK. The address is the daemon's own mapping,
 * at an index the daemon checked; words not locked yet are asked for
 * (pin) and left to the host's answer this time.
 */
static void fill_words(struct cuda_backend *cb, struct cuda_slot *s, const struct group *g,
                       struct launch_state *st)
{
        uint64_t *w = (uint64_t *)((char *)s->h_blob + st->word_off);

        st->nwords = 0;
        if (!st->word_off) /* set only under early completion (plan_early) */
                return;
        for (uint32_t i = 0; i < g->nops; i++) {
                const struct request *r = g->ops[i]->req;

                w[2 * i] = w[2 * i + 1] = 0;
                if (!r->word_dev || !pin(cb, r->words))
                        continue;
                w[2 * i] = (uint64_t)(uintptr_t)r->words->host + (r->word - 1) * sizeof(uint64_t);
                w[2 * i + 1] = WORD_VALUE(r->id, WORD_OK);
                st->nwords++;
        }
}

/* Whether g's 16-bit C's get maps: the kernel stores C through one on a
 * tile its CTA follows with another, never under early completion; a
 * plan of at most one entry a CTA (a lone small group) has no such tile. */
static int c16_maps(const struct group *g, const struct launch_state *st)
{
        return !st->early && (g->plan.nentries == 0 || g->plan.nentries > g->plan.nctas);
}

/* Encodes the tensor maps on the host, from the device addresses just
 * resolved, and counts the problems the Hopper kernel takes (nfast, of
 * them nsyr2k SYR2Ks). A group on the wide tile must be all of them.
 * Operands the Hopper kernel cannot read in place get packed copies in the
 * slot's pack buffer where cuda_gemm_pack_bytes says they pay (without
 * room for them, the group runs on the sm_80 kernel as it would have). */
static int build_tmaps(struct cuda_backend *cb, struct cuda_slot *s, struct group *g,
                       struct launch_state *st)
{
        st->pack = 0;
        g->packed = 0;
        if (st->tm_bytes) {
                st->pack = cuda_gemm_pack_bytes(s->h_blob, g->nops, g->cfg.shape);
                if (st->pack && grow(cb, &s->d_pack, &s->pack_cap, st->pack, MEM_DEVICE, 0))
                        st->pack = 0;
                st->nfast = cuda_gemm_tmaps_build_packed(s->h_blob, g->nops, g->cfg.shape,
                                                         (char *)s->h_blob + st->tm_off,
                                                         st->pack ? (uint64_t)(uintptr_t)s->d_pack : 0,
                                                         c16_maps(g, st));
                g->packed = st->pack != 0 && st->nfast == (int)g->nops && cuda_gemm_fast_available();
                if (st->nfast < 0)
                        st->nfast = 0;
                st->nsyr2k = cuda_gemm_tmaps_syr2k((char *)s->h_blob + st->tm_off, g->nops);
        }
        /* The worker gives a group the wide tile only when every op takes
         * the Hopper kernel (take_wide); that kernel alone runs it. */
        if (g->cfg.shape.tn != shape(&cb->b, g->key).tn && st->nfast != (int)g->nops) {
                log_err("cuda %d: a group on the wide tile has %u ops the Hopper kernel cannot take",
                        cb->ordinal, g->nops - (uint32_t)st->nfast);
                return -EINVAL;
        }
        return 0;
}

/* Posts g to the resident kernel if it takes it (res_takes); *posted says
 * whether it did (the group is then watched). A resident kernel whose
 * queue is full (-EAGAIN) leaves the group to a launch. */
static int launch_resident(struct cuda_backend *cb, struct cuda_slot *s, struct group *g,
                           const struct launch_state *st, int *posted)
{
        const struct sched_plan *plan = &g->plan;
        struct cuda_res_post rp;
        int rc;

        const uint32_t rows = half_rows(g);

        *posted = 0;
        /* (packed copies are made by a kernel of their own first) */
        s->res = cb->res_on && !st->pack &&
                 res_takes(cb, g, rows, st->nfast, st->nsyr2k, st->stage, st->blob, st->notify);
        if (!s->res)
                return 0;
        memset(&rp, 0, offsetof(struct cuda_res_post, data));
        rp.bytes = (uint32_t)((st->blob + 15) & ~(size_t)15);
        rp.nprobs = g->nops;
        rp.nctas = plan->nctas;
        rp.probs = 0;
        rp.cta_begin = st->plan_off + plan->off_cta_begin;
        rp.entries = st->plan_off + plan->off_entries;
        rp.split_parts = st->plan_off + plan->off_split_parts;
        rp.split_ws = st->plan_off + plan->off_split_ws;
        rp.tmaps = st->tm_off;
        rp.ws = plan->nsplit ? (uint64_t)(uintptr_t)s->d_ws : 0;
        rp.arrivals = plan->nsplit ? (uint64_t)(uintptr_t)s->d_arr : 0;
        /* The kernel stores the completion words once the group is done. */
        rp.words = st->nwords ? st->word_off : 0;
        rp.tile_rows = rows;
        rc = res_post(cb, s, (int)(g->key & 3), &rp, s->h_blob);
        if (!rc) {
                g->resident = 1;
                g->words_dev = st->nwords;
                watch(cb, s);
                *posted = 1;
                return 0;
        }
        if (rc != -EAGAIN)
                return rc;
        s->res = 0;
        return 0;
}

/* Describes g's launch to the kernels (cg), and copies its launch data to
 * the device unless a small group whose every problem takes the Hopper
 * kernel sends it with the launch (cuda_group.inline_*): no copy before
 * the kernel. */
static int fill_cuda_group(struct cuda_backend *cb, struct cuda_slot *s, const struct group *g,
                           const struct launch_state *st, struct cuda_group *cg)
{
        const struct sched_plan *plan = &g->plan;
        const int inl = st->blob <= CUDA_GEMM_INLINE_MAX && st->nfast == (int)g->nops && !st->pack &&
                        cuda_gemm_fast_available();

        if (!inl)
                CK(cudaMemcpyAsync(s->d_blob, s->h_blob, st->blob, cudaMemcpyHostToDevice, s->stream));
        memset(cg, 0, sizeof(*cg));
        if (inl) {
                cg->inline_host = s->h_blob;
                cg->inline_dev = (uint64_t)(uintptr_t)s->d_blob;
                cg->inline_bytes = (uint32_t)st->blob;
        }
        cg->problems = s->d_blob;
        cg->problems_host = (const struct gemmd_kproblem *)s->h_blob; /* the blob starts with them */
        cg->nproblems = g->nops;
        cg->dtype = (int)(g->key & 3);
        cg->tf32 = (int)(g->key >> 2) & 1;
        cg->plan_blob = plan->nentries ? (char *)s->d_blob + st->plan_off : NULL;
        cg->plan = plan;
        cg->cfg = g->cfg;
        cg->ws = plan->nsplit ? s->d_ws : NULL;
        cg->arrivals = plan->nsplit ? s->d_arr : NULL;
        cg->tmaps = st->nfast ? (char *)s->d_blob + st->tm_off : NULL;
        cg->nfast = (uint32_t)st->nfast;
        cg->nfast_syr2k = st->nsyr2k;
        cg->pack = st->pack ? s->d_pack : NULL;
        return 0;
}

/* Arms early completion for g when it runs on the Hopper kernel alone
 * (no SYR2K): its arrival counters, its pinned flags and the completion
 * thread's record of which ops it handed back, and tells the kernel
 * (cg->early_*). */
static int arm_early(struct cuda_backend *cb, struct cuda_slot *s, struct group *g,
                     const struct launch_state *st, struct cuda_group *cg)
{
        size_t had;
        int rc;

        s->early = st->early && st->nfast == (int)g->nops && !st->nsyr2k;
        if (!s->early)
                return 0;
        had = s->early_flag_cap;
        if ((rc = grow(cb, (void **)&s->d_early_cnt, &s->early_cnt_cap, g->nops * sizeof(uint32_t),
                       MEM_DEVICE, 1)) ||
            (rc = grow(cb, (void **)&s->h_early_flag, &s->early_flag_cap, g->nops * sizeof(uint32_t),
                       MEM_PINNED, 0))) {
                s->early = 0;
                return rc;
        }
        if (s->early_flag_cap != had)
                memset(s->h_early_flag, 0, s->early_flag_cap);
        if (s->early_reset) {
                CK(cudaMemsetAsync(s->d_early_cnt, 0, s->early_cnt_cap, s->stream));
                s->early_reset = 0;
        }
        if (s->early_done_cap < g->nops) {
                uint8_t *d = realloc(s->early_done, g->nops);

                if (!d) {
                        s->early = 0;
                        return -ENOMEM;
                }
                s->early_done = d;
                s->early_done_cap = g->nops;
        }
        memset(s->early_done, 0, g->nops);
        s->early_left = g->nops;
        /* Nonzero (the flags start at 0) and new to the slot. */
        s->early_seq = (uint32_t)(s->seq % 0xffffffffu) + 1;
        cg->early_cnt = s->d_early_cnt;
        cg->early_need = (const uint32_t *)((char *)s->d_blob + st->need_off);
        cg->early_flag = s->h_early_flag;
        cg->early_seq = s->early_seq;
        cg->early_word = st->nwords ? (const uint64_t *)((char *)s->d_blob + st->word_off) : NULL;
        g->words_dev = st->nwords;
        return 0;
}

#ifdef GEMMD_FAULT_INJECTION
/* Fault-injection builds: a debug op breaks the device after its group's
 * kernel. */
static void inject_fault(struct cuda_backend *cb, struct cuda_slot *s, const struct group *g)
{
        for (uint32_t i = 0; i < g->nops; i++)
                if (g->ops[i]->debug_fault) {
                        log_warn("cuda %d: injecting a device fault (debug op)", cb->ordinal);
                        cuda_debug_fault(s->stream);
                        break;
                }
}
#endif

/* After the kernel, on the stream: the host Cs copied back (pinned ones
 * straight, bounced ones in one copy), the end event of a timed launch,
 * and the interprocess event a client waits on (Launched). */
static int copy_results(struct cuda_backend *cb, struct cuda_slot *s, struct group *g,
                        const struct launch_state *st)
{
        const size_t esz = st->esz;

        for (uint32_t i = 0; i < g->nops; i++) {
                const struct op *o = g->ops[i];
                uint64_t off = s->stage_off[i * 3 + 2], rows, cols;

                if (off == UINT64_MAX || (s->bounce[i] & 4))
                        continue;
                operand_dims(o, 2, &rows, &cols);
                CK(cudaMemcpy2DAsync((char *)o->buf[2]->host + o->off[2], o->kp.ldc * esz,
                                     s->d_stage + off, o->kp.ldc * esz, rows * esz, cols,
                                     cudaMemcpyDeviceToHost, s->stream));
        }
        if (s->out_hi > s->out_lo)
                CK(cudaMemcpyAsync(bounced(s, s->out_lo), s->d_stage + s->out_lo, s->out_hi - s->out_lo,
                                   cudaMemcpyDeviceToHost, s->stream));
        if (g->timed)
                CK(cudaEventRecord(cb->ev_end[st->ring], s->stream));
        /* The interprocess event only when a client will wait on it: each
         * record is an API call on the launch path. */
        if (st->notify) {
                CK(cudaEventRecord(cb->ev_ipc[st->ring], s->stream));
                /* Before the group is watched, so it cannot complete first. */
                worker_notify_launch(g, (const uint8_t *)&cb->ev_ipc_handle[st->ring], cb->ordinal);
        }
        return 0;
}

/*
 * Launches group g on its slot's stream (struct backend's launch): the
 * host operands staged and copied in, the launch data (problems, plan,
 * tensor maps) written into the slot's pinned blob, then either posted to
 * the resident kernel or copied and launched, the host results copied
 * out, and the slot handed to the completion thread (watch). Each step's
 * host time is summed for the log at exit (LS_*).
 */
int launch(struct backend *be, struct group *g)
{
        struct cuda_backend *cb = (struct cuda_backend *)be;
        struct cuda_slot *s = g->bdata;
        struct launch_state st;
        struct cuda_group cg;
        int rc, posted;

        if ((rc = launch_begin(cb, s, g, &st)) || (rc = stage_room(s, g)))
                return rc;
        place_operands(cb, s, g, &st);
        plan_early(cb, g, &st);
        if ((rc = grow_buffers(cb, s, g, &st)))
                return rc;
        lstep(&st, LS_PREPARE);
        /* The group's device time starts at its first copy or kernel, not
         * at the host work before them. Pinned host operands are copied as
         * their addresses are resolved (fill_problems). */
        if (st.in_lo > 0 && g->timed)
                CK(cudaEventRecord(cb->ev_start[st.ring], s->stream));
        if ((rc = fill_problems(cb, s, g, &st)))
                return rc;
        fill_plan(s, g, &st);
        fill_words(cb, s, g, &st);
        lstep(&st, LS_FILL);
        if ((rc = build_tmaps(cb, s, g, &st)))
                return rc;
        lstep(&st, LS_MAPS);
        if ((rc = launch_resident(cb, s, g, &st, &posted)) || posted) {
                if (posted) {
                        lstep(&st, LS_COPY);
                        for (int i = 0; i <= LS_COPY; i++)
                                cb->ps_ns[i] += st.ls[i];
                        cb->ps_groups++;
                }
                return rc;
        }
        /* Any other kernel needs the SMs the resident one holds. */
        res_stop(cb);
        if (st.in_lo == 0 && g->timed)
                CK(cudaEventRecord(cb->ev_start[st.ring], s->stream));
        if ((rc = fill_cuda_group(cb, s, g, &st, &cg)) || (rc = arm_early(cb, s, g, &st, &cg)))
                return rc;
        lstep(&st, LS_COPY);
        rc = cuda_gemm_launch(&cg, s->stream);
        lstep(&st, LS_KERNEL);
        if (rc) {
                log_err("cuda %d: kernel launch failed (%d)", cb->ordinal, rc);
                return rc;
        }
#ifdef GEMMD_FAULT_INJECTION
        inject_fault(cb, s, g);
#endif
        if ((rc = copy_results(cb, s, g, &st)))
                return rc;
        lstep(&st, LS_AFTER);
        for (int i = 0; i < LS_N; i++)
                cb->ls_ns[i] += st.ls[i];
        cb->ls_groups++;
        watch(cb, s);
        return 0;
}

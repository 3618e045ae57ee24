/*
 * res_post.h - how a group's post reaches the resident kernel (cuda_gemm.h,
 * struct cuda_res_post and struct cuda_res_host; kernels/wgmma_gemm.cuh
 * res_dispatch; daemon/cuda_resident.c res_post).
 *
 * Each read the GPU makes of pinned host memory is a round trip over PCIe
 * (about 2 us). A post is therefore written as tagged words: each 64-bit
 * word holds 32 bits of the post beside the low 32 bits of its group's
 * seq, stored in one store, and the device reads a slot's words all at
 * once, again and again, until every word the post needs carries its
 * seq. One round trip brings both the news and the data.
 *
 * The rule: a word carrying seq's tag holds what the host wrote for that
 * post, because each word is stored and read whole, and because no word
 * left in the slot from an earlier post can carry the same tag: within a
 * round of 2^32 seqs the tags of a slot's posts differ, and the first post
 * of a slot in each round first rewrites the whole slot with the tag of
 * seq + 1, which no post of that slot carries.
 *
 * Plain C as well as device code, so that tests can drive the rule
 * without a GPU (tests/test_res_post.c).
 */
#ifndef GEMMD_RES_POST_H
#define GEMMD_RES_POST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda_gemm.h"

#ifdef __CUDACC__
#define RES_POST_FN __host__ __device__ __forceinline__
#else
#define RES_POST_FN static inline
#endif

/* Tagged words of a post's fields (struct cuda_res_post up to data). */
#define RES_POST_FIELD_WORDS (offsetof(struct cuda_res_post, data) / 4)

/* Tagged word: 4 bytes of a post (v) beside the low 32 bits of its seq. */
RES_POST_FN uint64_t res_tag(uint64_t seq, uint32_t v)
{
        return (uint64_t)(uint32_t)seq << 32 | v;
}

/* Whether tagged word w belongs to post seq. */
RES_POST_FN int res_tag_ok(uint64_t w, uint64_t seq)
{
        return (uint32_t)(w >> 32) == (uint32_t)seq;
}

/* Whether fields p, each word of them with seq's tag, are post seq's. */
RES_POST_FN int res_post_is(const struct cuda_res_post *p, uint64_t seq)
{
        return (p->seq & CUDA_RES_POST_SEQ) == seq;
}

/* The words post p needs, its fields in hand: the fields, and the launch
 * data carried inside it (the seq field's bits 48-63; none with src). */
RES_POST_FN uint32_t res_post_words(const struct cuda_res_post *p)
{
        return (uint32_t)RES_POST_FIELD_WORDS + (p->src ? 0 : (uint32_t)(p->seq >> 48) / 4);
}

#ifndef __CUDA_ARCH__
/*
 * Writes post p for group seq into slot words w (the slot seq %
 * CUDA_RES_SLOTS): the slot rewritten first when seq is the slot's first
 * post of a round of 2^32 seqs, then the launch data inside the post
 * (p->seq's bits 48-63 bytes of data, none with src), then the fields.
 * p->seq must name seq. Each word goes in one relaxed 64-bit store, so a
 * reader sees it whole; the order of the words does not matter to the
 * rule, only that every seq is posted in turn.
 */
static inline void res_post_put(uint64_t *w, const struct cuda_res_post *p, const void *data, uint64_t seq)
{
        const uint32_t hw = (uint32_t)RES_POST_FIELD_WORDS, nd = p->src ? 0 : (uint32_t)(p->seq >> 48) / 4;
        uint32_t v;

        if ((uint32_t)seq < CUDA_RES_SLOTS)
                for (uint32_t i = 0; i < CUDA_RES_WORDS; i++)
                        __atomic_store_n(&w[i], res_tag(seq + 1, 0), __ATOMIC_RELAXED);
        for (uint32_t i = 0; i < nd; i++) {
                memcpy(&v, (const char *)data + 4 * i, 4);
                __atomic_store_n(&w[hw + i], res_tag(seq, v), __ATOMIC_RELAXED);
        }
        for (uint32_t i = 0; i < hw; i++) {
                memcpy(&v, (const char *)p + 4 * i, 4);
                __atomic_store_n(&w[i], res_tag(seq, v), __ATOMIC_RELAXED);
        }
}

/*
 * The device's rule (res_dispatch), one word at a time: whether words w,
 * as read, hold all of post seq; if so *p and data (CUDA_RES_INLINE bytes)
 * get it. The device reads the words at once and applies the same test.
 */
static inline int res_post_take(const uint64_t *w, uint64_t seq, struct cuda_res_post *p, void *data)
{
        uint32_t v, n;

        for (uint32_t i = 0; i < RES_POST_FIELD_WORDS; i++) {
                if (!res_tag_ok(w[i], seq))
                        return 0;
                v = (uint32_t)w[i];
                memcpy((char *)p + 4 * i, &v, 4);
        }
        if (!res_post_is(p, seq) || (n = res_post_words(p)) > CUDA_RES_WORDS)
                return 0;
        for (uint32_t i = RES_POST_FIELD_WORDS; i < n; i++) {
                if (!res_tag_ok(w[i], seq))
                        return 0;
                v = (uint32_t)w[i];
                memcpy((char *)data + 4 * (i - RES_POST_FIELD_WORDS), &v, 4);
        }
        return 1;
}
#endif

#endif

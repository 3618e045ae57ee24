/*
 * wgmma_gemm.cuh - the Hopper (sm_90a) fast path for 16-bit, TF32 and exact
 * f32 GEMM and SYR2K: TMA loads, an mbarrier pipeline and wgmma, in a persistent
 * warp-specialized kernel.
 * Included by grouped_gemm.cu inside its anonymous namespace (it shares
 * KParams, the plan walk and the element conversions with the sm_80
 * kernels); the launcher is in grouped_gemm.cu.
 *
 * Problems: GEMM and SYR2K, f16, bf16 or f32, A stored
 * m x k and B stored n x k, both contiguous along K (GEMM: trans_a = T,
 * trans_b = N; SYR2K: op T, A and B n x k), A and B 16-byte aligned, lda
 * and ldb multiples of a 16-byte vector. The host encodes two tensor maps
 * per problem (cuda_gemm_tmaps_build): box 128 bytes of K (64 16-bit
 * elements, 32 f32) x 128 rows (B: the tile's width), 128-byte swizzle;
 * and a third, of C, for f32 GEMMs (c_staged, and c_load where beta != 0);
 * the copy engine fills rows and k past the matrix with zeros, so edge
 * tiles take the same mainloop and only the epilogue masks. A stage has the
 * same bytes and the same shared-memory layout for every type, and each
 * wgmma consumes 32 bytes of K (k16, or k8 for TF32), so the pipeline is
 * shared; only the k-tile depth (WK<T>::BK) and the epilogue differ.
 *
 * TF32: wgmma reads f32 operands from shared memory and uses their TF32
 * part (the low 13 mantissa bits are ignored: truncation, where the sm_80
 * TF32 kernel rounds to nearest). Which kernel computes a problem depends
 * only on the problem, so its bits still never depend on the group.
 *
 * Exact f32 (X3): each operand is split into two TF32 parts, x = big +
 * small (tf32_small), and each 32 bytes of K takes three wgmmas, a_s b +
 * a b_s + a b, summed GEMMD_X3_FOLD k-tiles at a time (ktile_x3): results
 * land as close to an f64 reference as cuBLAS's FMA SGEMM, at three times
 * the TF32 work, which tensor cores still do faster than FMA cores. The
 * producer warpgroup's idle warps 1-3 split each stage once its copy
 * lands (the small parts into a second ring laid out like the first) and
 * signal split[stage]; the consumers wait for that. Two rings fit three
 * stages.
 *
 * Wide tile (GEMMs only, not X3): 128 x WIDE_BN (192), each consumer
 * computing 64 x 192 with m64n192 wgmmas, four stages of 40 KiB; a third
 * more products per byte loaded, for large groups (cuda_gemm_shape_wide).
 * Narrow tile (GEMMs only, not X3): 128 x NARROW_BN (64), each consumer
 * computing 64 x 64 with m64n64 wgmmas, eight stages of 24 KiB; twice the
 * tiles of the usual one, for a lone group too small to fill the SMs
 * (cuda_gemm_shape_narrow). Both tiles' chunk sums are the usual tile's,
 * so are their bits.
 * With 64 rows of A (BMA): for 16-bit groups of GEMMs of at most 64 rows
 * (decode-like: a few rows against a large B), on the usual or the wide
 * tile, every tile a half tile; stages hold only A's first 64 rows (a
 * third map, 64 rows a box), so 7 (usual) or 5 (wide) fit where 5 or 4
 * did, and more of B is in flight. Same wgmmas on the same rows, so the
 * same bits.
 *
 * CTA: 384 threads. Warpgroup 0 is the producer (setmaxnreg lowers it to
 * 56 registers, 72 with SYR2Ks; warp 0 walks the CTA's work, reading plan
 * entries and their problems 32 at a time, one per lane, and lane 0 issues
 * the TMA copies; X3: warps 1-3 split), warpgroups 1 and 2 are the consumers (224 registers, 216
 * with SYR2Ks): each computes 64 rows of the 128 x 128 tile
 * with m64n128k16 (TF32: k8) wgmmas from the same B stage. STAGES stages
 * of 128 bytes of k (A 16 KiB + B 16 KiB each) cycle
 * through full/empty mbarriers; the ring keeps running from one tile to
 * the next, so the producer loads the next tile while the consumers finish
 * the current one. A half tile (rows that fit in 64: a small problem, a
 * bottom edge) is computed by one consumer alone, the next half tile by
 * the other, the two at once (Ping-pong); the other passes over its
 * stages. Same instructions on the same rows: the same bits. The first
 * stage of each tile carries a small header (problem, tile origin,
 * k-tiles, split slot, owner, and the fields of the problem the epilogue
 * needs), so the consumers never read the plan or the problem array; a
 * final stage with no data tells them the work is over.
 *
 * Numerics as in cuda_gemm.h: each canonical K chunk (8 k-tiles) is summed
 * by wgmma from zero (scale-d = 0 on its first instruction), then added to
 * a running total in f32, chunk by chunk; split entries store chunk sums to
 * the workspace and the last arrival adds them in order; the epilogue is
 * alpha * total (+ beta * C) with separately rounded operations.
 *
 * Epilogue (16-bit; f32 is stored straight from the fragments): values
 * are rounded to the output type in registers, written
 * transposed (stmatrix.trans) into a per-warpgroup staging buffer laid out
 * like C (column-major, 128 bytes a column, swizzled as TMA's 128-byte
 * mode is), and stored to C by one TMA copy through C's tensor map where
 * the host made one (the warpgroup goes on to its next tile meanwhile),
 * else with 16-byte vectors along each column (element stores at the
 * edges).
 */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMMD_SM90A 1
#endif

/* BMA: A rows a stage holds: 128, or 64 for groups whose every tile is a
 * half tile (m <= 64: one consumer a tile), whose smaller stages then
 * keep more of B in flight (the host's skinny_group). */
template <int BN_, int BMA_ = 128> struct WCfgT {
        static constexpr int BM = 128, BN = BN_, BMA = BMA_;
        static constexpr int ROW_BYTES = 128; /* bytes of K per k-tile row */
        static constexpr int THREADS = 384;
        /* setmaxnreg: what the producer's walk needs without spilling (the
         * SYR2K walk keeps more state), the rest to the consumers; 128 *
         * producer + 256 * consumer must fit in the 384 * 168 registers the
         * launch gets. */
        __host__ __device__ static constexpr int producer_regs(bool syrk) { return syrk ? 72 : 56; }
        __host__ __device__ static constexpr int consumer_regs(bool syrk)
        {
                return (384 * 168 - 128 * producer_regs(syrk)) / 256 / 8 * 8;
        }
        static constexpr int A_BYTES = BMA * ROW_BYTES, B_BYTES = BN * ROW_BYTES;
        static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
        /* 16-bit staging: a consumer's 64 rows x BN columns, 128 bytes a
         * column, TMA's 128-byte swizzle (epi_at). */
        static constexpr int EPI_BYTES = BN * 128; /* per consumer warpgroup */
        static constexpr int TILE = BM * BN;
        static constexpr int NACC = BN / 2; /* accumulators per consumer thread (64 x BN / 128) */
        static constexpr int TMAP_BYTES = 384; /* A's map, B's, a third (C's, or A's of 64 rows, or packed copies) */
        static_assert(BN % 16 == 0 && BN <= 256, "a wgmma's N");
        static_assert(BMA == 128 || BMA == 64, "a stage holds A's whole tile or its first 64 rows");
};

/* A maps buffer of n problems (cuda_gemm_tmaps_build): problem i's three
 * maps at i * TMAP_BYTES, then one flag byte a problem. */
__host__ __device__ __forceinline__ const char *third_map(const char *maps, uint32_t i)
{
        return maps + (size_t)i * WCfgT<128>::TMAP_BYTES + 256;
}
__host__ __device__ __forceinline__ const uint8_t *map_flags(const void *maps, uint32_t n)
{
        return (const uint8_t *)maps + (size_t)n * WCfgT<128>::TMAP_BYTES;
}
/* The usual tile; WIDE_BN the wide one (cuda_gemm_shape_wide), NARROW_BN
 * the narrow one (cuda_gemm_shape_narrow). */
using WCfg = WCfgT<128>;
constexpr int WIDE_BN = 192;
constexpr int NARROW_BN = 64;

/*
 * Shared memory of one kernel, from a 1024-byte aligned base: the stage
 * ring; with X3 (split f32, see below) each stage's small parts, laid out
 * like the stage; the 16-bit epilogue's staging buffers (X3 is f32 only
 * and stores from the fragments: none); the mbarriers full[STAGES],
 * empty[STAGES] and, with X3, split[STAGES]; a 16-word tile header per
 * stage; an end-of-work word per stage.
 */
/* F32C: the f32 epilogue stages C for TMA stores (c_staged): 32 KiB per
 * consumer warpgroup, which only the usual tile's five TF32 stages leave
 * room for. */
template <bool X3, int BN = 128, bool F32C = false, int BMA = 128> struct WLay {
        using W = WCfgT<BN, BMA>;
        static constexpr int F32C_BYTES = 64 * BN * 4; /* per consumer warpgroup */
        /* As many stages as fit: 5 of 32 KiB, 4 of 40 KiB (wide), 8 of 24
         * KiB (narrow: a lone tile keeps more of its K in flight), X3 3;
         * with 64 rows of A, 7 of 24 KiB (usual) and 5 of 32 KiB (wide). */
        static constexpr int STAGES = X3 ? 3 : BMA < 128 ? (BN > 128 ? 5 : 7) : BN > 128 ? 4 : BN < 128 ? 8 : 5;
        static constexpr int SMALL_OFF = STAGES * W::STAGE_BYTES;
        static constexpr int EPI_OFF = SMALL_OFF + (X3 ? STAGES * W::STAGE_BYTES : 0);
        static constexpr int BAR_OFF = EPI_OFF + (X3 ? 0 : 2 * (F32C ? F32C_BYTES : W::EPI_BYTES));
        static constexpr int HDR_OFF = BAR_OFF + (X3 ? 3 : 2) * STAGES * 8;
        static constexpr int END_OFF = HDR_OFF + STAGES * 64;
        /* F32C: one barrier per consumer warpgroup for C read into its
         * staging buffer (c_load). */
        static constexpr int CBAR_OFF = (END_OFF + STAGES * 4 + 7) & ~7;
        static constexpr int SMEM = 1024 + (F32C ? CBAR_OFF + 16 : END_OFF + STAGES * 4);
        static_assert(SMEM <= 227 * 1024, "over the shared memory of an sm_90 CTA");
        static_assert(!X3 || BN == 128, "X3 runs the usual tile only");
        static_assert(!F32C || (!X3 && BN == 128), "no room to stage f32 C");
        static_assert(BMA == 128 || (!X3 && !F32C && (BN == WIDE_BN || BN == 128)),
                      "64 rows of A: 16-bit GEMMs on the usual or the wide tile");
        static constexpr bool STAGED_C = F32C;
};

/* The layout of a kernel: TF32 on the usual tile stages its f32 C. */
template <typename T, bool X3, int BN, int BMA = 128>
using KLay = WLay<X3, BN, sizeof(T) == 4 && !X3 && BN == 128, BMA>;

/* What depends on the element type: the k-tile depth (128 bytes of K). */
template <typename T> struct WK {
        static constexpr int BK = WCfg::ROW_BYTES / (int)sizeof(T);
        static constexpr int KT_PER_CHUNK = SCHED_KCHUNK / BK;
        static_assert(SCHED_KCHUNK % BK == 0, "a K chunk must hold whole k-tiles");
};

/* ---- PTX wrappers (sm_90) ------------------------------------------------ */

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                     : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
        asm volatile("{\n.reg .pred p;\n"
                     "WAIT_%=:\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                     "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
                     "r"(parity)
                     : "memory");
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *tmap, uint32_t bar, int32_t x, int32_t y)
{
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                     "l"(tmap), "r"(bar), "r"(x), "r"(y)
                     : "memory");
}

__device__ __forceinline__ void tmap_prefetch(const void *tmap)
{
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

/* Shared to global through a tensor map (clipped at the matrix edges), in
 * this thread's bulk group; commit, then wait until the copies issued so
 * far have read their shared memory (.read), or have finished. */
__device__ __forceinline__ void tma_store_2d(const void *tmap, uint32_t src, int32_t x, int32_t y)
{
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(tmap),
                     "r"(src), "r"(x), "r"(y)
                     : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void named_bar(uint32_t id, uint32_t n)
{
        asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* ---- the resident kernel's hand-offs (cuda_gemm_res_launch) -------------- */

/* The area (device memory): the launch data of each slot, then per slot
 * what every CTA needs of the group, when it is ready, and how many
 * of its CTAs are done with it (groups of more than one). */
struct ResSlot {
        KParams kp;
        const char *tmaps;
        const uint64_t *words; /* cuda_res_post.words, NULL: none */
        uint32_t nctas;        /* the plan's, for res_group_done (each CTA reads its part from the mark) */
};
/* GEMMD_RTRACE (a diagnostic build): a resident group's device clock
 * (globaltimer) where one of its CTAs saw its mark, where a consumer found
 * its first stage full, and where a consumer reached its end (C's stores
 * issued); the last writer's stay. res_group_done hands them to the
 * host's done record (pad) with the time the last arrival was counted. */
enum { RT_TAKE, RT_FULL, RT_END, RT_N };
#ifdef GEMMD_RTRACE
#define RT_AT(meta, slot, i) ((meta)->trace[slot][i] = globaltimer())
#else
#define RT_AT(meta, slot, i) ((void)(slot))
#endif

#ifdef GEMMD_RTRACE
/* Per dispatcher: rounds read, their ns, posts taken, posts whose fields
 * came a round before the rest, rounds of fields alone, and over those
 * early rounds the lowest word missing and the words the post needed
 * (grouped_gemm.cu, rread_print, at exit). */
enum { RR_ROUNDS, RR_NS, RR_POSTS, RR_TORN, RR_LAZY, RR_LOW, RR_NW, RR_N };
__device__ unsigned long long g_rr[CUDA_RES_DISPATCHERS_MAX][RR_N];
#define RR_ADD(d, i, v) (g_rr[d][i] += (v))
#endif

struct ResMeta {
        ResSlot slot[CUDA_RES_SLOTS];
        alignas(128) uint64_t ready[CUDA_RES_SLOTS]; /* res_mark(seq, ...); an exit: RES_EXIT_BIT | gen */
        alignas(128) uint32_t count[CUDA_RES_SLOTS];
        uint64_t exit_seq; /* the highest seq an exit was marked at, written before the mark */
        uint64_t trace[CUDA_RES_SLOTS][RT_N]; /* GEMMD_RTRACE: RT_AT */
};

__device__ __forceinline__ size_t res_slots_bytes(uint64_t slot_bytes)
{
        return (size_t)slot_bytes * CUDA_RES_SLOTS;
}
__device__ __forceinline__ ResMeta *res_meta(const ResArgs &r)
{
        return (ResMeta *)(r.area + res_slots_bytes(r.slot_bytes));
}
__device__ __forceinline__ uint64_t ld_acquire_gpu(const uint64_t *p)
{
        uint64_t v;
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
        return v;
}
__device__ __forceinline__ void st_release_gpu(uint64_t *p, uint64_t v)
{
        asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(uint64_t *p, uint64_t v)
{
        asm volatile("st.release.sys.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t globaltimer()
{
        uint64_t t;
        asm volatile("mov.u64 %0, %globaltimer;\n" : "=l"(t));
        return t;
}

#ifdef GEMMD_KTRACE
/*
 * Phase timing of the 16-bit Hopper kernel, for a diagnostic build only
 * (the make line is in the README's Performance section): each CTA with
 * work stamps its SM clock at entry, once its barriers are set up, once
 * its first plan entries and problems are read, at its first copy issued,
 * when that stage is full, at the end of its first tile's k-loop, once
 * that tile's C is staged in shared memory and once it is stored, and at
 * its end; it adds the intervals to g_kt, and the process prints their
 * means over CTAs and launches at exit (grouped_gemm.cu, ktrace_print).
 * The stamps cost a little: the figures compare phases, they do not time
 * gemmd.
 */
enum { KT_ENTRY, KT_INIT, KT_PLAN, KT_ISSUE, KT_FULL, KT_MMA, KT_STAGED, KT_STORE, KT_END, KT_N };
__device__ unsigned long long g_kt[KT_N + 3]; /* intervals, CTAs, warpgroup tiles, ns entry to end */
#define KT_AT(s, i) ((s)[i] = clock64())
#else
#define KT_AT(s, i) ((void)0)
#endif

/* Rounds of the post's reading without a post before only its fields are
 * read (about 2 us each over PCIe): while groups come, every round reads
 * what a lone group's post needs. */
#define RES_IDLE_ROUNDS 64

__device__ __forceinline__ void ld_relaxed_sys_v2(const uint64_t *p, uint64_t &a, uint64_t &b)
{
        asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];\n" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

/* Slabs of 192 words whose loads one read has in flight at once: the
 * words every poll reads (CUDA_RES_SPEC) in one round trip. */
#define RES_BATCH (CUDA_RES_SPEC / 192)

/*
 * One read of a post's tagged words (res_post.h) by 96 threads: slabs
 * [0, s1) of 192 words, thread t taking words 192u + 2t and the next of
 * slab u, RES_BATCH slabs' loads in flight at once. Each word of post seq is
 * kept where it goes (the post's fields in hdr, its launch data at dst,
 * the slot of the area); returns the lowest index of a word read without
 * it (UINT32_MAX: none).
 */
__device__ __forceinline__ uint32_t res_read(const uint64_t *w, uint32_t s1, uint64_t seq, uint32_t *hdr,
                                             uint32_t *dst, int t)
{
        constexpr uint32_t HW = RES_POST_FIELD_WORDS;
        uint32_t low = UINT32_MAX;
        for (uint32_t u0 = 0; u0 < s1; u0 += RES_BATCH) {
                uint64_t v[2 * RES_BATCH];
#pragma unroll
                for (uint32_t j = 0; j < RES_BATCH; j++) {
                        const uint32_t i = 192 * (u0 + j) + 2 * t;
                        if (u0 + j < s1 && i < CUDA_RES_WORDS)
                                ld_relaxed_sys_v2(w + i, v[2 * j], v[2 * j + 1]);
                }
#pragma unroll
                for (uint32_t j = 0; j < 2 * RES_BATCH; j++) {
                        const uint32_t i = 192 * (u0 + j / 2) + 2 * t + j % 2;
                        if (u0 + j / 2 >= s1 || i >= CUDA_RES_WORDS)
                                continue;
                        if (!res_tag_ok(v[j], seq))
                                low = min(low, i);
                        else if (i < HW)
                                hdr[i] = (uint32_t)v[j];
                        else
                                dst[i - HW] = (uint32_t)v[j];
                }
        }
        return low;
}

/*
 * Warps 1-3 of CTA d, for d below r.ndisp: for each posted group of seq
 * first_seq + d + i * ndisp, read its post (res_read)
 * until every word it needs carries its seq: its fields and, when they
 * fit, its launch data come in the same round trip over PCIe; launch data
 * in pinned memory beyond the post (src) is copied after them. Then make
 * the tensor maps among it visible to the copy engine's tensormap proxy,
 * and mark the slot ready for the producers of every CTA. A stop (the
 * host's stop word at this launch's generation, with no post) is passed
 * on the same way; the host stores it after its last post to this
 * launch, so one more read after seeing it, ordered by a fence, finds any
 * such post. Each of the ndisp dispatchers takes every ndisp-th group,
 * so a group's post is read while the ones before it are still being
 * taken: one dispatcher takes a post at most every round trip, which
 * held up groups posted in quick succession.
 */
__device__ __noinline__ void res_dispatch(const ResArgs r, int t, uint32_t d)
{
#ifdef GEMMD_SM90A
        ResMeta *meta = res_meta(r);
        constexpr uint32_t HW = RES_POST_FIELD_WORDS, SPEC = CUDA_RES_SPEC / 192;
        static_assert(sizeof(struct cuda_res_post) == 4 * CUDA_RES_WORDS && HW <= 32 && CUDA_RES_SPEC % 192 == 0,
                      "post");
        __shared__ uint32_t s_hdr[HW];
        __shared__ uint32_t s_low[2]; /* by round: the lowest word read without its tag */
        __shared__ int s_stop;
        const struct cuda_res_post *sp = (const struct cuda_res_post *)s_hdr;
        if (t == 0)
                s_low[0] = s_low[1] = UINT32_MAX;
        named_bar(4, 96);
        uint32_t round = 0, idle = 0;
        for (uint64_t seq = r.first_seq + d;; seq += r.ndisp) {
                const uint32_t slot = (uint32_t)(seq % CUDA_RES_SLOTS);
                char *dst = r.area + (size_t)slot * r.slot_bytes;
                uint32_t nw = 0; /* words the post needs, once its fields are in */
                bool stopping = false, whole = false;
                uint64_t tp = 0;
                for (;;) {
                        const uint32_t rb = round++ & 1;
                        /* Idle for long: the fields alone (16 threads). */
                        const bool lazy = idle >= RES_IDLE_ROUNDS && nw == 0;
                        const uint32_t s1 = lazy ? (t < (int)HW / 2) : max(SPEC, (nw + 191) / 192);
                        int stop = 0;
#ifdef GEMMD_RTRACE
                        const uint64_t rt0 = t == 0 ? globaltimer() : 0;
#endif
                        if (t == 0) {
                                uint64_t v;
                                asm volatile("ld.relaxed.sys.global.u64 %0, [%1];\n"
                                             : "=l"(v)
                                             : "l"(&r.host->stop)
                                             : "memory");
                                stop = v >= r.gen;
                        }
                        uint32_t low = res_read(r.posts->post[slot], s1, seq, s_hdr, (uint32_t *)dst, t);
                        low = min(low, lazy ? HW : 192 * s1);
                        atomicMin(&s_low[rb], low);
                        if (t == 0) {
                                s_low[rb ^ 1] = UINT32_MAX;
                                s_stop = stop;
                        }
                        named_bar(4, 96);
                        low = s_low[rb];
                        const bool fields = low >= HW && res_post_is(sp, seq);
                        const bool other_gen = fields && sp->gen != r.gen;
                        if (fields && !other_gen)
                                nw = res_post_words(sp);
                        whole = fields && !other_gen && low >= nw;
                        stop = s_stop;
#ifdef GEMMD_RTRACE
                        if (t == 0) {
                                RR_ADD(d, RR_ROUNDS, 1);
                                RR_ADD(d, RR_NS, globaltimer() - rt0);
                                RR_ADD(d, RR_LAZY, lazy);
                                if (fields && !other_gen && !whole && !tp) {
                                        RR_ADD(d, RR_TORN, 1);
                                        RR_ADD(d, RR_LOW, low);
                                        RR_ADD(d, RR_NW, nw);
                                }
                                RR_ADD(d, RR_POSTS, whole);
                        }
#endif
                        named_bar(4, 96);
                        if (whole || other_gen)
                                break;
                        if (fields) {
                                idle = 0;
                                if (t == 0 && !tp)
                                        tp = globaltimer();
                                continue;
                        }
                        if (stop) {
                                if (stopping)
                                        break;
                                /* Whatever was posted before the stop is
                                 * seen by the next read. */
                                stopping = true;
                                asm volatile("fence.acq_rel.sys;\n" ::: "memory");
                                continue;
                        }
                        if (++idle > RES_IDLE_ROUNDS)
                                __nanosleep(64);
                }
                /* No post for this launch: a stop came first. Each
                 * dispatcher marks an exit at its first seq without a
                 * post, raising exit_seq to it first (res_mark.h: each
                 * CTA ends at one of these exits). */
                if (!whole) {
                        if (t == 0) {
                                atomicMax((unsigned long long *)&meta->exit_seq, (unsigned long long)seq);
                                st_release_gpu(&meta->ready[slot], RES_EXIT_BIT | r.gen);
                        }
                        return;
                }
                idle = 0;
                if (t == 0 && !tp)
                        tp = globaltimer();
                const uint4 *src = (const uint4 *)(uintptr_t)sp->src;
                const uint32_t n = sp->bytes / 16;
                if (src)
                        asm volatile("fence.acq_rel.sys;\n" ::: "memory"); /* the fields before what they name */
                constexpr uint32_t U = 8;
                for (uint32_t i0 = t; src && i0 < n; i0 += 96 * U) {
                        uint4 v[U];
#pragma unroll
                        for (uint32_t u = 0; u < U; u++)
                                if (i0 + u * 96 < n)
                                        v[u] = __ldcv(src + i0 + u * 96); /* not from a cache */
#pragma unroll
                        for (uint32_t u = 0; u < U; u++)
                                if (i0 + u * 96 < n)
                                        ((uint4 *)dst)[i0 + u * 96] = v[u];
                }
                if (t == 0) {
                        ResSlot &rs = meta->slot[slot];
                        KParams kp = KParams{};
                        kp.probs = (const struct gemmd_kproblem *)(dst + sp->probs);
                        kp.nprobs = sp->nprobs;
                        kp.cta_begin = (const uint32_t *)(dst + sp->cta_begin);
                        kp.entries = (const struct sched_entry *)(dst + sp->entries);
                        kp.split_parts = (const uint32_t *)(dst + sp->split_parts);
                        kp.split_ws = (const uint32_t *)(dst + sp->split_ws);
                        kp.ws = (float *)(uintptr_t)sp->ws;
                        kp.arrivals = (uint32_t *)(uintptr_t)sp->arrivals;
                        kp.tile_rows = sp->tile_rows;
                        rs.kp = kp;
                        rs.tmaps = dst + sp->tmaps;
                        rs.words = sp->words ? (const uint64_t *)(dst + sp->words) : nullptr;
                        rs.nctas = sp->nctas;
                        r.host->done[slot].tp = tp;
                        r.host->done[slot].t0 = globaltimer();
                }
                /* Generic writes of tensor maps, read next through the
                 * tensormap proxy (the producers acquire each map). */
                asm volatile("fence.proxy.tensormap::generic.release.gpu;\n" ::: "memory");
                /* The barrier orders the other threads' writes before
                 * thread 0's release, which is cumulative: one fence. */
                named_bar(4, 96);
                if (t == 0)
                        st_release_gpu(&meta->ready[slot], res_mark(seq, sp->nctas, sp->rot));
        }
#endif
}

/* Stores completion word value v at address w (0: none), after the
 * caller's system-scope fence over the stores it stands for. */
__device__ __forceinline__ void store_word_at(uint64_t w, uint64_t v)
{
        if (w)
                asm volatile("st.relaxed.sys.global.u64 [%0], %1;\n" ::"l"(w), "l"(v) : "memory");
}

/* Stores problem i's completion word, if it has one (words[2i]: its
 * address, 0: none; words[2i + 1]: the value, cuda_group.early_word). */
__device__ __forceinline__ void store_word(const uint64_t *words, uint32_t i)
{
        store_word_at(words[2 * i], words[2 * i + 1]);
}

/* The last of the plan's CTAs done with a group (one arrival a CTA, by
 * its consumers' thread 0 after their barrier) tells the host: first each
 * client in its completion word (the group's C stores are ordered before
 * them by the system-scope fence, which for a group of one CTA is the
 * only one), then the daemon. What the words need is read beside the
 * count, so that nothing but the fence stands between the last arrival
 * and the first word; the count is zeroed for the slot's next group after
 * them (that group is posted only once the host has seen this one done,
 * which is released after). */
__device__ __forceinline__ void res_group_done(const ResArgs &r, uint32_t slot, uint64_t seq)
{
        ResMeta *meta = res_meta(r);
        const ResSlot &rs = meta->slot[slot];
        const uint32_t nctas = rs.nctas, nprobs = rs.kp.nprobs;
        const uint64_t *words = rs.words;
        const uint64_t w0 = words ? words[0] : 0, v0 = words ? words[1] : 0;
        if (nctas > 1) {
                __threadfence();
                if (atomicAdd(&meta->count[slot], 1u) != nctas - 1)
                        return;
        }
#ifdef GEMMD_RTRACE
        for (int i = 0; i < RT_N; i++)
                r.host->done[slot].pad[i] = meta->trace[slot][i];
        r.host->done[slot].pad[RT_N] = globaltimer();
#endif
        asm volatile("fence.acq_rel.sys;\n" ::: "memory");
        store_word_at(w0, v0);
        for (uint32_t i = 1; words && i < nprobs; i++)
                store_word(words, i);
        r.host->done[slot].t1 = globaltimer();
        if (nctas > 1)
                atomicExch(&meta->count[slot], 0u);
        __threadfence_system();
        st_release_sys(&r.host->done[slot].seq, seq);
}

/* One arrival for problem `prob` (cuda_group.early_*), made by the helper
 * warp after its fence over the stores it stands for; the last one tells
 * the host that the problem's C is whole (it has read every other
 * arrival, and its system-scope fence orders them before what follows):
 * first the client, in its completion word if it has one, then the
 * daemon's flag, released after the word. */
__device__ __forceinline__ void early_arrive(const KParams &kp, uint32_t prob)
{
        if (atomicAdd(&kp.early_cnt[prob], 1u) + 1 != kp.early_need[prob])
                return;
        kp.early_cnt[prob] = 0; /* all of this launch's arrivals are in: zero for the next */
        asm volatile("fence.acq_rel.sys;\n" ::: "memory");
        if (kp.early_word)
                store_word(kp.early_word, prob);
        asm volatile("st.release.sys.global.u32 [%0], %1;\n" ::"l"(kp.early_flag + prob), "r"(kp.early_seq)
                     : "memory");
}

/* Early completion's queue in shared memory: consumer warpgroup c puts
 * the problem of each entry it is done with (its stores of C issued) in
 * q[c], and the helper warp makes the arrivals. EQ_END closes a queue. */
constexpr uint32_t EQ = 16, EQ_END = UINT32_MAX;
struct EarlyQ {
        uint32_t q[2][EQ];
        uint32_t head[2], tail[2];
};

/* The helper warp's loop (lane 0): it looks at what both consumers have
 * queued, fences once for all of it (cumulative: the consumers' stores
 * came before their barrier and queue entry, which it has read), then
 * arrives for each entry and gives the slots back. The consumers never
 * wait for a fence. Its parameters come from the launch's parameter
 * space (KArgs), not from the consumers' copy: their registers are
 * left alone. */
__device__ __noinline__ void early_helper(const KArgs &a, EarlyQ *eq)
{
        KParams kp;
        uint32_t t[2] = {0, 0}, h[2];
        int open = 2;

        kp.early_cnt = a.kp.early_cnt;
        kp.early_need = rebase(a, a.kp.early_need);
        kp.early_flag = a.kp.early_flag;
        kp.early_seq = a.kp.early_seq;
        kp.early_word = rebase(a, a.kp.early_word);
        while (open) {
                for (int c = 0; c < 2; c++)
                        asm volatile("ld.acquire.cta.shared.u32 %0, [%1];\n"
                                     : "=r"(h[c])
                                     : "r"(smem_u32(&eq->head[c]))
                                     : "memory");
                if (h[0] == t[0] && h[1] == t[1]) {
                        __nanosleep(100);
                        continue;
                }
                __threadfence();
                for (int c = 0; c < 2; c++) {
                        for (; t[c] != h[c]; t[c]++) {
                                const uint32_t prob = eq->q[c][t[c] % EQ];
                                if (prob == EQ_END)
                                        open--;
                                else
                                        early_arrive(kp, prob);
                        }
                        asm volatile("st.release.cta.shared.u32 [%0], %1;\n" ::"r"(smem_u32(&eq->tail[c])),
                                     "r"(t[c])
                                     : "memory");
                }
        }
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait()
{
        asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accesses of r across this point (the
 * accumulators are written asynchronously by wgmma). */
__device__ __forceinline__ void reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }

/* Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups
 * 1024 bytes apart (the layout TMA writes for a 64-element-wide box). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr)
{
        return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
               ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wgmma_128_bf16(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_128_f16(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_128_tf32(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_192_bf16(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_192_f16(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_192_tf32(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_64_bf16(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_64_f16(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_64_tf32(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
{
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(da), "l"(db), "r"(scale_d));
}

template <typename T> __device__ __forceinline__ void wgmma_128(float *d, uint64_t da, uint64_t db, uint32_t scale_d);
template <> __device__ __forceinline__ void wgmma_128<__nv_bfloat16>(float *d, uint64_t da, uint64_t db, uint32_t s)
{
        wgmma_128_bf16(d, da, db, s);
}
template <> __device__ __forceinline__ void wgmma_128<__half>(float *d, uint64_t da, uint64_t db, uint32_t s)
{
        wgmma_128_f16(d, da, db, s);
}
template <> __device__ __forceinline__ void wgmma_128<float>(float *d, uint64_t da, uint64_t db, uint32_t s)
{
        wgmma_128_tf32(d, da, db, s);
}

/* The same with scale-d 0 written as an immediate: d is output only, so
 * the old accumulators are dead before a chunk's first wgmma (every
 * measured kernel has it; ptxas reported the same spills without it). */
__device__ __forceinline__ void wgmma_128_bf16_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 0, 1, 1, 0, 0;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_128_f16_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 0, 1, 1, 0, 0;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_128_tf32_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 0, 1, 1;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_192_bf16_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, 0, 1, 1, 0, 0;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63]), "=f"(d[64]), "=f"(d[65]), "=f"(d[66]), "=f"(d[67]), "=f"(d[68]), "=f"(d[69]), "=f"(d[70]), "=f"(d[71]), "=f"(d[72]), "=f"(d[73]), "=f"(d[74]), "=f"(d[75]), "=f"(d[76]), "=f"(d[77]), "=f"(d[78]), "=f"(d[79]), "=f"(d[80]), "=f"(d[81]), "=f"(d[82]), "=f"(d[83]), "=f"(d[84]), "=f"(d[85]), "=f"(d[86]), "=f"(d[87]), "=f"(d[88]), "=f"(d[89]), "=f"(d[90]), "=f"(d[91]), "=f"(d[92]), "=f"(d[93]), "=f"(d[94]), "=f"(d[95])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_192_f16_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, 0, 1, 1, 0, 0;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63]), "=f"(d[64]), "=f"(d[65]), "=f"(d[66]), "=f"(d[67]), "=f"(d[68]), "=f"(d[69]), "=f"(d[70]), "=f"(d[71]), "=f"(d[72]), "=f"(d[73]), "=f"(d[74]), "=f"(d[75]), "=f"(d[76]), "=f"(d[77]), "=f"(d[78]), "=f"(d[79]), "=f"(d[80]), "=f"(d[81]), "=f"(d[82]), "=f"(d[83]), "=f"(d[84]), "=f"(d[85]), "=f"(d[86]), "=f"(d[87]), "=f"(d[88]), "=f"(d[89]), "=f"(d[90]), "=f"(d[91]), "=f"(d[92]), "=f"(d[93]), "=f"(d[94]), "=f"(d[95])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_192_tf32_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, 0, 1, 1;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63]), "=f"(d[64]), "=f"(d[65]), "=f"(d[66]), "=f"(d[67]), "=f"(d[68]), "=f"(d[69]), "=f"(d[70]), "=f"(d[71]), "=f"(d[72]), "=f"(d[73]), "=f"(d[74]), "=f"(d[75]), "=f"(d[76]), "=f"(d[77]), "=f"(d[78]), "=f"(d[79]), "=f"(d[80]), "=f"(d[81]), "=f"(d[82]), "=f"(d[83]), "=f"(d[84]), "=f"(d[85]), "=f"(d[86]), "=f"(d[87]), "=f"(d[88]), "=f"(d[89]), "=f"(d[90]), "=f"(d[91]), "=f"(d[92]), "=f"(d[93]), "=f"(d[94]), "=f"(d[95])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_64_bf16_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 0, 1, 1, 0, 0;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_64_f16_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 0, 1, 1, 0, 0;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
                     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_64_tf32_z(float *d, uint64_t da, uint64_t db)
{
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 0, 1, 1;\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
                     : "l"(da), "l"(db));
}

/* m64nBNk(32 bytes) with scale-d 0: d = A B, write only. BN: NARROW_BN,
 * 128 or WIDE_BN. */
template <typename T, int BN> __device__ __forceinline__ void wgmma_n_z(float *d, uint64_t da, uint64_t db)
{
        static_assert(BN == 64 || BN == 128 || BN == 192, "no wgmma wrapper for this N");
        if constexpr (std::is_same<T, __nv_bfloat16>::value)
                BN == 64 ? wgmma_64_bf16_z(d, da, db)
                         : BN == 128 ? wgmma_128_bf16_z(d, da, db) : wgmma_192_bf16_z(d, da, db);
        else if constexpr (std::is_same<T, __half>::value)
                BN == 64 ? wgmma_64_f16_z(d, da, db)
                         : BN == 128 ? wgmma_128_f16_z(d, da, db) : wgmma_192_f16_z(d, da, db);
        else
                BN == 64 ? wgmma_64_tf32_z(d, da, db)
                         : BN == 128 ? wgmma_128_tf32_z(d, da, db) : wgmma_192_tf32_z(d, da, db);
}

/* m64nBNk(32 bytes): BN NARROW_BN, 128 or WIDE_BN. */
template <typename T, int BN> __device__ __forceinline__ void wgmma_n(float *d, uint64_t da, uint64_t db, uint32_t s)
{
        if constexpr (BN == 128) {
                wgmma_128<T>(d, da, db, s);
        } else if constexpr (BN == 64) {
                if constexpr (std::is_same<T, __nv_bfloat16>::value)
                        wgmma_64_bf16(d, da, db, s);
                else if constexpr (std::is_same<T, __half>::value)
                        wgmma_64_f16(d, da, db, s);
                else
                        wgmma_64_tf32(d, da, db, s);
        } else {
                static_assert(BN == 192, "no wgmma wrapper for this N");
                if constexpr (std::is_same<T, __nv_bfloat16>::value)
                        wgmma_192_bf16(d, da, db, s);
                else if constexpr (std::is_same<T, __half>::value)
                        wgmma_192_f16(d, da, db, s);
                else
                        wgmma_192_tf32(d, da, db, s);
        }
}

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi)
{
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&v;
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi)
{
        __half2 v = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&v;
}

/* The 16-bit value whose bits are b. */
template <typename T> __device__ __forceinline__ T bits_as(uint16_t b)
{
        T v;
        memcpy(&v, &b, sizeof(v));
        return v;
}

/* The shared address of 16-byte chunk `chunk` (rows 8 chunk ..) of column
 * col in a 16-bit staging buffer at epi (1024-byte aligned): 128 bytes a
 * column, chunk j at j ^ (col % 8), the layout TMA's 128-byte swizzle
 * gives a box of 64 rows. The 8 columns of an stmatrix or ldmatrix 8 x 8
 * matrix and the 8 chunks of a column both fall on 8 distinct 16-byte
 * bank groups. */
__device__ __forceinline__ uint32_t epi_at(uint32_t epi, int col, int chunk)
{
        return epi + (uint32_t)col * 128u + ((uint32_t)(chunk ^ (col & 7)) << 4);
}

/*
 * The 16-bit epilogue moves a consumer's 64 x BN block of C between its
 * staging buffer and C by vectors of 8 rows of one column: vector v = wt +
 * s * 128 of thread wt is column v / 8, rows 8 (v % 8).. of the block.
 * c_vec_whole: whether the vector at (gi, gj) moves as one 16-byte access
 * (cvec: C's address and ldc allow them; all 8 rows inside C and, for a
 * SYR2K, inside its triangle); otherwise its elements go one at a time,
 * those c_row_in.
 */
__device__ __forceinline__ bool c_vec_ok(const struct gemmd_kproblem &p)
{
        return (p.c & 15u) == 0 && p.ldc % 8 == 0;
}

__device__ __forceinline__ bool c_vec_whole(const struct gemmd_kproblem &p, bool cvec, uint32_t gi, uint32_t gj,
                                            bool lower, bool upper)
{
        const bool in_tri = lower ? gi >= gj : upper ? gi + 7 <= gj : true;
        return cvec && gi + 8 <= p.m && in_tri;
}

__device__ __forceinline__ bool c_row_in(const struct gemmd_kproblem &p, uint32_t gi, uint32_t gj, bool lower,
                                         bool upper)
{
        return gi < p.m && !(lower && gi < gj) && !(upper && gi > gj);
}

__device__ __forceinline__ void cpa16(uint32_t dst, const void *src)
{
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cpa_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cpa_wait() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

/*
 * A consumer's 64 rows of C at (r0, n0) into its staging buffer (shared
 * address epi, laid out as epi_at says), as the 16-bit epilogue's stores
 * read it back out, BN / 16 vectors a thread, all of a batch loaded before
 * any is stored, so that the tile waits for the memory once rather than
 * once per element (64 two-byte loads a thread, each behind the last).
 * Elements outside C, and outside a SYR2K's triangle, are not read: they
 * stage as zero and are never stored. REST: the whole vectors are on
 * their way already (c_stage_pre); only the others are staged.
 */
template <typename T, int BN, bool REST = false>
__device__ __forceinline__ void c_stage_in(const struct gemmd_kproblem &p, const T *cptr, uint32_t r0, uint32_t n0,
                                           uint32_t wt, uint32_t epi, bool lower, bool upper)
{
        constexpr int NV = BN / 16;
        constexpr int CB = NV % 8 == 0 ? 8 : 4; /* vectors in flight a thread */
        static_assert(NV % CB == 0, "whole batches");
        const bool cvec = c_vec_ok(p);
#pragma unroll
        for (int b = 0; b < NV; b += CB) {
                uint4 val[CB];
                bool put[CB];
#pragma unroll
                for (int i = 0; i < CB; i++) {
                        const int v = wt + (b + i) * 128, col = v >> 3, rv = v & 7;
                        const uint32_t gi = r0 + rv * 8, gj = n0 + col;
                        val[i] = make_uint4(0u, 0u, 0u, 0u);
                        put[i] = true;
                        if (gi >= p.m || gj >= p.n)
                                continue;
                        const T *src = cptr + gi + (int64_t)gj * p.ldc;
                        if (c_vec_whole(p, cvec, gi, gj, lower, upper)) {
                                if (REST)
                                        put[i] = false;
                                else
                                        val[i] = *(const uint4 *)src;
                        } else {
                                uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
                                for (int x = 0; x < 8; x++)
                                        if (c_row_in(p, gi + x, gj, lower, upper)) {
                                                uint16_t bits;
                                                memcpy(&bits, src + x, 2);
                                                w[x >> 1] |= (uint32_t)bits << (16 * (x & 1));
                                        }
                                val[i] = make_uint4(w[0], w[1], w[2], w[3]);
                        }
                }
#pragma unroll
                for (int i = 0; i < CB; i++) {
                        const int v = wt + (b + i) * 128, col = v >> 3, rv = v & 7;
                        if (put[i])
                                asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(epi_at(epi, col, rv)),
                                             "r"(val[i].x), "r"(val[i].y), "r"(val[i].z), "r"(val[i].w)
                                             : "memory");
                }
        }
}

/*
 * c_stage_in's whole vectors, by cp.async, while the tensor cores
 * still work on the tile (the caller commits them, and the epilogue waits
 * for them, then stages the rest: c_stage_in<REST>). The tile then waits
 * for C's memory not at all, or once for the vectors on its edges. A loop,
 * not unrolled: it runs beside the k-loop's live registers.
 */
template <typename T, int BN>
__device__ __forceinline__ void c_stage_pre(const struct gemmd_kproblem &p, const T *cptr, uint32_t r0, uint32_t n0,
                                            uint32_t wt, uint32_t epi, bool lower, bool upper)
{
        constexpr int NV = BN / 16;
        const bool cvec = c_vec_ok(p);
#pragma unroll 1
        for (int i = 0; i < NV; i++) {
                const int v = wt + i * 128, col = v >> 3, rv = v & 7;
                const uint32_t gi = r0 + rv * 8, gj = n0 + col;
                if (gi < p.m && gj < p.n && c_vec_whole(p, cvec, gi, gj, lower, upper))
                        cpa16(epi_at(epi, col, rv), cptr + gi + (int64_t)gj * p.ldc);
        }
}

/* ---- the work of a CTA --------------------------------------------------- */

struct Work {
        uint32_t prob, tile, kc0, kc1, split;
};

/* Walks this CTA's work: its plan entries, or in device mode the tiles
 * blockIdx.x, blockIdx.x + gridDim.x, ... of the concatenated problems.
 * Called by whole warps (device mode scans with warp collectives); every
 * warp that walks sees the same sequence. Entries of problems the other
 * kernel computes (kp.fast) are skipped. */
struct WorkIter {
        uint32_t e, e1;           /* plan mode */
        uint32_t t, pbase, tbase; /* device mode */
};

__device__ __forceinline__ WorkIter work_begin(const KParams &kp)
{
        WorkIter it = {0, 0, blockIdx.x, 0, 0};
        if (kp.cta_begin) {
                it.e = kp.cta_begin[blockIdx.x];
                it.e1 = kp.cta_begin[blockIdx.x + 1];
        }
        return it;
}

template <int BK, int BN> __device__ __forceinline__ bool work_next(const KParams &kp, WorkIter &it, Work &w)
{
        const struct sched_shape shape = {WCfg::BM, BN, BK};
        for (;;) {
                if (kp.cta_begin) {
                        if (it.e >= it.e1)
                                return false;
                        const struct sched_entry en = kp.entries[it.e++];
                        w.prob = en.problem;
                        w.tile = en.tile;
                        w.kc0 = en.kc_begin;
                        w.kc1 = en.kc_end;
                        w.split = en.split;
                } else {
                        const uint32_t t = it.t;
                        uint32_t local = 0;
                        it.t += gridDim.x;
                        const uint32_t prob = warp_map_tile(kp, shape, t, it.pbase, it.tbase, local);
                        if (prob == UINT32_MAX)
                                return false;
                        w.prob = prob;
                        w.tile = local;
                        w.kc0 = 0;
                        w.kc1 = sched_kchunks(kp.probs[prob].k);
                        w.split = SCHED_NO_SPLIT;
                }
                if (!kp.fast || (kp.fast[w.prob] != 0) == kp.want_fast)
                        return true;
        }
}

/* Tile origin and k-tile count of a unit of work on tiles of bm rows
 * (KParams.tile_rows). */
template <int BK, int BN>
__device__ __forceinline__ void work_geom(const struct gemmd_kproblem &p, const Work &w, uint32_t bm, uint32_t &m0,
                                          uint32_t &n0, uint32_t &kbeg, uint32_t &niter)
{
        const struct sched_problem sp = to_sched(p);
        const struct sched_shape shape = {bm, BN, BK};
        uint32_t row = 0, col = 0, klen;
        sched_tile_coord(&sp, shape, w.tile, &row, &col);
        m0 = row * bm;
        n0 = col * BN;
        sched_chunk_span(p.k, w.kc0, w.kc1, &kbeg, &klen);
        niter = (klen + BK - 1) / BK;
}

/* PWork::tri: a SYR2K (two terms per chunk, a triangle of C), and which. */
enum : uint32_t { TRI_SYR2K = 1, TRI_UPPER = 2 };
/* In the tile header's flags beside them: the problem has a tensor map of
 * C, for the staged f32 epilogue (c_staged) or the 16-bit one's TMA
 * store (flag bit 4 of cuda_gemm_tmaps_build); a half tile (its rows fit in
 * 64) that consumer 0 or 1 computes alone (neither: both, 64 rows each). */
enum : uint32_t { HDR_TMA_C = 4, HDR_OWN0 = 8, HDR_OWN1 = 16 };
/* The resident kernel's group boundaries, in a header's problem word (h[1]:
 * slot, h[2..3]: seq); UINT32_MAX ends the work. */
enum : uint32_t { HDR_GROUP_START = UINT32_MAX - 2, HDR_GROUP_END = UINT32_MAX - 1 };

/* What the producer needs of a unit of work. */
struct PWork {
        uint32_t prob, m0, n0, kbeg, niter, kc0, split;
        uint32_t m, n, k; /* what the consumers need of the problem */
        uint32_t tri;     /* SYR2K: TRI_SYR2K | uplo (TRI_UPPER); GEMM 0 */
        uint32_t cmap;    /* HDR_TMA_C where the kernel stores C through its map */
        uint64_t c;
        int64_t ldc;
        float alpha, beta;
};

/* What the producer needs of unit w of problem p, on tiles of `rows` rows
 * (KParams.tile_rows; 0: the usual WCfg::BM). A tile of 64 rows (the half
 * tile's plan) names the problem's rows as ending with it, so that the
 * walk takes it for a half tile (one consumer computes it) and its
 * epilogue stores no row of the next. */
template <int BK, int BN>
__device__ __forceinline__ PWork pwork(const struct gemmd_kproblem &p, const Work &w, uint32_t rows)
{
        const uint32_t bm = rows ? rows : (uint32_t)WCfg::BM;
        PWork x;
        x.prob = w.prob;
        x.kc0 = w.kc0;
        x.split = w.split;
        x.m = p.m;
        x.n = p.n;
        x.k = p.k;
        x.c = p.c;
        x.ldc = p.ldc;
        x.alpha = p.alpha;
        x.beta = p.beta;
        x.tri = p.kind == SCHED_SYR2K ? TRI_SYR2K | (p.uplo ? TRI_UPPER : 0u) : 0u;
        x.cmap = 0;
        work_geom<BK, BN>(p, w, bm, x.m0, x.n0, x.kbeg, x.niter);
        if (bm < WCfg::BM)
                x.m = min(p.m, x.m0 + bm);
        return x;
}

/* A consumer warpgroup's position in the stage ring. */
struct Pipe {
        uint32_t stage, phase;
        int pending; /* stage whose wgmmas may still run, -1 none */
        uint32_t bars, a_off, b_off; /* the A rows this warpgroup reads (set per tile), and B, in stage 0 */
        int lane;
};

/* Issues one k-tile's wgmmas into d (scale-d 0 on the first when FRESH:
 * a chunk starts from zero), waits for the k-tile before and frees its
 * stage. */
template <typename T, bool FRESH, int BN, int BMA>
__device__ __forceinline__ void ktile(Pipe &pp, float (&d)[WCfgT<BN>::NACC])
{
        using L = KLay<T, false, BN, BMA>; /* the kernel's ring, whatever it stages */
        mbar_wait(pp.bars + 8 * pp.stage, pp.phase);
        const uint64_t da = wg_desc(pp.a_off + pp.stage * L::W::STAGE_BYTES),
                       db = wg_desc(pp.b_off + pp.stage * L::W::STAGE_BYTES);
#pragma unroll
        for (int r = 0; r < WCfgT<BN>::NACC; r++)
                reg_fence(d[r]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WCfg::ROW_BYTES / 32; kk++) { /* 32 bytes of K each */
                if (FRESH && kk == 0)
                        wgmma_n_z<T, BN>(d, da, db);
                else
                        wgmma_n<T, BN>(d, da + 2 * kk, db + 2 * kk, 1u);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (pp.lane == 0 && pp.pending >= 0)
                mbar_arrive(pp.bars + 8 * (L::STAGES + pp.pending));
        pp.pending = (int)pp.stage;
        if (++pp.stage == L::STAGES) {
                pp.stage = 0;
                pp.phase ^= 1;
        }
}

#ifndef GEMMD_X3_FOLD
#define GEMMD_X3_FOLD 1
#endif
/*
 * X3: one k-tile's products into d, once the transform warps have split
 * its stage: the small parts' products first (a_s b, a b_s), then a b.
 * FRESH: d starts from zero. DRAIN: waits for every wgmma in flight and
 * frees the stage; else waits for the k-tile before (frees its stage) as
 * ktile does. Tensor cores do not round their f32 sums to nearest, and the
 * error grows with |d| and with the number of wgmmas summed into it, so
 * run_chunk sums GEMMD_X3_FOLD k-tiles at a time into d, from zero, and
 * adds those sums in f32.
 */
template <bool FRESH, bool DRAIN> __device__ __forceinline__ void ktile_x3(Pipe &pp, float (&d)[64])
{
        using L = WLay<true>;
        mbar_wait(pp.bars + 8 * pp.stage, pp.phase);
        mbar_wait(pp.bars + 8 * (2 * L::STAGES + pp.stage), pp.phase);
        const uint32_t sa = pp.a_off + pp.stage * WCfg::STAGE_BYTES, sb = pp.b_off + pp.stage * WCfg::STAGE_BYTES;
        const uint64_t da = wg_desc(sa), db = wg_desc(sb);
        const uint64_t das = wg_desc(sa + L::SMALL_OFF), dbs = wg_desc(sb + L::SMALL_OFF);
#pragma unroll
        for (int r = 0; r < 64; r++)
                reg_fence(d[r]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WCfg::ROW_BYTES / 32; kk++) {
                if (FRESH && kk == 0)
                        wgmma_n_z<float, 128>(d, das, db);
                else
                        wgmma_128<float>(d, das + 2 * kk, db + 2 * kk, 1u);
                wgmma_128<float>(d, da + 2 * kk, dbs + 2 * kk, 1u);
        }
#pragma unroll
        for (int kk = 0; kk < WCfg::ROW_BYTES / 32; kk++)
                wgmma_128<float>(d, da + 2 * kk, db + 2 * kk, 1u);
        wgmma_commit();
        if (DRAIN) {
                wgmma_wait<0>();
#pragma unroll
                for (int r = 0; r < 64; r++)
                        reg_fence(d[r]);
        } else {
                wgmma_wait<1>();
        }
        if (pp.lane == 0 && pp.pending >= 0)
                mbar_arrive(pp.bars + 8 * (L::STAGES + pp.pending));
        pp.pending = (int)pp.stage;
        if (DRAIN) {
                if (pp.lane == 0)
                        mbar_arrive(pp.bars + 8 * (L::STAGES + pp.stage));
                pp.pending = -1;
        }
        if (++pp.stage == L::STAGES) {
                pp.stage = 0;
                pp.phase ^= 1;
        }
}

/* A chunk's k-tiles: the first (fresh) one and nk - 1 more, into d; X3:
 * GEMMD_X3_FOLD k-tiles at a time into d, and those sums in order into cs. */
template <typename T, bool X3, int BN, int BMA>
__device__ __forceinline__ void run_chunk(Pipe &pp, float (&d)[WCfgT<BN>::NACC], float (&cs)[WCfgT<BN>::NACC],
                                          uint32_t nk)
{
        if constexpr (X3) {
                constexpr uint32_t F = GEMMD_X3_FOLD;
                for (uint32_t j = 0; j < nk; j += F) {
                        const uint32_t n = min(F, nk - j);
                        if (n == 1) {
                                ktile_x3<true, true>(pp, d);
                        } else {
                                ktile_x3<true, false>(pp, d);
                                for (uint32_t i = 1; i + 1 < n; i++)
                                        ktile_x3<false, false>(pp, d);
                                ktile_x3<false, true>(pp, d);
                        }
#pragma unroll
                        for (int r = 0; r < 64; r++)
                                cs[r] = j == 0 ? d[r] : cs[r] + d[r];
                }
        } else {
                ktile<T, true, BN, BMA>(pp, d);
                for (uint32_t j = 1; j < nk; j++)
                        ktile<T, false, BN, BMA>(pp, d);
        }
}

/*
 * Split f32 (X3): x = big + small + e. big is x with its low 13 bits
 * cleared, the TF32 part wgmma reads of x anyway (so the stage keeps x);
 * small, x - big (exact in f32, |small| < 2^-10 |x|), rounded to nearest
 * TF32 (ties away, on the magnitude bits), so that wgmma reads it whole:
 * |e| <= 2^-22 |x|. The product a b is then a_s b + a b_s + a b, less
 * a_s b_s (below 2^-20 |a b|) and the rounding of the small parts.
 * Measured (gemmbench, f64 reference) this lands as close as cuBLAS's
 * FMA SGEMM; rounding big too (rewriting the stage) was a little closer
 * and 12-15 % slower. A non-finite x has small 0: an infinity times an
 * operand whose small part is 0 gives NaN, where FMA gives an infinity.
 */
__device__ __forceinline__ uint32_t tf32_small(uint32_t x)
{
        const float rest = __fsub_rn(__uint_as_float(x), __uint_as_float(x & 0xffffe000u));
        return (__float_as_uint(rest) + 0x1000u) & 0xffffe000u;
}

/* Writes the small parts of a stage's NT-thread share (thread t) into
 * small, vector for vector; four vectors in flight per thread. */
template <int NT> __device__ __forceinline__ void split_stage(const uint4 *x, uint4 *small, int t)
{
        constexpr int N = WCfg::STAGE_BYTES / 16, U = 4;
        for (int v0 = t; v0 < N; v0 += U * NT) {
                uint4 v[U];
#pragma unroll
                for (int u = 0; u < U; u++)
                        if (v0 + u * NT < N)
                                v[u] = x[v0 + u * NT];
#pragma unroll
                for (int u = 0; u < U; u++) {
                        if (v0 + u * NT >= N)
                                continue;
                        uint4 sm = make_uint4(tf32_small(v[u].x), tf32_small(v[u].y), tf32_small(v[u].z),
                                              tf32_small(v[u].w));
                        const uint32_t m = max(max(v[u].x & 0x7fffffffu, v[u].y & 0x7fffffffu),
                                               max(v[u].z & 0x7fffffffu, v[u].w & 0x7fffffffu));
                        if (m >= 0x7f800000u) { /* rare: an infinity or NaN among them */
                                sm.x = (v[u].x & 0x7f800000u) == 0x7f800000u ? 0u : sm.x;
                                sm.y = (v[u].y & 0x7f800000u) == 0x7f800000u ? 0u : sm.y;
                                sm.z = (v[u].z & 0x7f800000u) == 0x7f800000u ? 0u : sm.z;
                                sm.w = (v[u].w & 0x7f800000u) == 0x7f800000u ? 0u : sm.w;
                        }
                        small[v0 + u * NT] = sm;
                }
        }
}

/* A finished chunk sum: into the running total, or to its workspace slot. */
template <int NA> __device__ __forceinline__ void fold(float (&d)[NA], float (&tot)[NA], float *wsp)
{
#pragma unroll
        for (int r = 0; r < NA; r++)
                reg_fence(d[r]);
        if (wsp) {
#pragma unroll
                for (int r = 0; r < NA; r++)
                        __stcg(wsp + r * 256, d[r]);
        } else {
#pragma unroll
                for (int r = 0; r < NA; r++)
                        tot[r] += d[r];
        }
}

/* ---- the kernel ---------------------------------------------------------- */

/*
 * C read into a consumer warpgroup's staging buffer (beta != 0, C with a
 * tensor map), by its thread 0: the same two boxes of 32 rows x 128
 * columns that c_staged stores, so that each thread finds its elements of
 * C where it writes its results. Issued while the first chunk's last
 * wgmma batch runs (the previous tile's copy has read the buffer by then),
 * so the epilogue waits for C once a tile at most, where reading it from the
 * fragments' addresses paid the memory's latency once per group of
 * elements. The rows past the matrix's edge are filled with zeros and
 * never stored.
 */
__device__ __forceinline__ void c_load(uint32_t stg, uint32_t cbar, const char *cmap, uint32_t r0, uint32_t n0,
                                       uint32_t m)
{
        const bool two = r0 + 32 < m;
        bulk_wait_read();
        mbar_expect_tx(cbar, two ? 32768u : 16384u);
        tma_load_2d(stg, cmap, cbar, (int32_t)r0, (int32_t)n0);
        if (two)
                tma_load_2d(stg + 16384, cmap, cbar, (int32_t)(r0 + 32), (int32_t)n0);
}

/*
 * The f32 epilogue through shared memory (a consumer warpgroup: rows
 * [r0, r0 + 64) of the tile at (r0, n0)): alpha * tot, plus beta times C
 * where C was read in (WITH_C: c_load's barrier cbar, phase cphase), is
 * written into the warpgroup's 32 KiB staging buffer as two boxes of 32
 * rows x 128 columns, column-major with TMA's 128-byte swizzle (16-byte
 * chunk j of column c at chunk j ^ (c % 8): the 32 lanes of each store
 * hit 32 banks), and one thread stores the boxes through C's tensor map,
 * which clips them at the matrix edges. The consumers go on to the next
 * tile while the copy engine writes C; before writing the buffer again
 * they wait until that copy has read it. Stored from the fragments
 * instead, a TF32 tile's 64 KiB would hold up the tensor cores and the
 * next tile's loads. The same operations as the fragments' epilogue, in
 * the same order: the same bits.
 */
template <bool WITH_C, int NA>
__device__ __forceinline__ void c_staged(const float (&tot)[NA], uint32_t stg, int cw, int wt, float alpha,
                                         float beta, uint32_t cbar, uint32_t cphase, const char *cmap, uint32_t r0,
                                         uint32_t n0, uint32_t m)
{
        const int lane = wt & 31, wi = wt >> 5;
        if (WITH_C)
                mbar_wait(cbar, cphase); /* C is in (the buffer was read out before c_load) */
        else if (wt == 0)
                bulk_wait_read(); /* the previous tile's copy has read the buffer */
        named_bar(2 + cw, 128);
#pragma unroll
        for (int j = 0; j < NA / 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                        const uint32_t row = wi * 16 + (lane >> 2) + 8 * (e >> 1), col = j * 8 + (lane & 3) * 2 + (e & 1);
                        const uint32_t r = row & 31;
                        const uint32_t addr = stg + (row >> 5) * 16384 + col * 128 + ((((r >> 2) ^ (col & 7)) << 4) | ((r & 3) << 2));
                        float v = __fmul_rn(alpha, tot[j * 4 + e]);
                        if (WITH_C) {
                                float old;
                                asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(old) : "r"(addr) : "memory");
                                v = __fadd_rn(v, __fmul_rn(beta, old));
                        }
                        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
                }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* visible to the copy engine */
        named_bar(2 + cw, 128);
        if (wt == 0) {
                tma_store_2d(cmap, stg, (int32_t)r0, (int32_t)n0);
                if (r0 + 32 < m)
                        tma_store_2d(cmap, stg + 16384, (int32_t)(r0 + 32), (int32_t)n0);
                bulk_commit();
        }
}

/* SYRK: the group has SYR2Ks on this kernel; without, the two-term loop and
 * the triangle masks compile away. */
/* RES: the resident kernel (cuda_gemm_res_launch): groups one after
 * another from the area's slots, each between a start and an end header,
 * until an exit; kp and tmaps are then the current group's. */
/* BMA 64: every tile a half tile (the host's skinny_group), A loaded
 * through the problem's third map (64 rows a box). */
template <typename T, bool SYRK, bool X3, int BN, bool RES = false, int BMA = 128>
__global__ void __launch_bounds__(WCfg::THREADS, 1) wgmma_kernel(const __grid_constant__ KArgs args)
{
        static_assert(!SYRK || BN == 128, "SYR2K triangles take square tiles");
        static_assert(!RES || (!SYRK && !X3 && BN == 128 && sizeof(T) == 2), "resident: 16-bit GEMMs, usual tile");
        KParams kp = kparams(args);
        const char *tmaps = rebase(args, args.tmaps);
#ifdef GEMMD_SM90A
        using L = KLay<T, X3, BN, BMA>;
        constexpr bool F32C = L::STAGED_C;
        /* 16-bit GEMMs whose C has a map store it by TMA (not SYR2K
         * triangles, not the resident kernel, not the 64-row stages, whose
         * problems' third map is A's). */
        constexpr bool TMA16 = sizeof(T) == 2 && !SYRK && !RES && BMA == 128;
        using W = WCfgT<BN, BMA>;
        constexpr int NA = W::NACC;
        extern __shared__ unsigned char wsmem[];
        __shared__ uint32_t s_flag;
        __shared__ EarlyQ s_eq; /* early completion (16-bit GEMMs) */
#ifdef GEMMD_KTRACE
        __shared__ long long s_kt[KT_N];
        __shared__ uint32_t s_kt_tiles;
        __shared__ uint64_t s_kt_ns;
        if (threadIdx.x == 0) {
                s_kt_ns = globaltimer();
                for (int i = 1; i < KT_N; i++)
                        s_kt[i] = 0;
                s_kt_tiles = 0;
                KT_AT(s_kt, KT_ENTRY);
        }
#endif
        const uint32_t raw = smem_u32(wsmem);
        const uint32_t base = (raw + 1023u) & ~1023u;
        unsigned char *gbase = wsmem + (base - raw);
        const uint32_t bars = base + L::BAR_OFF; /* full[STAGES], empty[STAGES], X3: split[STAGES] */
        volatile uint32_t *endw = (volatile uint32_t *)(gbase + L::END_OFF); /* X3 */
        /* Warp-uniform roles (the shuffle tells the compiler so). */
        const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0);
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

        if (threadIdx.x == 0) {
                for (int s = 0; s < L::STAGES; s++) {
                        mbar_init(bars + 8 * s, 1);
                        mbar_init(bars + 8 * (L::STAGES + s), 8); /* one arrival per consumer warp */
                        if (X3)
                                mbar_init(bars + 8 * (2 * L::STAGES + s), 3); /* one per transform warp */
                }
                if (F32C) {
                        mbar_init(base + L::CBAR_OFF, 1);
                        mbar_init(base + L::CBAR_OFF + 8, 1);
                }
                s_eq.head[0] = s_eq.head[1] = s_eq.tail[0] = s_eq.tail[1] = 0;
                asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        __syncthreads();
#ifdef GEMMD_KTRACE
        if (threadIdx.x == 0)
                KT_AT(s_kt, KT_INIT);
#endif

        if (wg == 0) {
                /* Producer: warp 0; lane 0 issues the copies. */
                asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(W::producer_regs(SYRK)));
                if (X3 && warp != 0) {
                        /* Warps 1-3 split each stage: its small parts
                         * (tf32_small) into the same place of the small
                         * ring, made visible to wgmma (the async proxy),
                         * then one arrival per warp on split[stage]. */
                        const int t = threadIdx.x - 32;
                        uint32_t stage = 0, phase = 0;
                        for (;;) {
                                mbar_wait(bars + 8 * stage, phase);
                                if (endw[stage])
                                        break;
                                split_stage<96>((const uint4 *)(gbase + stage * W::STAGE_BYTES),
                                                (uint4 *)(gbase + L::SMALL_OFF + stage * W::STAGE_BYTES), t);
                                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                                __syncwarp();
                                if (lane == 0)
                                        mbar_arrive(bars + 8 * (2 * L::STAGES + stage));
                                if (++stage == L::STAGES) {
                                        stage = 0;
                                        phase ^= 1;
                                }
                        }
                        return;
                }
                if (RES && warp != 0) {
                        if (blockIdx.x < args.res.ndisp)
                                res_dispatch(args.res, threadIdx.x - 32, blockIdx.x);
                        return;
                }
                if (sizeof(T) == 2 && !SYRK && !RES && warp == 1 && args.kp.early_cnt) {
                        if (lane == 0)
                                early_helper(args, &s_eq);
                        return;
                }
                if (warp != 0)
                        return;
                uint32_t stage = 0, phase = 0, lastp = UINT32_MAX, nhalf = 0;
                uint32_t vcta = blockIdx.x; /* this CTA's place in the plan */
                auto issue = [&](const PWork &x) {
                        const char *ta = tmaps + (size_t)x.prob * WCfg::TMAP_BYTES, *tb = ta + 128;
                        if (x.prob != lastp) {
                                if (RES) {
                                        /* Written in this launch (res_dispatch). */
                                        asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(ta) : "memory");
                                        asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(tb) : "memory");
                                }
                                tmap_prefetch(BMA < 128 ? ta + 256 : ta);
                                tmap_prefetch(tb);
                                lastp = x.prob;
                        }
                        /* Chunk by chunk; a SYR2K's chunk is its two terms
                         * in turn, op(A) op(B)^T then op(B) op(A)^T, the
                         * second loading A's rows from B's map and B's
                         * columns from A's. (j, term, c0): k-tile of the
                         * chunk, term, first k-tile of the chunk. */
                        const uint32_t nterms = SYRK && (x.tri & TRI_SYR2K) ? 2 : 1;
                        uint32_t j = 0, term = 0, c0 = 0, nk = min(x.niter, (uint32_t)WK<T>::KT_PER_CHUNK);
                        for (uint32_t i = 0; i < x.niter * nterms; i++) {
                                const uint32_t full = bars + 8 * stage;
                                const uint32_t sa = base + stage * W::STAGE_BYTES;
                                mbar_wait(bars + 8 * (L::STAGES + stage), phase ^ 1);
                                if (X3)
                                        endw[stage] = 0;
                                if (i == 0) {
                                        /* The tile's first stage tells the consumers what it is. */
                                        volatile uint32_t *h = (volatile uint32_t *)(gbase + L::HDR_OFF) + 16 * stage;
                                        h[0] = x.prob;
                                        h[1] = x.m0;
                                        h[2] = x.n0;
                                        h[3] = x.niter;
                                        h[4] = x.kc0;
                                        h[5] = x.split;
                                        h[6] = x.m;
                                        h[7] = x.n;
                                        h[8] = x.k;
                                        h[9] = (uint32_t)x.c;
                                        h[10] = (uint32_t)(x.c >> 32);
                                        h[11] = (uint32_t)(uint64_t)x.ldc;
                                        h[12] = (uint32_t)((uint64_t)x.ldc >> 32);
                                        h[13] = __float_as_uint(x.alpha);
                                        h[14] = __float_as_uint(x.beta);
                                        /* A half tile goes to one consumer, the
                                         * next to the other: they compute two
                                         * tiles at once, each its own (the
                                         * Ping-pong schedule), where together
                                         * one of them would idle. Not split
                                         * entries (both consumers add their
                                         * sums) nor SYR2K triangles. */
                                        const bool half = x.tri == 0 && x.split == SCHED_NO_SPLIT && x.m - x.m0 <= 64;
                                        const uint32_t own = half ? (nhalf++ & 1 ? HDR_OWN1 : HDR_OWN0) : 0u;
                                        /* Its C map: flag bit 4 of cuda_gemm_tmaps_build.
                                         * 16-bit: read with the problem (x.cmap, cmap_of);
                                         * f32 reads it here, since carrying it through
                                         * the walk made its kernels spill. */
                                        h[15] = x.tri | own |
                                                (F32C ? (map_flags(tmaps, kp.nprobs)[x.prob] & 4 ? HDR_TMA_C : 0u) : x.cmap);
                                }
#ifdef GEMMD_KTRACE
                                if (i == 0 && s_kt[KT_ISSUE] == 0)
                                        KT_AT(s_kt, KT_ISSUE);
#endif
                                mbar_expect_tx(full, W::STAGE_BYTES);
                                const int32_t k0 = (int32_t)(x.kbeg + (c0 + j) * WK<T>::BK);
                                if (BMA < 128)
                                        tma_load_2d(sa, ta + 256, full, k0, (int32_t)x.m0);
                                else
                                        tma_load_2d(sa, term ? tb : ta, full, k0, (int32_t)x.m0);
                                tma_load_2d(sa + W::A_BYTES, term ? ta : tb, full, k0, (int32_t)x.n0);
                                if (++stage == L::STAGES) {
                                        stage = 0;
                                        phase ^= 1;
                                }
                                if (++j == nk) {
                                        j = 0;
                                        if (++term == nterms) {
                                                term = 0;
                                                c0 += WK<T>::KT_PER_CHUNK;
                                                nk = min(x.niter - min(c0, x.niter), (uint32_t)WK<T>::KT_PER_CHUNK);
                                        }
                                }
                        }
                };
                /* A stage that carries no data, only a header (lane 0): the
                 * end of work (UINT32_MAX), or a resident group's start or
                 * end, with its slot and seq. */
                auto mark = [&](uint32_t word, uint32_t slot, uint64_t seq) {
                        mbar_wait(bars + 8 * (L::STAGES + stage), phase ^ 1);
                        if (X3)
                                endw[stage] = word == UINT32_MAX;
                        volatile uint32_t *h = (volatile uint32_t *)(gbase + L::HDR_OFF) + 16 * stage;
                        h[0] = word;
                        h[1] = slot;
                        h[2] = (uint32_t)seq;
                        h[3] = (uint32_t)(seq >> 32);
                        mbar_arrive(bars + 8 * stage);
                        if (++stage == L::STAGES) {
                                stage = 0;
                                phase ^= 1;
                        }
                };
                /* HDR_TMA_C where a 16-bit entry's C leaves by one TMA copy:
                 * its problem has a C map (flag bit 4 of cuda_gemm_tmaps_build,
                 * read beside the problem, since issue's header would wait for
                 * it before the tile's first copy). Not a CTA's last plan entry
                 * (the walk below tests it): no tile follows for the copy to
                 * overlap, and 128 threads' stores drain sooner than one copy
                 * (a lone GEMM's kernel ended 0.3-0.5 us later). Device mode,
                 * which cannot tell a CTA's last tile without mapping the next,
                 * takes the copy on every tile. Not under early completion, which waits on the
                 * stores: only the copy's issuer can wait for its end, and the
                 * warpgroup's next wgmmas would wait with it. */
                auto cmap_of = [&](uint32_t prob) -> uint32_t {
                        if (!TMA16 || args.kp.early_cnt)
                                return 0u;
                        return map_flags(tmaps, kp.nprobs)[prob] & 4 ? HDR_TMA_C : 0u;
                };
                auto walk = [&]() {
                        if (kp.cta_begin) {
                                /* Plan entries 32 at a time, one per lane, so their
                                 * loads overlap. */
                                const uint32_t e1 = kp.cta_begin[vcta + 1];
                                for (uint32_t e0 = kp.cta_begin[vcta]; e0 < e1; e0 += 32) {
                                        const uint32_t e = e0 + lane;
                                        PWork x = {};
                                        bool ok = false;
                                        if (e < e1) {
                                                const struct sched_entry en = kp.entries[e];
                                                ok = !kp.fast || (kp.fast[en.problem] != 0) == kp.want_fast;
                                                if (ok) {
                                                        const Work w = {en.problem, en.tile, en.kc_begin, en.kc_end, en.split};
                                                        x = pwork<WK<T>::BK, BN>(kp.probs[en.problem], w, kp.tile_rows);
                                                        x.cmap = e + 1 < e1 ? cmap_of(en.problem) : 0u;
                                                }
                                        }
                                        uint32_t mask = __ballot_sync(0xffffffffu, ok);
#ifdef GEMMD_KTRACE
                                        if (lane == 0 && s_kt[KT_PLAN] == 0)
                                                KT_AT(s_kt, KT_PLAN);
#endif
                                        while (mask) {
                                                const int L = __ffs(mask) - 1;
                                                mask &= mask - 1;
                                                PWork y;
                                                y.prob = __shfl_sync(0xffffffffu, x.prob, L);
                                                y.m0 = __shfl_sync(0xffffffffu, x.m0, L);
                                                y.n0 = __shfl_sync(0xffffffffu, x.n0, L);
                                                y.kbeg = __shfl_sync(0xffffffffu, x.kbeg, L);
                                                y.niter = __shfl_sync(0xffffffffu, x.niter, L);
                                                y.kc0 = __shfl_sync(0xffffffffu, x.kc0, L);
                                                y.split = __shfl_sync(0xffffffffu, x.split, L);
                                                y.m = __shfl_sync(0xffffffffu, x.m, L);
                                                y.n = __shfl_sync(0xffffffffu, x.n, L);
                                                y.k = __shfl_sync(0xffffffffu, x.k, L);
                                                y.c = __shfl_sync(0xffffffffu, (unsigned long long)x.c, L);
                                                y.ldc = __shfl_sync(0xffffffffu, (long long)x.ldc, L);
                                                y.alpha = __shfl_sync(0xffffffffu, x.alpha, L);
                                                y.beta = __shfl_sync(0xffffffffu, x.beta, L);
                                                y.tri = SYRK ? __shfl_sync(0xffffffffu, x.tri, L) : 0u;
                                                y.cmap = TMA16 ? __shfl_sync(0xffffffffu, x.cmap, L) : 0u;
                                                if (lane == 0)
                                                        issue(y);
                                                __syncwarp();
                                        }
                                }
                        } else {
                                WorkIter it = work_begin(kp);
                                Work w;
                                while (work_next<WK<T>::BK, BN>(kp, it, w)) {
                                        PWork x = pwork<WK<T>::BK, BN>(kp.probs[w.prob], w, kp.tile_rows);
                                        x.cmap = cmap_of(w.prob);
                                        if (lane == 0)
                                                issue(x);
                                        __syncwarp();
                                }
                        }
                };
                if constexpr (RES) {
                        ResMeta *meta = res_meta(args.res);
                        for (uint64_t seq = args.res.first_seq;; seq++) {
                                const uint32_t slot = (uint32_t)(seq % CUDA_RES_SLOTS);
                                /* The group's mark in its slot (res_mark.h):
                                 * only the plan's CTAs take part, and the group
                                 * is done when they are (res_group_done),
                                 * whatever the others still run. Lane 0 reads
                                 * the mark, and where it is an exit the seq it
                                 * was marked at (written before it), for the
                                 * whole warp: one decision. */
                                const uint64_t gen = args.res.gen;
                                uint64_t r = 0, exit_seq = 0;
                                uint32_t v = 0;
                                if (lane == 0) {
                                        while (res_step(r = ld_acquire_gpu(&meta->ready[slot]), seq, gen, 0, blockIdx.x,
                                                        gridDim.x, &v) == RES_WAIT)
                                                __nanosleep(32);
                                        if (r == (RES_EXIT_BIT | gen))
                                                exit_seq = ld_acquire_gpu(&meta->exit_seq);
                                }
                                r = __shfl_sync(0xffffffffu, r, 0);
                                exit_seq = __shfl_sync(0xffffffffu, exit_seq, 0);
                                const enum res_step step = res_step(r, seq, gen, exit_seq, blockIdx.x, gridDim.x, &v);
                                if (step == RES_EXIT)
                                        break;
                                if (step != RES_TAKE)
                                        continue;
                                /* Lane 0's acquire, then the warp's barrier, orders
                                 * every lane's reads below after the mark. */
                                __syncwarp();
                                if (lane == 0)
                                        RT_AT(meta, slot, RT_TAKE);
                                vcta = v;
                                kp = meta->slot[slot].kp;
                                tmaps = meta->slot[slot].tmaps;
                                lastp = UINT32_MAX;
                                if (lane == 0)
                                        mark(HDR_GROUP_START, slot, seq);
                                walk();
                                if (lane == 0)
                                        mark(HDR_GROUP_END, slot, seq);
                                __syncwarp();
                        }
                } else {
                        walk();
                }
                if (lane == 0)
                        mark(UINT32_MAX, 0, 0);
                return;
        }

        /* Consumers: warpgroup cw computes rows [64 cw, 64 cw + 64) of the tile. */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(W::consumer_regs(SYRK)));
        const int cw = wg - 1, ctid = threadIdx.x - 128, wt = threadIdx.x & 127, wi = wt >> 5;
        const uint32_t epi = base + L::EPI_OFF + cw * W::EPI_BYTES; /* 16-bit only */
        Pipe pp = {0, 0, -1, bars, 0, base + W::A_BYTES, lane}; /* a_off: set per tile */
        float acc[NA], tot[NA], csum[NA]; /* csum: X3 only */
        uint32_t cphase = 0; /* F32C: the phase of this warpgroup's c_load barrier */
        uint32_t rslot = 0;  /* RES: the current group's slot */
        bool rfull = true;   /* RES: its first full stage seen (RT_FULL) */
#pragma unroll
        for (int i = 0; i < NA; i++)
                acc[i] = 0.f;
        /* Early completion (16-bit GEMMs): after each entry (its stores of
         * C issued, or none to make), the warpgroup's barrier, then thread
         * 0 queues the entry's problem for the helper warp, which fences
         * and arrives (early_helper). */
        constexpr bool EARLY = sizeof(T) == 2 && !SYRK && !RES;
        auto queue = [&](uint32_t prob) {
                if (!EARLY || !args.kp.early_cnt) /* from the parameter space: no register held */
                        return;
                named_bar(2 + cw, 128);
                if (wt == 0) {
                        /* Its own count, kept in shared memory: no register held. */
                        const uint32_t eq_head = *(volatile uint32_t *)&s_eq.head[cw];
                        for (;;) { /* room: the helper keeps up, so this rarely waits */
                                uint32_t tl;
                                asm volatile("ld.acquire.cta.shared.u32 %0, [%1];\n"
                                             : "=r"(tl)
                                             : "r"(smem_u32(&s_eq.tail[cw]))
                                             : "memory");
                                if (eq_head - tl < EQ)
                                        break;
                        }
                        ((volatile uint32_t *)s_eq.q[cw])[eq_head % EQ] = prob;
                        asm volatile("st.release.cta.shared.u32 [%0], %1;\n" ::"r"(smem_u32(&s_eq.head[cw])),
                                     "r"(eq_head + 1)
                                     : "memory");
                }
        };
        /* Before the staging buffer is written again: the last TMA copy out
         * of it has read it (thread 0, its issuer), and every thread is
         * past the previous tile's use of it. */
        auto staging_free = [&]() {
                if (TMA16 && wt == 0)
                        bulk_wait_read();
                named_bar(2 + cw, 128);
        };
        for (;;) {
                mbar_wait(bars + 8 * pp.stage, pp.phase);
                const volatile uint32_t *h = (const volatile uint32_t *)(gbase + L::HDR_OFF) + 16 * pp.stage;
                Work w;
                w.prob = h[0];
                if (w.prob == UINT32_MAX) {
                        queue(EQ_END);
                        break;
                }
                if (RES && w.prob >= HDR_GROUP_START) {
                        /* A group's start (its parameters, for split
                         * entries) or end: nothing to compute; the stage
                         * is given back at once. */
                        const uint32_t slot = h[1];
                        const uint64_t seq = (uint64_t)h[2] | ((uint64_t)h[3] << 32);
                        const bool start = w.prob == HDR_GROUP_START;
                        if (lane == 0)
                                mbar_arrive(bars + 8 * (L::STAGES + pp.stage));
                        if (++pp.stage == L::STAGES) {
                                pp.stage = 0;
                                pp.phase ^= 1;
                        }
                        if (start) {
                                kp = res_meta(args.res)->slot[slot].kp;
                                rslot = slot;
                                rfull = false;
                                continue;
                        }
                        if (wt == 0)
                                RT_AT(res_meta(args.res), slot, RT_END);
                        /* Both warpgroups' stores of C are issued: after
                         * the CTA's barrier, thread 0's fence (cumulative)
                         * orders them before its arrival (res_group_done). */
                        named_bar(1, 256);
                        if (ctid == 0)
                                res_group_done(args.res, slot, seq);
                        continue;
                }
                const uint32_t m0 = h[1], n0 = h[2], niter = h[3];
                w.kc0 = h[4];
                w.split = h[5];
                /* The fields of the problem that the epilogue reads, from the header. */
                struct gemmd_kproblem p;
                p.m = h[6];
                p.n = h[7];
                p.k = h[8];
                p.c = (uint64_t)h[9] | ((uint64_t)h[10] << 32);
                p.ldc = (int64_t)((uint64_t)h[11] | ((uint64_t)h[12] << 32));
                p.alpha = __uint_as_float(h[13]);
                p.beta = __uint_as_float(h[14]);
                const uint32_t hflags = h[15], tri = SYRK ? hflags : 0u;
                const int own = hflags & HDR_OWN0 ? 0 : hflags & HDR_OWN1 ? 1 : -1;
                if (own >= 0 && own != cw) {
                        /* The other consumer's half tile: pass over its
                         * stages, each once it is full (so that this
                         * consumer's place in the ring never falls a lap
                         * behind) and freed at once (the producer refills
                         * a stage when both consumers have let it go). */
                        for (uint32_t i = 0; i < niter; i++) {
                                mbar_wait(bars + 8 * pp.stage, pp.phase);
                                if (lane == 0)
                                        mbar_arrive(bars + 8 * (L::STAGES + pp.stage));
                                if (++pp.stage == L::STAGES) {
                                        pp.stage = 0;
                                        pp.phase ^= 1;
                                }
                        }
                        queue(w.prob);
                        continue;
                }
#ifdef GEMMD_KTRACE
                if (wt == 0 && s_kt[KT_FULL] == 0)
                        KT_AT(s_kt, KT_FULL);
#endif
                if (RES && !rfull) {
                        if (wt == 0)
                                RT_AT(res_meta(args.res), rslot, RT_FULL);
                        rfull = true;
                }
                /* This consumer's rows of the tile: its 64, or all of a half tile. */
                const uint32_t rsh = own >= 0 ? 0u : (uint32_t)cw * 64;
                pp.a_off = base + rsh * 128;
                const bool lower = (tri & TRI_SYR2K) && !(tri & TRI_UPPER), upper = (tri & TRI_UPPER) != 0;
                float *wsb = nullptr;
                if (w.split != SCHED_NO_SPLIT)
                        wsb = kp.ws + (size_t)kp.split_ws[w.split] * W::TILE;
#pragma unroll
                for (int i = 0; i < NA; i++)
                        tot[i] = 0.f;

                /* With beta != 0, C comes into the staging buffer while the
                 * tile's k-loop runs, where the tile is this entry's to
                 * store: by TMA during its first chunk (F32C, c_load), or
                 * its whole vectors by cp.async as its last chunk starts
                 * (16-bit, c_stage_pre). A split tile's last part, and a tile
                 * without K (no chunk), read it in the epilogue. */
                const bool c_early = (F32C ? (hflags & HDR_TMA_C) != 0 : sizeof(T) == 2 && c_vec_ok(p)) &&
                                     p.beta != 0.f && w.split == SCHED_NO_SPLIT && m0 + rsh < p.m && niter > 0;

                /* One canonical chunk at a time: its k-tiles with one wgmma
                 * batch in flight, then drain and fold the chunk sum. */
                constexpr uint32_t KPC = WK<T>::KT_PER_CHUNK;
                const uint32_t nch = (niter + KPC - 1) / KPC;
                for (uint32_t c = 0; c < nch; c++) {
                        const uint32_t nk = min(niter - c * KPC, KPC) * ((tri & TRI_SYR2K) ? 2u : 1u);
                        if (sizeof(T) == 2 && c + 1 == nch && c_early) {
                                /* Before the last chunk's k-loop, while its
                                 * accumulators are not yet live; the previous
                                 * tile's stores have read the buffer. */
                                staging_free();
                                c_stage_pre<T, BN>(p, (const T *)(uintptr_t)p.c, m0 + rsh, n0, wt, epi, lower, upper);
                                cpa_commit();
                        }
                        run_chunk<T, X3, BN, BMA>(pp, acc, csum, nk);
                        if (F32C && c == 0 && c_early && wt == 0)
                                c_load(base + L::EPI_OFF + cw * L::F32C_BYTES, base + L::CBAR_OFF + 8 * cw,
                                       third_map(tmaps, w.prob), m0 + rsh, n0, p.m);
                        wgmma_wait<0>();
                        fold(X3 ? csum : acc, tot, wsb ? wsb + (size_t)(w.kc0 + c) * W::TILE + ctid : nullptr);
                }
                if (lane == 0 && pp.pending >= 0)
                        mbar_arrive(bars + 8 * (L::STAGES + pp.pending));
                pp.pending = -1;
#ifdef GEMMD_KTRACE
                if (wt == 0 && s_kt[KT_MMA] == 0)
                        KT_AT(s_kt, KT_MMA);
#endif

                if (wsb && kp.reduce_apart) {
                        /* Its chunk sums stored: a kernel of their own
                         * adds them after this one (reduce_apart_kernel). */
                        queue(w.prob);
                        continue;
                }
                if (wsb) {
                        /* Publish this entry's chunk sums; the last arrival
                         * adds all of the tile's chunk sums in chunk order. */
                        __threadfence();
                        named_bar(1, 256);
                        if (ctid == 0)
                                s_flag = atomicAdd(&kp.arrivals[w.split], 1u) == kp.split_parts[w.split] - 1;
                        named_bar(1, 256);
                        const bool last = s_flag != 0;
                        named_bar(1, 256);
                        if (!last) {
                                queue(w.prob);
                                continue;
                        }
                        __threadfence();
                        const uint32_t nch = sched_kchunks(p.k);
                        for (uint32_t c = 0; c < nch; c++) {
                                const float *src = wsb + (size_t)c * W::TILE + ctid;
#pragma unroll
                                for (int r = 0; r < NA; r++)
                                        tot[r] += __ldcg(src + r * 256);
                        }
                        if (ctid == 0)
                                atomicExch(&kp.arrivals[w.split], 0u);
                }

                /* A warpgroup whose 64 rows all lie outside C has nothing
                 * to store (its staging buffer and named barrier are its own). */
                if (m0 + rsh >= p.m) {
                        queue(w.prob);
                        continue;
                }
                const float alpha = p.alpha, beta = p.beta;
                T *cptr = (T *)(uintptr_t)p.c;
                /* C leaves by one TMA copy where the producer said so (cmap_of). */
                const bool tma_c = TMA16 && (hflags & HDR_TMA_C);
                const uint32_t rbase = m0 + rsh + wi * 16 + (lane >> 2);
                const uint32_t cbase = n0 + (lane & 3) * 2;
                if constexpr (F32C) {
                        if (hflags & HDR_TMA_C) {
                                const uint32_t stg = base + L::EPI_OFF + cw * L::F32C_BYTES;
                                const uint32_t cbar = base + L::CBAR_OFF + 8 * cw;
                                const char *cmap = third_map(tmaps, w.prob);
                                if (beta == 0.f) {
                                        c_staged<false>(tot, stg, cw, wt, alpha, beta, cbar, cphase, cmap, m0 + rsh, n0,
                                                        p.m);
                                        continue;
                                }
                                if (!c_early && wt == 0)
                                        c_load(stg, cbar, cmap, m0 + rsh, n0, p.m);
                                c_staged<true>(tot, stg, cw, wt, alpha, beta, cbar, cphase, cmap, m0 + rsh, n0, p.m);
                                cphase ^= 1;
                                continue;
                        }
                }
                if constexpr (sizeof(T) == 4) {
                        /* f32 epilogue: straight from the fragments. A
                         * warp's store covers 8 consecutive rows of 4
                         * columns, whole 32-byte sectors of column-major C. */
                        /* beta is tested once, outside the loops: inside,
                         * the compiler keeps the C-reading path's address
                         * arithmetic on the beta = 0 path too. With beta, a
                         * group of elements is read before any of its
                         * stores: a read after a store to C waits for it
                         * (the compiler cannot tell the addresses apart),
                         * which paid the memory's latency once per element.
                         * A group is all of a narrow tile's 32 (one wait a
                         * tile), and four of the wider tiles' 64 or 96,
                         * where more would take registers from the beta 0
                         * path (the usual tile reads C through its staging
                         * buffer where C has a map, above). */
                        constexpr int QG = NA <= 32 ? NA / 4 : 1; /* quads of elements a group */
                        auto inside = [&](uint32_t gi, uint32_t gj) {
                                return !(gi >= p.m || gj >= p.n || (lower && gi < gj) || (upper && gi > gj));
                        };
                        auto store = [&](auto with_beta) {
#pragma unroll
                                for (int jg = 0; jg < NA / 4; jg += QG) {
                                        float old[4 * QG];
                                        if (decltype(with_beta)::value) {
#pragma unroll
                                                for (int q = 0; q < 4 * QG; q++) {
                                                        const int j = jg + q / 4, e = q % 4;
                                                        const uint32_t gi = rbase + 8 * (e >> 1), gj = cbase + j * 8 + (e & 1);
                                                        old[q] = inside(gi, gj) ? ((const float *)cptr)[gi + (int64_t)gj * p.ldc] : 0.f;
                                                }
                                        }
#pragma unroll
                                        for (int q = 0; q < 4 * QG; q++) {
                                                const int j = jg + q / 4, e = q % 4;
                                                const uint32_t gi = rbase + 8 * (e >> 1), gj = cbase + j * 8 + (e & 1);
                                                if (!inside(gi, gj))
                                                        continue;
                                                float *dst = (float *)cptr + gi + (int64_t)gj * p.ldc;
                                                float v = __fmul_rn(alpha, tot[j * 4 + e]);
                                                if (decltype(with_beta)::value)
                                                        v = __fadd_rn(v, __fmul_rn(beta, old[q]));
                                                *dst = v;
                                        }
                                }
                        };
                        if (beta != 0.f)
                                store(std::true_type{});
                        else
                                store(std::false_type{});
                } else {
                        /* 16-bit epilogue: round in registers, stage transposed, store columns. */
                        uint32_t pk[NA / 2];
                        /* Where the four 8 x 8 matrices of pk[2 j .. 2 j + 3]
                         * (row blocks j, j + 1; both halves of the warp's 16
                         * rows) lie in the staging buffer, transposed: lane
                         * l's row address for stmatrix and ldmatrix. */
                        auto frag_at = [&](int j) -> uint32_t {
                                const int q = lane >> 3, r8 = lane & 7, jj = j + (q >> 1), h = q & 1;
                                return epi_at(epi, jj * 8 + r8, wi * 2 + h);
                        };
                        /* beta tested once (as in the f32 epilogue). Both
                         * ways pass the barrier after which the previous
                         * tile's reads of the staging buffer are done. */
                        if (beta == 0.f) {
#pragma unroll
                                for (int e = 0; e < NA; e += 2)
                                        pk[e / 2] = pack2<T>(__fmul_rn(alpha, tot[e]), __fmul_rn(alpha, tot[e + 1]));
                                staging_free();
                        } else {
                                /* C comes in the way it goes out: whole columns
                                 * into the staging buffer, then each thread's
                                 * fragment from there (c_stage_in). */
                                if (c_early) {
                                        c_stage_in<T, BN, true>(p, cptr, m0 + rsh, n0, wt, epi, lower, upper);
                                        cpa_wait();
                                } else {
                                        staging_free();
                                        c_stage_in<T, BN>(p, cptr, m0 + rsh, n0, wt, epi, lower, upper);
                                }
                                named_bar(2 + cw, 128);
#pragma unroll
                                for (int j = 0; j < NA / 4; j += 2) {
                                        const uint32_t addr = frag_at(j);
                                        uint32_t cv[4];
                                        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                                                     : "=r"(cv[0]), "=r"(cv[1]), "=r"(cv[2]), "=r"(cv[3])
                                                     : "r"(addr)
                                                     : "memory");
#pragma unroll
                                        for (int x = 0; x < 4; x++) {
                                                const int e = (j + x / 2) * 4 + (x % 2) * 2;
                                                const float c0 = to_f32<T>(bits_as<T>((uint16_t)cv[x])),
                                                            c1 = to_f32<T>(bits_as<T>((uint16_t)(cv[x] >> 16)));
                                                pk[j * 2 + x] = pack2<T>(__fadd_rn(__fmul_rn(alpha, tot[e]), __fmul_rn(beta, c0)),
                                                                         __fadd_rn(__fmul_rn(alpha, tot[e + 1]), __fmul_rn(beta, c1)));
                                        }
                                }
                                /* (A warp's ldmatrix and stmatrix cover the same
                                 * rows, which no other warp touches.) */
                        }
                        {
#pragma unroll
                                for (int j = 0; j < NA / 4; j += 2) {
                                        const uint32_t addr = frag_at(j);
                                        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                                                     "r"(pk[j * 2]), "r"(pk[j * 2 + 1]), "r"(pk[j * 2 + 2]), "r"(pk[j * 2 + 3])
                                                     : "memory");
                                }
                        }
                        if (tma_c)
                                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* visible to the copy engine */
                        named_bar(2 + cw, 128);
#ifdef GEMMD_KTRACE
                        if (wt == 0 && s_kt[KT_STAGED] == 0)
                                KT_AT(s_kt, KT_STAGED);
#endif
                        if (tma_c) {
                                /* The box of 64 rows x BN columns, clipped
                                 * at C's edges by the map. */
                                if (wt == 0) {
                                        tma_store_2d(third_map(tmaps, w.prob), epi, (int32_t)(m0 + rsh), (int32_t)n0);
                                        bulk_commit();
                                }
                        } else {
                                const bool cvec = c_vec_ok(p);
                                const uint32_t r0 = m0 + rsh;
                                const unsigned char *ep = gbase + (epi - base);
#pragma unroll
                                for (int s = 0; s < W::BN / 16; s++) { /* BN columns of 8 vectors, 128 threads */
                                        const int v = wt + s * 128, col = v >> 3, rv = v & 7;
                                        const uint32_t gi = r0 + rv * 8, gj = n0 + col;
                                        if (gi >= p.m || gj >= p.n)
                                                continue;
                                        const uint4 val = *(const uint4 *)(ep + (epi_at(epi, col, rv) - epi));
                                        T *dst = cptr + gi + (int64_t)gj * p.ldc;
                                        /* A SYR2K writes only its triangle (c_vec_whole). */
                                        if (c_vec_whole(p, cvec, gi, gj, lower, upper)) {
                                                *(uint4 *)dst = val;
                                        } else {
                                                const uint32_t wv[4] = {val.x, val.y, val.z, val.w};
#pragma unroll
                                                for (int x = 0; x < 8; x++)
                                                        if (c_row_in(p, gi + x, gj, lower, upper)) {
                                                                const uint16_t bits = (uint16_t)(wv[x >> 1] >> (16 * (x & 1)));
                                                                *(uint16_t *)(dst + x) = bits;
                                                        }
                                        }
                                }
                        }
                }
#ifdef GEMMD_KTRACE
                if (wt == 0) {
                        if (s_kt[KT_STORE] == 0)
                                KT_AT(s_kt, KT_STORE);
                        atomicAdd(&s_kt_tiles, 1u);
                }
#endif
                queue(w.prob);
        }
#ifdef GEMMD_KTRACE
        named_bar(1, 256);
        bool kt_all = true; /* a CTA that ran no 16-bit tile of a plan misses some */
        for (int i = 1; i < KT_END; i++)
                kt_all = kt_all && s_kt[i] != 0;
        if (ctid == 0 && kt_all) {
                KT_AT(s_kt, KT_END);
                for (int i = 1; i < KT_N; i++)
                        atomicAdd(&g_kt[i - 1], (unsigned long long)(s_kt[i] - s_kt[i - 1]));
                atomicAdd(&g_kt[KT_N - 1], (unsigned long long)(s_kt[KT_END] - s_kt[KT_ENTRY]));
                atomicAdd(&g_kt[KT_N], 1ull);
                atomicAdd(&g_kt[KT_N + 1], (unsigned long long)s_kt_tiles);
                atomicAdd(&g_kt[KT_N + 2], (unsigned long long)(globaltimer() - s_kt_ns));
        }
#endif
        /* Staged C still on its way out: its shared memory must outlive the
         * copies' reads of it (the kernel's end waits for their writes). */
        if (F32C && wt == 0)
                bulk_wait();
        else if (TMA16 && wt == 0)
                bulk_wait_read();
#endif
}

/*
 * The chunk sums of a group's split tiles added apart (sched_plan
 * reduce_apart), after the Hopper kernel stored them: block (s, r) takes
 * accumulator r of each of the 256 consumer threads of split tile s (the
 * slots' layout: thread t's accumulator r of chunk c at c * TILE + t +
 * 256 r), adds the tile's chunk sums in chunk order from zero, as the
 * tile's last part would have, and stores those elements of C as the
 * kernel's epilogue does (alpha, then beta times C, rounded once). A
 * tile's chunk sums, read by one CTA, took it as long as the k-loop its
 * parts saved; here a tile has NA CTAs.
 */
template <typename T, int BN>
__global__ void __launch_bounds__(256) reduce_apart_kernel(const __grid_constant__ KArgs args)
{
        using W = WCfgT<BN>;
        constexpr int NA = W::NACC;
        const KParams kp = kparams(args);
        const uint32_t slot = blockIdx.x / NA, r = blockIdx.x % NA, t = threadIdx.x;
        __shared__ uint32_t s_at;

        if (t == 0)
                s_at = UINT32_MAX;
        __syncthreads();
        /* The tile's first part names its problem and tile. */
        for (uint32_t e = t; e < kp.nentries; e += blockDim.x)
                if (kp.entries[e].split == slot && kp.entries[e].kc_begin == 0)
                        s_at = e;
        __syncthreads();
        if (s_at == UINT32_MAX)
                return;
        const struct sched_entry en = kp.entries[s_at];
        const struct gemmd_kproblem p = kp.probs[en.problem];
        const struct sched_problem sp = to_sched(p);
        const struct sched_shape shape = {WCfg::BM, BN, WK<T>::BK};
        uint32_t row = 0, col = 0;
        sched_tile_coord(&sp, shape, en.tile, &row, &col);
        const float *src = kp.ws + (size_t)kp.split_ws[slot] * W::TILE + t + r * 256;
        const uint32_t nch = sched_kchunks(p.k);
        float tot = 0.f;
#pragma unroll 8
        for (uint32_t c = 0; c < nch; c++)
                tot += __ldcg(src + (size_t)c * W::TILE);
        /* The element's place: the consumer fragment of the epilogue. */
        const uint32_t cw = t >> 7, wt = t & 127, wi = wt >> 5, lane = wt & 31, q = r & 3;
        const uint32_t gi = row * WCfg::BM + cw * 64 + wi * 16 + (lane >> 2) + 8 * (q >> 1);
        const uint32_t gj = col * BN + (lane & 3) * 2 + (r >> 2) * 8 + (q & 1);
        if (gi >= p.m || gj >= p.n)
                return;
        T *dst = (T *)(uintptr_t)p.c + gi + (int64_t)gj * p.ldc;
        float v = __fmul_rn(p.alpha, tot);
        if constexpr (sizeof(T) == 4) {
                if (p.beta != 0.f)
                        v = __fadd_rn(v, __fmul_rn(p.beta, *dst));
                *dst = v;
        } else {
                if (p.beta != 0.f)
                        v = __fadd_rn(v, __fmul_rn(p.beta, to_f32<T>(*dst)));
                const uint32_t pk = pack2<T>(v, 0.f);
                *dst = *(const T *)&pk;
        }
}

/* Launches reduce_apart_kernel for nsplit split tiles of width bn (0: the
 * usual tile) after the group's kernel on stream st. */
template <typename T> int launch_reduce_apart(const KArgs &args, int bn, uint32_t nsplit, cudaStream_t st)
{
        const int w = bn ? bn : 128;
        if (w == 128)
                reduce_apart_kernel<T, 128><<<nsplit * WCfgT<128>::NACC, 256, 0, st>>>(args);
        else if (w == NARROW_BN)
                reduce_apart_kernel<T, NARROW_BN><<<nsplit * WCfgT<NARROW_BN>::NACC, 256, 0, st>>>(args);
        else if (w == WIDE_BN)
                reduce_apart_kernel<T, WIDE_BN><<<nsplit * WCfgT<WIDE_BN>::NACC, 256, 0, st>>>(args);
        else
                return -EINVAL;
        return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

/* The resident kernel: 16-bit GEMMs on the usual tile (ResArgs in args). */
template <typename T> int launch_wgmma_res(const KArgs &args, uint32_t grid, cudaStream_t st)
{
        using L = KLay<T, false, 128>;
        static std::atomic<uint32_t> done[64];
        if (smem_attr_once(done, wgmma_kernel<T, false, false, 128, true>, L::SMEM))
                return -EIO;
        wgmma_kernel<T, false, false, 128, true><<<grid, WCfg::THREADS, L::SMEM, st>>>(args);
        const cudaError_t err = cudaGetLastError();
        return err == cudaSuccess ? 0 : -EIO;
}

template <typename T, bool SYRK, bool X3, int BN = 128, int BMA = 128>
int launch_wgmma(const KArgs &args, uint32_t grid, cudaStream_t st)
{
        using L = KLay<T, X3, BN, BMA>;
        static std::atomic<uint32_t> done[64];
        if (smem_attr_once(done, wgmma_kernel<T, SYRK, X3, BN, false, BMA>, L::SMEM))
                return -EIO;
        wgmma_kernel<T, SYRK, X3, BN, false, BMA><<<grid, WCfg::THREADS, L::SMEM, st>>>(args);
        const cudaError_t err = cudaGetLastError();
        return err == cudaSuccess ? 0 : -EIO;
}

/* x3: f32 split in two TF32 parts (exact f32 problems; T = float); bn:
 * 0 for the usual tile, else the Hopper kernel's own 128 x WIDE_BN or
 * 128 x NARROW_BN tile (GEMM only, not x3). */
template <typename T>
int launch_wgmma(const KArgs &args, uint32_t grid, cudaStream_t st, bool syrk, bool x3, int bn, bool skinny)
{
        if constexpr (sizeof(T) == 2) {
                if (skinny)
                        return syrk || x3        ? -EINVAL
                               : bn == WIDE_BN ? launch_wgmma<T, false, false, WIDE_BN, 64>(args, grid, st)
                               : bn == 0       ? launch_wgmma<T, false, false, 128, 64>(args, grid, st)
                                               : -EINVAL;
        }
        if (skinny)
                return -EINVAL;
        if (bn)
                return syrk || x3                ? -EINVAL
                       : bn == WIDE_BN   ? launch_wgmma<T, false, false, WIDE_BN>(args, grid, st)
                       : bn == NARROW_BN ? launch_wgmma<T, false, false, NARROW_BN>(args, grid, st)
                                         : -EINVAL;
        if constexpr (sizeof(T) == 4) {
                if (x3)
                        return syrk ? launch_wgmma<T, true, true>(args, grid, st)
                                    : launch_wgmma<T, false, true>(args, grid, st);
        }
        return syrk ? launch_wgmma<T, true, false>(args, grid, st) : launch_wgmma<T, false, false>(args, grid, st);
}

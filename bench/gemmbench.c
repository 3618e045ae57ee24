/*
 * gemmbench.c - times gemmd's grouped kernels against cuBLAS in one process.
 *
 *   gemmbench kernels [--mode MODE|all] [--workload NAME|all|FILE] [--json] [--reps N]
 *                     [--cost SPEC] [--queued] [--paired] [--interleaved] [--f64-general] [--narrow]
 *                     [--a-mn]
 *   gemmbench calibrate [--reps N] [--json]
 *   gemmbench floor [--reps N]
 *   gemmbench list [NAME|FILE]
 *
 * `calibrate` (calibrate.c) measures the scheduler's cost model on this
 * GPU and prints it as a SPEC, which --cost takes (plans are then built
 * with it), as does gemmd --cost.
 *
 * Workloads: those of docs/performance.md's tables, plus "syr2k-bf16" (syr2k in bf16),
 * "syr2k-gemm" (the bf16 GEMM m = n = 4096, k = 512: the GEMM of the same n
 * and k that syr2k-bf16 is compared with), "big" (one 8192^3 bf16 GEMM) and their
 * f64 forms: "big-f64" (one 8192^3 DGEMM), "varied-f64" (512 mixed GEMMs
 * as in varied) and "syr2k-f64" (a group of 16 SYR2Ks of mixed n and k),
 * "odd" (512 f16 GEMMs, m, n and k each uniform in 1..700: leading
 * dimensions mostly off the 16-byte grid) and "longk" (one bf16 GEMM of
 * 256 x 256 x 16384, a weight gradient's shape: few tiles, long K),
 * or a file in the `gemmctl plan` format: one problem per line,
 * `gemm M N K [dtype]` or `syr2k N K [dtype] [lower|upper]`, `#` comments,
 * dtype f32|tf32|f16|bf16|f64 (default bf16). Layout: A is
 * stored m x k and B n x k, both contiguous along K (column-major A^T, B:
 * trans_a = T, trans_b = N), C is m x n column-major; SYR2K uses op T (A and
 * B stored n x k, contiguous along K). alpha = 1, beta = 0 (--beta sets another beta for every
 * problem and peer).
 *
 * `list` needs no GPU: with no argument it prints the built-in workloads'
 * names, one a line; with NAME it writes that workload's problem list to
 * stdout in the file format above (the very problems `kernels` runs), and
 * with FILE it reads the file and writes it back the same way.
 *
 * For each workload: gemmd's output is checked against cuBLAS's (max error
 * relative to the largest |C|): a cublasGemmEx loop, or cublasSsyr2k for
 * f32 SYR2Ks; where neither covers the set (16-bit SYR2Ks, SYR2Ks mixed
 * with GEMMs) against cublasGemmEx with an f32 C, two calls per SYR2K
 * (A^T B, then + B^T A). Then each mode's kernel and the cuBLAS
 * peers (a cublasGemmEx loop, cublasGemmGroupedBatchedEx with one group per
 * problem, cublasGemmStridedBatchedEx when all problems are equal,
 * cublasSsyr2k per SYR2K problem) are timed: warm-ups, then the median of
 * --reps runs timed with CUDA events, rotating over several copies of the
 * operands when one copy fits in L2. Each timed run includes what the host
 * does to queue it (gemmd's launch; cuBLAS's own host work) unless
 * --queued puts a spin kernel in front of it, which leaves the device's
 * work alone between the events. A peer that does not apply to a set
 * prints "-" (null in --json): the GEMM peers never take SYR2Ks, and
 * cublasSsyr2k is f32 only, so a 16-bit SYR2K has no cuBLAS peer at all.
 * Plans are built on the host with sched_plan_build before timing. Every
 * set carries tensor maps (cuda_gemm_tmaps_build), so on an sm_90 device
 * its K-major problems take the TMA + wgmma kernel (exact f32: each operand
 * split into two TF32 parts); one more row per such set, "lpt-80", times
 * lpt with the maps left off (the sm_80 kernel; exact f32: fused
 * multiply-adds) for comparison. Sets whose every problem can take the
 * wide tile (cuda_gemm_shape_wide; with --narrow the narrow one,
 * cuda_gemm_shape_narrow, "rr-n") run each mode again on it ("rr-w", ...),
 * print how many elements of C differ in bits between the two tiles (0:
 * they sum the same chunks) and which tile the daemon would choose
 * (sched_prefer_wide). Exact f32 sets also print how far both
 * gemmd kernels and cuBLAS land from an f64 reference (bench_ref_f64),
 * and f64 sets how far gemmd and cuBLAS (cublasDgemm, cublasDsyr2k) land
 * from a double-double reference of sampled columns (bench_ref_dd). f64
 * peers: cublasDgemm loop, cublasDgemmGroupedBatched, strided batched
 * GEMM in f64, cublasDsyr2k loop.
 *
 * --paired times each mode's row against the fastest peer again, rep by
 * rep in turn (gemmd, peer, gemmd, ...), and that row's x_best is against
 * the peer so timed: a GPU held at its power limit (a large f64 GEMM) runs
 * at clocks that move within seconds, so a peer timed before the rows can
 * meet other clocks than the rows do. A "#" line gives the paired peer's
 * TF/s.
 *
 * --interleaved times every row of a set and its fastest peer in turn,
 * rep by rep (row 1, row 2, ..., the peer, row 1, ...), so that modes can
 * be compared with each other as well as with the peer: rows timed one
 * after another meet a GPU whose clocks have moved (a large GEMM holds it
 * at its power limit; a slow row lets it cool), which shifts a row by more
 * than the modes differ. Each row's x_best is then against that peer.
 *
 * --f64-general runs f64 sets on the general f64 kernel, the one groups
 * mixing layouts or alignments take, rather than the one built for the
 * set's single layout and alignment (the launcher is not told the
 * problems: cuda_group.problems_host NULL).
 *
 * --a-mn stores each GEMM's A m x k along M (op N, lda m) for gemmd and
 * its cuBLAS peers alike, 16-bit sets only: the layout the Hopper kernel
 * reads only from packed copies.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_fill.h"
#include "bench/bench_util.h"
#include "bench/kbench.h"
#include "include/gemmd.h"
#include "kernels/cuda_gemm.h"
#include "kernels/half.h"
#include "scheduler/cost.h"
#include "scheduler/plan.h"


static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t rndu(uint32_t n)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (uint32_t)(rng % n);
}

void workload_add(struct workload *w, int kind, int dtype, int tf32, int uplo, uint32_t m, uint32_t n,
                uint32_t k)
{
        if (w->n == w->cap) {
                w->cap = w->cap ? 2 * w->cap : 64;
                w->p = realloc(w->p, w->cap * sizeof(*w->p));
                if (!w->p) {
                        fprintf(stderr, "out of memory\n");
                        exit(1);
                }
        }
        w->p[w->n++] = (struct bprob){kind, dtype, tf32, uplo, m, n, k};
}

static const char *builtin[] = {"seed002", "cutlassdoc", "varied",     "tiny", "moe",
                                "varied-f32", "varied-tf32", "syr2k", "syr2k-bf16",
                                "syr2k-gemm", "big", "big-f64", "varied-f64", "syr2k-f64", "odd", "longk"};
#define NBUILTIN (sizeof(builtin) / sizeof(builtin[0]))

static int make_builtin(const char *name, struct workload *w)
{
        memset(w, 0, sizeof(*w));
        snprintf(w->name, sizeof(w->name), "%s", name);
        rng = 0x2545f4914f6cdd1dull;
        if (!strcmp(name, "seed002")) {
                for (int i = 0; i < 256; i++)
                        workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 128, 512, 7168);
        } else if (!strcmp(name, "cutlassdoc")) {
                workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 1152, 768, 128);
                workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 1152, 768, 1024);
                workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 768, 1152, 128);
                workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 768, 1152, 1024);
        } else if (!strcmp(name, "varied")) {
                for (int i = 0; i < 512; i++)
                        workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 64 * (1 + rndu(16)), 64 * (1 + rndu(16)),
                            64 * (1 + rndu(16)));
        } else if (!strcmp(name, "tiny")) {
                for (int i = 0; i < 1024; i++)
                        workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 64, 64, 64);
        } else if (!strcmp(name, "moe")) {
                for (int i = 0; i < 64; i++)
                        workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 64 * (1 + rndu(8)), 2816, 2048);
        } else if (!strcmp(name, "varied-f32") || !strcmp(name, "varied-tf32")) {
                int tf = !strcmp(name, "varied-tf32");
                for (int i = 0; i < 256; i++)
                        workload_add(w, SCHED_GEMM, GEMMD_F32, tf, 0, 64 * (1 + rndu(8)), 64 * (1 + rndu(8)),
                            64 * (1 + rndu(8)));
        } else if (!strcmp(name, "syr2k")) {
                workload_add(w, SCHED_SYR2K, GEMMD_F32, 0, 0, 4096, 4096, 512);
        } else if (!strcmp(name, "syr2k-bf16")) {
                workload_add(w, SCHED_SYR2K, GEMMD_BF16, 0, 0, 4096, 4096, 512);
        } else if (!strcmp(name, "syr2k-gemm")) {
                /* As many flops as syr2k-bf16 (2 n^2 k), in one GEMM. */
                workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 4096, 4096, 512);
        } else if (!strcmp(name, "big")) {
                workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 8192, 8192, 8192);
        } else if (!strcmp(name, "big-f64")) {
                workload_add(w, SCHED_GEMM, GEMMD_F64, 0, 0, 8192, 8192, 8192);
        } else if (!strcmp(name, "varied-f64")) {
                for (int i = 0; i < 512; i++)
                        workload_add(w, SCHED_GEMM, GEMMD_F64, 0, 0, 64 * (1 + rndu(16)), 64 * (1 + rndu(16)),
                            64 * (1 + rndu(16)));
        } else if (!strcmp(name, "odd")) {
                /* Every size odd or even: most leading dimensions off the
                 * 16-byte grid, so most operands miss cp.async vectors and TMA. */
                for (int i = 0; i < 512; i++)
                        workload_add(w, SCHED_GEMM, GEMMD_F16, 0, 0, 1 + rndu(700), 1 + rndu(700), 1 + rndu(700));
        } else if (!strcmp(name, "longk")) {
                workload_add(w, SCHED_GEMM, GEMMD_BF16, 0, 0, 256, 256, 16384);
        } else if (!strcmp(name, "syr2k-f64")) {
                for (int i = 0; i < 16; i++) {
                        const uint32_t n = 256 * (2 + rndu(7)), k = 256 * (1 + rndu(4));
                        workload_add(w, SCHED_SYR2K, GEMMD_F64, 0, (int)rndu(2), n, n, k);
                }
        } else {
                return -1;
        }
        return 0;
}

static int parse_dtype(const char *s, int *dtype, int *tf32)
{
        *tf32 = 0;
        if (!strcmp(s, "f32"))
                *dtype = GEMMD_F32;
        else if (!strcmp(s, "tf32"))
                *dtype = GEMMD_F32, *tf32 = 1;
        else if (!strcmp(s, "f16"))
                *dtype = GEMMD_F16;
        else if (!strcmp(s, "bf16"))
                *dtype = GEMMD_BF16;
        else if (!strcmp(s, "f64"))
                *dtype = GEMMD_F64;
        else
                return -1;
        return 0;
}

/* Reads a workload file in the `gemmctl plan` format. */
static int load_file(const char *path, struct workload *w)
{
        FILE *f = fopen(path, "r");
        char line[512];
        int lineno = 0;
        if (!f) {
                fprintf(stderr, "gemmbench: %s: %s\n", path, strerror(errno));
                return -1;
        }
        memset(w, 0, sizeof(*w));
        const char *base = strrchr(path, '/');
        snprintf(w->name, sizeof(w->name), "%s", base ? base + 1 : path);
        while (fgets(line, sizeof(line), f)) {
                lineno++;
                char *hash = strchr(line, '#');
                if (hash)
                        *hash = 0;
                char op[16], a1[16] = "", a2[16] = "";
                unsigned long x, y, z = 0;
                int dtype = GEMMD_BF16, tf32 = 0, uplo = 0, nf;
                if ((nf = sscanf(line, "%15s", op)) != 1)
                        continue;
                if (!strcmp(op, "gemm")) {
                        nf = sscanf(line, "%*s %lu %lu %lu %15s", &x, &y, &z, a1);
                        if (nf < 3 || (nf == 4 && parse_dtype(a1, &dtype, &tf32)))
                                goto bad;
                        workload_add(w, SCHED_GEMM, dtype, tf32, 0, x, y, z);
                } else if (!strcmp(op, "syr2k")) {
                        nf = sscanf(line, "%*s %lu %lu %15s %15s", &x, &y, a1, a2);
                        if (nf < 2 || (nf >= 3 && parse_dtype(a1, &dtype, &tf32)))
                                goto bad;
                        if (nf == 4 && strcmp(a2, "lower") && strcmp(a2, "upper"))
                                goto bad;
                        uplo = nf == 4 && !strcmp(a2, "upper");
                        workload_add(w, SCHED_SYR2K, dtype, tf32, uplo, x, x, y);
                } else {
                        goto bad;
                }
                if (x == 0 || y == 0 || (w->p[w->n - 1].k == 0))
                        goto bad;
        }
        fclose(f);
        if (!w->n)
                fprintf(stderr, "gemmbench: %s: no problems\n", path);
        return w->n ? 0 : -1;
bad:
        fprintf(stderr, "gemmbench: %s:%d: bad line\n", path, lineno);
        fclose(f);
        return -1;
}

size_t esize(int dtype) { return dtype == GEMMD_F64 ? 8 : dtype == GEMMD_F32 ? 4 : 2; }

static cudaDataType_t cuda_type(int dtype)
{
        return dtype == GEMMD_F64   ? CUDA_R_64F
               : dtype == GEMMD_F32 ? CUDA_R_32F
               : dtype == GEMMD_F16 ? CUDA_R_16F
                                    : CUDA_R_16BF;
}

static double flops(const struct bprob *p)
{
        return 2.0 * p->m * p->n * (double)p->k;
}

/* The device-side state of one config's problems of a workload. */

/* --a-mn: GEMMs' A stored m x k (along M, op N), as column-major callers
 * most often keep it, for gemmd and its cuBLAS peers alike; 16-bit sets
 * only (the f32 and f64 references read A along K). */
int kbench_a_mn;

/* Whether p's A lies along M (--a-mn, GEMMs only). */
static int a_mn(const struct bprob *p) { return kbench_a_mn && p->kind == SCHED_GEMM; }

/* A's op and leading dimension for cuBLAS and gemmd. */
static cublasOperation_t a_op(const struct bprob *p) { return a_mn(p) ? CUBLAS_OP_N : CUBLAS_OP_T; }
static int a_ld(const struct bprob *p) { return a_mn(p) ? (int)p->m : (int)p->k; }

static void set_lda(const struct bprob *p, int64_t *lda, int64_t *ldb, int64_t *ldc)
{
        *lda = a_ld(p);
        *ldb = p->k;
        *ldc = p->m;
}

int kbench_narrow;
/* --beta: every problem's and every peer's beta (C = A B + beta C). */
static double kbench_beta;
/* Where C starts when it is read (beta != 0): every byte C_FILL, a finite
 * value in every dtype (bf16 0.746, f16 1.81, f32 0.747, f64 4.8e-4). */
#define C_FILL 0x3f

/* The second tile that "-w" rows run on: the wide one, or with --narrow
 * the narrow one ("-n" rows). */
static struct sched_shape alt_shape(int dtype, int tf32)
{
        return kbench_narrow ? cuda_gemm_shape_narrow(dtype, tf32) : cuda_gemm_shape_wide(dtype, tf32);
}

void set_init(struct set *s, const struct workload *w, int dtype, int tf32, size_t l2, int shared_ab)
{
        memset(s, 0, sizeof(*s));
        s->dtype = dtype;
        s->tf32 = tf32;
        s->p = malloc(w->n * sizeof(*s->p));
        for (uint32_t i = 0; i < w->n; i++)
                if (w->p[i].dtype == dtype && w->p[i].tf32 == tf32)
                        s->p[s->n++] = w->p[i];
        if (!s->n)
                return;
        s->aoff = malloc(s->n * sizeof(size_t));
        s->boff = malloc(s->n * sizeof(size_t));
        s->coff = malloc(s->n * sizeof(size_t));
        s->sp = malloc(s->n * sizeof(*s->sp));
        size_t off = 0, align = 128;
        s->all_equal = 1;
        /* A's, then B's, then C's, so equal problems have uniform strides. */
        for (int o = 0; o < 3; o++)
                for (uint32_t i = 0; i < s->n; i++) {
                        const struct bprob *p = &s->p[i];
                        size_t e = o == 0 ? (size_t)p->m * p->k : o == 1 ? (size_t)p->n * p->k
                                                                         : (size_t)p->m * p->n;
                        size_t *at = o == 0 ? s->aoff : o == 1 ? s->boff : s->coff;

                        if (shared_ab && o < 2 && i > 0) {
                                at[i] = at[0];
                                continue;
                        }
                        off = (off + align - 1) / align * align;
                        at[i] = off;
                        off += e;
                }
        s->elems = (off + align - 1) / align * align;
        for (uint32_t i = 0; i < s->n; i++) {
                const struct bprob *p = &s->p[i];
                s->flops += flops(p);
                if (p->m != s->p[0].m || p->n != s->p[0].n || p->k != s->p[0].k || p->kind != s->p[0].kind)
                        s->all_equal = 0;
                if (p->kind == SCHED_SYR2K)
                        s->any_syr2k = 1;
                s->sp[i] = (struct sched_problem){.kind = (uint8_t)p->kind, .dtype = (uint8_t)dtype,
                                                  .uplo = (uint8_t)p->uplo, .tf32 = (uint8_t)tf32,
                                                  .m = p->m, .n = p->n, .k = p->k};
        }
        size_t bytes = s->elems * esize(dtype);
        s->copies = bytes * 2 < l2 ? (uint32_t)((3 * l2) / bytes + 1) : 1;
        if (s->copies > 16)
                s->copies = 16;
        CK(cudaMalloc((void **)&s->dbuf, s->copies * bytes));
        if (bench_fill(s->dbuf, s->copies * s->elems, dtype, 12345)) {
                fprintf(stderr, "gemmbench: fill failed\n");
                exit(1);
        }
        s->dkp = malloc(s->copies * sizeof(*s->dkp));
        s->hkp = calloc(s->copies, sizeof(*s->hkp));
        s->dtm = malloc(s->copies * sizeof(*s->dtm));
        s->dtm_wide = calloc(s->copies, sizeof(*s->dtm_wide));
        s->dpack = calloc(s->copies, sizeof(*s->dpack));
        const struct sched_shape base_shape = cuda_gemm_shape(dtype, tf32), wide = alt_shape(dtype, tf32);
        struct gemmd_kproblem *kp = malloc(s->n * sizeof(*kp));
        for (uint32_t c = 0; c < s->copies; c++) {
                char *base = s->dbuf + c * bytes;
                for (uint32_t i = 0; i < s->n; i++) {
                        const struct bprob *p = &s->p[i];
                        memset(&kp[i], 0, sizeof(kp[i]));
                        kp[i].a = (uint64_t)(uintptr_t)(base + s->aoff[i] * esize(dtype));
                        kp[i].b = (uint64_t)(uintptr_t)(base + s->boff[i] * esize(dtype));
                        kp[i].c = (uint64_t)(uintptr_t)(base + s->coff[i] * esize(dtype));
                        set_lda(p, &kp[i].lda, &kp[i].ldb, &kp[i].ldc);
                        kp[i].m = p->m;
                        kp[i].n = p->n;
                        kp[i].k = p->k;
                        kp[i].alpha = 1.f;
                        kp[i].beta = (float)kbench_beta;
                        kp[i].alpha_f64 = 1.0;
                        kp[i].beta_f64 = kbench_beta;
                        kp[i].kind = (uint8_t)p->kind;
                        kp[i].dtype = (uint8_t)dtype;
                        kp[i].trans_a = a_mn(p) ? 0 : 1;
                        kp[i].trans_b = 0;
                        kp[i].uplo = (uint8_t)p->uplo;
                        kp[i].tf32 = (uint8_t)tf32;
                }
                CK(cudaMalloc((void **)&s->dkp[c], s->n * sizeof(*kp)));
                CK(cudaMemcpy(s->dkp[c], kp, s->n * sizeof(*kp), cudaMemcpyHostToDevice));
                s->hkp[c] = malloc(s->n * sizeof(*kp));
                if (!s->hkp[c]) {
                        fprintf(stderr, "gemmbench: out of memory\n");
                        exit(1);
                }
                memcpy(s->hkp[c], kp, s->n * sizeof(*kp));
                s->dtm[c] = NULL;
                if (dtype != GEMMD_F64) { /* no Hopper kernel takes f64 */
                        size_t tb = cuda_gemm_tmaps_bytes(s->n);
                        void *htm = NULL;
                        if (posix_memalign(&htm, 64, tb)) {
                                fprintf(stderr, "out of memory\n");
                                exit(1);
                        }
                        /* The host cost of the maps, per problem: what the
                         * daemon pays on each launch (the best of 5). */
                        /* Operands off the 16-byte grid: packed copies, as
                         * the daemon makes them (cuda_gemm_pack_bytes). */
                        const size_t pb = cuda_gemm_pack_bytes(kp, s->n, base_shape);
                        if (pb)
                                CK(cudaMalloc(&s->dpack[c], pb));
                        for (int t = 0; t < 5; t++) {
                                const uint64_t t0 = bench_now_ns();
                                s->nfast = cuda_gemm_tmaps_build_packed(kp, s->n, base_shape, htm,
                                                                        (uint64_t)(uintptr_t)s->dpack[c], 1);
                                double us = (bench_now_ns() - t0) * 1e-3;
                                /* The first build of a copy encodes its
                                 * maps; the others find them in this
                                 * thread's memo, as a daemon's launches of
                                 * operands it saw before do. */
                                double *best = t == 0 ? &s->tmaps_us : &s->tmaps_memo_us;
                                if ((c == 0 && t <= 1) || us < *best)
                                        *best = us;
                        }
                        s->nfast_syr2k = cuda_gemm_tmaps_syr2k(htm, s->n);
                        CK(cudaMalloc(&s->dtm[c], tb));
                        CK(cudaMemcpy(s->dtm[c], htm, tb, cudaMemcpyHostToDevice));
                        /* The wide tile's maps, when every problem takes them. */
                        s->wide_ok = wide.tn && cuda_gemm_tmaps_build(kp, s->n, wide, htm) == (int)s->n;
                        if (s->wide_ok) {
                                CK(cudaMalloc(&s->dtm_wide[c], tb));
                                CK(cudaMemcpy(s->dtm_wide[c], htm, tb, cudaMemcpyHostToDevice));
                        }
                        free(htm);
                }
        }
        free(kp);
        CK(cudaDeviceSynchronize());
}

void set_free(struct set *s)
{
        if (s->n) {
                for (uint32_t c = 0; c < s->copies; c++) {
                        cudaFree(s->dkp[c]);
                        free(s->hkp[c]);
                        cudaFree(s->dtm[c]);
                        cudaFree(s->dtm_wide[c]);
                        cudaFree(s->dpack[c]);
                }
                cudaFree(s->dbuf);
                free(s->dkp);
                free(s->hkp);
                free(s->dtm);
                free(s->dtm_wide);
                free(s->dpack);
                free(s->aoff);
                free(s->boff);
                free(s->coff);
                free(s->sp);
        }
        free(s->p);
}

static char *copy_base(const struct set *s, uint32_t c) { return s->dbuf + c * s->elems * esize(s->dtype); }


static int plan_with(struct gplan *g, const struct set *s, enum sched_mode mode, uint32_t ctas, int wide)
{
        memset(g, 0, sizeof(*g));
        sched_plan_init(&g->plan);
        g->wide = wide;
        g->cfg = (struct sched_config){.mode = mode,
                                       .shape = wide ? alt_shape(s->dtype, s->tf32)
                                                     : cuda_gemm_shape(s->dtype, s->tf32),
                                       .ctas = ctas};
        int rc = sched_plan_build(&g->plan, s->sp, s->n, &g->cfg);
        if (rc)
                return rc;
        if (g->plan.blob_bytes) {
                CK(cudaMalloc(&g->blob, g->plan.blob_bytes));
                CK(cudaMemcpy(g->blob, g->plan.blob, g->plan.blob_bytes, cudaMemcpyHostToDevice));
        }
        size_t wsb = cuda_gemm_ws_bytes(&g->plan, g->cfg.shape, s->dtype), ab = cuda_gemm_arrivals_bytes(&g->plan);
        if (wsb)
                CK(cudaMalloc((void **)&g->ws, wsb));
        if (ab) {
                CK(cudaMalloc((void **)&g->arr, ab));
                CK(cudaMemset(g->arr, 0, ab));
        }
        return 0;
}

int gplan_build(struct gplan *g, const struct set *s, enum sched_mode mode, uint32_t ctas)
{
        return plan_with(g, s, mode, ctas, 0);
}

int gplan_build_wide(struct gplan *g, const struct set *s, enum sched_mode mode, uint32_t ctas)
{
        return s->wide_ok ? plan_with(g, s, mode, ctas, 1) : -EINVAL;
}

void gplan_free(struct gplan *g)
{
        cudaFree(g->blob);
        cudaFree(g->ws);
        cudaFree(g->arr);
        sched_plan_deinit(&g->plan);
}

static int kbench_f64_general; /* --f64-general */

void kern_run(const struct set *s, const struct gplan *g, uint32_t copy)
{
        struct cuda_group grp = {.problems = s->dkp[copy],
                                 .problems_host = kbench_f64_general ? NULL : s->hkp[copy],
                                 .nproblems = s->n, .dtype = s->dtype,
                                 .tf32 = s->tf32, .plan_blob = g->blob, .plan = &g->plan,
                                 .cfg = g->cfg, .ws = g->ws, .arrivals = g->arr,
                                 .tmaps = g->sm80 ? NULL : g->wide ? s->dtm_wide[copy] : s->dtm[copy],
                                 .nfast = g->sm80 ? 0 : (uint32_t)s->nfast,
                                 .nfast_syr2k = g->sm80 ? 0 : s->nfast_syr2k,
                                 .pack = g->sm80 || g->wide ? NULL : s->dpack[copy]};
        int rc = cuda_gemm_launch(&grp, NULL);
        if (rc) {
                fprintf(stderr, "gemmbench: cuda_gemm_launch = %d\n", rc);
                exit(1);
        }
}

enum peer { PEER_LOOP, PEER_GROUPED, PEER_STRIDED, PEER_SYR2K, NPEERS };
static const char *peer_names[] = {"cublas-loop", "cublas-grouped", "cublas-strided", "cublas-syr2k"};

/* Host arrays for the grouped call, and device pointer arrays per copy. */
struct grouped {
        cublasOperation_t *ta, *tb;
        int *m, *n, *k, *lda, *ldb, *ldc, *gsize;
        float *alpha, *beta;
        double *alpha_d, *beta_d; /* f64 sets */
        void ***dA, ***dB, ***dC;
};

static cublasComputeType_t compute_type(const struct set *s)
{
        if (s->dtype == GEMMD_F64)
                return CUBLAS_COMPUTE_64F;
        if (s->dtype == GEMMD_F32)
                return s->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        return CUBLAS_COMPUTE_32F;
}

static void grouped_init(struct grouped *g, const struct set *s)
{
        uint32_t n = s->n;
        g->ta = malloc(n * sizeof(*g->ta));
        g->tb = malloc(n * sizeof(*g->tb));
        g->m = malloc(n * sizeof(int));
        g->n = malloc(n * sizeof(int));
        g->k = malloc(n * sizeof(int));
        g->lda = malloc(n * sizeof(int));
        g->ldb = malloc(n * sizeof(int));
        g->ldc = malloc(n * sizeof(int));
        g->gsize = malloc(n * sizeof(int));
        g->alpha = malloc(n * sizeof(float));
        g->beta = malloc(n * sizeof(float));
        g->alpha_d = malloc(n * sizeof(double));
        g->beta_d = malloc(n * sizeof(double));
        g->dA = malloc(s->copies * sizeof(void **));
        g->dB = malloc(s->copies * sizeof(void **));
        g->dC = malloc(s->copies * sizeof(void **));
        void **h = malloc(n * sizeof(void *));
        for (uint32_t i = 0; i < n; i++) {
                g->ta[i] = a_op(&s->p[i]);
                g->tb[i] = CUBLAS_OP_N;
                g->m[i] = (int)s->p[i].m;
                g->n[i] = (int)s->p[i].n;
                g->k[i] = (int)s->p[i].k;
                g->lda[i] = a_ld(&s->p[i]);
                g->ldb[i] = (int)s->p[i].k;
                g->ldc[i] = (int)s->p[i].m;
                g->gsize[i] = 1;
                g->alpha[i] = 1.f;
                g->beta[i] = (float)kbench_beta;
                g->alpha_d[i] = 1.0;
                g->beta_d[i] = kbench_beta;
        }
        size_t es = esize(s->dtype);
        for (uint32_t c = 0; c < s->copies; c++) {
                void ***arr[3] = {&g->dA[c], &g->dB[c], &g->dC[c]};
                const size_t *offs[3] = {s->aoff, s->boff, s->coff};
                for (int o = 0; o < 3; o++) {
                        for (uint32_t i = 0; i < n; i++)
                                h[i] = copy_base(s, c) + offs[o][i] * es;
                        CK(cudaMalloc((void **)arr[o], n * sizeof(void *)));
                        CK(cudaMemcpy(*arr[o], h, n * sizeof(void *), cudaMemcpyHostToDevice));
                }
        }
        free(h);
}

static void grouped_free(struct grouped *g, const struct set *s)
{
        for (uint32_t c = 0; c < s->copies; c++) {
                cudaFree(g->dA[c]);
                cudaFree(g->dB[c]);
                cudaFree(g->dC[c]);
        }
        free(g->ta), free(g->tb), free(g->m), free(g->n), free(g->k), free(g->lda), free(g->ldb);
        free(g->ldc), free(g->gsize), free(g->alpha), free(g->beta), free(g->alpha_d), free(g->beta_d), free(g->dA), free(g->dB), free(g->dC);
}

/* Runs a cuBLAS peer once over copy c; returns 0 or -1 when it does not apply. */
static int peer_run(cublasHandle_t h, const struct set *s, const struct grouped *g, enum peer peer, uint32_t c)
{
        const float one = 1.f, beta = (float)kbench_beta;
        const double oned = 1.0, betad = kbench_beta; /* 0 unless --beta */
        const int f64 = s->dtype == GEMMD_F64;
        const void *onep = f64 ? (const void *)&oned : (const void *)&one;
        const void *betap = f64 ? (const void *)&betad : (const void *)&beta;
        size_t es = esize(s->dtype);
        cudaDataType_t t = cuda_type(s->dtype);
        char *base = copy_base(s, c);
        switch (peer) {
        case PEER_LOOP:
                if (s->any_syr2k)
                        return -1;
                for (uint32_t i = 0; f64 && i < s->n; i++) {
                        const struct bprob *p = &s->p[i];
                        CB(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->m, (int)p->n, (int)p->k, &oned,
                                       (const double *)(base + s->aoff[i] * es), (int)p->k,
                                       (const double *)(base + s->boff[i] * es), (int)p->k, &betad,
                                       (double *)(base + s->coff[i] * es), (int)p->m));
                }
                for (uint32_t i = 0; !f64 && i < s->n; i++) {
                        const struct bprob *p = &s->p[i];
                        CB(cublasGemmEx(h, a_op(p), CUBLAS_OP_N, (int)p->m, (int)p->n, (int)p->k, &one,
                                        base + s->aoff[i] * es, t, a_ld(p), base + s->boff[i] * es, t,
                                        (int)p->k, &beta, base + s->coff[i] * es, t, (int)p->m,
                                        compute_type(s), CUBLAS_GEMM_DEFAULT));
                }
                return 0;
        case PEER_GROUPED:
                if (s->any_syr2k)
                        return -1;
                if (f64) {
                        CB(cublasDgemmGroupedBatched(h, g->ta, g->tb, g->m, g->n, g->k, g->alpha_d,
                                                     (const double *const *)g->dA[c], g->lda,
                                                     (const double *const *)g->dB[c], g->ldb, g->beta_d,
                                                     (double *const *)g->dC[c], g->ldc, (int)s->n, g->gsize));
                        return 0;
                }
                CB(cublasGemmGroupedBatchedEx(h, g->ta, g->tb, g->m, g->n, g->k, g->alpha,
                                              (const void *const *)g->dA[c], t, g->lda,
                                              (const void *const *)g->dB[c], t, g->ldb, g->beta,
                                              (void *const *)g->dC[c], t, g->ldc, (int)s->n, g->gsize,
                                              compute_type(s)));
                return 0;
        case PEER_STRIDED: {
                if (s->any_syr2k || !s->all_equal || s->n < 2)
                        return -1;
                const struct bprob *p = &s->p[0];
                CB(cublasGemmStridedBatchedEx(h, a_op(p), CUBLAS_OP_N, (int)p->m, (int)p->n, (int)p->k,
                                              onep, base + s->aoff[0] * es, t, a_ld(p),
                                              (long long)(s->aoff[1] - s->aoff[0]), base + s->boff[0] * es,
                                              t, (int)p->k, (long long)(s->boff[1] - s->boff[0]), betap,
                                              base + s->coff[0] * es, t, (int)p->m,
                                              (long long)(s->coff[1] - s->coff[0]), (int)s->n,
                                              compute_type(s), CUBLAS_GEMM_DEFAULT));
                return 0;
        }
        case PEER_SYR2K:
                if (s->dtype != GEMMD_F32 && !f64)
                        return -1;
                for (uint32_t i = 0; i < s->n; i++) {
                        const struct bprob *p = &s->p[i];
                        if (p->kind != SCHED_SYR2K)
                                return -1;
                        if (f64) {
                                CB(cublasDsyr2k(h, p->uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER,
                                                CUBLAS_OP_T, (int)p->n, (int)p->k, &oned,
                                                (const double *)(base + s->aoff[i] * es), (int)p->k,
                                                (const double *)(base + s->boff[i] * es), (int)p->k, &betad,
                                                (double *)(base + s->coff[i] * es), (int)p->n));
                                continue;
                        }
                        CB(cublasSsyr2k(h, p->uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER,
                                        CUBLAS_OP_T, (int)p->n, (int)p->k, &one,
                                        (const float *)(base + s->aoff[i] * es), (int)p->k,
                                        (const float *)(base + s->boff[i] * es), (int)p->k, &beta,
                                        (float *)(base + s->coff[i] * es), (int)p->n));
                }
                return 0;
        default:
                return -1;
        }
}

static int cmpf(const void *a, const void *b)
{
        float x = *(const float *)a, y = *(const float *)b;
        return (x > y) - (x < y);
}

int kbench_queued;
static int kbench_paired; /* --paired */
static int kbench_interleaved; /* --interleaved */

/* Medians (into med[]) of reps timed runs of each of the nf functions
 * fn[j](arg[j], copy), taken in turn (fn[0], fn[1], ..., fn[0], ...)
 * after three warm-ups of each, rotating over copies: with several, all
 * meet the same clocks (--paired). Returns 0, or -1 when one fails. */
static int time_turns(const runfn *fn, void *const *arg, int nf, uint32_t copies, int reps, float *med)
{
        cudaEvent_t e0, e1;
        float *ms = malloc((size_t)nf * reps * sizeof(float));
        uint32_t c = 0;
        double queue_us = 0; /* the host's time to queue the last warm-up */
        int rc = 0;

        if (!ms)
                return -1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        for (int i = 0; i < 3 * nf && !rc; i++) {
                const uint64_t t0 = bench_now_ns();

                rc = fn[i % nf](arg[i % nf], c);
                queue_us = (bench_now_ns() - t0) * 1e-3;
                if (i % nf == nf - 1)
                        c = (c + 1) % copies;
        }
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < nf * reps && !rc; i++) {
                const int j = i % nf;

                /* Twice what queueing took, so the run is queued
                 * before the spin ends even when the host is slower. */
                if (kbench_queued && bench_spin((uint32_t)(2 * queue_us) + 100)) {
                        fprintf(stderr, "gemmbench: spin kernel launch failed\n");
                        exit(1);
                }
                CK(cudaEventRecord(e0, NULL));
                rc = fn[j](arg[j], c);
                CK(cudaEventRecord(e1, NULL));
                CK(cudaEventSynchronize(e1));
                CK(cudaGetLastError());
                CK(cudaEventElapsedTime(&ms[j * reps + i / nf], e0, e1));
                if (j == nf - 1)
                        c = (c + 1) % copies;
        }
        for (int j = 0; j < nf && !rc; j++) {
                qsort(ms + j * reps, reps, sizeof(float), cmpf);
                med[j] = ms[j * reps + reps / 2];
        }
        free(ms);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        return rc ? -1 : 0;
}

float time_median(runfn fn, void *arg, uint32_t copies, int reps)
{
        float med;

        return time_turns(&fn, &arg, 1, copies, reps, &med) ? -1 : med;
}

int grun_fn(void *arg, uint32_t c)
{
        struct grun *r = arg;
        kern_run(r->s, r->g, c);
        return 0;
}

struct prun {
        cublasHandle_t h;
        const struct set *s;
        const struct grouped *g;
        enum peer peer;
};

static int prun_fn(void *arg, uint32_t c)
{
        struct prun *r = arg;
        return peer_run(r->h, r->s, r->g, r->peer, c);
}

/* An element type of a host copy that no set has: the f64 reference. */
#define DT_F64 (-1)

static double getv(const void *base, int dtype, size_t i)
{
        if (dtype == DT_F64 || dtype == GEMMD_F64)
                return ((const double *)base)[i];
        if (dtype == GEMMD_F32)
                return ((const float *)base)[i];
        uint16_t h = ((const uint16_t *)base)[i];
        return dtype == GEMMD_F16 ? gemmd_f16_to_f32(h) : gemmd_bf16_to_f32(h);
}

/* Computes every problem of s over copy 0 into ref (device, f32, laid out
 * like the set's C's from coff[0] on) with cublasGemmEx: one call per GEMM,
 * two per SYR2K (A^T B, then + B^T A; both triangles). The reference for
 * sets that no cuBLAS peer covers: 16-bit SYR2Ks, SYR2Ks mixed with GEMMs. */
static void ref_gemmex(cublasHandle_t h, const struct set *s, float *ref)
{
        const float one = 1.f, beta = (float)kbench_beta;
        size_t es = esize(s->dtype);
        cudaDataType_t t = cuda_type(s->dtype);
        char *base = copy_base(s, 0);
        for (uint32_t i = 0; i < s->n; i++) {
                const struct bprob *p = &s->p[i];
                const char *a = base + s->aoff[i] * es, *b = base + s->boff[i] * es;
                float *c = ref + (s->coff[i] - s->coff[0]);
                CB(cublasGemmEx(h, a_op(p), CUBLAS_OP_N, (int)p->m, (int)p->n, (int)p->k, &one, a, t,
                                a_ld(p), b, t, (int)p->k, &beta, c, CUDA_R_32F, (int)p->m, compute_type(s),
                                CUBLAS_GEMM_DEFAULT));
                if (p->kind == SCHED_SYR2K)
                        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->n, (int)p->n, (int)p->k, &one, b,
                                        t, (int)p->k, a, t, (int)p->k, &one, c, CUDA_R_32F, (int)p->n,
                                        compute_type(s), CUBLAS_GEMM_DEFAULT));
        }
}

/* Worst and root-mean-square |x - ref| over the stored C elements of s
 * (host copies laid out like the set's Cs from coff[0] on, of types xdt
 * and rdt), relative to the largest |ref|. */
struct accuracy {
        double max, rms;
};

static struct accuracy accuracy_of(const struct set *s, const void *x, int xdt, const void *ref, int rdt)
{
        double maxd = 0, sum2 = 0, maxc = 0;
        size_t cnt = 0;
        for (uint32_t i = 0; i < s->n; i++) {
                const struct bprob *p = &s->p[i];
                size_t o = s->coff[i] - s->coff[0];
                for (uint32_t j = 0; j < p->n; j++)
                        for (uint32_t r = 0; r < p->m; r++) {
                                if (p->kind == SCHED_SYR2K && (p->uplo ? r > j : r < j))
                                        continue;
                                const size_t e = o + r + (size_t)j * p->m;
                                double b = getv(ref, rdt, e), d = fabs(getv(x, xdt, e) - b);
                                if (!(d <= maxd))
                                        maxd = isnan(d) ? INFINITY : d;
                                sum2 += d * d;
                                cnt++;
                                if (fabs(b) > maxc)
                                        maxc = fabs(b);
                        }
        }
        struct accuracy a = {maxd, cnt ? sqrt(sum2 / (double)cnt) : 0};
        if (maxc > 0) {
                a.max /= maxc;
                a.rms /= maxc;
        }
        return a;
}

/* Sets the C's of copy 0 (bytes from dC) to what a check starts from:
 * poison (NaN) where beta is 0 and C must not be read, else C_FILL. */
static void c_start(char *dC, size_t cbytes)
{
        CK(cudaMemset(dC, kbench_beta != 0.0 ? C_FILL : 0xff, cbytes));
}

/* Runs plan g on copy 0 from c_start and copies C into out (cbytes). */
static void run_into(const struct set *s, const struct gplan *g, char *out, size_t cbytes)
{
        char *dC = copy_base(s, 0) + s->coff[0] * esize(s->dtype);

        c_start(dC, cbytes);
        kern_run(s, g, 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out, dC, cbytes, cudaMemcpyDeviceToHost));
}

/* Max |gemmd - cuBLAS| / max |cuBLAS| over every problem's stored C. */
static double verify(cublasHandle_t h, const struct set *s, const struct grouped *gr, enum sched_mode mode,
                     uint32_t ctas)
{
        size_t es = esize(s->dtype), cbytes = (s->elems - s->coff[0]) * es;
        size_t rbytes = (s->elems - s->coff[0]) * (es > sizeof(float) ? es : sizeof(float));
        char *dC = copy_base(s, 0) + s->coff[0] * es;
        char *g = malloc(cbytes), *c = malloc(rbytes);
        int rdtype = s->dtype; /* of the reference in c */
        struct gplan gp;
        if (!g || !c || gplan_build(&gp, s, mode, ctas)) {
                fprintf(stderr, "gemmbench: verify setup failed\n");
                exit(1);
        }
        run_into(s, &gp, g, cbytes);
        CK(cudaMemset(dC, kbench_beta != 0.0 ? C_FILL : 0, cbytes));
        enum peer peer = s->any_syr2k ? PEER_SYR2K : PEER_LOOP;
        if (peer_run(h, s, gr, peer, 0)) {
                float *ref;
                CK(cudaMalloc((void **)&ref, rbytes));
                if (kbench_beta != 0.0) {
                        /* The reference starts where C did (c_start), in f32. */
                        unsigned char fill[8];
                        memset(fill, C_FILL, sizeof(fill));
                        const float c0 = (float)getv(fill, s->dtype, 0);
                        float *hr = malloc(rbytes);
                        if (!hr) {
                                fprintf(stderr, "gemmbench: out of memory\n");
                                exit(1);
                        }
                        for (size_t i = 0; i < rbytes / sizeof(float); i++)
                                hr[i] = c0;
                        CK(cudaMemcpy(ref, hr, rbytes, cudaMemcpyHostToDevice));
                        free(hr);
                }
                ref_gemmex(h, s, ref);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(c, ref, rbytes, cudaMemcpyDeviceToHost));
                CK(cudaFree(ref));
                rdtype = GEMMD_F32;
        } else {
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(c, dC, cbytes, cudaMemcpyDeviceToHost));
        }
        const double err = accuracy_of(s, g, s->dtype, c, rdtype).max;
        gplan_free(&gp);
        free(g);
        free(c);
        return err;
}

/* Exact f32 sets: how far gemmd's kernels (the fast path, which splits
 * each operand into two TF32 parts, and the FMA kernel) and cuBLAS land
 * from an f64 reference of the same inputs. Prints one comment line (text)
 * or one JSON object. */
static void f32_accuracy(cublasHandle_t h, const struct set *s, const struct grouped *gr, uint32_t ctas,
                         const char *wname, int json)
{
        size_t n = s->elems - s->coff[0];
        float *dC = (float *)copy_base(s, 0) + s->coff[0];
        float *x = malloc(n * sizeof(float));
        double *ref = malloc(n * sizeof(double)), *dref;
        const float *base = (const float *)copy_base(s, 0);
        struct accuracy acc[3];
        static const char *names[3] = {"split-tf32", "ffma", "cublas"};
        if (!x || !ref) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        CK(cudaMalloc((void **)&dref, n * sizeof(double)));
        for (uint32_t i = 0; i < s->n; i++) {
                const struct bprob *p = &s->p[i];
                if (bench_ref_f64(base + s->aoff[i], base + s->boff[i], dref + (s->coff[i] - s->coff[0]), p->m,
                                  p->n, p->k, p->kind == SCHED_SYR2K)) {
                        fprintf(stderr, "gemmbench: reference launch failed\n");
                        exit(1);
                }
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(ref, dref, n * sizeof(double), cudaMemcpyDeviceToHost));
        CK(cudaFree(dref));
        for (int v = 0; v < 3; v++) {
                CK(cudaMemset(dC, 0xff, n * sizeof(float))); /* NaN: poison */
                if (v < 2) {
                        struct gplan gp;
                        if (gplan_build(&gp, s, SCHED_LPT, ctas)) {
                                fprintf(stderr, "gemmbench: plan build failed\n");
                                exit(1);
                        }
                        gp.sm80 = v == 1;
                        kern_run(s, &gp, 0);
                        CK(cudaDeviceSynchronize());
                        gplan_free(&gp);
                } else {
                        if (peer_run(h, s, gr, s->any_syr2k ? PEER_SYR2K : PEER_LOOP, 0)) {
                                acc[v] = (struct accuracy){NAN, NAN}; /* no cuBLAS call covers the set */
                                continue;
                        }
                        CK(cudaDeviceSynchronize());
                }
                CK(cudaMemcpy(x, dC, n * sizeof(float), cudaMemcpyDeviceToHost));
                acc[v] = accuracy_of(s, x, GEMMD_F32, ref, DT_F64);
        }
        if (json) {
                printf("{\"workload\":\"%s\",\"config\":\"f32\",\"accuracy\":{", wname);
                for (int v = 0; v < 3; v++)
                        printf("%s\"%s\":{\"max\":%.3g,\"rms\":%.3g}", v ? "," : "", names[v], acc[v].max,
                               acc[v].rms);
                printf("}}\n");
        } else {
                printf("# %s f32 against an f64 reference, |error| / max |C| (max, rms):", wname);
                for (int v = 0; v < 3; v++)
                        printf(" %s %.2e %.2e%s", names[v], acc[v].max, acc[v].rms, v < 2 ? ";" : "\n");
        }
        free(x);
        free(ref);
}

/* f64 sets: how far gemmd's kernel (lpt plan) and cuBLAS land from a
 * double-double reference (bench_ref_dd) over up to 64 sampled columns of
 * each problem's C, |error| / max |reference| (max, rms). Prints one
 * comment line (text) or one JSON object. */
static void f64_accuracy(cublasHandle_t h, const struct set *s, const struct grouped *gr, uint32_t ctas,
                         const char *wname, int json)
{
        const size_t n = s->elems - s->coff[0];
        double *dC = (double *)copy_base(s, 0) + s->coff[0];
        const double *base = (const double *)copy_base(s, 0);
        size_t *roff = malloc(s->n * sizeof(size_t)), nref = 0;
        uint32_t *step = malloc(s->n * sizeof(uint32_t));
        double *x = malloc(n * sizeof(double)), *dhi, *dlo, *hi, *lo;
        static const char *names[2] = {"gemmd", "cublas"};
        double res[2][2];
        if (!roff || !step || !x) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        for (uint32_t i = 0; i < s->n; i++) {
                step[i] = (s->p[i].n + 63) / 64;
                roff[i] = nref;
                nref += (size_t)s->p[i].m * ((s->p[i].n + step[i] - 1) / step[i]);
        }
        hi = malloc(nref * sizeof(double));
        lo = malloc(nref * sizeof(double));
        if (!hi || !lo) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        CK(cudaMalloc((void **)&dhi, nref * sizeof(double)));
        CK(cudaMalloc((void **)&dlo, nref * sizeof(double)));
        for (uint32_t i = 0; i < s->n; i++) {
                const struct bprob *p = &s->p[i];
                if (bench_ref_dd(base + s->aoff[i], base + s->boff[i], dhi + roff[i], dlo + roff[i], p->m, p->n,
                                 p->k, p->kind == SCHED_SYR2K, step[i])) {
                        fprintf(stderr, "gemmbench: reference launch failed\n");
                        exit(1);
                }
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hi, dhi, nref * sizeof(double), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(lo, dlo, nref * sizeof(double), cudaMemcpyDeviceToHost));
        CK(cudaFree(dhi));
        CK(cudaFree(dlo));
        for (int v = 0; v < 2; v++) {
                CK(cudaMemset(dC, 0xff, n * sizeof(double))); /* NaN: poison */
                if (v == 0) {
                        struct gplan gp;
                        if (gplan_build(&gp, s, SCHED_LPT, ctas)) {
                                fprintf(stderr, "gemmbench: plan build failed\n");
                                exit(1);
                        }
                        kern_run(s, &gp, 0);
                        CK(cudaDeviceSynchronize());
                        gplan_free(&gp);
                } else {
                        if (peer_run(h, s, gr, s->any_syr2k ? PEER_SYR2K : PEER_LOOP, 0)) {
                                res[v][0] = res[v][1] = NAN;
                                continue;
                        }
                        CK(cudaDeviceSynchronize());
                }
                CK(cudaMemcpy(x, dC, n * sizeof(double), cudaMemcpyDeviceToHost));
                long double maxd = 0, maxr = 0, sum2 = 0;
                size_t cnt = 0;
                for (uint32_t i = 0; i < s->n; i++) {
                        const struct bprob *p = &s->p[i];
                        const size_t o = s->coff[i] - s->coff[0];
                        for (uint32_t y = 0; y * step[i] < p->n; y++) {
                                const uint32_t j = y * step[i];
                                for (uint32_t r = 0; r < p->m; r++) {
                                        if (p->kind == SCHED_SYR2K && (p->uplo ? r > j : r < j))
                                                continue;
                                        const size_t e = roff[i] + r + (size_t)y * p->m;
                                        const long double ref = (long double)hi[e] + lo[e];
                                        const long double d = fabsl(x[o + r + (size_t)j * p->m] - ref);
                                        if (!(d <= maxd))
                                                maxd = isnan(d) ? INFINITY : d;
                                        sum2 += d * d;
                                        cnt++;
                                        if (fabsl(ref) > maxr)
                                                maxr = fabsl(ref);
                                }
                        }
                }
                res[v][0] = (double)(maxr > 0 ? maxd / maxr : maxd);
                res[v][1] = cnt ? (double)(sqrtl(sum2 / cnt) / (maxr > 0 ? maxr : 1)) : 0;
        }
        if (json) {
                printf("{\"workload\":\"%s\",\"config\":\"f64\",\"accuracy\":{", wname);
                for (int v = 0; v < 2; v++)
                        printf("%s\"%s\":{\"max\":%.3g,\"rms\":%.3g}", v ? "," : "", names[v], res[v][0],
                               res[v][1]);
                printf("}}\n");
        } else {
                printf("# %s f64 against a double-double reference (sampled columns), |error| / max |C| (max, rms):",
                       wname);
                for (int v = 0; v < 2; v++)
                        printf(" %s %.2e %.2e%s", names[v], res[v][0], res[v][1], v < 1 ? ";" : "\n");
        }
        free(roff);
        free(step);
        free(x);
        free(hi);
        free(lo);
}

/* How many elements of C the wide tile computes with other bits than the
 * usual one (both rr plans, C poisoned first): the kernels sum the same
 * canonical chunks, so this should be 0. -1 when the set has no wide tile. */
static long wide_bits_differ(const struct set *s, uint32_t ctas)
{
        size_t es = esize(s->dtype), n = s->elems - s->coff[0];
        struct gplan g0, g1;
        long diff = 0;

        if (!s->wide_ok)
                return -1;
        char *x = malloc(n * es), *y = malloc(n * es);
        if (!x || !y || gplan_build(&g0, s, SCHED_ROUND_ROBIN, ctas) ||
            gplan_build_wide(&g1, s, SCHED_ROUND_ROBIN, ctas)) {
                fprintf(stderr, "gemmbench: wide check setup failed\n");
                exit(1);
        }
        run_into(s, &g0, x, n * es);
        run_into(s, &g1, y, n * es);
        /* Only the problems' C elements: the gaps between them are poison in both. */
        for (uint32_t i = 0; i < s->n; i++) {
                const struct bprob *p = &s->p[i];
                size_t off = (s->coff[i] - s->coff[0]) * es, len = (size_t)p->m * p->n * es;
                for (size_t b = 0; b < len; b += es)
                        diff += memcmp(x + off + b, y + off + b, es) != 0;
        }
        gplan_free(&g0);
        gplan_free(&g1);
        free(x);
        free(y);
        return diff;
}

static const char *cfg_name(int dtype, int tf32)
{
        return dtype == GEMMD_F64   ? "f64"
               : dtype == GEMMD_F32 ? (tf32 ? "tf32" : "f32")
               : dtype == GEMMD_F16 ? "f16"
                                    : "bf16";
}

/* Writes v in fmt to buf, or "-" where ok is 0 (a peer that does not
 * apply); returns buf. */
static const char *num_or_dash(char *buf, size_t len, int ok, const char *fmt, double v)
{
        if (ok)
                snprintf(buf, len, fmt, v);
        else
                snprintf(buf, len, "-");
        return buf;
}

static void usage(FILE *f)
{
        fprintf(f, "usage: gemmbench kernels [--mode MODE|all] [--workload NAME|all|FILE] [--json] "
                   "[--reps N] [--cost SPEC] [--queued] [--paired] [--interleaved] [--f64-general] [--narrow] [--a-mn]\n"
                   "                         [--beta X]   (C = A B + X C for gemmd and every peer; default 0)\n"
                   "       gemmbench calibrate [--reps N] [--json]   (the cost model measured here)\n"
                   "       gemmbench floor [--reps N]   (a kernel's device time before any work, beside cuBLAS)\n"
                   "       gemmbench list [NAME|FILE]   (a workload's problem list, `gemmctl plan` format)\n"
                   "       gemmbench clients [options]  (--help lists them)\n"
                   "       gemmbench [COMMAND] --help   (this text; clients: its own)\n"
                   "workloads:");
        for (size_t i = 0; i < NBUILTIN; i++)
                fprintf(f, " %s", builtin[i]);
        fprintf(f, "\n");
}

/* A usage error of command cmd ("kernels", "list") in one line and where
 * the help is. Returns 2, the exit status. */
static int usage_error(const char *cmd, const char *what, const char *arg)
{
        fprintf(stderr, "gemmbench %s: %s%s%s%s\nTry 'gemmbench --help'.\n", cmd, what,
                arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
        return 2;
}

/* 1 when arg asks for the help. */
static int is_help(const char *arg)
{
        return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

/* Writes w's problems to f in the `gemmctl plan` format, every dtype (and
 * every SYR2K's triangle) spelled out, after a comment naming w and the
 * argument it came from. */
static void write_list(FILE *f, const struct workload *w, const char *arg)
{
        fprintf(f, "# gemmbench workload %s: %u problem%s (gemmbench list %s)\n", w->name, w->n,
                w->n == 1 ? "" : "s", arg);
        for (uint32_t i = 0; i < w->n; i++) {
                const struct bprob *p = &w->p[i];
                if (p->kind == SCHED_SYR2K)
                        fprintf(f, "syr2k %u %u %s %s\n", p->n, p->k, cfg_name(p->dtype, p->tf32),
                                p->uplo ? "upper" : "lower");
                else
                        fprintf(f, "gemm %u %u %u %s\n", p->m, p->n, p->k, cfg_name(p->dtype, p->tf32));
        }
}

/* `gemmbench list [NAME|FILE]`: the built-in names, or one workload's
 * problem list on stdout. Needs no GPU. Returns the exit status. */
static int list_main(int argc, char **argv)
{
        struct workload w;
        if (argc == 1) {
                for (size_t i = 0; i < NBUILTIN; i++)
                        printf("%s\n", builtin[i]);
                return 0;
        }
        if (is_help(argv[1])) {
                usage(stdout);
                return 0;
        }
        if (argc != 2 || argv[1][0] == '-')
                return usage_error("list", argc != 2 ? "one NAME or FILE, not" : "unknown option",
                                   argv[argc != 2 ? 2 : 1]);
        if (make_builtin(argv[1], &w) && load_file(argv[1], &w))
                return 1;
        write_list(stdout, &w, argv[1]);
        free(w.p);
        return fflush(stdout) ? 1 : 0;
}

/* One row of a workload's table: a mode's plan, its name, and its
 * median time with the paired peer's (-1: not timed so). */
struct krow {
        struct gplan gp;
        char name[32];
        float ms, pms;
};

/* Times rows[0 .. n) (their runs in runs[]) and, when pr is given, that
 * peer in turn, rep by rep: each row's median in ms, the peer's in pms. */
static void time_in_turn(const struct set *s, struct krow *rows, struct grun *runs, int n, struct prun *pr,
                         int reps)
{
        runfn fns[2 * SCHED_NMODES + 2];
        void *args[2 * SCHED_NMODES + 2];
        float med[2 * SCHED_NMODES + 2];

        for (int i = 0; i < n; i++) {
                fns[i] = grun_fn;
                args[i] = &runs[i];
        }
        fns[n] = prun_fn;
        args[n] = pr;
        if (time_turns(fns, args, n + (pr != NULL), s->copies, reps, med))
                return;
        for (int i = 0; i < n; i++) {
                rows[i].ms = med[i];
                rows[i].pms = pr ? med[n] : -1;
        }
}

/* Times the n rows of set s: with --interleaved all of them and the
 * fastest peer (best_p) in turn, rep by rep, so that every row meets the
 * same clocks (a GPU at its power limit moves them within a run, and a
 * row timed after another meets a hotter GPU); with --paired each row in
 * turn with that peer; else each row alone, one after another. */
static void time_rows(cublasHandle_t h, const struct set *s, const struct grouped *gr, struct krow *rows, int n,
                      int best_p, int reps)
{
        struct prun pr = {h, s, gr, (enum peer)(best_p >= 0 ? best_p : 0)};
        struct prun *peer = best_p >= 0 ? &pr : NULL;
        struct grun runs[2 * SCHED_NMODES + 1];

        for (int i = 0; i < n; i++)
                runs[i] = (struct grun){s, &rows[i].gp};
        if (kbench_interleaved) {
                time_in_turn(s, rows, runs, n, peer, reps);
                return;
        }
        for (int i = 0; i < n; i++) {
                if (kbench_paired && peer)
                        time_in_turn(s, &rows[i], &runs[i], 1, peer, reps);
                else
                        rows[i].ms = time_median(grun_fn, &runs[i], s->copies, reps);
        }
}

/* Prints row k of workload w's set s: JSON or a table line, with the
 * peers' times and the row's ratio to the fastest (to the peer timed
 * with it, where one was). */
static void print_row(const struct workload *w, const struct set *s, const struct krow *k, const float *peer_ms,
                      int best_p, float best_peer, double err, int json)
{
        const double gf = s->flops * 1e-9;
        const float ms = k->ms, pms = k->pms;
        const float grouped_ms = peer_ms[PEER_GROUPED] > 0 ? peer_ms[PEER_GROUPED] : peer_ms[PEER_SYR2K];
        const float row_best = pms > 0 ? pms : best_peer;
        const double tf = gf / ms; /* GFLOP / ms = TFLOP/s */
#define TF(x) ((x) > 0 ? gf / (x) : 0.0)
        if (pms > 0 && !json && !kbench_interleaved)
                printf("# %s %s %s paired with %s, in turn: %.1f TF/s\n", w->name, cfg_name(s->dtype, s->tf32),
                       k->name, peer_names[best_p], gf / pms);
        if (json) {
                printf("{\"workload\":\"%s\",\"config\":\"%s\",\"mode\":\"%s\",\"problems\":%u,"
                       "\"gflop\":%.3f,\"gemmd_ms\":%.4f,\"gemmd_tfs\":%.2f,"
                       "\"plan_us\":%.1f,\"tmaps_us\":%.1f,\"split_tiles\":%u,\"max_rel_err\":%.3g",
                       w->name, cfg_name(s->dtype, s->tf32), k->name, s->n, gf, ms, tf, k->gp.plan.build_us,
                       s->tmaps_us, k->gp.plan.nsplit, err);
                for (int p = 0; p < NPEERS; p++) {
                        if (peer_ms[p] > 0)
                                printf(",\"%s_ms\":%.4f,\"%s_tfs\":%.2f", peer_names[p], peer_ms[p], peer_names[p],
                                       TF(peer_ms[p]));
                        else
                                printf(",\"%s_ms\":null,\"%s_tfs\":null", peer_names[p], peer_names[p]);
                }
                if (pms > 0)
                        printf(",\"paired_peer\":\"%s\",\"paired_peer_ms\":%.4f", peer_names[best_p], pms);
                printf("}\n");
        } else {
                char lb[16], gb[16], sb[16], xg[16], xb[16];
                printf("%-12s %-5s %-13s %9.4f %8.1f %8s %8s %8s %7s %7s %9.2e\n", w->name,
                       cfg_name(s->dtype, s->tf32), k->name, ms, tf,
                       num_or_dash(lb, sizeof(lb), peer_ms[PEER_LOOP] > 0, "%.1f", TF(peer_ms[PEER_LOOP])),
                       num_or_dash(gb, sizeof(gb), grouped_ms > 0, "%.1f", TF(grouped_ms)),
                       num_or_dash(sb, sizeof(sb), peer_ms[PEER_STRIDED] > 0, "%.1f", TF(peer_ms[PEER_STRIDED])),
                       num_or_dash(xg, sizeof(xg), grouped_ms > 0, "%.2f", grouped_ms / ms),
                       num_or_dash(xb, sizeof(xb), row_best > 0, "%.2f", row_best / ms), err);
        }
#undef TF
        fflush(stdout);
}

static void bench_workload(cublasHandle_t h, const struct workload *w, int modes_mask, int json, int reps,
                           uint32_t nsm, size_t l2)
{
        static const int cfgs[5][2] = {
                {GEMMD_BF16, 0}, {GEMMD_F16, 0}, {GEMMD_F32, 1}, {GEMMD_F32, 0}, {GEMMD_F64, 0}};
        for (int ci = 0; ci < 5; ci++) {
                struct set s;
                if (kbench_a_mn && cfgs[ci][0] != GEMMD_F16 && cfgs[ci][0] != GEMMD_BF16)
                        continue;
                set_init(&s, w, cfgs[ci][0], cfgs[ci][1], l2, 0);
                if (!s.n) {
                        set_free(&s);
                        continue;
                }
                struct grouped gr;
                grouped_init(&gr, &s);
                double err = verify(h, &s, &gr, SCHED_LPT, nsm);
                if (!json)
                        printf("# %s %s: tensor maps of %u problems encoded in %.1f us (%.2f us a problem), "
                               "found again in the memo in %.1f us\n",
                               w->name, cfg_name(s.dtype, s.tf32), s.n, s.tmaps_us, s.tmaps_us / s.n,
                               s.tmaps_memo_us);
                /* (Their references are of A B alone: beta 0.) */
                if (s.dtype == GEMMD_F32 && !s.tf32 && s.nfast > 0 && kbench_beta == 0.0)
                        f32_accuracy(h, &s, &gr, nsm, w->name, json);
                if (s.dtype == GEMMD_F64 && kbench_beta == 0.0)
                        f64_accuracy(h, &s, &gr, nsm, w->name, json);
                const long wdiff = wide_bits_differ(&s, nsm);
                if (wdiff >= 0) {
                        if (json)
                                printf("{\"workload\":\"%s\",\"config\":\"%s\",\"wide_bits_differ\":%ld}\n",
                                       w->name, cfg_name(s.dtype, s.tf32), wdiff);
                        else
                                printf("# %s %s: elements of C whose bits differ between the %s tile and "
                                       "the usual one: %ld; the daemon would run it on the %s tile "
                                       "(sched_prefer_wide, sched_prefer_narrow)\n",
                                       w->name, cfg_name(s.dtype, s.tf32), kbench_narrow ? "narrow" : "wide", wdiff,
                                       sched_prefer_wide(sched_cost_get(), s.sp, s.n, cuda_gemm_shape(s.dtype, s.tf32),
                                                         cuda_gemm_shape_wide(s.dtype, s.tf32), nsm)
                                               ? "wide"
                                       : sched_prefer_narrow(s.sp, s.n, cuda_gemm_shape(s.dtype, s.tf32),
                                                             cuda_gemm_shape_narrow(s.dtype, s.tf32), nsm)
                                               ? "narrow"
                                               : "usual");
                }
                float peer_ms[NPEERS];
                for (int p = 0; p < NPEERS; p++) {
                        struct prun pr = {h, &s, &gr, (enum peer)p};
                        peer_ms[p] = time_median(prun_fn, &pr, s.copies, reps);
                }
                float best_peer = -1;
                int best_p = -1;
                for (int p = 0; p < NPEERS; p++)
                        if (peer_ms[p] > 0 && (best_peer < 0 || peer_ms[p] < best_peer)) {
                                best_peer = peer_ms[p];
                                best_p = p;
                        }
                /* Rows: each mode; sets on the fast path one more, lpt
                 * on the sm_80 kernel ("lpt-80"), for comparison; sets
                 * that take the wide tile each mode again with it
                 * ("rr-w", ...). Every row's plan is built first, so
                 * that --interleaved can time them all in turn. */
                const int extra = s.nfast > 0 && (modes_mask & (1 << SCHED_LPT));
                const int nwide = s.wide_ok ? SCHED_NMODES : 0;
                struct krow rows[2 * SCHED_NMODES + 1];
                int nrows = 0;
                for (int mi = 0; mi < SCHED_NMODES + extra + nwide; mi++) {
                        const int is_w = mi >= SCHED_NMODES + extra;
                        const int mode = is_w ? mi - SCHED_NMODES - extra : mi < SCHED_NMODES ? mi : SCHED_LPT;
                        if (!(modes_mask & (1 << mode)))
                                continue;
                        struct krow *k = &rows[nrows++];
                        if ((is_w ? gplan_build_wide : gplan_build)(&k->gp, &s, (enum sched_mode)mode, nsm)) {
                                fprintf(stderr, "gemmbench: plan build failed\n");
                                exit(1);
                        }
                        k->gp.sm80 = !is_w && mi >= SCHED_NMODES;
                        /* auto shows its choice: "auto>sorted" */
                        const int chose = k->gp.plan.mode != (enum sched_mode)mode;
                        if (k->gp.sm80)
                                snprintf(k->name, sizeof(k->name), "lpt-80");
                        else
                                snprintf(k->name, sizeof(k->name), "%s%s%s%s", sched_mode_name((enum sched_mode)mode),
                                         chose ? ">" : "", chose ? sched_mode_name(k->gp.plan.mode) : "",
                                         is_w ? (kbench_narrow ? "-n" : "-w") : "");
                        k->ms = k->pms = -1;
                }
                time_rows(h, &s, &gr, rows, nrows, best_p, reps);
                if (kbench_interleaved && nrows && rows[0].pms > 0 && !json)
                        printf("# %s %s: the rows and %s timed in turn, %s at %.1f TF/s\n", w->name,
                               cfg_name(s.dtype, s.tf32), peer_names[best_p], peer_names[best_p],
                               s.flops * 1e-9 / rows[0].pms);
                for (int i = 0; i < nrows; i++) {
                        print_row(w, &s, &rows[i], peer_ms, best_p, best_peer, err, json);
                        gplan_free(&rows[i].gp);
                }
                grouped_free(&gr, &s);
                set_free(&s);
        }
}

int main(int argc, char **argv)
{
        const char *mode = "all", *wl = "all";
        int json = 0, reps = 20;
        if (argc >= 2 && !strcmp(argv[1], "clients")) { extern int bench_clients_main(int, char **); return bench_clients_main(argc - 1, argv + 1); }
        if (argc >= 2 && !strcmp(argv[1], "list"))
                return list_main(argc - 1, argv + 1);
        if (argc >= 2 && !strcmp(argv[1], "calibrate"))
                return calibrate_main(argc - 1, argv + 1);
        if (argc >= 2 && !strcmp(argv[1], "floor"))
                return launch_floor_main(argc - 1, argv + 1);
        if (argc >= 2 && is_help(argv[1])) {
                usage(stdout);
                return 0;
        }
        if (argc < 2) {
                fprintf(stderr, "gemmbench: no command given\nTry 'gemmbench --help'.\n");
                return 2;
        }
        if (strcmp(argv[1], "kernels")) {
                fprintf(stderr, "gemmbench: unknown %s '%s'\nTry 'gemmbench --help'.\n",
                        argv[1][0] == '-' ? "option" : "command", argv[1]);
                return 2;
        }
        for (int i = 2; i < argc; i++) {
                if (is_help(argv[i])) {
                        usage(stdout);
                        return 0;
                } else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
                        mode = argv[++i];
                else if (!strcmp(argv[i], "--workload") && i + 1 < argc)
                        wl = argv[++i];
                else if (!strcmp(argv[i], "--json"))
                        json = 1;
                else if (!strcmp(argv[i], "--queued"))
                        kbench_queued = 1;
                else if (!strcmp(argv[i], "--narrow"))
                        kbench_narrow = 1;
                else if (!strcmp(argv[i], "--paired"))
                        kbench_paired = 1;
                else if (!strcmp(argv[i], "--interleaved"))
                        kbench_interleaved = 1;
                else if (!strcmp(argv[i], "--f64-general"))
                        kbench_f64_general = 1;
                else if (!strcmp(argv[i], "--a-mn"))
                        kbench_a_mn = 1;
                else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
                        reps = atoi(argv[++i]);
                else if (!strcmp(argv[i], "--beta") && i + 1 < argc) {
                        char *end = NULL;
                        kbench_beta = strtod(argv[++i], &end);
                        if (!end || *end || end == argv[i] || !isfinite(kbench_beta))
                                return usage_error("kernels", "invalid value for --beta:", argv[i]);
                } else if (!strcmp(argv[i], "--cost") && i + 1 < argc) {
                        /* Plans built with another cost model (gemmbench calibrate). */
                        struct sched_cost c = *sched_cost_get();

                        if (sched_cost_parse(&c, argv[i + 1]) || sched_cost_set(&c))
                                return usage_error("kernels", "invalid value for --cost:", argv[i + 1]);
                        i++;
                } else if (i + 1 == argc && (!strcmp(argv[i], "--mode") || !strcmp(argv[i], "--workload") ||
                                             !strcmp(argv[i], "--reps") || !strcmp(argv[i], "--cost") ||
                                             !strcmp(argv[i], "--beta"))) {
                        return usage_error("kernels", "a value must follow", argv[i]);
                } else if (argv[i][0] == '-') {
                        return usage_error("kernels", "unknown option", argv[i]);
                } else {
                        return usage_error("kernels", "unexpected argument", argv[i]);
                }
        }
        if (reps < 1)
                return usage_error("kernels", "--reps must be at least 1", NULL);
        int mask = 0;
        if (!strcmp(mode, "all")) {
                mask = (1 << SCHED_NMODES) - 1;
        } else {
                enum sched_mode m;
                if (sched_mode_parse(mode, &m))
                        return usage_error("kernels", "invalid value for --mode:", mode);
                mask = 1 << m;
        }
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
                fprintf(stderr, "gemmbench: no CUDA device\n");
                return 1;
        }
        struct cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        cublasHandle_t h;
        CB(cublasCreate(&h));
        size_t l2 = (size_t)prop.l2CacheSize;
        if (!json) {
                printf("# %s, %d SMs, L2 %zu MB; median of %d runs; TF/s = 2mnk (SYR2K 2n^2k) / time%s\n",
                       prop.name, prop.multiProcessorCount, l2 >> 20, reps,
                       kbench_queued ? "; each run queued behind a spin kernel (--queued): device time only" : "");
                printf("# sm_90 fast path (TMA + wgmma; exact f32 split into TF32 parts) for K-major problems: %s; "
                       "lpt-80 = lpt on the sm_80 kernel (exact f32: FFMA); %s\n",
                       cuda_gemm_fast_available() ? "on" : "off",
                       kbench_narrow ? "MODE-n = the narrow tile (128x64)" : "MODE-w = the wide tile (128x192)");
                if (kbench_beta != 0.0)
                        printf("# beta %g (--beta): C = A B + beta C for gemmd and every peer; C starts as bytes 0x%02x\n",
                               kbench_beta, C_FILL);
                printf("%-12s %-5s %-13s %9s %8s %8s %8s %8s %7s %7s %9s\n", "workload", "cfg", "mode", "gemmd_ms",
                       "TF/s", "loop", "grouped", "strided", "x_grp", "x_best", "max_err");
        }
        struct workload w;
        if (!strcmp(wl, "all")) {
                for (size_t i = 0; i < NBUILTIN; i++) {
                        make_builtin(builtin[i], &w);
                        bench_workload(h, &w, mask, json, reps, (uint32_t)prop.multiProcessorCount, l2);
                        free(w.p);
                }
        } else {
                if (make_builtin(wl, &w) && load_file(wl, &w))
                        return usage_error("kernels", "invalid value for --workload:", wl);
                bench_workload(h, &w, mask, json, reps, (uint32_t)prop.multiProcessorCount, l2);
                free(w.p);
        }
        cublasDestroy(h);
        return 0;
}

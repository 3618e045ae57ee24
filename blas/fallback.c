/*
 * fallback.c - loads the fallback BLAS and hands out its functions.
 *
 * Every symbol of the reference libblas.so.3 that gemmd does not serve is a
 * generated stub (build/blas/stubs.S) jumping through gemmd_blas__fwd; the
 * first call of each lands in gemmd_blas__resolve, which fills its entry
 * with the fallback's address. The fallback is $GEMMD_BLAS_FALLBACK when
 * set, else the first BLAS found at Debian's paths, never this library
 * itself (the system's libblas.so.3 alternative may point here).
 *
 * It is opened RTLD_LOCAL, so its names do not leak into the program, and
 * without RTLD_DEEPBIND on purpose: the fallback's own calls of xerbla_ and
 * cblas_xerbla must find a program's own handlers first (the reference
 * testers count on it), and its CBLAS routines must share RowMajorStrg and
 * CBLAS_CallFromC with this library and the program (blas/blas.c).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas/blas_internal.h"

#ifndef GEMMD_MULTIARCH
#define GEMMD_MULTIARCH "x86_64-linux-gnu"
#endif

/* The names behind gemmd_blas__fwd, in the table's order. */
static const char *const fwd_names[] = {
#include "blas/fwd_names.inc"
};

/* Filled by the generated stubs' data; entries move from slow stubs to the
 * fallback's functions. */
extern void *gemmd_blas__fwd[] BLAS_HIDDEN;
BLAS_HIDDEN void *gemmd_blas__resolve(unsigned i);

static const char *const own_names[BLAS_FN_COUNT] = {"sgemm_", "dgemm_", "ssyr2k_", "dsyr2k_"};

/* Debian's BLAS implementations, fastest first; each ships libblas.so.3. */
static const char *const candidates[] = {
        "/usr/lib/" GEMMD_MULTIARCH "/openblas-pthread/libblas.so.3",
        "/usr/lib/" GEMMD_MULTIARCH "/openblas-openmp/libblas.so.3",
        "/usr/lib/" GEMMD_MULTIARCH "/openblas-serial/libblas.so.3",
        "/usr/lib/" GEMMD_MULTIARCH "/blis-pthread/libblas.so.3",
        "/usr/lib/" GEMMD_MULTIARCH "/blis-openmp/libblas.so.3",
        "/usr/lib/" GEMMD_MULTIARCH "/blis-serial/libblas.so.3",
        "/usr/lib/" GEMMD_MULTIARCH "/atlas/libblas.so.3",
        "/usr/lib/" GEMMD_MULTIARCH "/blas/libblas.so.3",
};

static struct {
        pthread_once_t once;
        void *handle;
        char path[4096];
        char why[4096 + 256]; /* why there is no fallback */
        void *_Atomic own[BLAS_FN_COUNT];
} fb = {.once = PTHREAD_ONCE_INIT};

/* Whether handle h is this library: its sgemm_ is ours. */
static int is_self(void *h)
{
        Dl_info mine, theirs;
        void *s = dlsym(h, "sgemm_");

        if (!s || !dladdr((void *)is_self, &mine) || !dladdr(s, &theirs))
                return 0;
        return mine.dli_fbase == theirs.dli_fbase;
}

/* Opens one candidate: 0 and fb.handle set, or -1 with the reason in
 * fb.why. */
static int try_open(const char *path)
{
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

        if (!h) {
                snprintf(fb.why, sizeof(fb.why), "cannot load %s: %s", path, dlerror());
                return -1;
        }
        if (is_self(h)) {
                dlclose(h);
                snprintf(fb.why, sizeof(fb.why), "%s is gemmd's own libblas.so.3", path);
                return -1;
        }
        fb.handle = h;
        snprintf(fb.path, sizeof(fb.path), "%s", path);
        return 0;
}

/* Finds and opens the fallback once per process. */
static void load(void)
{
        const char *env = getenv("GEMMD_BLAS_FALLBACK");
        size_t i;

        if (env && *env) {
                if (try_open(env) == 0)
                        blas_note("fallback BLAS: %s", fb.path);
                return;
        }
        snprintf(fb.why, sizeof(fb.why),
                 "no BLAS found under /usr/lib/%s (install libblas3 or libopenblas0, or set "
                 "GEMMD_BLAS_FALLBACK to a libblas.so.3)",
                 GEMMD_MULTIARCH);
        for (i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
                if (access(candidates[i], F_OK) != 0)
                        continue;
                if (try_open(candidates[i]) == 0) {
                        blas_note("fallback BLAS: %s", fb.path);
                        return;
                }
        }
}

/* Looks name up in the fallback, or says why it cannot and aborts. */
static void *lookup(const char *name)
{
        void *p;

        pthread_once(&fb.once, load);
        if (!fb.handle) {
                fprintf(stderr, "gemmd-blas: %s called, but there is no fallback BLAS: %s\n",
                        name, fb.why);
                abort();
        }
        p = dlsym(fb.handle, name);
        if (!p) {
                fprintf(stderr, "gemmd-blas: %s called, but the fallback BLAS %s has no %s\n",
                        name, fb.path, name);
                abort();
        }
        return p;
}

/* Called by a slow stub (with every argument register saved): resolves
 * forwarded symbol i and stores its address for the next calls. */
void *gemmd_blas__resolve(unsigned i)
{
        void *p = lookup(fwd_names[i]);

        __atomic_store_n(&gemmd_blas__fwd[i], p, __ATOMIC_RELEASE);
        return p;
}

void *blas_fallback_fn(enum blas_fn fn)
{
        void *p = atomic_load_explicit(&fb.own[fn], memory_order_acquire);

        if (!p) {
                p = lookup(own_names[fn]);
                atomic_store_explicit(&fb.own[fn], p, memory_order_release);
        }
        return p;
}

const char *blas_fallback_path(void)
{
        pthread_once(&fb.once, load);
        return fb.handle ? fb.path : NULL;
}

/* For diagnosis and benchmarks: the fallback in use, or NULL. */
__attribute__((visibility("default"))) const char *gemmd_blas_fallback_path(void)
{
        return blas_fallback_path();
}

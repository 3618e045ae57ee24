/*
 * npy.h - reading and writing NumPy .npy files.
 *
 * Reads format versions 1.0, 2.0 and 3.0 and writes 1.0 (enough for any
 * header of NPY_MAX_DIMS dims). Only little-endian float32 ('<f4'), float16
 * ('<f2'), bfloat16 ('|V2', as ml_dtypes saves it) and float64 ('<f8') data
 * is accepted; arrays come back in C (row-major) order, Fortran-order
 * files of up to two dimensions being transposed on the way in.
 *
 * Every function returns 0 or a negative errno: -EINVAL for a malformed
 * file, -ENOTSUP for a well-formed one this module does not handle (another
 * dtype, big-endian data, a Fortran-order array of more than 2-D), -EFBIG
 * when sizes overflow, -ENOMEM, or the errno of a failed system call. When
 * `why` is not NULL it receives a one-line explanation (no trailing
 * newline, no file name) on failure.
 */
#ifndef GEMMD_NPY_H
#define GEMMD_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 32
/* Larger headers are refused: real ones are about a hundred bytes. */
#define NPY_MAX_HEADER_BYTES (1u << 20)

/* NPY_BF16 is what ml_dtypes saves: NumPy knows no bfloat16, so its
 * arrays are written with a 2-byte void descr, '|V2', read back as bf16. */
enum npy_dtype { NPY_F32 = 0, NPY_F16 = 1, NPY_BF16 = 2, NPY_F64 = 3 };

/* What a header says, before any check of the dtype. */
struct npy_header {
        int major, minor;            /* format version */
        char descr[32];              /* e.g. "<f4" */
        int fortran_order;
        int ndim;
        uint64_t shape[NPY_MAX_DIMS];
        size_t data_offset;          /* bytes from the file's start to the data */
};

/* An array in memory, in C order. */
struct npy_array {
        enum npy_dtype dtype;
        int ndim;
        uint64_t shape[NPY_MAX_DIMS];
        void *data;     /* malloc'd; freed by npy_free */
        size_t nbytes;
};

/* Bytes of one element, or 0 for an unknown dtype. */
size_t npy_dtype_size(enum npy_dtype dtype);

/* Name of a dtype as NumPy spells it ("float32"). */
const char *npy_dtype_name(enum npy_dtype dtype);

/* Parses the magic string, version and header dict at the start of buf
 * (len bytes; the data need not follow). Returns 0 and fills *h, or
 * -EINVAL (a truncated or malformed header). */
int npy_parse_header(const void *buf, size_t len, struct npy_header *h, char *why,
                     size_t whylen);

/* Maps a header's descr to a dtype this module handles. Returns 0, or
 * -ENOTSUP with the reason in why. */
int npy_descr_dtype(const char *descr, enum npy_dtype *dtype, char *why, size_t whylen);

/* Reads a whole .npy file into *a (C order); path "-" reads standard input
 * (left open). On failure *a is left empty (npy_free on it is harmless). */
int npy_load(const char *path, struct npy_array *a, char *why, size_t whylen);

/* Frees a's data and empties it. Accepts NULL. */
void npy_free(struct npy_array *a);

/* Formats the preamble and header of a C-order array into buf (cap bytes),
 * padded so the data that follows starts on a 64-byte boundary. Returns
 * the header's length, or -ENOSPC if cap is too small (a buffer of 256 +
 * 24 * ndim bytes always suffices), -EINVAL for a bad ndim or dtype. */
long npy_format_header(enum npy_dtype dtype, int ndim, const uint64_t *shape, void *buf,
                       size_t cap);

/* Writes a C-order array of `ndim` dims (0 .. NPY_MAX_DIMS) to path,
 * replacing any file there, or to standard output for path "-". On failure
 * a partly written file is removed. */
int npy_save(const char *path, enum npy_dtype dtype, int ndim, const uint64_t *shape,
             const void *data, char *why, size_t whylen);

#endif /* GEMMD_NPY_H */

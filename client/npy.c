/*
 * npy.c - reading and writing NumPy .npy files.
 *
 * The header is a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * parsed here by a small recursive-descent reader that accepts exactly the
 * three keys NumPy writes, in any order, and checks every length and number
 * against the bytes it has.
 */
#include "client/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };

/* Stores a formatted reason in why (when given) and returns err. */
static int fail(int err, char *why, size_t whylen, const char *fmt, ...)
{
        va_list ap;

        if (why && whylen) {
                va_start(ap, fmt);
                vsnprintf(why, whylen, fmt, ap);
                va_end(ap);
        }
        return err;
}

size_t npy_dtype_size(enum npy_dtype dtype)
{
        switch (dtype) {
        case NPY_F32:
                return 4;
        case NPY_F16:
        case NPY_BF16:
                return 2;
        case NPY_F64:
                return 8;
        }
        return 0;
}

const char *npy_dtype_name(enum npy_dtype dtype)
{
        switch (dtype) {
        case NPY_F32:
                return "float32";
        case NPY_F16:
                return "float16";
        case NPY_BF16:
                return "bfloat16";
        case NPY_F64:
                return "float64";
        }
        return "unknown";
}

/* ---- the header dict -------------------------------------------------- */

struct lex {
        const char *p, *end;
};

static void skip_ws(struct lex *l)
{
        while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
                l->p++;
}

static int eat(struct lex *l, char ch)
{
        skip_ws(l);
        if (l->p < l->end && *l->p == ch) {
                l->p++;
                return 1;
        }
        return 0;
}

static int peek(struct lex *l)
{
        skip_ws(l);
        return l->p < l->end ? (unsigned char)*l->p : -1;
}

/* Reads a quoted string (no escapes) into out. A NUL or another control
 * byte inside is refused: out is compared as a C string, so '<f4\0' would
 * pass for '<f4'. Returns 0 or -1. */
static int read_str(struct lex *l, char *out, size_t cap)
{
        const char *start;
        char q;

        skip_ws(l);
        if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
                return -1;
        q = *l->p++;
        for (start = l->p; l->p < l->end && *l->p != q; l->p++)
                if (*l->p == '\\' || (unsigned char)*l->p < 0x20 || *l->p == 0x7f)
                        return -1;
        if (l->p >= l->end || (size_t)(l->p - start) >= cap)
                return -1;
        memcpy(out, start, (size_t)(l->p - start));
        out[l->p - start] = '\0';
        l->p++;
        return 0;
}

/* Reads the Python word w (True, False), not followed by more of a name. */
static int read_word(struct lex *l, const char *w)
{
        size_t n = strlen(w);

        skip_ws(l);
        if ((size_t)(l->end - l->p) < n || memcmp(l->p, w, n))
                return 0;
        if ((size_t)(l->end - l->p) > n && (l->p[n] == '_' || (l->p[n] >= 'a' && l->p[n] <= 'z') ||
                                            (l->p[n] >= 'A' && l->p[n] <= 'Z') ||
                                            (l->p[n] >= '0' && l->p[n] <= '9')))
                return 0;
        l->p += n;
        return 1;
}

/* Reads a non-negative decimal integer (an 'L' suffix from Python 2 files
 * is allowed). Returns 0 or -1 (not a number, or over UINT64_MAX). */
static int read_uint(struct lex *l, uint64_t *v)
{
        uint64_t x = 0;
        const char *start;

        skip_ws(l);
        for (start = l->p; l->p < l->end && *l->p >= '0' && *l->p <= '9'; l->p++)
                if (__builtin_mul_overflow(x, 10, &x) ||
                    __builtin_add_overflow(x, (uint64_t)(*l->p - '0'), &x))
                        return -1;
        if (l->p == start)
                return -1;
        if (l->p < l->end && *l->p == 'L')
                l->p++;
        *v = x;
        return 0;
}

/* Skips a list-valued descr (a structured dtype), brackets balanced and
 * strings honoured, so that the caller can report it as unsupported. */
static int skip_list(struct lex *l)
{
        int depth = 0;
        char tmp[256];

        do {
                int ch = peek(l);

                if (ch == '\'' || ch == '"') {
                        if (read_str(l, tmp, sizeof(tmp)))
                                return -1;
                        continue;
                }
                if (ch < 0 || depth > 64)
                        return -1;
                if (ch == '[' || ch == '(')
                        depth++;
                else if (ch == ']' || ch == ')')
                        depth--;
                l->p++;
        } while (depth > 0);
        return 0;
}

static int read_shape(struct lex *l, struct npy_header *h, char *why, size_t whylen)
{
        if (!eat(l, '('))
                return fail(-EINVAL, why, whylen, "malformed header: 'shape' is not a tuple");
        h->ndim = 0;
        while (!eat(l, ')')) {
                if (h->ndim == NPY_MAX_DIMS)
                        return fail(-EINVAL, why, whylen,
                                    "malformed header: more than %d dimensions", NPY_MAX_DIMS);
                if (peek(l) == '-')
                        return fail(-EINVAL, why, whylen, "malformed header: negative dimension");
                if (read_uint(l, &h->shape[h->ndim]))
                        return fail(-EINVAL, why, whylen,
                                    "malformed header: bad dimension in 'shape'");
                h->ndim++;
                if (!eat(l, ',') && peek(l) != ')')
                        return fail(-EINVAL, why, whylen,
                                    "malformed header: expected ',' or ')' in 'shape'");
        }
        return 0;
}

/* Parses the dict in [l->p, l->end). */
static int read_dict(struct lex *l, struct npy_header *h, char *why, size_t whylen)
{
        int seen_descr = 0, seen_fortran = 0, seen_shape = 0, err;
        char key[32];

        if (!eat(l, '{'))
                return fail(-EINVAL, why, whylen, "malformed header: not a dict");
        while (!eat(l, '}')) {
                if (read_str(l, key, sizeof(key)))
                        return fail(-EINVAL, why, whylen, "malformed header: bad key");
                if (!eat(l, ':'))
                        return fail(-EINVAL, why, whylen, "malformed header: expected ':'");
                if (!strcmp(key, "descr") && !seen_descr) {
                        seen_descr = 1;
                        if (peek(l) == '[') {
                                if (skip_list(l))
                                        return fail(-EINVAL, why, whylen,
                                                    "malformed header: bad 'descr'");
                                strcpy(h->descr, "[structured]");
                        } else if (read_str(l, h->descr, sizeof(h->descr))) {
                                return fail(-EINVAL, why, whylen,
                                            "malformed header: 'descr' is not a quoted dtype of "
                                            "printable characters");
                        }
                } else if (!strcmp(key, "fortran_order") && !seen_fortran) {
                        seen_fortran = 1;
                        if (read_word(l, "True"))
                                h->fortran_order = 1;
                        else if (read_word(l, "False"))
                                h->fortran_order = 0;
                        else
                                return fail(-EINVAL, why, whylen,
                                            "malformed header: 'fortran_order' is not a bool");
                } else if (!strcmp(key, "shape") && !seen_shape) {
                        seen_shape = 1;
                        err = read_shape(l, h, why, whylen);
                        if (err)
                                return err;
                } else {
                        return fail(-EINVAL, why, whylen,
                                    "malformed header: unexpected or repeated key '%s'", key);
                }
                if (!eat(l, ',') && peek(l) != '}')
                        return fail(-EINVAL, why, whylen,
                                    "malformed header: expected ',' or '}'");
        }
        if (!seen_descr || !seen_fortran || !seen_shape)
                return fail(-EINVAL, why, whylen, "malformed header: missing '%s'",
                            !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
        skip_ws(l);
        if (l->p != l->end)
                return fail(-EINVAL, why, whylen, "malformed header: bytes after the dict");
        return 0;
}

/* Reads the preamble: magic, version and header length. Returns 0 and the
 * offset of the data in *total, or -EINVAL / -ENOTSUP. */
static int read_preamble(const uint8_t *b, size_t len, struct npy_header *h, size_t *pre,
                         size_t *total, char *why, size_t whylen)
{
        uint32_t hlen;

        if (len < 10 || memcmp(b, magic, sizeof(magic)))
                return fail(-EINVAL, why, whylen, "not a .npy file (bad magic string)");
        h->major = b[6];
        h->minor = b[7];
        if (h->major == 1 && h->minor == 0) {
                hlen = (uint32_t)b[8] | (uint32_t)b[9] << 8;
                *pre = 10;
        } else if ((h->major == 2 || h->major == 3) && h->minor == 0) {
                if (len < 12)
                        return fail(-EINVAL, why, whylen, "truncated header");
                hlen = (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 |
                       (uint32_t)b[11] << 24;
                *pre = 12;
        } else {
                return fail(-ENOTSUP, why, whylen, "unsupported .npy format version %d.%d",
                            h->major, h->minor);
        }
        if (hlen > NPY_MAX_HEADER_BYTES)
                return fail(-EINVAL, why, whylen, "header of %u bytes is too long", hlen);
        *total = *pre + hlen;
        return 0;
}

int npy_parse_header(const void *buf, size_t len, struct npy_header *h, char *why, size_t whylen)
{
        const uint8_t *b = buf;
        struct lex l;
        size_t pre, total;
        int err;

        memset(h, 0, sizeof(*h));
        err = read_preamble(b, len, h, &pre, &total, why, whylen);
        if (err)
                return err;
        if (len < total)
                return fail(-EINVAL, why, whylen, "truncated header");
        l.p = (const char *)b + pre;
        l.end = (const char *)b + total;
        err = read_dict(&l, h, why, whylen);
        if (err)
                return err;
        h->data_offset = total;
        return 0;
}

int npy_descr_dtype(const char *descr, enum npy_dtype *dtype, char *why, size_t whylen)
{
        if (!strcmp(descr, "<f4")) {
                *dtype = NPY_F32;
                return 0;
        }
        if (!strcmp(descr, "<f2")) {
                *dtype = NPY_F16;
                return 0;
        }
        if (!strcmp(descr, "<f8")) {
                *dtype = NPY_F64;
                return 0;
        }
        /* NumPy has no bfloat16: ml_dtypes' arrays save as 2-byte voids. */
        if (!strcmp(descr, "|V2")) {
                *dtype = NPY_BF16;
                return 0;
        }
        if (descr[0] == '>')
                return fail(-ENOTSUP, why, whylen,
                            "big-endian data ('%s') is not supported (save it as '<%s')", descr,
                            descr + 1);
        if (descr[0] == '[')
                return fail(-ENOTSUP, why, whylen, "structured dtypes are not supported");
        return fail(-ENOTSUP, why, whylen,
                    "dtype '%s' is not supported (float32 '<f4', float16 '<f2', "
                    "bfloat16 '|V2' and float64 '<f8' are)", descr);
}

/* ---- files ------------------------------------------------------------ */

/* Reads up to n bytes. Returns the count read (short only at end of file)
 * or -errno. */
static ssize_t read_full(int fd, void *buf, size_t n)
{
        size_t got = 0;
        ssize_t r;

        while (got < n) {
                r = read(fd, (char *)buf + got, n - got);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                if (r == 0)
                        break;
                got += (size_t)r;
        }
        return (ssize_t)got;
}

static int write_full(int fd, const void *buf, size_t n)
{
        size_t done = 0;
        ssize_t r;

        while (done < n) {
                r = write(fd, (const char *)buf + done, n - done);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                done += (size_t)r;
        }
        return 0;
}

/* Reads the preamble and header of an open file into *h. */
static int load_header(int fd, struct npy_header *h, char *why, size_t whylen)
{
        uint8_t first[12], *buf;
        size_t pre, total;
        ssize_t n;
        int err;

        n = read_full(fd, first, sizeof(first));
        if (n < 0)
                return fail((int)n, why, whylen, "read");
        err = read_preamble(first, (size_t)n, h, &pre, &total, why, whylen);
        if (err)
                return err;
        buf = malloc(total > (size_t)n ? total : (size_t)n);
        if (!buf)
                return fail(-ENOMEM, why, whylen, "out of memory");
        memcpy(buf, first, (size_t)n);
        if (total > (size_t)n) {
                ssize_t m = read_full(fd, buf + n, total - (size_t)n);

                if (m < 0) {
                        free(buf);
                        return fail((int)m, why, whylen, "read");
                }
                n += m;
        }
        err = npy_parse_header(buf, (size_t)n, h, why, whylen);
        free(buf);
        if (!err && h->data_offset < (size_t)sizeof(first) &&
            lseek(fd, (off_t)h->data_offset, SEEK_SET) < 0)
                err = fail(-errno, why, whylen, "seek");
        return err;
}

/* Turns a Fortran-order rows x cols matrix into C order. */
static int to_c_order(struct npy_array *a)
{
        size_t esz = npy_dtype_size(a->dtype), r = a->shape[0], cols = a->shape[1], i, j;
        char *dst = malloc(a->nbytes ? a->nbytes : 1);
        const char *src = a->data;

        if (!dst)
                return -ENOMEM;
        for (j = 0; j < cols; j++)
                for (i = 0; i < r; i++)
                        memcpy(dst + (i * cols + j) * esz, src + (j * r + i) * esz, esz);
        free(a->data);
        a->data = dst;
        return 0;
}

int npy_load(const char *path, struct npy_array *a, char *why, size_t whylen)
{
        struct npy_header h;
        uint64_t count = 1, nbytes;
        struct stat st;
        ssize_t n;
        int fd, err, i;

        memset(a, 0, sizeof(*a));
        fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : dup(STDIN_FILENO);
        if (fd < 0)
                return fail(-errno, why, whylen, "open");
        err = load_header(fd, &h, why, whylen);
        if (err)
                goto close_fd;
        err = npy_descr_dtype(h.descr, &a->dtype, why, whylen);
        if (err)
                goto close_fd;
        if (h.fortran_order && h.ndim > 2) {
                err = fail(-ENOTSUP, why, whylen,
                           "Fortran-order arrays of more than 2 dimensions are not supported");
                goto close_fd;
        }
        for (i = 0; i < h.ndim; i++)
                if (__builtin_mul_overflow(count, h.shape[i], &count))
                        break;
        if (i < h.ndim || __builtin_mul_overflow(count, npy_dtype_size(a->dtype), &nbytes) ||
            nbytes > SIZE_MAX / 2) {
                err = fail(-EFBIG, why, whylen, "the array's size overflows");
                goto close_fd;
        }
        /* Refuse a truncated file before allocating what its header claims. */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            ((uint64_t)st.st_size < h.data_offset ||
             (uint64_t)st.st_size - h.data_offset < nbytes)) {
                err = fail(-EINVAL, why, whylen,
                           "truncated: the header promises %llu data bytes, the file has %llu",
                           (unsigned long long)nbytes,
                           (unsigned long long)st.st_size - h.data_offset);
                goto close_fd;
        }
        a->ndim = h.ndim;
        memcpy(a->shape, h.shape, sizeof(a->shape));
        a->nbytes = (size_t)nbytes;
        a->data = malloc(a->nbytes ? a->nbytes : 1);
        if (!a->data) {
                err = fail(-ENOMEM, why, whylen, "out of memory for %zu bytes", a->nbytes);
                goto free_array;
        }
        n = read_full(fd, a->data, a->nbytes);
        if (n < 0 || (size_t)n < a->nbytes) {
                err = n < 0 ? fail((int)n, why, whylen, "read")
                            : fail(-EINVAL, why, whylen, "truncated: the data ends early");
                goto free_array;
        }
        if (h.fortran_order && h.ndim == 2) {
                err = to_c_order(a);
                if (err) {
                        fail(err, why, whylen, "out of memory");
                        goto free_array;
                }
        }
        close(fd);
        return 0;

free_array:
        npy_free(a);
close_fd:
        close(fd);
        return err;
}

void npy_free(struct npy_array *a)
{
        if (!a)
                return;
        free(a->data);
        memset(a, 0, sizeof(*a));
}

long npy_format_header(enum npy_dtype dtype, int ndim, const uint64_t *shape, void *buf,
                       size_t cap)
{
        char dict[48 + 24 * NPY_MAX_DIMS], *p = dict;
        size_t len, total;
        uint8_t *b = buf;
        int i;

        if (ndim < 0 || ndim > NPY_MAX_DIMS || !npy_dtype_size(dtype))
                return -EINVAL;
        p += sprintf(p, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     dtype == NPY_F32   ? "<f4"
                     : dtype == NPY_F16 ? "<f2"
                     : dtype == NPY_F64 ? "<f8"
                                        : "|V2");
        for (i = 0; i < ndim; i++)
                p += sprintf(p, i ? ", %llu" : "%llu", (unsigned long long)shape[i]);
        p += sprintf(p, "%s), }", ndim == 1 ? "," : "");
        len = (size_t)(p - dict);
        /* Preamble + dict + padding + '\n', rounded up to 64 bytes. */
        total = (10 + len + 1 + 63) / 64 * 64;
        if (total > cap)
                return -ENOSPC;
        memcpy(b, magic, sizeof(magic));
        b[6] = 1;
        b[7] = 0;
        b[8] = (uint8_t)((total - 10) & 0xff);
        b[9] = (uint8_t)((total - 10) >> 8);
        memcpy(b + 10, dict, len);
        memset(b + 10 + len, ' ', total - 10 - len - 1);
        b[total - 1] = '\n';
        return (long)total;
}

/* Writes a whole file to standard output, which stays open (and, unlike a
 * file, is never removed after a failed write). */
static int save_stdout(const void *hdr, size_t hlen, const void *data, size_t nbytes, char *why,
                       size_t whylen)
{
        int err = write_full(STDOUT_FILENO, hdr, hlen);

        if (!err)
                err = write_full(STDOUT_FILENO, data, nbytes);
        return err ? fail(err, why, whylen, "write") : 0;
}

int npy_save(const char *path, enum npy_dtype dtype, int ndim, const uint64_t *shape,
             const void *data, char *why, size_t whylen)
{
        uint8_t hdr[256 + 24 * NPY_MAX_DIMS];
        uint64_t count = 1, nbytes;
        long hlen;
        struct stat st;
        int fd, err, i;

        hlen = npy_format_header(dtype, ndim, shape, hdr, sizeof(hdr));
        if (hlen < 0)
                return fail((int)hlen, why, whylen, "bad array description");
        for (i = 0; i < ndim; i++)
                if (__builtin_mul_overflow(count, shape[i], &count))
                        return fail(-EFBIG, why, whylen, "the array's size overflows");
        if (__builtin_mul_overflow(count, npy_dtype_size(dtype), &nbytes) || nbytes > SIZE_MAX)
                return fail(-EFBIG, why, whylen, "the array's size overflows");
        if (!strcmp(path, "-"))
                return save_stdout(hdr, (size_t)hlen, data, (size_t)nbytes, why, whylen);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0)
                return fail(-errno, why, whylen, "create");
        err = write_full(fd, hdr, (size_t)hlen);
        if (!err)
                err = write_full(fd, data, (size_t)nbytes);
        if (close(fd) < 0 && !err)
                err = -errno;
        if (err) {
                /* Leave no half file behind, but never remove a device. */
                if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                        unlink(path);
                return fail(err, why, whylen, "write");
        }
        return 0;
}

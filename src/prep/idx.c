/* idx.c: read an IDX file (MNIST container format) through zlib.
 *
 * The whole payload is read into one allocation sized from the header, and
 * the file must end exactly there: a short file is "truncated", a longer one
 * is rejected too, because trailing bytes mean the header does not describe
 * the file (a wrong file, or a corrupt header) and we never guess.
 */
#include "prep/idx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_TYPE_UBYTE 0x08
#define IDX_READ_CHUNK ((size_t)1 << 30) /* gzread takes an unsigned length */
#define IDX_GZ_BUFFER (256u * 1024u)     /* zlib's 8 KiB default is slow here */
#define IDX_MAX_RATIO 1032               /* deflate's largest expansion */

__attribute__((format(printf, 3, 4)))
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *idx_type_name(unsigned type)
{
    switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default:   return "not an IDX type";
    }
}

/* Read up to LEN bytes. Returns the number read (less than LEN at end of
 * file), or -1 after a read error, with the message in ERR. */
static long long read_full(gzFile f, const char *path, void *buf, size_t len,
                           char *err, size_t errlen)
{
    size_t got = 0;

    while (got < len) {
        size_t want = len - got < IDX_READ_CHUNK ? len - got : IDX_READ_CHUNK;
        int n = gzread(f, (unsigned char *)buf + got, (unsigned)want);
        if (n < 0) {
            int saved_errno = errno, zerr = Z_OK;
            const char *zmsg = gzerror(f, &zerr);
            size_t plen = strlen(path);

            if (zerr == Z_ERRNO) {
                set_err(err, errlen, "%s: read error: %s", path, strerror(saved_errno));
                return -1;
            }
            /* zlib prefixes its message with the path; we already do. */
            if (strncmp(zmsg, path, plen) == 0 && strncmp(zmsg + plen, ": ", 2) == 0)
                zmsg += plen + 2;
            set_err(err, errlen, "%s: corrupt gzip data: %s", path, zmsg);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (long long)got;
}

/* Parse the magic and dimensions into OUT; returns 0 or -1 with ERR set. */
static int read_header(gzFile f, const char *path, struct idx_array *out,
                       char *err, size_t errlen)
{
    unsigned char magic[4], dimbuf[4 * IDX_MAX_DIMS];
    long long got;
    unsigned type, ndim;

    got = read_full(f, path, magic, sizeof magic, err, errlen);
    if (got < 0)
        return -1;
    if (got == 0) {
        set_err(err, errlen, "%s: truncated: the file is empty, expected an IDX header", path);
        return -1;
    }
    if (got < 4) {
        set_err(err, errlen, "%s: truncated: an IDX header starts with 4 bytes of magic, found %lld",
                path, got);
        return -1;
    }
    if (magic[0] != 0 || magic[1] != 0) {
        set_err(err, errlen, "%s: not an IDX file (magic 0x%02x%02x%02x%02x, "
                "expected 0x00000801 for labels or 0x00000803 for images)",
                path, magic[0], magic[1], magic[2], magic[3]);
        return -1;
    }
    type = magic[2];
    ndim = magic[3];
    if (type != IDX_TYPE_UBYTE) {
        set_err(err, errlen, "%s: IDX element type 0x%02x (%s) is not supported, "
                "expected 0x08 (unsigned byte)", path, type, idx_type_name(type));
        return -1;
    }
    if (ndim < 1 || ndim > IDX_MAX_DIMS) {
        set_err(err, errlen, "%s: IDX header says %u dimensions, expected 1 to %d",
                path, ndim, IDX_MAX_DIMS);
        return -1;
    }

    got = read_full(f, path, dimbuf, 4 * (size_t)ndim, err, errlen);
    if (got < 0)
        return -1;
    if (got < 4 * (long long)ndim) {
        set_err(err, errlen, "%s: truncated: IDX header needs %u bytes for %u dimensions, found %lld",
                path, 4 * ndim, ndim, got);
        return -1;
    }

    out->ndim = (int)ndim;
    out->count = 1;
    for (unsigned i = 0; i < ndim; i++) {
        const unsigned char *b = dimbuf + 4 * i;
        uint32_t d = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
                     (uint32_t)b[2] << 8 | (uint32_t)b[3];
        if (d != 0 && out->count > SIZE_MAX / d) {
            set_err(err, errlen, "%s: IDX dimensions are too large to hold in memory", path);
            return -1;
        }
        out->dims[i] = d;
        out->count *= d;
    }
    return 0;
}

int idx_read(const char *path, struct idx_array *out, char *err, size_t errlen)
{
    struct idx_array a = {0};
    struct stat st;
    unsigned char extra;
    long long got;
    gzFile f;

    memset(out, 0, sizeof *out);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: cannot open: is a directory, expected an IDX file", path);
        return -1;
    }
    f = gzopen(path, "rb");
    if (f == NULL) {
        set_err(err, errlen, "%s: cannot open: %s", path,
                errno ? strerror(errno) : "out of memory");
        return -1;
    }
    gzbuffer(f, IDX_GZ_BUFFER);

    if (read_header(f, path, &a, err, errlen) != 0)
        goto fail;
    /* Refuse a header that claims more data than the file can hold before
     * allocating it (found by tests/fuzz/fuzz_idx): deflate expands at most
     * 1032:1, a plain file not at all. */
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        size_t header = 4 + 4 * (size_t)a.ndim, size = (size_t)st.st_size;
        if (gzdirect(f) && a.count > (size > header ? size - header : 0)) {
            set_err(err, errlen, "%s: truncated: header says %zu bytes of data, found %zu",
                    path, a.count, size > header ? size - header : 0);
            goto fail;
        }
        if (!gzdirect(f) && size <= SIZE_MAX / IDX_MAX_RATIO && a.count > size * IDX_MAX_RATIO) {
            set_err(err, errlen, "%s: truncated: header says %zu bytes of data, more than a "
                    "%zu-byte gzip file can hold", path, a.count, size);
            goto fail;
        }
    }

    a.data = malloc(a.count ? a.count : 1);
    if (a.data == NULL) {
        set_err(err, errlen, "%s: out of memory reading %zu bytes of IDX data", path, a.count);
        goto fail;
    }
    got = read_full(f, path, a.data, a.count, err, errlen);
    if (got < 0)
        goto fail;
    if ((size_t)got < a.count) {
        set_err(err, errlen, "%s: truncated: header says %zu bytes of data, found %lld",
                path, a.count, got);
        goto fail;
    }
    got = read_full(f, path, &extra, 1, err, errlen);
    if (got < 0)
        goto fail;
    if (got > 0) {
        set_err(err, errlen, "%s: header says %zu bytes of data but the file is longer "
                "(corrupt header, or not an IDX file)", path, a.count);
        goto fail;
    }

    gzclose(f);
    *out = a;
    return 0;

fail:
    gzclose(f);
    idx_free(&a);
    return -1;
}

void idx_free(struct idx_array *out)
{
    free(out->data);
    memset(out, 0, sizeof *out);
}

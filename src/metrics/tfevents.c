/* tfevents.c: TensorBoard event files (see tfevents.h for the format).
 *
 * Each record is encoded whole into w->buf and handed to one fwrite. CRC-32C
 * uses a plain 256-entry table: a scalar record is about 50 bytes, so
 * SSE4.2 or slicing would save nothing measurable and add a second code path
 * to keep equal to the first. */
#include "config.h"
#include "metrics/tfevents.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct dt_tfevents {
    FILE *f;
    char path[PATH_MAX];   /* for messages */
    unsigned char *buf;    /* [cap] one record: header, Event, trailing CRC */
    size_t cap;
};

/* ---- CRC-32C -------------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t dt_crc32c(const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    while (n--) c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

uint32_t dt_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- Protobuf wire format ------------------------------------------------- */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };
#define KEY(field, wire) ((unsigned char)((field) << 3 | (wire)))

static const char event_version[] = "brain.Event:2";

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    for (; v >= 0x80; v >>= 7) n++;
    return n;
}

static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7) p[n++] = (unsigned char)(v | 0x80);
    p[n++] = (unsigned char)v;
    return n;
}

static size_t put_bytes(unsigned char *p, const char *s, size_t k)
{
    size_t n = put_varint(p, k);
    memcpy(p + n, s, k);
    return n + k;
}

/* The upper bound of an Event's size for a string (tag or version) of k bytes:
 * keys and lengths are at most 1 + 10 bytes each, payloads 8 + 10 + 4 + k. */
static size_t event_bound(size_t k)
{
    return 6 * 11 + 8 + 10 + 4 + k;
}

/* Event{wall_time, step, file_version} when version is non-NULL, else
 * Event{wall_time, step, summary{value{tag, simple_value}}}, or with histo
 * non-NULL summary{value{tag, histo}} (histo: an encoded HistogramProto of
 * histo_len bytes). Returns its size. */
static size_t encode_event(unsigned char *p, double wall_time, int64_t step, const char *version,
                           const char *tag, float value, const unsigned char *histo, size_t histo_len)
{
    size_t n = 0;
    uint64_t bits64;
    memcpy(&bits64, &wall_time, sizeof bits64);
    p[n++] = KEY(1, WIRE_FIXED64);
    put_le(p + n, bits64, 8);
    n += 8;
    /* proto3 leaves out a zero step, so every record is byte for byte what
     * protobuf itself would write; negative steps take 10 bytes, as there. */
    if (step != 0) {
        p[n++] = KEY(2, WIRE_VARINT);
        n += put_varint(p + n, (uint64_t)step);
    }
    if (version) {
        p[n++] = KEY(3, WIRE_LEN);
        return n + put_bytes(p + n, version, strlen(version));
    }
    size_t k = strlen(tag);
    size_t value_len = 1 + varint_len(k) + k + (histo ? 1 + varint_len(histo_len) + histo_len : 1 + 4);
    size_t summary_len = 1 + varint_len(value_len) + value_len;
    p[n++] = KEY(5, WIRE_LEN);
    n += put_varint(p + n, summary_len);
    p[n++] = KEY(1, WIRE_LEN);                /* Summary.value */
    n += put_varint(p + n, value_len);
    p[n++] = KEY(1, WIRE_LEN);                /* Value.tag */
    n += put_bytes(p + n, tag, k);
    if (histo) {
        p[n++] = KEY(5, WIRE_LEN);            /* Value.histo */
        return n + put_bytes(p + n, (const char *)histo, histo_len);
    }
    uint32_t bits32;
    memcpy(&bits32, &value, sizeof bits32);
    p[n++] = KEY(2, WIRE_FIXED32);            /* Value.simple_value */
    put_le(p + n, bits32, 4);
    return n + 4;
}

/* ---- Writing -------------------------------------------------------------- */

static int reserve(struct dt_tfevents *w, size_t need, dt_status *st)
{
    if (need <= w->cap) return DT_OK;
    unsigned char *b = realloc(w->buf, need);
    if (!b) return dt_fail(st, DT_ERUNTIME, "tfevents %s: out of memory for a %zu-byte record", w->path, need);
    w->buf = b;
    w->cap = need;
    return DT_OK;
}

static int write_event(struct dt_tfevents *w, double wall_time, int64_t step, const char *version,
                       const char *tag, float value, const unsigned char *histo, size_t histo_len,
                       dt_status *st)
{
    if (reserve(w, 12 + event_bound(strlen(version ? version : tag)) + 11 + histo_len + 4, st) != DT_OK)
        return st->code;
    size_t n = encode_event(w->buf + 12, wall_time, step, version, tag, value, histo, histo_len);
    put_le(w->buf, n, 8);
    put_le(w->buf + 8, dt_crc32c_mask(dt_crc32c(w->buf, 8)), 4);
    put_le(w->buf + 12 + n, dt_crc32c_mask(dt_crc32c(w->buf + 12, n)), 4);
    if (fwrite(w->buf, 1, 12 + n + 4, w->f) != 12 + n + 4)
        return dt_fail(st, DT_ERUNTIME, "tfevents %s: write failed: %s", w->path, strerror(errno));
    return DT_OK;
}

/* mkdir -p, naming the component that fails. */
static int make_dirs(const char *dir, dt_status *st)
{
    char buf[PATH_MAX];
    if (!*dir) return dt_fail(st, DT_ERUNTIME, "tfevents: the log directory name is empty");
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return dt_fail(st, DT_ERUNTIME, "tfevents %s: %s", dir, strerror(ENAMETOOLONG));
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        struct stat sb;
        if (mkdir(buf, 0777) != 0) {
            if (errno != EEXIST)
                return dt_fail(st, DT_ERUNTIME, "tfevents: cannot create directory %s: %s", buf, strerror(errno));
            if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
                return dt_fail(st, DT_ERUNTIME, "tfevents: cannot create directory %s: %s exists and is not a directory",
                               dir, buf);
        }
        if (!c) return DT_OK;
        *p = c;
    }
}

struct dt_tfevents *dt_tfevents_open(const char *dir, dt_status *st)
{
    static int opened;   /* writers opened by this process: <n> in the name */
    int n = __atomic_fetch_add(&opened, 1, __ATOMIC_RELAXED);
    char host[256];
    struct timespec now;

    if (make_dirs(dir, st) != DT_OK) return NULL;
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    clock_gettime(CLOCK_REALTIME, &now);

    struct dt_tfevents *w = calloc(1, sizeof *w);
    if (!w) {
        dt_fail(st, DT_ERUNTIME, "tfevents %s: out of memory", dir);
        return NULL;
    }
    if (snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld.%d.v2", dir,
                 (long long)now.tv_sec, host, (long)getpid(), n) >= (int)sizeof w->path) {
        dt_fail(st, DT_ERUNTIME, "tfevents %s: %s", dir, strerror(ENAMETOOLONG));
        free(w);
        return NULL;
    }
    /* "x": never append to or truncate a file another writer owns. */
    w->f = fopen(w->path, "wbx");
    if (!w->f) {
        dt_fail(st, DT_ERUNTIME, "tfevents: cannot create %s: %s", w->path, strerror(errno));
        free(w);
        return NULL;
    }
    double wall = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    if (write_event(w, wall, 0, event_version, NULL, 0.0f, NULL, 0, st) != DT_OK ||
        dt_tfevents_flush(w, st) != DT_OK) {
        unlink(w->path);   /* no file a reader would choke on */
        dt_tfevents_close(w);
        return NULL;
    }
    return w;
}

int dt_tfevents_scalar(struct dt_tfevents *w, const char *tag, float value, int64_t step,
                       double wall_time, dt_status *st)
{
    return write_event(w, wall_time, step, NULL, tag, value, NULL, 0, st);
}

int dt_tfevents_histo(struct dt_tfevents *w, const char *tag, const void *histo, size_t n, int64_t step,
                      double wall_time, dt_status *st)
{
    return write_event(w, wall_time, step, NULL, tag, 0.0f, histo, n, st);
}

int dt_tfevents_flush(struct dt_tfevents *w, dt_status *st)
{
    if (fflush(w->f) != 0)
        return dt_fail(st, DT_ERUNTIME, "tfevents %s: write failed: %s", w->path, strerror(errno));
    return DT_OK;
}

void dt_tfevents_close(struct dt_tfevents *w)
{
    if (!w) return;
    fclose(w->f);
    free(w->buf);
    free(w);
}

/* ---- Reading back (tests) ------------------------------------------------- */

struct pb {
    const unsigned char *p, *end;
};

struct field {
    uint64_t num;
    int wire;
    uint64_t u;                   /* VARINT, FIXED64, FIXED32 */
    const unsigned char *data;    /* LEN: [n] */
    size_t n;
};

static int get_varint(struct pb *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p == r->end) return -1;
        unsigned b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static int next_field(struct pb *r, struct field *f)
{
    uint64_t key, len;
    if (get_varint(r, &key) != 0) return -1;
    f->num = key >> 3;
    f->wire = (int)(key & 7);
    switch (f->wire) {
    case WIRE_VARINT:
        return get_varint(r, &f->u);
    case WIRE_FIXED64:
    case WIRE_FIXED32: {
        int bytes = f->wire == WIRE_FIXED64 ? 8 : 4;
        if (r->end - r->p < bytes) return -1;
        f->u = get_le(r->p, bytes);
        r->p += bytes;
        return 0;
    }
    case WIRE_LEN:
        if (get_varint(r, &len) != 0 || len > (uint64_t)(r->end - r->p)) return -1;
        f->data = r->p;
        f->n = (size_t)len;
        r->p += len;
        return 0;
    default:   /* groups (3, 4) and reserved types: not in these messages */
        return -1;
    }
}

static void copy_str(char *dst, size_t cap, const unsigned char *s, size_t n)
{
    if (!dst || !cap) return;
    if (n > cap - 1) n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* Summary.Value: tag and simple_value. */
static int decode_value(const unsigned char *p, size_t n, char *tag, size_t taglen, float *value)
{
    struct pb r = {p, p + n};
    struct field f;
    while (r.p < r.end) {
        if (next_field(&r, &f) != 0) return -1;
        if (f.num == 1) {
            if (f.wire != WIRE_LEN) return -1;
            copy_str(tag, taglen, f.data, f.n);
        } else if (f.num == 2) {
            if (f.wire != WIRE_FIXED32) return -1;
            uint32_t bits = (uint32_t)f.u;
            if (value) memcpy(value, &bits, sizeof bits);
        }
    }
    return 0;
}

static int decode_summary(const unsigned char *p, size_t n, char *tag, size_t taglen, float *value)
{
    struct pb r = {p, p + n};
    struct field f;
    int first = 1;
    while (r.p < r.end) {
        if (next_field(&r, &f) != 0) return -1;
        if (f.num != 1) continue;
        if (f.wire != WIRE_LEN) return -1;
        if (first && decode_value(f.data, f.n, tag, taglen, value) != 0) return -1;
        first = 0;
    }
    return 0;
}

static int decode_event(const unsigned char *p, size_t n, double *wall_time, int64_t *step,
                        char *tag, size_t taglen, float *value, char *version, size_t fvlen)
{
    struct pb r = {p, p + n};
    struct field f;
    while (r.p < r.end) {
        if (next_field(&r, &f) != 0) return -1;
        switch (f.num) {
        case 1:
            if (f.wire != WIRE_FIXED64) return -1;
            if (wall_time) memcpy(wall_time, &f.u, sizeof *wall_time);
            break;
        case 2:
            if (f.wire != WIRE_VARINT) return -1;
            if (step) *step = (int64_t)f.u;
            break;
        case 3:
            if (f.wire != WIRE_LEN) return -1;
            copy_str(version, fvlen, f.data, f.n);
            break;
        case 5:
            if (f.wire != WIRE_LEN || decode_summary(f.data, f.n, tag, taglen, value) != 0) return -1;
            break;
        default:   /* fields we do not write (log_message, ...): skipped */
            break;
        }
    }
    return 0;
}

long dt_tfevents_decode(const unsigned char *buf, size_t len, double *wall_time, int64_t *step,
                        char *tag, size_t taglen, float *value, char *version, size_t fvlen)
{
    if (wall_time) *wall_time = 0.0;
    if (step) *step = 0;
    if (value) *value = 0.0f;
    copy_str(tag, taglen, (const unsigned char *)"", 0);
    copy_str(version, fvlen, (const unsigned char *)"", 0);
    if (len == 0) return 0;
    if (len < 16) return -1;
    uint64_t n = get_le(buf, 8);
    if ((uint32_t)get_le(buf + 8, 4) != dt_crc32c_mask(dt_crc32c(buf, 8))) return -1;
    if (n > len - 16 || n > (uint64_t)LONG_MAX - 16) return -1;
    if ((uint32_t)get_le(buf + 12 + n, 4) != dt_crc32c_mask(dt_crc32c(buf + 12, (size_t)n))) return -1;
    if (decode_event(buf + 12, (size_t)n, wall_time, step, tag, taglen, value, version, fvlen) != 0)
        return -1;
    return (long)(16 + n);
}

/* timeline.c: the span recorder and the Chrome trace writer (see timeline.h).
 *
 * The one design decision: each OS thread that records gets a buffer of its
 * own the first time it does (found again through a thread-local cache), so
 * recording a span takes no lock and no atomic: the thread appends to chunks
 * only it writes. Shared state is touched once per chunk (a relaxed atomic
 * count against the per-rank cap) and once per thread (joining the list).
 *
 * At the end every rank formats its own events as JSON and streams them to
 * rank 0 in pieces, which rank 0 writes rank after rank: memory on rank 0
 * stays one piece whatever the rank count (a Gatherv would hold every rank's
 * text at once, and its int displacements stop at 2 GiB). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "metrics/timeline.h"
#include "runtime/fault.h"

/* The temporary file, created afresh: never through a symlink planted in its
 * place (as checkpoint.c's dt_create_fresh does; metrics/ does not depend on
 * checkpoint/), with the user's umask. */
static FILE *fopen_fresh(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT && errno != EISDIR && errno != EPERM && errno != EACCES) return NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (fd >= 0 && !f) close(fd);
    return f;
}

enum {
    SPAN_CHUNK = 16384,     /* spans per chunk (640 KiB) */
    MAX_SPAN_CHUNKS = 256,  /* per rank: 4 Mi spans */
    TEXT_CHUNK = 65536,     /* bytes of copied names and args per chunk */
    MAX_TEXT_CHUNKS = 1024, /* per rank: 64 MiB */
    MAX_TEXT = 256,         /* longest copied string, NUL included */
    NAME_CACHE = 64,        /* copied "prefix name" pairs remembered per thread */
    PIECE = 4 << 20,        /* JSON travels to rank 0 in pieces this big */
};

struct span {
    double t0, t1;    /* dt_tl_now() seconds */
    const char *name; /* the caller's, or a copy in a text chunk */
    const char *args; /* a copy, or NULL */
    int tid;
};

struct span_chunk {
    struct span_chunk *next;
    int n;
    struct span s[SPAN_CHUNK];
};

struct text_chunk {
    struct text_chunk *next;
    size_t used;
    char s[TEXT_CHUNK];
};

/* A copied "prefix name", found again by the two pointers it was made from. */
struct name_copy {
    const char *prefix, *name, *copy;
    size_t plen;
};

/* One OS thread's spans: written by that thread alone, read at finish. */
struct tl_buf {
    struct tl_buf *next;
    struct span_chunk *first, *last;
    struct text_chunk *text; /* newest first */
    long dropped;
    struct name_copy names[NAME_CACHE];
};

struct dt_timeline {
    unsigned long gen;   /* tells this timeline from a freed one at the same address */
    double origin;       /* dt_tl_now() just after the start's barrier */
    char *path;
    pthread_mutex_t lock; /* guards bufs */
    struct tl_buf *bufs;
    atomic_int span_chunks, text_chunks;
    int max_span_chunks;
};

struct dt_timeline *dt_timeline;

static unsigned long generation;

static _Thread_local struct {
    const struct dt_timeline *tl;
    unsigned long gen;
    struct tl_buf *buf;
} mine;

/* ---- Recording ------------------------------------------------------------ */

static struct tl_buf *join(struct dt_timeline *tl)
{
    struct tl_buf *b = dt_xcalloc(1, sizeof *b);
    pthread_mutex_lock(&tl->lock);
    b->next = tl->bufs;
    tl->bufs = b;
    pthread_mutex_unlock(&tl->lock);
    mine.tl = tl;
    mine.gen = tl->gen;
    mine.buf = b;
    return b;
}

/* Counts one more chunk against cap; 0 when the cap is reached. */
static int take_chunk(atomic_int *count, int cap)
{
    if (atomic_load_explicit(count, memory_order_relaxed) >= cap) return 0;
    return atomic_fetch_add_explicit(count, 1, memory_order_relaxed) < cap;
}

/* Room for len bytes of text, or NULL past the cap. */
static char *text_room(struct dt_timeline *tl, struct tl_buf *b, size_t len)
{
    struct text_chunk *c = b->text;
    if (!c || TEXT_CHUNK - c->used < len) {
        if (!take_chunk(&tl->text_chunks, MAX_TEXT_CHUNKS) || !(c = malloc(sizeof *c))) return NULL;
        c->next = b->text;
        c->used = 0;
        b->text = c;
    }
    char *p = c->s + c->used;
    c->used += len;
    return p;
}

/* A copy of "a" or, with b2, of "a b2", cut at MAX_TEXT - 1 bytes. */
static const char *copy_text(struct dt_timeline *tl, struct tl_buf *b, const char *a, const char *b2)
{
    size_t la = strnlen(a, MAX_TEXT - 1), lb = b2 ? strnlen(b2, MAX_TEXT - 1) : 0;
    size_t len = b2 ? la + 1 + lb : la;
    if (len > MAX_TEXT - 1) len = MAX_TEXT - 1;
    char *p = text_room(tl, b, len + 1);
    if (!p) return NULL;
    if (b2) snprintf(p, len + 1, "%.*s %.*s", (int)la, a, (int)lb, b2);
    else {
        memcpy(p, a, len);
        p[len] = '\0';
    }
    return p;
}

/* "prefix name", copied once per thread while the pair (and name's text)
 * stays the same: a layer's spans cost no text after its first step. */
static const char *pair_name(struct dt_timeline *tl, struct tl_buf *b, const char *prefix, const char *name)
{
    uintptr_t h = ((uintptr_t)name >> 3) ^ ((uintptr_t)prefix >> 4);
    struct name_copy *e = &b->names[h % NAME_CACHE];
    if (e->copy && e->name == name && e->prefix == prefix && strcmp(e->copy + e->plen + 1, name) == 0)
        return e->copy;
    const char *copy = copy_text(tl, b, prefix, name);
    if (copy) {
        e->prefix = prefix;
        e->name = name;
        e->copy = copy;
        e->plen = strlen(prefix);
        if (e->plen + 1 > strlen(copy)) e->copy = NULL; /* cut short: never a hit */
    }
    return copy;
}

static void record(struct dt_timeline *tl, int tid, const char *name, const char *name2, double t0, double t1,
                   const char *args)
{
    if (!tl) return;
    struct tl_buf *b = mine.tl == tl && mine.gen == tl->gen ? mine.buf : join(tl);
    struct span_chunk *c = b->last;
    if (!c || c->n == SPAN_CHUNK) {
        if (!take_chunk(&tl->span_chunks, tl->max_span_chunks) || !(c = malloc(sizeof *c))) {
            b->dropped++;
            return;
        }
        c->next = NULL;
        c->n = 0;
        if (b->last) b->last->next = c;
        else b->first = c;
        b->last = c;
    }
    struct span *s = &c->s[c->n];
    s->name = name2 ? pair_name(tl, b, name, name2) : name;
    s->args = args ? copy_text(tl, b, args, NULL) : NULL;
    if (!s->name || (args && !s->args)) {
        b->dropped++;
        return;
    }
    s->t0 = t0;
    s->t1 = t1;
    s->tid = tid;
    c->n++;
}

void dt_tl_span(struct dt_timeline *tl, int tid, const char *name, double t0, double t1, const char *args)
{
    record(tl, tid, name, NULL, t0, t1, args);
}

void dt_tl_span2(struct dt_timeline *tl, int tid, const char *prefix, const char *name, double t0, double t1,
                 const char *args)
{
    record(tl, tid, prefix, name, t0, t1, args);
}

/* ---- Starting --------------------------------------------------------------- */

static char *tmp_path(const char *path)
{
    size_t n = strlen(path) + 5;
    char *tmp = dt_xmalloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    return tmp;
}

int dt_timeline_start(MPI_Comm comm, const char *path, dt_status *st)
{
    int rank;
    DT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    if (dt_timeline) DT_DIE("dt_timeline_start: a timeline is already recording");
    st->code = DT_OK;
    if (rank == 0) { /* fail now, not after the training */
        char *tmp = tmp_path(path);
        FILE *f = fopen_fresh(tmp);
        if (!f) dt_fail(st, DT_EUSAGE, "--timeline %s: cannot create %s: %s", path, tmp, strerror(errno));
        else {
            fclose(f);
            remove(tmp);
        }
        free(tmp);
    }
    if (dt_status_agree(st, comm) != DT_OK) return st->code;
    struct dt_timeline *tl = dt_xcalloc(1, sizeof *tl);
    tl->gen = ++generation;
    tl->path = strdup(path);
    if (!tl->path) DT_DIE("out of memory");
    pthread_mutex_init(&tl->lock, NULL);
    atomic_init(&tl->span_chunks, 0);
    atomic_init(&tl->text_chunks, 0);
    long n = dt_fault_timeline_cap(); /* rounded up to a chunk */
    tl->max_span_chunks = n > 0 && n < (long)SPAN_CHUNK * MAX_SPAN_CHUNKS ? (int)((n + SPAN_CHUNK - 1) / SPAN_CHUNK)
                                                                          : MAX_SPAN_CHUNKS;
    DT_MPI_CHECK(MPI_Barrier(comm));
    tl->origin = dt_tl_now();
    dt_timeline = tl;
    return DT_OK;
}

/* ---- Writing ---------------------------------------------------------------- */

/* JSON text on its way out: rank 0 writes it to the file, the other ranks
 * send it to rank 0, PIECE bytes at a time. */
struct out {
    char *buf;
    size_t len;
    int rank;
    MPI_Comm comm;
    FILE *f;      /* rank 0 */
    int err;      /* rank 0: errno of the first failed write */
    int started;  /* an event was written: the next one needs a comma */
};

static void out_flush(struct out *o)
{
    if (o->len == 0) return;
    if (o->rank != 0) {
        DT_MPI_CHECK(MPI_Send(o->buf, (int)o->len, MPI_CHAR, 0, 0, o->comm));
    } else if (!o->err) {
        errno = 0;
        if (fwrite(o->buf, 1, o->len, o->f) != o->len) o->err = errno ? errno : EIO;
    }
    o->len = 0;
}

static void out_room(struct out *o, size_t n)
{
    if (PIECE - o->len < n) out_flush(o);
}

/* Short fixed text: at most 256 bytes. */
__attribute__((format(printf, 2, 3))) static void out_printf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    out_room(o, 256);
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, 256, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)(n < 256 ? n : 255);
}

static void out_string(struct out *o, const char *s)
{
    out_room(o, 1);
    o->buf[o->len++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        out_room(o, 6);
        if (*p == '"' || *p == '\\') {
            o->buf[o->len++] = '\\';
            o->buf[o->len++] = (char)*p;
        } else if (*p < 0x20) {
            o->len += (size_t)snprintf(o->buf + o->len, 7, "\\u%04x", *p);
        } else {
            o->buf[o->len++] = (char)*p;
        }
    }
    out_room(o, 1);
    o->buf[o->len++] = '"';
}

/* Opens an event: a comma before every one but the file's first. */
static void out_event(struct out *o, const char *name, const char *ph, int pid)
{
    out_printf(o, "%s{\"name\":", o->started ? ",\n" : "");
    o->started = 1;
    out_string(o, name ? name : "(null)");
    out_printf(o, ",\"ph\":\"%s\",\"pid\":%d", ph, pid);
}

static void write_rank(struct out *o, const struct dt_timeline *tl, int rank)
{
    static const char *threads[DT_TL_NTHREADS] = {"compute", "communication", "data"};
    char host[MPI_MAX_PROCESSOR_NAME] = "?", pname[MPI_MAX_PROCESSOR_NAME + 32];
    int hlen = 0;
    long dropped = 0;
    for (const struct tl_buf *b = tl->bufs; b; b = b->next) dropped += b->dropped;
    DT_MPI_CHECK(MPI_Get_processor_name(host, &hlen));
    snprintf(pname, sizeof pname, "rank %d (%s)", rank, host);

    out_event(o, "process_name", "M", rank);
    out_printf(o, ",\"args\":{\"name\":");
    out_string(o, pname);
    out_printf(o, ",\"dropped_spans\":%ld}}", dropped);
    out_event(o, "process_sort_index", "M", rank);
    out_printf(o, ",\"args\":{\"sort_index\":%d}}", rank);
    if (dropped) {
        out_event(o, "process_labels", "M", rank);
        out_printf(o, ",\"args\":{\"labels\":\"dropped %ld spans past the cap of %d\"}}", dropped,
                   SPAN_CHUNK * tl->max_span_chunks);
    }
    for (int t = 0; t < DT_TL_NTHREADS; t++) {
        out_event(o, "thread_name", "M", rank);
        out_printf(o, ",\"tid\":%d,\"args\":{\"name\":\"%s\"}}", t, threads[t]);
        out_event(o, "thread_sort_index", "M", rank);
        out_printf(o, ",\"tid\":%d,\"args\":{\"sort_index\":%d}}", t, t);
    }
    for (const struct tl_buf *b = tl->bufs; b; b = b->next)
        for (const struct span_chunk *c = b->first; c; c = c->next)
            for (int i = 0; i < c->n; i++) {
                const struct span *s = &c->s[i];
                /* A span begun before the start (DT_TL_BEGIN gave 0) starts at the origin. */
                double t0 = s->t0 > tl->origin ? s->t0 : tl->origin, t1 = s->t1 > t0 ? s->t1 : t0;
                out_event(o, s->name, "X", rank);
                out_printf(o, ",\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", s->tid, 1e6 * (t0 - tl->origin),
                           1e6 * (t1 - t0));
                if (s->args) {
                    out_printf(o, ",\"args\":{\"text\":");
                    out_string(o, s->args);
                    out_printf(o, "}");
                }
                out_printf(o, "}");
            }
}

static void timeline_free(struct dt_timeline *tl)
{
    for (struct tl_buf *b = tl->bufs, *nb; b; b = nb) {
        nb = b->next;
        for (struct span_chunk *c = b->first, *nc; c; c = nc) {
            nc = c->next;
            free(c);
        }
        for (struct text_chunk *c = b->text, *nc; c; c = nc) {
            nc = c->next;
            free(c);
        }
        free(b);
    }
    pthread_mutex_destroy(&tl->lock);
    free(tl->path);
    free(tl);
}

int dt_timeline_finish(MPI_Comm comm, dt_status *st)
{
    struct dt_timeline *tl = dt_timeline;
    st->code = DT_OK;
    if (!tl) return DT_OK;
    dt_timeline = NULL;
    struct out o = {.buf = dt_xmalloc(PIECE)};
    DT_MPI_CHECK(MPI_Comm_dup(comm, &o.comm)); /* our messages cannot meet the caller's */
    int size;
    DT_MPI_CHECK(MPI_Comm_rank(o.comm, &o.rank));
    DT_MPI_CHECK(MPI_Comm_size(o.comm, &size));
    char *tmp = tmp_path(tl->path);
    int open_ok = 1;
    if (o.rank == 0) {
        o.f = fopen_fresh(tmp);
        if (!o.f) {
            dt_fail(st, DT_ERUNTIME, "timeline %s: cannot create %s: %s", tl->path, tmp, strerror(errno));
            open_ok = 0;
        }
    }
    DT_MPI_CHECK(MPI_Bcast(&open_ok, 1, MPI_INT, 0, o.comm));
    if (open_ok) {
        if (o.rank == 0) {
            out_printf(&o, "{\"traceEvents\":[\n");
            write_rank(&o, tl, 0);
            out_flush(&o);
            for (int r = 1; r < size; r++)
                for (;;) { /* rank r's pieces, until an empty one */
                    MPI_Status ms;
                    int n = 0;
                    DT_MPI_CHECK(MPI_Recv(o.buf, PIECE, MPI_CHAR, r, 0, o.comm, &ms));
                    DT_MPI_CHECK(MPI_Get_count(&ms, MPI_CHAR, &n));
                    if (n == 0) break;
                    o.len = (size_t)n;
                    out_flush(&o);
                }
            out_printf(&o, "\n],\"displayTimeUnit\":\"ms\"}\n");
            out_flush(&o);
        } else {
            o.started = 1; /* rank 0's events come first */
            write_rank(&o, tl, o.rank);
            out_flush(&o);
            DT_MPI_CHECK(MPI_Send(o.buf, 0, MPI_CHAR, 0, 0, o.comm));
        }
    }
    if (o.rank == 0 && o.f) {
        errno = 0;
        if (fclose(o.f) != 0 && !o.err) o.err = errno ? errno : EIO;
        if (!o.err && rename(tmp, tl->path) != 0) o.err = errno;
        if (o.err) {
            dt_fail(st, DT_ERUNTIME, "timeline %s: cannot write %s: %s", tl->path, tmp, strerror(o.err));
            remove(tmp);
        }
    }
    dt_status_agree(st, o.comm);
    DT_MPI_CHECK(MPI_Comm_free(&o.comm));
    free(tmp);
    free(o.buf);
    timeline_free(tl);
    return st->code;
}

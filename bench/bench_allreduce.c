/* bench_allreduce.c: dtrain-bench-allreduce, the all-reduce benchmark.
 *
 *   mpirun -np N dtrain-bench-allreduce [-b 4] [-e 256M] [-a mpi,ring,hier,auto] ...
 *
 * In the manner of nccl-tests: for every buffer kind, message size and
 * algorithm it warms up, times back-to-back calls from a barrier on, reports
 * the min/median/max over ranks of each rank's average time per call with
 * algbw and busbw (= algbw x 2(n-1)/n), and checks one fresh call against the
 * exact sum. The inputs are small integers, so every summation order gives
 * the same float, through fp16/bf16 transport too, and the check is exact.
 * Rank 0 prints; metadata lines start with '#'. It can also write CSV, JSON
 * and an auto table (the format auto.c reads) for the layout it ran on.
 *
 * The design decision: one dt_coll context and one set of buffers serve every
 * algorithm; the harness drives each through its struct dt_allreduce_algo
 * (usable, run) and never switches on which one it is, so an algorithm added
 * to coll.c's registry is benchmarked here by name with no change. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/checks.h"
#include "collectives/coll.h"
#include "options.h"
#include "runtime/log.h"
#include "runtime/status.h"

#define PROG "dtrain-bench-allreduce"
#define TARGET_SECONDS 0.2 /* adaptive iters: time per size and algorithm */
#define MIN_ITERS 5
#define MAX_ITERS 1000
#define MEMBW_BYTES ((size_t)256 << 20) /* well past any L3 */
#define MEMBW_REPS 5
#define MAX_ALGOS 8
#define MAX_BYTES ((size_t)64 << 30)

enum { BUF_WINDOW, BUF_OOP, BUF_INPLACE, NBUF };
static const char *const buf_name[NBUF] = {"window", "oop", "inplace"};
static const char *const buf_about[NBUF] = {
    "in place, in the dt_coll_alloc shared window (the trainer's zero-copy path)",
    "out of place, separate malloc'd send and receive buffers",
    "in place, in a malloc'd buffer (hier copies it through its staging window)",
};
static const char *const compress_name[] = {"none", "fp16", "bf16"};

struct options {
    size_t minbytes, maxbytes, chunk;
    int depth;
    long step, iters, warmup; /* iters 0 = adaptive; warmup -1 = adaptive */
    long rounds;               /* timed rounds per size, algorithms interleaved */
    const struct dt_allreduce_algo *algo[MAX_ALGOS];
    int nalgo;
    int buffer[NBUF];          /* which buffer kinds to run */
    int ranks_per_node, compress, cross_only, check, help, version;
    const char *csv, *json, *table, *auto_table;
};

/* One measured (buffer, size, algorithm); kept on rank 0. */
struct row {
    int buf, algo;
    size_t count;
    long iters, warmup;
    double tmin, tmed, tmax;   /* seconds per call, over ranks */
    long long wrong;           /* -1: not checked */
    int differ;                /* ranks whose result bits differ from rank 0's */
    char picked[16];           /* what auto ran, else empty */
    double paired;             /* --rounds > 1: mpi's time / this one's, round by round, the median over
                                  rounds (each rank's) and then over ranks; 0 = not measured */
};

struct membw {
    double copy, add;          /* GB/s, one core */
};

/* Inputs: rank r < k holds, at element i, an integer in [-m, m]; ranks from k
 * on hold 0. k*m stays within the integers the transport format holds
 * exactly, so every partial sum is exact and so is the result. */
struct pattern {
    int k, m;
};

struct bench {
    struct options o;
    struct dt_coll coll;
    int coll_ok;               /* dt_coll_init succeeded */
    MPI_Comm comm;             /* private duplicate for the harness's own calls */
    int rank, size;
    int usable[MAX_ALGOS];
    struct pattern pat;
    float *win, *send, *recv;  /* max count each, as the buffer kinds need */
    size_t maxcount;
    struct row *rows;
    int nrows, caprows;
    struct membw bw;
    double est_algbw;          /* hier's memory-bandwidth-bound estimate, 0 = n/a */
    char date[64], host[MPI_MAX_PROCESSOR_NAME], mpilib[256], layout[160];
};

/* ---- command line ------------------------------------------------------------ */

static void usage(FILE *out)
{
    fputs("Usage: mpirun -np N " PROG " [OPTIONS]\n"
          "Time and check dtrain's all-reduce algorithms (float32 sums) over a range of\n"
          "message sizes, in the manner of nccl-tests.\n"
          "\n"
          "Sizes and algorithms:\n"
          "  -b, --minbytes B         smallest message in bytes (default 4; suffix K, M, G)\n"
          "  -e, --maxbytes B         largest message in bytes (default 256M)\n"
          "  -f, --stepfactor F       multiply the size by F each step (default 2)\n"
          "  -a, --algorithms LIST    comma-separated, from mpi, ring, hier, auto\n"
          "                           (default mpi,ring,hier,auto)\n"
          "  -n, --iters N            timed calls per size (default: adaptive, about\n"
          "                           0.2 s per size and algorithm, 5 to 1000)\n"
          "  -w, --warmup N           untimed calls first (default: max(2, iters/10))\n"
          "  -r, --rounds R           time every algorithm R times per size, interleaved\n"
          "                           (the order turns each round), and report the median\n"
          "                           of the rounds; the adaptive iters are split over them\n"
          "                           (default 1)\n"
          "\n"
          "Layout and transport (as dtrain's own options):\n"
          "      --ranks-per-node K   treat each K consecutive ranks as one node\n"
          "                           (default: detected; env DTRAIN_RANKS_PER_NODE)\n"
          "      --grad-compression C none (default), fp16 or bf16: 16-bit transport\n"
          "      --compress-cross-only  compress only hops between nodes\n"
          "      --chunk B            ring pipeline piece in bytes (default: 63K across\n"
          "                           nodes, 256K inside one, as dtrain's --ring-chunk-kb)\n"
          "      --depth D            ring pieces in flight, 1..16 (default: 8 across\n"
          "                           nodes, 2 inside one, as dtrain's --ring-depth)\n"
          "      --allreduce-table F  the table auto uses (default: built in, or env\n"
          "                           DTRAIN_ALLREDUCE_TABLE)\n"
          "\n"
          "Buffers (give any of them; default --window --outofplace):\n"
          "      --window             in place, in the shared window from dt_coll_alloc\n"
          "                           (the zero-copy path the trainer uses)\n"
          "      --outofplace         separate send and receive buffers\n"
          "      --inplace            in place, in ordinary memory\n"
          "\n"
          "Output:\n"
          "      --csv FILE           also write every row as CSV\n"
          "      --json FILE          also write the metadata and every row as JSON\n"
          "      --table FILE         write an auto table for this layout: the fastest of\n"
          "                           mpi, ring and hier at each size (see --allreduce-table)\n"
          "      --check, --no-check  check every result against the exact sum (default: check)\n"
          "  -h, --help               print this help and exit\n"
          "  -V, --version            print the version and exit\n"
          "\n"
          "Columns: time_* are microseconds per call (each rank's average; min, median and\n"
          "max over ranks); algbw = bytes / median time (GB/s, 1e9); busbw = algbw x\n"
          "2(n-1)/n; vs_mpi = mpi's median time / this one's (with --rounds, the median\n"
          "of the rounds' ratios); #wrong = wrong elements.\n"
          "Exit status: 0 all results right, 1 wrong results or an output file could not\n"
          "be written, 2 bad command line. See " PROG "(1).\n",
          out);
}

static void fmt_bytes(char *buf, size_t len, size_t b)
{
    if (b >= (1u << 30) && b % (1u << 30) == 0) snprintf(buf, len, "%zuG", b >> 30);
    else if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(buf, len, "%zuM", b >> 20);
    else if (b >= (1u << 10) && b % (1u << 10) == 0) snprintf(buf, len, "%zuK", b >> 10);
    else snprintf(buf, len, "%zu", b);
}

/* "64", "64K", "64M", "1G" (binary multiples; an optional trailing B or iB). */
static int parse_bytes(const char *flag, const char *arg, size_t lo, size_t hi, size_t *out, dt_status *st)
{
    char *end, los[32], his[32];
    unsigned long long v, mult = 1;
    errno = 0;
    v = strtoull(arg, &end, 10);
    if (errno || end == arg || arg[0] < '0' || arg[0] > '9')
        return dt_fail(st, DT_EUSAGE, "%s: expected a size in bytes (suffix K, M or G allowed), found '%s'",
                       flag, arg);
    switch (*end) {
    case 'k': case 'K': mult = 1ull << 10; end++; break;
    case 'm': case 'M': mult = 1ull << 20; end++; break;
    case 'g': case 'G': mult = 1ull << 30; end++; break;
    default: break;
    }
    if (mult > 1 && end[0] == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    if (*end != '\0')
        return dt_fail(st, DT_EUSAGE, "%s: expected a size in bytes (suffix K, M or G allowed), found '%s'",
                       flag, arg);
    fmt_bytes(los, sizeof los, lo);
    fmt_bytes(his, sizeof his, hi);
    if (v > ULLONG_MAX / mult || v * mult < lo || v * mult > hi)
        return dt_fail(st, DT_EUSAGE, "%s: expected a size from %s to %s bytes, found %s", flag, los, his, arg);
    *out = (size_t)(v * mult);
    return DT_OK;
}

static int parse_algorithms(struct options *o, const char *arg, dt_status *st)
{
    const char *p = arg;
    o->nalgo = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char name[32];
        if (n == 0 || n >= sizeof name)
            return dt_fail(st, DT_EUSAGE, "--algorithms: expected a comma-separated list of mpi, ring, hier "
                           "and auto, found '%s'", arg);
        memcpy(name, p, n);
        name[n] = '\0';
        const struct dt_allreduce_algo *a = dt_allreduce_find(name);
        if (!a)
            return dt_fail(st, DT_EUSAGE, "--algorithms: expected mpi, ring, hier or auto, found '%s' in '%s'",
                           name, arg);
        for (int i = 0; i < o->nalgo; i++)
            if (o->algo[i] == a) return dt_fail(st, DT_EUSAGE, "--algorithms: '%s' is listed twice", name);
        if (o->nalgo == MAX_ALGOS) return dt_fail(st, DT_EUSAGE, "--algorithms: too many in '%s'", arg);
        o->algo[o->nalgo++] = a;
        if (!comma) return DT_OK;
        p = comma + 1;
    }
}

enum { OPT_RPN = 256, OPT_COMPRESS, OPT_CROSS, OPT_CHUNK, OPT_DEPTH, OPT_TABLE_IN, OPT_WINDOW, OPT_OOP,
       OPT_INPLACE, OPT_CSV, OPT_JSON, OPT_TABLE, OPT_CHECK, OPT_NO_CHECK };

static int parse_options(struct options *o, int argc, char **argv, dt_status *st)
{
    static const struct option longopts[] = {
        {"minbytes", required_argument, 0, 'b'},
        {"maxbytes", required_argument, 0, 'e'},
        {"stepfactor", required_argument, 0, 'f'},
        {"algorithms", required_argument, 0, 'a'},
        {"iters", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'},
        {"rounds", required_argument, 0, 'r'},
        {"ranks-per-node", required_argument, 0, OPT_RPN},
        {"grad-compression", required_argument, 0, OPT_COMPRESS},
        {"compress-cross-only", no_argument, 0, OPT_CROSS},
        {"chunk", required_argument, 0, OPT_CHUNK},
        {"depth", required_argument, 0, OPT_DEPTH},
        {"allreduce-table", required_argument, 0, OPT_TABLE_IN},
        {"window", no_argument, 0, OPT_WINDOW},
        {"outofplace", no_argument, 0, OPT_OOP},
        {"inplace", no_argument, 0, OPT_INPLACE},
        {"csv", required_argument, 0, OPT_CSV},
        {"json", required_argument, 0, OPT_JSON},
        {"table", required_argument, 0, OPT_TABLE},
        {"check", no_argument, 0, OPT_CHECK},
        {"no-check", no_argument, 0, OPT_NO_CHECK},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    int c, any_buffer = 0;
    long v;

    memset(o, 0, sizeof *o);
    o->minbytes = 4;
    o->maxbytes = (size_t)256 << 20;
    o->step = 2;
    o->warmup = -1;
    o->rounds = 1;
    o->check = 1;
    st->code = DT_OK;
    opterr = 0; /* our own messages, from rank 0 only */
    optind = 1;
    while ((c = getopt_long(argc, argv, ":b:e:f:a:n:w:r:hV", longopts, NULL)) != -1) {
        const char *flag = optind > 1 ? argv[optind - 1] : "?";
        int rc = DT_OK;
        switch (c) {
        case 'b': rc = parse_bytes("--minbytes", optarg, 4, MAX_BYTES, &o->minbytes, st); break;
        case 'e': rc = parse_bytes("--maxbytes", optarg, 4, MAX_BYTES, &o->maxbytes, st); break;
        case 'f': rc = dt_parse_long("--stepfactor", optarg, 2, 1024, &o->step, st); break;
        case 'a': rc = parse_algorithms(o, optarg, st); break;
        case 'n': rc = dt_parse_long("--iters", optarg, 1, 1000000000L, &o->iters, st); break;
        case 'w': rc = dt_parse_long("--warmup", optarg, 0, 1000000000L, &o->warmup, st); break;
        case 'r': rc = dt_parse_long("--rounds", optarg, 1, 1001, &o->rounds, st); break;
        case OPT_RPN: rc = dt_parse_long("--ranks-per-node", optarg, 1, 1 << 20, &v, st); o->ranks_per_node = (int)v; break;
        case OPT_COMPRESS:
            if (!strcmp(optarg, "none")) o->compress = DT_COMPRESS_NONE;
            else if (!strcmp(optarg, "fp16")) o->compress = DT_COMPRESS_FP16;
            else if (!strcmp(optarg, "bf16")) o->compress = DT_COMPRESS_BF16;
            else rc = dt_fail(st, DT_EUSAGE, "--grad-compression: expected none, fp16 or bf16, found '%s'", optarg);
            break;
        case OPT_CROSS: o->cross_only = 1; break;
        case OPT_CHUNK:
            rc = parse_bytes("--chunk", optarg, 4, (size_t)1 << 30, &o->chunk, st);
            if (rc == DT_OK && o->chunk % sizeof(float))
                rc = dt_fail(st, DT_EUSAGE, "--chunk: expected a multiple of 4 bytes (float32), found %s", optarg);
            break;
        case OPT_DEPTH: {
            char *end;
            long d = strtol(optarg, &end, 10);
            if (end == optarg || *end || d < 1 || d > DT_RING_MAX_DEPTH)
                rc = dt_fail(st, DT_EUSAGE, "--depth: expected an integer from 1 to %d, found '%s'", DT_RING_MAX_DEPTH,
                             optarg);
            else o->depth = (int)d;
            break;
        }
        case OPT_TABLE_IN: o->auto_table = optarg; break;
        case OPT_WINDOW: o->buffer[BUF_WINDOW] = 1; any_buffer = 1; break;
        case OPT_OOP: o->buffer[BUF_OOP] = 1; any_buffer = 1; break;
        case OPT_INPLACE: o->buffer[BUF_INPLACE] = 1; any_buffer = 1; break;
        case OPT_CSV: o->csv = optarg; break;
        case OPT_JSON: o->json = optarg; break;
        case OPT_TABLE: o->table = optarg; break;
        case OPT_CHECK: o->check = 1; break;
        case OPT_NO_CHECK: o->check = 0; break;
        case 'h': o->help = 1; break;
        case 'V': o->version = 1; break;
        case ':': rc = dt_fail(st, DT_EUSAGE, "%s: missing value", flag); break;
        default: rc = dt_fail(st, DT_EUSAGE, "unknown option '%s' (see " PROG " --help)", flag); break;
        }
        if (rc != DT_OK) return rc;
    }
    if (o->help || o->version) return DT_OK;
    if (optind < argc)
        return dt_fail(st, DT_EUSAGE, "unexpected argument '%s' (see " PROG " --help)", argv[optind]);
    if (o->nalgo == 0) parse_algorithms(o, "mpi,ring,hier,auto", st);
    if (!any_buffer) o->buffer[BUF_WINDOW] = o->buffer[BUF_OOP] = 1;
    if (o->minbytes % sizeof(float))
        return dt_fail(st, DT_EUSAGE, "--minbytes: expected a multiple of 4 bytes (float32 elements), found %zu",
                       o->minbytes);
    if (o->maxbytes < o->minbytes)
        return dt_fail(st, DT_EUSAGE, "--maxbytes: %zu is less than --minbytes %zu", o->maxbytes, o->minbytes);
    if (o->cross_only && !o->compress)
        return dt_fail(st, DT_EUSAGE, "--compress-cross-only: needs --grad-compression fp16 or bf16");
    const char *files[3] = {o->csv, o->json, o->table}, *names[3] = {"--csv", "--json", "--table"};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (files[i] && files[j] && !strcmp(files[i], files[j]))
                return dt_fail(st, DT_EUSAGE, "%s and %s: both name %s; give each its own file", names[i],
                               names[j], files[i]);
    return DT_OK;
}

/* ---- output files: written whole at the end, through FILE.tmp + rename ----- */

static int probe_output(const char *flag, const char *path, dt_status *st)
{
    char tmp[4096];
    if (!path) return DT_OK;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return dt_fail(st, DT_EUSAGE, "%s: file name too long", flag);
    FILE *f = fopen(tmp, "w");
    if (!f) return dt_fail(st, DT_EUSAGE, "%s: cannot create %s: %s", flag, tmp, strerror(errno));
    fclose(f);
    remove(tmp);
    return DT_OK;
}

static FILE *open_output(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    return fopen(tmp, "w");
}

/* Close and move into place; on any error remove the temporary and say why. */
static int close_output(FILE *f, const char *flag, const char *path, dt_status *st)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (!bad && rename(tmp, path) == 0) return DT_OK;
    int err = errno;
    remove(tmp);
    return dt_fail(st, DT_ERUNTIME, "%s: cannot write %s: %s", flag, path, strerror(err));
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* ---- inputs and their exact sums --------------------------------------------- */

static inline uint32_t mix(size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u;
    return x ^ (x >> 15);
}

static inline int value(const struct pattern *p, int r, size_t i)
{
    if (r >= p->k) return 0;
    uint32_t q = (uint32_t)p->m + 1;
    return (int)(mix(i) % q) + (int)((i + (size_t)r) % q) - p->m;
}

/* Sum of value(r, i) over all ranks, in closed form (O(1) per element). */
static inline long long expected(const struct pattern *p, size_t i)
{
    long long q = p->m + 1, k = p->k;
    long long a = (long long)(mix(i) % (uint32_t)q), a0 = (long long)(i % (size_t)q);
    long long rem = k % q, s = (k / q) * (q * (q - 1) / 2); /* (i + r) mod q over r < k */
    if (a0 + rem <= q) {
        s += rem * a0 + rem * (rem - 1) / 2;
    } else {
        long long l1 = q - a0, l2 = rem - l1;
        s += l1 * a0 + l1 * (l1 - 1) / 2 + l2 * (l2 - 1) / 2;
    }
    return k * (a - p->m) + s;
}

static void make_pattern(struct pattern *p, int nranks, int compress)
{
    /* Largest integer up to which every integer is exact in the transport. */
    long limit = compress == DT_COMPRESS_BF16 ? 256 : compress == DT_COMPRESS_FP16 ? 2048 : 1L << 24;
    p->k = nranks < limit ? nranks : (int)limit;
    long m = limit / p->k;
    p->m = m > 1024 ? 1024 : (int)m;
}

static void fill(const struct pattern *p, int rank, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)value(p, rank, i);
}

/* Order-sensitive hash of the bits, four lanes so it is not latency-bound. */
static uint64_t bits_hash(const float *x, size_t n)
{
    uint64_t h[4] = {0xcbf29ce484222325ull, 1, 2, 3};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) {
            uint32_t u;
            memcpy(&u, &x[i + (size_t)j], sizeof u);
            h[j] = (h[j] ^ u) * 0x100000001b3ull;
        }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        h[0] = (h[0] ^ u) * 0x100000001b3ull;
    }
    return h[0] ^ (h[1] << 16 | h[1] >> 48) ^ (h[2] << 32 | h[2] >> 32) ^ (h[3] << 48 | h[3] >> 16) ^ n;
}

/* ---- memory bandwidth, and hier's estimate from it ----------------------------- */

static void add_f32(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* Rank 0 alone, the others asleep in a non-blocking barrier so they do not
 * compete for the core or the memory: best of MEMBW_REPS. copy = bytes copied
 * per second (glibc memcpy); add = bytes of y per second for y += x. */
static void measure_membw(struct bench *b)
{
    MPI_Request rq;
    int done = 0;
    if (b->rank == 0) {
        size_t n = MEMBW_BYTES / sizeof(float);
        float *x = dt_xmalloc(MEMBW_BYTES), *y = dt_xmalloc(MEMBW_BYTES);
        double best[2] = {1e30, 1e30};
        for (size_t i = 0; i < n; i++) x[i] = 1.0f, y[i] = 0.0f; /* first touch outside the timing */
        for (int rep = 0; rep <= MEMBW_REPS; rep++) {  /* rep 0 warms up */
            double t0 = MPI_Wtime();
            memcpy(y, x, MEMBW_BYTES);
            double t1 = MPI_Wtime();
            add_f32(y, x, n);
            double t2 = MPI_Wtime();
            if (rep > 0 && t1 - t0 < best[0]) best[0] = t1 - t0;
            if (rep > 0 && t2 - t1 < best[1]) best[1] = t2 - t1;
        }
        volatile float sink = y[n / 2]; /* the stores are observed, so they stay */
        (void)sink;
        free(x);
        free(y);
        b->bw.copy = (double)MEMBW_BYTES / best[0] / 1e9;
        b->bw.add = (double)MEMBW_BYTES / best[1] / 1e9;
    }
    DT_MPI_CHECK(MPI_Ibarrier(b->comm, &rq));
    while (!done) {
        DT_MPI_CHECK(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
        if (!done && b->rank != 0) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    DT_MPI_CHECK(MPI_Bcast(&b->bw, 2, MPI_DOUBLE, 0, b->comm));
}

/* hier's time if memory bandwidth is all that limits it: one node of L
 * ranks, S bytes, window buffers, every rank streaming at the single-core
 * rates at once (optimistic where L ranks saturate the memory):
 *   reduce-scatter: each rank writes its S/L slice as the sum of L peers'
 *     slices, (L+1) S/L bytes of traffic, at add's traffic rate 3 x add;
 *   all-gather: each rank copies the other L-1 slices, (L-1) S/L bytes, at copy.
 * algbw = S / (T_rs + T_ag). Barriers and the cross-node hop (more than one
 * node) are left out. Beyond the caches (256 MiB at 2 ranks) hier reaches
 * ~95% of it here; nearer the L3 size it beats it, because the all-gather
 * finds slices the reduce-scatter just wrote still in cache. */
static double hier_estimate(const struct membw *bw, int L)
{
    if (L < 2 || bw->copy <= 0 || bw->add <= 0) return 0;
    double t_rs = (L + 1.0) / L / (3.0 * bw->add), t_ag = (L - 1.0) / L / bw->copy; /* s per GB */
    return 1.0 / (t_rs + t_ag);
}

/* ---- measuring ------------------------------------------------------------------ */

static double busbw_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

/* Each rank's average seconds per call over n back-to-back calls. */
static double timed(struct bench *b, const struct dt_allreduce_algo *a, const float *s, float *r,
                    size_t count, long n)
{
    if (n <= 0) return 0;
    DT_MPI_CHECK(MPI_Barrier(b->comm));
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) a->run(&b->coll, s, r, count);
    return (MPI_Wtime() - t0) / (double)n;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

static void buffers_for(struct bench *b, int buf, const float **s, float **r)
{
    if (buf == BUF_WINDOW) *s = *r = b->win;
    else if (buf == BUF_OOP) *s = b->send, *r = b->recv;
    else *s = *r = b->recv;
}

/* One fresh call on fresh inputs; wrong elements summed over ranks, and the
 * number of ranks whose result bits differ from rank 0's. */
static void check_one(struct bench *b, const struct dt_allreduce_algo *a, int buf, size_t count,
                      long long *wrong, int *differ)
{
    const float *s;
    float *r;
    buffers_for(b, buf, &s, &r);
    fill(&b->pat, b->rank, (float *)s, count);
    if (s != r) memset(r, 0xff, sizeof(float) * count); /* NaN: an untouched element is wrong */
    DT_MPI_CHECK(MPI_Barrier(b->comm));
    a->run(&b->coll, s, r, count);
    long long bad = 0;
    for (size_t i = 0; i < count; i++)
        if (r[i] != (float)expected(&b->pat, i)) bad++;
    if (s != r) /* out of place must leave the input alone */
        for (size_t i = 0; i < count; i++)
            if (s[i] != (float)value(&b->pat, b->rank, i)) bad++;
    uint64_t h = bits_hash(r, count), h0 = h;
    DT_MPI_CHECK(MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, b->comm));
    int d = h != h0;
    DT_MPI_CHECK(MPI_Allreduce(&bad, wrong, 1, MPI_LONG_LONG, MPI_SUM, b->comm));
    DT_MPI_CHECK(MPI_Allreduce(&d, differ, 1, MPI_INT, MPI_SUM, b->comm));
}

/* Every usable algorithm at one size: each sized and warmed up, then timed
 * in --rounds rounds, the order turning each round so no algorithm always
 * runs first (a shared, noisy machine drifts); a rank's time for an
 * algorithm is the median of its rounds. Rows are appended to b->rows. */
static void measure_size(struct bench *b, int buf, size_t count, double *times)
{
    const float *s;
    float *r;
    int R = (int)b->o.rounds, idx[MAX_ALGOS], n = 0;
    long iters[MAX_ALGOS], warmup[MAX_ALGOS];
    double *t = dt_xcalloc((size_t)MAX_ALGOS * (size_t)R, sizeof(double));
    buffers_for(b, buf, &s, &r);
    fill(&b->pat, b->rank, (float *)s, count);
    for (int ai = 0; ai < b->o.nalgo; ai++) {
        if (!b->usable[ai]) continue;
        const struct dt_allreduce_algo *a = b->o.algo[ai];
        long it = b->o.iters, warm = b->o.warmup, probes = 0;
        if (it == 0 || warm < 0) { /* size the run from a timed call or two */
            double t1 = 0, tmax;
            probes = warm < 0 || warm >= 2 ? 2 : 1;
            for (long p = 0; p < probes; p++) t1 = timed(b, a, s, r, count, 1);
            DT_MPI_CHECK(MPI_Allreduce(&t1, &tmax, 1, MPI_DOUBLE, MPI_MAX, b->comm));
            if (it == 0) {
                double want = ceil(TARGET_SECONDS / R / (tmax > 1e-9 ? tmax : 1e-9));
                it = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (long)want;
            }
            if (warm < 0) warm = it / 10 > 2 ? it / 10 : 2;
        }
        timed(b, a, s, r, count, warm > probes ? warm - probes : 0);
        iters[n] = it;
        warmup[n] = warm > probes ? warm : probes;
        idx[n++] = ai;
    }
    for (int round = 0; round < R; round++)
        for (int q = 0; q < n; q++) {
            int k = (q + round) % n;
            /* A few untimed calls first: what ran before (another algorithm,
             * other connections) must not cost this one's timed calls. */
            if (R > 1) timed(b, b->o.algo[idx[k]], s, r, count, iters[k] / 5 > 1 ? iters[k] / 5 : 1);
            t[k * R + round] = timed(b, b->o.algo[idx[k]], s, r, count, iters[k]);
        }
    /* Round by round against mpi, before the sorting below reorders the rounds. */
    int base = -1;
    for (int k = 0; k < n; k++)
        if (b->o.algo[idx[k]] == &dt_allreduce_mpi) base = k;
    double *paired = dt_xcalloc((size_t)n, sizeof(double)), *q = dt_xcalloc((size_t)R, sizeof(double));
    for (int k = 0; k < n && base >= 0 && R > 1; k++) {
        for (int round = 0; round < R; round++) q[round] = t[k * R + round] > 0 ? t[base * R + round] / t[k * R + round] : 0;
        qsort(q, (size_t)R, sizeof *q, cmp_double);
        paired[k] = R % 2 ? q[R / 2] : 0.5 * (q[R / 2 - 1] + q[R / 2]);
    }
    free(q);
    for (int k = 0; k < n; k++) {
        const struct dt_allreduce_algo *a = b->o.algo[idx[k]];
        double pr = paired[k];
        qsort(t + k * R, (size_t)R, sizeof *t, cmp_double);
        double mine = R % 2 ? t[k * R + R / 2] : 0.5 * (t[k * R + R / 2 - 1] + t[k * R + R / 2]);
        DT_MPI_CHECK(MPI_Gather(&mine, 1, MPI_DOUBLE, times, 1, MPI_DOUBLE, 0, b->comm));
        if (b->nrows == b->caprows) {
            b->caprows = b->caprows ? 2 * b->caprows : 64;
            b->rows = realloc(b->rows, sizeof *b->rows * (size_t)b->caprows);
            if (!b->rows) DT_DIE("out of memory");
        }
        struct row *row = &b->rows[b->nrows++];
        memset(row, 0, sizeof *row);
        row->buf = buf;
        row->algo = idx[k];
        row->count = count;
        row->iters = iters[k];
        row->warmup = warmup[k];
        row->wrong = -1;
        if (a == &dt_allreduce_auto) /* the one thing only auto has: a choice to show */
            snprintf(row->picked, sizeof row->picked, "%s", dt_auto_choose(&b->coll, count)->name);
        if (b->rank == 0) {
            int np = b->size;
            qsort(times, (size_t)np, sizeof *times, cmp_double);
            row->tmin = times[0];
            row->tmax = times[np - 1];
            row->tmed = np % 2 ? times[np / 2] : 0.5 * (times[np / 2 - 1] + times[np / 2]);
        }
        DT_MPI_CHECK(MPI_Gather(&pr, 1, MPI_DOUBLE, times, 1, MPI_DOUBLE, 0, b->comm));
        if (b->rank == 0 && pr > 0) {
            int np = b->size;
            qsort(times, (size_t)np, sizeof *times, cmp_double);
            row->paired = np % 2 ? times[np / 2] : 0.5 * (times[np / 2 - 1] + times[np / 2]);
        }
        if (b->o.check) check_one(b, a, buf, count, &row->wrong, &row->differ);
    }
    free(paired);
    free(t);
}

/* ---- reporting -------------------------------------------------------------------- */

static const struct row *find_row(const struct bench *b, int buf, size_t count, const struct dt_allreduce_algo *a)
{
    for (int i = 0; i < b->nrows; i++)
        if (b->rows[i].buf == buf && b->rows[i].count == count && b->o.algo[b->rows[i].algo] == a)
            return &b->rows[i];
    return NULL;
}

/* mpi's time / this row's: round by round with --rounds (row->paired), else
 * the ratio of the medians; 0 when there is no mpi row. */
static double vs_mpi(const struct bench *b, const struct row *r)
{
    const struct row *base = find_row(b, r->buf, r->count, &dt_allreduce_mpi);
    if (!base || r->tmed <= 0) return 0;
    if (r->paired > 0 || base == r) return base == r ? 1.0 : r->paired;
    return base->tmed / r->tmed;
}

static double algbw(const struct row *r)
{
    return r->tmed > 0 ? (double)(r->count * sizeof(float)) / r->tmed / 1e9 : 0.0;
}

static void print_header(int buf)
{
    printf("#\n# buffer %s: %s\n", buf_name[buf], buf_about[buf]);
    printf("#%12s %10s  %-10s %-7s %6s %9s %9s %9s %8s %8s %7s %7s\n", "size", "count", "algo", "buf",
           "iters", "time_min", "time_med", "time_max", "algbw", "busbw", "vs_mpi", "#wrong");
    printf("#%12s %10s  %-10s %-7s %6s %9s %9s %9s %8s %8s %7s %7s\n", "(B)", "(floats)", "", "", "",
           "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "");
}

static void print_row(const struct bench *b, const struct row *r)
{
    char name[32], vs[16] = "-", wrong[24] = "N/A";
    if (r->picked[0]) snprintf(name, sizeof name, "%s:%s", b->o.algo[r->algo]->name, r->picked);
    else snprintf(name, sizeof name, "%s", b->o.algo[r->algo]->name);
    if (vs_mpi(b, r) > 0) snprintf(vs, sizeof vs, "%.2f", vs_mpi(b, r));
    if (r->wrong >= 0) snprintf(wrong, sizeof wrong, "%lld%s", r->wrong, r->differ ? "!" : "");
    printf("%13zu %10zu  %-10s %-7s %6ld %9.2f %9.2f %9.2f %8.3f %8.3f %7s %7s\n", r->count * sizeof(float),
           r->count, name, buf_name[r->buf], r->iters, r->tmin * 1e6, r->tmed * 1e6, r->tmax * 1e6, algbw(r),
           algbw(r) * busbw_factor(b->size), vs, wrong);
}

static void print_summary(const struct bench *b)
{
    for (int buf = 0; buf < NBUF; buf++) {
        if (!b->o.buffer[buf]) continue;
        printf("#\n");
        for (int ai = 0; ai < b->o.nalgo; ai++) {
            const struct dt_allreduce_algo *a = b->o.algo[ai];
            double sum = 0, logsum = 0, lo = 1e30, hi = 0, last = 0;
            size_t last_bytes = 0;
            int n = 0, nratio = 0;
            if (!b->usable[ai]) continue;
            for (int i = 0; i < b->nrows; i++) {
                const struct row *r = &b->rows[i];
                if (r->buf != buf || r->algo != ai) continue;
                double bus = algbw(r) * busbw_factor(b->size);
                sum += bus;
                n++;
                last = bus, last_bytes = r->count * sizeof(float); /* rows run small to large */
                if (vs_mpi(b, r) > 0) {
                    double q = vs_mpi(b, r);
                    logsum += log(q);
                    nratio++;
                    if (q < lo) lo = q;
                    if (q > hi) hi = q;
                }
            }
            if (!n) continue;
            printf("# Avg bus bandwidth  %-7s %-5s: %8.3f GB/s", buf_name[buf], a->name, sum / n);
            if (nratio && a != &dt_allreduce_mpi)
                printf("   vs mpi: %.2fx geomean (%.2fx..%.2fx) over %d sizes", exp(logsum / nratio), lo, hi, nratio);
            printf("\n");
            if (a == &dt_allreduce_hier && buf == BUF_WINDOW && b->est_algbw > 0) {
                char sz[32];
                double est = b->est_algbw * busbw_factor(b->size);
                fmt_bytes(sz, sizeof sz, last_bytes);
                printf("#   hier at the largest size (%s): busbw %.3f GB/s = %.0f%% of the memory-bandwidth-bound "
                       "estimate %.3f GB/s\n#   (meaningful for messages well beyond the caches; nearer the L3 "
                       "size caches beat it)\n", sz, last, 100.0 * last / est, est);
            }
        }
    }
}

static void write_csv(const struct bench *b, FILE *f)
{
    fprintf(f, "buffer,size_bytes,count,algorithm,picked,ranks,iters,warmup,time_min_us,time_med_us,"
               "time_max_us,algbw_GBps,busbw_GBps,vs_mpi,wrong,ranks_differ,nodes,ranks_per_node,ring_chunk,"
               "ring_depth\n");
    const struct dt_topo *t = &b->coll.topo;
    for (int i = 0; i < b->nrows; i++) {
        const struct row *r = &b->rows[i];
        fprintf(f, "%s,%zu,%zu,%s,%s,%d,%ld,%ld,%.3f,%.3f,%.3f,%.4f,%.4f,", buf_name[r->buf],
                r->count * sizeof(float), r->count, b->o.algo[r->algo]->name, r->picked, b->size, r->iters,
                r->warmup, r->tmin * 1e6, r->tmed * 1e6, r->tmax * 1e6, algbw(r), algbw(r) * busbw_factor(b->size));
        if (vs_mpi(b, r) > 0) fprintf(f, "%.4f", vs_mpi(b, r));
        if (r->wrong >= 0) fprintf(f, ",%lld,%d", r->wrong, r->differ);
        else fprintf(f, ",,");
        fprintf(f, ",%d,%d,%zu,%d\n", t->nnodes, t->uniform ? t->local_size : 0, b->coll.cfg.chunk_bytes,
                b->coll.cfg.ring_depth);
    }
}

static void write_json(const struct bench *b, FILE *f, long long wrong)
{
    const struct options *o = &b->o;
    fprintf(f, "{\n  \"program\": \"" PROG "\",\n  \"version\": \"%s\",\n  \"date\": ", PACKAGE_VERSION);
    json_string(f, b->date);
    fprintf(f, ",\n  \"host\": ");
    json_string(f, b->host);
    fprintf(f, ",\n  \"mpi_library\": ");
    json_string(f, b->mpilib);
    fprintf(f, ",\n  \"layout\": ");
    json_string(f, b->layout);
    fprintf(f, ",\n  \"ranks\": %d,\n  \"nodes\": %d,\n  \"ranks_per_node\": %d,\n  \"uniform\": %s,\n",
            b->size, b->coll.topo.nnodes, b->coll.topo.uniform ? b->coll.topo.local_size : 0,
            b->coll.topo.uniform ? "true" : "false");
    fprintf(f, "  \"compression\": \"%s\",\n  \"compress_cross_only\": %s,\n  \"chunk_bytes\": %zu,\n  \"ring_depth\": %d,\n",
            compress_name[o->compress], o->cross_only ? "true" : "false", b->coll.cfg.chunk_bytes,
            b->coll.cfg.ring_depth);
    fprintf(f, "  \"auto_table\": ");
    if (o->auto_table) json_string(f, o->auto_table);
    else fprintf(f, "null");
    fprintf(f, ",\n  \"rounds\": %ld", o->rounds);
    fprintf(f, ",\n  \"iters\": %s,\n  \"warmup\": %s,\n  \"check\": %s,\n",
            o->iters ? "\"fixed\"" : "\"adaptive\"", o->warmup >= 0 ? "\"fixed\"" : "\"adaptive\"",
            o->check ? "true" : "false");
    fprintf(f, "  \"membw\": {\"bytes\": %zu, \"copy_GBps\": %.3f, \"add_GBps\": %.3f},\n", MEMBW_BYTES,
            b->bw.copy, b->bw.add);
    if (b->est_algbw > 0)
        fprintf(f, "  \"hier_membw_estimate\": {\"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f},\n", b->est_algbw,
                b->est_algbw * busbw_factor(b->size));
    else
        fprintf(f, "  \"hier_membw_estimate\": null,\n");
    fprintf(f, "  \"skipped\": [");
    for (int ai = 0, first = 1; ai < o->nalgo; ai++)
        if (!b->usable[ai]) fprintf(f, "%s\"%s\"", first ? "" : ", ", o->algo[ai]->name), first = 0;
    fprintf(f, "],\n  \"wrong_total\": ");
    if (o->check) fprintf(f, "%lld", wrong);
    else fprintf(f, "null");
    fprintf(f, ",\n  \"results\": [\n");
    for (int i = 0; i < b->nrows; i++) {
        const struct row *r = &b->rows[i];
        fprintf(f, "    {\"buffer\": \"%s\", \"bytes\": %zu, \"count\": %zu, \"algorithm\": \"%s\", ",
                buf_name[r->buf], r->count * sizeof(float), r->count, o->algo[r->algo]->name);
        if (r->picked[0]) fprintf(f, "\"picked\": \"%s\", ", r->picked);
        fprintf(f, "\"iters\": %ld, \"warmup\": %ld, \"time_min_us\": %.3f, \"time_med_us\": %.3f, "
                   "\"time_max_us\": %.3f, \"algbw_GBps\": %.4f, \"busbw_GBps\": %.4f, \"vs_mpi\": ",
                r->iters, r->warmup, r->tmin * 1e6, r->tmed * 1e6, r->tmax * 1e6, algbw(r),
                algbw(r) * busbw_factor(b->size));
        if (vs_mpi(b, r) > 0) fprintf(f, "%.4f", vs_mpi(b, r));
        else fprintf(f, "null");
        if (r->wrong >= 0) fprintf(f, ", \"wrong\": %lld, \"ranks_differ\": %d}", r->wrong, r->differ);
        else fprintf(f, ", \"wrong\": null, \"ranks_differ\": null}");
        fprintf(f, "%s\n", i + 1 < b->nrows ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
}

/* The buffer kind the table is made from: window (the trainer's) if measured. */
static int table_buffer(const struct options *o)
{
    for (int buf = 0; buf < NBUF; buf++)
        if (o->buffer[buf]) return buf;
    return BUF_WINDOW;
}

static int table_candidate(const struct bench *b, int ai)
{
    return b->usable[ai] && b->o.algo[ai] != &dt_allreduce_auto;
}

/* auto.c's format: "NODES RANKS_PER_NODE MIN_BYTES ALGORITHM", a rule where
 * the winner (lowest median time) changes; the last matching rule wins. */
static void write_table(const struct bench *b, FILE *f)
{
    const struct dt_topo *t = &b->coll.topo;
    int buf = table_buffer(&b->o), rpn = t->uniform ? t->local_size : 0;
    const char *prev = NULL;
    fprintf(f, "# all-reduce table for dtrain's auto algorithm (read by --allreduce-table or\n"
               "# DTRAIN_ALLREDUCE_TABLE). Format: NODES RANKS_PER_NODE MIN_BYTES ALGORITHM;\n"
               "# for B bytes the last rule whose layout matches and MIN_BYTES <= B wins.\n");
    fprintf(f, "# measured by " PROG " %s on %.100s, %s\n", PACKAGE_VERSION, b->host, b->date);
    fprintf(f, "# MPI: %.180s\n", b->mpilib);
    fprintf(f, "# layout: %s; %d ranks; buffer %s; compression %s%s; chunk %zu B\n", b->layout, b->size,
            buf_name[buf], compress_name[b->o.compress], b->o.cross_only ? " (cross-node only)" : "",
            b->coll.cfg.chunk_bytes);
    if (!t->uniform)
        fprintf(f, "# uneven layout: RANKS_PER_NODE 0 (any), as auto matches uneven layouts by NODES only\n");
    fprintf(f, "# winner at each size: lowest median over ranks of the per-rank average time (us)\n");
    for (int pass = 0; pass < 2; pass++) { /* the evidence as comments, then the rules */
        for (int i = 0; i < b->nrows; i++) {
            const struct row *r = &b->rows[i], *best = NULL;
            if (r->buf != buf || (i > 0 && b->rows[i - 1].buf == buf && b->rows[i - 1].count == r->count))
                continue; /* once per size */
            if (pass == 0) fprintf(f, "#%11zu B:", r->count * sizeof(float));
            for (int ai = 0; ai < b->o.nalgo; ai++) {
                const struct row *c = table_candidate(b, ai) ? find_row(b, buf, r->count, b->o.algo[ai]) : NULL;
                if (!c) continue;
                if (pass == 0) fprintf(f, "  %s %.2f", b->o.algo[ai]->name, c->tmed * 1e6);
                if (!best || c->tmed < best->tmed) best = c;
            }
            const char *name = best ? b->o.algo[best->algo]->name : NULL;
            if (pass == 0) {
                fprintf(f, "  -> %s\n", name ? name : "?");
            } else if (name && (!prev || strcmp(prev, name))) {
                fprintf(f, "%d %d %zu %s\n", t->nnodes, rpn, prev ? r->count * sizeof(float) : (size_t)0, name);
                prev = name;
            }
        }
    }
}

/* Across real nodes auto times its candidates at start-up (auto.c), as it
 * does in dtrain at the gradient buckets' sizes: here at the sweep's sizes,
 * on this buffer kind, so the auto rows show what dtrain would run. */
static void tune_auto(struct bench *b, int buf)
{
    int has_auto = 0, n = 0;
    for (int ai = 0; ai < b->o.nalgo; ai++) has_auto |= b->o.algo[ai] == &dt_allreduce_auto && b->usable[ai];
    if (!has_auto) return;
    size_t counts[64];
    for (size_t bytes = b->o.minbytes; n < 64; bytes *= (size_t)b->o.step) {
        counts[n++] = bytes / sizeof(float);
        if (bytes > b->o.maxbytes / (size_t)b->o.step) break;
    }
    const float *s;
    float *r;
    buffers_for(b, buf, &s, &r);
    if (dt_auto_tune(&b->coll, s, r, counts, n) && b->rank == 0) {
        char how[1024];
        dt_auto_describe(&b->coll, how, sizeof how);
        printf("# auto across nodes, %s buffers: %s\n", buf_name[buf], how);
    }
}

/* ---- main ------------------------------------------------------------------------------ */

static void describe(struct bench *b)
{
    time_t now = time(NULL);
    int len = 0;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    strftime(b->date, sizeof b->date, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    MPI_Get_processor_name(b->host, &len);
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = '\0'; /* the first line names the library and version */
    for (char *p = lib; *p; p++)
        if (*p == '\t' || *p == '\r') *p = ' ';
    snprintf(b->mpilib, sizeof b->mpilib, "%.250s", lib);
    dt_topo_describe(&b->coll.topo, b->layout, (int)sizeof b->layout);
}

static void print_metadata(const struct bench *b)
{
    const struct options *o = &b->o;
    char lo[32], hi[32], chunk[32];
    fmt_bytes(lo, sizeof lo, o->minbytes);
    fmt_bytes(hi, sizeof hi, o->maxbytes);
    fmt_bytes(chunk, sizeof chunk, b->coll.cfg.chunk_bytes);
    printf("# " PROG " %s: all-reduce (sum, float32), %d rank%s\n", PACKAGE_VERSION, b->size,
           b->size == 1 ? "" : "s");
    printf("# date: %s\n# host: %s (rank 0)\n# MPI: %s\n", b->date, b->host, b->mpilib);
    printf("# layout: %s\n", b->layout);
    printf("# algorithms:");
    for (int ai = 0; ai < o->nalgo; ai++) printf(" %s", o->algo[ai]->name);
    const char *env = getenv("DTRAIN_ALLREDUCE_TABLE");
    if (o->auto_table) printf("; auto's table: %s\n", o->auto_table);
    else if (env && *env) printf("; auto's table: %s (DTRAIN_ALLREDUCE_TABLE)\n", env);
    else printf("; auto's table: built in\n");
    printf("# buffers:");
    for (int buf = 0; buf < NBUF; buf++)
        if (o->buffer[buf]) printf(" %s", buf_name[buf]);
    printf("\n# compression: %s%s; ring chunk: %s, %d in flight\n", compress_name[o->compress],
           o->cross_only ? " (cross-node hops only)" : "", chunk, b->coll.cfg.ring_depth);
    printf("# sizes: %s to %s bytes, x%ld\n", lo, hi, o->step);
    if (o->rounds > 1)
        printf("# rounds: %ld per size, algorithms interleaved (order turned each round); times are medians "
               "of the rounds\n", o->rounds);
    if (o->iters) printf("# iters: %ld", o->iters);
    else printf("# iters: adaptive (about %.1f s per size and algorithm, %d to %d)", TARGET_SECONDS, MIN_ITERS, MAX_ITERS);
    if (o->warmup >= 0) printf("; warmup: %ld\n", o->warmup);
    else printf("; warmup: max(2, iters/10)\n");
    if (o->check)
        printf("# check: every size, one fresh call: elements must equal the exact sum (inputs are\n"
               "#   integers in [-%d, %d] on %d rank%s, so every partial sum is exact in %s), and every\n"
               "#   rank's result must hash to rank 0's bits\n",
               b->pat.m, b->pat.m, b->pat.k, b->pat.k == 1 ? "" : "s",
               o->compress == DT_COMPRESS_NONE ? "float32" : compress_name[o->compress]);
    else printf("# check: off (--no-check)\n");
    printf("# memory bandwidth, one core (rank 0 alone, %zu MiB, best of %d): copy %.2f GB/s, add %.2f GB/s\n",
           MEMBW_BYTES >> 20, MEMBW_REPS, b->bw.copy, b->bw.add);
    printf("#   copy: bytes copied per second (memcpy); add: bytes of y per second (y += x)\n");
    if (b->est_algbw > 0)
        printf("# hier if memory-bandwidth bound, %d ranks per node, window buffer: algbw %.2f GB/s, "
               "busbw %.2f GB/s%s\n#   model: per rank, reduce-scatter = (L+1)/L x S bytes at 3 x add, "
               "all-gather = (L-1)/L x S at copy; cores in parallel\n",
               b->coll.topo.local_size, b->est_algbw, b->est_algbw * busbw_factor(b->size),
               b->coll.topo.nnodes > 1 ? " (intra-node steps only)" : "");
    else
        printf("# hier if memory-bandwidth bound: n/a (%s)\n",
               b->coll.topo.uniform ? "one rank per node: nothing moves through shared memory" : "uneven layout");
    for (int ai = 0; ai < o->nalgo; ai++)
        if (!b->usable[ai]) {
            char why[256];
            o->algo[ai]->usable(&b->coll, why, sizeof why);
            printf("# %s: skipped: %s\n", o->algo[ai]->name, why);
        }
}

static int finish(struct bench *b, int code)
{
    if (b->coll_ok) dt_coll_free(&b->coll);
    free(b->send);
    free(b->recv);
    free(b->rows);
    if (b->comm != MPI_COMM_NULL) MPI_Comm_free(&b->comm);
    MPI_Finalize();
    return code;
}

int main(int argc, char **argv)
{
    static struct bench bench;
    struct bench *b = &bench;
    struct options *o = &b->o;
    dt_status st = {0};

    MPI_Init(&argc, &argv);
    b->comm = MPI_COMM_NULL;
    DT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &b->comm));
    MPI_Comm_rank(b->comm, &b->rank);
    MPI_Comm_size(b->comm, &b->size);
    dt_log_rank = b->rank;

    if (parse_options(o, argc, argv, &st) == DT_OK && !o->help && !o->version && b->rank == 0 &&
        probe_output("--csv", o->csv, &st) == DT_OK && probe_output("--json", o->json, &st) == DT_OK)
        probe_output("--table", o->table, &st);
    if (dt_status_agree(&st, b->comm) != DT_OK) {
        if (b->rank == 0) fprintf(stderr, PROG ": error: %s\n", st.msg);
        return finish(b, st.code);
    }
    if (o->help || o->version) {
        if (b->rank == 0 && o->help) usage(stdout);
        if (b->rank == 0 && o->version) printf(PROG " %s\n", PACKAGE_VERSION);
        return finish(b, DT_OK);
    }

    /* auto is always usable; each algorithm is asked itself below. */
    struct dt_coll_config cfg = {.algorithm = "auto", .ranks_per_node = o->ranks_per_node,
                                 .compress = o->compress, .compress_cross_only = o->cross_only,
                                 .chunk_bytes = o->chunk, .ring_depth = o->depth, .table = o->auto_table};
    if (dt_coll_init(&b->coll, b->comm, &cfg, &st) != DT_OK) {
        if (b->rank == 0) fprintf(stderr, PROG ": error: %s\n", st.msg);
        return finish(b, st.code);
    }
    b->coll_ok = 1;
    int nusable = 0, ncandidates = 0;
    for (int ai = 0; ai < o->nalgo; ai++) {
        char why[256];
        b->usable[ai] = o->algo[ai]->usable(&b->coll, why, sizeof why);
        nusable += b->usable[ai];
        ncandidates += table_candidate(b, ai);
    }
    if (nusable == 0)
        dt_fail(&st, DT_EUSAGE, "--algorithms: none of those listed can run here (%s)",
                o->compress ? "mpi cannot carry 16-bit gradients" : "see their reasons with -a mpi,ring");
    else if (o->table && ncandidates == 0)
        dt_fail(&st, DT_EUSAGE, "--table: needs at least one of mpi, ring or hier in --algorithms that can run here");
    if (dt_status_agree(&st, b->comm) != DT_OK) {
        if (b->rank == 0) fprintf(stderr, PROG ": error: %s\n", st.msg);
        return finish(b, st.code);
    }

    make_pattern(&b->pat, b->size, o->compress);
    describe(b);
    measure_membw(b);
    if (b->coll.topo.uniform) b->est_algbw = hier_estimate(&b->bw, b->coll.topo.local_size);
    if (b->rank == 0) {
        print_metadata(b);
        fflush(stdout);
    }

    b->maxcount = o->maxbytes / sizeof(float);
    if (o->buffer[BUF_WINDOW]) b->win = dt_coll_alloc(&b->coll, b->maxcount);
    if (o->buffer[BUF_OOP]) b->send = dt_xmalloc(sizeof(float) * b->maxcount);
    if (o->buffer[BUF_OOP] || o->buffer[BUF_INPLACE]) b->recv = dt_xmalloc(sizeof(float) * b->maxcount);
    double *times = dt_xcalloc((size_t)b->size, sizeof *times);
    long long wrong = 0;
    int differ = 0;

    for (int buf = 0; buf < NBUF; buf++) {
        if (!o->buffer[buf]) continue;
        if (b->rank == 0) print_header(buf);
        tune_auto(b, buf);
        for (size_t bytes = o->minbytes;; bytes *= (size_t)o->step) {
            size_t count = bytes / sizeof(float);
            int first = b->nrows;
            measure_size(b, buf, count, times);
            for (int i = first; i < b->nrows; i++) {
                if (b->rows[i].wrong > 0) wrong += b->rows[i].wrong;
                if (b->rows[i].differ > 0) differ += b->rows[i].differ;
            }
            if (b->rank == 0) { /* a size's rows together, so vs_mpi is known whatever the order */
                for (int i = first; i < b->nrows; i++) print_row(b, &b->rows[i]);
                fflush(stdout);
            }
            if (bytes > o->maxbytes / (size_t)o->step) break;
        }
    }
    free(times);

    int failed = o->check && (wrong > 0 || differ > 0);
    if (b->rank == 0) {
        print_summary(b);
        if (!o->check) printf("# Wrong elements: not checked (--no-check)\n");
        else printf("# Wrong elements: %lld%s%s\n", wrong, differ ? ", and results whose bits differ between ranks" : "",
                    failed ? " -- FAILED" : " OK");
        if (differ) printf("#   ('!' after #wrong: some rank's result bits differ from rank 0's)\n");
        FILE *f;
        if (o->csv && st.code == DT_OK) {
            if (!(f = open_output(o->csv))) dt_fail(&st, DT_ERUNTIME, "--csv: cannot create %s.tmp: %s", o->csv, strerror(errno));
            else if (write_csv(b, f), close_output(f, "--csv", o->csv, &st) == DT_OK) printf("# CSV written to %s\n", o->csv);
        }
        if (o->json && st.code == DT_OK) {
            if (!(f = open_output(o->json))) dt_fail(&st, DT_ERUNTIME, "--json: cannot create %s.tmp: %s", o->json, strerror(errno));
            else if (write_json(b, f, wrong), close_output(f, "--json", o->json, &st) == DT_OK) printf("# JSON written to %s\n", o->json);
        }
        if (o->table && failed) {
            printf("# auto table not written: the results above are wrong\n");
        } else if (o->table && st.code == DT_OK) {
            if (!(f = open_output(o->table))) dt_fail(&st, DT_ERUNTIME, "--table: cannot create %s.tmp: %s", o->table, strerror(errno));
            else if (write_table(b, f), close_output(f, "--table", o->table, &st) == DT_OK)
                printf("# auto table (%s buffers) written to %s; use it with dtrain --allreduce-table %s\n",
                       buf_name[table_buffer(o)], o->table, o->table);
        }
        fflush(stdout);
    }
    if (dt_status_agree(&st, b->comm) != DT_OK) {
        if (b->rank == 0) fprintf(stderr, PROG ": error: %s\n", st.msg);
        return finish(b, st.code);
    }
    if (failed && b->rank == 0) {
        if (wrong) fprintf(stderr, PROG ": error: %lld wrong elements (see #wrong)\n", wrong);
        if (differ) fprintf(stderr, PROG ": error: results differ bitwise between ranks ('!' after #wrong)\n");
    }
    return finish(b, failed ? DT_ERUNTIME : DT_OK);
}

/* bench_checkpoint.c: dt_ckpt_write against plain POSIX writes of the same bytes.
 *
 *   mpirun -np P bench/bench_checkpoint [--dir DIR] [--params N] [--repeats R]
 *                                       [--strategy-like sharded|mirrored]
 *
 * A synthetic training state of N float32 parameters in 10 dense layers,
 * replicated (rank 0 writes them), and two Adam slots: sharded, each rank
 * writes its 1/P slice; mirrored, rank 0 writes them whole. Each repeat
 * writes one checkpoint and one baseline, alternating which goes first: in
 * the baseline each rank write()s the bytes it contributed to the checkpoint
 * (rank 0: parameters and its slot parts; the others: their slot parts) to
 * its own file in the same directory and fsync()s it. Both are timed from a
 * barrier to the last rank's finish. It reports each repeat's seconds and
 * MB/s (payload bytes / seconds), the checkpoint file's size, min/median/max
 * and the median ratio; then reads the last checkpoint back (timed) and checks
 * every value, exiting 1 on a mismatch. A warm-up pair is not counted.
 * Rank 0 prints; metadata lines start with '#'. Files are removed as it
 * goes (untimed), so each write is of a new file, as in training with
 * keep > 0. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "runtime/checks.h"

#define NLAYERS 10

struct opts {
    const char *dir;
    long long params;
    int repeats, mirrored;
};

static int rank, nranks;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_checkpoint [--dir DIR] [--params N] [--repeats R] [--strategy-like sharded|mirrored]\n"
               "  --dir DIR            where to write (default /tmp/ckbench)\n"
               "  --params N           float32 parameters (default 10000000)\n"
               "  --repeats R          timed checkpoint/baseline pairs (default 5)\n"
               "  --strategy-like S    sharded: each rank writes 1/P of the Adam slots (default);\n"
               "                       mirrored: rank 0 writes them whole\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"dir", required_argument, 0, 'd'},     {"params", required_argument, 0, 'n'},
        {"repeats", required_argument, 0, 'r'}, {"strategy-like", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    int c;
    char *end;
    *o = (struct opts){"/tmp/ckbench", 10000000, 5, 0};
    while ((c = getopt_long(argc, argv, "d:n:r:s:h", lo, NULL)) != -1) {
        switch (c) {
        case 'd': o->dir = optarg; break;
        case 'n':
            o->params = strtoll(optarg, &end, 10);
            if (*end || o->params < 100) return -1;
            break;
        case 'r':
            o->repeats = (int)strtol(optarg, &end, 10);
            if (*end || o->repeats < 1) return -1;
            break;
        case 's':
            if (!strcmp(optarg, "mirrored")) o->mirrored = 1;
            else if (!strcmp(optarg, "sharded")) o->mirrored = 0;
            else return -1;
            break;
        case 'h': usage(stdout); return 1;
        default: return -1;
        }
    }
    return optind == argc ? 0 : -1;
}

/* 10 dense layers: 9 of q parameters ([q/u - 1][u] kernel, u bias), the
 * last takes the rest as [rest - 1][1] + 1. */
static void make_layers(struct dt_ckpt_layer *l, char names[NLAYERS][16], size_t n)
{
    int64_t u = n >= 100000 ? 1000 : 10;
    int64_t q = (int64_t)n / NLAYERS / u * u;
    size_t off = 0;
    for (int i = 0; i < NLAYERS; i++) {
        snprintf(names[i], 16, "dense_%d", i + 1);
        int64_t size = i < NLAYERS - 1 ? q : (int64_t)n - (NLAYERS - 1) * q;
        int64_t units = i < NLAYERS - 1 ? u : 1;
        l[i] = (struct dt_ckpt_layer){names[i], off, 2, {size / units - 1, units, 0, 0}, units};
        off += (size_t)size;
    }
}

static float pval(size_t i) { return (float)(i % 1000) * 0.001f - 0.5f; }
static float mval(size_t i) { return (float)(i % 777) * 1e-4f; }
static float vval(size_t i) { return (float)(i % 555) * 1e-6f; }

static double max_over_ranks(double t)
{
    double m;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* This rank's share of the checkpoint's bytes, with write() and fsync(). */
static double baseline(const char *path, const struct dt_ckpt *c)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) DT_DIE("%s: %s", path, strerror(errno));
    int bad = rank == 0 && write_all(fd, c->params, c->nparams * sizeof(float)) != 0;
    for (int s = 0; s < c->nslots && c->writer; s++) bad |= write_all(fd, c->slots[s], c->len * sizeof(float)) != 0;
    bad |= fsync(fd) != 0;
    bad |= close(fd) != 0;
    if (bad) DT_DIE("%s: %s", path, strerror(errno));
    return max_over_ranks(MPI_Wtime() - t0);
}

static double checkpoint(const char *dir, const struct dt_ckpt *c, char *path, size_t n)
{
    dt_status st;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (dt_ckpt_write(MPI_COMM_WORLD, dir, 0, c, path, n, &st) != DT_OK) {
        if (rank == 0) fprintf(stderr, "bench_checkpoint: %s\n", st.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return max_over_ranks(MPI_Wtime() - t0);
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, dcmp);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static double minmax(const double *v, int n, int want_max)
{
    double m = v[0];
    for (int i = 1; i < n; i++) m = want_max ? (v[i] > m ? v[i] : m) : (v[i] < m ? v[i] : m);
    return m;
}

int main(int argc, char **argv)
{
    struct opts o;
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int pr = parse(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0 && rank == 0) usage(stderr);
        MPI_Finalize();
        return pr < 0 ? 2 : 0;
    }
    size_t n = (size_t)o.params;
    struct dt_ckpt_layer layers[NLAYERS];
    char names[NLAYERS][16];
    make_layers(layers, names, n);

    struct dt_ckpt c;
    memset(&c, 0, sizeof c);
    c.strategy = o.mirrored ? "mirrored" : "sharded";
    c.model = "synthetic";
    c.command_line = "bench_checkpoint";
    c.nparams = n;
    c.nlayers = NLAYERS;
    c.layers = layers;
    c.params = dt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) c.params[i] = pval(i);
    c.optimizer = "adam";
    c.lr = 1e-3f;
    c.beta1 = 0.9f;
    c.beta2 = 0.999f;
    c.eps = 1e-7f;
    c.nslots = 2;
    c.slot_names[0] = "m";
    c.slot_names[1] = "v";
    if (o.mirrored) {
        c.off = 0;
        c.len = rank == 0 ? n : 0;
        c.writer = rank == 0;
    } else {
        c.off = n * (size_t)rank / (size_t)nranks;
        c.len = n * (size_t)(rank + 1) / (size_t)nranks - c.off;
        c.writer = 1;
    }
    c.slots[0] = dt_xmalloc((c.len + 1) * sizeof(float));
    c.slots[1] = dt_xmalloc((c.len + 1) * sizeof(float));
    for (size_t k = 0; k < c.len; k++) {
        c.slots[0][k] = mval(c.off + k);
        c.slots[1][k] = vval(c.off + k);
    }
    double hist[1][DT_CKPT_HIST] = {{0.5, 0.8, 0.6, 0.75, 12.0, 5000.0}};
    c.nhistory = 1;
    c.history = hist;
    for (int j = 0; j < 4; j++) c.rng[j] = (uint64_t)rank * 4 + (uint64_t)j;

    char base[PATH_MAX], ck[PATH_MAX] = "", prev[PATH_MAX] = "";
    snprintf(base, sizeof base, "%s/baseline.%d", o.dir, rank);
    if (rank == 0) {
        char cmd[PATH_MAX + 32];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", o.dir);
        if (system(cmd) != 0) DT_DIE("cannot create %s", o.dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    double payload = 4.0 * (double)n * 3.0; /* parameters + m + v, all ranks together */
    if (rank == 0) {
        time_t now = time(NULL);
        char host[64] = "?", stamp[32];
        gethostname(host, sizeof host - 1);
        strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&now));
        printf("# bench_checkpoint %s on %s, %d ranks, dir %s\n", stamp, host, nranks, o.dir);
        printf("# %zu parameters in %d dense layers; Adam m, v %s; payload %.1f MB (parameters + m + v)\n", n,
               NLAYERS, o.mirrored ? "written whole by rank 0 (mirrored)" : "written 1/P by each rank (sharded)",
               payload / 1e6);
    }

    /* Warm-up pair, then R timed pairs. */
    double *tc = calloc((size_t)o.repeats, sizeof *tc), *tb = calloc((size_t)o.repeats, sizeof *tb);
    long long fsize = 0;
    for (int r = -1; r < o.repeats; r++) {
        c.epoch = r + 2;
        double a, b;
        if (r % 2 == 0) {
            a = checkpoint(o.dir, &c, ck, sizeof ck);
            b = baseline(base, &c);
        } else {
            b = baseline(base, &c);
            a = checkpoint(o.dir, &c, ck, sizeof ck);
        }
        if (rank == 0) {
            struct stat sb;
            if (stat(ck, &sb) == 0) fsize = (long long)sb.st_size;
            if (prev[0]) unlink(prev); /* untimed: every write is of a new file */
            snprintf(prev, sizeof prev, "%s", ck);
        }
        unlink(base);
        if (r < 0) continue;
        tc[r] = a;
        tb[r] = b;
        if (rank == 0) {
            if (r == 0)
                printf("#%6s %12s %10s %12s %10s %8s %12s\n", "repeat", "ckpt_s", "ckpt_MB/s", "posix_s", "posix_MB/s",
                       "ratio", "file_bytes");
            printf("%7d %12.4f %10.1f %12.4f %10.1f %8.2f %12lld\n", r + 1, a, payload / a / 1e6, b,
                   payload / b / 1e6, a / b, fsize);
        }
    }
    if (rank == 0) {
        double *ratio = calloc((size_t)o.repeats, sizeof *ratio);
        for (int r = 0; r < o.repeats; r++) ratio[r] = tc[r] / tb[r];
        printf("# checkpoint s: min %.4f median %.4f max %.4f (%.1f MB/s at the median)\n", minmax(tc, o.repeats, 0),
               median(tc, o.repeats), minmax(tc, o.repeats, 1), payload / median(tc, o.repeats) / 1e6);
        printf("# posix      s: min %.4f median %.4f max %.4f (%.1f MB/s at the median)\n", minmax(tb, o.repeats, 0),
               median(tb, o.repeats), minmax(tb, o.repeats, 1), payload / median(tb, o.repeats) / 1e6);
        printf("# median ratio checkpoint/posix: %.2f; file %lld bytes (%.3f x payload)\n", median(ratio, o.repeats),
               fsize, (double)fsize / payload);
        free(ratio);
    }

    /* Read the last checkpoint back, the same split, and check it. */
    struct dt_ckpt rd;
    dt_status st;
    memset(&rd, 0, sizeof rd);
    rd.nparams = n;
    rd.nlayers = NLAYERS;
    rd.layers = layers;
    rd.params = dt_xcalloc(n, sizeof(float));
    rd.nslots = 2;
    rd.slot_names[0] = "m";
    rd.slot_names[1] = "v";
    rd.off = c.off;
    rd.len = c.len;
    rd.slots[0] = dt_xcalloc(c.len + 1, sizeof(float));
    rd.slots[1] = dt_xcalloc(c.len + 1, sizeof(float));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int rc = dt_ckpt_read(MPI_COMM_WORLD, ck, &rd, &st);
    double tr = max_over_ranks(MPI_Wtime() - t0);
    long long wrong = 0, all_wrong = 0;
    if (rc == DT_OK) {
        for (size_t i = 0; i < n; i++) wrong += rd.params[i] != c.params[i];
        for (size_t k = 0; k < c.len; k++) wrong += (rd.slots[0][k] != c.slots[0][k]) + (rd.slots[1][k] != c.slots[1][k]);
        wrong += rd.nhistory != 1 || rd.history[0][5] != 5000.0;
    } else {
        wrong = 1;
        if (rank == 0) fprintf(stderr, "bench_checkpoint: %s\n", st.msg);
    }
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("# read back (page cache warm): %.4f s, %.1f MB/s; %lld wrong values\n", tr, payload / tr / 1e6,
               all_wrong);
        char lp[PATH_MAX + 8];
        unlink(ck);
        snprintf(lp, sizeof lp, "%s/latest", o.dir);
        unlink(lp);
    }
    dt_ckpt_release(&rd);
    free(rd.params);
    free(rd.slots[0]);
    free(rd.slots[1]);
    free(c.params);
    free(c.slots[0]);
    free(c.slots[1]);
    free(tc);
    free(tb);
    MPI_Finalize();
    return all_wrong ? 1 : 0;
}

/* preflight.c: dtrain --preflight (see preflight.h).
 *
 * Every check runs on every rank and reports (code, detail) for this rank;
 * row() agrees on the worst code and shows the detail of the lowest rank
 * that has it, so the table names where a problem is. A check never lets MPI
 * abort: windows are made with errors returned. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "checkpoint/checkpoint.h"
#include "collectives/coll.h"
#include "collectives/topology.h"
#include "runtime/consistency.h"
#include "runtime/device.h"
#include "runtime/preflight.h"
#include "runtime/rma.h"

enum { PF_OK = 0, PF_SKIP = 1, PF_WARN = 2, PF_FAIL = 3 };
static const char *const result_name[] = {"ok", "skip", "warn", "FAIL"};

#define HOSTLEN 64

struct pf {
    const struct dt_config *cfg;
    MPI_Comm comm;
    int rank, size;
    struct dt_topo topo;
    int topo_ok;
    char *hosts;              /* [size][HOSTLEN] every rank's host name */
    FILE *out;
    int failed;               /* a FAIL row so far */
    char first[1000];         /* the first FAIL: "check: detail" */
};

static const char *host_of(const struct pf *p, int rank) { return p->hosts + (size_t)rank * HOSTLEN; }

/* Collective: one row of the table from every rank's (code, detail). */
__attribute__((format(printf, 4, 5))) static void row(struct pf *p, const char *check, int code, const char *fmt, ...)
{
    char detail[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    int worst, who, mine;
    DT_MPI_CHECK(MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, p->comm));
    mine = code == worst ? p->rank : INT_MAX;
    DT_MPI_CHECK(MPI_Allreduce(&mine, &who, 1, MPI_INT, MPI_MIN, p->comm));
    DT_MPI_CHECK(MPI_Bcast(detail, (int)sizeof detail, MPI_CHAR, who, p->comm));
    if (p->rank == 0) {
        fprintf(p->out, "%-34s %-5s %s\n", check, result_name[worst], detail);
        fflush(p->out);
    }
    if (worst == PF_FAIL && !p->failed) {
        p->failed = 1;
        snprintf(p->first, sizeof p->first, "%.60s: %.830s", check, detail);
    }
}

/* ---- the checks ------------------------------------------------------------ */

static void check_same_software(struct pf *p)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n,")] = '\0'; /* "Open MPI v4.1.4", "MPICH Version: 4.0.2" */
    static const char *const names[] = {"dtrain version", "MPI library"};
    const char *text[] = {PACKAGE_VERSION, lib};
    long vals[] = {dt_consistency_hash(PACKAGE_VERSION), dt_consistency_hash(lib)};
    dt_status st = {0};
    if (dt_consistency_check_text(p->comm, "in the preflight", vals, names, text, 2, &st) != DT_OK)
        row(p, "same dtrain and MPI everywhere", PF_FAIL, "%s", st.msg);
    else
        row(p, "same dtrain and MPI everywhere", PF_OK, "dtrain %s, %.80s, on all %d ranks", PACKAGE_VERSION, lib,
            p->size);
}

static void check_thread_level(struct pf *p)
{
    int level = dt_mpi_thread_level();
    if (level == MPI_THREAD_MULTIPLE)
        row(p, "MPI thread level", PF_OK, "MPI_THREAD_MULTIPLE (training needs SERIALIZED; MULTIPLE also lets the "
            "stall watchdog report over two-sided messages)");
    else if (level == MPI_THREAD_SERIALIZED)
        row(p, "MPI thread level", PF_WARN, "MPI_THREAD_SERIALIZED: enough to train, but where one-sided windows "
            "are missing the stall watchdog cannot name late ranks (it needs MPI_THREAD_MULTIPLE)");
    else
        row(p, "MPI thread level", PF_FAIL, "%s: dtrain needs at least MPI_THREAD_SERIALIZED (its gradient thread "
            "calls MPI); use an MPI built with thread support", dt_mpi_thread_level_name(level));
}

static void check_shared_windows(struct pf *p)
{
    dt_status st = {0};
    char layout[160];
    if (dt_topo_create(&p->topo, p->comm, p->cfg->ranks_per_node, &st) != DT_OK) {
        row(p, "shared memory inside each node", PF_FAIL, "%s", st.msg);
        return;
    }
    p->topo_ok = 1;
    dt_topo_describe(&p->topo, layout, sizeof layout);
    long *base = NULL;
    MPI_Win win;
    int rc = dt_rma_allocate_shared(sizeof(long), sizeof(long), MPI_INFO_NULL, p->topo.node, &base, &win);
    int code = PF_OK;
    char detail[512] = "";
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, msg, &n);
        code = PF_FAIL;
        snprintf(detail, sizeof detail, "rank %d on %.64s: MPI_Win_allocate_shared failed: %.300s", p->rank,
                 host_of(p, p->rank), msg);
    }
    int all_made;
    DT_MPI_CHECK(MPI_Allreduce(&rc, &all_made, 1, MPI_INT, MPI_MAX, p->topo.node));
    if (all_made == MPI_SUCCESS) { /* each rank writes its rank in the job, every rank reads the node's */
        long *want = dt_xcalloc((size_t)p->topo.local_size, sizeof(long)), mine = 1000 + p->rank;
        DT_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_LONG, want, 1, MPI_LONG, p->topo.node));
        DT_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
        *base = mine;
        MPI_Win_sync(win);
        DT_MPI_CHECK(MPI_Barrier(p->topo.node));
        MPI_Win_sync(win);
        for (int j = 0; j < p->topo.local_size && code == PF_OK; j++) {
            MPI_Aint size;
            int disp;
            long *peer;
            DT_MPI_CHECK(MPI_Win_shared_query(win, j, &size, &disp, &peer));
            if (*peer != want[j]) {
                code = PF_FAIL;
                snprintf(detail, sizeof detail, "rank %d on %s reads %ld from local rank %d's shared memory, "
                         "expected %ld", p->rank, host_of(p, p->rank), *peer, j, want[j]);
            }
        }
        free(want);
        DT_MPI_CHECK(MPI_Barrier(p->topo.node));
        DT_MPI_CHECK(MPI_Win_unlock_all(win));
        DT_MPI_CHECK(MPI_Win_free(&win));
    }
    if (code == PF_OK)
        snprintf(detail, sizeof detail, "%s: MPI_Win_allocate_shared, stores seen by every rank of each node", layout);
    row(p, "shared memory inside each node", code, "%s", detail);
}

static void check_one_sided(struct pf *p)
{
    char why[256] = "";
    long *table = NULL;
    MPI_Win win;
    int nnodes = p->topo_ok ? p->topo.nnodes : 0;
    MPI_Aint bytes = p->rank == 0 ? (MPI_Aint)(sizeof(long) * (size_t)p->size) : 0;
    if (dt_rma_allocate(bytes, sizeof(long), p->comm, &table, &win, why, sizeof why) != 0) {
        row(p, "one-sided windows across the job", PF_WARN, "%s: the stall watchdog %s, and the parameter server "
            "uses its two-sided transport (--ps-transport two-sided); --ps-transport one-sided would fail",
            why, dt_mpi_thread_level() == MPI_THREAD_MULTIPLE ? "reports with two-sided messages"
                                                             : "cannot name late ranks (no MPI_THREAD_MULTIPLE)");
        return;
    }
    if (p->rank == 0) memset(table, 0, (size_t)bytes);
    DT_MPI_CHECK(MPI_Barrier(p->comm));
    DT_MPI_CHECK(MPI_Win_lock_all(0, win));
    const long v = 7000 + p->rank;
    DT_MPI_CHECK(MPI_Put(&v, 1, MPI_LONG, 0, p->rank, 1, MPI_LONG, win));
    DT_MPI_CHECK(MPI_Win_flush(0, win));
    DT_MPI_CHECK(MPI_Win_unlock_all(win));
    DT_MPI_CHECK(MPI_Barrier(p->comm));
    int bad = -1;
    if (p->rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        for (int r = 0; r < p->size && bad < 0; r++)
            if (table[r] != 7000 + r) bad = r;
        MPI_Win_unlock(0, win);
    }
    DT_MPI_CHECK(MPI_Bcast(&bad, 1, MPI_INT, 0, p->comm));
    DT_MPI_CHECK(MPI_Win_free(&win));
    if (bad >= 0)
        row(p, "one-sided windows across the job", PF_FAIL, "rank %d's MPI_Put to rank 0 did not arrive (rank %d on "
            "%s): one-sided communication is broken here; try --ps-transport two-sided, and report it to the site",
            bad, bad, host_of(p, bad));
    else
        row(p, "one-sided windows across the job", PF_OK, "MPI_Win_allocate and MPI_Put from all %d ranks%s", p->size,
            nnodes > 1 ? " across nodes" : "");
}

/* Where the HDF5 superblock may start: 0, 512, 1024, 2048, ... */
static int looks_hdf5(int fd, off_t size)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    for (off_t at = 0; at + 8 <= size && at <= ((off_t)1 << 30); at = at ? 2 * at : 512) {
        unsigned char b[8];
        if (pread(fd, b, 8, at) != 8) return 0;
        if (!memcmp(b, sig, 8)) return 1;
    }
    return 0;
}

static void check_inputs(struct pf *p)
{
    const struct dt_config *cfg = p->cfg;
    if (cfg->synthetic) {
        row(p, "input files on every node", PF_SKIP, "--synthetic %s: generated on each rank", cfg->synthetic);
        return;
    }
    if (cfg->ninputs == 0) {
        row(p, "input files on every node", PF_SKIP, "no input files given");
        return;
    }
    int code = PF_OK;
    char detail[900] = "";
    double total = 0;
    for (int i = 0; i < cfg->ninputs; i++) {
        const char *path = cfg->inputs[i];
        struct stat sb;
        int mine = PF_OK;
        char why[700] = "";
        int fd = -1;
        if (stat(path, &sb) != 0)
            mine = PF_FAIL, snprintf(why, sizeof why, "%s: %s", path, strerror(errno));
        else if (!S_ISREG(sb.st_mode))
            mine = PF_FAIL, snprintf(why, sizeof why, "%s: not a regular file", path);
        else if ((fd = open(path, O_RDONLY)) < 0)
            mine = PF_FAIL, snprintf(why, sizeof why, "%s: cannot open for reading: %s", path, strerror(errno));
        else if (!looks_hdf5(fd, sb.st_size))
            mine = PF_FAIL, snprintf(why, sizeof why, "%s: not an HDF5 file (no HDF5 signature)", path);
        if (fd >= 0) close(fd);
        /* The same file everywhere: its size on every rank (a stale copy per node shows here). */
        long long size = mine == PF_OK ? (long long)sb.st_size : -1, lo, hi;
        DT_MPI_CHECK(MPI_Allreduce(&size, &hi, 1, MPI_LONG_LONG, MPI_MAX, p->comm));
        DT_MPI_CHECK(MPI_Allreduce(&size, &lo, 1, MPI_LONG_LONG, MPI_MIN, p->comm));
        if (mine == PF_OK && lo >= 0 && lo != hi && size != hi)
            mine = PF_FAIL, snprintf(why, sizeof why, "%s: %lld bytes here, %lld on another rank: not the same file "
                                     "on every node", path, size, hi);
        if (mine > code) {
            code = mine;
            snprintf(detail, sizeof detail, "rank %d on %s: %s", p->rank, host_of(p, p->rank), why);
        }
        total += (double)(size > 0 ? size : 0);
    }
    if (code == PF_OK)
        snprintf(detail, sizeof detail, "%d file%s (%.1f MiB), HDF5, readable and the same size on all %d ranks",
                 cfg->ninputs, cfg->ninputs == 1 ? "" : "s", total / 1048576.0, p->size);
    row(p, "input files on every node", code, "%s", detail);
}

static void check_checkpoint_dir(struct pf *p)
{
    const char *dir = p->cfg->checkpoint_dir;
    if (!dir) {
        row(p, "checkpoint directory on every node", PF_SKIP, "no --checkpoint-dir");
        return;
    }
    if (!p->topo_ok) {
        row(p, "checkpoint directory on every node", PF_SKIP, "no layout (see above)");
        return;
    }
    char why[700] = "";
    int code = PF_OK, made = 0;
    char made_from[4096] = "";
    long token = 0;
    if (p->rank == 0) {
        struct stat sb;
        token = ((long)getpid() << 20) ^ (long)time(NULL);
        made = stat(dir, &sb) != 0; /* made here: removed again at the end (made_from: what existed) */
        snprintf(made_from, sizeof made_from, "%s", dir);
        while (made && made_from[0] && stat(made_from, &sb) != 0) {
            char *slash = strrchr(made_from, '/');
            if (!slash) made_from[0] = '\0';
            else *slash = '\0';
        }
        if (dt_mkdirs(dir) != 0) code = PF_FAIL, snprintf(why, sizeof why, "cannot create %s: %s", dir, strerror(errno));
    }
    DT_MPI_CHECK(MPI_Bcast(&token, 1, MPI_LONG, 0, p->comm));
    DT_MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, 0, p->comm));
    if (code != PF_OK) {
        row(p, "checkpoint directory on every node", code, "rank 0 on %s: %s", host_of(p, 0), why);
        return;
    }
    /* Each node's first rank writes a file; every rank must see every node's. */
    char path[4200];
    const int nn = p->topo.nnodes;
    if (p->topo.local_rank == 0) {
        snprintf(path, sizeof path, "%s/.dtrain-preflight-%lx-%d", dir, (unsigned long)token, p->topo.node_index);
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%ld %d\n", token, p->topo.node_index) < 0 || fclose(f) != 0) {
            code = PF_FAIL;
            snprintf(why, sizeof why, "cannot write %.600s: %s", path, strerror(errno));
        }
    }
    DT_MPI_CHECK(MPI_Barrier(p->comm));
    for (int k = 0; k < nn && code == PF_OK; k++) {
        snprintf(path, sizeof path, "%s/.dtrain-preflight-%lx-%d", dir, (unsigned long)token, k);
        FILE *f = fopen(path, "r");
        long t = 0;
        int node = -1;
        if (!f || fscanf(f, "%ld %d", &t, &node) != 2 || t != token || node != k) {
            code = PF_FAIL;
            snprintf(why, sizeof why, "%s does not see the file node %d wrote into %s: checkpoints need one file "
                     "system that every node shares", host_of(p, p->rank), k, dir);
        }
        if (f) fclose(f);
    }
    DT_MPI_CHECK(MPI_Barrier(p->comm));
    if (p->topo.local_rank == 0) {
        snprintf(path, sizeof path, "%s/.dtrain-preflight-%lx-%d", dir, (unsigned long)token, p->topo.node_index);
        unlink(path);
    }
    DT_MPI_CHECK(MPI_Barrier(p->comm));
    if (made) { /* the preflight leaves nothing behind: the directories it made, if still empty */
        char d[4096];
        snprintf(d, sizeof d, "%s", dir);
        while (strcmp(d, made_from) != 0 && d[0] && rmdir(d) == 0) {
            char *slash = strrchr(d, '/');
            if (!slash) break;
            *slash = '\0';
        }
    }
    if (code == PF_OK)
        row(p, "checkpoint directory on every node", PF_OK, "%s: written from each of %d node%s, seen by all %d ranks",
            dir, nn, nn == 1 ? "" : "s", p->size);
    else
        row(p, "checkpoint directory on every node", code, "rank %d: %s", p->rank, why);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Round trips of `bytes` between world ranks a and b (a times); median seconds. */
static double ping_pong(struct pf *p, int a, int b, char *buf, int bytes, int reps)
{
    double t[16], med = 0;
    for (int i = 0; i <= reps; i++) { /* i = 0 warms up */
        double t0 = MPI_Wtime();
        if (p->rank == a) {
            DT_MPI_CHECK(MPI_Send(buf, bytes, MPI_BYTE, b, 1, p->comm));
            DT_MPI_CHECK(MPI_Recv(buf, bytes, MPI_BYTE, b, 1, p->comm, MPI_STATUS_IGNORE));
        } else if (p->rank == b) {
            DT_MPI_CHECK(MPI_Recv(buf, bytes, MPI_BYTE, a, 1, p->comm, MPI_STATUS_IGNORE));
            DT_MPI_CHECK(MPI_Send(buf, bytes, MPI_BYTE, a, 1, p->comm));
        }
        if (i) t[i - 1] = MPI_Wtime() - t0;
    }
    if (p->rank == a) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        med = t[reps / 2];
    }
    return med;
}

static void fmt_bytes(char *buf, size_t len, double b)
{
    if (b >= 1048576.0) snprintf(buf, len, "%.0f MiB", b / 1048576.0);
    else snprintf(buf, len, "%.0f KiB", b / 1024.0);
}

static void check_network(struct pf *p)
{
    if (!p->topo_ok || p->topo.nnodes < 2) {
        row(p, "network between nodes", PF_SKIP, p->topo_ok ? "one node" : "no layout (see above)");
        return;
    }
    const int nn = p->topo.nnodes, big = 4 << 20;
    /* Node k's first rank, in world ranks. */
    int *leader = dt_xcalloc((size_t)nn, sizeof(int));
    for (int r = p->size - 1; r >= 0; r--) leader[p->topo.node_of[r]] = r;
    char *buf = dt_xcalloc((size_t)big, 1);
    double *gbps = dt_xcalloc((size_t)nn, sizeof(double)), *lat = dt_xcalloc((size_t)nn, sizeof(double));
    for (int k = 1; k < nn; k++) { /* node 0's leader against each other node's, one link at a time */
        DT_MPI_CHECK(MPI_Barrier(p->comm));
        double small = ping_pong(p, leader[0], leader[k], buf, 8, 9);
        double large = ping_pong(p, leader[0], leader[k], buf, big, 5);
        if (p->rank == leader[0]) {
            lat[k] = 0.5 * small * 1e6;
            gbps[k] = large > 0 ? 2.0 * big / large / 1e9 : 0.0;
        }
    }
    DT_MPI_CHECK(MPI_Bcast(gbps, nn, MPI_DOUBLE, leader[0], p->comm));
    DT_MPI_CHECK(MPI_Bcast(lat, nn, MPI_DOUBLE, leader[0], p->comm));
    int slow = 1;
    double sorted[1024], median;
    int ns = 0;
    for (int k = 1; k < nn; k++) {
        if (gbps[k] < gbps[slow]) slow = k;
        if (ns < 1024) sorted[ns++] = gbps[k];
    }
    qsort(sorted, (size_t)ns, sizeof *sorted, cmp_double);
    median = sorted[ns / 2];

    /* The all-reduce the run would use, at its bucket size, on the trainer's window buffers. */
    struct dt_coll coll;
    dt_status st = {0};
    struct dt_coll_config cc = {.algorithm = p->cfg->allreduce, .ranks_per_node = p->cfg->ranks_per_node,
                                .compress = p->cfg->compress, .compress_cross_only = p->cfg->compress_cross_only,
                                .table = p->cfg->allreduce_table};
    double bucket = p->cfg->bucket_mb > 0 ? p->cfg->bucket_mb * 1048576.0 : (double)big;
    size_t count = (size_t)(bucket / sizeof(float));
    char sz[32], lb[64] = "", what[300] = "";
    fmt_bytes(sz, sizeof sz, (double)(count * sizeof(float)));
    double busbw = 0;
    if (dt_coll_init(&coll, p->comm, &cc, &st) == DT_OK) {
        float *x = dt_coll_alloc(&coll, count);
        for (size_t i = 0; i < count; i++) x[i] = 1.0f;
        dt_auto_tune(&coll, x, x, &count, 1);
        double t[7];
        for (int i = 0; i <= 7; i++) { /* i = 0 warms up */
            DT_MPI_CHECK(MPI_Barrier(p->comm));
            double t0 = MPI_Wtime();
            dt_allreduce(&coll, x, x, count);
            if (i) t[i - 1] = MPI_Wtime() - t0;
        }
        qsort(t, 7, sizeof *t, cmp_double);
        double med = t[3];
        DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, p->comm));
        busbw = (double)(count * sizeof(float)) / med / 1e9 * 2.0 * (p->size - 1) / p->size;
        const struct dt_allreduce_algo *a = coll.algo == &dt_allreduce_auto ? dt_auto_choose(&coll, count) : coll.algo;
        snprintf(what, sizeof what, "; all-reduce %s%s%s%s at %s: busbw %.2f GB/s = %.2fx the slowest link",
                 coll.algo->name, coll.algo == &dt_allreduce_auto ? " (" : "",
                 coll.algo == &dt_allreduce_auto ? a->name : "", coll.algo == &dt_allreduce_auto ? ")" : "", sz, busbw,
                 gbps[slow] > 0 ? busbw / gbps[slow] : 0.0);
        dt_coll_free(&coll);
    } else {
        snprintf(what, sizeof what, "; all-reduce not timed: %.250s", st.msg);
    }
    if (nn > 2) snprintf(lb, sizeof lb, " (median of %d links %.2f GB/s)", nn - 1, median);
    int code = gbps[slow] < 0.5 * median ? PF_WARN : PF_OK;
    row(p, "network between nodes", code, "%s%s<->%s: %.2f GB/s, %.1f us one way%s%s%s", nn > 2 ? "slowest link " : "",
        host_of(p, leader[0]), host_of(p, leader[slow]), gbps[slow], lat[slow], lb,
        code == PF_WARN ? " -- under half the median: a slow link or a busy node" : "", what);
    free(leader);
    free(buf);
    free(gbps);
    free(lat);
}

static void check_gpus(struct pf *p)
{
    if (strcmp(p->cfg->device, "cuda") != 0) {
        row(p, "one GPU per rank", PF_SKIP, "--device %s", p->cfg->device);
        return;
    }
    if (!p->topo_ok) {
        row(p, "one GPU per rank", PF_SKIP, "no layout (see above)");
        return;
    }
    struct dt_device dev;
    dt_status st = {0};
    if (dt_device_open(&dev, p->cfg, &p->topo, &st) != DT_OK)
        row(p, "one GPU per rank", PF_FAIL, "%s", st.msg);
    else
        row(p, "one GPU per rank", PF_OK, "%d ranks, one device each (rank 0: %s)", p->size, dev.desc);
}

int dt_preflight(const struct dt_config *cfg, MPI_Comm comm, FILE *out, dt_status *st)
{
    struct pf p;
    memset(&p, 0, sizeof p);
    p.cfg = cfg;
    p.out = out;
    DT_MPI_CHECK(MPI_Comm_dup(comm, &p.comm));
    MPI_Comm_rank(p.comm, &p.rank);
    MPI_Comm_size(p.comm, &p.size);
    char me[MPI_MAX_PROCESSOR_NAME] = "", host[HOSTLEN];
    int len = 0;
    MPI_Get_processor_name(me, &len);
    snprintf(host, sizeof host, "%s", me);
    p.hosts = dt_xcalloc((size_t)p.size, HOSTLEN);
    DT_MPI_CHECK(MPI_Allgather(host, HOSTLEN, MPI_CHAR, p.hosts, HOSTLEN, MPI_CHAR, p.comm));
    if (p.rank == 0) {
        fprintf(out, "dtrain %s preflight: %d rank%s\n%-34s %-5s %s\n", PACKAGE_VERSION, p.size, p.size == 1 ? "" : "s",
                "check", "", "detail");
        fflush(out);
    }
    check_same_software(&p);
    check_thread_level(&p);
    check_shared_windows(&p);
    check_one_sided(&p);
    check_inputs(&p);
    check_checkpoint_dir(&p);
    check_network(&p);
    check_gpus(&p);
    if (p.topo_ok) dt_topo_free(&p.topo);
    free(p.hosts);
    MPI_Comm_free(&p.comm);
    if (p.failed) return dt_fail(st, DT_ERUNTIME, "preflight: %s", p.first);
    if (p.rank == 0) fprintf(out, "preflight: no check failed\n");
    return DT_OK;
}

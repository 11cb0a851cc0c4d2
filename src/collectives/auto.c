/* auto.c: pick an algorithm by message size and layout from a table.
 *
 * The table is measured, not guessed: dtrain-bench-allreduce --table prints
 * one for the layout it ran on, and --allreduce-table FILE (or
 * DTRAIN_ALLREDUCE_TABLE) makes a run use it. The built-in tables below came
 * from that benchmark on the development machine (2 cores, shared memory),
 * one per MPI library; see doc/design.md for the figures.
 *
 * Format: one rule per line, "NODES RANKS_PER_NODE MIN_BYTES ALGORITHM",
 * 0 meaning any layout; '#' starts a comment. For a message of B bytes the
 * last rule whose layout matches and whose MIN_BYTES <= B wins. An algorithm
 * that cannot run here (hier on an uneven layout, mpi with compression) falls
 * back to ring.
 *
 * Across real nodes the built-in table says little (it was measured on one
 * node's shared memory; over TCP between hosts it picked hier where
 * MPI_Allreduce was 1.2x faster), so there dt_auto_tune times the candidates
 * at start-up, at the sizes the run will reduce, and those choices win. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "collectives/coll.h"

/* Measured with dtrain-bench-allreduce -b 1K -e 64M at -np 2 on one node,
 * window buffers (what the trainer uses). Open MPI 4.1.4: hier wins from
 * 4 KiB (1.4x at 4 KiB, 2x at 4-16 MiB, 5x at 32 MiB over MPI_Allreduce).
 * MPICH 4.0.2: ring wins below 64 KiB, hier above. */
#if defined(OPEN_MPI)
static const char builtin[] = "0 0 0 mpi\n0 0 4096 hier\n";
#elif defined(MPICH_VERSION)
static const char builtin[] = "0 0 0 ring\n0 0 65536 hier\n";
#else
static const char builtin[] = "0 0 0 mpi\n0 0 65536 hier\n";
#endif

/* What auto picks among: every algorithm but itself. */
static const struct dt_allreduce_algo *const candidates[] = {&dt_allreduce_mpi, &dt_allreduce_ring, &dt_allreduce_hier};
#define NCAND ((int)(sizeof candidates / sizeof *candidates))

static const struct dt_allreduce_algo *candidate(const char *name)
{
    for (int i = 0; i < NCAND; i++)
        if (strcmp(candidates[i]->name, name) == 0) return candidates[i];
    return NULL;
}

static int parse(struct dt_coll *c, const char *text, const char *source, dt_status *st)
{
    int line = 0, cap = 8;
    c->rules = dt_xcalloc((size_t)cap, sizeof *c->rules);
    c->nrules = 0;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char buf[256], extra[8];
        struct dt_auto_rule r;
        long long minb;
        line++;
        if (n >= sizeof buf) return dt_fail(st, DT_EUSAGE, "%s:%d: line too long", source, line);
        memcpy(buf, p, n);
        buf[n] = '\0';
        p += n + (end ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *q = buf;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (!*q) continue;
        memset(&r, 0, sizeof r);
        if (sscanf(q, "%d %d %lld %15s %7s", &r.nodes, &r.ranks_per_node, &minb, r.algo, extra) != 4 ||
            r.nodes < 0 || r.ranks_per_node < 0 || minb < 0)
            return dt_fail(st, DT_EUSAGE, "%s:%d: expected 'NODES RANKS_PER_NODE MIN_BYTES ALGORITHM', found '%s'",
                           source, line, q);
        const struct dt_allreduce_algo *a = candidate(r.algo);
        if (!a)
            return dt_fail(st, DT_EUSAGE, "%s:%d: algorithm '%s' is not mpi, ring or hier", source, line, r.algo);
        r.min_bytes = (size_t)minb;
        r.pick = a;
        if (c->nrules == cap) {
            cap *= 2;
            c->rules = realloc(c->rules, sizeof *c->rules * (size_t)cap);
            if (!c->rules) DT_DIE("out of memory");
        }
        c->rules[c->nrules++] = r;
    }
    if (c->nrules == 0) return dt_fail(st, DT_EUSAGE, "%s: no rules", source);
    return DT_OK;
}

int dt_auto_load(struct dt_coll *c, dt_status *st)
{
    const char *path = c->cfg.table;
    if (!path || !*path) path = getenv("DTRAIN_ALLREDUCE_TABLE");
    if (!path || !*path) {
        c->table_builtin = 1;
        return parse(c, builtin, "built-in table", st);
    }
    FILE *f = fopen(path, "r");
    if (!f) return dt_fail(st, DT_EUSAGE, "--allreduce-table: cannot open %s: %s", path, strerror(errno));
    char *text = dt_xcalloc(1 << 16, 1);
    size_t got = fread(text, 1, (1 << 16) - 1, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    int rc = more ? dt_fail(st, DT_EUSAGE, "--allreduce-table: %s is larger than 64 KiB", path)
                  : parse(c, text, path, st);
    (void)got;
    free(text);
    return rc;
}

/* Once the layout is known: which rules apply, and what each picks here. */
void dt_auto_resolve(struct dt_coll *c)
{
    char why[8];
    for (int i = 0; i < c->nrules; i++) {
        struct dt_auto_rule *r = &c->rules[i];
        r->applies = (!r->nodes || r->nodes == c->topo.nnodes) &&
                     (!r->ranks_per_node || (c->topo.uniform && r->ranks_per_node == c->topo.local_size));
        if (!r->pick->usable(c, why, sizeof why)) r->pick = &dt_allreduce_ring;
    }
}

/* floor(log2(bytes)): messages of [2^k, 2^(k+1)) bytes share a timed choice. */
static int size_class(size_t bytes)
{
    return bytes > 1 ? 63 - __builtin_clzll((unsigned long long)bytes) : 0;
}

/* On every call, so it only scans the (few) resolved rules. */
const struct dt_allreduce_algo *dt_auto_choose(const struct dt_coll *c, size_t count)
{
    const struct dt_allreduce_algo *pick = &dt_allreduce_ring;
    size_t bytes = count * sizeof(float);
    if (c->ntuned) {
        int k = size_class(bytes);
        for (int i = 0; i < c->ntuned; i++)
            if (c->tuned[i].cls == k) return c->tuned[i].pick;
    }
    for (int i = 0; i < c->nrules; i++)
        if (c->rules[i].applies && c->rules[i].min_bytes <= bytes) pick = c->rules[i].pick;
    return pick;
}

#define TUNE_ROUNDS 15
#define TUNE_MARGIN 0.95   /* another algorithm must beat mpi by 5%: in the median of the rounds' ratios, */
#define TUNE_WINS 10       /* and in this many rounds of TUNE_ROUNDS */
#define TUNE_SPAN 3e-3     /* seconds a timed sample lasts at least (several calls when short) */
#define TUNE_WARM 20e-3    /* seconds of untimed calls first: TCP's windows open, caches fill */
#define TUNE_BUDGET 2.0    /* seconds of rounds per size class at most (fewer rounds past it) */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Seconds per call of `calls` back-to-back calls, started together, after
 * one untimed call: what ran before (another algorithm, other connections)
 * must not cost this one; in training, every call is the same algorithm. */
static double time_calls(struct dt_coll *c, const struct dt_allreduce_algo *a, const float *send, float *recv,
                         size_t count, int calls)
{
    a->run(c, send, recv, count);
    DT_MPI_CHECK(MPI_Barrier(c->topo.world));
    double t0 = MPI_Wtime();
    for (int i = 0; i < calls; i++) a->run(c, send, recv, count);
    return (MPI_Wtime() - t0) / calls;
}

/* Whether this layout and configuration time auto's choices. */
static int tunes_here(const struct dt_coll *c)
{
    /* DTRAIN_ALLREDUCE_TUNE=0: never (the table decides); =1: also where
     * --ranks-per-node emulates the nodes (tests, one-host experiments). */
    const char *env = getenv("DTRAIN_ALLREDUCE_TUNE");
    int force = env && strcmp(env, "1") == 0;
    return !(env && strcmp(env, "0") == 0) && c->algo == &dt_allreduce_auto && c->table_builtin &&
           (!c->topo.emulated || force) && c->topo.nnodes >= 2;
}

int dt_auto_encode(const struct dt_coll *c, char *buf, size_t len)
{
    if (!c->ntuned || !len) return 0;
    size_t n = (size_t)snprintf(buf, len, "%d %d", c->topo.nnodes, c->topo.uniform ? c->topo.local_size : 0);
    for (int i = 0; i < c->ntuned && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, " %d:%s", c->tuned[i].cls, c->tuned[i].pick->name);
    if (n >= len) buf[0] = '\0'; /* cut short: better none than half */
    return buf[0] != '\0';
}

int dt_auto_preset(struct dt_coll *c, const char *text)
{
    int nodes, rpn, used;
    if (!text || !tunes_here(c) || sscanf(text, "%d %d%n", &nodes, &rpn, &used) != 2 || nodes != c->topo.nnodes ||
        rpn != (c->topo.uniform ? c->topo.local_size : 0))
        return 0;
    struct dt_auto_tuned t[64];
    int n = 0;
    char why[256];
    for (const char *p = text + used; n < 64;) {
        int cls, k;
        char name[16];
        while (*p == ' ') p++;
        if (!*p) break;
        if (sscanf(p, "%d:%15[a-z]%n", &cls, name, &k) != 2 || cls < 0 || cls > 62) return 0;
        const struct dt_allreduce_algo *a = candidate(name);
        if (!a || !a->usable(c, why, sizeof why)) return 0;
        t[n++] = (struct dt_auto_tuned){.cls = cls, .pick = a};
        p += k;
    }
    if (!n) return 0;
    free(c->tuned);
    c->tuned = dt_xcalloc((size_t)n, sizeof *c->tuned);
    memcpy(c->tuned, t, sizeof *t * (size_t)n);
    c->ntuned = n;
    c->tuned_preset = 1;
    return 1;
}

/* Time every candidate at count floats in interleaved rounds: t[a][r] (the
 * slowest rank's seconds per call). Returns the number of rounds: TUNE_ROUNDS,
 * or fewer (odd, at least 3) where they would take over TUNE_BUDGET, as one
 * call of a large bucket does on a slow network. */
static int time_class(struct dt_coll *c, const struct dt_allreduce_algo *const *cand, int ncand, const float *send,
                      float *recv, size_t count, double *t)
{
    /* How many calls make a sample of TUNE_SPAN (the same number on every
     * rank: the slowest rank's estimate); then TUNE_WARM of untimed calls of
     * each candidate. */
    double warm = 0;
    for (int a = 0; a < ncand; a++) {
        double w = time_calls(c, cand[a], send, recv, count, 1);
        warm = w > warm ? w : warm;
    }
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &warm, 1, MPI_DOUBLE, MPI_MAX, c->topo.world));
    int calls = warm >= TUNE_SPAN ? 1 : warm <= TUNE_SPAN / 100 ? 100 : (int)ceil(TUNE_SPAN / warm);
    int wcalls = warm >= TUNE_WARM ? 0 : warm <= TUNE_WARM / 200 ? 200 : (int)ceil(TUNE_WARM / warm);
    int rounds = TUNE_ROUNDS;
    if (warm * calls * ncand * TUNE_ROUNDS > TUNE_BUDGET) {
        rounds = (int)(TUNE_BUDGET / (warm * calls * ncand));
        rounds = rounds < 3 ? 3 : rounds - !(rounds & 1);
    }
    if (wcalls)
        for (int a = 0; a < ncand; a++) time_calls(c, cand[a], send, recv, count, wcalls);
    for (int r = 0; r < rounds; r++)
        for (int q = 0; q < ncand; q++) { /* the order turns each round: no one always goes first */
            int a = (q + r) % ncand;
            t[(size_t)a * TUNE_ROUNDS + (size_t)r] = time_calls(c, cand[a], send, recv, count, calls);
        }
    /* The slowest rank's time is the call's time; everyone decides alike. */
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t, 3 * TUNE_ROUNDS, MPI_DOUBLE, MPI_MAX, c->topo.world));
    return rounds;
}

/* The choice at one size class from its rounds t[a][r]: mpi, unless another
 * wins the median of their round-by-round ratios by TUNE_MARGIN and two
 * thirds of the rounds (10 of 15). */
static struct dt_auto_tuned decide(const struct dt_allreduce_algo *const *cand, int ncand, const double *t,
                                   int rounds, int cls)
{
    double med[3], ratio[3] = {1, 1, 1}, v[TUNE_ROUNDS];
    int best = 0, mpi = -1, wins[3] = {0, 0, 0}, need = (2 * rounds + 2) / 3;
    for (int a = 0; a < ncand; a++) {
        memcpy(v, t + (size_t)a * TUNE_ROUNDS, sizeof(double) * (size_t)rounds);
        qsort(v, (size_t)rounds, sizeof *v, cmp_double);
        med[a] = v[rounds / 2];
        if (med[a] < med[best]) best = a;
        if (cand[a] == &dt_allreduce_mpi) mpi = a;
    }
    if (mpi >= 0) {
        /* Against mpi round by round: the two ran moments apart, so a
         * drifting network or a busy core weighs on both alike. */
        best = mpi;
        for (int a = 0; a < ncand; a++) {
            if (a == mpi) continue;
            for (int r = 0; r < rounds; r++) {
                v[r] = t[(size_t)a * TUNE_ROUNDS + (size_t)r] / t[(size_t)mpi * TUNE_ROUNDS + (size_t)r];
                wins[a] += v[r] < TUNE_MARGIN;
            }
            qsort(v, (size_t)rounds, sizeof *v, cmp_double);
            ratio[a] = v[rounds / 2];
            if (ratio[a] < TUNE_MARGIN && wins[a] >= need && ratio[a] < ratio[best]) best = a;
        }
    }
    return (struct dt_auto_tuned){.cls = cls, .pick = cand[best], .mpi_us = mpi >= 0 ? 1e6 * med[mpi] : 0,
                                  .pick_us = 1e6 * (mpi >= 0 ? med[mpi] * ratio[best] : med[best])};
}

static int is_tuned(const struct dt_coll *c, int cls)
{
    for (int j = 0; j < c->ntuned; j++)
        if (c->tuned[j].cls == cls) return 1;
    return 0;
}

int dt_auto_tune(struct dt_coll *c, const float *send, float *recv, const size_t *counts, int n)
{
    if (!tunes_here(c) || n <= 0) return 0;
    if (c->tuned_preset) { /* a checkpoint's choices: used when they cover every size here */
        int covered = 1;
        for (int i = 0; i < n && covered; i++) covered = !counts[i] || is_tuned(c, size_class(counts[i] * sizeof(float)));
        if (covered) return c->ntuned;
        c->tuned_preset = 0; /* other buckets than the checkpoint's run had: time them all */
        c->ntuned = 0;
    }
    const struct dt_allreduce_algo *cand[NCAND];
    int ncand = 0;
    char why[256];
    for (int j = 0; j < NCAND; j++)
        if (candidates[j]->usable(c, why, sizeof why)) cand[ncand++] = candidates[j];
    if (ncand == 0) return 0;
    /* One count per size class not timed yet (buckets cut again, as
     * --autotune does, keep what was timed), the first seen; at most 64. */
    size_t pick_count[64], maxc = 0;
    int cls[64], ncls = 0;
    for (int i = 0; i < n; i++) {
        if (!counts[i]) continue;
        int k = size_class(counts[i] * sizeof(float)), seen = is_tuned(c, k);
        for (int j = 0; j < ncls; j++) seen |= cls[j] == k;
        if (seen || ncls == 64 || c->ntuned + ncls == 64) continue;
        cls[ncls] = k;
        pick_count[ncls++] = counts[i];
        maxc = counts[i] > maxc ? counts[i] : maxc;
    }
    if (ncls == 0) return c->ntuned;
    float *keep = dt_xmalloc(sizeof(float) * maxc);
    memcpy(keep, recv, sizeof(float) * maxc);
    double *t = dt_xcalloc(3 * TUNE_ROUNDS, sizeof(double));
    struct dt_auto_tuned *all = dt_xcalloc((size_t)(c->ntuned + ncls), sizeof *all);
    if (c->ntuned) memcpy(all, c->tuned, (size_t)c->ntuned * sizeof *all);
    free(c->tuned);
    c->tuned = all;
    for (int j = 0; j < ncls; j++) {
        memset(t, 0, 3 * TUNE_ROUNDS * sizeof(double));
        int rounds = time_class(c, cand, ncand, send, recv, pick_count[j], t);
        c->tuned[c->ntuned++] = decide(cand, ncand, t, rounds, cls[j]);
    }
    memcpy(recv, keep, sizeof(float) * maxc);
    free(keep);
    free(t);
    return c->ntuned;
}

static void fmt_class(char *buf, size_t len, int cls)
{
    size_t b = (size_t)1 << cls;
    if (b >= (1u << 20)) snprintf(buf, len, "%zu MiB", b >> 20);
    else if (b >= 1024) snprintf(buf, len, "%zu KiB", b >> 10);
    else snprintf(buf, len, "%zu B", b);
}

void dt_auto_describe(const struct dt_coll *c, char *buf, size_t len)
{
    if (!c->ntuned) {
        snprintf(buf, len, "by %s", c->table_builtin ? "its built-in table" : "the given table");
        return;
    }
    size_t n = (size_t)snprintf(buf, len, c->tuned_preset ? "as the checkpoint's run timed it:" : "timed at start-up:");
    for (int i = 0; i < c->ntuned && n < len; i++) {
        const struct dt_auto_tuned *t = &c->tuned[i];
        char cl[24];
        fmt_class(cl, sizeof cl, t->cls);
        if (t->mpi_us > 0 && t->pick != &dt_allreduce_mpi)
            n += (size_t)snprintf(buf + n, len - n, "%s %s at %s (%.2fx mpi)", i ? "," : "", t->pick->name, cl,
                                  t->mpi_us / t->pick_us);
        else
            n += (size_t)snprintf(buf + n, len - n, "%s %s at %s", i ? "," : "", t->pick->name, cl);
    }
}

static int auto_usable(const struct dt_coll *c, char *why, size_t len)
{
    (void)c; (void)why; (void)len;
    return 1; /* it falls back to ring where the table's choice cannot run */
}

static void auto_run(struct dt_coll *c, const float *send, float *recv, size_t count)
{
    dt_auto_choose(c, count)->run(c, send, recv, count);
}

const struct dt_allreduce_algo dt_allreduce_auto = {.name = "auto", .usable = auto_usable, .run = auto_run};

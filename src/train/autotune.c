/* autotune.c: --autotune (see autotune.h): the staged search over the run's
 * first steps, its report, and the cache of choices.
 *
 * The design decision: the tuning steps are real training steps. Switching
 * only changes how the gradient sums are computed (which algorithm, which
 * bucket cuts, which thread), every rank switches before the same update,
 * and the decision is taken on times every rank holds (the slowest rank's
 * median), so the replicas stay bitwise identical and nothing is thrown
 * away but the slower candidates' extra milliseconds. Only rank 0 reads and
 * writes the cache (temp file + rename); the others get its line by
 * broadcast. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "runtime/consistency.h"
#include "runtime/rma.h"
#include "train/autotune.h"

enum { MAX_CANDS = 16, FIELDS = 11 };

static const double grid_mb[] = {0.25, 1, 4, 16};
static const char *const algo_names[] = {"auto", "mpi", "ring", "hier"};

struct cand {
    const struct dt_allreduce_algo *algo;
    double mb;
    int overlap;
    double ms; /* median ms/step, the slowest rank's; 0 until timed */
};

/* A choice from the cache, as rank 0 broadcasts it. */
struct kept {
    int found;
    char algo[16];
    double mb;
    int overlap;
    double ms;
    char date[32];
};

struct dt_autotune {
    FILE *out;
    int say, warn;          /* rank 0 prints the report / the warnings */
    int steps;              /* timed steps per configuration */
    double *times;          /* [steps]: this rank's, of the configuration in progress */
    struct cand c[MAX_CANDS];
    int n, cur, stage;      /* planned, timed; stage 1: algorithms, 2: buckets x overlap */
    int step_in;            /* steps taken on c[cur]; the first is not timed */
    int allow_overlap;
    int tuning;
    long nsteps;
    double t0;
    char path[4096];
    char key[512];
};

void dt_autotune_default_cache(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(buf, len, "%s/dtrain/autotune.tsv", xdg);
    else if (home && *home) snprintf(buf, len, "%s/.cache/dtrain/autotune.tsv", home);
    else snprintf(buf, len, ".dtrain-autotune.tsv");
}

/* layout, strategy, model, batch, precision, compression: tab-separated. */
static void make_key(const struct dt_trainer *t, char *key, size_t len)
{
    const struct dt_config *cfg = t->cfg;
    const struct dt_topo *tp = &t->coll.topo;
    const struct dt_model *m = &t->model;
    long *b = dt_xmalloc(sizeof(long) * ((size_t)m->nlayers + 1));
    for (int i = 0; i < m->nlayers; i++) b[i] = (long)m->layers[i].param_offset;
    b[m->nlayers] = (long)m->nparams;
    unsigned long h = (unsigned long)dt_consistency_hash_longs(b, (size_t)m->nlayers + 1);
    free(b);
    char layout[48], batch[48];
    if (tp->uniform) snprintf(layout, sizeof layout, "%dx%d", tp->nnodes, tp->local_size);
    else snprintf(layout, sizeof layout, "%dx%d-%d", tp->nnodes, tp->min_local, tp->max_local);
    if (cfg->grad_accum > 1) snprintf(batch, sizeof batch, "%dx%d", cfg->batch_size, cfg->grad_accum);
    else snprintf(batch, sizeof batch, "%d", cfg->batch_size);
    static const char *const compress[] = {"none", "fp16", "bf16"};
    snprintf(key, len, "%s\t%s\t%zu:%016lx\t%s\t%s\t%s%s", layout, t->strategy.ops->name, m->nparams, h, batch,
             dt_precision_name(cfg->precision), compress[cfg->compress],
             cfg->compress && cfg->compress_cross_only ? "-cross" : "");
}

/* Splits line (changed in place) at tabs; returns the field count. */
static int split(char *line, char *f[FIELDS + 1])
{
    int n = 0;
    for (char *p = line; n <= FIELDS; p++) {
        f[n++] = p;
        p = strchr(p, '\t');
        if (!p) break;
        *p = '\0';
    }
    return n;
}

/* One cache line into k; 0 when it is not a valid line. */
static int parse_line(const char *line, struct kept *k)
{
    char copy[1024], *f[FIELDS + 1], *end;
    if (strlen(line) >= sizeof copy) return 0;
    strcpy(copy, line);
    if (split(copy, f) != FIELDS) return 0;
    if (!dt_allreduce_find(f[6]) || strlen(f[6]) >= sizeof k->algo || strlen(f[10]) >= sizeof k->date ||
        !*f[10])
        return 0;
    k->mb = strtod(f[7], &end);
    if (end == f[7] || *end || !(k->mb >= 0.0 && k->mb <= 65536.0)) return 0;
    if (strcmp(f[8], "on") && strcmp(f[8], "off")) return 0;
    k->ms = strtod(f[9], &end);
    if (end == f[9] || *end || !(k->ms > 0.0)) return 0;
    k->overlap = !strcmp(f[8], "on");
    strcpy(k->algo, f[6]);
    strcpy(k->date, f[10]);
    return 1;
}

static void chomp(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
}

/* Rank 0: the cache's line for a->key, if any (the last one); a line that
 * does not parse is a warning naming the file and line. */
static void cache_lookup(const struct dt_autotune *a, struct kept *k)
{
    memset(k, 0, sizeof *k);
    FILE *f = fopen(a->path, "r");
    if (!f) return; /* none yet */
    char line[1024];
    size_t klen = strlen(a->key);
    for (int no = 1; fgets(line, sizeof line, f); no++) {
        chomp(line);
        if (!line[0] || line[0] == '#') continue;
        struct kept one;
        if (!parse_line(line, &one)) {
            if (a->warn)
                fprintf(stderr, "dtrain: warning: --autotune-cache %s:%d: expected %d tab-separated fields (layout, "
                        "strategy, model, batch, precision, compression, algorithm, bucket MB, overlap on|off, "
                        "ms/step, date); line ignored\n", a->path, no, FIELDS);
            continue;
        }
        if (!strncmp(line, a->key, klen) && line[klen] == '\t') {
            *k = one;
            k->found = 1;
        }
    }
    fclose(f);
}

/* The directories above path, made where missing. */
static void make_parents(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(dir, 0777); /* an error shows when the file is written */
        *p = '/';
    }
}

/* Rank 0: the cache again, a->key's line replaced by line (temp + rename).
 * Returns 0 after a warning when it cannot be written. */
static int cache_keep(const struct dt_autotune *a, const char *line)
{
    char tmp[4200], buf[1024];
    size_t klen = strlen(a->key);
    make_parents(a->path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", a->path, (long)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) goto fail;
    FILE *in = fopen(a->path, "r");
    while (in && fgets(buf, sizeof buf, in)) {
        chomp(buf);
        if (!(buf[0] && !strncmp(buf, a->key, klen) && buf[klen] == '\t')) fprintf(out, "%s\n", buf);
    }
    if (in) fclose(in);
    fprintf(out, "%s\n", line);
    if (fclose(out) != 0 || rename(tmp, a->path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        goto fail;
    }
    return 1;
fail:
    if (a->warn)
        fprintf(stderr, "dtrain: warning: --autotune-cache %s: cannot write it (%s); the choice is not kept\n",
                a->path, strerror(errno));
    return 0;
}

static void describe(const struct cand *c, char *buf, size_t len)
{
    snprintf(buf, len, "--allreduce %s --bucket-mb %g %s", c->algo->name, c->mb,
             c->overlap ? "--overlap" : "--no-overlap");
}

static void apply(struct dt_trainer *t, const struct cand *c)
{
    dt_allreduce_strategy_configure(&t->strategy, c->algo, (size_t)(c->mb * 1048576.0), c->overlap);
}

static void add(struct dt_autotune *a, const struct dt_allreduce_algo *algo, double mb, int overlap)
{
    if (a->n < MAX_CANDS) a->c[a->n++] = (struct cand){.algo = algo, .mb = mb, .overlap = overlap};
}

/* Whether the two bucket sizes cut this model's gradient block alike. */
static int same_cut(const struct dt_trainer *t, double mb1, double mb2)
{
    const struct dt_model *m = &t->model;
    size_t *bounds = dt_xcalloc((size_t)m->nlayers + 1, sizeof(size_t)), *s1, *s2;
    for (int i = 0; i < m->nlayers; i++) bounds[i] = m->layers[i].param_offset;
    size_t count = m->nparams + DT_STATS;
    int n1 = dt_buckets_cut(count, bounds, m->nlayers, (size_t)(mb1 * 1048576.0), &s1);
    int n2 = dt_buckets_cut(count, bounds, m->nlayers, (size_t)(mb2 * 1048576.0), &s2);
    int same = n1 == n2 && !memcmp(s1, s2, sizeof(size_t) * ((size_t)n1 + 1));
    free(bounds);
    free(s1);
    free(s2);
    return same;
}

static int fastest(const struct dt_autotune *a, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (a->c[i].ms < a->c[best].ms) best = i; /* a tie keeps the earlier: the configured settings first */
    return best;
}

/* Stage 2: the fastest algorithm at each bucket size that cuts other
 * buckets than one already planned with it, overlap off and on. */
static void plan_buckets(struct dt_trainer *t, struct dt_autotune *a)
{
    const struct dt_allreduce_algo *algo = a->c[fastest(a, a->n)].algo;
    a->stage = 2;
    for (size_t g = 0; g < sizeof grid_mb / sizeof *grid_mb; g++)
        for (int ov = 0; ov <= a->allow_overlap; ov++) {
            int dup = 0;
            for (int i = 0; i < a->n && !dup; i++)
                dup = a->c[i].algo == algo && a->c[i].overlap == ov && same_cut(t, a->c[i].mb, grid_mb[g]);
            if (!dup) add(a, algo, grid_mb[g], ov);
        }
}

/* Rank 0: the report's lines; kept: where the choice went (NULL: not kept). */
static void report(const struct dt_autotune *a, int best, int timed, const char *kept)
{
    char d[160];
    double secs = MPI_Wtime() - a->t0;
    fprintf(a->out, "dtrain: autotune: %d configurations in %ld steps (%.1f s):\n", timed, a->nsteps, secs);
    for (int i = 0; i < timed; i++) {
        describe(&a->c[i], d, sizeof d);
        fprintf(a->out, "dtrain: autotune:   %-48s %9.1f ms/step%s\n", d, a->c[i].ms, i == 0 ? " (defaults)" : "");
    }
    describe(&a->c[best], d, sizeof d);
    fprintf(a->out, "dtrain: autotune: chose %s: %.1f ms/step (defaults %.1f ms/step, %.2fx); %s%s\n", d,
            a->c[best].ms, a->c[0].ms, a->c[0].ms / a->c[best].ms, kept ? "kept in " : "not kept", kept ? kept : "");
    fflush(a->out);
}

/* Collective: every configuration timed: the fastest from now on, kept. */
static void decide(struct dt_trainer *t, struct dt_autotune *a)
{
    int best = fastest(a, a->n);
    if (best != a->n - 1) apply(t, &a->c[best]);
    a->tuning = 0;
    if (t->rank != 0) return;
    char line[1024], date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", localtime(&now));
    const struct cand *c = &a->c[best];
    snprintf(line, sizeof line, "%s\t%s\t%g\t%s\t%.1f\t%s", a->key, c->algo->name, c->mb, c->overlap ? "on" : "off",
             c->ms, date);
    int kept = cache_keep(a, line);
    if (a->say) report(a, best, a->n, kept ? a->path : NULL);
}

/* Collective: a choice kept for this key; 1 when it applies (switched to). */
static int use_kept(struct dt_trainer *t, struct dt_autotune *a)
{
    struct kept k;
    if (t->rank == 0) cache_lookup(a, &k);
    dt_watchdog_enter(&t->watchdog, "--autotune's agreement");
    DT_MPI_CHECK(MPI_Bcast(&k, sizeof k, MPI_BYTE, 0, t->comm));
    dt_watchdog_leave(&t->watchdog);
    if (!k.found) return 0;
    char why[256];
    const struct dt_allreduce_algo *algo = dt_allreduce_find(k.algo);
    if (!algo->usable(&t->coll, why, sizeof why)) {
        if (a->warn)
            fprintf(stderr, "dtrain: warning: --autotune-cache %s: the kept --allreduce %s cannot run here (%s); "
                    "timing again\n", a->path, k.algo, why);
        return 0;
    }
    struct cand c = {.algo = algo, .mb = k.mb, .overlap = k.overlap && a->allow_overlap, .ms = k.ms};
    apply(t, &c);
    if (a->say) {
        char d[160];
        describe(&c, d, sizeof d);
        fprintf(a->out, "dtrain: autotune: using the choice kept in %s from %s: %s (%.1f ms/step then)\n", a->path,
                k.date, d, k.ms);
    }
    return 1;
}

/* Stage 1: the configured settings, then each other usable algorithm. */
static void plan_algorithms(struct dt_trainer *t, struct dt_autotune *a)
{
    const struct dt_strategy *s = &t->strategy;
    const struct dt_allreduce_algo *def = t->coll.algo;
    char why[256];
    a->stage = 1;
    add(a, def, t->cfg->bucket_mb, s->overlap);
    for (size_t i = 0; i < sizeof algo_names / sizeof *algo_names; i++) {
        const struct dt_allreduce_algo *algo = dt_allreduce_find(algo_names[i]);
        if (algo != def && algo->usable(&t->coll, why, sizeof why)) add(a, algo, t->cfg->bucket_mb, s->overlap);
    }
}

int dt_autotune_start(struct dt_trainer *t, FILE *out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    const struct dt_strategy *s = &t->strategy;
    t->autotune = NULL;
    st->code = DT_OK;
    if (!cfg->autotune) return DT_OK;
    if (s->ops != &dt_strategy_mirrored && s->ops != &dt_strategy_multi_worker)
        return dt_fail(st, DT_EUSAGE, "--autotune: tunes the all-reduce of --strategy mirrored and multi-worker; "
                       "this run's strategy is %s, which exchanges gradients otherwise; drop --autotune or use one "
                       "of those", s->ops->name);
    if (s->cuda)
        return dt_fail(st, DT_EUSAGE, "--autotune: tunes dtrain's CPU all-reduce; with --device cuda the "
                       "gradients go through NCCL; drop --autotune (or --bucket-mb sets NCCL's buckets)");
    const int say = t->rank == 0 && cfg->verbose >= DT_NORMAL;
    if (t->nranks == 1) {
        if (say) fprintf(out, "dtrain: autotune: one rank exchanges no gradients: nothing to tune\n");
        return DT_OK;
    }
    struct dt_autotune *a = dt_xcalloc(1, sizeof *a);
    a->out = out;
    a->say = say;
    a->warn = t->rank == 0 && cfg->verbose >= DT_NORMAL;
    a->steps = cfg->autotune_steps > 0 ? cfg->autotune_steps : 3;
    a->times = dt_xcalloc((size_t)a->steps, sizeof(double));
    if (cfg->autotune_cache) snprintf(a->path, sizeof a->path, "%s", cfg->autotune_cache);
    else dt_autotune_default_cache(a->path, sizeof a->path);
    make_key(t, a->key, sizeof a->key);
    /* The comm thread needs MPI_THREAD_SERIALIZED; --sync-bn reduces in backward. */
    int level = dt_mpi_thread_level();
    a->allow_overlap = level >= MPI_THREAD_SERIALIZED && !cfg->sync_bn;
    if (use_kept(t, a)) {
        free(a->times);
        free(a);
        return DT_OK;
    }
    /* With the thread and only SERIALIZED, the watchdog's main thread must not publish (setup.c's rule). */
    if (a->allow_overlap && level < MPI_THREAD_MULTIPLE) t->watchdog.publish_waiting = 0;
    plan_algorithms(t, a);
    a->tuning = 1;
    a->t0 = MPI_Wtime();
    if (say && cfg->verbose >= DT_VERBOSE)
        fprintf(out, "dtrain: autotune: timing %d algorithms, then bucket sizes and overlap: %d steps each\n", a->n,
                a->steps + 1);
    t->autotune = a;
    return DT_OK;
}

void dt_autotune_before_step(struct dt_trainer *t)
{
    struct dt_autotune *a = t->autotune;
    if (a && a->tuning && a->step_in == 0 && a->cur > 0) apply(t, &a->c[a->cur]);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

void dt_autotune_after_step(struct dt_trainer *t, double seconds)
{
    struct dt_autotune *a = t->autotune;
    if (!a || !a->tuning) return;
    a->nsteps++;
    /* The run's very first step also pays for first touches and primitive
     * caches: the first configuration takes two untimed steps, others one. */
    int untimed = a->cur == 0 ? 2 : 1;
    if (a->step_in >= untimed) a->times[a->step_in - untimed] = seconds;
    if (++a->step_in < a->steps + untimed) return;
    qsort(a->times, (size_t)a->steps, sizeof(double), cmp_double);
    double med = a->steps % 2 ? a->times[a->steps / 2] : 0.5 * (a->times[a->steps / 2 - 1] + a->times[a->steps / 2]);
    dt_watchdog_enter(&t->watchdog, "--autotune's agreement");
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, t->comm));
    dt_watchdog_leave(&t->watchdog);
    a->c[a->cur++].ms = 1e3 * med;
    a->step_in = 0;
    if (a->cur == a->n && a->stage == 1) plan_buckets(t, a);
    if (a->cur == a->n) decide(t, a);
}

void dt_autotune_end(struct dt_trainer *t, int completed)
{
    struct dt_autotune *a = t->autotune;
    if (!a) return;
    if (completed && a->tuning && a->say) {
        if (a->cur == 0)
            fprintf(a->out, "dtrain: autotune: the run ended after %ld steps, before a configuration was timed (each "
                    "takes %d); nothing kept\n", a->nsteps, a->steps + 1);
        else {
            fprintf(a->out, "dtrain: autotune: the run ended after %ld steps, with %d of %d configurations timed "
                    "(%s); the fastest of those is not kept:\n", a->nsteps, a->cur, a->n,
                    a->stage == 1 ? "more to plan" : "all planned");
            report(a, fastest(a, a->cur), a->cur, NULL);
        }
    }
    free(a->times);
    free(a);
    t->autotune = NULL;
}

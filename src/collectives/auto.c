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
 * back to ring. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
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
        const struct dt_allreduce_algo *a = dt_allreduce_find(r.algo);
        if (!a || a == &dt_allreduce_auto)
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
    if (!path || !*path) return parse(c, builtin, "built-in table", st);
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

/* On every call, so it only scans the (few) resolved rules. */
const struct dt_allreduce_algo *dt_auto_choose(const struct dt_coll *c, size_t count)
{
    const struct dt_allreduce_algo *pick = &dt_allreduce_ring;
    size_t bytes = count * sizeof(float);
    for (int i = 0; i < c->nrules; i++)
        if (c->rules[i].applies && c->rules[i].min_bytes <= bytes) pick = c->rules[i].pick;
    return pick;
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

/* sample_log.c: --sample-log (see sample_log.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "train/sample_log.h"
#include "train/train.h"

struct dt_sample_log {
    FILE *f;
    const char *path;
    int nreplicas;
    struct dt_shard_plan *plans; /* --shard-policy file: one per replica; NULL: the data policy's one order */
    int drawn;                   /* the epoch (0-based) plans' orders are drawn for; -1 none */
    int64_t *idx;                /* [batch] */
};

int dt_sample_log_open(struct dt_trainer *t, struct dt_sample_log **out, dt_status *st)
{
    const struct dt_config *cfg = t->cfg;
    *out = NULL;
    st->code = DT_OK;
    if (!cfg->sample_log) return DT_OK;
    if (!t->strategy.lockstep) {
        dt_fail(st, DT_EUSAGE, "--sample-log: the parameter server's workers do not step together, so their steps "
                "have no global order to log; use a synchronous strategy");
        return dt_status_agree(st, t->comm);
    }
    if (t->rank == 0) {
        FILE *f = fopen(cfg->sample_log, "w");
        if (!f) {
            dt_fail(st, DT_EUSAGE, "--sample-log %s: cannot write it: %s", cfg->sample_log, strerror(errno));
        } else {
            struct dt_sample_log *sl = dt_xcalloc(1, sizeof *sl);
            sl->f = f;
            sl->path = cfg->sample_log;
            sl->nreplicas = t->plan.nranks;
            sl->drawn = -1;
            sl->idx = dt_xmalloc(sizeof(int64_t) * (size_t)t->plan.batch);
            if (t->plan.policy == DT_SHARD_FILE) {
                sl->plans = dt_xcalloc((size_t)sl->nreplicas, sizeof *sl->plans);
                for (int r = 0; r < sl->nreplicas; r++)
                    dt_setup_plan(&sl->plans[r], &t->data, DT_SHARD_FILE, r, sl->nreplicas, t->plan.batch);
            }
            *out = sl;
        }
    }
    return dt_status_agree(st, t->comm);
}

void dt_sample_log_write(struct dt_sample_log *sl, const struct dt_trainer *t, int epoch, int64_t s, int64_t end)
{
    if (!sl) return;
    if (sl->plans && sl->drawn != epoch) { /* train.c draws every epoch's order with shuffling on */
        for (int r = 0; r < sl->nreplicas; r++) dt_shard_epoch(&sl->plans[r], t->cfg->seed, epoch, 1);
        sl->drawn = epoch;
    }
    for (int64_t u = s; u < end; u++) {
        fprintf(sl->f, "%ld %d %lld", t->global_step, epoch + 1, (long long)u + 1);
        for (int r = 0; r < sl->nreplicas; r++) {
            struct dt_shard_plan p = t->plan; /* the data policy: one global order, replica r's part of it */
            p.rank = r;
            int64_t global;
            int n = dt_shard_step(sl->plans ? &sl->plans[r] : &p, u, sl->idx, &global);
            for (int i = 0; i < n; i++) fprintf(sl->f, " %lld", (long long)sl->idx[i]);
        }
        fputc('\n', sl->f);
    }
    fflush(sl->f); /* whole updates, as they are taken: a reader may follow the file (bench/torch_gpt.py --follow) */
}

int dt_sample_log_close(struct dt_sample_log *sl, dt_status *st)
{
    st->code = DT_OK;
    if (!sl) return DT_OK;
    int bad = ferror(sl->f);
    if (fclose(sl->f) != 0 || bad) dt_fail(st, DT_ERUNTIME, "--sample-log %s: writing it failed", sl->path);
    if (sl->plans)
        for (int r = 0; r < sl->nreplicas; r++) dt_shard_free(&sl->plans[r]);
    free(sl->plans);
    free(sl->idx);
    free(sl);
    return st->code;
}

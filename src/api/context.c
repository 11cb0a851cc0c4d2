/* context.c: dtrain_init/finalize, status strings, dtrain_reduce.
 *
 * A context is the caller's communicator duplicated, its node layout and
 * this rank's backend. The backend's settings (threads, precision, the
 * floating-point mode) are the process's, not the context's, so a second
 * live context in one process must ask for the same ones: that is the only
 * state the API keeps outside its handles (see doc/api.md, Shared state). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "backend.h"
#include "runtime/checks.h"
#include "runtime/log.h"

/* The backend settings every live context of this process uses. */
static struct {
    int live;
    char device[8];
    int threads, precision;
} process_backend;

int dt_api_error(dtrain_context *ctx, const dt_status *st)
{
    if (ctx) snprintf(ctx->err, sizeof ctx->err, "%s", st->code == DT_OK ? "" : st->msg);
    return st->code;
}

const char *dtrain_version(void) { return PACKAGE_VERSION; }

void dtrain_blas_prepare(char **argv) { dt_cpu_blas_prepare(argv); }

const char *dtrain_strerror(int code)
{
    switch (code) {
    case DTRAIN_OK: return "success";
    case DTRAIN_ERUNTIME: return "runtime failure (I/O or numerics)";
    case DTRAIN_EUSAGE: return "invalid usage (an argument, an option or the order of calls)";
    case DTRAIN_EINPUT: return "bad input file (missing, not HDF5, wrong shapes or labels)";
    default: return "unknown status";
    }
}

const char *dtrain_last_error(const dtrain_context *ctx)
{
    return ctx ? ctx->err : "no context (dtrain_init failed to allocate one, or NULL was passed)";
}

void dtrain_context_options_init(dtrain_context_options *o)
{
    struct dt_config d;
    dt_options_defaults(&d);
    memset(o, 0, sizeof *o);
    o->device = d.device;
    o->threads = d.threads;
    o->precision = dt_precision_name(d.precision);
    o->seed = d.seed;
}

/* dtrain's defaults (the option table) but for what a library must not do
 * by itself: no watchdog thread ending the job, no overlap thread, no
 * output unless asked; then the context's options, checked as dtrain
 * checks its own. */
static void base_config(struct dt_config *cfg, const dtrain_context_options *opts, dt_status *st)
{
    dt_options_defaults(cfg);
    cfg->epochs = 1;
    cfg->overlap = DT_OVERLAP_OFF;
    cfg->stall_timeout = 0.0;
    cfg->threads = opts->threads;
    cfg->seed = opts->seed;
    cfg->ranks_per_node = opts->ranks_per_node;
    cfg->gpus_per_node = opts->gpus_per_node;
    cfg->verbose = opts->verbose;
    st->code = DT_OK;
    if ((!opts->device || dt_options_set(cfg, "device", opts->device, "dtrain_init", st) == DT_OK) &&
        (!opts->precision || dt_options_set(cfg, "precision", opts->precision, "dtrain_init", st) == DT_OK) &&
        dt_options_check(cfg, "dtrain_init", st) == DT_OK)
        dt_options_default_loss_scale(cfg);
}

int dtrain_init(MPI_Comm comm, const dtrain_context_options *opts, dtrain_context **out)
{
    dtrain_context_options def;
    dt_status st = {0};
    int inited = 0, finalized = 0;
    if (!out) return DTRAIN_EUSAGE;
    *out = NULL;
    dtrain_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return DTRAIN_ERUNTIME;
    *out = ctx;
    ctx->comm = MPI_COMM_NULL;
    if (!opts) {
        dtrain_context_options_init(&def);
        opts = &def;
    }
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized) {
        dt_fail(&st, DT_EUSAGE, "dtrain_init: MPI is %s; call MPI_Init_thread first (libdtrain never "
                "initialises or finalises MPI itself)", finalized ? "finalized already" : "not initialised");
        return dt_api_error(ctx, &st);
    }
    if (comm == MPI_COMM_NULL) {
        dt_fail(&st, DT_EUSAGE, "dtrain_init: the communicator is MPI_COMM_NULL (is this rank outside the group "
                "that trains? only that group's ranks call dtrain_init)");
        return dt_api_error(ctx, &st);
    }
    DT_MPI_CHECK(MPI_Comm_dup(comm, &ctx->comm));
    MPI_Comm_rank(ctx->comm, &ctx->rank);
    MPI_Comm_size(ctx->comm, &ctx->size);
    if (dt_log_rank < 0) MPI_Comm_rank(MPI_COMM_WORLD, &dt_log_rank); /* the log prefix: the process's rank */

    struct dt_config *cfg = &ctx->base;
    base_config(cfg, opts, &st);
    if (st.code == DT_OK && process_backend.live &&
        (strcmp(process_backend.device, cfg->device) || process_backend.threads != cfg->threads ||
         process_backend.precision != cfg->precision))
        dt_fail(&st, DT_EUSAGE, "dtrain_init: this process already has a context on %s with %d thread%s and %s; "
                "the backend's threads and precision are the process's, so every live context must ask for "
                "the same (found %s, %d, %s)", process_backend.device, process_backend.threads,
                process_backend.threads == 1 ? "" : "s", dt_precision_name(process_backend.precision), cfg->device,
                cfg->threads, dt_precision_name(cfg->precision));
    if (dt_status_agree(&st, ctx->comm) != DT_OK) return dt_api_error(ctx, &st);

    if (dt_topo_create(&ctx->topo, ctx->comm, cfg->ranks_per_node, &st) != DT_OK ||
        dt_status_agree(&st, ctx->comm) != DT_OK)
        return dt_api_error(ctx, &st);
    ctx->topo_ok = 1;
    if (dt_device_open(&ctx->device, cfg, &ctx->topo, &st) != DT_OK) return dt_api_error(ctx, &st);
    ctx->device_ok = 1;
    if (!process_backend.live) {
        snprintf(process_backend.device, sizeof process_backend.device, "%s", cfg->device);
        process_backend.threads = cfg->threads;
        process_backend.precision = cfg->precision;
    }
    process_backend.live++;
    ctx->err[0] = '\0';
    return DTRAIN_OK;
}

int dtrain_finalize(dtrain_context *ctx)
{
    if (!ctx) return DTRAIN_OK;
    if (ctx->nusers > 0) {
        snprintf(ctx->err, sizeof ctx->err, "dtrain_finalize: %d dataset%s or model%s made from this context are "
                 "still open; free them first", ctx->nusers, ctx->nusers == 1 ? "" : "s", ctx->nusers == 1 ? "" : "s");
        return DTRAIN_EUSAGE;
    }
    if (ctx->device_ok) process_backend.live--;
    if (ctx->topo_ok) dt_topo_free(&ctx->topo);
    if (ctx->comm != MPI_COMM_NULL) MPI_Comm_free(&ctx->comm);
    free(ctx);
    return DTRAIN_OK;
}

int dtrain_rank(const dtrain_context *ctx) { return ctx ? ctx->rank : -1; }
int dtrain_size(const dtrain_context *ctx) { return ctx ? ctx->size : 0; }
const char *dtrain_device_name(const dtrain_context *ctx) { return ctx ? ctx->device.desc : ""; }

int dtrain_reduce(dtrain_context *ctx, double *buf, int n, int op)
{
    if (!ctx || ctx->comm == MPI_COMM_NULL) return DTRAIN_EUSAGE;
    /* Each rank checks its own arguments; the verdict is agreed on, so a
     * rank with a bad one does not leave the others in the all-reduce. */
    dt_status st = {0};
    if (n < 0 || (n > 0 && !buf) || op < DTRAIN_SUM || op > DTRAIN_MAX)
        dt_fail(&st, DT_EUSAGE, "dtrain_reduce: expected a buffer of n >= 0 doubles and DTRAIN_SUM, DTRAIN_MEAN or "
                "DTRAIN_MAX, found n %d, op %d", n, op);
    if (dt_status_agree(&st, ctx->comm) != DT_OK) return dt_api_error(ctx, &st);
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, op == DTRAIN_MAX ? MPI_MAX : MPI_SUM, ctx->comm));
    if (op == DTRAIN_MEAN)
        for (int i = 0; i < n; i++) buf[i] /= (double)ctx->size;
    return dt_api_error(ctx, &st);
}

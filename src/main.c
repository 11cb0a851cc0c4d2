/* main.c: the dtrain executable: one SPMD program, every MPI rank a replica.
 *
 *   mpirun -np N dtrain INPUT.h5 [options]
 *
 * Parses options (every rank the same argv, so every rank the same verdict),
 * trains, and exits with the same code on every rank. User errors are printed
 * once, by rank 0, as "dtrain: error: ..." (see status.h for the codes). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/callbacks.h"
#include "runtime/device.h"
#include "runtime/log.h"
#include "options.h"
#include "runtime/preflight.h"
#include "runtime/rma.h"
#include "strategy/ps.h"
#include "train/train.h"
#ifdef DT_HAVE_CUDA
#include "collectives/nccl.h"
#endif

static struct dt_config cfg;

static int finish(int code)
{
    dt_options_free(&cfg);
    MPI_Finalize();
    return code;
}

/* A user error: one line, from rank 0. */
static void say_error(int rank, const dt_status *st)
{
    if (rank == 0) fprintf(stderr, "dtrain: error: %s\n", st->msg);
}

/* Serialized is what training needs: the gradient thread calls MPI only
 * while the main thread does not (see collectives/reducer.h). Multiple lets
 * the stall watchdog receive two-sided progress reports where one-sided
 * windows are missing (watchdog.h); asked for, not required. */
static int start_mpi(int *argc, char ***argv, int *rank, int *nranks)
{
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    dt_log_rank = *rank;
    if (provided >= MPI_THREAD_SERIALIZED) return DT_OK;
    if (*rank == 0)
        fprintf(stderr, "dtrain: error: MPI gives %s; dtrain needs at least MPI_THREAD_SERIALIZED (its gradient "
                "thread calls MPI); use an MPI library built with thread support\n", dt_mpi_thread_level_name(provided));
    return DT_ERUNTIME;
}

/* --help, --version, --preflight, --list-devices: what runs instead of
 * training; their exit code. */
static int other_mode(int rank, dt_status *st)
{
    if (cfg.help || cfg.version) {
        if (rank == 0 && cfg.help) dt_options_usage(stdout);
        if (rank == 0 && cfg.version) printf("dtrain %s\n", PACKAGE_VERSION);
        return DT_OK;
    }
    if (cfg.preflight) { /* checks, a table, and the verdict as the exit code */
        int rc = dt_preflight(&cfg, MPI_COMM_WORLD, stdout, st);
        if (rc != DT_OK) say_error(rank, st);
        return rc;
    }
    /* --list-devices: like tf.config.list_physical_devices, per rank */
    struct dt_topo topo;
    struct dt_device dev;
    int rc = dt_topo_create(&topo, MPI_COMM_WORLD, cfg.ranks_per_node, st);
    if (rc == DT_OK) {
        rc = dt_device_open(&dev, &cfg, &topo, st);
        if (rc == DT_OK) dt_device_list(&dev, &topo, stdout);
        dt_topo_free(&topo);
    }
    if (rc != DT_OK) say_error(rank, st);
    return rc;
}

/* The strategy's line: its layout and how gradients travel. */
static void print_layout(const struct dt_trainer *tr, int nranks)
{
    const struct dt_strategy *s = &tr->strategy;
    char layout[160], how[256] = "";
    dt_topo_describe(&tr->coll.topo, layout, sizeof layout);
    char compress[32] = "";
    if (cfg.compress != DT_COMPRESS_NONE)
        snprintf(compress, sizeof compress, " (%s)", cfg.compress == DT_COMPRESS_FP16 ? "fp16" : "bf16");
    else if (cfg.powersgd_rank)
        snprintf(compress, sizeof compress, " (powersgd:%d)", cfg.powersgd_rank);
    if (s->ops == &dt_strategy_parameter_server) {
        char mode[48];
        snprintf(mode, sizeof mode, cfg.ps_mode == PS_ASYNC ? "async" : cfg.ps_mode == PS_SYNC ? "sync" : "ssp, staleness %d",
                 cfg.staleness);
        printf("layout: %s; strategy parameter-server (%s, %s): %d server%s, %d worker%s\n", layout, mode,
               dt_ps_transport_name(s), cfg.num_ps, cfg.num_ps == 1 ? "" : "s", s->nreplicas,
               s->nreplicas == 1 ? "" : "s");
        return;
    }
    if (s->ops == &dt_strategy_sharded) {
        printf("layout: %s; strategy sharded: optimizer state %.2f MiB per rank (1/%d of the model's)\n", layout,
               (double)dt_strategy_optimizer_bytes(s) / 1048576.0, nranks);
        return;
    }
#ifdef DT_HAVE_CUDA
    if (s->cuda) {
        int nb = dt_nccl_buckets(s->nccl);
        printf("layout: %s; strategy %s, all-reduce NCCL in the node%s%s, %d bucket%s of >= %.2f MiB, "
               "on a communication stream\n", layout, s->ops->name,
               tr->coll.topo.nnodes > 1 ? (dt_nccl_cuda_aware(s->nccl) ? " + CUDA-aware MPI across nodes"
                                           : " + MPI across nodes (via pinned host memory)") : "",
               compress, nb, nb == 1 ? "" : "s", cfg.bucket_mb);
        return;
    }
#endif
    if (tr->coll.ntuned) { /* across nodes: what auto's timing chose */
        how[0] = ' ', how[1] = '(';
        dt_auto_describe(&tr->coll, how + 2, sizeof how - 3);
        strcat(how, ")");
    }
    char pieces[64] = ""; /* the ring's, where the all-reduce may be a ring */
    if (strcmp(tr->coll.algo->name, "mpi") != 0 && nranks > 1)
        snprintf(pieces, sizeof pieces, ", ring pieces %g KiB x %d", (double)tr->coll.cfg.chunk_bytes / 1024.0,
                 tr->coll.cfg.ring_depth);
    if (tr->pipe.on) {
        char cut[256];
        const int B = cfg.batch_size, M = tr->pipe.M;
        dt_pipe_describe(tr, cut, sizeof cut);
        printf("layout: %s; strategy pipeline: %d stages x %d replica%s, layers %s (%s), %d micro-batch%s of %d%s, "
               "1F1B; each stage's gradients all-reduced over its replicas\n", layout, tr->pipe.P, s->nreplicas,
               s->nreplicas == 1 ? "" : "s", cut, tr->pipe.marked ? "[stage] lines" : "balanced by measured layer times",
               M, M == 1 ? "" : "es", B / M + (B % M != 0), B % M ? " at most" : "");
        return;
    }
    if (dt_strategy_shards_params(s)) { /* fsdp: no all-reduce, buckets of its own */
        printf("layout: %s; strategy fsdp, %d bucket%s of >= %.2f MiB (whole layers): all-gathered before their "
               "layers run, the next one prefetched, reduce-scattered after backward\n", layout, dt_fsdp_buckets(s),
               dt_fsdp_buckets(s) == 1 ? "" : "s", cfg.bucket_mb);
        return;
    }
    printf("layout: %s; strategy %s, all-reduce %s%s%s, %d bucket%s of >= %.2f MiB, %s%s\n", layout, s->ops->name,
           tr->coll.algo->name, how, compress, s->reducer.nbuckets, s->reducer.nbuckets == 1 ? "" : "s",
           cfg.bucket_mb, s->reducer.overlap ? "overlapped with backward" : "after backward", pieces);
}

/* Rank 0, --verbose: what is about to train, on what, how. */
static void print_setup(const struct dt_trainer *tr, int nranks)
{
    const struct dt_split *test = &tr->data.split[DT_TEST];
    const int replicas = tr->pipe.on ? tr->strategy.nreplicas : nranks; /* a pipeline's replicas span P ranks */
    printf("dtrain %s: %d replica%s x batch %d = global batch %d; model %s (%zu parameters); %lld training "
           "samples%s\n", PACKAGE_VERSION, replicas, replicas == 1 ? "" : "s", cfg.batch_size, cfg.batch_size * replicas,
           cfg.model, tr->model.nparams, (long long)tr->data.split[DT_TRAIN].n,
           !test->present || !cfg.validation ? ""
           : test->n > 0 ? ", validating on /test" : "; /test is empty, so there is no validation");
    const struct dt_loss_scale *ls = &tr->strategy.loss_scale;
    char acts[32] = "";
    if (cfg.precision != DT_PREC_FP32)
        snprintf(acts, sizeof acts, " (activations %s)", dt_precision_name(tr->model.act_type));
    printf("device: %s%s; precision %s%s; activation memory %.1f MiB per rank at batch %d%s%s%s\n", tr->device.desc,
           nranks > 1 ? " (rank 0)" : "", dt_precision_name(cfg.precision), acts,
           (double)tr->model.act_bytes / 1048576.0, tr->model.max_n,
           tr->model.recompute ? " (--recompute)" : "",
           ls->on ? (ls->dynamic ? ", dynamic loss scale" : ", fixed loss scale") : "",
           tr->graphs.on ? "; CUDA graphs (forward, loss and backward in one launch; buckets after it)" : "");
    const char *core = dt_cpu_blas_core(), *from = dt_cpu_blas_from();
    if (core && from)
        printf("BLAS: OpenBLAS %s kernels (OpenBLAS took this CPU for %s; dtrain restarted with OPENBLAS_CORETYPE=%s)\n",
               core, from, core);
    else if (core)
        printf("BLAS: OpenBLAS %s kernels%s\n", core, getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "");
    print_layout(tr, nranks);
    if (cfg.verbose >= DT_VERBOSE) dt_model_summary(&tr->model, stdout);
    if (cfg.verbose >= DT_VERBOSE && tr->pipe.cost) { /* why the cut is where it is */
        printf("pipeline: layer times measured for the cut (forward + backward of a micro-batch, ms):");
        for (int i = 0; i < tr->model.nlayers; i++)
            printf("%s %s %.3f", i ? "," : "", tr->model.layers[i].name, 1e3 * tr->pipe.cost[i]);
        printf("\n");
    }
    fflush(stdout);
}

/* Rank 0, --verbose, --cuda-graphs: how many steps the graphs ran. */
static void print_graphs(const struct dt_step_graphs *g)
{
    printf("CUDA graphs: %ld step%s replayed from %ld recording%s, %ld run plainly (first of a shape%s)\n",
           g->replayed, g->replayed == 1 ? "" : "s", g->recorded, g->recorded == 1 ? "" : "s", g->plain,
           g->failed ? ", or a failed recording" : "");
    if (g->failed) printf("CUDA graphs: %ld recording%s failed, the last: %s\n", g->failed, g->failed == 1 ? "" : "s", g->why);
}

int main(int argc, char **argv)
{
    struct dt_trainer trainer;
    dt_status st = {0};
    int rank, nranks;
    dt_cpu_blas_prepare(argv);
    if (start_mpi(&argc, &argv, &rank, &nranks) != DT_OK) return finish(DT_ERUNTIME);
    if (dt_options_parse(&cfg, argc, argv, &st) != DT_OK) {
        say_error(rank, &st);
        return finish(st.code);
    }
    if (cfg.help || cfg.version || cfg.preflight || cfg.list_devices) return finish(other_mode(rank, &st));
    if (dt_trainer_init(&trainer, &cfg, MPI_COMM_WORLD, &st) != DT_OK) {
        say_error(rank, &st);
        dt_trainer_free(&trainer);
        return finish(st.code);
    }
    if (rank == 0 && cfg.verbose >= DT_NORMAL) print_setup(&trainer, nranks);
    int rc = dt_trainer_fit(&trainer, stdout, &st);
    if (rc == DT_EXIT_REQUEUE && rank == 0) fprintf(stderr, "dtrain: %s\n", st.msg); /* not an error */
    else if (rc != DT_OK) say_error(rank, &st);
    if (rc == DT_OK && cfg.verbose >= DT_NORMAL) dt_trainer_report_memory(&trainer, stdout);
    if (rc == DT_OK && cfg.verbose >= DT_NORMAL && rank == 0 && trainer.graphs.on) print_graphs(&trainer.graphs);
    dt_trainer_free(&trainer);
    return finish(rc);
}

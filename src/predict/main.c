/* main.c (dtrain-predict): step time, throughput and scaling efficiency of a
 * model on 1 to 1024 nodes, for each all-reduce algorithm and bucket size,
 * from the alpha-beta model in commmodel.h and a measured (or given)
 * compute time per step. With --compare, the model's prediction for each
 * run of a scaling study (jobscripts/scaling-study's summary CSV) beside
 * what was measured, and the error. With --pipeline-stages P, the model cut
 * into P stages instead: each stage's bytes, the bubble, and the step of the
 * P x D mesh against data parallelism on the same ranks.
 *
 * The model's gradient (its parameter count, layer boundaries for buckets,
 * and an estimate of each layer's backward work for when buckets become
 * ready) comes from building it exactly as dtrain does (nn/model.h); no MPI
 * and no backend are needed. The same work estimate weighs the layers of a
 * pipeline's stages, balanced by the rule dtrain balances its measured
 * layer times by (dt_pipe_balance), so the two cut alike where work and
 * time agree. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "collectives/reducer.h"
#include "nn/model.h"
#include "predict/commmodel.h"
#include "predict/grad.h"
#include "predict/predict.h"
#include "runtime/status.h"
#include "strategy/memplan.h"

/* Bytes per rank under o->strategy at each node count (strategy/memplan.h). */
static void print_memory(const struct opts *o, const struct dt_model *m, const struct dt_cluster *c)
{
    const double G = 1073741824.0;
    const int fsdp = !strcmp(o->strategy, "fsdp");
    printf("\nmemory per rank under %s (%s, fp32, batch %d%s), GiB: parameters + gradients + optimizer slots%s + "
           "activations = per rank (per node of %d ranks)\n", o->strategy, o->slots ? "adam" : "sgd", o->batch,
           m->recompute ? ", --recompute" : "", fsdp ? " + gathered buckets" : "", c->ranks_per_node);
    for (int i = 0; i < o->nnodes; i++) {
        struct dt_mem_plan p;
        int ranks = o->nodes[i] * c->ranks_per_node;
        char gathered[32] = "";
        dt_mem_plan(m, o->strategy, o->slots, ranks, c->ranks_per_node, o->nbucket ? o->bucket_mb[0] : 1.0, o->batch,
                    sizeof(float), &p);
        if (fsdp) snprintf(gathered, sizeof gathered, " + %.3f", p.gathered / G);
        printf("  %5d node%s, %6d ranks: %.3f + %.3f + %.3f%s + %.3f = %.3f (%.2f)\n", o->nodes[i],
               o->nodes[i] == 1 ? " " : "s", ranks, p.params / G, p.grads / G, p.slots / G, gathered,
               p.activations / G, dt_mem_plan_total(&p) / G, dt_mem_plan_total(&p) * c->ranks_per_node / G);
        if (p.mapped > 0)
            printf("  %18s each rank's RSS also counts the node's other ranks' shared windows it maps: + %.3f = "
                   "%.3f\n", "", p.mapped / G, dt_mem_plan_rss(&p) / G);
    }
}


static void usage(FILE *f)
{
    fprintf(f,
        "Usage: dtrain-predict [OPTIONS]\n"
        "Predict dtrain's step time, throughput and weak-scaling efficiency on 1 to\n"
        "1024 nodes from an alpha-beta model of each all-reduce algorithm.\n"
        "\n"
        "The model and its step:\n"
        "  -m, --model NAME|FILE   cnn (default), mlp or a model file (inputs/*.cfg)\n"
        "      --input HxWxC:K     image shape and classes (default 28x28x1:10;\n"
        "                          32x32x3:10 for a model file named resnet*), or\n"
        "                          tokens:V: windows of the model's block_size over\n"
        "                          a vocabulary of V (default 256 for a model file\n"
        "                          named gpt*)\n"
        "  -b, --batch B           samples per replica per step (default 64)\n"
        "      --compute-ms T      one replica's forward + backward + update at batch B\n"
        "      --metrics FILE.csv  ... or take it from a 1-rank dtrain --metrics file\n"
        "                          (its last epoch: step time less data wait)\n"
        "      --data-ms D         data wait per step (default 0, or the metrics file's)\n"
        "      --forward-fraction F  forward's share of the compute (default 0.33)\n"
        "\n"
        "The machine and the exchange:\n"
        "      --cluster NAME|FILE this-machine, hdr200-cpu (default), dgx-h100, or a\n"
        "                          file: ranks_per_node, alpha_intra_us, bw_intra_gbs,\n"
        "                          alpha_inter_us, bw_inter_gbs (GB/s = 1e9 bytes/s)\n"
        "      --ranks-per-node Q  override the cluster's\n"
        "      --fit BENCH.csv     fit the link between nodes (alpha, beta) to a\n"
        "                          dtrain-bench-allreduce --csv run at one rank per\n"
        "                          node, and use it (--cluster gives the rest;\n"
        "                          default then this-machine)\n"
        "      --fit-out FILE      also write the fitted cluster file\n"
        "  -a, --algorithms LIST   from ring, mpi, hier (default: all three)\n"
        "      --bucket-mb LIST    gradient bucket sizes in MiB (default 1,4,16;\n"
        "                          0 = one bucket for the whole gradient)\n"
        "      --no-overlap        buckets reduced after backward (default: during)\n"
        "      --strategy S        mirrored (default: data parallelism, as multi-worker),\n"
        "                          sharded (ZeRO-1: reduce-scatter and all-gather after\n"
        "                          backward) or fsdp (ZeRO-3: each bucket all-gathered in\n"
        "                          forward and backward and reduce-scattered, 1.5x an\n"
        "                          all-reduce's bytes); also sizes the memory table\n"
        "      --optimizer O       adam (default: 2 slots a parameter) or sgd (none),\n"
        "                          for the memory table\n"
        "      --memory            only the memory table: bytes per rank under\n"
        "                          --strategy at each node count (no compute time needed)\n"
        "      --recompute         the memory table of dtrain --recompute: each block's\n"
        "                          inner activations held for one block at a time\n"
        "      --pipeline-stages P the model cut into P stages on a P x D mesh (default 1:\n"
        "                          none): the cut ([stage] lines, or balanced work), each\n"
        "                          stage's bytes, the bubble and the step against data\n"
        "                          parallelism on the same ranks (with --strategy mirrored)\n"
        "      --micro-batches M   micro-batches a batch is split into (default 4; needs\n"
        "                          --pipeline-stages)\n"
        "      --grad-compression C  none (default), fp16 or bf16 (half the bytes), or\n"
        "                          powersgd:R (two thin factors per kernel, dtrain's rule)\n"
        "      --compress-gflops G PowerSGD's arithmetic rate (default 10 GFLOP/s)\n"
        "      --nodes LIST        node counts (default 1,2,4,...,1024)\n"
        "      --threshold E       the efficiency whose limit is reported (default 0.9)\n"
        "\n"
        "Output:\n"
        "      --csv FILE          every prediction as CSV\n"
        "      --compare FILE      a scaling study's summary CSV: predicted against\n"
        "                          measured step time, per run of this model\n"
        "  -h, --help              this help;  -V, --version\n");
}

static int parse_list_d(const char *flag, const char *s, double *v, int *n, double lo, dt_status *st)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        double x = strtod(t, &end);
        if (errno || end == t || *end || !(x >= lo) || !isfinite(x) || *n == MAXN)
            return dt_fail(st, DT_EUSAGE, "%s: expected a comma-separated list of numbers >= %g, found '%s'", flag, lo, t);
        v[(*n)++] = x;
    }
    if (!*n) return dt_fail(st, DT_EUSAGE, "%s: empty list", flag);
    return DT_OK;
}

static int parse_number(const char *flag, const char *s, double lo, double hi, double *out, dt_status *st)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || *end || !(x >= lo && x <= hi))
        return dt_fail(st, DT_EUSAGE, "%s: expected a number in [%g, %g], found '%s'", flag, lo, hi, s);
    *out = x;
    return DT_OK;
}

/* The last epoch row of a dtrain --metrics CSV: its step time (seconds over
 * steps) less the data wait and the exposed communication. */
static int read_metrics(const char *path, double *compute_ms, double *data_ms, dt_status *st)
{
    FILE *f = fopen(path, "r");
    if (!f) return dt_fail(st, DT_EUSAGE, "--metrics %s: %s", path, strerror(errno));
    enum { K_KIND, K_STEP, K_SECONDS, K_WAIT, K_DATA, NK };
    static const char *const names[NK] = {"kind", "step", "seconds", "wait_ms", "data_ms"};
    int col[NK] = {-1, -1, -1, -1, -1}, k = 0;
    char line[4096], last[4096] = "";
    char *save = NULL;
    if (fgets(line, sizeof line, f))
        for (char *t = strtok_r(line, ",\r\n", &save); t; t = strtok_r(NULL, ",\r\n", &save), k++)
            for (int j = 0; j < NK; j++)
                if (!strcmp(t, names[j])) col[j] = k;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "epoch,", 6)) memcpy(last, line, sizeof last);
    fclose(f);
    if (col[K_KIND] < 0 || col[K_STEP] < 0 || col[K_SECONDS] < 0 || !last[0])
        return dt_fail(st, DT_EINPUT, "--metrics %s: expected a dtrain --metrics CSV (kind, step, seconds, ... "
                       "columns) with at least one epoch row", path);
    double v[64] = {0};
    k = 0;
    save = NULL;
    for (char *t = strtok_r(last, ",\r\n", &save); t && k < 64; t = strtok_r(NULL, ",\r\n", &save)) v[k++] = atof(t);
    double step_ms = v[col[K_STEP]] > 0 ? 1e3 * v[col[K_SECONDS]] / v[col[K_STEP]] : 0.0;
    *data_ms = col[K_DATA] >= 0 ? v[col[K_DATA]] : 0.0;
    *compute_ms = step_ms - *data_ms - (col[K_WAIT] >= 0 ? v[col[K_WAIT]] : 0.0);
    if (!(*compute_ms > 0.0))
        return dt_fail(st, DT_EINPUT, "--metrics %s: the last epoch's step time is %g ms", path, step_ms);
    return DT_OK;
}

/* --fit: the link fitted to a benchmark's ring rows replaces the cluster's. */
static int fit(const struct opts *o, struct dt_cluster *c, dt_status *st)
{
    double worst = 0;
    if (dt_cm_fit(o->fit, c, c, &worst, st) != DT_OK) return st->code;
    printf("fit %s: between nodes %.1f us + %.4g GB/s per message (%.4g Gbit/s); the line is within %.0f%% of "
           "every measured size\n", o->fit, c->alpha_inter * 1e6, 1e-9 / c->beta_inter, 8e-9 / c->beta_inter,
           100.0 * worst);
    if (c->mpi_beta_factor != 1.0)
        printf("fit: MPI_Allreduce moves bytes %.2fx as slowly as the model's mpi on this link (mpi_beta_factor)\n",
               c->mpi_beta_factor);
    if (o->fit_out && dt_cm_cluster_write(c, o->fit_out, st) != DT_OK) return st->code;
    if (o->fit_out) printf("fit: wrote %s (--cluster %s)\n", o->fit_out, o->fit_out);
    return DT_OK;
}

/* The gradient's buckets as dt_cm_buckets fills them (static: each holds
 * DT_CM_MAXBUCKETS). */
static double g_bytes[DT_CM_MAXBUCKETS], g_bytes2[DT_CM_MAXBUCKETS], g_cpu[DT_CM_MAXBUCKETS],
    g_ready[DT_CM_MAXBUCKETS];

/* One data-parallel replica's step at bucket_mb with compute_s of compute:
 * the efficiency table's and the pipeline's comparison's, built once. */
static struct dt_cm_step dp_step(const struct opts *o, const struct dt_model *m, double bucket_mb, double compute_s)
{
    int nb = dt_cm_buckets(m, bucket_mb, &o->x, g_bytes, g_bytes2, g_cpu, g_ready);
    /* fsdp moves each bucket three times (two all-gathers, one reduce-scatter) where an all-reduce
     * is a reduce-scatter and an all-gather: 1.5x its bytes, still behind the compute. */
    for (int k = 0; k < nb && !strcmp(o->strategy, "fsdp"); k++) g_bytes[k] *= 1.5;
    return (struct dt_cm_step){.forward_s = o->fwd_frac * compute_s, .backward_s = (1.0 - o->fwd_frac) * compute_s,
                               .data_s = o->data_ms * 1e-3, .nbuckets = nb, .bucket_bytes = g_bytes,
                               .bucket_ready = g_ready, .bucket_bytes2 = g_bytes2, .bucket_cpu = g_cpu,
                               /* ZeRO-1 reduces after backward */
                               .overlap = o->overlap && strcmp(o->strategy, "sharded") != 0, .half = o->x.half};
}

/* The weak-scaling table: a row per algorithm and bucket size, a column per
 * node count, and each cell as a CSV row. */
static void print_efficiency(const struct opts *o, const struct dt_model *m, const struct dt_cluster *c, FILE *csv)
{
    if (csv)
        fprintf(csv, "model,cluster,algorithm,bucket_mb,overlap,nodes,ranks_per_node,ranks,comm_ms,exposed_ms,"
                "step_ms,samples_per_s,efficiency\n");
    printf("\nweak-scaling efficiency (step at 1 rank / step at N nodes x %d ranks):\n", c->ranks_per_node);
    printf("%-5s %7s", "algo", "bucket");
    for (int i = 0; i < o->nnodes; i++) printf(" %6d", o->nodes[i]);
    printf("   %.0f%% up to\n", 100.0 * o->threshold);
    for (int ai = 0; ai < o->nalgo; ai++)
        for (int bi = 0; bi < o->nbucket; bi++) {
            int algo = o->algos[ai];
            double cs = o->compute_ms * 1e-3;
            struct dt_cm_step s = dp_step(o, m, o->bucket_mb[bi], cs);
            double one = cs + s.data_s;
            int limit = 0;
            printf("%-5s %6.3g%s", dt_cm_algo_name(algo), o->bucket_mb[bi], o->bucket_mb[bi] > 0 ? "M" : "all");
            for (int i = 0; i < o->nnodes; i++) {
                struct dt_cm_result r = dt_cm_predict(c, algo, o->nodes[i], c->ranks_per_node, &s);
                double eff = one / r.step_s;
                int ranks = o->nodes[i] * c->ranks_per_node;
                if (eff >= o->threshold && o->nodes[i] > limit) limit = o->nodes[i];
                printf(" %6.3f", eff);
                if (csv)
                    fprintf(csv, "%s,%s,%s,%g,%d,%d,%d,%d,%.6f,%.6f,%.6f,%.1f,%.5f\n", m->name, c->name,
                            dt_cm_algo_name(algo), o->bucket_mb[bi], o->overlap, o->nodes[i], c->ranks_per_node,
                            ranks, 1e3 * r.comm_s, 1e3 * r.exposed_s, 1e3 * r.step_s, ranks * o->batch / r.step_s,
                            eff);
            }
            if (limit) printf("   %d node%s\n", limit, limit == 1 ? "" : "s");
            else printf("   none\n");
        }
}

/* A pipelined run's layout (--pipeline-stages P > 1). */
struct pipe_plan {
    int P, M, marked; /* stages, micro-batches; whether [stage] lines made the cut */
    int *cut;         /* [P + 1]: stage k runs layers [cut[k], cut[k + 1]) */
    double *share;    /* [P]: stage k's share of the forward + backward work */
};

static void pipe_plan_free(struct pipe_plan *pp)
{
    free(pp->cut);
    free(pp->share);
}

/* Parameters of stage k: its layers' span of the flat block. */
static size_t stage_params(const struct dt_model *m, const int *cut, int k)
{
    const size_t end = cut[k + 1] < m->nlayers ? m->layers[cut[k + 1]].param_offset : m->nparams;
    return end - m->layers[cut[k]].param_offset;
}

/* Stage k's layers as "0-24", or "25" for one. */
static void stage_layers(char *buf, size_t n, const int *cut, int k)
{
    if (cut[k + 1] - 1 > cut[k]) snprintf(buf, n, "%d-%d", cut[k], cut[k + 1] - 1);
    else snprintf(buf, n, "%d", cut[k]);
}

/* The cut: the model file's [stage] lines, else the compute model's work
 * balanced; refused as dtrain refuses it (train/pipeline.c), so a layout
 * predicted here is one dtrain runs. */
static int pipe_plan(const struct opts *o, const struct dt_model *m, struct pipe_plan *pp, dt_status *st)
{
    const int P = o->pipe_p, L = m->nlayers;
    int marks = 0, places = 0;
    for (int i = 1; i < L; i++) {
        marks += m->layers[i].spec.stage != 0;
        places += dt_model_can_cut(m, i);
    }
    if (places + 1 < P)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d: model %s can be cut in only %d place%s (%d stage%s at "
                       "most): a stage may not start inside a residual block", P, m->name, places,
                       places == 1 ? "" : "s", places + 1, places ? "s" : "");
    if (marks && marks + 1 != P)
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d: model %s has %d [stage] line%s, which make%s %d stage%s; "
                       "give --pipeline-stages %d, or add or remove [stage] lines", P, m->name, marks,
                       marks == 1 ? "" : "s", marks == 1 ? "s" : "", marks + 1, marks ? "s" : "", marks + 1);
    *pp = (struct pipe_plan){.P = P, .M = o->micro_m, .marked = marks > 0, .cut = dt_xcalloc((size_t)P + 1, sizeof(int)),
                             .share = dt_xcalloc((size_t)P, sizeof(double))};
    double *cost = dt_xcalloc((size_t)L, sizeof(double)), total = 0.0;
    for (int i = 0; i < L; i++) /* forward's work is half of backward's */
        total += cost[i] = 1.5 * dt_cm_layer_work(&m->layers[i]);
    pp->cut[P] = L;
    for (int i = 1, k = 1; i < L && marks; i++)
        if (m->layers[i].spec.stage) {
            if (!dt_model_can_cut(m, i)) {
                free(cost);
                return dt_fail(st, DT_EUSAGE, "model %s: the [stage] before layer %s cuts through a residual block "
                               "(a later add or route reads an output before it, or an add is folded into the layer "
                               "before); move it", m->name, m->layers[i].name);
            }
            pp->cut[k++] = i;
        }
    if (!marks) dt_pipe_balance(m, cost, P, pp->cut);
    for (int k = 0; k < P; k++) /* every layer has an output, so total > 0 */
        for (int i = pp->cut[k]; i < pp->cut[k + 1]; i++) pp->share[k] += cost[i] / total;
    free(cost);
    return DT_OK;
}

/* "pipeline: ... layers 0-24 | 25-43 | 44 (work 40.0% | ...)": the cut. */
static void print_pipe_cut(const struct pipe_plan *pp)
{
    printf("pipeline: %d stages x %d micro-batches, cut %s: layers", pp->P, pp->M,
           pp->marked ? "at the model file's [stage] lines" : "balancing the layers' forward + backward work");
    for (int k = 0; k < pp->P; k++) {
        char layers[32];
        stage_layers(layers, sizeof layers, pp->cut, k);
        printf("%s %s", k ? " |" : "", layers);
    }
    printf(" (work");
    for (int k = 0; k < pp->P; k++) printf("%s %.1f%%", k ? " |" : "", 100.0 * pp->share[k]);
    printf(")\n");
}

/* Bytes per rank of each stage (dt_mem_plan_pipeline), and the largest
 * against data parallelism's whole model a rank. */
static void print_pipe_memory(const struct opts *o, const struct dt_model *m, const struct pipe_plan *pp)
{
    const double G = 1073741824.0;
    double largest = 0.0;
    printf("\nmemory per rank under %d pipeline stages x %d micro-batches (%s, fp32, batch %d%s), GiB: parameters + "
           "gradients + optimizer slots + activations = per rank\n", pp->P, pp->M, o->slots ? "adam" : "sgd", o->batch,
           m->recompute ? ", --recompute" : "");
    for (int k = 0; k < pp->P; k++) {
        struct dt_mem_plan p;
        char layers[32];
        dt_mem_plan_pipeline(m, pp->cut, pp->P, pp->M, k, o->slots, o->batch, sizeof(float), &p);
        stage_layers(layers, sizeof layers, pp->cut, k);
        double total = dt_mem_plan_total(&p);
        if (total > largest) largest = total;
        printf("  stage %2d, layers %-9s %11zu parameters: %.3f + %.3f + %.3f + %.3f = %.3f\n", k, layers,
               stage_params(m, pp->cut, k), p.params / G, p.grads / G, p.slots / G, p.activations / G, total / G);
    }
    struct dt_mem_plan dp;
    dt_mem_plan(m, "mirrored", o->slots, pp->P, 1, 1.0, o->batch, sizeof(float), &dp);
    printf("largest stage %.3f GiB a rank against data parallelism's %.3f (mirrored: the whole model a rank, batch "
           "%d): %.3fx\n", largest / G, dt_mem_plan_total(&dp) / G, o->batch, largest / dt_mem_plan_total(&dp));
}

/* Seconds to send bytes from stage k-1 to stage k in every replica at once
 * (mesh rank stage * D + replica, Q ranks a node): one message inside a
 * node, or across, where the flows leaving a node share its interface
 * (commmodel.h's beta_inter is the node's). */
static double pipe_link_s(const struct dt_cluster *c, int D, int k, double bytes)
{
    const int Q = c->ranks_per_node;
    int node = -1, flows = 0, most = 0;
    for (int r = 0; r < D; r++) {
        const int from = (k - 1) * D + r, to = k * D + r;
        if (from / Q == to / Q) continue;
        if (from / Q != node) { /* the sources are contiguous: a new node starts a new count */
            node = from / Q;
            flows = 0;
        }
        if (++flows > most) most = flows;
    }
    return most ? c->alpha_inter + most * bytes * c->beta_inter : c->alpha_intra + bytes * c->beta_intra;
}

/* Seconds of one step of the P x D mesh at nodes x Q ranks (D = nodes Q /
 * P): (M + P - 1) slots of the slowest stage's micro-batch, an activation
 * and its gradient across the slowest link in each slot, then the slowest
 * stage's gradient all-reduce over its D replicas (the fastest algorithm),
 * as if on whole nodes; its parts into part[3]. */
static double pipe_step_s(const struct opts *o, const struct dt_model *m, const struct dt_cluster *c,
                          const struct pipe_plan *pp, int nodes, double part[3])
{
    const int P = pp->P, M = pp->M, Q = c->ranks_per_node, D = nodes * Q / P;
    const int micro = o->batch / M + (o->batch % M != 0); /* the largest (the first n%M hold one more) */
    const int qd = D < Q ? D : Q, nd = (D + qd - 1) / qd;
    double slowest = 0.0, link = 0.0, reduce = 0.0;
    for (int k = 0; k < P; k++) {
        if (pp->share[k] > slowest) slowest = pp->share[k];
        if (k > 0) { /* the cut's activation: layer cut[k]'s input, one micro-batch of fp32 */
            double t = pipe_link_s(c, D, k, 4.0 * (double)dt_shape_size(m->layers[pp->cut[k] - 1].out) * micro);
            if (t > link) link = t;
        }
        double bytes = (o->x.half ? 2.0 : 4.0) * (double)stage_params(m, pp->cut, k), best = -1.0;
        for (int a = 0; a < o->nalgo; a++) {
            double t = dt_cm_allreduce(c, o->algos[a], nd, qd, bytes);
            if (best < 0.0 || t < best) best = t;
        }
        if (best > reduce) reduce = best;
    }
    part[0] = (M + P - 1) * slowest * o->compute_ms * 1e-3 / M;
    part[1] = 2.0 * (M + P - 1) * link;
    part[2] = reduce;
    return part[0] + part[1] + part[2] + o->data_ms * 1e-3;
}

/* Data parallelism's best step (of --algorithms and --bucket-mb) on the
 * same ranks at the same global batch: each rank 1/P of a replica's. */
static double dp_best_s(const struct opts *o, const struct dt_model *m, const struct dt_cluster *c, int P, int nodes)
{
    double best = -1.0;
    for (int bi = 0; bi < o->nbucket; bi++) {
        struct dt_cm_step s = dp_step(o, m, o->bucket_mb[bi], o->compute_ms * 1e-3 / P);
        for (int a = 0; a < o->nalgo; a++) {
            double t = dt_cm_predict(c, o->algos[a], nodes, c->ranks_per_node, &s).step_s;
            if (best < 0.0 || t < best) best = t;
        }
    }
    return best;
}

/* The stages' compute and bubble, then a row per node count: the mesh's
 * step and its parts beside data parallelism's. */
static void print_pipe_step(const struct opts *o, const struct dt_model *m, const struct dt_cluster *c,
                            const struct pipe_plan *pp)
{
    const int P = pp->P, M = pp->M;
    double slowest = 0.0;
    printf("\ncompute per stage, ms:");
    for (int k = 0; k < P; k++) {
        printf("%s %.3f", k ? " |" : "", pp->share[k] * o->compute_ms);
        if (pp->share[k] > slowest) slowest = pp->share[k];
    }
    /* the stages' busy time over the P (M + P - 1) slots they hold; sum of shares is 1 */
    printf("; a micro-batch %.3f ms on the slowest\nbubble %.1f%% ideal ((P-1)/(M+P-1)), %.1f%% with the stages' "
           "imbalance\n", slowest * o->compute_ms / M, 100.0 * dt_pipe_bubble_ideal(P, M),
           100.0 * (1.0 - 1.0 / (P * (M + P - 1) * slowest / M)));
    printf("\npredicted step, ms: (M+P-1) slots of the slowest stage's micro-batch + activations and gradients between "
           "stages\n+ the slowest stage's all-reduce over its replicas + data wait; data parallelism on the same ranks "
           "at the\nsame global batch (%g samples a rank), the best of --algorithms and --bucket-mb:\n",
           (double)o->batch / P);
    printf("%5s %6s %8s %9s %8s %9s %9s %10s %9s %7s\n", "nodes", "ranks", "replicas", "slots", "p2p", "allreduce",
           "pipeline", "samples/s", "data-par", "pipe/dp");
    for (int i = 0; i < o->nnodes; i++) {
        const int ranks = o->nodes[i] * c->ranks_per_node;
        if (ranks % P) { /* the mesh needs P x D ranks */
            printf("%5d %6d  (not a multiple of %d stages)\n", o->nodes[i], ranks, P);
            continue;
        }
        double part[3], step = pipe_step_s(o, m, c, pp, o->nodes[i], part), dp = dp_best_s(o, m, c, P, o->nodes[i]);
        printf("%5d %6d %8d %9.3f %8.3f %9.3f %9.3f %10.1f %9.3f %7.3f\n", o->nodes[i], ranks, ranks / P,
               1e3 * part[0], 1e3 * part[1], 1e3 * part[2], 1e3 * step, ranks / P * o->batch / step, 1e3 * dp,
               step / dp);
    }
}

/* --input: HxWxC:CLASSES images, or tokens:V, windows of the model's
 * block_size over a vocabulary of V (a language model: dtrain-prep --text). */
static int token_input(const struct opts *o, struct dt_shape *in, int *classes, dt_status *st)
{
    char *end;
    if (!strncmp(o->input, "tokens:", 7)) {
        long v = strtol(o->input + 7, &end, 10);
        if (end == o->input + 7 || *end || v < 2 || v > INT_MAX)
            return dt_fail(st, DT_EUSAGE, "--input tokens:V: expected a vocabulary of at least 2 tokens, found '%s'",
                           o->input);
        struct dt_layer_spec *specs;
        int n;
        int rc = dt_model_specs(o->model, (int)v, 0.5f, &specs, &n, st);
        if (rc == DT_OK && (n < 1 || strcmp(specs[0].type, "embedding")))
            rc = dt_fail(st, DT_EUSAGE, "--input %s: model %s does not start with [embedding] (token windows need "
                         "a language model)", o->input, o->model);
        if (rc == DT_OK) *in = (struct dt_shape){1, specs[0].block + 1, (int)sizeof(int32_t)};
        free(specs);
        *classes = (int)v;
        return rc;
    }
    if (sscanf(o->input, "%dx%dx%d:%d", &in->h, &in->w, &in->c, classes) != 4 || in->h < 1 || in->w < 1 ||
        in->c < 1 || *classes < 2 || *classes > 256)
        return dt_fail(st, DT_EUSAGE, "--input: expected HxWxC:CLASSES (e.g. 32x32x3:10, 2..256 classes) or "
                       "tokens:V, found '%s'", o->input);
    return DT_OK;
}

static int run(struct opts *o, dt_status *st)
{
    struct dt_cluster c;
    if (dt_cm_cluster_load(o->cluster, &c, st) != DT_OK) return st->code;
    if (o->q > 0) c.ranks_per_node = o->q;
    if (o->fit && fit(o, &c, st) != DT_OK) return st->code;
    if (o->fit && !(o->compute_ms > 0.0) && !o->metrics && !o->compare) return DT_OK;
    struct dt_shape in;
    int classes;
    if (token_input(o, &in, &classes, st) != DT_OK) return st->code;
    struct dt_model m;
    struct pipe_plan pp = {0};
    int rc = DT_OK;
    FILE *csv = NULL;
    if (dt_model_build(&m, o->model, in, classes, 0.5f, st) != DT_OK) rc = st->code;
    else if (o->recompute && dt_model_set_recompute(&m, st) != DT_OK) rc = st->code;
    else if (o->pipe_p > 1 && pipe_plan(o, &m, &pp, st) != DT_OK) rc = st->code;
    else if (o->metrics && read_metrics(o->metrics, &o->compute_ms, &o->data_ms, st) != DT_OK) rc = st->code;
    else if (!o->memory_only && !(o->compute_ms > 0.0) && !o->compare)
        rc = dt_fail(st, DT_EUSAGE, "give the compute time per step: --compute-ms T or --metrics FILE.csv");
    else if (!o->memory_only && o->csv && !(csv = fopen(o->csv, "w")))
        rc = dt_fail(st, DT_EUSAGE, "--csv %s: %s", o->csv, strerror(errno));
    if (rc != DT_OK) {
        pipe_plan_free(&pp);
        dt_model_free(&m);
        return rc;
    }
    if (o->memory_only) {
        printf("model %s: %zu parameters\n", m.name, m.nparams);
        if (pp.P) print_pipe_cut(&pp);
        if (pp.P) print_pipe_memory(o, &m, &pp);
        else print_memory(o, &m, &c);
        pipe_plan_free(&pp);
        dt_model_free(&m);
        return DT_OK;
    }
    double grad_mib = (double)m.nparams * (o->x.half ? 2.0 : 4.0) / 1048576.0;
    printf("model %s: %zu parameters, gradient %.2f MiB%s; batch %d per replica\n", m.name, m.nparams, grad_mib,
           o->x.half ? " (16-bit transport)" : o->x.psgd_rank ? " (before PowerSGD)" : "", o->batch);
    printf("cluster %s: %d ranks per node; inside a node %.1f us + %.4g GB/s, between nodes %.1f us + %.4g GB/s\n  (%s)\n",
           c.name, c.ranks_per_node, c.alpha_intra * 1e6, 1e-9 / c.beta_intra, c.alpha_inter * 1e6,
           1e-9 / c.beta_inter, c.about);
    if (o->compute_ms > 0.0 && pp.P) {
        printf("compute %.2f ms per step of a replica (forward %.0f%%), data wait %.2f ms\n", o->compute_ms,
               100.0 * o->fwd_frac, o->data_ms);
        print_pipe_cut(&pp);
        print_pipe_step(o, &m, &c, &pp);
        print_pipe_memory(o, &m, &pp);
    } else if (o->compute_ms > 0.0) {
        printf("compute %.2f ms per step (forward %.0f%%), data wait %.2f ms; strategy %s, buckets %s\n",
               o->compute_ms, 100.0 * o->fwd_frac, o->data_ms, o->strategy,
               !strcmp(o->strategy, "fsdp") ? "all-gathered and reduce-scattered beside the compute"
               : !strcmp(o->strategy, "sharded") || !o->overlap ? "after backward" : "reduced during backward");
        print_efficiency(o, &m, &c, csv);
        print_memory(o, &m, &c);
    }
    if (csv) fclose(csv);
    rc = o->compare ? dt_predict_compare(o, &m, &c, st) : DT_OK;
    pipe_plan_free(&pp);
    dt_model_free(&m);
    return rc;
}

/* What the options mean together, and the defaults that depend on others. */
static int finish_opts(struct opts *o, dt_status *st)
{
    if (o->fit_out && !o->fit) return dt_fail(st, DT_EUSAGE, "--fit-out: needs --fit BENCH.csv");
    if (o->fit && !o->cluster_given) o->cluster = "this-machine";
    if (o->metrics && o->compute_ms > 0.0)
        return dt_fail(st, DT_EUSAGE, "--metrics and --compute-ms: give one of them");
    if (o->micro_given && o->pipe_p < 2)
        return dt_fail(st, DT_EUSAGE, "--micro-batches: splits a batch between pipeline stages; give "
                       "--pipeline-stages P (P > 1) too");
    if (o->pipe_p > 1 && strcmp(o->strategy, "mirrored"))
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d with --strategy %s: a pipeline's stages all-reduce their "
                       "gradients over their replicas (data parallelism inside each stage); use --strategy mirrored "
                       "with it, or no stages", o->pipe_p, o->strategy);
    if (o->pipe_p > 1 && o->micro_m > o->batch)
        return dt_fail(st, DT_EUSAGE, "--micro-batches %d: more micro-batches than the %d samples of a batch (--batch)",
                       o->micro_m, o->batch);
    /* the CSV, the comparison and PowerSGD's factors are data parallelism's */
    if (o->pipe_p > 1 && (o->csv || o->compare || o->x.psgd_rank))
        return dt_fail(st, DT_EUSAGE, "--pipeline-stages %d with %s: predicted for data parallelism only; drop one "
                       "of them", o->pipe_p, o->csv ? "--csv" : o->compare ? "--compare" : "--grad-compression powersgd");
    if (!o->input) {
        const char *b = strrchr(o->model, '/');
        o->input = !strncmp(b ? b + 1 : o->model, "resnet", 6) ? "32x32x3:10"
                   : !strncmp(b ? b + 1 : o->model, "gpt", 3)  ? "tokens:256"
                                                               : "28x28x1:10";
    }
    if (!o->nalgo) {
        o->nalgo = DT_CM_NALGOS;
        for (int a = 0; a < DT_CM_NALGOS; a++) o->algos[a] = a;
    }
    if (!o->nbucket) {
        o->nbucket = 3;
        o->bucket_mb[0] = 1;
        o->bucket_mb[1] = 4;
        o->bucket_mb[2] = 16;
    }
    if (!o->nnodes)
        for (int k = 1; k <= 1024; k *= 2) o->nodes[o->nnodes++] = k;
    return DT_OK;
}

int main(int argc, char **argv)
{
    struct opts o = {.strategy = "mirrored", .slots = 2, .model = "cnn", .input = NULL, .cluster = "hdr200-cpu", .batch = 64, .overlap = 1, .x = {.psgd_gflops = 10},
                     .fwd_frac = 1.0 / 3.0, .threshold = 0.9, .pipe_p = 1, .micro_m = 4};
    dt_status st = {0};
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},       {"input", required_argument, 0, 'I'},
        {"batch", required_argument, 0, 'b'},       {"compute-ms", required_argument, 0, 'C'},
        {"metrics", required_argument, 0, 'M'},     {"data-ms", required_argument, 0, 'D'},
        {"forward-fraction", required_argument, 0, 'F'}, {"cluster", required_argument, 0, 'c'},
        {"ranks-per-node", required_argument, 0, 'q'}, {"algorithms", required_argument, 0, 'a'},
        {"bucket-mb", required_argument, 0, 'B'},   {"no-overlap", no_argument, 0, 'O'},
        {"grad-compression", required_argument, 0, 'G'}, {"nodes", required_argument, 0, 'N'},
        {"threshold", required_argument, 0, 'T'},   {"csv", required_argument, 0, 'S'},
        {"compare", required_argument, 0, 'P'},     {"help", no_argument, 0, 'h'},
        {"fit", required_argument, 0, 'f'},         {"compress-gflops", required_argument, 0, 'g'},         {"fit-out", required_argument, 0, 'o'},
        {"strategy", required_argument, 0, 's'},   {"optimizer", required_argument, 0, 'z'},
        {"memory", no_argument, 0, 'y'},         {"pipeline-stages", required_argument, 0, 'p'},
        {"micro-batches", required_argument, 0, 'k'}, {"recompute", no_argument, 0, 'R'},
        {"version", no_argument, 0, 'V'},           {0, 0, 0, 0}};
    int opt, rc = DT_OK;
    double v[MAXN];
    int n;
    opterr = 0;
    while (rc == DT_OK && (opt = getopt_long(argc, argv, ":m:b:a:hV", longopts, NULL)) != -1) {
        double x;
        switch (opt) {
        case 'm': o.model = optarg; break;
        case 'I': o.input = optarg; break;
        case 'b':
            if ((rc = parse_number("--batch", optarg, 1, 1 << 20, &x, &st)) == DT_OK) o.batch = (int)x;
            break;
        case 'C': rc = parse_number("--compute-ms", optarg, 1e-6, 1e9, &o.compute_ms, &st); break;
        case 'M': o.metrics = optarg; break;
        case 'D': rc = parse_number("--data-ms", optarg, 0, 1e9, &o.data_ms, &st); break;
        case 'F': rc = parse_number("--forward-fraction", optarg, 0, 1, &o.fwd_frac, &st); break;
        case 'c': o.cluster = optarg; o.cluster_given = 1; break;
        case 'q':
            if ((rc = parse_number("--ranks-per-node", optarg, 1, 1 << 16, &x, &st)) == DT_OK) o.q = (int)x;
            break;
        case 'a': {
            char buf[256], *save = NULL;
            snprintf(buf, sizeof buf, "%s", optarg);
            o.nalgo = 0;
            for (char *t = strtok_r(buf, ",", &save); t && rc == DT_OK; t = strtok_r(NULL, ",", &save)) {
                int a = dt_cm_algo_parse(t);
                if (a < 0 || o.nalgo == DT_CM_NALGOS)
                    rc = dt_fail(&st, DT_EUSAGE, "--algorithms: expected ring, mpi or hier, found '%s'", t);
                else o.algos[o.nalgo++] = a;
            }
            break;
        }
        case 'B': rc = parse_list_d("--bucket-mb", optarg, o.bucket_mb, &o.nbucket, 0.0, &st); break;
        case 'O': o.overlap = 0; break;
        case 'G':
            if (dt_cm_compress_parse(optarg, &o.x) != 0)
                rc = dt_fail(&st, DT_EUSAGE, "--grad-compression: expected none, fp16, bf16 or powersgd:R (R 1-256), "
                             "found '%s'", optarg);
            break;
        case 'N':
            if ((rc = parse_list_d("--nodes", optarg, v, &n, 1.0, &st)) == DT_OK) {
                o.nnodes = n;
                for (int i = 0; i < n; i++) o.nodes[i] = (int)v[i];
            }
            break;
        case 'T': rc = parse_number("--threshold", optarg, 0.01, 1, &o.threshold, &st); break;
        case 'S': o.csv = optarg; break;
        case 'P': o.compare = optarg; break;
        case 'f': o.fit = optarg; break;
        case 'g': rc = parse_number("--compress-gflops", optarg, 1e-3, 1e6, &o.x.psgd_gflops, &st); break;
        case 'o': o.fit_out = optarg; break;
        case 's':
            if (strcmp(optarg, "mirrored") && strcmp(optarg, "sharded") && strcmp(optarg, "fsdp"))
                rc = dt_fail(&st, DT_EUSAGE, "--strategy: expected mirrored, sharded or fsdp, found '%s'", optarg);
            o.strategy = optarg;
            break;
        case 'z':
            if (strcmp(optarg, "adam") && strcmp(optarg, "sgd"))
                rc = dt_fail(&st, DT_EUSAGE, "--optimizer: expected adam or sgd, found '%s'", optarg);
            o.slots = !strcmp(optarg, "adam") ? 2 : 0;
            break;
        case 'y': o.memory_only = 1; break;
        case 'R': o.recompute = 1; break;
        case 'p':
            if ((rc = parse_number("--pipeline-stages", optarg, 1, 4096, &x, &st)) == DT_OK) o.pipe_p = (int)x;
            break;
        case 'k':
            if ((rc = parse_number("--micro-batches", optarg, 1, 1 << 20, &x, &st)) == DT_OK) o.micro_m = (int)x;
            o.micro_given = 1;
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("dtrain-predict %s\n", PACKAGE_VERSION); return 0;
        case ':': rc = dt_fail(&st, DT_EUSAGE, "%s: needs a value", argv[optind - 1]); break;
        default: rc = dt_fail(&st, DT_EUSAGE, "unknown option '%s' (see dtrain-predict --help)", argv[optind - 1]);
        }
    }
    if (rc == DT_OK && optind < argc)
        rc = dt_fail(&st, DT_EUSAGE, "unexpected argument '%s' (see dtrain-predict --help)", argv[optind]);
    if (rc == DT_OK && (rc = finish_opts(&o, &st)) == DT_OK) rc = run(&o, &st);
    if (rc != DT_OK) {
        fprintf(stderr, "dtrain-predict: error: %s\n", st.msg);
        return st.code;
    }
    return 0;
}

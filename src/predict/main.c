/* main.c (dtrain-predict): step time, throughput and scaling efficiency of a
 * model on 1 to 1024 nodes, for each all-reduce algorithm and bucket size,
 * from the alpha-beta model in commmodel.h and a measured (or given)
 * compute time per step. With --compare, the model's prediction for each
 * run of a scaling study (jobscripts/scaling-study's summary CSV) beside
 * what was measured, and the error.
 *
 * The model's gradient (its parameter count, layer boundaries for buckets,
 * and an estimate of each layer's backward work for when buckets become
 * ready) comes from building it exactly as dtrain does (nn/model.h); no MPI
 * and no backend are needed. */
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
    printf("\nmemory per rank under %s (%s, fp32, batch %d), GiB: parameters + gradients + optimizer slots%s + "
           "activations = per rank (per node of %d ranks)\n", o->strategy, o->slots ? "adam" : "sgd", o->batch,
           fsdp ? " + gathered buckets" : "", c->ranks_per_node);
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
        "                          32x32x3:10 for a model file named resnet*)\n"
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

static int run(struct opts *o, dt_status *st)
{
    struct dt_cluster c;
    if (dt_cm_cluster_load(o->cluster, &c, st) != DT_OK) return st->code;
    if (o->q > 0) c.ranks_per_node = o->q;
    if (o->fit && fit(o, &c, st) != DT_OK) return st->code;
    if (o->fit && !(o->compute_ms > 0.0) && !o->metrics && !o->compare) return DT_OK;
    struct dt_shape in;
    int classes;
    if (sscanf(o->input, "%dx%dx%d:%d", &in.h, &in.w, &in.c, &classes) != 4 || in.h < 1 || in.w < 1 || in.c < 1 ||
        classes < 2 || classes > 256)
        return dt_fail(st, DT_EUSAGE, "--input: expected HxWxC:CLASSES (e.g. 32x32x3:10, 2..256 classes), found '%s'",
                       o->input);
    struct dt_model m;
    if (dt_model_build(&m, o->model, in, classes, 0.5f, st) != DT_OK) {
        dt_model_free(&m);
        return st->code;
    }
    if (o->metrics && read_metrics(o->metrics, &o->compute_ms, &o->data_ms, st) != DT_OK) return st->code;
    if (o->memory_only) {
        printf("model %s: %zu parameters\n", m.name, m.nparams);
        print_memory(o, &m, &c);
        dt_model_free(&m);
        return DT_OK;
    }
    if (!(o->compute_ms > 0.0) && !o->compare) {
        dt_model_free(&m);
        return dt_fail(st, DT_EUSAGE, "give the compute time per step: --compute-ms T or --metrics FILE.csv");
    }
    FILE *csv = NULL;
    if (o->csv && !(csv = fopen(o->csv, "w"))) {
        dt_model_free(&m);
        return dt_fail(st, DT_EUSAGE, "--csv %s: %s", o->csv, strerror(errno));
    }
    double grad_mib = (double)m.nparams * (o->x.half ? 2.0 : 4.0) / 1048576.0;
    printf("model %s: %zu parameters, gradient %.2f MiB%s; batch %d per replica\n", m.name, m.nparams, grad_mib,
           o->x.half ? " (16-bit transport)" : o->x.psgd_rank ? " (before PowerSGD)" : "", o->batch);
    printf("cluster %s: %d ranks per node; inside a node %.1f us + %.4g GB/s, between nodes %.1f us + %.4g GB/s\n  (%s)\n",
           c.name, c.ranks_per_node, c.alpha_intra * 1e6, 1e-9 / c.beta_intra, c.alpha_inter * 1e6,
           1e-9 / c.beta_inter, c.about);
    if (o->compute_ms > 0.0) {
        printf("compute %.2f ms per step (forward %.0f%%), data wait %.2f ms; strategy %s, buckets %s\n",
               o->compute_ms, 100.0 * o->fwd_frac, o->data_ms, o->strategy,
               !strcmp(o->strategy, "fsdp") ? "all-gathered and reduce-scattered beside the compute"
               : !strcmp(o->strategy, "sharded") || !o->overlap ? "after backward" : "reduced during backward");
        if (csv)
            fprintf(csv, "model,cluster,algorithm,bucket_mb,overlap,nodes,ranks_per_node,ranks,comm_ms,exposed_ms,"
                    "step_ms,samples_per_s,efficiency\n");
        printf("\nweak-scaling efficiency (step at 1 rank / step at N nodes x %d ranks):\n", c.ranks_per_node);
        printf("%-5s %7s", "algo", "bucket");
        for (int i = 0; i < o->nnodes; i++) printf(" %6d", o->nodes[i]);
        printf("   %.0f%% up to\n", 100.0 * o->threshold);
        static double bytes[DT_CM_MAXBUCKETS], bytes2[DT_CM_MAXBUCKETS], cpu[DT_CM_MAXBUCKETS],
            ready[DT_CM_MAXBUCKETS];
        for (int ai = 0; ai < o->nalgo; ai++)
            for (int bi = 0; bi < o->nbucket; bi++) {
                int algo = o->algos[ai];
                int nb = dt_cm_buckets(&m, o->bucket_mb[bi], &o->x, bytes, bytes2, cpu, ready);
                /* fsdp moves each bucket three times (two all-gathers, one reduce-scatter) where an all-reduce
                 * is a reduce-scatter and an all-gather: 1.5x its bytes, still behind the compute. */
                for (int k = 0; k < nb && !strcmp(o->strategy, "fsdp"); k++) bytes[k] *= 1.5;
                double cs = o->compute_ms * 1e-3;
                struct dt_cm_step s = {.forward_s = o->fwd_frac * cs, .backward_s = (1.0 - o->fwd_frac) * cs,
                                       .data_s = o->data_ms * 1e-3, .nbuckets = nb, .bucket_bytes = bytes,
                                       .bucket_ready = ready, .bucket_bytes2 = bytes2, .bucket_cpu = cpu,
                                       /* ZeRO-1 reduces after backward */
                                       .overlap = o->overlap && strcmp(o->strategy, "sharded") != 0,
                                       .half = o->x.half};
                double one = cs + s.data_s;
                int limit = 0;
                printf("%-5s %6.3g%s", dt_cm_algo_name(algo), o->bucket_mb[bi], o->bucket_mb[bi] > 0 ? "M" : "all");
                for (int i = 0; i < o->nnodes; i++) {
                    struct dt_cm_result r = dt_cm_predict(&c, algo, o->nodes[i], c.ranks_per_node, &s);
                    double eff = one / r.step_s;
                    int ranks = o->nodes[i] * c.ranks_per_node;
                    if (eff >= o->threshold && o->nodes[i] > limit) limit = o->nodes[i];
                    printf(" %6.3f", eff);
                    if (csv)
                        fprintf(csv, "%s,%s,%s,%g,%d,%d,%d,%d,%.6f,%.6f,%.6f,%.1f,%.5f\n", m.name, c.name,
                                dt_cm_algo_name(algo), o->bucket_mb[bi], o->overlap, o->nodes[i], c.ranks_per_node,
                                ranks, 1e3 * r.comm_s, 1e3 * r.exposed_s, 1e3 * r.step_s,
                                ranks * o->batch / r.step_s, eff);
                }
                if (limit) printf("   %d node%s\n", limit, limit == 1 ? "" : "s");
                else printf("   none\n");
            }
    }
    if (csv) fclose(csv);
    if (o->compute_ms > 0.0) print_memory(o, &m, &c);
    int rc = o->compare ? dt_predict_compare(o, &m, &c, st) : DT_OK;
    dt_model_free(&m);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {.strategy = "mirrored", .slots = 2, .model = "cnn", .input = NULL, .cluster = "hdr200-cpu", .batch = 64, .overlap = 1, .x = {.psgd_gflops = 10},
                     .fwd_frac = 1.0 / 3.0, .threshold = 0.9};
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
        {"memory", no_argument, 0, 'y'},
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
        case 'h': usage(stdout); return 0;
        case 'V': printf("dtrain-predict %s\n", PACKAGE_VERSION); return 0;
        case ':': rc = dt_fail(&st, DT_EUSAGE, "%s: needs a value", argv[optind - 1]); break;
        default: rc = dt_fail(&st, DT_EUSAGE, "unknown option '%s' (see dtrain-predict --help)", argv[optind - 1]);
        }
    }
    if (rc == DT_OK && optind < argc)
        rc = dt_fail(&st, DT_EUSAGE, "unexpected argument '%s' (see dtrain-predict --help)", argv[optind]);
    if (rc == DT_OK && o.fit_out && !o.fit) rc = dt_fail(&st, DT_EUSAGE, "--fit-out: needs --fit BENCH.csv");
    if (rc == DT_OK && o.fit && !o.cluster_given) o.cluster = "this-machine";
    if (rc == DT_OK && o.metrics && o.compute_ms > 0.0)
        rc = dt_fail(&st, DT_EUSAGE, "--metrics and --compute-ms: give one of them");
    if (rc == DT_OK) {
        if (!o.input) {
            const char *b = strrchr(o.model, '/');
            o.input = !strncmp(b ? b + 1 : o.model, "resnet", 6) ? "32x32x3:10" : "28x28x1:10";
        }
        if (!o.nalgo) {
            o.nalgo = DT_CM_NALGOS;
            for (int a = 0; a < DT_CM_NALGOS; a++) o.algos[a] = a;
        }
        if (!o.nbucket) {
            o.nbucket = 3;
            o.bucket_mb[0] = 1;
            o.bucket_mb[1] = 4;
            o.bucket_mb[2] = 16;
        }
        if (!o.nnodes)
            for (int k = 1; k <= 1024; k *= 2) o.nodes[o.nnodes++] = k;
        rc = run(&o, &st);
    }
    if (rc != DT_OK) {
        fprintf(stderr, "dtrain-predict: error: %s\n", st.msg);
        return st.code;
    }
    return 0;
}

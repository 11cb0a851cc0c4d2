/* commmodel.c: the alpha-beta model of the all-reduce algorithms and of a
 * step (see commmodel.h), and cluster descriptions. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/commmodel.h"

static const char *const algo_names[DT_CM_NALGOS] = {"ring", "mpi", "hier"};

const char *dt_cm_algo_name(int algo) { return algo >= 0 && algo < DT_CM_NALGOS ? algo_names[algo] : "?"; }

int dt_cm_algo_parse(const char *name)
{
    for (int a = 0; a < DT_CM_NALGOS; a++)
        if (!strcmp(name, algo_names[a])) return a;
    return -1;
}

static double log2ceil(int p)
{
    int k = 0;
    while ((1 << k) < p) k++;
    return (double)k;
}

double dt_cm_allreduce(const struct dt_cluster *c, int algo, int nodes, int q, double n)
{
    int P = nodes * q;
    if (P <= 1 || n <= 0.0) return 0.0;
    const double ai = c->alpha_intra, bi = c->beta_intra, ax = c->alpha_inter;
    double bx = c->beta_inter;
    double li = log2ceil(q), lx = log2ceil(nodes); /* rounds inside and between nodes */
    switch (algo) {
    case DT_CM_RING: { /* each step waits for its slowest link; one flow per node boundary */
        double in = ai + n / P * bi, x = nodes > 1 ? ax + n / P * bx : 0.0;
        return 2.0 * (P - 1) * (in > x ? in : x);
    }
    case DT_CM_MPI: { /* in the rounds between nodes all q ranks of a node share its interface; the
                       * library's protocol may move bytes slower than the ring's pieces (mpi_beta_factor) */
        bx *= c->mpi_beta_factor > 0 ? c->mpi_beta_factor : 1.0; /* 0: not given */
        double rd = li * (ai + n * bi) + lx * (ax + q * n * bx);
        double rab = 2.0 * (li * ai + lx * ax + q * n * (1.0 - 1.0 / nodes) * bx + n / nodes * (1.0 - 1.0 / q) * bi);
        return rd < rab ? rd : rab;
    }
    case DT_CM_HIER: {
        double t = 0.0;
        if (q > 1) t += 2.0 * (ai + (double)(q - 1) / q * n * bi);
        if (nodes > 1) t += 2.0 * (nodes - 1) * (ax + n / nodes * bx);
        return t;
    }
    default: return NAN;
    }
}

/* Seconds of bucket b's exchange: its all-reduce(s) and its arithmetic. */
static double bucket_time(const struct dt_cluster *c, int algo, int nodes, int q, const struct dt_cm_step *s, int b)
{
    double t = dt_cm_allreduce(c, algo, nodes, q, s->bucket_bytes[b]);
    if (s->bucket_bytes2 && s->bucket_bytes2[b] > 0) t += dt_cm_allreduce(c, algo, nodes, q, s->bucket_bytes2[b]);
    if (s->bucket_cpu) t += s->bucket_cpu[b];
    return t;
}

/* With overlap, what the exchange takes from backward's core: the network
 * stack's work per byte (cpu_ns_per_byte; 0 where a NIC does it), the
 * compression's arithmetic, and half of a blocking MPI_Allreduce's time
 * while backward still runs (it spins while it waits, time-slicing with
 * backward; the bucket is ready when a fraction of backward is done). */
static double core_share(const struct dt_cluster *c, int algo, int nodes, int q, const struct dt_cm_step *s, int b)
{
    int P = nodes * q;
    double moved = (s->bucket_bytes[b] + (s->bucket_bytes2 ? s->bucket_bytes2[b] : 0.0)) * (s->half ? 2.0 : 1.0);
    double cpu = (s->bucket_cpu ? s->bucket_cpu[b] : 0.0) + c->cpu_ns_per_byte * 1e-9 * moved * 2.0 * (P - 1) / P;
    if (algo == DT_CM_MPI) {
        double t = bucket_time(c, algo, nodes, q, s, b) - (s->bucket_cpu ? s->bucket_cpu[b] : 0), left =
            (1.0 - s->bucket_ready[b]) * s->backward_s;
        cpu += 0.5 * (t < left ? t : left);
    }
    return cpu;
}

struct dt_cm_result dt_cm_predict(const struct dt_cluster *c, int algo, int nodes, int q, const struct dt_cm_step *s)
{
    struct dt_cm_result r = {0};
    if (nodes * q <= 1) {
        r.step_s = s->forward_s + s->backward_s + s->data_s;
        return r;
    }
    double backward = s->backward_s;
    for (int b = 0; b < s->nbuckets && s->overlap; b++) backward += core_share(c, algo, nodes, q, s, b);
    double end = 0.0; /* when the last bucket is reduced, from backward's start */
    for (int b = 0; b < s->nbuckets; b++) {
        double t = bucket_time(c, algo, nodes, q, s, b);
        double ready = s->overlap ? s->bucket_ready[b] * backward : backward;
        end = (end > ready ? end : ready) + t;
        r.comm_s += t;
    }
    r.exposed_s = end > backward ? end - backward : 0.0;
    r.step_s = s->forward_s + backward + r.exposed_s + s->data_s;
    return r;
}

int dt_cm_csv_split(char *line, char **cell, int max)
{
    int k = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; k < max; p++) {
        cell[k++] = p;
        p += strcspn(p, ",");
        if (!*p) break;
        *p = '\0';
    }
    return k;
}

/* ---- clusters ----------------------------------------------------------- */

/* Latencies in microseconds, bandwidths in GB/s (1e9 bytes), as files give them. */
struct preset {
    const char *name;
    int q;
    double a_in_us, bw_in, a_x_us, bw_x;
    const char *about;
};

static const struct preset presets[] = {
    /* Fitted to dtrain-bench-allreduce (window buffers, 16 KiB to 4 MiB) on
     * the 2-core development machine (see doc/scaling.md): "inside a node"
     * is hier's shared-memory path at np=2, "between nodes" the ring over MPI
     * point-to-point with --ranks-per-node 1 (the same memory, through
     * Open MPI's vader transport). */
    {"this-machine", 2, 1.5, 7.7, 1.3, 1.3,
     "dtrain-bench-allreduce at np=2, 16 KiB-4 MiB, on the 2-core development machine (Open MPI 4.1.4)"},
    /* A CPU cluster: 128-core nodes run as 16 ranks of 8 cores, HDR
     * InfiniBand 200 Gb/s (25 GB/s) per node, ~1.5 us MPI latency; shared
     * memory 10 GB/s per rank (Open MPI here at 4 MiB). */
    {"hdr200-cpu", 16, 0.5, 10.0, 1.5, 25.0,
     "reference CPU cluster: 16 ranks per node, shared memory 10 GB/s per rank, HDR InfiniBand 200 Gb/s"},
    /* A GPU cluster like DGX H100/H200: 8 GPUs per node on NVLink 4 (450 GB/s
     * per GPU and direction), 8 x 400 Gb/s NDR per node (400 GB/s); NCCL's
     * latencies (~10 us in the node, ~15 us across). */
    {"dgx-h100", 8, 10.0, 450.0, 15.0, 400.0,
     "reference GPU cluster: 8 GPUs per node, NVLink 4 (450 GB/s), 8 x NDR 400 Gb/s per node"},
};
#define NPRESETS ((int)(sizeof presets / sizeof *presets))

const char *dt_cm_cluster_names(void) { return "this-machine, hdr200-cpu, dgx-h100"; }

static void from_preset(const struct preset *p, struct dt_cluster *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", p->name);
    snprintf(c->about, sizeof c->about, "%s", p->about ? p->about : "");
    c->ranks_per_node = p->q;
    c->alpha_intra = p->a_in_us * 1e-6;
    c->beta_intra = 1.0 / (p->bw_in * 1e9);
    c->alpha_inter = p->a_x_us * 1e-6;
    c->beta_inter = 1.0 / (p->bw_x * 1e9);
    c->mpi_beta_factor = 1.0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

int dt_cm_cluster_load(const char *what, struct dt_cluster *c, dt_status *st)
{
    for (int i = 0; i < NPRESETS; i++)
        if (!strcmp(what, presets[i].name)) {
            from_preset(&presets[i], c);
            return DT_OK;
        }
    FILE *f = fopen(what, "r");
    if (!f)
        return dt_fail(st, DT_EUSAGE, "--cluster %s: neither a built-in cluster (%s) nor a readable file (%s)", what,
                       dt_cm_cluster_names(), strerror(errno));
    struct preset p = {.name = what};
    double mpi_factor = 1.0, cpu_ns = 0.0; /* optional */
    double *num[7] = {NULL, &p.a_in_us, &p.bw_in, &p.a_x_us, &p.bw_x, &mpi_factor, &cpu_ns};
    static const char *const keys[] = {"ranks_per_node", "alpha_intra_us", "bw_intra_gbs", "alpha_inter_us",
                                       "bw_inter_gbs", "mpi_beta_factor", "cpu_ns_per_byte"};
    unsigned seen = 0;
    char buf[512], name[64] = "", about[160] = "";
    int line = 0, rc = DT_OK;
    while (rc == DT_OK && fgets(buf, sizeof buf, f)) {
        line++;
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *s = trim(buf), *eq = strchr(s, '=');
        if (!*s) continue;
        if (!eq) {
            rc = dt_fail(st, DT_EUSAGE, "%s:%d: expected key = value, found '%s'", what, line, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1), *end;
        if (!strcmp(key, "name")) snprintf(name, sizeof name, "%s", val);
        else if (!strcmp(key, "about")) snprintf(about, sizeof about, "%s", val);
        else {
            int k = 0;
            while (k < 7 && strcmp(key, keys[k])) k++;
            if (k == 7) {
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: unknown key '%s' (expected name, about, ranks_per_node, "
                             "alpha_intra_us, bw_intra_gbs, alpha_inter_us, bw_inter_gbs, mpi_beta_factor, "
                             "cpu_ns_per_byte)", what, line, key);
                break;
            }
            errno = 0;
            double x = strtod(val, &end);
            if (errno || end == val || *end || !(x > 0.0 || (k == 6 && x == 0.0)) || !isfinite(x) ||
                (k == 0 && (x != floor(x) || x > 1e6))) {
                rc = dt_fail(st, DT_EUSAGE, "%s:%d: %s: expected a positive %s, found '%s'", what, line, key,
                             k == 0 ? "integer" : "number", val);
                break;
            }
            if (k == 0) p.q = (int)x;
            else *num[k] = x;
            seen |= 1u << k;
        }
    }
    fclose(f);
    if (rc != DT_OK) return rc;
    for (int k = 0; k < 5; k++)
        if (!(seen & (1u << k))) return dt_fail(st, DT_EUSAGE, "%s: %s is missing", what, keys[k]);
    from_preset(&p, c);
    c->mpi_beta_factor = mpi_factor;
    c->cpu_ns_per_byte = cpu_ns;
    if (name[0]) snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->about, sizeof c->about, "%s", about[0] ? about : what);
    return DT_OK;
}

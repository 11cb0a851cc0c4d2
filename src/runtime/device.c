/* device.c: choosing each rank's backend and device (see device.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/checks.h"
#include "runtime/device.h"
#ifdef DT_HAVE_CUDA
#include "gpu/gpu.h"
#endif

int dt_device_assign(int local_rank, int local_size, int visible, int gpus_per_node, int bound,
                     char *why, size_t whylen)
{
    if (visible <= 0) {
        snprintf(why, whylen, "no CUDA device is visible");
        return -1;
    }
    if (bound && visible == 1) return 0; /* the scheduler gave this rank its own GPU */
    if (gpus_per_node > visible) {
        snprintf(why, whylen, "--gpus-per-node %d: this node shows only %d device%s (CUDA_VISIBLE_DEVICES?)",
                 gpus_per_node, visible, visible == 1 ? "" : "s");
        return -1;
    }
    int usable = gpus_per_node > 0 ? gpus_per_node : visible;
    if (local_size > usable) {
        snprintf(why, whylen, "%d ranks on this node but %d GPU%s to use: dtrain runs one rank per GPU "
                 "(start %d ranks per node, e.g. srun --ntasks-per-node=%d or mpirun --map-by ppr:%d:node)",
                 local_size, usable, usable == 1 ? "" : "s", usable, usable, usable);
        return -1;
    }
    return local_rank;
}

static void cpu_desc(char *buf, size_t len, int threads)
{
    char model[128] = "CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *v = strchr(line, ':');
            if (v) {
                v += 1 + (v[1] == ' ');
                v[strcspn(v, "\n")] = '\0';
                snprintf(model, sizeof model, "%s", v);
            }
            break;
        }
    if (f) fclose(f);
    snprintf(buf, len, "cpu: %s, %d thread%s", model, threads, threads == 1 ? "" : "s");
}

int dt_device_open(struct dt_device *d, const struct dt_config *cfg, const struct dt_topo *topo,
                   dt_status *st)
{
    char why[256] = "";
    memset(d, 0, sizeof *d);
    d->index = -1;
    d->be = &dt_backend_cpu;
    st->code = DT_OK;
    if (strcmp(cfg->device, "cuda") == 0) {
#ifdef DT_HAVE_CUDA
        d->cuda = 1;
        int visible = dt_gpu_count(why, sizeof why);
        /* Per-task binding: each rank sees exactly one device, all different. */
        char mine[32] = "", *all = dt_xcalloc((size_t)topo->local_size, sizeof mine);
        struct dt_gpu_info info;
        if (visible == 1 && dt_gpu_describe(0, &info) == 0) snprintf(mine, sizeof mine, "%s", info.pci_bus_id);
        DT_MPI_CHECK(MPI_Allgather(mine, (int)sizeof mine, MPI_CHAR, all, (int)sizeof mine, MPI_CHAR, topo->node));
        int bound = visible == 1 && topo->local_size > 1;
        for (int i = 0; bound && i < topo->local_size; i++)
            for (int j = 0; j < i; j++)
                if (!all[i * sizeof mine] || !strcmp(all + i * sizeof mine, all + j * sizeof mine)) bound = 0;
        free(all);
        if (visible <= 0)
            dt_fail(st, DT_EUSAGE, "--device cuda: no GPU on this node (%s)", why[0] ? why : "no device");
        else if ((d->index = dt_device_assign(topo->local_rank, topo->local_size, visible, cfg->gpus_per_node,
                                              bound, why, sizeof why)) < 0)
            dt_fail(st, DT_EUSAGE, "--device cuda: %s", why);
        else if (dt_gpu_select(d->index, why, sizeof why) != 0)
            dt_fail(st, DT_ERUNTIME, "--device cuda: device %d: %s", d->index, why);
        else {
            d->be = &dt_backend_cuda;
            dt_gpu_describe(d->index, &info);
            snprintf(d->desc, sizeof d->desc, "cuda:%d %s (%.1f GiB, cc %d.%d, %d SMs, %s)", d->index, info.name,
                     (double)info.memory / 1073741824.0, info.major, info.minor, info.multiprocessors,
                     info.pci_bus_id);
        }
#else
        dt_fail(st, DT_EUSAGE, "--device cuda: this dtrain was built without CUDA (rebuild with ./configure --with-cuda)");
#endif
    }
    else
        cpu_desc(d->desc, sizeof d->desc, cfg->threads);
    /* Before setup, whose refusals depend on the CPU: this one does not. */
    if (st->code == DT_OK && cfg->winograd && cfg->precision != DT_PREC_FP32)
        dt_fail(st, DT_EUSAGE, "--winograd: the Winograd kernels are float32 only, found --precision %s "
                "(drop --winograd, or use --precision fp32)", dt_precision_name(cfg->precision));
    if (st->code == DT_OK && d->be->setup(cfg->threads, cfg->precision, why, sizeof why) != 0)
        dt_fail(st, DT_EUSAGE, "--precision %s on %s: %s", dt_precision_name(cfg->precision), d->be->name, why);
    /* 16-bit activations where the backend stores them (the GPU), unless
     * --fp32-activations; the model allocates them in this type. */
    if (st->code == DT_OK && cfg->precision != DT_PREC_FP32 && !cfg->fp32_activations)
        d->be->set_act_type(cfg->precision);
    if (st->code == DT_OK && cfg->winograd) {
        if (!d->be->set_winograd)
            dt_fail(st, DT_EUSAGE, "--winograd: the %s backend has no Winograd choice (cuDNN picks its own "
                    "convolution algorithms); drop --winograd", d->be->name);
        else if (d->be->set_winograd(1, why, sizeof why) != 0)
            dt_fail(st, DT_EUSAGE, "--winograd: %s", why);
    }
    return dt_status_agree(st, topo->world);
}

void dt_device_list(const struct dt_device *d, const struct dt_topo *topo, FILE *out)
{
    enum { LINE = 320 };
    char host[64] = "?", line[LINE];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    snprintf(line, sizeof line, "rank %d: host %s, node %d%s, local rank %d of %d: %s", topo->rank, host,
             topo->node_index, topo->emulated ? " (emulated)" : "", topo->local_rank, topo->local_size,
             d->desc);
    char *all = topo->rank == 0 ? dt_xmalloc((size_t)topo->size * LINE) : NULL;
    DT_MPI_CHECK(MPI_Gather(line, LINE, MPI_CHAR, all, LINE, MPI_CHAR, 0, topo->world));
    if (topo->rank == 0) {
        for (int r = 0; r < topo->size; r++) fprintf(out, "%s\n", all + (size_t)r * LINE);
        fflush(out);
    }
    free(all);
}

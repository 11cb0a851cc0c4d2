/* strategy.c: choosing a strategy by name (see strategy.h). */
#include "config.h"

#include <string.h>

#include "runtime/checks.h"
#include "strategy/strategy.h"

int dt_strategy_create(struct dt_strategy *s, const struct dt_config *cfg, struct dt_model *model,
                       struct dt_coll *coll, dt_status *st)
{
    const char *name = cfg->strategy ? cfg->strategy : "auto";
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->model = model;
    s->coll = coll;
    s->be = model->be;
    st->code = DT_OK;
    dt_optim_defaults(&s->optim_cfg, cfg->optimizer, st);
    if (cfg->lr > 0.0f) s->optim_cfg.lr = cfg->lr;
    s->optim_cfg.momentum = cfg->momentum;
    if (s->optim_cfg.name && !strcmp(s->optim_cfg.name, "adamw")) s->optim_cfg.weight_decay = cfg->weight_decay;
    s->cuda = strcmp(s->be->name, "cuda") == 0;
    dt_loss_scale_init(&s->loss_scale, cfg->loss_scale);
    s->nan_policy = cfg->nan_policy;
    s->replica = coll->topo.rank;
    s->nreplicas = coll->topo.size;
    s->lockstep = 1;

    if (cfg->pipeline_stages > 1) /* train/pipeline.c refused the other strategies' names */
        s->ops = &dt_strategy_pipeline;
    else if (strcmp(name, "auto") == 0)
        s->ops = coll->topo.nnodes > 1 ? &dt_strategy_multi_worker : &dt_strategy_mirrored;
    else if (strcmp(name, "mirrored") == 0) s->ops = &dt_strategy_mirrored;
    else if (strcmp(name, "multi-worker") == 0) s->ops = &dt_strategy_multi_worker;
    else if (strcmp(name, "sharded") == 0) s->ops = &dt_strategy_sharded;
    else if (strcmp(name, "fsdp") == 0) s->ops = &dt_strategy_fsdp;
    else if (strcmp(name, "central-storage") == 0) s->ops = &dt_strategy_central_storage;
    else if (strcmp(name, "parameter-server") == 0) s->ops = &dt_strategy_parameter_server;
    else if (strcmp(name, "tpu") == 0)
        return dt_fail(st, DT_EUSAGE, "--strategy tpu: TPUStrategy has no counterpart on MPI clusters (TPU pods "
                       "are not MPI jobs); use --strategy multi-worker (or auto) for synchronous training "
                       "across nodes, or sharded to split the optimizer state");
    else
        return dt_fail(st, DT_EUSAGE, "--strategy: expected auto, mirrored, multi-worker, central-storage, sharded, fsdp or parameter-server, found '%s'", name);
    /* What only the all-reduce strategies do (they are the ones that keep
     * the whole reduced gradient on every rank, on the device or not). */
    int allreduce = s->ops == &dt_strategy_mirrored || s->ops == &dt_strategy_multi_worker;
    if (!allreduce && s->cuda)
        return dt_fail(st, DT_EUSAGE, "--strategy %s: not available with --device cuda; use mirrored, "
                       "multi-worker or auto", name);
    if (cfg->powersgd_rank && s->cuda)
        return dt_fail(st, DT_EUSAGE, "--grad-compression powersgd:%d: only on the CPU all-reduce; with --device "
                       "cuda gradients go through NCCL (use none, fp16 or bf16)", cfg->powersgd_rank);
    if (cfg->powersgd_rank && !allreduce)
        return dt_fail(st, DT_EUSAGE, "--grad-compression powersgd:%d: only with the mirrored and multi-worker "
                       "strategies (or auto), whose all-reduce sums the whole gradient on every rank (strategy %s)",
                       cfg->powersgd_rank, name);
    if (!allreduce && s->loss_scale.on)
        return dt_fail(st, DT_EUSAGE, "--loss-scale%s: only the mirrored and multi-worker strategies apply a "
                       "loss scale (strategy %s)", cfg->loss_scale_set ? "" : " (dynamic, for --precision fp16)", name);
    if (s->ops == &dt_strategy_parameter_server && cfg->nan_policy == DT_NAN_SKIP)
        return dt_fail(st, DT_EUSAGE, "--nan-policy skip: the parameter server applies each push as it comes, "
                       "so a worker cannot take a step back; use a synchronous strategy, or abort (the default)");
    /* Every rank resolves the same name the same way, so refusals inside
     * setup are agreed on there. */
    return s->ops->setup(s, st);
}

void dt_strategy_free(struct dt_strategy *s)
{
    if (s->ops && s->ops->teardown) s->ops->teardown(s);
    dt_optim_free(&s->optim);
    memset(s, 0, sizeof *s);
}

size_t dt_strategy_optimizer_bytes(const struct dt_strategy *s)
{
    int slots = (s->optim.slot[0] != NULL) + (s->optim.slot[1] != NULL);
    return (size_t)slots * s->optim.n * sizeof(float);
}

void dt_strategy_get_block(struct dt_strategy *s, int grads, float *host, int root)
{
    if (s->ops && s->ops->gather_block) {
        s->ops->gather_block(s, grads, host, root);
        return;
    }
    const float *src = grads ? s->model->grads : s->model->params;
    if (src && (root < 0 || root == s->coll->topo.rank)) s->be->download(host, src, sizeof(float) * s->model->nparams);
}

int dt_strategy_shards_params(const struct dt_strategy *s) { return s->ops && s->ops->gather_block; }

/* memplan.h: the bytes a rank holds under each strategy, before anything is
 * allocated: the memory check at start, and dtrain-predict's report.
 *
 * Per rank, with P parameters (fp32), N ranks, Q of them on the node and s
 * optimizer slots a parameter (Adam 2, SGD with momentum 1, plain SGD 0):
 *   mirrored, multi-worker:
 *                      parameters 4P, gradients 4P, slots 4sP
 *   parameter-server:  a worker's parameters 4P and gradients 4P
 *   central-storage:   parameters and slots once per node (4P/Q + 4sP/Q a
 *                      rank), gradients 4P
 *   sharded (ZeRO-1):  parameters 4P, gradients 4P, slots 4sP/N
 *   fsdp (ZeRO-3):     parameters 4P/N, gradients 4P/N, slots 4sP/N, and
 *                      two buckets of gathered parameters and two of
 *                      gradients (its largest bucket, four times), and a
 *                      tied LM head's gradient of the embedding's table
 *   pipeline (P stages, M micro-batches, stage k):
 *                      its layers' parameters 4P_k, gradients 4P_k (and its
 *                      widest layer's once more), slots 4sP_k; activations
 *                      of its layers at the micro-batch in each copy of the
 *                      stage for micro-batches in flight (min(M, P-k) of
 *                      them; validation passes micro-batches too)
 * plus activations: every layer's output and its gradient at the batch
 * (once where one is another's alias: a batch norm folded into its add),
 * and what layers keep beside them for backward (attention's q, k, v and
 * output, layernorm's statistics: nn/layer.h's state_bytes) with the
 * largest shared scratch once; under --recompute (nn/model.h, m->recompute)
 * the inner outputs, gradients and saved state of the recomputed pieces
 * once for all of them, laid out as dt_model_create lays them.
 * With Adam that is ZeRO's 16P per rank for data parallelism and 16P/N for
 * stage 3. The one design decision: fsdp's buckets come from
 * dt_fsdp_group, the rule strategy/fsdp.c itself groups layers by, so the
 * plan and the run cannot disagree on them. */
#ifndef DT_MEMPLAN_H
#define DT_MEMPLAN_H

#include <stddef.h>

#include "nn/model.h"

struct dt_mem_plan {
    double params, grads, slots; /* bytes per rank */
    double gathered;             /* fsdp's gathered buckets (parameters and gradients) */
    double activations;
    /* Not in the total: the node's other ranks' shared windows that this
     * rank maps and touches (the hierarchical all-reduce reads its peers'
     * gradients in place; central-storage's one copy of the parameters).
     * They count in each rank's RSS, once in the node's memory (and PSS). */
    double mapped;
};

/* fsdp's buckets: whole layers in order, a new bucket once one holds
 * bucket_mb MiB (0: one bucket); of_layer[i] (when not NULL, [nlayers])
 * receives layer i's bucket or -1 (no parameters). Returns the count; when
 * largest is not NULL, largest[j] receives the floats of the largest bucket
 * k with k % 2 = j (fsdp.c gathers bucket k into buffer k % 2). */
int dt_fsdp_group(const struct dt_model *m, double bucket_mb, int *of_layer, size_t largest[2]);
/* The plan for strategy (a --strategy name; auto counts as mirrored) on
 * nranks ranks, local of them on this node, slots optimizer slots, batch
 * samples of act_size-byte activations. */
void dt_mem_plan(const struct dt_model *m, const char *strategy, int slots, int nranks, int local, double bucket_mb,
                 int batch, size_t act_size, struct dt_mem_plan *p);
double dt_mem_plan_total(const struct dt_mem_plan *p);
/* What each rank's RSS will show: the total and the mapped windows. */
double dt_mem_plan_rss(const struct dt_mem_plan *p);
/* Pipeline stages: cut[0..P] into P contiguous stages at the places the
 * model may be cut (dt_model_can_cut) with the least slowest stage, by
 * cost[nlayers] (seconds a layer, or any measure that adds up). The
 * trainer balances measured times; dtrain-predict its compute model's. */
void dt_pipe_balance(const struct dt_model *m, const double *cost, int P, int *cut);
/* The bytes of pipeline stage `stage` (of P, cut by cut[P+1]) with M
 * micro-batches of a batch-sample batch. */
void dt_mem_plan_pipeline(const struct dt_model *m, const int *cut, int P, int M, int stage, int slots, int batch,
                          size_t act_size, struct dt_mem_plan *p);
/* The bubble of an ideal 1F1B or GPipe schedule: (P-1)/(M+P-1). */
double dt_pipe_bubble_ideal(int P, int M);

#endif

/* pipeline.h: a pipelined training step (--pipeline-stages P,
 * --micro-batches M): where the model is cut into stages, and the 1F1B
 * schedule of each batch's micro-batches through them.
 *
 * The strategy (strategy/pipeline.c) holds the mesh and each stage's
 * parameters; this file decides which layers each stage runs (before the
 * model is created) and runs the schedule. In 1F1B (PipeDream-Flush,
 * Megatron) stage k starts min(M, P-k-1) micro-batches' forward passes,
 * then alternates one forward with one backward, then drains the
 * backwards: at most P-k micro-batches are in flight on it, each in a copy
 * of the stage's layers of its own (activations and the layers' saved
 * state), all reading the same parameters. */
#ifndef DT_TRAIN_PIPELINE_H
#define DT_TRAIN_PIPELINE_H

#include <mpi.h>
#include <stdint.h>

#include "data/loader.h"
#include "nn/model.h"
#include "runtime/status.h"

struct dt_trainer;

struct dt_pipe_run {
    int on;                 /* --pipeline-stages P > 1 */
    int P, M, K;            /* stages, micro-batches, model copies on this stage (in flight at most) */
    int micro;              /* the largest micro-batch: every copy's activations hold that many samples */
    int *cut;               /* [P + 1]: stage k runs layers [cut[k], cut[k+1]) */
    int marked;             /* the cut came from [stage] lines (else from measured layer times) */
    double *cost;           /* [nlayers]: measured seconds a layer (forward + backward of a micro-batch); NULL if marked */
    struct dt_model *copy;  /* [K]: copies 1..K-1 (copy 0 is the trainer's model itself) */
    MPI_Request *fwd, *bwd; /* [K]: each copy's send in flight (its output forward, its input's gradient back) */
    double busy, idle;      /* this rank's seconds computing / waiting for a neighbour, in all steps */
    double last_bubble;     /* the last epoch's measured bubble over every rank (idle / (busy + idle)) */
};

/* Before the model is created (collective): the refusals that need the rank
 * count and the model (the stages must divide the ranks; no more stages
 * than places to cut), the cut ([stage] lines, or layer times measured at
 * the micro-batch's size and balanced), and this rank's layer range in
 * t->model. Nothing to do without --pipeline-stages. */
int dt_pipe_plan(struct dt_trainer *t, dt_status *st);
/* The range of the parameter block rank r's stage holds. */
void dt_pipe_segment(const struct dt_trainer *t, int r, size_t *off, size_t *len);
/* After the strategy is set up: the copies of the stage for micro-batches in flight. */
void dt_pipe_start(struct dt_trainer *t);
/* One batch (already in t->dev_images and t->dev_labels): its M
 * micro-batches forward and backward through the stages; the loss sum and
 * correct count of this rank's micro-batches join stats (the last stage's
 * only). global: the update's samples over the replicas. */
void dt_pipe_batch(struct dt_trainer *t, int n, int64_t global, float *stats);
/* Validation: n samples (in t->dev_images / dev_labels) forward through
 * the stages; the last stage's loss sum and correct count join sums. */
void dt_pipe_evaluate(struct dt_trainer *t, int n, double sums[2]);
/* The mean bubble over all ranks since the last call (collective). */
double dt_pipe_bubble(struct dt_trainer *t);
/* "layers 0-3 | 4-8" for the setup line. */
void dt_pipe_describe(const struct dt_trainer *t, char *out, size_t len);
void dt_pipe_free(struct dt_trainer *t);

#endif

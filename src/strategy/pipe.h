/* pipe.h: what the pipeline strategy (pipeline.c) shares with the trainer's
 * schedule (train/pipeline.c): the P x D mesh of ranks, the cut of the
 * layers into stages, and this stage's block of parameters.
 *
 * Rank r is stage r / D of replica r % D: a stage's D replicas are
 * neighbouring ranks (on one node where the ranks are placed by node), and
 * all-reduce their stage's gradients in stage_comm; a replica's P stages
 * pass activations forward and their gradients back in pipe_comm. */
#ifndef DT_PIPE_H
#define DT_PIPE_H

#include <mpi.h>
#include <stddef.h>

#include "nn/model.h"

struct dt_strategy;

struct dt_pipe {
    int P, D;              /* stages, replicas */
    int stage, replica;    /* this rank's */
    int *lo;               /* [P + 1]: stage k runs layers [lo[k], lo[k + 1]) */
    size_t *off, *len;     /* [P]: stage k's parameters in the flat block */
    size_t boff, blen;     /* this stage's buffers (batchnorm's statistics) */
    MPI_Comm stage_comm;   /* this stage's D replicas */
    MPI_Comm pipe_comm;    /* this replica's P stages; rank k there is stage k */
    int prev, next;        /* neighbours in pipe_comm; MPI_PROC_NULL at either end */
    float *params, *grads; /* [len[stage]]: this stage's parameters and the update's gradient */
    float *scratch;        /* a layer's gradient of a micro-batch after the first, before it joins grads */
    size_t scratch_len;    /* its floats: the stage's widest layer */
    int add;               /* backward adds into grads (a micro-batch after the update's first) */
    struct dt_param_hook hook; /* the model's way to them */
};

/* The stages' mesh and parameters once the strategy is set up; NULL when
 * the run is not pipelined. */
struct dt_pipe *dt_pipe_of(const struct dt_strategy *s);

#endif

/* step_graph.h: --cuda-graphs: a training step's forward pass, loss and
 * backward pass recorded into a graph (backend.h's capture_begin ...) once
 * per (batch size, loss-gradient scale), then replayed with one launch.
 *
 * The first step of a given shape runs the usual way (it sizes the
 * workspaces and picks the cuDNN algorithms a recording must not change);
 * the second is recorded and replayed; later ones replay. A graph that a
 * reallocation made stale is recorded again. A recording that fails runs
 * the step the usual way, with a note; after three failures no more are
 * tried. Results equal those of plain launches: the same kernels run in the
 * same order, on the same random draws. */
#ifndef DT_STEP_GRAPH_H
#define DT_STEP_GRAPH_H

#include <stdio.h>

#include "backend.h"
#include "nn/loss.h"
#include "nn/model.h"

#define DT_STEP_GRAPHS 4 /* shapes kept: the full batch, an epoch's last, ... */

struct dt_step_graphs {
    int on;
    struct {
        dt_graph *g;   /* NULL until recorded */
        int n;         /* 0: slot unused */
        float scale;   /* the loss-gradient scale (it is a kernel argument) */
        unsigned long used;
    } slot[DT_STEP_GRAPHS];
    unsigned long clock;
    long recorded, replayed, plain, failed;
    char why[200];     /* the last recording's failure */
};

/* Checks that the model can be recorded on be (dt_model_check_capture). */
int dt_step_graphs_init(struct dt_step_graphs *sg, const struct dt_model *m, const struct dt_backend *be,
                        dt_status *st);
/* Forward (training), loss with gradient scale grad_scale, backward: by
 * graph when it can, else plainly. note (NULL: silent) gets one line for a
 * failed recording. */
struct dt_loss_result dt_step_graphs_run(struct dt_step_graphs *sg, struct dt_model *m, const uint8_t *labels, int n,
                                         float grad_scale, dt_rng *rng, FILE *note);
void dt_step_graphs_free(struct dt_step_graphs *sg, const struct dt_backend *be);

#endif

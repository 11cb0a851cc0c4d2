/* step_graph.c: --cuda-graphs (see step_graph.h). */
#include "config.h"

#include <string.h>

#include "train/step_graph.h"

#define MAX_FAILURES 3

int dt_step_graphs_init(struct dt_step_graphs *sg, const struct dt_model *m, const struct dt_backend *be,
                        dt_status *st)
{
    memset(sg, 0, sizeof *sg);
    if (dt_model_check_capture(m, be, "--cuda-graphs", st) != DT_OK) return st->code;
    sg->on = 1;
    return DT_OK;
}

static struct dt_loss_result plain(struct dt_model *m, const uint8_t *labels, int n, float grad_scale, dt_rng *rng)
{
    dt_model_forward(m, n, 1, rng);
    struct dt_loss_result r = dt_model_loss(m, labels, n, grad_scale);
    dt_model_backward(m, n, rng);
    return r;
}

struct dt_loss_result dt_step_graphs_run(struct dt_step_graphs *sg, struct dt_model *m, const uint8_t *labels, int n,
                                         float grad_scale, dt_rng *rng, FILE *note)
{
    const struct dt_backend *be = m->be;
    struct dt_loss_result r = {0.0, 0};
    if (!sg->on || n <= 0) {
        sg->plain++;
        return plain(m, labels, n, grad_scale, rng);
    }
    int k = 0, lru = 0;
    while (k < DT_STEP_GRAPHS && !(sg->slot[k].n == n && sg->slot[k].scale == grad_scale)) k++;
    sg->clock++;
    if (k == DT_STEP_GRAPHS) { /* a new shape: run it plainly first (it sizes what a graph will use) */
        for (int i = 1; i < DT_STEP_GRAPHS; i++)
            if (sg->slot[i].used < sg->slot[lru].used) lru = i;
        if (sg->slot[lru].g) be->graph_destroy(sg->slot[lru].g);
        sg->slot[lru].g = NULL;
        sg->slot[lru].n = n;
        sg->slot[lru].scale = grad_scale;
        sg->slot[lru].used = sg->clock;
        sg->plain++;
        return plain(m, labels, n, grad_scale, rng);
    }
    sg->slot[k].used = sg->clock;
    dt_graph *g = sg->slot[k].g;
    if (g && !be->graph_valid(g)) { /* a buffer it uses was reallocated */
        be->graph_destroy(g);
        g = sg->slot[k].g = NULL;
    }
    if (!g) {
        if (sg->failed >= MAX_FAILURES) {
            sg->plain++;
            return plain(m, labels, n, grad_scale, rng);
        }
        char why[160] = "";
        if (be->capture_begin(why, sizeof why) == 0) {
            dt_model_forward(m, n, 1, rng);
            dt_model_loss(m, labels, n, grad_scale);
            dt_model_backward(m, n, rng);
            g = be->capture_end(why, sizeof why);
        }
        if (!g) {
            sg->failed++;
            snprintf(sg->why, sizeof sg->why, "%s", why);
            if (note)
                fprintf(note, "dtrain: note: --cuda-graphs: recording the step (batch %d) failed: %s; it runs without "
                        "a graph%s\n", n, why, sg->failed >= MAX_FAILURES ? ", and so will every later step" : "");
            sg->plain++;
            return plain(m, labels, n, grad_scale, rng);
        }
        sg->slot[k].g = g;
        sg->recorded++;
    }
    long correct = 0;
    r.loss_sum = be->graph_run(g, &correct);
    r.correct = (double)correct;
    sg->replayed++;
    return r;
}

void dt_step_graphs_free(struct dt_step_graphs *sg, const struct dt_backend *be)
{
    for (int i = 0; i < DT_STEP_GRAPHS; i++)
        if (sg->slot[i].g) be->graph_destroy(sg->slot[i].g);
    memset(sg, 0, sizeof *sg);
}

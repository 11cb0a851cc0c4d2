/* check_step_graph.c: unit tests for --cuda-graphs' bookkeeping
 * (src/train/step_graph.c) and its model check (dt_model_check_capture), on the
 * CPU.
 *
 * No GPU is needed: the backend here is the CPU's with recording ops that
 * keep a log. Its "recording" runs the ops (the CPU cannot defer them), and
 * its graph_run returns a loss no real step gives (minus 1000 minus the
 * graph's number: a cross-entropy is never negative), so each test can tell
 * a replay from a plain step. What is
 * checked is the policy: a new (batch, scale) shape runs plainly first,
 * then is recorded and replayed; replays need no recording; the oldest of
 * DT_STEP_GRAPHS shapes is dropped for a new one; a stale graph is recorded
 * again; a failed recording runs the step plainly with one note, puts the
 * random stream back, and after three failures no more are tried. The GPU
 * side (that a replay equals the plain step) is tests/check_gpu and
 * tests/gpu_train.sh. */
#include "config.h"

#include "ck_fast.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "nn/model.h"
#include "train/step_graph.h"

struct dt_graph {
    int id;
    int valid;
};

static struct {
    int begins, ends, runs, destroys;
    int fail_next;          /* capture_end fails this many times */
    int recording;
    struct dt_graph *made[16];
    int nmade;
} fake;

static int fake_begin(char *why, size_t whylen)
{
    (void)why;
    (void)whylen;
    fake.begins++;
    fake.recording = 1;
    return 0;
}

static dt_graph *fake_end(char *why, size_t whylen)
{
    fake.ends++;
    fake.recording = 0;
    if (fake.fail_next > 0) {
        fake.fail_next--;
        snprintf(why, whylen, "the test says no");
        return NULL;
    }
    struct dt_graph *g = calloc(1, sizeof *g);
    g->id = ++fake.nmade;
    g->valid = 1;
    fake.made[g->id] = g;
    return g;
}

static double fake_run(dt_graph *g, long *ncorrect)
{
    fake.runs++;
    *ncorrect += 1;
    return -1000.0 - g->id;
}

static int fake_valid(const dt_graph *g) { return g->valid; }

static void fake_destroy(dt_graph *g)
{
    fake.destroys++;
    fake.made[g->id] = NULL;
    free(g);
}

static struct dt_backend be;
static struct dt_model model;
static uint8_t labels[8];
static dt_rng rng;

static void setup(void)
{
    memset(&fake, 0, sizeof fake);
    be = dt_backend_cpu;
    be.name = "recording";
    be.capture_begin = fake_begin;
    be.capture_end = fake_end;
    be.graph_run = fake_run;
    be.graph_valid = fake_valid;
    be.graph_destroy = fake_destroy;
    dt_status st = {0};
    ck_assert_int_eq(dt_model_build(&model, "mlp", (struct dt_shape){4, 4, 1}, 3, 0.5f, &st), DT_OK);
    dt_model_create(&model, &be, 8);
    dt_model_init_params(&model, 1);
    for (int i = 0; i < 8; i++) labels[i] = (uint8_t)(i % 3);
    dt_rng_seed(&rng, 5, 0);
    float *pixels = model.act[0];
    for (int i = 0; i < 8 * 16; i++) pixels[i] = dt_rng_uniform(&rng); /* the batch's pixels */
}

static void teardown(void) { dt_model_free(&model); }

/* One step; returns whether it was a replay (the fake's loss). */
static int step(struct dt_step_graphs *sg, int n, float scale, FILE *note)
{
    struct dt_loss_result r = dt_step_graphs_run(sg, &model, labels, n, scale, &rng, note);
    ck_assert(r.loss_sum <= -1000.0 || r.loss_sum >= 0.0);
    return r.loss_sum <= -1000.0;
}

START_TEST(record_after_one_plain_step_then_replay)
{
    struct dt_step_graphs sg;
    dt_status st = {0};
    ck_assert_int_eq(dt_step_graphs_init(&sg, &model, &be, &st), DT_OK);
    ck_assert(!step(&sg, 8, 0.125f, NULL)); /* new shape: plain */
    ck_assert_int_eq(fake.begins, 0);
    ck_assert(step(&sg, 8, 0.125f, NULL)); /* recorded, then replayed */
    ck_assert_int_eq(fake.begins, 1);
    ck_assert(step(&sg, 8, 0.125f, NULL)); /* replayed, no new recording */
    ck_assert(step(&sg, 8, 0.125f, NULL));
    ck_assert_int_eq(fake.begins, 1);
    ck_assert_int_eq(fake.runs, 3);
    ck_assert_int_eq(sg.recorded, 1);
    ck_assert_int_eq(sg.replayed, 3);
    ck_assert_int_eq(sg.plain, 1);
    /* An empty batch is never recorded. */
    ck_assert(!step(&sg, 0, 0.125f, NULL));
    dt_step_graphs_free(&sg, &be);
    ck_assert_int_eq(fake.destroys, 1);
}
END_TEST

START_TEST(shapes_and_scales_are_separate_graphs)
{
    struct dt_step_graphs sg;
    dt_status st = {0};
    ck_assert_int_eq(dt_step_graphs_init(&sg, &model, &be, &st), DT_OK);
    step(&sg, 8, 0.125f, NULL);
    ck_assert(step(&sg, 8, 0.125f, NULL));
    ck_assert(!step(&sg, 5, 0.125f, NULL)); /* an epoch's last, smaller batch: plain first */
    ck_assert(!step(&sg, 8, 0.0625f, NULL)); /* a halved loss scale is another kernel argument */
    ck_assert(step(&sg, 8, 0.125f, NULL));   /* the first graph is still there */
    ck_assert_int_eq(fake.begins, 1);
    ck_assert(step(&sg, 5, 0.125f, NULL));
    ck_assert(step(&sg, 8, 0.0625f, NULL));
    ck_assert_int_eq(fake.begins, 3);
    /* A fifth shape replaces the least recently used (n=8, scale 0.125 was
     * used before the two others were replayed). */
    step(&sg, 4, 1.0f, NULL);
    step(&sg, 3, 1.0f, NULL);
    ck_assert_int_eq(fake.destroys, 1);
    ck_assert_ptr_null(fake.made[1]);
    ck_assert(!step(&sg, 8, 0.125f, NULL)); /* gone: plain again */
    dt_step_graphs_free(&sg, &be);
}
END_TEST

START_TEST(stale_graphs_are_recorded_again)
{
    struct dt_step_graphs sg;
    dt_status st = {0};
    ck_assert_int_eq(dt_step_graphs_init(&sg, &model, &be, &st), DT_OK);
    step(&sg, 8, 1.0f, NULL);
    ck_assert(step(&sg, 8, 1.0f, NULL));
    fake.made[1]->valid = 0; /* a buffer it uses was reallocated */
    ck_assert(step(&sg, 8, 1.0f, NULL));
    ck_assert_int_eq(fake.destroys, 1);
    ck_assert_int_eq(fake.begins, 2);
    ck_assert_int_eq(sg.recorded, 2);
    dt_step_graphs_free(&sg, &be);
}
END_TEST

START_TEST(failed_recordings_run_plainly_then_stop)
{
    struct dt_step_graphs sg;
    dt_status st = {0};
    char buf[1024] = "";
    FILE *note = fmemopen(buf, sizeof buf, "w");
    ck_assert_int_eq(dt_step_graphs_init(&sg, &model, &be, &st), DT_OK);
    fake.fail_next = 100;
    step(&sg, 8, 1.0f, note);
    for (int i = 0; i < 5; i++) ck_assert(!step(&sg, 8, 1.0f, note));
    fclose(note);
    ck_assert_int_eq(fake.begins, 3); /* three tries, then no more */
    ck_assert_int_eq(sg.failed, 3);
    ck_assert_int_eq(sg.plain, 6);
    ck_assert_str_eq(sg.why, "the test says no");
    ck_assert_msg(strstr(buf, "--cuda-graphs: recording the step (batch 8) failed: the test says no; it runs "
                              "without a graph\n"), "%s", buf);
    ck_assert_msg(strstr(buf, "and so will every later step"), "%s", buf);
    dt_step_graphs_free(&sg, &be);
}
END_TEST

/* A plain step is the model's own forward, loss and backward, on the same
 * random draws. */
START_TEST(plain_steps_equal_the_model_s_own)
{
    struct dt_step_graphs sg;
    dt_status st = {0};
    ck_assert_int_eq(dt_step_graphs_init(&sg, &model, &be, &st), DT_OK);
    dt_rng a = rng;
    dt_model_forward(&model, 8, 1, &a);
    struct dt_loss_result ref = dt_model_loss(&model, labels, 8, 0.125f);
    dt_model_backward(&model, 8, &a);
    struct dt_loss_result r = dt_step_graphs_run(&sg, &model, labels, 8, 0.125f, &rng, NULL);
    ck_assert(r.loss_sum == ref.loss_sum && r.correct == ref.correct);
    ck_assert(!memcmp(&a, &rng, sizeof a)); /* the same draws */
    dt_step_graphs_free(&sg, &be);
}
END_TEST

START_TEST(model_check)
{
    dt_status st = {0};
    struct dt_step_graphs sg;
    /* The CPU backend has no recording. */
    ck_assert_int_eq(dt_step_graphs_init(&sg, &model, &dt_backend_cpu, &st), DT_EUSAGE);
    ck_assert_str_eq(st.msg, "--cuda-graphs: the cpu backend cannot record a step");
    ck_assert(!sg.on);
    /* Batchnorm brings its statistics to the host: refused, named. */
    static const struct dt_layer_spec specs[] = {
        {.type = "conv2d", .filters = 2, .kernel = 3},
        {.type = "batchnorm", .activation = DT_ACT_RELU},
        {.type = "dense", .filters = 3},
    };
    struct dt_model m;
    memset(&st, 0, sizeof st);
    ck_assert_int_eq(dt_model_build_specs(&m, "bn.cfg", (struct dt_shape){6, 6, 1}, 3, specs, 3, &st), DT_OK);
    ck_assert_int_eq(dt_step_graphs_init(&sg, &m, &be, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "--cuda-graphs: model bn.cfg: layer batch_normalization (batchnorm) cannot be "
                                 "recorded into a graph: its batch statistics go to the host at every step; run "
                                 "this model without --cuda-graphs"), "%s", st.msg);
    dt_model_free(&m);
    /* Everything else can be. */
    ck_assert_int_eq(dt_step_graphs_init(&sg, &model, &be, &st), DT_OK);
    ck_assert(sg.on);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("step graphs");
    TCase *tc = tcase_create("policy");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, record_after_one_plain_step_then_replay);
    tcase_add_test(tc, shapes_and_scales_are_separate_graphs);
    tcase_add_test(tc, stale_graphs_are_recorded_again);
    tcase_add_test(tc, failed_recordings_run_plainly_then_stop);
    tcase_add_test(tc, plain_steps_equal_the_model_s_own);
    tcase_add_test(tc, model_check);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

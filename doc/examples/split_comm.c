/* split_comm.c: libdtrain inside a larger MPI program.
 *
 *   mpirun -np 4 split_comm fashion_mnist.h5 [EPOCHS]
 *
 * The program splits MPI_COMM_WORLD in two halves and gives each half's
 * communicator to dtrain_init, so two independent trainings run side by
 * side in one job:
 *   - group 0 trains an MLP with Adam (the settings of custom_loop.c) and,
 *     between epochs, does MPI work of its own on the same split
 *     communicator (an all-reduce whose result it checks);
 *   - group 1 trains two models in one process, stepping them alternately
 *     on the same batches: an MLP with Adam and one with SGD.
 * At the end each group's rank 0 sends its losses to world rank 0 over
 * MPI_COMM_WORLD, which prints them all: the caller's communication on the
 * world, on the split communicators and libdtrain's (on duplicates of them)
 * never mix. With an even number of ranks, group 0's losses are those of
 * `custom_loop` (and of `dtrain --model mlp`) on half the ranks.
 *
 * Build: cc split_comm.c $(pkg-config --cflags --libs dtrain) */
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>
#include <dtrain.h>

enum { MAX_EPOCHS = 16, MAX_MODELS = 2 };

static int check(dtrain_context *ctx, int rc, const char *what)
{
    if (rc != DTRAIN_OK && dtrain_rank(ctx) <= 0)
        fprintf(stderr, "split_comm: %s: %s (%s)\n", what, dtrain_last_error(ctx), dtrain_strerror(rc));
    return rc;
}

int main(int argc, char **argv)
{
    int provided, wrank, wsize, rc = DTRAIN_OK;
    dtrain_blas_prepare(argv); /* before MPI: the BLAS kernels dtrain itself runs */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (argc < 2 || wsize < 2) {
        if (wrank == 0) fprintf(stderr, "usage: mpirun -np N split_comm DATA.h5 [EPOCHS] (N >= 2)\n");
        MPI_Finalize();
        return DTRAIN_EUSAGE;
    }
    int epochs = argc > 2 ? atoi(argv[2]) : 2;
    if (epochs < 1 || epochs > MAX_EPOCHS) epochs = 2;

    /* The application's own layout: two halves. */
    int group = wrank < (wsize + 1) / 2 ? 0 : 1;
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, group, wrank, &half);
    int hrank, hsize;
    MPI_Comm_rank(half, &hrank);
    MPI_Comm_size(half, &hsize);

    const int nmodels = group == 0 ? 1 : 2;
    const char *optimizer[MAX_MODELS] = {"adam", group == 0 ? "adam" : "sgd"};
    double losses[MAX_MODELS][MAX_EPOCHS] = {{0}};
    int app_ok = 1;

    dtrain_context *ctx = NULL;
    dtrain_dataset *train = NULL;
    dtrain_model *model[MAX_MODELS] = {NULL, NULL};
    const char *files[] = {argv[1]};
    dtrain_dataset_options dopt;
    dtrain_dataset_options_init(&dopt);
    dopt.shard_policy = "data";
    if (check(ctx, rc = dtrain_init(half, NULL, &ctx), "dtrain_init") ||
        check(ctx, rc = dtrain_dataset_open(ctx, files, 1, 64, &dopt, &train), "dtrain_dataset_open"))
        goto out;
    for (int k = 0; k < nmodels; k++) {
        dtrain_model_options mopt;
        dtrain_model_options_init(&mopt);
        mopt.model = "mlp";
        mopt.optimizer = optimizer[k];
        if (check(ctx, rc = dtrain_model_create(ctx, train, &mopt, &model[k]), "dtrain_model_create")) goto out;
    }

    for (int epoch = 0; epoch < epochs; epoch++) {
        double loss[MAX_MODELS] = {0.0, 0.0};
        long long samples = 0;
        dtrain_batch b;
        dtrain_dataset_begin_epoch(train, epoch, NULL);
        while (dtrain_dataset_next(train, &b)) {
            for (int k = 0; k < nmodels; k++) { /* each model its own step, on the same batch */
                double l;
                if (check(ctx, rc = dtrain_train_step(model[k], &b, &l, NULL), "dtrain_train_step")) goto out;
                loss[k] += l;
            }
            samples += b.global;
        }
        if (check(ctx, rc = dtrain_reduce(ctx, loss, nmodels, DTRAIN_SUM), "dtrain_reduce")) goto out;
        for (int k = 0; k < nmodels; k++) losses[k][epoch] = loss[k] / (double)samples;
        if (group == 0) { /* the application's own collective on the communicator it gave dtrain */
            int one = 1, count = 0;
            MPI_Allreduce(&one, &count, 1, MPI_INT, MPI_SUM, half);
            app_ok &= count == hsize;
        }
    }

out:
    for (int k = 0; k < MAX_MODELS; k++) dtrain_model_free(model[k]);
    dtrain_dataset_close(train);
    dtrain_finalize(ctx);

    /* Back to the world: every group's rank 0 reports to world rank 0. */
    int all_ok = rc == DTRAIN_OK && app_ok, ok = 0;
    MPI_Allreduce(&all_ok, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    int other = (wsize + 1) / 2; /* group 1's rank 0 */
    if (wrank == other) MPI_Send(losses, MAX_MODELS * MAX_EPOCHS, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
    if (wrank == 0) {
        double theirs[MAX_MODELS][MAX_EPOCHS];
        MPI_Recv(theirs, MAX_MODELS * MAX_EPOCHS, MPI_DOUBLE, other, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("group 0: %d rank%s, own MPI work on its communicator: %s\n", hsize, hsize == 1 ? "" : "s",
               app_ok ? "ok" : "WRONG");
        for (int e = 0; e < epochs; e++) printf("group 0 model 0 (mlp, adam) epoch %d: loss %.4f\n", e + 1, losses[0][e]);
        printf("group 1: %d rank%s, two models in one process\n", wsize - hsize, wsize - hsize == 1 ? "" : "s");
        for (int k = 0; k < 2; k++)
            for (int e = 0; e < epochs; e++)
                printf("group 1 model %d (mlp, %s) epoch %d: loss %.4f\n", k, k ? "sgd" : "adam", e + 1, theirs[k][e]);
        printf("split_comm: %s\n", ok ? "done" : "FAILED");
    }
    MPI_Comm_free(&half);
    MPI_Finalize();
    return ok ? 0 : (rc != DTRAIN_OK ? rc : 1);
}

/* custom_loop.c: the seed's custom training loop, written against libdtrain.
 *
 *   mpirun -np 2 custom_loop fashion_mnist.h5 [EPOCHS] [map_threads=N] [num_classes=N] [logdir=DIR]
 *
 * An MLP on Fashion-MNIST, Adam, batch 64 per replica, 2 epochs by default.
 * NAME=VALUE arguments set the dataset option of that name (map_threads: 0,
 * the default, is auto; num_classes: 0, the default, is the file's count)
 * or ask for histograms (logdir, below).
 * Each replica sums its own per-sample losses; at the epoch's end the sums
 * are reduced over the replicas with SUM and divided by the epoch's samples,
 * which is the TensorFlow tutorial's
 *
 *     per_replica_losses = strategy.run(train_step, args=(x,))
 *     total_loss += strategy.reduce(SUM, per_replica_losses, axis=None)
 *     train_loss = total_loss / num_batches
 *
 * with the mean taken per sample instead of per batch, so that the figure is
 * the one `dtrain --model mlp` prints for the same settings (its epoch line's
 * loss), and tests/api.sh checks they agree to the printed digits.
 *
 * With logdir=LOGDIR, TensorBoard histograms of the weights and gradients after
 * every epoch, into LOGDIR/train (Keras' TensorBoard(histogram_freq=1)).
 *
 * Build: cc custom_loop.c $(pkg-config --cflags --libs dtrain)
 * (or mpicc, which adds MPI's flags). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <dtrain.h>

/* Print the error once (rank 0; every rank holds the same agreed message). */
static int fail(dtrain_context *ctx, int rc, const char *what)
{
    if (dtrain_rank(ctx) <= 0)
        fprintf(stderr, "custom_loop: %s: %s (%s)\n", what, dtrain_last_error(ctx), dtrain_strerror(rc));
    return rc;
}

int main(int argc, char **argv)
{
    int provided, rc;
    dtrain_blas_prepare(argv); /* before MPI: the BLAS kernels dtrain itself runs */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    if (argc < 2) {
        fprintf(stderr, "usage: custom_loop DATA.h5 [EPOCHS] [map_threads=N] [num_classes=N] [logdir=DIR]\n");
        MPI_Finalize();
        return DTRAIN_EUSAGE;
    }
    int epochs = argc > 2 ? atoi(argv[2]) : 2, map_threads = 0, num_classes = 0;
    const char *logdir = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strncmp(argv[i], "map_threads=", 12)) map_threads = atoi(argv[i] + 12);
        else if (!strncmp(argv[i], "num_classes=", 12)) num_classes = atoi(argv[i] + 12);
        else if (!strncmp(argv[i], "logdir=", 7)) logdir = argv[i] + 7;
        else {
            fprintf(stderr, "custom_loop: unknown argument '%s' (expected map_threads=N, num_classes=N or logdir=DIR)\n", argv[i]);
            MPI_Finalize();
            return DTRAIN_EUSAGE;
        }
    }

    dtrain_context *ctx = NULL;
    dtrain_dataset *train = NULL;
    dtrain_model *model = NULL;
    if ((rc = dtrain_init(MPI_COMM_WORLD, NULL, &ctx)) != DTRAIN_OK) {
        fail(ctx, rc, "dtrain_init");
        goto out;
    }

    /* experimental_distribute_dataset: 64 samples per replica per step. */
    const char *files[] = {argv[1]};
    dtrain_dataset_options dopt;
    dtrain_dataset_options_init(&dopt);
    dopt.shard_policy = "data";
    dopt.map_threads = map_threads;
    dopt.num_classes = num_classes;
    if ((rc = dtrain_dataset_open(ctx, files, 1, 64, &dopt, &train)) != DTRAIN_OK) {
        fail(ctx, rc, "dtrain_dataset_open");
        goto out;
    }

    /* with strategy.scope(): model = mlp; optimizer = Adam() */
    dtrain_model_options mopt;
    dtrain_model_options_init(&mopt);
    mopt.model = "mlp";
    mopt.optimizer = "adam";
    if ((rc = dtrain_model_create(ctx, train, &mopt, &model)) != DTRAIN_OK) {
        fail(ctx, rc, "dtrain_model_create");
        goto out;
    }
    if (dtrain_rank(ctx) == 0)
        printf("%d replicas, model mlp (%zu parameters), %lld training samples\n", dtrain_size(ctx),
               dtrain_model_num_parameters(model), dtrain_dataset_size(train));

    for (int epoch = 0; epoch < epochs; epoch++) {
        double loss = 0.0; /* this replica's loss sum over the epoch */
        long long samples = 0;
        dtrain_batch batch;
        dtrain_dataset_begin_epoch(train, epoch, NULL);
        while (dtrain_dataset_next(train, &batch)) {
            double step_loss;
            /* strategy.run(train_step): forward, loss, gradients ... */
            if ((rc = dtrain_forward_backward(model, &batch, &step_loss, NULL)) != DTRAIN_OK) {
                fail(ctx, rc, "dtrain_forward_backward");
                goto out;
            }
            /* ... optimizer.apply_gradients, the gradients all-reduced. */
            if ((rc = dtrain_apply_gradients(model)) != DTRAIN_OK) {
                fail(ctx, rc, "dtrain_apply_gradients");
                goto out;
            }
            loss += step_loss;
            samples += batch.global; /* the step's samples over all replicas */
        }
        /* strategy.reduce(SUM, per_replica_losses) */
        if ((rc = dtrain_reduce(ctx, &loss, 1, DTRAIN_SUM)) != DTRAIN_OK) {
            fail(ctx, rc, "dtrain_reduce");
            goto out;
        }
        if (dtrain_rank(ctx) == 0) printf("epoch %d: loss %.4f\n", epoch + 1, loss / (double)samples);
        /* TensorBoard(histogram_freq=1): step = epoch, as dtrain numbers its epochs' events */
        if (logdir && (rc = dtrain_write_histograms(model, logdir, epoch,
                                                    DTRAIN_HISTOGRAM_WEIGHTS | DTRAIN_HISTOGRAM_GRADS)) != DTRAIN_OK) {
            fail(ctx, rc, "dtrain_write_histograms");
            goto out;
        }
    }
    if (dtrain_dataset_test_size(train) > 0) {
        double val_loss, val_acc;
        if ((rc = dtrain_evaluate(model, train, &val_loss, &val_acc)) != DTRAIN_OK) {
            fail(ctx, rc, "dtrain_evaluate");
            goto out;
        }
        if (dtrain_rank(ctx) == 0) printf("test: loss %.4f - accuracy %.4f\n", val_loss, val_acc);
    }

out:
    dtrain_model_free(model);
    dtrain_dataset_close(train);
    dtrain_finalize(ctx);
    MPI_Finalize();
    return rc;
}

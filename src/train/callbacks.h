/* callbacks.h: Keras' EarlyStopping and ModelCheckpoint(save_best_only)
 * decisions, and the signals that ask a batch job to checkpoint and stop.
 *
 * A monitor follows one figure of the epoch line (val_loss, val_accuracy,
 * loss, accuracy) and decides, as Keras 3 does, whether an epoch improved on
 * the best so far (by more than min_delta: lower for losses, higher for
 * accuracies; NaN never improves) and whether patience has run out. The
 * trainer does the acting (saving, stopping, restoring weights); this file
 * only decides, so the rules are unit-tested without training. */
#ifndef DT_CALLBACKS_H
#define DT_CALLBACKS_H

struct dt_monitor {
    int maximize;       /* accuracies: higher is better */
    double min_delta;   /* >= 0 */
    int patience;       /* epochs without improvement before stopping; -1 never stop */
    double best;        /* +inf (or -inf) until the first epoch */
    int best_epoch;     /* 0-based; -1 before the first improvement */
    int wait;           /* epochs since the last improvement */
    int stopped_epoch;  /* the epoch after which training stops; -1 */
};

/* name: val_loss | val_accuracy | loss | accuracy */
void dt_monitor_init(struct dt_monitor *m, const char *name, int patience, double min_delta);
/* After epoch (0-based) with the monitored value: 1 if it is the new best. */
int dt_monitor_update(struct dt_monitor *m, int epoch, double value);

/* SIGUSR1 and SIGTERM set a flag instead of killing the process (Slurm's
 * --signal=B:USR1@120, and the SIGTERM Slurm and PBS send at walltime). */
void dt_signals_install(void);
/* The signal caught (SIGUSR1 or SIGTERM), or 0. */
int dt_signals_pending(void);

/* The exit code of a run stopped by a signal after writing its checkpoint:
 * job scripts requeue on it (EX_TEMPFAIL, "try again"). */
enum { DT_EXIT_REQUEUE = 75 };

#endif

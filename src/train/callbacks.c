/* callbacks.c: early stopping / best-model decisions and signals (see callbacks.h). */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#include "train/callbacks.h"

void dt_monitor_init(struct dt_monitor *m, const char *name, int patience, double min_delta)
{
    memset(m, 0, sizeof *m);
    m->maximize = strstr(name, "accuracy") != NULL;
    m->min_delta = fabs(min_delta);
    m->patience = patience;
    m->best = m->maximize ? -INFINITY : INFINITY;
    m->best_epoch = -1;
    m->stopped_epoch = -1;
}

/* Keras 3's EarlyStopping.on_epoch_end: wait counts every epoch, an
 * improvement resets it, and training stops once wait reaches patience
 * (never after the first epoch). */
int dt_monitor_update(struct dt_monitor *m, int epoch, double value)
{
    m->wait++;
    int better = m->maximize ? value - m->min_delta > m->best : value + m->min_delta < m->best;
    if (better) { /* false for NaN */
        m->best = value;
        m->best_epoch = epoch;
        m->wait = 0;
        return 1;
    }
    if (m->patience >= 0 && m->wait >= m->patience && epoch > 0) m->stopped_epoch = epoch;
    return 0;
}

static volatile sig_atomic_t caught;

static void on_signal(int sig) { caught = sig; }

void dt_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* MPI and HDF5 calls carry on; we look at step boundaries */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int dt_signals_pending(void) { return (int)caught; }

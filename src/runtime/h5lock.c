/* h5lock.c: one lock around the HDF5 library (see h5lock.h). */
#include "config.h"

#include <pthread.h>

#include "runtime/h5lock.h"

static pthread_mutex_t h5 = PTHREAD_MUTEX_INITIALIZER;

void dt_h5_lock(void) { pthread_mutex_lock(&h5); }

void dt_h5_unlock(void) { pthread_mutex_unlock(&h5); }

/* pool.c: the map threads (see pool.h).
 *
 * A generation counter starts each run: a thread that wakes finds gen moved
 * on, runs its part, and the last one to finish signals the caller. */
#include "config.h"

#include <signal.h>
#include <stdlib.h>

#include "runtime/status.h"
#include "data/pool.h"

struct worker {
    struct dt_pool *p;
    int part;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct dt_pool *p = w->p;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = p->gen;
        dt_pool_fn fn = p->fn;
        void *a = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(a, w->part, p->n);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
    free(w);
    return NULL;
}

void dt_pool_init(struct dt_pool *p, int n)
{
    *p = (struct dt_pool){.n = n < 1 ? 1 : n};
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (p->n == 1) return;
    p->thread = dt_xcalloc((size_t)p->n, sizeof *p->thread);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* signals stay with the main thread */
    for (int k = 1; k < p->n; k++) {
        struct worker *w = dt_xmalloc(sizeof *w);
        *w = (struct worker){p, k};
        if (pthread_create(&p->thread[k], NULL, work, w) != 0) DT_DIE("cannot start map thread %d of %d", k, p->n);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void dt_pool_run(struct dt_pool *p, dt_pool_fn fn, void *arg)
{
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void dt_pool_free(struct dt_pool *p)
{
    if (p->thread) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
        for (int k = 1; k < p->n; k++) pthread_join(p->thread[k], NULL);
        free(p->thread);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    *p = (struct dt_pool){0};
}

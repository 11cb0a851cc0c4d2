/* sample.c: the next token from a position's logits (see generate.h).
 *
 * Temperature 0 is greedy: the largest logit, the lowest id among equals.
 * Otherwise the logits are divided by the temperature, cut to the top_k
 * largest (all when top_k is 0 or at least V), and one uniform draw u in
 * [0, 1) (53 bits) picks the token whose cumulative probability first
 * exceeds u, the candidates in id order (cut to top_k: in descending order,
 * ties by the lower id): the same seed gives the same tokens on any
 * machine whose logits agree. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "generate/generate.h"

void dt_sampler_init(struct dt_sampler *s, float temperature, int top_k, uint64_t seed, int vocab)
{
    s->temperature = temperature;
    s->top_k = top_k;
    dt_rng_seed(&s->rng, seed, 0x6e6);
    s->p = dt_xcalloc((size_t)vocab, sizeof *s->p);
    s->idx = dt_xcalloc((size_t)vocab, sizeof *s->idx);
}

void dt_sampler_free(struct dt_sampler *s)
{
    free(s->p);
    free(s->idx);
    s->p = NULL;
    s->idx = NULL;
}

static const float *sort_logits; /* qsort's context: one sampler runs at a time */

static int by_logit(const void *a, const void *b)
{
    const int i = *(const int *)a, j = *(const int *)b;
    if (sort_logits[i] != sort_logits[j]) return sort_logits[i] > sort_logits[j] ? -1 : 1;
    return (i > j) - (i < j);
}

int dt_sample(struct dt_sampler *s, const float *logits, int V)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (s->temperature == 0.0f) return best;
    int k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    for (int v = 0; v < V; v++) s->idx[v] = v;
    if (k < V) { /* the k largest first */
        sort_logits = logits;
        qsort(s->idx, (size_t)V, sizeof *s->idx, by_logit);
    }
    const double inv_t = 1.0 / (double)s->temperature, top = (double)logits[best];
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        s->p[j] = exp(((double)logits[s->idx[j]] - top) * inv_t); /* the largest is exp(0): no overflow */
        sum += s->p[j];
    }
    const double u = (double)(dt_rng_u64(&s->rng) >> 11) * 0x1p-53 * sum;
    double at = 0.0;
    for (int j = 0; j < k; j++) {
        at += s->p[j];
        if (u < at) return s->idx[j];
    }
    return s->idx[k - 1]; /* u within rounding of the sum */
}

/* fsdp.c: fully sharded data parallelism (ZeRO stage 3, PyTorch FSDP),
 * --strategy fsdp.
 *
 * Rank r owns segment r of the flat parameter block (as sharded.c, ZeRO-1):
 * its fp32 parameters, their summed gradient and the optimizer's slots for
 * them, and nothing else between steps. Layers are grouped into buckets of
 * about --bucket-mb (whole layers, in order). Just before a bucket's first
 * layer runs, its parameters are all-gathered into one of two buffers (each
 * rank sends its part of the bucket), and the next bucket's gather is
 * started behind it (the prefetch); once its layers have run the buffer is
 * free again. Backward does the same in reverse, and a bucket's gradient,
 * once its layers are done, is reduce-scattered to the owners (nonblocking,
 * in one of two gradient buffers) and added to their shard. The update runs
 * on the shard alone; the next forward gathers the new values.
 *
 * The design decision a reader must know: at most two buckets' parameters
 * are ever held (the one in use and the one arriving), so a rank's memory is
 * its shard (16 bytes a parameter with Adam: value, gradient, two slots,
 * over P) plus two buckets of parameters and two of gradients, whatever the
 * model's size. held_peak counts it; --verbose prints it and a test asserts
 * on it. Open MPI progresses nonblocking collectives only inside MPI calls,
 * so every layer boundary tests the requests in flight. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/tl_span.h"
#include "runtime/checks.h"
#include "strategy/memplan.h"
#include "strategy/strategy.h"

struct bucket {
    int first, last;      /* its layers with parameters: the first and the last */
    size_t off, len;      /* its range of the flat block */
    int *counts, *displs; /* per rank: that rank's part of the range (floats), from off */
    size_t at;            /* where this rank's part starts in its shard */
};

struct fsdp {
    int nb;
    struct bucket *b;
    int *of_layer;             /* [nlayers]: a layer's bucket, -1 without parameters */
    float *shard, *grad;       /* [shard_len]: parameters, the update's gradient */
    float *rs;                 /* [shard_len] a later micro-batch's reduce-scatter lands here (--grad-accum) */
    int *rs_seen;              /* [nb]: this update's gradients of the bucket added so far */
    size_t max_len;            /* the largest bucket (floats) */
    size_t slot_len[2];        /* the largest bucket k with k % 2 = slot: that slot's buffers */
    float *pbuf[2], *gbuf[2];  /* gathered parameters / gradients on their way, by bucket % 2 */
    int pb[2], gb[2];          /* the bucket in each buffer; -1 none */
    int direct[2];             /* the reduce-scatter from gbuf lands in grad itself (the update's first) */
    MPI_Request preq[2], greq[2];
    size_t held, held_peak;    /* bytes of gathered parameters in the buffers now, and at most */
    struct dt_param_hook hook;
    MPI_Comm comm;             /* the shards' ranks: all, or the node's (--fsdp-shard node) */
    MPI_Comm cross;            /* HSDP: the same shard on the other nodes; MPI_COMM_NULL otherwise */
    int rank, nshards;         /* this rank's shard, of how many */
    size_t shard_len;
    struct dt_strategy *s;     /* its wait hooks (the trainer's stall watchdog) */
};

/* The trainer's stall watchdog told of a wait on other ranks, and of its end. */
static void waiting(struct fsdp *z, const char *what)
{
    if (z->s->wait_begin) z->s->wait_begin(z->s->alive_arg, what);
}
static void waited(struct fsdp *z)
{
    if (z->s->wait_end) z->s->wait_end(z->s->alive_arg);
}

/* MPI_Wait on a request of other ranks, the watchdog told. */
static void wait_for(struct fsdp *z, MPI_Request *req, const char *what)
{
    if (*req == MPI_REQUEST_NULL) return;
    waiting(z, what);
    DT_MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
    waited(z);
}

void dt_fsdp_segment(int node, const struct dt_topo *t, size_t n, int rank, size_t *off, size_t *len)
{
    if (!node) {
        dt_segment(n, t->size, rank, off, len);
        return;
    }
    int index = 0; /* rank's place among its node's ranks */
    for (int r = 0; r < rank; r++) index += t->node_of[r] == t->node_of[rank];
    dt_segment(n, t->node_size[t->node_of[rank]], index, off, len);
}

/* ---- buckets ---------------------------------------------------------------- */

/* Floats of a large bucket's reduce-scatter at a time (16 MiB; scatter_grads). */
#define PIECE ((size_t)1 << 22)

static void make_buckets(struct dt_strategy *s, struct fsdp *z, int nranks)
{
    const struct dt_model *m = s->model;
    z->of_layer = dt_xcalloc((size_t)m->nlayers + 1, sizeof(int));
    z->nb = dt_fsdp_group(m, s->cfg->bucket_mb, z->of_layer, NULL);
    z->b = dt_xcalloc((size_t)z->nb + 1, sizeof *z->b);
    for (int i = 0, prev = -1; i < m->nlayers; i++) {
        const int k = z->of_layer[i];
        if (k < 0) continue;
        struct bucket *b = &z->b[k];
        if (k != prev) { /* its first layer */
            b->first = i;
            b->off = m->layers[i].param_offset;
            prev = k;
        }
        b->last = i;
        b->len = m->layers[i].param_offset + m->layers[i].nparams - b->off;
    }
    for (int k = 0; k < z->nb; k++) {
        struct bucket *b = &z->b[k];
        b->counts = dt_xcalloc((size_t)nranks, sizeof(int));
        b->displs = dt_xcalloc((size_t)nranks, sizeof(int));
        for (int r = 0; r < nranks; r++) {
            size_t off, len;
            dt_segment(m->nparams, nranks, r, &off, &len); /* shard r of the node, or of all */
            size_t lo = off > b->off ? off : b->off, hi = off + len < b->off + b->len ? off + len : b->off + b->len;
            b->counts[r] = hi > lo ? (int)(hi - lo) : 0;
            b->displs[r] = hi > lo ? (int)(lo - b->off) : 0;
            if (r == z->rank) b->at = hi > lo ? lo - s->shard_off : 0;
        }
        if (b->len > z->max_len) z->max_len = b->len;
        if (b->len > z->slot_len[k % 2]) z->slot_len[k % 2] = b->len;
    }
}

/* ---- the two parameter buffers ------------------------------------------------ */

/* Keep requests moving: Open MPI progresses them only inside MPI calls. */
static void progress(struct fsdp *z)
{
    int done;
    for (int k = 0; k < 2; k++) {
        if (z->preq[k] != MPI_REQUEST_NULL) DT_MPI_CHECK(MPI_Test(&z->preq[k], &done, MPI_STATUS_IGNORE));
        if (z->greq[k] != MPI_REQUEST_NULL) DT_MPI_CHECK(MPI_Test(&z->greq[k], &done, MPI_STATUS_IGNORE));
    }
}

static void release(struct fsdp *z, int slot)
{
    if (z->pb[slot] < 0) return;
    wait_for(z, &z->preq[slot], "an fsdp parameter gather"); /* a gather in flight lands first */
    z->held -= z->b[z->pb[slot]].len * sizeof(float);
    z->pb[slot] = -1;
}

/* Start gathering bucket k into its buffer (unless it is there or coming). */
static void gather(struct fsdp *z, int k)
{
    if (k < 0 || k >= z->nb) return;
    const int slot = k % 2;
    if (z->pb[slot] == k) return;
    release(z, slot);
    const struct bucket *b = &z->b[k];
    z->pb[slot] = k;
    z->held += b->len * sizeof(float);
    if (z->held > z->held_peak) z->held_peak = z->held;
    DT_MPI_CHECK(MPI_Iallgatherv(z->shard + b->at, b->counts[z->rank], MPI_FLOAT, z->pbuf[slot], b->counts,
                                 b->displs, MPI_FLOAT, z->comm, &z->preq[slot]));
}

/* Bucket k's parameters, gathered (waits for them), the next one's on the way. */
static float *held(struct fsdp *z, int k, int next)
{
    gather(z, k);
    gather(z, next);
    const int slot = k % 2;
    DT_TL_BEGIN(tl0);
    wait_for(z, &z->preq[slot], "an fsdp parameter gather");
    DT_TL_END(tl0, DT_TL_COMM, "fsdp all-gather wait", NULL);
    return z->pbuf[slot];
}

/* ---- gradients ----------------------------------------------------------------- */

/* The reduce-scatter from gradient buffer slot is done: its part joins the shard's gradient. */
static void land(struct fsdp *z, int slot)
{
    if (z->gb[slot] < 0) return;
    wait_for(z, &z->greq[slot], "an fsdp gradient reduce-scatter");
    const int k = z->gb[slot];
    const struct bucket *b = &z->b[k];
    const int n = b->counts[z->rank];
    if (!z->direct[slot])
        for (int i = 0; i < n; i++) z->grad[b->at + (size_t)i] += z->rs[b->at + (size_t)i];
    z->rs_seen[k]++;
    z->gb[slot] = -1;
}

static void scatter_grads(struct fsdp *z, int k)
{
    const int slot = k % 2;
    const struct bucket *b = &z->b[k];
    z->gb[slot] = k;
    /* The update's first gradient of k lands in place; a later micro-batch's
     * (every earlier one of k has landed: its buffer was reused since) beside it. */
    z->direct[slot] = z->rs_seen[k] == 0;
    if (!z->direct[slot] && !z->rs) z->rs = dt_xcalloc(z->shard_len ? z->shard_len : 1, sizeof(float));
    float *to = (z->direct[slot] ? z->grad : z->rs) + b->at;
    if (b->len <= PIECE) {
        DT_MPI_CHECK(MPI_Ireduce_scatter(z->gbuf[slot], to, b->counts, MPI_FLOAT, MPI_SUM, z->comm, &z->greq[slot]));
        return;
    }
    /* A large bucket (a transformer's embedding, a wide first layer: the
     * last in backward, so nothing is left to overlap) goes in pieces, one
     * after another: Open MPI's non-blocking reduce-scatter takes a
     * temporary of twice the whole call, which would be the rank's peak. */
    DT_TL_BEGIN(tl0);
    waiting(z, "an fsdp gradient reduce-scatter");
    int *pc = dt_xcalloc((size_t)z->nshards, sizeof(int));
    const size_t mine_lo = (size_t)b->displs[z->rank], mine_hi = mine_lo + (size_t)b->counts[z->rank];
    for (size_t p0 = 0; p0 < b->len; p0 += PIECE) {
        const size_t p1 = b->len - p0 < PIECE ? b->len : p0 + PIECE;
        for (int r = 0; r < z->nshards; r++) {
            const size_t lo = (size_t)b->displs[r], hi = lo + (size_t)b->counts[r];
            const size_t a = lo > p0 ? lo : p0, e = hi < p1 ? hi : p1;
            pc[r] = e > a ? (int)(e - a) : 0;
        }
        const size_t at = mine_lo > p0 ? mine_lo : p0;
        float *dst = at < mine_hi ? to + (at - mine_lo) : to;
        DT_MPI_CHECK(MPI_Reduce_scatter(z->gbuf[slot] + p0, dst, pc, MPI_FLOAT, MPI_SUM, z->comm));
    }
    free(pc);
    waited(z);
    z->greq[slot] = MPI_REQUEST_NULL;
    DT_TL_END(tl0, DT_TL_COMM, "fsdp reduce-scatter in pieces", NULL);
}

/* ---- the model's hook -------------------------------------------------------------- */

static const float *hook_at(void *arg, int layer, int backward, float **grads)
{
    struct dt_strategy *s = arg;
    struct fsdp *z = s->priv;
    const int k = z->of_layer[layer];
    progress(z);
    if (k < 0) return NULL;
    const struct bucket *b = &z->b[k];
    const size_t in = s->model->layers[layer].param_offset - b->off;
    float *p = held(z, k, backward ? k - 1 : k + 1);
    if (backward) {
        if (layer == b->last) land(z, k % 2); /* its gradient buffer is free once its last use has landed */
        *grads = z->gbuf[k % 2] + in;
    }
    return p + in;
}

static void hook_after(void *arg, int layer, int backward)
{
    struct dt_strategy *s = arg;
    struct fsdp *z = s->priv;
    const int k = z->of_layer[layer];
    if (k < 0) return;
    const struct bucket *b = &z->b[k];
    if (!backward && layer == b->last && k < z->nb - 1) release(z, k % 2); /* the last stays for backward */
    if (backward && layer == b->first) {
        release(z, k % 2);
        scatter_grads(z, k);
    }
}

/* ---- the strategy ------------------------------------------------------------------ */

static int fsdp_setup(struct dt_strategy *s, dt_status *st)
{
    const struct dt_topo *t = &s->coll->topo;
    struct dt_model *m = s->model;
    if (m->nparams > (size_t)INT_MAX)
        return dt_fail(st, DT_EUSAGE, "--strategy fsdp: %zu parameters exceed MPI's int counts", m->nparams);
    const int node = s->cfg->fsdp_node;
    if (node && !t->uniform)
        return dt_fail(st, DT_EUSAGE, "--fsdp-shard node: the nodes hold %d to %d ranks; sharding inside each node "
                       "needs the same count on every node (or use --fsdp-shard world)", t->min_local, t->max_local);
    struct fsdp *z = dt_xcalloc(1, sizeof *z);
    s->priv = z;
    z->s = s;
    z->comm = node ? t->node : t->world;
    z->cross = node && t->nnodes > 1 ? t->cross : MPI_COMM_NULL;
    z->rank = node ? t->local_rank : t->rank;
    z->nshards = node ? t->local_size : t->size;
    dt_fsdp_segment(node, t, m->nparams, t->rank, &s->shard_off, &s->shard_len);
    make_buckets(s, z, z->nshards);
    const size_t sl = s->shard_len ? s->shard_len : 1;
    z->shard = dt_xmalloc(sizeof(float) * sl);
    z->grad = dt_xcalloc(sl, sizeof(float));
    z->shard_len = s->shard_len;
    z->rs_seen = dt_xcalloc((size_t)z->nb + 1, sizeof(int));
    for (int k = 0; k < 2; k++) {
        /* Each slot as large as its own buckets: a transformer's embedding
         * (bucket 0) is 5x a block, and only slot 0 ever holds it. */
        z->pbuf[k] = dt_xmalloc(sizeof(float) * (z->slot_len[k] ? z->slot_len[k] : 1));
        z->gbuf[k] = dt_xmalloc(sizeof(float) * (z->slot_len[k] ? z->slot_len[k] : 1));
        z->pb[k] = z->gb[k] = -1;
        z->preq[k] = z->greq[k] = MPI_REQUEST_NULL;
    }
    /* The whole block (rank 0's, broadcast, or a checkpoint's) is here once more: keep this rank's part. */
    s->be->download(z->shard, m->params + s->shard_off, sizeof(float) * s->shard_len);
    s->be->free(m->params);
    m->params = NULL;
    z->hook = (struct dt_param_hook){.at = hook_at, .after = hook_after, .arg = s};
    m->hook = &z->hook;
    dt_strategy_create_optim(s, s->shard_off, s->shard_len);
    return DT_OK;
}

static void fsdp_begin(struct dt_strategy *s, const float *stats) { memcpy(s->stats, stats, sizeof s->stats); }

static void fsdp_ready(struct dt_strategy *s, size_t offset) { (void)s; (void)offset; }

static void fsdp_finish(struct dt_strategy *s, float *stats)
{
    struct fsdp *z = s->priv;
    DT_TL_BEGIN(tl_rs);
    for (int k = 0; k < 2; k++) land(z, k);
    DT_TL_END(tl_rs, DT_TL_COMM, "fsdp reduce-scatter wait", NULL);
    if (z->cross != MPI_COMM_NULL) { /* HSDP: the other nodes' sums of the same shard */
        DT_TL_BEGIN(tl_x);
        DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, z->grad, (int)s->shard_len, MPI_FLOAT, MPI_SUM, z->cross));
        DT_TL_END(tl_x, DT_TL_COMM, "fsdp all-reduce across nodes", NULL);
    }
    int ok = s->be->unscale_check(z->grad, s->shard_len, 1.0f); /* each rank sees its shard: combined */
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, s->coll->topo.world));
    s->nonfinite = !ok;
    if (s->nonfinite && s->nan_policy == DT_NAN_SKIP) s->nan_skipped++;
    /* The shards of z->comm (all ranks, or under HSDP the node's) make one
     * copy; the other nodes hold the same sums and count them apart. */
    if (ok) dt_strategy_clip(s, z->grad, s->shard_len, z->comm);
    DT_TL_BEGIN(tl0);
    if (ok) dt_optim_step(&s->optim, z->shard, z->grad);
    DT_TL_END(tl0, DT_TL_COMPUTE, "optimizer", NULL);
    memset(z->rs_seen, 0, sizeof(int) * (size_t)z->nb);
    for (int k = 0; k < 2; k++) release(z, k); /* the next forward gathers the new values */
    DT_MPI_CHECK(MPI_Allreduce(s->stats, stats, DT_STATS, MPI_FLOAT, MPI_SUM, s->coll->topo.world));
}

/* The whole block of parameters (or of this update's gradients) into host:
 * on rank root, or on every rank when root < 0. */
/* The whole block of parameters (or of this update's gradients) into host:
 * on rank root, or on every rank when root < 0. Under --fsdp-shard node the
 * node's shards make the whole block: root's node gathers, the others have
 * nothing to do. */
static void fsdp_gather_block(struct dt_strategy *s, int grads, float *host, int root)
{
    struct fsdp *z = s->priv;
    const struct dt_topo *t = &s->coll->topo;
    const int node = s->cfg->fsdp_node;
    if (node && root >= 0 && t->node_of[root] != t->node_index) return;
    int *counts = dt_xcalloc((size_t)z->nshards, sizeof(int)), *displs = dt_xcalloc((size_t)z->nshards, sizeof(int));
    for (int r = 0; r < z->nshards; r++) {
        size_t off, len;
        dt_segment(s->model->nparams, z->nshards, r, &off, &len);
        counts[r] = (int)len;
        displs[r] = (int)off;
    }
    int at = root; /* root's index in z->comm */
    if (node && root >= 0) {
        at = 0;
        for (int r = 0; r < root; r++) at += t->node_of[r] == t->node_of[root];
    }
    const float *mine = grads ? z->grad : z->shard;
    if (root < 0)
        DT_MPI_CHECK(MPI_Allgatherv(mine, (int)s->shard_len, MPI_FLOAT, host, counts, displs, MPI_FLOAT, z->comm));
    else
        DT_MPI_CHECK(MPI_Gatherv(mine, (int)s->shard_len, MPI_FLOAT, host, counts, displs, MPI_FLOAT, at, z->comm));
    free(counts);
    free(displs);
}

static void fsdp_load_block(struct dt_strategy *s, const float *host)
{
    struct fsdp *z = s->priv;
    memcpy(z->shard, host + s->shard_off, sizeof(float) * s->shard_len);
    for (int k = 0; k < 2; k++) release(z, k); /* gathered copies are stale */
}

size_t dt_fsdp_held_peak(const struct dt_strategy *s, size_t *two_largest)
{
    const struct fsdp *z = s->priv;
    if (two_largest) *two_largest = (z->slot_len[0] + z->slot_len[1]) * sizeof(float);
    return z->held_peak;
}

int dt_fsdp_buckets(const struct dt_strategy *s) { return ((const struct fsdp *)s->priv)->nb; }

static void fsdp_teardown(struct dt_strategy *s)
{
    struct fsdp *z = s->priv;
    if (!z) return;
    for (int k = 0; k < 2; k++) {
        release(z, k);
        if (z->greq[k] != MPI_REQUEST_NULL) DT_MPI_CHECK(MPI_Wait(&z->greq[k], MPI_STATUS_IGNORE));
        free(z->pbuf[k]);
        free(z->gbuf[k]);
    }
    for (int k = 0; k < z->nb; k++) {
        free(z->b[k].counts);
        free(z->b[k].displs);
    }
    if (s->model && s->model->hook == &z->hook) s->model->hook = NULL;
    free(z->b);
    free(z->of_layer);
    free(z->shard);
    free(z->grad);
    free(z->rs);
    free(z->rs_seen);
    free(z);
    s->priv = NULL;
}

const struct dt_strategy_ops dt_strategy_fsdp = {
    .name = "fsdp",
    .setup = fsdp_setup,
    .begin = fsdp_begin,
    .grads_ready = fsdp_ready,
    .finish = fsdp_finish,
    .teardown = fsdp_teardown,
    .gather_block = fsdp_gather_block,
    .load_block = fsdp_load_block,
};

/* check_coll.c: the all-reduce algorithms (mpi, ring, hier, auto), the
 * topology they run on, 16-bit compression and auto's table. One program,
 * run by the launcher at 1 to 6 ranks (check_coll_npN); the rank count comes
 * from MPI_Comm_size, and layouts are emulated with ranks_per_node.
 *
 * Every rank computes the serial reference itself: an input is a pure
 * function of (kind, seed, rank, element), so knowing the right answer needs
 * no communication. Two kinds of input:
 * - EXACT: small integers, whose sums and partial sums (in any order) are
 *   exact in float and in fp16/bf16: results must equal the reference;
 * - RANDOM: non-integer floats of mixed magnitude (so the order of the sum
 *   shows in the bits): results within a derived rounding bound of a double
 *   reference (see check_sum).
 * Either way the result must be bitwise identical on every rank.
 *
 * MPI is initialised once and Check runs in no-fork mode, so every test is
 * collective. The one design decision: checks are agreed before they are
 * asserted (dt_status_agree carries the first failing rank's message to all),
 * so every rank fails the same assertion together and none is left waiting in
 * a collective the others have abandoned. */
#include "config.h"

#include "ck_fast.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/checks.h"
#include "collectives/coll.h"
#include "runtime/status.h"
#include "mpi_check.h"

#define SMALL_CHUNK 1024u         /* bytes: 256-float ring pieces */
#define MULTI 4099u               /* several small pieces per ring segment (prime) */
#define BIG (262144u * 2u + 5u)   /* hier's staging window holds 262144 floats per rank */
#define SENTINEL 0x7fc5a5a5u      /* a NaN no sum produces: marks memory nobody may write */

enum { K_EXACT = 1, K_RANDOM = 2, K_BOTH = 3 };
enum { M_IN = 1, M_OUT = 2, M_WIN = 4, M_WINOUT = 8, M_ALL = 15 };

static int rank, nranks;
static char dir[512];

static const size_t small_sizes[] = {0, 1, 2, 3, 5, 7, 13, 31, MULTI};
#define NSMALL (sizeof small_sizes / sizeof *small_sizes)

/* ---- agreeing on checks ---------------------------------------------------- */

/* Record this rank's first failed expectation (later ones are dropped). */
#define expect(st, cond, ...) mpi_check_expect(st, rank, cond, __VA_ARGS__)

/* Collective: fail on every rank if any rank recorded a failure. */
#define AGREE(st)                                                                   \
    do {                                                                            \
        dt_status_agree(&(st), MPI_COMM_WORLD);                                     \
        ck_assert_msg((st).code == DT_OK, "%s", (st).msg);                          \
    } while (0)

/* ---- inputs and the serial reference --------------------------------------- */

static uint64_t mix(uint64_t z) /* splitmix64's finaliser */
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float input(int kind, unsigned seed, int r, size_t i)
{
    if (kind == K_EXACT) /* in [-8, 8]: any partial sum of 6 fits 16 bits exactly */
        return (float)((int)((i * 13u + (size_t)r * 7u + seed) % 17u) - 8);
    static const float scale[3] = {1.0f, 0x1p-6f, 0x1p6f};
    uint64_t h = mix(((uint64_t)seed << 48) ^ ((uint64_t)r << 40) ^ (uint64_t)i);
    float u = (float)(h >> 40) * 0x1p-24f; /* [0, 1), 24 bits */
    return (2.0f * u - 1.0f) * scale[(i + (size_t)r) % 3];
}

struct ref {
    int kind;
    size_t n;
    float *mine;   /* [n] this rank's input */
    double *sum;   /* [n] sum over ranks (exact: at most ~40 significant bits) */
    double *mag;   /* [n] sum over ranks of |x| */
};

static void ref_make(struct ref *R, int kind, unsigned seed, size_t n)
{
    R->kind = kind;
    R->n = n;
    R->mine = dt_xmalloc(sizeof(float) * (n + 1));
    R->sum = dt_xcalloc(n + 1, sizeof(double));
    R->mag = dt_xcalloc(n + 1, sizeof(double));
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < n; i++) {
            float x = input(kind, seed, r, i);
            R->sum[i] += (double)x;
            R->mag[i] += fabs((double)x);
            if (r == rank) R->mine[i] = x;
        }
}

static void ref_free(struct ref *R)
{
    free(R->mine);
    free(R->sum);
    free(R->mag);
}

/* ---- what a result must satisfy --------------------------------------------- */

/* How an element travels: how many times it is rounded to 16 bits, and whether
 * the result must itself be a 16-bit value. */
struct path {
    int compress;
    int rounds;
    int through16;
};

static struct path path_of(const struct dt_coll *c, size_t n)
{
    const struct dt_allreduce_algo *a = c->algo == &dt_allreduce_auto ? dt_auto_choose(c, n) : c->algo;
    struct path p = {c->cfg.compress, 0, 0};
    if (!c->cfg.compress || c->topo.size == 1 || n == 0) return p;
    if (a == &dt_allreduce_hier) {
        /* only the cross-node ring compresses: nnodes-1 hops + the owner's rounding */
        p.rounds = c->topo.nnodes > 1 ? c->topo.nnodes : 0;
        p.through16 = c->topo.nnodes > 1;
    } else if (c->cfg.compress_cross_only) {
        /* a segment's n-1 hops cross at most nnodes node boundaries, + the owner */
        p.rounds = c->topo.nnodes + 1;
        p.through16 = 1;
    } else {
        p.rounds = c->topo.size; /* n-1 hops + the owner's rounding */
        p.through16 = 1;
    }
    return p;
}

static int fits16(float v, int compress)
{
    if (compress == DT_COMPRESS_BF16) {
        uint32_t u;
        memcpy(&u, &v, 4);
        return (u & 0xffffu) == 0;
    }
    return (float)(_Float16)v == v;
}

/* EXACT: equal to the reference. RANDOM: any order of summing n floats in fp32
 * is within (n-1)·u·Σ|x| of the exact sum (u = 2^-24); we allow n·FLT_EPSILON·Σ|x|
 * = 2n·u·Σ|x|. Each rounding to 16 bits (round to nearest, u16 = 2^-11 fp16,
 * 2^-8 bf16) adds at most u16·|partial sum| ≤ u16·Σ|x|·(1 + O(R·u16)), so R
 * roundings add R·u16·Σ|x|, ×1.1 for the second-order terms ((1+2^-8)^6 <
 * 1.03), plus R·2^-25 absolute for fp16 (half its subnormal spacing: tiny
 * partial sums are not rounded relatively). The reference itself is exact. */
static void check_sum(dt_status *st, const char *what, const float *got, const struct ref *R, struct path p)
{
    const double u16 = p.compress == DT_COMPRESS_BF16 ? 0x1p-8 : 0x1p-11;
    const double sub16 = p.compress == DT_COMPRESS_FP16 ? 0x1p-25 : 0.0;
    for (size_t i = 0; i < R->n && st->code == DT_OK; i++) {
        double g = (double)got[i], tol = 0.0;
        if (R->kind == K_RANDOM)
            tol = (1.1 * p.rounds * u16 + nranks * (double)FLT_EPSILON) * R->mag[i] + p.rounds * sub16;
        expect(st, fabs(g - R->sum[i]) <= tol, "%s: element %zu is %.9g, expected %.9g (tolerance %.3g)", what,
               i, g, R->sum[i], tol);
        if (p.through16)
            expect(st, fits16(got[i], p.compress), "%s: element %zu = %.9g is not a 16-bit value", what, i, g);
    }
}

/* Collective: buf[0..n) is bitwise rank 0's. */
static void check_same(dt_status *st, const char *what, const float *buf, size_t n)
{
    size_t bytes = sizeof(float) * n;
    char *root = dt_xmalloc(bytes + 1);
    if (rank == 0) memcpy(root, buf, bytes);
    MPI_Bcast(root, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (memcmp(root, buf, bytes) != 0) {
        size_t i = 0;
        while (memcmp(root + i * sizeof(float), buf + i, sizeof(float)) == 0) i++;
        float r0;
        memcpy(&r0, root + i * sizeof(float), sizeof r0);
        expect(st, 0, "%s: element %zu is %.9g here, %.9g on rank 0", what, i, (double)buf[i], (double)r0);
    }
    free(root);
}

static void set_bits(float *p, uint32_t bits)
{
    memcpy(p, &bits, sizeof bits);
}

static int has_bits(const float *p, uint32_t bits)
{
    return memcmp(p, &bits, sizeof bits) == 0;
}

/* ---- running the algorithms ----------------------------------------------- */

struct setup {
    const char *algo;
    int ranks_per_node;
    int compress, cross_only;
    size_t chunk;
    const char *table;
    int depth;              /* ring pieces in flight; 0 = default */
};

static const char *const compress_name[] = {"fp32", "fp16", "bf16"};

static struct dt_coll_config config_of(const struct setup *su)
{
    struct dt_coll_config cfg = {
        .algorithm = su->algo,
        .ranks_per_node = su->ranks_per_node,
        .compress = su->compress,
        .compress_cross_only = su->cross_only,
        .chunk_bytes = su->chunk,
        .table = su->table,
        .ring_depth = su->depth,
    };
    return cfg;
}

static void open_coll(struct dt_coll *c, const struct setup *su)
{
    struct dt_coll_config cfg = config_of(su);
    dt_status st = {0};
    int rc = dt_coll_init(c, MPI_COMM_WORLD, &cfg, &st);
    ck_assert_msg(rc == DT_OK, "dt_coll_init(%s, ranks_per_node %d, %s): %s", su->algo, su->ranks_per_node,
                  compress_name[su->compress], st.msg);
}

/* Collective: one all-reduce of R's inputs in the given mode, checked against
 * R, for writes outside the result, for a changed send buffer, and against
 * rank 0's bits. win: dt_coll_alloc'd, room for R->n + 2 floats. */
static void run_case(struct dt_coll *c, float *win, const struct ref *R, int mode, const char *label)
{
    static const char *const mode_name[] = {"", "in-place", "out-of-place", "", "window", "", "", "", "window-recv"};
    dt_status st = {0};
    char what[512];
    size_t n = R->n, off = n & 1; /* window at offset 0 and 1: zero-copy with a displacement */
    float *own = dt_xmalloc(sizeof(float) * (2 * n + 2)), *send = own, *recv = own;
    snprintf(what, sizeof what, "%s, %s, %s, n=%zu", label, R->kind == K_EXACT ? "exact" : "random",
             mode_name[mode], n);
    if (mode == M_OUT) recv = own + n + 1;
    if (mode == M_WIN) send = recv = win + off;
    if (mode == M_WINOUT) recv = win + off;
    if (n) memcpy(send, R->mine, sizeof(float) * n);
    if (send != recv)
        for (size_t i = 0; i < n; i++) set_bits(&recv[i], SENTINEL);
    set_bits(&recv[n], SENTINEL);
    if (recv == win + 1) set_bits(&win[0], SENTINEL);

    dt_allreduce(c, send, recv, n);

    check_sum(&st, what, recv, R, path_of(c, n));
    expect(&st, has_bits(&recv[n], SENTINEL), "%s: wrote past the end", what);
    if (recv == win + 1) expect(&st, has_bits(&win[0], SENTINEL), "%s: wrote before the start", what);
    if (send != recv) expect(&st, n == 0 || memcmp(send, R->mine, sizeof(float) * n) == 0, "%s: changed send", what);
    check_same(&st, what, recv, n);
    free(own);
    AGREE(st);
}

static void describe(const struct dt_coll *c, char *label, size_t len, const struct setup *su)
{
    char layout[128];
    dt_topo_describe(&c->topo, layout, (int)sizeof layout);
    snprintf(label, len, "%s on %s, %s%s, chunk %zu%s", su->algo, layout, compress_name[su->compress],
             su->cross_only ? " cross-node only" : "", c->cfg.chunk_bytes, su->table ? ", own table" : "");
}

/* Collective: every size x input kind x buffer mode on one configuration. */
static void sweep(const struct setup *su, const size_t *sizes, size_t nsizes, int kinds, int modes)
{
    struct dt_coll c;
    char label[256];
    size_t maxn = 0;
    open_coll(&c, su);
    for (size_t s = 0; s < nsizes; s++) maxn = sizes[s] > maxn ? sizes[s] : maxn;
    float *win = dt_coll_alloc(&c, maxn + 2);
    describe(&c, label, sizeof label, su);
    for (int kind = K_EXACT; kind <= K_RANDOM; kind++) {
        if (!(kinds & kind)) continue;
        for (size_t s = 0; s < nsizes; s++) {
            struct ref R;
            ref_make(&R, kind, (unsigned)(s * 31u + (unsigned)kind), sizes[s]);
            for (int mode = M_IN; mode <= M_WINOUT; mode <<= 1)
                if (modes & mode) run_case(&c, win, &R, mode, label);
            ref_free(&R);
        }
    }
    dt_coll_free(&c);
}

/* Collective: in-place result of R's inputs under su (the caller frees it). */
static float *reduce_copy(const struct setup *su, const struct ref *R)
{
    struct dt_coll c;
    float *out = dt_xmalloc(sizeof(float) * (R->n + 1));
    open_coll(&c, su);
    memcpy(out, R->mine, sizeof(float) * R->n);
    dt_allreduce(&c, out, out, R->n);
    dt_coll_free(&c);
    return out;
}

/* Collective: dt_coll_init refuses cfg with DT_EUSAGE, the same message on
 * every rank, containing want1 (and want2). */
static void expect_usage(const struct dt_coll_config *cfg, const char *want1, const char *want2)
{
    struct dt_coll c;
    dt_status st = {0}, same = {0};
    int rc = dt_coll_init(&c, MPI_COMM_WORLD, cfg, &st), lo, hi;
    if (rc == DT_OK) dt_coll_free(&c);
    MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(lo == hi, "dt_coll_init returned %d on some ranks, %d on others", lo, hi);
    ck_assert_msg(rc == DT_EUSAGE, "expected a usage error about '%s', got %d: %s", want1, rc, st.msg);
    char root[sizeof st.msg];
    memcpy(root, st.msg, sizeof root);
    MPI_Bcast(root, (int)sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    expect(&same, strcmp(root, st.msg) == 0, "message '%s' differs from rank 0's '%s'", st.msg, root);
    AGREE(same);
    ck_assert_msg(strstr(st.msg, want1) != NULL, "message '%s' lacks '%s'", st.msg, want1);
    if (want2) ck_assert_msg(strstr(st.msg, want2) != NULL, "message '%s' lacks '%s'", st.msg, want2);
}

/* The layouts worth emulating here: every K that splits the job evenly into
 * several multi-rank nodes (2x2 at 4 ranks; 3x2 and 2x3 at 6). */
static int multi_node_uniform(int K)
{
    return K > 1 && K < nranks && nranks % K == 0;
}

static void write_file(char *path, size_t len, const char *name, const char *text)
{
    snprintf(path, len, "%s/%s", dir, name);
    if (rank == 0) {
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(text, f);
            fclose(f);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static const char *algo_name(const struct dt_allreduce_algo *a)
{
    return a ? a->name : "(none)";
}

static void expect_choice(dt_status *st, const struct dt_coll *c, size_t count, const struct dt_allreduce_algo *want)
{
    const struct dt_allreduce_algo *got = dt_auto_choose(c, count);
    char layout[128];
    dt_topo_describe(&c->topo, layout, (int)sizeof layout);
    expect(st, got == want, "auto on %s chose %s for %zu bytes, expected %s", layout, algo_name(got),
           count * sizeof(float), algo_name(want));
}

static void clean_env(void)
{
    unsetenv("DTRAIN_RANKS_PER_NODE");
    unsetenv("DTRAIN_ALLREDUCE_TABLE");
    unsetenv("DTRAIN_ALLREDUCE_TUNE");
}

/* ---- tests ------------------------------------------------------------------ */

static const char *const algos[] = {"mpi", "ring", "hier", "auto"};

/* Every algorithm, every size (0, primes, fewer elements than ranks, several
 * 1 KiB ring pieces), every kind of buffer, on the layout detected. */
START_TEST(test_algorithms_small)
{
    for (int a = 0; a < 4; a++) {
        struct setup su = {algos[a], 0, 0, 0, SMALL_CHUNK, NULL, 0};
        sweep(&su, small_sizes, NSMALL, K_BOTH, M_ALL);
    }
    struct setup dflt = {"ring", 0, 0, 0, 0, NULL, 0}; /* default chunk: one piece per segment */
    sweep(&dflt, small_sizes, NSMALL, K_BOTH, M_IN | M_OUT);
}
END_TEST

/* Ring pieces in flight (--ring-depth): exact at every depth, compressed
 * too, and the same bits as the default depth, since each element is added
 * in the same order however many pieces travel at once. */
START_TEST(test_ring_depth)
{
    static const size_t sizes[] = {0, 1, 7, 1000, 6151};
    static const int depths[] = {1, 5, DT_RING_MAX_DEPTH};
    for (int d = 0; d < 3; d++)
        for (int cmp = DT_COMPRESS_NONE; cmp <= DT_COMPRESS_BF16; cmp += DT_COMPRESS_BF16) {
            struct setup su = {"ring", 0, cmp, 0, SMALL_CHUNK, NULL, depths[d]};
            sweep(&su, sizes, 5, K_BOTH, M_IN | M_OUT);
            struct setup two = su;
            two.depth = 2;
            dt_status st = {0};
            for (int kind = K_EXACT; kind <= K_RANDOM; kind++) {
                struct ref R;
                ref_make(&R, kind, 97u + (unsigned)kind, 6151);
                float *a = reduce_copy(&su, &R), *b = reduce_copy(&two, &R);
                expect(&st, memcmp(a, b, sizeof(float) * R.n) == 0,
                       "ring at depth %d (%s) differs from depth 2 in its bits", depths[d], compress_name[cmp]);
                free(a);
                free(b);
                ref_free(&R);
            }
            AGREE(st);
        }
}
END_TEST

/* Larger than hier's staging window (several passes) and than the default
 * ring piece; at the detected layout and at the multi-node emulated ones. */
START_TEST(test_algorithms_big)
{
    static const size_t big[] = {BIG};
    for (int a = 0; a < 4; a++) {
        struct setup su = {algos[a], 0, 0, 0, 0, NULL, 0};
        sweep(&su, big, 1, K_BOTH, M_ALL);
    }
    for (int K = 1; K < nranks; K++) {
        if (nranks % K) continue;
        struct setup hier = {"hier", K, 0, 0, 0, NULL, 0};
        sweep(&hier, big, 1, K_BOTH, M_IN | M_WIN);
    }
}
END_TEST

/* Every emulated layout 1..nranks ranks per node: the topology's fields and
 * description, then every algorithm (hier refused where nodes differ). */
START_TEST(test_layouts)
{
    static const size_t sizes[] = {0, 1, 2, 7, 31, MULTI};
    for (int K = 1; K <= nranks; K++) {
        struct dt_coll c;
        struct setup ring = {"ring", K, 0, 0, SMALL_CHUNK, NULL, 0};
        dt_status st = {0};
        char got[128], want[128];
        int nn = (nranks + K - 1) / K, uniform = nranks % K == 0;
        open_coll(&c, &ring);
        const struct dt_topo *t = &c.topo;
        expect(&st, t->nnodes == nn, "K=%d: %d nodes, expected %d", K, t->nnodes, nn);
        expect(&st, t->node_index == rank / K, "K=%d: node %d, expected %d", K, t->node_index, rank / K);
        expect(&st, t->local_rank == rank % K, "K=%d: local rank %d", K, t->local_rank);
        int lsize = nranks - (rank / K) * K < K ? nranks - (rank / K) * K : K;
        expect(&st, t->local_size == lsize, "K=%d: local size %d, expected %d", K, t->local_size, lsize);
        expect(&st, t->uniform == uniform, "K=%d: uniform %d", K, t->uniform);
        expect(&st, t->emulated == 1, "K=%d: not marked emulated", K);
        expect(&st, t->rank == rank && t->size == nranks, "K=%d: rank %d of %d", K, t->rank, t->size);
        for (int r = 0; r < nranks; r++)
            expect(&st, t->node_of[r] == r / K, "K=%d: node_of[%d] = %d", K, r, t->node_of[r]);
        for (int i = 0; i < nn && i < t->nnodes; i++) {
            int sz = nranks - i * K < K ? nranks - i * K : K;
            expect(&st, t->node_size[i] == sz, "K=%d: node_size[%d] = %d", K, i, t->node_size[i]);
        }
        if (uniform) {
            snprintf(want, sizeof want, "%d node%s x %d rank%s (emulated)", nn, nn == 1 ? "" : "s", K,
                     K == 1 ? "" : "s");
        } else {
            int k = snprintf(want, sizeof want, "%d nodes of ", nn);
            for (int i = 0; i < nn; i++)
                k += snprintf(want + k, sizeof want - (size_t)k, "%s%d", i ? "+" : "",
                              nranks - i * K < K ? nranks - i * K : K);
            snprintf(want + k, sizeof want - (size_t)k, " ranks (emulated)");
        }
        dt_topo_describe(t, got, (int)sizeof got);
        expect(&st, strcmp(got, want) == 0, "K=%d: described as '%s', expected '%s'", K, got, want);
        dt_coll_free(&c);
        AGREE(st);

        for (int a = 0; a < 4; a++) {
            struct setup su = {algos[a], K, 0, 0, SMALL_CHUNK, NULL, 0};
            if (!uniform && strcmp(algos[a], "hier") == 0) {
                struct dt_coll_config cfg = config_of(&su);
                expect_usage(&cfg, "same number of ranks", want);
                continue;
            }
            sweep(&su, sizes, sizeof sizes / sizeof *sizes, K_BOTH, M_IN | M_OUT | M_WIN);
        }
    }
}
END_TEST

/* The layouts the design names, spelled out; the detected layout. */
START_TEST(test_layout_names)
{
    static const struct {
        int np, K;
        const char *text;
    } named[] = {
        {1, 1, "1 node x 1 rank (emulated)"},
        {2, 1, "2 nodes x 1 rank (emulated)"},
        {3, 2, "2 nodes of 2+1 ranks (emulated)"},
        {4, 2, "2 nodes x 2 ranks (emulated)"},
        {5, 2, "3 nodes of 2+2+1 ranks (emulated)"},
        {6, 2, "3 nodes x 2 ranks (emulated)"},
        {6, 3, "2 nodes x 3 ranks (emulated)"},
        {6, 4, "2 nodes of 4+2 ranks (emulated)"},
    };
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        if (named[i].np != nranks) continue;
        struct dt_coll c;
        struct setup su = {"auto", named[i].K, 0, 0, 0, NULL, 0};
        char got[128];
        open_coll(&c, &su);
        dt_topo_describe(&c.topo, got, (int)sizeof got);
        int uniform = c.topo.uniform;
        dt_coll_free(&c);
        ck_assert_str_eq(got, named[i].text);
        if (!uniform) {
            struct setup hier = {"hier", named[i].K, 0, 0, 0, NULL, 0};
            struct dt_coll_config cfg = config_of(&hier);
            expect_usage(&cfg, "same number of ranks", named[i].text);
        }
    }

    /* Detected: not emulated, and self-consistent (one host here, but the
     * test does not insist on it). */
    struct dt_coll c;
    struct setup det = {"ring", 0, 0, 0, 0, NULL, 0};
    dt_status st = {0};
    char got[128];
    open_coll(&c, &det);
    const struct dt_topo *t = &c.topo;
    int total = 0;
    for (int i = 0; i < t->nnodes; i++) total += t->node_size[i];
    expect(&st, !t->emulated, "detected layout marked emulated");
    expect(&st, total == nranks, "node sizes add up to %d", total);
    expect(&st, t->node_of[rank] == t->node_index, "node_of disagrees with node_index");
    expect(&st, t->node_size[t->node_index] == t->local_size, "node_size disagrees with local_size");
    dt_topo_describe(t, got, (int)sizeof got);
    expect(&st, strstr(got, "emulated") == NULL, "detected layout described as '%s'", got);
    dt_coll_free(&c);
    AGREE(st);
}
END_TEST

START_TEST(test_ranks_per_node_too_large)
{
    char want[64];
    struct setup su = {"ring", nranks + 1, 0, 0, 0, NULL, 0};
    struct dt_coll_config cfg = config_of(&su);
    snprintf(want, sizeof want, "%d is more than the %d ranks", nranks + 1, nranks);
    expect_usage(&cfg, "--ranks-per-node", want);
}
END_TEST

/* DTRAIN_RANKS_PER_NODE stands in for --ranks-per-node 0; the flag wins. */
START_TEST(test_ranks_per_node_env)
{
    struct dt_coll c;
    struct setup dflt = {"ring", 0, 0, 0, 0, NULL, 0}, flag = {"ring", nranks, 0, 0, 0, NULL, 0};
    dt_status st = {0};
    int nnodes, local, emulated;

    setenv("DTRAIN_RANKS_PER_NODE", "1", 1);
    open_coll(&c, &dflt);
    nnodes = c.topo.nnodes;
    local = c.topo.local_size;
    emulated = c.topo.emulated;
    dt_coll_free(&c);
    expect(&st, nnodes == nranks && local == 1 && emulated, "env 1: %d nodes of %d, emulated %d", nnodes, local,
           emulated);
    open_coll(&c, &flag);
    nnodes = c.topo.nnodes;
    dt_coll_free(&c);
    expect(&st, nnodes == 1, "--ranks-per-node %d with env 1: %d nodes", nranks, nnodes);
    unsetenv("DTRAIN_RANKS_PER_NODE");
    AGREE(st);

    struct dt_coll_config cfg = config_of(&dflt);
    setenv("DTRAIN_RANKS_PER_NODE", "two", 1);
    expect_usage(&cfg, "DTRAIN_RANKS_PER_NODE", "'two'");
    setenv("DTRAIN_RANKS_PER_NODE", "0", 1);
    expect_usage(&cfg, "DTRAIN_RANKS_PER_NODE", NULL);
    char big[16];
    snprintf(big, sizeof big, "%d", nranks + 1);
    setenv("DTRAIN_RANKS_PER_NODE", big, 1);
    expect_usage(&cfg, "more than the", NULL);
    unsetenv("DTRAIN_RANKS_PER_NODE");
}
END_TEST

START_TEST(test_unknown_algorithm)
{
    struct setup su = {"nccl2", 0, 0, 0, 0, NULL, 0};
    struct dt_coll_config cfg = config_of(&su);
    expect_usage(&cfg, "'nccl2'", "--allreduce");
}
END_TEST

START_TEST(test_mpi_refuses_compression)
{
    for (int cmp = DT_COMPRESS_FP16; cmp <= DT_COMPRESS_BF16; cmp++) {
        struct setup su = {"mpi", 0, cmp, 0, 0, NULL, 0};
        struct dt_coll_config cfg = config_of(&su);
        expect_usage(&cfg, "--allreduce mpi", "16-bit");
    }
}
END_TEST

/* fp16 and bf16 with ring, hier and auto: exact where the values allow it,
 * bounded and identical everywhere otherwise; at the detected layout, at
 * one rank per node (every hop crosses nodes) and at the multi-node ones. */
START_TEST(test_compression)
{
    static const size_t sizes[] = {1, 3, 7, 31, MULTI};
    static const char *const calgos[] = {"ring", "hier", "auto"};
    for (int cmp = DT_COMPRESS_FP16; cmp <= DT_COMPRESS_BF16; cmp++)
        for (int K = 0; K <= nranks; K++) {
            if (K != 0 && K != 1 && !multi_node_uniform(K)) continue;
            for (int a = 0; a < 3; a++) {
                struct setup su = {calgos[a], K, cmp, 0, SMALL_CHUNK, NULL, 0};
                sweep(&su, sizes, sizeof sizes / sizeof *sizes, K_BOTH, M_IN | M_OUT | M_WIN);
            }
        }
    /* Big, default chunk: ring at one node, hier across the most nodes. */
    static const size_t big[] = {BIG};
    struct setup ring = {"ring", 0, DT_COMPRESS_BF16, 0, 0, NULL, 0};
    struct setup hier = {"hier", 1, DT_COMPRESS_FP16, 0, 0, NULL, 0};
    sweep(&ring, big, 1, K_BOTH, M_IN);
    sweep(&hier, big, 1, K_BOTH, M_IN | M_WIN);
}
END_TEST

/* compress_cross_only with ring at the emulated multi-node layouts: exact and
 * identical as above, and closer to the fp32 sum than compressing every hop.
 * hier only ever compresses the cross-node hop, so the flag changes nothing. */
START_TEST(test_compress_cross_only)
{
    static const size_t sizes[] = {1, 7, 31, MULTI};
    for (int K = 2; K < nranks; K++) {
        if (!multi_node_uniform(K)) continue;
        for (int cmp = DT_COMPRESS_FP16; cmp <= DT_COMPRESS_BF16; cmp++) {
            struct setup cross = {"ring", K, cmp, 1, SMALL_CHUNK, NULL, 0}, full = cross;
            struct setup hcross = {"hier", K, cmp, 1, SMALL_CHUNK, NULL, 0}, hfull = hcross;
            full.cross_only = 0;
            hfull.cross_only = 0;
            sweep(&cross, sizes, sizeof sizes / sizeof *sizes, K_BOTH, M_IN | M_WIN);

            struct ref R;
            dt_status st = {0};
            double err_cross = 0, err_full = 0;
            ref_make(&R, K_RANDOM, 99u, 20000);
            float *xc = reduce_copy(&cross, &R), *xf = reduce_copy(&full, &R);
            float *hc = reduce_copy(&hcross, &R), *hf = reduce_copy(&hfull, &R);
            for (size_t i = 0; i < R.n; i++) {
                err_cross += fabs((double)xc[i] - R.sum[i]);
                err_full += fabs((double)xf[i] - R.sum[i]);
            }
            check_same(&st, "ring, cross-node only", xc, R.n);
            check_same(&st, "ring, every hop", xf, R.n);
            expect(&st, memcmp(hc, hf, sizeof(float) * R.n) == 0,
                   "hier with %s: compress_cross_only changed the result", compress_name[cmp]);
            AGREE(st);
            ck_assert_msg(err_cross <= err_full, "K=%d %s: cross-node-only error %g > every-hop error %g", K,
                          compress_name[cmp], err_cross, err_full);
            free(xc);
            free(xf);
            free(hc);
            free(hf);
            ref_free(&R);
        }
    }
}
END_TEST

/* A table: ring below 1000 bytes, hier from there on; falls back to ring
 * where hier cannot run. */
START_TEST(test_auto_table)
{
    static const size_t sizes[] = {0, 31, 249, 250, MULTI};
    char path[600], missing[600];
    write_file(path, sizeof path, "small-ring.table",
               "# ring for small messages, hier for large ones\n"
               "0 0 0 ring\n"
               "\n"
               "0 0 1000 hier   # from 1000 bytes on\n");
    snprintf(missing, sizeof missing, "%s/no-such.table", dir);
    for (int K = 0; K <= nranks; K++) {
        struct dt_coll c;
        struct setup su = {"auto", K, 0, 0, SMALL_CHUNK, path, 0};
        dt_status st = {0};
        open_coll(&c, &su);
        const struct dt_allreduce_algo *big = c.topo.uniform ? &dt_allreduce_hier : &dt_allreduce_ring;
        expect_choice(&st, &c, 0, &dt_allreduce_ring);
        expect_choice(&st, &c, 249, &dt_allreduce_ring); /* 996 bytes */
        expect_choice(&st, &c, 250, big);                /* 1000 bytes */
        expect_choice(&st, &c, 1u << 20, big);
        dt_coll_free(&c);
        AGREE(st);
        if (K == 0 || K == 1 || nranks % K || multi_node_uniform(K))
            sweep(&su, sizes, sizeof sizes / sizeof *sizes, K_BOTH, M_IN | M_WIN);
    }

    /* Rules for one layout only apply there. */
    for (int K = 1; K <= nranks; K++) {
        if (nranks % K) continue;
        char text[256], lpath[600];
        struct dt_coll c;
        dt_status st = {0};
        int nn = nranks / K;
        snprintf(text, sizeof text, "0 0 0 mpi\n%d %d 4096 hier\n%d 0 0 ring\n0 %d 0 ring\n", nn, K, nn + 1, K + 1);
        write_file(lpath, sizeof lpath, "layout.table", text);
        struct setup here = {"auto", K, 0, 0, 0, lpath, 0};
        open_coll(&c, &here);
        expect_choice(&st, &c, 1023, &dt_allreduce_mpi);
        expect_choice(&st, &c, 1024, &dt_allreduce_hier);
        dt_coll_free(&c);
        AGREE(st);
    }

    /* DTRAIN_ALLREDUCE_TABLE names the table when the config does not; the
     * config wins. */
    {
        struct dt_coll c;
        dt_status st = {0};
        struct setup envd = {"auto", 0, 0, 0, 0, NULL, 0}, flag = {"auto", 0, 0, 0, 0, path, 0};
        setenv("DTRAIN_ALLREDUCE_TABLE", path, 1);
        open_coll(&c, &envd);
        expect_choice(&st, &c, 249, &dt_allreduce_ring);
        expect_choice(&st, &c, 250, c.topo.uniform ? &dt_allreduce_hier : &dt_allreduce_ring);
        dt_coll_free(&c);
        setenv("DTRAIN_ALLREDUCE_TABLE", missing, 1);
        open_coll(&c, &flag);
        expect_choice(&st, &c, 249, &dt_allreduce_ring);
        dt_coll_free(&c);
        struct dt_coll_config cfg = config_of(&envd);
        expect_usage(&cfg, missing, NULL);
        unsetenv("DTRAIN_ALLREDUCE_TABLE");
        AGREE(st);
    }
}
END_TEST

/* Whatever the table says, auto never picks what cannot run: hier at an
 * uneven layout, mpi with compression. */
START_TEST(test_auto_fallbacks)
{
    static const size_t counts[] = {0, 1, 255, 256, 16384, 1u << 20};
    char path[600];
    write_file(path, sizeof path, "hier.table", "0 0 0 hier\n");
    for (int K = 0; K <= nranks; K++) {
        for (int cmp = DT_COMPRESS_NONE; cmp <= DT_COMPRESS_BF16; cmp++) {
            for (int t = 0; t < 2; t++) {
                struct dt_coll c;
                struct setup su = {"auto", K, cmp, 0, 0, t ? path : NULL, 0};
                dt_status st = {0};
                open_coll(&c, &su);
                for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
                    const struct dt_allreduce_algo *a = dt_auto_choose(&c, counts[i]);
                    char why[256];
                    expect(&st, a == &dt_allreduce_mpi || a == &dt_allreduce_ring || a == &dt_allreduce_hier,
                           "auto chose %s", algo_name(a));
                    if (!a) continue;
                    expect(&st, a->usable(&c, why, sizeof why), "auto chose %s, which cannot run: %s", a->name, why);
                    if (!c.topo.uniform) expect(&st, a != &dt_allreduce_hier, "auto chose hier at an uneven layout");
                    if (cmp) expect(&st, a != &dt_allreduce_mpi, "auto chose mpi with compression");
                    if (t) /* the table says hier: ring where hier cannot run */
                        expect_choice(&st, &c, counts[i], c.topo.uniform ? &dt_allreduce_hier : &dt_allreduce_ring);
                }
                dt_coll_free(&c);
                AGREE(st);
            }
        }
    }
}
END_TEST

/* Timing at start-up (across nodes; here DTRAIN_ALLREDUCE_TUNE=1 lets the
 * emulated layouts stand in): one choice per size class, usable, the same
 * on every rank, used from then on, results still exact, and the buffer's
 * contents kept. Not with a table given, at one node, or with the variable
 * at 0; and not on emulated layouts without it. */
START_TEST(test_auto_tune)
{
    static const size_t counts[] = {300, 1000, 301, 100000, 0}; /* three size classes: 1 KiB, 2 KiB, 256 KiB */
    char path[600];
    write_file(path, sizeof path, "tune-table.table", "0 0 0 ring\n");
    for (int K = 1; K <= nranks; K++) {
        if (nranks % K) continue;
        int nn = nranks / K;
        for (int variant = 0; variant < 4; variant++) { /* tune, env 0, table given, emulated without env */
            struct dt_coll c;
            struct setup su = {"auto", K, 0, 0, 0, variant == 2 ? path : NULL, 0};
            dt_status st = {0};
            if (variant == 0 || variant == 2) setenv("DTRAIN_ALLREDUCE_TUNE", "1", 1);
            else if (variant == 1) setenv("DTRAIN_ALLREDUCE_TUNE", "0", 1);
            else unsetenv("DTRAIN_ALLREDUCE_TUNE");
            open_coll(&c, &su);
            float *win = dt_coll_alloc(&c, 100000 + 2); /* run_case writes a sentinel past the end */
            for (size_t i = 0; i < 100000; i++) win[i] = (float)(i % 977) + 0.25f * (float)rank;
            int got = dt_auto_tune(&c, win, win, counts, 5);
            int want = variant == 0 && nn >= 2 ? 3 : 0;
            expect(&st, got == want, "K=%d variant %d: dt_auto_tune timed %d size classes, expected %d", K, variant,
                   got, want);
            for (size_t i = 0; i < 100000; i++)
                if (win[i] != (float)(i % 977) + 0.25f * (float)rank) {
                    expect(&st, 0, "K=%d: the buffer changed at %zu", K, i);
                    break;
                }
            if (got == want && want) {
                for (int j = 0; j < 3; j++) {
                    char why[256];
                    const struct dt_allreduce_algo *a = c.tuned[j].pick;
                    expect(&st, a == &dt_allreduce_mpi || a == &dt_allreduce_ring || a == &dt_allreduce_hier,
                           "tuned choice %s", algo_name(a));
                    if (a) expect(&st, a->usable(&c, why, sizeof why), "tuned %s cannot run: %s", a->name, why);
                    expect(&st, c.tuned[j].pick_us > 0 && (c.tuned[j].mpi_us == 0 || c.tuned[j].pick_us <=
                           c.tuned[j].mpi_us / 0.95 + 1e-9), "class %d: %s %.2f us against mpi %.2f us", c.tuned[j].cls,
                           algo_name(a), c.tuned[j].pick_us, c.tuned[j].mpi_us);
                }
                /* Every rank made the same choices: the same index sums. */
                long mine[3], hi[3], lo[3];
                for (int j = 0; j < 3; j++) {
                    const struct dt_allreduce_algo *a = dt_auto_choose(&c, counts[j == 2 ? 3 : j]);
                    expect(&st, a == c.tuned[j].pick, "auto does not use its timed choice for class %d", c.tuned[j].cls);
                    mine[j] = a == &dt_allreduce_mpi ? 1 : a == &dt_allreduce_ring ? 2 : 3;
                }
                MPI_Allreduce(mine, hi, 3, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
                MPI_Allreduce(mine, lo, 3, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
                for (int j = 0; j < 3; j++) expect(&st, hi[j] == lo[j], "ranks chose differently for class %d", j);
                char how[512];
                dt_auto_describe(&c, how, sizeof how);
                expect(&st, strstr(how, "timed at start-up") != NULL, "describe says '%s'", how);
                /* A checkpoint carries them: the same layout takes them back and times nothing. */
                char text[160];
                expect(&st, dt_auto_encode(&c, text, sizeof text) == 1, "nothing to encode");
                struct dt_coll again;
                open_coll(&again, &su);
                expect(&st, dt_auto_preset(&again, text) == 1, "preset '%s' refused", text);
                expect(&st, dt_auto_tune(&again, win, win, counts, 5) == 3 && again.tuned_preset,
                       "the preset choices were timed again");
                for (int j = 0; j < 3; j++)
                    expect(&st, dt_auto_choose(&again, counts[j == 2 ? 3 : j]) == c.tuned[j].pick,
                           "preset class %d differs", j);
                dt_auto_describe(&again, how, sizeof how);
                expect(&st, strstr(how, "checkpoint") != NULL, "describe says '%s'", how);
                /* Bucket sizes the checkpoint's run did not have: timed anew. */
                const size_t other[] = {5000000};
                float *big = dt_coll_alloc(&again, other[0]);
                expect(&st, dt_auto_tune(&again, big, big, other, 1) == 1 && !again.tuned_preset,
                       "an uncovered size did not time again");
                dt_coll_free(&again);
                /* Another layout, or text that is not the encoding, is refused. */
                static const char *const bad[] = {"9 9 10:mpi", "", "2", "x y 10:mpi", " 10:auto",
                                                  " 10:nccl", " 10mpi", " 99:mpi", ""};
                for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
                    char t2[64]; /* the first four as they are; the rest after this layout */
                    if (b < 4) snprintf(t2, sizeof t2, "%s", bad[b]);
                    else snprintf(t2, sizeof t2, "%d %d%s", c.topo.nnodes, c.topo.local_size, bad[b]);
                    open_coll(&again, &su);
                    expect(&st, dt_auto_preset(&again, t2) == 0 && again.ntuned == 0, "preset '%s' taken", t2);
                    dt_coll_free(&again);
                }
                /* And the sums through the timed choices are still exact. */
                for (int j = 0; j < 4; j++) {
                    struct ref R;
                    ref_make(&R, K_EXACT, 7u + (unsigned)j, counts[j]);
                    run_case(&c, win, &R, M_WIN, "auto, timed");
                    ref_free(&R);
                }
            }
            dt_coll_free(&c);
            AGREE(st);
        }
    }
    unsetenv("DTRAIN_ALLREDUCE_TUNE");
}
END_TEST

/* Bad tables: a usage error naming the file and the line. */
START_TEST(test_auto_table_errors)
{
    static const struct {
        const char *name, *text, *where, *what;
    } bad[] = {
        {"bad-number.table", "# header\n0 0 0 ring\n0 0 lots hier\n", ":3:", "'0 0 lots hier'"},
        {"bad-algo.table", "0 0 0 ring\n0 0 4096 nccl\n", ":2:", "'nccl'"},
        {"auto-algo.table", "0 0 0 auto\n", ":1:", "'auto'"},
        {"extra-field.table", "0 0 0 ring fast\n", ":1:", "expected"},
        {"negative.table", "\n-1 0 0 ring\n", ":2:", "expected"},
        {"short.table", "0 0 ring\n", ":1:", "expected"},
        /* %llu takes "-1" as 2^64-1: a rule that silently never applies */
        {"negative-bytes.table", "0 0 0 ring\n0 0 -1 hier\n", ":2:", "-1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[600], where[700];
        write_file(path, sizeof path, bad[i].name, bad[i].text);
        snprintf(where, sizeof where, "%s%s", path, bad[i].where);
        struct setup su = {"auto", 0, 0, 0, 0, path, 0};
        struct dt_coll_config cfg = config_of(&su);
        expect_usage(&cfg, where, bad[i].what);
    }
    /* No rules at all: there is no line to name, but the file is named. */
    static const char *const empty[][2] = {{"empty.table", ""}, {"comments.table", "# nothing\n\n   \n"}};
    for (int i = 0; i < 2; i++) {
        char path[600];
        write_file(path, sizeof path, empty[i][0], empty[i][1]);
        struct setup su = {"auto", 0, 0, 0, 0, path, 0};
        struct dt_coll_config cfg = config_of(&su);
        expect_usage(&cfg, path, "no rules");
    }
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such.table", dir);
    struct setup su = {"auto", 0, 0, 0, 0, missing, 0};
    struct dt_coll_config cfg = config_of(&su);
    expect_usage(&cfg, missing, "cannot open");
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    clean_env();
    const char *tmp = getenv("TEST_TMP");
    snprintf(dir, sizeof dir, "%s/coll.%d", tmp && *tmp ? tmp : "/tmp", nranks);
    if (rank == 0) {
        if (tmp && *tmp && mkdir(tmp, 0777) != 0 && errno != EEXIST) fprintf(stderr, "cannot create %s\n", tmp);
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) fprintf(stderr, "cannot create %s\n", dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    Suite *s = suite_create("coll");
    TCase *tc = tcase_create("allreduce");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, clean_env, NULL);
    tcase_add_test(tc, test_algorithms_small);
    tcase_add_test(tc, test_algorithms_big);
    tcase_add_test(tc, test_ring_depth);
    tcase_add_test(tc, test_layouts);
    tcase_add_test(tc, test_layout_names);
    tcase_add_test(tc, test_ranks_per_node_too_large);
    tcase_add_test(tc, test_ranks_per_node_env);
    tcase_add_test(tc, test_unknown_algorithm);
    tcase_add_test(tc, test_mpi_refuses_compression);
    tcase_add_test(tc, test_compression);
    tcase_add_test(tc, test_compress_cross_only);
    tcase_add_test(tc, test_auto_table);
    tcase_add_test(tc, test_auto_fallbacks);
    tcase_add_test(tc, test_auto_table_errors);
    tcase_add_test(tc, test_auto_tune);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* MPI cannot survive fork() */
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    /* A failure on any rank fails the test program on every rank. */
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? EXIT_FAILURE : EXIT_SUCCESS;
}

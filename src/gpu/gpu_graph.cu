/* gpu_graph.cu: recording ops into a CUDA graph and replaying it with one
 * launch (--cuda-graphs; backend.h's capture_begin ... graph_destroy).
 *
 * The seed CNN's step is a few dozen small kernels; on a large GPU their
 * launches, not their work, set the pace. Recorded once, the step replays
 * as one graph launch. Three things a recording cannot hold are handled
 * here:
 *  - random draws: dropout's seed is a kernel argument drawn on the host.
 *    While recording, the kernel reads it from a device slot instead, and
 *    the graph begins by copying a pinned host array of seeds into those
 *    slots; each replay first draws as many values from the same dt_rng, in
 *    the recorded order, so graphs and plain launches draw the same stream
 *    and give the same masks;
 *  - results for the host: softmax_xent's copy into gpu.host_result is
 *    recorded, and graph_run reads it after the replay has finished;
 *  - waiting: the stream cannot be waited for while it is recorded. A
 *    buffer that must grow (the first batch of a new size) fails the
 *    recording instead; it is allocated at once (relaxed capture mode
 *    allows cudaMalloc) and the old one freed when the recording ends.
 *
 * A failed recording leaves nothing behind: its graph is destroyed, the
 * dt_rngs it drew from are put back as they were, and the caller runs the
 * same ops the usual way. Graphs hold device addresses, so any later
 * reallocation (gpu.generation) makes them stale (graph_valid). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_internal.h"

#define MAX_SEEDS 256 /* random draws in one recording */
#define MAX_RNGS 8    /* distinct dt_rngs drawn from in one recording */
#define MAX_DEFER 64  /* buffers replaced while recording */

struct gpu_capture {
    int nseeds;
    dt_rng *rngs[MAX_SEEDS]; /* which rng each slot's seed is drawn from */
    uint64_t first[MAX_SEEDS]; /* the values this recording drew */
    int nsaved;
    dt_rng *saved_at[MAX_RNGS];
    dt_rng saved[MAX_RNGS]; /* each rng as it was before the recording drew */
    int losses;
    char failed[200]; /* the first reason, empty while all is well */
    int ndefer;
    void *defer[MAX_DEFER];
};

struct dt_graph {
    cudaGraphExec_t exec;
    int nseeds, fresh, has_loss;
    dt_rng *rngs[MAX_SEEDS];
    uint64_t first[MAX_SEEDS];
    unsigned long generation;
};

static struct gpu_capture capture;
static uint64_t *host_seeds, *dev_seeds; /* pinned host and device, MAX_SEEDS each */

const uint64_t *gpu_capture_seed(dt_rng *rng)
{
    struct gpu_capture *c = gpu.cap;
    int k = 0;
    while (k < c->nsaved && c->saved_at[k] != rng) k++;
    if (k == c->nsaved) {
        if (k == MAX_RNGS) {
            gpu_capture_fail("more than 8 random streams in one recording");
            return dev_seeds;
        }
        c->saved_at[k] = rng;
        c->saved[k] = *rng;
        c->nsaved++;
    }
    uint64_t v = dt_rng_u64(rng);
    if (c->nseeds == MAX_SEEDS) {
        gpu_capture_fail("more than 256 random draws in one recording");
        return dev_seeds;
    }
    c->rngs[c->nseeds] = rng;
    c->first[c->nseeds] = v;
    return dev_seeds + c->nseeds++;
}

void gpu_capture_loss(void)
{
    if (++gpu.cap->losses > 1) gpu_capture_fail("two losses in one recording (graph_run returns one)");
}

void gpu_capture_fail(const char *why)
{
    if (!gpu.cap->failed[0]) snprintf(gpu.cap->failed, sizeof gpu.cap->failed, "%s", why);
}

void gpu_failed(const char *file, int line, const char *call, const char *msg)
{
    if (!gpu.cap) dt_die(file, line, "%s failed: %s", call, msg);
    char why[200];
    snprintf(why, sizeof why, "%s could not be recorded: %s", call, msg);
    gpu_capture_fail(why);
    (void)cudaGetLastError(); /* not sticky: cleared for the plain run */
}

void gpu_capture_defer_free(void *p)
{
    struct gpu_capture *c = gpu.cap;
    if (c->ndefer == MAX_DEFER) dt_die(__FILE__, __LINE__, "more than %d device buffers replaced while recording", MAX_DEFER);
    c->defer[c->ndefer++] = p;
}

static int fail(char *why, size_t whylen, const char *what, cudaError_t e)
{
    snprintf(why, whylen, "%s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError(); /* clear it */
    return -1;
}

int gpu_capture_begin(char *why, size_t whylen)
{
    cudaError_t e;
    if (gpu.cap) {
        snprintf(why, whylen, "already recording");
        return -1;
    }
    if (!host_seeds && (e = cudaMallocHost((void **)&host_seeds, sizeof(uint64_t) * MAX_SEEDS)) != cudaSuccess) {
        host_seeds = NULL;
        return fail(why, whylen, "cudaMallocHost", e);
    }
    if (!dev_seeds && (e = cudaMalloc((void **)&dev_seeds, sizeof(uint64_t) * MAX_SEEDS)) != cudaSuccess) {
        dev_seeds = NULL;
        return fail(why, whylen, "cudaMalloc", e);
    }
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    memset(&capture, 0, sizeof capture);
    if ((e = cudaStreamBeginCapture(gpu.stream, cudaStreamCaptureModeRelaxed)) != cudaSuccess)
        return fail(why, whylen, "cudaStreamBeginCapture", e);
    gpu.cap = &capture;
    /* The graph's first node: this replay's seeds into their slots. */
    if ((e = cudaMemcpyAsync(dev_seeds, host_seeds, sizeof(uint64_t) * MAX_SEEDS, cudaMemcpyHostToDevice,
                             gpu.stream)) != cudaSuccess)
        gpu_capture_fail("the seed copy could not be recorded");
    return 0;
}

dt_graph *gpu_capture_end(char *why, size_t whylen)
{
    struct gpu_capture *c = &capture;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(gpu.stream, &g);
    gpu.cap = NULL;
    if (e == cudaSuccess && !g) e = cudaErrorStreamCaptureInvalidated;
    (void)cudaGetLastError(); /* a cancelled recording leaves its error: cleared */
    for (int i = 0; i < c->ndefer; i++) DT_CUDA_CHECK(cudaFree(c->defer[i])); /* synchronizes */
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess && !c->failed[0]) e = cudaGraphInstantiate(&exec, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess || c->failed[0]) {
        if (c->failed[0]) snprintf(why, whylen, "%s", c->failed);
        else fail(why, whylen, "recording the step", e);
        (void)cudaGetLastError();
        for (int k = 0; k < c->nsaved; k++) *c->saved_at[k] = c->saved[k]; /* nothing was drawn */
        return NULL;
    }
    struct dt_graph *gr = (struct dt_graph *)calloc(1, sizeof *gr);
    if (!gr) dt_die(__FILE__, __LINE__, "out of memory");
    gr->exec = exec;
    gr->nseeds = c->nseeds;
    gr->fresh = 1;
    gr->has_loss = c->losses;
    memcpy(gr->rngs, c->rngs, sizeof(dt_rng *) * (size_t)c->nseeds);
    memcpy(gr->first, c->first, sizeof(uint64_t) * (size_t)c->nseeds);
    gr->generation = gpu.generation;
    return gr;
}

double gpu_graph_run(dt_graph *g, long *ncorrect)
{
    /* The previous replay has finished (every run waits), so the seed
     * array is free to refill. */
    for (int i = 0; i < g->nseeds; i++) host_seeds[i] = g->fresh ? g->first[i] : dt_rng_u64(g->rngs[i]);
    g->fresh = 0;
    DT_CUDA_CHECK(cudaGraphLaunch(g->exec, gpu.stream));
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    if (!g->has_loss) return 0.0;
    const struct gpu_xent_result *h = (const struct gpu_xent_result *)gpu.host_result;
    if (ncorrect) *ncorrect += (long)h->correct;
    return h->loss;
}

int gpu_graph_valid(const dt_graph *g) { return g && g->generation == gpu.generation; }

void gpu_graph_destroy(dt_graph *g)
{
    if (!g) return;
    DT_CUDA_CHECK(cudaStreamSynchronize(gpu.stream));
    cudaGraphExecDestroy(g->exec);
    free(g);
}

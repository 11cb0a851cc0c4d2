/* gpu.h: what the CUDA backend offers beyond its operation table.
 *
 * Only compiled with ./configure --with-cuda (DT_HAVE_CUDA). Plain C: no CUDA
 * type appears here (streams and events are void *), so the trainer and the
 * NCCL all-reduce (collectives/nccl.c) include it without nvcc. Everything the
 * layers need goes through dt_backend_cuda (backend.h); the functions below
 * are for choosing a device, describing it, and the few kernels the device
 * all-reduce and the loss scaler need on the backend's stream.
 *
 * One process drives one device: dt_gpu_select() makes it current and creates
 * the backend's compute stream, cuBLAS and cuDNN handles, all private to
 * src/gpu/. */
#ifndef DT_GPU_H
#define DT_GPU_H

#include <stddef.h>

#include "backend.h"

struct dt_gpu_info {
    char name[96];
    size_t memory;      /* bytes of global memory */
    int major, minor;   /* compute capability */
    int multiprocessors;
    char pci_bus_id[32];
};

/* Devices this process can see (after CUDA_VISIBLE_DEVICES); 0 when there is
 * no device or no driver. why (may be NULL) receives the runtime's reason. */
int dt_gpu_count(char *why, size_t whylen);
/* Fill info for device index dev (0-based among the visible ones). */
int dt_gpu_describe(int dev, struct dt_gpu_info *info);
/* Make dev current and create the stream and library handles. Returns 0, or
 * -1 with the reason in why. Call once per process, before any backend op. */
int dt_gpu_select(int dev, char *why, size_t whylen);
/* The backend's compute stream (a cudaStream_t): every op of dt_backend_cuda
 * is queued on it, in order. */
void *dt_gpu_stream(void);

/* Element kernels on a given stream (NULL: the compute stream). kind 1 is
 * fp16, 2 is bf16 (enum dt_precision). */
void dt_gpu_to16(void *dst, const float *src, size_t n, int kind, void *stream);
void dt_gpu_from16(float *dst, const void *src, size_t n, int kind, void *stream);
/* x *= s */
void dt_gpu_scale(float *x, size_t n, float s, void *stream);

extern const struct dt_backend dt_backend_cuda;

#endif

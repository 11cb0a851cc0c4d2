/* device.h: which backend and which device each rank runs on.
 *
 * --device cpu uses the CPU backend. --device cuda gives every rank one GPU:
 * the node-local rank picks device (local rank) among the visible ones
 * (CUDA_VISIBLE_DEVICES, capped by --gpus-per-node); when a scheduler binds
 * one GPU per task (Slurm's --gpus-per-task, or a CUDA_VISIBLE_DEVICES per
 * rank), every rank sees a single, different device and takes it. More ranks
 * on a node than GPUs is refused: ranks sharing a GPU cannot use NCCL. */
#ifndef DT_DEVICE_H
#define DT_DEVICE_H

#include <stdio.h>

#include "backend.h"
#include "collectives/topology.h"
#include "options.h"
#include "runtime/status.h"

struct dt_device {
    const struct dt_backend *be;
    int cuda;            /* the CUDA backend */
    int index;           /* CUDA device index among the visible ones; -1 on the CPU */
    char desc[192];      /* "NVIDIA H200 (139.8 GiB, cc 9.0, 0000:19:00.0)" or the CPU's */
};

/* Pure: the device index for a rank, or -1 with the reason in why.
 * visible: devices this rank sees; gpus_per_node: the flag (0 = all);
 * bound: every rank on the node sees one distinct device (per-task binding). */
int dt_device_assign(int local_rank, int local_size, int visible, int gpus_per_node, int bound,
                     char *why, size_t whylen);

/* Collective over topo->world: choose, select and set up this rank's backend
 * (threads, precision); the verdict is agreed on by all ranks. */
int dt_device_open(struct dt_device *d, const struct dt_config *cfg, const struct dt_topo *topo,
                   dt_status *st);

/* Collective: rank 0 prints one line per rank (host, node, local rank, device). */
void dt_device_list(const struct dt_device *d, const struct dt_topo *topo, FILE *out);

#endif

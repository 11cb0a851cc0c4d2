/* cache.h: the training samples a rank has read, kept in memory (--cache).
 *
 * Raw rows (image and label, before augmentation) keyed by global sample
 * index, first come first kept: once the byte limit is reached nothing is
 * evicted and further samples are read from disk every time, so a dataset
 * larger than the limit streams as without the cache while the part that
 * fits is served from memory. Keeping, not replacing, is deliberate: with a
 * shuffled order every sample is equally likely next, so no replacement
 * policy beats a fixed set, and a fixed set costs no copying.
 *
 * Which samples that is depends on the shard policy (data/shard.h): with
 * "file" a rank reads the same samples every epoch, so from the second epoch
 * on every read hits (when they fit); with "data" the global shuffle deals a
 * rank different samples each epoch, so its cache fills with whatever it
 * reads, and at P ranks about 1/P of the samples it needs in epoch 2 were
 * read by it in epoch 1 (more each epoch, all once it has seen them all).
 *
 * Not thread-safe: one thread uses it at a time (the loader's thread while
 * an epoch runs, the main thread otherwise). */
#ifndef DT_CACHE_H
#define DT_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct dt_cache {
    size_t limit;           /* bytes of rows at most; 0 = the cache is off */
    size_t row;             /* image bytes; a kept sample takes row + 1 */
    int64_t n;              /* samples in the split */
    uint32_t *where;        /* [n]: position + 1 in store, 0 = not kept (made on first use) */
    uint8_t *store;         /* [cap][row + 1] */
    int64_t held, alloc, cap; /* samples kept, room allocated, room allowed */
    uint64_t hits, misses;  /* lookups since the start */
};

/* limit_bytes 0 makes every lookup a miss and every insert a no-op. */
void dt_cache_init(struct dt_cache *c, size_t limit_bytes, size_t row, int64_t n);
/* Copy sample g into image/label and return 1 if it is kept; else 0. */
int dt_cache_get(struct dt_cache *c, int64_t g, uint8_t *image, uint8_t *label);
/* Keep sample g if there is room under the limit (and it is not kept yet). */
void dt_cache_put(struct dt_cache *c, int64_t g, const uint8_t *image, uint8_t label);
/* Bytes of rows kept (at most the limit). */
size_t dt_cache_bytes(const struct dt_cache *c);
void dt_cache_free(struct dt_cache *c);

#endif

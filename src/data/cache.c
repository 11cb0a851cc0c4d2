/* cache.c: the in-memory sample cache (see cache.h).
 *
 * The store grows by doubling up to the limit, so a cache that is never
 * filled (few samples, or a large limit) costs only what it holds. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/status.h"
#include "data/cache.h"

void dt_cache_init(struct dt_cache *c, size_t limit_bytes, size_t row, int64_t n)
{
    memset(c, 0, sizeof *c);
    c->limit = limit_bytes;
    c->row = row;
    c->n = n;
    int64_t cap = limit_bytes ? (int64_t)(limit_bytes / (row + 1)) : 0;
    if (cap > n) cap = n;
    if (cap > (int64_t)UINT32_MAX - 1) cap = (int64_t)UINT32_MAX - 1; /* positions are uint32 */
    c->cap = cap;
}

int dt_cache_get(struct dt_cache *c, int64_t g, uint8_t *image, uint8_t *label)
{
    if (!c->where || !c->where[g]) {
        c->misses++;
        return 0;
    }
    const uint8_t *s = c->store + (size_t)(c->where[g] - 1) * (c->row + 1);
    memcpy(image, s, c->row);
    *label = s[c->row];
    c->hits++;
    return 1;
}

void dt_cache_put(struct dt_cache *c, int64_t g, const uint8_t *image, uint8_t label)
{
    if (c->held >= c->cap) return;
    if (!c->where) c->where = dt_xcalloc((size_t)c->n, sizeof *c->where);
    if (c->where[g]) return;
    if (c->held == c->alloc) {
        int64_t room = c->alloc ? 2 * c->alloc : 1024;
        if (room > c->cap) room = c->cap;
        uint8_t *grown = realloc(c->store, (size_t)room * (c->row + 1));
        if (!grown) { /* memory is short: stop growing, keep streaming */
            c->cap = c->alloc;
            return;
        }
        c->store = grown;
        c->alloc = room;
    }
    uint8_t *s = c->store + (size_t)c->held * (c->row + 1);
    memcpy(s, image, c->row);
    s[c->row] = label;
    c->where[g] = (uint32_t)++c->held;
}

size_t dt_cache_bytes(const struct dt_cache *c)
{
    return (size_t)c->held * (c->row + 1);
}

void dt_cache_free(struct dt_cache *c)
{
    free(c->where);
    free(c->store);
    memset(c, 0, sizeof *c);
}

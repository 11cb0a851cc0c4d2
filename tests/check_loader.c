/* check_loader.c: the pread() address table, the sample cache and the
 * read-ahead loader (src/data/rowmap.c, cache.c, loader.c), on HDF5 files
 * written here in every layout the table must handle or refuse.
 *
 * Every byte of the files is a known function of (file kind, row, column),
 * so reads are checked against that independent oracle as well as against
 * HDF5's own reads (dt_dataset_read): contiguous, unfiltered chunks with a
 * partial last chunk, a file with a user block, runs across chunk and file
 * boundaries. Compressed, row-splitting and compact datasets are refused
 * with the file and the reason, and the loader then reads through HDF5 in
 * the calling thread with the same result. The loader, threaded or not, with
 * or without the cache and augmentation, from step 0 or mid-epoch, yields
 * exactly the batches of the plan; a file cut short while training gives an
 * error naming it and empty batches from then on. With --map-threads N
 * (the pool of data/pool.h) every one of those batches is the same, byte for
 * byte, for N = 1, 3 and 4, and the pool runs each part once per call. Run at one rank (MPI is
 * needed only because datasets are opened through MPI-IO). */
#include "config.h"

#include "ck_fast.h"
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "data/cache.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/pool.h"
#include "data/rowmap.h"
#include "data/shard.h"
#include "mpi_check.h"

enum { H = 5, W = 6, C = 2, ROW = H * W * C, CLASSES = 10 };
enum { CONTIG, CHUNKED, USERBLOCK, UBCHUNKED, DEFLATE, SPLIT, COMPACT, NKINDS };
static const char *kind_name[NKINDS] = {"contig", "chunked", "userblock", "userblock-chunked", "deflate", "split", "compact"};
static const int kind_rows[NKINDS] = {40, 23, 17, 9, 30, 30, 12};
static char dir[4096];
static int rank_, nranks_;
static int map_threads_ = 1; /* the loaders' --map-threads */

static uint8_t pixel(int kind, int64_t r, int j) { return (uint8_t)(kind * 37 + r * 13 + j * 7 + (r * j) % 11); }
static uint8_t label(int kind, int64_t r) { return (uint8_t)((kind + r * 3) % CLASSES); }

static void path_of(int kind, char *buf, size_t len) { snprintf(buf, len, "%s/%s.h5", dir, kind_name[kind]); }

static void write_file(int kind)
{
    char path[4200];
    path_of(kind, path, sizeof path);
    int n = kind_rows[kind];
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (kind == USERBLOCK || kind == UBCHUNKED) H5Pset_userblock(fcpl, 512);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t g = H5Gcreate2(f, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t idims[4] = {(hsize_t)n, H, W, C}, ldims[1] = {(hsize_t)n};
    hid_t ispace = H5Screate_simple(4, idims, NULL), lspace = H5Screate_simple(1, ldims, NULL);
    hid_t icpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t ichunk[4] = {7, H, W, C}, lchunk[1] = {5};
    switch (kind) {
    case CHUNKED:
    case UBCHUNKED: H5Pset_chunk(icpl, 4, ichunk); H5Pset_chunk(lcpl, 1, lchunk); break;
    case DEFLATE: H5Pset_chunk(icpl, 4, ichunk); H5Pset_deflate(icpl, 4); break;
    case SPLIT: ichunk[1] = 2; H5Pset_chunk(icpl, 4, ichunk); break;
    case COMPACT: H5Pset_layout(icpl, H5D_COMPACT); break;
    default: break;
    }
    hid_t di = H5Dcreate2(g, "images", H5T_STD_U8LE, ispace, H5P_DEFAULT, icpl, H5P_DEFAULT);
    hid_t dl = H5Dcreate2(g, "labels", H5T_STD_U8LE, lspace, H5P_DEFAULT, lcpl, H5P_DEFAULT);
    uint8_t *img = malloc((size_t)n * ROW), *lab = malloc((size_t)n);
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < ROW; j++) img[(size_t)r * ROW + j] = pixel(kind, r, j);
        lab[r] = label(kind, r);
    }
    /* labels first: their bytes then precede the images' (loader_read_error cuts the images) */
    ck_assert(H5Dwrite(dl, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab) >= 0);
    ck_assert(H5Dwrite(di, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, img) >= 0);
    free(img);
    free(lab);
    H5Dclose(di); H5Dclose(dl); H5Pclose(icpl); H5Pclose(lcpl); H5Sclose(ispace); H5Sclose(lspace);
    H5Gclose(g); H5Fclose(f); H5Pclose(fcpl);
}

/* The files of a dataset opened as shards, in the order given. */
struct opened {
    struct dt_dataset ds;
    char *paths[4];
    char buf[4][4200];
    int kinds[4];
};

static void open_kinds(struct opened *o, const int *kinds, int n)
{
    dt_status st = {0};
    for (int i = 0; i < n; i++) {
        o->kinds[i] = kinds[i];
        path_of(kinds[i], o->buf[i], sizeof o->buf[i]);
        o->paths[i] = o->buf[i];
    }
    ck_assert_msg(dt_dataset_open(&o->ds, o->paths, n, MPI_COMM_SELF, &st) == DT_OK, "%s", st.msg);
}

/* What global sample g of o must read as. */
static void expect_row(const struct opened *o, int64_t g, uint8_t *img, uint8_t *lab)
{
    int64_t r;
    int f = dt_shard_locate(o->ds.split[DT_TRAIN].file_start, o->ds.nfiles, g, &r);
    for (int j = 0; j < ROW; j++) img[j] = pixel(o->kinds[f], r, j);
    *lab = label(o->kinds[f], r);
}

static void check_rows(const struct opened *o, const int64_t *idx, int n, const uint8_t *img, const uint8_t *lab,
                       const char *what)
{
    uint8_t want[ROW], wl;
    for (int i = 0; i < n; i++) {
        expect_row(o, idx[i], want, &wl);
        ck_assert_msg(!memcmp(img + (size_t)i * ROW, want, ROW) && lab[i] == wl, "%s: sample %lld (position %d) differs",
                      what, (long long)idx[i], i);
    }
}

static void setup(void)
{
    for (int k = 0; k < NKINDS; k++) write_file(k);
}

START_TEST(rowmap_matches_hdf5)
{
    const int kinds[4] = {CONTIG, CHUNKED, USERBLOCK, UBCHUNKED};
    struct opened o;
    dt_status st = {0};
    open_kinds(&o, kinds, 4);
    struct dt_rowmap m;
    ck_assert_msg(dt_rowmap_open(&m, &o.ds, DT_TRAIN, &st) == DT_OK, "%s", st.msg);
    const int64_t N = o.ds.split[DT_TRAIN].n;
    ck_assert_int_eq(N, 40 + 23 + 17 + 9);
    enum { B = 24 };
    int64_t idx[B];
    uint8_t a[B * ROW], al[B], h[B * ROW], hl[B];
    void *scratch = malloc(dt_rowmap_scratch_bytes(B));
    /* 1. every sample in order, in batches: runs across chunk and file boundaries */
    for (int64_t at = 0; at < N; at += B) {
        int n = (int)(N - at < B ? N - at : B);
        for (int i = 0; i < n; i++) idx[i] = at + i;
        ck_assert_msg(dt_rowmap_read(&m, idx, n, a, al, scratch, &st) == DT_OK, "%s", st.msg);
        ck_assert(dt_dataset_read(&o.ds, DT_TRAIN, idx, n, h, hl, &st) == DT_OK);
        ck_assert(!memcmp(a, h, (size_t)n * ROW) && !memcmp(al, hl, (size_t)n));
        check_rows(&o, idx, n, a, al, "in order");
    }
    /* 2. 200 shuffled batches of distinct samples, as the plan deals them */
    uint64_t x = 12345;
    for (int t = 0; t < 200; t++) {
        int n = 1 + t % B;
        for (int i = 0; i < n; i++) {
            int dup;
            do {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                idx[i] = (int64_t)((x >> 33) % (uint64_t)N);
                dup = 0;
                for (int j = 0; j < i; j++) dup |= idx[j] == idx[i];
            } while (dup);
        }
        ck_assert_msg(dt_rowmap_read(&m, idx, n, a, al, scratch, &st) == DT_OK, "%s", st.msg);
        ck_assert(dt_dataset_read(&o.ds, DT_TRAIN, idx, n, h, hl, &st) == DT_OK);
        ck_assert_msg(!memcmp(a, h, (size_t)n * ROW) && !memcmp(al, hl, (size_t)n), "batch %d differs from HDF5's", t);
        check_rows(&o, idx, n, a, al, "shuffled");
    }
    /* the chunked file really is mapped chunk by chunk (7 rows; labels 5) */
    ck_assert_int_eq(m.images[1].chunk_rows, 7);
    ck_assert_int_eq(m.labels[1].chunk_rows, 5);
    ck_assert_int_eq(m.images[0].chunk_rows, 0);
    free(scratch);
    dt_rowmap_close(&m);
    dt_dataset_close(&o.ds);
}
END_TEST

START_TEST(rowmap_refuses_with_reason)
{
    static const struct { int kind; const char *why; } cases[] = {
        {DEFLATE, "/train/images is chunked with filters (compressed)"},
        {SPLIT, "/train/images has chunks that split its rows"},
        {COMPACT, "/train/images has compact (in the object header) storage"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int kinds[2] = {CONTIG, cases[c].kind};
        struct opened o;
        struct dt_rowmap m;
        dt_status st = {0};
        open_kinds(&o, kinds, 2);
        ck_assert_int_eq(dt_rowmap_open(&m, &o.ds, DT_TRAIN, &st), DT_EINPUT);
        ck_assert_msg(strstr(st.msg, o.paths[1]) && strstr(st.msg, cases[c].why), "message: %s", st.msg);
        ck_assert(m.fd == NULL); /* nothing left open */
        /* the loader falls back to HDF5 in this thread, and says why */
        struct dt_shard_plan plan;
        int64_t per_file[2] = {o.ds.split[DT_TRAIN].file_start[1], o.ds.split[DT_TRAIN].n - o.ds.split[DT_TRAIN].file_start[1]};
        dt_shard_init(&plan, DT_SHARD_DATA, 0, 1, 8, 2, per_file);
        dt_shard_epoch(&plan, 7, 0, 1);
        struct dt_loader ld;
        struct dt_loader_config lc = {.batch = 8, .prefetch = 2, .seed = 7};
        char note[1100];
        dt_loader_open(&ld, &lc, &o.ds, &plan, &dt_backend_cpu, note, sizeof note);
        ck_assert(!ld.threaded);
        ck_assert_msg(strstr(note, cases[c].why) != NULL, "note: %s", note);
        dt_loader_start(&ld, 0, 0, plan.steps);
        for (int64_t s = 0; s < plan.steps; s++) {
            const struct dt_batch *b = dt_loader_get(&ld, s);
            check_rows(&o, b->idx, b->n, b->images, b->labels, "fallback");
            dt_loader_ahead(&ld, s + 1);
        }
        dt_loader_stop(&ld);
        dt_loader_close(&ld);
        dt_shard_free(&plan);
        dt_dataset_close(&o.ds);
    }
}
END_TEST

START_TEST(cache_limit_and_hits)
{
    struct dt_cache c;
    uint8_t img[ROW], out[ROW], l = 0;
    dt_cache_init(&c, 10 * (ROW + 1) + ROW, ROW, 100); /* room for 10 samples, not 11 */
    for (int g = 0; g < 30; g++) {
        memset(img, g, ROW);
        if (!dt_cache_get(&c, g, out, &l)) dt_cache_put(&c, g, img, (uint8_t)g);
    }
    ck_assert_int_eq(c.held, 10);
    ck_assert_uint_le(dt_cache_bytes(&c), c.limit);
    ck_assert_uint_eq(c.misses, 30);
    for (int g = 0; g < 30; g++) {
        int hit = dt_cache_get(&c, g, out, &l);
        ck_assert_int_eq(hit, g < 10); /* the first come are kept */
        if (hit) ck_assert(out[0] == g && out[ROW - 1] == g && l == g);
    }
    ck_assert_uint_eq(c.hits, 10);
    dt_cache_free(&c);
    dt_cache_init(&c, 0, ROW, 100); /* off */
    dt_cache_put(&c, 3, img, 1);
    ck_assert(!dt_cache_get(&c, 3, out, &l));
    dt_cache_free(&c);
}
END_TEST

/* The batches of epochs 0 and 1 (from step s0 in epoch 1) through a loader
 * must be the plan's samples, read and augmented as by hand. */
static void run_loader(int prefetch, size_t cache_bytes, int augment, int policy, int64_t s0)
{
    const int kinds[3] = {CONTIG, CHUNKED, USERBLOCK};
    struct opened o;
    open_kinds(&o, kinds, 3);
    enum { B = 6 };
    int64_t per_file[3];
    for (int f = 0; f < 3; f++) per_file[f] = o.ds.split[DT_TRAIN].file_start[f + 1] - o.ds.split[DT_TRAIN].file_start[f];
    /* two replicas' plans in one process: this loader is replica 1 of 2 */
    struct dt_shard_plan plan, ref;
    dt_shard_init(&plan, policy, 1, 2, B, 3, per_file);
    dt_shard_init(&ref, policy, 1, 2, B, 3, per_file);
    struct dt_loader_config lc = {.batch = B, .prefetch = prefetch, .cache_bytes = cache_bytes, .seed = 99,
                                  .map_threads = map_threads_};
    if (augment) lc.augment = (struct dt_augment){.flip = 1, .pad = 2};
    struct dt_loader ld;
    char note[1100];
    dt_loader_open(&ld, &lc, &o.ds, &plan, &dt_backend_cpu, note, sizeof note);
    ck_assert_int_eq(ld.threaded, prefetch > 0);
    ck_assert_str_eq(note, "");
    int64_t idx[B];
    uint8_t want[B * ROW], wl[B], scratch[ROW];
    for (int e = 0; e < 3; e++) {
        dt_shard_epoch(&plan, 99, e, 1);
        dt_shard_epoch(&ref, 99, e, 1);
        int64_t first = e == 1 ? s0 : 0;
        dt_loader_start(&ld, e, first, plan.steps);
        for (int64_t s = first; s < plan.steps; s++) {
            const struct dt_batch *b = dt_loader_get(&ld, s);
            int64_t global;
            int n = dt_shard_step(&ref, s, idx, &global);
            ck_assert_int_eq(b->n, n);
            ck_assert_int_eq(b->global, global);
            ck_assert_int_eq(b->step, s);
            ck_assert(!b->failed);
            ck_assert(!memcmp(b->idx, idx, sizeof(int64_t) * (size_t)n));
            for (int i = 0; i < n; i++) {
                expect_row(&o, idx[i], want + (size_t)i * ROW, &wl[i]);
                int flip, dy, dx;
                if (augment) {
                    dt_augment_draw(&lc.augment, 99, e, idx[i], &flip, &dy, &dx);
                    dt_augment_image(want + (size_t)i * ROW, H, W, C, flip, dy, dx, scratch);
                }
            }
            ck_assert_msg(!memcmp(b->images, want, (size_t)n * ROW) && !memcmp(b->labels, wl, (size_t)n),
                          "prefetch %d cache %zu augment %d map threads %d: epoch %d step %lld differs", prefetch,
                          cache_bytes, augment, map_threads_, e, (long long)s);
            if (s % 3 == 0) usleep(200); /* let the thread run ahead now and then */
            dt_loader_ahead(&ld, s + 1);
        }
        dt_loader_stop(&ld);
    }
    ck_assert(dt_loader_error(&ld) == NULL);
    if (cache_bytes) {
        ck_assert_uint_le(dt_cache_bytes(&ld.cache), cache_bytes);
        ck_assert_uint_gt(ld.cache.hits, 0);
    }
    dt_loader_close(&ld);
    dt_shard_free(&plan);
    dt_shard_free(&ref);
    dt_dataset_close(&o.ds);
}

START_TEST(loader_synchronous) { run_loader(0, 0, 0, DT_SHARD_DATA, 0); }
END_TEST
START_TEST(loader_threaded) { run_loader(2, 0, 0, DT_SHARD_DATA, 0); run_loader(1, 0, 0, DT_SHARD_FILE, 0); }
END_TEST
START_TEST(loader_augment_resume) { run_loader(3, 0, 1, DT_SHARD_DATA, 2); run_loader(0, 0, 1, DT_SHARD_DATA, 2); }
END_TEST
START_TEST(loader_cache)
{
    run_loader(2, (size_t)1 << 20, 1, DT_SHARD_FILE, 0); /* all fits */
    run_loader(2, 9 * (ROW + 1), 0, DT_SHARD_DATA, 1);  /* 9 samples: the rest streams */
    run_loader(0, 9 * (ROW + 1), 1, DT_SHARD_DATA, 0);
}
END_TEST

/* --map-threads: the same batches from 3 and 4 threads (parts of one or
 * two samples of the 6), read through pread or HDF5, with and without the
 * cache and augmentation, from step 0 and mid-epoch. */
START_TEST(loader_map_threads)
{
    for (map_threads_ = 3; map_threads_ <= 4; map_threads_++) {
        run_loader(2, 0, 1, DT_SHARD_DATA, 0);
        run_loader(0, 0, 1, DT_SHARD_DATA, 2);
        run_loader(1, 0, 0, DT_SHARD_FILE, 1);
        run_loader(2, 9 * (ROW + 1), 1, DT_SHARD_DATA, 1);
        run_loader(0, (size_t)1 << 20, 1, DT_SHARD_FILE, 0);
    }
    map_threads_ = 1;
}
END_TEST

/* The pool: each of n parts runs exactly once per dt_pool_run, over many
 * runs, and the caller's thread runs part 0. */
struct pool_probe {
    int hits[8];
    pthread_t caller, ran0;
};

static void probe_part(void *arg, int k, int parts)
{
    struct pool_probe *p = arg;
    ck_assert_int_lt(k, parts);
    __atomic_fetch_add(&p->hits[k], 1, __ATOMIC_RELAXED);
    if (k == 0) p->ran0 = pthread_self();
}

START_TEST(pool_runs_each_part_once)
{
    for (int n = 1; n <= 8; n += 3) {
        struct dt_pool pool;
        struct pool_probe p = {.caller = pthread_self()};
        dt_pool_init(&pool, n);
        for (int r = 0; r < 2000; r++) dt_pool_run(&pool, probe_part, &p);
        for (int k = 0; k < n; k++) ck_assert_int_eq(p.hits[k], 2000);
        for (int k = n; k < 8; k++) ck_assert_int_eq(p.hits[k], 0);
        ck_assert(pthread_equal(p.ran0, p.caller));
        dt_pool_free(&pool);
    }
}
END_TEST

/* A file cut short after the table was built: the thread's pread fails, the
 * error names the file, and that batch and all later ones come back empty. */
static void loader_read_error_body(void)
{
    char src[4200], path[4300], cmd[9000];
    path_of(CONTIG, src, sizeof src);
    snprintf(path, sizeof path, "%s/cut.h5", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, path);
    ck_assert(system(cmd) == 0);
    struct dt_dataset ds;
    char *paths[1] = {path};
    dt_status st = {0};
    ck_assert(dt_dataset_open(&ds, paths, 1, MPI_COMM_SELF, &st) == DT_OK);
    int64_t n = ds.split[DT_TRAIN].n;
    struct dt_shard_plan plan;
    dt_shard_init(&plan, DT_SHARD_DATA, 0, 1, 4, 1, &n);
    dt_shard_epoch(&plan, 1, 0, 0); /* in order: step 5 holds rows 20..23 */
    struct dt_loader ld;
    struct dt_loader_config lc = {.batch = 4, .prefetch = 2, .seed = 1, .map_threads = map_threads_};
    char note[1100];
    dt_loader_open(&ld, &lc, &ds, &plan, &dt_backend_cpu, note, sizeof note);
    ck_assert(ld.threaded);
    /* the images end at base + 40 rows; keep 20 rows of them (and the labels, before them) */
    ck_assert(ld.map.labels[0].base + 40 <= ld.map.images[0].base);
    ck_assert(truncate(path, (off_t)(ld.map.images[0].base + 20 * ROW)) == 0);
    dt_loader_start(&ld, 0, 0, plan.steps);
    for (int64_t s = 0; s < plan.steps; s++) {
        const struct dt_batch *b = dt_loader_get(&ld, s);
        ck_assert_int_eq(b->failed, s >= 5);
        ck_assert_int_eq(b->n, s >= 5 ? 0 : 4);
        ck_assert_int_eq(b->global, 4);
    }
    dt_loader_stop(&ld);
    const dt_status *err = dt_loader_error(&ld);
    ck_assert(err != NULL);
    ck_assert_int_eq(err->code, DT_ERUNTIME);
    ck_assert_msg(strstr(err->msg, path) && strstr(err->msg, "the file ends at"), "message: %s", err->msg);
    dt_loader_close(&ld);
    dt_shard_free(&plan);
    dt_dataset_close(&ds);
}

START_TEST(loader_read_error) { loader_read_error_body(); }
END_TEST

/* The same, with the reads split over 3 threads: the part that reads past
 * the end reports it. */
START_TEST(loader_read_error_map_threads)
{
    map_threads_ = 3;
    loader_read_error_body();
    map_threads_ = 1;
}
END_TEST

int main(int argc, char **argv)
{
    mpi_check_init(&argc, &argv, "loader", &rank_, &nranks_, dir, sizeof dir);
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_add_unchecked_fixture(tc, setup, NULL);
    tcase_add_test(tc, rowmap_matches_hdf5);
    tcase_add_test(tc, rowmap_refuses_with_reason);
    tcase_add_test(tc, cache_limit_and_hits);
    tcase_add_test(tc, loader_synchronous);
    tcase_add_test(tc, loader_threaded);
    tcase_add_test(tc, loader_augment_resume);
    tcase_add_test(tc, loader_cache);
    tcase_add_test(tc, loader_read_error);
    tcase_add_test(tc, loader_map_threads);
    tcase_add_test(tc, pool_runs_each_part_once);
    tcase_add_test(tc, loader_read_error_map_threads);
    suite_add_tcase(s, tc);
    return mpi_check_run(s, rank_);
}

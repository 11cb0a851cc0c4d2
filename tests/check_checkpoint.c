/* check_checkpoint.c: the checkpoint file at 2 ranks (tests/launch reads the
 * rank count from the name, check_checkpoint_np2).
 *
 * MPI is initialised once and Check runs in no-fork mode, so every test is
 * collective. The state is two layers with parameters (conv 3x3x1x4, dense
 * 36x5) around one without, Adam slots m and v written by rank 0 as
 * [0, SPLIT) and by rank 1 as [SPLIT, n). What is checked:
 * - every element round-trips bit for bit, read back with other splits
 *   (rank 0 nothing and rank 1 all; both whole; overlapping; with gaps; no
 *   slots at all), and the state checksum agrees in each;
 * - latest names the newest file, keep=2 leaves two, and a temporary file
 *   left by a crash is removed;
 * - a flipped byte in a dataset, a truncated file and a non-HDF5 file are
 *   refused with a clear message;
 * - resolve("latest") skips a corrupt newest file with a note;
 * - a directory that cannot be made, a file system that refuses the write
 *   (RLIMIT_FSIZE stands in for a full disk) or the latest pointer: a clear
 *   error, no temporary file left, the previous checkpoint still latest;
 * - a model whose layer shapes differ gets a message naming the layer. */
#include "config.h"

#include "ck_fast.h"
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpi_check.h"
#include "checkpoint/checkpoint.h"

enum { NP = 225, SPLIT = 100, NHIST = 3 };

static int rank, nranks;
static char root[512];

static const struct dt_ckpt_layer layers_ok[3] = {
    {"conv2d_1", 0, 4, {3, 3, 1, 4}, 4},
    {"max_pooling2d_1", 40, 0, {0, 0, 0, 0}, 0},
    {"dense_1", 40, 2, {36, 5, 0, 0}, 5},
};
static const char *const cfg_keys[3] = {"batch-size", "epochs", "optimizer"};
static const char *const cfg_values[3] = {"32", "10", "adam"};

struct state {
    struct dt_ckpt c;
    float params[NP + 8], m[NP], v[NP];
    double hist[NHIST][DT_CKPT_HIST];
};

static float pval(int epoch, size_t i) { return (float)epoch + 0.001f * (float)i; }
static float mval(size_t i) { return 0.5f * (float)i - 3.0f; }
static float vval(size_t i) { return 1.0f / (1.0f + (float)i); }

/* What rank `rank` writes for epoch; slots split at SPLIT (at 2 ranks). */
static void make_state(struct state *s, int epoch, long long step)
{
    struct dt_ckpt *c = &s->c;
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < NP; i++) s->params[i] = pval(epoch, i);
    c->dtrain_version = "0.1.0-test";
    c->strategy = "sharded";
    c->model = "cnn";
    c->nranks = nranks;
    c->nconfig = 3;
    c->config_keys = cfg_keys;
    c->config_values = cfg_values;
    c->command_line = "dtrain --model cnn --epochs 10 data.h5";
    c->data_checksum = 0x1234567890abcdefULL;
    c->nparams = NP;
    c->nlayers = 3;
    c->layers = layers_ok;
    c->params = s->params;
    c->optimizer = "adam";
    c->opt_step = 1000 + epoch;
    c->lr = 0.001f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-7f;
    c->momentum = 0.0f;
    c->nslots = 2;
    c->slot_names[0] = "m";
    c->slot_names[1] = "v";
    c->off = nranks == 2 ? (rank == 0 ? 0 : SPLIT) : (size_t)NP * (size_t)rank / (size_t)nranks;
    c->len = (nranks == 2 ? (rank == 0 ? SPLIT : NP) : (size_t)NP * (size_t)(rank + 1) / (size_t)nranks) - c->off;
    c->writer = 1;
    for (size_t k = 0; k < c->len; k++) {
        s->m[k] = mval(c->off + k);
        s->v[k] = vval(c->off + k);
    }
    c->slots[0] = s->m;
    c->slots[1] = s->v;
    c->epoch = epoch;
    c->step = step;
    c->global_step = 100L * epoch + step;
    c->progress[0] = 12.5;
    c->progress[1] = 40;
    c->progress[2] = 64;
    for (int j = 0; j < 4; j++) c->rng[j] = 0x9e3779b97f4a7c15ULL * (uint64_t)(rank + 1) + (uint64_t)j;
    c->ls_on = 1;
    c->ls_dynamic = 1;
    c->ls_clean = 17;
    c->ls_scale = 32768.0f;
    c->ls_skipped = 3;
    c->nhistory = NHIST;
    for (int e = 0; e < NHIST; e++)
        for (int j = 0; j < DT_CKPT_HIST; j++) s->hist[e][j] = e * 10.0 + j + 0.25;
    c->history = s->hist;
    c->best = 0.75;
    c->best_epoch = 2;
    c->wait = 1;
}

/* A reader with the model's layout and this rank's part [off, off+len). */
static void make_reader(struct state *r, const struct dt_ckpt_layer *layers, size_t nparams, int nslots,
                        size_t off, size_t len)
{
    memset(r, 0xff, sizeof *r);  /* NaN patterns: nothing read stays visible */
    memset(&r->c, 0, sizeof r->c);
    r->c.nparams = nparams;
    r->c.nlayers = 3;
    r->c.layers = layers;
    r->c.params = r->params;
    r->c.nslots = nslots;
    r->c.slot_names[0] = "m";
    r->c.slot_names[1] = "v";
    r->c.slots[0] = r->m;
    r->c.slots[1] = r->v;
    r->c.off = off;
    r->c.len = len;
}

static void check_read(const struct state *r, int epoch, long long step)
{
    const struct dt_ckpt *c = &r->c;
    for (size_t i = 0; i < NP; i++) ck_assert_msg(r->params[i] == pval(epoch, i), "param %zu", i);
    for (size_t k = 0; k < c->len && c->nslots; k++) {
        ck_assert_msg(r->m[k] == mval(c->off + k), "m[%zu]", c->off + k);
        ck_assert_msg(r->v[k] == vval(c->off + k), "v[%zu]", c->off + k);
    }
    ck_assert_str_eq(c->dtrain_version, "0.1.0-test");
    ck_assert_str_eq(c->strategy, "sharded");
    ck_assert_str_eq(c->model, "cnn");
    ck_assert_str_eq(c->optimizer, "adam");
    ck_assert_str_eq(c->command_line, "dtrain --model cnn --epochs 10 data.h5");
    ck_assert_int_eq(c->nconfig, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(c->config_keys[i], cfg_keys[i]);
        ck_assert_str_eq(c->config_values[i], cfg_values[i]);
    }
    ck_assert_int_eq(c->nranks, nranks);
    ck_assert_int_eq(c->file_nranks, nranks);
    ck_assert(c->data_checksum == 0x1234567890abcdefULL);
    ck_assert_int_eq(c->opt_step, 1000 + epoch);
    ck_assert(c->lr == 0.001f && c->beta1 == 0.9f && c->beta2 == 0.999f && c->eps == 1e-7f && c->momentum == 0.0f);
    ck_assert_int_eq(c->epoch, epoch);
    ck_assert_int_eq(c->step, step);
    ck_assert_int_eq(c->global_step, 100L * epoch + step);
    ck_assert(c->progress[0] == 12.5 && c->progress[1] == 40 && c->progress[2] == 64);
    for (int q = 0; q < nranks; q++)
        for (int j = 0; j < 4; j++)
            ck_assert(c->all_rng[q][j] == 0x9e3779b97f4a7c15ULL * (uint64_t)(q + 1) + (uint64_t)j);
    for (int j = 0; j < 4; j++) ck_assert(c->rng[j] == c->all_rng[rank][j]);
    ck_assert(c->ls_on == 1 && c->ls_dynamic == 1 && c->ls_clean == 17 && c->ls_scale == 32768.0f);
    ck_assert_int_eq(c->ls_skipped, 3);
    ck_assert_int_eq(c->nhistory, NHIST);
    for (int e = 0; e < NHIST; e++)
        for (int j = 0; j < DT_CKPT_HIST; j++) ck_assert(c->history[e][j] == e * 10.0 + j + 0.25);
    ck_assert(c->best == 0.75 && c->best_epoch == 2 && c->wait == 1);
}

/* A fresh directory under the test root (same name on every rank). */
static void fresh_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", root, name);
    if (rank == 0) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
        if (system(cmd) != 0) fprintf(stderr, "cannot create %s\n", out);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static int write_epoch(const char *dir, int epoch, long long step, int keep, char *path, size_t n, dt_status *st)
{
    struct state s;
    make_state(&s, epoch, step);
    return dt_ckpt_write(MPI_COMM_WORLD, dir, keep, &s.c, path, n, st);
}

static void read_text(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(buf, 1, n - 1, f) : 0;
    buf[k] = '\0';
    if (f) fclose(f);
}

/* Names in dir: ckpt files counted, leftovers (temporary files) counted. */
static void count_files(const char *dir, int *ckpts, int *temps)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    *ckpts = *temps = 0;
    while (d && (e = readdir(d)) != NULL) {
        if (!strncmp(e->d_name, "ckpt-", 5)) (*ckpts)++;
        if (!strncmp(e->d_name, ".ckpt-", 6) || !strcmp(e->d_name, ".latest.tmp")) (*temps)++;
    }
    if (d) closedir(d);
}

/* Rank 0 flips one byte inside dataset dset of file path. */
static void flip_byte(const char *path, const char *dset, size_t at)
{
    if (rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
        haddr_t off = H5Dget_offset(d);
        H5Dclose(d);
        H5Fclose(f);
        ck_assert(off != HADDR_UNDEF);
        int fd = open(path, O_RDWR);
        unsigned char b;
        ck_assert(pread(fd, &b, 1, (off_t)(off + at)) == 1);
        b ^= 0x5a;
        ck_assert(pwrite(fd, &b, 1, (off_t)(off + at)) == 1);
        close(fd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Runs under a redirected stderr on rank 0; returns what was printed. */
static int saved_stderr = -1;
static void capture_stderr(const char *file)
{
    if (rank != 0) return;
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
}

static void restore_stderr(void)
{
    if (rank != 0) return;
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
}

START_TEST(test_round_trip)
{
    char dir[600], path[700], expect[700], latest[128];
    dt_status st;
    fresh_dir(dir, sizeof dir, "roundtrip");
    ck_assert_int_eq(write_epoch(dir, 3, 7, 0, path, sizeof path, &st), DT_OK);
    snprintf(expect, sizeof expect, "%s/ckpt-000003-00000007.h5", dir);
    ck_assert_str_eq(path, expect);
    snprintf(expect, sizeof expect, "%s/latest", dir);
    read_text(expect, latest, sizeof latest);
    ck_assert_str_eq(latest, "ckpt-000003-00000007.h5\n");

    /* Splits: rank 0 nothing / rank 1 all; both whole; overlapping;
     * with a gap nobody reads; and no slots at all. */
    size_t parts[5][2][2] = {
        {{0, 0}, {0, NP}}, {{0, NP}, {0, NP}}, {{0, 150}, {100, 125}}, {{0, 50}, {200, 25}}, {{0, 0}, {0, 0}},
    };
    for (int t = 0; t < 5; t++) {
        struct state r;
        int me = rank < 2 ? rank : 1;
        make_reader(&r, layers_ok, NP, t == 4 ? 0 : 2, parts[t][me][0], rank < 2 ? parts[t][me][1] : 0);
        ck_assert_msg(dt_ckpt_read(MPI_COMM_WORLD, path, &r.c, &st) == DT_OK, "split %d: %s", t, st.msg);
        check_read(&r, 3, 7);
        dt_ckpt_release(&r.c);
        ck_assert_ptr_null(r.c.history);
    }
}
END_TEST

START_TEST(test_latest_and_keep)
{
    char dir[600], path[700], got[700], expect[700], latest[128];
    int ckpts, temps;
    dt_status st;
    fresh_dir(dir, sizeof dir, "keep");
    /* What a crash mid-checkpoint leaves: removed by the next checkpoint. */
    snprintf(expect, sizeof expect, "%s/.ckpt-000000-00000009.h5.tmp.12345", dir);
    if (rank == 0) fclose(fopen(expect, "w"));
    for (int e = 1; e <= 3; e++) ck_assert_int_eq(write_epoch(dir, e, 0, 2, path, sizeof path, &st), DT_OK);
    ck_assert(access(expect, F_OK) != 0);
    count_files(dir, &ckpts, &temps);
    ck_assert_int_eq(ckpts, 2);
    ck_assert_int_eq(temps, 0);
    snprintf(expect, sizeof expect, "%s/ckpt-000001-00000000.h5", dir);
    ck_assert(access(expect, F_OK) != 0);
    snprintf(expect, sizeof expect, "%s/ckpt-000002-00000000.h5", dir);
    ck_assert(access(expect, F_OK) == 0);
    snprintf(expect, sizeof expect, "%s/latest", dir);
    read_text(expect, latest, sizeof latest);
    ck_assert_str_eq(latest, "ckpt-000003-00000000.h5\n");

    ck_assert_int_eq(dt_ckpt_resolve(MPI_COMM_WORLD, "latest", dir, got, sizeof got, &st), DT_OK);
    ck_assert_str_eq(got, path);
    ck_assert_int_eq(dt_ckpt_resolve(MPI_COMM_WORLD, dir, NULL, got, sizeof got, &st), DT_OK);
    ck_assert_str_eq(got, path);
    snprintf(expect, sizeof expect, "%s/ckpt-000002-00000000.h5", dir);
    ck_assert_int_eq(dt_ckpt_resolve(MPI_COMM_WORLD, expect, dir, got, sizeof got, &st), DT_OK);
    ck_assert_str_eq(got, expect);
}
END_TEST

START_TEST(test_flipped_byte)
{
    static const char *where[2] = {"/optimizer/v", "/model/dense_1/kernel"};
    char dir[600], path[700];
    dt_status st;
    fresh_dir(dir, sizeof dir, "flip");
    for (int k = 0; k < 2; k++) {
        struct state r;
        ck_assert_int_eq(write_epoch(dir, 1 + k, 0, 0, path, sizeof path, &st), DT_OK);
        flip_byte(path, where[k], 4 * 150 + 2);
        make_reader(&r, layers_ok, NP, 2, 0, rank == 0 ? NP : 0);
        ck_assert_int_eq(dt_ckpt_read(MPI_COMM_WORLD, path, &r.c, &st), DT_EINPUT);
        ck_assert_msg(strstr(st.msg, "state checksum mismatch") && strstr(st.msg, "the file is corrupt") &&
                      strstr(st.msg, path), "%s", st.msg);
        ck_assert_ptr_null(r.c.history);
    }
}
END_TEST

START_TEST(test_truncated_and_not_hdf5)
{
    char dir[600], path[700];
    struct stat sb;
    struct state r;
    dt_status st;
    fresh_dir(dir, sizeof dir, "trunc");
    ck_assert_int_eq(write_epoch(dir, 1, 0, 0, path, sizeof path, &st), DT_OK);
    if (rank == 0) {
        ck_assert(stat(path, &sb) == 0);
        ck_assert(truncate(path, sb.st_size / 2) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    make_reader(&r, layers_ok, NP, 2, 0, rank == 0 ? NP : 0);
    ck_assert_int_eq(dt_ckpt_read(MPI_COMM_WORLD, path, &r.c, &st), DT_EINPUT);
    ck_assert_msg(strstr(st.msg, path) && strstr(st.msg, "truncated"), "%s", st.msg);
    if (rank == 0) printf("# truncated: %s\n", st.msg);

    if (rank == 0) {
        FILE *f = fopen(path, "w");
        fputs("not a checkpoint\n", f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ck_assert_int_eq(dt_ckpt_read(MPI_COMM_WORLD, path, &r.c, &st), DT_EINPUT);
    ck_assert_msg(strstr(st.msg, path) && strstr(st.msg, "not an HDF5 file"), "%s", st.msg);
}
END_TEST

START_TEST(test_resolve_fallback)
{
    char dir[600], p1[700], p2[700], got[700], notes[600], text[4096];
    dt_status st;
    fresh_dir(dir, sizeof dir, "fallback");
    ck_assert_int_eq(write_epoch(dir, 1, 0, 0, p1, sizeof p1, &st), DT_OK);
    ck_assert_int_eq(write_epoch(dir, 2, 0, 0, p2, sizeof p2, &st), DT_OK);
    flip_byte(p2, "/history", 3);
    snprintf(notes, sizeof notes, "%s/notes.txt", root);
    capture_stderr(notes);
    int rc = dt_ckpt_resolve(MPI_COMM_WORLD, "latest", dir, got, sizeof got, &st);
    restore_stderr();
    ck_assert_int_eq(rc, DT_OK);
    ck_assert_str_eq(got, p1);
    if (rank == 0) {
        read_text(notes, text, sizeof text);
        printf("# fallback note: %s", text);
        ck_assert_msg(strstr(text, "dtrain: note: checkpoint ") && strstr(text, p2) && strstr(text, "skipped") &&
                      strstr(text, "state checksum mismatch"), "%s", text);
    }

    /* Nothing valid left: an error naming the directory. */
    flip_byte(p1, "/rng/dropout", 9);
    capture_stderr(notes);
    rc = dt_ckpt_resolve(MPI_COMM_WORLD, "latest", dir, got, sizeof got, &st);
    restore_stderr();
    ck_assert_int_eq(rc, DT_EINPUT);
    ck_assert_msg(strstr(st.msg, dir) && strstr(st.msg, "no valid checkpoint") && strstr(st.msg, p2), "%s", st.msg);
    if (rank == 0) printf("# none valid: %s\n", st.msg);

    /* An empty directory and a missing one. */
    fresh_dir(dir, sizeof dir, "fallback-empty");
    ck_assert_int_eq(dt_ckpt_resolve(MPI_COMM_WORLD, "latest", dir, got, sizeof got, &st), DT_EINPUT);
    ck_assert_msg(strstr(st.msg, "no checkpoint in it"), "%s", st.msg);
    ck_assert_int_eq(dt_ckpt_resolve(MPI_COMM_WORLD, "latest", "/nonexistent/ckpts", got, sizeof got, &st), DT_EINPUT);
    ck_assert_msg(strstr(st.msg, "/nonexistent/ckpts") && strstr(st.msg, "No such file"), "%s", st.msg);
}
END_TEST

/* The previous checkpoint is latest and intact, and nothing is left over. */
static void check_untouched(const char *dir, const char *prev)
{
    char lp[700], latest[128], got[700];
    int ckpts, temps;
    dt_status st;
    snprintf(lp, sizeof lp, "%s/latest", dir);
    read_text(lp, latest, sizeof latest);
    ck_assert_str_eq(latest, "ckpt-000001-00000000.h5\n");
    count_files(dir, &ckpts, &temps);
    ck_assert_int_eq(ckpts, 1);
    ck_assert_int_eq(temps, 0);
    ck_assert_int_eq(dt_ckpt_resolve(MPI_COMM_WORLD, "latest", dir, got, sizeof got, &st), DT_OK);
    ck_assert_str_eq(got, prev);
}

START_TEST(test_write_failures)
{
    char dir[600], bad[700], prev[700], path[700];
    dt_status st;
    fresh_dir(dir, sizeof dir, "fail");
    ck_assert_int_eq(write_epoch(dir, 1, 0, 0, prev, sizeof prev, &st), DT_OK);

    /* The directory is a regular file; or cannot be made (/proc). */
    snprintf(bad, sizeof bad, "%s/latest", dir);
    ck_assert_int_eq(write_epoch(bad, 2, 0, 0, path, sizeof path, &st), DT_ERUNTIME);
    ck_assert_msg(strstr(st.msg, bad) && strstr(st.msg, "cannot create the directory") &&
                  strstr(st.msg, "Not a directory"), "%s", st.msg);
    ck_assert_int_eq(write_epoch("/proc/dtrain-ckpt-test", 2, 0, 0, path, sizeof path, &st), DT_ERUNTIME);
    ck_assert_msg(strstr(st.msg, "/proc/dtrain-ckpt-test") && strstr(st.msg, "cannot create the directory"), "%s",
                  st.msg);
    if (rank == 0) printf("# no directory: %s\n", st.msg);
    /* A directory that takes no files (root ignores chmod 0555; /proc does not). */
    ck_assert_int_eq(write_epoch("/proc", 2, 0, 0, path, sizeof path, &st), DT_ERUNTIME);
    ck_assert_msg(strstr(st.msg, "/proc/ckpt-000002-00000000.h5"), "%s", st.msg);
    if (rank == 0) printf("# /proc: %s\n", st.msg);
    /* The temporary file cannot be created (a directory is in its way):
     * HDF5 fails, and says so in our words. */
    long pid = (long)getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    snprintf(bad, sizeof bad, "%s/.ckpt-000002-00000000.h5.tmp.%ld", dir, pid);
    if (rank == 0) ck_assert(mkdir(bad, 0755) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    ck_assert_int_eq(write_epoch(dir, 2, 0, 0, path, sizeof path, &st), DT_ERUNTIME);
    ck_assert_msg(strstr(st.msg, "cannot create") && strstr(st.msg, bad), "%s", st.msg);
    if (rank == 0) printf("# cannot create: %s\n", st.msg);
    if (rank == 0) ck_assert(rmdir(bad) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    check_untouched(dir, prev);

    /* A file size limit on one rank (ulimit -f), refused before writing. */
    struct rlimit old, small;
    struct state big;
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    small.rlim_cur = 4096;
    make_state(&big, 2, 0);
    if (rank == 1) setrlimit(RLIMIT_FSIZE, &small);
    int rc = dt_ckpt_write(MPI_COMM_WORLD, dir, 0, &big.c, path, sizeof path, &st);
    setrlimit(RLIMIT_FSIZE, &old);
    ck_assert_int_eq(rc, DT_ERUNTIME);
    ck_assert_msg(strstr(st.msg, "ckpt-000002-00000000.h5") && strstr(st.msg, "ulimit -f") &&
                  strstr(st.msg, "rank 1"), "%s", st.msg);
    if (rank == 0) printf("# file size limit: %s\n", st.msg);
    check_untouched(dir, prev);

    /* The new file is complete but latest cannot be replaced. */
    snprintf(bad, sizeof bad, "%s/.latest.tmp", dir);
    if (rank == 0) ck_assert(mkdir(bad, 0755) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    ck_assert_int_eq(write_epoch(dir, 2, 0, 0, path, sizeof path, &st), DT_ERUNTIME);
    ck_assert_msg(strstr(st.msg, ".latest.tmp"), "%s", st.msg);
    if (rank == 0) printf("# latest: %s\n", st.msg);
    if (rank == 0) ck_assert(rmdir(bad) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    check_untouched(dir, prev);
}
END_TEST

START_TEST(test_shape_mismatch)
{
    static const struct dt_ckpt_layer wider[3] = {
        {"conv2d_1", 0, 4, {3, 3, 1, 4}, 4},
        {"max_pooling2d_1", 40, 0, {0, 0, 0, 0}, 0},
        {"dense_1", 40, 2, {36, 6, 0, 0}, 6},
    };
    static const struct dt_ckpt_layer renamed[3] = {
        {"conv2d_1", 0, 4, {3, 3, 1, 4}, 4},
        {"max_pooling2d_1", 40, 0, {0, 0, 0, 0}, 0},
        {"dense_2", 40, 2, {36, 5, 0, 0}, 5},
    };
    char dir[600], path[700];
    struct state r;
    dt_status st;
    fresh_dir(dir, sizeof dir, "shape");
    ck_assert_int_eq(write_epoch(dir, 1, 0, 0, path, sizeof path, &st), DT_OK);
    make_reader(&r, wider, NP + 7, 2, 0, rank == 0 ? NP + 7 : 0);
    ck_assert_int_eq(dt_ckpt_read(MPI_COMM_WORLD, path, &r.c, &st), DT_EINPUT);
    ck_assert_msg(strstr(st.msg, "dense_1") && strstr(st.msg, "[36,5]") && strstr(st.msg, "[36,6]"), "%s", st.msg);
    if (rank == 0) printf("# shape: %s\n", st.msg);
    make_reader(&r, renamed, NP, 2, 0, rank == 0 ? NP : 0);
    ck_assert_int_eq(dt_ckpt_read(MPI_COMM_WORLD, path, &r.c, &st), DT_EINPUT);
    ck_assert_msg(strstr(st.msg, "dense_1") && strstr(st.msg, "dense_2"), "%s", st.msg);
    /* An SGD-with-momentum run reading an Adam checkpoint. */
    make_reader(&r, layers_ok, NP, 1, 0, rank == 0 ? NP : 0);
    r.c.slot_names[0] = "velocity";
    ck_assert_int_eq(dt_ckpt_read(MPI_COMM_WORLD, path, &r.c, &st), DT_EINPUT);
    ck_assert_msg(strstr(st.msg, "/optimizer/velocity") && strstr(st.msg, "m, v"), "%s", st.msg);
    if (rank == 0) printf("# slots: %s\n", st.msg);
}
END_TEST

START_TEST(test_checksum_pieces)
{
    /* Any split of a dataset over blocks sums to the same value. */
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)i * 0.37f;
    uint64_t whole = 0, parts = 0;
    for (uint64_t i = 0; i < 1000; i++) whole += dt_ckpt_block_mix(i, dt_fnv1a64(&v[i], 4, 0));
    for (uint64_t i = 999; i < 1000; i--) parts += dt_ckpt_block_mix(i, dt_fnv1a64(&v[i], 4, 0));
    ck_assert(whole == parts);
    ck_assert(dt_fnv1a64("a", 1, 0) == 0xaf63dc4c8601ec8cULL);  /* the FNV-1a 64 reference value */
    ck_assert(dt_fnv1a64("", 0, 0) == 0xcbf29ce484222325ULL);
}
END_TEST

int main(int argc, char **argv)
{
    mpi_check_init(&argc, &argv, "ckpt", &rank, &nranks, root, sizeof root);

    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("file");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_checksum_pieces);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_latest_and_keep);
    tcase_add_test(tc, test_flipped_byte);
    tcase_add_test(tc, test_truncated_and_not_hdf5);
    tcase_add_test(tc, test_resolve_fallback);
    tcase_add_test(tc, test_write_failures);
    tcase_add_test(tc, test_shape_mismatch);
    suite_add_tcase(s, tc);
    return mpi_check_run(s, rank);
}

/* check_idx.c: unit tests for the IDX reader (src/prep/idx.c).
 *
 * Each test writes a small IDX file, plain or gzip-compressed, into $TEST_TMP
 * (else /tmp) and reads it back: good files must parse to the exact dims and
 * bytes, and each kind of bad file must be refused with a message that names
 * the file and the problem.
 */
#include "ck_fast.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "prep/idx.h"

#define MAX_FILE 4096

/* A scratch path unique to this process (Check forks one per test). */
static void scratch_path(char *buf, size_t len, const char *name)
{
    const char *dir = getenv("TEST_TMP");

    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        ck_abort_msg("cannot create TEST_TMP=%s: %s", dir, strerror(errno));
    snprintf(buf, len, "%s/check_idx-%ld-%s", dir, (long)getpid(), name);
}

/* Build an IDX image of unsigned bytes: magic, big-endian dims, data. */
static size_t make_idx(unsigned char *buf, int ndim, const uint32_t *dims,
                       const unsigned char *data, size_t ndata)
{
    size_t n = 0;

    buf[n++] = 0;
    buf[n++] = 0;
    buf[n++] = 0x08;
    buf[n++] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[n++] = (unsigned char)(dims[i] >> 24);
        buf[n++] = (unsigned char)(dims[i] >> 16);
        buf[n++] = (unsigned char)(dims[i] >> 8);
        buf[n++] = (unsigned char)dims[i];
    }
    memcpy(buf + n, data, ndata);
    return n + ndata;
}

static void write_plain(const char *path, const unsigned char *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");

    ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_gz(const char *path, const unsigned char *bytes, size_t len)
{
    gzFile f = gzopen(path, "wb");

    ck_assert_msg(f != NULL, "cannot create %s", path);
    if (len > 0)
        ck_assert_int_eq(gzwrite(f, bytes, (unsigned)len), (int)len);
    ck_assert_int_eq(gzclose(f), Z_OK);
}

/* Read PATH expecting failure; the message must name PATH and contain WANT. */
static void expect_error(const char *path, const char *want)
{
    struct idx_array a;
    char err[512] = "";

    ck_assert_int_ne(idx_read(path, &a, err, sizeof err), 0);
    ck_assert_ptr_null(a.data);
    ck_assert_uint_eq(a.count, 0);
    ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
    ck_assert_msg(strstr(err, want) != NULL, "expected \"%s\" in: %s", want, err);
}

static unsigned char g_file[MAX_FILE];

START_TEST(test_plain_3d)
{
    const uint32_t dims[3] = {3, 2, 4};
    unsigned char data[24];
    struct idx_array a;
    char path[512], err[512] = "";
    size_t n;

    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 37 + 5);
    n = make_idx(g_file, 3, dims, data, sizeof data);
    scratch_path(path, sizeof path, "plain3d.idx");
    write_plain(path, g_file, n);

    ck_assert_msg(idx_read(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.ndim, 3);
    ck_assert_uint_eq(a.dims[0], 3);
    ck_assert_uint_eq(a.dims[1], 2);
    ck_assert_uint_eq(a.dims[2], 4);
    ck_assert_uint_eq(a.count, 24);
    ck_assert_mem_eq(a.data, data, sizeof data);
    idx_free(&a);
    ck_assert_ptr_null(a.data);
    idx_free(&a); /* a second free of an empty array is harmless */
    unlink(path);
}
END_TEST

START_TEST(test_gzip_1d)
{
    const uint32_t dims[1] = {1000};
    unsigned char data[1000];
    struct idx_array a;
    char path[512], err[512] = "";
    size_t n;

    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i % 10);
    n = make_idx(g_file, 1, dims, data, sizeof data);
    scratch_path(path, sizeof path, "labels.idx.gz");
    write_gz(path, g_file, n);

    ck_assert_msg(idx_read(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.ndim, 1);
    ck_assert_uint_eq(a.dims[0], 1000);
    ck_assert_uint_eq(a.count, 1000);
    ck_assert_mem_eq(a.data, data, sizeof data);
    idx_free(&a);
    unlink(path);
}
END_TEST

/* Dimensions above 2^24 must survive the big-endian decode. */
START_TEST(test_big_endian_dims)
{
    const unsigned char file[] = {0, 0, 8, 2, 0x01, 0x00, 0x00, 0x00, 0, 0, 0, 0};
    struct idx_array a;
    char path[512], err[512] = "";

    scratch_path(path, sizeof path, "bigdim.idx");
    write_plain(path, file, sizeof file);
    ck_assert_msg(idx_read(path, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.ndim, 2);
    ck_assert_uint_eq(a.dims[0], 16777216u);
    ck_assert_uint_eq(a.dims[1], 0);
    ck_assert_uint_eq(a.count, 0);
    idx_free(&a);
    unlink(path);
}
END_TEST

START_TEST(test_bad_magic)
{
    const unsigned char file[] = {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1, 42};
    char path[512];

    scratch_path(path, sizeof path, "badmagic.idx");
    write_plain(path, file, sizeof file);
    expect_error(path, "not an IDX file (magic 0x12345678");
    unlink(path);

    scratch_path(path, sizeof path, "badmagic.idx.gz");
    write_gz(path, file, sizeof file);
    expect_error(path, "not an IDX file");
    unlink(path);
}
END_TEST

START_TEST(test_unsupported_type)
{
    const unsigned char file[] = {0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0x80, 0x3f};
    char path[512];

    scratch_path(path, sizeof path, "float.idx");
    write_plain(path, file, sizeof file);
    expect_error(path, "0x0d (float32) is not supported");
    unlink(path);
}
END_TEST

START_TEST(test_bad_ndim)
{
    const unsigned char zero[] = {0, 0, 8, 0};
    const unsigned char five[] = {0, 0, 8, 5, 0, 0, 0, 1};
    char path[512];

    scratch_path(path, sizeof path, "ndim0.idx");
    write_plain(path, zero, sizeof zero);
    expect_error(path, "0 dimensions, expected 1 to 4");
    write_plain(path, five, sizeof five);
    expect_error(path, "5 dimensions, expected 1 to 4");
    unlink(path);
}
END_TEST

START_TEST(test_truncated_data)
{
    const uint32_t dims[3] = {3, 2, 4};
    unsigned char data[24] = {0};
    char path[512];
    size_t n = make_idx(g_file, 3, dims, data, 10); /* 10 of 24 bytes */

    scratch_path(path, sizeof path, "short.idx");
    write_plain(path, g_file, n);
    expect_error(path, "truncated: header says 24 bytes of data, found 10");
    unlink(path);

    scratch_path(path, sizeof path, "short.idx.gz");
    write_gz(path, g_file, n);
    expect_error(path, "truncated: header says 24 bytes of data, found 10");
    unlink(path);
}
END_TEST

/* A gzip stream cut short (a partial download) is also "truncated". */
START_TEST(test_truncated_gzip_stream)
{
    const uint32_t dims[2] = {64, 16};
    unsigned char data[1024];
    char path[512];
    struct stat st;
    size_t n;

    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)((i * 2654435761u) >> 13); /* incompressible */
    n = make_idx(g_file, 2, dims, data, sizeof data);
    scratch_path(path, sizeof path, "cut.idx.gz");
    write_gz(path, g_file, n);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size / 2), 0);
    expect_error(path, "truncated");
    unlink(path);
}
END_TEST

/* Damage inside the deflate stream is a gzip error, reported as such. */
START_TEST(test_corrupt_gzip)
{
    const uint32_t dims[2] = {64, 16};
    unsigned char data[1024];
    char path[512];
    FILE *f;
    size_t n;

    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)((i * 2654435761u) >> 13);
    n = make_idx(g_file, 2, dims, data, sizeof data);
    scratch_path(path, sizeof path, "corrupt.idx.gz");
    write_gz(path, g_file, n);
    f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 20, SEEK_SET), 0);
    for (int i = 0; i < 64; i++)
        fputc(0xff, f);
    ck_assert_int_eq(fclose(f), 0);
    expect_error(path, "corrupt gzip data");
    unlink(path);
}
END_TEST

START_TEST(test_truncated_header)
{
    const unsigned char dims_cut[] = {0, 0, 8, 3, 0, 0, 0, 3, 0};
    const unsigned char magic_cut[] = {0, 0};
    char path[512];

    scratch_path(path, sizeof path, "hdr.idx");
    write_plain(path, dims_cut, sizeof dims_cut);
    expect_error(path, "truncated: IDX header needs 12 bytes for 3 dimensions, found 5");
    write_plain(path, magic_cut, sizeof magic_cut);
    expect_error(path, "truncated");
    write_plain(path, magic_cut, 0);
    expect_error(path, "truncated: the file is empty");
    unlink(path);
}
END_TEST

START_TEST(test_trailing_data)
{
    const unsigned char file[] = {0, 0, 8, 1, 0, 0, 0, 2, 7, 8, 9};
    char path[512];

    scratch_path(path, sizeof path, "long.idx");
    write_plain(path, file, sizeof file);
    expect_error(path, "header says 2 bytes of data but the file is longer");
    unlink(path);
}
END_TEST

START_TEST(test_missing_file)
{
    char path[512];

    scratch_path(path, sizeof path, "does-not-exist.idx");
    unlink(path);
    expect_error(path, "cannot open: No such file or directory");
}
END_TEST

START_TEST(test_directory)
{
    const char *dir = getenv("TEST_TMP");
    char path[512];

    scratch_path(path, sizeof path, "x"); /* creates the directory */
    snprintf(path, sizeof path, "%s", dir && dir[0] ? dir : "/tmp");
    expect_error(path, "is a directory");
}
END_TEST

static Suite *idx_suite(void)
{
    Suite *s = suite_create("idx");
    TCase *good = tcase_create("good");
    TCase *bad = tcase_create("bad");

    tcase_add_test(good, test_plain_3d);
    tcase_add_test(good, test_gzip_1d);
    tcase_add_test(good, test_big_endian_dims);
    suite_add_tcase(s, good);

    tcase_add_test(bad, test_bad_magic);
    tcase_add_test(bad, test_unsupported_type);
    tcase_add_test(bad, test_bad_ndim);
    tcase_add_test(bad, test_truncated_data);
    tcase_add_test(bad, test_truncated_gzip_stream);
    tcase_add_test(bad, test_corrupt_gzip);
    tcase_add_test(bad, test_truncated_header);
    tcase_add_test(bad, test_trailing_data);
    tcase_add_test(bad, test_missing_file);
    tcase_add_test(bad, test_directory);
    suite_add_tcase(s, bad);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(idx_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

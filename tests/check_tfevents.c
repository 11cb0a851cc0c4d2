/* check_tfevents.c: unit tests for the TensorBoard event writer
 * (src/metrics/tfevents.c).
 *
 * The CRC is checked against published CRC-32C vectors (RFC 3720 B.4 and the
 * usual "123456789") and the mask against the first 12 bytes of every event
 * file TensorFlow writes; the writer by reading its file back with the
 * decoder, field by field and bit for bit. Scratch files go to $TEST_TMP
 * (else /tmp). That TensorBoard itself reads the files is checked by
 * tests/interop/tb_read.py. */
#include "config.h"

#include "ck_fast.h"
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "metrics/tfevents.h"
#include "runtime/status.h"

/* A scratch path unique to this process (Check forks one per test). */
static void scratch_path(char *buf, size_t len, const char *name)
{
    const char *dir = getenv("TEST_TMP");
    if (dir == NULL || dir[0] == '\0') dir = "/tmp";
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        ck_abort_msg("cannot create TEST_TMP=%s: %s", dir, strerror(errno));
    snprintf(buf, len, "%s/check_tfevents-%ld-%s", dir, (long)getpid(), name);
}

/* The one events file in dir (its name into name); the test fails unless
 * there is exactly one. Returns its bytes (malloc'd), size in *len. */
static unsigned char *read_events(const char *dir, char *name, size_t namelen, size_t *len)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "opendir %s: %s", dir, strerror(errno));
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        snprintf(name, namelen, "%s", e->d_name);
        found++;
    }
    closedir(d);
    ck_assert_int_eq(found, 1);

    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    unsigned char *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

START_TEST(crc32c_vectors)
{
    unsigned char b[32];
    ck_assert_uint_eq(dt_crc32c("", 0), 0);
    memset(b, 0, sizeof b);
    ck_assert_uint_eq(dt_crc32c(b, sizeof b), 0x8a9136aau);
    memset(b, 0xff, sizeof b);
    ck_assert_uint_eq(dt_crc32c(b, sizeof b), 0x62a8ab43u);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    ck_assert_uint_eq(dt_crc32c(b, sizeof b), 0x46dd794eu);
    ck_assert_uint_eq(dt_crc32c("123456789", 9), 0xe3069283u);
}
END_TEST

START_TEST(crc32c_mask)
{
    ck_assert_uint_eq(dt_crc32c_mask(0), 0xa282ead8u);
    /* rotr(0xe3069283, 15) = 0x25071e0d; + 0xa282ead8 = 0xc78ab0e5 */
    ck_assert_uint_eq(dt_crc32c_mask(0xe3069283u), 0xc78ab0e5u);
    /* TensorFlow's own files start "18 00 00 00 00 00 00 00 a3 7f 4b 22": a
     * 24-byte version Event and the masked CRC of those 8 length bytes. */
    const unsigned char len24[8] = {0x18, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_uint_eq(dt_crc32c_mask(dt_crc32c(len24, 8)), 0x224b7fa3u);
}
END_TEST

static const char long_tag[] =
    "a/tag/longer/than/one/hundred/and/twenty/seven/bytes/so/that/its/length/takes/"
    "two/varint/bytes/and/the/value/and/summary/lengths/do/too/0123456789abcdef";

START_TEST(write_read_back)
{
    char dir[512], name[512];
    dt_status st = {0};
    scratch_path(dir, sizeof dir, "logs/train");   /* parents made too */
    const char *tags[3] = {"loss", "accuracy", long_tag};
    const float values[3] = {2.3025851f, 0.1f, -1.5e-7f};
    const int64_t steps[3] = {0, (int64_t)1 << 40, -3};   /* 0 left out, 6 and 10 varint bytes */
    const double walls[3] = {1700000000.25, 1700000001.5, 1700000002.125};

    /* The writer stamps the version Event with CLOCK_REALTIME; time(2) reads
     * a coarser clock that was seen a second off it (a CI run: before/after
     * from time(NULL) did not bracket the stamp), so bracket it with the
     * writer's own clock, with a second's slack for a VM's clock steps. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double before = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - 1.0;
    struct dt_tfevents *w = dt_tfevents_open(dir, &st);
    clock_gettime(CLOCK_REALTIME, &ts);
    double after = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    ck_assert_msg(w != NULL, "%s", st.msg);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(dt_tfevents_scalar(w, tags[i], values[i], steps[i], walls[i], &st), DT_OK);
    ck_assert_int_eq(dt_tfevents_flush(w, &st), DT_OK);
    dt_tfevents_close(w);

    size_t len;
    unsigned char *buf = read_events(dir, name, sizeof name, &len);
    char want[64];
    snprintf(want, sizeof want, ".%ld.", (long)getpid());
    ck_assert_msg(strstr(name, want) != NULL, "%s lacks the pid", name);
    ck_assert_str_eq(name + strlen(name) - 3, ".v2");

    double wall;
    int64_t step;
    char tag[256], fv[64];
    float value;
    /* The version Event is TensorFlow's to the byte: same header as its files. */
    const unsigned char tf_header[12] = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22};
    ck_assert(len >= 12 && memcmp(buf, tf_header, 12) == 0);
    long off = dt_tfevents_decode(buf, len, &wall, &step, tag, sizeof tag, &value, fv, sizeof fv);
    ck_assert_int_eq(off, 12 + 24 + 4);
    ck_assert_str_eq(fv, "brain.Event:2");
    ck_assert_str_eq(tag, "");
    ck_assert_int_eq(step, 0);
    ck_assert_msg(wall >= before && wall <= after + 1.0, "wall_time %f, expected %f to %f", wall, before, after + 1.0);

    size_t pos = (size_t)off;
    for (int i = 0; i < 3; i++) {
        off = dt_tfevents_decode(buf + pos, len - pos, &wall, &step, tag, sizeof tag, &value, fv, sizeof fv);
        ck_assert_int_gt(off, 0);
        ck_assert_str_eq(fv, "");
        ck_assert_str_eq(tag, tags[i]);
        ck_assert_int_eq(step, steps[i]);
        ck_assert(wall == walls[i]);
        ck_assert(memcmp(&value, &values[i], sizeof value) == 0);
        pos += (size_t)off;
    }
    ck_assert_int_eq(dt_tfevents_decode(buf + pos, len - pos, NULL, NULL, NULL, 0, NULL, NULL, 0), 0);
    ck_assert_uint_eq(pos, len);
    free(buf);
}
END_TEST

/* Every single flipped byte of a record (length, either CRC, data) is caught,
 * and so is a record cut short. */
START_TEST(corrupt_refused)
{
    char dir[512], name[512];
    dt_status st = {0};
    scratch_path(dir, sizeof dir, "corrupt");
    struct dt_tfevents *w = dt_tfevents_open(dir, &st);
    ck_assert_msg(w != NULL, "%s", st.msg);
    ck_assert_int_eq(dt_tfevents_scalar(w, "loss", 0.5f, 7, 1.0, &st), DT_OK);
    dt_tfevents_close(w);

    size_t len;
    unsigned char *buf = read_events(dir, name, sizeof name, &len);
    long first = dt_tfevents_decode(buf, len, NULL, NULL, NULL, 0, NULL, NULL, 0);
    ck_assert_int_gt(first, 0);
    unsigned char *rec = buf + first;
    size_t n = len - (size_t)first;
    ck_assert_int_eq(dt_tfevents_decode(rec, n, NULL, NULL, NULL, 0, NULL, NULL, 0), (long)n);
    for (size_t i = 0; i < n; i++) {
        rec[i] ^= 0x20;
        ck_assert_msg(dt_tfevents_decode(rec, n, NULL, NULL, NULL, 0, NULL, NULL, 0) == -1,
                      "flipped byte %zu of %zu accepted", i, n);
        rec[i] ^= 0x20;
    }
    ck_assert_int_eq(dt_tfevents_decode(rec, n - 1, NULL, NULL, NULL, 0, NULL, NULL, 0), -1);
    ck_assert_int_eq(dt_tfevents_decode(rec, 11, NULL, NULL, NULL, 0, NULL, NULL, 0), -1);
    free(buf);
}
END_TEST

/* train/ and validation/ writers opened in the same second by one process:
 * two files, not one clobbered. Two in one directory: two files as well. */
START_TEST(two_writers)
{
    char dir[512];
    dt_status st = {0};
    scratch_path(dir, sizeof dir, "two");
    struct dt_tfevents *a = dt_tfevents_open(dir, &st);
    struct dt_tfevents *b = dt_tfevents_open(dir, &st);
    ck_assert_msg(a != NULL && b != NULL, "%s", st.msg);
    dt_tfevents_close(a);
    dt_tfevents_close(b);
    DIR *d = opendir(dir);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) files += strncmp(e->d_name, "events.out.tfevents.", 20) == 0;
    closedir(d);
    ck_assert_int_eq(files, 2);
}
END_TEST

START_TEST(unwritable_dir)
{
    char file[512], dir[600];
    dt_status st = {0};
    scratch_path(file, sizeof file, "plain-file");
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);

    snprintf(dir, sizeof dir, "%s/train", file);
    ck_assert_ptr_null(dt_tfevents_open(dir, &st));
    ck_assert_int_eq(st.code, DT_ERUNTIME);
    ck_assert_msg(strstr(st.msg, file) && strstr(st.msg, "not a directory"), "message: %s", st.msg);

    st = (dt_status){0};
    ck_assert_ptr_null(dt_tfevents_open(file, &st));
    ck_assert_msg(strstr(st.msg, file) && strstr(st.msg, "not a directory"), "message: %s", st.msg);

    st = (dt_status){0};
    ck_assert_ptr_null(dt_tfevents_open("", &st));
    ck_assert_int_eq(st.code, DT_ERUNTIME);
    unlink(file);
}
END_TEST

static Suite *tfevents_suite(void)
{
    Suite *s = suite_create("tfevents");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, crc32c_vectors);
    tcase_add_test(tc, crc32c_mask);
    tcase_add_test(tc, write_read_back);
    tcase_add_test(tc, corrupt_refused);
    tcase_add_test(tc, two_writers);
    tcase_add_test(tc, unwritable_dir);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tfevents_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

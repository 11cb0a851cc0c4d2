/* check_augment.c: unit tests for random flip and crop (src/data/augment.c),
 * against results worked out by hand on small images. */
#include "config.h"

#include "ck_fast.h"
#include <string.h>

#include "data/augment.h"

/* A 3x4 image with 2 channels: value = 10*y + x (+100 for channel 1). */
static void fill(uint8_t *img)
{
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) {
            img[(y * 4 + x) * 2] = (uint8_t)(10 * y + x);
            img[(y * 4 + x) * 2 + 1] = (uint8_t)(100 + 10 * y + x);
        }
}

START_TEST(flip_and_shift)
{
    uint8_t img[24], scratch[24];
    fill(img);
    dt_augment_image(img, 3, 4, 2, 1, 0, 0, scratch); /* mirror only */
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) {
            ck_assert_int_eq(img[(y * 4 + x) * 2], 10 * y + (3 - x));
            ck_assert_int_eq(img[(y * 4 + x) * 2 + 1], 100 + 10 * y + (3 - x));
        }
    fill(img);
    dt_augment_image(img, 3, 4, 2, 0, 1, -1, scratch); /* out[y][x] = in[y+1][x-1], zero outside */
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) {
            int sy = y + 1, sx = x - 1, inside = sy < 3 && sx >= 0;
            ck_assert_int_eq(img[(y * 4 + x) * 2], inside ? 10 * sy + sx : 0);
            ck_assert_int_eq(img[(y * 4 + x) * 2 + 1], inside ? 100 + 10 * sy + sx : 0);
        }
    fill(img);
    dt_augment_image(img, 3, 4, 2, 0, 0, 0, scratch); /* identity */
    uint8_t ref[24];
    fill(ref);
    ck_assert_int_eq(memcmp(img, ref, sizeof img), 0);
}
END_TEST

START_TEST(draws)
{
    struct dt_augment a = {.flip = 1, .pad = 2};
    int flips = 0, seen[5][5] = {{0}};
    for (int64_t i = 0; i < 4000; i++) {
        int f, dy, dx, f2, dy2, dx2;
        dt_augment_draw(&a, 42, 3, i, &f, &dy, &dx);
        dt_augment_draw(&a, 42, 3, i, &f2, &dy2, &dx2);
        ck_assert(f == f2 && dy == dy2 && dx == dx2); /* a function of (seed, epoch, index) */
        ck_assert(dy >= -2 && dy <= 2 && dx >= -2 && dx <= 2);
        flips += f;
        seen[dy + 2][dx + 2]++;
    }
    ck_assert(flips > 1800 && flips < 2200);
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 5; x++) ck_assert(seen[y][x] > 100); /* every shift happens (mean 160) */
    int f1, dy1, dx1, f2, dy2, dx2, differ = 0;
    for (int64_t i = 0; i < 64; i++) { /* another epoch, other draws */
        dt_augment_draw(&a, 42, 3, i, &f1, &dy1, &dx1);
        dt_augment_draw(&a, 42, 4, i, &f2, &dy2, &dx2);
        differ += f1 != f2 || dy1 != dy2 || dx1 != dx2;
    }
    ck_assert(differ > 40);
    struct dt_augment off = {0, 0};
    dt_augment_draw(&off, 42, 3, 7, &f1, &dy1, &dx1);
    ck_assert(f1 == 0 && dy1 == 0 && dx1 == 0);
}
END_TEST

START_TEST(parse)
{
    struct dt_augment a;
    dt_status st = {0};
    ck_assert_int_eq(dt_augment_parse("flip", &a, &st), DT_OK);
    ck_assert(a.flip && !a.pad);
    ck_assert_int_eq(dt_augment_parse("crop", &a, &st), DT_OK);
    ck_assert(!a.flip && a.pad == 4);
    ck_assert_int_eq(dt_augment_parse("flip,crop:2", &a, &st), DT_OK);
    ck_assert(a.flip && a.pad == 2);
    const char *bad[] = {"", "rotate", "crop:0", "crop:x", "flip,", "crop:65"};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(dt_augment_parse(bad[i], &a, &st), DT_EUSAGE);
        ck_assert_ptr_nonnull(strstr(st.msg, "--augment: expected flip, crop or crop:PAD"));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("augment");
    TCase *tc = tcase_create("augment");
    tcase_add_test(tc, flip_and_shift);
    tcase_add_test(tc, draws);
    tcase_add_test(tc, parse);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

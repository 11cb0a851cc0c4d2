/* check_shard.c: the per-epoch data plan (src/data/shard.c).
 *
 * For every N, rank count 1-4 and batch size tried, and both policies: the
 * union over ranks of one epoch is every sample exactly once; every rank runs
 * the same number of steps; each step's global count is the sum of the
 * ranks' counts; and the data policy deals a global batch out in contiguous
 * parts (what makes np=1 with batch 2B equal np=2 with batch B). */
#include "config.h"

#include "ck_fast.h"
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"

/* Runs one epoch of the plan for all ranks; checks the invariants. */
static void check_epoch(int policy, int nranks, int batch, int nfiles, const int64_t *per_file, int shuffle)
{
    struct dt_shard_plan plans[4];
    memset(plans, 0, sizeof plans);
    int64_t total = 0;
    for (int f = 0; f < nfiles; f++) total += per_file[f];
    int *seen = calloc((size_t)total + 1, sizeof(int));
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)batch);
    for (int r = 0; r < nranks; r++) {
        dt_shard_init(&plans[r], policy, r, nranks, batch, nfiles, per_file);
        dt_shard_epoch(&plans[r], 1234, 3, shuffle);
        ck_assert_int_eq(plans[r].steps, plans[0].steps);
    }
    for (int64_t s = 0; s < plans[0].steps; s++) {
        int64_t sum = 0, global0 = -1;
        for (int r = 0; r < nranks; r++) {
            int64_t global;
            int n = dt_shard_step(&plans[r], s, idx, &global);
            ck_assert_int_ge(n, 0);
            ck_assert_int_le(n, batch);
            if (global0 < 0) global0 = global;
            ck_assert_int_eq(global, global0); /* every rank agrees on the step's size */
            sum += n;
            for (int i = 0; i < n; i++) {
                ck_assert_int_ge(idx[i], 0);
                ck_assert_int_lt(idx[i], total);
                seen[idx[i]]++;
                if (policy == DT_SHARD_FILE) { /* from a file this rank owns */
                    int64_t row;
                    int f = dt_shard_locate(plans[r].file_start, nfiles, idx[i], &row);
                    ck_assert_int_eq(f % nranks, r);
                    ck_assert_int_lt(row, per_file[f]);
                }
            }
        }
        ck_assert_int_eq(sum, global0);
    }
    for (int64_t g = 0; g < total; g++)
        ck_assert_msg(seen[g] == 1, "policy %d P=%d B=%d N=%lld: sample %lld used %d times", policy,
                      nranks, batch, (long long)total, (long long)g, seen[g]);
    for (int r = 0; r < nranks; r++) dt_shard_free(&plans[r]);
    free(seen);
    free(idx);
}

START_TEST(test_data_policy_every_sample_once)
{
    const int64_t sizes[] = {0, 1, 2, 3, 7, 63, 64, 65, 100, 1001};
    const int batches[] = {1, 4, 32};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int p = 1; p <= 4; p++)
            for (size_t b = 0; b < 3; b++)
                for (int shuffle = 0; shuffle < 2; shuffle++)
                    check_epoch(DT_SHARD_DATA, p, batches[b], 1, &sizes[i], shuffle);
}
END_TEST

START_TEST(test_data_policy_over_shard_files)
{
    const int64_t files[] = {10, 0, 7, 33};
    for (int p = 1; p <= 4; p++) check_epoch(DT_SHARD_DATA, p, 5, 4, files, 1);
}
END_TEST

START_TEST(test_file_policy_every_sample_once)
{
    const int64_t files[] = {10, 3, 7, 33, 1, 0, 12};
    for (int p = 1; p <= 4; p++)
        for (int b = 1; b <= 8; b += 7) check_epoch(DT_SHARD_FILE, p, b, 7, files, 1);
}
END_TEST

START_TEST(test_steps_and_remainder)
{
    /* N=100, P=3, B=8: global batch 24, 5 steps; the last has 4 samples,
     * dealt 2, 1, 1. */
    int64_t n = 100, idx[8], global;
    struct dt_shard_plan p;
    int want[3] = {2, 1, 1};
    for (int r = 0; r < 3; r++) {
        dt_shard_init(&p, DT_SHARD_DATA, r, 3, 8, 1, &n);
        dt_shard_epoch(&p, 1, 0, 0);
        ck_assert_int_eq(p.steps, 5);
        ck_assert_int_eq(dt_shard_step(&p, 0, idx, &global), 8);
        ck_assert_int_eq(global, 24);
        ck_assert_int_eq(idx[0], 8 * r); /* contiguous parts of the global batch */
        ck_assert_int_eq(dt_shard_step(&p, 4, idx, &global), want[r]);
        ck_assert_int_eq(global, 4);
        dt_shard_free(&p);
    }
}
END_TEST

START_TEST(test_np1_batch_2b_equals_np2_batch_b)
{
    /* The global batches are the same samples in the same order. */
    int64_t n = 1000, one[64], two[64], g1, g2;
    struct dt_shard_plan p1, p2a, p2b;
    dt_shard_init(&p1, DT_SHARD_DATA, 0, 1, 64, 1, &n);
    dt_shard_init(&p2a, DT_SHARD_DATA, 0, 2, 32, 1, &n);
    dt_shard_init(&p2b, DT_SHARD_DATA, 1, 2, 32, 1, &n);
    dt_shard_epoch(&p1, 9, 2, 1);
    dt_shard_epoch(&p2a, 9, 2, 1);
    dt_shard_epoch(&p2b, 9, 2, 1);
    ck_assert_int_eq(p1.steps, p2a.steps);
    for (int64_t s = 0; s < p1.steps; s++) {
        int a = dt_shard_step(&p1, s, one, &g1);
        int b = dt_shard_step(&p2a, s, two, &g2);
        int c = dt_shard_step(&p2b, s, two + b, &g2);
        ck_assert_int_eq(a, b + c);
        ck_assert_int_eq(g1, g2);
        ck_assert_mem_eq(one, two, sizeof(int64_t) * (size_t)a);
    }
    dt_shard_free(&p1);
    dt_shard_free(&p2a);
    dt_shard_free(&p2b);
}
END_TEST

START_TEST(test_shuffle_depends_on_seed_and_epoch)
{
    int64_t n = 500;
    struct dt_shard_plan a, b;
    dt_shard_init(&a, DT_SHARD_DATA, 0, 1, 10, 1, &n);
    dt_shard_init(&b, DT_SHARD_DATA, 0, 1, 10, 1, &n);
    dt_shard_epoch(&a, 1, 0, 1);
    dt_shard_epoch(&b, 1, 0, 1);
    ck_assert_mem_eq(a.order, b.order, sizeof(int64_t) * 500);
    dt_shard_epoch(&b, 1, 1, 1);
    ck_assert(memcmp(a.order, b.order, sizeof(int64_t) * 500) != 0);
    dt_shard_epoch(&b, 2, 0, 1);
    ck_assert(memcmp(a.order, b.order, sizeof(int64_t) * 500) != 0);
    dt_shard_free(&a);
    dt_shard_free(&b);
}
END_TEST

START_TEST(test_resolve_policy)
{
    ck_assert_int_eq(dt_shard_resolve(DT_SHARD_AUTO, 4, 4), DT_SHARD_FILE);
    ck_assert_int_eq(dt_shard_resolve(DT_SHARD_AUTO, 3, 4), DT_SHARD_DATA);
    ck_assert_int_eq(dt_shard_resolve(DT_SHARD_FILE, 3, 4), -1);
    ck_assert_int_eq(dt_shard_resolve(DT_SHARD_DATA, 8, 2), DT_SHARD_DATA);
}
END_TEST

START_TEST(test_locate)
{
    const int64_t start[] = {0, 3, 3, 5}; /* files of 3, 0 and 2 samples */
    int64_t row;
    ck_assert_int_eq(dt_shard_locate(start, 3, 0, &row), 0);
    ck_assert_int_eq(row, 0);
    ck_assert_int_eq(dt_shard_locate(start, 3, 2, &row), 0);
    ck_assert_int_eq(row, 2);
    ck_assert_int_eq(dt_shard_locate(start, 3, 3, &row), 2); /* skips the empty file */
    ck_assert_int_eq(row, 0);
    ck_assert_int_eq(dt_shard_locate(start, 3, 4, &row), 2);
    ck_assert_int_eq(row, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, test_data_policy_every_sample_once);
    tcase_add_test(tc, test_data_policy_over_shard_files);
    tcase_add_test(tc, test_file_policy_every_sample_once);
    tcase_add_test(tc, test_steps_and_remainder);
    tcase_add_test(tc, test_np1_batch_2b_equals_np2_batch_b);
    tcase_add_test(tc, test_shuffle_depends_on_seed_and_epoch);
    tcase_add_test(tc, test_resolve_policy);
    tcase_add_test(tc, test_locate);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

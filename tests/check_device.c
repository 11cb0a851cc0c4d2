/* check_device.c: unit tests for the choice of a rank's GPU (src/runtime/device.c).
 *
 * dt_device_assign is pure: which visible device a node-local rank takes,
 * or why it cannot have one. These cases are the layouts users start:
 * mpirun with every GPU visible, --gpus-per-node below that, Slurm binding
 * one GPU per task, and too many ranks for the node's GPUs. */
#include "config.h"

#include "ck_fast.h"
#include <string.h>

#include "runtime/device.h"

static char why[256];

START_TEST(all_visible)
{
    for (int lr = 0; lr < 4; lr++) ck_assert_int_eq(dt_device_assign(lr, 4, 4, 0, 0, why, sizeof why), lr);
    /* fewer ranks than GPUs: the first ones are used */
    ck_assert_int_eq(dt_device_assign(1, 2, 8, 0, 0, why, sizeof why), 1);
}
END_TEST

START_TEST(gpus_per_node_caps)
{
    ck_assert_int_eq(dt_device_assign(1, 2, 4, 2, 0, why, sizeof why), 1);
    ck_assert_int_eq(dt_device_assign(2, 3, 4, 2, 0, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "3 ranks on this node but 2 GPUs"));
    ck_assert_int_eq(dt_device_assign(0, 1, 2, 4, 0, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "--gpus-per-node 4: this node shows only 2 devices"));
}
END_TEST

START_TEST(too_many_ranks)
{
    ck_assert_int_eq(dt_device_assign(0, 4, 2, 0, 0, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "4 ranks on this node but 2 GPUs"));
    ck_assert_ptr_nonnull(strstr(why, "one rank per GPU"));
    /* one visible GPU shared by two ranks that are not bound: refused */
    ck_assert_int_eq(dt_device_assign(1, 2, 1, 0, 0, why, sizeof why), -1);
}
END_TEST

START_TEST(bound_per_task)
{
    /* srun --gpus-per-task=1: every rank sees one, different, device 0 */
    for (int lr = 0; lr < 4; lr++) ck_assert_int_eq(dt_device_assign(lr, 4, 1, 0, 1, why, sizeof why), 0);
}
END_TEST

START_TEST(none_visible)
{
    ck_assert_int_eq(dt_device_assign(0, 1, 0, 0, 0, why, sizeof why), -1);
    ck_assert_str_eq(why, "no CUDA device is visible");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("assign");
    tcase_add_test(tc, all_visible);
    tcase_add_test(tc, gpus_per_node_caps);
    tcase_add_test(tc, too_many_ranks);
    tcase_add_test(tc, bound_per_task);
    tcase_add_test(tc, none_visible);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

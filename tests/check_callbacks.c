/* check_callbacks.c: unit tests for the EarlyStopping / save-best decisions
 * (src/train/callbacks.c), against Keras 3's rules worked out by hand here. */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <signal.h>

#include "train/callbacks.h"

START_TEST(loss_improves_then_stalls)
{
    struct dt_monitor m;
    dt_monitor_init(&m, "val_loss", 2, 0.0);
    ck_assert_int_eq(dt_monitor_update(&m, 0, 0.50), 1);
    ck_assert_int_eq(dt_monitor_update(&m, 1, 0.40), 1);
    ck_assert_int_eq(dt_monitor_update(&m, 2, 0.45), 0); /* wait 1 */
    ck_assert_int_eq(m.stopped_epoch, -1);
    ck_assert_int_eq(dt_monitor_update(&m, 3, 0.40), 0); /* equal is no improvement: wait 2 -> stop */
    ck_assert_int_eq(m.stopped_epoch, 3);
    ck_assert_int_eq(m.best_epoch, 1);
    ck_assert(m.best == 0.40);
}
END_TEST

START_TEST(min_delta)
{
    struct dt_monitor m;
    dt_monitor_init(&m, "val_loss", 1, 0.05);
    ck_assert_int_eq(dt_monitor_update(&m, 0, 1.00), 1);
    ck_assert_int_eq(dt_monitor_update(&m, 1, 0.96), 0); /* better by 0.04 < 0.05 */
    ck_assert_int_eq(m.stopped_epoch, 1);
    ck_assert_int_eq(m.best_epoch, 0);
    dt_monitor_init(&m, "val_loss", 1, 0.05);
    dt_monitor_update(&m, 0, 1.00);
    ck_assert_int_eq(dt_monitor_update(&m, 1, 0.94), 1);
    ck_assert_int_eq(m.stopped_epoch, -1);
}
END_TEST

START_TEST(accuracy_maximizes)
{
    struct dt_monitor m;
    dt_monitor_init(&m, "val_accuracy", 1, 0.0);
    ck_assert(m.maximize);
    ck_assert_int_eq(dt_monitor_update(&m, 0, 0.80), 1);
    ck_assert_int_eq(dt_monitor_update(&m, 1, 0.85), 1);
    ck_assert_int_eq(dt_monitor_update(&m, 2, 0.84), 0);
    ck_assert_int_eq(m.stopped_epoch, 2);
    ck_assert_int_eq(m.best_epoch, 1);
}
END_TEST

START_TEST(patience_zero_and_first_epoch)
{
    struct dt_monitor m;
    dt_monitor_init(&m, "loss", 0, 0.0);
    ck_assert_int_eq(dt_monitor_update(&m, 0, NAN), 0); /* NaN never improves; never stop after epoch 0 */
    ck_assert_int_eq(m.stopped_epoch, -1);
    ck_assert_int_eq(m.best_epoch, -1);
    ck_assert_int_eq(dt_monitor_update(&m, 1, 2.0), 1);
    ck_assert_int_eq(dt_monitor_update(&m, 2, 2.5), 0);
    ck_assert_int_eq(m.stopped_epoch, 2);
}
END_TEST

START_TEST(no_early_stopping)
{
    struct dt_monitor m;
    dt_monitor_init(&m, "val_loss", -1, 0.0);
    dt_monitor_update(&m, 0, 1.0);
    for (int e = 1; e < 50; e++) ck_assert_int_eq(dt_monitor_update(&m, e, 2.0), 0);
    ck_assert_int_eq(m.stopped_epoch, -1);
    ck_assert_int_eq(m.wait, 49);
}
END_TEST

START_TEST(signals_flag)
{
    dt_signals_install();
    ck_assert_int_eq(dt_signals_pending(), 0);
    raise(SIGUSR1); /* handled: the process goes on */
    ck_assert_int_eq(dt_signals_pending(), SIGUSR1);
    raise(SIGTERM);
    ck_assert_int_eq(dt_signals_pending(), SIGTERM);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("callbacks");
    TCase *tc = tcase_create("monitor");
    tcase_add_test(tc, loss_improves_then_stalls);
    tcase_add_test(tc, min_delta);
    tcase_add_test(tc, accuracy_maximizes);
    tcase_add_test(tc, patience_zero_and_first_epoch);
    tcase_add_test(tc, no_early_stopping);
    tcase_add_test(tc, signals_flag);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/* ck_fast.h: <check.h> with assertions that cost nothing when they hold.
 *
 * Check's ck_assert_msg (and every ck_assert_* built on it) records a "mark
 * point" on success: one write(2) to the runner's message file per passing
 * assertion, so the runner can name the last line reached if the test dies
 * of a signal. The exhaustive tests (every fp16 and bf16 pattern, every
 * element of a layer's output against its naive reference) pass millions of
 * assertions: check_act16 made 1.6 million writes, check_layers 0.76
 * million, and under Valgrind and AddressSanitizer those calls were most of
 * each program's time (check_act16: 2.4 s native, 172 s under Memcheck).
 *
 * Here a passing assertion does nothing; a failing one reports its file,
 * line, expression and message exactly as Check's does (the same
 * _ck_assert_failed). What is given up: the "last checkpoint" location
 * Check prints for a test that crashes; the test's name is still printed,
 * and the crash itself is found with the debugger or Valgrind stage.
 *
 * Every test program includes this instead of <check.h>. */
#ifndef DT_CK_FAST_H
#define DT_CK_FAST_H

#include <check.h>

#undef ck_assert_msg
#define ck_assert_msg(expr, ...) \
    ((expr) ? (void)0 : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

#endif

/* check_timeline.c: the per-rank timeline (metrics/timeline.h), at 2 ranks.
 *
 * MPI is initialised once and Check runs in no-fork mode, so every test is
 * collective; assertions come after the collective calls, on verdicts every
 * rank shares. Rank 0 has the written trace parsed by Python's json module
 * (a real parser, not ours) and checked:
 * - span counts per rank, logical thread and name, recorded from the main
 *   thread and two pthreads at once (more than one chunk, more than one
 *   piece of JSON on its way to rank 0);
 * - ts and dur non-negative and in microseconds (a 2 ms sleep lasts ~2000);
 *   a span begun before the start clamps to the origin;
 * - the metadata: process and thread names, dropped_spans;
 * - a name and args holding quotes, backslashes and control characters;
 * - past the cap, spans are dropped and counted, never more kept;
 * - a path that cannot be written fails the start on every rank, and a write
 *   that fails at the end fails the finish on every rank, leaving nothing.
 * It also prints what a span costs, on and off (not asserted). */
#include "config.h"

#include "ck_fast.h"
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mpi_check.h"
#include "metrics/timeline.h"

static int rank, nranks;
static char dir[512];

enum { NCOMP = 300, NCOMM = 50000, NDATA = 5 }; /* NCOMM: over 4 MiB of JSON a rank */

#define TRICKY_NAME "tricky \"quoted\" \\ name"
#define TRICKY_ARGS "a \"quote\", a \\ backslash,\n a newline\tand a tab"

/* The checker: mode "full" or "cap". Exit 0 when the trace is right. */
static const char *checker =
    "import json, sys, re\n"
    "from collections import Counter\n"
    "mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
    "d = json.load(open(path, encoding='utf-8'))\n"
    "assert d['displayTimeUnit'] == 'ms', d.get('displayTimeUnit')\n"
    "ev = d['traceEvents']\n"
    "X = [e for e in ev if e['ph'] == 'X']\n"
    "M = [e for e in ev if e['ph'] == 'M']\n"
    "assert len(X) + len(M) == len(ev), 'only X and M events'\n"
    "assert sorted({e['pid'] for e in ev}) == list(range(n)), 'one pid per rank'\n"
    "meta = {(e['pid'], e.get('tid'), e['name']): e['args'] for e in M}\n"
    "for r in range(n):\n"
    "    p = meta[(r, None, 'process_name')]\n"
    "    assert p['name'].startswith('rank %d (' % r) and p['name'].endswith(')'), p\n"
    "    for t, name in enumerate(['compute', 'communication', 'data']):\n"
    "        assert meta[(r, t, 'thread_name')]['name'] == name, (r, t)\n"
    "for e in X:\n"
    "    assert isinstance(e['ts'], (int, float)) and isinstance(e['dur'], (int, float)), e\n"
    "    assert 0 <= e['ts'] < 600e6 and 0 <= e['dur'] < 600e6, e\n"
    "c = Counter((e['pid'], e['tid'], e['name']) for e in X)\n"
    "if mode == 'full':\n"
    "    ncomp, ncomm, ndata = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])\n"
    "    tricky, targs = sys.argv[7], sys.argv[8]\n"
    "    want = Counter()\n"
    "    for r in range(n):\n"
    "        want[(r, 0, 'forward conv2d_1')] = ncomp + r\n"
    "        want[(r, 0, tricky)] = 1\n"
    "        want[(r, 0, 'sleep 2 ms')] = 1\n"
    "        want[(r, 0, 'early')] = 1\n"
    "        want[(r, 1, 'all-reduce')] = ncomm + 1000 * r\n"
    "        want[(r, 2, 'read batch')] = ndata\n"
    "        assert meta[(r, None, 'process_name')]['dropped_spans'] == 0\n"
    "    assert c == want, sorted(set(c.items()) ^ set(want.items()))\n"
    "    for e in X:\n"
    "        if e['name'] == 'sleep 2 ms': assert 1900 <= e['dur'] < 1e6, e\n"
    "        if e['name'] == 'early': assert e['ts'] == 0, e\n"
    "        if e['name'] == tricky: assert e['args']['text'] == targs, e\n"
    "        if e['name'] == 'all-reduce':\n"
    "            assert re.fullmatch(r'bucket \\d+, \\d+ floats', e['args']['text']), e\n"
    "        if e['name'] in ('forward conv2d_1', 'read batch'): assert 'args' not in e, e\n"
    "else:\n"
    "    cap, offered = int(sys.argv[4]), int(sys.argv[5])\n"
    "    for r in range(n):\n"
    "        kept = sum(v for k, v in c.items() if k[0] == r)\n"
    "        dropped = meta[(r, None, 'process_name')]['dropped_spans']\n"
    "        assert kept <= cap and dropped > 0 and kept + dropped == offered, (r, kept, dropped)\n"
    "        assert 'dropped' in meta[(r, None, 'process_labels')]['labels']\n"
    "print('# trace ok: %d spans, %d metadata events' % (len(X), len(M)))\n";

/* Rank 0 runs the checker on path (mode and extra arguments as shell words);
 * every rank gets its verdict. */
static int check_trace(const char *path, const char *mode, const char *args)
{
    int ok = 0;
    if (rank == 0) {
        char script[600], cmd[2048];
        snprintf(script, sizeof script, "%s/check_trace.py", dir);
        FILE *f = fopen(script, "w");
        if (f) {
            fputs(checker, f);
            fclose(f);
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %s '%s' %d %s", script, mode, path, nranks, args);
            ok = system(cmd) == 0;
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok;
}

static int exists_on_rank0(const char *path)
{
    int yes = rank == 0 && access(path, F_OK) == 0;
    MPI_Bcast(&yes, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return yes;
}

static void *comm_worker(void *arg)
{
    int n = *(const int *)arg;
    for (int b = 0; b < n; b++) {
        DT_TL_BEGIN(t0);
        DT_TL_ENDF(t0, DT_TL_COMM, "all-reduce", "bucket %d, %d floats", b % 7, 1000 * (b % 7) + 10);
    }
    return NULL;
}

static void *data_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < NDATA; i++) {
        DT_TL_BEGIN(t0);
        DT_TL_END(t0, DT_TL_DATA, "read batch", NULL);
    }
    return NULL;
}

START_TEST(test_trace_contents)
{
    char path[600];
    dt_status st = {0};
    snprintf(path, sizeof path, "%s/trace.json", dir);
    DT_TL_BEGIN(early); /* off: 0.0, clamped to the origin */
    ck_assert_ptr_null(dt_timeline);
    ck_assert_int_eq(dt_timeline_start(MPI_COMM_WORLD, path, &st), DT_OK);
    ck_assert_ptr_nonnull(dt_timeline);

    int ncomm = NCOMM + 1000 * rank;
    pthread_t comm, data;
    ck_assert_int_eq(pthread_create(&comm, NULL, comm_worker, &ncomm), 0);
    ck_assert_int_eq(pthread_create(&data, NULL, data_worker, NULL), 0);
    char layer[32] = "conv2d_1"; /* a name that dies with its owner: copied */
    for (int i = 0; i < NCOMP + rank; i++) {
        DT_TL_BEGIN(t0);
        DT_TL_END2(t0, DT_TL_COMPUTE, "forward", layer, NULL);
    }
    DT_TL_BEGIN(t1);
    DT_TL_END(t1, DT_TL_COMPUTE, TRICKY_NAME, TRICKY_ARGS);
    DT_TL_BEGIN(t2);
    nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
    DT_TL_END(t2, DT_TL_COMPUTE, "sleep 2 ms", NULL);
    DT_TL_END(early, DT_TL_COMPUTE, "early", NULL);
    pthread_join(comm, NULL);
    pthread_join(data, NULL);
    strcpy(layer, "gone"); /* the copy must not see this */

    ck_assert_int_eq(dt_timeline_finish(MPI_COMM_WORLD, &st), DT_OK);
    ck_assert_ptr_null(dt_timeline);
    char tmp[640];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert(!exists_on_rank0(tmp));
    char args[256];
    snprintf(args, sizeof args, "%d %d %d '%s' '%s'", NCOMP, NCOMM, NDATA, TRICKY_NAME, TRICKY_ARGS);
    ck_assert_msg(check_trace(path, "full", args), "the trace failed the checker (its output above)");
}
END_TEST

START_TEST(test_cap_drops_and_counts)
{
    char path[600];
    dt_status st = {0};
    snprintf(path, sizeof path, "%s/capped.json", dir);
    setenv("DTRAIN_TEST_TIMELINE_CAP", "16384", 1); /* one chunk */
    int rc = dt_timeline_start(MPI_COMM_WORLD, path, &st);
    unsetenv("DTRAIN_TEST_TIMELINE_CAP");
    ck_assert_int_eq(rc, DT_OK);
    int n = 12000; /* two threads, 24000 offered: one chunk's worth at most kept */
    pthread_t comm;
    ck_assert_int_eq(pthread_create(&comm, NULL, comm_worker, &n), 0);
    for (int i = 0; i < n; i++) {
        DT_TL_BEGIN(t0);
        DT_TL_END(t0, DT_TL_COMPUTE, "step", NULL);
    }
    pthread_join(comm, NULL);
    ck_assert_int_eq(dt_timeline_finish(MPI_COMM_WORLD, &st), DT_OK);
    ck_assert_msg(check_trace(path, "cap", "16384 24000"), "the capped trace failed the checker");
}
END_TEST

START_TEST(test_unwritable_path_fails_start)
{
    char path[600];
    dt_status st = {0};
    snprintf(path, sizeof path, "%s/no/such/dir/trace.json", dir);
    ck_assert_int_eq(dt_timeline_start(MPI_COMM_WORLD, path, &st), DT_EUSAGE);
    ck_assert_ptr_null(dt_timeline);
    ck_assert_msg(strstr(st.msg, path) != NULL, "message names the file: %s", st.msg);
}
END_TEST

START_TEST(test_write_error_fails_finish)
{
    char sub[600], path[700], tmp[720];
    dt_status st = {0};
    snprintf(sub, sizeof sub, "%s/vanishing", dir);
    snprintf(path, sizeof path, "%s/trace.json", sub);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int made = rank != 0 || mkdir(sub, 0755) == 0;
    MPI_Barrier(MPI_COMM_WORLD);
    int started = dt_timeline_start(MPI_COMM_WORLD, path, &st);
    DT_TL_BEGIN(t0);
    DT_TL_END(t0, DT_TL_COMPUTE, "lost", NULL);
    int gone = rank != 0 || rmdir(sub) == 0; /* the file cannot be created now */
    int finished = started == DT_OK ? dt_timeline_finish(MPI_COMM_WORLD, &st) : -1;
    ck_assert(made && gone);
    ck_assert_int_eq(started, DT_OK);
    ck_assert_int_eq(finished, DT_ERUNTIME);
    ck_assert_ptr_null(dt_timeline);
    ck_assert_msg(strstr(st.msg, path) != NULL, "message names the file: %s", st.msg);
    ck_assert(!exists_on_rank0(path) && !exists_on_rank0(tmp));
}
END_TEST

/* ns per call, over reps rounds of n calls, the fastest round. */
static double best_ns(double *rounds, int reps, int n)
{
    double best = rounds[0];
    for (int i = 1; i < reps; i++)
        if (rounds[i] < best) best = rounds[i];
    return 1e9 * best / n;
}

START_TEST(test_overhead)
{
    enum { N = 20000, REPS = 5 };
    double off[REPS], on[REPS], on_args[REPS], on_pair[REPS], now[REPS];
    char path[600];
    dt_status st = {0};
    volatile double sink = 0.0;
    snprintf(path, sizeof path, "%s/bench.json", dir);
    for (int r = 0; r < REPS; r++) { /* off: the branch alone (the asm keeps the load in the loop) */
        double t = dt_tl_now();
        for (int i = 0; i < N; i++) {
            __asm__ volatile("" ::: "memory");
            DT_TL_BEGIN(t0);
            DT_TL_END(t0, DT_TL_COMPUTE, "off", NULL);
        }
        off[r] = dt_tl_now() - t;
        t = dt_tl_now();
        for (int i = 0; i < N; i++) sink += dt_tl_now();
        now[r] = dt_tl_now() - t;
    }
    ck_assert_int_eq(dt_timeline_start(MPI_COMM_WORLD, path, &st), DT_OK);
    char layer[32] = "dense_1";
    for (int r = 0; r < REPS; r++) {
        double t = dt_tl_now();
        for (int i = 0; i < N; i++) {
            DT_TL_BEGIN(t0);
            DT_TL_END(t0, DT_TL_COMPUTE, "on", NULL);
        }
        on[r] = dt_tl_now() - t;
        t = dt_tl_now();
        for (int i = 0; i < N; i++) {
            DT_TL_BEGIN(t0);
            DT_TL_ENDF(t0, DT_TL_COMM, "all-reduce", "bucket %d, %zu floats", i & 7, (size_t)i);
        }
        on_args[r] = dt_tl_now() - t;
        t = dt_tl_now();
        for (int i = 0; i < N; i++) {
            DT_TL_BEGIN(t0);
            DT_TL_END2(t0, DT_TL_COMPUTE, "backward", layer, NULL);
        }
        on_pair[r] = dt_tl_now() - t;
    }
    double t = dt_tl_now();
    ck_assert_int_eq(dt_timeline_finish(MPI_COMM_WORLD, &st), DT_OK);
    double finish = dt_tl_now() - t;
    if (rank == 0) {
        printf("# timeline overhead, rank 0, best of %d rounds of %d calls (%d ranks):\n", REPS, N, nranks);
        printf("#   off: DT_TL_BEGIN/END pair          %7.2f ns\n", best_ns(off, REPS, N));
        printf("#   dt_tl_now() alone                  %7.2f ns\n", best_ns(now, REPS, N));
        printf("#   on:  DT_TL_BEGIN/END (literal)     %7.2f ns (two clock reads + dt_tl_span)\n",
               best_ns(on, REPS, N));
        printf("#   on:  DT_TL_ENDF (formatted args)   %7.2f ns\n", best_ns(on_args, REPS, N));
        printf("#   on:  DT_TL_END2 (\"backward dense_1\") %5.2f ns\n", best_ns(on_pair, REPS, N));
        printf("#   dt_timeline_finish, %d spans a rank: %.1f ms\n", 3 * REPS * N, 1e3 * finish);
        fflush(stdout);
        remove(path);
    }
    (void)sink;
}
END_TEST

int main(int argc, char **argv)
{
    mpi_check_init(&argc, &argv, "timeline", &rank, &nranks, dir, sizeof dir);

    Suite *s = suite_create("timeline");
    TCase *tc = tcase_create("timeline");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_trace_contents);
    tcase_add_test(tc, test_cap_drops_and_counts);
    tcase_add_test(tc, test_unwritable_path_fails_start);
    tcase_add_test(tc, test_write_error_fails_finish);
    tcase_add_test(tc, test_overhead);
    suite_add_tcase(s, tc);
    return mpi_check_run(s, rank);
}

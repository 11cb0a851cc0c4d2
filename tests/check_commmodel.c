/* check_commmodel.c: unit tests for the alpha-beta model (src/predict/).
 *
 * The formulas are checked against values worked out by hand for small
 * layouts, and the step schedule against hand-made bucket timelines: a
 * bucket that is ready late must wait, overlap must hide communication up to
 * backward's length and no further, and without overlap everything is
 * exposed. Cluster files: a good one round-trips its numbers, bad ones name
 * the file, line and key. */
#include "config.h"

#include "ck_fast.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "predict/commmodel.h"
#include "runtime/status.h"

/* A cluster with round numbers: alpha 1 s, beta 1 s/byte inside; 10 s and
 * 2 s/byte between nodes. */
static struct dt_cluster toy(void)
{
    struct dt_cluster c = {.ranks_per_node = 4, .alpha_intra = 1.0, .beta_intra = 1.0, .alpha_inter = 10.0,
                           .beta_inter = 2.0};
    return c;
}

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-9 * (1.0 + fabs(b)), "%s = %.12g, want %.12g", #a, (double)(a), (double)(b))

START_TEST(formulas_by_hand)
{
    struct dt_cluster c = toy();
    /* one rank: nothing to do */
    NEAR(dt_cm_allreduce(&c, DT_CM_RING, 1, 1, 1000.0), 0.0);
    /* ring on 1 node x 4 ranks, n = 8: 2*3*(1 + 8/4*1) = 18 */
    NEAR(dt_cm_allreduce(&c, DT_CM_RING, 1, 4, 8.0), 18.0);
    /* ring on 2 nodes x 2 ranks, n = 8: slowest link 10 + 2*2 = 14; 2*3*14 = 84 */
    NEAR(dt_cm_allreduce(&c, DT_CM_RING, 2, 2, 8.0), 84.0);
    /* hier on 2 nodes x 2: 2*(1 + 1/2*8*1) + 2*1*(10 + 8/2*2) = 10 + 36 = 46 */
    NEAR(dt_cm_allreduce(&c, DT_CM_HIER, 2, 2, 8.0), 46.0);
    /* hier on 1 node is its shared-memory part only: 2*(1 + 3/4*8) = 14 */
    NEAR(dt_cm_allreduce(&c, DT_CM_HIER, 1, 4, 8.0), 14.0);
    /* mpi on 2 x 2, n = 8: RD = 1*(1+8) + 1*(10 + 2*8*2) = 51;
     * Rab = 2*(1 + 10 + 2*8*(1/2)*2 + 8/2*(1/2)*1) = 2*(11 + 16 + 2) = 58 -> 51 */
    NEAR(dt_cm_allreduce(&c, DT_CM_MPI, 2, 2, 8.0), 51.0);
    /* large n: Rabenseifner wins; n = 800: RD = 801 + 10 + 3200 = 4011;
     * Rab = 2*(11 + 1600 + 200) = 3622 */
    NEAR(dt_cm_allreduce(&c, DT_CM_MPI, 2, 2, 800.0), 3622.0);
}
END_TEST

START_TEST(names)
{
    ck_assert_int_eq(dt_cm_algo_parse("ring"), DT_CM_RING);
    ck_assert_int_eq(dt_cm_algo_parse("hier"), DT_CM_HIER);
    ck_assert_int_eq(dt_cm_algo_parse("nccl"), -1);
    ck_assert_str_eq(dt_cm_algo_name(DT_CM_MPI), "mpi");
}
END_TEST

START_TEST(step_schedule)
{
    struct dt_cluster c = toy();
    /* two buckets of 8 bytes on 1 node x 4 ranks: 14 s each (hier) */
    double bytes[2] = {8.0, 8.0}, ready[2] = {0.25, 1.0};
    struct dt_cm_step s = {.forward_s = 5.0, .backward_s = 40.0, .data_s = 1.0, .nbuckets = 2, .bucket_bytes = bytes,
                           .bucket_ready = ready, .overlap = 1};
    /* bucket 0 ready at 10, done 24; bucket 1 ready at 40, done 54: 14 exposed */
    struct dt_cm_result r = dt_cm_predict(&c, DT_CM_HIER, 1, 4, &s);
    NEAR(r.comm_s, 28.0);
    NEAR(r.exposed_s, 14.0);
    NEAR(r.step_s, 5.0 + 40.0 + 14.0 + 1.0);
    /* both early: bucket 1 waits for bucket 0 (start 24, done 38 < 40): all hidden */
    ready[1] = 0.3;
    r = dt_cm_predict(&c, DT_CM_HIER, 1, 4, &s);
    NEAR(r.exposed_s, 0.0);
    NEAR(r.step_s, 46.0);
    /* no overlap: all 28 s after backward */
    s.overlap = 0;
    r = dt_cm_predict(&c, DT_CM_HIER, 1, 4, &s);
    NEAR(r.exposed_s, 28.0);
    NEAR(r.step_s, 74.0);
    /* one rank: no communication at all */
    r = dt_cm_predict(&c, DT_CM_HIER, 1, 1, &s);
    NEAR(r.step_s, 46.0);
}
END_TEST

/* What overlap costs backward's core: cpu_ns_per_byte per byte moved
 * (2(P-1)/P of the message each way), the compression's arithmetic, and
 * half of a spinning MPI_Allreduce while backward still runs. */
START_TEST(overlap_core_share)
{
    struct dt_cluster c = toy();
    double bytes[1] = {8.0}, ready[1] = {0.5}, cpu[1] = {3.0};
    struct dt_cm_step s = {.forward_s = 5.0, .backward_s = 40.0, .nbuckets = 1, .bucket_bytes = bytes,
                           .bucket_ready = ready, .overlap = 1};
    /* hier on 1 x 4: 14 s from 20 to 34, hidden */
    NEAR(dt_cm_predict(&c, DT_CM_HIER, 1, 4, &s).step_s, 45.0);
    /* 1e8 ns per byte: 8 bytes * 2*3/4 = 12 bytes moved -> 1.2 s more backward */
    c.cpu_ns_per_byte = 1e8;
    NEAR(dt_cm_predict(&c, DT_CM_HIER, 1, 4, &s).step_s, 46.2);
    /* 16-bit transport: the same work per value as fp32 (bytes halved, work not) */
    s.half = 1;
    NEAR(dt_cm_predict(&c, DT_CM_HIER, 1, 4, &s).step_s, 47.4);
    s.half = 0;
    c.cpu_ns_per_byte = 0;
    /* the compression's 3 s: in the bucket's time (17 s, from 23 to 40) and on the core */
    s.bucket_cpu = cpu;
    struct dt_cm_result r = dt_cm_predict(&c, DT_CM_HIER, 1, 4, &s);
    NEAR(r.comm_s, 17.0);
    NEAR(r.step_s, 48.0);
    s.bucket_cpu = NULL;
    /* mpi on 1 x 4, n = 8: Rab = 2*(2 + 8*3/4) = 16 < RD = 18; it spins for
     * min(16, 20 s of backward left) / 2 = 8 s more backward; done at 24 + 16 < 48 */
    NEAR(dt_cm_allreduce(&c, DT_CM_MPI, 1, 4, 8.0), 16.0);
    NEAR(dt_cm_predict(&c, DT_CM_MPI, 1, 4, &s).step_s, 5.0 + 48.0);
    /* without overlap nothing is taken from backward: 40 + 16 after it */
    s.overlap = 0;
    NEAR(dt_cm_predict(&c, DT_CM_MPI, 1, 4, &s).step_s, 5.0 + 40.0 + 16.0);
    /* mpi_beta_factor scales mpi's bytes between nodes only: 2 x 2, n = 8: RD = 9 + (10 + 2*8*2*2) = 83 */
    c.mpi_beta_factor = 2.0;
    NEAR(dt_cm_allreduce(&c, DT_CM_MPI, 2, 2, 8.0), 83.0);
    NEAR(dt_cm_allreduce(&c, DT_CM_RING, 2, 2, 8.0), 84.0);
}
END_TEST

START_TEST(scaling_shape)
{
    struct dt_cluster c;
    dt_status st = {0};
    ck_assert_int_eq(dt_cm_cluster_load("hdr200-cpu", &c, &st), DT_OK);
    /* the ring's latency grows linearly with the ranks, the others' slower */
    double n = 4e6;
    double r64 = dt_cm_allreduce(&c, DT_CM_RING, 64, c.ranks_per_node, n);
    double r1024 = dt_cm_allreduce(&c, DT_CM_RING, 1024, c.ranks_per_node, n);
    double h1024 = dt_cm_allreduce(&c, DT_CM_HIER, 1024, c.ranks_per_node, n);
    ck_assert(r1024 > 10.0 * r64 * 0.5);
    ck_assert(h1024 < r1024);
    /* more bytes never cost less */
    for (int a = 0; a < DT_CM_NALGOS; a++)
        ck_assert(dt_cm_allreduce(&c, a, 8, 4, 2e6) > dt_cm_allreduce(&c, a, 8, 4, 1e6));
}
END_TEST

static const char *write_file(const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/cm-%d.conf", getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp", (int)getpid());
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs(text, f);
    fclose(f);
    return path;
}

START_TEST(cluster_files)
{
    struct dt_cluster c;
    dt_status st = {0};
    const char *p = write_file("# a test cluster\nname = lab\nranks_per_node = 4\nalpha_intra_us = 2\nbw_intra_gbs = 8\n"
                               "alpha_inter_us = 3 # comment\nbw_inter_gbs = 12.5\nabout = my lab\n");
    ck_assert_int_eq(dt_cm_cluster_load(p, &c, &st), DT_OK);
    ck_assert_str_eq(c.name, "lab");
    ck_assert_int_eq(c.ranks_per_node, 4);
    NEAR(c.alpha_intra, 2e-6);
    NEAR(c.beta_intra, 1.0 / 8e9);
    NEAR(c.alpha_inter, 3e-6);
    NEAR(c.beta_inter, 1.0 / 12.5e9);
    p = write_file("ranks_per_node = 4\nalpha_intra_us = 2\nbw_intra_gbs = 8\nalpha_inter_us = 3\nbw_inter = 1\n");
    ck_assert_int_eq(dt_cm_cluster_load(p, &c, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, ":5: unknown key 'bw_inter'"), "%s", st.msg);
    p = write_file("ranks_per_node = 2.5\n");
    ck_assert_int_eq(dt_cm_cluster_load(p, &c, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, ":1: ranks_per_node: expected a positive integer, found '2.5'"), "%s", st.msg);
    p = write_file("ranks_per_node = 2\nalpha_intra_us = 2\n");
    ck_assert_int_eq(dt_cm_cluster_load(p, &c, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "bw_intra_gbs is missing"), "%s", st.msg);
    unlink(p);
    ck_assert_int_eq(dt_cm_cluster_load("no-such-cluster", &c, &st), DT_EUSAGE);
    ck_assert_msg(strstr(st.msg, "neither a built-in cluster (this-machine, hdr200-cpu, dgx-h100)"), "%s", st.msg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("commmodel");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, formulas_by_hand);
    tcase_add_test(tc, names);
    tcase_add_test(tc, step_schedule);
    tcase_add_test(tc, overlap_core_share);
    tcase_add_test(tc, scaling_shape);
    tcase_add_test(tc, cluster_files);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

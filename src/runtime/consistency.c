/* consistency.c: the ranks' agreement check (see consistency.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "runtime/consistency.h"

long dt_consistency_hash(const char *s)
{
    unsigned long long h = 14695981039346656037ULL;
    for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return (long)(h >> 1);
}

long dt_consistency_hash_longs(const long *v, size_t n)
{
    unsigned long long h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) h = (h ^ (((unsigned long long)v[i] >> (8 * b)) & 0xff)) * 1099511628211ULL;
    return (long)(h >> 1);
}

/* "ranks 0,1,3 have 41; rank 2 has 40" for one value (texts: [nranks][64], or NULL). */
static void describe(const long *all, const char *texts, int nranks, int n, int k, char *out, size_t len)
{
    size_t at = 0;
    char *done = calloc((size_t)nranks, 1);
    for (int r = 0; r < nranks && at + 64 < len; r++) {
        if (done[r]) continue;
        long v = all[(size_t)r * n + k];
        int count = 0;
        char list[256] = "";
        size_t ln = 0;
        for (int q = r; q < nranks; q++)
            if (!done[q] && all[(size_t)q * n + k] == v) {
                done[q] = 1;
                if (ln + 12 < sizeof list) ln += (size_t)snprintf(list + ln, sizeof list - ln, "%s%d", count ? "," : "", q);
                count++;
            }
        if (texts)
            at += (size_t)snprintf(out + at, len - at, "%s%s %s %s '%s'", at ? "; " : "", count > 1 ? "ranks" : "rank",
                                   list, count > 1 ? "have" : "has", texts + 64 * (size_t)r);
        else
            at += (size_t)snprintf(out + at, len - at, "%s%s %s %s %ld", at ? "; " : "", count > 1 ? "ranks" : "rank",
                                   list, count > 1 ? "have" : "has", v);
    }
    free(done);
}

int dt_consistency_check(MPI_Comm comm, const char *when, const long *vals, const char *const *names, int n,
                         dt_status *st)
{
    return dt_consistency_check_text(comm, when, vals, names, NULL, n, st);
}

int dt_consistency_check_text(MPI_Comm comm, const char *when, const long *vals, const char *const *names,
                              const char *const *text, int n, dt_status *st)
{
    long both[32];
    if (n > 16) n = 16;
    for (int k = 0; k < n; k++) {
        both[k] = vals[k];
        both[n + k] = -vals[k];
    }
    DT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, both, 2 * n, MPI_LONG, MPI_MAX, comm));
    int same = 1;
    for (int k = 0; k < n; k++) same &= both[k] == -both[n + k];
    if (same) return DT_OK;
    int rank, nranks;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &nranks);
    long *all = dt_xmalloc(sizeof(long) * (size_t)n * (size_t)nranks);
    DT_MPI_CHECK(MPI_Allgather(vals, n, MPI_LONG, all, n, MPI_LONG, comm));
    char msg[1024];
    size_t at = (size_t)snprintf(msg, sizeof msg, "the ranks disagree %s:", when);
    for (int k = 0; k < n && at + 80 < sizeof msg; k++) {
        if (both[k] == -both[n + k]) continue;
        char d[512], mine[64], *texts = NULL;
        if (text && text[k]) { /* the strings themselves, gathered only now */
            snprintf(mine, sizeof mine, "%s", text[k]);
            texts = dt_xmalloc(64 * (size_t)nranks);
            DT_MPI_CHECK(MPI_Allgather(mine, 64, MPI_CHAR, texts, 64, MPI_CHAR, comm));
        }
        describe(all, texts, nranks, n, k, d, sizeof d);
        free(texts);
        at += (size_t)snprintf(msg + at, sizeof msg - at, " %s: %s.", names[k], d);
    }
    free(all);
    return dt_fail(st, DT_ERUNTIME, "%s Every rank must run the same dtrain with the same model and options "
                   "(a collective with mismatched buffers would fail or hang)", msg);
}

/*
 * bench_creates — what a create costs in a mount that holds many files,
 * with the pool of recycled staging files off and on (docs/MOUNT_MODEL.md,
 * "Recycled staging files"; rule 5 looks for a durable namesake at a create
 * that finds the pool empty). Through the mount model's C API (no FUSE) on
 * the in-memory store, with the unit tests' harness: each step is a
 * directory of FILES one-byte files (`__R_0.distcp`, as a DCP step of FILES
 * ranks), made durable before the next step is written, so step k's creates
 * run with (k-1) * FILES files in the mount. One-byte files are never rule 5's
 * candidates, so what the pool adds is the cost of looking.
 *
 *   bench_creates [--files N] [--steps S] [--reps R]
 *
 * Prints, per step, the median seconds its creates took with the pool off
 * and on (alternating, R repetitions), wall-clock and CPU of the creating
 * thread, and the ratios. The wall-clock is mostly the journal's fsync per
 * file and swings with the disk; looking for a namesake is CPU on the
 * creating thread, which the CPU column shows alone. Asserts nothing about
 * speed; exits non-zero only if the mount fails.
 */
#include <time.h>

#include "vfs_harness.h"

static double clock_s(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One mount: writes `steps` steps of `files` files each; wall[k] and cpu[k]
 * get the seconds step k's creates took. */
static void run_steps(uint64_t spare, int files, int steps, const char *name, double *wall,
                      double *cpu)
{
    st_backend *store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    vh_staging_spare = spare;
    vh_mount m;
    st_err e = vh_mount_open(&m, store, "n1", name, 1);
    vh_staging_spare = 0;
    CHECK_OK(e);
    if (e)
        exit(1);
    for (int k = 0; k < steps; k++) {
        char dir[64], path[128];
        snprintf(dir, sizeof dir, VH_JOB "/step-%d", k + 1);
        CHECK_OK(vh_mkdirs(&m, dir));
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < files; i++) {
            snprintf(path, sizeof path, "%s/__%d_0.distcp", dir, i);
            CHECK_OK(vh_write_str(&m, path, "x", VH_PID_A));
        }
        wall[k] = clock_s(CLOCK_MONOTONIC) - w0;
        cpu[k] = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        st_vfs_complete_all(m.v, VH_JOB, 0);
        CHECK_OK(st_vfs_wait_idle(m.v, 600));
    }
    vh_mount_close(&m);
    st_backend_close(store);
}

int main(int argc, char **argv)
{
    int files = 10000, steps = 3, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--files"))
            files = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
    }
    if (files < 1 || steps < 1 || reps < 1 || steps > 64 || reps > 64 || (argc - 1) % 2) {
        fprintf(stderr, "usage: bench_creates [--files N] [--steps S<=64] [--reps R<=64]\n");
        return 2;
    }
    if (vh_setup("bench-creates"))
        return 1;
    static double wall[2][64][64], cpu[2][64][64]; /* [pool on][step][rep] */
    for (int r = 0; r < reps; r++) {
        for (int pool = 0; pool < 2; pool++) {
            double w[64], c[64];
            char name[64];
            snprintf(name, sizeof name, "pool%d-%d", pool, r);
            run_steps(pool ? 64ull << 20 : 0, files, steps, name, w, c);
            for (int k = 0; k < steps; k++) {
                wall[pool][k][r] = w[k];
                cpu[pool][k][r] = c[k];
            }
        }
        fprintf(stderr, "rep %d of %d done\n", r + 1, reps);
    }
    printf("| step | files in the mount before | wall s, pool off | on | on / off "
           "| CPU s, pool off | on | on / off |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < steps; k++) {
        double med[2][2]; /* [wall, cpu][pool] */
        for (int pool = 0; pool < 2; pool++) {
            qsort(wall[pool][k], (size_t)reps, sizeof(double), cmp_double);
            qsort(cpu[pool][k], (size_t)reps, sizeof(double), cmp_double);
            med[0][pool] = wall[pool][k][reps / 2];
            med[1][pool] = cpu[pool][k][reps / 2];
        }
        printf("| %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", k + 1, k * files,
               med[0][0], med[0][1], med[0][1] / med[0][0], med[1][0], med[1][1],
               med[1][1] / med[1][0]);
    }
    vh_teardown();
    return ut_failed ? 1 : 0;
}

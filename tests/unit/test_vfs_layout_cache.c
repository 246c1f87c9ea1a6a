/*
 * test_vfs_layout_cache — the per-step layout cache of st_vfs_remote.c
 * (docs/WARMUP.md, "Layout cache"): opening N files of one remote step reads
 * its part record and manifest once, not once per file, and not again after
 * the refresh that showed the step loaded them; the bytes read are still the
 * step's.
 */
#include "vfs_harness.h"

#define NFILES 24

/* The fetches m has under way; *gets: the GETs it has made. */
static uint64_t fetches_active(vh_mount *m, uint64_t *gets)
{
    st_vfs_stats s;
    CHECK_OK(st_vfs_get_stats(m->v, &s));
    *gets = 0;
    for (int r = 0; r < ST_VFS_REQ_RESULTS; r++)
        *gets += s.requests[1][r]; /* ST_REQ_GET */
    uint64_t active = s.fetches_active;
    st_vfs_stats_free(&s);
    return active;
}

/* The GETs m made, once no fetch is under way: a read returns as soon as
 * its bytes are verified, which can be before the GET that streamed them
 * has returned and been counted. */
static uint64_t gets_of(vh_mount *m)
{
    uint64_t gets = 0;
    CHECK(VH_WAIT(fetches_active(m, &gets) == 0, 10));
    return gets;
}

static void test_opens_of_one_step_share_its_layout(void)
{
    st_backend *store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "node-a", "view-a", 1));
    /* b's GETs of packs return 50 ms after their body was handed on: a read
     * has its bytes before its GET is over and counted (gets_of). */
    CHECK_OK(vh_mount_open_fault(&b, store, "node-b", "view-b", 1, "get_end_delay_ms=50"));
    if (!a.v || !b.v)
        return;
    char path[128];
    uint8_t *data[NFILES];
    /* Files of 4 KiB and more: each its own chunk (smaller ones share a
     * bundle, docs/CHUNKING.md), so a GET per file measures the layout. */
    for (int i = 0; i < NFILES; i++) {
        data[i] = vh_data(5000 + 100 * i, 50 + i);
        snprintf(path, sizeof path, VH_JOB "/step-000007/rank%02d.distcp", i);
        CHECK_OK(vh_write(&a, path, data[i], 5000 + 100 * i, VH_PID_A));
    }
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000007/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(VH_WAIT(vh_exists(&b, VH_JOB "/step-000007/.ckpt-complete"), 10));

    uint64_t before = gets_of(&b);
    uint64_t first = 0;
    for (int i = 0; i < NFILES; i++) {
        snprintf(path, sizeof path, VH_JOB "/step-000007/rank%02d.distcp", i);
        CHECK(vh_file_is(&b, path, data[i], 5000 + 100 * i));
        if (i == 0)
            first = gets_of(&b) - before;
    }
    uint64_t gets = gets_of(&b) - before;
    printf("  %d files of one step: %llu GETs, the first file %llu\n", NFILES,
           (unsigned long long)gets, (unsigned long long)first);
    /* One chunk GET per file, plus one part record and one manifest; was
     * 3 per file (part record, manifest, chunk). */
    CHECK(gets >= NFILES && gets <= NFILES + 2);
    /* The refresh that showed the step handed its layout to the cache: the
     * first open reads only its chunk (was 3: part record, manifest, chunk). */
    CHECK(first == 1);
    for (int i = 0; i < NFILES; i++)
        free(data[i]);
    vh_mount_close(&b);
    vh_mount_close(&a);
    st_backend_close(store);
}

int main(void)
{
    if (vh_setup("layout-cache"))
        return 1;
    RUN(test_opens_of_one_step_share_its_layout);
    vh_teardown();
    return ut_finish();
}

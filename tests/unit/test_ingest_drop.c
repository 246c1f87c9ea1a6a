/*
 * test_ingest_drop — st_ingest_set_drop_read: an ingest told to drop what
 * it read leaves none of the file's pages in the page cache, and one not
 * told (the default, `ckptctl put`) leaves them all.
 *
 * Why: the mount seals a staging file while the trainer may already write
 * the next one; pages the seal frees as it reads are the ones the next
 * save gets (docs/MOUNT.md, "Background work yields to the writer").
 *
 * The file is written and fsynced first (clean pages, as a staging file is
 * after its close's fdatasync), then read whole by the ingest, so every
 * page is in the cache unless the ingest dropped it.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "engine/st_ingest.h"
#include "engine/st_state.h"
#include "st_backend_mem.h"
#include "ut.h"

#define SIZE (4u << 20)

static char root[] = "/tmp/ckpt-ingest-drop-XXXXXX";

/* Writes SIZE random bytes from seed to path and fsyncs them. */
static void write_synced(const char *path, uint64_t seed)
{
    uint8_t *buf = malloc(SIZE);
    CHECK(buf != NULL);
    if (!buf)
        return;
    ut_rand_fill(buf, SIZE, seed);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, buf, SIZE) == (ssize_t)SIZE && fsync(fd) == 0);
    if (fd >= 0)
        close(fd);
    free(buf);
}

/* Ingests path (drop_read on or off) and returns how many of its pages
 * are then in the page cache. */
static long resident_after_ingest(const char *path, int drop_read)
{
    char db[300];
    snprintf(db, sizeof db, "%s/state-%d.db", root, drop_read);
    st_backend *store = NULL;
    st_state *state = NULL;
    st_ingest *g = NULL;
    st_manifest m = {0};
    long resident = -1;
    CHECK_OK(st_backend_mem_open(&store));
    CHECK_OK(st_state_open(db, &state));
    CHECK_OK(st_ingest_new(store, state, "job", NULL, &g));
    int fd = open(path, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    if (g && fd >= 0) {
        st_ingest_set_drop_read(g, drop_read);
        CHECK_OK(st_ingest_file(g, fd, "f.bin", &st, -1));
        CHECK_OK(st_ingest_finish(g, &m));
        CHECK(m.nfiles == 1 && m.files[0].size == SIZE);
        resident = ut_resident_pages(path);
    }
    if (fd >= 0)
        close(fd);
    st_manifest_free(&m);
    st_ingest_free(g);
    st_state_close(state);
    st_backend_close(store);
    return resident;
}

static void test_drop_read(void)
{
    if (ut_on_tmpfs(root)) {
        UT_SKIP("test_drop_read needs a disk under /tmp, not a tmpfs");
        return;
    }
    const long pages = (long)(SIZE / (size_t)sysconf(_SC_PAGESIZE));
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/a.bin", root);
    snprintf(b, sizeof b, "%s/b.bin", root);
    write_synced(a, 1);
    write_synced(b, 2);
    CHECK(resident_after_ingest(a, 1) == 0);
    CHECK(resident_after_ingest(b, 0) == pages); /* the check can fail */
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_drop_read);
    ut_rmtree(root);
    return ut_finish();
}

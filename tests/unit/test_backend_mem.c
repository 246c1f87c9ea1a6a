/*
 * test_backend_mem — the in-memory backend (tests/support/st_backend_mem):
 * the shared conformance suite, then what only it has: handles shared on one
 * store (st_backend_mem_share), a store that lives until its last handle,
 * stores that are independent of each other, and a list callback that calls
 * back into the store (it runs unlocked). Also the fault wrapper over it.
 */
#include "backend_conformance.h"
#include "backend/st_backend.h"
#include "backend/st_backend_fault.h"
#include "st_backend_mem.h"
#include "ut.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void test_conformance(void)
{
    st_backend *b = NULL;
    CHECK_OK(st_backend_mem_open(&b));
    if (!b)
        return;
    CHECK(strcmp(b->ops->scheme, "mem") == 0);
    backend_conformance_run(b, "conformance/mem");
    st_backend_close(b);
}

static void test_conformance_through_a_shared_handle(void)
{
    st_backend *a = NULL, *b = NULL;
    CHECK_OK(st_backend_mem_open(&a));
    CHECK_OK(st_backend_mem_share(a, &b));
    if (!a || !b)
        return;
    /* One handle writes what the other has to see: the suite on b, with a
     * marker object put through a that must survive it untouched. */
    CHECK_OK(st_put(a, "other/marker", "m", 1));
    backend_conformance_run(b, "conformance/shared");
    uint64_t sz = 0;
    CHECK_OK(st_stat(b, "other/marker", &sz));
    CHECK(sz == 1);
    st_backend_close(b);
    st_backend_close(a);
}

static void test_share_lifetime(void)
{
    st_backend *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(st_backend_mem_open(&a));
    CHECK_OK(st_backend_mem_share(a, &b));
    CHECK_OK(st_put(a, "k/1", "one", 3));
    st_backend_close(a); /* the store lives on in b */
    st_bytes got = {0};
    CHECK_OK(st_get(b, "k/1", 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3 && memcmp(got.data, "one", 3) == 0);
    /* A wrapper owns its handle, not the store. */
    CHECK_OK(st_backend_mem_share(b, &c));
    CHECK_OK(st_backend_fault_wrap(&c, "fail_key=refused"));
    CHECK_ERR(st_put(c, "x/refused", "r", 1), ST_ERR_TRANSIENT);
    CHECK_OK(st_put(c, "k/2", "two", 3));
    st_backend_close(c);
    CHECK_OK(st_get(b, "k/2", 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3 && memcmp(got.data, "two", 3) == 0);
    CHECK_ERR(st_stat(b, "x/refused", &(uint64_t){0}), ST_ERR_NOT_FOUND);
    st_bytes_free(&got);
    st_backend_close(b);
}

static void test_stores_are_independent(void)
{
    st_backend *a = NULL, *b = NULL;
    CHECK_OK(st_backend_mem_open(&a));
    CHECK_OK(st_backend_mem_open(&b));
    CHECK_OK(st_put(a, "same/key", "A", 1));
    uint64_t sz;
    CHECK_ERR(st_stat(b, "same/key", &sz), ST_ERR_NOT_FOUND);
    bc_listed l = {0};
    CHECK_OK(st_list(b, "", bc_collect, &l));
    CHECK(l.n == 0);
    bc_listed_free(&l);
    st_backend_close(a);
    st_backend_close(b);
}

static void test_share_refuses_other_backends(void)
{
    st_backend *a = NULL, *w = NULL, *out = (st_backend *)&out;
    CHECK_OK(st_backend_mem_open(&a));
    CHECK_OK(st_backend_mem_share(a, &w));
    CHECK_OK(st_backend_fault_wrap(&w, "put_delay_ms=0"));
    CHECK_ERR(st_backend_mem_share(w, &out), ST_ERR_INVALID);
    CHECK(out == NULL);
    CHECK_ERR(st_backend_mem_share(NULL, &out), ST_ERR_INVALID);
    CHECK_ERR(st_backend_mem_open(NULL), ST_ERR_INVALID);
    st_backend_close(w);
    st_backend_close(a);
}

/* A callback that deletes each key it is given, and puts a new one. */
typedef struct reentrant {
    st_backend *b;
    int seen;
    st_err first;
} reentrant;

static int delete_while_listing(void *arg, const char *key, uint64_t size)
{
    reentrant *r = arg;
    (void)size;
    char added[64];
    snprintf(added, sizeof added, "zz/added-%d", r->seen++);
    st_err e = st_del(r->b, key);
    if (!e)
        e = st_put(r->b, added, "x", 1);
    if (e && !r->first)
        r->first = e;
    return 0;
}

static void test_list_callback_may_call_the_store(void)
{
    st_backend *b = NULL;
    CHECK_OK(st_backend_mem_open(&b));
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "ls/k%02d", i);
        CHECK_OK(st_put(b, key, "v", 1));
    }
    reentrant r = {b, 0, ST_OK};
    CHECK_OK(st_list(b, "ls/", delete_while_listing, &r));
    /* The listing is the snapshot taken when it started. */
    CHECK(r.seen == 10 && r.first == ST_OK);
    bc_listed l = {0};
    CHECK_OK(st_list(b, "ls/", bc_collect, &l));
    CHECK(l.n == 0);
    bc_listed_free(&l);
    CHECK_OK(st_list(b, "zz/", bc_collect, &l));
    CHECK(l.n == 10 && bc_ascending(&l));
    bc_listed_free(&l);
    st_backend_close(b);
}

/* The thread that PUTs a pack while it is held; says when the PUT returned.
 * Its st_err comes back as the thread's result. */
typedef struct held_put {
    st_backend *b;
    atomic_int returned;
} held_put;

static void *put_a_pack(void *arg)
{
    held_put *h = arg;
    intptr_t e = st_put(h->b, "j/packs/p1", "pack", 4);
    atomic_store(&h->returned, 1);
    return (void *)e;
}

/* put_hold=PATH: a pack PUT does not happen while PATH exists (whenever we
 * look), other PUTs go through, and removing PATH lets the pack PUT end. */
static void test_fault_put_hold(void)
{
    char hold[] = "/tmp/ckpt-put-hold-XXXXXX", spec[64];
    int fd = mkstemp(hold);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    snprintf(spec, sizeof spec, "put_hold=%s", hold);
    st_backend *b = NULL, *w = NULL;
    CHECK_OK(st_backend_mem_open(&b));
    CHECK_OK(st_backend_mem_share(b, &w));
    CHECK_OK(st_backend_fault_wrap(&w, spec));
    held_put h = {.b = w};
    atomic_init(&h.returned, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, put_a_pack, &h) == 0);
    CHECK_OK(st_put(w, "j/manifests/m1", "m", 1)); /* not a pack: not held */
    CHECK_ERR(st_stat(b, "j/packs/p1", &(uint64_t){0}), ST_ERR_NOT_FOUND);
    CHECK(atomic_load(&h.returned) == 0);
    unlink(hold);
    void *put_result = NULL;
    pthread_join(t, &put_result);
    CHECK_OK((st_err)(intptr_t)put_result);
    uint64_t sz = 0;
    CHECK_OK(st_stat(b, "j/packs/p1", &sz));
    CHECK(sz == 4);
    st_backend_close(w);
    st_backend_close(b);
}

int main(void)
{
    RUN(test_conformance);
    RUN(test_conformance_through_a_shared_handle);
    RUN(test_share_lifetime);
    RUN(test_stores_are_independent);
    RUN(test_share_refuses_other_backends);
    RUN(test_list_callback_may_call_the_store);
    RUN(test_fault_put_hold);
    return ut_finish();
}

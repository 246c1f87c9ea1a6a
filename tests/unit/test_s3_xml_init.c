/*
 * test_s3_xml_init — opening an s3:// backend initialises libxml2 before
 * any request can parse an answer, for both signatures.
 *
 * Why: libxml2 2.9 (Debian 12) initialises its global tables on first use
 * without a lock. The backends parse S3's XML answers on whichever thread
 * made the request, and a publish sends several requests at once, so the
 * first two answers of a process could be parsed at once and both threads
 * build those tables: CI's LeakSanitizer caught the leaked copy in a V2
 * mount (integration.mount_s3_v2). xmlInitParser() from the opening thread
 * closes that window; this test sees whether open made that call.
 *
 * How: this executable defines xmlInitParser itself, so the backends' calls
 * bind here (the executable's symbols come first in the dynamic lookup); it
 * counts the call and forwards it to libxml2's (dlsym RTLD_NEXT). No server
 * is needed: opening a backend sends nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>

#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "ut.h"

static atomic_int init_calls;

void xmlInitParser(void);
void xmlInitParser(void)
{
    atomic_fetch_add(&init_calls, 1);
    void (*real)(void) = (void (*)(void))dlsym(RTLD_NEXT, "xmlInitParser");
    if (real)
        real();
}

/* Opening with `signature` must have called xmlInitParser by the time it
 * returns. Each signature has its own once-only init, so each is counted
 * from before its first open in this process. */
static void check_open_initialises(const char *signature)
{
    int before = atomic_load(&init_calls);
    st_backend_opts o = {.s3_endpoint = "http://127.0.0.1:1", .s3_signature = signature};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://ckpt-test/xml-init", &o, &b));
    if (b)
        st_backend_close(b);
    if (atomic_load(&init_calls) <= before)
        fprintf(stderr, "opening a --s3-signature %s backend did not initialise libxml2\n",
                signature);
    CHECK(atomic_load(&init_calls) > before);
}

int main(void)
{
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    check_open_initialises("v2");
    check_open_initialises("v4");
    return ut_finish();
}

/*
 * test_backend_s3 — the s3:// backends against real s3rver instances that
 * this test starts itself (tests/s3/s3harness.h) and stops at exit. Run
 * without argument it tests the V2 backend on libs3 (st_backend_s3.c);
 * "test_backend_s3 v4" runs the same cases on the V4 backend on libcurl
 * (st_backend_s3v4.c) against the strict instance only (no lenient server
 * is started: every V4 signature, listings included, is checked):
 *
 *   lenient  --allow-mismatched-signatures: the shared conformance suite
 *            (libs3 2.0's V2 signature of bucket-level requests such as
 *            list does not match s3rver's; docs/S3.md), prefixes, foreign
 *            objects, a missing bucket, concurrency.
 *   strict   every signature checked: object requests with good and bad
 *            credentials; a refused request is ST_ERR_PERMANENT and its
 *            message names bucket and endpoint but never the secret.
 *
 * Also: URL and endpoint parsing, credentials from the environment and from
 * a credentials file, and the per-request timeouts against a socket that
 * accepts connections and never answers.
 *
 * Needs node + npm (s3rver is installed on first use by tests/s3/s3rver.sh);
 * without them the test fails, it does not skip.
 *
 * Another server: with CKPT_TEST_S3_ENDPOINT set (and its good keys in
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, bucket ckpt-test existing), no
 * s3rver is started and both roles use that endpoint: a real server checks
 * every signature, so it serves as lenient and strict at once. This is how
 * the same binary runs against Ceph RGW (tests/s3/with_rgw.sh, docs/S3.md).
 * CKPT_TEST_S3_HTTPS_ENDPOINT names that server's https endpoint, whose
 * certificate nothing trusts (test_https_refused).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <libs3.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../s3/s3harness.h"
#include "backend_conformance.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "backend/st_backend_retry.h"
#include "ut.h"

#define BUCKET "ckpt-test"
/* A secret that must never show up in any message. */
#define BAD_SECRET "Sup3r-Secret-Value-never-print-me"

static s3h_server lenient, strict;
/* The server for the suite and for bucket-level requests: lenient for V2
 * (libs3's list signature does not match s3rver's), strict for V4. */
static s3h_server *listing = &lenient;
static int v4; /* argv[1] == "v4": the V4 backend (st_backend_s3v4.c) */

/* The server's good key pair: s3rver's defaults, or the environment's
 * when the test runs against an external server. */
static char good_key[128] = "S3RVER", good_secret[128] = "S3RVER";

static void use_good_env(void)
{
    setenv("AWS_ACCESS_KEY_ID", good_key, 1);
    setenv("AWS_SECRET_ACCESS_KEY", good_secret, 1);
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
    unsetenv("CKPT_S3_ENDPOINT");
}

static st_backend *open_at(const char *url, const char *endpoint)
{
    st_backend_opts o = {.s3_endpoint = endpoint};
    st_backend *b = NULL;
    st_err e = st_backend_open_opts(url, &o, &b);
    CHECK_OK(e);
    return e ? NULL : b;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- the shared suite ---- */

static void test_conformance(void)
{
    st_backend *b = open_at("s3://" BUCKET, listing->endpoint);
    if (!b)
        return;
    CHECK(strcmp(b->ops->scheme, "s3") == 0);
    char scratch[64];
    snprintf(scratch, sizeof scratch, "conformance/run-%ld", (long)getpid());
    double t0 = now_s();
    backend_conformance_run(b, scratch);
    fprintf(stderr, "  conformance took %.1f s, %llu retries\n", now_s() - t0,
            (unsigned long long)st_backend_retry_count(b));
    /* Against a healthy local server nothing needed a retry. */
    CHECK(st_backend_retry_count(b) == 0);
    st_backend_close(b);
}

/* The raw backend, without the retry wrapper, passes too: nothing in the
 * suite leans on retries to hide a bug. Only the cheap cases. */
static void test_conformance_unwrapped(void)
{
    st_backend_opts o = {.s3_endpoint = listing->endpoint};
    st_backend *b = NULL;
    CHECK_OK((v4 ? st_backend_s3v4_open : st_backend_s3_open)("s3://" BUCKET, &o, &b));
    if (!b)
        return;
    char scratch[64];
    snprintf(scratch, sizeof scratch, "raw/run-%ld", (long)getpid());
    backend_conformance_run_cheap(b, scratch);
    st_backend_close(b);
}

/* ---- prefixes and foreign objects ---- */

typedef struct names {
    char keys[32][128];
    int n;
} names;

static int collect_names(void *arg, const char *key, uint64_t size)
{
    (void)size;
    names *l = arg;
    if (l->n < 32)
        snprintf(l->keys[l->n++], sizeof l->keys[0], "%s", key);
    return 0;
}

static void test_prefix(void)
{
    st_backend *root = open_at("s3://" BUCKET, listing->endpoint);
    st_backend *pre = open_at("s3://" BUCKET "/tenants/a/", listing->endpoint);
    st_backend *pre2 = open_at("S3://" BUCKET "//tenants/a", listing->endpoint); /* same place */
    if (!root || !pre || !pre2)
        goto out;
    CHECK_OK(st_put(pre, "job/k1", "one", 3));
    CHECK_OK(st_put(root, "tenants/ab/k2", "two", 3)); /* shares the string prefix "tenants/a" */

    /* The object lives at prefix + '/' + key. */
    st_bytes got = {0};
    CHECK_OK(st_get(root, "tenants/a/job/k1", 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3 && memcmp(got.data, "one", 3) == 0);
    CHECK_OK(st_get(pre2, "job/k1", 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3);

    /* Listing strips the prefix and never leaks a neighbour's keys. */
    names l = {0};
    CHECK_OK(st_list(pre, "", collect_names, &l));
    CHECK(l.n == 1 && strcmp(l.keys[0], "job/k1") == 0);
    l.n = 0;
    CHECK_OK(st_list(pre, "jo", collect_names, &l));
    CHECK(l.n == 1);

    /* S3 caps object names at 1024 bytes: prefix + key must fit. */
    char longkey[ST_KEY_MAX + 1];
    memset(longkey, 'x', ST_KEY_MAX);
    longkey[ST_KEY_MAX] = '\0';
    st_clearerr();
    CHECK_ERR(st_put(pre, longkey, "x", 1), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "1024") != NULL);

    CHECK_OK(st_del(pre, "job/k1"));
    CHECK_OK(st_del(root, "tenants/ab/k2"));
    st_bytes_free(&got);
out:
    st_backend_close(root);
    st_backend_close(pre);
    st_backend_close(pre2);
}

/* Records a raw libs3 request's status. */
static void raw_complete(S3Status s, const S3ErrorDetails *d, void *arg)
{
    (void)d;
    *(S3Status *)arg = s;
}

/* Objects that are not valid keys (written by other tools into a shared
 * bucket) are not listed. They are made with libs3 directly. */
static void test_foreign_objects(void)
{
    st_backend *b = open_at("s3://" BUCKET, listing->endpoint); /* also initialises libs3 */
    if (!b)
        return;
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", listing->port);
    S3BucketContext bc = {.hostName = host,
                          .bucketName = BUCKET,
                          .protocol = S3ProtocolHTTP,
                          .uriStyle = S3UriStylePath,
                          .accessKeyId = good_key,
                          .secretAccessKey = good_secret};
    static const char *foreign[] = {"foreign/.hidden", "foreign/a/.tmp.1", "foreign/x:y"};
    size_t nf = sizeof foreign / sizeof foreign[0];
    for (size_t i = 0; i < nf; i++) {
        S3Status st = S3StatusInternalError;
        S3PutObjectHandler ph = {{NULL, raw_complete}, NULL};
        S3_put_object(&bc, foreign[i], 0, NULL, NULL, &ph, &st);
        CHECK(st == S3StatusOK);
    }
    CHECK_OK(st_put(b, "foreign/ok", "k", 1));
    names l = {0};
    CHECK_OK(st_list(b, "foreign/", collect_names, &l));
    CHECK(l.n == 1 && strcmp(l.keys[0], "foreign/ok") == 0);
    CHECK_OK(st_del(b, "foreign/ok"));
    for (size_t i = 0; i < nf; i++) {
        S3Status st = S3StatusInternalError;
        S3ResponseHandler rh = {NULL, raw_complete};
        S3_delete_object(&bc, foreign[i], NULL, &rh, &st);
        CHECK(st == S3StatusOK);
    }
    st_backend_close(b);
}

/* ---- permanent errors ---- */

static void check_no_secret(const char *what)
{
    const char *m = st_errmsg();
    CHECK(strstr(m, BAD_SECRET) == NULL);
    CHECK(strstr(m, "Sup3r") == NULL);
    if (strstr(m, "Sup3r"))
        fprintf(stderr, "  %s: message leaks the secret: %s\n", what, m);
}

static void test_missing_bucket(void)
{
    st_backend_opts o = {.s3_endpoint = listing->endpoint, .retry_attempts = 3};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://no-such-bucket-ckpt/p", &o, &b));
    if (!b)
        return;
    st_bytes got = {0};
    uint64_t sz;
    double t0 = now_s();
    st_clearerr();
    CHECK_ERR(st_put(b, "k", "x", 1), ST_ERR_PERMANENT);
    CHECK(strstr(st_errmsg(), "no-such-bucket-ckpt") != NULL);
    CHECK(strstr(st_errmsg(), "no such bucket") != NULL);
    CHECK(strstr(st_errmsg(), listing->endpoint) != NULL);
    fprintf(stderr, "  missing bucket: %s\n", st_errmsg());
    /* A HEAD 404 cannot tell a missing key from a missing bucket: stat
     * must still say "no such bucket", not "not found". */
    CHECK_ERR(st_stat(b, "k", &sz), ST_ERR_PERMANENT);
    CHECK(strstr(st_errmsg(), "no such bucket") != NULL);
    CHECK_ERR(st_get(b, "k", 0, ST_GET_TO_END, &got), ST_ERR_PERMANENT);
    names l = {0};
    CHECK_ERR(st_list(b, "", collect_names, &l), ST_ERR_PERMANENT);
    /* Permanent errors are not retried: all of that took no backoff time. */
    CHECK(st_backend_retry_count(b) == 0);
    CHECK(now_s() - t0 < 5);
    st_backend_close(b);
    st_bytes_free(&got);
}

static void test_auth_strict(void)
{
    use_good_env();
    /* Good credentials: object requests pass s3rver's strict V2 check. */
    st_backend *b = open_at("s3://" BUCKET "/strict", strict.endpoint);
    if (!b)
        return;
    st_bytes got = {0};
    uint64_t sz = 0;
    CHECK_OK(st_put(b, "obj", "strict-data", 11));
    CHECK_OK(st_get(b, "obj", 7, ST_GET_TO_END, &got));
    CHECK(got.len == 4 && memcmp(got.data, "data", 4) == 0);
    CHECK_OK(st_stat(b, "obj", &sz));
    CHECK(sz == 11);
    CHECK_ERR(st_stat(b, "missing", &sz), ST_ERR_NOT_FOUND);
    CHECK_OK(st_get(b, "obj", 11, 5, &got)); /* 416 at the end: empty */
    CHECK(got.len == 0);
    CHECK_ERR(st_get(b, "obj", 12, 5, &got), ST_ERR_INVALID);
    st_backend_close(b);

    /* A wrong secret: every op is ST_ERR_PERMANENT, named, secret-free. */
    setenv("AWS_SECRET_ACCESS_KEY", BAD_SECRET, 1);
    st_backend_opts o = {.s3_endpoint = strict.endpoint, .retry_attempts = 3};
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/strict", &o, &b));
    if (b) {
        st_clearerr();
        CHECK_ERR(st_put(b, "obj", "x", 1), ST_ERR_PERMANENT);
        fprintf(stderr, "  bad secret: %s\n", st_errmsg());
        CHECK(strstr(st_errmsg(), BUCKET) != NULL);
        CHECK(strstr(st_errmsg(), strict.endpoint) != NULL);
        CHECK(strstr(st_errmsg(), "SignatureDoesNotMatch") != NULL);
        check_no_secret("put");
        CHECK_ERR(st_get(b, "obj", 0, ST_GET_TO_END, &got), ST_ERR_PERMANENT);
        check_no_secret("get");
        CHECK_ERR(st_stat(b, "obj", &sz), ST_ERR_PERMANENT);
        check_no_secret("stat");
        CHECK_ERR(st_del(b, "obj"), ST_ERR_PERMANENT);
        check_no_secret("del");
        CHECK(st_backend_retry_count(b) == 0);
        st_backend_close(b);
    }
    /* An unknown access key id. */
    setenv("AWS_ACCESS_KEY_ID", "NOSUCHKEYID", 1);
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/strict", &o, &b));
    if (b) {
        CHECK_ERR(st_put(b, "obj", "x", 1), ST_ERR_PERMANENT);
        fprintf(stderr, "  bad key id: %s\n", st_errmsg());
        check_no_secret("put with bad id");
        st_backend_close(b);
    }
    use_good_env();
    b = open_at("s3://" BUCKET "/strict", strict.endpoint);
    if (b) {
        CHECK_OK(st_get(b, "obj", 0, ST_GET_TO_END, &got)); /* untouched by the refused put */
        CHECK(got.len == 11);
        CHECK_OK(st_del(b, "obj"));
        st_backend_close(b);
    }
    st_bytes_free(&got);
}

/* ---- TLS ---- */

/*
 * libs3 2.0 sets CURLOPT_SSL_VERIFYPEER to 0 on every request and offers no
 * way to change it: over https it would talk to any server, impostors
 * included. So the backend refuses https endpoints (docs/S3.md), the
 * default AWS one too, and names the reason. With
 * CKPT_TEST_S3_HTTPS_ENDPOINT (RGW with a self-signed certificate nothing
 * trusts: tests/s3/with_rgw.sh --https) the proof is end to end: no
 * request of ours may succeed against that server.
 */
static void test_https_refused(void)
{
    static const char *https[] = {"https://127.0.0.1:9", "HTTPS://s3.example.com", NULL};
    for (int i = 0; https[i]; i++) {
        st_backend_opts o = {.s3_endpoint = https[i]};
        st_backend *b = NULL;
        st_clearerr();
        CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &o, &b), ST_ERR_INVALID);
        CHECK(strstr(st_errmsg(), "certificate") != NULL);
        CHECK(strstr(st_errmsg(), "--s3-endpoint") != NULL);
        if (b)
            st_backend_close(b);
    }
    /* No endpoint at all means AWS over https: refused the same way. */
    st_backend *b = NULL;
    unsetenv("CKPT_S3_ENDPOINT");
    CHECK_ERR(st_backend_open("s3://" BUCKET, &b), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "certificate") != NULL);
    if (b)
        st_backend_close(b);

    const char *untrusted = getenv("CKPT_TEST_S3_HTTPS_ENDPOINT");
    if (!untrusted || !*untrusted)
        return;
    st_backend_opts o = {.s3_endpoint = untrusted, .retry_attempts = 1};
    b = NULL;
    if (st_backend_open_opts("s3://" BUCKET "/tls", &o, &b) == ST_OK) {
        st_err e = st_put(b, "untrusted", "x", 1);
        CHECK(e != ST_OK);
        if (e == ST_OK)
            fprintf(stderr, "  put over https to %s succeeded: its certificate was not checked\n",
                    untrusted);
        st_backend_close(b);
    }
}

/* ---- configuration ---- */

static void test_urls(void)
{
    use_good_env();
    static const char *bad[] = {
        "s3://",
        "s3:///prefix",
        "s3://b", /* too short a bucket name */
        "s3://Bad!Bucket",
        "s3://" BUCKET "/a//b",
        "s3://" BUCKET "/.hidden",
        "s3://" BUCKET "/p?x=1",
        "s3://" BUCKET "/p#f",
        "s3://" BUCKET "/p%20q",
        "s3://AKIDEXAMPLE:" BAD_SECRET "@" BUCKET "/p",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st_backend *b = (st_backend *)&b;
        st_clearerr();
        st_err e = st_backend_open(bad[i], &b);
        CHECK_ERR(e, ST_ERR_INVALID);
        CHECK(b == NULL);
        CHECK(st_errmsg()[0] != '\0');
        check_no_secret(bad[i]);
        if (e != ST_ERR_INVALID)
            fprintf(stderr, "  accepted bad url %s\n", bad[i]);
        if (e == ST_OK)
            st_backend_close(b);
    }
    static const char *bad_endpoints[] = {"ftp://127.0.0.1", "127.0.0.1:9000", "http://",
                                          "http://host/path",
                                          "http://user:" BAD_SECRET "@127.0.0.1:9000"};
    for (size_t i = 0; i < sizeof bad_endpoints / sizeof bad_endpoints[0]; i++) {
        st_backend_opts o = {.s3_endpoint = bad_endpoints[i]};
        st_backend *b = NULL;
        st_clearerr();
        CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &o, &b), ST_ERR_INVALID);
        CHECK(strstr(st_errmsg(), "--s3-endpoint") != NULL);
        check_no_secret(bad_endpoints[i]);
        /* The same through the environment names the variable. */
        setenv("CKPT_S3_ENDPOINT", bad_endpoints[i], 1);
        CHECK_ERR(st_backend_open("s3://" BUCKET, &b), ST_ERR_INVALID);
        CHECK(strstr(st_errmsg(), "CKPT_S3_ENDPOINT") != NULL);
        unsetenv("CKPT_S3_ENDPOINT");
    }
    /* CKPT_S3_ENDPOINT is used when no option is given; the option wins. */
    setenv("CKPT_S3_ENDPOINT", listing->endpoint, 1);
    st_backend *b = NULL;
    CHECK_OK(st_backend_open("s3://" BUCKET "/env", &b));
    if (b) {
        CHECK_OK(st_put(b, "k", "v", 1));
        CHECK_OK(st_del(b, "k"));
        st_backend_close(b);
    }
    st_backend_opts o = {.s3_endpoint = "http://127.0.0.1:1"}; /* nothing listens there */
    o.retry_attempts = 1;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/env", &o, &b));
    if (b) {
        st_clearerr();
        CHECK_ERR(st_put(b, "k", "v", 1), ST_ERR_TRANSIENT); /* connection refused */
        CHECK(strstr(st_errmsg(), "127.0.0.1:1") != NULL);
        st_backend_close(b);
    }
    unsetenv("CKPT_S3_ENDPOINT");
}

static void test_credentials(void)
{
    char dir[] = "/tmp/ckpt-s3cred-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/credentials", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f,
            "# a comment\n[other]\naws_access_key_id = %s\naws_secret_access_key = %s\n\n"
            "[default]\n  aws_access_key_id=%s  \r\naws_secret_access_key =  %s\n"
            "region = us-east-1\n",
            good_key, BAD_SECRET, good_key, good_secret);
    fclose(f);

    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    unsetenv("AWS_PROFILE");
    st_backend_opts o = {.s3_endpoint = strict.endpoint, .retry_attempts = 2};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/cred", &o, &b));
    if (b) {
        CHECK_OK(st_put(b, "k", "v", 1)); /* [default] signs correctly */
        CHECK_OK(st_del(b, "k"));
        st_backend_close(b);
    }
    setenv("AWS_PROFILE", "other", 1);
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/cred", &o, &b));
    if (b) {
        CHECK_ERR(st_put(b, "k", "v", 1), ST_ERR_PERMANENT);
        check_no_secret("profile other");
        st_backend_close(b);
    }
    setenv("AWS_PROFILE", "absent", 1);
    st_clearerr();
    CHECK_ERR(st_backend_open_opts("s3://" BUCKET "/cred", &o, &b), ST_ERR_PERMANENT);
    CHECK(strstr(st_errmsg(), "[absent]") != NULL && strstr(st_errmsg(), path) != NULL);
    check_no_secret("absent profile");
    unsetenv("AWS_PROFILE");

    char missing[160];
    snprintf(missing, sizeof missing, "%s/nope", dir);
    setenv("AWS_SHARED_CREDENTIALS_FILE", missing, 1);
    CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &o, &b), ST_ERR_PERMANENT);
    CHECK(strstr(st_errmsg(), "AWS_ACCESS_KEY_ID") != NULL);

    /* Half of the environment pair is an error, not a silent fallback. */
    setenv("AWS_ACCESS_KEY_ID", good_key, 1);
    CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &o, &b), ST_ERR_PERMANENT);
    CHECK(strstr(st_errmsg(), "AWS_SECRET_ACCESS_KEY") != NULL);

    unlink(path);
    rmdir(dir);
    use_good_env();
}

/* ---- timeouts ---- */

/* A socket that completes TCP handshakes (the kernel does, from the
 * backlog) and never reads or answers: a hung server. */
static int hung_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static void test_timeouts(void)
{
    int port = 0, fd = hung_listener(&port);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
    st_backend_opts o = {.s3_endpoint = ep, .stall_timeout_ms = 400, .retry_attempts = 1};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET, &o, &b));
    if (!b)
        goto out;
    st_bytes got = {0};
    uint64_t sz;
    double t0 = now_s();
    st_clearerr();
    CHECK_ERR(st_put(b, "k", "v", 1), ST_ERR_TRANSIENT);
    double dt = now_s() - t0;
    fprintf(stderr, "  hung server: put gave up after %.2f s: %s\n", dt, st_errmsg());
    CHECK(dt >= 0.35 && dt < 3);
    CHECK(strstr(st_errmsg(), "timed out") != NULL);
    t0 = now_s();
    CHECK_ERR(st_get(b, "k", 0, ST_GET_TO_END, &got), ST_ERR_TRANSIENT);
    CHECK_ERR(st_stat(b, "k", &sz), ST_ERR_TRANSIENT);
    CHECK_ERR(st_del(b, "k"), ST_ERR_TRANSIENT);
    names l = {0};
    CHECK_ERR(st_list(b, "", collect_names, &l), ST_ERR_TRANSIENT);
    CHECK(now_s() - t0 < 8);
    st_backend_close(b);

    /* With retries: three tries, two waits, then the message says so. */
    o.retry_attempts = 3;
    o.retry_base_ms = 50;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET, &o, &b));
    if (b) {
        CHECK_ERR(st_put(b, "k", "v", 1), ST_ERR_TRANSIENT);
        CHECK(st_backend_retry_count(b) == 2);
        CHECK(strstr(st_errmsg(), "gave up after 3 tries") != NULL);
        st_backend_close(b);
    }

    /* The deadline holds even while bytes trickle: a total timeout. */
    o = (st_backend_opts){
        .s3_endpoint = ep, .timeout_ms = 300, .stall_timeout_ms = 10000, .retry_attempts = 1};
    CHECK_OK(st_backend_open_opts("s3://" BUCKET, &o, &b));
    if (b) {
        t0 = now_s();
        CHECK_ERR(st_stat(b, "k", &sz), ST_ERR_TRANSIENT);
        CHECK(now_s() - t0 < 2);
        CHECK(strstr(st_errmsg(), "not done within") != NULL);
        st_backend_close(b);
    }
    st_bytes_free(&got);
out:
    close(fd);
}

/* ---- many threads on one instance ---- */

#define PT_THREADS 8
#define PT_ITERS   6
#define PT_SIZE    (1u << 20)

typedef struct pt_arg {
    st_backend *b;
    int id, failures;
} pt_arg;

static void *pt_main(void *p)
{
    pt_arg *a = p;
    uint8_t *buf = malloc(PT_SIZE);
    st_bytes got = {0};
    for (int i = 0; i < PT_ITERS; i++) {
        char key[64];
        snprintf(key, sizeof key, "par/t%d/o%d", a->id, i);
        ut_rand_fill(buf, PT_SIZE, (uint64_t)a->id * 1000 + (uint64_t)i + 1);
        if (st_put(a->b, key, buf, PT_SIZE) != ST_OK ||
            st_get(a->b, key, 0, ST_GET_TO_END, &got) != ST_OK || got.len != PT_SIZE ||
            memcmp(got.data, buf, PT_SIZE) != 0 ||
            st_get(a->b, key, PT_SIZE - 10, 100, &got) != ST_OK || got.len != 10 ||
            memcmp(got.data, buf + PT_SIZE - 10, 10) != 0 || st_del(a->b, key) != ST_OK)
            a->failures++;
    }
    st_bytes_free(&got);
    free(buf);
    return NULL;
}

static void test_parallel(void)
{
    st_backend *b = open_at("s3://" BUCKET, listing->endpoint);
    if (!b)
        return;
    pthread_t th[PT_THREADS];
    pt_arg a[PT_THREADS];
    for (int t = 0; t < PT_THREADS; t++) {
        a[t] = (pt_arg){.b = b, .id = t};
        CHECK(pthread_create(&th[t], NULL, pt_main, &a[t]) == 0);
    }
    for (int t = 0; t < PT_THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(a[t].failures == 0);
    }
    st_backend_close(b);
}

/* CKPT_TEST_S3_ENDPOINT=http://HOST:PORT: both roles on that server, with
 * the key pair from the environment. Returns 0, or -1 after saying why. */
static int use_external_server(const char *endpoint)
{
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    int port = 0;
    if (!key || !*key || !secret || !*secret || strlen(key) >= sizeof good_key ||
        strlen(secret) >= sizeof good_secret) {
        fprintf(stderr, "FAIL: CKPT_TEST_S3_ENDPOINT needs AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY (the server's good keys)\n");
        return -1;
    }
    if (sscanf(endpoint, "http://127.0.0.1:%d", &port) != 1 || port <= 0 ||
        strlen(endpoint) >= sizeof lenient.endpoint) {
        fprintf(stderr, "FAIL: CKPT_TEST_S3_ENDPOINT must be http://127.0.0.1:PORT, not %s\n",
                endpoint);
        return -1;
    }
    snprintf(good_key, sizeof good_key, "%s", key);
    snprintf(good_secret, sizeof good_secret, "%s", secret);
    /* No dir: s3h_destroy() leaves an external server alone. */
    lenient.port = strict.port = port;
    snprintf(lenient.endpoint, sizeof lenient.endpoint, "%s", endpoint);
    snprintf(strict.endpoint, sizeof strict.endpoint, "%s", endpoint);
    return 0;
}

int main(int argc, char **argv)
{
    v4 = argc > 1 && strcmp(argv[1], "v4") == 0;
    setenv("CKPT_S3_SIGNATURE", v4 ? "v4" : "v2", 1);
    if (v4)
        listing = &strict;
    const char *external = getenv("CKPT_TEST_S3_ENDPOINT");
    if (external && *external) {
        if (use_external_server(external) != 0)
            return 1;
        use_good_env();
    } else {
        use_good_env();
        if ((!v4 && s3h_start(&lenient, "--bucket " BUCKET) != 0) ||
            s3h_start(&strict, "--strict --bucket " BUCKET) != 0) {
            fprintf(stderr, "FAIL: cannot start s3rver (needs node and npm; see above)\n");
            return 1;
        }
    }
    fprintf(stderr, "signature %s; s3rver lenient at %s, strict at %s\n", v4 ? "v4" : "v2",
            v4 ? "(none)" : lenient.endpoint, strict.endpoint);
    RUN(test_conformance);
    RUN(test_conformance_unwrapped);
    RUN(test_prefix);
    RUN(test_foreign_objects);
    RUN(test_missing_bucket);
    RUN(test_auth_strict);
    RUN(test_urls);
    if (!v4) /* V2 (libs3) only: V4 checks certificates (tests/integration/test_s3_errors.py) */
        RUN(test_https_refused);
    RUN(test_credentials);
    RUN(test_timeouts);
    RUN(test_parallel);
    if (!v4)
        s3h_destroy(&lenient);
    s3h_destroy(&strict);
    return ut_finish();
}

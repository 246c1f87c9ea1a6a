/*
 * test_backend_s3v4 — what only the V4 backend (st_backend_s3v4.c) and the
 * shared S3 configuration (st_s3_common.c) do; the whole s3:// suite runs
 * on V4 as "test_backend_s3 v4" (unit.test_backend_s3_v4).
 *
 *   - configuration, without a server: region from the option,
 *     AWS_REGION, AWS_DEFAULT_REGION, the profile's ~/.aws/config, the
 *     default; the AWS endpoint derived from it; addressing; credentials
 *     and session token from an AWS_PROFILE; CA file and option errors;
 *   - the error classes and named causes of S3 codes and transports;
 *   - --s3-sse: the modes, the SSE-C key file's rules, the V2 refusal;
 *   - the backend's own SigV4 signer: AWS's documented example, and a
 *     request with the SSE-C headers (whose order curl 7.x gets wrong),
 *     as botocore 1.43 signs it;
 *   - against a strict s3rver that verifies V4 signatures: virtual-hosted
 *     addressing (BUCKET.s3.localhost, which curl resolves itself), a
 *     session token signed along, and a wrong secret refused there too.
 *
 * Needs node + npm for s3rver (tests/s3/s3rver.sh); fails without them.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../s3/s3harness.h"
#include "backend_conformance.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "backend/st_s3_common.h"
#include "backend/st_s3_sigv4.h"
#include "ut.h"

#define BUCKET "ckpt-test"
#define SECRET "Sup3r-v4-Secret-never-print-me"

static s3h_server vhost;
static char dir[] = "/tmp/ckpt-s3v4-XXXXXX";

static void clean_env(void)
{
    static const char *vars[] = {"AWS_REGION",         "AWS_DEFAULT_REGION",
                                 "AWS_PROFILE",        "AWS_CONFIG_FILE",
                                 "AWS_SESSION_TOKEN",  "CKPT_S3_ENDPOINT",
                                 "CKPT_S3_ADDRESSING", "CKPT_S3_CA_FILE",
                                 "CKPT_S3_SIGNATURE",  "AWS_SHARED_CREDENTIALS_FILE",
                                 "CKPT_S3_SSE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("HOME", dir, 1); /* no ~/.aws of the user's */
}

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ut_write_text(path, text);
}

/* Loads a configuration; returns its st_err, cfg filled. */
static st_err load(st_s3_config *cfg, const char *url, const st_backend_opts *o)
{
    st_s3_config_free(cfg);
    memset(cfg, 0, sizeof *cfg);
    st_clearerr();
    return st_s3_config_load(cfg, url, o);
}

static void test_region_and_endpoint(void)
{
    clean_env();
    st_s3_config cfg = {0};
    st_backend_opts o = {0};
    CHECK_OK(load(&cfg, "s3://" BUCKET "/p", &o));
    CHECK(strcmp(cfg.region, "us-east-1") == 0);
    /* No endpoint: AWS's, for the region, virtual-hosted, https. */
    CHECK(strcmp(cfg.endpoint, "https://s3.us-east-1.amazonaws.com") == 0);
    CHECK(cfg.virtual_host == 1 && cfg.https == 1);
    CHECK(cfg.signature == ST_S3_SIG_V4);

    /* The profile's config, then AWS_DEFAULT_REGION, AWS_REGION, the option. */
    char path[256];
    snprintf(path, sizeof path, "%s/.aws", dir);
    mkdir(path, 0700);
    write_file(".aws/config", "[default]\nregion = eu-north-1\n[profile team]\n"
                              "region=ap-south-2\n");
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(strcmp(cfg.region, "eu-north-1") == 0);
    CHECK(strcmp(cfg.endpoint, "https://s3.eu-north-1.amazonaws.com") == 0);
    setenv("AWS_PROFILE", "team", 1);
    write_file(".aws/credentials", "[team]\naws_access_key_id = AKIDTEAM\n"
                                   "aws_secret_access_key = " SECRET "\n"
                                   "aws_session_token = TOKEN-OF-TEAM\n");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(strcmp(cfg.region, "ap-south-2") == 0);
    CHECK(cfg.access_key_id && strcmp(cfg.access_key_id, "AKIDTEAM") == 0);
    CHECK(cfg.secret && strcmp(cfg.secret, SECRET) == 0);
    CHECK(cfg.session_token && strcmp(cfg.session_token, "TOKEN-OF-TEAM") == 0);
    setenv("AWS_DEFAULT_REGION", "sa-east-1", 1);
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(strcmp(cfg.region, "sa-east-1") == 0);
    setenv("AWS_REGION", "eu-west-3", 1);
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(strcmp(cfg.region, "eu-west-3") == 0);
    o.s3_region = "us-west-2";
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(strcmp(cfg.region, "us-west-2") == 0);
    CHECK(strcmp(cfg.endpoint, "https://s3.us-west-2.amazonaws.com") == 0);
    o.s3_region = "Not A Region";
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "--s3-region") != NULL);
    o.s3_region = NULL;

    /* A custom endpoint: path-style unless asked; the option wins. */
    clean_env();
    o.s3_endpoint = "http://127.0.0.1:9000";
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.virtual_host == 0 && cfg.https == 0);
    o.s3_addressing = "virtual";
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.virtual_host == 1);
    CHECK_ERR(load(&cfg, "s3://Under_Score", &o), ST_ERR_INVALID); /* not a DNS name */
    CHECK(strstr(st_errmsg(), "--s3-addressing path") != NULL);
    o.s3_addressing = "sideways";
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "--s3-addressing") != NULL);
    o.s3_addressing = NULL;
    setenv("CKPT_S3_ADDRESSING", "virtual", 1);
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.virtual_host == 1);
    unsetenv("CKPT_S3_ADDRESSING");

    o.s3_signature = "v3";
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "--s3-signature") != NULL);
    o.s3_signature = "V2";
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.signature == ST_S3_SIG_V2);
    o.s3_signature = NULL;

    o.s3_ca_file = "/nonexistent/ca.pem";
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "/nonexistent/ca.pem") != NULL);
    CHECK(strstr(st_errmsg(), "--s3-ca-file") != NULL);
    o.s3_ca_file = NULL;

    /* libs3 2.0 cannot check certificates: V2 refuses https (also AWS's
     * derived endpoint), V4 takes it. */
    st_backend *hb = NULL;
    st_backend_opts ho = {.s3_endpoint = "https://127.0.0.1:9", .s3_signature = "v2"};
    CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &ho, &hb), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "certificate") != NULL);
    CHECK(strstr(st_errmsg(), "--s3-signature v4") != NULL);
    ho.s3_endpoint = NULL;
    CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &ho, &hb), ST_ERR_INVALID);
    ho.s3_signature = NULL;
    ho.s3_endpoint = "https://127.0.0.1:9";
    CHECK_OK(st_backend_open_opts("s3://" BUCKET, &ho, &hb));
    st_backend_close(hb);

    /* A session token needs V4: libs3 cannot send one. */
    setenv("AWS_SESSION_TOKEN", "T", 1);
    st_backend *b = NULL;
    o.s3_signature = "v2";
    CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &o, &b), ST_ERR_UNSUPPORTED);
    CHECK(strstr(st_errmsg(), "AWS_SESSION_TOKEN") != NULL);
    CHECK(strstr(st_errmsg(), "v4") != NULL);
    st_s3_config_free(&cfg);
    CHECK(cfg.secret == NULL && cfg.session_token == NULL);
    clean_env();
}

/* A key file of n bytes with mode m under dir; its path into path. */
static void key_file(char *path, size_t cap, const char *name, size_t n, mode_t m)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (size_t i = 0; f && i < n; i++)
        fputc((int)i, f);
    if (f)
        fclose(f);
    CHECK(chmod(path, m) == 0);
}

static void test_sse_options(void)
{
    st_s3_config cfg = {0};
    st_backend_opts o = {.s3_endpoint = "http://127.0.0.1:9"};
    char key[512], opt[600];
    clean_env();

    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.sse == ST_S3_SSE_NONE);
    o.s3_sse = "AES256";
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.sse == ST_S3_SSE_AES256);
    o.s3_sse = "aws:kms";
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.sse == ST_S3_SSE_KMS && cfg.sse_kms_key_id[0] == '\0');
    o.s3_sse = "aws:kms:arn:aws:kms:eu-west-1:111122223333:key/abc";
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(strcmp(cfg.sse_kms_key_id, "arn:aws:kms:eu-west-1:111122223333:key/abc") == 0);
    o.s3_sse = "aws:kms:";
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    o.s3_sse = "aes256";
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "--s3-sse") != NULL);
    o.s3_sse = NULL;
    setenv("CKPT_S3_SSE", "bogus", 1);
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "CKPT_S3_SSE") != NULL);
    unsetenv("CKPT_S3_SSE");

    /* SSE-C: 32 raw bytes 00 01 .. 1f, whose base64 and MD5 are known. */
    key_file(key, sizeof key, "sse.key", 32, 0600);
    snprintf(opt, sizeof opt, "c:%s", key);
    o.s3_sse = opt;
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o));
    CHECK(cfg.sse == ST_S3_SSE_C);
    CHECK(cfg.sse_c_key_b64 &&
          strcmp(cfg.sse_c_key_b64, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=") == 0);
    CHECK(strcmp(cfg.sse_c_key_md5_b64, "tP/LI3N87DFaSk0aoqYgzg==") == 0);
    st_s3_config_free(&cfg);
    CHECK(cfg.sse_c_key_b64 == NULL && cfg.sse_c_key_md5_b64[0] == '\0');
    CHECK_OK(load(&cfg, "s3://" BUCKET, &o)); /* loads again after free */

    key_file(key, sizeof key, "open.key", 32, 0640);
    snprintf(opt, sizeof opt, "c:%s", key);
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "chmod 600") != NULL);
    key_file(key, sizeof key, "long.key", 33, 0600);
    snprintf(opt, sizeof opt, "c:%s", key);
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    key_file(key, sizeof key, "short.key", 31, 0600);
    snprintf(opt, sizeof opt, "c:%s", key);
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "exactly 32 raw bytes") != NULL);
    char link[400];
    snprintf(link, sizeof link, "%s/link.key", dir);
    snprintf(key, sizeof key, "%s/sse.key", dir);
    CHECK(symlink(key, link) == 0);
    snprintf(opt, sizeof opt, "c:%s", link);
    CHECK_ERR(load(&cfg, "s3://" BUCKET, &o), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "symlink") != NULL);

    /* V2 refuses every mode; V4 opens. */
    st_backend *b = NULL;
    o.s3_sse = "AES256";
    o.s3_signature = "v2";
    CHECK_ERR(st_backend_open_opts("s3://" BUCKET, &o, &b), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "--s3-sse AES256") != NULL);
    o.s3_signature = NULL;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET, &o, &b));
    st_backend_close(b);
    st_s3_config_free(&cfg);
    clean_env();
}

/* AWS's example key pair, at 20130524T000000Z. */
static void sign_check(const char *method, const char *path, const char *query,
                       const char *const *headers, const char *want_names, const char *want_sig)
{
    st_s3_sigv4_req r = {.method = method,
                         .path = path,
                         .query = query,
                         .headers = headers,
                         .access_key_id = "AKIAIOSFODNN7EXAMPLE",
                         .secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                         .region = "us-east-1",
                         .now = 1369353600}; /* 2013-05-24 00:00:00 UTC */
    char date[ST_S3_SIGV4_AMZDATE_LINE_MAX], auth[1024], want[1024];
    CHECK_OK(st_s3_sigv4_sign(&r, date, auth, sizeof auth));
    CHECK(strcmp(date, "x-amz-date: 20130524T000000Z") == 0);
    snprintf(want, sizeof want,
             "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
             "s3/aws4_request, SignedHeaders=%s, Signature=%s",
             want_names, want_sig);
    CHECK(strcmp(auth, want) == 0);
    if (strcmp(auth, want) != 0)
        fprintf(stderr, "  got  %s\n  want %s\n", auth, want);
}

static void test_sigv4(void)
{
    /* "GET Bucket Lifecycle", AWS S3 API reference, "Examples: Signature
     * Calculations in AWS Signature Version 4". */
    const char *const lifecycle[] = {
        "Host: examplebucket.s3.amazonaws.com",
        "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        NULL};
    sign_check("GET", "/", "lifecycle=", lifecycle, "host;x-amz-content-sha256;x-amz-date",
               "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
    /* SSE-C headers, given out of order, one unsigned header among them. */
    const char *const ssec[] = {
        "x-amz-server-side-encryption-customer-key-MD5: Bl1HBZ/s96d9rA5wqGPZEg==",
        "Range: bytes=0-9",
        "x-amz-server-side-encryption-customer-key: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        "Host: 127.0.0.1:9000",
        "x-amz-server-side-encryption-customer-algorithm: AES256",
        "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        NULL};
    sign_check("GET", "/ckpt-test/jobs/j/packs/ab.pack", NULL, ssec,
               "host;x-amz-content-sha256;x-amz-date;x-amz-server-side-encryption-customer-"
               "algorithm;x-amz-server-side-encryption-customer-key;x-amz-server-side-encryption-"
               "customer-key-md5",
               "3d247dd40508497da4a2eadf77f0b61f8671bb2b3e1573ee763f137049136465");
}

static void test_classify(void)
{
    static const struct {
        st_s3_transport net;
        int http;
        const char *code;
        st_err want;
        const char *says;
    } cases[] = {
        {ST_S3_NET_OK, 404, "NoSuchKey", ST_ERR_NOT_FOUND, "not found"},
        {ST_S3_NET_OK, 404, "", ST_ERR_NOT_FOUND, "not found"},
        {ST_S3_NET_OK, 404, "NoSuchBucket", ST_ERR_PERMANENT, "NoSuchBucket"},
        {ST_S3_NET_OK, 403, "SignatureDoesNotMatch", ST_ERR_PERMANENT, "AWS_SECRET_ACCESS_KEY"},
        {ST_S3_NET_OK, 403, "InvalidAccessKeyId", ST_ERR_PERMANENT, "AWS_ACCESS_KEY_ID"},
        {ST_S3_NET_OK, 400, "AuthorizationHeaderMalformed", ST_ERR_PERMANENT, "--s3-region"},
        {ST_S3_NET_OK, 301, "PermanentRedirect", ST_ERR_PERMANENT, "--s3-region"},
        {ST_S3_NET_OK, 400, "ExpiredToken", ST_ERR_PERMANENT, "AWS_SESSION_TOKEN"},
        {ST_S3_NET_OK, 403, "InvalidToken", ST_ERR_PERMANENT, "AWS_SESSION_TOKEN"},
        {ST_S3_NET_OK, 403, "RequestTimeTooSkewed", ST_ERR_PERMANENT, "clock"},
        {ST_S3_NET_OK, 403, "AccessDenied", ST_ERR_PERMANENT, "permissions"},
        {ST_S3_NET_OK, 403, "", ST_ERR_PERMANENT, "403"},
        {ST_S3_NET_OK, 503, "SlowDown", ST_ERR_TRANSIENT, "SlowDown"},
        {ST_S3_NET_OK, 400, "RequestTimeout", ST_ERR_TRANSIENT, "RequestTimeout"},
        {ST_S3_NET_OK, 500, "InternalError", ST_ERR_TRANSIENT, "InternalError"},
        {ST_S3_NET_OK, 400, "XAmzContentSHA256Mismatch", ST_ERR_TRANSIENT, "other bytes"},
        {ST_S3_NET_OK, 400, "BadDigest", ST_ERR_TRANSIENT, "other bytes"},
        {ST_S3_NET_OK, 400, "InvalidDigest", ST_ERR_TRANSIENT, "other bytes"},
        {ST_S3_NET_OK, 502, "", ST_ERR_TRANSIENT, "temporary"},
        {ST_S3_NET_OK, 408, "", ST_ERR_TRANSIENT, "temporary"},
        {ST_S3_NET_OK, 429, "", ST_ERR_TRANSIENT, "temporary"},
        {ST_S3_NET_OK, 416, "InvalidRange", ST_ERR_INVALID, "range"},
        {ST_S3_NET_OK, 400, "InvalidRequest", ST_ERR_INVALID, "invalid"},
        {ST_S3_NET_OK, 0, "SomethingNew", ST_ERR_PERMANENT, "refused"},
        {ST_S3_NET_FAILED, 0, NULL, ST_ERR_TRANSIENT, "connection"},
        {ST_S3_NET_TIMEOUT, 0, NULL, ST_ERR_TRANSIENT, "timed out"},
        {ST_S3_NET_TLS_UNTRUSTED, 0, NULL, ST_ERR_PERMANENT, "--s3-ca-file"},
        {ST_S3_NET_TLS_FAILED, 0, NULL, ST_ERR_PERMANENT, "TLS"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *cause = NULL;
        st_err e = st_s3_classify(cases[i].net, cases[i].http, cases[i].code, &cause);
        CHECK_ERR(e, cases[i].want);
        CHECK(cause && strstr(cause, cases[i].says) != NULL);
        if (e != cases[i].want || !cause || !strstr(cause, cases[i].says))
            fprintf(stderr, "  case %zu (%d %s): %s\n", i, cases[i].http,
                    cases[i].code ? cases[i].code : "-", cause ? cause : "(null)");
    }
}

/* Virtual-hosted addressing against s3rver: bucket.s3.localhost. */
static void test_virtual_hosted(void)
{
    clean_env();
    char ep[64];
    snprintf(ep, sizeof ep, "http://s3.localhost:%d", vhost.port);
    st_backend_opts o = {.s3_endpoint = ep, .s3_addressing = "virtual", .retry_attempts = 2};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/vh", &o, &b));
    if (!b)
        return;
    char scratch[64];
    snprintf(scratch, sizeof scratch, "run-%ld", (long)getpid());
    backend_conformance_run_cheap(b, scratch);
    st_backend_close(b);

    /* The object is where path-style addressing finds it too. */
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", vhost.port);
    st_backend_opts po = {.s3_endpoint = ep, .retry_attempts = 2};
    st_backend *v = NULL, *p = NULL;
    char vep[64];
    snprintf(vep, sizeof vep, "http://s3.localhost:%d", vhost.port);
    o.s3_endpoint = vep;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET, &o, &v));
    CHECK_OK(st_backend_open_opts("s3://" BUCKET, &po, &p));
    if (v && p) {
        st_bytes got = {0};
        CHECK_OK(st_put(v, "both/ways", "vhost", 5));
        CHECK_OK(st_get(p, "both/ways", 0, ST_GET_TO_END, &got));
        CHECK(got.len == 5 && memcmp(got.data, "vhost", 5) == 0);
        CHECK_OK(st_del(p, "both/ways"));
        st_bytes_free(&got);
    }
    st_backend_close(v);
    st_backend_close(p);
}

/* A session token is sent and signed (the strict server checks the
 * signature over it); a wrong secret fails even with a token. */
static void test_session_token(void)
{
    clean_env();
    setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEXAMPLETOKEN", 1);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", vhost.port);
    st_backend_opts o = {.s3_endpoint = ep, .retry_attempts = 1};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/tok", &o, &b));
    if (b) {
        CHECK_OK(st_put(b, "k", "v", 1));
        CHECK_OK(st_del(b, "k"));
        st_backend_close(b);
    }
    setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
    CHECK_OK(st_backend_open_opts("s3://" BUCKET "/tok", &o, &b));
    if (b) {
        uint64_t sz;
        st_clearerr();
        CHECK_ERR(st_put(b, "k", "v", 1), ST_ERR_PERMANENT);
        CHECK(strstr(st_errmsg(), "SignatureDoesNotMatch") != NULL);
        CHECK(strstr(st_errmsg(), SECRET) == NULL);
        /* HEAD has no body: the backend asks again with a GET for the code. */
        CHECK_ERR(st_stat(b, "k", &sz), ST_ERR_PERMANENT);
        CHECK(strstr(st_errmsg(), "SignatureDoesNotMatch") != NULL);
        CHECK(strstr(st_errmsg(), "EXAMPLETOKEN") == NULL);
        st_backend_close(b);
    }
    clean_env();
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_region_and_endpoint);
    RUN(test_classify);
    RUN(test_sse_options);
    RUN(test_sigv4);
    if (s3h_start(&vhost, "--strict --vhost-domain localhost --bucket " BUCKET) != 0) {
        fprintf(stderr, "FAIL: cannot start s3rver (needs node and npm; see above)\n");
        return 1;
    }
    RUN(test_virtual_hosted);
    RUN(test_session_token);
    s3h_destroy(&vhost);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return ut_finish();
}

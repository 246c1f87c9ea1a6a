/*
 * st_s3_common — configuration, error classification and scrubbing shared
 * by the s3:// backends (st_s3_common.h; the user's view: docs/S3.md).
 *
 * Precedence of every setting: the option (ckptfs/ckptctl flag, libckpt
 * field), then the environment, then the AWS profile files, then the
 * default. Messages name the source that was wrong ("--s3-endpoint",
 * "CKPT_S3_ENDPOINT", a file and a profile), never a credential value.
 *
 * Threads: see the header; nothing here keeps state between calls.
 */
#define _GNU_SOURCE /* strptime, timegm */
#include "backend/st_s3_common.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util/st_fsutil.h"

#define DEFAULT_TIMEOUT_MS 60000u
#define DEFAULT_STALL_MS   20000u
#define DEFAULT_REGION     "us-east-1"

/* The option, else the environment variable; *source names the one used. */
static const char *setting(const char *opt, const char *opt_name, const char *env,
                           const char **source)
{
    if (opt && *opt) {
        *source = opt_name;
        return opt;
    }
    const char *v = getenv(env);
    *source = env;
    return v && *v ? v : NULL;
}

st_err st_s3_signature_choice(const st_backend_opts *opts, st_s3_signature *out)
{
    const char *source;
    const char *v =
        setting(opts ? opts->s3_signature : NULL, "--s3-signature", "CKPT_S3_SIGNATURE", &source);
    *out = ST_S3_SIG_V4;
    if (!v || strcasecmp(v, "v4") == 0)
        return ST_OK;
    if (strcasecmp(v, "v2") == 0) {
        *out = ST_S3_SIG_V2;
        return ST_OK;
    }
    return st_seterr(ST_ERR_INVALID, "%s \"%.16s\": expected v2 or v4", source, v);
}

/* ---- the store URL ---- */

static int bucket_char_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '-' || ch == '_';
}

/* ST_ERR_INVALID naming the URL and what is wrong with it: the one form
 * of every message below that may echo the URL (checked free of user info
 * first). */
static st_err bad_url(const char *url, const char *why)
{
    return st_seterr(ST_ERR_INVALID, "s3 store URL \"%.200s\": %s", url, why);
}

/* s3://bucket[/prefix][/]: bucket and prefix into cfg. */
static st_err parse_url(st_s3_config *cfg, const char *url)
{
    const char *rest = url + strlen("s3://");
    /* Never echo a URL that may carry user info ("KEY:SECRET@bucket"). */
    if (strpbrk(rest, "@:"))
        return st_seterr(ST_ERR_INVALID,
                         "s3 store URL: '@' and ':' are not allowed (credentials never go in the "
                         "URL; the endpoint is set with --s3-endpoint or CKPT_S3_ENDPOINT)");
    if (strpbrk(rest, "?#%"))
        return bad_url(url, "queries, fragments and %-escapes are not supported");
    size_t bn = strcspn(rest, "/");
    if (bn == 0)
        return bad_url(url, "expected s3://bucket[/prefix]");
    /* S3's bucket rules (3 to 63 characters, starting and ending with a
     * letter or digit); '_' and capitals only exist on old path-style
     * buckets, and are refused below for virtual-hosted addressing. */
    if (bn < 3 || bn > ST_S3_BUCKET_MAX)
        return st_seterr(ST_ERR_INVALID,
                         "s3 store URL \"%.200s\": a bucket name has 3 to %d characters", url,
                         ST_S3_BUCKET_MAX);
    for (size_t i = 0; i < bn; i++)
        if (!bucket_char_ok(rest[i]) ||
            ((i == 0 || i == bn - 1) && (rest[i] == '.' || rest[i] == '-' || rest[i] == '_')))
            return bad_url(url, "bad bucket name (letters, digits, '.', '-'; starting and "
                                "ending with a letter or digit)");
    memcpy(cfg->bucket, rest, bn);
    cfg->bucket[bn] = '\0';

    const char *p = rest + bn;
    while (*p == '/')
        p++;
    size_t pn = strlen(p);
    while (pn && p[pn - 1] == '/')
        pn--;
    if (!pn)
        return ST_OK;
    if (pn > ST_KEY_MAX - 1)
        return st_seterr(ST_ERR_INVALID, "s3 store URL: prefix too long");
    char pre[ST_KEY_MAX + 1];
    memcpy(pre, p, pn);
    pre[pn] = '\0';
    if (!st_key_is_valid(pre))
        return bad_url(url, "the prefix must follow the key rules ([A-Za-z0-9._-] "
                            "components, none starting with '.')");
    memcpy(cfg->prefix, pre, pn);
    cfg->prefix[pn] = '/';
    cfg->prefix[pn + 1] = '\0';
    cfg->prefix_len = pn + 1;
    return ST_OK;
}

/* ---- the endpoint ---- */

/* "http[s]://host[:port][/]" into cfg->host, cfg->endpoint, cfg->https. */
static st_err parse_endpoint(st_s3_config *cfg, const char *ep, const char *source)
{
    const char *rest;
    if (strncasecmp(ep, "http://", 7) == 0) {
        cfg->https = 0;
        rest = ep + 7;
    } else if (strncasecmp(ep, "https://", 8) == 0) {
        cfg->https = 1;
        rest = ep + 8;
    } else {
        return st_seterr(ST_ERR_INVALID,
                         "S3 endpoint from %s must be a URL such as http://127.0.0.1:9000 or "
                         "https://s3.example.com (the scheme picks http or https)",
                         source);
    }
    size_t n = strcspn(rest, "/");
    if (rest[n] == '/' && rest[n + 1] != '\0')
        return st_seterr(ST_ERR_INVALID,
                         "S3 endpoint from %s: a path after the host is not supported "
                         "(path-style addressing puts the bucket there)",
                         source);
    if (n == 0 || n >= ST_S3_HOST_MAX)
        return st_seterr(ST_ERR_INVALID, "S3 endpoint from %s: missing or over-long host", source);
    for (size_t i = 0; i < n; i++) {
        char ch = rest[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '-' || ch == ':' || ch == '[' || ch == ']' || ch == '_';
        /* '@' in particular: credentials never travel in an endpoint URL,
         * and this message must not repeat them. */
        if (!ok)
            return st_seterr(ST_ERR_INVALID,
                             "S3 endpoint from %s: character '%c' not allowed in host[:port]",
                             source, ch == '@' ? '@' : '?');
    }
    memcpy(cfg->host, rest, n);
    cfg->host[n] = '\0';
    snprintf(cfg->endpoint, sizeof cfg->endpoint, "%s://%s", cfg->https ? "https" : "http",
             cfg->host);
    return ST_OK;
}

static int host_is_aws(const char *host)
{
    size_t n = strcspn(host, ":");
    static const char aws[] = ".amazonaws.com";
    return n >= sizeof aws - 1 &&
           strncasecmp(host + n - (sizeof aws - 1), aws, sizeof aws - 1) == 0;
}

/* ---- the AWS profile files ---- */

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

static void free_secret(char **s)
{
    if (*s) {
        explicit_bzero(*s, strlen(*s));
        free(*s);
        *s = NULL;
    }
}

/*
 * Reads an AWS INI file (credentials or config): for every name[i] set in
 * section, a strdup of its value into *slot[i] (replacing what is there).
 * Returns ST_OK, ST_ERR_NOT_FOUND when the file cannot be opened (errno
 * kept), ST_ERR_NOMEM. Values never reach a message.
 */
static st_err ini_read(const char *path, const char *section, const char *const *names,
                       char **const *slots, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ST_ERR_NOT_FOUND;
    char *line = NULL;
    size_t cap = 0;
    int in_section = 0;
    st_err e = ST_OK;
    while (!e && getline(&line, &cap, f) >= 0) {
        char *s = trim(line);
        if (*s == '#' || *s == ';' || *s == '\0')
            continue;
        if (*s == '[') {
            char *end = strchr(s, ']');
            if (end)
                *end = '\0';
            in_section = strcmp(trim(s + 1), section) == 0;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in_section || !eq)
            continue;
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        for (size_t i = 0; i < n && *value; i++) {
            if (strcasecmp(name, names[i]) != 0)
                continue;
            free_secret(slots[i]);
            if (!(*slots[i] = strdup(value)))
                e = st_seterr(ST_ERR_NOMEM, "reading %s: out of memory", path);
        }
    }
    if (line) {
        explicit_bzero(line, cap);
        free(line);
    }
    fclose(f);
    return e;
}

/* $VAR, else ~/.aws/NAME, into buf; 0 if neither can be formed. */
static int aws_file(char *buf, size_t cap, const char *var, const char *name)
{
    const char *file = getenv(var);
    if (file && *file)
        return snprintf(buf, cap, "%s", file) < (int)cap;
    const char *home = getenv("HOME");
    if (!home || !*home)
        return 0;
    return snprintf(buf, cap, "%s/.aws/%s", home, name) < (int)cap;
}

static const char *profile_name(void)
{
    const char *p = getenv("AWS_PROFILE");
    return p && *p ? p : "default";
}

/* The profile's region from ~/.aws/config ([default] or [profile NAME]). */
static st_err config_region(st_s3_config *cfg)
{
    char path[4096], section[300];
    if (!aws_file(path, sizeof path, "AWS_CONFIG_FILE", "config"))
        return ST_OK;
    const char *p = profile_name();
    if (strcmp(p, "default") == 0)
        snprintf(section, sizeof section, "default");
    else
        snprintf(section, sizeof section, "profile %.250s", p);
    char *region = NULL;
    static const char *const names[] = {"region"};
    char **const slots[] = {&region};
    st_err e = ini_read(path, section, names, slots, 1);
    if (e == ST_ERR_NOT_FOUND)
        e = ST_OK;
    if (!e && region)
        snprintf(cfg->region, sizeof cfg->region, "%s", region);
    free(region);
    return e;
}

static st_err load_credentials(st_s3_config *cfg)
{
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    int have_id = id && *id, have_secret = secret && *secret;
    if (have_id && have_secret) {
        cfg->access_key_id = strdup(id);
        cfg->secret = strdup(secret);
        cfg->session_token = token && *token ? strdup(token) : NULL;
        if (!cfg->access_key_id || !cfg->secret || (token && *token && !cfg->session_token))
            return st_seterr(ST_ERR_NOMEM, "s3: out of memory");
        return ST_OK;
    }
    if (have_id != have_secret)
        return st_seterr(ST_ERR_PERMANENT, "S3 credentials: %s is set but %s is not",
                         have_id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                         have_id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
    const char *profile = profile_name();
    char path[4096];
    if (!aws_file(path, sizeof path, "AWS_SHARED_CREDENTIALS_FILE", "credentials"))
        return st_seterr(ST_ERR_PERMANENT,
                         "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                         "(HOME is unset, so there is no ~/.aws/credentials)");
    static const char *const names[] = {"aws_access_key_id", "aws_secret_access_key",
                                        "aws_session_token"};
    char **const slots[] = {&cfg->access_key_id, &cfg->secret, &cfg->session_token};
    st_err e = ini_read(path, profile, names, slots, 3);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(ST_ERR_PERMANENT,
                         "no S3 credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set "
                         "and %s cannot be read (%s)",
                         path, strerror(errno));
    if (!e && (!cfg->access_key_id || !cfg->secret))
        e = st_seterr(ST_ERR_PERMANENT,
                      "no S3 credentials: profile [%s] of %s lacks aws_access_key_id or "
                      "aws_secret_access_key (or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
                      profile, path);
    return e;
}

/* ---- loading it all ---- */

static st_err load_region(st_s3_config *cfg, const st_backend_opts *opts)
{
    const char *source;
    const char *r = setting(opts ? opts->s3_region : NULL, "--s3-region", "AWS_REGION", &source);
    if (!r)
        r = setting(NULL, NULL, "AWS_DEFAULT_REGION", &source);
    snprintf(cfg->region, sizeof cfg->region, "%s", DEFAULT_REGION);
    if (!r) {
        source = "the profile's config";
        st_err e = config_region(cfg);
        if (e)
            return e;
        r = cfg->region;
    }
    /* The region goes into a host name and the signing scope. */
    size_t n = strlen(r);
    if (n == 0 || n >= sizeof cfg->region ||
        strspn(r, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
        return st_seterr(ST_ERR_INVALID,
                         "S3 region from %s: expected a name such as us-east-1 (lower-case "
                         "letters, digits, '-')",
                         source);
    memmove(cfg->region, r, n + 1);
    return ST_OK;
}

static st_err load_endpoint(st_s3_config *cfg, const st_backend_opts *opts)
{
    const char *source;
    const char *ep =
        setting(opts ? opts->s3_endpoint : NULL, "--s3-endpoint", "CKPT_S3_ENDPOINT", &source);
    char derived[128];
    if (!ep) {
        /* AWS's regional endpoint (docs/S3.md). */
        snprintf(derived, sizeof derived, "https://s3.%s.amazonaws.com", cfg->region);
        ep = derived;
        source = "the region";
    }
    st_err e = parse_endpoint(cfg, ep, source);
    if (e)
        return e;

    const char *a = setting(opts ? opts->s3_addressing : NULL, "--s3-addressing",
                            "CKPT_S3_ADDRESSING", &source);
    if (!a)
        cfg->virtual_host = host_is_aws(cfg->host);
    else if (strcasecmp(a, "path") == 0)
        cfg->virtual_host = 0;
    else if (strcasecmp(a, "virtual") == 0)
        cfg->virtual_host = 1;
    else
        return st_seterr(ST_ERR_INVALID, "%s \"%.16s\": expected path or virtual", source, a);
    if (cfg->virtual_host &&
        (strpbrk(cfg->bucket, "_ABCDEFGHIJKLMNOPQRSTUVWXYZ") || strstr(cfg->bucket, "..")))
        return st_seterr(ST_ERR_INVALID,
                         "bucket \"%s\" cannot be addressed virtual-hosted (not a DNS name): use "
                         "--s3-addressing path",
                         cfg->bucket);
    return ST_OK;
}

static st_err load_ca_file(st_s3_config *cfg, const st_backend_opts *opts)
{
    const char *source;
    const char *ca =
        setting(opts ? opts->s3_ca_file : NULL, "--s3-ca-file", "CKPT_S3_CA_FILE", &source);
    if (!ca)
        return ST_OK;
    if (access(ca, R_OK) != 0)
        return st_seterr(ST_ERR_INVALID, "CA file %.200s from %s cannot be read: %s", ca, source,
                         strerror(errno));
    if (!(cfg->ca_file = strdup(ca)))
        return st_seterr(ST_ERR_NOMEM, "s3: out of memory");
    return ST_OK;
}

/* SSE-C: the key file is exactly the 32 raw bytes of the AES-256 key, a
 * private file (st_read_private_file). Only its base64 and that of its
 * MD5 are kept: the headers every request carries. */
static st_err load_sse_c_key(st_s3_config *cfg, const char *path, const char *source)
{
    unsigned char key[ST_S3_SSE_C_KEY_LEN], md5[EVP_MAX_MD_SIZE];
    unsigned md5_len = 0;
    size_t got = 0;
    char what[64];
    snprintf(what, sizeof what, "SSE-C key file (%s)", source);
    st_err e = st_read_private_file(path, what, key, sizeof key, &got);
    if (!e && got != ST_S3_SSE_C_KEY_LEN)
        e = st_seterr(ST_ERR_INVALID,
                      "%s %s: %zu bytes; the key must be exactly %d raw bytes (e.g. head -c 32 "
                      "/dev/urandom)",
                      what, path, got, ST_S3_SSE_C_KEY_LEN);
    if (!e && !EVP_Digest(key, got, md5, &md5_len, EVP_md5(), NULL))
        e = st_seterr(ST_ERR_NOMEM, "%s: MD5 failed", what);
    if (!e && !(cfg->sse_c_key_b64 = malloc(4 * ((ST_S3_SSE_C_KEY_LEN + 2) / 3) + 1)))
        e = st_seterr(ST_ERR_NOMEM, "s3: out of memory");
    if (!e) {
        EVP_EncodeBlock((unsigned char *)cfg->sse_c_key_b64, key, ST_S3_SSE_C_KEY_LEN);
        EVP_EncodeBlock((unsigned char *)cfg->sse_c_key_md5_b64, md5, (int)md5_len);
    }
    OPENSSL_cleanse(key, sizeof key);
    return e;
}

/* --s3-sse (or CKPT_S3_SSE): AES256 | aws:kms[:KEY-ID] | c:FILE. */
static st_err load_sse(st_s3_config *cfg, const st_backend_opts *opts)
{
    const char *source;
    const char *v = setting(opts ? opts->s3_sse : NULL, "--s3-sse", "CKPT_S3_SSE", &source);
    if (!v)
        return ST_OK;
    if (strcmp(v, "AES256") == 0) {
        cfg->sse = ST_S3_SSE_AES256;
        return ST_OK;
    }
    if (strcmp(v, "aws:kms") == 0 || strncmp(v, "aws:kms:", 8) == 0) {
        const char *id = v[7] ? v + 8 : "";
        if (v[7] && (!*id || strlen(id) >= sizeof cfg->sse_kms_key_id || strpbrk(id, "\r\n")))
            return st_seterr(ST_ERR_INVALID,
                             "%s aws:kms:KEY-ID: the key id is empty, has a line break or is "
                             "longer than %zu bytes",
                             source, sizeof cfg->sse_kms_key_id - 1);
        cfg->sse = ST_S3_SSE_KMS;
        snprintf(cfg->sse_kms_key_id, sizeof cfg->sse_kms_key_id, "%s", id);
        return ST_OK;
    }
    if (strncmp(v, "c:", 2) == 0 && v[2]) {
        cfg->sse = ST_S3_SSE_C;
        return load_sse_c_key(cfg, v + 2, source);
    }
    return st_seterr(ST_ERR_INVALID,
                     "%s \"%.40s\": expected AES256, aws:kms, aws:kms:KEY-ID or c:KEY-FILE", source,
                     v);
}

const char *st_s3_sse_name(const st_s3_config *cfg)
{
    switch (cfg->sse) {
    case ST_S3_SSE_AES256: return "AES256";
    case ST_S3_SSE_KMS: return "aws:kms";
    case ST_S3_SSE_C: return "c (SSE-C)";
    case ST_S3_SSE_NONE: break;
    }
    return "none";
}

st_err st_s3_config_load(st_s3_config *cfg, const char *url, const st_backend_opts *opts)
{
    if (!url || strncasecmp(url, "s3://", 5) != 0)
        return st_seterr(ST_ERR_INVALID, "s3 store URL must start with s3://");
    st_err e;
    if ((e = parse_url(cfg, url)) || (e = st_s3_signature_choice(opts, &cfg->signature)) ||
        (e = load_region(cfg, opts)) || (e = load_endpoint(cfg, opts)) ||
        (e = load_ca_file(cfg, opts)) || (e = load_sse(cfg, opts)) || (e = load_credentials(cfg)))
        return e;
    cfg->timeout_ms = opts && opts->timeout_ms ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
    cfg->stall_ms = opts && opts->stall_timeout_ms ? opts->stall_timeout_ms : DEFAULT_STALL_MS;
    cfg->observer = opts ? opts->observer : NULL;
    return ST_OK;
}

void st_s3_config_free(st_s3_config *cfg)
{
    if (!cfg)
        return;
    free_secret(&cfg->secret);
    free_secret(&cfg->session_token);
    free_secret(&cfg->sse_c_key_b64);
    OPENSSL_cleanse(cfg->sse_c_key_md5_b64, sizeof cfg->sse_c_key_md5_b64);
    free(cfg->access_key_id);
    free(cfg->ca_file);
    cfg->access_key_id = cfg->ca_file = NULL;
}

uint64_t st_s3_deadline_ms(const st_s3_config *cfg, uint64_t bytes)
{
    return cfg->timeout_ms + bytes / (1024 * 1024) * 1000;
}

st_err st_s3_full_key(const st_s3_config *cfg, const char *op, const char *key, char *buf)
{
    size_t n = strlen(key);
    if (cfg->prefix_len + n > ST_S3_KEY_MAX)
        return st_seterr(ST_ERR_INVALID,
                         "s3 %s: key of %zu bytes under prefix \"%s\" exceeds S3's %d-byte limit",
                         op, n, cfg->prefix, ST_S3_KEY_MAX);
    memcpy(buf, cfg->prefix, cfg->prefix_len);
    memcpy(buf + cfg->prefix_len, key, n + 1);
    return ST_OK;
}

int64_t st_s3_http_date_ns(const char *value)
{
    while (*value == ' ' || *value == '\t')
        value++;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(value, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!end)
        return 0;
    time_t t = timegm(&tm);
    return t > 0 ? (int64_t)t * 1000000000 : 0;
}

/* ---- get ---- */

static st_err past_end(const st_s3_config *cfg, const char *key, uint64_t off, uint64_t size)
{
    return st_seterr(ST_ERR_INVALID,
                     "s3 get s3://%s/%s%s: offset %" PRIu64 " is past the end (%" PRIu64 " bytes)",
                     cfg->bucket, cfg->prefix, key, off, size);
}

st_err st_s3_get(const st_s3_config *cfg, void *ctx, st_s3_range_fn range,
                 st_err (*stat)(void *ctx, const char *key, uint64_t *size), const char *key,
                 uint64_t off, uint64_t len, st_bytes *out, const st_get_sink *sink)
{
    if (out)
        st_bytes_clear(out);
    char fk[ST_S3_KEY_MAX + 1];
    st_err e = st_s3_full_key(cfg, "get", key, fk);
    if (e)
        return e;
    uint64_t size = 0;
    if (len == 0 || off >= ST_S3_RANGE_LEN_MAX) {
        if ((e = stat(ctx, key, &size)) != ST_OK)
            return e;
        if (off > size)
            return past_end(cfg, key, off, size);
        if (len == 0 || off == size)
            return ST_OK;
    }
    int refused = 0;
    e = range(ctx, key, fk, off, len, out, sink, &refused);
    if (!refused)
        return e;
    /* 416: the range starts at or past the end (or the object is empty).
     * At the end is an empty result by the contract; past it an error. */
    if ((e = stat(ctx, key, &size)) != ST_OK)
        return e;
    if (off == size)
        return ST_OK;
    if (off > size)
        return past_end(cfg, key, off, size);
    return st_seterr(ST_ERR_TRANSIENT,
                     "s3 get s3://%s/%s%s: range refused, yet the object now has %" PRIu64
                     " bytes (replaced meanwhile?)",
                     cfg->bucket, cfg->prefix, key, size);
}

/* ---- errors ---- */

/*
 * S3 error codes with a cause of their own (AWS S3 API reference, "Error
 * responses"; docs/S3.md). Codes not listed are classified by HTTP status.
 */
static const struct {
    const char *code;
    st_err class;
    const char *cause;
} s3_codes[] = {
    {"NoSuchKey", ST_ERR_NOT_FOUND, "not found"},
    {"NoSuchBucket", ST_ERR_PERMANENT, "no such bucket (NoSuchBucket): check the store URL"},
    {"SignatureDoesNotMatch", ST_ERR_PERMANENT,
     "S3 refused the signature (SignatureDoesNotMatch): check AWS_SECRET_ACCESS_KEY"},
    {"InvalidAccessKeyId", ST_ERR_PERMANENT,
     "S3 does not know the access key (InvalidAccessKeyId): check AWS_ACCESS_KEY_ID"},
    {"AuthorizationHeaderMalformed", ST_ERR_PERMANENT,
     "S3 refused the signing region (AuthorizationHeaderMalformed): set --s3-region (or "
     "AWS_REGION) to the bucket's region"},
    {"PermanentRedirect", ST_ERR_PERMANENT,
     "the bucket is in another region (PermanentRedirect): set --s3-region (or AWS_REGION) to "
     "the bucket's region, or --s3-endpoint"},
    {"IllegalLocationConstraintException", ST_ERR_PERMANENT,
     "the bucket is in another region (IllegalLocationConstraintException): set --s3-region"},
    {"ExpiredToken", ST_ERR_PERMANENT,
     "the session token has expired (ExpiredToken): refresh AWS_SESSION_TOKEN and the keys "
     "issued with it"},
    {"TokenRefreshRequired", ST_ERR_PERMANENT,
     "the session token has expired (TokenRefreshRequired): refresh AWS_SESSION_TOKEN"},
    {"InvalidToken", ST_ERR_PERMANENT,
     "S3 refused the session token (InvalidToken): check AWS_SESSION_TOKEN"},
    {"RequestTimeTooSkewed", ST_ERR_PERMANENT,
     "S3 refused the request time (RequestTimeTooSkewed): fix this machine's clock"},
    {"AccessDenied", ST_ERR_PERMANENT,
     "access denied (AccessDenied): check the credentials and the bucket's permissions"},
    {"AccountProblem", ST_ERR_PERMANENT, "the account is blocked (AccountProblem)"},
    {"NotSignedUp", ST_ERR_PERMANENT, "the account is not signed up for S3 (NotSignedUp)"},
    {"Redirect", ST_ERR_PERMANENT, "redirected (Redirect): wrong endpoint or region"},
    {"InvalidArgument", ST_ERR_INVALID, "invalid request (InvalidArgument)"},
    {"InvalidURI", ST_ERR_INVALID, "invalid request (InvalidURI)"},
    {"KeyTooLong", ST_ERR_INVALID, "key too long (KeyTooLong)"},
    {"EntityTooLarge", ST_ERR_INVALID, "object too large (EntityTooLarge)"},
    {"MetadataTooLarge", ST_ERR_INVALID, "metadata too large (MetadataTooLarge)"},
    {"InvalidRange", ST_ERR_INVALID, "range not satisfiable (InvalidRange)"},
    {"SlowDown", ST_ERR_TRANSIENT, "the server asks to slow down (SlowDown)"},
    {"RequestTimeout", ST_ERR_TRANSIENT, "the server timed out the request (RequestTimeout)"},
    {"InternalError", ST_ERR_TRANSIENT, "server error (InternalError)"},
    {"ServiceUnavailable", ST_ERR_TRANSIENT, "the server is unavailable (ServiceUnavailable)"},
    {"OperationAborted", ST_ERR_TRANSIENT, "a conflicting operation (OperationAborted)"},
    {"IncompleteBody", ST_ERR_TRANSIENT, "the body arrived incomplete (IncompleteBody)"},
    {"TemporaryRedirect", ST_ERR_TRANSIENT, "temporary redirect (TemporaryRedirect)"},
    {"XAmzContentSHA256Mismatch", ST_ERR_TRANSIENT,
     "the server got other bytes than were sent (XAmzContentSHA256Mismatch)"},
    {"BadDigest", ST_ERR_TRANSIENT, "the server got other bytes than were sent (BadDigest)"},
    {"InvalidDigest", ST_ERR_TRANSIENT,
     "the server got other bytes than were sent (InvalidDigest)"},
};

st_err st_s3_classify(st_s3_transport net, int http_status, const char *code, const char **cause)
{
    switch (net) {
    case ST_S3_NET_OK: break;
    case ST_S3_NET_FAILED: *cause = "connection failed"; return ST_ERR_TRANSIENT;
    case ST_S3_NET_TIMEOUT: *cause = "timed out"; return ST_ERR_TRANSIENT;
    case ST_S3_NET_TLS_UNTRUSTED:
        *cause = "the server's TLS certificate is not trusted: pass --s3-ca-file with the CA that "
                 "signed it (or fix the system CA store)";
        return ST_ERR_PERMANENT;
    case ST_S3_NET_TLS_FAILED:
        *cause = "TLS failed (check --s3-ca-file and that the endpoint speaks https)";
        return ST_ERR_PERMANENT;
    }
    if (code && *code)
        for (size_t i = 0; i < sizeof s3_codes / sizeof s3_codes[0]; i++)
            if (strcmp(code, s3_codes[i].code) == 0) {
                *cause = s3_codes[i].cause;
                return s3_codes[i].class;
            }
    if (code && *code && http_status == 0) {
        /* A code we do not know, and no status to go by (libs3). */
        *cause = "refused by the server";
        return ST_ERR_PERMANENT;
    }
    if (http_status == 404) {
        *cause = "not found";
        return ST_ERR_NOT_FOUND;
    }
    if (http_status == 408 || http_status == 429 || http_status == 409 || http_status >= 500 ||
        http_status == 307 || http_status < 300) {
        *cause = "temporary failure";
        return ST_ERR_TRANSIENT;
    }
    if (http_status == 401 || http_status == 403) {
        *cause = "access denied (HTTP 403, no S3 error code): check the credentials, the region "
                 "and the bucket's permissions";
        return ST_ERR_PERMANENT;
    }
    if (http_status >= 300 && http_status < 400) {
        *cause = "redirected (wrong endpoint or region for this bucket)";
        return ST_ERR_PERMANENT;
    }
    if (http_status == 416) {
        *cause = "range not satisfiable";
        return ST_ERR_INVALID;
    }
    *cause = "invalid request";
    return http_status == 400 ? ST_ERR_INVALID : ST_ERR_PERMANENT;
}

void st_s3_scrub_copy(char *dst, size_t cap, const char *src, const char *secret)
{
    size_t o = 0, sl = secret ? strlen(secret) : 0;
    while (*src && o + 1 < cap) {
        if (sl && strncmp(src, secret, sl) == 0) {
            const char *r = "[redacted]";
            while (*r && o + 1 < cap)
                dst[o++] = *r++;
            src += sl;
            continue;
        }
        char ch = *src++;
        dst[o++] = (ch == '\n' || ch == '\r') ? ' ' : ch;
    }
    dst[o] = '\0';
}

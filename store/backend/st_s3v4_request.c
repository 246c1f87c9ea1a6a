/*
 * st_s3v4_request — one request of the V4 backend (st_s3v4_request.h;
 * st_backend_s3v4.c's file comment says how requests are driven, signed
 * and classified).
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/st_backend.h"
#include "backend/st_s3_common.h"
#include "backend/st_s3_sigv4.h"
#include "backend/st_s3v4_request.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the connection pool ---- */

void v4_conn_free(v4_conn *k)
{
    if (!k)
        return;
    if (k->easy)
        curl_easy_cleanup(k->easy);
    if (k->multi)
        curl_multi_cleanup(k->multi);
    free(k);
}

static v4_conn *pool_get(v4_ctx *c)
{
    v4_conn *k = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->pool_n)
        k = c->pool[--c->pool_n];
    pthread_mutex_unlock(&c->pool_lock);
    if (k)
        return k;
    if (!(k = calloc(1, sizeof *k)) || !(k->multi = curl_multi_init()) ||
        !(k->easy = curl_easy_init())) {
        v4_conn_free(k);
        return NULL;
    }
    return k;
}

static void pool_put(v4_ctx *c, v4_conn *k)
{
    pthread_mutex_lock(&c->pool_lock);
    if (c->pool_n < POOL_MAX) {
        c->pool[c->pool_n++] = k;
        k = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    v4_conn_free(k);
}

/* ---- callbacks ---- */

/* A 2xx body piece for the sink: handed on where it lies in libcurl's
 * receive buffer (no copy). 0 aborts the transfer. */
static size_t body_to_sink(v4_req *r, const char *buf, size_t len)
{
    if (r->partial_only && r->status == 200) {
        r->sink_err = st_seterr(ST_ERR_PERMANENT,
                                "s3 get s3://%s/%s%s at %s: the server ignored "
                                "the Range header",
                                r->c->cfg.bucket, r->c->cfg.prefix, r->key, r->c->cfg.endpoint);
    } else if (r->sunk + len > r->want_max) {
        r->overflow = 1;
        return 0;
    } else {
        r->sink_err = r->sink->on_bytes(r->sink->arg, r->sunk, (const uint8_t *)buf, len);
    }
    if (r->sink_err) {
        snprintf(r->sink_msg, sizeof r->sink_msg, "%s", st_errmsg());
        return 0;
    }
    r->sunk += len;
    return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg)
{
    v4_req *r = arg;
    size_t len = size * n;
    r->moved += len;
    if (r->status == 0 || r->status / 100 != 2 || (!r->out && !r->sink)) {
        if (r->err_body.len + len <= ERR_BODY_MAX && st_bytes_append(&r->err_body, buf, len))
            r->nomem = 1;
        return len;
    }
    if (r->sink)
        return body_to_sink(r, buf, len);
    if ((uint64_t)r->out->len + len > r->want_max) {
        r->overflow = 1;
        return 0; /* aborts the transfer */
    }
    if (st_bytes_append(r->out, buf, len) != ST_OK) {
        r->nomem = 1;
        return 0;
    }
    return len;
}

/* 1 if the answer header line buf says the object is stored with the
 * encryption cfg asks for: AWS and RGW name it in every answer to a PUT
 * (x-amz-server-side-encryption: AES256 | aws:kms, or ...-customer-
 * algorithm: AES256 for SSE-C). A store that ignores the request header
 * (RGW 16 with AES256) names nothing. */
static int sse_confirms(const st_s3_config *g, const char *buf, size_t len)
{
    const char *colon = memchr(buf, ':', len);
    if (!colon)
        return 0;
    size_t name_len = (size_t)(colon - buf);
    const char *v = colon + 1;
    while (*v == ' ')
        v++;
    size_t vlen = (size_t)(buf + len - v);
    while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
        vlen--;
    const char *want = g->sse == ST_S3_SSE_KMS ? "aws:kms" : "AES256";
    const char *name = g->sse == ST_S3_SSE_C ? "x-amz-server-side-encryption-customer-algorithm"
                                             : "x-amz-server-side-encryption";
    return name_len == strlen(name) && strncasecmp(buf, name, name_len) == 0 &&
           vlen == strlen(want) && strncmp(v, want, vlen) == 0;
}

/* Learns the status from the status line before any body byte, and
 * reserves the whole body once from Content-Length. */
static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
    v4_req *r = arg;
    size_t len = size * n;
    r->moved += len;
    int st;
    if (len > 9 && strncmp(buf, "HTTP/", 5) == 0 && sscanf(buf, "HTTP/%*s %d", &st) == 1)
        r->status = st; /* each status line, also after a 100 Continue */
    else if (len > 5 && strncasecmp(buf, "Date:", 5) == 0)
        r->date_ns = st_s3_http_date_ns(buf + 5);
    else if (len > 14 && strncasecmp(buf, "Last-Modified:", 14) == 0)
        r->last_modified_ns = st_s3_http_date_ns(buf + 14);
    else if (r->sse && len > 28 && strncasecmp(buf, "x-amz-server-side-encryption", 28) == 0)
        r->sse_confirmed |= sse_confirms(&r->c->cfg, buf, len);
    else if (r->out && r->status / 100 == 2 && len > 15 &&
             strncasecmp(buf, "Content-Length:", 15) == 0) {
        unsigned long long cl = strtoull(buf + 15, NULL, 10);
        if (cl <= r->want_max && cl <= SIZE_MAX / 2 && st_bytes_reserve(r->out, (size_t)cl))
            r->nomem = 1;
    }
    return len;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)ut;
    v4_req *r = arg;
    /* The upload has no callback of ours (the body is POSTFIELDS, sent
     * without a copy): its progress moves the stall clock here. Downloads
     * count in on_body and on_header. */
    (void)dn;
    if ((uint64_t)un != r->uploaded) {
        r->moved += (uint64_t)un - r->uploaded;
        r->uploaded = (uint64_t)un;
    }
    return 0;
}

/* ---- one request ---- */

/* Sets what every request has in common on the (reset) easy handle. */
static void setup_easy(v4_ctx *c, CURL *e, v4_req *r, const char *url, struct curl_slist *hdr)
{
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_SHARE, c->share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (!r->self_signed) {
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, c->sigv4);
        curl_easy_setopt(e, CURLOPT_USERNAME, c->cfg.access_key_id);
        curl_easy_setopt(e, CURLOPT_PASSWORD, c->cfg.secret);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    if (r->recv_buffer)
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, r->recv_buffer);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, r);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->cfg.stall_ms);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->cfg.ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, c->cfg.ca_file);
}

/*
 * Drives the request set up on k until it completes, stalls or passes its
 * deadline (sized for `bytes`); r->cc and r->status say how it ended.
 */
static void run(v4_ctx *c, v4_conn *k, v4_req *r, uint64_t bytes)
{
    uint64_t start = now_ms(), last_move = start, seen = 0;
    uint64_t deadline = st_s3_deadline_ms(&c->cfg, bytes);
    r->cc = CURLE_OK;
    curl_multi_add_handle(k->multi, k->easy);
    for (;;) {
        int running = 0;
        if (curl_multi_perform(k->multi, &running) != CURLM_OK) {
            r->cc = CURLE_OUT_OF_MEMORY;
            break;
        }
        if (!running) {
            int left;
            CURLMsg *m = curl_multi_info_read(k->multi, &left);
            r->cc = m && m->msg == CURLMSG_DONE ? m->data.result : CURLE_RECV_ERROR;
            break;
        }
        uint64_t now = now_ms();
        if (r->moved != seen) {
            seen = r->moved;
            last_move = now;
        }
        if (now - start >= deadline || now - last_move >= c->cfg.stall_ms) {
            r->timed_out = now - start >= deadline ? 2 : 1;
            r->cc = CURLE_OPERATION_TIMEDOUT;
            break;
        }
        if (st_backend_observer_stops(c->cfg.observer)) {
            r->timed_out = 3;
            r->cc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        curl_multi_poll(k->multi, NULL, 0, POLL_MS, NULL);
    }
    /* Removing an unfinished transfer closes its connection; a finished
     * one stays in the multi's cache for the next request. */
    curl_multi_remove_handle(k->multi, k->easy);
    if (r->cc == CURLE_OK) {
        long st = 0;
        curl_off_t cl = -1;
        curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &st);
        curl_easy_getinfo(k->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        r->status = st;
        r->content_length = cl;
    }
}

/* "Content-MD5: " and the base64 of the MD5 of body into line (64 bytes). */
st_err v4_content_md5_line(const void *body, size_t len, char line[64])
{
    unsigned char md5[EVP_MAX_MD_SIZE];
    unsigned md5_len = 0;
    static const char name[] = "Content-MD5: ";
    if (!EVP_Digest(body, len, md5, &md5_len, EVP_md5(), NULL))
        return st_seterr(ST_ERR_NOMEM, "s3: MD5 failed");
    memcpy(line, name, sizeof name);
    EVP_EncodeBlock((unsigned char *)line + sizeof name - 1, md5, (int)md5_len);
    return ST_OK;
}

/* Overwrites every line of a request's header list (it may hold the SSE-C
 * key or the session token), then frees it. */
static void headers_free(struct curl_slist *hdr)
{
    for (struct curl_slist *h = hdr; h; h = h->next)
        OPENSSL_cleanse(h->data, strlen(h->data));
    curl_slist_free_all(hdr);
}

/*
 * Signs a request carrying SSE headers with st_s3_sigv4 (curl 7.x signs
 * SSE-C's and SSE-KMS's headers in the wrong order: st_s3_sigv4.h): Host,
 * the payload hash, the session token and the SSE headers are signed;
 * Host, x-amz-date and Authorization are appended to *hdr. The other
 * headers (Content-Type, Range, Content-MD5) go unsigned.
 */
static st_err sign_self(v4_ctx *c, v4_req *r, const char *url, const char *query,
                        const char *sha_hdr, const char *tok_line, struct curl_slist **hdr)
{
    char host_line[ST_S3_HOST_MAX + ST_S3_BUCKET_MAX + 16], date_line[ST_S3_SIGV4_AMZDATE_LINE_MAX];
    char auth_line[1024], path[ST_S3_BUCKET_MAX + ST_S3_KEY_MAX + 8];
    const char *signed_lines[8];
    size_t n = 0;
    if (c->cfg.virtual_host)
        snprintf(host_line, sizeof host_line, "Host: %s.%s", c->cfg.bucket, c->cfg.host);
    else
        snprintf(host_line, sizeof host_line, "Host: %s", c->cfg.host);
    const char *p = strchr(strstr(url, "://") + 3, '/');
    snprintf(path, sizeof path, "%.*s", (int)strcspn(p, "?"), p);
    signed_lines[n++] = host_line;
    signed_lines[n++] = sha_hdr;
    if (tok_line)
        signed_lines[n++] = tok_line;
    for (size_t i = 0; r->sse[i] && n + 1 < sizeof signed_lines / sizeof signed_lines[0]; i++)
        signed_lines[n++] = r->sse[i];
    signed_lines[n] = NULL;
    st_s3_sigv4_req sr = {.method = r->self_method,
                          .path = path,
                          .query = query,
                          .headers = signed_lines,
                          .access_key_id = c->cfg.access_key_id,
                          .secret = c->cfg.secret,
                          .region = c->cfg.region,
                          .now = time(NULL)};
    st_err e = st_s3_sigv4_sign(&sr, date_line, auth_line, sizeof auth_line);
    struct curl_slist *h;
    const char *add[] = {host_line, date_line, auth_line};
    for (size_t i = 0; !e && i < 3; i++)
        if (!(h = curl_slist_append(*hdr, add[i])))
            e = st_seterr(ST_ERR_NOMEM, "s3 %s: out of memory", r->op);
        else
            *hdr = h;
    OPENSSL_cleanse(auth_line, sizeof auth_line);
    return e;
}

/* The S3 error body <Error><Code/><Message/></Error> into r->code/msg. */
static void parse_error_body(v4_req *r)
{
    if (!r->err_body.len)
        return;
    xmlDocPtr doc = xmlReadMemory((const char *)r->err_body.data, (int)r->err_body.len, NULL, NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
    if (root && xmlStrcmp(root->name, BAD_CAST "Error") == 0) {
        for (xmlNodePtr n = root->children; n; n = n->next) {
            if (n->type != XML_ELEMENT_NODE)
                continue;
            int is_code = xmlStrcmp(n->name, BAD_CAST "Code") == 0;
            if (!is_code && xmlStrcmp(n->name, BAD_CAST "Message") != 0)
                continue;
            xmlChar *t = xmlNodeGetContent(n);
            if (t && is_code)
                snprintf(r->code, sizeof r->code, "%s", (const char *)t);
            else if (t)
                st_s3_scrub_copy(r->msg, sizeof r->msg, (const char *)t, r->c->cfg.secret);
            xmlFree(t);
        }
    }
    xmlFreeDoc(doc);
}

static st_s3_transport transport_of(const v4_req *r)
{
    switch (r->cc) {
    case CURLE_OK: return ST_S3_NET_OK;
    case CURLE_OPERATION_TIMEDOUT: return ST_S3_NET_TIMEOUT;
    case CURLE_PEER_FAILED_VERIFICATION: return ST_S3_NET_TLS_UNTRUSTED;
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ENGINE_NOTFOUND: return ST_S3_NET_TLS_FAILED;
    default: return ST_S3_NET_FAILED;
    }
}

/* The message and class of a failed request r. */
static st_err req_error(const v4_req *r)
{
    const st_s3_config *g = &r->c->cfg;
    if (r->nomem || r->cc == CURLE_OUT_OF_MEMORY)
        return st_seterr(ST_ERR_NOMEM, "s3 %s s3://%s/%s%s: out of memory", r->op, g->bucket,
                         g->prefix, r->key);
    if (r->timed_out == 3)
        return st_seterr(ST_ERR_TRANSIENT, "s3 %s s3://%s/%s%s at %s: aborted: %s", r->op,
                         g->bucket, g->prefix, r->key, g->endpoint, ST_S3_STOPPED);
    if (r->timed_out)
        return st_seterr(ST_ERR_TRANSIENT, "s3 %s s3://%s/%s%s at %s: timed out: %s %u ms", r->op,
                         g->bucket, g->prefix, r->key, g->endpoint,
                         r->timed_out == 1 ? "no byte moved for" : "not done within",
                         r->timed_out == 1 ? g->stall_ms : g->timeout_ms);
    const char *cause;
    st_err e = st_s3_classify(transport_of(r), (int)r->status, r->code, &cause);
    if (e == ST_OK)
        e = ST_ERR_TRANSIENT;
    if (r->cc != CURLE_OK)
        return st_seterr(e, "s3 %s s3://%s/%s%s at %s: %s: %s", r->op, g->bucket, g->prefix, r->key,
                         g->endpoint, cause, r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->cc));
    return st_seterr(e, "s3 %s s3://%s/%s%s at %s: %s (HTTP %ld%s%s)%s%s", r->op, g->bucket,
                     g->prefix, r->key, g->endpoint, cause, r->status, r->code[0] ? " " : "",
                     r->code, r->msg[0] ? ": " : "", r->msg);
}

/* e (a refused request's error, message set), or ST_ERR_PERMANENT with
 * what to do appended when the refusal is about SSE: a plain-http request
 * with SSE headers (RGW: "rgw crypt require ssl"), a read of an SSE-C
 * object without the key, an SSE-C read with another key than the
 * object's. */
static st_err sse_hint(const v4_ctx *c, const v4_req *r, st_err e)
{
    const char *hint = NULL;
    int sent = r->sse && r->sse[0];
    if (r->status != 400 && r->status != 403)
        return e;
    if (sent && !c->cfg.https && strcmp(r->code, "InvalidRequest") == 0)
        hint = "the store refuses server-side encryption over plain http (Ceph RGW: rgw crypt "
               "require ssl): use an https endpoint";
    else if (!sent && strstr(r->msg, "Server Side Encryption"))
        hint = "the object is encrypted with a key of the client's (SSE-C): give --s3-sse "
               "c:KEY-FILE";
    else if (sent && c->cfg.sse == ST_S3_SSE_C && strcmp(r->op, "put") != 0)
        hint = "is the --s3-sse c:KEY-FILE key the one the object was written with?";
    /* Permanent, as a refused signature is, whether the store said 400
     * (RGW) or 403 (AWS): the same exit code for the same mistake. */
    return hint ? st_seterr(ST_ERR_PERMANENT, "%s; %s", st_errmsg(), hint) : e;
}

/*
 * One request: method on the object name `name` ("" for the bucket) with
 * an optional query (already canonical), body (PUT, POST) and extra
 * headers (a NULL-terminated list, or NULL: a Range, a Content-Type). On a 2xx answer returns ST_OK
 * with r->status set; otherwise r->code/msg are filled and the classified error is returned.
 */
st_err v4_request(v4_ctx *c, v4_req *r, const char *method, const char *name, const char *query,
                  const void *body, size_t body_len, const char *const *extra)
{
    char url[sizeof c->base + ST_S3_KEY_MAX + 2 * ST_S3_KEY_MAX * 3 + 128];
    /* The bucket itself is "/bucket" in path style, not "/bucket/": the
     * path is signed as written, and s3rver signs "/bucket". */
    size_t base_len = strlen(c->base) - (!c->cfg.virtual_host && !name[0]);
    snprintf(url, sizeof url, "%.*s%s%s%s", (int)base_len, c->base, name, query ? "?" : "",
             query ? query : "");

    char sha_hdr[96] = "x-amz-content-sha256: " EMPTY_SHA256;
    if (body) {
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256(body, body_len, md);
        char *p = sha_hdr + strlen("x-amz-content-sha256: ");
        for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
            sprintf(p + 2 * i, "%02x", md[i]);
    }
    struct curl_slist *hdr = NULL, *h;
    static const char tok_hdr[] = "x-amz-security-token: ";
    char *tok_line = NULL;
    st_err e = ST_OK;
    int nomem = !(h = curl_slist_append(hdr, sha_hdr)) || !(hdr = h);
    for (size_t i = 0; extra && extra[i] && !nomem; i++)
        nomem = !(h = curl_slist_append(hdr, extra[i])) || !(hdr = h);
    for (size_t i = 0; r->sse && r->sse[i] && !nomem; i++)
        nomem = !(h = curl_slist_append(hdr, r->sse[i])) || !(hdr = h);
    if (nomem) {
        e = st_seterr(ST_ERR_NOMEM, "s3 %s: out of memory", r->op);
        goto out;
    }
    if (c->cfg.session_token) {
        size_t n = strlen(tok_hdr) + strlen(c->cfg.session_token) + 1;
        if (!(tok_line = malloc(n)) ||
            (snprintf(tok_line, n, "%s%s", tok_hdr, c->cfg.session_token),
             !(h = curl_slist_append(hdr, tok_line))) ||
            !(hdr = h)) {
            e = st_seterr(ST_ERR_NOMEM, "s3 %s: out of memory", r->op);
            goto out;
        }
    }
    r->self_signed = r->sse && r->sse[0];
    r->self_method = method;
    if (r->self_signed && (e = sign_self(c, r, url, query, sha_hdr, tok_line, &hdr)))
        goto out;
    /* No "Expect:" line to suppress curl's 100-continue: curl would sign
     * that empty header and then not send it, which RGW (rightly) refuses
     * as SignatureDoesNotMatch. The 100-continue round trip costs little
     * and lets a refusal arrive before the body is sent. */
    v4_conn *k = pool_get(c);
    if (!k) {
        e = st_seterr(ST_ERR_NOMEM, "s3 %s: cannot create a curl handle", r->op);
        goto out;
    }
    curl_easy_reset(k->easy); /* keeps the connection cache and the share */
    setup_easy(c, k->easy, r, url, hdr);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(k->easy, CURLOPT_NOBODY, 1L);
    } else if (body) {
        curl_easy_setopt(k->easy, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(k->easy, CURLOPT_POSTFIELDS, body_len ? body : "");
        curl_easy_setopt(k->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(k->easy, CURLOPT_CUSTOMREQUEST, method);
    }
    run(c, k, r, body ? body_len : (r->want_max < UINT64_MAX ? r->want_max : 0));
    /* A handle whose transfer was cut leaves no state behind: reusable. */
    pool_put(c, k);
    if (r->sink_err) { /* the sink's message, not libcurl's "write error" */
        e = st_seterr(r->sink_err, "%s", r->sink_msg);
        goto out;
    }
    if (r->cc == CURLE_OK && r->status / 100 == 2 && !r->nomem && !r->overflow)
        goto out;
    if (r->overflow) {
        e = st_seterr(ST_ERR_PERMANENT,
                      "s3 %s s3://%s/%s%s at %s: the server sent more than the %" PRIu64
                      " bytes asked for (does it honour Range?)",
                      r->op, c->cfg.bucket, c->cfg.prefix, r->key, c->cfg.endpoint, r->want_max);
        goto out;
    }
    parse_error_body(r);
    if (strcmp(r->code, "NoSuchKey") == 0)
        atomic_store(&c->bucket_seen, 1); /* the bucket answered for its keys */
    e = sse_hint(c, r, req_error(r));
out:
    if (e == ST_OK)
        atomic_store(&c->bucket_seen, 1);
    headers_free(hdr);
    if (tok_line) {
        explicit_bzero(tok_line, strlen(tok_line));
        free(tok_line);
    }
    st_bytes_free(&r->err_body);
    return e;
}

void v4_req_init(v4_req *r, v4_ctx *c, const char *op, const char *key)
{
    memset(r, 0, sizeof *r);
    r->c = c;
    r->op = op;
    r->key = key;
    r->want_max = UINT64_MAX;
}

/* v4_req_init() of op on one object, whose full name goes into r->full_key,
 * so that an op opens with this one call. */
st_err v4_object_req_init(v4_req *r, v4_ctx *c, const char *op, const char *key)
{
    v4_req_init(r, c, op, key);
    return st_s3_full_key(&c->cfg, op, key, r->full_key);
}

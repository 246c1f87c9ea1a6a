/*
 * st_backend_s3v4 — the s3:// backend signing with AWS signature V4, on
 * libcurl (CURLOPT_AWS_SIGV4, curl >= 7.75), XML answers parsed with
 * libxml2. The same contract, configuration (st_s3_common.h) and error
 * classes as the V2 backend on libs3 (st_backend_s3.c); docs/S3.md has the
 * user's view. This file holds the ops, batched delete, listing, open and
 * close; one request (the pool, libcurl's callbacks, the error classes) is
 * st_s3v4_request.c.
 *
 * URL: s3://bucket[/prefix]; key k is the object "prefix/k". Path-style
 * (endpoint/bucket/key) or virtual-hosted (bucket.endpoint/key)
 * addressing. Keys are [A-Za-z0-9._/-] (st_key_is_valid), which need no
 * percent-encoding in a path; list queries are written sorted and encoded
 * because curl 7.88 signs the query exactly as written.
 *
 * Payload hash: PUT sends the real SHA-256 of the body in
 * x-amz-content-sha256, so the server checks the bytes it got (s3rver
 * ignores Content-MD5; RGW and AWS answer a mismatch with 400, and
 * UNSIGNED-PAYLOAD would let a corrupted body through). Every other request
 * sends the hash of the empty body. curl 7.88 signs the value we send but
 * does not add the header itself.
 *
 * Content-MD5: only on DeleteObjects, where S3 requires it. RGW and AWS
 * check it on a PUT too, but they check the signed SHA-256 already, and
 * MD5 would more than double the hashing of a pack (docs/S3.md, "Checksums
 * the server verifies"). A refusal of a body that arrived other than sent
 * (XAmzContentSHA256Mismatch, BadDigest, InvalidDigest) is transient: the
 * retry sends it again.
 *
 * Conditional PUT (put_new, docs/S3.md): If-None-Match: *, a 412 is
 * ST_ERR_EXISTS. Whether the store honours the header is probed once per
 * open, at the first put_new (probe_cond_put); where it does not, put_new
 * is ST_ERR_UNSUPPORTED and sends nothing.
 *
 * Server-side encryption (--s3-sse, docs/S3.md): SSE-S3 and SSE-KMS
 * headers on every PUT; SSE-C's three headers (algorithm, key, key MD5) on
 * every PUT, GET (ranged or streamed) and HEAD of an object. The key is in
 * cfg and in ctx's header lines only, both wiped on close, and each
 * request's curl header list is wiped before it is freed.
 *
 * Requests. Every op is one blocking request on the caller's thread,
 * driven through a curl multi handle so that this file checks its clocks
 * every 100 ms: stall (no byte moved for stall_ms; CURLOPT_LOW_SPEED_TIME
 * would only count whole seconds) and deadline (timeout_ms + 1 s/MiB). A
 * request past either is removed from the multi handle (which closes its
 * connection) and reported ST_ERR_TRANSIENT, as is one the observer stops
 * (st_backend_observer: a caller past its deadline). Retrying is the retry
 * wrapper's job (st_backend_open.c wraps every backend). curl reports a
 * body cut short (CURLE_PARTIAL_FILE) and a cut XML listing does not
 * parse, so no answer is taken as complete unless it is.
 *
 * Connections. A pool of {multi, easy} pairs per instance: the multi keeps
 * its connection cache across requests, so a thread reuses a warm,
 * kept-alive connection; N threads at once use N pairs. DNS answers and
 * TLS sessions are shared by all pairs (a CURLSH, locked per data kind).
 *
 * GET bodies are appended straight into the caller's st_bytes, reserved
 * once from Content-Length: the only copy is curl's buffer into it.
 *
 * Secrets: the secret and the session token are in cfg (zeroed on close)
 * and handed to curl for signing; no message quotes them, and server text
 * is scrubbed of the secret before it is quoted.
 *
 * Threads: any op from any thread, concurrently. Shared state: cfg (read
 * only), the pool (pool_lock), the share (share_locks), bucket_seen and
 * cond_put (atomic; cond_lock serialises the probe). curl and libxml2 are
 * initialised once per process.
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
#include <unistd.h>

#include "backend/st_backend.h"
#include "backend/st_s3_common.h"
#include "backend/st_s3_sigv4.h"
#include "backend/st_s3v4_request.h"

/* ---- process state ---- */

static pthread_once_t v4_once = PTHREAD_ONCE_INIT;
static CURLcode v4_init_status;

static void v4_init_once(void)
{
    v4_init_status = curl_global_init(CURL_GLOBAL_DEFAULT);
    xmlInitParser(); /* libxml2 is thread-safe once initialised */
}

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *arg)
{
    (void)h;
    (void)a;
    pthread_mutex_lock(&((v4_ctx *)arg)->share_locks[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *arg)
{
    (void)h;
    pthread_mutex_unlock(&((v4_ctx *)arg)->share_locks[d]);
}

/* ---- ops ---- */

/* One PUT of data under key into r, with If-None-Match: * when
 * create_only; the request's own result (put_object judges it). */
static st_err put_request(v4_ctx *c, v4_req *r, const char *key, const void *data, size_t len,
                          int create_only)
{
    static const char *const plain[] = {"Content-Type: application/octet-stream", NULL};
    static const char *const create[] = {"Content-Type: application/octet-stream",
                                         "If-None-Match: *", NULL};
    st_err e = v4_object_req_init(r, c, "put", key);
    if (e)
        return e;
    r->sse = c->put_sse;
    return v4_request(c, r, "PUT", r->full_key, NULL, data ? data : "", len,
                      create_only ? create : plain);
}

/* put, and put_new once the store is known to honour If-None-Match: a
 * 412 to a create is ST_ERR_EXISTS. */
static st_err put_object(v4_ctx *c, const char *key, const void *data, size_t len, int create_only)
{
    v4_req r;
    st_err e = put_request(c, &r, key, data, len, create_only);
    if (e && create_only && r.status == 412)
        return st_seterr(ST_ERR_EXISTS, "s3 put s3://%s/%s%s at %s: exists (HTTP 412 %s)",
                         c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint, r.code);
    if (!e && c->cfg.sse != ST_S3_SSE_NONE && !r.sse_confirmed)
        return st_seterr(ST_ERR_PERMANENT,
                         "s3 put s3://%s/%s%s at %s: the store took the object but its answer "
                         "does not confirm --s3-sse %s (it ignored the request and may keep the "
                         "object unencrypted): use a mode the store supports (docs/S3.md)",
                         c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint,
                         st_s3_sse_name(&c->cfg));
    /* A bucket policy that demands encryption answers a PUT without it
     * with a plain AccessDenied: the one refusal a PUT meets alone. */
    if (e == ST_ERR_PERMANENT && c->cfg.sse == ST_S3_SSE_NONE && r.status == 403 &&
        strcmp(r.code, "AccessDenied") == 0)
        e = st_seterr(e,
                      "%s; the bucket refused an unencrypted PUT: give --s3-sse if its policy "
                      "demands encryption",
                      st_errmsg());
    return e;
}

static st_err v4_put(void *ctx, const char *key, const void *data, size_t len)
{
    return put_object(ctx, key, data, len, 0);
}

static st_err v4_del(void *ctx, const char *key);

/*
 * Whether the store honours If-None-Match on a PUT (docs/S3.md,
 * "Conditional PUT"): a store that ignores it replaces the object and
 * answers 200, which no answer to a real create can be told from. So a
 * probe object is PUT, then created again: 412 says yes, 2xx or 501 no.
 * Any other failure decides nothing (returned; the next put_new probes
 * again). The answer is told once per store open, to the observer's log
 * (cond_put_told), by the caller, once the probe's lock is released.
 */
static st_err probe_cond_put(v4_ctx *c)
{
    static atomic_uint_fast64_t probes;
    char probe[96];
    snprintf(probe, sizeof probe, "%s-%ld-%" PRIu64, ST_S3_COND_PROBE_KEY, (long)getpid(),
             (uint64_t)atomic_fetch_add(&probes, 1));
    v4_req r;
    st_err e = put_object(c, probe, "", 0, 0);
    if (e)
        return e;
    e = put_request(c, &r, probe, "", 0, 1);
    int yes = e && r.status == 412;
    int no = !e || r.status == 501 || strcmp(r.code, "NotImplemented") == 0;
    v4_del(c, probe); /* best effort: a leftover probe is never listed as a key */
    if (!yes && !no)
        return e;
    atomic_store(&c->cond_put, yes ? V4_COND_YES : V4_COND_NO);
    st_clearerr();
    return ST_OK;
}

/* Tells the probe's answer (probe_cond_put) to the observer's log. */
static void cond_put_told(v4_ctx *c)
{
    int yes = atomic_load(&c->cond_put) == V4_COND_YES;
    st_backend_observer_logf(
        c->cfg.observer, "ckpt s3: s3://%s/%s at %s: conditional PUT (If-None-Match) %s",
        c->cfg.bucket, c->cfg.prefix, c->cfg.endpoint,
        yes ? "supported: packs, manifests and first leases are created, never replaced"
            : "not supported (the store replaced an object): plain PUTs");
}

static st_err v4_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    v4_ctx *c = ctx;
    st_err e = ST_OK;
    if (atomic_load(&c->cond_put) == V4_COND_UNKNOWN) {
        int probed = 0;
        pthread_mutex_lock(&c->cond_lock); /* one probe at a time; the others wait for it */
        if (atomic_load(&c->cond_put) == V4_COND_UNKNOWN) {
            e = probe_cond_put(c);
            probed = !e;
        }
        pthread_mutex_unlock(&c->cond_lock);
        if (e)
            return e;
        if (probed) /* no lock held: the observer's contract */
            cond_put_told(c);
    }
    if (atomic_load(&c->cond_put) == V4_COND_NO)
        return st_seterr(ST_ERR_UNSUPPORTED,
                         "s3 put s3://%s/%s%s at %s: the store does not honour If-None-Match",
                         c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint);
    return put_object(c, key, data, len, 1);
}

/* HEAD: the size. A 404 is not told apart from a missing bucket here. */
static st_err head(v4_ctx *c, const char *key, const char *fk, uint64_t *size)
{
    v4_req r;
    v4_req_init(&r, c, "stat", key);
    r.sse = c->read_sse;
    st_err e = v4_request(c, &r, "HEAD", fk, NULL, NULL, 0, NULL);
    if (e)
        return e;
    if (r.content_length < 0)
        return st_seterr(ST_ERR_TRANSIENT,
                         "s3 stat s3://%s/%s%s at %s: the answer has no Content-Length",
                         c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint);
    *size = (uint64_t)r.content_length;
    return ST_OK;
}

static st_err get_range(v4_ctx *c, const char *key, const char *fk, uint64_t off, uint64_t len,
                        st_bytes *out, const st_get_sink *sink, long *status);

/* One HEAD gives both times: Last-Modified of the object and the Date of
 * the answer, both the store's. For key NULL, a HEAD of ST_S3_CLOCK_KEY,
 * which no store key can be: its 404 carries the Date all the same. */
static st_err v4_stat_time(void *ctx, const char *key, st_store_time *t)
{
    v4_ctx *c = ctx;
    v4_req r;
    st_err e = v4_object_req_init(&r, c, "stat", key ? key : ST_S3_CLOCK_KEY);
    if (e)
        return e;
    r.sse = c->read_sse;
    e = v4_request(c, &r, "HEAD", r.full_key, NULL, NULL, 0, NULL);
    if (!key && e == ST_ERR_NOT_FOUND && r.date_ns)
        e = ST_OK;
    if (e)
        return e;
    if (!r.date_ns || (key && !r.last_modified_ns))
        return st_seterr(ST_ERR_TRANSIENT,
                         "s3 stat s3://%s/%s%s at %s: the answer has no %s header", c->cfg.bucket,
                         c->cfg.prefix, r.key, c->cfg.endpoint,
                         r.date_ns ? "Last-Modified" : "Date");
    t->now_ns = r.date_ns;
    t->mtime_ns = key ? r.last_modified_ns : 0;
    t->slack_ns = ST_S3_CLOCK_SLACK_NS;
    return ST_OK;
}

static st_err v4_stat(void *ctx, const char *key, uint64_t *size)
{
    v4_ctx *c = ctx;
    char fk[ST_S3_KEY_MAX + 1];
    st_err e = st_s3_full_key(&c->cfg, "stat", key, fk);
    if (e)
        return e;
    e = head(c, key, fk, size);
    if (e == ST_OK || e == ST_ERR_TRANSIENT || e == ST_ERR_NOMEM ||
        (e == ST_ERR_NOT_FOUND && atomic_load(&c->bucket_seen)))
        return e;
    /* A HEAD answer has no body, so it cannot say whether the key or the
     * bucket is missing, nor why a request was refused. A 1-byte GET can. */
    st_bytes probe = {0};
    long status;
    st_err pe = get_range(c, key, fk, 0, 1, &probe, NULL, &status);
    st_bytes_free(&probe);
    if (pe == ST_OK || status == 416) /* it appeared meanwhile, or is empty */
        return head(c, key, fk, size);
    if (pe == ST_ERR_NOT_FOUND)
        return st_seterr(ST_ERR_NOT_FOUND, "s3 stat s3://%s/%s%s at %s: not found", c->cfg.bucket,
                         c->cfg.prefix, key, c->cfg.endpoint);
    return pe;
}

/*
 * GET of [off, off+len) (len ST_GET_TO_END: to the end) into out, or to
 * sink as it arrives (out NULL); *status is the HTTP status (0 without an
 * answer), so that get_object can sort out a 416. The whole object is
 * asked for without a Range header.
 */
static st_err get_range(v4_ctx *c, const char *key, const char *fk, uint64_t off, uint64_t len,
                        st_bytes *out, const st_get_sink *sink, long *status)
{
    uint64_t count = (len == ST_GET_TO_END || len > ST_S3_RANGE_LEN_MAX) ? 0 : len;
    char range[80];
    if (count)
        snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-%" PRIu64, off, off + count - 1);
    else
        snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-", off);
    v4_req r;
    v4_req_init(&r, c, "get", key);
    r.sse = c->read_sse;
    r.out = out;
    r.sink = sink;
    r.partial_only = off != 0;
    r.want_max = count ? count : (SIZE_MAX < UINT64_MAX ? SIZE_MAX : UINT64_MAX);
    /* A pack range is MiBs: fewer, larger reads and body callbacks
     * (libcurl's default is 16 KiB; the curl tool's raw GET uses 100 KiB). */
    r.recv_buffer = count && count < GET_RECV_BUFFER ? 0 : GET_RECV_BUFFER;
    const char *const hdrs[] = {range, NULL};
    st_err e = v4_request(c, &r, "GET", fk, NULL, NULL, 0, off || count ? hdrs : NULL);
    *status = r.status;
    if (!e && r.status == 200 && off)
        e = st_seterr(ST_ERR_PERMANENT,
                      "s3 get s3://%s/%s%s at %s: the server ignored the Range header",
                      c->cfg.bucket, c->cfg.prefix, key, c->cfg.endpoint);
    if (e && out)
        st_bytes_clear(out);
    return e;
}

/* get_range as st_s3_get calls it: a 416 is a refused range. */
static st_err range_for_get(void *ctx, const char *key, const char *fk, uint64_t off, uint64_t len,
                            st_bytes *out, const st_get_sink *sink, int *refused)
{
    long status = 0;
    st_err e = get_range(ctx, key, fk, off, len, out, sink, &status);
    *refused = e == ST_ERR_INVALID && status == 416;
    return e;
}

/* get and get_stream: the body into out, or to sink (out NULL). */
static st_err get_object(v4_ctx *c, const char *key, uint64_t off, uint64_t len, st_bytes *out,
                         const st_get_sink *sink)
{
    return st_s3_get(&c->cfg, c, range_for_get, v4_stat, key, off, len, out, sink);
}

static st_err v4_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    return get_object(ctx, key, off, len, out, NULL);
}

/* A 416 or an empty range answers before any body byte, so the sink hears
 * nothing then, as the contract says. */
static st_err v4_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                            const st_get_sink *sink)
{
    return get_object(ctx, key, off, len, NULL, sink);
}

static st_err v4_del(void *ctx, const char *key)
{
    v4_ctx *c = ctx;
    v4_req r;
    st_err e = v4_object_req_init(&r, c, "del", key);
    if (e)
        return e;
    e = v4_request(c, &r, "DELETE", r.full_key, NULL, NULL, 0, NULL);
    if (e == ST_ERR_NOT_FOUND && strcmp(r.code, "NoSuchBucket") != 0)
        return ST_OK; /* idempotent: already gone (S3 itself answers 204) */
    return e;
}

/* ---- batched delete: DeleteObjects ---- */

#define S3_XMLNS "http://s3.amazonaws.com/doc/2006-03-01/"

/*
 * The <Delete> document for the items still ST_OK: <Quiet> (only failures
 * are answered: a 1000-key answer stays small on stores that honour it),
 * one <Object><Key> per item, by its full object name. Into *xml (xmlFree).
 */
static st_err delete_xml(v4_ctx *c, const st_del_item *items, size_t n, xmlChar **xml, int *len)
{
    char fk[ST_S3_KEY_MAX + 1];
    st_err e = ST_OK;
    *xml = NULL;
    xmlDocPtr doc = xmlNewDoc(BAD_CAST "1.0");
    xmlNodePtr root = doc ? xmlNewDocNode(doc, NULL, BAD_CAST "Delete", NULL) : NULL;
    if (!root)
        goto out;
    xmlDocSetRootElement(doc, root);
    xmlSetNs(root, xmlNewNs(root, BAD_CAST S3_XMLNS, NULL));
    if (!xmlNewTextChild(root, NULL, BAD_CAST "Quiet", BAD_CAST "true"))
        goto out;
    for (size_t i = 0; i < n; i++) {
        xmlNodePtr obj;
        if (items[i].err || st_s3_full_key(&c->cfg, "del_many", items[i].key, fk))
            continue; /* refused already: not sent */
        if (!(obj = xmlNewChild(root, NULL, BAD_CAST "Object", NULL)) ||
            !xmlNewTextChild(obj, NULL, BAD_CAST "Key", BAD_CAST fk))
            goto out;
    }
    xmlDocDumpMemoryEnc(doc, xml, len, "UTF-8");
out:
    if (!*xml)
        e = st_seterr(ST_ERR_NOMEM, "s3 del_many: out of memory building the request");
    xmlFreeDoc(doc);
    return e;
}

/* The item whose full object name is name (prefix + key), or NULL. */
static st_del_item *item_named(v4_ctx *c, st_del_item *items, size_t n, const char *name)
{
    if (strncmp(name, c->cfg.prefix, c->cfg.prefix_len) != 0)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(items[i].key, name + c->cfg.prefix_len) == 0)
            return &items[i];
    return NULL;
}

/* The text of n's child element `name`, or NULL (xmlFree). */
static xmlChar *child_named(xmlNodePtr n, const char *name)
{
    for (xmlNodePtr f = n->children; f; f = f->next)
        if (f->type == XML_ELEMENT_NODE && xmlStrcmp(f->name, BAD_CAST name) == 0)
            return xmlNodeGetContent(f);
    return NULL;
}

/*
 * One <Error> of a <DeleteResult> into its item: NoSuchKey is a key that
 * is gone (ST_OK, as for del); any other code is classified as the same
 * code on a single request would be, with its own message.
 */
static void delete_error(v4_ctx *c, xmlNodePtr n, st_del_item *items, size_t n_items)
{
    xmlChar *key = child_named(n, "Key"), *code = child_named(n, "Code");
    xmlChar *text = child_named(n, "Message");
    st_del_item *it = key ? item_named(c, items, n_items, (const char *)key) : NULL;
    const char *code_s = code ? (const char *)code : "";
    if (it && strcmp(code_s, "NoSuchKey") != 0) {
        char msg[200] = "";
        const char *cause;
        st_err e = st_s3_classify(ST_S3_NET_OK, 0, code_s, &cause);
        if (text)
            st_s3_scrub_copy(msg, sizeof msg, (const char *)text, c->cfg.secret);
        it->err = st_seterr(e == ST_OK || e == ST_ERR_NOT_FOUND ? ST_ERR_TRANSIENT : e,
                            "s3 del_many s3://%s/%s%s at %s: %s (%s)%s%s", c->cfg.bucket,
                            c->cfg.prefix, it->key, c->cfg.endpoint, cause,
                            code_s[0] ? code_s : "no code", msg[0] ? ": " : "", msg);
    }
    xmlFree(key);
    xmlFree(code);
    xmlFree(text);
}

/* The answer to DeleteObjects: <DeleteResult> with <Deleted> (ignored: the
 * items start ST_OK) and <Error> entries; an empty 2xx body is a quiet
 * answer with nothing to report. ST_ERR_TRANSIENT for an answer that does
 * not parse (a cut body). */
static st_err parse_delete_result(v4_ctx *c, const st_bytes *body, st_del_item *items, size_t n)
{
    if (!body->len)
        return ST_OK;
    xmlDocPtr doc = xmlReadMemory((const char *)body->data, (int)body->len, NULL, NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
    st_err e = ST_OK;
    if (!root || xmlStrcmp(root->name, BAD_CAST "DeleteResult") != 0)
        e = st_seterr(ST_ERR_TRANSIENT,
                      "s3 del_many s3://%s/%s at %s: the DeleteObjects answer does not parse",
                      c->cfg.bucket, c->cfg.prefix, c->cfg.endpoint);
    for (xmlNodePtr k = root && !e ? root->children : NULL; k; k = k->next)
        if (k->type == XML_ELEMENT_NODE && xmlStrcmp(k->name, BAD_CAST "Error") == 0)
            delete_error(c, k, items, n);
    xmlFreeDoc(doc);
    return e;
}

/* An answer that says the store has no DeleteObjects (it is optional in
 * S3-compatible stores, docs/S3.md): the batch is then deleted key by key. */
static int batch_unsupported(const v4_req *r)
{
    return r->status == 501 || r->status == 405 || strcmp(r->code, "NotImplemented") == 0 ||
           strcmp(r->code, "MethodNotAllowed") == 0;
}

/*
 * POST ?delete with up to ST_DEL_BATCH_MAX keys. S3 requires an integrity
 * header on this request: Content-MD5 (base64 of the body's MD5), the one
 * every S3-compatible store knows; the body's SHA-256 is signed along as
 * on every request with a body. A failure of the whole request (transport,
 * 5xx, auth) is every sent item's result.
 */
static st_err v4_del_many(void *ctx, st_del_item *items, size_t n)
{
    v4_ctx *c = ctx;
    char fk[ST_S3_KEY_MAX + 1];
    if (atomic_load(&c->no_batch_delete))
        return st_del_many_each(v4_del, ctx, items, n);
    size_t sendable = 0;
    for (size_t i = 0; i < n; i++)
        sendable += !(items[i].err = st_s3_full_key(&c->cfg, "del_many", items[i].key, fk));
    xmlChar *xml = NULL;
    int len = 0;
    st_bytes answer = {0};
    st_err e = ST_OK;
    if (!sendable || (e = delete_xml(c, items, n, &xml, &len)))
        goto out; /* nothing to send (every name too long), or no memory */
    char md5_hdr[64];
    if ((e = v4_content_md5_line(xml, (size_t)len, md5_hdr)))
        goto out;
    const char *const hdrs[] = {md5_hdr, "Content-Type: application/xml", NULL};
    v4_req r;
    v4_req_init(&r, c, "del_many", "");
    r.out = &answer;
    /* "delete=": curl signs the query as written, and S3 canonicalises a
     * valueless parameter to "delete=". */
    e = v4_request(c, &r, "POST", "", "delete=", xml, (size_t)len, hdrs);
    if (e && batch_unsupported(&r)) {
        atomic_store(&c->no_batch_delete, 1);
        xmlFree(xml);
        st_bytes_free(&answer);
        return st_del_many_each(v4_del, ctx, items, n);
    }
    if (!e)
        e = parse_delete_result(c, &answer, items, n);
    if (e == ST_ERR_NOT_FOUND) /* a 404 for the bucket's own URL: no such bucket */
        e = st_seterr(ST_ERR_PERMANENT, "%s", st_errmsg());
out:
    for (size_t i = 0; e && i < n; i++)
        if (!items[i].err)
            items[i].err = e;
    xmlFree(xml);
    st_bytes_free(&answer);
    return e ? e : st_del_items_result(items, n);
}

/* ---- list ---- */

/* AWS's URI encoding of a query value: unreserved characters as they are,
 * every other byte %XX (upper-case hex). dst holds 3 * strlen(src) + 1. */
static void uri_encode(char *dst, const char *src)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *src; src++) {
        unsigned char ch = (unsigned char)*src;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            *dst++ = (char)ch;
        } else {
            *dst++ = '%';
            *dst++ = hex[ch >> 4];
            *dst++ = hex[ch & 15];
        }
    }
    *dst = '\0';
}

/* One listed page: keys as "key\0" + 8-byte size, back to back. */
typedef struct v4_page {
    st_bytes keys;
    size_t n;
    int truncated;
    char *next_token; /* xmlFree'd */
} v4_page;

static const xmlChar *child_text(xmlNodePtr n, xmlChar **hold)
{
    *hold = xmlNodeGetContent(n);
    return *hold ? *hold : BAD_CAST "";
}

/* ListObjectsV2's <ListBucketResult> into page. ST_ERR_TRANSIENT for an
 * answer that does not parse (a cut or garbled body). */
static st_err parse_list(const v4_req *r, const st_bytes *body, v4_page *page)
{
    xmlDocPtr doc = xmlReadMemory((const char *)body->data, (int)body->len, NULL, NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
    st_err e = ST_OK;
    if (!root || xmlStrcmp(root->name, BAD_CAST "ListBucketResult") != 0) {
        e = st_seterr(ST_ERR_TRANSIENT, "s3 list s3://%s/%s%s at %s: the listing does not parse",
                      r->c->cfg.bucket, r->c->cfg.prefix, r->key, r->c->cfg.endpoint);
        goto out;
    }
    for (xmlNodePtr n = root->children; n && !e; n = n->next) {
        if (n->type != XML_ELEMENT_NODE)
            continue;
        xmlChar *t = NULL;
        if (xmlStrcmp(n->name, BAD_CAST "IsTruncated") == 0) {
            page->truncated = xmlStrcmp(child_text(n, &t), BAD_CAST "true") == 0;
        } else if (xmlStrcmp(n->name, BAD_CAST "NextContinuationToken") == 0) {
            xmlFree(page->next_token);
            page->next_token = (char *)xmlNodeGetContent(n);
        } else if (xmlStrcmp(n->name, BAD_CAST "Contents") == 0) {
            const xmlChar *key = NULL;
            uint64_t size = 0;
            xmlChar *kt = NULL;
            for (xmlNodePtr f = n->children; f; f = f->next) {
                xmlChar *ft = NULL;
                if (f->type == XML_ELEMENT_NODE && xmlStrcmp(f->name, BAD_CAST "Key") == 0 && !kt)
                    key = child_text(f, &kt);
                else if (f->type == XML_ELEMENT_NODE && xmlStrcmp(f->name, BAD_CAST "Size") == 0)
                    size = strtoull((const char *)child_text(f, &ft), NULL, 10);
                xmlFree(ft);
            }
            size_t kn = key ? strlen((const char *)key) : 0;
            uint8_t sz[8];
            st_le64_put(sz, size);
            if (kn && kn <= ST_S3_KEY_MAX &&
                (st_bytes_append(&page->keys, key, kn + 1) || st_bytes_append(&page->keys, sz, 8)))
                e = st_seterr(ST_ERR_NOMEM, "s3 list: out of memory");
            else if (kn && kn <= ST_S3_KEY_MAX)
                page->n++;
            xmlFree(kt);
        }
        xmlFree(t);
    }
out:
    xmlFreeDoc(doc);
    return e;
}

static int cmp_str_p(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Delivers a page in byte order (s3rver sends its directory walk order),
 * outside any curl callback: cb may take its time or call us again.
 * *stop is set when cb asks to stop. */
static st_err deliver_page(v4_ctx *c, const v4_page *page, const char *fp, st_list_cb cb, void *arg,
                           int *stop)
{
    if (!page->n)
        return ST_OK;
    const char **index = malloc(page->n * sizeof *index);
    if (!index)
        return st_seterr(ST_ERR_NOMEM, "s3 list: out of memory");
    for (size_t i = 0, at = 0; i < page->n; i++) {
        index[i] = (const char *)page->keys.data + at;
        at += strlen(index[i]) + 1 + 8;
    }
    qsort(index, page->n, sizeof *index, cmp_str_p);
    size_t fpl = strlen(fp);
    for (size_t i = 0; i < page->n && !*stop; i++) {
        const char *k = index[i];
        if (strncmp(k, fp, fpl) != 0)
            continue; /* not ours: the server ignored the prefix */
        const char *rel = k + c->cfg.prefix_len;
        if (!st_key_is_valid(rel))
            continue; /* a foreign object; no key of ours can name it */
        *stop = cb(arg, rel, st_le64_get((const uint8_t *)k + strlen(k) + 1)) != 0;
    }
    free(index);
    return ST_OK;
}

static st_err v4_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    v4_ctx *c = ctx;
    char fp[ST_S3_KEY_MAX + 1];
    if (st_s3_full_key(&c->cfg, "list", prefix, fp))
        return ST_OK; /* no key can be that long: nothing to list */
    char enc_prefix[3 * sizeof fp + 1];
    uri_encode(enc_prefix, fp);
    st_bytes body = {0};
    v4_page page = {0};
    char *token = NULL; /* the continuation token, URI-encoded */
    st_err e = ST_OK;
    for (int stop = 0; !stop;) {
        /* Parameters sorted by name: curl signs the query as written. */
        size_t qcap = strlen(enc_prefix) + (token ? strlen(token) : 0) + 96;
        char *query = malloc(qcap);
        if (!query) {
            e = st_seterr(ST_ERR_NOMEM, "s3 list: out of memory");
            break;
        }
        snprintf(query, qcap, "%s%s%slist-type=2&max-keys=%d%s%s",
                 token ? "continuation-token=" : "", token ? token : "", token ? "&" : "",
                 LIST_PAGE_KEYS, fp[0] ? "&prefix=" : "", enc_prefix);
        v4_req r;
        v4_req_init(&r, c, "list", prefix);
        st_bytes_clear(&body);
        r.out = &body;
        e = v4_request(c, &r, "GET", "", query, NULL, 0, NULL);
        free(query);
        if (e)
            break;
        st_bytes_clear(&page.keys);
        page.n = 0;
        page.truncated = 0;
        xmlFree(page.next_token);
        page.next_token = NULL;
        if ((e = parse_list(&r, &body, &page)) || (e = deliver_page(c, &page, fp, cb, arg, &stop)))
            break;
        if (!page.truncated)
            break;
        if (!page.next_token || !page.next_token[0]) {
            e = st_seterr(ST_ERR_TRANSIENT,
                          "s3 list s3://%s/%s%s at %s: a truncated listing without a "
                          "continuation token",
                          c->cfg.bucket, c->cfg.prefix, prefix, c->cfg.endpoint);
            break;
        }
        free(token);
        if (!(token = malloc(3 * strlen(page.next_token) + 1))) {
            e = st_seterr(ST_ERR_NOMEM, "s3 list: out of memory");
            break;
        }
        uri_encode(token, page.next_token);
    }
    free(token);
    xmlFree(page.next_token);
    st_bytes_free(&page.keys);
    st_bytes_free(&body);
    return e;
}

/* ---- open and close ---- */

static void v4_close(void *ctx)
{
    v4_ctx *c = ctx;
    if (!c)
        return;
    for (int i = 0; i < c->pool_n; i++)
        v4_conn_free(c->pool[i]);
    if (c->share)
        curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_locks[i]);
    pthread_mutex_destroy(&c->pool_lock);
    pthread_mutex_destroy(&c->cond_lock);
    for (int i = 0; i < 4; i++) {
        if (c->put_sse[i])
            OPENSSL_cleanse(c->put_sse[i], strlen(c->put_sse[i]));
        if (c->read_sse[i])
            OPENSSL_cleanse(c->read_sse[i], strlen(c->read_sse[i]));
        free(c->put_sse[i]);
        free(c->read_sse[i]);
    }
    st_s3_config_free(&c->cfg);
    free(c);
}

/* One header line "name: value" (malloc) into *slot; ST_ERR_NOMEM. */
static st_err header_line(char **slot, const char *name, const char *value)
{
    size_t n = strlen(name) + strlen(value) + 3;
    if (!(*slot = malloc(n)))
        return st_seterr(ST_ERR_NOMEM, "s3 open: out of memory");
    snprintf(*slot, n, "%s: %s", name, value);
    return ST_OK;
}

/* c->put_sse and c->read_sse from cfg.sse; a request that sends them is
 * signed by sign_self, headers included. */
static st_err sse_headers(v4_ctx *c)
{
    const st_s3_config *g = &c->cfg;
    st_err e = ST_OK;
    switch (g->sse) {
    case ST_S3_SSE_NONE: break;
    case ST_S3_SSE_AES256:
        e = header_line(&c->put_sse[0], "x-amz-server-side-encryption", "AES256");
        break;
    case ST_S3_SSE_KMS:
        if (!(e = header_line(&c->put_sse[0], "x-amz-server-side-encryption", "aws:kms")) &&
            g->sse_kms_key_id[0])
            e = header_line(&c->put_sse[1], "x-amz-server-side-encryption-aws-kms-key-id",
                            g->sse_kms_key_id);
        break;
    case ST_S3_SSE_C:
        for (int i = 0; i < 2 && !e; i++) {
            char **set = i ? c->read_sse : c->put_sse;
            if (!(e = header_line(&set[0], "x-amz-server-side-encryption-customer-algorithm",
                                  "AES256")) &&
                !(e = header_line(&set[1], "x-amz-server-side-encryption-customer-key",
                                  g->sse_c_key_b64)))
                e = header_line(&set[2], "x-amz-server-side-encryption-customer-key-MD5",
                                g->sse_c_key_md5_b64);
        }
        break;
    }
    return e;
}

static const st_backend_ops v4_ops = {
    .scheme = "s3",
    .put = v4_put,
    .get = v4_get,
    .get_stream = v4_get_stream,
    .stat = v4_stat,
    .stat_time = v4_stat_time,
    .put_new = v4_put_new,
    .list = v4_list,
    .del = v4_del,
    .del_many = v4_del_many,
    .close = v4_close,
};

st_err st_backend_s3v4_open(const char *url, const st_backend_opts *opts, st_backend **out)
{
    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_backend_s3v4_open: out is NULL");
    *out = NULL;
    st_err e = ST_OK;
    st_backend *b = NULL;
    v4_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return st_seterr(ST_ERR_NOMEM, "s3 open: out of memory");
    pthread_mutex_init(&c->pool_lock, NULL);
    pthread_mutex_init(&c->cond_lock, NULL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_locks[i], NULL);
    if ((e = st_s3_config_load(&c->cfg, url, opts)) != ST_OK)
        goto out;
    pthread_once(&v4_once, v4_init_once);
    if (v4_init_status != CURLE_OK) {
        e = st_seterr(ST_ERR_PERMANENT, "s3: curl initialisation failed: %s",
                      curl_easy_strerror(v4_init_status));
        goto out;
    }
    if ((e = sse_headers(c)))
        goto out;
    snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", c->cfg.region);
    if (c->cfg.virtual_host)
        snprintf(c->base, sizeof c->base, "%s://%s.%s/", c->cfg.https ? "https" : "http",
                 c->cfg.bucket, c->cfg.host);
    else
        snprintf(c->base, sizeof c->base, "%s/%s/", c->cfg.endpoint, c->cfg.bucket);
    if (!(c->share = curl_share_init())) {
        e = st_seterr(ST_ERR_NOMEM, "s3 open: out of memory");
        goto out;
    }
    curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    atomic_init(&c->bucket_seen, 0);
    atomic_init(&c->no_batch_delete, 0);
    atomic_init(&c->cond_put, V4_COND_UNKNOWN);
    if (!(b = malloc(sizeof *b))) {
        e = st_seterr(ST_ERR_NOMEM, "s3 open: out of memory");
        goto out;
    }
    b->ops = &v4_ops;
    b->ctx = c;
    *out = b;
    c = NULL;
out:
    v4_close(c);
    return e;
}

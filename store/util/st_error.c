/*
 * st_error — code descriptions and the thread-local error detail buffer.
 * Each thread owns its buffer; nothing here is shared between threads.
 */
#include "st_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char st_errbuf[512];

const char *st_strerror(st_err code)
{
    switch (code) {
    case ST_OK: return "success";
    case ST_ERR_NOMEM: return "out of memory";
    case ST_ERR_IO: return "local I/O error";
    case ST_ERR_NOT_FOUND: return "not found";
    case ST_ERR_TRANSIENT: return "transient store error";
    case ST_ERR_PERMANENT: return "permanent store error";
    case ST_ERR_CORRUPT: return "data corrupt or unparsable";
    case ST_ERR_INVALID: return "invalid argument";
    case ST_ERR_NOSPACE: return "no space left";
    case ST_ERR_EXISTS: return "already exists";
    case ST_ERR_UNSUPPORTED: return "not supported";
    case ST_ERR_NOT_DIR: return "not a directory";
    case ST_ERR_IS_DIR: return "is a directory";
    case ST_ERR_NOT_EMPTY: return "directory not empty";
    case ST_ERR_READ_ONLY: return "read-only entry";
    case ST_ERR_NAME: return "name not allowed";
    case ST_ERR_BUSY: return "busy";
    case ST_ERR_CROSS: return "entry lives only in the store";
    case ST_ERR_TOO_LONG: return "path too long";
    case ST_ERR_TOO_BIG: return "file too large";
    case ST_ERR_AUTH: return "peer refused the cluster secret";
    case ST_ERR_KEY: return "encryption key refused or not held";
    }
    return "unknown error";
}

st_err st_seterr(st_err code, const char *fmt, ...)
{
    /* Format aside first: callers often wrap the previous detail
     * (st_seterr(e, "reading %s: %s", path, st_errmsg())), whose bytes live
     * in st_errbuf itself. */
    char tmp[sizeof st_errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(st_errbuf, tmp, sizeof st_errbuf);
    return code;
}

const char *st_errmsg(void)
{
    return st_errbuf;
}

void st_clearerr(void)
{
    st_errbuf[0] = '\0';
}

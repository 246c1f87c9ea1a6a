/*
 * st_logf — a printf-like call of a caller's log callback, the shape every
 * layer's reports take (`void (*log)(void *arg, const char *msg)`): the
 * message is formatted into a buffer of ST_LOGF_MAX bytes (truncated), and
 * nothing is formatted when there is no callback. Threads: any; the
 * callback runs on the calling thread.
 */
#ifndef ST_LOGF_H
#define ST_LOGF_H

#include <stdarg.h>

#define ST_LOGF_MAX 1024

typedef void (*st_log_fn)(void *arg, const char *msg);

/*! Formats fmt and calls log(arg, message); a no-op when log is NULL. */
void st_logf(st_log_fn log, void *arg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/*! The same with a va_list. */
void st_vlogf(st_log_fn log, void *arg, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif

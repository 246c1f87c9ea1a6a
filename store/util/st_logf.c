/*
 * st_logf — formatting for log callbacks (st_logf.h). No state.
 */
#include "util/st_logf.h"

#include <stdio.h>

void st_vlogf(st_log_fn log, void *arg, const char *fmt, va_list ap)
{
    if (!log)
        return;
    char msg[ST_LOGF_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    log(arg, msg);
}

void st_logf(st_log_fn log, void *arg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st_vlogf(log, arg, fmt, ap);
    va_end(ap);
}

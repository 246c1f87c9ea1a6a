/*
 * fs_log — the daemon's log sink (fs_log.h). The destination and the
 * threshold are set once in main before any thread starts and only read
 * afterwards, so they need no lock.
 */
#include "fs_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "fs_options.h"

#define LINE_MAX_BYTES 4096

static int log_max = FS_LOG_INFO;
static fs_log_dest log_dest = FS_LOG_STDERR;
static int log_prefix_priority; /* "<N>" in front of stderr lines */
static int log_under_journal;   /* journald adds "ckptfs[pid]:" itself */
static int log_prefix_decided;

void fs_log_setup(int max_level, fs_log_dest dest)
{
    log_max = max_level;
    log_dest = dest;
    log_under_journal = getenv("JOURNAL_STREAM") != NULL;
    log_prefix_priority = log_under_journal || !isatty(STDERR_FILENO);
    log_prefix_decided = 1;
    if (dest == FS_LOG_SYSLOG)
        openlog("ckptfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

size_t fs_log_escape(const char *msg, char *out, size_t cap)
{
    if (cap == 0)
        return 0;
    /* Room for the text, and for "..." when it has to be cut. */
    size_t room = cap - 1, reserve = room >= 3 ? 3 : 0;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        char esc[5];
        size_t len;
        if (*p == '\n' || *p == '\r' || *p == '\t') {
            esc[0] = '\\';
            esc[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
            len = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            len = 4;
        } else {
            esc[0] = (char)*p;
            len = 1;
        }
        if (n + len > room - reserve) {
            memcpy(out + n, "...", reserve);
            n += reserve;
            break;
        }
        memcpy(out + n, esc, len);
        n += len;
    }
    out[n] = '\0';
    return n;
}

static const char *level_word(int priority)
{
    switch (priority) {
    case FS_LOG_ERROR: return "error: ";
    case FS_LOG_WARN: return "warning: ";
    case FS_LOG_DEBUG: return "debug: ";
    default: return "";
    }
}

void fs_log_write(int priority, const char *msg)
{
    if (priority > log_max)
        return;
    char text[LINE_MAX_BYTES];
    fs_log_escape(msg, text, sizeof text);
    if (log_dest == FS_LOG_SYSLOG) {
        syslog(priority, "%s", text);
        return;
    }
    if (!log_prefix_decided)
        fs_log_setup(log_max, log_dest);
    char line[LINE_MAX_BYTES + 64];
    int n = 0;
    if (log_prefix_priority)
        n = snprintf(line, sizeof line, "<%d>", priority);
    n += snprintf(line + n, sizeof line - (size_t)n, "%s%s%s\n",
                  log_under_journal ? "" : "ckptfs: ", level_word(priority), text);
    /* One write per line: concurrent lines never interleave mid-line. */
    if (write(STDERR_FILENO, line, (size_t)n) < 0) {
        /* Nowhere left to report it. */
    }
}

void fs_logf(int priority, const char *fmt, ...)
{
    char msg[LINE_MAX_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fs_log_write(priority, msg);
}

void fs_log_vfs(void *arg, int level, const char *msg)
{
    (void)arg;
    fs_log_write(level >= 2 ? FS_LOG_ERROR : level == 1 ? FS_LOG_WARN : FS_LOG_INFO, msg);
}

/*
 * fs_log — the daemon's one log sink. Every message, the daemon's own and
 * st_vfs's (fs_log_vfs as st_vfs_options.log), goes through fs_log_write,
 * which filters by level, escapes the text so that one event is one line
 * (a file name holding a newline or an escape sequence cannot forge or
 * split lines), and writes it:
 *
 *   FS_LOG_SYSLOG    syslog(3), facility daemon (the daemonised ckptfs)
 *   FS_LOG_STDERR    stderr; when stderr is not a terminal or under systemd
 *                    ($JOURNAL_STREAM), each line starts with the sd-daemon(3)
 *                    priority prefix "<3>" .. "<7>" that journald reads
 *
 * Thread-safe: fs_log_write may be called from any thread once fs_log_setup
 * has run (in main, before the FUSE threads start); each line is one
 * write(2) or one syslog(3) call, so lines from threads do not interleave.
 */
#ifndef FS_LOG_H
#define FS_LOG_H

#include <stddef.h>

typedef enum fs_log_dest { FS_LOG_STDERR, FS_LOG_SYSLOG } fs_log_dest;

/*! Sets the threshold (FS_LOG_ERROR .. FS_LOG_DEBUG: fs_options.h) and the
 *  destination. Until called: stderr, level info. */
void fs_log_setup(int max_level, fs_log_dest dest);

/*! Logs MSG at PRIORITY (FS_LOG_*). */
void fs_log_write(int priority, const char *msg);

/*! printf-style fs_log_write. */
void fs_logf(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*! The st_vfs_options.log callback: level 0 info, 1 warning, 2 error. */
void fs_log_vfs(void *arg, int level, const char *msg);

/*! Escapes MSG into out[cap] (always NUL-terminated, cut short with "..."
 *  when it does not fit): a newline becomes "\n", a carriage return "\r",
 *  a tab "\t", other control bytes and DEL "\xHH"; everything else, UTF-8
 *  and backslashes included, is kept. Escaping only control bytes makes it
 *  idempotent: a message escaped already (st_vfs's vfs_log may escape
 *  names itself) passes unchanged. Returns the length written. */
size_t fs_log_escape(const char *msg, char *out, size_t cap);

#endif

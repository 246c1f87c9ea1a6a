/*
 * st_crashpoint — named crash points for the crash matrix (docs/RELIABILITY.md,
 * "Crash matrix"); a test hook, compiled into -DCKPT_TEST_HOOKS=ON builds
 * only (SQLite's SQLITE_TEST idea, docs/BACKENDS.md "Fault injection").
 *
 * ST_CRASHPOINT("pack-put-after") marks a place between two steps of the
 * durability pipeline. Without the hooks it expands to nothing. With them,
 * $CKPT_CRASH_AT ("NAME" or "NAME:N", read once) arms one point: its N-th
 * pass (1 if N is left out), counted over every thread of the process,
 * writes "crashpoint NAME hit (pass N)" to stderr and kills the process
 * with SIGKILL: a real kill -9, no atexit handler, no stdio flush, no
 * SQLite or file close. Every other pass, and every other point, costs one
 * string compare.
 */
#ifndef ST_CRASHPOINT_H
#define ST_CRASHPOINT_H

#ifdef CKPT_TEST_HOOKS
/*! Counts a pass through the point `name` (a string literal) and kills the
 *  process if it is the armed pass. Thread-safe; returns otherwise. */
void st_crashpoint(const char *name);
#define ST_CRASHPOINT(name) st_crashpoint(name)
/*! A point that counts only the passes where cond holds (cond is not
 *  evaluated in a build without the hooks). */
#define ST_CRASHPOINT_IF(cond, name) ((cond) ? st_crashpoint(name) : (void)0)
#else
#define ST_CRASHPOINT(name)          ((void)0)
#define ST_CRASHPOINT_IF(cond, name) ((void)0)
#endif

#endif

/*
 * st_thread — what a thread of the daemon sets about itself.
 *
 * Its nice value: on Linux a thread's own (setpriority of its tid, not the
 * process's), so a background thread can yield the CPU to the threads that
 * serve the trainer without renicing them (docs/MOUNT_MODEL.md, "Background
 * work yields to the writer"; docs/WARMUP.md, the whole-file check).
 */
#ifndef ST_THREAD_H
#define ST_THREAD_H

/* Makes the calling thread `by` nicer than it is, and at least `at_least`
 * nice (at most 19). Never less nice than it is. Best effort: a thread that
 * cannot be reniced still does its work. */
void st_thread_nicer(int by, int at_least);

#endif

/* st_thread — see st_thread.h. */
#define _GNU_SOURCE /* gettid */
#include "util/st_thread.h"

#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

/* The largest nice value Linux takes. */
#define NICEST 19

void st_thread_nicer(int by, int at_least)
{
    const id_t tid = (id_t)gettid();
    errno = 0;
    const int now = getpriority(PRIO_PROCESS, tid);
    if (errno != 0)
        return;
    int want = now + by < at_least ? at_least : now + by;
    if (want > NICEST)
        want = NICEST;
    if (want > now)
        (void)setpriority(PRIO_PROCESS, tid, want);
}

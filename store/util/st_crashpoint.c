/*
 * st_crashpoint — see st_crashpoint.h. The armed point is parsed from
 * $CKPT_CRASH_AT once (pthread_once) by whichever thread passes a point
 * first; the pass counter is atomic, so exactly one pass is the armed one
 * even when upload threads race through the same point.
 */
#include "util/st_crashpoint.h"

#ifdef CKPT_TEST_HOOKS

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CRASH_NAME_MAX 64

static pthread_once_t armed_once = PTHREAD_ONCE_INIT;
static char armed_name[CRASH_NAME_MAX + 1]; /* "" when nothing is armed */
static unsigned long armed_pass = 1;
static unsigned long passes; /* passes through the armed point (atomic) */

/* "NAME" or "NAME:N" (N >= 1); anything else arms nothing and says so. */
static void arm(void)
{
    const char *spec = getenv("CKPT_CRASH_AT");
    if (!spec || !*spec)
        return;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    char *end = NULL;
    unsigned long n = colon ? strtoul(colon + 1, &end, 10) : 1;
    if (len == 0 || len > CRASH_NAME_MAX || n == 0 || (colon && (end == colon + 1 || *end))) {
        fprintf(stderr, "crashpoint: CKPT_CRASH_AT='%.100s' is not NAME[:N]; nothing armed\n",
                spec);
        return;
    }
    memcpy(armed_name, spec, len);
    armed_name[len] = '\0';
    armed_pass = n;
}

void st_crashpoint(const char *name)
{
    pthread_once(&armed_once, arm);
    if (!armed_name[0] || strcmp(name, armed_name))
        return;
    unsigned long pass = __atomic_add_fetch(&passes, 1, __ATOMIC_SEQ_CST);
    if (pass != armed_pass)
        return;
    /* write(2), not stdio: nothing buffered may be flushed on the way out. */
    char line[CRASH_NAME_MAX + 64];
    int len = snprintf(line, sizeof line, "crashpoint %s hit (pass %lu)\n", name, pass);
    if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0)
        (void)0; /* nowhere to report it; the kill is what matters */
    raise(SIGKILL);
    _exit(137); /* not reached: SIGKILL cannot be caught */
}

#else

/* Without the hooks the points are empty macros; this unit holds nothing. */
typedef int st_crashpoint_unused;

#endif

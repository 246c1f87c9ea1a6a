/*
 * fs_drain_signal — the SIGUSR1 waiter (see fs_drain_signal.h). Stopping it
 * sets `stop` and sends SIGUSR1 to the thread itself: sigwait returns, sees
 * the flag and ends without draining.
 */
#include "fs_drain_signal.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "fs_log.h"
#include "fs_options.h"

struct fs_drain_signal {
    pthread_t thread;
    st_vfs *v;
    atomic_int stop;
};

static void usr1_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGUSR1);
}

int fs_drain_signal_block(void)
{
    sigset_t set;
    usr1_set(&set);
    return pthread_sigmask(SIG_BLOCK, &set, NULL) ? -1 : 0;
}

static void *drain_signal_main(void *arg)
{
    fs_drain_signal *d = arg;
    sigset_t set;
    usr1_set(&set);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0 || atomic_load(&d->stop))
            break;
        fs_log_write(FS_LOG_INFO, "SIGUSR1: preemption notice");
        st_vfs_drain(d->v);
    }
    return NULL;
}

int fs_drain_signal_start(st_vfs *v, fs_drain_signal **out)
{
    *out = NULL;
    fs_drain_signal *d = calloc(1, sizeof *d);
    if (!d)
        return -1;
    d->v = v;
    atomic_init(&d->stop, 0);
    if (pthread_create(&d->thread, NULL, drain_signal_main, d) != 0) {
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

void fs_drain_signal_stop(fs_drain_signal *d)
{
    if (!d)
        return;
    atomic_store(&d->stop, 1);
    pthread_kill(d->thread, SIGUSR1);
    pthread_join(d->thread, NULL);
    free(d);
}

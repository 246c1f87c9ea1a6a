/*
 * s3harness.h — lets a C test start and stop its own s3rver instances
 * through tests/s3/s3rver.sh, so every S3 test is self-contained: no
 * server has to be running before ctest, and none is left after it.
 *
 * s3h_start() runs "s3rver.sh start DIR --owner <our pid> ...", which
 * installs s3rver on first use (or fails loudly: a missing node/npm is a
 * test failure, never a skip), waits for readiness with a bounded timeout
 * and prints the port. The --owner watchdog stops the server if this
 * process dies without calling s3h_stop() (crash, ctest timeout kill).
 * s3h_stop() stops it by PID; an atexit handler stops whatever is still
 * running at exit.
 *
 * The script is found next to this header (via __FILE__, absolute in a
 * CMake build), or at $CKPT_S3RVER_SH.
 *
 * Threads: call from the main thread only.
 */
#ifndef S3HARNESS_H
#define S3HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct s3h_server {
    char dir[128]; /* the instance's files: data/, pid, port, log */
    int port;      /* 0 when not running */
    char endpoint[64];
} s3h_server;

#define S3H_MAX 8
static s3h_server *s3h_running[S3H_MAX];

static inline const char *s3h_script(void)
{
    static char path[4096];
    const char *env = getenv("CKPT_S3RVER_SH");
    if (env && *env)
        return env;
    snprintf(path, sizeof path, "%s", __FILE__);
    char *slash = strrchr(path, '/');
    if (slash)
        slash[1] = '\0';
    else
        path[0] = '\0';
    strncat(path, "s3rver.sh", sizeof path - strlen(path) - 1);
    return path;
}

static inline void s3h_stop(s3h_server *s)
{
    if (!s->dir[0])
        return;
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "bash '%s' stop '%s'", s3h_script(), s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "s3harness: stopping s3rver in %s failed\n", s->dir);
    s->port = 0;
    for (int i = 0; i < S3H_MAX; i++)
        if (s3h_running[i] == s)
            s3h_running[i] = NULL;
}

/* Stops and forgets the instance, and removes its directory. */
static inline void s3h_destroy(s3h_server *s)
{
    if (!s->dir[0])
        return;
    s3h_stop(s);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "s3harness: cannot remove %s\n", s->dir);
    s->dir[0] = '\0';
}

static inline void s3h_stop_all(void)
{
    for (int i = 0; i < S3H_MAX; i++)
        if (s3h_running[i])
            s3h_destroy(s3h_running[i]);
}

/*
 * Starts an instance with options for s3rver.sh start ("--strict",
 * "--bucket NAME", "--port N"; may be ""). A second start of the same s
 * (after s3h_stop) reuses its directory and data. Returns 0, or -1 after
 * printing why.
 */
static inline int s3h_start(s3h_server *s, const char *opts)
{
    static int registered;
    if (!registered) {
        atexit(s3h_stop_all);
        registered = 1;
    }
    if (!s->dir[0]) {
        snprintf(s->dir, sizeof s->dir, "/tmp/ckpt-s3rver-XXXXXX");
        if (!mkdtemp(s->dir)) {
            perror("s3harness: mkdtemp");
            s->dir[0] = '\0';
            return -1;
        }
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "bash '%s' start '%s' --owner %ld %s", s3h_script(), s->dir,
             (long)getpid(), opts ? opts : "");
    FILE *p = popen(cmd, "r");
    if (!p) {
        perror("s3harness: popen");
        return -1;
    }
    int port = 0;
    if (fscanf(p, "%d", &port) != 1)
        port = 0;
    int rc = pclose(p);
    if (rc != 0 || port <= 0) {
        fprintf(stderr, "s3harness: \"%s\" failed (status %d): see the message above\n", cmd, rc);
        return -1;
    }
    s->port = port;
    snprintf(s->endpoint, sizeof s->endpoint, "http://127.0.0.1:%d", port);
    for (int i = 0; i < S3H_MAX; i++)
        if (!s3h_running[i] || s3h_running[i] == s) {
            s3h_running[i] = s;
            break;
        }
    return 0;
}

#endif

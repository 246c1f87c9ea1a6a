/*
 * fs_notify — tells the service manager what the daemon is doing, with
 * systemd's sd_notify(3) protocol (docs/SHUTDOWN.md): one datagram of
 * "KEY=VALUE" lines to the AF_UNIX socket $NOTIFY_SOCKET names ("@NAME":
 * the abstract namespace). Written here in a few lines rather than linked
 * from libsystemd: this is all the daemon needs of it.
 *
 * No state: any thread (it reads the environment, so not concurrently with
 * setenv).
 */
#ifndef FS_NOTIFY_H
#define FS_NOTIFY_H

/*! Sends state (e.g. "READY=1") to $NOTIFY_SOCKET. 0 when sent or when
 *  NOTIFY_SOCKET is unset or empty (not under a service manager); -1 with
 *  errno when the variable is malformed (ENAMETOOLONG, EINVAL) or the send
 *  failed. */
int fs_notify(const char *state);

#endif

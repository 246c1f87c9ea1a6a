/*
 * fs_notify — sd_notify(3)'s datagram protocol (see fs_notify.h). The
 * socket is opened per message: the daemon sends two in its life (READY=1,
 * STOPPING=1), so keeping one open is not worth a shared descriptor.
 */
#include "fs_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int fs_notify(const char *state)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (!name || !*name)
        return 0;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    size_t len = strlen(name);
    if (len >= sizeof addr.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (name[0] != '/' && name[0] != '@') {
        errno = EINVAL; /* systemd also knows vsock:, which a FUSE host has no use for */
        return -1;
    }
    memcpy(addr.sun_path, name, len);
    if (name[0] == '@')
        addr.sun_path[0] = '\0'; /* abstract: the length below says where it ends */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    size_t n = strlen(state);
    ssize_t sent = sendto(fd, state, n, MSG_NOSIGNAL, (const struct sockaddr *)&addr,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    int saved = errno;
    close(fd);
    errno = saved;
    return sent == (ssize_t)n ? 0 : -1;
}

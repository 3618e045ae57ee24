/*
 * unixsock.c - binding a Unix socket path, replacing a stale socket file.
 */
#include "daemon/unixsock.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int unixsock_listen(const char *path, int backlog)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd, rc;

        if (!*path || strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int probe;

                if (errno != EADDRINUSE)
                        goto err;
                /* In use: by a live server (it answers) or a dead one's
                 * file (it refuses), which is replaced. */
                probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                rc = probe >= 0 ? connect(probe, (struct sockaddr *)&sa, sizeof(sa)) : -1;
                if (probe >= 0)
                        close(probe);
                if (rc == 0) {
                        close(fd);
                        return -EADDRINUSE;
                }
                unlink(path);
                if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                        goto err;
        }
        if (chmod(path, 0660) < 0 || listen(fd, backlog) < 0) {
                rc = -errno;
                unlink(path);
                close(fd);
                return rc;
        }
        return fd;
err:
        rc = -errno;
        close(fd);
        return rc;
}

/*
 * notify.c - sd_notify without linking libsystemd.
 */
#include "daemon/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int notify_send(const char *state)
{
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t len;
        socklen_t salen;
        int fd, rc = 0;

        if (!path || !*path)
                return 0;
        len = strlen(path);
        if (len >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@'))
                return -EINVAL;
        memcpy(sa.sun_path, path, len);
        if (sa.sun_path[0] == '@')
                sa.sun_path[0] = '\0'; /* abstract namespace */
        salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen) < 0)
                rc = -errno;
        close(fd);
        return rc;
}

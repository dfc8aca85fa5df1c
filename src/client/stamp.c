/* stamp — see stamp.h. */
#include "client/stamp.h"

#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"

void stamp_enable(int fd)
{
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

ssize_t stamp_recv(int fd, void *buf, size_t size, int64_t realtime_offset_ns, stamp_read *out)
{
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {buf, size};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    const ssize_t n = recvmsg(fd, &msg, 0);
    out->now_ns = clock_now_ns(); /* clock_gettime leaves errno alone when it succeeds */
    out->t_ns = out->now_ns;
    out->kernel = false;
    if (n <= 0)
        return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_TIMESTAMPNS)
            continue;
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(cm), sizeof ts);
        const int64_t kernel = (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec - realtime_offset_ns;
        if (ts.tv_sec != 0 && kernel <= out->now_ns + CLOCK_NS_PER_MS) {
            out->t_ns = kernel < out->now_ns ? kernel : out->now_ns;
            out->kernel = true;
        }
    }
    return n;
}

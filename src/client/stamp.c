/* stamp — see stamp.h. */
#include "client/stamp.h"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

void stamp_enable(int fd)
{
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

/* A TCP pair on 127.0.0.1, not UDP: a datagram socket's read fills in the time of the read
 * when the kernel gave the datagram none, so its stamp proves nothing; TCP's reads report
 * none, as the connections that matter would. */
int stamp_hold(int64_t wait_ns, bool *on)
{
    *on = false;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int s = -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(l, 1) != 0 || getsockname(l, (struct sockaddr *)&addr, &len) != 0)
        goto fail;
    stamp_enable(c);
    if (connect(c, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        (s = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0)
        goto fail;
    const int64_t until = clock_now_ns() + (wait_ns > 0 ? wait_ns : 0);
    for (int tries = 0; tries < 1000; tries++) {
        if (send(s, "s", 1, MSG_NOSIGNAL) != 1)
            break;
        struct pollfd p = {c, POLLIN, 0};
        if (poll(&p, 1, 10) != 1)
            break; /* a loopback byte that does not come: give up */
        char byte;
        stamp_read st;
        if (stamp_recv(c, &byte, 1, clock_realtime_offset_ns(1, NULL), &st) != 1)
            break;
        if ((*on = st.kernel) || clock_now_ns() >= until)
            break;
        clock_sleep_until_ns(clock_now_ns() + 100 * 1000); /* let the deferred work run */
    }
    close(s);
    close(l);
    return c;
fail:
    if (s >= 0)
        close(s);
    if (l >= 0)
        close(l);
    if (c >= 0)
        close(c);
    return -1;
}

static pthread_once_t switch_once = PTHREAD_ONCE_INIT;
static bool switch_on;

static void hold_for_the_process(void)
{
    (void)stamp_hold(20 * CLOCK_NS_PER_MS, &switch_on); /* held until exit: never closed */
}

bool stamp_switch_on(void)
{
    pthread_once(&switch_once, hold_for_the_process);
    return switch_on;
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

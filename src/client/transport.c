#include "client/transport.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>

#include "common/clock.h"

const char *transport_stamp_name(transport_stamp s)
{
    switch (s) {
    case TRANSPORT_STAMP_KERNEL:
        return "kernel";
    case TRANSPORT_STAMP_KERNEL_COALESCED:
        return "kernel_coalesced";
    default:
        return "user";
    }
}

void transport_raise_fd_limit(int connections)
{
    /* Thousands of streams need thousands of descriptors: raise the soft limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = (rlim_t)connections * 2 + 256;
        if (rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
            rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want) ? want : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
}

int transport_epoll_wait(int ep, struct epoll_event *evs, int max_events, int64_t wait_ns,
                         bool *use_pwait2)
{
    if (wait_ns < 0)
        wait_ns = 0;
    if (*use_pwait2) {
        /* ns resolution: an injection planned at t is sent at t, not at the next ms. */
        struct timespec ts = {wait_ns / CLOCK_NS_PER_S, wait_ns % CLOCK_NS_PER_S};
        int n = epoll_pwait2(ep, evs, max_events, &ts, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        *use_pwait2 = false;
    }
    const int64_t wait_ms = (wait_ns + CLOCK_NS_PER_MS - 1) / CLOCK_NS_PER_MS;
    return epoll_wait(ep, evs, max_events, (int)wait_ms);
}

int64_t transport_clock_now(void *impl)
{
    (void)impl;
    return clock_now_ns();
}

/* raw_sender — see raw_sender.h. */
#include "raw_sender.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"

#define MAX_FD 65536 /* descriptors above are served but never stepped (none in practice) */

struct raw_sender_shared {
    _Atomic int64_t tokens_sent, streams_started, streams_done, streams_cut;
    _Atomic int64_t tokens_done, tokens_cut, short_sends;
};

typedef struct sender_conn {
    int fd;
    bool streaming;
    int sent;
    char in[8192];
    size_t in_len;
} sender_conn;

static void count(_Atomic int64_t *c, int64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void sender_close(sender_conn **conns, sender_conn *c)
{
    if (c->fd < MAX_FD)
        conns[c->fd] = NULL;
    close(c->fd);
    free(c);
}

/* The child's loop: never returns. */
static void sender_loop(int listen_fd, int64_t step_ns, int answer, raw_sender_shared *sh)
{
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev);
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Connection: close\r\n\r\n";
    int64_t next_step = clock_now_ns() + step_ns, step = 0;
    sender_conn **conns = calloc(MAX_FD, sizeof *conns);
    for (;;) {
        struct epoll_event evs[256];
        int64_t wait_ms = (next_step - clock_now_ns()) / CLOCK_NS_PER_MS;
        int n = epoll_wait(ep, evs, 256, wait_ms > 0 ? (int)wait_ms : 0);
        for (int i = 0; i < n; i++) {
            if (!evs[i].data.ptr) {
                int fd;
                while ((fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    sender_conn *c = calloc(1, sizeof *c);
                    c->fd = fd;
                    if (fd < MAX_FD)
                        conns[fd] = c;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            sender_conn *c = evs[i].data.ptr;
            ssize_t r = recv(c->fd, c->in + c->in_len, sizeof c->in - 1 - c->in_len, 0);
            if (r <= 0) {
                if (c->streaming) {
                    count(&sh->streams_cut, 1);
                    count(&sh->tokens_cut, c->sent);
                }
                sender_close(conns, c);
                continue;
            }
            c->in_len += (size_t)r;
            c->in[c->in_len] = '\0';
            char *end = strstr(c->in, "\r\n\r\n");
            const char *cl = strcasestr(c->in, "Content-Length:");
            if (end && !c->streaming &&
                c->in_len >= (size_t)(end + 4 - c->in) + (cl ? (size_t)atol(cl + 15) : 0)) {
                c->streaming = true;
                count(&sh->streams_started, 1);
                send(c->fd, head, sizeof head - 1, MSG_NOSIGNAL);
            }
        }
        if (clock_now_ns() < next_step)
            continue;
        step++;
        for (int fd = 0; fd < MAX_FD; fd++) {
            sender_conn *c = conns[fd];
            if (!c || !c->streaming)
                continue;
            c->sent++;
            char buf[512];
            int len = snprintf(buf, sizeof buf,
                               "data: {\"choices\":[{\"index\":0,\"text\":\" w\",\"finish_reason\":%s}],"
                               "\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d},"
                               "\"stallscope\":{\"emit_ns\":%lld,\"step\":%lld}}\n\n%s",
                               c->sent >= answer ? "\"length\"" : "null", c->sent,
                               (long long)clock_now_ns(), (long long)step,
                               c->sent >= answer ? "data: [DONE]\n\n" : "");
            if (send(c->fd, buf, (size_t)len, MSG_NOSIGNAL) != (ssize_t)len)
                count(&sh->short_sends, 1);
            count(&sh->tokens_sent, 1);
            if (c->sent >= answer) {
                count(&sh->streams_done, 1);
                count(&sh->tokens_done, c->sent);
                sender_close(conns, c);
            }
        }
        next_step += step_ns;
        if (next_step < clock_now_ns())
            next_step = clock_now_ns() + step_ns; /* fell behind: no catch-up burst */
    }
}

int raw_sender_start(raw_sender *s, int64_t step_ns, int answer, char *err)
{
    memset(s, 0, sizeof *s);
    s->shared = mmap(NULL, sizeof *s->shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                     -1, 0);
    if (s->shared == MAP_FAILED) {
        s->shared = NULL;
        return err_set(err, "raw sender: mmap: %s", strerror(errno));
    }
    memset(s->shared, 0, sizeof *s->shared);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4096) != 0)
        goto error;
    socklen_t alen = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &alen);
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    s->pid = fork();
    if (s->pid < 0)
        goto error;
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        sender_loop(fd, step_ns, answer, s->shared);
        _exit(0);
    }
    close(fd);
    return 0;
error:
    err_set(err, "raw sender: %s", strerror(errno));
    if (fd >= 0)
        close(fd);
    munmap(s->shared, sizeof *s->shared);
    s->shared = NULL;
    s->pid = 0;
    return -1;
}

void raw_sender_read(const raw_sender *s, raw_sender_counts *out)
{
    memset(out, 0, sizeof *out);
    if (!s->shared)
        return;
    out->tokens_sent = atomic_load(&s->shared->tokens_sent);
    out->streams_started = atomic_load(&s->shared->streams_started);
    out->streams_done = atomic_load(&s->shared->streams_done);
    out->streams_cut = atomic_load(&s->shared->streams_cut);
    out->tokens_done = atomic_load(&s->shared->tokens_done);
    out->tokens_cut = atomic_load(&s->shared->tokens_cut);
    out->short_sends = atomic_load(&s->shared->short_sends);
}

void raw_sender_stop(raw_sender *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        for (int i = 0; i < 300; i++) {
            if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
                s->pid = 0;
                break;
            }
            clock_sleep_until_ns(clock_now_ns() + 10 * CLOCK_NS_PER_MS);
        }
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
        }
    }
    s->pid = 0;
    if (s->shared)
        munmap(s->shared, sizeof *s->shared);
    s->shared = NULL;
}

/* proxy_admin — the proxy's admin port (proxy.h): GET /metrics (pmetrics.h) and /health,
 * one request per connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "proxy/proxy_state.h"

/* ---- the admin port ----------------------------------------------------------------------- */

void px_admin_close(px *p, admin *a)
{
    epoll_ctl(p->ep, EPOLL_CTL_DEL, a->fd, NULL);
    close(a->fd);
    if (a->prev)
        a->prev->next = a->next;
    else
        p->admins = a->next;
    if (a->next)
        a->next->prev = a->prev;
    buf_free(&a->in);
    buf_free(&a->out);
    free(a);
}

void px_admin_flush(px *p, admin *a)
{
    while (a->out_off < a->out.len) {
        ssize_t n = send(a->fd, a->out.data + a->out_off, a->out.len - a->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            px_watch(p, a->fd, a, EPOLLOUT | EPOLLRDHUP, EPOLL_CTL_MOD);
            return;
        }
        if (n <= 0)
            break;
        a->out_off += (size_t)n;
    }
    px_admin_close(p, a);
}

/* The answer, whole; HEAD gets the head alone (its Content-Length the body's). */
static void admin_answer(admin *a, bool head_only, int status, const char *type, const char *body)
{
    const char *reason = status == 200   ? "OK"
                         : status == 404 ? "Not Found"
                         : status == 405 ? "Method Not Allowed"
                                         : "Bad Request";
    buf_printf(&a->out,
               "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: "
               "close\r\n\r\n%s",
               status, reason, type, strlen(body), head_only ? "" : body);
}

void px_admin_read(px *p, admin *a)
{
    ssize_t n = recv(a->fd, p->rd, sizeof p->rd, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0 || buf_append(&a->in, p->rd, (size_t)n) != 0 || a->in.len > ADMIN_IN_CAP) {
        px_admin_close(p, a);
        return;
    }
    reqframe_step st;
    reqframe_kind k = reqframe_next(&a->rf, a->in.data, a->in.len, p->frame_out, sizeof p->frame_out, &st);
    if (k == REQFRAME_NEED_MORE)
        return;
    pinsp_head h;
    buf scratch = {0};
    if (k == REQFRAME_REFUSE || !(k == REQFRAME_EMIT && st.head) ||
        pinsp_rewrite_head(p->frame_out, st.produced, &p->upi, &scratch, &h) != 0) {
        admin_answer(a, false, 400, "application/json",
                     "{\"error\":{\"message\":\"bad request\",\"type\":\"invalid_request_error\",\"code\":400}}");
    } else if (strcmp(h.method, "GET") != 0 && strcmp(h.method, "HEAD") != 0) {
        admin_answer(a, false, 405, "application/json",
                     "{\"error\":{\"message\":\"GET only\",\"type\":\"invalid_request_error\",\"code\":405}}");
    } else if (strcmp(h.path, "/metrics") == 0) {
        buf text = {0};
        p->m.threshold_s = (double)pobs_threshold_ns(p->obs) / 1e9;
        pmet_write(&p->m, p->label, &text);
        admin_answer(a, h.head_method, 200, "text/plain; version=0.0.4; charset=utf-8", text.data ? text.data : "");
        buf_free(&text);
    } else if (strcmp(h.path, "/health") == 0) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"status\":\"ok\",\"upstream\":\"%s\",\"streams_in_flight\":%lld,\"connections\":%d}",
                 p->label, (long long)p->m.in_flight, p->n_down);
        admin_answer(a, h.head_method, 200, "application/json", body);
    } else {
        admin_answer(a, h.head_method, 404, "application/json",
                     "{\"error\":{\"message\":\"the admin port serves /metrics and /health\","
                     "\"type\":\"invalid_request_error\",\"code\":404}}");
    }
    buf_free(&scratch);
    px_admin_flush(p, a);
}

void px_accept_admins(px *p)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(p->admin_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            px_accept_failed(p);
            return;
        }
        admin *a = calloc(1, sizeof *a);
        if (!a) {
            close(fd);
            continue;
        }
        a->kind = K_ADMIN;
        a->fd = fd;
        a->t_open_ns = clock_now_ns();
        reqframe_init(&a->rf, 0);
        a->next = p->admins;
        if (p->admins)
            p->admins->prev = a;
        p->admins = a;
        px_watch(p, fd, a, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    }
}

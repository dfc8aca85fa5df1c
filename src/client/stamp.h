/* stamp — a socket read with the kernel's receive time of its bytes: the one place where
 * SO_TIMESTAMPNS becomes a CLOCK_MONOTONIC time. The raw transport's reads (raw_conn.c) and
 * the proxy's reads of its upstream (proxy/proxy_conns.c) both go through it. */
#ifndef STALLSCOPE_STAMP_H
#define STALLSCOPE_STAMP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Ask the kernel to stamp every segment fd receives (a control message of each read). */
void stamp_enable(int fd);

/* The kernel stamps received segments only while some socket asks for it, and it turns that
 * switch on a moment after the first asker (deferred work): bytes that arrive on a fresh
 * socket in that moment come without a stamp. stamp_hold opens a socket that asks (a TCP
 * connection on 127.0.0.1, to be kept open while stamps matter) and sends it bytes until one
 * arrives stamped, at most wait_ns. Returns its fd (close it when done), -1 when no
 * socket could be made; *on says whether a stamped byte came in time. */
int stamp_hold(int64_t wait_ns, bool *on);

/* stamp_hold once for the whole process (at most 20 ms, the first call; the socket held
 * until exit), for every reader of stamps in it: the raw transport's clients (one per client
 * thread or shard) and the proxy call it before their first read. Whether it came on. */
bool stamp_switch_on(void);

typedef struct stamp_read {
    int64_t now_ns; /* CLOCK_MONOTONIC right after the read, before any parsing */
    int64_t t_ns;   /* the bytes' time: the kernel's stamp mapped onto CLOCK_MONOTONIC, or
                       now_ns when there was none, or when it was refused */
    bool kernel;    /* t_ns is the kernel's */
} stamp_read;

/* One recvmsg(2) of fd into buf[0, size); its result (errno as it left it), *out filled
 * whatever it returned. realtime_offset_ns: CLOCK_REALTIME - CLOCK_MONOTONIC now
 * (clock_realtime_offset_ns). The kernel's stamp cannot be later than the read: up to 1 ms
 * past it is the mapping's error (taken as the read's time); more is a clock step between the
 * two, and the stamp is refused. */
ssize_t stamp_recv(int fd, void *buf, size_t size, int64_t realtime_offset_ns, stamp_read *out);

#endif

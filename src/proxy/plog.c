/* plog — see plog.h. */
#include "proxy/plog.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"

static void utc(int64_t wall_ns, const char *fmt, char *out, size_t size)
{
    time_t t = (time_t)(wall_ns / CLOCK_NS_PER_S);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, size, fmt, &tm);
}

int plog_open(plog *p, const char *dir, const plog_meta *meta, char *err)
{
    memset(p, 0, sizeof *p);
    p->t0_mono_ns = meta->t0_mono_ns;
    p->t0_wall_ns = meta->t0_wall_ns;
    char name[32];
    utc(meta->t0_wall_ns, "%Y%m%dT%H%M%SZ", name, sizeof name);
    if (fsio_join(p->session, sizeof p->session, dir, name, err) != 0)
        return -1;
    /* Two proxies started in the same second into one DIR: the second takes -2, -3 ... */
    char base[4096];
    snprintf(base, sizeof base, "%s", p->session);
    char probe[4200];
    for (int k = 2; k < 100; k++) {
        snprintf(probe, sizeof probe, "%s/proxy.json", p->session);
        FILE *f = fopen(probe, "r");
        if (!f)
            break;
        fclose(f);
        if ((size_t)snprintf(p->session, sizeof p->session, "%s-%d", base, k) >= sizeof p->session)
            return err_set(err, "%s: path too long", dir);
    }
    if (fsio_mkdirs(p->session, err) != 0)
        return -1;
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:s, s:f, s:{s:f, s:f, s:i}}", "format",
                          "stallscope-proxy-1", "session", strrchr(p->session, '/') + 1,
                          "t0_unix_ns", (json_int_t)meta->t0_wall_ns, "t0_monotonic_ns",
                          (json_int_t)meta->t0_mono_ns, "upstream", meta->upstream, "sample",
                          meta->sample, "stall_threshold", "factor", meta->obs->stall_factor,
                          "absolute_ms", (double)meta->obs->stall_abs_ns / 1e6, "window_gaps",
                          meta->obs->window_gaps);
    char path[4200];
    snprintf(path, sizeof path, "%s/proxy.json", p->session);
    int rc = j ? fsio_write_json(path, j, JSON_INDENT(2), err) : err_set(err, "out of memory");
    json_decref(j);
    return rc;
}

static int fail(plog *p, const char *why)
{
    if (!p->error[0])
        snprintf(p->error, sizeof p->error, "%s", why);
    return -1;
}

static int close_part(plog *p)
{
    char err[ERR_LEN] = "";
    int rc = 0;
    rc |= tokenlog_writer_close(&p->tokens, err);
    rc |= tokenlog_writer_close(&p->requests, err);
    rc |= tokenlog_writer_close(&p->stalls, err);
    p->hour[0] = '\0';
    return rc != 0 ? fail(p, err) : 0;
}

/* The part of the hour now is in, opened when it changed. */
static int part(plog *p, int64_t now_mono_ns)
{
    if (p->error[0])
        return -1;
    char hour[32];
    utc(p->t0_wall_ns + (now_mono_ns - p->t0_mono_ns), "%Y-%m-%dT%H", hour, sizeof hour);
    if (strcmp(hour, p->hour) == 0)
        return 0;
    if (p->hour[0] && close_part(p) != 0)
        return -1;
    char dir[4200], path[4300], err[ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s", p->session, hour);
    if (fsio_mkdirs(dir, err) != 0)
        return fail(p, err);
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    if (tokenlog_writer_open(&p->tokens, path, TOKENLOG_TOKENS_CSV, err) != 0)
        return fail(p, err);
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    if (tokenlog_writer_open(&p->requests, path, TOKENLOG_REQUESTS_CSV, err) != 0)
        return fail(p, err);
    snprintf(path, sizeof path, "%s/stalls.csv", dir);
    if (tokenlog_writer_open_header(&p->stalls, path, PLOG_STALLS_HEADER, err) != 0)
        return fail(p, err);
    snprintf(p->hour, sizeof p->hour, "%s", hour);
    return 0;
}

int plog_event(plog *p, const tokenlog_event *ev, int64_t now_mono_ns)
{
    if (part(p, now_mono_ns) != 0)
        return -1;
    tokenlog_event e = *ev;
    e.t_ns -= p->t0_mono_ns;
    char err[ERR_LEN];
    p->rows++;
    return tokenlog_writer_event(&p->tokens, &e, err) != 0 ? fail(p, err) : 0;
}

static int64_t rebase(const plog *p, int64_t t)
{
    return t < 0 ? -1 : t - p->t0_mono_ns;
}

int plog_request(plog *p, const tokenlog_request *r, int64_t now_mono_ns)
{
    if (part(p, now_mono_ns) != 0)
        return -1;
    tokenlog_request q = *r;
    q.t_plan_ns = rebase(p, q.t_plan_ns);
    q.t_send_ns = rebase(p, q.t_send_ns);
    q.t_first_ns = rebase(p, q.t_first_ns);
    q.t_end_ns = rebase(p, q.t_end_ns);
    char err[ERR_LEN];
    p->rows++;
    return tokenlog_writer_request(&p->requests, &q, err) != 0 ? fail(p, err) : 0;
}

int plog_stall(plog *p, const pobs_stall *s, int64_t now_mono_ns)
{
    if (part(p, now_mono_ns) != 0)
        return -1;
    char row[512], *at = row;
    at = tokenlog_put_i64(at, s->t_ns - p->t0_mono_ns);
    *at++ = ',';
    at = tokenlog_put_i64(at, s->user);
    *at++ = ',';
    at = tokenlog_put_i64(at, s->request);
    at += snprintf(at, 64, ",%.6f,%s,", (double)s->gap_ns / 1e6, pobs_cause_name(s->cause));
    const int named = s->n_culprits < POBS_MAX_CULPRITS ? s->n_culprits : POBS_MAX_CULPRITS;
    for (int c = 0; c < named; c++) {
        if (c)
            *at++ = ';';
        at = tokenlog_put_i64(at, s->culprit[c]);
        *at++ = ':';
        at = tokenlog_put_i64(at, s->culprit_prompt[c]);
    }
    if (s->n_culprits > named) {
        *at++ = ';';
        *at++ = '+';
        at = tokenlog_put_i64(at, s->n_culprits - named);
    }
    *at++ = '\n';
    char err[ERR_LEN];
    return tokenlog_writer_row(&p->stalls, row, (size_t)(at - row), err) != 0 ? fail(p, err) : 0;
}

int plog_tick(plog *p, int64_t now_mono_ns)
{
    if (now_mono_ns < p->next_flush_ns || p->error[0] || !p->hour[0])
        return p->error[0] ? -1 : 0;
    p->next_flush_ns = now_mono_ns + PLOG_FLUSH_NS;
    char err[ERR_LEN];
    if (tokenlog_writer_flush(&p->tokens, err) != 0 || tokenlog_writer_flush(&p->requests, err) != 0 ||
        tokenlog_writer_flush(&p->stalls, err) != 0)
        return fail(p, err);
    return 0;
}

int plog_close(plog *p, char *err)
{
    if (p->hour[0])
        close_part(p);
    return p->error[0] ? err_set(err, "%s", p->error) : 0;
}

/* tokenlog_merge — logs kept apart put together in time order (tokenlog.h): each part is
 * sorted where it was written (its rows arrive nearly in order), then the parts are merged,
 * k-way, into one log. */
#include "common/tokenlog.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

typedef int (*order_cmp)(const void *a, const void *b);

/* Stable sort of base[0, n) (elements of `size` bytes) that costs little when the array is
 * nearly in order: it finds the runs already in order and merges them pairwise (tmp holds n
 * elements). -1 when out of memory. */
static int merge_runs_sort(void *base, size_t n, size_t size, order_cmp cmp, void *tmp)
{
    char *src = base, *dst = tmp;
    size_t runs = 1;
    for (size_t i = 1; i < n; i++)
        runs += cmp(src + (i - 1) * size, src + i * size) > 0;
    if (runs <= 1)
        return 0;
    size_t *starts = malloc((runs + 1) * sizeof *starts);
    if (!starts)
        return -1;
    size_t r = 0;
    starts[r++] = 0;
    for (size_t i = 1; i < n; i++)
        if (cmp(src + (i - 1) * size, src + i * size) > 0)
            starts[r++] = i;
    starts[r] = n;
    while (r > 1) {
        size_t merged = 0;
        for (size_t k = 0; k < r; k += 2) {
            const size_t a = starts[k], mid = starts[k + 1];
            if (k + 1 == r) { /* an odd run out: as it is */
                memcpy(dst + size * a, src + size * a, size * (n - a));
            } else {
                const size_t b = starts[k + 2];
                size_t i = a, j = mid, out = a;
                while (i < mid && j < b) /* the left one first on ties: stable */
                    if (cmp(src + size * j, src + size * i) < 0)
                        memcpy(dst + size * out++, src + size * j++, size);
                    else
                        memcpy(dst + size * out++, src + size * i++, size);
                memcpy(dst + size * out, src + size * i, size * (mid - i));
                out += mid - i;
                memcpy(dst + size * out, src + size * j, size * (b - j));
            }
            starts[merged++] = a;
        }
        starts[merged] = n;
        r = merged;
        char *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != base)
        memcpy(base, src, n * size);
    free(starts);
    return 0;
}

/* The order of requests: when they were sent (carried over from the warm-up: -1), then the
 * user. */
typedef struct row_key {
    int64_t t_send_ns;
    int64_t user;
    int64_t row;
} row_key;

static int cmp_row_key(const void *x, const void *y)
{
    const row_key *a = x, *b = y;
    if (a->t_send_ns != b->t_send_ns)
        return a->t_send_ns < b->t_send_ns ? -1 : 1;
    return (a->user > b->user) - (a->user < b->user);
}

static int cmp_request(const tokenlog_request *a, const tokenlog_request *b)
{
    const row_key ka = {a->t_send_ns, a->user, 0}, kb = {b->t_send_ns, b->user, 0};
    return cmp_row_key(&ka, &kb);
}

/* Events: time, user, then the request's place in time order (one user's requests never
 * overlap, but a server could answer two at once); the stable sort keeps one request's
 * events in the order they arrived. */
static int cmp_event(const void *x, const void *y)
{
    const tokenlog_event *a = x, *b = y;
    if (a->t_ns != b->t_ns)
        return a->t_ns < b->t_ns ? -1 : 1;
    if (a->user != b->user)
        return a->user < b->user ? -1 : 1;
    return (a->request > b->request) - (a->request < b->request);
}

int tokenlog_merge_order(tokenlog *part, char *err)
{
    const size_t n_req = (size_t)part->n_requests, n_ev = (size_t)part->n_events;
    row_key *keys = malloc((n_req ? n_req : 1) * sizeof *keys);
    int64_t *rank = malloc((n_req ? n_req : 1) * sizeof *rank);
    tokenlog_request *sorted = malloc((n_req ? n_req : 1) * sizeof *sorted);
    size_t tmp_size = n_req * sizeof(row_key) > n_ev * sizeof(tokenlog_event)
                          ? n_req * sizeof(row_key)
                          : n_ev * sizeof(tokenlog_event);
    void *tmp = malloc(tmp_size ? tmp_size : 1);
    int rc = -1;
    if (!keys || !rank || !sorted || !tmp)
        goto done;
    for (size_t i = 0; i < n_req; i++)
        keys[i] = (row_key){part->requests[i].t_send_ns, part->requests[i].user, (int64_t)i};
    if (merge_runs_sort(keys, n_req, sizeof *keys, cmp_row_key, tmp) != 0)
        goto done;
    for (size_t i = 0; i < n_req; i++) {
        sorted[i] = part->requests[keys[i].row];
        rank[keys[i].row] = (int64_t)i;
    }
    free(part->requests);
    part->requests = sorted;
    part->cap_requests = (int64_t)(n_req ? n_req : 1);
    sorted = NULL;
    for (size_t i = 0; i < n_ev; i++)
        part->events[i].request = rank[part->events[i].request];
    rc = merge_runs_sort(part->events, n_ev, sizeof *part->events, cmp_event, tmp);
done:
    free(keys);
    free(rank);
    free(sorted);
    free(tmp);
    return rc == 0 ? 0 : err_set(err, "out of memory putting the token log in order");
}

/* A min-heap of parts by the row each one offers next. */
typedef struct merge_heap {
    int *parts;
    int n;
    tokenlog *const *logs;
    int64_t *pos;    /* per part: its next row */
    int64_t **final; /* per part: its request rows -> their rows in the merged log */
    bool events;     /* merging events (else requests) */
} merge_heap;

static bool offers_before(const merge_heap *h, int a, int b)
{
    const tokenlog *la = h->logs[a], *lb = h->logs[b];
    int c;
    if (h->events) {
        tokenlog_event ea = la->events[h->pos[a]], eb = lb->events[h->pos[b]];
        ea.request = h->final[a][ea.request];
        eb.request = h->final[b][eb.request];
        c = cmp_event(&ea, &eb);
    } else {
        c = cmp_request(&la->requests[h->pos[a]], &lb->requests[h->pos[b]]);
    }
    return c != 0 ? c < 0 : a < b;
}

static void heap_sift_down(merge_heap *h, int i)
{
    for (;;) {
        int least = i, left = 2 * i + 1, right = left + 1;
        if (left < h->n && offers_before(h, h->parts[left], h->parts[least]))
            least = left;
        if (right < h->n && offers_before(h, h->parts[right], h->parts[least]))
            least = right;
        if (least == i)
            return;
        int swap = h->parts[i];
        h->parts[i] = h->parts[least];
        h->parts[least] = swap;
        i = least;
    }
}

static int64_t rows_of(const merge_heap *h, int part)
{
    return h->events ? h->logs[part]->n_events : h->logs[part]->n_requests;
}

int tokenlog_merge(tokenlog *const *parts, int n_parts, bool events, tokenlog *out, char *err)
{
    merge_heap h = {0};
    h.logs = parts;
    h.parts = malloc((size_t)(n_parts > 0 ? n_parts : 1) * sizeof *h.parts);
    h.pos = calloc((size_t)(n_parts > 0 ? n_parts : 1), sizeof *h.pos);
    h.final = calloc((size_t)(n_parts > 0 ? n_parts : 1), sizeof *h.final);
    int rc = -1;
    if (!h.parts || !h.pos || !h.final)
        goto done;
    for (int i = 0; i < n_parts; i++) {
        int64_t n = parts[i]->n_requests;
        if (!(h.final[i] = malloc((size_t)(n > 0 ? n : 1) * sizeof *h.final[i])))
            goto done;
    }
    for (int pass = 0; pass < (events ? 2 : 1); pass++) {
        h.events = pass == 1;
        h.n = 0;
        for (int i = 0; i < n_parts; i++) {
            h.pos[i] = 0;
            if (rows_of(&h, i) > 0)
                h.parts[h.n++] = i;
        }
        for (int i = h.n / 2 - 1; i >= 0; i--)
            heap_sift_down(&h, i);
        while (h.n > 0) {
            const int pi = h.parts[0];
            const tokenlog *part = parts[pi];
            const int64_t at = h.pos[pi]++;
            if (h.events) {
                tokenlog_event ev = part->events[at];
                ev.request = h.final[pi][ev.request];
                if (tokenlog_add_event(out, &ev) != 0)
                    goto done;
            } else {
                tokenlog_request row = part->requests[at];
                row.request = out->n_requests;
                if (tokenlog_add_request(out, &row, &h.final[pi][at]) != 0)
                    goto done;
            }
            if (h.pos[pi] == rows_of(&h, pi))
                h.parts[0] = h.parts[--h.n];
            heap_sift_down(&h, 0);
        }
    }
    rc = 0;
done:
    for (int i = 0; h.final && i < n_parts; i++)
        free(h.final[i]);
    free(h.final);
    free(h.pos);
    free(h.parts);
    return rc == 0 ? 0 : err_set(err, "out of memory merging the token log");
}

/* ---- a live server's sched log, named as the rows are ---------------------------------- */

typedef struct sent_name {
    int64_t sent, name;
} sent_name;

static int cmp_sent(const void *x, const void *y)
{
    const sent_name *a = x, *b = y;
    return (a->sent > b->sent) - (a->sent < b->sent);
}

int tokenlog_name_sched_events(tokenlog *log, bool sent, char *err)
{
    if (log->n_sched_events == 0)
        return 0;
    sent_name *names = malloc((size_t)(log->n_requests ? log->n_requests : 1) * sizeof *names);
    if (!names)
        return err_set(err, "out of memory naming the sched log's requests");
    for (int64_t i = 0; i < log->n_requests; i++)
        names[i] = (sent_name){log->requests[i].sent_id,
                               sent ? log->requests[i].sent_id : log->requests[i].request};
    qsort(names, (size_t)log->n_requests, sizeof *names, cmp_sent);
    int64_t kept = 0;
    for (int64_t i = 0; i < log->n_sched_events; i++) {
        tokenlog_sched_event ev = log->sched_events[i];
        const sent_name key = {ev.request, 0};
        const sent_name *found =
            bsearch(&key, names, (size_t)log->n_requests, sizeof *names, cmp_sent);
        if (!found)
            continue;
        ev.request = found->name;
        log->sched_events[kept++] = ev;
    }
    log->n_sched_events = kept;
    free(names);
    return 0;
}

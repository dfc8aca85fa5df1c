/* calib_target_admin — a target's resets and /metrics for calibrate --target
 * (calib_target_admin.h). */
#include "calibrate/calib_target_admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client/fetch.h"
#include "client/prom.h"
#include "client/scrape.h"
#include "common/err.h"

/* Several series of one counter (label sets) are summed, as scrape.c does. */
static int on_sample(void *ctx, const prom_sample *s)
{
    calib_target_metrics *m = ctx;
    double *into = NULL;
    if (prom_name_is(s, "vllm:prefix_cache_queries_total") ||
        prom_name_is(s, "vllm:gpu_prefix_cache_queries_total"))
        into = &m->cache_queries;
    else if (prom_name_is(s, "vllm:prefix_cache_hits_total") ||
             prom_name_is(s, "vllm:gpu_prefix_cache_hits_total"))
        into = &m->cache_hits;
    if (into)
        *into = (*into < 0 ? 0 : *into) + s->value;
    /* a gauge: of several series (label sets), the largest */
    if ((prom_name_is(s, "stallscope_kv_cells_occupied") ||
         prom_name_is(s, "llamacpp:kv_cache_tokens")) && s->value > m->kv_cells)
        m->kv_cells = s->value;
    return 0;
}

int calib_target_metrics_parse(const char *text, size_t len, calib_target_metrics *out,
                               char *err)
{
    *out = CALIB_TARGET_METRICS_NONE;
    scrape_frame f;
    if (scrape_frame_parse(&f, text, len, err) != 0 || prom_parse(text, len, on_sample, out, err) != 0) {
        *out = CALIB_TARGET_METRICS_NONE;
        return -1;
    }
    if (f.has[SCRAPE_KV_USAGE])
        out->kv_usage = f.value[SCRAPE_KV_USAGE];
    return 0;
}

int calib_target_metrics_scrape(const transport_options *so, int64_t timeout_ns,
                                calib_target_metrics *out, char *err)
{
    *out = CALIB_TARGET_METRICS_NONE;
    int status = 0;
    char *body = NULL;
    if (fetch_http(so, "GET", "/metrics", NULL, timeout_ns, &status, &body, err) != 0)
        return -1;
    int rc = -1;
    if (status != 200)
        err_set(err, "GET /metrics: HTTP %d", status);
    else
        rc = calib_target_metrics_parse(body ? body : "", body ? strlen(body) : 0, out, err);
    free(body);
    return rc;
}

/* The resets a server may offer, tried in this order (a 2xx: offered; else not). */
static const struct {
    const char *path, *server;
} RESETS[] = {
    {"/reset_prefix_cache", "vLLM"},
    {"/flush_cache", "SGLang"},
    {"/slots/0?action=erase", "llama.cpp"},
};

/* POST path: did it answer 2xx? */
static bool post_ok(const transport_options *so, const char *path, int64_t timeout_ns)
{
    int status = 0;
    char *body = NULL, why[ERR_LEN];
    const int rc = fetch_http(so, "POST", path, NULL, timeout_ns, &status, &body, why);
    free(body);
    return rc == 0 && status >= 200 && status < 300;
}

/* llama.cpp's erase of slot `slot`. */
static bool erase_slot(const transport_options *so, int slot, int64_t timeout_ns)
{
    char path[64];
    snprintf(path, sizeof path, "/slots/%d?action=erase", slot);
    return post_ok(so, path, timeout_ns);
}

static bool is_llamacpp(const calib_target_kept *kept)
{
    return strcmp(kept->reset_path, "/slots/0?action=erase") == 0;
}

/* llama.cpp's GET /props: its total_slots (0: not said). */
static int props_slots(const transport_options *so, int64_t timeout_ns)
{
    int status = 0;
    char *body = NULL, why[ERR_LEN];
    int slots = 0;
    if (fetch_http(so, "GET", "/props", NULL, timeout_ns, &status, &body, why) == 0 &&
        status == 200) {
        json_t *root = json_loads(body ? body : "", 0, NULL);
        const json_t *n = json_object_get(root, "total_slots");
        if (json_is_integer(n) && json_integer_value(n) > 0 &&
            json_integer_value(n) <= CALIB_TARGET_MAX_SLOTS)
            slots = (int)json_integer_value(n);
        json_decref(root);
    }
    free(body);
    return slots;
}

void calib_target_find_reset(const transport_options *so, int64_t timeout_ns,
                             calib_target_kept *kept)
{
    kept->props_slots = props_slots(so, timeout_ns);
    for (size_t i = 0; i < sizeof RESETS / sizeof RESETS[0]; i++)
        if (post_ok(so, RESETS[i].path, timeout_ns)) {
            snprintf(kept->reset_path, sizeof kept->reset_path, "%s", RESETS[i].path);
            snprintf(kept->reset_server, sizeof kept->reset_server, "%s", RESETS[i].server);
            kept->reset_slots = 1;
            if (is_llamacpp(kept))
                while (kept->reset_slots < CALIB_TARGET_MAX_SLOTS &&
                       erase_slot(so, kept->reset_slots, timeout_ns))
                    kept->reset_slots++;
            return;
        }
}

void calib_target_reset(const transport_options *so, int64_t timeout_ns, calib_target_kept *kept)
{
    if (!kept->reset_path[0])
        return;
    bool ok = post_ok(so, kept->reset_path, timeout_ns);
    /* every slot, whatever one answered: a slot busy with a stream may refuse its erase */
    for (int slot = 1; is_llamacpp(kept) && slot < kept->reset_slots; slot++)
        ok = erase_slot(so, slot, timeout_ns) && ok;
    if (ok)
        kept->resets++;
}

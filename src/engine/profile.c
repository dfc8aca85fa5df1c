/* profile — the hardware profile file (profile.h). */
#include "engine/profile.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "engine/sched.h"

/* A step term above a minute, or a rate above 1e30, is not a measurement. */
#define PROFILE_MAX_NS 60e9

/* A required positive number field. */
static int number_required(json_t *root, const char *key, double *out, const char *path,
                           char *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || !json_is_number(v))
        return err_set(err, "%s: field \"%s\" must be a number", path, key);
    const double x = json_number_value(v);
    if (!(x > 0) || x > 1e30)
        return err_set(err, "%s: field \"%s\" = %g must be positive", path, key, x);
    *out = x;
    return 0;
}

/* An optional number field: absent leaves *out alone; present must be >= 0. */
static int number_optional(json_t *root, const char *key, double *out, const char *path,
                           char *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || !(json_number_value(v) >= 0) || json_number_value(v) > 1e30)
        return err_set(err, "%s: field \"%s\" must be a number >= 0", path, key);
    *out = json_number_value(v);
    return 0;
}

static int step_term(json_t *sm, const char *key, double *out, const char *path, char *err)
{
    json_t *v = json_object_get(sm, key);
    if (!v || !json_is_number(v))
        return err_set(err, "%s: step_model.%s must be a number (ns)", path, key);
    const double x = json_number_value(v);
    if (!isfinite(x) || x < 0 || x > PROFILE_MAX_NS)
        return err_set(err, "%s: step_model.%s = %g must be in [0, %g] ns", path, key, x,
                       PROFILE_MAX_NS);
    *out = x;
    return 0;
}

static int read_step_model(json_t *doc, cost_step_fit *fit, const char *path, char *err)
{
    json_t *sm = json_object_get(doc, "step_model");
    if (!sm)
        return err_set(err, "%s: a profile of a server needs \"step_model\"", path);
    if (!json_is_object(sm))
        return err_set(err, "%s: step_model must be an object", path);
    json_t *model = json_object_get(sm, "model");
    if (!json_is_string(model) || json_string_length(model) == 0 ||
        json_string_length(model) >= sizeof fit->model)
        return err_set(err, "%s: step_model.model must name the model the terms were "
                            "measured on", path);
    memset(fit, 0, sizeof *fit);
    snprintf(fit->model, sizeof fit->model, "%s", json_string_value(model));
    if (step_term(sm, "step_ns", &fit->step_ns, path, err) != 0 ||
        step_term(sm, "seq_ns", &fit->seq_ns, path, err) != 0 ||
        step_term(sm, "ctx_ns", &fit->ctx_ns, path, err) != 0 ||
        step_term(sm, "token_ns", &fit->token_ns, path, err) != 0 ||
        step_term(sm, "pair_ns", &fit->pair_ns, path, err) != 0)
        return -1;
    json_t *overlap = json_object_get(sm, "overlap"); /* optional: absent is false */
    if (overlap && !json_is_boolean(overlap))
        return err_set(err, "%s: step_model.overlap must be true or false", path);
    fit->overlap = json_is_true(overlap);
    if (fit->step_ns + fit->seq_ns <= 0)
        return err_set(err, "%s: step_model: a decode step of one sequence would take no time "
                            "(step_ns + seq_ns = 0)", path);
    return 0;
}

int profile_read(const char *path, cost_gpu *out, profile_info *info, char *err)
{
    json_t *doc = fsio_read_json(path, 0, err);
    if (!doc)
        return -1;
    int rc = -1;
    cost_gpu g;
    profile_info pi;
    memset(&g, 0, sizeof g);
    memset(&pi, 0, sizeof pi);
    pi.prefix_caching = -1;
    pi.kv_layout = -1;
    double overhead = 0, threads = 0;
    if (!json_is_object(doc)) {
        err_set(err, "%s: not a JSON object", path);
        goto done;
    }
    json_t *format = json_object_get(doc, "format");
    if (format && (!json_is_string(format) || strcmp(json_string_value(format), PROFILE_FORMAT))) {
        err_set(err, "%s: \"format\" is not \"%s\": not a hardware profile", path, PROFILE_FORMAT);
        goto done;
    }
    json_t *version = json_object_get(doc, "version");
    pi.version = 1;
    if (version) {
        if (!json_is_integer(version) || json_integer_value(version) < 1) {
            err_set(err, "%s: \"version\" must be a positive integer", path);
            goto done;
        }
        if (json_integer_value(version) > PROFILE_VERSION) {
            err_set(err, "%s: profile version %lld is newer than this stallscope reads (1 to %d)",
                    path, (long long)json_integer_value(version), PROFILE_VERSION);
            goto done;
        }
        pi.version = (int)json_integer_value(version);
    }
    json_t *name = json_object_get(doc, "name");
    snprintf(g.name, sizeof g.name, "%s",
             json_is_string(name) && json_string_length(name) > 0 ? json_string_value(name)
                                                                    : "profile");
    bool rates_required = true;
    if (pi.version >= 2) {
        json_t *source = json_object_get(doc, "source");
        const char *src = json_is_string(source) ? json_string_value(source) : "";
        if (strcmp(src, PROFILE_SOURCE_CPU) != 0 && strcmp(src, PROFILE_SOURCE_TARGET) != 0) {
            err_set(err, "%s: \"source\" must be \"%s\" or \"%s\"", path, PROFILE_SOURCE_CPU,
                    PROFILE_SOURCE_TARGET);
            goto done;
        }
        snprintf(pi.source, sizeof pi.source, "%s", src);
        if (strcmp(src, PROFILE_SOURCE_TARGET) == 0) {
            rates_required = false;
            json_t *target = json_object_get(doc, "target");
            if (json_is_string(target))
                snprintf(pi.target, sizeof pi.target, "%s", json_string_value(target));
            json_t *caching = json_object_get(doc, "prefix_caching");
            if (caching && !json_is_boolean(caching) && !json_is_null(caching)) {
                err_set(err, "%s: \"prefix_caching\" must be true, false or null", path);
                goto done;
            }
            pi.prefix_caching = json_is_boolean(caching) ? json_is_true(caching) : -1;
            json_t *layout = json_object_get(doc, "kv_layout");
            if (layout && !json_is_null(layout)) {
                sched_kv_layout kl;
                char why[ERR_LEN];
                if (!json_is_string(layout) ||
                    sched_kv_layout_parse(json_string_value(layout), &kl, why) != 0) {
                    err_set(err, "%s: \"kv_layout\" must be \"paged\", \"unified\" or null", path);
                    goto done;
                }
                pi.kv_layout = (int)kl;
            }
            json_t *slots = json_object_get(doc, "slots");
            if (slots && !(json_is_integer(slots) && json_integer_value(slots) > 0 &&
                           json_integer_value(slots) <= (1 << 20))) {
                err_set(err, "%s: \"slots\" must be a count of slots (1 to %d)", path, 1 << 20);
                goto done;
            }
            pi.slots = slots ? (int)json_integer_value(slots) : 0;
        }
        /* A rates-only profile (calibrate --no-fit) is a roofline device; a server's profile
         * is nothing but its step model. */
        if ((json_object_get(doc, "step_model") || !rates_required) &&
            read_step_model(doc, &g.fit, path, err) != 0)
            goto done;
    }
    if ((rates_required ? number_required(doc, "peak_flops", &g.peak_flops, path, err)
                        : number_optional(doc, "peak_flops", &g.peak_flops, path, err)) != 0 ||
        (rates_required ? number_required(doc, "mem_bandwidth", &g.mem_bandwidth, path, err)
                        : number_optional(doc, "mem_bandwidth", &g.mem_bandwidth, path, err)) != 0 ||
        number_required(doc, "mem_bytes", &g.mem_bytes, path, err) != 0 ||
        number_optional(doc, "attention_flops", &g.attention_flops, path, err) != 0 ||
        number_optional(doc, "bytes_per_param", &g.bytes_per_param, path, err) != 0 ||
        number_optional(doc, "kv_bytes_per_elem", &g.kv_bytes_per_elem, path, err) != 0 ||
        number_optional(doc, "step_overhead_ns", &overhead, path, err) != 0 ||
        number_optional(doc, "threads", &threads, path, err) != 0)
        goto done;
    if (overhead > PROFILE_MAX_NS || threads > 1e6) {
        err_set(err, "%s: step_overhead_ns or threads out of range", path);
        goto done;
    }
    g.step_overhead_ns = (int64_t)overhead;
    g.threads = (int)threads;
    g.source = pi.version >= 2 && strcmp(pi.source, PROFILE_SOURCE_TARGET) == 0
                   ? "hardware profile (--hardware, stallscope calibrate --target: a server's "
                     "measured steps)"
                   : "hardware profile (--hardware, written by stallscope calibrate)";
    *out = g;
    if (info)
        *info = pi;
    rc = 0;
done:
    json_decref(doc);
    return rc;
}

json_t *profile_to_json(const cost_gpu *g, const profile_info *info, const fit_result *fit,
                        const fit_probe *probes, const double *residual, int n_probes)
{
    json_t *root = json_object();
    json_t *sm = json_object();
    json_t *list = json_array();
    if (!root || !sm || !list) {
        json_decref(root);
        json_decref(sm);
        json_decref(list);
        return NULL;
    }
    const bool target = strcmp(info->source, PROFILE_SOURCE_TARGET) == 0;
    json_object_set_new(root, "format", json_string(PROFILE_FORMAT));
    json_object_set_new(root, "version", json_integer(PROFILE_VERSION));
    json_object_set_new(root, "name", json_string(g->name));
    json_object_set_new(root, "kind", json_string(target ? "server" : "cpu"));
    json_object_set_new(root, "source", json_string(info->source));
    if (target) {
        json_object_set_new(root, "target", json_string(info->target));
        json_object_set_new(root, "prefix_caching", info->prefix_caching < 0
                                                        ? json_null()
                                                        : json_boolean(info->prefix_caching));
        json_object_set_new(root, "kv_layout",
                            info->kv_layout < 0
                                ? json_null()
                                : json_string(sched_kv_layout_name((sched_kv_layout)info->kv_layout)));
        if (info->kv_layout == SCHED_KV_UNIFIED && info->slots > 0)
            json_object_set_new(root, "slots", json_integer(info->slots));
    }
    if (g->peak_flops > 0)
        json_object_set_new(root, "peak_flops", json_real(g->peak_flops));
    if (g->attention_flops > 0)
        json_object_set_new(root, "attention_flops", json_real(g->attention_flops));
    if (g->mem_bandwidth > 0)
        json_object_set_new(root, "mem_bandwidth", json_real(g->mem_bandwidth));
    json_object_set_new(root, "mem_bytes", json_real(g->mem_bytes));
    if (g->bytes_per_param > 0)
        json_object_set_new(root, "bytes_per_param", json_real(g->bytes_per_param));
    if (g->kv_bytes_per_elem > 0)
        json_object_set_new(root, "kv_bytes_per_elem", json_real(g->kv_bytes_per_elem));
    json_object_set_new(root, "step_overhead_ns", json_integer(g->step_overhead_ns));
    if (g->threads > 0)
        json_object_set_new(root, "threads", json_integer(g->threads));
    json_object_set_new(sm, "model", json_string(g->fit.model));
    json_object_set_new(sm, "step_ns", json_real(g->fit.step_ns));
    json_object_set_new(sm, "seq_ns", json_real(g->fit.seq_ns));
    json_object_set_new(sm, "ctx_ns", json_real(g->fit.ctx_ns));
    json_object_set_new(sm, "token_ns", json_real(g->fit.token_ns));
    json_object_set_new(sm, "pair_ns", json_real(g->fit.pair_ns));
    if (g->fit.overlap)
        json_object_set_new(sm, "overlap", json_true());
    if (fit) {
        json_object_set_new(sm, "decode_rms", json_real(fit->decode_rms));
        json_object_set_new(sm, "prefill_rms", json_real(fit->prefill_rms));
        json_object_set_new(sm, "max_abs_residual", json_real(fit->max_abs));
    }
    if (g->fit.model[0])
        json_object_set_new(root, "step_model", sm);
    else
        json_decref(sm);
    for (int i = 0; probes && i < n_probes; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "batch", json_integer(probes[i].batch));
        json_object_set_new(p, "context_sum", json_real(probes[i].context_sum));
        json_object_set_new(p, "prompt_tokens", json_integer(probes[i].prompt_tokens));
        json_object_set_new(p, "ns", json_real(probes[i].ns));
        json_object_set_new(p, "fitted_ns", json_real(fit_predict_ns(&g->fit, &probes[i])));
        if (residual)
            json_object_set_new(p, "residual", json_real(residual[i]));
        json_array_append_new(list, p);
    }
    json_object_set_new(root, "probes", list);
    return root;
}

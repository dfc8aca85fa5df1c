/* result — `--save-result FILE`: the interference run in `vllm bench serve`'s result keys
 * (the metric table's, analysis/metric.h), stallscope's own figures under "stallscope"
 * (experiment.h). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "analysis/metric.h"
#include "common/err.h"
#include "common/fsio.h"
#include "experiment/config.h"
#include "experiment/result.h"

int experiment_save_result(const char *path, const experiment_config *cfg,
                           const analysis_summary *run, char *err)
{
    json_t *root = metric_vllm_result(run);
    json_t *ours = analysis_summary_to_json(run);
    if (!root || !ours) {
        json_decref(root);
        json_decref(ours);
        return err_set(err, "out of memory");
    }
    /* vLLM's run identity: the date, the label, and each --metadata KEY=VALUE as a key. */
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    json_object_set_new(root, "date", json_string(date));
    json_object_set_new(root, "label", cfg->label[0] ? json_string(cfg->label) : json_null());
    char meta[sizeof cfg->metadata];
    snprintf(meta, sizeof meta, "%s", cfg->metadata);
    for (char *save = NULL, *line = strtok_r(meta, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (!json_object_get(root, line)) /* never over a metric */
            json_object_set_new(root, line, json_string(eq + 1));
    }
    json_object_set_new(root, "stallscope", ours);
    int rc = fsio_write_json(path, root, JSON_INDENT(2) | JSON_REAL_PRECISION(10), err);
    json_decref(root);
    return rc;
}

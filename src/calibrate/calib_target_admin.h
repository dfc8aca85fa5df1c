/* calib_target_admin — a target's endpoints beside the API, for calibrate --target: the
 * cache resets it may offer, and its /metrics (calib_target_state.h's calib_target_metrics):
 * KV usage as client/scrape.h names it in
 * every engine (vLLM, SGLang, llama.cpp), a unified cache's occupied cells
 * (stallscope_kv_cells_occupied, llamacpp:kv_cache_tokens), and vLLM's prefix cache counters
 * (vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total; the older
 * vllm:gpu_prefix_cache_queries_total / _hits_total too). Internal to src/calibrate/. */
#ifndef STALLSCOPE_CALIB_TARGET_ADMIN_H
#define STALLSCOPE_CALIB_TARGET_ADMIN_H
#include <stddef.h>
#include <stdint.h>

#include "calibrate/calib_target_state.h"
#include "client/transport.h"

/* One exposition into *out (-1 where a figure is absent). 0, or -1 with err (malformed). */
int calib_target_metrics_parse(const char *text, size_t len, calib_target_metrics *out,
                               char *err);
/* GET /metrics and parse it. 0, or -1 with err (no answer, not 200, malformed): out all -1. */
int calib_target_metrics_scrape(const transport_options *so, int64_t timeout_ns,
                                calib_target_metrics *out, char *err);

/* Which reset the target offers: the first of vLLM's POST /reset_prefix_cache, SGLang's
 * POST /flush_cache, llama.cpp's POST /slots/0?action=erase to answer 2xx, into
 * kept->reset_path and reset_server (none: ""). llama.cpp erases one slot at a time: the
 * slots answering 2xx from 0 on (at most CALIB_TARGET_MAX_SLOTS; it refuses an id past its
 * last) are kept->reset_slots, and every reset erases them all. llama.cpp's GET /props
 * "total_slots", where answered, into kept->props_slots (a server without the erase, started
 * --no-slots, still says its slots there). Never an error. */
#define CALIB_TARGET_MAX_SLOTS 512
void calib_target_find_reset(const transport_options *so, int64_t timeout_ns,
                             calib_target_kept *kept);
/* POST kept's reset, when one, to each slot for llama.cpp, every one whatever another
 * answered (a slot busy with a stream may refuse); a reset whose every POST answered 2xx counts
 * in kept->resets, a failure only goes uncounted. */
void calib_target_reset(const transport_options *so, int64_t timeout_ns, calib_target_kept *kept);

#endif

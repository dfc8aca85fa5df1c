/* server_flags — one scheduler setting (policy, token budget, running requests) in the flags of the servers
 * people run: vLLM, SGLang, llama.cpp, TGI, and our own `serve`. One mapping for `run
 * --print-server-flags`, `sweep --print-server-flags` and the tuner's answer. */
#include <stdio.h>

#include "experiment/config.h"
#include "experiment/server_flags.h"

/* Context per sequence: the long prompt, its answer, and room for the background's. */
static int context_tokens(const workload_config *wl)
{
    int ctx = wl->prompt_tokens + wl->inject_max_tokens + 1024;
    /* Background requests as long as the distributions draw (a trace's rows are checked
     * against the server when they are sent). */
    int bg = workload_dist_max(&wl->prompt_len) + workload_dist_max(&wl->answer_len);
    return bg > ctx ? bg : ctx;
}

void experiment_print_server_setting(FILE *out, const char *indent, sched_policy policy,
                                     int budget, int max_num_seqs, const workload_config *wl)
{
    const int ctx = context_tokens(wl);
    /* llama.cpp: its slots are its running requests (max_num_seqs when given); else one per
     * stream, plus the injector; open-loop requests in flight at most max_concurrency (64
     * assumed without a limit) */
    const int slots = max_num_seqs > 0
                          ? max_num_seqs
                          : wl->users + 2 +
                                (workload_open_loop(wl)
                                     ? (wl->max_concurrency > 0 ? wl->max_concurrency : 64)
                                     : 0);
    char seqs_vllm[48] = "", seqs_sglang[48] = "", seqs_tgi[48] = "", seqs_ours[48] = "";
    if (max_num_seqs > 0) {
        snprintf(seqs_vllm, sizeof seqs_vllm, " --max-num-seqs %d", max_num_seqs);
        snprintf(seqs_sglang, sizeof seqs_sglang, " --max-running-requests %d", max_num_seqs);
        snprintf(seqs_tgi, sizeof seqs_tgi, " --max-batch-size %d", max_num_seqs);
        snprintf(seqs_ours, sizeof seqs_ours, " --max-num-seqs %d", max_num_seqs);
    }
    const bool chunked = policy == SCHED_CHUNKED;
    fprintf(out, "%svLLM:       vllm serve MODEL --max-num-batched-tokens %d%s %s --max-model-len %d%s\n",
            indent, budget, seqs_vllm,
            chunked ? "--enable-chunked-prefill" : "--no-enable-chunked-prefill", ctx,
            policy == SCHED_PREFILL_FIRST ? "   (prefill-first is vLLM V0's scheduler)" : "");
    if (chunked)
        fprintf(out, "%sSGLang:     python -m sglang.launch_server --model-path MODEL "
                     "--chunked-prefill-size %d --enable-mixed-chunk%s\n",
                indent, budget, seqs_sglang);
    else
        fprintf(out, "%sSGLang:     python -m sglang.launch_server --model-path MODEL "
                     "--chunked-prefill-size -1 --max-prefill-tokens %d%s\n",
                indent, budget, seqs_sglang);
    fprintf(out, "%sllama.cpp:  llama-server -m MODEL.gguf --batch-size %d --ubatch-size %d "
                 "--parallel %d --ctx-size %d\n",
            indent, budget, budget, slots, slots * ctx);
    /* TGI (text-generation-launcher): --max-batch-prefill-tokens is the prefill budget of a
     * step; TGI 3 splits a longer prompt over steps (chunked), a budget >= the prompt prefills
     * it in one. A prompt must be under --max-input-tokens, itself under --max-total-tokens;
     * requests past --max-concurrent-requests (default 128) are refused, so every stream gets
     * one. */
    fprintf(out, "%sTGI:        text-generation-launcher --model-id MODEL --max-batch-prefill-tokens "
                 "%d --max-input-tokens %d --max-total-tokens %d --max-concurrent-requests %d%s%s\n",
            indent, budget, ctx - 1, ctx, slots, seqs_tgi,
            chunked ? "   (chunked: TGI 3 or later)" : "");
    fprintf(out, "%sstallscope: stallscope serve --policy %s --max-num-batched-tokens %d%s\n",
            indent, sched_policy_name(policy), budget, seqs_ours);
}

void experiment_print_prefix_caching(FILE *out, const char *indent)
{
    fprintf(out, "%sprefix caching on: vLLM --enable-prefix-caching (V1's default); SGLang's radix "
                 "cache (its default; --disable-radix-cache is off); llama.cpp keeps each slot's "
                 "prompt (cache_prompt) but shares nothing across slots; TGI caches prefixes by "
                 "default (v3); stallscope serve --enable-prefix-caching\n",
            indent);
}

void experiment_print_server_flags(FILE *out, const char *indent, sched_policy policy, int budget,
                                   const workload_config *wl)
{
    experiment_print_server_setting(out, indent, policy, budget, 0, wl);
}

void experiment_print_server_guide(FILE *out, const experiment_config *cfg)
{
    const workload_config *wl = &cfg->wl;
    /* One-step prefill needs a budget that holds the whole prompt. */
    int budget = cfg->sched.max_num_batched_tokens;
    if (budget < wl->prompt_tokens)
        budget = wl->prompt_tokens;
    fprintf(out, "Server settings for the experiment (long prompt: %d tokens).\n\n",
            wl->prompt_tokens);
    fprintf(out, "One-step prefill (the problem: the whole prompt in one step, every stream waits;\n"
                 "newer vLLM chunks by default, a budget >= the prompt still prefills it in one "
                 "step):\n");
    experiment_print_server_flags(out, "  ", SCHED_MIXED, budget, wl);
    fprintf(out, "\nChunked prefill (the fix: decodes first, the prompt in slices of the budget "
                 "left):\n");
    experiment_print_server_flags(out, "  ", SCHED_CHUNKED, 512, wl);
    fprintf(out, "\nThen: stallscope run --target http://HOST:PORT [--model-name NAME]\n");
}

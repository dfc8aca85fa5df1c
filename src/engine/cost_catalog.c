/* cost_catalog — the GPUs and model architectures the cost model knows by name, and the
 * reader of a Hugging Face config.json for any other Llama-family model.
 *
 * Every figure carries its source in the entry's `source` string; docs/reference/model.md
 * repeats them with links. GPU FLOP/s are dense BF16 tensor-core peaks: NVIDIA's
 * datasheets print the 2:4-sparsity figure with an asterisk, and we halve it. */
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/err.h"
#include "common/fsio.h"
#include "engine/cost.h"
#include "engine/cpu/cpu_kv.h"
#include "engine/profile.h"

/* The cpu entry's figures: `stallscope calibrate` (Release, 1 thread, --model small) on the
 * 2-core AMD EPYC VM this project runs on (docs/results/bench-cpu-zen4.md: that VM's figures). */
#define CPU_NOMINAL_GEMM_FLOPS 90.7e9
#define CPU_NOMINAL_ATTENTION_FLOPS 87.0e9
#define CPU_NOMINAL_BANDWIDTH 19.8e9
#define CPU_NOMINAL_OVERHEAD_NS 3350000

static const cost_gpu gpu_catalog[] = {
    {"h100-sxm", 989e12, 3.35e12, 80e9,
     "NVIDIA H100 datasheet (SXM5): BF16 1,979 TFLOPS with sparsity -> 989 dense (the lesson's "
     "figure), 3.35 TB/s HBM3, 80 GB", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    {"h100-pcie", 756e12, 2.0e12, 80e9,
     "NVIDIA H100 datasheet (PCIe): BF16 1,513 TFLOPS with sparsity -> 756 dense, 2.0 TB/s "
     "HBM2e, 80 GB", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    {"h200", 989e12, 4.8e12, 141e9,
     "NVIDIA H200 datasheet (SXM): same GH100 compute as H100 SXM (989 TFLOPS dense BF16), "
     "4.8 TB/s HBM3e, 141 GB", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    {"a100-80g", 312e12, 2.039e12, 80e9,
     "NVIDIA A100 datasheet (80GB SXM): BF16 312 TFLOPS dense, 2,039 GB/s HBM2e, 80 GB", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    {"a100-40g", 312e12, 1.555e12, 40e9,
     "NVIDIA A100 datasheet (40GB SXM): BF16 312 TFLOPS dense, 1,555 GB/s HBM2, 40 GB", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    {"l40s", 362.05e12, 864e9, 48e9,
     "NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 with sparsity), 864 GB/s GDDR6, "
     "48 GB", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    {"b200", 2.25e15, 8e12, 180e9,
     "NVIDIA HGX B200 spec (per GPU, 1,000 W): BF16 4.5 PFLOPS with sparsity -> 2.25 dense, "
     "8 TB/s HBM3e, 180 GB (1.44 TB per 8-GPU board)", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    {"mi300x", 1307.4e12, 5.3e12, 192e9,
     "AMD Instinct MI300X datasheet: BF16 1,307.4 TFLOPS dense (2,614.9 with sparsity), "
     "5.3 TB/s HBM3, 192 GB", 0, 0, 0, 0, 0, {"", 0, 0, 0, 0, 0, false}},
    /* The cpu engine's default device: this project's 2-core machine kind, one thread (the
     * engine's default), F32 weights and an F16 KV cache (engine/cpu/cpu_kv.h). Figures
     * printed by `stallscope calibrate` on it (docs/results/bench-cpu-zen4.md); calibrate
     * your own machine and pass --hardware FILE. */
    {"cpu", CPU_NOMINAL_GEMM_FLOPS, CPU_NOMINAL_BANDWIDTH, 4e9,
     "stallscope calibrate on a 2-core AMD EPYC (Zen 4) VM, 1 thread: sustained GEMM, "
     "attention kernel and streaming-read bandwidth, decode overhead fitted on model small; "
     "4 GB for weights (F32) + KV (F16)",
     CPU_NOMINAL_ATTENTION_FLOPS, 4, CPU_KV_ELEM_BYTES, CPU_NOMINAL_OVERHEAD_NS, 1,
     {"", 0, 0, 0, 0, 0, false}},
};

/* name, layers, hidden, heads, kv heads, head dim, ffn, vocab, max position, tied, source */
static const cost_arch arch_catalog[] = {
    {"llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, false,
     "huggingface.co/meta-llama/Llama-3.1-8B config.json"},
    {"llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072, false,
     "huggingface.co/meta-llama/Llama-3.1-70B config.json"},
    {"llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, 131072, true,
     "huggingface.co/meta-llama/Llama-3.2-1B config.json (head_dim 64, tied embeddings)"},
    {"llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, 131072, true,
     "huggingface.co/meta-llama/Llama-3.2-3B config.json (tied embeddings)"},
    {"mistral-7b", 32, 4096, 32, 8, 128, 14336, 32768, 32768, false,
     "huggingface.co/mistralai/Mistral-7B-v0.3 config.json (v0.3: vocab 32768, no sliding "
     "window)"},
    {"qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 131072, false,
     "huggingface.co/Qwen/Qwen2.5-7B config.json (base model; the Instruct config says 32768 "
     "positions without YaRN); q/k/v biases ignored"},
    /* The cpu engine's synthetic models (docs/explanation/cpu-engine.md): shapes sized for a 2-core
     * machine; timing depends on the shape, not on what the weights learned. */
    {"tiny", 2, 128, 4, 2, 32, 512, 32000, 32768, false,
     "stallscope cpu preset: on 1 core of the 2-core reference VM a decode step of 32 users "
     "takes ~5 ms and an 8,000-token prefill ~0.5 s"},
    {"small", 3, 384, 6, 2, 64, 1024, 32000, 32768, false,
     "stallscope cpu preset (the cpu engine's default): on 1 core of the 2-core reference VM a "
     "decode step of 32 users takes ~15 ms and an 8,000-token prefill ~2.7 s"},
    {"ref-256", 4, 256, 8, 2, 32, 768, 32000, 32768, false,
     "stallscope cpu reference shape (hidden 256, 4 layers, 8 heads, 2 KV heads, FFN 768, "
     "vocab 32,000): llama.cpp F32 prefills 8,192 tokens in ~9.4 s on 2 threads here"},
};

#define N_GPUS (int)(sizeof gpu_catalog / sizeof gpu_catalog[0])
#define N_ARCHS (int)(sizeof arch_catalog / sizeof arch_catalog[0])

/* Names are matched case-insensitively: "H100-SXM" is what people type from a datasheet. */
static bool name_equal(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

static const char *gpu_name_at(int i)
{
    return gpu_catalog[i].name;
}

static const char *arch_name_at(int i)
{
    return arch_catalog[i].name;
}

/* "h100-sxm, h100-pcie, ...": the n names of a catalog, for the error that lists them. */
static void known_names(char *buf, size_t size, const char *(*name_at)(int), int n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", name_at(i));
}

int cost_gpu_find(const char *name, cost_gpu *out, char *err)
{
    for (int i = 0; i < N_GPUS; i++)
        if (name && name_equal(name, gpu_catalog[i].name)) {
            *out = gpu_catalog[i];
            return 0;
        }
    char known[ERR_LEN];
    known_names(known, sizeof known, gpu_name_at, N_GPUS);
    return err_set(err, "unknown GPU '%s' (known: %s)", name ? name : "", known);
}

int cost_arch_find(const char *name, cost_arch *out, char *err)
{
    for (int i = 0; i < N_ARCHS; i++)
        if (name && name_equal(name, arch_catalog[i].name)) {
            *out = arch_catalog[i];
            return 0;
        }
    char known[ERR_LEN];
    known_names(known, sizeof known, arch_name_at, N_ARCHS);
    return err_set(err, "unknown model '%s' (known: %s; or --model-config FILE)",
                   name ? name : "", known);
}

void cost_catalog_print(FILE *out)
{
    fprintf(out, "GPUs (dense BF16 peak, memory bandwidth, memory):\n");
    for (int i = 0; i < N_GPUS; i++) {
        const cost_gpu *g = &gpu_catalog[i];
        fprintf(out, "  %-10s %7.1f TFLOP/s  %5.0f GB/s  %4.0f GB   %s\n", g->name,
                g->peak_flops / 1e12, g->mem_bandwidth / 1e9, g->mem_bytes / 1e9, g->source);
    }
    fprintf(out, "\nmodels (layers, hidden, heads/KV heads x head dim, FFN, vocab, context):\n");
    for (int i = 0; i < N_ARCHS; i++) {
        const cost_arch *a = &arch_catalog[i];
        char heads[32];
        snprintf(heads, sizeof heads, "%d/%d x %d", a->n_heads, a->n_kv_heads, a->head_dim);
        fprintf(out, "  %-14s L%-3d  h%-5d  %-11s  ffn %-5d  vocab %-6d  ctx %-6d%s   %s\n",
                a->name, a->n_layers, a->hidden, heads, a->ffn, a->vocab, a->max_position,
                a->tied_embeddings ? "  tied" : "      ", a->source);
    }
}

/* ---- Hugging Face config.json --------------------------------------------------- */

/* Upper bound for any dimension: keeps products like hidden x ffn far from overflow in
 * the int64/double arithmetic of the cost model, and rejects nonsense early. */
#define HF_DIM_MAX (1 << 24)

/* A required positive integer field. */
static int hf_int(json_t *root, const char *key, int *out, const char *path, char *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return err_set(err, "%s: missing field \"%s\"", path, key);
    if (!json_is_integer(v))
        return err_set(err, "%s: field \"%s\" must be an integer", path, key);
    json_int_t n = json_integer_value(v);
    if (n < 1 || n > HF_DIM_MAX)
        return err_set(err, "%s: field \"%s\" = %lld is out of range [1, %d]", path, key,
                       (long long)n, HF_DIM_MAX);
    *out = (int)n;
    return 0;
}

/* An optional positive integer field: absent or null leaves *out at its default. */
static int hf_int_opt(json_t *root, const char *key, int *out, const char *path, char *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    return hf_int(root, key, out, path, err);
}

/* The model's display name: the last component of "_name_or_path" when present
 * ("meta-llama/Llama-3.1-8B" -> "Llama-3.1-8B"), else the directory holding the file,
 * else "hf-config". */
static void hf_name(json_t *root, const char *path, char *name, size_t size)
{
    const char *src = NULL;
    size_t len = 0;
    json_t *v = json_object_get(root, "_name_or_path");
    if (json_is_string(v) && json_string_length(v) > 0) {
        const char *s = json_string_value(v);
        const char *slash = strrchr(s, '/');
        src = slash && slash[1] ? slash + 1 : s;
        len = strlen(src);
    } else {
        const char *slash = strrchr(path, '/');
        if (slash && slash != path) {
            const char *start = slash;
            while (start > path && start[-1] != '/')
                start--;
            src = start;
            len = (size_t)(slash - start);
        }
    }
    if (!src || len == 0 || (len == 1 && src[0] == '.')) {
        src = "hf-config";
        len = strlen(src);
    }
    if (len >= size)
        len = size - 1;
    memcpy(name, src, len);
    name[len] = '\0';
}

int cost_arch_from_hf_config(const char *path, cost_arch *out, char *err)
{
    json_t *doc = fsio_read_json(path, 0, err);
    if (!doc)
        return -1;
    int rc = -1;
    cost_arch a;
    memset(&a, 0, sizeof a);
    if (!json_is_object(doc)) {
        err_set(err, "%s: not a JSON object", path);
        goto done;
    }
    /* Multimodal wrappers (Llava, Mllama ...) keep the language model under
     * "text_config"; a plain causal LM has its fields at the top level. */
    json_t *root = doc;
    json_t *text = json_object_get(doc, "text_config");
    if (!json_object_get(doc, "hidden_size") && json_is_object(text))
        root = text;

    /* Mixture-of-experts layers make per-token FLOPs a fraction of the weights read, which
     * this dense model cannot express: refuse rather than mislead. */
    static const char *const moe_keys[] = {"num_local_experts", "num_experts", "n_routed_experts"};
    for (size_t i = 0; i < sizeof moe_keys / sizeof moe_keys[0]; i++) {
        json_t *v = json_object_get(root, moe_keys[i]);
        if (json_is_integer(v) && json_integer_value(v) > 1) {
            err_set(err, "%s: mixture-of-experts models (\"%s\") are not supported", path,
                    moe_keys[i]);
            goto done;
        }
    }

    if (hf_int(root, "num_hidden_layers", &a.n_layers, path, err) != 0 ||
        hf_int(root, "hidden_size", &a.hidden, path, err) != 0 ||
        hf_int(root, "num_attention_heads", &a.n_heads, path, err) != 0 ||
        hf_int(root, "intermediate_size", &a.ffn, path, err) != 0 ||
        hf_int(root, "vocab_size", &a.vocab, path, err) != 0 ||
        hf_int(root, "max_position_embeddings", &a.max_position, path, err) != 0)
        goto done;

    /* Transformers' LlamaConfig defaults: KV heads = attention heads (no GQA),
     * head_dim = hidden / heads. */
    a.n_kv_heads = a.n_heads;
    if (hf_int_opt(root, "num_key_value_heads", &a.n_kv_heads, path, err) != 0)
        goto done;
    json_t *head_dim = json_object_get(root, "head_dim");
    if (!head_dim || json_is_null(head_dim)) {
        if (a.hidden % a.n_heads != 0) {
            err_set(err, "%s: hidden_size %d is not a multiple of num_attention_heads %d and "
                         "head_dim is not given", path, a.hidden, a.n_heads);
            goto done;
        }
        a.head_dim = a.hidden / a.n_heads;
    } else if (hf_int(root, "head_dim", &a.head_dim, path, err) != 0) {
        goto done;
    }
    if (a.n_kv_heads > a.n_heads || a.n_heads % a.n_kv_heads != 0) {
        err_set(err, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                path, a.n_heads, a.n_kv_heads);
        goto done;
    }

    /* LlamaConfig, MistralConfig and Qwen2Config all default to untied embeddings. */
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_null(tie)) {
        if (!json_is_boolean(tie)) {
            err_set(err, "%s: field \"tie_word_embeddings\" must be true or false", path);
            goto done;
        }
        a.tied_embeddings = json_is_true(tie);
    }

    hf_name(doc, path, a.name, sizeof a.name);
    a.source = "Hugging Face config.json (--model-config)";
    *out = a;
    rc = 0;
done:
    json_decref(doc);
    return rc;
}

/* ---- hardware profile: the format is profile.h's ------------------------------------ */

int cost_gpu_from_profile(const char *path, cost_gpu *out, char *err)
{
    return profile_read(path, out, NULL, err);
}

/* tokenizer — byte-level BPE counts from a tokenizer.json or a GGUF file (tokenizer.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "common/err.h"
#include "workload/gguf.h"
#include "workload/tokenizer.h"

/* The split rules the pre-tokenizer names. */
typedef enum { SPLIT_GPT2, SPLIT_LLAMA3 } split_rule;

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* A string -> int table (open addressing, FNV-1a), for the vocabulary and the merges. */
typedef struct str_table {
    char **keys;
    int32_t *values;
    size_t cap; /* a power of two, at least twice the entries */
} str_table;

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static int table_init(str_table *t, size_t entries)
{
    t->cap = 16;
    while (t->cap < 2 * entries + 16)
        t->cap *= 2;
    t->keys = calloc(t->cap, sizeof *t->keys);
    t->values = calloc(t->cap, sizeof *t->values);
    return t->keys && t->values ? 0 : -1;
}

static void table_free(str_table *t)
{
    for (size_t i = 0; t->keys && i < t->cap; i++)
        free(t->keys[i]);
    free(t->keys);
    free(t->values);
    memset(t, 0, sizeof *t);
}

/* The slot of key s[0..n): its own, or the empty one it would take. */
static size_t table_slot(const str_table *t, const char *s, size_t n)
{
    size_t i = (size_t)hash_bytes(s, n) & (t->cap - 1);
    while (t->keys[i] && !(strlen(t->keys[i]) == n && memcmp(t->keys[i], s, n) == 0))
        i = (i + 1) & (t->cap - 1);
    return i;
}

/* Add s with v unless present (the first wins, as the merges' rank). 0, or -1 (memory). */
static int table_put(str_table *t, const char *s, int32_t v)
{
    size_t i = table_slot(t, s, strlen(s));
    if (t->keys[i])
        return 0;
    if (!(t->keys[i] = strdup(s)))
        return -1;
    t->values[i] = v;
    return 0;
}

static bool table_get(const str_table *t, const char *s, size_t n, int32_t *v)
{
    size_t i = table_slot(t, s, n);
    if (!t->keys[i])
        return false;
    if (v)
        *v = t->values[i];
    return true;
}

struct workload_tokenizer {
    str_table vocab, merges; /* symbol -> id; "left right" -> rank */
    split_rule split;
    bool add_prefix_space; /* ByteLevel: a space before the text */
    bool ignore_merges;    /* a piece in the vocabulary is one token */
    int specials;          /* tokens the post-processor adds to one sequence */
    char byte_symbol[256][3]; /* GPT-2's byte -> printable character, UTF-8 (1 or 2 bytes) */
};

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 onwards in byte order. */
static void byte_symbols(workload_tokenizer *t)
{
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = printable ? b : next++;
        char *s = t->byte_symbol[b];
        if (cp < 0x80) {
            s[0] = (char)cp, s[1] = '\0';
        } else {
            s[0] = (char)(0xC0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3F)), s[2] = '\0';
        }
    }
}

/* ---- the split rules ------------------------------------------------------------------------ */

static bool is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_letter(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
static bool is_other(unsigned char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }
static bool is_newline(unsigned char c) { return c == '\r' || c == '\n'; }

/* 's 't 're 've 'm 'll 'd at s[0..n): its length, 0 when none. */
static size_t contraction(const unsigned char *s, size_t n, bool any_case)
{
    static const char *const ends[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    if (n < 2 || s[0] != '\'')
        return 0;
    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        size_t m = strlen(ends[k]);
        if (m + 1 > n)
            continue;
        bool same = true;
        for (size_t j = 0; j < m && same; j++) {
            unsigned char c = s[1 + j];
            if (any_case && c >= 'A' && c <= 'Z')
                c = (unsigned char)(c - 'A' + 'a');
            same = c == (unsigned char)ends[k][j];
        }
        if (same)
            return m + 1;
    }
    return 0;
}

static size_t run(const unsigned char *s, size_t n, size_t i, bool (*cls)(unsigned char))
{
    while (i < n && cls(s[i]))
        i++;
    return i;
}

/* Whitespace at s[0]: \s+(?!\S), else \s+ (the run less its last character when more text
 * follows it, so that character goes with the next piece). */
static size_t space_piece(const unsigned char *s, size_t n)
{
    size_t k = run(s, n, 0, is_space);
    return k == n || k == 1 ? k : k - 1;
}

/* The length of the piece at s[0..n) (n >= 1), by GPT-2's regex. */
static size_t piece_gpt2(const unsigned char *s, size_t n)
{
    size_t c = contraction(s, n, false);
    if (c)
        return c;
    size_t j = s[0] == ' ' && n > 1 ? 1 : 0;
    if (is_letter(s[j]))
        return run(s, n, j, is_letter);
    if (is_digit(s[j]))
        return run(s, n, j, is_digit);
    if (is_other(s[j]))
        return run(s, n, j, is_other);
    return space_piece(s, n);
}

/* The same by Llama 3's pattern. */
static size_t piece_llama3(const unsigned char *s, size_t n)
{
    size_t c = contraction(s, n, true);
    if (c)
        return c;
    if (!is_newline(s[0]) && !is_letter(s[0]) && !is_digit(s[0]) && n > 1 && is_letter(s[1]))
        return run(s, n, 1, is_letter);
    if (is_letter(s[0]))
        return run(s, n, 0, is_letter);
    if (is_digit(s[0])) {
        size_t k = run(s, n, 0, is_digit);
        return k > 3 ? 3 : k;
    }
    size_t j = s[0] == ' ' && n > 1 ? 1 : 0;
    if (is_other(s[j]))
        return run(s, n, run(s, n, j, is_other), is_newline);
    /* \s*[\r\n]+: the whitespace up to its last newline */
    size_t k = run(s, n, 0, is_space), last_nl = 0;
    for (size_t m = 0; m < k; m++)
        if (is_newline(s[m]))
            last_nl = m + 1;
    if (last_nl)
        return last_nl;
    return space_piece(s, n);
}

/* ---- BPE on one piece ------------------------------------------------------------------------ */

/* The tokens one piece makes: its bytes as symbols, the best-ranked adjacent pair merged
 * until none is in the merges. sym[] holds each symbol's start in buf (its end: the next's). */
static int64_t bpe_piece(const workload_tokenizer *t, const unsigned char *s, size_t n)
{
    size_t cap = 2 * n + 1;
    char *buf = malloc(cap + 1), *pair = malloc(2 * cap + 2);
    size_t *start = malloc((n + 1) * sizeof *start);
    if (!buf || !pair || !start) {
        free(buf), free(pair), free(start);
        return (int64_t)n; /* out of memory: a token per byte, the upper bound */
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        start[i] = len;
        size_t m = strlen(t->byte_symbol[s[i]]);
        memcpy(buf + len, t->byte_symbol[s[i]], m);
        len += m;
    }
    buf[len] = '\0';
    size_t count = n;
    start[count] = len;
    if (t->ignore_merges && table_get(&t->vocab, buf, len, NULL))
        count = 1;
    while (count > 1) {
        int32_t best = INT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < count; i++) {
            size_t la = start[i + 1] - start[i], lb = start[i + 2] - start[i + 1];
            memcpy(pair, buf + start[i], la);
            pair[la] = ' ';
            memcpy(pair + la + 1, buf + start[i + 1], lb);
            int32_t rank;
            if (table_get(&t->merges, pair, la + 1 + lb, &rank) && rank < best)
                best = rank, at = i;
        }
        if (best == INT32_MAX)
            break;
        /* merging drops the boundary between symbols at and at + 1 */
        memmove(start + at + 1, start + at + 2, (count - at - 1) * sizeof *start);
        count--;
    }
    free(buf), free(pair), free(start);
    return (int64_t)count;
}

int64_t workload_tokenizer_count(const workload_tokenizer *t, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    int64_t ids = t->specials;
    unsigned char *spaced = NULL;
    if (t->add_prefix_space && len > 0 && s[0] != ' ') {
        if ((spaced = malloc(len + 1))) {
            spaced[0] = ' ';
            memcpy(spaced + 1, s, len);
            s = spaced, len++;
        }
    }
    for (size_t i = 0; i < len;) {
        size_t k = t->split == SPLIT_LLAMA3 ? piece_llama3(s + i, len - i) : piece_gpt2(s + i, len - i);
        ids += bpe_piece(t, s + i, k);
        i += k;
    }
    free(spaced);
    return ids;
}

/* ---- the file ---------------------------------------------------------------------------------- */

static const char *type_of(const json_t *obj)
{
    const char *type = json_string_value(json_object_get(obj, "type"));
    return type ? type : "(no type)";
}

/* The pre-tokenizer: ByteLevel with its own split (GPT-2's), or a Sequence of a Split by
 * GPT-2's or Llama 3's pattern and a ByteLevel that does not split again. */
static int read_pre_tokenizer(workload_tokenizer *t, const json_t *pre, char *err)
{
    if (!json_is_object(pre))
        return err_set(err, "no pre_tokenizer: not byte-level BPE");
    if (strcmp(type_of(pre), "ByteLevel") == 0) {
        t->split = SPLIT_GPT2;
        t->add_prefix_space = json_is_true(json_object_get(pre, "add_prefix_space"));
        if (json_is_false(json_object_get(pre, "use_regex")))
            return err_set(err, "a ByteLevel pre-tokenizer that does not split is not supported");
        return 0;
    }
    if (strcmp(type_of(pre), "Sequence") != 0)
        return err_set(err, "pre-tokenizer %s is not supported (byte-level BPE only: ByteLevel, "
                            "or a Split and ByteLevel)",
                       type_of(pre));
    const json_t *list = json_object_get(pre, "pretokenizers");
    bool split = false, byte_level = false;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *p = json_array_get(list, i);
        if (strcmp(type_of(p), "ByteLevel") == 0) {
            byte_level = true;
            t->add_prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
            continue;
        }
        const char *regex =
            json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        if (strcmp(type_of(p), "Split") != 0 || !regex || split)
            return err_set(err, "pre-tokenizer %s in the sequence is not supported", type_of(p));
        if (strcmp(regex, LLAMA3_PATTERN) == 0)
            t->split = SPLIT_LLAMA3;
        else if (strcmp(regex, GPT2_PATTERN) == 0)
            t->split = SPLIT_GPT2;
        else
            return err_set(err, "a Split pattern other than GPT-2's or Llama 3's is not supported");
        split = true;
    }
    if (!split || !byte_level)
        return err_set(err, "a pre-tokenizer sequence without a Split and a ByteLevel is not "
                            "supported");
    return 0;
}

/* The special tokens a single sequence gets: TemplateProcessing's SpecialToken entries. */
static int specials_of(const json_t *post)
{
    if (!json_is_object(post))
        return 0;
    if (strcmp(type_of(post), "Sequence") == 0) {
        int n = 0;
        const json_t *list = json_object_get(post, "processors");
        for (size_t i = 0; i < json_array_size(list); i++)
            n += specials_of(json_array_get(list, i));
        return n;
    }
    if (strcmp(type_of(post), "TemplateProcessing") != 0)
        return 0; /* ByteLevel: offsets only */
    int n = 0;
    const json_t *single = json_object_get(post, "single");
    for (size_t i = 0; i < json_array_size(single); i++)
        n += json_object_get(json_array_get(single, i), "SpecialToken") != NULL;
    return n;
}

static int read_model(workload_tokenizer *t, const json_t *model, char *err)
{
    if (!json_is_object(model))
        return err_set(err, "no \"model\" object");
    if (strcmp(type_of(model), "BPE") != 0)
        return err_set(err, "model type %s is not supported (byte-level BPE only)", type_of(model));
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return err_set(err, "a BPE model needs \"vocab\" (an object) and \"merges\" (an array)");
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    if (table_init(&t->vocab, json_object_size(vocab)) != 0 ||
        table_init(&t->merges, json_array_size(merges)) != 0)
        return err_set(err, "out of memory");
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)vocab, key, value)
        if (table_put(&t->vocab, key, (int32_t)json_integer_value(value)) != 0)
            return err_set(err, "out of memory");
    char pair[1024];
    for (size_t i = 0; i < json_array_size(merges); i++) {
        const json_t *m = json_array_get(merges, i);
        int n = -1;
        if (json_is_string(m)) /* "left right" */
            n = snprintf(pair, sizeof pair, "%s", json_string_value(m));
        else if (json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                 json_is_string(json_array_get(m, 1))) /* ["left", "right"] */
            n = snprintf(pair, sizeof pair, "%s %s", json_string_value(json_array_get(m, 0)),
                         json_string_value(json_array_get(m, 1)));
        if (n < 0 || (size_t)n >= sizeof pair || !strchr(pair, ' '))
            return err_set(err, "merges[%zu] is not \"LEFT RIGHT\" nor [LEFT, RIGHT]", i);
        if (table_put(&t->merges, pair, (int32_t)i) != 0)
            return err_set(err, "out of memory");
    }
    return 0;
}

/* A GGUF file's vocabulary (llama.cpp's keys): a "gpt2" (byte-level BPE) model, its tokens
 * and merges, the pre-tokenizer by name, and the BOS/EOS it adds (add_bos_token, when the
 * file says; else llama.cpp's default: a BOS for Llama 3's pre-tokenizer only). */
static int read_gguf(workload_tokenizer *t, const json_t *meta, char *why)
{
    const char *model = json_string_value(json_object_get(meta, "tokenizer.ggml.model"));
    if (!model)
        return err_set(why, "no tokenizer.ggml.model: a GGUF without a vocabulary");
    if (strcmp(model, "gpt2") != 0)
        return err_set(why, "GGUF tokenizer model %s is not supported (byte-level BPE, \"gpt2\", "
                            "only; \"llama\" is SentencePiece)",
                       model);
    const char *pre = json_string_value(json_object_get(meta, "tokenizer.ggml.pre"));
    if (!pre)
        pre = "(none)";
    const bool llama3 = strcmp(pre, "llama3") == 0 || strcmp(pre, "llama-v3") == 0 ||
                        strcmp(pre, "llama-bpe") == 0;
    if (!llama3 && strcmp(pre, "gpt-2") != 0)
        return err_set(why, "GGUF pre-tokenizer %s is not supported (gpt-2, llama3, llama-bpe)",
                       pre);
    json_t *tokens = json_object_get(meta, "tokenizer.ggml.tokens");
    json_t *merges = json_object_get(meta, "tokenizer.ggml.merges");
    if (!json_is_array(tokens) || !json_is_array(merges))
        return err_set(why, "a BPE vocabulary needs tokenizer.ggml.tokens and "
                            "tokenizer.ggml.merges");
    json_t *vocab = json_object();
    for (size_t i = 0; vocab && i < json_array_size(tokens); i++)
        if (json_object_set_new(vocab, json_string_value(json_array_get(tokens, i)),
                                json_integer((json_int_t)i)) != 0) {
            json_decref(vocab);
            vocab = NULL;
        }
    json_t *bpe = vocab ? json_pack("{s:s, s:o, s:O, s:b}", "type", "BPE", "vocab", vocab,
                                    "merges", merges, "ignore_merges", llama3)
                        : NULL;
    if (!bpe)
        return err_set(why, "out of memory");
    int rc = read_model(t, bpe, why);
    json_decref(bpe);
    t->split = llama3 ? SPLIT_LLAMA3 : SPLIT_GPT2;
    const json_t *bos = json_object_get(meta, "tokenizer.ggml.add_bos_token");
    t->specials = (bos ? json_is_true(bos) : llama3) +
                  json_is_true(json_object_get(meta, "tokenizer.ggml.add_eos_token"));
    return rc;
}

/* A tokenizer.json: a model, no normalizer, a pre-tokenizer, a post-processor's specials. */
static int read_json(workload_tokenizer *t, const json_t *root, char *why)
{
    if (!json_is_object(root))
        return err_set(why, "not a tokenizer.json (not an object)");
    if (json_is_object(json_object_get(root, "normalizer")))
        return err_set(why, "normalizer %s is not supported (byte-level BPE has none)",
                       type_of(json_object_get(root, "normalizer")));
    if (read_model(t, json_object_get(root, "model"), why) != 0 ||
        read_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), why) != 0)
        return -1;
    t->specials = specials_of(json_object_get(root, "post_processor"));
    return 0;
}

int workload_tokenizer_load(const char *path, workload_tokenizer **out, char *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    json_t *root = NULL;
    struct stat st;
    const bool gguf = workload_gguf_is(f);
    if (gguf) {
        if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
            err_set(err, "%s: not a regular file", path);
        else
            root = workload_gguf_metadata(f, (int64_t)st.st_size, path, "tokenizer.", err);
    } else {
        json_error_t je;
        if (!(root = json_loadf(f, 0, &je)))
            err_set(err, "%s: %s (line %d)", path, je.text, je.line);
    }
    fclose(f);
    if (!root)
        return -1;
    workload_tokenizer *t = calloc(1, sizeof *t);
    char why[ERR_LEN] = "";
    int rc = !t ? err_set(why, "out of memory")
             : gguf ? read_gguf(t, root, why)
                    : read_json(t, root, why);
    json_decref(root);
    if (rc != 0) {
        workload_tokenizer_free(t);
        return err_set(err, "%s: %s", path, why);
    }
    byte_symbols(t);
    *out = t;
    return 0;
}

void workload_tokenizer_free(workload_tokenizer *t)
{
    if (!t)
        return;
    table_free(&t->vocab);
    table_free(&t->merges);
    free(t);
}

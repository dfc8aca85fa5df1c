/* workload/tokenizer: byte-level BPE counts from a hand-made tokenizer.json, worked out by
 * hand below, under GPT-2's split and Llama 3's, and from the same vocabulary written as a
 * GGUF file; what is not byte-level BPE, and a broken GGUF, is refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/clock.h"
#include "workload/tokenizer.h"
#include "workload/workload.h"

#include "scratch_file.h"

/* "Ġ" is the space's byte-level symbol (U+0120), "Ċ" the newline's. */
#define MODEL                                                                                    \
    "\"model\": {\"type\": \"BPE\", %s \"vocab\": {\"h\": 0, \"e\": 1, \"l\": 2, \"o\": 3, "    \
    "\"\\u0120\": 4, \"he\": 5, \"ll\": 6, \"hell\": 7, \"hello\": 8, \"2\": 10, \"0\": 11, "    \
    "\"4\": 12, \"20\": 13, \"202\": 14, \"2024\": 15, \"!\": 16, \"\\u0120hello\": 17}, "      \
    "\"merges\": [\"h e\", \"l l\", \"he ll\", [\"hell\", \"o\"], \"\\u0120 h\", \"2 0\", "     \
    "\"20 2\", \"202 4\"]}"

static workload_tokenizer *load(const char *name, const char *text, char *err)
{
    char path[256];
    scratch_file(path, sizeof path, "test_tokenizer", name, text);
    workload_tokenizer *t = NULL;
    int rc = workload_tokenizer_load(path, &t, err);
    unlink(path);
    return rc == 0 ? t : NULL;
}

static int64_t count(const workload_tokenizer *t, const char *s)
{
    return workload_tokenizer_count(t, s, strlen(s));
}

/* GPT-2's split: "hello" merges whole (h e -> he, l l -> ll, he ll -> hell, hell o);
 * " hello" is Ġ + hello (Ġ h never wins against h e, rank 0); digits stay one piece. */
static void test_gpt2(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", text[2048];
    snprintf(text, sizeof text,
             "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
             "\"add_prefix_space\": false, \"use_regex\": true}, \"post_processor\": "
             "{\"type\": \"ByteLevel\"}, " MODEL "}",
             "");
    workload_tokenizer *t = load("gpt2.json", text, err);
    if (!t)
        fail_msg("%s", err);
    assert_int_equal(count(t, ""), 0);
    assert_int_equal(count(t, "hello"), 1);
    assert_int_equal(count(t, "hello hello"), 3);  /* hello | Ġ hello */
    assert_int_equal(count(t, "2024"), 1);         /* 2 0 -> 20, 20 2 -> 202, 202 4 */
    assert_int_equal(count(t, "hello!!"), 3);      /* hello | ! ! */
    assert_int_equal(count(t, "a  b"), 4);         /* a | Ġ | Ġ b */
    assert_int_equal(count(t, "it's"), 4);         /* i t | ' s */
    assert_int_equal(count(t, "a\n\nb"), 4);       /* a | Ċ | Ċ | b */
    workload_tokenizer_free(t);
}

/* Llama 3's split: numbers in threes, a newline run kept whole, a piece in the vocabulary
 * one token (ignore_merges), and the BOS its template adds. */
static void test_llama3(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", text[4096];
    snprintf(text, sizeof text,
             "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", "
             "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
             "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
             "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, "
             "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
             "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]}, "
             "\"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": "
             "\"ByteLevel\"}, {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
             "{\"id\": \"<|begin_of_text|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
             "\"type_id\": 0}}]}]}, " MODEL "}",
             "\"ignore_merges\": true,");
    workload_tokenizer *t = load("llama3.json", text, err);
    if (!t)
        fail_msg("%s", err);
    assert_int_equal(count(t, ""), 1);             /* the BOS alone */
    assert_int_equal(count(t, "2024"), 3);         /* BOS | 202 | 4 */
    assert_int_equal(count(t, "hello hello"), 3);  /* BOS | hello | Ġhello (in the vocabulary) */
    assert_int_equal(count(t, "a\n\nb"), 5);       /* BOS | a | Ċ Ċ | b */
    workload_tokenizer_free(t);
}

/* --tokenizer with a JSONL trace (issue 28, point 17): a row's "prompt" text is counted in
 * the tokenizer's tokens (hello: 1), not one per 4 bytes (2); a bad tokenizer file fails the
 * plan with its reason. */
static void test_trace_prompt_counted(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", text[2048], tok_path[256], trace_path[256];
    snprintf(text, sizeof text,
             "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, " MODEL "}", "");
    scratch_file(tok_path, sizeof tok_path, "test_tokenizer", "tok.json", text);
    scratch_file(trace_path, sizeof trace_path, "test_tokenizer", "t.jsonl",
                 "{\"t\": 0, \"prompt\": \"hello\", \"max_tokens\": 4}\n"
                 "{\"t\": 1, \"prompt\": \"hello hello\", \"max_tokens\": 4}\n");
    workload_config cfg;
    workload_default(&cfg);
    cfg.users = 0;
    snprintf(cfg.trace, sizeof cfg.trace, "%s", trace_path);
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.arrivals[0].prompt_tokens, 2); /* (5 + 3) / 4 */
    workload_plan_free(&p);
    snprintf(cfg.tokenizer, sizeof cfg.tokenizer, "%s", tok_path);
    assert_int_equal(workload_check(&cfg, err), 0);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 2);
    assert_int_equal(p.arrivals[0].prompt_tokens, 1);
    assert_int_equal(p.arrivals[1].prompt_tokens, 3);
    /* the texts are kept for sending, each at its arrival's place */
    assert_int_equal(p.arrivals[1].text_len, 11);
    assert_memory_equal(p.texts.data + p.arrivals[1].text_off, "hello hello", 11);
    assert_int_equal(p.arrivals[0].text_len, 5);
    assert_memory_equal(p.texts.data + p.arrivals[0].text_off, "hello", 5);
    workload_plan_free(&p);
    /* --synthetic-prompts: counted the same, not kept (a made-up prompt goes instead) */
    cfg.synthetic_prompts = true;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.arrivals[1].prompt_tokens, 3);
    assert_int_equal(p.arrivals[0].text_len, 0);
    assert_int_equal(p.arrivals[1].text_len, 0);
    assert_int_equal(p.texts.len, 0);
    workload_plan_free(&p);
    cfg.synthetic_prompts = false;
    unlink(tok_path);
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, tok_path));
    /* without a trace, --tokenizer would count nothing: refused */
    cfg.trace[0] = '\0';
    cfg.request_rate = 1;
    assert_int_equal(workload_check(&cfg, err), -1);
    assert_non_null(strstr(err, "--tokenizer and --synthetic-prompts need --trace"));
    unlink(trace_path);
}

/* Not byte-level BPE: each refused with its name. */
static void test_refused(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    const char *cases[][2] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model type WordPiece"},
        {"{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", "
         "\"vocab\": {}, \"merges\": []}}",
         "pre-tokenizer Metaspace is not supported"},
        {"{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\"}}", "normalizer NFC"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
         "\"vocab\": {}, \"merges\": [3]}}",
         "merges[0] is not"},
        {"[1, 2", "test_tokenizer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_null(load("bad.json", cases[i][0], err));
        if (!strstr(err, cases[i][1]))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i][1]);
    }
}

/* ---- GGUF ---------------------------------------------------------------------------------- */

enum { G_U32 = 4, G_F32 = 6, G_BOOL = 7, G_STRING = 8, G_ARRAY = 9 };

static void put_le(buf *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        buf_append(b, &(char){(char)(v >> (8 * i))}, 1);
}

static void put_str(buf *b, const char *s)
{
    put_le(b, strlen(s), 8);
    buf_append_str(b, s);
}

static void put_key(buf *b, const char *key, uint32_t type)
{
    put_str(b, key);
    put_le(b, type, 4);
}

static void put_strings(buf *b, const char *key, const char *const *v, size_t n)
{
    put_key(b, key, G_ARRAY);
    put_le(b, G_STRING, 4);
    put_le(b, n, 8);
    for (size_t i = 0; i < n; i++)
        put_str(b, v[i]);
}

/* MODEL's vocabulary as a GGUF file's head: ids by position (9 is unused there), the merges
 * as "LEFT RIGHT", a pair of another prefix and a float array, which the reader passes over.
 * add_bos: -1 leaves the key out. */
static void gguf_file(buf *b, int version, const char *model, const char *pre, int add_bos)
{
    static const char *const tokens[] = {
        "h", "e", "l", "o", "\xc4\xa0", "he", "ll", "hell", "hello", "<unused>", "2", "0", "4",
        "20", "202", "2024", "!", "\xc4\xa0hello"};
    static const char *const merges[] = {"h e",  "l l",  "he ll",  "hell o",
                                         "\xc4\xa0 h", "2 0", "20 2", "202 4"};
    buf_reset(b);
    buf_append(b, "GGUF", 4);
    put_le(b, (uint64_t)version, 4);
    put_le(b, 0, 8);                     /* tensors */
    put_le(b, add_bos >= 0 ? 7 : 6, 8);  /* pairs */
    put_key(b, "general.alignment", G_U32);
    put_le(b, 32, 4);
    put_key(b, "tokenizer.ggml.model", G_STRING);
    put_str(b, model);
    put_key(b, "tokenizer.ggml.pre", G_STRING);
    put_str(b, pre);
    put_strings(b, "tokenizer.ggml.tokens", tokens, sizeof tokens / sizeof tokens[0]);
    put_key(b, "tokenizer.ggml.scores", G_ARRAY);
    put_le(b, G_F32, 4);
    put_le(b, 3, 8);
    put_le(b, 0, 8);
    put_le(b, 0, 4);                     /* three f32 zeros */
    put_strings(b, "tokenizer.ggml.merges", merges, sizeof merges / sizeof merges[0]);
    if (add_bos >= 0) {
        put_key(b, "tokenizer.ggml.add_bos_token", G_BOOL);
        put_le(b, (uint64_t)add_bos, 1);
    }
}

static workload_tokenizer *load_bytes(const char *name, const buf *b, char *err)
{
    char path[256];
    scratch_file(path, sizeof path, "test_tokenizer", name, "");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b->data, 1, b->len, f), b->len);
    fclose(f);
    workload_tokenizer *t = NULL;
    int rc = workload_tokenizer_load(path, &t, err);
    unlink(path);
    return rc == 0 ? t : NULL;
}

/* The same vocabulary in a GGUF file counts as the tokenizer.json does: llama-bpe with the
 * BOS the file asks for (test_llama3's counts), gpt-2 without one (test_gpt2's). */
static void test_gguf(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    buf b = {0};
    gguf_file(&b, 3, "gpt2", "llama-bpe", 1);
    workload_tokenizer *t = load_bytes("llama3.gguf", &b, err);
    if (!t)
        fail_msg("%s", err);
    assert_int_equal(count(t, ""), 1);
    assert_int_equal(count(t, "2024"), 3);
    assert_int_equal(count(t, "hello hello"), 3);
    assert_int_equal(count(t, "a\n\nb"), 5);
    workload_tokenizer_free(t);
    gguf_file(&b, 2, "gpt2", "gpt-2", -1);
    if (!(t = load_bytes("gpt2.gguf", &b, err)))
        fail_msg("%s", err);
    assert_int_equal(count(t, ""), 0);
    assert_int_equal(count(t, "hello hello"), 3);
    assert_int_equal(count(t, "2024"), 1);
    assert_int_equal(count(t, "a  b"), 4);
    assert_int_equal(count(t, "it's"), 4);
    workload_tokenizer_free(t);
    buf_free(&b);
}

/* A GGUF that is not byte-level BPE, or is broken, is refused by name: never a read past its
 * end or an allocation its counts ask for. */
static void test_gguf_refused(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    buf b = {0};
    gguf_file(&b, 3, "llama", "default", 1);
    assert_null(load_bytes("spm.gguf", &b, err));
    assert_non_null(strstr(err, "GGUF tokenizer model llama is not supported"));
    gguf_file(&b, 3, "gpt2", "qwen2", 1);
    assert_null(load_bytes("qwen.gguf", &b, err));
    assert_non_null(strstr(err, "GGUF pre-tokenizer qwen2 is not supported"));
    gguf_file(&b, 1, "gpt2", "gpt-2", 1);
    assert_null(load_bytes("v1.gguf", &b, err));
    assert_non_null(strstr(err, "GGUF version 1 is not read"));
    /* cut anywhere: an error naming where the file ends, never a crash (ASan) */
    gguf_file(&b, 3, "gpt2", "gpt-2", 1);
    const size_t whole = b.len;
    for (size_t cut = 4; cut < whole; cut += 7) {
        b.len = cut;
        assert_null(load_bytes("cut.gguf", &b, err));
        if (!strstr(err, "the file ends inside") && !strstr(err, "elements (the file is shorter"))
            fail_msg("cut at %zu of %zu: %s", cut, whole, err);
    }
    /* a count larger than the file: refused before any allocation */
    gguf_file(&b, 3, "gpt2", "gpt-2", 1);
    memset(b.data + 16, 0xff, 8); /* the pair count */
    assert_null(load_bytes("pairs.gguf", &b, err));
    assert_non_null(strstr(err, "metadata pairs (at most"));
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_trace_prompt_counted),
        cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_gguf_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

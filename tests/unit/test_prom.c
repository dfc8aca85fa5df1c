/* prom: the text exposition parser (0.0.4), and scrape: its names mapped to
 * server_metrics.csv's columns for vLLM, SGLang, llama.cpp and stallscope serve. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/prom.h"
#include "client/scrape.h"
#include "common/err.h"
#include "server/metrics.h"

#define MAX_SEEN 256

typedef struct seen {
    prom_sample s[MAX_SEEN];
    char names[MAX_SEEN][128];
    char families[MAX_SEEN][128];
    int n;
} seen;

static int collect(void *ctx, const prom_sample *s)
{
    seen *v = ctx;
    if (v->n == MAX_SEEN)
        return 7;
    v->s[v->n] = *s;
    snprintf(v->names[v->n], sizeof v->names[0], "%.*s", (int)s->name_len, s->name);
    snprintf(v->families[v->n], sizeof v->families[0], "%.*s", (int)s->family_len, s->family);
    v->n++;
    return 0;
}

static void parse_ok(const char *text, seen *v)
{
    char err[ERR_LEN] = "";
    memset(v, 0, sizeof *v);
    if (prom_parse(text, strlen(text), collect, v, err) != 0)
        fail_msg("refused: %s\n%s", err, text);
}

static void test_samples(void **state)
{
    (void)state;
    static seen v;
    parse_ok("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
             "# TYPE vllm:num_requests_running gauge\n"
             "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\n"
             "\n"
             "   # a plain comment with \"quotes\" and { braces\n"
             "#no space: a comment too\n"
             "plain 42 1700000000123\n"
             "  spaced\t{ a = \"x\" , b=\"y\", }\t-7.5e-1   -12  \r\n"
             "no_labels{} 1e3",
             &v);
    assert_int_equal(v.n, 4);
    assert_string_equal(v.names[0], "vllm:num_requests_running");
    assert_int_equal(v.s[0].type, PROM_GAUGE);
    assert_int_equal(v.s[0].n_labels, 2);
    assert_true(v.s[0].value == 3.0);
    assert_int_equal(v.s[0].line, 3);
    assert_false(v.s[0].has_timestamp);
    assert_string_equal(v.names[1], "plain");
    assert_int_equal(v.s[1].type, PROM_UNTYPED); /* not the gauge's family */
    assert_string_equal(v.families[1], "plain");
    assert_true(v.s[1].has_timestamp);
    assert_true(v.s[1].timestamp_ms == 1700000000123LL);
    assert_string_equal(v.names[2], "spaced");
    assert_int_equal(v.s[2].n_labels, 2);
    assert_true(v.s[2].value == -0.75);
    assert_true(v.s[2].timestamp_ms == -12);
    assert_int_equal(v.s[2].line, 8);
    assert_string_equal(v.names[3], "no_labels"); /* the last line has no LF */
    assert_true(v.s[3].value == 1000);
    assert_int_equal(v.s[3].n_labels, 0);
}

static void test_special_values(void **state)
{
    (void)state;
    static seen v;
    parse_ok("a NaN\nb +Inf\nc -Inf\nd Inf\ne -0\nf 1e400\ng infinity\n", &v);
    assert_int_equal(v.n, 7);
    assert_true(isnan(v.s[0].value));
    assert_true(isinf(v.s[1].value) && v.s[1].value > 0);
    assert_true(isinf(v.s[2].value) && v.s[2].value < 0);
    assert_true(isinf(v.s[3].value) && v.s[3].value > 0);
    assert_true(v.s[4].value == 0);
    assert_true(isinf(v.s[5].value)); /* out of range reads as Inf, as Go returns it */
    assert_true(isinf(v.s[6].value));
}

static void test_escapes(void **state)
{
    (void)state;
    static seen v;
    parse_ok("m{path=\"C:\\\\dir\",q=\"say \\\"hi\\\"\",nl=\"a\\nb\",c=\"a,b}=c\"} 1\n", &v);
    assert_int_equal(v.n, 1);
    char out[64];
    assert_int_equal(prom_label_get(&v.s[0], "path", out, sizeof out), 6);
    assert_string_equal(out, "C:\\dir");
    assert_int_equal(prom_label_get(&v.s[0], "q", out, sizeof out), 8);
    assert_string_equal(out, "say \"hi\"");
    assert_int_equal(prom_label_get(&v.s[0], "nl", out, sizeof out), 3);
    assert_string_equal(out, "a\nb");
    assert_int_equal(prom_label_get(&v.s[0], "c", out, sizeof out), 6);
    assert_string_equal(out, "a,b}=c");
    assert_int_equal(prom_label_get(&v.s[0], "absent", out, sizeof out), -1);
    assert_int_equal(prom_label_get(&v.s[0], "q", out, 4), -1); /* too small */
}

static void test_families(void **state)
{
    (void)state;
    static seen v;
    parse_ok("# TYPE vllm:iteration_tokens_total histogram\n"
             "vllm:iteration_tokens_total_bucket{le=\"1.0\"} 2\n"
             "vllm:iteration_tokens_total_bucket{le=\"+Inf\"} 5\n"
             "vllm:iteration_tokens_total_sum 9000\n"
             "vllm:iteration_tokens_total_count 5\n"
             "# TYPE rpc summary\n"
             "rpc{quantile=\"0.5\"} 4\n"
             "rpc_sum 10\n"
             "rpc_count 3\n"
             "rpc_bucket 1\n" /* not a summary's: untyped */
             "# TYPE http_requests_total counter\n"
             "http_requests_total{code=\"200\"} 7\n"
             "# TYPE vllm:prompt_tokens counter\n"
             "vllm:prompt_tokens_total 8000\n" /* OpenMetrics' spelling */
             "# TYPE g gauge\n"
             "g_total 1\n", /* a gauge has no _total */
             &v);
    assert_int_equal(v.n, 11);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(v.families[i], "vllm:iteration_tokens_total");
        assert_int_equal(v.s[i].type, PROM_HISTOGRAM);
    }
    for (int i = 4; i < 7; i++) {
        assert_string_equal(v.families[i], "rpc");
        assert_int_equal(v.s[i].type, PROM_SUMMARY);
    }
    assert_int_equal(v.s[7].type, PROM_UNTYPED);
    assert_string_equal(v.families[8], "http_requests_total");
    assert_int_equal(v.s[8].type, PROM_COUNTER);
    assert_string_equal(v.families[9], "vllm:prompt_tokens");
    assert_int_equal(v.s[9].type, PROM_COUNTER);
    assert_int_equal(v.s[10].type, PROM_UNTYPED);
    assert_string_equal(prom_type_name(PROM_HISTOGRAM), "histogram");
}

/* Every malformed line is refused with its line number. */
static void test_refused(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *why;
    } bad[] = {
        {"foo{a=\"b} 1\n", "unterminated label value"},
        {"foo{a=\"b\\x\"} 1\n", "bad escape"},
        {"foo{a=\"b\\", "unterminated label value"},
        {"foo{a=b} 1\n", "must be quoted"},
        {"foo{a=\"1\",a=\"2\"} 1\n", "twice"},
        {"foo{a=\"1\" b=\"2\"} 1\n", "',' or '}'"},
        {"foo{a=\"1\"\n", "',' or '}'"},
        {"foo{a=\"1\",\n", "unterminated label set"},
        {"foo{=\"1\"} 1\n", "label name"},
        {"foo{a:b=\"1\"} 1\n", "'='"},
        {"foo{a \"1\"} 1\n", "'='"},
        {"foo\n", "a value expected"},
        {"foo{}\n", "a value expected"},
        {"foo bar\n", "not a number"},
        {"foo 0x1p3\n", "not a number"},
        {"foo nan(1)\n", "not a number"},
        {"foo 1_000\n", "not a number"},
        {"foo 1 2 3\n", "after the timestamp"},
        {"foo 1 1.5\n", "timestamp"},
        {"foo 1 99999999999999999999\n", "timestamp"},
        {"foo{a=\"b\"}1\n", "blank expected"},
        {"9foo 1\n", "metric name"},
        {"{a=\"b\"} 1\n", "metric name"},
        {"# TYPE foo gauges\n", "unknown type"},
        {"# TYPE foo\n", "unknown type"},
        {"# TYPE 1foo gauge\n", "needs a metric name"},
        {"# TYPE foo gauge extra\n", "text after the type"},
        {"# HELP\n", "needs a metric name"},
        {"# TYPE h histogram\nh_bucket 1\n", "le label"},
        {"# TYPE h histogram\nh_bucket{le=\"big\"} 1\n", "le label"},
        {"foo 1\nbar\0 1\n", "NUL"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[ERR_LEN] = "";
        size_t len = strlen(bad[i].text);
        if (strstr(bad[i].why, "NUL"))
            len = 13;
        int rc = prom_parse(bad[i].text, len, NULL, NULL, err);
        if (rc != -1 || !strstr(err, bad[i].why) || strncmp(err, "line ", 5) != 0)
            fail_msg("case %zu (%s): rc %d, err '%s'", i, bad[i].text, rc, err);
    }
    /* The line number is the bad line's. */
    char err[ERR_LEN] = "";
    const char *text = "# TYPE a gauge\na 1\n\nb{x=\"1\"} one\nc 2\n";
    static seen v;
    memset(&v, 0, sizeof v);
    assert_int_equal(prom_parse(text, strlen(text), collect, &v, err), -1);
    assert_int_equal(v.n, 1); /* what came before was delivered */
    assert_non_null(strstr(err, "line 4, column 10"));
    /* 33 labels: one too many. */
    char many[1024] = "m{";
    for (int i = 0; i <= PROM_MAX_LABELS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "l%d=\"v\",", i);
    strcat(many, "} 1\n");
    assert_int_equal(prom_parse(many, strlen(many), NULL, NULL, err), -1);
    assert_non_null(strstr(err, "too many labels"));
    /* A callback's non-zero return stops the parse and is returned. */
    memset(&v, 0, sizeof v);
    v.n = MAX_SEEN;
    assert_int_equal(prom_parse("a 1\nb 2\n", 8, collect, &v, err), 7);
}

/* The text ends exactly at a page the process cannot read: nothing reads past len. */
static void test_page_guard(void **state)
{
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    static const char *const texts[] = {
        "x{a=\"b\"} 1 17", "x{a=\"b\\", "x{a=\"b\"", "x{a=", "x{", "# TYPE x gauge", "x 1",
        "# TYPE x", "x{a=\"b\"} ", "x",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        size_t len = strlen(texts[i]);
        char *at = map + page - len;
        memcpy(at, texts[i], len);
        char err[ERR_LEN];
        int rc = prom_parse(at, len, NULL, NULL, err);
        assert_true(rc == 0 || rc == -1);
        /* And every prefix of it, one byte at a time. */
        for (size_t n = 0; n < len; n++) {
            char *p = map + page - n;
            memmove(p, texts[i], n);
            rc = prom_parse(p, n, NULL, NULL, err);
            assert_true(rc == 0 || rc == -1);
        }
    }
    munmap(map, (size_t)page * 2);
}

/* ---- the columns ------------------------------------------------------------------------ */

static void frame_ok(const char *text, scrape_frame *f)
{
    char err[ERR_LEN] = "";
    if (scrape_frame_parse(f, text, strlen(text), err) != 0)
        fail_msg("refused: %s", err);
}

static void test_vllm(void **state)
{
    (void)state;
    scrape_frame f;
    /* Two engines (data parallel) of one model: counts add up, the fuller cache counts. */
    frame_ok("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
             "# TYPE vllm:num_requests_running gauge\n"
             "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 20.0\n"
             "vllm:num_requests_running{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B\"} 12.0\n"
             "# TYPE vllm:num_requests_waiting gauge\n"
             "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1.0\n"
             "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 0.0\n"
             "# TYPE vllm:kv_cache_usage_perc gauge\n"
             "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
             "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.5\n"
             "# TYPE vllm:prompt_tokens_total counter\n"
             "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 8032.0\n"
             "vllm:prompt_tokens_total{engine=\"1\",model_name=\"m\"} 100.0\n"
             "# TYPE vllm:generation_tokens_total counter\n"
             "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 5000.0\n"
             "# TYPE vllm:iteration_tokens_total histogram\n"
             "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 0.0\n"
             "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 300.0\n"
             "vllm:iteration_tokens_total_count{engine=\"0\",model_name=\"m\"} 300.0\n"
             "vllm:iteration_tokens_total_sum{engine=\"0\",model_name=\"m\"} 13132.0\n"
             "# TYPE vllm:time_to_first_token_seconds histogram\n"
             "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 4.0\n"
             "# TYPE python_gc_objects_collected_total counter\n"
             "python_gc_objects_collected_total{generation=\"0\"} 1234.0\n",
             &f);
    assert_true(f.has[SCRAPE_RUNNING] && f.value[SCRAPE_RUNNING] == 32);
    assert_true(f.has[SCRAPE_WAITING] && f.value[SCRAPE_WAITING] == 1);
    assert_true(f.has[SCRAPE_KV_USAGE] && f.value[SCRAPE_KV_USAGE] == 0.5);
    assert_true(f.has[SCRAPE_PROMPT_TOKENS] && f.value[SCRAPE_PROMPT_TOKENS] == 8132);
    assert_true(f.has[SCRAPE_GENERATION_TOKENS] && f.value[SCRAPE_GENERATION_TOKENS] == 5000);
    assert_true(f.has[SCRAPE_STEPS] && f.value[SCRAPE_STEPS] == 300);

    /* Older vLLM: gpu_cache_usage_perc; with both, kv_cache_usage_perc wins in any order. */
    frame_ok("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n", &f);
    assert_true(f.has[SCRAPE_KV_USAGE] && f.value[SCRAPE_KV_USAGE] == 0.75);
    assert_false(f.has[SCRAPE_RUNNING]);
    frame_ok("vllm:gpu_cache_usage_perc 0.75\nvllm:kv_cache_usage_perc 0.125\n"
             "vllm:gpu_cache_usage_perc 0.9\n",
             &f);
    assert_true(f.value[SCRAPE_KV_USAGE] == 0.125);
    assert_int_equal(f.rank[SCRAPE_KV_USAGE], 0);
    /* NaN (a gauge not set yet) gives no value. */
    frame_ok("vllm:num_requests_waiting NaN\n", &f);
    assert_false(f.has[SCRAPE_WAITING]);
}

static void test_sglang(void **state)
{
    (void)state;
    scrape_frame f;
    frame_ok("# HELP sglang:num_running_reqs The number of running requests.\n"
             "# TYPE sglang:num_running_reqs gauge\n"
             "sglang:num_running_reqs{model_name=\"Qwen/Qwen2.5-7B\"} 8.0\n"
             "# TYPE sglang:num_queue_reqs gauge\n"
             "sglang:num_queue_reqs{model_name=\"Qwen/Qwen2.5-7B\"} 4.0\n"
             "# TYPE sglang:token_usage gauge\n"
             "sglang:token_usage{model_name=\"Qwen/Qwen2.5-7B\"} 0.52\n"
             "# TYPE sglang:prompt_tokens_total counter\n"
             "sglang:prompt_tokens_total{model_name=\"Qwen/Qwen2.5-7B\"} 16384.0\n"
             "# TYPE sglang:generation_tokens_total counter\n"
             "sglang:generation_tokens_total{model_name=\"Qwen/Qwen2.5-7B\"} 2048.0\n"
             "sglang:cache_hit_rate{model_name=\"Qwen/Qwen2.5-7B\"} 0.28\n",
             &f);
    assert_true(f.value[SCRAPE_RUNNING] == 8 && f.value[SCRAPE_WAITING] == 4);
    assert_true(f.value[SCRAPE_KV_USAGE] == 0.52);
    assert_true(f.value[SCRAPE_PROMPT_TOKENS] == 16384);
    assert_true(f.value[SCRAPE_GENERATION_TOKENS] == 2048);
    assert_false(f.has[SCRAPE_STEPS]);
}

static void test_llamacpp(void **state)
{
    (void)state;
    scrape_frame f;
    frame_ok("# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
             "# TYPE llamacpp:prompt_tokens_total counter\n"
             "llamacpp:prompt_tokens_total 1200\n"
             "# TYPE llamacpp:tokens_predicted_total counter\n"
             "llamacpp:tokens_predicted_total 39080\n"
             "# TYPE llamacpp:n_decode_total counter\n"
             "llamacpp:n_decode_total 39303\n"
             "# TYPE llamacpp:requests_processing gauge\n"
             "llamacpp:requests_processing 4\n"
             "# TYPE llamacpp:requests_deferred gauge\n"
             "llamacpp:requests_deferred 46\n"
             "llamacpp:predicted_tokens_seconds 0\n",
             &f);
    assert_true(f.value[SCRAPE_RUNNING] == 4 && f.value[SCRAPE_WAITING] == 46);
    assert_false(f.has[SCRAPE_KV_USAGE]); /* current builds export none */
    assert_true(f.value[SCRAPE_PROMPT_TOKENS] == 1200);
    assert_true(f.value[SCRAPE_GENERATION_TOKENS] == 39080);
    assert_true(f.value[SCRAPE_STEPS] == 39303);
    frame_ok("llamacpp:kv_cache_usage_ratio 0.3\n", &f); /* older builds */
    assert_true(f.has[SCRAPE_KV_USAGE] && f.value[SCRAPE_KV_USAGE] == 0.3);
    /* A server with none of the names: nothing. */
    frame_ok("# TYPE up gauge\nup 1\nprocess_cpu_seconds_total 3\n", &f);
    for (int c = 0; c < SCRAPE_COLUMNS; c++)
        assert_false(f.has[c]);
}

/* stallscope serve's own page, as metrics_format writes it. */
static void test_stallscope(void **state)
{
    (void)state;
    metrics_state m;
    metrics_init(&m);
    m.running = 31;
    m.waiting = 2;
    m.kv_usage = 0.375;
    m.prompt_tokens = 8000;
    m.generation_tokens = 4242;
    m.steps = 900;
    metrics_hist_observe(&m.iteration_tokens, 32);
    metrics_hist_observe(&m.iteration_tokens, 8032);
    buf b = {0};
    metrics_format(&m, "llama \"8b\"\\", &b);
    scrape_frame f;
    frame_ok(b.data, &f);
    assert_true(f.value[SCRAPE_RUNNING] == 31 && f.value[SCRAPE_WAITING] == 2);
    assert_true(f.value[SCRAPE_KV_USAGE] == 0.375);
    assert_true(f.value[SCRAPE_PROMPT_TOKENS] == 8000);
    assert_true(f.value[SCRAPE_GENERATION_TOKENS] == 4242);
    /* vLLM's histogram count first; our own step counter only where it is absent. */
    assert_true(f.value[SCRAPE_STEPS] == 2 && f.rank[SCRAPE_STEPS] == 0);
    /* Strict 0.0.4: every *_total sample belongs to a family its # TYPE named a counter. */
    static seen v;
    parse_ok(b.data, &v);
    int counters = 0;
    for (int i = 0; i < v.n; i++) {
        size_t n = strlen(v.names[i]);
        if (n > 6 && strcmp(v.names[i] + n - 6, "_total") == 0 &&
            strstr(v.names[i], "iteration_tokens") == NULL) {
            assert_int_equal(v.s[i].type, PROM_COUNTER);
            assert_string_equal(v.families[i], v.names[i]); /* TYPE named it whole */
            counters++;
        }
        assert_int_not_equal(v.s[i].type, PROM_UNTYPED);
        assert_false(strncmp(v.names[i], "stallscope:", 11) == 0);
    }
    assert_true(counters >= 8);
    buf_free(&b);
}

static void test_rows(void **state)
{
    (void)state;
    scrape_frame a, b2;
    frame_ok("vllm:num_requests_running 3\nvllm:prompt_tokens_total 100\n"
             "vllm:generation_tokens_total 50\n",
             &a);
    frame_ok("vllm:num_requests_running 4\nvllm:num_requests_waiting 1\n"
             "vllm:prompt_tokens_total 8100\nvllm:generation_tokens_total 20\n",
             &b2);
    scrape_row row;
    char line[512];
    /* No previous scrape: counters empty; gauges as read. */
    scrape_row_from(&row, &a, NULL, 1000, 900);
    scrape_row_format(&row, line, sizeof line);
    assert_string_equal(line, "1000,900,3,,,,,\n");
    /* Increases; a counter that went down was reset and counts from 0. */
    scrape_row_from(&row, &b2, &a, 251000000, 250000000);
    size_t len = scrape_row_format(&row, line, sizeof line);
    assert_string_equal(line, "251000000,250000000,4,1,,8000,20,\n");
    assert_int_equal(len, strlen(line));
    assert_int_equal(scrape_row_format(&row, line, 10), 0); /* too small: nothing */
    char origin[64], url_path[64];
    assert_int_equal(scrape_split_url("http://h:8000/metrics/", origin, sizeof origin, url_path,
                                      sizeof url_path), 0);
    assert_string_equal(origin, "http://h:8000");
    assert_string_equal(url_path, "/metrics/");
    assert_int_equal(scrape_split_url("https://h", origin, sizeof origin, url_path, sizeof url_path), 0);
    assert_string_equal(origin, "https://h");
    assert_string_equal(url_path, "/");
    assert_int_equal(scrape_split_url("h:8000/metrics", origin, sizeof origin, url_path, sizeof url_path),
                     -1);
    assert_int_equal(scrape_split_url("http://h/metrics", origin, 4, url_path, sizeof url_path), -1);
    assert_string_equal(scrape_column_name(SCRAPE_GENERATION_TOKENS), "generation_tokens");
    assert_true(scrape_column_is_counter(SCRAPE_STEPS));
    assert_false(scrape_column_is_counter(SCRAPE_KV_USAGE));

    /* The file and its reader. */
    char path[] = "/tmp/test_prom_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(scrape_csv_header(), f);
    scrape_row_from(&row, &a, NULL, 1000, 900);
    scrape_row_format(&row, line, sizeof line);
    fputs(line, f);
    scrape_row_from(&row, &b2, &a, 251000000, 250000000);
    scrape_row_format(&row, line, sizeof line);
    fputs(line, f);
    fclose(f);
    scrape_series s;
    char err[ERR_LEN] = "";
    if (scrape_csv_read(path, &s, err) != 0)
        fail_msg("%s", err);
    assert_int_equal(s.n, 2);
    assert_true(s.rows[1].t_ns == 251000000 && s.rows[1].t_sent_ns == 250000000);
    assert_true(s.rows[1].has[SCRAPE_PROMPT_TOKENS] && s.rows[1].value[SCRAPE_PROMPT_TOKENS] == 8000);
    assert_false(s.rows[0].has[SCRAPE_PROMPT_TOKENS]);
    assert_true(s.has[SCRAPE_WAITING] && !s.has[SCRAPE_KV_USAGE] && !s.has[SCRAPE_STEPS]);
    scrape_series_free(&s);
    /* A last row cut without its LF is dropped; whole without its LF, it is taken. */
    f = fopen(path, "a");
    fputs("300000000,299000000,4,1,,8", f);
    fclose(f);
    if (scrape_csv_read(path, &s, err) != 0)
        fail_msg("%s", err);
    assert_true(s.n == 2 && s.cut);
    scrape_series_free(&s);
    f = fopen(path, "a");
    fputs("x\n400000000,399000000,4,1,,8,20,", f);
    fclose(f);
    assert_int_equal(scrape_csv_read(path, &s, err), -1); /* the cut row, now inside: refused */
    assert_non_null(strstr(err, ":4: 8 columns expected"));
    scrape_series_free(&s);
    f = fopen(path, "w");
    fputs(scrape_csv_header(), f);
    fputs("400000000,399000000,4,1,,8,20,", f);
    fclose(f);
    if (scrape_csv_read(path, &s, err) != 0)
        fail_msg("%s", err);
    assert_true(s.n == 1 && !s.cut && s.rows[0].value[SCRAPE_GENERATION_TOKENS] == 20);
    scrape_series_free(&s);
    /* A broken row is refused with its line. */
    f = fopen(path, "a");
    fputs("\n5,4,1,2\n", f);
    fclose(f);
    assert_int_equal(scrape_csv_read(path, &s, err), -1);
    assert_non_null(strstr(err, ":3: 8 columns expected"));
    scrape_series_free(&s);
    f = fopen(path, "w");
    fputs("t,x\n", f);
    fclose(f);
    assert_int_equal(scrape_csv_read(path, &s, err), -1);
    assert_non_null(strstr(err, "header"));
    scrape_series_free(&s);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_samples),   cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_escapes),   cmocka_unit_test(test_families),
        cmocka_unit_test(test_refused),   cmocka_unit_test(test_page_guard),
        cmocka_unit_test(test_vllm),      cmocka_unit_test(test_sglang),
        cmocka_unit_test(test_llamacpp),  cmocka_unit_test(test_stallscope),
        cmocka_unit_test(test_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

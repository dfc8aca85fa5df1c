/* redact: the one rule for credentials in URLs, argv, shell commands and messages,
 * hand-written cases each (redact.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/redact.h"

static void url_is(const char *in, const char *want)
{
    char out[512];
    size_t n = redact_url(in, out, sizeof out);
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
}

static void test_url(void **state)
{
    (void)state;
    url_is("http://user:PASS@127.0.0.1:8000/v1?key=QKEY&x=y",
           "http://***@127.0.0.1:8000/v1?key=***&x=***");
    url_is("https://api.example.com", "https://api.example.com");
    url_is("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1/");
    url_is("http://h:1/path/x@y", "http://h:1/path/x@y");              /* '@' in the path */
    url_is("http://h:1/path/x@y#frag", "http://h:1/path/x@y#***");
    url_is("http://u:p@[::1]:8000/v1", "http://***@[::1]:8000/v1");    /* IPv6 */
    url_is("http://[::1]:8000", "http://[::1]:8000");
    url_is("http://user:@h/", "http://***@h/");                          /* empty password */
    url_is("http://@h/", "http://***@h/");
    url_is("http://u%40x:p%3Ass@h/?api%5Fkey=a%26b", "http://***@h/?api%5Fkey=***"); /* %-encoded */
    url_is("http://u:p@ss@h:1/", "http://***@h:1/");     /* a raw '@' in the password */
    url_is("u:p@host:80?token=1", "***@host:80?token=***"); /* no scheme */
    url_is("host:80", "host:80");
    url_is("http://h/?abc", "http://h/?***");                             /* a bare token */
    url_is("http://h/?a=&&b", "http://h/?a=***&&***");
    url_is("http://h/?", "http://h/?");
    url_is("", "");
}

/* Cut at every size: a prefix of the whole result, never a byte of the secret. */
static void test_url_cut(void **state)
{
    (void)state;
    const char *in = "http://user:PASSWORD@h:1/x?key=QKEYQKEY";
    char whole[128], out[128];
    size_t n = redact_url(in, whole, sizeof whole);
    assert_int_equal(n, strlen("http://***@h:1/x?key=***"));
    assert_int_equal(redact_url(in, NULL, 0), n);
    for (size_t size = 1; size <= n + 1; size++) {
        memset(out, 'Z', sizeof out);
        assert_int_equal(redact_url(in, out, size), n);
        assert_int_equal(strlen(out), size - 1);
        assert_memory_equal(out, whole, size - 1);
        assert_null(strstr(out, "PASS"));
        assert_null(strstr(out, "QKEY"));
    }
}

static void text_is(const char *in, const char *want)
{
    char out[512];
    redact_text(in, out, sizeof out);
    assert_string_equal(out, want);
}

static void test_text(void **state)
{
    (void)state;
    text_is("GET http://u:PASS@h:1/v1/models: Connection refused",
            "GET http://***@h:1/v1/models: Connection refused");
    text_is("'http://h/m?key=QKEY' and https://x/?t=1 done",
            "'http://h/m?key=***' and https://x/?t=*** done");
    text_is("(http://u:p@h)", "(http://***@h)");
    text_is("see http://h/?k=v, then http://h/?k=v.", "see http://h/?k=***, then http://h/?k=***.");
    text_is("no URL at all: 8k tokens, p99 < 2s", "no URL at all: 8k tokens, p99 < 2s");
    text_is("listening on http://127.0.0.1:8000", "listening on http://127.0.0.1:8000");
    text_is("two: http://a:b@x/ http://c:d@y/?q=1", "two: http://***@x/ http://***@y/?q=***");
}

/* Every message through err_set: a URL's credentials never reach the caller's buffer, even
 * when the message is longer than the buffer (redacted first, cut after). */
static void test_err_set(void **state)
{
    (void)state;
    char err[ERR_LEN];
    assert_int_equal(err_set(err, "cannot connect to %s: %s", "http://user:PASS@h:1/?key=QKEY",
                             "refused"),
                     -1);
    assert_string_equal(err, "cannot connect to http://***@h:1/?key=***: refused");
    char pad[300];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    /* Cut first, the '@' would fall just past the buffer and the password stay in it. */
    err_set(err, "%.*s http://user:%s@h", ERR_LEN - 22, pad, "PASSWORD");
    assert_null(strstr(err, "PASS"));
    assert_non_null(strstr(err, " http://***@h"));
    char long_path[5000];
    memset(long_path, 'p', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    /* longer than any copy on the stack */
    err_set(err, "GET http://user:PASSWORD@h/%s?key=QKEY", long_path);
    assert_null(strstr(err, "PASS"));
    assert_non_null(strstr(err, "http://***@h/ppp"));
}

static void command_is(const char *in, const char *want)
{
    char out[1024];
    size_t n = redact_command(in, out, sizeof out);
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
}

static void test_command(void **state)
{
    (void)state;
    command_is("vllm serve m --api-key K --port {port} --max-num-batched-tokens {budget}",
               "vllm serve m --api-key *** --port {port} --max-num-batched-tokens {budget}");
    command_is("serve --api-key=K", "serve --api-key=***");
    command_is("serve --api-key 'K K' --x", "serve --api-key *** --x");
    command_is("serve --api-key=\"K K\" --x", "serve --api-key=*** --x");
    command_is("OPENAI_API_KEY=K HF_TOKEN='t' vllm serve",
               "OPENAI_API_KEY=*** HF_TOKEN=*** vllm serve");
    command_is("export AWS_SECRET_ACCESS_KEY=S; x", "export AWS_SECRET_ACCESS_KEY=*** x");
    command_is("curl -H 'Authorization: Bearer T' http://u:p@h/?k=v",
               "curl -H *** http://***@h/?k=***");
    command_is("curl -H'X-Token: T' -s", "curl -H*** -s");
    command_is("x --token T --password P --header 'X: y' --hf-token H --passwd Q",
               "x --token *** --password *** --header *** --hf-token *** --passwd ***");
    command_is("sh -c 'vllm serve --api-key K --port 1'",
               "sh -c 'vllm serve --api-key *** --port 1'");
    command_is("sh -c 'OPENAI_API_KEY=K vllm serve'", "sh -c 'OPENAI_API_KEY=*** vllm serve'");
    /* NAME='a b' is one value, space and all */
    command_is("x AUTH_HEADER='Bearer xyz' y", "x AUTH_HEADER=*** y");
    command_is("x --target u:P@h:1 --scrape-metrics=http://u:P@h/metrics?key=Q",
               "x --target ***@h:1 --scrape-metrics=http://***@h/metrics?key=***");
    command_is("x --base-url http://u:P@h/v1&y", "x --base-url 'http://***@h/v1&y'");
    /* Left alone, byte for byte: no secret in these. */
    const char *plain[] = {
        "'/bin/stallscope' serve --engine emulate --port {port} --policy {policy}",
        "vllm serve m --max-num-batched-tokens 512 --tokenizer t --enable-chunked-prefill",
        "serve --label \"a  b\" --x 'y'   --z \\ w  ",
        "echo \"it's\" 'unclosed",
        "x --ssl-certfile f --max-prompt-tokens 8k --inject-max-tokens 1",
        "",
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        command_is(plain[i], plain[i]);
}

static void argv_is(int argc, char **in, const char *const *want)
{
    char **out = redact_argv(argc, in);
    assert_non_null(out);
    for (int i = 0; i < argc; i++)
        assert_string_equal(out[i], want[i]);
    assert_null(out[argc]);
    redact_argv_free(argc, out);
}

static void test_argv(void **state)
{
    (void)state;
    char *in[] = {"run",        "--target", "http://u:PASS@h:1/?key=Q", "--api-key", "K",
                  "--header=X-Token: v",    "--server-cmd", "s --api-key K2 --port {port}",
                  "--metadata", "api_key=K3", "--metadata", "team=infra", "--users", "8",
                  "--target=u:P@h", "--label", "first contact",
                  "--metadata", "AUTH_HEADER=Bearer xyz",
                  "--server-cmd=HF_TOKEN=T serve", "--header"};
    const char *want[] = {"run",        "--target", "http://***@h:1/?key=***", "--api-key", "***",
                          "--header=***",           "--server-cmd", "s --api-key *** --port {port}",
                          "--metadata", "api_key=***", "--metadata", "team=infra", "--users", "8",
                          "--target=***@h", "--label", "first contact",
                          "--metadata", "AUTH_HEADER=***",
                          "--server-cmd=HF_TOKEN=*** serve", "--header"};
    argv_is((int)(sizeof in / sizeof in[0]), in, want);
    char *none[] = {NULL};
    argv_is(0, none, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url),     cmocka_unit_test(test_url_cut),
        cmocka_unit_test(test_text),    cmocka_unit_test(test_err_set),
        cmocka_unit_test(test_command), cmocka_unit_test(test_argv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#include "client/fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "client/curl.h"
#include "client/url.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"

#define MAX_URL 1024

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    buf *reply = userdata;
    size_t n = size * nmemb;
    if (reply->len + n + 1 > (size_t)16 << 20)
        return 0; /* curl treats a short write as an error */ /* nothing we ask for is that large */
    if (buf_append(reply, ptr, n) != 0)
        return 0; /* curl treats a short write as an error */
    return n;
}

int fetch_http(const transport_options *opt, const char *method, const char *path, const char *body,
               int64_t timeout_ns, int *status, char **body_out, char *err)
{
    curlt_global_init();
    char url[MAX_URL + 256];
    if (url_join(opt->base_url, path, url, sizeof url) != 0)
        return err_set(err, "URL too long");
    struct curl_slist *headers = curlt_headers(opt, err);
    if (!headers)
        return -1;
    CURL *e = curl_easy_init();
    if (!e) {
        curl_slist_free_all(headers);
        return err_set(err, "curl_easy_init failed");
    }
    buf reply = {0};
    char curl_err[CURL_ERROR_SIZE] = "";
    int64_t connect_ns = opt->connect_timeout_ns > 0 ? opt->connect_timeout_ns : 5 * CLOCK_NS_PER_S;
    if (connect_ns > timeout_ns)
        connect_ns = timeout_ns;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_ns / CLOCK_NS_PER_MS));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(connect_ns / CLOCK_NS_PER_MS));
    if (opt->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
    }
    CURLcode rc = curl_easy_perform(e);
    long code = 0, os_errno = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os_errno);
    curl_easy_cleanup(e);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        buf_free(&reply);
        /* curl says "Couldn't connect"; the OS says why (refused, unreachable ...). */
        return err_set(err, "%s %s: %s%s%s%s", method, url, os_errno ? strerror((int)os_errno) : "",
                       os_errno ? " (" : "", curl_err[0] ? curl_err : curl_easy_strerror(rc),
                       os_errno ? ")" : "");
    }
    *status = (int)code;
    if (!body_out) {
        buf_free(&reply);
        return 0;
    }
    *body_out = buf_detach(&reply);
    return *body_out ? 0 : err_set(err, "%s %s: out of memory", method, url);
}

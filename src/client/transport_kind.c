#include "client/transport_kind.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/curl.h"
#include "client/raw.h"
#include "common/err.h"

int transport_kind_parse(const char *text, transport_kind *out, char *err)
{
    static const char *names[] = {"auto", "raw", "curl"};
    for (int i = 0; i < 3; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = (transport_kind)i;
            return 0;
        }
    return err_set(err, "unknown transport '%s' (auto, raw or curl)", text);
}

const char *transport_kind_name(transport_kind kind)
{
    return kind == TRANSPORT_RAW ? "raw" : kind == TRANSPORT_CURL ? "curl" : "auto";
}

/* no_proxy (curl's rules, simplified): "*", or a comma list of hosts and domain suffixes. */
static bool no_proxy_matches(const char *list, const char *host, size_t host_len)
{
    while (list && *list) {
        while (*list == ' ' || *list == ',')
            list++;
        size_t len = strcspn(list, ", ");
        const char *entry = list;
        list += len;
        if (len == 1 && entry[0] == '*')
            return true;
        if (len > 0 && entry[0] == '.') {
            entry++;
            len--;
        }
        if (len == 0 || len > host_len)
            continue;
        if (strncasecmp(host + host_len - len, entry, len) == 0 &&
            (len == host_len || host[host_len - len - 1] == '.'))
            return true;
    }
    return false;
}

transport_kind transport_kind_resolve(transport_kind kind, const char *base_url)
{
    if (kind != TRANSPORT_AUTO)
        return kind;
    bool https = strncasecmp(base_url, "https://", 8) == 0;
    if (!https && strncasecmp(base_url, "http://", 7) != 0)
        return TRANSPORT_CURL;
    /* curl reads lower-case http_proxy only (HTTP_PROXY could come from a CGI request). */
    const char *names[] = {https ? "https_proxy" : "http_proxy", https ? "HTTPS_PROXY" : NULL,
                           "all_proxy", "ALL_PROXY"};
    bool proxy = false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = names[i] ? getenv(names[i]) : NULL;
        proxy |= v && v[0];
    }
    if (!proxy)
        return TRANSPORT_RAW;
    const char *host = base_url + (https ? 8 : 7);
    const char *at = host + strcspn(host, "/?#");
    for (const char *p = host; p < at; p++)
        if (*p == '@')
            host = p + 1;
    size_t host_len = host[0] == '[' ? strcspn(host, "]") + 1 : strcspn(host, ":/?#");
    const char *no_proxy = getenv("no_proxy");
    if (!no_proxy || !no_proxy[0])
        no_proxy = getenv("NO_PROXY");
    return no_proxy_matches(no_proxy, host, host_len) ? TRANSPORT_RAW : TRANSPORT_CURL;
}

int transport_kind_create(transport_kind kind, const transport_options *opt, transport *out,
                          char *err)
{
    if (transport_kind_resolve(kind, opt->base_url) == TRANSPORT_RAW) {
        raw_client *c = raw_create(opt, err);
        if (!c)
            return -1;
        *out = raw_client_transport(c);
        return 0;
    }
    curlt_client *c = curlt_create(opt, err);
    if (!c)
        return -1;
    *out = curlt_client_transport(c);
    return 0;
}

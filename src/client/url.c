#include "client/url.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "common/err.h"

void url_base(const char *target, char *out, size_t size)
{
    snprintf(out, size, "%.*s", (int)strcspn(target, "?#"), target);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '/')
        out[--n] = '\0';
    if (n >= 3 && strcmp(out + n - 3, "/v1") == 0)
        out[n - 3] = '\0';
}

const char *url_query(const char *target, size_t *len)
{
    const char *q = target + strcspn(target, "?#");
    if (*q != '?') {
        *len = 0;
        return NULL;
    }
    q++;
    *len = strcspn(q, "#");
    return q;
}

int url_join(const char *target, const char *path, char *out, size_t size)
{
    url_base(target, out, size);
    size_t query_len, n = strlen(out);
    const char *query = url_query(target, &query_len);
    int w = query ? snprintf(out + n, size - n, "%s?%.*s", path, (int)query_len, query)
                  : snprintf(out + n, size - n, "%s", path);
    return w < 0 || (size_t)w >= size - n ? -1 : 0;
}

/* ---- the parts, for the raw transport -------------------------------------------------- */

static int hex_digit(char x)
{
    return x >= '0' && x <= '9'   ? x - '0'
           : x >= 'a' && x <= 'f' ? x - 'a' + 10
           : x >= 'A' && x <= 'F' ? x - 'A' + 10
                                  : -1;
}

/* The URL's user:password (percent-decoded, as curl reads them) as out->basic, for an
 * Authorization: Basic header (RFC 7617). */
static int basic_auth(url_parts *out, const char *userinfo, size_t len, char *err)
{
    unsigned char plain[384];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (n + 1 >= sizeof plain)
            return err_set(err, "the URL's credentials are too long");
        int hi, lo;
        if (userinfo[i] == '%' && i + 2 < len && (hi = hex_digit(userinfo[i + 1])) >= 0 &&
            (lo = hex_digit(userinfo[i + 2])) >= 0) {
            plain[n++] = (unsigned char)(hi * 16 + lo);
            i += 2;
        } else {
            plain[n++] = (unsigned char)userinfo[i];
        }
    }
    if (!memchr(plain, ':', n))
        plain[n++] = ':'; /* a user without a password: curl sends "user:" */
    static const char prefix[] = "Basic ";
    if (sizeof prefix - 1 + 4 * ((n + 2) / 3) + 1 > sizeof out->basic)
        return err_set(err, "the URL's credentials are too long");
    memcpy(out->basic, prefix, sizeof prefix - 1);
    EVP_EncodeBlock((unsigned char *)out->basic + sizeof prefix - 1, plain, (int)n);
    OPENSSL_cleanse(plain, sizeof plain);
    return 0;
}

int url_split(const char *base_url, url_parts *out, char *err)
{
    memset(out, 0, sizeof *out);
    const char *p = base_url;
    if (strncasecmp(p, "http://", 7) == 0) {
        p += 7;
        snprintf(out->port, sizeof out->port, "80");
    } else if (strncasecmp(p, "https://", 8) == 0) {
        p += 8;
        out->tls = true;
        snprintf(out->port, sizeof out->port, "443");
    } else {
        return err_set(err,
                       "the raw transport takes http:// and https:// URLs, not '%s' "
                       "(--transport curl)",
                       base_url);
    }
    size_t auth_len = strcspn(p, "/?#");
    const char *at = NULL;
    for (const char *q = p; q < p + auth_len; q++)
        if (*q == '@')
            at = q; /* the last '@': a raw one may sit in the password, as curl reads it */
    if (at) {
        if (basic_auth(out, p, (size_t)(at - p), err) != 0)
            return -1;
        auth_len -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    const char *path = p + auth_len;
    const char *host = p;
    size_t host_len;
    const char *port_at = NULL;
    if (host[0] == '[') {
        const char *close = memchr(host, ']', auth_len);
        if (!close)
            return err_set(err, "bad IPv6 address in '%s'", base_url);
        host++;
        host_len = (size_t)(close - host);
        if (close + 1 < path && close[1] == ':')
            port_at = close + 2;
    } else {
        const char *colon = memchr(host, ':', auth_len);
        host_len = colon ? (size_t)(colon - host) : auth_len;
        if (colon)
            port_at = colon + 1;
    }
    if (host_len == 0 || host_len >= sizeof out->host)
        return err_set(err, "no host (or too long a one) in '%s'", base_url);
    memcpy(out->host, host, host_len);
    out->host[host_len] = '\0';
    if (port_at) {
        size_t n = (size_t)(path - port_at);
        if (n == 0 || n >= sizeof out->port || strspn(port_at, "0123456789") < n)
            return err_set(err, "bad port in '%s'", base_url);
        memcpy(out->port, port_at, n);
        out->port[n] = '\0';
    }
    size_t path_len = strcspn(path, "?#");
    if (path_len >= sizeof out->path)
        return err_set(err, "URL path too long");
    memcpy(out->path, path, path_len);
    out->path[path_len] = '\0';
    out->authority = p;
    out->authority_len = auth_len;
    return 0;
}

void url_parts_wipe(url_parts *parts) { OPENSSL_cleanse(parts->basic, sizeof parts->basic); }

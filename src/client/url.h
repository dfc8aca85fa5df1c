/* url — the target URL as both transports (and those who call the server besides them)
 * read it: its base, its query, the URL of one request; and its parts, as the raw
 * transport connects to it. */
#ifndef STALLSCOPE_URL_H
#define STALLSCOPE_URL_H
#include <stdbool.h>
#include <stddef.h>

/* Normalise a user's --target: drop its query and fragment, strip a trailing "/" and "/v1"
 * so paths can be appended. */
void url_base(const char *target, char *out, size_t size);
/* The target's query (after '?', before '#'; *len its length), or NULL. Every request
 * carries it (an API version, a key a gateway wants in the URL). */
const char *url_query(const char *target, size_t *len);
/* The URL of path (e.g. "/v1/completions") on the target: its base URL, path, and its query.
 * 0, or -1 when it does not fit in size. */
int url_join(const char *target, const char *path, char *out, size_t size);

/* The parts of an http:// or https:// base URL (url_base's) as the raw transport uses
 * them. The user:password before the host (percent-decoded, as curl reads it; a user alone
 * is "user:") becomes an Authorization: Basic value (RFC 7617). */
typedef struct url_parts {
    bool tls;              /* https:// */
    char host[256];        /* the name or address (an IPv6 one without its brackets): for the
                              connection, SNI and certificate checks */
    char port[16];         /* as written, else 80 or 443 */
    const char *authority; /* host[:port] as the URL wrote it (the Host header, RFC 9110 7.2):
                              authority_len bytes inside the URL given */
    size_t authority_len;
    char path[1024];       /* the base URL's path, before each request's ("" none) */
    char basic[1024];      /* "Basic <base64 of user:password>", "" without credentials */
} url_parts;

/* 0, or -1 with err: another scheme (the raw transport takes http:// and https:// alone),
 * no host or too long a one, a bad port or IPv6 address, credentials or a path too long. */
int url_split(const char *base_url, url_parts *out, char *err);
/* Forget the credentials held in parts (memory that may be read later, wiped). */
void url_parts_wipe(url_parts *parts);

#endif

/* url — the target URL as both transports (and those who call the server besides them)
 * read it: its base, its query, the URL of one request. */
#ifndef STALLSCOPE_URL_H
#define STALLSCOPE_URL_H
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

#endif

#include "client/url.h"

#include <stdio.h>
#include <string.h>

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

#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/redact.h"

int err_set(char *err, const char *fmt, ...)
{
    if (err) {
        /* Whole first, then redacted, then cut to the caller's buffer: cut first, a URL's
         * '@' could fall past the end and leave its password looking like a host. */
        char text[4096];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        char *whole = NULL;
        if (n >= (int)sizeof text && (whole = malloc((size_t)n + 1))) {
            va_start(ap, fmt);
            vsnprintf(whole, (size_t)n + 1, fmt, ap);
            va_end(ap);
        }
        redact_text(whole ? whole : text, err, ERR_LEN);
        free(whole);
    }
    return -1;
}

/* units — parsing and formatting of the sizes and durations users type.
 * Sizes (token counts): "8000", "8k", "16K", "1.5k", "2M" (k = 1000, M = 10^6).
 * Durations: "40s", "500ms", "250us", "100ns", "2m", "1h", "1.5s"; the unit is required
 * (a bare "50" is refused: seconds or milliseconds?), except for a plain 0. Quantities (FLOP/s, bytes/s): "989T", "3.35e12", "16G" (SI, powers of 1000).
 * Every parser is pure: it rejects trailing junk ("8q"), empty strings, NaN/inf and
 * out-of-range values, returns 0 or -1 and fills err (ERR_LEN). */
#ifndef STALLSCOPE_UNITS_H
#define STALLSCOPE_UNITS_H
#include <stddef.h>
#include <stdint.h>

int units_parse_count(const char *text, int64_t *out, char *err);
int units_parse_duration_ns(const char *text, int64_t *out, char *err);
int units_parse_quantity(const char *text, double *out, char *err);
/* Comma-separated lists ("4k,8k,16k"); at most max items; *n gets the count. */
int units_parse_count_list(const char *text, int64_t *out, int max, int *n, char *err);
int units_parse_duration_list(const char *text, int64_t *out, int max, int *n, char *err);

/* "146.3 ms", "4.78 ms", "40 s", "820 us": a human-friendly duration. */
void units_format_duration(int64_t ns, char *buf, size_t size);

#endif

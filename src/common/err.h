/* err — the caller's error buffer convention: functions return 0 on success and -1 on
 * failure, after writing one line (what failed and why) into a caller-owned char[ERR_LEN]. */
#ifndef STALLSCOPE_ERR_H
#define STALLSCOPE_ERR_H

#define ERR_LEN 256

/* Format into err (may be NULL); always returns -1 so callers can `return err_set(...)`.
 * Every URL in the message loses its credentials first (redact_text, common/redact.h): an
 * error printed or written anywhere never carries a URL's user:password or query values. */
int err_set(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

/* redact — the one rule for credentials that travel inside text stallscope writes: a URL, a
 * command line, a shell command. Every writer of a file or of the terminal passes such text
 * through here first (config.json, summary.json, comparison.json, report.html, tune.json,
 * sweep.json, a calibrate profile, every error message: err_set applies redact_text); the
 * connection itself keeps the real URL. Pure functions (a command's words are copied to the
 * heap while they are looked at; when memory runs out a word is masked whole).
 *
 *   a URL       its userinfo whole, each query value (its name kept), a fragment:
 *               user:pass@host:8000/v1?key=K&x=1#t after the scheme becomes
 *               ***@host:8000/v1?key=***&x=***#*** (a user alone goes too)
 *               The authority ends at the first '/', '?' or '#' (RFC 3986), so an '@' in the
 *               path is not userinfo; its last '@' ends the userinfo (a raw '@' in a password).
 *               Without "scheme://" the text is taken from its authority on ("u:p@host:80").
 *   a word      (an argv element, a word of a command):
 *               - the value of a key flag, separate (--api-key K) or joined (--api-key=K):
 *                 a flag whose name has a part key, apikey, token, password, passwd, pass,
 *                 secret, header, auth, authorization, credential(s), cookie or bearer (parts
 *                 split at '-' and '_', a part may end with token, password, passwd, secret
 *                 or apikey), and -H: --api-key, --token, --password, --header, --hf-token;
 *                 not --max-num-batched-tokens ("tokens" is no such part);
 *               - NAME=VALUE with NAME an identifier named the same way: OPENAI_API_KEY=K,
 *                 HF_TOKEN=K, --metadata api_key=K;
 *               - the value of a URL flag (--target, --scrape-metrics, a flag with a part
 *                 url) as a URL, with or without its scheme; any other "scheme://" URL in a
 *                 word as a URL;
 *               - the value of a command flag (--server-cmd, a flag with a part cmd or
 *                 command, sh's -c), and any other word holding whitespace, as a command.
 *   a command   the word rule over its shell words (quotes and backslashes honoured); a word
 *               the rule leaves alone keeps its bytes, quotes included; one it changes is
 *               written unquoted, or in single quotes when the result needs them.
 *   text        every "scheme://" URL in it (to the next whitespace, quote, '<' or '>', less a
 *               sentence's trailing ".,:;!)").
 *
 * Each function writes at most size bytes (NUL included; out may be NULL when size is 0)
 * and returns the length of the whole result, as snprintf does. A result cut short never
 * shows a secret: masked bytes are never copied, so a cut can only drop the end. */
#ifndef STALLSCOPE_REDACT_H
#define STALLSCOPE_REDACT_H
#include <stddef.h>

#define REDACT_MASK "***"

size_t redact_url(const char *url, char *out, size_t size);
size_t redact_text(const char *text, char *out, size_t size);
size_t redact_command(const char *command, char *out, size_t size);

/* argv with the word rule applied across its elements (a key flag masks the next one): a
 * malloc'd vector of argc malloc'd strings and a NULL, freed with redact_argv_free; NULL
 * when out of memory. */
char **redact_argv(int argc, char *const *argv);
void redact_argv_free(int argc, char **argv);

#endif

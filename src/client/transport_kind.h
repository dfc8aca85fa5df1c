/* transport_kind — which transport a run uses, and making it: the raw HTTP/1.1 client
 * (raw.h) or libcurl's (curl.h), behind the one table of transport.h. Apart from both, and
 * above them, so that neither includes the other. */
#ifndef STALLSCOPE_TRANSPORT_KIND_H
#define STALLSCOPE_TRANSPORT_KIND_H

#include "client/transport.h"

/* Which transport. AUTO: raw for http:// and https:// unless a proxy variable applies to
 * the target (http_proxy / https_proxy / all_proxy, upper-case too except HTTP_PROXY, not
 * excluded by no_proxy), then curl, which honours them. */
typedef enum transport_kind { TRANSPORT_AUTO = 0, TRANSPORT_RAW, TRANSPORT_CURL } transport_kind;

/* "auto" | "raw" | "curl". 0, or -1 with err. */
int transport_kind_parse(const char *text, transport_kind *out, char *err);
const char *transport_kind_name(transport_kind kind);
/* What AUTO means for this target, reading the environment's proxy variables; RAW and
 * CURL are returned as they are. */
transport_kind transport_kind_resolve(transport_kind kind, const char *base_url);
/* The factory: the transport `kind` (AUTO resolved as above) for opt. Free it with
 * out->destroy(out->impl). 0, or -1 with err (a target the raw transport cannot use: an
 * unknown scheme, a name that does not resolve, no TLS in this build). */
int transport_kind_create(transport_kind kind, const transport_options *opt, transport *out,
                          char *err);

#endif

#include "client/tls.h"

#include <stdio.h>
#include <stdlib.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/err.h"

struct tls_context {
    SSL_CTX *ctx;
};

struct tls_session {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl: the ciphertext in, and out */
};

/* OpenSSL's first queued error in words into out ("TLS failure" when none is queued); the
 * queue is cleared. */
static const char *error_text(char *out, size_t size)
{
    unsigned long e = ERR_get_error();
    if (!e) {
        snprintf(out, size, "TLS failure");
        return out;
    }
    ERR_error_string_n(e, out, size);
    ERR_clear_error();
    return out;
}

tls_context *tls_context_new(bool insecure, char *err)
{
    char why[160];
    tls_context *t = calloc(1, sizeof *t);
    if (!t) {
        err_set(err, "out of memory");
        return NULL;
    }
    if (!(t->ctx = SSL_CTX_new(TLS_client_method()))) {
        err_set(err, "TLS: %s", error_text(why, sizeof why));
        goto error;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    if (insecure) {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
        if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
            err_set(err, "TLS: no CA certificates: %s", error_text(why, sizeof why));
            goto error;
        }
    }
    const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(t->ctx, alpn, sizeof alpn);
    return t;
error:
    tls_context_free(t);
    return NULL;
}

void tls_context_free(tls_context *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

tls_session *tls_session_new(tls_context *ctx, const char *host)
{
    tls_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (!(s->ssl = SSL_new(ctx->ctx))) {
        free(s);
        return NULL;
    }
    s->rbio = BIO_new(BIO_s_mem());
    s->wbio = BIO_new(BIO_s_mem());
    if (!s->rbio || !s->wbio) {
        BIO_free(s->rbio);
        BIO_free(s->wbio);
        SSL_free(s->ssl);
        free(s);
        return NULL;
    }
    BIO_set_mem_eof_return(s->rbio, -1);   /* empty means "want more", not EOF */
    SSL_set_bio(s->ssl, s->rbio, s->wbio); /* the SSL owns them now */
    SSL_set_connect_state(s->ssl);
    SSL_set_tlsext_host_name(s->ssl, host);
    if (SSL_get_verify_mode(s->ssl) != SSL_VERIFY_NONE)
        SSL_set1_host(s->ssl, host);
    return s;
}

void tls_session_free(tls_session *s)
{
    if (!s)
        return;
    SSL_free(s->ssl);
    free(s);
}

int tls_session_put(tls_session *s, const char *data, size_t n)
{
    return BIO_write(s->rbio, data, (int)n) == (int)n ? 0 : -1;
}

int tls_session_handshake(tls_session *s, char *why, size_t why_size)
{
    if (SSL_is_init_finished(s->ssl))
        return TLS_DONE;
    const int rc = SSL_do_handshake(s->ssl);
    if (rc == 1)
        return TLS_DONE;
    const int e = SSL_get_error(s->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return TLS_AGAIN;
    const long verify = SSL_get_verify_result(s->ssl);
    if (verify != X509_V_OK)
        snprintf(why, why_size, "%s", X509_verify_cert_error_string(verify));
    else
        error_text(why, why_size);
    return TLS_FAILED;
}

int tls_session_read(tls_session *s, char *out, size_t size, char *why, size_t why_size)
{
    const int got = SSL_read(s->ssl, out, (int)size); /* the ciphertext is in the BIO */
    if (got > 0)
        return got;
    const int e = SSL_get_error(s->ssl, got);
    if (e == SSL_ERROR_WANT_READ)
        return TLS_AGAIN;
    if (e == SSL_ERROR_ZERO_RETURN)
        return TLS_CLOSED;
    error_text(why, why_size);
    return TLS_FAILED;
}

int tls_session_write(tls_session *s, const char *data, size_t n, char *why, size_t why_size)
{
    /* A memory BIO takes the whole request at once. */
    if (SSL_write(s->ssl, data, (int)n) > 0)
        return 0;
    error_text(why, why_size);
    return -1;
}

int tls_session_take(tls_session *s, buf *out)
{
    char chunk[16384];
    int n;
    while ((n = BIO_read(s->wbio, chunk, sizeof chunk)) > 0)
        if (buf_append(out, chunk, (size_t)n) != 0)
            return -1;
    return 0;
}

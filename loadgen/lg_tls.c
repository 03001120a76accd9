/*
 * lg_tls: client-side TLS with OpenSSL (see lg_tls.h); nl_transport.h walks through how a TLS
 * transport sits on netlib's seam.
 */
#include "lg_tls.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "netlib/nl_common.h"

/* --- the run's context --------------------------------------------------------------------- */

/* OpenSSL fills some of a certificate's derived fields on first use (its extensions' cache,
 * under the certificate's lock, read by later checks without it). The IO threads share the
 * store's CA certificates, so they are filled here, before any thread verifies with them. */
static void tls_store_warm(SSL_CTX *ctx)
{
    STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
    for (int i = 0; i < sk_X509_OBJECT_num(objs); i++) {
        X509 *x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));
        if (x)
            (void)X509_check_purpose(x, -1, 0);
    }
}

int lg_tls_ctx_new(lg_transport_t *t, const char *ca_file, char *err, size_t err_len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        snprintf(err, err_len, "cannot make a TLS context: %s",
                 ERR_reason_error_string(ERR_get_error()));
        ERR_clear_error();
        return -EINVAL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    /* Partial writes: netlib counts what was taken; moving buffer: it retries from wherever
     * its queue keeps the same bytes. Released buffers: an idle client holds none. */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    int loaded = ca_file && ca_file[0] ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
                                       : SSL_CTX_set_default_verify_paths(ctx);
    if (loaded != 1) {
        snprintf(err, err_len, "cannot load the CA certificates of %s: %s",
                 ca_file && ca_file[0] ? ca_file : "the system's store",
                 ERR_reason_error_string(ERR_get_error()));
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return -EINVAL;
    }
    SSL_CTX_set_verify(ctx, t->is_tls_insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    tls_store_warm(ctx);
    t->ssl_ctx = ctx;
    return 0;
}

void lg_tls_ctx_free(lg_transport_t *t)
{
    SSL_CTX_free(t->ssl_ctx);
    t->ssl_ctx = NULL;
}

/* --- one connection ------------------------------------------------------------------------ */

int lg_tls_conn_init(lg_tls_conn_t *s, const lg_transport_t *t, nl_conn_t *c)
{
    SSL *ssl = SSL_new(t->ssl_ctx);
    if (!ssl || SSL_set_fd(ssl, nl_conn_fd(c)) != 1)
        goto fail;
    SSL_set_connect_state(ssl);
    if (!t->is_tls_insecure) {
        /* The leaf must name the server: an IP SAN for an address, a DNS SAN otherwise. */
        int ok = t->is_server_name_ip
                     ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), t->server_name)
                     : SSL_set1_host(ssl, t->server_name);
        if (ok != 1)
            goto fail;
    }
    /* RFC 6066: SNI carries DNS names only, never an address. */
    if (!t->is_server_name_ip && SSL_set_tlsext_host_name(ssl, t->server_name) != 1)
        goto fail;
    s->ssl = ssl;
    return 0;
fail:
    ERR_clear_error();
    SSL_free(ssl);
    return -ENOMEM;
}

void lg_tls_conn_deinit(lg_tls_conn_t *s)
{
    SSL_free(s->ssl);
    s->ssl = NULL;
}

/* What a failed verification is called in the run's counts. */
static const char *verify_reason(long result)
{
    switch (result) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
    case X509_V_ERR_EMAIL_MISMATCH:
        return "TLS_CERT_NAME_MISMATCH";
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
        return "TLS_CERT_EXPIRED";
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_CERT_UNTRUSTED:
        return "TLS_CERT_UNTRUSTED";
    default:
        return "TLS_CERT_INVALID";
    }
}

/* The first failure of each kind is described once, for whoever reads stderr. */
enum { SAID_VERIFY, SAID_HANDSHAKE, SAID_KINDS };
static atomic_bool said[SAID_KINDS];

static bool is_first(int kind)
{
    return !atomic_exchange(&said[kind], true);
}

int lg_tls_conn_handshake(lg_tls_conn_t *s, const lg_transport_t *t, const char **reason)
{
    SSL *ssl = s->ssl;
    int rc = SSL_do_handshake(ssl);
    if (rc == 1)
        return NL_TRANSPORT_DONE;
    int e = SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_WANT_READ)
        return NL_TRANSPORT_WANT_READ;
    if (e == SSL_ERROR_WANT_WRITE)
        return NL_TRANSPORT_WANT_WRITE;
    unsigned long code = ERR_peek_error();
    ERR_clear_error();
    long verify = SSL_get_verify_result(ssl);
    if (!t->is_tls_insecure && verify != X509_V_OK) {
        *reason = verify_reason(verify);
        if (is_first(SAID_VERIFY))
            fprintf(stderr,
                    "herald-loadgen: TLS: the server's certificate failed verification: %s "
                    "(%s); give --tls-ca FILE with the CA that signed it and --tls-server-name "
                    "with a name it carries, or --tls-insecure to skip the checks\n",
                    X509_verify_cert_error_string(verify), *reason);
        return -EPROTO;
    }
    if (e == SSL_ERROR_SYSCALL && code == 0) {
        *reason = "TLS_HANDSHAKE_EOF"; /* the server closed during the handshake */
        return -ECONNRESET;
    }
    *reason = "TLS_HANDSHAKE_FAILED";
    const char *what = code ? ERR_reason_error_string(code) : NULL;
    if (is_first(SAID_HANDSHAKE))
        fprintf(stderr, "herald-loadgen: TLS handshake failed: %s%s\n",
                what ? what : "unknown error",
                ERR_GET_REASON(code) == SSL_R_WRONG_VERSION_NUMBER
                    ? " (does the server speak TLS on this port?)"
                    : "");
    return -EPROTO;
}

ssize_t lg_tls_conn_read(lg_tls_conn_t *s, void *buf, size_t len, bool *want_write)
{
    size_t n = 0;
    *want_write = false;
    int rc = SSL_read_ex(s->ssl, buf, len, &n);
    if (rc == 1)
        return (ssize_t)n;
    switch (SSL_get_error(s->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        return -EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        *want_write = true;
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0; /* close_notify */
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0)
            return 0; /* EOF without close_notify: the end of the stream all the same */
        ERR_clear_error();
        return -EIO;
    default:
        ERR_clear_error();
        return -EPROTO;
    }
}

/* Partial writes make SSL_write return after each record that went out (16 KiB at most), the
 * socket far from full; netlib takes a short count for a full socket and waits for an edge
 * that such a socket never sends. So it writes on until all is taken or the socket is full. */
ssize_t lg_tls_conn_write(lg_tls_conn_t *s, const void *buf, size_t len)
{
    size_t total = 0;
    while (total < len) {
        size_t n = 0;
        int rc = SSL_write_ex(s->ssl, (const char *)buf + total, len - total, &n);
        if (rc == 1) {
            total += n;
            continue;
        }
        int e = SSL_get_error(s->ssl, rc);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
            return total > 0 ? (ssize_t)total : -EAGAIN;
        ERR_clear_error();
        return total > 0 ? (ssize_t)total : -EPIPE;
    }
    return (ssize_t)total;
}

bool lg_tls_conn_has_pending(const lg_tls_conn_t *s)
{
    return SSL_pending(s->ssl) > 0;
}

int lg_tls_conn_shutdown(lg_tls_conn_t *s)
{
    if (!SSL_is_init_finished(s->ssl))
        return NL_TRANSPORT_DONE;
    int rc = SSL_shutdown(s->ssl);
    if (rc >= 0)
        return NL_TRANSPORT_DONE;
    int e = SSL_get_error(s->ssl, rc);
    ERR_clear_error();
    return e == SSL_ERROR_WANT_WRITE ? NL_TRANSPORT_WANT_WRITE : NL_TRANSPORT_DONE;
}

/* --- the "tls" transport ------------------------------------------------------------------- */

typedef struct tls_state_s {
    lg_tls_conn_t tls;
    const lg_transport_t *t;
    nl_timer_t *deadline; /* the handshake's, until it is done */
} tls_state_t;

static int tls_open(nl_conn_t *c, void *arg, bool is_client, void **state)
{
    NL_UNUSED(is_client);
    tls_state_t *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->t = arg;
    int rc = lg_tls_conn_init(&st->tls, st->t, c);
    if (rc == 0)
        rc = lg_transport_deadline_start(st->t, c, &st->deadline);
    if (rc < 0) {
        lg_tls_conn_deinit(&st->tls);
        free(st);
        return rc;
    }
    *state = st;
    return 0;
}

static int tls_handshake(nl_conn_t *c, void *state)
{
    tls_state_t *st = state;
    const char *reason = NULL;
    int rc = lg_tls_conn_handshake(&st->tls, st->t, &reason);
    if (rc == NL_TRANSPORT_DONE)
        lg_transport_deadline_stop(&st->deadline);
    else if (rc < 0)
        lg_transport_fail(st->t, c, reason);
    return rc;
}

static ssize_t tls_read(nl_conn_t *c, void *state, nl_buf_t *in)
{
    tls_state_t *st = state;
    /* A record holds at most 16 KiB: room for one, or the input is at its cap. */
    if (nl_buf_ensure_writable(in, 16384) < 0 && nl_buf_writable(in) == 0)
        return -ENOBUFS;
    bool want_write;
    ssize_t n =
        lg_tls_conn_read(&st->tls, nl_buf_begin_write(in), nl_buf_writable(in), &want_write);
    if (n > 0)
        nl_buf_has_written(in, (size_t)n);
    else if (want_write)
        nl_conn_transport_want_write(c); /* a read that must write first (a key update) */
    return n;
}

static ssize_t tls_writev(nl_conn_t *c, void *state, const struct iovec *iov, int iovcnt)
{
    tls_state_t *st = state;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++) {
        ssize_t n = lg_tls_conn_write(&st->tls, iov[i].iov_base, iov[i].iov_len);
        if (n < 0)
            return total > 0 ? (ssize_t)total : n;
        total += (size_t)n;
        if ((size_t)n < iov[i].iov_len)
            break;
    }
    if (iovcnt == 0 && SSL_want_read((SSL *)st->tls.ssl))
        nl_conn_transport_want_read(c); /* the write a read waited for is done */
    return (ssize_t)total;
}

static bool tls_has_pending(const nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    const tls_state_t *st = state;
    return lg_tls_conn_has_pending(&st->tls);
}

static int tls_shutdown(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    tls_state_t *st = state;
    return lg_tls_conn_shutdown(&st->tls);
}

static void tls_free(nl_conn_t *c, void *state)
{
    NL_UNUSED(c);
    tls_state_t *st = state;
    lg_transport_deadline_stop(&st->deadline);
    lg_tls_conn_deinit(&st->tls);
    free(st);
}

const nl_transport_t lg_tls_transport = {
    .name = "tls",
    .open = tls_open,
    .handshake = tls_handshake,
    .read = tls_read,
    .writev = tls_writev,
    .has_pending = tls_has_pending,
    .shutdown = tls_shutdown,
    .free = tls_free,
};

/*
 * lg_tls: the client side of TLS for herald-loadgen, with OpenSSL: the run's context (trust
 * store, TLS 1.2 and 1.3) and one SSL per connection on its socket. Used alone as the "tls"
 * transport (lg_tls_transport, declared in lg_transport.h) and under WebSocket for "wss"
 * (lg_ws.c calls the lg_tls_conn_* functions).
 *
 * Verification: the server's chain must lead to a CA of --tls-ca (or of the system's store
 * without it), and the leaf must name the server: --tls-server-name, else --host (an IP
 * address is checked against the certificate's IP SANs and sent without SNI; a DNS name is
 * sent as SNI and checked against its DNS SANs). --tls-insecure skips both. A handshake that
 * fails verification is reported with a reason that says which check failed
 * (TLS_CERT_UNTRUSTED, TLS_CERT_NAME_MISMATCH, TLS_CERT_EXPIRED, TLS_CERT_INVALID; anything
 * else TLS_HANDSHAKE_FAILED), and the first failure of each kind is described once on stderr
 * with OpenSSL's own words and what to do about it.
 *
 * Memory: SSL_MODE_RELEASE_BUFFERS, so an idle client holds no record buffers; no client
 * session cache (every connect is a full handshake, as a fleet of distinct devices would do).
 *
 * Thread: the context is made and freed on one thread before and after the run; a
 * connection's functions run on its loop thread. Ownership: lg_tls_conn_t is a value in the
 * caller's storage (lg_tls_conn_init/deinit).
 */
#ifndef HERALD_LOADGEN_LG_TLS_H
#define HERALD_LOADGEN_LG_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "lg_transport.h"
#include "netlib/nl_conn.h"

/* Makes t->ssl_ctx for t's settings, trusting the PEM certificates of ca_file (NULL or "": the
 * system's default store). Returns: 0; -EINVAL with a sentence in err. Thread: any. */
int lg_tls_ctx_new(lg_transport_t *t, const char *ca_file, char *err, size_t err_len);

/* Frees t->ssl_ctx, if any. Thread: once no connection uses it. */
void lg_tls_ctx_free(lg_transport_t *t);

typedef struct lg_tls_conn_s {
    void *ssl; /* SSL * on the connection's socket, in connect state */
} lg_tls_conn_t;

/* Prepares TLS on c's socket. Returns 0 or -ENOMEM. Thread: c's. */
int lg_tls_conn_init(lg_tls_conn_t *s, const lg_transport_t *t, nl_conn_t *c);

/* Frees the SSL (no close_notify). Idempotent. Thread: c's. */
void lg_tls_conn_deinit(lg_tls_conn_t *s);

/* One handshake step: NL_TRANSPORT_DONE, _WANT_READ, _WANT_WRITE, or a negative errno with
 * *reason set (a static string for the run's counts). Thread: c's. */
int lg_tls_conn_handshake(lg_tls_conn_t *s, const lg_transport_t *t, const char **reason);

/* SSL_read: bytes > 0, 0 at close_notify or EOF, -EAGAIN (*want_write set when it needs the
 * socket writable first), -errno. Thread: c's. */
ssize_t lg_tls_conn_read(lg_tls_conn_t *s, void *buf, size_t len, bool *want_write);

/* SSL_write, partial writes on: bytes taken (a short count when the socket filled), -EAGAIN
 * when none, -errno. A retry after -EAGAIN must start with the same bytes. Thread: c's. */
ssize_t lg_tls_conn_write(lg_tls_conn_t *s, const void *buf, size_t len);

/* Decrypted bytes wait inside OpenSSL (no epoll edge will say so). Thread: c's. */
bool lg_tls_conn_has_pending(const lg_tls_conn_t *s);

/* Sends close_notify: NL_TRANSPORT_DONE or NL_TRANSPORT_WANT_WRITE. Thread: c's. */
int lg_tls_conn_shutdown(lg_tls_conn_t *s);

#endif

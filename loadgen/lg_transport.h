/*
 * lg_transport: how herald-loadgen's clients reach herald: plain TCP, TLS (lg_tls), WebSocket
 * (lg_ws) or WebSocket over TLS, each a netlib transport (netlib/nl_transport.h) under every
 * nl_client of the fleet. herald's own transports (gateway/transport) are server side and stay
 * out of loadgen: these are the client halves, written against the protocol, not the server.
 *
 * One lg_transport_t per run, made on the main thread from the command line and shared by
 * every client on every loop thread as the transport's arg: it holds the OpenSSL client context
 * (certificate verification against --tls-ca, the name to check), the WebSocket request's Host
 * and the handshake deadline. A handshake that fails tells why through on_fail (a static
 * reason such as "TLS_CERT_UNTRUSTED") before netlib closes the connection: nl_client's retry
 * callback, which counts the failure, only gets an errno.
 *
 * Thread: lg_transport_new/free on one thread while no connection uses it; the ops on each
 * connection's loop thread; the struct is read-only in between (SSL_CTX is safe to share for
 * SSL_new). Ownership: the caller frees it with lg_transport_free after every client closed.
 * Usage: lg_transport_new(&t, &opts, err, sizeof err); nl_client_opts.transport =
 *        lg_transport_ops(t); .transport_arg = t; ... lg_transport_free(t).
 */
#ifndef HERALD_LOADGEN_LG_TRANSPORT_H
#define HERALD_LOADGEN_LG_TRANSPORT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "netlib/nl_conn.h"
#include "netlib/nl_timer.h"
#include "netlib/nl_transport.h"

typedef enum lg_transport_kind_e {
    LG_TRANSPORT_TCP = 0, /* herald's varint-delimited frames on a TCP stream */
    LG_TRANSPORT_WS = 1,  /* RFC 6455, one Frame per binary message, path /connection */
    LG_TRANSPORT_TLS = 2, /* the TCP stream inside TLS 1.2 or 1.3 */
    LG_TRANSPORT_WSS = 3, /* WebSocket inside TLS */
} lg_transport_kind_t;

/* A handshake's failure, for the run's counts: reason is a static string. */
typedef void (*lg_transport_fail_cb)(nl_conn_t *c, const char *reason);

typedef struct lg_transport_opts_s {
    lg_transport_kind_t kind;
    const char *host; /* the numeric address connected to: Host header, default name checked */
    uint16_t port;
    const char *tls_ca_file;       /* PEM CA certificates to trust; NULL or "": the system's */
    const char *tls_server_name;   /* SNI and the name the certificate must carry; NULL: host */
    bool is_tls_insecure;          /* no certificate verification at all */
    uint64_t handshake_timeout_ms; /* TLS and WebSocket handshake, from TCP connected on */
    lg_transport_fail_cb on_fail;  /* may be NULL */
} lg_transport_opts_t;

#define LG_TRANSPORT_NAME_MAX 256

typedef struct lg_transport_s {
    lg_transport_kind_t kind;
    void *ssl_ctx; /* SSL_CTX *, tls and wss only */
    char server_name[LG_TRANSPORT_NAME_MAX];
    bool is_server_name_ip; /* checked as an IP address (no SNI) rather than a DNS name */
    bool is_tls_insecure;
    char host_header[LG_TRANSPORT_NAME_MAX + 8]; /* WebSocket: "127.0.0.1:7400" */
    uint64_t handshake_timeout_ms;
    lg_transport_fail_cb on_fail;
} lg_transport_t;

/* "tcp", "ws", "tls" or "wss". Thread: any. (Inline, with the parser: lg_config uses them and
 * is linked without the transports by some tests.) */
static inline const char *lg_transport_name(lg_transport_kind_t kind)
{
    static const char *const names[] = {"tcp", "ws", "tls", "wss"};
    return (unsigned)kind <= LG_TRANSPORT_WSS ? names[kind] : "?";
}

/* Parses a transport name. Returns 0, or -EINVAL. Thread: any. */
static inline int lg_transport_parse(const char *text, lg_transport_kind_t *out)
{
    for (unsigned k = LG_TRANSPORT_TCP; k <= LG_TRANSPORT_WSS; k++) {
        if (strcmp(text, lg_transport_name((lg_transport_kind_t)k)) == 0) {
            *out = (lg_transport_kind_t)k;
            return 0;
        }
    }
    return -EINVAL;
}

/* Whether kind runs over TLS. Thread: any. */
static inline bool lg_transport_is_tls(lg_transport_kind_t kind)
{
    return kind == LG_TRANSPORT_TLS || kind == LG_TRANSPORT_WSS;
}

/* Makes the shared state for opts (for TLS: the client context, the trust store loaded).
 * Returns: 0; -ENOMEM; -EINVAL with a sentence in err (a CA file OpenSSL cannot read).
 * Thread: any, before the clients start. Ownership: free with lg_transport_free. */
int lg_transport_new(lg_transport_t **out, const lg_transport_opts_t *opts, char *err,
                     size_t err_len);

/* Frees t (NULL is fine). Thread: once no connection uses it. */
void lg_transport_free(lg_transport_t *t);

/* The netlib ops table for t's kind: NULL for plain TCP. Thread: any. */
const nl_transport_t *lg_transport_ops(const lg_transport_t *t);

/* --- shared by the transports (lg_tls.c, lg_ws.c) ------------------------------------------ */

/* Tells t's on_fail why c's handshake failed. Thread: c's. */
void lg_transport_fail(const lg_transport_t *t, nl_conn_t *c, const char *reason);

/* Starts c's handshake deadline: when it passes with c still CONNECTING, c is closed with
 * -ETIMEDOUT. *timer is set (NULL without a deadline). Returns 0 or -ENOMEM. Thread: c's. */
int lg_transport_deadline_start(const lg_transport_t *t, nl_conn_t *c, nl_timer_t **timer);

/* Stops and frees the deadline (idempotent; *timer becomes NULL). Thread: c's. */
void lg_transport_deadline_stop(nl_timer_t **timer);

extern const nl_transport_t lg_tls_transport; /* lg_tls.c */
extern const nl_transport_t lg_ws_transport;  /* lg_ws.c: ws and wss */

#endif

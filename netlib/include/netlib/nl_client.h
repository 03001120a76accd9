/*
 * nl_client: an outgoing TCP connection with a non-blocking connect, a connect timeout, retry
 * with exponential backoff and jitter, and optional reconnect after the connection closes.
 *
 * Thread: owner of the loop. Ownership: the client owns at most one nl_conn_t at a time
 * (netlib frees it); nl_client_close frees the client at the end of the iteration.
 * Usage: nl_client_new(&cl, loop, &opts); nl_client_connect(cl); on_connected fires with the
 *        connection; nl_client_close(cl) when done.
 */
#ifndef HERALD_NETLIB_NL_CLIENT_H
#define HERALD_NETLIB_NL_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_transport.h"

typedef struct nl_client_s nl_client_t;

/* Called when an attempt fails (status: -ECONNREFUSED, -ETIMEDOUT, ...) and whether another
 * attempt follows after delay_ms. May be NULL. */
typedef void (*nl_client_retry_cb)(nl_client_t *cl, int status, bool will_retry,
                                   uint64_t delay_ms);

typedef struct nl_client_opts_s {
    const char *host;          /* numeric IPv4/IPv6 address */
    uint16_t port;
    const char *source_host;   /* bind to this source address first; NULL for any */
    uint64_t connect_timeout_ms; /* 0 means 5000 */
    uint64_t retry_initial_ms;   /* first back-off; 0 means 100 */
    uint64_t retry_max_ms;       /* back-off cap; 0 means 10000 */
    int max_attempts;            /* per connect or reconnect round; 0 means unlimited */
    bool reconnect;              /* connect again (with back-off) after the connection closes */
    const nl_conn_cbs_t *cbs;    /* for the connection; must outlive the client */
    nl_client_retry_cb on_retry;
    void *arg;                   /* read back with nl_client_arg */
    /* The connection's transport (nl_transport.h) and its open arg; NULL is plain TCP. An
     * attempt is the connect and the handshake: a handshake that fails counts as a failed
     * attempt (on_retry, back-off) and the connection gets neither on_connected nor on_close. */
    const nl_transport_t *transport;
    void *transport_arg;
} nl_client_opts_t;

/* Returns: 0; -ENOMEM; -EINVAL for a bad address. Thread: owner. */
int nl_client_new(nl_client_t **out, nl_loop_t *loop, const nl_client_opts_t *opts);

/* Starts connecting. Returns 0, or -EALREADY. Callbacks: none before it returns. */
int nl_client_connect(nl_client_t *cl);

/* The current connection, or NULL while not connected. */
nl_conn_t *nl_client_conn(const nl_client_t *cl);
void *nl_client_arg(const nl_client_t *cl);

/* The client that made connection c, or NULL for a server-side connection. */
nl_client_t *nl_client_of(const nl_conn_t *c);

/* Stops retrying, closes the connection if any (on_close runs), and frees the client at the end
 * of the iteration. A pending attempt completes once via on_retry with -ECANCELED. Idempotent. */
void nl_client_close(nl_client_t *cl);

#endif

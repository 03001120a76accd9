/*
 * gw_transport_int.h: what the transport room's files share: the listener's layout and
 * counters (gw_listener.c), the handshake deadline, and the TLS layer's operations, which the
 * WebSocket transport calls for a wss connection (gw_tls.c, gw_ws.c, gw_ws_upgrade.c).
 * Private to the room.
 */
#ifndef HERALD_GATEWAY_TRANSPORT_GW_TRANSPORT_INT_H
#define HERALD_GATEWAY_TRANSPORT_GW_TRANSPORT_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "gw_transport.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_timer.h"
#include "netlib/nl_transport.h"

/* The WebSocket request's header cap: a browser's upgrade request is under 1 KiB. */
#define GW_WS_REQUEST_MAX 8192

/* Counters, one relaxed atomic each. */
typedef struct gw_listener_counters_s {
    _Atomic uint64_t handshaking;
    _Atomic uint64_t handshakes;
    _Atomic uint64_t handshake_failures[GW_HS_FAIL_REASONS];
    _Atomic uint64_t ws_errors[GW_WS_ERRS];
    _Atomic uint64_t ws_pings;
    _Atomic uint64_t tls_renegotiations;
    _Atomic uint64_t tls_ktls;
} gw_listener_counters_t;

struct gw_listener_s {
    nl_server_t *server; /* NULL once closed */
    bool is_closed;
    nl_server_stats_t final; /* the server's figures when it closed */
    gw_listener_kind_t kind;
    gw_tls_t *tls;         /* NULL: no TLS */
    char *allowed_origins; /* ws: the copied list */
    bool is_any_origin;    /* ws: "*" */
    uint16_t port;
    _Atomic uint32_t max_message_bytes;
    _Atomic uint64_t handshake_timeout_ms; /* read by each handshake as it starts */
    gw_listener_counters_t n;
    char name[16];
};

static inline void gw_listener_count(_Atomic uint64_t *c, int64_t delta)
{
    atomic_fetch_add_explicit(c, (uint64_t)delta, memory_order_relaxed);
}

/* --- the handshake deadline (gw_listener.c) -------------------------------------------------- */

/* A handshake in progress: its deadline and its place in the listener's figures. Embedded in
 * a transport's per-connection state, started by open, ended by gw_hs_end (done or failed)
 * or by the transport's free (the peer left, or the deadline closed it). */
typedef struct gw_hs_s {
    gw_listener_t *l;
    nl_conn_t *c;
    nl_timer_t *timer; /* NULL once ended */
    bool is_failed;    /* a failure was counted */
} gw_hs_t;

/* Starts the deadline of c's handshake and counts it as handshaking. Returns: 0; -ENOMEM. */
int gw_hs_start(gw_hs_t *hs, gw_listener_t *l, nl_conn_t *c);

/* The handshake ended: done (counted as a handshake) or failed for why (counted once).
 * Idempotent. */
void gw_hs_end(gw_hs_t *hs, bool is_done, gw_hs_fail_t why);

/* From the transport's free: a handshake not ended yet failed because the peer left (or the
 * deadline closed it, which counted it already). */
void gw_hs_free(gw_hs_t *hs);

/* --- TLS (gw_tls.c), the layer under a wss connection --------------------------------------- */

typedef struct gw_tls_conn_s gw_tls_conn_t;

/* A connection's TLS state, in server mode, on c's socket: no SSL yet (the handshake makes it
 * once the client's first record is in, see gw_tls.c). Returns NULL on ENOMEM. */
gw_tls_conn_t *gw_tls_conn_new(gw_listener_t *l, nl_conn_t *c);
void gw_tls_conn_free(gw_tls_conn_t *t);

/* One handshake step: NL_TRANSPORT_DONE / _WANT_READ / _WANT_WRITE, or -errno (a TLS failure
 * ends hs with its reason; -ECONNRESET, the peer gone, is left to the transport's free). */
int gw_tls_conn_handshake(gw_tls_conn_t *t, gw_hs_t *hs);

/* After the handshake: kernel TLS took the writes over (netlib writes to the fd again), or
 * it did not. */
void gw_tls_conn_after_handshake(gw_tls_conn_t *t, nl_conn_t *c);

/* Decrypted input into buf[0..len): bytes > 0, 0 at the end of the stream, -EAGAIN, -errno. */
ssize_t gw_tls_conn_read(gw_tls_conn_t *t, void *buf, size_t len);

/* Writes iov as nl_transport_t.writev does. */
ssize_t gw_tls_conn_writev(gw_tls_conn_t *t, const struct iovec *iov, int iovcnt);

bool gw_tls_conn_has_pending(const gw_tls_conn_t *t);

/* close_notify: NL_TRANSPORT_DONE or NL_TRANSPORT_WANT_WRITE. */
int gw_tls_conn_shutdown(gw_tls_conn_t *t);

/* The tls listener's transport table (arg: the listener). */
extern const nl_transport_t gw_tls_transport;

/* --- WebSocket (gw_ws.c) ---------------------------------------------------------------------- */

/* The ws listener's transport tables (arg: the listener): over plain TCP (output written by
 * netlib directly) and over TLS. */
extern const nl_transport_t gw_ws_transport;
extern const nl_transport_t gw_wss_transport;

/* --- the upgrade (gw_ws_upgrade.c) ------------------------------------------------------------ */

typedef struct gw_ws_upgrade_s gw_ws_upgrade_t;

gw_ws_upgrade_t *gw_ws_upgrade_new(void);
void gw_ws_upgrade_free(gw_ws_upgrade_t *u);

/* How many more bytes the request may have (the header cap less what came); read at most
 * that many before gw_ws_upgrade_feed. */
size_t gw_ws_upgrade_room(const gw_ws_upgrade_t *u);

/* n more bytes of the request (n <= gw_ws_upgrade_room), copied. Returns: 0 while the request
 * is incomplete; 1 when it is complete and acceptable (the 101 response is ready:
 * gw_ws_upgrade_response); a gw_hs_fail_t + 2 when it must be refused (the HTTP error
 * response is ready); -ENOMEM. */
int gw_ws_upgrade_feed(gw_ws_upgrade_t *u, const void *bytes, size_t n, const gw_listener_t *l);

/* The response to write: *len bytes; gw_ws_upgrade_wrote takes off what went out. */
const char *gw_ws_upgrade_response(const gw_ws_upgrade_t *u, size_t *len);
void gw_ws_upgrade_wrote(gw_ws_upgrade_t *u, size_t n);

/* Bytes that followed the request (the client's first frames): *len bytes. */
const char *gw_ws_upgrade_rest(const gw_ws_upgrade_t *u, size_t *len);

#endif

/*
 * gw_transport.h: the room's public header.
 *
 * transport: how clients reach a node. A listener is an nl_server on the node's IO loops with
 * the transport its connections speak, implementations of netlib's nl_transport_t seam:
 *
 *   tcp   plain TCP: netlib's own path (direct writes, io_uring batches).
 *   tls   TLS 1.2 and 1.3 with OpenSSL (gw_tls.c): a non-blocking handshake under a deadline,
 *         SSL_MODE_RELEASE_BUFFERS so an idle connection holds no record buffers, renegotiation
 *         refused, kernel TLS (kTLS) when asked for and the kernel offers it: then netlib's
 *         direct writes apply again. The certificate reloads (gw_tls_reload) without touching
 *         a connection: new handshakes use the new one.
 *   ws    WebSocket, RFC 6455 (gw_ws.c, gw_ws_upgrade.c), over tcp or tls (wss): the HTTP
 *         upgrade (path /connection, Origin allow-list, subprotocol herald.v1) parsed with
 *         libhttp-parser, Sec-WebSocket-Accept with OpenSSL, frames parsed with libwslay. Each
 *         binary message from the client carries one herald Frame: the transport hands it to
 *         the session with the varint length prefix the TCP stream has, so the session reads
 *         one input format whatever the transport. In the other direction the session and
 *         fan-out frame their output themselves (gw_ws_header): a server frame is unmasked, so
 *         a Push framed once is the same bytes for every WebSocket subscriber, and netlib
 *         writes them as it writes TCP. Pings are answered, a close frame is answered and ends
 *         the stream, and the orderly close sends a close frame with the code the session set
 *         (gw_ws_set_close). Protocol errors close with RFC 6455's codes.
 *
 * A handshake (TLS, the upgrade) runs before netlib calls the session's on_connected: it has
 * its own deadline (the listener's handshake_timeout_ms), is counted in the listener's figures
 * (handshaking now, done, failed by reason), and costs at most its header cap in memory.
 *
 * The descriptors a listener leaves to the rest of the process, and the bytes a client closed
 * for want of descriptors is sent (a "come back later" frame on tcp, an HTTP 503 on ws), are
 * the listener's too.
 *
 * Thread: gw_listener_new/close/free, gw_tls_new/reload/free on the accept loop's thread; the
 * connections' I/O on their IO loops (netlib's rule); gw_ws_set_close on the connection's
 * loop; gw_listener_stats, gw_listener_set_max_message and gw_listener_set_handshake_timeout
 * from any thread.
 * Ownership: a listener outlives its connections: gw_listener_close stops accepting, and
 * gw_listener_free runs once every IO loop has stopped. A gw_tls_t outlives the listeners
 * using it.
 */
#ifndef HERALD_GATEWAY_TRANSPORT_GW_TRANSPORT_H
#define HERALD_GATEWAY_TRANSPORT_GW_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_server.h"

/* Descriptors a listener leaves to the rest of the process at most: the admin server's
 * connections (gw_http_guard_mhd_limit: 72), its listener and a few to spare. */
#define GW_LISTENER_FD_RESERVE 80

/* --- TLS ---------------------------------------------------------------------------------- */

typedef struct gw_tls_s gw_tls_t;

typedef struct gw_tls_opts_s {
    const char *cert_file; /* PEM: the certificate, then its chain */
    const char *key_file;  /* PEM: the private key */
    bool is_ktls;          /* ask for kernel TLS (used only where the kernel offers it) */
} gw_tls_opts_t;

/* Loads a server certificate and key into a TLS context (TLS 1.2 to 1.3). On failure err (may
 * be NULL) gets a one-line reason. Returns: 0; -EINVAL (unreadable or mismatched files);
 * -ENOMEM. Thread: any. Ownership: free with gw_tls_free, after every listener using it. */
int gw_tls_new(gw_tls_t **out, const gw_tls_opts_t *opts, char *err, size_t err_len);

/* Loads the files again (a rotation): handshakes from now on use the new certificate, the
 * connections made with the old one carry on. On failure nothing changes. Returns: as
 * gw_tls_new. Thread: any. */
int gw_tls_reload(gw_tls_t *tls, const gw_tls_opts_t *opts, char *err, size_t err_len);

void gw_tls_free(gw_tls_t *tls);

/* Whether this kernel offers kernel TLS (the "tls" upper-layer protocol). Thread: any. */
bool gw_tls_kernel_offers_ktls(void);

/* --- WebSocket framing (server to client) ------------------------------------------------- */

/* The longest header of a server frame: 2 bytes, 8 of extended length, no mask. */
#define GW_WS_HEADER_MAX 10

/* Writes the header of an unmasked, final binary frame of payload_len bytes into out and
 * returns its length (2, 4 or 10). Thread: any. */
size_t gw_ws_header(uint8_t out[GW_WS_HEADER_MAX], size_t payload_len);

/* Close codes herald sends (RFC 6455 section 7.4; herald's own from 4000). */
#define GW_WS_CLOSE_NORMAL 1000
#define GW_WS_CLOSE_GOING_AWAY 1001
#define GW_WS_CLOSE_PROTOCOL_ERROR 1002
#define GW_WS_CLOSE_UNSUPPORTED_DATA 1003
#define GW_WS_CLOSE_MESSAGE_TOO_BIG 1009
#define GW_WS_CLOSE_INTERNAL_ERROR 1011
#define GW_WS_CLOSE_HERALD_BASE 4000 /* + Disconnect.code */

/* The code and reason of the close frame c's orderly close (nl_conn_shutdown) will send
 * (reason: at most 123 bytes, kept by pointer: a string that lives as long as the process).
 * Nothing for a connection that is not WebSocket. Thread: c's loop. */
void gw_ws_set_close(nl_conn_t *c, uint16_t code, const char *reason);

/* Sends that close frame now (nl_conn_send), for a connection about to be closed at once with
 * nl_conn_close, whose orderly close will therefore not run: a node stopped at once still tells
 * its WebSocket clients why. Nothing if c is not WebSocket, is still in its handshake, or has
 * sent its close frame already. Thread: c's loop. */
void gw_ws_close_now(nl_conn_t *c);

/* --- listeners ---------------------------------------------------------------------------- */

typedef enum gw_listener_kind_e {
    GW_LISTENER_TCP = 0, /* herald frames on the stream (tls when tls is set) */
    GW_LISTENER_WS = 1,  /* WebSocket (wss when tls is set) */
} gw_listener_kind_t;

/* Why a handshake failed (gw_transport_stats_t.handshake_failures). */
typedef enum gw_hs_fail_e {
    GW_HS_FAIL_TIMEOUT = 0, /* not done within handshake_timeout_ms */
    GW_HS_FAIL_CLOSED,      /* the peer left before it was done */
    GW_HS_FAIL_PLAINTEXT,   /* tls: the peer spoke plain text (an HTTP request, say) */
    GW_HS_FAIL_TLS,         /* tls: any other handshake error (version, cipher, certificate) */
    GW_HS_FAIL_BAD_REQUEST, /* ws: not a WebSocket upgrade request (400) */
    GW_HS_FAIL_TOO_LARGE,   /* ws: the request's header passed its cap (431) */
    GW_HS_FAIL_NOT_FOUND,   /* ws: another path than /connection (404) */
    GW_HS_FAIL_ORIGIN,      /* ws: an Origin not allowed (403) */
    GW_HS_FAIL_VERSION,     /* ws: a Sec-WebSocket-Version other than 13 (426) */
    GW_HS_FAIL_SUBPROTOCOL, /* ws: subprotocols offered, herald.v1 not among them (400) */
    GW_HS_FAIL_REASONS
} gw_hs_fail_t;

/* WebSocket close frames herald sent for a client's protocol error, by code. */
typedef enum gw_ws_err_e {
    GW_WS_ERR_PROTOCOL = 0, /* 1002: unmasked frame, reserved bits or opcode, bad sequence */
    GW_WS_ERR_TEXT,         /* 1003: a text message (herald speaks binary) */
    GW_WS_ERR_TOO_BIG,      /* 1009: a message over the frame limit */
    GW_WS_ERRS
} gw_ws_err_t;

/* A listener's figures. Counted as they happen (relaxed atomics: per connection, not per
 * message), read with gw_listener_stats, with what the listener is (which figures can move:
 * a metrics page leaves out those that cannot). */
typedef struct gw_transport_stats_s {
    bool is_ws;           /* WebSocket: ws_errors, ws_pings and the upgrade's failures apply */
    bool is_tls;          /* TLS: tls_* and the TLS handshake's failures apply */
    uint64_t handshaking; /* gauge: connections in their handshake now */
    uint64_t handshakes;  /* handshakes done */
    uint64_t handshake_failures[GW_HS_FAIL_REASONS];
    uint64_t ws_errors[GW_WS_ERRS];
    uint64_t ws_pings;           /* WebSocket pings answered */
    uint64_t tls_renegotiations; /* renegotiations refused (the connection closes) */
    uint64_t tls_ktls;           /* connections whose writes the kernel encrypts */
} gw_transport_stats_t;

typedef struct gw_listener_s gw_listener_t;

/* WebSocket settings of a listener. */
typedef struct gw_ws_opts_s {
    /* Origins a browser may connect from: "*" any; a comma-separated list of exact origins
     * ("https://app.example.com"); "" none (then only requests without Origin, which
     * browsers always send, are accepted). Copied. */
    const char *allowed_origins;
} gw_ws_opts_t;

/* What a listener is made of. */
typedef struct gw_listener_opts_s {
    const char *name; /* for logs and metrics: "tcp", "ws" */
    gw_listener_kind_t kind;
    gw_tls_t *tls;          /* NULL: no TLS */
    const gw_ws_opts_t *ws; /* kind WS only; copied */
    const char *host;       /* numeric address; NULL: 0.0.0.0 */
    uint16_t port;          /* 0: a free one (gw_listener_port) */
    bool reuseport;         /* each IO loop accepts on its own SO_REUSEPORT socket */
    nl_loop_t *accept_loop;
    nl_loop_t **io_loops;
    uint32_t n_io_loops;
    const nl_conn_cbs_t *cbs;      /* every accepted connection's; must outlive the listener */
    void *arg;                     /* nl_conn_ctx of every connection */
    size_t high_water_bytes;       /* per connection; 0 disables */
    size_t max_input_bytes;        /* per connection */
    uint32_t max_message_bytes;    /* ws: the largest message a client may send */
    uint64_t handshake_timeout_ms; /* tls and ws: the handshake's deadline */
    int max_fd;                    /* gw_listener_fd_line(); 0: no line */
    /* tcp: sent to a client closed for want of descriptors (a "come back later" frame, at
     * most NL_SERVER_REFUSAL_MAX bytes; may be empty). A ws listener answers HTTP 503. */
    const void *refusal;
    size_t refusal_len;
} gw_listener_opts_t;

/* The lowest descriptor number a client connection may not have: the process's RLIMIT_NOFILE
 * less GW_LISTENER_FD_RESERVE (at most a quarter of a small limit), or 0 when the limit is
 * unknown or unlimited. Logged (fd_reserve). Thread: any. */
int gw_listener_fd_line(void);

/* Starts a listener. Accepted descriptors at or above opts->max_fd are closed as under EMFILE,
 * after the refusal: without the reserve a crowd of clients up to the limit left
 * libmicrohttpd unable to accept its first connection, which it answers by busy-waiting (a
 * whole core, a log line per try, and no answer to /healthz until clients left).
 * Returns: 0 with *out listening; a bind error (logged as listen_failed); -ENOMEM.
 * Thread: the accept loop's. Ownership: gw_listener_close, then gw_listener_free. */
int gw_listener_new(gw_listener_t **out, const gw_listener_opts_t *opts);

/* The port it listens on. Thread: any. */
uint16_t gw_listener_port(const gw_listener_t *l);

/* Whether its connections are WebSocket (their output framed with gw_ws_header). */
bool gw_listener_is_ws(const gw_listener_t *l);

/* Stops accepting (idempotent); connections carry on. Thread: the accept loop's. */
void gw_listener_close(gw_listener_t *l);

/* Frees what its connections shared, once every IO loop has stopped. NULL is fine. */
void gw_listener_free(gw_listener_t *l);

/* Changes the largest message a WebSocket client may send (a reload). Thread: any. */
void gw_listener_set_max_message(gw_listener_t *l, uint32_t bytes);

/* Changes the handshake deadline (a reload of connect_timeout; 0: 10 s) for the connections
 * accepted from now on; handshakes under way keep theirs. Thread: any. */
void gw_listener_set_handshake_timeout(gw_listener_t *l, uint64_t timeout_ms);

/* Copies the listener's figures. Thread: any. */
void gw_listener_stats(const gw_listener_t *l, gw_transport_stats_t *out);

/* Adds its nl_server's figures (accepts, descriptor exhaustion) into out. Thread: the accept
 * loop's. */
void gw_listener_server_stats(const gw_listener_t *l, nl_server_stats_t *out);

/* Static snake_case labels ("timeout", "too_big"). Thread: any. */
const char *gw_hs_fail_str(gw_hs_fail_t r);
const char *gw_ws_err_str(gw_ws_err_t e);

#endif

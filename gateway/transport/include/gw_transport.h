/*
 * gw_transport.h: the room's public header.
 *
 * transport: how clients reach a node. A listener is an nl_server on the node's IO loops with
 * the transport its connections speak (nl_transport.h's seam: plain TCP today; TLS and
 * WebSocket next), the descriptors it must leave to the rest of the process, and the bytes a
 * client closed for want of descriptors is sent. The session above never sees the difference:
 * it reads frames from the input buffer and queues frames for output, whatever carries them.
 *
 * Thread: gw_listener_new on the accept loop's thread, before it runs. The connections' I/O on
 * their IO loops (netlib's rule). Ownership: the caller closes the server (nl_server_close).
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
 * connections (libmicrohttpd's limit, 64), its listener and a few to spare. */
#define GW_LISTENER_FD_RESERVE 80

/* What a listener is made of. */
typedef struct gw_listener_opts_s {
    const char *name; /* for logs: "client" */
    const char *host; /* numeric address; NULL: 0.0.0.0 */
    uint16_t port;    /* 0: a free one (nl_server_port) */
    bool reuseport;   /* each IO loop accepts on its own SO_REUSEPORT socket */
    nl_loop_t *accept_loop;
    nl_loop_t **io_loops;
    uint32_t n_io_loops;
    const nl_conn_cbs_t *cbs; /* every accepted connection's; must outlive the server */
    void *arg;                /* nl_conn_ctx of every connection */
    size_t high_water_bytes;  /* per connection; 0 disables */
    size_t max_input_bytes;   /* per connection */
    /* Sent to a client closed for want of descriptors (a "come back later" frame), at most
     * NL_SERVER_REFUSAL_MAX bytes; may be empty. */
    const void *refusal;
    size_t refusal_len;
} gw_listener_opts_t;

/* Starts a listener of plain TCP connections. Accepted descriptors at or above the process's
 * RLIMIT_NOFILE less GW_LISTENER_FD_RESERVE (at most a quarter of a small limit) are closed as
 * under EMFILE, after the refusal: without the reserve a crowd of clients up to the limit left
 * libmicrohttpd unable to accept its first connection, which it answers by busy-waiting (a
 * whole core, a log line per try, and no answer to /healthz until clients left).
 * Returns: 0 with *out listening; a bind error (logged as listen_failed); -ENOMEM.
 * Thread: the accept loop's. Ownership: close *out with nl_server_close. */
int gw_listener_new(nl_server_t **out, const gw_listener_opts_t *opts);

#endif

/*
 * nl_server: a listening TCP server. The accept loop accepts until EAGAIN and hands each
 * connection round-robin to one of the IO loops (muduo TcpServer + EventLoopThreadPool), or,
 * in SO_REUSEPORT mode, every IO loop accepts on its own socket.
 *
 * Descriptor exhaustion (EMFILE/ENFILE): the server keeps one spare descriptor; when accept
 * fails for lack of descriptors it closes the spare, accepts and closes the pending connection
 * (so the peer sees a clean close instead of a hang), stops accepting for a short back-off, and
 * re-opens the spare. It neither spins nor dies, and serves again once descriptors free up.
 * Logged once per state change (ev=emfile_enter / ev=emfile_leave). With opts.max_fd the same
 * happens before the process runs out: an accepted descriptor numbered max_fd or more counts
 * as exhaustion, so the descriptors above the line stay free for the rest of the process.
 *
 * Thread: new/start/close on the accept loop's owner thread. Connections are created on their
 * IO loop's thread and their callbacks run there.
 * Ownership: the server owns its listening sockets; netlib owns the connections.
 */
#ifndef HERALD_NETLIB_NL_SERVER_H
#define HERALD_NETLIB_NL_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_conn.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_transport.h"

typedef struct nl_server_s nl_server_t;

/* Called on the IO loop's thread for each accepted connection before on_connected; return
 * false to refuse it (it is then closed without callbacks). May be NULL. */
typedef bool (*nl_server_accept_cb)(nl_loop_t *io_loop, int fd, void *arg);

typedef struct nl_server_opts_s {
    const char *host;       /* numeric IPv4/IPv6 address; NULL means 0.0.0.0 */
    uint16_t port;          /* 0 picks a free port: see nl_server_port */
    int backlog;            /* 0 means SOMAXCONN */
    nl_loop_t *accept_loop; /* required */
    nl_loop_t **io_loops;   /* connections go round-robin to these; none: the accept loop */
    size_t io_loop_count;
    bool reuseport;           /* each IO loop accepts on its own SO_REUSEPORT socket */
    const nl_conn_cbs_t *cbs; /* for every accepted connection; must outlive the server */
    nl_server_accept_cb on_accept;
    void *arg;               /* passed to on_accept; read it back with nl_conn_ctx(c) */
    size_t high_water_bytes; /* applied to each connection; 0 disables */
    size_t max_input_bytes;  /* applied to each connection; 0 means the buffer default */
    int max_fd; /* > 0: an accepted descriptor >= this is closed as under EMFILE; 0: no line */
    /* Bytes sent to a connection closed for lack of descriptors, just before the close (one
     * non-blocking send, best effort): a protocol's "server full, come back later", so the
     * client backs off instead of reconnecting at once. Copied; at most NL_SERVER_REFUSAL_MAX. */
    const void *refusal;
    size_t refusal_len;
    /* The connections' transport (TLS, WebSocket: nl_transport.h) and its open arg; NULL is
     * plain TCP. Both must outlive the server and its connections. The refusal above is
     * plain bytes on the socket, whatever the transport. */
    const nl_transport_t *transport;
    void *transport_arg;
} nl_server_opts_t;

#define NL_SERVER_REFUSAL_MAX 128

/* Binds and listens (SO_REUSEADDR). Returns: 0; -EADDRINUSE, -EACCES, -EINVAL (also a refusal
 * over NL_SERVER_REFUSAL_MAX), -ENOMEM.
 * Thread: accept loop owner. */
int nl_server_new(nl_server_t **out, const nl_server_opts_t *opts);

/* Starts accepting. Idempotent. Thread: accept loop owner. */
int nl_server_start(nl_server_t *s);

/* Stops accepting (the listening socket stays bound) and resumes. Thread: accept loop owner. */
void nl_server_pause(nl_server_t *s);

/* The bound port (useful with port 0). Thread: any. */
uint16_t nl_server_port(const nl_server_t *s);

/* Accept figures. */
typedef struct nl_server_stats_s {
    uint64_t accepted;
    uint64_t refused;       /* on_accept returned false */
    uint64_t emfile_events; /* times descriptor exhaustion was hit */
} nl_server_stats_t;
void nl_server_get_stats(const nl_server_t *s, nl_server_stats_t *out);

/* Closes the listening socket(s) and frees the server at the end of the iteration. Accepted
 * connections stay open. In reuseport mode the per-loop sockets are closed on their loops.
 * Thread: accept loop owner. */
void nl_server_close(nl_server_t *s);

#endif

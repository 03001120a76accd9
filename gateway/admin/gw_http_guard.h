/*
 * gw_http_guard: what keeps the admin HTTP server's few connections (libmicrohttpd's, 64 by
 * default) from being held by clients that do not use them, so that /healthz, /readyz and a
 * Prometheus scrape always get one. Two parts, on one list of the connections libmicrohttpd
 * announces:
 *
 * Deadlines. A connection must deliver each request's header within header_timeout_ms and
 * the whole request (header and body) within request_timeout_ms, counted from its accept or
 * from its previous answer; one that does not is cut off. libmicrohttpd's own timeout is for
 * inactivity only, so a client that trickled a byte now and then held a connection for as
 * long as it liked. The clock stops once the request is complete and with its handler
 * (gw_http_guard_stop): a request waiting for herald's IO loops is the server's time, not the
 * client's. It runs again after the answer (gw_http_guard_restart), for the next request on a
 * kept-alive connection. A new connection that had not sent a whole request header first gets
 * "408 Request Timeout" (nothing else can be on its way to the client then); a kept-alive one
 * is just closed, as an idle one would be (a 408 there could cross the client's next
 * request). A thread of its own checks the deadlines, every tenth of the shorter timeout
 * (50 ms to 1 s).
 *
 * Admission. Deadlines alone leave the port to whoever reconnects fastest: 64 idle
 * connections, renewed as they are cut, kept every probe in the listen backlog. So the guard
 * decides at accept time (libmicrohttpd's connection limit is set a little above
 * max_connections, so that it keeps accepting and the guard sees every newcomer):
 *   - A source address has at most max_per_address connections. A newcomer over that makes
 *     the oldest sheddable connection from the same address give way, so one address cannot
 *     push anybody else out, yet a prober sharing an address with a flood still gets in.
 *     (With none of its own to shed, all serving authenticated requests, the newcomer is
 *     judged by the total alone.)
 *   - Over max_connections in all, a sheddable connection of the address that holds the most
 *     gives way, the oldest of them.
 *   - With nothing to shed, the newcomer is refused: 503 and closed.
 * Sheddable is every connection but one serving an authenticated request (API key valid,
 * from its header until its answer is sent). Idle ones, half-sent requests, and requests to
 * the public paths (answered at once) are all sheddable; "oldest" is the one accepted or last
 * answered longest ago. Authenticated requests may hold at most max_connections -
 * GW_HTTP_GUARD_PROBE_RESERVE connections (gw_http_guard_trust refuses the next one, which
 * gw_http answers 503).
 *
 * Why a probe gets through: at least GW_HTTP_GUARD_PROBE_RESERVE connections are always free
 * or sheddable, so a probe is never refused; once accepted it is shed only if it is the
 * oldest sheddable connection of the biggest holder before its request header is in. A probe
 * is one connection, and sends its request right after connecting: a flood from other
 * addresses always holds more and gives way first, and one from its own address would have
 * to bring max_per_address newer connections in before the probe's first packet of data.
 * A connection cut, shed or refused (shutdown(2)) stays listed, not counted, until
 * libmicrohttpd closes it in its next pass; a shed one that had sent no request header gets a
 * 503 first.
 *
 * Thread: gw_http_guard_new/free on the owner; the notify callback and the request hooks on
 * libmicrohttpd's thread; set_timeouts and stats on any. State is guarded by one mutex; a
 * descriptor is only touched under it and only between the connection's STARTED and CLOSED
 * notifications, which libmicrohttpd sends before it closes the socket, so the number is never
 * one reused by another socket.
 * Ownership: the owner frees the guard after libmicrohttpd has stopped (every connection
 * closed).
 */
#ifndef HERALD_GATEWAY_GW_HTTP_GUARD_H
#define HERALD_GATEWAY_GW_HTTP_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include <microhttpd.h>

typedef struct gw_http_guard_s gw_http_guard_t;

/* Connections that authenticated requests may never take: see the admission rules above. */
#define GW_HTTP_GUARD_PROBE_RESERVE 4u

typedef struct gw_http_guard_opts_s {
    uint64_t header_timeout_ms;  /* 0: 2 s (at most request_timeout_ms in effect) */
    uint64_t request_timeout_ms; /* 0: 10 s */
    unsigned max_connections;    /* connections kept at once; 0: 64 */
    unsigned max_per_address;    /* of those, from one source address; 0: 32 */
} gw_http_guard_opts_t;

/* Counters since the guard was made, read with relaxed loads. */
typedef struct gw_http_guard_stats_s {
    uint64_t timed_out; /* cut off by a deadline (a kept-alive one gone idle is not counted) */
    uint64_t shed;      /* gave way to a newcomer */
    uint64_t refused;   /* newcomers refused with nothing to shed */
    uint64_t busy;      /* authenticated requests refused past the reserve (gw_http_guard_trust) */
} gw_http_guard_stats_t;

/* Creates a guard and starts its thread.
 * Returns: 0; -EINVAL (max_per_address or the reserve above max_connections); -ENOMEM;
 *          -errno from pthread_create. Thread: owner.
 * Ownership: *out is the caller's; gw_http_guard_free. */
int gw_http_guard_new(gw_http_guard_t **out, const gw_http_guard_opts_t *opts);

/* Stops the thread and frees g. NULL is fine. Call after MHD_stop_daemon, once nothing reads
 * gw_http_guard_stats any more. Thread: owner. */
void gw_http_guard_free(gw_http_guard_t *g);

/* The connection limit to give libmicrohttpd (MHD_OPTION_CONNECTION_LIMIT): max_connections
 * plus room for connections cut but not yet closed. Thread: any. */
unsigned gw_http_guard_mhd_limit(const gw_http_guard_t *g);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback; cls is the guard. Admits (or sheds
 * for, or refuses) a new connection, and forgets a closed one. Thread: MHD's. */
void gw_http_guard_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                 enum MHD_ConnectionNotificationCode toe);

/* The current request's headers arrived (no 408 for it from now on; the request deadline runs
 * on for the body). Thread: MHD's. */
void gw_http_guard_headers(gw_http_guard_t *g, struct MHD_Connection *conn);

/* The current request carries a valid API key: its connection is not shed until the answer
 * is sent. Returns: true; false when authenticated requests already hold max_connections -
 * GW_HTTP_GUARD_PROBE_RESERVE connections (answer it 503; the connection stays sheddable).
 * Thread: MHD's. */
bool gw_http_guard_trust(gw_http_guard_t *g, struct MHD_Connection *conn);

/* The current request is complete and with its handler: the clock stops. Thread: MHD's. */
void gw_http_guard_stop(gw_http_guard_t *g, struct MHD_Connection *conn);

/* The request was answered: the clock restarts for the next one, which is not trusted until
 * it shows its key. Thread: MHD's. */
void gw_http_guard_restart(gw_http_guard_t *g, struct MHD_Connection *conn);

/* Changes the timeouts for clocks that (re)start from now on; those running keep theirs. The
 * checking tick follows. 0 leaves a value as it is. Thread: any. */
void gw_http_guard_set_timeouts(gw_http_guard_t *g, uint64_t header_timeout_ms,
                                uint64_t request_timeout_ms);

/* Copies the counters into *out. Thread: any. */
void gw_http_guard_stats(const gw_http_guard_t *g, gw_http_guard_stats_t *out);

#endif

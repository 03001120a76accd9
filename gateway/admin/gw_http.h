/*
 * gw_http: the admin HTTP server, libmicrohttpd running in its own thread.
 *
 * The caller registers routes (method + exact path → handler) and starts the server. Each
 * request is authenticated, routed and its body collected (up to max_body_bytes) before the
 * handler runs; the handler must then answer it exactly once with gw_http_respond(), either
 * before it returns or later from any thread. Answering later is the normal case for herald:
 * the handler posts work into the IO loops and the last loop to reply answers. Meanwhile the
 * connection is suspended (MHD_suspend_connection) and costs no CPU; gw_http_respond()
 * resumes it.
 *
 * Answers gw_http gives by itself, each with a JSON body {"error": "..."}:
 *   400  the request's body could end in two places: Content-Length given twice with different
 *        values, or beside Transfer-Encoding (then closed; the same value twice is accepted).
 *   401  X-Api-Key missing or wrong on any path but a public one (compared in constant time,
 *        on SHA-256 digests so the key length does not leak either). Without X-Api-Key,
 *        `Authorization: Bearer KEY` carries the key instead (Prometheus). With no api_key
 *        configured every non-public request gets 401. Unknown paths need the key too, so the
 *        route table does not leak to strangers.
 *   404  no route has this path.          405  the path exists for other methods (Allow: ...).
 *   413  the body exceeds max_body_bytes.  503  the server stopped while a request waited.
 *   414  (URL) / 431 (headers): the request head passes 32 KiB, the memory each connection
 *        gets; then closed.
 *   408  a new connection did not deliver its request header within header_timeout_ms (then
 *        closed; see gw_http_guard.h: a request must arrive whole within request_timeout_ms).
 *   503  "admin connections full": a new connection over the per-address or total cap, with no
 *        connection to shed for it (see gw_http_guard.h; then closed). "admin port busy":
 *        authenticated requests hold every connection but the probes' reserve.
 * /healthz is always public: a route registered for it is public, and without one gw_http
 * answers 200 {"status":"ok"} itself. gw_http_route_public() makes other paths public
 * (/readyz for load balancers, say).
 *
 * Thread: gw_http_new, gw_http_route*, gw_http_start, gw_http_stop and gw_http_free are for
 * the owning thread. Handlers run on the server's one internal thread, one at a time, so they
 * must be quick: post the work elsewhere and return. gw_http_respond is safe from any thread.
 * Ownership: the caller owns gw_http_t. A request is gw_http's: it stays valid from the
 * handler call until the caller's gw_http_respond() returns, and not a moment longer.
 * Logging: ev=http_listening on start, ev=http_error for libmicrohttpd's own complaints; never
 * the API key or bodies.
 */
#ifndef HERALD_GATEWAY_GW_HTTP_H
#define HERALD_GATEWAY_GW_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw_http_s gw_http_t;
typedef struct gw_http_req_s gw_http_req_t;

/* Handles one request; must lead to exactly one gw_http_respond(req, ...), now or later. */
typedef void (*gw_http_handler_cb)(gw_http_req_t *req, void *arg);

typedef struct gw_http_opts_s {
    const char *host;            /* bind address or name; NULL: "127.0.0.1" */
    uint16_t port;               /* 0: any free port (see gw_http_port) */
    const char *api_key;         /* NULL or "": every non-public request answers 401 */
    size_t max_body_bytes;       /* 0: 1 MiB */
    unsigned max_connections;    /* kept at once (gw_http_guard.h); 0: 64 */
    unsigned max_per_address;    /* of those, from one source address; 0: 32 (at most the above) */
    unsigned timeout_s;          /* libmicrohttpd's inactivity timeout; 0: 30 */
    uint64_t request_timeout_ms; /* each request must arrive whole within this; 0: 10 s */
    uint64_t header_timeout_ms;  /* and its header within this; 0: 2 s */
} gw_http_opts_t;

/* Counters since start, read with relaxed loads. */
typedef struct gw_http_stats_s {
    uint64_t requests;     /* requests whose headers arrived */
    uint64_t unauthorized; /* 401 */
    uint64_t not_found;    /* 404 and 405 */
    uint64_t too_large;    /* 413 */
    uint64_t suspended;    /* handlers that answered after returning */
    uint64_t pending;      /* requests waiting for gw_http_respond right now */
    uint64_t bad_framing;  /* 400 for an ambiguous body length */
    uint64_t timed_out;    /* cut off by the header or request deadline (not kept-alive idle) */
    uint64_t shed;         /* connections that gave way to a newcomer at a cap */
    uint64_t refused;      /* newcomers refused at a cap with nothing to shed */
    uint64_t busy;         /* authenticated requests answered 503 past the probes' reserve */
} gw_http_stats_t;

/* Creates a server (not yet listening) with a copy of opts.
 * Returns: 0; -EINVAL (bad opts: max_per_address above max_connections, or max_connections
 *          at most GW_HTTP_GUARD_PROBE_RESERVE, 4); -ENOMEM. Thread: owner. Ownership: *out is the
 * caller's, freed with gw_http_free(). */
int gw_http_new(gw_http_t **out, const gw_http_opts_t *opts);

/* Registers handler for method ("GET", "POST", ...) on the exact path (no query string; the
 * path must start with '/'). Strings are copied. Register before gw_http_start.
 * Returns: 0; -EINVAL; -EEXIST (same method and path); -ENOSPC (64 routes); -EBUSY (started).
 * Thread: owner. */
int gw_http_route(gw_http_t *srv, const char *method, const char *path, gw_http_handler_cb handler,
                  void *arg);

/* As gw_http_route, for a path that needs no API key. Thread: owner. */
int gw_http_route_public(gw_http_t *srv, const char *method, const char *path,
                         gw_http_handler_cb handler, void *arg);

/* Binds host:port and starts the server thread.
 * Returns: 0; -EADDRINUSE, -EADDRNOTAVAIL, -EACCES or another -errno from binding; -EINVAL
 *          (host does not resolve); -EBUSY (already started). Thread: owner. Callbacks:
 *          handlers may run before this returns. */
int gw_http_start(gw_http_t *srv);

/* Returns the bound port (useful after port 0), or 0 before start. Thread: any. */
uint16_t gw_http_port(const gw_http_t *srv);

/* Changes the body limit and the deadlines of a running server (a reload): requests whose
 * headers arrive from now on get the new body limit, and connections whose clock (re)starts
 * from now on the new deadlines. 0 leaves a value as it is.
 * Thread: any (the owner's, in herald), once gw_http_start returned 0. */
void gw_http_set_limits(gw_http_t *srv, size_t max_body_bytes, uint64_t request_timeout_ms,
                        uint64_t header_timeout_ms);

/* Copies the counters into *out. Thread: any. */
void gw_http_stats(const gw_http_t *srv, gw_http_stats_t *out);

/* Stops the server: requests still waiting for gw_http_respond are answered 503 (their later
 * gw_http_respond is then accepted and discarded), the listener and every connection close,
 * the thread is joined. Idempotent. Thread: owner; never from a handler. */
void gw_http_stop(gw_http_t *srv);

/* Stops (if needed) and frees the server. NULL is fine. Requests answered 503 by the stop
 * remain valid for their late gw_http_respond. Thread: owner; never from a handler. */
void gw_http_free(gw_http_t *srv);

/* The request's method and path (without the query string). Valid until gw_http_respond.
 * Thread: any. Ownership: gw_http's. */
const char *gw_http_req_method(const gw_http_req_t *req);
const char *gw_http_req_path(const gw_http_req_t *req);

/* A query argument ("?limit=10" → "10"; "" for "?flag"), or NULL when absent.
 * Thread: the handler call only (it reads libmicrohttpd's connection); copy what you need
 * before answering later. Ownership: libmicrohttpd's. */
const char *gw_http_req_query(const gw_http_req_t *req, const char *key);

/* As gw_http_req_query, and *len gets the value's length: a value decoded from "%00" holds a
 * NUL, where the string would end for strlen and the rest would go unseen. */
const char *gw_http_req_query_n(const gw_http_req_t *req, const char *key, size_t *len);

/* A request header, case-insensitive name, or NULL when absent. Same rules as
 * gw_http_req_query. */
const char *gw_http_req_header(const gw_http_req_t *req, const char *name);

/* The request body, NUL-terminated for convenience (the NUL is not counted in *len); "" with
 * *len 0 when there is none. Valid until gw_http_respond. Thread: any. Ownership: gw_http's. */
const char *gw_http_req_body(const gw_http_req_t *req, size_t *len);

/* Answers req with status, a Content-Type (NULL: "application/json") and body[0..len) (copied).
 * After it returns, req is gone.
 * Returns: 0; -ENOMEM (req is then answered 500 if possible, and still gone); 0 as well when
 *          gw_http_stop already answered req (the answer is discarded).
 * Thread: any, once per request. */
int gw_http_respond(gw_http_req_t *req, unsigned status, const char *content_type, const void *body,
                    size_t len);

/* As gw_http_respond, with more response headers: headers is a NULL-terminated list of name,
 * value pairs (copied; NULL for none), e.g. a Content-Security-Policy for a page.
 * Returns: as gw_http_respond (a header libmicrohttpd refuses counts as -ENOMEM). Thread: any,
 * once per request. */
int gw_http_respond_headers(gw_http_req_t *req, unsigned status, const char *content_type,
                            const char *const *headers, const void *body, size_t len);

/* Answers req with status and {"error": "<message>"} (message JSON-escaped). As
 * gw_http_respond. Thread: any, once per request. */
int gw_http_respond_error(gw_http_req_t *req, unsigned status, const char *message);

#endif

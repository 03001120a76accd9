/*
 * gw_http: routing, API-key checks, body collection and asynchronous answers on top of
 * libmicrohttpd (0.9.75) with its internal polling thread.
 *
 * libmicrohttpd calls on_access several times per request: once when the headers are in,
 * once per chunk of body, once more when the body is complete, and once more after each
 * resume. A request's state (req_state_t) says which of these we are in.
 *
 * Asynchronous answers. When a handler returns without answering, the connection is
 * suspended; gw_http_respond() stores the answer and resumes it, and the next on_access call
 * queues the stored answer. Two locks make this race-free:
 *   - srv->lock guards srv->pending (the suspended requests) and srv->is_stopping;
 *   - req->lock guards req->state and req->response.
 * Order: srv->lock, then req->lock, then libmicrohttpd's own mutexes (inside suspend and
 * resume). The suspend happens under req->lock, so a gw_http_respond() racing on another
 * thread cannot resume a connection that is not yet suspended, which libmicrohttpd forbids.
 *
 * Lifetime. A request carries two references once its handler runs: libmicrohttpd's, dropped
 * in on_completed, and the responder's, dropped at the end of gw_http_respond(). The request
 * never touches srv from gw_http_respond(), so an answer that arrives after gw_http_free()
 * (for a request the stop answered 503) is safe.
 */
#include "gw_http.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "gw_http_guard.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

#define MAX_ROUTES 64
#define DIGEST_BYTES 32
#define ERROR_BODY_MAX 512
#define STOP_DRAIN_S 2    /* how long gw_http_stop waits for resumed requests */
#define HTTP_LOG_PER_S 10 /* libmicrohttpd complaints logged per second (see on_mhd_log) */
#define DEFER_ACCEPT_S 1  /* TCP_DEFER_ACCEPT: see defer_accept */
/* libmicrohttpd's memory per connection (its default, stated so the bound is ours): a request
 * head past it is answered 414 or 431 and the connection closed. */
#define CONN_MEMORY_BYTES (32u * 1024)

typedef struct route_s {
    char method[16];
    char *path;
    gw_http_handler_cb handler;
    void *arg;
    bool is_public;
} route_t;

typedef enum req_state_e {
    REQ_BODY,       /* headers accepted, body (if any) arriving */
    REQ_IN_HANDLER, /* the handler is running or has returned; not suspended */
    REQ_SUSPENDED,  /* waiting for gw_http_respond */
    REQ_DONE,       /* an answer was queued with libmicrohttpd */
} req_state_t;

struct gw_http_req_s {
    struct MHD_Connection *conn;
    const route_t *route;
    int refs; /* atomic */
    pthread_mutex_t lock;
    req_state_t state;             /* req->lock */
    struct MHD_Response *response; /* req->lock: stored answer not yet queued */
    unsigned status;               /* req->lock */
    char method[16];
    char *path;
    char *body;
    size_t body_len;
    size_t body_cap;
    bool is_too_big;
    gw_http_req_t *prev; /* srv->pending links, srv->lock */
    gw_http_req_t *next;
    bool is_pending;
    bool is_draining; /* srv->lock: answered 503 by the stop, not yet completed */
};

struct gw_http_s {
    gw_http_opts_t opts;
    char host[256];
    bool has_key;
    unsigned char key_digest[DIGEST_BYTES];
    route_t routes[MAX_ROUTES];
    size_t n_routes;
    struct MHD_Daemon *daemon;
    gw_http_guard_t *guard; /* from the first start */
    uint16_t port;
    pthread_mutex_t lock;
    pthread_cond_t drained; /* signalled, while stopping, as requests leave */
    gw_http_req_t *pending; /* srv->lock */
    size_t n_draining;      /* srv->lock: 503s sent by the stop, not yet completed */
    bool is_stopping;       /* srv->lock */
    /* Counters, relaxed atomics (written on the server thread, read anywhere). */
    uint64_t n_requests;
    uint64_t n_unauthorized;
    uint64_t n_not_found;
    uint64_t n_too_large;
    uint64_t n_bad_framing;
    uint64_t n_suspended;
    uint64_t n_pending;
    /* on_mhd_log's rate limit, guarded by log_lock. */
    pthread_mutex_t log_lock;
    int64_t log_window_s;
    unsigned log_in_window;
    uint64_t log_suppressed;
};

static void count(uint64_t *counter, int64_t delta)
{
    __atomic_fetch_add(counter, (uint64_t)delta, __ATOMIC_RELAXED);
}

static void digest(const char *s, size_t len, unsigned char *out)
{
    unsigned int n = 0;
    if (EVP_Digest(s, len, out, &n, EVP_sha256(), NULL) != 1)
        memset(out, 0, DIGEST_BYTES);
}

/* ---- requests ---- */

static gw_http_req_t *req_new(struct MHD_Connection *conn, const char *method, const char *url)
{
    gw_http_req_t *req = calloc(1, sizeof(*req));
    if (req == NULL)
        return NULL;
    req->path = strdup(url);
    if (req->path == NULL || pthread_mutex_init(&req->lock, NULL) != 0) {
        free(req->path);
        free(req);
        return NULL;
    }
    req->conn = conn;
    req->refs = 1;
    req->state = REQ_BODY;
    snprintf(req->method, sizeof(req->method), "%s", method);
    return req;
}

static void req_unref(gw_http_req_t *req)
{
    if (__atomic_sub_fetch(&req->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (req->response != NULL)
        MHD_destroy_response(req->response);
    pthread_mutex_destroy(&req->lock);
    free(req->body);
    free(req->path);
    free(req);
}

static struct MHD_Response *make_response(const char *content_type, const char *const *headers,
                                          const void *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return NULL;
    bool is_ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                         content_type != NULL ? content_type
                                                              : "application/json") == MHD_YES;
    for (size_t i = 0; is_ok && headers != NULL && headers[i] != NULL; i += 2)
        is_ok = headers[i + 1] != NULL &&
                MHD_add_response_header(r, headers[i], headers[i + 1]) == MHD_YES;
    if (!is_ok) {
        MHD_destroy_response(r);
        return NULL;
    }
    return r;
}

/* Writes {"error":"<message>"} into body (cap bytes), escaping what JSON requires; a long
 * message is cut. Returns the length. */
static size_t error_json(const char *message, char *body, size_t cap)
{
    size_t n = (size_t)snprintf(body, cap, "{\"error\":\"");
    for (const unsigned char *p = (const unsigned char *)message; *p != '\0'; p++) {
        if (n + 8 >= cap)
            break;
        if (*p == '"' || *p == '\\')
            n += (size_t)snprintf(body + n, cap - n, "\\%c", *p);
        else if (*p < 0x20)
            n += (size_t)snprintf(body + n, cap - n, "\\u%04x", *p);
        else
            body[n++] = (char)*p;
    }
    n += (size_t)snprintf(body + n, cap - n, "\"}");
    return n;
}

static struct MHD_Response *make_error(const char *message)
{
    char body[ERROR_BODY_MAX];
    size_t n = error_json(message, body, sizeof(body));
    return make_response("application/json", NULL, body, n);
}

/* Queues r on the connection (we are inside on_access) and drops our reference to it. */
static enum MHD_Result queue(struct MHD_Connection *conn, unsigned status, struct MHD_Response *r)
{
    if (r == NULL)
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result queue_error(gw_http_req_t *req, unsigned status, const char *message)
{
    req->state = REQ_DONE;
    return queue(req->conn, status, make_error(message));
}

/* As queue_error, with the given headers (name, value pairs, NULL-terminated) added. */
static enum MHD_Result queue_error_with(gw_http_req_t *req, unsigned status, const char *message,
                                        const char *const *headers)
{
    char body[ERROR_BODY_MAX];
    size_t n = error_json(message, body, sizeof(body));
    req->state = REQ_DONE;
    return queue(req->conn, status, make_response("application/json", headers, body, n));
}

/* ---- routing and checks, when the headers arrive ---- */

/* The body limit: a relaxed load, since gw_http_set_limits may change it from another thread
 * (a reload); a request sees one value or the other. */
static size_t max_body(const gw_http_t *srv)
{
    return __atomic_load_n(&srv->opts.max_body_bytes, __ATOMIC_RELAXED);
}

/*
 * The key from `X-Api-Key: KEY`, else from `Authorization: Bearer KEY`. The second form is
 * what every Prometheus since 2.26 can send from a file (`authorization: credentials_file`),
 * where an arbitrary header needs 2.55 or later; Debian 12 ships 2.42. With both headers,
 * X-Api-Key alone counts. NULL when neither carries a key.
 */
static const char *request_key(struct MHD_Connection *conn)
{
    static const char bearer[] = "Bearer ";
    const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Api-Key");
    if (key != NULL)
        return key;
    const char *auth =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    /* RFC 7235: the scheme is case-insensitive. */
    if (auth == NULL || strncasecmp(auth, bearer, sizeof(bearer) - 1) != 0)
        return NULL;
    return auth + sizeof(bearer) - 1;
}

static bool key_ok(const gw_http_t *srv, struct MHD_Connection *conn)
{
    const char *key = request_key(conn);
    if (!srv->has_key || key == NULL)
        return false;
    unsigned char d[DIGEST_BYTES];
    digest(key, strlen(key), d);
    return CRYPTO_memcmp(d, srv->key_digest, DIGEST_BYTES) == 0;
}

static bool path_is_public(const gw_http_t *srv, const char *path)
{
    if (strcmp(path, "/healthz") == 0)
        return true;
    for (size_t i = 0; i < srv->n_routes; i++) {
        if (srv->routes[i].is_public && strcmp(srv->routes[i].path, path) == 0)
            return true;
    }
    return false;
}

/* Answers 405 with an Allow header naming the methods the path does have. */
static enum MHD_Result answer_405(gw_http_t *srv, gw_http_req_t *req)
{
    char allow[256] = "";
    size_t n = 0;
    for (size_t i = 0; i < srv->n_routes; i++) {
        if (strcmp(srv->routes[i].path, req->path) == 0 && n < sizeof(allow))
            n += (size_t)snprintf(allow + n, sizeof(allow) - n, "%s%s", n > 0 ? ", " : "",
                                  srv->routes[i].method);
    }
    struct MHD_Response *r = make_error("method not allowed");
    if (r != NULL && MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow) != MHD_YES) {
        MHD_destroy_response(r);
        r = NULL;
    }
    count(&srv->n_not_found, 1);
    req->state = REQ_DONE;
    return queue(req->conn, MHD_HTTP_METHOD_NOT_ALLOWED, r);
}

/* What the request's headers say about where its body ends (framing_problem). */
typedef struct framing_s {
    unsigned n_lengths;       /* Content-Length headers */
    unsigned long long last;  /* the value of the last one */
    bool is_conflicting;      /* two Content-Length values differ (or one is not a number) */
    bool has_transfer_coding; /* a Transfer-Encoding header */
} framing_t;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    NL_UNUSED(kind);
    framing_t *f = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        f->has_transfer_coding = true;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
        return MHD_YES;
    /* RFC 9110: 1*DIGIT. Anything else makes a second value incomparable: a conflict. */
    unsigned long long v = 0;
    bool is_number = value != NULL && value[0] != '\0';
    for (const char *p = value; is_number && *p != '\0'; p++) {
        is_number = *p >= '0' && *p <= '9' && v <= (ULLONG_MAX - 9) / 10;
        v = v * 10 + (unsigned long long)(*p - '0');
    }
    if (!is_number || (f->n_lengths > 0 && v != f->last))
        f->is_conflicting = true;
    f->last = v;
    f->n_lengths++;
    return MHD_YES;
}

/*
 * A request whose body could end in two places is refused before anything else, with 400 and
 * a close, as RFC 9112 section 6.3 asks: libmicrohttpd 0.9.75 frames the body by the first
 * Content-Length and never looks at a second, so "Content-Length: 5" then "Content-Length: 10"
 * had five bytes read as the body and the rest answered as a request of its own, which a proxy
 * in front that read ten bytes never sent as one (request smuggling). Likewise Content-Length
 * beside Transfer-Encoding (libmicrohttpd goes by the chunks, and kept the connection open,
 * where RFC 9112 section 6.1 requires a close). The same value given twice is one value (RFC
 * 9110 section 8.6 allows either answer; all readers agree on where that body ends). Returns
 * the refusal's reason, or NULL.
 */
static const char *framing_problem(struct MHD_Connection *conn)
{
    framing_t f = {0};
    (void)MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_header, &f);
    if (f.n_lengths > 1 && f.is_conflicting)
        return "conflicting Content-Length headers";
    if (f.n_lengths > 0 && f.has_transfer_coding)
        return "Content-Length with Transfer-Encoding";
    return NULL;
}

/*
 * First call for a request: check its framing, authenticate, route, check the declared
 * length. Anything refused here is answered before the body is read (libmicrohttpd then
 * closes the connection rather than read a body nobody wants).
 */
static enum MHD_Result on_headers(gw_http_t *srv, gw_http_req_t *req)
{
    static const char *const close_hdrs[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    static const char *const retry_hdrs[] = {MHD_HTTP_HEADER_RETRY_AFTER, "1", NULL};
    count(&srv->n_requests, 1);
    const char *framing = framing_problem(req->conn);
    if (framing != NULL) {
        count(&srv->n_bad_framing, 1);
        return queue_error_with(req, MHD_HTTP_BAD_REQUEST, framing, close_hdrs);
    }
    bool is_public = path_is_public(srv, req->path);
    if (!is_public && !key_ok(srv, req->conn)) {
        count(&srv->n_unauthorized, 1);
        return queue_error(req, MHD_HTTP_UNAUTHORIZED,
                           srv->has_key ? "unauthorized" : "admin api key not configured");
    }
    /* An authenticated request keeps its connection from being shed (gw_http_guard.h), as
     * long as such requests leave the probes their reserve of connections. */
    if (!is_public && !gw_http_guard_trust(srv->guard, req->conn))
        return queue_error_with(req, MHD_HTTP_SERVICE_UNAVAILABLE, "admin port busy", retry_hdrs);
    bool has_path = false;
    for (size_t i = 0; i < srv->n_routes && req->route == NULL; i++) {
        const route_t *r = &srv->routes[i];
        if (strcmp(r->path, req->path) != 0)
            continue;
        has_path = true;
        if (strcmp(r->method, req->method) == 0)
            req->route = r;
    }
    if (req->route == NULL && has_path)
        return answer_405(srv, req);
    if (req->route == NULL && strcmp(req->path, "/healthz") != 0) {
        count(&srv->n_not_found, 1);
        return queue_error(req, MHD_HTTP_NOT_FOUND, "not found");
    }
    const char *cl =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL && strtoull(cl, NULL, 10) > max_body(srv)) {
        count(&srv->n_too_large, 1);
        return queue_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large");
    }
    return MHD_YES;
}

/* Appends a chunk of body, or marks the request too big and drops the rest. */
static void on_body(gw_http_t *srv, gw_http_req_t *req, const char *data, size_t size)
{
    if (req->is_too_big || req->body_len + size > max_body(srv)) {
        req->is_too_big = true;
        return;
    }
    if (req->body_len + size + 1 > req->body_cap) {
        size_t cap = req->body_cap != 0 ? req->body_cap : 1024;
        while (cap < req->body_len + size + 1)
            cap *= 2;
        char *body = realloc(req->body, cap);
        if (body == NULL) {
            req->is_too_big = true; /* answered 413: the closest truthful answer */
            return;
        }
        req->body = body;
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, data, size);
    req->body_len += size;
    req->body[req->body_len] = '\0';
}

/* ---- dispatch and asynchronous answers ---- */

static void pending_remove(gw_http_t *srv, gw_http_req_t *req)
{
    if (!req->is_pending)
        return;
    if (req->prev != NULL)
        req->prev->next = req->next;
    else
        srv->pending = req->next;
    if (req->next != NULL)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
    req->is_pending = false;
    count(&srv->n_pending, -1);
    if (srv->is_stopping)
        pthread_cond_broadcast(&srv->drained);
}

/* Marks req as answered 503 by the stop, which then waits for it to complete; srv->lock
 * held. */
static void drain_add(gw_http_t *srv, gw_http_req_t *req)
{
    req->is_draining = true;
    srv->n_draining++;
}

/* Takes the stored answer out of req for queueing; req->lock held. */
static struct MHD_Response *take_response(gw_http_req_t *req, unsigned *status)
{
    struct MHD_Response *r = req->response;
    req->response = NULL;
    *status = req->status;
    req->state = REQ_DONE;
    return r;
}

/* Body complete: run the handler, then queue its answer or suspend until there is one. */
static enum MHD_Result dispatch(gw_http_t *srv, gw_http_req_t *req)
{
    /* The request is whole: from here on the time is the server's, not the client's. */
    gw_http_guard_stop(srv->guard, req->conn);
    if (req->is_too_big) {
        count(&srv->n_too_large, 1);
        return queue_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large");
    }
    if (req->route == NULL) /* /healthz without a registered route */
        return queue(req->conn, MHD_HTTP_OK, make_response(NULL, NULL, "{\"status\":\"ok\"}", 15));
    req->state = REQ_IN_HANDLER;
    __atomic_add_fetch(&req->refs, 1, __ATOMIC_ACQ_REL); /* the responder's */
    req->route->handler(req, req->route->arg);

    pthread_mutex_lock(&srv->lock);
    pthread_mutex_lock(&req->lock);
    if (req->response == NULL && srv->is_stopping) {
        req->response = make_error("server stopping");
        req->status = MHD_HTTP_SERVICE_UNAVAILABLE;
        drain_add(srv, req);
    }
    if (req->response != NULL) {
        unsigned status;
        struct MHD_Response *r = take_response(req, &status);
        pthread_mutex_unlock(&req->lock);
        pthread_mutex_unlock(&srv->lock);
        return queue(req->conn, status, r);
    }
    req->state = REQ_SUSPENDED;
    req->next = srv->pending;
    if (srv->pending != NULL)
        srv->pending->prev = req;
    srv->pending = req;
    req->is_pending = true;
    count(&srv->n_pending, 1);
    count(&srv->n_suspended, 1);
    MHD_suspend_connection(req->conn);
    pthread_mutex_unlock(&req->lock);
    pthread_mutex_unlock(&srv->lock);
    return MHD_YES;
}

/* Called again after gw_http_respond resumed the connection: queue the stored answer. */
static enum MHD_Result on_resumed(gw_http_t *srv, gw_http_req_t *req)
{
    pthread_mutex_lock(&srv->lock);
    pthread_mutex_lock(&req->lock);
    pending_remove(srv, req);
    unsigned status;
    struct MHD_Response *r = take_response(req, &status);
    pthread_mutex_unlock(&req->lock);
    pthread_mutex_unlock(&srv->lock);
    return queue(req->conn, status, r);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    NL_UNUSED(version);
    gw_http_t *srv = cls;
    gw_http_req_t *req = *con_cls;
    if (req == NULL) {
        req = req_new(conn, method, url);
        if (req == NULL)
            return MHD_NO;
        *con_cls = req;
        gw_http_guard_headers(srv->guard, conn);
        return on_headers(srv, req);
    }
    if (*upload_data_size != 0) {
        /* Still collecting; a request answered early just drops whatever body follows. */
        if (req->state == REQ_BODY)
            on_body(srv, req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    switch (req->state) {
    case REQ_BODY:
        return dispatch(srv, req);
    case REQ_SUSPENDED:
        return on_resumed(srv, req);
    case REQ_IN_HANDLER:
    case REQ_DONE:
        break;
    }
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode why)
{
    NL_UNUSED(why);
    gw_http_t *srv = cls;
    gw_http_req_t *req = *con_cls;
    gw_http_guard_restart(srv->guard, conn);
    if (req == NULL)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&srv->lock);
    pending_remove(srv, req);
    if (req->is_draining) {
        req->is_draining = false;
        if (--srv->n_draining == 0)
            pthread_cond_broadcast(&srv->drained);
    }
    pthread_mutex_unlock(&srv->lock);
    req_unref(req);
}

int gw_http_respond(gw_http_req_t *req, unsigned status, const char *content_type, const void *body,
                    size_t len)
{
    return gw_http_respond_headers(req, status, content_type, NULL, body, len);
}

int gw_http_respond_headers(gw_http_req_t *req, unsigned status, const char *content_type,
                            const char *const *headers, const void *body, size_t len)
{
    struct MHD_Response *r = make_response(content_type, headers, body, len);
    int rc = 0;
    if (r == NULL) {
        rc = -ENOMEM;
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    }
    pthread_mutex_lock(&req->lock);
    if (req->state == REQ_DONE || req->response != NULL) {
        /* gw_http_stop answered first; this answer has nowhere to go. */
        pthread_mutex_unlock(&req->lock);
        if (r != NULL)
            MHD_destroy_response(r);
        req_unref(req);
        return rc;
    }
    req->response = r;
    req->status = status;
    if (req->state == REQ_SUSPENDED && r != NULL)
        MHD_resume_connection(req->conn);
    pthread_mutex_unlock(&req->lock);
    req_unref(req);
    return rc;
}

int gw_http_respond_error(gw_http_req_t *req, unsigned status, const char *message)
{
    char body[ERROR_BODY_MAX];
    size_t n = error_json(message != NULL ? message : "", body, sizeof(body));
    return gw_http_respond(req, status, "application/json", body, n);
}

/* ---- request accessors ---- */

const char *gw_http_req_method(const gw_http_req_t *req)
{
    return req->method;
}

const char *gw_http_req_path(const gw_http_req_t *req)
{
    return req->path;
}

const char *gw_http_req_query_n(const gw_http_req_t *req, const char *key, size_t *len)
{
    const char *v = NULL;
    size_t n = 0;
    *len = 0;
    if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v, &n) !=
        MHD_YES)
        return NULL;
    /* "?flag" with no '=' is present with a NULL value in libmicrohttpd; report it as "". */
    if (v == NULL)
        return "";
    *len = n;
    return v;
}

const char *gw_http_req_query(const gw_http_req_t *req, const char *key)
{
    size_t len;
    return gw_http_req_query_n(req, key, &len);
}

const char *gw_http_req_header(const gw_http_req_t *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *gw_http_req_body(const gw_http_req_t *req, size_t *len)
{
    if (len != NULL)
        *len = req->body_len;
    return req->body != NULL ? req->body : "";
}

/* ---- the server ---- */

int gw_http_new(gw_http_t **out, const gw_http_opts_t *opts)
{
    const char *host = opts->host != NULL ? opts->host : "127.0.0.1";
    if (strlen(host) == 0 || strlen(host) >= sizeof(((gw_http_t *)0)->host))
        return -EINVAL;
    gw_http_t *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return -ENOMEM;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&srv->drained, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0 || pthread_mutex_init(&srv->lock, NULL) != 0) {
        if (rc == 0)
            pthread_cond_destroy(&srv->drained);
        free(srv);
        return -ENOMEM;
    }
    pthread_mutex_init(&srv->log_lock, NULL);
    srv->opts = *opts;
    snprintf(srv->host, sizeof(srv->host), "%s", host);
    srv->opts.host = srv->host;
    /* Only a digest of the key is kept: nothing that could leak into a core dump verbatim. */
    srv->has_key = opts->api_key != NULL && opts->api_key[0] != '\0';
    if (srv->has_key)
        digest(opts->api_key, strlen(opts->api_key), srv->key_digest);
    srv->opts.api_key = NULL;
    if (srv->opts.max_body_bytes == 0)
        srv->opts.max_body_bytes = (size_t)1 << 20;
    if (srv->opts.max_connections == 0)
        srv->opts.max_connections = 64;
    if (srv->opts.timeout_s == 0)
        srv->opts.timeout_s = 30;
    if (srv->opts.max_per_address == 0)
        srv->opts.max_per_address = srv->opts.max_connections < 32 ? srv->opts.max_connections : 32;
    if (srv->opts.max_per_address > srv->opts.max_connections ||
        srv->opts.max_connections <= GW_HTTP_GUARD_PROBE_RESERVE) {
        gw_http_free(srv);
        return -EINVAL;
    }
    *out = srv;
    return 0;
}

static int add_route(gw_http_t *srv, const char *method, const char *path,
                     gw_http_handler_cb handler, void *arg, bool is_public)
{
    if (srv->daemon != NULL)
        return -EBUSY;
    if (method == NULL || path == NULL || handler == NULL || path[0] != '/' ||
        strlen(method) == 0 || strlen(method) >= sizeof(srv->routes[0].method))
        return -EINVAL;
    for (size_t i = 0; i < srv->n_routes; i++) {
        if (strcmp(srv->routes[i].method, method) == 0 && strcmp(srv->routes[i].path, path) == 0)
            return -EEXIST;
    }
    if (srv->n_routes == MAX_ROUTES)
        return -ENOSPC;
    route_t *r = &srv->routes[srv->n_routes];
    r->path = strdup(path);
    if (r->path == NULL)
        return -ENOMEM;
    snprintf(r->method, sizeof(r->method), "%s", method);
    r->handler = handler;
    r->arg = arg;
    r->is_public = is_public || strcmp(path, "/healthz") == 0;
    srv->n_routes++;
    return 0;
}

int gw_http_route(gw_http_t *srv, const char *method, const char *path, gw_http_handler_cb handler,
                  void *arg)
{
    return add_route(srv, method, path, handler, arg, false);
}

int gw_http_route_public(gw_http_t *srv, const char *method, const char *path,
                         gw_http_handler_cb handler, void *arg)
{
    return add_route(srv, method, path, handler, arg, true);
}

/* libmicrohttpd's complaints, one log line each, without the trailing newline it adds. */
/* libmicrohttpd complains once per bad connection, and anybody who can connect makes those
 * (20,000 abandoned requests gave 20,000 lines in 1.5 s). At most HTTP_LOG_PER_S lines a
 * second get through; the rest are counted, and the next second's first complaint is preceded
 * by one ev=http_error_suppressed line with the count. log_lock is never held while calling
 * into libmicrohttpd, which may log from inside calls made under srv->lock. */
__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    gw_http_t *srv = cls;
    int64_t now_s = (int64_t)(nl_now_ms() / 1000);
    uint64_t suppressed = 0;
    pthread_mutex_lock(&srv->log_lock);
    if (now_s != srv->log_window_s) {
        suppressed = srv->log_suppressed;
        srv->log_suppressed = 0;
        srv->log_window_s = now_s;
        srv->log_in_window = 0;
    }
    bool is_logged = srv->log_in_window < HTTP_LOG_PER_S;
    if (is_logged)
        srv->log_in_window++;
    else
        srv->log_suppressed++;
    pthread_mutex_unlock(&srv->log_lock);
    if (suppressed > 0)
        NL_LOG(NL_WARN, "http_error_suppressed", "count=%" PRIu64, suppressed);
    if (!is_logged)
        return;
    char msg[256];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strcspn(msg, "\r\n");
    msg[n] = '\0';
    for (size_t i = 0; i < n; i++)
        msg[i] = msg[i] == '"' ? '\'' : msg[i];
    NL_LOG(NL_WARN, "http_error", "msg=\"%s\"", msg);
}

/* Resolves srv->host into *addr for port. Returns 0, or -EINVAL. */
static int resolve(const gw_http_t *srv, struct sockaddr_storage *addr, socklen_t *addr_len)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char port[8];
    snprintf(port, sizeof(port), "%u", srv->opts.port);
    if (getaddrinfo(srv->host, port, &hints, &res) != 0 || res == NULL)
        return -EINVAL;
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/*
 * Every HTTP client speaks first, so the kernel may keep a connection until its first bytes
 * arrive (TCP_DEFER_ACCEPT): one that sends nothing reaches libmicrohttpd only when its SYN-ACK
 * has been sent again, about a second later, then meets the header timeout. A flood of such
 * connections, renewed as the guard sheds them, so arrives in a trickle, where without it
 * 200 sockets turned over thousands of times a second and a probe sharing their address, a
 * few milliseconds late with its request, could be shed. A connection that sends a byte is
 * accepted at once, as before; the guard handles those. Best effort: without it the guard
 * still holds, with a faster churn.
 */
static void defer_accept(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_LISTEN_FD);
    int seconds = DEFER_ACCEPT_S;
    if (info != NULL)
        (void)setsockopt(info->listen_fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &seconds, sizeof(seconds));
}

int gw_http_start(gw_http_t *srv)
{
    if (srv->daemon != NULL)
        return -EBUSY;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    if (resolve(srv, &addr, &addr_len) != 0)
        return -EINVAL;
    NL_UNUSED(addr_len);
    /* poll(2), not the epoll libmicrohttpd picks by itself: with epoll (edge-triggered) a
     * connection whose request bytes and FIN were both waiting when it was accepted had its
     * bytes read and its close never noticed, so it sat until the 30 s timeout; clients that
     * connect, send half a request and hang up (4,000 in 2 s) filled all 64 connections and
     * the listen backlog, and /healthz went unanswered. poll is level-triggered and sees the
     * close; over at most 72 connections it costs nothing. */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* The guard lives until gw_http_free, not gw_http_stop: stats are read from IO loops
     * (gw_http_stats) while the node stops, and a restart reuses it. */
    gw_http_guard_opts_t guard = {
        .header_timeout_ms = srv->opts.header_timeout_ms,
        .request_timeout_ms = srv->opts.request_timeout_ms,
        .max_connections = srv->opts.max_connections,
        .max_per_address = srv->opts.max_per_address,
    };
    int err = srv->guard != NULL ? 0 : gw_http_guard_new(&srv->guard, &guard);
    if (err < 0)
        return err;
    errno = 0;
    /* The logger goes first, or libmicrohttpd complains about the options before it. Its
     * connection limit is the guard's: a little above max_connections, which the guard keeps
     * by shedding, so that libmicrohttpd never stops accepting (gw_http_guard.h). */
    srv->daemon = MHD_start_daemon(
        flags, srv->opts.port, NULL, NULL, on_access, srv, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
        srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
        gw_http_guard_mhd_limit(srv->guard), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)CONN_MEMORY_BYTES, MHD_OPTION_CONNECTION_TIMEOUT, srv->opts.timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION,
        gw_http_guard_on_connection, srv->guard, MHD_OPTION_END);
    err = -errno;
    if (srv->daemon == NULL)
        return err != 0 ? err : -EADDRNOTAVAIL;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info != NULL ? info->port : srv->opts.port;
    defer_accept(srv->daemon);
    NL_LOG(NL_INFO, "http_listening", "host=%s port=%u auth=%s", srv->host, srv->port,
           srv->has_key ? "api_key" : "none");
    return 0;
}

uint16_t gw_http_port(const gw_http_t *srv)
{
    return srv->port;
}

void gw_http_set_limits(gw_http_t *srv, size_t max_body_bytes, uint64_t request_timeout_ms,
                        uint64_t header_timeout_ms)
{
    if (max_body_bytes != 0)
        __atomic_store_n(&srv->opts.max_body_bytes, max_body_bytes, __ATOMIC_RELAXED);
    if (srv->guard != NULL)
        gw_http_guard_set_timeouts(srv->guard, header_timeout_ms, request_timeout_ms);
}

void gw_http_stats(const gw_http_t *srv, gw_http_stats_t *out)
{
    out->requests = __atomic_load_n(&srv->n_requests, __ATOMIC_RELAXED);
    out->unauthorized = __atomic_load_n(&srv->n_unauthorized, __ATOMIC_RELAXED);
    out->not_found = __atomic_load_n(&srv->n_not_found, __ATOMIC_RELAXED);
    out->too_large = __atomic_load_n(&srv->n_too_large, __ATOMIC_RELAXED);
    out->suspended = __atomic_load_n(&srv->n_suspended, __ATOMIC_RELAXED);
    out->pending = __atomic_load_n(&srv->n_pending, __ATOMIC_RELAXED);
    out->bad_framing = __atomic_load_n(&srv->n_bad_framing, __ATOMIC_RELAXED);
    gw_http_guard_stats_t g = {0};
    if (srv->guard != NULL)
        gw_http_guard_stats(srv->guard, &g);
    out->timed_out = g.timed_out;
    out->shed = g.shed;
    out->refused = g.refused;
    out->busy = g.busy;
}

/*
 * libmicrohttpd forbids stopping with suspended connections, and the handlers' answers may
 * never come (their loop may be gone), so every waiting request is answered 503 and resumed
 * here. A resume only raises a flag that the server thread acts on, and MHD_stop_daemon would
 * cut connections whose answer is still unsent, so we wait (bounded) until each of those
 * requests has completed before stopping the daemon.
 */
void gw_http_stop(gw_http_t *srv)
{
    if (srv->daemon == NULL)
        return;
    pthread_mutex_lock(&srv->lock);
    srv->is_stopping = true;
    for (gw_http_req_t *req = srv->pending; req != NULL; req = req->next) {
        pthread_mutex_lock(&req->lock);
        if (req->response == NULL && req->state == REQ_SUSPENDED) {
            req->response = make_error("server stopping");
            req->status = MHD_HTTP_SERVICE_UNAVAILABLE;
            drain_add(srv, req);
            MHD_resume_connection(req->conn);
        }
        pthread_mutex_unlock(&req->lock);
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += STOP_DRAIN_S;
    while (srv->pending != NULL || srv->n_draining > 0) {
        if (pthread_cond_timedwait(&srv->drained, &srv->lock, &deadline) == ETIMEDOUT)
            break;
    }
    bool is_drained = srv->pending == NULL && srv->n_draining == 0;
    pthread_mutex_unlock(&srv->lock);
    if (!is_drained)
        NL_LOG(NL_WARN, "http_stop_undrained", "port=%u", srv->port);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    NL_LOG(NL_INFO, "http_stopped", "port=%u", srv->port);
}

void gw_http_free(gw_http_t *srv)
{
    if (srv == NULL)
        return;
    gw_http_stop(srv);
    gw_http_guard_free(srv->guard); /* every connection is closed: the list is empty */
    for (size_t i = 0; i < srv->n_routes; i++)
        free(srv->routes[i].path);
    pthread_cond_destroy(&srv->drained);
    pthread_mutex_destroy(&srv->lock);
    pthread_mutex_destroy(&srv->log_lock);
    free(srv);
}

/*
 * lg_http: publishing through herald's admin API (see lg_http.h).
 *
 * The response parser is the minimum herald's admin server needs: a status line, headers up
 * to an empty line, and a Content-Length body (herald never sends chunked bodies to these
 * requests). Anything else, or a header block over HEADERS_MAX bytes, closes the connection.
 */
#include "lg_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netlib/nl_common.h"
#include "netlib/nl_conn.h"

#define HEADERS_MAX 16384 /* a response header block longer than this is not herald's */
#define REQUEST_HEAD_MAX 512

typedef struct lg_http_conn_s {
    lg_worker_t *w;
    nl_client_t *cl;
    nl_conn_t *conn;        /* NULL until connected */
    uint64_t inflight_subs; /* deliveries owed once the request in flight succeeds */
    bool is_busy;           /* a request is in flight */
} lg_http_conn_t;

static void http_on_connected(nl_conn_t *conn);
static void http_on_message(nl_conn_t *conn, nl_buf_t *in);
static void http_on_close(nl_conn_t *conn, int reason);

static const nl_conn_cbs_t http_cbs = {
    .on_connected = http_on_connected,
    .on_message = http_on_message,
    .on_close = http_on_close,
};

/* Static names for the reason tables (they keep pointers, not copies). */
static const char *status_reason(int status)
{
    switch (status) {
    case 400:
        return "http_400";
    case 401:
        return "http_401";
    case 403:
        return "http_403";
    case 404:
        return "http_404";
    case 413:
        return "http_413";
    case 429:
        return "http_429";
    case 500:
        return "http_500";
    case 503:
        return "http_503";
    default:
        return "http_other";
    }
}

static void http_on_connected(nl_conn_t *conn)
{
    lg_http_conn_t *h = nl_client_arg(nl_client_of(conn));
    nl_conn_set_data(conn, h);
    h->conn = conn;
    h->is_busy = false;
}

static void http_on_close(nl_conn_t *conn, int reason)
{
    NL_UNUSED(reason);
    lg_http_conn_t *h = nl_conn_data(conn);
    if (!h)
        return;
    h->conn = NULL;
    if (h->is_busy)
        lg_stats_add(&h->w->stats.publish_unacked, 1);
    h->is_busy = false;
}

/* Finds Content-Length in the header block [p, p + len). Returns its value, or 0. */
static size_t content_length(const char *p, size_t len)
{
    static const char name[] = "\r\ncontent-length:";
    size_t n = sizeof(name) - 1;
    for (size_t i = 0; i + n <= len; i++) {
        if (strncasecmp(p + i, name, n) == 0)
            return (size_t)strtoul(p + i + n, NULL, 10);
    }
    return 0;
}

static void http_response(lg_http_conn_t *h, int status)
{
    lg_worker_t *w = h->w;
    h->is_busy = false;
    if (status == 200) {
        lg_stats_add(&w->stats.publish_oks, 1);
        lg_stats_add(&w->stats.expected, h->inflight_subs);
        return;
    }
    lg_stats_add(&w->stats.publish_errors, 1);
    lg_stats_add(&w->stats.errors, 1);
    lg_reasons_add(&w->stats.error_reasons, status_reason(status));
}

static void http_on_message(nl_conn_t *conn, nl_buf_t *in)
{
    lg_http_conn_t *h = nl_conn_data(conn);
    while (nl_buf_readable(in) > 0 && nl_conn_state(conn) == NL_CONN_CONNECTED) {
        const char *p = nl_buf_peek(in);
        size_t n = nl_buf_readable(in);
        const char *end = memmem(p, n, "\r\n\r\n", 4);
        if (!end) {
            if (n > HEADERS_MAX)
                nl_conn_close(conn, -EPROTO);
            return;
        }
        size_t head = (size_t)(end - p) + 4;
        int status = 0;
        if (n < 12 || strncmp(p, "HTTP/1.", 7) != 0 || sscanf(p + 9, "%3d", &status) != 1) {
            nl_conn_close(conn, -EPROTO);
            return;
        }
        size_t body = content_length(p, head);
        if (n < head + body)
            return;
        nl_buf_retrieve(in, head + body);
        if (h->is_busy)
            http_response(h, status);
    }
}

int lg_http_start(lg_worker_t *w)
{
    const lg_config_t *cfg = w->cfg;
    w->http = calloc(cfg->http_conns, sizeof(*w->http));
    if (!w->http)
        return -ENOMEM;
    nl_client_opts_t opts;
    lg_client_opts_init(&opts, cfg);
    opts.port = cfg->admin_port;
    opts.cbs = &http_cbs;
    opts.on_retry = NULL;
    for (uint32_t i = 0; i < cfg->http_conns; i++) {
        lg_http_conn_t *h = &w->http[i];
        h->w = w;
        opts.arg = h;
        int rc = nl_client_new(&h->cl, w->loop, &opts);
        if (rc == 0)
            rc = nl_client_connect(h->cl);
        if (rc < 0)
            return rc;
        w->http_count++;
    }
    return 0;
}

/* A free, connected admin connection, or NULL. */
static lg_http_conn_t *http_free_conn(lg_worker_t *w)
{
    for (uint32_t i = 0; i < w->http_count; i++) {
        if (w->http[i].conn && !w->http[i].is_busy)
            return &w->http[i];
    }
    return NULL;
}

int lg_http_publish(lg_worker_t *w, lg_client_t *c)
{
    lg_http_conn_t *h = http_free_conn(w);
    if (!h)
        return -EBUSY;
    char channel[LG_CHANNEL_MAX];
    uint64_t subs = lg_client_publish_target(c, channel, sizeof(channel));
    char head[REQUEST_HEAD_MAX + LG_SECRET_MAX];
    int len = snprintf(head, sizeof(head),
                       "POST /api/publish?channel=%s HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\n"
                       "Content-Type: application/octet-stream\r\nContent-Length: %u\r\n\r\n",
                       channel, w->cfg->host, w->cfg->api_key, w->cfg->payload_bytes);
    if (len < 0 || (size_t)len >= sizeof(head))
        return -ENOBUFS;
    lg_worker_stamp_payload(w);
    /* One send for head and body, so the request leaves in one segment when it fits. */
    int rc = nl_buf_append(&w->scratch, head, (size_t)len);
    if (rc == 0)
        rc = nl_buf_append(&w->scratch, w->payload, w->cfg->payload_bytes);
    if (rc == 0)
        rc = nl_conn_send(h->conn, nl_buf_peek(&w->scratch), nl_buf_readable(&w->scratch));
    if (rc == 0) {
        lg_stats_add(&w->stats.bytes_out, nl_buf_readable(&w->scratch));
        lg_stats_add(&w->stats.publishes, 1);
        h->is_busy = true;
        h->inflight_subs = subs;
    }
    nl_buf_retrieve_all(&w->scratch);
    return rc;
}

void lg_http_stop(lg_worker_t *w)
{
    for (uint32_t i = 0; i < w->http_count; i++) {
        if (w->http[i].cl)
            nl_client_close(w->http[i].cl);
        w->http[i].cl = NULL;
    }
}

void lg_http_free(lg_worker_t *w)
{
    free(w->http);
    w->http = NULL;
    w->http_count = 0;
}

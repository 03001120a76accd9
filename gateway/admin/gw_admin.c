/*
 * gw_admin: the admin API: its HTTP server, its routes, its place beside the node. See
 * gw_admin.h.
 *
 * POST /api/publish goes to the engine with no reply loop: the channel's owner loop answers
 * the HTTP request itself (gw_http_respond is safe from any thread), so a publish costs one
 * post and no extra hop back. The presence and online queries do the same: the loop that
 * merges the engine's answer writes the JSON (jansson) and answers.
 */
#include "gw_admin.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gw_admin_int.h"
#include "gw_channel.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

#define PROMETHEUS_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* An engine request that failed: 503 when retrying helps (Redis busy or away, nothing was
 * applied), 504 when a publish may have been applied, else 500 (not applied). */
static void admin_respond_failure(gw_http_req_t *req, int status)
{
    if (status == -EBUSY)
        gw_http_respond_error(req, 503, "busy: too many commands toward Redis, retry");
    else if (status == GW_ENGINE_OUTCOME_UNKNOWN)
        gw_http_respond_error(req, 504,
                              "outcome unknown: Redis took the publish and did not answer; "
                              "retry with the same Idempotency-Key");
    else if (status == -EAGAIN)
        gw_http_respond_error(req, 503, "Redis unavailable, retry");
    else
        gw_http_respond_error(req, 500, nl_strerror(status));
}

/* --- publish ------------------------------------------------------------------------------ */

/* On the channel's owner loop: the offset is known. r->ptr is the HTTP request. */
static void admin_published(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_http_req_t *req = r->ptr;
    if (res->status < 0) {
        admin_respond_failure(req, res->status);
        return;
    }
    char epoch[17];
    proto_epoch_str(res->epoch, epoch);
    char body[128];
    int n = snprintf(body, sizeof(body), "{\"offset\":%" PRIu64 ",\"epoch\":\"%s\"%s}",
                     res->offset, epoch, res->is_duplicate ? ",\"duplicate\":true" : "");
    gw_http_respond(req, 200, NULL, body, (size_t)n);
}

/* The ?channel= of req when it is a valid channel name, else NULL. The decoded length, not
 * strlen: "a%00b" must be refused, not taken for "a". */
static const char *admin_channel(gw_http_req_t *req, gw_node_t *node, size_t *len)
{
    const char *chan = gw_http_req_query_n(req, "channel", len);
    gw_config_snap_t *snap = gw_node_config_acquire(node);
    uint32_t max_channel_bytes = snap->cfg.max_channel_bytes;
    gw_config_snap_unref(snap);
    if (!chan || gw_channel_name_check(chan, *len, max_channel_bytes) != GW_CHANNEL_OK)
        return NULL;
    return chan;
}

static void admin_publish(gw_http_req_t *req, void *arg)
{
    gw_admin_t *a = arg;
    gw_node_t *node = a->node;
    size_t chan_len = 0;
    const char *chan = admin_channel(req, node, &chan_len);
    if (!chan) {
        gw_http_respond_error(req, 400, "bad or missing channel");
        return;
    }
    if (gw_node_is_stopping(node)) {
        gw_http_respond_error(req, 503, "shutting down");
        return;
    }
    /* The header of the IETF draft (httpapi-idempotency-key-header), taken as opaque bytes. */
    const char *key = gw_http_req_header(req, "Idempotency-Key");
    size_t key_len = key ? strlen(key) : 0;
    if (key_len > GW_ENGINE_KEY_MAX) {
        gw_http_respond_error(req, 400, "Idempotency-Key over 64 bytes");
        return;
    }
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    gw_engine_msg_t msg = {.chan = chan,
                           .chan_len = chan_len,
                           .payload = body,
                           .len = len,
                           .key = key,
                           .key_len = key_len};
    gw_engine_reply_t reply = {.loop = NULL, .cb = admin_published, .ptr = req};
    int err = gw_engine_publish(gw_node_engine(node), &msg, &reply);
    if (err == -ESHUTDOWN)
        gw_http_respond_error(req, 503, "shutting down");
    else if (err < 0)
        gw_http_respond_error(req, 500, nl_strerror(err));
}

/* --- presence and online status --------------------------------------------------------- */

/* Answers req with j (consumed) as compact JSON, or 500 when it cannot be written. */
static void admin_respond_json(gw_http_req_t *req, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) {
        gw_http_respond_error(req, 500, "out of memory");
        return;
    }
    gw_http_respond(req, 200, NULL, text, strlen(text));
    free(text);
}

/* {"channel": C, "num_clients": N, "num_users": U, "truncated": B, "clients": [{"user": ...,
 * "client_id": ..., "connected_at_ms": ...}]} */
static void admin_presence_done(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_http_req_t *req = r->ptr;
    if (res->status < 0) {
        admin_respond_failure(req, res->status);
        return;
    }
    const gw_presence_result_t *p = res->data;
    json_t *clients = json_array();
    for (uint32_t i = 0; clients && i < p->n_clients; i++)
        json_array_append_new(clients,
                              json_pack("{s:s, s:s, s:I}", "user", p->clients[i].user, "client_id",
                                        p->clients[i].client_id, "connected_at_ms",
                                        (json_int_t)p->clients[i].connected_at_ms));
    admin_respond_json(req,
                       json_pack("{s:s, s:I, s:I, s:b, s:o*}", "channel", p->chan, "num_clients",
                                 (json_int_t)p->num_clients, "num_users", (json_int_t)p->num_users,
                                 "truncated", p->is_truncated, "clients", clients));
}

/* An engine query for an admin request: answers the errors it returns itself. */
static void admin_query_failed(gw_http_req_t *req, int err)
{
    if (err == -ESHUTDOWN)
        gw_http_respond_error(req, 503, "shutting down");
    else if (err == -ENOTSUP)
        gw_http_respond_error(req, 501, "not supported by this engine");
    else
        gw_http_respond_error(req, 500, nl_strerror(err));
}

static void admin_presence(gw_http_req_t *req, void *arg)
{
    gw_admin_t *a = arg;
    gw_node_t *node = a->node;
    size_t len = 0;
    const char *chan = admin_channel(req, node, &len);
    if (!chan) {
        gw_http_respond_error(req, 400, "bad or missing channel");
        return;
    }
    gw_engine_reply_t reply = {.loop = NULL, .cb = admin_presence_done, .ptr = req};
    int err = gw_node_engine(node)->ops->presence(gw_node_engine(node), chan, len, &reply);
    if (err < 0)
        admin_query_failed(req, err);
}

/* {"user": U, "online": B, "connections": N, "nodes": [...], "since_ms": T (online only),
 * "last_seen_ms": T or null (never seen, or forgotten)}. */
static void admin_online_done(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_http_req_t *req = r->ptr;
    if (res->status < 0) {
        admin_respond_failure(req, res->status);
        return;
    }
    const gw_online_result_t *o = res->data;
    json_t *nodes = json_array();
    for (uint32_t i = 0; nodes && i < o->n_nodes; i++)
        json_array_append_new(nodes, json_string(o->nodes[i]));
    json_t *j =
        json_pack("{s:s%, s:b, s:I, s:o*}", "user", o->user, o->user_len, "online",
                  o->connections > 0, "connections", (json_int_t)o->connections, "nodes", nodes);
    if (j && o->connections > 0)
        json_object_set_new(j, "since_ms", json_integer((json_int_t)o->since_ms));
    if (j)
        json_object_set_new(j, "last_seen_ms",
                            o->last_seen_ms ? json_integer((json_int_t)o->last_seen_ms)
                                            : json_null());
    admin_respond_json(req, j);
}

/* {"users": N, "connections": M} */
static void admin_online_counts_done(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_http_req_t *req = r->ptr;
    if (res->status < 0) {
        admin_respond_failure(req, res->status);
        return;
    }
    const gw_online_counts_t *c = res->data;
    admin_respond_json(req, json_pack("{s:I, s:I}", "users", (json_int_t)c->users, "connections",
                                      (json_int_t)c->connections));
}

/* Whether user[0..len) can be a user id: a token's sub is a JSON string of
 * 1..GW_TOKEN_SUB_MAX bytes, so UTF-8 without NUL (jansson checks the UTF-8). */
static bool admin_is_user_id(const char *user, size_t len)
{
    if (len == 0 || len > GW_TOKEN_SUB_MAX || memchr(user, '\0', len))
        return false;
    json_t *s = json_stringn(user, len);
    json_decref(s);
    return s != NULL;
}

/* GET /api/online?user=U for one user, GET /api/online for the counts. */
static void admin_online(gw_http_req_t *req, void *arg)
{
    gw_admin_t *a = arg;
    gw_node_t *node = a->node;
    size_t len = 0;
    const char *user = gw_http_req_query_n(req, "user", &len);
    gw_engine_reply_t reply = {.loop = NULL, .ptr = req};
    int err;
    if (!user) {
        reply.cb = admin_online_counts_done;
        err = gw_node_engine(node)->ops->online_counts(gw_node_engine(node), &reply);
    } else if (!admin_is_user_id(user, len)) {
        gw_http_respond_error(req, 400, "bad user");
        return;
    } else {
        reply.cb = admin_online_done;
        err = gw_node_engine(node)->ops->online(gw_node_engine(node), user, len, &reply);
    }
    if (err < 0)
        admin_query_failed(req, err);
}

/* --- the cluster ------------------------------------------------------------------------- */

/* {"node": <this node>, "nodes": [{"node": ..., "connections": N, "expires_ms": T}]} */
static void admin_nodes_done(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_http_req_t *req = r->ptr;
    if (res->status < 0) {
        admin_respond_failure(req, res->status);
        return;
    }
    const gw_engine_nodes_t *n = res->data;
    json_t *nodes = json_array();
    for (uint32_t i = 0; nodes && i < n->n_nodes; i++)
        json_array_append_new(nodes, json_pack("{s:s, s:I, s:I}", "node", n->nodes[i].node,
                                               "connections", (json_int_t)n->nodes[i].connections,
                                               "expires_ms", (json_int_t)n->nodes[i].expires_ms));
    admin_respond_json(req, json_pack("{s:s, s:o*}", "node", n->self, "nodes", nodes));
}

/* GET /api/nodes: the nodes sharing the engine (Redis), as its shared state lists them. */
static void admin_nodes(gw_http_req_t *req, void *arg)
{
    gw_admin_t *a = arg;
    gw_engine_t *engine = gw_node_engine(a->node);
    if (!engine->ops->nodes) {
        admin_query_failed(req, -ENOTSUP);
        return;
    }
    gw_engine_reply_t reply = {.loop = NULL, .cb = admin_nodes_done, .ptr = req};
    int err = engine->ops->nodes(engine, &reply);
    if (err < 0)
        admin_query_failed(req, err);
}

/* --- metrics and stats -------------------------------------------------------------------- */

/* A scrape on its way through the IO loops. */
typedef struct admin_scrape_s {
    gw_admin_t *a;
    gw_http_req_t *req;
    gw_admin_render_cb render;
    const char *content_type;
} admin_scrape_t;

/* On the loop that finished the collection. */
static void admin_scraped(gw_stats_snapshot_t *snap, void *arg)
{
    admin_scrape_t *sc = arg;
    char *text = NULL;
    size_t len = 0;
    int err = sc->render(sc->a, snap, &text, &len);
    gw_stats_snapshot_free(snap);
    if (err < 0) {
        NL_LOG(NL_ERROR, "metrics_render_failed", "path=%s err=%s", gw_http_req_path(sc->req),
               nl_strerror(err));
        gw_http_respond_error(sc->req, 500, "metrics rendering failed");
    } else {
        gw_http_respond_headers(sc->req, 200, sc->content_type,
                                (const char *const[]){"Cache-Control", "no-store", NULL}, text,
                                len);
    }
    free(text);
    free(sc);
}

void gw_admin_collect(gw_http_req_t *req, gw_admin_t *a, unsigned flags, gw_admin_render_cb render,
                      const char *content_type)
{
    admin_scrape_t *sc = malloc(sizeof(*sc));
    int err = sc ? 0 : -ENOMEM;
    if (sc) {
        *sc = (admin_scrape_t){.a = a, .req = req, .render = render, .content_type = content_type};
        err = gw_stats_collect_some(a->node, flags, admin_scraped, sc);
        if (err < 0)
            free(sc);
    }
    if (err == -ESHUTDOWN)
        gw_http_respond_error(req, 503, "shutting down");
    else if (err < 0)
        gw_http_respond_error(req, 500, nl_strerror(err));
}

/* The snapshot with the engine's families and the admin server's own figures. */
static int admin_render_with(gw_admin_t *a, const gw_stats_snapshot_t *snap,
                             gw_metrics_format_t format, char **out, size_t *len)
{
    gw_http_stats_t http;
    gw_http_stats(a->http, &http);
    return gw_admin_render(snap, gw_node_engine(a->node), &http, format, out, len);
}

static int admin_render_prometheus(gw_admin_t *a, const gw_stats_snapshot_t *snap, char **out,
                                   size_t *len)
{
    return admin_render_with(a, snap, GW_METRICS_PROMETHEUS, out, len);
}

static int admin_render_json(gw_admin_t *a, const gw_stats_snapshot_t *snap, char **out,
                             size_t *len)
{
    return admin_render_with(a, snap, GW_METRICS_JSON, out, len);
}

static void admin_metrics(gw_http_req_t *req, void *arg)
{
    gw_admin_collect(req, arg, 0, admin_render_prometheus, PROMETHEUS_TYPE);
}

static void admin_stats(gw_http_req_t *req, void *arg)
{
    gw_admin_collect(req, arg, 0, admin_render_json, NULL);
}

/* --- health ------------------------------------------------------------------------------- */

static void admin_healthz(gw_http_req_t *req, void *arg)
{
    NL_UNUSED(arg);
    static const char body[] = "{\"status\":\"ok\"}";
    gw_http_respond(req, 200, NULL, body, sizeof(body) - 1);
}

static void admin_readyz(gw_http_req_t *req, void *arg)
{
    gw_admin_t *a = arg;
    gw_node_t *node = a->node;
    bool is_up = gw_node_is_ready(node);
    gw_engine_t *engine = gw_node_engine(node);
    bool is_engine_ready = engine && engine->ops->is_ready(engine);
    static const char ready[] = "{\"status\":\"ready\"}";
    static const char not_ready[] = "{\"status\":\"not_ready\"}";
    /* Serving its own clients, but not reaching Redis: other nodes' messages do not arrive,
     * so new clients are better sent elsewhere. */
    static const char degraded[] = "{\"status\":\"degraded\",\"engine\":\"not_ready\"}";
    /* A node that verifies no token refuses every client: no balancer should send it any. */
    static const char no_auth[] = "{\"status\":\"not_ready\",\"reason\":\"no token secret: "
                                  "every Connect is refused\"}";
    if (is_up && !gw_node_can_authenticate(node))
        gw_http_respond(req, 503, NULL, no_auth, sizeof(no_auth) - 1);
    else if (is_up && is_engine_ready)
        gw_http_respond(req, 200, NULL, ready, sizeof(ready) - 1);
    else if (is_up)
        gw_http_respond(req, 503, NULL, degraded, sizeof(degraded) - 1);
    else
        gw_http_respond(req, 503, NULL, not_ready, sizeof(not_ready) - 1);
}

static int admin_routes(gw_http_t *http, gw_admin_t *a)
{
    int err = gw_http_route(http, "POST", "/api/publish", admin_publish, a);
    if (err == 0)
        err = gw_http_route(http, "GET", "/metrics", admin_metrics, a);
    if (err == 0)
        err = gw_http_route(http, "GET", "/api/stats", admin_stats, a);
    if (err == 0)
        err = gw_http_route(http, "GET", "/api/presence", admin_presence, a);
    if (err == 0)
        err = gw_http_route(http, "GET", "/api/online", admin_online, a);
    if (err == 0)
        err = gw_http_route(http, "GET", "/api/nodes", admin_nodes, a);
    if (err == 0)
        err = gw_admin_console_routes(http, a);
    if (err == 0)
        err = gw_http_route_public(http, "GET", "/healthz", admin_healthz, a);
    if (err == 0)
        /* Public like /healthz: load balancers probe readiness without a key. */
        err = gw_http_route_public(http, "GET", "/readyz", admin_readyz, a);
    return err;
}

/* --- beside the node ---------------------------------------------------------------------- */

/* Shutdown step 1: requests waiting are answered 503, and nothing new comes in. */
static void admin_on_stop(void *arg)
{
    gw_admin_t *a = arg;
    gw_http_stop(a->http);
}

static void admin_on_reload(void *arg, const gw_config_t *old, const gw_config_t *cfg)
{
    gw_admin_t *a = arg;
    if (cfg->admin_max_body_bytes != old->admin_max_body_bytes ||
        cfg->admin_request_timeout_ms != old->admin_request_timeout_ms ||
        cfg->admin_header_timeout_ms != old->admin_header_timeout_ms)
        gw_http_set_limits(a->http, cfg->admin_max_body_bytes, cfg->admin_request_timeout_ms,
                           cfg->admin_header_timeout_ms);
}

int gw_admin_new(gw_admin_t **out, gw_node_t *node, const gw_config_t *cfg)
{
    gw_admin_t *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->node = node;
    atomic_init(&a->console_users, -1);
    gw_http_opts_t opts = {
        .host = cfg->admin_host,
        .port = cfg->admin_port,
        .api_key = cfg->admin_api_key,
        .max_body_bytes = cfg->admin_max_body_bytes,
        .request_timeout_ms = cfg->admin_request_timeout_ms,
        .header_timeout_ms = cfg->admin_header_timeout_ms,
        .max_per_address = cfg->admin_max_per_address,
    };
    int err = gw_http_new(&a->http, &opts);
    if (err == 0)
        err = admin_routes(a->http, a);
    if (err == 0)
        err = gw_http_start(a->http);
    if (err == 0) {
        gw_node_part_t part = {
            .port_key = "admin_port",
            .port = gw_http_port(a->http),
            .on_reload = admin_on_reload,
            .on_stop = admin_on_stop,
            .arg = a,
        };
        err = gw_node_attach(node, &part);
    }
    if (err < 0) {
        NL_LOG(NL_ERROR, "admin_listen_failed", "host=%s port=%u err=%s", cfg->admin_host,
               cfg->admin_port, nl_strerror(err));
        gw_admin_free(a);
        return err;
    }
    *out = a;
    return 0;
}

void gw_admin_free(gw_admin_t *a)
{
    if (!a)
        return;
    if (a->http) {
        gw_http_stop(a->http);
        gw_http_free(a->http);
    }
    free(a);
}

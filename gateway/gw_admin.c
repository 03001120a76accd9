/*
 * gw_admin: the admin routes. See gw_admin.h.
 *
 * POST /api/publish goes to the engine with no reply loop: the channel's owner loop answers
 * the HTTP request itself (gw_http_respond is safe from any thread), so a publish costs one
 * post and no extra hop back.
 */
#include "gw_admin.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel_name.h"
#include "gw_engine.h"
#include "gw_node.h"
#include "gw_stats.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

#define PROMETHEUS_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* --- publish ------------------------------------------------------------------------------ */

/* On the channel's owner loop: the offset is known. r->ptr is the HTTP request. */
static void admin_published(const gw_engine_reply_t *r, const gw_engine_result_t *res)
{
    gw_http_req_t *req = r->ptr;
    if (res->status == -EBUSY) {
        gw_http_respond_error(req, 503, "busy: too many commands toward Redis, retry");
        return;
    }
    if (res->status < 0) {
        gw_http_respond_error(req, 500, nl_strerror(res->status));
        return;
    }
    char epoch[17];
    gw_engine_epoch_str(res->epoch, epoch);
    char body[96];
    int n = snprintf(body, sizeof(body), "{\"offset\":%" PRIu64 ",\"epoch\":\"%s\"}", res->offset,
                     epoch);
    gw_http_respond(req, 200, NULL, body, (size_t)n);
}

static void admin_publish(gw_http_req_t *req, void *arg)
{
    gw_node_t *node = arg;
    /* The decoded length, not strlen: "a%00b" must be refused, not published to "a". */
    size_t chan_len = 0;
    const char *chan = gw_http_req_query_n(req, "channel", &chan_len);
    gw_config_snap_t *snap = gw_node_config_acquire(node);
    uint32_t max_channel_bytes = snap->cfg.max_channel_bytes;
    gw_config_snap_unref(snap);
    if (!chan || gw_channel_name_check(chan, chan_len, max_channel_bytes) != GW_CHANNEL_OK) {
        gw_http_respond_error(req, 400, "bad or missing channel");
        return;
    }
    if (atomic_load_explicit(&node->is_stopping, memory_order_relaxed)) {
        gw_http_respond_error(req, 503, "shutting down");
        return;
    }
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    gw_engine_reply_t reply = {.loop = NULL, .cb = admin_published, .ptr = req};
    int err = gw_engine_publish(node->engine, chan, chan_len, body, len, &reply);
    if (err == -ESHUTDOWN)
        gw_http_respond_error(req, 503, "shutting down");
    else if (err < 0)
        gw_http_respond_error(req, 500, nl_strerror(err));
}

/* --- metrics and stats -------------------------------------------------------------------- */

static void admin_render(gw_stats_snapshot_t *snap, gw_http_req_t *req, gw_metrics_format_t fmt)
{
    char *text = NULL;
    size_t len = 0;
    int err = gw_stats_render(snap, fmt, &text, &len);
    gw_stats_snapshot_free(snap);
    if (err < 0) {
        NL_LOG(NL_ERROR, "metrics_render_failed", "err=%s", nl_strerror(err));
        gw_http_respond_error(req, 500, "metrics rendering failed");
        return;
    }
    gw_http_respond(req, 200, fmt == GW_METRICS_PROMETHEUS ? PROMETHEUS_TYPE : NULL, text, len);
    free(text);
}

static void admin_metrics_done(gw_stats_snapshot_t *snap, void *arg)
{
    admin_render(snap, arg, GW_METRICS_PROMETHEUS);
}

static void admin_stats_done(gw_stats_snapshot_t *snap, void *arg)
{
    admin_render(snap, arg, GW_METRICS_JSON);
}

static void admin_collect(gw_http_req_t *req, gw_node_t *node, gw_stats_done_cb done)
{
    int err = gw_stats_collect(node, done, req);
    if (err == -ESHUTDOWN)
        gw_http_respond_error(req, 503, "shutting down");
    else if (err < 0)
        gw_http_respond_error(req, 500, nl_strerror(err));
}

static void admin_metrics(gw_http_req_t *req, void *arg)
{
    admin_collect(req, arg, admin_metrics_done);
}

static void admin_stats(gw_http_req_t *req, void *arg)
{
    admin_collect(req, arg, admin_stats_done);
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
    gw_node_t *node = arg;
    bool is_up = atomic_load_explicit(&node->is_ready, memory_order_relaxed);
    bool is_engine_ready = node->engine && node->engine->ops->is_ready(node->engine);
    static const char ready[] = "{\"status\":\"ready\"}";
    static const char not_ready[] = "{\"status\":\"not_ready\"}";
    /* Serving its own clients, but not reaching Redis: other nodes' messages do not arrive,
     * so new clients are better sent elsewhere. */
    static const char degraded[] = "{\"status\":\"degraded\",\"engine\":\"not_ready\"}";
    if (is_up && is_engine_ready)
        gw_http_respond(req, 200, NULL, ready, sizeof(ready) - 1);
    else if (is_up)
        gw_http_respond(req, 503, NULL, degraded, sizeof(degraded) - 1);
    else
        gw_http_respond(req, 503, NULL, not_ready, sizeof(not_ready) - 1);
}

int gw_admin_register(gw_http_t *http, gw_node_t *node)
{
    int err = gw_http_route(http, "POST", "/api/publish", admin_publish, node);
    if (err == 0)
        err = gw_http_route(http, "GET", "/metrics", admin_metrics, node);
    if (err == 0)
        err = gw_http_route(http, "GET", "/api/stats", admin_stats, node);
    if (err == 0)
        err = gw_http_route_public(http, "GET", "/healthz", admin_healthz, node);
    if (err == 0)
        /* Public like /healthz: load balancers probe readiness without a key. */
        err = gw_http_route_public(http, "GET", "/readyz", admin_readyz, node);
    return err;
}

/*
 * gw_admin_console: the admin console (issue 26), a live page in the browser that herald
 * serves itself on the admin port. See gw_admin.h for the routes.
 *
 * The page, its style sheet and its script (gateway/admin/console/) are compiled into the
 * binary (gw_console_assets.h, generated at build time) and served without the API key: they
 * hold no data. The page asks the operator for the key once, keeps it in the tab's
 * sessionStorage, and sends it with every call to the data routes, which require it like the
 * rest of the API: GET /api/console once a second for the figures below, GET /api/nodes for a
 * cluster, and the existing presence, online and publish routes.
 *
 * GET /api/console is one sample of what the console draws, from one stats collection (the
 * same snapshot /metrics renders, so each figure is the /metrics family named beside it in
 * gw_admin.h). Counters stay counters: the page turns two samples into a rate with uptime_ms,
 * so a sample lost or late costs a point, not a wrong rate. Everything is per IO loop where
 * the figure is counted per loop, and summed as well.
 *
 * One figure is not collected every second: users online over several loops, where each loop
 * copies its users' names and the last one merges them, O(users) on IO loops (1.7 ms a
 * collection at 10,000 users over two loops, so some 17 ms at 100,000 if that scales). The
 * console counts them at most every GW_ADMIN_CONSOLE_USERS_MS, whoever asks, and shows the
 * last count in between; with one loop the count is at hand and always current.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gw_admin_int.h"
#include "gw_console_assets.h"
#include "netlib/nl_common.h"

/* Every console file: the page runs only its own script and style sheet, talks only to this
 * origin, is never framed, and is revalidated at each load (an upgraded herald serves its own
 * console at once). The favicon is a data: URL in the page, so the browser asks for nothing
 * else (an unknown path would need the key). */
static const char *const console_headers[] = {
    "Content-Security-Policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options",
    "nosniff",
    "Referrer-Policy",
    "no-referrer",
    "Cache-Control",
    "no-cache",
    NULL,
};

static void console_file(gw_http_req_t *req, void *arg)
{
    const gw_console_asset_t *f = arg;
    gw_http_respond_headers(req, 200, f->content_type, console_headers, f->data, f->len);
}

/* --- GET /api/console ------------------------------------------------------------------- */

static void set_u64(json_t *o, const char *key, uint64_t v)
{
    json_object_set_new(o, key, json_integer((json_int_t)v));
}

/* Sums over the loops, each also listed on its own. */
typedef struct console_totals_s {
    uint64_t connections;
    uint64_t channels;
    uint64_t subscriptions;
    uint64_t published;
    uint64_t deliveries;
    uint64_t slow_drops;
    uint64_t out_queued_bytes;
    uint64_t slow_consumers;
    uint64_t queue_depth;
} console_totals_t;

/* [{"connections", "queue_depth", "output_queued_bytes", "slow_consumers",
 * "deliveries_total"}, ...], one per IO loop, summed into t. */
static json_t *console_loops(const gw_stats_snapshot_t *snap, console_totals_t *t)
{
    json_t *loops = json_array();
    memset(t, 0, sizeof(*t));
    for (uint32_t i = 0; i < snap->n_loops; i++) {
        const gw_stats_loop_snap_t *l = &snap->loops[i];
        t->connections += l->conn.open;
        t->channels += l->engine.channels;
        t->subscriptions += l->subscriptions;
        t->published += l->engine.published;
        t->deliveries += l->fo.deliveries;
        t->slow_drops += l->fo.slow_drops;
        t->out_queued_bytes += l->conn.out_queued_bytes;
        t->slow_consumers += l->conn.over_high_water;
        t->queue_depth += l->queue_depth;
        json_t *o = json_object();
        set_u64(o, "connections", l->conn.open);
        set_u64(o, "queue_depth", l->queue_depth);
        set_u64(o, "output_queued_bytes", l->conn.out_queued_bytes);
        set_u64(o, "slow_consumers", l->conn.over_high_water);
        set_u64(o, "deliveries_total", l->fo.deliveries);
        json_array_append_new(loops, o);
    }
    return loops;
}

/* {"queue_depth", "capacity", "threads", "rejected_total"}: the worker pool. */
static json_t *console_pool(const gw_stats_snapshot_t *snap)
{
    json_t *o = json_object();
    set_u64(o, "queue_depth", snap->pool.queue_depth);
    set_u64(o, "capacity", snap->pool_capacity);
    set_u64(o, "threads", snap->pool.threads);
    set_u64(o, "rejected_total", snap->pool.rejected);
    return o;
}

/* [{"server", "up", "pending_commands", "max_pending"}]: the engine's servers (Redis); empty
 * for an engine without any. */
static json_t *console_servers(const gw_engine_t *engine)
{
    json_t *list = json_array();
    if (!engine->ops->servers)
        return list;
    gw_engine_server_t servers[GW_CONFIG_REDIS_SERVERS_MAX];
    uint32_t n = engine->ops->servers(engine, servers, GW_CONFIG_REDIS_SERVERS_MAX);
    for (uint32_t i = 0; i < n && i < GW_CONFIG_REDIS_SERVERS_MAX; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "server", json_string(servers[i].name));
        json_object_set_new(o, "up", json_boolean(servers[i].is_up));
        set_u64(o, "pending_commands", servers[i].pending);
        set_u64(o, "max_pending", servers[i].max_pending);
        json_array_append_new(list, o);
    }
    return list;
}

/* This sample's users online: counted now, or the last count (-1: none yet). */
static int64_t console_users(gw_admin_t *a, const gw_stats_snapshot_t *snap)
{
    if (snap->users_online != -ENODATA) {
        atomic_store_explicit(&a->console_users, snap->users_online, memory_order_relaxed);
        return snap->users_online;
    }
    return atomic_load_explicit(&a->console_users, memory_order_relaxed);
}

static int console_render(gw_admin_t *a, const gw_stats_snapshot_t *snap, char **out, size_t *len)
{
    const gw_engine_t *engine = gw_node_engine(a->node);
    console_totals_t t;
    json_t *loops = console_loops(snap, &t);
    json_t *j = json_object();
    set_u64(j, "time_ms", nl_wall_ms());
    set_u64(j, "uptime_ms", snap->uptime_ms);
    json_object_set_new(j, "node", json_string(gw_node_id(a->node)));
    json_object_set_new(j, "engine", json_string(engine->ops->name));
    json_object_set_new(j, "ready", json_boolean(snap->is_ready));
    json_object_set_new(j, "draining", json_boolean(snap->is_draining));
    set_u64(j, "connections", t.connections);
    set_u64(j, "max_connections", snap->max_connections);
    /* Unknown (no memory for the names) is null, as /metrics leaves the family out. */
    int64_t users = console_users(a, snap);
    json_object_set_new(j, "users_online",
                        users >= 0 ? json_integer((json_int_t)users) : json_null());
    set_u64(j, "channels", t.channels);
    set_u64(j, "subscriptions", t.subscriptions);
    set_u64(j, "publishes_total", t.published);
    set_u64(j, "deliveries_total", t.deliveries);
    set_u64(j, "slow_consumer_drops_total", t.slow_drops);
    set_u64(j, "queue_depth", t.queue_depth);
    set_u64(j, "output_queued_bytes", t.out_queued_bytes);
    set_u64(j, "slow_consumers", t.slow_consumers);
    json_object_set_new(j, "pool", console_pool(snap));
    json_object_set_new(j, "loops", loops);
    json_object_set_new(j, "engine_servers", console_servers(engine));
    /* A part that could not be made (no memory) is missing: the dump is refused then. */
    static const char *const keys[] = {"node", "engine", "pool", "loops", "engine_servers"};
    bool is_whole = j != NULL && json_array_size(loops) == snap->n_loops;
    for (size_t i = 0; is_whole && i < sizeof(keys) / sizeof(keys[0]); i++)
        is_whole = json_object_get(j, keys[i]) != NULL;
    char *text = is_whole ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text)
        return -ENOMEM;
    *out = text;
    *len = strlen(text);
    return 0;
}

static void console_data(gw_http_req_t *req, void *arg)
{
    gw_admin_t *a = arg;
    uint64_t now_ms = nl_now_ms();
    unsigned flags = GW_STATS_NO_USERS;
    if (a->console_users_asked_ms == 0 ||
        now_ms - a->console_users_asked_ms >= GW_ADMIN_CONSOLE_USERS_MS) {
        a->console_users_asked_ms = now_ms;
        flags = 0;
    }
    gw_admin_collect(req, a, flags, console_render, NULL);
}

int gw_admin_console_routes(gw_http_t *http, gw_admin_t *a)
{
    int err = 0;
    for (size_t i = 0; err == 0 && i < gw_console_n_assets; i++) {
        const gw_console_asset_t *f = &gw_console_assets[i];
        err = gw_http_route_public(http, "GET", f->path, console_file, (void *)f);
        /* The page also answers at /console/, where relative links resolve alike. */
        if (err == 0 && strcmp(f->path, "/console") == 0)
            err = gw_http_route_public(http, "GET", "/console/", console_file, (void *)f);
    }
    if (err == 0)
        err = gw_http_route(http, "GET", "/api/console", console_data, a);
    return err;
}

/*
 * gw_node: building, running and freeing a node, its config and its reload. See gw_core.h for
 * the shape; the drain and the shutdown steps are gw_node_stop.c, an IO loop's own life
 * gw_loop.c.
 *
 * Startup order matters for two reasons. Signals are blocked before the first thread starts,
 * so every thread inherits the mask and only the accept loop's signalfd sees SIGINT/SIGTERM.
 * The engine is created before the IO loop threads start (each loop calls its tick from the
 * first iteration, and the thread's creation is what makes the engine visible to it) and before
 * the listener starts (sessions call it); it posts to the loops only once work arrives. The
 * listener starts last (gw_node_listen), after whatever main.c attached (the admin API): a
 * failing admin bind then leaves no client session behind.
 */
#include "gw_core.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_config.h"
#include "gw_engine_memory.h"
#include "gw_engine_redis.h"
#include "gw_node_int.h"
#include "gw_session.h"
#include "gw_transport.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

/* --- accessors ---------------------------------------------------------------------------- */

gw_engine_t *gw_node_engine(const gw_node_t *node)
{
    return node->engine;
}

const char *gw_node_id(const gw_node_t *node)
{
    return node->node_id;
}

bool gw_node_is_ready(const gw_node_t *node)
{
    /* Acquire: a thread that sees the node ready may post to its IO loops, whose setup (on
     * their own threads, before the main thread stored is_ready) it must then see too. */
    return atomic_load_explicit(&node->is_ready, memory_order_acquire);
}

bool gw_node_can_authenticate(gw_node_t *node)
{
    gw_config_snap_t *snap = gw_node_config_acquire(node);
    bool can = snap->n_keys > 0 || snap->cfg.is_insecure;
    gw_config_snap_unref(snap);
    return can;
}

bool gw_node_is_stopping(const gw_node_t *node)
{
    return atomic_load_explicit(&node->is_stopping, memory_order_relaxed);
}

size_t gw_node_session_bytes(void)
{
    return gw_session_sizeof();
}

/* --- config ------------------------------------------------------------------------------- */

gw_config_snap_t *gw_node_config_acquire(gw_node_t *node)
{
    pthread_mutex_lock(&node->snap_lock);
    gw_config_snap_t *snap = gw_config_snap_ref(node->snap);
    pthread_mutex_unlock(&node->snap_lock);
    return snap;
}

/* One reload on its way to the IO loops: the loop that applies it last reports it. */
typedef struct config_replace_s {
    _Atomic uint32_t remaining; /* loops yet to apply it */
    gw_node_applied_cb on_applied;
    void *arg;
} config_replace_t;

/* A reloaded config on its way to one IO loop. */
typedef struct loop_config_msg_s {
    gw_loop_t *lp;
    gw_config_snap_t *snap; /* the message's reference */
    config_replace_t *rep;
} loop_config_msg_t;

static void config_replace_done_one(config_replace_t *rep)
{
    if (atomic_fetch_sub_explicit(&rep->remaining, 1, memory_order_acq_rel) != 1)
        return;
    if (rep->on_applied)
        rep->on_applied(rep->arg);
    free(rep);
}

/* On the IO loop: the swap, then the hook, then the old snapshot goes. */
static void loop_config_apply(void *arg)
{
    loop_config_msg_t *msg = arg;
    gw_loop_t *lp = msg->lp;
    gw_config_snap_t *old = lp->snap;
    lp->snap = msg->snap;
    gw_loop_config_changed(lp, &old->cfg, &lp->snap->cfg);
    gw_config_snap_unref(old);
    config_replace_done_one(msg->rep);
    free(msg);
}

int gw_node_config_replace(gw_node_t *node, gw_config_snap_t *snap, gw_node_applied_cb on_applied,
                           void *arg)
{
    /* Every message is made before anything changes, so running out of memory changes
     * nothing. */
    config_replace_t *rep = malloc(sizeof(*rep));
    loop_config_msg_t **msgs = rep ? calloc(node->n_loops, sizeof(*msgs)) : NULL;
    for (uint32_t i = 0; msgs && i < node->n_loops; i++) {
        msgs[i] = malloc(sizeof(*msgs[i]));
        if (!msgs[i]) {
            while (i-- > 0)
                free(msgs[i]);
            free(msgs);
            msgs = NULL;
        }
    }
    if (!msgs) {
        free(rep);
        gw_config_snap_unref(snap);
        return -ENOMEM;
    }
    /* One count for this function, so that the report waits for the last post too. */
    atomic_init(&rep->remaining, node->n_loops + 1);
    rep->on_applied = on_applied;
    rep->arg = arg;
    pthread_mutex_lock(&node->snap_lock);
    gw_config_snap_t *old = node->snap;
    node->snap = snap;
    pthread_mutex_unlock(&node->snap_lock);
    gw_config_snap_unref(old);
    for (uint32_t i = 0; i < node->n_loops; i++) {
        *msgs[i] = (loop_config_msg_t){
            .lp = &node->loops[i], .snap = gw_config_snap_ref(snap), .rep = rep};
        if (nl_loop_post(node->loops[i].fo.loop, loop_config_apply, msgs[i]) < 0) {
            /* That loop keeps the config it has; said loudly, since the node is now mixed. */
            NL_LOG(NL_ERROR, "reload_post_failed", "loop=%u err=%s", i, nl_strerror(-ENOMEM));
            gw_config_snap_unref(msgs[i]->snap);
            free(msgs[i]);
            config_replace_done_one(rep);
        }
    }
    free(msgs);
    config_replace_done_one(rep);
    return 0;
}

/* --- reload ------------------------------------------------------------------------------ */

/* The node-wide settings that live outside the IO loops (the log level, the attached parts):
 * cfg's values where they differ from old's. */
static void node_apply_reload(gw_node_t *node, const gw_config_t *old, const gw_config_t *cfg)
{
    if (cfg->log_level != old->log_level)
        nl_log_set_level((nl_log_level_t)cfg->log_level);

    for (uint32_t i = 0; i < node->n_parts; i++)
        if (node->parts[i].on_reload)
            node->parts[i].on_reload(node->parts[i].arg, old, cfg);
}

/* gw_node_config_replace's report: the new config is in force on every IO loop, so whoever
 * reads ev=reload_done may rely on it. Runs on the loop that applied it last. */
static void node_reload_applied(void *arg)
{
    gw_config_reload_t *r = arg;
    gw_config_reload_log_done(r);
    free(r);
}

/* SIGHUP reads the certificate files again whether or not their names changed (a rotation
 * replaces the files in place): handshakes from now on use what they hold. */
static void node_reload_tls(gw_node_t *node, const gw_config_t *cfg)
{
    if (!node->tls)
        return;
    char why[256];
    gw_tls_opts_t opts = {
        .cert_file = cfg->tls_cert_file,
        .key_file = cfg->tls_key_file,
        .is_ktls = cfg->is_tls_ktls,
    };
    char q[NL_LOG_QUOTE_MAX];
    if (!cfg->tls_cert_file[0] || gw_tls_reload(node->tls, &opts, why, sizeof(why)) < 0)
        NL_LOG(NL_ERROR, "tls_reload_failed", "msg=%s",
               cfg->tls_cert_file[0] ? nl_log_quote(q, sizeof(q), why, strlen(why))
                                     : "\"TLS cannot be turned off by a reload\"");
    else
        NL_LOG(NL_INFO, "tls_reloaded", "cert=%s",
               nl_log_quote(q, sizeof(q), cfg->tls_cert_file, strlen(cfg->tls_cert_file)));
}

static void node_set_handshake_timeout(gw_node_t *node, uint64_t timeout_ms)
{
    for (int i = 0; i < GW_NODE_LISTENERS; i++)
        if (node->listeners[i])
            gw_listener_set_handshake_timeout(node->listeners[i], timeout_ms);
}

int gw_node_reload(gw_node_t *node)
{
    gw_config_reload_t r;
    int rc = gw_config_reload(node->snap, &node->src, &r);
    if (rc < 0)
        return rc;
    node_reload_tls(node, r.snap ? &r.snap->cfg : &node->snap->cfg);
    if (!r.snap)
        return rc;
    gw_config_reload_t *report = malloc(sizeof(*report));
    if (!report) {
        gw_config_snap_unref(r.snap);
        NL_LOG(NL_ERROR, "reload_failed", "err=%s", nl_strerror(-ENOMEM));
        return -ENOMEM;
    }
    *report = r;
    report->snap = NULL;
    /* Before the IO loops get theirs, so that ev=reload_done (logged by the last loop to apply
     * it) finds everything in place. The running snapshot stays alive across the replace: the
     * node's reference goes only once the new one is in. */
    gw_config_snap_t *running = gw_config_snap_ref(node->snap);
    node_apply_reload(node, &running->cfg, &r.snap->cfg);
    const gw_config_t *wanted = &r.snap->cfg;
    /* A WebSocket message may be as large as the session's decoder takes (never less than
     * what a connected client was told). */
    if (node->listeners[GW_NODE_LISTEN_WS])
        gw_listener_set_max_message(node->listeners[GW_NODE_LISTEN_WS],
                                    (uint32_t)r.snap->frame_limit_bytes);
    /* The TLS and WebSocket handshakes accepted from now on run under the new connect_timeout,
     * as the Connect that follows them does. */
    node_set_handshake_timeout(node, wanted->connect_timeout_ms);
    rc = gw_node_config_replace(node, gw_config_snap_ref(r.snap), node_reload_applied, report);
    if (rc < 0) {
        node_set_handshake_timeout(node, running->cfg.connect_timeout_ms);
        node_apply_reload(node, wanted, &running->cfg);
        free(report);
        NL_LOG(NL_ERROR, "reload_failed", "err=%s", nl_strerror(rc));
    }
    gw_config_snap_unref(r.snap);
    gw_config_snap_unref(running);
    return rc;
}

/* --- startup ------------------------------------------------------------------------------ */

/* With pin_io_threads: the CPU for IO loop i, the i-th (wrapping round) of the CPUs this
 * process may run on, so `taskset -c 2,3 herald` pins its loops to 2 and 3. -1: no pinning. */
static int node_loop_cpu(const gw_node_t *node, uint32_t i)
{
    cpu_set_t set;
    if (!node->snap->cfg.is_pin_io_threads || sched_getaffinity(0, sizeof(set), &set) < 0)
        return -1;
    int n = CPU_COUNT(&set);
    if (n == 0)
        return -1;
    int k = (int)(i % (uint32_t)n);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set) && k-- == 0)
            return cpu;
    return -1;
}

static int node_start_loops(gw_node_t *node)
{
    for (uint32_t i = 0; i < node->n_loops; i++) {
        gw_loop_t *lp = &node->loops[i];
        char name[24];
        snprintf(name, sizeof(name), "herald-io%u", i);
        int cpu = node_loop_cpu(node, i);
        nl_loop_thread_opts_t opts = {
            .loop = {.id = (int)i},
            .name = name,
            .cpu = cpu,
            .is_pinned = cpu >= 0,
            .on_start = gw_loop_on_start,
            .on_stop = gw_loop_on_stop,
            .arg = lp,
        };
        int err = nl_loop_thread_start(&node->threads[i], &opts);
        if (err < 0)
            return err;
        node->io_loops[i] = nl_loop_thread_loop(node->threads[i]);
        if (lp->start_err < 0)
            return lp->start_err;
    }
    return 0;
}

/* Disconnect{SERVER_FULL}, delimited, into out: what nl_server sends to a client it closes
 * for want of descriptors, as max_connections does to the ones over it, so the client waits
 * for the hint instead of reconnecting at once. Returns its length; 0 if it cannot be made. */
static size_t node_refusal(uint8_t *out, size_t cap)
{
    Herald__Disconnect d = HERALD__DISCONNECT__INIT;
    d.code = HERALD__DISCONNECT__CODE__SERVER_FULL;
    d.reason = (char *)(uintptr_t) "server full"; /* packing only reads it */
    d.reconnect = true;
    d.reconnect_delay_ms = GW_RECONNECT_HINT_MS;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.body_case = HERALD__FRAME__BODY_DISCONNECT;
    f.disconnect = &d;
    nl_block_t *b = proto_frame_block(&f);
    if (!b)
        return 0;
    size_t len = nl_block_len(b) <= cap ? nl_block_len(b) : 0;
    memcpy(out, nl_block_data(b), len);
    nl_block_unref(b);
    return len;
}

/* The TLS context both listeners share, when [tls] names a certificate. */
static int node_start_tls(gw_node_t *node)
{
    const gw_config_t *cfg = &node->snap->cfg;
    if (!cfg->tls_cert_file[0])
        return 0;
    char why[256];
    gw_tls_opts_t opts = {
        .cert_file = cfg->tls_cert_file,
        .key_file = cfg->tls_key_file,
        .is_ktls = cfg->is_tls_ktls,
    };
    int err = gw_tls_new(&node->tls, &opts, why, sizeof(why));
    if (err < 0) {
        char q[NL_LOG_QUOTE_MAX];
        NL_LOG(NL_ERROR, "tls_failed", "msg=%s", nl_log_quote(q, sizeof(q), why, strlen(why)));
        return err;
    }
    if (cfg->is_tls_ktls && !gw_tls_kernel_offers_ktls())
        NL_LOG(NL_INFO, "ktls_unavailable",
               "msg=\"the kernel offers no TLS offload: OpenSSL "
               "encrypts in user space\"");
    return 0;
}

static int node_start_listener(gw_node_t *node, int which, const char *host, uint16_t port)
{
    const gw_config_t *cfg = &node->snap->cfg;
    bool is_ws = which == GW_NODE_LISTEN_WS;
    uint8_t refusal[NL_SERVER_REFUSAL_MAX];
    node->listen_ctx[which] = (gw_node_listen_ctx_t){.node = node, .is_ws = is_ws};
    gw_ws_opts_t ws = {.allowed_origins = cfg->ws_allowed_origins};
    gw_listener_opts_t opts = {
        .name = is_ws ? "ws" : "tcp",
        .kind = is_ws ? GW_LISTENER_WS : GW_LISTENER_TCP,
        .tls = node->tls,
        .ws = &ws,
        .host = host,
        .port = port,
        .reuseport = cfg->is_reuseport,
        .accept_loop = node->main_loop,
        .io_loops = node->io_loops,
        .n_io_loops = node->n_loops,
        .cbs = &gw_session_conn_cbs,
        .arg = &node->listen_ctx[which],
        .high_water_bytes = node->conn_high_water_bytes,
        .max_input_bytes = node->conn_max_input_bytes,
        .max_message_bytes = (uint32_t)node->snap->frame_limit_bytes,
        .handshake_timeout_ms = cfg->connect_timeout_ms,
        .max_fd = node->client_fd_line,
        .refusal = refusal,
        .refusal_len = is_ws ? 0 : node_refusal(refusal, sizeof(refusal)),
    };
    return gw_listener_new(&node->listeners[which], &opts);
}

static int node_start_server(gw_node_t *node)
{
    const gw_config_t *cfg = &node->snap->cfg;
    node->conn_high_water_bytes = cfg->output_high_water_bytes;
    /* A whole frame of the largest size, its prefix, and a little slack. */
    node->conn_max_input_bytes = cfg->max_frame_bytes + PROTO_VARINT_MAX_BYTES + 64;
    node->client_fd_line = gw_listener_fd_line();
    int err = node_start_tls(node);
    if (err == 0 && cfg->ws_listen[0]) {
        char host[GW_CONFIG_HOST_MAX];
        uint16_t port = 0;
        err =
            gw_config_parse_hostport(cfg->ws_listen, host, sizeof(host), &port) == 0 ? 0 : -EINVAL;
        if (err == 0)
            err = node_start_listener(node, GW_NODE_LISTEN_WS, host, port);
        if (err == 0)
            node->ws_port = gw_listener_port(node->listeners[GW_NODE_LISTEN_WS]);
    }
    if (err == 0)
        err = node_start_listener(node, GW_NODE_LISTEN_TCP, cfg->listen_host, cfg->listen_port);
    if (err == 0)
        node->port = gw_listener_port(node->listeners[GW_NODE_LISTEN_TCP]);
    return err;
}

void gw_node_close_listeners(gw_node_t *node)
{
    for (int i = 0; i < GW_NODE_LISTENERS; i++)
        gw_listener_close(node->listeners[i]);
}

/* io_threads, or 0 for one loop per CPU herald may run on: its affinity set, which a cpuset,
 * a container's CPU list or taskset may make smaller than the machine. */
static uint32_t node_loop_count(const gw_config_t *cfg)
{
    cpu_set_t set;
    long n = cfg->io_threads;
    if (n == 0)
        n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                         : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > GW_NODE_MAX_LOOPS) {
        /* Only the default can get here (the config refuses more): the engine's per-channel
         * loop mask has 64 bits. */
        NL_LOG(NL_WARN, "io_threads_capped", "cpus=%ld io_threads=%d", n, GW_NODE_MAX_LOOPS);
        n = GW_NODE_MAX_LOOPS;
    }
    return (uint32_t)n;
}

static int node_alloc(gw_node_t *node, const gw_config_t *cfg)
{
    int err = gw_config_snap_new(&node->snap, cfg, NULL);
    if (err < 0)
        return err;
    node->start_ms = nl_now_ms();
    if (cfg->node_id[0])
        snprintf(node->node_id, sizeof(node->node_id), "%s", cfg->node_id);
    else if (gethostname(node->node_id, sizeof(node->node_id) - 1) < 0)
        snprintf(node->node_id, sizeof(node->node_id), "herald");
    node->n_loops = node_loop_count(cfg);
    node->loops = calloc(node->n_loops, sizeof(*node->loops));
    node->io_loops = calloc(node->n_loops, sizeof(*node->io_loops));
    node->threads = calloc(node->n_loops, sizeof(*node->threads));
    if (!node->loops || !node->io_loops || !node->threads)
        return -ENOMEM;
    err = gw_fanout_hub_init(&node->hub, node->n_loops);
    if (err < 0)
        return err;
    for (uint32_t i = 0; i < node->n_loops; i++) {
        gw_loop_t *lp = &node->loops[i];
        lp->node = node;
        /* Taken before the thread starts, which orders the loop's reads after this. */
        lp->snap = gw_config_snap_ref(node->snap);
    }
    node->host = (gw_engine_host_t){
        .fanout = &node->hub,
        .cfg = &node->snap->cfg,
        .node_id = node->node_id,
        .ops = &gw_loop_host_ops,
        .arg = node,
    };
    return nl_loop_new(&node->main_loop, &(nl_loop_opts_t){.id = -1});
}

/* The engines a node may run, by [engine] type. */
static const gw_engine_type_t node_engines[] = {
    {"memory", gw_engine_memory_new},
    {"redis", gw_engine_redis_new},
};

static int node_new_engine(gw_node_t *node)
{
    const char *name = gw_engine_kind_str(node->snap->cfg.engine);
    for (size_t i = 0; i < sizeof(node_engines) / sizeof(node_engines[0]); i++)
        if (strcmp(node_engines[i].name, name) == 0)
            return node_engines[i].create(&node->engine, &node->host);
    NL_LOG(NL_ERROR, "engine_unknown", "engine=%s", name);
    return -EINVAL;
}

static int node_start(gw_node_t *node)
{
    const gw_config_t *cfg = &node->snap->cfg;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    /* writev to a socket the peer closed must fail with EPIPE, not kill the process. */
    signal(SIGPIPE, SIG_IGN);
    int err = nl_signal_block(sigs, 3);
    if (err == 0)
        err = nl_signal_new(&node->sig, node->main_loop, sigs, 3, gw_node_on_signal, node);
    if (err == 0)
        err = nl_pool_new(&node->pool, &(nl_pool_opts_t){
                                           .name = "herald-auth",
                                           .core_threads = cfg->worker_threads,
                                           .queue_capacity = cfg->worker_queue_capacity,
                                       });
    if (err == 0)
        err = node_new_engine(node);
    if (err == 0)
        err = node_start_loops(node);
    return err;
}

int gw_node_new(gw_node_t **out, const gw_config_t *cfg, const gw_config_source_t *src)
{
    gw_node_t *node = calloc(1, sizeof(*node));
    if (!node)
        return -ENOMEM;
    pthread_mutex_init(&node->snap_lock, NULL);
    if (src)
        node->src = *src;
    int err = node_alloc(node, cfg);
    if (err == 0)
        err = node_start(node);
    if (err < 0) {
        gw_node_free(node);
        return err;
    }
    *out = node;
    return 0;
}

int gw_node_attach(gw_node_t *node, const gw_node_part_t *part)
{
    if (node->n_parts == GW_NODE_PARTS_MAX)
        return -ENOSPC;
    node->parts[node->n_parts++] = *part;
    return 0;
}

int gw_node_listen(gw_node_t *node)
{
    int err = node_start_server(node);
    if (err < 0)
        return err;
    /* Ready before the line that says so: whoever reads "listening" (an operator, a test's
     * harness) may ask /readyz at once. */
    atomic_store(&node->is_ready, true);
    if (node->snap->cfg.is_insecure)
        NL_LOG(NL_WARN, "insecure_mode",
               "msg=\"tokens are NOT verified: any client may connect as any user; demos and "
               "tests only\"");
    /* admin_port right behind port: scripts read the two together (lg_herald.sh). */
    char parts[128] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < node->n_parts && used < sizeof(parts); i++)
        used += (size_t)snprintf(parts + used, sizeof(parts) - used, " %s=%u",
                                 node->parts[i].port_key, node->parts[i].port);
    if (node->ws_port && used < sizeof(parts))
        (void)snprintf(parts + used, sizeof(parts) - used, " ws_port=%u", node->ws_port);
    NL_LOG(NL_INFO, "listening", "port=%u%s io_threads=%u pinned=%s engine=%s node=%s tls=%s",
           node->port, parts, node->n_loops, node_loop_cpu(node, 0) >= 0 ? "yes" : "no",
           node->engine->ops->name, node->node_id, node->tls ? "on" : "off");
    return 0;
}

int gw_node_run(gw_node_t *node)
{
    int err = nl_loop_run(node->main_loop);
    if (err < 0)
        return err;
    return node->exit_status;
}

void gw_node_free(gw_node_t *node)
{
    if (!node)
        return;
    gw_node_close_listeners(node);
    if (node->pool)
        nl_pool_shutdown(node->pool, NL_POOL_DISCARD);
    /* Only reached with loops still running on a failed start (no sessions yet) or after
     * node_finish stopped them. */
    for (uint32_t i = 0; node->threads && i < node->n_loops; i++)
        if (node->threads[i])
            (void)nl_loop_thread_stop(node->threads[i]);
    if (node->sig)
        nl_signal_close(node->sig);
    if (node->drain_timer)
        nl_timer_close(node->drain_timer, NULL);
    if (node->main_loop) {
        /* Closed handles are freed at the end of an iteration. */
        (void)nl_loop_run_once(node->main_loop, 0);
        int err = nl_loop_free(node->main_loop);
        if (err < 0)
            NL_LOG(NL_ERROR, "main_loop_leak", "err=%s", nl_strerror(err));
    }
    gw_engine_free(node->engine);
    nl_pool_free(node->pool);
    /* What the listeners' connections shared: every IO loop has stopped. */
    for (int i = 0; i < GW_NODE_LISTENERS; i++)
        gw_listener_free(node->listeners[i]);
    gw_tls_free(node->tls);
    /* Every thread that could hold a reference has stopped; what the pool or a loop queue
     * still held was dropped as they finished. */
    for (uint32_t i = 0; node->loops && i < node->n_loops; i++)
        gw_config_snap_unref(node->loops[i].snap);
    gw_config_snap_unref(node->snap);
    pthread_mutex_destroy(&node->snap_lock);
    free(node->threads);
    free(node->io_loops);
    free(node->loops);
    free(node);
}

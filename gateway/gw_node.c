/*
 * gw_node: building, running and stopping a node. See gw_node.h for the shape and the
 * shutdown sequence.
 *
 * Startup order matters for two reasons. Signals are blocked before the first thread starts,
 * so every thread inherits the mask and only the accept loop's signalfd sees SIGINT/SIGTERM.
 * The engine is created before the IO loop threads start (each loop calls its tick from the
 * first iteration, and the thread's creation is what makes the engine visible to it) and before
 * the listener starts (sessions call it); it posts to the loops only once work arrives.
 *
 * The shutdown steps, the drain's included, run on the accept loop as a small state machine:
 * each step posts one closure to every IO loop, each loop answers by posting back, and the
 * last answer starts the next step. Each kind of answer has its own function and is ignored
 * outside its step, so an answer still on its way when a second signal cuts a drain short is
 * not counted for the steps that follow. Nothing blocks the accept loop except gw_http_stop
 * and nl_pool_shutdown joining their own threads.
 */
#include "gw_node.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gw_admin.h"
#include "gw_reload.h"
#include "gw_session.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "proto_frame.h"

enum {
    NODE_RUNNING = 0,
    NODE_DRAIN_MARK = 1,       /* drain step D1 */
    NODE_DRAINING = 2,         /* drain step D2 */
    NODE_HANDING_OVER = 3,     /* step 1's round: fan-out batches posted */
    NODE_CLOSING_SESSIONS = 4, /* step 2 */
    NODE_QUIESCING = 5,        /* step 3 */
    NODE_STOPPED = 6,
};

/* --- per-loop state ----------------------------------------------------------------------- */

int gw_loop_post(gw_loop_t *from, uint32_t target, nl_loop_post_cb fn, void *arg)
{
    from->cross_posts++;
    return nl_loop_post(from->node->loops[target].loop, fn, arg);
}

int gw_loop_post_to(gw_loop_t *from, nl_loop_t *target, nl_loop_post_cb fn, void *arg)
{
    from->cross_posts++;
    return nl_loop_post(target, fn, arg);
}

static void loop_before_sleep(nl_loop_t *loop, void *arg)
{
    gw_loop_t *lp = arg;
    gw_fanout_flush(lp);
    gw_fanout_flush_done(lp);
    lp->node->engine->ops->tick(lp->node->engine, lp->index);
    nl_loop_stats_t st;
    nl_loop_get_stats(loop, &st);
    nl_hist_record_local(&lp->stats.loop_lag_us, st.last_lag_us);
}

/* On the new IO thread, before its loop runs. A failure is left in start_err for
 * gw_node_new, which reads it after nl_loop_thread_start returned. */
static int loop_setup(nl_loop_t *loop, gw_loop_t *lp)
{
    const gw_config_t *cfg = gw_loop_cfg(lp);
    lp->loop = loop;
    nl_loop_set_data(loop, lp);
    gw_loop_config_changed(lp, NULL, cfg);
    nl_buf_init(&lp->scratch, 0);
    gw_stats_init(&lp->stats);
    nl_conn_set_batch_sends(loop, cfg->is_batch_sends);
    int err = gw_sub_index_init(&lp->subs, &gw_session_sub_cbs, lp);
    if (err < 0)
        return err;
    err = gw_chantab_init(&lp->recovering);
    if (err < 0)
        goto fail_subs;
    err = gw_fanout_init(&lp->fanout, lp->node->n_loops);
    if (err < 0)
        goto fail_subs;
    uint64_t shortest = cfg->connect_timeout_ms < cfg->idle_timeout_ms ? cfg->connect_timeout_ms
                                                                       : cfg->idle_timeout_ms;
    uint64_t longest = cfg->connect_timeout_ms > cfg->idle_timeout_ms ? cfg->connect_timeout_ms
                                                                      : cfg->idle_timeout_ms;
    err = gw_heartbeat_init(&lp->hb, loop, gw_heartbeat_tick_ms(shortest), longest,
                            gw_session_on_deadline, lp);
    if (err < 0)
        goto fail_fanout;
    err = gw_presence_loop_init(lp);
    if (err < 0)
        goto fail_hb;
    err = nl_loop_add_before_sleep(loop, loop_before_sleep, lp);
    if (err < 0)
        goto fail_presence;
    return 0;
fail_presence:
    gw_presence_loop_deinit(lp);
fail_hb:
    gw_heartbeat_deinit(&lp->hb);
fail_fanout:
    gw_fanout_deinit(&lp->fanout);
fail_subs:
    gw_session_recover_deinit(lp);
    gw_sub_index_deinit(&lp->subs);
    return err;
}

static void loop_on_start(nl_loop_t *loop, void *arg)
{
    gw_loop_t *lp = arg;
    lp->start_err = loop_setup(loop, lp);
}

static void loop_on_stop(nl_loop_t *loop, void *arg)
{
    NL_UNUSED(loop);
    gw_loop_t *lp = arg;
    if (lp->start_err < 0)
        return;
    gw_drain_stop(lp);
    if (gw_heartbeat_count(&lp->hb) > 0) {
        /* Sessions are closed in shutdown step 2; reaching here with some open is a bug. Their
         * on_close would touch the state freed below, so leak it rather than crash. */
        NL_LOG(NL_ERROR, "loop_stop_with_sessions", "sessions=%zu", gw_heartbeat_count(&lp->hb));
        return;
    }
    gw_presence_loop_deinit(lp);
    gw_heartbeat_deinit(&lp->hb);
    gw_fanout_deinit(&lp->fanout);
    gw_sub_index_deinit(&lp->subs);
    gw_session_recover_deinit(lp);
    nl_buf_deinit(&lp->scratch);
    free(lp->flush_pub_ns);
    lp->flush_pub_ns = NULL;
    free(lp->leaving);
    lp->leaving = NULL;
    lp->n_leaving = 0;
    lp->cap_leaving = 0;
    lp->n_flush_pub = 0;
    lp->cap_flush_pub = 0;
}

/* --- shutdown ----------------------------------------------------------------------------- */

static void node_step(gw_node_t *node);

/* On the accept loop: one loop answered the current step. */
static void node_on_ack(void *arg)
{
    gw_loop_t *lp = arg;
    gw_node_t *node = lp->node;
    if (++node->stop_acks == node->n_loops)
        node_step(node);
}

static void loop_ack(gw_loop_t *lp)
{
    lp->acked_cross_posts = lp->cross_posts;
    if (nl_loop_post(lp->node->main_loop, node_on_ack, lp) < 0)
        NL_ASSERT(!"shutdown ack lost"); /* the node could never finish stopping */
}

static void loop_ack_run(void *arg)
{
    loop_ack(arg);
}

/* Step 1's round on an IO loop: posts the fan-out batches it holds, then answers. A message
 * the node answered for before the stop (its owner loop ran it, so this post comes after it)
 * is then queued on every subscriber's loop ahead of that loop's step 2. */
static void loop_hand_over(void *arg)
{
    gw_loop_t *lp = arg;
    gw_fanout_flush(lp);
    loop_ack(lp);
}

/* Step 2 on an IO loop: Disconnect{SHUTDOWN} and close every session. Their on_close runs at
 * the end of this iteration, so the answer is posted from the next one. The answers made in
 * this iteration (queued for its flush) go out first: queued, they would hold the Disconnect
 * behind them, and the forced close drops what is queued. */
static void loop_close_sessions(void *arg)
{
    gw_loop_t *lp = arg;
    lp->is_stopping = true;
    gw_drain_stop(lp);
    nl_conn_flush_loop(lp->loop);
    gw_session_close_all(lp);
    if (nl_loop_post(lp->loop, loop_ack_run, lp) < 0)
        loop_ack(lp);
}

static void node_broadcast(gw_node_t *node, nl_loop_post_cb fn)
{
    node->stop_acks = 0;
    for (uint32_t i = 0; i < node->n_loops; i++)
        if (nl_loop_post(node->loops[i].loop, fn, &node->loops[i]) < 0)
            NL_ASSERT(!"shutdown post lost");
}

static void node_finish(gw_node_t *node)
{
    /* The engine's own thread (Redis) posts to the loops: it stops before they do, and what it
     * posted before is already queued ahead of their stop. */
    if (node->engine && node->engine->ops->detach)
        node->engine->ops->detach(node->engine);
    for (uint32_t i = 0; i < node->n_loops; i++) {
        int err = nl_loop_thread_stop(node->threads[i]);
        node->threads[i] = NULL;
        if (err < 0) {
            NL_LOG(NL_ERROR, "loop_stop_failed", "loop=%u err=%s", i, nl_strerror(err));
            node->exit_status = err;
        }
    }
    if (node->sig) {
        nl_signal_close(node->sig);
        node->sig = NULL;
    }
    node->stop_step = NODE_STOPPED;
    NL_LOG(NL_INFO, "shutdown_done", "status=%d", node->exit_status);
    nl_loop_stop(node->main_loop);
}

/* Quiescence: a round in which no loop posted to another since the previous round means
 * every leave, batch and reply in flight has landed (see gw_node.h). */
static void node_step(gw_node_t *node)
{
    if (node->stop_step == NODE_HANDING_OVER) {
        node->stop_step = NODE_CLOSING_SESSIONS;
        node_broadcast(node, loop_close_sessions);
        return;
    }
    uint64_t posts = 0;
    for (uint32_t i = 0; i < node->n_loops; i++)
        posts += node->loops[i].acked_cross_posts;
    if (node->stop_step == NODE_CLOSING_SESSIONS || posts != node->stop_posts_seen) {
        node->stop_step = NODE_QUIESCING;
        node->stop_posts_seen = posts;
        node_broadcast(node, loop_ack_run);
        return;
    }
    node_finish(node);
}

void gw_node_stop(gw_node_t *node)
{
    if (node->stop_step >= NODE_HANDING_OVER)
        return;
    if (node->drain_timer) {
        nl_timer_close(node->drain_timer, NULL);
        node->drain_timer = NULL;
    }
    node->stop_step = NODE_HANDING_OVER;
    atomic_store(&node->is_ready, false);
    atomic_store(&node->is_draining, false);
    atomic_store(&node->is_stopping, true);
    if (node->server) {
        nl_server_close(node->server);
        node->server = NULL;
    }
    if (node->http)
        gw_http_stop(node->http);
    if (node->pool)
        nl_pool_shutdown(node->pool, NL_POOL_DISCARD);
    node_broadcast(node, loop_hand_over);
}

/* --- drain -------------------------------------------------------------------------------- */

static void node_post_all(gw_node_t *node, nl_loop_post_cb fn)
{
    for (uint32_t i = 0; i < node->n_loops; i++)
        if (nl_loop_post(node->loops[i].loop, fn, &node->loops[i]) < 0)
            NL_ASSERT(!"drain post lost"); /* the drain could not finish but by its timeout */
}

static void node_drain_end(gw_node_t *node, bool is_forced)
{
    NL_LOG(NL_INFO, "drain_end", "elapsed_ms=%" PRIu64 " forced=%s sessions_left=%" PRIu64,
           nl_now_ms() - node->drain_start_ms, is_forced ? "true" : "false",
           atomic_load_explicit(&node->connections, memory_order_relaxed));
    gw_node_stop(node);
}

/* On the accept loop: the window and the grace have passed with sessions still open. */
static void node_on_drain_timeout(nl_timer_t *t, void *arg)
{
    NL_UNUSED(t);
    gw_node_t *node = arg;
    if (node->stop_step == NODE_DRAIN_MARK || node->stop_step == NODE_DRAINING)
        node_drain_end(node, true);
}

/* On the accept loop: a loop has no session left (step D2 answered). */
static void node_on_drained(void *arg)
{
    gw_loop_t *lp = arg;
    gw_node_t *node = lp->node;
    if (node->stop_step == NODE_DRAINING && ++node->drain_acks == node->n_loops)
        node_drain_end(node, false);
}

/* gw_drain's on_drained, on an IO loop. A lost answer leaves the node to its drain timeout. */
static void loop_drained(gw_loop_t *lp)
{
    if (nl_loop_post(lp->node->main_loop, node_on_drained, lp) < 0)
        NL_LOG(NL_ERROR, "drain_answer_lost", "loop=%u err=%s", lp->index, nl_strerror(-ENOMEM));
}

/* Step D2 on an IO loop. */
static void loop_drain_start(void *arg)
{
    gw_loop_t *lp = arg;
    int err = gw_drain_start(lp, lp->node->drain_window_ms, loop_drained);
    if (err < 0) {
        /* No timer: the stop that follows closes this loop's sessions at once. */
        NL_LOG(NL_ERROR, "drain_start_failed", "loop=%u err=%s", lp->index, nl_strerror(err));
        loop_drained(lp);
    }
}

/* On the accept loop: a loop answered step D1. */
static void node_on_marked(void *arg)
{
    gw_loop_t *lp = arg;
    gw_node_t *node = lp->node;
    if (node->stop_step != NODE_DRAIN_MARK || ++node->drain_acks < node->n_loops)
        return;
    node->stop_step = NODE_DRAINING;
    node->drain_acks = 0;
    node_post_all(node, loop_drain_start);
}

static void loop_marked(void *arg)
{
    gw_loop_t *lp = arg;
    if (nl_loop_post(lp->node->main_loop, node_on_marked, lp) < 0)
        NL_LOG(NL_ERROR, "drain_answer_lost", "loop=%u err=%s", lp->index, nl_strerror(-ENOMEM));
}

/* Step D1 on an IO loop: from now on it refuses new connections. The answer leaves from the
 * next iteration, after this one's before-sleep posted its fan-out batches (see gw_node.h). */
static void loop_drain_mark(void *arg)
{
    gw_loop_t *lp = arg;
    lp->is_draining = true;
    if (nl_loop_post(lp->loop, loop_marked, lp) < 0)
        loop_marked(lp);
}

static void node_drain_begin(gw_node_t *node, const char *signal_name)
{
    node->drain_window_ms = node->snap->cfg.drain_ms;
    node->drain_start_ms = nl_now_ms();
    int err = nl_timer_new(&node->drain_timer, node->main_loop, node_on_drain_timeout, node);
    if (err == 0)
        err = nl_timer_start(node->drain_timer, node->drain_window_ms + GW_NODE_DRAIN_GRACE_MS, 0);
    if (err < 0) {
        /* Without the timeout a stuck loop could hold the node forever: stop at once. */
        NL_LOG(NL_ERROR, "drain_failed", "err=%s", nl_strerror(err));
        gw_node_stop(node);
        return;
    }
    /* Refused and not ready before the line is logged, so that whoever sees it can rely on
     * both. */
    if (node->server) {
        nl_server_close(node->server);
        node->server = NULL;
    }
    atomic_store(&node->is_ready, false);
    atomic_store(&node->is_draining, true);
    node->stop_step = NODE_DRAIN_MARK;
    node->drain_acks = 0;
    NL_LOG(NL_INFO, "drain_begin", "signal=%s window_ms=%" PRIu64 " grace_ms=%u sessions=%" PRIu64,
           signal_name, node->drain_window_ms, GW_NODE_DRAIN_GRACE_MS,
           atomic_load_explicit(&node->connections, memory_order_relaxed));
    node_post_all(node, loop_drain_mark);
}

static void node_on_signal(nl_signal_t *s, int signum, void *arg)
{
    NL_UNUSED(s);
    gw_node_t *node = arg;
    if (signum == SIGHUP) {
        if (node->stop_step == NODE_RUNNING)
            (void)gw_reload_run(node);
        else
            NL_LOG(NL_WARN, "reload_ignored", "reason=stopping");
        return;
    }
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
    if (node->stop_step == NODE_RUNNING && node->snap->cfg.drain_ms > 0) {
        node_drain_begin(node, name);
        return;
    }
    if (node->stop_step >= NODE_HANDING_OVER)
        return; /* already stopping at once */
    NL_LOG(NL_INFO, "shutdown_begin", "signal=%s during_drain=%s", name,
           node->stop_step == NODE_RUNNING ? "false" : "true");
    gw_node_stop(node);
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
        if (nl_loop_post(node->loops[i].loop, loop_config_apply, msgs[i]) < 0) {
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

/* The values a loop keeps copies of, for its delivery path. (Add the loop's other reactions to
 * a reload here; see gw_node.h.) */
void gw_loop_config_changed(gw_loop_t *lp, const gw_config_t *old, const gw_config_t *cfg)
{
    lp->slow_policy = (uint8_t)cfg->slow_consumer;
    lp->high_water_bytes = cfg->output_high_water_bytes;
    /* This loop's engine shard re-applies the history rules to the channels it holds; at the
     * loop's start (old NULL) it has them from its creation. */
    gw_engine_t *engine = lp->node->engine;
    if (old && (strcmp(old->history_rules, cfg->history_rules) != 0 ||
                old->history_max_bytes != cfg->history_max_bytes))
        engine->ops->reconfigure(engine, lp->index, cfg);
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
            .on_start = loop_on_start,
            .on_stop = loop_on_stop,
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

/* Descriptors kept from client connections for the rest of the process: the admin server's
 * connections (libmicrohttpd's limit, 64), its listener and a few to spare. Without them a
 * crowd of clients up to RLIMIT_NOFILE left libmicrohttpd unable to accept its first
 * connection, which it answers by busy-waiting: a whole core, a log line per try (2.1 million
 * lines in 5 s) and no answer to /healthz until clients left. At most a quarter of a small
 * limit, so that a node under a tiny RLIMIT_NOFILE still takes clients. */
#define NODE_FD_RESERVE 80

/* The lowest descriptor number a client connection may not have (nl_server's max_fd), or 0
 * when RLIMIT_NOFILE is unknown or unlimited. */
static int node_client_fd_line(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (rlim_t)INT_MAX)
        return 0;
    int limit = (int)rl.rlim_cur;
    int reserve = NODE_FD_RESERVE < limit / 4 ? NODE_FD_RESERVE : limit / 4;
    NL_LOG(NL_INFO, "fd_reserve", "nofile=%d reserved=%d", limit, reserve);
    return limit - reserve;
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

static int node_start_server(gw_node_t *node)
{
    const gw_config_t *cfg = &node->snap->cfg;
    uint8_t refusal[NL_SERVER_REFUSAL_MAX];
    node->conn_high_water_bytes = cfg->output_high_water_bytes;
    /* A whole frame of the largest size, its prefix, and a little slack. */
    node->conn_max_input_bytes = cfg->max_frame_bytes + PROTO_VARINT_MAX_BYTES + 64;
    nl_server_opts_t opts = {
        .host = cfg->listen_host,
        .port = cfg->listen_port,
        .accept_loop = node->main_loop,
        .io_loops = node->io_loops,
        .io_loop_count = node->n_loops,
        .reuseport = cfg->is_reuseport,
        .cbs = &gw_session_conn_cbs,
        .arg = node,
        .high_water_bytes = node->conn_high_water_bytes,
        .max_input_bytes = node->conn_max_input_bytes,
        .max_fd = node_client_fd_line(),
        .refusal = refusal,
        .refusal_len = node_refusal(refusal, sizeof(refusal)),
    };
    int err = nl_server_new(&node->server, &opts);
    if (err < 0) {
        NL_LOG(NL_ERROR, "listen_failed", "host=%s port=%u err=%s", cfg->listen_host,
               cfg->listen_port, nl_strerror(err));
        return err;
    }
    node->port = nl_server_port(node->server);
    return nl_server_start(node->server);
}

static int node_start_admin(gw_node_t *node)
{
    const gw_config_t *cfg = &node->snap->cfg;
    if (!cfg->is_admin_enabled)
        return 0;
    gw_http_opts_t opts = {
        .host = cfg->admin_host,
        .port = cfg->admin_port,
        .api_key = cfg->admin_api_key,
        .max_body_bytes = cfg->admin_max_body_bytes,
        .request_timeout_ms = cfg->admin_request_timeout_ms,
    };
    int err = gw_http_new(&node->http, &opts);
    if (err == 0)
        err = gw_admin_register(node->http, node);
    if (err == 0)
        err = gw_http_start(node->http);
    if (err < 0) {
        NL_LOG(NL_ERROR, "admin_listen_failed", "host=%s port=%u err=%s", cfg->admin_host,
               cfg->admin_port, nl_strerror(err));
        return err;
    }
    node->admin_port = gw_http_port(node->http);
    return 0;
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
    for (uint32_t i = 0; i < node->n_loops; i++) {
        gw_loop_t *lp = &node->loops[i];
        lp->node = node;
        lp->index = i;
        /* Taken before the thread starts, which orders the loop's reads after this. */
        lp->snap = gw_config_snap_ref(node->snap);
    }
    return nl_loop_new(&node->main_loop, &(nl_loop_opts_t){.id = -1});
}

static int node_start(gw_node_t *node)
{
    const gw_config_t *cfg = &node->snap->cfg;
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    /* writev to a socket the peer closed must fail with EPIPE, not kill the process. */
    signal(SIGPIPE, SIG_IGN);
    int err = nl_signal_block(sigs, 3);
    if (err == 0)
        err = nl_signal_new(&node->sig, node->main_loop, sigs, 3, node_on_signal, node);
    if (err == 0)
        err = nl_pool_new(&node->pool, &(nl_pool_opts_t){
                                           .name = "herald-auth",
                                           .core_threads = cfg->worker_threads,
                                           .queue_capacity = cfg->worker_queue_capacity,
                                       });
    if (err == 0)
        err = cfg->engine == GW_ENGINE_REDIS ? gw_engine_redis_new(&node->engine, node)
                                             : gw_engine_memory_new(&node->engine, node);
    if (err == 0)
        err = node_start_loops(node);
    /* Admin before the listener: a failing admin bind then leaves no client session behind. */
    if (err == 0)
        err = node_start_admin(node);
    if (err == 0)
        err = node_start_server(node);
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
    /* Ready before the line that says so: whoever reads "listening" (an operator, a test's
     * harness) may ask /readyz at once. */
    atomic_store(&node->is_ready, true);
    if (cfg->is_insecure)
        NL_LOG(NL_WARN, "insecure_mode",
               "msg=\"tokens are NOT verified: any client may connect as any user; demos and "
               "tests only\"");
    NL_LOG(NL_INFO, "listening", "port=%u admin_port=%u io_threads=%u pinned=%s engine=%s node=%s",
           node->port, node->admin_port, node->n_loops, node_loop_cpu(node, 0) >= 0 ? "yes" : "no",
           node->engine->ops->name, node->node_id);
    *out = node;
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
    if (node->server)
        nl_server_close(node->server);
    if (node->http)
        gw_http_stop(node->http);
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
    gw_http_free(node->http);
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

/*
 * gw_node_stop: how a node ends: signals, the drain (SIGTERM's first answer) and the shutdown
 * steps. See gw_core.h for the sequence.
 *
 * The steps, the drain's included, run on the accept loop as a small state machine: each step
 * posts one closure to every IO loop, each loop answers by posting back, and the last answer
 * starts the next step. Each kind of answer has its own function and is ignored outside its
 * step, so an answer still on its way when a second signal cuts a drain short is not counted
 * for the steps that follow. Nothing blocks the accept loop except the attached parts' on_stop
 * (the admin API joins its thread) and nl_pool_shutdown joining its own threads.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>

#include "gw_node_int.h"
#include "gw_session.h"
#include "netlib/nl_common.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_log.h"

enum {
    NODE_RUNNING = 0,
    NODE_DRAIN_MARK = 1,       /* drain step D1 */
    NODE_DRAINING = 2,         /* drain step D2 */
    NODE_HANDING_OVER = 3,     /* step 1's round: fan-out batches posted */
    NODE_CLOSING_SESSIONS = 4, /* step 2 */
    NODE_QUIESCING = 5,        /* step 3 */
    NODE_STOPPED = 6,
};

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
    lp->acked_posts = lp->fo.posts;
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
    gw_fanout_flush(&lp->fo);
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
    nl_conn_flush_loop(lp->fo.loop);
    gw_session_close_all(lp);
    if (nl_loop_post(lp->fo.loop, loop_ack_run, lp) < 0)
        loop_ack(lp);
}

static void node_broadcast(gw_node_t *node, nl_loop_post_cb fn)
{
    node->stop_acks = 0;
    for (uint32_t i = 0; i < node->n_loops; i++)
        if (nl_loop_post(node->loops[i].fo.loop, fn, &node->loops[i]) < 0)
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
 * every leave, batch and reply in flight has landed (see gw_core.h). */
static void node_step(gw_node_t *node)
{
    if (node->stop_step == NODE_HANDING_OVER) {
        node->stop_step = NODE_CLOSING_SESSIONS;
        node_broadcast(node, loop_close_sessions);
        return;
    }
    uint64_t posts = 0;
    for (uint32_t i = 0; i < node->n_loops; i++)
        posts += node->loops[i].acked_posts;
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
    gw_node_close_listeners(node);
    for (uint32_t i = 0; i < node->n_parts; i++)
        if (node->parts[i].on_stop)
            node->parts[i].on_stop(node->parts[i].arg);
    if (node->pool)
        nl_pool_shutdown(node->pool, NL_POOL_DISCARD);
    node_broadcast(node, loop_hand_over);
}

/* --- drain -------------------------------------------------------------------------------- */

static void node_post_all(gw_node_t *node, nl_loop_post_cb fn)
{
    for (uint32_t i = 0; i < node->n_loops; i++)
        if (nl_loop_post(node->loops[i].fo.loop, fn, &node->loops[i]) < 0)
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
        NL_LOG(NL_ERROR, "drain_answer_lost", "loop=%u err=%s", lp->fo.index, nl_strerror(-ENOMEM));
}

/* Step D2 on an IO loop. */
static void loop_drain_start(void *arg)
{
    gw_loop_t *lp = arg;
    int err = gw_drain_start(lp, lp->node->drain_window_ms, loop_drained);
    if (err < 0) {
        /* No timer: the stop that follows closes this loop's sessions at once. */
        NL_LOG(NL_ERROR, "drain_start_failed", "loop=%u err=%s", lp->fo.index, nl_strerror(err));
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
        NL_LOG(NL_ERROR, "drain_answer_lost", "loop=%u err=%s", lp->fo.index, nl_strerror(-ENOMEM));
}

/* Step D1 on an IO loop: from now on it refuses new connections. The answer leaves from the
 * next iteration, after this one's before-sleep posted its fan-out batches (see gw_core.h). */
static void loop_drain_mark(void *arg)
{
    gw_loop_t *lp = arg;
    lp->is_draining = true;
    if (nl_loop_post(lp->fo.loop, loop_marked, lp) < 0)
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
    gw_node_close_listeners(node);
    atomic_store(&node->is_ready, false);
    atomic_store(&node->is_draining, true);
    node->stop_step = NODE_DRAIN_MARK;
    node->drain_acks = 0;
    NL_LOG(NL_INFO, "drain_begin", "signal=%s window_ms=%" PRIu64 " grace_ms=%u sessions=%" PRIu64,
           signal_name, node->drain_window_ms, GW_NODE_DRAIN_GRACE_MS,
           atomic_load_explicit(&node->connections, memory_order_relaxed));
    node_post_all(node, loop_drain_mark);
}

void gw_node_on_signal(nl_signal_t *s, int signum, void *arg)
{
    NL_UNUSED(s);
    gw_node_t *node = arg;
    if (signum == SIGHUP) {
        if (node->stop_step == NODE_RUNNING)
            (void)gw_node_reload(node);
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

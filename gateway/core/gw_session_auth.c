/*
 * gw_session_auth: Connect. The token is verified on the worker pool (HMAC and JSON parsing
 * stay off the IO loop); the verdict comes back to the owning loop as the pool's done
 * callback, posted through the loop's queue and eventfd. The request carries only names:
 * (loop, connection id). If the connection closed meanwhile, nl_conn_lookup does not find it
 * and the verdict is dropped.
 *
 * While the token is checked the connection does not read: frames the client pipelined after
 * Connect stay in its input buffer (bounded by max_input_bytes; netlib keeps them in storage
 * of their own size) and are handled as soon as the session is authenticated, in order, after
 * which netlib is told the input was consumed (nl_conn_input_settle). A full pool answers
 * Error{BUSY} and the client may send Connect again; the loop never waits.
 *
 * Requests in flight live in the loop's auth arena (nl_arena), not in its heap: a burst of
 * Connects (thousands of clients at once) would otherwise raise the heap by their tokens and
 * leave holes between the sessions and subscriptions made meanwhile, kept for good. Measured
 * with 10,000 clients sending Subscribe behind Connect, one IO loop (bench_gw_idle
 * --pipelined): 555-610 bytes per idle connection from malloc, 542-547 from the arena.
 *
 * Insecure mode (--insecure) skips verification and allows every channel. The user id is the
 * token's sub claim when the token is shaped like a JWT (read, not verified: load generators
 * send real tokens), otherwise the token itself ("anonymous" when empty). gw_node logs
 * ev=insecure_mode at startup.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_channel.h"
#include "gw_node_int.h"
#include "gw_session.h"
#include "gw_session_int.h"
#include "gw_auth.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"
#include "netlib/nl_pool.h"
#include "proto_frame.h"

/* A Connect on its way through the pool. Workers read the token and the config snapshot and
 * write only the verdict and, on success, the grant; the loop reads them after the done post
 * (a happens-before edge). The request holds its own reference to the snapshot, so a reload
 * meanwhile cannot free the keys under the worker; the verdict is the one of the config the
 * Connect arrived under. The grant replaces the token in place, packed as the session keeps
 * it ("user\0pattern\0pattern\0"): it is never longer than the token it was decoded from,
 * and the request then costs the loop's heap only the token's size while it is in flight
 * (the claims struct, 3.5 KiB, stays on the worker's stack). */
typedef struct auth_req_s {
    gw_config_snap_t *snap; /* the request's reference */
    nl_loop_t *loop;
    uint64_t conn_id;
    uint64_t frame_id; /* the Connect's request id */
    nl_buf_t *in;      /* the connection's input buffer, embedded in it: valid while it is */
    gw_token_err_t verdict;
    size_t key_index;   /* GW_TOKEN_OK: 0 the current secret, else a previous one */
    uint16_t user_len;  /* GW_TOKEN_OK: the grant's user id bytes */
    uint16_t grant_len; /* GW_TOKEN_OK: the whole grant, every NUL included */
    uint8_t n_patterns; /* GW_TOKEN_OK: patterns after the user id */
    int64_t exp_s;      /* GW_TOKEN_OK: the exp claim */
    uint32_t token_len;
    char token[]; /* the token and a NUL; after GW_TOKEN_OK, the grant */
} auth_req_t;

bool gw_session_allows(const gw_session_t *s, const char *name, size_t len)
{
    if (s->flags & GW_SESSION_ALL_CHANNELS)
        return true;
    const char *p = s->data + s->user_len + 1;
    for (uint32_t i = 0; i < s->n_patterns; i++) {
        size_t plen = strlen(p);
        if (gw_channel_pattern_match(p, plen, name, len))
            return true;
        p += plen + 1;
    }
    return false;
}

static void auth_send_connect_ok(gw_loop_t *lp, gw_session_t *s, uint64_t id)
{
    const gw_config_t *cfg = gw_loop_cfg(lp);
    char client_id[GW_CONFIG_NAME_MAX + 24];
    snprintf(client_id, sizeof(client_id), "%s-%" PRIu64, lp->node->node_id,
             nl_conn_id(s->member.conn));
    Herald__ConnectOk ok = HERALD__CONNECT_OK__INIT;
    ok.client_id = client_id;
    ok.node_id = lp->node->node_id;
    ok.ping_interval_ms = (uint32_t)cfg->ping_interval_ms;
    ok.idle_timeout_ms = (uint32_t)cfg->idle_timeout_ms;
    ok.user_id = s->data;
    ok.max_frame_bytes = (uint32_t)cfg->max_frame_bytes;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = id;
    f.body_case = HERALD__FRAME__BODY_CONNECT_OK;
    f.connect_ok = &ok;
    (void)gw_session_send(lp, s, &f);
}

/* The server could not verify this Connect now (worker queue full, pool stopping, no memory).
 * The session waits for the client to send it again (PROTOCOL.md, BUSY); until then its
 * pipelined requests are answered BUSY, not taken for frames before Connect. */
static void auth_defer(gw_loop_t *lp, gw_session_t *s, uint64_t id, gw_proto_err_t err)
{
    s->state = GW_SESSION_AWAIT_CONNECT;
    s->flags |= GW_SESSION_CONNECT_DEFERRED;
    gw_session_error(lp, s, id, err, 1000);
}

/* The session grows to hold the user id and the patterns (packed, each NUL-terminated;
 * patterns == NULL: every channel). Nothing points into it but the connection's data pointer
 * and the wheel entry (no subscriptions before Connect), so the entry leaves the wheel around
 * the realloc. Returns the session, or NULL after answering Error{INTERNAL} (the session
 * stays, back in AWAIT_CONNECT). */
static gw_session_t *auth_grow(gw_loop_t *lp, gw_session_t *s, uint64_t id, const char *user,
                               size_t user_len, const char *patterns, size_t patterns_len)
{
    gw_heartbeat_cancel(&lp->hb, &s->deadline);
    /* In place when the grant fits the pre-Connect block (see GW_SESSION_PREAUTH_BYTES). */
    size_t size = offsetof(gw_session_t, data) + user_len + 1 + patterns_len;
    gw_session_t *ns =
        realloc(s, size > GW_SESSION_PREAUTH_BYTES ? size : GW_SESSION_PREAUTH_BYTES);
    if (!ns) {
        /* A fresh handshake window for the retry, well past the retry_after_ms it is told. */
        gw_heartbeat_set(&lp->hb, &s->deadline,
                         nl_loop_now_ms(lp->fo.loop) + gw_loop_cfg(lp)->connect_timeout_ms);
        auth_defer(lp, s, id, GW_PERR_INTERNAL);
        return NULL;
    }
    nl_conn_set_data(ns->member.conn, ns);
    nl_wheel_entry_init(&ns->deadline);
    memcpy(ns->data, user, user_len);
    ns->data[user_len] = '\0';
    ns->user_len = (uint16_t)user_len;
    if (patterns_len > 0)
        memcpy(ns->data + user_len + 1, patterns, patterns_len);
    return ns;
}

/* Connect succeeded: the session becomes AUTHENTICATED and answers ConnectOk. */
static gw_session_t *auth_accept(gw_loop_t *lp, gw_session_t *s, uint64_t id, const char *user,
                                 size_t user_len, const char *patterns, size_t patterns_len,
                                 uint8_t n_patterns, int64_t exp_s)
{
    const gw_config_t *cfg = gw_loop_cfg(lp);
    /* Out of the pre-authentication budget before its record's index (in data) is overwritten
     * by the user id. A failed grow below leaves the session waiting for a new Connect,
     * uncounted: it is one that did authenticate. */
    gw_session_preauth_leave(lp, s);
    s = auth_grow(lp, s, id, user, user_len, patterns, patterns_len);
    if (!s)
        return NULL;
    s->state = GW_SESSION_AUTHENTICATED;
    s->flags &= (uint8_t)~GW_SESSION_CONNECT_DEFERRED;
    s->n_patterns = n_patterns;
    /* gw_token refuses an exp past 2^32 - 1 (2106), so it fits; 0 is insecure mode's none. */
    s->exp_s = exp_s > 0 ? (uint32_t)exp_s : 0;
    s->flags |= GW_SESSION_IS_AUTHED | (patterns ? 0 : GW_SESSION_ALL_CHANNELS);
    uint64_t burst_milli = (uint64_t)(cfg->publish_burst ? cfg->publish_burst : 1) * 1000;
    s->rl_milli = burst_milli > UINT32_MAX ? UINT32_MAX : (uint32_t)burst_milli;
    uint64_t now_ms = nl_loop_now_ms(lp->fo.loop);
    s->rl_ms = (uint32_t)now_ms;
    s->auth_s = (uint32_t)(nl_wall_ms() / 1000);
    lp->stats.authenticated++;
    lp->stats.auth_ok++;
    gw_session_online(lp, s);
    gw_heartbeat_set(&lp->hb, &s->deadline, gw_session_deadline_ms(lp, s, nl_wall_ms()));
    auth_send_connect_ok(lp, s, id);
    /* A token that expires within the wheel's lead is timed exactly from now. */
    if (s->flags & GW_SESSION_DEADLINE_EXP)
        gw_session_check_exp(lp, s);
    return s;
}

static void auth_refuse(gw_loop_t *lp, gw_session_t *s, uint64_t id, gw_token_err_t verdict,
                        const char *token, size_t len)
{
    unsigned idx = (unsigned)(-(int)verdict - 1);
    if (idx < GW_AUTH_FAIL_BUSY)
        lp->stats.auth_failures[idx]++;
    char tag[GW_TOKEN_HASH_SHORT_LEN + 1];
    gw_token_hash_short(token, len, tag);
    NL_LOG(NL_DEBUG, "auth_failed", "conn=%" PRIu64 " reason=%s token=%s",
           nl_conn_id(s->member.conn), gw_token_err_str(verdict), tag);
    /* PROTOCOL.md: a token before its nbf is answered like an expired one (get a new token). */
    bool is_expired = verdict == GW_TOKEN_ERR_EXPIRED || verdict == GW_TOKEN_ERR_NOT_YET_VALID;
    gw_session_error(lp, s, id, is_expired ? GW_PERR_TOKEN_EXPIRED : GW_PERR_UNAUTHORIZED, 0);
}

/* Packs the grant over the token (see auth_req_t). Returns false if it would not fit, which
 * a token shorter than its own decoded claims cannot do; refused as malformed all the same. */
static bool auth_pack_grant(auth_req_t *req, const gw_token_claims_t *claims)
{
    size_t user_len = strlen(claims->sub);
    size_t len = user_len + 1;
    for (size_t i = 0; i < claims->channel_count; i++)
        len += (size_t)claims->channel_lens[i] + 1;
    if (len > (size_t)req->token_len + 1 || len > UINT16_MAX)
        return false;
    char *p = req->token;
    memcpy(p, claims->sub, user_len + 1);
    p += user_len + 1;
    for (size_t i = 0; i < claims->channel_count; i++) {
        size_t plen;
        const char *pat = gw_token_claims_channel(claims, i, &plen);
        memcpy(p, pat, plen);
        p[plen] = '\0';
        p += plen + 1;
    }
    req->user_len = (uint16_t)user_len;
    req->grant_len = (uint16_t)len;
    req->n_patterns = (uint8_t)claims->channel_count;
    req->exp_s = claims->exp_s;
    return true;
}

/* Runs on a worker: the only slow part. */
static int auth_work(void *arg)
{
    auth_req_t *req = arg;
    const gw_config_snap_t *snap = req->snap;
    int64_t now_s = (int64_t)(nl_wall_ms() / 1000);
    /* No secret configured: n_keys is 0 and every token is refused (an HMAC with an empty key
     * is one anybody can compute). */
    gw_token_claims_t claims;
    req->verdict = gw_token_verify_keys(req->token, req->token_len, snap->keys, snap->n_keys, now_s,
                                        snap->cfg.max_channel_bytes, &claims, &req->key_index);
    if (req->verdict == GW_TOKEN_OK && !auth_pack_grant(req, &claims))
        req->verdict = GW_TOKEN_ERR_MALFORMED;
    return 0;
}

/* Verdicts answered between two flushes of the loop's output (see auth_done). */
#define GW_AUTH_FLUSH_EVERY 64u

static void auth_req_free(gw_loop_t *lp, auth_req_t *req)
{
    gw_config_snap_unref(req->snap);
    nl_arena_free(&lp->auth_arena, req);
}

/* Runs on the connection's loop with the verdict. */
static void auth_done(void *arg, int status)
{
    auth_req_t *req = arg;
    gw_loop_t *lp = gw_loop_current();
    gw_session_t *s = gw_session_lookup(req->loop, req->conn_id, GW_SESSION_AUTHENTICATING);
    if (!s) {
        auth_req_free(lp, req); /* closed (or closing) meanwhile */
        return;
    }
    nl_conn_t *c = s->member.conn;
    if (status < 0) {
        /* The pool was shut down before the work ran: the node is stopping. */
        auth_defer(lp, s, req->frame_id, GW_PERR_BUSY);
    } else if (req->verdict != GW_TOKEN_OK) {
        s->state = GW_SESSION_AWAIT_CONNECT;
        auth_refuse(lp, s, req->frame_id, req->verdict, req->token, req->token_len);
    } else {
        size_t user_len = req->user_len;
        if (req->key_index > 0)
            lp->stats.auth_ok_previous++;
        (void)auth_accept(lp, s, req->frame_id, req->token, user_len, req->token + user_len + 1,
                          req->grant_len - user_len - 1u, req->n_patterns, req->exp_s);
    }
    /* Frames pipelined behind Connect have waited in the input buffer: they run now (or are
     * answered BUSY after a deferral, or discarded after a refusal). The session may have been
     * reallocated. They are consumed outside netlib's read, so netlib is told: else the idle
     * connection would keep their storage for good (about 1 KiB, issue 25). */
    if (nl_conn_state(c) != NL_CONN_DISCONNECTED) {
        nl_conn_resume_read(c);
        (void)gw_session_process(lp, nl_conn_data(c), req->in);
        nl_conn_input_settle(c);
    }
    auth_req_free(lp, req);
    /* A burst of verdicts queues an answer per connection (ConnectOk and the answers to what
     * was pipelined behind it), each in a small output buffer of its own until the loop's
     * flush: thousands of them at once, freed together, left holes in the heap between the
     * subscriptions made meanwhile (bench_gw_idle --conns 10000 --pipelined, two IO loops:
     * 563-576 bytes per idle connection, 525-549 flushing every 64). Each flush is still one
     * batched write for all of them. */
    if (++lp->auth_unflushed >= GW_AUTH_FLUSH_EVERY) {
        lp->auth_unflushed = 0;
        nl_conn_flush_loop(lp->fo.loop);
    }
}

void gw_session_connect(gw_loop_t *lp, gw_session_t *s, const Herald__Frame *f, nl_buf_t *in)
{
    const gw_config_t *cfg = gw_loop_cfg(lp);
    const char *token = f->connect && f->connect->token ? f->connect->token : "";
    size_t len = strlen(token);
    if (cfg->is_insecure) {
        char user[GW_TOKEN_SUB_MAX + 1];
        size_t user_len = gw_token_insecure_user(token, len, user);
        (void)auth_accept(lp, s, f->id, user, user_len, NULL, 0, 0, 0);
        return;
    }
    if (len == 0 || len > GW_TOKEN_MAX_BYTES) {
        auth_refuse(lp, s, f->id, GW_TOKEN_ERR_MALFORMED, token, len);
        return;
    }
    auth_req_t *req = nl_arena_alloc(&lp->auth_arena, sizeof(*req) + len + 1);
    if (!req) {
        auth_defer(lp, s, f->id, GW_PERR_INTERNAL);
        return;
    }
    req->snap = gw_config_snap_ref(lp->snap);
    req->loop = lp->fo.loop;
    req->key_index = 0;
    req->conn_id = nl_conn_id(s->member.conn);
    req->frame_id = f->id;
    req->in = in;
    req->token_len = (uint32_t)len;
    memcpy(req->token, token, len + 1);
    int err = nl_pool_submit(lp->node->pool, lp->fo.loop, auth_work, auth_done, req);
    if (err < 0) {
        auth_req_free(lp, req);
        lp->stats.auth_failures[GW_AUTH_FAIL_BUSY]++;
        auth_defer(lp, s, f->id, GW_PERR_BUSY);
        return;
    }
    s->state = GW_SESSION_AUTHENTICATING;
    nl_conn_pause_read(s->member.conn);
}

/*
 * lg_client: one simulated client's state machine (see lg_client.h).
 *
 * Request ids: Connect is 1 and the two Subscribes are 2 (own channel) and 3 (shared), so a
 * SubscribeOk or Error names its slot without a table; Publish and Ping count up from 4 on each
 * connection.
 */
#include "lg_client.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lg_token.h"
#include "lg_wire.h"
#include "netlib/nl_common.h"
#include "netlib/nl_conn.h"
#include "proto_frame.h"

enum { REQ_CONNECT = 1, REQ_SUB_OWN = 2, REQ_SUB_SHARED = 3, REQ_FIRST_FREE = 4 };

/* herald's default when ConnectOk announces none. */
#define DEFAULT_PING_INTERVAL_MS 25000
/* Reconnect back-off: a storm's clients come back at once, a dead server is retried
 * gently. */
#define RETRY_INITIAL_MS 50
#define RETRY_MAX_MS 5000
/* First delay after a refused handshake; doubles per refusal up to RETRY_MAX_MS. */
#define HANDSHAKE_RETRY_MS 100
/* A payload timestamp older than this (or in the future) is not ours. */
#define MAX_PLAUSIBLE_LATENCY_NS (3600ull * 1000000000ull)

static void client_on_connected(nl_conn_t *conn);
static void client_on_message(nl_conn_t *conn, nl_buf_t *in);
static void client_on_close(nl_conn_t *conn, int reason);

static const nl_conn_cbs_t client_cbs = {
    .on_connected = client_on_connected,
    .on_message = client_on_message,
    .on_close = client_on_close,
};

static char client_name[] = "herald-loadgen";
static char client_version[] = "0.1.0";

/* The payload's clock: CLOCK_REALTIME, the clock of the kernel's receive timestamps. */
static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t count_in_group(uint64_t n, uint32_t k, uint32_t g)
{
    /* How many of 0..n-1 are congruent to g modulo k. */
    return n / k + (g < n % k ? 1 : 0);
}

uint64_t lg_client_shared_subscribers(const lg_config_t *cfg, uint32_t group)
{
    uint64_t active = cfg->active_count;
    uint64_t all = lg_config_clients(cfg);
    if (cfg->pattern == LG_PATTERN_PER_USER)
        return 1;
    if (cfg->pattern == LG_PATTERN_BROADCAST)
        return cfg->is_idle_shared ? all : active;
    uint32_t k = cfg->group_count;
    uint64_t in_active = count_in_group(active, k, group);
    if (!cfg->is_idle_shared)
        return in_active;
    return count_in_group(all, k, group);
}

static uint32_t client_id(const lg_client_t *c)
{
    return c->w->cfg->id_base + c->index;
}

static void own_channel(const lg_client_t *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s:u:%u", c->w->cfg->channel_prefix, client_id(c));
}

/* The broadcast or group channel: the one this client publishes to (except per-user) and, when
 * has_shared, subscribes to. */
static void shared_channel(const lg_client_t *c, char *buf, size_t len)
{
    const lg_config_t *cfg = c->w->cfg;
    if (cfg->pattern == LG_PATTERN_GROUPS)
        snprintf(buf, len, "%s:g:%u", cfg->channel_prefix, c->index % cfg->group_count);
    else
        snprintf(buf, len, "%s", c->w->shared_name);
}

void lg_client_init(lg_client_t *c, lg_worker_t *w, uint32_t index)
{
    memset(c, 0, sizeof(*c));
    c->w = w;
    c->index = index;
    c->is_active = index < w->cfg->active_count;
    c->has_shared =
        w->cfg->pattern != LG_PATTERN_PER_USER && (c->is_active || w->cfg->is_idle_shared);
    nl_wheel_entry_init(&c->wake_entry);
}

/* Encodes f and sends it. Returns 0 or a negative errno (nothing sent). */
static int client_send(lg_client_t *c, const Herald__Frame *f)
{
    lg_worker_t *w = c->w;
    if (!c->conn)
        return -ENOTCONN;
    int rc = proto_frame_append(&w->scratch, f);
    if (rc == 0) {
        size_t n = nl_buf_readable(&w->scratch);
        rc = nl_conn_send(c->conn, nl_buf_peek(&w->scratch), n);
        if (rc == 0)
            lg_stats_add(&w->stats.bytes_out, n);
    }
    nl_buf_retrieve_all(&w->scratch);
    return rc;
}

static void client_on_retry(nl_client_t *cl, int status, bool will_retry, uint64_t delay_ms)
{
    NL_UNUSED(delay_ms);
    lg_client_t *c = nl_client_arg(cl);
    lg_worker_t *w = c->w;
    if (status == -ECANCELED || w->is_stopping || c->state == LG_CLIENT_STOPPED)
        return;
    lg_stats_add(&w->stats.connect_failures, 1);
    /* A TLS or WebSocket handshake that failed said why just before (its errno says less). */
    const char *reason = c->transport_reason ? c->transport_reason : nl_strerror(status);
    c->transport_reason = NULL;
    lg_reasons_add(&w->stats.connect_reasons, reason);
    if (will_retry)
        lg_stats_add(&w->stats.connect_attempts, 1);
}

void lg_client_transport_failed(nl_conn_t *conn, const char *reason)
{
    nl_client_t *cl = nl_client_of(conn);
    if (!cl)
        return;
    lg_client_t *c = nl_client_arg(cl);
    c->transport_reason = reason;
}

void lg_client_opts_init(nl_client_opts_t *opts, const lg_config_t *cfg)
{
    memset(opts, 0, sizeof(*opts));
    opts->host = cfg->host;
    opts->port = cfg->port;
    opts->connect_timeout_ms = cfg->connect_timeout_ms;
    opts->retry_initial_ms = RETRY_INITIAL_MS;
    opts->retry_max_ms = RETRY_MAX_MS;
    opts->reconnect = true;
    opts->cbs = &client_cbs;
    opts->on_retry = client_on_retry;
}

int lg_client_start(lg_client_t *c)
{
    lg_worker_t *w = c->w;
    const lg_config_t *cfg = w->cfg;
    nl_client_opts_t opts = w->client_opts;
    if (cfg->source_count > 0)
        opts.source_host = cfg->sources[c->index % cfg->source_count];
    opts.arg = c;
    lg_stats_add(&w->stats.connect_attempts, 1);
    c->start_ns = nl_now_ns();
    c->state = LG_CLIENT_CONNECTING;
    int rc = nl_client_new(&c->cl, w->loop, &opts);
    if (rc == 0)
        rc = nl_client_connect(c->cl);
    if (rc < 0) {
        lg_stats_add(&w->stats.connect_failures, 1);
        lg_reasons_add(&w->stats.connect_reasons, nl_strerror(rc));
        if (c->cl)
            nl_client_close(c->cl);
        c->cl = NULL;
        c->state = LG_CLIENT_STOPPED;
    }
    return rc;
}

static void client_on_connected(nl_conn_t *conn)
{
    lg_client_t *c = nl_client_arg(nl_client_of(conn));
    lg_worker_t *w = c->w;
    nl_conn_set_data(conn, c);
    c->conn = conn;
    c->state = LG_CLIENT_HANDSHAKE;
    c->next_request_id = REQ_FIRST_FREE;
    c->offset_known = 0;
    c->is_reason_counted = false;
    lg_stats_add(&w->stats.tcp_connects, 1);
    lg_stats_add(&w->stats.connected, 1);
    /* The kernel's receive time splits each delivery's latency into arrival in the socket and
     * processing by this thread. Without it (never seen on Linux TCP) a Push still counts for
     * the processed latency, only the arrival histogram misses it. */
    (void)nl_conn_set_rx_timestamps(conn, true);

    char token[LG_TOKEN_MAX];
    ssize_t n = lg_token_make(w->cfg, client_id(c), token, sizeof(token));
    if (n < 0) {
        lg_reasons_add(&w->stats.connect_reasons, "token_sign_failed");
        nl_conn_close(conn, (int)n);
        return;
    }
    Herald__Connect body = HERALD__CONNECT__INIT;
    body.token = token;
    body.client_name = client_name;
    body.client_version = client_version;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = REQ_CONNECT;
    f.body_case = HERALD__FRAME__BODY_CONNECT;
    f.connect = &body;
    int rc = client_send(c, &f);
    if (rc < 0)
        nl_conn_close(conn, rc);
}

static void send_subscribe(lg_client_t *c, uint64_t id, char *channel)
{
    Herald__Subscribe body = HERALD__SUBSCRIBE__INIT;
    body.channel = channel;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = id;
    f.body_case = HERALD__FRAME__BODY_SUBSCRIBE;
    f.subscribe = &body;
    int rc = client_send(c, &f);
    if (rc < 0)
        nl_conn_close(c->conn, rc);
    else
        c->pending_subs++;
}

static void handle_connect_ok(lg_client_t *c, const Herald__ConnectOk *ok)
{
    if (c->state != LG_CLIENT_HANDSHAKE)
        return;
    c->ping_interval_ms = ok->ping_interval_ms ? ok->ping_interval_ms : DEFAULT_PING_INTERVAL_MS;
    c->state = LG_CLIENT_SUBSCRIBING;
    c->pending_subs = 0;
    char name[LG_CHANNEL_MAX];
    own_channel(c, name, sizeof(name));
    send_subscribe(c, REQ_SUB_OWN, name);
    if (c->has_shared && c->conn && nl_conn_state(c->conn) == NL_CONN_CONNECTED) {
        shared_channel(c, name, sizeof(name));
        send_subscribe(c, REQ_SUB_SHARED, name);
    }
}

static void client_become_ready(lg_client_t *c)
{
    lg_worker_t *w = c->w;
    c->state = LG_CLIENT_READY;
    c->was_ready = true;
    c->handshake_failures = 0;
    lg_stats_add(&w->stats.ready, 1);
    lg_stats_add(&w->stats.handshakes, 1);
    nl_hist_record_local(&w->stats.connect_ns, nl_now_ns() - c->start_ns);
    /* The first Ping lands somewhere in the second half of the interval, so that a ramp of
     * thousands of clients does not ping in lockstep. */
    uint64_t now = nl_loop_now_ms(w->loop);
    uint64_t half = c->ping_interval_ms / 2;
    uint64_t jitter = half ? ((uint64_t)c->index * 2654435761u) % half : 0;
    nl_wheel_add(&w->wheel, &c->wake_entry, now + half + jitter);
}

static void handle_subscribe_ok(lg_client_t *c, uint64_t id, const Herald__SubscribeOk *ok)
{
    if (c->state != LG_CLIENT_SUBSCRIBING || (id != REQ_SUB_OWN && id != REQ_SUB_SHARED))
        return;
    int slot = id == REQ_SUB_OWN ? LG_SLOT_OWN : LG_SLOT_SHARED;
    /* Offsets after the channel's latest at subscription time are owed to this client. */
    c->last_offset[slot] = ok->offset;
    c->offset_known |= (uint8_t)(1u << slot);
    if (c->pending_subs > 0 && --c->pending_subs == 0)
        client_become_ready(c);
}

static void handle_publish_ok(lg_client_t *c)
{
    lg_worker_t *w = c->w;
    const lg_config_t *cfg = w->cfg;
    uint32_t group = cfg->pattern == LG_PATTERN_GROUPS ? c->index % cfg->group_count : 0;
    if (c->publishes_inflight > 0)
        c->publishes_inflight--;
    lg_stats_add(&w->stats.publish_oks, 1);
    lg_stats_add(&w->stats.expected, lg_client_shared_subscribers(cfg, group));
}

static const char *enum_name(const ProtobufCEnumDescriptor *d, int value)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, value);
    return v ? v->name : "unknown";
}

static void handle_error(lg_client_t *c, uint64_t id, const Herald__Error *e)
{
    lg_worker_t *w = c->w;
    const char *name = enum_name(&herald__error__code__descriptor, (int)e->code);
    lg_stats_add(&w->stats.errors, 1);
    if (id == REQ_CONNECT) {
        /* The server follows with Disconnect and a close; the close counts the failure, this
         * code is its reason. */
        if (!c->is_reason_counted)
            lg_reasons_add(&w->stats.connect_reasons, name);
        c->is_reason_counted = true;
        return;
    }
    lg_reasons_add(&w->stats.error_reasons, name);
    if (id == REQ_SUB_OWN || id == REQ_SUB_SHARED) {
        /* Without its subscriptions the client cannot measure anything: start over. */
        nl_conn_close(c->conn, -EPROTO);
    } else if (id >= REQ_FIRST_FREE && c->is_active) {
        lg_stats_add(&w->stats.publish_errors, 1);
        if (c->publishes_inflight > 0)
            c->publishes_inflight--;
    }
}

static void handle_disconnect(lg_client_t *c, const Herald__Disconnect *d)
{
    lg_worker_t *w = c->w;
    if (w->is_stopping || c->is_dropping)
        return;
    if (c->is_reason_counted)
        return; /* an Error already said why */
    c->is_reason_counted = true;
    const char *name = enum_name(&herald__disconnect__code__descriptor, (int)d->code);
    if (c->state == LG_CLIENT_READY)
        lg_reasons_add(&w->stats.disconnect_reasons, name);
    else
        lg_reasons_add(&w->stats.connect_reasons, name);
}

static void handle_frame(lg_client_t *c, const Herald__Frame *f)
{
    switch (f->body_case) {
    case HERALD__FRAME__BODY_CONNECT_OK:
        handle_connect_ok(c, f->connect_ok);
        break;
    case HERALD__FRAME__BODY_SUBSCRIBE_OK:
        handle_subscribe_ok(c, f->id, f->subscribe_ok);
        break;
    case HERALD__FRAME__BODY_PUBLISH_OK:
        handle_publish_ok(c);
        break;
    case HERALD__FRAME__BODY_PONG:
        lg_stats_add(&c->w->stats.pongs, 1);
        break;
    case HERALD__FRAME__BODY_ERROR:
        handle_error(c, f->id, f->error);
        break;
    case HERALD__FRAME__BODY_DISCONNECT:
        handle_disconnect(c, f->disconnect);
        break;
    default:
        break;
    }
}

static void track_offset(lg_client_t *c, int slot, uint64_t offset)
{
    lg_worker_t *w = c->w;
    uint8_t bit = (uint8_t)(1u << slot);
    if (!(c->offset_known & bit)) {
        c->offset_known |= bit;
        c->last_offset[slot] = offset;
        return;
    }
    uint64_t last = c->last_offset[slot];
    if (offset > last + 1)
        lg_stats_add(&w->stats.missing, offset - last - 1);
    else if (offset <= last)
        lg_stats_add(&w->stats.duplicates, 1);
    if (offset > last)
        c->last_offset[slot] = offset;
}

/* rx_ns: the kernel receive time of the read that completed this Push (0: none). */
static void handle_push(lg_client_t *c, const lg_push_t *p, uint64_t rx_ns)
{
    lg_worker_t *w = c->w;
    lg_stats_add(&w->stats.deliveries, 1);
    /* Own channels are "<prefix>:u:<id>"; anything else is the shared one. */
    size_t plen = strlen(w->cfg->channel_prefix);
    bool is_own =
        p->channel_len > plen + 3 && p->channel[plen + 1] == 'u' && p->channel[plen + 2] == ':';
    track_offset(c, is_own ? LG_SLOT_OWN : LG_SLOT_SHARED, p->offset);
    uint64_t sent_ns;
    if (p->payload_len < sizeof(sent_ns)) {
        lg_stats_add(&w->stats.foreign, 1);
        return;
    }
    memcpy(&sent_ns, p->payload, sizeof(sent_ns));
    uint64_t now = realtime_ns();
    if (sent_ns > now || now - sent_ns > MAX_PLAUSIBLE_LATENCY_NS) {
        lg_stats_add(&w->stats.foreign, 1);
        return;
    }
    nl_hist_record_local(&w->stats.latency_ns, now - sent_ns);
    if (w->slices)
        nl_hist_record_local(&w->slices[w->slice_cur], now - sent_ns);
    /* The stamp is the last segment's of the read, so for a Push that arrived earlier in the
     * same read it is late by the gap: an upper bound, never an underestimate. A stamp outside
     * [sent, now] means the wall clock stepped meanwhile: the sample is left out. */
    if (rx_ns >= sent_ns && rx_ns <= now)
        nl_hist_record_local(&w->stats.latency_arrival_ns, rx_ns - sent_ns);
}

/* Handles one whole frame body. Returns 0, or a negative errno to close the connection. */
static int client_frame(lg_client_t *c, const uint8_t *body, size_t len, uint64_t rx_ns)
{
    lg_push_t push;
    int rc = lg_wire_push(body, len, &push);
    if (rc == 1) {
        handle_push(c, &push, rx_ns);
        return 0;
    }
    if (rc < 0)
        return -EPROTO;
    Herald__Frame *f;
    if (proto_frame_unpack(body, len, &f) != 0)
        return -EPROTO;
    handle_frame(c, f);
    proto_frame_free(f);
    return 0;
}

static void client_on_message(nl_conn_t *conn, nl_buf_t *in)
{
    lg_client_t *c = nl_conn_data(conn);
    lg_worker_t *w = c->w;
    uint64_t rx_ns = nl_conn_rx_time_ns(conn);
    /* Stop at the first frame after which the connection is no longer ours to read. */
    while (nl_conn_state(conn) == NL_CONN_CONNECTED) {
        size_t hdr, body;
        const uint8_t *p = (const uint8_t *)nl_buf_peek(in);
        int rc = lg_wire_split(p, nl_buf_readable(in), (size_t)PROTO_DEFAULT_MAX_FRAME_BYTES, &hdr,
                               &body);
        if (rc == 0)
            return;
        if (rc == 1)
            rc = client_frame(c, p + hdr, body, rx_ns);
        if (rc < 0) {
            lg_reasons_add(&w->stats.error_reasons, "undecodable_frame");
            nl_conn_close(conn, rc);
            return;
        }
        lg_stats_add(&w->stats.bytes_in, hdr + body);
        nl_buf_retrieve(in, hdr + body);
    }
}

/* Counts a close the run did not ask for: a disconnect of a ready client, or a failed
 * handshake. */
static void count_close(lg_client_t *c, bool was_ready, int reason)
{
    lg_worker_t *w = c->w;
    const char *name = reason == 0 ? "eof" : nl_strerror(reason);
    if (was_ready) {
        lg_stats_add(&w->stats.disconnects, 1);
        if (!c->is_reason_counted)
            lg_reasons_add(&w->stats.disconnect_reasons, name);
    } else {
        lg_stats_add(&w->stats.connect_failures, 1);
        if (!c->is_reason_counted)
            lg_reasons_add(&w->stats.connect_reasons, name);
    }
}

/* A handshake the server refused (a bad token, a full server) would be retried by nl_client
 * within 50 ms forever; instead the client is closed and started again from the worker's
 * wheel after an exponential, jittered delay. */
static void retry_later(lg_client_t *c)
{
    lg_worker_t *w = c->w;
    nl_client_close(c->cl); /* frees it after this on_close returns */
    c->cl = NULL;
    unsigned shift = c->handshake_failures < 6 ? c->handshake_failures : 6;
    if (c->handshake_failures < UINT8_MAX)
        c->handshake_failures++;
    uint64_t delay = (uint64_t)HANDSHAKE_RETRY_MS << shift;
    if (delay > RETRY_MAX_MS)
        delay = RETRY_MAX_MS;
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    delay = delay / 2 + w->rng % (delay / 2 + 1);
    nl_wheel_add(&w->wheel, &c->wake_entry, nl_loop_now_ms(w->loop) + delay);
}

static void client_on_close(nl_conn_t *conn, int reason)
{
    lg_client_t *c = nl_conn_data(conn);
    if (!c)
        return; /* closed inside on_connected before the data was set */
    lg_worker_t *w = c->w;
    lg_stats_sub(&w->stats.connected, 1);
    bool was_ready = c->state == LG_CLIENT_READY;
    if (was_ready)
        lg_stats_sub(&w->stats.ready, 1);
    nl_wheel_cancel(&w->wheel, &c->wake_entry);
    c->conn = NULL;
    /* Their replies will never come: the drain must not wait for them. */
    lg_stats_add(&w->stats.publish_unacked, c->publishes_inflight);
    c->publishes_inflight = 0;
    bool is_counted = !w->is_stopping && c->state != LG_CLIENT_STOPPED && !c->is_dropping;
    if (is_counted)
        count_close(c, was_ready, reason);
    bool is_refused = is_counted && !was_ready;
    c->is_dropping = false;
    c->is_reason_counted = false;
    if (c->state == LG_CLIENT_STOPPED || w->is_stopping) {
        c->state = LG_CLIENT_STOPPED;
        return;
    }
    c->state = LG_CLIENT_CONNECTING;
    if (is_refused) {
        retry_later(c);
        return;
    }
    /* nl_client connects again after its back-off (up to RETRY_INITIAL_MS after a close). */
    c->start_ns = nl_now_ns();
    lg_stats_add(&w->stats.connect_attempts, 1);
}

uint64_t lg_client_publish_target(lg_client_t *c, char *channel, size_t len)
{
    lg_worker_t *w = c->w;
    const lg_config_t *cfg = w->cfg;
    if (cfg->pattern != LG_PATTERN_PER_USER) {
        shared_channel(c, channel, len);
        uint32_t group = cfg->pattern == LG_PATTERN_GROUPS ? c->index % cfg->group_count : 0;
        return lg_client_shared_subscribers(cfg, group);
    }
    /* xorshift64: a random target among every client of the fleet. */
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    uint32_t target = (uint32_t)(w->rng % lg_config_clients(cfg));
    snprintf(channel, len, "%s:u:%u", cfg->channel_prefix, cfg->id_base + target);
    return 1;
}

lg_client_t *lg_worker_next_publisher(lg_worker_t *w)
{
    for (uint32_t tries = 0; tries < w->active_count; tries++) {
        uint32_t k = w->next_publisher++ % w->active_count;
        lg_client_t *c = &w->clients[w->active[k]];
        if (c->state == LG_CLIENT_READY)
            return c;
    }
    return NULL;
}

void lg_worker_stamp_payload(lg_worker_t *w)
{
    uint64_t now = realtime_ns();
    memcpy(w->payload, &now, sizeof(now));
}

int lg_client_publish(lg_client_t *c)
{
    lg_worker_t *w = c->w;
    if (c->state != LG_CLIENT_READY || !c->conn)
        return -ENOTCONN;
    char channel[LG_CHANNEL_MAX];
    lg_client_publish_target(c, channel, sizeof(channel));
    lg_worker_stamp_payload(w);
    Herald__Publish body = HERALD__PUBLISH__INIT;
    body.channel = channel;
    body.payload.data = w->payload;
    body.payload.len = w->cfg->payload_bytes;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = c->next_request_id++;
    f.body_case = HERALD__FRAME__BODY_PUBLISH;
    f.publish = &body;
    int rc = client_send(c, &f);
    if (rc == 0) {
        lg_stats_add(&w->stats.publishes, 1);
        c->publishes_inflight++;
    }
    return rc;
}

void lg_client_wake(nl_wheel_t *wheel, nl_wheel_entry_t *e, void *arg)
{
    NL_UNUSED(arg);
    lg_client_t *c = (lg_client_t *)((char *)e - offsetof(lg_client_t, wake_entry));
    if (c->state == LG_CLIENT_CONNECTING && !c->cl) {
        if (!c->w->is_stopping)
            lg_client_start(c); /* the delayed retry after a refused handshake */
        return;
    }
    if (c->state != LG_CLIENT_READY || !c->conn)
        return;
    Herald__Ping body = HERALD__PING__INIT;
    Herald__Frame f = HERALD__FRAME__INIT;
    f.id = c->next_request_id++;
    f.body_case = HERALD__FRAME__BODY_PING;
    f.ping = &body;
    if (client_send(c, &f) == 0)
        lg_stats_add(&c->w->stats.pings, 1);
    nl_wheel_add(wheel, e, nl_loop_now_ms(c->w->loop) + c->ping_interval_ms);
}

void lg_client_drop(lg_client_t *c)
{
    if (c->state != LG_CLIENT_READY || !c->conn)
        return;
    c->is_dropping = true;
    lg_stats_add(&c->w->stats.drops, 1);
    nl_conn_close(c->conn, 0);
}

void lg_client_stop(lg_client_t *c)
{
    nl_wheel_cancel(&c->w->wheel, &c->wake_entry);
    /* on_close (later) sees STOPPED and leaves the gauges alone: settle "ready" here. */
    if (c->state == LG_CLIENT_READY)
        lg_stats_sub(&c->w->stats.ready, 1);
    c->state = LG_CLIENT_STOPPED;
    if (c->cl)
        nl_client_close(c->cl);
    c->cl = NULL;
}

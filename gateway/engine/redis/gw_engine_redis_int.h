/*
 * gw_engine_redis_int.h: what the Redis engine's files share: gw_engine_redis.c (threads,
 * requests in, messages and answers out), gw_engine_redis_chan.c (each channel's state on the
 * engine thread), _recover.c, _fence.c, _presence.c and _query.c. Private to them.
 *
 * Everything here but the atomics and the per-loop rules copies belongs to the engine thread
 * (E): its own netlib loop, which runs the hiredis connections. IO loops and the HTTP thread
 * reach it only by posting requests; it reaches them only by posting answers and batches.
 */
#ifndef HERALD_GATEWAY_GW_ENGINE_REDIS_INT_H
#define HERALD_GATEWAY_GW_ENGINE_REDIS_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_channel.h"
#include "gw_engine_redis.h"
#include "gw_hashring.h"
#include "gw_redis_link.h"
#include "gw_redis_sentinel.h"
#include "gw_redis_sub.h"
#include "netlib/nl_loop_thread.h"
#include "netlib/nl_timer.h"

typedef struct redis_engine_s redis_engine_t;

/* One Redis server (or, through Sentinel, whichever server is the master of one name): a
 * command connection and a pub/sub connection. */
typedef struct re_shard_s {
    redis_engine_t *re;
    uint32_t index;
    /* "host:port", or the Sentinel master name: the ring's name and the metric label. */
    char name[GW_CONFIG_HOST_MAX + 8];
    gw_redis_link_t *link;
    gw_redis_sub_t *sub;
    bool is_ready;                /* link up and the functions loaded (E only) */
    _Atomic bool is_ready_atomic; /* the same, for /readyz and /metrics */
    _Atomic uint64_t pending;     /* commands in flight, mirrored for /metrics */
    _Atomic uint64_t refused;     /* commands refused at max_pending, mirrored likewise */
    struct rp_writes_s *writes;   /* E only: presence writes held back (presence.c) */
    struct re_joins_s *joins;     /* E only: channels waiting to send herald_join (chan.c) */
    struct re_held_s *held;       /* E only: publishes waiting for a resubscription (publish.c) */
    _Atomic uint64_t reconnects;
    _Atomic uint64_t failovers;    /* the master's address changed (Sentinel) */
    _Atomic uint64_t no_master_ms; /* time without a ready server, summed */
    uint64_t last_ask_ms;          /* E: when Sentinel was last asked about it */
} re_shard_t;

/* Where a channel stands on this node. */
typedef enum re_state_e {
    RE_SUBSCRIBING = 0, /* SUBSCRIBE sent, not confirmed */
    RE_JOINING = 1,     /* confirmed; herald_join (the latest offset) in flight */
    RE_ACTIVE = 2,      /* messages flow to the loops in loop_mask */
} re_state_t;

typedef struct re_pending_s re_pending_t;

/* A channel some loop of this node subscribes to. */
typedef struct re_chan_s {
    uint64_t loop_mask;    /* loops in the audience */
    uint64_t joining_mask; /* of those, waiting for their join answer (never while ACTIVE) */
    uint64_t last_offset;  /* the latest offset handed to the loops */
    uint64_t acked_offset; /* the latest offset Redis gave a publish of this node, same epoch */
    uint64_t epoch;
    uint64_t since_ms;           /* when it left ACTIVE (or was made): join timeouts */
    gw_history_t *hist;          /* the latest messages, for recovery (history channels only) */
    re_pending_t *pending;       /* messages and history requests waiting for ACTIVE */
    struct re_chan_s *wait_prev; /* the engine's list of channels not ACTIVE */
    struct re_chan_s *wait_next;
    uint32_t shard;
    uint8_t state;      /* re_state_t */
    bool is_fencing;    /* a herald_fence about it is on its way */
    bool is_subscribed; /* Redis confirmed its SUBSCRIBE on the current pub/sub connection
                         * (cleared when that connection goes down) */
    bool is_waiting;    /* on the wait list */
    gw_chankey_t key;   /* the herald channel name follows */
    char name[];
} re_chan_t;

/* Counters E writes and scrapes read. */
typedef struct re_stats_s {
    _Atomic uint64_t published;        /* messages given an offset by Redis */
    _Atomic uint64_t delivered;        /* messages handed to the loops */
    _Atomic uint64_t lost;             /* offsets that never arrived (gaps, outages) */
    _Atomic uint64_t duplicates;       /* offsets that arrived twice (dropped) */
    _Atomic uint64_t idem_duplicates;  /* publishes Redis answered from their key's record */
    _Atomic uint64_t unsequenced;      /* plain PUBLISHes delivered (offset 0) */
    _Atomic uint64_t local_only;       /* publishes delivered here only, Redis down */
    _Atomic uint64_t busy;             /* publishes refused: too many commands in flight */
    _Atomic uint64_t unavailable;      /* history publishes refused: their Redis down */
    _Atomic uint64_t join_timeouts;    /* joins failed for want of Redis */
    _Atomic uint64_t epoch_changes;    /* a channel's epoch changed under its subscribers */
    _Atomic uint64_t epoch_resets;     /* ... because Redis held less than this node delivered */
    _Atomic uint64_t history_fetches;  /* recoveries that read the Redis stream */
    _Atomic uint64_t presence_dropped; /* presence writes dropped: too many held back */
    _Atomic uint64_t channels;         /* channels with state here */
    _Atomic uint64_t history_channels;
    _Atomic uint64_t history_messages;
    _Atomic uint64_t history_bytes;
    _Atomic uint64_t history_max_bytes;
} re_stats_t;

typedef struct rp_online_s rp_online_t;

struct redis_engine_s {
    gw_engine_t base;
    gw_engine_host_t host; /* the node: its loops, its id, its hooks */
    gw_fanout_t *hub;
    uint32_t n_loops;
    nl_loop_thread_t *thread;
    nl_loop_t *loop; /* E */
    gw_hashring_t ring;
    uint32_t n_shards;
    re_shard_t *shards;
    gw_config_server_t servers[GW_CONFIG_REDIS_SERVERS_MAX]; /* [engine] redis, parsed */
    /* [engine] sentinels, parsed (n_sentinels 0: no Sentinel), and the master names. */
    gw_config_server_t sentinels[GW_CONFIG_REDIS_SERVERS_MAX];
    uint32_t n_sentinels;
    char masters[GW_CONFIG_REDIS_SERVERS_MAX][GW_CONFIG_NAME_MAX];
    char sentinel_password[GW_CONFIG_SECRET_MAX];
    gw_redis_sentinel_t *sentinel; /* E */
    _Atomic bool is_sentinel_up;
    uint64_t last_tick_ms; /* E */
    uint64_t timeout_ms;
    uint32_t max_pending;
    uint64_t idem_window_ms; /* E: [limits] idempotency_window (0: keys are not remembered) */
    /* E only. */
    gw_chantab_t chans;
    gw_history_store_t store;
    gw_history_rules_t rules;
    re_chan_t *wait_head; /* channels not ACTIVE, oldest first */
    re_chan_t *wait_tail;
    gw_fanout_outbox_t out; /* messages not yet posted to the IO loops */
    nl_timer_t *tick;
    uint64_t epoch_seed;
    bool is_detached; /* no more posts to IO loops (shutdown) */
    /* Presence settings, read at start. */
    uint64_t presence_ttl_ms;
    uint64_t presence_refresh_ms;
    uint64_t last_seen_ttl_ms;
    uint32_t presence_max_clients;
    uint64_t next_heartbeat_ms; /* E only */
    rp_online_t *online;        /* E only: first connections waiting (presence.c) */
    /* Each IO loop's copy, read on that loop (is_recoverable). */
    gw_history_rules_t *loop_rules;
    _Atomic bool is_ready;
    _Atomic bool is_closed; /* requests are refused: the node is stopping */
    re_stats_t stats;
};

/* --- gw_engine_redis.c, for the channel code ----------------------------------------------- */

/* Queues m (a reference is taken) for the loops in mask; posted in E's before-sleep hook. */
static inline void re_send(redis_engine_t *re, gw_msg_t *m, uint64_t mask)
{
    gw_fanout_outbox_add_mask(&re->out, mask, m);
}

/* Posts the batch for loop now, so that what E posts next to it arrives after (nothing once
 * detached). */
void re_flush_loop(redis_engine_t *re, uint32_t loop);

/* Answers loop's join of channel name[0..len) (status 0: with offset and epoch), after the
 * batch E has for that loop. */
void re_answer_join(redis_engine_t *re, uint32_t loop, const char *name, size_t len, uint32_t hash,
                    int status, uint64_t offset, uint64_t epoch);

/* Commands in flight on a shard's link past which presence writes and joins wait their turn:
 * half of redis_max_pending, the other half left to publishes and queries. */
static inline uint32_t re_budget(const redis_engine_t *re)
{
    return re->max_pending / 2 ? re->max_pending / 2 : 1;
}

/* Counter helpers (relaxed: scrapes only sum them). */
static inline void re_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* A fresh epoch for a channel that has none in Redis yet (a candidate: Redis keeps the first
 * one it is given). */
uint64_t re_epoch_candidate(redis_engine_t *re, uint32_t hash);

/* --- gw_engine_redis_chan.c ----------------------------------------------------------------- */

static inline re_chan_t *re_chan_of(gw_chankey_t *k)
{
    return k ? (re_chan_t *)((char *)k - offsetof(re_chan_t, key)) : NULL;
}

static inline re_shard_t *re_chan_shard(redis_engine_t *re, const re_chan_t *c)
{
    return &re->shards[c->shard];
}

/* The channel's state here, or NULL. */
re_chan_t *re_chan_find(redis_engine_t *re, const char *name, size_t len, uint32_t hash);

/* A history request as it travels (owned by whoever holds it; freed by re_hist_answer);
 * req->engine is the redis_engine_t. */
typedef gw_engine_hist_t re_hist_req_t;

int re_chans_init(redis_engine_t *re);
void re_chans_deinit(redis_engine_t *re);
void re_chan_join(redis_engine_t *re, uint32_t loop, const char *name, size_t len, uint32_t hash);
void re_chan_leave(redis_engine_t *re, uint32_t loop, const char *name, size_t len, uint32_t hash);
/* Hands m to c's loops after the checks in gw_engine_redis_chan.c's header comment. Takes no
 * reference from the caller's. Returns false when m was dropped as a duplicate. */
bool re_chan_deliver(redis_engine_t *re, re_chan_t *c, gw_msg_t *m);

/* --- gw_engine_redis_publish.c ------------------------------------------------------------- */

/* Publishes req through Redis (the channel's server) and answers it; takes it. With a key,
 * inside the function, so that a retry within the window is answered from the first one on
 * every node. Held while the channel's SUBSCRIBE is not confirmed (the file's comment). */
void re_chan_publish(redis_engine_t *re, gw_engine_pub_t *req);

/* Sends shard's held publishes whose channels are subscribed again, or that waited
 * redis_timeout, in order. */
void re_publish_release(redis_engine_t *re, uint32_t shard);

/* Answers every held publish -ESHUTDOWN (E, as it stops). */
void re_publish_deinit(redis_engine_t *re);
void re_chan_history(redis_engine_t *re, re_hist_req_t *req);
/* Sends the answer (posting it to its loop after that loop's batch) and frees req. */
void re_hist_answer(redis_engine_t *re, re_hist_req_t *req);
/* The sub's callbacks. */
void re_chan_on_message(gw_redis_sub_t *s, const char *chan, size_t chan_len, const char *data,
                        size_t len, void *arg);
void re_chan_on_subscribed(gw_redis_sub_t *s, const char *chan, size_t chan_len, void *arg);
/* --- gw_engine_redis_presence.c, gw_engine_redis_query.c (the first four) ------------------- */

int re_presence(gw_engine_t *e, const char *chan, size_t len, const gw_engine_reply_t *reply);
int re_online(gw_engine_t *e, const char *user, size_t len, const gw_engine_reply_t *reply);
int re_online_counts(gw_engine_t *e, const gw_engine_reply_t *reply);
int re_nodes(gw_engine_t *e, const gw_engine_reply_t *reply);
void re_user_online(gw_engine_t *e, uint32_t loop, const char *user, size_t len);
void re_user_offline(gw_engine_t *e, uint32_t loop, const char *user, size_t len, uint64_t at_ms);
void re_refresh(gw_engine_t *e, const gw_presence_batch_t *batch);
void re_event(gw_engine_t *e, gw_event_t *ev);
void re_presence_add(gw_engine_t *e, uint32_t loop, const char *chan, size_t len,
                     const gw_presence_client_t *who);
void re_presence_remove(gw_engine_t *e, uint32_t loop, const char *chan, size_t len,
                        const char *client_id);
/* This node's heartbeat into herald:nodes (every refresh interval; E's tick calls it). */
void re_presence_tick(redis_engine_t *re);
/* A server became ready (a connect, a reconnect): the heartbeat at once, then every IO loop
 * tells its users and subscriptions again (Redis may have lost them). */
void re_presence_server_ready(redis_engine_t *re);
/* A message on a listener channel c: a join/leave event handed to c's loops. Returns false
 * when data is not an event. */
bool re_presence_on_event(redis_engine_t *re, re_chan_t *c, const char *data, size_t len);
/* Room for any key herald builds: a prefix and a channel name or user id. */
#define RE_KEY_MAX (32 + GW_CHANNEL_NAME_MAX_LIMIT + GW_CONFIG_NAME_MAX)
/* Writes the first connections E queued, a few commands per loop (E's before-sleep hook). */
void re_presence_flush(redis_engine_t *re);
/* Frees what re_presence_flush has not written (E stopping). */
void re_presence_deinit(redis_engine_t *re);
/* A write whose reply nobody waits for, on shard's link while it is ready (dropped
 * otherwise: the next refresh or resync repairs it). */
void re_presence_send(redis_engine_t *re, uint32_t shard, int argc, const char *const *argv,
                      const size_t *lens);

/* Every ~250 ms: joins that waited past the timeout fail; histories age. */
void re_chans_tick(redis_engine_t *re);
/* --- gw_engine_redis_fence.c, gw_engine_redis_recover.c ------------------------------------- */

/* Sends herald_fence for every channel of shard this node has delivered from (before the
 * shard is ready again after a reconnect: the node's own commands come after it). */
void re_chans_fence(redis_engine_t *re, uint32_t shard);
/* The same for c alone; is_forced: an offset was given out twice, the epoch must change. */
void re_chan_fence(redis_engine_t *re, re_chan_t *c, bool is_forced);
/* Answers req from c (ACTIVE): memory, else the stream. */
void re_recover(redis_engine_t *re, re_chan_t *c, re_hist_req_t *req);
/* The sub's state callback: down clears is_subscribed of the shard's channels. */
void re_chan_on_sub_state(gw_redis_sub_t *s, int err, void *arg);
/* The shard is ready again: channels whose SUBSCRIBE was confirmed but whose herald_join was
 * lost with the link ask again. */
void re_chans_rejoin(redis_engine_t *re, uint32_t shard);
/* Sends the herald_joins waiting for room on shard's link (E's before-sleep hook); drops them
 * while the shard is down. */
void re_chans_flush_joins(redis_engine_t *re, uint32_t shard);
/* Frees the joins still waiting (E stopping). */
void re_chans_deinit_joins(redis_engine_t *re);
/* Re-applies history rules (a reload). */
void re_chans_reconfigure(redis_engine_t *re, const gw_config_t *cfg);

#endif

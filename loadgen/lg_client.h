/*
 * lg_client: one simulated herald client, and the per-thread worker that hosts a share of
 * them.
 *
 * A client is a small struct plus an nl_client (which connects, retries with back-off and
 * reconnects after a close). Its life: NEW -> CONNECTING (TCP) -> HANDSHAKE (Connect sent)
 * -> SUBSCRIBING (its own channel "<prefix>:u:<id>", plus the shared one: "<prefix>:all" or
 * "<prefix>:g:<k>", for active clients and, with --idle-shared, idle ones) -> READY. A close
 * sends it back to CONNECTING until the run stops.
 *
 * Heartbeats: a READY client sends Ping at the interval ConnectOk announced. The worker keeps
 * one timing wheel for all of its clients instead of a timer each; a worker timer advances it.
 * The same wheel entry times the retry after a refused handshake (Error + Disconnect before
 * READY): the nl_client is closed and a new one started after an exponential back-off, so a
 * wrong --secret does not turn the fleet into a reconnect flood.
 * Publishing: the worker's schedule picks an active client and calls lg_client_publish; the
 * payload is an 8-byte CLOCK_REALTIME send time in ns (same host: one clock for every
 * process, and the clock of the kernel's receive timestamps) and padding to --size.
 * Receiving: every connection asks for kernel receive timestamps (nl_conn_set_rx_timestamps).
 * Each Push is read in place (lg_wire); its timestamp gives two publish-to-deliver latencies:
 * to arrival (the kernel's receive time of the read that completed the Push, minus the send
 * time) and to processed (the time this thread handled it, minus the send time), whose
 * difference is the generator's own delay in getting round to the socket. Its offset gives
 * the loss and duplicate counts: per (client, channel) the last offset
 * seen, starting from SubscribeOk's offset. A jump forward counts the skipped offsets as
 * missing; an offset at or below the last counts a duplicate.
 *
 * Thread: a worker and its clients belong to the worker's loop thread; every function here
 * runs on it. Ownership: the worker owns its client array; netlib owns the nl_client and
 * nl_conn (closed with lg_client_stop).
 */
#ifndef HERALD_LOADGEN_LG_CLIENT_H
#define HERALD_LOADGEN_LG_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "lg_config.h"
#include "lg_stats.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_client.h"
#include "netlib/nl_loop.h"
#include "netlib/nl_timer.h"
#include "netlib/nl_wheel.h"

struct lg_fleet_s;
struct lg_worker_s;
struct lg_http_conn_s;

/* A channel name loadgen builds: prefix, ":u:", a 10-digit id, NUL. */
#define LG_CHANNEL_MAX (LG_PREFIX_MAX + 16)

typedef enum lg_client_state_e {
    LG_CLIENT_NEW = 0,     /* not started */
    LG_CLIENT_CONNECTING,  /* TCP connect in progress, or waiting to reconnect */
    LG_CLIENT_HANDSHAKE,   /* Connect sent, ConnectOk awaited */
    LG_CLIENT_SUBSCRIBING, /* Subscribe(s) sent */
    LG_CLIENT_READY,       /* subscribed; heartbeating (and publishing, when active) */
    LG_CLIENT_STOPPED,     /* closed for good */
} lg_client_state_t;

/* Channel slots a client tracks offsets for. */
enum { LG_SLOT_OWN = 0, LG_SLOT_SHARED = 1, LG_SLOTS = 2 };

typedef struct lg_client_s {
    struct lg_worker_s *w;
    nl_client_t *cl;              /* NULL before start and after stop */
    nl_conn_t *conn;              /* the live connection, or NULL */
    nl_wheel_entry_t wake_entry;  /* the next Ping, or the retry after a refused handshake */
    const char *transport_reason; /* why the TLS/WebSocket handshake failed, for on_retry */
    uint64_t start_ns;            /* when the current connect started (for connect time) */
    uint64_t last_offset[LG_SLOTS];
    uint32_t index;            /* position in the fleet, 0..clients-1; active when < active */
    uint32_t ping_interval_ms; /* from ConnectOk */
    uint32_t next_request_id;
    uint32_t publishes_inflight; /* sent on this connection, reply not yet received */
    uint8_t state;               /* lg_client_state_t */
    uint8_t pending_subs;        /* SubscribeOks still awaited */
    uint8_t offset_known;        /* bit per slot: last_offset is valid */
    uint8_t handshake_failures;  /* refusals in a row, for the retry delay */
    bool is_active;              /* publishes */
    bool has_shared;             /* subscribes to the broadcast or group channel */
    bool is_reason_counted;      /* an Error or Disconnect frame gave the close its reason */
    bool is_dropping;            /* the storm closed it: not a disconnect */
    bool was_ready;              /* reached READY at least once */
} lg_client_t;

/* The state one loop thread keeps: its clients, timers and counters. */
typedef struct lg_worker_s {
    const lg_config_t *cfg;
    struct lg_fleet_s *fleet;
    nl_loop_t *loop;
    uint32_t index; /* worker number */

    lg_client_t *clients; /* the fleet's clients i with i % workers == index */
    uint32_t client_count;
    uint32_t *active; /* indexes into clients of the active ones */
    uint32_t active_count;

    /* Ramp: clients[0..started) have been started; connect_rate share of this worker. */
    uint32_t started;
    double connect_rate;
    uint64_t ramp_start_ns;

    /* Publish schedule: rate share, start time and how many were due so far. */
    double publish_rate;
    uint64_t publish_start_ns;
    uint64_t publish_due;
    uint64_t publish_budget; /* publishes this worker makes in the measured phase */
    uint32_t next_publisher;
    bool is_measuring;   /* publishing (between measure start and stop) */
    bool is_budget_done; /* every scheduled publish made (reported to the fleet) */
    bool is_stopping;    /* closing everything: no reconnects, nothing counted */

    /* --publish-via http: this worker's admin connections, and the publishes due while every
     * one of them was busy. */
    struct lg_http_conn_s *http;
    uint32_t http_count;
    uint64_t http_backlog;
    int start_err; /* set by the thread's on_start; read after nl_loop_thread_start */

    nl_timer_t *tick;      /* ramp, heartbeat wheel and CPU sampling */
    nl_timer_t *pub_timer; /* the publish schedule */
    nl_wheel_t wheel;
    nl_client_opts_t client_opts; /* shared template; source_host set per client */
    nl_buf_t scratch;             /* frame encoding */
    uint8_t *payload; /* cfg->payload_bytes of padding; the first 8 rewritten per send */
    uint64_t rng;     /* xorshift64 for per-user targets */
    char shared_name[LG_PREFIX_MAX + 8];
    lg_stats_t stats;

    /* --report: per-interval latency histograms, a ring this thread records into at slice_cur;
     * the control loop reads the finished ones (lg_timeline.h). NULL without --report. */
    nl_hist_t *slices;
    uint32_t slice_cur;
    _Atomic uint64_t slice_cuts; /* cuts made; written here, read by the control loop */
} lg_worker_t;

/* Fills the nl_client options every client of cfg shares: target, timeouts, back-off,
 * reconnect, and this module's callbacks. Thread: any. */
void lg_client_opts_init(nl_client_opts_t *opts, const lg_config_t *cfg);

/* lg_transport's on_fail: remembers why c's TLS or WebSocket handshake failed, so that the
 * failed attempt is counted under that reason rather than its errno. Thread: worker. */
void lg_client_transport_failed(nl_conn_t *conn, const char *reason);

/* Prepares client index (idle or active, its group) for worker w. Thread: before w runs. */
void lg_client_init(lg_client_t *c, lg_worker_t *w, uint32_t index);

/* Starts connecting. Returns: 0; -ENOMEM or -EINVAL from nl_client_new (counted as a connect
 * failure too). Thread: worker. Callbacks: none before it returns. */
int lg_client_start(lg_client_t *c);

/* Sends one Publish to the pattern's channel (see lg_config_t.pattern) with the current time in
 * the payload. Returns: 0; -ENOTCONN when the client is not READY; -ENOBUFS/-ENOMEM.
 * Thread: worker. */
int lg_client_publish(lg_client_t *c);

/* Writes the channel client c publishes to next (its group's, the broadcast one, or a random
 * client's own channel for per-user) to channel, NUL-terminated.
 * Returns: the subscribers that publish owes deliveries to. Thread: worker. */
uint64_t lg_client_publish_target(lg_client_t *c, char *channel, size_t len);

/* The next READY active client of w in round-robin order, or NULL when none is ready.
 * Thread: worker. */
lg_client_t *lg_worker_next_publisher(lg_worker_t *w);

/* Writes the current CLOCK_REALTIME time in ns into the first 8 bytes of w->payload.
 * Thread: worker. */
void lg_worker_stamp_payload(lg_worker_t *w);

/* Closes the connection on purpose (the reconnect storm); nl_client reconnects it at once.
 * No-op unless READY. Thread: worker. */
void lg_client_drop(lg_client_t *c);

/* Closes the client for good (no reconnect). Idempotent. Thread: worker. Callbacks: the
 * connection's on_close runs at the end of the iteration, and is not counted. */
void lg_client_stop(lg_client_t *c);

/* The wheel's expire callback: sends the due Ping and re-files the entry, or starts the
 * delayed reconnect after a refused handshake. Thread: worker. */
void lg_client_wake(nl_wheel_t *wheel, nl_wheel_entry_t *e, void *arg);

/* Subscribers of a shared channel across the fleet, by construction (every client connected):
 * broadcast (group 0), or group g. Thread: any. */
uint64_t lg_client_shared_subscribers(const lg_config_t *cfg, uint32_t group);

#endif

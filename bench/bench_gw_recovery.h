/*
 * bench_gw_recovery.h: what bench_gw_recovery.c (options, setup, the phases, the report)
 * shares with bench_gw_recovery_wire.c (the live publisher thread, and the fleet's bytes
 * parsed and checked per client). A benchmark program's own header, not a library interface.
 */
#ifndef HERALD_BENCH_GW_RECOVERY_H
#define HERALD_BENCH_GW_RECOVERY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herald_client.h"
#include "netlib/nl_hist.h"

#define CHANNEL "room"
#define MIN_PAYLOAD 17 /* send time, sequence number, kind */

/* Payload: bytes 0..7 send time (CLOCK_REALTIME ns), 8..15 sequence number, 16 the kind. */
enum { KIND_PRELUDE = 1, KIND_MISSED = 2, KIND_LIVE = 3 };

/* A client's progress. */
enum {
    CS_SUBSCRIBED = 0, /* connected and subscribed (a stayer, or a storm client before the storm) */
    CS_AWAY,           /* storm client, closed */
    CS_CONNECTING,     /* Connect and Subscribe{recover} queued or sent */
    CS_AUTHED,         /* ConnectOk */
    CS_RECOVERING,     /* SubscribeOk{recovered}: the missed messages follow */
    CS_LIVE,           /* every missed message in */
    CS_FAILED,
};

/* Why a storm client did not recover. */
enum {
    F_NONE = 0,
    F_NOT_RECOVERED, /* SubscribeOk{recovered = false} */
    F_BAD_OFFSET,    /* SubscribeOk{recovered} with another offset than X */
    F_GAP,           /* a Push out of order */
    F_NOT_MISSED,    /* one of the first --missed Pushes was not a missed message */
    F_ERROR,         /* an Error or Disconnect frame */
    F_CLOSED,        /* the connection closed */
    F_TIMEOUT,       /* not live by --storm-timeout */
    F_COUNT
};
/* What each F_* prints as. */
extern const char *const rec_fail_names[F_COUNT];

typedef struct opts_s {
    size_t clients;
    size_t stayers;
    uint32_t missed;
    uint32_t keep;
    int rate;
    size_t payload;
    size_t in_flight;
    int spread_ms;
    int quiet_s;
    int after_s;
    int storm_timeout_s;
    int storms;    /* storms in a row, each measured on its own */
    bool is_plain; /* reference: reconnect with a plain Subscribe, no recovery */
    int io_threads;
} opts_t;

typedef struct client_s {
    uint64_t next;       /* next offset expected */
    uint64_t live_wall;  /* storm: CLOCK_REALTIME ns it went live */
    int64_t start_ms;    /* storm: when its reconnect began (monotonic) */
    uint32_t missed_got; /* storm: missed messages received so far */
    uint8_t state;
    uint8_t fail;
} client_t;

enum { PH_REF, PH_STORM, PH_AFTER, PH_COUNT };
#define MAX_STORMS 10

/* Where the run is, set by the main thread while no live message is in flight and read by
 * both fleets' threads. A live push is classified by when it was published (CLOCK_REALTIME
 * ns): before storm_wall it belongs to the reference, before after_wall to the storm, then
 * to the after phase; 0: not reached yet. storm is the storm's number. */
typedef struct phase_s {
    _Atomic uint64_t storm_wall;
    _Atomic uint64_t after_wall;
    _Atomic int storm;
} phase_t;

/* One fleet and its clients: the storm clients (the main thread's) or the stayers (their own
 * thread's, so that the storm's work in the main fleet does not delay their reads). */
typedef struct run_s {
    const opts_t *o;
    bool is_stayers;
    size_t n;
    client_t *c;
    char **tokens;
    test_fleet_t *fl;
    phase_t *phase;
    struct run_s *stayers; /* the storm clients' run: the stayers' (NULL in theirs) */
    uint64_t x;            /* the offset every storm client recovers from */
    char epoch[17];        /* its epoch */
    /* Storm clients: counters of the current storm, reset before each. */
    size_t authed;         /* ConnectOk */
    size_t connect_failed; /* failed before ConnectOk */
    size_t live;
    size_t failed;
    size_t fails[F_COUNT];
    uint64_t recovered_pushes;
    nl_hist_t to_live_ms; /* reconnect started -> live, per client */
    int64_t last_live_ms;
    uint64_t want_next;     /* what a client caught up has as next (all_caught_up) */
    bool is_stayers_behind; /* a stayer lacked the last message at a storm's end */
    /* Stayers: written by their thread, read by the main one. */
    _Atomic size_t gaps;       /* stayers that saw a gap or a duplicate */
    _Atomic uint64_t min_next; /* lowest next offset among the stayers without a gap */
    _Atomic int is_quit;       /* main: stop the thread */
    int64_t deadline_ms;       /* the thread stops by then whatever happens */
    /* Live pushes, per storm and phase. A push that shared a read with a later one carries
     * that one's kernel stamp, so its arrival figure is an upper bound: counted in late. */
    nl_hist_t arrive_us[MAX_STORMS][PH_COUNT];
    nl_hist_t processed_us[MAX_STORMS][PH_COUNT];
    uint64_t pushes_in_read; /* live pushes in the read being parsed */
    uint64_t late[MAX_STORMS][PH_COUNT];
    uint64_t unstamped;
    uint64_t other; /* frames nobody expected (Pong, ...) */
} run_t;

/* CLOCK_REALTIME now, in ns: payload stamps use it, as the kernel's receive stamps do. */
uint64_t rec_wall_ns(void);

/* Writes a payload's stamp: send time, sequence number, kind. */
void rec_payload_mark(uint8_t *p, uint64_t send_ns, uint64_t seq, uint8_t kind);

/* The live publisher: a thread with its own connection. */
typedef struct pubthr_s {
    uint16_t port;
    const char *token;
    int rate;
    size_t payload;
    int64_t deadline_ms;
    _Atomic int is_on;            /* main: 1 publish, 0 pause */
    _Atomic int is_quit;          /* main: stop for good */
    _Atomic uint64_t pause_req;   /* main: bumped with each pause */
    _Atomic uint64_t pause_ack;   /* thread: the pause_req it has honoured (nothing in flight) */
    _Atomic uint64_t last_offset; /* thread: the offset of its last PublishOk */
    _Atomic uint64_t sent;
    uint64_t answered; /* thread: PublishOks read */
    int err;
    char what[256];
} pubthr_t;

/* The thread's body (pthread_create with a pubthr_t). */
void *rec_pub_main(void *arg);

/* Pauses the publisher and waits until no publish is in flight.
 * Returns: 0; -ETIMEDOUT. */
int rec_pub_pause(pubthr_t *p);

/* The fleet's raw callback (arg: the run_t): frames parsed, each client's order checked,
 * live pushes' latencies recorded. */
size_t rec_on_raw(test_fleet_t *fl, size_t i, const char *data, size_t len, void *arg);

/* Marks client i failed for why (F_*); a stayer counts as a stayer with a gap. Thread: r's. */
void rec_client_fail(run_t *r, size_t i, int why);

#endif

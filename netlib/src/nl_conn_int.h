/*
 * nl_conn_int.h: the connection's layout and what nl_conn.c, nl_conn_out.c, nl_server.c and
 * nl_client.c share. Private to netlib.
 *
 * Memory: the gateway budgets about 512 bytes per connection including its own session, so
 * struct nl_conn_s stays at 136 bytes (a 144-byte malloc chunk; 137 would take 160): the fd
 * watcher, both buffers (24 bytes each while they hold no storage), and nothing per
 * connection that can be shared (callbacks, the owner's arg and the transport sit behind one
 * pointer to the server's or client's descriptor, the peer address is asked of the kernel).
 * What only some connections need is not in the plain layout: the transport's state pointer
 * follows it in connections with a transport (nl__conn_tp_t), and the deferred finish of a
 * closed connection is one link in the loop's closing list rather than a
 * finish slot of its own. The block queue is held only while blocks are queued (taken from
 * and given back to the loop's pool).
 *
 * Per loop (nl__loop_module(loop, NL__MODULE_CONN)): the id -> connection table, the dirty list
 * flushed once per iteration by a before-sleep hook, the list of connections closing this
 * iteration, the pools of empty input buffers, and the loop's counters.
 */
#ifndef HERALD_NETLIB_NL_CONN_INT_H
#define HERALD_NETLIB_NL_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "netlib/nl_client.h"
#include "netlib/nl_conn.h"
#include "netlib/nl_transport.h"
#include "nl_loop_int.h"

/* conn->flags. */
#define NL__CONN_READ_PAUSED 0x0002u /* nl_conn_pause_read */
#define NL__CONN_INPUT_FULL 0x0004u  /* the input buffer hit its cap: reading stopped */
#define NL__CONN_WRITE_ARMED 0x0008u /* NL_WRITE is wanted: the socket refused bytes */
#define NL__CONN_PEER_EOF 0x0010u    /* the peer closed: drain the output, then close */
#define NL__CONN_SHUT_WR 0x0020u     /* shutdown(SHUT_WR) done */
#define NL__CONN_WC_PENDING 0x0040u  /* on_write_complete owed by the next flush */
#define NL__CONN_RX_STAMPS 0x0080u   /* SO_TIMESTAMPNS: reads take the kernel receive time */
/* The transport (nl_transport.h). Plain TCP has none of these set, so its hot paths test one
 * flag where a transport's op would cost an indirect call. */
#define NL__CONN_TP_READ 0x0100u       /* reads go through the transport's read op */
#define NL__CONN_TP_WRITE 0x0200u      /* writes go through its writev: no direct, no batch */
#define NL__CONN_HANDSHAKE 0x0400u     /* CONNECTING: on_connected (and on_close) not owed */
#define NL__CONN_HS_WANT_WRITE 0x0800u /* the handshake waits for writability, not input */
#define NL__CONN_TP_WANT_WRITE 0x1000u /* the transport has bytes of its own to write */
#define NL__CONN_READ_QUEUED 0x2000u   /* on the loop's list of reads without readiness */
#define NL__CONN_OVER_HW 0x4000u     /* counted in the loop's over_high_water (nl_conn_out.c) */

/* Marks "not on the dirty list" for dirty_idx. */
#define NL__CONN_NO_IDX UINT32_MAX

struct nl__conn_bq_s;

/* What the connections of one server or client share: their callbacks, the owner's arg, the
 * client that made them, the transport. One pointer per connection instead of one per item
 * (the layout's budget, above). Reference-counted, atomically: a server's connections live on
 * several IO loops and may outlive the server itself. release runs when the last reference
 * goes (NULL: the owner frees it, as a client does after its connection). */
typedef struct nl__conn_desc_s {
    const nl_conn_cbs_t *cbs; /* never NULL */
    void *arg;                /* nl_conn_ctx */
    nl_client_t *client;      /* nl_client_of; NULL for a server's connections */
    const nl_transport_t *tp; /* NULL: plain TCP */
    void *tp_arg;             /* the transport's open arg */
    uint64_t refs;            /* atomic */
    void (*release)(struct nl__conn_desc_s *d);
    struct nl__conn_desc_s *parent; /* a copy made by nl_conn_set_cbs holds its original */
} nl__conn_desc_t;

/* Callbacks that do nothing: a descriptor's cbs when its owner gave none. */
extern const nl_conn_cbs_t nl__conn_no_cbs;

/* Sets up a descriptor with one reference; a NULL cbs means no callbacks, and the plain
 * transport table means no transport. */
void nl__conn_desc_init(nl__conn_desc_t *d, const nl_conn_cbs_t *cbs, void *arg,
                        const nl_transport_t *tp, void *tp_arg);
void nl__conn_desc_ref(nl__conn_desc_t *d);
void nl__conn_desc_unref(nl__conn_desc_t *d);

struct nl_conn_s {
    struct nl_io_s io; /* the fd watcher */
    nl_buf_t in;
    nl_buf_t out; /* owned output bytes; its max_bytes is the hard output cap */
    uint64_t id;
    nl__conn_desc_t *desc; /* callbacks, owner, transport: shared (holds a reference) */
    void *data;
    struct nl__conn_bq_s *bq;       /* queued block references; NULL when none */
    struct nl_conn_s *next_closing; /* the loop's closing list, after nl_conn_close */
    uint32_t high_water;            /* bytes; 0 disables */
    /* A connection leaves the dirty list when it closes, so the slot is reused for the reason
     * on_close will get. */
    union {
        uint32_t dirty_idx;
        int32_t close_reason;
    } u;
    uint16_t flags;
    uint8_t state; /* nl_conn_state_t */
    uint8_t pool;  /* 1 + index of the loop's input pool for this input cap; 0: none */
};

/* See the top of the file: plain TCP connections must stay in a 144-byte malloc chunk. */
_Static_assert(sizeof(struct nl_conn_s) <= 136, "struct nl_conn_s grew past 136 bytes");

/* A connection with a transport (desc->tp set): the plain layout, then the transport's
 * per-connection state. Allocated whole by nl__conn_new; plain TCP connections end before
 * the tail, so only their transport's connections pay for the pointer. */
typedef struct nl__conn_tp_s {
    struct nl_conn_s c;
    void *state; /* what the transport's open op stored */
} nl__conn_tp_t;

/* The transport's state slot of c, which must have a transport. */
static inline void **nl__conn_tp_state(nl_conn_t *c)
{
    return &((nl__conn_tp_t *)c)->state;
}

/* Blocks queued behind (and between) owned output bytes. Entry i is written after pre bytes
 * of the output buffer that precede it; bytes of the output buffer beyond the sum of all pre
 * come after the last block. A ring that doubles; freed when the queue drains. */
typedef struct nl__conn_bq_entry_s {
    nl_block_t *block;
    uint32_t pre;
} nl__conn_bq_entry_t;

typedef struct nl__conn_bq_s {
    uint32_t head;
    uint32_t count;
    uint32_t cap;      /* a power of two */
    uint32_t head_off; /* bytes of the head block already written */
    size_t pre_total;  /* sum of pre over the entries */
    size_t bytes;      /* unwritten bytes in the queued blocks */
    nl__conn_bq_entry_t e[];
} nl__conn_bq_t;

/* Emptied block queues kept for reuse, per ring size (NL__CONN_BQ_MIN entries, twice that,
 * four times): a fan-out gives every subscriber a queue and takes it back when the flush drains
 * it, so without the pool each delivery costs a malloc and a free. A LIFO stack, so the queue
 * a connection takes is the one most recently released (hot in cache); at most
 * NL__CONN_BQ_POOL_MAX per size; trimmed like the input pools (see nl_conn_out.c). */
#define NL__CONN_BQ_CLASSES 3
typedef struct nl__conn_bq_pool_s {
    struct nl__conn_bq_s **items;
    uint32_t count;
    uint32_t cap;
    uint32_t low; /* the fewest queues held since the last trim: idle that long */
} nl__conn_bq_pool_t;

/* A connection pointer array with O(1) removal: each member stores its index. */
typedef struct nl__conn_vec_s {
    nl_conn_t **items;
    uint32_t len;
    uint32_t cap;
} nl__conn_vec_t;

/* Empty input buffers that keep their storage, all with one input cap, reused LIFO so the
 * buffer a read lands in is the one the previous read used: hot in cache (see nl_conn.c). */
#define NL__CONN_POOLS 4
#define NL__CONN_POOL_BUFS 8
typedef struct nl__conn_pool_s {
    size_t max_bytes; /* the input cap of its buffers; 0: slot unused */
    uint32_t count;
    uint32_t low; /* the fewest buffers held since the last trim: idle that long */
    nl_buf_t bufs[NL__CONN_POOL_BUFS];
} nl__conn_pool_t;

/* The connection module's state on one loop. Owner thread only. */
typedef struct nl__conn_loop_s {
    nl_loop_t *loop;
    nl_conn_t **table; /* open addressing by id, linear probing, no tombstones */
    uint32_t table_mask;
    uint32_t table_count;
    nl__conn_vec_t dirty;       /* output queued, flush due before the loop sleeps */
    nl__conn_vec_t dirty_spare; /* the previous pass's array, reused */
    nl__conn_pool_t pools[NL__CONN_POOLS];
    nl__conn_bq_pool_t bq_pools[NL__CONN_BQ_CLASSES];
    uint64_t last_trim_ms;
    char *coalesce_buf; /* NL__CONN_COALESCE_BYTES, allocated by the first coalesced write */
    /* Batched sends (nl_conn_out.c): allocated when nl_conn_set_batch_sends turns them on, else
     * by the first flush with enough connections; is_batch_off once io_uring proved
     * unavailable or nl_conn_set_batch_sends turned it off. */
    struct nl__conn_batch_s *batch;
    uint64_t batch_retry_ms;       /* no ring setup before this loop time (after a shortage) */
    uint32_t batch_retry_delay_ms; /* the last wait after a shortage; 0 after a success */
    bool is_batch_off;
    bool is_flush_posted;
    bool is_flushing; /* inside nl__conn_flush_dirty: the dirty arrays are being swapped */
    /* While the on_message of a connection with NL__CONN_RX_STAMPS runs: that connection and
     * the kernel receive time (CLOCK_REALTIME ns) of the read behind it; NULL and 0 otherwise.
     * Per loop, not per connection: it means something only during that callback, and one
     * loop runs one callback at a time. */
    const nl_conn_t *rx_conn;
    uint64_t rx_ns;
    /* Connections (by id: one may close before its turn) to read without fd readiness: input
     * a transport holds (nl_transport.c). Run by a posted closure. */
    uint64_t *read_ids;
    uint32_t read_len;
    uint32_t read_cap;
    bool is_read_posted;
    /* Connections closed and not yet finished, in the order they closed (linked by
     * next_closing). One deferred finish per loop runs them all at the end of the iteration:
     * a connection needs one link for it instead of a deferred slot of its own. */
    nl_conn_t *closing_head;
    nl_conn_t *closing_tail;
    nl__deferred_t closing_finish;
    bool is_closing_queued; /* closing_finish is on the loop's deferred list */
    nl_conn_loop_stats_t stats;
} nl__conn_loop_t;

/* What a server or client hands a new connection. */
typedef struct nl__conn_setup_s {
    nl__conn_desc_t *desc; /* the connection takes its own reference */
    size_t high_water_bytes;
    size_t max_input_bytes;
} nl__conn_setup_t;

/* Wraps a connected, non-blocking socket in a connection on loop (owner thread), not yet
 * reading: CONNECTED, or CONNECTING when its transport has a handshake. Sets TCP_NODELAY and
 * runs the transport's open. Returns: 0; -ENOMEM; the open op's error.
 * On failure the caller still owns fd. */
int nl__conn_new(nl_conn_t **out, nl_loop_t *loop, int fd, const nl__conn_setup_t *setup);

/* Starts reading and runs on_connected, or starts the handshake. The connection may be closed
 * when it returns. */
void nl__conn_start(nl_conn_t *c);

/* The loop's connection state; created on first use when create is true (NULL on ENOMEM or
 * when it does not exist and create is false). */
nl__conn_loop_t *nl__conn_loop_state(nl_loop_t *loop, bool create);

/* Recomputes the fd interest from the flags and state; an epoll failure closes c. */
void nl__conn_update_interest(nl_conn_t *c);

/* Whether c reads input now (not paused, not full, not past the peer's EOF). */
static inline bool nl__conn_wants_read(const nl_conn_t *c)
{
    return !(c->flags & (NL__CONN_READ_PAUSED | NL__CONN_INPUT_FULL | NL__CONN_PEER_EOF));
}

/* Reads c (up to a few reads in a row) and runs on_message; events: the readiness that caused
 * it (NL_RDHUP, NL_PRI matter), 0 for a read without one. */
void nl__conn_handle_read(nl_conn_t *c, unsigned events);

/* nl_transport.c: one handshake step of a CONNECTING connection; on DONE it becomes
 * CONNECTED, runs on_connected and reads what came with the handshake. */
void nl__conn_handshake(nl_conn_t *c);
/* nl_transport.c: if c's transport holds input, reads c soon without fd readiness. */
void nl__conn_read_pending(nl_conn_t *c);

/* The loop's connection state of c (exists while c does). */
static inline nl__conn_loop_t *nl__conn_st(const nl_conn_t *c)
{
    return (nl__conn_loop_t *)nl__loop_module(c->io.loop, NL__MODULE_CONN)->state;
}

/* nl__loop_defer that also works when called outside the loop's run (see nl_conn.c). */
void nl__conn_defer(nl_loop_t *loop, nl__deferred_t *d);

/* Half-closes the write side once (shutdown(SHUT_WR)); a failure other than ENOTCONN closes c. */
void nl__conn_shut_wr(nl_conn_t *c);

/* The hard cap of the owned output buffer for a high-water mark (see nl_conn_out.c). */
size_t nl__conn_out_cap(uint32_t high_water);

/* Appends c to v and returns its index, or NL__CONN_NO_IDX on ENOMEM. */
uint32_t nl__conn_vec_push(nl__conn_vec_t *v, nl_conn_t *c);
/* Removes the item at idx by moving the last one there; returns the moved item (whose index
 * the caller must update) or NULL when idx was last. */
nl_conn_t *nl__conn_vec_remove(nl__conn_vec_t *v, uint32_t idx);

/* Parses a numeric IPv4 or IPv6 address (NULL: 0.0.0.0). Returns 0 or -EINVAL. */
int nl__sockaddr_parse(const char *host, uint16_t port, struct sockaddr_storage *ss,
                       socklen_t *len);

/* nl_conn_out.c: output queue. */

/* Queued output bytes: owned plus blocks. */
size_t nl__conn_queued(const nl_conn_t *c);
/* Whether nothing waits to be written: no queued bytes, none of the transport's own. */
static inline bool nl__conn_out_is_empty(const nl_conn_t *c)
{
    return nl__conn_queued(c) == 0 && !(c->flags & NL__CONN_TP_WANT_WRITE);
}
/* Marks c for this iteration's flush (the transport's own output). Returns 0 or -ENOMEM. */
int nl__conn_mark_dirty(nl_conn_t *c);
/* Unrefs every queued block, returns the queue to the loop's pool and frees the output
 * storage. */
void nl__conn_out_drop(nl_conn_t *c);
/* Frees the block queues that sat in the loop's pools for a whole trim period (all = true:
 * every one, when the loop's state goes). */
void nl__conn_bq_pools_trim(nl__conn_loop_t *st, bool all);
/* Removes c from its loop's dirty list if it is there. */
void nl__conn_unmark_dirty(nl_conn_t *c);
/* Handles writability: writes what is queued and settles interest, shutdown and callbacks. */
void nl__conn_handle_write(nl_conn_t *c);
/* The before-sleep flush of every dirty connection on the loop. */
void nl__conn_flush_dirty(nl__conn_loop_t *st);
/* Frees the batched-send state. */
void nl__conn_batch_free(nl__conn_loop_t *st);
/* Posts a flush for connections marked dirty after this iteration's before-sleep hooks ran
 * (by a close callback), so the loop does not sleep on them. */
void nl__conn_flush_soon(nl__conn_loop_t *st);

/* nl_client.c: the client's connection finished its handshake (is CONNECTED). */
void nl__client_conn_ready(nl_client_t *cl);
/* nl_client.c: the client's connection finished (after on_close). is_failed: it closed before
 * its handshake finished, a failed attempt (reason: why). */
void nl__client_conn_finished(nl_client_t *cl, nl_conn_t *c, bool is_failed, int reason);

#endif

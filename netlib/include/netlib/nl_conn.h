/*
 * nl_conn: a TCP connection owned by one loop (muduo TcpConnection, Redis connection).
 *
 * States: CONNECTING (its transport's handshake runs: nl_transport.h) -> CONNECTED ->
 * DISCONNECTING (shutdown requested, output draining) -> DISCONNECTED. Connections are
 * created by netlib only (nl_server accepts, nl_client connects) and freed by netlib only,
 * after on_close. on_connected and on_close pair up: a connection closed before its
 * handshake finished gets neither.
 * I/O goes through the transport of its server or client (nl_transport.h): plain TCP unless
 * one was given, and whatever is said below of the socket is said of plain TCP.
 *
 * Input: each readiness does one nl_buf_read_fd into the input buffer, then calls on_message
 * with it; the callback consumes what it can (nl_buf_retrieve) and leaves partial frames.
 * Input storage is held only while unread bytes wait in it: emptied by on_message, it goes
 * back to the loop at once. A callback that pauses reading and leaves bytes for later keeps
 * them in storage of their own size, not a whole read buffer; when it consumes them outside
 * on_message, nl_conn_input_settle gives that storage back.
 * The socket is watched edge-triggered, so a read that filled all it offered (or left the
 * peer's FIN) is followed by up to three more before the loop moves on and re-arms.
 * With nl_conn_set_rx_timestamps the read is a recvmsg that also takes the kernel's receive
 * time, which on_message reads with nl_conn_rx_time_ns (for latency split into "in the
 * socket" and "processed").
 * Output: nl_conn_send writes straight to the socket when nothing is queued and queues only
 * the rest; nl_conn_send_block queues a reference to a shared block. Queued output is flushed
 * once per loop iteration (before-sleep) with one writev over everything queued, so bursts
 * coalesce. Buffers hold no storage while the connection is idle.
 * The high-water mark counts queued output bytes; on_high_water fires when a send takes the
 * queue from below to at-or-above it (then again only after the queue drained below it).
 * The owned output buffer has a hard cap: twice the high-water mark (at least 64 KiB), or
 * NL_BUF_DEFAULT_MAX without a mark; nl_conn_send past it returns -ENOBUFS.
 * Peer EOF: output still queued is written first, then the connection closes with reason 0.
 * TCP_NODELAY is on for every accepted and connected socket (nl_conn_set_nodelay turns it off).
 *
 * Thread: every function taking an nl_conn_t * is owner-thread only (NL_ASSERT_OWNER), except
 * nl_conn_send_to, which takes (loop, id) and works from any thread.
 * Ownership: netlib frees the connection after on_close returns; the pointer is dead then.
 * nl_conn_close is idempotent and safe inside any callback, the connection's own included: the
 * connection is freed only after the current callback returns (at the end of the iteration).
 * Usage: in on_connected set nl_conn_set_data(c, session); in on_message parse and reply with
 *        nl_conn_send; in on_close free the session.
 */
#ifndef HERALD_NETLIB_NL_CONN_H
#define HERALD_NETLIB_NL_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "netlib/nl_block.h"
#include "netlib/nl_buf.h"
#include "netlib/nl_loop.h"

typedef struct nl_conn_s nl_conn_t;

typedef enum nl_conn_state_e {
    NL_CONN_CONNECTING = 0,
    NL_CONN_CONNECTED,
    NL_CONN_DISCONNECTING,
    NL_CONN_DISCONNECTED,
} nl_conn_state_t;

typedef void (*nl_conn_connected_cb)(nl_conn_t *c);
/* in: the input buffer; consume with nl_buf_retrieve. Leaving bytes keeps them for next time. */
typedef void (*nl_conn_message_cb)(nl_conn_t *c, nl_buf_t *in);
typedef void (*nl_conn_write_complete_cb)(nl_conn_t *c);
typedef void (*nl_conn_high_water_cb)(nl_conn_t *c, size_t queued_bytes);
/* reason: 0 orderly (peer EOF or local close with 0), -ETIMEDOUT idle, else negative errno. */
typedef void (*nl_conn_close_cb)(nl_conn_t *c, int reason);

/* Callbacks, shared by every connection of a server or client (one static struct, not a copy
 * per connection). Any slot may be NULL. */
typedef struct nl_conn_cbs_s {
    nl_conn_connected_cb on_connected;
    nl_conn_message_cb on_message;
    nl_conn_write_complete_cb on_write_complete;
    nl_conn_high_water_cb on_high_water;
    nl_conn_close_cb on_close;
} nl_conn_cbs_t;

uint64_t nl_conn_id(const nl_conn_t *c); /* unique per process, never reused */
nl_loop_t *nl_conn_loop(const nl_conn_t *c);
int nl_conn_fd(const nl_conn_t *c);
nl_conn_state_t nl_conn_state(const nl_conn_t *c);

/* Writes the peer address as "ip:port" (getpeername; nothing is stored per connection).
 * Returns 0 or -errno. */
int nl_conn_peer(const nl_conn_t *c, char *out, size_t out_len);

/* The arg of the server or client that made this connection (nl_server_opts_t.arg,
 * nl_client_opts_t.arg), shared by all its connections. */
void *nl_conn_ctx(const nl_conn_t *c);

void nl_conn_set_data(nl_conn_t *c, void *data);
void *nl_conn_data(const nl_conn_t *c);

/* Replaces this connection's callbacks (e.g. after a protocol switch); the others of its
 * server or client keep theirs. cbs must outlive the connection. Returns: 0; -ENOMEM (the
 * callbacks are unchanged). Thread: owner. */
int nl_conn_set_cbs(nl_conn_t *c, const nl_conn_cbs_t *cbs);

/* Sends len bytes: written straight to the socket when nothing is queued, the rest copied into
 * the output buffer. Returns: 0; -ENOTCONN when not CONNECTED; -ENOBUFS when the output
 * buffer's cap is reached (nothing queued); -ENOMEM. A write error closes the connection
 * (on_close later), it is not returned. Thread: owner. Callbacks: on_high_water and
 * on_write_complete may run before this returns. */
int nl_conn_send(nl_conn_t *c, const void *data, size_t len);

/* As nl_conn_send, but never writes now: the bytes are copied into the output and go out with
 * the iteration's flush, in one write with whatever else the connection has queued, and in
 * one batch with the other connections' writes (nl_conn_set_batch_sends). For answers made
 * while handling input: a burst of requests over many connections then costs one system
 * call, not one per answer, and wakes each peer once. Same returns as nl_conn_send. Thread:
 * owner. Callbacks: on_high_water may run before this returns. */
int nl_conn_send_later(nl_conn_t *c, const void *data, size_t len);

/* Queues a reference to a shared block (taking its own reference) and marks the connection
 * for the iteration's flush. Returns: 0; -ENOTCONN; -ENOMEM. Thread: owner.
 * Callbacks: on_high_water may run before this returns. */
int nl_conn_send_block(nl_conn_t *c, nl_block_t *b);

/* As nl_conn_send_block, but the queue takes over a reference the caller already holds
 * instead of adding one: a fan-out takes n references with one nl_block_ref_n rather than one
 * atomic increment per connection. On success the reference is the connection's; on error
 * (the same codes) it stays the caller's. Thread: owner. */
int nl_conn_send_block_ref(nl_conn_t *c, nl_block_t *b);

/* Copies data and posts it to the owner loop, which sends it to connection id if it is still
 * there. Returns: 0; -ENOMEM. A connection gone meanwhile drops the data (counted per loop).
 * Thread: any. */
int nl_conn_send_to(nl_loop_t *loop, uint64_t conn_id, const void *data, size_t len);

/* Finds a live connection of this loop by id, or NULL. Thread: owner. */
nl_conn_t *nl_conn_lookup(nl_loop_t *loop, uint64_t conn_id);

/* Output bytes queued and not yet written. */
size_t nl_conn_output_bytes(const nl_conn_t *c);

/* Sets the high-water mark in bytes (0 disables, the default), and with it the output cap. */
void nl_conn_set_high_water(nl_conn_t *c, size_t bytes);

/* Caps the input buffer (default NL_BUF_DEFAULT_MAX); a full input buffer pauses reading
 * until nl_conn_resume_read. */
void nl_conn_set_max_input(nl_conn_t *c, size_t bytes);

/* Stops / resumes reading from the socket (backpressure). Thread: owner. */
void nl_conn_pause_read(nl_conn_t *c);
void nl_conn_resume_read(nl_conn_t *c);

/* Input consumed outside on_message: gives back the input buffer's storage if nothing unread
 * is left in it, as netlib does itself after on_message. For a caller that paused reading in
 * on_message and handled the bytes left behind later (after an answer from a worker): call it
 * when done with them, or the idle connection keeps their storage for good. A no-op while
 * unread bytes remain. Thread: owner. Callbacks: none. */
void nl_conn_input_settle(nl_conn_t *c);

/* TCP_NODELAY on or off. Returns 0 or -errno. */
int nl_conn_set_nodelay(nl_conn_t *c, bool on);

/* Turns kernel receive timestamps on or off (SO_TIMESTAMPNS). While on, each read uses
 * recvmsg instead of readv and nl_conn_rx_time_ns reports its stamp; the cost is a control
 * message per read. Returns: 0; negative errno from setsockopt (the setting is unchanged).
 * Thread: owner. */
int nl_conn_set_rx_timestamps(nl_conn_t *c, bool on);

/* Inside on_message: the kernel receive time, CLOCK_REALTIME ns, of the last segment taken by
 * the read that produced this callback (for TCP, when its last bytes reached the socket; the
 * bytes before them may have arrived earlier). Compare it with clock_gettime(CLOCK_REALTIME).
 * Returns: the stamp; 0 when timestamps are off, the kernel attached none, or outside c's
 * own on_message (nothing is stored per connection: the stamp lives only for the callback).
 * Thread: owner. */
uint64_t nl_conn_rx_time_ns(const nl_conn_t *c);

/* Graceful: half-closes (SHUT_WR) once the queued output is written, keeps reading until the
 * peer closes. State becomes DISCONNECTING. Idempotent. Thread: owner. */
void nl_conn_shutdown(nl_conn_t *c);

/* Forced close: stops events, drops queued output, and frees the connection at the end of the
 * iteration after on_close(c, reason). Idempotent; safe inside any callback. Thread: owner. */
void nl_conn_close(nl_conn_t *c, int reason);

/* Per-loop connection counters (owner thread, or summed by a posted closure). */
typedef struct nl_conn_loop_stats_s {
    uint64_t open; /* connections now */
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t writev_calls;
    uint64_t send_to_dropped;  /* nl_conn_send_to for an id that was gone */
    uint64_t coalesced_writes; /* writes whose small pieces were copied into one buffer */
    uint64_t batch_submits;    /* system calls that sent for many connections (io_uring) */
    uint64_t batch_sends;      /* sends made by those calls */
    uint64_t short_writes;     /* writes the kernel took only part of: the socket filled */
    /* 1 once this loop found io_uring missing or forbidden (batch_sends_unavailable was
     * logged) and sends one by one for good; 0 otherwise. */
    uint64_t batch_unavailable;
    /* Gauges, kept up to date as output is queued, written and dropped: */
    uint64_t out_queued_bytes; /* output bytes queued on the loop's connections, not yet written */
    uint64_t over_high_water;  /* connections whose queued output is at or above their
                                * high-water mark (nl_conn_set_high_water) */
    uint64_t in_held_bytes;    /* input storage the loop's connections hold (unread bytes and
                                * the room around them; not the loop's pool of empty buffers):
                                * 0 when no connection has unread input */
} nl_conn_loop_stats_t;
void nl_conn_get_loop_stats(nl_loop_t *loop, nl_conn_loop_stats_t *out);

/* Batched sends (on by default): a flush that writes to several plain connections (or ones
 * whose transport turned fd writes on, nl_transport.h) hands their writes (one piece, or small
 * pieces copied into one) to the kernel in one system call per 256 connections (io_uring)
 * instead of one each; large multi-piece writes go one by one. Where the kernel lacks io_uring
 * (or its send operation, before Linux 5.6) or forbids it, the loop logs
 * batch_sends_unavailable once, reports batch_unavailable in its stats, and sends one by one;
 * a shortage of memory or descriptors at setup logs batch_sends_retry and is retried after
 * 10 s, doubling up to 10 min. Bytes, order and callbacks are the same either way. Turning it
 * on sets the ring up at once (by default it is set up by the first flush that needs it): a
 * server should, at start, so that the ring's descriptor is not sought later, at the
 * process's limit. Thread: loop's owner. */
void nl_conn_set_batch_sends(nl_loop_t *loop, bool on);

/* Writes the queued output of every connection of loop now, as the loop's own before-sleep
 * flush would later in this iteration: for a caller that wants to act after the writes (a
 * publish-to-flush latency sample), from a before-sleep hook or a posted closure.
 * Connections waiting for the socket stay queued; called from inside a flush (a
 * connection's callback) it does nothing. Thread: loop's owner. Callbacks: on_write_complete,
 * on_high_water and on_close may run before this returns. */
void nl_conn_flush_loop(nl_loop_t *loop);

#endif

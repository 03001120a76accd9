/*
 * nl_transport: the seam between a connection and its socket. Plain TCP, TLS and WebSocket
 * are implementations of one small ops table (nginx ngx_os_io_t swapped by its SSL module;
 * Redis ConnectionType with conn_socket.c and conn_tls.c). A server or client picks one in its
 * options (nl_server_opts_t.transport, nl_client_opts_t.transport); NULL is plain TCP, which
 * is also what every op left NULL means. netlib itself is libc only: implementations that need
 * OpenSSL or a WebSocket library live with their user (herald's gateway/transport room) and
 * are handed in.
 *
 * What netlib does with the table, per connection:
 * - open(c, arg, is_client, &state) when the connection is made (accepted, or connected by a
 *   client), before any I/O; state is the transport's one pointer of per-connection state.
 * - handshake(c, state) while the connection is CONNECTING: at once, then on each readiness
 *   the last answer asked for. NL_TRANSPORT_DONE makes it CONNECTED and runs on_connected;
 *   an error closes it. Without a handshake op a connection is CONNECTED at once.
 * - read(c, state, in) appends input to the connection's input buffer; on_message follows.
 * - writev(c, state, iov, n) writes queued output (one iovec straight from nl_conn_send when
 *   nothing is queued, else everything queued, the small pieces copied into one).
 * - shutdown(c, state) before the write side is half-closed (nl_conn_shutdown, once the queued
 *   output is written); netlib then calls shutdown(2) with SHUT_WR itself.
 * - has_pending(c, state): input buffered inside the transport, readable without the fd.
 * - free(c, state) after on_close (or, for a connection that never finished its handshake,
 *   instead of it), before the fd is closed. Always once, whatever happened before.
 *
 * Return conventions: bytes >= 0 or a negative errno, as everywhere in netlib. read: bytes
 * appended (> 0), 0 for the peer's orderly end of stream, -EAGAIN when it needs the fd to
 * become readable (it saw EAGAIN: the fd is edge-triggered, so -EAGAIN must mean the socket
 * was drained), -ENOBUFS when the input buffer is at its cap (reading pauses until the owner
 * makes room), any other -errno closes the connection. netlib reads again after every read
 * that returned bytes, up to 4 reads per readiness; past that it asks has_pending, and reads
 * on in the next iteration if data is waiting inside the transport. writev: bytes of the
 * caller's iovecs taken (a short count when the socket filled), -EAGAIN when it took none,
 * -errno closes. netlib guarantees the stream: after a short write or -EAGAIN the next call
 * starts with the untaken bytes, the same bytes in the same order (possibly at another
 * address, possibly with more after them).
 *
 * Direct writes: a connection whose transport has no writev, or that turned fd writes on with
 * nl_conn_transport_set_fd_writes, is written to as plain TCP is: send(2)/sendmsg(2) straight
 * from nl_conn_send and the flush, and in batches through io_uring (nl_conn_set_batch_sends).
 * Through a transport's writev there is one call per connection and no batching. netlib
 * decides this per connection with a flag, so plain TCP pays no indirect call on its hot
 * paths; reads likewise (no read op: readv into the input buffer, with receive timestamps).
 *
 * How an OpenSSL TLS transport sits on this (gateway/transport, not netlib):
 * - open: SSL_new from the SSL_CTX passed as arg, SSL_set_fd(ssl, nl_conn_fd(c)),
 *   SSL_set_accept_state or SSL_set_connect_state by is_client (plus SNI and host checks for
 *   a client), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER (netlib
 *   retries with the same bytes, not always at the same address); *state = ssl.
 * - handshake: SSL_do_handshake; SSL_ERROR_WANT_READ -> NL_TRANSPORT_WANT_READ,
 *   SSL_ERROR_WANT_WRITE -> NL_TRANSPORT_WANT_WRITE, 1 -> NL_TRANSPORT_DONE, else an errno
 *   (count the failure there). A deadline is the caller's: open may start a timer (or a wheel
 *   entry keyed by nl_conn_id) that calls nl_conn_close(c, -ETIMEDOUT) while nl_conn_state(c)
 *   is still NL_CONN_CONNECTING; free stops it. A connection closed while handshaking gets
 *   no on_close (the application never saw it) but always its free.
 * - read: SSL_read into nl_buf_begin_write(in) after nl_buf_ensure_writable (or -ENOBUFS at
 *   the cap), nl_buf_has_written; WANT_READ -> -EAGAIN; SSL_ERROR_ZERO_RETURN (close_notify)
 *   -> 0. SSL_read returns one record at most while the socket may hold more: netlib reads
 *   again until -EAGAIN, and has_pending = SSL_pending(ssl) > 0 (or SSL_has_pending) covers
 *   records already decrypted or read ahead, which no epoll edge will report: after the
 *   read budget, on nl_conn_resume_read, and after the handshake netlib reads those without
 *   waiting for the fd. A read that must write first (SSL_ERROR_WANT_WRITE: renegotiation or
 *   a KeyUpdate answer on a full socket) calls nl_conn_transport_want_write and returns
 *   -EAGAIN; its writev(c, state, NULL, 0) then flushes and calls nl_conn_transport_want_read.
 * - writev: SSL_write per piece (netlib already copied small pieces into one, so a burst is one
 *   record); WANT_WRITE -> -EAGAIN if nothing was taken yet, else the bytes taken so far.
 * - shutdown: SSL_shutdown sends close_notify: 0 or 1 -> 0 (netlib then half-closes and reads
 *   until the peer's close_notify or EOF), WANT_WRITE -> NL_TRANSPORT_WANT_WRITE.
 * - free: SSL_free. A forced nl_conn_close sends no close_notify (as a reset would not).
 * - kTLS: after the handshake, with SSL_OP_ENABLE_KTLS and BIO_get_ktls_send true, the kernel
 *   encrypts what is written to the fd: handshake calls nl_conn_transport_set_fd_writes(c,
 *   true) before returning DONE, and netlib's direct sends and io_uring batches apply again.
 *   Reads stay with the transport (kTLS receive reports non-data records through recvmsg
 *   control messages, which plain reads would not look at).
 *
 * How a WebSocket transport sits on it:
 * - handshake: reads the HTTP upgrade request from the fd into its own state (WANT_READ until
 *   the header is complete), checks it (the caller's policy: origin, path, subprotocol),
 *   writes the 101 response straight to the fd (WANT_WRITE while the socket is full, keeping
 *   the unwritten rest), then DONE: only now does the application see on_connected. Bytes that
 *   followed the request (the first frames) stay in its state: has_pending says so, and netlib
 *   runs a read right after on_connected.
 * - read: reads raw bytes (nl_transport_plain.read into its own buffer, say), unmasks
 *   complete frames and appends their payload to in. Pings, pongs and close frames are its
 *   own: it queues the answer in its state and calls nl_conn_transport_want_write, and the
 *   iteration's flush calls writev(c, state, NULL, 0) (also when the application queued
 *   nothing) until that returns 0. A close frame: answer it, then return 0 (end of stream).
 * - writev: wraps the bytes in frames. netlib's output is a byte stream: coalescing joins
 *   application messages and a short write splits them, so a transport that needs a message
 *   per WebSocket message finds the boundaries in the bytes (herald's frames are length
 *   delimited) or sends the stream as fragments of one long binary message. Its own bytes
 *   (pending control frames, the unwritten part of a frame header) go first. A frame the
 *   socket took only part of: count only the payload bytes that reached the socket and
 *   remember how far into the frame it is; netlib's next call starts with the rest of that
 *   payload, which it continues without a new header. So writev returns the full count only
 *   when nothing of its own is left, and netlib half-closes and calls on_write_complete only
 *   then.
 * - shutdown: writes a close frame (WANT_WRITE while the socket is full).
 *
 * Thread: every op runs on the connection's owner loop, like its callbacks; so do the
 * nl_conn_transport_* functions below (NL_ASSERT_OWNER). The table and its arg are shared by
 * every connection of the server or client, on all its IO loops: const, or safe to share.
 * Ownership: the table and arg must outlive the server or client and all their connections;
 * state is the transport's, freed by its free op.
 */
#ifndef HERALD_NETLIB_NL_TRANSPORT_H
#define HERALD_NETLIB_NL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "netlib/nl_buf.h"
#include "netlib/nl_conn.h"

/* A handshake's (and shutdown's) answers besides a negative errno. */
enum {
    NL_TRANSPORT_DONE = 0,
    NL_TRANSPORT_WANT_READ = 1,  /* call again when the fd is readable */
    NL_TRANSPORT_WANT_WRITE = 2, /* call again when the fd is writable */
};

typedef struct nl_transport_s {
    const char *name; /* for logs: "tcp", "tls", "ws" */
    /* Per-connection setup, before any I/O. Stores the transport's state in *state (may stay
     * NULL). Returns 0, or a negative errno: the connection is then closed at once (no
     * callbacks, no free). NULL: no state. */
    int (*open)(nl_conn_t *c, void *arg, bool is_client, void **state);
    /* One handshake step: NL_TRANSPORT_DONE, _WANT_READ, _WANT_WRITE, or a negative errno
     * (the connection closes with it). NULL: CONNECTED at once. */
    int (*handshake)(nl_conn_t *c, void *state);
    /* Appends input to in: bytes > 0, 0 at the end of stream, -EAGAIN, -ENOBUFS, -errno
     * (see the top of the file). NULL: readv from the fd, as plain TCP. */
    ssize_t (*read)(nl_conn_t *c, void *state, nl_buf_t *in);
    /* Writes from iov (iovcnt may be 0: only the transport's own pending bytes): bytes taken,
     * or -EAGAIN, or -errno. NULL: sendmsg on the fd, as plain TCP (and batched sends). */
    ssize_t (*writev)(nl_conn_t *c, void *state, const struct iovec *iov, int iovcnt);
    /* Whether input waits inside the transport, readable without the fd. NULL: never. */
    bool (*has_pending)(const nl_conn_t *c, void *state);
    /* The orderly close of the write side, before shutdown(SHUT_WR): NL_TRANSPORT_DONE,
     * NL_TRANSPORT_WANT_WRITE, or -errno (closes). NULL: nothing to send. */
    int (*shutdown)(nl_conn_t *c, void *state);
    /* Frees the state. NULL: nothing to free. */
    void (*free)(nl_conn_t *c, void *state);
} nl_transport_t;

/* Plain TCP as a table (read: readv into in; writev: sendmsg with MSG_NOSIGNAL), for a
 * transport that layers on the raw stream (WebSocket over TCP reads with it). Passing it as a
 * server's or client's transport is the same as NULL. */
extern const nl_transport_t nl_transport_plain;

/* The state open stored for c (NULL for plain TCP). Thread: owner. */
void *nl_conn_transport_state(const nl_conn_t *c);

/* Turns direct fd writes on or off for c: on, netlib writes to the fd as for plain TCP
 * (send/sendmsg, io_uring batches) and no longer calls writev; for kTLS once the handshake
 * installed the keys. Ignored for a transport without writev (always direct). Thread: owner. */
void nl_conn_transport_set_fd_writes(nl_conn_t *c, bool on);

/* The transport has bytes of its own to write (a pong, a close frame, the rest of a frame):
 * the iteration's flush calls writev(c, state, NULL, 0) when nothing else is queued, and
 * again on writability while it returns -EAGAIN or a short count. Only for connections whose
 * writes go through writev. Thread: owner. */
void nl_conn_transport_want_write(nl_conn_t *c);

/* Input can be read without the fd becoming readable (the transport buffered it, or a read
 * that had to wait for a write may go on): netlib reads c in this or the next iteration, even
 * with nothing new on the socket. Thread: owner. */
void nl_conn_transport_want_read(nl_conn_t *c);

#endif

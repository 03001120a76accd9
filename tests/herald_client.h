/*
 * herald_client: a small herald protocol client for tests and benchmarks, built on the proto
 * codec (proto_frame_append to encode, proto_frame_decode to read frames back).
 *
 * Two shapes:
 *   - test_client_t: one connection with blocking calls, each bounded by a deadline (poll on
 *     the socket; nothing sleeps). Request helpers (connect, subscribe, publish, ping) send a
 *     frame with a fresh id and wait for the frame answering it; Push frames and other id-0
 *     frames that arrive meanwhile are kept, in order, and handed out first by
 *     test_client_recv and the expect_* helpers. A helper that gets something else returns
 *     -EPROTO and describes what came in test_client_what(), for the failure message.
 *   - test_fleet_t: many connections multiplexed on one epoll set, for thousands of
 *     subscribers in one thread. Frames are handed to a callback per connection as they are
 *     decoded; sends are buffered and flushed as the sockets accept them.
 *
 * Server-to-client frames are decoded with a large limit (TEST_CLIENT_MAX_FRAME) since the
 * test is not what is being bounded.
 *
 * Thread: a client or fleet belongs to one thread. Ownership: frames returned to the caller
 * are the caller's (proto_frame_free); frames given to callbacks are freed when the callback
 * returns; frames given to send functions are only read.
 */
#ifndef HERALD_TESTS_HERALD_CLIENT_H
#define HERALD_TESTS_HERALD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herald.pb-c.h"
#include "netlib/nl_buf.h"

/* Largest frame the test client accepts from the server. */
#define TEST_CLIENT_MAX_FRAME (16u * 1024 * 1024)
/* Default deadline for one request/answer round trip. */
#define TEST_CLIENT_WAIT_MS 10000

typedef struct test_client_s {
    int fd;
    nl_buf_t in;
    nl_buf_t out;
    uint64_t next_id;
    bool is_eof;          /* the server closed (EOF or reset) */
    int last_err_code;    /* code of the last Error answering a helper's request, else -1 */
    int last_reconnect;   /* the reconnect flag of the Disconnect expect_close saw, else -1 */
    Herald__Frame **kept; /* frames received while waiting for an answer, oldest first */
    size_t n_kept;
    size_t cap_kept;
    /* From ConnectOk. */
    char user_id[160];
    char client_id[96];
    uint32_t ping_interval_ms;
    uint32_t idle_timeout_ms;
    uint32_t max_frame_bytes;
    char what[512]; /* what went wrong in the last failing call */
} test_client_t;

/* Connects to 127.0.0.1:port within timeout_ms. c is initialised whatever the result.
 * Returns: 0; -ETIMEDOUT; -ECONNREFUSED and other negative errno. Thread: c's. */
int test_client_open(test_client_t *c, uint16_t port, int timeout_ms);

/* Closes the socket (if open) and frees everything c holds. Safe twice. Thread: c's. */
void test_client_close(test_client_t *c);

/* Sets SO_RCVBUF (before traffic: a small value makes a reader that stops reading back up
 * onto the server quickly). Returns: 0 or negative errno. Thread: c's. */
int test_client_set_rcvbuf(test_client_t *c, int bytes);

/* Writes raw bytes (all of them, or fails by the deadline).
 * Returns: 0; -ETIMEDOUT; -EPIPE/-ECONNRESET when the server closed. Thread: c's. */
int test_client_send_raw(test_client_t *c, const void *data, size_t len, int timeout_ms);

/* Encodes f (delimited) and writes it. Returns: as test_client_send_raw. Thread: c's. */
int test_client_send(test_client_t *c, const Herald__Frame *f, int timeout_ms);

/* The next frame: a kept one first, else one read from the socket.
 * Returns: 1 with *out (the caller frees it with proto_frame_free); 0 on EOF or reset (no
 * more frames will come); -ETIMEDOUT; a PROTO_ERR_* when the server's bytes do not decode.
 * Thread: c's. */
int test_client_recv(test_client_t *c, Herald__Frame **out, int timeout_ms);

/* Gives f (which must carry a zero id) the next request id, sends it and waits for the frame
 * answering it (same id), keeping id-0 frames other than Error and Disconnect that arrive
 * first. An Error or Disconnect with id 0 is returned as the answer too (the session broke).
 * Returns: 1 with *reply (the caller frees it); 0 on EOF before any answer; -ETIMEDOUT;
 * negative errno from the send. Thread: c's. */
int test_client_request(test_client_t *c, Herald__Frame *f, Herald__Frame **reply, int timeout_ms);

/* Sends Connect{token} and waits for ConnectOk, recording its fields in c.
 * Returns: 0; -EPROTO when another frame answered (c->last_err_code holds an Error's code,
 * test_client_what() describes it); 0-frame EOF gives -ECONNRESET; -ETIMEDOUT.
 * Thread: c's. */
int test_client_hello(test_client_t *c, const char *token, int timeout_ms);

/* test_client_open, then test_client_hello. Returns: either's error. Thread: c's. */
int test_client_auth(test_client_t *c, uint16_t port, const char *token, int timeout_ms);

/* Subscribes to channel and waits for SubscribeOk. *offset (may be NULL) gets the channel's
 * latest offset at subscription time, so the next Push carries *offset + 1.
 * Returns: 0; -EPROTO (c->last_err_code set when an Error answered); -ETIMEDOUT; ...
 * Thread: c's. */
int test_client_subscribe(test_client_t *c, const char *channel, uint64_t *offset, int timeout_ms);

/* What a SubscribeOk said. */
typedef struct test_sub_ok_s {
    uint64_t offset;
    char epoch[17];
    bool is_recovered;
    bool is_recoverable;
} test_sub_ok_t;

/* Subscribes to channel and waits for SubscribeOk, whose fields go to *ok (may be NULL). With
 * epoch (not NULL) the Subscribe asks to recover what came after offset in epoch.
 * Returns: as test_client_subscribe. Thread: c's. */
int test_client_subscribe_from(test_client_t *c, const char *channel, const char *epoch,
                               uint64_t offset, test_sub_ok_t *ok, int timeout_ms);

/* Unsubscribes and waits for UnsubscribeOk. Returns: as test_client_subscribe. */
int test_client_unsubscribe(test_client_t *c, const char *channel, int timeout_ms);

/* Publishes payload[0..len) to channel and waits for PublishOk; *offset (may be NULL) gets
 * the assigned offset. Returns: as test_client_subscribe. Thread: c's. */
int test_client_publish(test_client_t *c, const char *channel, const void *payload, size_t len,
                        uint64_t *offset, int timeout_ms);

/* As test_client_publish; epoch (17 bytes, may be NULL) also gets PublishOk's epoch. */
int test_client_publish_ex(test_client_t *c, const char *channel, const void *payload, size_t len,
                           uint64_t *offset, char epoch[17], int timeout_ms);

/* Sends Ping and waits for the Pong answering it. Pushes received first are kept.
 * Returns: 0; -EPROTO; -ETIMEDOUT; -ECONNRESET (closed). Thread: c's. */
int test_client_ping(test_client_t *c, int timeout_ms);

/* Takes the next frame and checks that it is Push{channel, offset}. *payload_out (may be
 * NULL) receives the frame for further checks (the caller frees it); otherwise it is freed.
 * Returns: 0; -EPROTO (described); -ETIMEDOUT; -ECONNRESET. Thread: c's. */
int test_client_expect_push(test_client_t *c, const char *channel, uint64_t offset,
                            Herald__Frame **frame_out, int timeout_ms);

/* Takes the next frame and checks that it is an Error with code (any id).
 * Returns: 0; -EPROTO; -ETIMEDOUT; -ECONNRESET. Thread: c's. */
int test_client_expect_error(test_client_t *c, Herald__Error__Code code, int timeout_ms);

/* Reads until the server closes. Every frame on the way must be an Error or a Disconnect
 * (Pushes are skipped when skip_pushes). *disconnect_code gets the Disconnect's code, or -1
 * when none came; *error_code likewise for the last Error (either pointer may be NULL).
 * Returns: 0 once closed; -ETIMEDOUT; -EPROTO (another frame came). Thread: c's. */
int test_client_expect_close(test_client_t *c, bool skip_pushes, int *disconnect_code,
                             int *error_code, int timeout_ms);

/* Tells whether the server has closed, waiting up to timeout_ms for the EOF, without
 * consuming frames other than those read on the way (kept). Thread: c's. */
bool test_client_is_closed(test_client_t *c, int timeout_ms);

/* The description of the last failure ("" when none). Thread: c's. */
const char *test_client_what(const test_client_t *c);

/* Describes f in one line ("error id=3 code=FORBIDDEN text=..."), for messages.
 * Returns buf. Thread: any. */
const char *test_frame_str(const Herald__Frame *f, char *buf, size_t cap);

/* Frame builders: fill the caller's frame and body (both stack values) so the result can be
 * passed to send functions. Thread: any. Ownership: strings are borrowed, not copied. */
void test_frame_connect(Herald__Frame *f, Herald__Connect *body, const char *token);
void test_frame_subscribe(Herald__Frame *f, Herald__Subscribe *body, const char *channel);
void test_frame_unsubscribe(Herald__Frame *f, Herald__Unsubscribe *body, const char *channel);
void test_frame_publish(Herald__Frame *f, Herald__Publish *body, const char *channel,
                        const void *payload, size_t len);
void test_frame_ping(Herald__Frame *f, Herald__Ping *body);

/* --- fleet: many connections on one epoll set --------------------------------------------- */

typedef struct test_fleet_s test_fleet_t;

/* A frame decoded on connection i (f is freed after the call), or f == NULL when i closed
 * (EOF, reset or undecodable input; test_fleet_close_reason tells which). */
typedef void (*test_fleet_frame_cb)(test_fleet_t *fl, size_t i, const Herald__Frame *f, void *arg);

/* Creates a fleet of n unconnected slots.
 * Returns: 0; -ENOMEM; -errno from epoll_create1. Thread: the caller's, which then owns it.
 * Ownership: free with test_fleet_free. */
int test_fleet_new(test_fleet_t **out, size_t n);

/* Closes every connection and frees the fleet. NULL is fine. */
void test_fleet_free(test_fleet_t *fl);

/* Sets SO_RCVBUF on sockets opened from now on (0: the kernel default). */
void test_fleet_set_rcvbuf(test_fleet_t *fl, int bytes);

/* Binds sockets opened from now on to source address ip (IPv4, e.g. "127.0.0.2": loopback
 * answers all of 127/8), so that a server sees them come from there; NULL: the kernel picks.
 * Returns: 0; -EINVAL. */
int test_fleet_set_source(test_fleet_t *fl, const char *ip);

/* Asks for kernel receive timestamps (SO_TIMESTAMPNS) on sockets opened from now on. In raw
 * mode test_fleet_rx_time_ns then gives, inside the callback, when the bytes just read
 * arrived at the socket (CLOCK_REALTIME ns; 0 when the kernel gave none): delivery time
 * without the fleet's own delay in getting round to the socket. */
void test_fleet_set_rx_timestamps(test_fleet_t *fl, bool on);
uint64_t test_fleet_rx_time_ns(const test_fleet_t *fl);

/* Connects every slot to 127.0.0.1:port, at most in_flight (0: 256) connects outstanding.
 * Returns: 0; -ETIMEDOUT; the first connect error. Thread: the fleet's. */
int test_fleet_open(test_fleet_t *fl, uint16_t port, size_t in_flight, int timeout_ms);

/* As test_fleet_open, slot i connecting to 127.0.0.1:ports[i % n_ports] (n_ports >= 1): a
 * fleet spread over several herald nodes. */
int test_fleet_open_ports(test_fleet_t *fl, const uint16_t *ports, size_t n_ports, size_t in_flight,
                          int timeout_ms);

/* Starts a non-blocking connect of slot i (never opened, or closed) to 127.0.0.1:port, while
 * the other slots keep running: for reconnects, one at a time. Frames and bytes may be queued
 * on the slot at once (test_fleet_send, test_fleet_send_raw); they leave when a later poll
 * sees the connect complete. A connect that fails there closes the slot, and the poll's
 * callback gets the close (NULL frame or data); test_fleet_close_reason tells why.
 * Returns: 0; -EISCONN (the slot is open or connecting); negative errno from socket/connect
 * (the slot is then closed). Thread: the fleet's. */
int test_fleet_connect(test_fleet_t *fl, size_t i, uint16_t port);

/* Number of slots. */
size_t test_fleet_size(const test_fleet_t *fl);

/* Queues f (delimited) on connection i; it leaves as the socket accepts it (test_fleet_poll
 * flushes), or once the connect completes for a slot still connecting.
 * Returns: 0; -ENOTCONN (i closed); -ENOMEM. Thread: the fleet's. */
int test_fleet_send(test_fleet_t *fl, size_t i, const Herald__Frame *f);

/* Waits up to timeout_ms for socket events once, reads and flushes what is ready, and
 * calls cb for every frame decoded and every connection closed.
 * Returns: the number of connections serviced (0 on timeout); negative errno.
 * Thread: the fleet's. */
int test_fleet_poll(test_fleet_t *fl, int timeout_ms, test_fleet_frame_cb cb, void *arg);

/* Raw mode, for benchmarks that parse the bytes themselves (no protobuf-c decode per frame):
 * data[0..len) is what connection i has buffered; return how many bytes were used (the rest
 * stays for the next call). data == NULL when i closed. */
typedef size_t (*test_fleet_raw_cb)(test_fleet_t *fl, size_t i, const char *data, size_t len,
                                    void *arg);

/* As test_fleet_poll, handing buffered bytes to cb instead of decoded frames.
 * Thread: the fleet's. */
int test_fleet_poll_raw(test_fleet_t *fl, int timeout_ms, test_fleet_raw_cb cb, void *arg);

/* Queues raw bytes on connection i (for non-herald peers, such as a Redis subscriber).
 * Returns: 0; -ENOTCONN; -ENOBUFS. Thread: the fleet's. */
int test_fleet_send_raw(test_fleet_t *fl, size_t i, const void *data, size_t len);

/* Sends Connect{token_of(i)} on every connection (token_of NULL: token used for all) and
 * waits until each is answered. Frames other than the answers go to cb (may be NULL).
 * Returns: 0 when every answer is ConnectOk; -EPROTO (the first other answer is described
 * by test_fleet_what); -ETIMEDOUT. Thread: the fleet's. */
int test_fleet_hello_all(test_fleet_t *fl, const char *token,
                         const char *(*token_of)(size_t i, void *arg), void *arg, int timeout_ms);

/* test_fleet_open_ports and test_fleet_hello_all in one pass, as real clients connect: each
 * connection sends its Connect as soon as it is connected, and at most in_flight (0: 256) are
 * between connect() and their answer at a time. (Opening thousands first and greeting them
 * after holds thousands of connections unauthenticated, which herald caps: [limits]
 * max_unauthenticated, max_unauthenticated_per_address.)
 * Returns: as test_fleet_hello_all; negative errno from a connect. Thread: the fleet's. */
int test_fleet_open_hello(test_fleet_t *fl, const uint16_t *ports, size_t n_ports, size_t in_flight,
                          const char *token, const char *(*token_of)(size_t i, void *arg),
                          void *arg, int timeout_ms);

/* Subscribes every connection to channel and waits for every SubscribeOk; offsets (may be
 * NULL, else n entries) receives each one's SubscribeOk offset. Other frames go to cb.
 * Returns: as test_fleet_hello_all. Thread: the fleet's. */
int test_fleet_subscribe_all(test_fleet_t *fl, const char *channel, uint64_t *offsets,
                             test_fleet_frame_cb cb, void *arg, int timeout_ms);

/* Subscribes connection i to channel_of(i, arg) and waits for every SubscribeOk.
 * Returns: as test_fleet_hello_all. Thread: the fleet's. */
int test_fleet_subscribe_each(test_fleet_t *fl, const char *(*channel_of)(size_t i, void *arg),
                              void *arg, int timeout_ms);

/* Sends Ping on every connection and waits until each got its Pong. A frame that arrives
 * before the Pong goes to cb, so this proves nothing else was queued before it.
 * Returns: as test_fleet_hello_all. Thread: the fleet's. */
int test_fleet_ping_all(test_fleet_t *fl, test_fleet_frame_cb cb, void *arg, int timeout_ms);

/* Open connections (not closed by the server or by errors). */
size_t test_fleet_open_count(const test_fleet_t *fl);

/* Whether connection i is connected (its connect completed and it has not closed). */
bool test_fleet_is_open(const test_fleet_t *fl, size_t i);

/* Why connection i closed: 0 still open, 1 EOF, negative errno, or a PROTO_ERR_*. */
int test_fleet_close_reason(const test_fleet_t *fl, size_t i);

/* Closes connection i from the client side. */
void test_fleet_close(test_fleet_t *fl, size_t i);

/* The description of the last failure. */
const char *test_fleet_what(const test_fleet_t *fl);

#endif

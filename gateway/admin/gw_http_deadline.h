/*
 * gw_http_deadline: the admin HTTP server's request deadline. A connection must deliver each
 * request whole (headers and body) within timeout_ms of being accepted or of its previous
 * answer; one that does not is cut off. libmicrohttpd's own timeout is for inactivity only, so
 * a client that trickles a byte now and then held a connection for as long as it liked, and 64
 * of them (libmicrohttpd's connection limit) took the admin API and the probes down.
 *
 * The clock runs while libmicrohttpd reads a request and stops once the request is complete and
 * with its handler (gw_http_deadline_stop): a request waiting for herald's IO loops is the
 * server's time, not the client's. It runs again after the answer (gw_http_deadline_restart),
 * for the next request on a kept-alive connection.
 *
 * A thread of its own checks the deadlines (a few times a second; 64 connections at most) and
 * cuts an expired connection off with shutdown(2), which libmicrohttpd then sees as the peer's
 * close. A new connection that had not sent a whole request header first gets "408 Request
 * Timeout" (nothing else can be on its way to the client then); a kept-alive one is just
 * closed, as an idle one would be (a 408 there could cross the client's next request).
 *
 * Thread: gw_http_deadline_new/free on the owner; the notify callback and the request hooks on
 * libmicrohttpd's thread. State is guarded by one mutex; a descriptor is only touched under it
 * and only between the connection's STARTED and CLOSED notifications, which libmicrohttpd sends
 * before it closes the socket, so the number is never one reused by another socket.
 * Ownership: the owner frees the tracker after libmicrohttpd has stopped (every connection
 * closed).
 */
#ifndef HERALD_GATEWAY_GW_HTTP_DEADLINE_H
#define HERALD_GATEWAY_GW_HTTP_DEADLINE_H

#include <stdint.h>

#include <microhttpd.h>

typedef struct gw_http_deadline_s gw_http_deadline_t;

/* Creates a tracker and starts its thread. timeout_ms 0 means 10 s.
 * Returns: 0; -ENOMEM; -errno from pthread_create. Thread: owner.
 * Ownership: *out is the caller's; gw_http_deadline_free. */
int gw_http_deadline_new(gw_http_deadline_t **out, uint64_t timeout_ms);

/* Stops the thread and frees d. NULL is fine. Call after MHD_stop_daemon, once nothing reads
 * gw_http_deadline_timed_out any more. Thread: owner. */
void gw_http_deadline_free(gw_http_deadline_t *d);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback; cls is the tracker. Thread: MHD's. */
void gw_http_deadline_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                    enum MHD_ConnectionNotificationCode toe);

/* The current request's headers arrived (no 408 for it from now on; the clock runs on for the
 * body). Thread: MHD's. */
void gw_http_deadline_headers(gw_http_deadline_t *d, struct MHD_Connection *conn);

/* The current request is complete and with its handler: the clock stops. Thread: MHD's. */
void gw_http_deadline_stop(gw_http_deadline_t *d, struct MHD_Connection *conn);

/* The request was answered: the clock restarts for the next one. Thread: MHD's. */
void gw_http_deadline_restart(gw_http_deadline_t *d, struct MHD_Connection *conn);

/* Changes the timeout for clocks that (re)start from now on; those running keep theirs. The
 * checking tick follows it. timeout_ms 0 means 10 s. Thread: any. */
void gw_http_deadline_set_timeout(gw_http_deadline_t *d, uint64_t timeout_ms);

/* Connections cut off so far. Thread: any. */
uint64_t gw_http_deadline_timed_out(const gw_http_deadline_t *d);

#endif

/*
 * lg_http: --publish-via http. Each worker keeps a few keep-alive HTTP/1.1 connections to
 * herald's admin port and publishes with
 *
 *     POST /api/publish?channel=C HTTP/1.1     X-Api-Key: K     body: the raw payload
 *
 * one request in flight per connection (herald's HTTP server answers in order; no
 * pipelining is assumed). A 200 counts as a PublishOk and owes the channel's subscribers
 * their deliveries, exactly like a Publish frame; any other status, or a connection that
 * closes with a request in flight, counts as a publish error by reason ("http_503", ...).
 * The active clients still choose the channels and receive: only the path of the publish
 * changes, so the figures compare the two paths directly.
 *
 * Thread: the worker's loop thread, for every function. Ownership: the worker owns the
 * connection array (w->http); netlib owns the nl_client and nl_conn of each.
 * Usage: on_start lg_http_start(w); per due publish lg_http_publish(w, client);
 *        on_stop lg_http_stop(w); after the loop is gone lg_http_free(w).
 */
#ifndef HERALD_LOADGEN_LG_HTTP_H
#define HERALD_LOADGEN_LG_HTTP_H

#include "lg_client.h"

/* Opens cfg->http_conns connections to cfg->host:cfg->admin_port (reconnecting on close).
 * Returns: 0; -ENOMEM; -EINVAL from nl_client_new. Thread: worker. */
int lg_http_start(lg_worker_t *w);

/* Publishes one message to client c's next target with the current time in the payload, on
 * a free connection. Returns: 0 (sent); -EBUSY when every connection is busy or still
 * connecting (nothing sent: the caller keeps it in its backlog); -ENOBUFS/-ENOMEM.
 * Thread: worker. */
int lg_http_publish(lg_worker_t *w, lg_client_t *c);

/* Closes every connection for good. Idempotent. Thread: worker. */
void lg_http_stop(lg_worker_t *w);

/* Frees the array once the worker's loop has finished (after nl_loop_thread_stop). */
void lg_http_free(lg_worker_t *w);

#endif

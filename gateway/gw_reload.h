/*
 * gw_reload: SIGHUP. The node's config is loaded again from the sources it started with (the
 * file named by --config or HERALD_CONFIG, read anew; the HERALD_* environment and the
 * command-line flags, which a running process cannot change, so they still win over the
 * file), compared with the running one setting by setting, and what may change at runtime is
 * put in place without touching a connection.
 *
 * Log lines, in order:
 *   ev=reload_begin config=PATH
 *   ev=reload_warning msg=...          each warning the load printed
 *   ev=reload_error msg=...            each error: the reload is refused, nothing changes,
 *   ev=reload_failed errors=N          and the node runs on with its config
 *   ev=config_changed key=SECTION.KEY old=... new=...   each setting applied (a secret says
 *                                      only value=changed, set or cleared)
 *   ev=reload_restart_needed key=SECTION.KEY running=... wanted=...   each setting that
 *                                      cannot change at runtime: the running value stays
 *   ev=reload_done generation=N changed=K restart_needed=M   once the new config is in force
 *                                      on every IO loop (logged by the last one to apply it)
 *
 * What applies when (settings marked "reloads on SIGHUP" in --help):
 *   - at once, for every session: max_subscriptions, max_channel_bytes, publish_rate and
 *     publish_burst (at the next request), output_high_water as the slow-consumer threshold,
 *     slow_consumer and slow_consumer_linger, idle_timeout (from each session's next frame),
 *     max_connections (new connections; none is closed for being over it), the token secret
 *     and previous_secrets (Connects verified from now on; sessions already authenticated
 *     stay), drain (the next SIGTERM), log level, admin max_body and request_timeout;
 *   - for connections accepted from now on: connect_timeout, ping_interval and max_frame
 *     (both announced in ConnectOk), output_high_water as the cap on a connection's queued
 *     answers (twice the mark);
 *   - with a floor: the decoder keeps accepting frames up to the largest max_frame announced
 *     since the start, and a new idle_timeout must exceed the longest ping_interval announced
 *     since the start (else the reload is refused), since connected clients keep what their
 *     ConnectOk said (gw_config_snap.h).
 * Everything else (addresses, ports, threads, io_uring batching, the engine, the node id, the
 * admin key and switch, insecure mode) needs a restart.
 *
 * Thread: main (the accept loop): gw_config_load uses getopt's globals.
 */
#ifndef HERALD_GATEWAY_GW_RELOAD_H
#define HERALD_GATEWAY_GW_RELOAD_H

typedef struct gw_node_s gw_node_t;

/* Reloads node's config (see above).
 * Returns: 0 when the loaded config is in place (or nothing changed); -EINVAL when it was
 * refused; -ENOTSUP when the node has no sources to read (gw_node_new without them); -ENOMEM.
 * Thread: main. */
int gw_reload_run(gw_node_t *node);

#endif

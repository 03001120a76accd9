/*
 * gw_config_reload: SIGHUP's first half. The node's config is loaded again from the sources it started with (the
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
 * The second half is the node's (gw_node_reload): it puts the new snapshot in place on the
 * main thread and on every IO loop, and logs reload_done once the last loop has it.
 *
 * Thread: main (the accept loop): gw_config_load uses getopt's globals.
 */
#ifndef HERALD_GATEWAY_GW_CONFIG_RELOAD_H
#define HERALD_GATEWAY_GW_CONFIG_RELOAD_H

#include "gw_config.h"
#include "gw_config_snap.h"

/* What a reload found: the config to put in place and the counts ev=reload_done reports. */
typedef struct gw_config_reload_s {
    gw_config_snap_t *snap; /* a new reference, or NULL: nothing to change */
    uint64_t generation;    /* the snapshot's (the running one's when nothing changed) */
    int changed;
    int restart_needed;
} gw_config_reload_t;

/* Loads the config again from src and compares it with running (logging reload_begin, each
 * warning and error, each change), then builds the snapshot to apply. With nothing to change
 * it logs reload_done itself and out->snap is NULL.
 * Returns: 0; -ENOTSUP (no sources: logged as reload_unavailable); -EINVAL (refused, logged as
 * reload_failed: nothing changes); -ENOMEM. Thread: main. Ownership: out->snap is the caller's
 * reference. */
int gw_config_reload(const gw_config_snap_t *running, const gw_config_source_t *src,
                     gw_config_reload_t *out);

/* Logs ev=reload_done for r: once the new config is in force everywhere. Thread: any. */
void gw_config_reload_log_done(const gw_config_reload_t *r);

#endif

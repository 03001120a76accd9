/*
 * gw_config_snap: the running node's configuration as an immutable, reference-counted
 * snapshot, so that a reload (SIGHUP) can put a new one in place while IO loops, workers and
 * the admin thread go on reading the one they hold, without a lock on any of their paths.
 *
 * A snapshot is filled once, by gw_config_snap_new on the main thread, and never written
 * again. Each holder owns one reference: the node (its current config, gw_node_t.snap), each
 * IO loop (gw_loop_t.snap, swapped on the loop's own thread by a posted closure), each token
 * verification on its way through the worker pool, each admin request that reads it. The
 * last gw_config_snap_unref frees it, on whichever thread that is; the acquire-release
 * decrement orders every holder's reads before the free.
 *
 * Besides the settings it carries what is worked out once per config rather than per use: the
 * token keys (the current secret, then the previous ones) and two limits that must also cover
 * every client connected since the node started. A client is told max_frame_bytes and
 * ping_interval_ms in its ConnectOk and keeps them for the whole session, and a session keeps
 * no copy of them (every byte of a session counts at a million connections), so:
 *   - frame_limit_bytes, the largest max_frame_bytes announced so far, is what the decoder
 *     accepts: a client told 64 KiB before a reload to 16 KiB may still send 64 KiB frames;
 *   - ping_interval_max_ms, the longest ping_interval_ms announced so far, is what a reload's
 *     idle_timeout must exceed, or clients pinging on time by what they were told would be
 *     closed as idle.
 * Both only grow while the node runs; a restart starts them afresh.
 *
 * Thread: gw_config_snap_new on the main thread; ref and unref from any thread.
 * Ownership: gw_config_snap_new returns one reference, the caller's. Pointers into a snapshot
 * (cfg strings, keys) live as long as a reference does.
 */
#ifndef HERALD_GATEWAY_GW_CONFIG_SNAP_H
#define HERALD_GATEWAY_GW_CONFIG_SNAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_config.h"
#include "gw_token.h"

typedef struct gw_config_snap_s {
    gw_config_t cfg;
    uint64_t generation;           /* 1 at start, one more per reload applied */
    uint64_t frame_limit_bytes;    /* see above: >= cfg.max_frame_bytes */
    uint64_t ping_interval_max_ms; /* see above: >= cfg.ping_interval_ms */
    size_t n_keys;                 /* 0 without a token secret: every token is refused */
    gw_token_key_t keys[1 + GW_CONFIG_PREVIOUS_SECRETS_MAX]; /* keys[0]: token_secret */
    _Atomic uint32_t refs;
} gw_config_snap_t;

/* Makes a snapshot of cfg (copied). prev is the snapshot it replaces (NULL at startup): the
 * generation and the two "announced so far" limits carry on from it. cfg must have passed
 * gw_config_validate (the previous secrets are split as it checked them).
 * Returns: 0 with *out holding one reference; -ENOMEM; -EINVAL (previous_secrets does not
 * split). Thread: main. Ownership: the caller's reference; drop it with gw_config_snap_unref. */
int gw_config_snap_new(gw_config_snap_t **out, const gw_config_t *cfg,
                       const gw_config_snap_t *prev);

/* Takes one more reference and returns snap. Thread: any, by a holder of a reference. */
gw_config_snap_t *gw_config_snap_ref(gw_config_snap_t *snap);

/* Drops one reference; the last frees the snapshot. NULL is fine. Thread: any. */
void gw_config_snap_unref(gw_config_snap_t *snap);

#endif

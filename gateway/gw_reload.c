/*
 * gw_reload: SIGHUP on the main loop. See gw_reload.h for what changes when.
 *
 * The load prints its problems to a FILE (the same text --check-config shows); here that FILE
 * is a memory stream, and each of its lines becomes a log line. The reload is all or nothing:
 * the loaded config is first reconciled on a copy (non-reloadable settings back to their
 * running values) and checked as a whole, because a setting that changes may be valid alone
 * and not beside a running value that stays (idle_timeout against a ping interval that
 * connected clients were told). Only then are the changes logged and applied.
 */
#include "gw_reload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_config.h"
#include "gw_config_snap.h"
#include "gw_node.h"
#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

/* What the change callback saw, and what ev=reload_done reports. */
typedef struct reload_count_s {
    uint64_t generation;
    int changed;
    int restart_needed;
} reload_count_t;

static void reload_log_done(const reload_count_t *count)
{
    NL_LOG(NL_INFO, "reload_done", "generation=%" PRIu64 " changed=%d restart_needed=%d",
           count->generation, count->changed, count->restart_needed);
}

/* gw_node_config_replace's report: the new config is in force on every IO loop, so whoever
 * reads ev=reload_done may rely on it. Runs on the loop that applied it last. */
static void reload_on_applied(void *arg)
{
    reload_count_t *count = arg;
    reload_log_done(count);
    free(count);
}

/* Logs each line of text (what the load printed); returns how many were errors, not
 * warnings. */
static int reload_log_lines(const char *text)
{
    int errors = 0;
    for (const char *line = text; line && *line;) {
        size_t len = strcspn(line, "\n");
        char q[NL_LOG_QUOTE_MAX];
        nl_log_quote(q, sizeof(q), line, len);
        /* gw_config's warnings say "warning:"; everything else it prints is an error. */
        bool is_warning = memmem(line, len, "warning:", 8) != NULL;
        if (is_warning) {
            NL_LOG(NL_WARN, "reload_warning", "msg=%s", q);
        } else {
            errors++;
            NL_LOG(NL_ERROR, "reload_error", "msg=%s", q);
        }
        line += len + (line[len] == '\n');
    }
    return errors;
}

static void reload_log_change(const gw_config_change_t *ch, void *arg)
{
    reload_count_t *count = arg;
    char key[96];
    snprintf(key, sizeof(key), "%s.%s", ch->section, ch->key);
    const char *ev = ch->is_reloadable ? "config_changed" : "reload_restart_needed";
    if (ch->is_reloadable)
        count->changed++;
    else
        count->restart_needed++;
    if (ch->is_secret) {
        /* Whether one is set, never the secret. */
        const char *what = !ch->new_value[0] ? "cleared" : !ch->old_value[0] ? "set" : "changed";
        NL_LOG(ch->is_reloadable ? NL_INFO : NL_WARN, ev, "key=%s value=%s", key, what);
        return;
    }
    char old_q[NL_LOG_QUOTE_MAX];
    char new_q[NL_LOG_QUOTE_MAX];
    nl_log_quote(old_q, sizeof(old_q), ch->old_value, strlen(ch->old_value));
    nl_log_quote(new_q, sizeof(new_q), ch->new_value, strlen(ch->new_value));
    if (ch->is_reloadable)
        NL_LOG(NL_INFO, ev, "key=%s old=%s new=%s", key, old_q, new_q);
    else
        NL_LOG(NL_WARN, ev, "key=%s running=%s wanted=%s", key, old_q, new_q);
}

/* Loads the config as at startup into *loaded and reconciles it with the running one (on a
 * copy: nothing is logged yet). Every problem is printed to err. Returns the number of
 * errors (0: loaded holds the config to apply, minus the restart-only changes). */
static int reload_load(const gw_node_t *node, gw_config_t *loaded, FILE *err)
{
    const gw_config_snap_t *running = node->snap;
    gw_config_action_t action = GW_CONFIG_RUN;
    int rc = gw_config_load(loaded, node->src.argc, node->src.argv, node->src.envp, err, &action);
    if (rc < 0 || action != GW_CONFIG_RUN)
        return 1;
    gw_config_t *merged = malloc(sizeof(*merged));
    if (!merged)
        return 1;
    *merged = *loaded;
    (void)gw_config_reconcile(&running->cfg, merged, NULL, NULL);
    int errors = gw_config_validate(merged, err);
    if (merged->idle_timeout_ms <= running->ping_interval_max_ms) {
        fprintf(err,
                "config: idle_timeout (%" PRIu64 " ms) must exceed %" PRIu64
                " ms, the longest ping_interval announced to clients since the start\n",
                merged->idle_timeout_ms, running->ping_interval_max_ms);
        errors++;
    }
    free(merged);
    return errors;
}

/* The node-wide settings that live outside the IO loops: cfg's values where they differ
 * from old's. */
static void reload_apply_node(gw_node_t *node, const gw_config_t *old, const gw_config_t *cfg)
{
    if (cfg->log_level != old->log_level)
        nl_log_set_level((nl_log_level_t)cfg->log_level);
    if (node->http && (cfg->admin_max_body_bytes != old->admin_max_body_bytes ||
                       cfg->admin_request_timeout_ms != old->admin_request_timeout_ms))
        gw_http_set_limits(node->http, cfg->admin_max_body_bytes, cfg->admin_request_timeout_ms);
}

int gw_reload_run(gw_node_t *node)
{
    if (node->src.argc == 0) {
        NL_LOG(NL_WARN, "reload_unavailable", "reason=\"no config sources\"");
        return -ENOTSUP;
    }
    NL_LOG(NL_INFO, "reload_begin", "config=%s",
           node->snap->cfg.config_path[0] ? node->snap->cfg.config_path : "(none)");
    gw_config_t *loaded = malloc(sizeof(*loaded));
    char *text = NULL;
    size_t text_len = 0;
    FILE *err = loaded ? open_memstream(&text, &text_len) : NULL;
    if (!err) {
        free(loaded);
        NL_LOG(NL_ERROR, "reload_failed", "err=%s", nl_strerror(-ENOMEM));
        return -ENOMEM;
    }
    int errors = reload_load(node, loaded, err);
    fclose(err);
    int logged = reload_log_lines(text);
    free(text);
    if (errors > 0) {
        NL_LOG(NL_ERROR, "reload_failed", "errors=%d", logged > errors ? logged : errors);
        free(loaded);
        return -EINVAL;
    }
    reload_count_t count = {.generation = node->snap->generation};
    (void)gw_config_reconcile(&node->snap->cfg, loaded, reload_log_change, &count);
    if (count.changed == 0) {
        free(loaded);
        reload_log_done(&count);
        return 0;
    }
    gw_config_snap_t *snap = NULL;
    reload_count_t *report = malloc(sizeof(*report));
    int rc = report ? gw_config_snap_new(&snap, loaded, node->snap) : -ENOMEM;
    if (rc == 0) {
        *report = count;
        report->generation = snap->generation;
        /* Before the IO loops get theirs, so that ev=reload_done (logged by the last loop to
         * apply it) finds everything in place. */
        reload_apply_node(node, &node->snap->cfg, loaded);
        rc = gw_node_config_replace(node, snap, reload_on_applied, report);
        if (rc < 0)
            reload_apply_node(node, loaded, &node->snap->cfg);
    }
    free(loaded);
    if (rc < 0) {
        free(report);
        NL_LOG(NL_ERROR, "reload_failed", "err=%s", nl_strerror(rc));
        return rc;
    }
    return 0;
}

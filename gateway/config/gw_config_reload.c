/*
 * gw_config_reload: SIGHUP on the main loop, up to the snapshot to apply. See
 * gw_config.h for what changes when.
 *
 * The load prints its problems to a FILE (the same text --check-config shows); here that FILE
 * is a memory stream, and each of its lines becomes a log line. The reload is all or nothing:
 * the loaded config is first reconciled on a copy (non-reloadable settings back to their
 * running values) and checked as a whole, because a setting that changes may be valid alone
 * and not beside a running value that stays (idle_timeout against a ping interval that
 * connected clients were told). Only then are the changes logged and applied.
 */
#include "gw_config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/nl_common.h"
#include "netlib/nl_log.h"

void gw_config_reload_log_done(const gw_config_reload_t *r)
{
    NL_LOG(NL_INFO, "reload_done", "generation=%" PRIu64 " changed=%d restart_needed=%d",
           r->generation, r->changed, r->restart_needed);
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
    gw_config_reload_t *count = arg;
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
static int reload_load(const gw_config_snap_t *running, const gw_config_source_t *src,
                       gw_config_t *loaded, FILE *err)
{
    gw_config_action_t action = GW_CONFIG_RUN;
    int rc = gw_config_load(loaded, src->argc, src->argv, src->envp, err, &action);
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
    /* A node that verified tokens must not be left verifying none: every Connect would be
     * refused while it looked healthy. (Clearing the secret on purpose is a restart.) */
    if (running->cfg.token_secret[0] && !merged->token_secret[0] && !merged->is_insecure) {
        fprintf(err, "config: the reload would leave no token secret, so every Connect would be "
                     "refused: refused\n");
        errors++;
    }
    free(merged);
    return errors;
}

int gw_config_reload(const gw_config_snap_t *running, const gw_config_source_t *src,
                     gw_config_reload_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!src || src->argc == 0) {
        NL_LOG(NL_WARN, "reload_unavailable", "reason=\"no config sources\"");
        return -ENOTSUP;
    }
    NL_LOG(NL_INFO, "reload_begin", "config=%s",
           running->cfg.config_path[0] ? running->cfg.config_path : "(none)");
    gw_config_t *loaded = malloc(sizeof(*loaded));
    char *text = NULL;
    size_t text_len = 0;
    FILE *err = loaded ? open_memstream(&text, &text_len) : NULL;
    if (!err) {
        free(loaded);
        NL_LOG(NL_ERROR, "reload_failed", "err=%s", nl_strerror(-ENOMEM));
        return -ENOMEM;
    }
    int errors = reload_load(running, src, loaded, err);
    fclose(err);
    int logged = reload_log_lines(text);
    free(text);
    if (errors > 0) {
        NL_LOG(NL_ERROR, "reload_failed", "errors=%d", logged > errors ? logged : errors);
        free(loaded);
        return -EINVAL;
    }
    out->generation = running->generation;
    (void)gw_config_reconcile(&running->cfg, loaded, reload_log_change, out);
    int rc = 0;
    if (out->changed == 0)
        gw_config_reload_log_done(out);
    else if ((rc = gw_config_snap_new(&out->snap, loaded, running)) == 0)
        out->generation = out->snap->generation;
    else
        NL_LOG(NL_ERROR, "reload_failed", "err=%s", nl_strerror(rc));
    free(loaded);
    return rc;
}

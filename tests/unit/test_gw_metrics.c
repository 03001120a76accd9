/*
 * test_gw_metrics: exact Prometheus text for a small document, a line checker for the
 * exposition rules (TYPE before samples, families contiguous, sample syntax), escaping, every
 * sticky error, the same figures as JSON (parsed back with jansson), and nl_hist buckets. Then
 * herald's own figures as gw_admin_render writes them from a snapshot: the presence families
 * (users online once per node, per-loop gauges and counters summed, the engine's last-seen
 * records), in Prometheus text and JSON; the transport families only for the listeners they
 * apply to.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "gw_metrics.h"
#include "gw_admin_int.h"
#include "gw_core.h"

#define LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})

static char *render(gw_metrics_t *w)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gw_metrics_end(w, &text, &len), 0);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    return text;
}

/* A small but complete document, compared byte for byte. */
static void test_gw_metrics_prometheus_exact(void **state)
{
    (void)state;
    gw_metrics_t w;
    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    gw_metrics_gauge(&w, "herald_connections", "Open client connections.", NULL, 1234);
    gw_metrics_counter(&w, "herald_closed_total", "Closed connections.", LABELS("reason", "idle"),
                       17);
    gw_metrics_counter(&w, "herald_closed_total", "ignored, the family has its help",
                       LABELS("reason", "peer"), 3);
    gw_metrics_gauge(&w, "herald_ratio", "A ratio.", LABELS("loop", "0", "kind", "x"), 0.25);
    gw_metrics_bucket_t b[] = {{0.005, 2}, {0.1, 5}};
    gw_metrics_hist(&w, "herald_deliver_seconds", "Latency.", NULL, b, 2, 0.75, 6);
    char *text = render(&w);
    assert_string_equal(text, "# HELP herald_connections Open client connections.\n"
                              "# TYPE herald_connections gauge\n"
                              "herald_connections 1234\n"
                              "# HELP herald_closed_total Closed connections.\n"
                              "# TYPE herald_closed_total counter\n"
                              "herald_closed_total{reason=\"idle\"} 17\n"
                              "herald_closed_total{reason=\"peer\"} 3\n"
                              "# HELP herald_ratio A ratio.\n"
                              "# TYPE herald_ratio gauge\n"
                              "herald_ratio{loop=\"0\",kind=\"x\"} 0.25\n"
                              "# HELP herald_deliver_seconds Latency.\n"
                              "# TYPE herald_deliver_seconds histogram\n"
                              "herald_deliver_seconds_bucket{le=\"0.005\"} 2\n"
                              "herald_deliver_seconds_bucket{le=\"0.1\"} 5\n"
                              "herald_deliver_seconds_bucket{le=\"+Inf\"} 6\n"
                              "herald_deliver_seconds_sum 0.75\n"
                              "herald_deliver_seconds_count 6\n");
    free(text);
}

/* ---- a line checker for the text exposition format ---- */

typedef struct checker_s {
    char families[64][128];
    char types[64][16];
    size_t n;
    int samples;
} checker_t;

static bool is_name_char(char c, bool is_first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!is_first && c >= '0' && c <= '9');
}

/* Returns the length of the metric name at s, 0 when there is none. */
static size_t name_len(const char *s)
{
    size_t n = 0;
    while (is_name_char(s[n], n == 0))
        n++;
    return n;
}

/* Skips {name="value",...} with escapes; returns the position after '}', or NULL. */
static const char *skip_labels(const char *p)
{
    if (*p != '{')
        return p;
    p++;
    while (*p != '}') {
        size_t n = name_len(p);
        if (n == 0 || p[n] != '=' || p[n + 1] != '"')
            return NULL;
        p += n + 2;
        while (*p != '"') {
            if (*p == '\0' || *p == '\n')
                return NULL;
            if (*p == '\\') {
                if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                    return NULL;
                p++;
            }
            p++;
        }
        p++;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return NULL;
    }
    return p + 1;
}

static void check_sample(checker_t *c, const char *line)
{
    size_t n = name_len(line);
    assert_true(n > 0);
    assert_true(c->n > 0); /* a TYPE came first */
    const char *family = c->families[c->n - 1];
    size_t flen = strlen(family);
    bool is_hist = strcmp(c->types[c->n - 1], "histogram") == 0;
    bool is_own = n == flen && strncmp(line, family, n) == 0;
    bool is_hist_part = is_hist && n > flen && strncmp(line, family, flen) == 0 &&
                        (strncmp(line + flen, "_bucket", n - flen) == 0 ||
                         strncmp(line + flen, "_sum", n - flen) == 0 ||
                         strncmp(line + flen, "_count", n - flen) == 0);
    if (!(is_own && !is_hist) && !is_hist_part)
        fail_msg("sample '%s' outside its family %s", line, family);
    const char *p = skip_labels(line + n);
    if (p == NULL || *p != ' ')
        fail_msg("bad labels in '%s'", line);
    p++;
    if (strcmp(p, "+Inf") != 0 && strcmp(p, "-Inf") != 0 && strcmp(p, "NaN") != 0) {
        char *end;
        strtod(p, &end);
        if (end == p || *end != '\0')
            fail_msg("bad value in '%s'", line);
    }
    c->samples++;
}

/* Checks a whole document; returns the number of samples. */
static int check_exposition(char *text)
{
    checker_t *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    char *save = NULL;
    bool expect_type = false;
    char help_name[128] = "";
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0) {
            size_t n = name_len(line + 7);
            assert_true(n > 0 && n < sizeof(help_name));
            snprintf(help_name, sizeof(help_name), "%.*s", (int)n, line + 7);
            expect_type = true;
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[128];
            char type[16];
            assert_int_equal(sscanf(line + 7, "%127s %15s", name, type), 2);
            assert_true(expect_type);
            assert_string_equal(name, help_name);
            for (size_t i = 0; i < c->n; i++) {
                if (strcmp(c->families[i], name) == 0)
                    fail_msg("family %s declared twice", name);
            }
            assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                        strcmp(type, "histogram") == 0);
            assert_true(c->n < 64);
            snprintf(c->families[c->n], sizeof(c->families[0]), "%s", name);
            snprintf(c->types[c->n], sizeof(c->types[0]), "%s", type);
            c->n++;
            expect_type = false;
        } else {
            assert_false(expect_type);
            check_sample(c, line);
        }
    }
    int samples = c->samples;
    free(c);
    return samples;
}

static void test_gw_metrics_exposition_rules(void **state)
{
    (void)state;
    gw_metrics_t w;
    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    for (int loop = 0; loop < 4; loop++) {
        char id[8];
        snprintf(id, sizeof(id), "%d", loop);
        gw_metrics_gauge(&w, "herald_loop_connections", "Per loop.", LABELS("loop", id), loop);
    }
    gw_metrics_counter(&w, "herald_messages_total", "Messages.", NULL, UINT64_MAX);
    gw_metrics_gauge(&w, "herald_nan", "Not a number.", NULL, NAN);
    gw_metrics_gauge(&w, "herald_inf", "Infinite.", LABELS("sign", "+"), INFINITY);
    gw_metrics_gauge(&w, "herald_inf", "Infinite.", LABELS("sign", "-"), -INFINITY);
    gw_metrics_gauge(&w, "herald_tiny", "Small.", NULL, 1e-300);
    gw_metrics_gauge(&w, "herald_third", "Needs 17 digits.", NULL, 1.0 / 3.0);
    gw_metrics_hist(&w, "herald_empty_hist", "No buckets.", LABELS("a", "b"), NULL, 0, 0, 0);
    char *text = render(&w);
    assert_non_null(strstr(text, "herald_messages_total 18446744073709551615\n"));
    assert_non_null(strstr(text, "herald_nan NaN\n"));
    assert_non_null(strstr(text, "herald_inf{sign=\"+\"} +Inf\n"));
    assert_non_null(strstr(text, "herald_inf{sign=\"-\"} -Inf\n"));
    assert_non_null(strstr(text, "herald_third 0.33333333333333331\n"));
    assert_non_null(strstr(text, "herald_empty_hist_bucket{a=\"b\",le=\"+Inf\"} 0\n"));
    /* 4 + 1 + 1 + 2 + 1 + 1 samples, and the histogram's +Inf, sum and count. */
    assert_int_equal(check_exposition(text), 13);
    free(text);
}

static void test_gw_metrics_escaping(void **state)
{
    (void)state;
    gw_metrics_t w;
    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    gw_metrics_counter(&w, "x_total", "Line one\nback\\slash \"quoted\"", LABELS("v", "a\"b\\c\nd"),
                       1);
    char *text = render(&w);
    assert_string_equal(text, "# HELP x_total Line one\\nback\\\\slash \"quoted\"\n"
                              "# TYPE x_total counter\n"
                              "x_total{v=\"a\\\"b\\\\c\\nd\"} 1\n");
    assert_int_equal(check_exposition(text), 1);
    free(text);
}

/* Each misuse fails the document with -EINVAL, and later calls write nothing. */
static void test_gw_metrics_errors(void **state)
{
    (void)state;
    gw_metrics_bucket_t up[] = {{1, 1}, {2, 2}};
    gw_metrics_bucket_t down[] = {{1, 2}, {2, 1}};
    gw_metrics_bucket_t same_le[] = {{1, 1}, {1, 1}};
    gw_metrics_bucket_t inf_le[] = {{INFINITY, 1}};
    for (int i = 0; i < 11; i++) {
        gw_metrics_t w;
        gw_metrics_begin(&w, i % 2 == 0 ? GW_METRICS_PROMETHEUS : GW_METRICS_JSON);
        gw_metrics_counter(&w, "a_total", "A.", NULL, 1);
        switch (i) {
        case 0:
            gw_metrics_counter(&w, "9starts_with_digit", "", NULL, 1);
            break;
        case 1:
            gw_metrics_counter(&w, "has-dash", "", NULL, 1);
            break;
        case 2:
            gw_metrics_counter(&w, "b_total", "", LABELS("__reserved", "x"), 1);
            break;
        case 3:
            gw_metrics_counter(&w, "b_total", "", LABELS("with:colon", "x"), 1);
            break;
        case 4: /* a family split by another */
            gw_metrics_counter(&w, "b_total", "", NULL, 1);
            gw_metrics_counter(&w, "a_total", "A.", LABELS("k", "v"), 1);
            break;
        case 5: /* a family retyped */
            gw_metrics_gauge(&w, "a_total", "A.", LABELS("k", "v"), 1);
            break;
        case 6:
            gw_metrics_hist(&w, "h", "", LABELS("le", "1"), up, 2, 1, 2);
            break;
        case 7:
            gw_metrics_hist(&w, "h", "", NULL, down, 2, 1, 2);
            break;
        case 8:
            gw_metrics_hist(&w, "h", "", NULL, same_le, 2, 1, 2);
            break;
        case 9:
            gw_metrics_hist(&w, "h", "", NULL, up, 2, 1, 1); /* bucket above count */
            break;
        case 10:
            gw_metrics_hist(&w, "h", "", NULL, inf_le, 1, 1, 1);
            break;
        }
        gw_metrics_counter(&w, "after_total", "", NULL, 1);
        char *text = (char *)"sentinel";
        size_t len = 99;
        if (gw_metrics_end(&w, &text, &len) != -EINVAL)
            fail_msg("case %d was accepted", i);
        assert_null(text);
        assert_int_equal(len, 0);
    }
    /* A label list without a value for its last name. */
    gw_metrics_t w;
    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    const char *const odd[] = {"k", NULL};
    gw_metrics_counter(&w, "c_total", "", odd, 1);
    char *text;
    size_t len;
    assert_int_equal(gw_metrics_end(&w, &text, &len), -EINVAL);
}

static void test_gw_metrics_json(void **state)
{
    (void)state;
    gw_metrics_t w;
    gw_metrics_begin(&w, GW_METRICS_JSON);
    gw_metrics_gauge(&w, "herald_connections", "Open \"client\" connections.", NULL, 1234);
    gw_metrics_counter(&w, "herald_closed_total", "Closed.", LABELS("reason", "idle"), 17);
    gw_metrics_counter(&w, "herald_closed_total", "Closed.", LABELS("reason", "pe\"er\n"), 3);
    gw_metrics_gauge(&w, "herald_nan", "NaN.", NULL, NAN);
    gw_metrics_bucket_t b[] = {{0.005, 2}, {0.1, 5}};
    gw_metrics_hist(&w, "herald_deliver_seconds", "Latency.", LABELS("loop", "1"), b, 2, 0.75, 6);
    char *text = render(&w);
    json_error_t err;
    json_t *doc = json_loads(text, 0, &err);
    if (doc == NULL)
        fail_msg("invalid JSON (%s) in:\n%s", err.text, text);
    assert_int_equal(json_object_size(doc), 4);

    json_t *conn = json_object_get(doc, "herald_connections");
    assert_string_equal(json_string_value(json_object_get(conn, "type")), "gauge");
    assert_string_equal(json_string_value(json_object_get(conn, "help")),
                        "Open \"client\" connections.");
    json_t *s0 = json_array_get(json_object_get(conn, "samples"), 0);
    assert_true(json_number_value(json_object_get(s0, "value")) == 1234.0);
    assert_int_equal(json_object_size(json_object_get(s0, "labels")), 0);

    json_t *closed = json_object_get(json_object_get(doc, "herald_closed_total"), "samples");
    assert_int_equal(json_array_size(closed), 2);
    json_t *s1 = json_array_get(closed, 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(s1, "labels"), "reason")),
                        "pe\"er\n");
    assert_int_equal(json_integer_value(json_object_get(s1, "value")), 3);

    json_t *nan = json_array_get(json_object_get(json_object_get(doc, "herald_nan"), "samples"), 0);
    assert_true(json_is_null(json_object_get(nan, "value")));

    json_t *hist = json_object_get(doc, "herald_deliver_seconds");
    assert_string_equal(json_string_value(json_object_get(hist, "type")), "histogram");
    json_t *h0 = json_array_get(json_object_get(hist, "samples"), 0);
    assert_int_equal(json_integer_value(json_object_get(h0, "count")), 6);
    assert_true(json_number_value(json_object_get(h0, "sum")) == 0.75);
    json_t *buckets = json_object_get(h0, "buckets");
    assert_int_equal(json_array_size(buckets), 3);
    assert_true(json_number_value(json_object_get(json_array_get(buckets, 0), "le")) == 0.005);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(buckets, 1), "count")), 5);
    assert_string_equal(json_string_value(json_object_get(json_array_get(buckets, 2), "le")),
                        "+Inf");
    json_decref(doc);
    free(text);

    /* An empty document is still valid. */
    gw_metrics_begin(&w, GW_METRICS_JSON);
    text = render(&w);
    assert_string_equal(text, "{}\n");
    free(text);
    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    text = render(&w);
    assert_string_equal(text, "");
    free(text);
}

/* Buckets from an nl_hist: bounds on its bucket edges (15, 63, 1023) are exact. */
static void test_gw_metrics_hist_nl(void **state)
{
    (void)state;
    nl_hist_t *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    for (uint64_t v = 0; v < 2000; v++)
        nl_hist_record_local(h, v);
    const double raw[] = {15, 63, 1023};
    const double secs[] = {15e-9, 63e-9, 1023e-9};
    gw_metrics_t w;
    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    gw_metrics_hist_nl(&w, "raw", "Raw units.", NULL, h, raw, 3, 1.0);
    gw_metrics_hist_nl(&w, "ns_seconds", "ns shown as s.", NULL, h, secs, 3, 1e-9);
    char *text = render(&w);
    assert_string_equal(text, "# HELP raw Raw units.\n"
                              "# TYPE raw histogram\n"
                              "raw_bucket{le=\"15\"} 16\n"
                              "raw_bucket{le=\"63\"} 64\n"
                              "raw_bucket{le=\"1023\"} 1024\n"
                              "raw_bucket{le=\"+Inf\"} 2000\n"
                              "raw_sum 1999000\n"
                              "raw_count 2000\n"
                              "# HELP ns_seconds ns shown as s.\n"
                              "# TYPE ns_seconds histogram\n"
                              "ns_seconds_bucket{le=\"1.5e-08\"} 16\n"
                              "ns_seconds_bucket{le=\"6.3e-08\"} 64\n"
                              "ns_seconds_bucket{le=\"1.023e-06\"} 1024\n"
                              "ns_seconds_bucket{le=\"+Inf\"} 2000\n"
                              "ns_seconds_sum 0.001999\n"
                              "ns_seconds_count 2000\n");
    free(text);
    free(h);
}

/* Many families and samples: the buffer grows, and families far apart are still unique. */
static void test_gw_metrics_large(void **state)
{
    (void)state;
    gw_metrics_t w;
    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    for (int f = 0; f < 60; f++) {
        char name[32];
        snprintf(name, sizeof(name), "family_%d_total", f);
        for (int s = 0; s < 100; s++) {
            char id[8];
            snprintf(id, sizeof(id), "%d", s);
            gw_metrics_counter(&w, name, "Many.", LABELS("i", id), (uint64_t)(f * 100 + s));
        }
    }
    gw_metrics_counter(&w, "family_0_total", "Back again.", NULL, 1);
    char *text;
    size_t len;
    assert_int_equal(gw_metrics_end(&w, &text, &len), -EINVAL);

    gw_metrics_begin(&w, GW_METRICS_PROMETHEUS);
    for (int f = 0; f < 60; f++) {
        char name[32];
        snprintf(name, sizeof(name), "family_%d_total", f);
        for (int s = 0; s < 100; s++)
            gw_metrics_counter(&w, name, "Many.", LABELS("i", "x"), 1);
    }
    text = render(&w);
    assert_int_equal(check_exposition(text), 6000);
    free(text);
}

/* The sample line of family{labels} in Prometheus text, or fails. */
static double prom_value(const char *text, const char *sample)
{
    char want[160];
    snprintf(want, sizeof(want), "\n%s ", sample);
    const char *p = strstr(text, want);
    if (!p)
        fail_msg("no sample %s", sample);
    return strtod(p + strlen(want), NULL);
}

/* A two-loop snapshot with the presence figures set; the rest is zero. */
/* gw_admin_render with an engine that has no families of its own and an idle admin server. */
static int render_snapshot(const gw_stats_snapshot_t *snap, gw_metrics_format_t format, char **out,
                           size_t *len)
{
    static const gw_engine_ops_t ops = {.name = "test"};
    static const gw_engine_t engine = {.ops = &ops};
    static const gw_http_stats_t http = {0};
    return gw_admin_render(snap, &engine, &http, format, out, len);
}

static gw_stats_snapshot_t *presence_snapshot(int64_t users_online)
{
    gw_stats_snapshot_t *snap = calloc(1, sizeof(*snap));
    assert_non_null(snap);
    snap->n_loops = 2;
    snap->loops = calloc(2, sizeof(*snap->loops));
    assert_non_null(snap->loops);
    snap->users_online = users_online;
    for (int i = 0; i < 2; i++) {
        gw_stats_t *st = &snap->loops[i].s;
        st->presence_entries = 10 + (uint64_t)i;
        st->presence_listener_subs = 2;
        st->presence_refreshes = 7;
        st->presence_refreshed_users = 70;
        st->presence_joins = 5 + (uint64_t)i;
        st->presence_leaves = 3;
        st->presence_event_failures = (uint64_t)i;
        snap->loops[i].engine.last_seen_records = 100;
        snap->loops[i].engine.channels = 4;
        snap->loops[i].subscriptions = 9;
    }
    return snap;
}

static void test_gw_metrics_herald_presence(void **state)
{
    (void)state;
    gw_stats_snapshot_t *snap = presence_snapshot(42);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(render_snapshot(snap, GW_METRICS_PROMETHEUS, &text, &len), 0);
    assert_true(prom_value(text, "herald_users_online") == 42);
    assert_true(prom_value(text, "herald_presence_entries") == 21);
    assert_true(prom_value(text, "herald_presence_listeners") == 4);
    assert_true(prom_value(text, "herald_presence_refreshes_total") == 14);
    assert_true(prom_value(text, "herald_presence_refreshed_users_total") == 140);
    assert_true(prom_value(text, "herald_presence_events_total{type=\"join\"}") == 11);
    assert_true(prom_value(text, "herald_presence_events_total{type=\"leave\"}") == 6);
    assert_true(prom_value(text, "herald_presence_event_failures_total") == 1);
    assert_true(prom_value(text, "herald_last_seen_records") == 200);
    assert_true(prom_value(text, "herald_channels") == 8);
    assert_true(prom_value(text, "herald_subscriptions") == 18);
    assert_non_null(strstr(text, "# TYPE herald_users_online gauge\n"));
    assert_non_null(strstr(text, "# TYPE herald_presence_refreshes_total counter\n"));
    free(text);

    /* The same figures as JSON. */
    assert_int_equal(render_snapshot(snap, GW_METRICS_JSON, &text, &len), 0);
    json_error_t err;
    json_t *doc = json_loads(text, 0, &err);
    if (doc == NULL)
        fail_msg("invalid JSON (%s)", err.text);
    json_t *users = json_object_get(doc, "herald_users_online");
    assert_string_equal(json_string_value(json_object_get(users, "type")), "gauge");
    json_t *u0 = json_array_get(json_object_get(users, "samples"), 0);
    assert_int_equal(json_integer_value(json_object_get(u0, "value")), 42);
    json_t *events =
        json_object_get(json_object_get(doc, "herald_presence_events_total"), "samples");
    assert_int_equal(json_array_size(events), 2);
    json_t *joins = json_array_get(events, 0);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(joins, "labels"), "type")), "join");
    assert_int_equal(json_integer_value(json_object_get(joins, "value")), 11);
    json_decref(doc);
    free(text);
    gw_stats_snapshot_free(snap);

    /* Users online unknown (the names could not be gathered): left out, not a wrong 0. */
    snap = presence_snapshot(-ENOMEM);
    assert_int_equal(render_snapshot(snap, GW_METRICS_PROMETHEUS, &text, &len), 0);
    assert_null(strstr(text, "herald_users_online"));
    assert_non_null(strstr(text, "\nherald_presence_entries 21\n"));
    free(text);
    gw_stats_snapshot_free(snap);
}

/* Whether text has a sample line starting with prefix (a family and the start of its labels). */
static bool has_sample(const char *text, const char *prefix)
{
    char want[160];
    snprintf(want, sizeof(want), "\n%s", prefix);
    return strstr(text, want) != NULL;
}

/* The transport families appear only for the listeners they can move on: herald_ws_* for the
 * ws listener, herald_tls_* for listeners with TLS, herald_transport_* for listeners with a
 * handshake, and each handshake failure reason where that handshake can fail so. */
static void test_gw_metrics_herald_transport_scope(void **state)
{
    (void)state;
    gw_stats_snapshot_t *snap = presence_snapshot(1);
    snap->has_listener[0] = snap->has_listener[1] = true;
    snap->listeners[1].is_ws = true;
    snap->listeners[1].ws_pings = 3;
    char *text = NULL;
    size_t len = 0;
    /* Plain tcp and ws. */
    assert_int_equal(render_snapshot(snap, GW_METRICS_PROMETHEUS, &text, &len), 0);
    assert_true(prom_value(text, "herald_ws_pings_total{listener=\"ws\"}") == 3);
    assert_false(has_sample(text, "herald_ws_pings_total{listener=\"tcp\""));
    assert_false(has_sample(text, "herald_ws_protocol_errors_total{listener=\"tcp\""));
    assert_null(strstr(text, "herald_tls_"));
    assert_true(has_sample(text, "herald_transport_handshaking{listener=\"ws\""));
    assert_false(has_sample(text, "herald_transport_handshaking{listener=\"tcp\""));
    assert_false(has_sample(text, "herald_transport_handshakes_total{listener=\"tcp\""));
    assert_true(has_sample(
        text, "herald_transport_handshake_failures_total{listener=\"ws\",reason=\"origin\"}"));
    assert_true(has_sample(
        text, "herald_transport_handshake_failures_total{listener=\"ws\",reason=\"timeout\"}"));
    assert_false(has_sample(
        text, "herald_transport_handshake_failures_total{listener=\"ws\",reason=\"tls_error\"}"));
    assert_false(has_sample(text, "herald_transport_handshake_failures_total{listener=\"tcp\""));
    free(text);
    /* TLS on both. */
    snap->listeners[0].is_tls = snap->listeners[1].is_tls = true;
    snap->listeners[0].tls_renegotiations = 2;
    assert_int_equal(render_snapshot(snap, GW_METRICS_PROMETHEUS, &text, &len), 0);
    assert_true(prom_value(text, "herald_tls_renegotiations_total{listener=\"tcp\"}") == 2);
    assert_true(prom_value(text, "herald_tls_renegotiations_total{listener=\"ws\"}") == 0);
    assert_true(prom_value(text, "herald_tls_ktls_connections_total{listener=\"tcp\"}") == 0);
    assert_false(has_sample(text, "herald_ws_pings_total{listener=\"tcp\""));
    assert_true(prom_value(text, "herald_transport_handshaking{listener=\"tcp\"}") == 0);
    assert_true(has_sample(
        text, "herald_transport_handshake_failures_total{listener=\"tcp\",reason=\"plaintext\"}"));
    assert_false(has_sample(
        text, "herald_transport_handshake_failures_total{listener=\"tcp\",reason=\"origin\"}"));
    assert_true(has_sample(
        text, "herald_transport_handshake_failures_total{listener=\"ws\",reason=\"tls_error\"}"));
    free(text);
    gw_stats_snapshot_free(snap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_metrics_prometheus_exact),
        cmocka_unit_test(test_gw_metrics_exposition_rules),
        cmocka_unit_test(test_gw_metrics_escaping),
        cmocka_unit_test(test_gw_metrics_errors),
        cmocka_unit_test(test_gw_metrics_json),
        cmocka_unit_test(test_gw_metrics_hist_nl),
        cmocka_unit_test(test_gw_metrics_large),
        cmocka_unit_test(test_gw_metrics_herald_presence),
        cmocka_unit_test(test_gw_metrics_herald_transport_scope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

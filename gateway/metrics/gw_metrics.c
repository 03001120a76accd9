/*
 * gw_metrics: a streaming writer for Prometheus text and the equivalent JSON. Everything is
 * appended to one growable buffer; a family is "open" from its first sample until a sample of
 * another name (or the end) closes it, which is when JSON closes its array and object.
 */
#include "gw_metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TYPE_COUNTER, TYPE_GAUGE, TYPE_HISTOGRAM };

static const char *const type_names[] = {"counter", "gauge", "histogram"};

/* Escaping contexts: Prometheus HELP text escapes \ and newline; label values also escape ";
 * JSON strings escape ", \ and every control byte. */
enum { ESC_PROM_HELP, ESC_PROM_LABEL, ESC_JSON };

static void fail(gw_metrics_t *w, int err)
{
    if (w->err == 0)
        w->err = err;
}

/* Makes room for n more bytes plus a NUL. Doubling from 4 KiB keeps a scrape to a few
 * reallocations; the cap bounds what a runaway label set could cost. */
static bool reserve(gw_metrics_t *w, size_t n)
{
    if (w->err != 0)
        return false;
    if (w->len + n + 1 <= w->cap)
        return true;
    if (w->len + n + 1 > GW_METRICS_MAX_BYTES) {
        fail(w, -ENOBUFS);
        return false;
    }
    size_t cap = w->cap != 0 ? w->cap : 4096;
    while (cap < w->len + n + 1)
        cap *= 2;
    if (cap > GW_METRICS_MAX_BYTES)
        cap = GW_METRICS_MAX_BYTES;
    char *buf = realloc(w->buf, cap);
    if (buf == NULL) {
        fail(w, -ENOMEM);
        return false;
    }
    w->buf = buf;
    w->cap = cap;
    w->buf[w->len] = '\0';
    return true;
}

static void put(gw_metrics_t *w, const char *s, size_t n)
{
    if (!reserve(w, n))
        return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void put_str(gw_metrics_t *w, const char *s)
{
    put(w, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void putf(gw_metrics_t *w, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    /* Only numbers go through here; they always fit. */
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        fail(w, -EINVAL);
        return;
    }
    put(w, tmp, (size_t)n);
}

static void put_escaped(gw_metrics_t *w, const char *s, int mode)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '\\') {
            put_str(w, "\\\\");
        } else if (*p == '\n') {
            put_str(w, "\\n");
        } else if (*p == '"' && mode != ESC_PROM_HELP) {
            put_str(w, "\\\"");
        } else if (*p < 0x20 && mode == ESC_JSON) {
            putf(w, "\\u%04x", *p);
        } else {
            put(w, (const char *)p, 1);
        }
    }
}

/* Formats a double so that it reads back exactly, in the spelling Prometheus expects for the
 * special values. JSON has no NaN or infinity: those become null. */
static void put_double(gw_metrics_t *w, double v)
{
    bool is_json = w->format == GW_METRICS_JSON;
    if (isnan(v)) {
        put_str(w, is_json ? "null" : "NaN");
        return;
    }
    if (isinf(v)) {
        put_str(w, is_json ? "null" : v > 0 ? "+Inf" : "-Inf");
        return;
    }
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%.15g", v);
    if (strtod(tmp, NULL) != v)
        snprintf(tmp, sizeof(tmp), "%.17g", v);
    put_str(w, tmp);
}

static bool name_ok(const char *name, bool is_label)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n >= GW_METRICS_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
        return false;
    if (is_label && name[0] == '_' && name[1] == '_')
        return false; /* reserved for Prometheus itself */
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || (c == ':' && !is_label);
        if (!ok)
            return false;
    }
    return true;
}

static bool labels_ok(const char *const *labels, bool is_hist)
{
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2) {
        if (!name_ok(labels[i], true) || labels[i + 1] == NULL)
            return false;
        if (is_hist && strcmp(labels[i], "le") == 0)
            return false;
    }
    return true;
}

static void close_family(gw_metrics_t *w)
{
    if (w->family[0] == '\0')
        return;
    if (w->format == GW_METRICS_JSON)
        put_str(w, "]}");
    if (w->n_seen == w->cap_seen) {
        size_t cap = w->cap_seen != 0 ? w->cap_seen * 2 : 32;
        char **seen = realloc(w->seen, cap * sizeof(*seen));
        if (seen == NULL) {
            fail(w, -ENOMEM);
            return;
        }
        w->seen = seen;
        w->cap_seen = cap;
    }
    w->seen[w->n_seen] = strdup(w->family);
    if (w->seen[w->n_seen] == NULL) {
        fail(w, -ENOMEM);
        return;
    }
    w->n_seen++;
    w->family[0] = '\0';
}

/*
 * Validates a sample's name, type and labels and, when it starts a new family, closes the
 * previous one and writes the new one's HELP and TYPE (or its JSON opening). Returns false
 * when nothing should be written. The linear search over closed families runs once per
 * family, not per sample; a scrape has tens of families.
 */
static bool sample_begin(gw_metrics_t *w, const char *name, const char *help,
                         const char *const *labels, int type)
{
    if (w->err != 0)
        return false;
    if (!name_ok(name, false) || !labels_ok(labels, type == TYPE_HISTOGRAM)) {
        fail(w, -EINVAL);
        return false;
    }
    if (strcmp(w->family, name) == 0) {
        if (w->family_type != type)
            fail(w, -EINVAL);
        if (w->format == GW_METRICS_JSON)
            put_str(w, ",");
        return w->err == 0;
    }
    for (size_t i = 0; i < w->n_seen; i++) {
        if (strcmp(w->seen[i], name) == 0) {
            fail(w, -EINVAL);
            return false;
        }
    }
    close_family(w);
    bool is_first = w->n_seen == 0;
    snprintf(w->family, sizeof(w->family), "%s", name);
    w->family_type = type;
    if (w->format == GW_METRICS_JSON) {
        putf(w, "%s\"", is_first ? "" : ",");
        put_str(w, name);
        putf(w, "\":{\"type\":\"%s\",\"help\":\"", type_names[type]);
        put_escaped(w, help != NULL ? help : "", ESC_JSON);
        put_str(w, "\",\"samples\":[");
    } else {
        putf(w, "# HELP ");
        put_str(w, name);
        put_str(w, " ");
        put_escaped(w, help != NULL ? help : "", ESC_PROM_HELP);
        putf(w, "\n# TYPE ");
        put_str(w, name);
        putf(w, " %s\n", type_names[type]);
    }
    return w->err == 0;
}

/* Writes "{a="x",b="y"}" (with an optional le label last), nothing when there are none. */
static void put_prom_labels(gw_metrics_t *w, const char *const *labels, const char *le)
{
    bool has_any = (labels != NULL && labels[0] != NULL) || le != NULL;
    if (!has_any)
        return;
    put_str(w, "{");
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2) {
        if (i > 0)
            put_str(w, ",");
        put_str(w, labels[i]);
        put_str(w, "=\"");
        put_escaped(w, labels[i + 1], ESC_PROM_LABEL);
        put_str(w, "\"");
    }
    if (le != NULL) {
        if (labels != NULL && labels[0] != NULL)
            put_str(w, ",");
        put_str(w, "le=\"");
        put_str(w, le);
        put_str(w, "\"");
    }
    put_str(w, "}");
}

/* Writes the JSON sample opening up to and including the labels object. */
static void put_json_labels(gw_metrics_t *w, const char *const *labels)
{
    put_str(w, "{\"labels\":{");
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2) {
        put_str(w, i > 0 ? ",\"" : "\"");
        put_str(w, labels[i]);
        put_str(w, "\":\"");
        put_escaped(w, labels[i + 1], ESC_JSON);
        put_str(w, "\"");
    }
    put_str(w, "}");
}

void gw_metrics_begin(gw_metrics_t *w, gw_metrics_format_t format)
{
    memset(w, 0, sizeof(*w));
    w->format = format;
    if (format == GW_METRICS_JSON)
        put_str(w, "{");
    else
        reserve(w, 0); /* an empty Prometheus document is "" and must still be a string */
}

void gw_metrics_counter(gw_metrics_t *w, const char *name, const char *help,
                        const char *const *labels, uint64_t value)
{
    if (!sample_begin(w, name, help, labels, TYPE_COUNTER))
        return;
    if (w->format == GW_METRICS_JSON) {
        put_json_labels(w, labels);
        putf(w, ",\"value\":%" PRIu64 "}", value);
        return;
    }
    put_str(w, name);
    put_prom_labels(w, labels, NULL);
    putf(w, " %" PRIu64 "\n", value);
}

void gw_metrics_gauge(gw_metrics_t *w, const char *name, const char *help,
                      const char *const *labels, double value)
{
    if (!sample_begin(w, name, help, labels, TYPE_GAUGE))
        return;
    if (w->format == GW_METRICS_JSON) {
        put_json_labels(w, labels);
        put_str(w, ",\"value\":");
        put_double(w, value);
        put_str(w, "}");
        return;
    }
    put_str(w, name);
    put_prom_labels(w, labels, NULL);
    put_str(w, " ");
    put_double(w, value);
    put_str(w, "\n");
}

static bool buckets_ok(const gw_metrics_bucket_t *b, size_t n, uint64_t count)
{
    for (size_t i = 0; i < n; i++) {
        if (isnan(b[i].le) || isinf(b[i].le) || b[i].count > count)
            return false;
        if (i > 0 && (b[i].le <= b[i - 1].le || b[i].count < b[i - 1].count))
            return false;
    }
    return true;
}

/* One Prometheus line of a histogram: name + suffix, labels, value. */
static void put_hist_line(gw_metrics_t *w, const char *name, const char *suffix,
                          const char *const *labels, const char *le)
{
    put_str(w, name);
    put_str(w, suffix);
    put_prom_labels(w, labels, le);
    put_str(w, " ");
}

void gw_metrics_hist(gw_metrics_t *w, const char *name, const char *help, const char *const *labels,
                     const gw_metrics_bucket_t *buckets, size_t n, double sum, uint64_t count)
{
    if (w->err == 0 && !buckets_ok(buckets, n, count))
        fail(w, -EINVAL);
    if (!sample_begin(w, name, help, labels, TYPE_HISTOGRAM))
        return;
    bool is_json = w->format == GW_METRICS_JSON;
    if (is_json) {
        put_json_labels(w, labels);
        putf(w, ",\"count\":%" PRIu64 ",\"sum\":", count);
        put_double(w, sum);
        put_str(w, ",\"buckets\":[");
    }
    for (size_t i = 0; i < n; i++) {
        char le[64];
        snprintf(le, sizeof(le), "%.15g", buckets[i].le);
        if (strtod(le, NULL) != buckets[i].le)
            snprintf(le, sizeof(le), "%.17g", buckets[i].le);
        if (is_json) {
            putf(w, "%s{\"le\":%s,\"count\":%" PRIu64 "}", i > 0 ? "," : "", le, buckets[i].count);
        } else {
            put_hist_line(w, name, "_bucket", labels, le);
            putf(w, "%" PRIu64 "\n", buckets[i].count);
        }
    }
    if (is_json) {
        putf(w, "%s{\"le\":\"+Inf\",\"count\":%" PRIu64 "}]}", n > 0 ? "," : "", count);
        return;
    }
    put_hist_line(w, name, "_bucket", labels, "+Inf");
    putf(w, "%" PRIu64 "\n", count);
    put_hist_line(w, name, "_sum", labels, NULL);
    put_double(w, sum);
    put_str(w, "\n");
    put_hist_line(w, name, "_count", labels, NULL);
    putf(w, "%" PRIu64 "\n", count);
}

void gw_metrics_hist_nl(gw_metrics_t *w, const char *name, const char *help,
                        const char *const *labels, const nl_hist_t *h, const double *bounds,
                        size_t n, double unit)
{
    enum { MAX_BOUNDS = 64 };
    gw_metrics_bucket_t buckets[MAX_BOUNDS];
    if (w->err != 0)
        return;
    if (n > MAX_BOUNDS || !(unit > 0)) {
        fail(w, -EINVAL);
        return;
    }
    nl_hist_summary_t s;
    nl_hist_summarize(h, &s);
    /* Recorders may run while we read: clamp so the buckets stay cumulative and within the
     * count that the summary saw. */
    uint64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        /* The bound in recorded units, rounded down: values <= bound are those <= floor. The
         * division is nudged up by a billionth so 63e-9 / 1e-9 = 62.99999... still means 63. */
        double raw = bounds[i] / unit;
        raw += raw * 1e-9;
        uint64_t c = 0;
        if (raw >= 18446744073709551615.0)
            c = nl_hist_count_le(h, UINT64_MAX);
        else if (raw >= 0)
            c = nl_hist_count_le(h, (uint64_t)raw);
        c = c < prev ? prev : c > s.count ? s.count : c;
        buckets[i] = (gw_metrics_bucket_t){bounds[i], c};
        prev = c;
    }
    gw_metrics_hist(w, name, help, labels, buckets, n, (double)s.sum * unit, s.count);
}

static void release(gw_metrics_t *w)
{
    for (size_t i = 0; i < w->n_seen; i++)
        free(w->seen[i]);
    free(w->seen);
    w->seen = NULL;
    w->n_seen = 0;
    w->cap_seen = 0;
}

int gw_metrics_end(gw_metrics_t *w, char **out, size_t *out_len)
{
    close_family(w);
    if (w->format == GW_METRICS_JSON)
        put_str(w, "}\n");
    release(w);
    int err = w->err;
    if (err != 0) {
        free(w->buf);
        *out = NULL;
        *out_len = 0;
    } else {
        *out = w->buf;
        *out_len = w->len;
    }
    w->buf = NULL;
    w->len = 0;
    w->cap = 0;
    return err;
}

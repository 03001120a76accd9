/*
 * lg_svg: chart frames, axes and escaping for the HTML report (see lg_svg.h).
 *
 * Coordinates are printed with one decimal: a viewBox 960 units wide needs no more, and it
 * keeps a report of thousands of points small.
 */
#include "lg_svg.h"

#include <math.h>
#include <string.h>

/* Room around the plot area for tick labels, axis titles and the legend. */
#define MARGIN_LEFT 72.0
#define MARGIN_RIGHT 24.0
#define MARGIN_TOP 34.0
#define MARGIN_BOTTOM 46.0
#define TICKS_WANTED 5.0

void lg_svg_escape(FILE *out, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&#39;", out);
            break;
        default:
            fputc(*s, out);
            break;
        }
    }
}

/* The smallest 1, 2 or 5 times a power of ten at or above v (v > 0). */
static double nice_step(double v)
{
    double p = pow(10, floor(log10(v)));
    static const double steps[] = {1, 2, 5, 10};
    for (size_t i = 0; i < 4; i++) {
        /* The tolerance keeps 0.3 from becoming 0.5 through 0.30000000000000004. */
        if (steps[i] * p >= v * (1 - 1e-9))
            return steps[i] * p;
    }
    return 10 * p;
}

double lg_chart_nice_ceil(double v)
{
    if (!(v > 0))
        return 1;
    double step = nice_step(v / TICKS_WANTED);
    return ceil(v / step - 1e-9) * step;
}

double lg_chart_px(const lg_chart_t *c, double x)
{
    double f;
    if (c->is_x_log)
        f = x > 0 ? (log10(x) - log10(c->x_min)) / (log10(c->x_max) - log10(c->x_min)) : 0;
    else
        f = (x - c->x_min) / (c->x_max - c->x_min);
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    return c->left + f * c->width;
}

double lg_chart_py(const lg_chart_t *c, double y)
{
    double f = (y - c->y_min) / (c->y_max - c->y_min);
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    return c->top + (1 - f) * c->height;
}

/* A tick label: short, no exponent notation ("0.05", "250", "12k", "1.5M"). */
static void tick_label(char *buf, size_t len, double v)
{
    double a = fabs(v);
    if (a >= 1e6)
        snprintf(buf, len, "%gM", v / 1e6);
    else if (a >= 1e4)
        snprintf(buf, len, "%gk", v / 1e3);
    else if (a == 0 || a >= 0.01)
        snprintf(buf, len, "%g", v);
    else
        snprintf(buf, len, "%.4f", v);
}

static void grid_x(const lg_chart_t *c, double v)
{
    char label[32];
    double x = lg_chart_px(c, v);
    tick_label(label, sizeof(label), v);
    fprintf(c->out,
            "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
            "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
            x, c->top, x, c->top + c->height, x, c->top + c->height + 16, label);
}

static void grid_y(const lg_chart_t *c, double v)
{
    char label[32];
    double y = lg_chart_py(c, v);
    tick_label(label, sizeof(label), v);
    fprintf(c->out,
            "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
            "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            c->left, y, c->left + c->width, y, c->left - 6, y + 4, label);
}

/* Grid lines on 1, 2, 5 times each power of ten inside a log axis. */
static void axis_x_log(const lg_chart_t *c)
{
    for (double p = pow(10, floor(log10(c->x_min))); p <= c->x_max; p *= 10) {
        static const double mult[] = {1, 2, 5};
        for (size_t i = 0; i < 3; i++) {
            double v = p * mult[i];
            if (v >= c->x_min * (1 - 1e-9) && v <= c->x_max * (1 + 1e-9))
                grid_x(c, v);
        }
    }
}

/* Grid lines every nice step of a linear axis, at most a dozen. */
static void axis_linear(const lg_chart_t *c, bool is_x)
{
    double lo = is_x ? c->x_min : c->y_min;
    double hi = is_x ? c->x_max : c->y_max;
    double step = nice_step((hi - lo) / TICKS_WANTED);
    double first = ceil(lo / step - 1e-9) * step;
    for (int i = 0; i <= 12; i++) {
        double v = first + i * step;
        if (v > hi * (1 + 1e-9) + 1e-12)
            break;
        /* -0 prints as "-0"; a tick at zero is plain 0. */
        if (fabs(v) < step * 1e-9)
            v = 0;
        if (is_x)
            grid_x(c, v);
        else
            grid_y(c, v);
    }
}

static void legend(const lg_chart_t *c, const lg_chart_opts_t *o)
{
    double x = c->left;
    for (size_t i = 0; i < o->key_count; i++) {
        fprintf(c->out,
                "<g class=\"key\"><rect class=\"%s\" x=\"%.1f\" y=\"10\" width=\"12\" "
                "height=\"12\"/><text x=\"%.1f\" y=\"20\">",
                o->keys[i].css_class, x, x + 16);
        lg_svg_escape(c->out, o->keys[i].label);
        fputs("</text></g>\n", c->out);
        /* No text metrics here: an average character is about 7 units at this size. */
        x += 16 + 7.0 * (double)strlen(o->keys[i].label) + 18;
    }
}

void lg_chart_begin(lg_chart_t *c, FILE *out, const lg_chart_opts_t *o)
{
    c->out = out;
    c->is_x_log = o->is_x_log;
    c->x_min = o->x_min;
    c->x_max = o->x_max > o->x_min ? o->x_max : o->x_min + (o->is_x_log ? o->x_min : 1);
    c->y_min = o->y_min;
    c->y_max = o->y_max > o->y_min ? o->y_max : o->y_min + 1;
    c->left = MARGIN_LEFT;
    c->top = MARGIN_TOP;
    c->width = LG_CHART_WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
    c->height = LG_CHART_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM;
    fprintf(out,
            "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" "
            "role=\"img\" data-chart=\"%s\" aria-label=\"",
            LG_CHART_WIDTH, LG_CHART_HEIGHT, o->name);
    lg_svg_escape(out, o->title);
    fprintf(out, "\"%s%s>\n<title>", o->attrs ? " " : "", o->attrs ? o->attrs : "");
    lg_svg_escape(out, o->title);
    fputs("</title>\n", out);
    if (c->is_x_log)
        axis_x_log(c);
    else
        axis_linear(c, true);
    axis_linear(c, false);
    fprintf(out,
            "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n"
            "<text class=\"axis\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">",
            c->left, c->top, c->width, c->height, c->left + c->width / 2, LG_CHART_HEIGHT - 6);
    lg_svg_escape(out, o->x_label);
    fprintf(out,
            "</text>\n<text class=\"axis\" transform=\"translate(14 %.1f) rotate(-90)\" "
            "text-anchor=\"middle\">",
            c->top + c->height / 2);
    lg_svg_escape(out, o->y_label);
    fputs("</text>\n", out);
    legend(c, o);
}

void lg_chart_end(lg_chart_t *c)
{
    fputs("</svg>\n", c->out);
}

/*
 * lg_svg: the few SVG drawing primitives herald-loadgen's HTML report needs: a chart frame
 * with linear or logarithmic axes, "nice" tick values, grid lines and labels, a legend, the
 * mapping from data to drawing coordinates, and text escaped for HTML and SVG. The report
 * (lg_html.c) draws its series into the frame itself, with the data attributes it documents.
 *
 * Every chart is an inline <svg> with a viewBox, so it scales with the page and needs nothing
 * but the HTML file: no script, no stylesheet or font from elsewhere. Colours come from the
 * page's inline stylesheet through class names.
 *
 * Thread: any (no shared state). Ownership: lg_chart_t is the caller's value; the FILE is
 * borrowed.
 * Usage: lg_chart_t c; lg_chart_begin(&c, out, &opts); fprintf(out, "<circle cx=\"%.1f\" ...",
 *        lg_chart_px(&c, x), lg_chart_py(&c, y)); lg_chart_end(&c);
 */
#ifndef HERALD_LOADGEN_LG_SVG_H
#define HERALD_LOADGEN_LG_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define LG_CHART_WIDTH 960 /* viewBox units */
#define LG_CHART_HEIGHT 280

/* One legend entry: its text and the CSS class of its swatch. */
typedef struct lg_chart_key_s {
    const char *label;
    const char *css_class;
} lg_chart_key_t;

typedef struct lg_chart_opts_s {
    const char *name;    /* data-chart="name" */
    const char *title;   /* the chart's heading and accessible name */
    const char *x_label; /* axis titles */
    const char *y_label;
    double x_min; /* data ranges; for a log axis both > 0 */
    double x_max;
    double y_min;
    double y_max;
    bool is_x_log;
    const char *attrs; /* more attributes for the <svg> element, already escaped, or NULL */
    const lg_chart_key_t *keys;
    size_t key_count;
} lg_chart_opts_t;

typedef struct lg_chart_s {
    FILE *out;
    double x_min;
    double x_max;
    double y_min;
    double y_max;
    bool is_x_log;
    double left; /* the plot area, in viewBox units */
    double top;
    double width;
    double height;
} lg_chart_t;

/* Writes the opening <svg> with its title, frame, grid, tick labels, axis titles and legend.
 * A degenerate range (max <= min) is widened so that nothing divides by zero. */
void lg_chart_begin(lg_chart_t *c, FILE *out, const lg_chart_opts_t *opts);

/* The drawing coordinate of data value x (clamped to the axis), and of y. */
double lg_chart_px(const lg_chart_t *c, double x);
double lg_chart_py(const lg_chart_t *c, double y);

/* Closes the <svg>. */
void lg_chart_end(lg_chart_t *c);

/* A round top for an axis showing up to v: the smallest multiple of its tick step (1, 2 or 5
 * times a power of ten, about a fifth of v) at or above v; 1 for v <= 0. */
double lg_chart_nice_ceil(double v);

/* Writes s with &, <, >, " and ' escaped, safe in HTML text and attribute values. */
void lg_svg_escape(FILE *out, const char *s);

#endif

/*
 * report.c: the report of `stoker doctor --html` and stoker.profile's
 * Report.to_html as one HTML page.  The page is drawn here, in inline SVG
 * with inline CSS, and holds no script and no reference to anything
 * outside it: it opens the same anywhere, with no network, and the two
 * front ends cannot draw it differently.
 *
 * The over-time charts come from the runs' series (stk_loader_series):
 * points of counters that count from the run's start.  A chart takes the
 * run's length in about BINS stretches and draws each stretch's rate as a
 * step, so that a line is neither a batch-by-batch jitter nor an average
 * that hides a slow patch.
 */
#define _GNU_SOURCE
#include "../core/internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BINS 60

/* The page's colours: one per run, the limit, one per stage. */
static const char *const run_colour[] = {"#1f77b4", "#e6550d"};
#define LIMIT_COLOUR "#c0392b"

/* The stages as the diagnosis shares them out, in the order a batch goes
 * through them. */
enum { ST_PLAN, ST_VERIFY, ST_IO, ST_ASSEMBLE, ST_IDLE, ST_N };
static const char *const stage_colour[ST_N] = {"#9467bd", "#e7ba52", "#3182bd", "#31a354",
                                               "#c7c7c7"};

static double stage_share(const stk_diagnosis *d, int s) {
    switch (s) {
    case ST_PLAN: return d->share_plan;
    case ST_VERIFY: return d->share_verify;
    case ST_IO: return d->share_io;
    case ST_ASSEMBLE: return d->share_assemble;
    default: return d->share_idle;
    }
}

static const char *stage_name(int s, const char *backend) {
    static const char *const names[ST_N] = {"plan", "verify", "read", "assemble", "idle"};
    if (s == ST_IO && backend && !strcmp(backend, "mmap")) return "copy";
    return names[s];
}

static const char *stage_what(int s, const char *backend) {
    static const char *const what[ST_N] = {
        "order, records, reads", "checksums", "reads through the I/O engine",
        "copies, decompression, conversions", "waiting for the consumer or for a free buffer"};
    if (s == ST_IO && backend && !strcmp(backend, "mmap")) return "copies out of the mapping";
    return what[s];
}

/* Text in HTML, escaped. */
static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A count, rounded, with its thousands grouped: 953,313. */
static void put_count(FILE *f, double v) {
    char d[32];
    snprintf(d, sizeof d, "%.0f", v > 0 ? v : 0);
    size_t n = strlen(d);
    for (size_t i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) fputc(',', f);
        fputc(d[i], f);
    }
}

/* ---- series into stretches ---- */

typedef double (*measure_fn)(const stk_series_point *a, const stk_series_point *b,
                             const stk_report_run *r);

static double measure_bytes(const stk_series_point *a, const stk_series_point *b,
                            const stk_report_run *r) {
    (void)r;
    return (double)(b->bytes - a->bytes) / ((double)(b->t_ns - a->t_ns) / 1e9);
}

static double measure_stall(const stk_series_point *a, const stk_series_point *b,
                            const stk_report_run *r) {
    (void)r;
    double s = (double)(b->wait_ns - a->wait_ns) / (double)(b->t_ns - a->t_ns);
    return s > 1 ? 1 : s;
}

static double measure_fill(const stk_series_point *a, const stk_series_point *b,
                           const stk_report_run *r) {
    if (b->calls <= a->calls || !r->ring_slots) return NAN;
    double f = (double)(b->ready_sum - a->ready_sum) / (double)(b->calls - a->calls) /
               (double)r->ring_slots;
    return f > 1 ? 1 : f;
}

/* A run's series in stretches of at least a BINS-th of the run: the
 * stretch [x0, x1) in seconds and its measure v (NaN: none).  Returns the
 * number of stretches. */
static size_t stretches(const stk_report_run *r, measure_fn m, double *x0, double *x1,
                        double *v) {
    if (!r->series || !r->npoints) return 0;
    uint64_t len = r->series[r->npoints - 1].t_ns, step = len / BINS ? len / BINS : 1;
    stk_series_point prev;
    memset(&prev, 0, sizeof prev);
    size_t n = 0;
    for (size_t i = 0; i < r->npoints && n < 2 * BINS; i++) {
        const stk_series_point *p = &r->series[i];
        if (p->t_ns <= prev.t_ns || (p->t_ns - prev.t_ns < step && i + 1 < r->npoints)) continue;
        x0[n] = (double)prev.t_ns / 1e9;
        x1[n] = (double)p->t_ns / 1e9;
        v[n] = m(&prev, p, r);
        n++;
        prev = *p;
    }
    return n;
}

/* ---- charts ---- */

#define CW 900.0
#define CH 240.0
#define ML 84.0 /* room for the y labels */
#define MR 20.0
#define MT 14.0
#define MB 44.0 /* room for the x labels and the axis' name */

typedef enum { Y_PERCENT, Y_RATE } y_kind;

/* A chart of x in [0, xmax] seconds and y in [ylo, ymax], on a linear or
 * (rates far apart) a logarithmic scale. */
typedef struct chart {
    FILE *f;
    double xmax, ylo, ymax;
    bool log;
    y_kind kind;
} chart;

/* A round step for about `ticks` ticks over [0, span]. */
static double tick_step(double span, int ticks) {
    if (!(span > 0)) return 1;
    double raw = span / ticks, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

/* A y value as its label: a percentage, or bytes/s in the unit that suits
 * `scale` (the largest value on the axis). */
static void y_label(char *out, size_t n, y_kind kind, double v, double scale) {
    if (kind == Y_PERCENT) {
        snprintf(out, n, "%.3g%%", 100 * v);
        return;
    }
    static const char *const units[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
    int u = 0;
    for (double m = scale; m >= 1000 && u < 4; m /= 1000) u++;
    snprintf(out, n, "%.3g %s", v / pow(1000, u), units[u]);
}

static double cx(const chart *c, double x) { return ML + x / c->xmax * (CW - ML - MR); }
static double cy(const chart *c, double y) {
    double v = c->log ? (y > 0 ? log10(y / c->ylo) / log10(c->ymax / c->ylo) : 0)
                      : (y - c->ylo) / (c->ymax - c->ylo);
    if (v > 1) v = 1;
    if (v < 0 || isnan(v)) v = 0;
    return CH - MB - v * (CH - MT - MB);
}

static void grid_line(chart *c, double y, double scale) {
    char label[32];
    y_label(label, sizeof label, c->kind, y, scale);
    double py = cy(c, y);
    fprintf(c->f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                  "<text class=\"yl\" x=\"%.1f\" y=\"%.1f\">%s</text>\n",
            ML, py, CW - MR, py, ML - 6, py + 4, label);
}

/* Opens an SVG chart with x from 0 to xmax seconds and y from 0 to ymax
 * (rates: on a logarithmic scale from `lo` when lo > 0). */
static void chart_open(chart *c, FILE *f, const char *id, const char *label, double xmax,
                       double ymax, y_kind kind, double lo) {
    c->f = f;
    c->kind = kind;
    c->log = lo > 0;
    double xs = tick_step(xmax, 8);
    c->xmax = xmax > 0 ? ceil(xmax / xs - 1e-9) * xs : 1;
    fprintf(f, "<svg id=\"%s\" class=\"chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">"
               "<title>", id, CW, CH);
    put_text(f, label);
    fputs("</title>\n", f);
    if (c->log) {
        /* Whole decades, so that each grid line is a power of ten. */
        c->ylo = pow(10, floor(log10(lo)));
        c->ymax = pow(10, ceil(log10(ymax > lo ? ymax : lo * 10)));
        for (double y = c->ylo; y <= c->ymax * 1.001; y *= 10) grid_line(c, y, y);
    } else {
        double ys = tick_step(ymax, 5);
        c->ylo = 0;
        c->ymax = ymax > 0 ? ceil(ymax / ys - 1e-9) * ys : 1;
        for (double y = 0; y <= c->ymax + ys / 2; y += ys) grid_line(c, y, c->ymax);
    }
    for (double x = 0; x <= c->xmax + xs / 2; x += xs) {
        double px = cx(c, x);
        fprintf(f, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                   "<text class=\"xl\" x=\"%.1f\" y=\"%.1f\">%.3g</text>\n",
                px, CH - MB, px, CH - MB + 5, px, CH - MB + 18, x);
    }
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
               "<text class=\"xn\" x=\"%.1f\" y=\"%.1f\">seconds into the run</text>\n",
            ML, CH - MB, CW - MR, CH - MB, (ML + CW - MR) / 2, CH - 6);
}

/* A run's stretches as steps. */
static void chart_steps(chart *c, const double *x0, const double *x1, const double *v, size_t n,
                        const char *colour, const char *name) {
    FILE *f = c->f;
    fprintf(f, "<polyline class=\"series\" stroke=\"%s\" points=\"", colour);
    for (size_t i = 0; i < n; i++) {
        if (isnan(v[i])) continue;
        fprintf(f, "%.1f,%.1f %.1f,%.1f ", cx(c, x0[i]), cy(c, v[i]), cx(c, x1[i]), cy(c, v[i]));
    }
    fputs("\"><title>", f);
    put_text(f, name);
    fputs("</title></polyline>\n", f);
}

/* A level across the chart, dashed, with its label above it at its right
 * end (or its left: `left`, for a level close to another). */
static void chart_level(chart *c, double y, const char *colour, const char *label, bool left) {
    double py = cy(c, y);
    fprintf(c->f, "<line class=\"level\" stroke=\"%s\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                  "y2=\"%.1f\"/><text class=\"ll%s\" fill=\"%s\" x=\"%.1f\" y=\"%.1f\">",
            colour, ML, py, CW - MR, py, left ? " left" : "", colour, left ? ML + 6 : CW - MR - 4,
            py - 5);
    put_text(c->f, label);
    fputs("</text>\n", c->f);
}

static void chart_close(chart *c) { fputs("</svg>\n", c->f); }

static void legend_key(FILE *f, const char *colour, bool dashed, const char *text) {
    fprintf(f, "<span class=\"key\"><span class=\"sw%s\" style=\"border-color:%s\"></span>",
            dashed ? " dash" : "", colour);
    put_text(f, text);
    fputs("</span>", f);
}

/* ---- the page's parts ---- */

static double run_length(const stk_report_run *r) {
    double s = r->diagnosis.seconds;
    if (r->series && r->npoints) {
        double t = (double)r->series[r->npoints - 1].t_ns / 1e9;
        if (t > s) s = t;
    }
    return s;
}

static bool has_series(const stk_report *r) {
    for (size_t i = 0; i < r->nruns; i++)
        if (r->runs[i].series && r->runs[i].npoints) return true;
    return false;
}

static const char *verdict_class(const stk_diagnosis *d) {
    switch (d->verdict) {
    case STK_VERDICT_INPUT_BOUND: return "input";
    case STK_VERDICT_BALANCED: return "balanced";
    case STK_VERDICT_COMPUTE_BOUND: return "compute";
    default: return "alone";
    }
}

static void put_verdict(FILE *f, const stk_report *r) {
    const stk_report_run *last = &r->runs[r->nruns - 1];
    const stk_diagnosis *d = &last->diagnosis;
    fprintf(f, "<section id=\"verdict-box\" class=\"verdict %s\">\n", verdict_class(d));
    fputs("<div class=\"big\">Verdict: <b id=\"verdict\">", f);
    put_text(f, d->verdict_name);
    fputs("</b></div>\n<p>", f);
    if (last->step_seconds > 0)
        fprintf(f, "With a training step of %.2f ms, the consumer waited ",
                1e3 * last->step_seconds);
    else
        fputs("The loader alone, with nothing consuming its batches: the consumer waited ", f);
    fprintf(f, "<b id=\"stall\" data-value=\"%.17g\">%.1f%%</b> of the time for data", d->stall,
            100 * d->stall);
    if (last->step_seconds > 0)
        fputs(" (input-bound above 10%, compute-bound below 2%).", f);
    else
        fputs("; a training step (step= in stoker.profile, --step-ms in stoker doctor) says "
              "whether training would wait.",
              f);
    fputs("</p>\n<p class=\"next\"><b>Next:</b> <span id=\"next\">", f);
    put_text(f, d->next);
    fputs("</span></p>\n", f);
    if (r->hint && r->hint[0]) {
        fputs("<p class=\"next\"><b>Hint:</b> <span id=\"hint\">", f);
        put_text(f, r->hint);
        fputs("</span></p>\n", f);
    }
    fputs("</section>\n", f);
}

static void put_runs_table(FILE *f, const stk_report *r) {
    fputs("<table id=\"runs\"><tr><th>run</th><th>seconds</th><th>batches</th>"
          "<th>samples/s</th><th>GB/s</th><th>of the limit</th><th>waiting for data</th>"
          "<th>step</th></tr>\n",
          f);
    for (size_t i = 0; i < r->nruns; i++) {
        const stk_report_run *u = &r->runs[i];
        const stk_diagnosis *d = &u->diagnosis;
        fprintf(f, "<tr><td><span class=\"dot\" style=\"background:%s\"></span>",
                run_colour[i % 2]);
        put_text(f, u->name);
        fprintf(f, "</td><td>%.2f</td><td>", d->seconds);
        put_count(f, d->batches_per_s * d->seconds);
        fputs("</td><td>", f);
        put_count(f, d->samples_per_s);
        fprintf(f, "</td><td>%.3f</td><td>%.2f</td><td>%.1f%%</td><td>%s", d->bytes_per_s / 1e9,
                d->of_limit, 100 * d->stall, u->step_seconds > 0 ? "" : "none");
        if (u->step_seconds > 0) fprintf(f, "%.2f ms", 1e3 * u->step_seconds);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* A run's heading above its chart, when there are several. */
static void run_heading(FILE *f, const stk_report *r, size_t i) {
    if (r->nruns < 2) return;
    fprintf(f, "<h3><span class=\"dot\" style=\"background:%s\"></span>", run_colour[i % 2]);
    put_text(f, r->runs[i].name);
    fputs("</h3>\n", f);
}

/* One chart per run (the runs differ in length): the rate of batch data in
 * each stretch, and the limit.  Where the limit is far above the rates, the
 * scale is logarithmic, so that both are seen. */
static void put_throughput(FILE *f, const stk_report *r) {
    double limit = r->runs[0].diagnosis.limit_bytes_per_s;
    double x0[2 * BINS], x1[2 * BINS], v[2 * BINS];
    for (size_t i = 0; i < r->nruns; i++) {
        const stk_report_run *u = &r->runs[i];
        size_t n = stretches(u, measure_bytes, x0, x1, v);
        if (!n) continue;
        double peak = 0, low = INFINITY;
        for (size_t k = 0; k < n; k++) {
            if (v[k] > peak) peak = v[k];
            if (v[k] > 0 && v[k] < low) low = v[k];
        }
        bool log = limit > 0 && peak > 0 && peak * 4 < limit;
        char id[32];
        snprintf(id, sizeof id, "throughput-%zu", i);
        run_heading(f, r, i);
        chart c;
        chart_open(&c, f, id, "batch data delivered over the run, against the limit",
                   run_length(u), (peak > limit ? peak : limit) * 1.12, Y_RATE,
                   log ? low * 0.8 : 0);
        if (limit > 0) {
            char label[160];
            snprintf(label, sizeof label, "limit: %.2f GB/s (%s)", limit / 1e9,
                     r->limit_what ? r->limit_what : "measured");
            chart_level(&c, limit, LIMIT_COLOUR, label, false);
        }
        chart_steps(&c, x0, x1, v, n, run_colour[i % 2], u->name);
        chart_close(&c);
        fputs("<div class=\"legend\">", f);
        legend_key(f, run_colour[i % 2], false, "batch data delivered");
        if (limit > 0) legend_key(f, LIMIT_COLOUR, true, "the measured limit");
        fprintf(f, "</div>\n<p class=\"caption\">Mean %.3f GB/s, %.2f of the limit",
                u->diagnosis.bytes_per_s / 1e9, u->diagnosis.of_limit);
        if (log) fputs(" (a logarithmic scale: the limit is far above the run)", f);
        fputs(".</p>\n", f);
    }
}

/* Each run's stages as one bar of the workers' time, and a table of the
 * time per batch. */
static void put_stages(FILE *f, const stk_report *r) {
    double bh = 34, gap = 18, top = 8, h = top + (double)r->nruns * (bh + gap) + 4;
    fprintf(f, "<svg id=\"stages\" class=\"chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">"
               "<title>the workers' time by stage</title>\n",
            CW, h);
    for (size_t i = 0; i < r->nruns; i++) {
        const stk_diagnosis *d = &r->runs[i].diagnosis;
        double y = top + (double)i * (bh + gap), x = 170, w = CW - 170 - MR;
        fprintf(f, "<text class=\"bl\" x=\"160\" y=\"%.1f\">", y + bh / 2 + 5);
        put_text(f, r->runs[i].name);
        fputs("</text>\n", f);
        for (int s = 0; s < ST_N; s++) {
            double sw = stage_share(d, s) * w;
            if (sw <= 0) continue;
            fprintf(f, "<rect class=\"stage\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                       "height=\"%.1f\" fill=\"%s\"><title>%s %.1f%%</title></rect>\n",
                    x, y, sw, bh, stage_colour[s], stage_name(s, r->backend),
                    100 * stage_share(d, s));
            if (sw > 70)
                fprintf(f, "<text class=\"sl\" x=\"%.1f\" y=\"%.1f\">%s %.0f%%</text>\n",
                        x + sw / 2, y + bh / 2 + 5, stage_name(s, r->backend),
                        100 * stage_share(d, s));
            x += sw;
        }
    }
    fputs("</svg>\n<div class=\"legend\">", f);
    for (int s = 0; s < ST_N; s++) {
        fprintf(f, "<span class=\"key\"><span class=\"box\" style=\"background:%s\"></span>%s"
                   "</span>",
                stage_colour[s], stage_name(s, r->backend));
    }
    fputs("</div>\n<table id=\"stage-table\"><tr><th>stage</th><th>what it does</th>", f);
    for (size_t i = 0; i < r->nruns; i++) {
        fputs("<th>", f);
        put_text(f, r->runs[i].name);
        fputs(": ms per batch</th>", f);
    }
    fputs("</tr>\n", f);
    for (int s = 0; s < ST_N; s++) {
        fprintf(f, "<tr><td><span class=\"box\" style=\"background:%s\"></span>%s</td><td>%s</td>",
                stage_colour[s], stage_name(s, r->backend), stage_what(s, r->backend));
        for (size_t i = 0; i < r->nruns; i++) {
            const stk_report_run *u = &r->runs[i];
            const stk_diagnosis *d = &u->diagnosis;
            /* The workers' time (threads x run) over the batches. */
            if (d->batches_per_s > 0)
                fprintf(f, "<td>%.3f <small>(%.1f%%)</small></td>",
                        1e3 * stage_share(d, s) * (double)(u->threads ? u->threads : 1) /
                            d->batches_per_s,
                        100 * stage_share(d, s));
            else
                fputs("<td>-</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n<p class=\"caption\">A batch's time in each stage is summed over the "
          "worker threads (",
          f);
    for (size_t i = 0; i < r->nruns; i++)
        fprintf(f, "%s%u", i ? ", " : "", r->runs[i].threads);
    fputs("): the shares are of the workers' time, threads &times; the run's length.</p>\n", f);
}

static void put_ring(FILE *f, const stk_report *r) {
    double x0[2 * BINS], x1[2 * BINS], v[2 * BINS];
    for (size_t i = 0; i < r->nruns; i++) {
        const stk_report_run *u = &r->runs[i];
        size_t n = stretches(u, measure_fill, x0, x1, v);
        if (!n) continue;
        char id[32], name[160];
        snprintf(id, sizeof id, "ring-%zu", i);
        snprintf(name, sizeof name, "%s: batches ready, of %u buffers", u->name, u->ring_slots);
        run_heading(f, r, i);
        chart c;
        chart_open(&c, f, id, name, run_length(u), 1, Y_PERCENT, 0);
        chart_steps(&c, x0, x1, v, n, run_colour[i % 2], name);
        chart_close(&c);
    }
    fputs("<p class=\"caption\">The share of the ring's batch buffers holding a ready batch "
          "when the consumer called next(): near 100% the loader runs ahead of the consumer; "
          "near 0 the consumer finds nothing ready and waits.</p>\n",
          f);
}

static void put_waits(FILE *f, const stk_report *r) {
    bool any = false;
    double x0[2 * BINS], x1[2 * BINS], v[2 * BINS], xmax = 0, ymax = 0.12;
    for (size_t i = 0; i < r->nruns; i++) {
        const stk_report_run *u = &r->runs[i];
        if (u->step_seconds <= 0) continue;
        any = true;
        if (run_length(u) > xmax) xmax = run_length(u);
        size_t n = stretches(u, measure_stall, x0, x1, v);
        for (size_t k = 0; k < n; k++)
            if (v[k] > ymax) ymax = v[k];
    }
    if (!any) {
        fputs("<p class=\"caption\" id=\"no-step\">No training step was profiled: give "
              "stoker.profile a step= or stoker doctor a --step-ms to see whether a step would "
              "wait for its batches.</p>\n",
              f);
        return;
    }
    chart c;
    chart_open(&c, f, "waits", "the consumer's time waiting for data, over the run", xmax,
               ymax * 1.05, Y_PERCENT, 0);
    chart_level(&c, 0.10, "#888", "input-bound above 10%", false);
    chart_level(&c, 0.02, "#888", "compute-bound below 2%", true);
    for (size_t i = 0; i < r->nruns; i++) {
        const stk_report_run *u = &r->runs[i];
        if (u->step_seconds <= 0) continue;
        size_t n = stretches(u, measure_stall, x0, x1, v);
        chart_steps(&c, x0, x1, v, n, run_colour[i % 2], u->name);
    }
    chart_close(&c);
    fputs("<p class=\"caption\">", f);
    for (size_t i = 0; i < r->nruns; i++) {
        const stk_report_run *u = &r->runs[i];
        const stk_diagnosis *d = &u->diagnosis;
        if (u->step_seconds <= 0 || d->batches_per_s <= 0) continue;
        /* The stall over the batches: the mean wait of one step for its batch. */
        put_text(f, u->name);
        fprintf(f, ": each step of %.2f ms waited %.3f ms for its batch on average "
                   "(%.1f%% of the run). ",
                1e3 * u->step_seconds, 1e3 * d->stall / d->batches_per_s, 100 * d->stall);
    }
    fputs("The line is the share of each stretch of the run that the consumer spent in "
          "next().</p>\n",
          f);
}

static const char style[] =
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;"
    "max-width:980px;margin:24px auto;padding:0 16px;background:#fff}"
    "h1{font-size:22px;margin:0 0 4px}h1 small{font-weight:normal;color:#555;font-size:16px}"
    "h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}"
    ".meta{color:#555;margin:0 0 14px}"
    ".verdict{border-left:6px solid #888;background:#f4f4f4;padding:10px 16px;margin:12px 0}"
    ".verdict.input{border-color:#c0392b;background:#fdecea}"
    ".verdict.balanced{border-color:#d68910;background:#fef5e7}"
    ".verdict.compute{border-color:#1e8449;background:#e9f7ef}"
    ".verdict .big{font-size:20px}.verdict p{margin:6px 0}"
    "table{border-collapse:collapse;margin:8px 0;font-size:14px}"
    "th,td{border-bottom:1px solid #e3e3e3;padding:4px 10px;text-align:right}"
    "th:first-child,td:first-child{text-align:left}"
    "#stage-table td:nth-child(2),#stage-table th:nth-child(2){text-align:left}"
    "h3{font-size:14px;font-weight:600;margin:14px 0 0;color:#333}"
    "th{background:#fafafa;font-weight:600}"
    "svg.chart{width:100%;height:auto;display:block}"
    "svg text{font:12px system-ui,sans-serif;fill:#444}"
    "svg .yl{text-anchor:end}svg .xl,svg .xn{text-anchor:middle}svg .ll{text-anchor:end;"
    "font-weight:600}svg .ll.left{text-anchor:start}svg .bl{text-anchor:end;font-size:13px}"
    "svg .sl{text-anchor:middle;fill:#fff;font-weight:600}"
    "svg .grid{stroke:#eee}svg .tick,svg .axis{stroke:#999}"
    "svg .series{fill:none;stroke-width:2.2;stroke-linejoin:round}"
    "svg .level{stroke-width:1.6;stroke-dasharray:7 5}"
    ".legend{font-size:13px;color:#444;margin:2px 0 4px}.key{margin-right:18px;"
    "white-space:nowrap}"
    ".sw{display:inline-block;width:22px;border-top:3px solid;vertical-align:middle;"
    "margin-right:6px}.sw.dash{border-top-style:dashed}"
    ".box,.dot{display:inline-block;width:11px;height:11px;margin-right:6px;"
    "vertical-align:-1px}.dot{border-radius:50%}"
    ".caption{color:#555;font-size:13px;margin:4px 0}"
    "footer{color:#888;font-size:12px;margin-top:30px}";

static void put_page(FILE *f, const stk_report *r) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>stoker "
          "profile",
          f);
    if (r->title) {
        fputs(": ", f);
        put_text(f, r->title);
    }
    fprintf(f, "</title>\n<style>%s</style>\n</head><body>\n<h1>stoker profile", style);
    if (r->title) {
        fputs(" <small>", f);
        put_text(f, r->title);
        fputs("</small>", f);
    }
    const stk_report_run *first = &r->runs[0];
    fprintf(f, "</h1>\n<p class=\"meta\">%s backend, %u worker threads, %u batch buffers; "
               "limit ",
            r->backend ? r->backend : "?", first->threads, first->ring_slots);
    put_text(f, r->limit_what ? r->limit_what : "measured");
    fprintf(f, ": %.2f GB/s", first->diagnosis.limit_bytes_per_s / 1e9);
    if (r->resident >= 0)
        fprintf(f, "; %.0f%% of the data in the page cache", 100 * r->resident);
    fputs("</p>\n", f);
    put_verdict(f, r);
    put_runs_table(f, r);
    fputs("<h2>Throughput against the limit</h2>\n", f);
    if (has_series(r)) put_throughput(f, r);
    else fputs("<p class=\"caption\">No series was recorded for these runs.</p>\n", f);
    fputs("<h2>Time per batch in each stage</h2>\n", f);
    put_stages(f, r);
    fputs("<h2>The ring's fill</h2>\n", f);
    if (has_series(r)) put_ring(f, r);
    else fputs("<p class=\"caption\">No series was recorded for these runs.</p>\n", f);
    fputs("<h2>The training step's waits</h2>\n", f);
    put_waits(f, r);
    fprintf(f, "<footer>written by stoker %s</footer>\n</body></html>\n", stk_version());
}

int stk_report_write_html(const stk_report *r, const char *path, stk_error *err) {
    if (!r || !path || !r->runs || !r->nruns)
        return stk__err(err, -EINVAL, "stk_report_write_html: no report or no run in it");
    size_t plen = strlen(path);
    char *tmp = stk__malloc(plen + 16);
    if (!tmp) return stk__err(err, -ENOMEM, "out of memory writing the report");
    snprintf(tmp, plen + 16, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = -errno;
        stk__free(tmp);
        return stk__err(err, e, "%s: cannot write the report: %s", path, stk_strerror(e));
    }
    put_page(f, r);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    int rc = 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        rc = stk__err(err, -e, "%s: cannot write the report: %s", path, stk_strerror(-e));
    }
    stk__free(tmp);
    return rc;
}

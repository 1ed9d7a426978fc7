/*
 * The helpers every command shares (declared in cli.h): usage errors, the
 * one place where option values become numbers (so that every numeric
 * option refuses what it cannot hold instead of truncating it), human
 * sizes, the progress bar, opening a dataset with --root, and the clock.
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char prog[] = "stoker";
const char *cli_cache_dir;
uint64_t cli_cache_budget = STK_CACHE_BUDGET_AUTO;

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void die_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", prog, cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s %s --help'.\n", prog, cmd);
    va_end(ap);
    exit(EXIT_ERROR);
}

int fail(const stk_error *e) {
    fprintf(stderr, "%s: error: %s\n", prog, e->message);
    return EXIT_ERROR;
}

/* ---- option values ---- */

const char *opt_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) die_usage(cmd, "%s needs a value", argv[*i]);
    return argv[++*i];
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* 0, -EINVAL when `s` is not a whole decimal number, or -ERANGE when it is
 * one past 64 bits.  strtoull alone would take blanks, a sign (and negate a
 * '-' silently) and a value past the range (as ULLONG_MAX). */
static int parse_u64_code(const char *s, uint64_t *out) {
    if (!is_digit(s[0])) return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end) return -EINVAL;
    if (errno == ERANGE) return -ERANGE;
    *out = v;
    return 0;
}

bool parse_u64(const char *s, uint64_t *out) {
    return parse_u64_code(s, out) == 0;
}

/* A size: digits, an optional fraction, an optional K/M/G/T and then an
 * optional B (or iB after a unit).  The whole part is kept exact, so every
 * 64-bit value can be written; only the fraction goes through a double.
 * Returns 0, -EINVAL or -ERANGE as parse_u64_code. */
static int parse_size(const char *s, uint64_t *out) {
    const char *p = s;
    uint64_t whole = 0;
    bool past = false;
    if (!is_digit(*p)) return -EINVAL;
    for (; is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10) past = true;
        else whole = whole * 10 + d;
    }
    double frac = 0;
    if (*p == '.') {
        const char *f = p++;
        if (!is_digit(*p)) return -EINVAL;
        while (is_digit(*p)) p++;
        frac = strtod(f, NULL);
    }
    int shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: break;
    }
    if (shift) p++;
    if (shift && p[0] == 'i' && p[1] == 'B') p += 2;
    else if (*p == 'B') p++;
    if (*p) return -EINVAL;
    if (past || whole > UINT64_MAX >> shift) return -ERANGE;
    uint64_t v = whole << shift;
    uint64_t part = (uint64_t)(frac * (double)((uint64_t)1 << shift));
    if (part > UINT64_MAX - v) return -ERANGE;
    *out = v + part;
    return 0;
}

/* Dies for a value parsed (rc) from `text` that lies outside lo..hi, or
 * past 64 bits. */
static uint64_t in_range(int rc, uint64_t v, const char *cmd, const char *opt, const char *text,
                         uint64_t lo, uint64_t hi) {
    if (rc || v < lo || v > hi)
        die_usage(cmd, "%s: %s is not in %" PRIu64 "..%" PRIu64, opt, text, lo, hi);
    return v;
}

uint64_t opt_u64(const char *cmd, const char *opt, const char *text, uint64_t lo, uint64_t hi) {
    uint64_t v = 0;
    int rc = parse_u64_code(text, &v);
    if (rc == -EINVAL)
        die_usage(cmd, "%s: '%s' is not a whole number in %" PRIu64 "..%" PRIu64, opt, text, lo,
                  hi);
    return in_range(rc, v, cmd, opt, text, lo, hi);
}

uint64_t opt_size(const char *cmd, const char *opt, const char *text, uint64_t lo, uint64_t hi) {
    uint64_t v = 0;
    int rc = parse_size(text, &v);
    if (rc == -EINVAL)
        die_usage(cmd, "%s: '%s' is not a size (bytes, or a number with K, M, G or T)", opt,
                  text);
    return in_range(rc, v, cmd, opt, text, lo, hi);
}

/* ---- output ---- */

void human_bytes(double b, char *out, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(out, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

void shape_str(const int64_t *shape, int ndim, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "(");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(out + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap) snprintf(out + k, cap - k, ")");
}

void progress_init(progress *p, const char *what, bool quiet) {
    p->on = !quiet && isatty(2);
    p->what = what;
    p->start = p->last = now_s();
}

void progress_show(progress *p, uint64_t done, uint64_t total, const char *unit_is_bytes) {
    if (!p->on) return;
    double t = now_s();
    if (t - p->last < 0.1 && done < total) return;
    p->last = t;
    double frac = total ? (double)done / (double)total : 1.0;
    int width = 30, fill = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    double el = t - p->start;
    char rate[48] = "";
    if (el > 0 && unit_is_bytes) {
        char hb[32];
        human_bytes((double)done / el, hb, sizeof hb);
        snprintf(rate, sizeof rate, "%s/s", hb);
    } else if (el > 0) {
        snprintf(rate, sizeof rate, "%.0f/s", (double)done / el);
    }
    fprintf(stderr, "\r%-8s [%s] %5.1f%% %s   ", p->what, bar, frac * 100, rate);
    fflush(stderr);
}

void progress_end(progress *p) {
    if (p->on) fprintf(stderr, "\r%*s\r", 72, "");
}

/* ---- datasets ---- */

int open_path(const char *path, const char *root, stk_dataset **ds, stk_error *err) {
    stk_open_options oo;
    stk_open_options_init(&oo);
    oo.root = root;
    oo.cache_dir = cli_cache_dir;
    oo.cache_budget = cli_cache_budget;
    return stk_dataset_open_with(path, &oo, ds, err);
}

/* ---- the Python package ---- */

/* The Python that has the stoker package: $STOKER_PYTHON; else the
 * interpreter beside this program (a virtual environment's bin/, where pip
 * put it); else the one the package was built for (STK_PYTHON, set by the
 * pip build); else python3 on the PATH. */
static const char *find_python(char *buf, size_t cap) {
    const char *py = getenv("STOKER_PYTHON");
    if (py && *py) return py;
    ssize_t n = readlink("/proc/self/exe", buf, cap - 16);
    if (n > 0) {
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        static const char *const names[] = {"python3", "python"};
        for (size_t i = 0; slash && i < 2; i++) {
            snprintf(slash + 1, cap - (size_t)(slash + 1 - buf), "%s", names[i]);
            if (access(buf, X_OK) == 0) return buf;
        }
    }
#ifdef STK_PYTHON
    if (access(STK_PYTHON, X_OK) == 0) return STK_PYTHON;
#endif
    return "python3";
}

int run_python(const char *cmd, int argc, char **argv, const char *what) {
    static char pybuf[4096];
    const char *py = find_python(pybuf, sizeof pybuf);
    char **args = calloc((size_t)argc + 5, sizeof *args);
    if (!args) return EXIT_ERROR;
    int k = 0;
    args[k++] = (char *)py;
    args[k++] = "-m";
    args[k++] = "stoker";
    args[k++] = (char *)cmd;
    for (int i = 0; i < argc; i++) args[k++] = argv[i];
    args[k] = NULL;
    execvp(py, args);
    fprintf(stderr,
            "%s: error: %s runs the stoker Python package, but '%s' could not be started "
            "(%s); install it (pip install stoker) or set STOKER_PYTHON\n",
            prog, what, py, strerror(errno));
    free(args);
    return EXIT_ERROR;
}

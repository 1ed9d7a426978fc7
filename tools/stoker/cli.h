/*
 * What the commands of the `stoker` command line share: exit codes, usage
 * errors, the parsing of option values, the progress bar, human sizes,
 * opening a dataset with --root, and the clock.  Each command lives in a
 * file of its own (pack.c, merge.c, ...) and main.c dispatches to it.
 * Like the rest of the command line, this uses only the public API.
 */
#ifndef STOKER_CLI_H
#define STOKER_CLI_H

#include "stoker.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes: 0 success, 1 the data is bad (verify found damage), 2 usage or
 * operational error. */
enum { EXIT_DAMAGED = 1, EXIT_ERROR = 2 };

/* The program's name, as messages begin with it. */
extern const char prog[];
/* --cache-dir, every command's option (NULL: the library's default). */
extern const char *cli_cache_dir;
/* --cache-budget, every command's (STK_CACHE_BUDGET_AUTO: the library's
 * default, $STOKER_CACHE_BUDGET or the disk's free space). */
extern uint64_t cli_cache_budget;

/* ---- the commands: each takes the arguments after its name ---- */

int cmd_pack(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_index(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_read(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_push(int argc, char **argv);

/* Runs `python -m stoker CMD ARGS...` in place of this process (the parts
 * of the command line that need Python: Parquet, mixtures); returns only
 * when that Python cannot be started, after saying so (`what` names what
 * needed it). */
int run_python(const char *cmd, int argc, char **argv, const char *what);

/* ---- errors ---- */

/* Prints "stoker CMD: MESSAGE" and a pointer to the command's --help on
 * stderr, and exits with EXIT_ERROR. */
void die_usage(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Prints the library's message for `e` and returns EXIT_ERROR. */
int fail(const stk_error *e);

/* ---- option values ---- */

/* The value of the option at argv[*i], which is argv[*i + 1]; advances *i
 * past it.  An option at the end of the line dies with "OPT needs a value". */
const char *opt_value(const char *cmd, int argc, char **argv, int *i);

/* Parses a whole decimal number: digits only (no sign, no blanks, nothing
 * after them) that fit in 64 bits.  Returns false for anything else. */
bool parse_u64(const char *s, uint64_t *out);

/* The number in `text`, the value of option `opt` of command `cmd`, which
 * must lie in lo..hi; anything else (junk, a sign, a value past the range or
 * past 64 bits) dies with a usage error naming the option, the text and the
 * range. */
uint64_t opt_u64(const char *cmd, const char *opt, const char *text, uint64_t lo, uint64_t hi);

/* As opt_u64 for a size in bytes: a number, fractions allowed, with an
 * optional K, M, G or T (powers of 1024), optionally followed by B or iB
 * ("256M", "1.5GiB", "4096"). */
uint64_t opt_size(const char *cmd, const char *opt, const char *text, uint64_t lo, uint64_t hi);

/* ---- output ---- */

/* "1.50 GiB": `b` bytes in the largest unit that keeps the number >= 1. */
void human_bytes(double b, char *out, size_t cap);

/* "(3, 4)": a shape as numpy prints it. */
void shape_str(const int64_t *shape, int ndim, char *out, size_t cap);

/* A progress bar on stderr, drawn only when stderr is a terminal. */
typedef struct progress {
    bool on;
    const char *what;
    double start, last;
} progress;

void progress_init(progress *p, const char *what, bool quiet);
/* Redraws at most ten times a second; `unit_is_bytes` non-NULL shows the
 * rate in bytes per second, else in items per second. */
void progress_show(progress *p, uint64_t done, uint64_t total, const char *unit_is_bytes);
void progress_end(progress *p);

/* ---- datasets and time ---- */

/* Opens a dataset or an in-place index, whose files may lie under `root`
 * (NULL: the index's own directory; see stk_open_options). */
int open_path(const char *path, const char *root, stk_dataset **ds, stk_error *err);

/* The help line of --root, for commands that open a dataset. */
#define ROOT_HELP \
    "  --root DIR   an in-place index's files may lie under DIR (default: the\n" \
    "               index's own directory; only for an index you trust)\n"

/* Seconds on the monotonic clock. */
double now_s(void);

#endif

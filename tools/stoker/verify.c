/*
 * stoker verify: every checksum of a dataset (stk_dataset_verify), with
 * the exit code telling damage (1) from nothing to check (2).
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char verify_help[] =
    "Usage: stoker verify DATASET [--threads N] [-q]\n"
    "\n"
    "Reads every shard in full and checks every checksum: shard headers, record\n"
    "indexes, blocks of record data and every record.  Exits 0 when the dataset\n"
    "is intact; 1 when damage was found, in a record, a shard or the manifest\n"
    "(a manifest that does not parse is damage too; each is named); and 2 when\n"
    "there is nothing to check: no dataset at the path, a pack not finished or\n"
    "not merged, a shard missing, a file that cannot be read.\n"
    "\n"
    "  --threads N  shards checked at once (default: one per CPU)\n"
    "  -q, --quiet  print problems only\n"
    ROOT_HELP
    "\n"
    "Example:\n"
    "  stoker verify basins.stk\n";

static void on_problem(void *ctx, const stk_error *e) {
    (void)ctx;
    fprintf(stderr, "%s: damaged: %s\n", prog, e->message);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
    progress_show(ctx, done, total, "b");
}

/* The most threads --threads may ask for; the library would start any
 * number, and a slip of the finger should not start thousands. */
#define VERIFY_MAX_THREADS 256

static void print_intact(const char *path, const stk_verify_report *rep, double el,
                         bool in_place) {
    char hb[32], hr[32];
    human_bytes((double)rep->bytes_checked, hb, sizeof hb);
    human_bytes(el > 0 ? (double)rep->bytes_checked / el : 0, hr, sizeof hr);
    if (in_place)
        printf("%s: every indexed file is unchanged and readable: %" PRIu64 " records, %s "
               "read in %.2f s (%s/s); an in-place index has no checksums (`stoker pack` "
               "the data to have them)\n",
               path, rep->records_checked, hb, el, hr);
    else
        printf("%s is intact: %" PRIu64 " records, %s checked in %.2f s (%s/s)\n", path,
               rep->records_checked, hb, el, hr);
}

/* Sets *path, *root, *quiet and vo->threads from the command line; returns
 * false when it asked for --help. */
static bool verify_args(int argc, char **argv, const char **path, const char **root, bool *quiet,
                        stk_verify_options *vo) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(verify_help, stdout);
            return false;
        }
        if (!strcmp(a, "--root")) *root = opt_value("verify", argc, argv, &i);
        else if (!strcmp(a, "--threads"))
            vo->threads = (int)opt_u64("verify", a, opt_value("verify", argc, argv, &i), 0,
                                       VERIFY_MAX_THREADS);
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) *quiet = true;
        else if (a[0] == '-') die_usage("verify", "unknown option '%s'", a);
        else *path = a;
    }
    return true;
}

int cmd_verify(int argc, char **argv) {
    const char *path = NULL, *root = NULL;
    bool quiet = false;
    stk_verify_options vo;
    stk_verify_options_init(&vo);
    if (!verify_args(argc, argv, &path, &root, &quiet, &vo)) return 0;
    if (!path) die_usage("verify", "DATASET is required");
    stk_error err = {0};
    stk_dataset *ds = NULL;
    double t0 = now_s();
    int rc = open_path(path, root, &ds, &err);
    if (rc) {
        fprintf(stderr, "%s: error: %s\n", prog, err.message);
        /* Damage found while opening is still damage; an unfinished or
         * unmerged pack is not damage, it just cannot be opened yet, and a
         * path that is no dataset at all (a URL stoker does not read, a
         * Parquet file) is a mistake in the command, not damage. */
        return rc == -ENOENT || rc == -EACCES || rc == -ENOMEM || rc == STK_EINCOMPLETE ||
                       rc == -EINVAL
                   ? EXIT_ERROR
                   : EXIT_DAMAGED;
    }
    bool in_place = stk_dataset_source(ds) != NULL;
    progress pb;
    progress_init(&pb, "verify", quiet);
    vo.on_problem = on_problem;
    vo.on_progress = on_progress;
    vo.ctx = &pb;
    stk_verify_report rep;
    rc = stk_dataset_verify(ds, &vo, &rep, &err);
    progress_end(&pb);
    double el = now_s() - t0;
    stk_dataset_close(ds);
    if (rc && rep.problems == 0) return fail(&err);
    if (rc) {
        fprintf(stderr, "%s: %s is damaged: %" PRIu64 " problem%s; the first: %s\n", prog, path,
                rep.problems, rep.problems == 1 ? "" : "s", err.message);
        return EXIT_DAMAGED;
    }
    if (!quiet) print_intact(path, &rep, el, in_place);
    return 0;
}

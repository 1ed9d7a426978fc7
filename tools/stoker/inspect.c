/*
 * stoker inspect: a dataset's (or an in-place index's) schema, shards and
 * counts, as the library validated them on opening; with --stats the
 * statistics its writer gathered per column of each numeric field.
 */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char inspect_help[] =
    "Usage: stoker inspect DATASET [--all] [--stats]\n"
    "\n"
    "Shows a dataset's schema, its shards, and its record and byte counts.\n"
    "Opening validates every shard header and index (not the record bytes;\n"
    "see `stoker verify`).\n"
    "\n"
    "  --all        list every shard (default: the first 10)\n"
    "  --stats      print the statistics gathered when it was packed: count, NaN\n"
    "               count, mean, std (ddof 0), min and max of each column of each\n"
    "               numeric field, NaN left out (no record is read)\n"
    ROOT_HELP
    "\n"
    "Example:\n"
    "  stoker inspect basins.stk\n"
    "  stoker inspect basins.stk --stats\n";

static void field_shape(const stk_field *f, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < f->ndim && k < cap; d++) {
        if (f->shape[d] == STK_RAGGED) k += (size_t)snprintf(out + k, cap - k, d ? ", *" : "*");
        else k += (size_t)snprintf(out + k, cap - k, d ? ", %lld" : "%lld", (long long)f->shape[d]);
    }
    if (k < cap) snprintf(out + k, cap - k, "]");
}

static void print_fields(stk_dataset *ds) {
    printf("fields   %zu\n", stk_dataset_num_fields(ds));
    printf("  %-20s %-6s %-20s %s\n", "name", "dtype", "shape", "codec");
    for (size_t i = 0; i < stk_dataset_num_fields(ds); i++) {
        const stk_field *f = stk_dataset_field(ds, i);
        char sh[128];
        field_shape(f, sh, sizeof sh);
        printf("  %-20s %-6s %-20s %s%s%s\n", f->name, stk_dtype_name(f->dtype), sh,
               f->codec == STK_CODEC_ZSTD ? "zstd" : "none", f->type ? "   type " : "",
               f->type ? f->type : "");
    }
}

/* The first ten shards (or files), or all of them. */
static void print_shards(stk_dataset *ds, bool in_place, bool all) {
    size_t ns = stk_dataset_num_shards(ds);
    if (!ns) return;
    printf("  %-36s %12s %10s %12s\n", in_place ? "file" : "shard", "first", "records", "bytes");
    size_t show = all ? ns : (ns < 10 ? ns : 10);
    for (size_t i = 0; i < show; i++) {
        stk_shard_info si;
        stk_dataset_shard(ds, i, &si);
        const char *base = strrchr(si.file, '/');
        printf("  %-36s %12" PRIu64 " %10" PRIu64 " %12" PRIu64 "\n", base ? base + 1 : si.file,
               si.first_record, si.records, si.bytes);
    }
    if (show < ns) printf("  ... %zu more (--all lists them)\n", ns - show);
}

static void print_summary(stk_dataset *ds, const char *path) {
    size_t ns = stk_dataset_num_shards(ds);
    uint64_t bytes = 0, data = 0;
    for (size_t i = 0; i < ns; i++) {
        stk_shard_info si;
        stk_dataset_shard(ds, i, &si);
        bytes += si.bytes;
        data += si.data_bytes;
    }
    char hb[32], hd[32];
    human_bytes((double)bytes, hb, sizeof hb);
    human_bytes((double)data, hd, sizeof hd);
    const char *src = stk_dataset_source(ds);
    if (src) {
        printf("index    %s (an in-place index of %s files, read where they lie; no "
               "checksums)\n", path, src);
    } else {
        printf("dataset  %s\n", stk_dataset_path(ds));
        uint32_t fv = stk_dataset_format_version(ds);
        printf("format   stoker version %u%s\n", fv,
               fv == 2 ? " (records located by arithmetic)" : "");
    }
    stk_remote_stats rs;
    if (stk_dataset_remote_stats(ds, &rs) == 0) {
        char hf[32], hc[32];
        human_bytes((double)rs.bytes_fetched, hf, sizeof hf);
        human_bytes((double)rs.bytes_cached, hc, sizeof hc);
        printf("remote   opening fetched %s in %" PRIu64 " requests; the cache held %s "
               "(the rest comes as it is read)\n", hf, rs.requests, hc);
    }
    printf("records  %" PRIu64 "\n", stk_dataset_num_records(ds));
    printf(src ? "files    %zu, %s on disk (%s of record data)\n"
               : "shards   %zu, %s on disk (%s of record data)\n", ns, hb, hd);
}

/* Column k of a row of shape f->shape[1..ndim) as "[i, j]"; "-" for a
 * field of one value a row. */
static void column_name(const stk_field *f, size_t k, char *out, size_t cap) {
    if (f->ndim <= 1) {
        snprintf(out, cap, "-");
        return;
    }
    size_t idx[STK_MAX_DIMS];
    for (int d = f->ndim - 1; d >= 1; d--) {
        idx[d] = k % (size_t)f->shape[d];
        k /= (size_t)f->shape[d];
    }
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 1; d < f->ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, d > 1 ? ", %zu" : "%zu", idx[d]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

/* A table per numeric field: a line per column. */
static void print_stats(stk_dataset *ds) {
    size_t nf = stk_dataset_num_fields(ds), with = 0;
    for (size_t i = 0; i < nf; i++) {
        const stk_column_stats *c;
        size_t n;
        with += stk_dataset_field_stats(ds, i, &c, &n) == 0;
    }
    if (!with) {
        printf("stats    none recorded (%s)\n",
               stk_dataset_source(ds) ? "an in-place index: its files were not packed"
                                      : "packed by a stoker before statistics, or resumed "
                                        "without them");
        return;
    }
    printf("stats    per column, NaN left out, gathered when packed\n");
    printf("  %-20s %-10s %12s %10s %14s %14s %14s %14s\n", "field", "column", "count", "nan",
           "mean", "std", "min", "max");
    for (size_t i = 0; i < nf; i++) {
        const stk_field *f = stk_dataset_field(ds, i);
        const stk_column_stats *c;
        size_t n;
        if (stk_dataset_field_stats(ds, i, &c, &n) != 0) {
            printf("  %-20s %s\n", f->name,
                   f->dtype == STK_BYTES ? "(bytes: no statistics)"
                                         : "(no statistics: rows wider than "
                                           "STK_STATS_MAX_COLUMNS elements)");
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            char col[64];
            column_name(f, k, col, sizeof col);
            double sd = c[k].count ? sqrt(c[k].m2 / (double)c[k].count) : NAN;
            printf("  %-20s %-10s %12" PRIu64 " %10" PRIu64 " %14.7g %14.7g %14.7g %14.7g\n",
                   k ? "" : f->name, col, c[k].count, c[k].nan_count, c[k].mean, sd, c[k].min,
                   c[k].max);
        }
    }
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *root = NULL;
    bool all = false, stats = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(inspect_help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--all")) all = true;
        else if (!strcmp(argv[i], "--stats")) stats = true;
        else if (!strcmp(argv[i], "--root")) root = opt_value("inspect", argc, argv, &i);
        else if (argv[i][0] == '-') die_usage("inspect", "unknown option '%s'", argv[i]);
        else path = argv[i];
    }
    if (!path) die_usage("inspect", "DATASET is required");
    stk_error err = {0};
    stk_dataset *ds = NULL;
    if (open_path(path, root, &ds, &err)) return fail(&err);
    print_summary(ds, path);
    print_fields(ds);
    printf("attrs    %s\n", stk_dataset_attrs(ds));
    print_shards(ds, stk_dataset_source(ds) != NULL, all);
    if (stats) print_stats(ds);
    stk_dataset_close(ds);
    return 0;
}

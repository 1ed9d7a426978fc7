/*
 * stoker merge: joins the parts that `stoker pack --part I/N` wrote into
 * one dataset (the work is stk_merge's; this reports the result).
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char merge_help[] =
    "Usage: stoker merge DATASET\n"
    "\n"
    "Joins the parts written by `stoker pack --part I/N` into DATASET into one\n"
    "dataset.  Every part 0..N-1 must have finished.  Records keep the order\n"
    "of the parts.\n"
    "\n"
    "Example:\n"
    "  stoker pack --from npy data/ -o ds --part 0/2\n"
    "  stoker pack --from npy data/ -o ds --part 1/2\n"
    "  stoker merge ds\n";

int cmd_merge(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(merge_help, stdout);
            return 0;
        }
        if (argv[i][0] == '-') die_usage("merge", "unknown option '%s'", argv[i]);
        if (path) die_usage("merge", "one DATASET only");
        path = argv[i];
    }
    if (!path) die_usage("merge", "DATASET is required");
    stk_error err = {0};
    if (stk_merge(path, &err)) return fail(&err);
    stk_dataset *ds = NULL;
    if (stk_dataset_open(path, &ds, &err)) return fail(&err);
    printf("merged %s: %" PRIu64 " records in %zu shards\n", path, stk_dataset_num_records(ds),
           stk_dataset_num_shards(ds));
    stk_dataset_close(ds);
    return 0;
}

/*
 * stoker push: a packed dataset uploaded to an object store, shards first
 * and the manifest last.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char push_help[] =
    "Usage: stoker push DATASET s3://bucket/prefix [--replace] [--quiet]\n"
    "\n"
    "Uploads a local dataset so that loaders can read it from the store. The\n"
    "dataset is checked first (every checksum); then its shards are sent, many\n"
    "at once (multipart uploads for shards larger than $STOKER_REMOTE_PART_MB\n"
    "MiB, at least 5), and its manifest last: a reader never finds a manifest\n"
    "whose shards are not all there. Credentials, region and endpoint are the\n"
    "AWS tools' (AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL).\n"
    "\n"
    "  --replace   overwrite a dataset already at the prefix (its open readers\n"
    "              then fail with a changed-object error; a new prefix per\n"
    "              version is the safer way to publish)\n"
    "  --quiet     no progress bar\n"
    "\n"
    "Example:\n"
    "  stoker push basins.stk s3://my-bucket/basins/v3 && stoker inspect "
    "s3://my-bucket/basins/v3\n";

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
    progress_show(ctx, done, total, "B");
}

int cmd_push(int argc, char **argv) {
    const char *dir = NULL, *url = NULL;
    bool replace = false, quiet = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(push_help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--replace")) replace = true;
        else if (!strcmp(argv[i], "--quiet")) quiet = true;
        else if (argv[i][0] == '-') die_usage("push", "unknown option '%s'", argv[i]);
        else if (!dir) dir = argv[i];
        else if (!url) url = argv[i];
        else die_usage("push", "unexpected argument '%s'", argv[i]);
    }
    if (!dir || !url) die_usage("push", "a dataset and an s3:// URL are required");
    progress bar;
    progress_init(&bar, "push", quiet);
    stk_error err = {0};
    int rc = stk_dataset_push(dir, url, replace, on_progress, &bar, &err);
    progress_end(&bar);
    if (rc) return fail(&err);
    if (!quiet) printf("%s: pushed to %s\n", dir, url);
    return 0;
}

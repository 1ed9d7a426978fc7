/*
 * stoker cache: the local cache of remote datasets: what it holds (show),
 * fetching a dataset into it ahead of a run (warm), and removing datasets
 * from it (clear).
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char cache_help[] =
    "Usage: stoker cache show [--json]\n"
    "       stoker cache warm URL\n"
    "       stoker cache clear [URL]\n"
    "\n"
    "Remote datasets (s3://bucket/prefix, https://host/path) are read through a\n"
    "local cache: one directory per dataset version, holding the shards fetched\n"
    "and checked so far, shared by every process on the machine.\n"
    "\n"
    "  show         the datasets in the cache: origin, shards held, disk space\n"
    "  warm URL     fetch the dataset into the cache now, ahead of a run\n"
    "  clear [URL]  remove the dataset fetched from URL (every dataset without\n"
    "               one); a dataset another process is fetching is left alone\n"
    "\n"
    "  --cache-dir DIR  the cache (default: $STOKER_CACHE_DIR, else\n"
    "                   $XDG_CACHE_HOME/stoker, else ~/.cache/stoker)\n"
    "  --json           show: one JSON array\n"
    "\n"
    "Example:\n"
    "  stoker cache warm s3://my-bucket/basins.stk && stoker cache show\n";

typedef struct show_ctx {
    bool json;
    int n;
} show_ctx;

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", (unsigned char)*s);
        else putchar(*s);
    }
    putchar('"');
}

static int show_one(void *arg, const stk_cache_entry *e) {
    show_ctx *c = arg;
    if (c->json) {
        printf("%s{\"key\": ", c->n ? ", " : "");
        json_string(e->key);
        printf(", \"origin\": ");
        json_string(e->origin);
        printf(", \"path\": ");
        json_string(e->path);
        printf(", \"bytes\": %" PRIu64 ", \"shards\": %u, \"shards_held\": %u}", e->bytes,
               e->shards, e->shards_held);
    } else {
        char hb[32];
        human_bytes((double)e->bytes, hb, sizeof hb);
        printf("%s  %u of %u shards, %s\n    %s\n", e->origin, e->shards_held, e->shards, hb,
               e->path);
    }
    c->n++;
    return 0;
}

static int cache_show(bool json) {
    show_ctx c = {json, 0};
    stk_error err = {0};
    if (json) printf("[");
    int rc = stk_cache_list(cli_cache_dir, show_one, &c, &err);
    if (json) printf("]\n");
    if (rc) return fail(&err);
    if (!json && c.n == 0) printf("the cache holds no dataset\n");
    return 0;
}

static int cache_warm(const char *url) {
    stk_dataset *ds = NULL;
    stk_error err = {0};
    if (open_path(url, NULL, &ds, &err)) return fail(&err);
    if (stk_dataset_fetch_all(ds, &err)) {
        stk_dataset_close(ds);
        return fail(&err);
    }
    stk_remote_stats rs;
    if (stk_dataset_remote_stats(ds, &rs) == 0) {
        char hf[32], hc[32];
        human_bytes((double)rs.bytes_fetched, hf, sizeof hf);
        human_bytes((double)rs.bytes_cached, hc, sizeof hc);
        printf("%s: %s fetched in %.2f s (%" PRIu64 " requests, %" PRIu64
               " retries), %s already in the cache\n",
               url, hf, rs.network_seconds, rs.requests, rs.retries, hc);
    } else {
        printf("%s: a local dataset; nothing to fetch\n", url);
    }
    stk_dataset_close(ds);
    return 0;
}

static int cache_clear(const char *url) {
    uint64_t bytes = 0;
    stk_error err = {0};
    if (stk_cache_clear(cli_cache_dir, url, &bytes, &err)) return fail(&err);
    char hb[32];
    human_bytes((double)bytes, hb, sizeof hb);
    printf("%s given back\n", hb);
    return 0;
}

int cmd_cache(int argc, char **argv) {
    const char *sub = NULL, *url = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(cache_help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-') die_usage("cache", "unknown option '%s'", argv[i]);
        else if (!sub) sub = argv[i];
        else if (!url) url = argv[i];
        else die_usage("cache", "unexpected argument '%s'", argv[i]);
    }
    if (!sub) die_usage("cache", "show, warm or clear is required");
    if (!strcmp(sub, "show")) {
        if (url) die_usage("cache", "show takes no URL");
        return cache_show(json);
    }
    if (!strcmp(sub, "warm")) {
        if (!url) die_usage("cache", "warm needs the URL of a dataset");
        return cache_warm(url);
    }
    if (!strcmp(sub, "clear")) return cache_clear(url);
    die_usage("cache", "unknown subcommand '%s' (show, warm or clear)", sub);
}

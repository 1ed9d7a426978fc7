/*
 * stoker cache: the local cache of remote datasets: what it holds (show),
 * fetching a dataset into it ahead of a run (warm), and removing datasets
 * from it (clear).
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char cache_help[] =
    "Usage: stoker cache show [--json]\n"
    "       stoker cache warm URL [--epoch E | --state FILE] [--ranks A[-B]] [ORDER]\n"
    "       stoker cache clear [URL]\n"
    "\n"
    "Remote datasets (s3://bucket/prefix, https://host/path) are read through a\n"
    "local cache: one directory per dataset version, holding the shards fetched\n"
    "and checked so far, shared by every process on the machine.\n"
    "\n"
    "  show         the datasets in the cache: origin, shards held, disk space\n"
    "  warm URL     fetch the dataset into the cache now, ahead of a run: all of\n"
    "               it, or with --epoch or --state what the ranks given read in\n"
    "               that epoch (a node's share, before its job starts)\n"
    "  clear [URL]  remove the dataset fetched from URL (every dataset without\n"
    "               one); a dataset another process is fetching is left alone\n"
    "\n"
    "  --cache-dir DIR  the cache (default: $STOKER_CACHE_DIR, else\n"
    "                   $XDG_CACHE_HOME/stoker, else ~/.cache/stoker)\n"
    "  --json           show: one JSON array\n"
    "\n"
    "warm, one epoch (the run's own order options, which the order depends on):\n"
    "  --epoch E            the epoch to fetch ahead\n"
    "  --state FILE         the rest of the epoch of a saved state (a Loader's\n"
    "                       state_dict() as JSON): a resumed run's reads\n"
    "  --ranks A[-B]        the ranks whose reads to fetch (default: 0 to W-1)\n"
    "  --world-size W       ranks in the job (default 1)\n"
    "  --shuffle MODE --seed N --batch N --window L --stride S --fields a,b,...\n"
    "  --block-bytes SIZE --block-group K --streams S\n"
    "                       as given to the run (defaults as stoker read's)\n"
    "\n"
    "Example:\n"
    "  stoker cache warm s3://my-bucket/basins.stk && stoker cache show\n"
    "  stoker cache warm s3://my-bucket/basins.stk --epoch 3 --world-size 16 --ranks 8-15\n";

/* What warm fetches: everything, or an epoch of some ranks' reads. */
typedef struct warm_args {
    bool epoch_given;
    const char *state;
    stk_loader_options o;
    uint32_t rank_lo, rank_hi;
    bool ranks_given;
    const char *fields[64];
} warm_args;

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

/* A state file (a Loader's state_dict() as JSON: one flat object of
 * integers) into *st.  Read by hand, not with a JSON library: a
 * fingerprint is a 64-bit unsigned integer, past what Jansson's integers
 * (long long) hold. */
static void read_state(const char *path, stk_loader_state *st) {
    FILE *f = fopen(path, "r");
    char text[4096];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    if (!f) die_usage("cache", "--state %s: cannot be read", path);
    text[n] = 0;
    const char *keys[] = {"seed", "epoch", "position", "fingerprint", "streams"};
    uint64_t v[5] = {0, 0, 0, 0, 1};
    for (int k = 0; k < 5; k++) {
        char quoted[32];
        snprintf(quoted, sizeof quoted, "\"%s\"", keys[k]);
        const char *at = strstr(text, quoted);
        if (!at && k == 4) continue; /* (a state from before streams: one) */
        if (at) {
            at += strlen(quoted);
            while (*at == ' ' || *at == '\t' || *at == '\n') at++;
        }
        if (!at || *at != ':')
            die_usage("cache", "--state %s: no '%s' (a Loader's state_dict() as JSON)", path,
                      keys[k]);
        at++;
        while (*at == ' ' || *at == '\t' || *at == '\n') at++;
        char num[32];
        size_t d = 0;
        while (d < sizeof num - 1 && at[d] >= '0' && at[d] <= '9') num[d] = at[d], d++;
        num[d] = 0;
        if (!d || !parse_u64(num, &v[k]))
            die_usage("cache", "--state %s: '%s' is not a non-negative integer", path, keys[k]);
    }
    *st = (stk_loader_state){v[0], v[1], v[2], v[3], v[4]};
}

/* Fetches what ranks rank_lo..rank_hi read in the epoch (or the rest of a
 * state's); returns the bytes the loaders asked for in *asked. */
static int warm_epoch(stk_dataset *ds, warm_args *w, uint64_t *asked, stk_error *err) {
    stk_loader_state st = {0};
    if (w->state) read_state(w->state, &st);
    if (w->state) w->o.seed = st.seed, w->o.epoch = st.epoch;
    w->o.threads = 1;
    w->o.prefetch = 2;
    *asked = 0;
    for (uint32_t r = w->rank_lo; r <= w->rank_hi; r++) {
        w->o.rank = r;
        stk_loader *ld = NULL;
        uint64_t bytes = 0;
        int rc = stk_loader_open(ds, &w->o, &ld, err);
        if (rc == 0 && w->state) rc = stk_loader_restore(ld, &st, err);
        if (rc == 0) rc = stk_loader_fetch_epoch(ld, &bytes, err);
        stk_loader_close(ld);
        if (rc) return rc;
        *asked += bytes;
    }
    return 0;
}

static int cache_warm(const char *url, warm_args *w) {
    stk_dataset *ds = NULL;
    stk_error err = {0};
    if (open_path(url, NULL, &ds, &err)) return fail(&err);
    uint64_t asked = 0;
    int rc = w->epoch_given || w->state ? warm_epoch(ds, w, &asked, &err)
                                        : stk_dataset_fetch_all(ds, &err);
    if (rc) {
        stk_dataset_close(ds);
        return fail(&err);
    }
    if (w->epoch_given || w->state) {
        char ha[32];
        human_bytes((double)asked, ha, sizeof ha);
        printf("epoch %" PRIu64 ", ranks %u-%u of %u: %s read\n", w->o.epoch, w->rank_lo,
               w->rank_hi, w->o.world_size, ha);
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

/* warm's order options; false when argv[*i] is none of them. */
static bool warm_option(warm_args *w, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    stk_loader_options *o = &w->o;
#define U64(lo, hi) opt_u64("cache", a, opt_value("cache", argc, argv, i), lo, hi)
    if (!strcmp(a, "--epoch")) o->epoch = U64(0, UINT64_MAX), w->epoch_given = true;
    else if (!strcmp(a, "--state")) w->state = opt_value("cache", argc, argv, i);
    else if (!strcmp(a, "--world-size")) o->world_size = (uint32_t)U64(1, UINT32_MAX);
    else if (!strcmp(a, "--seed")) o->seed = U64(0, UINT64_MAX);
    else if (!strcmp(a, "--batch")) o->batch_size = (uint32_t)U64(1, UINT32_MAX);
    else if (!strcmp(a, "--window")) o->window = U64(0, UINT64_MAX);
    else if (!strcmp(a, "--stride")) o->stride = U64(1, UINT64_MAX);
    else if (!strcmp(a, "--block-group")) o->block_group = (uint32_t)U64(1, UINT32_MAX);
    else if (!strcmp(a, "--streams")) o->streams = (uint32_t)U64(1, UINT32_MAX);
    else if (!strcmp(a, "--block-bytes"))
        o->block_bytes = opt_size("cache", a, opt_value("cache", argc, argv, i), 1, UINT64_MAX);
    else if (!strcmp(a, "--shuffle")) {
        const char *m = opt_value("cache", argc, argv, i);
        int v = stk_order_parse(m);
        if (v < 0) die_usage("cache", "--shuffle wants sequential, random or block, not '%s'", m);
        o->order = (stk_order)v;
    } else if (!strcmp(a, "--fields")) {
        char *list = strdup(opt_value("cache", argc, argv, i));
        if (!list) {
            perror("strdup");
            exit(EXIT_ERROR);
        }
        size_t n = 0;
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
            if (n == 64) die_usage("cache", "--fields: more than 64 names");
            w->fields[n++] = tok;
        }
        o->fields = w->fields;
        o->nfields = n;
    } else if (!strcmp(a, "--ranks")) {
        const char *m = opt_value("cache", argc, argv, i);
        char lo[32], *dash;
        snprintf(lo, sizeof lo, "%s", m);
        dash = strchr(lo, '-');
        if (dash) *dash = 0;
        w->rank_lo = (uint32_t)opt_u64("cache", a, lo, 0, UINT32_MAX - 1);
        w->rank_hi = dash ? (uint32_t)opt_u64("cache", a, dash + 1, w->rank_lo, UINT32_MAX - 1)
                          : w->rank_lo;
        w->ranks_given = true;
    } else return false;
#undef U64
    return true;
}

int cmd_cache(int argc, char **argv) {
    const char *sub = NULL, *url = NULL;
    bool json = false;
    warm_args w = {0};
    stk_loader_options_init(&w.o);
    int warm_opts = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(cache_help, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = true;
        else if (warm_option(&w, argc, argv, &i)) warm_opts++;
        else if (argv[i][0] == '-') die_usage("cache", "unknown option '%s'", argv[i]);
        else if (!sub) sub = argv[i];
        else if (!url) url = argv[i];
        else die_usage("cache", "unexpected argument '%s'", argv[i]);
    }
    if (!sub) die_usage("cache", "show, warm or clear is required");
    if (warm_opts && strcmp(sub, "warm"))
        die_usage("cache", "the epoch and order options are warm's");
    if (!strcmp(sub, "show")) {
        if (url) die_usage("cache", "show takes no URL");
        return cache_show(json);
    }
    if (!strcmp(sub, "warm")) {
        if (!url) die_usage("cache", "warm needs the URL of a dataset");
        if (warm_opts && !w.epoch_given && !w.state)
            die_usage("cache", "the order options choose an epoch's reads: give --epoch E "
                               "or --state FILE (without them, warm fetches everything)");
        if (w.epoch_given && w.state)
            die_usage("cache", "--epoch and --state: the state holds its epoch");
        if (!w.ranks_given) w.rank_hi = w.o.world_size - 1;
        if (w.rank_hi >= w.o.world_size)
            die_usage("cache", "--ranks %u-%u: not below --world-size %u", w.rank_lo,
                      w.rank_hi, w.o.world_size);
        return cache_warm(url, &w);
    }
    if (!strcmp(sub, "clear")) return cache_clear(url);
    die_usage("cache", "unknown subcommand '%s' (show, warm or clear)", sub);
}

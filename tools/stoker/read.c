/*
 * stoker read and stoker doctor: one set of options (doctor adds --step-ms)
 * and one run of the loader, taking each batch and giving it back the way a
 * training loop would.  read reports the throughput and the stall; doctor
 * leaves out the first batch as start-up and hands its figures to
 * doctor_report (doctor.c).
 */
#include "read.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char read_help[] =
    "Usage: stoker read DATASET|MIXTURE.json [options]\n"
    "\n"
    "Iterates epochs of batches the way a training loop would (taking each\n"
    "batch and giving it back at once) and reports samples/s, GB/s of batch\n"
    "data delivered, and the share of time spent waiting in next() (nearly all of\n"
    "it, as nothing consumes the batches: stoker doctor --step-ms says whether a\n"
    "training step of a given length would wait).\n"
    "\n"
    "  --batch B            samples per batch (default 32)\n"
    "  --window L           windows of L rows over the time fields (default: whole records)\n"
    "  --stride S           rows between window starts (default 1)\n"
    "  --valid-field F      field tested to keep a window (with --valid)\n"
    "  --valid mask|notnan  keep windows whose last row of F is nonzero / not NaN\n"
    "  --shuffle MODE       sequential, random or block (default block)\n"
    "  --block-group K      blocks opened together in block mode (default 16)\n"
    "  --block-bytes SIZE   bytes per block in block mode (default 4M)\n"
    "  --seed N, --epoch N  the order's seed and first epoch (default 0)\n"
    "  --epochs N           epochs to run (default 1)\n"
    "  --fields a,b,...     fields to load (default: all)\n"
    "  --rank R --world-size W   read one rank's share\n"
    "  --streams S          streams the order is made of (default: the world size,\n"
    "                       a part of the data per rank; 1: an order that does not\n"
    "                       depend on the world size)\n"
    "  --backend auto|uring|pool|mmap   I/O backend (default auto)\n"
    "  --direct             O_DIRECT reads\n"
    "  --warm-up auto|on|off  bring a dataset that is not in the page cache into it\n"
    "                       with large sequential reads while the first epoch runs\n"
    "                       (default auto: when it fits in memory)\n"
    "  --no-verify          skip the read-time checksum checks (on by default)\n"
    "  --threads N          worker threads (default: one per CPU)\n"
    "  --budget SIZE        memory budget (default 1G)\n"
    "  --prefetch N         batch buffers in the ring (default: from the budget)\n"
    "  --stats              print per-stage statistics\n"
    "  --max-batches N      stop each epoch after N batches\n"
    "  --json               print the figures as one JSON object\n"
    "  --trace FILE         write a Chrome trace of the run (opens in ui.perfetto.dev)\n"
    "  --root DIR           an in-place index's files may lie under DIR (default:\n"
    "                       the index's own directory; only for an index you trust)\n"
    "  --image F=SIZE[,OPT...]  decode image field F (JPEG, PNG, WebP) in the workers\n"
    "                       to SIZE or HxW pixels; OPTs: crop=random_resized (default),\n"
    "                       crop=center, crop=none, flip, chw\n"
    "  --audio F=N[,OPT...] decode audio field F (FLAC, MP3, Vorbis, Opus) to windows\n"
    "                       of N frames; OPTs: rate=R (resample), channels=C (default\n"
    "                       1: mono), random (a random window of each clip)\n"
    "\n"
    "MIXTURE.json describes several sources read as one stream (stoker.Mixture,\n"
    "run by the Python package): {\"sources\": [{\"path\": \"a.stk\", \"weight\": 2},\n"
    "{\"path\": \"b.stk\", \"window\": 64}], \"exhaust\": \"stop\", \"homogeneous\": false};\n"
    "it takes --batch, --shuffle, --seed, --epoch(s), --rank, --world-size, --streams,\n"
    "--threads, --budget, --prefetch, --backend, --no-verify, --max-batches, --json.\n"
    "\n"
    "Examples:\n"
    "  stoker read basins.stk --window 365 --batch 256 --shuffle random\n"
    "  stoker read photos.stk --batch 256 --image image=224,flip --shuffle random\n";

/* The most names --fields takes, and --image/--audio options. */
#define MAX_FIELDS 64
#define MAX_DECODES 8

/* One run of read or doctor, as its options set it. */
typedef struct read_run {
    bool doctor;
    const char *path, *root, *trace;
    const char *html; /* doctor: the report as a page */
    stk_loader_options o;
    uint64_t epochs, max_batches;
    bool max_given, stats, json;
    double step_ms; /* doctor: busy CPU time after each batch */
    const char *fields[MAX_FIELDS];
    stk_decode decodes[MAX_DECODES];
} read_run;

/* --image F=SIZE[,OPT...] and --audio F=N[,OPT...] (the string is kept:
 * the field's name points into it). */
static void parse_decode(read_run *r, const char *opt, char *v) {
    if (r->o.ndecode == MAX_DECODES) die_usage("read", "at most %d --image/--audio", MAX_DECODES);
    bool image = !strcmp(opt, "--image");
    stk_decode *d = &r->decodes[r->o.ndecode++];
    stk_decode_init(d, image ? STK_MEDIA_IMAGE : STK_MEDIA_AUDIO);
    char *eq = strchr(v, '=');
    if (!eq || eq == v) die_usage("read", "%s wants FIELD=%s, not '%s'", opt, image ? "SIZE" : "N", v);
    *eq = 0;
    d->field = v;
    char *save = NULL;
    char *tok = strtok_r(eq + 1, ",", &save);
    char *end;
    unsigned long long a = tok ? strtoull(tok, &end, 10) : 0;
    if (!tok || end == tok || (*end && !(image && *end == 'x')))
        die_usage("read", "%s %s: a size first, not '%s'", opt, v, tok ? tok : "");
    if (image) {
        d->height = d->width = (uint32_t)a;
        if (*end == 'x') d->width = (uint32_t)strtoull(end + 1, NULL, 10);
    } else {
        d->samples = a;
    }
    while ((tok = strtok_r(NULL, ",", &save))) {
        if (image && !strcmp(tok, "flip")) d->flip = 1;
        else if (image && !strcmp(tok, "chw")) d->chw = 1;
        else if (image && !strcmp(tok, "crop=none")) d->crop = STK_CROP_NONE;
        else if (image && !strcmp(tok, "crop=center")) d->crop = STK_CROP_CENTER;
        else if (image && !strcmp(tok, "crop=random_resized")) d->crop = STK_CROP_RANDOM_RESIZED;
        else if (!image && !strcmp(tok, "random")) d->random_offset = 1;
        else if (!image && !strncmp(tok, "rate=", 5))
            d->sample_rate = (uint32_t)opt_u64("read", "rate", tok + 5, 0, 768000);
        else if (!image && !strncmp(tok, "channels=", 9))
            d->channels = (uint32_t)opt_u64("read", "channels", tok + 9, 1, 64);
        else die_usage("read", "%s %s: unknown option '%s'", opt, v, tok);
    }
    r->o.decode = r->decodes;
}

/* What a run delivered. */
typedef struct read_totals {
    uint64_t samples, bytes, batches;
    double seconds;
} read_totals;

/* Splits "a,b,c" into out; more than `max` names is a usage error, never
 * a silent cut. */
static int split_list(char *s, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max) die_usage("read", "--fields: more than %d names", max);
        out[n++] = tok;
    }
    return n;
}

/* The numeric options; false when argv[*i] is none of them.  Each takes
 * what its field in stk_loader_options (or the run) can hold, a batch at
 * least one sample; the library says what else it refuses, in its terms. */
static bool read_number(read_run *r, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    stk_loader_options *o = &r->o;
#define U64(lo, hi) opt_u64("read", a, opt_value("read", argc, argv, i), lo, hi)
#define SIZE() opt_size("read", a, opt_value("read", argc, argv, i), 0, UINT64_MAX)
    if (!strcmp(a, "--batch")) o->batch_size = (uint32_t)U64(1, UINT32_MAX);
    else if (!strcmp(a, "--window")) o->window = U64(0, UINT64_MAX);
    else if (!strcmp(a, "--stride")) o->stride = U64(0, UINT64_MAX);
    else if (!strcmp(a, "--block-group")) o->block_group = (uint32_t)U64(0, UINT32_MAX);
    else if (!strcmp(a, "--block-bytes")) o->block_bytes = SIZE();
    else if (!strcmp(a, "--seed")) o->seed = U64(0, UINT64_MAX);
    else if (!strcmp(a, "--epoch")) o->epoch = U64(0, UINT64_MAX);
    else if (!strcmp(a, "--epochs")) r->epochs = U64(0, UINT64_MAX);
    else if (!strcmp(a, "--rank")) o->rank = (uint32_t)U64(0, UINT32_MAX);
    else if (!strcmp(a, "--world-size")) o->world_size = (uint32_t)U64(0, UINT32_MAX);
    else if (!strcmp(a, "--streams")) o->streams = (uint32_t)U64(1, UINT32_MAX);
    else if (!strcmp(a, "--threads")) o->threads = (int)U64(0, INT_MAX);
    else if (!strcmp(a, "--prefetch")) o->prefetch = (uint32_t)U64(0, UINT32_MAX);
    else if (!strcmp(a, "--budget")) o->memory_budget = SIZE();
    else if (!strcmp(a, "--max-batches")) r->max_batches = U64(0, UINT64_MAX), r->max_given = true;
    else return false;
#undef U64
#undef SIZE
    return true;
}

/* --step-ms: finite and not negative (an infinite step would never end). */
static double step_ms_value(const char *m) {
    char *end;
    double v = strtod(m, &end);
    if (end == m || *end || !isfinite(v) || v < 0)
        die_usage("doctor", "--step-ms wants milliseconds, not '%s'", m);
    return v;
}

/* The options that pick one of a few modes; false when argv[*i] is none. */
static bool read_mode(read_run *r, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    stk_loader_options *o = &r->o;
    /* The names are the library's (stk_*_parse), as Python's are. */
    if (!strcmp(a, "--valid")) {
        const char *m = opt_value("read", argc, argv, i);
        int v = stk_valid_parse(m);
        if (v <= 0) die_usage("read", "--valid wants mask or notnan, not '%s'", m);
        o->valid = (stk_valid)v;
    } else if (!strcmp(a, "--shuffle")) {
        const char *m = opt_value("read", argc, argv, i);
        int v = stk_order_parse(m);
        if (v < 0) die_usage("read", "--shuffle wants sequential, random or block, not '%s'", m);
        o->order = (stk_order)v;
    } else if (!strcmp(a, "--backend")) {
        const char *m = opt_value("read", argc, argv, i);
        int v = stk_backend_parse(m);
        if (v < 0) die_usage("read", "--backend wants auto, uring, pool or mmap, not '%s'", m);
        o->backend = (stk_backend)v;
    } else if (!strcmp(a, "--warm-up")) {
        const char *m = opt_value("read", argc, argv, i);
        int v = stk_warm_up_parse(m);
        if (v < 0) die_usage("read", "--warm-up wants auto, on or off, not '%s'", m);
        o->warm_up = (stk_warm_up)v;
    } else {
        return false;
    }
    return true;
}

/* Fills `r` from the command line; returns false when it asked for --help. */
static bool read_args(int argc, char **argv, read_run *r) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(r->doctor ? doctor_help : read_help, stdout);
            return false;
        }
        if (read_number(r, argc, argv, &i) || read_mode(r, argc, argv, &i)) continue;
        if (!strcmp(a, "--valid-field")) r->o.valid_field = opt_value("read", argc, argv, &i);
        else if (!strcmp(a, "--fields")) {
            char *list = strdup(opt_value("read", argc, argv, &i));
            if (!list) {
                perror("strdup");
                exit(EXIT_ERROR);
            }
            r->o.nfields = (size_t)split_list(list, r->fields, MAX_FIELDS);
            r->o.fields = r->fields;
        } else if (!strcmp(a, "--direct")) r->o.direct = 1;
        else if (!strcmp(a, "--root")) r->root = opt_value("read", argc, argv, &i);
        else if (!strcmp(a, "--no-verify")) r->o.verify = 0;
        else if (!strcmp(a, "--stats")) r->stats = true;
        else if (r->doctor && !strcmp(a, "--step-ms"))
            r->step_ms = step_ms_value(opt_value("read", argc, argv, &i));
        else if (!strcmp(a, "--json")) r->json = true;
        else if (!strcmp(a, "--image") || !strcmp(a, "--audio")) {
            char *v = strdup(opt_value("read", argc, argv, &i));
            if (!v) {
                perror("strdup");
                exit(EXIT_ERROR);
            }
            parse_decode(r, a, v);
        }
        else if (!strcmp(a, "--trace")) r->trace = opt_value("read", argc, argv, &i);
        else if (r->doctor && !strcmp(a, "--html")) r->html = opt_value("doctor", argc, argv, &i);
        else if (a[0] == '-') die_usage("read", "unknown option '%s'", a);
        else r->path = a;
    }
    if (!r->path) die_usage(r->doctor ? "doctor" : "read", "DATASET is required");
    return true;
}

/* ---- the run ---- */

/* Stands in for a training step: the CPU is busy for `ms`. */
static void busy_step(stk_loader *ld, double ms) {
    uint64_t ts = stk_now_ns();
    double until = now_s() + ms / 1e3;
    while (now_s() < until) {
    }
    stk_loader_trace_span(ld, "step", ts, stk_now_ns());
}

/* One epoch, at most r->max_batches batches.  `warm`: doctor's start-up
 * is over (the first batch was left out).  Returns 0 or EXIT_ERROR. */
static int run_epoch(stk_loader *ld, const read_run *r, read_totals *t, bool *warm, double *t0) {
    stk_error err = {0};
    for (uint64_t k = 0; k < r->max_batches; k++) {
        stk_batch *b;
        int rc = stk_loader_next(ld, &b, &err);
        if (rc == STK_END) break;
        if (rc) return fail(&err);
        if (r->doctor && !*warm) {
            /* Start-up (opening, the first reads) is not the steady state
             * the doctor reports on. */
            stk_loader_release(ld, b);
            stk_loader_stats_reset(ld);
            *t0 = now_s();
            *warm = true;
            continue;
        }
        t->samples += stk_batch_size(b);
        t->batches++;
        for (size_t f = 0; f < stk_loader_num_fields(ld); f++) {
            stk_batch_field bf;
            stk_batch_field_get(b, f, &bf);
            t->bytes += bf.bytes;
        }
        stk_loader_release(ld, b);
        if (r->step_ms > 0) busy_step(ld, r->step_ms);
    }
    return 0;
}

static int run_epochs(stk_loader *ld, const read_run *r, read_totals *t) {
    double t0 = now_s();
    bool warm = false;
    int rc = 0;
    for (uint64_t e = 0; e < r->epochs && rc == 0; e++) {
        stk_error err = {0};
        if (e && stk_loader_set_epoch(ld, r->o.epoch + e, &err)) rc = fail(&err);
        else rc = run_epoch(ld, r, t, &warm, &t0);
    }
    t->seconds = now_s() - t0;
    return rc;
}

/* ---- the report ---- */

static void print_json(const read_totals *t, const stk_loader_stats *st, stk_loader *ld,
                       const stk_dataset *ds) {
    printf("{\"samples\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"bytes\": %" PRIu64
           ", \"seconds\": %.6f, \"wait_seconds\": %.6f, \"io_bytes\": %" PRIu64
           ", \"io_reads\": %" PRIu64 ", \"backend\": \"%s\", \"threads\": %u"
           ", \"warm_up_bytes\": %" PRIu64 ", \"warm_up_read\": %" PRIu64,
           t->samples, t->batches, t->bytes, t->seconds, (double)st->wait.busy_ns / 1e9,
           st->io.bytes, st->io.count, stk_backend_name(stk_loader_backend(ld)), st->threads,
           st->warm_up_bytes, st->warm_up.bytes);
    stk_remote_stats rs;
    if (stk_dataset_remote_stats(ds, &rs) == 0)
        printf(", \"remote\": {\"requests\": %" PRIu64 ", \"retries\": %" PRIu64
               ", \"bytes_fetched\": %" PRIu64 ", \"bytes_cached\": %" PRIu64
               ", \"network_seconds\": %.6f}",
               rs.requests, rs.retries, rs.bytes_fetched, rs.bytes_cached, rs.network_seconds);
    printf("}\n");
}

/* --stats: each stage's counts and busy time. */
static void print_stats(const stk_loader_stats *st) {
    printf("  plan      %12" PRIu64 " samples  %9.3f s busy\n", st->plan.count,
           (double)st->plan.busy_ns / 1e9);
    printf("  io        %12" PRIu64 " reads    %9.3f s busy  %.3f GB (max %" PRIu64
           " in flight)\n",
           st->io.count, (double)st->io.busy_ns / 1e9, (double)st->io.bytes / 1e9,
           st->max_inflight);
    printf("  assemble  %12" PRIu64 " batches  %9.3f s busy  %.3f GB\n", st->assemble.count,
           (double)st->assemble.busy_ns / 1e9, (double)st->assemble.bytes / 1e9);
    if (st->decode.count)
        printf("   decode   %12" PRIu64 " samples  %9.3f s busy  %.3f GB encoded\n",
               st->decode.count, (double)st->decode.busy_ns / 1e9,
               (double)st->decode.bytes / 1e9);
    printf("  wait      %12" PRIu64 " calls    %9.3f s blocked, %.2f batches ready on "
           "average\n",
           st->wait.count, (double)st->wait.busy_ns / 1e9,
           st->wait.count ? (double)st->ready_sum / (double)st->wait.count : 0);
    printf("  verify    %12" PRIu64 " blocks   %9.3f s busy  %.3f GB\n", st->verify.count,
           (double)st->verify.busy_ns / 1e9, (double)st->verify.bytes / 1e9);
    if (st->groups_loaded) printf("  groups    %12" PRIu64 " loaded\n", st->groups_loaded);
    if (st->warm_up_bytes)
        printf("  warm-up   %12" PRIu64 " pieces   %9.3f s busy  %.3f of %.3f GB%s\n",
               st->warm_up.count, (double)st->warm_up.busy_ns / 1e9,
               (double)st->warm_up.bytes / 1e9, (double)st->warm_up_bytes / 1e9,
               st->warm_up_done ? "" : " (still running)");
}

static void print_text(const read_run *r, const read_totals *t, const stk_loader_stats *st,
                       stk_loader *ld) {
    double el = t->seconds;
    printf("read %" PRIu64 " samples in %" PRIu64 " batches over %" PRIu64 " epoch%s in %.3f s\n",
           t->samples, t->batches, r->epochs, r->epochs == 1 ? "" : "s", el);
    printf("  %.0f samples/s, %.3f GB/s of batch data (%s backend, %u threads, %u buffers)\n",
           el > 0 ? (double)t->samples / el : 0, el > 0 ? (double)t->bytes / el / 1e9 : 0,
           stk_backend_name(stk_loader_backend(ld)), st->threads, st->ring_slots);
    /* Nothing consumes the batches here, so the reader waits in next() for
     * nearly all of the run whatever the loader's speed: a figure that reads
     * like an alarm is no verdict.  doctor --step-ms says whether a step of a
     * given length would wait. */
    printf("  waiting in next() %.1f%% of the time: expected, as nothing here consumes the "
           "batches; for whether a training step would wait, stoker doctor --step-ms MS\n",
           el > 0 ? 100.0 * (double)st->wait.busy_ns / 1e9 / el : 0);
    if (r->stats) print_stats(st);
}

/* Opens the loader, runs it and reports; returns the exit code. */
static int read_dataset(const read_run *r, stk_dataset *ds) {
    stk_error err = {0};
    stk_loader *ld = NULL;
    if (stk_loader_open(ds, &r->o, &ld, &err)) return fail(&err);
    if (r->trace && stk_loader_trace_start(ld, 0, &err)) {
        stk_loader_close(ld);
        return fail(&err);
    }
    /* The page's charts over time: the series begins again at doctor's
     * stats reset, after start-up. */
    if (r->html && stk_loader_series_start(ld, 0, 0, &err)) {
        stk_loader_close(ld);
        return fail(&err);
    }
    read_totals t = {0};
    int rc = run_epochs(ld, r, &t);
    stk_loader_stats st;
    stk_loader_stats_get(ld, &st);
    if (rc == 0 && r->json) {
        print_json(&t, &st, ld, ds);
    } else if (rc == 0) {
        print_text(r, &t, &st, ld);
        if (!r->doctor) order_hint(ds, ld);
    }
    if (rc == 0 && r->trace && stk_loader_trace_write(ld, r->trace, &err)) rc = fail(&err);
    if (rc == 0 && r->doctor)
        rc = doctor_report(&st, t.seconds, t.bytes, r->step_ms, r->html, ld, ds);
    stk_loader_close(ld);
    return rc;
}

static int read_main(int argc, char **argv, bool doctor) {
    read_run r;
    memset(&r, 0, sizeof r);
    r.doctor = doctor;
    stk_loader_options_init(&r.o);
    r.epochs = 1;
    r.max_batches = UINT64_MAX;
    if (!read_args(argc, argv, &r)) return 0;
    /* A mixture description (a JSON file naming several sources) is read by
     * the Python package's mixture. */
    size_t plen = strlen(r.path);
    if (plen > 5 && strcmp(r.path + plen - 5, ".json") == 0)
        return run_python(doctor ? "doctor" : "read", argc, argv, "a mixture (.json)");
    /* doctor reports on a short run unless told how long. */
    if (doctor && !r.max_given) r.max_batches = 200;
    stk_error err = {0};
    stk_dataset *ds = NULL;
    if (open_path(r.path, r.root, &ds, &err)) return fail(&err);
    int rc = read_dataset(&r, ds);
    stk_dataset_close(ds);
    return rc;
}

int cmd_read(int argc, char **argv) {
    return read_main(argc, argv, false);
}

int cmd_doctor(int argc, char **argv) {
    return read_main(argc, argv, true);
}

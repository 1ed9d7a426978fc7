/*
 * stoker doctor's report: where the loader's time went, the delivered rate
 * against a limit measured on the spot, the verdict and what to try next,
 * and the process's memory.  The options and the run are read.c's.
 */
#include "read.h"

#include <inttypes.h>
#include <stdio.h>

const char doctor_help[] =
    "Usage: stoker doctor DATASET [read options] [--step-ms M] [--max-batches N]\n"
    "                     [--trace FILE] [--html FILE]\n"
    "\n"
    "Runs the loader (200 batches by default, after a first one left out as\n"
    "start-up) and says where the time goes: each stage's busy time as a share\n"
    "of the workers' time, the consumer's stall, and the bytes delivered against\n"
    "the limit measured on the spot (memcpy when the data is in memory, else the\n"
    "device's O_DIRECT sequential reads under the dataset). With --step-ms, each\n"
    "batch is followed by M ms of busy CPU work standing in for a training step,\n"
    "and the verdict says whether that run is input-bound (stall above 10%),\n"
    "compute-bound (below 2%) or balanced, with the next thing to try.\n"
    "--trace FILE writes a Chrome trace of the run (open it in ui.perfetto.dev):\n"
    "each worker thread's batches with plan, verify, read and assemble nested\n"
    "inside, and the consumer's waits. --html FILE writes the report as one\n"
    "self-contained page (no network needed to view it): the throughput over the\n"
    "run against the limit, each stage's time per batch, the ring's fill and the\n"
    "step's waits over time, and the verdict. Takes every option of `stoker read`.\n"
    "\n"
    "Example:\n"
    "  stoker doctor basins.stk --window 365 --batch 256 --shuffle random --step-ms 50\n";

/* Prints the order advice, when there is some; *adv gets it (text empty: none). */
static void order_advice(stk_dataset *ds, stk_loader *ld, stk_order_advice *adv) {
    stk_error e = {0};
    if (stk_advise_order(ds, ld, adv, &e) != 0) adv->text[0] = 0;
    if (adv->text[0]) printf("hint: %s\n", adv->text);
}

void order_hint(stk_dataset *ds, stk_loader *ld) {
    stk_order_advice adv;
    order_advice(ds, ld, &adv);
}

/* The process's resident memory from /proc/self/status, in kB: all of it,
 * and the part that is file pages mapped (the dataset's page cache). */
static void rss_kb(uint64_t *total, uint64_t *file) {
    *total = *file = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    unsigned long long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu", &v) == 1) *total = v;
        else if (sscanf(line, "RssFile: %llu", &v) == 1) *file = v;
    }
    fclose(f);
}

/* The fastest the loader could deliver here, and what limits it, by the
 * library's one policy (stk_measure_limit, as stoker.profile uses). */
static double measure_limit(stk_dataset *ds, const char **name, double *resident) {
    stk_limit l;
    stk_measure_limit(ds, &l);
    if (l.resident >= 0)
        printf("\n%.0f%% of the dataset's bytes are in the page cache\n", 100 * l.resident);
    *name = l.what;
    *resident = l.resident;
    return l.bytes_per_s;
}

static void print_shares(const stk_diagnosis *d, const stk_loader_stats *st, stk_backend be,
                         double el) {
    printf("\nwhere the loader's time goes (%u worker threads, %s backend, %.2f s):\n",
           st->threads, stk_backend_name(be), el);
    printf("  plan      %6.1f%%  (order, records, rows)\n", 100 * d->share_plan);
    printf("  io        %6.1f%%  (%s)\n", 100 * d->share_io,
           be == STK_BACKEND_MMAP ? "copies out of the mapping" : "reads");
    printf("  assemble  %6.1f%%  (copies from group buffers, decompression, conversions)\n",
           100 * d->share_assemble);
    printf("  verify    %6.1f%%  (checksums)\n", 100 * d->share_verify);
    printf("  idle      %6.1f%%  (waiting for the consumer or for free buffers)\n",
           100 * d->share_idle);
}

static void print_verdict(const stk_diagnosis *d, double step_ms) {
    printf("consumer stall: %.1f%% of the time in next()\n", 100 * d->stall);
    if (step_ms > 0)
        printf("verdict: %s (with a %.1f ms step, the consumer waited %.1f%% of the time)\n",
               d->verdict_name, step_ms, 100 * d->stall);
    else
        printf("verdict: %s, %.0f batches/s; pass --step-ms with your training step's time to "
               "see whether a run would wait for data\n",
               d->verdict_name, d->batches_per_s);
    printf("next: %s\n", d->next);
}

static void print_memory(const stk_loader_stats *st) {
    uint64_t rss, file;
    rss_kb(&rss, &file);
    if (rss)
        printf("memory: the process's RSS is %.2f GB, of which %.2f GB are pages of the "
               "dataset's files\n  mapped from the page cache (shared with every process "
               "reading them, and given back\n  by the kernel when memory runs short); the "
               "rest, %.2f GB, is the process's own\n",
               (double)rss / 1e6, (double)file / 1e6,
               (double)(rss - (file < rss ? file : rss)) / 1e6);
    if (st->warm_up_bytes)
        printf("warm-up: %.2f of %.2f GB brought into the page cache with large reads%s\n",
               (double)st->warm_up.bytes / 1e9, (double)st->warm_up_bytes / 1e9,
               st->warm_up_done ? "" : " (still running)");
}

/* For a remote dataset: what was fetched, against what the link delivers
 * (measured now). */
static void print_network(stk_dataset *ds) {
    stk_remote_stats rs;
    if (stk_dataset_remote_stats(ds, &rs) != 0) return;
    char hf[32], hc[32];
    human_bytes((double)rs.bytes_fetched, hf, sizeof hf);
    human_bytes((double)rs.bytes_cached, hc, sizeof hc);
    uint64_t all = rs.bytes_fetched + rs.bytes_cached;
    printf("\nnetwork (%s): fetched %s in %.2f s over %" PRIu64 " requests (%" PRIu64
           " retried); the cache held %s (%.0f%% of the bytes)\n",
           stk_dataset_path(ds), hf, rs.network_seconds, rs.requests, rs.retries, hc,
           all ? 100.0 * (double)rs.bytes_cached / (double)all : 0);
    if (rs.cache_limited) {
        char hb[32], hp[32], he[32];
        human_bytes((double)rs.cache_budget, hb, sizeof hb);
        human_bytes((double)rs.cache_peak, hp, sizeof hp);
        human_bytes((double)rs.bytes_evicted, he, sizeof he);
        if (rs.cache_budget)
            printf("  cache budget %s: at most %s on disk; %s evicted\n", hb, hp, he);
        else
            printf("  streaming (cache budget 0): %s evicted\n", he);
    }
    double link = 0, rate = rs.network_seconds > 0 ? (double)rs.bytes_fetched / rs.network_seconds
                                                   : 0;
    stk_error e = {0};
    if (stk_measure_link(ds, 3.0, &link, &e) != 0 || link <= 0) {
        printf("  the link could not be measured: %s\n", e.message);
    } else if (rs.bytes_fetched > (64u << 20)) {
        printf("  fetched at %.0f MB/s; the link delivers %.0f MB/s (measured now); %.2f of it\n",
               rate / 1e6, link / 1e6, rate / link);
    } else {
        /* Small fetches are dominated by round trips: no rate to compare. */
        printf("  the link delivers %.0f MB/s (measured now)\n", link / 1e6);
    }
}

/* The run as a page (stk_report_write_html), from the loader's series. */
static int write_html(const char *path, const stk_diagnosis *d, const stk_loader_stats *st,
                      double step_ms, const char *limit_name, double resident,
                      const char *hint, stk_loader *ld, stk_dataset *ds) {
    char name[64];
    if (step_ms > 0) snprintf(name, sizeof name, "with a %.1f ms step", step_ms);
    else snprintf(name, sizeof name, "loader alone");
    stk_report_run run = {.name = name,
                          .diagnosis = *d,
                          .threads = st->threads,
                          .ring_slots = st->ring_slots,
                          .step_seconds = step_ms / 1e3};
    run.npoints = stk_loader_series(ld, &run.series);
    stk_report rep = {.title = stk_dataset_path(ds),
                      .backend = stk_backend_name(stk_loader_backend(ld)),
                      .limit_what = limit_name,
                      .resident = resident,
                      .runs = &run,
                      .nruns = 1,
                      .hint = hint};
    stk_error e = {0};
    if (stk_report_write_html(&rep, path, &e) != 0) return fail(&e);
    printf("report: %s\n", path);
    return 0;
}

int doctor_report(const stk_loader_stats *st, double el, uint64_t bytes, double step_ms,
                  const char *html, stk_loader *ld, stk_dataset *ds) {
    stk_backend be = stk_loader_backend(ld);
    const char *limit_name;
    double resident;
    double limit = measure_limit(ds, &limit_name, &resident);
    stk_diagnosis d;
    stk_diagnose(st, be, bytes, el, limit, step_ms > 0, &d);
    print_shares(&d, st, be, el);
    printf("delivered %.2f GB/s of batch data; limit (%s): %.2f GB/s; %.2f of it\n",
           d.bytes_per_s / 1e9, limit_name, limit / 1e9, d.of_limit);
    print_verdict(&d, step_ms);
    print_memory(st);
    print_network(ds);
    stk_order_advice adv;
    order_advice(ds, ld, &adv);
    return html ? write_html(html, &d, st, step_ms, limit_name, resident, adv.text, ld, ds) : 0;
}

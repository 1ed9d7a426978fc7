/* test_report.c: the report page (stk_report_write_html) writes the texts
 * it is given as text, escaped, wherever they appear: a run's name in the
 * captions as in the headings, so that a name cannot open an element of
 * its own. */
#include "util.h"

#include <sys/stat.h>

int main(void) {
    stk_error err = {0};
    const char *dir = test_dir("report");
    CHECK(mkdir(dir, 0755) == 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/report.html", dir);

    stk_series_point pts[3];
    memset(pts, 0, sizeof pts);
    for (int i = 0; i < 3; i++) {
        pts[i].t_ns = (uint64_t)(i + 1) * 1000000000u;
        pts[i].batches = pts[i].calls = (uint64_t)(i + 1) * 10;
        pts[i].bytes = (uint64_t)(i + 1) << 20;
        pts[i].wait_ns = (uint64_t)(i + 1) * 100000000u;
        pts[i].ready_sum = (uint64_t)(i + 1) * 20;
    }
    stk_report_run runs[2];
    memset(runs, 0, sizeof runs);
    const char *names[2] = {"alone <i>&", "step <img src=x>"};
    for (int i = 0; i < 2; i++) {
        runs[i].name = names[i];
        runs[i].threads = 2;
        runs[i].ring_slots = 4;
        runs[i].step_seconds = i ? 0.01 : 0;
        runs[i].series = pts;
        runs[i].npoints = 3;
        runs[i].diagnosis.seconds = 3;
        runs[i].diagnosis.batches_per_s = 10;
        runs[i].diagnosis.bytes_per_s = 1 << 20;
        runs[i].diagnosis.limit_bytes_per_s = 1 << 30;
        runs[i].diagnosis.stall = 0.1;
        runs[i].diagnosis.verdict_name = "input-bound";
    }
    stk_report rep = {.title = "a <b>title</b>", .backend = "pool", .limit_what = "memory",
                      .resident = -1, .runs = runs, .nruns = 2, .hint = NULL};
    CHECK_OK(stk_report_write_html(&rep, path, &err));

    size_t len;
    char *page = test_read_file(path, &len);
    CHECK(page != NULL);
    /* Every name appears, and only escaped. */
    CHECK(strstr(page, "alone &lt;i&gt;&amp;") != NULL);
    CHECK(strstr(page, "step &lt;img src=x&gt;") != NULL);
    CHECK(strstr(page, "a &lt;b&gt;title&lt;/b&gt;") != NULL);
    CHECK(strstr(page, "<i>") == NULL);
    CHECK(strstr(page, "<img") == NULL);
    CHECK(strstr(page, "<b>title") == NULL);
    free(page);
    test_rmrf(dir);
    printf("test_report: ok\n");
    return 0;
}

/* Fuzz target: what a server sends back (src/remote/parse.c).  The input is
 * header lines up to the first empty line, then a body: every line goes
 * through the header parser, the body through the XML error reader, and the
 * Retry-After that resulted through its parser.  Nothing may crash, read
 * past its input or leave a field unterminated. */
#include "remote/remote.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void terminated(const char *s, size_t cap) {
    if (!memchr(s, '\0', cap)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    stk__fetch f;
    memset(&f, 0, sizeof f);
    f.object_size = UINT64_MAX;
    /* Ranged or not, by the first byte. */
    if (size && (data[0] & 1)) f.lo = 100, f.hi = 200;
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
        /* A line of its own, as curl hands it over (not NUL-terminated). */
        char *line = malloc(n ? n : 1);
        if (!line) return 0;
        memcpy(line, p, n);
        stk__fetch_header(&f, line, n);
        free(line);
        p += n;
        if (n <= 2 && (n == 1 || p[-2] == '\r')) break; /* the empty line */
    }
    terminated(f.etag, sizeof f.etag);
    terminated(f.last_modified, sizeof f.last_modified);
    terminated(f.retry_after, sizeof f.retry_after);
    terminated(f.region, sizeof f.region);
    size_t bl = (size_t)(end - p);
    if (bl >= sizeof f.errbody) bl = sizeof f.errbody - 1;
    memcpy(f.errbody, p, bl);
    f.errbody[bl] = '\0';
    static const char *tags[] = {"Code", "Region", "Message", "",
                                 "AVeryLongTagNameThatDoesNotFitTheBufferAtAll"};
    char out[64];
    for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
        stk__xml_element(f.errbody, tags[i], out, sizeof out);
        terminated(out, sizeof out);
    }
    char one[1];
    stk__xml_element(f.errbody, "Code", one, sizeof one);
    if (one[0]) abort();
    int64_t s = stk__retry_after_s(f.retry_after, 1700000000);
    if (s < -1) abort();
    return 0;
}

/* Fuzz target: dataset URLs (src/remote/url.c).  Any text must parse or be
 * refused with a code; an object's URL built from a parsed one must be a
 * string that starts with the scheme's endpoint.  No crash, no leak. */
#include "remote/remote.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    stk__url u;
    stk_error err;
    (void)stk__is_remote(text);
    if (stk__url_parse(text, &u, &err) == 0) {
        char *obj = stk__url_object(&u, NULL, "shard-000000.stk");
        if (obj && strncmp(obj, "http", 4) != 0) abort();
        stk__free(obj);
        stk__url_free(&u);
    } else if (err.code >= 0 || !err.message[0]) {
        abort();
    }
    free(text);
    return 0;
}

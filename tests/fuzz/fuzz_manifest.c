/* Fuzz target: the manifest parser (format/manifest.c).  Any input must
 * parse or be refused with a code; nothing may crash or leak. */
#include "format/format.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    stk__manifest m;
    stk_error err;
    if (stk__manifest_parse((const char *)data, size, "fuzz", &m, &err) == 0) {
        char *text = NULL;
        size_t len = 0;
        if (stk__manifest_dump(&m, &text, &len, &err) == 0) stk__free(text);
        stk__manifest_clear(&m);
    }
    return 0;
}

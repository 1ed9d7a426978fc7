/* Fuzz target: the .npy header parser (sources/npy.c). */
#include "stoker.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    stk_npy_header h;
    stk_error err;
    stk_npy_parse(data, size, "fuzz.npy", &h, &err);
    return 0;
}

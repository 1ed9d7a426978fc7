/* Fuzz target: the WAV header parser (sources/wav.c).  The first byte picks
 * the file size the parser is told (the input's own size, or shorter or
 * longer), so that the checks against the file's end are exercised. */
#include "stoker.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint64_t fsize = size - 1;
    if (data[0] & 1) fsize += (uint64_t)data[0] << 8;
    else if (data[0] & 2) fsize /= 2;
    stk_wav_header h;
    stk_error err;
    if (stk_wav_parse(data + 1, size - 1, fsize, "fuzz.wav", &h, &err) == 0) {
        /* What a parse promises: the frames lie inside the file. */
        if (h.data_offset + h.data_bytes > fsize || h.channels == 0 ||
            h.frames * h.channels * h.bytes_per_sample > h.data_bytes)
            __builtin_trap();
    }
    return 0;
}

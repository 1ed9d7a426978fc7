/* Fuzz target: the audio decoders (media/audio.c: libFLAC, mpg123,
 * libvorbisfile, opusfile, and libsoxr's resampling) behind the public
 * calls stk_media_probe and stk_decode_one.
 *
 * The input is one record with four bytes of options in front:
 *   byte 0: bit 0 the channels (1: the mean, or 2), bit 1 a random
 *           window, bits 2-3 the output rate (as stored, 8000, 22050, as
 *           stored);
 *   bytes 1-2: the window's frames - 1 (little-endian, low 12 bits: 1 to
 *           4096);
 *   byte 3: the sample's key.
 * The rest is the encoded file, copied into a buffer of exactly its size
 * so that AddressSanitizer sees any read outside the record.
 *
 * What must hold, besides no crash, hang or leak: every call returns 0 or
 * one of its documented codes with a message; a decoded clip probes as
 * audio, with two channels where two were asked for; and a second decode,
 * by a worker's decoding state (its decoders and resampler kept) that has
 * just failed on the record cut in half, into a buffer filled with other
 * bytes, returns the same code and the same samples (every sample written,
 * nothing left over from the failure). */
#include "media/media.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OPTS 4

static int allowed(int rc) {
    return rc == 0 || rc == STK_EMEDIA || rc == STK_EUNSUPPORTED || rc == -ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < OPTS) return 0;
    static const uint32_t rates[4] = {0, 8000, 22050, 0};
    stk_decode d;
    stk_decode_init(&d, STK_MEDIA_AUDIO);
    d.field = "audio";
    d.channels = 1u + (data[0] & 1);
    d.random_offset = (data[0] >> 1) & 1;
    d.sample_rate = rates[(data[0] >> 2) & 3];
    d.samples = 1u + ((data[1] | (unsigned)data[2] << 8) & 4095);
    uint64_t key = stk_decode_key(1, 2, data[3]);

    size_t len = size - OPTS;
    uint8_t *rec = malloc(len ? len : 1);
    if (!rec) return 0;
    memcpy(rec, data + OPTS, len);

    stk_error err = {0};
    stk_media_info info;
    int prc = stk_media_probe(rec, len, &info, &err);
    if (!allowed(prc) || (prc && !err.message[0])) __builtin_trap();

    size_t out_len = (size_t)d.samples * d.channels * sizeof(float);
    uint8_t *out = malloc(out_len), *again = malloc(out_len);
    if (!out || !again) abort();
    memset(out, 0x00, out_len);
    memset(&err, 0, sizeof err);
    int rc = stk_decode_one(&d, rec, len, key, out, out_len, NULL, NULL, &err);
    if (!allowed(rc) || (rc && !err.message[0])) __builtin_trap();
    if (rc == 0 && (prc != 0 || info.media != STK_MEDIA_AUDIO ||
                    (d.channels == 2 && info.channels != 2)))
        __builtin_trap();

    stk__media_ctx ctx = {0};
    char why[STK__WHY] = "";
    memset(again, 0xFF, out_len);
    (void)stk__media_decode(&ctx, &d, rec, len / 2, key, again, NULL, NULL, why);
    memset(again, 0xFF, out_len);
    why[0] = 0;
    int rc2 = stk__media_decode(&ctx, &d, rec, len, key, again, NULL, NULL, why);
    stk__media_ctx_free(&ctx);
    if (rc2 != rc && rc2 != -ENOMEM && rc != -ENOMEM) __builtin_trap();
    if (rc == 0 && rc2 == 0 && memcmp(out, again, out_len)) __builtin_trap();

    free(again);
    free(out);
    free(rec);
    return 0;
}

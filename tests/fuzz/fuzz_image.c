/* Fuzz target: the image decoders (media/image.c: libjpeg-turbo, libspng,
 * libwebp) behind the public calls stk_media_probe, stk_decode_one and
 * stk_decode_box, and the crop and resize of media.c.
 *
 * The input is one record with four bytes of options in front:
 *   byte 0: bits 0-1 the crop (none, center, random-resized; 3 is
 *           random-resized with extreme scale and ratio ranges), bit 2
 *           flip, bit 3 CHW, bits 4-7 the center fraction (n + 1) / 16;
 *   byte 1: output width - 1 (low 6 bits: 1 to 64);
 *   byte 2: output height - 1 (low 6 bits);
 *   byte 3: the sample's key.
 * The rest is the encoded file, copied into a buffer of exactly its size
 * so that AddressSanitizer sees any read outside the record.
 *
 * What must hold, besides no crash, hang or leak: every call returns 0 or
 * one of its documented codes with a message; a decoded image's box lies
 * inside the image the probe reports and is the box stk_decode_box gives;
 * and a second decode, by a worker's decoding state that has just failed
 * on the record cut in half, into a buffer filled with other bytes, returns
 * the same code and the same pixels (every pixel written, nothing left
 * over from the failure). */
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
    stk_decode d;
    stk_decode_init(&d, STK_MEDIA_IMAGE);
    d.field = "image";
    unsigned crop = data[0] & 3;
    d.crop = crop == 3 ? STK_CROP_RANDOM_RESIZED : (stk_crop)crop;
    if (crop == 3) {
        d.scale[0] = 0.0001, d.scale[1] = 0.001;
        d.ratio[0] = 0.01, d.ratio[1] = 100;
    }
    d.flip = (data[0] >> 2) & 1;
    d.chw = (data[0] >> 3) & 1;
    d.center_fraction = ((data[0] >> 4) + 1) / 16.0;
    d.width = 1u + (data[1] & 63);
    d.height = 1u + (data[2] & 63);
    uint64_t key = stk_decode_key(1, 2, data[3]);

    size_t len = size - OPTS;
    uint8_t *rec = malloc(len ? len : 1);
    if (!rec) return 0;
    memcpy(rec, data + OPTS, len);

    stk_error err = {0};
    stk_media_info info;
    int prc = stk_media_probe(rec, len, &info, &err);
    if (!allowed(prc) || (prc && !err.message[0])) __builtin_trap();

    size_t out_len = (size_t)d.width * d.height * 3;
    uint8_t *out = malloc(out_len), *again = malloc(out_len);
    if (!out || !again) abort();
    memset(out, 0x00, out_len);
    uint32_t box[4] = {0};
    int flipped = -1;
    memset(&err, 0, sizeof err);
    int rc = stk_decode_one(&d, rec, len, key, out, out_len, box, &flipped, &err);
    if (!allowed(rc) || (rc && !err.message[0])) __builtin_trap();
    if (rc == 0) {
        if (prc != 0 || info.media != STK_MEDIA_IMAGE) __builtin_trap();
        if (box[2] < 1 || box[3] < 1 || box[0] + box[2] > info.width ||
            box[1] + box[3] > info.height || (flipped && !d.flip))
            __builtin_trap();
        uint32_t want[4];
        int wflip;
        if (stk_decode_box(&d, info.width, info.height, key, want, &wflip, NULL) != 0 ||
            memcmp(want, box, sizeof want) || wflip != flipped)
            __builtin_trap();
    }

    /* A worker's state, used first on the record cut in half. */
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

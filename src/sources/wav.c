/*
 * wav.c: the header of RIFF/WAVE audio files.
 *
 * Layout: "RIFF" u32 size "WAVE", then chunks of (4-byte id, u32 size,
 * size bytes, one pad byte when size is odd).  Two chunks matter:
 *
 *   "fmt "  u16 format (1 PCM, 3 IEEE float, 0xFFFE extensible), u16
 *           channels, u32 sample rate, u32 bytes per second, u16 block
 *           align (bytes per frame), u16 bits per sample; the extensible
 *           form adds u16 extension size, u16 valid bits, u32 channel mask
 *           and a 16-byte GUID whose first two bytes give the format.
 *   "data"  the frames, interleaved by channel, little-endian.
 *
 * Every other chunk (LIST, fact, cue, ...) is skipped.  The parser never
 * reads outside `buf` and checks the data chunk against the file's size.
 */
#include "../core/internal.h"

#include <errno.h>
#include <string.h>

static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

int stk_wav_parse(const void *buf, size_t len, uint64_t file_size, const char *name,
                  stk_wav_header *out, stk_error *err) {
    const uint8_t *b = buf;
    if (!name) name = "(wav)";
    if (!buf || !out) return stk__err(err, -EINVAL, "stk_wav_parse: NULL argument");
    memset(out, 0, sizeof *out);
    if (len < 12)
        return stk__err(err, STK_ETRUNCATED, "%s: not a WAV file: %zu bytes is too short",
                        name, len);
    if (memcmp(b, "RIFF", 4) != 0 || memcmp(b + 8, "WAVE", 4) != 0) {
        if (memcmp(b, "RF64", 4) == 0 || memcmp(b, "RIFX", 4) == 0)
            return stk__err(err, STK_EUNSUPPORTED,
                            "%s: %.4s WAV files are not supported (RIFF little-endian "
                            "files under 4 GiB are)",
                            name, (const char *)b);
        return stk__err(err, STK_EBADMAGIC, "%s: not a WAV file (no RIFF/WAVE header)", name);
    }
    bool have_fmt = false;
    unsigned format = 0, bits = 0, align = 0;
    size_t pos = 12;
    for (;;) {
        if (pos > len || len - pos < 8) {
            if (!have_fmt)
                return stk__err(err, STK_ECORRUPT, "%s: no \"fmt \" chunk before byte %zu",
                                name, pos);
            return stk__err(err, pos >= file_size ? STK_ETRUNCATED : STK_ECORRUPT,
                            "%s: no \"data\" chunk %s", name,
                            pos >= file_size ? "(the file ends first)"
                                             : "in the first bytes of the file");
        }
        const uint8_t *c = b + pos;
        uint32_t size = ld32(c + 4);
        if (memcmp(c, "fmt ", 4) == 0) {
            if (size < 16 || size > len - pos - 8)
                return stk__err(err, size < 16 ? STK_ECORRUPT : STK_ETRUNCATED,
                                "%s: \"fmt \" chunk of %u bytes at byte %zu is %s", name,
                                size, pos, size < 16 ? "too short" : "cut off");
            const uint8_t *f = c + 8;
            format = ld16(f);
            out->channels = ld16(f + 2);
            out->sample_rate = ld32(f + 4);
            align = ld16(f + 12);
            bits = ld16(f + 14);
            if (format == 0xFFFE) {
                if (size < 40)
                    return stk__err(err, STK_ECORRUPT,
                                    "%s: extensible \"fmt \" chunk of %u bytes is too short",
                                    name, size);
                format = ld16(f + 24);
            }
            have_fmt = true;
        } else if (memcmp(c, "data", 4) == 0) {
            if (!have_fmt)
                return stk__err(err, STK_ECORRUPT, "%s: \"data\" chunk before \"fmt \"",
                                name);
            out->data_offset = pos + 8;
            if (size > file_size || out->data_offset > file_size - size)
                return stk__err(err, STK_ETRUNCATED,
                                "%s: the data chunk says %u bytes at byte %llu but the file "
                                "has %llu bytes",
                                name, size, (unsigned long long)out->data_offset,
                                (unsigned long long)file_size);
            out->data_bytes = size;
            break;
        }
        uint64_t next = (uint64_t)pos + 8 + size + (size & 1);
        if (next > file_size)
            return stk__err(err, STK_ETRUNCATED,
                            "%s: chunk \"%.4s\" at byte %zu runs past the end of the file",
                            name, (const char *)c, pos);
        pos = (size_t)STK__MIN(next, (uint64_t)SIZE_MAX);
    }
    if (out->channels == 0)
        return stk__err(err, STK_ECORRUPT, "%s: the format says 0 channels", name);
    if (format == 1 && (bits == 8 || bits == 16 || bits == 24 || bits == 32)) {
        out->encoding = bits == 8    ? STK_WAV_PCM8
                        : bits == 16 ? STK_WAV_PCM16
                        : bits == 24 ? STK_WAV_PCM24
                                     : STK_WAV_PCM32;
    } else if (format == 3 && (bits == 32 || bits == 64)) {
        out->encoding = bits == 32 ? STK_WAV_FLOAT32 : STK_WAV_FLOAT64;
    } else {
        return stk__err(err, STK_EUNSUPPORTED,
                        "%s: format %u with %u bits per sample is not supported (PCM 8, "
                        "16, 24, 32 bits and IEEE float 32, 64 bits are)",
                        name, format, bits);
    }
    out->bytes_per_sample = bits / 8;
    if (align != out->channels * out->bytes_per_sample)
        return stk__err(err, STK_ECORRUPT,
                        "%s: block align %u does not match %u channels of %u bits", name, align,
                        out->channels, bits);
    out->frames = out->data_bytes / align;
    return 0;
}

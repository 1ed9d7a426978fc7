/*
 * error.c: codes, their descriptions, and filling stk_error.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *stk_version(void) { return STK_VERSION_STRING; }

const char *stk_strerror(int code) {
    switch (code) {
    case 0: return "success";
    case STK_EBADMAGIC: return "not a stoker file (bad magic)";
    case STK_EVERSION: return "unsupported format version";
    case STK_ETRUNCATED: return "file is truncated";
    case STK_ECORRUPT: return "malformed structure";
    case STK_EBOUNDS: return "index entry out of bounds";
    case STK_ECHECKSUM: return "checksum mismatch";
    case STK_EINCOMPLETE: return "dataset is incomplete";
    case STK_ESCHEMA: return "data does not match the schema";
    case STK_ECODEC: return "compression codec failed";
    case STK_EMISMATCH: return "shard does not match the manifest";
    case STK_EUNSUPPORTED: return "unsupported input";
    case STK_ESTALE: return "source file changed since it was indexed";
    case STK_ENOGPU: return "no usable GPU";
    case STK_ECUDA: return "a CUDA call failed";
    case STK_EOUTSIDE: return "a file outside the directory an index may read from";
    case STK_ETIMEOUT: return "a wait passed its deadline";
    case STK_EREDIRECT: return "a redirect loop";
    case STK_EHOST: return "a host name that does not resolve";
    case STK_ETLS: return "TLS failed";
    case STK_EHTTP: return "the server refused the request (HTTP 4xx)";
    case STK_ERANGE: return "the server answered another range than asked";
    case STK_EMEDIA: return "encoded media that does not decode";
    default: break;
    }
    if (code < 0 && code > -4096) {
        /* strerror is not thread-safe on every libc, but glibc returns
         * static strings for known codes. */
        return strerror(-code);
    }
    return "unknown error";
}

int stk__err(stk_error *err, int code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

void stk__err_prefix(stk_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[STK_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char joined[STK_ERROR_MAX];
    snprintf(joined, sizeof joined, "%s%s", head, err->message);
    memcpy(err->message, joined, sizeof joined);
}

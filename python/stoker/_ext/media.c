/*
 * media.c: the media calls of stoker._stoker (stk_decode_one and its
 * kin), and a decode spec as stoker/_media.py passes it: a tuple (field,
 * media, height, width, crop, scale0, scale1, ratio0, ratio1,
 * center_fraction, flip, chw, samples, sample_rate, channels,
 * random_offset).
 */
#include "ext.h"

int decode_spec_parse(PyObject *t, stk_decode *d) {
    int media, crop, flip, chw, random_offset;
    unsigned int h, w, rate, channels;
    double s0, s1, r0, r1, cf;
    unsigned long long samples;
    const char *field;
    if (!PyArg_ParseTuple(t, "ziIIidddddiiKIIi;a decode spec", &field, &media, &h, &w, &crop,
                          &s0, &s1, &r0, &r1, &cf, &flip, &chw, &samples, &rate, &channels,
                          &random_offset))
        return -1;
    stk_decode_init(d, (stk_media)media);
    d->field = field;
    d->height = h, d->width = w;
    d->crop = (stk_crop)crop;
    d->scale[0] = s0, d->scale[1] = s1;
    d->ratio[0] = r0, d->ratio[1] = r1;
    d->center_fraction = cf;
    d->flip = flip, d->chw = chw;
    d->samples = samples, d->sample_rate = rate, d->channels = channels;
    d->random_offset = random_offset;
    return 0;
}

/* decode_one(spec, data, key) -> (bytes of the sample, (x, y, w, h), flipped) */
PyObject *py_decode_one(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *spec;
    Py_buffer data;
    unsigned long long key;
    if (!PyArg_ParseTuple(args, "Oy*K", &spec, &data, &key)) return NULL;
    stk_decode d;
    stk_error err = {0};
    stk_dtype dt;
    int ndim;
    int64_t shape[STK_MAX_DIMS];
    PyObject *out = NULL;
    if (decode_spec_parse(spec, &d)) goto done;
    int rc = stk_decode_shape(&d, &dt, &ndim, shape, &err);
    if (rc) {
        raise_stk(rc, &err);
        goto done;
    }
    size_t bytes = stk_dtype_size(dt);
    for (int i = 0; i < ndim; i++) bytes *= (size_t)shape[i];
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bytes);
    if (!out) goto done;
    uint32_t box[4] = {0};
    int flipped = 0;
    char *buf = PyBytes_AsString(out);
    if (!buf) {
        Py_CLEAR(out);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = stk_decode_one(&d, data.buf, (size_t)data.len, key, buf, bytes, box, &flipped, &err);
    Py_END_ALLOW_THREADS
    if (rc) {
        Py_CLEAR(out);
        raise_stk(rc, &err);
        goto done;
    }
    PyObject *r = Py_BuildValue("(N(IIII)O)", out, box[0], box[1], box[2], box[3],
                                flipped ? Py_True : Py_False);
    out = r;
done:
    PyBuffer_Release(&data);
    return out;
}

/* decode_box(spec, width, height, key) -> ((x, y, w, h), flipped) */
PyObject *py_decode_box(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *spec;
    unsigned int w, h;
    unsigned long long key;
    if (!PyArg_ParseTuple(args, "OIIK", &spec, &w, &h, &key)) return NULL;
    stk_decode d;
    if (decode_spec_parse(spec, &d)) return NULL;
    stk_error err = {0};
    uint32_t box[4];
    int flipped;
    int rc = stk_decode_box(&d, w, h, key, box, &flipped, &err);
    if (rc) return raise_stk(rc, &err);
    return Py_BuildValue("((IIII)O)", box[0], box[1], box[2], box[3],
                         flipped ? Py_True : Py_False);
}

/* decode_key(seed, epoch, record) -> int */
PyObject *py_decode_key(PyObject *mod, PyObject *args) {
    (void)mod;
    unsigned long long s, e, r;
    if (!PyArg_ParseTuple(args, "KKK", &s, &e, &r)) return NULL;
    return PyLong_FromUnsignedLongLong(stk_decode_key(s, e, r));
}

/* media_probe(data) -> dict */
PyObject *py_media_probe(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    stk_media_info info;
    stk_error err = {0};
    int rc = stk_media_probe(data.buf, (size_t)data.len, &info, &err);
    PyBuffer_Release(&data);
    if (rc) return raise_stk(rc, &err);
    if (info.media == STK_MEDIA_IMAGE)
        return Py_BuildValue("{sssssIsI}", "media", "image", "format", info.format, "width",
                             info.width, "height", info.height);
    return Py_BuildValue("{sssssIsIsK}", "media", "audio", "format", info.format,
                         "sample_rate", info.sample_rate, "channels", info.channels, "frames",
                         (unsigned long long)info.frames);
}

PyObject *py_media_formats(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    return PyUnicode_FromString(stk_media_formats());
}

/* The varint walk and byte gathering of moldau.spark.record_walk in C: where each record's fields
 * lie in a v2 batch's body. Optional: record_walk.walk_py gives the same answer.
 *
 * walk(body, count, per_record, per_header) -> number of headers, or a negative
 * code (REASONS) when the body cannot be read.
 *   per_record: writable int64 buffer of 7 rows of `count`: offset delta,
 *     timestamp delta, key start, key length, value start, value length, header
 *     count (lengths -1 for null).
 *   per_header: writable int64 buffer of 4 rows of equal length: key start, key
 *     length, value start, value length.
 * gather(source, starts, sizes, out): the bytes of those fields, concatenated.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define E_VARINT -1
#define E_PAST_END -2
#define E_HEADER_COUNT -3
#define E_HEADER_KEY -4
#define E_LENGTH -5
#define E_TOO_MANY_HEADERS -6
#define E_BUFFERS -7

/* A zig-zag varint at *pos; returns 0, or E_VARINT. */
static inline int read_varint(const uint8_t *b, Py_ssize_t n, Py_ssize_t *pos, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= n || shift > 63) {
            return E_VARINT;
        }
        uint8_t c = b[p++];
        value |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            break;
        }
        shift += 7;
    }
    *pos = p;
    *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
    return 0;
}

#define VARINT(dst)                                        \
    do {                                                   \
        if (read_varint(b, n, &pos, &(dst)) < 0) {         \
            return E_VARINT;                               \
        }                                                  \
    } while (0)

/* A length-prefixed field at *pos (length -1: null) that must end by `end`: its
 * start and length; *pos moves past it. */
static inline int read_field(const uint8_t *b, Py_ssize_t n, Py_ssize_t *pos, Py_ssize_t end,
                             int64_t *start, int64_t *length) {
    if (read_varint(b, n, pos, length) < 0) {
        return E_VARINT;
    }
    *start = *pos;
    if (*length > 0) {
        if (*length > end - *pos) {
            return E_PAST_END;
        }
        *pos += (Py_ssize_t)*length;
    }
    return 0;
}

#define FIELD(start, length)                                      \
    do {                                                          \
        int e_ = read_field(b, n, &pos, end, &(start), &(length)); \
        if (e_ < 0) {                                             \
            return e_;                                            \
        }                                                         \
    } while (0)

static Py_ssize_t walk_body(const uint8_t *b, Py_ssize_t n, Py_ssize_t count, int64_t *rec,
                            int64_t *hdr, Py_ssize_t capacity) {
    int64_t *od = rec, *td = rec + count, *ks = rec + 2 * count, *kl = rec + 3 * count;
    int64_t *vs = rec + 4 * count, *vl = rec + 5 * count, *hc = rec + 6 * count;
    int64_t *hks = hdr, *hkl = hdr + capacity, *hvs = hdr + 2 * capacity;
    int64_t *hvl = hdr + 3 * capacity;
    Py_ssize_t pos = 0, headers = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, nh;
        VARINT(length);
        if (length < 0 || length > n - pos) {
            return E_PAST_END;
        }
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos += 1; /* the attributes byte */
        VARINT(td[i]);
        VARINT(od[i]);
        FIELD(ks[i], kl[i]);
        FIELD(vs[i], vl[i]);
        VARINT(nh);
        if (nh < 0) {
            return E_HEADER_COUNT;
        }
        hc[i] = nh;
        for (int64_t h = 0; h < nh; h++, headers++) {
            if (headers >= capacity) {
                return E_TOO_MANY_HEADERS;
            }
            FIELD(hks[headers], hkl[headers]);
            if (hkl[headers] < 0) {
                return E_HEADER_KEY;
            }
            FIELD(hvs[headers], hvl[headers]);
        }
        if (pos != end) {
            return E_LENGTH;
        }
    }
    return headers;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer body, rec, hdr;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*nw*w*", &body, &count, &rec, &hdr)) {
        return NULL;
    }
    Py_ssize_t result;
    Py_ssize_t capacity = hdr.len / (Py_ssize_t)(4 * sizeof(int64_t));
    if (count < 0 || rec.len < count * 7 * (Py_ssize_t)sizeof(int64_t)) {
        result = E_BUFFERS;
    } else {
        Py_BEGIN_ALLOW_THREADS
        result = walk_body((const uint8_t *)body.buf, body.len, count, (int64_t *)rec.buf,
                           (int64_t *)hdr.buf, capacity);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&body);
    PyBuffer_Release(&rec);
    PyBuffer_Release(&hdr);
    return PyLong_FromSsize_t(result);
}

/* gather(source, starts, sizes, out) -> bytes written: the byte ranges (int64
 * starts and sizes, sizes >= 0) of source, one after another, into out; -1 if a
 * range is outside source or out is too small. */
static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer src, starts, sizes, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &src, &starts, &sizes, &out)) {
        return NULL;
    }
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t written = 0;
    if (sizes.len != starts.len) {
        written = -1;
    } else {
        const int64_t *s = (const int64_t *)starts.buf, *z = (const int64_t *)sizes.buf;
        const char *from = (const char *)src.buf;
        char *to = (char *)out.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            if (s[i] < 0 || z[i] < 0 || s[i] > src.len - z[i] || z[i] > out.len - written) {
                written = -1;
                break;
            }
            memcpy(to + written, from + s[i], (size_t)z[i]);
            written += (Py_ssize_t)z[i];
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&out);
    return PyLong_FromSsize_t(written);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Where each record's fields lie in a v2 batch's body."},
    {"gather", gather, METH_VARARGS, "Byte ranges of a buffer, one after another."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__record_walk(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    PyObject *reasons = Py_BuildValue(
        "{i:s,i:s,i:s,i:s,i:s,i:s,i:s}", E_VARINT, "truncated or too long varint", E_PAST_END,
        "a record runs past its batch", E_HEADER_COUNT, "negative header count", E_HEADER_KEY,
        "a header has a null key", E_LENGTH, "a record's length does not match its fields",
        E_TOO_MANY_HEADERS, "more headers than bytes", E_BUFFERS, "output buffers too small");
    if (reasons == NULL || PyModule_AddObject(m, "REASONS", reasons) < 0) {
        Py_XDECREF(reasons);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* The Spark sink's record building in C (moldau.spark.record_build says why).
 *
 * build(key_offsets, key_data, key_nulls, value_offsets, value_data, value_nulls, rows,
 *       header_offsets, header_nulls, hkey_offsets, hkey_data, hvalue_offsets,
 *       hvalue_data, hvalue_nulls)
 *   -> bytes: the records of a v2 batch (uncompressed, timestamp delta 0, offset delta
 *   i) for the rows `rows` (int64) of Arrow binary columns given as their int32
 *   offsets, data and a uint8 null flag per row; key_offsets None: no keys. A row's
 *   headers are entries header_offsets[row]..header_offsets[row + 1] of the header
 *   key and value columns (keys never null), none for a null row; header_offsets
 *   None: no headers column.
 * murmur2(key_offsets, key_data, key_nulls, rows, partitions) -> bytes of int32: Kafka's
 *   Java partitioner (murmur2 of the key, made positive, modulo partitions), -1 for a
 *   null key, for each of the first `rows` rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static char *put_varint(char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (char)z;
    return p;
}

typedef struct {
    const int32_t *offsets;
    const char *data;
    const uint8_t *nulls;
} column;

/* The field's length, -1 for null. */
static int64_t field_len(const column *c, int64_t row) {
    if (c->offsets == NULL || (c->nulls != NULL && c->nulls[row]))
        return -1;
    return (int64_t)c->offsets[row + 1] - c->offsets[row];
}

static int64_t field_size(int64_t len) { return varint_size(len) + (len > 0 ? len : 0); }

static char *put_field(char *p, const column *c, int64_t row, int64_t len) {
    p = put_varint(p, len);
    if (len > 0) {
        memcpy(p, c->data + c->offsets[row], (size_t)len);
        p += len;
    }
    return p;
}

/* nulls NULL: the column has none. */
static int column_of(column *c, Py_buffer *offsets, Py_buffer *data, Py_buffer *nulls) {
    c->offsets = (const int32_t *)offsets->buf;
    c->data = (const char *)data->buf;
    c->nulls = nulls != NULL ? (const uint8_t *)nulls->buf : NULL;
    return 0;
}

typedef struct {
    const int32_t *offsets; /* NULL: no headers column */
    const uint8_t *nulls;
    column keys, values;
} headers;

/* The row's headers: entries [*first, *end). */
static void header_range(const headers *h, int64_t row, int64_t *first, int64_t *end) {
    if (h->offsets == NULL || (h->nulls != NULL && h->nulls[row])) {
        *first = *end = 0;
        return;
    }
    *first = h->offsets[row];
    *end = h->offsets[row + 1];
}

/* The size of the row's header count and headers. */
static int64_t headers_size(const headers *h, int64_t row) {
    int64_t first, end;
    header_range(h, row, &first, &end);
    int64_t size = varint_size(end - first);
    for (int64_t e = first; e < end; e++)
        size += field_size(field_len(&h->keys, e)) + field_size(field_len(&h->values, e));
    return size;
}

static char *put_headers(char *p, const headers *h, int64_t row) {
    int64_t first, end;
    header_range(h, row, &first, &end);
    p = put_varint(p, end - first);
    for (int64_t e = first; e < end; e++) {
        p = put_field(p, &h->keys, e, field_len(&h->keys, e));
        p = put_field(p, &h->values, e, field_len(&h->values, e));
    }
    return p;
}

static PyObject *build(PyObject *self, PyObject *args) {
    Py_buffer ko, kd, kn, vo, vd, vn, rb, ho, hn, hko, hkd, hvo, hvd, hvn;
    if (!PyArg_ParseTuple(args, "z*z*z*y*y*z*y*z*z*z*z*z*z*z*", &ko, &kd, &kn, &vo, &vd, &vn,
                          &rb, &ho, &hn, &hko, &hkd, &hvo, &hvd, &hvn))
        return NULL;
    column key, value;
    column_of(&key, &ko, &kd, &kn);
    column_of(&value, &vo, &vd, &vn);
    headers hs;
    hs.offsets = (const int32_t *)ho.buf;
    hs.nulls = (const uint8_t *)hn.buf;
    column_of(&hs.keys, &hko, &hkd, NULL);
    column_of(&hs.values, &hvo, &hvd, &hvn);
    const int64_t *rows = (const int64_t *)rb.buf;
    Py_ssize_t count = rb.len / (Py_ssize_t)sizeof(int64_t);
    PyObject *out = NULL;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t row = rows[i];
        int64_t body = 2 + varint_size(i) + field_size(field_len(&key, row)) +
                       field_size(field_len(&value, row)) + headers_size(&hs, row);
        total += varint_size(body) + body;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL)
        goto done;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t row = rows[i];
        int64_t klen = field_len(&key, row), vlen = field_len(&value, row);
        int64_t body =
            2 + varint_size(i) + field_size(klen) + field_size(vlen) + headers_size(&hs, row);
        p = put_varint(p, body);
        *p++ = 0; /* attributes */
        *p++ = 0; /* timestamp delta */
        p = put_varint(p, i);
        p = put_field(p, &key, row, klen);
        p = put_field(p, &value, row, vlen);
        p = put_headers(p, &hs, row);
    }
done:
    PyBuffer_Release(&ko);
    PyBuffer_Release(&kd);
    PyBuffer_Release(&kn);
    PyBuffer_Release(&vo);
    PyBuffer_Release(&vd);
    PyBuffer_Release(&vn);
    PyBuffer_Release(&rb);
    PyBuffer_Release(&ho);
    PyBuffer_Release(&hn);
    PyBuffer_Release(&hko);
    PyBuffer_Release(&hkd);
    PyBuffer_Release(&hvo);
    PyBuffer_Release(&hvd);
    PyBuffer_Release(&hvn);
    return out;
}

static uint32_t murmur2_of(const unsigned char *data, int32_t length) {
    const uint32_t m = 0x5bd1e995;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    int32_t quads = length / 4;
    for (int32_t i = 0; i < quads; i++) {
        const unsigned char *q = data + 4 * i;
        uint32_t k = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) |
                     ((uint32_t)q[3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + 4 * quads;
    switch (length % 4) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *murmur2(PyObject *self, PyObject *args) {
    Py_buffer ko, kd, kn;
    Py_ssize_t count;
    int partitions;
    if (!PyArg_ParseTuple(args, "y*y*z*ni", &ko, &kd, &kn, &count, &partitions))
        return NULL;
    PyObject *out = NULL;
    if (partitions <= 0) {
        PyErr_SetString(PyExc_ValueError, "partitions must be positive");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int32_t));
    if (out == NULL)
        goto done;
    int32_t *dest = (int32_t *)PyBytes_AS_STRING(out);
    const int32_t *offsets = (const int32_t *)ko.buf;
    const unsigned char *data = (const unsigned char *)kd.buf;
    const uint8_t *nulls = (const uint8_t *)kn.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (nulls != NULL && nulls[i]) {
            dest[i] = -1;
            continue;
        }
        uint32_t h = murmur2_of(data + offsets[i], offsets[i + 1] - offsets[i]);
        dest[i] = (int32_t)((h & 0x7fffffffu) % (uint32_t)partitions);
    }
done:
    PyBuffer_Release(&ko);
    PyBuffer_Release(&kd);
    PyBuffer_Release(&kn);
    return out;
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS, "The records of a v2 batch from Arrow binary columns."},
    {"murmur2", murmur2, METH_VARARGS, "Kafka's Java partitioner for each key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_build", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_build(void) { return PyModule_Create(&module); }

/* dmq.record._recordcheck: check_records(body, count) -> records with headers, the C walk of
 * dmq.record.check (see that module for the rules and their messages; this file
 * must give the same answer for every input, which a Hypothesis property checks).
 * Sans-io: reads a buffer, raises ValueError or returns how many records have headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { OK = 0, TRUNCATED = 1, TOO_LONG = 2 };

/* A zig-zag varint of at most max_bytes bytes at *pos, read below limit. */
static int read_varint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit,
                       int max_bytes, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (int n = 0; n < max_bytes; n++) {
        if (*pos + n >= limit)
            return TRUNCATED;
        unsigned char b = buf[*pos + n];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            *pos += n + 1;
            return OK;
        }
        shift += 7;
    }
    return TOO_LONG;
}

static PyObject *fail(const char *message)
{
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

#define FIELDS_DO_NOT_FIT "record fields do not fit its length"

/* Read a varint inside the record [.., end): on failure return the error. */
#define FIELD(max_bytes, out)                                                   \
    do {                                                                        \
        int r_ = read_varint(buf, &p, end, (max_bytes), (out));                 \
        if (r_ == TOO_LONG) { result = fail("varint too long"); goto done; }    \
        if (r_ == TRUNCATED) { result = fail(FIELDS_DO_NOT_FIT); goto done; }   \
    } while (0)

/* Skip n >= 0 bytes of the record, compared before adding (n is up to 2^34). */
#define SKIP(n)                                                                 \
    do {                                                                        \
        int64_t n_ = (n);                                                       \
        if (n_ > (int64_t)(end - p)) { result = fail(FIELDS_DO_NOT_FIT); goto done; } \
        p += (Py_ssize_t)n_;                                                    \
    } while (0)

static PyObject *check_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*n", &view, &count))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t size = view.len;
    Py_ssize_t pos = 0;
    Py_ssize_t with_headers = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, value, headers;
        int r = read_varint(buf, &pos, size, 5, &length);
        if (r == TOO_LONG) { result = fail("varint too long"); goto done; }
        if (r == TRUNCATED) { result = fail("record extends past its batch"); goto done; }
        if (length < 0) { result = fail("negative record length"); goto done; }
        if (length > (int64_t)(size - pos)) { result = fail("record extends past its batch"); goto done; }
        const Py_ssize_t end = pos + (Py_ssize_t)length;
        Py_ssize_t p = pos;
        SKIP(1); /* attributes */
        FIELD(10, &value); /* timestamp delta */
        FIELD(5, &value);
        if (value != i) { result = fail("record offset deltas are not 0, 1, 2, ..."); goto done; }
        for (int f = 0; f < 2; f++) { /* key, value */
            FIELD(5, &value);
            if (value < -1) { result = fail("negative key or value length"); goto done; }
            if (value > 0) SKIP(value);
        }
        FIELD(5, &headers);
        if (headers < 0) { result = fail("negative header count"); goto done; }
        if (headers > 0) with_headers++;
        for (int64_t h = 0; h < headers; h++) {
            FIELD(5, &value);
            if (value < 0) { result = fail("negative header key length"); goto done; }
            SKIP(value);
            FIELD(5, &value);
            if (value < -1) { result = fail("negative header value length"); goto done; }
            if (value > 0) SKIP(value);
        }
        if (p != end) { result = fail("record length does not match its fields"); goto done; }
        pos = end;
    }
    if (pos != size) { result = fail("bytes after the last record"); goto done; }
    result = PyLong_FromSsize_t(with_headers);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(body, count): the number of records with headers; ValueError unless\n"
     "body is count well-formed records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordcheck",
    "The C walk of dmq.record.check.check_records.", -1, methods,
};

PyMODINIT_FUNC PyInit__recordcheck(void)
{
    return PyModule_Create(&module);
}

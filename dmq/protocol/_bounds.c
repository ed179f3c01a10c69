/* The C walk of dmq.protocol.bounds: a request frame's counts and lengths against its
 * size, by a plan compiled from kio's schema (see bounds.py for the steps). Same
 * results as bounds._walk_py: the end position, or ValueError with the same message.
 * Reads only bytes in [pos, end) of the buffer it was given. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { FIXED = 0, LEGACY_STRING = 1, LEGACY_BYTES = 2, COMPACT_BYTES = 3, LEGACY_ARRAY = 4,
       COMPACT_ARRAY = 5, ENTITY = 6, NULLABLE_ENTITY = 7, TAGS = 8 };

static Py_ssize_t short_error(void) {
    PyErr_SetString(PyExc_ValueError, "the request ends before its fields do");
    return -1;
}

/* An unsigned varint of at most five bytes at *pos; -1 with ValueError otherwise. */
static long long uvarint(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end) {
    unsigned long long value = 0;
    int shift = 0;
    Py_ssize_t i = *pos, stop = *pos + 5;
    for (; i < stop && i < end; i++) {
        unsigned char c = b[i];
        value |= (unsigned long long)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *pos = i + 1;
            return (long long)value;
        }
        shift += 7;
    }
    if (stop <= end)
        PyErr_SetString(PyExc_ValueError, "a varint in the request runs past five bytes");
    else
        short_error();
    return -1;
}

static long long int_be(const unsigned char *b, Py_ssize_t pos, int width) {
    long long v = (signed char)b[pos];
    for (int k = 1; k < width; k++)
        v = (v << 8) | b[pos + k];
    return v;
}

static Py_ssize_t step(long op, PyObject *arg, const unsigned char *b, Py_ssize_t pos, Py_ssize_t end);

static Py_ssize_t walk(PyObject *plan, const unsigned char *b, Py_ssize_t pos, Py_ssize_t end) {
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *st = PyTuple_GET_ITEM(plan, i);
        pos = step(PyLong_AsLong(PyTuple_GET_ITEM(st, 0)), PyTuple_GET_ITEM(st, 1), b, pos, end);
        if (pos < 0)
            return -1;
    }
    return pos;
}

static Py_ssize_t step(long op, PyObject *arg, const unsigned char *b, Py_ssize_t pos, Py_ssize_t end) {
    long long n;
    switch (op) {
    case FIXED:
        pos += PyLong_AsSsize_t(arg);
        break;
    case COMPACT_BYTES:
        n = uvarint(b, &pos, end);
        if (n < 0)
            return -1;
        if (n)
            pos += (Py_ssize_t)(n - 1);
        break;
    case LEGACY_STRING:
    case LEGACY_BYTES: {
        int width = op == LEGACY_STRING ? 2 : 4;
        if (pos + width > end)
            return short_error();
        n = int_be(b, pos, width);
        pos += width + (n > 0 ? (Py_ssize_t)n : 0);
        break;
    }
    case LEGACY_ARRAY:
    case COMPACT_ARRAY: {
        long long count;
        if (op == COMPACT_ARRAY) {
            count = uvarint(b, &pos, end);
            if (count < 0)
                return -1;
            count -= 1;
        } else {
            if (pos + 4 > end)
                return short_error();
            count = int_be(b, pos, 4);
            pos += 4;
        }
        if (count > (long long)(end - pos)) {
            PyErr_Format(PyExc_ValueError, "an array in the request counts %lld items in %zd bytes",
                         count, end - pos > 0 ? end - pos : 0);
            return -1;
        }
        long item_op = PyLong_AsLong(PyTuple_GET_ITEM(arg, 0));
        PyObject *item_arg = PyTuple_GET_ITEM(arg, 1);
        if (item_op == FIXED) {
            if (count > 0)
                pos += (Py_ssize_t)count * PyLong_AsSsize_t(item_arg);
        } else {
            for (long long k = 0; k < count; k++) {
                pos = step(item_op, item_arg, b, pos, end);
                if (pos < 0)
                    return -1;
            }
        }
        break;
    }
    case ENTITY:
        pos = walk(arg, b, pos, end);
        if (pos < 0)
            return -1;
        break;
    case NULLABLE_ENTITY:
        if (pos + 1 > end)
            return short_error();
        n = (signed char)b[pos];
        pos += 1;
        if (n >= 0) {
            pos = walk(arg, b, pos, end);
            if (pos < 0)
                return -1;
        }
        break;
    case TAGS: {
        long long count = uvarint(b, &pos, end);
        if (count < 0)
            return -1;
        if (count > (long long)(end - pos)) {
            PyErr_Format(PyExc_ValueError, "the request counts %lld tagged fields in %zd bytes",
                         count, end - pos > 0 ? end - pos : 0);
            return -1;
        }
        for (long long k = 0; k < count; k++) {
            long long tag = uvarint(b, &pos, end);
            if (tag < 0)
                return -1;
            long long size = uvarint(b, &pos, end);
            if (size < 0)
                return -1;
            Py_ssize_t stop = pos + (Py_ssize_t)size;
            if (stop > end)
                return short_error();
            PyObject *key = PyLong_FromLongLong(tag);
            if (key == NULL)
                return -1;
            PyObject *st = PyDict_GetItemWithError(arg, key);  /* borrowed */
            Py_DECREF(key);
            if (st == NULL && PyErr_Occurred())
                return -1;
            if (st != NULL &&
                step(PyLong_AsLong(PyTuple_GET_ITEM(st, 0)), PyTuple_GET_ITEM(st, 1), b, pos, stop) < 0)
                return -1;
            pos = stop;
        }
        break;
    }
    default:
        PyErr_Format(PyExc_SystemError, "unknown bounds step %ld", op);
        return -1;
    }
    if (pos > end)
        return short_error();
    return pos;
}

static PyObject *walk_plan(PyObject *self, PyObject *args) {
    PyObject *plan;
    Py_buffer buf;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!y*n", &PyTuple_Type, &plan, &buf, &pos))
        return NULL;
    Py_ssize_t end = buf.len;
    Py_ssize_t out = pos < 0 || pos > end ? short_error() : walk(plan, (const unsigned char *)buf.buf, pos, end);
    PyBuffer_Release(&buf);
    if (out < 0)
        return NULL;
    return PyLong_FromSsize_t(out);
}

static PyMethodDef methods[] = {
    {"walk_plan", walk_plan, METH_VARARGS,
     "walk_plan(plan, frame, pos): the position after walking plan over frame from pos\n"
     "(dmq.protocol.bounds); ValueError where a count or length runs past the frame's end."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bounds", "The C walk of dmq.protocol.bounds.", -1, methods,
};

PyMODINIT_FUNC PyInit__bounds(void) { return PyModule_Create(&module); }

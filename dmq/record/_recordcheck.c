/* dmq.record._recordcheck: three walks over the records of batch bodies, sans-io (each
 * reads buffers and raises ValueError or returns values):
 *
 * check_records(body, count) -> records with headers, the C walk of dmq.record.check (see
 * that module for the rules and their messages);
 * key_entries(body, count, pos, base_offset, segment_base, max_relative, out) -> (pos,
 * keyed, bad_offset), the C walk of dmq.record.records.key_entries_py (the key indexer's:
 * see there for what it returns);
 * record_fields(buf, bodies, out), the fields of every record of a Spark read's batch
 * bodies, the C walk of dmq.spark.arrow_records._fields_np, and gather(...), which
 * copies their keys or values into an Arrow binary column.
 *
 * Each must give the same answer as its Python walk for every input, which Hypothesis
 * properties check (tests/record/test_check.py, tests/record/test_key_entries.py,
 * tests/spark/test_arrow_records.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

/* ---------------------------------------------------------------- record_fields */

enum { F_TS, F_OFF, F_KEY_AT, F_KEY_LEN, F_VAL_AT, F_VAL_LEN, F_HDR_AT, F_HDRS, F_END, N_FIELDS };

/* A zig-zag varint of up to 10 bytes whose value fits in 64 bits (read_varint's tenth byte
 * may carry bits above them, which it drops). */
static int read_varint64(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit, int64_t *out)
{
    if (*pos + 9 < limit && (buf[*pos + 9] & 0x7E) && (buf[*pos] & buf[*pos + 1] & buf[*pos + 2]
            & buf[*pos + 3] & buf[*pos + 4] & buf[*pos + 5] & buf[*pos + 6] & buf[*pos + 7]
            & buf[*pos + 8] & 0x80))
        return TOO_LONG;
    return read_varint(buf, pos, limit, 10, out);
}

/* A zig-zag varint of up to 10 bytes inside [.., end); on failure fail with why. */
#define SPARK_FIELD(out)                                                        \
    do {                                                                        \
        int r_ = read_varint64(buf, &p, end, (out));                            \
        if (r_ == TOO_LONG) { result = fail("varint longer than 64 bits"); goto done; } \
        if (r_ == TRUNCATED) { result = fail(RUN_PAST); goto done; }            \
    } while (0)

#define RUN_PAST "a record's fields run past its end"

/* record_fields(buf, bodies, out): the C walk of dmq.spark.arrow_records (its _fields
 * checks the same and gives the same columns). bodies holds int64 triples (first byte,
 * end, record count) of batch bodies in buf; out is n_fields rows of n int64s (n: the sum
 * of the counts), filled field by field for every record: timestamp delta, offset delta,
 * key position, key length, value position, value length, headers position, header count,
 * record end. Every varint is read as 64 bits (up to 10 bytes, none above bit 63), as numpy
 * reads them. */
static PyObject *record_fields(PyObject *self, PyObject *args)
{
    Py_buffer view, bodies_view, out_view;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*w*", &view, &bodies_view, &out_view))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t size = view.len;
    const int64_t *bodies = (const int64_t *)bodies_view.buf;
    const Py_ssize_t n_bodies = bodies_view.len / (Py_ssize_t)(3 * sizeof(int64_t));
    int64_t *out = (int64_t *)out_view.buf;
    const Py_ssize_t n = out_view.len / (Py_ssize_t)(N_FIELDS * sizeof(int64_t));
    Py_ssize_t i = 0;
    if (bodies_view.len % (Py_ssize_t)(3 * sizeof(int64_t))
        || out_view.len % (Py_ssize_t)(N_FIELDS * sizeof(int64_t))) {
        result = fail("bodies must be int64 triples and out n_fields rows of int64s");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_bodies; k++) {
        const int64_t first = bodies[3 * k], stop = bodies[3 * k + 1], count = bodies[3 * k + 2];
        if (first < 0 || first > stop || stop > (int64_t)size || count < 0) {
            result = fail("a batch body lies outside the buffer");
            goto done;
        }
        Py_ssize_t pos = (Py_ssize_t)first;
        for (int64_t c = 0; c < count; c++) {
            int64_t length, ts, off, key_len, val_len, headers;
            if (i >= n) { result = fail("more records than room for them"); goto done; }
            int r = read_varint64(buf, &pos, (Py_ssize_t)stop, &length);
            if (r == TOO_LONG) { result = fail("varint longer than 64 bits"); goto done; }
            if (r == TRUNCATED) { result = fail("record lengths run past their batch"); goto done; }
            if (length < 0) { result = fail("a record has a negative length"); goto done; }
            if (length > (int64_t)(stop - pos)) {
                result = fail("record lengths do not add up to their batches");
                goto done;
            }
            const Py_ssize_t end = pos + (Py_ssize_t)length;
            Py_ssize_t p = pos;
            if (p >= end) { result = fail(RUN_PAST); goto done; }
            p++; /* attributes */
            SPARK_FIELD(&ts);
            SPARK_FIELD(&off);
            SPARK_FIELD(&key_len);
            const Py_ssize_t key_at = p;
            if (key_len < -1) { result = fail(RUN_PAST); goto done; }
            if (key_len > (int64_t)(end - p)) { result = fail(RUN_PAST); goto done; }
            if (key_len > 0) p += (Py_ssize_t)key_len;
            SPARK_FIELD(&val_len);
            const Py_ssize_t val_at = p;
            if (val_len < -1) { result = fail(RUN_PAST); goto done; }
            if (val_len > (int64_t)(end - p)) { result = fail(RUN_PAST); goto done; }
            if (val_len > 0) p += (Py_ssize_t)val_len;
            SPARK_FIELD(&headers);
            if (headers < 0 || headers > (int64_t)(end - p) / 2) { /* a header takes two bytes at least */
                result = fail(RUN_PAST);
                goto done;
            }
            out[F_TS * n + i] = ts;
            out[F_OFF * n + i] = off;
            out[F_KEY_AT * n + i] = key_at;
            out[F_KEY_LEN * n + i] = key_len;
            out[F_VAL_AT * n + i] = val_at;
            out[F_VAL_LEN * n + i] = val_len;
            out[F_HDR_AT * n + i] = p;
            out[F_HDRS * n + i] = headers;
            out[F_END * n + i] = end;
            i++;
            pos = end;
        }
        if (pos != (Py_ssize_t)stop) {
            result = fail("record lengths do not add up to their batches");
            goto done;
        }
    }
    if (i != n) { result = fail("fewer records than room for them"); goto done; }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&bodies_view);
    PyBuffer_Release(&out_view);
    return result;
}

/* gather(buf, at, length, offsets, data): an Arrow binary column's offsets and data from the
 * byte ranges [at[i], at[i] + length[i]) of buf (length -1: a null, no bytes). at and length
 * are n int64s, offsets n + 1 int32s and data exactly the ranges' total size. */
static PyObject *gather(PyObject *self, PyObject *args)
{
    Py_buffer view, at_view, len_view, off_view, data_view;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*", &view, &at_view, &len_view, &off_view, &data_view))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const int64_t *at = (const int64_t *)at_view.buf;
    const int64_t *length = (const int64_t *)len_view.buf;
    int32_t *offsets = (int32_t *)off_view.buf;
    unsigned char *data = (unsigned char *)data_view.buf;
    const Py_ssize_t n = at_view.len / (Py_ssize_t)sizeof(int64_t);
    int64_t filled = 0;
    if (len_view.len != at_view.len || off_view.len != (n + 1) * (Py_ssize_t)sizeof(int32_t)
        || at_view.len % (Py_ssize_t)sizeof(int64_t)) {
        result = fail("at and length must be n int64s and offsets n + 1 int32s");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t a = at[i], l = length[i];
        offsets[i] = (int32_t)filled;
        if (l <= 0)
            continue;
        if (a < 0 || a > (int64_t)view.len || l > (int64_t)view.len - a
            || l > (int64_t)data_view.len - filled || filled + l > INT32_MAX) {
            result = fail("a range lies outside the buffer or the column");
            goto done;
        }
        memcpy(data + filled, buf + a, (size_t)l);
        filled += l;
    }
    if (filled != (int64_t)data_view.len) { result = fail("the ranges do not fill the column"); goto done; }
    offsets[n] = (int32_t)filled;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&at_view);
    PyBuffer_Release(&len_view);
    PyBuffer_Release(&off_view);
    PyBuffer_Release(&data_view);
    return result;
}

/* ---------------------------------------------------------------- key_entries */

/* It reads varints of up to 70 bits exactly, as Python does, in 128-bit integers; a
 * compiler without them builds check_records alone (dmq then uses the Python walk). */
#ifdef __SIZEOF_INT128__
#define HAVE_KEY_ENTRIES 1

typedef __int128 i128;
typedef unsigned __int128 u128;

static uint32_t crc32c_table[256];

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[i] = c;
    }
}

/* CRC-32C (Castagnoli) as the crc32c package computes it: the key index's key hash. */
static uint32_t crc32c_of(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n-- > 0)
        c = crc32c_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* read_varint of dmq.record.records: up to 10 bytes (70 bits, exact in 128), read below
 * size; 0, or -1 with ValueError set. */
static int kvarint(const unsigned char *buf, Py_ssize_t size, Py_ssize_t *pos, i128 *out)
{
    u128 result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= size) {
            PyErr_SetString(PyExc_ValueError, "truncated varint");
            return -1;
        }
        unsigned char b = buf[p++];
        result |= (u128)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
        if (shift > 63) {
            PyErr_SetString(PyExc_ValueError, "varint too long");
            return -1;
        }
    }
    *out = (i128)(result >> 1) ^ -(i128)(result & 1);
    *pos = p;
    return 0;
}

static PyObject *int128_to_pylong(i128 v)
{
    if (v >= INT64_MIN && v <= INT64_MAX)
        return PyLong_FromLongLong((long long)v);
    /* Only a damaged varint gets here: |v| < 2^70. */
    int negative = v < 0;
    u128 m = negative ? (u128)(-v) : (u128)v;
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(m >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)m);
    PyObject *sixty_four = PyLong_FromLong(64);
    PyObject *shifted = (hi && sixty_four) ? PyNumber_Lshift(hi, sixty_four) : NULL;
    PyObject *sum = (shifted && lo) ? PyNumber_Or(shifted, lo) : NULL;
    PyObject *result = NULL;
    if (sum != NULL && negative)
        result = PyNumber_Negative(sum);
    else if (sum != NULL) {
        Py_INCREF(sum);
        result = sum;
    }
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(sixty_four);
    Py_XDECREF(shifted);
    Py_XDECREF(sum);
    return result;
}

static PyObject *key_entries(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count, pos;
    long long base_offset, segment_base, max_relative;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "y*nnLLLO!", &view, &count, &pos, &base_offset, &segment_base,
                          &max_relative, &PyList_Type, &out))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t size = view.len;
    PyObject *result = NULL;
    PyObject *bad = NULL;
    Py_ssize_t keyed = 0;
#define AT(i) do { if ((i) < 0 || (i) >= size) goto truncated; } while (0)
    for (Py_ssize_t r = 0; r < count; r++) {
        i128 length, value, key_length;
        Py_ssize_t p;
        if (pos < 0) goto truncated;
        const Py_ssize_t start = pos; /* the record's, returned when its offset is too far */
        if (kvarint(buf, size, &pos, &length) < 0) goto done;
        if (length < 0 || length > (i128)(size - pos)) {
            PyErr_SetString(PyExc_ValueError, "record extends past its batch");
            goto done;
        }
        const Py_ssize_t end = pos + (Py_ssize_t)length;
        p = pos + 1; /* after the attributes byte */
        AT(p);
        if (buf[p] < 0x80)
            p += 1;
        else if (kvarint(buf, size, &p, &value) < 0)
            goto done; /* the timestamp delta, skipped */
        const Py_ssize_t delta_at = p;
        for (;;) { /* the offset delta, decoded only for a record with a key */
            AT(p);
            if (!(buf[p] & 0x80))
                break;
            p++;
        }
        AT(p + 1);
        unsigned char b = buf[p + 1];
        if (b < 0x80) {
            if (b & 1) { /* a negative length: no key */
                pos = end;
                continue;
            }
            key_length = b >> 1;
            p += 2;
        } else {
            p += 1;
            AT(p + 1); /* the two-byte case reads its second byte first */
            if (kvarint(buf, size, &p, &key_length) < 0) goto done;
        }
        Py_ssize_t d = delta_at;
        AT(d);
        if (buf[d] >= 0x80)
            AT(d + 1);
        if (kvarint(buf, size, &d, &value) < 0) goto done;
        if (key_length >= 0) {
            if (key_length > (i128)(end - p)) {
                PyErr_SetString(PyExc_ValueError, "record key extends past its record");
                goto done;
            }
            i128 offset = (i128)base_offset + value;
            i128 relative = offset - segment_base;
            if (relative < 0 || relative > max_relative) {
                bad = int128_to_pylong(offset);
                if (bad == NULL) goto done;
                result = Py_BuildValue("(nnN)", start, keyed, bad);
                goto done;
            }
            uint64_t entry = ((uint64_t)crc32c_of(buf + p, (Py_ssize_t)key_length) << 32) | (uint64_t)relative;
            PyObject *e = PyLong_FromUnsignedLongLong(entry);
            if (e == NULL || PyList_Append(out, e) < 0) {
                Py_XDECREF(e);
                goto done;
            }
            Py_DECREF(e);
            keyed++;
        }
        pos = end;
    }
    result = Py_BuildValue("(nnO)", pos, keyed, Py_None);
    goto done;
truncated:
    PyErr_SetString(PyExc_ValueError, "truncated record");
done:
#undef AT
    PyBuffer_Release(&view);
    return result;
}

#endif /* __SIZEOF_INT128__ */

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(body, count): the number of records with headers; ValueError unless\n"
     "body is count well-formed records."},
    {"gather", gather, METH_VARARGS,
     "gather(buf, at, length, offsets, data): an Arrow binary column of byte ranges of buf."},
    {"record_fields", record_fields, METH_VARARGS,
     "record_fields(buf, bodies, out): the C walk of dmq.spark.arrow_records (see there)."},
#ifdef HAVE_KEY_ENTRIES
    {"key_entries", key_entries, METH_VARARGS,
     "key_entries(body, count, pos, base_offset, segment_base, max_relative, out): the C\n"
     "walk of dmq.record.records.key_entries_py."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordcheck",
    "The C walks of dmq.record.check.check_records, dmq.record.records.key_entries_py and\n"
    "dmq.spark.arrow_records._fields_np.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__recordcheck(void)
{
    crc32c_init();
    return PyModule_Create(&module);
}

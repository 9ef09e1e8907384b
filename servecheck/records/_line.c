/*
 * servecheck.records._line: a record's dict and JSON line in C (optional).
 *
 *   floats6(values) -> str | None
 *   record(keys, values, ...) -> (dict, line) | None: a whole record (see record() below)
 *   rounded6(values) -> [round(v, 6) for v in values]
 *   rounded6_json(values) -> str | None: their JSON array, as json.dumps writes it
 *   (each held to its Python reference by tests/load/test_record_line.py and test_keeper_fast.py)
 *
 * floats6 gives the same text as records.record._floats6_py, the reference: "[" + "%.6f" of each value joined by
 * "," + "]". Why: the ITL array is the largest part of a request's line (64 tokens: 63 values),
 * and Python's "%" spends about 130 ns a value in its correctly rounded printf (issue 46: about
 * 8 us of the record keeper's 50 us a request). An earlier try that called printf from C gained
 * nothing, since printf's rounding was the cost. Here a value below 10^4 seconds is written from
 * its microseconds as an integer: rounded from v * 1e6, which is within 2e-6 of the exact product
 * there, so its rounding is the exact one unless the fraction is that close to one half; such a
 * value, and every other (larger, NaN, infinite), goes through PyOS_double_to_string, which is
 * what Python's own "%.6f" calls. A list or tuple holding anything but floats gives None: the
 * caller formats it in Python (an int's "%.6f" is Python's business).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FAST_BELOW 1e4   /* seconds: v * 1e6 < 2^34, so its rounding error is below 1e-6 */
#define HALF_MARGIN 4e-6 /* a fraction this close to one half is left to the exact path */
#define SLOT 32          /* the most one value takes here: sign, 4 + 1 + 6 digits, comma */

/* Write "%.6f" of v at out; returns the length, or -1 with an exception set. */
static Py_ssize_t format6(double v, char *out, char **big) {
    double a = fabs(v);
    if (a < FAST_BELOW) {
        double s = a * 1e6, whole = floor(s), frac = s - whole;
        if (fabs(frac - 0.5) > HALF_MARGIN) {
            uint64_t q = (uint64_t)whole + (frac > 0.5);
            uint64_t ipart = q / 1000000u, fpart = q % 1000000u;
            char digits[24];
            int nd = 0;
            do {
                digits[nd++] = (char)('0' + ipart % 10u);
                ipart /= 10u;
            } while (ipart);
            char *p = out;
            if (signbit(v)) *p++ = '-';
            while (nd) *p++ = digits[--nd];
            *p++ = '.';
            for (int i = 5; i >= 0; i--) {
                p[i] = (char)('0' + fpart % 10u);
                fpart /= 10u;
            }
            return (Py_ssize_t)(p + 6 - out);
        }
    }
    char *text = PyOS_double_to_string(v, 'f', 6, 0, NULL);
    if (text == NULL) return -1;
    *big = text; /* may be longer than a slot: the caller copies it */
    return (Py_ssize_t)strlen(text);
}

static PyObject *floats6(PyObject *self, PyObject *values) {
    (void)self;
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values)) Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    PyObject **items = PySequence_Fast_ITEMS(values);
    if (n == 0) return PyUnicode_FromStringAndSize("[]", 2);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyFloat_CheckExact(items[i])) Py_RETURN_NONE;
    size_t cap = (size_t)n * SLOT + 2, len = 0;
    char *buf = PyMem_Malloc(cap);
    if (buf == NULL) return PyErr_NoMemory();
    buf[len++] = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        char *big = NULL;
        if (i) buf[len++] = ',';
        Py_ssize_t w = format6(PyFloat_AS_DOUBLE(items[i]), buf + len, &big);
        if (w < 0) {
            PyMem_Free(buf);
            return NULL;
        }
        if (big != NULL) {
            size_t need = len + (size_t)w + (size_t)(n - i) * SLOT + 2;
            if (need > cap) {
                char *grown = PyMem_Realloc(buf, need);
                if (grown == NULL) {
                    PyMem_Free(buf);
                    PyMem_Free(big);
                    return PyErr_NoMemory();
                }
                buf = grown;
                cap = need;
            }
            memcpy(buf + len, big, (size_t)w);
            PyMem_Free(big);
        }
        len += (size_t)w;
    }
    buf[len++] = ']';
    PyObject *out = PyUnicode_DecodeASCII(buf, (Py_ssize_t)len, NULL);
    PyMem_Free(buf);
    return out;
}

/* ------------------------------------------------------------------ record(): a whole line */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_need(Buf *b, size_t more) {
    if (b == NULL || b->len + more <= b->cap) return 0; /* NULL: the dict alone, no line */
    size_t cap = (b->cap ? b->cap : 256) * 2;
    while (cap < b->len + more) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, size_t n) {
    if (b == NULL) return 0;
    if (buf_need(b, n) < 0) return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

#define SKIP 1 /* a value this writer leaves to Python: record() answers None */

/* A str the encoder writes as it is ("..." with no escape: printable ASCII, no quote or
 * backslash); anything else is left to the encoder (SKIP). */
static int put_string(Buf *b, PyObject *s) {
    if (!PyUnicode_IS_ASCII(s)) return SKIP;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const char *c = (const char *)PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++)
        if (c[i] < 0x20 || c[i] == '"' || c[i] == '\\' || c[i] == 0x7f) return SKIP;
    if (buf_need(b, (size_t)n + 2) < 0) return -1;
    b->p[b->len++] = '"';
    memcpy(b->p + b->len, c, (size_t)n);
    b->len += (size_t)n;
    b->p[b->len++] = '"';
    return 0;
}

/* A float as the encoder writes it: float.__repr__ when finite, else NaN / Infinity. */
static int put_float(Buf *b, double v) {
    if (!isfinite(v)) {
        const char *t = v != v ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
        return buf_put(b, t, strlen(t));
    }
    char *text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL) return -1;
    int bad = buf_put(b, text, strlen(text));
    PyMem_Free(text);
    return bad;
}

static int put_int(Buf *b, PyObject *v) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) return SKIP;
    if (x == -1 && PyErr_Occurred()) return -1;
    char text[32];
    int n = snprintf(text, sizeof text, "%lld", x);
    return buf_put(b, text, (size_t)n);
}

/* None, a bool, an int, a float, a str: what the encoder writes of it. */
static int put_scalar(Buf *b, PyObject *v) {
    if (v == Py_None) return buf_put(b, "null", 4);
    if (v == Py_True) return buf_put(b, "true", 4);
    if (v == Py_False) return buf_put(b, "false", 5);
    if (PyFloat_CheckExact(v)) return put_float(b, PyFloat_AS_DOUBLE(v));
    if (PyLong_CheckExact(v)) return put_int(b, v);
    if (PyUnicode_CheckExact(v)) return put_string(b, v);
    return SKIP;
}

/* A flat dict of str keys and scalars (the stamps, the server timings). */
static int put_dict(Buf *b, PyObject *d) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    int first = 1, got;
    if (buf_put(b, "{", 1) < 0) return -1;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) return SKIP;
        if (!first && buf_put(b, ",", 1) < 0) return -1;
        first = 0;
        if ((got = put_string(b, k)) != 0) return got;
        if (buf_put(b, ":", 1) < 0) return -1;
        if ((got = put_scalar(b, v)) != 0) return got;
    }
    return buf_put(b, "}", 1);
}

/* round(v, 6) for a float, and its repr written: where v * 1e6 (exact with its FMA error) is not
 * within 1e-9 of a half, is below 2^31 seconds (a microsecond is then more than four of the
 * double's steps, so the six-decimal text is the shortest repr) and rounds to 0 or to at least
 * 1e-4 (repr writes smaller ones with an exponent), the rounded microseconds are written as digits;
 * every other value goes through Python's own round() and repr. Returns the rounded float (a new
 * reference), or NULL with an exception set. */
static PyObject *round6(Buf *b, PyObject *obj) {
    double v = PyFloat_AS_DOUBLE(obj), a = fabs(v);
    if (a < 2147483648.0) {
        double s = a * 1e6, err = fma(a, 1e6, -s), whole = floor(s), frac = (s - whole) + err;
        if (frac < 0.0) {
            whole -= 1.0;
            frac += 1.0;
        } else if (frac >= 1.0) {
            whole += 1.0;
            frac -= 1.0;
        }
        uint64_t q = (uint64_t)whole + (frac > 0.5);
        if (fabs(frac - 0.5) > 1e-9 && (q == 0 || q >= 100)) {
            if (b == NULL) return PyFloat_FromDouble(copysign((double)q / 1e6, v)); /* no line */
            char text[40], *p = text;
            if (signbit(v)) *p++ = '-';
            uint64_t ip = q / 1000000u, fp = q % 1000000u;
            p += snprintf(p, 24, "%llu", (unsigned long long)ip);
            *p++ = '.';
            char dec[6];
            for (int i = 5; i >= 0; i--) {
                dec[i] = (char)('0' + fp % 10u);
                fp /= 10u;
            }
            int keep = 6;
            while (keep > 1 && dec[keep - 1] == '0') keep--;
            memcpy(p, dec, (size_t)keep);
            p += keep;
            if (buf_put(b, text, (size_t)(p - text)) < 0) return NULL;
            return PyFloat_FromDouble(copysign((double)q / 1e6, v));
        }
    }
    PyObject *r = PyObject_CallMethod(obj, "__round__", "i", 6);
    if (r == NULL) return NULL;
    if (put_float(b, PyFloat_AS_DOUBLE(r)) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

/* One field's value written and the dict's value for it (a new reference), or NULL: an error
 * (set), or SKIP (*skip set). */
static PyObject *put_field(Buf *b, PyObject *v, int rounded, int itls, int *skip) {
    int got;
    if (rounded && PyFloat_CheckExact(v)) return round6(b, v);
    if (b == NULL) { /* the dict alone: every value as it is, but what round() would change */
        if (rounded && !(v == Py_None || PyLong_CheckExact(v))) {
            *skip = 1;
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    if (itls) {
        PyObject *text = (PyList_CheckExact(v) || PyTuple_CheckExact(v)) ? floats6(NULL, v) : NULL;
        if (text == NULL || text == Py_None) {
            if (text == NULL && PyErr_Occurred()) return NULL;
            Py_XDECREF(text);
            *skip = 1;
            return NULL;
        }
        Py_ssize_t n;
        const char *c = PyUnicode_AsUTF8AndSize(text, &n);
        got = c == NULL ? -1 : buf_put(b, c, (size_t)n);
        Py_DECREF(text);
    } else if (PyDict_CheckExact(v)) {
        got = put_dict(b, v);
    } else if (rounded && !(v == Py_None || PyLong_CheckExact(v))) {
        got = SKIP; /* round() of a bool or a subclass: Python's business */
    } else {
        got = put_scalar(b, v);
    }
    if (got == SKIP) *skip = 1;
    if (got != 0) return NULL;
    Py_INCREF(v);
    return v;
}

/* record(keys, values, required, rounded, itls_at, line) -> (dict, line or None) or None.
 *
 * The dict and JSON line of a record given as its keys and values, in order: the first
 * `required` always, the rest only when not None; the values at the bits of `rounded` as
 * round(v, 6), the list at `itls_at` as floats6(). None where a value is not one this writer
 * knows (records.record._reference_encoded writes the record then; it is the reference). */
static PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "record(keys, values, required, rounded, itls_at, line)");
        return NULL;
    }
    PyObject *keys = args[0], *values = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(keys), required = PyLong_AsSsize_t(args[2]);
    unsigned long long mask = PyLong_AsUnsignedLongLongMask(args[3]);
    Py_ssize_t itls_at = PyLong_AsSsize_t(args[4]);
    int want = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || want < 0) return NULL;
    if (PyTuple_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "record(): as many values as keys");
        return NULL;
    }
    Buf line_buf = {NULL, 0, 0}, *bp = want ? &line_buf : NULL;
    PyObject *d = PyDict_New();
    if (d == NULL || buf_put(bp, "{", 1) < 0) goto fail;
    int skip = 0, first = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i), *v = PyTuple_GET_ITEM(values, i);
        if (i >= required && v == Py_None) continue;
        if (!PyUnicode_CheckExact(k)) goto skipped;
        if (!first && buf_put(bp, ",", 1) < 0) goto fail;
        first = 0;
        int got = bp == NULL ? 0 : put_string(bp, k);
        if (got == SKIP) goto skipped;
        if (got < 0 || buf_put(bp, ":", 1) < 0) goto fail;
        int rounded = i < 64 && (mask >> i) & 1u;
        PyObject *dv = put_field(bp, v, rounded, i == itls_at, &skip);
        if (dv == NULL) {
            if (skip) goto skipped;
            goto fail;
        }
        got = PyDict_SetItem(d, k, dv);
        Py_DECREF(dv);
        if (got < 0) goto fail;
    }
    if (buf_put(bp, "}", 1) < 0) goto fail;
    PyObject *line = Py_None;
    if (want) {
        line = PyUnicode_DecodeASCII(line_buf.p, (Py_ssize_t)line_buf.len, NULL);
        if (line == NULL) goto fail;
    } else {
        Py_INCREF(line);
    }
    PyMem_Free(line_buf.p);
    return Py_BuildValue("(NN)", d, line);
skipped:
    PyMem_Free(line_buf.p);
    Py_DECREF(d);
    Py_RETURN_NONE;
fail:
    PyMem_Free(line_buf.p);
    Py_XDECREF(d);
    return NULL;
}

/* rounded6(values) -> [round(v, 6) for v in values] (records.record.rounded6_py, the reference):
 * the checkpoint's reservoirs, 10^4 values each, were a quarter of its cost in round() alone. */
static PyObject *rounded6(PyObject *self, PyObject *values) {
    (void)self;
    PyObject *seq = PySequence_Fast(values, "rounded6() needs an iterable of numbers");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = items[i];
        PyObject *r = PyFloat_CheckExact(v) ? round6(NULL, v) : PyObject_CallMethod(v, "__round__", "i", 6);
        if (r == NULL) goto fail;
        PyList_SET_ITEM(out, i, r);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* rounded6_json(values) -> the JSON array of round(v, 6) of each float, as json.dumps writes
 * it, or None (not all floats): a checkpoint's reservoirs, written into its state's text. */
static PyObject *rounded6_json(PyObject *self, PyObject *values) {
    (void)self;
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values)) Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    PyObject **items = PySequence_Fast_ITEMS(values);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyFloat_CheckExact(items[i])) Py_RETURN_NONE;
    Buf b = {NULL, 0, 0};
    if (buf_put(&b, "[", 1) < 0) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && buf_put(&b, ",", 1) < 0) goto fail;
        PyObject *r = round6(&b, items[i]);
        if (r == NULL) goto fail;
        Py_DECREF(r);
    }
    if (buf_put(&b, "]", 1) < 0) goto fail;
    PyObject *out = PyUnicode_DecodeASCII(b.p, (Py_ssize_t)b.len, NULL);
    PyMem_Free(b.p);
    return out;
fail:
    PyMem_Free(b.p);
    return NULL;
}

static PyMethodDef methods[] = {
    {"floats6", floats6, METH_O,
     "floats6(values) -> the JSON array of '%.6f' of each float, or None (not all floats)."},
    {"rounded6", rounded6, METH_O, "rounded6(values) -> [round(v, 6) for v in values]"},
    {"rounded6_json", rounded6_json, METH_O,
     "rounded6_json(values) -> the JSON array of round(v, 6) of each float, or None."},
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL,
     "record(keys, values, required, rounded, itls_at, line) -> (dict, line or None), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_line",
    "The records line's ITL array in C (servecheck/records/_line.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__line(void) { return PyModule_Create(&module); }

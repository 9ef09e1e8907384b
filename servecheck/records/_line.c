/*
 * servecheck.records._line: the records line's ITL array in C (optional).
 *
 *   floats6(values) -> str | None
 *
 * The same text as records.record._floats6_py, the reference: "[" + "%.6f" of each value joined by
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

static PyMethodDef methods[] = {
    {"floats6", floats6, METH_O,
     "floats6(values) -> the JSON array of '%.6f' of each float, or None (not all floats)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_line",
    "The records line's ITL array in C (servecheck/records/_line.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__line(void) { return PyModule_Create(&module); }

/*
 * servecheck.analysis._hdrfast: the streaming summary's per-token conversion in C (optional).
 *
 * Why: every finished request's inter-token latencies become HDR bucket keys once (then counted
 * into the whole run's, its slice's and its phase's histograms). In Python that is three list
 * comprehensions over the tokens, about 11 us for 64 tokens; this is about 1 us. It is an exact
 * replacement: the pure-Python stats.prepare_py stays the reference, is used where this module is
 * not built, and tests/load/test_hdrfast.py checks that both give the same results. (The records
 * line's "%.6f" array was tried here too, with printf: no faster than Python's, whose time is
 * printf's own; servecheck/records/_line.c now writes it without printf.)
 *
 *   prepare(values) -> (keys, total_us, lo_us, hi_us, clipped)
 *   record_each(values, hists): the values into each Hist of a tuple (a request's ITLs)
 *   feed(values, kept, size, seen, next, w, rng): a reservoir's add_many (aggregate.Reservoir)
 *   (these two, the record keeper's short path of issue 46: tests/load/test_keeper_fast.py)
 *
 * The bucket key of a microsecond value u: s = bitlen(u | 2047) - 11; key = (s << 11) | (u >> s)
 * (2048 sub-buckets per power of two: three significant decimal digits, as stats.py says).
 *
 *   Hist: the core of stats.Histogram with its counts in C (issue 46). The record keeper puts
 *   every finished request into about twenty histograms (the run's, its slice's, the client
 *   counts', each latency metric): in Python each value cost a method call, a few integer
 *   operations and a dict update of boxed ints; the per-request sum of those was a quarter of
 *   the keeper's cost. Here the counts are an open-addressing table of (uint32 key, uint64
 *   count), a value is one call, and a request's ITLs (already prepare()d) are one call. What
 *   touches the counts bucket by bucket is here too (add, subtract, copy, the buckets in key
 *   order: the master merges every worker's slices, and a dict round trip made merges 4x
 *   slower); state, percentiles and the HDR encoding are stats.py's, written once over items() /
 *   buckets() / load(). stats._PyCore is the reference for every method here, and
 *   tests/load/test_hdrfast.py runs the two side by side.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LOWEST_US 1LL
#define HIGHEST_US (3600LL * 1000000LL) /* one hour, as stats.py _HIGHEST_US */

static int bitlen(unsigned long long x) { return x ? 64 - __builtin_clzll(x) : 0; }

static long long bucket_key(long long u) {
    int s = bitlen((unsigned long long)(u | 2047)) - 11;
    return ((long long)s << 11) | (u >> s);
}

/* One value as Python's int(v * 1e6 + 0.5) then clamped to [LOWEST_US, HIGHEST_US]. Returns 0 for
 * a value to skip (None, NaN), 1 for a value, -1 with an exception set (not a number, infinite). */
static int to_us(PyObject *item, long long *out, int *clipped) {
    if (item == Py_None) return 0;
    double v = PyFloat_Check(item) ? PyFloat_AS_DOUBLE(item) : PyFloat_AsDouble(item);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    if (v != v) return 0; /* NaN: skipped, as `v == v` skips it */
    double d = v * 1e6 + 0.5;
    if (isinf(d)) {
        PyErr_SetString(PyExc_OverflowError, "cannot convert float infinity to integer");
        return -1;
    }
    d = trunc(d); /* int() truncates toward zero */
    if (d > (double)HIGHEST_US) {
        *out = HIGHEST_US;
        *clipped += 1;
    } else if (d < (double)LOWEST_US) {
        *out = LOWEST_US;
    } else {
        *out = (long long)d;
    }
    return 1;
}

static PyObject *prepare(PyObject *self, PyObject *values) {
    (void)self;
    PyObject *seq = PySequence_Fast(values, "prepare() needs an iterable of numbers");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *keys = PyList_New(0);
    if (keys == NULL) goto fail;
    long long total = 0, lo = 0, hi = 0;
    int clipped = 0;
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long u;
        int got = to_us(items[i], &u, &clipped);
        if (got < 0) goto fail;
        if (got == 0) continue;
        PyObject *key = PyLong_FromLongLong(bucket_key(u));
        if (key == NULL) goto fail;
        int bad = PyList_Append(keys, key);
        Py_DECREF(key);
        if (bad) goto fail;
        total += u;
        if (kept == 0 || u < lo) lo = u;
        if (kept == 0 || u > hi) hi = u;
        kept++;
    }
    Py_DECREF(seq);
    return Py_BuildValue("(NLLLi)", keys, total, lo, hi, clipped);
fail:
    Py_XDECREF(keys);
    Py_DECREF(seq);
    return NULL;
}


/* ------------------------------------------------------------------ Hist (a histogram's core) */

#define EMPTY 0xFFFFFFFFu

typedef struct {
    PyObject_HEAD
    uint32_t *keys;
    unsigned long long *counts;
    Py_ssize_t cap;  /* a power of two, or 0 before the first value */
    Py_ssize_t used; /* distinct keys */
    long long n, sum_us, lo, hi, clipped;
} Hist;

static int hist_grow(Hist *h);

static int hist_bump(Hist *h, uint32_t key, unsigned long long c) {
    if ((h->used + 1) * 4 > h->cap * 3 && hist_grow(h) < 0) return -1;
    Py_ssize_t mask = h->cap - 1;
    Py_ssize_t i = (Py_ssize_t)((key * 2654435761u) & (uint32_t)mask);
    while (h->keys[i] != EMPTY) {
        if (h->keys[i] == key) {
            h->counts[i] += c;
            return 0;
        }
        i = (i + 1) & mask;
    }
    h->keys[i] = key;
    h->counts[i] = c;
    h->used++;
    return 0;
}

static int hist_grow(Hist *h) {
    Py_ssize_t old_cap = h->cap, cap = old_cap ? old_cap * 2 : 64;
    uint32_t *old_keys = h->keys;
    unsigned long long *old_counts = h->counts;
    uint32_t *keys = PyMem_Malloc(sizeof(uint32_t) * (size_t)cap);
    unsigned long long *counts = PyMem_Malloc(sizeof(unsigned long long) * (size_t)cap);
    if (keys == NULL || counts == NULL) {
        PyMem_Free(keys);
        PyMem_Free(counts);
        PyErr_NoMemory();
        return -1;
    }
    memset(keys, 0xFF, sizeof(uint32_t) * (size_t)cap);
    h->keys = keys;
    h->counts = counts;
    h->cap = cap;
    h->used = 0;
    for (Py_ssize_t i = 0; i < old_cap; i++)
        if (old_keys[i] != EMPTY) hist_bump(h, old_keys[i], old_counts[i]);
    PyMem_Free(old_keys);
    PyMem_Free(old_counts);
    return 0;
}

static void hist_clear(Hist *h) {
    PyMem_Free(h->keys);
    PyMem_Free(h->counts);
    h->keys = NULL;
    h->counts = NULL;
    h->cap = h->used = 0;
    h->n = h->sum_us = h->clipped = h->hi = 0;
    h->lo = HIGHEST_US + 1;
}

static int hist_init(Hist *h, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "Hist() takes no arguments");
        return -1;
    }
    hist_clear(h);
    return 0;
}

static void hist_dealloc(Hist *h) {
    PyMem_Free(h->keys);
    PyMem_Free(h->counts);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* record(seconds): as stats._PyCore.record (int(seconds * 1e6 + 0.5), clamped, clipped above). */
static PyObject *hist_record(Hist *h, PyObject *value) {
    double v = PyFloat_Check(value) ? PyFloat_AS_DOUBLE(value) : PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    double d = v * 1e6 + 0.5;
    if (d != d) {
        PyErr_SetString(PyExc_ValueError, "cannot convert float NaN to integer");
        return NULL;
    }
    if (isinf(d)) {
        PyErr_SetString(PyExc_OverflowError, "cannot convert float infinity to integer");
        return NULL;
    }
    d = trunc(d);
    long long us;
    if (d < (double)LOWEST_US) {
        us = LOWEST_US;
    } else if (d > (double)HIGHEST_US) {
        us = HIGHEST_US;
        h->clipped++;
    } else {
        us = (long long)d;
    }
    if (hist_bump(h, (uint32_t)bucket_key(us), 1) < 0) return NULL;
    h->sum_us += us;
    h->n++;
    if (us < h->lo) h->lo = us;
    if (us > h->hi) h->hi = us;
    Py_RETURN_NONE;
}

/* record_prepared((keys, total, lo, hi, clipped)): as stats._PyCore.record_prepared. */
static PyObject *hist_record_prepared(Hist *h, PyObject *p) {
    PyObject *keys;
    long long total, lo, hi, clipped;
    if (!PyArg_ParseTuple(p, "O!LLLL", &PyList_Type, &keys, &total, &lo, &hi, &clipped)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (n == 0) Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long k = PyLong_AsLongLong(PyList_GET_ITEM(keys, i));
        if (k == -1 && PyErr_Occurred()) return NULL;
        if (k < 0 || k >= (long long)EMPTY) {
            PyErr_SetString(PyExc_ValueError, "a bucket key out of range");
            return NULL;
        }
        if (hist_bump(h, (uint32_t)k, 1) < 0) return NULL;
    }
    h->n += n;
    h->sum_us += total;
    h->clipped += clipped;
    if (lo < h->lo) h->lo = lo;
    if (hi > h->hi) h->hi = hi;
    Py_RETURN_NONE;
}

/* buckets() -> {key: count}: the counts for stats.py's cold paths (state, merges, percentiles). */
static PyObject *hist_buckets(Hist *h, PyObject *unused) {
    (void)unused;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (Py_ssize_t i = 0; i < h->cap; i++) {
        if (h->keys[i] == EMPTY) continue;
        PyObject *k = PyLong_FromUnsignedLong(h->keys[i]);
        PyObject *c = PyLong_FromUnsignedLongLong(h->counts[i]);
        int bad = k == NULL || c == NULL || PyDict_SetItem(d, k, c) < 0;
        Py_XDECREF(k);
        Py_XDECREF(c);
        if (bad) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* load(buckets, sum_us, clipped, lo, hi): replace the whole state (count = the counts' sum). */
static PyObject *hist_load(Hist *h, PyObject *args) {
    PyObject *d;
    long long sum_us, clipped, lo, hi;
    if (!PyArg_ParseTuple(args, "O!LLLL", &PyDict_Type, &d, &sum_us, &clipped, &lo, &hi)) return NULL;
    hist_clear(h);
    PyObject *k, *c;
    Py_ssize_t pos = 0;
    long long n = 0;
    while (PyDict_Next(d, &pos, &k, &c)) {
        long long key = PyLong_AsLongLong(k);
        long long count = PyLong_AsLongLong(c);
        if ((key == -1 || count == -1) && PyErr_Occurred()) return NULL;
        if (key < 0 || key >= (long long)EMPTY || count < 0) {
            PyErr_SetString(PyExc_ValueError, "a bucket key or count out of range");
            return NULL;
        }
        if (count == 0) continue;
        if (hist_bump(h, (uint32_t)key, (unsigned long long)count) < 0) return NULL;
        n += count;
    }
    h->n = n;
    h->sum_us = sum_us;
    h->clipped = clipped;
    h->lo = lo;
    h->hi = hi;
    Py_RETURN_NONE;
}

static PyTypeObject HistType;

/* add(other): merge another Hist in place (the master's merge of every worker's slices). */
static PyObject *hist_add(Hist *h, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &HistType)) {
        PyErr_SetString(PyExc_TypeError, "add() needs a histogram of the same kind");
        return NULL;
    }
    Hist *o = (Hist *)arg;
    if (o == h) { /* h + h: double every count */
        for (Py_ssize_t i = 0; i < h->cap; i++)
            if (h->keys[i] != EMPTY) h->counts[i] *= 2;
        h->n *= 2;
        h->sum_us *= 2;
        h->clipped *= 2;
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < o->cap; i++)
        if (o->keys[i] != EMPTY && hist_bump(h, o->keys[i], o->counts[i]) < 0) return NULL;
    h->n += o->n;
    h->sum_us += o->sum_us;
    h->clipped += o->clipped;
    if (o->lo < h->lo) h->lo = o->lo;
    if (o->hi > h->hi) h->hi = o->hi;
    Py_RETURN_NONE;
}

static Py_ssize_t hist_find(const Hist *h, uint32_t key) {
    if (h->cap == 0) return -1;
    Py_ssize_t mask = h->cap - 1;
    Py_ssize_t i = (Py_ssize_t)((key * 2654435761u) & (uint32_t)mask);
    while (h->keys[i] != EMPTY) {
        if (h->keys[i] == key) return i;
        i = (i + 1) & mask;
    }
    return -1;
}

static long long lowest_of(uint32_t key) { return (long long)(key & 2047) << (key >> 11); }

/* subtract(other): as stats._PyCore.subtract (a bucket left at zero or below goes; the count, sum
 * and clipped go down by other's; the lowest and highest become the buckets'). */
static PyObject *hist_subtract(Hist *h, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &HistType)) {
        PyErr_SetString(PyExc_TypeError, "subtract() needs a histogram of the same kind");
        return NULL;
    }
    Hist *o = (Hist *)arg;
    Hist keep = {0};
    keep.lo = HIGHEST_US + 1;
    int self = o == h;
    for (Py_ssize_t i = 0; i < h->cap; i++) {
        if (h->keys[i] == EMPTY || self) continue;
        Py_ssize_t j = hist_find(o, h->keys[i]);
        unsigned long long c = h->counts[i], oc = j < 0 ? 0 : o->counts[j];
        if (c <= oc) continue;
        if (hist_bump(&keep, h->keys[i], c - oc) < 0) {
            PyMem_Free(keep.keys);
            PyMem_Free(keep.counts);
            return NULL;
        }
    }
    long long n = h->n - o->n, sum_us = h->sum_us - o->sum_us, clipped = h->clipped - o->clipped;
    long long lo = HIGHEST_US + 1, hi = 0;
    uint32_t kmin = EMPTY, kmax = 0;
    for (Py_ssize_t i = 0; i < keep.cap; i++) {
        if (keep.keys[i] == EMPTY) continue;
        if (keep.keys[i] < kmin) kmin = keep.keys[i];
        if (keep.keys[i] >= kmax) kmax = keep.keys[i];
    }
    if (keep.used) {
        lo = lowest_of(kmin);
        hi = lowest_of(kmax);
    }
    PyMem_Free(h->keys);
    PyMem_Free(h->counts);
    h->keys = keep.keys;
    h->counts = keep.counts;
    h->cap = keep.cap;
    h->used = keep.used;
    h->n = n;
    h->sum_us = sum_us;
    h->clipped = clipped;
    h->lo = lo;
    h->hi = hi;
    Py_RETURN_NONE;
}

/* copy(): a histogram of the same type with the same state. */
static PyObject *hist_copy(Hist *h, PyObject *unused) {
    (void)unused;
    PyObject *obj = PyObject_CallNoArgs((PyObject *)Py_TYPE(h));
    if (obj == NULL) return NULL;
    Hist *c = (Hist *)obj;
    if (h->cap) {
        c->keys = PyMem_Malloc(sizeof(uint32_t) * (size_t)h->cap);
        c->counts = PyMem_Malloc(sizeof(unsigned long long) * (size_t)h->cap);
        if (c->keys == NULL || c->counts == NULL) {
            Py_DECREF(obj);
            return PyErr_NoMemory();
        }
        memcpy(c->keys, h->keys, sizeof(uint32_t) * (size_t)h->cap);
        memcpy(c->counts, h->counts, sizeof(unsigned long long) * (size_t)h->cap);
    }
    c->cap = h->cap;
    c->used = h->used;
    c->n = h->n;
    c->sum_us = h->sum_us;
    c->clipped = h->clipped;
    c->lo = h->lo;
    c->hi = h->hi;
    return obj;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* items() -> (keys, counts): the buckets in key order (state, percentiles, the HDR encoding). */
static PyObject *hist_items(Hist *h, PyObject *unused) {
    (void)unused;
    Py_ssize_t n = h->used, j = 0;
    /* each used slot as (key << 32 | slot), sorted: the keys in order, each with its count */
    uint64_t *packed = PyMem_Malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    if (packed == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < h->cap; i++)
        if (h->keys[i] != EMPTY) packed[j++] = ((uint64_t)h->keys[i] << 32) | (uint64_t)i;
    qsort(packed, (size_t)n, sizeof(uint64_t), cmp_u64);
    PyObject *keys = PyList_New(n), *counts = PyList_New(n);
    if (keys == NULL || counts == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t slot = (uint32_t)(packed[i] & 0xFFFFFFFFu);
        PyObject *k = PyLong_FromUnsignedLong((unsigned long)(packed[i] >> 32));
        if (k == NULL) goto fail;
        PyList_SET_ITEM(keys, i, k);
        PyObject *c = PyLong_FromUnsignedLongLong(h->counts[slot]);
        if (c == NULL) goto fail;
        PyList_SET_ITEM(counts, i, c);
    }
    PyMem_Free(packed);
    return Py_BuildValue("(NN)", keys, counts);
fail:
    PyMem_Free(packed);
    Py_XDECREF(keys);
    Py_XDECREF(counts);
    return NULL;
}

static PyObject *hist_totals(Hist *h, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("(LLLLL)", h->n, h->sum_us, h->clipped, h->lo, h->hi);
}

static PyObject *hist_get_count(Hist *h, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(h->n);
}

static PyObject *hist_get_clipped(Hist *h, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(h->clipped);
}

static int hist_set_clipped(Hist *h, PyObject *v, void *closure) {
    (void)closure;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "clipped cannot be deleted");
        return -1;
    }
    long long c = PyLong_AsLongLong(v);
    if (c == -1 && PyErr_Occurred()) return -1;
    h->clipped = c;
    return 0;
}

static PyMethodDef hist_methods[] = {
    {"record", (PyCFunction)hist_record, METH_O, "record(seconds): one duration."},
    {"record_prepared", (PyCFunction)hist_record_prepared, METH_O,
     "record_prepared((keys, total, lo, hi, clipped)): values prepare() made bucket keys."},
    {"buckets", (PyCFunction)hist_buckets, METH_NOARGS, "buckets() -> {key: count}"},
    {"load", (PyCFunction)hist_load, METH_VARARGS,
     "load(buckets, sum_us, clipped, lo_us, hi_us): replace the state."},
    {"add", (PyCFunction)hist_add, METH_O, "add(other): merge another histogram in place."},
    {"subtract", (PyCFunction)hist_subtract, METH_O,
     "subtract(other): take another histogram's values out."},
    {"copy", (PyCFunction)hist_copy, METH_NOARGS, "copy() -> the same histogram, apart."},
    {"items", (PyCFunction)hist_items, METH_NOARGS, "items() -> (keys, counts) in key order"},
    {"totals", (PyCFunction)hist_totals, METH_NOARGS,
     "totals() -> (count, sum_us, clipped, lo_us, hi_us)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hist_getset[] = {
    {"count", (getter)hist_get_count, NULL, "values recorded", NULL},
    {"clipped", (getter)hist_get_clipped, (setter)hist_set_clipped, "values above an hour", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HistType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "servecheck.analysis._hdrfast.Hist",
    .tp_basicsize = sizeof(Hist),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A histogram's counts and totals in C (stats.Histogram's native core).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)hist_init,
    .tp_dealloc = (destructor)hist_dealloc,
    .tp_methods = hist_methods,
    .tp_getset = hist_getset,
};

/* record_each(values, hists): as record_prepared(prepare(values)) on each histogram of the tuple
 * hists (stats.record_each_py, the reference): a request's ITLs into the run's, its slice's and
 * (outside the steady window) the outside tally's histograms, each value converted once and no
 * bucket key made a Python int (issue 46: prepare's list of keys was the larger part). */
static PyObject *record_each(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values, *hists;
    if (!PyArg_ParseTuple(args, "OO!", &values, &PyTuple_Type, &hists)) return NULL;
    Py_ssize_t nh = PyTuple_GET_SIZE(hists);
    for (Py_ssize_t j = 0; j < nh; j++) {
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(hists, j), &HistType)) {
            PyErr_SetString(PyExc_TypeError, "record_each() needs a tuple of histograms");
            return NULL;
        }
    }
    PyObject *seq = PySequence_Fast(values, "record_each() needs an iterable of numbers");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    long long *us = PyMem_Malloc(sizeof(long long) * (size_t)(n ? n : 1));
    if (us == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    long long total = 0, lo = 0, hi = 0;
    int clipped = 0;
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* every value first: an error leaves no count behind */
        long long u;
        int got = to_us(items[i], &u, &clipped);
        if (got < 0) goto fail;
        if (got == 0) continue;
        total += u;
        if (kept == 0 || u < lo) lo = u;
        if (kept == 0 || u > hi) hi = u;
        us[kept++] = u;
    }
    for (Py_ssize_t j = 0; kept && j < nh; j++) {
        Hist *h = (Hist *)PyTuple_GET_ITEM(hists, j);
        for (Py_ssize_t i = 0; i < kept; i++)
            if (hist_bump(h, (uint32_t)bucket_key(us[i]), 1) < 0) goto fail;
        h->n += kept;
        h->sum_us += total;
        h->clipped += clipped;
        if (lo < h->lo) h->lo = lo;
        if (hi > h->hi) h->hi = hi;
    }
    PyMem_Free(us);
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    PyMem_Free(us);
    Py_DECREF(seq);
    return NULL;
}

/* ------------------------------------------------------------------ a reservoir's feed */

/* rng.random() or 1e-300, as aggregate.Reservoir._advance draws it; -1.0 with an exception set. */
static double draw(PyObject *random) {
    PyObject *r = PyObject_CallNoArgs(random);
    if (r == NULL) return -1.0;
    double v = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (v == -1.0 && PyErr_Occurred()) return -1.0;
    return v == 0.0 ? 1e-300 : v;
}

typedef struct {
    PyObject *random, *getrandbits;
    Py_ssize_t size;
    long long seen, next;
    double w;
} Feed;

/* Reservoir._advance: the weight's next draw and the index of the next value kept. */
static int advance(Feed *f) {
    double u = draw(f->random);
    if (u < 0.0) return -1;
    f->w *= exp(log(u) / (double)f->size);
    double gap = 0.0;
    if (f->w < 1.0) {
        double v = draw(f->random);
        if (v < 0.0) return -1;
        gap = log(v) / log1p(-f->w);
    }
    if (!isfinite(gap) || gap >= 9.0e18) {
        PyErr_SetString(PyExc_OverflowError, "a reservoir's gap past what int() can take");
        return -1;
    }
    f->next += (long long)gap + 1; /* int() truncates toward zero; gap >= 0 */
    return 0;
}

/* rng.randrange(size): Random._randbelow_with_getrandbits (getrandbits(k) until below size). */
static Py_ssize_t below(Feed *f) {
    PyObject *k = PyLong_FromLong(bitlen((unsigned long long)f->size));
    if (k == NULL) return -1;
    for (;;) {
        PyObject *r = PyObject_CallOneArg(f->getrandbits, k);
        if (r == NULL) {
            Py_DECREF(k);
            return -1;
        }
        Py_ssize_t x = PyLong_AsSsize_t(r);
        Py_DECREF(r);
        if ((x == -1 && PyErr_Occurred()) || x < f->size) {
            Py_DECREF(k);
            return x;
        }
    }
}

/* feed(values, kept, size, seen, next, w, rng) -> (seen, next, w): Reservoir.add_many (the
 * Python reference, aggregate.Reservoir._add_many_py) over a list or tuple, drawing from the same
 * random.Random the same numbers in the same order; kept is the reservoir's list, changed in place.
 * Why: a request's 63 ITLs go through one reservoir, and while a run is young a few of them are
 * kept each time, each a few Python calls (issue 46). */
static PyObject *feed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values, *kept, *rng;
    Feed f = {NULL, NULL, 0, 0, 0, 1.0};
    if (!PyArg_ParseTuple(args, "OO!nLLdO", &values, &PyList_Type, &kept, &f.size, &f.seen,
                          &f.next, &f.w, &rng))
        return NULL;
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values)) {
        PyErr_SetString(PyExc_TypeError, "feed() needs a list or tuple of values");
        return NULL;
    }
    if (f.size <= 0) {
        PyErr_SetString(PyExc_ValueError, "feed() needs a reservoir of at least one value");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values), i = 0;
    PyObject **items = PySequence_Fast_ITEMS(values);
    PyObject *out = NULL;
    f.random = PyObject_GetAttrString(rng, "random");
    f.getrandbits = PyObject_GetAttrString(rng, "getrandbits");
    if (f.random == NULL || f.getrandbits == NULL) goto done;
    Py_ssize_t room = f.size - PyList_GET_SIZE(kept);
    if (room > 0) {
        Py_ssize_t taken = room < n ? room : n;
        for (; i < taken; i++)
            if (PyList_Append(kept, items[i]) < 0) goto done;
        f.seen += taken;
        if (PyList_GET_SIZE(kept) == f.size && f.seen == f.size) {
            f.next = f.size - 1; /* Reservoir._advance_first */
            if (advance(&f) < 0) goto done;
        }
    }
    while (i < n) {
        long long ahead = f.next - f.seen;
        if (ahead >= (long long)(n - i)) {
            f.seen += n - i;
            break;
        }
        i += (Py_ssize_t)ahead;
        f.seen += ahead;
        Py_ssize_t slot = below(&f);
        if (slot < 0) goto done;
        Py_INCREF(items[i]);
        if (PyList_SetItem(kept, slot, items[i]) < 0) goto done;
        i++;
        f.seen++;
        if (advance(&f) < 0) goto done;
    }
    out = Py_BuildValue("(LLd)", f.seen, f.next, f.w);
done:
    Py_XDECREF(f.random);
    Py_XDECREF(f.getrandbits);
    return out;
}

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_O,
     "prepare(values) -> (keys, total_us, lo_us, hi_us, clipped); as stats.prepare."},
    {"feed", feed, METH_VARARGS,
     "feed(values, kept, size, seen, next, w, rng) -> (seen, next, w): Reservoir.add_many."},
    {"record_each", record_each, METH_VARARGS,
     "record_each(values, hists): record the values into each histogram of the tuple."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hdrfast",
    "The streaming summary's per-token loops in C (servecheck/analysis/_hdrfast.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hdrfast(void) {
    if (PyType_Ready(&HistType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&HistType);
    if (PyModule_AddObject(m, "Hist", (PyObject *)&HistType) < 0) {
        Py_DECREF(&HistType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

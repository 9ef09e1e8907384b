/* What the load generator's two native readers share (_rxthread.c, the reader thread under the
 * reactor, and _lane.c, the thread that sends and reads whole exchanges): the token-chunk test the
 * Python parser's fast paths mirror, the clocks, and the short scheduler slice. Static functions:
 * each extension compiles its own copy. */
#ifndef SERVECHECK_RXCOMMON_H
#define SERVECHECK_RXCOMMON_H

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SLICE_NS 100000 /* the thread's scheduler slice where the kernel takes one: short_slice() */

static inline const char *find(const char *hay, size_t n, const char *needle, size_t m) {
    return (const char *)memmem(hay, n, needle, m);
}

/* The chunk size line's hex digits that p begins with (at most 8): how many, and *size. */
static inline size_t hex_size(const char *p, size_t n, size_t *size) {
    size_t i = 0;
    *size = 0;
    while (i < n && i < 8) {
        char c = p[i];
        int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (v < 0) break;
        *size = *size * 16 + (size_t)v;
        i++;
    }
    return i;
}

/* See token_chunk in the header comment. Mirrors, byte for byte, what wire._Dechunker's
 * one-chunk path, StreamState.feed's one-event path and token_kind's first branch accept. */
static inline int is_token_chunk(const char *p, size_t n) {
    size_t size, i = hex_size(p, n, &size);
    if (i == 0 || size == 0 || i + 1 >= n || p[i] != '\r' || p[i + 1] != '\n') return 0;
    if (n != i + 4 + size || p[n - 2] != '\r' || p[n - 1] != '\n') return 0;
    const char *ev = p + i + 2; /* the SSE event: "data: " JSON "\n\n" */
    size_t m = size;
    if (m < 8 + 2 || memcmp(ev, "data: ", 6) != 0 || ev[m - 2] != '\n' || ev[m - 1] != '\n') return 0;
    if (memchr(ev, '\r', m) != NULL) return 0;
    if ((const char *)memchr(ev + 6, '\n', m - 6) != ev + m - 2) return 0; /* one line */
    const char *js = ev + 6;
    size_t jn = m - 8;
    if (js[0] != '{' || js[jn - 1] != '}') return 0;
    static const char key[] = "\"delta\":{\"content\":\"";
    const char *k = find(js, jn, key, sizeof key - 1);
    if (k == NULL || (size_t)(k - js) + 20 >= jn || k[20] == '"') return 0;
    const char *u = find(js, jn, "\"usage\"", 7);
    if (u == NULL) return 1;
    size_t rest = jn - (size_t)(u - js) - 7;
    const char *after = u + 7;
    if (!((rest >= 5 && memcmp(after, ":null", 5) == 0) || (rest >= 6 && memcmp(after, ": null", 6) == 0))) return 0;
    return find(after, rest, "\"usage\"", 7) == NULL;
}

/* The length of the token chunk (is_token_chunk) that p begins with, 0 when it does not. */
static inline size_t token_span(const char *p, size_t n) {
    size_t size, i = hex_size(p, n, &size);
    size_t span = i + 4 + size;
    return (i > 0 && span <= n && is_token_chunk(p, span)) ? span : 0;
}

/* Bytes of the whole token chunks that data begins with: 0 when none. */
static inline size_t token_prefix(const char *p, size_t n) {
    size_t pos = 0, span;
    while (pos < n && (span = token_span(p + pos, n - pos)) > 0) pos += span;
    return pos;
}

static inline double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Realtime minus monotonic: the tightest of a few brackets (as servecheck.clock.clock_offset);
 * *width is that bracket's width (a preempted thread's brackets are wide). */
static inline double clock_offset(int tries, double *width) {
    double best = 0.0;
    *width = 1e9;
    for (int i = 0; i < tries; i++) {
        double a = now_mono(), rt = now_real(), b = now_mono();
        if (b - a < *width) {
            *width = b - a;
            best = rt - (a + b) / 2;
        }
    }
    return best;
}

/* Ask the kernel for a short scheduler slice for this thread; returns it in ns, 0 where none.
 *
 * Why: the thread runs for microseconds at a time, but where it shares its core with the
 * generator's Python (and the command's own work) a woken thread with the default slice waited up
 * to 8 ms behind them (perf sched at 512 streams on one core), and 10 ms and more at times: long
 * enough for a stream's next token to arrive first, so that the two share one read and the later
 * kernel stamp (TTFT error p99 of 10 ms at 512 streams and 30 ms at 1024, docs/benchmarks.md).
 * Linux 6.12 and later take a slice for an ordinary (SCHED_OTHER) thread from sched_setattr's
 * sched_runtime, without privileges, and let a woken task with a shorter slice preempt the one
 * running. The thread keeps its policy and nice value; another policy (the user's choice) is left
 * alone; a kernel that ignores the field reads back another slice, and any error changes nothing. */
static inline long short_slice(void) {
#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr) && defined(SYS_gettid)
    struct {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } attr; /* struct sched_attr as of its first version (48 bytes) */
    if (sched_getscheduler(0) != SCHED_OTHER) return 0;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (errno != 0) return 0;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.policy = SCHED_OTHER;
    attr.nice = nice;
    attr.runtime = SLICE_NS;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) return 0;
    memset(&attr, 0, sizeof attr);
    if (syscall(SYS_sched_getattr, 0, &attr, (unsigned)sizeof attr, 0) != 0) return 0;
    return attr.runtime == SLICE_NS ? (long)attr.runtime : 0;
#else
    return 0;
#endif
}

#ifdef Py_PYTHON_H
/* A list of n arrival times (doubles at p, unaligned): a token batch as both take()s hand it over. */
static inline PyObject *times_list(const char *p, int32_t n) {
    PyObject *out = PyList_New(n);
    for (int32_t i = 0; out != NULL && i < n; i++) {
        double t;
        memcpy(&t, p + (size_t)i * sizeof(double), sizeof t);
        PyObject *f = PyFloat_FromDouble(t);
        if (f == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, f);
    }
    return out;
}
#endif

#endif

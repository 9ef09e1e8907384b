/* truth_server.c: the calibration server of servecheck/reference/fast.py, in C, for benchmarks.
 *
 * fast.py (pure Python, one epoll thread) costs a few us per streamed chunk, so near the rates that
 * issue 27 asks of the load generator (>= 100k streamed tokens/s at 1024+ streams) it is late
 * itself, and a generator measured against it is charged with the server's lateness. This is the
 * same server on the same wire, cheaper per chunk; benchmarks/_truth.py builds it on demand
 * (start_truth_server(impl="c")) and tests/load/test_truth_server_c.py checks it answers what
 * fast.py answers. What it serves (see fast.py's docstring for the why of each):
 *
 *   POST /v1/chat/completions, /v1/completions  streamed (SSE, OpenAI chunk shape, a role-only first
 *        chunk for chat, stream_options.include_usage) or not; exactly max_completion_tokens or
 *        max_tokens (else --tokens) tokens, the first at arrival + TTFT, then first + k * ITL
 *        (absolute schedule); --reasoning-tokens R: the first R chat chunks are reasoning_content
 *   GET /health, /v1/models (model "truth"), /stats (own lateness), /stats/requests (per
 *        X-Request-Id: lateness of the first and last token, and of the first answer token with
 *        reasoning), /metrics (fast_metrics.py's page, counted once per request)
 *
 * Same command line as python -m servecheck.commands.fast_server. Differences from fast.py, all
 * on inputs fast.py mishandles or on the lateness it reports:
 *   - lateness is measured per write, just before its send(); fast.py takes one clock reading per
 *     batch of due writes, so it reports the later writes of a batch as less late than they were;
 *   - a bad or negative Content-Length is a 400, a request over 1 MiB a 413 as soon as its head
 *     says so, both followed by a close (fast.py raises on the first; it answers 413 only once
 *     1 MiB is buffered); after those two answers the connection is drained, not reset, so the
 *     client reads them;
 *   - JSON: UTF-8 only (no UTF-16/32 detection), nesting deeper than 512 levels, max_tokens above
 *     2^20 or a string that is not an ASCII integer of up to 64 characters, and infinite max_tokens are 400s (fast.py raises on
 *     some of these or tries to answer);
 *   - usage.prompt_tokens is len(json.dumps(prompt)) // 4 as fast.py's, except that duplicate keys
 *     inside the prompt count every time they are written.
 *
 * gcc -O2 -std=gnu11 -Wall -o truth_server truth_server.c -lm    (Linux: epoll, SO_TIMESTAMPNS)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_REQUEST_BYTES (1 << 20)
#define MAX_TOKENS (1 << 20)          /* per answer: a bound fast.py lacks */
#define LATE_BUCKET_S 10e-6           /* lateness histogram resolution */
#define LATE_BUCKETS 20000            /* 0 .. 200 ms, then one overflow bucket */
#define MAX_TRACKED 500000            /* requests whose lateness /stats/requests keeps */
#define MAX_RID 200                   /* X-Request-Id characters kept (fast.py: v.strip()[:200]) */
#define SPIN_BELOW_S 0.002
#define MAX_DEPTH 512
#define DRAIN_LIMIT (64 << 20)        /* bytes read and dropped after a 413/400 before closing */

/* ---- small helpers -------------------------------------------------------------------------- */

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) { fputs("truth_server: out of memory\n", stderr); exit(1); }
    return q;
}

typedef struct { char *p; size_t off, len, cap; } buf_t; /* pending bytes: p[off .. len) */

static size_t pending(const buf_t *b) { return b->len - b->off; }

static void reserve(buf_t *b, size_t more) {
    if (b->off && b->off == b->len) b->off = b->len = 0;
    if (b->len + more <= b->cap) return;
    /* Move the pending bytes to the front only when no more of them are left than were consumed:
     * a client that reads slower than its tokens come has megabytes pending, and moving them
     * each time the buffer fills again would cost more than the writes. */
    if (b->off && b->off >= b->len - b->off) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->len + more <= b->cap) return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void add(buf_t *b, const void *data, size_t n) {
    reserve(b, n);
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void adds(buf_t *b, const char *s) { add(b, s, strlen(s)); }

static void addf(buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void drop(buf_t *b, size_t n) {
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
}

static double now_s(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double mono(void) { return now_s(CLOCK_MONOTONIC); } /* Python's perf_counter */

/* Realtime minus monotonic, the tightest of five brackets (servecheck.clock.clock_offset): the
 * kernel stamps a read in realtime, the schedule runs on the monotonic clock. */
static double clock_offset(void) {
    double best = 0, width = INFINITY;
    for (int i = 0; i < 5; i++) {
        double a = mono(), r = now_s(CLOCK_REALTIME), b = mono();
        if (b - a < width) { best = r - (a + b) / 2; width = b - a; }
    }
    return best;
}

/* A double as Python's repr() writes it, which is what json.dumps writes: the shortest digits
 * that read back to it, fixed notation for decimal exponents -4 .. 15, else d.ddde+XX. */
static int py_repr(double x, char *out) {
    if (isnan(x)) return sprintf(out, "NaN");
    if (isinf(x)) return sprintf(out, x < 0 ? "-Infinity" : "Infinity");
    if (x == 0) return sprintf(out, signbit(x) ? "-0.0" : "0.0");
    char tmp[48], digits[24];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
    const char *s = tmp;
    int o = 0, nd = 0;
    if (*s == '-') { out[o++] = '-'; s++; }
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int e10 = atoi(s + 1), decpt = e10 + 1;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (decpt <= -4 || decpt > 16) {
        out[o++] = digits[0];
        if (nd > 1) { out[o++] = '.'; memcpy(out + o, digits + 1, nd - 1); o += nd - 1; }
        o += sprintf(out + o, "e%c%02d", e10 < 0 ? '-' : '+', abs(e10));
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -decpt; i++) out[o++] = '0';
        memcpy(out + o, digits, nd); o += nd;
    } else if (decpt >= nd) {
        memcpy(out + o, digits, nd); o += nd;
        for (int i = nd; i < decpt; i++) out[o++] = '0';
        out[o++] = '.'; out[o++] = '0';
    } else {
        memcpy(out + o, digits, decpt); o += decpt;
        out[o++] = '.';
        memcpy(out + o, digits + decpt, nd - decpt); o += nd - decpt;
    }
    out[o] = 0;
    return o;
}

static double py_round(double x, int nd) { /* Python's round(x, nd): correctly rounded */
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.*f", nd, x);
    return strtod(tmp, NULL);
}

static bool py_space(unsigned char c) { /* str.isspace() of a latin-1 character */
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0;
}

/* Python's int(text) for base 10: spaces around, a sign, digits with single underscores between
 * them. 0 and *out on success, -1 when it is no integer, 1 when it is above INT64_MAX / 10. */
static int py_int(const char *s, size_t n, int64_t *out) {
    while (n && py_space((unsigned char)*s)) { s++; n--; }
    while (n && py_space((unsigned char)s[n - 1])) n--;
    bool neg = false, big = false;
    if (n && (*s == '+' || *s == '-')) { neg = *s == '-'; s++; n--; }
    int64_t v = 0;
    size_t digits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_' && i > 0 && i + 1 < n && s[i - 1] != '_' && s[i + 1] != '_') continue;
        if (s[i] < '0' || s[i] > '9') return -1;
        if (++digits > 4300) return -1; /* Python 3.11's int max str digits */
        if (v > INT64_MAX / 10 - 10) big = true; else v = v * 10 + (s[i] - '0');
    }
    if (!digits) return -1;
    *out = neg ? -v : v;
    return big ? 1 : 0;
}

/* ---- JSON: validate as json.loads would, and measure what json.dumps would write ------------ */

enum { J_NULL, J_FALSE, J_TRUE, J_INT, J_FLOAT, J_STR, J_ARR, J_OBJ };
typedef struct { int kind; bool truthy; const char *start, *end; long pylen; } jv_t;
typedef struct { const unsigned char *p, *end; const char *err; } jp_t;

static void jws(jp_t *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool jlit(jp_t *j, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, s, n)) return false;
    j->p += n;
    return true;
}

static int jfail(jp_t *j, const char *why) { if (!j->err) j->err = why; return -1; }

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string at j->p (its quote). *pylen: its length in json.dumps (ensure_ascii: \uXXXX for each
 * non-ASCII code point, two of them above U+FFFF). Its ASCII text goes to dec (when given, up to
 * cap bytes); *ascii says whether all of it was ASCII and fit. */
static int jstring(jp_t *j, long *pylen, char *dec, size_t cap, size_t *declen, bool *ascii) {
    size_t n = 0;
    bool plain = true;
    long len = 2;
    j->p++;
    for (;;) {
        if (j->p >= j->end) return jfail(j, "unterminated string");
        unsigned c = *j->p;
        int cp = -1; /* the code point, when ASCII */
        if (c == '"') { j->p++; break; }
        if (c < 0x20) return jfail(j, "control character in a string");
        if (c == '\\') {
            if (j->end - j->p < 2) return jfail(j, "unterminated string");
            unsigned e = j->p[1];
            const char *simple = strchr("\"\\/bfnrt", (int)e);
            if (e && simple) {
                cp = e == 'b' ? 8 : e == 'f' ? 12 : e == 'n' ? 10 : e == 'r' ? 13 : e == 't' ? 9
                   : (int)e;
                j->p += 2;
            } else if (e == 'u') {
                if (j->end - j->p < 6) return jfail(j, "bad \\u escape");
                int v = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hexval(j->p[i]);
                    if (h < 0) return jfail(j, "bad \\u escape");
                    v = v * 16 + h;
                }
                j->p += 6;
                if (v < 0x80) cp = v; else { len += 6; plain = false; }
            } else {
                return jfail(j, "bad escape");
            }
        } else if (c < 0x80) {
            cp = (int)c;
            j->p++;
        } else { /* UTF-8; encoded surrogates pass, as json.loads decodes with surrogatepass */
            int more = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2
                     : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
            if (more < 0 || j->end - j->p <= more) return jfail(j, "invalid UTF-8");
            unsigned c1 = j->p[1];
            unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
            if (c1 < lo || c1 > hi) return jfail(j, "invalid UTF-8");
            for (int i = 2; i <= more; i++)
                if ((j->p[i] & 0xc0) != 0x80) return jfail(j, "invalid UTF-8");
            j->p += 1 + more;
            len += more == 3 ? 12 : 6;
            plain = false;
        }
        if (cp >= 0) {
            len += cp == '"' || cp == '\\' || cp == 8 || cp == 9 || cp == 10 || cp == 12 || cp == 13
                       ? 2 : cp < 0x20 || cp == 0x7f ? 6 : 1;
            if (dec && n < cap) dec[n] = (char)cp;
            if (++n > cap) plain = false;
        }
    }
    if (pylen) *pylen = len;
    if (declen) *declen = n < cap ? n : cap;
    if (ascii) *ascii = plain;
    return 0;
}

static int jvalue(jp_t *j, int depth, jv_t *v);

static int jcontainer(jp_t *j, int depth, jv_t *v, bool obj) {
    char close = obj ? '}' : ']';
    long len = 2;
    int count = 0;
    if (depth >= MAX_DEPTH) return jfail(j, "nested too deeply");
    j->p++;
    jws(j);
    if (j->p < j->end && *j->p == close) { j->p++; goto done; }
    for (;;) {
        jv_t child;
        if (obj) {
            long klen;
            jws(j);
            if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a property name");
            if (jstring(j, &klen, NULL, 0, NULL, NULL)) return -1;
            jws(j);
            if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':'");
            j->p++;
            len += klen + 2; /* "key": */
        }
        if (jvalue(j, depth + 1, &child)) return -1;
        len += child.pylen;
        count++;
        jws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; len += 2; continue; }
        if (j->p < j->end && *j->p == close) { j->p++; break; }
        return jfail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
done:
    v->kind = obj ? J_OBJ : J_ARR;
    v->truthy = count > 0;
    v->pylen = len;
    return 0;
}

static int jnumber(jp_t *j, jv_t *v) {
    const unsigned char *s = j->p;
    bool is_float = false;
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail(j, "expected a value");
    if (*j->p == '0') j->p++;
    else while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    size_t int_digits = (size_t)(j->p - s) - (*s == '-');
    if (j->end - j->p >= 2 && *j->p == '.' && j->p[1] >= '0' && j->p[1] <= '9') {
        is_float = true;
        for (j->p++; j->p < j->end && *j->p >= '0' && *j->p <= '9'; j->p++) {}
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        const unsigned char *e = j->p + 1;
        if (e < j->end && (*e == '+' || *e == '-')) e++;
        if (e < j->end && *e >= '0' && *e <= '9') {
            is_float = true;
            for (j->p = e; j->p < j->end && *j->p >= '0' && *j->p <= '9'; j->p++) {}
        }
    }
    size_t n = (size_t)(j->p - s);
    if (!is_float) {
        if (int_digits > 4300) return jfail(j, "integer too long");
        bool zero = int_digits == 1 && s[n - 1] == '0';
        v->kind = J_INT;
        v->truthy = !zero;
        v->pylen = zero ? 1 : (long)n; /* -0 is written 0 */
        return 0;
    }
    char stack[128], *tmp = n < sizeof stack ? stack : xrealloc(NULL, n + 1);
    memcpy(tmp, s, n);
    tmp[n] = 0;
    double x = strtod(tmp, NULL);
    char rep[48];
    if (tmp != stack) free(tmp);
    v->kind = J_FLOAT;
    v->truthy = x != 0;
    v->pylen = py_repr(x, rep);
    return 0;
}

static int jvalue(jp_t *j, int depth, jv_t *v) {
    jws(j);
    v->start = (const char *)j->p;
    if (j->p >= j->end) return jfail(j, "expected a value");
    int r = 0;
    switch (*j->p) {
    case '{': r = jcontainer(j, depth, v, true); break;
    case '[': r = jcontainer(j, depth, v, false); break;
    case '"':
        r = jstring(j, &v->pylen, NULL, 0, NULL, NULL);
        v->kind = J_STR;
        v->truthy = v->pylen > 2;
        break;
    default: /* Python's json also takes NaN, Infinity and -Infinity */
        if (jlit(j, "true")) *v = (jv_t){J_TRUE, true, v->start, 0, 4};
        else if (jlit(j, "false")) *v = (jv_t){J_FALSE, false, v->start, 0, 5};
        else if (jlit(j, "null")) *v = (jv_t){J_NULL, false, v->start, 0, 4};
        else if (jlit(j, "NaN")) *v = (jv_t){J_FLOAT, true, v->start, 0, 3};
        else if (jlit(j, "Infinity")) *v = (jv_t){J_FLOAT, true, v->start, 0, 8};
        else if (jlit(j, "-Infinity")) *v = (jv_t){J_FLOAT, true, v->start, 0, 9};
        else r = jnumber(j, v);
    }
    v->end = (const char *)j->p;
    return r;
}

/* The last member named key of the (already validated) object v; false when it has none. */
static bool jget(const jv_t *obj, const char *key, jv_t *out) {
    jp_t j = {(const unsigned char *)obj->start + 1, (const unsigned char *)obj->end, NULL};
    bool found = false;
    size_t want = strlen(key);
    for (;;) {
        jws(&j);
        if (j.p >= j.end || *j.p != '"') return found;
        char name[32];
        size_t n;
        bool ascii;
        jstring(&j, NULL, name, sizeof name, &n, &ascii);
        jws(&j);
        j.p++; /* : */
        jv_t v;
        jvalue(&j, 1, &v);
        if (ascii && n == want && !memcmp(name, key, n)) { *out = v; found = true; }
        jws(&j);
        if (j.p < j.end && *j.p == ',') j.p++;
    }
}

/* Python's int(v) for a JSON value: 0 and *n, or an error message. */
static const char *jint(const jv_t *v, int64_t *n) {
    int r;
    switch (v->kind) {
    case J_TRUE: *n = 1; return NULL;
    case J_FALSE: case J_NULL: *n = 0; return NULL;
    case J_INT: r = py_int(v->start, (size_t)(v->end - v->start), n); break;
    case J_FLOAT: {
        double x = strncmp(v->start, "NaN", 3) == 0 ? NAN : v->start[0] == 'I' ? INFINITY
                 : strncmp(v->start, "-Inf", 4) == 0 ? -INFINITY : strtod(v->start, NULL);
        if (isnan(x)) return "cannot convert float NaN to integer";
        if (isinf(x)) return "cannot convert float infinity to integer";
        if (fabs(x) > 9e18) { *n = x < 0 ? INT64_MIN : INT64_MAX; return NULL; }
        *n = (int64_t)x; /* truncates, as int() does */
        return NULL;
    }
    case J_STR: {
        jp_t j = {(const unsigned char *)v->start, (const unsigned char *)v->end, NULL};
        char text[64];
        size_t len;
        bool ascii;
        jstring(&j, NULL, text, sizeof text, &len, &ascii);
        if (!ascii) return "max_tokens is not an integer";
        r = py_int(text, len, n);
        break;
    }
    default: return "max_tokens must be a number";
    }
    if (r < 0) return "max_tokens is not an integer";
    if (r > 0) *n = v->start[0] == '-' ? INT64_MIN : INT64_MAX;
    return NULL;
}

/* ---- the server ----------------------------------------------------------------------------- */

typedef struct { double ttft_s, itl_s; int tokens, reasoning_tokens; } timing_t;

struct stream;
typedef struct conn {
    int fd;
    buf_t in, out;
    double arrived;          /* when the bytes of the request being parsed reached this host */
    bool busy;               /* a response is in progress (no pipelining) */
    bool closed, want_out;
    bool draining;           /* answered 400/413: reading and dropping until the client closes */
    size_t drained;
    struct stream *st;       /* the response in progress */
    char rid[MAX_RID];       /* X-Request-Id of the request being answered */
    int rid_len;
    struct conn *next_free;
} conn_t;

typedef struct stream {
    conn_t *conn;            /* NULL once its connection closed: the stream ends there */
    int left, sent, think_left, think_n;
    double first_due, arrived;
    long prompt_tokens, tokens;
    buf_t mem;               /* [think chunk][token chunk][tail], so token + tail is one write */
    size_t think_len, token_len, tail_len;
    char rid[MAX_RID];
    int rid_len;
} stream_t;

typedef struct { double due; uint64_t seq; stream_t *st; } slot_t;

typedef struct { double late[3]; uint32_t name; uint8_t name_len, n; } track_t;

static const double BUCKETS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                 0.75, 1.0, 2.5, 5.0, 10.0}; /* reference/engine_metrics.py */
static const char *BUCKET_TEXT[] = {"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08",
                                    "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "10.0"};
#define NB 15
typedef struct { uint64_t counts[NB + 1], n; double total; } hist_t;

static struct {
    timing_t t;
    int ep, lfd, port;
    volatile sig_atomic_t stop;
    double offset;           /* realtime - monotonic */
    slot_t *heap; size_t heap_n, heap_cap;
    uint64_t seq, requests;
    uint64_t late_counts[LATE_BUCKETS + 1], late_n; double late_worst;
    track_t *tracks; size_t ntracks, tracks_cap;
    int32_t *index; size_t index_cap; /* open addressing over tracks, -1 empty */
    buf_t names;
    uint64_t success, prompt, generation; hist_t ttft, e2e;
    double cpu0;
    conn_t *to_free;
    buf_t scratch;
} S;

static int listener_tag; /* epoll data of the listening socket */

/* -- the heap of due times (ordered by due, then by push order, as fast.py's tuples) -- */

static bool before(const slot_t *a, const slot_t *b) {
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void heap_push(double due, stream_t *st) {
    if (S.heap_n == S.heap_cap) {
        S.heap_cap = S.heap_cap ? S.heap_cap * 2 : 1024;
        S.heap = xrealloc(S.heap, S.heap_cap * sizeof *S.heap);
    }
    size_t i = S.heap_n++;
    slot_t s = {due, S.seq++, st};
    while (i && before(&s, &S.heap[(i - 1) / 2])) { S.heap[i] = S.heap[(i - 1) / 2]; i = (i - 1) / 2; }
    S.heap[i] = s;
}

static slot_t heap_pop(void) {
    slot_t top = S.heap[0], last = S.heap[--S.heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= S.heap_n) break;
        if (c + 1 < S.heap_n && before(&S.heap[c + 1], &S.heap[c])) c++;
        if (!before(&S.heap[c], &last)) break;
        S.heap[i] = S.heap[c];
        i = c;
    }
    if (S.heap_n) S.heap[i] = last;
    return top;
}

/* -- per-request lateness, keyed by X-Request-Id, in insertion order -- */

static uint64_t fnv(const char *s, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static track_t *track_find(const char *rid, int n, bool create) {
    if (!S.index_cap || (create && 2 * (S.ntracks + 1) > S.index_cap)) {
        size_t cap = S.index_cap ? S.index_cap * 2 : 1024;
        S.index = xrealloc(S.index, cap * sizeof *S.index);
        memset(S.index, 0xff, cap * sizeof *S.index);
        S.index_cap = cap;
        for (size_t k = 0; k < S.ntracks; k++) {
            size_t i = fnv(S.names.p + S.tracks[k].name, S.tracks[k].name_len) & (cap - 1);
            while (S.index[i] >= 0) i = (i + 1) & (cap - 1);
            S.index[i] = (int32_t)k;
        }
    }
    size_t i = fnv(rid, n) & (S.index_cap - 1);
    for (; S.index[i] >= 0; i = (i + 1) & (S.index_cap - 1)) {
        track_t *t = &S.tracks[S.index[i]];
        if (t->name_len == n && !memcmp(S.names.p + t->name, rid, n)) return t;
    }
    if (!create) return NULL;
    if (S.ntracks == S.tracks_cap) {
        S.tracks_cap = S.tracks_cap ? S.tracks_cap * 2 : 1024;
        S.tracks = xrealloc(S.tracks, S.tracks_cap * sizeof *S.tracks);
    }
    track_t *t = &S.tracks[S.ntracks];
    *t = (track_t){{0, 0, 0}, (uint32_t)S.names.len, (uint8_t)n, 0};
    add(&S.names, rid, n);
    S.index[i] = (int32_t)S.ntracks++;
    return t;
}

/* -- connections -- */

static void ep_set(conn_t *c, bool out) {
    if (c->want_out == out) return;
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(S.ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = out;
}

static void conn_close(conn_t *c) {
    if (c->closed) return;
    c->closed = true;
    if (c->st) { c->st->conn = NULL; c->st = NULL; }
    epoll_ctl(S.ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->next_free = S.to_free; /* freed at the top of the loop: callers up the stack may hold it */
    S.to_free = c;
}

static void conn_send(conn_t *c, const char *data, size_t n) {
    if (c->closed) return;
    if (pending(&c->out)) { add(&c->out, data, n); return; }
    ssize_t k = send(c->fd, data, n, MSG_NOSIGNAL);
    if (k < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { conn_close(c); return; }
        k = 0;
    }
    if ((size_t)k < n) { add(&c->out, data + k, n - (size_t)k); ep_set(c, true); }
    else if (c->draining) shutdown(c->fd, SHUT_WR);
}

static void respond(conn_t *c, const char *status, const char *ctype, const char *body, size_t n) {
    buf_t *b = &S.scratch;
    b->off = b->len = 0;
    addf(b, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", status, ctype, n);
    add(b, body, n);
    conn_send(c, b->p, b->len);
}

static void respond_json(conn_t *c, const char *status, const char *body) {
    respond(c, status, "application/json", body, strlen(body));
}

static void bad_request(conn_t *c, const char *why) {
    char body[256];
    snprintf(body, sizeof body,
             "{\"error\": {\"message\": \"bad request: %s\", \"type\": \"invalid_request_error\"}}",
             why);
    respond_json(c, "400 Bad Request", body);
}

/* Answer, then read and drop what the client still sends until it closes: closing with unread
 * bytes would reset the connection and could lose the answer. */
static void reject(conn_t *c, const char *status, const char *body) {
    if (c->st) { c->st->conn = NULL; c->st = NULL; }
    c->busy = c->draining = true;
    c->in.off = c->in.len = 0;
    respond_json(c, status, body);
}

/* -- writing the schedule -- */

static void parse_requests(conn_t *c);

static void lateness(double late) {
    size_t i = (size_t)(late / LATE_BUCKET_S);
    S.late_counts[i < LATE_BUCKETS ? i : LATE_BUCKETS]++;
    S.late_n++;
    if (late > S.late_worst) S.late_worst = late;
}

static void observe(hist_t *h, double s) {
    if (s < 0) s = 0;
    int i = 0;
    while (i < NB && BUCKETS[i] < s) i++; /* bisect_left */
    h->counts[i]++;
    h->n++;
    h->total += s;
}

/* One due write of st (fast.py's _emit). */
static void emit(stream_t *st, double due) {
    conn_t *c = st->conn;
    if (!c) { st->left = 0; return; }
    double late = mono() - due;
    if (late < 0) late = 0;
    lateness(late);
    st->sent++;
    st->left--;
    if (st->sent == 1) observe(&S.ttft, S.t.ttft_s + late);
    if (st->left <= 0) {
        S.success++;
        S.prompt += st->prompt_tokens;
        S.generation += st->tokens;
        observe(&S.e2e, mono() - st->arrived);
    }
    bool thinking = st->think_left > 0;
    st->think_left -= thinking;
    if (st->rid_len) {
        if (st->sent == 1 && S.ntracks < MAX_TRACKED) {
            track_t *t = track_find(st->rid, st->rid_len, true);
            t->late[0] = t->late[1] = late;
            t->late[2] = 0;
            t->n = st->think_n ? 3 : 2;
        }
        track_t *t = (st->left <= 0 || (st->think_n && st->sent == st->think_n + 1))
                         ? track_find(st->rid, st->rid_len, false) : NULL;
        if (t && st->left <= 0) t->late[1] = late;
        if (t && st->think_n && st->sent == st->think_n + 1 && t->n == 3) t->late[2] = late;
    }
    const char *mem = st->mem.p;
    if (thinking && st->left > 0) { conn_send(c, mem, st->think_len); return; }
    if (st->left > 0) { conn_send(c, mem + st->think_len, st->token_len); return; }
    c->busy = false;
    c->st = NULL;
    st->conn = NULL;
    conn_send(c, mem + st->think_len, st->token_len + st->tail_len);
    if (!c->closed && pending(&c->in)) parse_requests(c);
}

/* -- routes -- */

static void route_health(conn_t *c) { respond(c, "200 OK", "text/plain", "ok", 2); }

static void route_models(conn_t *c) {
    respond_json(c, "200 OK",
                 "{\"object\": \"list\", \"data\": [{\"id\": \"truth\", \"object\": \"model\", "
                 "\"created\": 0, \"owned_by\": \"servecheck\", \"max_model_len\": 1048576}]}");
}

static double quantile(double q) {
    if (!S.late_n) return 0;
    double rank = q * (double)(S.late_n - 1);
    uint64_t seen = 0;
    for (size_t i = 0; i <= LATE_BUCKETS; i++) {
        seen += S.late_counts[i];
        if ((double)seen > rank) {
            double mid = (i + 0.5) * LATE_BUCKET_S;
            return i < LATE_BUCKETS && mid < S.late_worst ? mid : S.late_worst;
        }
    }
    return S.late_worst;
}

static void route_stats(conn_t *c) {
    char cpu[48], p50[48], p99[48], p999[48], worst[48], body[512];
    py_repr(py_round(now_s(CLOCK_PROCESS_CPUTIME_ID) - S.cpu0, 3), cpu);
    py_repr(py_round(quantile(0.5) * 1000, 3), p50);
    py_repr(py_round(quantile(0.99) * 1000, 3), p99);
    py_repr(py_round(quantile(0.999) * 1000, 3), p999);
    py_repr(py_round(S.late_worst * 1000, 3), worst);
    snprintf(body, sizeof body,
             "{\"requests\": %llu, \"open_streams\": %zu, \"cpu_s\": %s, \"writes\": %llu, "
             "\"late_p50_ms\": %s, \"late_p99_ms\": %s, \"late_p999_ms\": %s, \"late_max_ms\": %s}",
             (unsigned long long)S.requests, S.heap_n, cpu, (unsigned long long)S.late_n, p50, p99,
             p999, worst);
    respond_json(c, "200 OK", body);
}

static void add_json_string(buf_t *b, const char *s, int n) { /* json.dumps of latin-1 text */
    add(b, "\"", 1);
    for (int i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\n' ? "\\n"
                        : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : ch == 8 ? "\\b"
                        : ch == 12 ? "\\f" : NULL;
        if (esc) adds(b, esc);
        else if (ch < 0x20 || ch >= 0x7f) addf(b, "\\u%04x", ch);
        else add(b, &s[i], 1);
    }
    add(b, "\"", 1);
}

static void route_stats_requests(conn_t *c) {
    buf_t b = {0};
    addf(&b, "{\"tracked\":%zu,\"limit\":%d,\"unit\":\"ms\",\"requests\":{", S.ntracks, MAX_TRACKED);
    for (size_t k = 0; k < S.ntracks; k++) {
        track_t *t = &S.tracks[k];
        if (k) add(&b, ",", 1);
        add_json_string(&b, S.names.p + t->name, t->name_len);
        add(&b, ":[", 2);
        for (int i = 0; i < t->n; i++) {
            char num[48];
            int len = py_repr(py_round(t->late[i] * 1000, 4), num);
            if (i) add(&b, ",", 1);
            add(&b, num, (size_t)len);
        }
        add(&b, "]", 1);
    }
    adds(&b, "}}");
    respond(c, "200 OK", "application/json", b.p, b.len);
    free(b.p);
}

#define LABELS "engine=\"0\",model_name=\"truth\""

static void metric(buf_t *b, const char *family, const char *kind, const char *doc, uint64_t v) {
    addf(b, "# HELP %s %s\n# TYPE %s %s\n%s{" LABELS "} %llu\n", family, doc, family, kind, family,
         (unsigned long long)v);
}

static void histogram(buf_t *b, const hist_t *h, const char *family, const char *doc) {
    addf(b, "# HELP %s %s\n# TYPE %s histogram\n", family, doc, family);
    uint64_t running = 0;
    for (int i = 0; i < NB; i++) {
        running += h->counts[i];
        addf(b, "%s_bucket{" LABELS ",le=\"%s\"} %llu\n", family, BUCKET_TEXT[i],
             (unsigned long long)running);
    }
    addf(b, "%s_bucket{" LABELS ",le=\"+Inf\"} %llu\n%s_sum{" LABELS "} %.6f\n%s_count{" LABELS
            "} %llu\n", family, (unsigned long long)h->n, family, h->total, family,
         (unsigned long long)h->n);
}

static void route_metrics(conn_t *c) { /* reference/fast_metrics.py's page */
    buf_t b = {0};
    metric(&b, "vllm:num_requests_running", "gauge", "Requests in progress.", S.heap_n);
    metric(&b, "vllm:num_requests_waiting", "gauge", "Requests waiting (none here).", 0);
    metric(&b, "vllm:request_success_total", "counter", "Requests answered in full.", S.success);
    metric(&b, "vllm:prompt_tokens_total", "counter", "Prompt tokens.", S.prompt);
    metric(&b, "vllm:generation_tokens_total", "counter", "Generated tokens.", S.generation);
    histogram(&b, &S.ttft, "vllm:time_to_first_token_seconds", "Time to first token.");
    histogram(&b, &S.e2e, "vllm:e2e_request_latency_seconds", "End to end request latency.");
    respond(c, "200 OK", "text/plain; version=0.0.4", b.p, b.len);
    free(b.p);
}

/* One SSE event as one HTTP chunk (fast.py's _sse): "data: " + payload + "\n\n". */
static void sse(buf_t *b, const char *payload) {
    size_t n = strlen(payload);
    addf(b, "%zx\r\ndata: ", n + 8);
    add(b, payload, n);
    adds(b, "\n\n\r\n");
}

static void generate(conn_t *c, const char *body, size_t n, double arrived, bool chat) {
    jp_t j = {(const unsigned char *)body, (const unsigned char *)body + n, NULL};
    if (n >= 3 && !memcmp(body, "\xef\xbb\xbf", 3)) j.p += 3; /* json.loads takes a UTF-8 BOM */
    jv_t req, v;
    if (jvalue(&j, 0, &req)) { bad_request(c, j.err); return; }
    jws(&j);
    if (j.p != j.end) { bad_request(c, "extra data after the JSON value"); return; }
    if (req.kind != J_OBJ) { bad_request(c, "the body is not a JSON object"); return; }
    int64_t tokens = S.t.tokens; /* max_completion_tokens or max_tokens or --tokens (truthiness) */
    if ((jget(&req, "max_completion_tokens", &v) && v.truthy) ||
        (jget(&req, "max_tokens", &v) && v.truthy)) {
        const char *err = jint(&v, &tokens);
        if (err) { bad_request(c, err); return; }
    }
    if (tokens < 1) { bad_request(c, "max_tokens must be at least 1"); return; }
    if (tokens > MAX_TOKENS) { bad_request(c, "max_tokens is above 1048576"); return; }
    int ntok = (int)tokens;
    long prompt_len = 4; /* json.dumps(None) */
    if (jget(&req, chat ? "messages" : "prompt", &v)) prompt_len = v.pylen;
    long prompt_tokens = prompt_len / 4 > 1 ? prompt_len / 4 : 1;
    bool stream = jget(&req, "stream", &v) && v.truthy;
    bool usage = false;
    if (jget(&req, "stream_options", &v) && v.kind == J_OBJ) {
        jv_t inc;
        usage = jget(&v, "include_usage", &inc) && inc.truthy;
    }
    int think = chat ? (S.t.reasoning_tokens < ntok - 1 ? S.t.reasoning_tokens : ntok - 1) : 0;
    if (think < 0) think = 0;
    char base[160], usage_text[160], piece[512];
    unsigned long long id = S.seq++;
    long long created = (long long)time(NULL);
    snprintf(base, sizeof base, "\"id\":\"%s-%llu\",\"object\":\"%s\",\"created\":%lld,"
             "\"model\":\"truth\"", chat ? "chatcmpl" : "cmpl", id,
             chat ? "chat.completion.chunk" : "text_completion", created);
    const char *extra = usage ? ",\"usage\":null" : "";

    stream_t *st = xrealloc(NULL, sizeof *st);
    memset(st, 0, sizeof *st);
    st->conn = c;
    st->arrived = arrived;
    st->prompt_tokens = prompt_tokens;
    st->tokens = ntok;
    st->rid_len = c->rid_len;
    memcpy(st->rid, c->rid, (size_t)c->rid_len);
    buf_t *m = &st->mem;
    if (!stream) { /* one write at the time the last token is due (fast.py: default separators) */
        buf_t full = {0};
        addf(&full, "{\"id\": \"%s-%llu\", \"object\": \"%s\", \"created\": %lld, \"model\": "
             "\"truth\", \"choices\": [{\"index\": 0, \"finish_reason\": \"length\", "
             "\"logprobs\": null, ", chat ? "chatcmpl" : "cmpl", id,
             chat ? "chat.completion" : "text_completion", created);
        adds(&full, chat ? "\"message\": {\"role\": \"assistant\", \"content\": \"" : "\"text\": \"");
        for (int i = 0; i < ntok - think; i++) adds(&full, " tok");
        adds(&full, "\"");
        if (think) {
            adds(&full, ", \"reasoning_content\": \"");
            for (int i = 0; i < think; i++) adds(&full, " think");
            adds(&full, "\"");
        }
        addf(&full, "%s}], \"usage\": {\"prompt_tokens\": %ld, \"completion_tokens\": %d, "
             "\"total_tokens\": %ld", chat ? "}" : "", prompt_tokens, ntok, prompt_tokens + ntok);
        if (think) addf(&full, ", \"completion_tokens_details\": {\"reasoning_tokens\": %d}", think);
        adds(&full, "}}");
        addf(m, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
             full.len);
        add(m, full.p, full.len);
        free(full.p);
        st->tail_len = m->len;
        st->left = 1;
        c->busy = true;
        c->st = st;
        heap_push(arrived + S.t.ttft_s + (ntok - 1) * S.t.itl_s, st);
        return;
    }
    if (think) {
        snprintf(piece, sizeof piece, "{%s,\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content"
                 "\":\" think\"},\"logprobs\":null,\"finish_reason\":null}]%s}", base, extra);
        sse(m, piece);
        st->think_len = m->len;
        st->think_left = st->think_n = think;
    }
    snprintf(piece, sizeof piece, chat
             ? "{%s,\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\"logprobs\":null,"
               "\"finish_reason\":null}]%s}"
             : "{%s,\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,"
               "\"finish_reason\":null}]%s}", base, extra);
    sse(m, piece);
    st->token_len = m->len - st->think_len;
    snprintf(piece, sizeof piece, chat
             ? "{%s,\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
               "\"finish_reason\":\"length\"}]%s}"
             : "{%s,\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
               "\"finish_reason\":\"length\"}]%s}", base, extra);
    sse(m, piece);
    if (usage) {
        int k = snprintf(usage_text, sizeof usage_text, "\"prompt_tokens\":%ld,\"completion_tokens"
                         "\":%d,\"total_tokens\":%ld", prompt_tokens, ntok, prompt_tokens + ntok);
        if (think)
            snprintf(usage_text + k, sizeof usage_text - (size_t)k,
                     ",\"completion_tokens_details\":{\"reasoning_tokens\":%d}", think);
        snprintf(piece, sizeof piece, "{%s,\"choices\":[],\"usage\":{%s}}", base, usage_text);
        sse(m, piece);
    }
    sse(m, "[DONE]");
    adds(m, "0\r\n\r\n");
    st->tail_len = m->len - st->think_len - st->token_len;

    buf_t *head = &S.scratch;
    head->off = head->len = 0;
    adds(head, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               "Transfer-Encoding: chunked\r\n\r\n");
    if (chat) {
        snprintf(piece, sizeof piece, "{%s,\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                 "\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]%s}",
                 base, extra);
        sse(head, piece);
    }
    c->busy = true;
    c->st = st;
    conn_send(c, head->p, head->len);
    st->left = ntok;
    st->first_due = arrived + S.t.ttft_s;
    heap_push(st->first_due, st);
}

/* -- reading requests -- */

static void strip(const char **s, const char **e) {
    while (*s < *e && py_space((unsigned char)**s)) (*s)++;
    while (*e > *s && py_space((unsigned char)(*e)[-1])) (*e)--;
}

static bool is(const char *s, const char *e, const char *word) { /* case-insensitive */
    size_t n = strlen(word);
    return (size_t)(e - s) == n && !strncasecmp(s, word, n);
}

/* Handle one complete request at the head of c->in; false when it is not complete yet. */
static bool parse_one(conn_t *c) {
    char *b = c->in.p + c->in.off;
    size_t len = pending(&c->in);
    char *hend = memmem(b, len, "\r\n\r\n", 4);
    if (!hend) return false;
    char *eol = memmem(b, (size_t)(hend - b), "\r\n", 2);
    const char *line0_end = eol ? eol : hend;
    int64_t length = 0;
    bool bad_length = false;
    c->rid_len = 0;
    for (const char *line = eol ? eol + 2 : hend; line < hend;) {
        const char *le = memmem(line, (size_t)(hend - line), "\r\n", 2);
        if (!le) le = hend;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        const char *ks = line, *ke = colon ? colon : le, *vs = colon ? colon + 1 : le, *ve = le;
        strip(&ks, &ke);
        strip(&vs, &ve);
        if (is(ks, ke, "content-length")) { /* fast.py: int(v.strip() or 0) */
            int r = vs < ve ? py_int(vs, (size_t)(ve - vs), &length) : (length = 0);
            if (r < 0 || length < 0) bad_length = true;
            else if (r > 0) length = INT64_MAX;
        } else if (is(ks, ke, "x-request-id")) {
            c->rid_len = (int)(ve - vs < MAX_RID ? ve - vs : MAX_RID);
            memcpy(c->rid, vs, (size_t)c->rid_len);
        }
        line = le + 2;
    }
    size_t head_len = (size_t)(hend - b) + 4;
    if (bad_length) {
        reject(c, "400 Bad Request", "{\"error\": {\"message\": \"bad request: bad Content-Length"
               "\", \"type\": \"invalid_request_error\"}}");
        return false;
    }
    if (length > MAX_REQUEST_BYTES || head_len + (size_t)length > MAX_REQUEST_BYTES) {
        reject(c, "413 Payload Too Large", "{\"error\":{\"message\":\"request too large\"}}");
        return false;
    }
    if (len < head_len + (size_t)length) return false;
    const char *body = b + head_len;
    /* method and path: the request line split on single spaces, the query cut off */
    const char *sp1 = memchr(b, ' ', (size_t)(line0_end - b));
    const char *ps = sp1 ? sp1 + 1 : line0_end, *pe = line0_end;
    const char *sp2 = sp1 ? memchr(ps, ' ', (size_t)(pe - ps)) : NULL;
    if (sp2) pe = sp2;
    const char *q = memchr(ps, '?', (size_t)(pe - ps));
    if (q) pe = q;
    const char *ms = b, *me = sp1 ? sp1 : b;
    S.requests++;
    double arrived = c->arrived ? c->arrived : mono();
    c->arrived = len > head_len + (size_t)length ? mono() : 0; /* a pipelined one: arrived now */
    bool get = (size_t)(me - ms) == 3 && !memcmp(ms, "GET", 3);
    bool post = (size_t)(me - ms) == 4 && !memcmp(ms, "POST", 4);
    size_t plen = (size_t)(pe - ps);
#define PATH(p) (plen == sizeof(p) - 1 && !memcmp(ps, p, plen))
    if (get && PATH("/health")) route_health(c);
    else if (get && PATH("/v1/models")) route_models(c);
    else if (get && PATH("/stats")) route_stats(c);
    else if (get && PATH("/stats/requests")) route_stats_requests(c);
    else if (get && PATH("/metrics")) route_metrics(c);
    else if (post && PATH("/v1/chat/completions")) generate(c, body, (size_t)length, arrived, true);
    else if (post && PATH("/v1/completions")) generate(c, body, (size_t)length, arrived, false);
    else respond_json(c, "404 Not Found", "{\"error\":{\"message\":\"not found\",\"type\":\"not_found\"}}");
#undef PATH
    drop(&c->in, head_len + (size_t)length);
    return true;
}

static void parse_requests(conn_t *c) {
    while (pending(&c->in) && !c->busy && !c->closed && parse_one(c)) {}
}

static void readable(conn_t *c) {
    static char rbuf[65536]; /* then copied: a 64 KiB buffer per connection would cost more */
    char ctl[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {rbuf, sizeof rbuf};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                         .msg_controllen = sizeof ctl};
    ssize_t n = recvmsg(c->fd, &msg, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) { conn_close(c); return; } /* a client that hangs up: its stream ends with it */
    if (c->draining) {
        c->drained += (size_t)n;
        if (c->drained > DRAIN_LIMIT) conn_close(c);
        return;
    }
    if (!pending(&c->in)) {
        /* The schedule starts when the request reached this host (the kernel's receive stamp),
         * not when this loop got round to it: a busy server is then late, and says so. */
        double now = mono();
        c->arrived = now;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                double k = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - S.offset;
                if (now - 30.0 < k && k <= now) c->arrived = k;
            }
        }
    }
    add(&c->in, rbuf, (size_t)n);
    if (pending(&c->in) > MAX_REQUEST_BYTES) {
        reject(c, "413 Payload Too Large", "{\"error\":{\"message\":\"request too large\"}}");
        return;
    }
    if (!c->busy) parse_requests(c);
}

static void flush(conn_t *c) {
    ssize_t k = send(c->fd, c->out.p + c->out.off, pending(&c->out), MSG_NOSIGNAL);
    if (k < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) conn_close(c);
        return;
    }
    drop(&c->out, (size_t)k);
    if (pending(&c->out)) return;
    ep_set(c, false);
    if (c->draining) shutdown(c->fd, SHUT_WR);
    else if (!c->busy && pending(&c->in)) parse_requests(c);
}

static void accept_all(void) {
    for (int i = 0; i < 256; i++) {
        int fd = accept4(S.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN, or out of descriptors: try again on the next event */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
        conn_t *c = xrealloc(NULL, sizeof *c);
        memset(c, 0, sizeof *c);
        c->fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(S.ep, EPOLL_CTL_ADD, fd, &ev)) { close(fd); free(c); }
    }
}

static void serve(void) {
    struct epoll_event events[1024];
    double next_offset = mono() + 1.0;
    while (!S.stop) {
        while (S.to_free) {
            conn_t *c = S.to_free;
            S.to_free = c->next_free;
            free(c->in.p);
            free(c->out.p);
            free(c);
        }
        double now = mono();
        if (now > next_offset) { S.offset = clock_offset(); next_offset = now + 1.0; }
        while (S.heap_n && S.heap[0].due <= now) {
            slot_t s = heap_pop();
            emit(s.st, s.due);
            if (s.st->left > 0) heap_push(s.st->first_due + s.st->sent * S.t.itl_s, s.st);
            else { free(s.st->mem.p); free(s.st); }
        }
        /* epoll's timeout is whole ms: sleep until ~1 ms before the next write, then spin */
        double wait = S.heap_n ? S.heap[0].due - mono() : 0.5;
        int timeout = wait > SPIN_BELOW_S ? (int)ceil((wait - 0.001) * 1000) : 0;
        int n = epoll_wait(S.ep, events, 1024, timeout);
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == &listener_tag) { accept_all(); continue; }
            conn_t *c = events[i].data.ptr;
            uint32_t ev = events[i].events;
            if (!c->closed && (ev & EPOLLOUT)) flush(c);
            if (!c->closed && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) readable(c);
        }
    }
}

static void on_signal(int sig) { (void)sig; S.stop = 1; }

/* ---- command line (python -m servecheck.commands.fast_server's) ------------------------------ */

static void usage(FILE *f) {
    fputs("usage: truth_server [-h] [--host HOST] [--port PORT] [--ttft-ms TTFT_MS]\n"
          "                    [--itl-ms ITL_MS] [--tokens TOKENS]\n"
          "                    [--reasoning-tokens REASONING_TOKENS] [--ready-file READY_FILE]\n"
          "\nA calibration server for load generators (C twin of servecheck.reference.fast).\n"
          "  --port PORT   0 picks a free port (see --ready-file); default 8100\n"
          "  --ttft-ms, --itl-ms   default 100, 10;  --tokens   default 64 (without max_tokens)\n"
          "  --reasoning-tokens N  the first N tokens of every chat answer are reasoning\n"
          "  --ready-file PATH     write the bound port here once listening\n", f);
}

static bool arg_num(const char *name, const char *text, double *out, bool integer) {
    char *end;
    errno = 0;
    double v = integer ? (double)strtol(text, &end, 10) : strtod(text, &end);
    if (!*text || *end || errno) {
        fprintf(stderr, "truth_server: error: argument --%s: invalid %s value: '%s'\n", name,
                integer ? "int" : "float", text);
        return false;
    }
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1", *ready = NULL;
    double port = 8100, ttft = 100, itl = 10, tokens = 64, think = 0;
    static const struct option opts[] = {
        {"host", 1, 0, 'H'}, {"port", 1, 0, 'p'}, {"ttft-ms", 1, 0, 't'}, {"itl-ms", 1, 0, 'i'},
        {"tokens", 1, 0, 'n'}, {"reasoning-tokens", 1, 0, 'r'}, {"ready-file", 1, 0, 'f'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'H': host = optarg; break;
        case 'p': ok = arg_num("port", optarg, &port, true); break;
        case 't': ok = arg_num("ttft-ms", optarg, &ttft, false); break;
        case 'i': ok = arg_num("itl-ms", optarg, &itl, false); break;
        case 'n': ok = arg_num("tokens", optarg, &tokens, true); break;
        case 'r': ok = arg_num("reasoning-tokens", optarg, &think, true); break;
        case 'f': ready = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (!ok) return 2;
    }
    if (optind < argc) { usage(stderr); return 2; }
    S.t = (timing_t){ttft / 1000, itl / 1000, (int)tokens, (int)think};

    /* listen (fast.py: socket.create_server, SO_REUSEADDR, backlog 4096) */
    struct addrinfo hints = {.ai_family = strchr(host, ':') ? AF_INET6 : AF_INET, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *ai = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", (int)port);
    int err = getaddrinfo(host, service, &hints, &ai);
    if (err) {
        printf("servecheck truth server: cannot listen on %s:%d: %s\n", host, (int)port,
               gai_strerror(err));
        return 2;
    }
    S.lfd = -1;
    int listen_errno = 0;
    for (struct addrinfo *a = ai; a && S.lfd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
        if (fd < 0) { listen_errno = errno; continue; }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 4096)) {
            listen_errno = errno;
            close(fd);
            continue;
        }
        S.lfd = fd;
    }
    freeaddrinfo(ai);
    if (S.lfd < 0) {
        printf("servecheck truth server: cannot listen on %s:%d: %s\n", host, (int)port,
               strerror(listen_errno));
        return listen_errno == EADDRINUSE ? 3 : 2;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    getsockname(S.lfd, (struct sockaddr *)&bound, &blen);
    S.port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                               : ((struct sockaddr_in *)&bound)->sin_port);
    S.ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listener_tag};
    epoll_ctl(S.ep, EPOLL_CTL_ADD, S.lfd, &lev);

    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: epoll_wait returns */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    S.offset = clock_offset();
    S.cpu0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    if (ready) { /* atomically: a reader never sees a half-written port */
        size_t n = strlen(ready);
        char *tmp = xrealloc(NULL, n + 5);
        snprintf(tmp, n + 5, "%s.tmp", ready);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d", S.port) < 0 || fclose(f) || rename(tmp, ready)) {
            fprintf(stderr, "truth_server: cannot write %s: %s\n", ready, strerror(errno));
            return 2;
        }
        free(tmp);
    }
    printf("servecheck truth server (C) on http://%s:%d/v1 (TTFT %g ms, ITL %g ms)\n", host,
           S.port, ttft, itl);
    fflush(stdout);
    serve();
    return 0;
}

/* The load generator's native lane (optional C extension; see lane.py): a thread that sends the
 * closed loop's requests itself and reads their answers whole.
 *
 * Why: with the reader thread (_rxthread.c) under the reactor, every request still cost the
 * Locust process's Python about 480 us: the user's greenlet sending it and waking for it, the
 * reactor's hand-off, the response head parsed in Python. For a stream of 64 tokens that was as
 * much again as the reads themselves, which are what a C client (wrk) pays in all
 * (docs/benchmarks.md, issue 46). Here one thread keeps N exchanges going (N: the users holding a
 * slot), each sending its next request from a queue of encoded requests the moment its last
 * answer ended, as a C client does. It follows each response's framing (the head, the chunks or
 * the length, the SSE event boundaries) only to know where the response ends and which reads are
 * whole token chunks; those become arrival times, every other read is kept as it came, and the
 * exchange goes to Python at its end as one bundle that lane.py replays through the very parser
 * the reactor uses (wire.ResponseParser, stream.StreamState). So a record from the lane is the
 * record the reactor would make from the same reads; only who sends and who waits changed.
 *
 * Interface (module servecheck.load.generator._lane):
 *   Lane(family, host, port, pool, connect_timeout_s, read_timeout_s, pause_s, max_event,
 *        long_pause_s=pause_s, items_too=False)
 *       family: socket.AF_INET or AF_INET6; host: the numeric address; pool: reuse connections
 *       (keep-alive); max_event: the parser's bound on one SSE event (the lane stops reading an
 *       exchange whose event is twice that long: the parser has failed it by then); pause_s:
 *       the thread's pause after a pass that read, long_pause_s the longer one it takes where the
 *       streams' tokens come far enough apart (pace())
 *   l.fileno()            an eventfd, readable when bundles wait (or the lane became idle)
 *   l.put(seq, request, timeout_s)   queue one request (the whole HTTP request's bytes)
 *   l.slots(n, drop=True) run n exchanges at once; fewer than before drops the busy ones beyond n
 *                         (each ends as a bundle with END_DROPPED: no record, as a cancelled user),
 *                         or with drop=False lets each end as usual and starts nothing more there
 *   l.stop_at(t)          start no request after time t (perf_counter's clock); the queue is
 *                         withdrawn then; returns the number withdrawn so far
 *   l.abort(seq)          end that exchange now (the parser already ended it): END_ABORTED
 *   l.take() -> (bundles, idle)
 *       bundles: [(seq, end, err, new_conn, connect_s, t_start, t_sent, t_written, t_end, items,
 *                  plain)]
 *       items: [(t, payload)]: payload bytes (a read), b"" (the peer closed), an int (an errno:
 *       the connection failed) or a list of token arrival times; t is the read's time on
 *       perf_counter's clock (the kernel's receive stamp where plausible)
 *       end: 0 (more of this exchange follows), else one of the END_ codes below
 *       plain: None, or for a whole plain exchange (plain_of()) its answer already read:
 *       (head, t_headers, t_body, first_body, events), and then items is None (unless the lane
 *       was made with items_too: the tests replay both)
 *       idle: no exchange open and none queued
 *   l.open() -> (n, oldest_t_start, reads)   exchanges open now, the oldest's start, their reads
 *   l.stats() -> (reads, passes, cpu_s, slice_ns, late, counted, kernel, user, started, held_s,
 *                 busy_s, long_passes)
 *   l.started()           stats()'s started alone
 *   l.close()             stop and join the thread; open exchanges are dropped
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "_rxcommon.h"

#define RECV_BYTES 65536
#define MAX_EVENTS 256
#define MAX_HEADER_BYTES (64 * 1024)
#define ERROR_PREFIX 2000        /* ResponseParser's limit on a non-200 body */
#define MAX_LINE 1024            /* a chunk size or trailer line longer than this is malformed */
#define BUNDLE_BYTES 65536       /* an exchange's kept reads go to Python once this many wait */
#define BUNDLE_TOKENS 4096       /* ... and its arrival times once this many */
#define SWEEP_S 0.02             /* how often timeouts are checked */
#define START_MAX 32             /* requests started in one go (see schedule()) */
#define LATE_S 0.010             /* a read taken this long after its bytes arrived counts as late */
/* The pause's pacing (see pace()): judged over windows of PACE_WINDOW_S, on PACE_MIN_READS token
 * reads at least; a window whose token reads were at most PACE_TIGHT_SHARE tight (two tokens in
 * one read, or a token read within TIGHT_PAUSES long pauses of its stream's last one) earns the
 * next window the long pause. */
#define PACE_WINDOW_S 0.25
#define PACE_MIN_READS 64
#define PACE_TIGHT_SHARE 0.01
#define TIGHT_PAUSES 4
#define OUT_LIMIT (64u << 20)    /* stop reading (back-pressure) while this much waits for take() */

enum { IT_DATA = 0, IT_EOF = 1, IT_ERROR = 2, IT_TOKENS = 3 };
enum {
    END_MORE = 0,     /* a partial bundle: the exchange goes on */
    END_COMPLETE = 1, /* the framing says the response is whole */
    END_CLOSED = 2,   /* the peer closed or the connection failed (the last item says which) */
    END_DEADLINE = 3, /* not complete by its deadline */
    END_IDLE = 4,     /* no data for read_timeout_s */
    END_CONNECT = 5,  /* could not connect: err is the errno, -1 for the connect timeout */
    END_SEND = 6,     /* the request could not be written: err */
    END_SEND_TIMEOUT = 7,
    END_PARSED = 8,   /* the lane stopped: malformed or oversized; the parser says why */
    END_DROPPED = 9,  /* its slot was taken away (a user stopped) or the lane closed */
    END_ABORTED = 10, /* abort(): the parser had ended it */
};
enum { P_FREE = 0, P_CONNECT = 1, P_SEND = 2, P_READ = 3 };

typedef struct {
    int32_t kind, len; /* len: bytes, times, or the errno */
    double t;
} item_head;

typedef struct {
    int64_t seq;
    int32_t end, err, new_conn;
    int32_t plain; /* the whole exchange in this bundle, and it may be plain (see plain_of()) */
    double connect_s, t_start, t_sent, t_written, t_end;
    uint64_t bytes; /* of the items that follow */
} bundle_head;

typedef struct {
    int64_t seq;
    char *req;
    size_t len;
    double timeout_s;
} request;

typedef struct {
    int fd; /* -1: none (a pooled idle connection keeps its fd with phase P_FREE) */
    int phase;
    int reused, retried, got_any;
    request rq;
    size_t req_off;
    double t_start, t_conn0, connect_s, t_sent, t_written, last, deadline;
    double last_tok; /* the time of this exchange's last read that held token chunks (0: none yet) */
    double t_free; /* since when this free slot waits for the generator's next request (0: not) */
    uint64_t reads;
    /* the response's framing */
    char *head;
    size_t head_len, head_cap;
    int in_body, status, chunked, has_length, keep, bad, extra;
    int64_t length, received;
    size_t prefix;
    int cst; /* 0 size line, 1 data, 2 CRLF after data, 3 trailers */
    size_t cleft, cskip;
    char line[MAX_LINE];
    size_t line_len;
    int cdone;
    size_t sse_pending, bound;
    int sse_nl, sse_cr, sse_done, eols, prev_cr;
    char tail[8];
    size_t tail_len;
    /* what goes to Python */
    char *it;
    size_t it_len, it_cap;
    double *tok;
    int ntok, tok_cap;
    int sent_any;  /* a bundle of this exchange went already */
    int wants_out; /* watched for EPOLLOUT (connecting, or a send that would block) */
} conn;

typedef struct {
    PyObject_HEAD
    int ep, notify_fd, wake_fd;
    pthread_t thread;
    pthread_mutex_t mu, stop_mu;
    int started, stop, dead, closed;
    pid_t owner;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int family, pool;
    double connect_timeout_s, read_timeout_s, stop_at;
    long pause_ns, pause_min_ns, pause_max_ns; /* the pause now, and its two settings (pace()) */
    uint64_t tok_reads, tight_reads; /* this pacing window's token reads, and the tight ones */
    uint64_t slow_reads; /* ... and its reads taken more than LATE_S / 2 after their bytes came */
    uint64_t long_passes; /* passes that paused the long pause */
    size_t max_event;
    int items_too; /* a plain exchange's bundle carries its items too (the tests compare both) */
    conn *conns;
    int nconns, want;
    int backlog; /* the last schedule() left free slots with requests queued (START_MAX) */
    int drop; /* slots beyond want drop their exchange (else it ends as usual first) */
    request *q;
    size_t qhead, qlen, qcap;
    int64_t *aborts;
    size_t naborts, abort_cap;
    uint64_t withdrawn;
    char *out;
    size_t out_len, out_cap;
    int notified, was_idle;
    double offset;
    uint64_t reads, passes, late, counted, kernel, user, starts;
    double cpu_s;
    double held_s, busy_s; /* slot time spent waiting for a queued request, and in exchanges */
    long slice_ns;
} Lane;

/* ------------------------------------------------------------------ items and bundles */

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    char *nb = realloc(*buf, c);
    if (nb == NULL) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int flush_tokens(conn *c) {
    if (c->ntok == 0) return 0;
    size_t bytes = (size_t)c->ntok * sizeof(double);
    if (grow(&c->it, &c->it_cap, c->it_len + sizeof(item_head) + bytes) < 0) return -1;
    item_head h = {IT_TOKENS, c->ntok, c->tok[c->ntok - 1]};
    memcpy(c->it + c->it_len, &h, sizeof h);
    memcpy(c->it + c->it_len + sizeof h, c->tok, bytes);
    c->it_len += sizeof h + bytes;
    c->ntok = 0;
    return 0;
}

static int push_item(conn *c, int kind, double t, const char *data, int32_t len) {
    if (flush_tokens(c) < 0) return -1;
    size_t bytes = kind == IT_DATA ? (size_t)len : 0;
    if (grow(&c->it, &c->it_cap, c->it_len + sizeof(item_head) + bytes) < 0) return -1;
    item_head h = {kind, len, t};
    memcpy(c->it + c->it_len, &h, sizeof h);
    if (bytes) memcpy(c->it + c->it_len + sizeof h, data, bytes);
    c->it_len += sizeof h + bytes;
    return 0;
}

static int push_token(conn *c, double t) {
    if (c->ntok == c->tok_cap) {
        int cap = c->tok_cap ? c->tok_cap * 2 : 128;
        double *nt = realloc(c->tok, (size_t)cap * sizeof(double));
        if (nt == NULL) return -1;
        c->tok = nt;
        c->tok_cap = cap;
    }
    c->tok[c->ntok++] = t;
    return 0;
}

/* Move c's items into the lane's output as one bundle (the caller holds mu). */
static void emit(Lane *l, conn *c, int end, int err, double t_end) {
    flush_tokens(c); /* out of memory: the times are lost, the bundle still goes */
    size_t need = l->out_len + sizeof(bundle_head) + c->it_len;
    if (grow(&l->out, &l->out_cap, need) < 0) {
        c->it_len = 0; /* nothing else to do: the record then has fewer reads than came */
        if (grow(&l->out, &l->out_cap, l->out_len + sizeof(bundle_head)) < 0) return;
    }
    bundle_head b;
    memset(&b, 0, sizeof b);
    b.seq = c->rq.seq;
    b.end = end;
    b.plain = end == END_COMPLETE && !c->sent_any && c->it_len > 0 && c->status == 200 &&
              c->chunked && !c->sse_cr && !c->extra && !c->bad && t_end <= c->deadline;
    b.err = err;
    b.new_conn = !c->reused;
    b.connect_s = c->connect_s;
    b.t_start = c->t_start;
    b.t_sent = c->t_sent;
    b.t_written = c->t_written;
    b.t_end = t_end;
    b.bytes = c->it_len;
    memcpy(l->out + l->out_len, &b, sizeof b);
    l->out_len += sizeof b;
    memcpy(l->out + l->out_len, c->it, c->it_len);
    l->out_len += c->it_len;
    c->it_len = 0;
    c->sent_any = 1;
}

/* ------------------------------------------------------------------ the response's framing */

static void reset_parse(conn *c) {
    c->head_len = 0;
    c->in_body = c->status = c->chunked = c->has_length = c->keep = c->bad = c->extra = 0;
    c->length = c->received = 0;
    c->prefix = 0;
    c->cst = 0;
    c->cleft = c->cskip = c->line_len = 0;
    c->cdone = 0;
    c->sse_pending = c->bound = 0;
    c->sse_nl = c->sse_cr = c->sse_done = c->eols = c->prev_cr = 0;
    c->tail_len = 0;
    c->it_len = 0;
    c->ntok = 0;
    c->got_any = 0;
    c->reads = 0;
    c->last_tok = 0.0;
}

static void strip(const char **p, size_t *n) {
    while (*n && (**p == ' ' || **p == '\t')) (*p)++, (*n)--;
    while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t')) (*n)--;
}

/* A decimal or hexadecimal number as Python's int() reads the plain forms (an optional sign,
 * digits); -1 for anything else. */
static int64_t number(const char *p, size_t n, int base) {
    strip(&p, &n);
    if (n && *p == '+') p++, n--;
    if (base == 16 && n > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2, n -= 2;
    if (n == 0 || n > 15) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        int d = (ch >= '0' && ch <= '9') ? ch - '0'
                : (base == 16 && ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                : (base == 16 && ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * base + d;
    }
    return v;
}

/* The status line and headers (ResponseParser._head): sets bad where it would fail. */
static void parse_head(conn *c, const char *h, size_t n) {
    const char *eol = memmem(h, n, "\r\n", 2);
    size_t first = eol ? (size_t)(eol - h) : n;
    const char *sp = memchr(h, ' ', first);
    if (sp == NULL) {
        c->bad = 1;
        return;
    }
    const char *code = sp + 1, *sp2 = memchr(code, ' ', (size_t)(h + first - code));
    int64_t status = number(code, (size_t)((sp2 ? sp2 : h + first) - code), 10);
    if (status < 0) {
        c->bad = 1;
        return;
    }
    c->status = (int)status;
    const char *te = NULL, *cl = NULL, *cn = NULL;
    size_t te_n = 0, cl_n = 0, cn_n = 0;
    size_t pos = eol ? first + 2 : n;
    while (pos < n) {
        const char *line = h + pos, *e = memmem(line, n - pos, "\r\n", 2);
        size_t ln = e ? (size_t)(e - line) : n - pos;
        const char *colon = memchr(line, ':', ln);
        const char *k = line, *v = colon ? colon + 1 : line + ln;
        size_t kn = colon ? (size_t)(colon - line) : ln, vn = colon ? ln - kn - 1 : 0;
        strip(&k, &kn);
        strip(&v, &vn);
        if (kn == 17 && strncasecmp(k, "transfer-encoding", 17) == 0) te = v, te_n = vn;
        else if (kn == 14 && strncasecmp(k, "content-length", 14) == 0) cl = v, cl_n = vn;
        else if (kn == 10 && strncasecmp(k, "connection", 10) == 0) cn = v, cn_n = vn;
        pos += ln + 2;
    }
    for (size_t i = 0; te != NULL && i + 7 <= te_n; i++)
        if (strncasecmp(te + i, "chunked", 7) == 0) c->chunked = 1;
    if (cl != NULL && !c->chunked) {
        c->length = number(cl, cl_n, 10);
        if (c->length < 0) {
            c->bad = 1;
            return;
        }
        c->has_length = 1;
    }
    int close_hdr = cn != NULL && cn_n == 5 && strncasecmp(cn, "close", 5) == 0;
    c->keep = !close_hdr && (c->chunked || c->has_length);
    c->in_body = 1;
}

/* Payload bytes of the body: a non-200 body's prefix counts; a 200's SSE boundaries are
 * followed ("\n\n" splits events, as StreamState's fast reader splits them; a CR anywhere hands
 * that reader to the strict parser, and the lane counts no token chunk after it). */
static void payload(Lane *l, conn *c, const char *p, size_t n) {
    if (c->status != 200) {
        c->prefix += n;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        /* exactly the fast reader's split: what countable() asks */
        if (ch == '\n' && c->sse_nl) {
            c->sse_pending = 0;
            c->sse_nl = 0;
        } else {
            c->sse_pending++;
            c->sse_nl = ch == '\n';
        }
        /* any event end (LF, CRLF or CR line ends): only the size bound below asks */
        if (ch == '\r') {
            c->sse_cr = 1;
            c->eols++;
            c->prev_cr = 1;
        } else if (ch == '\n') {
            if (!c->prev_cr) c->eols++;
            c->prev_cr = 0;
        } else {
            c->eols = 0;
            c->prev_cr = 0;
            c->bound++;
        }
        if (c->eols >= 2) c->bound = 0, c->eols = 0;
        if (c->tail_len == sizeof c->tail) {
            memmove(c->tail, c->tail + 1, sizeof c->tail - 1);
            c->tail_len--;
        }
        c->tail[c->tail_len++] = ch;
        if (ch == ']' && c->tail_len >= 6 && memcmp(c->tail + c->tail_len - 6, "[DONE]", 6) == 0)
            c->sse_done = 1;
    }
    if (c->bound > 2 * l->max_event) c->bad = 1; /* the parser failed it ("too-large") by now */
}

static int body_line(conn *c, const char *p, size_t n, size_t *pos) {
    /* Gather a line up to CRLF across reads; 1 when it is whole (in c->line, CRLF dropped). */
    while (*pos < n) {
        char ch = p[(*pos)++];
        if (c->line_len >= MAX_LINE) {
            c->bad = 1;
            return 0;
        }
        c->line[c->line_len++] = ch;
        if (ch == '\n' && c->line_len >= 2 && c->line[c->line_len - 2] == '\r') {
            c->line_len -= 2;
            return 1;
        }
    }
    return 0;
}

/* Chunked transfer-decoding (wire._Dechunker): payload for each piece, cdone at the end. */
static void dechunk(Lane *l, conn *c, const char *p, size_t n) {
    size_t pos = 0;
    while (pos < n && !c->cdone && !c->bad) {
        if (c->cst == 1) {
            size_t take = c->cleft < n - pos ? c->cleft : n - pos;
            payload(l, c, p + pos, take);
            pos += take;
            c->cleft -= take;
            if (c->cleft == 0) c->cst = 2, c->cskip = 2;
        } else if (c->cst == 2) {
            size_t take = c->cskip < n - pos ? c->cskip : n - pos;
            pos += take;
            c->cskip -= take;
            if (c->cskip == 0) c->cst = 0;
        } else if (body_line(c, p, n, &pos)) {
            size_t ln = c->line_len;
            c->line_len = 0;
            if (c->cst == 0) {
                const char *semi = memchr(c->line, ';', ln);
                size_t sn = semi ? (size_t)(semi - c->line) : ln;
                const char *s = c->line;
                strip(&s, &sn);
                int64_t size = sn == 0 ? 0 : number(s, sn, 16);
                if (size < 0) c->bad = 1;
                else if (size == 0) c->cst = 3;
                else c->cleft = (size_t)size, c->cst = 1;
            } else if (ln == 0) {
                c->cdone = 1; /* the empty line after the trailers */
            }
        }
    }
    if (pos < n && c->cdone) c->extra = 1;
}

static void body(Lane *l, conn *c, const char *p, size_t n) {
    if (c->chunked) {
        dechunk(l, c, p, n);
        return;
    }
    if (c->has_length) {
        c->received += (int64_t)n;
        if (c->received > c->length) c->extra = 1;
    }
    payload(l, c, p, n);
}

/* Feed one kept read to the framing. */
static void parse(Lane *l, conn *c, const char *p, size_t n) {
    if (c->in_body) {
        body(l, c, p, n);
        return;
    }
    size_t old = c->head_len;
    if (grow(&c->head, &c->head_cap, old + n) < 0) {
        c->bad = 1;
        return;
    }
    memcpy(c->head + old, p, n);
    c->head_len += n;
    size_t from = old > 3 ? old - 3 : 0;
    const char *end = memmem(c->head + from, c->head_len - from, "\r\n\r\n", 4);
    if (end == NULL) {
        if (c->head_len > MAX_HEADER_BYTES) c->bad = 1;
        return;
    }
    size_t hn = (size_t)(end - c->head);
    parse_head(c, c->head, hn);
    if (c->bad) return;
    size_t rest = c->head_len - hn - 4;
    if (rest) body(l, c, c->head + hn + 4, rest);
}

static int complete(conn *c) {
    if (!c->in_body) return 0;
    if (c->chunked) return c->cdone;
    if (c->has_length && c->received >= c->length) return 1;
    return c->status != 200 && c->prefix >= ERROR_PREFIX;
}

/* Whether the next read's whole token chunks may be counted without keeping them: what
 * ResponseParser.countable() says (a 200 chunked body, between chunks, its stream between
 * events, not past [DONE], no CR framing). */
static int countable(conn *c) {
    return c->in_body && c->status == 200 && c->chunked && c->cst == 0 && c->line_len == 0 &&
           !c->cdone && c->sse_pending == 0 && !c->sse_cr && !c->sse_done && !c->bad;
}

/* ------------------------------------------------------------------ exchanges */

static double now_t(void) { return now_mono(); }

static void close_fd(conn *c) {
    if (c->fd >= 0) close(c->fd); /* leaves the epoll set with it */
    c->fd = -1;
}

static void start_next(Lane *l, conn *c);

/* End c's exchange: its bundle, then the connection kept or closed, then the next request. */
static void finish(Lane *l, conn *c, int end, int err, double t) {
    emit(l, c, end, err, t);
    if (c->t_start > 0 && t > c->t_start) l->busy_s += t - c->t_start;
    int keep = end == END_COMPLETE && c->keep && !c->extra && !c->bad && l->pool;
    if (!keep) close_fd(c); /* a kept one stays watched for input: its close shows as a read */
    free(c->rq.req);
    c->rq.req = NULL;
    c->phase = P_FREE;
    c->sent_any = 0;
}

static void watch(Lane *l, conn *c, uint32_t events, int add) {
    struct epoll_event ev = {.events = events, .data.u32 = (uint32_t)(c - l->conns)};
    if (epoll_ctl(l->ep, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev) < 0 && add)
        epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void send_more(Lane *l, conn *c);
static void begin_send(Lane *l, conn *c);

static void open_conn(Lane *l, conn *c) {
    c->reused = 0;
    c->t_conn0 = now_t();
    int fd = socket(l->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        finish(l, c, END_CONNECT, errno, now_t());
        return;
    }
    c->fd = fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    c->wants_out = 1;
    watch(l, c, EPOLLOUT, 1);
    if (connect(fd, (struct sockaddr *)&l->addr, l->addrlen) == 0) {
        c->connect_s = now_t() - c->t_conn0;
        begin_send(l, c);
        return;
    }
    if (errno != EINPROGRESS) {
        int err = errno;
        close_fd(c);
        finish(l, c, END_CONNECT, err, now_t());
        return;
    }
    c->phase = P_CONNECT;
}

/* A pooled connection that failed before anything came back is stale: once, a fresh one. */
static int retry(Lane *l, conn *c) {
    if (!c->reused || c->got_any || c->retried) return 0;
    c->retried = 1;
    close_fd(c);
    reset_parse(c);
    open_conn(l, c);
    return 1;
}

/* The request's first byte goes now (ResponseParser's clock starts here, as the reactor's). */
static void begin_send(Lane *l, conn *c) {
    c->phase = P_SEND;
    c->t_sent = c->last = now_t();
    c->req_off = 0;
    send_more(l, c);
}

static void send_more(Lane *l, conn *c) {
    while (c->req_off < c->rq.len) {
        ssize_t w = send(c->fd, c->rq.req + c->req_off, c->rq.len - c->req_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                watch(l, c, EPOLLOUT, 0);
                c->wants_out = 1;
                return;
            }
            if (errno == EINTR) continue;
            int err = errno;
            if (!retry(l, c)) finish(l, c, END_SEND, err, now_t());
            return;
        }
        c->req_off += (size_t)w;
        c->last = now_t();
    }
    c->t_written = now_t();
    c->phase = P_READ;
    if (c->wants_out) watch(l, c, EPOLLIN | EPOLLRDHUP, 0);
    c->wants_out = 0;
}

static void start(Lane *l, conn *c, request rq) {
    c->rq = rq;
    c->t_start = now_t();
    if (c->t_free > 0) { /* the slot waited for this request: the generator held its user back */
        l->held_s += c->t_start - c->t_free;
        c->t_free = 0;
    }
    c->deadline = c->t_start + rq.timeout_s;
    c->connect_s = c->t_sent = c->t_written = 0.0;
    c->retried = 0;
    c->sent_any = 0;
    reset_parse(c);
    l->starts++;
    if (c->fd >= 0) {
        c->reused = 1;
        begin_send(l, c);
    } else {
        open_conn(l, c);
    }
}

/* Take the next queued request onto c, if any and if the lane still starts requests. */
static void start_next(Lane *l, conn *c) {
    if (c->phase != P_FREE || l->qlen == 0) return;
    if (now_t() >= l->stop_at) return;
    request rq = l->q[l->qhead];
    l->qhead = (l->qhead + 1) % l->qcap;
    l->qlen--;
    start(l, c, rq);
}

static void withdraw(Lane *l) {
    while (l->qlen) {
        free(l->q[l->qhead].req);
        l->qhead = (l->qhead + 1) % l->qcap;
        l->qlen--;
        l->withdrawn++;
    }
}

/* One read of c (the caller holds mu). */
static void read_conn(Lane *l, conn *c, char *data, char *anc, size_t anc_len) {
    struct iovec iov = {data, RECV_BYTES};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = anc;
    msg.msg_controllen = anc_len;
    ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT);
    int err = n < 0 ? errno : 0;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) return;
    double t_read = now_t();
    l->reads++;
    c->reads++;
    if (n <= 0) {
        if (retry(l, c)) return;
        push_item(c, n == 0 ? IT_EOF : IT_ERROR, t_read, NULL, n == 0 ? 0 : err);
        finish(l, c, END_CLOSED, 0, t_read);
        return;
    }
    double stamp = 0.0;
    for (struct cmsghdr *m = CMSG_FIRSTHDR(&msg); m != NULL; m = CMSG_NXTHDR(&msg, m)) {
        if (m->cmsg_level == SOL_SOCKET && m->cmsg_type == SO_TIMESTAMPNS &&
            m->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(m), sizeof ts);
            stamp = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
        }
    }
    double t = t_read, k = stamp - l->offset; /* the reactor's rule (reactor._drain) */
    if (stamp != 0.0 && t_read - 30.0 < k && k <= t_read + 0.0005) {
        t = k < t_read ? k : t_read;
        l->kernel++;
        if (t_read - k > LATE_S / 2) l->slow_reads++;
        if (t_read - k > LATE_S) l->late++;
    } else {
        l->user++;
    }
    c->got_any = 1;
    c->last = t;
    size_t done = 0, span;
    int tokens = 0;
    if (countable(c)) {
        while ((span = token_span(data + done, (size_t)n - done)) > 0) {
            if (push_token(c, t) < 0) break; /* no memory: kept as a read instead */
            done += span;
            tokens++;
        }
        l->counted += (uint64_t)tokens;
    }
    if (tokens > 0) {
        l->tok_reads++;
        if (tokens > 1 || (c->last_tok > 0.0 && t - c->last_tok < TIGHT_PAUSES * l->pause_max_ns * 1e-9))
            l->tight_reads++;
        c->last_tok = t;
    }
    if (done < (size_t)n) {
        if (push_item(c, IT_DATA, t, data + done, (int32_t)((size_t)n - done)) < 0) c->bad = 1;
        parse(l, c, data + done, (size_t)n - done);
    }
    if (c->bad) finish(l, c, END_PARSED, 0, t);
    else if (complete(c)) finish(l, c, END_COMPLETE, 0, t);
    else if (t > c->deadline) finish(l, c, END_DEADLINE, 0, t);
    else if (c->it_len >= BUNDLE_BYTES || c->ntok >= BUNDLE_TOKENS) emit(l, c, END_MORE, 0, t);
}

static void connected(Lane *l, conn *c) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
    if (err == EINPROGRESS) return;
    if (err) {
        close_fd(c);
        finish(l, c, END_CONNECT, err, now_t());
        return;
    }
    c->connect_s = now_t() - c->t_conn0;
    begin_send(l, c);
}

static void handle(Lane *l, conn *c, uint32_t events, char *data, char *anc, size_t anc_len) {
    uint32_t out = EPOLLOUT | EPOLLERR | EPOLLHUP;
    if (c->phase == P_FREE) close_fd(c); /* an idle pooled connection closed (or spoke): gone */
    else if (c->phase == P_CONNECT && (events & out)) connected(l, c);
    else if (c->phase == P_SEND && (events & out)) send_more(l, c);
    else if (c->phase == P_READ) read_conn(l, c, data, anc, anc_len);
}

/* Timeouts (the reactor's tick: the deadline, no data for read_timeout_s, the connect timeout). */
static void sweep(Lane *l, double now) {
    for (int i = 0; i < l->nconns; i++) {
        conn *c = &l->conns[i];
        if (c->phase == P_CONNECT && now - c->t_conn0 > l->connect_timeout_s) {
            close_fd(c);
            finish(l, c, END_CONNECT, -1, now);
        } else if (c->phase == P_SEND && now - c->last > l->read_timeout_s) {
            finish(l, c, END_SEND_TIMEOUT, 0, now);
        } else if (c->phase == P_READ && now > c->deadline) {
            finish(l, c, END_DEADLINE, 0, now);
        } else if (c->phase == P_READ && now - c->last > l->read_timeout_s) {
            finish(l, c, END_IDLE, 0, now);
        }
    }
}

/* Slots beyond want lose their exchange; aborted ones end; free slots start the next request. */
static void schedule(Lane *l) {
    double now = now_t();
    if (now >= l->stop_at) withdraw(l);
    for (int i = 0; i < l->nconns; i++) {
        conn *c = &l->conns[i];
        if (i >= l->want) {
            c->t_free = 0;
            if (c->phase != P_FREE && l->drop) finish(l, c, END_DROPPED, 0, now);
            if (c->phase == P_FREE) close_fd(c); /* a retired slot's last exchange ends first */
            continue;
        }
        for (size_t a = 0; a < l->naborts && c->phase != P_FREE; a++)
            if (l->aborts[a] == c->rq.seq) finish(l, c, END_ABORTED, 0, now);
    }
    l->naborts = 0;
    /* A wave of answers that ended together (the first ones of a run, whose users all started at
     * once) frees hundreds of slots in one pass; their sends (tens of us each on loopback, where
     * send() delivers to the server's socket) wait for the pass's reads, and go START_MAX at a
     * time so that the reads of the next pass are not kept waiting behind them. */
    int started = 0;
    for (int i = 0; i < l->want && i < l->nconns && l->qlen && started < START_MAX; i++) {
        if (l->conns[i].phase != P_FREE) continue;
        start_next(l, &l->conns[i]);
        started++;
    }
    l->backlog = started == START_MAX;
    /* A free slot left waiting (no request queued, or START_MAX reached) waits for the generator,
     * not for its user: the time until it starts counts as held (Lane.stats). */
    if (now < l->stop_at)
        for (int i = 0; i < l->want && i < l->nconns; i++)
            if (l->conns[i].phase == P_FREE && l->conns[i].t_free == 0) l->conns[i].t_free = now;
}

static int is_idle(Lane *l) {
    if (l->qlen) return 0;
    for (int i = 0; i < l->nconns; i++)
        if (l->conns[i].phase != P_FREE) return 0;
    return 1;
}

static void notify(Lane *l) {
    int idle = is_idle(l);
    int signal = !l->notified && (l->out_len > 0 || (idle && !l->was_idle));
    l->was_idle = idle;
    if (signal) {
        l->notified = 1;
        uint64_t one = 1;
        ssize_t w = write(l->notify_fd, &one, sizeof one);
        (void)w;
    }
}

/* The pause after a pass that read, for the next window (the caller holds mu).
 *
 * Why: a pass costs the thread about 15 us beyond its reads (epoll_wait, the pause's sleep and
 * wake-up, the schedule): at 256 streams of 10 ms tokens the 0.5 ms pause made six passes a
 * request, a sixth of the thread's whole cost, and a 2 ms pause two (docs/benchmarks.md). But a
 * read that comes later than a stream's next token takes both tokens at once, under one kernel
 * stamp: the gap between them is lost. So the long pause is earned: a window in which no more
 * than PACE_TIGHT_SHARE of the token reads were tight (two tokens in one read, or a token read
 * within TIGHT_PAUSES long pauses of its stream's previous one: tokens close enough that a long
 * pause could merge them) gives the next window the long pause; any other window (few token
 * reads, or tight ones: fast streams, or a server that sends tokens in bursts) the short one. And
 * a window in which any read came more than LATE_S / 2 after its bytes (the thread fell behind:
 * many streams, a busy core) keeps the short pause too, as does a pass whose wait returned as
 * many ready connections as it takes (more are ready: no pause at all then). At 1024 streams of
 * 10 ms tokens on one core the long pause alone left 0.3 % of the reads 10 ms late. */
static void pace(Lane *l) {
    int calm = l->tok_reads >= PACE_MIN_READS && l->slow_reads == 0 &&
               (double)l->tight_reads <= PACE_TIGHT_SHARE * (double)l->tok_reads;
    l->pause_ns = calm ? l->pause_max_ns : l->pause_min_ns;
    l->tok_reads = l->tight_reads = l->slow_reads = 0;
}

static void *run(void *arg) {
    Lane *l = (Lane *)arg;
    long slice = short_slice();
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the Python thread's business */
    char *data = malloc(RECV_BYTES);
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(struct timespec)) * 2];
    } anc;
    struct epoll_event events[MAX_EVENTS];
    double width, offset_at = now_t(), last_sweep = offset_at, last_pace = offset_at;
    pthread_mutex_lock(&l->mu);
    l->slice_ns = slice;
    l->offset = clock_offset(20, &width);
    if (data == NULL) l->dead = 1;
    pthread_mutex_unlock(&l->mu);
    while (data != NULL) {
        pthread_mutex_lock(&l->mu);
        if (l->stop) {
            pthread_mutex_unlock(&l->mu);
            break;
        }
        schedule(l);
        notify(l);
        int busy = !is_idle(l);
        pthread_mutex_unlock(&l->mu);
        int n = epoll_wait(l->ep, events, MAX_EVENTS, l->backlog ? 0 : busy ? (int)(SWEEP_S * 1000) : 1000);
        if (n < 0 && errno != EINTR) break;
        double offset = clock_offset(3, &width), mono = now_t();
        pthread_mutex_lock(&l->mu);
        if (width <= 20e-6 || mono - offset_at >= 1.0) {
            offset_at = mono;
            l->offset = offset;
        }
        int got = 0;
        for (int i = 0; i < n; i++) {
            if (events[i].data.u32 == UINT32_MAX) {
                uint64_t v;
                ssize_t r = read(l->wake_fd, &v, sizeof v);
                (void)r;
                continue;
            }
            uint32_t k = events[i].data.u32;
            if (k >= (uint32_t)l->nconns || l->out_len >= OUT_LIMIT) continue;
            conn *c = &l->conns[k];
            if (c->fd < 0) continue;
            handle(l, c, events[i].events, data, anc.bytes, sizeof anc.bytes);
            got = 1;
        }
        schedule(l); /* the slots this pass freed take their next request: after its reads */
        if (got) l->passes++;
        double now = now_t();
        if (now - last_sweep >= SWEEP_S) {
            last_sweep = now;
            sweep(l, now);
        }
        if (now - last_pace >= PACE_WINDOW_S) {
            last_pace = now;
            pace(l);
        }
        notify(l);
        int full = l->out_len >= OUT_LIMIT;
        long pause_ns = n == MAX_EVENTS ? 0 : l->pause_ns; /* more are ready: read them now */
        if (got && !full && pause_ns > l->pause_min_ns) l->long_passes++;
        pthread_mutex_unlock(&l->mu);
        if (full || (got && pause_ns > 0)) {
            struct timespec pause = {0, full ? 1000000 : pause_ns};
            nanosleep(&pause, NULL);
        }
    }
    free(data);
    struct timespec cpu;
    pthread_mutex_lock(&l->mu);
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
        l->cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9;
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ------------------------------------------------------------------ the Python type */

static void wake(Lane *l) {
    uint64_t one = 1;
    ssize_t w = write(l->wake_fd, &one, sizeof one);
    (void)w;
}

static int owned(Lane *l) {
    if (l->owner == getpid()) return 1;
    PyErr_SetString(PyExc_RuntimeError, "this lane belongs to the process that created it (this is a forked child)");
    return 0;
}

static int ensure_thread(Lane *l) {
    if (l->started) return 0;
    int rc = pthread_create(&l->thread, NULL, run, l);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    l->started = 1;
    return 0;
}

static void lane_stop(Lane *l) {
    l->closed = 1;
    if (l->owner != getpid()) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&l->stop_mu);
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_mutex_unlock(&l->mu);
        wake(l);
        pthread_join(l->thread, NULL);
        l->started = 0;
    }
    pthread_mutex_unlock(&l->stop_mu);
    Py_END_ALLOW_THREADS
}

static PyObject *Lane_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"family", "host", "port", "pool", "connect_timeout_s", "read_timeout_s",
                             "pause_s", "max_event", "long_pause_s", "items_too", NULL};
    int family, port, pool, items_too = 0;
    const char *host;
    double connect_timeout_s, read_timeout_s, pause_s, long_pause_s = -1.0;
    Py_ssize_t max_event;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "isipdddn|dp", kwlist, &family, &host, &port, &pool,
                                     &connect_timeout_s, &read_timeout_s, &pause_s, &max_event,
                                     &long_pause_s, &items_too))
        return NULL;
    if (long_pause_s < 0.0) long_pause_s = pause_s; /* none given: one pause, no pacing */
    if (!(pause_s >= 0.0 && pause_s < 1.0) || !(long_pause_s >= pause_s && long_pause_s < 1.0) ||
        !(connect_timeout_s > 0) || !(read_timeout_s > 0) ||
        max_event <= 0 || port <= 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "lane: a timeout, pause, port or bound out of range");
        return NULL;
    }
    Lane *l = (Lane *)type->tp_alloc(type, 0);
    if (l == NULL) return NULL;
    l->ep = l->notify_fd = l->wake_fd = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->stop_mu, NULL);
    l->owner = getpid();
    l->family = family;
    l->pool = pool;
    l->connect_timeout_s = connect_timeout_s;
    l->read_timeout_s = read_timeout_s;
    l->pause_ns = l->pause_min_ns = (long)(pause_s * 1e9);
    l->pause_max_ns = (long)(long_pause_s * 1e9);
    l->max_event = (size_t)max_event;
    l->items_too = items_too;
    l->stop_at = 1e300;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&l->addr;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1) goto bad_host;
        l->addrlen = sizeof *a;
    } else if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&l->addr;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) goto bad_host;
        l->addrlen = sizeof *a;
    } else {
        goto bad_host;
    }
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    l->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    l->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->ep < 0 || l->notify_fd < 0 || l->wake_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(l);
        return NULL;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, l->wake_fd, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(l);
        return NULL;
    }
    return (PyObject *)l;
bad_host:
    PyErr_Format(PyExc_ValueError, "lane: %s is not a numeric address of that family", host);
    Py_DECREF(l);
    return NULL;
}

static void free_conn(conn *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->rq.req);
    free(c->head);
    free(c->it);
    free(c->tok);
}

static void Lane_dealloc(Lane *l) {
    lane_stop(l);
    if (l->ep >= 0) close(l->ep);
    if (l->notify_fd >= 0) close(l->notify_fd);
    if (l->wake_fd >= 0) close(l->wake_fd);
    for (int i = 0; i < l->nconns; i++) free_conn(&l->conns[i]);
    free(l->conns);
    while (l->qlen) {
        free(l->q[l->qhead].req);
        l->qhead = (l->qhead + 1) % l->qcap;
        l->qlen--;
    }
    free(l->q);
    free(l->aborts);
    free(l->out);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->stop_mu);
    Py_TYPE(l)->tp_free((PyObject *)l);
}

static int usable(Lane *l) {
    if (!owned(l)) return 0;
    if (l->closed) {
        PyErr_SetString(PyExc_RuntimeError, "the lane is closed");
        return 0;
    }
    return 1;
}

static PyObject *Lane_put(Lane *l, PyObject *args) {
    long long seq;
    Py_buffer view;
    double timeout_s;
    if (!PyArg_ParseTuple(args, "Ly*d", &seq, &view, &timeout_s)) return NULL;
    if (!usable(l) || ensure_thread(l) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *copy = malloc(view.len ? (size_t)view.len : 1);
    if (copy == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    memcpy(copy, view.buf, (size_t)view.len);
    request rq = {seq, copy, (size_t)view.len, timeout_s};
    PyBuffer_Release(&view);
    pthread_mutex_lock(&l->mu);
    if (l->qlen == l->qcap) {
        size_t cap = l->qcap ? l->qcap * 2 : 64;
        request *nq = malloc(cap * sizeof(request));
        if (nq == NULL) {
            pthread_mutex_unlock(&l->mu);
            free(copy);
            return PyErr_NoMemory();
        }
        for (size_t i = 0; i < l->qlen; i++) nq[i] = l->q[(l->qhead + i) % l->qcap];
        free(l->q);
        l->q = nq;
        l->qcap = cap;
        l->qhead = 0;
    }
    l->q[(l->qhead + l->qlen) % l->qcap] = rq;
    l->qlen++;
    l->was_idle = 0;
    pthread_mutex_unlock(&l->mu);
    wake(l);
    Py_RETURN_NONE;
}

/* Make the process's descriptor table hold at least `want` descriptors, here in the caller's
 * thread. Why: the kernel grows the table (at 64, 128, 256 ... descriptors) with a
 * synchronize_rcu() where the process has several threads, 10-25 ms in which the thread that
 * opened the descriptor stands still (strace: socket() taking 24 ms). The lane's thread opens the
 * connections, and stood still so while the answers of the streams it had just opened arrived:
 * their first reads were 15 ms late. Growing the table ahead moves that wait out of the thread. */
static void grow_fd_table(int any_fd, int want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)want >= rl.rlim_cur)
        want = (int)rl.rlim_cur - 1;
    if (want <= 0) return;
    int fd;
    Py_BEGIN_ALLOW_THREADS
    fd = fcntl(any_fd, F_DUPFD_CLOEXEC, want); /* the lowest free number >= want: the table grows */
    if (fd >= 0) close(fd);
    Py_END_ALLOW_THREADS
}

static PyObject *Lane_slots(Lane *l, PyObject *args) {
    int n, drop = 1;
    if (!PyArg_ParseTuple(args, "i|p", &n, &drop)) return NULL;
    if (!usable(l)) return NULL;
    if (n < 0 || n > 1000000) {
        PyErr_SetString(PyExc_ValueError, "slots must be in [0, 1000000]");
        return NULL;
    }
    pthread_mutex_lock(&l->mu);
    if (n > l->nconns) {
        conn *nc = realloc(l->conns, (size_t)n * sizeof(conn));
        if (nc == NULL) {
            pthread_mutex_unlock(&l->mu);
            return PyErr_NoMemory();
        }
        memset(nc + l->nconns, 0, (size_t)(n - l->nconns) * sizeof(conn));
        for (int i = l->nconns; i < n; i++) nc[i].fd = -1;
        l->conns = nc;
        l->nconns = n;
    }
    l->want = n;
    l->drop = drop;
    pthread_mutex_unlock(&l->mu);
    grow_fd_table(l->ep, 2 * n + 64);
    if (ensure_thread(l) < 0) return NULL;
    wake(l);
    Py_RETURN_NONE;
}

static PyObject *Lane_stop_at(Lane *l, PyObject *args) {
    double t;
    if (!PyArg_ParseTuple(args, "d", &t)) return NULL;
    if (!owned(l)) return NULL;
    pthread_mutex_lock(&l->mu);
    l->stop_at = t;
    if (now_t() >= t) withdraw(l);
    unsigned long long n = l->withdrawn;
    pthread_mutex_unlock(&l->mu);
    if (l->started) wake(l);
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *Lane_abort(Lane *l, PyObject *args) {
    long long seq;
    if (!PyArg_ParseTuple(args, "L", &seq)) return NULL;
    if (!usable(l)) return NULL;
    pthread_mutex_lock(&l->mu);
    if (l->naborts == l->abort_cap) {
        size_t cap = l->abort_cap ? l->abort_cap * 2 : 16;
        int64_t *na = realloc(l->aborts, cap * sizeof(int64_t));
        if (na == NULL) {
            pthread_mutex_unlock(&l->mu);
            return PyErr_NoMemory();
        }
        l->aborts = na;
        l->abort_cap = cap;
    }
    l->aborts[l->naborts++] = seq;
    pthread_mutex_unlock(&l->mu);
    wake(l);
    Py_RETURN_NONE;
}

static PyObject *items_of(const char *p, size_t n) {
    PyObject *out = PyList_New(0);
    size_t pos = 0;
    while (out != NULL && pos + sizeof(item_head) <= n) {
        item_head h;
        memcpy(&h, p + pos, sizeof h);
        pos += sizeof h;
        PyObject *payload;
        if (h.kind == IT_DATA) {
            payload = PyBytes_FromStringAndSize(p + pos, h.len);
            pos += (size_t)h.len;
        } else if (h.kind == IT_TOKENS) {
            payload = times_list(p + pos, h.len);
            pos += (size_t)h.len * sizeof(double);
        } else if (h.kind == IT_EOF) {
            payload = PyBytes_FromStringAndSize(NULL, 0);
        } else {
            payload = PyLong_FromLong(h.len);
        }
        PyObject *item = payload ? Py_BuildValue("(dN)", h.t, payload) : NULL;
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(item);
    }
    return out;
}

/* A plain exchange's answer, read from its bundle's items: what lane.py's replay would get out of
 * the reactor's parser (wire.ResponseParser over stream.StreamState) with less of its work, or
 * NULL without an error where the exchange is not plain. Plain is the common answer: a 200 with
 * its head in its first read, chunked with bare hex sizes and no trailers, whose SSE events are
 * each one "data:" line ended by "\n\n" (no CR, no comment, no other field), none longer than
 * max_event, the last one ended before the terminating chunk. Anything else goes to the parser.
 * Returns (head, t_headers, t_body, first_body, events): the head without its blank line, the
 * time of its read, the time and the first 512 bytes of the first read that carried body bytes
 * (ResponseParser's first payload), and in order each event's data (after "data:" and one space)
 * with the time of the read that ended it, and each token batch as the items carry it. */
static PyObject *plain_of(const char *p, size_t n, size_t max_event) {
    PyObject *events = PyList_New(0), *head = NULL, *first = NULL, *out = NULL;
    char *sc = NULL, *ev = NULL; /* one read's payload; the event being gathered */
    size_t sc_cap = 0, ev_cap = 0, ev_len = 0, cleft = 0, line = 0;
    int cst = 0, ok = events != NULL, in_body = 0; /* cst: 0 size, 1 data, 2 CRLF, 3 end, 4 done */
    int64_t size = 0;
    double t_headers = 0.0, t_body = 0.0;
    size_t pos = 0;
    while (ok && pos + sizeof(item_head) <= n) {
        item_head h;
        memcpy(&h, p + pos, sizeof h);
        pos += sizeof h;
        if (h.kind == IT_TOKENS) { /* counted between two chunks and two events */
            PyObject *times = in_body && cst == 0 && line == 0 && ev_len == 0 ? times_list(p + pos, h.len) : NULL;
            PyObject *item = times ? Py_BuildValue("(dN)", h.t, times) : NULL;
            ok = item != NULL && PyList_Append(events, item) == 0;
            Py_XDECREF(item);
            pos += (size_t)h.len * sizeof(double);
            continue;
        }
        if (h.kind != IT_DATA) {
            ok = 0;
            break;
        }
        const char *d = p + pos, *e = d + h.len;
        pos += (size_t)h.len;
        if (!in_body) {
            const char *end = memmem(d, (size_t)(e - d), "\r\n\r\n", 4);
            if (end == NULL || (head = PyBytes_FromStringAndSize(d, end - d)) == NULL) {
                ok = 0;
                break;
            }
            t_headers = h.t;
            in_body = 1;
            d = end + 4;
        }
        if (grow(&sc, &sc_cap, (size_t)(e - d) + 1) < 0) {
            ok = 0;
            break;
        }
        size_t sl = 0;
        for (; d < e && ok; d++) { /* the chunked framing, bare hex sizes only */
            char ch = *d;
            if (cst == 1) {
                size_t take = cleft < (size_t)(e - d) ? cleft : (size_t)(e - d);
                memcpy(sc + sl, d, take);
                sl += take;
                cleft -= take;
                d += take - 1;
                if (cleft == 0) cst = 2, line = 0;
            } else if (cst != 4) { /* a size line (cst 0), or the CRLF after data or the last chunk */
                int hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
                if (cst == 0 && hex && line < 15) {
                    size = size * 16 + (ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
                    line++;
                } else if (ch == '\r' && line != 100 && (cst == 0 ? line > 0 : line == 0)) {
                    line = 100; /* a CR seen: the LF must follow */
                } else if (ch == '\n' && line == 100) {
                    if (cst == 0) cst = size ? 1 : 3, cleft = (size_t)size, size = 0;
                    else cst = cst == 2 ? 0 : 4;
                    line = 0;
                } else {
                    ok = 0;
                }
            } else {
                ok = 0; /* bytes after the end */
            }
        }
        if (!ok) break;
        if (sl > 0 && first == NULL) {
            if ((first = PyBytes_FromStringAndSize(sc, sl < 512 ? (Py_ssize_t)sl : 512)) == NULL) {
                ok = 0;
                break;
            }
            t_body = h.t;
        }
        for (size_t i = 0; i < sl && ok; i++) { /* the SSE events, as StreamState splits them */
            char ch = sc[i];
            if (ch == '\r' || ev_len >= max_event || grow(&ev, &ev_cap, ev_len + 1) < 0) {
                ok = 0;
                break;
            }
            ev[ev_len++] = ch;
            if (ch != '\n' || ev_len < 2 || ev[ev_len - 2] != '\n') continue;
            size_t dn = ev_len - 2; /* one "data:" line, nothing else */
            if (dn < 5 || memcmp(ev, "data:", 5) != 0 || memchr(ev, '\n', dn) != NULL) {
                ok = 0;
                break;
            }
            size_t skip = dn > 5 && ev[5] == ' ' ? 6 : 5;
            PyObject *data = PyBytes_FromStringAndSize(ev + skip, (Py_ssize_t)(dn - skip));
            PyObject *item = data ? Py_BuildValue("(dN)", h.t, data) : NULL;
            ok = item != NULL && PyList_Append(events, item) == 0;
            Py_XDECREF(item);
            ev_len = 0;
        }
    }
    if (ok && first == NULL) first = PyBytes_FromStringAndSize(NULL, 0); /* no body read */
    if (ok && first != NULL && in_body && cst == 4 && ev_len == 0)
        out = Py_BuildValue("(OddOO)", head, t_headers, t_body, first, events);
    free(sc);
    free(ev);
    Py_XDECREF(head);
    Py_XDECREF(first);
    Py_XDECREF(events);
    if (out == NULL) PyErr_Clear(); /* not plain (or no memory): the parser reads it */
    return out;
}

static PyObject *Lane_take(Lane *l, PyObject *unused) {
    if (!owned(l)) return NULL;
    uint64_t count;
    ssize_t rd = read(l->notify_fd, &count, sizeof count);
    (void)rd;
    pthread_mutex_lock(&l->mu);
    char *buf = l->out;
    size_t len = l->out_len;
    l->out = NULL;
    l->out_len = l->out_cap = 0;
    l->notified = 0;
    int idle = is_idle(l);
    pthread_mutex_unlock(&l->mu);
    PyObject *out = PyList_New(0);
    size_t pos = 0;
    while (out != NULL && pos + sizeof(bundle_head) <= len) {
        bundle_head b;
        memcpy(&b, buf + pos, sizeof b);
        pos += sizeof b;
        PyObject *plain = b.plain ? plain_of(buf + pos, (size_t)b.bytes, l->max_event) : NULL;
        PyObject *items = plain && !l->items_too ? Py_NewRef(Py_None) : items_of(buf + pos, (size_t)b.bytes);
        pos += (size_t)b.bytes;
        if (plain == NULL) plain = Py_NewRef(Py_None);
        if (items == NULL) Py_DECREF(plain);
        PyObject *t = items ? Py_BuildValue("(LiiidddddNN)", (long long)b.seq, b.end, b.err, b.new_conn,
                                            b.connect_s, b.t_start, b.t_sent, b.t_written, b.t_end, items,
                                            plain)
                            : NULL;
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(t);
    }
    free(buf);
    if (out == NULL) return NULL;
    return Py_BuildValue("(NO)", out, idle ? Py_True : Py_False);
}

static PyObject *Lane_open(Lane *l, PyObject *unused) {
    pthread_mutex_lock(&l->mu);
    int n = 0;
    double oldest = 0.0;
    unsigned long long reads = 0;
    for (int i = 0; i < l->nconns; i++) {
        conn *c = &l->conns[i];
        if (c->phase == P_FREE) continue;
        n++;
        if (oldest == 0.0 || c->t_start < oldest) oldest = c->t_start;
        reads += c->reads + (unsigned long long)c->ntok;
    }
    pthread_mutex_unlock(&l->mu);
    return Py_BuildValue("(idK)", n, oldest, reads);
}

static PyObject *Lane_stats(Lane *l, PyObject *unused) {
    pthread_mutex_lock(&l->mu);
    PyObject *t = Py_BuildValue("(KKdlKKKKKddK)", (unsigned long long)l->reads, (unsigned long long)l->passes,
                                l->cpu_s, l->slice_ns, (unsigned long long)l->late,
                                (unsigned long long)l->counted, (unsigned long long)l->kernel,
                                (unsigned long long)l->user, (unsigned long long)l->starts,
                                l->held_s, l->busy_s, (unsigned long long)l->long_passes);
    pthread_mutex_unlock(&l->mu);
    return t;
}

/* The requests the thread has started: stats()[8] alone, read twice a pass (Lane.queued). */
static PyObject *Lane_started(Lane *l, PyObject *unused) {
    pthread_mutex_lock(&l->mu);
    unsigned long long n = (unsigned long long)l->starts;
    pthread_mutex_unlock(&l->mu);
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *Lane_fileno(Lane *l, PyObject *unused) { return PyLong_FromLong(l->notify_fd); }

static PyObject *Lane_close(Lane *l, PyObject *unused) {
    lane_stop(l);
    Py_RETURN_NONE;
}

static PyMethodDef Lane_methods[] = {
    {"put", (PyCFunction)Lane_put, METH_VARARGS, "queue one request: (seq, bytes, timeout_s)"},
    {"slots", (PyCFunction)Lane_slots, METH_VARARGS, "run this many exchanges at once"},
    {"stop_at", (PyCFunction)Lane_stop_at, METH_VARARGS, "start no request after this time"},
    {"abort", (PyCFunction)Lane_abort, METH_VARARGS, "end this exchange now"},
    {"take", (PyCFunction)Lane_take, METH_NOARGS, "(bundles, idle)"},
    {"open", (PyCFunction)Lane_open, METH_NOARGS, "(open exchanges, oldest start, their reads)"},
    {"stats", (PyCFunction)Lane_stats, METH_NOARGS, "the thread's counters"},
    {"started", (PyCFunction)Lane_started, METH_NOARGS, "the requests the thread has started"},
    {"fileno", (PyCFunction)Lane_fileno, METH_NOARGS, "the eventfd that says bundles wait"},
    {"close", (PyCFunction)Lane_close, METH_NOARGS, "stop and join the thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "servecheck.load.generator._lane.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Lane_new,
    .tp_dealloc = (destructor)Lane_dealloc,
    .tp_methods = Lane_methods,
    .tp_doc = "the native lane: a thread that sends requests and reads whole exchanges",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lane", "the load generator's native lane", -1, NULL};

PyMODINIT_FUNC PyInit__lane(void) {
    if (PyType_Ready(&LaneType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&LaneType);
    if (PyModule_AddObject(m, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(&LaneType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

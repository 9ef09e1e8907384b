/* The load generator's socket reader thread (optional C extension; see reactor.py).
 *
 * Why: the Python reader (StreamReactor's epoll pass) times every read by the kernel's receive
 * stamp, so the generator's own delay is not in TTFT or ITL, except in one case: a token that is
 * still unread when the stream's next token arrives shares that later stamp. At a few hundred
 * streams the Python pass over all ready sockets plus the parsing takes long enough (several ms
 * on a small core) for that to happen to a few percent of tokens. This thread only reads: it
 * waits in epoll_wait without the GIL, takes each ready socket's bytes and kernel stamp into a
 * buffer within microseconds of their arrival, and never runs Python. The Python side takes the
 * buffer whenever it likes (an eventfd says there is something) and parses at leisure.
 *
 * Interface (module servecheck.load.generator._rxthread):
 *   r = Reader(pause_s)     a reader; its thread starts on the first add(). After each pass that
 *                           read something the thread sleeps pause_s, so that one wake-up serves
 *                           many reads (a context switch per token cost more than the read); only
 *                           tokens of one stream closer together than that share a read
 *                           and its stamp
 *   r.fileno()              an eventfd that becomes readable when records are waiting
 *   r.add(fd, key)          start reading fd; its records carry key (an int chosen by the caller,
 *                           so that a reused descriptor number never mixes two connections)
 *   r.remove(fd)            stop reading fd: nothing more is read from it after this returns
 *                           (records read before are still in the next take(), under their key)
 *   r.take() -> list        records since the last take: (key, stamp, t_read, data, token) where stamp
 *                           is the kernel's receive time (CLOCK_REALTIME seconds, or 0.0 when the
 *                           kernel gave none), t_read the thread's CLOCK_MONOTONIC time after the
 *                           read (time.perf_counter's clock on Linux) and data the bytes read;
 *                           b"" means the peer closed; an int is an errno (the connection failed);
 *                           token is token_chunk(data) (below), worked out here in the thread
 *   token_chunk(data)       True when data is exactly one HTTP chunk holding exactly one SSE event
 *                           whose JSON carries a token in the common shape (a non-empty
 *                           "delta":{"content":"..."}, and no usage object): the parser's own fast
 *                           path would count one token and end where it began, so the caller can
 *                           do just that (tests/load/test_rxthread.py pins the equivalence)
 *   token_prefix(data)      the bytes of the whole token chunks (token_chunk() each) that data
 *                           begins with, 0 when none
 *   r.arm(fd, key, n)       count fd's token chunks here instead of handing each over: from now
 *                           on the token chunks a read of fd begins with (token_prefix()) become
 *                           arrival times in a batch held for fd, this read's time each, and only
 *                           the rest of the read, if any, becomes a record. Refused (False)
 *                           unless fd is watched under key and exactly n records of it were made
 *                           since add():
 *                           the caller has parsed all of them and ends between chunks and events,
 *                           which a token chunk does not change. The first read that is not only
 *                           token chunks (or EOF, an error) disarms fd; the batch always goes
 *                           first, in order
 *   records of armed fds    (key, 0.0, t_last, [t, ...], False): the arrival times (perf_counter
 *                           clock: the kernel stamp moved by the thread's own realtime-minus-
 *                           monotonic offset, or t_read where that is implausible, as the Python
 *                           side does) of token chunks counted here; sent before fd's next
 *                           record, when a batch is FLUSH_S old or FLUSH_TOKENS long, and by a
 *                           sweep every SWEEP_S, so the taker's view of a stream is at most about
 *                           FLUSH_S behind (remove() drops a batch not yet sent)
 *   r.stats() -> tuple      (reads, passes, cpu_s, slice_ns, late): reads done, epoll passes that
 *                           read something, the thread's own CPU time so far (kernel and user),
 *                           the scheduler slice it got (short_slice(); 0: the kernel's default),
 *                           and the reads taken more than LATE_S after their bytes arrived
 *   r.counted() -> tuple    (tokens, kernel_stamps, reader_stamps): token chunks counted in
 *                           batches, and how each was timed
 *   r.close()               stop and join the thread (idempotent; a second caller waits for it)
 * A reader belongs to the process that made it: in a forked child every method but close()
 * and fileno() raises RuntimeError (the child shares the epoll set and the eventfd, not the
 * thread). Out of memory: the thread leaves bytes in the socket until it can store them; take()
 * raises MemoryError and the batch it was converting is lost.
 * After EOF or an error the thread stops watching that descriptor by itself; the caller still
 * calls remove().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "_rxcommon.h"

#define RECV_BYTES 65536
#define MAX_EVENTS 256
#define BUFFER_LIMIT (64u << 20) /* stop reading (back-pressure through TCP) above this */
#define MAX_FD (1 << 24)          /* descriptor numbers the key table accepts */

#define FLUSH_TOKENS 512     /* a batch this long goes at once */
#define FLUSH_S 0.1          /* ... and so does one this old (checked at each read and sweep) */
#define SWEEP_S 0.02         /* how often the thread looks for batches to send */
#define LATE_S 0.010         /* a read taken this long after its bytes arrived counts as late */

enum { REC_DATA = 0, REC_EOF = 1, REC_ERROR = 2, REC_TOKENS = 3 };

/* Per descriptor number. */
typedef struct {
    int64_t key;  /* -1 when not watched */
    int64_t made; /* records made for fd since add() */
    int armed;
    int ntok, cap;
    double first; /* t_read of the batch's first token */
    double *t;    /* the batch: arrival times */
} slot;

typedef struct {
    int64_t key;
    double stamp;
    double t_read;
    int32_t kind;
    int32_t len; /* bytes for REC_DATA, errno for REC_ERROR, times for REC_TOKENS */
    int32_t token; /* token_chunk() of the data */
    int32_t pad;
} rec_head;


typedef struct {
    PyObject_HEAD
    int ep;
    int notify_fd; /* readable while records wait for take() */
    int stop_fd;   /* written by close() to end the thread */
    pthread_t thread;
    pthread_mutex_t stop_mu; /* serialises close(): a second closer waits for the join */
    int started;
    int dead; /* the thread could not run (out of memory at its start) */
    pid_t owner; /* the process that started the thread (a forked child has no thread) */
    int closed;
    pthread_mutex_t mu; /* guards everything below, and every recvmsg */
    slot *slots;        /* per descriptor number */
    int nkeys;
    int npending;       /* slots with a batch not yet sent */
    double offset;      /* CLOCK_REALTIME minus CLOCK_MONOTONIC, refreshed every pass */
    uint64_t counted, counted_kernel, counted_user;
    char *buf;
    size_t len, cap;
    int notified;
    long pause_ns;
    uint64_t reads, passes; /* under mu */
    uint64_t late;          /* reads taken more than LATE_S after their latest bytes arrived */
    double cpu_s;           /* the thread's CPU time when it stopped; under mu */
    long slice_ns;          /* the scheduler slice the thread got (short_slice()), 0: the default */
} Reader;


/* Room for one more record of up to RECV_BYTES; -1 when memory is short (then nothing is read). */
static int reserve_n(Reader *r, size_t bytes) {
    size_t need = r->len + sizeof(rec_head) + bytes;
    if (need > r->cap) {
        size_t cap = r->cap ? r->cap : 1 << 16;
        while (cap < need) cap *= 2;
        char *nb = realloc(r->buf, cap);
        if (nb == NULL) return -1;
        r->buf = nb;
        r->cap = cap;
    }
    return 0;
}

/* Send fd's batch as one REC_TOKENS record (the caller holds r->mu). -1: no memory (kept). */
static int flush_batch(Reader *r, int fd) {
    slot *s = &r->slots[fd];
    if (s->ntok == 0) return 0;
    size_t bytes = (size_t)s->ntok * sizeof(double);
    if (reserve_n(r, bytes) < 0) return -1;
    rec_head h;
    memset(&h, 0, sizeof h);
    h.key = s->key;
    h.kind = REC_TOKENS;
    h.len = s->ntok;
    h.t_read = s->t[s->ntok - 1];
    memcpy(r->buf + r->len, &h, sizeof h);
    r->len += sizeof h;
    memcpy(r->buf + r->len, s->t, bytes);
    r->len += bytes;
    s->made++;
    s->ntok = 0;
    r->npending--;
    return 1;
}

/* Count one token chunk in fd's batch (the caller holds r->mu); 1 when a record was made, -1 when
 * there was no memory to count it (then nothing changed). */
static int count_token(Reader *r, int fd, double stamp, double t_read) {
    slot *s = &r->slots[fd];
    if (s->ntok == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        double *nt = realloc(s->t, (size_t)cap * sizeof(double));
        if (nt == NULL) return -1;
        s->t = nt;
        s->cap = cap;
    }
    double t = t_read, k = stamp - r->offset;
    if (stamp != 0.0 && t_read - 30.0 < k && k <= t_read + 0.0005) {
        t = k < t_read ? k : t_read;
        r->counted_kernel++;
    } else {
        r->counted_user++;
    }
    r->counted++;
    if (s->ntok == 0) {
        s->first = t_read;
        r->npending++;
    }
    s->t[s->ntok++] = t;
    /* Counted either way: a batch that finds no memory to go now goes at the next chance. */
    if (s->ntok >= FLUSH_TOKENS || t_read - s->first >= FLUSH_S) return flush_batch(r, fd) > 0;
    return 0;
}

/* Drop fd's batch and state (the caller holds r->mu). */
static void clear_slot(Reader *r, int fd) {
    slot *s = &r->slots[fd];
    if (s->ntok) r->npending--;
    s->ntok = 0;
    s->armed = 0;
    s->made = 0;
    s->key = -1;
}

static void append(Reader *r, const rec_head *h, const char *data) { /* after reserve_n() */
    memcpy(r->buf + r->len, h, sizeof(rec_head));
    r->len += sizeof(rec_head);
    if (h->kind == REC_DATA) {
        memcpy(r->buf + r->len, data, (size_t)h->len);
        r->len += (size_t)h->len;
    }
}

/* Read fd once (the caller holds r->mu); returns 1 when something was read. */
static int read_one(Reader *r, int fd, char *data, char *anc, size_t anc_len) {
    if (fd < 0 || fd >= r->nkeys || r->slots[fd].key < 0) return 0; /* removed meanwhile */
    slot *s = &r->slots[fd];
    /* Room for the batch and one read, so that the batch can always go first. */
    if (reserve_n(r, RECV_BYTES + sizeof(rec_head) + (size_t)s->ntok * sizeof(double)) < 0) return -1;
    struct iovec iov = {data, RECV_BYTES};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = anc;
    msg.msg_controllen = anc_len;
    ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
    int err = n < 0 ? errno : 0;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) return 0;
    rec_head h;
    memset(&h, 0, sizeof h);
    h.key = s->key;
    h.t_read = now_mono();
    r->reads++;
    if (n > 0) {
        h.kind = REC_DATA;
        h.len = (int32_t)n;
        h.token = is_token_chunk(data, (size_t)n);
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS &&
                c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof ts);
                h.stamp = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
            }
        }
        /* How long the bytes waited for this read: a token still unread when its stream's next
         * one arrives shares that one's stamp, so many late reads mean the thread could not keep
         * up (its core is too busy): the summary flags the run (analysis/stats.py). */
        double waited = h.t_read - (h.stamp - r->offset);
        if (h.stamp != 0.0 && waited > LATE_S && waited < 30.0) r->late++;
        if (s->armed) {
            /* Whole token chunks first (a read that took several writes: the server caught up, or
             * the last token before the finish and usage chunks): each counts at this read's
             * time, as the parser times every event of one read; the rest goes as a record. */
            size_t done = 0, span;
            while ((span = token_span(data + done, (size_t)n - done)) > 0) {
                if (count_token(r, fd, h.stamp, h.t_read) < 0) break; /* no memory: a record */
                done += span;
            }
            if (done == (size_t)n) return 1;
            if (done > 0) {
                memmove(data, data + done, (size_t)n - done);
                n -= (ssize_t)done;
                h.len = (int32_t)n;
                h.token = is_token_chunk(data, (size_t)n);
            }
        }
    } else {
        h.kind = n == 0 ? REC_EOF : REC_ERROR;
        h.len = err;
        /* Nothing more will come: stop watching, or level-triggered epoll reports it forever. */
        epoll_ctl(r->ep, EPOLL_CTL_DEL, fd, NULL);
    }
    flush_batch(r, fd); /* room was reserved above */
    s->armed = 0;
    append(r, &h, data);
    s->made++;
    if (h.kind != REC_DATA) {
        if (s->ntok) r->npending--;
        s->ntok = 0;
        s->key = -1; /* keeps made: arm() for it is refused anyway (key < 0) */
    }
    return 1;
}

/* Send every batch older than FLUSH_S (the caller holds r->mu); 1 when a record was made. */
static int sweep(Reader *r, double now) {
    int made = 0;
    for (int fd = 0; fd < r->nkeys && r->npending > 0; fd++) {
        slot *s = &r->slots[fd];
        if (s->ntok && now - s->first >= FLUSH_S && flush_batch(r, fd) > 0) made = 1;
    }
    return made;
}


static void *run(void *arg) {
    Reader *r = (Reader *)arg;
    long slice = short_slice();
    pthread_mutex_lock(&r->mu);
    r->slice_ns = slice;
    pthread_mutex_unlock(&r->mu);
    struct epoll_event events[MAX_EVENTS];
    char *data = malloc(RECV_BYTES);
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(struct timespec)) * 2];
    } anc;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the Python thread's business */
    if (data == NULL) {
        pthread_mutex_lock(&r->mu);
        r->dead = 1;
        pthread_mutex_unlock(&r->mu);
        return NULL;
    }
    double last_sweep = now_mono(), offset_at = last_sweep, width0;
    double offset0 = clock_offset(20, &width0);
    pthread_mutex_lock(&r->mu);
    r->offset = offset0;
    pthread_mutex_unlock(&r->mu);
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int pending = r->npending > 0;
        pthread_mutex_unlock(&r->mu);
        int n = epoll_wait(r->ep, events, MAX_EVENTS, pending ? (int)(SWEEP_S * 1000) : 1000);
        if (n < 0 && errno != EINTR) break;
        int stop = 0, added = 0, short_of_memory = 0;
        /* The offset moves only when the realtime clock is stepped or slewed: take a new one
         * where its bracket is tight, or where the one in use is a second old. */
        double width, offset = clock_offset(3, &width), mono = now_mono();
        if (width <= 20e-6 || mono - offset_at >= 1.0) {
            offset_at = mono;
            pthread_mutex_lock(&r->mu);
            r->offset = offset;
            pthread_mutex_unlock(&r->mu);
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == r->stop_fd) {
                stop = 1;
                continue;
            }
            pthread_mutex_lock(&r->mu);
            if (r->len < BUFFER_LIMIT) {
                int got = read_one(r, fd, data, anc.bytes, sizeof anc.bytes);
                if (got < 0) short_of_memory = 1;
                else added |= got;
            }
            pthread_mutex_unlock(&r->mu);
        }
        if (stop) break;
        double now = now_mono();
        if (now - last_sweep >= SWEEP_S) {
            last_sweep = now;
            pthread_mutex_lock(&r->mu);
            if (r->npending > 0 && sweep(r, now)) added = 1;
            pthread_mutex_unlock(&r->mu);
        }
        if (added) {
            pthread_mutex_lock(&r->mu);
            r->passes++;
            int signal = !r->notified && r->len > 0;
            if (signal) r->notified = 1;
            pthread_mutex_unlock(&r->mu);
            if (signal) {
                uint64_t one = 1;
                ssize_t w = write(r->notify_fd, &one, sizeof one);
                (void)w;
            }
        }
        pthread_mutex_lock(&r->mu);
        int full = r->len >= BUFFER_LIMIT;
        pthread_mutex_unlock(&r->mu);
        if (full || short_of_memory) {
            struct timespec pause = {0, 1000000}; /* the taker is behind: let it catch up */
            nanosleep(&pause, NULL);
        } else if (added && r->pause_ns > 0) {
            struct timespec pause = {0, r->pause_ns};
            nanosleep(&pause, NULL);
        }
    }
    free(data);
    struct timespec cpu;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0) {
        pthread_mutex_lock(&r->mu);
        r->cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9;
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

static void reader_stop(Reader *r) {
    r->closed = 1;
    if (r->owner != getpid()) return; /* a forked child: the thread is the parent's */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&r->stop_mu); /* a concurrent closer waits here for the join */
    if (r->started) {
        uint64_t one = 1;
        ssize_t w = write(r->stop_fd, &one, sizeof one);
        (void)w;
        pthread_join(r->thread, NULL);
        r->started = 0;
    }
    pthread_mutex_unlock(&r->stop_mu);
    Py_END_ALLOW_THREADS
}

/* Every method but close() refuses to work in a forked child (see the header comment). */
static int owned(Reader *r) {
    if (r->owner == getpid()) return 1;
    PyErr_SetString(PyExc_RuntimeError, "this reader belongs to the process that created it (this is a forked child)");
    return 0;
}

static PyObject *Reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"pause_s", NULL};
    double pause_s = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|d", kwlist, &pause_s)) return NULL;
    if (!(pause_s >= 0.0 && pause_s < 1.0)) {
        PyErr_SetString(PyExc_ValueError, "pause_s must be in [0, 1) seconds");
        return NULL;
    }
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (r == NULL) return NULL;
    r->pause_ns = (long)(pause_s * 1e9);
    r->owner = getpid();
    r->ep = r->notify_fd = r->stop_fd = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->stop_mu, NULL);
    r->ep = epoll_create1(EPOLL_CLOEXEC);
    r->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->ep < 0 || r->notify_fd < 0 || r->stop_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(r);
        return NULL;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = r->stop_fd};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, r->stop_fd, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static void Reader_dealloc(Reader *r) {
    reader_stop(r);
    if (r->ep >= 0) close(r->ep);
    if (r->notify_fd >= 0) close(r->notify_fd);
    if (r->stop_fd >= 0) close(r->stop_fd);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->stop_mu);
    for (int i = 0; i < r->nkeys; i++) free(r->slots[i].t);
    free(r->slots);
    free(r->buf);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *Reader_add(Reader *r, PyObject *args) {
    int fd;
    long long key;
    if (!PyArg_ParseTuple(args, "iL", &fd, &key)) return NULL;
    if (!owned(r)) return NULL;
    if (r->closed) {
        PyErr_SetString(PyExc_RuntimeError, "the reader is closed");
        return NULL;
    }
    if (fd < 0 || key < 0) {
        PyErr_SetString(PyExc_ValueError, "fd and key must be >= 0");
        return NULL;
    }
    if (fd >= MAX_FD || fd == r->ep || fd == r->notify_fd || fd == r->stop_fd) {
        PyErr_Format(PyExc_ValueError, "descriptor %d cannot be read by this reader", fd);
        return NULL;
    }
    if (fcntl(fd, F_GETFD) < 0) return PyErr_SetFromErrno(PyExc_OSError); /* EBADF: not open */
    pthread_mutex_lock(&r->mu); /* the key and the epoll registration change together */
    if (fd >= r->nkeys) {
        size_t n = r->nkeys ? (size_t)r->nkeys : 1024;
        while (n <= (size_t)fd) n *= 2; /* fd < MAX_FD, so no overflow */
        slot *nk = realloc(r->slots, n * sizeof(slot));
        if (nk == NULL) {
            pthread_mutex_unlock(&r->mu);
            return PyErr_NoMemory();
        }
        memset(nk + r->nkeys, 0, (n - (size_t)r->nkeys) * sizeof(slot));
        for (size_t i = (size_t)r->nkeys; i < n; i++) nk[i].key = -1;
        r->slots = nk;
        r->nkeys = (int)n;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
    int rc = epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev);
    if (rc < 0 && errno == EEXIST) rc = epoll_ctl(r->ep, EPOLL_CTL_MOD, fd, &ev);
    int err = errno;
    if (rc == 0) {
        clear_slot(r, fd); /* a batch of the descriptor's last user is not this one's */
        r->slots[fd].key = key;
    }
    pthread_mutex_unlock(&r->mu);
    if (rc < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (!r->started) {
        int prc = pthread_create(&r->thread, NULL, run, r);
        if (prc != 0) {
            errno = prc;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        r->started = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *Reader_remove(Reader *r, PyObject *args) {
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd)) return NULL;
    if (!owned(r)) return NULL;
    pthread_mutex_lock(&r->mu); /* waits out a recvmsg on fd that is under way */
    if (fd >= 0 && fd < r->nkeys) clear_slot(r, fd);
    if (fd >= 0 && fd != r->stop_fd) epoll_ctl(r->ep, EPOLL_CTL_DEL, fd, NULL); /* ENOENT after EOF: fine */
    pthread_mutex_unlock(&r->mu);
    Py_RETURN_NONE;
}

static PyObject *Reader_arm(Reader *r, PyObject *args) {
    int fd;
    long long key, n;
    if (!PyArg_ParseTuple(args, "iLL", &fd, &key, &n)) return NULL;
    if (!owned(r)) return NULL;
    int ok = 0;
    pthread_mutex_lock(&r->mu);
    if (fd >= 0 && fd < r->nkeys && r->slots[fd].key == key && key >= 0 && r->slots[fd].made == n) {
        r->slots[fd].armed = 1;
        ok = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return PyBool_FromLong(ok);
}

static PyObject *Reader_counted(Reader *r, PyObject *unused) {
    pthread_mutex_lock(&r->mu);
    unsigned long long a = r->counted, b = r->counted_kernel, c = r->counted_user;
    pthread_mutex_unlock(&r->mu);
    return Py_BuildValue("(KKK)", a, b, c);
}

static PyObject *Reader_take(Reader *r, PyObject *unused) {
    if (!owned(r)) return NULL;
    /* Clear the eventfd first: a record appended after the swap below signals it again, so the
     * caller's next wait cannot miss it. */
    uint64_t count;
    ssize_t rd = read(r->notify_fd, &count, sizeof count); /* EAGAIN when not signalled */
    (void)rd;
    pthread_mutex_lock(&r->mu);
    char *buf = r->buf;
    size_t len = r->len;
    r->buf = NULL;
    r->len = r->cap = 0;
    r->notified = 0;
    pthread_mutex_unlock(&r->mu);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        free(buf);
        return NULL;
    }
    size_t pos = 0;
    while (pos + sizeof(rec_head) <= len) {
        rec_head h;
        memcpy(&h, buf + pos, sizeof h);
        pos += sizeof h;
        PyObject *payload;
        if (h.kind == REC_DATA) {
            payload = PyBytes_FromStringAndSize(buf + pos, h.len);
            pos += (size_t)h.len;
        } else if (h.kind == REC_TOKENS) {
            payload = times_list(buf + pos, h.len);
            pos += (size_t)h.len * sizeof(double);
        } else if (h.kind == REC_EOF) {
            payload = PyBytes_FromStringAndSize(NULL, 0);
        } else {
            payload = PyLong_FromLong(h.len);
        }
        PyObject *item = payload ? Py_BuildValue("(LddNO)", (long long)h.key, h.stamp, h.t_read, payload,
                                                 h.token ? Py_True : Py_False) : NULL;
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            free(buf);
            return NULL;
        }
        Py_DECREF(item);
    }
    free(buf);
    return out;
}

static PyObject *token_chunk(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    int yes = is_token_chunk((const char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(yes);
}

static PyObject *py_token_prefix(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    size_t n = token_prefix((const char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(n);
}

static PyMethodDef module_methods[] = {
    {"token_chunk", token_chunk, METH_O, "token_chunk(data): one chunk, one SSE event, one token (common shape)"},
    {"token_prefix", py_token_prefix, METH_O, "token_prefix(data): bytes of the whole token chunks data begins with"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Reader_fileno(Reader *r, PyObject *unused) { return PyLong_FromLong(r->notify_fd); }

static PyObject *Reader_stats(Reader *r, PyObject *unused) {
    if (!owned(r)) return NULL;
    clockid_t cid;
    struct timespec ts;
    int live = r->started && !r->closed && pthread_getcpuclockid(r->thread, &cid) == 0 && clock_gettime(cid, &ts) == 0;
    pthread_mutex_lock(&r->mu);
    double cpu_s = live ? (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 : r->cpu_s;
    unsigned long long reads = r->reads, passes = r->passes, late = r->late;
    long slice_ns = r->slice_ns;
    pthread_mutex_unlock(&r->mu);
    return Py_BuildValue("(KKdlK)", reads, passes, cpu_s, slice_ns, late);
}

static PyObject *Reader_close(Reader *r, PyObject *unused) {
    reader_stop(r);
    Py_RETURN_NONE;
}

static PyObject *Reader_running(Reader *r, void *closure) {
    pthread_mutex_lock(&r->mu);
    int dead = r->dead;
    pthread_mutex_unlock(&r->mu);
    return PyBool_FromLong(r->started && !r->closed && !dead && r->owner == getpid());
}

static PyMethodDef Reader_methods[] = {
    {"add", (PyCFunction)Reader_add, METH_VARARGS, "add(fd, key): start reading fd"},
    {"remove", (PyCFunction)Reader_remove, METH_VARARGS, "remove(fd): stop reading fd"},
    {"take", (PyCFunction)Reader_take, METH_NOARGS, "take() -> [(key, stamp, t_read, data, token)]"},
    {"arm", (PyCFunction)Reader_arm, METH_VARARGS, "arm(fd, key, n) -> bool: count fd's token chunks here"},
    {"counted", (PyCFunction)Reader_counted, METH_NOARGS, "(tokens, kernel_stamps, reader_stamps) counted here"},
    {"fileno", (PyCFunction)Reader_fileno, METH_NOARGS, "the eventfd that is readable while records wait"},
    {"stats", (PyCFunction)Reader_stats, METH_NOARGS, "(reads, passes, cpu_s) of the thread"},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "stop and join the thread"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reader_getset[] = {
    {"running", (getter)Reader_running, NULL, "whether the thread is running", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "servecheck.load.generator._rxthread.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reads registered sockets in a thread of its own, with their kernel receive stamps.",
    .tp_new = Reader_new,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
    .tp_getset = Reader_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rxthread", "The load generator's socket reader thread.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__rxthread(void) {
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

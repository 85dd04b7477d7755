/* The load client's receive path in C: one read of a kernel-stamped stream socket, and the
 * chunks of a /generate stream in it, without a Python frame per read.
 *
 * Why: at 1,000 streams the client reads ~380 times per 1,000 tokens, and in Python each read
 * (uvloop's callback, recvmsg with a fresh 64 KiB buffer, the stamp, the chunk framing, the SSE
 * scan) cost ~20 us of a core: most of what the client spent. Here a read is the system call
 * (~5.7 us with 1,000 sockets open, the kernel's part) and about a microsecond more.
 *
 * What it does is a strict subset of client.py's Python path, the common case only: a read
 * that holds whole HTTP chunks, each holding whole one-line `data: {...}` events (the request's
 * rid read from the first that holds one). Anything else (the response head, a split
 * chunk or event, [DONE], an error event, the last chunk, a size line that is not plain hex)
 * goes to the Python path untouched: _Stream.received(stamp, data), exactly what the Python
 * reader would have called (llhttp frames it there; this takes only reads that start and end on
 * a chunk's boundary, so llhttp's state stays where it left it). The decision is made on the
 * whole read before any state changes, so the Python path always starts from the state it left.
 * The state both paths share lives in the C fields of ExchangeBase, the base class of
 * client.py's _Exchange: Python reads and writes them as attributes, this reads and writes the
 * fields (an attribute lookup and a store a read cost ~15 % of the load thread at 1,000 streams).
 * So either path can take the next read. The token events this path reads are staged in the
 * exchange and appended to the outcome's arrays in one call (flush_staged) before the Python
 * path takes a read and when the exchange ends.
 * tests/unit/test_fastread.py feeds the same streams, split every way, through both and compares.
 *
 * A Poller holds the readers of one event loop behind one epoll instance, and the loop watches
 * only that: one callback a loop pass reads every ready socket, where the loop's own dispatch
 * of each ready socket to its reader cost about as much as the read's system call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#ifndef __linux__
#error "specmon's native reader needs Linux (SO_TIMESTAMPNS); elsewhere the Python reader runs"
#endif

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/uio.h>
#include <time.h>

/* As client.py's _READ_SIZE: under malloc's mmap threshold, and larger bodies come on the next
 * readiness. The buffer is per thread and never handed out: a read is copied into its bytes
 * object before any Python code runs (or, on the fast path, only parsed, its last event copied). */
#define READ_SIZE (64 * 1024)
/* The most events one read may carry on the fast path (a client 40 decode steps behind holds
 * ~40); more goes to the Python path. */
#define MAX_EVENTS 512

static _Thread_local char *read_buf = NULL;
/* The pacer of this thread's loop (load/pacing.py, Pacer; load/loop.py, LoadLoop.pace): at the
 * first read of a loop pass while no pause is due, the reader has the loop call the pacer's pause
 * after the pass (the loop's call_soon: after every reader of the pass), so the next pass finds
 * many sockets ready. The pause itself, its rule and its figures are Python's, the same object
 * for either reader; here is only when to ask for one. */
static _Thread_local PyObject *pace_loop = NULL; /* whose call_soon runs the pause */
static _Thread_local PyObject *pace_cb = NULL;   /* the pacer's pause; NULL: not pacing */
static _Thread_local int pause_due = 0;
/* The gaps between two token events of one stream (the kernel stamps of two reads; a read that
 * brings two of a stream's events counts a gap of 0), tracked since reset_chunk_gap() as an
 * estimate of their 1st percentile: a gap below the estimate takes it 10 % down, one above
 * 0.1 % up, so it settles where P(below) x ln(1/0.9) = P(above) x ln(1.001), ~0.94 % below.
 * Unlike the smallest gap, one outlier (a server that wrote a chunk late and the next on time)
 * does not pin it for the rest of the level, and it comes down by itself where more than ~1 %
 * of the reads hold two chunks of a stream. The pacer keeps its pause a share of it (chunk_gap()). */
#define GAP_DOWN 0.9
#define GAP_UP 1.001
static _Thread_local double gap_low = INFINITY;

static inline void track_gap(double g) {
    if (isinf(gap_low))
        gap_low = g;
    else
        gap_low *= g < gap_low ? GAP_DOWN : GAP_UP;
}

static PyObject *s_exchange, *s_received, *s_lost, *s_rid;

/* time.perf_counter() and time.time() as CPython computes them on Linux: the clock's
 * nanoseconds as one integer, then divided (so a stamp here equals one taken in Python). */
static inline double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) / 1e9;
}

/* The realtime clock at a monotonic instant (returned; the realtime reading in *real): the
 * realtime read between two monotonic ones, read again (at most twice more) while they are over
 * 50 us apart. A kernel stamp is moved from the realtime clock onto the monotonic one by their
 * difference, and a thread preempted between two plain reads would put every stamp of that read
 * early by the whole stall (on a busy host: milliseconds). */
static inline double mono_real(double *real) {
    double m0 = clock_s(CLOCK_MONOTONIC), m1 = m0, r = 0;
    for (int i = 0; i < 3; i++) {
        r = clock_s(CLOCK_REALTIME);
        m1 = clock_s(CLOCK_MONOTONIC);
        if (m1 - m0 <= 50e-6)
            break;
        m0 = m1;
    }
    *real = r;
    return (m0 + m1) / 2;
}

/* What _Exchange keeps between reads that this reads and writes: see client.py's _Exchange,
 * where each is set and what it means. */
typedef struct {
    PyObject_HEAD
    PyObject *o;          /* the RequestOutcome: its .events counts the events read */
    PyObject *arr_t;      /* _arr_t, _arr_n: the token stamps' arrays, which flush_staged() extends */
    PyObject *arr_n;
    double *staged_t;     /* the token events this path read since the last flush_staged() */
    int *staged_n;
    Py_ssize_t staged, staged_cap;
    PyObject *last_buf;   /* _last_buf[_last_lo:_last_hi]: the last event's data (the Python path's); */
    Py_ssize_t last_lo, last_hi; /* NULL (None): it is kept[0:kept_len] (this path's) */
    char *kept;           /* the last event this path read, copied out of the read buffer */
    Py_ssize_t kept_len, kept_cap;
    long long last_tokens;
    Py_ssize_t events;    /* the events read, [DONE] aside */
    double t_activity;
    double last_t;        /* the stamp of the stream's newest token event; 0: none yet */
    char between_chunks;  /* the next read may come here */
    char want_rid;        /* the outcome's rid is not known yet: read it from the first event with one */
} ExchangeBase;

static int ExchangeBase_traverse(ExchangeBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->o);
    Py_VISIT(self->arr_t);
    Py_VISIT(self->arr_n);
    Py_VISIT(self->last_buf);
    return 0;
}

static int ExchangeBase_clear(ExchangeBase *self) {
    Py_CLEAR(self->o);
    Py_CLEAR(self->arr_t);
    Py_CLEAR(self->arr_n);
    Py_CLEAR(self->last_buf);
    return 0;
}

static void ExchangeBase_dealloc(ExchangeBase *self) {
    PyObject_GC_UnTrack(self);
    ExchangeBase_clear(self);
    PyMem_Free(self->kept);
    PyMem_Free(self->staged_t);
    PyMem_Free(self->staged_n);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef ExchangeBase_members[] = {
    {"o", T_OBJECT, offsetof(ExchangeBase, o), 0, "the request's RequestOutcome"},
    {"_arr_t", T_OBJECT, offsetof(ExchangeBase, arr_t), 0, "the token stamps' array('d')"},
    {"_arr_n", T_OBJECT, offsetof(ExchangeBase, arr_n), 0, "the token counts' array('i')"},
    {"_last_buf", T_OBJECT, offsetof(ExchangeBase, last_buf), 0, "the buffer holding the last event"},
    {"_last_lo", T_PYSSIZET, offsetof(ExchangeBase, last_lo), 0, "the last event's start in it"},
    {"_last_hi", T_PYSSIZET, offsetof(ExchangeBase, last_hi), 0, "the last event's end in it"},
    {"last_tokens", T_LONGLONG, offsetof(ExchangeBase, last_tokens), 0, "completion_tokens so far"},
    {"events", T_PYSSIZET, offsetof(ExchangeBase, events), 0, "the events read so far ([DONE] aside)"},
    {"t_activity", T_DOUBLE, offsetof(ExchangeBase, t_activity), 0, "the stamp of the last read"},
    {"_last_t", T_DOUBLE, offsetof(ExchangeBase, last_t), 0, "the stamp of the newest token event (0: none)"},
    {"between_chunks", T_BOOL, offsetof(ExchangeBase, between_chunks), 0, "the next read may go to C"},
    {"want_rid", T_BOOL, offsetof(ExchangeBase, want_rid), 0, "the outcome's rid is still to be read"},
    {NULL},
};

/* The token events staged by this path, appended to the arrays: before the Python path takes a
 * read (its events come after these), and when the exchange ends (client.py's _attempt). */
static int flush_staged(ExchangeBase *ex) {
    if (ex->staged == 0)
        return 0;
    if (ex->arr_t == NULL || ex->arr_n == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "staged token events without their arrays");
        return -1;
    }
    PyObject *r = PyObject_CallMethod(ex->arr_t, "frombytes", "y#", (const char *)ex->staged_t,
                                      (Py_ssize_t)(ex->staged * (Py_ssize_t)sizeof(double)));
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    r = PyObject_CallMethod(ex->arr_n, "frombytes", "y#", (const char *)ex->staged_n,
                            (Py_ssize_t)(ex->staged * (Py_ssize_t)sizeof(int)));
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    ex->staged = 0;
    return 0;
}

static PyObject *ExchangeBase_flush(ExchangeBase *self, PyObject *Py_UNUSED(ignored)) {
    if (flush_staged(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* One token event: its stamp and count kept here, no Python object made (a float, two method
 * calls and their argument parsing a read: ~5 % of the load thread at 1,000 streams). */
static int stage(ExchangeBase *ex, double t, int n) {
    if (ex->staged == ex->staged_cap) {
        Py_ssize_t cap = ex->staged_cap ? ex->staged_cap * 2 : 128;
        double *ts = PyMem_Realloc(ex->staged_t, (size_t)cap * sizeof(double));
        if (ts == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ex->staged_t = ts;
        int *ns = PyMem_Realloc(ex->staged_n, (size_t)cap * sizeof(int));
        if (ns == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ex->staged_n = ns;
        ex->staged_cap = cap;
    }
    ex->staged_t[ex->staged] = t;
    ex->staged_n[ex->staged] = n;
    ex->staged++;
    return 0;
}

/* The last event this path read (kept), as bytes: read once, when the response ends. */
static PyObject *ExchangeBase_kept_event(ExchangeBase *self, PyObject *Py_UNUSED(ignored)) {
    return PyBytes_FromStringAndSize(self->kept, self->kept ? self->kept_len : 0);
}

static PyMethodDef ExchangeBase_methods[] = {
    {"_kept_event", (PyCFunction)ExchangeBase_kept_event, METH_NOARGS,
     "the last event the C reader read (where _last_buf is None)"},
    {"_flush_stamps", (PyCFunction)ExchangeBase_flush, METH_NOARGS,
     "append the token events the C reader staged to the arrays (they are whole only after this)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ExchangeBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "specmon.load._fastread.ExchangeBase",
    .tp_basicsize = sizeof(ExchangeBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fields of a request's stream state that the C reader shares (client.py's _Exchange).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)ExchangeBase_dealloc,
    .tp_traverse = (traverseproc)ExchangeBase_traverse,
    .tp_clear = (inquiry)ExchangeBase_clear,
    .tp_members = ExchangeBase_members,
    .tp_methods = ExchangeBase_methods,
};

/* The base of client.py's _Stream: its `exchange` (the request on the connection, or None) a C
 * field the reader reads without a lookup. */
typedef struct {
    PyObject_HEAD
    PyObject *exchange;
} StreamBase;

static int StreamBase_traverse(StreamBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->exchange);
    return 0;
}

static int StreamBase_clear(StreamBase *self) {
    Py_CLEAR(self->exchange);
    return 0;
}

static void StreamBase_dealloc(StreamBase *self) {
    PyObject_GC_UnTrack(self);
    StreamBase_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef StreamBase_members[] = {
    {"exchange", T_OBJECT, offsetof(StreamBase, exchange), 0, "the request on this connection, or None"},
    {NULL},
};

static PyTypeObject StreamBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "specmon.load._fastread.StreamBase",
    .tp_basicsize = sizeof(StreamBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The field of a connection that the C reader reads (client.py's _Stream).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)StreamBase_dealloc,
    .tp_traverse = (traverseproc)StreamBase_traverse,
    .tp_clear = (inquiry)StreamBase_clear,
    .tp_members = StreamBase_members,
};

typedef struct Poller Poller;

typedef struct {
    PyObject_HEAD
    int fd;
    PyObject *transport; /* its _lost(exc): the socket closed or failed */
    PyObject *protocol;  /* its .exchange, and .received(stamp, data) for the Python path */
    Poller *poller;      /* the poller it is registered with, or NULL (the loop calls readable) */
    char stream_base;    /* protocol is a StreamBase: its exchange is read from the field */
    unsigned long long reads, fast_reads;
} Reader;

/* One epoll instance for the stamped sockets of one event loop, itself the one descriptor the
 * loop watches for them: a pass reads every ready socket here in one call. Why: uvloop's
 * dispatch of a ready socket to its callback (its poll handle, a Handle, a call through
 * Cython) cost about as much as the read's own system call at 1,000 streams. */
struct Poller {
    PyObject_HEAD
    int epfd;
    PyObject *loop;       /* its add_reader / remove_reader, while any reader is registered */
    Py_ssize_t readers;   /* registered now; each holds a reference of the poller's */
    char watched;         /* the loop watches epfd */
    char has_fd;          /* epfd is open (from init to dealloc) */
    unsigned long long passes;
};

static int Reader_traverse(Reader *self, visitproc visit, void *arg) {
    Py_VISIT(self->transport);
    Py_VISIT(self->protocol);
    Py_VISIT((PyObject *)self->poller);
    return 0;
}

static int Reader_clear(Reader *self) {
    Py_CLEAR(self->transport);
    Py_CLEAR(self->protocol);
    Py_CLEAR(self->poller);
    return 0;
}

static PyTypeObject PollerType;
static PyObject *s_add_reader, *s_remove_reader, *s_ready;

/* The loop watches the epoll instance while a reader is registered, and not when none is: an
 * idle poller holds no handle of the loop (and the loop no reference to it). */
static int poller_watch(Poller *p, int on) {
    if (on == p->watched)
        return 0;
    PyObject *fd = PyLong_FromLong(p->epfd), *r;
    if (fd == NULL)
        return -1;
    if (on) {
        PyObject *cb = PyObject_GetAttr((PyObject *)p, s_ready);
        r = cb ? PyObject_CallMethodObjArgs(p->loop, s_add_reader, fd, cb, NULL) : NULL;
        Py_XDECREF(cb);
    } else {
        r = PyObject_CallMethodObjArgs(p->loop, s_remove_reader, fd, NULL);
    }
    Py_DECREF(fd);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    p->watched = (char)on;
    return 0;
}

/* Edge-triggered: a socket is reported once each time bytes arrive, and not polled again at the
 * next wait. Level-triggered, every socket a pass read stayed on the ready list, so the next
 * wait (and the loop's own check of this instance) polled each of them once more, finding it
 * empty: the kernel's polling was ~7.5 % of the load thread at 1,000 streams, a third less
 * edge-triggered (perf, one run each). What edge triggering asks in return: a socket that may
 * still hold bytes after a pass is put back on the ready list by rearm() (a read that filled
 * the buffer; the sockets a pass that raised did not read; one whose peer has closed, below).
 * EPOLLRDHUP: the peer's close (or a reset, EPOLLHUP/EPOLLERR) can come in the same edge as the
 * last bytes, and one read takes the bytes alone; with no edge to come the close went unseen
 * and the request waited for its timeout (a server that died mid-response). A pass re-arms
 * such a socket after its read, so the next pass reads the end. */
#define POLLER_EVENTS (EPOLLIN | EPOLLRDHUP | EPOLLET)
#define POLLER_HANGUP (EPOLLRDHUP | EPOLLHUP | EPOLLERR)

static int poller_ctl(Poller *p, Reader *r, int op) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = POLLER_EVENTS;
    ev.data.ptr = r;
    return epoll_ctl(p->epfd, op, r->fd, &ev);
}

/* Ready again if it holds bytes (EPOLL_CTL_MOD polls it and queues it when it does). */
static void rearm(Reader *r) {
    if (r->fd >= 0 && r->poller != NULL)
        poller_ctl(r->poller, r, EPOLL_CTL_MOD); /* ENOENT/EBADF: already gone, as wanted */
}

static int poller_add(Poller *p, Reader *r) {
    if (!p->has_fd || p->loop == NULL) {
        PyErr_SetString(PyExc_ValueError, "poller: not initialised");
        return -1;
    }
    if (poller_ctl(p, r, EPOLL_CTL_ADD) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    Py_INCREF(r);
    p->readers++;
    if (poller_watch(p, 1) < 0) {
        poller_ctl(p, r, EPOLL_CTL_DEL);
        p->readers--;
        Py_DECREF(r);
        return -1;
    }
    return 0;
}

/* Out of the poller, before its socket closes (a closed socket leaves epoll by itself, but only
 * once no other descriptor shares its file). */
static int poller_remove(Poller *p, Reader *r) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    epoll_ctl(p->epfd, EPOLL_CTL_DEL, r->fd, &ev); /* ENOENT/EBADF: already gone, as wanted */
    p->readers--;
    int rc = p->readers == 0 ? poller_watch(p, 0) : 0;
    Py_DECREF(r); /* the poller's reference: r's caller holds another */
    return rc;
}

static void Reader_dealloc(Reader *self) {
    PyObject_GC_UnTrack(self);
    Reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", "transport", "protocol", "poller", NULL};
    int fd;
    PyObject *transport, *protocol, *poller = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOO|O", kwlist, &fd, &transport, &protocol, &poller))
        return -1;
    if (self->poller != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Reader is initialised once");
        return -1;
    }
    if (poller != Py_None && !PyObject_TypeCheck(poller, &PollerType)) {
        PyErr_SetString(PyExc_TypeError, "poller: expected a Poller or None");
        return -1;
    }
    self->fd = fd;
    Py_INCREF(transport);
    Py_XSETREF(self->transport, transport);
    Py_INCREF(protocol);
    Py_XSETREF(self->protocol, protocol);
    self->stream_base = (char)PyObject_TypeCheck(protocol, &StreamBaseType);
    if (poller != Py_None) {
        if (poller_add((Poller *)poller, self) < 0)
            return -1;
        Py_INCREF(poller);
        self->poller = (Poller *)poller;
    }
    return 0;
}

typedef struct {
    Py_ssize_t d, cut; /* the event's data: buf[d:cut] */
    long long ct;      /* its completion_tokens, or -1 when it has none */
} Event;

static inline int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}

static inline int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The last occurrence of a JSON key (`key`, k bytes, starting with its quote) within p[lo:hi],
 * as bytes.rfind: its index or -1. */
static inline Py_ssize_t rfind_key(const char *p, Py_ssize_t lo, Py_ssize_t hi, const char *key, Py_ssize_t k) {
    for (Py_ssize_t i = hi - k; i >= lo; i--) {
        if (p[i] == '"' && memcmp(p + i, key, (size_t)k) == 0)
            return i;
    }
    return -1;
}

/* The last `"completion_tokens":` key within p[lo:hi]. */
static Py_ssize_t rfind_ct(const char *p, Py_ssize_t lo, Py_ssize_t hi) {
    static const char key[] = "\"completion_tokens\":";
    return rfind_key(p, lo, hi, key, sizeof(key) - 1);
}

/* The rid in one event's data p[d:cut], as client.py's _str_after(data, b'"id":') reads it: the
 * string after the last "id" key, nothing but whitespace between, no backslash in it, decoded
 * as ASCII with U+FFFD for any other byte. 1 with *rid set, 0 for none, -1 on an error. */
static int read_rid(const char *p, Py_ssize_t d, Py_ssize_t cut, PyObject **rid) {
    static const char key[] = "\"id\":";
    const Py_ssize_t k = sizeof(key) - 1;
    Py_ssize_t i = rfind_key(p, d, cut, key, k);
    if (i < 0)
        return 0;
    Py_ssize_t j = i + k;
    while (j < cut && p[j] != '"') {
        if (!is_space(p[j]))
            return 0; /* something other than whitespace before the value's quote */
        j++;
    }
    if (j >= cut)
        return 0;
    const char *end = memchr(p + j + 1, '"', (size_t)(cut - j - 1));
    if (end == NULL || end == p + j + 1 || memchr(p + j + 1, '\\', (size_t)(end - p - j - 1)) != NULL)
        return 0; /* no closing quote, an empty value, or an escape in it */
    *rid = PyUnicode_DecodeASCII(p + j + 1, end - p - j - 1, "replace");
    return *rid == NULL ? -1 : 1;
}

/* The events of p[lo:hi], one chunk's data, as client.py's _Exchange._body reads them with no
 * carried-over bytes. 1: all of it is whole one-line data events the fast path handles, appended
 * to ev; 0: anything else (the Python path takes the read). */
static int scan_events(const char *p, Py_ssize_t lo, Py_ssize_t hi, Event *ev, int *nev) {
    Py_ssize_t pos = lo;
    while (pos < hi) {
        const char *nl = memchr(p + pos, '\n', hi - pos);
        if (nl == NULL)
            return 0; /* an event not ended in this chunk: carried over in Python */
        Py_ssize_t cut = nl - p;
        if (cut + 1 >= hi || p[cut + 1] != '\n')
            return 0; /* a multi-line event, or its blank line in a later chunk */
        Py_ssize_t start = pos;
        pos = cut + 2;
        if (cut - start < 5 || memcmp(p + start, "data:", 5) != 0)
            return 0; /* a comment or another field: rare, left to Python */
        Py_ssize_t d = start + 5;
        if (p[d] == ' ')
            d++;
        while (d < cut && is_space(p[d]))
            d++;
        if (cut - d >= 6 && memcmp(p + d, "[DONE]", 6) == 0)
            return 0;
        if (cut - d >= 8 && memcmp(p + d, "{\"error\"", 8) == 0)
            return 0;
        if (*nev >= MAX_EVENTS)
            return 0;
        Event *e = &ev[(*nev)++];
        e->d = d;
        e->cut = cut;
        e->ct = -1;
        Py_ssize_t i = rfind_ct(p, d, cut);
        if (i >= 0) {
            Py_ssize_t j = i + 20; /* as the regex ` *([0-9]+)` matched at i + 20, ending at cut */
            while (j < cut && p[j] == ' ')
                j++;
            Py_ssize_t k = j;
            long long v = 0;
            while (k < cut && p[k] >= '0' && p[k] <= '9') {
                if (k - j >= 18)
                    return 0; /* beyond a long long: Python's int reads it */
                v = v * 10 + (p[k] - '0');
                k++;
            }
            if (k > j)
                e->ct = v;
        }
    }
    return 1;
}

/* The last event's data kept in the exchange's own buffer: a read taken here makes no bytes
 * object (a malloc, a copy of the whole read and a free: ~5 % of the load thread at 1,000
 * streams), only this copy of its last event, into a buffer that grows and is reused. */
static int keep_event(ExchangeBase *ex, const char *p, Py_ssize_t len) {
    if (ex->kept == NULL || len > ex->kept_cap) {
        Py_ssize_t cap = ex->kept_cap ? ex->kept_cap : 1024;
        while (cap < len)
            cap *= 2;
        char *grown = PyMem_Realloc(ex->kept, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ex->kept = grown;
        ex->kept_cap = cap;
    }
    memcpy(ex->kept, p, (size_t)len);
    ex->kept_len = len;
    Py_CLEAR(ex->last_buf);
    ex->last_lo = 0;
    ex->last_hi = len;
    return 0;
}

/* The whole read p[0:n] as client.py's _Exchange.feed would take it when the chunked body is
 * between chunks: 1 handled here, 0 for the Python path, -1 on an error. */
static int fast_read(Reader *self, double now, const char *p, Py_ssize_t n) {
    PyObject *exobj;
    if (self->stream_base) {
        exobj = ((StreamBase *)self->protocol)->exchange;
        if (exobj == NULL)
            return 0;
        Py_INCREF(exobj);
    } else if ((exobj = PyObject_GetAttr(self->protocol, s_exchange)) == NULL) {
        return -1;
    }
    int rc = 0;
    if (!PyObject_TypeCheck(exobj, &ExchangeBaseType))
        goto done; /* None: no request on this connection */
    ExchangeBase *ex = (ExchangeBase *)exobj;
    if (!ex->between_chunks || ex->o == NULL || ex->arr_t == NULL || ex->arr_n == NULL)
        goto done; /* before the body, or mid-chunk or mid-event */

    Py_ssize_t pos = 0;
    Event ev[MAX_EVENTS];
    int nev = 0;
    while (pos < n) {
        /* "<hex>\r\n<data>\r\n", plain hex only (the size line's CRLF within 18 bytes): llhttp reads the rest */
        Py_ssize_t lim = n - pos < 18 ? n : pos + 18, eol = -1;
        for (Py_ssize_t i = pos; i + 1 < lim; i++) {
            if (p[i] == '\r' && p[i + 1] == '\n') { eol = i; break; }
        }
        if (eol <= pos || eol - pos > 16)
            goto done;
        unsigned long long size = 0;
        for (Py_ssize_t i = pos; i < eol; i++) {
            int h = hex_value(p[i]);
            if (h < 0)
                goto done; /* whitespace, a sign, 0x, an extension: Python's reading */
            size = size * 16 + (unsigned)h;
        }
        if (size == 0 || size > (unsigned long long)(n - eol))
            goto done; /* the last chunk, or one not all in this read */
        Py_ssize_t end = eol + 2 + (Py_ssize_t)size;
        if (end + 2 > n || p[end] != '\r' || p[end + 1] != '\n')
            goto done;
        if (!scan_events(p, eol + 2, end, ev, &nev))
            goto done;
        pos = end + 2;
    }

    /* The read is ours: the same changes _Exchange.feed/_body make. */
    rc = -1;
    /* first, while nothing else has run on this thread since the read: p is its read buffer */
    if (nev > 0 && keep_event(ex, p + ev[nev - 1].d, ev[nev - 1].cut - ev[nev - 1].d) < 0)
        goto done;
    for (int i = 0; i < nev && ex->want_rid; i++) { /* _body: the first event that holds one */
        PyObject *rid = NULL;
        int got = read_rid(p, ev[i].d, ev[i].cut, &rid);
        if (got < 0)
            goto done;
        if (got > 0) {
            int set = PyObject_SetAttr(ex->o, s_rid, rid);
            Py_DECREF(rid);
            if (set < 0)
                goto done;
            ex->want_rid = 0;
        }
    }
    int added = 0;
    for (int i = 0; i < nev; i++) {
        if (ev[i].ct <= ex->last_tokens)
            continue;
        long long k = ev[i].ct - ex->last_tokens;
        if (k > INT_MAX) { /* more than an array('i') holds: the error Python's append raises */
            PyErr_SetString(PyExc_OverflowError, "signed integer is greater than maximum");
            goto done;
        }
        if (added)
            track_gap(0.0); /* two of this stream's events in one read */
        else if (ex->last_t > 0)
            track_gap(now - ex->last_t);
        if (stage(ex, now, (int)k) < 0)
            goto done;
        added = 1;
        ex->last_tokens = ev[i].ct;
    }
    if (added)
        ex->last_t = now;
    ex->t_activity = now;
    if (nev > 0)
        ex->events += nev;
    rc = 1;
done:
    /* the Python path takes this read: its token events come after the ones staged here */
    if (rc == 0 && PyObject_TypeCheck(exobj, &ExchangeBaseType) && flush_staged((ExchangeBase *)exobj) < 0)
        rc = -1;
    Py_DECREF(exobj);
    return rc;
}

static PyObject *call_lost(Reader *self, PyObject *exc) {
    PyObject *r = PyObject_CallMethodOneArg(self->transport, s_lost, exc);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *s_call_soon;

/* At a pass's first read, while no pause is due: the pause after the pass. */
static int pace(void) {
    if (pace_cb != NULL && !pause_due) {
        pause_due = 1;
        PyObject *r = PyObject_CallMethodOneArg(pace_loop, s_call_soon, pace_cb);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* One read of a readable socket, as _KernelStamped._readable. */
static PyObject *read_once(Reader *self) {
    if (self->fd < 0)
        Py_RETURN_NONE; /* closed: the number may already be another socket's */
    if (read_buf == NULL && (read_buf = PyMem_RawMalloc(READ_SIZE)) == NULL)
        return PyErr_NoMemory();
    struct iovec iov = {read_buf, READ_SIZE};
    union {
        char c[CMSG_SPACE(sizeof(struct timespec)) + 64];
        struct cmsghdr align;
    } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.c;
    msg.msg_controllen = sizeof control.c;
    ssize_t n;
    do {
        n = recvmsg(self->fd, &msg, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK)
            Py_RETURN_NONE;
        /* OSError(errno, text) is the errno's own subclass (ConnectionResetError, ...) */
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "is", err, strerror(err));
        if (exc == NULL)
            return NULL;
        PyObject *r = call_lost(self, exc);
        Py_DECREF(exc);
        return r;
    }
    if (n == 0)
        return call_lost(self, Py_None);
    if (n == READ_SIZE)
        rearm(self); /* more may wait, and no new bytes may come to report it */
    double real, now = mono_real(&real), stamp = now;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS &&
        cm->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(cm), sizeof ts);
        double ago = real - ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
        if (ago > 0)
            stamp = now - ago;
    }
    self->reads++;
    int fast = fast_read(self, stamp, read_buf, n);
    if (fast != 0) {
        if (fast < 0)
            return NULL;
        self->fast_reads++;
        Py_RETURN_NONE;
    }
    PyObject *data = PyBytes_FromStringAndSize(read_buf, n);
    if (data == NULL)
        return NULL;
    PyObject *st = PyFloat_FromDouble(stamp);
    if (st == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    PyObject *r = PyObject_CallMethodObjArgs(self->protocol, s_received, st, data, NULL);
    Py_DECREF(st);
    Py_DECREF(data);
    return r;
}

/* The loop's reader callback where the socket has no poller (and the tests' one read). */
static PyObject *Reader_readable(Reader *self, PyObject *Py_UNUSED(ignored)) {
    if (self->fd >= 0 && pace() < 0)
        return NULL;
    return read_once(self);
}

static PyObject *Reader_close(Reader *self, PyObject *Py_UNUSED(ignored)) {
    int rc = 0;
    if (self->fd >= 0 && self->poller != NULL) {
        Poller *p = self->poller;
        self->poller = NULL;
        rc = poller_remove(p, self);
        Py_DECREF(p);
    }
    self->fd = -1;
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Reader_get_reads(Reader *self, void *closure) { return PyLong_FromUnsignedLongLong(self->reads); }
static PyObject *Reader_get_fast_reads(Reader *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->fast_reads);
}

static PyMethodDef Reader_methods[] = {
    {"readable", (PyCFunction)Reader_readable, METH_NOARGS, "Read the socket once (the loop's reader callback)."},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "Read nothing more (the socket is closed)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reader_getset[] = {
    {"reads", (getter)Reader_get_reads, NULL, "reads that returned bytes", NULL},
    {"fast_reads", (getter)Reader_get_fast_reads, NULL, "of them, the ones handled here", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "specmon.load._fastread.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Reader(fd, transport, protocol, poller=None): a kernel-stamped stream socket's reads, in C "
              "(registered with the poller, or read when the loop calls readable()).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_traverse = (traverseproc)Reader_traverse,
    .tp_clear = (inquiry)Reader_clear,
    .tp_methods = Reader_methods,
    .tp_getset = Reader_getset,
};

/* The most ready sockets one pass reads; the rest stay ready for the next pass. */
#define MAX_READY 1024

static int Poller_init(Poller *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"loop", NULL};
    PyObject *loop;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &loop))
        return -1;
    if (self->has_fd) {
        PyErr_SetString(PyExc_RuntimeError, "a Poller is initialised once");
        return -1;
    }
    if ((self->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->has_fd = 1;
    Py_INCREF(loop);
    Py_XSETREF(self->loop, loop);
    return 0;
}

static int Poller_traverse(Poller *self, visitproc visit, void *arg) {
    Py_VISIT(self->loop);
    return 0;
}

static int Poller_clear(Poller *self) {
    Py_CLEAR(self->loop);
    return 0;
}

static void Poller_dealloc(Poller *self) {
    PyObject_GC_UnTrack(self);
    if (self->has_fd)
        close(self->epfd);
    Poller_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The loop's reader callback on the epoll instance: one read of each ready socket. A read that
 * raises ends the pass there; the sockets not read yet are still ready for the next. */
static PyObject *Poller_ready(Poller *self, PyObject *Py_UNUSED(ignored)) {
    struct epoll_event evs[MAX_READY];
    int n;
    do {
        n = epoll_wait(self->epfd, evs, MAX_READY, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (n == 0)
        Py_RETURN_NONE;
    self->passes++;
    if (pace() < 0)
        return NULL;
    /* every reader of the pass held until its end: a read may close (and free) another's */
    for (int i = 0; i < n; i++)
        Py_INCREF((PyObject *)evs[i].data.ptr);
    int i = 0;
    for (; i < n; i++) {
        Reader *rd = (Reader *)evs[i].data.ptr;
        PyObject *r = read_once(rd);
        if (r == NULL)
            break;
        Py_DECREF(r);
        if (evs[i].events & POLLER_HANGUP)
            rearm(rd); /* the end may wait behind the bytes just read (a closed reader: skipped) */
    }
    for (int j = i + 1; j < n; j++)
        rearm((Reader *)evs[j].data.ptr); /* not read: reported again by the next pass */
    for (int j = 0; j < n; j++)
        Py_DECREF((PyObject *)evs[j].data.ptr);
    if (i < n)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Poller_fileno(Poller *self, PyObject *Py_UNUSED(ignored)) { return PyLong_FromLong(self->epfd); }
static PyObject *Poller_get_readers(Poller *self, void *closure) { return PyLong_FromSsize_t(self->readers); }
static PyObject *Poller_get_passes(Poller *self, void *closure) { return PyLong_FromUnsignedLongLong(self->passes); }
static PyObject *Poller_get_watched(Poller *self, void *closure) { return PyBool_FromLong(self->watched); }

static PyMethodDef Poller_methods[] = {
    {"ready", (PyCFunction)Poller_ready, METH_NOARGS, "Read each ready socket once (the loop's reader callback)."},
    {"fileno", (PyCFunction)Poller_fileno, METH_NOARGS, "The epoll instance's descriptor."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Poller_getset[] = {
    {"readers", (getter)Poller_get_readers, NULL, "readers registered now", NULL},
    {"passes", (getter)Poller_get_passes, NULL, "calls of ready() that found a socket ready", NULL},
    {"watched", (getter)Poller_get_watched, NULL, "whether the loop watches it now", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PollerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "specmon.load._fastread.Poller",
    .tp_basicsize = sizeof(Poller),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Poller(loop): the C readers of one event loop behind one epoll instance the loop watches.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Poller_init,
    .tp_dealloc = (destructor)Poller_dealloc,
    .tp_traverse = (traverseproc)Poller_traverse,
    .tp_clear = (inquiry)Poller_clear,
    .tp_methods = Poller_methods,
    .tp_getset = Poller_getset,
};

/* RequestOutcome.itls() (client.py) over a request's two token arrays, stamps ('d') and tokens
 * added ('i'): for each event after the first, its gap since the one before, once per token it
 * brought, divided by their number (spread_gaps in analysis/stats.py). The session's thread
 * does this for every finished request; in Python it was ~40 us of the ~80 a request's record
 * cost at 256 tokens. A float object is shared by the tokens of one event, as [g / n] * n. */
static int get_array(PyObject *obj, Py_buffer *view, const char *format, Py_ssize_t itemsize) {
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != itemsize || view->format == NULL || strcmp(view->format, format) != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "expected an array('%s')", format);
        return -1;
    }
    return 0;
}

static PyObject *itls(PyObject *self, PyObject *args) {
    PyObject *tobj, *nobj;
    if (!PyArg_ParseTuple(args, "OO", &tobj, &nobj))
        return NULL;
    Py_buffer tb, nb;
    if (get_array(tobj, &tb, "d", sizeof(double)) < 0)
        return NULL;
    if (get_array(nobj, &nb, "i", sizeof(int)) < 0) {
        PyBuffer_Release(&tb);
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t n = tb.len / (Py_ssize_t)sizeof(double);
    if (nb.len / (Py_ssize_t)sizeof(int) != n) {
        PyErr_SetString(PyExc_ValueError, "expected as many token counts as stamps");
        goto done;
    }
    const double *t = tb.buf;
    const int *k = nb.buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 1; i < n; i++)
        if (k[i] > 0)
            total += k[i];
    if ((out = PyList_New(total)) == NULL)
        goto done;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (k[i] <= 0)
            continue;
        PyObject *g = PyFloat_FromDouble(k[i] == 1 ? t[i] - t[i - 1] : (t[i] - t[i - 1]) / k[i]);
        if (g == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        for (int j = 1; j < k[i]; j++)
            PyList_SET_ITEM(out, at++, Py_NewRef(g));
        PyList_SET_ITEM(out, at++, g);
    }
done:
    PyBuffer_Release(&tb);
    PyBuffer_Release(&nb);
    return out;
}

/* RequestOutcome.window_tokens over a request's arrays: the same arithmetic in the same order,
 * so the same figures (the token counts are whole numbers: their float sums are exact in any
 * order). A level's statistics made a tuple per token event for this: ~60 ms at 1,000 streams. */
static PyObject *window_tokens(PyObject *self, PyObject *args) {
    PyObject *tobj, *nobj, *sobj;
    double sent, sent_wall, w0, w1, scale, span, width;
    if (!PyArg_ParseTuple(args, "OOdddddddO", &tobj, &nobj, &sent, &sent_wall, &w0, &w1, &scale, &span,
                          &width, &sobj))
        return NULL;
    Py_buffer tb, nb, sb;
    if (get_array(tobj, &tb, "d", sizeof(double)) < 0)
        return NULL;
    if (get_array(nobj, &nb, "i", sizeof(int)) < 0) {
        PyBuffer_Release(&tb);
        return NULL;
    }
    if (PyObject_GetBuffer(sobj, &sb, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&tb);
        PyBuffer_Release(&nb);
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t n = tb.len / (Py_ssize_t)sizeof(double), last = sb.len / (Py_ssize_t)sizeof(double) - 1;
    if (sb.itemsize != sizeof(double) || sb.format == NULL || strcmp(sb.format, "d") != 0 || last < 0) {
        PyErr_SetString(PyExc_TypeError, "sums: expected a non-empty array('d')");
        goto done;
    }
    if (nb.len / (Py_ssize_t)sizeof(int) != n) {
        PyErr_SetString(PyExc_ValueError, "expected as many token counts as stamps");
        goto done;
    }
    const double *ts = tb.buf;
    const int *ks = nb.buf;
    double *sums = sb.buf;
    long long toks = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double t = sent_wall + (ts[i] - sent);
        if (!(w0 <= t && t < w1))
            continue;
        toks += ks[i];
        double x = (t - w0) * scale;
        if (0.0 <= x && x < span) {
            Py_ssize_t b = (Py_ssize_t)(x / width);
            sums[b < last ? b : last] += (double)ks[i];
        }
    }
    out = PyLong_FromLongLong(toks);
done:
    PyBuffer_Release(&tb);
    PyBuffer_Release(&nb);
    PyBuffer_Release(&sb);
    return out;
}

/* json.dumps(ids, separators=(",", ":")).encode() for a list of ints, ~20x faster: a
 * prompt's 1,024 input_ids were ~120 us of every request's start. None for anything else (the
 * caller then uses json). */
static PyObject *json_ids(PyObject *self, PyObject *ids) {
    if (!PyList_CheckExact(ids))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    /* each id at most 20 digits and a sign, plus its comma; the brackets */
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 22 + 2);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out), *start = w;
    *w++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(ids, i);
        if (!PyLong_CheckExact(item)) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (i)
            *w++ = ',';
        unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        if (v < 0)
            *w++ = '-';
        char digits[20];
        int k = 0;
        do {
            digits[k++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        while (k)
            *w++ = digits[--k];
    }
    *w++ = ']';
    if (_PyBytes_Resize(&out, w - start) < 0)
        return NULL;
    return out;
}

/* random.Random.choices(pool, k=n) from the generator's next 2n 32-bit words, handed over as
 * rng.getrandbits(64 * n).to_bytes(8 * n, "little") (the first word generated first): the same
 * picks, and the generator left where choices would leave it, as random() makes each double from
 * two words ((a >> 5) * 2^26 + (b >> 6)) / 2^53 and choices takes pool[floor(random() * len)].
 * A prompt's 1,024 ids were ~80 us of Python a request; here ~3 us. */
static PyObject *choices(PyObject *self, PyObject *args) {
    Py_buffer words;
    PyObject *pool;
    if (!PyArg_ParseTuple(args, "y*O!", &words, &PyList_Type, &pool))
        return NULL;
    Py_ssize_t k = words.len / 8, n = PyList_GET_SIZE(pool);
    if (words.len % 8 != 0 || n == 0) {
        PyBuffer_Release(&words);
        PyErr_SetString(PyExc_ValueError, "expected 8 bytes a pick and a non-empty pool");
        return NULL;
    }
    PyObject *out = PyList_New(k);
    if (out == NULL) {
        PyBuffer_Release(&words);
        return NULL;
    }
    const unsigned char *b = words.buf;
    const double len = (double)n;
    for (Py_ssize_t i = 0; i < k; i++, b += 8) {
        uint32_t w0 = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        uint32_t w1 = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
        double r = ((double)(w0 >> 5) * 67108864.0 + (double)(w1 >> 6)) * (1.0 / 9007199254740992.0);
        Py_ssize_t j = (Py_ssize_t)floor(r * len);
        PyObject *item = PyList_GET_ITEM(pool, j);
        Py_INCREF(item);
        PyList_SET_ITEM(out, i, item);
    }
    PyBuffer_Release(&words);
    return out;
}

static PyObject *mono_now(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyFloat_FromDouble(clock_s(CLOCK_MONOTONIC));
}

static PyObject *set_pacer(PyObject *self, PyObject *args) {
    PyObject *loop, *cb;
    if (!PyArg_ParseTuple(args, "OO:set_pacer", &loop, &cb))
        return NULL;
    if ((loop == Py_None) != (cb == Py_None) || (cb != Py_None && !PyCallable_Check(cb))) {
        PyErr_SetString(PyExc_TypeError, "set_pacer: expected (loop, pause) or (None, None)");
        return NULL;
    }
    Py_CLEAR(pace_loop);
    Py_CLEAR(pace_cb);
    if (cb != Py_None) {
        pace_loop = Py_NewRef(loop);
        pace_cb = Py_NewRef(cb);
    }
    pause_due = 0;
    Py_RETURN_NONE;
}

static PyObject *pause_done(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    pause_due = 0;
    Py_RETURN_NONE;
}

static PyObject *chunk_gap(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    if (isinf(gap_low))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(gap_low);
}

static PyObject *reset_chunk_gap(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    gap_low = INFINITY;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_pacer", set_pacer, METH_VARARGS,
     "set_pacer(loop, pause): this thread's readers have loop.call_soon(pause) at a pass's first read while none is due; "
     "set_pacer(None, None): no pauses."},
    {"pause_done", pause_done, METH_NOARGS, "The pause asked for has run: the next pass's first read asks again."},
    {"chunk_gap", chunk_gap, METH_NOARGS,
     "~1st percentile of the gaps (s) between two token events of a stream this thread read since reset_chunk_gap(); None: none."},
    {"reset_chunk_gap", reset_chunk_gap, METH_NOARGS, "Forget the chunk gaps seen (a new level)."},
    {"perf_now", mono_now, METH_NOARGS, "The clock the reader stamps with (time.perf_counter's)."},
    {"choices", choices, METH_VARARGS, "random.choices(pool, k) from getrandbits(64 * k) as little-endian bytes."},
    {"itls", itls, METH_VARARGS, "spread_gaps over a request's token stamps array('d') and counts array('i')."},
    {"window_tokens", window_tokens, METH_VARARGS,
     "RequestOutcome.window_tokens over its stamps array('d') and counts array('i'), into sums array('d')."},
    {"json_ids", json_ids, METH_O, "json.dumps(ids, separators=(',', ':')).encode() for a list of ints; else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastread", "specmon's load client receive path in C (see _fastread.c).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__fastread(void) {
    struct { PyObject **slot; const char *name; } names[] = {
        {&s_exchange, "exchange"}, {&s_received, "received"}, {&s_lost, "_lost"},
        {&s_add_reader, "add_reader"}, {&s_remove_reader, "remove_reader"}, {&s_ready, "ready"},
        {&s_call_soon, "call_soon"}, {&s_rid, "rid"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL)
            return NULL;
    }
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&ExchangeBaseType) < 0 || PyType_Ready(&StreamBaseType) < 0 ||
        PyType_Ready(&PollerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    struct { const char *name; PyTypeObject *type; } types[] = {
        {"ExchangeBase", &ExchangeBaseType}, {"StreamBase", &StreamBaseType}, {"Poller", &PollerType},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        Py_INCREF(types[i].type);
        if (PyModule_AddObject(m, types[i].name, (PyObject *)types[i].type) < 0) {
            Py_DECREF(types[i].type);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}

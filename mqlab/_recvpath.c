/*
 * mqlab._recvpath: the PostgreSQL receive path of one worker process (issue 28).
 *
 * pg_receive(fds, spec, return_ns, wall_offset_ns, wake_fd) drives all of a worker's
 * receiver connections from the calling thread, without the interpreter lock, until
 * return_ns (monotonic) passes or wake_fd becomes readable:
 *
 * - each connection (a libpq socket, idle, on which the driver prepared the statement
 *   named in spec: the receiver's ack-and-claim, params: int8[] acked ids, int8 limit,
 *   float8 visibility seconds; rows: id int8, payload bytea, deliveries int4, binary)
 *   sends Bind, Execute, Sync of that statement; its reply's rows are the next batch:
 *   each row's first header_bytes of payload go to the connection's headers (a shorter
 *   payload is counted as short), a row whose delivery count is not 1 is flagged (its
 *   index among the headers kept), the batch's receive time (monotonic + wall_offset_ns)
 *   and length are noted, and its ids are acked by the connection's next statement,
 *   which claims the next batch in the same transaction;
 * - a reply without rows: the next claim after a backoff (5 ms doubling up to
 *   spec's poll cap);
 * - at the end every connection that holds ids sends one more statement with limit 0
 *   (the ack alone) and its reply is awaited, so that nothing received stays unacked
 *   when the call returns, unless that connection failed.
 *
 * A failed connection (ErrorResponse, closed, malformed reply, or no reply within
 * spec's timeout) stops there: what it received is returned, its last batch unacked
 * (the server delivers it again once its lease runs out); the caller drops it.
 *
 * A statement that a deadlock rolled back (SQLSTATE 40P01: nothing of it was done) is
 * sent again as it was, the rows read of it forgotten, at most AGAIN_MAX times a call.
 *
 * Returns a list, a tuple per connection: (headers bytes, receive ns per batch as i64
 * bytes, batch lengths as i64 bytes, flagged indices as i64 bytes, rows received,
 * rows short, rows acked, status, message or None, statements sent again). Status: 0
 * fine, 1 an ErrorResponse (message: its text), 2 timeout, 3 the connection failed, 4 a
 * malformed reply.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { ST_OK = 0, ST_ERROR = 1, ST_TIMEOUT = 2, ST_CONNECTION = 3, ST_PROTOCOL = 4 };
enum { IDLE = 0, WAITING = 1, DONE = 2 }; /* DONE: finished or failed */

#define MESSAGE_MAX 512
#define FIRST_BACKOFF_NS 5000000LL
#define AGAIN_MAX 1000 /* statements of one call sent again after a deadlock */

typedef struct { /* a growing byte buffer */
    unsigned char *p;
    size_t len, cap;
} buf;

static int
buf_put(buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) {
            cap *= 2;
        }
        unsigned char *p = realloc(b->p, cap);
        if (p == NULL) {
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int
buf_i64(buf *b, int64_t v)
{
    return buf_put(b, &v, sizeof v);
}

typedef struct {
    int fd;
    int state;
    int status;
    char message[MESSAGE_MAX];
    buf in;          /* bytes read, not parsed yet */
    buf out;         /* bytes to write */
    size_t out_done; /* of them written */
    buf ids;         /* the ids of the last batch (i64), acked by the next statement */
    buf batch_ids;   /* the ids of the batch being read */
    int64_t acking;  /* ids the statement in flight acks */
    int64_t next_ns; /* an idle connection's next claim (after an empty one) */
    int64_t backoff_ns;
    int64_t last_io_ns;
    int last; /* the statement in flight is the final ack */
    int again;     /* the statement in flight was rolled back (a deadlock): sent again */
    int64_t again_n; /* statements sent again */
    size_t headers_at, flagged_at; /* where the statement in flight's rows began */
    int64_t kept_at, shorts_at;
    int64_t batch_rows, batch_kept;
    buf headers, recv_ns, lens, flagged;
    int64_t received, shorts, acked, kept;
} conn;

static int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void
be32(unsigned char *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static void
be64(unsigned char *p, uint64_t v)
{
    be32(p, (uint32_t)(v >> 32));
    be32(p + 4, (uint32_t)v);
}

static uint32_t
get32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void
fail(conn *c, int status, const char *message)
{
    c->state = DONE;
    if (c->status == ST_OK) {
        c->status = status;
        snprintf(c->message, MESSAGE_MAX, "%s", message);
    }
}

typedef struct {
    const char *name;
    Py_ssize_t name_len;
    int64_t limit;
    double visibility;
    int64_t poll_cap_ns;
    int64_t timeout_ns;
    Py_ssize_t header_bytes;
} spec_t;

/* Bind (the acked ids, the limit, the visibility), Execute, Sync into c->out. */
static int
put_statement(conn *c, const spec_t *s, int64_t limit)
{
    int64_t n = (int64_t)(c->ids.len / 8);
    size_t array_len = 20 + 12 * (size_t)n;
    size_t bind_len = 4 + 1 + (size_t)s->name_len + 1 + 4 + 2 + (4 + array_len) + 12 + 12 + 4;
    size_t total = 1 + bind_len + 1 + 4 + 1 + 4 + 1 + 4;
    c->out.len = 0;
    c->out_done = 0;
    if (c->out.cap < total) {
        unsigned char *p = realloc(c->out.p, total);
        if (p == NULL) {
            return -1;
        }
        c->out.p = p;
        c->out.cap = total;
    }
    unsigned char *p = c->out.p;
    *p++ = 'B';
    be32(p, (uint32_t)bind_len);
    p += 4;
    *p++ = 0; /* the unnamed portal */
    memcpy(p, s->name, s->name_len);
    p += s->name_len;
    *p++ = 0;
    *p++ = 0, *p++ = 1, *p++ = 0, *p++ = 1; /* one format for all parameters: binary */
    *p++ = 0, *p++ = 3;                     /* three parameters */
    be32(p, (uint32_t)array_len);
    be32(p + 4, 1);  /* dimensions */
    be32(p + 8, 0);  /* no nulls */
    be32(p + 12, 20); /* int8 */
    be32(p + 16, (uint32_t)n);
    be32(p + 20, 1); /* lower bound */
    p += 24;
    const unsigned char *ids = c->ids.p;
    for (int64_t i = 0; i < n; i++) {
        int64_t id;
        memcpy(&id, ids + 8 * i, 8);
        be32(p, 8);
        be64(p + 4, (uint64_t)id);
        p += 12;
    }
    be32(p, 8);
    be64(p + 4, (uint64_t)limit);
    p += 12;
    uint64_t vis;
    memcpy(&vis, &s->visibility, 8);
    be32(p, 8);
    be64(p + 4, vis);
    p += 12;
    *p++ = 0, *p++ = 1, *p++ = 0, *p++ = 1; /* rows in binary */
    *p++ = 'E';
    be32(p, 9);
    p += 4;
    *p++ = 0;
    be32(p, 0);
    p += 4;
    *p++ = 'S';
    be32(p, 4);
    p += 4;
    c->out.len = (size_t)(p - c->out.p);
    c->acking = n;
    c->last = limit == 0;
    c->ids.len = 0;
    c->batch_ids.len = 0;
    c->batch_rows = c->batch_kept = 0;
    c->headers_at = c->headers.len;
    c->flagged_at = c->flagged.len;
    c->kept_at = c->kept;
    c->shorts_at = c->shorts;
    c->state = WAITING;
    return 0;
}

static void
flush_out(conn *c, int64_t now)
{
    while (c->out_done < c->out.len) {
        ssize_t w = send(c->fd, c->out.p + c->out_done, c->out.len - c->out_done, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                fail(c, ST_CONNECTION, strerror(errno));
            }
            return;
        }
        c->out_done += (size_t)w;
        c->last_io_ns = now;
    }
}

/* One DataRow (id, payload, deliveries) of the batch being read. */
static int
data_row(conn *c, const unsigned char *p, size_t len, const spec_t *s)
{
    if (len < 2 + 12 || p[0] != 0 || p[1] != 3 || get32(p + 2) != 8) {
        return -1;
    }
    int64_t id = (int64_t)(((uint64_t)get32(p + 6) << 32) | get32(p + 10));
    size_t at = 14;
    if (len < at + 4) {
        return -1;
    }
    uint32_t plen = get32(p + at);
    at += 4;
    if (plen == 0xFFFFFFFFu || len < at + plen + 8 || get32(p + at + plen) != 4) {
        return -1;
    }
    const unsigned char *payload = p + at;
    uint32_t deliveries = get32(p + at + plen + 4);
    if (buf_i64(&c->batch_ids, id) < 0) {
        return -2;
    }
    c->batch_rows++;
    if ((Py_ssize_t)plen < s->header_bytes) {
        c->shorts++;
        return 0;
    }
    if (buf_put(&c->headers, payload, (size_t)s->header_bytes) < 0 ||
        (deliveries != 1 && buf_i64(&c->flagged, c->kept) < 0)) {
        return -2;
    }
    c->kept++;
    c->batch_kept++;
    return 0;
}

/* The reply's end (ReadyForQuery) of a statement rolled back by a deadlock: whatever
 * of its rows was read is forgotten (none was claimed, none acked) and the same bytes
 * (the same acked ids, the same limit) go again. */
static void
send_again(conn *c, int64_t now)
{
    c->again = 0;
    c->again_n++;
    c->headers.len = c->headers_at;
    c->flagged.len = c->flagged_at;
    c->kept = c->kept_at;
    c->shorts = c->shorts_at;
    c->batch_ids.len = 0;
    c->batch_rows = c->batch_kept = 0;
    c->out_done = 0;
    c->last_io_ns = now;
    flush_out(c, now);
}

/* The reply's end (ReadyForQuery): its batch noted, its ids acked next. */
static int
reply_done(conn *c, int64_t now, int64_t wall_offset_ns, const spec_t *s)
{
    c->acked += c->acking;
    c->acking = 0;
    c->received += c->batch_rows;
    if (c->batch_kept && (buf_i64(&c->recv_ns, now + wall_offset_ns) < 0 ||
                          buf_i64(&c->lens, c->batch_kept) < 0)) {
        return -2;
    }
    if (buf_put(&c->ids, c->batch_ids.p, c->batch_ids.len) < 0) {
        return -2;
    }
    c->state = c->last ? DONE : IDLE;
    if (c->batch_rows) {
        c->backoff_ns = 0;
        c->next_ns = now;
    } else {
        int64_t b = c->backoff_ns ? c->backoff_ns * 2 : FIRST_BACKOFF_NS;
        c->backoff_ns = b < s->poll_cap_ns ? b : s->poll_cap_ns;
        c->next_ns = now + c->backoff_ns;
    }
    return 0;
}

/* Parse what was read: every whole message. */
static void
parse(conn *c, int64_t now, int64_t wall_offset_ns, const spec_t *s)
{
    size_t at = 0;
    while (c->state == WAITING && c->in.len - at >= 5) {
        const unsigned char *m = c->in.p + at;
        uint32_t len = get32(m + 1);
        if (len < 4) {
            fail(c, ST_PROTOCOL, "a malformed message");
            return;
        }
        if (c->in.len - at < 1 + (size_t)len) {
            break;
        }
        const unsigned char *body = m + 5;
        size_t blen = len - 4;
        int r = 0;
        switch (m[0]) {
        case 'D':
            r = data_row(c, body, blen, s);
            break;
        case 'Z':
            if (c->again) {
                send_again(c, now);
            } else {
                r = reply_done(c, now, wall_offset_ns, s);
            }
            break;
        case 'E': {
            /* fields: a type byte then a NUL-terminated string; M is the message, C the
             * SQLSTATE */
            char text[MESSAGE_MAX] = "an error without a message";
            char state[6] = "";
            size_t i = 0;
            while (i < blen && body[i] != 0) {
                char type = (char)body[i++];
                size_t start = i;
                while (i < blen && body[i] != 0) {
                    i++;
                }
                if (type == 'M') {
                    snprintf(text, MESSAGE_MAX, "%.*s", (int)(i - start), body + start);
                } else if (type == 'C') {
                    snprintf(state, sizeof state, "%.*s", (int)(i - start), body + start);
                }
                i++;
            }
            /* a deadlock (40P01) rolled the whole statement back: it goes again at its
             * ReadyForQuery. Seen between the ack-and-claim statements of a receiver's
             * connections (postgres-short, 2 connections per receiver, 2026-11-29). */
            if (strcmp(state, "40P01") == 0 && c->again_n < AGAIN_MAX) {
                c->again = 1;
            } else {
                fail(c, ST_ERROR, text);
            }
            break;
        }
        case '2': /* BindComplete */
        case 'C': /* CommandComplete */
        case 'N': /* NoticeResponse */
        case 'S': /* ParameterStatus */
        case 'A': /* NotificationResponse */
            break;
        default:
            fail(c, ST_PROTOCOL, "an unexpected message");
        }
        if (r == -1) {
            fail(c, ST_PROTOCOL, "a malformed row");
        } else if (r == -2) {
            fail(c, ST_CONNECTION, "out of memory");
        }
        at += 1 + (size_t)len;
    }
    memmove(c->in.p, c->in.p + at, c->in.len - at);
    c->in.len -= at;
}

static void
read_in(conn *c, int64_t now, int64_t wall_offset_ns, const spec_t *s)
{
    for (;;) {
        if (c->in.cap - c->in.len < 65536) {
            size_t cap = c->in.cap ? c->in.cap * 2 : 131072;
            unsigned char *p = realloc(c->in.p, cap);
            if (p == NULL) {
                fail(c, ST_CONNECTION, "out of memory");
                return;
            }
            c->in.p = p;
            c->in.cap = cap;
        }
        ssize_t r = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
        if (r == 0) {
            fail(c, ST_CONNECTION, "the server closed the connection");
            return;
        }
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                fail(c, ST_CONNECTION, strerror(errno));
            }
            return;
        }
        c->in.len += (size_t)r;
        c->last_io_ns = now;
        parse(c, now, wall_offset_ns, s);
        if (c->state != WAITING) {
            return;
        }
    }
}

/* The receive loop (no interpreter lock): see the top of the file. */
static void
drive(conn *cs, Py_ssize_t n, const spec_t *s, int64_t return_ns, int64_t wall_offset_ns,
      int wake_fd)
{
    struct pollfd *pf = calloc((size_t)n + 1, sizeof *pf);
    if (pf == NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            fail(&cs[i], ST_CONNECTION, "out of memory");
        }
        return;
    }
    int ending = 0;
    for (;;) {
        int64_t now = monotonic_ns();
        if (now >= return_ns) {
            ending = 1;
        }
        int64_t wait_ns = ending ? s->timeout_ns : return_ns - now;
        int busy = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            conn *c = &cs[i];
            if (c->state == IDLE) {
                if (ending) {
                    if (c->ids.len == 0) {
                        c->state = DONE; /* nothing to ack */
                    } else if (put_statement(c, s, 0) < 0) {
                        fail(c, ST_CONNECTION, "out of memory");
                    }
                } else if (c->next_ns <= now && put_statement(c, s, s->limit) < 0) {
                    fail(c, ST_CONNECTION, "out of memory");
                } else if (c->state == IDLE && c->next_ns - now < wait_ns) {
                    wait_ns = c->next_ns - now;
                }
                if (c->state == WAITING) {
                    c->last_io_ns = now;
                    flush_out(c, now);
                }
            }
            if (c->state == WAITING && now - c->last_io_ns >= s->timeout_ns) {
                fail(c, ST_TIMEOUT, "no reply within the timeout");
            }
            pf[i].fd = c->fd;
            pf[i].events = 0;
            if (c->state == WAITING) {
                busy = 1;
                pf[i].events = POLLIN | (c->out_done < c->out.len ? POLLOUT : 0);
                int64_t left = c->last_io_ns + s->timeout_ns - now;
                if (left < wait_ns) {
                    wait_ns = left;
                }
            } else if (c->state == IDLE) {
                busy = 1;
            }
            if (pf[i].events == 0) {
                pf[i].fd = -1;
            }
        }
        if (!busy) {
            break;
        }
        pf[n].fd = ending ? -1 : wake_fd;
        pf[n].events = POLLIN;
        pf[n].revents = 0;
        int ms = wait_ns <= 0 ? 0 : (int)((wait_ns + 999999) / 1000000);
        int ready = poll(pf, (nfds_t)n + 1, ms);
        if (ready < 0 && errno != EINTR) {
            for (Py_ssize_t i = 0; i < n; i++) {
                fail(&cs[i], ST_CONNECTION, strerror(errno));
            }
            break;
        }
        now = monotonic_ns();
        if (!ending && pf[n].fd >= 0 && (pf[n].revents & (POLLIN | POLLHUP | POLLERR))) {
            ending = 1;
        }
        for (Py_ssize_t i = 0; i < n && ready > 0; i++) {
            conn *c = &cs[i];
            if (pf[i].fd < 0 || !pf[i].revents) {
                continue;
            }
            if (pf[i].revents & POLLOUT) {
                flush_out(c, now);
            }
            if (c->state == WAITING && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                read_in(c, now, wall_offset_ns, s);
            }
        }
    }
    free(pf);
}

static PyObject *
bytes_of(buf *b)
{
    return PyBytes_FromStringAndSize((const char *)b->p, (Py_ssize_t)b->len);
}

static void
conn_free(conn *c)
{
    free(c->in.p);
    free(c->out.p);
    free(c->ids.p);
    free(c->batch_ids.p);
    free(c->headers.p);
    free(c->recv_ns.p);
    free(c->lens.p);
    free(c->flagged.p);
}

static PyObject *
pg_receive(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *fds;
    spec_t s;
    long long return_ns, wall_offset_ns, limit, poll_cap_ns, timeout_ns;
    int wake_fd;
    if (!PyArg_ParseTuple(args, "O(y#LdLLn)LLi", &fds, &s.name, &s.name_len, &limit,
                          &s.visibility, &poll_cap_ns, &timeout_ns, &s.header_bytes,
                          &return_ns, &wall_offset_ns, &wake_fd)) {
        return NULL;
    }
    s.limit = limit;
    s.poll_cap_ns = poll_cap_ns > 0 ? poll_cap_ns : FIRST_BACKOFF_NS;
    s.timeout_ns = timeout_ns;
    if (limit < 1 || s.header_bytes < 0 || timeout_ns < 1) {
        PyErr_SetString(PyExc_ValueError, "limit and timeout must be positive");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(fds, "fds must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    conn *cs = calloc(n ? (size_t)n : 1, sizeof *cs);
    if (cs == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        cs[i].fd = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        cs[i].state = IDLE;
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        free(cs);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS;
    drive(cs, n, &s, return_ns, wall_offset_ns, wake_fd);
    Py_END_ALLOW_THREADS;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        conn *c = &cs[i];
        PyObject *item = Py_BuildValue(
            "(NNNNLLLizL)", bytes_of(&c->headers), bytes_of(&c->recv_ns), bytes_of(&c->lens),
            bytes_of(&c->flagged), (long long)c->received, (long long)c->shorts,
            (long long)c->acked, c->status, c->status ? c->message : NULL,
            (long long)c->again_n);
        if (item == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, item);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        conn_free(&cs[i]);
    }
    free(cs);
    return out;
}

static PyMethodDef methods[] = {
    {"pg_receive", pg_receive, METH_VARARGS, "PostgreSQL receivers driven from one thread."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mqlab._recvpath", "mqlab's compiled receive path.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__recvpath(void)
{
    return PyModule_Create(&module);
}

/* mqlab's compiled send path: one call per batch writes the batch's message headers
 * into its wire bytes, sends them, and reads the replies, without the interpreter lock.
 *
 * A Python sender spends most of its CPU per batch on interpreter work done under the
 * lock (issue 13: bench/clients.py); with several sender threads the lock's hand-offs
 * cost more again. Here a batch costs one call: the Python side only keeps the schedule
 * and the records. The wire bytes come from mqlab.workload.envelope.Framed (each
 * message's frame is the same but for its header); the header layout is the envelope's
 * (little endian: magic u16, version u16, sender u32, seq u64, stamp i64).
 *
 *   redis_batch(fd, template, spec, n, first_seq, sent_ns) -> (status, integer, message)
 *
 * spec (made once per sender and stream key, see mqlab.drivers.redis): little endian
 * i64 prefix_len, i64 frame, u32 magic, u32 version, u32 sender, u32 commands in the
 * trailer (0 or 1), then the trailer's bytes (the WAIT command, or nothing).
 *
 * writes the headers of messages first_seq .. first_seq + n - 1 at prefix_len + i *
 * frame, sends template[:n * frame] then the trailer on the blocking socket fd (its
 * SO_SNDTIMEO / SO_RCVTIMEO bound each call), then reads n + trailer commands' RESP
 * replies. status 0: all read, none an error; integer: the last integer reply (WAIT's
 * count) or -1. 1: all read, message: the first error reply. 2: a timeout. 3: the
 * connection failed or closed (message: why). 4: a reply mqlab does not expect (an
 * aggregate or a malformed one): the connection is out of step.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

enum { ST_OK = 0, ST_REPLY_ERROR = 1, ST_TIMEOUT = 2, ST_CONNECTION = 3, ST_PROTOCOL = 4 };

#define INBUF 16384
#define MESSAGE_MAX 512

static void
put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

typedef struct {
    int status;
    long long integer;
    int err_no;
    char message[MESSAGE_MAX];
} outcome;

static int
failed_io(outcome *o, int err)
{
    if (err == EAGAIN || err == EWOULDBLOCK) {
        o->status = ST_TIMEOUT;
    } else {
        o->status = ST_CONNECTION;
        o->err_no = err;
    }
    return -1;
}

static int
send_all(int fd, const char *a, size_t alen, const char *b, size_t blen, outcome *o)
{
    struct iovec iov[2];
    while (alen + blen > 0) {
        int k = 0;
        if (alen) {
            iov[k].iov_base = (void *)a;
            iov[k++].iov_len = alen;
        }
        if (blen) {
            iov[k].iov_base = (void *)b;
            iov[k++].iov_len = blen;
        }
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = k;
        ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) {
                continue;
            }
            return failed_io(o, errno);
        }
        size_t s = (size_t)sent;
        size_t from_a = s < alen ? s : alen;
        a += from_a;
        alen -= from_a;
        s -= from_a;
        b += s;
        blen -= s;
    }
    return 0;
}

/* Reads ``replies`` replies; 0 when all were read (o->status says whether one was an
 * error), -1 on a failure (o->status says which). */
static int
read_replies(int fd, int replies, outcome *o)
{
    char buf[INBUF];
    size_t have = 0, pos = 0;
    long long skip = 0; /* bulk payload bytes (and their CRLF) still to pass over */
    int done = 0;
    o->integer = -1;
    while (done < replies) {
        if (skip > 0 && have > pos) { /* a bulk reply's payload: passed over */
            size_t take = (size_t)skip < have - pos ? (size_t)skip : have - pos;
            pos += take;
            skip -= take;
            if (skip == 0) {
                done++;
            }
            continue;
        }
        /* one reply line, whole, from buf[pos..have) */
        char *line = buf + pos;
        char *end = skip == 0 && have > pos ? memchr(line, '\n', have - pos) : NULL;
        if (end == NULL) { /* need more bytes: keep the partial line, read */
            if (pos > 0) {
                memmove(buf, buf + pos, have - pos);
                have -= pos;
                pos = 0;
            }
            if (have == INBUF) {
                o->status = ST_PROTOCOL;
                snprintf(o->message, MESSAGE_MAX, "a reply line longer than %d bytes", INBUF);
                return -1;
            }
            ssize_t got = recv(fd, buf + have, INBUF - have, 0);
            if (got < 0) {
                if (errno == EINTR) {
                    continue;
                }
                return failed_io(o, errno);
            }
            if (got == 0) {
                o->status = ST_CONNECTION;
                o->err_no = 0;
                return -1;
            }
            have += (size_t)got;
            continue;
        }
        size_t len = (size_t)(end - line) + 1; /* through the LF */
        if (len < 3 || line[len - 2] != '\r') {
            o->status = ST_PROTOCOL;
            snprintf(o->message, MESSAGE_MAX, "a reply line without CRLF");
            return -1;
        }
        size_t body = len - 3; /* between the type byte and the CRLF */
        pos += len;
        switch (line[0]) {
        case '+':
            done++;
            break;
        case '-':
            if (o->status != ST_REPLY_ERROR) {
                o->status = ST_REPLY_ERROR;
                size_t m = body < MESSAGE_MAX - 1 ? body : MESSAGE_MAX - 1;
                memcpy(o->message, line + 1, m);
                o->message[m] = '\0';
            }
            done++;
            break;
        case ':':
        case '$': {
            char digits[32];
            if (body == 0 || body >= sizeof digits) {
                o->status = ST_PROTOCOL;
                snprintf(o->message, MESSAGE_MAX, "a malformed '%c' reply", line[0]);
                return -1;
            }
            memcpy(digits, line + 1, body);
            digits[body] = '\0';
            char *stop = NULL;
            errno = 0;
            long long v = strtoll(digits, &stop, 10);
            if (errno != 0 || stop == NULL || *stop != '\0') {
                o->status = ST_PROTOCOL;
                snprintf(o->message, MESSAGE_MAX, "a malformed '%c' reply", line[0]);
                return -1;
            }
            if (line[0] == ':') {
                o->integer = v;
                done++;
            } else if (v < 0) { /* nil */
                done++;
            } else {
                skip = v + 2; /* the payload and its CRLF */
            }
            break;
        }
        default:
            o->status = ST_PROTOCOL;
            snprintf(o->message, MESSAGE_MAX, "an unexpected reply of type '%c'", line[0]);
            return -1;
        }
    }
    if (pos != have) {
        o->status = ST_PROTOCOL;
        snprintf(o->message, MESSAGE_MAX, "%zu bytes after the last reply", have - pos);
        return -1;
    }
    return 0;
}

#define SPEC_HEAD 32

static uint64_t
get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static PyObject *
redis_batch(PyObject *self, PyObject *args)
{
    (void)self;
    int fd, n;
    Py_buffer tmpl;
    const char *spec;
    Py_ssize_t spec_len;
    unsigned long long first_seq;
    long long sent_ns;
    if (!PyArg_ParseTuple(args, "iw*y#iKL", &fd, &tmpl, &spec, &spec_len, &n, &first_seq,
                          &sent_ns)) {
        return NULL;
    }
    const unsigned char *sp = (const unsigned char *)spec;
    long long prefix_len = spec_len >= SPEC_HEAD ? (long long)get_le(sp, 8) : -1;
    long long frame = spec_len >= SPEC_HEAD ? (long long)get_le(sp + 8, 8) : -1;
    uint64_t magic = spec_len >= SPEC_HEAD ? get_le(sp + 16, 4) : 0;
    uint64_t version = spec_len >= SPEC_HEAD ? get_le(sp + 20, 4) : 0;
    uint64_t sender = spec_len >= SPEC_HEAD ? get_le(sp + 24, 4) : 0;
    int extra = spec_len >= SPEC_HEAD ? (int)get_le(sp + 28, 4) : 0;
    const char *trailer = spec + SPEC_HEAD;
    size_t trailer_len = spec_len >= SPEC_HEAD ? (size_t)(spec_len - SPEC_HEAD) : 0;
    if (spec_len < SPEC_HEAD || n < 0 || prefix_len < 0 || frame < prefix_len + 24 ||
        extra < 0 || extra > 1 || (long long)n * frame > (long long)tmpl.len) {
        PyBuffer_Release(&tmpl);
        PyErr_SetString(PyExc_ValueError, "redis_batch: the batch does not fit its template");
        return NULL;
    }
    int replies = n + extra;
    outcome o;
    memset(&o, 0, sizeof o);
    unsigned char *base = (unsigned char *)tmpl.buf;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < n; i++) {
        unsigned char *h = base + prefix_len + (Py_ssize_t)i * frame;
        put_le(h, magic, 2);
        put_le(h + 2, version, 2);
        put_le(h + 4, sender, 4);
        put_le(h + 8, first_seq + (unsigned long long)i, 8);
        put_le(h + 16, (uint64_t)sent_ns, 8);
    }
    if (send_all(fd, (const char *)base, (size_t)n * (size_t)frame, trailer, trailer_len, &o) ==
        0) {
        read_replies(fd, replies, &o);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&tmpl);
    if (o.status == ST_CONNECTION && o.message[0] == '\0') {
        if (o.err_no) {
            snprintf(o.message, MESSAGE_MAX, "%s", strerror(o.err_no));
        } else {
            snprintf(o.message, MESSAGE_MAX, "connection closed by the server");
        }
    }
    if (o.status == ST_OK || o.status == ST_TIMEOUT) {
        return Py_BuildValue("(iLO)", o.status, o.integer, Py_None);
    }
    return Py_BuildValue("(iLs)", o.status, o.integer, o.message);
}

static PyMethodDef methods[] = {
    {"redis_batch", redis_batch, METH_VARARGS,
     "Write a batch's headers into its RESP template, send it, read its replies."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mqlab._sendpath",
    "mqlab's compiled send path (see the source's opening comment).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__sendpath(void)
{
    return PyModule_Create(&module);
}

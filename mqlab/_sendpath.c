/* mqlab's compiled send path: the workers' Redis, PostgreSQL, NATS and Pulsar batches written,
 * sent and their replies read without the interpreter lock.
 *
 * A Python sender spends most of its CPU per batch on interpreter work done under the
 * lock (issue 13: bench/clients.py); with several sender threads the lock's hand-offs
 * and the thread switches they cause cost more again. The header layout is the
 * envelope's (little endian: magic u16, version u16, sender u32, seq u64, stamp i64).
 *
 *   redis_batch(fd, template, spec, n, first_seq, sent_ns) -> (status, integer, message)
 *
 * One batch (a fixed-rate sender's): spec (made once per sender and stream key, see
 * mqlab.brokers.redis.driver) is little endian i64 prefix_len, i64 frame, u32 magic, u32
 * version, u32 sender, u32 commands in the trailer (0 or 1), then the trailer's bytes
 * (the WAIT command, or nothing). Writes the headers of messages first_seq .. first_seq
 * + n - 1 at prefix_len + i * frame of template (mqlab.envelope.Framed's wire
 * bytes), sends template[:n * frame] then the trailer on the blocking socket fd (its
 * SO_SNDTIMEO / SO_RCVTIMEO bound each call), then reads n + trailer commands' RESP
 * replies.
 *
 *   Lanes(proto, count, timeout_ns)          proto REDIS, PG, NATS or PULSAR
 *   .assign(j, fd, run_spec, sizes, first_seq, key, records, first_start_ns, conn_gen
 *           [, slots])
 *   .run(return_ns, stop_ns, wall_offset_ns, wake_fd) -> [(done, in_flight, outcome), ...]
 *   .release(j)
 *
 * Closed-loop senders, each on its own connection, all driven from the calling thread
 * (as redis-benchmark drives its connections), each at its own pace: a lane sends its
 * run's batches (sizes, an array of i64 batch sizes) back to back, the next as soon as
 * its own last one's replies are in; replies of all lanes are read as they come (poll).
 * run() keeps the thread out of the interpreter until return_ns (CLOCK_MONOTONIC, as
 * Python's time.monotonic_ns), or until a lane's run ended (its sizes used up, or a
 * failure), or wake_fd (-1: none) became readable; no batch starts at or after stop_ns,
 * and once none is in flight past stop_ns it returns. Batches in flight at a return
 * stay in flight: the next run() reads their replies, so no lane waits for another and
 * the caller records what was confirmed at every return. Each batch is stamped with its
 * own start, taken as its bytes are written (the run's first batch: first_start_ns when
 * > 0, e.g. when its sender had to connect first; + wall_offset_ns: wall-clock ns); its
 * start and end go to records[2i], records[2i + 1] (records: a writable i64 buffer). A
 * lane with no bytes moved for timeout_ns times out. done: the run's batches that
 * succeeded; in_flight: how many batches are in flight from batch done on; outcome None,
 * or (status, integer, message) of a failure: batch done failed (records[2 * done + 1]
 * is when) and the lane stays stopped until assigned again; in_flight is then how many
 * batches were in flight behind it: they failed too (each with its start and the same
 * end in records), their replies unread, so that connection must not be used again.
 *
 * Fixed-rate senders (issue 28): slots (an i64 per batch, CLOCK_MONOTONIC; None: closed
 * loop) is when each batch is due. A batch goes at its slot, never before it (the loop's
 * poll wakes at the earliest pending slot); no batch whose slot is at or after stop_ns
 * goes. A Redis or PostgreSQL lane keeps up to LANE_WINDOW batches in flight on its
 * connection (pipelined: both answer a connection's requests in order, so batches are
 * confirmed in order), so a batch whose slot comes while its lane's earlier batches wait
 * for their replies still goes at its slot; only when the window is full, or the last
 * batch's bytes are not all written yet, does it go later, as soon as there is room. A
 * NATS or Pulsar lane keeps one in flight (its reader follows one batch's replies). A
 * batch's header is stamped with its slot (the intended start: a late batch carries its queueing
 * delay), and records[2i] is when its bytes were written, so the caller sees how late
 * it went. Closed-loop lanes keep one batch in flight.
 *
 * Redis: run_spec is (prefixes, pads, pool_n, suffix, trailer, magic, version, sender,
 * min_acks): batch i goes to stream key prefixes[(key + i) % len(prefixes)] (each an
 * XADD up to its message's bulk length), its messages padded with pads[(seq % pool_n) *
 * pad_len ...] as envelope.encode_batch pads them, each followed by suffix, the batch by
 * trailer (the WAIT, or nothing).
 *
 * PostgreSQL: each batch runs the INSERT of its size in the extended query protocol on
 * the connection's socket: Parse (the first batch of that size on this connection, whose
 * generation is conn_gen: a new generation has nothing prepared), Bind (every message a
 * binary parameter), Execute, Sync; it is done at ReadyForQuery, once its implicit
 * transaction committed (with the profile's synchronous_commit, confirmed by the
 * standbys). run_spec is (statement name before the batch size, the INSERT's SQL up to
 * its rows, pads, pool_n, magic, version, sender); key is unused. An ErrorResponse is
 * status 1 (message: its text and SQLSTATE); timeout_ns is the commit timeout. libpq's
 * own state is left idle: the lane reads everything through ReadyForQuery.
 *
 * NATS JetStream: each batch is a PUB per message with a reply subject naming the batch
 * and the message, done once every PubAck is in (see "NATS JetStream (PROTO_NATS)"
 * below); run_spec is (subject, inbox, pads, pool_n, magic, version, sender,
 * resend_wait_ns); key is unused; timeout_ns is the publish timeout.
 *
 * Apache Pulsar: each batch is a SEND frame per message (with its checksum) from the
 * connection's producer, done once every message's SEND_RECEIPT is in, each persisted by
 * the broker (see "Apache Pulsar (PROTO_PULSAR)" below and mqlab/_pulsarwire.h);
 * run_spec is (producer_name, producer_id, pads, pool_n, magic, version, sender); key is
 * unused; timeout_ns is the send timeout. A SEND_ERROR is status 1, CLOSE_PRODUCER
 * status 3: either way the connection is not used again.
 *
 * status 0: all read, none an error; integer: the last integer reply (WAIT's count) or
 * -1. 1: all read, message: the first error reply. 2: a timeout. 3: the connection
 * failed or closed (message: why). 4: a reply mqlab does not expect (an aggregate or a
 * malformed one): the connection is out of step. 5 (Redis lanes only): WAIT's count
 * (integer) was below min_acks. 6 (NATS lanes only): no JetStream server took integer
 * messages of the batch within timeout_ns (no responders).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "_pulsarwire.h"

enum {
    ST_OK = 0,
    ST_REPLY_ERROR = 1,
    ST_TIMEOUT = 2,
    ST_CONNECTION = 3,
    ST_PROTOCOL = 4,
    ST_WAIT_SHORT = 5,
    ST_NO_RESPONDERS = 6
};

#define INBUF 16384
#define MESSAGE_MAX 512
#define LANE_WINDOW 64 /* a fixed-rate Redis or PostgreSQL lane's batches in flight, at most */

static void
put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static void
put_header(unsigned char *h, uint64_t magic, uint64_t version, uint64_t sender, uint64_t seq,
           int64_t sent_ns)
{
    put_le(h, magic, 2);
    put_le(h + 2, version, 2);
    put_le(h + 4, sender, 4);
    put_le(h + 8, seq, 8);
    put_le(h + 16, (uint64_t)sent_ns, 8);
}

static int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

/* A connection's reply reader: bytes received, not yet parsed, in buf[pos..have). */
typedef struct {
    char buf[INBUF];
    size_t have, pos;
    long long skip; /* bulk payload bytes (and their CRLF) still to pass over */
    int done, want; /* replies read, replies expected */
    int more;       /* a lane's later batches are in flight: bytes after these replies are theirs */
} reader;

static void
reader_expect(reader *r, int replies, outcome *o)
{
    r->have = r->pos = 0;
    r->skip = 0;
    r->done = 0;
    r->want = replies;
    r->more = 0;
    o->integer = -1;
}

static int
protocol_error(outcome *o, const char *what, char type)
{
    o->status = ST_PROTOCOL;
    if (type) {
        snprintf(o->message, MESSAGE_MAX, what, type);
    } else {
        snprintf(o->message, MESSAGE_MAX, "%s", what);
    }
    return -1;
}

/* Parses the whole replies in the buffer: 1 when all expected were read (o->status says
 * whether one was an error), 0 when more bytes are needed, -1 on a protocol failure. */
static int
reader_parse(reader *r, outcome *o)
{
    while (r->done < r->want) {
        if (r->skip > 0) { /* a bulk reply's payload: passed over */
            if (r->have == r->pos) {
                return 0;
            }
            size_t avail = r->have - r->pos;
            size_t take = (size_t)r->skip < avail ? (size_t)r->skip : avail;
            r->pos += take;
            r->skip -= (long long)take;
            if (r->skip == 0) {
                r->done++;
            }
            continue;
        }
        /* one reply line, whole, from buf[pos..have) */
        char *line = r->buf + r->pos;
        char *end = r->have > r->pos ? memchr(line, '\n', r->have - r->pos) : NULL;
        if (end == NULL) {
            return 0;
        }
        size_t len = (size_t)(end - line) + 1; /* through the LF */
        if (len < 3 || line[len - 2] != '\r') {
            return protocol_error(o, "a reply line without CRLF", 0);
        }
        size_t body = len - 3; /* between the type byte and the CRLF */
        r->pos += len;
        switch (line[0]) {
        case '+':
            r->done++;
            break;
        case '-':
            if (o->status != ST_REPLY_ERROR) {
                o->status = ST_REPLY_ERROR;
                size_t m = body < MESSAGE_MAX - 1 ? body : MESSAGE_MAX - 1;
                memcpy(o->message, line + 1, m);
                o->message[m] = '\0';
            }
            r->done++;
            break;
        case ':':
        case '$': {
            char digits[32];
            if (body == 0 || body >= sizeof digits) {
                return protocol_error(o, "a malformed '%c' reply", line[0]);
            }
            memcpy(digits, line + 1, body);
            digits[body] = '\0';
            char *stop = NULL;
            errno = 0;
            long long v = strtoll(digits, &stop, 10);
            if (errno != 0 || stop == NULL || *stop != '\0') {
                return protocol_error(o, "a malformed '%c' reply", line[0]);
            }
            if (line[0] == ':') {
                o->integer = v;
                r->done++;
            } else if (v < 0) { /* nil */
                r->done++;
            } else {
                r->skip = v + 2; /* the payload and its CRLF */
            }
            break;
        }
        default:
            return protocol_error(o, "an unexpected reply of type '%c'", line[0]);
        }
    }
    if (r->pos != r->have && !r->more) {
        o->status = ST_PROTOCOL;
        snprintf(o->message, MESSAGE_MAX, "%zu bytes after the last reply", r->have - r->pos);
        return -1;
    }
    return 1;
}

/* Makes room at the buffer's end for more bytes (the unparsed ones moved to its start);
 * -1 when one reply line fills it all. */
static int
reader_room(reader *r, outcome *o)
{
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->have - r->pos);
        r->have -= r->pos;
        r->pos = 0;
    }
    if (r->have == INBUF) {
        o->status = ST_PROTOCOL;
        snprintf(o->message, MESSAGE_MAX, "a reply line longer than %d bytes", INBUF);
        return -1;
    }
    return 0;
}

/* Reads ``replies`` replies on the blocking socket; 0 when all were read (o->status says
 * whether one was an error), -1 on a failure (o->status says which). */
static int
read_replies(int fd, int replies, outcome *o)
{
    reader r;
    reader_expect(&r, replies, o);
    for (;;) {
        int parsed = reader_parse(&r, o);
        if (parsed != 0) {
            return parsed > 0 ? 0 : -1;
        }
        if (reader_room(&r, o) < 0) {
            return -1;
        }
        ssize_t got = recv(fd, r.buf + r.have, INBUF - r.have, 0);
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
        r.have += (size_t)got;
    }
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

/* (status, integer, message) of an outcome; message None on success and timeout */
static PyObject *
outcome_value(outcome *o)
{
    if (o->status == ST_CONNECTION && o->message[0] == '\0') {
        if (o->err_no) {
            snprintf(o->message, MESSAGE_MAX, "%s", strerror(o->err_no));
        } else {
            snprintf(o->message, MESSAGE_MAX, "connection closed by the server");
        }
    }
    if (o->status == ST_OK || o->status == ST_TIMEOUT || o->status == ST_WAIT_SHORT) {
        return Py_BuildValue("(iLO)", o->status, o->integer, Py_None);
    }
    return Py_BuildValue("(iLs)", o->status, o->integer, o->message);
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
        put_header(base + prefix_len + (Py_ssize_t)i * frame, magic, version, sender,
                   first_seq + (unsigned long long)i, sent_ns);
    }
    if (send_all(fd, (const char *)base, (size_t)n * (size_t)frame, trailer, trailer_len, &o) ==
        0) {
        read_replies(fd, replies, &o);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&tmpl);
    return outcome_value(&o);
}

/* a lane's fixed arguments (see the opening comment), parsed under the lock */
enum { PROTO_REDIS = 0, PROTO_PG = 1, PROTO_NATS = 2, PROTO_PULSAR = 3 };

typedef struct {
    int proto;
    const char *stmt; /* PostgreSQL: the INSERT's statement name, before its batch size */
    size_t stmt_len;
    const char *sql; /* PostgreSQL: the INSERT up to its rows (Parse of a new size) */
    size_t sql_len;
    const char *subject; /* NATS: the stream's subject */
    size_t subject_len;
    const char *inbox; /* NATS: the lane's reply prefix (its SUB is inbox.>) */
    size_t inbox_len;
    long long resend_wait_ns; /* NATS: before publishing again what no server took */
    const char *name; /* Pulsar: the producer's name (every message's metadata names it) */
    size_t name_len;
    unsigned long long producer_id; /* Pulsar: the producer's id on its connection */
    Py_ssize_t nkeys;
    const char **prefixes;
    size_t *prefix_lens;
    const char *pads;
    size_t pad_len;
    unsigned long long pool_n;
    const char *suffix;
    size_t suffix_len;
    const char *trailer;
    size_t trailer_len;
    unsigned long long magic, version, sender;
    long long min_acks;
} run_spec;

static int
parse_run_spec(PyObject *tuple, run_spec *rs)
{
    PyObject *prefixes;
    const char *pads, *suffix, *trailer;
    Py_ssize_t pads_len, suffix_len, trailer_len;
    memset(rs, 0, sizeof *rs);
    if (!PyArg_ParseTuple(tuple, "O!y#Ky#y#KKKL;redis lanes: run_spec", &PyTuple_Type, &prefixes,
                          &pads, &pads_len, &rs->pool_n, &suffix, &suffix_len, &trailer,
                          &trailer_len, &rs->magic, &rs->version, &rs->sender,
                          &rs->min_acks)) {
        return -1;
    }
    rs->nkeys = PyTuple_GET_SIZE(prefixes);
    if (rs->nkeys < 1 || rs->pool_n < 1 || (unsigned long long)pads_len % rs->pool_n != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "redis lanes: no stream key, or pads not pool_n paddings alike");
        return -1;
    }
    rs->prefixes = PyMem_Calloc((size_t)rs->nkeys, sizeof *rs->prefixes);
    rs->prefix_lens = PyMem_Calloc((size_t)rs->nkeys, sizeof *rs->prefix_lens);
    if (rs->prefixes == NULL || rs->prefix_lens == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < rs->nkeys; k++) {
        PyObject *p = PyTuple_GET_ITEM(prefixes, k);
        if (!PyBytes_Check(p)) {
            PyErr_SetString(PyExc_TypeError, "redis lanes: a key's prefix is not bytes");
            return -1;
        }
        rs->prefixes[k] = PyBytes_AS_STRING(p); /* the lane keeps the spec tuple */
        rs->prefix_lens[k] = (size_t)PyBytes_GET_SIZE(p);
    }
    rs->pads = pads;
    rs->pad_len = (size_t)((unsigned long long)pads_len / rs->pool_n);
    rs->suffix = suffix;
    rs->suffix_len = (size_t)suffix_len;
    rs->trailer = trailer;
    rs->trailer_len = (size_t)trailer_len;
    return 0;
}

static int
parse_pg_spec(PyObject *tuple, run_spec *rs)
{
    const char *pads, *stmt, *sqlp;
    Py_ssize_t pads_len, stmt_len, sql_len;
    memset(rs, 0, sizeof *rs);
    rs->proto = PROTO_PG;
    if (!PyArg_ParseTuple(tuple, "y#y#y#KKKK;pg lanes: run_spec", &stmt, &stmt_len, &sqlp,
                          &sql_len, &pads, &pads_len, &rs->pool_n, &rs->magic, &rs->version,
                          &rs->sender)) {
        return -1;
    }
    if (rs->pool_n < 1 || (unsigned long long)pads_len % rs->pool_n != 0 || stmt_len > 40 ||
        memchr(stmt, '\0', (size_t)stmt_len) != NULL ||
        memchr(sqlp, '\0', (size_t)sql_len) != NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "pg lanes: pads not pool_n paddings alike, or a statement name too long");
        return -1;
    }
    rs->stmt = stmt;
    rs->stmt_len = (size_t)stmt_len;
    rs->sql = sqlp;
    rs->sql_len = (size_t)sql_len;
    rs->pads = pads;
    rs->pad_len = (size_t)((unsigned long long)pads_len / rs->pool_n);
    return 0;
}

/* NATS: (subject, inbox, pads, pool_n, magic, version, sender, resend_wait_ns) */
static int
parse_nats_spec(PyObject *tuple, run_spec *rs)
{
    const char *pads, *subject, *inbox;
    Py_ssize_t pads_len, subject_len, inbox_len;
    memset(rs, 0, sizeof *rs);
    rs->proto = PROTO_NATS;
    if (!PyArg_ParseTuple(tuple, "y#y#y#KKKKL;nats lanes: run_spec", &subject, &subject_len,
                          &inbox, &inbox_len, &pads, &pads_len, &rs->pool_n, &rs->magic,
                          &rs->version, &rs->sender, &rs->resend_wait_ns)) {
        return -1;
    }
    if (rs->pool_n < 1 || (unsigned long long)pads_len % rs->pool_n != 0 || subject_len < 1 ||
        subject_len > 256 || inbox_len < 1 || inbox_len > 128 || rs->resend_wait_ns < 0 ||
        memchr(subject, ' ', (size_t)subject_len) != NULL ||
        memchr(inbox, ' ', (size_t)inbox_len) != NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "nats lanes: pads not pool_n paddings alike, or a subject or inbox "
                        "empty, too long or with a space");
        return -1;
    }
    rs->subject = subject;
    rs->subject_len = (size_t)subject_len;
    rs->inbox = inbox;
    rs->inbox_len = (size_t)inbox_len;
    rs->pads = pads;
    rs->pad_len = (size_t)((unsigned long long)pads_len / rs->pool_n);
    return 0;
}

/* Pulsar: (producer_name, producer_id, pads, pool_n, magic, version, sender) */
static int
parse_pulsar_spec(PyObject *tuple, run_spec *rs)
{
    const char *pads, *name;
    Py_ssize_t pads_len, name_len;
    memset(rs, 0, sizeof *rs);
    rs->proto = PROTO_PULSAR;
    if (!PyArg_ParseTuple(tuple, "y#Ky#KKKK;pulsar lanes: run_spec", &name, &name_len,
                          &rs->producer_id, &pads, &pads_len, &rs->pool_n, &rs->magic,
                          &rs->version, &rs->sender)) {
        return -1;
    }
    if (rs->pool_n < 1 || (unsigned long long)pads_len % rs->pool_n != 0 || name_len < 1 ||
        name_len > PW_NAME_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "pulsar lanes: pads not pool_n paddings alike, or a producer name "
                        "empty or longer than 127 bytes");
        return -1;
    }
    rs->name = name;
    rs->name_len = (size_t)name_len;
    rs->pads = pads;
    rs->pad_len = (size_t)((unsigned long long)pads_len / rs->pool_n);
    return 0;
}

static void
free_run_spec(run_spec *rs)
{
    PyMem_Free(rs->prefixes);
    PyMem_Free(rs->prefix_lens);
    rs->prefixes = NULL;
    rs->prefix_lens = NULL;
}

#define PG_SIZE_MAX 32767 /* Bind's parameter count is an int16 */

/* One sender's connection in a Lanes set: its run's arguments and where its batch is. */
typedef struct {
    int assigned; /* a run was given and its buffers are held */
    int fd;
    PyObject *spec_obj; /* the run_spec tuple, kept: rs points into its bytes */
    run_spec rs;
    Py_buffer sizes_buf, records_buf;
    const int64_t *sizes;
    Py_ssize_t batches;
    int64_t *records;
    unsigned long long seq, key;
    int64_t first_start; /* > 0: the run's first batch started then (a reconnect's start) */
    Py_buffer slots_buf; /* fixed rate: each batch's slot (slots != NULL) */
    const int64_t *slots;
    long long conn_gen; /* the connection's generation: a new one has nothing prepared */
    unsigned char *prepared; /* PostgreSQL: bit n set once a batch sent the INSERT of n
                              * rows' Parse (a failure drops the connection: a new conn_gen) */
    char *wire; /* the last started batch's bytes, wlen of them, woff sent; cap allocated */
    size_t wlen, woff, cap;
    Py_ssize_t i, ok;   /* the first batch in flight (or the next), the batches that succeeded */
    Py_ssize_t started; /* batches of the run started: i .. started - 1 are in flight */
    unsigned long long seq_next; /* the first seq of batch ``started`` */
    int active;         /* batches in flight: started - i */
    int window;         /* batches in flight at most (LANE_WINDOW at a fixed rate, see below) */
    int next;           /* its next batch may start (cleared once its sizes or time ran out) */
    int failed;         /* stopped at batch ok: o says why */
    int behind;         /* at a failure: the batches that were in flight behind batch ok */
    int64_t deadline; /* no bytes moved by then: a timeout */
    reader r;
    outcome o;
    /* NATS: each batch's replies come to inbox.<batch_no>.<index>; got[k]: message k's
     * reply (0 none yet, 1 a PubAck, 2 no responders) */
    uint32_t batch_no;
    unsigned char *got;
    size_t got_cap, frame, frames_at, batch_end; /* frames at wire[frames_at ..batch_end) */
    Py_ssize_t replies, no_resp;
    int settled;       /* the batch's outcome is known: later replies are ignored */
    int pongs;         /* PONGs owed to the server, not yet in the wire */
    int64_t resend_at; /* > 0: what no server took goes again then */
    int64_t stamp;     /* the batch's header stamp (wall-clock ns) */
    /* Pulsar: the connection's next sequence id, and the batch in flight's first */
    unsigned long long pseq, pfirst;
} lane;

typedef struct {
    PyObject_HEAD
    int proto;
    int64_t timeout_ns;
    Py_ssize_t n;
    lane *lanes;
    struct pollfd *pfds;
    lane **polled;
    int busy; /* inside run(): no assign */
} LanesObject;

static void
lane_release(lane *L)
{
    if (!L->assigned) {
        return;
    }
    PyBuffer_Release(&L->sizes_buf);
    PyBuffer_Release(&L->records_buf);
    if (L->slots != NULL) {
        PyBuffer_Release(&L->slots_buf);
        L->slots = NULL;
    }
    free_run_spec(&L->rs);
    Py_CLEAR(L->spec_obj);
    L->assigned = 0;
    L->next = 0;
}

/* the lane failed at ``now``: its first batch in flight (or about to start) is batch ok;
 * those in flight behind it end with it */
static void
lane_fail(lane *L, int64_t now)
{
    if (!L->active) {
        L->records[2 * L->i] = now;
    }
    for (Py_ssize_t k = L->i; k < L->started || k == L->i; k++) {
        L->records[2 * k + 1] = now;
    }
    L->behind = L->active > 1 ? L->active - 1 : 0;
    L->active = 0;
    L->next = 0;
    L->failed = 1;
}

/* After a send or recv that returned < 0 (errno) or, for recv, 0 (err 0: closed): 1 to
 * try again (interrupted), 0 when the socket would block, -1 when the lane failed. */
static int
lane_io(lane *L, int64_t now, int err)
{
    if (err == EINTR) {
        return 1;
    }
    if (err == EAGAIN || err == EWOULDBLOCK) {
        return 0;
    }
    L->o.status = ST_CONNECTION;
    L->o.err_no = err;
    lane_fail(L, now);
    return -1;
}

static void
lane_write(lane *L, int64_t now, int64_t timeout_ns)
{
    while (L->woff < L->wlen) {
        ssize_t sent = send(L->fd, L->wire + L->woff, L->wlen - L->woff, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent < 0) {
            if (lane_io(L, now, errno) > 0) {
                continue;
            }
            return;
        }
        L->woff += (size_t)sent;
        L->deadline = now + timeout_ns;
    }
}

static unsigned char *
put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        *p++ = (unsigned char)(v >> (8 * i));
    }
    return p;
}

/* Parse of the INSERT of n rows (the run_spec's SQL, then "($1), ($2), ..."), named as
 * its statement; its length. */
static size_t
pg_parse_message(char *wire, const run_spec *rs, size_t n)
{
    unsigned char *w = (unsigned char *)wire;
    *w++ = 'P';
    unsigned char *len_at = w;
    w += 4;
    int name_len = sprintf((char *)w, "%.*s%zu", (int)rs->stmt_len, rs->stmt, n);
    w += name_len + 1;
    memcpy(w, rs->sql, rs->sql_len);
    w += rs->sql_len;
    for (size_t j = 1; j <= n; j++) {
        w += sprintf((char *)w, j == 1 ? "($%zu)" : ", ($%zu)", j);
    }
    *w++ = '\0';
    w = put_be(w, 0, 2); /* parameter types: the server's (the column's) */
    put_be(len_at, (uint64_t)(w - len_at), 4);
    return (size_t)((char *)w - wire);
}

/* A batch's INSERT in PostgreSQL's extended query protocol: Bind (the statement of n rows,
 * every parameter a binary message), Execute, Sync at w; its length. The reply ends with
 * ReadyForQuery once the implicit transaction committed (and, with the profile's
 * synchronous_commit, was confirmed by the standbys). */
static size_t
pg_batch(char *wire, const run_spec *rs, size_t n, unsigned long long seq, int64_t sent_ns)
{
    unsigned char *w = (unsigned char *)wire;
    size_t message = 24 + rs->pad_len;
    char name[64];
    int name_len = snprintf(name, sizeof name, "%.*s%zu", (int)rs->stmt_len, rs->stmt, n);
    *w++ = 'B';
    unsigned char *len_at = w;
    w += 4;
    *w++ = '\0'; /* the unnamed portal */
    memcpy(w, name, (size_t)name_len + 1);
    w += name_len + 1;
    w = put_be(w, 1, 2); /* one format code, for all parameters: binary */
    w = put_be(w, 1, 2);
    w = put_be(w, n, 2);
    const char *pad = rs->pads + (size_t)(seq % rs->pool_n) * rs->pad_len;
    for (size_t j = 0; j < n; j++) {
        w = put_be(w, message, 4);
        put_header(w, rs->magic, rs->version, rs->sender, seq + j, sent_ns);
        w += 24;
        memcpy(w, pad, rs->pad_len);
        w += rs->pad_len;
    }
    w = put_be(w, 0, 2); /* result columns: none asked for */
    put_be(len_at, (uint64_t)(w - len_at), 4);
    *w++ = 'E';
    w = put_be(w, 9, 4);
    *w++ = '\0';
    w = put_be(w, 0, 4);
    *w++ = 'S';
    w = put_be(w, 4, 4);
    return (size_t)((char *)w - wire);
}

/* Parses PostgreSQL's replies in the buffer until ReadyForQuery: 1 when it came (an
 * ErrorResponse before it: o->status 1, message its text and SQLSTATE), 0 when more bytes
 * are needed, -1 on a protocol failure. */
static int
pg_parse(reader *r, outcome *o)
{
    while (r->done < r->want) {
        size_t avail = r->have - r->pos;
        if (avail < 5) {
            return 0;
        }
        const unsigned char *m = (const unsigned char *)r->buf + r->pos;
        uint64_t len = 0;
        for (int i = 1; i <= 4; i++) {
            len = (len << 8) | m[i];
        }
        if (len < 4) {
            return protocol_error(o, "a malformed '%c' message", (char)m[0]);
        }
        if (1 + len > INBUF) {
            o->status = ST_PROTOCOL;
            snprintf(o->message, MESSAGE_MAX, "a '%c' message longer than %d bytes", m[0], INBUF);
            return -1;
        }
        if (avail < 1 + len) {
            return 0;
        }
        const char *body = (const char *)m + 5;
        size_t blen = (size_t)len - 4;
        switch (m[0]) {
        case '1': /* ParseComplete */
        case '2': /* BindComplete */
        case 'C': /* CommandComplete */
        case 'N': /* NoticeResponse */
        case 'S': /* ParameterStatus */
        case 'A': /* NotificationResponse */
            break;
        case 'E':
            if (o->status != ST_REPLY_ERROR) {
                const char *text = "", *state = "";
                size_t text_len = 0, state_len = 0;
                for (size_t at = 0; at < blen && body[at] != '\0';) {
                    const char *f = body + at + 1;
                    size_t flen = strnlen(f, blen - at - 1);
                    if (body[at] == 'M') {
                        text = f;
                        text_len = flen;
                    } else if (body[at] == 'C') {
                        state = f;
                        state_len = flen;
                    }
                    at += flen + 2;
                }
                o->status = ST_REPLY_ERROR;
                snprintf(o->message, MESSAGE_MAX, "%.*s (SQLSTATE %.*s)", (int)text_len, text,
                         (int)state_len, state);
            }
            break;
        case 'Z':
            r->done++;
            break;
        default:
            return protocol_error(o, "an unexpected '%c' message", (char)m[0]);
        }
        r->pos += 1 + len;
    }
    if (r->pos != r->have && !r->more) {
        o->status = ST_PROTOCOL;
        snprintf(o->message, MESSAGE_MAX, "%zu bytes after ReadyForQuery", r->have - r->pos);
        return -1;
    }
    return 1;
}

/* NATS JetStream (PROTO_NATS). The lane's connection was set up in Python (INFO, CONNECT
 * with verbose false and headers, SUB <inbox>.> 1, PING/PONG). A batch of n is n PUB
 * frames "PUB <subject> <inbox>.<batch>.<index> <len>\r\n<message>\r\n" (batch: the
 * lane's batch number, 8 hex digits; index: the message's in its batch, 6), so every
 * reply names its batch and message: a reply of an earlier batch, or a second one, is
 * ignored. The batch is confirmed once every message's reply is a PubAck (JSON with
 * "stream" and "seq"); a reply with "error" (or no PubAck) fails it at once (status 1,
 * message: the reply). A 503 status (no responders: no JetStream server took it, nothing
 * was stored) is not a reply: once every message has its reply or its 503, those
 * messages are published again after resend_wait_ns, as long as that is within
 * timeout_ns of the batch's start, else the batch fails (status 6, integer: how many no
 * server took). The reader keeps the connection's bytes across batches (a new conn_gen
 * starts afresh): a server PING is answered with a PONG queued behind the batch's bytes,
 * +OK, PONG and INFO pass, -ERR fails the lane (status 3, message: its text). */
#define NATS_BATCH_HEX 8
#define NATS_INDEX_HEX 6
#define NATS_SIZE_MAX 0xFFFFFF
#define NATS_PONGS_AT_ONCE 16 /* PONGs put before a batch's frames, or after them */

static char *
put_hex(char *w, uint64_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = digits - 1; i >= 0; i--) {
        w[i] = hex[v & 15];
        v >>= 4;
    }
    return w + digits;
}

static int
get_hex(const char *p, int digits, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < digits; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) {
            return -1;
        }
        x = (x << 4) | (uint64_t)d;
    }
    *v = x;
    return 0;
}

/* a PUB frame's length (all of a batch's frames are alike in length) */
static size_t
nats_frame_len(const run_spec *rs)
{
    char digits[24];
    int d = snprintf(digits, sizeof digits, "%zu", 24 + rs->pad_len);
    return 4 + rs->subject_len + 1 + rs->inbox_len + 1 + NATS_BATCH_HEX + 1 + NATS_INDEX_HEX +
           1 + (size_t)d + 2 + 24 + rs->pad_len + 2;
}

/* message k of the batch in flight, as its PUB frame, at w; its end */
static char *
nats_frame(const lane *L, char *w, size_t k)
{
    const run_spec *rs = &L->rs;
    const char *pad = rs->pads + (size_t)(L->seq % rs->pool_n) * rs->pad_len;
    memcpy(w, "PUB ", 4);
    w += 4;
    memcpy(w, rs->subject, rs->subject_len);
    w += rs->subject_len;
    *w++ = ' ';
    memcpy(w, rs->inbox, rs->inbox_len);
    w += rs->inbox_len;
    *w++ = '.';
    w = put_hex(w, L->batch_no, NATS_BATCH_HEX);
    *w++ = '.';
    w = put_hex(w, k, NATS_INDEX_HEX);
    w += sprintf(w, " %zu\r\n", 24 + rs->pad_len);
    put_header((unsigned char *)w, rs->magic, rs->version, rs->sender, L->seq + k, L->stamp);
    w += 24;
    memcpy(w, pad, rs->pad_len);
    w += rs->pad_len;
    *w++ = '\r';
    *w++ = '\n';
    return w;
}

/* the PONGs owed (up to NATS_PONGS_AT_ONCE) at w; their end */
static char *
nats_pongs(lane *L, char *w)
{
    for (int k = 0; L->pongs > 0 && k < NATS_PONGS_AT_ONCE; k++, L->pongs--) {
        memcpy(w, "PONG\r\n", 6);
        w += 6;
    }
    return w;
}

/* The wire of the batch in flight: the PONGs owed, then its messages' frames (all, or
 * with ``again`` those no server took, their replies awaited again). */
static void
nats_wire(lane *L, int again)
{
    size_t n = (size_t)L->sizes[L->i];
    char *w = nats_pongs(L, L->wire);
    L->frames_at = (size_t)(w - L->wire);
    for (size_t k = 0; k < n; k++) {
        if (again && L->got[k] != 2) {
            continue;
        }
        L->got[k] = 0;
        w = nats_frame(L, w, k);
    }
    if (again) {
        L->replies -= L->no_resp;
        L->no_resp = 0;
    }
    L->batch_end = L->wlen = (size_t)(w - L->wire);
    L->woff = 0;
}

/* The batch in flight's messages no server took, published again (the PONGs not sent
 * yet go first) */
static void
nats_resend(lane *L, int64_t now, int64_t timeout_ns)
{
    L->pongs += (int)((L->wlen - L->woff) / 6); /* only PONGs follow the batch's frames */
    L->resend_at = 0;
    nats_wire(L, 1);
    L->deadline = now + timeout_ns;
    lane_write(L, now, timeout_ns);
}

/* The PONGs owed, behind the bytes of the batch in flight (the lane's buffer keeps room) */
static void
nats_owe_pongs(lane *L)
{
    if (L->pongs > 0 && L->active && L->wlen + 6 * NATS_PONGS_AT_ONCE <= L->cap) {
        L->wlen = (size_t)(nats_pongs(L, L->wire + L->wlen) - L->wire);
    }
}

static void
nats_failed(lane *L, int status, const char *what, const char *text, size_t len)
{
    L->o.status = status;
    snprintf(L->o.message, MESSAGE_MAX, "%s%.*s", what, (int)(len < 400 ? len : 400), text);
    L->settled = 1;
}

/* A message on the connection (subject; status: an HMSG's status code, or 0; its header
 * line; its body): the reply of a message of the batch in flight, or ignored. */
static void
nats_reply(lane *L, const char *subj, size_t subj_len, int status, const char *line,
           size_t line_len, const char *body, size_t blen)
{
    const run_spec *rs = &L->rs;
    size_t at = rs->inbox_len;
    uint64_t batch, index;
    if (!L->active || L->settled || subj_len != at + 2 + NATS_BATCH_HEX + NATS_INDEX_HEX ||
        memcmp(subj, rs->inbox, at) != 0 || subj[at] != '.' ||
        subj[at + 1 + NATS_BATCH_HEX] != '.' ||
        get_hex(subj + at + 1, NATS_BATCH_HEX, &batch) < 0 ||
        get_hex(subj + at + 2 + NATS_BATCH_HEX, NATS_INDEX_HEX, &index) < 0 ||
        batch != L->batch_no || index >= (uint64_t)L->sizes[L->i] || L->got[index] != 0) {
        return; /* not ours, of an earlier batch, or a message's second reply */
    }
    if (status == 503) {
        L->got[index] = 2;
        L->no_resp++;
    } else if (status != 0) {
        nats_failed(L, ST_REPLY_ERROR, "", line, line_len);
        return;
    } else if (memmem(body, blen, "\"error\"", 7) != NULL) {
        nats_failed(L, ST_REPLY_ERROR, "", body, blen);
        return;
    } else if (memmem(body, blen, "\"stream\"", 8) != NULL &&
               memmem(body, blen, "\"seq\"", 5) != NULL) {
        L->got[index] = 1;
    } else {
        nats_failed(L, ST_REPLY_ERROR, "bad PubAck ", body, blen);
        return;
    }
    L->replies++;
    if (L->replies == L->sizes[L->i]) {
        L->settled = 1;
    }
}

static int
nats_is(const char *line, size_t len, const char *op)
{
    size_t k = strlen(op);
    if (len < k || (len > k && line[k] != ' ' && line[k] != '\t')) {
        return 0;
    }
    for (size_t i = 0; i < k; i++) {
        char c = line[i];
        if ((c >= 'a' && c <= 'z' ? c - 32 : c) != op[i]) {
            return 0;
        }
    }
    return 1;
}

static int
nats_bad(lane *L, const char *what, const char *line, size_t len)
{
    L->o.status = ST_PROTOCOL;
    snprintf(L->o.message, MESSAGE_MAX, "%s: %.*s", what, (int)(len < 200 ? len : 200), line);
    return -1;
}

/* Parses the whole frames in the lane's buffer (the rest waits for more bytes): 0, or -1
 * when the connection is out of step or the server said -ERR (o says which). */
static int
nats_parse(lane *L)
{
    reader *r = &L->r;
    for (;;) {
        char *line = r->buf + r->pos;
        size_t avail = r->have - r->pos;
        char *lf = avail ? memchr(line, '\n', avail) : NULL;
        if (lf == NULL) {
            return 0;
        }
        size_t len = (size_t)(lf - line);
        if (len < 1 || line[len - 1] != '\r') {
            return nats_bad(L, "a line without CRLF", line, len);
        }
        len--;
        int hmsg = nats_is(line, len, "HMSG");
        if (hmsg || nats_is(line, len, "MSG")) {
            const char *tok[6];
            size_t tlen[6];
            int ntok = 0;
            for (size_t i = 0; i < len && ntok < 6;) {
                while (i < len && (line[i] == ' ' || line[i] == '\t')) {
                    i++;
                }
                size_t from = i;
                while (i < len && line[i] != ' ' && line[i] != '\t') {
                    i++;
                }
                if (i > from) {
                    tok[ntok] = line + from;
                    tlen[ntok++] = i - from;
                }
            }
            /* MSG subject sid [reply] size; HMSG subject sid [reply] header_size size */
            int sizes = hmsg ? 2 : 1;
            if (ntok < 3 + sizes || ntok > 4 + sizes) {
                return nats_bad(L, "a malformed message line", line, len);
            }
            unsigned long long size[2] = {0, 0};
            for (int s = 0; s < sizes; s++) {
                const char *d = tok[ntok - sizes + s];
                size_t dl = tlen[ntok - sizes + s];
                if (dl > 9) {
                    return nats_bad(L, "a malformed message line", line, len);
                }
                for (size_t i = 0; i < dl; i++) {
                    if (d[i] < '0' || d[i] > '9') {
                        return nats_bad(L, "a malformed message line", line, len);
                    }
                    size[s] = size[s] * 10 + (unsigned long long)(d[i] - '0');
                }
            }
            unsigned long long total = size[sizes - 1], head = hmsg ? size[0] : 0;
            if (head > total || len + 2 + total + 2 > INBUF) {
                return nats_bad(L, "a message too long or malformed", line, len);
            }
            if (avail < len + 2 + total + 2) {
                return 0;
            }
            const char *payload = lf + 1;
            if (payload[total] != '\r' || payload[total + 1] != '\n') {
                return nats_bad(L, "a message without CRLF after its payload", line, len);
            }
            int status = 0;
            size_t hl = 0; /* the header's first line: NATS/1.0[ status[ description]] */
            while (hl < head && payload[hl] != '\r') {
                hl++;
            }
            if (hmsg && hl >= 12 && memcmp(payload, "NATS/1.0 ", 9) == 0) {
                for (int i = 9; i < 12 && payload[i] >= '0' && payload[i] <= '9'; i++) {
                    status = status * 10 + (payload[i] - '0');
                }
            }
            nats_reply(L, tok[1], tlen[1], status, payload, hl, payload + head,
                       (size_t)(total - head));
            r->pos += len + 2 + total + 2;
            continue;
        }
        if (nats_is(line, len, "PING")) {
            L->pongs++;
        } else if (nats_is(line, len, "-ERR")) {
            L->o.status = ST_CONNECTION;
            snprintf(L->o.message, MESSAGE_MAX, "the server said %.*s",
                     (int)(len < 400 ? len : 400), line);
            return -1;
        } else if (!nats_is(line, len, "PONG") && !nats_is(line, len, "+OK") &&
                   !nats_is(line, len, "INFO")) {
            return nats_bad(L, "an unexpected line", line, len);
        }
        r->pos += len + 2;
    }
}

static void pulsar_wire(lane *L); /* Pulsar's batch wire (below) */

/* the replies of a Redis lane's batch b: an XADD's each, and the trailer's (WAIT) */
static int
lane_replies(const lane *L, Py_ssize_t b)
{
    return (int)L->sizes[b] + (L->rs.trailer_len > 0 ? 1 : 0);
}

/* Starts the lane's next batch: its start is taken now, as its own bytes are written (or
 * is the run's first_start, when the sender had to connect first), and the batch goes
 * only if that start is before stop_ns. With slots, the batch goes only once its slot
 * came (and only if the slot and now are before stop_ns), stamped with its slot. 1:
 * started, 0: not (no sizes left, or the end), -1: not yet (its slot is later). */
static int
lane_start(lane *L, int64_t stop_ns, int64_t wall_offset_ns, int64_t timeout_ns)
{
    Py_ssize_t b = L->started; /* the batch that starts: L->i, or one behind those in flight */
    if (b >= L->batches) {
        return 0;
    }
    int64_t now = L->first_start > 0 && L->slots == NULL ? L->first_start : monotonic_ns();
    int64_t stamp = now;
    if (L->slots != NULL) {
        stamp = L->slots[b];
        if (stamp >= stop_ns) {
            return 0;
        }
        if (stamp > now) {
            return -1;
        }
    }
    if (now >= stop_ns) {
        return 0;
    }
    L->first_start = 0;
    const run_spec *rs = &L->rs;
    size_t n = (size_t)L->sizes[b];
    int head = L->active == 0; /* its replies are the next the reader reads */
    if (head) {
        memset(&L->o, 0, sizeof L->o);
    }
    if (rs->proto == PROTO_PG) {
        size_t at = 0;
        if (!(L->prepared[n >> 3] & (1u << (n & 7)))) { /* later batches of n rows Bind it */
            at = pg_parse_message(L->wire, rs, n);
            L->prepared[n >> 3] |= (unsigned char)(1u << (n & 7));
        }
        L->wlen = at + pg_batch(L->wire + at, rs, n, L->seq_next, stamp + wall_offset_ns);
        if (head) {
            reader_expect(&L->r, 1, &L->o); /* through ReadyForQuery */
        }
    } else if (rs->proto == PROTO_NATS) {
        L->batch_no++;
        L->replies = L->no_resp = 0;
        L->settled = 0;
        L->resend_at = 0;
        L->stamp = stamp + wall_offset_ns;
        L->o.integer = -1;
        memset(L->got, 0, n);
        nats_wire(L, 0); /* the reader keeps the connection's bytes */
    } else if (rs->proto == PROTO_PULSAR) {
        L->replies = 0;
        L->settled = 0;
        L->stamp = stamp + wall_offset_ns;
        L->o.integer = -1;
        pulsar_wire(L); /* the reader keeps the connection's bytes */
    } else {
        Py_ssize_t k =
            (Py_ssize_t)((L->key + (unsigned long long)b) % (unsigned long long)rs->nkeys);
        const char *prefix = rs->prefixes[k];
        size_t prefix_len = rs->prefix_lens[k];
        const char *pad = rs->pads + (size_t)(L->seq_next % rs->pool_n) * rs->pad_len;
        char *w = L->wire;
        for (size_t j = 0; j < n; j++) {
            memcpy(w, prefix, prefix_len);
            w += prefix_len;
            put_header((unsigned char *)w, rs->magic, rs->version, rs->sender, L->seq_next + j,
                       stamp + wall_offset_ns);
            w += 24;
            memcpy(w, pad, rs->pad_len);
            w += rs->pad_len;
            memcpy(w, rs->suffix, rs->suffix_len);
            w += rs->suffix_len;
        }
        memcpy(w, rs->trailer, rs->trailer_len);
        w += rs->trailer_len;
        L->wlen = (size_t)(w - L->wire);
        if (head) {
            reader_expect(&L->r, lane_replies(L, b), &L->o);
        }
    }
    if (rs->proto != PROTO_NATS && rs->proto != PROTO_PULSAR) {
        L->batch_end = L->wlen;
    }
    L->woff = 0;
    L->records[2 * b] = now;
    L->active++;
    L->started++;
    L->seq_next += (unsigned long long)n;
    L->r.more = L->active > 1;
    L->next = L->active < L->window;
    if (head) {
        L->deadline = monotonic_ns() + timeout_ns;
    }
    lane_write(L, now, timeout_ns);
    return 1;
}

/* whether the lane's next batch may start now: room in its window and, behind a batch
 * in flight, that batch's bytes all written (the wire holds the last started batch's) */
static int
lane_ready(const lane *L)
{
    return L->assigned && !L->failed && L->next && L->active < L->window &&
           (L->active == 0 || L->woff >= L->wlen);
}

/* The batch in flight's replies are all in (o says whether one was an error): it is
 * recorded (its end: now) and the lane marked to start its next one, or the lane fails. */
static void
lane_done(lane *L, int64_t now)
{
    if (L->o.status != ST_OK || (L->active == 1 && L->woff < L->batch_end)) {
        if (L->o.status == ST_OK) { /* all replies before all the bytes went */
            protocol_error(&L->o, "replies before the batch was sent", 0);
        }
        lane_fail(L, now);
        return;
    }
    L->records[2 * L->i + 1] = now;
    L->seq += (unsigned long long)L->sizes[L->i];
    L->ok++;
    L->i++;
    L->active--;
    L->next = 1;
    if (L->active > 0) { /* the next batch's replies follow in the reader's buffer */
        L->r.done = 0;
        L->r.skip = 0;
        L->r.want = L->rs.proto == PROTO_PG ? 1 : lane_replies(L, L->i);
        L->r.more = L->active > 1;
        memset(&L->o, 0, sizeof L->o);
        L->o.integer = -1;
    }
}

/* NATS: the frames read so far parsed; 1 when the lane's batch ended (or the lane
 * failed), 0 while it waits for more. A batch whose every message has its reply, some
 * with no responders, waits to publish those again (within timeout_ns of its start). */
static int
nats_read(lane *L, int64_t now, int64_t timeout_ns)
{
    if (nats_parse(L) < 0) {
        lane_fail(L, now);
        return 1;
    }
    nats_owe_pongs(L);
    if (!L->settled) {
        return 0;
    }
    if (L->o.status == ST_OK && L->no_resp > 0 && L->woff >= L->batch_end) {
        if (now + L->rs.resend_wait_ns > L->records[2 * L->i] + timeout_ns) {
            L->o.status = ST_NO_RESPONDERS;
            L->o.integer = L->no_resp;
            lane_fail(L, now);
            return 1;
        }
        L->settled = 0;
        L->resend_at = now + L->rs.resend_wait_ns;
        L->deadline = L->resend_at + timeout_ns;
        return 0;
    }
    lane_done(L, now);
    return 1;
}

/* Apache Pulsar (PROTO_PULSAR). The lane's connection was set up in Python (CONNECT,
 * the topic's lookup, PRODUCER: mqlab/brokers/pulsar/lane.py), its producer's sequence
 * ids start at 0 on each connection (conn_gen) and go on across runs. A batch of n is n
 * SEND frames, sequence ids pfirst .. pfirst + n - 1, each message's publish time its
 * header's stamp in ms; it is confirmed once n SEND_RECEIPTs came, in order (the broker
 * persists and confirms a producer's messages in the order sent). A receipt out of that
 * order, or a frame of a type a producer does not expect, is status 4; SEND_ERROR is
 * status 1 (message: the broker's); CLOSE_PRODUCER status 3. A PING is answered with a
 * PONG queued behind the batch's bytes, or put before the next batch's. */
#define PULSAR_PONGS_AT_ONCE 16

static char *
pulsar_pongs(lane *L, char *w)
{
    for (int k = 0; L->pongs > 0 && k < PULSAR_PONGS_AT_ONCE; k++, L->pongs--) {
        memcpy(w, PW_PONG_FRAME, PW_PONG_LEN);
        w += PW_PONG_LEN;
    }
    return w;
}

/* The wire of the batch starting: the PONGs owed, then its messages' SEND frames */
static void
pulsar_wire(lane *L)
{
    const run_spec *rs = &L->rs;
    size_t n = (size_t)L->sizes[L->started];
    const char *pad = rs->pads + (size_t)(L->seq_next % rs->pool_n) * rs->pad_len;
    uint64_t publish_ms = L->stamp > 0 ? (uint64_t)L->stamp / 1000000u : 0;
    unsigned char head[24];
    char *w = pulsar_pongs(L, L->wire);
    L->frames_at = (size_t)(w - L->wire);
    L->pfirst = L->pseq;
    for (size_t k = 0; k < n; k++) {
        put_header(head, rs->magic, rs->version, rs->sender, L->seq_next + k, L->stamp);
        w = (char *)pw_send_frame((unsigned char *)w, rs->producer_id, rs->name, rs->name_len,
                                  L->pseq++, publish_ms, head, sizeof head, pad, rs->pad_len);
    }
    L->batch_end = L->wlen = (size_t)(w - L->wire);
    L->woff = 0;
}

/* The PONGs owed, behind the bytes of the batch in flight (the lane's buffer keeps room) */
static void
pulsar_owe_pongs(lane *L)
{
    if (L->pongs > 0 && L->active && L->wlen + PW_PONG_LEN * PULSAR_PONGS_AT_ONCE <= L->cap) {
        L->wlen = (size_t)(pulsar_pongs(L, L->wire + L->wlen) - L->wire);
    }
}

/* Pulsar: the frames read so far parsed; 1 when the lane's batch ended (or the lane
 * failed), 0 while it waits for more. */
static int
pulsar_read(lane *L, int64_t now)
{
    reader *r = &L->r;
    for (;;) {
        pw_reply rep;
        long len = pw_parse((const unsigned char *)r->buf + r->pos, r->have - r->pos, INBUF, &rep);
        if (len == 0) {
            break;
        }
        if (len < 0) {
            protocol_error(&L->o, len == -2 ? "a frame longer than the reader's buffer"
                                            : "a malformed frame", 0);
            lane_fail(L, now);
            return 1;
        }
        r->pos += (size_t)len;
        if (rep.type == PW_SEND_RECEIPT || rep.type == PW_SEND_ERROR) {
            unsigned long long want = L->pfirst + (unsigned long long)L->replies;
            if (!L->active || L->settled || rep.producer_id != L->rs.producer_id ||
                rep.sequence_id != want) {
                L->o.status = ST_PROTOCOL;
                snprintf(L->o.message, MESSAGE_MAX,
                         "a %s of producer %llu, sequence id %llu, where %llu was due",
                         rep.type == PW_SEND_RECEIPT ? "receipt" : "send error",
                         (unsigned long long)rep.producer_id,
                         (unsigned long long)rep.sequence_id, want);
                lane_fail(L, now);
                return 1;
            }
            if (rep.type == PW_SEND_ERROR) {
                L->o.status = ST_REPLY_ERROR;
                snprintf(L->o.message, MESSAGE_MAX, "the broker refused sequence id %llu "
                         "(error %llu): %.*s", want, (unsigned long long)rep.error,
                         (int)(rep.message_len < 400 ? rep.message_len : 400),
                         rep.message != NULL ? rep.message : "");
                L->settled = 1;
            } else if (++L->replies == L->sizes[L->i]) {
                L->settled = 1;
            }
        } else if (rep.type == PW_PING) {
            L->pongs++;
        } else if (rep.type == PW_CLOSE_PRODUCER) {
            L->o.status = ST_CONNECTION;
            snprintf(L->o.message, MESSAGE_MAX,
                     "the broker closed the producer (its topic is moving or unloaded)");
            lane_fail(L, now);
            return 1;
        } else if (rep.type != PW_PONG) {
            L->o.status = ST_PROTOCOL;
            snprintf(L->o.message, MESSAGE_MAX, "an unexpected command (type %llu)",
                     (unsigned long long)rep.type);
            lane_fail(L, now);
            return 1;
        }
        if (L->settled) {
            break; /* what follows is the next batch's (none: one in flight) or a PING */
        }
    }
    pulsar_owe_pongs(L);
    if (!L->settled) {
        return 0;
    }
    lane_done(L, now);
    return 1;
}

/* Reads what the socket holds; a batch whose replies are all in is recorded (its end
 * taken as its last reply is parsed), and the lane marked to start its next one. */
static void
lane_read(lane *L, int64_t timeout_ns)
{
    int64_t now = monotonic_ns();
    for (;;) {
        if (reader_room(&L->r, &L->o) < 0) {
            lane_fail(L, now);
            return;
        }
        size_t room = INBUF - L->r.have;
        ssize_t got = recv(L->fd, L->r.buf + L->r.have, room, MSG_DONTWAIT);
        if (got <= 0) {
            if (lane_io(L, monotonic_ns(), got < 0 ? errno : 0) > 0) {
                continue;
            }
            return;
        }
        now = monotonic_ns();
        L->r.have += (size_t)got;
        L->deadline = now + timeout_ns;
        if (L->rs.proto == PROTO_NATS) {
            if (nats_read(L, now, timeout_ns) || (size_t)got < room) {
                return;
            }
            continue;
        }
        if (L->rs.proto == PROTO_PULSAR) {
            if (pulsar_read(L, now) || (size_t)got < room) {
                return;
            }
            continue;
        }
        for (;;) { /* the batches whose replies are all in, in order */
            int parsed =
                L->rs.proto == PROTO_PG ? pg_parse(&L->r, &L->o) : reader_parse(&L->r, &L->o);
            if (parsed < 0) {
                lane_fail(L, now);
                return;
            }
            if (parsed == 0) {
                break;
            }
            if (L->o.status == ST_OK && L->rs.proto == PROTO_REDIS && L->rs.trailer_len > 0 &&
                L->o.integer < L->rs.min_acks) {
                L->o.status = ST_WAIT_SHORT;
            }
            lane_done(L, now);
            if (L->failed || L->active == 0) {
                return;
            }
        }
        if ((size_t)got < room) {
            return; /* the socket is drained for now */
        }
    }
}

/* The lanes' batches until return_ns (CLOCK_MONOTONIC), or until a lane's run ended
 * (its sizes used up, or a failure), or wake_fd became readable; no batch starts at or
 * after stop_ns, and once none is in flight after stop_ns it returns too. Each lane goes
 * at its own pace: the next batch of a lane starts as soon as its last one's replies are
 * parsed (with slots: once its slot came and its window has room), with its own start
 * time. Batches in flight at the return stay in flight: the next call reads their
 * replies. */
static void
lanes_loop(LanesObject *self, int64_t return_ns, int64_t stop_ns, int64_t wall_offset_ns,
           int wake_fd)
{
    lane *lanes = self->lanes;
    Py_ssize_t n = self->n;
    int64_t timeout_ns = self->timeout_ns;
    struct pollfd *pfds = self->pfds;
    for (;;) {
        int ended = 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            lane *L = &lanes[j];
            while (lane_ready(L)) { /* with slots: every batch whose slot came, window allowing */
                int started = lane_start(L, stop_ns, wall_offset_ns, timeout_ns);
                if (started == 0) {
                    L->next = 0;
                    ended |= L->i >= L->batches;
                }
                ended |= L->failed;
                if (started <= 0) {
                    break;
                }
            }
        }
        if (ended) {
            return;
        }
        nfds_t k = 0;
        int64_t first_deadline = INT64_MAX;
        for (Py_ssize_t j = 0; j < n; j++) {
            lane *L = &lanes[j];
            if (L->slots != NULL && lane_ready(L) && L->started < L->batches &&
                L->slots[L->started] < first_deadline) {
                first_deadline = L->slots[L->started]; /* waiting for its slot */
            }
            if (!L->active) {
                continue;
            }
            pfds[k].fd = L->fd;
            pfds[k].events = (short)(POLLIN | (L->woff < L->wlen ? POLLOUT : 0));
            pfds[k].revents = 0;
            self->polled[k++] = L;
            first_deadline = L->deadline < first_deadline ? L->deadline : first_deadline;
            if (L->resend_at > 0 && L->resend_at < first_deadline) {
                first_deadline = L->resend_at; /* NATS: publishing again then */
            }
        }
        int64_t now = monotonic_ns();
        if (now >= return_ns || (k == 0 && now >= stop_ns)) {
            return;
        }
        nfds_t waits = k;
        if (wake_fd >= 0) {
            pfds[k].fd = wake_fd;
            pfds[k].events = POLLIN;
            pfds[k].revents = 0;
            waits++;
        }
        int64_t until = return_ns < first_deadline ? return_ns : first_deadline;
        if (k == 0 && stop_ns < until) {
            until = stop_ns;
        }
        int64_t wait_ns = until > now ? until - now : 0;
        struct timespec ts = {(time_t)(wait_ns / 1000000000LL), (long)(wait_ns % 1000000000LL)};
        int ready = ppoll(pfds, waits, &ts, NULL);
        if (ready < 0 && errno != EINTR) {
            int err = errno;
            now = monotonic_ns();
            for (nfds_t q = 0; q < k; q++) {
                self->polled[q]->o.status = ST_CONNECTION;
                self->polled[q]->o.err_no = err;
                lane_fail(self->polled[q], now);
            }
            return;
        }
        for (nfds_t q = 0; q < k && ready > 0; q++) {
            lane *L = self->polled[q];
            short ev = pfds[q].revents;
            if (ev & POLLOUT && L->active) {
                lane_write(L, monotonic_ns(), timeout_ns);
            }
            if (ev & (POLLIN | POLLERR | POLLHUP | POLLNVAL) && L->active) {
                lane_read(L, timeout_ns);
                if (lane_ready(L) && !L->active) { /* its next batch: at once */
                    if (!lane_start(L, stop_ns, wall_offset_ns, timeout_ns)) {
                        L->next = 0;
                        ended |= L->i >= L->batches;
                    }
                }
            }
            ended |= L->failed;
        }
        now = monotonic_ns();
        for (nfds_t q = 0; q < k; q++) {
            lane *L = self->polled[q];
            if (L->active && L->resend_at > 0 && now >= L->resend_at) {
                nats_resend(L, now, timeout_ns);
                ended |= L->failed;
            }
            if (L->active && now >= L->deadline) {
                L->o.status = ST_TIMEOUT;
                lane_fail(L, now);
                ended = 1;
            }
        }
        if (ended || (wake_fd >= 0 && ready > 0 && (pfds[k].revents & (POLLIN | POLLERR | POLLHUP)))) {
            /* the lanes whose batches came in this round start theirs first */
            for (nfds_t q = 0; q < k; q++) {
                lane *L = self->polled[q];
                if (lane_ready(L) && !L->active) {
                    if (!lane_start(L, stop_ns, wall_offset_ns, timeout_ns)) {
                        L->next = 0;
                    }
                }
            }
            return;
        }
    }
}

static int
Lanes_init(LanesObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"proto", "count", "timeout_ns", NULL};
    int proto;
    Py_ssize_t count;
    long long timeout_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "inL", kwlist, &proto, &count, &timeout_ns)) {
        return -1;
    }
    if (proto < PROTO_REDIS || proto > PROTO_PULSAR || count < 1 || count > 100000 ||
        timeout_ns <= 0 || self->lanes != NULL) {
        PyErr_SetString(PyExc_ValueError, "Lanes: proto 0 .. 3, count >= 1, timeout_ns > 0");
        return -1;
    }
    if (proto == PROTO_PULSAR && pw_crc_hw < 0) {
        pw_crc_init();
    }
    self->proto = proto;
    self->timeout_ns = timeout_ns;
    self->n = count;
    self->lanes = PyMem_RawCalloc((size_t)count, sizeof(lane));
    self->pfds = PyMem_RawCalloc((size_t)count + 1, sizeof(struct pollfd));
    self->polled = PyMem_RawCalloc((size_t)count + 1, sizeof(lane *));
    if (self->lanes == NULL || self->pfds == NULL || self->polled == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        self->lanes[j].conn_gen = -1;
        if (proto == PROTO_PG) {
            self->lanes[j].prepared = PyMem_RawCalloc(PG_SIZE_MAX / 8 + 1, 1);
            if (self->lanes[j].prepared == NULL) {
                PyErr_NoMemory();
                return -1;
            }
        }
    }
    return 0;
}

static void
Lanes_dealloc(LanesObject *self)
{
    for (Py_ssize_t j = 0; self->lanes != NULL && j < self->n; j++) {
        lane_release(&self->lanes[j]);
        PyMem_RawFree(self->lanes[j].wire);
        PyMem_RawFree(self->lanes[j].prepared);
        PyMem_RawFree(self->lanes[j].got);
    }
    PyMem_RawFree(self->lanes);
    PyMem_RawFree(self->pfds);
    PyMem_RawFree(self->polled);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static lane *
lane_at(LanesObject *self, Py_ssize_t j)
{
    if (self->lanes == NULL || j < 0 || j >= self->n) {
        PyErr_SetString(PyExc_IndexError, "Lanes: no such lane");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Lanes: run() is going");
        return NULL;
    }
    return &self->lanes[j];
}

/* assign(j, fd, spec, sizes, first_seq, key, records, first_start_ns, conn_gen): lane j's
 * next run; refused while a batch of it is in flight. */
static PyObject *
Lanes_assign(LanesObject *self, PyObject *args)
{
    Py_ssize_t j;
    int fd;
    PyObject *spec;
    Py_buffer sizes_buf, records_buf, slots_buf = {0};
    unsigned long long seq, key;
    long long first_start, conn_gen;
    PyObject *slots = Py_None;
    if (!PyArg_ParseTuple(args, "niO!y*KKw*LL|O", &j, &fd, &PyTuple_Type, &spec, &sizes_buf,
                          &seq, &key, &records_buf, &first_start, &conn_gen, &slots)) {
        return NULL;
    }
    if (slots != Py_None && PyObject_GetBuffer(slots, &slots_buf, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&sizes_buf);
        PyBuffer_Release(&records_buf);
        return NULL;
    }
    lane *L = lane_at(self, j);
    run_spec rs;
    const char *why = NULL;
    if (L == NULL) {
        goto fail;
    }
    if (L->active) {
        why = "Lanes: a batch of this lane is in flight";
        goto refused;
    }
    int parsed = self->proto == PROTO_PG       ? parse_pg_spec(spec, &rs)
                 : self->proto == PROTO_NATS   ? parse_nats_spec(spec, &rs)
                 : self->proto == PROTO_PULSAR ? parse_pulsar_spec(spec, &rs)
                                               : parse_run_spec(spec, &rs);
    if (parsed < 0) {
        goto fail;
    }
    Py_ssize_t batches = sizes_buf.len / (Py_ssize_t)sizeof(int64_t);
    if (sizes_buf.len % (Py_ssize_t)sizeof(int64_t) != 0 ||
        records_buf.len < batches * 2 * (Py_ssize_t)sizeof(int64_t) ||
        (slots != Py_None && slots_buf.len < batches * (Py_ssize_t)sizeof(int64_t))) {
        free_run_spec(&rs);
        why = "Lanes: sizes is not i64s, or records has no room for 2 per batch, or slots 1";
        goto refused;
    }
    const int64_t *sizes = (const int64_t *)sizes_buf.buf;
    size_t frame_max = 0, n_max = 0, fixed = rs.trailer_len + 1;
    long long size_max = 1000000;
    for (Py_ssize_t k = 0; k < rs.nkeys; k++) {
        size_t f = rs.prefix_lens[k] + 24 + rs.pad_len + rs.suffix_len;
        frame_max = f > frame_max ? f : frame_max;
    }
    for (Py_ssize_t i = 0; i < batches; i++) {
        if (sizes[i] < 1 || sizes[i] > (self->proto == PROTO_PG ? PG_SIZE_MAX : size_max)) {
            free_run_spec(&rs);
            why = "Lanes: a batch size out of range (1 .. 1000000; PostgreSQL 32767)";
            goto refused;
        }
        n_max = (size_t)sizes[i] > n_max ? (size_t)sizes[i] : n_max;
    }
    if (self->proto == PROTO_PG) { /* a parameter each, and a Parse with "($NNNNN), " each */
        frame_max = 4 + 24 + rs.pad_len + 12;
        fixed = 160 + rs.sql_len;
    } else if (self->proto == PROTO_NATS) { /* PONGs before the frames and after them */
        frame_max = nats_frame_len(&rs);
        fixed = 2 * 6 * NATS_PONGS_AT_ONCE;
    } else if (self->proto == PROTO_PULSAR) { /* PONGs before the frames and after them */
        frame_max = pw_send_frame_max(rs.name_len, 24 + rs.pad_len);
        fixed = 2 * PW_PONG_LEN * PULSAR_PONGS_AT_ONCE;
    }
    if (self->proto == PROTO_NATS && n_max > L->got_cap) {
        unsigned char *got = PyMem_RawRealloc(L->got, n_max);
        if (got == NULL) {
            free_run_spec(&rs);
            PyErr_NoMemory();
            goto fail;
        }
        L->got = got;
        L->got_cap = n_max;
    }
    size_t need = n_max * frame_max + fixed;
    if (need > L->cap) {
        char *wire = PyMem_RawRealloc(L->wire, need);
        if (wire == NULL) {
            free_run_spec(&rs);
            PyErr_NoMemory();
            goto fail;
        }
        L->wire = wire;
        L->cap = need;
    }
    lane_release(L);
    L->assigned = 1;
    L->fd = fd;
    Py_INCREF(spec);
    L->spec_obj = spec;
    L->rs = rs;
    L->sizes_buf = sizes_buf;
    L->records_buf = records_buf;
    L->sizes = sizes;
    L->batches = batches;
    L->records = (int64_t *)records_buf.buf;
    L->seq = seq;
    L->key = key;
    L->first_start = first_start;
    if (slots != Py_None) {
        L->slots_buf = slots_buf;
        L->slots = (const int64_t *)slots_buf.buf;
    }
    if (conn_gen != L->conn_gen && L->prepared != NULL) {
        memset(L->prepared, 0, PG_SIZE_MAX / 8 + 1);
    }
    if (conn_gen != L->conn_gen && (self->proto == PROTO_NATS || self->proto == PROTO_PULSAR)) {
        L->r.have = L->r.pos = 0; /* a new connection */
        L->pongs = 0;
        L->pseq = 0;
    }
    L->conn_gen = conn_gen;
    L->i = L->ok = L->started = 0;
    L->seq_next = seq;
    L->active = L->failed = L->behind = 0;
    L->window =
        slots != Py_None && (self->proto == PROTO_REDIS || self->proto == PROTO_PG) ? LANE_WINDOW : 1;
    L->next = 1;
    memset(&L->o, 0, sizeof L->o);
    Py_RETURN_NONE;
refused:
    PyErr_SetString(PyExc_ValueError, why);
fail:
    PyBuffer_Release(&sizes_buf);
    PyBuffer_Release(&records_buf);
    if (slots != Py_None) {
        PyBuffer_Release(&slots_buf);
    }
    return NULL;
}

/* release(j): lane j gives its run's buffers back (refused while a batch is in flight) */
static PyObject *
Lanes_release(LanesObject *self, PyObject *args)
{
    Py_ssize_t j;
    if (!PyArg_ParseTuple(args, "n", &j)) {
        return NULL;
    }
    lane *L = lane_at(self, j);
    if (L == NULL) {
        return NULL;
    }
    if (L->active) {
        PyErr_SetString(PyExc_ValueError, "Lanes: a batch of this lane is in flight");
        return NULL;
    }
    lane_release(L);
    Py_RETURN_NONE;
}

/* run(return_ns, stop_ns, wall_offset_ns, wake_fd) -> [(done, in_flight, status, integer,
 * message), ...] per lane (see lanes_loop); status None: going (or idle), else the lane
 * failed at batch done and stays stopped until assigned again. */
static PyObject *
Lanes_run(LanesObject *self, PyObject *args)
{
    long long return_ns, stop_ns, wall_offset_ns;
    int wake_fd;
    if (!PyArg_ParseTuple(args, "LLLi", &return_ns, &stop_ns, &wall_offset_ns, &wake_fd)) {
        return NULL;
    }
    if (self->lanes == NULL || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Lanes: not set up, or run() is going");
        return NULL;
    }
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    lanes_loop(self, return_ns, stop_ns, wall_offset_ns, wake_fd);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *result = PyList_New(self->n);
    for (Py_ssize_t j = 0; result != NULL && j < self->n; j++) {
        lane *L = &self->lanes[j];
        PyObject *item;
        if (L->failed) {
            PyObject *value = outcome_value(&L->o);
            item = value == NULL ? NULL : Py_BuildValue("(niN)", L->ok, L->behind, value);
        } else {
            item = Py_BuildValue("(niO)", L->ok, L->active, Py_None);
        }
        if (item == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, j, item);
    }
    return result;
}

static PyMethodDef Lanes_methods[] = {
    {"assign", (PyCFunction)Lanes_assign, METH_VARARGS,
     "assign(j, fd, spec, sizes, first_seq, key, records, first_start_ns, conn_gen[, slots])"},
    {"release", (PyCFunction)Lanes_release, METH_VARARGS, "release(j)"},
    {"run", (PyCFunction)Lanes_run, METH_VARARGS, "run(return_ns, stop_ns, wall_offset_ns, wake_fd)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LanesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mqlab._sendpath.Lanes",
    .tp_basicsize = sizeof(LanesObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Senders' connections driven from one thread (see the source).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lanes_init,
    .tp_dealloc = (destructor)Lanes_dealloc,
    .tp_methods = Lanes_methods,
};

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
    if (PyType_Ready(&LanesType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&LanesType);
    if (PyModule_AddObject(m, "Lanes", (PyObject *)&LanesType) < 0) {
        Py_DECREF(&LanesType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "REDIS", PROTO_REDIS) < 0 ||
        PyModule_AddIntConstant(m, "PG", PROTO_PG) < 0 ||
        PyModule_AddIntConstant(m, "NATS", PROTO_NATS) < 0 ||
        PyModule_AddIntConstant(m, "PULSAR", PROTO_PULSAR) < 0 ||
        PyModule_AddIntConstant(m, "WINDOW", LANE_WINDOW) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

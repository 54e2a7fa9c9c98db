/*
 * mqlab._recvpath: the PostgreSQL and Redis Streams receive paths of one worker process
 * (issue 28), and the reader of Kafka's record batches for its receivers in lanes
 * (kafka_records: mqlab/_kafkarecords.h), and the reader of RocketMQ's pop answers for
 * its receivers in lanes (rocketmq_popped: mqlab/_rocketmqpop.h).
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
 *
 * redis_receive(conns, spec, return_ns, wall_offset_ns, wake_fd) drives a worker's Redis
 * receivers the same way, each on its own connection ((fd, consumer name) per receiver:
 * redis-py's socket, no reply due, RESP2 or RESP3); spec is (group, keys, field, limit,
 * delete_on_ack, poll_cap_ns, timeout_ns, header_bytes). Each connection goes in rounds
 * of one write and its replies:
 *
 * - XACK (and, with delete_on_ack, XDEL) of the last read's entries, one command per
 *   stream key, then XREADGROUP GROUP group name COUNT limit/keys STREAMS keys... > ...
 *   (new entries only: the receiver's own pending and idle entries are its Python path's,
 *   between calls); after a read that found nothing the next one BLOCKs, at most
 *   poll_cap_ns and never past return_ns;
 * - the read's entries: each one's id kept for the next round's acks, its field's value's
 *   first header_bytes to the headers (a shorter one counted short), the read noted as
 *   one batch (receive time, length); ">" reads are first deliveries: none flagged;
 * - XACK's counts summed as acked; at the end every connection with entries read sends
 *   their acks alone and awaits them.
 *
 * A failed connection (an error reply, closed, a reply out of step, or no reply within
 * timeout_ns) stops there: its last read's entries stay pending under its name (the
 * receiver reads them again first, flagged). Returns, per connection: (headers, receive
 * ns per batch, batch lengths, flagged (empty), entries received, short, acked, status,
 * message or None), the statuses as above (1: an error reply).
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

#include "_kafkarecords.h"
#include "_rocketmqpop.h"

enum { ST_OK = 0, ST_ERROR = 1, ST_TIMEOUT = 2, ST_CONNECTION = 3, ST_PROTOCOL = 4 };
enum { IDLE = 0, WAITING = 1, DONE = 2 }; /* DONE: finished or failed */

#define MESSAGE_MAX 512
#define FIRST_BACKOFF_NS 5000000LL
#define AGAIN_MAX 1000 /* statements of one call sent again after a deadlock */

typedef struct { /* a growing byte buffer */
    unsigned char *p;
    size_t len, cap;
} buf;

/* Room for need bytes in all (out of line: buf_put's common case stays small enough to
 * be inlined where it is called, once per entry id, header and ack) */
static __attribute__((noinline)) int
buf_grow(buf *b, size_t need)
{
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) {
        cap *= 2;
    }
    unsigned char *p = realloc(b->p, cap);
    if (p == NULL) {
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int
buf_put(buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap && buf_grow(b, b->len + n) < 0) {
        return -1;
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
    /* Redis (redis_receive): the consumer's name; the last read's entries' keys and ids,
     * acked by the next round (rids: per entry a u16 key index, a u8 length, the id);
     * the replies due: integers, then the read's */
    const char *name;
    Py_ssize_t name_len;
    buf rids;
    int64_t rids_n;
    int simple;        /* integer replies due (XACK, XDEL), before the read's */
    int simple_read;   /* integer replies of the round read so far */
    int reading;       /* the round ends with a read (its reply is due after the integers) */
    int started;       /* the read's reply was begun */
    int depth;
    int64_t left[8];
    int index[8];
    int key_at;        /* the key (its index) of the stream being read in the reply */
    int value_next;    /* the next bulk is the entry's value of the field asked */
    int entry_open;    /* an entry's id was read, not its value yet */
    int resp3;         /* the read's reply is a map (RESP3: redis-py's connections speak it) */
    int empty;         /* the last read found nothing: the next blocks */
    int64_t acks_due;  /* entries the round's XACKs ack */
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

enum { PROTO_PG = 0, PROTO_REDIS = 1 };

typedef struct {
    int proto;
    const char *name;
    Py_ssize_t name_len;
    int64_t limit;
    double visibility;
    int64_t poll_cap_ns;
    int64_t timeout_ns;
    Py_ssize_t header_bytes;
    /* Redis: the group, the stream keys, the field holding the message, XDEL on ack */
    const char *group;
    Py_ssize_t group_len;
    Py_ssize_t nkeys;
    const char **keys;
    Py_ssize_t *key_lens;
    const char *field;
    Py_ssize_t field_len;
    int delete_on_ack;
} spec_t;

static int redis_round(conn *c, const spec_t *s, int64_t limit, int64_t now, int64_t return_ns);
static void redis_parse(conn *c, int64_t now, int64_t wall_offset_ns, const spec_t *s);

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

/* -- Redis Streams (redis_receive) ------------------------------------------------ */

static int
put_head(buf *b, char kind, int64_t n)
{
    /* kind, n's digits, CRLF; written by hand: snprintf here was a fifth of the
     * receiver's CPU (perf, 2026-11-29) */
    char h[24], *e = h + sizeof h, *p = e;
    uint64_t v = (uint64_t)(n < 0 ? -n : n);
    *--p = '\n';
    *--p = '\r';
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (n < 0) {
        *--p = '-';
    }
    *--p = kind;
    return buf_put(b, p, (size_t)(e - p));
}

static int
put_bulk(buf *b, const void *p, size_t n)
{
    if (put_head(b, '$', (int64_t)n) < 0 || buf_put(b, p, n) < 0) {
        return -1;
    }
    return buf_put(b, "\r\n", 2);
}

/* The integer of a reply line's [from, to) (an optional '-', then digits): 0, or -1 */
static int
resp_int(const char *from, const char *to, int64_t *v)
{
    int neg = from < to && *from == '-';
    const char *q = from + neg;
    if (q >= to || to - q > 18) {
        return -1;
    }
    int64_t x = 0;
    for (; q < to; q++) {
        if (*q < '0' || *q > '9') {
            return -1;
        }
        x = x * 10 + (*q - '0');
    }
    *v = neg ? -x : x;
    return 0;
}

/* The ids of the last read's entries of key k from rids at *at (a run of that key); the
 * run's length. */
static int64_t
run_of_key(const buf *rids, size_t at, int *key)
{
    int64_t n = 0;
    *key = rids->p[at] | (rids->p[at + 1] << 8);
    while (at < rids->len && (rids->p[at] | (rids->p[at + 1] << 8)) == *key) {
        at += 3 + rids->p[at + 2];
        n++;
    }
    return n;
}

/* One round into c->out: XACK (and XDEL) of the last read's entries, key by key, then,
 * with limit > 0, XREADGROUP of new entries (COUNT limit over the keys; after a read that
 * found nothing, BLOCK until entries come, at most the poll cap and never past return_ns).
 * Nothing to send: the connection waits for the end. */
static int
redis_round(conn *c, const spec_t *s, int64_t limit, int64_t now, int64_t return_ns)
{
    buf *o = &c->out;
    o->len = 0;
    c->out_done = 0;
    c->simple = c->simple_read = 0;
    c->acks_due = c->rids_n;
    for (size_t at = 0; at < c->rids.len;) {
        int k;
        int64_t m = run_of_key(&c->rids, at, &k);
        for (int cmd = 0; cmd < (s->delete_on_ack ? 2 : 1); cmd++) {
            if (put_head(o, '*', (cmd ? 2 : 3) + m) < 0 ||
                put_bulk(o, cmd ? "XDEL" : "XACK", 4) < 0 ||
                put_bulk(o, s->keys[k], (size_t)s->key_lens[k]) < 0 ||
                (!cmd && put_bulk(o, s->group, (size_t)s->group_len) < 0)) {
                return -1;
            }
            size_t p = at;
            for (int64_t i = 0; i < m; i++) {
                if (put_bulk(o, c->rids.p + p + 3, c->rids.p[p + 2]) < 0) {
                    return -1;
                }
                p += 3 + c->rids.p[p + 2];
            }
            c->simple++;
        }
        while (at < c->rids.len && (c->rids.p[at] | (c->rids.p[at + 1] << 8)) == k) {
            at += 3 + c->rids.p[at + 2];
        }
    }
    c->rids.len = 0;
    c->rids_n = 0;
    c->reading = 0;
    c->last = limit == 0;
    int64_t block_ms = 0;
    if (limit > 0 && c->empty) {
        int64_t cap = s->poll_cap_ns < return_ns - now ? s->poll_cap_ns : return_ns - now;
        block_ms = cap / 1000000;
        if (block_ms < 1) {
            limit = 0; /* no time to wait for entries: none read */
        }
    }
    if (limit > 0) {
        char count[24], block[24];
        int64_t per_key = limit / s->nkeys > 0 ? limit / s->nkeys : 1;
        int cl = snprintf(count, sizeof count, "%lld", (long long)per_key);
        int bl = snprintf(block, sizeof block, "%lld", (long long)block_ms);
        if (put_head(o, '*', 7 + (block_ms ? 2 : 0) + 2 * s->nkeys) < 0 ||
            put_bulk(o, "XREADGROUP", 10) < 0 || put_bulk(o, "GROUP", 5) < 0 ||
            put_bulk(o, s->group, (size_t)s->group_len) < 0 ||
            put_bulk(o, c->name, (size_t)c->name_len) < 0 || put_bulk(o, "COUNT", 5) < 0 ||
            put_bulk(o, count, (size_t)cl) < 0 ||
            (block_ms && (put_bulk(o, "BLOCK", 5) < 0 || put_bulk(o, block, (size_t)bl) < 0)) ||
            put_bulk(o, "STREAMS", 7) < 0) {
            return -1;
        }
        for (Py_ssize_t k = 0; k < s->nkeys; k++) {
            if (put_bulk(o, s->keys[k], (size_t)s->key_lens[k]) < 0) {
                return -1;
            }
        }
        for (Py_ssize_t k = 0; k < s->nkeys; k++) {
            if (put_bulk(o, ">", 1) < 0) {
                return -1;
            }
        }
        c->reading = 1;
        c->started = 0;
        c->entry_open = 0;
    }
    if (c->simple == 0 && !c->reading) {
        c->next_ns = return_ns; /* nothing to ack, no time to read: until the end */
        return 0;
    }
    c->batch_rows = c->batch_kept = 0;
    c->state = WAITING;
    return 0;
}

/* A round's replies all in: its read noted as one batch, its entries acked next. */
static int
redis_done(conn *c, int64_t now, int64_t wall_offset_ns, int had_read)
{
    c->received += c->batch_rows;
    if (c->batch_kept && (buf_i64(&c->recv_ns, now + wall_offset_ns) < 0 ||
                          buf_i64(&c->lens, c->batch_kept) < 0)) {
        return -2;
    }
    c->state = c->last ? DONE : IDLE;
    c->empty = had_read && c->batch_rows == 0;
    c->next_ns = now;
    return 0;
}

/* One element of the read's reply (a line at p of l bytes, a bulk's body after it). */
static int
redis_element(conn *c, const char *p, size_t l, const char *body, int64_t v, const spec_t *s)
{
    int d = c->depth, at = c->index[d] + 1;
    /* RESP2: [[key, [entry...]]...]; RESP3: {key: [entry...], ...}: one level less */
    int e = c->resp3 ? d + 1 : d;
    if (p[0] == '*') {
        c->index[d] = at;
        c->left[d]--;
        if (d + 1 >= 8) {
            return -1;
        }
        c->depth = d + 1;
        c->left[d + 1] = v < 0 ? 0 : v;
        c->index[d + 1] = -1;
        return 0;
    }
    if (p[0] != '$') {
        return -1;
    }
    (void)l;
    if (e == 1 && (c->resp3 ? at % 2 == 0 : at == 0) && v >= 0) { /* the stream's key */
        c->key_at = -1;
        for (Py_ssize_t k = 0; k < s->nkeys; k++) {
            if (s->key_lens[k] == v && memcmp(s->keys[k], body, (size_t)v) == 0) {
                c->key_at = (int)k;
            }
        }
        if (c->key_at < 0) {
            return -1;
        }
    } else if (e == 3 && at == 0) { /* an entry's id */
        unsigned char head[3] = {(unsigned char)c->key_at, (unsigned char)(c->key_at >> 8),
                                 (unsigned char)v};
        if (v < 1 || v > 255 || c->entry_open) {
            return -1;
        }
        if (buf_put(&c->rids, head, 3) < 0 || buf_put(&c->rids, body, (size_t)v) < 0) {
            return -2;
        }
        c->rids_n++;
        c->batch_rows++;
        c->entry_open = 1;
    } else if (e == 4 && at % 2 == 0) { /* a field's name */
        c->value_next = v == s->field_len && memcmp(body, s->field, (size_t)v) == 0;
    } else if (e == 4 && c->value_next) { /* the message */
        c->value_next = 0;
        c->entry_open = 0;
        if (v < s->header_bytes) {
            c->shorts++;
        } else if (buf_put(&c->headers, body, (size_t)s->header_bytes) < 0) {
            return -2;
        } else {
            c->kept++;
            c->batch_kept++;
        }
    }
    c->index[d] = at;
    c->left[d]--;
    return 0;
}

/* Parse what was read: the round's integer replies, then its read's, as they come. */
static void
redis_parse(conn *c, int64_t now, int64_t wall_offset_ns, const spec_t *s)
{
    size_t at = 0;
    int step = s->delete_on_ack ? 2 : 1;
    while (c->state == WAITING) {
        if (c->simple == 0 && !c->reading) {
            if (at != c->in.len) {
                fail(c, ST_PROTOCOL, "bytes after the replies");
            } else if (redis_done(c, now, wall_offset_ns, c->started) < 0) {
                fail(c, ST_CONNECTION, "out of memory");
            }
            c->started = 0;
            break;
        }
        const char *p = (const char *)c->in.p + at;
        const char *lf = memchr(p, '\n', c->in.len - at);
        if (lf == NULL) {
            break;
        }
        size_t l = (size_t)(lf - p) + 1;
        if (l < 3 || p[l - 2] != '\r') {
            fail(c, ST_PROTOCOL, "a reply line without CRLF");
            break;
        }
        if (p[0] == '-') {
            char text[MESSAGE_MAX];
            snprintf(text, sizeof text, "%.*s", (int)(l - 3), p + 1);
            fail(c, ST_ERROR, text);
            break;
        }
        int64_t v = 0;
        int digits_ok = p[0] == '_' ? l == 3 : resp_int(p + 1, p + l - 2, &v) == 0;
        if (!digits_ok ||
            (p[0] != ':' && p[0] != '*' && p[0] != '$' && p[0] != '%' && p[0] != '_')) {
            char text[MESSAGE_MAX];
            snprintf(text, sizeof text, "a malformed reply: %.*s", (int)(l < 40 ? l - 2 : 40),
                     p);
            fail(c, ST_PROTOCOL, text);
            break;
        }
        if (p[0] == '_') { /* RESP3's null */
            v = -1;
        }
        if (c->simple > 0) {
            if (p[0] != ':') {
                fail(c, ST_PROTOCOL, "an ack's reply is not an integer");
                break;
            }
            if (c->simple_read % step == 0) { /* XACK's: the entries it acked */
                c->acked += v;
            }
            c->simple--;
            c->simple_read++;
            at += l;
            continue;
        }
        const char *body = NULL;
        if (p[0] == '$' && v >= 0) {
            if (c->in.len - at < l + (size_t)v + 2) {
                break; /* the bulk's body is not all in */
            }
            body = p + l;
        }
        if (!c->started) {
            c->started = 1;
            at += l;
            if (p[0] != '*' && p[0] != '%' && p[0] != '_') {
                fail(c, ST_PROTOCOL, "XREADGROUP's reply is not an array or a map");
                break;
            }
            if (v <= 0) {
                c->reading = 0; /* nothing new */
                continue;
            }
            c->resp3 = p[0] == '%';
            c->depth = 0;
            c->left[0] = c->resp3 ? 2 * v : v;
            c->index[0] = -1;
            continue;
        }
        int r = redis_element(c, p, l, body, v, s);
        if (r == -1) {
            fail(c, ST_PROTOCOL, "an unexpected element in XREADGROUP's reply");
            break;
        }
        if (r == -2) {
            fail(c, ST_CONNECTION, "out of memory");
            break;
        }
        at += l + (body != NULL ? (size_t)v + 2 : 0);
        while (c->depth >= 0 && c->left[c->depth] == 0) {
            c->depth--;
        }
        if (c->depth < 0) {
            if (c->entry_open) {
                fail(c, ST_PROTOCOL, "an entry without the message's field");
                break;
            }
            c->reading = 0;
        }
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
        if (s->proto == PROTO_REDIS) {
            redis_parse(c, now, wall_offset_ns, s);
        } else {
            parse(c, now, wall_offset_ns, s);
        }
        if (c->state != WAITING) {
            return;
        }
    }
}

/* Whether a connection would send a new claim now. */
static int
claim_due(const conn *cs, Py_ssize_t n, int64_t now)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (cs[i].state == IDLE && cs[i].next_ns <= now) {
            return 1;
        }
    }
    return 0;
}

/* Whether wake_fd is readable (a poll that does not wait). */
static int
woken(int wake_fd)
{
    struct pollfd w = {.fd = wake_fd, .events = POLLIN, .revents = 0};
    return poll(&w, 1, 0) > 0 && (w.revents & (POLLIN | POLLHUP | POLLERR));
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
    int first = 1;
    for (;;) {
        int64_t now = monotonic_ns();
        if (now >= return_ns) {
            ending = 1;
        }
        /* a read can take a reply and the next after a statement sent again (a deadlock)
         * without a poll between them: the wake fd is looked at before any new claim, so
         * that no claim goes out once the call was told to end (the first round's claims
         * go out whatever it says: a call takes a batch per connection) */
        if (!ending && !first && claim_due(cs, n, now) && woken(wake_fd)) {
            ending = 1;
        }
        first = 0;
        int64_t wait_ns = ending ? s->timeout_ns : return_ns - now;
        int busy = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            conn *c = &cs[i];
            if (c->state == IDLE) {
                int redis = s->proto == PROTO_REDIS;
                if (ending) {
                    if ((redis ? c->rids_n : (int64_t)c->ids.len) == 0) {
                        c->state = DONE; /* nothing to ack */
                    } else if ((redis ? redis_round(c, s, 0, now, return_ns)
                                      : put_statement(c, s, 0)) < 0) {
                        fail(c, ST_CONNECTION, "out of memory");
                    }
                } else if (c->next_ns <= now && (redis ? redis_round(c, s, s->limit, now, return_ns)
                                                       : put_statement(c, s, s->limit)) < 0) {
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
    free(c->rids.p);
    free(c->in.p);
    free(c->out.p);
    free(c->ids.p);
    free(c->batch_ids.p);
    free(c->headers.p);
    free(c->recv_ns.p);
    free(c->lens.p);
    free(c->flagged.p);
}

/* The call's result: a tuple per connection (see the top of the file; with_again, the
 * statements each sent again last, as PostgreSQL's has it); every connection freed. */
static PyObject *
results_of(conn *cs, Py_ssize_t n, int with_again)
{
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        conn *c = &cs[i];
        const char *message = c->status ? c->message : NULL;
        PyObject *item =
            with_again
                ? Py_BuildValue("(NNNNLLLizL)", bytes_of(&c->headers), bytes_of(&c->recv_ns),
                                bytes_of(&c->lens), bytes_of(&c->flagged),
                                (long long)c->received, (long long)c->shorts,
                                (long long)c->acked, c->status, message, (long long)c->again_n)
                : Py_BuildValue("(NNNNLLLiz)", bytes_of(&c->headers), bytes_of(&c->recv_ns),
                                bytes_of(&c->lens), bytes_of(&c->flagged),
                                (long long)c->received, (long long)c->shorts,
                                (long long)c->acked, c->status, message);
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

static PyObject *
pg_receive(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *fds;
    spec_t s;
    memset(&s, 0, sizeof s);
    long long return_ns, wall_offset_ns, limit, poll_cap_ns, timeout_ns;
    int wake_fd;
    if (!PyArg_ParseTuple(args, "O(y#LdLLn)LLi", &fds, &s.name, &s.name_len, &limit,
                          &s.visibility, &poll_cap_ns, &timeout_ns, &s.header_bytes,
                          &return_ns, &wall_offset_ns, &wake_fd)) {
        return NULL;
    }
    s.proto = PROTO_PG;
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
    return results_of(cs, n, 1);
}

/* redis_receive(conns, spec, return_ns, wall_offset_ns, wake_fd): see the top of the
 * file. conns: (fd, consumer name) per receiver; spec: (group, keys, field, limit,
 * delete_on_ack, poll_cap_ns, timeout_ns, header_bytes). */
static PyObject *
redis_receive(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *conns, *keys;
    spec_t s;
    memset(&s, 0, sizeof s);
    s.proto = PROTO_REDIS;
    long long return_ns, wall_offset_ns, limit, poll_cap_ns, timeout_ns;
    int wake_fd;
    if (!PyArg_ParseTuple(args, "O(y#O!y#LpLLn)LLi", &conns, &s.group, &s.group_len,
                          &PyTuple_Type, &keys, &s.field, &s.field_len, &limit,
                          &s.delete_on_ack, &poll_cap_ns, &timeout_ns, &s.header_bytes,
                          &return_ns, &wall_offset_ns, &wake_fd)) {
        return NULL;
    }
    s.limit = limit;
    s.poll_cap_ns = poll_cap_ns;
    s.timeout_ns = timeout_ns;
    s.nkeys = PyTuple_GET_SIZE(keys);
    if (limit < 1 || s.header_bytes < 0 || timeout_ns < 1 || poll_cap_ns < 1 ||
        poll_cap_ns >= timeout_ns || s.nkeys < 1 || s.nkeys > 65535) {
        PyErr_SetString(PyExc_ValueError,
                        "redis_receive: limit, timeout and poll cap positive, the cap below "
                        "the timeout, 1 to 65535 keys");
        return NULL;
    }
    s.keys = calloc((size_t)s.nkeys, sizeof *s.keys);
    s.key_lens = calloc((size_t)s.nkeys, sizeof *s.key_lens);
    if (s.keys == NULL || s.key_lens == NULL) {
        free(s.keys);
        free(s.key_lens);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < s.nkeys; k++) {
        PyObject *key = PyTuple_GET_ITEM(keys, k);
        if (!PyBytes_Check(key)) {
            free(s.keys);
            free(s.key_lens);
            PyErr_SetString(PyExc_TypeError, "redis_receive: a key is not bytes");
            return NULL;
        }
        s.keys[k] = PyBytes_AS_STRING(key); /* the tuple is held by the caller's args */
        s.key_lens[k] = PyBytes_GET_SIZE(key);
    }
    PyObject *seq = PySequence_Fast(conns, "conns must be a sequence");
    if (seq == NULL) {
        free(s.keys);
        free(s.key_lens);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    conn *cs = calloc(n ? (size_t)n : 1, sizeof *cs);
    if (cs == NULL) {
        Py_DECREF(seq);
        free(s.keys);
        free(s.key_lens);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "iy#;conns: (fd, name)", &fd,
                              &cs[i].name, &cs[i].name_len)) {
            break;
        }
        cs[i].fd = fd;
        cs[i].state = IDLE;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(seq);
        free(cs);
        free(s.keys);
        free(s.key_lens);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS;
    drive(cs, n, &s, return_ns, wall_offset_ns, wake_fd);
    Py_END_ALLOW_THREADS;
    Py_DECREF(seq); /* the names pointed into its bytes until now */
    PyObject *out = results_of(cs, n, 0);
    free(s.keys);
    free(s.key_lens);
    return out;
}

static PyMethodDef methods[] = {
    {"pg_receive", pg_receive, METH_VARARGS, "PostgreSQL receivers driven from one thread."},
    {"redis_receive", redis_receive, METH_VARARGS, "Redis receivers driven from one thread."},
    {"kafka_records", kafka_records, METH_VARARGS, "Kafka record batches read (_kafkarecords.h)."},
    {"rocketmq_popped", rocketmq_popped, METH_VARARGS, "RocketMQ pop answers read (_rocketmqpop.h)."},
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

/* bench/redisrecv.c: the native reference for mqlab's Redis Streams receive path
 * (issue 28). Redis has no consuming benchmark tool of its own, so this is the smallest
 * honest C client doing exactly what mqlab's receiver does, with the same batch and
 * read-ahead: C connections, each a consumer of the group, all driven from one thread
 * (poll), each in a loop of one round trip:
 *
 *   XACK key group <ids> and XDEL key <ids>, for each batch of B entries of its last read
 *   (pipelined, as mqlab's receiver writes a batch's acks without waiting for them), then
 *   XREADGROUP GROUP group <consumer> COUNT P STREAMS key >
 *
 * and reads the replies: the acks' integers, then the read's entries (each entry's id
 * kept for its ack, its value's first 24 bytes, mqlab's header, read: the hand-over).
 * A connection stops when a read comes back empty (the stream drained) or the time is
 * up; its last read's entries are acked before it stops. Hand-written RESP (no
 * hiredis): every reply is parsed once, resumably, as it arrives.
 *
 *   redisrecv HOST PORT KEY GROUP CONNECTIONS P B SECONDS
 *
 * prints one line: "acked N seconds S" (N: entries whose XACK counted them; S: from the
 * first write to the last reply) and exits 0; an error reply or a failure: a line on
 * stderr, exit 1. Its CPU is the caller's to read (rusage). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ID_MAX 48
#define DEPTH 8

typedef struct {
    int fd;
    char consumer[32];
    char *in;          /* bytes read, not yet parsed: in[pos..have) */
    size_t have, pos, cap;
    char *out;         /* bytes to write: out[woff..wlen) */
    size_t wlen, woff, ocap;
    char (*ids)[ID_MAX]; /* the last read's entry ids, n of them */
    int n, idcap;
    int simple;        /* integer replies still due before the read's reply */
    int reading;       /* a read's reply is due */
    int done;          /* stopped */
    /* the read's reply, parsed resumably: a stack of elements left per open array */
    long long left[DEPTH];
    int index[DEPTH];  /* the element's index in its array */
    int depth;
    int started;       /* the reply's first token was seen */
} conn;

static const char *key, *group;
static size_t key_len, group_len;
static int per_read, batch;
static long long acked, headers_sum;

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void
fail(const char *what, const char *detail)
{
    fprintf(stderr, "redisrecv: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static void
reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) {
        return;
    }
    size_t c = *cap ? *cap : 65536;
    while (c < need) {
        c *= 2;
    }
    *buf = realloc(*buf, c);
    if (*buf == NULL) {
        fail("out of memory", NULL);
    }
    *cap = c;
}

static void
put(conn *c, const char *s, size_t len)
{
    reserve(&c->out, &c->ocap, c->wlen + len);
    memcpy(c->out + c->wlen, s, len);
    c->wlen += len;
}

/* kind, n's digits, CRLF (by hand, as mqlab's receive path writes them) */
static void
put_head(conn *c, char kind, size_t n)
{
    char h[24], *e = h + sizeof h, *p = e;
    *--p = '\n';
    *--p = '\r';
    do {
        *--p = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    *--p = kind;
    put(c, p, (size_t)(e - p));
}

static void
put_bulk(conn *c, const char *s, size_t len)
{
    put_head(c, '$', len);
    put(c, s, len);
    put(c, "\r\n", 2);
}

static void
put_array(conn *c, long n)
{
    put_head(c, '*', (size_t)n);
}

/* the acks of the last read's entries, a batch at a time, then (unless stopping) a read */
static void
next_round(conn *c, int read_again)
{
    c->wlen = c->woff = 0;
    c->simple = 0;
    for (int a = 0; a < c->n; a += batch) {
        int k = c->n - a < batch ? c->n - a : batch;
        put_array(c, 3 + k);
        put_bulk(c, "XACK", 4);
        put_bulk(c, key, key_len);
        put_bulk(c, group, group_len);
        for (int i = 0; i < k; i++) {
            put_bulk(c, c->ids[a + i], strlen(c->ids[a + i]));
        }
        put_array(c, 2 + k);
        put_bulk(c, "XDEL", 4);
        put_bulk(c, key, key_len);
        for (int i = 0; i < k; i++) {
            put_bulk(c, c->ids[a + i], strlen(c->ids[a + i]));
        }
        c->simple += 2;
    }
    c->n = 0;
    c->reading = read_again;
    if (read_again) {
        char count[16];
        int cl = snprintf(count, sizeof count, "%d", per_read);
        put_array(c, 9);
        put_bulk(c, "XREADGROUP", 10);
        put_bulk(c, "GROUP", 5);
        put_bulk(c, group, group_len);
        put_bulk(c, c->consumer, strlen(c->consumer));
        put_bulk(c, "COUNT", 5);
        put_bulk(c, count, (size_t)cl);
        put_bulk(c, "STREAMS", 7);
        put_bulk(c, key, key_len);
        put_bulk(c, ">", 1);
    }
}

/* one line token at in[pos..): its length through CRLF, or 0 when not all in */
static size_t
line_len(const conn *c)
{
    const char *p = c->in + c->pos;
    const char *lf = memchr(p, '\n', c->have - c->pos);
    return lf == NULL ? 0 : (size_t)(lf - p) + 1;
}

/* Parses what the buffer holds: 1 when the due replies are all in, 0 when more are
 * needed; an error reply or a reply out of step ends the program. */
static int
parse(conn *c)
{
    while (c->simple > 0) {
        size_t l = line_len(c);
        if (l == 0) {
            return 0;
        }
        const char *p = c->in + c->pos;
        if (p[0] == '-') {
            fail("error reply", p);
        }
        if (p[0] != ':') {
            fail("unexpected reply to an ack", NULL);
        }
        if (c->simple % 2 == 0) { /* XACK's (XDEL's follows) */
            acked += strtoll(p + 1, NULL, 10);
        }
        c->pos += l;
        c->simple--;
    }
    if (!c->reading) {
        return 1;
    }
    for (;;) {
        size_t l = line_len(c);
        if (l == 0) {
            return 0;
        }
        const char *p = c->in + c->pos;
        long long v = strtoll(p + 1, NULL, 10);
        if (p[0] == '-') {
            fail("error reply", p);
        }
        if (!c->started) {
            c->started = 1;
            if (p[0] != '*') {
                fail("unexpected reply to XREADGROUP", NULL);
            }
            c->pos += l;
            if (v <= 0) { /* nil or empty: nothing new */
                c->started = 0;
                c->reading = 0;
                return 1;
            }
            c->depth = 0;
            c->left[0] = v;
            c->index[0] = -1;
            continue;
        }
        /* the element at depth+1 of the array open at depth */
        int d = c->depth;
        int at = c->index[d] + 1; /* this element's index in its array */
        if (p[0] == '*') {
            c->pos += l;
            c->index[d] = at;
            c->left[d]--;
            if (d + 1 >= DEPTH) {
                fail("reply nested too deep", NULL);
            }
            c->depth = d + 1;
            c->left[d + 1] = v < 0 ? 0 : v;
            c->index[d + 1] = -1;
        } else if (p[0] == '$') {
            if (v < 0) {
                c->pos += l;
            } else {
                if (c->have - c->pos < l + (size_t)v + 2) {
                    return 0; /* the bulk's payload is not all in */
                }
                const char *body = p + l;
                /* depth 3: an entry [id, fields]; depth 4: its fields [name, value] */
                if (d == 3 && at == 0) {
                    if (v >= ID_MAX) {
                        fail("an entry id too long", NULL);
                    }
                    if (c->n == c->idcap) {
                        c->idcap = c->idcap ? 2 * c->idcap : 256;
                        c->ids = realloc(c->ids, (size_t)c->idcap * ID_MAX);
                        if (c->ids == NULL) {
                            fail("out of memory", NULL);
                        }
                    }
                    memcpy(c->ids[c->n], body, (size_t)v);
                    c->ids[c->n][v] = '\0';
                    c->n++;
                } else if (d == 4 && at == 1 && v >= 24) { /* the value: mqlab's header */
                    uint64_t seq;
                    memcpy(&seq, body + 8, 8);
                    headers_sum += (long long)seq;
                }
                c->pos += l + (size_t)v + 2;
            }
            c->index[d] = at;
            c->left[d]--;
        } else {
            fail("unexpected element in XREADGROUP's reply", NULL);
        }
        while (c->depth >= 0 && c->left[c->depth] == 0) { /* arrays closed */
            c->depth--;
        }
        if (c->depth < 0) {
            c->started = 0;
            c->reading = 0;
            return 1;
        }
    }
}

static int
connect_to(const char *host, const char *port)
{
    struct addrinfo hints = {0}, *res;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        fail("getaddrinfo", gai_strerror(rc));
    }
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
        fail("connect", strerror(errno));
    }
    freeaddrinfo(res);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void
write_out(conn *c)
{
    while (c->woff < c->wlen) {
        ssize_t w = send(c->fd, c->out + c->woff, c->wlen - c->woff, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return;
            }
            fail("send", strerror(errno));
        }
        c->woff += (size_t)w;
    }
}

static void
start_round(conn *c, int read_again)
{
    next_round(c, read_again);
    write_out(c);
}

int
main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: redisrecv HOST PORT KEY GROUP CONNECTIONS P B SECONDS\n");
        return 2;
    }
    key = argv[3];
    key_len = strlen(key);
    group = argv[4];
    group_len = strlen(group);
    int n = atoi(argv[5]);
    per_read = atoi(argv[6]);
    batch = atoi(argv[7]);
    double seconds = atof(argv[8]);
    if (n < 1 || n > 1024 || per_read < 1 || batch < 1 || seconds <= 0) {
        fprintf(stderr, "redisrecv: CONNECTIONS 1..1024, P >= 1, B >= 1, SECONDS > 0\n");
        return 2;
    }
    conn *cs = calloc((size_t)n, sizeof *cs);
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    if (cs == NULL || pf == NULL) {
        fail("out of memory", NULL);
    }
    for (int i = 0; i < n; i++) {
        cs[i].fd = connect_to(argv[1], argv[2]);
        snprintf(cs[i].consumer, sizeof cs[i].consumer, "redisrecv-%d", i);
    }
    int64_t t0 = now_ns(), end = t0 + (int64_t)(seconds * 1e9), last = t0;
    for (int i = 0; i < n; i++) {
        start_round(&cs[i], 1);
    }
    int going = n;
    while (going > 0) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (!cs[i].done) {
                pf[k].fd = cs[i].fd;
                pf[k].events = (short)(POLLIN | (cs[i].woff < cs[i].wlen ? POLLOUT : 0));
                pf[k].revents = 0;
                k++;
            }
        }
        if (poll(pf, (nfds_t)k, 10000) < 0 && errno != EINTR) {
            fail("poll", strerror(errno));
        }
        k = 0;
        for (int i = 0; i < n; i++) {
            conn *c = &cs[i];
            if (c->done) {
                continue;
            }
            short ev = pf[k++].revents;
            if (ev & POLLOUT) {
                write_out(c);
            }
            if (!(ev & (POLLIN | POLLERR | POLLHUP))) {
                continue;
            }
            for (;;) {
                if (c->pos > 0) { /* the parsed bytes go */
                    memmove(c->in, c->in + c->pos, c->have - c->pos);
                    c->have -= c->pos;
                    c->pos = 0;
                }
                reserve(&c->in, &c->cap, c->have + 65536);
                ssize_t got = recv(c->fd, c->in + c->have, c->cap - c->have, MSG_DONTWAIT);
                if (got < 0) {
                    if (errno == EINTR) {
                        continue;
                    }
                    if (errno == EAGAIN || errno == EWOULDBLOCK) {
                        break;
                    }
                    fail("recv", strerror(errno));
                }
                if (got == 0) {
                    fail("the server closed the connection", NULL);
                }
                c->have += (size_t)got;
                if (parse(c)) {
                    last = now_ns();
                    if (c->pos != c->have) {
                        fail("bytes after the replies", NULL);
                    }
                    if (c->n == 0) { /* a read came back empty, or the last acks are in */
                        c->done = 1;
                        going--;
                        break;
                    }
                    start_round(c, last < end); /* its acks, and a read while there is time */
                }
            }
        }
    }
    printf("acked %lld seconds %.6f headers %lld\n", acked, (double)(last - t0) / 1e9,
           headers_sum);
    return 0;
}

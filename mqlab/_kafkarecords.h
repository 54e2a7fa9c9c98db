/* Kafka's record batches (magic 2), as a fetch answer carries them, read for mqlab's
 * Kafka receivers in lanes (mqlab/brokers/kafka/lanes.py); included by _recvpath.c.
 *
 *   kafka_records(records, fetch_offset, mark, header_bytes)
 *     -> (headers, received, short, flagged, next_offset, first_offset, skipped, hole)
 *
 * records: one partition's record set of a Fetch answer (batches back to back; the last
 * may be cut short by the answer's size limit: it is left for the next fetch). A batch
 * is an i64 base offset, an i32 length of the rest, then (big endian) the leader epoch,
 * magic (2), CRC, i16 attributes (codec: bits 0-2; control batch: bit 5), i32 last
 * offset delta, two i64 timestamps, producer id, epoch, base sequence, i32 record
 * count, then the records: each a zigzag varint length, attributes, varint timestamp
 * and offset deltas, key and value (zigzag varint length, -1: null), headers.
 *
 * Each record at or after fetch_offset is received: its value's first header_bytes go
 * to headers (a null or shorter value is counted short); those kept whose offset is at
 * or below mark (the highest offset delivered before: a redelivery) are counted
 * flagged, and since offsets rise they are the first ``flagged`` of headers. Control
 * batches (transaction markers) are passed over. next_offset: the offset after the last
 * whole batch read (fetch_offset if none); first_offset: the first record received, -1
 * if none; skipped: offsets from fetch_offset to next_offset that no record or control
 * batch holds (a log compacted, or a fetch that left records out: tansu did under
 * concurrent produce); hole: the first such offset, -1 if none. A compressed batch, another magic or a malformed one is a ValueError. The
 * batches' CRCs are not checked (librdkafka's default, check.crcs false). */
#ifndef MQLAB_KAFKARECORDS_H
#define MQLAB_KAFKARECORDS_H

#define KR_BATCH_HEAD 61 /* base offset .. record count */

static uint64_t
kr_be(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* a zigzag varint at *p (before end), *p moved past it; -1 if malformed */
static int
kr_varint(const unsigned char **p, const unsigned char *end, int64_t *out)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end) {
            return -1;
        }
        unsigned char b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(x >> 1) ^ -(int64_t)(x & 1);
            return 0;
        }
    }
    return -1;
}

static PyObject *
kr_malformed(const char *what, int64_t offset)
{
    PyErr_Format(PyExc_ValueError, "kafka records: %s (batch at offset %lld)", what,
                 (long long)offset);
    return NULL;
}

static PyObject *
kafka_records(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer in;
    long long fetch_offset, mark;
    Py_ssize_t hb;
    if (!PyArg_ParseTuple(args, "y*LLn", &in, &fetch_offset, &mark, &hb)) {
        return NULL;
    }
    if (hb < 1 || hb > 4096) {
        PyBuffer_Release(&in);
        PyErr_SetString(PyExc_ValueError, "kafka records: header_bytes out of 1 .. 4096");
        return NULL;
    }
    const unsigned char *buf = in.buf;
    size_t len = (size_t)in.len, pos = 0;
    char *heads = NULL;
    size_t cap = 0, kept = 0;
    long long received = 0, shorts = 0, flagged = 0, skipped = 0;
    int64_t next = fetch_offset, first = -1, expect = fetch_offset, hole = -1;
    PyObject *out = NULL;
    while (len - pos >= 12) {
        int64_t base = (int64_t)kr_be(buf + pos, 8);
        uint64_t blen = kr_be(buf + pos + 8, 4);
        if (blen < KR_BATCH_HEAD - 12 || blen > 0x7fffffff) {
            kr_malformed("a batch length out of range", base);
            goto done;
        }
        if (len - pos - 12 < blen) {
            break; /* cut short by the answer's size limit: fetched again next time */
        }
        const unsigned char *b = buf + pos + 12, *end = b + blen;
        if (b[4] != 2) {
            kr_malformed("not a magic 2 batch", base);
            goto done;
        }
        unsigned attrs = (unsigned)kr_be(b + 9, 2);
        int64_t last = base + (int64_t)(int32_t)kr_be(b + 11, 4);
        int64_t count = (int64_t)(int32_t)kr_be(b + 45, 4);
        pos += 12 + (size_t)blen;
        if (attrs & 0x20) { /* a control batch: no data */
            next = last + 1 > next ? last + 1 : next;
            expect = next > expect ? next : expect;
            continue;
        }
        if (attrs & 7) {
            kr_malformed("a compressed batch (mqlab's Kafka lanes read uncompressed ones)", base);
            goto done;
        }
        const unsigned char *r = b + 49;
        for (int64_t i = 0; i < count; i++) {
            int64_t rlen, skip, delta, klen, vlen;
            if (kr_varint(&r, end, &rlen) < 0 || rlen < 1 || rlen > end - r) {
                kr_malformed("a record length out of its batch", base);
                goto done;
            }
            const unsigned char *rend = r + rlen;
            r++; /* attributes */
            if (kr_varint(&r, rend, &skip) < 0 || kr_varint(&r, rend, &delta) < 0 ||
                kr_varint(&r, rend, &klen) < 0 || klen < -1 || klen > rend - r) {
                kr_malformed("a malformed record", base);
                goto done;
            }
            if (klen > 0) {
                r += klen;
            }
            if (kr_varint(&r, rend, &vlen) < 0 || vlen < -1 || vlen > rend - r) {
                kr_malformed("a malformed record value", base);
                goto done;
            }
            int64_t offset = base + delta;
            if (offset >= fetch_offset) {
                if (offset > expect) {
                    skipped += offset - expect;
                    hole = hole < 0 ? expect : hole;
                }
                expect = offset + 1;
                received++;
                if (first < 0) {
                    first = offset;
                }
                if (vlen >= hb) {
                    if ((kept + 1) * (size_t)hb > cap) {
                        size_t want = cap ? 2 * cap : 256 * (size_t)hb;
                        char *grown = PyMem_Realloc(heads, want);
                        if (grown == NULL) {
                            PyErr_NoMemory();
                            goto done;
                        }
                        heads = grown;
                        cap = want;
                    }
                    memcpy(heads + kept * (size_t)hb, r, (size_t)hb);
                    kept++;
                    if (offset <= mark) {
                        flagged++;
                    }
                } else {
                    shorts++;
                }
                next = offset + 1 > next ? offset + 1 : next;
            }
            r = rend;
        }
        next = last + 1 > next ? last + 1 : next;
        if (last >= expect) { /* the batch's last offsets hold no record */
            skipped += last + 1 - expect;
            hole = hole < 0 ? expect : hole;
            expect = last + 1;
        }
    }
    out = Py_BuildValue("(y#LLLLLLL)", heads != NULL ? heads : "", (Py_ssize_t)(kept * (size_t)hb),
                        received, shorts, flagged, (long long)next, (long long)first, skipped,
                        (long long)hole);
done:
    PyMem_Free(heads);
    PyBuffer_Release(&in);
    return out;
}

#endif

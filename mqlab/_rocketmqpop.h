/* RocketMQ's pop answers, read for mqlab's RocketMQ receivers in lanes
 * (mqlab/brokers/rocketmq/lanes.py through popping.popped_headers); included by
 * _recvpath.c.
 *
 *   rocketmq_popped(body, header_bytes) -> None | (headers, messages, short, queues)
 *
 * body: a successful POP_MESSAGE answer's body, its stored messages back to back
 * (MessageDecoder's layout, big endian: i32 size, i32 magic, i32 body CRC, i32 queue
 * id, i32 flag, i64 queue offset, i64 commit log offset, i32 sysFlag, i64 born time,
 * born host (8 bytes with IPv4), i64 store time, store host (8 with IPv4), i32
 * reconsume times, i64 prepared transaction offset, i32 body length, the body, the
 * topic's length (1 byte with magic V1) and the topic, then the properties).
 *
 * Only the common case is read here: every message stored with magic V1, IPv4 hosts,
 * uncompressed, popped for the first time (reconsume times 0), within the body, and at
 * most RP_QUEUES (topic, queue id) pairs whose offsets lie within 64 of the pair's
 * first in the pop and not before it. Anything else (a revived or redelivered message,
 * another layout, a malformed body) gives None, and the caller reads the whole answer
 * in Python, which knows every case and names what is wrong.
 *
 * headers: each message's first header_bytes, in order (a body shorter than that has
 * none and is counted in short, by its index in the pop); messages: how many; queues:
 * a tuple (topic bytes, queue id, first offset, bits) per pair in order of first
 * appearance, bit i of bits set for the message at offset first + i (its batch ack's
 * bits before they are shifted to the checkpoint's offset). */
#ifndef MQLAB_ROCKETMQPOP_H
#define MQLAB_ROCKETMQPOP_H

#include "_kafkarecords.h" /* kr_be */

#define RP_HEAD 88 /* size .. body length, with IPv4 hosts */
#define RP_MAGIC_V1 (-626843481)
#define RP_ODD_SYSFLAG (0x1 | 0x10 | 0x20) /* compressed, born host IPv6, store host IPv6 */
#define RP_QUEUES 64

typedef struct {
    const unsigned char *topic;
    Py_ssize_t topic_len;
    int32_t queue;
    int64_t first;
    uint64_t bits;
} rp_queue;

/* big-endian fields, read with the Kafka reader's kr_be */
#define RP_I32(p) ((int64_t)(int32_t)(uint32_t)kr_be((p), 4))
#define RP_I64(p) ((int64_t)kr_be((p), 8))

/* the queues' tuple list, or NULL with an exception */
static PyObject *
rp_queues(const rp_queue *queues, int n)
{
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(y#iLK)", (const char *)queues[i].topic,
                                    queues[i].topic_len, (int)queues[i].queue,
                                    (long long)queues[i].first,
                                    (unsigned long long)queues[i].bits);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *
rocketmq_popped(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer in;
    Py_ssize_t hb;
    if (!PyArg_ParseTuple(args, "y*n", &in, &hb)) {
        return NULL;
    }
    if (hb < 1 || hb > 4096) {
        PyBuffer_Release(&in);
        PyErr_SetString(PyExc_ValueError, "rocketmq popped: header_bytes out of 1 .. 4096");
        return NULL;
    }
    const unsigned char *data = in.buf;
    Py_ssize_t end = in.len;
    rp_queue queues[RP_QUEUES];
    int nq = 0;
    Py_ssize_t messages = 0, kept = 0;
    PyObject *short_list = NULL, *headers = NULL, *qlist = NULL, *out = NULL;
    int plain = 1;

    /* a first pass checks every message and counts the headers kept */
    for (Py_ssize_t pos = 0; pos < end;) {
        if (end - pos < RP_HEAD) {
            plain = 0;
            break;
        }
        const unsigned char *m = data + pos;
        int64_t size = RP_I32(m);
        int64_t blen = RP_I32(m + 84);
        if (size <= RP_HEAD || size > end - pos || RP_I32(m + 4) != RP_MAGIC_V1 ||
            (RP_I32(m + 36) & RP_ODD_SYSFLAG) || RP_I32(m + 72) != 0 || blen < 0 ||
            RP_HEAD + blen >= size || RP_HEAD + blen + 1 + m[RP_HEAD + blen] > size) {
            plain = 0;
            break;
        }
        const unsigned char *topic = m + RP_HEAD + blen + 1;
        Py_ssize_t topic_len = m[RP_HEAD + blen];
        int32_t queue = (int32_t)RP_I32(m + 12);
        int64_t offset = RP_I64(m + 20);
        int q = 0;
        while (q < nq && !(queues[q].queue == queue && queues[q].topic_len == topic_len &&
                           memcmp(queues[q].topic, topic, (size_t)topic_len) == 0)) {
            q++;
        }
        if (q == nq) {
            if (nq == RP_QUEUES) {
                plain = 0;
                break;
            }
            queues[nq++] = (rp_queue){topic, topic_len, queue, offset, 0};
        }
        int64_t bit = offset - queues[q].first;
        if (bit < 0 || bit >= 64) {
            plain = 0;
            break;
        }
        queues[q].bits |= (uint64_t)1 << bit;
        kept += blen >= hb;
        messages++;
        pos += (Py_ssize_t)size;
    }
    if (!plain) {
        PyBuffer_Release(&in);
        Py_RETURN_NONE;
    }
    headers = PyBytes_FromStringAndSize(NULL, kept * hb);
    short_list = PyList_New(0);
    if (headers == NULL || short_list == NULL) {
        goto done;
    }
    char *h = PyBytes_AS_STRING(headers);
    Py_ssize_t i = 0;
    for (Py_ssize_t pos = 0; pos < end; i++) {
        const unsigned char *m = data + pos;
        if (RP_I32(m + 84) >= hb) {
            memcpy(h, m + RP_HEAD, (size_t)hb);
            h += hb;
        } else {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(short_list, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
        }
        pos += (Py_ssize_t)RP_I32(m);
    }
    qlist = rp_queues(queues, nq);
    if (qlist != NULL) {
        out = Py_BuildValue("(OnOO)", headers, messages, short_list, qlist);
    }
done:
    PyBuffer_Release(&in);
    Py_XDECREF(headers);
    Py_XDECREF(short_list);
    Py_XDECREF(qlist);
    return out;
}

#endif

/* Apache Pulsar's binary protocol, the little of it a sender's lane writes and reads
 * (mqlab/_sendpath.c, PROTO_PULSAR; the handshake is mqlab/brokers/pulsar/lane.py).
 *
 * A frame is a big-endian u32 total size (of what follows), a u32 command size and the
 * command, a protobuf BaseCommand (PulsarApi.proto: field 1 its type, the command itself
 * in the field numbered as its type). A SEND frame goes on with the magic 0x0e01, a
 * CRC-32C (Castagnoli) of everything after it, a u32 metadata size, the MessageMetadata
 * (producer_name 1, sequence_id 2, publish_time 3 in ms, uncompressed_size 9) and the
 * message. The broker answers each SEND with a SEND_RECEIPT (producer_id 1, sequence_id
 * 2) once the message is persisted, in the order sent, or a SEND_ERROR (producer_id 1,
 * sequence_id 2, error 3, message 4); it may send PING (answered with PONG) and
 * CLOSE_PRODUCER (the topic is moving: the producer must be made again). */
#ifndef MQLAB_PULSARWIRE_H
#define MQLAB_PULSARWIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
    PW_SEND = 6,
    PW_SEND_RECEIPT = 7,
    PW_SEND_ERROR = 8,
    PW_CLOSE_PRODUCER = 15,
    PW_PING = 18,
    PW_PONG = 19
};

#define PW_NAME_MAX 127 /* a producer name's length fits one varint byte */
#define PW_PONG_LEN 13

/* BaseCommand{type: PONG, pong: {}} in its frame */
static const unsigned char PW_PONG_FRAME[PW_PONG_LEN] = {0, 0, 0, 9, 0, 0, 0, 5,
                                                          0x08, 0x13, 0x9a, 0x01, 0x00};

static void
pw_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t
pw_get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static unsigned char *
pw_varint(unsigned char *w, uint64_t v)
{
    while (v >= 0x80) {
        *w++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *w++ = (unsigned char)v;
    return w;
}

/* the varint at *p (before end), *p moved past it; -1 if malformed */
static int
pw_get_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) {
            return -1;
        }
        unsigned char b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* CRC-32C: SSE 4.2's instruction where the CPU has it, else a table */
static uint32_t pw_crc_table[256];
static int pw_crc_hw = -1; /* unknown yet */

static void
pw_crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
        pw_crc_table[i] = c;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    pw_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    pw_crc_hw = 0;
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t
pw_crc32c_hw(const unsigned char *p, size_t n)
{
    uint64_t c = 0xffffffffu;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n > 0; n--) {
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    }
    return ~c32;
}
#endif

static uint32_t
pw_crc32c(const unsigned char *p, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (pw_crc_hw == 1) {
        return pw_crc32c_hw(p, n);
    }
#endif
    uint32_t c = 0xffffffffu;
    while (n--) {
        c = pw_crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    }
    return ~c;
}

/* A SEND frame's length at most, for a message of payload_len bytes */
static size_t
pw_send_frame_max(size_t name_len, size_t payload_len)
{
    return 8 + (2 + 2 + 11 + 11) + 2 + 4 + 4 + (2 + name_len + 11 + 11 + 6) + payload_len;
}

/* One SEND frame at w (its message: head, head_len bytes, then pad, pad_len): its end */
static unsigned char *
pw_send_frame(unsigned char *w, uint64_t producer_id, const char *name, size_t name_len,
              uint64_t sequence_id, uint64_t publish_ms, const unsigned char *head,
              size_t head_len, const char *pad, size_t pad_len)
{
    unsigned char *frame = w;
    w += 8;
    unsigned char *cmd = w;
    *w++ = 0x08; /* type */
    *w++ = PW_SEND;
    *w++ = (PW_SEND << 3) | 2; /* send: CommandSend */
    unsigned char *send_len = w++;
    unsigned char *send = w;
    *w++ = 0x08; /* producer_id */
    w = pw_varint(w, producer_id);
    *w++ = 0x10; /* sequence_id */
    w = pw_varint(w, sequence_id);
    *send_len = (unsigned char)(w - send); /* at most 22 */
    uint32_t cmd_len = (uint32_t)(w - cmd);
    *w++ = 0x0e; /* the magic: a checksum follows */
    *w++ = 0x01;
    unsigned char *crc_at = w;
    w += 4;
    unsigned char *meta_size_at = w;
    w += 4;
    unsigned char *meta = w;
    *w++ = 0x0a; /* producer_name */
    *w++ = (unsigned char)name_len;
    memcpy(w, name, name_len);
    w += name_len;
    *w++ = 0x10; /* sequence_id */
    w = pw_varint(w, sequence_id);
    *w++ = 0x18; /* publish_time */
    w = pw_varint(w, publish_ms);
    *w++ = 0x48; /* uncompressed_size */
    w = pw_varint(w, head_len + pad_len);
    pw_be32(meta_size_at, (uint32_t)(w - meta));
    memcpy(w, head, head_len);
    w += head_len;
    memcpy(w, pad, pad_len);
    w += pad_len;
    pw_be32(crc_at, pw_crc32c(meta_size_at, (size_t)(w - meta_size_at)));
    pw_be32(frame, (uint32_t)(w - frame - 4));
    pw_be32(frame + 4, cmd_len);
    return w;
}

/* What a lane reads of a frame from the broker */
typedef struct {
    uint64_t type, producer_id, sequence_id, error;
    const char *message; /* SEND_ERROR's message (message_len bytes), else NULL */
    size_t message_len;
} pw_reply;

/* skips the field of wire type wt at *p; -1 if malformed */
static int
pw_skip(const unsigned char **p, const unsigned char *end, uint64_t wt)
{
    uint64_t v;
    switch (wt) {
    case 0:
        return pw_get_varint(p, end, &v);
    case 1:
    case 5: {
        size_t k = wt == 1 ? 8 : 4;
        if ((size_t)(end - *p) < k) {
            return -1;
        }
        *p += k;
        return 0;
    }
    case 2:
        if (pw_get_varint(p, end, &v) < 0 || v > (uint64_t)(end - *p)) {
            return -1;
        }
        *p += v;
        return 0;
    default:
        return -1;
    }
}

/* The frame at buf (avail bytes there, at most max in a frame) read into out: its length,
 * 0 when more bytes are needed, -1 when it is malformed, -2 when longer than max. */
static long
pw_parse(const unsigned char *buf, size_t avail, size_t max, pw_reply *out)
{
    if (avail < 4) {
        return 0;
    }
    uint32_t total = pw_get_be32(buf);
    if ((size_t)total + 4 > max) {
        return -2;
    }
    if (avail < (size_t)total + 4) {
        return 0;
    }
    if (total < 4 || pw_get_be32(buf + 4) > total - 4) {
        return -1;
    }
    const unsigned char *p = buf + 8, *end = p + pw_get_be32(buf + 4);
    const unsigned char *sub = NULL, *sub_end = NULL;
    memset(out, 0, sizeof *out);
    while (p < end) {
        uint64_t key, v;
        if (pw_get_varint(&p, end, &key) < 0) {
            return -1;
        }
        uint64_t field = key >> 3, wt = key & 7;
        if (field == 1 && wt == 0) {
            if (pw_get_varint(&p, end, &out->type) < 0) {
                return -1;
            }
        } else if (wt == 2 && (field == PW_SEND_RECEIPT || field == PW_SEND_ERROR ||
                               field == PW_CLOSE_PRODUCER)) {
            if (pw_get_varint(&p, end, &v) < 0 || v > (uint64_t)(end - p)) {
                return -1;
            }
            sub = p;
            sub_end = p + v;
            p += v;
        } else if (pw_skip(&p, end, wt) < 0) {
            return -1;
        }
    }
    if (sub != NULL) {
        for (p = sub; p < sub_end;) {
            uint64_t key, v;
            if (pw_get_varint(&p, sub_end, &key) < 0) {
                return -1;
            }
            uint64_t field = key >> 3, wt = key & 7;
            if (wt == 0 && field >= 1 && field <= 3) {
                if (pw_get_varint(&p, sub_end, &v) < 0) {
                    return -1;
                }
                *(field == 1 ? &out->producer_id : field == 2 ? &out->sequence_id : &out->error) = v;
            } else if (wt == 2 && field == 4 && out->type == PW_SEND_ERROR) {
                if (pw_get_varint(&p, sub_end, &v) < 0 || v > (uint64_t)(sub_end - p)) {
                    return -1;
                }
                out->message = (const char *)p;
                out->message_len = (size_t)v;
                p += v;
            } else if (pw_skip(&p, sub_end, wt) < 0) {
                return -1;
            }
        }
    }
    return (long)total + 4;
}

#endif

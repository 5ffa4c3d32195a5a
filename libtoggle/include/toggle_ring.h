/*
 * toggle_ring.h - the data ring: activations from an agent to toggled.
 *
 * One ring per agent, separate from the control/status region of
 * toggle_shm.h.  The agent (libtoggle, in the inference process) creates it
 * (memfd, sealed against resizing), registers the whole mapping with the
 * CUDA driver as page-locked memory, and after a replay copies each enabled
 * hook's monitor buffer into it with cuMemcpyDtoHAsync (from a device
 * staging area on a stream of its own, or on the replay's stream:
 * toggle_record.h); when the event recorded after those copies has completed, it
 * publishes the records by advancing head.  toggled maps the same memfd,
 * reads the published records, forwards them to recording clients and
 * releases them by advancing tail.  Needs no CUDA: toggled includes it.
 *
 * ---- The region ----------------------------------------------------------
 *
 *   offset 0      struct toggle_ring_header    (128 B)  agent, once, then read-only
 *   offset 128    struct toggle_ring_producer  (128 B)  agent writes, daemon reads
 *   offset 256    struct toggle_ring_consumer  (128 B)  daemon writes, agent reads: tail
 *   offset 384    struct toggle_ring_request   (<3.7 KiB) daemon writes, agent reads
 *   offset 4096   data area, capacity bytes
 *   total_size = TOGGLE_RING_DATA_OFFSET + capacity (a multiple of the page)
 *
 * Every field is a 64-bit word (or, in records, a naturally aligned word),
 * accessed with C11-style atomics where the other side may be writing
 * (__atomic_load_n / __atomic_store_n, acquire/release where said).  The
 * producer and consumer areas sit on their own 128-byte blocks so that the
 * agent's head and the daemon's tail never share a cache line (nor an
 * adjacent-line prefetch pair).
 *
 * ---- Positions -----------------------------------------------------------
 *
 * head and tail are byte counts since creation, never wrapped: 64-bit,
 * monotone, multiples of TOGGLE_RING_ALIGN.  A position p lies at data
 * offset p % capacity (capacity is a power of two, so p & (capacity - 1)).
 * Invariant: tail <= head <= tail + capacity.
 *   head (producer.head): written by the agent only, with a release store,
 *     after every byte of every record below it is complete (header and
 *     payload: the copies' event has completed).  Bytes in [tail, head)
 *     belong to the consumer; the agent does not write them.
 *   tail (consumer.tail): written by the daemon only, with a release store,
 *     after it is done reading every byte below it.  Bytes outside
 *     [tail, head) belong to the agent, which may be writing into them
 *     (the DMA of copies not yet published).
 * The agent keeps a private reservation position (>= head): records are
 * laid out, their headers written and their copies enqueued at the
 * reservation; head catches up when the copies complete, in order.
 *
 * ---- Records -------------------------------------------------------------
 *
 * A record is a struct toggle_ring_record (128 B) followed by its payload,
 * the whole padded to TOGGLE_RING_ALIGN; record.length is that padded total.
 * The payload starts 128 B into the record, so it is 128-byte aligned (the
 * DMA's destination).  Kinds:
 *   DATA - one hook's monitor buffer after one replay (or one eager run of
 *          the registered op): payload_len bytes, dtype and shape say what
 *          they hold (shape product * element size == payload_len).
 *   PAD  - skip length bytes.  Written (a) where a record would straddle
 *          the end of the data area: a PAD fills from there to the end and
 *          the record starts at offset 0 (a record NEVER straddles the end);
 *          (b) in place of a DATA record whose copy failed or whose event
 *          reported an error: its bytes are not what the header says, so
 *          the agent rewrites the header as a PAD before publishing.
 * Every record, PAD included, carries seq: 0, 1, 2, ... with no gap, in
 * position order (the consumer checks it: a gap means a forged or stale
 * record).  Dropped records take no seq and no space; DATA records carry
 * the drop count at the time they were written (dropped), so a consumer
 * sees where drops happened.  checksum is FNV-1a 64 (toggle_ring_fnv1a)
 * over the record header's first 120 bytes: it catches a header read from
 * a position the agent never published (a bug on either side); it is no
 * defence against a hostile agent, which the checks below are.
 *
 * ---- Who asks for what: the request area ---------------------------------
 *
 * The agent records only while the daemon asks it to, and only what it
 * asks: the request area holds a session number and a record set, under a
 * seqlock (seq odd: being written).  session 0: recording off, the agent
 * writes nothing.  session != 0: after each replay (and each eager run of
 * the op) the agent records every hook that is (1) in the set its step
 * runs with (toggle_step_begin's), (2) in the replayed graph (for a
 * replay), (3) in the request's set, and (4) given a monitor buffer
 * (toggle_record_buffer in toggle.h; Python declares them from attach()).
 * The daemon enables the hooks themselves as it enables anything (the
 * standing set or a plan, item 2 of issue 24): the request set only selects
 * among what runs, so a recording never changes what the engine computes.
 * A new recording writes a new session number (never reused, say
 * increasing); every record carries the session it was written for, and a
 * consumer drops records of another session (those reserved before the
 * agent saw the change).  The agent reads the request when its seq changed
 * since it last looked (one acquire load per replay while a ring exists).
 *
 * ---- How the ring reaches toggled ----------------------------------------
 *
 * After RegisterAgentReply, on the same connection, the agent sends
 * RegisterRingRequest { ring_size } (Envelope field register_ring = 22)
 * with the ring's memfd as the one SCM_RIGHTS fd of that frame, exactly as
 * RegisterAgentRequest carries the control region's fd.  The daemon
 * answers RegisterRingReply {} (Envelope field register_ring_reply = 23)
 * or an Error; an Error with ERROR_CODE_UNIMPLEMENTED (a daemon without
 * rings) is not a failure: the agent stays registered and records nothing.
 * Sent again after every reconnect (a daemon restart maps the same ring:
 * its consumer state restarts from the producer's head, see
 * toggle_ring_reader_open).  Envelope numbers 22 and 23 are this; the
 * recording RPCs of togglectl record are numbered by the daemon side.
 *
 * ---- What a consumer must validate (the agent is an adversary) -----------
 *
 * The agent may rewrite any byte of the region at any moment.  toggled:
 *   1. fd: regular file, sealed F_SEAL_SHRINK|F_SEAL_GROW, size ==
 *      TOGGLE_RING_DATA_OFFSET + capacity with capacity from the header
 *      copy, and ring_size of RegisterRingRequest equal to it;
 *   2. header: copied once (pread), magic, layout version, header_size,
 *      record alignment == TOGGLE_RING_ALIGN, capacity a power of two in
 *      [TOGGLE_RING_MIN_CAPACITY, TOGGLE_RING_MAX_CAPACITY]; never re-read;
 *   3. head: loaded once per poll (acquire); monotone (>= the last head it
 *      saw), a multiple of TOGGLE_RING_ALIGN, head - tail <= capacity
 *      with its OWN tail (the private copy, never the mapped word);
 *   4. each record header: copied out of the mapping once, then checked on
 *      the copy (toggle_ring_record_check): magic, kind, header_size,
 *      length aligned, >= 128, <= head - tail, not past the end of the data
 *      area, seq == the next expected, checksum, and for DATA: dtype known,
 *      ndim <= 4, shape product * element size == payload_len (no
 *      overflow), payload_len <= length - 128, hook inside the hook space
 *      (and the agent's catalog: the daemon's check);
 *   5. the payload: read from the mapping at the validated offset and
 *      length only (its bytes may change while being read; they are data);
 *   6. any fault ends the ring for the daemon (the agent is broken or
 *      hostile): toggle_ring_reader_next keeps returning the fault.
 * The agent in turn bounds what it reads from the daemon: a tail outside
 * [head - capacity, reservation] is counted (producer.consumer_errors) and
 * treated as "ring full" until it is sane again.
 */
#ifndef TOGGLE_RING_H
#define TOGGLE_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "toggle_error.h"
#include "toggle_hooks.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOGGLE_RING_MAGIC          0x31474e524c474754ull /* "TGGLRNG1" */
#define TOGGLE_RING_LAYOUT_VERSION 1
#define TOGGLE_RING_ALIGN          128u   /* record alignment = record header size */
#define TOGGLE_RING_DATA_OFFSET    4096u  /* data area: page-aligned for the DMA */
#define TOGGLE_RING_MIN_CAPACITY   (64ull << 10)
#define TOGGLE_RING_MAX_CAPACITY   (16ull << 30)
#define TOGGLE_RING_MAX_DIMS       4
#define TOGGLE_RING_SET_WORDS      (TOGGLE_MAX_HOOKS / 64)

#define TOGGLE_RING_REC_MAGIC 0x43524754u /* "TGRC" */
#define TOGGLE_RING_REC_DATA  1u
#define TOGGLE_RING_REC_PAD   2u
/* record.flags */
#define TOGGLE_RING_REC_EAGER 1u /* an eager run of the registered op, not a replay: graph 0 */

/*
 * Element types (record.dtype): XX(code, NAME, bytes, safetensors name).
 * The safetensors names are the ones its format defines, for the client.
 */
#define TOGGLE_DTYPE_MAP(XX)              \
	XX(1, U8, 1, "U8")                 \
	XX(2, I8, 1, "I8")                 \
	XX(3, I16, 2, "I16")               \
	XX(4, I32, 4, "I32")               \
	XX(5, I64, 8, "I64")               \
	XX(6, F16, 2, "F16")               \
	XX(7, BF16, 2, "BF16")             \
	XX(8, F32, 4, "F32")               \
	XX(9, F64, 8, "F64")               \
	XX(10, BOOL, 1, "BOOL")            \
	XX(11, U16, 2, "U16")              \
	XX(12, U32, 4, "U32")              \
	XX(13, U64, 8, "U64")              \
	XX(14, F8_E4M3, 1, "F8_E4M3")      \
	XX(15, F8_E5M2, 1, "F8_E5M2")

#define TOGGLE_DTYPE_ENUM_(code, NAME, bytes, st) TOGGLE_DTYPE_##NAME = (code),
enum toggle_dtype {
	TOGGLE_DTYPE_NONE = 0,
	TOGGLE_DTYPE_MAP(TOGGLE_DTYPE_ENUM_)
	TOGGLE_DTYPE_END
};
#undef TOGGLE_DTYPE_ENUM_

/* Bytes of one element of dtype; 0 for a code not in the list. */
static inline unsigned toggle_dtype_size(unsigned dtype)
{
	switch (dtype) {
#define TOGGLE_DTYPE_SIZE_(code, NAME, bytes, st) \
	case (code):                               \
		return (bytes);
		TOGGLE_DTYPE_MAP(TOGGLE_DTYPE_SIZE_)
#undef TOGGLE_DTYPE_SIZE_
	default:
		return 0;
	}
}

/* The safetensors name of dtype ("F32"); NULL for a code not in the list. */
static inline const char *toggle_dtype_name(unsigned dtype)
{
	switch (dtype) {
#define TOGGLE_DTYPE_NAME_(code, NAME, bytes, st) \
	case (code):                               \
		return (st);
		TOGGLE_DTYPE_MAP(TOGGLE_DTYPE_NAME_)
#undef TOGGLE_DTYPE_NAME_
	default:
		return NULL;
	}
}

/* Offset 0: written by the agent before the fd leaves it; read-only after. */
struct toggle_ring_header {
	uint64_t magic;          /* TOGGLE_RING_MAGIC */
	uint32_t layout_version; /* TOGGLE_RING_LAYOUT_VERSION */
	uint32_t header_size;    /* sizeof(struct toggle_ring_header) */
	uint64_t total_size;     /* TOGGLE_RING_DATA_OFFSET + capacity */
	uint64_t data_offset;    /* TOGGLE_RING_DATA_OFFSET */
	uint64_t capacity;       /* data bytes: a power of two, MIN..MAX */
	uint32_t record_align;   /* TOGGLE_RING_ALIGN */
	uint32_t record_header;  /* sizeof(struct toggle_ring_record) */
	uint64_t producer_offset, consumer_offset, request_offset; /* 128, 256, 384 */
	uint8_t reserved[128 - 72];
};

/* Offset 128: the agent is the only writer; the daemon reads (and bounds). */
struct toggle_ring_producer {
	uint64_t head;            /* publish position (release store) */
	uint64_t records;         /* DATA records published */
	uint64_t dropped;         /* DATA records dropped: the ring was full */
	uint64_t dropped_bytes;   /* their padded lengths */
	uint64_t errors;          /* records turned into PAD: a copy or its event failed */
	uint64_t consumer_errors; /* times the daemon's tail was out of bounds */
	uint64_t session;         /* the request session the agent last acted on */
	uint64_t seq;             /* seq of the next record (= records ever laid out) */
	uint8_t reserved[128 - 64];
};

/* Offset 256: the daemon is the only writer; the agent reads (and bounds). */
struct toggle_ring_consumer {
	uint64_t tail;            /* read position (release store) */
	uint8_t reserved[128 - 8];
};

/* Offset 384: the daemon is the only writer, under the seqlock seq. */
struct toggle_ring_request {
	uint64_t seq;     /* seqlock: odd while the daemon writes */
	uint64_t session; /* 0: record nothing; else the recording's number */
	uint64_t set[TOGGLE_RING_SET_WORDS]; /* hooks to record (struct toggle_set's bits) */
	uint8_t reserved[256 - 16];
};

/* A record header, at a TOGGLE_RING_ALIGN boundary of the data area. */
struct toggle_ring_record {
	uint32_t magic;       /*   0 TOGGLE_RING_REC_MAGIC */
	uint16_t kind;        /*   4 TOGGLE_RING_REC_DATA or _PAD */
	uint16_t header_size; /*   6 sizeof(struct toggle_ring_record) */
	uint64_t length;      /*   8 header + payload + padding: a multiple of TOGGLE_RING_ALIGN */
	uint64_t seq;         /*  16 0, 1, 2, ... every record, PAD included */
	uint64_t session;     /*  24 the request session it was written for */
	int64_t step;         /*  32 the agent's step (toggle_step_begin) */
	uint64_t graph;       /*  40 the replayed CUgraph handle; 0 for an eager run */
	uint64_t launch;      /*  48 the agent's launch count at the replay: tells two replays of one step apart */
	uint16_t hook_type;   /*  56 */
	uint16_t layer;       /*  58 */
	uint8_t dtype;        /*  60 enum toggle_dtype */
	uint8_t ndim;         /*  61 0..TOGGLE_RING_MAX_DIMS (0: a scalar) */
	uint16_t flags;       /*  62 TOGGLE_RING_REC_* */
	uint64_t shape[TOGGLE_RING_MAX_DIMS]; /* 64 dims beyond ndim are 0 */
	uint64_t payload_len; /*  96 bytes of payload after the header */
	uint64_t dropped;     /* 104 producer.dropped when it was laid out */
	uint64_t reserved;    /* 112 0 */
	uint64_t checksum;    /* 120 toggle_ring_fnv1a over bytes 0..119 */
};

#ifndef __cplusplus
_Static_assert(sizeof(struct toggle_ring_header) == 128, "ring header is 128 bytes");
_Static_assert(sizeof(struct toggle_ring_producer) == 128, "producer area is 128 bytes");
_Static_assert(sizeof(struct toggle_ring_consumer) == 128, "consumer area is 128 bytes");
_Static_assert(sizeof(struct toggle_ring_record) == TOGGLE_RING_ALIGN, "record header is one alignment unit");
_Static_assert(384 + sizeof(struct toggle_ring_request) <= TOGGLE_RING_DATA_OFFSET,
	       "the request fits below the data area");
#endif

/* FNV-1a 64 of n bytes: the record header's checksum (over its first 120 bytes). */
static inline uint64_t toggle_ring_fnv1a(const void *p, size_t n)
{
	const unsigned char *b = (const unsigned char *)p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}
#define TOGGLE_RING_CHECKSUM_BYTES 120

/* Padded length of a record with payload_len bytes (0 when it overflows). */
static inline uint64_t toggle_ring_record_length(uint64_t payload_len)
{
	uint64_t a = TOGGLE_RING_ALIGN;
	if (payload_len > TOGGLE_RING_MAX_CAPACITY)
		return 0;
	return (sizeof(struct toggle_ring_record) + payload_len + a - 1) & ~(a - 1);
}

/*
 * Faults a record or position can have, XX(NAME, text) each: enum
 * toggle_ring_fault (TOGGLE_RING_F_<NAME>) and toggle_ring_fault_str().
 */
#define TOGGLE_RING_FAULT_MAP(XX)                                               \
	XX(OK, "no fault")                                                      \
	XX(HEAD_BACK, "head moved backwards")                                   \
	XX(HEAD_ALIGN, "head not a multiple of the record alignment")           \
	XX(HEAD_OVER, "head more than the capacity beyond tail")                \
	XX(MAGIC, "bad record magic")                                           \
	XX(KIND, "unknown record kind")                                         \
	XX(HEADER_SIZE, "bad record header size")                               \
	XX(LENGTH, "record length unaligned, too short or beyond head")         \
	XX(STRADDLE, "record straddles the end of the data area")               \
	XX(SEQ, "record out of sequence")                                       \
	XX(CHECKSUM, "record header checksum mismatch")                         \
	XX(DTYPE, "unknown dtype")                                              \
	XX(NDIM, "too many dimensions")                                         \
	XX(SHAPE, "shape disagrees with the payload length")                    \
	XX(PAYLOAD, "payload longer than the record")                           \
	XX(HOOK, "hook outside the hook space")

#define TOGGLE_RING_FAULT_ENUM_(NAME, text) TOGGLE_RING_F_##NAME,
enum toggle_ring_fault { TOGGLE_RING_FAULT_MAP(TOGGLE_RING_FAULT_ENUM_) TOGGLE_RING_F_COUNT };
#undef TOGGLE_RING_FAULT_ENUM_

const char *toggle_ring_fault_str(int fault);

/*
 * Check a record header copy r found at data offset off (< capacity) with
 * avail published bytes from there (head - tail), expecting sequence number
 * seq.  Pure: reads only *r.  Returns TOGGLE_RING_F_OK or the first fault.
 */
int toggle_ring_record_check(const struct toggle_ring_record *r, uint64_t off, uint64_t avail,
			     uint64_t capacity, uint64_t seq);

/* Fill r->checksum from the rest of *r (the writer's last step on a header). */
void toggle_ring_record_seal(struct toggle_ring_record *r);

/* ---- a mapping, either side ---------------------------------------------- */

struct toggle_ring_map {
	int fd;
	size_t size;      /* total_size from a layout built or validated privately */
	uint64_t capacity;
	void *base;
	struct toggle_ring_producer *prod;
	struct toggle_ring_consumer *cons;
	struct toggle_ring_request *req;
	unsigned char *data;
};

/* Agent: create a ring of capacity data bytes (a power of two, MIN..MAX):
 * memfd, header written through the fd, sealed, mapped read-write. */
int toggle_ring_create(uint64_t capacity, struct toggle_ring_map *m, char *err, size_t errlen);
/* Daemon: check an untrusted fd (consumer rule 1 and 2), dup and map it;
 * the data area is mapped read-only.  expect_size: RegisterRingRequest's
 * ring_size (0: not checked). */
int toggle_ring_attach(int fd, uint64_t expect_size, struct toggle_ring_map *m, char *err,
		       size_t errlen);
void toggle_ring_unmap(struct toggle_ring_map *m); /* also closes the fd */

/* ---- the consumer ---------------------------------------------------------- */

/*
 * The consumer's private state.  tail, head and seq are its own copies:
 * never re-read from the mapping.  fault != OK: the ring is dead for it.
 */
struct toggle_ring_reader {
	const struct toggle_ring_map *m;
	uint64_t tail;  /* its read position, mirrored to consumer.tail on release */
	uint64_t head;  /* the last head it validated */
	uint64_t seq;   /* the seq the record at tail must carry */
	bool seq_known; /* false until the first record (a reader that starts late) */
	int fault;      /* enum toggle_ring_fault */
	uint64_t pending; /* length of the record _next returned, until released */
};

/*
 * Start reading: from the producer's current head (nothing already
 * published is read: a restarted daemon or a new recording starts clean)
 * with tail moved up to it.  The first record then sets the expected seq.
 */
void toggle_ring_reader_open(struct toggle_ring_reader *rd, const struct toggle_ring_map *m);

/*
 * The next DATA record: its validated header copied into *out and a pointer
 * to its payload (out->payload_len bytes, inside the data area) in
 * *payload.  PAD records are checked and skipped (released at once).
 * Returns 1 with a record (release it with toggle_ring_reader_release once
 * its payload is read; the next call releases it if the caller did not),
 * 0 when nothing is published, TOGGLE_ESHM on a fault
 * (rd->fault says which; every later call returns it too).
 */
int toggle_ring_reader_next(struct toggle_ring_reader *rd, struct toggle_ring_record *out,
			    const void **payload);
/* Release the record the last _next returned: tail moves past it (by the
 * length of the validated copy; rec is only checked to be that record). */
void toggle_ring_reader_release(struct toggle_ring_reader *rd, const struct toggle_ring_record *rec);

/* ---- the producer's arithmetic (no CUDA: libtoggle/src/record.c drives it) -- */

/*
 * The agent's private positions.  reserve >= head: records laid out but
 * not yet published (their copies in flight).
 */
struct toggle_ring_writer {
	struct toggle_ring_map *m;
	uint64_t reserve; /* next record's position */
	uint64_t head;    /* published (mirrors producer.head) */
	uint64_t seq;     /* next record's seq */
};

void toggle_ring_writer_init(struct toggle_ring_writer *w, struct toggle_ring_map *m);
/*
 * Lay out a DATA record of payload_len bytes at the reservation: a PAD
 * first where it would straddle the end.  Returns the record's header in
 * the data area (its seq, kind, lengths and magic filled; the caller fills
 * the tags and calls toggle_ring_record_seal) and its position in *pos, or
 * NULL when it does not fit before tail (ring full; nothing laid out,
 * producer.dropped counted) or tail is out of bounds (consumer_errors
 * counted too).
 */
struct toggle_ring_record *toggle_ring_writer_reserve(struct toggle_ring_writer *w,
						      uint64_t payload_len, uint64_t *pos);
/* Turn the record at pos (reserved, unpublished) into a PAD of its length. */
void toggle_ring_writer_void(struct toggle_ring_writer *w, uint64_t pos);
/* Publish every record below pos (head <= pos <= reserve), n_data of them
 * DATA records: producer.records += n_data, then a release store of head. */
void toggle_ring_writer_publish(struct toggle_ring_writer *w, uint64_t pos, uint64_t n_data);

/* The agent reads the request: 0 and *session and *set filled, TOGGLE_EBUSY
 * when the daemon never settles (a bounded number of tries). */
int toggle_ring_request_read(const struct toggle_ring_request *rq, uint64_t *session,
			     struct toggle_set *set);
/* The daemon writes it (seqlock). */
void toggle_ring_request_write(struct toggle_ring_request *rq, uint64_t session,
			       const struct toggle_set *set);
/* The seqlock word, one acquire load: the agent's per-replay check. */
static inline uint64_t toggle_ring_request_seq(const struct toggle_ring_request *rq)
{
	return __atomic_load_n(&rq->seq, __ATOMIC_ACQUIRE);
}

#ifdef __cplusplus
}
#endif

#endif /* TOGGLE_RING_H */

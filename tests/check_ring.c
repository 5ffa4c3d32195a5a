/*
 * check_ring.c - the data ring (toggle_ring.h): creation and the daemon's
 * checks of an untrusted fd, the writer's layout (pads at the end, drops
 * when full, voided records), the reader's validation of every position
 * and record header an agent could forge.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"
#include "toggle_ring.h"

#define CAP TOGGLE_RING_MIN_CAPACITY

/* A DATA record of n F32 elements of hook (1, layer), filled with value v + i. */
static bool put(struct toggle_ring_writer *w, uint16_t layer, uint32_t n, float v, bool publish)
{
	uint64_t pos;
	struct toggle_ring_record *r = toggle_ring_writer_reserve(w, (uint64_t)n * 4, &pos);
	if (!r)
		return false;
	r->step = 7;
	r->graph = 0x1234;
	r->hook_type = 1;
	r->layer = layer;
	r->dtype = TOGGLE_DTYPE_F32;
	r->ndim = 1;
	r->shape[0] = n;
	float *p = (float *)(void *)(r + 1);
	for (uint32_t i = 0; i < n; i++)
		p[i] = v + (float)i;
	toggle_ring_record_seal(r);
	if (publish)
		toggle_ring_writer_publish(w, w->reserve, 1);
	return true;
}

static void get(struct toggle_ring_reader *rd, uint16_t layer, uint32_t n, float v)
{
	struct toggle_ring_record r;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(rd, &r, &pl), 1);
	ck_assert_uint_eq(r.layer, layer);
	ck_assert_uint_eq(r.payload_len, (uint64_t)n * 4);
	ck_assert_int_eq(r.step, 7);
	const float *p = pl;
	for (uint32_t i = 0; i < n; i++)
		ck_assert_msg(p[i] == v + (float)i, "payload word %u is %g, wants %g", i, p[i], v + i);
	toggle_ring_reader_release(rd, &r);
}

struct pair {
	struct toggle_ring_map a, d;
	struct toggle_ring_writer w;
	struct toggle_ring_reader rd;
};

static void pair_open(struct pair *p, uint64_t cap)
{
	char err[256];
	ck_assert_int_eq(toggle_ring_create(cap, &p->a, err, sizeof(err)), 0);
	ck_assert_int_eq(toggle_ring_attach(p->a.fd, p->a.size, &p->d, err, sizeof(err)), 0);
	toggle_ring_writer_init(&p->w, &p->a);
	toggle_ring_reader_open(&p->rd, &p->d);
}

static void pair_close(struct pair *p)
{
	toggle_ring_unmap(&p->d);
	toggle_ring_unmap(&p->a);
}

START_TEST(test_create_attach)
{
	struct toggle_ring_map a, d;
	char err[256];
	ck_assert_int_eq(toggle_ring_create(CAP + 1, &a, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_ring_create(CAP / 2, &a, err, sizeof(err)), TOGGLE_EINVAL);
	ck_assert_int_eq(toggle_ring_create(CAP, &a, err, sizeof(err)), 0);
	ck_assert_uint_eq(a.size, TOGGLE_RING_DATA_OFFSET + CAP);
	ck_assert_int_ne(ftruncate(a.fd, 4096), 0); /* sealed */
	ck_assert_int_eq(toggle_ring_attach(a.fd, a.size + 4096, &d, err, sizeof(err)), TOGGLE_ESHM);
	ck_assert_msg(strstr(err, "announced"), "%s", err);
	ck_assert_int_eq(toggle_ring_attach(a.fd, 0, &d, err, sizeof(err)), 0);
	/* The daemon's data mapping is read-only; its tail is seen by the agent. */
	__atomic_store_n(&d.cons->tail, 256, __ATOMIC_RELEASE);
	ck_assert_uint_eq(a.cons->tail, 256);
	toggle_ring_unmap(&d);
	toggle_ring_unmap(&a);
}
END_TEST

static int memfd_ring(uint64_t size, bool seal, const struct toggle_ring_header *h)
{
	int fd = memfd_create("bad", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	ck_assert_int_eq(pwrite(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
	if (seal)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

static void refused(int fd, const char *needle)
{
	struct toggle_ring_map d;
	char err[256] = "";
	ck_assert_int_eq(toggle_ring_attach(fd, 0, &d, err, sizeof(err)), TOGGLE_ESHM);
	ck_assert_msg(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
	close(fd);
}

START_TEST(test_attach_refuses)
{
	struct toggle_ring_map a;
	char err[256];
	ck_assert_int_eq(toggle_ring_create(CAP, &a, err, sizeof(err)), 0);
	struct toggle_ring_header good, h;
	ck_assert_int_eq(pread(a.fd, &good, sizeof(good), 0), (ssize_t)sizeof(good));
	toggle_ring_unmap(&a);
	uint64_t size = TOGGLE_RING_DATA_OFFSET + CAP;

	refused(memfd_ring(size, false, &good), "sealed");
	h = good, h.magic ^= 1;
	refused(memfd_ring(size, true, &h), "magic");
	h = good, h.layout_version = 2;
	refused(memfd_ring(size, true, &h), "layout");
	h = good, h.capacity = CAP + TOGGLE_RING_ALIGN;
	refused(memfd_ring(size, true, &h), "capacity");
	h = good, h.capacity = TOGGLE_RING_MAX_CAPACITY * 2;
	refused(memfd_ring(size, true, &h), "capacity");
	/* A capacity larger than the file: the reader would run off the mapping. */
	h = good, h.capacity = CAP * 2, h.total_size = TOGGLE_RING_DATA_OFFSET + CAP * 2;
	refused(memfd_ring(size, true, &h), "bytes");
	h = good, h.request_offset = 8;
	refused(memfd_ring(size, true, &h), "disagree");
	refused(memfd_ring(size + 4096, true, &good), "bytes");
}
END_TEST

START_TEST(test_round_trip_and_wrap)
{
	struct pair p;
	pair_open(&p, CAP);
	/* Records of 3..~9 KiB through a 64 KiB ring, read after each pair:
	 * the position wraps many times and pads fill the ends. */
	uint32_t n = 700;
	for (int i = 0; i < 200; i++) {
		ck_assert(put(&p.w, (uint16_t)i, n + (uint32_t)i * 7, (float)i, true));
		ck_assert(put(&p.w, (uint16_t)(i + 1), n, (float)-i, true));
		get(&p.rd, (uint16_t)i, n + (uint32_t)i * 7, (float)i);
		get(&p.rd, (uint16_t)(i + 1), n, (float)-i);
	}
	struct toggle_ring_record r;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &r, &pl), 0);
	ck_assert_uint_eq(p.a.prod->records, 400);
	ck_assert_uint_gt(p.w.seq, 400); /* pads took seqs */
	ck_assert_uint_eq(p.a.prod->dropped, 0);
	ck_assert_uint_gt(p.w.reserve, 4 * CAP);
	pair_close(&p);
}
END_TEST

START_TEST(test_unpublished_invisible)
{
	struct pair p;
	pair_open(&p, CAP);
	ck_assert(put(&p.w, 1, 100, 1, false));
	ck_assert(put(&p.w, 2, 100, 2, false));
	struct toggle_ring_record r;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &r, &pl), 0);
	toggle_ring_writer_publish(&p.w, p.w.reserve, 2);
	get(&p.rd, 1, 100, 1);
	get(&p.rd, 2, 100, 2);
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &r, &pl), 0);
	pair_close(&p);
}
END_TEST

START_TEST(test_full_drops)
{
	struct pair p;
	pair_open(&p, CAP);
	/* 8 KiB records: 7 fit with their headers (8 would need 8 x 8320 B). */
	int ok = 0;
	for (int i = 0; i < 20; i++)
		ok += put(&p.w, (uint16_t)i, 2048, (float)i, true);
	ck_assert_int_eq(ok, 7);
	ck_assert_uint_eq(p.a.prod->dropped, 13);
	ck_assert_uint_eq(p.a.prod->dropped_bytes, 13 * toggle_ring_record_length(8192));
	/* What was published is intact; reading frees room again. */
	for (int i = 0; i < 7; i++)
		get(&p.rd, (uint16_t)i, 2048, (float)i);
	ck_assert(put(&p.w, 50, 2048, 50, true));
	struct toggle_ring_record r;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &r, &pl), 1);
	ck_assert_uint_eq(r.dropped, 13); /* where the drops happened */
	/* A record larger than the ring is dropped, not laid out. */
	ck_assert(!put(&p.w, 51, CAP / 4, 0, true));
	ck_assert_uint_eq(p.a.prod->dropped, 14);
	pair_close(&p);
}
END_TEST

START_TEST(test_void_skipped)
{
	struct pair p;
	pair_open(&p, CAP);
	ck_assert(put(&p.w, 1, 64, 1, false));
	uint64_t pos = p.w.reserve;
	ck_assert(put(&p.w, 2, 64, 2, false));
	ck_assert(put(&p.w, 3, 64, 3, false));
	toggle_ring_writer_void(&p.w, pos);
	toggle_ring_writer_publish(&p.w, p.w.reserve, 2);
	get(&p.rd, 1, 64, 1);
	get(&p.rd, 3, 64, 3);
	ck_assert_uint_eq(p.a.prod->errors, 1);
	pair_close(&p);
}
END_TEST

START_TEST(test_bad_tail)
{
	struct pair p;
	pair_open(&p, CAP);
	ck_assert(put(&p.w, 1, 64, 1, true));
	/* A tail past what was published: the agent believes none of it. */
	__atomic_store_n(&p.d.cons->tail, p.w.head + TOGGLE_RING_ALIGN, __ATOMIC_RELEASE);
	ck_assert(!put(&p.w, 2, 64, 2, true));
	ck_assert_uint_eq(p.a.prod->consumer_errors, 1);
	ck_assert_uint_eq(p.a.prod->dropped, 1);
	__atomic_store_n(&p.d.cons->tail, 0, __ATOMIC_RELEASE);
	ck_assert(put(&p.w, 3, 64, 3, true));
	pair_close(&p);
}
END_TEST

/* The reader on a forged ring: one header field changed (re-sealed unless
 * seal is false), the fault it must report. */
static void forged(void (*forge)(struct toggle_ring_record *), bool seal, int fault)
{
	struct pair p;
	pair_open(&p, CAP);
	ck_assert(put(&p.w, 1, 64, 1, false));
	struct toggle_ring_record *r = (struct toggle_ring_record *)(void *)p.a.data;
	forge(r);
	if (seal)
		toggle_ring_record_seal(r);
	toggle_ring_writer_publish(&p.w, p.w.reserve, 1);
	struct toggle_ring_record out;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &out, &pl), TOGGLE_ESHM);
	ck_assert_msg(p.rd.fault == fault, "fault %s, wants %s", toggle_ring_fault_str(p.rd.fault),
		      toggle_ring_fault_str(fault));
	/* Dead for good. */
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &out, &pl), TOGGLE_ESHM);
	pair_close(&p);
}

static void f_magic(struct toggle_ring_record *r) { r->magic = 0; }
static void f_hsize(struct toggle_ring_record *r) { r->header_size = 64; }
static void f_kind(struct toggle_ring_record *r) { r->kind = 9; }
static void f_len_short(struct toggle_ring_record *r) { r->length = 64; }
static void f_len_unaligned(struct toggle_ring_record *r) { r->length += 8; }
static void f_len_beyond(struct toggle_ring_record *r) { r->length += TOGGLE_RING_ALIGN; }
static void f_seq(struct toggle_ring_record *r) { r->seq += 1; }
static void f_dtype(struct toggle_ring_record *r) { r->dtype = 99; }
static void f_ndim(struct toggle_ring_record *r) { r->ndim = 5; }
static void f_shape(struct toggle_ring_record *r) { r->shape[0] = 65; }
static void f_shape_tail(struct toggle_ring_record *r) { r->shape[2] = 1; }
static void f_shape_ovf(struct toggle_ring_record *r)
{
	r->ndim = 2;
	r->shape[0] = 1ull << 62;
	r->shape[1] = 1ull << 4; /* the product wraps to 0 * 4 in 64 bits */
	r->payload_len = 0;
}
static void f_payload(struct toggle_ring_record *r)
{
	r->payload_len = r->length;
	r->shape[0] = r->length / 4;
}
static void f_hook(struct toggle_ring_record *r) { r->hook_type = TOGGLE_MAX_HOOK_TYPES; }
static void f_step(struct toggle_ring_record *r) { r->step = 8; }

START_TEST(test_forged_records)
{
	forged(f_magic, true, TOGGLE_RING_F_MAGIC);
	forged(f_hsize, true, TOGGLE_RING_F_HEADER_SIZE);
	forged(f_step, false, TOGGLE_RING_F_CHECKSUM);
	forged(f_kind, true, TOGGLE_RING_F_KIND);
	forged(f_len_short, true, TOGGLE_RING_F_LENGTH);
	forged(f_len_unaligned, true, TOGGLE_RING_F_LENGTH);
	forged(f_len_beyond, true, TOGGLE_RING_F_LENGTH);
	forged(f_dtype, true, TOGGLE_RING_F_DTYPE);
	forged(f_ndim, true, TOGGLE_RING_F_NDIM);
	forged(f_shape, true, TOGGLE_RING_F_SHAPE);
	forged(f_shape_tail, true, TOGGLE_RING_F_SHAPE);
	forged(f_shape_ovf, true, TOGGLE_RING_F_SHAPE);
	forged(f_payload, true, TOGGLE_RING_F_PAYLOAD);
	forged(f_hook, true, TOGGLE_RING_F_HOOK);
	(void)f_seq;
}
END_TEST

START_TEST(test_forged_seq_and_straddle)
{
	struct pair p;
	pair_open(&p, CAP);
	ck_assert(put(&p.w, 1, 64, 1, true));
	ck_assert(put(&p.w, 2, 64, 2, false));
	struct toggle_ring_record *r2 =
		(struct toggle_ring_record *)(void *)(p.a.data + toggle_ring_record_length(256));
	r2->seq += 5;
	toggle_ring_record_seal(r2);
	toggle_ring_writer_publish(&p.w, p.w.reserve, 1);
	get(&p.rd, 1, 64, 1);
	struct toggle_ring_record out;
	const void *pl;
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &out, &pl), TOGGLE_ESHM);
	ck_assert_int_eq(p.rd.fault, TOGGLE_RING_F_SEQ);
	pair_close(&p);

	/* A record claiming to run past the end of the data area: a forged
	 * head far enough ahead makes its length "published". */
	pair_open(&p, CAP);
	struct toggle_ring_record *r = (struct toggle_ring_record *)(void *)(p.a.data + CAP - 256);
	memset(r, 0, sizeof(*r));
	r->magic = TOGGLE_RING_REC_MAGIC;
	r->kind = TOGGLE_RING_REC_PAD;
	r->header_size = sizeof(*r);
	r->length = 512;
	toggle_ring_record_seal(r);
	__atomic_store_n(&p.a.prod->head, CAP - 256 + 512, __ATOMIC_RELEASE);
	p.rd.tail = p.rd.head = CAP - 256; /* as if it had read up to there */
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &out, &pl), TOGGLE_ESHM);
	ck_assert_int_eq(p.rd.fault, TOGGLE_RING_F_STRADDLE);
	pair_close(&p);
}
END_TEST

START_TEST(test_forged_head)
{
	struct pair p;
	struct toggle_ring_record out;
	const void *pl;
	pair_open(&p, CAP);
	ck_assert(put(&p.w, 1, 64, 1, true));
	get(&p.rd, 1, 64, 1);
	__atomic_store_n(&p.a.prod->head, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &out, &pl), TOGGLE_ESHM);
	ck_assert_int_eq(p.rd.fault, TOGGLE_RING_F_HEAD_BACK);
	pair_close(&p);

	pair_open(&p, CAP);
	__atomic_store_n(&p.a.prod->head, 8, __ATOMIC_RELEASE);
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &out, &pl), TOGGLE_ESHM);
	ck_assert_int_eq(p.rd.fault, TOGGLE_RING_F_HEAD_ALIGN);
	pair_close(&p);

	pair_open(&p, CAP);
	__atomic_store_n(&p.a.prod->head, CAP + TOGGLE_RING_ALIGN, __ATOMIC_RELEASE);
	ck_assert_int_eq(toggle_ring_reader_next(&p.rd, &out, &pl), TOGGLE_ESHM);
	ck_assert_int_eq(p.rd.fault, TOGGLE_RING_F_HEAD_OVER);
	pair_close(&p);
}
END_TEST

START_TEST(test_reader_opens_at_head)
{
	struct pair p;
	pair_open(&p, CAP);
	ck_assert(put(&p.w, 1, 64, 1, true));
	ck_assert(put(&p.w, 2, 64, 2, true));
	/* A new reader (a restarted daemon) starts at the current head, and
	 * learns the seq from the first record it reads. */
	struct toggle_ring_reader rd;
	toggle_ring_reader_open(&rd, &p.d);
	ck_assert_uint_eq(p.a.cons->tail, p.w.head);
	ck_assert(put(&p.w, 3, 64, 3, true));
	get(&rd, 3, 64, 3);
	pair_close(&p);
}
END_TEST

START_TEST(test_request)
{
	struct pair p;
	pair_open(&p, CAP);
	uint64_t session = 9;
	struct toggle_set s, got;
	memset(&s, 0, sizeof(s));
	s.bits[3] = 0x55;
	uint64_t seq0 = toggle_ring_request_seq(p.a.req);
	ck_assert_int_eq(toggle_ring_request_read(p.a.req, &session, &got), 0);
	ck_assert_uint_eq(session, 0);
	toggle_ring_request_write(p.d.req, 42, &s);
	ck_assert_uint_ne(toggle_ring_request_seq(p.a.req), seq0);
	ck_assert_int_eq(toggle_ring_request_read(p.a.req, &session, &got), 0);
	ck_assert_uint_eq(session, 42);
	ck_assert(memcmp(&got, &s, sizeof(s)) == 0);
	/* A writer stuck mid-write (odd seq): the agent gives up, bounded. */
	p.d.req->seq |= 1;
	ck_assert_int_eq(toggle_ring_request_read(p.a.req, &session, &got), TOGGLE_EBUSY);
	pair_close(&p);
}
END_TEST

START_TEST(test_dtype_table)
{
	ck_assert_uint_eq(toggle_dtype_size(TOGGLE_DTYPE_BF16), 2);
	ck_assert_str_eq(toggle_dtype_name(TOGGLE_DTYPE_BF16), "BF16");
	ck_assert_uint_eq(toggle_dtype_size(TOGGLE_DTYPE_F64), 8);
	ck_assert_uint_eq(toggle_dtype_size(0), 0);
	ck_assert_ptr_null(toggle_dtype_name(TOGGLE_DTYPE_END));
	for (unsigned d = 1; d < TOGGLE_DTYPE_END; d++)
		ck_assert_msg(toggle_dtype_size(d) && toggle_dtype_name(d), "dtype %u", d);
	ck_assert_str_eq(toggle_ring_fault_str(TOGGLE_RING_F_SEQ), "record out of sequence");
	ck_assert_str_eq(toggle_ring_fault_str(-1), "unknown ring fault");
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_create_attach);
	tcase_add_test(tc, test_attach_refuses);
	tcase_add_test(tc, test_round_trip_and_wrap);
	tcase_add_test(tc, test_unpublished_invisible);
	tcase_add_test(tc, test_full_drops);
	tcase_add_test(tc, test_void_skipped);
	tcase_add_test(tc, test_bad_tail);
	tcase_add_test(tc, test_forged_records);
	tcase_add_test(tc, test_forged_seq_and_straddle);
	tcase_add_test(tc, test_forged_head);
	tcase_add_test(tc, test_reader_opens_at_head);
	tcase_add_test(tc, test_request);
	tcase_add_test(tc, test_dtype_table);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(ring_suite());
}

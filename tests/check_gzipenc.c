/*
 * check_gzipenc.c - daemon/gzipenc.c: which Accept-Encoding values get a
 * gzipped /metrics (the header comes from any scraper: every form bounded
 * and checked), and that what td_gzip writes inflates back to its input.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "gzipenc.h"
#include "testutil.h"

START_TEST(test_accepted)
{
	static const char *const yes[] = {"gzip", "GZIP", "x-gzip", "gzip, deflate", "deflate, gzip",
					  "br;q=1.0, gzip;q=0.5", "gzip;q=1", "gzip;q=0.001",
					  "*", "*;q=0.1", "identity, *", " gzip ", "gzip ;q=0.8",
					  "deflate,gzip"};
	static const char *const no[] = {"", "identity", "deflate", "br", "gzip;q=0", "gzip;q=0.000",
					 "*;q=0", "gzip;q=0, *", "gzipx", "xgzip", "gzip;q=2",
					 "gzip;q=1.5", "gzip;q=", "gzip;x=1", "gzip;q=0.5x",
					 "gzi", "*, gzip;q=0"};
	ck_assert(!td_gzip_accepted(NULL));
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		ck_assert_msg(td_gzip_accepted(yes[i]), "'%s' refused", yes[i]);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		ck_assert_msg(!td_gzip_accepted(no[i]), "'%s' accepted", no[i]);
	/* over 1024 bytes: no, whatever it says */
	char big[1100];
	memset(big, ' ', sizeof(big));
	memcpy(big, "gzip", 4);
	big[sizeof(big) - 1] = '\0';
	ck_assert(!td_gzip_accepted(big));
	big[1024] = '\0';
	ck_assert(td_gzip_accepted(big));
}
END_TEST

START_TEST(test_roundtrip)
{
	size_t len = 200000;
	char *in = malloc(len);
	ck_assert_ptr_nonnull(in);
	for (size_t i = 0; i < len; i++) /* metrics-like: lines that repeat with numbers */
		in[i] = i % 61 == 60 ? '\n' : (char)('a' + (i * 7 + i / 61) % 26);
	char *z = NULL;
	size_t zlen = 0;
	ck_assert_int_eq(td_gzip(in, len, &z, &zlen), 0);
	ck_assert_msg(zlen > 18 && zlen < len, "%zu bytes gzipped into %zu", len, zlen);
	ck_assert_msg((unsigned char)z[0] == 0x1f && (unsigned char)z[1] == 0x8b, "no gzip header");
	char *back = malloc(len + 1);
	z_stream s;
	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(inflateInit2(&s, 15 + 16), Z_OK);
	s.next_in = (Bytef *)z;
	s.avail_in = (uInt)zlen;
	s.next_out = (Bytef *)back;
	s.avail_out = (uInt)len + 1;
	ck_assert_int_eq(inflate(&s, Z_FINISH), Z_STREAM_END);
	ck_assert_uint_eq(s.total_out, len);
	inflateEnd(&s);
	ck_assert(memcmp(in, back, len) == 0);
	free(back);
	free(z);
	ck_assert_int_eq(td_gzip("", 0, &z, &zlen), 0); /* empty: a valid empty member */
	ck_assert(zlen >= 20);
	free(z);
	free(in);
}
END_TEST

static Suite *gzipenc_suite(void)
{
	Suite *s = suite_create("gzipenc");
	TCase *tc = tcase_create("gzip");
	tcase_add_test(tc, test_accepted);
	tcase_add_test(tc, test_roundtrip);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(gzipenc_suite());
}

/* Long double atomics for provider/nic/atomic.rs.
 *
 * Rust has no type for C's long double (x86-64: the 80-bit extended format
 * in 16 bytes; aarch64: IEEE binary128), so FI_LONG_DOUBLE and
 * FI_LONG_DOUBLE_COMPLEX are computed here, in the same long double the
 * application's C compiler uses for the data. atomic.rs checks the
 * op/datatype pair and the buffer lengths, handles FI_ATOMIC_READ,
 * FI_ATOMIC_WRITE and the fetched copy itself, and calls gnix_ld_apply for
 * the rest. Every access goes through memcpy: the buffers are byte buffers
 * with no alignment promise.
 *
 * Semantics follow fi_atomic(3) (libfabric 1.17), as its open-coded
 * software implementation (prov/util/src/util_atomic.c) does them:
 *  - MIN/MAX:   if (target > operand) / (target < operand) target = operand
 *  - logical:   the result is 1 or 0; a complex value is true when either
 *               part is nonzero
 *  - CSWAP_xx:  if (compare xx target) target = operand
 * A value that is copied (operand into target) is copied bit for bit. A
 * value that is computed is stored in its value bytes only: on x86 the 6
 * padding bytes of the target keep what they held, as they would under a
 * store instruction of the 80-bit format.
 */
#include <float.h>
#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(long double) == 16, "atomic.rs sizes FI_LONG_DOUBLE as 16 bytes");
_Static_assert(sizeof(_Complex long double) == 32, "atomic.rs sizes FI_LONG_DOUBLE_COMPLEX as 32 bytes");

#if LDBL_MANT_DIG == 64
#define LD_VALUE_BYTES 10 /* x87 extended: sign, 15-bit exponent, 64-bit significand */
#else
#define LD_VALUE_BYTES sizeof(long double)
#endif

#define LD 16 /* bytes of one long double */

/* enum fi_op of rdma/fi_domain.h (libfabric 1.17); atomic.rs passes the
 * value it was given. Only the ops this file computes are listed. */
enum {
	OP_MIN = 0,
	OP_MAX = 1,
	OP_SUM = 2,
	OP_PROD = 3,
	OP_LOR = 4,
	OP_LAND = 5,
	OP_LXOR = 8,
	OP_CSWAP = 12,
	OP_CSWAP_NE = 13,
	OP_CSWAP_LE = 14,
	OP_CSWAP_LT = 15,
	OP_CSWAP_GE = 16,
	OP_CSWAP_GT = 17,
};

static long double get(const unsigned char *p)
{
	long double v;
	memcpy(&v, p, LD);
	return v;
}

static void put(unsigned char *p, long double v)
{
	memcpy(p, &v, LD_VALUE_BYTES);
}

static _Complex long double cget(const unsigned char *p)
{
	_Complex long double z;
	memcpy(&z, p, 2 * LD);
	return z;
}

/* C11 6.2.5: a complex type has the layout of an array of two reals. */
static void cput(unsigned char *p, _Complex long double z)
{
	long double parts[2];
	memcpy(parts, &z, sizeof(parts));
	put(p, parts[0]);
	put(p + LD, parts[1]);
}

/* Returns 0, or -1 for an op this file does not compute (atomic.rs's table
 * keeps those away; -1 is a guard, and then nothing was written). */
static int real(unsigned op, unsigned char *t, const unsigned char *o, const unsigned char *c, size_t count)
{
	switch (op) {
	case OP_MIN: case OP_MAX: case OP_SUM: case OP_PROD:
	case OP_LOR: case OP_LAND: case OP_LXOR:
	case OP_CSWAP: case OP_CSWAP_NE: case OP_CSWAP_LE:
	case OP_CSWAP_LT: case OP_CSWAP_GE: case OP_CSWAP_GT:
		break;
	default:
		return -1;
	}
	for (size_t i = 0; i < count; i++, t += LD, o += LD) {
		long double tv = get(t), ov = get(o);
		int take = 0; /* copy the operand into the target */

		switch (op) {
		case OP_MIN: take = tv > ov; break;
		case OP_MAX: take = tv < ov; break;
		case OP_SUM: put(t, tv + ov); break;
		case OP_PROD: put(t, tv * ov); break;
		case OP_LOR: put(t, tv || ov); break;
		case OP_LAND: put(t, tv && ov); break;
		case OP_LXOR: put(t, (tv && !ov) || (!tv && ov)); break;
		default: {
			long double cv = get(c);
			c += LD;
			switch (op) {
			case OP_CSWAP: take = cv == tv; break;
			case OP_CSWAP_NE: take = cv != tv; break;
			case OP_CSWAP_LE: take = cv <= tv; break;
			case OP_CSWAP_LT: take = cv < tv; break;
			case OP_CSWAP_GE: take = cv >= tv; break;
			case OP_CSWAP_GT: take = cv > tv; break;
			}
		}
		}
		if (take)
			memcpy(t, o, LD);
	}
	return 0;
}

static int cplx(unsigned op, unsigned char *t, const unsigned char *o, const unsigned char *c, size_t count)
{
	switch (op) {
	case OP_SUM: case OP_PROD: case OP_LOR: case OP_LAND: case OP_LXOR:
	case OP_CSWAP: case OP_CSWAP_NE:
		break;
	default:
		return -1;
	}
	for (size_t i = 0; i < count; i++, t += 2 * LD, o += 2 * LD) {
		_Complex long double tv = cget(t), ov = cget(o);
		int take = 0;

		switch (op) {
		case OP_SUM: cput(t, tv + ov); break;
		case OP_PROD: cput(t, tv * ov); break; /* C's multiplication (Annex G) */
		case OP_LOR: cput(t, tv || ov); break;
		case OP_LAND: cput(t, tv && ov); break;
		case OP_LXOR: cput(t, (tv && !ov) || (!tv && ov)); break;
		default: {
			_Complex long double cv = cget(c);
			c += 2 * LD;
			take = op == OP_CSWAP ? cv == tv : cv != tv;
		}
		}
		if (take)
			memcpy(t, o, 2 * LD);
	}
	return 0;
}

int gnix_ld_apply(unsigned op, int is_complex, void *target, const void *operand, const void *compare, size_t count)
{
	return is_complex ? cplx(op, target, operand, compare, count) : real(op, target, operand, compare, count);
}

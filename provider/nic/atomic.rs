//! The atomic executor: libfabric 1.17 atomic operations (fi_atomic(3)) on
//! byte buffers.
//!
//! The endpoint copies the target elements out of registered memory, calls
//! [`apply`], and copies them back, all under one lock; this module only
//! ever sees slices. Which op is defined on which datatype mirrors
//! libfabric's own software implementation (prov/util/src/util_atomic.c,
//! its open-coded variant, which covers every datatype, plus the 128-bit
//! integers), and so do the semantics:
//!
//! * MIN/MAX: `if (target > operand) target = operand` (resp. `<`), so a NaN
//!   on either side leaves the target as it was.
//! * Integer SUM/PROD wrap (two's complement, as the C code does in practice).
//! * LOR/LAND/LXOR produce 1 or 0 in the target's type; a float is true when
//!   `!= 0`, a complex value when either part is nonzero.
//! * CSWAP_xx: `if (compare xx target) target = operand`, compared as C
//!   compares the type (IEEE for floats: `-0.0 == 0.0`, NaN equals nothing).
//! * MSWAP: `target = (operand & compare) | (target & !compare)`.
//! * Fetch and compare calls return the old target, bit for bit.
//!
//! A value moved unchanged (WRITE, a taken swap, MIN/MAX taking the operand)
//! is copied bit for bit. Buffers need no alignment: elements are read and
//! written with `from_ne_bytes`/`to_ne_bytes` (host byte order, as in the
//! application's memory).
//!
//! Long double has no Rust type, so FI_LONG_DOUBLE and FI_LONG_DOUBLE_COMPLEX
//! are computed in C (atomic_ld.c, built by build.rs); that one FFI call is
//! the module's only `unsafe`.

#![deny(unsafe_code)]

use crate::ffi::*;

/// Which family of call: fi_atomic, fi_fetch_atomic, fi_compare_atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicClass {
    Plain,
    Fetch,
    Compare,
}

/// Largest atomic payload in bytes of one operation (count * size).
pub(crate) const MAX_ATOMIC_BYTES: usize = 4096;

/// The datatype groups util_atomic.c instantiates its handlers over: its
/// INT handlers take `Int`, REALNO takes `Int` and `Real`, ALL takes all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Real,
    Complex,
}

/// Size and kind of a datatype, None if the value names none.
fn datatype(dt: u32) -> Option<(usize, Kind)> {
    use Kind::*;
    Some(match dt {
        FI_INT8 | FI_UINT8 => (1, Int),
        FI_INT16 | FI_UINT16 => (2, Int),
        FI_INT32 | FI_UINT32 => (4, Int),
        FI_INT64 | FI_UINT64 => (8, Int),
        FI_INT128 | FI_UINT128 => (16, Int),
        FI_FLOAT => (4, Real),
        FI_DOUBLE => (8, Real),
        // x86-64 (80-bit extended, padded) and aarch64 (binary128) alike;
        // atomic_ld.c asserts it.
        FI_LONG_DOUBLE => (16, Real),
        FI_FLOAT_COMPLEX => (8, Complex),
        FI_DOUBLE_COMPLEX => (16, Complex),
        FI_LONG_DOUBLE_COMPLEX => (32, Complex),
        _ => return None,
    })
}

/// Size in bytes of a libfabric datatype (FI_INT8 .. FI_LONG_DOUBLE_COMPLEX,
/// FI_INT128, FI_UINT128), None if unknown.
pub(crate) fn datatype_size(dt: u32) -> Option<usize> {
    datatype(dt).map(|(size, _)| size)
}

/// Whether `op` belongs to the calls of `class` (fi_atomic(3): "usable
/// with base / fetch / compare atomic operations").
fn in_class(class: AtomicClass, op: u32) -> bool {
    match class {
        AtomicClass::Plain => matches!(op, FI_MIN..=FI_BXOR | FI_ATOMIC_WRITE),
        AtomicClass::Fetch => matches!(op, FI_MIN..=FI_ATOMIC_WRITE),
        AtomicClass::Compare => matches!(op, FI_CSWAP..=FI_MSWAP),
    }
}

/// Whether `op` is defined on datatypes of `kind`: the handler set
/// util_atomic.c instantiates the op with.
fn defined_on(op: u32, kind: Kind) -> bool {
    match op {
        // Orderings: complex numbers have none (REALNO).
        FI_MIN | FI_MAX | FI_CSWAP_LE | FI_CSWAP_LT | FI_CSWAP_GE | FI_CSWAP_GT => kind != Kind::Complex,
        // Bit operations: integers only (INT).
        FI_BOR | FI_BAND | FI_BXOR | FI_MSWAP => kind == Kind::Int,
        // SUM, PROD, LOR, LAND, LXOR, READ, WRITE, CSWAP, CSWAP_NE (ALL).
        _ => true,
    }
}

/// fi_atomicvalid / fi_fetch_atomicvalid / fi_compare_atomicvalid: Ok(count)
/// = the largest count of elements one operation may carry
/// (MAX_ATOMIC_BYTES / size), or Err(-FI_EOPNOTSUPP) when op is not defined
/// for dt in this class, Err(-FI_EINVAL) for an unknown op or datatype value.
pub(crate) fn valid(class: AtomicClass, op: u32, dt: u32) -> Result<usize, i32> {
    let (size, kind) = datatype(dt).ok_or(-FI_EINVAL)?;
    if op >= FI_ATOMIC_OP_LAST {
        return Err(-FI_EINVAL);
    }
    if !in_class(class, op) || !defined_on(op, kind) {
        return Err(-FI_EOPNOTSUPP);
    }
    Ok(MAX_ATOMIC_BYTES / size)
}

/// Applies `op` element-wise to `target` (count = target.len()/size elements).
/// `operand`: same length as target, except FI_ATOMIC_READ (empty). `compare`:
/// same length for Compare class, else empty. `fetched`: for Fetch/Compare
/// the old target value (same length), else empty.
///
/// Errors, checked before anything is written: those of [`valid`] (so
/// -FI_EOPNOTSUPP when op is not defined for dt in this class, -FI_EINVAL
/// for an unknown op or datatype value), then -FI_EINVAL when a length does
/// not fit. Any count is executed, 0 included (a no-op): holding a call to
/// the count [`valid`] returns is the caller's part.
pub(crate) fn apply(
    class: AtomicClass,
    op: u32,
    dt: u32,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    fetched: &mut [u8],
) -> Result<(), i32> {
    valid(class, op, dt)?;
    let (size, _) = datatype(dt).ok_or(-FI_EINVAL)?;
    let len = target.len();
    let operand_len = if op == FI_ATOMIC_READ { 0 } else { len };
    let compare_len = if class == AtomicClass::Compare { len } else { 0 };
    let fetched_len = if class == AtomicClass::Plain { 0 } else { len };
    if !len.is_multiple_of(size)
        || operand.len() != operand_len
        || compare.len() != compare_len
        || fetched.len() != fetched_len
    {
        return Err(-FI_EINVAL);
    }

    if class != AtomicClass::Plain {
        fetched.copy_from_slice(target);
    }
    match op {
        FI_ATOMIC_READ => Ok(()),
        FI_ATOMIC_WRITE => {
            target.copy_from_slice(operand);
            Ok(())
        }
        _ => match dt {
            FI_INT8 => run::<i8>(op, target, operand, compare),
            FI_UINT8 => run::<u8>(op, target, operand, compare),
            FI_INT16 => run::<i16>(op, target, operand, compare),
            FI_UINT16 => run::<u16>(op, target, operand, compare),
            FI_INT32 => run::<i32>(op, target, operand, compare),
            FI_UINT32 => run::<u32>(op, target, operand, compare),
            FI_INT64 => run::<i64>(op, target, operand, compare),
            FI_UINT64 => run::<u64>(op, target, operand, compare),
            FI_INT128 => run::<i128>(op, target, operand, compare),
            FI_UINT128 => run::<u128>(op, target, operand, compare),
            FI_FLOAT => run::<f32>(op, target, operand, compare),
            FI_DOUBLE => run::<f64>(op, target, operand, compare),
            FI_FLOAT_COMPLEX => run::<Complex<f32>>(op, target, operand, compare),
            FI_DOUBLE_COMPLEX => run::<Complex<f64>>(op, target, operand, compare),
            FI_LONG_DOUBLE => long_double(op, false, target, operand, compare),
            FI_LONG_DOUBLE_COMPLEX => long_double(op, true, target, operand, compare),
            _ => Err(-FI_EINVAL),
        },
    }
}

/// One element of a datatype Rust computes natively.
///
/// The op methods return None for an op not defined on the type. [`valid`]
/// has ruled those out before; were the two ever to disagree, the None comes
/// from the first element, before the target is written (whether an op is
/// defined never depends on the values).
trait Elem: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    /// The new target of the read-modify-write ops FI_MIN ..= FI_BXOR.
    fn combine(op: u32, target: Self, operand: Self) -> Option<Self>;
    /// Whether a CSWAP-family op swaps: `compare <op> target`.
    fn swaps(op: u32, compare: Self, target: Self) -> Option<bool>;
    /// The new target of FI_MSWAP.
    fn mswap(_target: Self, _operand: Self, _compare: Self) -> Option<Self> {
        None
    }
}

/// Runs every op but READ and WRITE (done on bytes by [`apply`]) over
/// elements of type `T`; the lengths are checked.
fn run<T: Elem>(op: u32, target: &mut [u8], operand: &[u8], compare: &[u8]) -> Result<(), i32> {
    let n = T::SIZE;
    let unsupported = -FI_EOPNOTSUPP;
    match op {
        FI_CSWAP..=FI_CSWAP_GT => {
            for ((t, o), c) in target
                .chunks_exact_mut(n)
                .zip(operand.chunks_exact(n))
                .zip(compare.chunks_exact(n))
            {
                if T::swaps(op, T::load(c), T::load(t)).ok_or(unsupported)? {
                    t.copy_from_slice(o);
                }
            }
        }
        FI_MSWAP => {
            for ((t, o), c) in target
                .chunks_exact_mut(n)
                .zip(operand.chunks_exact(n))
                .zip(compare.chunks_exact(n))
            {
                T::mswap(T::load(t), T::load(o), T::load(c))
                    .ok_or(unsupported)?
                    .store(t);
            }
        }
        _ => {
            for (t, o) in target.chunks_exact_mut(n).zip(operand.chunks_exact(n)) {
                T::combine(op, T::load(t), T::load(o)).ok_or(unsupported)?.store(t);
            }
        }
    }
    Ok(())
}

/// `compare <op> target` for the CSWAP family on an ordered type.
fn ordered_swaps<T: PartialOrd>(op: u32, c: T, t: T) -> Option<bool> {
    Some(match op {
        FI_CSWAP => c == t,
        FI_CSWAP_NE => c != t,
        FI_CSWAP_LE => c <= t,
        FI_CSWAP_LT => c < t,
        FI_CSWAP_GE => c >= t,
        FI_CSWAP_GT => c > t,
        _ => return None,
    })
}

/// Elements stored as their own `to_ne_bytes`.
macro_rules! ne_bytes {
    ($t:ty) => {
        const SIZE: usize = std::mem::size_of::<$t>();
        fn load(b: &[u8]) -> Self {
            let mut a = [0u8; std::mem::size_of::<$t>()];
            a.copy_from_slice(b);
            <$t>::from_ne_bytes(a)
        }
        fn store(self, b: &mut [u8]) {
            b.copy_from_slice(&self.to_ne_bytes());
        }
    };
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            ne_bytes!($t);
            fn combine(op: u32, t: Self, o: Self) -> Option<Self> {
                Some(match op {
                    FI_MIN => if t > o { o } else { t },
                    FI_MAX => if t < o { o } else { t },
                    FI_SUM => t.wrapping_add(o),
                    FI_PROD => t.wrapping_mul(o),
                    FI_LOR => Self::from(t != 0 || o != 0),
                    FI_LAND => Self::from(t != 0 && o != 0),
                    FI_LXOR => Self::from((t != 0) != (o != 0)),
                    FI_BOR => t | o,
                    FI_BAND => t & o,
                    FI_BXOR => t ^ o,
                    _ => return None,
                })
            }
            fn swaps(op: u32, c: Self, t: Self) -> Option<bool> {
                ordered_swaps(op, c, t)
            }
            fn mswap(t: Self, o: Self, c: Self) -> Option<Self> {
                Some((o & c) | (t & !c))
            }
        }
    )*};
}
int_elem!(i8, u8, i16, u16, i32, u32, i64, u64, i128, u128);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            ne_bytes!($t);
            fn combine(op: u32, t: Self, o: Self) -> Option<Self> {
                let truth = |b: bool| if b { 1.0 } else { 0.0 };
                Some(match op {
                    // Not `min`/`max`: those prefer the non-NaN side, C's
                    // comparison leaves the target.
                    FI_MIN => if t > o { o } else { t },
                    FI_MAX => if t < o { o } else { t },
                    FI_SUM => t + o,
                    FI_PROD => t * o,
                    FI_LOR => truth(t != 0.0 || o != 0.0),
                    FI_LAND => truth(t != 0.0 && o != 0.0),
                    FI_LXOR => truth((t != 0.0) != (o != 0.0)),
                    _ => return None,
                })
            }
            fn swaps(op: u32, c: Self, t: Self) -> Option<bool> {
                ordered_swaps(op, c, t)
            }
        }
    )*};
}
float_elem!(f32, f64);

/// C's `float complex` / `double complex`: real part, then imaginary part.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Complex<F> {
    re: F,
    im: F,
}

macro_rules! complex_elem {
    ($($f:ty),*) => {$(
        impl Complex<$f> {
            /// C's truth value of a complex number.
            fn truth(self) -> bool {
                self.re != 0.0 || self.im != 0.0
            }
            fn from_bool(b: bool) -> Self {
                Complex { re: if b { 1.0 } else { 0.0 }, im: 0.0 }
            }
            /// C's complex multiplication: the textbook formula, and where it
            /// gives NaN + NaN i, the recovery of C11 Annex G.5.1 (what GCC's
            /// `__mulsc3`/`__muldc3` do), so an infinite factor gives an
            /// infinite product as in the application's own C.
            fn mul(self, w: Self) -> Self {
                let (mut a, mut b, mut c, mut d) = (self.re, self.im, w.re, w.im);
                let (ac, bd, ad, bc) = (a * c, b * d, a * d, b * c);
                let (x, y) = (ac - bd, ad + bc);
                if !(x.is_nan() && y.is_nan()) {
                    return Complex { re: x, im: y };
                }
                // An infinity turned to 1 (0 for a finite part), keeping its sign.
                let boxed = |v: $f| (if v.is_infinite() { 1.0 } else { 0.0 as $f }).copysign(v);
                let nan_to_zero = |v: $f| if v.is_nan() { (0.0 as $f).copysign(v) } else { v };
                let mut recalc = false;
                if a.is_infinite() || b.is_infinite() {
                    (a, b, c, d) = (boxed(a), boxed(b), nan_to_zero(c), nan_to_zero(d));
                    recalc = true;
                }
                if c.is_infinite() || d.is_infinite() {
                    (a, b, c, d) = (nan_to_zero(a), nan_to_zero(b), boxed(c), boxed(d));
                    recalc = true;
                }
                if !recalc && (ac.is_infinite() || bd.is_infinite() || ad.is_infinite() || bc.is_infinite()) {
                    // Overflow: the NaNs came from inf - inf; drop NaN inputs.
                    (a, b, c, d) = (nan_to_zero(a), nan_to_zero(b), nan_to_zero(c), nan_to_zero(d));
                    recalc = true;
                }
                if !recalc {
                    return Complex { re: x, im: y };
                }
                Complex { re: <$f>::INFINITY * (a * c - b * d), im: <$f>::INFINITY * (a * d + b * c) }
            }
        }

        impl Elem for Complex<$f> {
            const SIZE: usize = 2 * std::mem::size_of::<$f>();
            fn load(b: &[u8]) -> Self {
                let (re, im) = b.split_at(std::mem::size_of::<$f>());
                Complex { re: <$f>::load(re), im: <$f>::load(im) }
            }
            fn store(self, b: &mut [u8]) {
                let (re, im) = b.split_at_mut(std::mem::size_of::<$f>());
                self.re.store(re);
                self.im.store(im);
            }
            fn combine(op: u32, t: Self, o: Self) -> Option<Self> {
                Some(match op {
                    FI_SUM => Complex { re: t.re + o.re, im: t.im + o.im },
                    FI_PROD => t.mul(o),
                    FI_LOR => Self::from_bool(t.truth() || o.truth()),
                    FI_LAND => Self::from_bool(t.truth() && o.truth()),
                    FI_LXOR => Self::from_bool(t.truth() != o.truth()),
                    _ => return None,
                })
            }
            fn swaps(op: u32, c: Self, t: Self) -> Option<bool> {
                // C's `==` on complex: both parts equal (IEEE).
                let eq = c.re == t.re && c.im == t.im;
                Some(match op {
                    FI_CSWAP => eq,
                    FI_CSWAP_NE => !eq,
                    _ => return None,
                })
            }
        }
    )*};
}
complex_elem!(f32, f64);

extern "C" {
    /// atomic_ld.c: applies `op` (an `enum fi_op` value, not READ or WRITE)
    /// to `count` long doubles (or long double complex pairs); reads
    /// `compare` only for the CSWAP ops. Returns 0, or -1 (nothing written)
    /// for an op it does not compute.
    fn gnix_ld_apply(
        op: u32,
        is_complex: std::ffi::c_int,
        target: *mut std::ffi::c_void,
        operand: *const std::ffi::c_void,
        compare: *const std::ffi::c_void,
        count: usize,
    ) -> std::ffi::c_int;
}

/// FI_LONG_DOUBLE (`is_complex` false) or FI_LONG_DOUBLE_COMPLEX, in C.
#[allow(unsafe_code)]
fn long_double(op: u32, is_complex: bool, target: &mut [u8], operand: &[u8], compare: &[u8]) -> Result<(), i32> {
    let size = if is_complex { 32 } else { 16 };
    let count = target.len() / size;
    // apply() checked these already; checked again here so that the
    // soundness of the call below rests on this function alone.
    let reads_compare = matches!(op, FI_CSWAP..=FI_CSWAP_GT);
    if !target.len().is_multiple_of(size)
        || operand.len() != target.len()
        || (reads_compare && compare.len() != target.len())
    {
        return Err(-FI_EINVAL);
    }
    // SAFETY: gnix_ld_apply reads and writes `count * size` bytes at
    // `target`, reads as many at `operand`, and as many at `compare` only
    // for the CSWAP ops, for which `compare` was just checked to be that
    // long; the three lengths equal `count * size` (checked above). It
    // copies every element with memcpy, so no alignment is needed, and
    // keeps no pointer past the call. The slices are live for the whole
    // call and `target` is borrowed exclusively, so nothing else reads or
    // writes it meanwhile.
    let rc = unsafe {
        gnix_ld_apply(
            op,
            std::ffi::c_int::from(is_complex),
            target.as_mut_ptr().cast(),
            operand.as_ptr().cast(),
            compare.as_ptr().cast(),
            count,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(-FI_EOPNOTSUPP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use AtomicClass::*;

    const CLASSES: [AtomicClass; 3] = [Plain, Fetch, Compare];

    // The validity table as util_atomic.c spells it (v1.17.1), written out
    // independently of `valid`: its three dispatch tables, one row per op,
    // each row one of its handler sets. The open-coded variant (the one
    // with long double), with the 128-bit integers of
    // HAVE_BUILTIN_MM_INT128_ATOMICS.
    const INT: &[u32] = &[
        FI_INT8, FI_UINT8, FI_INT16, FI_UINT16, FI_INT32, FI_UINT32, FI_INT64, FI_UINT64, FI_INT128, FI_UINT128,
    ];
    const REALNO: &[u32] = &[
        FI_INT8,
        FI_UINT8,
        FI_INT16,
        FI_UINT16,
        FI_INT32,
        FI_UINT32,
        FI_INT64,
        FI_UINT64,
        FI_INT128,
        FI_UINT128,
        FI_FLOAT,
        FI_DOUBLE,
        FI_LONG_DOUBLE,
    ];
    const ALL: &[u32] = &[
        FI_INT8,
        FI_UINT8,
        FI_INT16,
        FI_UINT16,
        FI_INT32,
        FI_UINT32,
        FI_INT64,
        FI_UINT64,
        FI_INT128,
        FI_UINT128,
        FI_FLOAT,
        FI_DOUBLE,
        FI_LONG_DOUBLE,
        FI_FLOAT_COMPLEX,
        FI_DOUBLE_COMPLEX,
        FI_LONG_DOUBLE_COMPLEX,
    ];
    /// ofi_atomic_write_handlers (fi_atomic). FI_ATOMIC_READ: OFI_OP_NOT_SUPPORTED.
    const WRITE_TABLE: &[(u32, &[u32])] = &[
        (FI_MIN, REALNO),
        (FI_MAX, REALNO),
        (FI_SUM, ALL),
        (FI_PROD, ALL),
        (FI_LOR, ALL),
        (FI_LAND, ALL),
        (FI_BOR, INT),
        (FI_BAND, INT),
        (FI_LXOR, ALL),
        (FI_BXOR, INT),
        (FI_ATOMIC_WRITE, ALL),
    ];
    /// ofi_atomic_readwrite_handlers (fi_fetch_atomic).
    const READWRITE_TABLE: &[(u32, &[u32])] = &[
        (FI_MIN, REALNO),
        (FI_MAX, REALNO),
        (FI_SUM, ALL),
        (FI_PROD, ALL),
        (FI_LOR, ALL),
        (FI_LAND, ALL),
        (FI_BOR, INT),
        (FI_BAND, INT),
        (FI_LXOR, ALL),
        (FI_BXOR, INT),
        (FI_ATOMIC_READ, ALL),
        (FI_ATOMIC_WRITE, ALL),
    ];
    /// ofi_atomic_swap_handlers (fi_compare_atomic).
    const SWAP_TABLE: &[(u32, &[u32])] = &[
        (FI_CSWAP, ALL),
        (FI_CSWAP_NE, ALL),
        (FI_CSWAP_LE, REALNO),
        (FI_CSWAP_LT, REALNO),
        (FI_CSWAP_GE, REALNO),
        (FI_CSWAP_GT, REALNO),
        (FI_MSWAP, INT),
    ];
    /// ofi_datatype_size_table (x86-64 / aarch64).
    const SIZES: &[(u32, usize)] = &[
        (FI_INT8, 1),
        (FI_UINT8, 1),
        (FI_INT16, 2),
        (FI_UINT16, 2),
        (FI_INT32, 4),
        (FI_UINT32, 4),
        (FI_INT64, 8),
        (FI_UINT64, 8),
        (FI_FLOAT, 4),
        (FI_DOUBLE, 8),
        (FI_FLOAT_COMPLEX, 8),
        (FI_DOUBLE_COMPLEX, 16),
        (FI_LONG_DOUBLE, 16),
        (FI_LONG_DOUBLE_COMPLEX, 32),
        (FI_INT128, 16),
        (FI_UINT128, 16),
    ];

    fn expected(class: AtomicClass, op: u32, dt: u32) -> Result<usize, i32> {
        let Some(&(_, size)) = SIZES.iter().find(|(d, _)| *d == dt) else {
            return Err(-FI_EINVAL);
        };
        if op >= FI_ATOMIC_OP_LAST {
            return Err(-FI_EINVAL);
        }
        let table = match class {
            Plain => WRITE_TABLE,
            Fetch => READWRITE_TABLE,
            Compare => SWAP_TABLE,
        };
        match table.iter().find(|(o, _)| *o == op) {
            Some((_, dts)) if dts.contains(&dt) => Ok(MAX_ATOMIC_BYTES / size),
            _ => Err(-FI_EOPNOTSUPP),
        }
    }

    /// Every op and datatype value, plus a few past the ends.
    fn all_ops() -> impl Iterator<Item = u32> {
        (0..FI_ATOMIC_OP_LAST + 3).chain([FI_NOOP, u32::MAX])
    }
    fn all_dts() -> impl Iterator<Item = u32> {
        (0..FI_UINT128 + 3).chain([FI_VOID, u32::MAX])
    }

    /// Runs `apply` on copies placed one byte into their buffers, so that
    /// no element is aligned. Returns (target, fetched) afterwards.
    fn exec_bytes(
        class: AtomicClass,
        op: u32,
        dt: u32,
        target: &[u8],
        operand: &[u8],
        compare: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), i32> {
        let misaligned = |b: &[u8]| [&[0x5a][..], b].concat();
        let mut t = misaligned(target);
        let o = misaligned(operand);
        let c = misaligned(compare);
        let fetched_len = if class == Plain { 0 } else { target.len() };
        let mut f = misaligned(&vec![0xee; fetched_len]);
        apply(class, op, dt, &mut t[1..], &o[1..], &c[1..], &mut f[1..])?;
        Ok((t[1..].to_vec(), f[1..].to_vec()))
    }

    fn to_bytes<T: Elem>(v: &[T]) -> Vec<u8> {
        let mut b = vec![0; v.len() * T::SIZE];
        for (x, chunk) in v.iter().zip(b.chunks_exact_mut(T::SIZE)) {
            x.store(chunk);
        }
        b
    }
    fn from_bytes<T: Elem>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(T::SIZE).map(T::load).collect()
    }

    /// `exec_bytes` on typed elements.
    fn exec<T: Elem>(
        class: AtomicClass,
        op: u32,
        dt: u32,
        target: &[T],
        operand: &[T],
        compare: &[T],
    ) -> Result<(Vec<T>, Vec<T>), i32> {
        let (t, f) = exec_bytes(class, op, dt, &to_bytes(target), &to_bytes(operand), &to_bytes(compare))?;
        Ok((from_bytes(&t), from_bytes(&f)))
    }

    /// One element: (new target, fetched) of a fetch or compare call, the
    /// target of a plain one.
    fn one<T: Elem>(class: AtomicClass, op: u32, dt: u32, t: T, o: T, c: T) -> (T, Option<T>) {
        let operand = if op == FI_ATOMIC_READ { vec![] } else { vec![o] };
        let compare = if class == Compare { vec![c] } else { vec![] };
        let (nt, f) = exec(class, op, dt, &[t], &operand, &compare).unwrap();
        (nt[0], f.first().copied())
    }

    // ---- validity ----

    #[test]
    fn valid_matches_util_atomic_for_every_triple() {
        let mut ok = [0; 3];
        for (i, class) in CLASSES.into_iter().enumerate() {
            for op in all_ops() {
                for dt in all_dts() {
                    assert_eq!(
                        valid(class, op, dt),
                        expected(class, op, dt),
                        "{class:?} op {op} dt {dt}"
                    );
                    ok[i] += usize::from(valid(class, op, dt).is_ok());
                }
            }
        }
        // Plain: 2 ops x 13 types + 6 x 16 + 3 x 10; fetch: READ x 16 more;
        // compare: 2 x 16 + 4 x 13 + 1 x 10.
        assert_eq!(ok, [152, 168, 94]);
    }

    #[test]
    fn sizes_and_counts() {
        for dt in all_dts() {
            let size = SIZES.iter().find(|(d, _)| *d == dt).map(|&(_, s)| s);
            assert_eq!(datatype_size(dt), size, "dt {dt}");
        }
        assert_eq!(valid(Plain, FI_SUM, FI_INT8), Ok(4096));
        assert_eq!(valid(Fetch, FI_SUM, FI_UINT64), Ok(512));
        assert_eq!(valid(Compare, FI_CSWAP, FI_LONG_DOUBLE_COMPLEX), Ok(128));
    }

    /// Every valid triple runs; every other one fails as `valid` does and
    /// writes nothing.
    #[test]
    fn apply_runs_exactly_the_valid_triples() {
        for class in CLASSES {
            for op in all_ops() {
                for dt in all_dts() {
                    let n = 2 * datatype_size(dt).unwrap_or(1);
                    let target: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
                    let operand = if op == FI_ATOMIC_READ { vec![] } else { vec![3; n] };
                    let compare = if class == Compare { vec![5; n] } else { vec![] };
                    let mut t = target.clone();
                    let mut f = vec![0xee; if class == Plain { 0 } else { n }];
                    let r = apply(class, op, dt, &mut t, &operand, &compare, &mut f);
                    match valid(class, op, dt) {
                        Ok(_) => {
                            assert_eq!(r, Ok(()), "{class:?} op {op} dt {dt}");
                            if class != Plain {
                                assert_eq!(f, target, "fetched: {class:?} op {op} dt {dt}");
                            }
                        }
                        Err(e) => {
                            assert_eq!(r, Err(e), "{class:?} op {op} dt {dt}");
                            assert_eq!(t, target);
                            assert!(f.iter().all(|&b| b == 0xee));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn undefined_pairs_are_refused() {
        let e = Err(-FI_EOPNOTSUPP);
        let mut t = [0u8; 8];
        let (o, c) = ([0u8; 8], [0u8; 8]);
        assert_eq!(apply(Plain, FI_BOR, FI_FLOAT, &mut t[..4], &o[..4], &[], &mut []), e);
        assert_eq!(apply(Plain, FI_MIN, FI_FLOAT_COMPLEX, &mut t, &o, &[], &mut []), e);
        assert_eq!(apply(Plain, FI_ATOMIC_READ, FI_INT64, &mut t, &[], &[], &mut []), e);
        assert_eq!(apply(Plain, FI_CSWAP, FI_INT64, &mut t, &o, &[], &mut []), e);
        assert_eq!(apply(Fetch, FI_MSWAP, FI_INT64, &mut t, &o, &c, &mut [0; 8]), e);
        assert_eq!(apply(Compare, FI_SUM, FI_INT64, &mut t, &o, &c, &mut [0; 8]), e);
        assert_eq!(apply(Compare, FI_MSWAP, FI_DOUBLE, &mut t, &o, &c, &mut [0; 8]), e);
        assert_eq!(
            apply(Compare, FI_CSWAP_GT, FI_FLOAT_COMPLEX, &mut t, &o, &c, &mut [0; 8]),
            e
        );
        // Unknown values are invalid arguments rather than unsupported.
        let inval = Err(-FI_EINVAL);
        assert_eq!(
            apply(Plain, FI_ATOMIC_OP_LAST, FI_INT64, &mut t, &o, &[], &mut []),
            inval
        );
        assert_eq!(apply(Plain, FI_SUM, FI_UINT128 + 1, &mut t, &o, &[], &mut []), inval);
        assert_eq!(t, [0; 8]);
    }

    #[test]
    fn lengths_that_do_not_fit_are_refused() {
        let inval = Err(-FI_EINVAL);
        let mut t = [7u8; 8];
        let o = [1u8; 8];
        // Not a whole number of elements.
        assert_eq!(
            apply(Plain, FI_SUM, FI_INT16, &mut t[..3], &o[..3], &[], &mut []),
            inval
        );
        assert_eq!(apply(Plain, FI_SUM, FI_LONG_DOUBLE, &mut t, &o, &[], &mut []), inval);
        // Operand too short, too long, or given to a READ.
        assert_eq!(apply(Plain, FI_SUM, FI_INT16, &mut t, &o[..6], &[], &mut []), inval);
        assert_eq!(apply(Plain, FI_SUM, FI_INT16, &mut t[..4], &o, &[], &mut []), inval);
        assert_eq!(
            apply(Fetch, FI_ATOMIC_READ, FI_INT16, &mut t, &o, &[], &mut [0; 8]),
            inval
        );
        // Compare only for the compare class, and then as long as the target.
        assert_eq!(apply(Plain, FI_SUM, FI_INT16, &mut t, &o, &o, &mut []), inval);
        assert_eq!(apply(Fetch, FI_SUM, FI_INT16, &mut t, &o, &o, &mut [0; 8]), inval);
        assert_eq!(
            apply(Compare, FI_CSWAP, FI_INT16, &mut t, &o, &o[..6], &mut [0; 8]),
            inval
        );
        assert_eq!(apply(Compare, FI_CSWAP, FI_INT16, &mut t, &o, &[], &mut [0; 8]), inval);
        // Fetched exactly for the fetch and compare classes.
        assert_eq!(apply(Plain, FI_SUM, FI_INT16, &mut t, &o, &[], &mut [0; 8]), inval);
        assert_eq!(apply(Fetch, FI_SUM, FI_INT16, &mut t, &o, &[], &mut []), inval);
        assert_eq!(apply(Fetch, FI_SUM, FI_INT16, &mut t, &o, &[], &mut [0; 6]), inval);
        assert_eq!(apply(Compare, FI_CSWAP, FI_INT16, &mut t, &o, &o, &mut [0; 10]), inval);
        assert_eq!(t, [7; 8], "nothing written");
        // No element at all is a (vacuous) success.
        assert_eq!(apply(Fetch, FI_SUM, FI_INT16, &mut [], &[], &[], &mut []), Ok(()));
    }

    // ---- integers ----

    #[test]
    fn integer_sum_and_prod_wrap() {
        assert_eq!(one(Plain, FI_SUM, FI_INT8, 127i8, 1, 0).0, -128);
        assert_eq!(one(Plain, FI_PROD, FI_INT8, i8::MIN, -1, 0).0, i8::MIN);
        assert_eq!(one(Plain, FI_SUM, FI_UINT8, 255u8, 1, 0).0, 0);
        assert_eq!(one(Plain, FI_SUM, FI_INT64, i64::MIN, -1, 0).0, i64::MAX);
        assert_eq!(one(Plain, FI_PROD, FI_UINT64, u64::MAX, u64::MAX, 0).0, 1);
        assert_eq!(one(Plain, FI_PROD, FI_UINT32, 0x1_0000u32, 0x1_0000, 0).0, 0);
        assert_eq!(one(Plain, FI_SUM, FI_INT128, i128::MAX, 1, 0).0, i128::MIN);
        assert_eq!(one(Plain, FI_PROD, FI_UINT128, 1u128 << 127, 2, 0).0, 0);
    }

    #[test]
    fn integer_ops_by_example() {
        let f = |op, t: i32, o: i32| one(Fetch, op, FI_INT32, t, o, 0);
        assert_eq!(f(FI_MIN, 5, -3), (-3, Some(5)));
        assert_eq!(f(FI_MAX, 5, -3), (5, Some(5)));
        assert_eq!(one(Plain, FI_MIN, FI_UINT32, 5u32, u32::MAX, 0).0, 5, "unsigned order");
        assert_eq!(one(Plain, FI_MAX, FI_UINT16, 5u16, u16::MAX, 0).0, u16::MAX);
        assert_eq!(f(FI_LOR, 0, 0).0, 0);
        assert_eq!(f(FI_LOR, 0, -7).0, 1);
        assert_eq!(f(FI_LAND, 2, -7).0, 1);
        assert_eq!(f(FI_LAND, 2, 0).0, 0);
        assert_eq!(f(FI_LXOR, 2, 0).0, 1);
        assert_eq!(f(FI_LXOR, 2, 3).0, 0);
        assert_eq!(f(FI_BOR, 0b1100, 0b1010).0, 0b1110);
        assert_eq!(f(FI_BAND, 0b1100, 0b1010).0, 0b1000);
        assert_eq!(f(FI_BXOR, 0b1100, 0b1010).0, 0b0110);
        assert_eq!(f(FI_ATOMIC_WRITE, 1, 2), (2, Some(1)), "a fetching write is a swap");
        assert_eq!(f(FI_ATOMIC_READ, 9, 0), (9, Some(9)));
        // MSWAP: the operand's bits where the mask is set, the target's elsewhere.
        let m = one(Compare, FI_MSWAP, FI_UINT8, 0b1100_1010u8, 0b0101_0101, 0b1111_0000);
        assert_eq!(m, (0b0101_1010, Some(0b1100_1010)));
    }

    /// Each CSWAP variant compares `compare <op> target` (fi_atomic(3)),
    /// both taken and not.
    #[test]
    fn cswap_variants_taken_and_not() {
        // (op, compare, target) taken; then one not taken.
        let cases = [
            (FI_CSWAP, (4, 4), (3, 4)),
            (FI_CSWAP_NE, (3, 4), (4, 4)),
            (FI_CSWAP_LE, (3, 4), (5, 4)),
            (FI_CSWAP_LE, (4, 4), (5, 4)),
            (FI_CSWAP_LT, (3, 4), (4, 4)),
            (FI_CSWAP_GE, (5, 4), (3, 4)),
            (FI_CSWAP_GE, (4, 4), (3, 4)),
            (FI_CSWAP_GT, (5, 4), (4, 4)),
        ];
        for (op, (tc, tt), (nc, nt)) in cases {
            assert_eq!(
                one(Compare, op, FI_INT16, tt as i16, 99, tc),
                (99, Some(tt as i16)),
                "op {op} taken"
            );
            assert_eq!(
                one(Compare, op, FI_INT16, nt as i16, 99, nc),
                (nt as i16, Some(nt as i16)),
                "op {op} not"
            );
        }
        // Signed versus unsigned order.
        assert_eq!(one(Compare, FI_CSWAP_LT, FI_INT8, 1i8, 9, -1).0, 9);
        assert_eq!(one(Compare, FI_CSWAP_LT, FI_UINT8, 1u8, 9, 255).0, 1);
    }

    /// Several elements at once, each on its own.
    #[test]
    fn elementwise() {
        let t = [1u16, 2, 3, 4];
        let (nt, f) = exec(Compare, FI_CSWAP, FI_UINT16, &t, &[10, 20, 30, 40], &[1, 0, 3, 0]).unwrap();
        assert_eq!((nt, f), (vec![10, 2, 30, 4], t.to_vec()));
    }

    macro_rules! int_props {
        ($($name:ident: $t:ty = $dt:expr;)*) => {$(
            proptest! {
                /// Every op of every class on three elements, against a
                /// plain reference.
                #[test]
                fn $name(
                    t in prop::array::uniform3(prop_oneof![
                        Just(<$t>::MIN), Just(<$t>::MAX), Just(0 as $t), Just(1 as $t), any::<$t>()]),
                    o in prop::array::uniform3(prop_oneof![
                        Just(<$t>::MIN), Just(<$t>::MAX), Just(0 as $t), Just(1 as $t), any::<$t>()]),
                    c in prop::array::uniform3(prop_oneof![
                        Just(<$t>::MIN), Just(<$t>::MAX), Just(0 as $t), Just(1 as $t), any::<$t>()]),
                ) {
                    let reference = |op: u32, t: $t, o: $t, c: $t| -> $t {
                        let truth = |x: $t| x != 0;
                        match op {
                            FI_MIN => t.min(o),
                            FI_MAX => t.max(o),
                            FI_SUM => t.wrapping_add(o),
                            FI_PROD => t.wrapping_mul(o),
                            FI_LOR => (truth(t) || truth(o)) as $t,
                            FI_LAND => (truth(t) && truth(o)) as $t,
                            FI_LXOR => (truth(t) ^ truth(o)) as $t,
                            FI_BOR => t | o,
                            FI_BAND => t & o,
                            FI_BXOR => t ^ o,
                            FI_ATOMIC_READ => t,
                            FI_ATOMIC_WRITE => o,
                            FI_CSWAP => if c == t { o } else { t },
                            FI_CSWAP_NE => if c != t { o } else { t },
                            FI_CSWAP_LE => if c <= t { o } else { t },
                            FI_CSWAP_LT => if c < t { o } else { t },
                            FI_CSWAP_GE => if c >= t { o } else { t },
                            FI_CSWAP_GT => if c > t { o } else { t },
                            FI_MSWAP => (o & c) | (t & !c),
                            _ => unreachable!(),
                        }
                    };
                    for class in CLASSES {
                        for op in (0..FI_ATOMIC_OP_LAST).filter(|&op| valid(class, op, $dt).is_ok()) {
                            let operand: &[$t] = if op == FI_ATOMIC_READ { &[] } else { &o };
                            let compare: &[$t] = if class == Compare { &c } else { &[] };
                            let (nt, f) = exec(class, op, $dt, &t, operand, compare).unwrap();
                            let want: Vec<$t> = (0..3).map(|i| reference(op, t[i], o[i], c[i])).collect();
                            prop_assert_eq!(&nt, &want, "{:?} op {}", class, op);
                            if class != Plain {
                                prop_assert_eq!(&f, &t.to_vec());
                            }
                        }
                    }
                }
            }
        )*};
    }
    int_props! {
        prop_int8: i8 = FI_INT8;
        prop_uint8: u8 = FI_UINT8;
        prop_int16: i16 = FI_INT16;
        prop_uint16: u16 = FI_UINT16;
        prop_int32: i32 = FI_INT32;
        prop_uint32: u32 = FI_UINT32;
        prop_int64: i64 = FI_INT64;
        prop_uint64: u64 = FI_UINT64;
        prop_int128: i128 = FI_INT128;
        prop_uint128: u128 = FI_UINT128;
    }

    // ---- float and double ----

    /// Every op of every class on every triple of some telling values,
    /// against the man page's formulation of each op.
    macro_rules! float_exhaustive {
        ($($name:ident: $t:ty = $dt:expr;)*) => {$(
            #[test]
            fn $name() {
                let values: [$t; 10] = [
                    0.0, -0.0, 1.5, -2.25, 3.0,
                    <$t>::INFINITY, <$t>::NEG_INFINITY, <$t>::NAN, <$t>::MIN_POSITIVE, <$t>::MAX,
                ];
                let b = |x: bool| if x { 1.0 } else { 0.0 };
                let reference = |op: u32, t: $t, o: $t, c: $t| -> $t {
                    match op {
                        FI_MIN => if o < t { o } else { t },
                        FI_MAX => if o > t { o } else { t },
                        FI_SUM => t + o,
                        FI_PROD => t * o,
                        FI_LOR => b(t != 0.0 || o != 0.0),
                        FI_LAND => b(t != 0.0 && o != 0.0),
                        FI_LXOR => b((t != 0.0 && o == 0.0) || (t == 0.0 && o != 0.0)),
                        FI_ATOMIC_READ => t,
                        FI_ATOMIC_WRITE => o,
                        FI_CSWAP => if c == t { o } else { t },
                        FI_CSWAP_NE => if c != t { o } else { t },
                        FI_CSWAP_LE => if c <= t { o } else { t },
                        FI_CSWAP_LT => if c < t { o } else { t },
                        FI_CSWAP_GE => if c >= t { o } else { t },
                        FI_CSWAP_GT => if c > t { o } else { t },
                        _ => unreachable!(),
                    }
                };
                // Same value: bit for bit, or both NaN.
                let same = |x: $t, y: $t| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
                for class in CLASSES {
                    for op in (0..FI_ATOMIC_OP_LAST).filter(|&op| valid(class, op, $dt).is_ok()) {
                        for t in values {
                            for o in values {
                                for c in values {
                                    let (nt, f) = one(class, op, $dt, t, o, c);
                                    let want = reference(op, t, o, c);
                                    assert!(same(nt, want), "{class:?} op {op} t {t} o {o} c {c}: {nt} != {want}");
                                    if class != Plain {
                                        assert_eq!(f.unwrap().to_bits(), t.to_bits());
                                    }
                                }
                            }
                        }
                    }
                }
            }
        )*};
    }
    float_exhaustive! {
        float_ops: f32 = FI_FLOAT;
        double_ops: f64 = FI_DOUBLE;
    }

    #[test]
    fn float_edge_cases() {
        // A NaN on either side leaves MIN/MAX's target as it was.
        assert_eq!(one(Plain, FI_MIN, FI_DOUBLE, 1.0, f64::NAN, 0.0).0, 1.0);
        assert!(one(Plain, FI_MAX, FI_DOUBLE, f64::NAN, 1.0, 0.0).0.is_nan());
        // NaN is true; -0.0 is false and equal to 0.0.
        assert_eq!(one(Plain, FI_LAND, FI_FLOAT, f32::NAN, 2.0, 0.0).0, 1.0);
        assert_eq!(one(Plain, FI_LOR, FI_FLOAT, -0.0f32, 0.0, 0.0).0, 0.0);
        assert_eq!(one(Compare, FI_CSWAP, FI_DOUBLE, -0.0, 7.0, 0.0).0, 7.0);
        assert!(one(Compare, FI_CSWAP, FI_DOUBLE, f64::NAN, 7.0, f64::NAN).0.is_nan());
        assert_eq!(one(Compare, FI_CSWAP_NE, FI_DOUBLE, f64::NAN, 7.0, f64::NAN).0, 7.0);
        // A write moves the bits: a NaN's payload survives.
        let nan = f64::from_bits(0x7ff8_0000_dead_beef);
        assert_eq!(
            one(Fetch, FI_ATOMIC_WRITE, FI_DOUBLE, 1.0, nan, 0.0).0.to_bits(),
            nan.to_bits()
        );
        assert_eq!(one(Plain, FI_SUM, FI_FLOAT, 0.1f32, 0.2, 0.0).0, 0.1f32 + 0.2f32);
    }

    // ---- complex ----

    type C32 = Complex<f32>;
    type C64 = Complex<f64>;
    fn c64(re: f64, im: f64) -> C64 {
        Complex { re, im }
    }

    #[test]
    fn complex_layout_is_real_then_imaginary() {
        let bytes = [1f32.to_ne_bytes(), 2f32.to_ne_bytes()].concat();
        let operand = [10f32.to_ne_bytes(), 20f32.to_ne_bytes()].concat();
        let (t, _) = exec_bytes(Plain, FI_SUM, FI_FLOAT_COMPLEX, &bytes, &operand, &[]).unwrap();
        assert_eq!(t, [11f32.to_ne_bytes(), 22f32.to_ne_bytes()].concat());
    }

    #[test]
    fn complex_ops_by_example() {
        let d = |op, t, o| one(Fetch, op, FI_DOUBLE_COMPLEX, t, o, t);
        assert_eq!(
            d(FI_SUM, c64(1.0, 2.0), c64(3.0, -4.0)),
            (c64(4.0, -2.0), Some(c64(1.0, 2.0)))
        );
        assert_eq!(d(FI_PROD, c64(1.0, 2.0), c64(3.0, 4.0)).0, c64(-5.0, 10.0));
        assert_eq!(d(FI_PROD, c64(0.0, 1.0), c64(0.0, 1.0)).0, c64(-1.0, 0.0));
        // Logical: true when either part is nonzero; the result is 1 + 0i or 0.
        assert_eq!(d(FI_LOR, c64(0.0, 0.0), c64(0.0, 3.0)).0, c64(1.0, 0.0));
        assert_eq!(d(FI_LOR, c64(0.0, -0.0), c64(0.0, 0.0)).0, c64(0.0, 0.0));
        assert_eq!(d(FI_LAND, c64(2.0, 0.0), c64(0.0, 3.0)).0, c64(1.0, 0.0));
        assert_eq!(d(FI_LAND, c64(2.0, 5.0), c64(0.0, 0.0)).0, c64(0.0, 0.0));
        assert_eq!(d(FI_LXOR, c64(2.0, 5.0), c64(0.0, 1.0)).0, c64(0.0, 0.0));
        assert_eq!(d(FI_LXOR, c64(0.0, 0.0), c64(0.0, 1.0)).0, c64(1.0, 0.0));
        assert_eq!(
            d(FI_ATOMIC_WRITE, c64(1.0, 1.0), c64(2.0, 3.0)),
            (c64(2.0, 3.0), Some(c64(1.0, 1.0)))
        );
        // CSWAP compares both parts.
        let s = |op, t, c| one(Compare, op, FI_DOUBLE_COMPLEX, t, c64(9.0, 9.0), c).0;
        assert_eq!(s(FI_CSWAP, c64(1.0, 2.0), c64(1.0, 2.0)), c64(9.0, 9.0));
        assert_eq!(s(FI_CSWAP, c64(1.0, 2.0), c64(1.0, 3.0)), c64(1.0, 2.0));
        assert_eq!(s(FI_CSWAP, c64(0.0, 2.0), c64(-0.0, 2.0)), c64(9.0, 9.0));
        assert_eq!(s(FI_CSWAP_NE, c64(1.0, 2.0), c64(1.0, 3.0)), c64(9.0, 9.0));
        assert_eq!(s(FI_CSWAP_NE, c64(1.0, 2.0), c64(1.0, 2.0)), c64(1.0, 2.0));
        let f = one(
            Compare,
            FI_CSWAP,
            FI_FLOAT_COMPLEX,
            C32 { re: 1.0, im: 2.0 },
            C32 { re: 0.5, im: 0.0 },
            C32 { re: 1.0, im: 2.0 },
        );
        assert_eq!(f, (C32 { re: 0.5, im: 0.0 }, Some(C32 { re: 1.0, im: 2.0 })));
    }

    /// Where the textbook product gives NaN + NaN i, C's (Annex G) product
    /// recovers the infinity.
    #[test]
    fn complex_prod_recovers_infinities() {
        let inf = f64::INFINITY;
        let p = |t, o| one(Plain, FI_PROD, FI_DOUBLE_COMPLEX, t, o, t).0;
        assert_eq!(p(c64(inf, inf), c64(1.0, 0.0)), c64(inf, inf));
        // Only when both parts come out NaN: here the imaginary part is
        // already infinite, so C keeps NaN + inf i.
        let q = p(c64(inf, 0.0), c64(f64::NAN, 1.0));
        assert!(q.re.is_nan() && q.im == inf, "{q:?}");
        // Overflow of the partial products: (big + big i)^2 = NaN + inf i
        // in C too (inf - inf, inf + inf).
        let q = p(c64(f64::MAX, f64::MAX), c64(f64::MAX, f64::MAX));
        assert!(q.re.is_nan() && q.im == inf, "{q:?}");
        // Infinite times zero is NaN in C as well.
        let q = p(c64(inf, 0.0), c64(0.0, 0.0));
        assert!(q.re.is_nan() && q.im.is_nan(), "{q:?}");
        // (inf + NaN i)(2 + 0i): the infinity is boxed and recovered.
        assert_eq!(p(c64(inf, f64::NAN), c64(2.0, 0.0)).re, inf);
        // A NaN factor with nothing infinite stays NaN.
        let n = p(c64(f64::NAN, 0.0), c64(1.0, 0.0));
        assert!(n.re.is_nan());
    }

    proptest! {
        /// Sums and products of small integral complex numbers are exact,
        /// so the textbook formulas are the reference.
        #[test]
        fn complex_sum_and_prod(a in -1000i32..1000, b in -1000i32..1000, c in -1000i32..1000, d in -1000i32..1000) {
            let (a, b, c, d) = (f64::from(a), f64::from(b), f64::from(c), f64::from(d));
            let s = one(Plain, FI_SUM, FI_DOUBLE_COMPLEX, c64(a, b), c64(c, d), c64(0.0, 0.0)).0;
            prop_assert_eq!(s, c64(a + c, b + d));
            let p = one(Plain, FI_PROD, FI_DOUBLE_COMPLEX, c64(a, b), c64(c, d), c64(0.0, 0.0)).0;
            prop_assert_eq!(p, c64(a * c - b * d, a * d + b * c));
            let f = |re: f64, im: f64| C32 { re: re as f32, im: im as f32 };
            let p = one(Plain, FI_PROD, FI_FLOAT_COMPLEX, f(a, b), f(c, d), f(0.0, 0.0)).0;
            prop_assert_eq!(p, f(a * c - b * d, a * d + b * c));
        }
    }

    // ---- long double ----

    /// The bytes of `x` as a C long double (`x` normal, zero or infinite;
    /// every such double is exact in long double).
    #[cfg(target_arch = "x86_64")]
    fn ld(x: f64) -> [u8; 16] {
        // x87 extended: 64-bit significand with an explicit integer bit,
        // 15-bit exponent biased by 16383, sign; little-endian, 6 bytes of
        // padding.
        let bits = x.to_bits();
        let sign = (bits >> 63) as u16;
        let exp = ((bits >> 52) & 0x7ff) as u16;
        let frac = bits & ((1 << 52) - 1);
        let (e, m) = match exp {
            0 => {
                assert_eq!(frac, 0, "no subnormals here");
                (0, 0)
            }
            0x7ff => (0x7fff, (1 << 63) | (frac << 11)),
            _ => (exp + (16383 - 1023), (1u64 << 63) | (frac << 11)),
        };
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&m.to_le_bytes());
        b[8..10].copy_from_slice(&((sign << 15) | e).to_le_bytes());
        b
    }
    #[cfg(target_arch = "x86_64")]
    const LD_VALUE: usize = 10;

    #[cfg(target_arch = "aarch64")]
    fn ld(x: f64) -> [u8; 16] {
        // IEEE binary128: 112-bit fraction, 15-bit exponent biased by 16383.
        let bits = x.to_bits();
        let sign = u128::from(bits >> 63);
        let exp = u128::from((bits >> 52) & 0x7ff);
        let frac = u128::from(bits & ((1 << 52) - 1)) << 60;
        let e = match exp {
            0 => {
                assert_eq!(frac, 0, "no subnormals here");
                0
            }
            0x7ff => 0x7fff,
            _ => exp + (16383 - 1023),
        };
        ((sign << 127) | (e << 112) | frac).to_ne_bytes()
    }
    #[cfg(target_arch = "aarch64")]
    const LD_VALUE: usize = 16;

    fn ldc(re: f64, im: f64) -> Vec<u8> {
        [ld(re), ld(im)].concat()
    }

    /// The value bytes of each long double in `b` (the padding left out).
    fn ld_values(b: &[u8]) -> Vec<u8> {
        b.chunks_exact(16).flat_map(|x| x[..LD_VALUE].to_vec()).collect()
    }

    /// One long double (or long double complex) operation.
    fn ld_exec(class: AtomicClass, op: u32, dt: u32, t: &[u8], o: &[u8], c: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let operand = if op == FI_ATOMIC_READ { &[][..] } else { o };
        let compare = if class == Compare { c } else { &[][..] };
        exec_bytes(class, op, dt, t, operand, compare).unwrap()
    }

    #[test]
    fn long_double_ops_by_example() {
        let f = |op, t: f64, o: f64| ld_values(&ld_exec(Plain, op, FI_LONG_DOUBLE, &ld(t), &ld(o), &[]).0);
        let v = |x: f64| ld_values(&ld(x));
        assert_eq!(f(FI_SUM, 1.5, 2.25), v(3.75));
        assert_eq!(f(FI_PROD, 1.5, -2.0), v(-3.0));
        assert_eq!(f(FI_MIN, 1.5, -2.0), v(-2.0));
        assert_eq!(f(FI_MIN, -2.0, 1.5), v(-2.0));
        assert_eq!(f(FI_MAX, 1.5, -2.0), v(1.5));
        assert_eq!(f(FI_MAX, f64::NEG_INFINITY, 1e300), v(1e300));
        assert_eq!(f(FI_LOR, 0.0, -0.0), v(0.0));
        assert_eq!(f(FI_LOR, 0.0, 0.5), v(1.0));
        assert_eq!(f(FI_LAND, 3.0, 0.5), v(1.0));
        assert_eq!(f(FI_LAND, 3.0, 0.0), v(0.0));
        assert_eq!(f(FI_LXOR, 3.0, 0.5), v(0.0));
        assert_eq!(f(FI_LXOR, 0.0, 0.5), v(1.0));
        // A fetching write swaps; a read leaves the target.
        let (t, old) = ld_exec(Fetch, FI_ATOMIC_WRITE, FI_LONG_DOUBLE, &ld(1.0), &ld(2.0), &[]);
        assert_eq!((t, old), (ld(2.0).to_vec(), ld(1.0).to_vec()));
        let (t, old) = ld_exec(Fetch, FI_ATOMIC_READ, FI_LONG_DOUBLE, &ld(1.0), &[], &[]);
        assert_eq!((t, old), (ld(1.0).to_vec(), ld(1.0).to_vec()));
        // Fetched is the old target, bit for bit.
        let (t, old) = ld_exec(Fetch, FI_SUM, FI_LONG_DOUBLE, &ld(1.5), &ld(2.25), &[]);
        assert_eq!((ld_values(&t), old), (v(3.75), ld(1.5).to_vec()));
    }

    #[test]
    fn long_double_cswap_variants_taken_and_not() {
        let cases = [
            (FI_CSWAP, (4.0, 4.0), (3.0, 4.0)),
            (FI_CSWAP_NE, (3.0, 4.0), (4.0, 4.0)),
            (FI_CSWAP_LE, (3.0, 4.0), (5.0, 4.0)),
            (FI_CSWAP_LE, (4.0, 4.0), (5.0, 4.0)),
            (FI_CSWAP_LT, (3.0, 4.0), (4.0, 4.0)),
            (FI_CSWAP_GE, (5.0, 4.0), (3.0, 4.0)),
            (FI_CSWAP_GE, (4.0, 4.0), (3.0, 4.0)),
            (FI_CSWAP_GT, (5.0, 4.0), (4.0, 4.0)),
        ];
        for (op, (tc, tt), (nc, nt)) in cases {
            let (t, old) = ld_exec(Compare, op, FI_LONG_DOUBLE, &ld(tt), &ld(99.0), &ld(tc));
            assert_eq!((t, old), (ld(99.0).to_vec(), ld(tt).to_vec()), "op {op} taken");
            let (t, old) = ld_exec(Compare, op, FI_LONG_DOUBLE, &ld(nt), &ld(99.0), &ld(nc));
            assert_eq!((t, old), (ld(nt).to_vec(), ld(nt).to_vec()), "op {op} not taken");
        }
    }

    #[test]
    fn long_double_elementwise() {
        let t = [ld(1.0), ld(2.0), ld(3.0)].concat();
        let o = [ld(10.0), ld(20.0), ld(30.0)].concat();
        let (nt, old) = ld_exec(Fetch, FI_SUM, FI_LONG_DOUBLE, &t, &o, &[]);
        assert_eq!(ld_values(&nt), ld_values(&[ld(11.0), ld(22.0), ld(33.0)].concat()));
        assert_eq!(old, t);
    }

    /// The sum is computed in long double's own precision, and a computed
    /// value is stored in its value bytes only (x86: the target's padding
    /// keeps what it held, as under an 80-bit store).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn long_double_is_extended_precision() {
        let tiny = 2f64.powi(-60);
        let mut t = ld(1.0);
        t[10..].fill(0xaa);
        let (nt, _) = ld_exec(Plain, FI_SUM, FI_LONG_DOUBLE, &t, &ld(tiny), &[]);
        let mut want = [0u8; 16];
        want[..8].copy_from_slice(&((1u64 << 63) | (1 << 3)).to_le_bytes());
        want[8..10].copy_from_slice(&16383u16.to_le_bytes());
        want[10..].fill(0xaa);
        assert_eq!(nt, want);
        // A copied value is copied whole, padding included.
        let mut o = ld(5.0);
        o[10..].fill(0x11);
        let (nt, _) = ld_exec(Plain, FI_ATOMIC_WRITE, FI_LONG_DOUBLE, &t, &o, &[]);
        assert_eq!(nt, o);
        let (nt, _) = ld_exec(Compare, FI_CSWAP, FI_LONG_DOUBLE, &t, &o, &ld(1.0));
        assert_eq!(nt, o);
    }

    #[test]
    fn long_double_complex_ops_by_example() {
        let f = |op, t: (f64, f64), o: (f64, f64)| {
            ld_values(&ld_exec(Plain, op, FI_LONG_DOUBLE_COMPLEX, &ldc(t.0, t.1), &ldc(o.0, o.1), &[]).0)
        };
        let v = |re, im| ld_values(&ldc(re, im));
        assert_eq!(f(FI_SUM, (1.5, 2.0), (2.25, -4.0)), v(3.75, -2.0));
        assert_eq!(f(FI_PROD, (1.0, 2.0), (3.0, 4.0)), v(-5.0, 10.0));
        assert_eq!(
            f(FI_PROD, (f64::INFINITY, f64::INFINITY), (1.0, 0.0)),
            v(f64::INFINITY, f64::INFINITY)
        );
        assert_eq!(f(FI_LOR, (0.0, 0.0), (0.0, 3.0)), v(1.0, 0.0));
        assert_eq!(f(FI_LOR, (0.0, 0.0), (-0.0, 0.0)), v(0.0, 0.0));
        assert_eq!(f(FI_LAND, (0.0, 1.0), (2.0, 0.0)), v(1.0, 0.0));
        assert_eq!(f(FI_LAND, (0.0, 1.0), (0.0, 0.0)), v(0.0, 0.0));
        assert_eq!(f(FI_LXOR, (0.0, 1.0), (2.0, 0.0)), v(0.0, 0.0));
        assert_eq!(f(FI_LXOR, (0.0, 0.0), (2.0, 0.0)), v(1.0, 0.0));
        let (t, old) = ld_exec(
            Fetch,
            FI_ATOMIC_WRITE,
            FI_LONG_DOUBLE_COMPLEX,
            &ldc(1.0, 2.0),
            &ldc(3.0, 4.0),
            &[],
        );
        assert_eq!((t, old), (ldc(3.0, 4.0), ldc(1.0, 2.0)));
        let (t, old) = ld_exec(Fetch, FI_ATOMIC_READ, FI_LONG_DOUBLE_COMPLEX, &ldc(1.0, 2.0), &[], &[]);
        assert_eq!((t, old), (ldc(1.0, 2.0), ldc(1.0, 2.0)));
        // CSWAP / CSWAP_NE compare both parts.
        let s = |op, t: (f64, f64), c: (f64, f64)| {
            ld_exec(
                Compare,
                op,
                FI_LONG_DOUBLE_COMPLEX,
                &ldc(t.0, t.1),
                &ldc(9.0, 9.0),
                &ldc(c.0, c.1),
            )
        };
        assert_eq!(s(FI_CSWAP, (1.0, 2.0), (1.0, 2.0)), (ldc(9.0, 9.0), ldc(1.0, 2.0)));
        assert_eq!(s(FI_CSWAP, (1.0, 2.0), (1.0, 3.0)), (ldc(1.0, 2.0), ldc(1.0, 2.0)));
        assert_eq!(s(FI_CSWAP_NE, (1.0, 2.0), (1.0, 3.0)), (ldc(9.0, 9.0), ldc(1.0, 2.0)));
        assert_eq!(s(FI_CSWAP_NE, (1.0, 2.0), (1.0, 2.0)), (ldc(1.0, 2.0), ldc(1.0, 2.0)));
    }

    proptest! {
        /// The orderings of long double, computed in C, agree with those of
        /// the doubles the values came from (the conversion is exact).
        #[test]
        fn long_double_order_agrees_with_double(
            t in prop_oneof![Just(0.0), Just(-0.0), Just(f64::INFINITY), quarters()],
            o in prop_oneof![Just(0.0), Just(1.0), Just(f64::NEG_INFINITY), quarters()],
            c in prop_oneof![Just(0.0), Just(1.0), quarters()],
        ) {
            for op in [FI_MIN, FI_MAX] {
                let (nt, _) = ld_exec(Plain, op, FI_LONG_DOUBLE, &ld(t), &ld(o), &[]);
                let want = one(Plain, op, FI_DOUBLE, t, o, c).0;
                prop_assert_eq!(ld_values(&nt), ld_values(&ld(want)), "op {}", op);
            }
            for op in FI_CSWAP..=FI_CSWAP_GT {
                let (nt, _) = ld_exec(Compare, op, FI_LONG_DOUBLE, &ld(t), &ld(o), &ld(c));
                let want = one(Compare, op, FI_DOUBLE, t, o, c).0;
                prop_assert_eq!(nt, ld(want).to_vec(), "op {}", op);
            }
            // Quarters below 2^20 add exactly in both types (inf - inf aside).
            let s = t + o;
            if !s.is_nan() {
                let (nt, _) = ld_exec(Plain, FI_SUM, FI_LONG_DOUBLE, &ld(t), &ld(o), &[]);
                prop_assert_eq!(ld_values(&nt), ld_values(&ld(s)));
            }
        }
    }

    /// Multiples of 1/4 in (-2^19, 2^19): exact in double and long double.
    fn quarters() -> impl Strategy<Value = f64> {
        (-2_000_000i32..2_000_000).prop_map(|x| f64::from(x) / 4.0)
    }
}

// The reduction loops, written once over GCC vector extensions and compiled once per ISA.
//
// How to include: a kernel file includes every header this one needs (<cstddef>, <cstdint>,
// <cstring>, <type_traits>) and anything with inline functions (half.h, intrinsics) first,
// then switches the target (`#pragma GCC target`, or `#pragma clang attribute` for clang),
// then includes this file. Everything
// here lives in an anonymous namespace, so each kernel file gets its own copy compiled for its
// own ISA: a template shared by name across files would let the linker keep the AVX-512 copy
// for the baseline caller, which faults on older CPUs.
//
// A kernel file then defines a struct describing its ISA (the `Isa` parameter below):
//   static constexpr size_t kBytes;                 // vector width in bytes
//   static Vec<float, kBytes> f16_load(const uint16_t* p);        // kBytes / 4 halves
//   static void f16_store(uint16_t* p, Vec<float, kBytes> v);     // round to nearest even
// and builds its table with make_kernels<Isa>().
//
// Semantics (the scalar reference in tests/unit/core/reduce_test.cc is the executable version):
// - Integer sum and prod wrap (two's complement): they run on the unsigned type of the same
//   width, so there is no signed-overflow UB.
// - f16/bf16 widen to f32 exactly, combine in f32, round once to nearest-even.
// - Float min is `isnan(a) ? a : (a < b ? a : b)`, max likewise with `>`: a NaN in either
//   operand gives a NaN (a's if both are), and equal operands (+0 vs -0) give b.
// - Tails shorter than one vector go through a zero-padded copy of one vector, so every
//   element takes exactly the same arithmetic path as in the body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/reduce_table.h"

namespace plait::reduce_detail {
namespace {

template <typename T, size_t Bytes>
struct VecOf {
  typedef T type __attribute__((vector_size(Bytes)));
};
template <typename T, size_t Bytes>
using Vec = typename VecOf<T, Bytes>::type;

template <typename V>
V load_vec(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
void store_vec(void* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// --- codecs: how `kLanes` stored elements become one arithmetic vector (`Lanes`) and back.

template <class Isa, typename T>
struct PlainCodec {
  using Storage = T;
  using Elem = T;
  static constexpr size_t kLanes = Isa::kBytes / sizeof(T);
  using Lanes = Vec<T, Isa::kBytes>;
  static Lanes load(const Storage* p) { return load_vec<Lanes>(p); }
  static void store(Storage* p, Lanes v) { store_vec(p, v); }
};

template <class Isa>
struct F16Codec {
  using Storage = uint16_t;
  using Elem = float;
  static constexpr size_t kLanes = Isa::kBytes / sizeof(float);
  using Lanes = Vec<float, Isa::kBytes>;
  static Lanes load(const Storage* p) { return Isa::f16_load(p); }
  static void store(Storage* p, Lanes v) { Isa::f16_store(p, v); }
};

// Integer division by an int through a float type wide enough to make it exact: for |x| <
// 2^24 (float) or 2^53 (double) and any divisor, a non-integral quotient is at least 1/|d|
// from the next integer, farther than the rounding error of x/d, so truncating the rounded
// quotient equals truncating division. The quotient always fits int32 (divisor -1 is
// handled apart), and the narrowing to T wraps as C++20 integer conversion does.
template <class Isa, typename T, typename Wide>
struct IntViaFloatCodec {
  using Storage = T;
  using Elem = Wide;
  static constexpr size_t kLanes = Isa::kBytes / sizeof(Wide);
  using Lanes = Vec<Wide, Isa::kBytes>;
  using Packed = Vec<T, kLanes * sizeof(T)>;
  using Quotient = Vec<int32_t, kLanes * sizeof(int32_t)>;
  static Lanes load(const Storage* p) {
    return __builtin_convertvector(load_vec<Packed>(p), Lanes);
  }
  static void store(Storage* p, Lanes v) {
    Quotient q = __builtin_convertvector(v, Quotient);
    store_vec(p, __builtin_convertvector(q, Packed));
  }
};

// --- formats: one block of kLanes elements combined or divided in place.

template <class Codec>
struct Lanewise {
  using Storage = typename Codec::Storage;
  static constexpr size_t kLanes = Codec::kLanes;
  template <class Op>
  static void combine(Storage* d, const Storage* a, const Storage* b) {
    Codec::store(d, Op::apply(Codec::load(a), Codec::load(b)));
  }
  static void divide(Storage* p, int divisor) {
    Codec::store(p, Codec::load(p) / static_cast<typename Codec::Elem>(divisor));
  }
};

// bf16 in place within 32-bit words: the low half of each word shifted up and the high half
// masked are the f32 values of the even and odd elements, and the results go back into the
// same halves. No lane shuffles, unlike widening 16 -> 32 bits, which costs AVX2 a permute
// per vector. Rounding is bit-for-bit float_to_bf16 in half.h: the quiet bit of a NaN is f32
// bit 22, bf16 bit 6.
template <class Isa>
struct Bf16Pairs {
  using Storage = uint16_t;
  static constexpr size_t kLanes = Isa::kBytes / sizeof(uint16_t);
  using Words = Vec<uint32_t, Isa::kBytes>;
  using SignedWords = Vec<int32_t, Isa::kBytes>;
  using Lanes = Vec<float, Isa::kBytes>;

  static Lanes even(Words w) { return __builtin_bit_cast(Lanes, w << 16); }
  static Lanes odd(Words w) { return __builtin_bit_cast(Lanes, w & 0xffff0000u); }
  // The bf16 result in the high half of each word; the low half is garbage.
  static Words round(Lanes v) {
    Words u = __builtin_bit_cast(Words, v);
    Words rounded = u + 0x7fffu + ((u >> 16) & 1u);
    // |u| fits int32, and a signed compare is one instruction where AVX2 has no unsigned one.
    auto is_nan = __builtin_bit_cast(SignedWords, u & 0x7fffffffu) > 0x7f800000;
    return is_nan ? (u | 0x00400000u) : rounded;
  }
  static void store(Storage* p, Lanes even_result, Lanes odd_result) {
    store_vec(p, (round(even_result) >> 16) | (round(odd_result) & 0xffff0000u));
  }

  template <class Op>
  static void combine(Storage* d, const Storage* a, const Storage* b) {
    Words x = load_vec<Words>(a), y = load_vec<Words>(b);
    store(d, Op::apply(even(x), even(y)), Op::apply(odd(x), odd(y)));
  }
  static void divide(Storage* p, int divisor) {
    Words x = load_vec<Words>(p);
    const float by = static_cast<float>(divisor);
    store(p, even(x) / by, odd(x) / by);
  }
};

// --- operators on arithmetic vectors. `a != a` is all-false for integers and folds away.

struct SumOp {
  template <typename V>
  static V apply(V a, V b) {
    return a + b;
  }
};
struct ProdOp {
  template <typename V>
  static V apply(V a, V b) {
    return a * b;
  }
};
struct MinOp {
  template <typename V>
  static V apply(V a, V b) {
    return ((a < b) | (a != a)) ? a : b;
  }
};
struct MaxOp {
  template <typename V>
  static V apply(V a, V b) {
    return ((a > b) | (a != a)) ? a : b;
  }
};

// --- loops.

template <class Format, class Op>
void combine_array(void* dst, const void* a, const void* b, size_t count) {
  using S = typename Format::Storage;
  constexpr size_t kLanes = Format::kLanes;
  auto* d = static_cast<S*>(dst);
  auto* x = static_cast<const S*>(a);
  auto* y = static_cast<const S*>(b);
  size_t i = 0;
  // Each block reads its inputs before it writes, so dst == a or dst == b is safe.
  for (; i + 2 * kLanes <= count; i += 2 * kLanes) {
    Format::template combine<Op>(d + i, x + i, y + i);
    Format::template combine<Op>(d + i + kLanes, x + i + kLanes, y + i + kLanes);
  }
  for (; i + kLanes <= count; i += kLanes) Format::template combine<Op>(d + i, x + i, y + i);
  if (size_t rest = count - i; rest > 0) {
    S pa[kLanes] = {}, pb[kLanes] = {};
    std::memcpy(pa, x + i, rest * sizeof(S));
    std::memcpy(pb, y + i, rest * sizeof(S));
    Format::template combine<Op>(pa, pa, pb);
    std::memcpy(d + i, pa, rest * sizeof(S));
  }
}

template <class Format>
void divide_array(void* data, size_t count, int divisor) {
  using S = typename Format::Storage;
  constexpr size_t kLanes = Format::kLanes;
  auto* p = static_cast<S*>(data);
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) Format::divide(p + i, divisor);
  if (size_t rest = count - i; rest > 0) {
    S pad[kLanes] = {};
    std::memcpy(pad, p + i, rest * sizeof(S));
    Format::divide(pad, divisor);
    std::memcpy(p + i, pad, rest * sizeof(S));
  }
}

// x / -1 is the one quotient that overflows (INT_MIN / -1); it is defined here as wrapping
// negation, the same as every other result that does not fit T.
template <typename T>
void negate_wrapping(void* data, size_t count) {
  using U = std::make_unsigned_t<T>;
  auto* p = static_cast<U*>(data);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<U>(U{0} - p[i]);
}

template <class Format>
void divide_integers(void* data, size_t count, int divisor) {
  if (divisor == -1) return negate_wrapping<typename Format::Storage>(data, count);
  divide_array<Format>(data, count, divisor);
}

// i64 has no exact float route; hardware division, one element at a time.
void divide_i64(void* data, size_t count, int divisor) {
  if (divisor == -1) return negate_wrapping<int64_t>(data, count);
  auto* p = static_cast<int64_t*>(data);
  for (size_t i = 0; i < count; ++i) p[i] /= divisor;
}

// --- the table.

template <class SumFormat, class MinMaxFormat>
constexpr void set_combine(ReduceKernels& k, DataType dtype) {
  auto* row = k.combine[static_cast<size_t>(dtype)];
  row[static_cast<size_t>(ReduceOp::kSum)] = combine_array<SumFormat, SumOp>;
  row[static_cast<size_t>(ReduceOp::kProd)] = combine_array<SumFormat, ProdOp>;
  row[static_cast<size_t>(ReduceOp::kMin)] = combine_array<MinMaxFormat, MinOp>;
  row[static_cast<size_t>(ReduceOp::kMax)] = combine_array<MinMaxFormat, MaxOp>;
}

template <class Isa, typename T>
using Plain = Lanewise<PlainCodec<Isa, T>>;

template <class Isa>
constexpr ReduceKernels make_kernels() {
  ReduceKernels k{};
  set_combine<Plain<Isa, float>, Plain<Isa, float>>(k, DataType::kF32);
  set_combine<Plain<Isa, double>, Plain<Isa, double>>(k, DataType::kF64);
  set_combine<Lanewise<F16Codec<Isa>>, Lanewise<F16Codec<Isa>>>(k, DataType::kF16);
  set_combine<Bf16Pairs<Isa>, Bf16Pairs<Isa>>(k, DataType::kBF16);
  // Sum and prod on the unsigned type: the same bits, without signed-overflow UB.
  set_combine<Plain<Isa, uint8_t>, Plain<Isa, int8_t>>(k, DataType::kI8);
  set_combine<Plain<Isa, uint8_t>, Plain<Isa, uint8_t>>(k, DataType::kU8);
  set_combine<Plain<Isa, uint32_t>, Plain<Isa, int32_t>>(k, DataType::kI32);
  set_combine<Plain<Isa, uint64_t>, Plain<Isa, int64_t>>(k, DataType::kI64);

  auto divide = [&k](DataType dtype, DivideFn fn) { k.divide[static_cast<size_t>(dtype)] = fn; };
  divide(DataType::kF32, divide_array<Plain<Isa, float>>);
  divide(DataType::kF64, divide_array<Plain<Isa, double>>);
  divide(DataType::kF16, divide_array<Lanewise<F16Codec<Isa>>>);
  divide(DataType::kBF16, divide_array<Bf16Pairs<Isa>>);
  divide(DataType::kI8, divide_integers<Lanewise<IntViaFloatCodec<Isa, int8_t, float>>>);
  divide(DataType::kU8, divide_integers<Lanewise<IntViaFloatCodec<Isa, uint8_t, float>>>);
  divide(DataType::kI32, divide_integers<Lanewise<IntViaFloatCodec<Isa, int32_t, double>>>);
  divide(DataType::kI64, divide_i64);
  return k;
}

}  // namespace
}  // namespace plait::reduce_detail

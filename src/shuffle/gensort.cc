#include "shuffle/gensort.h"

#include <cstring>

namespace plait::shuffle {
namespace {

// The generator's constants (L'Ecuyer's multiplier; an odd increment), as gensort's.
constexpr u128 kA = (u128{0x2360ed051fc65da4ull} << 64) | 0x4385df649fccf645ull;
constexpr u128 kC = (u128{0x4a696d4772617952ull} << 64) | 0x4950202020202001ull;

constexpr char hex_digit(unsigned v) { return static_cast<char>(v < 10 ? '0' + v : 'A' + v - 10); }

void put_number(u128 number, uint8_t* out) {  // 32 upper-case hex digits, most significant first
  for (int i = 0; i < 32; ++i) out[i] = hex_digit(static_cast<unsigned>(number >> (124 - 4 * i)) & 0xf);
}

// `digits` hex digits of `bits` (most significant first), each written 4 times.
void put_filler(uint64_t bits, int digits, uint8_t* out) {
  for (int i = 0; i < digits; ++i) {
    std::memset(out + 4 * i, hex_digit((bits >> (4 * (digits - 1 - i))) & 0xf), 4);
  }
}

}  // namespace

u128 gensort_next(u128 x) { return kA * x + kC; }

u128 gensort_state(u128 n) {
  // x(n) = f^n(0) for the affine map f(x) = a x + c: square-and-multiply on (mul, add) pairs,
  // where (m1, d1) after (m2, d2) is (m1 m2, m1 d2 + d1).
  u128 mul = 1, add = 0;           // f^0
  u128 step_mul = kA, step_add = kC;  // f^(2^k)
  while (n != 0) {
    if (n & 1) {
      add = step_mul * add + step_add;
      mul = step_mul * mul;
    }
    step_add = step_mul * step_add + step_add;
    step_mul = step_mul * step_mul;
    n >>= 1;
  }
  return add;  // applied to x(0) = 0
}

void make_record(u128 random, u128 number, RecordFormat format, uint8_t* out) {
  const uint64_t hi = static_cast<uint64_t>(random >> 64), lo = static_cast<uint64_t>(random);
  if (format == RecordFormat::kBinary) {
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(hi >> (56 - 8 * i));
    out[8] = static_cast<uint8_t>(lo >> 56);
    out[9] = static_cast<uint8_t>(lo >> 48);
    out[10] = 0x00;
    out[11] = 0x11;
    put_number(number, out + 12);
    out[44] = 0x88;
    out[45] = 0x99;
    out[46] = 0xaa;
    out[47] = 0xbb;
    put_filler(lo & 0xffffffffffffull, 12, out + 48);
    out[96] = 0xcc;
    out[97] = 0xdd;
    out[98] = 0xee;
    out[99] = 0xff;
    return;
  }
  // Base-95 digits, least significant first: 8 from the high word, 2 from the low one.
  uint64_t t = hi;
  for (int i = 0; i < 8; ++i, t /= 95) out[i] = static_cast<uint8_t>(' ' + t % 95);
  t = lo;
  for (int i = 8; i < 10; ++i, t /= 95) out[i] = static_cast<uint8_t>(' ' + t % 95);
  out[10] = out[11] = ' ';
  put_number(number, out + 12);
  out[44] = out[45] = ' ';
  put_filler(lo & 0xfffffffffffffull, 13, out + 46);
  out[98] = '\r';
  out[99] = '\n';
}

void generate_records(u128 first, size_t count, RecordFormat format, uint8_t* out) {
  u128 x = gensort_state(first);
  for (size_t i = 0; i < count; ++i) {
    x = gensort_next(x);
    make_record(x, first + i, format, out + i * kRecordBytes);
  }
}

const char* format_u128(u128 v, char (&buf)[40]) {
  char* p = buf + sizeof(buf);
  *--p = '\0';
  do {
    *--p = "0123456789abcdef"[static_cast<unsigned>(v & 0xf)];
    v >>= 4;
  } while (v != 0);
  return p;
}

}  // namespace plait::shuffle

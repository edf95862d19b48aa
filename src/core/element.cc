#include "core/element.h"

#include <cstdint>
#include <cstring>

#include "core/half.h"

namespace plait {

void store_element(DataType dtype, void* base, size_t i, double value) {
  auto put = [&](auto v) { std::memcpy(static_cast<char*>(base) + i * sizeof(v), &v, sizeof(v)); };
  switch (dtype) {
    case DataType::kF32: put(static_cast<float>(value)); break;
    case DataType::kF64: put(value); break;
    case DataType::kF16: put(float_to_half(static_cast<float>(value))); break;
    case DataType::kBF16: put(float_to_bf16(static_cast<float>(value))); break;
    case DataType::kI8: put(static_cast<int8_t>(value)); break;
    case DataType::kU8: put(static_cast<uint8_t>(value)); break;
    case DataType::kI32: put(static_cast<int32_t>(value)); break;
    case DataType::kI64: put(static_cast<int64_t>(value)); break;
  }
}

double load_element(DataType dtype, const void* base, size_t i) {
  auto get = [&](auto v) {
    std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(v), sizeof(v));
    return v;
  };
  switch (dtype) {
    case DataType::kF32: return get(float{});
    case DataType::kF64: return get(double{});
    case DataType::kF16: return half_to_float(get(uint16_t{}));
    case DataType::kBF16: return bf16_to_float(get(uint16_t{}));
    case DataType::kI8: return get(int8_t{});
    case DataType::kU8: return get(uint8_t{});
    case DataType::kI32: return get(int32_t{});
    case DataType::kI64: return static_cast<double>(get(int64_t{}));
  }
  return 0;
}

}  // namespace plait

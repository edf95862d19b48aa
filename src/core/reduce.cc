// Public entry points of the reduction kernels and the choice of ISA variant. The variants
// themselves live in reduce_baseline.cc / reduce_avx2.cc / reduce_avx512.cc, one constant
// table each (reduce_table.h).
#include "core/reduce.h"

#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/reduce_dispatch.h"
#include "core/reduce_table.h"
#include "plait/error.h"

namespace plait {
namespace {

using reduce_detail::ReduceKernels;

bool cpu_supports(IsaLevel level) {
#if defined(__x86_64__)
  // libgcc's checks include the OS half (XGETBV): AVX state is only reported when the kernel
  // saves the wide registers.
  __builtin_cpu_init();
  // F16C straight from CPUID (leaf 1, ECX): not every compiler's __builtin_cpu_supports
  // knows it. Its registers are the AVX ones, whose OS support the avx2 check covers.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  switch (level) {
    case IsaLevel::kBaseline:
      return true;
    case IsaLevel::kAvx2:
      return avx2;
    case IsaLevel::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return level == IsaLevel::kBaseline;
#endif
}

const ReduceKernels& kernels_of(IsaLevel level) {
  switch (level) {
#if defined(__x86_64__)
    case IsaLevel::kAvx512:
      return reduce_detail::kAvx512Kernels;
    case IsaLevel::kAvx2:
      return reduce_detail::kAvx2Kernels;
#endif
    default:
      return reduce_detail::kBaselineKernels;
  }
}

IsaLevel detect_best_level() {
  for (IsaLevel level : {IsaLevel::kAvx512, IsaLevel::kAvx2}) {
    if (cpu_supports(level)) return level;
  }
  return IsaLevel::kBaseline;
}

const ReduceKernels& active_kernels() { return kernels_of(active_isa_level()); }

std::string describe(DataType dtype) {
  auto index = static_cast<size_t>(dtype);
  if (index < reduce_detail::kDataTypeCount) return std::string(to_string(dtype));
  return "dtype #" + std::to_string(index);
}

size_t dtype_index(DataType dtype, const char* what) {
  auto index = static_cast<size_t>(dtype);
  if (index >= reduce_detail::kDataTypeCount) {
    throw invalid_usage("unknown data type " + describe(dtype), {.op = what});
  }
  return index;
}

size_t op_index(ReduceOp op, const char* what) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<size_t>(ReduceOp::kSum);
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<size_t>(op);
  }
  throw invalid_usage("unknown reduce op #" + std::to_string(static_cast<int>(op)), {.op = what});
}

void run_combine(const ReduceKernels& k, DataType dtype, ReduceOp op, void* dst, const void* a,
                 const void* b, size_t count, const char* what) {
  size_t t = dtype_index(dtype, what);
  size_t o = op_index(op, what);
  if (count == 0) return;
  if (dst == nullptr || a == nullptr || b == nullptr) {
    throw invalid_usage(
        "null buffer for " + std::to_string(count) + " " + describe(dtype) + " elements",
        {.op = what});
  }
  k.combine[t][o](dst, a, b, count);
}

void run_divide(const ReduceKernels& k, DataType dtype, void* data, size_t count, int divisor) {
  size_t t = dtype_index(dtype, "scale_divide");
  if (divisor == 0) throw invalid_usage("divisor is 0", {.op = "scale_divide"});
  if (count == 0) return;
  if (data == nullptr) {
    throw invalid_usage(
        "null buffer for " + std::to_string(count) + " " + describe(dtype) + " elements",
        {.op = "scale_divide"});
  }
  k.divide[t](data, count, divisor);
}

const ReduceKernels& checked_kernels(IsaLevel level) {
  if (!isa_supported(level)) {
    throw invalid_usage(
        "this CPU cannot run the " + std::string(to_string(level)) + " reduction kernels",
        {.op = "reduce"});
  }
  return kernels_of(level);
}

}  // namespace

std::string_view to_string(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline:
      return "baseline";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool isa_supported(IsaLevel level) { return cpu_supports(level); }

// The one process-wide choice, made once: it is a property of the hardware rather than of any
// communicator, and it never changes, so a function-local static is the right owner.
IsaLevel active_isa_level() {
  static const IsaLevel level = detect_best_level();
  return level;
}

namespace {

// A few elements summed in place of the table's kernel, whose dispatch (type, op, ISA,
// checks) costs more than the sum itself: an 8-byte allreduce is mostly such a call.
// Elementwise like the kernels, so the results are theirs bit for bit (integers wrap).
constexpr size_t kTinyCount = kFewElements;

template <typename T, typename Wide = T>
void sum_tiny(void* dst, const void* a, const void* b, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T x, y;
    std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(T), sizeof(T));
    std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(T), sizeof(T));
    const T r = static_cast<T>(static_cast<Wide>(x) + static_cast<Wide>(y));
    std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &r, sizeof(T));
  }
}

// The few-element sum for `dtype`, or null where only the table has a kernel.
CombineFn tiny_sum(DataType dtype) {
  switch (dtype) {
    case DataType::kF32: return sum_tiny<float>;
    case DataType::kF64: return sum_tiny<double>;
    case DataType::kI32: return sum_tiny<uint32_t>;
    case DataType::kI64: return sum_tiny<uint64_t>;
    default: return nullptr;
  }
}

bool reduce_tiny(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                 size_t count) {
  if (op != ReduceOp::kSum || count == 0 || count > kTinyCount || !dst || !a || !b) return false;
  const CombineFn sum = tiny_sum(dtype);
  if (!sum) return false;
  sum(dst, a, b, count);
  return true;
}

}  // namespace

CombineFn combine_kernel(DataType dtype, ReduceOp op, bool few) {
  const size_t t = dtype_index(dtype, "reduce"), o = op_index(op, "reduce");
  if (few && (op == ReduceOp::kSum || op == ReduceOp::kAvg))
    if (const CombineFn sum = tiny_sum(dtype)) return sum;
  return active_kernels().combine[t][o];
}

void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                 size_t count) {
  if (reduce_tiny(dtype, op, dst, a, b, count)) return;
  run_combine(active_kernels(), dtype, op, dst, a, b, count, "reduce");
}

void reduce_inplace(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count) {
  if (reduce_tiny(dtype, op, dst, dst, src, count)) return;
  run_combine(active_kernels(), dtype, op, dst, dst, src, count, "reduce");
}

void scale_divide(DataType dtype, void* data, size_t count, int divisor) {
  run_divide(active_kernels(), dtype, data, count, divisor);
}

void reduce_into_isa(IsaLevel level, DataType dtype, ReduceOp op, void* dst, const void* a,
                     const void* b, size_t count) {
  run_combine(checked_kernels(level), dtype, op, dst, a, b, count, "reduce");
}

void scale_divide_isa(IsaLevel level, DataType dtype, void* data, size_t count, int divisor) {
  run_divide(checked_kernels(level), dtype, data, count, divisor);
}

}  // namespace plait

// The pause a spinning thread takes between looks at memory: it tells the CPU that this is a
// spin-wait (a sibling hyperthread gets the core's resources, and leaving the loop does not
// pay for a memory-order mis-speculation). Shared by every spinning loop in plait.
#pragma once

namespace plait {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace plait

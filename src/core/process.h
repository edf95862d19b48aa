// What this process can tell about another one on the host from its pid.
#pragma once

#include <sys/types.h>

namespace plait {

// True if the process is gone (exited; a zombie nobody reaped yet counts as alive here: use
// a pidfd for that).
bool process_gone(pid_t pid);
// True if the process is stopped by a signal or held by a tracer (state T or t in
// /proc/<pid>/stat); false when it runs, sleeps, or cannot be read.
bool process_stopped(pid_t pid);

}  // namespace plait

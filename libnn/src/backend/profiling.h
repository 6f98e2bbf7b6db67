// A Backend that forwards to another and times every call (see nn/profiler.h).
#pragma once
#include "backend/backend.h"

namespace nn::backend {

// The profiling wrapper around `inner` (one per device, created on first use).
Backend& profiled(Backend& inner);
bool profiling_enabled();

}  // namespace nn::backend

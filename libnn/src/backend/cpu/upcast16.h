// See upcast16.cpp: 16-bit floating math on the CPU through f32.
#pragma once
#include "backend/backend.h"

namespace nn::backend {

// Wraps `inner` (leaked with it: backends live for the whole process).
Backend* upcast16(Backend* inner);

}  // namespace nn::backend

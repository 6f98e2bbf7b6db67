// The library's on/off switches in the environment (LIBNN_NO_MEMORY_CACHING=1,
// LIBNN_CUBLASLT=0, ...).
#pragma once

namespace nn {

// `name`'s value: "1" on, "0" off, unset or empty the default; anything else ("true", "off")
// leaves the default and is said once on stderr, not ignored in silence.
bool env_switch(const char* name, bool fallback);

}  // namespace nn

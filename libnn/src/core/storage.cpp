#include <nn/tensor.h>

#include "backend/backend.h"

namespace nn {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (nbytes_ > 0) data_ = backend::get(device).allocate(nbytes_);
}

Storage::~Storage() {
  if (data_) backend::get(device_).deallocate(data_, nbytes_);
}

}  // namespace nn

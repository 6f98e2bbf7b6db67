// Tensor files in the safetensors format (https://huggingface.co/docs/safetensors), readable
// by PyTorch, JAX and NumPy users: 8-byte little-endian header length N, N bytes of JSON
// header {"__metadata__": {...}, "name": {"dtype", "shape", "data_offsets"}, ...}, then the
// raw little-endian data.
#pragma once
#include <nn/module.h>
#include <nn/tensor.h>

#include <map>
#include <string>
#include <string_view>

namespace nn::io {

// Metadata key holding the zlib CRC-32 of the tensors' data (8 hex digits), taken tensor by
// tensor in the order of their names, so that it holds whatever order a writer lays them out
// in. libnn adds it on save and checks it on load when present; other readers ignore
// unknown metadata.
inline constexpr const char* kChecksumKey = "libnn.crc32";
// Metadata key holding the CRC-32 of the rest of the header: every other metadata entry and
// each tensor's name, dtype and shape, in the order of the names (a flipped byte there, a
// checkpoint's step say, would pass the data's checksum). Added on save, checked on load
// when present.
inline constexpr const char* kHeaderChecksumKey = "libnn.header_crc32";

// Writes `tensors` (any device, any layout: each is written as detach().cpu().contiguous())
// in the given order, with `metadata` in "__metadata__" plus the checksum. Atomic: the
// file is written to `path + ".tmp-<pid>"`, synced, renamed over `path` and the directory
// synced, so a crash leaves either the old file or the new one, never half of one. A save
// removes the temporaries of `path` that a killed process left (a live one's are kept).
// Throws nn::Error naming the file: cannot create, disk full, duplicate or reserved names,
// undefined tensors, text that is not UTF-8.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// `s` with each byte that is not part of valid UTF-8 (a Latin-1 file name in a command line,
// say) replaced by U+FFFD: text fit for metadata.
std::string to_valid_utf8(std::string_view s);

struct SafetensorsFile {
  NamedTensors tensors;                          // CPU tensors, ordered by data offset
  std::map<std::string, std::string> metadata;  // without kChecksumKey, kHeaderChecksumKey
};

// Reads and validates a whole file: header size, JSON, dtypes (F32, F64, F16, BF16, I32,
// I64, U8), shapes against offsets, offsets inside the data section without overlaps or
// gaps, no trailing bytes, and the checksums when present. Every problem is an nn::Error
// "safetensors file '<path>': <what is wrong>".
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace nn::io

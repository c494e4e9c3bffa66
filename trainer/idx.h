// Reader for gzip-compressed IDX files (the MNIST family's format).
// Torch-free. Thread-safe: free function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dial::trainer {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // unsigned bytes, row-major
};

// NOT_FOUND if the file is missing; INVALID_ARGUMENT if it is not an IDX
// file of unsigned bytes or is truncated.
absl::StatusOr<IdxArray> ReadIdxGz(const std::string& path);

}  // namespace dial::trainer

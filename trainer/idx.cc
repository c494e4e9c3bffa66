#include "trainer/idx.h"

#include <zlib.h>

#include "absl/strings/str_cat.h"

namespace dial::trainer {

absl::StatusOr<IdxArray> ReadIdxGz(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  }
  auto fail = [&](const std::string& why) {
    gzclose(file);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
  };
  unsigned char magic[4];
  if (gzread(file, magic, 4) != 4) return fail("too short for an IDX header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08) {
    return fail("not an IDX file of unsigned bytes");
  }
  IdxArray out;
  int64_t total = 1;
  for (int i = 0; i < magic[3]; ++i) {
    unsigned char b[4];
    if (gzread(file, b, 4) != 4) return fail("truncated header");
    int64_t dim = (int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    out.dims.push_back(dim);
    total *= dim;
  }
  if (total <= 0 || total > (int64_t{1} << 32)) return fail("bad dimensions");
  out.data.resize(static_cast<size_t>(total));
  size_t done = 0;
  while (done < out.data.size()) {
    unsigned chunk = static_cast<unsigned>(
        std::min<size_t>(out.data.size() - done, 1 << 30));
    int n = gzread(file, out.data.data() + done, chunk);
    if (n <= 0) return fail("truncated data");
    done += static_cast<size_t>(n);
  }
  gzclose(file);
  return out;
}

}  // namespace dial::trainer

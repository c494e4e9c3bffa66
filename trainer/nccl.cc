// Gradient sums of multi-GPU replicas through NCCL: one process, one
// thread, a communicator per device (NCCL's "single process, multiple
// devices" set-up). Built only against a CUDA LibTorch with NCCL found
// (DIAL_WITH_NCCL; see trainer/CMakeLists.txt and docs/trainer.md).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <numeric>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "trainer/internal.h"

namespace dial::trainer {
namespace {

void Check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    throw std::runtime_error(
        absl::StrCat("nccl: ", what, ": ", ncclGetErrorString(result)));
  }
}

ncclDataType_t NcclType(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return ncclFloat32;
    case torch::kDouble:
      return ncclFloat64;
    case torch::kHalf:
      return ncclFloat16;
    case torch::kBFloat16:
      return ncclBfloat16;
    default:
      throw std::runtime_error(absl::StrCat("nccl: no reduction for ",
                                            c10::toString(t.scalar_type())));
  }
}

class NcclAllReduce : public AllReduce {
 public:
  explicit NcclAllReduce(int devices) : comms_(devices) {
    std::vector<int> list(devices);
    std::iota(list.begin(), list.end(), 0);
    Check(ncclCommInitAll(comms_.data(), devices, list.data()),
          "ncclCommInitAll");
  }
  ~NcclAllReduce() override {
    for (ncclComm_t comm : comms_) ncclCommDestroy(comm);
  }

  // One all-reduce per tensor, on each device's current stream (where the
  // replica's backward queued the gradients), grouped so that one thread
  // can drive every device. Tensors i of all replicas have the same shape
  // and strides (the replicas are built alike).
  void Sum(std::vector<std::vector<torch::Tensor>>& tensors) override {
    Check(ncclGroupStart(), "ncclGroupStart");
    for (size_t r = 0; r < tensors.size(); ++r) {
      const auto device = tensors[r][0].device().index();
      c10::cuda::CUDAGuard guard(device);
      cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
      for (auto& t : tensors[r]) {
        if (!t.is_non_overlapping_and_dense()) {
          throw std::runtime_error("nccl: a gradient is not dense");
        }
        Check(ncclAllReduce(t.data_ptr(), t.data_ptr(),
                            static_cast<size_t>(t.numel()), NcclType(t),
                            ncclSum, comms_[r], stream),
              "ncclAllReduce");
      }
    }
    Check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  std::vector<ncclComm_t> comms_;
};

}  // namespace

std::unique_ptr<AllReduce> MakeNcclAllReduce(int devices) {
  return std::make_unique<NcclAllReduce>(devices);
}

}  // namespace dial::trainer

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
  // and strides (the replicas are built alike); everything is checked
  // before the group opens, so an error never leaves it open.
  void Sum(std::vector<std::vector<torch::Tensor>>& tensors) override {
    if (tensors.size() != comms_.size()) {
      throw std::runtime_error(absl::StrCat("nccl: ", tensors.size(),
                                            " replicas for ", comms_.size(),
                                            " communicators"));
    }
    for (size_t r = 0; r < tensors.size(); ++r) {
      if (tensors[r].size() != tensors[0].size()) {
        throw std::runtime_error("nccl: replicas differ in tensor count");
      }
      for (size_t i = 0; i < tensors[r].size(); ++i) {
        const auto& t = tensors[r][i];
        if (!t.is_cuda() || t.device().index() != static_cast<int>(r) ||
            !t.is_non_overlapping_and_dense() ||
            t.sizes() != tensors[0][i].sizes() ||
            t.strides() != tensors[0][i].strides() ||
            t.scalar_type() != tensors[0][i].scalar_type()) {
          throw std::runtime_error(absl::StrCat(
              "nccl: tensor ", i, " of replica ", r,
              " is not a dense tensor on cuda:", r, " like replica 0's"));
        }
        (void)NcclType(t);  // throws for a type NCCL cannot sum
      }
    }
    if (tensors[0].empty()) return;  // e.g. a model without buffers
    Check(ncclGroupStart(), "ncclGroupStart");
    for (size_t r = 0; r < tensors.size(); ++r) {
      const int device = static_cast<int>(r);
      c10::cuda::CUDAGuard guard(device);
      cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
      for (auto& t : tensors[r]) {
        const ncclResult_t result = ncclAllReduce(
            t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
            NcclType(t), ncclSum, comms_[r], stream);
        if (result != ncclSuccess) {
          (void)ncclGroupEnd();
          Check(result, "ncclAllReduce");
        }
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

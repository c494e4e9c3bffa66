// Gradient sums of multi-GPU replicas through NCCL: one process, one
// thread, a communicator per device (NCCL's "single process, multiple
// devices" set-up). Built only against a CUDA LibTorch with NCCL found
// (DIAL_WITH_NCCL; see trainer/CMakeLists.txt and docs/trainer.md).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <exception>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/internal.h"

namespace dial::trainer {
namespace {

absl::Status Check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("nccl: ", what, ": ", ncclGetErrorString(result)));
}

absl::StatusOr<ncclDataType_t> NcclType(const torch::Tensor& t) {
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
      return absl::InternalError(absl::StrCat("nccl: no reduction for ",
                                              c10::toString(t.scalar_type())));
  }
}

class NcclAllReduce : public AllReduce {
 public:
  // Takes over communicators that ncclCommInitAll set up.
  explicit NcclAllReduce(std::vector<ncclComm_t> comms)
      : comms_(std::move(comms)) {}
  ~NcclAllReduce() override {
    for (ncclComm_t comm : comms_) ncclCommDestroy(comm);
  }
  NcclAllReduce(const NcclAllReduce&) = delete;
  NcclAllReduce& operator=(const NcclAllReduce&) = delete;

  // One all-reduce per tensor, on each device's current stream (where the
  // replica's backward queued the gradients), grouped so that one thread
  // can drive every device. Tensors i of all replicas have the same shape
  // and strides (the replicas are built alike); everything is checked
  // before the group opens, and the group is closed on every error, so an
  // error never leaves it open.
  absl::Status Sum(std::vector<std::vector<torch::Tensor>>& tensors) override {
    if (tensors.size() != comms_.size()) {
      return absl::InternalError(absl::StrCat("nccl: ", tensors.size(),
                                              " replicas for ", comms_.size(),
                                              " communicators"));
    }
    std::vector<std::vector<ncclDataType_t>> types(tensors.size());
    for (size_t r = 0; r < tensors.size(); ++r) {
      if (tensors[r].size() != tensors[0].size()) {
        return absl::InternalError("nccl: replicas differ in tensor count");
      }
      for (size_t i = 0; i < tensors[r].size(); ++i) {
        const auto& t = tensors[r][i];
        if (!t.is_cuda() || t.device().index() != static_cast<int>(r) ||
            !t.is_non_overlapping_and_dense() ||
            t.sizes() != tensors[0][i].sizes() ||
            t.strides() != tensors[0][i].strides() ||
            t.scalar_type() != tensors[0][i].scalar_type()) {
          return absl::InternalError(absl::StrCat(
              "nccl: tensor ", i, " of replica ", r,
              " is not a dense tensor on cuda:", r, " like replica 0's"));
        }
        DIAL_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t));
        types[r].push_back(type);
      }
    }
    if (tensors[0].empty()) return absl::OkStatus();  // e.g. no buffers
    DIAL_RETURN_IF_ERROR(Check(ncclGroupStart(), "ncclGroupStart"));
    absl::Status queued = Queue(tensors, types);
    const absl::Status ended = Check(ncclGroupEnd(), "ncclGroupEnd");
    return queued.ok() ? ended : queued;
  }

 private:
  // The all-reduces of an open group. LibTorch (the device guard, the
  // current stream) may throw: caught here, so the caller closes the group.
  absl::Status Queue(std::vector<std::vector<torch::Tensor>>& tensors,
                     const std::vector<std::vector<ncclDataType_t>>& types) {
    try {
      for (size_t r = 0; r < tensors.size(); ++r) {
        const int device = static_cast<int>(r);
        c10::cuda::CUDAGuard guard(device);
        cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
        for (size_t i = 0; i < tensors[r].size(); ++i) {
          torch::Tensor& t = tensors[r][i];
          DIAL_RETURN_IF_ERROR(
              Check(ncclAllReduce(t.data_ptr(), t.data_ptr(),
                                  static_cast<size_t>(t.numel()), types[r][i],
                                  ncclSum, comms_[r], stream),
                    "ncclAllReduce"));
        }
      }
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("nccl: libtorch: ", e.what()));
    }
    return absl::OkStatus();
  }

  std::vector<ncclComm_t> comms_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AllReduce>> MakeNcclAllReduce(int devices) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(devices));
  std::vector<int> list(static_cast<size_t>(devices));
  std::iota(list.begin(), list.end(), 0);
  DIAL_RETURN_IF_ERROR(Check(
      ncclCommInitAll(comms.data(), devices, list.data()), "ncclCommInitAll"));
  std::unique_ptr<AllReduce> all_reduce =
      std::make_unique<NcclAllReduce>(std::move(comms));
  return all_reduce;
}

}  // namespace dial::trainer

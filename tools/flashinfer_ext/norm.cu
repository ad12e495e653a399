// FlashInfer's RMSNorm and fused-add RMSNorm (include/flashinfer/norm.cuh, header-only, from the directory the
// builder is given) behind two plain functions, for binding.cpp: the same calls FlashInfer's own norm binding
// makes. Kept apart from the PyTorch headers, which need not meet FlashInfer's (its float2 operators, say).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <flashinfer/norm.cuh>

#include "norm_ext.h"

namespace {

template <typename T>
cudaError_t rmsnorm_as(void* input, void* weight, void* output, uint32_t rows, uint32_t hidden,
                       uint32_t stride_input, uint32_t stride_output, float eps, bool pdl, cudaStream_t stream) {
  return flashinfer::norm::RMSNorm(static_cast<T*>(input), static_cast<T*>(weight), static_cast<T*>(output), rows,
                                   hidden, stride_input, stride_output, eps, pdl, stream);
}

template <typename T>
cudaError_t fused_add_rmsnorm_as(void* input, void* residual, void* weight, uint32_t rows, uint32_t hidden,
                                 uint32_t stride_input, uint32_t stride_residual, float eps, bool pdl,
                                 cudaStream_t stream) {
  return flashinfer::norm::FusedAddRMSNorm(static_cast<T*>(input), static_cast<T*>(residual),
                                           static_cast<T*>(weight), rows, hidden, stride_input, stride_residual,
                                           eps, pdl, stream);
}

}  // namespace

cudaError_t pyrms_fi_rmsnorm(NormDtype dtype, void* input, void* weight, void* output, uint32_t rows,
                             uint32_t hidden, uint32_t stride_input, uint32_t stride_output, float eps, bool pdl,
                             cudaStream_t stream) {
  if (dtype == NormDtype::kBFloat16) {
    return rmsnorm_as<nv_bfloat16>(input, weight, output, rows, hidden, stride_input, stride_output, eps, pdl,
                                   stream);
  }
  return rmsnorm_as<half>(input, weight, output, rows, hidden, stride_input, stride_output, eps, pdl, stream);
}

cudaError_t pyrms_fi_fused_add_rmsnorm(NormDtype dtype, void* input, void* residual, void* weight, uint32_t rows,
                                       uint32_t hidden, uint32_t stride_input, uint32_t stride_residual, float eps,
                                       bool pdl, cudaStream_t stream) {
  if (dtype == NormDtype::kBFloat16) {
    return fused_add_rmsnorm_as<nv_bfloat16>(input, residual, weight, rows, hidden, stride_input, stride_residual,
                                             eps, pdl, stream);
  }
  return fused_add_rmsnorm_as<half>(input, residual, weight, rows, hidden, stride_input, stride_residual, eps, pdl,
                                    stream);
}

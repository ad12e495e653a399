// The two functions norm.cu exports to binding.cpp: FlashInfer's kernels on raw pointers, in PyTorch's terms
// nowhere (binding.cpp checks the tensors and picks the dtype).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

enum class NormDtype { kFloat16, kBFloat16 };

cudaError_t pyrms_fi_rmsnorm(NormDtype dtype, void* input, void* weight, void* output, uint32_t rows,
                             uint32_t hidden, uint32_t stride_input, uint32_t stride_output, float eps, bool pdl,
                             cudaStream_t stream);

cudaError_t pyrms_fi_fused_add_rmsnorm(NormDtype dtype, void* input, void* residual, void* weight, uint32_t rows,
                                       uint32_t hidden, uint32_t stride_input, uint32_t stride_residual, float eps,
                                       bool pdl, cudaStream_t stream);

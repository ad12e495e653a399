// PyTorch binding of norm.cu (pyrms.bench.flashinfer_ext wraps it in flashinfer.norm's signatures): the tensors
// checked as FlashInfer's own binding checks them, the kernels launched on PyTorch's current stream.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "norm_ext.h"

namespace {

uint32_t u32(int64_t value) { return static_cast<uint32_t>(value); }

NormDtype dtype_of(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& other) {
  TORCH_CHECK(input.is_cuda(), "input must be a CUDA tensor");
  TORCH_CHECK(input.dim() == 2, "input must be [rows, hidden], got ", input.sizes());
  TORCH_CHECK(other.sizes() == input.sizes(), "sizes differ: ", other.sizes(), " against input's ", input.sizes());
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == input.size(1), "weight must be [", input.size(1), "], got ",
              weight.sizes());
  TORCH_CHECK(input.stride(1) == 1 && other.stride(1) == 1 && weight.stride(0) == 1,
              "the last dimension of every tensor must be contiguous");
  TORCH_CHECK(weight.scalar_type() == input.scalar_type() && other.scalar_type() == input.scalar_type(),
              "input, weight and the other tensor must share a dtype");
  TORCH_CHECK(weight.device() == input.device() && other.device() == input.device(),
              "every tensor must be on input's device");
  TORCH_CHECK(input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf,
              "FlashInfer's norms take float16 or bfloat16, got ", input.scalar_type());
  return input.scalar_type() == at::kBFloat16 ? NormDtype::kBFloat16 : NormDtype::kFloat16;
}

void rmsnorm(at::Tensor output, at::Tensor input, at::Tensor weight, double eps, bool enable_pdl) {
  const NormDtype dtype = dtype_of(input, weight, output);
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaError_t status = pyrms_fi_rmsnorm(
      dtype, input.data_ptr(), weight.data_ptr(), output.data_ptr(), u32(input.size(0)), u32(input.size(1)),
      u32(input.stride(0)), u32(output.stride(0)), static_cast<float>(eps), enable_pdl,
      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "FlashInfer RMSNorm failed: ", cudaGetErrorString(status));
}

void fused_add_rmsnorm(at::Tensor input, at::Tensor residual, at::Tensor weight, double eps, bool enable_pdl) {
  const NormDtype dtype = dtype_of(input, weight, residual);
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaError_t status = pyrms_fi_fused_add_rmsnorm(
      dtype, input.data_ptr(), residual.data_ptr(), weight.data_ptr(), u32(input.size(0)),
      u32(input.size(1)), u32(input.stride(0)), u32(residual.stride(0)), static_cast<float>(eps), enable_pdl,
      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "FlashInfer FusedAddRMSNorm failed: ", cudaGetErrorString(status));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rmsnorm", &rmsnorm, "output = RMSNorm(input) * weight (FlashInfer's norm.cuh)", py::arg("output"),
        py::arg("input"), py::arg("weight"), py::arg("eps"), py::arg("enable_pdl"));
  m.def("fused_add_rmsnorm", &fused_add_rmsnorm,
        "in place: residual += input; input = RMSNorm(residual) * weight (FlashInfer's norm.cuh)", py::arg("input"),
        py::arg("residual"), py::arg("weight"), py::arg("eps"), py::arg("enable_pdl"));
}

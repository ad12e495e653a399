/* A stand-in libcuda.so.1: every entry point returns CUDA_SUCCESS at once; the few whose outputs
   pyrms reads (versions, device count and attributes, handles) fill them in. */
#include <string.h>
#include <stdint.h>
typedef int CUresult;
static uintptr_t next_handle = 0x1000;
static CUresult ok(void) { return 0; }
static CUresult handle_out(void **out) { next_handle += 0x10; *out = (void *)next_handle; return 0; }
static CUresult device_get(int *dev, int ordinal) { *dev = ordinal; return 0; }
static CUresult device_count(int *n) { *n = 1; return 0; }
static CUresult device_name(char *name, int len, int dev) { strncpy(name, "Stand-in H200", len); return 0; }
static CUresult total_mem(size_t *bytes, int dev) { *bytes = (size_t)1 << 37; return 0; }
static CUresult mem_info(size_t *free, size_t *total) { *free = *total = (size_t)1 << 37; return 0; }
static CUresult attribute(int *value, int attrib, int dev) {
    switch (attrib) {
    case 75: *value = 9; break;          /* compute capability major */
    case 76: *value = 0; break;          /* minor */
    case 16: *value = 132; break;        /* multiprocessors */
    case 38: *value = 50 << 20; break;   /* L2 bytes */
    case 97: *value = 232448; break;     /* shared memory per block, opt-in */
    case 81: *value = 233472; break;     /* shared memory per multiprocessor */
    default: *value = 1024;
    }
    return 0;
}
static CUresult mem_alloc(uintptr_t *ptr, size_t n) { next_handle += 0x100000; *ptr = next_handle; return 0; }
static CUresult ctx_current(void **ctx) { *ctx = (void *)0xC000; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
struct entry { const char *name; void *fn; };
static const struct entry table[] = {
    {"cuDriverGetVersion", (void *)cuDriverGetVersion}, {"cuDeviceGet", (void *)device_get},
    {"cuDeviceGetCount", (void *)device_count}, {"cuDeviceGetName", (void *)device_name},
    {"cuDeviceTotalMem", (void *)total_mem}, {"cuMemGetInfo", (void *)mem_info},
    {"cuDeviceGetAttribute", (void *)attribute}, {"cuDevicePrimaryCtxRetain", (void *)handle_out},
    {"cuCtxGetCurrent", (void *)ctx_current}, {"cuStreamCreate", (void *)handle_out},
    {"cuEventCreate", (void *)handle_out}, {"cuLibraryLoadData", (void *)handle_out},
    {"cuLibraryGetKernel", (void *)handle_out}, {"cuKernelGetFunction", (void *)handle_out},
    {"cuModuleLoadData", (void *)handle_out}, {"cuModuleGetFunction", (void *)handle_out},
    {"cuMemAlloc", (void *)mem_alloc}, {"cuMemHostAlloc", (void *)handle_out},
    {"cuMemPoolCreate", (void *)handle_out}, {"cuMemAllocFromPoolAsync", (void *)mem_alloc},
};
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    if (status) *status = 0;
    *pfn = (void *)ok;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(symbol, table[i].name)) *pfn = table[i].fn;
    return 0;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, 0);
}
CUresult cuInit(unsigned flags) { return 0; }
CUresult cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_STANDIN"; return 0; }
CUresult cuGetErrorString(int e, const char **s) { *s = "stand-in"; return 0; }
/* NVRTC opens libcuda.so.1 too and asks for export tables: none here, so that it compiles as without a driver. */
CUresult cuGetExportTable(const void **table, const void *id) { *table = 0; return 999; /* CUDA_ERROR_UNKNOWN */ }

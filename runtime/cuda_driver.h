/*
 * cuda_driver.h: the CUDA driver API, opened at run time.
 *
 * libattn never links -lcuda: it dlopen()s libcuda.so.1 at first need, so
 * the compiler and library run where there is no driver (CI, compile-only
 * machines) and say so when a launch needs one. The types come from the
 * toolkit's cuda.h; the functions from the table below. Tools (`attnc
 * run`) and GPU tests use the same table to make a context, allocate,
 * copy and time without cudart.
 */
#ifndef ATTN_CUDA_DRIVER_H
#define ATTN_CUDA_DRIVER_H

#include <cuda.h>

#include "attn.h"
#include "attn_abi.h"
#include "attnc.h"

/* X(field, symbol in libcuda). The symbols are the versioned names the
 * cuda.h macros map to (cuMemAlloc -> cuMemAlloc_v2, ...); the field's type
 * is the prototype cuda.h declares for the unversioned name. */
#define RT_DRIVER_FUNCS(X)                                                    \
  X(Init, cuInit)                                                             \
  X(GetErrorName, cuGetErrorName)                                             \
  X(GetErrorString, cuGetErrorString)                                         \
  X(DeviceGet, cuDeviceGet)                                                   \
  X(DeviceGetCount, cuDeviceGetCount)                                         \
  X(DeviceGetAttribute, cuDeviceGetAttribute)                                 \
  X(DeviceGetName, cuDeviceGetName)                                           \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)                         \
  X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)                    \
  X(CtxGetCurrent, cuCtxGetCurrent)                                           \
  X(CtxSetCurrent, cuCtxSetCurrent)                                           \
  X(CtxGetDevice, cuCtxGetDevice)                                             \
  X(CtxSynchronize, cuCtxSynchronize)                                         \
  X(LibraryLoadData, cuLibraryLoadData)                                       \
  X(LibraryUnload, cuLibraryUnload)                                           \
  X(LibraryGetKernel, cuLibraryGetKernel)                                     \
  X(KernelGetFunction, cuKernelGetFunction)                                   \
  X(FuncSetAttribute, cuFuncSetAttribute)                                     \
  X(FuncGetAttribute, cuFuncGetAttribute)                                     \
  X(LaunchKernel, cuLaunchKernel)                                             \
  X(LaunchKernelEx, cuLaunchKernelEx)                                         \
  X(MemAlloc, cuMemAlloc_v2)                                                  \
  X(MemFree, cuMemFree_v2)                                                    \
  X(MemcpyHtoD, cuMemcpyHtoD_v2)                                              \
  X(MemcpyDtoH, cuMemcpyDtoH_v2)                                              \
  X(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2)                                    \
  X(MemsetD8, cuMemsetD8_v2)                                                  \
  X(MemsetD32, cuMemsetD32_v2)                                                \
  X(MemsetD32Async, cuMemsetD32Async)                                         \
  X(StreamBeginCapture, cuStreamBeginCapture_v2)                              \
  X(StreamEndCapture, cuStreamEndCapture)                                     \
  X(GraphInstantiate, cuGraphInstantiateWithFlags)                            \
  X(GraphLaunch, cuGraphLaunch)                                               \
  X(GraphExecDestroy, cuGraphExecDestroy)                                     \
  X(GraphDestroy, cuGraphDestroy)                                             \
  X(StreamCreate, cuStreamCreate)                                             \
  X(StreamDestroy, cuStreamDestroy_v2)                                        \
  X(StreamSynchronize, cuStreamSynchronize)                                   \
  X(EventCreate, cuEventCreate)                                               \
  X(EventDestroy, cuEventDestroy_v2)                                          \
  X(EventRecord, cuEventRecord)                                               \
  X(StreamWaitEvent, cuStreamWaitEvent)                                       \
  X(EventSynchronize, cuEventSynchronize)                                     \
  X(EventElapsedTime, cuEventElapsedTime_v2)                                  \
  X(TensorMapEncodeTiled, cuTensorMapEncodeTiled)

/* cuda.h declares each function under the name its macro expands to, so
 * the typeof of the versioned symbol is the right prototype. */
typedef struct RtDriver {
  void *handle; /* dlopen handle of libcuda.so.1 */
#define X(field, sym) __typeof__(sym) *field;
  RT_DRIVER_FUNCS(X)
#undef X
} RtDriver;

/* The loaded driver (opened and cuInit'ed once per process, thread-safe),
 * or NULL with the reason in err: ATTN_ERROR_NO_DRIVER when libcuda.so.1
 * is missing, lacks a symbol or finds no device. */
const RtDriver *rt_driver(attn_status *status, StrBuf *err);

/* "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" into err;
 * returns the matching status (OUT_OF_MEMORY or CUDA). */
attn_status rt_driver_error(const RtDriver *d, CUresult r, const char *what,
                            StrBuf *err);

/* The caller's current context, or ATTN_ERROR_CUDA with "no current CUDA
 * context: ..." in err. Never creates one. */
attn_status rt_driver_current(const RtDriver *d, CUcontext *ctx,
                              CUdevice *dev, StrBuf *err);
/* A persistent kernel's grid: grid's CTAs (x y z) capped at the device's
 * SM count and at cap (0: no cap), all in x. False, with grid unchanged,
 * when the SM count cannot be read. The forward's and the backward's
 * persistent kernels launch so. */
bool rt_persistent_grid(const RtDriver *d, CUdevice dev, unsigned grid[3],
                        unsigned long long cap);
/* Compute capability of a device. */
attn_status rt_driver_cc(const RtDriver *d, CUdevice dev, int *major,
                         int *minor, StrBuf *err);

/* For tools and tests only (the library never calls it): retains device's
 * primary context (the one cudart and PyTorch use) and makes it current.
 * Release with rt_driver_release_primary(device). */
attn_status rt_driver_make_current_primary(int device, StrBuf *err);
void rt_driver_release_primary(int device);

/* tmap.c: the tensor maps a plan step asks for (PlanStep.maps), from
 * the launch's parameter block; the others stay zero. Error in err. */
attn_status rt_tmap_fill(const RtDriver *d, const IrGraph *g, const PlanStep *step,
                         const attn_params *p, attn_tmaps *tm, StrBuf *err);

#endif

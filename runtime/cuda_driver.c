/* cuda_driver.c: opens libcuda.so.1 at first need and resolves the driver
 * functions libattn, `attnc run` and the GPU tests use.
 *
 * Symbols come from dlsym under their versioned names (cuMemAlloc_v2 ...),
 * the names cuda.h itself maps the calls to, so the ABI matches the
 * prototypes we compile against. The first outcome (loaded or not) is
 * kept for the life of the process: a driver does not appear later. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"

static RtDriver rt_drv;
static attn_status rt_drv_status;
static char rt_drv_error[512];
static pthread_once_t rt_drv_once = PTHREAD_ONCE_INIT;

/* Records why the driver is unusable; the message is already in
 * rt_drv_error. */
static void rt_driver_fail(void) {
  rt_drv_status = ATTN_ERROR_NO_DRIVER;
  if (rt_drv.handle) dlclose(rt_drv.handle);
  memset(&rt_drv, 0, sizeof rt_drv);
}

static int rt_driver_resolve(void) {
#define X(field, sym)                                                         \
  *(void **)&rt_drv.field = dlsym(rt_drv.handle, #sym);                       \
  if (!rt_drv.field) {                                                        \
    snprintf(rt_drv_error, sizeof rt_drv_error,                              \
             "libcuda.so.1 lacks %s: the NVIDIA driver is too old "           \
             "(CUDA 12.0 or newer is needed)",                                \
             #sym);                                                           \
    rt_driver_fail();                                                         \
    return -1;                                                                \
  }
  RT_DRIVER_FUNCS(X)
#undef X
  return 0;
}

static void rt_driver_open(void) {
  rt_drv.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!rt_drv.handle) {
    snprintf(rt_drv_error, sizeof rt_drv_error,
             "libcuda.so.1 not found: no NVIDIA driver on this machine; "
             "compiling works, launching needs a GPU");
    rt_driver_fail();
    return;
  }
  if (rt_driver_resolve() != 0) return;
  CUresult r = rt_drv.Init(0);
  int count = 0;
  if (r == CUDA_SUCCESS) r = rt_drv.DeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    const char *name = "no device";
    if (r != CUDA_SUCCESS) rt_drv.GetErrorName(r, &name);
    snprintf(rt_drv_error, sizeof rt_drv_error,
             "the NVIDIA driver finds no usable GPU (%s); compiling works, "
             "launching needs a GPU",
             name ? name : "?");
    rt_driver_fail();
    return;
  }
  rt_drv_status = ATTN_SUCCESS;
}

const RtDriver *rt_driver(attn_status *status, StrBuf *err) {
  pthread_once(&rt_drv_once, rt_driver_open);
  if (status) *status = rt_drv_status;
  if (rt_drv_status == ATTN_SUCCESS) return &rt_drv;
  if (err) sb_puts(err, rt_drv_error);
  return NULL;
}

attn_status rt_driver_error(const RtDriver *d, CUresult r, const char *what,
                            StrBuf *err) {
  const char *name = NULL, *desc = NULL;
  if (d->GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (d->GetErrorString(r, &desc) != CUDA_SUCCESS) desc = NULL;
  sb_printf(err, "%s failed: %s (%s)", what, name ? name : "unknown error",
            desc ? desc : "no description");
  return r == CUDA_ERROR_OUT_OF_MEMORY ? ATTN_ERROR_OUT_OF_MEMORY
                                       : ATTN_ERROR_CUDA;
}

attn_status rt_driver_current(const RtDriver *d, CUcontext *ctx,
                              CUdevice *dev, StrBuf *err) {
  CUresult r = d->CtxGetCurrent(ctx);
  if (r != CUDA_SUCCESS) return rt_driver_error(d, r, "cuCtxGetCurrent", err);
  if (!*ctx) {
    sb_puts(err, "no current CUDA context: call cudaSetDevice/"
                 "cuCtxSetCurrent first");
    return ATTN_ERROR_CUDA;
  }
  r = d->CtxGetDevice(dev);
  if (r != CUDA_SUCCESS) return rt_driver_error(d, r, "cuCtxGetDevice", err);
  return ATTN_SUCCESS;
}

bool rt_persistent_grid(const RtDriver *d, CUdevice dev, unsigned grid[3],
                        unsigned long long cap) {
  int nsm = 0;
  if (d->DeviceGetAttribute(&nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) !=
          CUDA_SUCCESS || nsm <= 0)
    return false;
  unsigned long long ctas = (unsigned long long)grid[0] * grid[1] * grid[2];
  if (ctas > (unsigned long long)nsm) ctas = (unsigned long long)nsm;
  if (cap > 0 && cap < ctas) ctas = cap;
  grid[0] = (unsigned)ctas;
  grid[1] = grid[2] = 1;
  return true;
}

attn_status rt_driver_cc(const RtDriver *d, CUdevice dev, int *major,
                         int *minor, StrBuf *err) {
  CUresult r = d->DeviceGetAttribute(
      major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (r == CUDA_SUCCESS)
    r = d->DeviceGetAttribute(
        minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (r != CUDA_SUCCESS)
    return rt_driver_error(d, r, "cuDeviceGetAttribute", err);
  return ATTN_SUCCESS;
}

attn_status rt_driver_make_current_primary(int device, StrBuf *err) {
  attn_status st;
  const RtDriver *d = rt_driver(&st, err);
  if (!d) return st;
  CUdevice dev;
  CUcontext ctx;
  CUresult r = d->DeviceGet(&dev, device);
  if (r != CUDA_SUCCESS) return rt_driver_error(d, r, "cuDeviceGet", err);
  r = d->DevicePrimaryCtxRetain(&ctx, dev);
  if (r != CUDA_SUCCESS)
    return rt_driver_error(d, r, "cuDevicePrimaryCtxRetain", err);
  r = d->CtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    d->DevicePrimaryCtxRelease(dev);
    return rt_driver_error(d, r, "cuCtxSetCurrent", err);
  }
  return ATTN_SUCCESS;
}

void rt_driver_release_primary(int device) {
  const RtDriver *d = rt_driver(NULL, NULL);
  CUdevice dev;
  if (!d || d->DeviceGet(&dev, device) != CUDA_SUCCESS) return;
  d->CtxSetCurrent(NULL);
  d->DevicePrimaryCtxRelease(dev);
}

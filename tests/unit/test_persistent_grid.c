/*
 * test_persistent_grid.c: the persistent kernels' grid (runtime/cuda_driver.c,
 * rt_persistent_grid), checked without a GPU through a fake driver whose SM
 * count each case sets: the CTAs are min(grid's CTAs, SMs, cap) in x, and an
 * unreadable SM count leaves the grid as it was.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "cuda_driver.h"

static int fake_sms; /* <= 0: the attribute query fails */

static CUresult fake_attribute(int *v, CUdevice_attribute a, CUdevice dev) {
  (void)dev;
  if (a != CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT || fake_sms <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  *v = fake_sms;
  return CUDA_SUCCESS;
}

typedef struct {
  const char *what;
  int sms;
  unsigned grid[3];
  unsigned long long cap;
  bool ok;           /* what rt_persistent_grid returns */
  unsigned want[3];  /* the grid after it */
} GridCase;

static const GridCase cases[] = {
    {"capped at the SM count", 132, {32, 16, 4}, 0, true, {132, 1, 1}},
    {"fewer items than SMs", 132, {3, 5, 2}, 0, true, {30, 1, 1}},
    {"a cap below both", 132, {32, 16, 4}, 3, true, {3, 1, 1}},
    {"a cap never adds CTAs", 132, {2, 1, 1}, 3, true, {2, 1, 1}},
    {"items past 32 bits", 132, {1u << 20, 65535, 65535}, 0, true, {132, 1, 1}},
    {"unknown SM count", 0, {32, 16, 4}, 3, false, {32, 16, 4}},
};

Test(persistent_grid, cases) {
  RtDriver d;
  memset(&d, 0, sizeof d);
  d.DeviceGetAttribute = fake_attribute;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const GridCase *c = &cases[i];
    fake_sms = c->sms;
    unsigned grid[3] = {c->grid[0], c->grid[1], c->grid[2]};
    cr_expect_eq(rt_persistent_grid(&d, 0, grid, c->cap), c->ok, "%s: result", c->what);
    for (int k = 0; k < 3; k++)
      cr_expect_eq(grid[k], c->want[k], "%s: grid[%d] %u, want %u", c->what, k, grid[k],
                   c->want[k]);
  }
}

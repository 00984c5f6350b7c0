/*
 * test_persistent_grid.c: the persistent kernels' grid (runtime/cuda_driver.c,
 * rt_persistent_grid), checked without a GPU through a fake driver whose SM
 * count the test sets: the CTAs are min(grid's CTAs, SMs, cap) in x, and an
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

static RtDriver fake_driver(int sms) {
  RtDriver d;
  memset(&d, 0, sizeof d);
  d.DeviceGetAttribute = fake_attribute;
  fake_sms = sms;
  return d;
}

static void assert_grid(const unsigned grid[3], unsigned x, unsigned y, unsigned z) {
  cr_assert_eq(grid[0], x);
  cr_assert_eq(grid[1], y);
  cr_assert_eq(grid[2], z);
}

Test(persistent_grid, capped_at_the_sm_count) {
  RtDriver d = fake_driver(132);
  unsigned grid[3] = {32, 16, 4}; /* 2048 items */
  cr_assert(rt_persistent_grid(&d, 0, grid, 0));
  assert_grid(grid, 132, 1, 1);
}

Test(persistent_grid, fewer_items_than_sms) {
  RtDriver d = fake_driver(132);
  unsigned grid[3] = {3, 5, 2};
  cr_assert(rt_persistent_grid(&d, 0, grid, 0));
  assert_grid(grid, 30, 1, 1);
}

Test(persistent_grid, a_cap_below_both) {
  RtDriver d = fake_driver(132);
  unsigned grid[3] = {32, 16, 4};
  cr_assert(rt_persistent_grid(&d, 0, grid, 3));
  assert_grid(grid, 3, 1, 1);
  unsigned small[3] = {2, 1, 1};
  cr_assert(rt_persistent_grid(&d, 0, small, 3)); /* the cap never adds CTAs */
  assert_grid(small, 2, 1, 1);
}

Test(persistent_grid, items_past_32_bits) {
  RtDriver d = fake_driver(132);
  unsigned grid[3] = {1u << 20, 65535, 65535}; /* the product overflows 32 bits */
  cr_assert(rt_persistent_grid(&d, 0, grid, 0));
  assert_grid(grid, 132, 1, 1);
}

Test(persistent_grid, unknown_sm_count_leaves_the_grid) {
  RtDriver d = fake_driver(0);
  unsigned grid[3] = {32, 16, 4};
  cr_assert_not(rt_persistent_grid(&d, 0, grid, 3));
  assert_grid(grid, 32, 16, 4);
}

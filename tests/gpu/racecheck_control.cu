/*
 * racecheck_control.cu: which shared-memory handoffs does compute-
 * sanitizer's racecheck accept as synchronized? The sm_90 templates pass
 * small values (the work tile, a stage's key tile) from a producer warp
 * to consumer warps through one shared-memory slot; racecheck reported
 * those slots. The same handoff, several ways:
 *   mbarrier        full/empty mbarriers, every consumer thread arrives
 *   elected         every consumer warp: __syncwarp, then lane 0 arrives
 *   elected_nosync  lane 0 arrives for its warp with no __syncwarp (the
 *                   other lanes' reads are unordered with the arrive: a
 *                   race in the PTX memory model)
 *   named           bar.arrive / bar.sync named barriers (bwd_sm90's dQ slot
 *                   until session 18)
 *   syncthreads     __syncthreads (correct)
 *   none            no synchronization at all (a real race)
 * Each mode checks its result (the consumers' sum of the rounds) and
 * prints it; tools/sanitize_device.sh runs each under racecheck.
 * Usage: racecheck_control MODE
 */
#include <cstdio>
#include <cstring>

extern "C" {
#include "../../abi/attn_abi.h"
#include "../../abi/attn_layout.h"
}
/* The templates' own mbarrier wrappers, as the emitter pastes them. */
#include "../../templates/common.cuh"
#include "../../templates/ptx.cuh"
#include "../../templates/wgmma.cuh"

constexpr int kRounds = 64;
constexpr int kConsumers = 64; /* two warps */

enum Mode { MBARRIER, ELECTED, ELECTED_NOSYNC, NAMED, SYNCTHREADS, NONE, NMODES };
static const char *const mode_names[NMODES] = {"mbarrier", "elected", "elected_nosync",
                                               "named",    "syncthreads", "none"};

__global__ void handoff(int mode, int *sums) {
  __shared__ alignas(8) unsigned long long bars[2];
  __shared__ int slot;
  const unsigned full = (unsigned)__cvta_generic_to_shared(&bars[0]);
  const unsigned empty = (unsigned)__cvta_generic_to_shared(&bars[1]);
  const int tid = threadIdx.x, lane = tid & 31;
  const bool mbar = mode == MBARRIER || mode == ELECTED || mode == ELECTED_NOSYNC;
  if (tid == 0) {
    attn_mbar_init(full, 1);
    attn_mbar_init(empty, mode == MBARRIER ? kConsumers : kConsumers / 32);
    slot = -1;
  }
  __syncthreads();
  int sum = 0;
  for (int r = 0; r < kRounds; ++r) {
    if (tid < 32) { /* the producer warp: lane 0 writes */
      if (mbar) attn_mbar_wait(empty, (r & 1) ^ 1);
      if (mode == NAMED && r > 0) attn_bar_sync<32 + kConsumers>(2); /* the slot is free */
      if (tid == 0) slot = r;
      __syncwarp();
      if (tid == 0 && mbar) attn_mbar_arrive(full);
      if (mode == NAMED) attn_bar_arrive<32 + kConsumers>(1); /* the slot is full */
    } else {
      if (mbar) attn_mbar_wait(full, r & 1);
      if (mode == NAMED) attn_bar_sync<32 + kConsumers>(1);
      if (mode != SYNCTHREADS) sum += slot;
      if (mode == MBARRIER) attn_mbar_arrive(empty);
      if (mode == ELECTED) __syncwarp();
      if ((mode == ELECTED || mode == ELECTED_NOSYNC) && lane == 0) attn_mbar_arrive(empty);
      if (mode == NAMED && r + 1 < kRounds) attn_bar_arrive<32 + kConsumers>(2);
    }
    if (mode == SYNCTHREADS) {
      __syncthreads();
      if (tid >= 32) sum += slot;
      __syncthreads();
    }
  }
  if (tid >= 32) sums[tid - 32] = sum;
}

int main(int argc, char **argv) {
  int mode = -1;
  for (int m = 0; m < NMODES; ++m)
    if (argc > 1 && !strcmp(argv[1], mode_names[m])) mode = m;
  if (mode < 0) {
    fprintf(stderr, "usage: racecheck_control MODE (mbarrier, elected, elected_nosync, named, "
            "syncthreads or none)\n");
    return 2;
  }
  int *d = nullptr, h[kConsumers];
  if (cudaMalloc(&d, sizeof h) != cudaSuccess) {
    printf("racecheck_control: no GPU\n");
    return 0;
  }
  handoff<<<1, 32 + kConsumers>>>(mode, d);
  cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  const int want = kRounds * (kRounds - 1) / 2;
  int bad = e != cudaSuccess;
  for (int t = 0; t < kConsumers && !bad; ++t) bad = h[t] != want;
  printf("racecheck_control %s: %s (sum %d, want %d%s)\n", mode_names[mode],
         bad ? "wrong" : "right", e == cudaSuccess ? h[0] : -1, want,
         mode == NONE || mode == ELECTED_NOSYNC ? "; racy, either may happen" : "");
  cudaFree(d);
  return mode != NONE && mode != ELECTED_NOSYNC && bad;
}

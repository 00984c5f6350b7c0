/* host_check.h: what the host examples share: bf16 conversion, random
 * inputs, a plain CPU attention to check against, and a device count that
 * tells "no GPU here" apart from a failure. Header-only (static functions,
 * each example using the ones it needs) so each example stays one compile
 * command. */
#ifndef ATTN_HOST_CHECK_H
#define ATTN_HOST_CHECK_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __attribute__((unused)) uint16_t host_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static __attribute__((unused)) float host_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* n bf16 values uniform in [-1, 1) from a fixed-seed LCG. */
static __attribute__((unused)) void host_fill_bf16(uint16_t *x, size_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = host_f32_to_bf16((float)(s >> 8) / 8388608.0f - 1.0f);
  }
}

/* o = softmax(q k^T * scale [causal: keys j <= i]) v, for dense bf16
 * q [B, H, Sq, D] and k, v [B, Hk, Skv, D] (query head h reads key/value
 * head h / (H / Hk)), in double precision. */
static __attribute__((unused)) void host_attention(const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, double *o, int B, int H, int Hk,
                           int Sq, int Skv, int D, double scale, int causal) {
  double *p = malloc(sizeof *p * (size_t)Skv);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      size_t qo = ((size_t)b * H + h) * Sq * D;
      size_t ko = ((size_t)b * Hk + h / (H / Hk)) * Skv * D;
      for (int i = 0; i < Sq; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < Skv; j++) {
          double s = 0;
          for (int d = 0; d < D; d++)
            s += (double)host_bf16_to_f32(q[qo + (size_t)i * D + d]) *
                 host_bf16_to_f32(k[ko + (size_t)j * D + d]);
          p[j] = causal && j > i ? -INFINITY : s * scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int j = 0; j < Skv; j++) sum += p[j] = exp(p[j] - mx);
        for (int d = 0; d < D; d++) {
          double acc = 0;
          for (int j = 0; j < Skv; j++)
            acc += p[j] * host_bf16_to_f32(v[ko + (size_t)j * D + d]);
          o[qo + (size_t)i * D + d] = acc / sum;
        }
      }
    }
  free(p);
}

/* Worst |gpu - ref| beyond 2e-2 + 2e-2 |ref| (bf16 output); prints it. */
static __attribute__((unused)) int host_compare(const uint16_t *gpu, const double *ref, size_t n) {
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    double g = host_bf16_to_f32(gpu[i]), err = fabs(g - ref[i]);
    if (!(err <= 2e-2 + 2e-2 * fabs(ref[i]))) bad++;
    if (!(err <= worst)) worst = err;
  }
  printf("max abs error %.3g over %zu values, %zu outside tolerance\n", worst,
         n, bad);
  return bad == 0;
}

/* 1: a GPU is there; 0: none (the example skips); exits on other errors. */
static __attribute__((unused)) int host_have_gpu(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      (e == cudaSuccess && n == 0)) {
    printf("no GPU here (%s): nothing to run\n",
           e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 0;
  }
  if (e != cudaSuccess) {
    printf("no usable GPU (%s): nothing to run\n", cudaGetErrorString(e));
    return 0;
  }
  return 1;
}

#define HOST_CUDA(call)                                                       \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));             \
      printf("FAIL\n");                                                       \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#endif

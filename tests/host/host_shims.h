// host_shims.h: templates/common.cuh's integer helpers for the host checks
// (the same definitions): i32 arithmetic that wraps, total division.
#ifndef ATTN_HOST_SHIMS_H
#define ATTN_HOST_SHIMS_H
static int attn_iadd(int x, int y) { return (int)((unsigned)x + (unsigned)y); }
static int attn_isub(int x, int y) { return (int)((unsigned)x - (unsigned)y); }
static int attn_imul(int x, int y) { return (int)((unsigned)x * (unsigned)y); }
static int attn_ineg(int x) { return (int)(0u - (unsigned)x); }
static long long attn_labs(long long x) { return x < 0 ? -x : x; }
static int attn_abs(int x) { return x < 0 ? (int)(0u - (unsigned)x) : x; }
static int attn_idiv(int x, int y) { return y == 0 ? 0 : y == -1 ? (int)(0u - (unsigned)x) : x / y; }
static int attn_imod(int x, int y) { return y == 0 ? x : y == -1 ? 0 : x % y; }
#endif

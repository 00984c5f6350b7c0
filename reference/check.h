/*
 * check.h: run a graph on the GPU on the CPU reference's inputs (check.c).
 * Used by `attnc run`, tests/gpu and bench/; not part of the public API.
 */
#ifndef ATTN_CHECK_H
#define ATTN_CHECK_H

#include "attn.h"
#include "ref.h"

typedef struct ChkOptions {
  bool bshd;        /* store q, k, v and o as [B, S, H, D] views */
  bool count_tiles; /* count the key tiles the kernel loads */
  int bench_iters;  /* > 0: time that many launches, median in ms */
  /* Non-NULL: after the forward, run the backward (graphs with grad) with
   * this dO, dense [B, H, Sq, Dv] in the forward output's shape (rounded
   * to dO's dtype, bwd_grad_type, on upload); the gradients come back in
   * ChkResult.grads. */
  const double *dout;
  bool deterministic; /* the backward in deterministic mode */
} ChkOptions;

typedef struct ChkResult {
  double **outputs; /* by tensor index: the output's values, else NULL */
  double **grads;   /* by tensor index: the gradient of a q, k, v or bias
                       with grad when ChkOptions.dout was given, else NULL */
  unsigned long long tiles_visited;
  double ms;
  /* A grad block's amax outputs after the backward, in its order. */
  double amax[BWD_MAX_AMAX];
} ChkResult;

/* Sets the shapes of args's output tensors from the inputs' dims. */
int chk_output_shapes(RefArgs *args, StrBuf *err);
/* Uploads args's inputs, poisons the outputs, binds every scalar, launches
 * once and reads the outputs back (optionally counts tiles and times).
 * Errors come back as a status with the reason in err. */
attn_status chk_run_gpu(attn_context *ctx, attn_graph *graph, const RefArgs *args,
                        const ChkOptions *o, ChkResult *res, StrBuf *err);
void chk_result_free(ChkResult *res, int ntensors);
/* A random dO for the backward: normal values rounded to dO's dtype
 * (bwd_grad_type), in the shape of the output o (a tensor of args), from
 * seed. NULL when out of memory; free() it. */
double *chk_random_dout(const RefArgs *args, int o, uint64_t seed);
/* The CPU backward a GPU backward is compared with: ref_backward, or for
 * the FP8 backward (bwd_is_fp8) ref_backward_full given the forward's
 * stored o and lse from fwd (the kernels read them: NULL recomputes them)
 * with the grad block's amax outputs into amax, and each gradient rounded
 * to its storage type as the kernels store it. 0, or -1 with err. */
int chk_reference_backward(RefArgs *args, const BwdGraph *bg, const double *dout,
                           const ChkResult *fwd, RefTensor *grads, double *amax, StrBuf *err);
/* The relative L2 error a correct kernel stays under, by output dtype. */
double chk_tolerance(DType out_type);

/* A shape spec for ref_make_inputs naming only g's own symbols: batch,
 * heads, kv heads, query and key lengths (literal dims are skipped). */
void chk_shape_spec(const IrGraph *g, StrBuf *sb, int B, int H, int Hk, int Sq, int Skv);
/* The same for a graph with paged k and v, in pages of `page` keys (and
 * enough of them for Skv keys a sequence, three to spare); chk_shape_spec
 * pages by 16. */
void chk_paged_spec(const IrGraph *g, StrBuf *sb, int B, int H, int Hk, int Sq, int Skv,
                    int page);

#endif

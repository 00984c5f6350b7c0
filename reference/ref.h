/*
 * ref.h: the CPU reference, a library of its own (libattnref.a) that the
 * attnc command, the tests and the benchmarks link and the installed
 * libattn does not:
 *
 *   interp.c      evaluates an IR graph in double precision
 *   interp_bwd.c  its backward, from the derived backward graph
 *   philox.c      dropout's bits, the same as the kernels draw
 *   merge.c       partial results over disjoint key sets, merged
 *   parallel.c    large loops split by rows across threads
 *   ref_data.c    random inputs, summaries, comparisons
 *   check.c       runs a graph on the GPU on the reference's inputs
 *                 (check.h)
 *
 * It reads the compiler's IR (attnc.h) and evaluates each pointwise op
 * through the op table's CPU evaluation, the one the constant folder uses.
 */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include "attnc.h"

/* ---------------------------------------------------- interp.c: CPU ref */

/* Values of one graph's run-time arguments. Tensors are dense row-major in
 * their declared dimension order, with the actual sizes in shape (a declared
 * literal 1 broadcasts). Every number is held as a double. */
typedef struct RefTensor {
  int ndims;
  int64_t shape[IR_MAX_RANK];
  double *data;
} RefTensor;

typedef struct RefArgs {
  const IrGraph *g;
  RefTensor *tensors;     /* g->ntensors entries; outputs are filled in */
  double *scalars;        /* g->nscalars entries */
  /* Optional (NULL: every scalar has a value). ref_make_inputs sets
   * unset[k] for a scalar with no default; ref_set_scalars clears it;
   * ref_forward refuses to run while one is set. */
  bool *scalar_unset;
} RefArgs;

/* Binds the dim symbols from the input tensors' shapes (each from the
 * first tensor naming it), checks them, evaluates the graph and
 * allocates+fills every output tensor's data (free with free(); a previous
 * output data pointer is freed first, so it must come from malloc), shaped
 * from the bound dims. Arithmetic is in double and outputs are not rounded
 * to their dtype; what the device also sees rounded is rounded here too:
 * float constants and scalars to their declared type (0.35 is 0.35f) and
 * explicit casts (bf16(x)). Integer ops follow C on int32 (wrapping) or
 * uint64. Returns 0, or -1 with a message in err (prefixed with
 * "file:line:col: " where a node is to blame). */
int ref_forward(RefArgs *args, StrBuf *err);
/* Packed sequences (docs/language.md "Packed sequences"): for each of the
 * B sequences, q's and k's first rows and lengths into seq[4b .. 4b + 3]
 * (q0, lq, k0, lk), from their offsets clamped into the tensors as the
 * kernels read them; the longest of each into *max_q and *max_k. */
void ref_seq_table(const RefArgs *args, int64_t B, int64_t *seq, int64_t *max_q, int64_t *max_k);
/* Appends "file:line:col: message" (the location when a node is to blame,
 * on a new line after earlier messages) to err; returns -1. */
int ref_verror(StrBuf *err, const IrNode *n, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* ------------------------------------------- parallel.c: rows on threads */

/* fn(arg, lo, hi) over rows [lo, hi) covering [0, n), on up to
 * ref_threads() threads (fewer when n rows of work_per_row multiply-adds
 * are too little to pay for them). fn must write disjoint outputs per
 * row; the results are then the same bits as on one thread. */
typedef void (*RefRowsFn)(void *arg, int64_t lo, int64_t hi);
void ref_parallel_rows(int64_t n, double work_per_row, RefRowsFn fn, void *arg);
/* ATTN_REF_THREADS, else the online CPUs; 1 to 64. */
int ref_threads(void);
/* out[j] = sum over d < D of x[d] * y[j * ystep + d] for j < n, each
 * summed over d in order (the same bits as one dot product at a time),
 * four rows of y at a time with x read once for them: the q k^T rows of
 * both references and the backward's dO V^T. */
void ref_dots(const double *x, const double *y, int64_t ystep, int64_t n, int64_t D, double *out);
/* out[i][d] = sum over j < Skv of p[i * pst0 + j * pst1] * v[j * vstep + d]
 * for rows i < rows and d < Dv (out dense, Dv a row), rows on threads,
 * each element summed over j in order: the forward's p @ v and the
 * backward's O recomputed. */
void ref_pv(const double *p, int64_t pst0, int64_t pst1, const double *v, int64_t vstep,
            int64_t rows, int64_t Skv, int64_t Dv, double *out);

/* ------------------------------------------------- ref_data.c: test data */

/* splitmix64: the same (seed, stream) gives the same numbers everywhere. */
typedef struct RefRng {
  uint64_t state;
} RefRng;
RefRng ref_rng(uint64_t seed, uint64_t stream);
uint64_t ref_rng_next(RefRng *r);
double ref_rng_uniform(RefRng *r); /* [0, 1), 53 random bits */
double ref_rng_normal(RefRng *r);  /* N(0, 1), Box-Muller */

int64_t ref_numel(const RefTensor *t);

/* Fills args (args->g set, everything else zero) with random inputs for
 * g. shape_spec binds dim symbols, "B=2,H=4,Hk=2,Sq=100,Skv=130"; "S=N"
 * binds both q's and k's sequence dims (unless a symbol is named S).
 * Unset dims default by role: batch (q dim 1) 2, heads (q dim 2) 4, kv
 * heads (k dim 2) = heads, sequence dims 128, any other symbol 64. Float
 * tensors get N(0,1) rounded to their dtype; i32/u64 tensors uniform
 * integers in [0, max(Sq, Skv)]; bool tensors fair coin flips. Each tensor
 * draws from its own stream, so adding a tensor leaves the others alone.
 * Scalars take their defaults. Returns 0 or -1 (err); call ref_args_free
 * in both cases. */
int ref_make_inputs(RefArgs *args, const char *shape_spec, uint64_t seed,
                    StrBuf *err);
/* "scale=0.125,window=256,causal=true": overrides scalar values. */
int ref_set_scalars(RefArgs *args, const char *spec, StrBuf *err);
void ref_args_free(RefArgs *args); /* frees every array, keeps args->g */

/* One line per output: name, dtype, shape, min, max, mean, rms (over the
 * finite values) and counts of -inf, +inf and NaN. */
void ref_summarize(StrBuf *out, const RefArgs *args);

/* got against want. Positions where both are finite feed max_abs and
 * rel_l2 = |got - want|_2 / |want|_2 (0 when both norms are 0, inf when
 * only want's is). A position where either is inf or NaN agrees only when
 * both are the same (-inf and -inf, NaN and NaN); other ones are counted
 * in nonfinite_mismatch. */
typedef struct RefCompare {
  double max_abs;
  size_t max_abs_at;
  double rel_l2;
  size_t nonfinite_mismatch;
  size_t first_nonfinite_mismatch; /* SIZE_MAX when there is none */
} RefCompare;
RefCompare ref_compare(const double *got, const double *want, size_t n);

/* ------------------------------------------------ philox.c: dropout bits */

/* Philox-4x32-10 (Salmon et al., SC'11), the same code the kernels run
 * (templates/philox.cuh). Dropout's byte for element (b, h, i, j) of a
 * graph with H query heads and Sq queries:
 *   key     = { lo32(seed), hi32(seed) }
 *   counter = { lo32(((j >> 4) << 2) | ((j >> 1) & 3)),
 *               lo32((b * H + h) * Sq + (i & ~9)), lo32(offset),
 *               hi32(offset) }
 *   word    = philox4x32_10(counter, key)[2 * ((i >> 3) & 1) +
 *                                         ((j >> 3) & 1)]
 *   byte    = (word >> 8 * (2 * (i & 1) + (j & 1))) & 0xff
 * (one call serves the 16 elements (i + di, j + dj), di, dj in {0, 1, 8,
 * 9}, of the group whose base has bits 0 and 3 clear), and the element is
 * kept iff byte >= philox_keep_threshold(rate) (the rate in 256ths);
 * kept values scale by philox_kept_scale of it, 256 / (256 - threshold),
 * so the expectation is exact. */
void philox_4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                    uint32_t out[4]);
uint32_t philox_dropout_byte(uint64_t seed, uint64_t offset, int64_t b,
                             int64_t h, int64_t i, int64_t j, int64_t H,
                             int64_t Sq);
/* The f32 rate in 256ths, nearest, at least 1 for a positive rate: 0
 * (rate <= 0 or NaN: all kept) to 256 (rate >= 1: none kept). */
uint32_t philox_keep_threshold(double rate);
/* 256 / (256 - keep_from); 0 when nothing is kept. */
double philox_kept_scale(uint32_t keep_from);

/* ------------------------------------------ interp_bwd.c: CPU backward */

/* ---------------------------------------------- merge.c: partial results */

/* n partial results of attention over disjoint key sets, each rows x cols
 * of O (normalized within its part) with its rows' logsumexp, merged into
 * the result over their union: lse = log(sum_s exp(lse_s)), O = sum_s
 * exp(lse_s - lse) O_s. A row whose every lse_s is -inf (no key kept in any
 * part) gets lse -inf and O 0. Split-KV decode merges its partials so, and
 * context parallelism its shards (docs/language.md "Positions"). */
void ref_merge_partials(int n, int64_t rows, int64_t cols, const double *const *o,
                        const double *const *lse, double *o_out, double *lse_out);

/* The backward in double. args holds the forward's inputs and scalars (as
 * for ref_forward; outputs are not read: P and O are recomputed in
 * double). dout is dO, dense [B, H, Sq, Dv]. For every tensor t declared
 * with grad, grads[t] gets t's shape and a malloc'ed data array of its
 * gradient (a previous data pointer is freed first); other entries are
 * left alone. grads has g->ntensors entries. GQA: dK and dV sum over the
 * query heads of a group; a broadcast (literal 1) dimension sums. Returns
 * 0, or -1 with a message in err. */
int ref_backward(RefArgs *args, const BwdGraph *bg, const double *dout,
                 RefTensor *grads, StrBuf *err);
/* The same with each row's lse [B, H, Sq] and O [B, H, Sq, Dv] given
 * (dense graphs) instead of recomputed from args: P = exp(s - lse) and
 * delta = rowsum(dO * O). With a shard's keys and the whole's lse and O,
 * that is the shard's part of the whole's gradient: dq summed over the
 * key shards, dk and dv over the query shards, give the whole's (context
 * parallelism's backward; tests/unit/test_shards.c). */
int ref_backward_given(RefArgs *args, const BwdGraph *bg, const double *dout, const double *lse,
                       const double *o, RefTensor *grads, StrBuf *err);
/* Either of the above (lse and o NULL: recomputed), and the grad block's
 * amax outputs into amax[0 .. bg->gb->namax) (NULL: not computed). With a
 * grad block (docs/language.md "FP8 gradients"), dout holds the incoming
 * gradient as stored and the block gives its value; dS is the block's
 * before the products; grads hold each gradient as the block stores it
 * (its value: scaled and, where the block says, rounded, but not rounded
 * to its storage type, as ref_forward leaves outputs); P is rounded for dV
 * as p @ v reads it, from the normalized P. */
int ref_backward_full(RefArgs *args, const BwdGraph *bg, const double *dout, const double *lse,
                      const double *o, RefTensor *grads, double *amax, StrBuf *err);

#endif

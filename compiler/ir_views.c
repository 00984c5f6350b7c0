/*
 * ir_views.c: the tensor views of the IR builder (ir_build.c): paged KV
 * caches (paged, paged_hnd: a cache and its page table), packed sequences
 * (packed: a tensor and its sequence offsets), and the inputs a matmul
 * reads whole. Each marks the input tensor it views and refuses, with a
 * located error, a tensor viewed two ways.
 */
#include <string.h>

#include "ir_build.h"

/* An input named by e (an AST_NAME), or NULL after reporting why not:
 * role says what needs it ("the cache of paged(...)"). */
static Binding *named_input(Builder *b, const AstExpr *e, const char *role) {
  if (e->kind == AST_ERROR) {
    b->incomplete = true;
    return NULL;
  }
  Binding *x = e->kind == AST_NAME ? ib_lookup(b, e->name) : NULL;
  if (x && x->kind == BIND_INPUT) return x;
  if (x && x->kind == BIND_LOCAL && !x->node && !x->view) return NULL; /* poisoned */
  if (e->kind == AST_NAME && !x && !ib_index_dom(e->name) && ib_find_dim(b->g, e->name) < 0 &&
      strcmp(e->name, "inf"))
    diag_error(b->d, e->loc, "unknown name '%s'", e->name);
  else
    diag_error(b->d, e->loc, "the %s must be an input tensor, named whole", role);
  return NULL;
}

/* A view's tensor of the wrong rank or type: what it must be (want),
 * what it is, and where it was declared. */
static void refuse_view_tensor(Builder *b, Loc loc, const IrTensor *t, const char *want) {
  diag_error(b->d, loc, "%s; '%s' is %s with %d dimension%s", want, t->name,
             dtype_name(t->type), t->ndims, t->ndims == 1 ? "" : "s");
  diag_note(b->d, t->loc, "'%s' declared here", t->name);
}

/* A tensor a matmul already reads whole cannot also be viewed (as). */
static bool refuse_if_read_whole(Builder *b, Loc loc, const Binding *c, const char *as) {
  if (!c->whole) return false;
  diag_error(b->d, loc, "'%s' is read whole as a dense tensor, so it cannot also be %s",
             c->name, as);
  diag_note(b->d, c->whole_loc, "read whole here");
  return true;
}

/* paged(cache, table) or paged_hnd(cache, table): the cache's tensor
 * index, marked paged, or -1 after an error. A cache is paged one way:
 * by one table, in one layout, and never also read whole. */
static int lower_paged(Builder *b, const AstExpr *e) {
  const bool hnd = !strcmp(e->name, "paged_hnd");
  if (e->nargs != 2) {
    diag_error(b->d, e->loc, "'%s' takes 2 arguments (the cache and its page table), got %d",
               e->name, e->nargs);
    return -1;
  }
  Binding *c = named_input(b, e->args[0], "cache of a paged view");
  Binding *tb = named_input(b, e->args[1], "page table of a paged view");
  if (!c || !tb) return -1;
  IrTensor *t = &b->inputs[c->ref];
  const IrTensor *table = &b->inputs[tb->ref];
  if (t->ndims != 4 || !dtype_is_float(t->type)) {
    refuse_view_tensor(b, e->args[0]->loc, t,
                       hnd ? "a paged cache is a 4-d float tensor [pages, heads, page size, "
                             "head dimension]"
                           : "a paged cache is a 4-d float tensor [pages, page size, heads, "
                             "head dimension]");
    return -1;
  }
  if (table->ndims != 2 || table->type != DT_I32) {
    refuse_view_tensor(b, e->args[1]->loc, table,
                       "a page table is an i32 tensor [batch, pages per sequence]");
    return -1;
  }
  if (refuse_if_read_whole(b, e->args[0]->loc, c, "a paged cache")) return -1;
  if (t->paged && (t->page_table != tb->ref || t->paged_hnd != hnd)) {
    diag_error(b->d, e->loc, "'%s' is already paged %s", t->name,
               t->page_table != tb->ref ? "by another page table" : "in the other layout");
    return -1;
  }
  if (t->packed) {
    diag_error(b->d, e->loc, "'%s' is already a packed tensor", t->name);
    return -1;
  }
  t->paged = true;
  t->paged_hnd = hnd;
  t->page_table = tb->ref;
  return c->ref;
}

/* packed(x, offsets): x [Tokens, Heads, D] holding B sequences one after
 * another, sequence b at rows offsets[b] .. offsets[b + 1] - 1 of an i32
 * [B + 1] offsets tensor (FlashAttention's cu_seqlens). The tensor's
 * index, marked packed, or -1 after an error. */
static int lower_packed(Builder *b, const AstExpr *e) {
  if (e->nargs != 2) {
    diag_error(b->d, e->loc, "'packed' takes 2 arguments (the tensor and its sequence "
               "offsets), got %d", e->nargs);
    return -1;
  }
  Binding *c = named_input(b, e->args[0], "tensor of a packed view");
  Binding *ob = named_input(b, e->args[1], "sequence offsets of a packed view");
  if (!c || !ob) return -1;
  IrTensor *t = &b->inputs[c->ref];
  const IrTensor *off = &b->inputs[ob->ref];
  if (t->ndims != 3 || !dtype_is_float(t->type)) {
    refuse_view_tensor(b, e->args[0]->loc, t,
                       "a packed tensor is a 3-d float tensor [tokens, heads, head dimension]");
    return -1;
  }
  if (off->ndims != 1 || off->type != DT_I32) {
    refuse_view_tensor(b, e->args[1]->loc, off, "sequence offsets are an i32 tensor [batch + 1]");
    return -1;
  }
  if (refuse_if_read_whole(b, e->args[0]->loc, c, "packed")) return -1;
  if (t->paged) {
    diag_error(b->d, e->loc, "'%s' is already a paged cache", t->name);
    return -1;
  }
  if (t->packed && t->seq_offsets != ob->ref) {
    diag_error(b->d, e->loc, "'%s' is already packed by other offsets", t->name);
    return -1;
  }
  t->packed = true;
  t->seq_offsets = ob->ref;
  return c->ref;
}

/* A view named by a call (paged, paged_hnd, packed): its tensor's index,
 * or -1 after an error. */
int ib_lower_view(Builder *b, const AstExpr *e) {
  return !strcmp(e->name, "packed") ? lower_packed(b, e) : lower_paged(b, e);
}

/* The tensor index of a 4-d input named whole as a matmul operand (or a
 * packed view of one, or for k and v a paged view), or -1 after an error. role: "left
 * operand of q @ k^T" and so on. */
int ib_whole_input(Builder *b, const AstExpr *e, const char *role, bool view_ok) {
  int ref = -1;
  const bool inline_view = e->kind == AST_CALL && ir_find_fn(e->name) &&
                           ir_find_fn(e->name)->kind == FN_PAGED;
  Binding *x = e->kind == AST_NAME ? ib_lookup(b, e->name) : NULL;
  if (inline_view || (x && x->kind == BIND_LOCAL && x->view)) {
    ref = inline_view ? ib_lower_view(b, e) : x->view - 1;
    if (ref >= 0 && !view_ok && b->inputs[ref].paged) {
      diag_error(b->d, e->loc, "the %s cannot be a paged view: only k and v are paged", role);
      return -1;
    }
    return ref;
  }
  if (!(x = named_input(b, e, role))) return -1;
  ref = x->ref;
  const IrTensor *t = &b->inputs[ref];
  if (t->paged) {
    diag_error(b->d, e->loc, "'%s' is a paged cache; read it through paged(%s, %s)", t->name,
               t->name, b->inputs[t->page_table].name);
    return -1;
  }
  if (t->packed) {
    diag_error(b->d, e->loc, "'%s' is a packed tensor; read it through packed(%s, %s)", t->name,
               t->name, b->inputs[t->seq_offsets].name);
    return -1;
  }
  if (t->ndims != 4) {
    diag_error(b->d, e->loc, "'%s' has %d dimension%s; the %s needs 4 "
               "[batch, heads, positions, head dimension]", t->name, t->ndims,
               t->ndims == 1 ? "" : "s", role);
    diag_note(b->d, t->loc, "'%s' declared here", t->name);
    return -1;
  }
  if (!dtype_is_float(t->type)) {
    diag_error(b->d, e->loc, "the %s must be a float tensor; '%s' is %s", role,
               t->name, dtype_name(t->type));
    return -1;
  }
  if (!x->whole) x->whole_loc = e->loc;
  x->whole = true;
  return ref;
}

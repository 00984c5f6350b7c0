/* mem.c: every allocation of libattn, and what happens when one fails.
 *
 * libattn must never abort, exit or print (attn.h), out of memory
 * included. Two kinds of code allocate:
 *
 *  - the runtime (runtime/) checks each allocation: mem_alloc and friends
 *    return NULL, and a string buffer that cannot grow turns empty and
 *    stays so (StrBuf.failed); either way the thread's failure flag is
 *    set, which the public call that caused it turns into
 *    ATTN_ERROR_OUT_OF_MEMORY and a sticky state on its context
 *    (runtime/api.c, rt_end);
 *  - the compiler's passes (front end, match, plan, emit) allocate from
 *    arenas and string buffers without checking: they run inside a scope
 *    (mem_scoped), and a failed allocation or a broken invariant (die)
 *    unwinds to it with longjmp. The scope frees every block allocated
 *    under it that is still live, so nothing leaks, and reports out of
 *    memory or the invariant's message. Those passes hold no other
 *    resource (no file, lock or device memory), so unwinding them is safe.
 *
 * Each block carries a header linking it into its owner scope's list; a
 * block allocated outside any scope, or whose scope completed, belongs to
 * none (a completed scope hands its blocks to the enclosing one). Growing
 * a block keeps its owner, and an arena's chunks take the arena's owner
 * (mem_alloc_like), so memory made before a scope is never freed by it.
 *
 * Tests make the n-th allocation from now fail (mem_fail_nth) to prove
 * that every public call survives every failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

typedef struct MemScope MemScope;

typedef struct MemHdr {
  struct MemHdr *prev, *next; /* in owner's list; both NULL without one */
  MemScope *owner;
  size_t size;
} MemHdr;

struct MemScope {
  jmp_buf unwind;
  MemHdr blocks; /* sentinel of the list of blocks it owns */
  int status;    /* MEM_OOM or MEM_INTERNAL once unwinding */
  char msg[512];
};

#define MEM_MAX_DEPTH 8
static _Thread_local MemScope mem_scopes[MEM_MAX_DEPTH];
static _Thread_local int mem_depth;
static _Thread_local bool mem_failed;      /* since the last mem_take_failure */
static _Thread_local long mem_countdown;   /* > 0: the allocation that makes it 0 fails */
static _Thread_local long mem_count;       /* allocations so far */

static MemScope *mem_top(void) { return mem_depth > 0 ? &mem_scopes[mem_depth - 1] : NULL; }

static void mem_link(MemHdr *h, MemScope *owner) {
  h->owner = owner;
  if (!owner) {
    h->prev = h->next = NULL;
    return;
  }
  h->next = owner->blocks.next;
  h->prev = &owner->blocks;
  owner->blocks.next->prev = h;
  owner->blocks.next = h;
}

static void mem_unlink(MemHdr *h) {
  if (!h->owner) return;
  h->prev->next = h->next;
  h->next->prev = h->prev;
  h->prev = h->next = NULL;
}

void mem_fail_nth(long n) { mem_countdown = n > 0 ? n : 0; }
bool mem_fail_pending(void) { return mem_countdown > 0; }
long mem_allocations(void) { return mem_count; }

bool mem_take_failure(void) {
  bool f = mem_failed;
  mem_failed = false;
  return f;
}

bool mem_in_scope(void) { return mem_depth > 0; }

/* One allocation's bookkeeping: counted, and failed when the test asks. */
static bool mem_refused(void) {
  mem_count++;
  if (mem_countdown > 0 && --mem_countdown == 0) return true;
  return false;
}

static void *mem_alloc_owned(size_t n, MemScope *owner) {
  if (mem_refused() || n > SIZE_MAX - sizeof(MemHdr)) {
    mem_failed = true;
    return NULL;
  }
  MemHdr *h = malloc(sizeof *h + n);
  if (!h) {
    mem_failed = true;
    return NULL;
  }
  h->size = n;
  mem_link(h, owner);
  return h + 1;
}

void *mem_alloc(size_t n) { return mem_alloc_owned(n, mem_top()); }

void *mem_alloc_like(const void *sibling, size_t n) {
  return mem_alloc_owned(n, sibling ? ((const MemHdr *)sibling - 1)->owner : mem_top());
}

void *mem_calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) {
    mem_failed = true;
    return NULL;
  }
  void *p = mem_alloc(n * size);
  if (p) memset(p, 0, n * size);
  return p;
}

void *mem_realloc(void *p, size_t n) {
  if (!p) return mem_alloc(n);
  MemHdr *h = (MemHdr *)p - 1;
  if (mem_refused() || n > SIZE_MAX - sizeof(MemHdr)) {
    mem_failed = true;
    return NULL;
  }
  MemScope *owner = h->owner;
  mem_unlink(h);
  MemHdr *g = realloc(h, sizeof *g + n);
  if (!g) {
    mem_link(h, owner); /* the old block is still there */
    mem_failed = true;
    return NULL;
  }
  g->size = n;
  mem_link(g, owner);
  return g + 1;
}

void mem_free(void *p) {
  if (!p) return;
  MemHdr *h = (MemHdr *)p - 1;
  mem_unlink(h);
  free(h);
}

char *mem_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = mem_alloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* Unwinds to the innermost scope. Outside any scope only library code
 * that the public API never runs unscoped can get here (the passes are
 * always scoped): a trap, which is no import and no exit path. */
static _Noreturn void mem_unwind(int status) {
  MemScope *s = mem_top();
  mem_failed = mem_failed || status == MEM_OOM;
  if (!s) __builtin_trap();
  s->status = status;
  longjmp(s->unwind, 1);
}

_Noreturn void mem_oom(void) {
  MemScope *s = mem_top();
  if (s) snprintf(s->msg, sizeof s->msg, "out of memory");
  mem_unwind(MEM_OOM);
}

void *mem_must(void *p) {
  if (!p) mem_oom();
  return p;
}

_Noreturn void die_at(const char *file, int line, const char *fmt, ...) {
  MemScope *s = mem_top();
  if (s) {
    int n = snprintf(s->msg, sizeof s->msg, "internal error at %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof s->msg) vsnprintf(s->msg + n, sizeof s->msg - (size_t)n, fmt, ap);
    va_end(ap);
  }
  mem_unwind(MEM_INTERNAL);
}

int mem_scoped(void (*fn)(void *), void *arg, char *msg, size_t cap) {
  if (mem_depth == MEM_MAX_DEPTH) {
    if (msg && cap) snprintf(msg, cap, "internal error: compiler passes nested too deeply");
    return MEM_INTERNAL;
  }
  MemScope *s = &mem_scopes[mem_depth++];
  s->blocks.next = s->blocks.prev = &s->blocks;
  s->status = 0;
  s->msg[0] = '\0';
  if (setjmp(s->unwind)) {
    /* Unwound: free what the pass left behind, report why. The scope
     * lives in thread storage, not this frame, so it is intact here. */
    s = &mem_scopes[mem_depth - 1];
    while (s->blocks.next != &s->blocks) {
      MemHdr *h = s->blocks.next;
      mem_unlink(h);
      free(h);
    }
    mem_depth--;
    if (msg && cap) snprintf(msg, cap, "%s", s->msg);
    return s->status;
  }
  fn(arg);
  /* Done: its blocks now belong to the enclosing scope, or to none. */
  mem_depth--;
  MemScope *parent = mem_top();
  while (s->blocks.next != &s->blocks) {
    MemHdr *h = s->blocks.next;
    mem_unlink(h);
    mem_link(h, parent);
  }
  if (msg && cap) msg[0] = '\0';
  return 0;
}

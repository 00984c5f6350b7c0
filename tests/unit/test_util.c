/* Unit tests for util.c: the arena, StrBuf and die(). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "attnc.h"

Test(util, arena_alloc_is_zeroed_and_aligned) {
  Arena *a = arena_new();
  for (size_t n = 1; n < 3000; n += 37) {
    unsigned char *p = arena_alloc(a, n);
    cr_assert_eq((uintptr_t)p % 16, 0, "size %zu misaligned", n);
    for (size_t i = 0; i < n; i++)
      cr_assert_eq(p[i], 0);
    memset(p, 0xab, n); /* must not disturb other blocks */
  }
  arena_free(a);
}

Test(util, arena_blocks_do_not_overlap) {
  Arena *a = arena_new();
  enum { N = 5000 };
  int *blocks[N];
  for (int i = 0; i < N; i++) {
    blocks[i] = arena_alloc(a, sizeof(int) * (size_t)(1 + i % 7));
    blocks[i][0] = i;
  }
  for (int i = 0; i < N; i++)
    cr_assert_eq(blocks[i][0], i);
  arena_free(a);
}

Test(util, arena_big_allocations) {
  Arena *a = arena_new();
  char *small = arena_alloc(a, 16);
  char *big = arena_alloc(a, 10 * 1024 * 1024);
  char *small2 = arena_alloc(a, 16);
  big[10 * 1024 * 1024 - 1] = 'x';
  cr_assert_eq((uintptr_t)big % 16, 0);
  /* the current chunk keeps being used after a big block */
  cr_assert_eq(small2, small + 16);
  arena_free(a);
}

Test(util, arena_zero_size_and_free_null) {
  Arena *a = arena_new();
  void *p = arena_alloc(a, 0);
  void *q = arena_alloc(a, 0);
  cr_assert_neq(p, q);
  arena_free(a);
  arena_free(NULL);
}

Test(util, arena_strings) {
  Arena *a = arena_new();
  cr_assert_str_eq(arena_strdup(a, "hello"), "hello");
  cr_assert_str_eq(arena_strndup(a, "hello", 3), "hel");
  const char with_nul[] = {'a', '\0', 'b'};
  char *s = arena_strndup(a, with_nul, 3);
  cr_assert_eq(memcmp(s, with_nul, 3), 0);
  cr_assert_eq(s[3], '\0');
  cr_assert_str_eq(arena_printf(a, "%s=%d", "x", 42), "x=42");
  char *long_s = arena_printf(a, "%5000d", 7);
  cr_assert_eq(strlen(long_s), 5000);
  cr_assert_eq(long_s[4999], '7');
  arena_free(a);
}

Test(util, strbuf_grows_and_terminates) {
  StrBuf sb = {0};
  for (int i = 0; i < 10000; i++)
    sb_putc(&sb, (char)('a' + i % 26));
  cr_assert_eq(sb.len, 10000);
  cr_assert_eq(sb.data[10000], '\0');
  cr_assert_eq(sb.data[27], 'b');
  cr_assert_geq(sb.cap, sb.len + 1);
  sb_free(&sb);
  cr_assert_null(sb.data);
  cr_assert_eq(sb.len, 0);
}

Test(util, strbuf_printf_and_write) {
  StrBuf sb = {0};
  sb_puts(&sb, "x");
  sb_printf(&sb, "%d-%s", 12, "ab");
  sb_write(&sb, "zzz", 2);
  sb_write(&sb, "", 0);
  cr_assert_str_eq(sb.data, "x12-abzz");
  cr_assert_eq(sb.len, 8);
  sb_printf(&sb, "%3000s|", "");
  cr_assert_eq(sb.len, 8 + 3001);
  cr_assert_eq(sb.data[sb.len - 1], '|');
  sb_free(&sb);
}

Test(util, strbuf_keeps_nul_bytes) {
  StrBuf sb = {0};
  sb_write(&sb, "a\0b", 3);
  cr_assert_eq(sb.len, 3);
  cr_assert_eq(sb.data[1], '\0');
  cr_assert_eq(sb.data[2], 'b');
  sb_free(&sb);
}

/* mem.c's scopes: die() and running out of memory inside a pass unwind
 * to its scope, which frees what the pass allocated (ASan's leak check
 * watches) and reports why; nothing aborts. */
static void broken_pass(void *arg) {
  (void)arg;
  StrBuf sb = {0};
  sb_puts(&sb, "allocated inside the pass, freed by its scope");
  Arena *a = arena_new();
  arena_alloc(a, 100000);
  die("broken invariant %d", 7);
}

Test(util, die_unwinds_to_the_scope) {
  char msg[512];
  cr_assert_eq(mem_scoped(broken_pass, NULL, msg, sizeof msg), MEM_INTERNAL);
  cr_assert(strstr(msg, "internal error at tests/unit/test_util.c:"), "%s", msg);
  cr_assert(strstr(msg, "broken invariant 7"), "%s", msg);
  cr_assert(!mem_in_scope());
}

static void hungry_pass(void *arg) {
  Arena *outer = arg;
  arena_alloc(outer, 100); /* a chunk of the caller's arena survives */
  mem_fail_nth(3);
  for (int k = 0; k < 10; k++) mem_must(mem_alloc(64));
}

Test(util, out_of_memory_unwinds_and_is_reported) {
  Arena *outer = arena_new();
  char msg[512];
  cr_assert_eq(mem_scoped(hungry_pass, outer, msg, sizeof msg), MEM_OOM);
  cr_assert_str_eq(msg, "out of memory");
  cr_assert(mem_take_failure());
  cr_assert(!mem_take_failure(), "the flag is taken once");
  arena_alloc(outer, 200000); /* the arena made before the scope still works */
  arena_free(outer);
}

static void good_pass(void *arg) { *(char **)arg = mem_strdup("kept"); }

Test(util, a_completed_scope_keeps_its_blocks) {
  char *kept = NULL, msg[64];
  cr_assert_eq(mem_scoped(good_pass, &kept, msg, sizeof msg), 0);
  cr_assert_str_eq(kept, "kept");
  mem_free(kept);
}

Test(util, a_string_buffer_that_cannot_grow_outside_a_scope_empties) {
  StrBuf sb = {0};
  sb_puts(&sb, "abc");
  mem_fail_nth(1);
  sb_printf(&sb, "%4000s", "x"); /* needs to grow: refused */
  cr_assert(sb.failed);
  cr_assert_eq(sb.len, 0);
  cr_assert_str_eq(sb.data, "");
  sb_puts(&sb, "later writes are ignored");
  cr_assert_eq(sb.len, 0);
  cr_assert(mem_take_failure());
  sb_free(&sb);
  cr_assert(!sb.failed);
}

Test(types, dtype_facts) {
  cr_assert_str_eq(dtype_name(DT_BF16), "bf16");
  cr_assert_str_eq(dtype_name(DT_E4M3), "e4m3");
  cr_assert_str_eq(dtype_name(DT_NONE), "?");
  cr_assert_eq(dtype_size(DT_F32), 4);
  cr_assert_eq(dtype_size(DT_E5M2), 1);
  cr_assert_eq(dtype_size(DT_U64), 8);
  cr_assert(dtype_is_float(DT_E4M3));
  cr_assert(dtype_is_float(DT_F16));
  cr_assert_not(dtype_is_float(DT_I32));
  cr_assert_not(dtype_is_float(DT_BOOL));
  cr_assert(dtype_is_int(DT_U64));
  cr_assert_not(dtype_is_int(DT_BOOL));
  cr_assert_not(dtype_is_int(DT_F32));
}

Test(types, binop_spellings) {
  cr_assert_str_eq(binop_spelling(BIN_MATMUL), "@");
  cr_assert_str_eq(binop_spelling(BIN_LE), "<=");
  cr_assert_str_eq(binop_spelling(BIN_OR), "||");
  cr_assert_str_eq(binop_spelling(BIN_MOD), "%");
}

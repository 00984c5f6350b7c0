/* util.c: the arena every compiler pass allocates from and a growable
 * string buffer, both on mem.c. Inside a pass's scope running out of
 * memory unwinds it (mem_oom); outside one (the runtime's own buffers) a
 * string buffer that cannot grow empties and stays empty, and the failure
 * is reported by the public call (mem_take_failure). */
#include "attnc.h"

#include <stdio.h>
#include <string.h>

/* Chunks are zeroed by calloc, so arena_alloc never clears memory itself.
 * Allocations larger than a quarter chunk get a chunk of their own, which
 * keeps the waste at the end of a normal chunk small. */
#define ARENA_CHUNK (64 * 1024)
#define ARENA_ALIGN 16

typedef struct ArenaChunk {
  struct ArenaChunk *next;
  unsigned char *base; /* first aligned byte */
  size_t used, size;
} ArenaChunk;

struct Arena {
  ArenaChunk *head; /* the chunk being filled */
};

/* A chunk owned like the arena itself (mem_alloc_like): a pass's scope
 * never frees the chunks of an arena made before it. NULL when memory ran
 * out (the arena's callers unwind, or report it outside a scope). */
static ArenaChunk *arena_chunk_new(const Arena *a, size_t size) {
  if (size > SIZE_MAX - sizeof(ArenaChunk) - ARENA_ALIGN) return NULL;
  ArenaChunk *c = mem_alloc_like(a, sizeof(ArenaChunk) + ARENA_ALIGN + size);
  if (!c) return NULL;
  memset(c, 0, sizeof(ArenaChunk) + ARENA_ALIGN + size);
  uintptr_t p = (uintptr_t)(c + 1);
  p = (p + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1);
  c->base = (unsigned char *)p;
  c->size = size;
  return c;
}

Arena *arena_new(void) {
  Arena *a = mem_calloc(1, sizeof *a);
  if (a && !(a->head = arena_chunk_new(a, ARENA_CHUNK))) {
    mem_free(a);
    a = NULL;
  }
  if (!a && mem_in_scope()) mem_oom();
  return a;
}

void arena_free(Arena *a) {
  if (!a)
    return;
  ArenaChunk *c = a->head;
  while (c) {
    ArenaChunk *next = c->next;
    mem_free(c);
    c = next;
  }
  mem_free(a);
}

/* Outside a scope (the runtime reads plans in one too) there is no caller
 * that could handle NULL: running out there is a bug, caught by mem_oom. */
void *arena_alloc(Arena *a, size_t size) {
  if (size == 0)
    size = 1;
  if (size > SIZE_MAX - ARENA_ALIGN)
    mem_oom();
  size = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  ArenaChunk *c = a->head;
  if (c->size - c->used >= size) {
    void *p = c->base + c->used;
    c->used += size;
    return p;
  }
  if (size > ARENA_CHUNK / 4) {
    /* A big block: give it its own chunk behind the current one. */
    ArenaChunk *big = mem_must(arena_chunk_new(a, size));
    big->used = size;
    big->next = c->next;
    c->next = big;
    return big->base;
  }
  ArenaChunk *fresh = mem_must(arena_chunk_new(a, ARENA_CHUNK));
  fresh->next = c;
  a->head = fresh;
  fresh->used = size;
  return fresh->base;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *arena_strdup(Arena *a, const char *s) {
  return arena_strndup(a, s, strlen(s));
}

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    die("bad format string '%s'", fmt);
  char *p = arena_alloc(a, (size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}

/* Makes room for n more bytes plus the terminating NUL, doubling; false
 * (outside a scope) when it cannot: the buffer is then failed, empty. */
static bool sb_reserve(StrBuf *sb, size_t n) {
  if (sb->failed)
    return false;
  size_t need = sb->len + n + 1;
  if (n <= SIZE_MAX / 2 - sb->len && need <= sb->cap)
    return true;
  size_t cap = sb->cap ? sb->cap : 64;
  while (n <= SIZE_MAX / 2 - sb->len && cap < need)
    cap *= 2;
  char *p = n <= SIZE_MAX / 2 - sb->len ? mem_realloc(sb->data, cap) : NULL;
  if (!p) {
    if (mem_in_scope())
      mem_oom();
    sb->failed = true;
    sb->len = 0;
    if (sb->data)
      sb->data[0] = '\0';
    return false;
  }
  sb->data = p;
  sb->cap = cap;
  return true;
}

void sb_write(StrBuf *sb, const char *s, size_t n) {
  if (!sb_reserve(sb, n))
    return;
  if (n)
    memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

void sb_putc(StrBuf *sb, char c) { sb_write(sb, &c, 1); }

void sb_puts(StrBuf *sb, const char *s) { sb_write(sb, s, strlen(s)); }

/* The format attribute (absent from the header's declaration) lets
 * -Wformat-nonliteral see that fmt is checked at our callers. */
__attribute__((format(printf, 2, 0))) void sb_vprintf(StrBuf *sb,
                                                      const char *fmt,
                                                      va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n < 0)
    die("bad format string '%s'", fmt);
  if (sb_reserve(sb, (size_t)n)) {
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap2);
    sb->len += (size_t)n;
  }
  va_end(ap2);
}

void sb_printf(StrBuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(sb, fmt, ap);
  va_end(ap);
}

void sb_free(StrBuf *sb) {
  mem_free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
  sb->failed = false;
}

bool is_c_ident(const char *s) {
  if (!*s || (*s >= '0' && *s <= '9')) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_'))
      return false;
  return true;
}

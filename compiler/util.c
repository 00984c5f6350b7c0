/* util.c: the arena every front-end pass allocates from, a growable string
 * buffer, and die() for internal bugs. Nothing here ever sees user input
 * errors; running out of memory is treated as fatal. */
#include "attnc.h"

#include <stdlib.h>
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

static ArenaChunk *arena_chunk_new(size_t size) {
  if (size > SIZE_MAX - sizeof(ArenaChunk) - ARENA_ALIGN)
    die("arena allocation of %zu bytes is too large", size);
  ArenaChunk *c = calloc(1, sizeof(ArenaChunk) + ARENA_ALIGN + size);
  if (!c)
    die("out of memory (arena chunk of %zu bytes)", size);
  uintptr_t p = (uintptr_t)(c + 1);
  p = (p + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1);
  c->base = (unsigned char *)p;
  c->size = size;
  return c;
}

Arena *arena_new(void) {
  Arena *a = calloc(1, sizeof *a);
  if (!a)
    die("out of memory (arena)");
  a->head = arena_chunk_new(ARENA_CHUNK);
  return a;
}

void arena_free(Arena *a) {
  if (!a)
    return;
  ArenaChunk *c = a->head;
  while (c) {
    ArenaChunk *next = c->next;
    free(c);
    c = next;
  }
  free(a);
}

void *arena_alloc(Arena *a, size_t size) {
  if (size == 0)
    size = 1;
  if (size > SIZE_MAX - ARENA_ALIGN)
    die("arena allocation of %zu bytes is too large", size);
  size = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  ArenaChunk *c = a->head;
  if (c->size - c->used >= size) {
    void *p = c->base + c->used;
    c->used += size;
    return p;
  }
  if (size > ARENA_CHUNK / 4) {
    /* A big block: give it its own chunk behind the current one. */
    ArenaChunk *big = arena_chunk_new(size);
    big->used = size;
    big->next = c->next;
    c->next = big;
    return big->base;
  }
  ArenaChunk *fresh = arena_chunk_new(ARENA_CHUNK);
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

/* Makes room for n more bytes plus the terminating NUL, doubling. */
static void sb_reserve(StrBuf *sb, size_t n) {
  if (n > SIZE_MAX / 2 - sb->len)
    die("string buffer too large");
  size_t need = sb->len + n + 1;
  if (need <= sb->cap)
    return;
  size_t cap = sb->cap ? sb->cap : 64;
  while (cap < need)
    cap *= 2;
  char *p = realloc(sb->data, cap);
  if (!p)
    die("out of memory (string buffer of %zu bytes)", cap);
  sb->data = p;
  sb->cap = cap;
}

void sb_write(StrBuf *sb, const char *s, size_t n) {
  sb_reserve(sb, n);
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
  sb_reserve(sb, (size_t)n);
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  sb->len += (size_t)n;
}

void sb_printf(StrBuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(sb, fmt, ap);
  va_end(ap);
}

void sb_free(StrBuf *sb) {
  free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
}

_Noreturn void die_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "attnc: internal error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

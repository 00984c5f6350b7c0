/* source.c: turning a file or a string into a Source. The text is copied
 * into the arena and NUL-terminated; embedded NULs are kept (len is the real
 * length) so the scanner can report them rather than stop early. */
#include "attnc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

Source *source_from_string(Arena *a, const char *name, const char *text,
                           size_t len) {
  Source *s = arena_alloc(a, sizeof *s);
  s->name = arena_strdup(a, name ? name : "<string>");
  char *copy = arena_alloc(a, len + 1);
  if (len)
    memcpy(copy, text, len);
  copy[len] = '\0';
  s->text = copy;
  s->len = len;
  return s;
}

/* Reads everything from fd into a buffer; the size hint from fstat only
 * sets the first capacity, so pipes and growing files work. At most
 * SOURCE_MAX_BYTES (then EFBIG): /dev/zero or a runaway pipe is refused
 * instead of filling memory. NULL with errno (ENOMEM when memory ran out:
 * the fd is still open, so this returns rather than unwinding). */
static char *source_read_all(int fd, size_t hint, size_t *len_out) {
  if (hint > SOURCE_MAX_BYTES) hint = SOURCE_MAX_BYTES;
  size_t cap = hint + 1 > 4096 ? hint + 1 : 4096, len = 0;
  char *buf = mem_alloc(cap);
  if (!buf) {
    errno = ENOMEM;
    return NULL;
  }
  for (;;) {
    if (len > SOURCE_MAX_BYTES) {
      mem_free(buf);
      errno = EFBIG;
      return NULL;
    }
    if (len == cap) {
      cap *= 2;
      char *p = mem_realloc(buf, cap);
      if (!p) {
        mem_free(buf);
        errno = ENOMEM;
        return NULL;
      }
      buf = p;
    }
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int saved = errno;
      mem_free(buf);
      errno = saved;
      return NULL;
    }
    if (n == 0)
      break;
    len += (size_t)n;
  }
  *len_out = len;
  return buf;
}

Source *source_load(Arena *a, const char *path, Diag *d) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    diag_plain(d, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    close(fd);
    diag_plain(d, "cannot read %s: %s", path, strerror(err));
    return NULL;
  }
  size_t hint = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size : 0;
  size_t len = 0;
  char *buf = source_read_all(fd, hint, &len);
  int err = errno;
  close(fd);
  if (!buf && err == ENOMEM) mem_oom(); /* the fd is closed: unwind now */
  if (!buf && err == EFBIG) {
    diag_plain(d, "cannot read %s: it is larger than %d MiB, the most attnc reads as a source",
               path, SOURCE_MAX_BYTES >> 20);
    return NULL;
  }
  if (!buf) {
    diag_plain(d, "cannot read %s: %s", path, strerror(err));
    return NULL;
  }
  Source *s = source_from_string(a, path, buf, len);
  mem_free(buf);
  return s;
}

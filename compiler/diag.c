/* diag.c: located diagnostics in the gcc shape
 *
 *   file:3:9: error: unknown name 'x'
 *       3 |     s = x + 1;
 *         |         ^~~~
 *
 * Messages are appended to d->out; the caller decides where they go, so the
 * library itself never prints. After max_errors shown errors one line says
 * the run is stopping; later errors are still counted, never shown. */
#include "attnc.h"

#include <string.h>

#define DIAG_DEFAULT_MAX 20
#define DIAG_LONG_LINE 200 /* longer lines are echoed as a window */
#define DIAG_WINDOW 160
#define DIAG_WINDOW_LEAD 80 /* bytes shown before the column */

static int diag_cap(const Diag *d) {
  return d->max_errors > 0 ? d->max_errors : DIAG_DEFAULT_MAX;
}

/* Finds line `line` (1-based) of src: start offset and length without the
 * newline (and without a trailing '\r'). False past the end of the text. */
static bool diag_find_line(const Source *src, int line, size_t *start,
                           size_t *len) {
  const char *t = src->text, *end = src->text + src->len;
  for (int l = 1; l < line; l++) {
    const char *nl = memchr(t, '\n', (size_t)(end - t));
    if (!nl)
      return false;
    t = nl + 1;
  }
  const char *nl = memchr(t, '\n', (size_t)(end - t));
  size_t n = (size_t)((nl ? nl : end) - t);
  if (n > 0 && t[n - 1] == '\r')
    n--;
  *start = (size_t)(t - src->text);
  *len = n;
  return true;
}

static int diag_digits(int v) {
  int n = 1;
  while (v >= 10) {
    v /= 10;
    n++;
  }
  return n;
}

/* Echoes the source line and the caret line below it. */
static void diag_echo(StrBuf *out, Loc loc) {
  size_t start, n;
  if (!loc.src || loc.line < 1 ||
      !diag_find_line(loc.src, loc.line, &start, &n))
    return;
  const unsigned char *text = (const unsigned char *)loc.src->text + start;
  size_t col = loc.col > 0 ? (size_t)loc.col - 1 : 0; /* 0-based byte */
  size_t from = 0, to = n;
  if (n > DIAG_LONG_LINE) {
    size_t anchor = col < n ? col : n;
    from = anchor > DIAG_WINDOW_LEAD ? anchor - DIAG_WINDOW_LEAD : 0;
    to = from + DIAG_WINDOW < n ? from + DIAG_WINDOW : n;
    if (to - from < DIAG_WINDOW)
      from = to > DIAG_WINDOW ? to - DIAG_WINDOW : 0;
  }
  int width = diag_digits(loc.line);
  if (width < 5)
    width = 5;

  sb_printf(out, "%*d |", width, loc.line);
  if (to > from || from > 0)
    sb_putc(out, ' ');
  if (from > 0)
    sb_puts(out, "...");
  for (size_t i = from; i < to; i++) {
    unsigned char c = text[i];
    sb_putc(out, (c == '\t' || (c >= 0x20 && c < 0x7f)) ? (char)c : '?');
  }
  if (to < n)
    sb_puts(out, "...");
  sb_putc(out, '\n');

  sb_printf(out, "%*s | ", width, "");
  if (from > 0)
    sb_puts(out, "   ");
  for (size_t i = from; i < col; i++)
    sb_putc(out, i < n && text[i] == '\t' ? '\t' : ' ');
  sb_putc(out, '^');
  size_t tildes = loc.len > 1 ? (size_t)loc.len - 1 : 0;
  size_t room = col + 1 < to ? to - (col + 1) : 0;
  for (size_t i = 0; i < tildes && i < room; i++)
    sb_putc(out, '~');
  sb_putc(out, '\n');
}

__attribute__((format(printf, 4, 0))) static void
diag_emit(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap) {
  if (loc.src)
    sb_printf(&d->out, "%s:%d:%d: %s: ", loc.src->name, loc.line, loc.col,
              kind);
  else
    sb_printf(&d->out, "attnc: %s: ", kind);
  sb_vprintf(&d->out, fmt, ap);
  sb_putc(&d->out, '\n');
  diag_echo(&d->out, loc);
}

/* Counts an error; true when it is still to be shown. */
static bool diag_count(Diag *d) {
  d->nerrors++;
  int cap = diag_cap(d);
  if (d->nerrors == cap + 1)
    sb_puts(&d->out, "attnc: too many errors; stopping\n");
  return d->nerrors <= cap;
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...) {
  if (!diag_count(d))
    return;
  va_list ap;
  va_start(ap, fmt);
  diag_emit(d, loc, "error", fmt, ap);
  va_end(ap);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...) {
  if (d->nerrors > diag_cap(d))
    return; /* its error was not shown either */
  va_list ap;
  va_start(ap, fmt);
  diag_emit(d, loc, "note", fmt, ap);
  va_end(ap);
}

void diag_plain(Diag *d, const char *fmt, ...) {
  if (!diag_count(d))
    return;
  va_list ap;
  va_start(ap, fmt);
  Loc none = {0};
  diag_emit(d, none, "error", fmt, ap);
  va_end(ap);
}

void diag_free(Diag *d) {
  sb_free(&d->out);
  d->nerrors = 0;
}

/* Unit tests for diag.c and source.c: message shape, caret placement,
 * tabs, long lines, non-printable bytes and the error cap. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attnc.h"

static Arena *arena;
static Diag d;

static void setup(void) {
  arena = arena_new();
  memset(&d, 0, sizeof d);
}

static void teardown(void) {
  diag_free(&d);
  arena_free(arena);
}

static const Source *src(const char *text) {
  return source_from_string(arena, "t.attn", text, strlen(text));
}

static Loc at(const Source *s, int line, int col, int len) {
  return (Loc){s, line, col, len};
}

TestSuite(diag, .init = setup, .fini = teardown);

Test(diag, caret_under_the_column) {
  const Source *s = src("attention g {\n    s = x + 1;\n}\n");
  diag_error(&d, at(s, 2, 9, 1), "unknown name '%s'", "x");
  cr_assert_str_eq(d.out.data, "t.attn:2:9: error: unknown name 'x'\n"
                               "    2 |     s = x + 1;\n"
                               "      |         ^\n");
  cr_assert_eq(d.nerrors, 1);
}

Test(diag, underline_is_clipped_at_end_of_line) {
  const Source *s = src("ab cdef\nnext\n");
  diag_error(&d, at(s, 1, 4, 50), "m");
  cr_assert_str_eq(d.out.data, "t.attn:1:4: error: m\n"
                               "    1 | ab cdef\n"
                               "      |    ^~~~\n");
}

Test(diag, tabs_are_copied_so_the_caret_aligns) {
  const Source *s = src("\ts =\ta\t$ b;\n");
  diag_error(&d, at(s, 1, 8, 1), "m");
  cr_assert_str_eq(d.out.data, "t.attn:1:8: error: m\n"
                               "    1 | \ts =\ta\t$ b;\n"
                               "      | \t   \t \t^\n");
}

Test(diag, non_printable_bytes_become_question_marks) {
  const char text[] = "a \x01\x02\xff\0 b\n";
  const Source *s = source_from_string(arena, "t.attn", text, sizeof text - 1);
  diag_error(&d, at(s, 1, 3, 4), "stray");
  cr_assert_str_eq(d.out.data, "t.attn:1:3: error: stray\n"
                               "    1 | a ???? b\n"
                               "      |   ^~~~\n");
}

Test(diag, crlf_line_endings_are_not_echoed) {
  const Source *s = src("abc\r\ndef\r\n");
  diag_error(&d, at(s, 2, 2, 1), "m");
  cr_assert_str_eq(d.out.data, "t.attn:2:2: error: m\n"
                               "    2 | def\n"
                               "      |  ^\n");
}

Test(diag, wide_line_numbers_widen_the_gutter) {
  StrBuf text = {0};
  for (int i = 0; i < 123456; i++)
    sb_puts(&text, "x\n");
  const Source *s = source_from_string(arena, "t.attn", text.data, text.len);
  sb_free(&text);
  diag_error(&d, at(s, 123456, 1, 1), "m");
  cr_assert_str_eq(d.out.data, "t.attn:123456:1: error: m\n"
                               "123456 | x\n"
                               "       | ^\n");
}

Test(diag, long_lines_show_a_window) {
  char line[1001];
  memset(line, 'a', 1000);
  line[1000] = '\0';
  line[499] = 'X';
  const Source *s = src(line);
  diag_error(&d, at(s, 1, 500, 3), "m");
  /* 80 bytes before the column, 160 in all, "..." on both sides */
  char want[1024];
  snprintf(want, sizeof want,
           "t.attn:1:500: error: m\n"
           "    1 | ...%.80sX%.79s...\n"
           "      |    %80s^~~\n",
           line, line, "");
  cr_assert_str_eq(d.out.data, want);
}

Test(diag, long_line_window_at_the_start) {
  char line[301];
  memset(line, 'b', 300);
  line[300] = '\0';
  const Source *s = src(line);
  diag_error(&d, at(s, 1, 2, 1), "m");
  char want[1024];
  snprintf(want, sizeof want,
           "t.attn:1:2: error: m\n"
           "    1 | %.160s...\n"
           "      |  ^\n",
           line);
  cr_assert_str_eq(d.out.data, want);
}

Test(diag, column_past_the_end_of_line) {
  const Source *s = src("s = a");
  diag_error(&d, at(s, 1, 6, 1), "expected ';' after statement");
  cr_assert_str_eq(d.out.data,
                   "t.attn:1:6: error: expected ';' after statement\n"
                   "    1 | s = a\n"
                   "      |      ^\n");
}

Test(diag, notes_and_plain_errors) {
  const Source *s = src("(a\n");
  diag_error(&d, at(s, 1, 3, 1), "expected ')'");
  diag_note(&d, at(s, 1, 1, 1), "'(' opened here");
  diag_plain(&d, "cannot read %s: %s", "x.attn", "No such file or directory");
  cr_assert_str_eq(d.out.data, "t.attn:1:3: error: expected ')'\n"
                               "    1 | (a\n"
                               "      |   ^\n"
                               "t.attn:1:1: note: '(' opened here\n"
                               "    1 | (a\n"
                               "      | ^\n"
                               "attnc: error: cannot read x.attn: No such "
                               "file or directory\n");
  cr_assert_eq(d.nerrors, 2);
}

Test(diag, error_cap_stops_output_but_keeps_counting) {
  const Source *s = src("x\n");
  d.max_errors = 3;
  for (int i = 0; i < 10; i++) {
    diag_error(&d, at(s, 1, 1, 1), "e%d", i);
    diag_note(&d, at(s, 1, 1, 1), "n%d", i);
  }
  cr_assert_eq(d.nerrors, 10);
  cr_assert_not_null(strstr(d.out.data, "e2"));
  cr_assert_not_null(strstr(d.out.data, "n2"));
  cr_assert_null(strstr(d.out.data, "e3"));
  cr_assert_null(strstr(d.out.data, "n3"));
  const char *tail = "attnc: too many errors; stopping\n";
  size_t n = strlen(tail);
  cr_assert_str_eq(d.out.data + d.out.len - n, tail);
  cr_assert_eq(strstr(d.out.data, "too many"),
               strstr(d.out.data + d.out.len - n, "too many"));
}

Test(diag, default_cap_is_twenty) {
  const Source *s = src("x\n");
  for (int i = 0; i < 25; i++)
    diag_error(&d, at(s, 1, 1, 1), "error number %d", i);
  cr_assert_not_null(strstr(d.out.data, "error number 19\n"));
  cr_assert_null(strstr(d.out.data, "error number 20\n"));
  cr_assert_not_null(strstr(d.out.data, "too many errors"));
}

Test(diag, source_load_reads_nuls_and_reports_failures) {
  char path[] = "/tmp/attnc_test_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, "ab\0cd", 5), 5);
  close(fd);
  Source *s = source_load(arena, path, &d);
  cr_assert_not_null(s);
  cr_assert_eq(s->len, 5);
  cr_assert_eq(memcmp(s->text, "ab\0cd", 6), 0);
  cr_assert_str_eq(s->name, path);
  unlink(path);
  cr_assert_null(source_load(arena, path, &d));
  cr_assert_null(source_load(arena, "/tmp", &d));
  cr_assert_eq(d.nerrors, 2);
  char want[256];
  snprintf(want, sizeof want,
           "attnc: error: cannot read %s: No such file or directory\n"
           "attnc: error: cannot read /tmp: Is a directory\n",
           path);
  cr_assert_str_eq(d.out.data, want);
}

Test(diag, source_from_string_copies) {
  char buf[] = "abc";
  Source *s = source_from_string(arena, NULL, buf, 3);
  buf[0] = 'z';
  cr_assert_str_eq(s->text, "abc");
  cr_assert_str_eq(s->name, "<string>");
  Source *e = source_from_string(arena, "e", NULL, 0);
  cr_assert_eq(e->len, 0);
  cr_assert_str_eq(e->text, "");
}

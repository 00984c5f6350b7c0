/* test_cache.c: the cubin cache (runtime/cache.c): key stability, disk
 * round trips, atomic writes, corrupt entries, two processes racing for one
 * key, unusable directories; and one real NVRTC compile through it. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rt.h"

/* ------------------------------------------------------------- helpers */

static char root[256];

static int rm_one(const char *p, const struct stat *st, int flag,
                  struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  return remove(p);
}

static void make_root(void) {
  snprintf(root, sizeof root, "/tmp/attn-cache-test-XXXXXX");
  cr_assert_not_null(mkdtemp(root));
}

static void remove_root(void) {
  chmod(root, 0755);
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A stand-in for NVRTC: returns a fixed payload, counts its calls, and can
 * run a check while "compiling" (when no entry may be visible yet). */
typedef struct FakeCompiler {
  int calls;
  const char *payload;
  attn_status fail;
  const char *count_file; /* append a line per compile (across processes) */
  int sleep_ms;
  void (*during)(void);
  const char *meta; /* the entry's meta, or none */
} FakeCompiler;

static attn_status fake_compile(void *user, CacheBlob *out, StrBuf *err) {
  FakeCompiler *fc = user;
  fc->calls++;
  if (fc->during) fc->during();
  if (fc->count_file) {
    FILE *f = fopen(fc->count_file, "a");
    if (f) {
      fprintf(f, "compile %d\n", (int)getpid());
      fclose(f);
    }
  }
  if (fc->sleep_ms) usleep((useconds_t)fc->sleep_ms * 1000);
  if (fc->fail) {
    sb_puts(err, "fake compile failed");
    return fc->fail;
  }
  const char *p = fc->payload ? fc->payload : "\x7f" "ELF fake cubin";
  out->cubin_len = strlen(p);
  out->cubin = mem_alloc(out->cubin_len);
  memcpy(out->cubin, p, out->cubin_len);
  out->log = mem_strdup("ptxas info    : Used 42 registers");
  out->log_len = strlen(out->log);
  if (fc->meta) {
    out->meta = mem_strdup(fc->meta);
    out->meta_len = strlen(fc->meta);
  }
  return ATTN_SUCCESS;
}

static const char *opts_a[] = {"--gpu-architecture=sm_80", "-std=c++17"};
static const char *entries_a[] = {"attn_fwd_a", "attn_fwd_b"};

static CacheKeyInput base_input(void) {
  CacheKeyInput in = {"extern \"C\" __global__ void k() {}", 0, "nvrtc 803:1a2b:109338064:1760564160.0",
                      "sm_80", opts_a, 2, entries_a, 2, NULL};
  in.source_len = strlen(in.source);
  return in;
}

static void key_of(const CacheKeyInput *in, unsigned char k[32]) {
  cache_key(in, k);
}

static void some_key(unsigned char k[32], const char *source) {
  CacheKeyInput in = base_input();
  in.source = source;
  in.source_len = strlen(source);
  cache_key(&in, k);
}

static char *entry_path(const unsigned char key[32], const char *suffix) {
  StrBuf p = {0};
  cache_entry_path(&p, root, "sm_80", key, suffix);
  return p.data;
}

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* Files in a directory whose names end in suffix (or start with it when
 * prefix is true). */
static int count_files(const char *dir, const char *part, bool prefix) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name), m = strlen(part);
    if (prefix ? strncmp(de->d_name, part, m) == 0
               : len >= m && strcmp(de->d_name + len - m, part) == 0)
      n++;
  }
  closedir(d);
  return n;
}

static void get_ok(Cache *c, const unsigned char key[32], FakeCompiler *fc,
                   CacheBlob *out) {
  StrBuf err = {0};
  attn_status st = cache_get(c, "sm_80", key, fake_compile, fc, out, &err);
  cr_assert_eq(st, ATTN_SUCCESS, "cache_get: %s", err.data ? err.data : "");
  sb_free(&err);
}

/* A cache over root, one lookup of a fresh key through a fake compiler:
 * for tests about what the cache makes of its root. */
static void init_and_get_once(Cache *c, const char *label) {
  cache_init(c, root);
  unsigned char key[32];
  some_key(key, label);
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(c, key, &fc, &b);
  cache_blob_free(&b);
}

/* ----------------------------------------------------------------- keys */

Test(cache_key, same_inputs_same_key) {
  CacheKeyInput a = base_input(), b = base_input();
  unsigned char ka[32], kb[32];
  key_of(&a, ka);
  key_of(&b, kb);
  cr_assert(memcmp(ka, kb, 32) == 0);
}

Test(cache_key, every_field_changes_the_key) {
  CacheKeyInput base = base_input();
  unsigned char k0[32], k[32];
  key_of(&base, k0);
  const char *opts_swapped[] = {"-std=c++17", "--gpu-architecture=sm_80"};
  const char *opts_other[] = {"--gpu-architecture=sm_80", "-std=c++20"};
  const char *entries_split[] = {"attn_fwd_", "aattn_fwd_b"};
  const char *entries_other[] = {"attn_fwd_a", "attn_fwd_c"};
  for (int field = 0; field < 11; field++) {
    CacheKeyInput in = base_input();
    switch (field) {
    case 0: in.source = "extern \"C\" __global__ void k() { }"; break;
    case 1: in.source_len -= 1; break;
    case 2: in.compiler = "nvrtc 803:1a2b:109338064:1760564161.0"; break; /* another NVRTC file */
    case 3: in.arch = "sm_90a"; break;
    case 4: in.options = opts_swapped; break;
    case 5: in.options = opts_other; break;
    case 6: in.noptions = 1; break;
    case 7: in.entries = entries_split; break;
    case 8: in.entries = entries_other; break;
    case 9: in.meta = "attnc-plan 3\n"; break; /* the plans kept beside the cubin */
    case 10: in.meta = ""; break;
    }
    if (field == 0) in.source_len = strlen(in.source);
    key_of(&in, k);
    cr_assert(memcmp(k, k0, 32) != 0, "field %d did not change the key",
              field);
  }
  /* Length prefixes keep fields apart: moving a byte between two entry
   * names is a different record. */
  CacheKeyInput in = base_input();
  in.entries = entries_split;
  unsigned char k1[32];
  key_of(&in, k1);
  cr_assert(memcmp(k1, k0, 32) != 0);
}

Test(cache_key, path_layout) {
  unsigned char key[32];
  some_key(key, "x");
  char hex[SHA256_HEX];
  sha256_hex(key, hex);
  StrBuf p = {0};
  cache_entry_path(&p, "/r", "sm_90a", key, ".bin");
  char want[200];
  snprintf(want, sizeof want, "/r/v1/sm_90a/%.2s/%s.bin", hex, hex);
  cr_assert_str_eq(p.data, want);
  sb_free(&p);
}

Test(cache_key, default_root_follows_environment) {
  StrBuf p = {0};
  setenv("ATTN_CACHE_DIR", "/a/b", 1);
  cr_assert_eq(cache_default_root(&p), 0);
  cr_assert_str_eq(p.data, "/a/b");
  unsetenv("ATTN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/x", 1);
  p.len = 0;
  cr_assert_eq(cache_default_root(&p), 0);
  cr_assert_str_eq(p.data, "/x/attnc");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  p.len = 0;
  cr_assert_eq(cache_default_root(&p), 0);
  cr_assert_str_eq(p.data, "/home/u/.cache/attnc");
  unsetenv("HOME");
  p.len = 0;
  cr_assert_eq(cache_default_root(&p), -1);
  sb_free(&p);
}

/* NVRTC enters the key by its file, found without loading it (a warm load
 * must not dlopen it): ATTN_NVRTC's file by device, inode, size and mtime,
 * or "not found". Each test runs in its own process, so the fingerprint's
 * once-per-process lookup sees this test's environment. */
Test(cache_key, nvrtc_named_by_its_file_unloaded) {
  char path[] = "/tmp/attnc-fake-nvrtc-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, "not a library", 13), 13);
  close(fd);
  setenv("ATTN_NVRTC", path, 1);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  char want[192];
  snprintf(want, sizeof want, "nvrtc %llx:%llx:%lld:%lld.%09ld", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
           (long)st.st_mtim.tv_nsec);
  cr_assert_str_eq(nvrtc_fingerprint(), want);
  cr_assert_null(dlopen(path, RTLD_NOLOAD | RTLD_NOW), "the fingerprint loaded the library");
  unlink(path);
  unsetenv("ATTN_NVRTC");
}

Test(cache_key, nvrtc_missing_is_named) {
  setenv("ATTN_NVRTC", "/nonexistent/libnvrtc.so.13", 1);
  cr_assert_str_eq(nvrtc_fingerprint(), "nvrtc not found");
  unsetenv("ATTN_NVRTC");
}

/* --------------------------------------------------------------- storage */

TestSuite(cache, .init = make_root, .fini = remove_root);

Test(cache, store_then_load_from_a_fresh_cache) {
  unsigned char key[32];
  some_key(key, "roundtrip");
  Cache c;
  cache_init(&c, root);
  FakeCompiler fc = {.payload = "cubin bytes \x01\x02\x00 end"};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cr_assert_eq(fc.calls, 1);
  cache_blob_free(&b);
  get_ok(&c, key, &fc, &b); /* same Cache: from memory */
  cr_assert_eq(fc.calls, 1);
  cr_assert_eq(c.hits_mem, 1);
  cache_blob_free(&b);
  cache_free(&c);

  Cache c2;
  cache_init(&c2, root);
  FakeCompiler never = {.fail = ATTN_ERROR_COMPILE};
  get_ok(&c2, key, &never, &b);
  cr_assert_eq(never.calls, 0, "a disk hit must not compile");
  cr_assert_eq(c2.hits_disk, 1);
  cr_assert_eq(b.cubin_len, strlen("cubin bytes \x01\x02"));
  cr_assert(memcmp(b.cubin, "cubin bytes \x01\x02", b.cubin_len) == 0);
  cr_assert_str_eq(b.log, "ptxas info    : Used 42 registers");
  cache_blob_free(&b);
  cache_free(&c2);
}

static unsigned char atomic_key[32];
static void no_entry_yet(void) {
  char *p = entry_path(atomic_key, ".bin");
  cr_assert_eq(access(p, F_OK), -1, "entry visible before it is complete");
  mem_free(p);
}

Test(cache, writes_are_atomic_and_leave_no_temp_files) {
  some_key(atomic_key, "atomic");
  Cache c;
  cache_init(&c, root);
  FakeCompiler fc = {.during = no_entry_yet};
  CacheBlob b;
  get_ok(&c, atomic_key, &fc, &b);
  cache_blob_free(&b);
  char *p = entry_path(atomic_key, ".bin");
  *strrchr(p, '/') = '\0';
  cr_assert_eq(count_files(p, ".bin", false), 1);
  cr_assert_eq(count_files(p, ".lock", false), 1);
  cr_assert_eq(count_files(p, ".tmp-", true), 0);
  mem_free(p);
  cache_free(&c);
}

/* Damages the entry for key, then expects a fresh Cache to notice, remove
 * it, recompile and leave a good entry behind. */
static void expect_recompile(const unsigned char key[32], const char *how) {
  Cache c;
  cache_init(&c, root);
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cr_assert_eq(fc.calls, 1, "%s: the damaged entry was used", how);
  cr_assert_eq(c.corrupt_removed, 1, "%s: not detected", how);
  cr_assert_str_eq(b.log, "ptxas info    : Used 42 registers");
  cache_blob_free(&b);
  cache_free(&c);
  Cache again;
  cache_init(&again, root);
  FakeCompiler never = {.fail = ATTN_ERROR_COMPILE};
  get_ok(&again, key, &never, &b);
  cr_assert_eq(never.calls, 0, "%s: the rewritten entry is bad", how);
  cache_blob_free(&b);
  cache_free(&again);
}

static void fill_entry(const unsigned char key[32]) {
  Cache c;
  cache_init(&c, root);
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cache_blob_free(&b);
  cache_free(&c);
}

static void patch_byte(const char *path, long offset) {
  int fd = open(path, O_RDWR);
  cr_assert(fd >= 0);
  unsigned char byte;
  cr_assert_eq(pread(fd, &byte, 1, offset), 1);
  byte ^= 0x40;
  cr_assert_eq(pwrite(fd, &byte, 1, offset), 1);
  close(fd);
}

Test(cache, truncated_entry_is_recompiled) {
  unsigned char key[32];
  some_key(key, "truncated");
  fill_entry(key);
  char *p = entry_path(key, ".bin");
  cr_assert_eq(truncate(p, file_size(p) - 1), 0);
  expect_recompile(key, "truncated by one byte");
  cr_assert_eq(truncate(p, 20), 0);
  expect_recompile(key, "truncated inside the header");
  cr_assert_eq(truncate(p, 0), 0);
  expect_recompile(key, "empty file");
  mem_free(p);
}

Test(cache, flipped_payload_byte_is_recompiled) {
  unsigned char key[32];
  some_key(key, "flipped");
  fill_entry(key);
  char *p = entry_path(key, ".bin");
  patch_byte(p, file_size(p) - 3);
  expect_recompile(key, "flipped payload byte");
  patch_byte(p, 70); /* inside the stored checksum */
  expect_recompile(key, "flipped checksum byte");
  mem_free(p);
}

Test(cache, wrong_magic_or_key_is_recompiled) {
  unsigned char key[32], other[32];
  some_key(key, "magic");
  some_key(other, "another kernel");
  fill_entry(key);
  char *p = entry_path(key, ".bin");
  patch_byte(p, 0);
  expect_recompile(key, "wrong magic");
  /* A whole, valid entry for another key under this key's name. */
  fill_entry(other);
  char *q = entry_path(other, ".bin");
  char cmd[700];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", q, p);
  cr_assert_eq(system(cmd), 0);
  expect_recompile(key, "entry for another key");
  mem_free(p);
  mem_free(q);
}

Test(cache, failed_compile_writes_nothing_and_releases_the_lock) {
  unsigned char key[32];
  some_key(key, "fails");
  Cache c;
  cache_init(&c, root);
  FakeCompiler bad = {.fail = ATTN_ERROR_COMPILE};
  CacheBlob b;
  StrBuf err = {0};
  cr_assert_eq(cache_get(&c, "sm_80", key, fake_compile, &bad, &b, &err),
               ATTN_ERROR_COMPILE);
  cr_assert_str_eq(err.data, "fake compile failed");
  char *p = entry_path(key, ".bin");
  cr_assert_eq(access(p, F_OK), -1);
  mem_free(p);
  FakeCompiler good = {0};
  get_ok(&c, key, &good, &b); /* would hang if the lock were still held */
  cr_assert_eq(good.calls, 1);
  cache_blob_free(&b);
  sb_free(&err);
  cache_free(&c);
}

Test(cache, two_processes_compile_one_key_once) {
  unsigned char key[32];
  some_key(key, "race");
  char count[300];
  snprintf(count, sizeof count, "%s/compiles.txt", root);
  enum { NPROC = 4 };
  pid_t kids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    kids[i] = fork();
    cr_assert(kids[i] >= 0);
    if (kids[i] == 0) {
      Cache c;
      cache_init(&c, root);
      FakeCompiler fc = {.count_file = count, .sleep_ms = 300};
      CacheBlob b;
      StrBuf err = {0};
      attn_status st = cache_get(&c, "sm_80", key, fake_compile, &fc, &b,
                                 &err);
      bool ok = st == ATTN_SUCCESS && b.cubin_len > 0;
      _exit(ok ? 0 : 1);
    }
  }
  for (int i = 0; i < NPROC; i++) {
    int status = 0;
    cr_assert_eq(waitpid(kids[i], &status, 0), kids[i]);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child %d failed", i);
  }
  FILE *f = fopen(count, "r");
  cr_assert_not_null(f);
  int lines = 0;
  char line[100];
  while (fgets(line, sizeof line, f)) lines++;
  fclose(f);
  cr_assert_eq(lines, 1, "%d processes compiled the same key", lines);
}

Test(cache, unusable_directory_falls_back_to_memory) {
  /* A regular file where a directory should be: fails even for root. */
  char file[300], bad_root[320];
  snprintf(file, sizeof file, "%s/not-a-dir", root);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  snprintf(bad_root, sizeof bad_root, "%s/cache", file);
  Cache c;
  cache_init(&c, bad_root);
  unsigned char key[32];
  some_key(key, "unwritable");
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cache_blob_free(&b);
  cr_assert_eq(fc.calls, 1);
  cr_assert_null(c.root, "the disk cache should be abandoned");
  cr_assert(c.warning.len > 0);
  cr_assert_not_null(strstr(c.warning.data, "memory only"), "%s",
                     c.warning.data);
  get_ok(&c, key, &fc, &b);
  cr_assert_eq(fc.calls, 1, "the in-memory cache should serve it");
  cache_blob_free(&b);
  cache_free(&c);
}

Test(cache, read_only_directory_falls_back_to_memory) {
  if (geteuid() == 0) {
    remove_root(); /* a skipped test does not run .fini */
    cr_skip_test("root ignores directory permissions");
  }
  chmod(root, 0555);
  Cache c;
  init_and_get_once(&c, "read-only");
  cr_assert(c.warning.len > 0);
  cache_free(&c);
  chmod(root, 0755);
}

Test(cache, memory_only_when_root_is_null) {
  Cache c;
  cache_init(&c, NULL);
  unsigned char key[32];
  some_key(key, "memory");
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cache_blob_free(&b);
  get_ok(&c, key, &fc, &b);
  cache_blob_free(&b);
  cr_assert_eq(fc.calls, 1);
  cr_assert_eq(c.warning.len, 0);
  cr_assert_eq(count_files(root, "", true), 2, "only . and .. expected");
  cache_free(&c);
}

Test(cache, list_and_clear) {
  unsigned char k1[32], k2[32];
  some_key(k1, "listed one");
  some_key(k2, "listed two");
  fill_entry(k1);
  fill_entry(k2);
  StrBuf out = {0};
  cr_assert_eq(cache_list(root, &out), 0);
  char h1[SHA256_HEX], h2[SHA256_HEX];
  sha256_hex(k1, h1);
  sha256_hex(k2, h2);
  int lines = 0;
  for (size_t i = 0; i < out.len; i++) lines += out.data[i] == '\n';
  cr_assert_eq(lines, 2, "%s", out.data);
  cr_assert_not_null(strstr(out.data, h1));
  cr_assert_not_null(strstr(out.data, h2));
  cr_assert_eq(strncmp(out.data, "sm_80 ", 6), 0, "%s", out.data);
  out.len = 0;
  cr_assert_eq(cache_clear(root, &out), 0);
  cr_assert_not_null(strstr(out.data, "removed 2 cached kernels"), "%s",
                     out.data);
  out.len = 0;
  cr_assert_eq(cache_list(root, &out), 0);
  cr_assert_eq(out.len, 0);
  char v1[300];
  snprintf(v1, sizeof v1, "%s/v1", root);
  cr_assert_eq(access(v1, F_OK), -1, "empty directories should go");
  sb_free(&out);
}

/* A listed entry names its source and graphs, and the program of a
 * module's backward says so. */
Test(cache, list_names_graphs_and_the_backward_part) {
  static const char *metas[2] = {
      "source a.attn\ntarget sm_80\nattnc-plan 3\ngraph g1 sep=0,0,0,0\ngraph g2 sep=0,0,0,0\n",
      "source a.attn\ntarget sm_80\npart backward\ngraph g2\n"};
  for (int k = 0; k < 2; k++) {
    Cache c;
    cache_init(&c, root);
    unsigned char key[32];
    some_key(key, metas[k]);
    FakeCompiler fc = {.meta = metas[k]};
    CacheBlob b;
    get_ok(&c, key, &fc, &b);
    cache_blob_free(&b);
    cache_free(&c);
  }
  StrBuf out = {0};
  cr_assert_eq(cache_list(root, &out), 0);
  cr_expect(strstr(out.data, " a.attn g1,g2\n"), "%s", out.data);
  cr_expect(strstr(out.data, " a.attn g2 (backward)\n"), "%s", out.data);
  sb_free(&out);
}

/* -------------------------------------------------- on a shared machine */

static mode_t mode_of(const char *path) {
  struct stat st;
  cr_assert_eq(lstat(path, &st), 0, "%s", path);
  return st.st_mode & 0777;
}

Test(cache, directories_are_0700_and_files_0600) {
  unsigned char key[32];
  some_key(key, "modes");
  char sub[300];
  snprintf(sub, sizeof sub, "%s/made/here", root);
  Cache c;
  cache_init(&c, sub);
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cache_blob_free(&b);
  cr_assert_eq(c.warning.len, 0, "%s", c.warning.data);
  char *bin = NULL, *lock = NULL;
  StrBuf pb = {0}, pl = {0};
  cache_entry_path(&pb, sub, "sm_80", key, ".bin");
  cache_entry_path(&pl, sub, "sm_80", key, ".lock");
  bin = pb.data, lock = pl.data;
  cr_assert_eq(mode_of(bin), 0600);
  cr_assert_eq(mode_of(lock), 0600);
  char dir[400];
  snprintf(dir, sizeof dir, "%s", bin);
  for (int k = 0; k < 4; k++) { /* KK, ARCH, v1, the root: all made here */
    *strrchr(dir, '/') = '\0';
    cr_assert_eq(mode_of(dir), 0700, "%s", dir);
  }
  sb_free(&pb);
  sb_free(&pl);
  cache_free(&c);
}

Test(cache, a_root_others_may_write_is_not_used) {
  chmod(root, 0777);
  Cache c;
  init_and_get_once(&c, "world-writable");
  cr_assert_null(c.root, "the disk cache should be abandoned");
  cr_assert(strstr(c.warning.data, "writable by others"), "%s", c.warning.data);
  cr_assert_eq(count_files(root, "", true), 2, "nothing written there");
  cache_free(&c);
  chmod(root, 0700);
}

/* A link where the cache expects its own directory or entry is never
 * followed: not read, not written through, not cleared. */
Test(cache, links_are_never_followed) {
  char elsewhere[300], link[320], planted[400];
  snprintf(elsewhere, sizeof elsewhere, "%s-elsewhere", root);
  cr_assert_eq(mkdir(elsewhere, 0700), 0);
  /* ROOT/v1 -> elsewhere, with a valid-looking entry planted there. */
  unsigned char key[32];
  some_key(key, "planted");
  snprintf(link, sizeof link, "%s/v1", root);
  cr_assert_eq(symlink(elsewhere, link), 0);
  snprintf(planted, sizeof planted, "%s/keep.bin", elsewhere);
  FILE *f = fopen(planted, "w");
  cr_assert(f);
  fputs("do not remove", f);
  fclose(f);
  Cache c;
  cache_init(&c, root);
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cache_blob_free(&b);
  cr_assert_eq(fc.calls, 1);
  cr_assert_null(c.root, "a linked v1 abandons the disk cache");
  cr_assert(strstr(c.warning.data, "symbolic link"), "%s", c.warning.data);
  cache_free(&c);
  StrBuf out = {0};
  cr_assert_neq(cache_clear(root, &out), 0, "clear must refuse a linked v1");
  cr_assert_eq(access(planted, F_OK), 0, "clear followed the link");
  sb_free(&out);
  unlink(link);
  /* An entry that is a link to a well-formed entry elsewhere: recompiled. */
  Cache c2;
  cache_init(&c2, root);
  FakeCompiler fc2 = {.payload = "\x7f" "ELF the real one"};
  get_ok(&c2, key, &fc2, &b);
  cache_blob_free(&b);
  StrBuf bin = {0};
  cache_entry_path(&bin, root, "sm_80", key, ".bin");
  char moved[420];
  snprintf(moved, sizeof moved, "%s/moved.bin", elsewhere);
  cr_assert_eq(rename(bin.data, moved), 0);
  cr_assert_eq(symlink(moved, bin.data), 0);
  cache_free(&c2);
  Cache c3;
  cache_init(&c3, root);
  FakeCompiler fc3 = {0};
  get_ok(&c3, key, &fc3, &b);
  cache_blob_free(&b);
  cr_assert_eq(fc3.calls, 1, "a linked entry must not be loaded");
  cache_free(&c3);
  sb_free(&bin);
  unlink(moved);
  unlink(planted);
  rmdir(elsewhere);
}

/* An entry someone else owns is never loaded (as root we can make one). */
Test(cache, an_entry_of_another_user_is_not_loaded) {
  if (geteuid() != 0) {
    remove_root();
    cr_skip_test("making a file of another owner needs root");
  }
  unsigned char key[32];
  some_key(key, "foreign");
  Cache c;
  cache_init(&c, root);
  FakeCompiler fc = {0};
  CacheBlob b;
  get_ok(&c, key, &fc, &b);
  cache_blob_free(&b);
  cache_free(&c);
  StrBuf bin = {0};
  cache_entry_path(&bin, root, "sm_80", key, ".bin");
  cr_assert_eq(chown(bin.data, 65534, 65534), 0);
  Cache c2;
  cache_init(&c2, root);
  FakeCompiler fc2 = {0};
  get_ok(&c2, key, &fc2, &b);
  cache_blob_free(&b);
  cr_assert_eq(fc2.calls, 1, "an entry of uid 65534 must not be loaded");
  cache_free(&c2);
  sb_free(&bin);
}

/* ----------------------------------------------------- real NVRTC compile */

static const char *kernel_src =
    "extern \"C\" __global__ void scale_rows(float *x, float s) {\n"
    "  __shared__ float t[128];\n"
    "  t[threadIdx.x] = x[threadIdx.x] * s;\n"
    "  __syncthreads();\n"
    "  x[threadIdx.x] = t[127 - threadIdx.x];\n"
    "}\n";

typedef struct NvJob {
  NvrtcOptions o;
  int calls;
} NvJob;

static attn_status nvrtc_job(void *user, CacheBlob *out, StrBuf *err) {
  NvJob *job = user;
  job->calls++;
  NvrtcOutput nv;
  attn_status st = nvrtc_compile(kernel_src, "t.cu", &job->o, false, &nv,
                                 err);
  if (st) return st;
  out->cubin = nv.cubin;
  out->cubin_len = nv.cubin_len;
  out->log = nv.log;
  out->log_len = strlen(nv.log);
  return ATTN_SUCCESS;
}

Test(cache, nvrtc_cubins_roundtrip_for_each_target) {
  const char *archs[] = {"sm_80", "sm_90a"};
  for (int i = 0; i < 2; i++) {
    NvJob job = {.calls = 0};
    nvrtc_options(&job.o, archs[i], true);
    const char *entries[] = {"scale_rows"};
    CacheKeyInput in = {kernel_src, strlen(kernel_src), nvrtc_fingerprint(),
                        archs[i], job.o.v, job.o.n, entries, 1, NULL};
    unsigned char key[32];
    cache_key(&in, key);
    Cache c;
    cache_init(&c, root);
    CacheBlob b;
    StrBuf err = {0};
    cr_assert_eq(cache_get(&c, archs[i], key, nvrtc_job, &job, &b, &err),
                 ATTN_SUCCESS, "%s", err.data ? err.data : "");
    cr_assert_eq(job.calls, 1);
    cr_assert(b.cubin_len > 64 && memcmp(b.cubin, "\x7f" "ELF", 4) == 0,
              "%s: not an ELF cubin", archs[i]);
    cr_assert_not_null(strstr(b.log, "registers"), "ptxas -v log: %s", b.log);
    cr_assert_not_null(strstr(b.log, archs[i]), "%s", b.log);
    cache_blob_free(&b);
    cache_free(&c);
    cache_init(&c, root);
    cr_assert_eq(cache_get(&c, archs[i], key, nvrtc_job, &job, &b, &err),
                 ATTN_SUCCESS);
    cr_assert_eq(job.calls, 1, "second lookup must hit the disk");
    cache_blob_free(&b);
    cache_free(&c);
    sb_free(&err);
  }
}

Test(cache, nvrtc_reports_errors_and_ptx) {
  NvrtcOptions o;
  nvrtc_options(&o, "sm_90a", true);
  cr_assert_str_eq(o.v[0], "--gpu-architecture=sm_90a");
  cr_assert_str_eq(o.v[o.n - 1], "--no-cache");
  NvrtcOutput nv;
  StrBuf err = {0};
  cr_assert_eq(nvrtc_compile(kernel_src, "t.cu", &o, true, &nv, &err),
               ATTN_SUCCESS);
  cr_assert_not_null(strstr(nv.ptx, ".target sm_90a"), "%s", nv.ptx);
  nvrtc_output_free(&nv);
  cr_assert_eq(nvrtc_compile("__global__ void k( {", "bad.cu", &o, false,
                             &nv, &err),
               ATTN_ERROR_COMPILE);
  cr_assert_not_null(strstr(err.data, "bad.cu"), "%s", err.data);
  cr_assert_null(nv.cubin);
  sb_free(&err);
}

Test(nvrtc, targets) {
  cr_assert(nvrtc_arch_valid("sm_80"));
  cr_assert(nvrtc_arch_valid("sm_90a"));
  cr_assert(nvrtc_arch_valid("sm_100a"));
  cr_assert(!nvrtc_arch_valid("sm_9"));
  cr_assert(!nvrtc_arch_valid("sm90"));
  cr_assert(!nvrtc_arch_valid("compute_90"));
  cr_assert(!nvrtc_arch_valid("sm_90ab"));
  cr_assert(!nvrtc_arch_valid(""));
  char a[16];
  nvrtc_arch_for_cc(9, 0, a);
  cr_assert_str_eq(a, "sm_90a");
  nvrtc_arch_for_cc(10, 0, a);
  cr_assert_str_eq(a, "sm_100a");
  nvrtc_arch_for_cc(8, 6, a);
  cr_assert_str_eq(a, "sm_86");
  StrBuf err = {0};
  cr_assert(nvrtc_arch_supported("sm_90a", &err));
  cr_assert(!nvrtc_arch_supported("sm_35", &err));
  cr_assert_not_null(strstr(err.data, "sm_35"), "%s", err.data);
  sb_free(&err);
  cr_assert(nvrtc_version() >= 12000);
}

/* ------------------------------------------- a module in two programs */

/* A module whose graph declares grad compiles its forward's program now
 * and keeps the backward's source for its first backward launch; the
 * forward's cache entry is keyed by its plans too, so the same forward
 * text compiled for the other backward template (the same forward
 * program) gets that template's backward plan, not the cached one's. */
Test(two_programs, backward_apart_and_plans_keyed) {
  static const char text[] =
      "attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
      "  input v : bf16[B, H, S, 64];\n  s = (q @ k^T) * 0.125;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, S, 64];\n  output lse = logsumexp(s);\n  grad q, k, v;\n}\n";
  attn_context *ctx;
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_arch(ctx, "sm_90a"), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_cache_dir(ctx, NULL), ATTN_SUCCESS);
  int threads[2] = {0, 0};
  for (int t = 0; t < 2; t++) {
    cr_assert_eq(attn_context_set_option(ctx, ATTN_OPTION_BACKWARD_TEMPLATE, t ? 90 : 80),
                 ATTN_SUCCESS);
    attn_module *m;
    cr_assert_eq(attn_module_compile_string(ctx, "g.attn", text, sizeof text - 1, &m),
                 ATTN_SUCCESS, "%s", attn_context_error(ctx));
    const RtApart *ap = &m->apart[RT_APART_BACKWARD];
    cr_assert(ap->on && ap->key && m->cm);
    /* The backward's program, emitted as a miss would (a hit emits none):
     * the backward alone; its key names the templates instead. */
    const char *bwd = emit_unit_part(m->cm, &m->opt, EMIT_BACKWARD, m->arena);
    cr_expect(strstr(bwd, "bwd_main") && !strstr(bwd, "attn_fwd_sm90("),
              "the backward's program holds the backward alone");
    cr_expect(strstr(bwd, bwd_sm80_src) && !strstr(ap->key, bwd_sm80_src) &&
                  strstr(ap->key, "[the text of templates/bwd_sm80.cuh]") &&
                  strstr(ap->key, attn_templates_id),
              "the key text names the templates and their digest");
    const PassPlan *bp = &m->graphs[0].plan->pass[PLAN_BACKWARD];
    for (int k = 0; k < bp->nsteps; k++)
      if (!strcmp(bp->steps[k].role, "main")) threads[t] = bp->steps[k].threads;
    attn_module_destroy(m);
  }
  cr_expect_eq(threads[0], 128, "bwd_sm80's main kernel: %d threads", threads[0]);
  cr_expect_eq(threads[1], 384, "bwd_sm90's main kernel: %d threads", threads[1]);
  attn_context_destroy(ctx);
}

/* The decode kernels are a program apart too: the main program holds the
 * forward kernel and not the decode and merge kernels, whose own program
 * (compiled on the first decode launch) holds them alone; its entries are
 * the plan's decode and merge steps, and NVRTC compiles it. */
Test(two_programs, decode_apart) {
  static const char text[] =
      "attention g {\n  input q : bf16[B, H, Sq, 64];\n  input k : bf16[B, H, Skv, 64];\n"
      "  input v : bf16[B, H, Skv, 64];\n  s = mask((q @ k^T) * 0.125, j <= i + Skv - Sq);\n"
      "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 64];\n}\n";
  attn_context *ctx;
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_arch(ctx, "sm_90a"), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_cache_dir(ctx, NULL), ATTN_SUCCESS);
  attn_module *m;
  cr_assert_eq(attn_module_compile_string(ctx, "g.attn", text, sizeof text - 1, &m),
               ATTN_SUCCESS, "%s", attn_context_error(ctx));
  const RtApart *ap = &m->apart[RT_APART_DECODE];
  cr_assert(ap->on && ap->key && !m->apart[RT_APART_BACKWARD].on);
  cr_assert_eq(ap->nentries, 2);
  const PassPlan *fp = &m->graphs[0].plan->pass[PLAN_FORWARD];
  for (int k = 0; k < fp->nsteps; k++) {
    const bool dec = emit_step_is_decode(fp->steps[k].role);
    cr_assert_eq(rt_step_apart(m, m->graphs[0].plan, PLAN_FORWARD, k),
                 dec ? RT_APART_DECODE : RT_NAPART, "step %s", fp->steps[k].role);
    bool listed = false;
    for (int e = 0; e < ap->nentries; e++) listed |= !strcmp(ap->entries[e], fp->steps[k].entry);
    cr_assert_eq(listed, dec, "step %s", fp->steps[k].role);
  }
  const char *main_src = emit_unit_part(m->cm, &m->opt, EMIT_PREFILL, m->arena);
  const char *dec_src = emit_unit_part(m->cm, &m->opt, EMIT_DECODE, m->arena);
  cr_expect(strstr(main_src, "attn_fwd_sm90(") && !strstr(main_src, "attn_decode("),
            "the main program holds the forward kernel alone");
  cr_expect(strstr(dec_src, "attn_decode(") && strstr(dec_src, "attn_decode_merge(") &&
                !strstr(dec_src, "attn_fwd_sm90(") && !strstr(dec_src, wgmma_src),
            "the decode program holds the decode and merge kernels alone");
  cr_expect(strstr(ap->meta, "part decode\ngraph g\n"), "%s", ap->meta);
  StrBuf why = {0};
  if (nvrtc_available(&why)) {
    cr_assert_eq(rt_compile_apart(m, RT_APART_DECODE), ATTN_SUCCESS, "%s",
                 attn_context_error(ctx));
    cr_assert(ap->cubin_len > 64 && memcmp(ap->cubin, "\x7f" "ELF", 4) == 0);
  }
  sb_free(&why);
  attn_module_destroy(m);
  attn_context_destroy(ctx);
}

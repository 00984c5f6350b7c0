/* cache.c: the cubin cache.
 *
 * Entries live at ROOT/v1/ARCH/KK/KEY.bin (KK: the key's first two hex
 * digits, so no directory grows huge). Each is a fixed header followed by
 * the cubin, NVRTC's log and the entry's meta (its source and target, and
 * the launch plans of its kernels, which `attnc cache list` shows and the
 * loader runs):
 *
 *   offset  size  field
 *        0     8  magic "ATTNCBIN"
 *        8     4  format version (CACHE_FORMAT_VERSION), little-endian
 *       12     4  header size (104)
 *       16    32  key (SHA-256 of the compile's inputs, see cache_key)
 *       48     8  cubin length
 *       56     8  log length
 *       64     8  meta length
 *       72    32  CRC-32C of cubin || log || meta (4 bytes), then zeros
 *      104        cubin, then log, then meta
 *
 * Writers compile under a per-key flock on KEY.lock (so two processes never
 * compile the same key twice: the loser waits, then finds the entry), write
 * a temp file in the same directory, fsync it and rename it into place, so
 * readers, who never lock, see a whole entry or none. Anything that does
 * not check out (magic, version, key, lengths, checksum) is removed and
 * recompiled. A directory that cannot be used turns into a warning and an
 * in-memory cache: the disk cache is an optimisation, never a failure.
 *
 * On a shared machine nobody else may feed us a cubin: directories are
 * created 0700 and files 0600; the root must be a directory owned by the
 * user and writable by nobody else, and everything below it (v1, ARCH,
 * KK, the entries and locks) a real directory or file (never a symbolic
 * link, which is not followed) with the same owner and modes, or the disk
 * cache is abandoned with a warning (or, for an entry, it is replaced).
 * `attnc cache list` and `clear` walk only such directories.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"

#define CACHE_MAGIC "ATTNCBIN"
#define CACHE_HEADER_SIZE 104
#define CACHE_MAX_ENTRY ((uint64_t)1 << 30) /* nothing real comes close */

struct CacheMemEntry {
  unsigned char key[SHA256_BYTES];
  CacheBlob blob;
  CacheMemEntry *next;
};

/* ----------------------------------------------------------------- keys */

static void cache_key_u64(Sha256 *s, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  sha256_update(s, b, 8);
}

/* A length-prefixed field, so no two different records hash the same
 * byte stream. */
static void cache_key_bytes(Sha256 *s, const void *p, size_t n) {
  cache_key_u64(s, n);
  sha256_update(s, p, n);
}

static void cache_key_str(Sha256 *s, const char *str) {
  cache_key_bytes(s, str, strlen(str));
}

void cache_key(const CacheKeyInput *in, unsigned char key[SHA256_BYTES]) {
  Sha256 s;
  sha256_init(&s);
  cache_key_str(&s, "attnc-cubin");
  cache_key_u64(&s, CACHE_FORMAT_VERSION);
  cache_key_u64(&s, ATTN_ABI_VERSION);
  cache_key_str(&s, in->compiler ? in->compiler : "");
  cache_key_str(&s, in->arch);
  cache_key_u64(&s, (uint64_t)in->noptions);
  for (int i = 0; i < in->noptions; i++) cache_key_str(&s, in->options[i]);
  cache_key_u64(&s, (uint64_t)in->nentries);
  for (int i = 0; i < in->nentries; i++) cache_key_str(&s, in->entries[i]);
  cache_key_bytes(&s, in->source, in->source_len);
  if (in->meta) cache_key_bytes(&s, in->meta, strlen(in->meta));
  sha256_final(&s, key);
}

/* ---------------------------------------------------------------- blobs */

attn_status cache_blob_take(CacheBlob *out, NvrtcOutput *nv, const char *meta, StrBuf *err) {
  out->meta = mem_strdup(meta);
  if (!out->meta) {
    nvrtc_output_free(nv);
    sb_puts(err, "out of memory");
    return ATTN_ERROR_OUT_OF_MEMORY;
  }
  out->meta_len = strlen(meta);
  out->cubin = nv->cubin;
  out->cubin_len = nv->cubin_len;
  out->log = nv->log;
  out->log_len = strlen(nv->log);
  mem_free(nv->ptx);
  *nv = (NvrtcOutput){0};
  return ATTN_SUCCESS;
}

void cache_blob_free(CacheBlob *b) {
  mem_free(b->cubin);
  mem_free(b->log);
  mem_free(b->meta);
  memset(b, 0, sizeof *b);
}

static int cache_blob_copy(CacheBlob *dst, const CacheBlob *src) {
  memset(dst, 0, sizeof *dst);
  dst->cubin = mem_alloc(src->cubin_len ? src->cubin_len : 1);
  dst->log = mem_alloc(src->log_len + 1);
  dst->meta = mem_alloc(src->meta_len + 1);
  if (!dst->cubin || !dst->log || !dst->meta) {
    cache_blob_free(dst);
    return -1;
  }
  if (src->cubin_len) memcpy(dst->cubin, src->cubin, src->cubin_len);
  if (src->log_len) memcpy(dst->log, src->log, src->log_len);
  if (src->meta_len) memcpy(dst->meta, src->meta, src->meta_len);
  dst->log[src->log_len] = '\0';
  dst->meta[src->meta_len] = '\0';
  dst->cubin_len = src->cubin_len;
  dst->log_len = src->log_len;
  dst->meta_len = src->meta_len;
  return 0;
}

/* ------------------------------------------------------------ the Cache */

int cache_init(Cache *c, const char *root) {
  memset(c, 0, sizeof *c);
  return cache_set_root(c, root);
}

int cache_set_root(Cache *c, const char *root) {
  char *copy = NULL;
  if (root && !(copy = mem_strdup(root))) return -1;
  mem_free(c->root);
  c->root = copy;
  c->warning.len = 0;
  if (c->warning.data) c->warning.data[0] = '\0';
  return 0;
}

void cache_free(Cache *c) {
  for (CacheMemEntry *e = c->mem, *next; e; e = next) {
    next = e->next;
    cache_blob_free(&e->blob);
    mem_free(e);
  }
  mem_free(c->root);
  sb_free(&c->warning);
  memset(c, 0, sizeof *c);
}

static CacheMemEntry *cache_mem_find(Cache *c,
                                     const unsigned char key[SHA256_BYTES]) {
  for (CacheMemEntry *e = c->mem; e; e = e->next)
    if (memcmp(e->key, key, SHA256_BYTES) == 0) return e;
  return NULL;
}

/* Takes ownership of blob. */
static int cache_mem_add(Cache *c, const unsigned char key[SHA256_BYTES],
                         CacheBlob *blob) {
  CacheMemEntry *e = mem_calloc(1, sizeof *e);
  if (!e) return -1;
  memcpy(e->key, key, SHA256_BYTES);
  e->blob = *blob;
  memset(blob, 0, sizeof *blob);
  e->next = c->mem;
  c->mem = e;
  return 0;
}

/* Why a cache path is not used: the trust checks' reasons in words. */
static const char *cache_reason(int err) {
  return err == EPERM   ? "not owned by you, or writable by others"
         : err == ELOOP ? "a symbolic link, which the cache does not follow"
                        : strerror(err);
}

/* The disk cache stops being used for the rest of this Cache's life. */
static void cache_abandon_disk(Cache *c, const char *what, const char *path,
                               int err) {
  if (c->warning.len) sb_puts(&c->warning, "\n");
  sb_printf(&c->warning,
            "kernel cache %s %s: %s; keeping compiled kernels in "
            "memory only",
            what, path, cache_reason(err));
  mem_free(c->root);
  c->root = NULL;
}

static void cache_warn(Cache *c, const char *what, const char *path,
                       int err) {
  if (c->warning.len) sb_puts(&c->warning, "\n");
  sb_printf(&c->warning, "kernel cache %s %s: %s", what, path,
            strerror(err));
}

/* ---------------------------------------------------------------- paths */

void cache_entry_path(StrBuf *out, const char *root, const char *arch,
                      const unsigned char key[SHA256_BYTES],
                      const char *suffix) {
  char hex[SHA256_HEX];
  sha256_hex(key, hex);
  sb_printf(out, "%s/v1/%s/%.2s/%s%s", root, arch, hex, hex, suffix);
}

int cache_default_root(StrBuf *out) {
  const char *dir = getenv("ATTN_CACHE_DIR");
  if (dir && *dir) {
    sb_puts(out, dir);
    return 0;
  }
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) {
    sb_printf(out, "%s/attnc", xdg);
    return 0;
  }
  const char *home = getenv("HOME");
  if (home && *home) {
    sb_printf(out, "%s/.cache/attnc", home);
    return 0;
  }
  return -1;
}

/* Whether st describes something the user owns and only the user may
 * write: else EPERM. */
static int cache_owned(const struct stat *st) {
  if (st->st_uid != geteuid() || (st->st_mode & (S_IWGRP | S_IWOTH))) {
    errno = EPERM;
    return -1;
  }
  return 0;
}

/* A directory of the cache: a real one (follow: the root may be a link
 * to one), owned by the user, writable by nobody else. 0 or -1 with errno
 * (ELOOP for a link, ENOTDIR, EPERM). */
static int cache_trusted_dir(const char *path, bool follow) {
  struct stat st;
  if ((follow ? stat(path, &st) : lstat(path, &st)) != 0) return -1;
  if (S_ISLNK(st.st_mode)) {
    errno = ELOOP;
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return cache_owned(&st);
}

/* mkdir -p of the root (its missing parts 0700), which must then be a
 * trusted directory; returns 0 or -1 with errno set. */
static int cache_mkroot(const char *root) {
  char *p = mem_strdup(root);
  if (!p) return -1;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      int e = errno;
      mem_free(p);
      errno = e;
      return -1;
    }
    *s = c;
    if (c == '\0') break;
  }
  mem_free(p);
  return cache_trusted_dir(root, true);
}

/* One level below a trusted directory: made 0700 when missing, then a
 * trusted directory itself. */
static int cache_mksub(const char *path) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return -1;
  return cache_trusted_dir(path, false);
}

/* --------------------------------------------------------- entry format */

static uint64_t cache_get_u64(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void cache_put_u64(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The checksum field: CRC-32C of cubin || log || meta in its first 4
 * bytes, then 28 zero bytes (format 3; SHA-256 before, which cost a warm
 * load 0.1 ms: crc32c.c). */
static void cache_checksum(const CacheBlob *b, unsigned char out[32]) {
  uint32_t c = crc32c(0, b->cubin, b->cubin_len);
  c = crc32c(c, b->log, b->log_len);
  c = crc32c(c, b->meta, b->meta_len);
  memset(out, 0, 32);
  cache_put_u64(out, c, 4);
}

static void cache_header(unsigned char h[CACHE_HEADER_SIZE],
                         const unsigned char key[SHA256_BYTES],
                         const CacheBlob *b) {
  memcpy(h, CACHE_MAGIC, 8);
  cache_put_u64(h + 8, CACHE_FORMAT_VERSION, 4);
  cache_put_u64(h + 12, CACHE_HEADER_SIZE, 4);
  memcpy(h + 16, key, SHA256_BYTES);
  cache_put_u64(h + 48, b->cubin_len, 8);
  cache_put_u64(h + 56, b->log_len, 8);
  cache_put_u64(h + 64, b->meta_len, 8);
  cache_checksum(b, h + 72);
}

typedef enum CacheRead {
  CACHE_FOUND,
  CACHE_MISSING,
  CACHE_CORRUPT, /* present but not a whole, matching entry */
  CACHE_NOMEM
} CacheRead;

static int cache_read_all(int fd, unsigned char *p, size_t n) {
  while (n > 0) {
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    p += got;
    n -= (size_t)got;
  }
  return 0;
}

/* Validates a whole entry image against the key it should hold. */
static CacheRead cache_parse(const unsigned char *buf, size_t size,
                             const unsigned char key[SHA256_BYTES],
                             CacheBlob *out) {
  if (size < CACHE_HEADER_SIZE || memcmp(buf, CACHE_MAGIC, 8) != 0 ||
      cache_get_u64(buf + 8, 4) != CACHE_FORMAT_VERSION ||
      cache_get_u64(buf + 12, 4) != CACHE_HEADER_SIZE ||
      memcmp(buf + 16, key, SHA256_BYTES) != 0)
    return CACHE_CORRUPT;
  uint64_t ncubin = cache_get_u64(buf + 48, 8);
  uint64_t nlog = cache_get_u64(buf + 56, 8);
  uint64_t nmeta = cache_get_u64(buf + 64, 8);
  if (ncubin > CACHE_MAX_ENTRY || nlog > CACHE_MAX_ENTRY || nmeta > CACHE_MAX_ENTRY ||
      CACHE_HEADER_SIZE + ncubin + nlog + nmeta != size)
    return CACHE_CORRUPT;
  CacheBlob view = {(unsigned char *)buf + CACHE_HEADER_SIZE, ncubin,
                    (char *)buf + CACHE_HEADER_SIZE + ncubin, nlog,
                    (char *)buf + CACHE_HEADER_SIZE + ncubin + nlog, nmeta};
  unsigned char sum[SHA256_BYTES];
  cache_checksum(&view, sum);
  if (memcmp(sum, buf + 72, SHA256_BYTES) != 0) return CACHE_CORRUPT;
  return cache_blob_copy(out, &view) == 0 ? CACHE_FOUND : CACHE_NOMEM;
}

static CacheRead cache_read_entry(const char *path,
                                  const unsigned char key[SHA256_BYTES],
                                  CacheBlob *out) {
  /* Never through a link; never a file someone else could have written. */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? CACHE_MISSING : CACHE_CORRUPT;
  struct stat st;
  CacheRead r = CACHE_CORRUPT;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && cache_owned(&st) == 0 &&
      (uint64_t)st.st_size <= 3 * CACHE_MAX_ENTRY + CACHE_HEADER_SIZE) {
    size_t size = (size_t)st.st_size;
    unsigned char *buf = mem_alloc(size ? size : 1);
    if (!buf)
      r = CACHE_NOMEM;
    else if (cache_read_all(fd, buf, size) == 0)
      r = cache_parse(buf, size, key, out);
    mem_free(buf);
  }
  close(fd);
  return r;
}

static int cache_write_all(int fd, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n > 0) {
    ssize_t put = write(fd, b, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return -1;
    b += put;
    n -= (size_t)put;
  }
  return 0;
}

/* Temp file in the entry's directory, fsync, rename: the .bin name only
 * ever points at a complete entry. Returns 0 or -1 with errno. */
static int cache_write_entry(const char *dir, const char *path,
                             const unsigned char key[SHA256_BYTES],
                             const CacheBlob *b) {
  char hex[SHA256_HEX];
  sha256_hex(key, hex);
  StrBuf tmp = {0};
  sb_printf(&tmp, "%s/.tmp-%s-XXXXXX", dir, hex);
  if (tmp.failed) {
    sb_free(&tmp);
    errno = ENOMEM;
    return -1;
  }
  int fd = mkstemp(tmp.data);
  if (fd < 0) {
    int e = errno;
    sb_free(&tmp);
    errno = e;
    return -1;
  }
  unsigned char h[CACHE_HEADER_SIZE];
  cache_header(h, key, b);
  int rc = cache_write_all(fd, h, sizeof h) == 0 &&
                   cache_write_all(fd, b->cubin, b->cubin_len) == 0 &&
                   cache_write_all(fd, b->log, b->log_len) == 0 &&
                   cache_write_all(fd, b->meta, b->meta_len) == 0 &&
                   fchmod(fd, 0600) == 0 && fsync(fd) == 0
               ? 0
               : -1;
  int e = errno;
  if (close(fd) != 0 && rc == 0) {
    rc = -1;
    e = errno;
  }
  if (rc == 0 && rename(tmp.data, path) != 0) {
    rc = -1;
    e = errno;
  }
  if (rc != 0) unlink(tmp.data);
  sb_free(&tmp);
  errno = e;
  return rc;
}

/* ------------------------------------------------------------- lookups */

/* Reads the entry at path; a corrupt one is removed (and counted). */
static CacheRead cache_probe(Cache *c, const char *path,
                             const unsigned char key[SHA256_BYTES],
                             CacheBlob *out) {
  CacheRead r = cache_read_entry(path, key, out);
  if (r == CACHE_CORRUPT) {
    unlink(path);
    c->corrupt_removed++;
  }
  return r;
}

static int cache_lock(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || cache_owned(&st) != 0) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
  }
  return fd;
}

/* The lock file stays: unlinking it would let a waiter lock an orphaned
 * inode while a newcomer locks a fresh one, and both would compile. */
static void cache_unlock(int fd) {
  flock(fd, LOCK_UN);
  close(fd);
}

/* The entry's directory (dir, below root: v1/ARCH/KK in cache_entry_path's
 * layout) made 0700 where missing, and every level of it checked: the
 * root a trusted directory, each level below it a real one of ours. -1
 * with errno, dir cut to the level that failed, when one cannot be
 * trusted. */
static int cache_entry_dir(const char *root, StrBuf *dir) {
  char *d = dir->data;
  const size_t n = strlen(root);
  for (size_t k = n; k <= dir->len; k++) {
    if (d[k] != '/' && d[k] != '\0') continue;
    const char c = d[k];
    d[k] = '\0';
    if ((k == n ? cache_mkroot(d) : cache_mksub(d)) != 0) {
      dir->len = k; /* the level that failed, for the warning */
      return -1;
    }
    d[k] = c;
  }
  return 0;
}

/* The disk path of cache_get; on return *done says whether out is filled
 * (or an error returned). When not done, the disk cache was abandoned and
 * the caller compiles without it. */
static attn_status cache_disk_get(Cache *c, const char *arch,
                                  const unsigned char key[SHA256_BYTES],
                                  CacheCompileFn compile, void *user,
                                  CacheBlob *out, StrBuf *err, bool *done) {
  StrBuf dir = {0}, path = {0}, lock = {0};
  attn_status st = ATTN_SUCCESS;
  *done = true;
  cache_entry_path(&path, c->root, arch, key, ".bin");
  cache_entry_path(&lock, c->root, arch, key, ".lock");
  if (!path.failed) sb_write(&dir, path.data, (size_t)(strrchr(path.data, '/') - path.data));
  /* A path that could not be built (out of memory) is never opened. */
  if (path.failed || lock.failed || dir.failed) {
    st = ATTN_ERROR_OUT_OF_MEMORY;
  } else if (cache_entry_dir(c->root, &dir) != 0) {
    cache_abandon_disk(c, "directory", dir.data, errno);
    *done = false;
  }
  if (st || !*done) {
    sb_free(&dir);
    sb_free(&path);
    sb_free(&lock);
    return st;
  }
  CacheRead r = cache_probe(c, path.data, key, out);
  int fd = -1;
  if (r == CACHE_FOUND) {
    c->hits_disk++;
  } else if (r == CACHE_NOMEM) {
    st = ATTN_ERROR_OUT_OF_MEMORY;
  } else if ((fd = cache_lock(lock.data)) < 0) {
    cache_abandon_disk(c, "lock", lock.data, errno);
    *done = false;
  } else if ((r = cache_probe(c, path.data, key, out)) == CACHE_FOUND) {
    c->hits_disk++; /* another process compiled it while we waited */
  } else if (r == CACHE_NOMEM) {
    st = ATTN_ERROR_OUT_OF_MEMORY;
  } else {
    c->compiles++;
    st = compile(user, out, err);
    if (st == ATTN_SUCCESS &&
        cache_write_entry(dir.data, path.data, key, out) != 0)
      cache_warn(c, "cannot write", path.data, errno);
  }
  if (fd >= 0) cache_unlock(fd);
  sb_free(&dir);
  sb_free(&path);
  sb_free(&lock);
  return st;
}

attn_status cache_get(Cache *c, const char *arch,
                      const unsigned char key[SHA256_BYTES],
                      CacheCompileFn compile, void *user, CacheBlob *out,
                      StrBuf *err) {
  memset(out, 0, sizeof *out);
  CacheMemEntry *e = cache_mem_find(c, key);
  if (e) {
    c->hits_mem++;
    return cache_blob_copy(out, &e->blob) == 0 ? ATTN_SUCCESS
                                                : ATTN_ERROR_OUT_OF_MEMORY;
  }
  CacheBlob blob = {0};
  attn_status st = ATTN_SUCCESS;
  bool done = false;
  if (c->root) st = cache_disk_get(c, arch, key, compile, user, &blob, err,
                                   &done);
  if (!done) {
    c->compiles++;
    st = compile(user, &blob, err);
  }
  if (st != ATTN_SUCCESS) {
    cache_blob_free(&blob);
    return st;
  }
  if (cache_blob_copy(out, &blob) != 0 || cache_mem_add(c, key, &blob) != 0) {
    cache_blob_free(&blob);
    cache_blob_free(out);
    return ATTN_ERROR_OUT_OF_MEMORY;
  }
  return ATTN_SUCCESS;
}

/* --------------------------------------------------- `attnc cache` tools */

/* Calls fn on every file in ROOT/v1/ARCH/KK/, in no particular order. */
typedef void (*CacheVisitFn)(void *user, const char *arch, const char *dir,
                             const char *file);

static int cache_walk_dir(const char *path, const char *arch,
                          CacheVisitFn fn, void *user) {
  DIR *d = opendir(path);
  if (!d) return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    fn(user, arch ? arch : de->d_name, path, de->d_name);
  }
  closedir(d);
  return 0;
}

typedef struct CacheWalk {
  CacheVisitFn fn;
  void *user;
  int failed;
} CacheWalk;

static void cache_walk_shard(void *user, const char *arch, const char *dir,
                             const char *name) {
  CacheWalk *w = user;
  StrBuf p = {0};
  sb_printf(&p, "%s/%s", dir, name);
  /* Only the cache's own directories: never through a link. */
  if (cache_trusted_dir(p.data, false) == 0 && cache_walk_dir(p.data, arch, w->fn, w->user) != 0)
    w->failed = 1;
  sb_free(&p);
}

static void cache_walk_arch(void *user, const char *arch, const char *dir,
                            const char *name) {
  CacheWalk *w = user;
  StrBuf p = {0};
  sb_printf(&p, "%s/%s", dir, name);
  CacheWalk inner = {w->fn, w->user, 0};
  if (cache_trusted_dir(p.data, false) == 0 &&
      cache_walk_dir(p.data, arch, cache_walk_shard, &inner) != 0)
    w->failed = 1;
  w->failed |= inner.failed;
  sb_free(&p);
}

static int cache_walk(const char *root, CacheVisitFn fn, void *user) {
  StrBuf v1 = {0};
  sb_printf(&v1, "%s/v1", root);
  CacheWalk w = {fn, user, 0};
  int rc = 0;
  if (cache_trusted_dir(root, true) == 0 && cache_trusted_dir(v1.data, false) == 0)
    rc = cache_walk_dir(v1.data, NULL, cache_walk_arch, &w);
  else if (errno != ENOENT)
    rc = -1; /* a root or v1 someone else could write: not walked */
  sb_free(&v1);
  return rc == 0 && !w.failed ? 0 : -1;
}

static bool cache_has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

typedef struct CacheLines {
  char **v;
  int n, cap;
  bool nomem;
} CacheLines;

/* "SOURCE GRAPH[,GRAPH...]" from an entry's meta (its "source" line and
 * its plans' "graph" lines), " (backward)" after them for the program of a
 * module's backward (its "part backward" line); "? ?" when it has none or
 * cannot be read. */
static void cache_entry_names(const char *path, StrBuf *out) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  unsigned char h[CACHE_HEADER_SIZE];
  char *meta = NULL;
  uint64_t nmeta = 0;
  if (fd >= 0 && cache_read_all(fd, h, sizeof h) == 0 && memcmp(h, CACHE_MAGIC, 8) == 0 &&
      cache_get_u64(h + 8, 4) == CACHE_FORMAT_VERSION &&
      (nmeta = cache_get_u64(h + 64, 8)) > 0 && nmeta < (1 << 24)) {
    off_t at = (off_t)(CACHE_HEADER_SIZE + cache_get_u64(h + 48, 8) + cache_get_u64(h + 56, 8));
    meta = mem_alloc(nmeta + 1);
    if (meta && (lseek(fd, at, SEEK_SET) != at || cache_read_all(fd, (unsigned char *)meta, nmeta)))
      mem_free(meta), meta = NULL;
    if (meta) meta[nmeta] = '\0';
  }
  if (fd >= 0) close(fd);
  const char *src = meta ? strstr(meta, "source ") : NULL;
  if (!src || (src != meta && src[-1] != '\n')) {
    sb_puts(out, "? ?");
    mem_free(meta);
    return;
  }
  sb_printf(out, "%.*s ", (int)strcspn(src + 7, "\n"), src + 7);
  int n = 0;
  for (const char *g = meta; (g = strstr(g, "\ngraph ")); g += 7)
    sb_printf(out, "%s%.*s", n++ ? "," : "", (int)strcspn(g + 7, " \n"), g + 7);
  if (!n) sb_putc(out, '?');
  if (strstr(meta, "\npart backward\n")) sb_puts(out, " (backward)");
  mem_free(meta);
}

static void cache_list_one(void *user, const char *arch, const char *dir,
                           const char *name) {
  CacheLines *lines = user;
  if (!cache_has_suffix(name, ".bin") || name[0] == '.') return;
  StrBuf p = {0};
  sb_printf(&p, "%s/%s", dir, name);
  struct stat st;
  if (lstat(p.data, &st) == 0 && S_ISREG(st.st_mode) && cache_owned(&st) == 0) {
    char when[32];
    struct tm tm;
    time_t t = st.st_mtime;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", gmtime_r(&t, &tm));
    StrBuf names = {0};
    cache_entry_names(p.data, &names);
    p.len = 0;
    sb_printf(&p, "%s %.*s %lld %s UTC %s\n", arch, (int)(strlen(name) - 4),
              name, (long long)st.st_size, when, names.data ? names.data : "? ?");
    sb_free(&names);
    if (lines->n == lines->cap) {
      int cap = lines->cap ? 2 * lines->cap : 16;
      char **v = mem_realloc(lines->v, sizeof *v * (size_t)cap);
      if (!v) {
        lines->nomem = true;
        sb_free(&p);
        return;
      }
      lines->v = v;
      lines->cap = cap;
    }
    lines->v[lines->n++] = p.data;
    return;
  }
  sb_free(&p);
}

static int cache_cmp_lines(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int cache_list(const char *root, StrBuf *out) {
  CacheLines lines = {0};
  int rc = cache_walk(root, cache_list_one, &lines);
  if (lines.n) qsort(lines.v, (size_t)lines.n, sizeof *lines.v,
                     cache_cmp_lines);
  for (int i = 0; i < lines.n; i++) {
    if (rc == 0 && !lines.nomem) sb_puts(out, lines.v[i]);
    mem_free(lines.v[i]);
  }
  mem_free(lines.v);
  if (rc != 0 || lines.nomem) {
    out->len = 0;
    sb_printf(out, "cannot read the kernel cache at %s/v1: %s", root,
              lines.nomem ? "out of memory" : strerror(errno));
    return -1;
  }
  return 0;
}

typedef struct CacheClear {
  long entries, failed;
  long long bytes;
  int err;
} CacheClear;

/* Removes only what the cache writes: entries, locks and temp files. */
static void cache_clear_one(void *user, const char *arch, const char *dir,
                            const char *name) {
  CacheClear *cc = user;
  bool entry = cache_has_suffix(name, ".bin") && name[0] != '.';
  if (!entry && !cache_has_suffix(name, ".lock") &&
      strncmp(name, ".tmp-", 5) != 0)
    return;
  StrBuf p = {0};
  sb_printf(&p, "%s/%s", dir, name);
  struct stat st;
  long long size = lstat(p.data, &st) == 0 ? (long long)st.st_size : 0;
  if (unlink(p.data) == 0) {
    if (entry) {
      cc->entries++;
      cc->bytes += size;
    }
  } else if (errno != ENOENT) {
    cc->failed++;
    cc->err = errno;
  }
  sb_free(&p);
}

/* Then the emptied directories, deepest first; non-empty ones stay. */
static void cache_rmdir_shard(void *user, const char *arch, const char *dir,
                              const char *name) {
  StrBuf p = {0};
  sb_printf(&p, "%s/%s", dir, name);
  rmdir(p.data);
  sb_free(&p);
}

static void cache_rmdir_arch(void *user, const char *arch, const char *dir,
                             const char *name) {
  StrBuf p = {0};
  sb_printf(&p, "%s/%s", dir, name);
  if (cache_trusted_dir(p.data, false) == 0) {
    cache_walk_dir(p.data, arch, cache_rmdir_shard, NULL);
    rmdir(p.data);
  }
  sb_free(&p);
}

int cache_clear(const char *root, StrBuf *out) {
  CacheClear cc = {0};
  int rc = cache_walk(root, cache_clear_one, &cc);
  int walk_errno = errno;
  StrBuf v1 = {0};
  sb_printf(&v1, "%s/v1", root);
  if (cache_trusted_dir(v1.data, false) == 0) {
    cache_walk_dir(v1.data, NULL, cache_rmdir_arch, NULL);
    rmdir(v1.data);
  }
  if (rc != 0 || cc.failed) {
    sb_printf(out, "cannot clear the kernel cache at %s: %s", v1.data,
              strerror(cc.failed ? cc.err : walk_errno));
    sb_free(&v1);
    return -1;
  }
  sb_printf(out, "removed %ld cached kernel%s (%lld bytes) from %s\n",
            cc.entries, cc.entries == 1 ? "" : "s", cc.bytes, v1.data);
  sb_free(&v1);
  return 0;
}

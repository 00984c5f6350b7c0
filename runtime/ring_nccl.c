/* ring_nccl.c: the ring's transport over NCCL (attn_ring_create_nccl).
 *
 * libnccl is opened at run time, like libcuda: attnc builds and runs
 * without it, and a ring over NCCL finds the library the caller's
 * framework already loaded (PyTorch's nvidia-nccl wheel, Debian's
 * libnccl2) by its soname, or the file ATTN_NCCL names. Only the calls the
 * ring needs are looked up; their prototypes are NCCL's stable C ABI
 * (nccl.h, 2.x), declared here so that no header is needed to build. One
 * exchange is one group of sends to the next rank and receives from the
 * previous one, on the ring's stream. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

typedef int ncclResult_t; /* 0: ncclSuccess */
typedef struct ncclComm *ncclComm_t;
enum { NCCL_UINT8 = 1 }; /* ncclUint8 */

typedef struct RtNccl {
  void *handle;
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  ncclResult_t (*Send)(const void *, size_t, int, int, ncclComm_t, CUstream);
  ncclResult_t (*Recv)(void *, size_t, int, int, ncclComm_t, CUstream);
  ncclResult_t (*CommCount)(const ncclComm_t, int *);
  ncclResult_t (*CommUserRank)(const ncclComm_t, int *);
  const char *(*GetErrorString)(ncclResult_t);
  char why[512]; /* why it could not be opened */
} RtNccl;

static RtNccl rt_nccl;
static pthread_once_t rt_nccl_once = PTHREAD_ONCE_INIT;

static void rt_nccl_open(void) {
  const char *env = getenv("ATTN_NCCL");
  const char *const names[] = {env && *env ? env : "libnccl.so.2", "libnccl.so"};
  for (int k = 0; k < 2 && !rt_nccl.handle; k++) {
    rt_nccl.handle = dlopen(names[k], RTLD_NOW | RTLD_LOCAL);
    if (env && *env) break; /* the file named, or nothing */
  }
  if (!rt_nccl.handle) {
    const char *e = dlerror();
    snprintf(rt_nccl.why, sizeof rt_nccl.why, "libnccl not found (%s; set ATTN_NCCL to its path)",
             e ? e : "dlopen failed");
    return;
  }
  struct {
    void **slot;
    const char *sym;
  } want[] = {{(void **)&rt_nccl.GroupStart, "ncclGroupStart"},
              {(void **)&rt_nccl.GroupEnd, "ncclGroupEnd"},
              {(void **)&rt_nccl.Send, "ncclSend"},
              {(void **)&rt_nccl.Recv, "ncclRecv"},
              {(void **)&rt_nccl.CommCount, "ncclCommCount"},
              {(void **)&rt_nccl.CommUserRank, "ncclCommUserRank"},
              {(void **)&rt_nccl.GetErrorString, "ncclGetErrorString"}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    *want[k].slot = dlsym(rt_nccl.handle, want[k].sym);
    if (!*want[k].slot) {
      snprintf(rt_nccl.why, sizeof rt_nccl.why,
               "libnccl lacks %s (the ring needs NCCL 2.7 or later)", want[k].sym);
      dlclose(rt_nccl.handle);
      rt_nccl.handle = NULL;
      return;
    }
  }
}

static const RtNccl *rt_nccl_get(void) {
  pthread_once(&rt_nccl_once, rt_nccl_open);
  return rt_nccl.handle ? &rt_nccl : NULL;
}

typedef struct NcclPeer {
  const RtNccl *n;
  ncclComm_t comm;
  int next, prev;
} NcclPeer;

static int nccl_error(const NcclPeer *p, ncclResult_t r, const char *what, char *msg, size_t len) {
  snprintf(msg, len, "%s: %s (NCCL error %d)", what, p->n->GetErrorString(r), r);
  return 1;
}

static int nccl_exchange(void *user, int count, void *const *send, void *const *recv,
                         const size_t *bytes, void *stream, char *msg, size_t msg_len) {
  const NcclPeer *p = user;
  ncclResult_t r = p->n->GroupStart();
  if (r) return nccl_error(p, r, "ncclGroupStart", msg, msg_len);
  for (int k = 0; k < count; k++) {
    if (!bytes[k]) continue;
    /* Sends before receives in one group: NCCL pairs them without
     * deadlock whatever the ranks' order. */
    if ((r = p->n->Send(send[k], bytes[k], NCCL_UINT8, p->next, p->comm, (CUstream)stream)) ||
        (r = p->n->Recv(recv[k], bytes[k], NCCL_UINT8, p->prev, p->comm, (CUstream)stream))) {
      p->n->GroupEnd();
      return nccl_error(p, r, "ncclSend/ncclRecv", msg, msg_len);
    }
  }
  if ((r = p->n->GroupEnd())) return nccl_error(p, r, "ncclGroupEnd", msg, msg_len);
  return 0;
}

static void nccl_peer_free(void *user) { mem_free(user); }

attn_status attn_ring_create_nccl(attn_graph *g, void *nccl_comm, attn_ring_layout layout,
                                  attn_ring **out) {
  if (!g) return ATTN_ERROR_INVALID_ARGUMENT;
  attn_context *ctx = g->m->ctx;
  if (out) *out = NULL;
  if (!nccl_comm || !out)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_ring_create_nccl: %s is NULL",
                   out ? "the communicator" : "out");
  const RtNccl *n = rt_nccl_get();
  if (!n) return rt_fail(ctx, ATTN_ERROR_UNSUPPORTED, "attn_ring_create_nccl: %s", rt_nccl.why);
  int rank = -1, world = 0;
  ncclResult_t r = n->CommCount((ncclComm_t)nccl_comm, &world);
  if (!r) r = n->CommUserRank((ncclComm_t)nccl_comm, &rank);
  if (r)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_ring_create_nccl: the communicator's rank and size: %s (NCCL error %d)",
                   n->GetErrorString(r), r);
  NcclPeer *p = mem_alloc(sizeof *p);
  if (!p) return rt_fail(ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  *p = (NcclPeer){n, (ncclComm_t)nccl_comm, world > 0 ? (rank + 1) % world : 0,
                  world > 0 ? (rank + world - 1) % world : 0};
  attn_ring_transport t = {rank, world, nccl_exchange, p};
  return rt_ring_create(g, &t, nccl_peer_free, layout, out);
}

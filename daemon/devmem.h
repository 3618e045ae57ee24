/*
 * devmem.h - device memory in a session: a CUDA client's own allocation
 * opened through its IPC handle (BufferRegister, kind CUDA_IPC), or memory
 * the daemon allocates for the client and exports (DeviceAlloc). Opening,
 * allocating and releasing need the device's context, so they run on the
 * device's worker; the reply is sent when the worker is done.
 */
#ifndef GEMMD_DEVMEM_H
#define GEMMD_DEVMEM_H

#include <stdint.h>

#include "daemon/loop.h"
#include "daemon/session.h"

/* Opens a client's device memory; answers BufferReply or Error. The caller
 * has checked the per-session and per-user limits. Loop thread. */
void devmem_register(struct session *s, uint64_t rid, const Gemmd__V1__BufferRegister *m);

/* Allocates device memory for the session (counted in its quotas) and
 * answers BufferReply with its IPC handle, or Error. Loop thread. */
void devmem_alloc(struct session *s, uint64_t rid, const Gemmd__V1__DeviceAlloc *m);

/* Before the session's buffer b, a client's own device memory, is taken out
 * of its table for release request rid: has the Ack sent once the daemon's
 * mapping of it is closed (after the ops that use it), so that the client
 * may free the memory when gemmd_unregister returns (CUDA: freeing memory
 * another process still maps is undefined). Returns 1 when it will answer,
 * 0 when the caller answers now (not such a buffer). Loop thread. */
int devmem_release(struct session *s, struct gbuf *b, uint64_t rid);

#endif

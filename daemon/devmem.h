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

#endif

/*
 * client_internal.h - what the files of libgemmd share and nobody else sees.
 */
#ifndef GEMMD_CLIENT_INTERNAL_H
#define GEMMD_CLIENT_INTERNAL_H

#include <stdint.h>

#define GEMMD__IPC_HANDLE_BYTES 64u

/* What the daemon needs to open a range of device memory: the IPC handle of
 * the allocation holding it, the range's offset inside that allocation and
 * the device it lives on. */
struct gemmd__ipc {
        uint8_t handle[GEMMD__IPC_HANDLE_BYTES];
        uint32_t device;
        uint64_t offset;
};

/* Describes [dptr, dptr + bytes) of the calling thread's CUDA context,
 * loading the CUDA runtime with dlopen on first use (libgemmd itself never
 * links CUDA). Returns 0, GEMMD_EUNSUPPORTED where no CUDA runtime can be
 * loaded or no device works, GEMMD_EBOUNDS when the range runs past the end
 * of its allocation, or -EINVAL when dptr is not device memory. */
int gemmd__cuda_ipc_get(const void *dptr, uint64_t bytes, struct gemmd__ipc *ipc);

/* Opens a daemon's exported allocation (cudaIpcOpenMemHandle); undone by
 * gemmd__cuda_ipc_close. Returns 0, GEMMD_EUNSUPPORTED or GEMMD_EDEVICE. */
int gemmd__cuda_ipc_open(const uint8_t handle[GEMMD__IPC_HANDLE_BYTES], void **dptr);
void gemmd__cuda_ipc_close(void *dptr);

/* Makes `stream` (a cudaStream_t) wait for the daemon's IPC event `handle`,
 * opening it once per process. Returns 0, GEMMD_EUNSUPPORTED or
 * GEMMD_EDEVICE. Thread-safe. */
int gemmd__cuda_stream_wait(const uint8_t handle[GEMMD__IPC_HANDLE_BYTES], void *stream);

#endif /* GEMMD_CLIENT_INTERNAL_H */

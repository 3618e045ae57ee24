/*
 * cuda_ipc.c - the CUDA IPC handle of a device pointer, through a CUDA
 * runtime found at call time, so libgemmd links no CUDA library and works
 * unchanged on hosts without one.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "client/client_internal.h"
#include "gemmd.h"

/* The few CUDA entry points used, declared with plain C types: cudaError_t
 * and CUresult are ints, a cudaIpcMemHandle_t is 64 opaque bytes and a
 * CUdeviceptr is an unsigned long long. */
typedef int (*ipc_get_fn)(void *handle, void *dptr);
typedef int (*get_device_fn)(int *device);
typedef int (*addr_range_fn)(unsigned long long *base, size_t *size, unsigned long long dptr);
typedef int (*ptr_attr_fn)(void *data, int attribute, unsigned long long dptr);

#define CUDA_ERROR_INIT 3
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_INSUFFICIENT_DRIVER 35
#define CUDA_ERROR_NO_DEVICE 100
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9

/* Looks `sym` up in the process first (a client linked with the runtime
 * must use that one) and then in the first library of `libs` that loads.
 * Libraries stay loaded: a runtime must not go while its context lives. */
static void *find(const char *sym, const char *const *libs)
{
        void *p = dlsym(RTLD_DEFAULT, sym), *h;

        for (; !p && *libs; libs++) {
                h = dlopen(*libs, RTLD_NOW | RTLD_LOCAL);
                if (h)
                        p = dlsym(h, sym);
        }
        return p;
}

static const char *const cudart_libs[] = {
        "libcudart.so",    "libcudart.so.13", "libcudart.so.12",
        "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so", NULL,
};
static const char *const cuda_libs[] = { "libcuda.so.1", "libcuda.so", NULL };

int gemmd__cuda_ipc_get(const void *dptr, uint64_t bytes, struct gemmd__ipc *ipc)
{
        ipc_get_fn ipc_get = (ipc_get_fn)find("cudaIpcGetMemHandle", cudart_libs);
        get_device_fn get_device = (get_device_fn)find("cudaGetDevice", cudart_libs);
        addr_range_fn range;
        ptr_attr_fn attr;
        unsigned long long base, p = (unsigned long long)(uintptr_t)dptr;
        size_t size;
        int dev, err;

        if (!ipc_get || !get_device)
                return GEMMD_EUNSUPPORTED;
        memset(ipc, 0, sizeof(*ipc));
        err = ipc_get(ipc->handle, (void *)dptr);
        if (err == CUDA_ERROR_INIT || err == CUDA_ERROR_STUB_LIBRARY ||
            err == CUDA_ERROR_INSUFFICIENT_DRIVER || err == CUDA_ERROR_NO_DEVICE)
                return GEMMD_EUNSUPPORTED;
        if (err)
                return -EINVAL;
        /* The handle names the whole allocation: the daemon needs the range's
         * place in it. The runtime made its context current above, so the
         * driver calls below see the same allocation. */
        range = (addr_range_fn)find("cuMemGetAddressRange_v2", cuda_libs);
        attr = (ptr_attr_fn)find("cuPointerGetAttribute", cuda_libs);
        if (range && !range(&base, &size, p)) {
                ipc->offset = p - base;
                if (ipc->offset > size || bytes > size - ipc->offset)
                        return GEMMD_EBOUNDS;
        }
        if (attr && !attr(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p))
                ipc->device = (uint32_t)dev;
        else if (!get_device(&dev))
                ipc->device = (uint32_t)dev;
        return 0;
}

/* CUDA's IPC handles are 64-byte structs passed by value. */
struct h64 {
        unsigned char bytes[GEMMD__IPC_HANDLE_BYTES];
};
typedef int (*open_mem_fn)(void **dptr, struct h64 handle, unsigned flags);
typedef int (*close_mem_fn)(void *dptr);
typedef int (*open_event_fn)(void **event, struct h64 handle);
typedef int (*stream_wait_fn)(void *stream, void *event, unsigned flags);

#define CUDA_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 1u

int gemmd__cuda_ipc_open(const uint8_t handle[GEMMD__IPC_HANDLE_BYTES], void **dptr)
{
        open_mem_fn open_mem = (open_mem_fn)find("cudaIpcOpenMemHandle", cudart_libs);
        struct h64 h;

        if (!open_mem)
                return GEMMD_EUNSUPPORTED;
        memcpy(h.bytes, handle, sizeof(h.bytes));
        return open_mem(dptr, h, CUDA_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ? GEMMD_EDEVICE : 0;
}

void gemmd__cuda_ipc_close(void *dptr)
{
        close_mem_fn close_mem = (close_mem_fn)find("cudaIpcCloseMemHandle", cudart_libs);

        if (close_mem)
                close_mem(dptr);
}

/* Opened event handles, per process: the daemon records a small ring of
 * events per device, so this stays short. */
#define EVENT_CACHE 64
static struct {
        unsigned char handle[GEMMD__IPC_HANDLE_BYTES];
        void *event;
} events[EVENT_CACHE];
static int nevents;
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

int gemmd__cuda_stream_wait(const uint8_t handle[GEMMD__IPC_HANDLE_BYTES], void *stream)
{
        open_event_fn open_event = (open_event_fn)find("cudaIpcOpenEventHandle", cudart_libs);
        stream_wait_fn wait = (stream_wait_fn)find("cudaStreamWaitEvent", cudart_libs);
        void *ev = NULL;
        int err = 0;

        if (!open_event || !wait)
                return GEMMD_EUNSUPPORTED;
        pthread_mutex_lock(&events_lock);
        for (int i = 0; i < nevents; i++)
                if (!memcmp(events[i].handle, handle, GEMMD__IPC_HANDLE_BYTES))
                        ev = events[i].event;
        if (!ev) {
                struct h64 h;

                memcpy(h.bytes, handle, sizeof(h.bytes));
                if (open_event(&ev, h)) {
                        err = GEMMD_EDEVICE;
                } else if (nevents < EVENT_CACHE) {
                        memcpy(events[nevents].handle, handle, GEMMD__IPC_HANDLE_BYTES);
                        events[nevents++].event = ev;
                }
        }
        pthread_mutex_unlock(&events_lock);
        if (!err && wait(stream, ev, 0))
                err = GEMMD_EDEVICE;
        return err;
}

/*
 * gemmd.h - client library for gemmd, the GEMM/SYR2K service daemon.
 *
 * Overview
 * --------
 * A process connects to gemmd over a Unix socket (gemmd_connect), describes
 * its operands as buffers the daemon can reach, and submits operations:
 *
 *   GEMM   C = alpha * op(A) * op(B) + beta * C
 *   SYR2K  C = alpha * (op(A) * op(B)^T + op(B) * op(A)^T) + beta * C
 *          (only the `uplo` triangle of C is read or written)
 *
 * Matrices follow BLAS conventions: column-major, op is N or T, m/n/k are
 * the sizes of op(A) (m x k), op(B) (k x n) and C (m x n); lda, ldb, ldc are
 * leading dimensions in elements. GEMMD_OPF_ROW_MAJOR switches an op to
 * row-major storage (NumPy/C order) with the same meaning of m, n, k.
 * For SYR2K, n is the order of C and k the rank; op N means A and B are
 * n x k, op T means they are k x n. trans_a carries the op; trans_b is
 * ignored.
 *
 * Data types: f32, f16 and bf16 inputs accumulate in f32; f64 inputs in f64.
 * C has the input type. f64 runs only where a device runs it (struct
 * gemmd_device's dtypes; the CPU and CUDA backends do): elsewhere an f64
 * op is refused with GEMMD_EUNSUPPORTED. An f32 op may set
 * GEMMD_OPF_ALLOW_TF32 to let a GPU use TF32 tensor cores (the CPU backend
 * always computes exact f32).
 *
 * Operands live in one of three places:
 *   - host shared memory created by gemmd_buffer_alloc (zero-copy: the daemon
 *     maps the same pages);
 *   - device memory registered with gemmd_register_device (CUDA IPC);
 *   - inline bytes carried in the request (small requests only; the limit is
 *     in struct gemmd_info). An inline C is returned in the completion.
 *
 * Every operation is validated by the daemon against the session's buffers
 * before anything is queued: an op that would touch a byte outside its
 * buffer is rejected and nothing of that submit is computed.
 *
 * Errors
 * ------
 * Every fallible function returns 0 on success or a negative value: a
 * negative errno for system errors (-ECONNREFUSED, -ENOMEM, -ETIMEDOUT...)
 * or one of the GEMMD_E* codes below. gemmd_strerror() describes either.
 * GEMMD_E* codes are stable: new ones are appended, none is renumbered.
 *
 * Threads
 * -------
 * A gemmd_client handle is not thread-safe: use it from one thread at a time
 * (or give each thread its own handle). Distinct handles are independent.
 * gemmd_strerror() is thread-safe.
 */
#ifndef GEMMD_H
#define GEMMD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the wire protocol this header speaks. */
#define GEMMD_PROTOCOL_VERSION 1

/* Default socket path when neither an argument nor $GEMMD_SOCKET names one. */
#define GEMMD_DEFAULT_SOCKET "/run/gemmd/gemmd.sock"

/* A wait for a reply (gemmd_wait, gemmd_run, the synchronous calls) first
 * polls the socket this many microseconds without sleeping, then sleeps in
 * poll(); on a machine with fewer than 4 CPUs it never polls. Long enough
 * for the answer to a client with several requests in flight on a busy
 * GPU: past it, the answer is a wake-up, which costs the daemon's event
 * loop a socket write and the client the scheduler's delay. $GEMMD_SPIN_US,
 * read by gemmd_connect, overrides both (0: never poll; at most 1000000).
 * A client with rings does not poll while the daemon asks its clients to
 * sleep (gemmd --client-poll-max): its host has no CPU to spare for it. */
#define GEMMD_DEFAULT_SPIN_US 200

/* Error codes. The number after the minus sign minus 1000 equals the
 * gemmd.v1.Code value on the wire. Appended only, never renumbered. */
#define GEMMD_EBASE        (-1000)
#define GEMMD_EPROTO       (-1001) /* malformed frame or message */
#define GEMMD_EVERSION     (-1002) /* protocol version not supported */
#define GEMMD_ETOOBIG      (-1003) /* frame larger than the daemon's limit */
#define GEMMD_EINVAL       (-1004) /* an op field is invalid (size, ld, enum) */
#define GEMMD_EBOUNDS      (-1005) /* an op reaches outside its buffer */
#define GEMMD_EOVERFLOW    (-1006) /* size arithmetic overflows */
#define GEMMD_ENOBUF       (-1007) /* unknown buffer id for this session */
#define GEMMD_EBUSY        (-1008) /* queue or per-session in-flight cap full */
#define GEMMD_ELIMIT       (-1009) /* a configured limit was exceeded */
#define GEMMD_EUNSUPPORTED (-1010) /* not supported by this daemon/backend */
#define GEMMD_EDEVICE      (-1011) /* the device failed while running the op */
#define GEMMD_ESHUTDOWN    (-1012) /* the daemon is shutting down */
#define GEMMD_ECANCELED    (-1013) /* the op was dropped before it ran */
#define GEMMD_EDISCONNECT  (-1014) /* the connection to the daemon was lost */
#define GEMMD_EPERM        (-1015) /* not allowed for this user */
#define GEMMD_ENOTICKET    (-1016) /* unknown ticket */
#define GEMMD_ERESOURCE    (-1017) /* the daemon ran out of memory or another resource */
#define GEMMD_ELAST        (-1017)

enum gemmd_op_kind { GEMMD_GEMM = 0, GEMMD_SYR2K = 1 };
enum gemmd_dtype { GEMMD_F32 = 0, GEMMD_F16 = 1, GEMMD_BF16 = 2, GEMMD_F64 = 3 };
enum gemmd_trans { GEMMD_OP_N = 0, GEMMD_OP_T = 1 };
enum gemmd_uplo { GEMMD_LOWER = 0, GEMMD_UPPER = 1 };

#define GEMMD_OPF_ROW_MAJOR  0x1u
#define GEMMD_OPF_ALLOW_TF32 0x2u
/* For tests of the daemon's fault handling: the op's group makes the GPU
 * fail. Only a daemon built for fault injection accepts it; any other
 * rejects the submit with GEMMD_EUNSUPPORTED. */
#define GEMMD_OPF_DEBUG_FAULT 0x80000000u

/* Priorities: a higher level is always taken first by the batcher. */
enum gemmd_priority { GEMMD_PRIO_LOW = 0, GEMMD_PRIO_NORMAL = 1, GEMMD_PRIO_HIGH = 2 };

/* OR'ed into gemmd_submit's priority: have the daemon tell when the ops are
 * queued on the GPU, so gemmd_stream_wait() can make a CUDA stream wait for
 * them without waiting for the completion. */
#define GEMMD_SUBMIT_LAUNCH_EVENTS 0x100

typedef struct gemmd_client gemmd_client;
typedef uint64_t gemmd_buffer; /* per-session buffer id; 0 is never valid */
typedef uint64_t gemmd_ticket; /* per-client submit id; 0 is never valid */

/* Where an operand lives. Either buffer != 0 (bytes at `offset` inside that
 * buffer) or buffer == 0 and the operand is inline: `data` points at
 * `bytes` bytes that are copied into the request (for C, the input C; may be
 * NULL when beta == 0), and, for C only, `out` names where the result is
 * written when the submit completes. The caller keeps `out` valid until the
 * ticket is waited for. */
struct gemmd_operand {
        gemmd_buffer buffer;
        uint64_t offset;
        const void *data;
        void *out;
        uint64_t bytes;
};

struct gemmd_op {
        enum gemmd_op_kind kind;
        enum gemmd_dtype dtype;
        enum gemmd_trans trans_a; /* SYR2K: the op of both A and B */
        enum gemmd_trans trans_b;
        enum gemmd_uplo uplo; /* SYR2K only */
        uint32_t flags;       /* GEMMD_OPF_* */
        int64_t m, n, k;      /* SYR2K: m is ignored (C is n x n) */
        int64_t lda, ldb, ldc;
        /* beta scales the input C; here it is always explicit (0 ignores
         * C's input, which may then be absent). The front ends share one
         * rule for leaving it out (gemmctl, Python): when C is given and
         * beta is not, beta is 1; when C is not given, C is zero and beta
         * must be 0 or left out. */
        /* An f64 op uses them as given; every other dtype rounds them to
         * float (the wire carries them as float then). */
        double alpha, beta;
        struct gemmd_operand a, b, c;
};

/* Per-op outcome of a completed submit. */
struct gemmd_result {
        int status;          /* 0 or a negative code */
        uint64_t queue_us;   /* admitted -> group launched */
        uint64_t run_us;     /* group launched -> this op's C done (on a GPU, the
                              * group's end unless it was answered early) */
        uint64_t group_id;   /* the group the op ran in */
        uint32_t group_size; /* ops in that group */
        char kernel[32];     /* kernel config that ran it */
        /* The daemon's CLOCK_MONOTONIC, ns, when it admitted the request
         * and when it packed this reply (0 from a daemon that does not
         * send them). On the daemon's host they compare with the caller's
         * own clock_gettime(CLOCK_MONOTONIC): submit -> admit_ns and
         * reply_ns -> wait's return are the socket hops. */
        uint64_t admit_ns, reply_ns;
        /* A request that succeeded may have been answered by a completion
         * word (see gemmd_connect) instead of a reply: its status is then
         * 0 and every other field here 0 or empty. */
};

struct gemmd_info {
        uint32_t protocol_version;
        char server_version[32];
        char backend[16]; /* "cpu" or "cuda" */
        uint32_t ndevices;
        uint64_t session_id;
        uint64_t max_frame_bytes;
        uint32_t max_ops_per_submit;
        uint64_t max_inline_bytes;
        uint32_t max_inflight_ops;   /* per session */
        uint32_t max_buffers;        /* per session */
        uint64_t max_buffer_bytes;   /* per buffer */
        uint32_t max_queue_ops;      /* whole daemon */
        /* Appended fields (0 from a daemon that does not send them). */
        uint32_t max_sessions;          /* whole daemon: concurrent connections */
        uint32_t max_user_inflight_ops; /* per user (uid), all its sessions */
        uint64_t max_user_buffer_bytes; /* per user: registered bytes */
        uint32_t max_user_share;        /* per user: percent of a device kept while others wait */
        uint32_t max_user_sessions;     /* per user: concurrent connections */
        /* Room for fields of later versions, so that the size of this
         * struct (which callers allocate) never changes: zero for now. New
         * fields take the place of reserved words, never grow the struct. */
        uint32_t reserved[32];
};

/* One device of the daemon, as its handshake described it. */
struct gemmd_device {
        uint32_t index;
        char name[64];
        char backend[16]; /* "cpu" or "cuda" */
        uint32_t units;   /* SMs, or CPU threads */
        uint64_t memory_bytes;
        /* The dtypes it runs: bit (1u << d) for each enum gemmd_dtype d.
         * An op of a dtype no device runs is refused with
         * GEMMD_EUNSUPPORTED. */
        uint32_t dtypes;
};

/* Connects to the daemon at `socket_path` (NULL: $GEMMD_SOCKET, else
 * GEMMD_DEFAULT_SOCKET) and performs the handshake. On success *out owns a
 * new handle that the caller frees with gemmd_disconnect(). Returns 0,
 * a negative errno, or GEMMD_EVERSION. When the daemon takes them, the
 * handle also shares a pair of rings with it (about 320 KiB of shared
 * memory) through which small submits and their completions skip the
 * socket's system calls; $GEMMD_RING=0 keeps the handle to the socket.
 * With the rings come 4 KiB of completion words, after them in the same
 * shared memory: a request whose results all land in registered memory
 * names one, and its success is then one 8-byte store, by the daemon or,
 * for one op on a GPU, by the GPU itself the moment its C is whole;
 * failures still come as replies. $GEMMD_WORDS=0 goes without them (every
 * result then carries its timings). */
int gemmd_connect(const char *socket_path, gemmd_client **out);

/* Closes the connection and frees the handle and every host buffer it
 * allocated (their pointers become invalid). Accepts NULL. Results of
 * tickets not yet waited for are lost; the daemon drops their queued ops.
 * With no request in flight, it first unregisters the device memory of
 * gemmd_register_device (one round trip each, as gemmd_unregister, and at
 * most 10 s in all), so that the caller may free that memory once it
 * returns. */
void gemmd_disconnect(gemmd_client *c);

/* Copies the daemon's handshake answer (limits, backend) into *info. */
int gemmd_get_info(const gemmd_client *c, struct gemmd_info *info);

/* How long, in microseconds, this handle's waits poll before they sleep
 * (GEMMD_DEFAULT_SPIN_US or $GEMMD_SPIN_US, see above); for programs that
 * wait on gemmd_fd() themselves and want to behave the same. */
uint32_t gemmd_spin_us(const gemmd_client *c);

/* Copies device i (0 .. info.ndevices - 1) of the handshake answer into
 * *dev. Returns 0, or -EINVAL for a bad index. */
int gemmd_get_device(const gemmd_client *c, uint32_t i, struct gemmd_device *dev);

/* Allocates `bytes` of host shared memory, maps it into this process and
 * registers it with the daemon. *id receives the buffer id, *ptr the
 * mapping (owned by the library, valid until gemmd_buffer_free or
 * gemmd_disconnect). Blocks for one round trip. */
int gemmd_buffer_alloc(gemmd_client *c, uint64_t bytes, gemmd_buffer *id, void **ptr);

/* Unregisters and unmaps a buffer from gemmd_buffer_alloc. The daemon keeps
 * its own mapping until in-flight ops using it finish. Blocks for one round
 * trip. Returns GEMMD_ENOBUF for an unknown id. */
int gemmd_buffer_free(gemmd_client *c, gemmd_buffer id);

/* Registers device memory [dptr, dptr + bytes) of the calling process's
 * current CUDA device through a CUDA IPC handle. The caller keeps the
 * memory allocated until gemmd_unregister() returns. Returns
 * GEMMD_EUNSUPPORTED where the library or the daemon has no CUDA.
 * The daemon's kernels do not wait on the caller's CUDA work: what writes
 * the memory must have finished on the device before a submit that reads
 * it (synchronize its stream; a cudaMemcpy from pageable host memory can
 * return before its data has landed, and the GPU may not run this
 * process's queued work before the daemon's). */
int gemmd_register_device(gemmd_client *c, const void *dptr, uint64_t bytes, gemmd_buffer *id);

/* Unregisters a buffer from gemmd_register_device or gemmd_device_alloc
 * (the latter's memory is unmapped here and freed by the daemon once no op
 * uses it). For the former it returns once the daemon has closed its
 * mapping, after the ops in flight that use the memory: the caller may
 * free it then (CUDA leaves freeing memory another process still maps
 * undefined). */
int gemmd_unregister(gemmd_client *c, gemmd_buffer id);

/* Has the daemon allocate `bytes` of device memory on CUDA device `device`
 * (counted against the session's quotas), and maps it into this process
 * through CUDA IPC: *dptr is a device pointer valid in the calling
 * process's context of that device until gemmd_unregister(c, *id) or
 * gemmd_disconnect. Blocks for one round trip. Returns GEMMD_EUNSUPPORTED
 * without a CUDA runtime here or a CUDA backend there. */
int gemmd_device_alloc(gemmd_client *c, uint64_t bytes, uint32_t device, gemmd_buffer *id,
                       void **dptr);

/* Makes the CUDA stream `stream` (a cudaStream_t; NULL is the legacy
 * default stream) wait on the device until the ops of `ticket` are done,
 * without blocking the calling thread for longer than it takes the daemon
 * to queue them (up to timeout_ms, -1: no limit). The submit must have
 * carried GEMMD_SUBMIT_LAUNCH_EVENTS, else GEMMD_EUNSUPPORTED. The ticket
 * stays valid: collect it with gemmd_wait as usual. Returns 0, the
 * submit's failure code if it failed before reaching the device,
 * -ETIMEDOUT, or GEMMD_EDEVICE. */
int gemmd_stream_wait(gemmd_client *c, gemmd_ticket ticket, void *stream, int timeout_ms);

/* Submits `nops` ops (1 .. max_ops_per_submit) as one request and returns
 * at once; *ticket identifies it for gemmd_wait/gemmd_poll. `ops` and the
 * inline input bytes are copied before return. Rejections found by the
 * daemon (validation, admission) are reported by gemmd_wait as the submit's
 * status. Returns a negative code only for local failures (bad arguments,
 * inline data over the limit, connection lost).
 * Ops in flight together, of one submit or of several, run in no given
 * order and may run at the same time: an op that reads what another
 * writes, or writes where another reads or writes, is submitted after that
 * one has completed (or, on the device, after gemmd_stream_wait). */
int gemmd_submit(gemmd_client *c, const struct gemmd_op *ops, size_t nops, int priority,
                 gemmd_ticket *ticket);

/* Waits up to timeout_ms (-1: forever) for `ticket` to complete. On return
 * 0, results[0 .. min(nresults, nops)) hold the per-op outcomes (results may
 * be NULL) and the ticket is forgotten. Returns the submit's status: 0 when
 * every op succeeded, else the first failing op's code (or the rejection
 * code for the whole submit), -ETIMEDOUT on timeout (the ticket stays
 * valid), GEMMD_ENOTICKET for an unknown ticket. */
int gemmd_wait(gemmd_client *c, gemmd_ticket ticket, int timeout_ms, struct gemmd_result *results,
               size_t nresults);

/* A file descriptor that becomes readable when completions may be waiting,
 * for use in another event loop (poll/epoll/libuv). Owned by the handle. */
int gemmd_fd(const gemmd_client *c);

/* Reads whatever the daemon has sent without blocking, and returns 1 and
 * stores a completed ticket in *ticket if one is ready (collect it with
 * gemmd_wait(c, *ticket, 0, ...)), 0 if none is, or a negative code. */
int gemmd_poll(gemmd_client *c, gemmd_ticket *ticket);

/* Waits up to timeout_ms (-1: forever; 0: only looks) until some ticket
 * completes, and returns 1 with it in *ticket (collect it with
 * gemmd_wait(c, *ticket, 0, ...)), 0 if none did in time, or a negative
 * code. Like gemmd_poll, each completed ticket is handed out once. It
 * polls for GEMMD_SPIN_US before it sleeps, as gemmd_wait does. A program
 * that keeps requests in flight waits here rather than in a loop of
 * gemmd_poll: a gemmd_poll that finds nothing tells the daemon that its
 * caller may sleep on gemmd_fd(), so the next completion comes by the
 * socket instead of the faster shared ring. */
int gemmd_wait_any(gemmd_client *c, int timeout_ms, gemmd_ticket *ticket);

/* Convenience: submit + wait. */
int gemmd_run(gemmd_client *c, const struct gemmd_op *ops, size_t nops, struct gemmd_result *results);

/* Fetches the daemon's statistics as text (json == 0) or JSON (json != 0).
 * *text is a NUL-terminated string the caller frees with free(). */
int gemmd_stats(gemmd_client *c, int json, char **text);

/* The daemon's own words for the last error it reported on this
 * connection (a rejected submit or call: "op 0: A: bytes [0, 4100) reach
 * past the end of buffer 1 (4096 bytes)"), or "" if none. A synchronous
 * call (buffer, registration, stats) clears it first, so after one fails
 * it is that call's reason or "". Valid until the next call on the handle. */
const char *gemmd_last_error(const gemmd_client *c);

/* Returns a static description of a code returned by this library (a
 * negative errno or GEMMD_E*). Never NULL. */
const char *gemmd_strerror(int code);

/* Bytes of a dtype's element (4, 2, 2 or 8), or 0 for an unknown dtype. */
size_t gemmd_dtype_size(enum gemmd_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* GEMMD_H */

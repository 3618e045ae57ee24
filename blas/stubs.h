/*
 * stubs.h - the assembler macros of the generated forwarding stubs
 * (blas/gen-stubs.sh writes build/blas/stubs.S with them).
 *
 * STUB(name, i) defines the exported function `name`: one indirect jump
 * through gemmd_blas__fwd[i], and name##_slow, where the table's entry
 * points until the fallback BLAS is resolved. A slow stub puts i in a
 * scratch register and goes to gemmd_blas__slow, which saves every register
 * that can carry an argument (integer, vector, and the vector count of a
 * variadic call), asks gemmd_blas__resolve(i) (blas/fallback.c) for the
 * fallback's address, restores them and jumps there: the callee sees the
 * original call, whatever its prototype.
 */
#ifndef GEMMD_BLAS_STUBS_H
#define GEMMD_BLAS_STUBS_H

#if defined(__x86_64__)

#define STUBS_BEGIN .text;

#define STUB(name, i)                                                                    \
        .globl name; .type name, @function; .p2align 4;                                  \
        name: jmp *gemmd_blas__fwd + 8 * (i)(%rip); .size name, . - name;                \
        .type name##_slow, @function; name##_slow: movl $(i), %r11d; jmp gemmd_blas__slow; \
        .size name##_slow, . - name##_slow;

#define STUBS_END(n)                                                                     \
        .p2align 4; .type gemmd_blas__slow, @function; gemmd_blas__slow:                 \
        pushq %rbp; movq %rsp, %rbp;                                                     \
        pushq %rdi; pushq %rsi; pushq %rdx; pushq %rcx; pushq %r8; pushq %r9;            \
        pushq %rax; pushq %r10; subq $128, %rsp;                                         \
        movdqu %xmm0, 0(%rsp); movdqu %xmm1, 16(%rsp); movdqu %xmm2, 32(%rsp);           \
        movdqu %xmm3, 48(%rsp); movdqu %xmm4, 64(%rsp); movdqu %xmm5, 80(%rsp);          \
        movdqu %xmm6, 96(%rsp); movdqu %xmm7, 112(%rsp);                                 \
        movl %r11d, %edi; call gemmd_blas__resolve; movq %rax, %r11;                     \
        movdqu 0(%rsp), %xmm0; movdqu 16(%rsp), %xmm1; movdqu 32(%rsp), %xmm2;           \
        movdqu 48(%rsp), %xmm3; movdqu 64(%rsp), %xmm4; movdqu 80(%rsp), %xmm5;          \
        movdqu 96(%rsp), %xmm6; movdqu 112(%rsp), %xmm7; addq $128, %rsp;                \
        popq %r10; popq %rax; popq %r9; popq %r8; popq %rcx; popq %rdx; popq %rsi;       \
        popq %rdi; popq %rbp; jmp *%r11;                                                 \
        .size gemmd_blas__slow, . - gemmd_blas__slow;

#define TABLE_BEGIN                                                                      \
        .data; .p2align 3; .globl gemmd_blas__fwd; .hidden gemmd_blas__fwd;              \
        .type gemmd_blas__fwd, @object; gemmd_blas__fwd:
#define ENTRY(name) .quad name##_slow;
#define TABLE_END .size gemmd_blas__fwd, . - gemmd_blas__fwd; .section .note.GNU-stack, "", @progbits

#elif defined(__aarch64__)

#define STUBS_BEGIN .text;

#define STUB(name, i)                                                                    \
        .globl name; .type name, %function; .p2align 4;                                  \
        name: adrp x16, gemmd_blas__fwd + 8 * (i);                                       \
        ldr x16, [x16, #:lo12:gemmd_blas__fwd + 8 * (i)]; br x16; .size name, . - name;  \
        .type name##_slow, %function; name##_slow: mov x17, #(i); b gemmd_blas__slow;    \
        .size name##_slow, . - name##_slow;

#define STUBS_END(n)                                                                     \
        .p2align 4; .type gemmd_blas__slow, %function; gemmd_blas__slow:                 \
        stp x29, x30, [sp, #-224]!; mov x29, sp;                                         \
        stp x0, x1, [sp, #16]; stp x2, x3, [sp, #32]; stp x4, x5, [sp, #48];             \
        stp x6, x7, [sp, #64]; str x8, [sp, #80];                                        \
        stp q0, q1, [sp, #96]; stp q2, q3, [sp, #128]; stp q4, q5, [sp, #160];           \
        stp q6, q7, [sp, #192];                                                          \
        mov w0, w17; bl gemmd_blas__resolve; mov x16, x0;                                \
        ldp x0, x1, [sp, #16]; ldp x2, x3, [sp, #32]; ldp x4, x5, [sp, #48];             \
        ldp x6, x7, [sp, #64]; ldr x8, [sp, #80];                                        \
        ldp q0, q1, [sp, #96]; ldp q2, q3, [sp, #128]; ldp q4, q5, [sp, #160];           \
        ldp q6, q7, [sp, #192];                                                          \
        ldp x29, x30, [sp], #224; br x16;                                                \
        .size gemmd_blas__slow, . - gemmd_blas__slow;

#define TABLE_BEGIN                                                                      \
        .data; .p2align 3; .globl gemmd_blas__fwd; .hidden gemmd_blas__fwd;              \
        .type gemmd_blas__fwd, %object; gemmd_blas__fwd:
#define ENTRY(name) .quad name##_slow;
#define TABLE_END .size gemmd_blas__fwd, . - gemmd_blas__fwd; .section .note.GNU-stack, "", %progbits

#else
#error "libblas.so.3 of gemmd has forwarding stubs for x86_64 and aarch64 only"
#endif

#endif /* GEMMD_BLAS_STUBS_H */

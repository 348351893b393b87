/* uint64_t sum_u64(const uint64_t *xs, size_t n): x86-64 System V. */
    .text
    .globl  sum_u64
    .type   sum_u64, @function
sum_u64:
    xorl    %eax, %eax
    testq   %rsi, %rsi
    je      2f
1:  addq    (%rdi), %rax
    addq    $8, %rdi
    decq    %rsi
    jne     1b
2:  ret
    .size   sum_u64, .-sum_u64
    .section .note.GNU-stack,"",@progbits

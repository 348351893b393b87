  .text
  .globl rotate3
  .type rotate3, @function
rotate3:
  movl %edi, %eax
  roll $3, %eax
  ret
  .section .note.GNU-stack,"",@progbits

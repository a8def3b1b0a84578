/* clone3_x86_64.S: clone3 onto a fresh stack, running fn(arg) in the child.
 *
 * glibc 2.36 exports no clone3 wrapper, and a raw syscall() cannot switch
 * stacks: the child would return through the parent's frames. This is the
 * same trampoline glibc uses internally, for
 *
 *   long sandbox_clone3(struct clone_args *args, size_t size,
 *                       int (*fn)(void *), void *arg);
 *
 * Parent: returns the child's pid or -errno. Child: calls fn(arg) on the
 * stack from args and exits with its return value (it normally execs). */
	.text
	.globl	sandbox_clone3
	.type	sandbox_clone3, @function
sandbox_clone3:
	.cfi_startproc
	mov	%rdx, %r8		/* fn: r8 and r9 survive the syscall */
	mov	%rcx, %r9		/* arg */
	mov	$435, %eax		/* __NR_clone3 */
	syscall
	test	%rax, %rax
	jnz	1f			/* parent, or error */
	/* Child, on the new stack (16-byte aligned by the caller). */
	.cfi_undefined rip
	xor	%ebp, %ebp
	mov	%r9, %rdi
	call	*%r8
	mov	%eax, %edi
	mov	$60, %eax		/* __NR_exit */
	syscall
	hlt
1:	ret
	.cfi_endproc
	.size	sandbox_clone3, .-sandbox_clone3
	.section .note.GNU-stack,"",@progbits

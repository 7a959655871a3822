/* SPDX-License-Identifier: MIT */
/*
 * The only instructions of the library that touch memory the program
 * passed in. A fault on one of them resumes at shunt_ucopy_fixup (fault.c),
 * the way the kernel's exception tables turn a fault in copy_from_user into
 * a short count: every routine keeps the bytes it has left in rcx + rdx at
 * each instruction that can fault, and uses no stack, so the fixup returns
 * that sum straight to the caller.
 */
#if defined(__x86_64__)

	.text

/* size_t shunt_ucopy(void *dst, const void *src, size_t n): bytes not copied. */
	.balign 16
	.globl	shunt_ucopy
	.hidden	shunt_ucopy
	.type	shunt_ucopy, @function
	.globl	shunt_ucopy_begin
	.hidden	shunt_ucopy_begin
shunt_ucopy_begin:
shunt_ucopy:
	.cfi_startproc
	mov	%rdx, %rcx
	xor	%edx, %edx
	rep movsb
	xor	%eax, %eax
	ret
	.cfi_endproc
	.size	shunt_ucopy, . - shunt_ucopy

/*
 * size_t shunt_ucopy_nt(void *dst, const void *src, size_t n): the same into
 * a ring, with streaming stores past the cache (common/copy.h says why);
 * the caller fences them before publishing.
 */
	.balign 16
	.globl	shunt_ucopy_nt
	.hidden	shunt_ucopy_nt
	.type	shunt_ucopy_nt, @function
shunt_ucopy_nt:
	.cfi_startproc
	/* Up to 16-byte alignment of the destination, byte by byte. */
	mov	%rdi, %rcx
	neg	%rcx
	and	$15, %rcx
	cmp	%rdx, %rcx
	cmova	%rdx, %rcx
	sub	%rcx, %rdx
	rep movsb
	cmp	$64, %rdx
	jb	2f
1:	/* All four loads before any store: a fault leaves this block uncopied. */
	movdqu	(%rsi), %xmm0
	movdqu	16(%rsi), %xmm1
	movdqu	32(%rsi), %xmm2
	movdqu	48(%rsi), %xmm3
	movntdq	%xmm0, (%rdi)
	movntdq	%xmm1, 16(%rdi)
	movntdq	%xmm2, 32(%rdi)
	movntdq	%xmm3, 48(%rdi)
	add	$64, %rsi
	add	$64, %rdi
	sub	$64, %rdx
	cmp	$64, %rdx
	jae	1b
2:	mov	%rdx, %rcx
	xor	%edx, %edx
	rep movsb
	xor	%eax, %eax
	ret
	.cfi_endproc
	.size	shunt_ucopy_nt, . - shunt_ucopy_nt

	.globl	shunt_ucopy_end
	.hidden	shunt_ucopy_end
shunt_ucopy_end:

/* Where a fault in [shunt_ucopy_begin, shunt_ucopy_end) resumes. */
	.balign 16
	.globl	shunt_ucopy_fixup
	.hidden	shunt_ucopy_fixup
	.type	shunt_ucopy_fixup, @function
shunt_ucopy_fixup:
	.cfi_startproc
	lea	(%rcx, %rdx), %rax
	ret
	.cfi_endproc
	.size	shunt_ucopy_fixup, . - shunt_ucopy_fixup

#endif

	.section .note.GNU-stack, "", @progbits

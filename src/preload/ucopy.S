/* SPDX-License-Identifier: MIT */
/*
 * The only instructions of the library that touch memory the program
 * passed in. A fault on one of them resumes at shunt_ucopy_fixup (fault.c),
 * the way the kernel's exception tables turn a fault in copy_from_user into
 * a failed copy: the routines are leaves that use no stack, so the fixup
 * returns straight to the caller, with a nonzero result.
 */
#if defined(__x86_64__)

	.text

/*
 * size_t shunt_ucopy(void *dst, const void *src, size_t n): 0 once all is
 * copied. Small copies in a few overlapping moves, medium ones in 16-byte
 * blocks, large ones with rep movsb (fast strings make it the quickest
 * there, and slow below a couple of KiB: measured with bench/core.py).
 */
	.balign 16
	.globl	shunt_ucopy
	.hidden	shunt_ucopy
	.type	shunt_ucopy, @function
	.globl	shunt_ucopy_begin
	.hidden	shunt_ucopy_begin
shunt_ucopy_begin:
shunt_ucopy:
	.cfi_startproc
	cmp	$16, %rdx
	jb	.Lsmall
	cmp	$2048, %rdx
	jae	.Lrep
	/* 16 .. 2047 bytes: the last 16 first (stored last, overlapping), then blocks. */
	lea	-16(%rdi, %rdx), %r9
	movdqu	-16(%rsi, %rdx), %xmm4
	cmp	$64, %rdx
	jb	2f
1:	movdqu	(%rsi), %xmm0
	movdqu	16(%rsi), %xmm1
	movdqu	32(%rsi), %xmm2
	movdqu	48(%rsi), %xmm3
	movdqu	%xmm0, (%rdi)
	movdqu	%xmm1, 16(%rdi)
	movdqu	%xmm2, 32(%rdi)
	movdqu	%xmm3, 48(%rdi)
	add	$64, %rsi
	add	$64, %rdi
	sub	$64, %rdx
	cmp	$64, %rdx
	jae	1b
2:	cmp	$16, %rdx
	jb	3f
	movdqu	(%rsi), %xmm0
	movdqu	%xmm0, (%rdi)
	add	$16, %rsi
	add	$16, %rdi
	sub	$16, %rdx
	jmp	2b
3:	movdqu	%xmm4, (%r9)
	xor	%eax, %eax
	ret
.Lrep:
	mov	%rdx, %rcx
	rep movsb
	xor	%eax, %eax
	ret
.Lsmall:
	/* 0 .. 15 bytes: two overlapping moves of the widest size that fits. */
	cmp	$8, %rdx
	jb	4f
	mov	(%rsi), %rax
	mov	-8(%rsi, %rdx), %rcx
	mov	%rax, (%rdi)
	mov	%rcx, -8(%rdi, %rdx)
	xor	%eax, %eax
	ret
4:	cmp	$4, %rdx
	jb	5f
	mov	(%rsi), %eax
	mov	-4(%rsi, %rdx), %ecx
	mov	%eax, (%rdi)
	mov	%ecx, -4(%rdi, %rdx)
	xor	%eax, %eax
	ret
5:	cmp	$2, %rdx
	jb	6f
	movzwl	(%rsi), %eax
	movzbl	-1(%rsi, %rdx), %ecx
	mov	%ax, (%rdi)
	mov	%cl, -1(%rdi, %rdx)
	xor	%eax, %eax
	ret
6:	test	%rdx, %rdx
	jz	7f
	movzbl	(%rsi), %eax
	mov	%al, (%rdi)
7:	xor	%eax, %eax
	ret
	.cfi_endproc
	.size	shunt_ucopy, . - shunt_ucopy

/*
 * size_t shunt_ucopy_nt(void *dst, const void *src, size_t n): the same into
 * a ring, with streaming stores past the cache (common/copy.h says why);
 * the caller fences them before publishing. For large copies only.
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
	/* rep movsb costs tens of cycles even for nothing: ring offsets are mostly aligned. */
	jrcxz	1f
	rep movsb
1:	cmp	$64, %rdx
	jb	3f
2:
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
	jae	2b
3:	mov	%rdx, %rcx
	jrcxz	4f
	rep movsb
4:	xor	%eax, %eax
	ret
	.cfi_endproc
	.size	shunt_ucopy_nt, . - shunt_ucopy_nt

	.globl	shunt_ucopy_end
	.hidden	shunt_ucopy_end
shunt_ucopy_end:

/* Where a fault in [shunt_ucopy_begin, shunt_ucopy_end) resumes: the copy failed. */
	.balign 16
	.globl	shunt_ucopy_fixup
	.hidden	shunt_ucopy_fixup
	.type	shunt_ucopy_fixup, @function
shunt_ucopy_fixup:
	.cfi_startproc
	mov	$1, %eax
	ret
	.cfi_endproc
	.size	shunt_ucopy_fixup, . - shunt_ucopy_fixup

#endif

	.section .note.GNU-stack, "", @progbits

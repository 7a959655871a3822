// SPDX-License-Identifier: MIT
/*
 * Programs libshunt.so cannot reach: read an executable's ELF headers
 * (static? Go?) and what makes the loader run it in secure mode, where
 * LD_PRELOAD is ignored. Shared by `shunt run` and the library's exec.
 */
#include <elf.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <linux/capability.h>

#include "common/reach.h"

enum {
	MAX_PHDRS = 1024,		/* more than any linker writes */
	MAX_SHDRS = 4096,
	MAX_SHSTRTAB = 64 * 1024,
	MAX_NOTES = 64 * 1024,		/* bytes of one PT_NOTE segment we read */
	MAX_DYNAMIC = 64 * 1024,
	NT_GO_BUILDID = 4,		/* Go's linker: the "Go" note holding the build ID */
};

/* What the headers of an ELF file say. */
struct elf_facts {
	bool interp;			/* PT_INTERP: the dynamic loader starts it */
	bool soname;			/* DT_SONAME: a library run as a program (ld.so itself) */
	bool go;			/* Go's build ID note, or its build information section */
};

/* Exactly @len bytes at @off, or false. */
static bool read_at(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	if (off > (uint64_t)INT64_MAX - len)
		return false;
	while (done < len) {
		ssize_t r = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		done += (size_t)r;
	}
	return true;
}

/* A malloc'ed copy of @len bytes at @off (at most @cap), or NULL. */
static void *read_block(int fd, uint64_t off, uint64_t len, uint64_t cap)
{
	void *p;

	if (len == 0 || len > cap)
		return NULL;
	p = malloc(len);
	if (p && !read_at(fd, p, len, off)) {
		free(p);
		return NULL;
	}
	return p;
}

/* Whether a PT_NOTE segment holds Go's build ID note (owner "Go"). */
static bool notes_have_go(const unsigned char *p, size_t len)
{
	size_t off = 0;

	/* Each note: Elf_Nhdr, the owner's name, the descriptor; each padded to 4. */
	while (len - off >= sizeof(ElfW(Nhdr))) {
		ElfW(Nhdr) nh;
		size_t name, desc;

		memcpy(&nh, p + off, sizeof(nh));
		off += sizeof(nh);
		name = ((size_t)nh.n_namesz + 3) & ~(size_t)3;
		desc = ((size_t)nh.n_descsz + 3) & ~(size_t)3;
		if (name > len - off || desc > len - off - name)
			return false;
		if (nh.n_namesz == 3 && !memcmp(p + off, "Go", 3) && nh.n_type == NT_GO_BUILDID)
			return true;
		off += name + desc;
	}
	return false;
}

/* Whether a PT_DYNAMIC segment names the object (DT_SONAME). */
static bool dynamic_has_soname(const unsigned char *p, size_t len)
{
	for (size_t off = 0; len - off >= sizeof(ElfW(Dyn)); off += sizeof(ElfW(Dyn))) {
		ElfW(Dyn) d;

		memcpy(&d, p + off, sizeof(d));
		if (d.d_tag == DT_NULL)
			break;
		if (d.d_tag == DT_SONAME)
			return true;
	}
	return false;
}

/* Every program header (all read at once: one system call, not one each). */
static void scan_segments(int fd, const ElfW(Ehdr) *eh, struct elf_facts *f)
{
	ElfW(Phdr) *phs;

	if (eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phnum > MAX_PHDRS)
		return;
	phs = read_block(fd, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(*phs),
			 MAX_PHDRS * sizeof(*phs));
	if (!phs)
		return;
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		ElfW(Phdr) ph = phs[i];
		unsigned char *p;

		if (ph.p_type == PT_INTERP) {
			f->interp = true;
		} else if (ph.p_type == PT_NOTE || ph.p_type == PT_DYNAMIC) {
			p = read_block(fd, ph.p_offset, ph.p_filesz,
				       ph.p_type == PT_NOTE ? MAX_NOTES : MAX_DYNAMIC);
			if (!p)
				continue;
			if (ph.p_type == PT_NOTE)
				f->go |= notes_have_go(p, ph.p_filesz);
			else
				f->soname |= dynamic_has_soname(p, ph.p_filesz);
			free(p);
		}
	}
	free(phs);
}

/* Go's sections, for a binary whose notes were not loadable segments. */
static void scan_sections(int fd, const ElfW(Ehdr) *eh, struct elf_facts *f)
{
	static const char *const go_sections[] = { ".note.go.buildid", ".go.buildinfo" };
	ElfW(Shdr) strtab, *shs;
	char *names;

	/* Extended numbering (SHN_XINDEX, 0 with the count elsewhere) is for
	   objects with tens of thousands of sections: not worth reading here. */
	if (eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shnum > MAX_SHDRS ||
	    eh->e_shstrndx == SHN_UNDEF || eh->e_shstrndx >= eh->e_shnum)
		return;
	/* Every section header at once, as the program headers. */
	shs = read_block(fd, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(*shs),
			 MAX_SHDRS * sizeof(*shs));
	if (!shs)
		return;
	strtab = shs[eh->e_shstrndx];
	names = read_block(fd, strtab.sh_offset, strtab.sh_size, MAX_SHSTRTAB);
	if (!names) {
		free(shs);
		return;
	}
	names[strtab.sh_size - 1] = 0;	/* every name below now ends inside the block */
	for (unsigned i = 0; i < eh->e_shnum && !f->go; i++) {
		ElfW(Shdr) sh = shs[i];

		if (sh.sh_name >= strtab.sh_size)
			continue;
		for (size_t k = 0; k < sizeof(go_sections) / sizeof(go_sections[0]); k++)
			if (!strcmp(names + sh.sh_name, go_sections[k]))
				f->go = true;
	}
	free(names);
	free(shs);
}

/*
 * The facts of an ELF executable of this machine's kind, or false for
 * anything else (a script, garbage, another architecture or class: the
 * loader itself says why it cannot preload a 64-bit library into a 32-bit
 * program).
 */
static bool read_elf(int fd, struct elf_facts *f)
{
	ElfW(Ehdr) eh;

	memset(f, 0, sizeof(*f));
	if (!read_at(fd, &eh, sizeof(eh), 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
	    eh.e_ident[EI_DATA] != (BYTE_ORDER == LITTLE_ENDIAN ? ELFDATA2LSB : ELFDATA2MSB) ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN))
		return false;
	scan_segments(fd, &eh, f);
	if (!f->go)
		scan_sections(fd, &eh, f);
	return true;
}

/*
 * Whether file capabilities would raise the privileges of a process of
 * ours. The kernel marks such an exec secure only for a non-root real user
 * (commoncap.c: root already holds every capability), when the file's
 * effective bit is set or its permitted set adds capabilities.
 */
static bool caps_elevate(int fd)
{
	struct vfs_ns_cap_data caps;
	ssize_t len;

	if (getuid() == 0)
		return false;
	len = fgetxattr(fd, "security.capability", &caps, sizeof(caps));
	if (len < (ssize_t)XATTR_CAPS_SZ_1)
		return false;
	if (le32toh(caps.magic_etc) & VFS_CAP_FLAGS_EFFECTIVE)
		return true;
	/* Revision 1 stores one word of each set; 2 and 3 store two. */
	for (int i = 0; i < (len >= (ssize_t)XATTR_CAPS_SZ_2 ? 2 : 1); i++)
		if (caps.data[i].permitted)
			return true;
	return false;
}

/*
 * Why the kernel would run @fd with AT_SECURE set, making the loader ignore
 * LD_PRELOAD, or NULL. As in commoncap.c: the effective user or group the
 * program gets differs from our real one, or file capabilities raise it.
 * A nosuid mount makes the kernel ignore all three.
 */
static const char *secure_exec(int fd, const struct stat *st)
{
	struct statvfs vfs;

	if (fstatvfs(fd, &vfs) == 0 && (vfs.f_flag & ST_NOSUID))
		return NULL;
	if ((st->st_mode & S_ISUID) && st->st_uid != getuid())
		return "is set-user-ID: the loader ignores LD_PRELOAD,";
	/* S_ISGID without group execute marks mandatory locking, not set-group-ID. */
	if ((st->st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) && st->st_gid != getgid())
		return "is set-group-ID: the loader ignores LD_PRELOAD,";
	if (caps_elevate(fd))
		return "has file capabilities: the loader ignores LD_PRELOAD,";
	return NULL;
}

/*
 * @path opened for reading if it is a regular file, or -1. Looked at before
 * opening: opening a device or a FIFO can have effects of its own.
 */
static int open_regular(const char *path, struct stat *st)
{
	int fd;

	if (stat(path, st) < 0 || !S_ISREG(st->st_mode))
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd >= 0 && (fstat(fd, st) < 0 || !S_ISREG(st->st_mode))) {
		close(fd);
		return -1;
	}
	return fd;
}

const char *shunt_reach_elf(const char *path)
{
	const char *why = NULL;
	struct elf_facts f;
	struct stat st;
	int fd = open_regular(path, &st);

	if (fd < 0)
		return NULL;
	if (read_elf(fd, &f)) {
		if (f.go)	/* Go's runtime makes system calls itself, even with cgo */
			why = "is a Go program (raw system calls):";
		else if (!f.interp && !f.soname)
			why = "is statically linked:";
		else
			why = secure_exec(fd, &st);
	}
	close(fd);
	return why;
}

bool shunt_reach_shebang(const char *path, char *interp, size_t n)
{
	char buf[SHUNT_REACH_SHEBANG_LEN + 1];
	ssize_t len;
	size_t i = 2, start;
	struct stat st;
	int fd = open_regular(path, &st);

	if (fd < 0)
		return false;
	len = read(fd, buf, SHUNT_REACH_SHEBANG_LEN);
	close(fd);
	if (len < 3 || buf[0] != '#' || buf[1] != '!')
		return false;
	buf[len] = 0;
	while (buf[i] == ' ' || buf[i] == '\t')
		i++;
	start = i;
	while (buf[i] && buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\n')
		i++;
	if (i == start || i - start >= n)
		return false;
	memcpy(interp, buf + start, i - start);
	interp[i - start] = 0;
	return true;
}

bool shunt_reach_resolve(const char *prog, const char *path, char *out, size_t n)
{
	const char *p;

	if (!*prog)
		return false;
	if (strchr(prog, '/'))
		return (size_t)snprintf(out, n, "%s", prog) < n;
	if (!path)
		path = "/bin:/usr/bin";
	for (p = path;; p++) {
		const char *end = strchrnul(p, ':');
		int dirlen = (int)(end - p);
		struct stat st;

		if ((size_t)snprintf(out, n, "%.*s%s%s", dirlen, p, dirlen ? "/" : "", prog) < n &&
		    stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
			return true;
		if (!*end)
			return false;
		p = end;
	}
}

bool shunt_reach_foreign(const char *path)
{
	unsigned char id[EI_NIDENT];
	struct stat st;
	int fd = open_regular(path, &st);
	bool r;

	if (fd < 0)
		return false;
	r = read_at(fd, id, sizeof(id), 0) && !memcmp(id, ELFMAG, SELFMAG) &&
	    (id[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
	     id[EI_DATA] != (BYTE_ORDER == LITTLE_ENDIAN ? ELFDATA2LSB : ELFDATA2MSB));
	close(fd);
	return r;
}

int shunt_reach_why(const char *path, char *why, size_t n)
{
	char interp[SHUNT_REACH_SHEBANG_LEN];
	const char *r = shunt_reach_elf(path);

	if (r) {
		snprintf(why, n, "%s %s %s", path, r, SHUNT_REACH_TAIL);
		return 1;
	}
	/* One level of #!: the kernel runs the interpreter, with its own mode bits. */
	if (shunt_reach_shebang(path, interp, sizeof(interp)) && (r = shunt_reach_elf(interp))) {
		snprintf(why, n, "%s is a script for %s, which %s %s", path, interp, r,
			 SHUNT_REACH_TAIL);
		return 1;
	}
	return 0;
}

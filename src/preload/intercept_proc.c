// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of the calls that make processes and replace programs:
 * fork, vfork, _Fork, daemon and a clone that copies our memory (the child
 * holds what the parent holds); the exec family,
 * before which every shunt connection the new program inherits is kept in
 * shared memory for it, or moved onto its kernel socket when it cannot take
 * it (exec.h); posix_spawn, system and popen, before which such connections
 * move onto the kernel.
 */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sys.h"
#include "preload/control.h"
#include "preload/exec.h"
#include "preload/fork.h"
#include "preload/handoff.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/netns.h"
#include "preload/util.h"

pid_t _Fork(void);
int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags);
extern char **environ;

/* setns and unshare: a thread that leaves its namespace makes kernel sockets from then on. */
SHUNT_EXPORT int setns(int fd, int nstype)
{
	uint64_t before;
	long r;

	shunt_ensure_init();
	/* Only a network namespace matters; a namespace file of any type (0) may be one. */
	if (nstype && !(nstype & CLONE_NEWNET))
		return (int)shunt_syscall_app(SYS_setns, fd, nstype);
	before = shunt_netns_now();
	r = shunt_syscall_app(SYS_setns, fd, nstype);
	if (r == 0) {
		int saved = errno;

		shunt_netns_after(before);
		errno = saved;
	}
	return (int)r;
}

SHUNT_EXPORT int unshare(int flags)
{
	long r;

	shunt_ensure_init();
	r = shunt_syscall_app(SYS_unshare, flags);
	if (r == 0 && (flags & CLONE_NEWNET)) {
		int saved = errno;

		shunt_netns_moved();
		errno = saved;
	}
	return (int)r;
}

/* fork, vfork and _Fork while dormant (init.h): the C library's; our fork handlers do nothing. */
static pid_t dormant_fork(pid_t (*fn)(void))
{
	pid_t r = fn();

	shunt_dormant_fork_leave(r);
	return r;
}

SHUNT_EXPORT pid_t fork(void)
{
	if (shunt_dormant_enter())
		return dormant_fork(SHUNT_LIBC(fork));
	shunt_ensure_init();
	return shunt_op_fork();
}

/*
 * vfork is a fork here: its child shares our memory until it execs, and
 * would otherwise run our code (a claim, a session) in the parent's memory.
 * POSIX lets vfork be fork; a correct vfork child cannot tell.
 */
SHUNT_EXPORT pid_t vfork(void)
{
	if (shunt_dormant_enter())
		return dormant_fork(SHUNT_LIBC(fork));
	shunt_ensure_init();
	return shunt_op_fork();
}

/* _Fork runs no atfork handler of the program; the library's state still needs its own. */
SHUNT_EXPORT pid_t _Fork(void)
{
	int saved = errno;

	if (SHUNT_LIBC(_Fork) && shunt_dormant_enter())
		return dormant_fork(SHUNT_LIBC(_Fork));
	shunt_ensure_init();
	return (pid_t)shunt_ret(shunt_op_fork_bare(), saved);
}

/*
 * glibc's clone: a child that copies our memory is a fork for shuntd; one
 * that shares it (threads, CLONE_VM) goes through untouched.
 */
SHUNT_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	va_list ap;
	pid_t *ptid, *ctid;
	void *tls;
	int saved = errno;

	/* glibc's own clone reads these from registers whatever the flags. */
	va_start(ap, arg);
	ptid = va_arg(ap, pid_t *);
	tls = va_arg(ap, void *);
	ctid = va_arg(ap, pid_t *);
	va_end(ap);
	shunt_ensure_init();
	return (int)shunt_ret(shunt_op_clone(fn, stack, flags, arg, ptid, tls, ctid), saved);
}

/*
 * daemon(3): glibc forks inside it with an internal call no preload sees,
 * and the parent exits at once, so its session went with everything it
 * held (the listener a server made before daemonizing, the connections
 * queued on it), and the child held nothing at shuntd. The same steps, with
 * a fork of ours, and the descriptors moved onto /dev/null through our dup2.
 */
SHUNT_EXPORT int daemon(int nochdir, int noclose)
{
	struct stat st;
	int saved = errno, fd;

	shunt_ensure_init();
	switch (shunt_op_fork()) {
	case -1:
		return -1;
	case 0:
		break;
	default:
		_exit(0);
	}
	if (setsid() < 0)
		return -1;
	if (!nochdir)
		(void)!chdir("/");
	if (!noclose) {
		fd = open("/dev/null", O_RDWR);
		if (fd < 0)
			return -1;
		if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode)) {
			close(fd);
			errno = ENODEV;
			return -1;
		}
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	errno = saved;
	return 0;
}

/*
 * _exit and _Exit: the kernel closes every descriptor at exit; what shuntd
 * must hear before (a listener's family: control.h) is sent first. Then
 * the system call glibc's _exit makes.
 */
SHUNT_EXPORT void _exit(int status)
{
	shunt_ctl_exit();
	for (;;)
		shunt_syscall(SYS_exit_group, status);
}

SHUNT_EXPORT void _Exit(int status)
{
	shunt_ctl_exit();
	for (;;)
		shunt_syscall(SYS_exit_group, status);
}

/*
 * Every exec: the connections that survive it are kept for the new image or
 * moved (shunt_exec_prepare); if the exec returns, it failed, and that is
 * undone (shunt_exec_failed keeps errno).
 */
static struct shunt_exec_undo exec_begin(const struct shunt_exec_target *t)
{
	/* Dormant, nothing is ours to keep or move (init.h). */
	if (shunt_dormant())
		return (struct shunt_exec_undo){ 0, false, NULL };
	shunt_ensure_init();
	return shunt_exec_prepare(t);
}

SHUNT_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	struct shunt_exec_target t = { .path = path, .dirfd = AT_FDCWD, .envp = envp };
	struct shunt_exec_undo undo = exec_begin(&t);
	int r = SHUNT_LIBC(execve)(path, argv, shunt_exec_env(&undo, envp));

	shunt_exec_failed(undo);
	return r;
}

SHUNT_EXPORT int execv(const char *path, char *const argv[])
{
	struct shunt_exec_target t = { .path = path, .dirfd = AT_FDCWD, .envp = environ };
	struct shunt_exec_undo undo = exec_begin(&t);
	/* With a ticket's mark, the environment is no longer environ. */
	int r = undo.envp ? SHUNT_LIBC(execve)(path, argv, undo.envp) : SHUNT_LIBC(execv)(path, argv);

	shunt_exec_failed(undo);
	return r;
}

SHUNT_EXPORT int execvp(const char *file, char *const argv[])
{
	struct shunt_exec_target t = { .path = file, .search = true, .dirfd = AT_FDCWD,
				       .envp = environ };
	struct shunt_exec_undo undo = exec_begin(&t);
	int r = undo.envp ? SHUNT_LIBC(execvpe)(file, argv, undo.envp)
			  : SHUNT_LIBC(execvp)(file, argv);

	shunt_exec_failed(undo);
	return r;
}

SHUNT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	struct shunt_exec_target t = { .path = file, .search = true, .dirfd = AT_FDCWD,
				       .envp = envp };
	struct shunt_exec_undo undo = exec_begin(&t);
	int r = SHUNT_LIBC(execvpe)(file, argv, shunt_exec_env(&undo, envp));

	shunt_exec_failed(undo);
	return r;
}

SHUNT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	struct shunt_exec_target t = { .path = "", .dirfd = fd, .at_flags = AT_EMPTY_PATH,
				       .envp = envp };
	struct shunt_exec_undo undo = exec_begin(&t);
	int r = SHUNT_LIBC(fexecve)(fd, argv, shunt_exec_env(&undo, envp));

	shunt_exec_failed(undo);
	return r;
}

SHUNT_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			  int flags)
{
	struct shunt_exec_target t = { .path = path, .dirfd = dirfd, .at_flags = flags,
				       .envp = envp };

	if (!SHUNT_LIBC(execveat)) {
		errno = ENOSYS;
		return -1;
	}
	struct shunt_exec_undo undo = exec_begin(&t);
	int r = SHUNT_LIBC(execveat)(dirfd, path, argv, shunt_exec_env(&undo, envp), flags);

	shunt_exec_failed(undo);
	return r;
}

/*
 * The execl family: the arguments up to the NULL into an array, as glibc
 * does; execle's environment follows the NULL. Returns NULL without memory.
 */
static char **collect_args(const char *arg0, va_list ap, char ***envp)
{
	va_list count;
	size_t n = 1;
	char **argv;

	va_copy(count, ap);
	while (va_arg(count, char *))
		n++;
	va_end(count);
	argv = malloc((n + 1) * sizeof(*argv));
	if (!argv)
		return NULL;
	argv[0] = (char *)arg0;
	for (size_t i = 1; i <= n; i++)
		argv[i] = va_arg(ap, char *);	/* the last one read is the NULL */
	if (envp)
		*envp = va_arg(ap, char **);
	return argv;
}

/* Run @exec (execv, execvp or execve) with the arguments collected from @ap. */
static int exec_list(const char *file, const char *arg0, va_list ap, bool with_env,
		     int (*exec)(const char *, char *const[], char *const[]))
{
	char **envp = environ, **argv = collect_args(arg0, ap, with_env ? &envp : NULL);
	int r;

	if (!argv) {
		errno = ENOMEM;
		return -1;
	}
	r = exec(file, argv, envp);
	free(argv);
	return r;
}

/* execv and execvp, shaped like execve (they use the current environment). */
static int execv_env(const char *path, char *const argv[], char *const envp[])
{
	(void)envp;
	return execv(path, argv);
}

static int execvp_env(const char *file, char *const argv[], char *const envp[])
{
	(void)envp;
	return execvp(file, argv);
}

SHUNT_EXPORT int execl(const char *path, const char *arg0, ...)
{
	va_list ap;
	int r;

	va_start(ap, arg0);
	r = exec_list(path, arg0, ap, false, execv_env);
	va_end(ap);
	return r;
}

SHUNT_EXPORT int execlp(const char *file, const char *arg0, ...)
{
	va_list ap;
	int r;

	va_start(ap, arg0);
	r = exec_list(file, arg0, ap, false, execvp_env);
	va_end(ap);
	return r;
}

SHUNT_EXPORT int execle(const char *path, const char *arg0, ...)
{
	va_list ap;
	int r;

	va_start(ap, arg0);
	r = exec_list(path, arg0, ap, true, execve);
	va_end(ap);
	return r;
}

SHUNT_EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd,
						  int newfd)
{
	/* Noted dormant too: the number may be a socket of ours by the spawn. */
	shunt_handoff_note_dup2(fd);
	return SHUNT_LIBC(posix_spawn_file_actions_adddup2)(fa, fd, newfd);
}

/*
 * posix_spawn: the child's new image keeps the connections it inherits in
 * shared memory when it runs the library, as an exec does (exec.h); the
 * spawn ticket learns the child's pid, which posix_spawn may not give back.
 */
SHUNT_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			     const posix_spawnattr_t *attr, char *const argv[],
			     char *const envp[])
{
	struct shunt_exec_target t = { .path = path, .dirfd = AT_FDCWD, .envp = envp,
				       .spawn = true };
	struct shunt_exec_undo undo = exec_begin(&t);
	pid_t child = -1;
	int r = SHUNT_LIBC(posix_spawn)(&child, path, fa, attr, argv, shunt_exec_env(&undo, envp));

	if (r == 0 && pid)
		*pid = child;
	shunt_exec_spawned(undo, r == 0 ? child : -1);
	return r;
}

SHUNT_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			      const posix_spawnattr_t *attr, char *const argv[],
			      char *const envp[])
{
	struct shunt_exec_target t = { .path = file, .search = true, .dirfd = AT_FDCWD,
				       .envp = envp, .spawn = true };
	struct shunt_exec_undo undo = exec_begin(&t);
	pid_t child = -1;
	int r = SHUNT_LIBC(posix_spawnp)(&child, file, fa, attr, argv,
					shunt_exec_env(&undo, envp));

	if (r == 0 && pid)
		*pid = child;
	shunt_exec_spawned(undo, r == 0 ? child : -1);
	return r;
}

/* system() and popen() start a shell that inherits what has no FD_CLOEXEC, as exec does. */
SHUNT_EXPORT int system(const char *command)
{
	if (shunt_dormant())
		return SHUNT_LIBC(system)(command);
	shunt_ensure_init();
	if (command)
		shunt_handoff_exec();
	return SHUNT_LIBC(system)(command);
}

SHUNT_EXPORT FILE *popen(const char *command, const char *type)
{
	if (shunt_dormant())
		return SHUNT_LIBC(popen)(command, type);
	shunt_ensure_init();
	shunt_handoff_exec();
	return SHUNT_LIBC(popen)(command, type);
}

/* A fork server for clang: started once per distributor worker, it forks a fresh
 * compiler for every job instead of starting one.
 *
 * Starting clang 22 from Debian's packages costs ~25 ms before it reads its first
 * input: the dynamic loader binds ~22,000 symbols across libLLVM and libclang-cpp and
 * then the libraries' static constructors run. A ThinLTO link runs one backend per
 * module, so a link of a few hundred modules pays seconds for it. This library is
 * preloaded (LD_PRELOAD) into one clang; it wraps the program's `main` and, when
 * DIST_LTO_FORK_SERVER_FD names a socket, serves jobs on it instead: each job is
 * `fork()` followed by the program's own `main(argc, argv, environ)` with the job's
 * arguments, in a process that has done everything a fresh clang does before `main`.
 * Without that variable the program runs as usual.
 *
 * Protocol, over a SOCK_SEQPACKET socket (one message per record):
 *   server -> "R" + int32 pid                          ready
 *   client -> argv as NUL-terminated strings, with     one job
 *             the job's stderr as an SCM_RIGHTS fd
 *   server -> "P" + int32 pid                          the job's process runs
 *   client -> "A"                                      pinned: the server may reap it
 *   server -> "S" + int32 wait status                  the job has ended
 *   server -> "E" + int32 errno                        the job could not be started
 * The server reaps a job only after the client has acknowledged its pid, so the pid
 * cannot be reused while the client opens a pidfd on it to stop it. The server exits
 * when the client closes the socket; a job still running then is killed first, so a
 * client that dies (a persistent worker killed with SIGKILL) leaves no compiler behind.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jobsocket.h"

#define FD_VARIABLE "DIST_LTO_FORK_SERVER_FD"

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void),
                        void (*)(void), void *);

extern char **environ;
static main_fn program_main;

/* Wait until job `pid` ends (0, not reaped) or the client goes away or says anything
 * while a job runs (-1): the job has no one left to report to. Without pidfds (Linux
 * before 5.3) it only waits. */
static int wait_or_client_gone(int sock, pid_t pid) {
#ifdef SYS_pidfd_open
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd >= 0) {
    struct pollfd fds[2] = {{pidfd, POLLIN, 0}, {sock, POLLIN, 0}};
    int gone = 0;
    for (;;) {
      int ready = poll(fds, 2, -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) break;
      if (fds[1].revents) gone = -1;
      if (gone || fds[0].revents) break;
    }
    close(pidfd);
    return gone;
  }
#endif
  (void)sock;
  (void)pid;
  return 0;
}

/* Run one job; -1 when the client has gone meanwhile (stop serving). */
static int run_job(int sock, char *buffer, ssize_t size, int stderr_fd) {
  int argc = 0;
  for (ssize_t i = 0; i < size; i++) argc += buffer[i] == '\0';
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  if (argv == NULL) {
    close(stderr_fd);
    return send_record(sock, 'E', ENOMEM);
  }
  char *arg = buffer;
  for (int i = 0; i < argc; i++) {
    argv[i] = arg;
    arg += strlen(arg) + 1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(sock);
    if (dup2(stderr_fd, STDERR_FILENO) < 0) _exit(127);
    close(stderr_fd);
    exit(program_main(argc, argv, environ));
  }
  int fork_errno = errno;
  close(stderr_fd);
  free(argv);
  if (pid < 0) return send_record(sock, 'E', fork_errno);
  int status = 0;
  int client_gone = send_record(sock, 'P', pid) != 0 || wait_for_ack(sock) != 0;
  if (!client_gone) client_gone = wait_or_client_gone(sock, pid) != 0;
  if (client_gone) kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (client_gone) return -1;
  return send_record(sock, 'S', status);
}

static int serve(int sock) {
  char *buffer = malloc(DIST_LTO_MAX_REQUEST);
  if (buffer == NULL || send_record(sock, 'R', getpid()) != 0) return 1;
  for (;;) {
    int stderr_fd = -1;
    ssize_t size = receive_job(sock, buffer, &stderr_fd);
    if (size <= 0) return size == 0 ? 0 : 1;
    if (run_job(sock, buffer, size, stderr_fd) != 0) return 1;
  }
}

static int wrapped_main(int argc, char **argv, char **envp) {
  const char *fd_text = getenv(FD_VARIABLE);
  if (fd_text == NULL) return program_main(argc, argv, envp);
  char *end;
  long sock = strtol(fd_text, &end, 10);
  /* Jobs must see the environment a directly started compiler would. */
  unsetenv(FD_VARIABLE);
  unsetenv("LD_PRELOAD");
  if (*end != '\0' || sock < 0) return 1;
  return serve((int)sock);
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void),
                      void (*fini)(void), void (*rtld_fini)(void), void *stack_end) {
  start_fn next = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
  if (next == NULL) return 127;
  program_main = main;
  return next(wrapped_main, argc, argv, init, fini, rtld_fini, stack_end);
}

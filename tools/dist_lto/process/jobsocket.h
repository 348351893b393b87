/* The server's side of the job socket that forkserver.c and cc1server.cpp both serve
 * (the protocol is described in forkserver.c): sending a record, receiving a job with
 * its stderr descriptor, waiting for the client's acknowledgement. Compiled as C into
 * the fork server's preload library and as C++ into the compile server. */
#ifndef DIST_LTO_JOBSOCKET_H
#define DIST_LTO_JOBSOCKET_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The largest job request: its argv, NUL-terminated strings. */
#define DIST_LTO_MAX_REQUEST (1 << 20)

static inline int send_record(int sock, char kind, int32_t value) {
  char record[1 + sizeof value];
  record[0] = kind;
  memcpy(record + 1, &value, sizeof value);
  for (;;) {
    ssize_t sent = send(sock, record, sizeof record, MSG_NOSIGNAL);
    if (sent == (ssize_t)sizeof record) return 0;
    if (sent < 0 && errno == EINTR) continue;
    return -1;
  }
}

/* One job request: its argv in `buffer` (DIST_LTO_MAX_REQUEST bytes) and its stderr
 * descriptor. 0 at end of input; -1 for anything else than our client's request. */
static inline ssize_t receive_job(int sock, char *buffer, int *stderr_fd) {
  union {
    struct cmsghdr header;
    char space[CMSG_SPACE(sizeof(int))];
  } control;
  for (;;) {
    struct iovec io = {buffer, DIST_LTO_MAX_REQUEST};
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
    ssize_t size = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
    if (size < 0 && errno == EINTR) continue;
    if (size <= 0) return size;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if ((message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || header == NULL ||
        header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
        buffer[size - 1] != '\0')
      return -1;
    memcpy(stderr_fd, CMSG_DATA(header), sizeof(int));
    return size;
  }
}

static inline int wait_for_ack(int sock) {
  char ack;
  for (;;) {
    ssize_t got = recv(sock, &ack, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    return got == 1 && ack == 'A' ? 0 : -1;
  }
}

#endif

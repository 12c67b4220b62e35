/* bench/floors.c: what each step of a round trip costs alone on this machine
   (bench/steps.py prints them beside the steps).

   floors DIR ROUNDS

   Prints `NAME MEDIAN_NANOSECONDS` lines:
     socket_round_trip   a byte to another process over a Unix stream socket
                         and a byte back (both processes blocked in read)
     fd_pass             a descriptor passed with SCM_RIGHTS and a byte back
     fdatasync_4k        4 KiB appended to a file in DIR, then fdatasync
     fork_wait           fork of this small process, the child exits, wait
   The file in DIR is removed at the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void print_median(const char *name, long long *samples, int n) {
    qsort(samples, n, sizeof *samples, by_value);
    printf("%s %lld\n", name, samples[n / 2]);
}

static void echo_peer(int fd, int passing) {
    char byte;
    for (;;) {
        if (passing) {
            char control[CMSG_SPACE(sizeof(int))];
            struct iovec iov = {&byte, 1};
            struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                                 .msg_controllen = sizeof control};
            if (recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) != 1) _exit(0);
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            if (c) close(*(int *)CMSG_DATA(c));
        } else if (read(fd, &byte, 1) != 1) _exit(0);
        if (write(fd, &byte, 1) != 1) _exit(0);
    }
}

static void socket_floor(const char *name, int passing, int rounds, long long *samples) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair)) { perror("socketpair"); exit(2); }
    pid_t peer = fork();
    if (peer == 0) { close(pair[0]); echo_peer(pair[1], passing); }
    close(pair[1]);
    char byte = 'x';
    for (int i = 0; i < rounds; i++) {
        long long start = now_ns();
        if (passing) {
            int passed = 0;
            char control[CMSG_SPACE(sizeof(int))];
            memset(control, 0, sizeof control);
            struct iovec iov = {&byte, 1};
            struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                                 .msg_controllen = sizeof control};
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &passed, sizeof passed);
            if (sendmsg(pair[0], &msg, 0) != 1) { perror("sendmsg"); exit(2); }
        } else if (write(pair[0], &byte, 1) != 1) { perror("write"); exit(2); }
        if (read(pair[0], &byte, 1) != 1) { perror("read"); exit(2); }
        samples[i] = now_ns() - start;
    }
    close(pair[0]);
    waitpid(peer, NULL, 0);
    print_median(name, samples, rounds);
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: floors DIR ROUNDS\n"); return 2; }
    int rounds = atoi(argv[2]);
    long long *samples = calloc(rounds, sizeof *samples);
    socket_floor("socket_round_trip", 0, rounds, samples);
    socket_floor("fd_pass", 1, rounds, samples);

    char path[4096];
    snprintf(path, sizeof path, "%s/eukhe-bench-floor-%d", argv[1], getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) { perror(path); return 2; }
    char block[4096];
    memset(block, 'a', sizeof block);
    int syncs = rounds < 200 ? rounds : 200;
    for (int i = 0; i < syncs; i++) {
        long long start = now_ns();
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block || fdatasync(fd)) {
            perror("write and fdatasync");
            return 2;
        }
        samples[i] = now_ns() - start;
    }
    close(fd);
    unlink(path);
    print_median("fdatasync_4k", samples, syncs);

    for (int i = 0; i < syncs; i++) {
        long long start = now_ns();
        pid_t child = fork();
        if (child == 0) _exit(0);
        waitpid(child, NULL, 0);
        samples[i] = now_ns() - start;
    }
    print_median("fork_wait", samples, syncs);
    return 0;
}

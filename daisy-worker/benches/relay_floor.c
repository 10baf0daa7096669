#define _GNU_SOURCE
/* The floor of the relay bench (`--floor`): what relaying a block costs
 * with nothing but the system calls daisy-worker cannot avoid at batch 1,
 * as a yardstick, not a product.
 *
 *   relay_floor serve BLOCKS CONNS   stands in for the driver: prints its
 *       port, then hands each "a" line (ask) the next block line until
 *       BLOCKS are out, then closes connections as they ask again.
 *   relay_floor relay PORT CMD...    stands in for daisy-worker: runs CMD
 *       with pipes; per block: poll, recv the block line, write it to
 *       CMD's stdin, poll, read the answer, send it with the next "a" in
 *       one send. Six system calls, two of them sleeping polls. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char buf[1 << 16];

static void wait_readable(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, -1) < 0) {}
}

static int serve(long blocks, int conns) {
    int lis = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof at;
    if (bind(lis, (void *)&at, sizeof at) || listen(lis, conns) || getsockname(lis, (void *)&at, &len))
        return 1;
    printf("%d\n", ntohs(at.sin_port));
    fflush(stdout);
    struct pollfd p[conns];
    for (int i = 0; i < conns; i++) {
        p[i] = (struct pollfd){.fd = accept(lis, NULL, NULL), .events = POLLIN};
        setsockopt(p[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    long next = 0;
    for (int open = conns; open > 0;) {
        poll(p, conns, -1);
        for (int i = 0; i < conns; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP))) continue;
            ssize_t got = recv(p[i].fd, buf, sizeof buf, 0);
            /* An "a" ends every message of a relay's (see relay()). */
            int ask = got >= 2 && buf[got - 2] == 'a';
            if (ask && next < blocks) {
                int n = snprintf(buf, 64, "{\"block_id\": %ld}\n", next++);
                send(p[i].fd, buf, n, 0);
            } else if (got <= 0 || ask) {
                close(p[i].fd);
                p[i].fd = -1;
                open--;
            }
        }
    }
    return 0;
}

static int relay(int port, char **argv) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1, in[2], out[2];
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(s, (void *)&at, sizeof at) || pipe(in) || pipe(out)) return 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pid_t child = fork();
    if (child == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    send(s, "a\n", 2, 0);
    for (;;) {
        wait_readable(s);
        ssize_t got = recv(s, buf, sizeof buf, 0);
        if (got <= 0) break;
        if (write(in[1], buf, got) != got) return 1;
        wait_readable(out[0]);
        got = read(out[0], buf, sizeof buf - 2);
        if (got <= 0) return 1;
        memcpy(buf + got, "a\n", 2);
        send(s, buf, got + 2, 0);
    }
    close(in[1]);
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "serve")) return serve(atol(argv[2]), atoi(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "relay")) return relay(atoi(argv[2]), argv + 3);
    fprintf(stderr, "usage: relay_floor serve BLOCKS CONNS | relay PORT CMD...\n");
    return 2;
}

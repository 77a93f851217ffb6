#define _GNU_SOURCE
/* The floor for varied file traffic over HTTP/1.1 keep-alive on one core: floor.c's epoll loop,
 * answering each request head ("GET /path ") with the named file under DIR. It parses only the
 * path, keeps each file's fd and size after the first request for it (an open-file cache that
 * never checks again), and writes no Date. Modes:
 *   mem N        a fixed N-byte body from memory, whatever the path: head and body in one write()
 *   pread DIR    the file read with pread() after its head into the output buffer, one write()
 *                for all answers of one read
 *   sendfile DIR the head with send(MSG_MORE), then sendfile() of the file
 * Build: gcc -O2 -o floor_files floor_files.c; run: taskset -c 0 ./floor_files PORT MODE ARG,
 * then load it with taskset -c 1 h2load --h1 -c100 -i LIST. A full socket is waited for by
 * spinning (loopback, rare): this is a measuring tool, not a server. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOTS 8192
static struct { char path[64]; int fd; long size; } cache[SLOTS];
static const char *dir;
static int lookup(const char *p, size_t n, long *size) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
    for (unsigned k = h % SLOTS;; k = (k + 1) % SLOTS) {
        if (!cache[k].path[0]) {
            char full[512]; snprintf(full, sizeof full, "%s%.*s", dir, (int)n, p);
            int fd = open(full, O_RDONLY); if (fd < 0) return -1;
            struct stat st; fstat(fd, &st);
            memcpy(cache[k].path, p, n); cache[k].path[n] = 0; cache[k].fd = fd; cache[k].size = st.st_size;
        }
        if (strlen(cache[k].path) == n && !memcmp(cache[k].path, p, n)) { *size = cache[k].size; return cache[k].fd; }
    }
}
static void write_all(int fd, const char *b, size_t n) {
    while (n) { ssize_t w = write(fd, b, n); if (w < 0) { if (errno == EAGAIN) { struct epoll_event e; (void)e; usleep(0); continue; } return; } b += w; n -= w; }
}
static int head(char *o, long len) {
    return sprintf(o, "HTTP/1.1 200 OK\r\nServer: bench\r\nConnection: keep-alive\r\n"
                      "Content-Type: application/octet-stream\r\nContent-Length: %ld\r\n\r\n", len);
}
int main(int argc, char **argv) {
    int port = atoi(argv[1]); const char *mode = argv[2]; long memlen = 0;
    if (!strcmp(mode, "mem")) memlen = atol(argv[3]); else dir = argv[3];
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (void *)&a, sizeof a) || listen(ls, 4096)) { perror("listen"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    static char buf[65536], out[1 << 22], body[1 << 17];
    memset(body, 'x', sizeof body);
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) { if (r == 0 || errno != EAGAIN) close(fd); continue; }
            size_t o = 0, start = 0;
            for (ssize_t k = 3; k < r; k++) {
                if (!(buf[k] == '\n' && buf[k - 1] == '\r' && buf[k - 2] == '\n' && buf[k - 3] == '\r')) continue;
                const char *p = buf + start + 4, *e = memchr(p, ' ', k - start);
                start = k + 1;
                if (memlen) { o += head(out + o, memlen); memcpy(out + o, body, memlen); o += memlen; continue; }
                long size; int f = lookup(p, e - p, &size);
                if (f < 0) { o += sprintf(out + o, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"); continue; }
                if (mode[0] == 'p') { o += head(out + o, size); o += pread(f, out + o, size, 0); }
                else {
                    if (o) { write_all(fd, out, o); o = 0; }
                    char h[256]; int hl = head(h, size); send(fd, h, hl, MSG_MORE);
                    off_t off = 0; while (off < size) { ssize_t s = sendfile(fd, f, &off, size - off); if (s < 0 && errno != EAGAIN) break; }
                }
            }
            if (o) write_all(fd, out, o);
        }
    }
}

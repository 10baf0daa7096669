#define _GNU_SOURCE
/* The relay bench's worker command: answers every block line on stdin
 * with {"block_id": N, "ok": true} at once, costing as little as a worker
 * command can (one read and one write per wake-up, no JSON library), so
 * that what the bench measures is daisy-worker's relay. At end of input it
 * writes its own CPU time (user + system, microseconds) to
 * $RELAY_ECHO_CPU_DIR/echo-<pid>.cpu, for the bench to subtract from
 * what the worker's reaped children cost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static char in[1 << 16];
static char out[1 << 16];

static void report_cpu(void) {
    const char *dir = getenv("RELAY_ECHO_CPU_DIR");
    struct rusage usage;
    char path[4096];
    if (!dir || getrusage(RUSAGE_SELF, &usage) != 0) return;
    snprintf(path, sizeof path, "%s/echo-%d.cpu", dir, (int)getpid());
    FILE *file = fopen(path, "w");
    if (!file) return;
    long long us = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL +
                   usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
    fprintf(file, "%lld\n", us);
    fclose(file);
}

/* Appends the answer to the line [start, end) to out at *len. */
static void answer(const char *start, const char *end, size_t *len) {
    static const char key[] = "\"block_id\":";
    const char *at = memmem(start, end - start, key, sizeof key - 1);
    unsigned long long id = at ? strtoull(at + sizeof key - 1, NULL, 10) : 0;
    if (*len + 64 > sizeof out) return;
    *len += snprintf(out + *len, 64, "{\"block_id\":%llu,\"ok\":true}\n", id);
}

int main(void) {
    size_t filled = 0;
    for (;;) {
        ssize_t got = read(0, in + filled, sizeof in - filled);
        if (got <= 0) break;
        filled += got;
        size_t len = 0, done = 0;
        char *newline;
        while ((newline = memchr(in + done, '\n', filled - done))) {
            answer(in + done, newline, &len);
            done = newline + 1 - in;
        }
        memmove(in, in + done, filled - done);
        filled -= done;
        if (len > 0 && write(1, out, len) != (ssize_t)len) return 1;
    }
    report_cpu();
    return 0;
}

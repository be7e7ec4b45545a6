/* A disk at its IOPS cap, for tests/hostile/test_slow_disk.py: every fsync() and fdatasync() first sleeps
 * the seconds written in the file named by SLOW_FSYNC_FILE (none while the file is absent), then does its
 * work. Loaded with LD_PRELOAD; compiled by the test with gcc -shared -fPIC. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void stall(void) {
    const char *path = getenv("SLOW_FSYNC_FILE");
    double seconds = 0.0;
    FILE *file;
    struct timespec pause;
    if (path == NULL || (file = fopen(path, "r")) == NULL)
        return;
    if (fscanf(file, "%lf", &seconds) != 1)
        seconds = 0.0;
    fclose(file);
    pause.tv_sec = (time_t)seconds;
    pause.tv_nsec = (long)((seconds - (double)pause.tv_sec) * 1e9);
    while (seconds > 0 && nanosleep(&pause, &pause) != 0) {
    }
}

int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    stall();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    stall();
    return real(fd);
}

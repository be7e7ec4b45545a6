/* A stepped wall clock, for tests/integration/test_stepped_clock.py: CLOCK_REALTIME (and gettimeofday) are
 * moved by the seconds written in the file named by STEP_CLOCK_FILE, read at every call, as NTP or a VM's
 * time sync steps them; the monotonic clocks and every sleep are left alone. Debian's libfaketime would do
 * this, but its 0.9.10 breaks Python 3.11's sleeps when it leaves the monotonic clock alone
 * (wolfcw/libfaketime#426: EINVAL from clock_nanosleep). Loaded with LD_PRELOAD. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long step_nanoseconds(void) {
    const char *path = getenv("STEP_CLOCK_FILE");
    double seconds = 0.0;
    FILE *file;
    if (path == NULL || (file = fopen(path, "r")) == NULL)
        return 0;
    if (fscanf(file, "%lf", &seconds) != 1)
        seconds = 0.0;
    fclose(file);
    return (long long)(seconds * 1e9);
}

static void shift(struct timespec *when) {
    long long at = (long long)when->tv_sec * 1000000000LL + when->tv_nsec + step_nanoseconds();
    when->tv_sec = (time_t)(at / 1000000000LL);
    when->tv_nsec = (long)(at % 1000000000LL);
}

int clock_gettime(clockid_t clock, struct timespec *when) {
    static int (*real)(clockid_t, struct timespec *) = NULL;
    int result;
    if (real == NULL)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    result = real(clock, when);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        shift(when);
    return result;
}

int gettimeofday(struct timeval *restrict when, void *restrict zone) {
    struct timespec now;
    (void)zone;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0)
        return -1;
    when->tv_sec = now.tv_sec;
    when->tv_usec = now.tv_nsec / 1000;
    return 0;
}

/* What a fork-join hand-over costs on this machine: how long after a
 * pthread condition-variable signal the waiting thread runs, when the
 * signalling thread did some work of its own first (so that the other CPU
 * has gone idle, as a Parquet decode helper's has between two jobs:
 * src/warehouse/import_parquet_par.c, docs/BENCHMARKS.md "Parquet source
 * into Python: the two rates"). One round per placement:
 *
 *  apart     the signaller on the first allowed CPU, the waiter on the last
 *  together  both on the first allowed CPU (the waiter runs when the
 *            signaller blocks for its answer)
 *  free      neither pinned: where the scheduler puts them
 *
 * Each wake: the signaller spins for --work-us, stamps the clock and
 * signals; the waiter stamps on waking and signals back; the signaller
 * waits for that before its next spin. Figures are printed (median, p90,
 * p99 of the wakes), never checked.
 * Usage: bench_wake_latency [--wakes N] [--work-us N] */

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct pingpong {
    pthread_mutex_t mu;
    pthread_cond_t go, back;
    uint64_t gen, answered, wakes;
    double sent_us;
    double *lat; /* [wakes]: signal to running, in microseconds */
    int waiter_cpu;
} pingpong_t;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void pin_self(int cpu)
{
    if (cpu < 0) return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *waiter_main(void *arg)
{
    pingpong_t *p = arg;
    pin_self(p->waiter_cpu);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        seen = p->gen;
        if (seen > p->wakes) break;
        p->lat[seen - 1] = now_us() - p->sent_us;
        p->answered = seen;
        pthread_cond_signal(&p->back);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One placement's round; the latencies sorted into lat. @return 0, or -1
 * when the waiter thread would not start. */
static int run_round(int signaller_cpu, int waiter_cpu, uint64_t wakes, double work_us, double *lat)
{
    pingpong_t p = {.wakes = wakes, .lat = lat, .waiter_cpu = waiter_cpu};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.go, NULL);
    pthread_cond_init(&p.back, NULL);
    cpu_set_t all;
    pthread_getaffinity_np(pthread_self(), sizeof all, &all);
    pin_self(signaller_cpu);
    pthread_t th;
    int rc = pthread_create(&th, NULL, waiter_main, &p) == 0 ? 0 : -1;
    volatile uint64_t spin = 0;
    for (uint64_t i = 1; rc == 0 && i <= wakes + 1; i++) {
        double t0 = now_us();
        while (i <= wakes && now_us() - t0 < work_us)
            spin++; /* the signaller's own share of a job */
        pthread_mutex_lock(&p.mu);
        p.sent_us = now_us();
        p.gen = i;
        pthread_cond_signal(&p.go);
        while (i <= wakes && p.answered < i)
            pthread_cond_wait(&p.back, &p.mu);
        pthread_mutex_unlock(&p.mu);
    }
    if (rc == 0) pthread_join(th, NULL);
    pthread_setaffinity_np(pthread_self(), sizeof all, &all);
    pthread_cond_destroy(&p.back);
    pthread_cond_destroy(&p.go);
    pthread_mutex_destroy(&p.mu);
    qsort(lat, wakes, sizeof *lat, cmp_double);
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t wakes = 4000, work = 400;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--wakes") == 0 && i + 1 < argc)
            wakes = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--work-us") == 0 && i + 1 < argc)
            work = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_wake_latency [--wakes N] [--work-us N]\n");
            return 2;
        }
    }
    if (wakes < 1 || wakes > 10000000) {
        fprintf(stderr, "bench_wake_latency: --wakes %llu: 1 to 10000000\n",
                (unsigned long long)wakes);
        return 2;
    }
    cpu_set_t all;
    pthread_getaffinity_np(pthread_self(), sizeof all, &all);
    int first = -1, last = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            if (first < 0) first = c;
            last = c;
        }
    double *lat = calloc(wakes, sizeof *lat);
    if (!lat) {
        fprintf(stderr, "bench_wake_latency: out of memory\n");
        return 1;
    }
    double load = 0;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1) load = 0;
        fclose(lf);
    }
    printf("%ld CPUs online, load average %.2f; ", sysconf(_SC_NPROCESSORS_ONLN), load);
    printf("%llu wakes after %llu us of work each; wake latency (signal to running), us:\n",
           (unsigned long long)wakes, (unsigned long long)work);
    struct {
        const char *name;
        int s, w;
    } rounds[] = {{"apart", first, last}, {"together", first, first}, {"free", -1, -1}};
    for (size_t r = 0; r < sizeof rounds / sizeof rounds[0]; r++) {
        if (r == 0 && first == last) {
            printf("  apart     (one CPU allowed: not run)\n");
            continue;
        }
        if (run_round(rounds[r].s, rounds[r].w, wakes, (double)work, lat) != 0) {
            fprintf(stderr, "bench_wake_latency: cannot start a thread\n");
            free(lat);
            return 1;
        }
        char where[48] = "not pinned";
        if (rounds[r].s >= 0)
            snprintf(where, sizeof where, "CPUs %d and %d", rounds[r].s, rounds[r].w);
        printf("  %-9s median %8.1f  p90 %8.1f  p99 %8.1f  (%s)\n", rounds[r].name, lat[wakes / 2],
               lat[wakes * 9 / 10], lat[wakes * 99 / 100], where);
    }
    free(lat);
    return 0;
}

/*
 * bench_c2c: prints the cache-line round trip between two CPUs (c2c.h), the figure that moves
 * this VM's lock-free and loopback benchmarks between runs. pingpong.sh prints it with every
 * run. Usage: bench_c2c [CPU_A CPU_B]   (default 0 1; two different CPUs)
 */
#include <stdio.h>
#include <stdlib.h>

#include "c2c.h"

int main(int argc, char **argv)
{
    if (argc != 1 && argc != 3) {
        fprintf(stderr, "usage: bench_c2c [CPU_A CPU_B]\n");
        return 2;
    }
    int a = argc == 3 ? atoi(argv[1]) : 0;
    int b = argc == 3 ? atoi(argv[2]) : 1;
    if (a == b) {
        fprintf(stderr, "bench_c2c: two different CPUs are needed (got %d twice)\n", a);
        return 2;
    }
    double ns = c2c_round_trip_ns(a, b, 100000);
    if (ns < 0) {
        fprintf(stderr, "bench_c2c: cannot pin threads to CPUs %d and %d\n", a, b);
        return 1;
    }
    printf("cache-line round trip CPU %d <-> CPU %d: %.0f ns\n", a, b, ns);
    return 0;
}

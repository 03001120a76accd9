/*
 * bench_c2c: prints the cache-line round trip between two CPUs (c2c.h), the figure that moves
 * this VM's lock-free and loopback benchmarks between runs. pingpong.sh prints it at its start
 * and end. Usage: bench_c2c [CPU_A CPU_B]   (default 0 1)
 */
#include <stdio.h>
#include <stdlib.h>

#include "c2c.h"

int main(int argc, char **argv)
{
    int a = argc > 2 ? atoi(argv[1]) : 0;
    int b = argc > 2 ? atoi(argv[2]) : 1;
    double ns = c2c_round_trip_ns(a, b, 100000);
    if (ns < 0) {
        fprintf(stderr, "bench_c2c: cannot pin threads to CPUs %d and %d\n", a, b);
        return 1;
    }
    printf("cache-line round trip CPU %d <-> CPU %d: %.0f ns\n", a, b, ns);
    return 0;
}

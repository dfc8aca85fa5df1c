/* median — the middle of a few measurements, for the benches that repeat one (bench_cpu's
 * rounds, bench_warm's injections). */
#ifndef STALLSCOPE_BENCH_MEDIAN_H
#define STALLSCOPE_BENCH_MEDIAN_H

/* v[0, n) sorted in place, ascending. */
void median_sort(double *v, int n);
/* The median of sorted[0, n), n > 0: the mean of the middle two for an even count. */
double median_of_sorted(const double *sorted, int n);

#endif

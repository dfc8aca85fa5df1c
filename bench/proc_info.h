/* proc_info — what several benches ask of the machine: the stallscope binary they start,
 * and a process's resident memory. */
#ifndef STALLSCOPE_BENCH_PROC_INFO_H
#define STALLSCOPE_BENCH_PROC_INFO_H
#include <stddef.h>
#include <sys/types.h>

/* The stallscope binary a bench starts: STALLSCOPE_BIN when set, else ./stallscope beside the
 * running bench. */
void proc_info_stallscope_bin(char *out, size_t size);
/* VmRSS of pid, KiB; -1 unreadable. */
long proc_info_rss_kb(pid_t pid);

#endif

/* outdir — a run owns its directory (outdir.c): claimed, or staged and moved in whole. */
#ifndef STALLSCOPE_EXPERIMENT_OUTDIR_H
#define STALLSCOPE_EXPERIMENT_OUTDIR_H
#include <stdbool.h>
#include <stddef.h>

/* A run owns its directory, so two experiments never mix in one OUT: dir is created when
 * absent and taken when empty; when it holds what an earlier run or sweep wrote (baseline/,
 * interference/, point-k/, plots/, comparison.json, report.html, sweep.json, sweep.csv,
 * merge.json)
 * force removes that first, else it is refused; a directory holding anything else is always
 * refused. 0, or -1 with err (bad input: the command's exit 2). */
int experiment_claim_dir(const char *dir, bool force, char *err);

/* Where a run goes when no --out was given: dir itself when it is absent or empty (or with
 * force: experiment_claim_dir's rule then decides), else the first of dir-2, dir-3 ... (at
 * most dir-EXPERIMENT_DEFAULT_DIR_MAX) that is absent or empty, so that a second `sim` or a
 * run of another setting keeps the earlier one. Nothing is created: the caller claims
 * chosen. 0, or -1 with err (every name taken, or a name too long). */
#define EXPERIMENT_DEFAULT_DIR_MAX 999
int experiment_default_dir(const char *dir, bool force, char *chosen, size_t size, char *err);

/* A run directory written in one go (report --merge), so that a failure leaves nothing: it
 * is built in a staging directory beside OUT (OUT.<what>-PID, on OUT's file system) and its
 * entries move into OUT only when it is whole. */
typedef struct experiment_staging {
    char out[4096];  /* OUT as given */
    char dir[4200];  /* the staging directory ("": none) */
    char made[4096]; /* the shallowest parent of OUT this created ("": none) */
} experiment_staging;
/* Check that OUT could be claimed (experiment_claim_dir's rule; OUT itself is not touched),
 * then create the staging directory (and OUT's missing parents). 0, or -1 with err (bad
 * input: the command's exit 2). */
int experiment_stage_dir(experiment_staging *s, const char *out, bool force, const char *what,
                         char *err);
/* Claim OUT (with force its earlier run is removed now, not before) and move the staging
 * directory's entries into it, then remove the staging directory. 0; -2 with err when OUT is
 * refused (it changed since the check); -1 with err when a move failed (OUT then holds part
 * of the entries, the staging directory the rest). */
int experiment_stage_commit(experiment_staging *s, bool force, char *err);
/* Remove the staging directory and the parents experiment_stage_dir created (those still
 * empty). Nothing after a commit. */
void experiment_stage_abandon(experiment_staging *s);

#endif

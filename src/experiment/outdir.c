/* outdir — a run owns its directory: OUT is new or empty, or --force clears what an earlier
 * stallscope run left there. A directory that holds anything else is never cleared: a
 * mistyped --out must not cost someone their files. What is written in one go (a merge) is
 * built in a staging directory beside OUT and moved in only once whole. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fsio.h"
#include "experiment/outdir.h"
#include "experiment/pair.h"

/* Names tried for a staging directory before giving up. */
#define STAGE_ATTEMPTS 100

/* What runs and sweeps write into OUT (and their .tmp siblings). */
static bool ours(const char *name)
{
    static const char *const names[] = {EXPERIMENT_RUN_BASELINE, EXPERIMENT_RUN_INTERFERENCE,
                                        EXPERIMENT_RUN_TRAFFIC,  "plots",
                                        "comparison.json",       "report.html",
                                        "sweep.json",            "sweep.csv",
                                        "merge.json",            "tune.json",
                                        "tune.html"};
    char base[256];
    snprintf(base, sizeof base, "%s", name);
    size_t n = strlen(base);
    if (n > 4 && strcmp(base + n - 4, ".tmp") == 0)
        base[n - 4] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(base, names[i]) == 0)
            return true;
    /* point-1, point-2 ...: a sweep's points; verify-1 ...: tune's live candidates */
    const size_t skip = strncmp(base, "point-", 6) == 0    ? 6
                        : strncmp(base, "verify-", 7) == 0 ? 7
                                                           : 0;
    if (skip == 0 || !base[skip])
        return false;
    for (const char *p = base + skip; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* Whether dir may be claimed, changing nothing: 0 with *exists and *earlier (it holds only
 * what runs and sweeps write, and force allows clearing it), or -1 with err. */
static int check_claim(const char *dir, bool force, bool *exists, bool *earlier, char *err)
{
    *exists = *earlier = false;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, "%s: %s", dir, strerror(errno));
    }
    *exists = true;
    char first[256] = "", foreign[256] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (!first[0])
            snprintf(first, sizeof first, "%s", e->d_name);
        if (!foreign[0] && !ours(e->d_name))
            snprintf(foreign, sizeof foreign, "%s", e->d_name);
    }
    closedir(d);
    if (!first[0])
        return 0; /* empty: ours now */
    if (foreign[0])
        return err_set(err, "%s is not empty and holds files stallscope did not write (%s): "
                            "give a new --out",
                       dir, foreign);
    if (!force)
        return err_set(err, "%s already holds an earlier run (%s ...): --force replaces it, "
                            "or give a new --out",
                       dir, first);
    *earlier = true;
    return 0;
}

int experiment_claim_dir(const char *dir, bool force, char *err)
{
    bool exists, earlier;
    if (check_claim(dir, force, &exists, &earlier, err) != 0)
        return -1;
    if (!exists)
        return fsio_mkdirs(dir, err);
    if (!earlier)
        return 0;
    /* Every entry is one of ours (checked): remove them one by one. */
    DIR *d = opendir(dir);
    if (!d)
        return err_set(err, "%s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[4400];
        rc = fsio_join(path, sizeof path, dir, e->d_name, err);
        if (rc == 0)
            rc = fsio_remove_tree(path, err);
    }
    closedir(d);
    return rc;
}

/* Whether dir is absent or an empty directory: free for a new run. */
static bool dir_free(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT;
    bool empty = true;
    struct dirent *e;
    while (empty && (e = readdir(d)) != NULL)
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

int experiment_default_dir(const char *dir, bool force, char *chosen, size_t size, char *err)
{
    if (snprintf(chosen, size, "%s", dir) >= (int)size)
        return err_set(err, "path too long: %.80s...", dir);
    if (force || dir_free(dir))
        return 0;
    /* Bounded: at most EXPERIMENT_DEFAULT_DIR_MAX names, one opendir each. */
    for (int n = 2; n <= EXPERIMENT_DEFAULT_DIR_MAX; n++) {
        if (snprintf(chosen, size, "%s-%d", dir, n) >= (int)size)
            return err_set(err, "path too long: %.80s...", dir);
        if (dir_free(chosen))
            return 0;
    }
    return err_set(err, "%s and %s-2 ... %s-%d all hold earlier runs: give --out DIR, or --force "
                        "to replace %s",
                   dir, dir, dir, EXPERIMENT_DEFAULT_DIR_MAX, dir);
}

/* ---- a directory built beside OUT, moved into it on success ------------------------------ */

/* The shallowest directory of path (an absolute path) that does not exist: "" when all do. */
static void first_missing(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    const size_t len = strlen(path);
    /* Bounded by the path's length: one stat per component. */
    for (size_t at = 1; at <= len; at++) {
        if (path[at] != '/' && path[at] != '\0')
            continue;
        char prefix[PATH_MAX];
        snprintf(prefix, sizeof prefix, "%.*s", (int)at, path);
        struct stat st;
        if (stat(prefix, &st) != 0) {
            snprintf(out, size, "%s", prefix);
            return;
        }
    }
}

int experiment_stage_dir(experiment_staging *s, const char *out, bool force, const char *what,
                         char *err)
{
    memset(s, 0, sizeof *s);
    bool exists, earlier;
    if (snprintf(s->out, sizeof s->out, "%s", out) >= (int)sizeof s->out)
        return err_set(err, "path too long: %.80s...", out);
    if (check_claim(out, force, &exists, &earlier, err) != 0)
        return -1;
    /* Beside OUT as the file system sees it (a symbolic link followed): one file system, so
     * the entries move by rename. */
    char abs[PATH_MAX], parent[PATH_MAX];
    if (fsio_absolute_path(out, abs) != 0)
        return err_set(err, "%s: cannot resolve the directory", out);
    size_t len = strlen(abs);
    while (len > 1 && abs[len - 1] == '/')
        abs[--len] = '\0';
    const char *slash = strrchr(abs, '/');
    if (len <= 1 || !slash)
        return err_set(err, "%s: give a directory below /", out);
    snprintf(parent, sizeof parent, "%.*s", slash == abs ? 1 : (int)(slash - abs), abs);
    first_missing(parent, s->made, sizeof s->made);
    if (fsio_mkdirs(parent, err) != 0)
        return -1;
    /* OUT.<what>-PID; a name left by an earlier process of the same id: the next one. */
    for (int n = 0; n < STAGE_ATTEMPTS; n++) {
        int w = n == 0 ? snprintf(s->dir, sizeof s->dir, "%s.%s-%ld", abs, what, (long)getpid())
                       : snprintf(s->dir, sizeof s->dir, "%s.%s-%ld-%d", abs, what,
                                  (long)getpid(), n);
        if (w >= (int)sizeof s->dir) {
            err_set(err, "path too long: %.80s...", abs);
            break;
        }
        if (mkdir(s->dir, 0777) == 0)
            return 0;
        const int e = errno;
        err_set(err, "cannot create %s: %s", s->dir, strerror(e));
        if (e != EEXIST)
            break;
    }
    s->dir[0] = '\0';
    experiment_stage_abandon(s);
    return -1;
}

int experiment_stage_commit(experiment_staging *s, bool force, char *err)
{
    if (experiment_claim_dir(s->out, force, err) != 0)
        return -2;
    DIR *d = opendir(s->dir);
    if (!d)
        return err_set(err, "%s: %s", s->dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char from[4600], to[4600];
        rc = fsio_join(from, sizeof from, s->dir, e->d_name, err);
        if (rc == 0)
            rc = fsio_join(to, sizeof to, s->out, e->d_name, err);
        if (rc == 0 && rename(from, to) != 0)
            rc = err_set(err, "cannot move %s to %s: %s", from, to, strerror(errno));
    }
    closedir(d);
    if (rc == 0 && rmdir(s->dir) != 0)
        rc = err_set(err, "cannot remove %s: %s", s->dir, strerror(errno));
    if (rc == 0)
        s->dir[0] = s->made[0] = '\0'; /* nothing to abandon */
    return rc;
}

void experiment_stage_abandon(experiment_staging *s)
{
    char ignored[ERR_LEN];
    if (s->dir[0]) {
        fsio_remove_tree(s->dir, ignored);
        s->dir[0] = '\0';
    }
    if (!s->made[0])
        return;
    /* The parents this made, deepest first; rmdir leaves any that someone filled since. */
    char path[PATH_MAX];
    if (fsio_absolute_path(s->out, path) != 0)
        return;
    char *slash;
    while ((slash = strrchr(path, '/')) != NULL && slash > path) {
        *slash = '\0';
        if (strlen(path) < strlen(s->made))
            break;
        if (rmdir(path) != 0)
            break;
    }
    s->made[0] = '\0';
}

/* outdir — a run owns its directory: OUT is new or empty, or --force clears what an earlier
 * stallscope run left there. A directory that holds anything else is never cleared: a
 * mistyped --out must not cost someone their files. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "experiment/experiment.h"

/* What runs and sweeps write into OUT (and their .tmp siblings). */
static bool ours(const char *name)
{
    static const char *const names[] = {"baseline",    "interference", "plots",
                                        "comparison.json", "report.html", "sweep.json",
                                        "sweep.csv",       "merge.json", "tune.json",
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

int experiment_claim_dir(const char *dir, bool force, char *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return fsio_mkdirs(dir, err);
        return err_set(err, "%s: %s", dir, strerror(errno));
    }
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
    /* Every entry is one of ours (checked above): remove them one by one. */
    if (!(d = opendir(dir)))
        return err_set(err, "%s: %s", dir, strerror(errno));
    int rc = 0;
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

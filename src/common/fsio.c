#include "common/fsio.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"

int fsio_mkdirs(const char *path, char *err)
{
    char buf[4096];
    if (!path[0])
        return err_set(err, "empty directory name");
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return err_set(err, "path too long: %.80s...", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return err_set(err, "cannot create %s: %s", buf, strerror(errno));
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, "cannot create %s: a file of that name is in the way", path);
    return 0;
}

int fsio_join(char *out, size_t size, const char *dir, const char *name, char *err)
{
    if (snprintf(out, size, "%s/%s", dir, name) >= (int)size)
        return err_set(err, "path too long: %.80s/%s", dir, name);
    return 0;
}

int fsio_absolute_path(const char *path, char *out)
{
    char head[PATH_MAX];
    size_t cut = strlen(path);
    if (cut >= sizeof head)
        return -1;
    memcpy(head, path, cut + 1);
    /* Bounded: each pass drops one trailing component. */
    for (;;) {
        const char *try = cut > 0 ? head : path[0] == '/' ? "/" : ".";
        if (realpath(try, out))
            break;
        if (cut == 0)
            return -1;
        char *slash = memrchr(head, '/', cut);
        cut = slash ? (size_t)(slash - head) : 0;
        head[cut] = '\0';
    }
    const char *rest = path + cut;
    while (*rest == '/')
        rest++;
    size_t n = strlen(out), len = strlen(rest);
    if (!len)
        return 0;
    if (n + 1 + len >= PATH_MAX)
        return -1;
    if (out[n - 1] != '/')
        out[n++] = '/';
    memcpy(out + n, rest, len + 1);
    return 0;
}

int fsio_write_atomic(const char *path, const void *data, size_t len, char *err)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return err_set(err, "path too long: %.80s...", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return err_set(err, "cannot write %s: %s", tmp, strerror(errno));
    size_t put = fwrite(data, 1, len, f);
    int e = errno;
    /* fclose flushes: a full disk shows up here as often as in fwrite. */
    if (fclose(f) != 0) {
        e = errno;
        put = 0;
    }
    if (put != len) {
        remove(tmp);
        return err_set(err, "cannot write %s: %s", tmp, strerror(e ? e : EIO));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        remove(tmp);
        return err_set(err, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    return 0;
}

int fsio_write_json(const char *path, const json_t *json, size_t flags, char *err)
{
    if (!json)
        return err_set(err, "%s: nothing to write (out of memory building it?)", path);
    char *text = json_dumps(json, flags ? flags : FSIO_JSON_FLAGS);
    if (!text)
        return err_set(err, "%s: cannot encode JSON", path);
    size_t len = strlen(text);
    /* json_dump_file ends without a newline; text files should end with one. */
    char *line = realloc(text, len + 2);
    if (!line) {
        free(text);
        return err_set(err, "%s: out of memory", path);
    }
    line[len] = '\n';
    line[len + 1] = '\0';
    int rc = fsio_write_atomic(path, line, len + 1, err);
    free(line);
    return rc;
}

int fsio_create(fsio_file *file, const char *path, char *err)
{
    memset(file, 0, sizeof *file);
    if (snprintf(file->path, sizeof file->path, "%s", path) >= (int)sizeof file->path ||
        snprintf(file->tmp, sizeof file->tmp, "%s.tmp", path) >= (int)sizeof file->tmp)
        return err_set(err, "path too long: %.80s...", path);
    file->f = fopen(file->tmp, "wb");
    if (!file->f)
        return err_set(err, "cannot write %s: %s", file->tmp, strerror(errno));
    return 0;
}

int fsio_commit(fsio_file *file, char *err)
{
    if (!file->f)
        return err_set(err, "%s: not open", file->path);
    int failed = ferror(file->f);
    int e = errno;
    if (fclose(file->f) != 0) {
        failed = 1;
        e = errno;
    }
    file->f = NULL;
    if (failed) {
        remove(file->tmp);
        return err_set(err, "cannot write %s: %s", file->tmp, strerror(e ? e : EIO));
    }
    if (rename(file->tmp, file->path) != 0) {
        e = errno;
        remove(file->tmp);
        return err_set(err, "cannot rename %s to %s: %s", file->tmp, file->path, strerror(e));
    }
    return 0;
}

void fsio_abandon(fsio_file *file)
{
    if (file->f) {
        fclose(file->f);
        file->f = NULL;
        remove(file->tmp);
    }
}

static char remove_failed[4096];
static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    int rc = flag == FTW_DP ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT) {
        snprintf(remove_failed, sizeof remove_failed, "%s: %s", path, strerror(errno));
        return 1; /* stop the walk */
    }
    return 0;
}

int fsio_remove_tree(const char *path, char *err)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : err_set(err, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return unlink(path) == 0 ? 0 : err_set(err, "cannot remove %s: %s", path, strerror(errno));
    remove_failed[0] = '\0';
    /* Depth first, never across a symbolic link or onto another file system. */
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0)
        return err_set(err, "cannot remove %s", remove_failed[0] ? remove_failed : path);
    return 0;
}

json_t *fsio_read_json(const char *path, size_t flags, char *err)
{
    json_error_t jerr;
    json_t *doc = json_load_file(path, flags, &jerr);
    if (doc)
        return doc;
    if (jerr.line < 1) /* jansson's text names the file here ("unable to open PATH: ...") */
        err_set(err, "%s", jerr.text);
    else
        err_set(err, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    return NULL;
}

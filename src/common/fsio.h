/* fsio — the file operations every layer that writes artifacts shares: create a directory
 * with its parents, and replace a file atomically (write beside it, then rename), so a
 * reader — a user's script, `stallscope report`, a browser — never sees half a file. */
#ifndef STALLSCOPE_FSIO_H
#define STALLSCOPE_FSIO_H
#include <stddef.h>

#include <jansson.h>

/* mkdir -p: 0, or -1 with err naming the directory that could not be made. */
int fsio_mkdirs(const char *path, char *err);

/* Write len bytes to path.tmp, then rename over path. 0, or -1 with err (and no path.tmp
 * left behind). */
int fsio_write_atomic(const char *path, const void *data, size_t len, char *err);

/* JSON with json_dumps flags (0: FSIO_JSON_FLAGS), written atomically, with a newline. */
#define FSIO_JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(10))
int fsio_write_json(const char *path, const json_t *json, size_t flags, char *err);
/* The JSON document in path (json_load_file flags), or NULL with err "PATH:LINE:COLUMN: what"
 * (a syntax error) or "PATH: what" (cannot read it). The one reader of every JSON file. */
json_t *fsio_read_json(const char *path, size_t flags, char *err);

/* A file written in one go by stdio and swapped in whole: fsio_create writes to path.tmp,
 * fsio_commit closes it (flushing: a full disk is reported here) and renames it over path,
 * fsio_abandon closes and removes it. */
typedef struct fsio_file {
    FILE *f;
    char path[4096];
    char tmp[4200];
} fsio_file;
int fsio_create(fsio_file *file, const char *path, char *err);
int fsio_commit(fsio_file *file, char *err);
void fsio_abandon(fsio_file *file);

/* rm -r of one path (a file or a directory tree; symbolic links are removed, never
 * followed). 0, or -1 with err naming what could not be removed. */
int fsio_remove_tree(const char *path, char *err);

/* The absolute form of a path that may not exist yet, into out (PATH_MAX bytes): its
 * longest existing prefix resolved (realpath: symbolic links followed), the rest appended.
 * 0, or -1 when nothing of it resolves or it is too long. */
int fsio_absolute_path(const char *path, char *out);

/* "DIR/NAME" into out; -1 with err when it does not fit. */
int fsio_join(char *out, size_t size, const char *dir, const char *name, char *err);

#endif

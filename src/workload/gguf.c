/* gguf — GGUF metadata, read from the file's head (gguf.h). */
#include "workload/gguf.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

enum {
    T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64,
    T_F64, T_COUNT
};

/* Bytes of a fixed-size value of each type (0: string and array). */
static const int type_size[T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

typedef struct reader {
    FILE *f;
    const char *name;
    int64_t left; /* bytes of the file not read yet */
    char *err;
} reader;

static int get(reader *r, void *out, size_t n, const char *what)
{
    if ((int64_t)n > r->left || fread(out, 1, n, r->f) != n)
        return err_set(r->err, "%s: the file ends inside %s", r->name, what);
    r->left -= (int64_t)n;
    return 0;
}

static uint64_t le(const unsigned char *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static int get_u(reader *r, int n, uint64_t *v, const char *what)
{
    unsigned char b[8];
    if (get(r, b, (size_t)n, what) != 0)
        return -1;
    *v = le(b, n);
    return 0;
}

static int skip(reader *r, int64_t n, const char *what)
{
    if (n > r->left || fseeko(r->f, (off_t)n, SEEK_CUR) != 0)
        return err_set(r->err, "%s: the file ends inside %s", r->name, what);
    r->left -= n;
    return 0;
}

/* A string: malloc'ed, NUL-terminated (*n bytes, which may hold a NUL). */
static char *get_string(reader *r, size_t *n, const char *what)
{
    uint64_t len;
    if (get_u(r, 8, &len, what) != 0)
        return NULL;
    if (len > GGUF_MAX_STRING) {
        err_set(r->err, "%s: %s is %llu bytes long (at most %d)", r->name, what,
                (unsigned long long)len, GGUF_MAX_STRING);
        return NULL;
    }
    char *s = malloc((size_t)len + 1);
    if (!s) {
        err_set(r->err, "%s: out of memory", r->name);
        return NULL;
    }
    if (get(r, s, (size_t)len, what) != 0) {
        free(s);
        return NULL;
    }
    s[len] = '\0';
    *n = (size_t)len;
    return s;
}

/* A string passed over: its length, then its bytes, never copied. */
static int skip_string(reader *r, const char *what)
{
    uint64_t len;
    if (get_u(r, 8, &len, what) != 0)
        return -1;
    return skip(r, len > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)len, what);
}

/* A fixed-size value of type t as JSON (NULL: a bad file, err set). */
static json_t *get_scalar(reader *r, uint32_t t, const char *key)
{
    uint64_t v;
    if (get_u(r, type_size[t], &v, key) != 0)
        return NULL;
    switch (t) {
    case T_BOOL:
        return json_boolean(v != 0);
    case T_I8:
        return json_integer((int8_t)v);
    case T_I16:
        return json_integer((int16_t)v);
    case T_I32:
        return json_integer((int32_t)v);
    case T_I64:
        return json_integer((json_int_t)v);
    case T_F32: {
        uint32_t u = (uint32_t)v;
        float x;
        memcpy(&x, &u, sizeof x);
        return isfinite(x) ? json_real(x) : json_null(); /* JSON has no NaN */
    }
    case T_F64: {
        double x;
        memcpy(&x, &v, sizeof x);
        return isfinite(x) ? json_real(x) : json_null();
    }
    default: /* u8 .. u64 */
        return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
    }
}

/* An array: of strings kept (keep) or passed over; of numbers passed over. */
static json_t *get_array(reader *r, bool keep, const char *key)
{
    uint64_t et, n;
    if (get_u(r, 4, &et, key) != 0 || get_u(r, 8, &n, key) != 0)
        return NULL;
    if (et >= T_COUNT || et == T_ARRAY) {
        err_set(r->err, "%s: %s: an array of type %llu is not read", r->name, key,
                (unsigned long long)et);
        return NULL;
    }
    const int64_t least = et == T_STRING ? 8 : type_size[et];
    if (n > GGUF_MAX_ARRAY || (int64_t)n * least > r->left) {
        err_set(r->err, "%s: %s: an array of %llu elements (the file is shorter, or it is over "
                        "%d)", r->name, key, (unsigned long long)n, GGUF_MAX_ARRAY);
        return NULL;
    }
    json_t *out = json_array();
    if (!out) {
        err_set(r->err, "%s: out of memory", r->name);
        return NULL;
    }
    if (et != T_STRING) {
        if (skip(r, (int64_t)n * least, key) == 0)
            return out;
        json_decref(out);
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!keep) {
            if (skip_string(r, key) != 0) {
                json_decref(out);
                return NULL;
            }
            continue;
        }
        size_t len;
        char *s = get_string(r, &len, key);
        if (!s) {
            json_decref(out);
            return NULL;
        }
        if (json_array_append_new(out, json_stringn(s, len)) != 0) {
            free(s);
            json_decref(out);
            err_set(r->err, "%s: %s[%llu] is not UTF-8 text", r->name, key, (unsigned long long)i);
            return NULL;
        }
        free(s);
    }
    return out;
}

bool workload_gguf_is(FILE *f)
{
    unsigned char magic[4];
    bool is = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    rewind(f);
    return is;
}

/* One pair: kept in out when its key starts with prefix. */
static int read_pair(reader *r, const char *prefix, json_t *out, uint64_t index)
{
    char what[64];
    snprintf(what, sizeof what, "the key of pair %llu", (unsigned long long)index);
    size_t klen;
    char *key = get_string(r, &klen, what);
    if (!key)
        return -1;
    uint64_t t;
    json_t *value = NULL;
    const bool keep = strncmp(key, prefix, strlen(prefix)) == 0 && strlen(key) == klen;
    if (get_u(r, 4, &t, key) != 0)
        goto fail;
    if (t >= T_COUNT) {
        err_set(r->err, "%s: %s has an unknown type %llu", r->name, key, (unsigned long long)t);
        goto fail;
    }
    if (t == T_ARRAY) {
        value = get_array(r, keep, key);
    } else if (t == T_STRING) {
        size_t len;
        char *s = get_string(r, &len, key);
        value = s ? json_stringn(s, len) : NULL;
        if (s && !value)
            err_set(r->err, "%s: %s is not UTF-8 text", r->name, key);
        free(s);
    } else {
        value = get_scalar(r, (uint32_t)t, key);
    }
    if (!value)
        goto fail;
    if (!keep) {
        json_decref(value);
    } else if (json_object_set_new(out, key, value) != 0) {
        err_set(r->err, "%s: the key of pair %llu is not UTF-8 text", r->name,
                (unsigned long long)index);
        goto fail;
    }
    free(key);
    return 0;
fail:
    free(key);
    return -1;
}

json_t *workload_gguf_metadata(FILE *f, int64_t size, const char *name, const char *prefix,
                               char *err)
{
    reader r = {f, name, size, err};
    unsigned char magic[4];
    uint64_t version, tensors, pairs;
    if (get(&r, magic, 4, "the header") != 0 || get_u(&r, 4, &version, "the header") != 0 ||
        get_u(&r, 8, &tensors, "the header") != 0 || get_u(&r, 8, &pairs, "the header") != 0)
        return NULL;
    if (memcmp(magic, "GGUF", 4) != 0) {
        err_set(err, "%s: not a GGUF file", name);
        return NULL;
    }
    if (version < 2 || version > 3) {
        err_set(err, "%s: GGUF version %llu is not read (2 and 3 are)", name,
                (unsigned long long)version);
        return NULL;
    }
    if (pairs > GGUF_MAX_PAIRS) {
        err_set(err, "%s: %llu metadata pairs (at most %d)", name, (unsigned long long)pairs,
                GGUF_MAX_PAIRS);
        return NULL;
    }
    (void)tensors;
    json_t *out = json_object();
    if (!out) {
        err_set(err, "%s: out of memory", name);
        return NULL;
    }
    for (uint64_t i = 0; i < pairs; i++)
        if (read_pair(&r, prefix, out, i) != 0) {
            json_decref(out);
            return NULL;
        }
    return out;
}

/* gguf — the metadata of a GGUF model file (llama.cpp's format), read from its head: the
 * key/value pairs that come before the tensors, which are never read, so a model of many
 * gigabytes costs the few megabytes of its vocabulary.
 *
 * Layout (little-endian, versions 2 and 3): "GGUF", u32 version, u64 tensor count, u64
 * pair count, then each pair: a string key (u64 length, bytes), a u32 type and its value.
 * Types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32
 * element type, u64 count, the elements), 10 u64, 11 i64, 12 f64.
 *
 * Every length and count is checked against what is left of the file and against the
 * limits below, so a truncated or hostile file is an error naming the key, never a huge
 * allocation or a read past the end. */
#ifndef STALLSCOPE_WORKLOAD_GGUF_H
#define STALLSCOPE_WORKLOAD_GGUF_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#define GGUF_MAX_PAIRS (1 << 20)        /* metadata pairs */
#define GGUF_MAX_STRING (1 << 20)       /* bytes of one string */
#define GGUF_MAX_ARRAY (1 << 24)        /* elements of one array */

/* Whether the file's first four bytes are GGUF's magic (rewinds f). */
bool workload_gguf_is(FILE *f);
/* The metadata pairs of f (size bytes from its current position: a file's size, or a
 * memory stream's) whose key starts with prefix, as a JSON object: numbers as JSON numbers,
 * bools, strings; arrays of strings as arrays (other arrays are skipped, their bytes passed
 * over). name is for messages. NULL with err ("NAME: why") on a bad file. */
json_t *workload_gguf_metadata(FILE *f, int64_t size, const char *name, const char *prefix,
                               char *err);

#endif

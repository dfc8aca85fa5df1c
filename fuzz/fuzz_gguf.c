/* libFuzzer target: the GGUF metadata reader (src/workload/gguf.c), which --tokenizer points
 * at a model file a user downloaded from anywhere.
 *
 * Input: the file's bytes, read through a memory stream; an odd length keeps every pair, an
 * even one only tokenizer.* (the rest passed over unread). Checked: a read either gives a JSON
 * object or fails with a message naming the file ("fuzz: ..."), never reads past the input
 * (ASan) and never allocates what a count asks for before the bytes are there (the RSS
 * limit); a file that reads also reads the same the second time (the reader holds no
 * state). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workload/gguf.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_gguf: %s\n", what);
    abort();
}

static json_t *read_once(const uint8_t *data, size_t size, char *err)
{
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return NULL;
    /* every pair kept, or only tokenizer.* (the others passed over, as --tokenizer reads) */
    json_t *meta = workload_gguf_metadata(f, (int64_t)size, "fuzz", size & 1 ? "" : "tokenizer.",
                                          err);
    fclose(f);
    return meta;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0; /* fmemopen refuses an empty buffer */
    char err[ERR_LEN] = "";
    json_t *meta = read_once(data, size, err);
    if (!meta) {
        if (strncmp(err, "fuzz: ", 6) != 0)
            fail("an error that does not name the file");
        return 0;
    }
    if (!json_is_object(meta))
        fail("metadata that is not an object");
    json_t *again = read_once(data, size, err);
    if (!again || !json_equal(meta, again))
        fail("a second read differs");
    json_decref(again);
    json_decref(meta);
    return 0;
}

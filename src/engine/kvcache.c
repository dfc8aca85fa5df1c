/* kvcache — the prefix cache's block table (see kvcache.h).
 *
 * Data: entries in one array (grown geometrically up to the pool's size, freed slots on a
 * free list), found by hash through an open-addressing table of entry indices (linear
 * probing, kept at most half full, deletion by shifting the run back so no tombstones
 * build up). The unreferenced entries form a doubly-linked LRU list through the entries:
 * the head is evicted first. Every operation is O(1) expected. */
#include "engine/kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"

#define NIL (-1)

typedef struct kv_entry {
    uint64_t hash;
    int64_t refs;
    int64_t tag; /* the caller's name for the block (kvcache_insert_tagged), or -1 */
    int32_t lru_prev, lru_next; /* in the LRU list while refs == 0 */
} kv_entry;

struct kvcache {
    int64_t capacity;      /* the pool's blocks: entries at most */
    kv_entry *entries;
    int32_t n_alloc;       /* entries allocated */
    int32_t n_used;        /* of them, holding a block (the rest on the free list) */
    int32_t free_head;     /* free entry slots, linked through lru_next */
    int32_t *slots;        /* hash table of entry indices, NIL empty */
    uint64_t mask;         /* table size - 1 */
    int32_t lru_head, lru_tail;
    int64_t n_evictable;
};

/* 64 well-mixed bits of x: one splitmix64 step from it (common/rng.h). */
static uint64_t mix64(uint64_t x)
{
    return rng_next(&x);
}

uint64_t kvcache_hash_block(uint64_t prev, const int32_t *ids, int block_size)
{
    uint64_t h = mix64(prev ^ (uint64_t)block_size);
    for (int i = 0; i < block_size; i++)
        h = mix64(h ^ (uint32_t)ids[i]);
    return h;
}

int64_t kvcache_hash_blocks(const int32_t *ids, int64_t n_tokens, int block_size, uint64_t *out)
{
    if (block_size <= 0 || n_tokens <= 0)
        return 0;
    const int64_t n_blocks = n_tokens / block_size;
    uint64_t chain = KVCACHE_HASH_SEED; /* the empty prefix */
    for (int64_t b = 0; b < n_blocks; b++) {
        chain = kvcache_hash_block(chain, ids + b * block_size, block_size);
        out[b] = chain;
    }
    return n_blocks;
}

kvcache *kvcache_create(int64_t capacity, char *err)
{
    if (capacity <= 0 || capacity > INT32_MAX / 4) {
        err_set(err, "prefix cache: a pool of %lld blocks is out of range", (long long)capacity);
        return NULL;
    }
    kvcache *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(err, "out of memory creating the prefix cache");
        return NULL;
    }
    c->capacity = capacity;
    c->free_head = NIL;
    c->lru_head = c->lru_tail = NIL;
    return c;
}

void kvcache_free(kvcache *c)
{
    if (!c)
        return;
    free(c->entries);
    free(c->slots);
    free(c);
}

static uint64_t slot_of(const kvcache *c, uint64_t hash)
{
    return mix64(hash) & c->mask;
}

/* The entry index of hash, NIL when not cached. */
static int32_t find(const kvcache *c, uint64_t hash)
{
    if (!c->slots)
        return NIL;
    for (uint64_t s = slot_of(c, hash);; s = (s + 1) & c->mask) {
        const int32_t e = c->slots[s];
        if (e == NIL || c->entries[e].hash == hash)
            return e;
    }
}

static void table_put(kvcache *c, int32_t e)
{
    uint64_t s = slot_of(c, c->entries[e].hash);
    while (c->slots[s] != NIL)
        s = (s + 1) & c->mask;
    c->slots[s] = e;
}

/* Remove entry e's slot and shift the probe run after it back, so that every remaining
 * entry stays reachable from its home slot without tombstones. */
static void table_remove(kvcache *c, int32_t e)
{
    uint64_t hole = slot_of(c, c->entries[e].hash);
    while (c->slots[hole] != e)
        hole = (hole + 1) & c->mask;
    c->slots[hole] = NIL;
    for (uint64_t s = (hole + 1) & c->mask; c->slots[s] != NIL; s = (s + 1) & c->mask) {
        const uint64_t home = slot_of(c, c->entries[c->slots[s]].hash);
        /* Move it into the hole unless its home lies cyclically in (hole, s]. */
        const bool stays = hole <= s ? (home > hole && home <= s) : (home > hole || home <= s);
        if (stays)
            continue;
        c->slots[hole] = c->slots[s];
        c->slots[s] = NIL;
        hole = s;
    }
}

/* Room for one more entry: the entry array and a table at most half full. */
static bool reserve(kvcache *c)
{
    if (c->free_head != NIL)
        return true;
    if ((int64_t)c->n_alloc >= c->capacity)
        return false;
    int64_t n = c->n_alloc ? (int64_t)c->n_alloc * 2 : 1024;
    if (n > c->capacity)
        n = c->capacity;
    kv_entry *entries = realloc(c->entries, (size_t)n * sizeof *entries);
    if (!entries)
        return false;
    c->entries = entries;
    for (int64_t i = n - 1; i >= c->n_alloc; i--) {
        entries[i].lru_next = c->free_head;
        c->free_head = (int32_t)i;
    }
    c->n_alloc = (int32_t)n;
    uint64_t size = 16;
    while (size < (uint64_t)n * 2)
        size <<= 1;
    if (c->slots && size == c->mask + 1)
        return true;
    int32_t *slots = malloc(size * sizeof *slots);
    if (!slots)
        return false;
    for (uint64_t s = 0; s < size; s++)
        slots[s] = NIL;
    int32_t *old = c->slots;
    const uint64_t old_size = old ? c->mask + 1 : 0;
    c->slots = slots;
    c->mask = size - 1;
    for (uint64_t s = 0; s < old_size; s++)
        if (old[s] != NIL)
            table_put(c, old[s]);
    free(old);
    return true;
}

static void lru_unlink(kvcache *c, int32_t e)
{
    kv_entry *x = &c->entries[e];
    if (x->lru_prev != NIL)
        c->entries[x->lru_prev].lru_next = x->lru_next;
    else
        c->lru_head = x->lru_next;
    if (x->lru_next != NIL)
        c->entries[x->lru_next].lru_prev = x->lru_prev;
    else
        c->lru_tail = x->lru_prev;
    x->lru_prev = x->lru_next = NIL;
    c->n_evictable--;
}

static void lru_push_back(kvcache *c, int32_t e)
{
    kv_entry *x = &c->entries[e];
    x->lru_next = NIL;
    x->lru_prev = c->lru_tail;
    if (c->lru_tail != NIL)
        c->entries[c->lru_tail].lru_next = e;
    else
        c->lru_head = e;
    c->lru_tail = e;
    c->n_evictable++;
}

int64_t kvcache_match(const kvcache *c, const uint64_t *hashes, int64_t n)
{
    int64_t i = 0;
    while (c && i < n && find(c, hashes[i]) != NIL)
        i++;
    return i;
}

int64_t kvcache_unreferenced(const kvcache *c, const uint64_t *hashes, int64_t n)
{
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t e = find(c, hashes[i]);
        if (e != NIL && c->entries[e].refs == 0)
            count++;
    }
    return count;
}

static void take_ref(kvcache *c, int32_t e)
{
    if (c->entries[e].refs++ == 0)
        lru_unlink(c, e);
}

void kvcache_ref(kvcache *c, uint64_t hash)
{
    const int32_t e = find(c, hash);
    if (e != NIL)
        take_ref(c, e);
}

kvcache_put kvcache_insert(kvcache *c, uint64_t hash)
{
    return kvcache_insert_tagged(c, hash, -1);
}

int64_t kvcache_tag(const kvcache *c, uint64_t hash)
{
    const int32_t e = find(c, hash);
    return e == NIL ? -1 : c->entries[e].tag;
}

kvcache_put kvcache_insert_tagged(kvcache *c, uint64_t hash, int64_t tag)
{
    const int32_t found = find(c, hash);
    if (found != NIL) {
        take_ref(c, found);
        return KVCACHE_SHARED;
    }
    /* The caller's block is one of the pool's and not yet an entry, so entries < capacity
     * and reserve fails only when memory does. */
    if (!reserve(c))
        return KVCACHE_PRIVATE;
    const int32_t e = c->free_head;
    c->free_head = c->entries[e].lru_next;
    c->entries[e] = (kv_entry){.hash = hash, .refs = 1, .tag = tag, .lru_prev = NIL,
                               .lru_next = NIL};
    c->n_used++;
    table_put(c, e);
    return KVCACHE_NEW;
}

void kvcache_unref(kvcache *c, uint64_t hash)
{
    const int32_t e = find(c, hash);
    if (e == NIL || c->entries[e].refs <= 0)
        return;
    if (--c->entries[e].refs == 0)
        lru_push_back(c, e);
}

static void drop(kvcache *c, int32_t e)
{
    lru_unlink(c, e);
    table_remove(c, e);
    c->entries[e].lru_next = c->free_head;
    c->free_head = e;
    c->n_used--;
}

bool kvcache_evict(kvcache *c)
{
    return kvcache_evict_tagged(c, NULL);
}

bool kvcache_evict_tagged(kvcache *c, int64_t *tag)
{
    if (c->lru_head == NIL)
        return false;
    if (tag)
        *tag = c->entries[c->lru_head].tag;
    drop(c, c->lru_head);
    return true;
}

int64_t kvcache_evict_all(kvcache *c)
{
    int64_t n = 0;
    while (kvcache_evict(c))
        n++;
    return n;
}

int64_t kvcache_evictable(const kvcache *c)
{
    return c->n_evictable;
}

int64_t kvcache_entries(const kvcache *c)
{
    return c->n_used;
}

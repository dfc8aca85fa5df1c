/* kvcache — the prefix cache's block table (vLLM's automatic prefix caching), used by the
 * scheduler (sched.h, "Prefix caching"). A pure module: no clock, no threads, no I/O.
 *
 * A full KV block of a prompt is named by a hash chain: block i's hash covers the block's
 * tokens and block i - 1's hash (kvcache_hash_blocks), so equal hashes mean equal prefixes.
 * The table holds one entry per cached block with a reference count: a running request that
 * computed or reused the block refers to it. An entry nobody refers to stays cached (its
 * block still holds the KV) and is evictable: the pool takes evictable blocks back least
 * recently released first, and within one request's release its deepest block first (a
 * later prompt is likelier to share the shallow ones), as vLLM's free queue does.
 *
 * The table only counts blocks: a block id is never needed downstream (the scheduler counts
 * KV blocks the same way). Every entry is one block of the pool, so there are at most
 * `capacity` entries (the pool's size). */
#ifndef STALLSCOPE_KVCACHE_H
#define STALLSCOPE_KVCACHE_H
#include <stdbool.h>
#include <stdint.h>

typedef struct kvcache kvcache;

/* A table for a pool of `capacity` blocks (> 0). NULL with err on failure. */
kvcache *kvcache_create(int64_t capacity, char *err);
void kvcache_free(kvcache *c);

/* How many of hashes[0..n) are cached, counted from the first: the longest cached prefix. */
int64_t kvcache_match(const kvcache *c, const uint64_t *hashes, int64_t n);
/* Of hashes[0..n) (all cached), how many nobody refers to (they leave the evictable pool
 * when a request takes them). */
int64_t kvcache_unreferenced(const kvcache *c, const uint64_t *hashes, int64_t n);
/* Refer to a cached block (it leaves the evictable pool if nobody referred to it). The hash
 * must be cached. */
void kvcache_ref(kvcache *c, uint64_t hash);
/* A request computed a full block: cache it with one reference. Returns
 *   KVCACHE_NEW     a new entry: the caller's block became it;
 *   KVCACHE_SHARED  the hash was cached already (another request computed the same prefix):
 *                   the reference went to that entry, the caller's own copy is free again;
 *   KVCACHE_PRIVATE out of memory growing the table: not cached, the caller keeps its block
 *                   as a private one (a miss later, never a wrong hit). */
typedef enum { KVCACHE_PRIVATE = -1, KVCACHE_SHARED = 0, KVCACHE_NEW = 1 } kvcache_put;
kvcache_put kvcache_insert(kvcache *c, uint64_t hash);
/* The same with a tag: the caller's name for the block (the cpu executor's KV block id, so
 * it finds the KV of a cached hash). A new entry keeps the tag; a shared one keeps its own.
 * Entries inserted without a tag have -1. */
kvcache_put kvcache_insert_tagged(kvcache *c, uint64_t hash, int64_t tag);
/* The tag of a cached hash; -1 when the hash is not cached. */
int64_t kvcache_tag(const kvcache *c, uint64_t hash);
/* Drop one reference; at zero the block joins the evictable pool as its most recent. */
void kvcache_unref(kvcache *c, uint64_t hash);
/* Evict the least recently released unreferenced block: its KV is gone, the pool has one
 * free block more. False when nothing is evictable. */
bool kvcache_evict(kvcache *c);
/* kvcache_evict, and *tag (may be NULL) gets the evicted entry's tag. */
bool kvcache_evict_tagged(kvcache *c, int64_t *tag);
/* Evict every unreferenced block (a reset: vLLM's /reset_prefix_cache); the count. */
int64_t kvcache_evict_all(kvcache *c);
int64_t kvcache_evictable(const kvcache *c); /* unreferenced entries */
int64_t kvcache_entries(const kvcache *c);   /* all entries */

/* The hash chain of a prompt's full blocks: out[i] names tokens [0, (i + 1) * block_size).
 * Returns the number of full blocks, n_tokens / block_size (out must hold that many). The
 * same tokens always give the same chain, in every process. */
int64_t kvcache_hash_blocks(const int32_t *ids, int64_t n_tokens, int block_size, uint64_t *out);
/* One link of the chain: the hash of the block `ids` (block_size tokens) after the prefix
 * named by prev (KVCACHE_HASH_SEED for the first block). kvcache_hash_blocks chains it. */
#define KVCACHE_HASH_SEED 0x9e3779b97f4a7c15ULL
uint64_t kvcache_hash_block(uint64_t prev, const int32_t *ids, int block_size);

#endif

/* kvslots — the slots of a unified KV cache (llama.cpp's server: -np slots sharing one
 * cache), used by the scheduler under SCHED_KV_UNIFIED (sched.h, "KV layout"). A pure
 * module: no clock, no threads, no I/O.
 *
 * A request takes a free slot when it is admitted and gives it back when it leaves. The
 * slot keeps the cells the request left behind (its prompt and generated tokens: llama.cpp's
 * prompt cache) until the next request takes it; the newcomer's cells replace them. The
 * choice among free slots follows llama.cpp's server: the slot whose retained prompt shares
 * the longest run of leading blocks with the newcomer's (by their hash chains, kvcache.h),
 * else, and among equals, the least recently released one.
 *
 * Only cells are counted, never placed: the cost model needs how many cells the attention
 * spans, not where they are. */
#ifndef STALLSCOPE_KVSLOTS_H
#define STALLSCOPE_KVSLOTS_H
#include <stdint.h>

typedef struct kvslots kvslots;

/* n_slots (> 0) free slots, none holding anything. NULL with err on failure. */
kvslots *kvslots_create(int n_slots, char *err);
void kvslots_free(kvslots *k);

/* Take a free slot for a request whose prompt's full blocks hash to hashes[0..n_hashes)
 * (NULL, 0: none known). Returns the slot, or -1 when every slot is taken. The cells the
 * slot retained are dropped (no longer counted by kvslots_retained_cells). */
int kvslots_take(kvslots *k, const uint64_t *hashes, int n_hashes);
/* The slot's occupant leaves: the slot keeps `cells` cells (0: it lost them, e.g. a
 * preemption) and the first n_hashes of its hash chain for matching (copied; on an
 * allocation failure the slot keeps its cells but matches nothing). */
void kvslots_release(kvslots *k, int slot, int64_t cells, const uint64_t *hashes,
                     int n_hashes);
/* Erase a slot (llama.cpp's POST /slots/{id}?action=erase): a free slot forgets the cells it
 * retained and the prompt it matched; a taken one is left to its occupant. The cells erased
 * (0: none retained, or taken), or -1 when there is no such slot. */
int64_t kvslots_erase(kvslots *k, int slot);
/* Cells the free slots retain, in all. */
int64_t kvslots_retained_cells(const kvslots *k);
/* Cells one slot retains (0 while taken). */
int64_t kvslots_slot_cells(const kvslots *k, int slot);

#endif

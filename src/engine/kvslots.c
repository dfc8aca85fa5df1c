/* kvslots — the slots of a unified KV cache (see kvslots.h).
 *
 * Data: one array of slots. A take scans it (O(slots) per admission, a few hundred at
 * most by default: far less than the step it admits into costs to model); a release is
 * O(its hashes). Release order is a counter, so "least recently released" needs no list. */
#include "engine/kvslots.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

typedef struct kv_slot {
    bool taken;
    int64_t cells;         /* retained while free; 0 while taken */
    int64_t released;      /* release order: lower = less recent (0: never used) */
    uint64_t *hashes;      /* the retained prompt's hash chain */
    int n_hashes, cap_hashes;
} kv_slot;

struct kvslots {
    kv_slot *slots;
    int n_slots;
    int64_t retained;      /* sum of the free slots' cells */
    int64_t next_release;
};

kvslots *kvslots_create(int n_slots, char *err)
{
    if (n_slots <= 0) {
        err_set(err, "a unified KV cache needs at least one slot (got %d)", n_slots);
        return NULL;
    }
    kvslots *k = calloc(1, sizeof *k);
    if (k)
        k->slots = calloc((size_t)n_slots, sizeof *k->slots);
    if (!k || !k->slots) {
        free(k);
        err_set(err, "out of memory for %d KV slots", n_slots);
        return NULL;
    }
    k->n_slots = n_slots;
    k->next_release = 1;
    return k;
}

void kvslots_free(kvslots *k)
{
    if (!k)
        return;
    for (int i = 0; i < k->n_slots; i++)
        free(k->slots[i].hashes);
    free(k->slots);
    free(k);
}

/* Leading blocks two hash chains share: equal hashes at i mean equal prefixes up to i. */
static int shared_blocks(const kv_slot *slot, const uint64_t *hashes, int n_hashes)
{
    const int n = slot->n_hashes < n_hashes ? slot->n_hashes : n_hashes;
    int i = 0;
    while (i < n && slot->hashes[i] == hashes[i])
        i++;
    return i;
}

/* A free slot forgets what it retained: its cells and the prompt it matched. */
static void forget(kvslots *k, kv_slot *slot)
{
    k->retained -= slot->cells;
    slot->cells = 0;
    slot->n_hashes = 0;
}

int kvslots_take(kvslots *k, const uint64_t *hashes, int n_hashes)
{
    if (!hashes)
        n_hashes = 0;
    int best = -1, best_shared = -1;
    for (int i = 0; i < k->n_slots; i++) {
        const kv_slot *slot = &k->slots[i];
        if (slot->taken)
            continue;
        const int shared = n_hashes > 0 ? shared_blocks(slot, hashes, n_hashes) : 0;
        if (shared > best_shared ||
            (shared == best_shared && slot->released < k->slots[best].released)) {
            best = i;
            best_shared = shared;
        }
    }
    if (best < 0)
        return -1;
    kv_slot *slot = &k->slots[best];
    forget(k, slot);
    slot->taken = true;
    return best;
}

void kvslots_release(kvslots *k, int slot_index, int64_t cells, const uint64_t *hashes,
                     int n_hashes)
{
    if (slot_index < 0 || slot_index >= k->n_slots || !k->slots[slot_index].taken)
        return;
    kv_slot *slot = &k->slots[slot_index];
    slot->taken = false;
    slot->cells = cells > 0 ? cells : 0;
    slot->released = k->next_release++;
    k->retained += slot->cells;
    slot->n_hashes = 0;
    if (!hashes || n_hashes <= 0 || slot->cells == 0)
        return;
    if (n_hashes > slot->cap_hashes) {
        uint64_t *grown = realloc(slot->hashes, (size_t)n_hashes * sizeof *grown);
        if (!grown)
            return; /* matches nothing; its cells still count */
        slot->hashes = grown;
        slot->cap_hashes = n_hashes;
    }
    memcpy(slot->hashes, hashes, (size_t)n_hashes * sizeof *hashes);
    slot->n_hashes = n_hashes;
}

int64_t kvslots_erase(kvslots *k, int slot_index)
{
    if (slot_index < 0 || slot_index >= k->n_slots)
        return -1;
    kv_slot *slot = &k->slots[slot_index];
    if (slot->taken)
        return 0;
    const int64_t cells = slot->cells;
    forget(k, slot);
    return cells;
}

int64_t kvslots_retained_cells(const kvslots *k)
{
    return k->retained;
}

int64_t kvslots_slot_cells(const kvslots *k, int slot)
{
    return slot >= 0 && slot < k->n_slots ? k->slots[slot].cells : 0;
}

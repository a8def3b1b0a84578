/* bounded_alloc.c: see bounded_alloc.h. Each block carries its size in a
 * header so that free can give the budget back. */
#include "bounded_alloc.h"

#include <stdlib.h>

struct block_header {
  size_t size;
  max_align_t align; /* keeps the payload aligned for any type */
};

static void *bounded_alloc(void *data, size_t size) {
  struct sbx_bounded_alloc *alloc = data;
  if (size > alloc->limit || alloc->used > alloc->limit - size) {
    alloc->exhausted = true;
    return NULL;
  }
  struct block_header *h = malloc(sizeof(*h) + size);
  if (h == NULL)
    return NULL;
  h->size = size;
  alloc->used += size;
  return &h->align;
}

static void bounded_free(void *data, void *ptr) {
  struct sbx_bounded_alloc *alloc = data;
  if (ptr == NULL)
    return;
  struct block_header *h =
      (struct block_header *)((char *)ptr - offsetof(struct block_header, align));
  alloc->used -= h->size;
  free(h);
}

void sbx_bounded_alloc_init(struct sbx_bounded_alloc *alloc, size_t limit) {
  alloc->base.alloc = bounded_alloc;
  alloc->base.free = bounded_free;
  alloc->base.allocator_data = alloc;
  alloc->used = 0;
  alloc->limit = limit;
  alloc->exhausted = false;
}

/* bounded_alloc.h: a protobuf-c allocator with a byte budget.
 *
 * protobuf-c 1.4.1 allocates as it decodes and has no limit of its own; every
 * decode of untrusted bytes goes through one of these so that a small hostile
 * message cannot make the server allocate without bound. Not thread-safe: one
 * per decode. */
#ifndef SBX_BOUNDED_ALLOC_H
#define SBX_BOUNDED_ALLOC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

struct sbx_bounded_alloc {
  ProtobufCAllocator base; /* pass &a.base to protobuf-c */
  size_t used;             /* bytes handed out and not yet freed */
  size_t limit;            /* allocations past this fail */
  bool exhausted;          /* an allocation was refused */
};

void sbx_bounded_alloc_init(struct sbx_bounded_alloc *alloc, size_t limit);

#endif

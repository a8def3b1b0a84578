/* session_pins.c: a bounded map from session id to endpoint key, least
 * recently used out first: hash buckets for the look-up, one doubly linked
 * list for the order. Holds copies of its strings; never grows past cap. */
#include "session_pins.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"

struct pin {
  char *session_id;
  char key[SBXC_KEY_MAX];
  uint32_t hash;
  struct pin *next;  /* in its bucket */
  struct pin *newer; /* in the use order */
  struct pin *older;
};

struct sbxc_pins {
  size_t cap, count, n_buckets; /* n_buckets: a power of two */
  struct pin **buckets;
  struct pin *newest, *oldest;
};

struct sbxc_pins *sbxc_pins_new(size_t cap) {
  struct sbxc_pins *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return NULL;
  p->cap = cap;
  p->n_buckets = 16;
  while (p->n_buckets < cap)
    p->n_buckets *= 2;
  p->buckets = calloc(p->n_buckets, sizeof(*p->buckets));
  if (p->buckets == NULL) {
    free(p);
    return NULL;
  }
  return p;
}

static uint32_t hash_of(const char *session_id) {
  return sbxc_fnv1a32(session_id, strlen(session_id));
}

static struct pin **slot_of(struct sbxc_pins *p, const char *session_id, uint32_t hash) {
  struct pin **at = &p->buckets[hash & (p->n_buckets - 1)];
  while (*at != NULL && ((*at)->hash != hash || strcmp((*at)->session_id, session_id) != 0))
    at = &(*at)->next;
  return at;
}

static void unlink_order(struct sbxc_pins *p, struct pin *n) {
  if (n->newer != NULL)
    n->newer->older = n->older;
  else
    p->newest = n->older;
  if (n->older != NULL)
    n->older->newer = n->newer;
  else
    p->oldest = n->newer;
  n->newer = n->older = NULL;
}

static void link_newest(struct sbxc_pins *p, struct pin *n) {
  n->older = p->newest;
  n->newer = NULL;
  if (p->newest != NULL)
    p->newest->newer = n;
  p->newest = n;
  if (p->oldest == NULL)
    p->oldest = n;
}

/* Unlinks n from its bucket and the order, and frees it. */
static void drop(struct sbxc_pins *p, struct pin *n) {
  struct pin **at = &p->buckets[n->hash & (p->n_buckets - 1)];
  while (*at != NULL && *at != n)
    at = &(*at)->next;
  if (*at == n)
    *at = n->next;
  unlink_order(p, n);
  free(n->session_id);
  free(n);
  p->count--;
}

const char *sbxc_pins_get(struct sbxc_pins *p, const char *session_id) {
  struct pin *n = *slot_of(p, session_id, hash_of(session_id));
  if (n == NULL)
    return NULL;
  unlink_order(p, n);
  link_newest(p, n);
  return n->key;
}

static int add_new(struct sbxc_pins *p, struct pin **at, const char *session_id, uint32_t hash,
                   const char *key) {
  struct pin *n = calloc(1, sizeof(*n));
  if (n == NULL || (n->session_id = strdup(session_id)) == NULL) {
    free(n);
    return -1;
  }
  snprintf(n->key, sizeof(n->key), "%s", key);
  n->hash = hash;
  *at = n;
  link_newest(p, n);
  p->count++;
  return 0;
}

int sbxc_pins_put(struct sbxc_pins *p, const char *session_id, const char *key) {
  uint32_t hash = hash_of(session_id);
  struct pin **at = slot_of(p, session_id, hash);
  if (*at != NULL) {
    snprintf((*at)->key, sizeof((*at)->key), "%s", key);
    unlink_order(p, *at);
    link_newest(p, *at);
    return 0;
  }
  if (p->count >= p->cap) {
    drop(p, p->oldest);
    at = slot_of(p, session_id, hash); /* the bucket may have changed */
  }
  return add_new(p, at, session_id, hash, key);
}

void sbxc_pins_remove(struct sbxc_pins *p, const char *session_id) {
  struct pin *n = *slot_of(p, session_id, hash_of(session_id));
  if (n != NULL)
    drop(p, n);
}

void sbxc_pins_clear(struct sbxc_pins *p) {
  while (p->oldest != NULL)
    drop(p, p->oldest);
}

size_t sbxc_pins_count(const struct sbxc_pins *p) {
  return p->count;
}

void sbxc_pins_free(struct sbxc_pins *p) {
  if (p == NULL)
    return;
  while (p->oldest != NULL)
    drop(p, p->oldest);
  free(p->buckets);
  free(p);
}

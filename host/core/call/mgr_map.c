/* mgr_map.c - the small uint64 -> pointer hash map of the manager. */
#include <stdlib.h>

#include "th/err.h"
#include "manager.h"

uint64_t th_hash_bytes(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static size_t slot(const th_u64map *m, uint64_t key)
{
    uint64_t x = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 17) & (m->nb - 1);
}

void th_u64map_init(th_u64map *m)
{
    m->b = NULL;
    m->nb = m->n = 0;
}

void th_u64map_destroy(th_u64map *m)
{
    for (size_t i = 0; i < m->nb; i++) {
        th_u64map_node *n = m->b[i];
        while (n) {
            th_u64map_node *next = n->next;
            free(n);
            n = next;
        }
    }
    free(m->b);
    th_u64map_init(m);
}

static int grow(th_u64map *m)
{
    size_t nb = m->nb ? m->nb * 2 : 16;
    th_u64map_node **b = calloc(nb, sizeof *b);
    if (!b)
        return TH_ENOMEM;
    th_u64map old = *m;
    m->b = b;
    m->nb = nb;
    for (size_t i = 0; i < old.nb; i++) {
        th_u64map_node *n = old.b[i];
        while (n) {
            th_u64map_node *next = n->next;
            size_t s = slot(m, n->key);
            n->next = m->b[s];
            m->b[s] = n;
            n = next;
        }
    }
    free(old.b);
    return 0;
}

/* Puts n at the head of key's bucket (room was made by the caller). */
static void link_node(th_u64map *m, th_u64map_node *n, uint64_t key,
                      void *val)
{
    size_t s = slot(m, key);
    n->key = key;
    n->val = val;
    n->next = m->b[s];
    m->b[s] = n;
    m->n++;
}

int th_u64map_put(th_u64map *m, uint64_t key, void *val)
{
    if (m->nb) {
        for (th_u64map_node *n = m->b[slot(m, key)]; n; n = n->next)
            if (n->key == key) {
                n->val = val;
                return 0;
            }
    }
    if (m->n >= m->nb && grow(m) != 0 && m->nb == 0)
        return TH_ENOMEM;
    th_u64map_node *n = malloc(sizeof *n);
    if (!n)
        return TH_ENOMEM;
    link_node(m, n, key, val);
    return 0;
}

void *th_u64map_get(const th_u64map *m, uint64_t key)
{
    if (!m->nb)
        return NULL;
    for (th_u64map_node *n = m->b[slot(m, key)]; n; n = n->next)
        if (n->key == key)
            return n->val;
    return NULL;
}

void *th_u64map_del(th_u64map *m, uint64_t key)
{
    if (!m->nb)
        return NULL;
    for (th_u64map_node **pp = &m->b[slot(m, key)]; *pp; pp = &(*pp)->next) {
        th_u64map_node *n = *pp;
        if (n->key == key) {
            void *v = n->val;
            *pp = n->next;
            free(n);
            m->n--;
            return v;
        }
    }
    return NULL;
}

void th_u64map_each(const th_u64map *m,
                    void (*fn)(uint64_t k, void *v, void *ud), void *ud)
{
    for (size_t i = 0; i < m->nb; i++)
        for (th_u64map_node *n = m->b[i]; n; n = n->next)
            fn(n->key, n->val, ud);
}

/* ---- Nodes owned by the caller ------------------------------------------ */

int th_u64map_put_node(th_u64map *m, th_u64map_node *n, uint64_t key,
                       void *val)
{
    if (th_u64map_get(m, key))
        return TH_ESTATE;
    if (m->n >= m->nb && grow(m) != 0 && m->nb == 0)
        return TH_ENOMEM;
    link_node(m, n, key, val);
    return 0;
}

void th_u64map_del_node(th_u64map *m, th_u64map_node *n)
{
    if (!m->nb)
        return;
    for (th_u64map_node **pp = &m->b[slot(m, n->key)]; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            n->next = NULL;
            m->n--;
            return;
        }
}

void th_u64map_destroy_unowned(th_u64map *m)
{
    free(m->b);
    th_u64map_init(m);
}

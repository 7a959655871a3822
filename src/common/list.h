/* SPDX-License-Identifier: MIT */
/* An intrusive circular doubly-linked list, as in the kernel's list.h. */
#ifndef SHUNT_LIST_H
#define SHUNT_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct shunt_list {
	struct shunt_list *next, *prev;
};

static inline void shunt_list_init(struct shunt_list *l)
{
	l->next = l->prev = l;
}

static inline bool shunt_list_empty(const struct shunt_list *l)
{
	return l->next == l;
}

/* Whether @n is on some list (nodes are re-initialised when removed). */
static inline bool shunt_list_linked(const struct shunt_list *n)
{
	return n->next != n;
}

static inline void shunt_list_add_tail(struct shunt_list *head, struct shunt_list *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static inline void shunt_list_del(struct shunt_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	shunt_list_init(n);
}

#define shunt_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* The first entry of a non-empty list. */
#define shunt_list_first(head, type, member) \
	shunt_container_of((head)->next, type, member)

/* Iterate; the loop body must not remove entries. */
#define shunt_list_for_each(pos, head) \
	for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

/* Iterate allowing removal of the current entry. */
#define shunt_list_for_each_safe(pos, tmp, head) \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif

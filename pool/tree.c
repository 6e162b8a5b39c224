/* pool/tree.c: the free sets: an intrusive red-black tree of blocks ordered
 * by (size, address).
 *
 * Best fit is a lower bound on size; ties go to the lowest address, which
 * keeps memory packed towards the start of a segment.  The node lives in
 * the block (xs_block_t.node), so insert and remove never allocate.  All
 * operations are O(log n); the tree also keeps the count and the byte sum
 * of its blocks, which the statistics read.
 */
#include <stddef.h>

#include "block.h"

#define NODE_BLOCK(n) ((xs_block_t *)((char *)(n) - offsetof(xs_block_t, node)))

/* (size, addr) order. */
static inline int less(const xs_block_t *a, const xs_block_t *b) {
  return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

static void rotate_left(xs_tree_t *t, xs_rbnode_t *x) {
  xs_rbnode_t *y = x->right;
  x->right = y->left;
  if (y->left) y->left->parent = x;
  y->parent = x->parent;
  if (!x->parent)
    t->root = y;
  else if (x == x->parent->left)
    x->parent->left = y;
  else
    x->parent->right = y;
  y->left = x;
  x->parent = y;
}

static void rotate_right(xs_tree_t *t, xs_rbnode_t *x) {
  xs_rbnode_t *y = x->left;
  x->left = y->right;
  if (y->right) y->right->parent = x;
  y->parent = x->parent;
  if (!x->parent)
    t->root = y;
  else if (x == x->parent->right)
    x->parent->right = y;
  else
    x->parent->left = y;
  y->right = x;
  x->parent = y;
}

void xs_tree_insert(xs_tree_t *t, xs_block_t *b) {
  xs_rbnode_t *z = &b->node, *y = NULL, *x = t->root;
  while (x) {
    y = x;
    x = less(b, NODE_BLOCK(x)) ? x->left : x->right;
  }
  z->parent = y;
  z->left = z->right = NULL;
  z->red = 1;
  if (!y)
    t->root = z;
  else if (less(b, NODE_BLOCK(y)))
    y->left = z;
  else
    y->right = z;
  t->count++;
  t->bytes += b->size;

  /* Restore the red-black properties. */
  while (z->parent && z->parent->red) {
    xs_rbnode_t *p = z->parent, *g = p->parent;
    if (p == g->left) {
      xs_rbnode_t *u = g->right;
      if (u && u->red) {
        p->red = u->red = 0;
        g->red = 1;
        z = g;
      } else {
        if (z == p->right) {
          z = p;
          rotate_left(t, z);
          p = z->parent;
        }
        p->red = 0;
        g->red = 1;
        rotate_right(t, g);
      }
    } else {
      xs_rbnode_t *u = g->left;
      if (u && u->red) {
        p->red = u->red = 0;
        g->red = 1;
        z = g;
      } else {
        if (z == p->left) {
          z = p;
          rotate_right(t, z);
          p = z->parent;
        }
        p->red = 0;
        g->red = 1;
        rotate_left(t, g);
      }
    }
  }
  t->root->red = 0;
}

/* Put v where u was (u's subtrees are handled by the caller). */
static void transplant(xs_tree_t *t, xs_rbnode_t *u, xs_rbnode_t *v) {
  if (!u->parent)
    t->root = v;
  else if (u == u->parent->left)
    u->parent->left = v;
  else
    u->parent->right = v;
  if (v) v->parent = u->parent;
}

void xs_tree_remove(xs_tree_t *t, xs_block_t *b) {
  xs_rbnode_t *z = &b->node, *x, *xparent;
  int removed_red = z->red;
  if (!z->left) {
    x = z->right;
    xparent = z->parent;
    transplant(t, z, z->right);
  } else if (!z->right) {
    x = z->left;
    xparent = z->parent;
    transplant(t, z, z->left);
  } else {
    xs_rbnode_t *y = z->right;
    while (y->left) y = y->left;
    removed_red = y->red;
    x = y->right;
    if (y->parent == z) {
      xparent = y;
    } else {
      xparent = y->parent;
      transplant(t, y, y->right);
      y->right = z->right;
      y->right->parent = y;
    }
    transplant(t, z, y);
    y->left = z->left;
    y->left->parent = y;
    y->red = z->red;
  }
  t->count--;
  t->bytes -= b->size;
  z->left = z->right = z->parent = NULL;
  if (removed_red) return;

  /* A black node left: push the missing black up or rotate it in. */
  while (x != t->root && (!x || !x->red)) {
    if (x == xparent->left) {
      xs_rbnode_t *w = xparent->right;
      if (w->red) {
        w->red = 0;
        xparent->red = 1;
        rotate_left(t, xparent);
        w = xparent->right;
      }
      if ((!w->left || !w->left->red) && (!w->right || !w->right->red)) {
        w->red = 1;
        x = xparent;
        xparent = x->parent;
      } else {
        if (!w->right || !w->right->red) {
          w->left->red = 0;
          w->red = 1;
          rotate_right(t, w);
          w = xparent->right;
        }
        w->red = xparent->red;
        xparent->red = 0;
        if (w->right) w->right->red = 0;
        rotate_left(t, xparent);
        x = t->root;
        break;
      }
    } else {
      xs_rbnode_t *w = xparent->left;
      if (w->red) {
        w->red = 0;
        xparent->red = 1;
        rotate_right(t, xparent);
        w = xparent->left;
      }
      if ((!w->left || !w->left->red) && (!w->right || !w->right->red)) {
        w->red = 1;
        x = xparent;
        xparent = x->parent;
      } else {
        if (!w->left || !w->left->red) {
          w->right->red = 0;
          w->red = 1;
          rotate_left(t, w);
          w = xparent->left;
        }
        w->red = xparent->red;
        xparent->red = 0;
        if (w->left) w->left->red = 0;
        rotate_right(t, xparent);
        x = t->root;
        break;
      }
    }
  }
  if (x) x->red = 0;
}

xs_block_t *xs_tree_lower_bound(const xs_tree_t *t, size_t size) {
  xs_rbnode_t *n = t->root, *best = NULL;
  while (n) {
    if (NODE_BLOCK(n)->size >= size) {
      best = n;
      n = n->left;
    } else {
      n = n->right;
    }
  }
  return best ? NODE_BLOCK(best) : NULL;
}

xs_block_t *xs_tree_first(const xs_tree_t *t) {
  xs_rbnode_t *n = t->root;
  if (!n) return NULL;
  while (n->left) n = n->left;
  return NODE_BLOCK(n);
}

xs_block_t *xs_tree_last(const xs_tree_t *t) {
  xs_rbnode_t *n = t->root;
  if (!n) return NULL;
  while (n->right) n = n->right;
  return NODE_BLOCK(n);
}

xs_block_t *xs_tree_next(const xs_block_t *b) {
  const xs_rbnode_t *n = &b->node;
  if (n->right) {
    n = n->right;
    while (n->left) n = n->left;
    return NODE_BLOCK(n);
  }
  while (n->parent && n == n->parent->right) n = n->parent;
  return n->parent ? NODE_BLOCK(n->parent) : NULL;
}

xs_block_t *xs_tree_prev(const xs_block_t *b) {
  const xs_rbnode_t *n = &b->node;
  if (n->left) {
    n = n->left;
    while (n->right) n = n->right;
    return NODE_BLOCK(n);
  }
  while (n->parent && n == n->parent->left) n = n->parent;
  return n->parent ? NODE_BLOCK(n->parent) : NULL;
}

/* Black height of n's subtree, or -1 if a property is broken. */
static int check_node(const xs_rbnode_t *n, const xs_rbnode_t *parent, size_t *count,
                      size_t *bytes, const char **why) {
  if (!n) return 1;
  if (n->parent != parent) {
    *why = "free-set tree: parent link broken";
    return -1;
  }
  if (n->red && ((n->left && n->left->red) || (n->right && n->right->red))) {
    *why = "free-set tree: red node with a red child";
    return -1;
  }
  const xs_block_t *b = NODE_BLOCK(n);
  if ((n->left && !less(NODE_BLOCK(n->left), b)) || (n->right && !less(b, NODE_BLOCK(n->right)))) {
    *why = "free-set tree: (size, address) order broken";
    return -1;
  }
  (*count)++;
  *bytes += b->size;
  int l = check_node(n->left, n, count, bytes, why);
  int r = check_node(n->right, n, count, bytes, why);
  if (l < 0 || r < 0) return -1;
  if (l != r) {
    *why = "free-set tree: black heights differ";
    return -1;
  }
  return l + !n->red;
}

const char *xs_tree_check(const xs_tree_t *t) {
  const char *why = NULL;
  size_t count = 0, bytes = 0;
  if (t->root && t->root->red) return "free-set tree: red root";
  if (check_node(t->root, NULL, &count, &bytes, &why) < 0) return why;
  if (count != t->count) return "free-set tree: count differs from its nodes";
  if (bytes != t->bytes) return "free-set tree: byte sum differs from its nodes";
  return NULL;
}

/*
 * mix.c: the schedule of a mixture of sources (stoker.h, "Mixtures").
 *
 * An epoch is a list of phases (one, except under STK_MIX_ALL), each
 * giving every source still drawing a count of rounds.  A phase deals its
 * rounds with a balanced binary tree over its sources: a node with a
 * rounds on its left and b on its right sends its k-th round left exactly
 * when floor(((k + 1) a + o) / (a + b)) > floor((k a + o) / (a + b)), for an
 * offset o < a + b keyed by (seed, epoch, phase, node).  The left side then
 * gets floor((k a + o) / (a + b)) of the first k rounds: exactly a of all
 * a + b, within one of k a / (a + b) of any k consecutive ones, and the
 * rounds it gets are consecutive rounds of its own subtree, so the errors
 * of the levels add up (less than the depth).  Both directions are
 * arithmetic: the source of a round walks down the tree, and the rounds of
 * each source before a round split down it, so resuming at any round costs
 * O(sources) and nothing is replayed.
 */
#include "sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

#define MAX_SOURCES 65535u
#define MAX_ROUNDS (UINT64_C(1) << 62)

typedef struct node {
    uint32_t lo, hi;      /* the phase's sources [lo, hi) */
    int32_t left, right;  /* children, -1 for a leaf */
    uint64_t a, t;        /* rounds on the left, in all */
} node;

typedef struct phase {
    uint64_t start, len; /* rounds of the epoch */
    uint32_t k;          /* sources drawing in it */
    uint32_t *src;       /* their ids */
    uint64_t *cnt;       /* their rounds in it */
    node *nodes;         /* 2k - 1, the root first */
    uint64_t *before;    /* per source id: its rounds in earlier phases */
} phase;

struct stk_mix {
    size_t n;
    uint64_t seed;
    uint64_t *units, *counts;
    phase *ph;
    size_t nph;
    uint64_t rounds;
};

int stk_mix_exhaust_parse(const char *name, stk_mix_exhaust *out) {
    if (!name || !out) return -EINVAL;
    if (strcmp(name, "stop") == 0) *out = STK_MIX_STOP;
    else if (strcmp(name, "cycle") == 0) *out = STK_MIX_CYCLE;
    else if (strcmp(name, "all") == 0) *out = STK_MIX_ALL;
    else return -EINVAL;
    return 0;
}

static int32_t build(phase *p, uint32_t lo, uint32_t hi, uint32_t *used) {
    int32_t id = (int32_t)(*used)++;
    node *nd = &p->nodes[id];
    nd->lo = lo;
    nd->hi = hi;
    nd->left = nd->right = -1;
    nd->a = nd->t = 0;
    for (uint32_t i = lo; i < hi; i++) nd->t += p->cnt[i];
    if (hi - lo == 1) return id;
    uint32_t mid = lo + (hi - lo) / 2;
    int32_t l = build(p, lo, mid, used);
    int32_t r = build(p, mid, hi, used);
    nd = &p->nodes[id]; /* (the array does not move; for clarity) */
    nd->left = l;
    nd->right = r;
    nd->a = p->nodes[l].t;
    return id;
}

/* The node's offset in [0, t) for this epoch. */
static inline uint64_t offset_of(const stk_mix *m, uint64_t epoch, size_t ph, int32_t id,
                                 uint64_t t) {
    uint64_t h = stk__mix2(stk__mix2(m->seed, epoch), ((uint64_t)ph << 20) + (uint64_t)id);
    return (uint64_t)((u128)h * t >> 64);
}

/* floor((q a + o) / t): rounds of the left side among the first q. */
static inline uint64_t lefts(uint64_t q, uint64_t a, uint64_t o, uint64_t t) {
    return (uint64_t)(((u128)q * a + o) / t);
}

static int add_phase(stk_mix *m, const uint64_t *cnt, const uint64_t *before) {
    uint32_t k = 0;
    uint64_t len = 0;
    for (size_t i = 0; i < m->n; i++)
        if (cnt[i]) {
            k++;
            len += cnt[i];
        }
    if (!k) return 0;
    phase *np = stk__realloc(m->ph, (m->nph + 1) * sizeof *np);
    if (!np) return -ENOMEM;
    m->ph = np;
    phase *p = &m->ph[m->nph];
    memset(p, 0, sizeof *p);
    p->src = stk__malloc(k * sizeof *p->src);
    p->cnt = stk__malloc(k * sizeof *p->cnt);
    p->nodes = stk__malloc((2 * (size_t)k - 1) * sizeof *p->nodes);
    p->before = stk__malloc(m->n * sizeof *p->before);
    if (!p->src || !p->cnt || !p->nodes || !p->before) {
        stk__free(p->src);
        stk__free(p->cnt);
        stk__free(p->nodes);
        stk__free(p->before);
        return -ENOMEM;
    }
    m->nph++;
    uint32_t j = 0;
    for (size_t i = 0; i < m->n; i++)
        if (cnt[i]) {
            p->src[j] = (uint32_t)i;
            p->cnt[j++] = cnt[i];
        }
    memcpy(p->before, before, m->n * sizeof *before);
    p->k = k;
    p->len = len;
    p->start = m->rounds;
    m->rounds += len;
    uint32_t used = 0;
    build(p, 0, k, &used);
    return 0;
}

void stk_mix_close(stk_mix *m) {
    if (!m) return;
    for (size_t j = 0; j < m->nph; j++) {
        stk__free(m->ph[j].src);
        stk__free(m->ph[j].cnt);
        stk__free(m->ph[j].nodes);
        stk__free(m->ph[j].before);
    }
    stk__free(m->ph);
    stk__free(m->units);
    stk__free(m->counts);
    stk__free(m);
}

/* w * t rounded down, or -1 when it would not fit the epoch. */
static int64_t share(double w, double t) {
    double x = floor(w * t);
    if (!(x < (double)MAX_ROUNDS)) return -1;
    return (int64_t)x;
}

static int plan(stk_mix *m, const stk_mix_source *s, stk_mix_exhaust ex, stk_error *err) {
    size_t n = m->n;
    uint64_t *cnt = stk__calloc(n, sizeof *cnt), *before = stk__calloc(n, sizeof *before);
    double *tau = stk__malloc(n * sizeof *tau);
    int rc = 0;
    if (!cnt || !before || !tau) {
        rc = stk__err(err, -ENOMEM, "mixture: out of memory");
        goto out;
    }
    bool given = s[0].count != 0;
    for (size_t i = 0; i < n; i++) tau[i] = (double)s[i].units / s[i].weight;
    if (given) {
        for (size_t i = 0; i < n; i++) cnt[i] = s[i].count;
        rc = add_phase(m, cnt, before);
    } else if (ex != STK_MIX_ALL) {
        double t = tau[0];
        for (size_t i = 1; i < n; i++)
            t = ex == STK_MIX_STOP ? fmin(t, tau[i]) : fmax(t, tau[i]);
        for (size_t i = 0; i < n; i++) {
            int64_t c = tau[i] == t ? (int64_t)s[i].units : share(s[i].weight, t);
            if (c < 0) {
                rc = stk__err(err, -EINVAL,
                              "mixture: source %zu would give more than 2^62 rounds an epoch "
                              "(weights too far apart for exhaust=cycle)", i);
                goto out;
            }
            if (ex == STK_MIX_STOP && (uint64_t)c > s[i].units) c = (int64_t)s[i].units;
            cnt[i] = (uint64_t)c;
        }
        rc = add_phase(m, cnt, before);
    } else {
        /* Phases end where a source runs out: at each distinct tau, in
         * increasing order, every source has given min(units, w tau), the
         * ones whose tau it is all of theirs. */
        double prev = -1;
        for (;;) {
            double t = INFINITY;
            for (size_t i = 0; i < n; i++)
                if (tau[i] > prev && tau[i] < t) t = tau[i];
            if (t == INFINITY) break;
            for (size_t i = 0; i < n; i++) {
                uint64_t c = s[i].units;
                if (tau[i] > t) {
                    int64_t x = share(s[i].weight, t);
                    if (x >= 0 && (uint64_t)x < c) c = (uint64_t)x;
                }
                cnt[i] = c - before[i];
            }
            if ((rc = add_phase(m, cnt, before))) goto out;
            for (size_t i = 0; i < n; i++) before[i] += cnt[i];
            prev = t;
        }
    }
    if (rc) {
        stk__err(err, rc, "mixture: out of memory");
        goto out;
    }
    for (size_t j = 0; j < m->nph; j++)
        for (uint32_t x = 0; x < m->ph[j].k; x++) m->counts[m->ph[j].src[x]] += m->ph[j].cnt[x];
    if (m->rounds > MAX_ROUNDS)
        rc = stk__err(err, -EINVAL, "mixture: an epoch of more than 2^62 rounds");
out:
    stk__free(cnt);
    stk__free(before);
    stk__free(tau);
    return rc;
}

int stk_mix_open(const stk_mix_source *s, size_t n, stk_mix_exhaust ex, uint64_t seed,
                 stk_mix **out, stk_error *err) {
    if (!out || (!s && n)) return stk__err(err, -EINVAL, "stk_mix_open: NULL argument");
    *out = NULL;
    if (n == 0) return stk__err(err, -EINVAL, "mixture: no sources");
    if (n > MAX_SOURCES) return stk__err(err, -EINVAL, "mixture: more than %u sources", MAX_SOURCES);
    if ((unsigned)ex > STK_MIX_ALL) return stk__err(err, -EINVAL, "mixture: unknown exhaust policy");
    bool given = s[0].count != 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].units == 0)
            return stk__err(err, -EINVAL,
                            "mixture: source %zu gives no round (fewer samples than one round "
                            "takes)", i);
        if (s[i].units > MAX_ROUNDS)
            return stk__err(err, -EINVAL, "mixture: source %zu has more than 2^62 rounds", i);
        if ((s[i].count != 0) != given)
            return stk__err(err, -EINVAL,
                            "mixture: counts are given for some sources and not for source %zu "
                            "(give every source a count, or none)", i);
        if (!given && !(isfinite(s[i].weight) && s[i].weight > 0))
            return stk__err(err, -EINVAL, "mixture: source %zu's weight %g is not a positive number",
                            i, s[i].weight);
    }
    stk_mix *m = stk__calloc(1, sizeof *m);
    if (!m) return stk__err(err, -ENOMEM, "mixture: out of memory");
    m->n = n;
    m->seed = seed;
    m->units = stk__malloc(n * sizeof *m->units);
    m->counts = stk__calloc(n, sizeof *m->counts);
    if (!m->units || !m->counts) {
        stk_mix_close(m);
        return stk__err(err, -ENOMEM, "mixture: out of memory");
    }
    for (size_t i = 0; i < n; i++) m->units[i] = s[i].units;
    int rc = plan(m, s, ex, err);
    if (rc) {
        stk_mix_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

size_t stk_mix_num_sources(const stk_mix *m) { return m ? m->n : 0; }
uint64_t stk_mix_epoch_rounds(const stk_mix *m) { return m ? m->rounds : 0; }
uint64_t stk_mix_source_rounds(const stk_mix *m, size_t i) {
    return m && i < m->n ? m->counts[i] : 0;
}

static size_t phase_of(const stk_mix *m, uint64_t q) {
    size_t lo = 0, hi = m->nph;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (m->ph[mid].start <= q) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* The source of round q, in phase j; offs[id], when not NULL, holds each
 * node's offset for this epoch. */
static uint32_t walk(const stk_mix *m, uint64_t epoch, size_t j, uint64_t q, const uint64_t *offs,
                     uint64_t *index) {
    const phase *p = &m->ph[j];
    uint64_t x = q - p->start;
    int32_t id = 0;
    while (p->nodes[id].left >= 0) {
        const node *nd = &p->nodes[id];
        uint64_t o = offs ? offs[id] : offset_of(m, epoch, j, id, nd->t);
        uint64_t l0 = lefts(x, nd->a, o, nd->t), l1 = lefts(x + 1, nd->a, o, nd->t);
        if (l1 > l0) {
            x = l0;
            id = nd->left;
        } else {
            x -= l0;
            id = nd->right;
        }
    }
    uint32_t src = p->src[p->nodes[id].lo];
    if (index) *index = p->before[src] + x;
    return src;
}

uint32_t stk_mix_source_at(const stk_mix *m, uint64_t epoch, uint64_t q, uint64_t *index) {
    if (!m || q >= m->rounds) {
        if (index) *index = 0;
        return UINT32_MAX;
    }
    return walk(m, epoch, phase_of(m, q), q, NULL, index);
}

/* Consecutive rounds walk the tree without dividing: each node keeps the
 * remainder r = (x a + o) mod t of its next local round x, which goes left
 * exactly when r + a >= t, and steps to r + a (less t when it went left).
 * The remainders are set once per phase of the call, going down the tree
 * from the call's first round of the phase (trees of up to 63 nodes, 32
 * sources, on the stack; larger ones walk each round from the root).
 *
 * Trees of depth 3 or more (5 sources or more) walk with no branches:
 * every round takes the tree's depth in steps, a leaf stepping to itself
 * (a = 0, t = 1: never left), and the next node is chosen by index, the
 * root's remainder kept in a register.  (Written when branches were taken
 * to mispredict as a coin toss would; the shallow trees of 2 to 4 sources
 * take place_shallow, whose branches measured well predicted.) */
#define FILL_NODES 63

typedef struct fill_node {
    uint64_t a, t;
    int32_t next[2]; /* [0] right, [1] left */
    uint32_t src;    /* a leaf's source */
} fill_node;

static unsigned fill_init(const stk_mix *m, uint64_t epoch, size_t j, int32_t id, uint64_t x,
                          uint64_t *rem, fill_node *fn) {
    const phase *p = &m->ph[j];
    const node *nd = &p->nodes[id];
    fill_node *f = &fn[id];
    if (nd->left < 0) {
        *f = (fill_node){0, 1, {id, id}, p->src[nd->lo]};
        rem[id] = 0;
        return 0;
    }
    uint64_t o = offset_of(m, epoch, j, id, nd->t);
    uint64_t l = lefts(x, nd->a, o, nd->t);
    rem[id] = (uint64_t)((u128)x * nd->a + o - (u128)l * nd->t);
    *f = (fill_node){nd->a, nd->t, {nd->right, nd->left}, 0};
    unsigned dl = fill_init(m, epoch, j, nd->left, l, rem, fn);
    unsigned dr = fill_init(m, epoch, j, nd->right, x - l, rem, fn);
    return 1 + (dl > dr ? dl : dr);
}

/* One round down the tree from node id, level d0 on: the leaf it reaches. */
static inline int32_t descend(const fill_node *fn, uint64_t *rem, int32_t id, unsigned d0,
                              unsigned depth) {
    for (unsigned d = d0; d < depth; d++) {
        const fill_node *f = &fn[id];
        uint64_t r = rem[id] + f->a; /* < 2t: no overflow below 2^63 */
        uint64_t left = r >= f->t;
        rem[id] = r - (f->t & (0 - left));
        id = f->next[left];
    }
    return id;
}

/* A walk over consecutive rounds: the phase it is in (cur) and, for a
 * small tree, every node's remainder. */
typedef struct fill_walk {
    uint64_t rem[FILL_NODES];
    fill_node fn[FILL_NODES];
    unsigned depth;
    size_t cur;
    bool small;
} fill_walk;

/* The phase of round q; entering one, the walk is set at q. */
static const phase *fill_phase(const stk_mix *m, uint64_t epoch, uint64_t q, fill_walk *w) {
    size_t j = w->cur != SIZE_MAX && q < m->ph[w->cur].start + m->ph[w->cur].len ? w->cur
                                                                                  : phase_of(m, q);
    const phase *p = &m->ph[j];
    if (j != w->cur) {
        w->cur = j;
        w->small = 2 * (size_t)p->k - 1 <= FILL_NODES;
        if (w->small) w->depth = fill_init(m, epoch, j, 0, q - p->start, w->rem, w->fn);
    }
    return p;
}

/* The source of round q, the walk's next (in its phase). */
static inline uint32_t fill_next(const stk_mix *m, uint64_t epoch, uint64_t q, fill_walk *w) {
    if (!w->small) return walk(m, epoch, w->cur, q, NULL, NULL);
    return w->fn[descend(w->fn, w->rem, 0, 0, w->depth)].src;
}

void stk_mix_fill(const stk_mix *m, uint64_t epoch, uint64_t first, uint64_t n,
                  uint32_t *sources) {
    fill_walk w;
    w.cur = SIZE_MAX;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t q = first + i;
        if (q >= m->rounds) {
            sources[i] = UINT32_MAX;
            continue;
        }
        const phase *p = fill_phase(m, epoch, q, &w);
        /* (The rest of the phase's rounds of this call, in one loop.) */
        uint64_t end = STK__MIN(first + n, p->start + p->len);
        for (; q < end; q++, i++) sources[i] = fill_next(m, epoch, q, &w);
        i--; /* (the outer loop steps past the last) */
    }
}

/* Rounds t .. stop - 1 of a tree of depth 1 or 2 (2 to 4 sources) at a
 * sample a round, every remainder in a register.  Through fill_next, the
 * level below the root keeps its remainders in memory, and a round that
 * meets the node the last one stepped waits for that store (store
 * forwarding, about 5 cycles): 0.78-0.93 us for a batch of 256 from 3
 * sources.  The child taken is chosen, stepped and put back; the leaves
 * are numbered 2 * (went left at the root) + (went left below).  A child
 * that is a leaf steps as one (a = 0, t = 1: never left), so under it
 * only the right-hand number comes.
 *
 * Each leaf number writes its lanes through a pointer of its own, kept in
 * a register: with the positions in memory (lanes[pos[s]++]), a source
 * drawn again a round or two later waited for its count's store to come
 * back the same way (0.38-0.80 us a batch, against 0.27-0.52 now; weights
 * 4:2:1, 1:1:1, 10:1:1, 3.1:2.9:1.05, 1:5:3, 2:4:1, 1:2:4 and four
 * sources of 1:1:1:1 and 0.3:1.7:2.2:1.1, GCC 12 at -O2 and -O3).
 *
 * Written with masks instead of choices, as the deeper walk is, the walk
 * ran at 0.95-1.0 us: the masks put both children on one chain of
 * dependent instructions every round.  GCC keeps the choices as branches,
 * and they are well predicted: a node's turns follow its ratio in a
 * regular pattern.  Deeper trees keep the branch-free walk. */
/* Round x below the root, in the child taken (remainder *r, stepping by
 * a of t): it goes left, to the leaf of source s_left, or right, to s_right;
 * the leaf's lane pointer takes x. */
static STK__ALWAYS_INLINE void shallow_child(uint64_t *r, uint64_t a, uint64_t t, uint32_t x,
                                             uint32_t *srcs, uint32_t s_left, uint32_t **l_left,
                                             uint32_t s_right, uint32_t **l_right) {
    uint64_t c = *r + a;
    if (c >= t) {
        *r = c - t;
        srcs[x] = s_left;
        *(*l_left)++ = x;
    } else {
        *r = c;
        srcs[x] = s_right;
        *(*l_right)++ = x;
    }
}

static void place_shallow(fill_walk *w, uint32_t t, uint32_t stop, uint32_t *srcs,
                          uint32_t *lanes, uint32_t *pos) {
    const fill_node *fn = w->fn;
    const int32_t cl = fn[0].next[1], cr = fn[0].next[0];
    const uint64_t a0 = fn[0].a, t0 = fn[0].t;
    const uint64_t al = fn[cl].a, tl = fn[cl].t, ar = fn[cr].a, tr = fn[cr].t;
    uint64_t r0 = w->rem[0], rl = w->rem[cl], rr = w->rem[cr];
    const uint32_t s0 = fn[fn[cr].next[0]].src, s1 = fn[fn[cr].next[1]].src,
                   s2 = fn[fn[cl].next[0]].src, s3 = fn[fn[cl].next[1]].src;
    uint32_t *l0 = lanes + pos[s0], *l1 = lanes + pos[s1], *l2 = lanes + pos[s2],
             *l3 = lanes + pos[s3];
    uint32_t *const b0 = l0, *const b1 = l1, *const b2 = l2, *const b3 = l3;
    for (uint32_t x = t; x < stop; x++) {
        uint64_t r = r0 + a0;
        if (r >= t0) {
            r0 = r - t0;
            shallow_child(&rl, al, tl, x, srcs, s3, &l3, s2, &l2);
        } else {
            r0 = r;
            shallow_child(&rr, ar, tr, x, srcs, s1, &l1, s0, &l0);
        }
    }
    /* (A leaf index never reached may name the source of one that is:
     * only the lanes written count.) */
    pos[s0] += (uint32_t)(l0 - b0);
    pos[s1] += (uint32_t)(l1 - b1);
    pos[s2] += (uint32_t)(l2 - b2);
    pos[s3] += (uint32_t)(l3 - b3);
    w->rem[0] = r0;
    w->rem[cl] = rl;
    w->rem[cr] = rr;
}

void stk__mix_place(const stk_mix *m, uint64_t epoch, uint64_t first, uint64_t per, uint64_t skip,
                    uint32_t n, uint32_t *srcs, uint32_t *lanes, uint32_t *pos) {
    fill_walk w;
    w.cur = SIZE_MAX;
    uint64_t q = first, at = skip;
    for (uint32_t t = 0; t < n;) {
        const phase *p = fill_phase(m, epoch, q, &w);
        /* (This call's rounds of the phase, at a sample a round.) */
        uint32_t stop = (uint32_t)STK__MIN((uint64_t)n, t + (p->start + p->len - q));
        if (w.small && per == 1 && at == 0 && w.depth == 0) {
            /* A phase of one source: a run of lanes. */
            uint32_t src = w.fn[0].src, *ln = lanes + pos[src];
            for (uint32_t x = t; x < stop; x++) {
                srcs[x] = src;
                *ln++ = x;
            }
            pos[src] += stop - t;
            q += stop - t;
            t = stop;
            continue;
        }
        if (w.small && per == 1 && at == 0 && w.depth <= 2) {
            place_shallow(&w, t, stop, srcs, lanes, pos);
            q += stop - t;
            t = stop;
            continue;
        }
        if (w.small && per == 1 && at == 0) {
            /* The walk and the placing in one loop, the root's remainder
             * (stepped every round) kept in a register. */
            uint64_t r0 = w.rem[0];
            const uint64_t a0 = w.fn[0].a, t0 = w.fn[0].t;
            const int32_t go[2] = {w.fn[0].next[0], w.fn[0].next[1]};
            for (; t < stop; t++, q++) {
                uint64_t r = r0 + a0;
                uint64_t left = r >= t0;
                r0 = r - (t0 & (0 - left));
                uint32_t src = w.fn[descend(w.fn, w.rem, go[left], 1, w.depth)].src;
                srcs[t] = src;
                lanes[pos[src]++] = t;
            }
            w.rem[0] = r0;
            continue;
        }
        uint32_t src = fill_next(m, epoch, q, &w);
        uint32_t len = (uint32_t)STK__MIN(per - at, (uint64_t)(n - t));
        for (uint32_t x = 0; x < len; x++) {
            srcs[t + x] = src;
            lanes[pos[src]++] = t + x;
        }
        t += len;
        q++;
        at = 0;
    }
}

static void count_down(const stk_mix *m, uint64_t epoch, size_t j, int32_t id, uint64_t x,
                       uint64_t *counts) {
    const phase *p = &m->ph[j];
    const node *nd = &p->nodes[id];
    if (nd->left < 0) {
        counts[p->src[nd->lo]] += x;
        return;
    }
    uint64_t l = lefts(x, nd->a, offset_of(m, epoch, j, id, nd->t), nd->t);
    count_down(m, epoch, j, nd->left, l, counts);
    count_down(m, epoch, j, nd->right, x - l, counts);
}

void stk_mix_counts(const stk_mix *m, uint64_t epoch, uint64_t q, uint64_t *counts) {
    if (!m || !counts) return;
    memset(counts, 0, m->n * sizeof *counts);
    if (q >= m->rounds) {
        memcpy(counts, m->counts, m->n * sizeof *counts);
        return;
    }
    size_t j = phase_of(m, q);
    const phase *p = &m->ph[j];
    memcpy(counts, p->before, m->n * sizeof *counts);
    count_down(m, epoch, j, 0, q - p->start, counts);
}

/* radixmlp.cu - RadixMLP in one annotated CUDA C file.
 *
 * RadixMLP (Feil & Lipp, "RadixMLP - Intra-batch Deduplication for Causal Transformers") removes repeated
 * position-wise work from a batch of sequences that share prefixes. In a causal transformer the hidden state of a
 * token depends only on its own (token, position) history, so two tokens with the same history have identical hidden
 * states in every layer. Map the batch to a prefix trie (Algorithm 2): each trie node is one "compact" row. Run the
 * embedding, the norms, the Q/K/V/O projections, RoPE and the MLP on the N' compact rows; only attention needs the
 * original N-row layout, so scatter before attention and gather after it (Algorithm 1). Speedup -> N/N'.
 *
 * Build and run: `make run` (a tiny random Qwen3, CPU reference or GPU; no download) and `make test`; README.md
 * has the commands for real checkpoints, and `./radixmlp --help` lists every flag.
 *
 * Map from the paper to this file:
 *   Sec. 2.1 causal block, eq. 1-3  -> layer_qkv_ref() + layer_attn_mlp_ref() (C), gpu_forward()
 *   Sec. 3.1 eq. 4 position-wise    -> every op outside the scatter -> attention -> gather sandwich runs row by row
 *   Sec. 3.2 eq. 5-7 gather/scatter -> rows_by_index() (C) and the rows_by_index kernel (CUDA)
 *   Algorithm 1 (B.1)               -> forward_ref() (C) and gpu_forward(), mode RX_RADIX
 *   Algorithm 2 (B.4)               -> radix_index_build(): trie_find() scans a node's children (found?), trie_add()
 *                                      appends one (not found); then two refinements, for speed only: branch
 *                                      points hashed (trie_find_hashed()), nothing shared (trie_any_shared_start())
 *   Sec. 3.4 attention, cu_seqlens  -> attention_ref() (C: the definition), the attention kernel (CUDA)
 *   beyond the paper: compact mode  -> RX_COMPACT: attention reads keys through I_scatter, no scatter/gather at all
 *   Sec. 4.1 reranking, Tables 1, 3 -> qwen3_forward_ref_last() (each sequence's last token), rx_rerank_scores()
 *                                      (P(yes) as the Qwen3-Reranker model card computes it; the CLI's --score)
 *   Part II, across requests        -> the paged KV pool (rx_kv_pool_*), the radix and hash prefix caches
 *                                      (rx_cache_*), a request's life (rx_request_*): RadixAttention's half
 *   Part II: prefill on a KV cache  -> qwen3_prefill_ref() (C) and gpu_prefill(): Part I's layer steps, keys read
 *                                      from the pool's slots (layout_build_prefill(), kv_store_ref()), and
 *                                      radix_index_build_keyed(): its own trie (trie_build_rooted()), a
 *                                      root per cached prefix, walked with Part I's trie_insert()
 *   Part II: generation, Sec. 5.2   -> rx_serve(): a decode step is a one-token prefill on the cached history;
 *                                      pages grow (rx_request_grow), evict, preempt; generated pages are cached
 *                                      (rx_request_cache) for the next turn; rx_sample() picks each token
 *   Part III, speed                 -> what exists only to be fast, each equal to a Part I definition: OpenMP,
 *                                      packed weights and SIMD tiles (rx_matmul_packed_ref), the vector exp, the
 *                                      tiled attention (attention_fast), flash_attention (tensor cores); the path
 *                                      is RADIXMLP_CPU's (rx_cpu_path), and "definition" runs Part I alone
 *
 * Reading order, one banner per section: the trie (Algorithm 2) -> the plain-C reference forward (Algorithm 1, from
 * the definitions) -> the CUDA kernels, attention, the GPU model, cuBLAS and the GPU forward -> Part II: the paged KV
 * pool, the prefix caches, prefill, sampling, serving and generation -> GPU entry points for the tests and
 * benchmarks -> Part III: speed (threads, packed panels and SIMD tiles, the CPU paths, the tiled attention) -> the
 * plumbing (errors, JSON, safetensors, config, loading, token files) -> main().
 *
 * Non-obvious things:
 *   - Every buffer says which token space it lives in: N (the batch), N' (the trie's nodes), R (see Layout), and
 *     Part II's T (attention's tokens, cached ones included: PrefillKeys).
 *   - Attention is the only op that mixes rows, and it mixes them by original sequence (cu_seqlens). That is why
 *     it alone needs the original layout, and why the compact mode can skip it by indexing keys via I_scatter.
 *   - The GPU computes in bf16 with cuBLAS, whose results can depend on the matrix shape (N vs N' rows): its radix
 *     and baseline logits differ in the last bf16 bits, where the C reference's agree bit for bit.
 *   - cuBLAS is column-major, our tensors row-major: see gpu_gemm() for the transpose trick.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "radixmlp.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RX_X86 1
#include <immintrin.h>          /* the matmul's AVX2 and AVX-512 tiles, chosen at run time (rx_cpu_path) */
#endif
#ifndef RADIXMLP_HOST_ONLY
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

/* Plumbing the algorithms use, defined with the rest of the plumbing near the bottom of the file. */
static int rx_fail(const char *fmt, ...);
static void *rx_alloc(size_t bytes, const char *what);
static inline double rx_now_ms(void);
static int cmp_double(const void *a, const void *b);
static int64_t rx_numel(const RxTensor *t);
static float rx_tensor_at(const RxTensor *t, int64_t i);            /* element i as fp32, exactly */
static int rx_batch_check(const RxBatch *b, const Qwen3Config *c, const char *path);  /* ids, positions, cu_seqlens */
static uint64_t rx_rand(uint64_t *s);                               /* splitmix64 */
static void free_each(void *const *p, size_t n) { for (size_t i = 0; i < n; i++) free(p[i]); }
#define FREE_ALL(...) do { void *all_[] = {__VA_ARGS__}; free_each(all_, sizeof all_ / sizeof all_[0]); } while (0)
static float **model_panels(const Qwen3Model *m);    /* [n_tensors] the reference's packed weights (NULL: none yet) */
static int rx_fast(void);        /* 0 on the definition path (RADIXMLP_CPU=definition), else 1: the speed sections */

/* ----------------------------------------------------------------------------------------- the trie (algorithm 2) */
/* The paper's toy example: sequences [1,2,3] and [1,2,4], ragged as [1,2,3,1,2,4], cu_seqlens [0,3,6].
 * Algorithm 2 walks the batch token by token; each token reuses a child of its parent or creates one:
 *
 *     original row  seq  pos  token  action  compact row
 *           0        0    0     1    create       0
 *           1        0    1     2    create       1
 *           2        0    2     3    create       2
 *           3        1    0     1    reuse        0
 *           4        1    1     2    reuse        1
 *           5        1    2     4    create       3
 *
 * The trie it builds, and the two index maps (I_scatter is the last column above):
 *
 *     root
 *      `-- c0 (token 1 @0)
 *           `-- c1 (token 2 @1)
 *                |-- c2 (token 3 @2)
 *                `-- c3 (token 4 @2)
 *
 *     gather  [N'=4] = [0, 1, 2, 5]           compact row -> its first original row
 *     scatter [N =6] = [0, 1, 2, 0, 1, 3]     original row -> its compact row
 *
 * A node is a whole history: its key is (parent, token, position), so the same token at the same position after a
 * different prefix is a new node. Nodes are numbered in order of first occurrence, and that number is the compact
 * row. As in the paper, a node keeps its children in a list, in the order they were added, and a lookup scans it
 * (lines 15-23). A child's key is its first occurrence's (token, position), read through gather, so the list holds
 * node numbers only. Two refinements follow the algorithm, for speed only: branch points in a hash table, and a
 * batch that shares nothing skipping the trie. They give the same maps (trie/random_batches_match_bruteforce_oracle
 * builds each batch both ways), and RADIXMLP_CPU=definition builds without them. */
typedef struct TrieEntry TrieEntry;     /* refinement 1's hash table entry */

/* The trie while it is built. Its nodes are the compact rows, numbered in order of first occurrence; the root, the
 * paper's parent 0, is numbered N after them (N' <= N, so no node takes the root's number). */
typedef struct {
    const int32_t *ids, *pos;   /* [N] the batch's tokens and positions                                       */
    int32_t *gather;            /* [N'] each node's first occurrence, whose (token, position) is the node's key */
    int32_t *first_child;       /* [N + 1] by node, then the root; -1: no child yet                           */
    int32_t *next_sibling;      /* [N] by node: the next child of its parent; -1: the last (NULL with table)    */
    TrieEntry *table;           /* refinement 1, NULL on the definition path: second and later children        */
    uint64_t mask;
} Trie;

static int32_t trie_find_hashed(const Trie *tr, int32_t parent, int i);    /* refinement 1, below */
static void trie_add_hashed(Trie *tr, int32_t parent, int i, int32_t c);

/* Whether node c's key is original row i's (token, position): c's key is its first occurrence's (line 17). */
static int trie_same_key(const Trie *tr, int32_t c, int i) {
    int first = tr->gather[c];
    return tr->ids[first] == tr->ids[i] && tr->pos[first] == tr->pos[i];
}

/* Lines 13-23 of Algorithm 2: the child of parent whose key is original row i's (token, position), or -1: not
 * found. */
static int32_t trie_find(const Trie *tr, int32_t parent, int i) {
    if (tr->table) return trie_find_hashed(tr, parent, i);            /* refinement 1 */
    for (int32_t c = tr->first_child[parent]; c >= 0; c = tr->next_sibling[c])     /* lines 15-16 */
        if (trie_same_key(tr, c, i)) return c;                         /* lines 17-21: found */
    return -1;
}

/* Lines 24-33: not found, so original row i is the first occurrence of a new node c below parent (c: the next
 * compact row), appended to parent's children (line 30). */
static int32_t trie_add(Trie *tr, int32_t parent, int i, int32_t c) {
    if (tr->table) {
        trie_add_hashed(tr, parent, i, c);                             /* refinement 1 */
    } else {
        int32_t *end = &tr->first_child[parent];
        while (*end >= 0) end = &tr->next_sibling[*end];               /* the end of parent's list */
        *end = c;
        tr->next_sibling[c] = -1;
    }
    tr->gather[c] = i;                                                 /* line 32 */
    tr->first_child[c] = -1;                                           /* a new node has no children yet */
    return c;
}

/* Lines 8-34 for one sequence, original rows i0 .. i1-1, from parent (line 8: the root): each row finds its node
 * or adds one (the next compact row, *n_compact), and scatter [i] gets it. */
static void trie_insert(Trie *tr, int32_t parent, int i0, int i1, int32_t *scatter, int32_t *n_compact) {
    for (int i = i0; i < i1; i++) {                                    /* line 9 */
        int32_t child = trie_find(tr, parent, i);                      /* lines 13-23: found? */
        if (child < 0) child = trie_add(tr, parent, i, (*n_compact)++);     /* lines 24-33: not found: new node */
        scatter[i] = child;                                            /* line 34 */
        parent = child;
    }
}

/* Refinement 1: branch points hashed. The scan costs a lookup one comparison per child it passes: B sequences that
 * part at one node cost B(B-1)/2 there (exercise 3). Most nodes have one child, which the scan finds at once, so
 * only second and later children go to an open-addressing table keyed on (parent, token, position). A batch of
 * shared prefixes walks its chains through arrays read in order, and hashes about once per sequence, where it leaves
 * the shared part. */
struct TrieEntry {
    uint64_t key;
    int32_t parent;
    int32_t node_plus_1;     /* 0: an empty entry */
};

static uint64_t trie_key(int32_t token, int32_t position) {       /* the paper's (position << 32) ^ token */
    return (uint64_t)(uint32_t)position << 32 | (uint32_t)token;
}

/* The entry of (parent, key) in an open-addressing table: the one that holds it, or the empty one where it goes. */
static TrieEntry *table_entry(TrieEntry *t, uint64_t mask, int32_t parent, uint64_t key) {
    uint64_t h = ((key ^ (uint64_t)(uint32_t)parent * 0x9E3779B97F4A7C15ull) * 0xFF51AFD7ED558CCDull) >> 20;
    for (;; h++) {
        TrieEntry *s = &t[h & mask];
        if (!s->node_plus_1 || (s->key == key && s->parent == parent)) return s;
    }
}

/* A hash table for n keys: a power of two >= 2n, >= 16. */
static uint64_t table_cap(int64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n) cap *= 2;
    return cap;
}

/* An empty trie table for n keys. calloc: a large one comes as fresh zeroed memory from the OS, so the entries that
 * are never touched cost nothing. */
static TrieEntry *trie_table(int64_t n, uint64_t *mask) {
    *mask = table_cap(n) - 1;
    return (TrieEntry *)calloc(*mask + 1, sizeof(TrieEntry));
}

/* The first child answers most lookups without hashing; the table holds the rest. */
static int32_t trie_find_hashed(const Trie *tr, int32_t parent, int i) {
    int32_t c = tr->first_child[parent];
    if (c < 0 || trie_same_key(tr, c, i)) return c;             /* no child yet, or the first */
    const TrieEntry *s = table_entry(tr->table, tr->mask, parent, trie_key(tr->ids[i], tr->pos[i]));
    return s->node_plus_1 - 1;                                   /* a later child, or -1 (an empty entry) */
}

/* A parent's first child stays in first_child, where trie_find_hashed compares it; the rest go to the table, so no
 * list is walked and next_sibling is not needed. */
static void trie_add_hashed(Trie *tr, int32_t parent, int i, int32_t c) {
    if (tr->first_child[parent] < 0) {
        tr->first_child[parent] = c;
        return;
    }
    uint64_t key = trie_key(tr->ids[i], tr->pos[i]);
    TrieEntry *s = table_entry(tr->table, tr->mask, parent, key);
    s->key = key;
    s->parent = parent;
    s->node_plus_1 = c + 1;
}

/* Refinement 2: a batch that shares nothing. Histories can only be shared if two sequences begin with the same
 * (token, position) below the same parent; if none do, the trie is the batch itself (trie_identity). This is
 * trie_seen_start, one sequence's check: 1 or 0, whether (parent, token, position) of original row i was already in
 * table t (it is now). */
static int trie_seen_start(TrieEntry *t, uint64_t mask, int32_t parent, const int32_t *ids, const int32_t *pos,
                           int i, int s) {
    TrieEntry *e = table_entry(t, mask, parent, trie_key(ids[i], pos[i]));
    int seen = e->node_plus_1 != 0;
    *e = (TrieEntry){.key = trie_key(ids[i], pos[i]), .parent = parent, .node_plus_1 = s + 1};
    return seen;
}

/* Whether any two sequences of a batch below the one root begin alike (1 or 0), or -1 (out of memory). */
static int trie_any_shared_start(const int32_t *ids, const int32_t *pos, const int32_t *cu, int n_seqs) {
    uint64_t mask;
    TrieEntry *t = trie_table(n_seqs, &mask);
    if (!t) return -1;
    int shared = 0;
    for (int s = 0; s < n_seqs && !shared; s++)
        if (cu[s] < cu[s + 1]) shared = trie_seen_start(t, mask, 0, ids, pos, cu[s], s);    /* skip empty ones */
    free(t);
    return shared;
}

/* The trie is the batch itself: N' = N, identity maps. */
static void trie_identity(RadixIndex *ix) {
    for (int i = 0; i < ix->n_tokens; i++) {
        ix->gather[i] = i;
        ix->scatter[i] = i;
    }
    ix->n_compact = ix->n_tokens;
}

static void trie_close(Trie *tr) { FREE_ALL(tr->first_child, tr->next_sibling, tr->table); }

/* A trie over N original rows whose first_child has n_ids entries: the N nodes', then the root's (n_ids = N + 1),
 * set to -1. hashed: with refinement 1. Returns 0, or -1 (out of memory; nothing is left allocated). */
static int trie_open(Trie *tr, const int32_t *ids, const int32_t *pos, int32_t *gather, int n, int n_ids,
                     int hashed) {
    *tr = (Trie){.ids = ids, .pos = pos, .gather = gather,
                 .first_child = (int32_t *)malloc((size_t)n_ids * sizeof(int32_t)),
                 .next_sibling = hashed ? NULL : (int32_t *)malloc((size_t)n * sizeof(int32_t)),
                 .table = NULL, .mask = 0};
    if (hashed) tr->table = trie_table(n, &tr->mask);
    if (!tr->first_child || !(tr->table || tr->next_sibling)) {
        trie_close(tr);
        return -1;
    }
    for (int r = n; r < n_ids; r++) tr->first_child[r] = -1;
    return 0;
}

/* ix's I_gather [N'] and I_scatter [N] for N original rows. Returns 0, or -1 (out of memory; ix freed). */
static int trie_index_alloc(RadixIndex *ix, int n) {
    ix->n_tokens = n;
    ix->gather = (int32_t *)malloc((size_t)n * sizeof(int32_t));       /* [N'] (N' <= N; the tail stays unused) */
    ix->scatter = (int32_t *)malloc((size_t)n * sizeof(int32_t));      /* [N]                                  */
    if (ix->gather && ix->scatter) return 0;
    radix_index_free(ix);
    return rx_fail("radix_index_build: out of host memory");
}

/* The shape of a ragged batch as a C API caller hands it over, checked before anything reads it. n_tokens < 0: not
 * given (the trie reads N from cu_seqlens). who starts the message. */
static int ragged_check(const char *who, const int32_t *input_ids, const int32_t *position_ids,
                        const int32_t *cu_seqlens, int n_seqs, int n_tokens) {
    if (n_seqs < 0) return rx_fail("%s: n_seqs is %d; it must be >= 0", who, n_seqs);
    if (n_seqs > 0 && !cu_seqlens) return rx_fail("%s: cu_seqlens is NULL", who);
    if (n_seqs > 0 && cu_seqlens[0] != 0) return rx_fail("%s: cu_seqlens[0] is %d; it must be 0", who, cu_seqlens[0]);
    for (int s = 0; s < n_seqs; s++)
        if (cu_seqlens[s + 1] < cu_seqlens[s])
            return rx_fail("%s: cu_seqlens decreases at sequence %d (%d -> %d)", who, s, cu_seqlens[s],
                           cu_seqlens[s + 1]);
    int n = n_seqs ? cu_seqlens[n_seqs] : 0;                           /* N */
    if (n_tokens >= 0 && n != n_tokens)
        return rx_fail("%s: cu_seqlens[%d] is %d but n_tokens is %d", who, n_seqs, n, n_tokens);
    if (n > 0 && !input_ids) return rx_fail("%s: input_ids is NULL", who);
    if (n > 0 && !position_ids) return rx_fail("%s: position_ids is NULL", who);
    return 0;
}

/* Algorithm 2 on N original rows, hashed: with refinement 1. ix gets I_gather [N'] and I_scatter [N]. */
static int trie_fill(RadixIndex *ix, const int32_t *ids, const int32_t *pos, const int32_t *cu, int n_seqs,
                     int hashed) {
    const int n = n_seqs ? cu[n_seqs] : 0;                             /* N */
    if (n == 0) return 0;
    Trie tr;
    if (trie_index_alloc(ix, n)) return -1;
    if (trie_open(&tr, ids, pos, ix->gather, n, n + 1, hashed)) {
        radix_index_free(ix);
        return rx_fail("radix_index_build: out of host memory");
    }
    const int32_t root = n;                                            /* the paper's parent 0 */
    int32_t n_compact = 0;                                             /* N' so far, the next compact row */
    for (int s = 0; s < n_seqs; s++)                                   /* line 5 */
        trie_insert(&tr, root, cu[s], cu[s + 1], ix->scatter, &n_compact);     /* lines 6-35 */
    ix->n_compact = n_compact;
    trie_close(&tr);
    return 0;
}

static int trie_build_fast(RadixIndex *ix, const int32_t *ids, const int32_t *pos, const int32_t *cu, int n_seqs);

/* Algorithm 2 on a checked batch (ragged_check). Every sequence starts at the one root, as in the paper. */
static int trie_build(RadixIndex *ix, const int32_t *ids, const int32_t *pos, const int32_t *cu, int n_seqs) {
    if (rx_fast()) return trie_build_fast(ix, ids, pos, cu, n_seqs);   /* Part III: with both refinements */
    return trie_fill(ix, ids, pos, cu, n_seqs, 0);
}

/* Part I's batch is the whole history: every sequence hangs below the one root, so two sequences that start with
 * the same (token, position) are merged from their first token on. */
int radix_index_build(RadixIndex *ix, const int32_t *input_ids, const int32_t *position_ids,
                      const int32_t *cu_seqlens, int n_seqs) {
    memset(ix, 0, sizeof *ix);
    if (ragged_check("radix_index_build", input_ids, position_ids, cu_seqlens, n_seqs, -1)) return -1;
    return trie_build(ix, input_ids, position_ids, cu_seqlens, n_seqs);
}

void radix_index_free(RadixIndex *ix) {
    FREE_ALL(ix->gather, ix->scatter);
    memset(ix, 0, sizeof *ix);
}

/* Compact mode's query layout: which compact rows are the queries of which sequence. radix_index_build walks the
 * sequences in order and numbers a node when it first meets it. Walking sequence s from the root, it follows nodes
 * that earlier sequences created as long as s's history is one they had (its first p_s positions); once it creates
 * a node, every later node of s hangs below that new node and is new as well. So the positions of s that no earlier
 * sequence holds are a suffix, p_s .. L_s-1, and their compact rows are consecutive numbers: one block per sequence,
 *   scatter[cu_seqlens[s] + p_s + j] == cu_q[s] + j   for j < L_s - p_s,   cu_q[s+1] = cu_q[s] + (L_s - p_s).
 * A fully shared sequence (a prefix of an earlier one, or a copy) has L_s - p_s = 0 rows. In the toy example,
 * scatter [0, 1, 2, 0, 1, 3] gives p = {0, 2} and cu_q = [0, 3, 4]. Part III's tiled attentions take their queries
 * from these blocks and their keys through I_scatter. */
int radix_compact_cu_q(const RadixIndex *ix, const int32_t *cu_seqlens, int n_seqs, int32_t *cu_q) {
    cu_q[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        const int32_t *row = ix->scatter + cu_seqlens[s];
        int L = cu_seqlens[s + 1] - cu_seqlens[s], p = 0;
        while (p < L && row[p] < cu_q[s]) p++;                          /* a node an earlier sequence created */
        cu_q[s + 1] = cu_q[s] + (L - p);
        for (int j = 0; j < L - p; j++)                                  /* the fact above, checked */
            if (row[p + j] != cu_q[s] + j)
                return rx_fail("internal error: the compact rows of sequence %d are not one block (position %d is "
                               "row %d, expected %d)", s, p + j, row[p + j], cu_q[s] + j);
    }
    if (cu_q[n_seqs] != ix->n_compact)
        return rx_fail("internal error: the compact query blocks hold %d rows, the trie %d", cu_q[n_seqs],
                       ix->n_compact);
    return 0;
}

/* Draws a tree depth first, one line per node: first[id] is id's first child, next[id] its next sibling (-1: none),
 * ids 0 .. n-1, the root among them. line() prints a node's line and returns the node whose children hang below it.
 * at[d] is the next node to draw at depth d, so an ancestor at depth d gets a bar "|" exactly while at[d] >= 0. */
static void draw_tree(FILE *out, const int32_t *first, const int32_t *next, int32_t root, int n,
                      int32_t (*line)(FILE *out, const void *ctx, int32_t id), const void *ctx) {
    int32_t *at = (int32_t *)malloc((size_t)(n + 1) * sizeof(int32_t));  /* [depth <= n] */
    if (!at) { fprintf(out, "(out of memory drawing the tree)\n"); return; }
    at[0] = first[root];
    for (int d = 0; d >= 0;) {
        int32_t id = at[d];
        if (id < 0) { d--; continue; }                     /* depth d is done: back to its parent's siblings */
        at[d] = next[id];
        for (int i = 0; i < d; i++) fprintf(out, at[i] >= 0 ? "|   " : "    ");
        fprintf(out, "%s ", next[id] >= 0 ? "|--" : "`--");
        at[++d] = first[line(out, ctx, id)];
    }
    free(at);
}

typedef struct {
    const RadixIndex *ix;
    const int32_t *input_ids, *position_ids;     /* [N] */
    const int32_t *first, *next, *mult;          /* [N'+1] by node, as in radix_draw_trie */
} TrieDrawing;

static int32_t trie_line(FILE *out, const void *ctx, int32_t c) {
    const TrieDrawing *t = (const TrieDrawing *)ctx;
    int32_t end = c;                                       /* extend the chain while nothing branches or ends */
    while (t->first[end] >= 0 && t->next[t->first[end]] < 0 && t->mult[t->first[end]] == t->mult[end])
        end = t->first[end];
    int g0 = t->ix->gather[c], g1 = t->ix->gather[end];
    if (c == end) fprintf(out, "c%d: token %d @%d", c, t->input_ids[g0], t->position_ids[g0]);
    else fprintf(out, "c%d..c%d: %d tokens @%d..%d", c, end, g1 - g0 + 1, t->position_ids[g0], t->position_ids[g1]);
    fprintf(out, "  (%d seq%s)\n", t->mult[c], t->mult[c] == 1 ? "" : "s");
    return end;
}

/* Draws the trie, one line per chain of nodes that every sequence passing through it follows to the end of the
 * chain (a radix tree's edge). The parent of compact row c is the compact row of the token before its first
 * occurrence, or the root if that occurrence starts its sequence. */
void radix_draw_trie(FILE *out, const RadixIndex *ix, const int32_t *input_ids, const int32_t *position_ids,
                     const int32_t *cu_seqlens, int n_seqs) {
    int nc = ix->n_compact;
    if (nc > 400) {
        fprintf(out, "(a trie of %d nodes: too large to draw)\n", nc);
        return;
    }
    int32_t *first = (int32_t *)calloc((size_t)(nc + 1) * 4, 4);    /* [nc+1] by node, the root nc last */
    if (!first) {
        fprintf(out, "(out of memory drawing the trie)\n");
        return;
    }
    int32_t *next = first + nc + 1;                        /* [nc+1] */
    int32_t *parent = next + nc + 1;                       /* [nc+1] */
    int32_t *mult = parent + nc + 1;                       /* [nc+1] how many sequences pass through node c */
    for (int c = 0; c <= nc; c++) first[c] = next[c] = -1;      /* no child, no sibling yet (mult: 0, calloc) */
    for (int i = 0; i < ix->n_tokens; i++) mult[ix->scatter[i]]++;
    for (int c = 0; c < nc; c++) parent[c] = ix->gather[c] > 0 ? ix->scatter[ix->gather[c] - 1] : nc;  /* nc: root */
    for (int s = 0; s < n_seqs; s++)                      /* a node that starts a sequence hangs below the root */
        if (cu_seqlens[s] < cu_seqlens[s + 1]) parent[ix->scatter[cu_seqlens[s]]] = nc;
    for (int c = nc - 1; c >= 0; c--) {                    /* pushed last to first: first-occurrence order */
        next[c] = first[parent[c]];
        first[parent[c]] = c;
    }
    fprintf(out, "root\n");
    TrieDrawing t = {.ix = ix, .input_ids = input_ids, .position_ids = position_ids, .first = first, .next = next,
                     .mult = mult};
    draw_tree(out, first, next, nc, nc + 1, trie_line, &t);
    free(first);
}

/* ---------------------------------------------------------------------------------- the plain-c reference forward */
/* Algorithm 1 in plain C, from the definitions: fp32 throughout, one row at a time, every sum in a fixed order, one
 * thread. Because each row is computed with the same arithmetic whatever rows surround it, a compact row equals the
 * original rows it stands for bit for bit, and the radix and compact modes reproduce the baseline's logits exactly
 * (0 where the paper's Table 7a, on SDPA, measures up to 4.8e-7). The ops come first (rmsnorm, the matmul, exp,
 * RoPE, SiLU, attention), then Algorithm 1's steps (the GPU forward repeats them), then forward_ref(), which runs
 * them.
 *
 * The rule for the bits: a matmul output, and each attention score and output, is a chain of fused multiply-adds
 * (fmaf, one rounding each) in a fixed order (matmul_ref states it); everywhere else a mul and an add round
 * separately, and -ffp-contract=off (Makefile) keeps any compiler from fusing them in one place and not in another.
 * The speed sections' fast code (threads, packed weights, SIMD tiles, the tiled attention) keeps that order, so it
 * computes these very bits, and the tests compare the two. */

/* The fast versions of the ops below, in the speed sections after the caches. A definition reaches its fast version
 * in one line, `if (rx_fast()) return ..._fast(...)`: skip those lines and the rest is the definition, which
 * RADIXMLP_CPU=definition runs, on one thread. */
static void rmsnorm_fast(float *out, const float *x, const float *w, int rows, int dim, float eps);
static void linear_fast(float *y, const float *x, const Qwen3Model *m, const RxTensor *W, int rows, float *xp);
static void exp_fast(float *y, const float *x, float a, float b, size_t n);
static void qk_norm_rope_fast(float *x, const float *w, const float *cos_t, const float *sin_t, int rows, int n_heads,
                              int head_dim, float eps);
static void silu_mul_fast(float *out, const float *gate, const float *up, size_t n);
typedef struct KvView KvView;
static int attention_fast(const float *q, const KvView *kv, float *out, int n_q, const int32_t *q_orig,
                          const int32_t *seq_start, int n_heads, int n_kv_heads, int head_dim);

static void rmsnorm_row(float *out, const float *x, const float *w, int dim, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < dim; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = 0; i < dim; i++) out[i] = w[i] * (x[i] * inv);       /* HF order: weight * (x * rsqrt(...)) */
}

void rx_rmsnorm_ref(float *out, const float *x, const float *w, int rows, int dim, float eps) {
    if (rx_fast()) return rmsnorm_fast(out, x, w, rows, dim, eps);
    for (int r = 0; r < rows; r++) rmsnorm_row(out + (size_t)r * dim, x + (size_t)r * dim, w, dim, eps);
}

/* The one matmul definition: y [rows, out] = x [rows, in] @ W^T, W [out, in] (nn.Linear's layout; F32, F16 or BF16,
 * each weight read as fp32, exactly). Each y[r][o] is a chain of fused multiply-adds over i = 0, 1, ..., in-1 in
 * that order: acc = 0, acc = fmaf(x[r][i], W[o][i], acc). An FMA rounds once and is correctly rounded on every IEEE
 * machine (the x86 instruction, libm's fmaf, a GPU's fma), so every path computes these very bits. Slow (one output
 * at a time, a serial chain): the default path runs its fast version, linear_fast. */
static void matmul_ref(float *y, const float *x, const RxTensor *W, int rows) {
    const int in = (int)W->shape[1], out = (int)W->shape[0];
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            const float *xr = x + (size_t)r * in;
            float acc = 0.0f;
            for (int i = 0; i < in; i++) acc = fmaf(xr[i], rx_tensor_at(W, (int64_t)o * in + i), acc);
            y[(size_t)r * out + o] = acc;
        }
}

/* The definition on fp32 weights w [out, in] (the tests and the bench call it): matmul_ref on a view of w. */
void rx_matmul_ref(float *y, const float *x, const float *w, int rows, int in, int out) {
    const RxTensor W = {.name = (char *)"w", .dtype = RX_F32, .dtype_name = "F32", .rank = 2, .shape = {out, in},
                        .data = w, .nbytes = sizeof(float) * out * in, .file = "(memory)"};
    matmul_ref(y, x, &W, rows);
}

/* The softmax's and SiLU's exponential, y[i] = exp(a * x[i] + b) (a = 1, b = -max: a softmax row; a = -1, b = 0:
 * SiLU's exp(-g)), vectorized, and the same bits on every path: only fmaf, *, + and exact steps, in one order.
 * Cephes' expf: n = rint(x log2 e); r = x - n ln 2 in two fmas (Cody-Waite: ln 2 = C1 + C2, C1 exact in 9 bits, so
 * n * C1 is exact); e^r by a degree-7 polynomial on |r| <= ln2/2; then times 2^n, as 2^(n/2) 2^(n - n/2), two exact
 * scalings. Within 1.5 ulp of exp (test reference/exp_matches_double_on_every_path). Past the float range: +inf
 * above 88.72; +0 below -87.34 (where exp is subnormal, under 1.2e-38); NaN stays NaN. */
#define EXP_HI 88.7228317f
#define EXP_LO (-87.3365479f)
static const float EXP_P[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                               1.6666665459e-1f, 5.0000001201e-1f};

static float exp_one(float x) {
    if (x != x) return x;
    if (x > EXP_HI) return INFINITY;
    if (x < EXP_LO) return 0.0f;
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = EXP_P[0];
    for (int k = 1; k < 6; k++) p = fmaf(p, r, EXP_P[k]);
    float y = fmaf(p, r * r, r) + 1.0f;
    int ni = (int)n, h = ni >> 1;                      /* 2^h and 2^(n-h): both normal for n in [-126, 128] */
    float s1, s2;
    uint32_t b1 = (uint32_t)(h + 127) << 23, b2 = (uint32_t)(ni - h + 127) << 23;
    memcpy(&s1, &b1, 4);
    memcpy(&s2, &b2, 4);
    return y * s1 * s2;
}

void rx_exp_ref(float *y, const float *x, float a, float b, size_t n) {
    if (rx_fast()) return exp_fast(y, x, a, b, n);
    for (size_t i = 0; i < n; i++) y[i] = exp_one(fmaf(a, x[i], b));
}

/* Algorithm 1 lines 11-12: RoPE's cos and sin at each row's position p~, cos_t and sin_t [rows, head_dim/2], once
 * per forward. Qwen3 turns dims i and i + head_dim/2 together by the angle pos * theta^(-2i/head_dim). */
static void rope_angles(float *cos_t, float *sin_t, const int32_t *pos, int rows, int head_dim, double rope_theta) {
    const int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        float inv_freq = 1.0f / (float)pow((float)rope_theta, (float)(2 * i) / (float)head_dim);
        for (int r = 0; r < rows; r++) {
            float angle = (float)pos[r] * inv_freq;
            cos_t[(size_t)r * half + i] = cosf(angle);     /* line 11, IndexSelect(C_cos, p~): computed, no table */
            sin_t[(size_t)r * half + i] = sinf(angle);     /* line 12, IndexSelect(C_sin, p~) */
        }
    }
}

/* One row's heads xr [n_heads, head_dim] in place: q_norm or k_norm (an RMSNorm of each head), then RoPE (line 18),
 * rotate-half: dim i turns with dim i + head_dim/2 by the row's angle i (c, s [head_dim/2]). */
static void qk_norm_rope_row(float *xr, const float *w, const float *c, const float *s, int n_heads, int head_dim,
                             float eps) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = xr + (size_t)h * head_dim;
        rmsnorm_row(v, v, w, head_dim, eps);
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * c[i] - b * s[i];
            v[i + half] = b * c[i] + a * s[i];
        }
    }
}

/* x [rows, n_heads*head_dim] in place, row r at the angles cos_t, sin_t [rows, head_dim/2] (rope_angles). */
static void qk_norm_rope_ref(float *x, const float *w, const float *cos_t, const float *sin_t, int rows, int n_heads,
                             int head_dim, float eps) {
    if (rx_fast()) return qk_norm_rope_fast(x, w, cos_t, sin_t, rows, n_heads, head_dim, eps);
    const size_t half = (size_t)head_dim / 2;
    for (int r = 0; r < rows; r++)
        qk_norm_rope_row(x + (size_t)r * n_heads * head_dim, w, cos_t + r * half, sin_t + r * half, n_heads, head_dim,
                         eps);
}

void rx_qk_norm_rope_ref(float *x, const float *w, const int32_t *pos, int rows, int n_heads, int head_dim,
                         float eps, double rope_theta) {
    const size_t n = (size_t)rows * (head_dim / 2) + 1;
    float *cos_t = (float *)malloc(sizeof(float) * n);               /* [rows, head_dim/2] */
    float *sin_t = (float *)malloc(sizeof(float) * n);
    if (!cos_t || !sin_t) {
        rx_fail("out of host memory for RoPE's angles (%d rows)", rows);
    } else {
        rope_angles(cos_t, sin_t, pos, rows, head_dim, rope_theta);
        qk_norm_rope_ref(x, w, cos_t, sin_t, rows, n_heads, head_dim, eps);
    }
    FREE_ALL(cos_t, sin_t);
}

/* out = silu(gate) * up, silu(g) = g / (1 + exp(-g)), with the exponential every path shares (exp_one). */
void rx_silu_mul_ref(float *out, const float *gate, const float *up, size_t n) {
    if (rx_fast()) return silu_mul_fast(out, gate, up, n);
    for (size_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + exp_one(-gate[i])) * up[i];
}

/* Attention reads its keys through an index: the key row of token t of attention's token space is
 * k + (kv_row ? kv_row[t] : t) * row_stride, kv head h at offset h * head_dim in it, and likewise for v. That one
 * idea serves every caller; only what they pass differs:
 *   Part I, baseline and radix mode: the batch's own rows [N, n_kv*head_dim], no index
 *   Part I, compact mode:            the compact rows [N', n_kv*head_dim], read through I_scatter
 * Compact mode (queries the N' compact rows, q_orig = I_gather, kv_row = I_scatter) is exact, not an approximation:
 * the original positions mapped to one compact row have identical (token, position) histories, hence identical q;
 * and their histories map position by position onto the same compact rows, so the keys and values read through
 * I_scatter are the very vectors the scattered N-row layout would hold. Same inputs, same order of operations: the
 * result is bit-identical to scatter -> attention -> gather, without the copies. */
struct KvView {
    const float *k, *v;         /* [*, row_stride] key and value rows                                     */
    size_t row_stride;
    const int32_t *kv_row;      /* [n_keys] token t's row (NULL: row t); n_keys as in Layout              */
};

/* Where token t's key (and value) row starts, in floats from kv->k (kv->v). */
static size_t kv_at(const KvView *kv, int t) {
    return (size_t)(kv->kv_row ? kv->kv_row[t] : t) * kv->row_stride;
}

/* Causal GQA attention, q and out [n_q, n_heads*head_dim]: query row r is token g = q_orig ? q_orig[r] : r of
 * attention's tokens (seq_start, one entry per token attention reads) and attends to its sequence's tokens
 * t0 = seq_start[g] .. g, keys and values read through kv; query head h reads kv head h / (n_heads / n_kv_heads).
 * softmax(q k / sqrt(d)) v, one query row and head at a time, in the order of operations of the tiled version
 * (attention_fast), so both give the same bits: each score a chain of fmaf over the head's dims, then scaled;
 * exp(s - max) with exp_one; the sum in key order; each output a chain of fmaf over the keys in order. */
static int attention_ref(const float *q, const KvView *kv, float *out, int n_q, const int32_t *q_orig,
                         const int32_t *seq_start, int n_heads, int n_kv_heads, int head_dim) {
    if (rx_fast()) return attention_fast(q, kv, out, n_q, q_orig, seq_start, n_heads, n_kv_heads, head_dim);
    int n_t = 0;                                               /* the keys anyone reads: tokens 0 .. n_t-1 */
    for (int r = 0; r < n_q; r++)
        if ((q_orig ? q_orig[r] : r) + 1 > n_t) n_t = (q_orig ? q_orig[r] : r) + 1;
    float *p = (float *)malloc(sizeof(float) * ((size_t)n_t + 1));     /* [keys] a query's scores, then weights */
    if (!p) return rx_fail("out of host memory for attention (%d keys)", n_t);
    const float scale = 1.0f / sqrtf((float)head_dim);
    for (int r = 0; r < n_q; r++) {
        const int g = q_orig ? q_orig[r] : r;
        const int t0 = seq_start[g];
        const int len = g - t0 + 1;
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + ((size_t)r * n_heads + h) * head_dim;        /* [head_dim] */
            const size_t kvh = (size_t)(h / (n_heads / n_kv_heads)) * head_dim; /* its kv head, in a key row */
            float *o = out + ((size_t)r * n_heads + h) * head_dim;              /* [head_dim] */
            float mx = -INFINITY;
            float z = 0.0f;
            for (int j = 0; j < len; j++) {                          /* the scores, q . k / sqrt(d) */
                const float *k = kv->k + kv_at(kv, t0 + j) + kvh;
                float s = 0.0f;
                for (int i = 0; i < head_dim; i++) s = fmaf(qh[i], k[i], s);
                p[j] = s * scale;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int j = 0; j < len; j++) p[j] = exp_one(p[j] - mx);
            for (int j = 0; j < len; j++) z += p[j];
            for (int j = 0; j < len; j++) p[j] /= z;
            for (int i = 0; i < head_dim; i++) o[i] = 0.0f;
            for (int j = 0; j < len; j++) {                          /* out = p v, a chain over the keys */
                const float *v = kv->v + kv_at(kv, t0 + j) + kvh;
                for (int i = 0; i < head_dim; i++) o[i] = fmaf(p[j], v[i], o[i]);
            }
        }
    }
    free(p);
    return 0;
}

int rx_attention_ref(const float *q, const float *k, const float *v, float *out, int n_q,
                     const int32_t *q_orig, const int32_t *seq_start, const int32_t *kv_row,
                     int n_heads, int n_kv_heads, int head_dim) {
    KvView kv = {.k = k, .v = v, .row_stride = (size_t)n_kv_heads * head_dim, .kv_row = kv_row};  /* [*, n_kv*hd] */
    return attention_ref(q, &kv, out, n_q, q_orig, seq_start, n_heads, n_kv_heads, head_dim);
}

/* out[r] = in[idx[r]]: one row copy serves both directions of the paper's eq. 5-7.
 *   gather : idx = I_gather  [N'],  in [N, dim] original -> out [N', dim] compact
 *   scatter: idx = I_scatter [N],   in [N', dim] compact -> out [N, dim] original */
static void rows_by_index(float *out, const float *in, const int32_t *idx, int n_rows, size_t dim) {
    for (int r = 0; r < n_rows; r++) memcpy(out + (size_t)r * dim, in + (size_t)idx[r] * dim, dim * sizeof(float));
}

/* A projection of the forward, y [rows, out] = x [rows, in] @ W^T: the definition, matmul_ref, or its fast version on
 * the model's packed weights. xp: the fast path's scratch for x, packed (fast_x_floats). */
static void linear_ref(float *y, const float *x, const Qwen3Model *m, const RxTensor *W, int rows, float *xp) {
    if (rx_fast()) return linear_fast(y, x, m, W, rows, xp);
    matmul_ref(y, x, W, rows);
}

const char *rx_mode_name(RxMode mode) {
    static const char *names[] = {"baseline", "radix", "compact", "auto"};
    return mode >= RX_BASELINE && mode <= RX_AUTO ? names[mode] : "?";
}

int rx_mode_parse(const char *s, RxMode *mode) {
    for (int m = RX_BASELINE; m <= RX_AUTO; m++)
        if (!strcmp(s, rx_mode_name((RxMode)m))) { *mode = (RxMode)m; return 0; }
    return rx_fail("unknown mode '%s' (use baseline, radix, compact or auto)", s);
}

RxMode rx_auto_mode(int n_compact, int n_tokens, double threshold) {
    return n_tokens > 0 && (double)n_compact / n_tokens < threshold ? RX_COMPACT : RX_BASELINE;
}

static int no_lm_head(void) {
    return rx_fail("the checkpoint has no LM head (no lm_head.weight, tie_word_embeddings false): an embedding model "
                   "gives embeddings (--embed), not logits");
}

/* One spare element each, so that an empty buffer (no radix mode, no logits) is still a valid pointer. */
static float *floats(size_t n) { return (float *)malloc(sizeof(float) * (n + 1)); }
static int32_t *ints(size_t n) { return (int32_t *)malloc(sizeof(int32_t) * (n + 1)); }

/* Algorithm 1's index work (lines 1-8) and where attention finds every query and key: built once per forward on
 * the host, read by the C forward and uploaded by the GPU forward. The token spaces, said here once for the file:
 *   N  the batch's tokens, sequence by sequence (original space)
 *   R  the rows every position-wise op runs on: N in baseline mode, N' (one per trie node) in radix and compact mode */
typedef struct {
    RxMode mode;             /* as run: RX_AUTO resolved                                                         */
    int N, R, S;             /* batch tokens, rows computed on, sequences                                        */
    RadixIndex ix;           /* I_gather [N'], I_scatter [N] (Algorithm 2); not built when baseline is asked for  */
    double index_ms;         /* the time to build it                                                             */
    int32_t *tok, *pos;      /* [R] each row's token id and position: x~ = x[I_gather], p~ = p[I_gather]         */
    int32_t *last;           /* [S] the row holding each sequence's last token                                   */
    int32_t *cu_q;           /* [S+1] each sequence's query rows (radix_compact_cu_q; Part III's tiled layouts)   */
    int32_t *seq_start;      /* [n_keys] the first token of each token's sequence                               */
    int32_t *kv_row;         /* [n_keys] each token's key row, a KvView's index: t, or I_scatter[t] in compact   */
                             /* mode. n_keys: the tokens attention reads, the batch's N here                     */
    int32_t *q_tok;          /* [n_q] each query row's token, attention's q_orig; n_q = N' in compact mode, else N */
} Layout;

static void layout_free(Layout *L) {
    radix_index_free(&L->ix);
    FREE_ALL(L->tok, L->pos, L->last, L->cu_q, L->seq_start, L->kv_row, L->q_tok);
    memset(L, 0, sizeof *L);
}

/* The rows' half of the layout, once L->ix holds the trie (or nothing, for baseline): resolves RX_AUTO by N'/N,
 * then lines 6-8, each row's token and position, and each sequence's last row and query rows. */
static int layout_rows(Layout *L, const RxBatch *b, RxMode mode, double auto_threshold) {
    const int N = b->n_tokens, S = b->n_seqs;
    const int32_t *cu = b->cu_seqlens;
    if (mode == RX_AUTO) mode = rx_auto_mode(L->ix.n_compact, N, auto_threshold);
    const int rows_are_nodes = mode != RX_BASELINE;
    L->mode = mode;
    L->N = N;
    L->S = S;
    L->R = rows_are_nodes ? L->ix.n_compact : N;
    L->tok = ints(L->R);
    L->pos = ints(L->R);
    L->last = ints(S);
    L->cu_q = ints(S + 1);
    if (!L->tok || !L->pos || !L->last || !L->cu_q)
        return rx_fail("out of host memory for the layout of %d tokens", N);
    for (int r = 0; r < L->R; r++) {                              /* lines 6, 8: p~ = p[I_gather], x~ = x[I_gather] */
        int i = rows_are_nodes ? L->ix.gather[r] : r;
        L->tok[r] = b->input_ids[i];
        L->pos[r] = b->position_ids[i];
    }
    for (int s = 0; s < S; s++) L->last[s] = rows_are_nodes ? L->ix.scatter[cu[s + 1] - 1] : cu[s + 1] - 1;
    if (mode == RX_COMPACT) return radix_compact_cu_q(&L->ix, cu, S, L->cu_q);
    memcpy(L->cu_q, cu, (size_t)(S + 1) * sizeof(int32_t));
    return 0;
}

/* Attention's half: each sequence's keys are its own tokens. Baseline and radix mode read key t from row t (radix
 * mode's rows are the scattered [N, .] ones); compact mode reads it from the R rows through I_scatter, and its
 * queries are the R rows themselves (q_tok = I_gather). */
static int layout_attention(Layout *L, const RxBatch *b) {
    const int N = L->N, S = L->S;
    const int compact = L->mode == RX_COMPACT, n_q = compact ? L->R : N;
    const int32_t *cu = b->cu_seqlens;
    L->seq_start = ints(N);
    L->kv_row = ints(N);
    L->q_tok = ints(n_q);
    if (!L->seq_start || !L->kv_row || !L->q_tok) return rx_fail("out of host memory for the layout of %d tokens", N);
    for (int s = 0; s < S; s++)
        for (int t = cu[s]; t < cu[s + 1]; t++) {
            L->seq_start[t] = cu[s];
            L->kv_row[t] = compact ? L->ix.scatter[t] : t;
        }
    for (int r = 0; r < n_q; r++) L->q_tok[r] = compact ? L->ix.gather[r] : r;
    return 0;
}

/* The layout of batch b (checked by rx_batch_check). The caller frees L with layout_free, whatever this returns. */
static int layout_build(Layout *L, const RxBatch *b, RxMode mode, double auto_threshold) {
    memset(L, 0, sizeof *L);
    if (mode != RX_BASELINE) {                                    /* lines 1-5: Algorithm 2 */
        double t0 = rx_now_ms();
        if (radix_index_build(&L->ix, b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs)) return -1;
        L->index_ms = rx_now_ms() - t0;
    }
    if (layout_rows(L, b, mode, auto_threshold)) return -1;
    return layout_attention(L, b);
}

/* The activations of one forward, allocated and freed in one place (as llm.c's ActivationTensors, llama2.c's
 * RunState), on the R rows of its Layout. */
typedef struct {
    float *h;            /* [R, hidden]             the residual stream                                            */
    float *xn;           /* [R, hidden]             a normed h, or a block's output before the residual add         */
    float *q;            /* [R, n_heads*head_dim]                                                                   */
    float *k, *v;        /* [R, n_kv*head_dim]                                                                      */
    float *att;          /* [R, n_heads*head_dim]   attention's output                                              */
    float *gate, *up;    /* [R, intermediate]                                                                       */
    float *qN, *attN;    /* [N, n_heads*head_dim]   radix mode: q scattered to original space, attention's output   */
    float *kN, *vN;      /* [N, n_kv*head_dim]      radix mode: k and v scattered to original space                 */
    float *x_last;       /* [S, hidden]             last_only: each sequence's last row, then its normed state      */
    float *logits_R;     /* [R, vocab]              radix and compact mode, every token: the LM head on the R rows  */
    float *norm_w;       /* [max(hidden, head_dim)] one norm's weight in fp32                                      */
    float *rope_cos;     /* [R, head_dim/2]         Algorithm 1 line 11: RoPE's cos at each row's position p~       */
    float *rope_sin;     /* [R, head_dim/2]         line 12: its sin                                                */
    float *xp;           /* the fast path's scratch (linear_fast): a matmul's x, packed (fast_x_floats) for the
                          * most rows any matmul takes, R, or S for the LM head with last_only (S > R when
                          * sequences repeat: 13 copies of one 4-token sequence are S = 13, R = 4)                */
} RefActs;

static void acts_free(RefActs *a) {
    FREE_ALL(a->h, a->xn, a->q, a->k, a->v, a->att, a->gate, a->up, a->qN, a->attN, a->kN, a->vN, a->x_last,
             a->logits_R, a->norm_w, a->rope_cos, a->rope_sin, a->xp);
    memset(a, 0, sizeof *a);
}

static int acts_alloc_fast(RefActs *a, const Qwen3Model *m, int n_x);

/* The activations of a forward of m over L. The fast path adds its own: the weights in panels, and x's scratch. */
static int acts_alloc(RefActs *a, const Qwen3Model *m, const Layout *L, int last_only, int logits) {
    const Qwen3Config *c = &m->cfg;
    size_t H = c->hidden_size, QD = (size_t)c->n_heads * c->head_dim, KVD = (size_t)c->n_kv_heads * c->head_dim;
    size_t I = c->intermediate_size, V = c->vocab_size, R = L->R, Nr = L->mode == RX_RADIX ? (size_t)L->N : 0;
    const struct { float **p; size_t n; } bufs[] = {     /* each buffer and its size, as RefActs gives them */
        {&a->h, R * H}, {&a->xn, R * H}, {&a->q, R * QD}, {&a->att, R * QD}, {&a->k, R * KVD}, {&a->v, R * KVD},
        {&a->gate, R * I}, {&a->up, R * I}, {&a->qN, Nr * QD}, {&a->attN, Nr * QD}, {&a->kN, Nr * KVD},
        {&a->vN, Nr * KVD}, {&a->x_last, last_only ? (size_t)L->S * H : 0},
        {&a->logits_R, logits && !last_only && L->mode != RX_BASELINE ? R * V : 0},
        {&a->norm_w, H > (size_t)c->head_dim ? H : (size_t)c->head_dim},
        {&a->rope_cos, R * (c->head_dim / 2)}, {&a->rope_sin, R * (c->head_dim / 2)},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = floats(bufs[i].n))) {
            acts_free(a);
            return rx_fail("out of host memory for the reference forward (N=%d, R=%d rows)", L->N, L->R);
        }
    if (rx_fast()) return acts_alloc_fast(a, m, last_only && L->S > L->R ? L->S : L->R);     /* Part III */
    return 0;
}

/* Algorithm 1 line 9: h0 = Embed(x~) [R, hidden], a row gather from the table by each row's token (lines 6-8). */
static void embed_ref(const Qwen3Model *m, const Layout *L, RefActs *a) {
    const int64_t H = m->cfg.hidden_size;           /* only the R rows asked for become fp32, never the table */
    for (int r = 0; r < L->R; r++)
        for (int64_t i = 0; i < H; i++) a->h[r * H + i] = rx_tensor_at(m->embed, L->tok[r] * H + i);
}

/* Layer l up to attention, on the R rows (Algorithm 1 lines 15-18): xn = input_layernorm(h), then q, k and v, each
 * head q/k-normed and rotated by RoPE at its row's angles (lines 11-12, rope_angles). */
static void layer_qkv_ref(const Qwen3Model *m, int l, const Layout *L, RefActs *a) {
    const Qwen3Config *c = &m->cfg;
    const Qwen3Layer *W = &m->layers[l];
    float eps = (float)c->rms_norm_eps;
    int R = L->R;
    rx_tensor_to_f32(W->input_norm, a->norm_w);
    rx_rmsnorm_ref(a->xn, a->h, a->norm_w, R, c->hidden_size, eps);  /* xn = input_layernorm(h)  [R, hidden] */
    linear_ref(a->q, a->xn, m, W->q_proj, R, a->xp);    /* q = xn @ Wq^T               [R, n_heads*head_dim] */
    linear_ref(a->k, a->xn, m, W->k_proj, R, a->xp);    /* k = xn @ Wk^T               [R, n_kv*head_dim] */
    linear_ref(a->v, a->xn, m, W->v_proj, R, a->xp);    /* v = xn @ Wv^T               [R, n_kv*head_dim] */
    rx_tensor_to_f32(W->q_norm, a->norm_w);
    qk_norm_rope_ref(a->q, a->norm_w, a->rope_cos, a->rope_sin, R, c->n_heads, c->head_dim, eps);     /* line 18 */
    rx_tensor_to_f32(W->k_norm, a->norm_w);
    qk_norm_rope_ref(a->k, a->norm_w, a->rope_cos, a->rope_sin, R, c->n_kv_heads, c->head_dim, eps);
}

/* Line 20 for the queries: radix mode moves q to original space, [N', .] -> [N, .]. */
static void scatter_q_ref(const Layout *L, RefActs *a, int q_dim) {
    if (L->mode == RX_RADIX) rows_by_index(a->qN, a->q, L->ix.scatter, L->N, q_dim);
}

/* Line 20, the paper's scatter before attention: radix mode moves q, k and v to original space [N, .]. Returns where
 * attention reads this layer's keys: those N rows in radix mode; else the R rows, through kv_row (row t in baseline
 * mode, I_scatter[t] in compact mode). */
static KvView scatter_qkv_ref(const Layout *L, RefActs *a, int q_dim, int kv_dim) {
    KvView kv = {.k = a->k, .v = a->v, .row_stride = (size_t)kv_dim, .kv_row = L->kv_row};
    if (L->mode != RX_RADIX) return kv;
    scatter_q_ref(L, a, q_dim);
    rows_by_index(a->kN, a->k, L->ix.scatter, L->N, kv_dim);        /* [N', .] -> [N, .] */
    rows_by_index(a->vN, a->v, L->ix.scatter, L->N, kv_dim);
    kv.k = a->kN;
    kv.v = a->vN;
    return kv;
}

/* The rest of layer l (lines 21-28): attention, o_proj and the residual, the MLP and its residual. Attention reads
 * keys through kv and queries from the R rows, except in radix mode: from the N rows scatter_qkv_ref made, and its
 * output is gathered back to the R rows (line 23), the paper's sandwich. */
static int layer_attn_mlp_ref(const Qwen3Model *m, int l, const Layout *L, RefActs *a, const KvView *kv) {
    const Qwen3Config *c = &m->cfg;
    const Qwen3Layer *W = &m->layers[l];
    int R = L->R, N = L->N, H = c->hidden_size, QD = c->n_heads * c->head_dim, I = c->intermediate_size;
    const int radix = L->mode == RX_RADIX, n_q = radix ? N : R;
    const float *q = radix ? a->qN : a->q;                                             /* [n_q, QD] */
    float *att = radix ? a->attN : a->att;                                             /* [n_q, QD] */
    if (attention_ref(q, kv, att, n_q, L->q_tok, L->seq_start, c->n_heads, c->n_kv_heads, c->head_dim)) return -1;
    if (radix) rows_by_index(a->att, a->attN, L->ix.gather, R, QD);                   /* line 23: [N, .] -> [N', .] */
    float eps = (float)c->rms_norm_eps;
    linear_ref(a->xn, a->att, m, W->o_proj, R, a->xp);  /* a = att @ Wo^T              [R, hidden] */
    for (size_t i = 0; i < (size_t)R * H; i++) a->h[i] += a->xn[i];
    rx_tensor_to_f32(W->post_norm, a->norm_w);
    rx_rmsnorm_ref(a->xn, a->h, a->norm_w, R, H, eps);  /* xn = post_attention_layernorm(h) */
    linear_ref(a->gate, a->xn, m, W->gate_proj, R, a->xp);  /* gate = xn @ Wg^T        [R, intermediate] */
    linear_ref(a->up, a->xn, m, W->up_proj, R, a->xp);      /* up   = xn @ Wu^T        [R, intermediate] */
    rx_silu_mul_ref(a->gate, a->gate, a->up, (size_t)R * I);
    linear_ref(a->xn, a->gate, m, W->down_proj, R, a->xp);  /* mlp = (silu(gate)*up) @ Wd^T  [R, hidden] */
    for (size_t i = 0; i < (size_t)R * H; i++) a->h[i] += a->xn[i];
    return 0;
}

/* out [rows, dim] = x / ||x||_2, row by row (torch.nn.functional.normalize, as sentence-transformers' Normalize). */
static void l2_normalize_rows(float *out, const float *x, int rows, int dim) {
    for (int r = 0; r < rows; r++, x += dim, out += dim) {
        double ss = 0.0;
        for (int i = 0; i < dim; i++) ss += (double)x[i] * x[i];
        double norm = sqrt(ss) > 1e-12 ? sqrt(ss) : 1e-12;
        for (int i = 0; i < dim; i++) out[i] = (float)(x[i] / norm);
    }
}

/* Algorithm 1 lines 31-33, as the GPU's work_head: the final norm and the LM head, only on the rows whose outputs are
 * asked for (either may be NULL). last_only: each sequence's last token, logits [S, vocab] and embed [S, hidden], its
 * state after the norm, L2-normalised (last-token pooling). Otherwise logits [N, vocab], every token in original
 * order: the LM head on the R rows, then y = y~[I_scatter] in radix and compact mode (line 33). */
static void head_ref(const Qwen3Model *m, const Layout *L, RefActs *a, int last_only, float *logits, float *embed) {
    const int H = m->cfg.hidden_size, V = m->cfg.vocab_size, n = last_only ? L->S : L->R;
    const float *h = a->h;
    float *xn = a->xn;
    if (last_only) {                                    /* each sequence's last token: its row in the R rows */
        rows_by_index(a->x_last, a->h, L->last, L->S, H);
        h = xn = a->x_last;
    }
    rx_tensor_to_f32(m->final_norm, a->norm_w);
    rx_rmsnorm_ref(xn, h, a->norm_w, n, H, (float)m->cfg.rms_norm_eps);      /* [n, hidden] */
    if (embed) l2_normalize_rows(embed, xn, n, H);
    if (!logits) return;
    if (last_only || L->mode == RX_BASELINE) {
        linear_ref(logits, xn, m, m->lm_head, n, a->xp);               /* logits = xn @ W_lm^T  [n, V] */
    } else {
        linear_ref(a->logits_R, xn, m, m->lm_head, n, a->xp);          /* logits = xn @ W_lm^T  [N', V] */
        rows_by_index(logits, a->logits_R, L->ix.scatter, L->N, V);         /* [N', V] -> [N, V] */
    }
}

/* Algorithm 1 in plain C: embed -> layers -> final norm -> LM head on the layout's R rows, with the scatter and gather
 * around attention in radix mode only. Outputs as head_ref says; rows_out (may be NULL): R. */
static int forward_ref(const Qwen3Model *m, const RxBatch *b, RxMode mode, int last_only, float *logits,
                       float *embed, int *rows_out) {
    const Qwen3Config *c = &m->cfg;
    if (rx_batch_check(b, c, NULL)) return -1;
    if (logits && !m->lm_head) return no_lm_head();
    const int QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    Layout L;                                           /* lines 1-8: the trie, I_gather [N'], I_scatter [N] */
    RefActs a = {};
    int rc = -1;
    if (layout_build(&L, b, mode, RX_AUTO_THRESHOLD) || acts_alloc(&a, m, &L, last_only, logits != NULL)) goto done;
    embed_ref(m, &L, &a);                                                /* line 9: h0 = Embed(x~)  [R, hidden] */
    rope_angles(a.rope_cos, a.rope_sin, L.pos, L.R, c->head_dim, c->rope_theta);            /* lines 11-12 */
    for (int l = 0; l < c->n_layers; l++) {                              /* lines 13-29 */
        layer_qkv_ref(m, l, &L, &a);                                     /* lines 15-18: q, k, v  [R, .] */
        KvView kv = scatter_qkv_ref(&L, &a, QD, KVD);                    /* line 20 */
        if (layer_attn_mlp_ref(m, l, &L, &a, &kv)) goto done;            /* lines 21-28 */
    }
    head_ref(m, &L, &a, last_only, logits, embed);                      /* lines 31-33 */
    if (rows_out) *rows_out = L.R;
    rc = 0;
done:
    acts_free(&a);
    layout_free(&L);
    return rc;
}

int qwen3_forward_ref(const Qwen3Model *m, const RxBatch *b, RxMode mode, float *logits) {
    return forward_ref(m, b, mode, 0, logits, NULL, NULL);
}

/* Reranking and embedding read one row per sequence, its last token's: head_ref with last_only. */
int qwen3_forward_ref_last(const Qwen3Model *m, const RxBatch *b, RxMode mode, float *logits, float *embed) {
    return forward_ref(m, b, mode, 1, logits, embed, NULL);
}

/* The paper's workload (paper Sec. 4.1 (b), (c)): a reranker reads each (query, document) prompt's last-token logits
 * and keeps two of them. The Qwen3-Reranker model card scores a pair as
 *     scores = log_softmax(stack([logits[:, no], logits[:, yes]], dim=1), dim=1)[:, 1].exp()
 * that is P(yes) = e^yes / (e^yes + e^no) over the two logits alone. In double, from the larger logit (no overflow
 * for any float), then rounded to float: |our score - transformers'| is at most a quarter of the difference in
 * (yes - no), the logistic's steepest slope, plus a rounding. */
int rx_rerank_scores(const float *logits, int n_seqs, int vocab, int32_t yes, int32_t no, float *scores) {
    if (yes < 0 || no < 0 || yes >= vocab || no >= vocab || yes == no)
        return rx_fail("rx_rerank_scores: the yes and no ids (%d, %d) must be two different token ids below the "
                       "vocabulary size %d", yes, no, vocab);
    for (int s = 0; s < n_seqs; s++) {
        const float *row = logits + (size_t)s * vocab;               /* [vocab] sequence s's last token */
        double y = row[yes], n = row[no], top = fmax(y, n);
        double log_sum = top + log(exp(y - top) + exp(n - top));     /* log(e^yes + e^no), the softmax's norm */
        scores[s] = (float)exp(y - log_sum);
    }
    return 0;
}

/* How far the bf16 GPU forward may be from the fp32 C reference: a bound on max|logit_gpu - logit_ref| / max|logit_ref|
 * that follows the model's depth (the bf16 note below says where the GPU rounds; docs/tutorial.md, section 11).
 * bf16 keeps 8 significant bits, so rounding to nearest moves a value by at most u = 2^-8 of itself; taken as uniform
 * in [-u, u], one rounding is a relative error of standard deviation u / sqrt(3). The kernels' roundings on a
 * logit's path, counted in the code below:
 *   per layer  19: input norm 2 (x * rsqrt, then * w), q, k, v 1 each, q/k norm + RoPE 3 (x * rsqrt, * w, rotated),
 *              attention 2 (the flash kernel's P for P V, the output), o_proj 1, residual add 1, post norm 2,
 *              gate 1, up 1, silu * up 1, down 1, residual add 1
 *   the head   3: the final norm 2, the LM head 1
 * Weights are the same bf16 numbers on both sides: no rounding. Each fp32 sum of a reduction of width K adds a random
 * walk of K fp32 roundings (u32 = 2^-24); per layer the widths are 2 hidden (norms), 3 hidden (q, k, v), 2 head_dim
 * (q/k norm, scores), n_heads * head_dim (o_proj), 2 hidden (gate, up) and intermediate (down), and 2 hidden in the
 * head: negligible beside bf16 (4e-5 at Qwen3-4B's depth and width), but counted. Assumptions: the errors are
 * independent and add in quadrature (a GEMM averages its inputs' errors as it averages the inputs: the relative
 * error does not depend on its width), and a layer passes a relative error on without amplifying it (RMSNorm
 * rescales, the residual add keeps it relative). Then
 *   sigma = sqrt(u^2 / 3 * (19 n_layers + 3) + u32^2 / 3 * widths)    relative error of a typical logit
 *   bound = 1.5 sigma              max|diff| / max|ref| compares two tails, each a few sigma from typical
 * 2 layers: 0.0217 (the test models), 3: 0.0262, Qwen3-4B's 36: 0.0887. */
double rx_bf16_tolerance(const Qwen3Config *c) {
    const double u = 1.0 / 256.0, u32 = 1.0 / 16777216.0;
    const double H = c->hidden_size, D = c->head_dim, QD = (double)c->n_heads * c->head_dim;
    const double roundings = 19.0 * c->n_layers + 3;
    const double widths = (7 * H + 2 * D + QD + c->intermediate_size) * c->n_layers + 2 * H;
    return 1.5 * sqrt(u * u / 3 * roundings + u32 * u32 / 3 * widths);
}

#ifndef RADIXMLP_HOST_ONLY
/* ---------------------------------------------------------------------------- cuda checks, bf16 and device memory */
/* The host API reports errors as return codes, never exit(): on failure these macros set radix_error() to
 * "file:line: CUDA error: <what the runtime says> (<the call>)" and return -1 from the enclosing int function.
 * LAUNCH_CHECK() follows every <<<...>>>: a launch that cannot start (bad configuration, no kernel image for this
 * GPU) is reported only through cudaGetLastError. TRY() passes on a failure whose message is already set. */
#define CUDA_CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    return rx_fail("%s:%d: CUDA error: %s (%s)", __FILE__, __LINE__, cudaGetErrorString(e_), #call); } while (0)
#define LAUNCH_CHECK() do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) \
    return rx_fail("%s:%d: CUDA error: %s (kernel launch)", __FILE__, __LINE__, cudaGetErrorString(e_)); } while (0)
#define CUBLAS_CHECK(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) \
    return rx_fail("%s:%d: cuBLAS error: %s (%s)", __FILE__, __LINE__, cublasGetStatusString(s_), #call); } while (0)
#define TRY(call) do { if ((call) != 0) return -1; } while (0)

/* Activations and weights are bf16 in device memory and fp32 inside every kernel: load, compute in fp32, round once
 * to bf16 (to nearest even) on store. PyTorch rounds to bf16 after every op of a bf16 model, so where one kernel does
 * several of transformers' ops it rounds fewer times than transformers (eager attention) does:
 *   RoPE          transformers rounds cos, sin, q*cos and rotate_half(q)*sin, then the sum; we round the sum only
 *   SiLU * up     transformers rounds silu(gate), then the product; we round the product only
 *   attention     transformers (eager) rounds the scores, the scaled scores and the softmax probabilities; the
 *                 naive kernel keeps all three in fp32 and rounds the output only; Part III's flash kernel also
 *                 rounds the probabilities P to bf16 for P V, as FlashAttention does
 * The norms, residual adds and GEMMs round exactly where transformers does. Each rounding skipped is an error of up
 * to 2^-8 of a value that the fp32 C reference does not make either: the GPU is checked against that reference, and
 * the skipped roundings bring it closer, never further. Against transformers' own bf16 forward the GPU then differs
 * by those roundings, about 8 per layer, each as large as one of the 19 per layer both make (rx_bf16_tolerance above
 * gives the budget against the C reference). */
typedef __nv_bfloat16 bf16;
static __host__ __device__ float f32(bf16 x) { return __bfloat162float(x); }
static __host__ __device__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }
static __host__ __device__ float round_bf16(float x) { return f32(to_bf16(x)); }   /* what a bf16 tensor would hold */
static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* cudaMalloc with the one message a user can act on: what did not fit, its shape, and its size. */
static int dev_alloc(void **p, size_t bytes, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int dev_alloc(void **p, size_t bytes, const char *fmt, ...) {
    cudaError_t err = cudaMalloc(p, bytes);
    if (err == cudaSuccess) return 0;
    *p = NULL;
    cudaGetLastError();                /* clear the error, or the next LAUNCH_CHECK would report it a second time */
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    if (err == cudaErrorMemoryAllocation)
        return rx_fail("out of GPU memory allocating %s (%.1f MiB; %.1f of %.1f MiB free): use a smaller batch, "
                       "--last-only (last_only logits), or a GPU with more memory", what, mib(bytes), mib(free_b),
                       mib(total_b));
    return rx_fail("CUDA error allocating %s (%.1f MiB): %s", what, mib(bytes), cudaGetErrorString(err));
}
/* DEV_ALLOC(ptr, count, "what [shape]", ...): count elements of *ptr's type; returns -1 on failure. */
#define DEV_ALLOC(ptr, count, ...) TRY(dev_alloc((void **)&(ptr), (size_t)(count) * sizeof(*(ptr)), __VA_ARGS__))

static int cuda_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
    return 0;
}
/* host[0..n) = fp32 of the bf16 device array dev. */
static int download_bf16(float *host, const bf16 *dev, size_t n) {
    bf16 *h = (bf16 *)malloc(n * sizeof(bf16));
    if (!h) return rx_fail("out of host memory copying back %zu values (%.1f MiB)", n, mib(n * sizeof(bf16)));
    int rc = cuda_copy(h, dev, n * sizeof(bf16), cudaMemcpyDeviceToHost);
    for (size_t i = 0; rc == 0 && i < n; i++) host[i] = f32(h[i]);
    free(h);
    return rc;
}

/* -------------------------------------------------------------------------------------------------------- kernels */
/* Every kernel below is position-wise, row r of the output depending on row r of the input only, except two: the
 * row copy (rows_by_index_kernel: row r reads row idx[r], the gather and the scatter) and attention. So each
 * position-wise kernel runs unchanged on N original rows (baseline) or on N' compact rows (radix, compact): that
 * is the paper. */
#define BLOCK 256            /* threads per block of the row and element-wise kernels */
#define INDEX_BLOCK 128      /* threads per block of rows_by_index_kernel (one output row per block) */
#define MAX_HEAD_DIM 256     /* the attention kernel keeps MAX_HEAD_DIM/32 values of a head per lane in registers */

static unsigned blocks_for(int64_t n, int per_block) { return (unsigned)((n + per_block - 1) / per_block); }

static __device__ float warp_sum(float v) {   /* every lane gets the same sum: fp32 addition is commutative */
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ float block_sum(float v) {  /* blockDim.x a multiple of 32; once per kernel (shared scratch) */
    __shared__ float warp_sums[32];
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < (int)blockDim.x / 32; i++) s += warp_sums[i];
    return s;
}

/* out[r] = in[idx[r]] for r < gridDim.x; rows of chunks_per_row Chunks, any dtype. This one kernel is every index
 * operation of the paper: the gather and the scatter (Eqs. 5 and 7, as rows_by_index in C) and the embedding
 * h0 = E[ids] (idx = token ids, in = E [vocab, hidden]). idx NULL means r.
 * One block per output row. Chunk is uint4 (one 16-byte load and store per thread) when rows and pointers are
 * 16-byte aligned, else uint16_t (one bf16). */
template <typename Chunk>
__global__ void rows_by_index_kernel(Chunk *out, const Chunk *in, const int32_t *idx, int64_t chunks_per_row) {
    const Chunk *from = in + (idx ? idx[blockIdx.x] : blockIdx.x) * chunks_per_row;
    Chunk *to = out + blockIdx.x * chunks_per_row;
    for (int64_t c = threadIdx.x; c < chunks_per_row; c += blockDim.x) to[c] = from[c];
}
int gpu_rows_by_index(void *out, const void *in, const int32_t *idx, int rows_out, size_t row_bytes) {
    if (row_bytes % 2) return rx_fail("gpu_rows_by_index: rows of %zu bytes; bf16 and fp32 rows are even", row_bytes);
    if (rows_out == 0) return 0;
    if (((uintptr_t)out | (uintptr_t)in | row_bytes) % 16 == 0) {
        rows_by_index_kernel<<<rows_out, INDEX_BLOCK>>>((uint4 *)out, (const uint4 *)in, idx,
                                                        (int64_t)(row_bytes / 16));
        LAUNCH_CHECK();
    } else {
        rows_by_index_kernel<<<rows_out, INDEX_BLOCK>>>((uint16_t *)out, (const uint16_t *)in, idx,
                                                        (int64_t)(row_bytes / 2));
        LAUNCH_CHECK();
    }
    return 0;
}

/* RMSNorm of each row, x [rows, dim] -> out [rows, dim] (input, post-attention and final norm; any space), in the
 * rounding order of Hugging Face: out = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))). One block per row. Safe in place
 * (out == x): each thread rewrites only the elements it read, after the barrier inside block_sum. */
__global__ void rmsnorm_kernel(bf16 *out, const bf16 *x, const bf16 *w, int dim, float eps) {
    const bf16 *xr = x + (int64_t)blockIdx.x * dim;
    bf16 *yr = out + (int64_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += f32(xr[i]) * f32(xr[i]);
    float inv_rms = rsqrtf(block_sum(ss) / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = to_bf16(f32(w[i]) * round_bf16(f32(xr[i]) * inv_rms));
}
int gpu_rmsnorm(void *out, const void *x, const void *w, int rows, int dim, float eps) {
    rmsnorm_kernel<<<rows, BLOCK>>>((bf16 *)out, (const bf16 *)x, (const bf16 *)w, dim, eps);
    LAUNCH_CHECK();
    return 0;
}

static int check_heads(int n_heads, int n_kv_heads, int head_dim) {
    if (n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads)
        return rx_fail("n_heads (%d) must be a positive multiple of n_kv_heads (%d)", n_heads, n_kv_heads);
    if (head_dim < 2 || head_dim % 2 || head_dim > MAX_HEAD_DIM)
        return rx_fail("head_dim %d is not supported: the GPU kernels need an even head_dim of at most %d", head_dim,
                       MAX_HEAD_DIM);
    return 0;
}

/* Qwen3's q_norm / k_norm, then RoPE, in place on x [rows, n_heads*head_dim] (q or k; N or N' rows). One warp per
 * (row, head); lane l owns the rotate-half pairs (i, i + d/2) for i = l, l+32, ... < d/2 (d = head_dim):
 *   a = bf16(w[i] * bf16(x[i] * r)),  b = the same for i + d/2       per-head RMSNorm, r = rsqrt(mean(x^2) + eps)
 *   x[i] = a cos - b sin,  x[i+d/2] = b cos + a sin,                 angle = pos[row] * inv_freq[i] in fp32
 * inv_freq [head_dim/2] fp32 (GpuModel's). pos is each row's own position: compact rows carry p[I_gather] (Algorithm
 * 1, line 6), so RoPE runs in compact space. */
__global__ void qk_norm_rope_kernel(bf16 *x, const bf16 *w, const int32_t *pos, const float *inv_freq, int rows,
                                    int n_heads, int head_dim, float eps) {
    int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32, half = head_dim / 2;
    if (warp >= rows * n_heads) return;
    bf16 *xh = x + (int64_t)warp * head_dim;                /* row warp / n_heads, head warp % n_heads */
    float ss = 0.0f;
    for (int i = lane; i < half; i += 32) ss += f32(xh[i]) * f32(xh[i]) + f32(xh[i + half]) * f32(xh[i + half]);
    float inv_rms = rsqrtf(warp_sum(ss) / head_dim + eps);
    float p = (float)pos[warp / n_heads];
    for (int i = lane; i < half; i += 32) {
        float a = round_bf16(f32(w[i]) * round_bf16(f32(xh[i]) * inv_rms));
        float b = round_bf16(f32(w[i + half]) * round_bf16(f32(xh[i + half]) * inv_rms));
        float s, c;
        sincosf(p * inv_freq[i], &s, &c);                        /* Algorithm 1 lines 11-12, at position p~ */
        xh[i] = to_bf16(a * c - b * s);
        xh[i + half] = to_bf16(b * c + a * s);
    }
}
int gpu_qk_norm_rope(void *x, const void *w, const int32_t *pos, const float *inv_freq, int rows, int n_heads,
                     int head_dim, float eps) {
    TRY(check_heads(n_heads, 1, head_dim));
    qk_norm_rope_kernel<<<blocks_for((int64_t)rows * n_heads, BLOCK / 32), BLOCK>>>(
        (bf16 *)x, (const bf16 *)w, pos, inv_freq, rows, n_heads, head_dim, eps);
    LAUNCH_CHECK();
    return 0;
}

/* out = silu(gate) * up, element-wise over [rows, intermediate]; silu(g) = g * sigmoid(g). Safe in place. */
__global__ void silu_mul_kernel(bf16 *out, const bf16 *gate, const bf16 *up, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = f32(gate[i]);
    out[i] = to_bf16(g / (1.0f + expf(-g)) * f32(up[i]));
}
int gpu_silu_mul(void *out, const void *gate, const void *up, size_t n) {
    silu_mul_kernel<<<blocks_for((int64_t)n, BLOCK), BLOCK>>>((bf16 *)out, (const bf16 *)gate, (const bf16 *)up,
                                                              (int64_t)n);
    LAUNCH_CHECK();
    return 0;
}

/* x += y: the residual connection, element-wise over [rows, hidden] (a position-wise op: compact space in radix). */
__global__ void add_kernel(bf16 *x, const bf16 *y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] = to_bf16(f32(x[i]) + f32(y[i]));
}
static int add_inplace(bf16 *x, const bf16 *y, int64_t n) {
    add_kernel<<<blocks_for(n, BLOCK), BLOCK>>>(x, y, n);
    LAUNCH_CHECK();
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ attention */
/* The C reference's KvView, on the host, over bf16 device arrays: the kernel below reads keys through it. */
typedef struct { const bf16 *k, *v; int64_t row_stride; const int32_t *kv_row; } GpuKvView;

/* Naive causal attention for a ragged batch, the GPU twin of rx_attention_ref (same arguments, same meaning):
 *   q, out [n_q, n_heads*head_dim]   query rows: N original rows, or N' compact rows
 *   k, v, kv_stride, kv_row          key/value rows, as GpuKvView above
 *   seq_start, kv_row [n_keys]       attention's tokens (Layout): the N original positions in a forward
 * Which tokens and heads a query row reads: as rx_attention_ref (radixmlp.h). One warp per (query row, head); lane l
 * owns dims l, l+32, ... of the head. One pass over the keys with an online softmax in fp32: keep the running max m,
 * the running sum l of exp(score - m) and the weighted sum acc of values, and rescale l and acc by exp(m_old - m_new)
 * whenever the max grows; out = acc / l, rounded once (bf16 note).
 * Compact mode is exact, bit for bit the radix mode's scatter -> attention -> gather: see KvView. */
__global__ void attention_kernel(bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, int64_t kv_stride,
                                 const int32_t *kv_row, int n_q, const int32_t *q_orig, const int32_t *seq_start,
                                 int n_heads, int n_kv_heads, int head_dim) {
    enum { PER_LANE = MAX_HEAD_DIM / 32 };                       /* values of a head per lane, in registers */
    int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp >= n_q * n_heads) return;
    int r = warp / n_heads, h = warp % n_heads, kvh = h / (n_heads / n_kv_heads);   /* GQA */
    int g = q_orig ? q_orig[r] : r;                              /* the original position row r stands for */
    const bf16 *qh = q + (int64_t)warp * head_dim;               /* row r, head h */
    float scale = 1.0f / sqrtf((float)head_dim), qr[PER_LANE], acc[PER_LANE], m = -INFINITY, l = 0.0f;
    for (int j = 0; j < PER_LANE; j++) {
        qr[j] = lane + 32 * j < head_dim ? f32(qh[lane + 32 * j]) : 0.0f;
        acc[j] = 0.0f;
    }
    for (int t = seq_start[g]; t <= g; t++) {                    /* causal, inside g's own sequence */
        int64_t kv_off = (int64_t)(kv_row ? kv_row[t] : t) * kv_stride + kvh * head_dim;
        float s = 0.0f;
        for (int j = 0; j < PER_LANE; j++)
            if (lane + 32 * j < head_dim) s += qr[j] * f32(k[kv_off + lane + 32 * j]);
        s = warp_sum(s) * scale;
        float m_new = fmaxf(m, s), rescale = expf(m - m_new), p = expf(s - m_new);
        l = l * rescale + p;
        for (int j = 0; j < PER_LANE; j++)
            if (lane + 32 * j < head_dim) acc[j] = acc[j] * rescale + p * f32(v[kv_off + lane + 32 * j]);
        m = m_new;
    }
    bf16 *oh = out + (int64_t)warp * head_dim;
    for (int j = 0; j < PER_LANE; j++)
        if (lane + 32 * j < head_dim) oh[lane + 32 * j] = to_bf16(acc[j] / l);
}
int gpu_attention(void *out, const void *q, const void *k, const void *v, int64_t kv_stride, int n_q,
                  const int32_t *q_orig, const int32_t *seq_start, const int32_t *kv_row, int n_heads, int n_kv_heads,
                  int head_dim) {
    TRY(check_heads(n_heads, n_kv_heads, head_dim));
    attention_kernel<<<blocks_for((int64_t)n_q * n_heads, BLOCK / 32), BLOCK>>>((bf16 *)out, (const bf16 *)q,
        (const bf16 *)k, (const bf16 *)v, kv_stride, kv_row, n_q, q_orig, seq_start, n_heads, n_kv_heads, head_dim);
    LAUNCH_CHECK();
    return 0;
}

/* -------------------------------------------------------------------------------------------------- the gpu model */
typedef struct {                     /* one decoder layer on the device, bf16, [out, in] as nn.Linear stores them */
    bf16 *input_norm, *post_norm;    /* [hidden]                                   */
    bf16 *q_proj;                    /* [n_heads*head_dim, hidden]                 */
    bf16 *k_proj, *v_proj;           /* [n_kv*head_dim, hidden]                    */
    bf16 *o_proj;                    /* [hidden, n_heads*head_dim]                 */
    bf16 *q_norm, *k_norm;           /* [head_dim]                                 */
    bf16 *gate_proj, *up_proj;       /* [intermediate, hidden]                     */
    bf16 *down_proj;                 /* [hidden, intermediate]                     */
} GpuLayer;

struct GpuModel {
    Qwen3Config cfg;
    bf16 *embed;                     /* [vocab, hidden]                            */
    GpuLayer *layers;                /* [n_layers], a host array of device pointers */
    bf16 *final_norm;                /* [hidden]                                   */
    bf16 *lm_head;                   /* [vocab, hidden]; == embed when tied        */
    float *inv_freq;                 /* [head_dim/2] RoPE frequencies              */
    cublasHandle_t blas;             /* its GEMMs, on the default stream as every kernel */
    RxAttention attention;           /* gpu_set_attention; RX_ATTN_AUTO (0) at first */
};

/* The current device's properties; the error when there is none (cleared, so no later check reports it again). */
static cudaError_t device_props(cudaDeviceProp *p) {
    int n = 0, dev = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaSuccess && n == 0) err = cudaErrorNoDevice;
    if (err == cudaSuccess) err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaGetDeviceProperties(p, dev);
    if (err != cudaSuccess) cudaGetLastError();
    return err;
}
int gpu_available(void) {
    cudaDeviceProp p;
    cudaError_t err = device_props(&p);
    if (err != cudaSuccess) {
        rx_fail("no GPU found (the CUDA runtime says: %s)", cudaGetErrorString(err));
        return 0;
    }
    if (p.major < 8) {
        rx_fail("the CUDA device %s has compute capability %d.%d; the bf16 kernels need 8.0 or newer", p.name,
                p.major, p.minor);
        return 0;
    }
    return 1;
}
const char *gpu_device_name(void) {
    static cudaDeviceProp p;
    return device_props(&p) == cudaSuccess ? p.name : "";
}

static void to_bf16_fast(bf16 *h, const RxTensor *t, int64_t n);   /* the loop below, on threads */

/* h [n] = the checkpoint tensor t (F32, F16 or BF16, as fp32) rounded to bf16, to nearest even. */
static void tensor_to_bf16(bf16 *h, const RxTensor *t, int64_t n) {
    if (rx_fast()) return to_bf16_fast(h, t, n);
    for (int64_t i = 0; i < n; i++) h[i] = to_bf16(rx_tensor_at(t, i));
}

/* Allocates *dst and fills it with t in bf16. The loader has checked t's dtype and its shape against the config
 * (bind_model). */
static int upload(bf16 **dst, const RxTensor *t) {
    int64_t n = rx_numel(t);
    DEV_ALLOC(*dst, n, "the weight %s [%lld elements]", t->name, (long long)n);
    bf16 *h = (bf16 *)malloc((size_t)n * sizeof(bf16));
    if (!h) return rx_fail("out of host memory converting %s (%.1f MiB)", t->name, mib((size_t)n * sizeof(bf16)));
    tensor_to_bf16(h, t, n);
    int rc = cuda_copy(*dst, h, (size_t)n * sizeof(bf16), cudaMemcpyHostToDevice);
    free(h);
    return rc;
}

/* Allocates and fills every weight of g from m. */
static int model_build(GpuModel *g, const Qwen3Model *m) {
    const Qwen3Config *c = &g->cfg;
    /* CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION keeps a split-K GEMM's partial sums in fp32 (cuBLAS may
     * otherwise reduce them in bf16), so that gpu_gemm's promise holds for every shape. */
    CUBLAS_CHECK(cublasCreate(&g->blas));
    CUBLAS_CHECK(cublasSetMathMode(g->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                           CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    g->layers = (GpuLayer *)calloc(c->n_layers, sizeof(GpuLayer));
    if (!g->layers) return rx_fail("out of host memory for %d layers", c->n_layers);

    TRY(upload(&g->embed, m->embed));
    for (int l = 0; l < c->n_layers; l++) {
        const Qwen3Layer *L = &m->layers[l];
        GpuLayer *G = &g->layers[l];
        TRY(upload(&G->input_norm, L->input_norm));
        TRY(upload(&G->q_proj, L->q_proj));
        TRY(upload(&G->k_proj, L->k_proj));
        TRY(upload(&G->v_proj, L->v_proj));
        TRY(upload(&G->o_proj, L->o_proj));
        TRY(upload(&G->q_norm, L->q_norm));
        TRY(upload(&G->k_norm, L->k_norm));
        TRY(upload(&G->post_norm, L->post_norm));
        TRY(upload(&G->gate_proj, L->gate_proj));
        TRY(upload(&G->up_proj, L->up_proj));
        TRY(upload(&G->down_proj, L->down_proj));
    }
    TRY(upload(&g->final_norm, m->final_norm));
    /* the loader decided: tied (the LM head is embed_tokens itself), untied, or no head (an embedding checkpoint,
     * gpu_embed only); see bind_model */
    if (m->lm_head == m->embed)
        g->lm_head = g->embed;
    else if (m->lm_head)
        TRY(upload(&g->lm_head, m->lm_head));

    float inv_freq[MAX_HEAD_DIM / 2]; /* 1 / theta^(2i/head_dim), RoPE's frequencies: the reference's expression */
    for (int i = 0; i < c->head_dim / 2; i++)
        inv_freq[i] = 1.0f / (float)pow((float)c->rope_theta, (float)(2 * i) / (float)c->head_dim);
    DEV_ALLOC(g->inv_freq, c->head_dim / 2, "the RoPE frequencies [%d]", c->head_dim / 2);
    return cuda_copy(g->inv_freq, inv_freq, (size_t)(c->head_dim / 2) * sizeof(float), cudaMemcpyHostToDevice);
}

void gpu_model_free(GpuModel *g) {
    if (!g) return;
    for (int l = 0; g->layers && l < g->cfg.n_layers; l++) {
        GpuLayer *L = &g->layers[l];
        void *dev[] = {L->input_norm, L->q_proj,  L->k_proj,    L->v_proj,  L->o_proj,   L->q_norm,
                       L->k_norm,     L->post_norm, L->gate_proj, L->up_proj, L->down_proj};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
    }
    if (g->lm_head != g->embed) cudaFree(g->lm_head);
    cudaFree(g->embed);
    cudaFree(g->final_norm);
    cudaFree(g->inv_freq);
    free(g->layers);
    if (g->blas) cublasDestroy(g->blas);
    free(g);
}

int gpu_model_upload(GpuModel **out, const Qwen3Model *m) {
    *out = NULL;
    if (!m) return rx_fail("gpu_model_upload needs a model");
    if (!gpu_available() || check_heads(m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.head_dim)) return -1;
    GpuModel *g = (GpuModel *)calloc(1, sizeof *g);
    if (!g) return rx_fail("out of host memory for the GPU model");
    g->cfg = m->cfg;
    if (model_build(g, m)) {
        gpu_model_free(g);
        return -1;
    }
    *out = g;
    return 0;
}
/* The C reference's random model (qwen3_random), rounded to bf16: a test can compare the two forwards directly. The
 * fp32 model lives on the host until the upload is done (4 bytes a parameter). */
int gpu_model_random(GpuModel **g, const Qwen3Config *cfg, uint64_t seed) {
    Qwen3Model m;
    *g = NULL;
    if (!gpu_available() || qwen3_random(&m, cfg, seed)) return -1;
    int rc = gpu_model_upload(g, &m);
    qwen3_free(&m);
    return rc;
}

/* --------------------------------------------------------------------------------------------------------- cublas */
/* y = x @ W^T, PyTorch's nn.Linear without bias: x [rows, in], W [out, in] (as nn.Linear stores it), y [rows, out],
 * all row-major bf16; products accumulated in fp32 (CUBLAS_COMPUTE_32F), y rounded to bf16 once, on g's cuBLAS handle.
 *
 * cuBLAS is column-major. A row-major [r, c] matrix is, byte for byte, the column-major [c, r] matrix, its
 * transpose, with leading dimension c. So cuBLAS sees x as x^T [in, rows], W as W^T [in, out] and the buffer y as
 * y^T [out, rows], and we ask it for y^T = W x^T, i.e. C = op(A) op(B) with, argument by argument:
 *   transa = T, A = W, lda = in     A is seen as W^T [in, out]; op(A) = W [out, in]
 *   transb = N, B = x, ldb = in     B is seen as x^T [in, rows]; op(B) = x^T
 *   m = out, n = rows, k = in       C = op(A) op(B) is [out, rows]
 *   C = y, ldc = out                y^T [out, rows] column-major is exactly y [rows, out] row-major
 * No copy and no explicit transpose anywhere. */
int gpu_gemm(GpuModel *g, void *y, const void *x, const void *W, int rows, int in, int out) {
    const float one = 1.0f, zero = 0.0f;
    if (!g) return rx_fail("gpu_gemm needs a GPU model: it runs on the model's cuBLAS handle");
    CUBLAS_CHECK(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, W, CUDA_R_16BF, in, x,
                              CUDA_R_16BF, in, &zero, y, CUDA_R_16BF, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* ---------------------------------------------------------------------------------- the gpu forward (algorithm 1) */
/* The C forward, step for step, on the device: the same Layout (built on the host, then uploaded), the activations
 * in one struct (GpuWork, as RefActs), each layer in two steps around the K/V store (gpu_layer_qkv,
 * gpu_layer_attn_mlp). One layer in radix mode, the paper's sandwich: only attention sees the original layout.
 *
 *   compact [N', .]                                  original [N, .]                 compact [N', .]
 *   x -> norm -> q,k,v = x W^T -> q/k norm, RoPE --scatter(I_scatter)--> attention --gather(I_gather)--> o_proj -> +x
 *     -> norm -> MLP -> +x                                     (compact and baseline mode: see attention_step) */

/* A device copy of one of the layout's index arrays, int32 [n]. */
static int upload_i32(int32_t **dst, const int32_t *src, int n, const char *what) {
    DEV_ALLOC(*dst, n, "%s [%d]", what, n);
    return cuda_copy(*dst, src, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice);
}

/* Part III's attention kernel for the forward, in three visible lines: work_alloc plans it, attention_step runs it,
 * work_free frees it. Without them the forward runs the naive kernel above; so does the definition path, unless
 * gpu_set_attention asked for the flash kernel itself. */
typedef struct FastAttn FastAttn;
static int attention_plan_fast(GpuModel *g, FastAttn **plan, const Layout *L, const int32_t *cu_k);
static int attention_run_fast(const FastAttn *plan, bf16 *out, const bf16 *q, GpuKvView kv, const Qwen3Config *c);
static void attention_plan_free(FastAttn *plan);

/* One forward's layout, on the host and as device copies, and its activations: made by layout_build and work_alloc,
 * freed by work_free. Token spaces as in Layout: N the batch, R the rows computed on; attention's keys: n_keys tokens
 * (work_alloc), a forward's the batch's N. */
typedef struct {
    Layout L;                /* Algorithm 1 lines 1-8, on the host                                               */
    FastAttn *fast;          /* Part III's attention plan (attention_plan_fast), or NULL: the naive kernel       */
    int32_t *ids, *pos, *last, *gather, *scatter;                /* device copies of L: [R] [R] [S] [N'] [N]        */
    int32_t *seq_start, *kv_row, *q_tok;                         /* [n_keys] [n_keys] [n_q]                         */
    bf16 *x, *xn;            /* [R, hidden] residual stream; norm output, reused for o_proj and down_proj out     */
    bf16 *q, *att;           /* [R, n_heads*head_dim]                                                            */
    bf16 *k, *v;             /* [R, n_kv*head_dim]                                                               */
    bf16 *gate, *up;         /* [R, intermediate]                                                                */
    bf16 *q_n, *att_n;       /* radix only: [N, n_heads*head_dim] original space                                 */
    bf16 *k_n, *v_n;         /* radix only: [N, n_kv*head_dim] original space                                    */
    bf16 *x_last;            /* last_only: [S, hidden]                                                           */
    bf16 *logits;            /* [R or S, vocab] as computed                                                      */
    bf16 *logits_n;          /* radix and compact, every token: [N, vocab] scattered back to original order      */
    cudaEvent_t t0, t1;
    float ms;                /* the GPU time between them                                                        */
} GpuWork;

static void work_free(GpuWork *w) {
    void *dev[] = {w->ids,  w->pos,    w->last, w->gather, w->scatter, w->seq_start, w->kv_row, w->q_tok,
                   w->x,    w->xn,     w->q,    w->att,    w->k,       w->v,         w->gate,   w->up,
                   w->q_n,  w->att_n,  w->k_n,  w->v_n,    w->x_last,  w->logits,    w->logits_n};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
    attention_plan_free(w->fast);                                                       /* Part III */
    if (w->t0) cudaEventDestroy(w->t0);
    if (w->t1) cudaEventDestroy(w->t1);
    layout_free(&w->L);
}

/* Uploads the layout and allocates every activation, before the timed region: cudaMalloc stalls the host and would
 * be counted as GPU time. Attention's keys: n_keys tokens (L's seq_start and kv_row span
 * them), each sequence's at cu_k [S+1]; a forward's are its batch, n_keys = N and cu_k = cu_seqlens. */
static int work_alloc(GpuModel *g, GpuWork *w, int n_keys, const int32_t *cu_k, int last_only, int want_logits) {
    const Qwen3Config *c = &g->cfg;
    const Layout *L = &w->L;
    const int N = L->N, R = L->R, S = L->S, H = c->hidden_size, I = c->intermediate_size;
    const int V = c->vocab_size, QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    const int rows_are_nodes = L->mode != RX_BASELINE, n_q = L->mode == RX_COMPACT ? R : N;
    const int n_out = last_only ? S : R;
    const char *sp = rows_are_nodes ? "N'" : "N";
    TRY(upload_i32(&w->ids, L->tok, R, "the token ids"));
    TRY(upload_i32(&w->pos, L->pos, R, "the positions"));
    TRY(upload_i32(&w->last, L->last, S, "the last-token rows"));
    if (rows_are_nodes) TRY(upload_i32(&w->gather, L->ix.gather, R, "I_gather"));
    if (rows_are_nodes) TRY(upload_i32(&w->scatter, L->ix.scatter, N, "I_scatter"));
    TRY(upload_i32(&w->seq_start, L->seq_start, n_keys, "the sequence starts"));
    TRY(upload_i32(&w->kv_row, L->kv_row, n_keys, "the key rows"));
    TRY(upload_i32(&w->q_tok, L->q_tok, n_q, "the query rows' tokens"));
    DEV_ALLOC(w->x, (size_t)R * H, "the residual stream [%s=%d, hidden=%d]", sp, R, H);
    DEV_ALLOC(w->xn, (size_t)R * H, "the normed activations [%s=%d, hidden=%d]", sp, R, H);
    DEV_ALLOC(w->q, (size_t)R * QD, "the queries [%s=%d, n_heads*head_dim=%d]", sp, R, QD);
    DEV_ALLOC(w->att, (size_t)R * QD, "the attention output [%s=%d, n_heads*head_dim=%d]", sp, R, QD);
    DEV_ALLOC(w->k, (size_t)R * KVD, "the keys [%s=%d, n_kv*head_dim=%d]", sp, R, KVD);
    DEV_ALLOC(w->v, (size_t)R * KVD, "the values [%s=%d, n_kv*head_dim=%d]", sp, R, KVD);
    DEV_ALLOC(w->gate, (size_t)R * I, "the MLP gate [%s=%d, intermediate=%d]", sp, R, I);
    DEV_ALLOC(w->up, (size_t)R * I, "the MLP up projection [%s=%d, intermediate=%d]", sp, R, I);
    if (L->mode == RX_RADIX) {
        DEV_ALLOC(w->q_n, (size_t)N * QD, "the scattered queries [N=%d, n_heads*head_dim=%d]", N, QD);
        DEV_ALLOC(w->att_n, (size_t)N * QD, "the attention output [N=%d, n_heads*head_dim=%d]", N, QD);
        DEV_ALLOC(w->k_n, (size_t)N * KVD, "the scattered keys [N=%d, n_kv*head_dim=%d]", N, KVD);
        DEV_ALLOC(w->v_n, (size_t)N * KVD, "the scattered values [N=%d, n_kv*head_dim=%d]", N, KVD);
    }
    if (last_only) DEV_ALLOC(w->x_last, (size_t)S * H, "the last tokens' states [n_seqs=%d, hidden=%d]", S, H);
    if (want_logits)
        DEV_ALLOC(w->logits, (size_t)n_out * V, "the logits [%s=%d, vocab=%d]", last_only ? "n_seqs" : sp, n_out, V);
    if (want_logits && rows_are_nodes && !last_only)
        DEV_ALLOC(w->logits_n, (size_t)N * V, "the logits [N=%d, vocab=%d]", N, V);
    CUDA_CHECK(cudaEventCreate(&w->t0));
    CUDA_CHECK(cudaEventCreate(&w->t1));
    return attention_plan_fast(g, &w->fast, L, cu_k);                       /* Part III: NULL for the naive kernel */
}

/* Line 9, started inside the timed region: the embedding is a row gather from the table, h0 = E[x~]  [R, hidden]. */
static int embed_rows(GpuModel *g, GpuWork *w) {
    CUDA_CHECK(cudaEventRecord(w->t0, 0));
    return gpu_rows_by_index(w->x, g->embed, w->ids, w->L.R, g->cfg.hidden_size * sizeof(bf16));
}

/* Layer l up to attention, on the R rows (lines 15-18), as layer_qkv_ref. */
static int gpu_layer_qkv(GpuModel *g, int l, GpuWork *w) {
    const Qwen3Config *c = &g->cfg;
    const GpuLayer *W = &g->layers[l];
    const int R = w->L.R, H = c->hidden_size, QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    TRY(gpu_rmsnorm(w->xn, w->x, W->input_norm, R, H, eps)); /* xn = input_layernorm(x) [R, hidden]              */
    TRY(gpu_gemm(g, w->q, w->xn, W->q_proj, R, H, QD));        /* q = xn @ Wq^T     [R, n_heads*head_dim]          */
    TRY(gpu_gemm(g, w->k, w->xn, W->k_proj, R, H, KVD));       /* k = xn @ Wk^T     [R, n_kv*head_dim]             */
    TRY(gpu_gemm(g, w->v, w->xn, W->v_proj, R, H, KVD));       /* v = xn @ Wv^T     [R, n_kv*head_dim]             */
    TRY(gpu_qk_norm_rope(w->q, W->q_norm, w->pos, g->inv_freq, R, c->n_heads, c->head_dim, eps));
    return gpu_qk_norm_rope(w->k, W->k_norm, w->pos, g->inv_freq, R, c->n_kv_heads, c->head_dim, eps);
}

/* Line 20 for the queries, as scatter_q_ref: radix mode moves q to original space, [N', .] -> [N, .]. */
static int gpu_scatter_q(GpuModel *g, GpuWork *w) {
    const size_t q_bytes = (size_t)g->cfg.n_heads * g->cfg.head_dim * sizeof(bf16);   /* one query row */
    return w->L.mode == RX_RADIX ? gpu_rows_by_index(w->q_n, w->q, w->scatter, w->L.N, q_bytes) : 0;
}

/* Line 20, as scatter_qkv_ref, *kv for its return value. */
static int gpu_scatter_qkv(GpuModel *g, GpuWork *w, GpuKvView *kv) {
    const int64_t KVD = (int64_t)g->cfg.n_kv_heads * g->cfg.head_dim;
    const size_t kv_bytes = (size_t)KVD * sizeof(bf16);                            /* one key or value row */
    GpuKvView rows = {.k = w->k, .v = w->v, .row_stride = KVD, .kv_row = w->kv_row};     /* the R rows */
    *kv = rows;
    if (w->L.mode != RX_RADIX) return 0;
    TRY(gpu_scatter_q(g, w));
    TRY(gpu_rows_by_index(w->k_n, w->k, w->scatter, w->L.N, kv_bytes));          /* [N', .] -> [N, .] */
    TRY(gpu_rows_by_index(w->v_n, w->v, w->scatter, w->L.N, kv_bytes));
    kv->k = w->k_n;
    kv->v = w->v_n;
    return 0;
}

/* Attention with its keys wherever kv says (lines 21-23): radix mode attends with the N rows gpu_scatter_qkv made and
 * gathers the output back; baseline attends with its N rows, compact with the N' rows. */
static int attention_step(GpuModel *g, GpuWork *w, const GpuKvView *kv) {
    const Qwen3Config *c = &g->cfg;
    const int radix = w->L.mode == RX_RADIX, n_q = radix ? w->L.N : w->L.R;
    const size_t qd = (size_t)c->n_heads * c->head_dim * sizeof(bf16);   /* bytes per query row */
    const bf16 *q = radix ? w->q_n : w->q;                                   /* [n_q, QD] */
    bf16 *out = radix ? w->att_n : w->att;                                   /* [n_q, QD] */
    if (w->fast) TRY(attention_run_fast(w->fast, out, q, *kv, c));             /* Part III */
    else TRY(gpu_attention(out, q, kv->k, kv->v, kv->row_stride, n_q, w->q_tok, w->seq_start, kv->kv_row, c->n_heads,
                           c->n_kv_heads, c->head_dim));
    return radix ? gpu_rows_by_index(w->att, w->att_n, w->gather, w->L.R, qd) : 0;  /* [N, .] -> [N', .] */
}

/* The rest of layer l (lines 21-28), as layer_attn_mlp_ref. */
static int gpu_layer_attn_mlp(GpuModel *g, int l, GpuWork *w, const GpuKvView *kv) {
    const Qwen3Config *c = &g->cfg;
    const GpuLayer *W = &g->layers[l];
    const int R = w->L.R, H = c->hidden_size, I = c->intermediate_size, QD = c->n_heads * c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    TRY(attention_step(g, w, kv));
    TRY(gpu_gemm(g, w->xn, w->att, W->o_proj, R, QD, H));      /* xn = att @ Wo^T   [R, hidden]                    */
    TRY(add_inplace(w->x, w->xn, (int64_t)R * H));
    TRY(gpu_rmsnorm(w->xn, w->x, W->post_norm, R, H, eps));
    TRY(gpu_gemm(g, w->gate, w->xn, W->gate_proj, R, H, I));   /* gate = xn @ Wg^T  [R, intermediate]              */
    TRY(gpu_gemm(g, w->up, w->xn, W->up_proj, R, H, I));       /* up = xn @ Wu^T    [R, intermediate]              */
    TRY(gpu_silu_mul(w->gate, w->gate, w->up, (size_t)R * I));
    TRY(gpu_gemm(g, w->xn, w->gate, W->down_proj, R, I, H));   /* xn = (silu(gate)*up) @ Wd^T [R, hidden]          */
    return add_inplace(w->x, w->xn, (int64_t)R * H);
}

/* Lines 31-33, as head_ref; then the GPU time and the copy back. embed != NULL (with last_only): gpu_embed's
 * normed states instead of logits, no LM head. */
static int work_head(GpuModel *g, GpuWork *w, int last_only, float *logits, float *embed) {
    const int H = g->cfg.hidden_size, V = g->cfg.vocab_size, S = w->L.S, n_out = last_only ? S : w->L.R;
    const float eps = (float)g->cfg.rms_norm_eps;
    const bf16 *h = w->x;
    bf16 *hn = w->xn;
    if (last_only) {                                                        /* as head_ref */
        TRY(gpu_rows_by_index(w->x_last, w->x, w->last, S, H * sizeof(bf16)));
        h = hn = w->x_last;
    }
    TRY(gpu_rmsnorm(hn, h, g->final_norm, n_out, H, eps));
    if (!embed) TRY(gpu_gemm(g, w->logits, hn, g->lm_head, n_out, H, V));   /* logits = hn @ W_lm^T [n_out, V] */
    const bf16 *out = w->logits;
    if (w->L.mode != RX_BASELINE && !last_only && !embed) {                 /* y = y_c[I_scatter]  [N, vocab] */
        TRY(gpu_rows_by_index(w->logits_n, w->logits, w->scatter, w->L.N, V * sizeof(bf16)));
        out = w->logits_n;
    }
    CUDA_CHECK(cudaEventRecord(w->t1, 0));
    CUDA_CHECK(cudaEventSynchronize(w->t1));
    CUDA_CHECK(cudaEventElapsedTime(&w->ms, w->t0, w->t1));
    if (embed) {                      /* [n_seqs, hidden]: the bf16 normed states, L2-normalised on the host in fp32 */
        TRY(download_bf16(embed, hn, (size_t)S * H));
        l2_normalize_rows(embed, embed, S, H);
        return 0;
    }
    return logits ? download_bf16(logits, out, (size_t)(last_only ? S : w->L.N) * V) : 0;
}

/* What a forward reports: its layout (N' = N where no trie was built: baseline asked for) and its GPU time. */
static void run_info(const GpuWork *w, GpuRunInfo *info) {
    if (!info) return;
    info->mode = w->L.mode;
    info->n_tokens = w->L.N;
    info->index_ms = w->L.index_ms;
    info->forward_ms = w->ms;
    info->n_compact = w->L.ix.n_tokens ? w->L.ix.n_compact : w->L.N;
}

/* Part I's forward, as forward_ref: embed -> layers -> final norm -> LM head, attention reading the batch's rows. */
static int forward_run(GpuModel *g, const RxBatch *b, RxMode mode, double auto_threshold, int last_only,
                       float *logits, float *embed, GpuWork *w) {
    const Qwen3Config *c = &g->cfg;
    TRY(rx_batch_check(b, c, NULL));          /* on the host, before any device work */
    TRY(layout_build(&w->L, b, mode, auto_threshold));                       /* lines 1-8 */
    TRY(work_alloc(g, w, b->n_tokens, b->cu_seqlens, last_only, !embed));     /* keys: the batch's own */
    TRY(embed_rows(g, w));                                                    /* line 9 */
    for (int l = 0; l < c->n_layers; l++) {                                   /* lines 13-29 */
        TRY(gpu_layer_qkv(g, l, w));                                          /* lines 15-18 */
        GpuKvView kv;
        TRY(gpu_scatter_qkv(g, w, &kv));                                      /* line 20 */
        TRY(gpu_layer_attn_mlp(g, l, w, &kv));                                /* lines 21-28 */
    }
    return work_head(g, w, last_only, logits, embed);                        /* lines 31-33 */
}

static int forward(GpuModel *g, const RxBatch *b, RxMode mode, double auto_threshold, int last_only, float *logits,
                   float *embed, GpuRunInfo *info) {
    if (info) memset(info, 0, sizeof *info);
    if (!g || !b) return rx_fail("the GPU forward needs a GPU model and a batch");
    if (!embed && !g->lm_head) return no_lm_head();
    if (auto_threshold <= 0) auto_threshold = RX_AUTO_THRESHOLD;   /* 0: the default threshold */
    GpuWork w;
    memset(&w, 0, sizeof w);
    int rc = forward_run(g, b, mode, auto_threshold, last_only || embed, logits, embed, &w);
    run_info(&w, info);
    work_free(&w);
    return rc;
}
int gpu_forward(GpuModel *g, const RxBatch *b, RxMode mode, double auto_threshold, int last_only, float *logits,
                GpuRunInfo *info) {
    return forward(g, b, mode, auto_threshold, last_only, logits, NULL, info);
}
int gpu_embed(GpuModel *g, const RxBatch *b, RxMode mode, double auto_threshold, float *embed, GpuRunInfo *info) {
    return embed ? forward(g, b, mode, auto_threshold, 1, NULL, embed, info) : rx_fail("gpu_embed needs an output");
}
#endif /* RADIXMLP_HOST_ONLY */

/* --------------------------------------------------------------------------------------- part ii: a paged kv pool */
/* Part II, across requests. Part I removes work repeated *inside* one batch. A prefix cache removes it *across*
 * batches: it keeps the K/V of prompts already prefilled, and a later request that starts with the same tokens reads
 * them instead of recomputing them (RadixAttention, SGLang). The two compose: the cache skips the cached prefix, the
 * trie compacts what is left (qwen3_prefill_ref).
 *
 * K/V live in a pool of fixed-size pages (PagedAttention); a cache is only an index over it, mapping token
 * prefixes to pages. Page size 4, one running request r whose prompt is the system prompt, question C and 3 more:
 *
 *   radix tree (model 7)                                  the KV pool: 8 pages of 4 token slots
 *   root                                                  page  0    1    2    3    4    5    6    7
 *    `-- [s s s s | s s s s]  pages 0 1  lock 1                [ssss][ssss][BBBB][CCCC][    ][rrr ][    ][    ]
 *         |-- [B B B B]  page 2  lock 0                   ref    2    2    1    2    0    1    0    0
 *         `-- [C C C C]  page 3  lock 1                   free list: 7 6 4
 *   request r: cached_len 12, page table 0 1 3 | 5 (its own page: 3 new tokens), prefix_key 3
 *
 * A page's ref counts the cache's reference (1 while it is cached) and each request's; at 0 it is free. The cache
 * never copies K/V: a split, an insert or an eviction only moves page ids. */
int rx_kv_pool_init(RxKvPool *p, int n_pages, int page_size, int n_layers, int kv_dim) {
    memset(p, 0, sizeof *p);
    if (n_pages < 1 || page_size < 1 || n_layers < 0 || kv_dim < 0 || (int64_t)n_pages * page_size > INT32_MAX)
        return rx_fail("KV pool of %d pages x %d tokens: both must be >= 1 and their product fit in 32 bits",
                       n_pages, page_size);
    size_t floats = (size_t)n_pages * page_size * n_layers * kv_dim;     /* [slots, n_layers, kv_dim] */
    *p = (RxKvPool){.n_pages = n_pages, .page_size = page_size, .n_layers = n_layers, .kv_dim = kv_dim,
                    .k = floats ? (float *)rx_alloc(floats * sizeof(float), "the KV pool's K") : NULL,
                    .v = floats ? (float *)rx_alloc(floats * sizeof(float), "the KV pool's V") : NULL,
                    .ref = (int32_t *)calloc((size_t)n_pages, sizeof(int32_t)),
                    .free_list = (int32_t *)rx_alloc((size_t)n_pages * sizeof(int32_t), "the KV pool's free list"),
                    .n_free = n_pages};                                  /* every page free, once the list is filled */
    if (!p->ref || !p->free_list || (floats && (!p->k || !p->v))) {
        rx_kv_pool_free(p);
        return rx_fail("out of host memory for a KV pool of %d pages x %d tokens", n_pages, page_size);
    }
    for (int i = 0; i < n_pages; i++) p->free_list[i] = n_pages - 1 - i;    /* a stack: page 0 is handed out first */
    return 0;
}

void rx_kv_pool_free(RxKvPool *p) {
    FREE_ALL(p->k, p->v, p->ref, p->free_list);
    memset(p, 0, sizeof *p);
}

int rx_kv_page_alloc(RxKvPool *p) {
    if (p->n_free == 0) return -1;
    int32_t page = p->free_list[--p->n_free];
    p->ref[page] = 1;
    return page;
}

void rx_kv_page_retain(RxKvPool *p, int32_t page) { p->ref[page]++; }

void rx_kv_page_release(RxKvPool *p, int32_t page) {
    if (--p->ref[page] == 0) p->free_list[p->n_free++] = page;
}

/* -------------------------------------------------------------------------------- part ii: the radix prefix cache */
/* A radix tree whose edges hold runs of whole pages: an edge of k pages holds k * page_size tokens and their k page
 * ids. Siblings differ in their first page, so a child is found by its first page of tokens. Only whole pages
 * are cached (a page is the unit of K/V the pool hands out), so two prompts that part in the middle of a page share
 * only the pages before it, and every split falls on a page boundary:
 *
 *   before: root -- [a a | b b | c c]  pages 4 5 6          insert [a a | b b | d d] with pages 9 8 7:
 *   after:  root -- [a a | b b]  pages 4 5                  the old edge is cut after 2 pages (no K/V moves),
 *                     |-- [c c]  page 6                     the new tail hangs below the cut; pages 9 and 8
 *                     `-- [d d]  page 7                     duplicate 4 and 5: the cache does not adopt them
 *
 * One root per model id: K/V computed by one model is never offered to another. A running request locks every
 * node on its path (lock += 1), and eviction takes only unlocked leaves, least recently used first; a parent left
 * an unlocked leaf goes next (cascade), so a shared trunk outlives its branches. Nodes live in one array and link by
 * index (parent; first child, next and previous sibling); free slots are chained through `sibling`.
 *
 * A walk finds a child by hashing (its parent, its first page) into c->bucket (chains through hnext), as SGLang keeps
 * a dict of children per node: a scan of the children cost a comparison per child, and the root gets one for every
 * prompt whose first page is new, so serving n of them cost n^2 (lpm's window: 128 times that). The child lists
 * serve what visits every child: eviction's leaf test, the audit and the drawing. */
typedef struct {
    int32_t parent, child, sibling;  /* tree links by index, -1: none                                          */
    int32_t prev, hnext;             /* the previous sibling, the next node in its hash bucket; -1: none        */
    int32_t n_pages;                 /* edge length in pages; 0 for a root                                     */
    int32_t *tokens;                 /* [n_pages * page_size] the edge's tokens                                */
    int32_t *pages;                  /* [n_pages] where their K/V are in the pool                              */
    int32_t lock;                    /* running requests whose matched prefix runs through this node           */
    uint64_t last_use;               /* the cache's clock at the last match or insert through this node        */
    uint64_t model_id;               /* roots: the namespace                                                   */
    int used;
} RadixNode;

typedef struct {                     /* the flat cache's entry of one page, stored at the page's index          */
    uint64_t hash;                   /* hash(parent's hash, this page's tokens): the map key                    */
    uint64_t serial, parent_serial;  /* this entry's unique id and its parent's (0: the chain starts here)      */
    uint64_t model_id, last_use;
    int32_t parent_page;             /* the parent entry's page (valid while its serial matches)                */
    int32_t next;                    /* next entry in the same hash bucket, -1: end                             */
    int used;
} HashEntry;

struct RxPrefixCache {
    RxCacheKind kind;
    RxKvPool *pool;
    int P;                           /* page size in tokens                                                     */
    uint64_t clock;                  /* ticks at every match and insert: LRU order                              */
    long evicted_pages, compared_pages;          /* RxCacheStats' */
    int n_running;                   /* requests admitted and not yet released                                  */
    RadixNode *node; int32_t cap_nodes, free_node;                                 /* radix                     */
    HashEntry *entry; int32_t *entry_tokens; int32_t *bucket; uint64_t mask, serial; /* hash: [n_pages] entries,
                                                                                      [n_pages * P] tokens       */
};

static int page_equal(RxPrefixCache *c, const int32_t *a, const int32_t *b) {        /* one page [page_size] */
    c->compared_pages++;
    return !memcmp(a, b, (size_t)c->P * sizeof(int32_t));
}

static uint64_t hash_mix(uint64_t x) { return rx_rand(&x); }   /* one splitmix64 step from state x */

static uint64_t hash_page(uint64_t parent_hash, const int32_t *tokens, int P) {
    uint64_t h = parent_hash;
    for (int i = 0; i < P; i++) h = hash_mix(h ^ (uint32_t)tokens[i]);
    return h;
}

/* The head of the bucket chain of (parent, page), and the link in it that is node id. */
static int32_t *radix_bucket(const RxPrefixCache *c, int32_t parent, const int32_t *page) {
    return &c->bucket[hash_page(hash_mix((uint64_t)parent), page, c->P) & c->mask];
}

static int32_t *radix_bucket_link(RxPrefixCache *c, int32_t id) {
    int32_t *link = radix_bucket(c, c->node[id].parent, c->node[id].tokens);
    while (*link != id) link = &c->node[*link].hnext;
    return link;
}

static int32_t *radix_sibling_link(RxPrefixCache *c, int32_t id) {     /* the link in its child list that is id */
    const RadixNode *x = &c->node[id];
    return x->prev >= 0 ? &c->node[x->prev].sibling : &c->node[x->parent].child;
}

/* The child of parent whose edge starts with page [page_size], or -1. */
static int32_t radix_child(RxPrefixCache *c, int32_t parent, const int32_t *page) {
    int32_t ch = *radix_bucket(c, parent, page);
    while (ch >= 0 && (c->node[ch].parent != parent || !page_equal(c, c->node[ch].tokens, page)))
        ch = c->node[ch].hnext;
    return ch;
}

static void radix_hash_in(RxPrefixCache *c, int32_t id) {       /* first in the bucket of its parent and page */
    int32_t *head = radix_bucket(c, c->node[id].parent, c->node[id].tokens);
    c->node[id].hnext = *head;
    *head = id;
}

/* Node id, whose parent is set, joins its parent's children (first: the drawing lists them from the last) and its
 * bucket. */
static void radix_link(RxPrefixCache *c, int32_t id) {
    RadixNode *x = &c->node[id];
    radix_hash_in(c, id);
    x->prev = -1;
    x->sibling = c->node[x->parent].child;
    if (x->sibling >= 0) c->node[x->sibling].prev = id;
    c->node[x->parent].child = id;
}

static void radix_unlink(RxPrefixCache *c, int32_t id) {        /* the reverse: out of the child list and bucket */
    RadixNode *x = &c->node[id];
    *radix_bucket_link(c, id) = x->hnext;
    *radix_sibling_link(c, id) = x->sibling;
    if (x->sibling >= 0) c->node[x->sibling].prev = x->prev;
}

/* Empty buckets (-1) for n keys, both caches' (table_cap); 0, or -1 with the old ones kept. */
static int buckets_new(RxPrefixCache *c, int64_t n) {
    int32_t *bucket = (int32_t *)rx_alloc(table_cap(n) * sizeof(int32_t), "a prefix cache's hash table");
    if (!bucket) return -1;
    free(c->bucket);
    c->bucket = bucket;
    c->mask = table_cap(n) - 1;
    for (uint64_t b = 0; b <= c->mask; b++) c->bucket[b] = -1;
    return 0;
}

/* Room for one more node: the array doubles, and the buckets with it (every child hashed again). */
static int radix_grow(RxPrefixCache *c) {
    int32_t cap = c->cap_nodes ? 2 * c->cap_nodes : 64;
    RadixNode *grown = (RadixNode *)realloc(c->node, (size_t)cap * sizeof(RadixNode));
    if (grown) c->node = grown;
    if (!grown || buckets_new(c, cap)) return rx_fail("out of host memory for the radix tree (%d nodes)", cap);
    for (int32_t i = 0; i < c->cap_nodes; i++)
        if (c->node[i].used && c->node[i].parent >= 0) radix_hash_in(c, i);
    for (int32_t i = cap - 1; i >= c->cap_nodes; i--) {         /* the new slots join the free chain */
        c->node[i].used = 0;
        c->node[i].sibling = c->free_node;
        c->free_node = i;
    }
    c->cap_nodes = cap;
    return 0;
}

/* A new node of n pages below parent (-1: a root, or a node radix_split places itself). */
static int32_t radix_new_node(RxPrefixCache *c, int32_t parent, const int32_t *tokens, const int32_t *pages, int n) {
    if (c->free_node < 0 && radix_grow(c)) return -1;
    int32_t id = c->free_node;
    RadixNode *x = &c->node[id];
    int32_t *tok = (int32_t *)malloc((size_t)n * c->P * sizeof(int32_t) + 1);   /* [n * page_size] */
    int32_t *pg = (int32_t *)malloc((size_t)n * sizeof(int32_t) + 1);            /* [n]             */
    if (!tok || !pg) {
        FREE_ALL(tok, pg);
        return rx_fail("out of host memory for a radix tree edge");
    }
    c->free_node = x->sibling;
    if (n) {
        memcpy(tok, tokens, (size_t)n * c->P * sizeof(int32_t));
        memcpy(pg, pages, (size_t)n * sizeof(int32_t));
    }
    *x = (RadixNode){parent, -1, -1, -1, -1, n, tok, pg, 0, c->clock, 0, 1};
    if (parent >= 0) radix_link(c, id);
    return id;
}

static int32_t radix_root(const RxPrefixCache *c, uint64_t model_id) {     /* -1: the model has no root yet */
    for (int32_t i = 0; i < c->cap_nodes; i++)
        if (c->node[i].used && c->node[i].parent < 0 && c->node[i].model_id == model_id) return i;
    return -1;
}

/* Walks whole pages of tokens[0 .. n_pages * P) down from root. Returns the deepest node whose whole edge matched;
 * *matched: pages matched up to it; *stop, *stop_pages: the child where the match ended mid-edge and how many of
 * its pages matched (-1, 0: none). */
static int32_t radix_walk(RxPrefixCache *c, int32_t root, const int32_t *tokens, int n_pages, int *matched,
                          int32_t *stop, int *stop_pages) {
    int32_t at = root, ch;
    int m = 0, P = c->P;
    *stop = -1;
    *stop_pages = 0;
    while (m < n_pages && (ch = radix_child(c, at, tokens + (size_t)m * P)) >= 0) {   /* the child: page m */
        const RadixNode *x = &c->node[ch];
        int k = 1;
        while (k < x->n_pages && m + k < n_pages &&
               page_equal(c, x->tokens + (size_t)k * P, tokens + (size_t)(m + k) * P)) k++;
        if (k < x->n_pages) { *stop = ch; *stop_pages = k; break; }
        at = ch;
        m += k;
    }
    *matched = m;
    return at;
}

/* Cuts node id's edge after k pages: a new node takes the first k pages (and id's place under the parent), id keeps
 * the rest below it. The new node inherits id's lock: every request through id runs through it too. */
static int32_t radix_split(RxPrefixCache *c, int32_t id, int k) {
    int32_t mid = radix_new_node(c, -1, c->node[id].tokens, c->node[id].pages, k);
    if (mid < 0) return -1;
    RadixNode *x = &c->node[id], *m = &c->node[mid];
    m->parent = x->parent;              /* mid takes id's place: the same parent and first page, so the same bucket */
    m->prev = x->prev;
    m->sibling = x->sibling;
    m->hnext = x->hnext;
    *radix_bucket_link(c, id) = mid;
    *radix_sibling_link(c, id) = mid;
    if (x->sibling >= 0) c->node[x->sibling].prev = mid;
    m->lock = x->lock;
    m->last_use = x->last_use;
    x->parent = mid;
    x->n_pages -= k;
    memmove(x->tokens, x->tokens + (size_t)k * c->P, (size_t)x->n_pages * c->P * sizeof(int32_t));
    memmove(x->pages, x->pages + k, (size_t)x->n_pages * sizeof(int32_t));
    radix_link(c, id);                  /* mid's one child, hashed by its new first page */
    return mid;
}

/* The walk from the model's root (made if it has none), splitting where it ends mid-edge, so the matched prefix ends
 * exactly at a node. -1: out of memory. */
static int32_t radix_walk_split(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n_pages, int *matched) {
    int32_t root = radix_root(c, model_id), stop;
    int stop_pages;
    if (root < 0 && (root = radix_new_node(c, -1, NULL, NULL, 0)) >= 0) c->node[root].model_id = model_id;
    if (root < 0) return -1;
    int32_t at = radix_walk(c, root, tokens, n_pages, matched, &stop, &stop_pages);
    if (stop < 0) return at;
    *matched += stop_pages;
    return radix_split(c, stop, stop_pages);
}

static void radix_touch(RxPrefixCache *c, int32_t id, int lock_delta) {   /* the path id..root: LRU and locks */
    c->clock++;
    for (; id >= 0; id = c->node[id].parent) {
        c->node[id].last_use = c->clock;
        c->node[id].lock += lock_delta;
    }
}

static int radix_insert(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n_pages, const int32_t *pages) {
    int m = 0;
    int32_t at = radix_walk_split(c, model_id, tokens, n_pages, &m);
    if (at < 0) return -1;
    if (m < n_pages) {                                           /* the unmatched tail becomes one new leaf */
        if ((at = radix_new_node(c, at, tokens + (size_t)m * c->P, pages + m, n_pages - m)) < 0) return -1;
        for (int j = m; j < n_pages; j++) rx_kv_page_retain(c->pool, pages[j]);
    }
    radix_touch(c, at, 0);
    return n_pages - m;
}

static void radix_drop(RxPrefixCache *c, int32_t id) {          /* an unlinked node: pages back, slot freed */
    RadixNode *x = &c->node[id];
    for (int j = 0; j < x->n_pages; j++) rx_kv_page_release(c->pool, x->pages[j]);
    c->evicted_pages += x->n_pages;
    FREE_ALL(x->tokens, x->pages);
    x->used = 0;
    x->sibling = c->free_node;
    c->free_node = id;
}

/* Evicts the least recently used unlocked leaf, then each parent it leaves an unlocked leaf. 0: nothing to evict. */
static int radix_evict_one(RxPrefixCache *c) {
    int32_t victim = -1;
    for (int32_t i = 0; i < c->cap_nodes; i++) {
        const RadixNode *x = &c->node[i];
        if (x->used && x->parent >= 0 && x->child < 0 && x->lock == 0 &&
            (victim < 0 || x->last_use < c->node[victim].last_use)) victim = i;
    }
    if (victim < 0) return 0;
    while (victim >= 0 && c->node[victim].parent >= 0 && c->node[victim].child < 0 && c->node[victim].lock == 0) {
        int32_t parent = c->node[victim].parent;
        radix_unlink(c, victim);
        radix_drop(c, victim);
        victim = parent;
    }
    return 1;
}

/* ----------------------------------------------------------------------------- part ii: the flat hash-chain cache */
/* The baseline the radix tree is measured against, a flat hash-chain prefix cache as in vLLM's automatic prefix
 * caching: no tree, a flat map from hash(parent's hash, page tokens) to the page holding that page's K/V. A lookup
 * re-walks the chain from the first page, hashing each page with its parent's hash, and stops at the first miss. A
 * hash is not an identity: each entry keeps its page's tokens and its parent's serial number, and a lookup accepts an
 * entry only when both match, so a collision can never hand out wrong K/V.
 *
 * Eviction is LRU over single pages, blind to the chain: lookups touch pages first to last, so the first page of a
 * chain is the oldest, and evicting it orphans every page after it (still cached, holding memory, unreachable):
 *
 *   [sys 0] -> [sys 1] -> [q A]       evict [sys 0]:     (gone)   [sys 1]  [q A]      orphans, until LRU gets them
 *                      -> [q B]                                            [q B]
 * An orphan stays unreachable even when its parent is computed again: the new parent entry has a new serial. That
 * costs some reuse and buys exactness: no parent is ever trusted by its hash alone. Entries whose page a running
 * request also holds are skipped by eviction: evicting them would free nothing. */
/* Walks the chain over whole pages of tokens[0 .. n_pages * P): the pages matched, their ids into pages[] or NULL. */
static int hash_walk(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n_pages, int32_t *pages) {
    uint64_t h = hash_mix(model_id), serial = 0;                   /* the root's hash: the model's namespace */
    int j = 0;
    for (; j < n_pages; j++) {
        const int32_t *page = tokens + (size_t)j * c->P;
        uint64_t key = hash_page(h, page, c->P);
        int32_t p = c->bucket[key & c->mask];
        for (; p >= 0; p = c->entry[p].next) {           /* page j's entry: hash, model, parent and tokens all equal */
            const HashEntry *e = &c->entry[p];
            if (e->hash == key && e->model_id == model_id && e->parent_serial == serial &&
                page_equal(c, c->entry_tokens + (size_t)p * c->P, page)) break;
        }
        if (p < 0) break;
        if (pages) pages[j] = p;
        h = key;
        serial = c->entry[p].serial;
    }
    return j;
}

static void hash_touch(RxPrefixCache *c, const int32_t *pages, int n) {     /* first to last: the first is oldest */
    for (int j = 0; j < n; j++) c->entry[pages[j]].last_use = ++c->clock;
}

static int hash_insert(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n_pages, const int32_t *pages) {
    int32_t *hit = (int32_t *)rx_alloc((size_t)n_pages * sizeof(int32_t), "a hash cache walk");
    if (!hit) return -1;
    int m = hash_walk(c, model_id, tokens, n_pages, hit), adopted = 0;
    hash_touch(c, hit, m);
    int32_t parent = m ? hit[m - 1] : -1;                          /* the chain goes on from where the walk stopped */
    uint64_t h = m ? c->entry[parent].hash : hash_mix(model_id), serial = m ? c->entry[parent].serial : 0;
    for (int j = m; j < n_pages && !c->entry[pages[j]].used; j++, adopted++) {
        int32_t p = pages[j];
        uint64_t key = hash_page(h, tokens + (size_t)j * c->P, c->P);
        c->entry[p] = (HashEntry){key, ++c->serial, serial, model_id, ++c->clock, parent, c->bucket[key & c->mask], 1};
        c->bucket[key & c->mask] = p;
        memcpy(c->entry_tokens + (size_t)p * c->P, tokens + (size_t)j * c->P, (size_t)c->P * sizeof(int32_t));
        rx_kv_page_retain(c->pool, p);
        h = key;
        serial = c->entry[p].serial;
        parent = p;
    }
    free(hit);
    return adopted;
}

static int hash_reachable(const RxPrefixCache *c, int32_t p) {  /* every entry up its chain is still the same one */
    while (c->entry[p].parent_serial) {
        int32_t q = c->entry[p].parent_page;
        if (!c->entry[q].used || c->entry[q].serial != c->entry[p].parent_serial) return 0;
        p = q;
    }
    return 1;
}

static int hash_evict_one(RxPrefixCache *c) {
    int32_t victim = -1;
    for (int32_t p = 0; p < c->pool->n_pages; p++)
        if (c->entry[p].used && c->pool->ref[p] == 1 &&
            (victim < 0 || c->entry[p].last_use < c->entry[victim].last_use)) victim = p;
    if (victim < 0) return 0;
    int32_t *link = &c->bucket[c->entry[victim].hash & c->mask];
    while (*link != victim) link = &c->entry[*link].next;
    *link = c->entry[victim].next;
    c->entry[victim].used = 0;
    rx_kv_page_release(c->pool, victim);
    c->evicted_pages++;
    return 1;
}

/* ------------------------------------------------------------ part ii: the cache's interface and a request's life */
const char *rx_cache_kind_name(RxCacheKind kind) {
    static const char *names[] = {"off", "radix", "hash"};
    return kind >= RX_CACHE_OFF && kind <= RX_CACHE_HASH ? names[kind] : "?";
}

int rx_cache_kind_parse(const char *s, RxCacheKind *kind) {
    for (int k = RX_CACHE_OFF; k <= RX_CACHE_HASH; k++)
        if (!strcmp(s, rx_cache_kind_name((RxCacheKind)k))) { *kind = (RxCacheKind)k; return 0; }
    return rx_fail("unknown prefix cache '%s' (use radix, hash or off)", s);
}

int rx_cache_create(RxPrefixCache **out, RxCacheKind kind, RxKvPool *pool) {
    *out = NULL;
    if (kind < RX_CACHE_OFF || kind > RX_CACHE_HASH) return rx_fail("unknown prefix cache kind %d", (int)kind);
    RxPrefixCache *c = (RxPrefixCache *)calloc(1, sizeof *c);
    if (!c) return rx_fail("out of host memory for the prefix cache");
    c->kind = kind;
    c->pool = pool;
    c->P = pool->page_size;
    c->free_node = -1;
    if (kind == RX_CACHE_HASH) {
        c->entry = (HashEntry *)calloc((size_t)pool->n_pages, sizeof(HashEntry));
        c->entry_tokens = (int32_t *)rx_alloc((size_t)pool->n_pages * c->P * sizeof(int32_t), "the hash cache");
        if (!c->entry || !c->entry_tokens || buckets_new(c, pool->n_pages)) {
            rx_cache_free(c);
            return rx_fail("out of host memory for the hash cache");
        }
    }
    *out = c;
    return 0;
}

void rx_cache_free(RxPrefixCache *c) {
    if (!c) return;
    for (int32_t i = 0; i < c->cap_nodes; i++)
        if (c->node[i].used) radix_drop(c, i);                  /* its pages back to the pool */
    for (int32_t p = 0; c->entry && p < c->pool->n_pages; p++)
        if (c->entry[p].used) rx_kv_page_release(c->pool, p);
    FREE_ALL(c->node, c->entry, c->entry_tokens, c->bucket, c);
}

int rx_cache_lookup(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n, int32_t *pages_out) {
    int n_pages = n > 0 ? n / c->P : 0, m = 0;
    if (c->kind == RX_CACHE_HASH) m = hash_walk(c, model_id, tokens, n_pages, pages_out);
    else if (c->kind == RX_CACHE_RADIX) {
        int32_t root = radix_root(c, model_id), stop;
        int stop_pages;
        if (root < 0) return 0;
        int32_t at = radix_walk(c, root, tokens, n_pages, &m, &stop, &stop_pages);
        for (int depth = m; pages_out && at >= 0; at = c->node[at].parent) {    /* the page ids of root..at, in order */
            depth -= c->node[at].n_pages;
            memcpy(pages_out + depth, c->node[at].pages, (size_t)c->node[at].n_pages * sizeof(int32_t));
        }
        if (pages_out && stop >= 0) memcpy(pages_out + m, c->node[stop].pages, (size_t)stop_pages * sizeof(int32_t));
        m += stop_pages;
    }
    return m * c->P;
}

int rx_cache_insert(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n, const int32_t *pages) {
    int n_pages = n > 0 ? n / c->P : 0;
    if (n_pages == 0 || c->kind == RX_CACHE_OFF) return 0;
    return c->kind == RX_CACHE_HASH ? hash_insert(c, model_id, tokens, n_pages, pages)
                                    : radix_insert(c, model_id, tokens, n_pages, pages);
}

int rx_cache_evict(RxPrefixCache *c, int n_free) {
    while (c->pool->n_free < n_free &&
           (c->kind == RX_CACHE_HASH ? hash_evict_one(c) : c->kind == RX_CACHE_RADIX ? radix_evict_one(c) : 0)) {}
    return c->pool->n_free;
}

static void draw_page_run(FILE *out, const int32_t *tokens, const int32_t *pages, int n_pages, int P) {
    fprintf(out, "[");
    for (int j = 0; j < n_pages && j < 3; j++)
        for (int i = 0; i < P; i++) fprintf(out, "%s%d", i ? " " : j ? " | " : "", tokens[(size_t)j * P + i]);
    fprintf(out, "%s]  page%s", n_pages > 3 ? " | ..." : "", n_pages > 1 ? "s" : "");
    for (int j = 0; j < n_pages; j++) fprintf(out, " %d", pages[j]);
}

static int32_t radix_node_line(FILE *out, const void *ctx, int32_t id) {      /* rx_cache_draw's line */
    const RxPrefixCache *c = (const RxPrefixCache *)ctx;
    draw_page_run(out, c->node[id].tokens, c->node[id].pages, c->node[id].n_pages, c->P);
    fprintf(out, "  lock %d\n", c->node[id].lock);
    return id;
}

void rx_cache_draw(FILE *out, const RxPrefixCache *c) {
    if (c->kind == RX_CACHE_OFF) { fprintf(out, "(no prefix cache)\n"); return; }
    if (c->kind == RX_CACHE_HASH) {
        for (int32_t p = 0; p < c->pool->n_pages; p++) {
            const HashEntry *e = &c->entry[p];
            if (!e->used) continue;
            fprintf(out, "model %llu ", (unsigned long long)e->model_id);
            draw_page_run(out, c->entry_tokens + (size_t)p * c->P, &p, 1, c->P);
            if (e->parent_serial) fprintf(out, "  after page %d", e->parent_page);
            fprintf(out, "%s\n", hash_reachable(c, p) ? "" : "  (orphan)");
        }
        return;
    }
    int32_t *first = (int32_t *)malloc((size_t)c->cap_nodes * 2 * sizeof(int32_t) + 1), *next = first + c->cap_nodes;
    if (!first) { fprintf(out, "(out of memory drawing the cache)\n"); return; }
    for (int32_t i = 0; i < c->cap_nodes; i++) first[i] = -1;
    for (int32_t p = 0; p < c->cap_nodes; p++)                  /* each child list reversed: the oldest first */
        for (int32_t ch = c->node[p].used ? c->node[p].child : -1; ch >= 0; ch = c->node[ch].sibling) {
            next[ch] = first[p];
            first[p] = ch;
        }
    for (int32_t r = 0; r < c->cap_nodes; r++)                  /* each root, one tree per model */
        if (c->node[r].used && c->node[r].parent < 0) {
            fprintf(out, "model %llu\n", (unsigned long long)c->node[r].model_id);
            draw_tree(out, first, next, r, c->cap_nodes, radix_node_line, c);
        }
    free(first);
}

int rx_cache_audit(const RxPrefixCache *c, RxCacheStats *s) {
    const RxKvPool *pool = c->pool;
    memset(s, 0, sizeof *s);
    s->kind = c->kind;
    s->evicted_pages = c->evicted_pages;
    s->compared_pages = c->compared_pages;
    int32_t *cache_ref = (int32_t *)calloc((size_t)pool->n_pages, sizeof(int32_t));        /* [n_pages] */
    int32_t *on_free_list = (int32_t *)calloc((size_t)pool->n_pages, sizeof(int32_t));    /* [n_pages] */
    int rc = -1;
    if (!cache_ref || !on_free_list) { rx_fail("out of host memory auditing the cache"); goto done; }
    for (int32_t i = 0; i < c->cap_nodes; i++) {
        const RadixNode *x = &c->node[i];
        if (!x->used || x->parent < 0) continue;
        s->nodes++;
        int child_locks = 0;
        for (int32_t ch = x->child; ch >= 0; ch = c->node[ch].sibling) child_locks += c->node[ch].lock;
        if (x->lock < child_locks) {
            rx_fail("radix node %d has lock %d below its children's %d", i, x->lock, child_locks);
            goto done;
        }
        if (x->n_pages < 1) { rx_fail("radix node %d has an empty edge", i); goto done; }
        for (int j = 0; j < x->n_pages; j++) cache_ref[x->pages[j]]++;
    }
    for (int32_t p = 0; c->entry && p < pool->n_pages; p++)
        if (c->entry[p].used) { s->nodes++; cache_ref[p]++; s->orphans += !hash_reachable(c, p); }
    for (int i = 0; i < pool->n_free; i++) {
        int32_t p = pool->free_list[i];
        if (p < 0 || p >= pool->n_pages) { rx_fail("free list entry %d is page %d: out of range", i, p); goto done; }
        on_free_list[p]++;
    }
    for (int32_t p = 0; p < pool->n_pages; p++) {      /* cached at most once, on the free list once if ref is 0 */
        if (cache_ref[p] > 1 || pool->ref[p] < cache_ref[p] || on_free_list[p] != (pool->ref[p] == 0)) {
            rx_fail("page %d has ref %d, is cached %d times and is on the free list %d times", p, pool->ref[p],
                    cache_ref[p], on_free_list[p]);
            goto done;
        }
        s->cached_pages += cache_ref[p] > 0;
        s->request_pages += pool->ref[p] > cache_ref[p];
    }
    rc = 0;
done:
    FREE_ALL(cache_ref, on_free_list);
    return rc;
}

void rx_request_init(RxRequest *r, const int32_t *tokens, int len, uint64_t model_id) {
    *r = (RxRequest){.tokens = tokens, .len = len, .model_id = model_id, .state = RX_REQ_WAITING, .cached_len = 0,
                     .kv_len = 0, .pages = NULL, .n_pages = 0, .prefix_key = -1, .lock_node = -1};
}

/* Undoes an admission: the lock and every page reference the request holds. */
static void request_release(RxPrefixCache *c, RxRequest *r) {
    if (r->lock_node >= 0) radix_touch(c, r->lock_node, -1);
    for (int j = 0; j < r->n_pages; j++)
        if (r->pages[j] >= 0) rx_kv_page_release(c->pool, r->pages[j]);
    free(r->pages);
    r->pages = NULL;
    r->n_pages = 0;
    r->cached_len = 0;
    r->prefix_key = -1;
    r->lock_node = -1;
    c->n_running--;
}

int rx_request_admit(RxPrefixCache *c, RxRequest *r) {
    int P = c->P;
    if (r->state != RX_REQ_WAITING) return rx_fail("rx_request_admit: the request is not waiting (state %d)", r->state);
    if (r->len < 1) return rx_fail("rx_request_admit: a request needs at least one token");
    int need = (r->len + P - 1) / P;                             /* pages for the whole prompt */
    if (need > c->pool->n_pages)
        return rx_fail("a request of %d tokens needs %d pages of %d tokens, but the KV pool has only %d pages", r->len,
                       need, P, c->pool->n_pages);
    if (!(r->pages = (int32_t *)rx_alloc((size_t)need * sizeof(int32_t), "a page table"))) return -1;
    for (int j = 0; j < need; j++) r->pages[j] = -1;
    r->n_pages = need;
    c->n_running++;
    int m = rx_cache_lookup(c, r->model_id, r->tokens, r->len - 1, r->pages) / P;    /* the pages matched */
    for (int j = 0; j < m; j++) rx_kv_page_retain(c->pool, r->pages[j]);   /* the request's own reference */
    if (c->kind == RX_CACHE_HASH) hash_touch(c, r->pages, m);
    if (c->kind == RX_CACHE_RADIX && m > 0) {
        int32_t at = radix_walk_split(c, r->model_id, r->tokens, m, &m);     /* the match now ends at a node, */
        if (at < 0) { request_release(c, r); return -1; }
        radix_touch(c, at, +1);                                               /* whose path root..at we lock  */
        r->lock_node = at;
    }
    for (int j = m; j < need; j++) {
        if (c->pool->n_free == 0) rx_cache_evict(c, need - j);
        if ((r->pages[j] = rx_kv_page_alloc(c->pool)) < 0) {
            request_release(c, r);
            if (c->n_running == 0)                               /* cannot happen: need <= n_pages, all evictable */
                return rx_fail("the KV pool of %d pages cannot make room for %d pages", c->pool->n_pages, need);
            return 1;                                            /* running requests hold the rest: wait */
        }
    }
    r->cached_len = m * P;
    r->kv_len = m * P;
    r->prefix_key = m ? r->pages[m - 1] : -1;
    r->state = RX_REQ_RUNNING;
    return 0;
}

int rx_request_grow(RxPrefixCache *c, RxRequest *r, int len) {
    int need = (len + c->P - 1) / c->P;
    if (need <= r->n_pages) return 0;
    int32_t *grown = (int32_t *)realloc(r->pages, (size_t)need * sizeof(int32_t));
    if (!grown) return rx_fail("out of host memory for a page table of %d pages", need);
    r->pages = grown;
    for (; r->n_pages < need; r->n_pages++) {
        if (c->pool->n_free == 0) rx_cache_evict(c, need - r->n_pages);
        if ((r->pages[r->n_pages] = rx_kv_page_alloc(c->pool)) < 0) return 1;
    }
    return 0;
}

int rx_request_cache(RxPrefixCache *c, RxRequest *r) {
    int n_pages = r->kv_len / c->P, m;
    if (rx_cache_insert(c, r->model_id, r->tokens, r->kv_len, r->pages) < 0) return -1;
    if (c->kind != RX_CACHE_RADIX || n_pages == 0) return 0;
    int32_t at = radix_walk_split(c, r->model_id, r->tokens, n_pages, &m);  /* the node its cached pages end at */
    if (at < 0) return -1;
    radix_touch(c, at, +1);                              /* lock the path to it, then let go of the old one: */
    if (r->lock_node >= 0) radix_touch(c, r->lock_node, -1);   /* a prefix of it (the same tokens)          */
    r->lock_node = at;
    return 0;
}

int rx_request_finish(RxPrefixCache *c, RxRequest *r) {
    if (r->state != RX_REQ_RUNNING)
        return rx_fail("rx_request_finish: the request is not running (state %d)", r->state);
    int rc = rx_cache_insert(c, r->model_id, r->tokens, r->len, r->pages) < 0 ? -1 : 0;
    request_release(c, r);
    r->state = RX_REQ_FINISHED;
    return rc;
}

void rx_request_abort(RxPrefixCache *c, RxRequest *r) {
    if (r->state == RX_REQ_RUNNING) request_release(c, r);
    r->state = RX_REQ_ABORTED;
}

/* ------------------------------- part ii: prefill on a cached prefix: the keyed trie, the layout, the c reference */
/* The forward's side of Part II: a request whose prompt begins with a cached page-aligned prefix prefills only the
 * rest, with Part I's steps. One thing changes: where attention reads its keys. Each layer writes the new K/V into
 * the request's own pages, then attention reads every key, cached or new, through one index (a KvView over the pool,
 * Layout's kv_row): the slot of each (sequence, position), found through its page table:
 *
 *   request s:  | cached_len[s] tokens: K/V in the pool | L_s new tokens: this batch |
 *   pages[s]:   [ p7 ][ p2 ][ p9 ]                      [ p4 ][ p5 ]                 (page_size tokens each)
 *                shared, read only                       its own: the new K/V are written here
 *
 * Composition with RadixMLP: the trie over the new tokens is keyed by (prefix_key, token, position), so two requests
 * that continue the same cached prefix with the same tokens share compact rows, and the same tokens after different
 * prefixes (different histories) never merge, even at equal positions. Bit for bit a full recomputation: a cached
 * slot holds the K/V an earlier forward computed for the same history with the same row arithmetic, and attention
 * visits positions 0..g in the same order.
 *
 * Part II adds three steps here and calls Part I's unchanged: its own entry to the trie (radix_index_build_keyed,
 * over its own trie_build_rooted), its own layout (layout_build_prefill: layout_rows, then attention's half over
 * the wider T), and the store of the new K/V into their slots (kv_store_ref; gpu_kv_store on the GPU, with its own
 * kernel, kv_store_kernel). */

/* Algorithm 2 below several roots, Part II's own trie: sequence s starts at root[s], a number in 0 .. n_roots-1,
 * numbered N + root[s] among the trie's parents (after Part I's N nodes; Part I's one root is N + 0). It calls Part
 * I's steps: refinement 2's start check (trie_seen_start), then trie_insert from each sequence's root. Sequences
 * below different roots share no node. */
static int trie_build_rooted(RadixIndex *ix, const int32_t *ids, const int32_t *pos, const int32_t *cu, int n_seqs,
                             const int32_t *root, int n_roots) {
    const int n = n_seqs ? cu[n_seqs] : 0;                             /* N */
    if (n == 0) return 0;
    if (trie_index_alloc(ix, n)) return -1;
    const int refine = rx_fast();                                      /* as trie_build */
    uint64_t mask = 0;
    TrieEntry *starts = refine ? trie_table(n_seqs, &mask) : NULL;
    int shared = !refine ? 1 : starts ? 0 : -1;
    for (int s = 0; s < n_seqs && shared == 0; s++)
        if (cu[s] < cu[s + 1]) shared = trie_seen_start(starts, mask, n + root[s], ids, pos, cu[s], s);
    free(starts);
    if (shared == 0) {
        trie_identity(ix);
        return 0;
    }
    Trie tr;
    if (shared < 0 || trie_open(&tr, ids, pos, ix->gather, n, n + n_roots, refine)) {
        radix_index_free(ix);
        return rx_fail("radix_index_build: out of host memory");
    }
    int32_t n_compact = 0;                                             /* N' so far, the next compact row */
    for (int s = 0; s < n_seqs; s++) trie_insert(&tr, n + root[s], cu[s], cu[s + 1], ix->scatter, &n_compact);
    ix->n_compact = n_compact;
    trie_close(&tr);
    return 0;
}

/* Part II's entry to the trie. With a KV cache something precedes a sequence: its cached prefix, which the batch
 * does not hold. root_key[s] names it (-1: nothing cached), and each distinct key gets a root of its own
 * (trie_build_rooted): sequences with equal keys merge as in Part I, sequences with different keys never meet. */
int radix_index_build_keyed(RadixIndex *ix, const int32_t *input_ids, const int32_t *position_ids,
                            const int32_t *cu_seqlens, int n_seqs, const int32_t *root_key) {
    if (!root_key) return radix_index_build(ix, input_ids, position_ids, cu_seqlens, n_seqs);
    memset(ix, 0, sizeof *ix);
    if (ragged_check("radix_index_build", input_ids, position_ids, cu_seqlens, n_seqs, -1)) return -1;
    for (int s = 0; s < n_seqs; s++)
        if (root_key[s] < -1)
            return rx_fail("radix_index_build: root key %d of sequence %d; keys are >= 0, or -1 for none",
                           root_key[s], s);
    int32_t *root = (int32_t *)malloc(((size_t)n_seqs + 1) * sizeof(int32_t));    /* [S] each sequence's root */
    uint64_t mask;
    TrieEntry *roots = trie_table(n_seqs, &mask);                                   /* key -> its root + 1 */
    if (!root || !roots) {
        FREE_ALL(root, roots);
        return rx_fail("radix_index_build: out of host memory");
    }
    int n_roots = 0;
    for (int s = 0; s < n_seqs; s++) {                  /* roots numbered in order of first appearance */
        uint64_t key = (uint32_t)root_key[s];           /* -1 -> 0xffffffff, no key >= 0's */
        TrieEntry *slot = table_entry(roots, mask, 0, key);
        if (!slot->node_plus_1) {
            slot->key = key;
            slot->node_plus_1 = ++n_roots;
        }
        root[s] = slot->node_plus_1 - 1;
    }
    free(roots);
    int rc = trie_build_rooted(ix, input_ids, position_ids, cu_seqlens, n_seqs, root, n_roots);
    free(root);
    return rc;
}

/* What Part II's layout adds to Part I's: attention's token space T, each sequence's cached positions, then its new
 * ones, so that a query sees its cached prefix's keys too. Every key, cached or new, is read from its slot in the
 * pool: the Layout's seq_start and kv_row span T here (Part I's span N), and q_tok points into T. */
typedef struct {
    int T;                   /* attention's tokens: every cached and new position                                */
    int32_t *cu_k;           /* [S+1] each sequence's keys in T (the flash kernel's layout)                       */
    int32_t *kv_dst;         /* [N] the slot each new token's K and V are written to                              */
} PrefillKeys;

static void prefill_keys_free(PrefillKeys *k) {
    FREE_ALL(k->cu_k, k->kv_dst);
    memset(k, 0, sizeof *k);
}

/* Part II's layout: Part I's rows (layout_rows) on the keyed trie, and attention's half over T (PrefillKeys). pf
 * is checked (prefill_check). The caller frees L and K, whatever this returns. */
static int layout_build_prefill(Layout *L, PrefillKeys *K, const RxBatch *b, const RxPrefill *pf, RxMode mode) {
    const int N = b->n_tokens, S = b->n_seqs;
    const int P = pf->pool->page_size;
    const int32_t *cu = b->cu_seqlens;
    memset(L, 0, sizeof *L);
    memset(K, 0, sizeof *K);
    int64_t T = N;
    for (int s = 0; s < S; s++) T += pf->cached_len[s];
    if (T > INT32_MAX) return rx_fail("prefill: %lld cached + new tokens are too many for one batch", (long long)T);
    if (mode != RX_BASELINE) {                                    /* Algorithm 2, keyed by the cached prefixes */
        double t0 = rx_now_ms();
        if (radix_index_build_keyed(&L->ix, b->input_ids, b->position_ids, cu, S, pf->prefix_key)) return -1;
        L->index_ms = rx_now_ms() - t0;
    }
    if (layout_rows(L, b, mode, RX_AUTO_THRESHOLD)) return -1;
    const int compact = L->mode == RX_COMPACT, n_q = compact ? L->R : N;
    K->T = (int)T;
    L->seq_start = ints(T);
    L->kv_row = ints(T);
    L->q_tok = ints(n_q);
    K->cu_k = ints(S + 1);
    K->kv_dst = ints(N);
    int32_t *at = ints(N);                                        /* [N] batch token i -> its token in T */
    if (!L->seq_start || !L->kv_row || !L->q_tok || !K->cu_k || !K->kv_dst || !at) {
        free(at);
        return rx_fail("out of host memory for the layout of %lld tokens", (long long)T);
    }
    K->cu_k[0] = 0;
    int t = 0;
    for (int s = 0; s < S; s++) {
        const int t0 = t;
        const int cached = pf->cached_len[s];
        for (int p = 0; p < cached + cu[s + 1] - cu[s]; p++) {    /* position p of sequence s */
            L->seq_start[t] = t0;
            L->kv_row[t] = pf->pages[s][p / P] * P + p % P;       /* its slot */
            t++;
        }
        K->cu_k[s + 1] = t;
        for (int i = cu[s]; i < cu[s + 1]; i++) at[i] = t0 + cached + (i - cu[s]);
    }
    for (int i = 0; i < N; i++) K->kv_dst[i] = L->kv_row[at[i]];
    for (int r = 0; r < n_q; r++) L->q_tok[r] = at[compact ? L->ix.gather[r] : r];
    free(at);
    return 0;
}

/* The new tokens' K and V into their slots: new token i's are compact row I_scatter[i] (row i in baseline mode). */
static void kv_store_ref(const KvView *kv, const Layout *L, const int32_t *kv_dst, const RefActs *a, int kv_dim) {
    for (int i = 0; i < L->N; i++) {
        size_t from = (size_t)(L->mode == RX_BASELINE ? i : L->ix.scatter[i]) * kv_dim;
        size_t to = (size_t)kv_dst[i] * kv->row_stride;
        memcpy((float *)kv->k + to, a->k + from, sizeof(float) * kv_dim);
        memcpy((float *)kv->v + to, a->v + from, sizeof(float) * kv_dim);
    }
}

/* Everything the prefill (qwen3_prefill_ref or gpu_prefill) trusts about pf, each failure one sentence. host_kv: the
 * K/V are in the host pool's arrays (the C reference), not in a GPU pool. */
static int prefill_check(const Qwen3Config *c, const RxBatch *b, const RxPrefill *pf, int host_kv) {
    const RxKvPool *p = pf ? pf->pool : NULL;
    if (!p || (host_kv && (!p->k || !p->v))) return rx_fail("prefill: no KV pool (pf, its pool or their K/V is NULL)");
    if (host_kv && (p->n_layers != c->n_layers || p->kv_dim != c->n_kv_heads * c->head_dim))
        return rx_fail("prefill: the KV pool holds %d layers x %d floats per token; the model needs %d x %d",
                       p->n_layers, p->kv_dim, c->n_layers, c->n_kv_heads * c->head_dim);
    if (!pf->cached_len || !pf->pages || !pf->prefix_key)
        return rx_fail("prefill: cached_len, pages or prefix_key is NULL");
    int P = p->page_size;
    for (int s = 0; s < b->n_seqs; s++) {
        int cached = pf->cached_len[s], L = b->cu_seqlens[s + 1] - b->cu_seqlens[s];
        if (cached < 0) return rx_fail("prefill: sequence %d: cached_len %d is negative", s, cached);
        for (int j = 0; j < L; j++)
            if (b->position_ids[b->cu_seqlens[s] + j] != cached + j)
                return rx_fail("prefill: sequence %d: new token %d is at position %d; after %d cached tokens it "
                               "must be at %d", s, j, b->position_ids[b->cu_seqlens[s] + j], cached, cached + j);
        if (!pf->pages[s]) return rx_fail("prefill: sequence %d has no page table", s);
        for (int j = 0; j < (cached + L + P - 1) / P; j++)
            if (pf->pages[s][j] < 0 || pf->pages[s][j] >= p->n_pages)
                return rx_fail("prefill: sequence %d: page table entry %d is page %d, outside the pool's %d pages",
                               s, j, pf->pages[s][j], p->n_pages);
        /* The key must name the cached prefix. The page of its last token does: its K/V depend on every token
         * before it. A decode step's history ends inside the request's own page, which no one else holds. */
        int32_t want = cached > 0 ? pf->pages[s][(cached - 1) / P] : -1;
        if (pf->prefix_key[s] != want)
            return rx_fail("prefill: sequence %d: prefix key %d; it must be the page of the last cached token, %d "
                           "(-1: none cached)", s, pf->prefix_key[s], want);
    }
    /* A page a sequence writes (its own, from cached_len on, the one holding both its last cached and first new
     * token included) is its alone: no other sequence writes or reads it. */
    int32_t *writer = (int32_t *)rx_alloc(sizeof(int32_t) * (size_t)p->n_pages, "the prefill's page owners");
    if (!writer) return -1;
    for (int i = 0; i < p->n_pages; i++) writer[i] = -1;
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++)         /* pass 0: claim the written pages; pass 1: check the reads */
        for (int s = 0; s < b->n_seqs && !rc; s++) {
            int first_own = pf->cached_len[s] / P;     /* pages [0, first_own) read only, [first_own, n) written */
            int n = (pf->cached_len[s] + b->cu_seqlens[s + 1] - b->cu_seqlens[s] + P - 1) / P;
            for (int j = pass ? 0 : first_own; j < (pass ? first_own : n) && !rc; j++) {
                int32_t pg = pf->pages[s][j];
                if (writer[pg] >= 0)
                    rc = rx_fail("prefill: page %d is written by sequence %d and also %s by sequence %d", pg,
                                 writer[pg], pass ? "read" : "written", s);
                else if (!pass)
                    writer[pg] = s;
            }
        }
    free(writer);
    return rc;
}

int qwen3_prefill_ref(const Qwen3Model *m, const RxBatch *b, const RxPrefill *pf, RxMode mode, float *last_logits,
                      int *n_compact_out) {
    const Qwen3Config *c = &m->cfg;
    if (rx_batch_check(b, c, NULL) || prefill_check(c, b, pf, 1)) return -1;
    if (last_logits && !m->lm_head) return no_lm_head();
    const int QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    const size_t stride = (size_t)c->n_layers * KVD;     /* a slot holds every layer: the pool is [slot, layer, kv] */
    Layout L;                                            /* seq_start, kv_row [T]: every cached and new position */
    PrefillKeys K;                                       /* T, and the new tokens' slots */
    RefActs a = {};
    int rc = -1;
    if (layout_build_prefill(&L, &K, b, pf, mode) || acts_alloc(&a, m, &L, 1, last_logits != NULL)) goto done;
    embed_ref(m, &L, &a);                                /* from here on as Part I's forward_ref, */
    rope_angles(a.rope_cos, a.rope_sin, L.pos, L.R, c->head_dim, c->rope_theta);
    for (int l = 0; l < c->n_layers; l++) {              /* except where the keys live            */
        layer_qkv_ref(m, l, &L, &a);
        scatter_q_ref(&L, &a, QD);                       /* radix mode's q; its keys are read from the pool instead */
        KvView kv = {.k = pf->pool->k + (size_t)l * KVD, .v = pf->pool->v + (size_t)l * KVD,
                     .row_stride = stride, .kv_row = L.kv_row};      /* k, v: layer l's slice of every slot */
        kv_store_ref(&kv, &L, K.kv_dst, &a, KVD);        /* the new K/V into their slots */
        if (layer_attn_mlp_ref(m, l, &L, &a, &kv)) goto done;
    }
    head_ref(m, &L, &a, 1, last_logits, NULL);
    if (n_compact_out) *n_compact_out = L.R;
    rc = 0;
done:
    acts_free(&a);
    layout_free(&L);
    prefill_keys_free(&K);
    return rc;
}

int rx_prefill_print(FILE *out, const RxBatch *suffixes, const RxPrefill *pf, int rows_computed) {
    RadixIndex ix;
    if (radix_index_build_keyed(&ix, suffixes->input_ids, suffixes->position_ids, suffixes->cu_seqlens,
                                suffixes->n_seqs, pf ? pf->prefix_key : NULL)) return -1;
    long cached = 0;
    for (int s = 0; pf && pf->cached_len && s < suffixes->n_seqs; s++) cached += pf->cached_len[s];
    fprintf(out, "prefill: %d sequence%s, %ld tokens = %ld cached + %d new (N); %d distinct new histories (N'); "
            "%d rows computed\n", suffixes->n_seqs, suffixes->n_seqs == 1 ? "" : "s", cached + suffixes->n_tokens,
            cached, suffixes->n_tokens, ix.n_compact, rows_computed);
    radix_index_free(&ix);
    return 0;
}

/* -------------------------------------------------------------------------------------- part ii: sampling a token */
/* Greedy is the argmax. Sampling, as transformers' warpers do it in this order: temperature, then top-k, then top-p
 * (the nucleus: the most likely tokens until their probability reaches p), then one draw. Each request draws from
 * its own generator, so its tokens do not depend on the batch it shares a step with, the schedule, the threads or
 * the CPU path (which give the same logits, bit for bit). */
uint64_t rx_sampler_seed(uint64_t seed, int request) { return hash_mix(seed ^ hash_mix((uint64_t)request + 1)); }

typedef struct { double p; int32_t id; } Candidate;
static int by_p_then_id(const void *a, const void *b) {
    const Candidate *x = (const Candidate *)a, *y = (const Candidate *)b;
    return x->p != y->p ? (y->p > x->p ? 1 : -1) : (x->id > y->id) - (x->id < y->id);
}

int32_t rx_sample(const float *z, int V, const RxGenerate *g, uint64_t *rng) {
    int32_t best = 0;                                            /* the lowest id of the largest logit */
    for (int32_t i = 1; i < V; i++)
        if (z[i] > z[best]) best = i;
    if (g->temperature == 0) return best;
    Candidate *c = (Candidate *)rx_alloc((size_t)V * sizeof *c, "the sampler's candidates [vocab]");
    if (!c) return -1;
    for (int32_t i = 0; i < V; i++) {                            /* unnormalised softmax(z / T), in double */
        c[i].id = i;
        c[i].p = exp(((double)z[i] - z[best]) / g->temperature);
    }
    qsort(c, (size_t)V, sizeof *c, by_p_then_id);
    int k = g->top_k > 0 && g->top_k < V ? g->top_k : V, n = 0;
    double sum = 0, kept = 0;
    for (int i = 0; i < k; i++) sum += c[i].p;
    while (n < k && (n == 0 || kept < g->top_p * sum)) kept += c[n++].p;     /* the nucleus: c[0..n) */
    double u = (double)(rx_rand(rng) >> 11) * 0x1p-53 * kept;                /* uniform in [0, kept) */
    int32_t tok = c[n - 1].id;
    for (int i = 0; i < n; i++)
        if ((u -= c[i].p) < 0) { tok = c[i].id; break; }
    free(c);
    return tok;
}

/* --------------------------------------------------------------------------- part ii: serving requests in batches */
/* A serving engine's scheduler loop, as SGLang's RadixAttention scheduler and nano-vllm run it, one forward a step:
 *
 *   step: grow     each running request's page table covers its tokens; when the pool runs dry, evict (LRU), then
 *                  preempt the newest running request (its pages freed; requeued first, to prefill again)
 *         admit    waiting requests, up to `batch` running, in arrival order (fcfs) or longest cached prefix first
 *                  (lpm: sorting by matched length visits the tree depth first, so a prefix is reused while it is
 *                  cached; only the queue's first RX_LPM_WINDOW requests, see lpm_window); the first one that
 *                  finds no room waits for the next step
 *         forward  one prefill (qwen3_prefill_ref, or gpu_prefill with o->gpu) of every running request's tokens
 *                  that have no K/V yet: a new request's uncached prompt, a decoding request's newest token
 *         sample   each request's next token from its logits; it finishes at max_new or an end-of-sequence token
 *
 * A decode step is a prefill of one token on the cached history, so the same forward serves both, and one step mixes
 * new prompts with running requests' single tokens (continuous batching). RadixMLP stays inside each step: two new
 * prompts after the same cached prefix merge; a decoding request's history ends in its own page, so its one token
 * is a row of its own (paper Sec. 5.2: in decoding "KV caching remains more suitable"). Whole pages of prompt and
 * generated tokens go into the cache at each page boundary and at the end (rx_request_cache), so a later turn that
 * repeats this conversation (@K) finds its answer cached too. At the end the pool is audited and the cache flushed. */
typedef struct { int32_t index, cached; } Waiting;     /* a waiting request and its cached prefix now (lpm) */

/* lpm's window. Sorting the whole queue by cached prefix every step costs a lookup per waiting request per step:
 * quadratic in the queue (docs/results.md). SGLang turns lpm off past 128 waiting requests (schedule_policy.py,
 * _determine_active_policy). Here lpm never turns off: it orders the first RX_LPM_WINDOW waiting requests whose
 * prompt is known (o->lpm_window, 0: this), and the rest wait behind them in arrival order. A step costs at most a
 * window of lookups, each a page or so per page it walks (radix_child), and one sort, whatever the queue's length; a
 * queue no longer than the window is ordered as the whole sort orders it (cache/lpm_window_keeps_decisions).
 * Admission reads the queue only up to where the batch is full, so fcfs too costs what a step admits. */
#define RX_LPM_WINDOW 128

static int by_cached_then_index(const void *a, const void *b) {
    const Waiting *x = (const Waiting *)a, *y = (const Waiting *)b;
    return x->cached != y->cached ? (y->cached > x->cached ? 1 : -1) : (x->index > y->index) - (x->index < y->index);
}

/* A request's conversation beside its RxRequest, whose tokens point into hist. */
typedef struct {
    int32_t *hist;                   /* [cap] the history: its prompt, then the tokens it generated             */
    uint8_t *generated;              /* [cap] 1 where hist holds a token some turn generated                    */
    int cap, prompt_len, n_gen;      /* prompt_len: 0 until the prompt is built (an @K turn: once K finishes)   */
    int state;                       /* 0 waiting or running, 1 finished, 2 refused                            */
    int admissions;                  /* 0 before its first; more after preemptions                             */
    uint64_t rng;                    /* its own generator: its tokens do not depend on who shares its steps   */
} Turn;

typedef struct {                     /* what the steps of one rx_serve share                                  */
    const RxServeOptions *o;
    RxPrefixCache *c;
    RxRequest *req;                  /* [n] */
    Turn *turn;                      /* [n] */
    Waiting *queue;                  /* [n] the allocation that wait points into                               */
    Waiting *wait; int n_wait;       /* [n_wait] waiting, in the order they are offered admission; the requests
                                        admitted from its front move wait forward, so there is always room before
                                        it for a preempted one (the requests out of the queue are running or done) */
    RxRequest **run; int n_run;      /* [batch] running, oldest admission first                                */
    const int32_t *const *tokens;    /* [n] each request's own tokens (its line)                               */
    const int *lens;                 /* [n]                                                                     */
    int n_done, refused_first;
    int32_t *cached_of;              /* [n] the caller's, may be NULL                                           */
    RxServeStats *st;
} Sched;

static int max_new_of(const RxServeOptions *o) { return o->gen ? o->gen->max_new : 0; }

/* Request i's prompt, once it can be known: its own tokens after request after[i]'s whole history. Returns 0 (built),
 * 1 (not yet: its earlier turn has not finished) or 2 (its earlier turn was refused). */
static int build_prompt(Sched *S, int i) {
    Turn *t = &S->turn[i];
    int k = S->o->after ? S->o->after[i] : -1, n = 0;
    if (t->prompt_len) return 0;
    if (k >= 0 && S->turn[k].state != 1) return S->turn[k].state == 2 ? 2 : 1;
    if (k >= 0) {
        n = S->turn[k].prompt_len + S->turn[k].n_gen;
        memcpy(t->hist, S->turn[k].hist, (size_t)n * sizeof(int32_t));
        memcpy(t->generated, S->turn[k].generated, (size_t)n);
    }
    memcpy(t->hist + n, S->tokens[i], (size_t)S->lens[i] * sizeof(int32_t));
    memset(t->generated + n, 0, (size_t)S->lens[i]);
    t->prompt_len = n + S->lens[i];
    rx_request_init(&S->req[i], t->hist, t->prompt_len, S->o->model_id);
    return 0;
}

static void refuse(Sched *S, int i) {
    if (S->st->refused++ == 0) S->refused_first = i;
    S->turn[i].state = 2;
    S->n_done++;
}

/* The most pages request i ever holds: prompt and generated tokens but the last (whose K/V is never computed). */
static int pages_at_most(const Sched *S, int i) {
    int tokens = S->turn[i].prompt_len + (max_new_of(S->o) > 0 ? max_new_of(S->o) - 1 : 0);
    return (tokens + S->o->page_size - 1) / S->o->page_size;
}

/* lpm: orders the queue's front, the first window requests whose prompt is known and the turns between them that
 * wait for an earlier turn, by cached prefix (longest first, then arrival). Refuses a turn whose earlier turn was
 * refused. */
static void lpm_order(Sched *S) {
    const int window = S->o->lpm_window > 0 ? S->o->lpm_window : RX_LPM_WINDOW;
    int front = 0, known = 0;
    for (; front < S->n_wait && known < window; front++) {
        int i = S->wait[front].index;
        const RxRequest *r = &S->req[i];
        if (S->turn[i].state == 0 && build_prompt(S, i) == 2) refuse(S, i);
        known += S->turn[i].prompt_len > 0;
        S->wait[front].cached = S->turn[i].prompt_len ? rx_cache_lookup(S->c, r->model_id, r->tokens, r->len - 1, NULL)
                                                      : -1;
    }
    qsort(S->wait, (size_t)front, sizeof *S->wait, by_cached_then_index);
}

/* Admits waiting requests while fewer than o->batch run, in the scheduler's order; skips a turn whose conversation
 * is still running, refuses one that could never fit (or whose earlier turn was refused), stops at the first that
 * finds no room. It reads the queue up to there only: the rest keep their places. */
static int admit_step(Sched *S) {
    const RxServeOptions *o = S->o;
    if (o->lpm) lpm_order(S);
    int kept = 0, full = S->n_run == o->batch, w = 0;
    for (; w < S->n_wait && !full; w++) {
        int i = S->wait[w].index, rc = 1;
        Turn *t = &S->turn[i];
        RxRequest *r = &S->req[i];
        if (t->state == 0 && build_prompt(S, i) == 2) refuse(S, i);
        if (t->state == 2) continue;                              /* refused with its earlier turn */
        if (t->prompt_len && pages_at_most(S, i) > S->c->pool->n_pages) { refuse(S, i); continue; }
        if (t->prompt_len && (rc = rx_request_admit(S->c, r)) < 0) return -1;
        if (rc) {                                                 /* waits: its turn 1 runs, or no room */
            full |= t->prompt_len > 0;
            S->wait[kept++] = S->wait[w];
            continue;
        }
        S->run[S->n_run++] = r;
        full = S->n_run == o->batch;
        if (t->admissions++) {
            S->st->recomputed_tokens += r->len - r->cached_len;
            continue;
        }
        if (S->cached_of) S->cached_of[i] = r->cached_len;
        S->st->prompt_tokens += t->prompt_len;
        S->st->cached_tokens += r->cached_len;
        for (int p = 0; p < r->cached_len; p++) S->st->cached_generated += t->generated[p];
    }
    memmove(S->wait + (w - kept), S->wait, (size_t)kept * sizeof *S->wait);   /* the kept ones, just before w */
    S->wait += w - kept;
    S->n_wait -= w - kept;
    return 0;
}

/* Preempts the newest running request: its pages go back (what it cached stays cached), it waits first in line, and
 * when admitted again it prefills its prompt and generated tokens, as many as the cache no longer holds. */
static void preempt_newest(Sched *S) {
    RxRequest *r = S->run[--S->n_run];
    int i = (int)(r - S->req);
    rx_request_abort(S->c, r);
    rx_request_init(r, S->turn[i].hist, S->turn[i].prompt_len + S->turn[i].n_gen, S->o->model_id);
    S->wait--;                                                    /* room: r itself left the queue before */
    S->wait[0].index = i;
    S->n_wait++;
    S->st->preemptions++;
}

/* Every running request's page table covers its tokens, oldest first; a request that cannot grow preempts the newest
 * (itself, if it is the newest). The oldest always grows: it fits alone (admit_step refuses what does not). */
static int grow_step(Sched *S) {
    for (int s = 0; s < S->n_run; s++) {
        RxRequest *r = S->run[s];
        int rc;
        while ((rc = rx_request_grow(S->c, r, r->len)) == 1) {
            preempt_newest(S);
            if (S->n_run == s) return 0;                          /* it was the newest */
        }
        if (rc < 0) return -1;
    }
    return 0;
}

static int is_eos(const RxGenerate *g, int32_t tok) {
    for (int e = 0; e < g->n_eos; e++)
        if (g->eos[e] == tok) return 1;
    return 0;
}

/* After a forward: request r's logits row [vocab]. Samples its next token; finishes it at max_new or an
 * end-of-sequence token, else caches its pages when it completed one. Returns 1 when it finished, 0, or -1. */
static int after_forward(Sched *S, RxRequest *r, const float *row, int V) {
    const RxGenerate *g = S->o->gen;
    const int i = (int)(r - S->req);
    const int P = S->o->page_size;
    const int completed_page = r->len / P > r->kv_len / P;
    Turn *t = &S->turn[i];
    int finished = 1;
    r->kv_len = r->len;                                           /* the forward wrote K/V of every token */
    if (g) {
        int32_t tok = rx_sample(row, V, g, &t->rng);
        if (tok < 0) return -1;
        t->hist[r->len] = tok;
        t->generated[r->len] = 1;
        r->len++;
        t->n_gen++;
        S->st->generated_tokens++;
        finished = t->n_gen == g->max_new || is_eos(g, tok);
    }
    if (!finished) return completed_page && rx_request_cache(S->c, r) ? -1 : 0;
    r->len = r->kv_len;                                           /* the last token sampled has no K/V to cache */
    if (rx_request_finish(S->c, r)) return -1;
    t->state = 1;
    S->n_done++;
    if (g && g->out) memcpy(g->out + (size_t)i * g->max_new, t->hist + t->prompt_len, (size_t)t->n_gen * 4);
    if (g && g->n_out) g->n_out[i] = t->n_gen;
    return 1;
}

/* How a message names request i: source:line when the requests came from a file, else "request i". */
static const char *request_name(const RxServeOptions *o, int i, char *buf, size_t n) {
    if (o->source) snprintf(buf, n, "%s:%d", o->source, i + 1);
    else snprintf(buf, n, "request %d", i);
    return buf;
}

/* A NaN or Inf in request i's logits row [vocab] is an error, never a result (with or without a caller that keeps
 * the logits): the first one, by request (source:line when the requests came from a file) and column. */
static int nonfinite_logits(const float *row, int V, int i, const RxServeOptions *o) {
    size_t bad;
    char who[300];
    rx_max_abs_diff(row, NULL, (size_t)V, &bad);
    if (bad == (size_t)V) return 0;
    return rx_fail("%s: the logits [vocab] of its last token hold %g at column %zu (radixmlp --check looks for "
                   "non-finite weights)", request_name(o, i, who, sizeof who), row[bad], bad);
}

/* The refusal rx_serve ends with: the first request that could never fit. */
static int refused_message(const Sched *S) {
    const int i = S->refused_first;
    const int k = S->o->after ? S->o->after[i] : -1;
    char who[300];
    request_name(S->o, i, who, sizeof who);
    if (!S->turn[i].prompt_len) return rx_fail("%s: refused: it continues request %d, which was refused", who, k + 1);
    return rx_fail("%s: refused: %d prompt tokens and %d to generate need %d pages of %d tokens, but the KV pool has "
                   "only %d (%d request%s refused)", who, S->turn[i].prompt_len, max_new_of(S->o),
                   pages_at_most(S, i), S->o->page_size, S->c->pool->n_pages, S->st->refused,
                   S->st->refused == 1 ? "" : "s");
}

/* --show-cache after batch b: the cache's counts (audited), then the tree. */
static int show_cache_after(FILE *out, const RxPrefixCache *c, int b) {
    RxCacheStats cs;
    if (rx_cache_audit(c, &cs)) return -1;
    fprintf(out, "cache after batch %d: %s %d, pages cached %d, pages evicted so far %ld\n", b,
            cs.kind == RX_CACHE_HASH ? "entries" : "edges", cs.nodes, cs.cached_pages, cs.evicted_pages);
    rx_cache_draw(out, c);
    return 0;
}

/* Each request's conversation buffers (cap: its prompt at most, its earlier turns' included, and max_new), and the
 * pages for all at once (*need). */
static int turns_alloc(Turn *turn, const int *lens, int n, const RxServeOptions *o, int64_t *need) {
    *need = 0;
    for (int s = 0; s < n; s++) {
        int k = o->after ? o->after[s] : -1;
        if (lens[s] < 1) return rx_fail("rx_serve: request %d is empty", s);
        if (k < -1 || k >= s) return rx_fail("rx_serve: request %d continues request %d, which is not earlier", s, k);
        int64_t cap = (int64_t)(k >= 0 ? turn[k].cap : 0) + lens[s] + max_new_of(o);
        if (cap > INT32_MAX / 2) return rx_fail("rx_serve: request %d would hold %lld tokens", s, (long long)cap);
        turn[s].cap = (int)cap;
        turn[s].hist = (int32_t *)rx_alloc((size_t)cap * sizeof(int32_t), "a request's tokens");
        turn[s].generated = (uint8_t *)rx_alloc((size_t)cap, "a request's tokens");
        if (!turn[s].hist || !turn[s].generated) return -1;
        turn[s].rng = rx_sampler_seed(o->gen ? o->gen->seed : 0, s);
        *need += (cap + o->page_size - 1) / o->page_size;
    }
    if (*need * o->page_size > INT32_MAX)
        return rx_fail("rx_serve: %lld pages of %d tokens are too many for one pool", (long long)*need, o->page_size);
    return 0;
}

static int gen_check(const RxGenerate *g) {
    if (g && (g->max_new < 1 || !(g->temperature >= 0) || g->top_k < 0 || !(g->top_p > 0 && g->top_p <= 1) ||
              g->n_eos < 0))
        return rx_fail("rx_serve: generation needs max_new >= 1, temperature >= 0, top_k >= 0 and top_p in (0, 1]");
    return 0;
}

/* One step's buffers, each [batch]: sequence s of the step is running request run[s]. */
typedef struct {
    int32_t *cached_len;             /* [batch] its tokens with K/V in the pool                                 */
    int32_t *prefix_key;             /* [batch] the page of its last cached token, -1: none                     */
    const int32_t **tables;          /* [batch] its page table                                                  */
    const int32_t **seqs;            /* [batch] its tokens without K/V: the step's new tokens                   */
    int *sfx_lens;                   /* [batch]                                                                 */
    float *logits;                   /* [batch, vocab] each sequence's last-token logits                       */
    RxBatch sfx;                     /* the new tokens as one ragged batch, positions after the cached ones     */
} Step;

/* A step's forward: every running request's tokens without K/V (a prompt, or the one token sampled last step) as
 * one batch on its cached history, through qwen3_prefill_ref, or gpu_prefill on the device pool (gpu_kv). */
static int step_forward(Sched *S, Step *w, const Qwen3Model *m, RxKvPool *pool, GpuKvPool *gpu_kv) {
    const RxServeOptions *o = S->o;
    int n = S->n_run, rows = 0, news = 0;
    for (int s = 0; s < n; s++) {
        const RxRequest *r = S->run[s];
        w->cached_len[s] = r->kv_len;
        w->tables[s] = r->pages;
        w->prefix_key[s] = r->kv_len ? r->pages[(r->kv_len - 1) / o->page_size] : -1;
        w->seqs[s] = r->tokens + r->kv_len;
        w->sfx_lens[s] = r->len - r->kv_len;
        news += S->turn[r - S->req].n_gen == 0;
    }
    if (rx_batch_make(&w->sfx, w->seqs, w->sfx_lens, n)) return -1;
    for (int s = 0; s < n; s++)                           /* whose positions go on after the cached ones */
        for (int i = w->sfx.cu_seqlens[s]; i < w->sfx.cu_seqlens[s + 1]; i++)
            w->sfx.position_ids[i] += w->cached_len[s];
    RxPrefill pf = {.pool = pool, .cached_len = w->cached_len, .pages = w->tables, .prefix_key = w->prefix_key};
    GpuRunInfo gi = {};
    if (o->gpu ? gpu_prefill(o->gpu, gpu_kv, &w->sfx, &pf, o->mode, w->logits, &rows, &gi)
               : qwen3_prefill_ref(m, &w->sfx, &pf, o->mode, w->logits, &rows))
        return -1;
    if (o->trace) {
        fprintf(o->trace, "batch %d: ", S->st->n_batches);
        if (o->gen) fprintf(o->trace, "%d new + %d decoding; ", news, n - news);
        if (rx_prefill_print(o->trace, &w->sfx, &pf, rows)) return -1;
    }
    rx_batch_free(&w->sfx);
    S->st->rows_computed += rows;
    S->st->gpu_ms += gi.forward_ms;
    return 0;
}

/* A step's outputs: each running request's logits row (a prompt's last logits to the caller's last_logits [n, V]
 * and batch_of [n]), then after_forward samples or finishes it; the running stay in admission order. */
static int step_outputs(Sched *S, const float *logits, int V, float *last_logits, int32_t *batch_of) {
    const RxServeOptions *o = S->o;
    int kept = 0;
    for (int s = 0; s < S->n_run; s++) {
        RxRequest *r = S->run[s];
        const float *row = logits + (size_t)s * V;
        int i = (int)(r - S->req);
        if (nonfinite_logits(row, V, i, o)) return -1;
        if (o->gen && o->gen->on_logits && o->gen->on_logits(o->gen->ctx, i, r->tokens, r->len, row))
            return rx_fail("rx_serve: on_logits stopped the run at request %d's history of %d tokens", i, r->len);
        if (S->turn[i].n_gen == 0) {                      /* its prompt's last token: the prefill's logits */
            if (last_logits) memcpy(last_logits + (size_t)i * V, row, (size_t)V * sizeof(float));
            if (batch_of) batch_of[i] = S->st->n_batches;
        }
        int fin = after_forward(S, r, row, V);
        if (fin < 0) return -1;
        if (!fin) S->run[kept++] = r;
    }
    S->n_run = kept;
    S->st->n_batches++;
    return 0;
}

int rx_serve(const Qwen3Model *m, const int32_t *const *tokens, const int *lens, int n_req, const RxServeOptions *o,
             float *last_logits, int32_t *batch_of, int32_t *cached_of, RxServeStats *st) {
    int V = m->cfg.vocab_size, P = o->page_size, B = o->batch, rc = -1;
    int64_t need = 0;
    double t0;
    memset(st, 0, sizeof *st);
    if (P < 1 || B < 1 || o->n_pages < 0) return rx_fail("rx_serve: page size %d and batch %d must be >= 1", P, B);
    if (gen_check(o->gen)) return -1;
    RxKvPool pool = {};
    GpuKvPool *gpu_kv = NULL;                              /* o->gpu: the K/V on the device, the bookkeeping here */
    Sched S = {};
    S.o = o;
    S.tokens = tokens;
    S.lens = lens;
    S.cached_of = cached_of;
    S.st = st;
    S.req = (RxRequest *)calloc((size_t)n_req + 1, sizeof(RxRequest));
    S.turn = (Turn *)calloc((size_t)n_req + 1, sizeof(Turn));
    S.queue = (Waiting *)calloc((size_t)n_req + 1, sizeof(Waiting));
    S.wait = S.queue;
    S.run = (RxRequest **)calloc((size_t)B, sizeof(RxRequest *));                         /* [batch] running */
    Step w = {};
    w.cached_len = (int32_t *)calloc((size_t)B, sizeof(int32_t));
    w.prefix_key = (int32_t *)calloc((size_t)B, sizeof(int32_t));
    w.tables = (const int32_t **)calloc((size_t)B, sizeof(int32_t *));
    w.seqs = (const int32_t **)calloc((size_t)B, sizeof(int32_t *));
    w.sfx_lens = (int *)calloc((size_t)B, sizeof(int));
    w.logits = (float *)rx_alloc((size_t)B * V * sizeof(float), "a step's logits [batch, vocab]");
    if (!S.req || !S.turn || !S.queue || !S.run || !w.cached_len || !w.prefix_key || !w.tables || !w.seqs ||
        !w.sfx_lens || !w.logits) {
        rx_fail("out of host memory for serving %d requests", n_req);
        goto done;
    }
    if (turns_alloc(S.turn, lens, n_req, o, &need)) goto done;
    if (rx_kv_pool_init(&pool, o->n_pages ? o->n_pages : (int)need, P, o->gpu ? 0 : m->cfg.n_layers,
                        o->gpu ? 0 : m->cfg.n_kv_heads * m->cfg.head_dim) ||
        (o->gpu && gpu_kv_pool_create(&gpu_kv, o->gpu, &pool)) || rx_cache_create(&S.c, o->cache, &pool))
        goto done;
    for (int s = 0; s < n_req; s++) {
        rx_request_init(&S.req[s], NULL, 0, o->model_id);
        S.wait[s].index = s;
        if (o->gen && o->gen->n_out) o->gen->n_out[s] = 0;
    }
    S.n_wait = n_req;
    st->pool_pages = pool.n_pages;
    t0 = rx_now_ms();
    while (S.n_done < n_req) {                             /* a step: grow, admit, one forward, sample */
        int done_before = S.n_done;
        if (grow_step(&S) || admit_step(&S)) goto done;
        if (S.n_run == 0) {
            /* Refused in this step, none running: a later turn of a refused request learns it in the next step. */
            if (S.n_done > done_before) continue;
            rx_fail("rx_serve: %d requests wait and none can run", S.n_wait);   /* cannot happen: no hang if it does */
            goto done;
        }
        if (step_forward(&S, &w, m, &pool, gpu_kv) || step_outputs(&S, w.logits, V, last_logits, batch_of)) goto done;
        if (o->show_cache && show_cache_after(o->show_cache, S.c, st->n_batches - 1)) goto done;
    }
    st->ms = rx_now_ms() - t0;
    RxCacheStats cs;
    if (rx_cache_audit(S.c, &cs)) goto done;
    st->cache_pages = cs.cached_pages;
    st->evicted_pages = cs.evicted_pages;
    st->compared_pages = cs.compared_pages;
    st->request_pages = cs.request_pages;
    if (st->refused) refused_message(&S);                  /* the others were served: their outputs stand */
    rx_cache_free(S.c);                                    /* the final flush: the cache lets go of every page */
    S.c = NULL;
    st->held_after_flush = pool.n_pages - pool.n_free;
    rc = st->refused ? 1 : 0;
done:
    rx_batch_free(&w.sfx);
    for (int s = 0; S.req && s < n_req; s++) rx_request_abort(S.c, &S.req[s]);
    for (int s = 0; S.turn && s < n_req; s++) FREE_ALL(S.turn[s].hist, S.turn[s].generated);
    rx_cache_free(S.c);
    rx_kv_pool_free(&pool);
    gpu_kv_pool_free(gpu_kv);
    FREE_ALL(S.req, S.turn, S.queue, S.run, w.cached_len, w.prefix_key, w.tables, w.seqs, w.sfx_lens, w.logits);
    return rc;
}

#ifndef RADIXMLP_HOST_ONLY
/* ------------------------------------------------------------------------------------ part ii: prefill on the gpu */
/* The GPU twin of qwen3_prefill_ref. The cache's bookkeeping (the tree, locks, LRU, hash chains, the page refs and
 * free list of RxKvPool) stays on the host; only the K/V live on the device, in a pool laid out as the C pool is,
 * bf16 [slot, n_layers, n_kv*head_dim], slot = page * page_size + i, indexed by the host cache's page ids:
 *
 *   attention's token space T (sequence by sequence, cached then new positions; PrefillKeys)
 *       seq 0: | pos 0  pos 1  pos 2  pos 3 | pos 4  pos 5 |     cached_len 4, page size 2, pages [7 2 | 5]
 *   kv_row  [T]:  14     15     4      5       10     11         slot = pages[pos / 2] * 2 + pos % 2
 *   layer l's keys: pool.k + l * kv_dim, rows n_layers * kv_dim apart (GpuKvView's row_stride).
 *
 * Either attention kernel runs unchanged: the flash kernel's cu_k spans each sequence's cached and new positions,
 * its cu_q the new ones (or their compact rows), which are the last positions of that span, as it expects. */
struct GpuKvPool {
    const RxKvPool *host;            /* the host pool whose page ids index this one (its bookkeeping)          */
    int n_slots, n_layers, kv_dim;   /* n_slots = n_pages * page_size of host, when this pool was made        */
    bf16 *k, *v;                     /* [n_pages * page_size, n_layers, kv_dim] bf16, slot-major, as RxKvPool */
};

/* Allocates both halves; every byte 0xff, a bf16 NaN: a slot read before a forward wrote it poisons the logits
 * instead of hiding. */
static int pool_alloc(GpuKvPool *p) {
    const size_t n = (size_t)p->n_slots * p->n_layers * p->kv_dim;
    DEV_ALLOC(p->k, n, "the KV pool's K [%d slots, %d layers, %d]", p->n_slots, p->n_layers, p->kv_dim);
    DEV_ALLOC(p->v, n, "the KV pool's V [%d slots, %d layers, %d]", p->n_slots, p->n_layers, p->kv_dim);
    CUDA_CHECK(cudaMemset(p->k, 0xff, n * sizeof(bf16)));
    CUDA_CHECK(cudaMemset(p->v, 0xff, n * sizeof(bf16)));
    return 0;
}

int gpu_kv_pool_create(GpuKvPool **out, const GpuModel *g, const RxKvPool *host) {
    *out = NULL;
    if (!g || !host) return rx_fail("gpu_kv_pool_create needs a GPU model and the host pool it mirrors");
    GpuKvPool *p = (GpuKvPool *)calloc(1, sizeof *p);
    if (!p) return rx_fail("out of host memory for a GPU KV pool");
    p->host = host;
    p->n_layers = g->cfg.n_layers;
    p->kv_dim = g->cfg.n_kv_heads * g->cfg.head_dim;
    p->n_slots = host->n_pages * host->page_size;                       /* rx_kv_pool_init: fits in 32 bits */
    if (pool_alloc(p)) { gpu_kv_pool_free(p); return -1; }
    *out = p;
    return 0;
}

void gpu_kv_pool_free(GpuKvPool *p) {
    if (!p) return;
    cudaFree(p->k);
    cudaFree(p->v);
    free(p);
}

int gpu_kv_pool_read(const GpuKvPool *p, float *k, float *v) {
    const size_t n = (size_t)p->n_slots * p->n_layers * p->kv_dim;
    TRY(download_bf16(k, p->k, n));
    return download_bf16(v, p->v, n);
}

/* Part II's copy to an index, the K/V store's: out[dst[r] * out_stride] = in[idx[r]] for r < gridDim.x, idx NULL
 * meaning r; rows_by_index_kernel (Part I's gather and scatter) with an output index and stride, the slots' and the
 * pool's. One block per row; Chunk as there. */
template <typename Chunk>
__global__ void kv_store_kernel(Chunk *out, int64_t out_stride, const int32_t *dst, const Chunk *in,
                                const int32_t *idx, int64_t chunks_per_row) {
    const Chunk *from = in + (idx ? idx[blockIdx.x] : blockIdx.x) * chunks_per_row;
    Chunk *to = out + dst[blockIdx.x] * out_stride;
    for (int64_t c = threadIdx.x; c < chunks_per_row; c += blockDim.x) to[c] = from[c];
}
/* out rows out_stride_bytes apart, row r at dst[r]; in rows row_bytes apart, row idx ? idx[r] : r. */
static int kv_rows_copy_gpu(void *out, size_t out_stride_bytes, const int32_t *dst, const void *in,
                            const int32_t *idx, int n_rows, size_t row_bytes) {
    if (n_rows == 0) return 0;
    if (((uintptr_t)out | (uintptr_t)in | row_bytes | out_stride_bytes) % 16 == 0) {
        kv_store_kernel<<<n_rows, INDEX_BLOCK>>>((uint4 *)out, (int64_t)(out_stride_bytes / 16), dst,
                                                 (const uint4 *)in, idx, (int64_t)(row_bytes / 16));
        LAUNCH_CHECK();
    } else {
        kv_store_kernel<<<n_rows, INDEX_BLOCK>>>((uint16_t *)out, (int64_t)(out_stride_bytes / 2), dst,
                                                 (const uint16_t *)in, idx, (int64_t)(row_bytes / 2));
        LAUNCH_CHECK();
    }
    return 0;
}

/* The new tokens' k and v into their slots, as kv_store_ref: kv_dst [N] on the device. */
static int gpu_kv_store(GpuModel *g, const GpuKvView *kv, const GpuWork *w, const int32_t *kv_dst) {
    const int32_t *src = w->L.mode == RX_BASELINE ? NULL : w->scatter;
    const size_t row = (size_t)g->cfg.n_kv_heads * g->cfg.head_dim * sizeof(bf16);     /* bytes of one K or V row */
    const size_t stride = kv->row_stride * sizeof(bf16);
    TRY(kv_rows_copy_gpu((bf16 *)kv->k, stride, kv_dst, w->k, src, w->L.N, row));
    return kv_rows_copy_gpu((bf16 *)kv->v, stride, kv_dst, w->v, src, w->L.N, row);
}

/* Part II's prefill, as qwen3_prefill_ref: Part I's layer steps, each layer writing its new K/V into their slots
 * (gpu_kv_store) before attending through them, and last-token logits. K and kv_dst_dev (the device copy of
 * K->kv_dst [N]) are freed by the caller. */
static int prefill_run(GpuModel *g, GpuKvPool *pool, const RxBatch *b, const RxPrefill *pf, RxMode mode,
                       float *last_logits, GpuWork *w, PrefillKeys *K, int32_t **kv_dst_dev) {
    const Qwen3Config *c = &g->cfg;
    const int64_t KVD = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t stride = c->n_layers * KVD;                                /* a slot holds every layer */
    TRY(layout_build_prefill(&w->L, K, b, pf, mode));
    TRY(work_alloc(g, w, K->T, K->cu_k, 1, 1));                             /* keys: every cached and new one */
    TRY(upload_i32(kv_dst_dev, K->kv_dst, w->L.N, "the new tokens' slots"));
    TRY(embed_rows(g, w));
    for (int l = 0; l < c->n_layers; l++) {
        TRY(gpu_layer_qkv(g, l, w));
        TRY(gpu_scatter_q(g, w));                   /* as qwen3_prefill_ref */
        GpuKvView kv = {
            .k = pool->k + l * KVD,                 /* layer l's slice of every slot */
            .v = pool->v + l * KVD,
            .row_stride = stride,
            .kv_row = w->kv_row,
        };
        TRY(gpu_kv_store(g, &kv, w, *kv_dst_dev));
        TRY(gpu_layer_attn_mlp(g, l, w, &kv));
    }
    return work_head(g, w, 1, last_logits, NULL);
}

int gpu_prefill(GpuModel *g, GpuKvPool *kv, const RxBatch *suffixes, const RxPrefill *pf, RxMode mode,
                float *last_logits, int *rows_out, GpuRunInfo *info) {
    if (info) memset(info, 0, sizeof *info);
    if (!g || !kv || !suffixes || !pf) return rx_fail("gpu_prefill needs a GPU model, its KV pool, a batch and pf");
    if (!g->lm_head) return no_lm_head();
    if (pf->pool != kv->host || pf->pool->n_pages * pf->pool->page_size != kv->n_slots)
        return rx_fail("gpu_prefill: pf->pool is not the host pool the GPU pool was made to mirror");
    if (kv->n_layers != g->cfg.n_layers || kv->kv_dim != g->cfg.n_kv_heads * g->cfg.head_dim)
        return rx_fail("gpu_prefill: the GPU KV pool was made for another model");
    if (rx_batch_check(suffixes, &g->cfg, NULL) || prefill_check(&g->cfg, suffixes, pf, 0)) return -1;
    GpuWork w;
    memset(&w, 0, sizeof w);
    PrefillKeys K;
    memset(&K, 0, sizeof K);
    int32_t *kv_dst_dev = NULL;
    int rc = prefill_run(g, kv, suffixes, pf, mode, last_logits, &w, &K, &kv_dst_dev);
    if (rc == 0 && rows_out) *rows_out = w.L.R;
    run_info(&w, info);
    work_free(&w);
    prefill_keys_free(&K);
    cudaFree(kv_dst_dev);
    return rc;
}

/* ------------------------------------------------------------------ gpu entry points for the tests and benchmarks */
int gpu_upload(void **dev, const void *host, size_t bytes) {
    TRY(dev_alloc(dev, bytes, "a buffer of %zu bytes", bytes));
    if (host && cuda_copy(*dev, host, bytes, cudaMemcpyHostToDevice)) {
        cudaFree(*dev);
        *dev = NULL;
        return -1;
    }
    return 0;
}
int gpu_upload_bf16(void **dev, const float *host, size_t n) {
    bf16 *h = host ? (bf16 *)malloc(n * sizeof(bf16)) : NULL;
    *dev = NULL;
    if (host && !h) return rx_fail("out of host memory converting %zu values to bf16", n);
    for (size_t i = 0; h && i < n; i++) h[i] = to_bf16(host[i]);
    int rc = gpu_upload(dev, h, n * sizeof(bf16));
    free(h);
    return rc;
}
void gpu_free(void *dev) { cudaFree(dev); }
int gpu_copy(void *dst, const void *src, size_t bytes) { return cuda_copy(dst, src, bytes, cudaMemcpyDefault); }
int gpu_download_bf16(float *host, const void *dev, size_t n) { return download_bf16(host, (const bf16 *)dev, n); }
int gpu_rows_to_index(void *out, size_t out_stride_bytes, const int32_t *dst, const void *in, const int32_t *idx,
                      int n_rows, size_t row_bytes) {
    if (row_bytes % 2 || out_stride_bytes % 2) return rx_fail("gpu_rows_to_index: rows and strides of bf16 are even");
    if (n_rows > 0 && !dst) return rx_fail("gpu_rows_to_index: dst is NULL; it holds each row's destination");
    return kv_rows_copy_gpu(out, out_stride_bytes, dst, in, idx, n_rows, row_bytes);
}
int gpu_memory_free(size_t *free_bytes) {
    size_t total = 0;
    CUDA_CHECK(cudaMemGetInfo(free_bytes, &total));
    return 0;
}

static int time_reps(int (*run)(void *ctx), void *ctx, int reps, double *ms, cudaEvent_t *ev) {
    CUDA_CHECK(cudaEventCreate(&ev[0]));
    CUDA_CHECK(cudaEventCreate(&ev[1]));
    TRY(run(ctx));                                         /* warm-up, not counted */
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(ev[0], 0));
        TRY(run(ctx));
        CUDA_CHECK(cudaEventRecord(ev[1], 0));
        CUDA_CHECK(cudaEventSynchronize(ev[1]));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, ev[0], ev[1]));
        ms[i] = t;
    }
    return 0;
}
int gpu_time_median(int (*run)(void *ctx), void *ctx, int reps, double *median_ms) {
    if (!run || reps < 1) return rx_fail("gpu_time_median needs a function to time and reps >= 1, not %d", reps);
    cudaEvent_t ev[2] = {NULL, NULL};
    double *ms = (double *)rx_alloc(reps * sizeof(double), "the timings");
    int rc = !ms || time_reps(run, ctx, reps, ms, ev);
    if (rc == 0) {
        qsort(ms, reps, sizeof(double), cmp_double);
        *median_ms = ms[reps / 2];
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free(ms);
    return rc ? -1 : 0;
}

/* bench --attention (radixmlp.h): what happens between a layer's two steps (gpu_scatter_qkv, which in radix mode
 * scatters q, k and v, then attention_step), on a model with attention's shapes and no weights; q, k and v random
 * in (-1, 1). */
typedef struct {
    GpuModel *g;
    GpuWork *w;
} AttnBench;
static int attn_bench_run(void *ctx) {
    AttnBench *a = (AttnBench *)ctx;
    GpuKvView kv;
    TRY(gpu_scatter_qkv(a->g, a->w, &kv));
    return attention_step(a->g, a->w, &kv);
}
static int fill_random(bf16 *dst, size_t n, uint64_t seed) {    /* dst [n] <- (k + 0.5) / 2^22 - 1, k < 2^23 */
    bf16 *h = (bf16 *)rx_alloc(n * sizeof(bf16), "random attention inputs");
    if (!h) return -1;
    for (size_t i = 0; i < n; i++) h[i] = to_bf16(((float)(rx_rand(&seed) >> 41) + 0.5f) / 4194304.0f - 1.0f);
    int rc = cuda_copy(dst, h, n * sizeof(bf16), cudaMemcpyHostToDevice);
    free(h);
    return rc;
}
static int time_attention(GpuModel *g, GpuWork *w, const RxBatch *b, RxMode mode, int reps, double *median_ms) {
    const Qwen3Config *c = &g->cfg;
    const int64_t QD = (int64_t)c->n_heads * c->head_dim, KVD = (int64_t)c->n_kv_heads * c->head_dim;
    TRY(layout_build(&w->L, b, mode, RX_AUTO_THRESHOLD));
    const int R = w->L.R;
    TRY(work_alloc(g, w, b->n_tokens, b->cu_seqlens, 0, 0));
    TRY(fill_random(w->q, (size_t)(R * QD), 3));
    TRY(fill_random(w->k, (size_t)(R * KVD), 4));
    TRY(fill_random(w->v, (size_t)(R * KVD), 5));
    AttnBench a = {.g = g, .w = w};
    return gpu_time_median(attn_bench_run, &a, reps, median_ms);
}
int gpu_time_attention(const RxBatch *b, RxMode layout, RxAttention kernel, int n_heads, int n_kv_heads, int head_dim,
                       int reps, double *median_ms) {
    if (!gpu_available() || check_heads(n_heads, n_kv_heads, head_dim)) return -1;
    if (reps < 1 || layout < RX_BASELINE || layout > RX_COMPACT)
        return rx_fail("gpu_time_attention: needs reps >= 1, and the baseline, radix or compact layout");
    GpuModel g;                      /* attention's shapes; the widths it does not use at 1 (no logits are made) */
    memset(&g, 0, sizeof g);
    g.cfg.n_heads = n_heads;
    g.cfg.n_kv_heads = n_kv_heads;
    g.cfg.head_dim = head_dim;
    g.cfg.n_layers = 1;
    g.cfg.hidden_size = g.cfg.intermediate_size = 1;
    g.cfg.vocab_size = g.cfg.max_position_embeddings = INT32_MAX;       /* any token id and position: random q, k, v */
    if (gpu_set_attention(&g, kernel) || rx_batch_check(b, &g.cfg, NULL)) return -1;   /* as a forward checks them */
    GpuWork w;
    memset(&w, 0, sizeof w);
    int rc = time_attention(&g, &w, b, layout, reps, median_ms);
    work_free(&w);
    return rc;
}

/* cudaDeviceReset(), which the flash launch survives: it sets its shared-memory attribute every time. */
int gpu_test_device_reset(void) {
    CUDA_CHECK(cudaDeviceReset());
    return 0;
}

#else /* RADIXMLP_HOST_ONLY */
/* Built by a plain C++ compiler (the fuzzers and the sanitizer build of the host tests): no CUDA, and every gpu_*
 * function reports that there is no device. (Unnamed parameters: this file is always compiled as C++.) */
int gpu_available(void) { rx_fail("no GPU: this is a host-only build (RADIXMLP_HOST_ONLY)"); return 0; }
const char *gpu_device_name(void) { return ""; }
static int no_gpu(void) { gpu_available(); return -1; }
int gpu_model_upload(GpuModel **, const Qwen3Model *) { return no_gpu(); }
int gpu_model_random(GpuModel **, const Qwen3Config *, uint64_t) { return no_gpu(); }
void gpu_model_free(GpuModel *) {}
int gpu_set_attention(GpuModel *, RxAttention) { return no_gpu(); }
int gpu_forward(GpuModel *, const RxBatch *, RxMode, double, int, float *, GpuRunInfo *) { return no_gpu(); }
int gpu_embed(GpuModel *, const RxBatch *, RxMode, double, float *, GpuRunInfo *) { return no_gpu(); }
int gpu_upload(void **dev, const void *, size_t) { *dev = NULL; return no_gpu(); }
int gpu_upload_bf16(void **dev, const float *, size_t) { *dev = NULL; return no_gpu(); }
void gpu_free(void *) {}
int gpu_copy(void *, const void *, size_t) { return no_gpu(); }
int gpu_download_bf16(float *, const void *, size_t) { return no_gpu(); }
int gpu_rows_to_index(void *, size_t, const int32_t *, const void *, const int32_t *, int, size_t) { return no_gpu(); }
int gpu_memory_free(size_t *free_bytes) { *free_bytes = 0; return no_gpu(); }
int gpu_rows_by_index(void *, const void *, const int32_t *, int, size_t) { return no_gpu(); }
int gpu_rmsnorm(void *, const void *, const void *, int, int, float) { return no_gpu(); }
int gpu_qk_norm_rope(void *, const void *, const int32_t *, const float *, int, int, int, float) { return no_gpu(); }
int gpu_silu_mul(void *, const void *, const void *, size_t) { return no_gpu(); }
int gpu_gemm(GpuModel *, void *, const void *, const void *, int, int, int) { return no_gpu(); }
int gpu_attention(void *, const void *, const void *, const void *, int64_t, int, const int32_t *, const int32_t *,
                  const int32_t *, int, int, int) { return no_gpu(); }
int gpu_flash_attention(void *, const void *, const void *, const void *, const int32_t *, const int32_t *,
                        const int32_t *, int, int, int, int, RxAttention) { return no_gpu(); }
int gpu_flash_block_m(RxAttention, const int32_t *, int, int) { return no_gpu(); }
int gpu_time_median(int (*)(void *), void *, int, double *) { return no_gpu(); }
int gpu_time_attention(const RxBatch *, RxMode, RxAttention, int, int, int, int, double *) { return no_gpu(); }
int gpu_test_device_reset(void) { return no_gpu(); }
int gpu_launch_shapes(const GpuLaunchShape **shapes) { *shapes = NULL; return 0; }
int gpu_kv_pool_create(GpuKvPool **out, const GpuModel *, const RxKvPool *) { *out = NULL; return no_gpu(); }
void gpu_kv_pool_free(GpuKvPool *) {}
int gpu_kv_pool_read(const GpuKvPool *, float *, float *) { return no_gpu(); }
int gpu_prefill(GpuModel *, GpuKvPool *, const RxBatch *, const RxPrefill *, RxMode, float *, int *, GpuRunInfo *) {
    return no_gpu();
}
#endif /* RADIXMLP_HOST_ONLY */

/* ----------------------------------------------------------------------------- part iii: speed, threads and paths */
/* Everything here exists only to be fast, each piece equal bit for bit to the Part I definition that calls it:
 *   rmsnorm_fast, qk_norm_rope_fast, silu_mul_fast   Part I's row loops on threads
 *   linear_fast (rx_matmul_packed_ref)               linear_ref, on weights packed into panels and SIMD tiles
 *   exp_fast (exp_row_avx2)                          rx_exp_ref's exp_one, 8 lanes at a time
 *   attention_fast                                   attention_ref, on the matmul's tiles
 *   flash_attention (the GPU)                        attention_kernel, on tensor cores (within bf16, not bit for bit)
 * The tests that prove it, each on every path (definition, portable, avx2, avx512) at 1 and 2 threads, in the group
 * reference: matmul_packed_equals_definition_bit_for_bit, exp_matches_double_on_every_path,
 * attention_ref_matches_double_every_layout, logits_identical_for_1_and_2_threads_every_mode_and_cpu_path and
 * forward_fuzz_radix_compact_equal_baseline_equals_double (the definition is its oracle); the GPU's in group gpu.
 *
 * Threads and vectors, as llama2.c and llm.c's CPU code use them: OpenMP splits the loops over rows, over
 * (row, head) pairs and over matmul tiles across threads, and the inner loops run across independent outputs, so
 * the compiler vectorizes them without reordering any sum (no -ffast-math). Without -fopenmp (the emulator's build)
 * the pragmas vanish and one thread runs the same code.
 *
 * Threads must never slow a forward: a join waits for the slowest thread, which on a busy machine may not be running
 * (a scheduler time slice, milliseconds). A loop runs in parallel only when its work pays for that, if(work >=
 * RX_GRAIN) as PyTorch's parallel_for grain, work in multiply-adds or elements (docs/results.md, 2026-11-25:
 * threads on a busy machine; OMP_WAIT_POLICY=passive shortens libgomp's spinning, from outside only). */

enum { RX_GRAIN = 1 << 20 };
#ifdef _OPENMP
#define RX_OMP(directive) _Pragma(#directive)
static int rx_thread(void) { return omp_get_thread_num(); }
int rx_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
    return omp_get_max_threads();
}
#else
#define RX_OMP(directive)
static int rx_thread(void) { return 0; }
int rx_threads(int) { return 1; }
#endif
/* Loops whose lanes are independent (or a max, the same in any order): gcc at -O2 vectorizes them only when told;
 * clang does at -O2 on its own, and at -O1 (the sanitizer builds) would warn that it cannot. */
#if defined(_OPENMP) && !defined(__clang__)
#define RX_SIMD _Pragma("omp simd")
#define RX_SIMD_MAX(v) _Pragma(RX_STR(omp simd reduction(max : v)))
#define RX_STR(x) #x
#else
#define RX_SIMD
#define RX_SIMD_MAX(v)
#endif

/* --------------------------------------------------- part iii: the matmul's packed panels and simd tiles, the exp */
/* matmul_ref's chains (linear_ref), fast: a register-blocked micro-kernel over packed panels, as BLIS and llm.c's
 * CPU matmul do it. The weight is packed once per model (model_pack_ref) into panels of MM_COLS outputs, zero-padded
 * past out: wp [ceil(out / MM_COLS)][in][MM_COLS], so the MM_COLS weights that step i needs lie side by side, and
 * one panel is one contiguous block that stays in cache (a plain W^T [in][out] would put its rows out * 4 bytes
 * apart: at out = 3072 a multiple of 4 KiB, every row of a strip in the same cache set). Memory: 4 bytes per weight
 * (fp32, whatever the checkpoint's dtype), plus the padding of the last panel.
 *
 * x is packed too, per call, into tiles of MM_ROWS rows: xp [ceil(rows / MM_ROWS)][in][MM_ROWS], so that step i
 * reads its MM_ROWS inputs side by side as well (one stream instead of MM_ROWS rows 4*in bytes apart).
 *
 * A tile of MM_ROWS rows x MM_COLS outputs keeps its sums in registers, one SIMD lane per output, and reads each
 * weight once for MM_ROWS rows and each x once for MM_COLS outputs:
 *
 *            o0 ... o0+63              every lane of every row of the tile does the same thing:
 *     r0   [ acc acc ... acc ]            acc = fma(x[r][i], W[o][i], acc)   (one rounding, i = 0, 1, ...)
 *     ..   [  MM_ROWS rows   ]  += x[r][i] * [ W[o0][i] ... W[o0+63][i] ]  (row i of the panel)
 *     r5   [ acc acc ... acc ]
 *
 * With AVX-512 that is 24 accumulators of 16 lanes; AVX2 runs it as four quarters of 3 rows x 32 outputs, 12
 * accumulators of 8 lanes each. One panel layout serves both (and the portable C), so every path reads the same packed
 * weights. Edges take the same path, so no row's arithmetic depends on where it falls: a tile past the last row repeats
 * the last row (and stores nothing for it); the padded lanes of the last panel store nothing. Threads share out the
 * tiles, panel by panel, once the matmul is big enough to pay for waking them (RX_GRAIN). The instruction set is picked
 * at run time (rx_cpu_path): the widest the CPU has; RADIXMLP_CPU=portable|avx2|avx512, or rx_cpu_path(), forces one,
 * and every one gives the same bits. The tiles run over MM_KC inputs at a time, all the tiles of a block of inputs
 * before the next block, so that a panel's block (at most 256 KiB) stays in L2 while every row tile reads it, however
 * long the rows: a chain goes on from block to block through y (stored, then read back: the same float). A panel's
 * block comes from memory to its first tile, which would wait on it row by row; so the AVX-512 tile also fetches 8 * kn
 * floats into L2 as it runs (next, a cache line every second step; NULL: none), and a panel's tiles take the next
 * panel's block in turn, in 8 shares (measured on an Intel Xeon: docs/results.md). The AVX2 tile fetches nothing: the
 * fetch was never measured on the AMD cores that run it. */
enum { MM_ROWS = 6, MM_COLS = 64, MM_KC = 1024 };

size_t rx_packed_floats(int out, int in) {
    return (size_t)(out + MM_COLS - 1) / MM_COLS * MM_COLS * (size_t)in;
}

size_t rx_packed_x_floats(int rows, int in) {
    return (size_t)(rows + MM_ROWS - 1) / MM_ROWS * MM_ROWS * (size_t)in;
}

/* One tile's inputs side by side: xp [in][MM_ROWS], xp[i][j] = xr[j][i]. */
static void pack_tile(float *xp, const float *const xr[MM_ROWS], int in) {
    for (int i = 0; i < in; i++)
        for (int j = 0; j < MM_ROWS; j++) xp[(size_t)i * MM_ROWS + j] = xr[j][i];
}

void rx_pack_weight(float *wp, const RxTensor *W) {
    int out = (int)W->shape[0], in = (int)W->shape[1], n_panels = (out + MM_COLS - 1) / MM_COLS;
    /* fp32 weights: a plain copy, through memcpy: a file's data need not start 4-byte aligned (its header's length
     * decides), and a misaligned float load is undefined (a trap on some CPUs). */
    const uint8_t *wf = W->dtype == RX_F32 ? (const uint8_t *)W->data : NULL;
    RX_OMP(omp parallel for schedule(static) if((size_t)out * in >= RX_GRAIN))
    for (int p = 0; p < n_panels; p++) {
        float *panel = wp + (size_t)p * in * MM_COLS;                         /* [in][MM_COLS] */
        for (int i0 = 0; i0 < in; i0 += 16)            /* 16 inputs at a time: each read of W is one cache line */
            for (int c = 0; c < MM_COLS; c++)
                for (int i = i0; i < i0 + 16 && i < in; i++) {
                    int o = p * MM_COLS + c;
                    size_t at = (size_t)o * in + i;
                    float w = 0.0f;
                    if (o < out && wf) memcpy(&w, wf + at * 4, 4);
                    else if (o < out) w = rx_tensor_at(W, (int64_t)at);
                    panel[(size_t)i * MM_COLS + c] = w;
                }
    }
}

/* One tile, portable C: acc[j][c] = fmaf(xp[i][j], panel[i][c], acc[j][c]) for i = 0 .. in-1, continuing the chains
 * already in acc (zeros for a fresh start); xp [in][MM_ROWS], panel [in][MM_COLS]; next is the AVX-512 tile's. */
static void mm_tile_portable(float acc[MM_ROWS][MM_COLS], const float *xp, const float *panel, int in,
                             const float *next) {
    (void)next;
    for (int i = 0; i < in; i++)
        for (int j = 0; j < MM_ROWS; j++)
            for (int c = 0; c < MM_COLS; c++)
                acc[j][c] = fmaf(xp[(size_t)i * MM_ROWS + j], panel[(size_t)i * MM_COLS + c], acc[j][c]);
}

/* The same tile with AVX2 + FMA, compiled for them whatever the build's flags, called only where the CPU has them:
 * a quarter at a time, 3 rows x 32 outputs in 16 registers of 8 lanes (12 accumulators, 4 weight vectors and a
 * broadcast x); a step is 4 weight loads, 3 broadcasts and 12 FMAs, 12 chains where two FMA units need 8. */
#ifdef RX_X86
__attribute__((target("avx2,fma")))
static void mm_tile_avx2(float acc[MM_ROWS][MM_COLS], const float *xp, const float *panel, int in, const float *next) {
    enum { ROWS = 3, COLS = 32, NV = COLS / 8 };
    (void)next;
    for (int j0 = 0; j0 < MM_ROWS; j0 += ROWS)
        for (int c0 = 0; c0 < MM_COLS; c0 += COLS) {
            __m256 a[ROWS * NV];                                    /* a[j * NV + v]: row j0 + j, c0 + 8v.. */
#pragma GCC unroll 12
            for (int k = 0; k < ROWS * NV; k++) a[k] = _mm256_loadu_ps(acc[j0 + k / NV] + c0 + 8 * (k % NV));
            for (int i = 0; i < in; i++) {
                __m256 w[NV];                                       /* W[o0 + c0+8v .. o0 + c0+8v+7][i] */
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) w[v] = _mm256_loadu_ps(panel + (size_t)i * MM_COLS + c0 + 8 * v);
#pragma GCC unroll 12
                for (int k = 0; k < ROWS * NV; k++)                    /* x of row j0 + k / NV, broadcast */
                    a[k] = _mm256_fmadd_ps(_mm256_set1_ps(xp[(size_t)i * MM_ROWS + j0 + k / NV]), w[k % NV], a[k]);
            }
#pragma GCC unroll 12
            for (int k = 0; k < ROWS * NV; k++) _mm256_storeu_ps(acc[j0 + k / NV] + c0 + 8 * (k % NV), a[k]);
        }
}

/* And with AVX-512, the whole tile at once: 24 accumulators of 16 lanes (6 rows x 4 registers), a step 4 weight
 * loads, 6 broadcasts and 24 FMAs: as few loads per FMA as 32 registers allow (a 6 x 32 tile has 8 for 12), because
 * on an Intel Xeon each load in the loop slows the FMAs (docs/results.md). */
__attribute__((target("avx512f")))
static void mm_tile_avx512(float acc[MM_ROWS][MM_COLS], const float *xp, const float *panel, int in,
                           const float *next) {
    enum { NV = MM_COLS / 16 };
    __m512 a[MM_ROWS * NV];                                     /* a[j * NV + v]: row j, outputs 16v .. 16v+15 */
#pragma GCC unroll 24
    for (int k = 0; k < MM_ROWS * NV; k++) a[k] = _mm512_loadu_ps(acc[k / NV] + 16 * (k % NV));
    for (int i = 0; i < in; i++) {
        if (next && i % 2 == 0) _mm_prefetch((const char *)(next + 8 * (size_t)i), _MM_HINT_T1);
        __m512 w[NV];                                               /* W[o0 + 16v .. o0 + 16v+15][i] */
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) w[v] = _mm512_loadu_ps(panel + (size_t)i * MM_COLS + 16 * v);
#pragma GCC unroll 24
        for (int k = 0; k < MM_ROWS * NV; k++)                         /* x of row k / NV, broadcast */
            a[k] = _mm512_fmadd_ps(_mm512_set1_ps(xp[(size_t)i * MM_ROWS + k / NV]), w[k % NV], a[k]);
    }
#pragma GCC unroll 24
    for (int k = 0; k < MM_ROWS * NV; k++) _mm512_storeu_ps(acc[k / NV] + 16 * (k % NV), a[k]);
}
#endif

static void exp_row_portable(float *y, const float *x, float a, float b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = exp_one(fmaf(a, x[i], b));
}

#ifdef RX_X86
__attribute__((target("avx2,fma")))
static void exp_row_avx2(float *y, const float *x, float a, float b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_loadu_ps(x + i), _mm256_set1_ps(b));
        __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
        __m256 nf = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-0.693359375f), c);
        r = _mm256_fmadd_ps(nf, _mm256_set1_ps(2.12194440e-4f), r);
        __m256 p = _mm256_set1_ps(EXP_P[0]);
        for (int k = 1; k < 6; k++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P[k]));
        __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
        __m256i ni = _mm256_cvtps_epi32(nf), h = _mm256_srai_epi32(ni, 1), bias = _mm256_set1_epi32(127);
        __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
        __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
        e = _mm256_mul_ps(_mm256_mul_ps(e, s1), s2);
        e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(v, _mm256_set1_ps(EXP_HI), _CMP_GT_OQ));
        e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(v, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ));
        _mm256_storeu_ps(y + i, _mm256_blendv_ps(e, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    }
    exp_row_portable(y + i, x + i, a, b, n - i);
}
#endif

/* ----------------------------------------------------------- part iii: the cpu paths (RADIXMLP_CPU), the fast ops */
typedef void (*MmTile)(float acc[MM_ROWS][MM_COLS], const float *xp, const float *panel, int in, const float *next);
typedef void (*ExpRow)(float *y, const float *x, float a, float b, size_t n);
/* The paths, narrowest first: "definition" runs Part I's definitions on one thread (its tables' entries serve only
 * the public packed matmul and exp, called on their own); the exponential (1% of a forward) stays on AVX2 in the
 * AVX-512 path. */
static const char *const CPU_PATHS[] = {"definition", "portable", "avx2", "avx512"};
#ifdef RX_X86
static const MmTile MM_TILES[] = {mm_tile_portable, mm_tile_portable, mm_tile_avx2, mm_tile_avx512};
static const ExpRow EXP_ROWS[] = {exp_row_portable, exp_row_portable, exp_row_avx2, exp_row_avx2};
#else
static const MmTile MM_TILES[] = {mm_tile_portable, mm_tile_portable};
static const ExpRow EXP_ROWS[] = {exp_row_portable, exp_row_portable};
#endif
static int cpu_path = -1;                   /* the path in effect, an index into those; -1 until rx_cpu_path picks */
static MmTile mm_tile;
static ExpRow exp_row;

static int cpu_can(int p) {                 /* can this CPU run path p? */
    if (p >= (int)(sizeof MM_TILES / sizeof MM_TILES[0])) return 0;
#ifdef RX_X86
    if (p >= 2 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0;
    if (p >= 3 && !__builtin_cpu_supports("avx512f")) return 0;
#endif
    return 1;
}

const char *rx_cpu_path(const char *want) {
    const char *env = getenv("RADIXMLP_CPU"), *who = want ? "rx_cpu_path" : "RADIXMLP_CPU";
    if (!want && cpu_path >= 0) return CPU_PATHS[cpu_path];
    if (!want) want = env && *env ? env : "auto";
    int p = 3;
    if (!strcmp(want, "auto"))                          /* the widest: never the definition, always slower */
        while (!cpu_can(p)) p--;
    else {
        while (p >= 0 && strcmp(want, CPU_PATHS[p])) p--;
        if (p < 0) {
            rx_fail("%s: no CPU path \"%s\" (auto, definition, portable, avx2 or avx512)", who, want);
            return NULL;
        }
        if (!cpu_can(p)) {
            rx_fail("%s: this CPU cannot run the %s path", who, want);
            return NULL;
        }
    }
    cpu_path = p;
    mm_tile = MM_TILES[p];
    exp_row = EXP_ROWS[p];
    return CPU_PATHS[p];
}

/* The environment every program checks at start, before any work: $RADIXMLP_CPU (rx_cpu_path) and $OMP_NUM_THREADS.
 * libgomp reads the latter in its constructor, before main: a value it cannot use ("", "abc", 0, -4) earns a warning
 * and every core, and 2147483647 it takes as given, to fail later allocating a scratch row per thread. So here it
 * must be a count from 1 to RX_MAX_THREADS, or a list of them: "4,2" sets libgomp's nested levels, and the C
 * reference never nests, so it runs on the first. */
enum { RX_MAX_THREADS = 1024 };
int rx_check_env(void) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (!rx_cpu_path(NULL)) return -1;
    for (const char *c = env; c;) {
        char *end;
        errno = 0;
        long n = strtol(c, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (end == c || errno || n < 1 || n > RX_MAX_THREADS || (*end && *end != ','))
            return rx_fail("OMP_NUM_THREADS: '%s' is not a thread count from 1 to %d (or a list of them, like 4,2: "
                           "the first counts)", env, RX_MAX_THREADS);
        c = *end == ',' ? end + 1 : NULL;
    }
    return 0;
}

static void cpu_path_ready(void) {          /* first use: $RADIXMLP_CPU (the programs check it at start), else auto */
    if (cpu_path < 0 && !rx_cpu_path(NULL)) rx_cpu_path("auto");
}

static int rx_fast(void) {
    cpu_path_ready();
    return cpu_path > 0;
}

static void exp_fast(float *y, const float *x, float a, float b, size_t n) {
    exp_row(y, x, a, b, n);
}

void rx_matmul_packed_ref(float *y, const float *x, const float *wp, int rows, int in, int out, float *xp) {
    int n_rt = (rows + MM_ROWS - 1) / MM_ROWS, n_panels = (out + MM_COLS - 1) / MM_COLS, n_pack = x ? n_rt : 0;
    cpu_path_ready();
    RX_OMP(omp parallel for schedule(static) if((double)rows * in * out >= RX_GRAIN))
    for (int t = 0; t < n_pack; t++) {                               /* x -> xp, a tile of MM_ROWS rows at a time */
        const float *xr[MM_ROWS];
        for (int j = 0; j < MM_ROWS; j++)                                      /* past the last row: repeat it */
            xr[j] = x + (size_t)(t * MM_ROWS + j < rows ? t * MM_ROWS + j : rows - 1) * in;
        pack_tile(xp + (size_t)t * in * MM_ROWS, xr, in);
    }
    for (int k0 = 0; k0 < in; k0 += MM_KC) {                          /* inputs k0 .. k0+kn-1 of every chain */
        int kn = in - k0 < MM_KC ? in - k0 : MM_KC;
        RX_OMP(omp parallel for schedule(static) if((double)rows * kn * out >= RX_GRAIN))
        for (long t = 0; t < (long)n_rt * n_panels; t++) {
            int r0 = (int)(t % n_rt) * MM_ROWS, o0 = (int)(t / n_rt) * MM_COLS;      /* panel major */
            int width = out - o0 < MM_COLS ? out - o0 : MM_COLS;                    /* < MM_COLS: the last panel */
            const float *panel = wp + (size_t)o0 * in + (size_t)k0 * MM_COLS;         /* its block, [kn][MM_COLS] */
            const float *next = o0 + MM_COLS < out ? panel + (size_t)in * MM_COLS : NULL;    /* the next panel's, */
            if (next) next += 8 * (t % n_rt % (MM_COLS / 8)) * kn;     /* this tile's share (of MM_COLS / 8) of it */
            float acc[MM_ROWS][MM_COLS] = {{0.0f}};
            for (int j = 0; j < MM_ROWS && k0 > 0; j++)         /* the chains so far, where the last block left them */
                memcpy(acc[j], y + (size_t)(r0 + j < rows ? r0 + j : rows - 1) * out + o0, sizeof(float) * width);
            mm_tile(acc, xp + (size_t)r0 * in + (size_t)k0 * MM_ROWS, panel, kn, next);
            for (int j = 0; j < MM_ROWS && r0 + j < rows; j++)
                memcpy(y + (size_t)(r0 + j) * out + o0, acc[j], sizeof(float) * (size_t)width);
        }
    }
}

/* The model's weights as the matmul reads them: every linear weight (each layer's seven, and the LM head) packed
 * into fp32 panels by the first C reference forward that runs on the model, kept with it and freed by qwen3_free:
 * 4 bytes a weight on top of the checkpoint's own (Qwen3-0.6B: 0.6 B weights with its tied head, 2.4 GB). Once per
 * model, never per call; a model only ever run on the GPU never pays it. Not safe to race: run one reference
 * forward before sharing a model between threads. */
static int pack_once(float **panels, const Qwen3Model *m, const RxTensor *W) {
    float **wp = &panels[W - m->tensors];             /* W's entry: its index in the model's tensor table */
    if (*wp) return 0;
    /* 64-byte aligned: a panel's row is a whole number of cache lines, so no vector load of it straddles two (a
     * straddling load costs about a tenth of the AVX2 tile's rate on AMD Zen 4) */
    if (!(*wp = (float *)aligned_alloc(64, sizeof(float) * rx_packed_floats((int)W->shape[0], (int)W->shape[1]))))
        return rx_fail("out of host memory for the packed weight %s", W->name);
    rx_pack_weight(*wp, W);
    return 0;
}

static int model_pack_ref(const Qwen3Model *m) {
    float **panels = model_panels(m);                 /* [n_tensors] one entry per tensor, NULL: not packed */
    if (!panels) return rx_fail("out of host memory for the packed weights");
    if (m->lm_head && pack_once(panels, m, m->lm_head)) return -1;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Qwen3Layer *w = &m->layers[l];
        const RxTensor *linear[] = {w->q_proj, w->k_proj, w->v_proj, w->o_proj, w->gate_proj, w->up_proj,
                                    w->down_proj};
        for (int k = 0; k < 7; k++)
            if (pack_once(panels, m, linear[k])) return -1;
    }
    return 0;
}

/* linear_ref on W's panels (model_pack_ref), x packed into xp on the way. */
static void linear_fast(float *y, const float *x, const Qwen3Model *m, const RxTensor *W, int rows, float *xp) {
    const float *wp = model_panels(m)[W - m->tensors];
    rx_matmul_packed_ref(y, x, wp, rows, (int)W->shape[1], (int)W->shape[0], xp);
}

/* The floats a forward's packed x needs (RefActs.xp): rows of the widest matmul input, hidden, n_heads*head_dim or
 * intermediate, in tiles of MM_ROWS. */
static size_t fast_x_floats(const Qwen3Config *c, int rows) {
    int in = c->hidden_size;
    if (c->n_heads * c->head_dim > in) in = c->n_heads * c->head_dim;
    if (c->intermediate_size > in) in = c->intermediate_size;
    return rx_packed_x_floats(rows, in);
}

/* acts_alloc's fast half: m's weights in panels (once per model), and xp for the most rows, n_x, a matmul of the
 * forward takes (RefActs). */
static int acts_alloc_fast(RefActs *a, const Qwen3Model *m, int n_x) {
    a->xp = floats(fast_x_floats(&m->cfg, n_x));
    if (!a->xp) return rx_fail("out of host memory for the packed inputs of %d rows", n_x);
    return model_pack_ref(m);
}

static void rmsnorm_fast(float *out, const float *x, const float *w, int rows, int dim, float eps) {
    RX_OMP(omp parallel for schedule(static) if((size_t)rows * dim >= RX_GRAIN))
    for (int r = 0; r < rows; r++) rmsnorm_row(out + (size_t)r * dim, x + (size_t)r * dim, w, dim, eps);
}

static void qk_norm_rope_fast(float *x, const float *w, const float *cos_t, const float *sin_t, int rows, int n_heads,
                              int head_dim, float eps) {
    const size_t half = (size_t)head_dim / 2;
    RX_OMP(omp parallel for schedule(static) if((size_t)rows * n_heads * head_dim >= RX_GRAIN))
    for (int r = 0; r < rows; r++)
        qk_norm_rope_row(x + (size_t)r * n_heads * head_dim, w, cos_t + r * half, sin_t + r * half, n_heads, head_dim,
                         eps);
}

/* rx_silu_mul_ref, 256 at a time through the vector exp: exp(-g) = exp_one(fmaf(-1, g, 0)), the same number. */
static void silu_mul_fast(float *out, const float *gate, const float *up, size_t n) {
    RX_OMP(omp parallel for schedule(static) if(n >= RX_GRAIN))
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        float e[256];                                           /* exp(-gate), 256 at a time */
        size_t m = n - i0 < 256 ? n - i0 : 256;
        exp_row(e, gate + i0, -1.0f, 0.0f, m);
        for (size_t i = i0; i < i0 + m; i++) out[i] = gate[i] / (1.0f + e[i - i0]) * up[i];
    }
}

/* trie_build with Algorithm 2's two refinements (the trie section): a batch that shares nothing skips the trie, and
 * branch points are hashed. The same maps as the definition (trie/random_batches_match_bruteforce_oracle). */
static int trie_build_fast(RadixIndex *ix, const int32_t *ids, const int32_t *pos, const int32_t *cu, int n_seqs) {
    const int n = n_seqs ? cu[n_seqs] : 0;                             /* N */
    const int shared = n ? trie_any_shared_start(ids, pos, cu, n_seqs) : 1;     /* refinement 2 */
    if (shared < 0) return rx_fail("radix_index_build: out of host memory");
    if (shared) return trie_fill(ix, ids, pos, cu, n_seqs, 1);        /* refinement 1 */
    if (trie_index_alloc(ix, n)) return -1;
    trie_identity(ix);
    return 0;
}

/* ---------------------------------------------------------------------------------- part iii: the tiled attention */
/* Attention for one sequence and one kv head is two matmuls, so it runs on the matmul's micro-kernel (mm_tile):
 *   scores   S [queries, len]      = Q [queries, head_dim] @ K^T  K [len, head_dim]: weight [out = keys, in = head_dim]
 *   outputs  O [queries, head_dim] = P [queries, len] @ V         V^T [head_dim, len]: weight [out = dims, in = keys]
 * where P = softmax(S * scale) row by row. Each score is therefore matmul_ref's chain of fmaf over i = 0 ..
 * head_dim-1, and each output its chain over keys j = 0 .. len-1, on every CPU path; and MM_ROWS queries (a row's
 * GQA heads, then the next rows of the same sequence) share every key and value the kernel loads, as FlashAttention
 * shares them across a block of queries. Queries of one tile may see different lengths (row g sees g - t0 + 1 keys):
 * a score past a query's own length is computed and dropped, and the value sums run in segments, each query's
 * output stored when its chain reaches its own length, so no later key (a NaN, say) ever reaches an earlier row.
 *
 * Keys and values are first packed, per kv head, in blocks of MM_COLS keys: keys j .. j+MM_COLS-1 of a sequence
 * (j a multiple of MM_COLS), read through kv_at, zeros past its end:
 *   kp [n_kv][n_blocks][head_dim][MM_COLS]        the block's keys as a panel of the scores' weight
 *   vp [n_kv][n_blocks][hd_pad / MM_COLS][MM_COLS][MM_COLS]   its values, a panel of MM_COLS dims at a time
 * A block is packed once however many sequences read it: two sequences whose keys j .. j+MM_COLS-1 come from the
 * same rows (compact mode's shared prefix, read through I_scatter; Part II's cached pages) share one block, so a
 * prefix of P keys read by B sequences is packed once, not B times. Each sequence keeps the list of its blocks (blk);
 * O = P V runs its chains across them, block by block, in key order: the same chains, the same bits. Memory: one copy
 * of the keys and values the batch reads (a shared block's once), in whole blocks. */
typedef struct {
    int32_t *seq_blk;   /* [n_t] at a sequence's start t0: where its blocks' list begins in blk */
    int32_t *blk;       /* [sequence blocks] each sequence's blocks, in key order: an index into the packed blocks */
    int32_t *src;       /* [n_blocks] a packed block's first key (a token), its keys src .. src+n-1 */
    int32_t *owner;     /* [rows] the first packed block whose first key is this row, -1: none */
    int32_t *chunk;     /* [n_q * group + 1] the query tiles, below */
    float *kp, *vp;     /* as above */
    float *s;           /* [threads][scratch] each thread's scores, weights and packed queries */
} AttnWork;

static int attention_free(AttnWork *w, int n_t) {
    FREE_ALL(w->seq_blk, w->blk, w->src, w->owner, w->chunk, w->kp, w->vp, w->s);
    return n_t ? rx_fail("out of host memory for attention (%d keys)", n_t) : 0;
}

/* Keys t .. t+n-1 (one sequence's) of kv head h into a block: kb [head_dim][MM_COLS], vb [hd_pad/MM_COLS][MM_COLS]
 * [MM_COLS], zeros past n keys and past head_dim dims. */
static void pack_kv_block(float *kb, float *vb, const KvView *kv, int t, int n, int h, int head_dim, int hd_pad) {
    memset(kb, 0, sizeof(float) * (size_t)head_dim * MM_COLS);
    memset(vb, 0, sizeof(float) * (size_t)hd_pad * MM_COLS);
    for (int c = 0; c < n; c++) {
        size_t row = kv_at(kv, t + c) + (size_t)h * head_dim;
        for (int i = 0; i < head_dim; i++) kb[(size_t)i * MM_COLS + c] = kv->k[row + i];
        for (int i = 0; i < head_dim; i++)                                  /* dim panel i / MM_COLS, key row c */
            vb[((size_t)(i / MM_COLS) * MM_COLS + c) * MM_COLS + i % MM_COLS] = kv->v[row + i];
    }
}

/* The blocks every sequence reads, each packed once: fills w's seq_blk, blk and src; returns the packed count, -1
 * out of memory. A block of sequence t0 .. t-1 reuses a packed one when both read the same rows, found through the
 * row of its first key (owner) and checked key by key (two blocks may start alike and part inside). */
static int attention_blocks(AttnWork *w, const KvView *kv, const int32_t *seq_start, int n_t) {
    int n_rows = 0, n_seq_blk = 0, n_blocks = 0;
    for (int t = 0; t < n_t; t++) {
        int row = (int)(kv_at(kv, t) / kv->row_stride);
        if (row + 1 > n_rows) n_rows = row + 1;
        if ((t - seq_start[t]) % MM_COLS == 0) n_seq_blk++;
    }
    w->blk = (int32_t *)malloc((size_t)n_seq_blk * sizeof(int32_t));
    w->src = (int32_t *)malloc((size_t)n_seq_blk * sizeof(int32_t));
    w->owner = (int32_t *)malloc((size_t)n_rows * sizeof(int32_t));
    if (!w->blk || !w->src || !w->owner) return -1;
    for (int r = 0; r < n_rows; r++) w->owner[r] = -1;
    for (int t = 0, at = 0; t < n_t; t++) {
        int t0 = seq_start[t], n = 0;
        if (t == t0) w->seq_blk[t0] = at;
        if ((t - t0) % MM_COLS) continue;
        while (n < MM_COLS && t + n < n_t && seq_start[t + n] == t0) n++;  /* keys t .. t+n-1: one block */
        int row = (int)(kv_at(kv, t) / kv->row_stride), b = w->owner[row], same = b >= 0;
        for (int c = 0; same && c < MM_COLS; c++) {       /* the same n keys from the same rows, and no more */
            int mine = c < n, theirs = w->src[b] + c < n_t && seq_start[w->src[b] + c] == seq_start[w->src[b]];
            same = mine == theirs && (!mine || kv_at(kv, t + c) == kv_at(kv, w->src[b] + c));
        }
        if (!same) {
            b = n_blocks++;
            w->src[b] = t;
            if (w->owner[row] < 0) w->owner[row] = b;
        }
        w->blk[at++] = b;
    }
    return n_blocks;
}

static int attention_fast(const float *q, const KvView *kv, float *out, int n_q, const int32_t *q_orig,
                          const int32_t *seq_start, int n_heads, int n_kv_heads, int head_dim) {
    int n_t = 0, longest = 1, group = n_heads / n_kv_heads, qd = n_heads * head_dim, n_chunks = 0;
    int hd_pad = (head_dim + MM_COLS - 1) / MM_COLS * MM_COLS;
    AttnWork w = {};
    if (n_q == 0) return 0;                      /* no query: nothing to read, nothing to allocate */
    for (int r = 0; r < n_q; r++) {              /* n_t: the keys anyone reads are positions 0 .. n_t-1 */
        int g = q_orig ? q_orig[r] : r;
        if (g + 1 > n_t) n_t = g + 1;
        if (g - seq_start[g] + 1 > longest) longest = g - seq_start[g] + 1;
    }
    w.seq_blk = (int32_t *)malloc((size_t)n_t * sizeof(int32_t));
    w.chunk = (int32_t *)malloc(((size_t)n_q * group + 1) * sizeof(int32_t));
    int n_blocks = w.seq_blk && w.chunk ? attention_blocks(&w, kv, seq_start, n_t) : -1;
    if (n_blocks < 0) return attention_free(&w, n_t);
    /* The queries of kv head kvh, numbered qi = r * group + (h - kvh * group), cut into tiles of at most MM_ROWS
     * consecutive ones of one sequence: tile c is queries chunk[c] .. chunk[c+1]-1 (the same cuts for each kv head). */
    for (int qi = 0; qi < n_q * group; n_chunks++) {
        int first = qi, t0 = seq_start[q_orig ? q_orig[qi / group] : qi / group];
        w.chunk[n_chunks] = first;
        while (qi < n_q * group && qi - first < MM_ROWS && seq_start[q_orig ? q_orig[qi / group] : qi / group] == t0)
            qi++;
    }
    w.chunk[n_chunks] = n_q * group;
    int n_threads = rx_threads(0), long_pad = (longest + MM_COLS - 1) / MM_COLS * MM_COLS;
    size_t scratch = (size_t)MM_ROWS * (long_pad + (head_dim > long_pad ? head_dim : long_pad));  /* per thread */
    size_t k_blk = (size_t)head_dim * MM_COLS, v_blk = (size_t)hd_pad * MM_COLS;      /* floats in a block */
    w.kp = (float *)aligned_alloc(64, sizeof(float) * (size_t)n_kv_heads * n_blocks * k_blk);   /* 128 B multiples */
    w.vp = (float *)aligned_alloc(64, sizeof(float) * (size_t)n_kv_heads * n_blocks * v_blk);
    w.s = (float *)malloc((size_t)n_threads * scratch * sizeof(float));
    if (!w.kp || !w.vp || !w.s) return attention_free(&w, n_t);
    cpu_path_ready();
    RX_OMP(omp parallel for schedule(static) if((size_t)n_blocks * MM_COLS * n_kv_heads * head_dim >= RX_GRAIN))
    for (int b = 0; b < n_blocks; b++) {
        int t = w.src[b], n = 0;
        while (n < MM_COLS && t + n < n_t && seq_start[t + n] == seq_start[t]) n++;
        for (int h = 0; h < n_kv_heads; h++)
            pack_kv_block(w.kp + ((size_t)h * n_blocks + b) * k_blk, w.vp + ((size_t)h * n_blocks + b) * v_blk, kv,
                          t, n, h, head_dim, hd_pad);
    }
    float scale = 1.0f / sqrtf((float)head_dim);
    RX_OMP(omp parallel for schedule(dynamic) if((double)n_q * n_heads * longest * head_dim >= RX_GRAIN))
    for (long task = 0; task < (long)n_kv_heads * n_chunks; task++) {
        int kvh = (int)(task / n_chunks), c = (int)(task % n_chunks), n = w.chunk[c + 1] - w.chunk[c], width = 0;
        int len[MM_ROWS], r_of[MM_ROWS], h_of[MM_ROWS];
        const float *xr[MM_ROWS];
        float *s = w.s + (size_t)rx_thread() * scratch, acc[MM_ROWS][MM_COLS];  /* S, then P [MM_ROWS][long_pad] */
        float *xp = s + (size_t)MM_ROWS * long_pad;            /* the tile's Q, then its P, side by side for mm_tile */
        for (int j = 0; j < MM_ROWS; j++) {           /* a tile of fewer than MM_ROWS repeats its last query */
            int qi = w.chunk[c] + (j < n ? j : n - 1), r = qi / group, g = q_orig ? q_orig[r] : r;
            r_of[j] = r;
            h_of[j] = kvh * group + qi % group;
            len[j] = g - seq_start[g] + 1;
            if (len[j] > width) width = len[j];
            xr[j] = q + (size_t)r * qd + (size_t)h_of[j] * head_dim;
        }
        const int32_t *blk = w.blk + w.seq_blk[seq_start[q_orig ? q_orig[r_of[0]] : r_of[0]]];  /* its blocks */
        const float *kh = w.kp + (size_t)kvh * n_blocks * k_blk, *vh = w.vp + (size_t)kvh * n_blocks * v_blk;
        pack_tile(xp, xr, head_dim);                                       /* [head_dim][MM_ROWS] */
        for (int j0 = 0; j0 < width; j0 += MM_COLS) {                      /* S = Q K^T, a block of keys at a time */
            memset(acc, 0, sizeof acc);
            mm_tile(acc, xp, kh + blk[j0 / MM_COLS] * k_blk, head_dim, NULL);
            for (int j = 0; j < MM_ROWS; j++) memcpy(s + (size_t)j * long_pad + j0, acc[j], sizeof acc[j]);
        }
        for (int j = 0; j < n; j++) {                                      /* P = softmax(S * scale), row by row */
            float *p = s + (size_t)j * long_pad, mx = -INFINITY, z = 0.0f;
            RX_SIMD
            for (int k = 0; k < len[j]; k++) p[k] *= scale;
            RX_SIMD_MAX(mx)
            for (int k = 0; k < len[j]; k++) mx = p[k] > mx ? p[k] : mx;
            exp_row(p, p, 1.0f, -mx, (size_t)len[j]);                          /* p = exp(p - mx) */
            for (int k = 0; k < len[j]; k++) z += p[k];                        /* in order: a chain */
            RX_SIMD
            for (int k = 0; k < len[j]; k++) p[k] /= z;
            for (int k = len[j]; k < width; k++) p[k] = 0.0f;              /* read, never stored (below) */
        }
        for (int j = 0; j < MM_ROWS; j++) xr[j] = s + (size_t)(j < n ? j : n - 1) * long_pad;
        pack_tile(xp, xr, width);                                          /* [width][MM_ROWS] */
        for (int i0 = 0; i0 < head_dim; i0 += MM_COLS) {                   /* O = P V, a panel of dims at a time, */
            memset(acc, 0, sizeof acc);                                    /* keys done .. next-1 at a time */
            for (int done = 0, next; done < width; done = next) {
                next = width;                              /* the next length a query of the tile stops at, */
                for (int j = 0; j < n; j++)                /* or the end of done's block */
                    if (len[j] > done && len[j] < next) next = len[j];
                if (next > done / MM_COLS * MM_COLS + MM_COLS) next = done / MM_COLS * MM_COLS + MM_COLS;
                const float *vb = vh + blk[done / MM_COLS] * v_blk + (size_t)i0 * MM_COLS;   /* [MM_COLS keys][..] */
                mm_tile(acc, xp + (size_t)done * MM_ROWS, vb + (size_t)(done % MM_COLS) * MM_COLS, next - done, NULL);
                for (int j = 0; j < n; j++)
                    if (len[j] == next)
                        memcpy(out + (size_t)r_of[j] * qd + (size_t)h_of[j] * head_dim + i0, acc[j],
                               sizeof(float) * (size_t)(head_dim - i0 < MM_COLS ? head_dim - i0 : MM_COLS));
            }
        }
    }
    attention_free(&w, 0);
    return 0;
}

#ifndef RADIXMLP_HOST_ONLY
/* --------------------------------------------------------------------- part iii: the flash attention kernel (gpu) */
/* Flash attention: attention_kernel's causal attention (Part I's naive kernel) on tensor cores, FlashAttention-2 in
 * structure, for head_dim 128 (every Qwen3 model; any other head_dim runs the naive kernel). Within bf16 of the C
 * reference's attention, as the naive kernel is (gpu/flash_attention_matches_reference_in_all_index_modes,
 * gpu/flash_attention_matches_naive_at_table4_shape, gpu/forward_flash_matches_reference_table7). It takes the
 * batch as varlen query and key layouts:
 *   q, out [cu_q[S], n_heads*head_dim]   query i of sequence s is row cu_q[s] + i
 *   k, v, kv_stride, kv_row              key t of sequence s is row kv_row ? kv_row[cu_k[s] + t] : cu_k[s] + t,
 *                                        rows kv_stride elements apart (GpuKvView)
 * with Lq_s = cu_q[s+1] - cu_q[s] queries and Lk_s = cu_k[s+1] - cu_k[s] keys. The queries are the *last* Lq_s
 * positions of the sequence: query i sits at key position (Lk_s - Lq_s) + i and sees keys 0 .. that position.
 *   baseline  cu_q = cu_k = cu_seqlens, kv_row = NULL           (N rows)
 *   radix     the same, on the scattered N rows, then the gather (the paper)
 *   compact   cu_k = cu_seqlens, kv_row = I_scatter, cu_q from radix_compact_cu_q (Lq_s = L_s - p_s): the whole
 *             (token, position) history of every query is read through I_scatter, with no copy.
 *
 * One CTA of 4 warps per (query tile of BM rows, head). BM is a template parameter, 64 or 128, chosen per launch
 * (flash_block_m); warp w owns the m16 fragments f < BM / 64 of 16 query rows each, rows 64f + 16w .. 64f + 16w + 15
 * of the tile: one fragment at BM = 64, two at BM = 128 (FlashAttention-2's split for head_dim 128, below). With
 * BM = 64, a sequence with Lk = 300 keys whose first p_s = 64 positions are shared has Lq = 236 queries in compact
 * mode, at key positions 64..299:
 *
 *                                       key tiles of BN = 64, from key position 0
 *                                       0        64       128      192      256   300
 *    query tile 0 (positions  64..127)  |########|##\     |        |        |      |
 *    query tile 1 (positions 128..191)  |########|########|##\     |        |      |
 *    query tile 2 (positions 192..255)  |########|########|########|##\     |      |
 *    query tile 3 (positions 256..299)  |########|########|########|########|#\    |
 *
 *    #: every key visible, no mask.  ##\: the diagonal tile, keys t > pos masked.  Blank: never loaded.
 * In baseline the same sequence has 5 query tiles (positions 0..299) over the same key tiles. Where query tiles do not
 * start at a multiple of 64 (p_s = 40, say) a tile's diagonal crosses two key tiles, and both are masked.
 *
 * For each key tile, up to the diagonal of the tile's last query:
 *   S = Q K^T        [16 x 64] per fragment: mma.sync m16n8k16 (bf16 in, fp32 out), Q's fragments held in
 *                    registers (BM 64) or reread from shared memory (BM 128: flash_tile says why)
 *   online softmax   per row, in fp32 and base 2: x = S * log2(e)/sqrt(d), m = max(m, max x), rescale the running
 *                    sum l and the output O by 2^(m_old - m), p = 2^(x - m)
 *   O += P V         P rounded to bf16 straight from the registers: the mma's accumulator layout for S is its operand
 *                    layout for P, so P never goes through memory; V is read with ldmatrix.trans
 * K and V tiles come in through cp.async into two shared-memory buffers: tile j+1 loads while tile j is computed.
 * Two, not three: a third K, V buffer (34 KiB) would make BM = 128's 102 KiB 136 KiB, one CTA per SM on an H100
 * instead of two (the resource gate's table).
 *
 * The split (FlashAttention-2's, tutorial §10): each K or V fragment a warp reads from shared memory (ldmatrix) feeds
 * one pair of MMAs per query fragment the warp owns. At BM = 64 a 16-row warp reads the whole 64-key tile of K and V,
 * 32 KiB, for 16 rows; at BM = 128 the same 32 KiB (and 8 KiB of Q) serve 32 rows: 1.25 KiB of shared memory per
 * row and key tile instead of 2, the traffic that bounds BM = 64. The price: twice the registers for O and S, and
 * half as many CTAs, which a short batch cannot fill the GPU with (flash_block_m).
 * Work is listed longest first (flash_tiles): the query tiles with the most key tiles start first, the short ones
 * fill in at the end.
 *
 * radix == compact, bit for bit, as with the naive kernel: a query's row sees the same q, the same keys in the same
 * tiles (anchored at position 0, not at the query tile) and so the same arithmetic, whichever rows share its CTA. A
 * CTA may run key tiles beyond a row's diagonal (its last row's diagonal is further on); there every element of the
 * row is masked, so the max does not move (rescale 2^0 = 1 exactly) and p = 2^-inf = 0 exactly: the row is unchanged.
 * For the same reason BM = 128 equals BM = 64 bit for bit (gpu/flash_attention_bm128_equals_bm64_bit_for_bit).
 * Query rows past the sequence's end and keys past Lk are zero-filled by cp.async: finite, and dropped or masked. */
enum { FLASH_D = 128, FLASH_BN = 64, FLASH_WARPS = 4 };      /* head_dim, the key tile, warps per CTA */
typedef struct { int32_t seq, tile, key_tiles; } FlashTile;   /* one CTA's work: query tile `tile` of sequence seq */
/* The kernel's dynamic shared memory, bf16, as element offsets: Q [BM][D+8], then K and V, each [2][BN][D+8] (the
 * two buffers above); END elements in all. The launch passes flash_smem_bytes(BM), its
 * own count: the resource gate (`make resource-gate`, run by `make test`) fails where the two disagree. */
template <int D, int BM> struct FlashSmem {
    enum { SROW = D + 8, Q = 0, K = Q + BM * SROW, V = K + 2 * FLASH_BN * SROW, END = V + 2 * FLASH_BN * SROW };
};
static int flash_smem_bytes(int bm) {   /* Q, 2 x (K, V), bf16: 85 KiB at BM = 64, 102 KiB at BM = 128 */
    return (bm + 4 * FLASH_BN) * (FLASH_D + 8) * 2;
}

static __device__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
/* 16 bytes global -> shared, asynchronously; with ok == 0 nothing is read and the 16 bytes become zeros. */
static __device__ void cp_async16(void *dst, const void *src, int ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(ok ? 16 : 0));
}
static __device__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
static __device__ void cp_async_wait_all_but_1(void) { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
/* Four 8x8 bf16 matrices from shared memory; lanes 8j..8j+7 give the row addresses of matrix j (as smem_u32 gives
 * them: 32 bits, where a generic pointer takes two registers), and lane l receives elements (l/4, 2(l%4)..+1) of each
 * (with .trans: the transposed matrix). */
static __device__ void ldmatrix_x4(uint32_t r[4], unsigned row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
}
static __device__ void ldmatrix_x4_trans(uint32_t r[4], unsigned row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
}
/* c [16 x 8] += a [16 x 16] b [16 x 8], bf16 in, fp32 accumulate. With g = lane/4, q = lane%4, lane holds
 *   a: a[0] = A[g][2q..2q+1], a[1] = A[g+8][2q..], a[2] = A[g][2q+8..], a[3] = A[g+8][2q+8..]   (bf16 pairs)
 *   b: b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g]                                             (bf16 pairs)
 *   c: c[0..1] = C[g][2q..2q+1], c[2..3] = C[g+8][2q..2q+1]                                   (fp32)        */
static __device__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ uint32_t pack_bf16(float lo, float hi) {   /* two bf16 in one register, lo in the low half */
    __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);          /* each rounded to nearest even, as to_bf16 */
    uint32_t r;
    memcpy(&r, &p, sizeof r);
    return r;
}

/* Key tile t0 .. t0+BN-1 of one sequence into sK, sV [BN][D + 8] (bf16), columns kv_col .. kv_col+D-1 of the key
 * rows. The 8 padding elements per row shift consecutive rows by 16 bytes, so the 8 row addresses of an ldmatrix hit
 * 8 different groups of banks. Each thread copies 16-byte chunks of BN / 8 rows and reads each of those rows' kv_row
 * entry once per tile, for K and V both; the stride is a constant, so the loop unrolls and those loads issue
 * together, ahead of the copies. Staging kv_row in shared memory would add a barrier and take no load away (each
 * row's entry is needed by the 16 threads that copy its chunks). */
template <int D>
static __device__ void flash_load_kv(bf16 *sK, bf16 *sV, const bf16 *k, const bf16 *v, const int32_t *kv_row,
                                     int k0, int Lk, int t0, int64_t kv_stride, int kv_col) {
    for (int c = threadIdx.x; c < FLASH_BN * (D / 8); c += FLASH_WARPS * 32) {
        int r = c / (D / 8), col = c % (D / 8) * 8, t = t0 + r, ok = t < Lk;
        int64_t row = !ok ? 0 : kv_row ? kv_row[k0 + t] : k0 + t;      /* the prefix may come from any sequence */
        cp_async16(sK + r * (D + 8) + col, k + row * kv_stride + kv_col + col, ok);
        cp_async16(sV + r * (D + 8) + col, v + row * kv_stride + kv_col + col, ok);
    }
}

/* One warp's work on one key tile: its F query fragments of 16 rows (F = BM / 64; fragment f: rows 64f .. 64f+15 of
 * sQw, the tile's Q from the warp's first row on) against keys j*BN .. j*BN+BN-1 (Kj, Vj in shared memory), updating
 * each fragment's running max m, sum l and output O of its rows g and g+8 (g = lane/4). Every K and V fragment read
 * from shared memory feeds 2F MMAs. Q: with F = 1 the warp's 16 rows stay in registers for all key tiles (qa, 32 of
 * them); with F = 2 they would take 64 beside O's 128 and S's 64, over the 255 a thread may have, so each 16-column
 * slice of Q is reread from shared memory (8 KiB per tile beside K and V's 32), as FlashAttention-2 does. pos: the key
 * position of row g of fragment 0 (fragment f's: pos + 64f); first_pos: the key position of the CTA's first query (no
 * key of the tile after it: no mask needed). */
template <int D, int F>
static __device__ void flash_tile(const uint32_t qa[][4], const bf16 *sQw, float o[F][D / 8][4], float m_run[F][2],
                                  float l_run[F][2], const bf16 *Kj, const bf16 *Vj, int j, int pos, int first_pos,
                                  float scale_log2) {
    enum { SROW = D + 8, NT = FLASH_BN / 8, DT = D / 8 };
    const int lane = threadIdx.x % 32, tq = lane % 4;
    /* Each lane's row address in Q, K and V for its ldmatrix; the matrices' are these plus constant byte offsets. */
    const unsigned qs = smem_u32(sQw + lane % 16 * SROW + lane / 16 * 8);
    const unsigned ks = smem_u32(Kj + (lane % 8 + lane / 16 * 8) * SROW + (lane / 8) % 2 * 8);
    const unsigned vs = smem_u32(Vj + (lane % 8 + (lane / 8) % 2 * 8) * SROW + lane / 16 * 8);
    float sc[F][NT][4];                            /* S = Q K^T [16 x BN] per fragment: element e of n is key */
    for (int f = 0; f < F; f++)                    /* 8n + 2tq + (e & 1), row g + 8 (e >> 1) */
        for (int n = 0; n < NT; n++) sc[f][n][0] = sc[f][n][1] = sc[f][n][2] = sc[f][n][3] = 0.0f;
#pragma unroll   /* every loop here, in full: a register array indexed by a run-time counter would live in memory */
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[F][4];                          /* Q's columns 16kk .. 16kk+15 of each fragment */
        for (int f = 0; f < F; f++) {
            if (F == 1)
                for (int i = 0; i < 4; i++) a[f][i] = qa[kk][i];
            else
                ldmatrix_x4(a[f], qs + 2 * (64 * f * SROW + 16 * kk));
        }
        for (int n = 0; n < NT; n += 2) {          /* K [key][dim] is B^T, as the mma wants B: no .trans */
            uint32_t b[4];
            ldmatrix_x4(b, ks + 2 * (8 * n * SROW + 16 * kk));
            for (int f = 0; f < F; f++) {          /* one read of K, F pairs of MMAs */
                mma_bf16_16816(sc[f][n], a[f], b[0], b[1]);
                mma_bf16_16816(sc[f][n + 1], a[f], b[2], b[3]);
            }
        }
    }
    /* Causal mask: keys after a row's position. BM 64 skips it on tiles wholly before the CTA's first query; BM 128
     * masks every tile, since the second, unmasked copy of the loops that the skip makes does not fit in 255
     * registers (the resource gate sees spills). */
    const int masked = F == 2 || (j + 1) * FLASH_BN - 1 > first_pos;
    for (int f = 0; f < F; f++)
        for (int n = 0; n < NT; n++)
            for (int e = 0; e < 4; e++) {
                int t = j * FLASH_BN + 8 * n + 2 * tq + (e & 1);
                sc[f][n][e] = masked && t > pos + 64 * f + 8 * (e >> 1) ? -INFINITY : sc[f][n][e] * scale_log2;
            }

#pragma unroll
    for (int f = 0; f < F; f++)
        for (int r = 0; r < 2; r++) {              /* online softmax of rows g (r = 0) and g + 8 (r = 1) */
            float mx = m_run[f][r];
            for (int n = 0; n < NT; n++) mx = fmaxf(mx, fmaxf(sc[f][n][2 * r], sc[f][n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));   /* a row lives in the 4 lanes of a quad */
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float base = mx == -INFINITY ? 0.0f : mx;        /* no key yet: 2^(-inf - 0) = 0, not NaN */
            const float rescale = exp2f(m_run[f][r] - base);       /* 1 exactly when the max did not move */
            m_run[f][r] = mx;
            l_run[f][r] *= rescale;
            for (int n = 0; n < DT; n++) {
                o[f][n][2 * r] *= rescale;
                o[f][n][2 * r + 1] *= rescale;
            }
            for (int n = 0; n < NT; n++)
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    sc[f][n][e] = exp2f(sc[f][n][e] - base);       /* masked: 2^-inf = 0 exactly */
                    l_run[f][r] += sc[f][n][e];
                }
        }

#pragma unroll
    for (int kc = 0; kc < FLASH_BN / 16; kc++) {  /* O += P V, 16 keys at a time; S's accumulators become P's A */
        uint32_t pa[F][4];
        for (int f = 0; f < F; f++) {
            pa[f][0] = pack_bf16(sc[f][2 * kc][0], sc[f][2 * kc][1]);
            pa[f][1] = pack_bf16(sc[f][2 * kc][2], sc[f][2 * kc][3]);
            pa[f][2] = pack_bf16(sc[f][2 * kc + 1][0], sc[f][2 * kc + 1][1]);
            pa[f][3] = pack_bf16(sc[f][2 * kc + 1][2], sc[f][2 * kc + 1][3]);
        }
        for (int n = 0; n < DT; n += 2) {          /* V [key][dim] is B itself: ldmatrix .trans */
            uint32_t b[4];
            ldmatrix_x4_trans(b, vs + 2 * (16 * kc * SROW + 8 * n));
            for (int f = 0; f < F; f++) {          /* one read of V, F pairs of MMAs */
                mma_bf16_16816(o[f][n], pa[f], b[0], b[1]);
                mma_bf16_16816(o[f][n + 1], pa[f], b[2], b[3]);
            }
        }
    }
}

/* One CTA: query tile tiles[blockIdx.x / n_heads] (flash_tiles, made for this BM) of head blockIdx.x % n_heads. */
template <int D, int BM>
static __device__ void flash_attention_cta(bf16 *smem, bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v,
                                           int64_t kv_stride, const int32_t *kv_row, const int32_t *cu_q,
                                           const int32_t *cu_k, const FlashTile *tiles, int n_heads, int n_kv_heads,
                                           float scale_log2) {
    enum { SROW = D + 8, DT = D / 8, F = BM / 64 };
    static_assert(BM == 64 || BM == 128, "a warp owns one or two m16 fragments of the query tile");
    bf16 *sQ = smem + FlashSmem<D, BM>::Q, *sK = smem + FlashSmem<D, BM>::K, *sV = smem + FlashSmem<D, BM>::V;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int tile = blockIdx.x / n_heads, h = blockIdx.x % n_heads, kvh = h / (n_heads / n_kv_heads);   /* GQA */
    const int s = tiles[tile].seq, m0 = tiles[tile].tile * BM;            /* sequence, first query of the tile */
    const int q0 = cu_q[s], Lq = cu_q[s + 1] - q0, k0 = cu_k[s], Lk = cu_k[s + 1] - k0, off = Lk - Lq;
    const int key_end = min(Lk, off + min(m0 + BM, Lq));         /* keys 0 .. the last query's position */
    const int n_kt = (key_end + FLASH_BN - 1) / FLASH_BN;
    const int64_t q_stride = (int64_t)n_heads * D;

    /* The copies go in groups of one key tile each: Q with tile 0, then tile 1; tile j + 2 is asked for when tile j
     * is done (below), so one tile is always on its way while another is computed. */
    for (int c = threadIdx.x; c < BM * (D / 8); c += FLASH_WARPS * 32) {
        int r = c / (D / 8), col = c % (D / 8) * 8, ok = m0 + r < Lq;
        cp_async16(sQ + r * SROW + col, q + (ok ? (q0 + m0 + r) * q_stride : 0) + h * D + col, ok);
    }
    for (int j = 0; j < 2; j++) {
        if (j < n_kt)
            flash_load_kv<D>(sK + j * FLASH_BN * SROW, sV + j * FLASH_BN * SROW, k, v, kv_row, k0, Lk, j * FLASH_BN,
                             kv_stride, kvh * D);
        cp_async_commit();
    }

    uint32_t qa[D / 16][4];                        /* BM 64: this warp's 16 query rows, as mma A fragments */
    float o[F][DT][4];                             /* O [16 x D] per fragment: DT accumulators of 16 x 8 */
    float m_run[F][2], l_run[F][2];                /* rows g and g+8 of each fragment: max (log2 units), sum */
#pragma unroll   /* as in flash_tile: o and the others stay in registers only where every index is a constant */
    for (int f = 0; f < F; f++) {
        m_run[f][0] = m_run[f][1] = -INFINITY;
        l_run[f][0] = l_run[f][1] = 0.0f;
        for (int n = 0; n < DT; n++) o[f][n][0] = o[f][n][1] = o[f][n][2] = o[f][n][3] = 0.0f;
    }
    const int pos = off + m0 + 16 * warp + g;     /* key position of row g of fragment 0; row g+8: pos + 8 */
    int warp_last = -1;                            /* the key position of this warp's last row in the sequence */
    for (int f = 0; f < F; f++)                    /* (-1: it has none) */
        if (m0 + 64 * f + 16 * warp < Lq) warp_last = off + min(m0 + 64 * f + 16 * warp + 16, Lq) - 1;

    for (int j = 0; j < n_kt; j++) {
        cp_async_wait_all_but_1();                 /* this thread's copies of tile j (and Q) have landed; */
        __syncthreads();                           /* and every other thread's */
        if (F == 1 && j == 0)
            for (int kk = 0; kk < D / 16; kk++)
                ldmatrix_x4(qa[kk], smem_u32(sQ + (16 * warp + lane % 16) * SROW + 16 * kk + lane / 16 * 8));
        if (warp_last >= 0 && j * FLASH_BN <= warp_last)   /* else the whole tile is masked for this warp: a no-op */
            flash_tile<D, F>(qa, sQ + 16 * warp * SROW, o, m_run, l_run, sK + j % 2 * FLASH_BN * SROW,
                             sV + j % 2 * FLASH_BN * SROW, j, pos, off + m0, scale_log2);
        __syncthreads();                           /* all warps are done with buffer j % 2 before it is refilled */
        if (j + 2 < n_kt)                          /* here, where only O is live: fewer registers than at the top */
            flash_load_kv<D>(sK + j % 2 * FLASH_BN * SROW, sV + j % 2 * FLASH_BN * SROW, k, v, kv_row, k0, Lk,
                             (j + 2) * FLASH_BN, kv_stride, kvh * D);
        cp_async_commit();                         /* a group every time, empty or not: wait_group 1 above then */
    }                                              /* always leaves exactly tile j + 1 in flight */

#pragma unroll
    for (int f = 0; f < F; f++)
        for (int r = 0; r < 2; r++) {              /* out = O / l, rows of this sequence only */
            float l = l_run[f][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            int i = m0 + 64 * f + 16 * warp + g + 8 * r;
            if (i >= Lq) continue;
            bf16 *orow = out + (q0 + i) * q_stride + h * D + 2 * tq;
            for (int n = 0; n < DT; n++) {
                orow[8 * n] = to_bf16(o[f][n][2 * r] / l);
                orow[8 * n + 1] = to_bf16(o[f][n][2 * r + 1] / l);
            }
        }
}
/* The kernel, one per query tile height: flash_attention_d128_kernel<64> and <128> (what cudaFuncSetAttribute and a
 * profiler name). BM = 128 needs every one of a thread's 255 registers; ptxas fits it for sm_90 (H100, H200) but
 * spills for sm_80 (A100), so there it is built empty and never launched (flash_block_m: FLASH_BM128_ARCH). */
#define FLASH_BM128_ARCH 900   /* __CUDA_ARCH__ from which BM = 128 is built: compute capability 9.0 */
template <int BM>
__global__ void __launch_bounds__(FLASH_WARPS * 32)
flash_attention_d128_kernel(bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, int64_t kv_stride,
                            const int32_t *kv_row, const int32_t *cu_q, const int32_t *cu_k, const FlashTile *tiles,
                            int n_heads, int n_kv_heads, float scale_log2) {
    extern __shared__ __align__(16) bf16 smem[];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < FLASH_BM128_ARCH
    if (BM == 128) return;
#endif
    flash_attention_cta<FLASH_D, BM>(smem, out, q, k, v, kv_stride, kv_row, cu_q, cu_k, tiles, n_heads, n_kv_heads,
                                     scale_log2);
}

/* The query tile height of one launch, BM = 64 or 128 (kernel RX_ATTN_FLASH_BM64 or _BM128: that one), or -1 on a
 * CUDA error. BM = 128 reads half the shared memory per FLOP (the split, above), but makes half as many CTAs, and
 * wastes more rows on a sequence that ends inside a tile: a launch with fewer CTAs than the GPU holds at once leaves
 * SMs idle, and short batches (P = 1 shapes of a few sequences, a decode step, the tests) make such launches. The
 * rule: BM = 128 when its launch fills at least one wave, as many CTAs as the device holds at once (SMs x CTAs of
 * BM = 128 per SM, from the occupancy calculator: 2 on an H100 or H200, where BM = 64 also runs 2, both bound by
 * shared memory); BM = 64 otherwise, and always below compute capability 9 (A100: FLASH_BM128_ARCH). A model, to be
 * checked by `bench --attention`, which times both. */
static int flash_block_m(RxAttention kernel, const int32_t *cu_q, int n_seqs, int n_heads) {
    if (kernel == RX_ATTN_FLASH_BM64) return 64;
    int dev, cc, n_sm, per_sm;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
    const int built = cc >= FLASH_BM128_ARCH / 100;   /* the BM = 128 kernel is built for this device */
    if (kernel == RX_ATTN_FLASH_BM128 && !built)
        return rx_fail("the flash kernel's 128-row query tile is built for compute capability %d.0 and newer; this "
                       "device has %d.x (use RX_ATTN_FLASH or RX_ATTN_FLASH_BM64)", FLASH_BM128_ARCH / 100, cc);
    if (kernel == RX_ATTN_FLASH_BM128) return 128;
    if (!built) return 64;
    int64_t ctas = 0;                                  /* the BM = 128 launch: query tiles x heads */
    for (int s = 0; s < n_seqs; s++) ctas += (cu_q[s + 1] - cu_q[s] + 127) / 128 * (int64_t)n_heads;
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaFuncSetAttribute(flash_attention_d128_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    flash_smem_bytes(128)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)flash_attention_d128_kernel<128>,
                                                             FLASH_WARPS * 32, flash_smem_bytes(128)));
    return per_sm > 0 && ctas >= (int64_t)n_sm * per_sm ? 128 : 64;
}
int gpu_flash_block_m(RxAttention kernel, const int32_t *cu_q, int n_seqs, int n_heads) {
    if (!gpu_available()) return -1;
    return flash_block_m(kernel, cu_q, n_seqs, n_heads);
}

/* The flash kernel's work list for query tiles of bm rows, *tiles [n_tiles] in device memory: every query tile of
 * every sequence with queries, the ones with the most key tiles first (ties in batch order). */
static int cmp_flash_tile(const void *a, const void *b) {
    const FlashTile *x = (const FlashTile *)a, *y = (const FlashTile *)b;
    if (x->key_tiles != y->key_tiles) return y->key_tiles - x->key_tiles;
    return x->seq != y->seq ? x->seq - y->seq : x->tile - y->tile;
}
static int flash_tiles(const int32_t *cu_q, const int32_t *cu_k, int n_seqs, int bm, FlashTile **tiles,
                       int *n_tiles) {
    int n = 0;
    for (int s = 0; s < n_seqs; s++) n += (cu_q[s + 1] - cu_q[s] + bm - 1) / bm;
    FlashTile *t = (FlashTile *)rx_alloc((size_t)n * sizeof(FlashTile), "the flash attention work list");
    if (!t) return -1;
    n = 0;
    for (int s = 0; s < n_seqs; s++) {
        int Lq = cu_q[s + 1] - cu_q[s], Lk = cu_k[s + 1] - cu_k[s];
        for (int m = 0; m * bm < Lq; m++) {
            int key_end = Lk - Lq + (Lq < (m + 1) * bm ? Lq : (m + 1) * bm);
            FlashTile ft = {.seq = s, .tile = m, .key_tiles = (key_end + FLASH_BN - 1) / FLASH_BN};
            t[n++] = ft;
        }
    }
    qsort(t, n, sizeof *t, cmp_flash_tile);
    *n_tiles = n;
    *tiles = NULL;
    int rc = n && (dev_alloc((void **)tiles, (size_t)n * sizeof *t, "the flash attention work list [%d tiles]", n) ||
                   cuda_copy(*tiles, t, (size_t)n * sizeof *t, cudaMemcpyHostToDevice));   /* no queries: no list */
    free(t);
    return rc ? -1 : 0;
}

static int flash_supported(int head_dim) { return head_dim == FLASH_D; }
/* One launch of the BM kernel over n_ctas = query tiles x heads (a work list made for that BM). */
template <int BM>
static int flash_launch(bf16 *out, const bf16 *q, GpuKvView kv, const int32_t *cu_q, const int32_t *cu_k,
                        const FlashTile *tiles, int n_ctas, int n_heads, int n_kv_heads, float scale_log2) {
    const int shmem = flash_smem_bytes(BM);
    /* Above 48 KiB must be asked for. The setting belongs to the current device and a cudaDeviceReset() drops it, so
     * it is made before every launch (a host-side call, cheap beside the kernel), never kept in a static. */
    CUDA_CHECK(cudaFuncSetAttribute(flash_attention_d128_kernel<BM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    shmem));
    flash_attention_d128_kernel<BM><<<n_ctas, FLASH_WARPS * 32, shmem>>>(
        out, q, kv.k, kv.v, kv.row_stride, kv.kv_row, cu_q, cu_k, tiles, n_heads, n_kv_heads, scale_log2);
    LAUNCH_CHECK();
    return 0;
}
static int flash_attention(bf16 *out, const bf16 *q, GpuKvView kv, const int32_t *cu_q,
                           const int32_t *cu_k, const FlashTile *tiles, int n_tiles, int bm, int n_heads,
                           int n_kv_heads, int head_dim) {
    if ((int64_t)n_tiles * n_heads > INT32_MAX)
        return rx_fail("flash attention: %d query tiles x %d heads are too many for one launch", n_tiles, n_heads);
    if (n_tiles == 0) return 0;                    /* no queries: every sequence is fully shared, or empty */
    const float scale_log2 = (float)(1.4426950408889634 / sqrt((double)head_dim));   /* log2(e) / sqrt(d) */
    return bm == 128 ? flash_launch<128>(out, q, kv, cu_q, cu_k, tiles, n_tiles * n_heads, n_heads, n_kv_heads,
                                         scale_log2)
                     : flash_launch<64>(out, q, kv, cu_q, cu_k, tiles, n_tiles * n_heads, n_heads, n_kv_heads,
                                        scale_log2);
}

/* The GPU forward's attention hook (work_alloc, attention_step, work_free): the flash kernel's plan for one forward,
 * its tile height and work list and the layout's cu_q and cu_k on the device, [n_tiles] [S+1] [S+1]. It reads the same
 * keys as the naive kernel: by cu_k[s] + t', t' a key's position in its sequence, which is the naive kernel's token t,
 * because cu_k holds the sequences' starts. The forward takes it for RX_ATTN_FLASH and its tiles, and for RX_ATTN_AUTO
 * where the kernel is built for the head_dim, but not on the definition path (RADIXMLP_CPU=definition). */
struct FastAttn { int bm, n_tiles; FlashTile *tiles; int32_t *cu_q, *cu_k; };
static void attention_plan_free(FastAttn *p) {
    if (!p) return;
    cudaFree(p->tiles);
    cudaFree(p->cu_q);
    cudaFree(p->cu_k);
    free(p);
}
static int attention_plan_fast(GpuModel *g, FastAttn **plan, const Layout *L, const int32_t *cu_k) {
    const RxAttention a = g->attention;
    *plan = NULL;
    if (a == RX_ATTN_NAIVE || !flash_supported(g->cfg.head_dim) || (a == RX_ATTN_AUTO && !rx_fast())) return 0;
    FastAttn *p = (FastAttn *)calloc(1, sizeof *p);
    if (!p) return rx_fail("out of host memory for the flash attention plan");
    *plan = p;
    p->bm = flash_block_m(a, L->cu_q, L->S, g->cfg.n_heads);                   /* -1: a CUDA error */
    if (p->bm < 0) return -1;
    TRY(flash_tiles(L->cu_q, cu_k, L->S, p->bm, &p->tiles, &p->n_tiles));
    TRY(upload_i32(&p->cu_q, L->cu_q, L->S + 1, "the query layout cu_q"));
    return upload_i32(&p->cu_k, cu_k, L->S + 1, "the key layout cu_k");
}
static int attention_run_fast(const FastAttn *p, bf16 *out, const bf16 *q, GpuKvView kv, const Qwen3Config *c) {
    return flash_attention(out, q, kv, p->cu_q, p->cu_k, p->tiles, p->n_tiles, p->bm, c->n_heads, c->n_kv_heads,
                           c->head_dim);
}

int gpu_set_attention(GpuModel *g, RxAttention attention) {
    if (!g) return rx_fail("gpu_set_attention needs a GPU model");
    if (attention < RX_ATTN_AUTO || attention > RX_ATTN_FLASH_BM128)
        return rx_fail("gpu_set_attention: unknown attention kernel %d", (int)attention);
    if (attention >= RX_ATTN_FLASH && !flash_supported(g->cfg.head_dim))
        return rx_fail("the flash attention kernel is built for head_dim %d; this model has head_dim %d (use "
                       "RX_ATTN_AUTO or RX_ATTN_NAIVE)", FLASH_D, g->cfg.head_dim);
    g->attention = attention;
    return 0;
}

/* cu_q and cu_k are host arrays here: the work list is made from them (flash_tiles), then all three go up. */
int gpu_flash_attention(void *out, const void *q, const void *k, const void *v, const int32_t *cu_q,
                        const int32_t *cu_k, const int32_t *kv_row, int n_seqs, int n_heads, int n_kv_heads,
                        int head_dim, RxAttention kernel) {
    TRY(check_heads(n_heads, n_kv_heads, head_dim));
    if (kernel < RX_ATTN_FLASH || kernel > RX_ATTN_FLASH_BM128)
        return rx_fail("gpu_flash_attention: kernel %d is not RX_ATTN_FLASH, _BM64 or _BM128", (int)kernel);
    if (!flash_supported(head_dim))
        return rx_fail("the flash attention kernel is built for head_dim %d, not %d: use the naive kernel", FLASH_D,
                       head_dim);
    if (((uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16)
        return rx_fail("gpu_flash_attention: q, k, v and out must be 16-byte aligned");
    if (n_seqs < 1 || cu_q[0] != 0 || cu_k[0] != 0)
        return rx_fail("gpu_flash_attention: needs n_seqs >= 1 and cu_q[0] = cu_k[0] = 0");
    for (int s = 0; s < n_seqs; s++)
        if (cu_q[s + 1] < cu_q[s] || cu_k[s + 1] - cu_k[s] < cu_q[s + 1] - cu_q[s])
            return rx_fail("gpu_flash_attention: sequence %d has %d queries and %d keys; it needs 0 <= queries <= "
                           "keys", s, cu_q[s + 1] - cu_q[s], cu_k[s + 1] - cu_k[s]);
    int32_t *d_cu_q = NULL, *d_cu_k = NULL;
    FlashTile *d_tiles = NULL;
    int n_tiles;
    GpuKvView kv = {.k = (const bf16 *)k, .v = (const bf16 *)v, .row_stride = (int64_t)n_kv_heads * head_dim,
                    .kv_row = kv_row};
    const int bm = flash_block_m(kernel, cu_q, n_seqs, n_heads);
    int rc = bm < 0 || flash_tiles(cu_q, cu_k, n_seqs, bm, &d_tiles, &n_tiles) ||
             upload_i32(&d_cu_q, cu_q, n_seqs + 1, "cu_q") || upload_i32(&d_cu_k, cu_k, n_seqs + 1, "cu_k") ||
             flash_attention((bf16 *)out, (const bf16 *)q, kv, d_cu_q, d_cu_k, d_tiles, n_tiles, bm, n_heads,
                             n_kv_heads, head_dim);
    cudaFree(d_cu_q);
    cudaFree(d_cu_k);
    cudaFree(d_tiles);
    return rc ? -1 : 0;
}

/* Every kernel's launch as its launcher makes it, for the resource gate (`make resource-gate`, no device):
 * threads per block, the dynamic shared memory the launch passes, and where the kernel's own carve-up of it ends. */
static const GpuLaunchShape launch_shapes[] = {
    {"rows_by_index_kernel", INDEX_BLOCK, 0, 0},
    {"kv_store_kernel", INDEX_BLOCK, 0, 0},
    {"rmsnorm_kernel", BLOCK, 0, 0},
    {"qk_norm_rope_kernel", BLOCK, 0, 0},
    {"silu_mul_kernel", BLOCK, 0, 0},
    {"add_kernel", BLOCK, 0, 0},
    {"attention_kernel", BLOCK, 0, 0},
    {"flash_attention_d128_kernel<64>", FLASH_WARPS * 32, flash_smem_bytes(64),
     FlashSmem<FLASH_D, 64>::END * (int)sizeof(bf16)},
    {"flash_attention_d128_kernel<128>", FLASH_WARPS * 32, flash_smem_bytes(128),
     FlashSmem<FLASH_D, 128>::END * (int)sizeof(bf16)},
};
int gpu_launch_shapes(const GpuLaunchShape **shapes) {
    *shapes = launch_shapes;
    return (int)(sizeof launch_shapes / sizeof launch_shapes[0]);
}

/* tensor_to_bf16 on threads: the same loop, the same bits. */
static void to_bf16_fast(bf16 *h, const RxTensor *t, int64_t n) {
    RX_OMP(omp parallel for schedule(static) if(n >= RX_GRAIN))
    for (int64_t i = 0; i < n; i++) h[i] = to_bf16(rx_tensor_at(t, i));
}
#endif

/* --------------------------------------------------------------------------------------------------------- errors */
/* One sentence per failure, kept for the caller: the API returns codes, main() prints radix_error() and exits. */
static char rx_err_buf[1024];
const char *radix_error(void) { return rx_err_buf; }

static int rx_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rx_err_buf, sizeof rx_err_buf, fmt, ap);
    va_end(ap);
    return -1;
}

static inline double rx_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {     /* qsort's order for medians */
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* malloc that reports what did not fit; callers check for NULL. */
static void *rx_alloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) rx_fail("out of host memory allocating %s (%.1f MiB)", what, bytes / 1048576.0);
    return p;
}

/* A NaN or Inf in an output is an error, never a small difference: fmax() would drop a NaN, and an all-NaN output
 * would then compare equal to anything. */
double rx_max_abs_diff(const float *a, const float *b, size_t n, size_t *first_bad) {
    double d = 0.0;
    if (first_bad) *first_bad = n;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || (b && !isfinite(b[i]))) {
            if (first_bad) *first_bad = i;
            return NAN;
        }
        double x = fabs((double)a[i] - (b ? (double)b[i] : 0.0));
        if (x > d) d = x;
    }
    return d;
}

/* ---------------------------------------------------------------------------------------------------- json reader */
/* A small strict JSON reader, just enough for safetensors headers, config.json and the shard index. It builds a flat
 * array of values; arrays and objects link their elements through child/next indices. Strings are unescaped into one
 * buffer no longer than the input (an unescaped string plus its NUL never outgrows its quoted source). A string may
 * hold \u0000, so keys and strings are compared with their lengths: "temperature\u0000x" is not "temperature". */
typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } JType;
typedef struct {
    JType type;
    int child, next, count;      /* first element/member, next sibling, number of elements/members   */
    size_t key, key_len;         /* offset into Json.strs of its member key (NUL-terminated), length   */
    size_t str, str_len;         /* the same of a string value                                         */
    double num;                  /* every number                                                      */
    int is_uint;                 /* a non-negative integer literal that fits in uint64_t: then u       */
    uint64_t u;
    int boolean;
} JVal;

typedef struct {
    JVal *v; int n, cap;
    char *strs; size_t strs_len;
    const char *p, *end;
    int depth;
} Json;

#define JSON_MAX_DEPTH 64

static int json_skip_ws(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
    return j->p < j->end;
}

static int json_new(Json *j, JType t) {
    if (j->n == j->cap) {
        int cap = j->cap ? 2 * j->cap : 64;
        JVal *v = (JVal *)realloc(j->v, (size_t)cap * sizeof(JVal));
        if (!v) return -1;
        j->v = v; j->cap = cap;
    }
    JVal *x = &j->v[j->n];
    memset(x, 0, sizeof *x);
    x->type = t; x->child = x->next = -1;
    return j->n++;
}

static void utf8_put(Json *j, uint32_t c) {       /* code point c as 1 to 4 bytes: a lead byte, then 6 bits each */
    static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    const int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    char *o = j->strs + j->strs_len;
    o[0] = (char)(lead[n] | (c >> 6 * (n - 1)));
    for (int k = 1; k < n; k++) o[k] = (char)(0x80 | ((c >> 6 * (n - 1 - k)) & 63));
    j->strs_len += n;
}

static int json_hex4(Json *j, uint32_t *c) {         /* the XXXX of \uXXXX */
    char hex[5] = "";
    if (j->end - j->p < 4) return -1;
    memcpy(hex, j->p, 4);
    for (int i = 0; i < 4; i++)
        if (!isxdigit((unsigned char)hex[i])) return -1;
    *c = (uint32_t)strtoul(hex, NULL, 16);
    j->p += 4;
    return 0;
}

/* Parses a string at j->p (on the opening quote) into strs: *off, *len. */
static int json_string(Json *j, size_t *off, size_t *len) {
    size_t start = j->strs_len;
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned char ch = (unsigned char)*j->p++;
        if (ch < 0x20) return -1;                               /* raw control characters are not JSON */
        if (ch != '\\') { j->strs[j->strs_len++] = (char)ch; continue; }
        static const char escaped[] = "\"\\/bfnrt", means[] = "\"\\/\b\f\n\r\t";    /* \X -> the byte */
        const char x = j->p < j->end ? *j->p++ : '\0', *e = x ? strchr(escaped, x) : NULL;
        uint32_t c, lo;
        if (e) {
            j->strs[j->strs_len++] = means[e - escaped];
            continue;
        }
        if (x != 'u' || json_hex4(j, &c)) return -1;
        if (c >= 0xDC00 && c <= 0xDFFF) return -1;              /* lone trailing surrogate */
        if (c >= 0xD800 && c <= 0xDBFF) {                       /* a pair: \uD8xx\uDCxx     */
            if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') return -1;
            j->p += 2;
            if (json_hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF) return -1;
            c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
        }
        utf8_put(j, c);
    }
    if (j->p >= j->end) return -1;
    j->p++;                                                     /* closing quote */
    *off = start;
    *len = j->strs_len - start;
    j->strs[j->strs_len++] = '\0';
    return 0;
}

static int json_number(Json *j, JVal *x) {
    const char *s = j->p;
    int is_int = 1;
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p >= j->end || !isdigit((unsigned char)*j->p)) return -1;
    if (*j->p == '0') j->p++;
    else while (j->p < j->end && isdigit((unsigned char)*j->p)) j->p++;
    if (j->p < j->end && *j->p == '.') {
        is_int = 0; j->p++;
        if (j->p >= j->end || !isdigit((unsigned char)*j->p)) return -1;
        while (j->p < j->end && isdigit((unsigned char)*j->p)) j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        is_int = 0; j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p >= j->end || !isdigit((unsigned char)*j->p)) return -1;
        while (j->p < j->end && isdigit((unsigned char)*j->p)) j->p++;
    }
    char buf[128];
    size_t n = (size_t)(j->p - s);
    if (n >= sizeof buf) return -1;                             /* no real config needs a longer literal */
    memcpy(buf, s, n); buf[n] = '\0';
    x->num = strtod(buf, NULL);
    if (is_int && s[0] != '-') {                                /* exact unsigned value, overflow detected */
        errno = 0;
        x->u = strtoull(buf, NULL, 10);
        x->is_uint = errno != ERANGE;
    }
    return 0;
}

static int json_value(Json *j);

/* Parses the elements of an array or the members of an object; j->p is past the opening bracket. */
static int json_container(Json *j, int self, char close) {
    int last = -1, is_obj = close == '}';
    if (!json_skip_ws(j)) return -1;
    if (*j->p == close) { j->p++; return 0; }
    for (;;) {
        size_t key = 0, klen = 0;
        if (is_obj) {
            if (!json_skip_ws(j) || *j->p != '"') return -1;
            if (json_string(j, &key, &klen)) return -1;
            if (!json_skip_ws(j) || *j->p != ':') return -1;
            j->p++;
        }
        int child = json_value(j);
        if (child < 0) return -1;
        j->v[child].key = key;
        j->v[child].key_len = klen;
        if (last < 0) j->v[self].child = child; else j->v[last].next = child;
        last = child;
        j->v[self].count++;
        if (!json_skip_ws(j)) return -1;
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == close) { j->p++; return 0; }
        return -1;
    }
}

static int json_value(Json *j) {
    if (!json_skip_ws(j)) return -1;
    char c = *j->p;
    int self;
    if (c == '{' || c == '[') {
        if (++j->depth > JSON_MAX_DEPTH) return -1;
        if ((self = json_new(j, c == '{' ? J_OBJ : J_ARR)) < 0) return -1;
        j->p++;
        if (json_container(j, self, c == '{' ? '}' : ']')) return -1;
        j->depth--;
        return self;
    }
    if (c == '"') {          /* json_string adds no value, so j->v stays where it is */
        if ((self = json_new(j, J_STR)) < 0) return -1;
        return json_string(j, &j->v[self].str, &j->v[self].str_len) ? -1 : self;
    }
    if (c == '-' || isdigit((unsigned char)c)) {
        if ((self = json_new(j, J_NUM)) < 0) return -1;
        return json_number(j, &j->v[self]) ? -1 : self;
    }
    static const char *words[3] = {"true", "false", "null"};
    for (int w = 0; w < 3; w++) {
        size_t n = strlen(words[w]);
        if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, words[w], n)) {
            if ((self = json_new(j, w == 2 ? J_NULL : J_BOOL)) < 0) return -1;
            j->v[self].boolean = w == 0;
            j->p += n;
            return self;
        }
    }
    return -1;
}

static void json_free(Json *j) { free(j->v); free(j->strs); memset(j, 0, sizeof *j); }

static const char *jkey(const Json *j, int v) { return j->strs + j->v[v].key; }
static const char *jstr(const Json *j, int v) { return j->strs + j->v[v].str; }

static int jstr_is(const Json *j, int v, const char *s) {          /* value v is the string s, all of it */
    return j->v[v].type == J_STR && j->v[v].str_len == strlen(s) && !memcmp(jstr(j, v), s, j->v[v].str_len);
}

/* A string value as a message shows it: "\"gelu\"" (at most 64 bytes of it, \u0000 where a NUL cuts it short), or
 * "not a string". */
static const char *jshow(const Json *j, int v, char *buf, size_t n) {
    if (j->v[v].type == J_STR)
        snprintf(buf, n, "\"%.64s%s\"", jstr(j, v), strlen(jstr(j, v)) < j->v[v].str_len ? "\\u0000..." : "");
    else snprintf(buf, n, "not a string");
    return buf;
}

typedef struct { const char *s; size_t n; } JKey;                  /* a key [n], for sorting */
static JKey jkey_at(const Json *j, int v) { return (JKey){jkey(j, v), j->v[v].key_len}; }

static int json_key_cmp(const void *a, const void *b) {
    const JKey *x = (const JKey *)a, *y = (const JKey *)b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Refuses a key given twice in one object (the root, or the member value whose key is `name`; NULL: an element of
 * an array). Python's json keeps the last value silently; for a checkpoint that would mean guessing which of two
 * configs, or two tensors, was meant. Sorted, so that a header of a million names costs n log n. */
static int json_object_unique(const Json *j, int obj, const char *name, JKey *keys, const char *file) {
    int n = 0;
    for (int c = j->v[obj].child; c >= 0; c = j->v[c].next) keys[n++] = jkey_at(j, c);
    qsort(keys, (size_t)n, sizeof *keys, json_key_cmp);
    char where[120];
    for (int i = 1; i < n; i++) {
        if (json_key_cmp(&keys[i], &keys[i - 1])) continue;
        if (obj == 0) snprintf(where, sizeof where, "at the top level");
        else if (name) snprintf(where, sizeof where, "in \"%.80s\"", name);
        else snprintf(where, sizeof where, "in an object inside an array");
        return rx_fail("%s: key \"%.200s\" appears twice %s; remove one (which value is meant is ambiguous)", file,
                       keys[i].s, where);
    }
    return 0;
}

/* Every object of a parsed text: each is the root or one child of one container, so each is checked once. */
static int json_keys_unique(const Json *j, const char *file) {
    int most = 0;                                   /* members of the largest object: the sort's scratch */
    for (int i = 0; i < j->n; i++)
        if (j->v[i].type == J_OBJ && j->v[i].count > most) most = j->v[i].count;
    JKey *keys = (JKey *)malloc((size_t)most * sizeof *keys + 1);
    int rc = keys ? 0 : rx_fail("%s: out of host memory parsing JSON", file);
    if (!rc && j->v[0].type == J_OBJ) rc = json_object_unique(j, 0, NULL, keys, file);
    for (int i = 0; i < j->n && !rc; i++) {
        if (j->v[i].type != J_OBJ && j->v[i].type != J_ARR) continue;
        for (int c = j->v[i].child; c >= 0 && !rc; c = j->v[c].next)
            if (j->v[c].type == J_OBJ)
                rc = json_object_unique(j, c, j->v[i].type == J_OBJ ? jkey(j, c) : NULL, keys, file);
    }
    free(keys);
    return rc;
}

/* Returns the offset of the first byte that breaks UTF-8 (an overlong, a surrogate, past U+10FFFF), or n. The
 * safetensors reader checks its header so; Python reads config.json as UTF-8, and refuses it so. */
static size_t utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + (size_t)len > n) return i;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 31u) : len == 3 ? (c & 15u) : (c & 7u);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 63u);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += (size_t)len;
    }
    return n;
}

/* JSON text is UTF-8 without a byte-order mark (RFC 8259). What else a file holds is named, so that "invalid JSON
 * near byte 0" never stands for "saved by an editor as UTF-16". Python's json.loads refuses a UTF-8 BOM too
 * ("Unexpected UTF-8 BOM"), and transformers reads config.json as plain utf-8: so do we. Without a BOM, UTF-16 and
 * UTF-32 show as NUL bytes beside ASCII ones, in the patterns of RFC 4627's encoding detection. */
static int json_text_check(const uint8_t *s, size_t n, const char *file) {
    static const struct { const char *bytes, *shown, *encoding; size_t len; } boms[] = {
        {"\xFF\xFE\x00\x00", "FF FE 00 00", "UTF-32 little-endian", 4},
        {"\x00\x00\xFE\xFF", "00 00 FE FF", "UTF-32 big-endian", 4},
        {"\xFF\xFE", "FF FE", "UTF-16 little-endian", 2},
        {"\xFE\xFF", "FE FF", "UTF-16 big-endian", 2},
        {"\xEF\xBB\xBF", "EF BB BF", NULL, 3},
    };
    for (size_t b = 0; b < sizeof boms / sizeof boms[0]; b++) {
        if (n < boms[b].len || memcmp(s, boms[b].bytes, boms[b].len)) continue;
        if (!boms[b].encoding)
            return rx_fail("%s: starts with a UTF-8 byte-order mark (EF BB BF): save it as UTF-8 without one", file);
        return rx_fail("%s: is %s, not UTF-8 (it starts with the byte-order mark %s); save it as UTF-8", file,
                       boms[b].encoding, boms[b].shown);
    }
    const uint8_t *nul = (const uint8_t *)memchr(s, 0, n);
    if (nul) {
        const char *encoding = n < 4                        ? NULL
                             : !s[0] && !s[1] && !s[2] && s[3] ? "UTF-32 big-endian"
                             : s[0] && !s[1] && !s[2] && !s[3] ? "UTF-32 little-endian"
                             : !s[0] && s[1]                   ? "UTF-16 big-endian"
                             : s[0] && !s[1]                   ? "UTF-16 little-endian"
                                                               : NULL;
        if (encoding)
            return rx_fail("%s: looks like %s without a byte-order mark (NUL bytes beside ASCII ones); save it as "
                           "UTF-8", file, encoding);
        return rx_fail("%s: its JSON holds a NUL byte (byte %zu of it), which JSON text never does: the file is "
                       "damaged, or not JSON", file, (size_t)(nul - s));
    }
    size_t bad = utf8_invalid_at(s, n);
    if (bad < n) return rx_fail("%s: its JSON is not valid UTF-8 (byte %zu of it); save it as UTF-8", file, bad);
    return 0;
}

/* Parses text[0..len) into j; the root is value 0. On error, says where. */
static int json_parse(Json *j, const char *text, size_t len, const char *file) {
    memset(j, 0, sizeof *j);
    if (json_text_check((const uint8_t *)text, len, file)) return -1;
    j->p = text; j->end = text + len;
    if (!(j->strs = (char *)malloc(len + 1))) return rx_fail("%s: out of host memory parsing JSON", file);
    int root = json_value(j);
    if (root < 0 || json_skip_ws(j)) {
        int too_deep = j->depth > JSON_MAX_DEPTH;
        size_t at = (size_t)(j->p - text);
        json_free(j);
        if (too_deep) return rx_fail("%s: JSON nested deeper than %d levels", file, JSON_MAX_DEPTH);
        int line = 1;
        for (size_t k = 0; k < at; k++) line += text[k] == '\n';
        return rx_fail("%s: invalid JSON near byte %zu (line %d)", file, at, line);
    }
    if (json_keys_unique(j, file)) {
        json_free(j);
        return -1;
    }
    return 0;
}

/* The member `key` of object `obj`, or -1 (json_parse has refused a key given twice). */
static int jget(const Json *j, int obj, const char *key) {
    if (obj < 0 || j->v[obj].type != J_OBJ) return -1;
    for (int c = j->v[obj].child; c >= 0; c = j->v[c].next)
        if (j->v[c].key_len == strlen(key) && !memcmp(jkey(j, c), key, j->v[c].key_len)) return c;
    return -1;
}

/* ---------------------------------------------------------------------------------------------------- safetensors */
/* File layout: [8 bytes: header length H, u64 LE][H bytes: JSON header][byte buffer]. Every tensor's data_offsets
 * are [begin, end) in the byte buffer. We validate exactly what the official reader validates, so that a
 * checkpoint we accept is one it accepts, and every offset we later use lies inside the file. */
static const struct { const char *name; int size; RxDtype dt; } st_dtypes[] = {
    {"BOOL", 1, RX_OTHER_DTYPE}, {"U8", 1, RX_OTHER_DTYPE},  {"I8", 1, RX_OTHER_DTYPE},
    {"F8_E5M2", 1, RX_OTHER_DTYPE}, {"F8_E4M3", 1, RX_OTHER_DTYPE}, {"I16", 2, RX_OTHER_DTYPE},
    {"U16", 2, RX_OTHER_DTYPE}, {"F16", 2, RX_F16}, {"BF16", 2, RX_BF16}, {"I32", 4, RX_OTHER_DTYPE},
    {"U32", 4, RX_OTHER_DTYPE}, {"F32", 4, RX_F32}, {"F64", 8, RX_OTHER_DTYPE}, {"I64", 8, RX_OTHER_DTYPE},
    {"U64", 8, RX_OTHER_DTYPE},
};
#define ST_MAX_HEADER 100000000ull

typedef struct { uint64_t begin, end; int idx; } StSpan;

static int span_cmp(const void *a, const void *b) {
    const StSpan *x = (const StSpan *)a, *y = (const StSpan *)b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : x->end != y->end ? (x->end < y->end ? -1 : 1) : 0;
}
static int tensor_name_cmp(const void *a, const void *b) {
    return strcmp(((const RxTensor *)a)->name, ((const RxTensor *)b)->name);
}

static void tensors_free(RxTensor *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

/* Checks each tensor entry of a parsed header and fills t[0..*n) (names owned by t) and spans[0..*n). */
static int st_entries(const Json *j, const char *file, RxTensor *t, StSpan *spans, int *n) {
    for (int m = j->v[0].child; m >= 0; m = j->v[m].next) {
        const char *name = jkey(j, m);
        if (strlen(name) != j->v[m].key_len)
            return rx_fail("%s: tensor name '%s\\u0000...' holds a NUL character, as no checkpoint's does", file, name);
        if (!strcmp(name, "__metadata__")) {            /* optional {string: string} */
            int ok = j->v[m].type == J_OBJ;
            for (int c = ok ? j->v[m].child : -1; c >= 0; c = j->v[c].next) ok &= j->v[c].type == J_STR;
            if (!ok) return rx_fail("%s: __metadata__ must map strings to strings", file);
            continue;
        }
        int dt = jget(j, m, "dtype"), sh = jget(j, m, "shape"), off = jget(j, m, "data_offsets");
        if (dt < 0 || sh < 0 || off < 0 || j->v[dt].type != J_STR || j->v[sh].type != J_ARR ||
            j->v[off].type != J_ARR || j->v[off].count != 2)
            return rx_fail("%s: tensor '%s' needs \"dtype\", \"shape\" and two \"data_offsets\"", file, name);
        RxTensor *x = &t[*n];
        if (!(x->name = strdup(name))) return rx_fail("%s: out of host memory", file);
        (*n)++;
        x->file = file;
        int size = 0;
        for (size_t d = 0; d < sizeof st_dtypes / sizeof st_dtypes[0]; d++)
            if (jstr_is(j, dt, st_dtypes[d].name)) {
                size = st_dtypes[d].size; x->dtype = st_dtypes[d].dt; x->dtype_name = st_dtypes[d].name;
            }
        char shown[80];
        if (!size) return rx_fail("%s: tensor '%s' has unknown dtype %s", file, name, jshow(j, dt, shown, 80));
        if (j->v[sh].count > RX_MAX_RANK)
            return rx_fail("%s: tensor '%s' has rank %d, more than %d", file, name, j->v[sh].count, RX_MAX_RANK);
        uint64_t bytes_needed = (uint64_t)size;     /* product(shape) * dtype size, overflow checked */
        for (int c = j->v[sh].child; c >= 0; c = j->v[c].next) {
            if (j->v[c].type != J_NUM || !j->v[c].is_uint)
                return rx_fail("%s: tensor '%s' has a shape entry that is not a non-negative integer", file, name);
            uint64_t d = j->v[c].u;
            if (d && bytes_needed > UINT64_MAX / d)
                return rx_fail("%s: tensor '%s' has a shape whose byte size overflows 64 bits", file, name);
            bytes_needed *= d;
            x->shape[x->rank++] = (int64_t)(d > INT64_MAX ? INT64_MAX : d);
        }
        int b = j->v[off].child, e = j->v[b].next;
        if (j->v[b].type != J_NUM || !j->v[b].is_uint || j->v[e].type != J_NUM || !j->v[e].is_uint)
            return rx_fail("%s: tensor '%s' has data_offsets that are not non-negative integers", file, name);
        uint64_t begin = j->v[b].u, end = j->v[e].u;
        if (end < begin)
            return rx_fail("%s: tensor '%s' has data_offsets end %llu before begin %llu", file, name,
                           (unsigned long long)end, (unsigned long long)begin);
        if (end - begin != bytes_needed)
            return rx_fail("%s: tensor '%s' spans %llu bytes but its shape and dtype need %llu", file, name,
                           (unsigned long long)(end - begin), (unsigned long long)bytes_needed);
        spans[*n - 1] = (StSpan){begin, end, *n - 1};
    }
    return 0;
}

/* The tensors, sorted by offset, must tile the byte buffer exactly: no gap, no overlap, nothing after. Then each
 * tensor gets its data pointer, and the table is sorted by name (json_parse has refused a name given twice). */
static int st_tile(const uint8_t *buf, uint64_t buf_len, const char *file, RxTensor *t, StSpan *spans, int n) {
    qsort(spans, (size_t)n, sizeof *spans, span_cmp);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (spans[i].begin != at)
            return rx_fail("%s: tensor '%s' starts at byte %llu of the data, expected %llu (%s)", file,
                           t[spans[i].idx].name, (unsigned long long)spans[i].begin, (unsigned long long)at,
                           spans[i].begin > at ? "a gap" : "an overlap");
        at = spans[i].end;
        t[spans[i].idx].data = buf + spans[i].begin;
        t[spans[i].idx].nbytes = (size_t)(spans[i].end - spans[i].begin);
    }
    if (at != buf_len)
        return rx_fail("%s: the tensors cover %llu data bytes but the file holds %llu (%s)", file,
                       (unsigned long long)at, (unsigned long long)buf_len,
                       at < buf_len ? "trailing bytes" : "truncated file");
    qsort(t, (size_t)n, sizeof *t, tensor_name_cmp);
    return 0;
}

/* Parses and validates one safetensors file held in memory. Tensors come back sorted by name, data pointing
 * into `bytes`. */
int rx_parse_safetensors(const uint8_t *bytes, size_t len, const char *file, RxTensor **out, int *n_out) {
    *out = NULL; *n_out = 0;
    if (len < 8) return rx_fail("%s: file is %zu bytes, shorter than the 8-byte safetensors header length", file, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    if (hlen > ST_MAX_HEADER)
        return rx_fail("%s: header length %llu exceeds the 100000000-byte limit", file, (unsigned long long)hlen);
    if (hlen > len - 8)
        return rx_fail("%s: header length %llu points beyond the end of the %zu-byte file",
                       file, (unsigned long long)hlen, len);
    if (hlen == 0)             /* else "invalid JSON near byte 0", of a header that is not there */
        return rx_fail("%s: header length is 0, but a safetensors file starts with an 8-byte little-endian header "
                       "length and then that many bytes of JSON: the file is damaged or not safetensors", file);
    const char *text = (const char *)bytes + 8;
    Json j;
    if (json_parse(&j, text, hlen, file)) return -1;
    int n = 0, count = j.v[0].count;
    RxTensor *t = NULL;
    StSpan *spans = NULL;
    int rc = j.v[0].type != J_OBJ ? rx_fail("%s: header is not a JSON object", file) : 0;
    if (!rc && (!(t = (RxTensor *)calloc((size_t)count + 1, sizeof *t)) ||
                !(spans = (StSpan *)calloc((size_t)count + 1, sizeof *spans))))
        rc = rx_fail("%s: out of host memory reading the header", file);
    if (!rc) rc = st_entries(&j, file, t, spans, &n);
    json_free(&j);
    if (!rc) rc = st_tile(bytes + 8 + hlen, len - 8 - hlen, file, t, spans, n);
    free(spans);
    if (rc) { tensors_free(t, n); return -1; }
    *out = t; *n_out = n;
    return 0;
}

/* ----------------------------------------------------------------------------------------- config and shard index */
/* An integer field of config.json in [lo, hi]; absent or null: *out = dflt, or an error when dflt < 0. */
static int cfg_int(const Json *j, const char *key, int dflt, int lo, int hi, int *out, const char *file) {
    int v = jget(j, 0, key);
    if (v < 0 || j->v[v].type == J_NULL) {
        if (dflt < 0) return rx_fail("%s: missing \"%s\"", file, key);
        *out = dflt;
        return 0;
    }
    if (j->v[v].type != J_NUM || !j->v[v].is_uint || j->v[v].u < (uint64_t)lo || j->v[v].u > (uint64_t)hi)
        return rx_fail("%s: \"%s\" must be an integer in [%d, %d]", file, key, lo, hi);
    *out = (int)j->v[v].u;
    return 0;
}

static int cfg_num(const Json *j, int obj, const char *key, double dflt, double lo, double hi, double *out,
                   const char *file) {
    int v = jget(j, obj, key);
    if (v < 0) { *out = dflt; return 0; }
    if (j->v[v].type != J_NUM || !(j->v[v].num > lo && j->v[v].num < hi))
        return rx_fail("%s: \"%s\" must be a number in (%g, %g)", file, key, lo, hi);
    *out = j->v[v].num;
    return 0;
}

/* A boolean field of config.json; absent: *out = 0. */
static int cfg_bool(const Json *j, const char *key, int *out, const char *file) {
    int v = jget(j, 0, key);
    if (v >= 0 && j->v[v].type != J_BOOL) return rx_fail("%s: \"%s\" must be true or false", file, key);
    *out = v >= 0 && j->v[v].boolean;
    return 0;
}

/* Sliding-window attention, as Qwen3Config and Qwen3Model decide it: the window is "sliding_window" (default 4096;
 * null: none) when "use_sliding_window" is true, else there is none; layer i slides when "layer_types"[i] is
 * "sliding_attention", or, without layer_types, when there is a window and i >= "max_window_layers" (default 28).
 * Only full causal attention is computed here: every config in which some layer slides is refused. */
static int config_full_attention(const Json *j, const Qwen3Config *c, const char *file) {
    int use, sw = jget(j, 0, "sliding_window"), lt = jget(j, 0, "layer_types"), max_window_layers;
    if (cfg_bool(j, "use_sliding_window", &use, file)) return -1;
    int window = use && (sw < 0 || j->v[sw].type != J_NULL);
    if (lt >= 0 && j->v[lt].type != J_NULL) {
        if (j->v[lt].type != J_ARR || j->v[lt].count != c->n_layers)
            return rx_fail("%s: \"layer_types\" must be an array of num_hidden_layers (%d) strings", file, c->n_layers);
        int i = 0;
        char shown[80];
        for (int e = j->v[lt].child; e >= 0; e = j->v[e].next, i++)
            if (!jstr_is(j, e, "full_attention"))
                return rx_fail("%s: \"layer_types\"[%d] is %s; only \"full_attention\" is supported", file, i,
                               jshow(j, e, shown, sizeof shown));
        return 0;
    }
    if (!window) return 0;
    if (cfg_int(j, "max_window_layers", 28, 0, 1 << 20, &max_window_layers, file)) return -1;
    if (max_window_layers < c->n_layers)
        return rx_fail("%s: \"use_sliding_window\" is true and \"max_window_layers\" %d < \"num_hidden_layers\" %d: "
                       "layers %d.. use sliding-window attention; only full causal attention is supported", file,
                       max_window_layers, c->n_layers, max_window_layers);
    return 0;
}

/* Which model this is, before any size is read: a Llama config would otherwise fail later, on a tensor it lacks.
 * transformers' AutoConfig picks the class by "model_type" and refuses a config without one; "architectures" names
 * the class that wrote the checkpoint: Qwen3ForCausalLM (with an LM head) or Qwen3Model (Qwen3-Embedding). */
static int config_model(const Json *j, const char *file) {
    static const char *const archs[] = {"Qwen3ForCausalLM", "Qwen3Model"};
    char shown[80];
    int type = jget(j, 0, "model_type"), ar = jget(j, 0, "architectures");
    if (type < 0)
        return rx_fail("%s: no \"model_type\"; add \"model_type\": \"qwen3\" if this is a Qwen3 checkpoint "
                       "(transformers refuses a config without one too)", file);
    if (!jstr_is(j, type, "qwen3"))
        return rx_fail("%s: \"model_type\" is %s; this code computes Qwen3 only (\"qwen3\")", file,
                       jshow(j, type, shown, sizeof shown));
    if (ar < 0 || j->v[ar].type == J_NULL) return 0;
    if (j->v[ar].type != J_ARR) return rx_fail("%s: \"architectures\" must be an array of class names", file);
    for (int e = j->v[ar].child; e >= 0; e = j->v[e].next) {
        int known = 0;
        for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) known |= jstr_is(j, e, archs[a]);
        if (!known)
            return rx_fail("%s: \"architectures\" names %s; this code computes \"Qwen3ForCausalLM\" and \"Qwen3Model\" "
                           "only", file, jshow(j, e, shown, sizeof shown));
    }
    return 0;
}

/* "eos_token_id" of object j: an int, a list of them, null or absent (none); generation stops at any of them
 * (--ignore-eos). Any integer is read, a negative one too: a bad id is refused only where generation would stop at
 * it (rx_eos_check), so that it never blocks a forward or --check, which do not use it. */
static int json_eos(const Json *j, int32_t *ids, int *n, const char *file) {
    int v = jget(j, 0, "eos_token_id");
    *n = 0;
    if (v < 0 || j->v[v].type == J_NULL) return 0;
    const int list = j->v[v].type == J_ARR;
    for (int e = list ? j->v[v].child : v; e >= 0; e = list ? j->v[e].next : -1) {
        double x = j->v[e].type == J_NUM ? j->v[e].num : 0.5;
        if (x != floor(x) || x < INT32_MIN || x > INT32_MAX || *n == RX_MAX_EOS)
            return rx_fail("%s: \"eos_token_id\" must be a token id or a list of at most %d", file, RX_MAX_EOS);
        ids[(*n)++] = (int32_t)x;
    }
    return 0;
}

int rx_eos_check(const int32_t *ids, int n, int vocab, const char *file) {
    for (int e = 0; e < n; e++)
        if (ids[e] < 0 || ids[e] >= vocab)
            return rx_fail("%s: eos_token_id %d is outside the vocabulary [0, %d): generation would never stop at it; "
                           "fix the file, or give --ignore-eos", file, ids[e], vocab);
    return 0;
}

static int config_fields(const Json *j, Qwen3Config *c, const char *file) {
    if (j->v[0].type != J_OBJ) return rx_fail("%s: not a JSON object", file);
    if (config_model(j, file)) return -1;
    /* Limits far above any real Qwen3 but low enough that sizes computed from them cannot overflow. */
    if (cfg_int(j, "vocab_size", -1, 1, 1 << 22, &c->vocab_size, file) ||
        cfg_int(j, "hidden_size", -1, 1, 1 << 16, &c->hidden_size, file) ||
        cfg_int(j, "intermediate_size", -1, 1, 1 << 18, &c->intermediate_size, file) ||
        cfg_int(j, "num_hidden_layers", -1, 1, 1024, &c->n_layers, file) ||
        cfg_int(j, "num_attention_heads", -1, 1, 1024, &c->n_heads, file))
        return -1;
    /* The defaults of transformers' Qwen3Config where a key is missing: head_dim 128 (its own field in Qwen3, not
     * hidden/heads: 0.6B has 128 while hidden/heads = 64), num_key_value_heads 32, or num_attention_heads when the
     * key is present as null, max_position_embeddings 32768. */
    int kv_null = jget(j, 0, "num_key_value_heads") >= 0;
    if (cfg_int(j, "num_key_value_heads", kv_null ? c->n_heads : 32, 1, 1024, &c->n_kv_heads, file) ||
        cfg_int(j, "max_position_embeddings", 32768, 1, 1 << 24, &c->max_position_embeddings, file) ||
        cfg_int(j, "head_dim", 128, 2, 1024, &c->head_dim, file))
        return -1;
    if (c->head_dim % 2) return rx_fail("%s: \"head_dim\" must be even for rotate-half RoPE", file);
    if (c->n_heads % c->n_kv_heads)
        return rx_fail("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", file, c->n_heads,
                       c->n_kv_heads);
    /* rope_theta at the top level, or inside rope_parameters in newer transformers versions. */
    int rp = jget(j, 0, "rope_parameters");
    if (cfg_num(j, 0, "rope_theta", 10000.0, 1.0, 1e12, &c->rope_theta, file) ||
        cfg_num(j, rp, "rope_theta", c->rope_theta, 1.0, 1e12, &c->rope_theta, file) ||
        cfg_num(j, 0, "rms_norm_eps", 1e-6, 0.0, 1.0, &c->rms_norm_eps, file))
        return -1;
    int rs = jget(j, 0, "rope_scaling"), rt = jget(j, rp, "rope_type");
    if ((rs >= 0 && j->v[rs].type != J_NULL) || (rt >= 0 && !jstr_is(j, rt, "default")))
        return rx_fail("%s: only the default RoPE is supported (found rope_scaling or a rope_type)", file);
    /* What this forward does not compute is refused, never approximated: other activations, projection biases. */
    int act = jget(j, 0, "hidden_act"), bias;
    char shown[80];
    if (act >= 0 && !jstr_is(j, act, "silu"))
        return rx_fail("%s: \"hidden_act\" is %s; only \"silu\" is supported", file,
                       jshow(j, act, shown, sizeof shown));
    if (cfg_bool(j, "attention_bias", &bias, file)) return -1;
    if (bias)
        return rx_fail("%s: \"attention_bias\" is true; the q/k/v/o projection biases are not implemented (only false "
                       "is supported)", file);
    if (config_full_attention(j, c, file) || json_eos(j, c->eos_token_id, &c->n_eos, file)) return -1;
    return cfg_bool(j, "tie_word_embeddings", &c->tie_word_embeddings, file);
}

int rx_parse_config(Qwen3Config *c, const char *json, size_t len, const char *file) {
    Json j;
    memset(c, 0, sizeof *c);
    if (json_parse(&j, json, len, file)) return -1;
    int rc = config_fields(&j, c, file);
    json_free(&j);
    return rc;
}

/* A sampling default of generation_config.json: absent or null, *out stays -1; else a number in [lo, hi], and, as
 * the flags' rule (parse_real), not a nonzero one below FLT_MIN, which single precision would turn into 0. */
static int gen_num(const Json *j, const char *key, double lo, double hi, double *out, const char *file) {
    int v = jget(j, 0, key);
    if (v < 0 || j->v[v].type == J_NULL) return 0;
    double x = j->v[v].type == J_NUM ? j->v[v].num : NAN;
    if (!(x >= lo && x <= hi) || (x != 0 && x < FLT_MIN))
        return rx_fail("%s: \"%s\" must be %sa number from %g to %g", file, key, lo == 0 ? "0 or " : "", FLT_MIN, hi);
    *out = x;
    return 0;
}

/* transformers' GenerationConfig reads more keys (max_length, repetition_penalty, ...); these are the ones this code
 * acts on. Each is checked; the others are left alone, as keys of config.json this code does not use are. */
int rx_parse_generation_config(RxGenerationConfig *g, const char *json, size_t len, const char *file) {
    Json j;
    memset(g, 0, sizeof *g);
    g->do_sample = g->top_k = -1;
    g->temperature = g->top_p = -1;
    if (json_parse(&j, json, len, file)) return -1;
    int rc = j.v[0].type == J_OBJ ? 0 : rx_fail("%s: not a JSON object", file);
    int ds = jget(&j, 0, "do_sample");
    if (!rc && ds >= 0 && j.v[ds].type != J_NULL) {
        if (j.v[ds].type != J_BOOL) rc = rx_fail("%s: \"do_sample\" must be true or false", file);
        g->do_sample = j.v[ds].boolean;
    }
    int tk = jget(&j, 0, "top_k");
    if (!rc && tk >= 0 && j.v[tk].type != J_NULL) rc = cfg_int(&j, "top_k", -1, 0, 1 << 22, &g->top_k, file);
    if (!rc)
        rc = gen_num(&j, "temperature", 0, 100, &g->temperature, file) ||
             gen_num(&j, "top_p", FLT_MIN, 1, &g->top_p, file) || json_eos(&j, g->eos_token_id, &g->n_eos, file);
    json_free(&j);
    g->present = !rc;
    return rc ? -1 : 0;
}

/* model.safetensors.index.json: {"weight_map": {"tensor name": "shard file", ...}}. Parses it into j and returns the
 * weight_map's value, each shard name checked to be a plain file name in the model folder (no "../x", no "/abs");
 * or -1, j freed. */
static int shard_index_map(Json *j, const char *json, size_t len, const char *file) {
    if (json_parse(j, json, len, file)) return -1;
    int wm = jget(j, 0, "weight_map");
    if (wm < 0 || j->v[wm].type != J_OBJ || j->v[wm].count == 0) {
        json_free(j);
        return rx_fail("%s: needs a non-empty \"weight_map\" object", file);
    }
    for (int m = j->v[wm].child; m >= 0; m = j->v[m].next) {
        const char *s = jstr(j, m);
        int is_str = j->v[m].type == J_STR;
        if (is_str && s[0] && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..") &&
            strlen(s) == j->v[m].str_len)
            continue;
        if (!is_str) rx_fail("%s: weight_map entry '%s' is not a file name", file, jkey(j, m));
        else rx_fail("%s: shard name \"%s\" for tensor '%s' is not a plain file name in the model folder", file, s,
                     jkey(j, m));
        json_free(j);
        return -1;
    }
    return wm;
}

/* The distinct shard names of an index, in the order the weight_map first names them. */
int rx_parse_shard_index(const char *json, size_t len, const char *file, char ***shards, int *n_shards) {
    Json j;
    *shards = NULL; *n_shards = 0;
    int wm = shard_index_map(&j, json, len, file), n = 0;
    if (wm < 0) return -1;
    char **out = (char **)calloc((size_t)j.v[wm].count, sizeof *out);
    int rc = out ? 0 : rx_fail("%s: out of host memory", file);
    for (int m = j.v[wm].child; m >= 0 && !rc; m = j.v[m].next) {
        int seen = 0;
        for (int i = 0; i < n && !seen; i++) seen = !strcmp(out[i], jstr(&j, m));
        if (!seen && !(out[n++] = strdup(jstr(&j, m)))) rc = rx_fail("%s: out of host memory", file);
    }
    json_free(&j);
    if (rc) {
        for (int i = 0; out && i < n; i++) free(out[i]);
        free(out);
        return -1;
    }
    *shards = out; *n_shards = n;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ loading a model */
typedef struct { void *map; size_t len; char *path; int copy; } MappedFile;   /* copy: map is a malloc'd copy */
typedef struct {
    MappedFile *files; int n_files;
    void *owned;         /* a random model's tensors */
    float **panels;      /* [n_tensors] each linear weight packed for the C reference's matmul (model_pack_ref) */
} ModelPriv;

static void unmap_file(MappedFile *mf) {
    if (mf->copy) free(mf->map);
    else if (mf->map) munmap(mf->map, mf->len);
    free(mf->path);
    memset(mf, 0, sizeof *mf);
}

/* Maps a whole input file for reading, at most max_bytes of it. copy (the text files): read it into a private buffer
 * instead, which cannot change under a parser that walks it twice, or vanish if the file shrinks. Anything but a
 * regular file is refused; O_NONBLOCK because opening a FIFO would otherwise wait for a writer before the check could
 * refuse it (a regular file ignores the flag). */
static int map_file(MappedFile *mf, const char *path, size_t max_bytes, int copy) {
    memset(mf, 0, sizeof *mf);
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return rx_fail("%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { close(fd); return rx_fail("%s: not a regular file", path); }
    mf->len = (size_t)st.st_size;
    if (mf->len > max_bytes) {
        close(fd);
        return rx_fail("%s: %zu bytes, more than the %zu MiB such a file may have", path, mf->len, max_bytes >> 20);
    }
    if ((mf->copy = copy)) {
        size_t n = 0;
        ssize_t got = 1;
        mf->map = malloc(mf->len + 1);
        while (mf->map && n < mf->len && (got = read(fd, (char *)mf->map + n, mf->len - n)) > 0) n += (size_t)got;
        mf->len = n;                                /* n < the size only if the file shrank while we read it */
        if (!mf->map || got < 0) { close(fd); unmap_file(mf); return rx_fail("%s: cannot read it", path); }
    } else if (mf->len) {       /* mmap of 0 bytes fails; an empty file is rejected by the parser instead */
        mf->map = mmap(NULL, mf->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (mf->map == MAP_FAILED) {
            mf->map = NULL;
            close(fd);
            return rx_fail("%s: mmap failed: %s", path, strerror(errno));
        }
    }
    close(fd);
    if (!(mf->path = strdup(path))) { unmap_file(mf); return rx_fail("%s: out of host memory", path); }
    return 0;
}

int rx_read_text(const char *path, size_t max_bytes, char **text, size_t *len) {
    MappedFile mf;
    if (map_file(&mf, path, max_bytes, 1)) return -1;
    ((char *)mf.map)[mf.len] = '\0';
    *text = (char *)mf.map;
    *len = mf.len;
    free(mf.path);
    return 0;
}

/* One spelling of a path that may not exist yet: its folder made absolute (realpath), then its last name. */
static int canonical_path(const char *path, char *out, size_t n) {
    char dir[4096], real[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (strlen(path) >= sizeof dir || !realpath(dir, real)) return -1;
    snprintf(out, n, "%s/%s", real, slash ? slash + 1 : path);
    return 0;
}

int rx_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    char ca[8192], cb[8192];
    if (!stat(a, &sa) && !stat(b, &sb)) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return !canonical_path(a, ca, sizeof ca) && !canonical_path(b, cb, sizeof cb) && !strcmp(ca, cb);
}

/* Opening /dev/stdout (or /dev/fd/1, or the file stdout was sent to) with "w" truncates that file under the text
 * already written to it, and the text then overwrites the output. /dev/null is the one stream both may share. */
int rx_is_stdout(const char *path) {
    struct stat out, st, null;
    if (fstat(STDOUT_FILENO, &out) || stat(path, &st)) return 0;
    if (!stat("/dev/null", &null) && st.st_dev == null.st_dev && st.st_ino == null.st_ino) return 0;
    return st.st_dev == out.st_dev && st.st_ino == out.st_ino;
}

/* An existing output named through a link is replaced where the link points: the link stays. */
static const char *output_target(const char *path, char *real) { return realpath(path, real) ? real : path; }

/* This run's outputs not yet renamed into place, for rx_outputs_finish and a signal's handler: a fixed array (path:
 * the caller's, which outlives the run; f: NULL once closed; said: the line that says it was written, or ""). */
#define RX_MAX_OUTPUTS 8
static struct { const char *path; FILE *f; char tmp[RX_TMP_PATH], said[RX_TMP_PATH]; } rx_outputs[RX_MAX_OUTPUTS];
static volatile sig_atomic_t rx_n_outputs;
static int rx_outputs_failed;                    /* an output (stdout too) could not be opened or written whole */

static void outputs_interrupted(int sig) {      /* unlink() is async-signal-safe; then the signal does what it did */
    for (int i = 0; i < rx_n_outputs; i++)
        if (rx_outputs[i].tmp[0]) unlink(rx_outputs[i].tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

FILE *rx_output_open(const char *path) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (int k = 0; k < 4 && !rx_n_outputs; k++) {      /* a run's first output: each signal found at its default */
        void (*old)(int) = signal(sigs[k], outputs_interrupted);
        if (old != SIG_DFL && old != outputs_interrupted) signal(sigs[k], old);
    }
    struct stat st;
    char real[4096], *tmp;
    int exists = stat(path, &st) == 0, fd = -1;
    mode_t mask = umask(0);
    umask(mask);
    FILE *f = NULL;
    errno = EMFILE;                                               /* unless one of the calls below says otherwise */
    if (rx_n_outputs == RX_MAX_OUTPUTS) goto fail;
    tmp = rx_outputs[rx_n_outputs].tmp;
    tmp[0] = '\0';
    rx_outputs[rx_n_outputs].said[0] = '\0';
    rx_outputs[rx_n_outputs].path = path;
    rx_outputs[rx_n_outputs++].f = NULL;                          /* a signal now removes what mkstemp makes */
    if (exists && (!S_ISREG(st.st_mode) || rx_is_stdout(path))) {   /* bench --replot --svg /dev/stdout */
        f = fopen(path, "wb");
    } else {
        snprintf(tmp, RX_TMP_PATH, "%.4000s.tmp-XXXXXX", output_target(path, real));
        fd = mkstemp(tmp);                                  /* mode 0600: given the target's, or the umask's, next */
        if (fd >= 0 && !fchmod(fd, exists ? st.st_mode & 07777 : 0666 & ~mask)) f = fdopen(fd, "wb");
    }
    if (f) return rx_outputs[rx_n_outputs - 1].f = f;
    if (fd >= 0) close(fd);
    if (fd >= 0) unlink(tmp);
    rx_n_outputs--;
fail:
    rx_outputs_failed = 1;
    rx_fail("%s: cannot write: %s", path, strerror(errno));
    return NULL;
}

/* A full disk (or /dev/full) fails a write only when the buffer is flushed: the error flag and the close say so.
 * stdout is flushed, not closed: rx_outputs_finish's lines come after. */
int rx_output_close(FILE *f, const char *said, ...) {
    int i = 0, bad = fflush(f) != 0 || ferror(f), err = errno;
    while (i < rx_n_outputs && rx_outputs[i].f != f) i++;
    if (i < rx_n_outputs) {
        rx_outputs[i].f = NULL;
        va_list ap;
        va_start(ap, said);
        if (said) vsnprintf(rx_outputs[i].said, sizeof rx_outputs[i].said, said, ap);
        va_end(ap);
    }
    if (f != stdout && fclose(f) && !bad) {
        bad = 1;
        err = errno;
    }
    rx_outputs_failed |= bad;
    if (!bad) return 0;
    return rx_fail("%s: cannot write: %s", i < rx_n_outputs ? rx_outputs[i].path : "<stdout>",
                   err ? strerror(err) : "write error");
}

int rx_outputs_finish(int ok, FILE *say) {
    char real[4096];
    int rc = 0;
    ok &= !rx_outputs_failed;
    for (int i = 0; i < rx_n_outputs; i++) ok &= !rx_outputs[i].f;          /* each closed, written whole */
    for (int i = 0; i < rx_n_outputs; i++) {
        const char *tmp = rx_outputs[i].tmp, *path = rx_outputs[i].path;
        if (rx_outputs[i].f) fclose(rx_outputs[i].f);
        if (!*tmp || (ok && !rc && !rename(tmp, output_target(path, real)))) continue;
        if (ok && !rc) rc = rx_fail("%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
    }
    for (int i = 0; ok && !rc && i < rx_n_outputs; i++)         /* written: said only now */
        if (rx_outputs[i].said[0]) fprintf(say, "%s\n", rx_outputs[i].said);
    rx_n_outputs = 0;
    rx_outputs_failed = 0;
    return rc;
}

static const RxTensor *find_tensor(const Qwen3Model *m, const char *name) {
    RxTensor key;
    key.name = (char *)name;
    return (const RxTensor *)bsearch(&key, m->tensors, (size_t)m->n_tensors, sizeof key, tensor_name_cmp);
}

/* Looks up prefix+name and checks its dtype and that its shape is [d0] or [d0, d1] as config.json implies. */
static int bind(const Qwen3Model *m, const char *where, const char *prefix, const char *name, int64_t d0,
                int64_t d1, const RxTensor **out) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    const RxTensor *t = find_tensor(m, full);
    if (!t) return rx_fail("%s: missing tensor '%s'", where, full);
    if (t->dtype == RX_OTHER_DTYPE)
        return rx_fail("%s: tensor '%s' has dtype %s; only F32, F16 and BF16 are supported", t->file, full,
                       t->dtype_name);
    if (t->rank != (d1 ? 2 : 1) || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char got[128] = "", want[64];
        for (int i = 0; i < t->rank; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (d1) snprintf(want, sizeof want, "%lld, %lld", (long long)d0, (long long)d1);
        else snprintf(want, sizeof want, "%lld", (long long)d0);
        return rx_fail("%s: tensor '%s' has shape [%s] but config.json implies [%s]", t->file, full, got, want);
    }
    *out = t;
    return 0;
}

/* Points every weight of the model at its tensor, validating names, dtypes and shapes against the config. */
static int bind_model(Qwen3Model *m, const char *where) {
    const Qwen3Config *c = &m->cfg;
    /* Qwen3ForCausalLM writes "model.layers..."; Qwen3-Embedding checkpoints use flat names "layers...". */
    const char *pre = find_tensor(m, "model.embed_tokens.weight") ? "model."
                    : find_tensor(m, "embed_tokens.weight")       ? ""
                                                                  : "model.";
    int64_t h = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    if (!(m->layers = (Qwen3Layer *)calloc((size_t)c->n_layers, sizeof *m->layers)))
        return rx_fail("out of host memory");
    if (bind(m, where, pre, "embed_tokens.weight", c->vocab_size, h, &m->embed) ||
        bind(m, where, pre, "norm.weight", h, 0, &m->final_norm)) return -1;
    for (int l = 0; l < c->n_layers; l++) {
        Qwen3Layer *L = &m->layers[l];
        char p[64];
        snprintf(p, sizeof p, "%slayers.%d.", pre, l);
        if (bind(m, where, p, "input_layernorm.weight", h, 0, &L->input_norm) ||
            bind(m, where, p, "self_attn.q_proj.weight", q, h, &L->q_proj) ||
            bind(m, where, p, "self_attn.k_proj.weight", kv, h, &L->k_proj) ||
            bind(m, where, p, "self_attn.v_proj.weight", kv, h, &L->v_proj) ||
            bind(m, where, p, "self_attn.o_proj.weight", h, q, &L->o_proj) ||
            bind(m, where, p, "self_attn.q_norm.weight", c->head_dim, 0, &L->q_norm) ||
            bind(m, where, p, "self_attn.k_norm.weight", c->head_dim, 0, &L->k_norm) ||
            bind(m, where, p, "post_attention_layernorm.weight", h, 0, &L->post_norm) ||
            bind(m, where, p, "mlp.gate_proj.weight", c->intermediate_size, h, &L->gate_proj) ||
            bind(m, where, p, "mlp.up_proj.weight", c->intermediate_size, h, &L->up_proj) ||
            bind(m, where, p, "mlp.down_proj.weight", h, c->intermediate_size, &L->down_proj)) return -1;
    }
    /* Tied: the LM head is the embedding. A tied checkpoint that also stores lm_head.weight gets what transformers
     * (5.x) gives it: the two tied when they are equal (the real Qwen3-0.6B file), else the stored head, untied (it
     * warns "we will NOT tie them"). Never a third thing. Untied with flat names and no lm_head.weight: a Qwen3Model
     * (embedding) checkpoint, which has no head at all: lm_head stays NULL and the forwards give embeddings only. */
    if (!find_tensor(m, "lm_head.weight") && (c->tie_word_embeddings || !pre[0])) {
        m->lm_head = c->tie_word_embeddings ? m->embed : NULL;
        return 0;
    }
    if (bind(m, where, "", "lm_head.weight", c->vocab_size, h, &m->lm_head)) return -1;
    if (c->tie_word_embeddings && m->lm_head->dtype == m->embed->dtype &&
        !memcmp(m->lm_head->data, m->embed->data, m->embed->nbytes))
        m->lm_head = m->embed;
    return 0;
}

void qwen3_free(Qwen3Model *m) {
    ModelPriv *p = (ModelPriv *)m->priv;
    tensors_free(m->tensors, m->n_tensors);
    free(m->layers);
    if (p) {
        for (int i = 0; i < p->n_files; i++) unmap_file(&p->files[i]);
        for (int i = 0; p->panels && i < m->n_tensors; i++) free(p->panels[i]);
        free(p->files); free(p->owned); free(p->panels); free(p);
    }
    memset(m, 0, sizeof *m);
}

/* The slots of the reference's packed weights, made on first use (the model's tensor table is final by then). */
static float **model_panels(const Qwen3Model *m) {
    ModelPriv *p = (ModelPriv *)m->priv;
    if (!p->panels) p->panels = (float **)calloc((size_t)m->n_tensors + 1, sizeof(float *));
    return p->panels;
}

/* Maps one safetensors file and appends its tensors to the model's table. */
static int add_shard(Qwen3Model *m, const char *path) {
    ModelPriv *p = (ModelPriv *)m->priv;
    MappedFile *files = (MappedFile *)realloc(p->files, (size_t)(p->n_files + 1) * sizeof *files);
    if (!files) return rx_fail("out of host memory");
    p->files = files;
    MappedFile *mf = &p->files[p->n_files];
    if (map_file(mf, path, SIZE_MAX, 0)) return -1;
    p->n_files++;
    RxTensor *t;
    int n;
    if (rx_parse_safetensors((const uint8_t *)mf->map, mf->len, mf->path, &t, &n)) return -1;
    RxTensor *all = (RxTensor *)realloc(m->tensors, (size_t)(m->n_tensors + n + 1) * sizeof *all);
    if (!all) { tensors_free(t, n); return rx_fail("out of host memory"); }
    memcpy(all + m->n_tensors, t, (size_t)n * sizeof *t);
    free(t);
    m->tensors = all;
    m->n_tensors += n;
    return 0;
}

/* Sorts the table of a model read from several files by name, and refuses a name that two of them hold. */
static int sort_tensors(Qwen3Model *m) {
    qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, tensor_name_cmp);
    for (int i = 1; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, m->tensors[i - 1].name))
            return rx_fail("tensor '%s' appears in both %s and %s", m->tensors[i].name, m->tensors[i - 1].file,
                           m->tensors[i].file);
    return 0;
}

/* transformers reads each tensor from the shard the weight_map names, and only the tensors it names: a map that
 * names the wrong shard, or leaves a tensor out, describes another checkpoint than the files hold. */
static int check_weight_map(const Qwen3Model *m, const Json *j, int wm, const char *index) {
    JKey *keys = (JKey *)malloc((size_t)j->v[wm].count * sizeof *keys);
    if (!keys) return rx_fail("%s: out of host memory", index);
    int n = 0, rc = 0;
    for (int e = j->v[wm].child; e >= 0 && !rc; e = j->v[e].next) {
        const RxTensor *t = find_tensor(m, jkey(j, e));
        const char *in = t ? strrchr(t->file, '/') + 1 : NULL;    /* t->file is dir + "/" + its shard's name */
        keys[n++] = jkey_at(j, e);
        if (!t)
            rc = rx_fail("%s: weight_map puts tensor '%s' in %s, which does not hold it; fix the index", index,
                         jkey(j, e), jstr(j, e));
        else if (strcmp(in, jstr(j, e)))
            rc = rx_fail("%s: weight_map puts tensor '%s' in %s, but it is in %s; fix the index", index, jkey(j, e),
                         jstr(j, e), in);
    }
    qsort(keys, (size_t)n, sizeof *keys, json_key_cmp);
    for (int i = 0; i < m->n_tensors && !rc; i++) {
        const JKey name = {m->tensors[i].name, strlen(m->tensors[i].name)};
        if (!bsearch(&name, keys, (size_t)n, sizeof *keys, json_key_cmp))
            rc = rx_fail("%s: weight_map leaves out tensor '%s', which %s holds (transformers reads only the "
                         "tensors the map names); add it to the index", index, name.s,
                         strrchr(m->tensors[i].file, '/') + 1);
    }
    free(keys);
    return rc;
}
/* Every shard that the index at `path` names, once each, in the order the weight_map first names them. */
static int load_shards(Qwen3Model *m, const char *dir, const char *path) {
    ModelPriv *p = (ModelPriv *)m->priv;
    MappedFile text;
    Json j;
    if (map_file(&text, path, 64u << 20, 1)) return -1;
    int wm = shard_index_map(&j, (const char *)text.map, text.len, path), rc = 0;
    unmap_file(&text);                               /* j holds its own copy of every string */
    if (wm < 0) return -1;
    for (int e = j.v[wm].child; e >= 0 && !rc; e = j.v[e].next) {
        char sp[4096];
        int seen = 0;
        snprintf(sp, sizeof sp, "%s/%s", dir, jstr(&j, e));
        for (int f = 0; f < p->n_files && !seen; f++) seen = !strcmp(p->files[f].path, sp);
        if (!seen) rc = add_shard(m, sp);
    }
    if (!rc) rc = sort_tensors(m);
    if (!rc) rc = check_weight_map(m, &j, wm, path);
    json_free(&j);
    return rc;
}

/* The tensors bind_model left unbound. One that adds a bias to a weight the forward uses would change what it
 * computes (Qwen3 has no biases: "attention_bias" is false, or config_fields has refused it): refused. Any other
 * (an unknown name, a layer past num_hidden_layers) transformers loads, reports as unused and ignores: so do we,
 * with one line on stderr. */
static int unused_tensors(const Qwen3Model *m, const char *dir) {
    char *used = (char *)calloc((size_t)m->n_tensors + 1, 1);    /* [n_tensors] 1: bound by bind_model */
    char names[256] = "";
    if (!used) return rx_fail("out of host memory");
    /* A stored lm_head.weight is used even when, equal to the embedding, the tied head points at the embedding. */
    const RxTensor *const model[3] = {m->embed, m->final_norm, find_tensor(m, "lm_head.weight")};
    for (int i = 0; i < 3; i++) if (model[i]) used[model[i] - m->tensors] = 1;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Qwen3Layer *L = &m->layers[l];
        const RxTensor *const w[] = {L->input_norm, L->q_proj, L->k_proj, L->v_proj, L->o_proj, L->q_norm, L->k_norm,
                                     L->post_norm, L->gate_proj, L->up_proj, L->down_proj};
        for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) used[w[k] - m->tensors] = 1;
    }
    int n_unused = 0, rc = 0;
    for (int i = 0; i < m->n_tensors && !rc; i++) {
        const char *name = m->tensors[i].name;
        size_t len = strlen(name);
        char weight[300];
        if (used[i]) continue;
        snprintf(weight, sizeof weight, "%.*s.weight", (int)(len > 5 ? len - 5 : 0), name);
        const RxTensor *w = len > 5 && !strcmp(name + len - 5, ".bias") ? find_tensor(m, weight) : NULL;
        if (w && used[w - m->tensors])
            rc = rx_fail("%s: tensor '%s' adds a bias to '%s', but Qwen3 has none there (\"attention_bias\" is "
                         "false; its MLP and norms never have one), so this checkpoint computes something else; "
                         "remove the tensor only if it is all zeros", m->tensors[i].file, name, weight);
        else if (n_unused++ < 3)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%.60s'", n_unused > 1 ? ", " : "", name);
    }
    free(used);
    if (!rc && n_unused)
        fprintf(stderr, "radixmlp: warning: %s: %d tensor%s that config.json does not use, ignored as transformers "
                "ignores them: %s%s\n", dir, n_unused, n_unused > 1 ? "s" : "", names,
                n_unused > 3 ? ", ..." : "");
    return rc;
}

int qwen3_load(Qwen3Model *m, const char *dir) {
    memset(m, 0, sizeof *m);
    if (!(m->priv = calloc(1, sizeof(ModelPriv)))) return rx_fail("out of host memory");
    char path[4096], index[4096];
    MappedFile text;
    struct stat st;
    int rc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (map_file(&text, path, 1 << 20, 1)) goto fail;
    rc = rx_parse_config(&m->cfg, (const char *)text.map, text.len, path);
    unmap_file(&text);
    if (rc) goto fail;
    /* transformers reads generation_config.json when the folder has one (an unreadable or malformed one is an
     * error, never skipped: its eos ids decide where generation stops). */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (lstat(path, &st) == 0 || errno != ENOENT) {
        if (map_file(&text, path, 1 << 20, 1)) goto fail;
        rc = rx_parse_generation_config(&m->generation, (const char *)text.map, text.len, path);
        unmap_file(&text);
        if (rc) goto fail;
    }
    /* transformers looks for model.safetensors first, and reads the index only when there is no such file. */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    if ((stat(path, &st) == 0 && S_ISREG(st.st_mode)) || access(index, F_OK) != 0) rc = add_shard(m, path);
    else rc = load_shards(m, dir, index);
    if (rc || bind_model(m, dir) || unused_tensors(m, dir)) goto fail;
    return 0;
fail:
    qwen3_free(m);
    return -1;
}

static int64_t rx_numel(const RxTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

/* bf16 is the top half of an fp32; fp16 needs its exponent rebiased (and subnormals, infs, NaNs kept). */
static float bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, u;
    if (exp == 31) u = sign | 0x7F800000u | man << 13;                           /* inf, NaN */
    else if (exp) u = sign | (exp + 112) << 23 | man << 13;                      /* normal   */
    else { float f = ldexpf((float)man, -24); memcpy(&u, &f, 4); u |= sign; }    /* subnormal or zero */
    float f; memcpy(&f, &u, 4); return f;
}

/* Element i of a tensor as fp32, exactly; memcpy because the data inside a mmap need not be aligned. */
static float rx_tensor_at(const RxTensor *t, int64_t i) {
    const uint8_t *s = (const uint8_t *)t->data;
    float f;
    uint16_t h;
    if (t->dtype == RX_F32) { memcpy(&f, s + 4 * i, 4); return f; }
    memcpy(&h, s + 2 * i, 2);
    return t->dtype == RX_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* The whole tensor as fp32: dst holds rx_numel(t) floats. */
void rx_tensor_to_f32(const RxTensor *t, float *dst) {
    int64_t n = rx_numel(t);
    if (t->dtype == RX_F32) { memcpy(dst, t->data, (size_t)n * 4); return; }
    for (int64_t i = 0; i < n; i++) dst[i] = rx_tensor_at(t, i);
}

/* splitmix64: a tiny seeded generator, good enough for random weights and tokens. Its state only counts up by
 * SPLITMIX_STEP, so the state after k draws from seed is seed + k * SPLITMIX_STEP: any draw can be made directly. */
#define SPLITMIX_STEP 0x9E3779B97F4A7C15ull
static uint64_t rx_rand(uint64_t *s) {
    uint64_t z = (*s += SPLITMIX_STEP);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rx_uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((rx_rand(s) >> 40) * 0x1.0p-24);
}

/* A random fp32 model in memory, with the tensor names of a real checkpoint, so the rest of the code cannot tell
 * (gpu_model_random uploads this same model, rounded to bf16). Matrices ~ U(-1/sqrt(in), 1/sqrt(in)) keep
 * activations O(1); norm weights in [0.5, 1.5] so that a wrong weight-multiply order shows; the embedding ~ U(-1, 1).
 * Element k of the whole model (in the order below) is splitmix64's draw k from seed: every element fills in
 * parallel, and the model depends on the seed alone, never on the thread count. */
int qwen3_random(Qwen3Model *m, const Qwen3Config *c, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;                                    /* below: what rx_parse_config guarantees of a checkpoint's */
    if (c->vocab_size < 1 || c->hidden_size < 1 || c->intermediate_size < 1 || c->n_layers < 1 ||
        c->max_position_embeddings < 1 || c->n_heads < 1 || c->n_kv_heads < 1)
        return rx_fail("the model config has a size below 1 (vocab %d, hidden %d, intermediate %d, layers %d, heads "
                       "%d, kv heads %d, max_position_embeddings %d)", c->vocab_size, c->hidden_size,
                       c->intermediate_size, c->n_layers, c->n_heads, c->n_kv_heads, c->max_position_embeddings);
    if (c->n_heads % c->n_kv_heads || c->head_dim < 2 || c->head_dim % 2)
        return rx_fail("the model config needs n_heads (%d) a multiple of n_kv_heads (%d) and an even head_dim >= 2 "
                       "(%d)", c->n_heads, c->n_kv_heads, c->head_dim);
    int64_t h = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim,
            in = c->intermediate_size, v = c->vocab_size;
    struct { const char *name; int64_t d0, d1; } per_layer[] = {
        {"input_layernorm.weight", h, 0}, {"self_attn.q_proj.weight", q, h}, {"self_attn.k_proj.weight", kv, h},
        {"self_attn.v_proj.weight", kv, h}, {"self_attn.o_proj.weight", h, q},
        {"self_attn.q_norm.weight", c->head_dim, 0}, {"self_attn.k_norm.weight", c->head_dim, 0},
        {"post_attention_layernorm.weight", h, 0},
        {"mlp.gate_proj.weight", in, h}, {"mlp.up_proj.weight", in, h}, {"mlp.down_proj.weight", h, in},
    };
    int n_per = (int)(sizeof per_layer / sizeof per_layer[0]);
    int n = 2 + c->n_layers * n_per + !c->tie_word_embeddings;
    ModelPriv *p = (ModelPriv *)calloc(1, sizeof *p);
    m->priv = p;
    m->tensors = (RxTensor *)calloc((size_t)n, sizeof *m->tensors);
    if (!p || !m->tensors) { qwen3_free(m); return rx_fail("out of host memory"); }
    int64_t total = 0;
    for (int k = 0; k < n; k++) {                   /* names and shapes: embed, norm, the layers, lm_head if untied */
        RxTensor *t = &m->tensors[k];
        int i = k - 2;                              /* the index into the layers' tensors */
        char name[96];
        int64_t d0 = v, d1 = h;
        if (k == 0) snprintf(name, sizeof name, "model.embed_tokens.weight");
        else if (k == 1) { snprintf(name, sizeof name, "model.norm.weight"); d0 = h; d1 = 0; }
        else if (i == c->n_layers * n_per) snprintf(name, sizeof name, "lm_head.weight");
        else {
            snprintf(name, sizeof name, "model.layers.%d.%s", i / n_per, per_layer[i % n_per].name);
            d0 = per_layer[i % n_per].d0; d1 = per_layer[i % n_per].d1;
        }
        if (!(t->name = strdup(name))) { qwen3_free(m); return rx_fail("out of host memory"); }
        m->n_tensors = k + 1;
        t->dtype = RX_F32; t->dtype_name = "F32"; t->file = "(random)";
        t->rank = d1 ? 2 : 1; t->shape[0] = d0; t->shape[1] = d1;
        t->nbytes = (size_t)rx_numel(t) * sizeof(float);
        total += rx_numel(t);
    }
    float *data = (float *)(p->owned = malloc((size_t)total * sizeof(float)));   /* every tensor, in one block */
    if (!data) {
        qwen3_free(m);
        return rx_fail("out of host memory for a random model (%.1f MiB)", total * 4 / 1048576.0);
    }
    int64_t at = 0;                                 /* draws so far */
    for (int k = 0; k < n; k++) {
        RxTensor *t = &m->tensors[k];
        int64_t numel = rx_numel(t);
        float a = t->rank == 1 ? 0.5f : k == 0 ? 1.0f : 1.0f / sqrtf((float)t->shape[1]), mid = t->rank == 1;
        t->data = data + at;
        RX_OMP(omp parallel for schedule(static) if(numel >= RX_GRAIN))
        for (int64_t e = at; e < at + numel; e++) {
            uint64_t s = seed + (uint64_t)e * SPLITMIX_STEP;   /* the state after e draws */
            data[e] = rx_uniform(&s, mid - a, mid + a);
        }
        at += numel;
    }
    qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, tensor_name_cmp);
    if (bind_model(m, "(random model)")) { qwen3_free(m); return -1; }
    return 0;
}

/* --------------------------------------------------------------------------------------- batches and tokens files */
static int batch_alloc(RxBatch *b, int n_seqs, int64_t n_tokens) {
    memset(b, 0, sizeof *b);
    if (n_tokens > INT32_MAX) return rx_fail("batch of %lld tokens is too large", (long long)n_tokens);
    b->n_seqs = n_seqs; b->n_tokens = (int)n_tokens;
    b->input_ids = (int32_t *)rx_alloc((size_t)n_tokens * 4, "the batch");
    b->position_ids = (int32_t *)rx_alloc((size_t)n_tokens * 4, "the batch");
    b->cu_seqlens = (int32_t *)rx_alloc((size_t)(n_seqs + 1) * 4, "the batch");
    if (!b->input_ids || !b->position_ids || !b->cu_seqlens) { rx_batch_free(b); return -1; }
    b->cu_seqlens[0] = 0;
    return 0;
}

int rx_batch_make(RxBatch *b, const int32_t *const *seqs, const int *lens, int n_seqs) {
    int64_t n = 0;
    for (int s = 0; s < n_seqs; s++) n += lens[s];
    if (batch_alloc(b, n_seqs, n)) return -1;
    int at = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int i = 0; i < lens[s]; i++, at++) { b->input_ids[at] = seqs[s][i]; b->position_ids[at] = i; }
        b->cu_seqlens[s + 1] = at;
    }
    return 0;
}

void rx_batch_free(RxBatch *b) {
    free(b->input_ids); free(b->position_ids); free(b->cu_seqlens);
    memset(b, 0, sizeof *b);
}

/* One sequence per line, token ids in decimal separated by spaces; a line ends with \n or \r\n (a \r alone is refused:
 * an old Mac file would read as one line). Every problem is reported with its line. */
int rx_batch_read(RxBatch *b, const char *path) { return rx_requests_read(b, NULL, path); }

/* A line's "@K" (multi-turn: it continues request K, an earlier line) into *k (K - 1); returns the rest of the line. */
static const char *turn_of(const char *q, const char *eol, int line, const char *path, int32_t *k) {
    int64_t v = 0;
    const char *d = ++q;
    while (q < eol && isdigit((unsigned char)*q) && v <= INT32_MAX) v = v * 10 + (*q++ - '0');
    if (q == d || v < 1 || v >= line || (q < eol && *q != ' ' && *q != '\t' && *q != '\r')) {   /* \r: CRLF */
        if (line == 1) rx_fail("%s:1: @K continues an earlier line K, and line 1 has none before it", path);
        else rx_fail("%s:%d: a line may begin with @K, K an earlier line's number (1 to %d)", path, line, line - 1);
        return NULL;
    }
    *k = (int32_t)(v - 1);
    return q;
}

int rx_requests_read(RxBatch *b, int32_t **after, const char *path) {
    MappedFile f;
    memset(b, 0, sizeof *b);
    if (after) *after = NULL;
    if (map_file(&f, path, 256u << 20, 1)) return -1;
    int n_seqs = 0, rc = -1;
    int64_t n_tok = 0;
    for (int pass = 0; pass < 2; pass++) {          /* pass 0 counts and validates, pass 1 fills */
        const char *p = (const char *)f.map, *end = p + f.len;
        int s = 0, at = 0, line = 0;
        while (p < end) {
            const char *eol = (const char *)memchr(p, '\n', (size_t)(end - p));
            if (!eol) eol = end;
            line++;
            int count = 0;
            int32_t k = -1;
            const char *q = p;
            while (q < eol && (*q == ' ' || *q == '\t')) q++;
            if (after && q < eol && *q == '@') {          /* a requests file's turn: @K, then its own tokens */
                if (!(q = turn_of(q, eol, line, path, &k))) goto done;
                if (pass) (*after)[s] = k;
            }
            while (q < eol) {
                if (*q == '\r' && q + 1 < eol) {
                    rx_fail("%s:%d: a carriage return (byte %zu) inside the line: lines end with \\n or \\r\\n, not "
                            "\\r alone", path, line, (size_t)(q - (const char *)f.map));
                    goto done;
                }
                if (*q == ' ' || *q == '\t' || *q == '\r') { q++; continue; }
                if (!isdigit((unsigned char)*q)) {     /* also what follows an id without a space: "12a" */
                    /* shown as 'x', or '\x00' unless printable ASCII: a raw NUL would end the message there, and
                     * other bytes could garble the terminal */
                    char shown[8];
                    unsigned char u = (unsigned char)*q;
                    snprintf(shown, sizeof shown, isprint(u) ? "'%c'" : "'\\x%02x'", u);
                    rx_fail("%s:%d: %s is not part of a token id (ids are non-negative decimal integers)", path, line,
                            shown);
                    goto done;
                }
                int64_t v = 0;
                while (q < eol && isdigit((unsigned char)*q)) {
                    v = v * 10 + (*q++ - '0');
                    if (v > INT32_MAX) { rx_fail("%s:%d: token id too large", path, line); goto done; }
                }
                if (pass) { b->input_ids[at] = (int32_t)v; b->position_ids[at] = count; at++; }
                count++;
            }
            if (!count) {
                if (k >= 0)
                    rx_fail("%s:%d: @%d has no tokens after it: a turn adds at least one token to request %d's "
                            "conversation", path, line, k + 1, k + 1);
                else rx_fail("%s:%d: empty line (every line must hold one non-empty sequence)", path, line);
                goto done;
            }
            if (pass) b->cu_seqlens[++s] = at;
            else { n_seqs++; n_tok += count; }
            p = eol + 1;
        }
        if (pass == 0) {
            if (!n_seqs) { rx_fail("%s: no sequences", path); goto done; }
            if (batch_alloc(b, n_seqs, n_tok)) goto done;
            if (after && !(*after = (int32_t *)rx_alloc((size_t)n_seqs * sizeof(int32_t), "the turns of requests")))
                goto done;
            for (int i = 0; after && i < n_seqs; i++) (*after)[i] = -1;
        }
    }
    rc = 0;
done:
    unmap_file(&f);
    if (rc) rx_batch_free(b);
    if (rc && after) {
        free(*after);
        *after = NULL;
    }
    return rc;
}

/* The checks every forward makes before touching a weight: a batch built through the C API may be inconsistent in any
 * field, and attention would read out of bounds. One line for each problem, naming the sequence; path: the batch was
 * read from that tokens or requests file (rx_batch_read), and the line names file:line (sequence s is line s + 1). */
static int rx_batch_check(const RxBatch *b, const Qwen3Config *c, const char *path) {
    if (!b) return rx_fail("the batch is NULL");
    if (ragged_check("the batch", b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs, b->n_tokens)) return -1;
    if (b->n_seqs == 0) return rx_fail("the batch is empty (0 sequences)");
    for (int s = 0; s < b->n_seqs; s++) {
        char seq[sizeof rx_err_buf];
        int len = b->cu_seqlens[s + 1] - b->cu_seqlens[s];
        if (path) snprintf(seq, sizeof seq, "%s:%d", path, s + 1);
        else snprintf(seq, sizeof seq, "sequence %d", s);
        if (len == 0) return rx_fail("%s is empty", seq);
        if (path && len > c->max_position_embeddings)      /* a file's line: its positions are 0 .. len-1 */
            return rx_fail("%s: %d tokens, more than max_position_embeddings %d", seq, len, c->max_position_embeddings);
        for (int i = b->cu_seqlens[s]; i < b->cu_seqlens[s + 1]; i++) {
            if (b->input_ids[i] < 0 || b->input_ids[i] >= c->vocab_size)
                return rx_fail("%s: token id %d is outside the vocabulary [0, %d)", seq, b->input_ids[i],
                               c->vocab_size);
            if (b->position_ids[i] < 0 || b->position_ids[i] >= c->max_position_embeddings)
                return rx_fail("%s: position %d is beyond max_position_embeddings %d", seq, b->position_ids[i],
                               c->max_position_embeddings);
        }
    }
    return 0;
}

/* ----------------------------------------------------------------- the command line: the demo, the flags and main */
#ifndef RADIXMLP_NO_MAIN
static const char *usage =
    "usage: radixmlp                          demo: a tiny random Qwen3 (no download), CPU reference and GPU if any\n"
    "       radixmlp --check --model DIR      validate a checkpoint on the host and print its inventory\n"
    "       radixmlp --show-index --tokens FILE   the trie, I_gather and I_scatter of a batch (no model needed)\n"
    "       radixmlp --model DIR --tokens FILE [--mode baseline|radix|compact|auto] [--dump-logits FILE] [--cpu]\n"
    "                [--last-only | --embed FILE | --score YES,NO [--out FILE]]\n"
    "                FILE: one sequence per line, token ids separated by spaces. --dump-logits writes raw\n"
    "                little-endian float32 [N, vocab], rows in original token order. --cpu forces the C reference.\n"
    "                --last-only: the logits of each sequence's last token only, [n_seqs, vocab] (reranking).\n"
    "                --embed FILE: no logits; writes float32 [n_seqs, hidden], each sequence's last-token state\n"
    "                after the final norm, L2-normalised (Qwen3-Embedding's pooling).\n"
    "                --score YES,NO (token ids): reranking, as the Qwen3-Reranker model card scores a pair: P(yes),\n"
    "                the softmax over the last token's logits of YES and NO. One number a line, in the batch's order,\n"
    "                printed, or with --out FILE written there as text (9 digits: the float exactly).\n"
    "       radixmlp --model DIR --requests FILE [--prefix-cache radix|hash|off] [--page-size P] [--cache-pages M]\n"
    "                [--batch B] [--schedule fcfs|lpm] [--stats FILE] [--dump-logits FILE] [--cpu] [--show-batches]\n"
    "                [--show-cache]\n"
    "                Part II: serve FILE (one request per line) through a paged KV prefix cache, B requests per\n"
    "                forward, in file order (fcfs) or longest cached prefix first (lpm). Defaults: radix, page size\n"
    "                16, a pool of enough pages for the whole file, batch 1, fcfs, mode compact. --dump-logits writes\n"
    "                float32 [n_requests, vocab], last-token logits in file order; --stats a CSV row per request;\n"
    "                --show-batches a line per forward: N tokens = cached + new, N' new histories, rows computed;\n"
    "                --show-cache the cache after each forward (the radix tree's edges and their pages).\n"
    "                On the GPU when there is one (gpu_prefill, K/V in device memory); --cpu: the C reference.\n"
    "                [--generate N [--out FILE] [--temperature T [--top-k K] [--top-p P] [--seed S]] [--ignore-eos]]\n"
    "                --generate N: each request then generates up to N tokens, greedy, or sampled at --temperature T\n"
    "                (top-k, top-p; --seed S, default 0: request i draws from its own generator, seeded by S and i);\n"
    "                it stops at generation_config.json's eos_token_id (or config.json's, without that file) unless\n"
    "                --ignore-eos. A line may begin with @K: a turn whose prompt is request K's prompt and generated\n"
    "                tokens, then the line's tokens. --out FILE: each request's generated ids, one line each, in file\n"
    "                order. Generated pages are cached too.\n"
    "       A flag that does not apply to the chosen action is an error. The text goes to stdout: an output file may\n"
    "       not be stdout (--dump-logits /dev/stdout, or the file stdout is sent to); /dev/null is fine.\n"
    "       Exit status: 0 ok; 2 a wrong command line (a flag, a value, an output path that is an input, another\n"
    "       output or stdout); 1 bad data or a failed run (an output that cannot be written, a folder, included).\n";

static double cpu_ms(void) {   /* CPU time of this process, in ms */
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
/* *d = max|got - ref| and *rel = *d / max|ref| over two [n / row_len, row_len] outputs; a NaN or Inf in either: -1. */
static int compare(const float *got, const float *ref, size_t n, int row_len, const char *what, double *d,
                   double *rel) {
    size_t bad;
    *d = rx_max_abs_diff(got, ref, n, &bad);
    if (bad < n)
        return rx_fail("%s: element [%zu, %zu] is %g where the reference has %g: a NaN or Inf is never a match", what,
                       bad / row_len, bad % row_len, got[bad], ref[bad]);
    double scale = rx_max_abs_diff(ref, NULL, n, NULL);
    *rel = scale > 0 ? *d / scale : *d;
    return 0;
}

/* N, N' and gamma of a batch; draw_trie: the trie itself first (the demo, --show-index). */
static void print_batch_stats(const RxBatch *b, const RadixIndex *ix, int draw_trie) {
    if (draw_trie) {
        printf("The trie (Algorithm 2); cA..cB is a chain of compact rows every sequence through it follows:\n");
        radix_draw_trie(stdout, ix, b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs);
        printf("\n");
    }
    printf("N  = %d tokens in %d sequence%s (original space)\n", ix->n_tokens, b->n_seqs, b->n_seqs == 1 ? "" : "s");
    printf("N' = %d trie nodes (compact space)\n", ix->n_compact);
    printf("gamma = N'/N = %.3f, compression r = N/N' = %.2fx\n", (double)ix->n_compact / ix->n_tokens,
           (double)ix->n_tokens / ix->n_compact);
}

static int demo(void) {
    Qwen3Config cfg = {.vocab_size = 2048, .hidden_size = 256, .intermediate_size = 768, .n_layers = 4, .n_heads = 8,
                       .n_kv_heads = 4, .head_dim = 64, .max_position_embeddings = 4096, .rope_theta = 1e6,
                       .rms_norm_eps = 1e-6, .tie_word_embeddings = 1, .eos_token_id = {0}, .n_eos = 0};
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 42)) return -1;
    printf("radixmlp demo: a random Qwen3 held in memory (vocab %d, hidden %d, %d layers, %d heads / %d kv heads,\n"
           "head_dim %d), no download. Four chat requests share one 24-token system prompt; two of them also share\n"
           "the start of their question.\n\n", cfg.vocab_size, cfg.hidden_size, cfg.n_layers, cfg.n_heads,
           cfg.n_kv_heads, cfg.head_dim);
    int32_t seqs[4][40], lens[4] = {24 + 9, 24 + 5, 24 + 12, 24 + 7};
    uint64_t rng = 7;
    for (int i = 0; i < 40; i++) {
        int32_t shared = (int32_t)(rx_rand(&rng) % (uint64_t)cfg.vocab_size);
        for (int s = 0; s < 4; s++) seqs[s][i] = i < 24 ? shared : (int32_t)(rx_rand(&rng) % (uint64_t)cfg.vocab_size);
    }
    for (int i = 24; i < 27; i++) seqs[3][i] = seqs[2][i];      /* requests 2 and 3 begin their question alike */
    const int32_t *ptrs[4] = {seqs[0], seqs[1], seqs[2], seqs[3]};
    RxBatch b;
    RadixIndex ix;
    if (rx_batch_make(&b, ptrs, lens, 4) ||          /* a failed make leaves b empty */
        radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs)) {
        rx_batch_free(&b);
        qwen3_free(&m);
        return -1;
    }
    print_batch_stats(&b, &ix, 1);
    size_t n = (size_t)b.n_tokens * cfg.vocab_size;
    float *ref = (float *)malloc(n * sizeof(float)), *logits = (float *)malloc(n * sizeof(float));
    enum { DEMO_REPS = 5 };
    double ms[3][DEMO_REPS], diff[3] = {0, 0, 0};      /* per mode: milliseconds of each run, max|mode - baseline| */
    int rc = -1, threads = rx_threads(0);
    GpuModel *g = NULL;
    if (!ref || !logits) { rx_fail("out of host memory for the logits"); goto done; }
    /* Single wall-clock runs varied by 20-25% on a shared machine, enough to show radix beating r = N/N'. So: the
     * process's CPU time on one thread (time spent waiting for a busy CPU does not count, nor threads spinning at
     * a barrier), DEMO_REPS rounds of baseline, radix, compact in turn, and each mode's median. Every round
     * recomputes the same logits. */
    rx_threads(1);
    for (int rep = 0; rep < DEMO_REPS; rep++)
        for (int mode = RX_BASELINE; mode <= RX_COMPACT; mode++) {
            double t0 = cpu_ms();
            if (qwen3_forward_ref(&m, &b, (RxMode)mode, mode == RX_BASELINE ? ref : logits)) goto done;
            ms[mode][rep] = cpu_ms() - t0;
            double d, rel;                              /* a NaN or Inf, even in baseline, stops the demo */
            if (compare(mode == RX_BASELINE ? ref : logits, ref, n, cfg.vocab_size, rx_mode_name((RxMode)mode), &d,
                        &rel)) goto done;
            if (mode != RX_BASELINE) diff[mode] = fmax(diff[mode], d);
        }
    rx_threads(threads);
    printf("\nC reference forward (fp32, CPU, 1 thread), logits for all %d tokens; CPU time, median of %d runs:\n",
           b.n_tokens, DEMO_REPS);
    for (int mode = RX_BASELINE; mode <= RX_COMPACT; mode++) {
        qsort(ms[mode], DEMO_REPS, sizeof(double), cmp_double);
        double med = ms[mode][DEMO_REPS / 2];
        if (mode == RX_BASELINE) printf("  %-8s %8.1f ms   computes %d rows\n", "baseline", med, b.n_tokens);
        else printf("  %-8s %8.1f ms   computes %d rows   max|%s - baseline| = %g%s\n", rx_mode_name((RxMode)mode), med,
                    ix.n_compact, rx_mode_name((RxMode)mode), diff[mode], diff[mode] == 0 ? " (bit-identical)" : "");
    }
    printf("\n");
    if (!gpu_available())
        printf("GPU: not used: %s.\n"
               "     Only the C reference ran; with a GPU the demo also runs the CUDA forward in each mode.\n",
               radix_error());
    else if (gpu_model_upload(&g, &m)) goto done;
    else printf("GPU forward on %s (bf16 weights, fp32 accumulation):\n", gpu_device_name());
    for (int mode = RX_BASELINE; g && mode <= RX_COMPACT; mode++) {      /* every mode on the GPU against ref */
        GpuRunInfo info = {.mode = RX_BASELINE, .n_tokens = 0, .n_compact = 0, .index_ms = 0.0, .forward_ms = 0.0};
        double d, rel;
        char what[64];
        snprintf(what, sizeof what, "the GPU logits (%s)", rx_mode_name((RxMode)mode));
        if (gpu_forward(g, &b, (RxMode)mode, RX_AUTO_THRESHOLD, 0, logits, &info) ||
            compare(logits, ref, n, cfg.vocab_size, what, &d, &rel)) goto done;
        printf("  %-8s %8.3f ms   max|GPU - C reference| / max|ref| = %.2e\n", rx_mode_name((RxMode)mode),
               info.forward_ms, rel);
    }
    rc = 0;
done:
    gpu_model_free(g);
    free(ref); free(logits);
    radix_index_free(&ix); rx_batch_free(&b); qwen3_free(&m);
    return rc;
}

/* An index map, its first INDEX_SHOWN entries at most (a 100k-token batch would print a 700 KB line). */
#define INDEX_SHOWN 64
static void print_index_map(const char *what, const int32_t *idx, int n) {
    printf("%s = [", what);
    for (int i = 0; i < n && i < INDEX_SHOWN; i++) printf("%s%d", i ? ", " : "", idx[i]);
    if (n > INDEX_SHOWN) printf(", ...]  (the first %d of %d entries)\n", INDEX_SHOWN, n);
    else printf("]\n");
}

/* --show-index: the trie and both index maps of a tokens file, to check an index computed by hand. No model. */
static int show_index(const char *tokens) {
    RxBatch b;
    RadixIndex ix;
    if (rx_batch_read(&b, tokens)) return -1;
    if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs)) { rx_batch_free(&b); return -1; }
    print_batch_stats(&b, &ix, 1);
    printf("\n");
    print_index_map("I_gather  [N']  compact row -> its first original row", ix.gather, ix.n_compact);
    print_index_map("I_scatter [N]   original row -> its compact row      ", ix.scatter, ix.n_tokens);
    radix_index_free(&ix); rx_batch_free(&b);
    return 0;
}

/* Eos ids [n] on one line after what; an id outside the vocabulary is marked (generation refuses it), or the whole
 * list, if --generate does not use it (config.json's beside a generation_config.json). */
static void print_eos(const char *what, const int32_t *ids, int n, int vocab, int used) {
    printf("%s", what);
    if (!n) printf(" none");
    for (int e = 0; e < n; e++)
        printf(" %d%s", ids[e], !used || (ids[e] >= 0 && ids[e] < vocab) ? "" : " (outside the vocabulary: "
               "--generate refuses it)");
    if (n && !used) printf(" (not used: --generate takes generation_config.json's, as transformers does)");
}

/* --check: the eos ids of both files and generation_config.json's sampling defaults, as --generate will read them. */
static void print_generation_config(const Qwen3Model *m) {
    const RxGenerationConfig *g = &m->generation;
    print_eos("generation: eos ids in config.json:", m->cfg.eos_token_id, m->cfg.n_eos, m->cfg.vocab_size, !g->present);
    if (!g->present) {
        printf("; no generation_config.json (--generate: greedy unless --temperature)\n");
        return;
    }
    print_eos("; in generation_config.json:", g->eos_token_id, g->n_eos, m->cfg.vocab_size, 1);
    char k[16], t[32], p[32];
    snprintf(k, sizeof k, g->top_k < 0 ? "absent" : "%d", g->top_k);
    snprintf(t, sizeof t, g->temperature < 0 ? "absent" : "%g", g->temperature);
    snprintf(p, sizeof p, g->top_p < 0 ? "absent" : "%g", g->top_p);
    printf("\n            generation_config.json's sampling defaults (flags override them): do_sample %s, "
           "temperature %s, top_k %s, top_p %s\n", g->do_sample < 0 ? "absent" : g->do_sample ? "true" : "false", t, k,
           p);
}

/* --check: loads a checkpoint on the host, which validates it, and prints its config and tensor inventory. */
static int check_model(const char *dir) {
    Qwen3Model m;
    if (qwen3_load(&m, dir)) return -1;
    for (int i = 0; i < m.n_tensors; i++) {      /* every weight finite: one NaN would poison every logit after it */
        const RxTensor *t = &m.tensors[i];
        for (int64_t k = 0, n = rx_numel(t); t->dtype != RX_OTHER_DTYPE && k < n; k++)
            if (!isfinite(rx_tensor_at(t, k))) {
                rx_fail("%s: tensor '%s' holds %g at element %lld of %lld: a checkpoint needs finite weights", t->file,
                        t->name, rx_tensor_at(t, k), (long long)k, (long long)n);
                qwen3_free(&m);
                return -1;
            }
    }
    const Qwen3Config *c = &m.cfg;
    printf("config: vocab %d, hidden %d, intermediate %d, layers %d, heads %d, kv heads %d, head_dim %d,\n"
           "        rope_theta %g, rms_norm_eps %g, max_position_embeddings %d, tied embeddings: %s\n",
           c->vocab_size, c->hidden_size, c->intermediate_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
           c->rope_theta, c->rms_norm_eps, c->max_position_embeddings,
           !m.lm_head ? "no, and no LM head: an embedding checkpoint (--embed)" : !c->tie_word_embeddings ? "no"
           : m.lm_head == m.embed ? "yes" : "yes in config.json, but the file's lm_head.weight differs: using it, "
           "untied, as transformers does");
    print_generation_config(&m);
    int64_t params = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const RxTensor *t = &m.tensors[i];
        params += rx_numel(t);
        if (m.n_tensors <= 40 || i < 12 || i >= m.n_tensors - 4) {
            printf("  %-52s %-5s [", t->name, t->dtype_name);
            for (int d = 0; d < t->rank; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
            printf("]\n");
        } else if (i == 12) printf("  ... %d more ...\n", m.n_tensors - 16);
    }
    char count[32];                                 /* in a unit that fits: 71.2 K, 596.0 M, 4.02 B */
    if (params < 1000) snprintf(count, sizeof count, "%lld", (long long)params);
    else snprintf(count, sizeof count, "%.*f %s", params < 1000000000 ? 1 : 2,
                  params / (params < 1000000 ? 1e3 : params < 1000000000 ? 1e6 : 1e9),
                  params < 1000000 ? "K" : params < 1000000000 ? "M" : "B");
    printf("%d tensors, %s parameters, every tensor the config needs is present with the right shape, every weight "
           "finite\n", m.n_tensors, count);
    qwen3_free(&m);
    return 0;
}

/* Writes out [rows, cols] float32 to path and says so. */
static int write_f32(const char *path, const float *out, int rows, int cols, const char *what) {
    FILE *f = rx_output_open(path);
    if (!f) return -1;
    fwrite(out, sizeof(float), (size_t)rows * cols, f);
    return rx_output_close(f, "wrote %s: float32 [%d, %d], the %s", path, rows, cols, what);
}

/* A NaN or Inf in a forward's output [rows, cols] is an error, never a result: the first one, by row and column. */
static int check_finite(const float *out, int rows, int cols, const char *what, const char *dir) {
    size_t n = (size_t)rows * cols, bad;
    rx_max_abs_diff(out, NULL, n, &bad);
    if (bad == n) return 0;
    return rx_fail("the %s hold %g at row %zu, column %zu (radixmlp --check --model %s looks for non-finite weights)",
                   what, out[bad], bad / cols, bad % cols, dir);
}

/* --score: scores [n_seqs] of the last-token logits [n_seqs, vocab] (rx_rerank_scores), printed one a line, or
 * written to out as text, one a line, in the batch's order. %.9g: 9 significant digits give the float back exactly. */
static int print_scores(const float *logits, int n_seqs, int vocab, const int32_t score[2], const char *out) {
    float *p = (float *)rx_alloc((size_t)n_seqs * sizeof(float), "the scores [n_seqs]");
    FILE *f = NULL;
    int rc = -1;
    if (!p || rx_rerank_scores(logits, n_seqs, vocab, score[0], score[1], p)) goto done;
    if (!(f = out ? rx_output_open(out) : stdout)) goto done;
    for (int s = 0; s < n_seqs; s++) {
        if (!out) printf("sequence %d: P(yes) = ", s);
        fprintf(f, "%.9g\n", p[s]);
    }
    if (out && rx_output_close(f, "wrote %s: %d line%s, P(yes) of each sequence in the batch's order (YES %d, NO %d)",
                               out, n_seqs, n_seqs == 1 ? "" : "s", score[0], score[1])) goto done;
    rc = 0;
done:
    free(p);
    return rc;
}

/* last_only: logits of each sequence's last token only; embed: its normed state, L2-normalised, instead of logits;
 * score (or NULL): the yes and no ids of --score, whose P(yes) of each sequence goes to out (NULL: printed); ids the
 * model's vocabulary does not have are refused before the forward (-1: found in a file, as a token id of the tokens
 * file would be). */
static int run_checkpoint(const char *dir, const char *tokens, RxMode mode, const char *dump, int force_cpu,
                          int last_only, const char *embed, const int32_t *score, const char *out) {
    Qwen3Model m;
    RxBatch b;
    RadixIndex ix;
    if (qwen3_load(&m, dir)) return -1;
    if (!embed && !m.lm_head) { qwen3_free(&m); return no_lm_head(); }
    for (int k = 0; score && k < 2; k++)
        if (score[k] >= m.cfg.vocab_size) {
            rx_fail("--score %d,%d: the %s id %d is not below this model's vocabulary size %d", score[0], score[1],
                    k ? "NO" : "YES", score[k], m.cfg.vocab_size);
            qwen3_free(&m);
            return -1;
        }
    last_only |= score != NULL;                          /* a score reads the last token's logits only */
    int rc = -1;
    float *logits = NULL;
    GpuModel *g = NULL;
    if (rx_batch_read(&b, tokens) || rx_batch_check(&b, &m.cfg, tokens) ||  /* a failed read leaves b empty */
        radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs)) {
        rx_batch_free(&b); qwen3_free(&m); return -1;
    }
    print_batch_stats(&b, &ix, 0);
    const int rows = last_only || embed ? b.n_seqs : b.n_tokens, cols = embed ? m.cfg.hidden_size : m.cfg.vocab_size;
    const char *what = embed     ? "embeddings [n_seqs, hidden]"
                     : last_only ? "logits [n_seqs, vocab]"
                                 : "logits [N, vocab]";
    if (!(logits = (float *)rx_alloc((size_t)rows * cols * sizeof(float), what))) goto done;
    if (!force_cpu && gpu_available()) {
        GpuRunInfo info = {.mode = RX_BASELINE, .n_tokens = 0, .n_compact = 0, .index_ms = 0.0, .forward_ms = 0.0};
        if (gpu_model_upload(&g, &m)) goto done;
        if (embed ? gpu_embed(g, &b, mode, RX_AUTO_THRESHOLD, logits, &info)
                  : gpu_forward(g, &b, mode, RX_AUTO_THRESHOLD, last_only, logits, &info)) goto done;
        printf("GPU %s, mode %s: forward %.3f ms, index build %.3f ms\n", gpu_device_name(), rx_mode_name(info.mode),
               info.forward_ms, info.index_ms);
        printf("bf16 budget against the C reference: %.4g x max|ref| (%d layers)\n", rx_bf16_tolerance(&m.cfg),
               m.cfg.n_layers);
    } else {
        if (!force_cpu) printf("%s: running the C reference\n", radix_error());
        RxMode ran = mode == RX_AUTO ? rx_auto_mode(ix.n_compact, ix.n_tokens, RX_AUTO_THRESHOLD) : mode;
        double t0 = rx_now_ms();
        if (last_only || embed ? qwen3_forward_ref_last(&m, &b, ran, embed ? NULL : logits, embed ? logits : NULL)
                               : qwen3_forward_ref(&m, &b, ran, logits)) goto done;
        printf("C reference, mode %s%s: %.1f ms\n", rx_mode_name(ran), mode == RX_AUTO ? " (chosen by auto)" : "",
               rx_now_ms() - t0);
    }
    if (check_finite(logits, rows, cols, what, dir)) goto done;
    for (int s = 0; !embed && !score && s < b.n_seqs; s++) {      /* the greedy next token of each sequence */
        const float *row = logits + (size_t)(last_only ? s : b.cu_seqlens[s + 1] - 1) * m.cfg.vocab_size;
        int best = 0;
        for (int v = 1; v < m.cfg.vocab_size; v++) if (row[v] > row[best]) best = v;
        printf("sequence %d: next token %d (logit %.4f)\n", s, best, row[best]);
    }
    for (int s = 0; embed && s < b.n_seqs; s++) {
        const float *e = logits + (size_t)s * cols;
        printf("sequence %d: embedding [%d], first values %.4f %.4f %.4f\n", s, cols, e[0], e[1 % cols], e[2 % cols]);
    }
    if (score && print_scores(logits, b.n_seqs, cols, score, out)) goto done;
    rc = embed ? write_f32(embed, logits, rows, cols, what) : dump ? write_f32(dump, logits, rows, cols, what) : 0;
done:
    gpu_model_free(g);
    free(logits); radix_index_free(&ix); rx_batch_free(&b); qwen3_free(&m);
    return rc;
}

/* --out: request i's generated ids [n_out[i]] on line i, space-separated, in the requests file's order. */
static int write_generated(const char *path, const RxGenerate *g, int n) {
    FILE *f = rx_output_open(path);
    if (!f) return -1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < g->n_out[i]; j++) fprintf(f, "%s%d", j ? " " : "", g->out[(size_t)i * g->max_new + j]);
        fprintf(f, "\n");
    }
    return rx_output_close(f, "wrote %s: %d line%s of generated token ids", path, n, n == 1 ? "" : "s");
}

/* --stats: a CSV row per request, in file order; a refused one (batch_of -1) has empty fields and 0 generated. */
static int write_stats(const char *path, int n, const int32_t *batch_of, const int *prompt_of, const int32_t *cached_of,
                       const int *n_out) {
    FILE *f = rx_output_open(path);
    if (!f) return -1;
    fprintf(f, "request,batch,prompt_tokens,cached_tokens,generated_tokens\n");
    for (int s = 0; s < n; s++)
        if (batch_of[s] < 0) fprintf(f, "%d,,,,0\n", s);
        else fprintf(f, "%d,%d,%d,%d,%d\n", s, batch_of[s], prompt_of[s], cached_of[s], n_out[s]);
    return rx_output_close(f, "wrote %s: %d row%s", path, n, n == 1 ? "" : "s");
}

/* The sampling a run uses, as transformers' generate() decides it: a flag given wins, else the checkpoint's
 * generation_config.json, else this program's default (greedy; when sampling, temperature 1, top-k off, top-p 1).
 * do_sample false is greedy whatever the temperature; --temperature T samples at T above 0 and is greedy at 0,
 * whatever do_sample says. In g, -1 marks a flag not given; flag: a sampling flag given (--top-k, --top-p, --seed)
 * or NULL. Writes what was used, and where each value came from, to used [n]. Returns 2 (a command-line mistake,
 * exit 2) when a sampling flag is given to a run that is greedy. */
static int resolve_sampling(RxGenerate *g, const RxGenerationConfig *f, const char *flag, char *used, size_t n) {
    static const char *const GC = "generation_config.json";
    static const RxGenerationConfig none = {.present = 0, .eos_token_id = {0}, .n_eos = 0, .do_sample = -1,
                                            .temperature = -1, .top_p = -1, .top_k = -1};
    if (!f->present) f = &none;
    const int t_flag = g->temperature >= 0;
    const int sample = t_flag ? g->temperature > 0 : f->do_sample == 1 && f->temperature != 0;
    if (!sample) {
        const char *why = t_flag            ? "--temperature 0"
                        : f->do_sample == 0 ? "do_sample false in generation_config.json"
                        : f->do_sample == 1 ? "temperature 0 in generation_config.json"
                        : "the default: no --temperature, no do_sample true in generation_config.json";
        if (flag) {
            rx_fail("%s applies to sampling: give --temperature T above 0 (without it: greedy, by %s)", flag, why);
            return 2;
        }
        g->temperature = 0;
        g->top_k = 0;
        g->top_p = 1;
        snprintf(used, n, "greedy (%s)", why);
        return 0;
    }
    const char *t_from = t_flag ? "--temperature" : f->temperature >= 0 ? GC : "default";
    const char *k_from = g->top_k >= 0 ? "--top-k" : f->top_k >= 0 ? GC : "default";
    const char *p_from = g->top_p >= 0 ? "--top-p" : f->top_p >= 0 ? GC : "default";
    if (!t_flag) g->temperature = f->temperature >= 0 ? (float)f->temperature : 1;
    if (g->top_k < 0) g->top_k = f->top_k >= 0 ? f->top_k : 0;
    if (g->top_p < 0) g->top_p = f->top_p >= 0 ? (float)f->top_p : 1;
    char k[16];
    snprintf(k, sizeof k, g->top_k ? "%d" : "off", g->top_k);
    snprintf(used, n, "sampled%s: temperature %g (%s), top-k %s (%s), top-p %g (%s), seed %llu",
             t_flag ? "" : " (do_sample true in generation_config.json)", g->temperature, t_from, k, k_from, g->top_p,
             p_from, (unsigned long long)g->seed);
    return 0;
}

/* The eos ids a run stops at (*ids, n), as transformers' generate() takes them: generation_config.json's when the
 * folder has one (null or absent there: none), else config.json's (GenerationConfig.from_model_config); checked
 * against the vocabulary, their file named. */
static int run_eos(const Qwen3Model *m, const char *dir, const int32_t **ids, int *n) {
    const int from_gc = m->generation.present;
    char file[4200];
    snprintf(file, sizeof file, "%s/%s", dir, from_gc ? "generation_config.json" : "config.json");
    *ids = from_gc ? m->generation.eos_token_id : m->cfg.eos_token_id;
    *n = from_gc ? m->generation.n_eos : m->cfg.n_eos;
    return rx_eos_check(*ids, *n, m->cfg.vocab_size, file);
}

/* What --requests refuses before any work: a request whose positions would pass max_position_embeddings (0 to its
 * prompt + N - 2; an @K turn's prompt is at most K's, N generated tokens and its line: prompt_of [n]), or one that
 * cannot fit in --cache-pages even alone (a turn's size is known once K has run: rx_serve refuses it then). */
static int requests_fit(const int *lens, const int32_t *after, int n, const Qwen3Config *c, const RxServeOptions *o,
                        int N, const char *path, int *prompt_of) {
    for (int s = 0; s < n && N; s++) {
        int64_t prompt = (after[s] >= 0 ? (int64_t)prompt_of[after[s]] + N : 0) + lens[s];
        prompt_of[s] = (int)(prompt < INT32_MAX ? prompt : INT32_MAX);
        if (prompt + N - 1 > c->max_position_embeddings)
            return rx_fail("%s:%d: a prompt of %s%lld tokens and %d to generate reach position %lld, beyond "
                           "max_position_embeddings %d: give a smaller --generate", path, s + 1,
                           after[s] >= 0 ? "up to " : "", (long long)prompt, N, (long long)(prompt + N - 2),
                           c->max_position_embeddings);
    }
    for (int s = 0; s < n && o->n_pages; s++) {
        int most = lens[s] + (N ? N - 1 : 0), pages = (most + o->page_size - 1) / o->page_size;
        if (after[s] < 0 && pages > o->n_pages)
            return rx_fail("%s:%d: a request of %d tokens%s needs %d pages of %d tokens, but --cache-pages is %d", path,
                           s + 1, most, N ? " (its prompt and what it generates)" : "", pages, o->page_size,
                           o->n_pages);
    }
    return 0;
}

/* --requests: Part II end to end (rx_serve), on the GPU when there is one, else (or with --cpu) the C reference. With
 * o->gen, each request generates after its prefill (greedy or sampled; it stops at run_eos's ids unless ignore_eos);
 * a line "@K ..." is a turn after request K. */
static int run_requests(const char *dir, const char *path, RxServeOptions *o, const char *stats, const char *dump,
                        const char *out, int ignore_eos, int force_cpu, const char *sampling_flag) {
    Qwen3Model m;
    RxBatch file;
    GpuModel *g = NULL;
    int32_t *after = NULL;
    if (qwen3_load(&m, dir)) return -1;
    if (rx_requests_read(&file, &after, path)) { qwen3_free(&m); return -1; }
    int n = file.n_seqs, V = m.cfg.vocab_size, rc = -1, N = o->gen ? o->gen->max_new : 0, refused = 0;
    RxGenerate gen = {};                    /* the options' settings, with this model's eos and the outputs */
    if (o->gen) gen = *o->gen;
    const int32_t **seqs = (const int32_t **)malloc((size_t)n * sizeof(int32_t *));   /* [n_requests] */
    int *lens = (int *)calloc((size_t)3 * n, sizeof(int)), *prompt_of = lens + n, *n_out = lens + 2 * n;   /* [n] */
    int32_t *batch_of = (int32_t *)malloc((size_t)2 * n * sizeof(int32_t)), *cached_of = batch_of + n;   /* [n] */
    int32_t *gen_out = (int32_t *)rx_alloc((size_t)n * (N ? N : 1) * sizeof(int32_t), "the generated ids");
    float *logits = dump ? (float *)rx_alloc((size_t)n * V * sizeof(float), "the logits [n_requests, vocab]") : NULL;
    RxServeStats st;
    if (!seqs || !lens || !batch_of || !gen_out || (dump && !logits)) {
        rx_fail("out of host memory for %d requests", n);
        goto done;
    }
    for (int s = 0; s < n; s++) {
        seqs[s] = file.input_ids + file.cu_seqlens[s];
        lens[s] = file.cu_seqlens[s + 1] - file.cu_seqlens[s];
    }
    o->source = path;                       /* a message names request i by its line, path:i+1 */
    o->model_id = 1469598103934665603ull;   /* the cache's namespace: an FNV-1a hash of the checkpoint's path */
    for (const char *c = dir; *c; c++) o->model_id = (o->model_id ^ (uint8_t)*c) * 1099511628211ull;
    o->after = after;
    char used[400];                         /* what resolve_sampling chose, for the summary */
    used[0] = '\0';
    if (N && (rc = resolve_sampling(&gen, &m.generation, sampling_flag, used, sizeof used))) goto done;
    rc = -1;
    if (N && !ignore_eos && run_eos(&m, dir, &gen.eos, &gen.n_eos)) goto done;
    gen.out = gen_out;
    gen.n_out = n_out;
    o->gen = N ? &gen : NULL;
    if (rx_batch_check(&file, &m.cfg, path) || requests_fit(lens, after, n, &m.cfg, o, N, path, prompt_of)) goto done;
    if (!force_cpu && gpu_available() && gpu_model_upload(&g, &m)) goto done;   /* the GPU when there is one */
    o->gpu = g;
    if (o->show_cache)
        printf("--show-cache: 'model %llu' is this checkpoint's id in the cache (a hash of its path): K/V computed by "
               "one model is never offered to another\n", (unsigned long long)o->model_id);
    for (int s = 0; s < n; s++) batch_of[s] = -1;      /* -1 after rx_serve: the request was refused */
    refused = rx_serve(&m, seqs, lens, n, o, logits, batch_of, cached_of, &st);
    if (refused < 0) goto done;
    char refusal[sizeof rx_err_buf];                    /* said last, after what the others' outputs give */
    snprintf(refusal, sizeof refusal, "%s", radix_error());
    for (int s = 0; s < n; s++)                         /* an @K turn's prompt: K's prompt and output, then its line */
        prompt_of[s] = (after[s] >= 0 ? prompt_of[after[s]] + n_out[after[s]] : 0) + lens[s];
    for (int s = 0; logits && s < n; s++)               /* a refused request has no logits: NaN, never stale memory */
        for (int v = 0; batch_of[s] < 0 && v < V; v++) logits[(size_t)s * V + v] = NAN;
    printf("%d request%s, %ld prompt tokens; prefix cache %s, page size %d, KV pool of %d page%s%s; batch %d, %s;"
           " %s%s, mode %s: %.1f ms\n", n, n == 1 ? "" : "s", st.prompt_tokens, rx_cache_kind_name(o->cache),
           o->page_size, st.pool_pages, st.pool_pages == 1 ? "" : "s", o->n_pages ? "" : " (enough for the whole file)",
           o->batch, o->lpm ? "lpm" : "fcfs",
           g ? "the GPU, bf16: " : "the C reference on the CPU", g ? gpu_device_name() : "", rx_mode_name(o->mode),
           st.ms);
    if (N) {
        printf("generation: up to %d token%s, %s; %s", N, N == 1 ? "" : "s", used,
               ignore_eos ? "eos ids ignored (--ignore-eos)" : gen.n_eos ? "stops at eos ids" : "no eos id");
        for (int e = 0; e < gen.n_eos; e++) printf(" %d", gen.eos[e]);
        printf("%s\n", ignore_eos ? "" : m.generation.present ? " in generation_config.json"
                                                              : " in config.json (no generation_config.json)");
    }
    if (g) printf("bf16 budget against the C reference: %.4g x max|ref| (%d layers)\n", rx_bf16_tolerance(&m.cfg),
                  m.cfg.n_layers);
    if (stats && write_stats(stats, n, batch_of, prompt_of, cached_of, n_out)) goto done;
    if (dump && write_f32(dump, logits, n, V, "last-token logits [n_requests, vocab], rows in file order")) goto done;
    if (out && write_generated(out, &gen, n)) goto done;
    printf("requests %d in %d batch%s, prompt tokens %ld, cached tokens %ld, hit rate %.1f%% (cached / prompt "
           "tokens)\n", n, st.n_batches, st.n_batches == 1 ? "" : "es", st.prompt_tokens, st.cached_tokens,
           st.prompt_tokens ? 100.0 * st.cached_tokens / st.prompt_tokens : 0.0);
    if (N)
        printf("generated tokens %ld; of the cached tokens %ld were generated by earlier turns; preemptions %d (%ld "
               "tokens prefilled again)\n", st.generated_tokens, st.cached_generated, st.preemptions,
               st.recomputed_tokens);
    printf("compact rows computed %ld (of %ld uncached tokens), evictions %ld pages, "
           "pages in use by the cache %d of %d\n",
           st.rows_computed, st.prompt_tokens - st.cached_tokens + st.generated_tokens - (N ? n - st.refused : 0) +
           st.recomputed_tokens, st.evicted_pages, st.cache_pages, st.pool_pages);
    if (st.request_pages || st.held_after_flush) {
        rx_fail("%d pages held by requests at the end, %d pages not free after the final flush: a leak",
                st.request_pages, st.held_after_flush);
        goto done;
    }
    printf("after the final flush: 0 pages held by requests, all %d page%s free (no leak)\n", st.pool_pages,
           st.pool_pages == 1 ? "" : "s");
    if (refused) {
        rx_fail("%s; the other requests' outputs are written (a refused request's: an empty line in --out, empty "
                "fields in --stats, NaN logits)", refusal);
        goto done;
    }
    rc = 0;
done:
    FREE_ALL(seqs, lens, batch_of, gen_out, logits, after);
    rx_batch_free(&file); gpu_model_free(g); qwen3_free(&m);
    return rc;
}

/* A mistake in the command line: one line, exit code 2 from main. */
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "radixmlp: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

/* A real flag value in [lo, hi] (lo_open: above lo), or exit code 2 from main. The value is kept in single
 * precision, so one rule for every such flag: a nonzero value below FLT_MIN (1.2e-38, the smallest normal float) is
 * refused here, whatever other flags say; it would become 0 or a subnormal, which is not the number given. */
static int parse_real(const char *flag, const char *s, double lo, int lo_open, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int tiny = v != 0 && fabs(v) < FLT_MIN;         /* strtod sets ERANGE on underflow: tiny, not malformed */
    if ((errno && !tiny) || end == s || *end || !(lo_open ? v > lo : v >= lo) || !(v <= hi))
        return usage_error("%s takes a number %s %g and at most %g, not '%s'", flag, lo_open ? "above" : "from", lo, hi,
                           s);
    if (tiny)
        return usage_error("%s takes a number %s %g and at most %g, not '%s': a nonzero value must be at least %g "
                           "(single precision holds no smaller normal number)", flag, lo_open ? "above" : "from", lo,
                           hi, s, FLT_MIN);
    *out = (float)v;
    return 0;
}

/* An integer flag value in [lo, hi], or exit code 2 from main. */
static int parse_count(const char *flag, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return usage_error("%s takes an integer from %d to %d, not '%s'", flag, lo, hi, s);
    *out = (int)v;
    return 0;
}

/* --score YES,NO: two different token ids (each checked against the model's vocabulary once it is loaded), or exit
 * code 2 from main. */
static int parse_score(const char *s, int32_t ids[2]) {
    const char *p = s;
    for (int k = 0; k < 2; k++) {
        char *end;
        errno = 0;
        long v = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1;
        if (v < 0 || errno || v > INT32_MAX || *end != (k ? '\0' : ','))
            return usage_error("--score takes two token ids, YES,NO (e.g. 9693,2152), not '%s'", s);
        ids[k] = (int32_t)v;
        p = end + 1;
    }
    if (ids[0] == ids[1]) return usage_error("--score %s: YES and NO are one id; a score needs two", s);
    return 0;
}

/* A file of the model folder that is path, or NULL: an output must never overwrite the checkpoint it reads. */
static const char *model_file_at(const char *dir, const char *path) {
    static char file[4096];
    DIR *d = dir ? opendir(dir) : NULL;
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
        found = e->d_name[0] != '.' && rx_same_file(file, path);
    }
    if (d) closedir(d);
    return found ? file : NULL;
}

/* An output file is checked before the work starts, not after it: is it none of the inputs (the tokens or requests
 * file, a file of the model folder), none of the outputs before it (outputs[0..k)) and not stdout, where the text
 * goes (a command line mistake: 2 from main)? Can it be written (else -1)? A file this check creates is removed
 * again (the run writes it at the end); an existing one is left as it is. */
static int check_output(const char *flag, const char *path, const char *const outputs[][2], int k, const char *input,
                        const char *model) {
    const char *clash = input && rx_same_file(input, path) ? input : model_file_at(model, path);
    if (clash) return usage_error("%s %s: that is the input %s; write the output to another file", flag, path, clash);
    for (int o = 0; o < k; o++)
        if (outputs[o][1] && rx_same_file(outputs[o][1], path))
            return usage_error("%s %s: %s writes that file too; give each output its own file", flag, path,
                               outputs[o][0]);
    if (rx_is_stdout(path))
        return usage_error("%s %s: that is stdout, where the text goes; write the output to a file", flag, path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644), created = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = open(path, O_WRONLY | O_NONBLOCK);
    if (fd < 0) return rx_fail("%s %s: cannot write: %s", flag, path, strerror(errno));
    close(fd);
    if (created) unlink(path);
    return 0;
}

/* The actions, and the flags each one takes. Any flag given to an action that does not take it is an error. */
enum { DEMO, CHECK, SHOW_INDEX, RUN, SERVE, N_ACTIONS };
static const char *const ACTION_NAME[N_ACTIONS] = {"the demo", "--check", "--show-index",
                                                    "--model DIR --tokens FILE", "--requests FILE"};
enum { F_MODEL, F_TOKENS, F_REQUESTS, F_CHECK, F_SHOW_INDEX, F_MODE, F_DUMP, F_CPU, F_LAST_ONLY, F_EMBED, F_SCORE,
       F_CACHE, F_PAGE_SIZE, F_CACHE_PAGES, F_BATCH, F_SCHEDULE, F_STATS, F_SHOW_BATCHES, F_SHOW_CACHE, F_GENERATE,
       F_OUT, F_TEMPERATURE, F_TOP_K, F_TOP_P, F_SEED, F_IGNORE_EOS, N_FLAGS };
#define ON(a) (1 << (a))
static const struct { const char *name; int takes_value, actions; } FLAGS[N_FLAGS] = {   /* in the enum's order */
    {"--model", 1, ON(CHECK) | ON(RUN) | ON(SERVE)}, {"--tokens", 1, ON(SHOW_INDEX) | ON(RUN)},
    {"--requests", 1, ON(SERVE)}, {"--check", 0, ON(CHECK)}, {"--show-index", 0, ON(SHOW_INDEX)},
    {"--mode", 1, ON(RUN) | ON(SERVE)}, {"--dump-logits", 1, ON(RUN) | ON(SERVE)}, {"--cpu", 0, ON(RUN) | ON(SERVE)},
    {"--last-only", 0, ON(RUN)}, {"--embed", 1, ON(RUN)}, {"--score", 1, ON(RUN)}, {"--prefix-cache", 1, ON(SERVE)},
    {"--page-size", 1, ON(SERVE)}, {"--cache-pages", 1, ON(SERVE)}, {"--batch", 1, ON(SERVE)},
    {"--schedule", 1, ON(SERVE)}, {"--stats", 1, ON(SERVE)}, {"--show-batches", 0, ON(SERVE)},
    {"--show-cache", 0, ON(SERVE)}, {"--generate", 1, ON(SERVE)}, {"--out", 1, ON(RUN) | ON(SERVE)},
    {"--temperature", 1, ON(SERVE)}, {"--top-k", 1, ON(SERVE)}, {"--top-p", 1, ON(SERVE)}, {"--seed", 1, ON(SERVE)},
    {"--ignore-eos", 0, ON(SERVE)},
};

/* --requests' options: the defaults --help gives, then the flags given (val [N_FLAGS]); 2: a value out of range. */
static int serving_options(const char *const *val, RxMode mode, RxServeOptions *so) {
    *so = (RxServeOptions){.cache = RX_CACHE_RADIX, .page_size = 16, .n_pages = 0, .batch = 1, .lpm = 0,
                           .lpm_window = 0, .mode = mode, .model_id = 0, .trace = val[F_SHOW_BATCHES] ? stdout : NULL,
                           .show_cache = val[F_SHOW_CACHE] ? stdout : NULL, .gpu = NULL, .source = NULL, .gen = NULL,
                           .after = NULL};                          /* n_pages 0: a pool for the whole file */
    if (val[F_CACHE] && rx_cache_kind_parse(val[F_CACHE], &so->cache)) return usage_error("%s", radix_error());
    if ((val[F_PAGE_SIZE] && parse_count("--page-size", val[F_PAGE_SIZE], 1, 4096, &so->page_size)) ||
        (val[F_CACHE_PAGES] && parse_count("--cache-pages", val[F_CACHE_PAGES], 1, 1 << 24, &so->n_pages)) ||
        (val[F_BATCH] && parse_count("--batch", val[F_BATCH], 1, 1024, &so->batch)))
        return 2;
    if ((int64_t)so->n_pages * so->page_size > INT32_MAX)      /* the pool's token slots are indexed in 32 bits */
        return usage_error("--cache-pages %d x --page-size %d is %lld token slots; a KV pool holds at most %d",
                           so->n_pages, so->page_size, (long long)so->n_pages * so->page_size, INT32_MAX);
    if (val[F_SCHEDULE] && !(so->lpm = !strcmp(val[F_SCHEDULE], "lpm")) && strcmp(val[F_SCHEDULE], "fcfs"))
        return usage_error("--schedule takes fcfs or lpm, not '%s'", val[F_SCHEDULE]);
    return 0;
}

int main(int argc, char **argv) {
    const char *val[N_FLAGS] = {NULL};          /* each flag given: its value, or its own name if it takes none */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            if (!rx_output_close(stdout, NULL)) return 0;
            fprintf(stderr, "radixmlp: %s\n", radix_error());
            return 1;
        }
        int f = 0;
        while (f < N_FLAGS && strcmp(a, FLAGS[f].name)) f++;
        if (f == N_FLAGS) return usage_error("unknown argument '%s' (radixmlp --help lists them)", a);
        if (val[f]) return usage_error("%s is given twice", a);
        if (FLAGS[f].takes_value && i + 1 == argc) return usage_error("%s needs a value", a);
        if (FLAGS[f].takes_value && !argv[i + 1][0]) return usage_error("%s needs a value, not an empty string", a);
        val[f] = FLAGS[f].takes_value ? argv[++i] : a;
    }
    if (!!val[F_CHECK] + !!val[F_SHOW_INDEX] + !!val[F_REQUESTS] > 1)
        return usage_error("choose one of --check, --show-index and --requests");
    if (rx_check_env()) return usage_error("%s", radix_error());     /* a bad $RADIXMLP_CPU or $OMP_NUM_THREADS */
    int action = val[F_REQUESTS] ? SERVE : val[F_CHECK] ? CHECK : val[F_SHOW_INDEX] ? SHOW_INDEX
               : val[F_MODEL] || val[F_TOKENS] ? RUN : DEMO;
    for (int f = 0; f < N_FLAGS; f++) {
        if (!val[f] || FLAGS[f].actions & ON(action)) continue;
        char with[128] = "";
        for (int a = 0; a < N_ACTIONS; a++)
            if (FLAGS[f].actions & ON(a))
                snprintf(with + strlen(with), sizeof with - strlen(with), "%s%s", *with ? " or " : "", ACTION_NAME[a]);
        return usage_error("%s does not apply to %s; it goes with %s", FLAGS[f].name, ACTION_NAME[action], with);
    }
    const char *model = val[F_MODEL], *tokens = val[F_TOKENS], *dump = val[F_DUMP], *requests = val[F_REQUESTS],
               *embed = val[F_EMBED], *stats = val[F_STATS];
    int force_cpu = !!val[F_CPU], last_only = !!val[F_LAST_ONLY];
    if ((action == CHECK || action == SERVE) && !model)
        return usage_error("%s needs --model DIR", ACTION_NAME[action]);
    if (action == SHOW_INDEX && !tokens) return usage_error("--show-index needs --tokens FILE");
    if (action == RUN && (!model || !tokens))
        return usage_error("running a checkpoint needs both --model and --tokens");
    if (embed && (dump || last_only))
        return usage_error("--embed computes no logits: it takes neither --dump-logits nor --last-only");
    int32_t score[2];                                        /* --score YES,NO: the two token ids */
    if (val[F_SCORE] && parse_score(val[F_SCORE], score)) return 2;
    if (val[F_SCORE] && (embed || (dump && !last_only)))
        return usage_error("--score reads the last token's logits: it takes no --embed, and --dump-logits only with "
                           "--last-only");
    if (action == RUN && val[F_OUT] && !val[F_SCORE]) return usage_error("--out goes with --score YES,NO");
    for (int f = F_OUT + (action == RUN); f < N_FLAGS; f++)  /* the generation flags go with --generate N */
        if (val[f] && !val[F_GENERATE]) return usage_error("%s goes with --generate N", FLAGS[f].name);
    RxGenerate gen = {};                    /* run_requests adds the checkpoint's defaults, the eos ids, the outputs */
    gen.temperature = gen.top_p = gen.top_k = -1;       /* -1: not given (resolve_sampling) */
    int seed = 0;
    if ((val[F_GENERATE] && parse_count("--generate", val[F_GENERATE], 1, 1 << 20, &gen.max_new)) ||
        (val[F_TEMPERATURE] && parse_real("--temperature", val[F_TEMPERATURE], 0, 0, 100, &gen.temperature)) ||
        (val[F_TOP_K] && parse_count("--top-k", val[F_TOP_K], 0, 1 << 22, &gen.top_k)) ||
        (val[F_TOP_P] && parse_real("--top-p", val[F_TOP_P], 0, 1, 1, &gen.top_p)) ||
        (val[F_SEED] && parse_count("--seed", val[F_SEED], 0, INT32_MAX, &seed)))
        return 2;
    gen.seed = (uint64_t)seed;
    const char *sampling_flag = NULL;       /* sampling's own flags need sampling: --temperature 0 is greedy */
    for (int f = F_SEED; f >= F_TOP_K; f--)
        if (val[f]) sampling_flag = FLAGS[f].name;
    if (sampling_flag && val[F_TEMPERATURE] && gen.temperature == 0)
        return usage_error("%s applies to sampling: give --temperature T above 0 (without it: greedy)", sampling_flag);
    RxMode mode = action == SERVE ? RX_COMPACT : RX_AUTO;
    RxServeOptions so;
    if (val[F_MODE] && rx_mode_parse(val[F_MODE], &mode)) return usage_error("%s", radix_error());
    if (serving_options(val, mode, &so)) return 2;
    const char *outputs[4][2] = {
        {"--dump-logits", dump}, {"--embed", embed}, {"--stats", stats}, {"--out", val[F_OUT]}};
    int rc = 0;
    const char *input = action == SERVE ? requests : tokens;
    for (int k = 0; k < 4 && !rc; k++)
        if (outputs[k][1]) rc = check_output(outputs[k][0], outputs[k][1], outputs, k, input, model);
    if (rc == 2) return 2;
    if (!rc) {
        if (action == SERVE) {
            so.gen = gen.max_new ? &gen : NULL;
            rc = run_requests(model, requests, &so, stats, dump, val[F_OUT], !!val[F_IGNORE_EOS], force_cpu,
                              sampling_flag);
        }
        else if (action == CHECK) rc = check_model(model);
        else if (action == SHOW_INDEX) rc = show_index(tokens);
        else if (action == RUN)
            rc = run_checkpoint(model, tokens, mode, dump, force_cpu, last_only, embed, val[F_SCORE] ? score : NULL,
                                val[F_OUT]);
        else rc = demo();
    }
    if (!rc) rc = rx_output_close(stdout, NULL);                 /* the text: an output too */
    if (rx_outputs_finish(1, stdout) && !rc) rc = -1;            /* each output written whole, or none replaced */
    if (!rc) rc = rx_output_close(stdout, NULL);                 /* and the lines that say so */
    if (rc) { fprintf(stderr, "radixmlp: %s\n", radix_error()); return rc == 2 ? 2 : 1; }   /* 2: resolve_sampling */
    return 0;
}
#endif /* RADIXMLP_NO_MAIN */

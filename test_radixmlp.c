/* test_radixmlp.c - the specification of radixmlp, as tests.
 *
 *   ./test_radixmlp              every test
 *   ./test_radixmlp trie loader  the tests of these groups (or names): trie, loader, reference, gpu, cli, bench,
 *                                cache, prefill
 *
 * Each test prints what it compared. The last line is "N passed, N failed, N skipped"; the exit code is non-zero
 * on any failure. GPU tests report themselves skipped, with the reason, where there is no CUDA device.
 * Fixtures (tiny Qwen3 checkpoints and transformers' logits) are read from $RADIXMLP_FIXTURES or ./fixtures. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "radixmlp.h"

/* ---------------------------------------------------------------------------------------------------- framework */
static int test_failed, test_skipped;

static void expect(int ok, const char *fmt, ...) {
    if (ok) return;
    va_list ap;
    va_start(ap, fmt);
    printf("    FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    test_failed = 1;
}

static void vnote(const char *fmt, va_list ap) {
    printf("    ");
    vprintf(fmt, ap);
    printf("\n");
}
static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vnote(fmt, ap);
    va_end(ap);
}

static void skip_test(const char *why) {
    printf("    skipped: %s\n", why);
    test_skipped = 1;
}

static uint64_t rng_next(uint64_t *s) {     /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rng_int(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

/* Bytes read one at a time, zeros past the end: a libFuzzer input, or random bytes of a seeded driver. */
typedef struct { const uint8_t *p, *end; } FuzzIn;
static int fuzz_byte(FuzzIn *in) { return in->p < in->end ? *in->p++ : 0; }
static FuzzIn random_bytes(uint8_t *buf, size_t n, uint64_t *rng) {     /* buf [n] filled: the seeded drivers' input */
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rng_next(rng);
    FuzzIn in = {buf, buf + n};
    return in;
}

static float *floats(size_t n) { return (float *)malloc(n * sizeof(float)); }

static float *rand_floats(size_t n, float lo, float hi, uint64_t *rng) {
    float *x = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; x && i < n; i++) x[i] = lo + (hi - lo) * (float)((rng_next(rng) >> 40) * 0x1.0p-24);
    return x;
}

/* max|a - b| and max|a| are the library's rx_max_abs_diff: NaN as soon as either side holds a NaN or Inf. */
static double max_abs_diff(const float *a, const float *b, size_t n) { return rx_max_abs_diff(a, b, n, NULL); }
static double max_abs(const float *a, size_t n) { return rx_max_abs_diff(a, NULL, n, NULL); }

static double mean_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d += fabs((double)a[i] - b[i]);
    return n ? d / n : 0;
}

/* The two verdicts every output comparison gives; each returns 1 (pass) or 0 with the reason in why[WHY]. A NaN or
 * Inf in either array fails both, with its own reason, even where got and ref hold the very same bits.
 *   close:     max|got - ref| <= tol_rel * max|ref|   (*d, *tol: what was compared, for the note)
 *   identical: the same bits everywhere                (radix vs baseline in the C reference, determinism)  */
#define WHY 256
static int nonfinite(const float *got, const float *ref, size_t n, char *why) {
    size_t bad;
    rx_max_abs_diff(got, ref, n, &bad);
    if (bad < n)
        snprintf(why, WHY, "element %zu is %g, the other side %g: a NaN or Inf never passes", bad, got[bad], ref[bad]);
    return bad < n;
}
static int close_verdict(const float *got, const float *ref, size_t n, double tol_rel, double *d, double *tol,
                         char *why) {
    *d = max_abs_diff(got, ref, n);
    *tol = tol_rel * max_abs(ref, n);
    if (nonfinite(got, ref, n, why)) return 0;
    snprintf(why, WHY, "max|diff| %.3g > tol %.3g", *d, *tol);
    return *d <= *tol;
}
static int identical_verdict(const float *a, const float *b, size_t n, char *why) {
    if (nonfinite(a, b, n, why)) return 0;
    snprintf(why, WHY, "not bit-identical: max|diff| %g", max_abs_diff(a, b, n));
    return memcmp(a, b, n * sizeof(float)) == 0;
}
static int expect_identical(const char *what, const float *a, const float *b, size_t n) {
    char why[WHY];
    int ok = identical_verdict(a, b, n, why);
    expect(ok, "%s: %s", what, why);
    return ok;
}

/* "what -> the rejection's message", or "what -> ACCEPTED" when rc says it was not rejected: never a stale message
 * that would read as a rejection. */
static void note_rejected(int rc, int width, const char *what) {
    note("%-*s -> %s", width, what, rc ? radix_error() : "ACCEPTED");
}

/* The C reference's paths (rx_cpu_path) this CPU can run, narrowest first: "definition" (Part I's definitions, one
 * thread) and "portable" everywhere, then "avx2" and "avx512" where it has them. Fills paths[] and names them in list
 * ("definition, portable, avx2"); returns how many. A path the CPU lacks is said in a note, so a summary never claims
 * it. */
enum { RX_PATHS = 4, RX_LIST = 48 };
static int cpu_paths(const char *paths[RX_PATHS], char list[RX_LIST]) {
    static const char *const all[RX_PATHS] = {"definition", "portable", "avx2", "avx512"};
    const char *path0 = rx_cpu_path(NULL);
    int n = 0;
    list[0] = 0;
    for (int p = 0; p < RX_PATHS; p++) {
        if (!rx_cpu_path(all[p])) {
            note("not run: %s", radix_error());
            continue;
        }
        snprintf(list + strlen(list), RX_LIST - strlen(list), "%s%s", n ? ", " : "", all[p]);
        paths[n++] = all[p];
    }
    rx_cpu_path(path0);
    return n;
}

/* A summary line, printed only while it is true: never under a FAIL line of the same test. */
static void summary(const char *fmt, ...) {
    if (test_failed) return;
    va_list ap;
    va_start(ap, fmt);
    vnote(fmt, ap);
    va_end(ap);
}

static const char *fixtures(void) {
    const char *f = getenv("RADIXMLP_FIXTURES");
    return f && *f ? f : "fixtures";
}

/* A batch from a compact literal: lens[s] tokens each, ids and positions given flat. */
static RxBatch batch_of(int n_seqs, const int *lens, const int32_t *ids, const int32_t *pos) {
    RxBatch b;
    const int32_t *seqs[64];
    int at = 0;
    for (int s = 0; s < n_seqs; s++) { seqs[s] = ids + at; at += lens[s]; }
    if (rx_batch_make(&b, seqs, lens, n_seqs)) { printf("rx_batch_make: %s\n", radix_error()); exit(2); }
    if (pos) memcpy(b.position_ids, pos, (size_t)at * sizeof(int32_t));
    return b;
}

/* ----------------------------------------------------------------------------------------------------- the trie */
/* The oracle, straight from the definition: tokens i and j share a compact row exactly when their whole
 * (token, position) histories, from the start of their sequences, are equal, and (Part II) so are the keys of what
 * precedes their sequences, root_key (NULL: nothing precedes any sequence). */
static void check_against_keyed_oracle(const RadixIndex *ix, const RxBatch *b, const int32_t *root_key,
                                       const char *what) {
    int n = b->n_tokens, bad = 0;
    int *start = (int *)malloc(sizeof(int) * (size_t)(n + 1)), *seq = (int *)malloc(sizeof(int) * (size_t)(n + 1));
    for (int s = 0; s < b->n_seqs; s++)
        for (int i = b->cu_seqlens[s]; i < b->cu_seqlens[s + 1]; i++) {
            start[i] = b->cu_seqlens[s];
            seq[i] = s;
        }
    expect(ix->n_tokens == n, "%s: n_tokens %d, expected %d", what, ix->n_tokens, n);
    int classes = 0;
    for (int i = 0; i < n && !bad; i++) {
        int first = 1;                                  /* is i the first token with its history? */
        for (int j = 0; j < n && !bad; j++) {
            int li = i - start[i], lj = j - start[j];
            int same = li == lj && (!root_key || root_key[seq[i]] == root_key[seq[j]]);
            for (int k = 0; same && k <= li; k++)
                same = b->input_ids[start[i] + k] == b->input_ids[start[j] + k] &&
                       b->position_ids[start[i] + k] == b->position_ids[start[j] + k];
            if (same != (ix->scatter[i] == ix->scatter[j])) {
                expect(0, "%s: tokens %d and %d: histories %s but compact rows %d and %d", what, i, j,
                       same ? "equal" : "differ", ix->scatter[i], ix->scatter[j]);
                bad = 1;
            }
            if (same && j < i) first = 0;
        }
        if (first && !bad) {          /* compact ids in first-occurrence order; gather points at the first one */
            expect(ix->scatter[i] == classes, "%s: token %d opens compact row %d, expected %d", what, i,
                   ix->scatter[i], classes);
            expect(ix->gather[ix->scatter[i]] == i, "%s: gather[%d] = %d, expected %d", what, ix->scatter[i],
                   ix->gather[ix->scatter[i]], i);
            bad = test_failed;
            classes++;
        }
    }
    if (!bad) expect(ix->n_compact == classes, "%s: N' = %d, the oracle finds %d distinct histories", what,
                     ix->n_compact, classes);
    free(start); free(seq);
}

static void check_against_oracle(const RadixIndex *ix, const RxBatch *b, const char *what) {
    check_against_keyed_oracle(ix, b, NULL, what);
}

/* The trie of b on the definition path (Algorithm 2 alone: the scan) and with its two refinements (the path in
 * effect, or the widest if that is the definition), each checked against the oracle; key as
 * radix_index_build_keyed's (NULL: radix_index_build). Returns N', or -1. */
static int build_on_both_paths(const RxBatch *b, const int32_t *key, const char *what) {
    const char *path0 = rx_cpu_path(NULL), *how[2] = {"the scan", "refined"};
    const char *paths[2] = {"definition", strcmp(path0, "definition") ? path0 : "auto"};
    int n_compact = -1;
    for (int p = 0; p < 2 && !test_failed; p++) {
        char w[128];
        snprintf(w, sizeof w, "%s (%s)", what, how[p]);
        rx_cpu_path(paths[p]);
        RadixIndex ix;
        int rc = key ? radix_index_build_keyed(&ix, b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs, key)
                     : radix_index_build(&ix, b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs);
        expect(rc == 0, "%s: %s", w, radix_error());
        if (rc == 0) check_against_keyed_oracle(&ix, b, key, w);
        n_compact = rc == 0 ? ix.n_compact : -1;
        radix_index_free(&ix);
    }
    rx_cpu_path(path0);
    return n_compact;
}

static void build_and_check(const RxBatch *b, const char *what, int expect_compact) {
    RadixIndex ix;
    int rc = radix_index_build(&ix, b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs);
    expect(rc == 0, "%s: radix_index_build failed: %s", what, radix_error());
    if (rc) return;
    check_against_oracle(&ix, b, what);
    if (expect_compact >= 0)
        expect(ix.n_compact == expect_compact, "%s: N' = %d, expected %d", what, ix.n_compact, expect_compact);
    note("%s: N = %d, N' = %d", what, ix.n_tokens, ix.n_compact);
    radix_index_free(&ix);
}

static void test_toy_example_matches_paper(void) {
    /* Appendix B.4: [1,2,3] and [1,2,4] -> gather [0,1,2,5], scatter [0,1,2,0,1,3]. */
    int lens[] = {3, 3};
    int32_t ids[] = {1, 2, 3, 1, 2, 4}, gather[] = {0, 1, 2, 5}, scatter[] = {0, 1, 2, 0, 1, 3};
    RxBatch b = batch_of(2, lens, ids, NULL);
    RadixIndex ix;
    expect(radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, 2) == 0, "build: %s", radix_error());
    expect(ix.n_compact == 4 && !memcmp(ix.gather, gather, sizeof gather), "gather differs from the paper's [0,1,2,5]");
    expect(ix.n_tokens == 6 && !memcmp(ix.scatter, scatter, sizeof scatter),
           "scatter differs from the paper's [0,1,2,0,1,3]");
    note("gather = [%d,%d,%d,%d], scatter = [%d,%d,%d,%d,%d,%d]", ix.gather[0], ix.gather[1], ix.gather[2],
         ix.gather[3], ix.scatter[0], ix.scatter[1], ix.scatter[2], ix.scatter[3], ix.scatter[4], ix.scatter[5]);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

static void test_random_batches_match_bruteforce_oracle(void) {
    uint64_t rng = 1234;
    int batches = 3000;
    long tokens = 0, compact = 0;
    int checked = 0;
    for (int t = 0; t < batches && !test_failed; t++, checked++) {
        /* Sharing varies from none to total: a tiny vocabulary makes accidental equal prefixes common, copied
         * prefixes make deliberate ones, shifted positions make equal tokens with different histories. */
        int n_seqs = rng_int(&rng, 9), vocab = 1 + rng_int(&rng, 4), lens[8], at = 0;
        int32_t ids[8 * 12], pos[8 * 12];
        for (int s = 0; s < n_seqs; s++) {
            lens[s] = rng_int(&rng, 12);
            int copy_from = s > 0 && rng_int(&rng, 2) ? rng_int(&rng, s) : -1, from = 0;
            for (int k = 0; k < s && copy_from >= 0; k++) from += k < copy_from ? lens[k] : 0;
            int shift = rng_int(&rng, 5) == 0 ? rng_int(&rng, 3) : 0;
            for (int i = 0; i < lens[s]; i++, at++) {
                int copy = copy_from >= 0 && i < lens[copy_from] && rng_int(&rng, 8) != 0;
                ids[at] = copy ? ids[from + i] : rng_int(&rng, vocab);
                pos[at] = copy ? pos[from + i] : i + shift;
            }
        }
        RxBatch b = batch_of(n_seqs, lens, ids, pos);
        char what[64];
        snprintf(what, sizeof what, "random batch %d", t);
        int nc = build_on_both_paths(&b, NULL, what);
        tokens += b.n_tokens;
        compact += nc;
        rx_batch_free(&b);
    }
    if (test_failed)
        note("stopped at the first batch that differs: %d of %d random batches checked (%ld tokens)", checked, batches,
             tokens);
    /* Wide branch points, where refinement 1's table holds many children: W sequences that share token 7 at
     * position 0, then take one of 40 tokens, then one of 3, so the same (token, position) hangs below many
     * parents, and each parent has many children. */
    enum { W = 300 };
    static int32_t wide[W][3];
    const int32_t *seqs[W];
    int wlens[W];
    for (int s = 0; s < W; s++) {
        wide[s][0] = 7;
        wide[s][1] = rng_int(&rng, 40);
        wide[s][2] = rng_int(&rng, 3);
        seqs[s] = wide[s];
        wlens[s] = 3;
    }
    RxBatch b;
    int wide_nc = -1;
    if (!test_failed && rx_batch_make(&b, seqs, wlens, W) == 0) {
        wide_nc = build_on_both_paths(&b, NULL, "wide batch");
        rx_batch_free(&b);
    }
    summary("%d random batches, %ld tokens -> %ld compact rows (overall gamma %.2f), all equal to the oracle, and so "
            "are %d sequences below wide branch points (N' = %d), built by Algorithm 2's scan and by its refinements",
            batches, tokens, compact, tokens ? (double)compact / tokens : 0, W, wide_nc);
}

static void test_empty_batch(void) {
    RadixIndex ix;
    int32_t cu[1] = {0};
    expect(radix_index_build(&ix, NULL, NULL, NULL, 0) == 0, "n_seqs = 0 failed: %s", radix_error());
    expect(ix.n_tokens == 0 && ix.n_compact == 0, "n_seqs = 0: N = %d, N' = %d", ix.n_tokens, ix.n_compact);
    radix_index_free(&ix);
    expect(radix_index_build(&ix, NULL, NULL, cu, 0) == 0 && ix.n_compact == 0, "empty cu_seqlens failed");
    radix_index_free(&ix);
}

static void test_zero_length_sequences(void) {
    int lens[] = {0, 3, 0, 3, 0};
    int32_t ids[] = {5, 6, 7, 5, 6, 8};
    RxBatch b = batch_of(5, lens, ids, NULL);
    build_and_check(&b, "[], [5,6,7], [], [5,6,8], []", 4);
    rx_batch_free(&b);
}

static void test_one_sequence_is_identity(void) {
    int lens[] = {7};
    int32_t ids[] = {3, 3, 3, 3, 3, 3, 3};           /* repeated tokens: each still has its own history */
    RxBatch b = batch_of(1, lens, ids, NULL);
    build_and_check(&b, "one sequence of a repeated token", 7);
    int lens1[] = {1};
    RxBatch one = batch_of(1, lens1, ids, NULL);
    build_and_check(&one, "one token", 1);
    rx_batch_free(&b); rx_batch_free(&one);
}

static void test_identical_sequences_share_everything(void) {
    int lens[] = {5, 5, 5, 5};
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = 10 + i % 5;
    RxBatch b = batch_of(4, lens, ids, NULL);
    build_and_check(&b, "4 identical sequences of 5", 5);
    rx_batch_free(&b);
}

static void test_prefix_of_another_sequence(void) {
    int lens[] = {3, 6, 2};
    int32_t ids[] = {1, 2, 3, 1, 2, 3, 4, 5, 6, 1, 2};
    RxBatch b = batch_of(3, lens, ids, NULL);
    build_and_check(&b, "[1,2,3], [1,2,3,4,5,6], [1,2]", 6);
    rx_batch_free(&b);
}

static void test_same_token_after_different_prefix_not_merged(void) {
    /* token 9 at position 2 after [1,2] and after [1,3]: different histories, different rows */
    int lens[] = {3, 3};
    int32_t ids[] = {1, 2, 9, 1, 3, 9};
    RxBatch b = batch_of(2, lens, ids, NULL);
    build_and_check(&b, "[1,2,9], [1,3,9]", 5);
    rx_batch_free(&b);
}

static void test_same_token_at_different_position_not_merged(void) {
    int lens[] = {2, 2};
    int32_t ids[] = {4, 5, 4, 5}, pos[] = {0, 1, 1, 2};
    RxBatch b = batch_of(2, lens, ids, pos);
    build_and_check(&b, "[4,5]@0..1, [4,5]@1..2", 4);
    rx_batch_free(&b);
}

static void test_position_ids_not_starting_at_zero(void) {
    int lens[] = {3, 3, 2};
    int32_t ids[] = {7, 8, 9, 7, 8, 1, 7, 8}, pos[] = {5, 6, 7, 5, 6, 7, 5, 6};
    RxBatch b = batch_of(3, lens, ids, pos);
    build_and_check(&b, "three sequences at positions 5.., sharing [7,8]", 4);
    rx_batch_free(&b);
}

static void test_nothing_shared(void) {
    int lens[] = {4, 4, 4};
    int32_t ids[] = {1, 2, 3, 4, 2, 2, 3, 4, 3, 2, 3, 4};   /* equal tails, different first tokens */
    RxBatch b = batch_of(3, lens, ids, NULL);
    build_and_check(&b, "3 sequences with different first tokens", 12);
    rx_batch_free(&b);
}

static void test_invalid_input_rejected(void) {
    int32_t ids[4] = {1, 2, 3, 4}, pos[4] = {0, 1, 0, 1}, cu[3] = {0, 2, 4}, bad_start[3] = {1, 2, 4},
            decreasing[3] = {0, 3, 2};
    struct { const char *what; const int32_t *ids, *pos, *cu; int n_seqs; const char *msg; } cases[] = {
        {"n_seqs = -1", ids, pos, cu, -1, "n_seqs is -1"},
        {"cu_seqlens NULL", ids, pos, NULL, 2, "cu_seqlens is NULL"},
        {"cu_seqlens[0] = 1", ids, pos, bad_start, 2, "cu_seqlens[0] is 1"},
        {"cu_seqlens decreasing", ids, pos, decreasing, 2, "decreases at sequence 1"},
        {"input_ids NULL", NULL, pos, cu, 2, "input_ids is NULL"},
        {"position_ids NULL", ids, NULL, cu, 2, "position_ids is NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RadixIndex ix;
        int rc = radix_index_build(&ix, cases[i].ids, cases[i].pos, cases[i].cu, cases[i].n_seqs);
        expect(rc != 0 && strstr(radix_error(), cases[i].msg),
               "%s: rc %d, message '%s'", cases[i].what, rc, radix_error());
        expect(!ix.gather && !ix.scatter && !ix.n_tokens,
               "%s: a failed build must leave the index empty", cases[i].what);
        note_rejected(rc, 22, cases[i].what);
    }
}

static void test_draw_trie_of_toy_example(void) {
    int lens[] = {3, 3};
    int32_t ids[] = {1, 2, 3, 1, 2, 4};
    RxBatch b = batch_of(2, lens, ids, NULL);
    RadixIndex ix;
    radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, 2);
    char buf[1024] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    radix_draw_trie(f, &ix, b.input_ids, b.position_ids, b.cu_seqlens, 2);
    fclose(f);
    /* the paper's table: (1,2) shared by both sequences, then 3 (sequence 0) and 4 (sequence 1) at position 2 */
    expect(strstr(buf, "root\n`-- c0..c1: 2 tokens @0..1  (2 seqs)\n") != NULL, "shared chain missing:\n%s", buf);
    expect(strstr(buf, "    |-- c2: token 3 @2  (1 seq)\n    `-- c3: token 4 @2  (1 seq)\n") != NULL,
           "branches missing:\n%s", buf);
    printf("%s", buf);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

/* --------------------------------------------------------------------------------------------------- the loader */
/* A safetensors file from a header and data_len bytes of (non-zero) data. */
static uint8_t *st_file(const char *header, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    uint8_t *b = (uint8_t *)malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (uint8_t)(i * 37 + 1);
    return b;
}

static void expect_st_reject(const char *what, const uint8_t *bytes, size_t len, const char *msg) {
    RxTensor *t;
    int n;
    int rc = rx_parse_safetensors(bytes, len, "x.safetensors", &t, &n);
    expect(rc != 0, "%s: accepted", what);
    expect(rc == 0 || strstr(radix_error(), msg) != NULL, "%s: message '%s' lacks '%s'", what, radix_error(), msg);
    if (rc == 0) { for (int i = 0; i < n; i++) free(t[i].name); free(t); }
    else note("%-34s -> %s", what, radix_error());
}

/* "[[[...]]]", 1000 levels deep: far beyond the JSON reader's limit. */
static const char *deep_json(void) {
    static char deep[2001];
    memset(deep, '[', 1000);
    memset(deep + 1000, ']', 1000);
    return deep;
}

static void test_safetensors_rejections(void) {
    struct { const char *what, *header; size_t data; const char *msg; } cases[] = {
        {"invalid JSON", "{\"a\":", 0, "invalid JSON"},
        {"header not an object", "[]", 0, "not a JSON object"},
        {"entry without data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "needs \"dtype\""},
        {"unknown dtype", "{\"a\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
        {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative"},
        {"duplicate names", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "key \"a\" appears twice at the top level"},
        {"a tensor's dtype given twice", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],"
                                         "\"data_offsets\":[0,4]}}", 4, "key \"dtype\" appears twice in \"a\""},
        {"header length 0", "", 0, "header length is 0, but a safetensors file starts with an 8-byte"},
        {"gap between tensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "a gap"},
        {"overlapping tensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "an overlap"},
        {"end before begin", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, "before begin"},
        {"shape byte size overflows", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                                      "\"data_offsets\":[0,4]}}", 4, "overflows"},
        {"size disagrees with shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "need 8"},
        {"truncated file", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12, "truncated"},
        {"trailing bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9, "trailing bytes"},
        {"metadata not strings", "{\"__metadata__\":{\"k\":1}}", 0, "__metadata__"},
        {"a name holding \\u0000", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensor name 'a\\u0000...' holds a NUL character"},
        {"a dtype holding \\u0000", "{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "unknown dtype \"F32\\u0000...\""},
        {"nested 1000 deep", deep_json(), 0, "deeper than"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *b = st_file(cases[i].header, cases[i].data, &len);
        expect_st_reject(cases[i].what, b, len, cases[i].msg);
        free(b);
    }
    /* the byte-level ones: the 8-byte length itself, and UTF-8 */
    size_t len;
    uint8_t *b = st_file("{\"\xff\":{}}", 0, &len);
    expect_st_reject("header not UTF-8", b, len, "UTF-8");
    free(b);
    b = st_file("{}", 0, &len);
    expect_st_reject("file shorter than 8 bytes", b, 5, "shorter than");
    b[0] = 0x01; b[1] = 0xE2; b[2] = 0xF5; b[3] = 0x05;          /* 100,000,001 */
    expect_st_reject("header length over 100,000,000", b, len, "exceeds");
    b[0] = 3; b[1] = b[2] = b[3] = 0;
    expect_st_reject("header length beyond the file", b, 10, "beyond the end");
    free(b);
}

static void test_safetensors_edge_cases_accepted(void) {
    /* zero-sized tensors and rank-0 scalars are legal, and so are whitespace padding and __metadata__ */
    size_t len;
    uint8_t *b = st_file("  {\"__metadata__\":{\"format\":\"pt\"},\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,3],"
                         "\"data_offsets\":[0,0]},\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                         "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[4,12]}}      ", 12, &len);
    RxTensor *t;
    int n;
    int rc = rx_parse_safetensors(b, len, "edge.safetensors", &t, &n);
    expect(rc == 0, "rejected: %s", radix_error());
    if (!rc) {
        expect(n == 3 && !strcmp(t[0].name, "empty") && t[0].nbytes == 0 && t[0].rank == 2, "zero-sized tensor wrong");
        expect(!strcmp(t[2].name, "scalar") && t[2].rank == 0 && t[2].nbytes == 4 && t[2].data == b + len - 12,
               "scalar wrong");
        expect(!strcmp(t[1].name, "i") && t[1].dtype == RX_OTHER_DTYPE && t[1].data == b + len - 8, "I64 tensor wrong");
        summary("zero-sized, rank-0 and I64 tensors parsed; data pointers inside the buffer");
        for (int i = 0; i < n; i++) free(t[i].name);
        free(t);
    }
    free(b);
}

static void test_half_formats_decode_exactly(void) {
    /* IEEE 754 binary16 and bfloat16 bit patterns whose values the standards fix: normal, negative, the largest
     * finite half, the smallest half subnormal (2^-24), infinity, and 1/3 rounded to each format. */
    uint16_t f16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x3555, 0x8000};
    float f16_want[] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, INFINITY, 0.333251953125f, -0.0f};
    uint16_t bf16[] = {0x3F80, 0xC000, 0x7F7F, 0x0001, 0x7F80, 0x3EAB, 0x8000};
    float bf16_want[] = {1.0f, -2.0f, 0x1.FEp127f, 0x1p-133f, INFINITY, 0.333984375f, -0.0f};
    RxTensor t;
    float got[7];
    memset(&t, 0, sizeof t);
    t.rank = 1; t.shape[0] = 7;
    for (int f = 0; f < 2; f++) {
        t.dtype = f ? RX_BF16 : RX_F16;
        t.data = f ? bf16 : f16;
        rx_tensor_to_f32(&t, got);
        const float *want = f ? bf16_want : f16_want;
        for (int i = 0; i < 7; i++)
            expect(memcmp(&got[i], &want[i], 4) == 0, "%s 0x%04X -> %g, expected %g", f ? "BF16" : "F16",
                   f ? bf16[i] : f16[i], got[i], want[i]);
    }
    summary("F16 and BF16: 7 bit patterns each (normal, negative, max, subnormal, inf, 1/3, -0) decode exactly");
}

static void test_config_parsing(void) {
    Qwen3Config c;
    const char *good = "{\"vocab_size\":151936,\"hidden_size\":1024,\"intermediate_size\":3072,"
                       "\"num_hidden_layers\":28,"
                       "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"head_dim\":128,\"rms_norm_eps\":1e-06,"
                       "\"max_position_embeddings\":40960,\"tie_word_embeddings\":true,\"rope_scaling\":null,"
                       "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1000000.0},"
                       "\"model_type\":\"qwen3\",\"architectures\":[\"Qwen3ForCausalLM\"]}";
    expect(rx_parse_config(&c, good, strlen(good), "config.json") == 0,
           "Qwen3-0.6B config rejected: %s", radix_error());
    expect(c.head_dim == 128 && c.n_kv_heads == 8 && c.rope_theta == 1e6 && c.tie_word_embeddings &&
           c.max_position_embeddings == 40960,
           "Qwen3-0.6B config misread (head_dim %d, theta %g)", c.head_dim, c.rope_theta);
    struct { const char *what, *from, *to, *msg; } cases[] = {
        {"missing hidden_size", "\"hidden_size\":1024", "\"hidden\":1024", "missing \"hidden_size\""},
        {"zero layers", "\"num_hidden_layers\":28", "\"num_hidden_layers\":0", "num_hidden_layers"},
        {"negative vocab", "\"vocab_size\":151936", "\"vocab_size\":-5", "vocab_size"},
        {"absurd hidden size", "\"hidden_size\":1024", "\"hidden_size\":1000000000", "hidden_size"},
        {"fractional heads", "\"num_attention_heads\":16", "\"num_attention_heads\":16.5", "num_attention_heads"},
        {"overflowing integer", "\"vocab_size\":151936", "\"vocab_size\":99999999999999999999999", "vocab_size"},
        {"heads not a multiple of kv", "\"num_key_value_heads\":8", "\"num_key_value_heads\":3", "not a multiple"},
        {"odd head_dim", "\"head_dim\":128", "\"head_dim\":127", "even"},
        {"rope scaling", "\"rope_scaling\":null", "\"rope_scaling\":{\"type\":\"yarn\"}", "default RoPE"},
        {"sliding window", "\"rope_scaling\":null", "\"use_sliding_window\":true,\"max_window_layers\":27",
         "\"max_window_layers\" 27 < \"num_hidden_layers\" 28"},
        {"sliding layer_types", "\"rope_scaling\":null", "\"layer_types\":[\"full_attention\",\"sliding_attention\"]",
         "\"layer_types\" must be an array of num_hidden_layers (28) strings"},
        {"hidden_act gelu", "\"rope_scaling\":null", "\"hidden_act\":\"gelu\"",
         "\"hidden_act\" is \"gelu\"; only \"silu\""},
        {"hidden_act not a string", "\"rope_scaling\":null", "\"hidden_act\":1", "\"hidden_act\" is not a string"},
        {"hidden_act silu\\u0000x", "\"rope_scaling\":null", "\"hidden_act\":\"silu\\u0000x\"",
         "\"hidden_act\" is \"silu\\u0000...\"; only \"silu\""},
        {"attention_bias true", "\"rope_scaling\":null", "\"attention_bias\":true", "\"attention_bias\" is true"},
        {"theta zero", "\"rope_theta\":1000000.0", "\"rope_theta\":0", "rope_theta"},
        {"tie not a bool", "\"tie_word_embeddings\":true", "\"tie_word_embeddings\":\"yes\"", "true or false"},
        {"vocab_size twice, same value", "\"vocab_size\":151936", "\"vocab_size\":151936,\"vocab_size\":151936",
         "key \"vocab_size\" appears twice at the top level"},
        {"rope_theta twice in rope_parameters", "\"rope_theta\":1000000.0", "\"rope_theta\":1000000.0,\"rope_theta\":1",
         "key \"rope_theta\" appears twice in \"rope_parameters\""},
        {"no model_type", "\"model_type\":\"qwen3\",", "", "no \"model_type\"; add \"model_type\": \"qwen3\""},
        {"model_type llama", "\"model_type\":\"qwen3\"", "\"model_type\":\"llama\"", "\"model_type\" is \"llama\""},
        {"architectures Llama", "\"Qwen3ForCausalLM\"", "\"LlamaForCausalLM\"",
         "\"architectures\" names \"LlamaForCausalLM\"; this code computes \"Qwen3ForCausalLM\" and \"Qwen3Model\""},
        {"architectures a string", "[\"Qwen3ForCausalLM\"]", "\"Qwen3ForCausalLM\"",
         "\"architectures\" must be an array"},
        {"eos_token_id a string", "\"rope_scaling\":null", "\"eos_token_id\":\"</s>\"",
         "\"eos_token_id\" must be a token id or a list of at most 8"},
        {"eos_token_id 1.5", "\"rope_scaling\":null", "\"eos_token_id\":[151645,1.5]", "\"eos_token_id\" must be"},
        {"nine eos ids", "\"rope_scaling\":null", "\"eos_token_id\":[1,2,3,4,5,6,7,8,9]", "a list of at most 8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[1024];
        const char *at = strstr(good, cases[i].from);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - good), good, cases[i].to, at + strlen(cases[i].from));
        int rc = rx_parse_config(&c, buf, strlen(buf), "config.json");
        expect(rc != 0 && strstr(radix_error(), cases[i].msg),
               "%s: rc %d, message '%s'", cases[i].what, rc, radix_error());
        note_rejected(rc, 28, cases[i].what);
    }
    /* Qwen3Config's defaults for missing keys: head_dim 128 (not hidden/heads), num_key_value_heads 32 (heads when
     * the key is present as null), use_sliding_window false, max_window_layers 28, silu, no bias, untied */
    const char *top = "{\"model_type\":\"qwen3\","
                      "\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":64,\"rope_theta\":500000}";
    int rc = rx_parse_config(&c, top, strlen(top), "config.json");
    expect(rc == 0 && c.rope_theta == 5e5 && c.head_dim == 128 && c.n_kv_heads == 32 && !c.tie_word_embeddings,
           "top-level rope_theta and Qwen3Config's defaults: rc %d '%s', head_dim %d (want 128), kv %d (want 32)", rc,
           radix_error(), c.head_dim, c.n_kv_heads);
    /* eos_token_id: absent or null, none; an int, one; a list, each (Qwen3's instruct models list two). A negative
     * id is read too: only generation, which stops at it, refuses it (rx_eos_check), never loading. */
    const char *eos[] = {"", ",\"eos_token_id\":null", ",\"eos_token_id\":151645", ",\"eos_token_id\":[151645,151643]",
                         ",\"eos_token_id\":[151645,-1]"};
    for (int e = 0; e < 5; e++) {
        char buf[512];
        snprintf(buf, sizeof buf, "{\"model_type\":\"qwen3\",\"vocab_size\":8,\"hidden_size\":8,"
                 "\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":64%s}", eos[e]);
        rc = rx_parse_config(&c, buf, strlen(buf), "config.json");
        int want = e < 2 ? 0 : e == 2 ? 1 : 2;
        expect(rc == 0 && c.n_eos == want && (want < 1 || c.eos_token_id[0] == 151645) &&
               (want < 2 || c.eos_token_id[1] == (e == 4 ? -1 : 151643)), "'%s': rc %d, %d eos ids (want %d)", eos[e],
               rc, c.n_eos, want);
    }
    expect(rx_eos_check(c.eos_token_id, c.n_eos, 151936, "config.json") &&
           strstr(radix_error(), "config.json: eos_token_id -1 is outside the vocabulary [0, 151936)") &&
           !rx_eos_check(c.eos_token_id, 1, 151936, "config.json") &&
           rx_eos_check(c.eos_token_id, 1, 151645, "config.json"),
           "rx_eos_check: -1 and 151645 (vocab 151645) refused, 151645 (vocab 151936) accepted: '%s'", radix_error());
    const char *kv_null = "{\"model_type\":\"qwen3\","
                          "\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                          "\"num_attention_heads\":4,\"num_key_value_heads\":null}";
    rc = rx_parse_config(&c, kv_null, strlen(kv_null), "config.json");
    expect(rc == 0 && c.n_kv_heads == 4, "num_key_value_heads null: rc %d, kv %d (want num_attention_heads 4)", rc,
           c.n_kv_heads);
    /* use_sliding_window with max_window_layers >= num_hidden_layers, or with sliding_window null: no layer slides */
    const char *full[] = {"\"use_sliding_window\":true,\"max_window_layers\":28",
                          "\"use_sliding_window\":true,\"max_window_layers\":0,\"sliding_window\":null",
                          "\"use_sliding_window\":false,\"max_window_layers\":0"};
    for (int i = 0; i < 3; i++) {
        char buf[1024];
        const char *at = strstr(good, "\"rope_scaling\":null");
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - good), good, full[i], at + strlen("\"rope_scaling\":null"));
        expect(rx_parse_config(&c, buf, strlen(buf), "config.json") == 0, "%s: rejected: %s", full[i], radix_error());
    }
    summary("missing head_dim -> 128, num_key_value_heads -> 32 (null -> heads); sliding configs where no layer "
            "slides accepted");
}

/* A JSON key holding \u0000 is another key, as in Python's json: "head_dim\u0000" is no known key and no duplicate
 * of "head_dim", and generation_config.json's "temperature\u0000x" is no temperature (transformers reads none). */
static void test_json_key_holding_nul_is_another_key(void) {
    const char *nul_keys = "{\"model_type\":\"qwen3\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,"
                           "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                           "\"head_dim\\u0000\":6,\"head_dim\":4,\"head_dim\\u0000x\":5}";
    Qwen3Config c;
    int rc = rx_parse_config(&c, nul_keys, strlen(nul_keys), "config.json");
    expect(rc == 0 && c.head_dim == 4, "\"head_dim\" 4 beside \"head_dim\\u0000\" 6 and \"head_dim\\u0000x\" 5: rc %d "
           "'%s', head_dim %d", rc, rc ? radix_error() : "", c.head_dim);
    RxGenerationConfig g;
    const char *nul_temp = "{\"temperature\\u0000x\": 5, \"do_sample\": true}";
    rc = rx_parse_generation_config(&g, nul_temp, strlen(nul_temp), "generation_config.json");
    expect(rc == 0 && g.temperature == -1 && g.do_sample == 1, "%s: rc %d, temperature %g (want -1: absent)", nul_temp,
           rc, g.temperature);
    summary("\"head_dim\\u0000\" and \"temperature\\u0000x\" read as unknown keys, as Python's json reads them");
}

/* A JSON file in another encoding than UTF-8 is named, never "invalid JSON near byte 0": a byte-order mark, the NUL
 * bytes of UTF-16 or UTF-32 without one, a stray NUL, a byte that breaks UTF-8. Lengths are given: the texts hold
 * NULs. Python's json.loads refuses a UTF-8 BOM too, so it is refused, named. */
static void test_json_encodings_named(void) {
    static const struct { const char *what, *text; size_t len; const char *msg; } cases[] = {
        {"UTF-16 LE, BOM", "\xFF\xFE{\0}\0", 6, "is UTF-16 little-endian, not UTF-8 (it starts with the byte-order "
                                             "mark FF FE); save it as UTF-8"},
        {"UTF-16 BE, BOM", "\xFE\xFF\0{\0}", 6, "is UTF-16 big-endian, not UTF-8 (it starts with the byte-order mark "
                                             "FE FF)"},
        {"UTF-32 LE, BOM", "\xFF\xFE\0\0{\0\0\0", 8, "is UTF-32 little-endian, not UTF-8 (it starts with the "
                                                    "byte-order mark FF FE 00 00)"},
        {"UTF-32 BE, BOM", "\0\0\xFE\xFF\0\0\0{", 8, "is UTF-32 big-endian"},
        {"UTF-8, BOM", "\xEF\xBB\xBF{}", 5, "starts with a UTF-8 byte-order mark (EF BB BF): save it as UTF-8 without "
                                          "one"},
        {"UTF-16 LE, no BOM", "{\0\"\0a\0", 6, "looks like UTF-16 little-endian without a byte-order mark"},
        {"UTF-16 BE, no BOM", "\0{\0\"\0a", 6, "looks like UTF-16 big-endian without a byte-order mark"},
        {"UTF-32 LE, no BOM", "{\0\0\0}\0\0\0", 8, "looks like UTF-32 little-endian"},
        {"UTF-32 BE, no BOM", "\0\0\0{\0\0\0}", 8, "looks like UTF-32 big-endian"},
        {"NUL after the JSON", "{\"a\": 1}\0", 9, "its JSON holds a NUL byte (byte 8 of it)"},
        {"Latin-1 byte in a string", "{\"model_type\": \"q\xE9\"}", 20, "its JSON is not valid UTF-8 (byte 17 of it)"},
    };
    Qwen3Config c;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = rx_parse_config(&c, cases[i].text, cases[i].len, "config.json");
        expect(rc != 0 && strstr(radix_error(), cases[i].msg) && !strstr(radix_error(), "invalid JSON"),
               "%s: rc %d, message '%s', want '%s'", cases[i].what, rc, radix_error(), cases[i].msg);
        note_rejected(rc, 26, cases[i].what);
    }
    /* the shard index goes through the same reader */
    char **shards;
    int n;
    int rc = rx_parse_shard_index("\xFF\xFE{\0}\0", 6, "model.safetensors.index.json", &shards, &n);
    expect(rc != 0 && strstr(radix_error(), "model.safetensors.index.json: is UTF-16 little-endian"),
           "UTF-16 index: rc %d, '%s'", rc, radix_error());
    summary("%zu encodings other than UTF-8 each named in the message, in config.json and the shard index",
            sizeof cases / sizeof cases[0]);
}

static void test_shard_index_names(void) {
    const char *bad[] = {"../x.safetensors", "/abs.safetensors", "sub/x.safetensors", "..", "", "a\\\\b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[256];
        char **shards;
        int n;
        snprintf(buf, sizeof buf, "{\"metadata\":{\"total_size\":4},\"weight_map\":{\"w\":\"%s\"}}", bad[i]);
        int rc = rx_parse_shard_index(buf, strlen(buf), "index.json", &shards, &n);
        expect(rc != 0 && strstr(radix_error(), "not a plain file name"),
               "shard \"%s\": rc %d, '%s'", bad[i], rc, radix_error());
        char what[64];
        snprintf(what, sizeof what, "shard name %s", bad[i]);
        note_rejected(rc, 31, what);
    }
    const char *good = "{\"weight_map\":{\"a\":\"m-1.safetensors\",\"b\":\"m-2.safetensors\","
                       "\"c\":\"m-1.safetensors\"}}";
    char **shards;
    int n;
    expect(rx_parse_shard_index(good, strlen(good), "index.json", &shards, &n) == 0 && n == 2,
           "good index: %s", radix_error());
    for (int i = 0; i < n; i++) free(shards[i]);
    free(shards);
    const char *none = "{\"metadata\":{}}";
    expect(rx_parse_shard_index(none, strlen(none), "index.json", &shards, &n) != 0,
           "index without weight_map accepted");
}

/* ---- model folders: fixtures and corrupted copies of them */
static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = (uint8_t *)malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) { free(b); b = NULL; }
    fclose(f);
    if (b) b[*len] = 0;
    return b;
}

static void write_file(const char *dir, const char *name, const void *data, size_t len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, len, f) != len) { printf("cannot write %s\n", p); exit(2); }
    fclose(f);
}

/* A fresh temporary copy of fixtures/<name>. */
static char *copy_fixture(const char *name) {
    static char dir[256];
    char src[512];
    snprintf(dir, sizeof dir, "/tmp/radixmlp-test-XXXXXX");
    if (!mkdtemp(dir)) { printf("mkdtemp failed\n"); exit(2); }
    snprintf(src, sizeof src, "%s/%s", fixtures(), name);
    DIR *d = opendir(src);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[768];
        size_t len;
        snprintf(p, sizeof p, "%s/%s", src, e->d_name);
        uint8_t *b = read_file(p, &len);
        if (b) write_file(dir, e->d_name, b, len);
        free(b);
    }
    if (d) closedir(d);
    return dir;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[768];
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p)) rmdir(p);                    /* a directory put in place of a file */
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* Replaces the first `from` with `to` in dir/name; for a .safetensors file, inside its JSON header (rewriting the
 * header length, so that the data after it stays valid). */
static void edit_file(const char *dir, const char *name, const char *from, const char *to) {
    char p[512];
    size_t len;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    uint8_t *b = read_file(p, &len);
    int st = strstr(name, ".safetensors") && !strstr(name, ".json");
    size_t hlen = len, off = 0;
    if (st) { hlen = 0; for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i]; off = 8; }
    char *h = (char *)malloc(hlen + 1);
    memcpy(h, b + off, hlen); h[hlen] = 0;
    char *at = strstr(h, from);
    if (!at) { printf("edit_file: '%s' not in %s\n", from, p); exit(2); }
    size_t nh = hlen - strlen(from) + strlen(to);
    uint8_t *out = (uint8_t *)malloc(off + nh + (len - off - hlen));
    for (int i = 0; st && i < 8; i++) out[i] = (uint8_t)((uint64_t)nh >> (8 * i));
    size_t pre = (size_t)(at - h);
    memcpy(out + off, h, pre);
    memcpy(out + off + pre, to, strlen(to));
    memcpy(out + off + pre + strlen(to), at + strlen(from), hlen - pre - strlen(from));
    memcpy(out + off + nh, b + off + hlen, len - off - hlen);
    write_file(dir, name, out, off + nh + (len - off - hlen));
    free(b); free(h); free(out);
}

/* Appends to dir/model.safetensors a tensor `name` ("dtype" and "shape" as dtype_shape) that holds a copy of bytes
 * [begin, end) of the file's data: a second tensor equal to an existing one, without overlapping it. */
static void append_tensor_copy(const char *dir, const char *name, const char *dtype_shape, size_t begin, size_t end) {
    char p[512];
    size_t len, hlen = 0;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    uint8_t *b = read_file(p, &len);
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    size_t data = len - 8 - hlen, close = 8 + hlen;
    while (b[close - 1] != '}') close--;                   /* the header's last '}', before any space padding */
    char entry[256];
    int elen = snprintf(entry, sizeof entry, ",\"%s\":{%s,\"data_offsets\":[%zu,%zu]}}", name, dtype_shape, data,
                        data + end - begin);
    size_t nh = close - 1 - 8 + (size_t)elen, out_len = 8 + nh + data + (end - begin);
    uint8_t *out = (uint8_t *)malloc(out_len);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)nh >> (8 * i));
    memcpy(out + 8, b + 8, close - 1 - 8);
    memcpy(out + 8 + (close - 1 - 8), entry, (size_t)elen);
    memcpy(out + 8 + nh, b + 8 + hlen, data);
    memcpy(out + 8 + nh + data, b + 8 + hlen + begin, end - begin);
    write_file(dir, "model.safetensors", out, out_len);
    free(b); free(out);
}

/* A temporary copy of fixtures/tiny-embedding with tie_word_embeddings false: an untied Qwen3Model checkpoint (flat
 * names, no lm_head.weight), which has embeddings and no logits. */
static char *untied_embedding_copy(void) {
    char *d = copy_fixture("tiny-embedding");
    edit_file(d, "config.json", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
    return d;
}

static int have_fixtures(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/tiny-tied/config.json", fixtures());
    if (access(p, R_OK) == 0) return 1;
    expect(0, "fixtures not found at %s (set RADIXMLP_FIXTURES or run from the repository root)", fixtures());
    return 0;
}

/* A safetensors file whose data starts off a 4-byte boundary (a header of a length that is not a multiple of 4: legal,
 * whatever writers do) loads and computes the same logits, bit for bit, as the aligned file: every read of its fp32
 * weights goes through memcpy (rx_tensor_at, rx_pack_weight), never a misaligned float load, which UBSan aborts on
 * (make test-asan) and some CPUs trap on. The file is tiny-tied's with two spaces more of header padding. */
static void test_misaligned_tensor_data_loads_as_aligned(void) {
    if (!have_fixtures()) return;
    char *d = copy_fixture("tiny-tied"), path[600];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    uint8_t *b = read_file(path, &len);
    if (!b || len < 8) { expect(0, "cannot read %s", path); free(b); remove_dir(d); return; }
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | b[i];
    uint8_t *m2 = (uint8_t *)malloc(len + 2);
    for (int i = 0; i < 8; i++) m2[i] = (uint8_t)((h + 2) >> (8 * i));
    memcpy(m2 + 8, b + 8, h);
    m2[8 + h] = m2[9 + h] = ' ';                                   /* the header may end in spaces */
    memcpy(m2 + 10 + h, b + 8 + h, len - 8 - h);
    write_file(d, "model.safetensors", m2, len + 2);
    free(b);
    free(m2);
    Qwen3Model ref, mis;
    RxBatch batch;
    char ref_dir[512], tokens[512];
    snprintf(ref_dir, sizeof ref_dir, "%s/tiny-tied", fixtures());
    snprintf(tokens, sizeof tokens, "%s/batches/mixed.txt", fixtures());
    if (qwen3_load(&ref, ref_dir)) { expect(0, "load %s: %s", ref_dir, radix_error()); remove_dir(d); return; }
    int rc = qwen3_load(&mis, d);
    expect(rc == 0, "the file with its data at offset %llu (mod 4: %llu) is refused: %s", (unsigned long long)(h + 10),
           (unsigned long long)((h + 10) % 4), radix_error());
    if (!rc && !rx_batch_read(&batch, tokens)) {
        int off = (int)((uintptr_t)mis.embed->data % 4);
        size_t n = (size_t)batch.n_tokens * ref.cfg.vocab_size;
        float *want = (float *)malloc(n * sizeof(float)), *got = (float *)malloc(n * sizeof(float));
        int ok = !qwen3_forward_ref(&ref, &batch, RX_COMPACT, want) &&
                 !qwen3_forward_ref(&mis, &batch, RX_COMPACT, got);
        expect(ok && off != 0 && mis.embed->dtype == RX_F32 && !memcmp(want, got, n * sizeof(float)),
               "data %d bytes off a 4-byte boundary: forward %s, logits %s the aligned file's", off, ok ? "ran" :
               radix_error(), ok && !memcmp(want, got, n * sizeof(float)) ? "equal" : "differ from");
        summary("fp32 tensors %d bytes off a 4-byte boundary: the logits [%d, %d] equal the aligned file's, bit for "
                "bit", off, batch.n_tokens, ref.cfg.vocab_size);
        free(want);
        free(got);
        rx_batch_free(&batch);
    }
    if (!rc) qwen3_free(&mis);
    qwen3_free(&ref);
    remove_dir(d);
}

static void test_fixture_checkpoints_load(void) {
    if (!have_fixtures()) return;
    const char *names[] = {"tiny-tied", "tiny-untied", "tiny-bf16"};
    RxDtype dtypes[] = {RX_F32, RX_F32, RX_BF16};
    for (int i = 0; i < 3; i++) {
        char dir[512];
        Qwen3Model m;
        snprintf(dir, sizeof dir, "%s/%s", fixtures(), names[i]);
        if (qwen3_load(&m, dir)) { expect(0, "%s: %s", names[i], radix_error()); continue; }
        expect(m.cfg.head_dim == 32 && m.cfg.hidden_size == 64 && m.cfg.n_kv_heads == 2 && m.cfg.rope_theta == 1e6,
               "%s: config misread", names[i]);
        expect(m.embed->dtype == dtypes[i], "%s: dtype %s", names[i], m.embed->dtype_name);
        expect((m.lm_head == m.embed) == m.cfg.tie_word_embeddings, "%s: lm_head tied %d, config says %d", names[i],
               m.lm_head == m.embed, m.cfg.tie_word_embeddings);
        note("%-12s %d tensors, %s, tied %d, rope_theta %g (from rope_parameters)", names[i], m.n_tensors,
             m.embed->dtype_name, m.cfg.tie_word_embeddings, m.cfg.rope_theta);
        qwen3_free(&m);
    }
}

static void expect_load_fails(const char *dir, const char *what, const char *msg) {
    Qwen3Model m;
    int rc = qwen3_load(&m, dir);
    expect(rc != 0, "%s: loaded", what);
    expect(rc == 0 || strstr(radix_error(), msg), "%s: message '%s' lacks '%s'", what, radix_error(), msg);
    if (rc == 0) qwen3_free(&m);
    else note("%-34s -> %s", what, radix_error());
    remove_dir(dir);
}

static void test_checkpoint_variants_accepted(void) {
    if (!have_fixtures()) return;
    Qwen3Model m;
    /* Qwen3-Embedding style: flat names without "model." */
    char *d = copy_fixture("tiny-tied");
    for (int more = 1; more;) {                 /* strip every "model." from the header */
        char p[512];
        size_t len;
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        uint8_t *b = read_file(p, &len);
        size_t hlen = b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16;   /* the tiny fixture's header is < 16 MiB */
        b[8 + hlen] = 0;
        more = strstr((char *)b + 8, "\"model.") != NULL;
        free(b);
        if (more) edit_file(d, "model.safetensors", "\"model.", "\"");
    }
    expect(qwen3_load(&m, d) == 0, "flat tensor names rejected: %s", radix_error());
    if (!test_failed) { note("flat names (no 'model.' prefix): loaded, %d tensors", m.n_tensors); qwen3_free(&m); }
    remove_dir(d);
    /* tied, and the file also stores an lm_head.weight equal to the embedding (as the real Qwen3-0.6B file does):
     * tied, one tensor serves both */
    d = copy_fixture("tiny-tied");
    append_tensor_copy(d, "lm_head.weight", "\"dtype\":\"F32\",\"shape\":[512,64]", 0, 131072);
    int rc = qwen3_load(&m, d);
    expect(rc == 0, "tied with an equal lm_head.weight stored: %s", radix_error());
    if (rc == 0) {
        expect(m.lm_head == m.embed, "tied, stored lm_head equal to the embedding: the head must be the embedding");
        summary("tied + a stored lm_head.weight equal to the embedding: loaded, tied (%d tensors)", m.n_tensors);
        qwen3_free(&m);
    }
    remove_dir(d);
    /* untied, flat names, no lm_head.weight: a Qwen3Model embedding checkpoint, loaded without a head */
    d = untied_embedding_copy();
    rc = qwen3_load(&m, d);
    expect(rc == 0, "untied embedding checkpoint rejected: %s", radix_error());
    if (rc == 0) {
        expect(m.lm_head == NULL, "untied embedding checkpoint: lm_head must be NULL (no head stored)");
        summary("untied Qwen3Model checkpoint (flat names, no lm_head.weight): loaded without an LM head");
        qwen3_free(&m);
    }
    remove_dir(d);
}

/* transformers looks for model.safetensors first and reads model.safetensors.index.json only without it: with both,
 * the single file is loaded, and an index naming shards that are not there changes nothing. A model.safetensors that
 * is not a file (here a folder) does not count, as for transformers' os.path.isfile: then the shards load. */
static void test_single_file_preferred_over_shard_index(void) {
    if (!have_fixtures()) return;
    char *d = copy_fixture("tiny-tied"), p[512];
    const char *index = "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"}}";
    write_file(d, "model.safetensors.index.json", index, strlen(index));
    Qwen3Model m;
    int rc = qwen3_load(&m, d), from_single = 1;
    expect(rc == 0, "model.safetensors beside an index of missing shards: %s", radix_error());
    if (rc == 0) {
        for (int i = 0; i < m.n_tensors; i++) from_single &= strstr(m.tensors[i].file, "/model.safetensors") != NULL;
        expect(from_single && m.n_tensors == 24, "%d tensors, all from model.safetensors: %d (want 24, 1)",
               m.n_tensors, from_single);
        qwen3_free(&m);
    }
    remove_dir(d);
    d = copy_fixture("tiny-untied");
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    mkdir(p, 0700);
    rc = qwen3_load(&m, d);
    expect(rc == 0 && m.n_tensors == 25, "a folder named model.safetensors beside the index: rc %d, '%s'", rc,
           rc ? radix_error() : "");
    if (rc == 0) qwen3_free(&m);
    remove_dir(d);
    summary("model.safetensors and an index of missing shards: the single file loads (24 tensors); a folder named "
            "model.safetensors beside an index: the 4 shards load");
}

/* The configs transformers reads otherwise than a guess would: each a committed checkpoint made by
 * fixtures/make_fixtures.py --variants; reference_matches_transformers checks their logits. */
static void test_config_variants_load_as_transformers_reads_them(void) {
    if (!have_fixtures()) return;
    static const char *names[] = {"tiny-own-head", "tiny-default-head-dim", "tiny-default-kv-heads",
                                  "tiny-sliding-full"};
    for (int i = 0; i < 4; i++) {
        char dir[512];
        Qwen3Model m;
        snprintf(dir, sizeof dir, "%s/%s", fixtures(), names[i]);
        if (qwen3_load(&m, dir)) { expect(0, "%s: %s", names[i], radix_error()); continue; }
        const Qwen3Config *c = &m.cfg;
        int ok = i == 0 ? c->tie_word_embeddings && m.lm_head != m.embed && !strcmp(m.lm_head->name, "lm_head.weight")
               : i == 1 ? c->head_dim == 128 && c->hidden_size / c->n_heads == 8
               : i == 2 ? c->n_kv_heads == 32 && c->n_heads == 32 : c->n_layers == 2;
        expect(ok, "%s: head_dim %d, kv heads %d, tied %d, lm_head %s", names[i], c->head_dim, c->n_kv_heads,
               c->tie_word_embeddings, m.lm_head->name);
        note("%-22s head_dim %3d, heads %2d/%2d kv, tied in config %d, LM head: %s", names[i], c->head_dim,
             c->n_heads, c->n_kv_heads, c->tie_word_embeddings, m.lm_head->name);
        qwen3_free(&m);
    }
}

/* ------------------------------------------------------------------------------------------- the C reference */
static void test_reference_matches_transformers(void) {
    /* transformers' eager fp32 forward (fixtures/make_fixtures.py) vs ours: the two sum in different orders, so
     * they agree to fp32 rounding, not bit for bit. Tolerance: max|ours - hf| / max|hf| <= 1e-4. */
    if (!have_fixtures()) return;
    /* the three models on every batch; the config variants (config_variants_load_as_transformers_reads_them) on the
     * first, where they differ from a guess: a tied config with its own stored head, missing head_dim and
     * num_key_value_heads, use_sliding_window with no sliding layer */
    const char *models[] = {"tiny-tied", "tiny-untied", "tiny-bf16", "tiny-own-head", "tiny-default-head-dim",
                            "tiny-default-kv-heads", "tiny-sliding-full"};
    const char *batches[] = {"single", "shared_prefix", "mixed"};
    for (int mi = 0; mi < 7; mi++) {
        char p[512];
        Qwen3Model m;
        snprintf(p, sizeof p, "%s/%s", fixtures(), models[mi]);
        if (qwen3_load(&m, p)) { expect(0, "%s: %s", models[mi], radix_error()); continue; }
        for (int bi = 0; bi < (mi < 3 ? 3 : 1); bi++) {
            RxBatch b;
            size_t len;
            snprintf(p, sizeof p, "%s/batches/%s.txt", fixtures(), batches[bi]);
            if (rx_batch_read(&b, p)) { expect(0, "%s", radix_error()); continue; }
            snprintf(p, sizeof p, "%s/logits/%s-%s.f32", fixtures(), models[mi], batches[bi]);
            float *hf = (float *)read_file(p, &len);
            size_t n = (size_t)b.n_tokens * m.cfg.vocab_size;
            expect(hf && len == n * sizeof(float),
                   "%s: missing or not [%d, %d] float32", p, b.n_tokens, m.cfg.vocab_size);
            float *ours = (float *)malloc(n * sizeof(float)), *other = (float *)malloc(n * sizeof(float));
            if (hf && len == n * sizeof(float) && qwen3_forward_ref(&m, &b, RX_BASELINE, ours) == 0) {
                double d, tol;
                char why[WHY], what[96];
                int same = 1;
                expect(close_verdict(ours, hf, n, 1e-4, &d, &tol, why), "%s x %s: %s", models[mi], batches[bi], why);
                for (int mode = RX_RADIX; mode <= RX_COMPACT; mode++) {
                    int rc = qwen3_forward_ref(&m, &b, (RxMode)mode, other);
                    expect(rc == 0, "%s", radix_error());
                    snprintf(what, sizeof what, "%s x %s: %s vs baseline", models[mi], batches[bi],
                             rx_mode_name((RxMode)mode));
                    same &= rc == 0 && expect_identical(what, other, ours, n);
                }
                note("%-21s x %-13s N=%2d  max|ours - transformers| / max|transformers| = %.2e (tol 1e-4)%s",
                     models[mi], batches[bi], b.n_tokens, d / max_abs(hf, n),
                     same ? "; radix, compact == baseline" : "");
            } else if (hf && len == n * sizeof(float)) {
                expect(0, "forward failed: %s", radix_error());
            }
            free(hf); free(ours); free(other);
            rx_batch_free(&b);
        }
        qwen3_free(&m);
    }
}

/* rx_rerank_scores against P(yes) = 1 / (1 + e^(no - yes)) in long double, an independent form of the model card's
 * softmax over [no, yes]: within 6e-8 (half an ulp of float at 1; the double arithmetic adds 1e-16), on equal logits
 * (exactly 0.5), logits a thousand apart and near float's limits (0 and 1 without overflow), and random ones. Swapped
 * ids give 1 - P. Ids that are not two different ids in [0, vocab) are refused. */
static void test_rerank_scores_are_softmax_of_two_logits(void) {
    enum { ROWS = 40, V = 8 };
    float logits[ROWS * V], p[ROWS], q[ROWS];
    uint64_t rng = 99;
    for (int i = 0; i < ROWS * V; i++) logits[i] = (float)(rng_int(&rng, 2001) - 1000) / 97.0f;
    const float edge[5][2] = {{1.5f, 1.5f}, {600.0f, -600.0f}, {-3e38f, 3e38f}, {88.7f, 0.0f}, {-1e-30f, 1e-30f}};
    for (int r = 0; r < 5; r++) {
        logits[r * V + 3] = edge[r][0];
        logits[r * V + 5] = edge[r][1];
    }
    int rc = rx_rerank_scores(logits, ROWS, V, 3, 5, p);
    expect(rc == 0, "rx_rerank_scores: %s", radix_error());
    double worst = 0, worst_swap = 0;
    for (int r = 0; rc == 0 && r < ROWS; r++) {
        long double y = logits[r * V + 3], n = logits[r * V + 5];
        double want = (double)(1.0L / (1.0L + expl(n - y)));
        worst = fmax(worst, fabs(p[r] - want));
        expect(isfinite(p[r]) && fabs(p[r] - want) <= 6e-8, "row %d (yes %g, no %g): P(yes) %.9g, want %.9g", r,
               (double)y, (double)n, p[r], want);
    }
    expect(rc == 0 && p[0] == 0.5f && p[1] == 1.0f && p[2] == 0.0f, "equal logits: %.9g (want 0.5); 1200 apart: %.9g "
           "(want 1); 6e38 apart: %.9g (want 0)", p[0], p[1], p[2]);
    rc = rx_rerank_scores(logits, ROWS, V, 5, 3, q);
    for (int r = 0; rc == 0 && r < ROWS; r++) worst_swap = fmax(worst_swap, fabs(p[r] + q[r] - 1.0));
    expect(rc == 0 && worst_swap <= 1.2e-7, "swapped ids: max|P(yes) + P(no) - 1| %.3g > 1.2e-7", worst_swap);
    const int32_t bad[4][2] = {{3, 3}, {-1, 2}, {2, V}, {V + 5, 0}};
    int refused = 0;
    for (int k = 0; k < 4; k++) {
        int r = rx_rerank_scores(logits, ROWS, V, bad[k][0], bad[k][1], q);
        refused += r != 0;
        expect(r != 0 && strstr(radix_error(), "two different token ids below the vocabulary size 8"),
               "ids (%d, %d) of a vocabulary of %d: rc %d, '%s'", bad[k][0], bad[k][1], V, r, radix_error());
        if (k == 0) note("ids (3, 3) -> %s", radix_error());
    }
    summary("%d rows: max|P(yes) - 1/(1 + e^(no - yes))| %.3g (tol 6e-8), equal logits 0.5, far apart 1 and 0; "
            "swapped ids 1 - P within %.3g; %d pairs of bad ids refused", ROWS, worst, worst_swap, refused);
}

/* Reranking and embedding read one row per sequence (qwen3_forward_ref_last): its last-token logits must be the
 * full forward's rows bit for bit (the same per-row arithmetic), and its embedding what sentence-transformers makes
 * of transformers' Qwen3Model (last-token pooling, L2 normalisation; fixtures/make_fixtures.py --variants), to fp32
 * rounding: max|ours - hf| <= 1e-4 max|hf|, as for the logits. */
static void test_last_token_logits_and_embeddings(void) {
    if (!have_fixtures()) return;
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    char p[512], what[96];
    Qwen3Model m, e;
    RxBatch b;
    size_t len;
    snprintf(p, sizeof p, "%s/batches/mixed.txt", fixtures());
    if (rx_batch_read(&b, p)) { expect(0, "%s", radix_error()); return; }
    snprintf(p, sizeof p, "%s/tiny-tied", fixtures());
    if (qwen3_load(&m, p) == 0) {
        int V = m.cfg.vocab_size, S = b.n_seqs;
        float *full = floats((size_t)b.n_tokens * V), *want = floats((size_t)S * V), *last = floats((size_t)S * V);
        int rc = qwen3_forward_ref(&m, &b, RX_BASELINE, full);
        expect(rc == 0, "%s", radix_error());
        for (int s = 0; rc == 0 && s < S; s++)
            memcpy(want + (size_t)s * V, full + (size_t)(b.cu_seqlens[s + 1] - 1) * V, sizeof(float) * V);
        for (int k = 0; rc == 0 && k < 3; k++) {
            int rk = qwen3_forward_ref_last(&m, &b, modes[k], last, NULL);
            expect(rk == 0, "%s", radix_error());
            snprintf(what, sizeof what, "tiny-tied x mixed, %s: last-token logits vs rows of the full logits",
                     rx_mode_name(modes[k]));
            if (rk == 0 && expect_identical(what, last, want, (size_t)S * V)) note("%s: bit-identical", what);
        }
        free(full); free(want); free(last);
        qwen3_free(&m);
    } else expect(0, "tiny-tied: %s", radix_error());
    snprintf(p, sizeof p, "%s/tiny-embedding", fixtures());
    if (qwen3_load(&e, p) == 0) {
        int H = e.cfg.hidden_size, S = b.n_seqs;
        snprintf(p, sizeof p, "%s/embeddings/tiny-embedding-mixed.f32", fixtures());
        float *hf = (float *)read_file(p, &len), *emb = floats((size_t)S * H), *base = floats((size_t)S * H);
        expect(hf && len == (size_t)S * H * sizeof(float), "%s: missing or not [%d, %d] float32", p, S, H);
        for (int k = 0; hf && len == (size_t)S * H * sizeof(float) && k < 3; k++) {
            int rc = qwen3_forward_ref_last(&e, &b, modes[k], NULL, k ? emb : base);
            expect(rc == 0, "%s", radix_error());
            double d, tol;
            char why[WHY];
            snprintf(what, sizeof what, "tiny-embedding x mixed, %s: embeddings", rx_mode_name(modes[k]));
            if (rc == 0 && k == 0) {
                expect(close_verdict(base, hf, (size_t)S * H, 1e-4, &d, &tol, why),
                       "%s vs transformers: %s", what, why);
                note("%s: max|ours - sentence-transformers' pooling| %.3g (tol %.3g)", what, d, tol);
            } else if (rc == 0 && expect_identical(what, emb, base, (size_t)S * H)) {
                note("%s == baseline, bit for bit", what);
            }
        }
        /* the same checkpoint untied (no head): the same embeddings, and logits refused with one line */
        char *d = untied_embedding_copy();
        Qwen3Model u;
        float logits[5 * 512];
        if (qwen3_load(&u, d) == 0) {
            int rc = qwen3_forward_ref_last(&u, &b, RX_COMPACT, NULL, emb);
            expect(rc == 0, "untied: %s", radix_error());
            if (rc == 0 && expect_identical("untied tiny-embedding: embeddings vs tied", emb, base, (size_t)S * H))
                note("untied tiny-embedding (no LM head): the same embeddings, bit for bit");
            rc = qwen3_forward_ref_last(&u, &b, RX_COMPACT, logits, NULL);
            expect(rc != 0 && strstr(radix_error(), "no LM head"), "untied: logits not refused: '%s'", radix_error());
            note_rejected(rc, 0, "untied tiny-embedding, logits");
            qwen3_free(&u);
        } else expect(0, "untied tiny-embedding: %s", radix_error());
        remove_dir(d);
        free(hf); free(emb); free(base);
        qwen3_free(&e);
    } else expect(0, "tiny-embedding: %s", radix_error());
    rx_batch_free(&b);
}

/* fmax() drops a NaN: that is how an all-NaN output could pass every comparison. Each poisoned copy of a random
 * output, poisoned in got, in ref, or in both alike (the same bits on both sides), must fail both verdicts with the
 * NaN/Inf reason, at any tolerance; the clean pair must pass both, or this test could not tell. */
static void test_comparisons_fail_on_nan_and_inf(void) {
    enum { n = 64 };
    float clean[n], got[n], ref[n];
    uint64_t rng = 9;
    float *r = rand_floats(n, -1.0f, 1.0f, &rng);
    memcpy(clean, r, sizeof clean);
    free(r);
    static const struct { const char *what; int at; float value; } poison[] = {
        {"one NaN", 17, NAN}, {"one +Inf", 0, INFINITY}, {"one -Inf", n - 1, -INFINITY}, {"all NaN", -1, NAN}};
    static const char *sides[3] = {"in got", "in ref", "in both alike"};
    double d, tol;
    char why[WHY];
    expect(close_verdict(clean, clean, n, 0.0, &d, &tol, why) && identical_verdict(clean, clean, n, why),
           "the clean pair fails: %s", why);
    int cases = 0;
    for (size_t p = 0; p < sizeof poison / sizeof poison[0]; p++)
        for (int side = 0; side < 3; side++) {
            memcpy(got, clean, sizeof got);
            memcpy(ref, clean, sizeof ref);
            for (int i = 0; i < n; i++)
                if (poison[p].at < 0 || i == poison[p].at) {
                    if (side != 1) got[i] = poison[p].value;
                    if (side != 0) ref[i] = poison[p].value;
                }
            size_t bad, first = poison[p].at < 0 ? 0 : (size_t)poison[p].at;
            double lib = rx_max_abs_diff(got, ref, n, &bad);
            expect(isnan(lib) && bad == first, "%s %s: rx_max_abs_diff = %g, first_bad %zu (want NaN, %zu)",
                   poison[p].what, sides[side], lib, bad, first);
            int close_ok = close_verdict(got, ref, n, 1e30, &d, &tol, why);
            expect(!close_ok && strstr(why, "a NaN or Inf never passes"), "%s %s: close: %s", poison[p].what,
                   sides[side], close_ok ? "passed" : why);
            int same_ok = identical_verdict(got, ref, n, why);
            expect(!same_ok && strstr(why, "a NaN or Inf never passes"), "%s %s: identical: %s", poison[p].what,
                   sides[side], same_ok ? "passed" : why);
            cases++;
        }
    note("e.g. %s", why);
    summary("%d poisoned pairs (one NaN, one +Inf, one -Inf, all NaN; in got, in ref, in both alike) fail 'close' "
            "(even at tol 1e30 x max|ref|) and 'identical' with their own reason; the clean pair passes both", cases);
}

/* The paper's Table 7a patterns on a random model (head_dim != hidden/heads, GQA): radix and compact must equal
 * baseline bit for bit, because every row is computed with the same arithmetic whichever rows surround it. */
typedef struct { const char *name; int n_seqs; int lens[8]; int shared[8]; } Pattern;
static const Pattern table7a[] = {
    {"single_sequence", 1, {17}, {0}},
    {"identical_sequences", 4, {9, 9, 9, 9}, {0, 9, 9, 9}},
    {"shared_prefix", 4, {12, 8, 15, 10}, {0, 6, 6, 6}},
    {"no_sharing", 3, {7, 11, 5}, {0, 0, 0}},
    {"mixed_lengths", 5, {1, 13, 4, 20, 2}, {0, 1, 4, 3, 2}},
    {"complex_sharing", 6, {10, 12, 9, 14, 6, 11}, {0, 7, 3, 9, 6, 2}},
};

/* shared[s] = how many leading tokens sequence s copies from sequence s-1 (0: a fresh first token). */
static RxBatch pattern_batch(const Pattern *p, int vocab, uint64_t seed) {
    int32_t ids[8 * 32];
    int at = 0, prev = 0;
    uint64_t rng = seed;
    for (int s = 0; s < p->n_seqs; s++) {
        for (int i = 0; i < p->lens[s]; i++)
            ids[at + i] = i < p->shared[s] ? ids[prev + i] : (int32_t)(s * 7 + 1 + rng_int(&rng, vocab - 64));
        prev = at;
        at += p->lens[s];
    }
    return batch_of(p->n_seqs, p->lens, ids, NULL);
}

static Qwen3Config tiny_config(void) {
    Qwen3Config c = {
        .vocab_size = 512,
        .hidden_size = 64,
        .intermediate_size = 128,
        .n_layers = 2,
        .n_heads = 4,
        .n_kv_heads = 2,
        .head_dim = 32,
        .max_position_embeddings = 128,
        .rope_theta = 1e6,
        .rms_norm_eps = 1e-6,
        .tie_word_embeddings = 1,
    };
    return c;
}

static void test_reference_radix_equals_baseline_table7a(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    expect(qwen3_random(&m, &cfg, 11) == 0, "qwen3_random: %s", radix_error());
    if (test_failed) return;
    note("%-20s %4s %4s   %-22s %-22s", "pattern", "N", "N'", "radix (max, mean)", "compact (max, mean)");
    for (size_t p = 0; p < sizeof table7a / sizeof table7a[0]; p++) {
        RxBatch b = pattern_batch(&table7a[p], cfg.vocab_size, 100 + p);
        RadixIndex ix;
        radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs);
        size_t n = (size_t)b.n_tokens * cfg.vocab_size;
        float *base = (float *)malloc(n * 4), *radix = (float *)malloc(n * 4), *compact = (float *)malloc(n * 4);
        int ok = !qwen3_forward_ref(&m, &b, RX_BASELINE, base) && !qwen3_forward_ref(&m, &b, RX_RADIX, radix) &&
                 !qwen3_forward_ref(&m, &b, RX_COMPACT, compact);
        expect(ok, "%s: %s", table7a[p].name, radix_error());
        if (ok) {
            double rmax = max_abs_diff(radix, base, n), cmax = max_abs_diff(compact, base, n);
            char what[64];
            snprintf(what, sizeof what, "%s: radix vs baseline", table7a[p].name);
            expect_identical(what, radix, base, n);
            snprintf(what, sizeof what, "%s: compact vs baseline", table7a[p].name);
            expect_identical(what, compact, base, n);
            expect(max_abs(base, n) > 0.1, "%s: logits suspiciously small", table7a[p].name);
            note("%-20s %4d %4d   (%g, %g)%*s(%g, %g)", table7a[p].name, ix.n_tokens, ix.n_compact, rmax,
                 mean_abs_diff(radix, base, n), 14, "", cmax, mean_abs_diff(compact, base, n));
        }
        free(base); free(radix); free(compact);
        radix_index_free(&ix);
        rx_batch_free(&b);
    }
    qwen3_free(&m);
}

/* The forward's matmul (packed weight, tiled, vectorized across outputs, threaded) against the definition
 * rx_matmul_ref, bit for bit: every output the same chain of fmaf over i in increasing order. On every instruction
 * set path the CPU has (cpu_paths), at edge shapes (one row, rows below, at and past a 6-row
 * tile, outputs below, at and past a 64-wide panel, a last panel of 1 to 63, a panel's tiles past the 8 shares of
 * the next panel they fetch, inputs past one and two blocks of 1024), each row also alone (rows = 1): a row's result
 * must not depend on the rows around it, on its place in a tile, or on the path; 1 and 2 threads. */
static void test_matmul_packed_equals_definition_bit_for_bit(void) {
    static const int shapes[][3] = {{1, 64, 16}, {3, 7, 17}, {4, 33, 5}, {5, 64, 48}, {9, 100, 33}, {13, 1, 100},
                                    {2, 50, 31}, {6, 257, 16}, {7, 129, 47}, {64, 300, 200},
                                    {8, 600, 40}, {4, 20, 32}, {5, 40, 64}, {3, 10, 65}, {11, 9, 95},
                                    {2, 70, 63}, {7, 33, 127}, {4, 12, 128}, {50, 17, 129}, {7, 1100, 70},
                                    {50, 2100, 40}};
                                                                                     /* rows, in, out */
    const char *paths[RX_PATHS], *path0 = rx_cpu_path(NULL);
    char list[RX_LIST];
    int threads0 = rx_threads(0), cases = 0, n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    int n_paths = cpu_paths(paths, list);
    uint64_t rng = 18;
    for (int c = 0; c < n_shapes; c++) {
        int rows = shapes[c][0], in = shapes[c][1], out = shapes[c][2];
        float *x = rand_floats((size_t)rows * in, -1.0f, 1.0f, &rng);
        float *w = rand_floats((size_t)out * in, -1.0f, 1.0f, &rng);
        float *wp = floats(rx_packed_floats(out, in)), *xp = floats(rx_packed_x_floats(rows, in));
        float *ref = floats((size_t)rows * out), *got = floats((size_t)rows * out);
        RxTensor W = {0};                               /* w as the forward sees a weight: F32 [out, in] */
        W.dtype = RX_F32;
        W.rank = 2;
        W.shape[0] = out;
        W.shape[1] = in;
        W.data = w;
        W.nbytes = (size_t)out * in * 4;
        rx_pack_weight(wp, &W);
        rx_matmul_ref(ref, x, w, rows, in, out);
        for (int p = 0; p < n_paths; p++)
            for (int t = 1; t <= 2; t++) {
                char what[128];
                rx_cpu_path(paths[p]);
                rx_threads(t);
                rx_matmul_packed_ref(got, x, wp, rows, in, out, xp);
                snprintf(what, sizeof what, "%s: [%d, %d] @ [%d, %d]^T, %d thread%s", paths[p], rows, in, out, in, t,
                         t > 1 ? "s" : "");
                expect_identical(what, got, ref, (size_t)rows * out);
                memset(got, 0, (size_t)rows * out * sizeof(float));
                rx_matmul_packed_ref(got, NULL, wp, rows, in, out, xp);        /* x NULL: xp as packed above */
                expect_identical(what, got, ref, (size_t)rows * out);
                for (int r = 0; r < rows; r++)
                    rx_matmul_packed_ref(got + (size_t)r * out, x + (size_t)r * in, wp, 1, in, out, xp);
                snprintf(what, sizeof what, "%s: [%d, %d] @ [%d, %d]^T, row by row, %d thread%s", paths[p], rows, in,
                         out, in, t, t > 1 ? "s" : "");
                expect_identical(what, got, ref, (size_t)rows * out);
                cases++;
            }
        free(x); free(w); free(wp); free(xp); free(ref); free(got);
    }
    rx_threads(threads0);
    rx_cpu_path(path0);
    summary("%d shapes x paths {%s} x {1, 2} threads, whole and row by row: rx_matmul_packed_ref == rx_matmul_ref "
            "bit for bit", n_shapes, list);
}

static int32_t *seq_starts(const RxBatch *b) {   /* [N]: the first position of each token's sequence */
    int32_t *st = (int32_t *)malloc((size_t)b->n_tokens * sizeof(int32_t));
    for (int s = 0; s < b->n_seqs; s++)
        for (int t = b->cu_seqlens[s]; t < b->cu_seqlens[s + 1]; t++) st[t] = b->cu_seqlens[s];
    return st;
}

/* Sequences that copy the first p tokens of sequence 0 (a random 300-token sequence) and then part from it with a
 * token no other sequence has, so that p_s = min(p, L): {length, p}. */
static RxBatch shared_prefix_batch(const int (*spec)[2], int n_seqs, uint64_t seed) {
    int lens[32], at = 0;
    int32_t ids[32 * 300];
    uint64_t rng = seed;
    for (int s = 0; s < n_seqs; s++) {
        lens[s] = spec[s][0];
        for (int i = 0; i < lens[s]; i++)
            ids[at + i] = i < spec[s][1] ? ids[i] : i == spec[s][1] ? 100000 + s : 1 + rng_int(&rng, 50000);
        at += lens[s];
    }
    return batch_of(n_seqs, lens, ids, NULL);
}

/* rx_exp_ref (the softmax's and SiLU's exponential) against exp in double: within 1.5 ulp of the float nearest to
 * exp(x) over the whole float range it covers, [-87.3, 88.7] in 2 million steps, and on random a*x + b as the
 * softmax (a = 1, b = -max) and SiLU (a = -1) call it; on every CPU path, bit for bit alike; exactly 1 at +-0; +inf
 * above the range, +0 below it, NaN for NaN; in place (y = x) as the softmax calls it. */
static void test_exp_matches_double_on_every_path(void) {
    enum { N = 2000001, EDGES = 9 };
    static const float edge[EDGES] = {0.0f, -0.0f, 88.8f, -87.4f, INFINITY, -INFINITY, NAN, 88.72f, -87.33f};
    const char *paths[RX_PATHS], *path0 = rx_cpu_path(NULL);
    char list[RX_LIST];
    int n_paths = cpu_paths(paths, list);
    float *x = floats(N + EDGES), *y = floats(N + EDGES), *got = floats(N + EDGES), *in_place = floats(N + EDGES);
    uint64_t rng = 31;
    double worst = 0;
    for (int i = 0; i < N; i++) x[i] = -87.3f + 176.0f * (float)i / (float)(N - 1);
    memcpy(x + N, edge, sizeof edge);
    for (int p = 0; p < n_paths; p++) {                /* y: the first path's; every other must equal it */
        rx_cpu_path(paths[p]);
        rx_exp_ref(p ? got : y, x, 1.0f, 0.0f, N + EDGES);
        expect(!p || !memcmp(got, y, (N + EDGES) * sizeof(float)), "the %s and %s paths differ", paths[p], paths[0]);
        memcpy(in_place, x, (N + EDGES) * sizeof(float));
        rx_exp_ref(in_place, in_place, 1.0f, 0.0f, N + EDGES);
        expect(!memcmp(in_place, y, (N + EDGES) * sizeof(float)), "%s: in place differs", paths[p]);
    }
    for (int i = 0; i < N; i++) {
        double e = exp((double)x[i]), ulp = nextafterf((float)e, INFINITY) - (float)e, u = fabs(y[i] - e) / ulp;
        if (!(u <= worst)) worst = u;
    }
    expect(worst <= 1.5, "exp: %.2f ulp from exp in double (bound 1.5)", worst);
    const float *ye = y + N;
    expect(ye[0] == 1.0f && ye[1] == 1.0f && ye[2] == INFINITY && ye[3] == 0.0f && !signbit(ye[3]) &&
           ye[4] == INFINITY && ye[5] == 0.0f && isnan(ye[6]) && isfinite(ye[7]) && ye[8] > 0.0f,
           "edges: exp(0) %g, exp(-0) %g, exp(88.8) %g, exp(-87.4) %g, exp(inf) %g, exp(-inf) %g, exp(nan) %g, "
           "exp(88.72) %g, exp(-87.33) %g", ye[0], ye[1], ye[2], ye[3], ye[4], ye[5], ye[6], ye[7], ye[8]);
    double worst_ab = 0;                               /* the callers' forms: exp(x - max) and exp(-x) */
    for (int k = 0; k < 2000; k++) {
        float xs[64], ys[64], mx = -INFINITY, a = k % 2 ? -1.0f : 1.0f;
        for (int i = 0; i < 64; i++) mx = fmaxf(mx, xs[i] = (float)((rng_next(&rng) >> 40) * 0x1.0p-24 * 60.0 - 30.0));
        rx_exp_ref(ys, xs, a, a > 0 ? -mx : 0.0f, 64);
        for (int i = 0; i < 64; i++) {
            float arg = a > 0 ? xs[i] - mx : -xs[i];
            double e = exp((double)arg), ulp = nextafterf((float)e, INFINITY) - (float)e;
            if (!(fabs(ys[i] - e) / ulp <= worst_ab)) worst_ab = fabs(ys[i] - e) / ulp;
        }
    }
    expect(worst_ab <= 1.5, "exp(x - max), exp(-x): %.2f ulp (bound 1.5)", worst_ab);
    rx_cpu_path(path0);
    summary("paths {%s} bit for bit; %.3f ulp at worst over [-87.3, 88.7], %.3f on exp(x - max) and exp(-x); "
            "edges: 1 at +-0, inf above, +0 below, NaN for NaN", list, worst, worst_ab);
    free(x); free(y); free(got); free(in_place);
}

/* Attention as the definition says, in double: row g of sequence [t0, ..] and head h attend to keys t0 .. g of kv
 * head h / (nh / nkv); out [N, nh*hd]; bound [N, nh]: a forward error bound of the float computation (below). */
static void attention_double(const float *q, const float *k, const float *v, double *out, double *bound, int N,
                             const int32_t *seq_start, int nh, int nkv, int hd) {
    double scale = 1.0 / sqrt((double)hd), u = 0x1p-24;
    double *p = (double *)malloc((size_t)N * sizeof(double));
    for (int g = 0; g < N; g++)
        for (int h = 0; h < nh; h++) {
            const float *qh = q + ((size_t)g * nh + h) * hd;
            int t0 = seq_start[g], kvh = h / (nh / nkv);
            double mx = -INFINITY, z = 0, dots = 0, vmax = 0;
            for (int t = t0; t <= g; t++) {
                const float *kt = k + ((size_t)t * nkv + kvh) * hd, *vt = v + ((size_t)t * nkv + kvh) * hd;
                double s = 0, a = 0;
                for (int i = 0; i < hd; i++) {
                    s += (double)qh[i] * kt[i];
                    a += fabs((double)qh[i] * kt[i]);
                }
                p[t] = s * scale;
                mx = fmax(mx, p[t]);
                dots = fmax(dots, a * scale);
                for (int i = 0; i < hd; i++) vmax = fmax(vmax, fabs(vt[i]));
            }
            for (int t = t0; t <= g; t++) z += (p[t] = exp(p[t] - mx));
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int t = t0; t <= g; t++) o += p[t] / z * v[((size_t)t * nkv + kvh) * hd + i];
                out[((size_t)g * nh + h) * hd + i] = o;
            }
            /* scores off by <= hd u dots each (an FMA chain), so each p by a factor within exp(+-2 hd u dots); the
             * softmax's expf, sum and division and the output's chain add (len + 4) u; x2 for what second order
             * terms and libm's expf (< 1 ulp) leave. */
            bound[(size_t)g * nh + h] = 2 * (2 * hd * u * dots + (g - t0 + 5) * u) * vmax;
        }
    free(p);
}

/* rx_attention_ref (the C reference's attention, its tiles of MM_ROWS queries sharing keys) against the definition
 * in double, on sequences of lengths 40, 1, 17, 16, 33, 5, 1, 45, 40, 35, 80, 64, 66 (off and on a block of 64
 * keys) sharing prefixes of the first (in compact mode a whole block of 64 shared, a last block shared whole, a
 * block that parts after its first key); GQA 3:1 at head_dim 24 (not a multiple of 64), MHA, MQA 8:1 (a row's
 * heads span two tiles). Then:
 *   - compact layout (q_orig = I_gather, kv_row = I_scatter) row j == baseline row I_gather[j] on the scattered
 *     rows, bit for bit;
 *   - every CPU path x 1 and 2 threads: the same bits;
 *   - a NaN planted in position t's key and value reaches rows t.. of its sequence and no other row. */
static void test_attention_ref_matches_double_every_layout(void) {
    static const int spec[][2] = {{40, 0}, {1, 0}, {17, 1}, {16, 16}, {33, 17}, {5, 5}, {1, 1}, {45, 40}, {40, 40},
                                  {35, 33}, {80, 70}, {64, 64}, {66, 65}};                   /* {length, p} */
    static const int heads[][3] = {{6, 2, 24}, {4, 4, 16}, {8, 1, 40}};                      /* nh, nkv, hd */
    const int n_seqs = (int)(sizeof spec / sizeof spec[0]);
    const char *paths[RX_PATHS], *path0 = rx_cpu_path(NULL);
    char list[RX_LIST];
    int threads0 = rx_threads(0), n_paths = cpu_paths(paths, list);
    RxBatch b = shared_prefix_batch(spec, n_seqs, 29);
    RadixIndex ix;
    if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs)) {
        expect(0, "radix_index_build: %s", radix_error());
        rx_batch_free(&b);
        return;
    }
    int N = b.n_tokens, Nc = ix.n_compact, nan_at = b.cu_seqlens[4] + 20;   /* in sequence 4's own part */
    int32_t *seq_start = seq_starts(&b);
    uint64_t rng = 30;
    double worst = 0;
    for (int c = 0; c < 3; c++) {
        int nh = heads[c][0], nkv = heads[c][1], hd = heads[c][2], qd = nh * hd, kvd = nkv * hd;
        float *qc = rand_floats((size_t)Nc * qd, -2, 2, &rng), *kc = rand_floats((size_t)Nc * kvd, -2, 2, &rng);
        float *vc = rand_floats((size_t)Nc * kvd, -2, 2, &rng);
        float *q = floats((size_t)N * qd), *k = floats((size_t)N * kvd), *v = floats((size_t)N * kvd);
        float *out = floats((size_t)N * qd), *got = floats((size_t)N * qd), *got_c = floats((size_t)Nc * qd);
        double *ref = (double *)malloc((size_t)N * qd * sizeof(double)), *bound = (double *)malloc((size_t)N * nh *
                                                                                                   sizeof(double));
        for (int t = 0; t < N; t++) {                  /* the N rows scattered from the N' compact rows */
            memcpy(q + (size_t)t * qd, qc + (size_t)ix.scatter[t] * qd, (size_t)qd * sizeof(float));
            memcpy(k + (size_t)t * kvd, kc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
            memcpy(v + (size_t)t * kvd, vc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
        }
        attention_double(q, k, v, ref, bound, N, seq_start, nh, nkv, hd);
        expect(rx_attention_ref(q, k, v, out, 0, NULL, seq_start, NULL, nh, nkv, hd) == 0, "no queries: %s",
               radix_error());
        rx_cpu_path("auto");
        expect(rx_attention_ref(q, k, v, out, N, NULL, seq_start, NULL, nh, nkv, hd) == 0, "%s", radix_error());
        size_t bad = 0, nonfin = 0;
        for (size_t e = 0; e < (size_t)N * qd; e++) {
            double d = fabs(out[e] - ref[e]), tol = bound[e / hd];
            nonfin += !isfinite(out[e]);
            bad += !(d <= tol);
            if (tol > 0 && d / tol > worst) worst = d / tol;
        }
        expect(nonfin == 0 && bad == 0, "%d heads, %d kv, dim %d: %zu outputs NaN or Inf, %zu beyond the bound", nh,
               nkv, hd, nonfin, bad);
        for (int p = 0; p < n_paths; p++)
            for (int t = 1; t <= 2; t++) {
                char what[128];
                rx_cpu_path(paths[p]);
                rx_threads(t);
                expect(rx_attention_ref(q, k, v, got, N, NULL, seq_start, NULL, nh, nkv, hd) == 0 &&
                       rx_attention_ref(qc, kc, vc, got_c, Nc, ix.gather, seq_start, ix.scatter, nh, nkv, hd) == 0,
                       "%s", radix_error());
                snprintf(what, sizeof what, "%d heads, %d kv, dim %d, %s, %d thread(s), baseline", nh, nkv, hd,
                         rx_cpu_path(NULL), t);
                expect_identical(what, got, out, (size_t)N * qd);
                for (int j = 0; j < Nc; j++)     /* got: baseline's rows I_gather, [N', nh*hd] */
                    memcpy(got + (size_t)j * qd, out + (size_t)ix.gather[j] * qd, (size_t)qd * sizeof(float));
                snprintf(what, sizeof what, "%d heads, %d kv, dim %d, %s, %d thread(s), compact row j vs baseline "
                         "row I_gather[j]", nh, nkv, hd, rx_cpu_path(NULL), t);
                expect_identical(what, got_c, got, (size_t)Nc * qd);
            }
        rx_threads(threads0);
        rx_cpu_path(path0);
        k[(size_t)nan_at * kvd] = NAN;                 /* position nan_at's key (kv head 0) and value (kv head nkv-1) */
        v[(size_t)nan_at * kvd + kvd - 1] = NAN;
        expect(rx_attention_ref(q, k, v, got, N, NULL, seq_start, NULL, nh, nkv, hd) == 0, "%s", radix_error());
        int leaked = 0, missing = 0;
        for (int t = 0; t < N; t++) {
            int reached = seq_start[t] == seq_start[nan_at] && t >= nan_at, clean = 1;
            for (int e = 0; e < qd; e++) clean &= isfinite(got[(size_t)t * qd + e]) != 0;
            leaked += !reached && (!clean || memcmp(got + (size_t)t * qd, out + (size_t)t * qd, qd * sizeof(float)));
            missing += reached && clean;
        }
        expect(leaked == 0 && missing == 0, "%d heads, %d kv, dim %d: a NaN at position %d changed %d rows it must not "
               "reach and missed %d it must", nh, nkv, hd, nan_at, leaked, missing);
        free(qc); free(kc); free(vc); free(q); free(k); free(v); free(out); free(got); free(got_c); free(ref);
        free(bound);
    }
    summary("N = %d, N' = %d; GQA 3:1 dim 24, MHA dim 16, MQA 8:1 dim 40: within the double-precision bound (worst "
            "%.2f of it); compact == baseline and paths {%s} x {1, 2} threads bit for bit; a NaN at t reaches only "
            "rows t.. of its sequence", N, Nc, worst, list);
    free(seq_start);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

/* The thread count changes who computes a row, never how: the logits of every mode with 2 threads equal the
 * baseline's with 1 thread bit for bit, on the Table 7a patterns (a build without OpenMP runs 1 thread twice). */
/* qwen3_random fills its tensors in parallel: element k of the model is splitmix64's draw k from the seed, so the
 * model is the same whatever the thread count. A config no checkpoint could have is refused in one line. */
static void test_random_model_identical_for_1_and_2_threads(void) {
    Qwen3Config cfg = tiny_config(), bad = tiny_config();
    Qwen3Model one, two;
    int threads0 = rx_threads(0), n_two = (rx_threads(2), rx_threads(0));
    rx_threads(1);
    int rc1 = qwen3_random(&one, &cfg, 13);
    rx_threads(2);
    int rc2 = qwen3_random(&two, &cfg, 13);
    rx_threads(threads0);
    expect(rc1 == 0 && rc2 == 0, "qwen3_random: %s", radix_error());
    for (int i = 0; rc1 == 0 && rc2 == 0 && i < one.n_tensors; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s, 1 thread vs %d", one.tensors[i].name, n_two);
        expect_identical(what, (const float *)two.tensors[i].data, (const float *)one.tensors[i].data,
                         one.tensors[i].nbytes / sizeof(float));
    }
    summary("%d tensors: bit-identical on 1 and %d threads", one.n_tensors, n_two);
    if (rc1 == 0) qwen3_free(&one);
    if (rc2 == 0) qwen3_free(&two);
    bad.n_kv_heads = 3;                                  /* 4 heads: not a multiple */
    int rc = qwen3_random(&one, &bad, 13);
    expect(rc != 0 && strstr(radix_error(), "multiple of n_kv_heads"), "n_kv_heads 3 of 4 heads not refused: '%s'",
           radix_error());
    note_rejected(rc, 0, "4 heads, 3 kv heads");
    bad = tiny_config();
    bad.intermediate_size = 0;
    rc = qwen3_random(&one, &bad, 13);
    expect(rc != 0 && strstr(radix_error(), "size below 1"), "intermediate_size 0 not refused: '%s'", radix_error());
    note_rejected(rc, 0, "intermediate_size 0");
}

/* The matmul's instruction set changes nothing either: each mode on every path the CPU has (portable, and AVX2 and
 * AVX-512 where it has them) equals the baseline on the fastest path with 1 thread. */
static void test_logits_identical_for_1_and_2_threads_every_mode_and_cpu_path(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 12)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    const char *paths[RX_PATHS], *path0 = rx_cpu_path(NULL);
    char list[RX_LIST];
    int threads0 = rx_threads(0), two = (rx_threads(2), rx_threads(0)), cases = 0, n_paths = cpu_paths(paths, list);
    for (size_t p = 0; p < sizeof table7a / sizeof table7a[0]; p++) {
        RxBatch b = pattern_batch(&table7a[p], cfg.vocab_size, 200 + p);
        size_t n = (size_t)b.n_tokens * cfg.vocab_size;
        float *one = floats(n), *got = floats(n);
        rx_threads(1);
        const char *base = rx_cpu_path("auto");
        int ok = one && got && !qwen3_forward_ref(&m, &b, RX_BASELINE, one);
        expect(ok, "%s: 1 thread: %s", table7a[p].name, radix_error());
        rx_threads(2);
        for (int k = 0; k < n_paths; k++) {
            rx_cpu_path(paths[k]);
            for (int mode = RX_BASELINE; ok && mode <= RX_COMPACT; mode++) {
                char what[128];
                snprintf(what, sizeof what, "%s: %s, %s, %d threads vs baseline, %s, 1 thread", table7a[p].name,
                         rx_mode_name((RxMode)mode), paths[k], two, base);
                ok = !qwen3_forward_ref(&m, &b, (RxMode)mode, got);
                expect(ok, "%s: %s", what, radix_error());
                if (ok) cases += expect_identical(what, got, one, n);
            }
        }
        free(one); free(got);
        rx_batch_free(&b);
    }
    rx_threads(threads0);
    rx_cpu_path(path0);
    qwen3_free(&m);
    if (two < 2) note("built without OpenMP: only 1 thread to compare with");
    summary("%d patterns x 3 modes x paths {%s} with %d threads: logits bit-identical to the baseline with 1 "
            "thread", cases / (3 * n_paths), list, two);
}

/* ---- the forward fuzzed against its definition: a random model, a random batch, every mode, path and thread count */
/* Qwen3's forward as transformers writes it, in double, from the weights alone: each sequence on its own rows, no
 * trie, no tiles, nothing of radixmlp.cu but the random model's fp32 tensors. RoPE's inverse frequencies are
 * rounded to fp32, as transformers keeps them (a float32 buffer); everything else is double.
 *   logits [N, vocab] every token (NULL: none); embed [S, hidden] each sequence's last token after the final norm,
 *   L2-normalised (NULL: none). */
static const float *w32(const RxTensor *t) { return (const float *)t->data; }

static void rmsnorm_double(double *out, const double *x, const float *w, int dim, double eps) {
    double ss = 0;
    for (int i = 0; i < dim; i++) ss += x[i] * x[i];
    double inv = 1 / sqrt(ss / dim + eps);
    for (int i = 0; i < dim; i++) out[i] = w[i] * (x[i] * inv);
}

static void linear_double(double *y, const double *x, const float *w, int rows, int in, int out) {
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double acc = 0;
            for (int i = 0; i < in; i++) acc += x[(size_t)r * in + i] * w[(size_t)o * in + i];
            y[(size_t)r * out + o] = acc;
        }
}

/* In place on x [N, n_heads * head_dim]: each head q/k-normed, then rotated by its token's position. */
static void qk_norm_rope_double(double *x, const float *w, const int32_t *pos, int N, int n_heads, int hd,
                                const Qwen3Config *c) {
    for (int t = 0; t < N; t++)
        for (int h = 0; h < n_heads; h++) {
            double *v = x + ((size_t)t * n_heads + h) * hd;
            rmsnorm_double(v, v, w, hd, c->rms_norm_eps);
            for (int i = 0; i < hd / 2; i++) {
                double inv_freq = (float)(1.0 / pow(c->rope_theta, 2.0 * i / hd));
                double a = v[i], b = v[i + hd / 2], angle = pos[t] * inv_freq;
                v[i] = a * cos(angle) - b * sin(angle);
                v[i + hd / 2] = b * cos(angle) + a * sin(angle);
            }
        }
}

static void attention_seq_double(const double *q, const double *k, const double *v, double *out, const RxBatch *b,
                                 const Qwen3Config *c) {
    int nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    double *p = (double *)malloc(sizeof(double) * (size_t)(b->n_tokens + 1));
    for (int s = 0; s < b->n_seqs; s++)
        for (int g = b->cu_seqlens[s]; g < b->cu_seqlens[s + 1]; g++)
            for (int h = 0; h < nh; h++) {
                const double *qh = q + ((size_t)g * nh + h) * hd;
                int t0 = b->cu_seqlens[s], kvh = h / (nh / nkv);
                double mx = -INFINITY, z = 0;
                for (int t = t0; t <= g; t++) {
                    double dot = 0;
                    for (int i = 0; i < hd; i++) dot += qh[i] * k[((size_t)t * nkv + kvh) * hd + i];
                    p[t] = dot / sqrt((double)hd);
                    mx = fmax(mx, p[t]);
                }
                for (int t = t0; t <= g; t++) z += (p[t] = exp(p[t] - mx));
                for (int i = 0; i < hd; i++) {
                    double o = 0;
                    for (int t = t0; t <= g; t++) o += p[t] / z * v[((size_t)t * nkv + kvh) * hd + i];
                    out[((size_t)g * nh + h) * hd + i] = o;
                }
            }
    free(p);
}

static void forward_double(const Qwen3Model *m, const RxBatch *b, double *logits, double *embed) {
    const Qwen3Config *c = &m->cfg;
    int N = b->n_tokens, H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    int QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    double *h = (double *)malloc(sizeof(double) * ((size_t)N * H + 1));        /* [N, hidden] */
    double *xn = (double *)malloc(sizeof(double) * ((size_t)N * H + 1));       /* [N, hidden] */
    double *q = (double *)malloc(sizeof(double) * ((size_t)N * QD + 1));       /* [N, n_heads*head_dim] */
    double *att = (double *)malloc(sizeof(double) * ((size_t)N * QD + 1));
    double *k = (double *)malloc(sizeof(double) * ((size_t)N * KVD + 1));      /* [N, n_kv*head_dim] */
    double *v = (double *)malloc(sizeof(double) * ((size_t)N * KVD + 1));
    double *gate = (double *)malloc(sizeof(double) * ((size_t)N * I + 1));     /* [N, intermediate] */
    double *up = (double *)malloc(sizeof(double) * ((size_t)N * I + 1));
    for (int t = 0; t < N; t++)
        for (int i = 0; i < H; i++) h[(size_t)t * H + i] = w32(m->embed)[(size_t)b->input_ids[t] * H + i];
    for (int l = 0; l < c->n_layers; l++) {
        const Qwen3Layer *W = &m->layers[l];
        for (int t = 0; t < N; t++)
            rmsnorm_double(xn + (size_t)t * H, h + (size_t)t * H, w32(W->input_norm), H, c->rms_norm_eps);
        linear_double(q, xn, w32(W->q_proj), N, H, QD);
        linear_double(k, xn, w32(W->k_proj), N, H, KVD);
        linear_double(v, xn, w32(W->v_proj), N, H, KVD);
        qk_norm_rope_double(q, w32(W->q_norm), b->position_ids, N, c->n_heads, c->head_dim, c);
        qk_norm_rope_double(k, w32(W->k_norm), b->position_ids, N, c->n_kv_heads, c->head_dim, c);
        attention_seq_double(q, k, v, att, b, c);
        linear_double(xn, att, w32(W->o_proj), N, QD, H);
        for (size_t i = 0; i < (size_t)N * H; i++) h[i] += xn[i];
        for (int t = 0; t < N; t++)
            rmsnorm_double(xn + (size_t)t * H, h + (size_t)t * H, w32(W->post_norm), H, c->rms_norm_eps);
        linear_double(gate, xn, w32(W->gate_proj), N, H, I);
        linear_double(up, xn, w32(W->up_proj), N, H, I);
        for (size_t i = 0; i < (size_t)N * I; i++) gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i];
        linear_double(xn, gate, w32(W->down_proj), N, I, H);
        for (size_t i = 0; i < (size_t)N * H; i++) h[i] += xn[i];
    }
    for (int t = 0; t < N; t++)
        rmsnorm_double(xn + (size_t)t * H, h + (size_t)t * H, w32(m->final_norm), H, c->rms_norm_eps);
    if (logits) linear_double(logits, xn, w32(m->lm_head), N, H, V);
    for (int s = 0; embed && s < b->n_seqs; s++) {
        const double *x = xn + (size_t)(b->cu_seqlens[s + 1] - 1) * H;
        double ss = 0;
        for (int i = 0; i < H; i++) ss += x[i] * x[i];
        for (int i = 0; i < H; i++) embed[(size_t)s * H + i] = x[i] / fmax(sqrt(ss), 1e-12);
    }
    double *all[] = {h, xn, q, att, k, v, gate, up};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* max|got - ref| / max|ref|, got fp32 against ref in double; a NaN or Inf in got: infinity (never passes). */
static double rel_to_double(const float *got, const double *ref, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        d = fmax(d, fabs(got[i] - ref[i]));
        r = fmax(r, fabs(ref[i]));
    }
    return r > 0 ? d / r : d;
}

/* A case drawn from bytes (libFuzzer's, or the seeded driver's random ones; zeros past the end): a tiny Qwen3 config
 * (GQA ratio, head_dim off the 16-wide tiles, any vocabulary and width) and a batch biased toward what breaks tiling
 * and compaction: copies of earlier sequences, prefixes of them, single tokens, shared starts with fresh tails,
 * lengths off every tile, up to FWD_TOKENS in all. Styles: 0 and 3 any mix; 1 short sequences from an alphabet of
 * 1 to 3 tokens (accidental sharing everywhere); 2 only copies and prefixes of the first sequence. Styles 1 and 2
 * make more sequences than compact rows (S > N'), which no fixed shape had tested. */
enum { FWD_SEQS = 48, FWD_TOKENS = 320 };
typedef struct {
    Qwen3Config cfg;
    uint64_t seed;                      /* the random model's weights */
    int n_seqs, lens[FWD_SEQS];
    int32_t ids[FWD_TOKENS];            /* sequence by sequence */
    int path, threads;                  /* the fast path's CPU path (an index into cpu_paths) and thread count */
} FwdCase;

static void fwd_case_draw(FuzzIn *in, FwdCase *fc, int n_paths) {
    uint8_t d[8];                      /* read first: an initializer list's calls may run in any order */
    for (int i = 0; i < 8; i++) d[i] = (uint8_t)fuzz_byte(in);
    int n_kv = 1 + d[0] % 3, group = 1 + d[1] % 4, tie = d[2];
    Qwen3Config c = {
        .vocab_size = 2 + d[3] * 3,
        .hidden_size = 1 + d[4] % 96,
        .intermediate_size = 1 + d[5] % 160,
        .n_layers = 1 + d[6] % 2,
        .n_heads = n_kv * group,
        .n_kv_heads = n_kv,
        .head_dim = 2 + 2 * (d[7] % 24),
        .max_position_embeddings = FWD_TOKENS,
        .rope_theta = tie & 2 ? 1e4 : 1e6,
        .rms_norm_eps = 1e-6,
        .tie_word_embeddings = !(tie & 1),
    };
    memset(fc, 0, sizeof *fc);
    fc->cfg = c;
    fc->seed = (uint64_t)fuzz_byte(in);
    fc->path = fuzz_byte(in) % n_paths;
    fc->threads = 1 + fuzz_byte(in) % 2;
    int want = 1 + fuzz_byte(in) % FWD_SEQS, style = fuzz_byte(in) % 4, at = 0;
    int alpha = style == 1 ? 1 + fuzz_byte(in) % 3 : c.vocab_size;    /* style 1: short, from 1 to 3 tokens */
    int start[FWD_SEQS];
    for (int s = 0; s < want && at < FWD_TOKENS; s++) {
        int kind = fuzz_byte(in) % (style == 2 ? 3 : 8), j = s ? fuzz_byte(in) % s : 0, len = 0, copy = 0;
        int fresh = fuzz_byte(in), wide = fuzz_byte(in) % 8 == 0;        /* one in 8: up to 200 tokens */
        fresh = 1 + fresh % (style == 1 ? 8 : wide ? 200 : 24);
        if (s == 0 || kind >= 5) len = fresh;                            /* fresh */
        else if (kind <= 1) len = copy = fc->lens[j];                    /* a copy of sequence j */
        else if (kind == 2) len = copy = 1 + fresh % fc->lens[j];        /* a prefix of it */
        else if (kind == 3) len = 1;                                     /* one token */
        else {                                                           /* its start, then a fresh tail */
            copy = fresh % fc->lens[j];
            len = copy + fresh;
        }
        if (len > FWD_TOKENS - at) len = FWD_TOKENS - at;
        start[s] = at;
        for (int i = 0; i < len; i++)
            fc->ids[at + i] = i < copy ? fc->ids[start[j] + i] : fuzz_byte(in) % alpha;
        fc->lens[s] = len;
        fc->n_seqs = s + 1;
        at += len;
    }
}

typedef struct { int cases, forwards, tokens_max, more_seqs_than_rows; double worst, worst_embed; } FwdStats;

/* The oracle: the baseline on the definition path (Part I's definitions, one thread) within FWD_TOL of
 * forward_double, logits and embeddings; then every mode, full and last-only (logits and embeddings), on the widest
 * path at 1 thread and on the case's own path and thread count, bit for bit equal to the definition's baseline.
 * FWD_TOL, as max|diff| / max|logit|: an fp32 sum of K terms is off by at most K u (u = 2^-24) of its terms'
 * magnitudes, K <= 320 here (the widest is a long sequence's keys), so 1.9e-5 per sum at worst; about five sums
 * follow one another on a logit's path (q or k, scores, outputs, o_proj or the MLP, the head): 1e-4. Typical errors
 * are far below it (the driver prints its worst). */
#define FWD_TOL 1e-4
static void fwd_case_check(const FwdCase *fc, const char *const *paths, FwdStats *st) {
    const Qwen3Config *c = &fc->cfg;
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    const int32_t *seqs[FWD_SEQS];
    for (int s = 0, at = 0; s < fc->n_seqs; at += fc->lens[s++]) seqs[s] = fc->ids + at;
    Qwen3Model m;
    RxBatch b;
    if (qwen3_random(&m, c, fc->seed)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    if (rx_batch_make(&b, seqs, fc->lens, fc->n_seqs)) {
        expect(0, "rx_batch_make: %s", radix_error());
        qwen3_free(&m);
        return;
    }
    int N = b.n_tokens, S = b.n_seqs, V = c->vocab_size, H = c->hidden_size, threads0 = rx_threads(0), n_c = N;
    const char *path0 = rx_cpu_path(NULL);
    size_t nl = (size_t)N * V, sl = (size_t)S * V, se = (size_t)S * H;
    float *ref = floats(nl), *ref_last = floats(sl), *ref_emb = floats(se);
    float *got = floats(nl), *last = floats(sl), *emb = floats(se);
    double *dl = (double *)malloc(sizeof(double) * nl), *de = (double *)malloc(sizeof(double) * se);
    char what[160];
    snprintf(what, sizeof what, "seed %llu: %d layers, %d:%d heads x %d, hidden %d, inter %d, vocab %d; %d seqs, "
             "N = %d", (unsigned long long)fc->seed, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, H,
             c->intermediate_size, V, S, N);
    rx_threads(1);
    rx_cpu_path("definition");
    int ok = !qwen3_forward_ref(&m, &b, RX_BASELINE, ref) && !qwen3_forward_ref_last(&m, &b, RX_BASELINE, ref_last,
                                                                                       ref_emb);
    expect(ok, "%s: baseline, definition: %s", what, radix_error());
    if (ok) {
        forward_double(&m, &b, dl, de);
        double e = rel_to_double(ref, dl, nl), ee = rel_to_double(ref_emb, de, se);
        expect(e <= FWD_TOL && ee <= FWD_TOL, "%s: baseline vs the forward in double: logits %.3g, embeddings %.3g "
               "(max|diff| / max|ref|), tolerance %g", what, e, ee, FWD_TOL);
        st->worst = fmax(st->worst, e);
        st->worst_embed = fmax(st->worst_embed, ee);
        for (int s = 0; s < S; s++)
            memcpy(got + (size_t)s * V, ref + (size_t)(b.cu_seqlens[s + 1] - 1) * V, sizeof(float) * V);
        expect_identical("baseline: last-only logits vs the full logits' last rows", ref_last, got, sl);
    }
    for (int run = 0; ok && run < 2 && !test_failed; run++) {        /* the widest path at 1 thread, then the case's */
        rx_threads(run ? fc->threads : 1);
        rx_cpu_path(run ? paths[fc->path] : "auto");
        for (int k = 0; k < 3 && !test_failed; k++) {
            char mw[224];
            snprintf(mw, sizeof mw, "%s: %s, %s, %d thread(s)", what, rx_mode_name(modes[k]), rx_cpu_path(NULL),
                     rx_threads(0));
            ok = !qwen3_forward_ref(&m, &b, modes[k], got) && !qwen3_forward_ref_last(&m, &b, modes[k], last, emb);
            expect(ok, "%s: %s", mw, radix_error());
            if (!ok) break;
            expect_identical(mw, got, ref, nl);
            expect_identical(mw, last, ref_last, sl);
            expect_identical(mw, emb, ref_emb, se);
            st->forwards += 2;
        }
    }
    RadixIndex ix;
    if (!radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, S)) {
        n_c = ix.n_compact;
        radix_index_free(&ix);
    }
    st->cases++;
    st->more_seqs_than_rows += S > n_c;
    if (N > st->tokens_max) st->tokens_max = N;
    rx_threads(threads0);
    rx_cpu_path(path0);
    float *all[] = {ref, ref_last, ref_emb, got, last, emb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free(dl);
    free(de);
    rx_batch_free(&b);
    qwen3_free(&m);
}

/* The seeded driver of the forward's fuzzer: FWD_CASES cases from random bytes, each case's own path and thread
 * count cycled so that every CPU path meets 1 and 2 threads. The libFuzzer target (RADIXMLP_FUZZ=5) runs the same
 * fwd_case_check on its inputs. */
#define FWD_CASES 36
static void test_forward_fuzz_radix_compact_equal_baseline_equals_double(void) {
    const char *paths[RX_PATHS];
    char list[RX_LIST];
    int n_paths = cpu_paths(paths, list);
    FwdStats st = {0};
    uint64_t rng = 2026;
    for (int k = 0; k < FWD_CASES && !test_failed; k++) {
        uint8_t bytes[1024];
        FuzzIn in = random_bytes(bytes, sizeof bytes, &rng);
        FwdCase fc;
        fwd_case_draw(&in, &fc, n_paths);
        fc.path = k % n_paths;
        fc.threads = 1 + k / n_paths % 2;
        fwd_case_check(&fc, paths, &st);
    }
    summary("%d random models and batches (up to %d tokens; %d with more sequences than compact rows), %d forwards "
            "on paths {%s} x 1 and 2 threads: every mode, full and last-only, logits and embeddings, equal the "
            "definition's baseline bit for bit; that within %g of the forward in double (worst %.3g logits, %.3g "
            "embeddings)", st.cases, st.tokens_max, st.more_seqs_than_rows, st.forwards, list, FWD_TOL, st.worst,
            st.worst_embed);
}

/* Batches a C API caller could build by hand, each inconsistent in one field; both forwards must refuse each with its
 * one line before reading anything out of bounds (the arrays are exactly n_tokens long: AddressSanitizer watches).
 * The base batch: [1,2,3] and [1,2,4], cu_seqlens [0,3,6]. */
typedef struct {
    const char *what, *msg;
    int n_seqs, n_tokens;
    int32_t cu[4];
    int null_array;           /* 1: input_ids, 2: position_ids, 3: cu_seqlens is NULL */
} BadBatch;
static const BadBatch bad_batches[] = {
    {"n_seqs = -1", "n_seqs is -1", -1, 6, {0, 3, 6, 0}, 0},
    {"no sequences", "the batch is empty", 0, 0, {0, 0, 0, 0}, 0},
    {"cu_seqlens NULL", "cu_seqlens is NULL", 2, 6, {0, 3, 6, 0}, 3},
    {"input_ids NULL", "input_ids is NULL", 2, 6, {0, 3, 6, 0}, 1},
    {"position_ids NULL", "position_ids is NULL", 2, 6, {0, 3, 6, 0}, 2},
    {"cu_seqlens[0] = 1", "cu_seqlens[0] is 1; it must be 0", 2, 6, {1, 3, 6, 0}, 0},
    {"cu_seqlens decreasing", "cu_seqlens decreases at sequence 1 (7 -> 6)", 2, 6, {0, 7, 6, 0}, 0},
    {"cu_seqlens ends short", "cu_seqlens[2] is 5 but n_tokens is 6", 2, 6, {0, 3, 5, 0}, 0},
    {"cu_seqlens ends beyond", "cu_seqlens[2] is 9 but n_tokens is 6", 2, 6, {0, 3, 9, 0}, 0},
    {"an empty sequence", "sequence 1 is empty", 3, 6, {0, 3, 3, 6}, 0},
};
#define N_BAD_BATCHES (sizeof bad_batches / sizeof bad_batches[0])

/* Runs every bad batch through forward (the C reference or the GPU's) and expects its message. */
static void expect_bad_batches_refused(const char *which, int (*forward)(const RxBatch *b, void *ctx), void *ctx) {
    int32_t *ids = (int32_t *)malloc(6 * sizeof(int32_t)), *pos = (int32_t *)malloc(6 * sizeof(int32_t));
    int32_t *cu = (int32_t *)malloc(4 * sizeof(int32_t));
    static const int32_t base_ids[6] = {1, 2, 3, 1, 2, 4}, base_pos[6] = {0, 1, 2, 0, 1, 2};
    memcpy(ids, base_ids, sizeof base_ids);
    memcpy(pos, base_pos, sizeof base_pos);
    for (size_t i = 0; i < N_BAD_BATCHES; i++) {
        const BadBatch *c = &bad_batches[i];
        memcpy(cu, c->cu, sizeof c->cu);
        RxBatch b = {c->n_seqs, c->n_tokens, c->null_array == 1 ? NULL : ids, c->null_array == 2 ? NULL : pos,
                     c->null_array == 3 ? NULL : cu};
        int rc = forward(&b, ctx);
        expect(rc != 0 && strstr(radix_error(), c->msg), "%s, %s: rc %d, message '%s' lacks '%s'", which, c->what, rc,
               radix_error(), c->msg);
        note_rejected(rc, 24, c->what);
    }
    free(ids); free(pos); free(cu);
}

static int forward_ref_logits(const RxBatch *b, void *model) {
    float logits[6 * 512];                             /* [N = 6, vocab 512] for the consistent base batch */
    return qwen3_forward_ref((const Qwen3Model *)model, b, RX_COMPACT, logits);
}

static void test_forward_rejects_bad_batches(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 3)) { expect(0, "%s", radix_error()); return; }
    int lens[] = {3};
    int32_t ids[] = {1, 512, 2}, pos[] = {0, 1, 128};
    float *out = (float *)malloc(3 * 512 * sizeof(float));
    RxBatch b = batch_of(1, lens, ids, NULL);
    int rc = qwen3_forward_ref(&m, &b, RX_BASELINE, out);
    expect(rc != 0 && strstr(radix_error(), "outside the vocabulary"), "token id 512 with vocab 512: '%s'",
           radix_error());
    note_rejected(rc, 16, "token id = vocab");
    b.input_ids[1] = 5;
    memcpy(b.position_ids, pos, sizeof pos);
    rc = qwen3_forward_ref(&m, &b, RX_RADIX, out);
    expect(rc != 0 && strstr(radix_error(), "max_position_embeddings"), "position 128 with max 128: '%s'",
           radix_error());
    note_rejected(rc, 16, "position = max");
    free(out);
    rx_batch_free(&b);
    expect(qwen3_forward_ref(&m, NULL, RX_BASELINE, NULL) != 0 && strstr(radix_error(), "the batch is NULL"),
           "a NULL batch: '%s'", radix_error());
    expect_bad_batches_refused("C reference", forward_ref_logits, &m);
    qwen3_free(&m);
}

static void test_auto_mode_compacts_only_below_threshold(void) {
    /* gamma = N'/N strictly below the threshold -> compact; at or above -> baseline; an empty batch -> baseline */
    struct { int nc, n; RxMode want; } cases[] = {
        {9, 36, RX_COMPACT}, {94, 100, RX_COMPACT}, {95, 100, RX_BASELINE}, {36, 36, RX_BASELINE}, {0, 0, RX_BASELINE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RxMode got = rx_auto_mode(cases[i].nc, cases[i].n, RX_AUTO_THRESHOLD);
        expect(got == cases[i].want, "N'=%d, N=%d: auto chose %s, expected %s", cases[i].nc, cases[i].n,
               rx_mode_name(got), rx_mode_name(cases[i].want));
    }
    summary("threshold %.2f: N'/N = 0.94 -> compact, 0.95 -> baseline", RX_AUTO_THRESHOLD);
}

static void test_tokens_file(void) {
    char dir[] = "/tmp/radixmlp-tokens-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    struct { const char *text, *msg; } cases[] = {
        {"1 2 3\n4 5\n", NULL},
        {"7\r\n8 9\r\n", NULL},
        {"1 2\n\n3\n", ":2: empty line"},
        {"1 -2\n", ":1: '-' is not part of a token id"},
        {"1 x2\n", ":1: 'x' is not part of a token id"},
        {"1 2a\n", ":1: 'a' is not part of a token id"},
        {"99999999999\n", ":1: token id too large"},
        {"", "no sequences"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char p[512];
        RxBatch b;
        write_file(dir, "t.txt", cases[i].text, strlen(cases[i].text));
        snprintf(p, sizeof p, "%s/t.txt", dir);
        int rc = rx_batch_read(&b, p);
        if (!cases[i].msg) {
            expect(rc == 0 && b.n_seqs == 2 && b.cu_seqlens[2] == b.n_tokens && b.position_ids[b.n_tokens - 1] ==
                   b.n_tokens - 1 - b.cu_seqlens[1], "case %zu: %s", i, radix_error());
            if (!rc) rx_batch_free(&b);
        } else {
            expect(rc != 0 && strstr(radix_error(), cases[i].msg), "case %zu: rc %d, '%s' lacks '%s'", i, rc,
                   radix_error(), cases[i].msg);
            note_rejected(rc, 18, cases[i].msg);
        }
    }
    remove_dir(dir);
}

/* ------------------------------------------------------------------------------------------------------ the GPU */
/* Uses the framework above: expect, note, skip_test, rng_int, rand_floats, max_abs_diff, mean_abs_diff, max_abs,
 * batch_of, and from the reference tests table7a, pattern_batch and tiny_config.
 *
 * Tolerances. bf16 keeps 8 significant bits (7 stored and the implicit leading one), so rounding to nearest even
 * moves a value by at most half an ulp: a relative 2^-8 ~ 0.39% (about half that on average). The kernel tests
 * round their random inputs to bf16 first (round_to_bf16, exactly as the upload does) and hand the oracle those same
 * values, so what is left is the kernel's own roundings, each at most 2^-8 of the value it rounds, plus fp32
 * differences in the order of summation (~1e-7 relative, negligible). Each kernel's tolerance is a multiple of
 * BF16_U = 2^-8 times max|ref|, counting that kernel's roundings. */
#define BF16_U (1.0 / 256.0)

/* The whole forward in bf16 against the fp32 reference: rx_bf16_tolerance(cfg) of max|ref|, a budget that counts the
 * bf16 roundings on a logit's path (19 per layer, 3 in the head; the formula is in radixmlp.cu): 0.022 for the
 * 2-layer test models. */

static void round_to_bf16(float *x, size_t n) {   /* in place, to nearest even, like the upload (inputs are finite) */
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&x[i], &u, sizeof u);
    }
}


/* rc is the GPU call's result; passes when it succeeded and max|got - ref| <= tol_rel * max|ref|, both finite. */
static void expect_close(const char *what, int rc, const float *got, const float *ref, size_t n, double tol_rel) {
    expect(rc == 0, "%s: the GPU call failed: %s", what, radix_error());
    if (rc != 0) return;
    double d, tol;
    char why[WHY];
    int ok = close_verdict(got, ref, n, tol_rel, &d, &tol, why);
    note("%-58s max|diff| %.3g  tol %.3g", what, d, tol);
    expect(ok, "%s: %s", what, why);
}

/* The device buffers of one kernel call (radixmlp.h's gpu_upload*), freed together. After a failed upload the next
 * ones do nothing, so a test uploads everything, then runs `rc = d.failed || gpu_kernel(...)` and dev_finish. */
#define DEV_MAX 8
typedef struct { void *buf[DEV_MAX]; int n, failed; } DevBufs;
static void *dev_keep(DevBufs *d, int rc, void *p) {
    expect(d->n < DEV_MAX, "a kernel test needs more than %d device buffers", DEV_MAX);
    if (rc || d->n == DEV_MAX) {
        d->failed = 1;
        gpu_free(p);
        return NULL;
    }
    return d->buf[d->n++] = p;
}
static void *dev_raw(DevBufs *d, const void *host, size_t bytes) {   /* int32 or fp32 bytes; host NULL: uninitialised */
    void *p = NULL;
    int rc = d->failed || gpu_upload(&p, host, bytes);
    return dev_keep(d, rc, p);
}
/* [n] bf16, as round_to_bf16. host NULL: an output, filled with NaN, so an element the kernel never writes fails the
 * comparison (and compute-sanitizer's initcheck has nothing to say about a library kernel's writes it cannot see). */
static void *dev_bf16(DevBufs *d, const float *host, size_t n) {
    float *nan_fill = host ? NULL : floats(n);
    for (size_t i = 0; nan_fill && i < n; i++) nan_fill[i] = NAN;
    void *p = NULL;
    int rc = d->failed || gpu_upload_bf16(&p, host ? host : nan_fill, n);
    free(nan_fill);
    return dev_keep(d, rc, p);
}
/* rc: the kernel's result. Copies the bf16 output out [n] back into got (unless got is NULL), frees every buffer of d;
 * 0 when all of it succeeded. */
static int dev_finish(DevBufs *d, int rc, float *got, const void *out, size_t n) {
    if (rc == 0 && got) rc = gpu_download_bf16(got, out, n);
    for (int i = 0; i < d->n; i++) gpu_free(d->buf[i]);
    return rc || d->failed;
}

/* Each kernel test below is a case function, called on fixed edge shapes by its own test and on random shapes by
 * gpu/kernels_and_forward_match_reference_on_random_shapes. rng: the caller's generator, advanced. */
static void rows_by_index_case(int ri, int ro, int dim, int elem, uint64_t *rng) {
    float *in = rand_floats((size_t)ri * dim, -4.0f, 4.0f, rng), *ref = floats((size_t)ro * dim);
    float *got = floats((size_t)ro * dim);
    int32_t *idx = (int32_t *)malloc((size_t)ro * sizeof(int32_t));
    if (elem == 2) round_to_bf16(in, (size_t)ri * dim);
    for (int r = 0; r < ro; r++) {
        idx[r] = rng_int(rng, ri);
        memcpy(ref + (size_t)r * dim, in + (size_t)idx[r] * dim, (size_t)dim * sizeof(float));
    }
    char what[96];
    snprintf(what, sizeof what, "rows_by_index %s [%d, %d] -> [%d, %d] (a copy: exact)", elem == 2 ? "bf16" : "fp32",
             ri, dim, ro, dim);
    DevBufs d = {0};
    size_t n_in = (size_t)ri * dim, n_out = (size_t)ro * dim;
    void *d_in = elem == 2 ? dev_bf16(&d, in, n_in) : dev_raw(&d, in, n_in * sizeof(float));
    void *d_out = dev_raw(&d, NULL, n_out * elem);
    const int32_t *d_idx = (const int32_t *)dev_raw(&d, idx, (size_t)ro * sizeof(int32_t));
    int rc = d.failed || gpu_rows_by_index(d_out, d_in, d_idx, ro, (size_t)dim * elem) ||
             (elem == 4 && gpu_copy(got, d_out, n_out * sizeof(float)));
    expect_close(what, dev_finish(&d, rc, elem == 2 ? got : NULL, d_out, n_out), got, ref, n_out, 0.0);
    free(in); free(ref); free(got); free(idx);
}

static void test_gpu_rows_by_index(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    /* {rows_in, rows_out, dim}: a single row; 257 rows out of 3 (repeated indices, as a scatter has); dim 1001 makes
     * rows of 2002 and 4004 bytes, not multiples of 16, which take the 2-byte path instead of the 16-byte one */
    static const int shapes[][3] = {{1, 1, 8}, {3, 257, 1000}, {257, 3, 72}, {5, 9, 1001}};
    uint64_t rng = 11;
    for (int c = 0; c < 4; c++)
        for (int elem = 2; elem <= 4; elem += 2)
            rows_by_index_case(shapes[c][0], shapes[c][1], shapes[c][2], elem, &rng);
}

static void rmsnorm_case(int rows, int dim, uint64_t *rng) {
    size_t n = (size_t)rows * dim;
    float *x = rand_floats(n, -2.0f, 2.0f, rng), *w = rand_floats((size_t)dim, 0.5f, 1.5f, rng);
    float *ref = floats(n), *got = floats(n);
    round_to_bf16(x, n);
    round_to_bf16(w, (size_t)dim);
    rx_rmsnorm_ref(ref, x, w, rows, dim, 1e-6f);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm [%d, %d]", rows, dim);
    /* two roundings, Hugging Face's order: x * rsqrt(...) to bf16, then w * that to bf16 */
    DevBufs d = {0};
    void *d_x = dev_bf16(&d, x, n), *d_w = dev_bf16(&d, w, (size_t)dim), *d_out = dev_bf16(&d, NULL, n);
    int rc = d.failed || gpu_rmsnorm(d_out, d_x, d_w, rows, dim, 1e-6f);
    expect_close(what, dev_finish(&d, rc, got, d_out, n), got, ref, n, 3 * BF16_U);
    free(x); free(w); free(ref); free(got);
}

static void test_gpu_rmsnorm(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int shapes[][2] = {{1, 72}, {3, 1000}, {257, 64}, {2, 4096}, {5, 1001}};   /* {rows, dim} */
    uint64_t rng = 12;
    for (int c = 0; c < 5; c++) rmsnorm_case(shapes[c][0], shapes[c][1], &rng);
}

static void qk_norm_rope_case(int rows, int heads, int hd, uint64_t *rng) {
    size_t n = (size_t)rows * heads * hd;
    float *x = rand_floats(n, -2.0f, 2.0f, rng), *w = rand_floats((size_t)hd, 0.5f, 1.5f, rng);
    float *ref = floats(n), *got = floats(n);
    int32_t *pos = (int32_t *)malloc((size_t)rows * sizeof(int32_t));
    round_to_bf16(x, n);
    round_to_bf16(w, (size_t)hd);
    for (int r = 0; r < rows; r++) pos[r] = rng_int(rng, 4096);
    memcpy(ref, x, n * sizeof(float));
    rx_qk_norm_rope_ref(ref, w, pos, rows, heads, hd, 1e-6f, 1e6);
    char what[96];
    snprintf(what, sizeof what, "qk_norm_rope [%d, %d heads x %d]", rows, heads, hd);
    /* the norm's two roundings, then the rotation mixes two such values, then one more rounding:
     * (2 sqrt 2 + 1) 2^-8 of the pair's length; the fp32 angle is computed as in the reference */
    float inv_freq[128];                             /* the reference's expression, as GpuModel's table holds it */
    for (int i = 0; i < hd / 2; i++) inv_freq[i] = 1.0f / powf((float)1e6, (float)(2 * i) / (float)hd);
    DevBufs d = {0};
    void *d_x = dev_bf16(&d, x, n), *d_w = dev_bf16(&d, w, (size_t)hd);
    const int32_t *d_pos = (const int32_t *)dev_raw(&d, pos, (size_t)rows * sizeof(int32_t));
    const float *d_inv_freq = (const float *)dev_raw(&d, inv_freq, (size_t)hd / 2 * sizeof(float));
    int rc = d.failed || gpu_qk_norm_rope(d_x, d_w, d_pos, d_inv_freq, rows, heads, hd, 1e-6f);
    expect_close(what, dev_finish(&d, rc, got, d_x, n), got, ref, n, 5 * BF16_U);
    free(x); free(w); free(ref); free(got); free(pos);
}

static void test_gpu_qk_norm_rope(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    /* {rows, n_heads, head_dim}; head_dim 72 has 36 rotate-half pairs: some lanes own two, others one */
    static const int shapes[][3] = {{1, 1, 32}, {3, 4, 72}, {257, 2, 128}, {2, 3, 256}};
    uint64_t rng = 13;
    for (int c = 0; c < 4; c++) qk_norm_rope_case(shapes[c][0], shapes[c][1], shapes[c][2], &rng);
}

static void test_gpu_silu_mul(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const size_t sizes[] = {1, 1000, 257 * 72 + 3};
    uint64_t rng = 14;
    for (int c = 0; c < 3; c++) {
        size_t n = sizes[c];
        float *gate = rand_floats(n, -6.0f, 6.0f, &rng), *up = rand_floats(n, -2.0f, 2.0f, &rng);
        float *ref = floats(n), *got = floats(n);
        round_to_bf16(gate, n);
        round_to_bf16(up, n);
        rx_silu_mul_ref(ref, gate, up, n);
        char what[96];
        snprintf(what, sizeof what, "silu_mul [%zu]", n);
        DevBufs d = {0};
        void *d_gate = dev_bf16(&d, gate, n), *d_up = dev_bf16(&d, up, n), *d_out = dev_bf16(&d, NULL, n);
        int rc = d.failed || gpu_silu_mul(d_out, d_gate, d_up, n);
        expect_close(what, dev_finish(&d, rc, got, d_out, n), got, ref, n, 2 * BF16_U);   /* one rounding */
        free(gate); free(up); free(ref); free(got);
    }
}

static void gemm_case(GpuModel *g, int rows, int in, int out, uint64_t *rng) {
    float s = 1.0f / sqrtf((float)in);
    float *x = rand_floats((size_t)rows * in, -1.0f, 1.0f, rng), *w = rand_floats((size_t)out * in, -s, s, rng);
    float *ref = floats((size_t)rows * out), *got = floats((size_t)rows * out);
    round_to_bf16(x, (size_t)rows * in);
    round_to_bf16(w, (size_t)out * in);
    rx_matmul_ref(ref, x, w, rows, in, out);
    char what[96];
    snprintf(what, sizeof what, "gemm [%d, %d] @ [%d, %d]^T", rows, in, out, in);
    /* one rounding of y; fp32 sums in another order differ by ~in * 2^-24 relative, far below it */
    DevBufs d = {0};
    void *d_x = dev_bf16(&d, x, (size_t)rows * in), *d_w = dev_bf16(&d, w, (size_t)out * in);
    void *d_y = dev_bf16(&d, NULL, (size_t)rows * out);
    int rc = d.failed || gpu_gemm(g, d_y, d_x, d_w, rows, in, out);
    expect_close(what, dev_finish(&d, rc, got, d_y, (size_t)rows * out), got, ref, (size_t)rows * out, 2 * BF16_U);
    free(x); free(w); free(ref); free(got);
}

static void test_gpu_gemm(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int shapes[][3] = {{1, 64, 64}, {3, 1000, 72}, {257, 72, 1000}, {5, 1024, 3}};   /* rows, in, out */
    uint64_t rng = 15;
    Qwen3Config cfg = tiny_config();
    GpuModel *g = NULL;                                /* its cuBLAS handle runs the GEMM (see gpu_gemm) */
    if (gpu_model_random(&g, &cfg, 15)) { expect(0, "gpu_model_random: %s", radix_error()); return; }
    for (int c = 0; c < 4; c++) gemm_case(g, shapes[c][0], shapes[c][1], shapes[c][2], &rng);
    gpu_model_free(g);
}

/* gpu_attention (the naive kernel) on host arrays, as rx_attention_ref takes them: q, out [n_q, nh*hd]; k, v
 * [n_kv_rows, nkv*hd]; q_orig [n_q] or NULL; seq_start and kv_row (or NULL) [n_orig]. */
static int attention_on_gpu(const float *q, const float *k, const float *v, float *out, int n_q, const int32_t *q_orig,
                            const int32_t *seq_start, const int32_t *kv_row, int n_orig, int n_kv_rows, int nh, int nkv,
                            int hd) {
    size_t nq = (size_t)n_q * nh * hd, nkv_n = (size_t)n_kv_rows * nkv * hd, ib = sizeof(int32_t);
    DevBufs d = {0};
    void *d_q = dev_bf16(&d, q, nq), *d_k = dev_bf16(&d, k, nkv_n), *d_v = dev_bf16(&d, v, nkv_n);
    void *d_out = dev_bf16(&d, NULL, nq);
    const int32_t *d_seq_start = (const int32_t *)dev_raw(&d, seq_start, n_orig * ib);
    const int32_t *d_q_orig = q_orig ? (const int32_t *)dev_raw(&d, q_orig, n_q * ib) : NULL;
    const int32_t *d_kv_row = kv_row ? (const int32_t *)dev_raw(&d, kv_row, n_orig * ib) : NULL;
    int rc = d.failed || gpu_attention(d_out, d_q, d_k, d_v, (int64_t)nkv * hd, n_q, d_q_orig, d_seq_start, d_kv_row,
                                       nh, nkv, hd);
    return dev_finish(&d, rc, out, d_out, nq);
}

/* Attention in its three index modes on batch b: baseline, radix (compact rows scattered to the N original rows) and
 * compact (the N' rows, q_orig = I_gather, kv_row = I_scatter), and compact row j equal to radix row I_gather[j]. */
static void attention_case(const RxBatch *b, int nh, int nkv, int hd, uint64_t *rngp) {
    RadixIndex ix;
    if (radix_index_build(&ix, b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs)) {
        expect(0, "radix_index_build: %s", radix_error());
        return;
    }
    int N = b->n_tokens, Nc = ix.n_compact;
    int32_t *seq_start = (int32_t *)malloc((size_t)N * sizeof(int32_t));
    for (int s = 0; s < b->n_seqs; s++)
        for (int t = b->cu_seqlens[s]; t < b->cu_seqlens[s + 1]; t++) seq_start[t] = b->cu_seqlens[s];
    note("batch: N = %d, N' = %d", N, Nc);
    uint64_t rng = *rngp;
    {
        int qd = nh * hd, kvd = nkv * hd;
        size_t nq = (size_t)N * qd, nkv_n = (size_t)N * kvd, nq_c = (size_t)Nc * qd, nkv_c = (size_t)Nc * kvd;
        char what[96];
        /* baseline: N independent rows, no indices. out is a convex combination of rows of v, rounded once. */
        float *q = rand_floats(nq, -2, 2, &rng), *k = rand_floats(nkv_n, -2, 2, &rng);
        float *v = rand_floats(nkv_n, -2, 2, &rng);
        float *ref_n = floats(nq), *got_n = floats(nq), *ref_c = floats(nq_c), *got_c = floats(nq_c);
        round_to_bf16(q, nq);
        round_to_bf16(k, nkv_n);
        round_to_bf16(v, nkv_n);
        expect(rx_attention_ref(q, k, v, ref_n, N, NULL, seq_start, NULL, nh, nkv, hd) == 0, "%s", radix_error());
        snprintf(what, sizeof what, "attention baseline (%d heads, %d kv, dim %d)", nh, nkv, hd);
        int rc = attention_on_gpu(q, k, v, got_n, N, NULL, seq_start, NULL, N, N, nh, nkv, hd);
        expect_close(what, rc, got_n, ref_n, nq, 2 * BF16_U);
        /* radix: compact rows scattered to the N original rows (Algorithm 1, line 20), then the same kernel */
        float *qc = rand_floats(nq_c, -2, 2, &rng), *kc = rand_floats(nkv_c, -2, 2, &rng);
        float *vc = rand_floats(nkv_c, -2, 2, &rng);
        round_to_bf16(qc, nq_c);
        round_to_bf16(kc, nkv_c);
        round_to_bf16(vc, nkv_c);
        for (int t = 0; t < N; t++) {
            memcpy(q + (size_t)t * qd, qc + (size_t)ix.scatter[t] * qd, (size_t)qd * sizeof(float));
            memcpy(k + (size_t)t * kvd, kc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
            memcpy(v + (size_t)t * kvd, vc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
        }
        expect(rx_attention_ref(q, k, v, ref_n, N, NULL, seq_start, NULL, nh, nkv, hd) == 0, "%s", radix_error());
        rc = attention_on_gpu(q, k, v, got_n, N, NULL, seq_start, NULL, N, N, nh, nkv, hd);
        expect_close("attention radix (scattered rows)", rc, got_n, ref_n, nq, 2 * BF16_U);
        /* compact: the N' rows themselves, q_orig = I_gather, kv_row = I_scatter */
        expect(rx_attention_ref(qc, kc, vc, ref_c, Nc, ix.gather, seq_start, ix.scatter, nh, nkv, hd) == 0, "%s",
               radix_error());
        int rc_c = attention_on_gpu(qc, kc, vc, got_c, Nc, ix.gather, seq_start, ix.scatter, N, Nc, nh, nkv, hd);
        expect_close("attention compact (q_orig = I_gather, kv_row = I_scatter)", rc_c, got_c, ref_c, nq_c,
                     2 * BF16_U);
        /* compact is the radix sandwich without the copies: its row j is row I_gather[j] of radix, bit for bit */
        for (int j = 0; j < Nc; j++)     /* ref_c, no longer needed: radix's rows I_gather, [N', n_heads*head_dim] */
            memcpy(ref_c + (size_t)j * qd, got_n + (size_t)ix.gather[j] * qd, (size_t)qd * sizeof(float));
        if (rc == 0 && rc_c == 0 &&
            expect_identical("attention compact row j vs radix row I_gather[j]", got_c, ref_c, nq_c))
            note("attention compact row j vs radix row I_gather[j]: bit-identical");
        free(q); free(k); free(v); free(qc); free(kc); free(vc);
        free(ref_n); free(got_n); free(ref_c); free(got_c);
    }
    *rngp = rng;
    free(seq_start);
    radix_index_free(&ix);
}

/* A shared-prefix batch: sequences 0-2 share a 5-token prefix (sequence 2 is the prefix itself), sequence 3 shares
 * nothing. */
static void test_gpu_attention(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int heads[][3] = {{4, 2, 32}, {2, 2, 72}, {8, 1, 128}};   /* n_heads, n_kv, head_dim: GQA MHA MQA */
    int lens[4] = {9, 7, 5, 4};
    int32_t ids[25] = {5, 6, 7, 8, 9, 1, 2, 3, 4,   5, 6, 7, 8, 9, 3, 3,   5, 6, 7, 8, 9,   6, 6, 7, 8};
    RxBatch b = batch_of(4, lens, ids, NULL);
    uint64_t rng = 16;
    for (int c = 0; c < 3; c++) attention_case(&b, heads[c][0], heads[c][1], heads[c][2], &rng);
    rx_batch_free(&b);
}

/* gpu_forward on the random model of cfg and seed, in every mode, against the C reference's logits, within the bf16
 * budget. gpu_model_random and qwen3_random on one seed are one model (bf16 vs fp32). */
static void forward_case(const Qwen3Config *cfg, uint64_t seed, const RxBatch *b, const char *label) {
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    Qwen3Model m;
    GpuModel *g = NULL;
    if (qwen3_random(&m, cfg, seed)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    if (gpu_model_random(&g, cfg, seed)) {
        expect(0, "gpu_model_random: %s", radix_error());
        qwen3_free(&m);
        return;
    }
    size_t n = (size_t)b->n_tokens * cfg->vocab_size;
    float *ref = floats(n), *got = floats(n);
    int rc_ref = qwen3_forward_ref(&m, b, RX_BASELINE, ref);
    expect(rc_ref == 0, "qwen3_forward_ref: %s", radix_error());
    for (int k = 0; rc_ref == 0 && k < 3; k++) {
        char what[256];
        snprintf(what, sizeof what, "forward %s, %s, vs the C reference (bf16 budget)", rx_mode_name(modes[k]), label);
        expect_close(what, gpu_forward(g, b, modes[k], RX_AUTO_THRESHOLD, 0, got, NULL), got, ref, n,
                     rx_bf16_tolerance(cfg));
    }
    free(ref); free(got);
    gpu_model_free(g);
    qwen3_free(&m);
}

/* The whole forward on a tiny random model (head_dim != hidden/heads, GQA), tied and untied, against the C
 * reference, in every mode. */
static void test_gpu_forward_matches_reference(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    for (int tied = 0; tied <= 1; tied++) {
        Qwen3Config cfg = tiny_config();
        cfg.tie_word_embeddings = tied;
        RxBatch b = pattern_batch(&table7a[5], cfg.vocab_size, 21);   /* complex_sharing */
        forward_case(&cfg, 7 + (uint64_t)tied, &b, tied ? "tied" : "untied");
        rx_batch_free(&b);
    }
}

/* 1 to max_seqs sequences of 1 to max_len tokens in [0, vocab), each sharing a random prefix of the one before. */
static RxBatch random_shared_batch(uint64_t *rng, int max_seqs, int max_len, int vocab) {
    int n_seqs = 1 + rng_int(rng, max_seqs), lens[8], at = 0;
    int32_t ids[8 * 32];
    for (int s = 0; s < n_seqs; s++) {
        lens[s] = 1 + rng_int(rng, max_len);
        int share = s ? rng_int(rng, (lens[s] < lens[s - 1] ? lens[s] : lens[s - 1]) + 1) : 0;
        for (int i = 0; i < lens[s]; i++) ids[at + i] = i < share ? ids[at - lens[s - 1] + i] : rng_int(rng, vocab);
        at += lens[s];
    }
    return batch_of(n_seqs, lens, ids, NULL);
}

/* The case functions above on random shapes: every kernel, then the whole forward on a random Qwen3 config (GQA or
 * not, any even head_dim, tied or not, 1 or 2 layers; hidden >= 8, below which bf16 rounding alone can exceed the
 * forward's budget) and a random shared-prefix batch. The same tolerances as the fixed shapes. */
static void test_gpu_random_shapes(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    uint64_t rng = 2026;
    Qwen3Config tiny = tiny_config();
    GpuModel *g = NULL;                                /* its cuBLAS handle runs gemm_case */
    if (gpu_model_random(&g, &tiny, 3)) { expect(0, "gpu_model_random: %s", radix_error()); return; }
    for (int it = 0; it < 4; it++) {
        rows_by_index_case(1 + rng_int(&rng, 300), 1 + rng_int(&rng, 300), 1 + rng_int(&rng, 1100),
                           rng_int(&rng, 2) ? 4 : 2, &rng);
        rmsnorm_case(1 + rng_int(&rng, 40), 1 + rng_int(&rng, 5000), &rng);
        qk_norm_rope_case(1 + rng_int(&rng, 30), 1 + rng_int(&rng, 6), 2 * (1 + rng_int(&rng, 128)), &rng);
        gemm_case(g, 1 + rng_int(&rng, 70), 1 + rng_int(&rng, 600), 1 + rng_int(&rng, 300), &rng);
        RxBatch b = random_shared_batch(&rng, 5, 24, 9);
        int nkv = 1 + rng_int(&rng, 4);
        attention_case(&b, nkv * (1 + rng_int(&rng, 4)), nkv, 2 * (1 + rng_int(&rng, 128)), &rng);
        rx_batch_free(&b);
        Qwen3Config c = {.vocab_size = 20 + rng_int(&rng, 681), .hidden_size = 8 + rng_int(&rng, 113),
                         .intermediate_size = 4 + rng_int(&rng, 197), .n_layers = 1 + rng_int(&rng, 2),
                         .n_kv_heads = 1 + rng_int(&rng, 3), .head_dim = 2 * (1 + rng_int(&rng, 48)),
                         .max_position_embeddings = 64, .rms_norm_eps = 1e-6};
        c.n_heads = c.n_kv_heads * (1 + rng_int(&rng, 3));
        c.rope_theta = rng_int(&rng, 2) ? 1e6 : 1e4;
        c.tie_word_embeddings = rng_int(&rng, 2);
        RxBatch fb = random_shared_batch(&rng, 6, 30, c.vocab_size);
        char label[160];
        snprintf(label, sizeof label, "vocab %d hidden %d inter %d layers %d heads %d/%d dim %d tied %d, N %d",
                 c.vocab_size, c.hidden_size, c.intermediate_size, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
                 c.tie_word_embeddings, fb.n_tokens);
        forward_case(&c, rng_next(&rng), &fb, label);
        rx_batch_free(&fb);
    }
    gpu_model_free(g);
}

/* The config variants on the GPU (the upload follows the loader: a tied config's own stored head, head_dim 128 from
 * the default, 32 kv heads) against the C reference, whose logits match transformers' (reference group). */
static void test_gpu_forward_on_config_variants(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    if (!have_fixtures()) return;
    static const char *names[3] = {"tiny-own-head", "tiny-default-head-dim", "tiny-default-kv-heads"};
    char p[512];
    RxBatch b;
    snprintf(p, sizeof p, "%s/batches/mixed.txt", fixtures());
    if (rx_batch_read(&b, p)) { expect(0, "%s", radix_error()); return; }
    for (int i = 0; i < 3; i++) {
        Qwen3Model m;
        GpuModel *g = NULL;
        snprintf(p, sizeof p, "%s/%s", fixtures(), names[i]);
        if (qwen3_load(&m, p)) { expect(0, "%s: %s", names[i], radix_error()); continue; }
        size_t n = (size_t)b.n_tokens * m.cfg.vocab_size;
        float *ref = floats(n), *got = floats(n);
        int rc = qwen3_forward_ref(&m, &b, RX_BASELINE, ref);
        expect(rc == 0, "%s: %s", names[i], radix_error());
        if (rc == 0 && gpu_model_upload(&g, &m) == 0) {
            char what[96];
            snprintf(what, sizeof what, "%s x mixed, compact, vs the C reference", names[i]);
            expect_close(what, gpu_forward(g, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, got, NULL), got, ref, n,
                         rx_bf16_tolerance(&m.cfg));
        } else if (rc == 0) expect(0, "%s: gpu_model_upload: %s", names[i], radix_error());
        gpu_model_free(g);
        free(ref); free(got);
        qwen3_free(&m);
    }
    /* an untied embedding checkpoint uploads without a head: gpu_embed works, gpu_forward refuses */
    char *d = untied_embedding_copy();
    Qwen3Model u;
    GpuModel *g = NULL;
    if (qwen3_load(&u, d) == 0 && gpu_model_upload(&g, &u) == 0) {
        size_t n = (size_t)b.n_seqs * u.cfg.hidden_size;
        float *ref = floats(n), *got = floats(n);
        int rc = qwen3_forward_ref_last(&u, &b, RX_BASELINE, NULL, ref);
        expect(rc == 0, "%s", radix_error());
        if (rc == 0)
            expect_close("untied tiny-embedding x mixed: gpu_embed vs the C reference",
                         gpu_embed(g, &b, RX_COMPACT, RX_AUTO_THRESHOLD, got, NULL), got, ref, n,
                         rx_bf16_tolerance(&u.cfg));
        rc = gpu_forward(g, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 1, NULL, NULL);
        expect(rc != 0 && strstr(radix_error(), "no LM head"), "untied embedding: gpu_forward not refused: '%s'",
               radix_error());
        note_rejected(rc, 0, "untied tiny-embedding, gpu_forward");
        free(ref); free(got);
    } else expect(0, "untied tiny-embedding: %s", radix_error());
    gpu_model_free(g);
    qwen3_free(&u);
    remove_dir(d);
    rx_batch_free(&b);
}

/* Radix and compact against the GPU baseline on Table 7a's patterns (the paper, fp32 SDPA: 0 everywhere but
 * complex_sharing, 4.8e-7). Here the difference is bf16's: cuBLAS may pick another kernel, hence another fp32
 * summation order, for N' rows than for N, and a flipped last bit of a bf16 value travels through the layers. Compact
 * and radix run the same kernels on the same N' rows, so they must agree bit for bit. */
static void test_gpu_radix_and_compact_match_baseline_table7a(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    Qwen3Config cfg = tiny_config();
    GpuModel *g = NULL;
    if (gpu_model_random(&g, &cfg, 31)) { expect(0, "gpu_model_random: %s", radix_error()); return; }
    note("%-20s %4s %4s   %-24s %-24s %s", "pattern", "N", "N'", "radix (max, mean)", "compact (max, mean)", "tol");
    for (size_t p = 0; p < sizeof table7a / sizeof table7a[0]; p++) {
        RxBatch b = pattern_batch(&table7a[p], cfg.vocab_size, 100 + p);
        RadixIndex ix;
        int built = radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs) == 0;
        size_t n = (size_t)b.n_tokens * cfg.vocab_size;
        float *base = floats(n), *radix = floats(n), *comp = floats(n);
        GpuRunInfo ir, ic;
        int rc = !built || gpu_forward(g, &b, RX_BASELINE, RX_AUTO_THRESHOLD, 0, base, NULL) ||
             gpu_forward(g, &b, RX_RADIX, RX_AUTO_THRESHOLD, 0, radix, &ir) ||
             gpu_forward(g, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, comp, &ic);
        expect(rc == 0, "%s: %s", table7a[p].name, radix_error());
        if (rc == 0) {
            double tol, dr, dc;
            char why_r[WHY], why_c[WHY], what[64];
            int ok_r = close_verdict(radix, base, n, rx_bf16_tolerance(&cfg), &dr, &tol, why_r);
            int ok_c = close_verdict(comp, base, n, rx_bf16_tolerance(&cfg), &dc, &tol, why_c);
            note("%-20s %4d %4d   (%.3g, %.3g)%*s(%.3g, %.3g)%*s%.3g", table7a[p].name, b.n_tokens, ir.n_compact, dr,
                 mean_abs_diff(radix, base, n), 8, "", dc, mean_abs_diff(comp, base, n), 8, "", tol);
            expect(ir.n_compact == ix.n_compact && ic.n_compact == ix.n_compact, "%s: N' = %d, %d; the trie has %d",
                   table7a[p].name, ir.n_compact, ic.n_compact, ix.n_compact);
            expect(ok_r, "%s: radix vs baseline: %s", table7a[p].name, why_r);
            expect(ok_c, "%s: compact vs baseline: %s", table7a[p].name, why_c);
            snprintf(what, sizeof what, "%s: compact vs radix (must be bit-identical)", table7a[p].name);
            expect_identical(what, comp, radix, n);
        }
        if (built) radix_index_free(&ix);
        free(base); free(radix); free(comp);
        rx_batch_free(&b);
    }
    gpu_model_free(g);
}

/* last_only runs the final norm and lm_head on n_seqs rows instead of N; cuBLAS may choose another kernel for another
 * row count, which can flip the last bit of a bf16 logit (2^-7 relative): allow 2 * BF16_U of max|logit|. */
static void test_gpu_last_only_logits_equal_rows_of_full_logits(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    Qwen3Config cfg = tiny_config();
    GpuModel *g = NULL;
    if (gpu_model_random(&g, &cfg, 42)) { expect(0, "gpu_model_random: %s", radix_error()); return; }
    RxBatch b = pattern_batch(&table7a[5], cfg.vocab_size, 41);
    int V = cfg.vocab_size;
    float *full = floats((size_t)b.n_tokens * V), *last = floats((size_t)b.n_seqs * V);
    float *want = floats((size_t)b.n_seqs * V);
    for (int k = 0; k < 3; k++) {
        int rc = gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 0, full, NULL);
        for (int s = 0; rc == 0 && s < b.n_seqs; s++)
            memcpy(want + (size_t)s * V, full + (size_t)(b.cu_seqlens[s + 1] - 1) * V, (size_t)V * sizeof(float));
        rc = rc || gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 1, last, NULL);
        char what[96];
        snprintf(what, sizeof what, "last_only %s vs the last rows of the full logits", rx_mode_name(modes[k]));
        expect_close(what, rc, last, want, (size_t)b.n_seqs * V, 2 * BF16_U);
    }
    free(full); free(last); free(want);
    rx_batch_free(&b);
    gpu_model_free(g);
}

/* gpu_embed against the C reference's embeddings (qwen3_forward_ref_last) on a random model, every mode: the bf16
 * budget of the forward, rx_bf16_tolerance of max|ref| (the normalisation divides both by nearly the same norm). */
static void test_gpu_embed_matches_c_reference(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    GpuModel *g = NULL;
    if (qwen3_random(&m, &cfg, 81)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    if (gpu_model_upload(&g, &m)) { expect(0, "gpu_model_upload: %s", radix_error()); qwen3_free(&m); return; }
    RxBatch b = pattern_batch(&table7a[5], cfg.vocab_size, 82);   /* complex_sharing */
    size_t n = (size_t)b.n_seqs * cfg.hidden_size;
    float *ref = floats(n), *got = floats(n);
    int rc_ref = qwen3_forward_ref_last(&m, &b, RX_BASELINE, NULL, ref);
    expect(rc_ref == 0, "qwen3_forward_ref_last: %s", radix_error());
    for (int k = 0; rc_ref == 0 && k < 3; k++) {
        char what[96];
        snprintf(what, sizeof what, "embed %s [n_seqs=%d, hidden=%d] vs the C reference", rx_mode_name(modes[k]),
                 b.n_seqs, cfg.hidden_size);
        expect_close(what, gpu_embed(g, &b, modes[k], RX_AUTO_THRESHOLD, got, NULL), got, ref, n,
                     rx_bf16_tolerance(&cfg));
    }
    free(ref); free(got);
    rx_batch_free(&b);
    gpu_model_free(g);
    qwen3_free(&m);
}

static void test_gpu_forward_is_deterministic(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    Qwen3Config cfg = tiny_config();
    GpuModel *g = NULL;
    if (gpu_model_random(&g, &cfg, 52)) { expect(0, "gpu_model_random: %s", radix_error()); return; }
    RxBatch b = pattern_batch(&table7a[5], cfg.vocab_size, 51);
    size_t n = (size_t)b.n_tokens * cfg.vocab_size;
    float *a = floats(n), *c = floats(n);
    for (int k = 0; k < 3; k++) {
        int rc = gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 0, a, NULL) ||
                 gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 0, c, NULL);
        expect(rc == 0, "%s: %s", rx_mode_name(modes[k]), radix_error());
        char what[64];
        snprintf(what, sizeof what, "%s, the same batch twice", rx_mode_name(modes[k]));
        if (rc == 0 && expect_identical(what, a, c, n)) note("%s: bit-identical", what);
    }
    free(a); free(c);
    rx_batch_free(&b);
    gpu_model_free(g);
}

static void test_gpu_auto_mode_picks_compact_only_below_threshold(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const struct { int pattern; double threshold; RxMode want; } cases[3] = {
        {1, 0.95, RX_COMPACT},    /* identical_sequences: gamma = 9/36 = 0.25 */
        {1, 0.20, RX_BASELINE},   /* the same batch under a stricter threshold */
        {3, 0.95, RX_BASELINE},   /* no_sharing: gamma ~ 1 */
    };
    Qwen3Config cfg = tiny_config();
    GpuModel *g = NULL;
    if (gpu_model_random(&g, &cfg, 61)) { expect(0, "gpu_model_random: %s", radix_error()); return; }
    for (int c = 0; c < 3; c++) {
        RxBatch b = pattern_batch(&table7a[cases[c].pattern], cfg.vocab_size, 62);
        GpuRunInfo info;
        int rc = gpu_forward(g, &b, RX_AUTO, cases[c].threshold, 1, NULL, &info);
        expect(rc == 0, "gpu_forward: %s", radix_error());
        note("auto on %-20s gamma %.2f, threshold %.2f: ran %s", table7a[cases[c].pattern].name,
             (double)info.n_compact / info.n_tokens, cases[c].threshold, rx_mode_name(info.mode));
        expect(rc != 0 || info.mode == cases[c].want, "auto ran %s, expected %s", rx_mode_name(info.mode),
               rx_mode_name(cases[c].want));
        rx_batch_free(&b);
    }
    gpu_model_free(g);
}

static int gpu_forward_logits(const RxBatch *b, void *g) {
    float logits[6 * 512];                             /* [N = 6, vocab 512] for the consistent base batch */
    return gpu_forward((GpuModel *)g, b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, logits, NULL);
}

static void test_gpu_forward_rejects_bad_batches(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    Qwen3Config cfg = tiny_config();
    GpuModel *g = NULL;
    if (gpu_model_random(&g, &cfg, 72)) { expect(0, "gpu_model_random: %s", radix_error()); return; }
    RxBatch b = pattern_batch(&table7a[2], cfg.vocab_size, 71);
    for (int c = 0; c < 3; c++) {   /* a token id = vocab, a position = max_position_embeddings, an empty sequence */
        int32_t *field = c == 0 ? &b.input_ids[3] : c == 1 ? &b.position_ids[3] : &b.cu_seqlens[1];
        int32_t saved = *field;
        *field = c == 0 ? cfg.vocab_size : c == 1 ? cfg.max_position_embeddings : 0;
        int rc = gpu_forward(g, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, NULL, NULL);
        note_rejected(rc, 0, c == 0 ? "token id = vocab" : c == 1 ? "position = max" : "an empty sequence");
        expect(rc != 0 && radix_error()[0] != '\0', "an invalid batch (case %d) was accepted", c);
        *field = saved;
    }
    rx_batch_free(&b);
    expect_bad_batches_refused("GPU", gpu_forward_logits, g);
    gpu_model_free(g);
}

/* gpu_time_median on what bench.c times with it: a copy of 1 MiB, index_select of 200 bf16 rows of 128 out of 100
 * rows, and a GEMM [64, 1000] @ [72, 1000]^T; and an op that fails, whose error must be the timer's. */
typedef struct { int op; GpuModel *g; void *out; const void *in, *w; const int32_t *idx; } TimedOp;
static int run_timed_op(void *ctx) {
    const TimedOp *t = (const TimedOp *)ctx;
    if (t->op == 0) return gpu_copy(t->out, t->in, (size_t)1 << 20);
    if (t->op == 1) return gpu_rows_by_index(t->out, t->in, t->idx, 200, 128 * 2);
    if (t->op == 2) return gpu_gemm(t->g, t->out, t->in, t->w, 64, 1000, 72);
    return gpu_rows_by_index(t->out, t->in, t->idx, 200, 3);   /* refused: rows of 3 bytes */
}
static void test_gpu_timers_return_positive_medians(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const char *ops[3] = {"copy of 1 MiB", "index_select 100x128 -> 200 rows", "gemm 64x72x1000"};
    Qwen3Config cfg = tiny_config();
    uint64_t rng = 17;
    float *x = rand_floats((size_t)1 << 19, -1, 1, &rng), *w = rand_floats(72 * 1000, -0.03f, 0.03f, &rng);
    int32_t idx[200];
    for (int r = 0; r < 200; r++) idx[r] = rng_int(&rng, 100);
    DevBufs d = {0};
    TimedOp t = {0, NULL, dev_bf16(&d, NULL, (size_t)1 << 19), dev_bf16(&d, x, (size_t)1 << 19),
                 dev_bf16(&d, w, 72 * 1000), (const int32_t *)dev_raw(&d, idx, sizeof idx)};
    int rc = d.failed || gpu_model_random(&t.g, &cfg, 17);
    expect(rc == 0, "setting up: %s", radix_error());
    note("on %s, medians of 5:", gpu_device_name());
    for (t.op = 0; rc == 0 && t.op < 3; t.op++) {
        double ms = -1.0;
        int rc_op = gpu_time_median(run_timed_op, &t, 5, &ms);
        note("  %-34s %.4f ms", ops[t.op], ms);
        expect(rc_op == 0 && ms > 0, "%s: rc %d, median %g ms: %s", ops[t.op], rc_op, ms, radix_error());
    }
    double ms = -1.0;
    int rc_bad = rc || gpu_time_median(run_timed_op, &t, 5, &ms);   /* t.op == 3 */
    note("an op that fails -> %s", radix_error());
    expect(rc_bad != 0 && strstr(radix_error(), "rows of 3 bytes"), "the timer did not pass the op's failure on");
    expect(rc != 0 || gpu_time_median(run_timed_op, &t, 0, &ms) != 0, "the timer accepted reps = 0");
    gpu_model_free(t.g);
    dev_finish(&d, 0, NULL, NULL, 0);
    free(x); free(w);
}

/* Runs only where there is no usable CUDA device: every GPU entry point must fail cleanly and say why. */
static void test_gpu_functions_fail_cleanly_without_device(void) {
    if (gpu_available()) { skip_test("a CUDA device is present"); return; }
    Qwen3Config cfg = tiny_config();
    GpuModel *g = NULL;
    float x[4] = {1, 2, 3, 4}, y[4];
    double ms = 0.0;
    int lens[1] = {3};
    int32_t ids[3] = {1, 2, 3};
    RxBatch b = batch_of(1, lens, ids, NULL);
    note("gpu_available() = 0: %s", radix_error());
    expect(gpu_model_random(&g, &cfg, 1) != 0 && g == NULL, "gpu_model_random succeeded without a device");
    expect(radix_error()[0] != '\0', "no error message was set");
    /* the entry points of the tests and benchmarks, given host pointers: each must fail, none may crash */
    void *dev = x;
    expect(gpu_upload_bf16(&dev, x, 4) != 0 && dev == NULL, "gpu_upload_bf16 succeeded without a device");
    expect(gpu_upload(&dev, x, sizeof x) != 0 && dev == NULL, "gpu_upload succeeded without a device");
    expect(gpu_gemm(g, y, x, x, 1, 4, 1) != 0, "gpu_gemm succeeded without a device (and a model)");
    expect(gpu_copy(y, x, sizeof x) != 0, "gpu_copy succeeded without a device");
    expect(gpu_download_bf16(y, x, 4) != 0, "gpu_download_bf16 succeeded without a device");
    expect(gpu_time_median(NULL, NULL, 3, &ms) != 0, "gpu_time_median succeeded without a device");
    int rc = gpu_rmsnorm(y, x, x, 1, 4, 1e-6f);
    note_rejected(rc, 0, "gpu_rmsnorm without a device");
    expect(rc != 0, "gpu_rmsnorm succeeded without a device");
    gpu_free(NULL);
    expect(gpu_forward(NULL, &b, RX_BASELINE, RX_AUTO_THRESHOLD, 0, NULL, NULL) != 0,
           "gpu_forward succeeded without a model");
    expect(gpu_device_name() != NULL, "gpu_device_name returned NULL");
    gpu_model_free(NULL);
    rx_batch_free(&b);
}

/* ---- the flash attention kernel (head_dim 128): against the reference, the naive kernel, and in the forward ----- */
/* Tolerance. The flash kernel rounds P = softmax(q k^T) to bf16 (a relative error of at most BF16_U = 2^-8 per
 * weight) before the P V product, and the output once more; its scores and sums are fp32. So for every element
 *   |flash - ref| <= BF16_U (A + |ref|),   A = sum_t p_t |v_t| = the reference run on |v| (same q, k),
 * where the first term is P's rounding (at most BF16_U of each p_t |v_t|) and the second the output's. fp32 adds
 * ~1e-6 relative (summation order, exp2 with the scale folded in, the online rescaling), more on a GPU whose tensor
 * cores sum in an order of their own with peaky scores (|q k| in the hundreds); we allow 1.25 times the bound and
 * report the worst |diff| in units of it. A bound per element, not a multiple of max|ref|: outputs that average many
 * values are small, and a shared tolerance would hide their errors. Non-finite output fails (fmax skips a NaN). */
#define FLASH_TOL 1.25
static void expect_flash_close(const char *what, int rc, const float *got, const float *ref, const float *a_ref,
                               size_t n) {
    expect(rc == 0, "%s: the GPU call failed: %s", what, radix_error());
    if (rc != 0) return;
    double worst = 0.0, d_max = 0.0;
    size_t bad = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) { nonfinite++; continue; }
        double d = fabs((double)got[i] - ref[i]), bound = BF16_U * (a_ref[i] + fabs((double)ref[i]));
        d_max = fmax(d_max, d);
        worst = fmax(worst, bound > 0 ? d / bound : d > 0 ? INFINITY : 0);
        bad += d > FLASH_TOL * bound;
    }
    note("%-56s max|diff| %.3g, worst %.2f x BF16_U (A + |ref|) (tol %.2f)", what, d_max, worst, FLASH_TOL);
    expect(nonfinite == 0, "%s: %zu outputs are NaN or infinite", what, nonfinite);
    expect(bad == 0, "%s: %zu of %zu outputs beyond %.2f x BF16_U (A + |ref|), worst %.2f", what, bad, n, FLASH_TOL,
           worst);
}

/* rx_attention_ref, and the same on |v| (the A of the tolerance). */
static void attention_ref_and_abs(const float *q, const float *k, const float *v, float *ref, float *a_ref, int n_q,
                                  const int32_t *q_orig, const int32_t *seq_start, const int32_t *kv_row,
                                  size_t n_v, int nh, int nkv, int hd) {
    float *v_abs = floats(n_v);
    for (size_t i = 0; i < n_v; i++) v_abs[i] = fabsf(v[i]);
    expect(rx_attention_ref(q, k, v, ref, n_q, q_orig, seq_start, kv_row, nh, nkv, hd) == 0 &&
           rx_attention_ref(q, k, v_abs, a_ref, n_q, q_orig, seq_start, kv_row, nh, nkv, hd) == 0, "%s", radix_error());
    free(v_abs);
}

/* gpu_flash_attention on host arrays: q, out [cu_q[n_seqs], nh*hd]; k, v [n_kv_rows, nkv*hd]; kv_row [cu_k[n_seqs]] or
 * NULL; cu_q and cu_k [n_seqs+1] (host arrays in gpu_flash_attention too); kernel: the query tile (RX_ATTN_FLASH: the
 * per-launch choice, _BM64, _BM128). */
static int flash_attention_on_gpu(const float *q, const float *k, const float *v, float *out, const int32_t *cu_q,
                                  const int32_t *cu_k, const int32_t *kv_row, int n_seqs, int n_kv_rows, int nh,
                                  int nkv, int hd, RxAttention kernel) {
    size_t nq = (size_t)cu_q[n_seqs] * nh * hd, nkv_n = (size_t)n_kv_rows * nkv * hd;
    DevBufs d = {0};
    void *d_q = dev_bf16(&d, q, nq), *d_k = dev_bf16(&d, k, nkv_n), *d_v = dev_bf16(&d, v, nkv_n);
    void *d_out = dev_bf16(&d, NULL, nq);
    const int32_t *d_kv_row = kv_row ? (const int32_t *)dev_raw(&d, kv_row, cu_k[n_seqs] * sizeof(int32_t)) : NULL;
    int rc = d.failed || gpu_flash_attention(d_out, d_q, d_k, d_v, cu_q, cu_k, d_kv_row, n_seqs, nh, nkv, hd, kernel);
    return dev_finish(&d, rc, out, d_out, nq);
}

/* The same call with query tiles of 128 rows (two m16 fragments per warp) must give bm64 [cu_q[n_seqs], nh*hd], the
 * BM = 64 result, bit for bit: a row's arithmetic does not depend on which rows share its CTA (radixmlp.cu, the flash
 * kernel). Prints the rows that differ. */
static void flash_bm128_as_bm64(const char *what, int rc64, const float *bm64, const float *q, const float *k,
                                const float *v, const int32_t *cu_q, const int32_t *cu_k, const int32_t *kv_row,
                                int n_seqs, int n_kv_rows, int nh, int nkv, int hd) {
    const size_t row = (size_t)nh * hd, nq = (size_t)cu_q[n_seqs] * row;
    float *got = floats(nq);
    int rc = flash_attention_on_gpu(q, k, v, got, cu_q, cu_k, kv_row, n_seqs, n_kv_rows, nh, nkv, hd,
                                    RX_ATTN_FLASH_BM128);
    int differ = 0, first = -1;
    for (int r = 0; rc == 0 && rc64 == 0 && r < cu_q[n_seqs]; r++)
        if (memcmp(got + r * row, bm64 + r * row, row * sizeof(float))) {
            differ++;
            if (first < 0) first = r;
        }
    note("%s: BM 128 vs BM 64, %d of %d rows differ (must be 0; first: %d)", what, differ, cu_q[n_seqs], first);
    expect(rc == 0 && rc64 == 0 && differ == 0, "%s: BM 128 differs from BM 64 in %d rows (rc %d): %s", what,
           differ, rc, radix_error());
    free(got);
}

/* The flash kernel in its three index modes on sequences of lengths {1, 15, 16, 17, 63, 64, 65, 129, 300} (partial,
 * exact and one-over tiles of 16 and 64) sharing prefixes p_s in {0, 1, 63, 64, 65, 200}, three of them fully shared
 * (no query rows in compact mode); GQA 4:1, MHA, MQA; q and k in +-2 (softmax spread over many keys) or in +-6
 * (peaky: scores ~ +-12, a few keys carry the weight, so a wrongly masked or missing key shows). Both query tiles:
 * BM = 64 against the reference, BM = 128 (two fragments per warp) bit for bit equal to it (flash_bm128_as_bm64). */
static void test_gpu_flash_attention(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int spec[][2] = {{300, 0}, {1, 0},    {15, 1},    {16, 0},    {17, 1}, {63, 0},  {64, 63},
                                  {65, 64}, {129, 65}, {300, 200}, {129, 129}, {1, 1},  {65, 65}};
    static const int heads[][4] = {{8, 2, 128, 1}, {2, 2, 128, 0}, {2, 2, 128, 1}, {4, 1, 128, 0}};   /* n_heads,
                                       n_kv, head_dim, peaky: GQA 4:1 peaky, MHA plain and peaky, MQA plain */
    const int n_seqs = (int)(sizeof spec / sizeof spec[0]);
    RxBatch b = shared_prefix_batch(spec, n_seqs, 81);
    RadixIndex ix;
    int32_t cu_q[32];
    if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs) ||
        radix_compact_cu_q(&ix, b.cu_seqlens, b.n_seqs, cu_q)) {
        expect(0, "%s", radix_error());
        rx_batch_free(&b);
        return;
    }
    int N = b.n_tokens, Nc = ix.n_compact, fully = 0, wrong = 0;
    for (int s = 0; s < n_seqs; s++) {
        int L = spec[s][0], p = L - (cu_q[s + 1] - cu_q[s]), want = spec[s][1] < L ? spec[s][1] : L;
        expect(p == want, "sequence %d: p_s = %d, expected %d", s, p, want);
        fully += p == L;
        wrong += p != want;
    }
    note("batch: %d sequences, N = %d, N' = %d, %d fully shared; p_s as specified in %d of %d", n_seqs, N, Nc, fully,
         n_seqs - wrong, n_seqs);
    int32_t *seq_start = seq_starts(&b);
    uint64_t rng = 82;
    for (int c = 0; c < 4; c++) {
        int nh = heads[c][0], nkv = heads[c][1], hd = heads[c][2], peaky = heads[c][3], qd = nh * hd, kvd = nkv * hd;
        float a = peaky ? 6.0f : 2.0f;
        size_t nq = (size_t)N * qd, nkn = (size_t)N * kvd, nqc = (size_t)Nc * qd, nkc = (size_t)Nc * kvd;
        float *q = rand_floats(nq, -a, a, &rng), *k = rand_floats(nkn, -a, a, &rng), *v = rand_floats(nkn, -2, 2, &rng);
        float *qc = rand_floats(nqc, -a, a, &rng), *kc = rand_floats(nkc, -a, a, &rng);
        float *vc = rand_floats(nkc, -2, 2, &rng);
        float *ref = floats(nq), *a_ref = floats(nq), *got = floats(nq), *got_r = floats(nq);
        float *ref_c = floats(nqc), *a_ref_c = floats(nqc), *got_c = floats(nqc);
        round_to_bf16(q, nq), round_to_bf16(k, nkn), round_to_bf16(v, nkn);
        round_to_bf16(qc, nqc), round_to_bf16(kc, nkc), round_to_bf16(vc, nkc);
        char what[128], cfg[48];
        snprintf(cfg, sizeof cfg, "%d heads, %d kv%s", nh, nkv, peaky ? ", peaky" : "");
        /* baseline: cu_q = cu_k = cu_seqlens, keys in place */
        attention_ref_and_abs(q, k, v, ref, a_ref, N, NULL, seq_start, NULL, nkn, nh, nkv, hd);
        snprintf(what, sizeof what, "flash baseline (%s)", cfg);
        int rc = flash_attention_on_gpu(q, k, v, got, b.cu_seqlens, b.cu_seqlens, NULL, n_seqs, N, nh, nkv, hd,
                                        RX_ATTN_FLASH_BM64);
        expect_flash_close(what, rc, got, ref, a_ref, nq);
        flash_bm128_as_bm64(what, rc, got, q, k, v, b.cu_seqlens, b.cu_seqlens, NULL, n_seqs, N, nh, nkv, hd);
        /* radix: the compact rows scattered to the N original rows, then the baseline call */
        for (int t = 0; t < N; t++) {
            memcpy(q + (size_t)t * qd, qc + (size_t)ix.scatter[t] * qd, (size_t)qd * sizeof(float));
            memcpy(k + (size_t)t * kvd, kc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
            memcpy(v + (size_t)t * kvd, vc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
        }
        attention_ref_and_abs(q, k, v, ref, a_ref, N, NULL, seq_start, NULL, nkn, nh, nkv, hd);
        snprintf(what, sizeof what, "flash radix (%s)", cfg);
        int rc_r = flash_attention_on_gpu(q, k, v, got_r, b.cu_seqlens, b.cu_seqlens, NULL, n_seqs, N, nh, nkv, hd,
                                          RX_ATTN_FLASH_BM64);
        expect_flash_close(what, rc_r, got_r, ref, a_ref, nq);
        flash_bm128_as_bm64(what, rc_r, got_r, q, k, v, b.cu_seqlens, b.cu_seqlens, NULL, n_seqs, N, nh, nkv, hd);
        /* compact: the N' rows, queries the blocks cu_q, keys through I_scatter */
        attention_ref_and_abs(qc, kc, vc, ref_c, a_ref_c, Nc, ix.gather, seq_start, ix.scatter, nkc, nh, nkv, hd);
        snprintf(what, sizeof what, "flash compact (%s)", cfg);
        int rc_c = flash_attention_on_gpu(qc, kc, vc, got_c, cu_q, b.cu_seqlens, ix.scatter, n_seqs, Nc, nh, nkv,
                                          hd, RX_ATTN_FLASH_BM64);
        expect_flash_close(what, rc_c, got_c, ref_c, a_ref_c, nqc);
        flash_bm128_as_bm64(what, rc_c, got_c, qc, kc, vc, cu_q, b.cu_seqlens, ix.scatter, n_seqs, Nc, nh, nkv, hd);
        /* compact row j is radix row I_gather[j], bit for bit (see attention in radixmlp.cu) */
        int differ = 0;
        for (int j = 0; rc_r == 0 && rc_c == 0 && j < Nc; j++)
            differ += memcmp(got_c + (size_t)j * qd, got_r + (size_t)ix.gather[j] * qd, qd * sizeof(float)) != 0;
        note("flash compact row j vs radix row I_gather[j]: %d of %d rows differ (must be 0)", differ, Nc);
        expect(differ == 0, "%s: %d compact rows differ from their radix rows", cfg, differ);
        free(q); free(k); free(v); free(qc); free(kc); free(vc);
        free(ref); free(a_ref); free(got); free(got_r); free(ref_c); free(a_ref_c); free(got_c);
    }
    free(seq_start);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

/* The flash kernel against the naive one at the shape of the paper's Table 4, with fewer sequences and heads so that
 * the CPU emulator can run it (~15 s per head): 2 sequences of a shared 2048-token prefix and 256 tokens of their own,
 * 2 heads on 1 kv head (GQA; Qwen3-4B has 32 on 8), head_dim 128, in the compact layout. Sequence 0 is whole (as in
 * baseline: 36 query tiles of up to 36 key tiles, the buffers cycled 36 times); sequence 1 has its 256 unshared
 * queries at key positions 2048 .. 2303, reading 2048 keys of sequence 0 through I_scatter. Flash, naive and the
 * reference on a sample of 64 query rows (both ends, both sides of tile boundaries, random rows); tolerance as above,
 * and naive vs flash against the sum of their bounds, BF16_U (A + 2 |ref|). */
static void test_gpu_flash_attention_matches_naive_at_table4_shape(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    enum { P = 2048, S = 256, B = 2, NH = 2, NKV = 1, HD = 128, SAMPLE = 64 };
    int lens[B] = {P + S, P + S};
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * B * (P + S));
    uint64_t rng = 91;
    for (int i = 0; i < B * (P + S); i++)   /* sequence 1 repeats the first P tokens of sequence 0 */
        ids[i] = i >= P + S && i < 2 * P + S ? ids[i - P - S] : 1 + rng_int(&rng, 50000);
    RxBatch b = batch_of(B, lens, ids, NULL);
    free(ids);
    RadixIndex ix;
    int32_t cu_q[B + 1];
    if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs) ||
        radix_compact_cu_q(&ix, b.cu_seqlens, b.n_seqs, cu_q)) {
        expect(0, "%s", radix_error());
        rx_batch_free(&b);
        return;
    }
    int N = b.n_tokens, Nc = ix.n_compact, qd = NH * HD, kvd = NKV * HD;
    int32_t *seq_start = seq_starts(&b), rows[SAMPLE], orig[SAMPLE];
    note("B = %d, P = %d, S = %d: N = %d, N' = %d (compact layout), %d heads, %d kv head, head_dim %d", B, P, S, N, Nc,
         NH, NKV, HD);
    size_t nq = (size_t)Nc * qd, nkv = (size_t)Nc * kvd, ns = (size_t)SAMPLE * qd;
    float *q = rand_floats(nq, -3, 3, &rng), *k = rand_floats(nkv, -3, 3, &rng), *v = rand_floats(nkv, -2, 2, &rng);
    float *got = floats(nq), *qs = floats(ns), *ref = floats(ns), *a_ref = floats(ns), *naive = floats(ns);
    float *flash = floats(ns), *both = floats(ns);
    round_to_bf16(q, nq), round_to_bf16(k, nkv), round_to_bf16(v, nkv);
    for (int i = 0; i < SAMPLE; i++) {   /* first and last rows, rows 63/64, 127/128, ..., random rows */
        int r = i == 0 ? 0 : i == 1 ? Nc - 1 : i < 32 ? 64 * (i / 2) - (i % 2) : rng_int(&rng, Nc);
        rows[i] = r;
        orig[i] = ix.gather[r];
        memcpy(qs + (size_t)i * qd, q + (size_t)r * qd, (size_t)qd * sizeof(float));
    }
    int rc = flash_attention_on_gpu(q, k, v, got, cu_q, b.cu_seqlens, ix.scatter, B, Nc, NH, NKV, HD, RX_ATTN_FLASH);
    for (int i = 0; rc == 0 && i < SAMPLE; i++)
        memcpy(flash + (size_t)i * qd, got + (size_t)rows[i] * qd, (size_t)qd * sizeof(float));
    attention_ref_and_abs(qs, k, v, ref, a_ref, SAMPLE, orig, seq_start, ix.scatter, nkv, NH, NKV, HD);
    int rc_n = attention_on_gpu(qs, k, v, naive, SAMPLE, orig, seq_start, ix.scatter, N, Nc, NH, NKV, HD);
    expect_flash_close("flash vs the reference, 64 sampled rows", rc, flash, ref, a_ref, ns);
    for (size_t i = 0; i < ns; i++) both[i] = a_ref[i] + fabsf(ref[i]);   /* flash's A + |ref|, naive's |ref| */
    expect_flash_close("flash vs naive, the same rows", rc || rc_n, flash, naive, both, ns);
    free(q); free(k); free(v); free(got); free(qs); free(ref); free(a_ref); free(naive); free(flash); free(both);
    free(seq_start);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

/* bench --attention's timer, on a small batch: every layout with each kernel (flash with either query tile, naive)
 * runs and gives a positive median. */
static void test_gpu_attention_timer(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int spec[][2] = {{70, 0}, {70, 40}, {40, 40}};   /* a shared prefix, and a fully shared sequence */
    static const RxMode layouts[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    RxBatch b = shared_prefix_batch(spec, 3, 131);
    static const RxAttention kernels[3] = {RX_ATTN_FLASH_BM64, RX_ATTN_FLASH_BM128, RX_ATTN_NAIVE};
    static const char *names[3] = {"flash BM 64", "flash BM 128", "naive"};
    for (int k = 0; k < 3; k++)
        for (int kn = 0; kn < 3; kn++) {
            double ms = -1.0;
            int rc = gpu_time_attention(&b, layouts[k], kernels[kn], 2, 1, 128, 1, &ms);
            note("gpu_time_attention %-8s %-12s: %.3f ms on %s", rx_mode_name(layouts[k]), names[kn], ms,
                 gpu_device_name());
            expect(rc == 0 && ms > 0, "%s, %s: rc %d, %g ms: %s", rx_mode_name(layouts[k]), names[kn], rc, ms,
                   radix_error());
        }
    double ms;
    expect(gpu_time_attention(&b, RX_COMPACT, RX_ATTN_FLASH, 2, 1, 64, 1, &ms) != 0 && strstr(radix_error(), "128"),
           "the flash timer accepted head_dim 64");
    rx_batch_free(&b);
    int lens[2] = {0, 3};                    /* an empty first sequence: refused in one line, never read before row 0 */
    int32_t ids[3] = {1, 2, 3};
    RxBatch e = batch_of(2, lens, ids, NULL);
    expect(gpu_time_attention(&e, RX_RADIX, RX_ATTN_NAIVE, 2, 1, 32, 1, &ms) != 0 && strstr(radix_error(), "empty"),
           "the timer took a batch with an empty sequence: %s", radix_error());
    rx_batch_free(&e);
}

/* A model whose head_dim (128) the flash kernel takes, small enough for the C reference: tiny_config's other sizes. */
static Qwen3Config flash_config(void) {
    Qwen3Config c = tiny_config();
    c.head_dim = 128;
    return c;
}

static void test_gpu_attention_choice(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    Qwen3Config small = tiny_config(), big = flash_config();
    GpuModel *g = NULL, *h = NULL;
    if (gpu_model_random(&g, &small, 101) || gpu_model_random(&h, &big, 102)) {
        expect(0, "gpu_model_random: %s", radix_error());
        gpu_model_free(g);
        return;
    }
    int rc = gpu_set_attention(g, RX_ATTN_FLASH);
    note("RX_ATTN_FLASH on head_dim %d -> %s", small.head_dim, radix_error());
    expect(rc != 0 && strstr(radix_error(), "head_dim"), "the flash kernel was accepted for head_dim %d",
           small.head_dim);
    expect(gpu_set_attention(g, RX_ATTN_NAIVE) == 0 && gpu_set_attention(h, RX_ATTN_FLASH) == 0, "%s", radix_error());
    /* AUTO runs the flash kernel at head_dim 128: bit for bit what FLASH gives, and not what NAIVE gives */
    RxBatch b = pattern_batch(&table7a[5], big.vocab_size, 103);
    size_t n = (size_t)b.n_tokens * big.vocab_size;
    float *a = floats(n), *f = floats(n), *nv = floats(n);
    rc = gpu_forward(h, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, f, NULL) || gpu_set_attention(h, RX_ATTN_AUTO) ||
         gpu_forward(h, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, a, NULL) || gpu_set_attention(h, RX_ATTN_NAIVE) ||
         gpu_forward(h, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, nv, NULL);
    expect(rc == 0, "%s", radix_error());
    int auto_is_flash = rc == 0 && !memcmp(a, f, n * sizeof(float)), naive_differs = rc == 0 && memcmp(a, nv, n * 4);
    note("head_dim 128: AUTO %s FLASH bit for bit, %s NAIVE", auto_is_flash ? "==" : "!=", naive_differs ? "!=" : "==");
    expect(auto_is_flash && naive_differs, "AUTO on head_dim 128 did not run the flash kernel");
    /* on the definition path (RADIXMLP_CPU=definition) AUTO runs Part I's naive kernel: NAIVE's bits */
    const char *path = rx_cpu_path(NULL);
    rx_cpu_path("definition");
    rc = gpu_set_attention(h, RX_ATTN_AUTO) || gpu_forward(h, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, a, NULL);
    rx_cpu_path(path);
    int def_is_naive = rc == 0 && !memcmp(a, nv, n * sizeof(float));
    note("head_dim 128, RADIXMLP_CPU=definition: AUTO %s NAIVE bit for bit", def_is_naive ? "==" : "!=");
    expect(def_is_naive, "AUTO on the definition path did not run the naive kernel: %s", rc ? radix_error() : "");
    free(a); free(f); free(nv);
    rx_batch_free(&b);
    gpu_model_free(g);
    gpu_model_free(h);
}

/* BM = 128 against BM = 64 and the reference where the key tiles cycle through both buffers (more than two key tiles,
 * so a buffer is refilled while the other is read): sequences of 300, 257 (P = 1: one shared token), 129 and 1 tokens,
 * 4 heads on 2 kv heads, baseline and compact (keys through I_scatter). Small enough for the emulator's race check. */
static void test_gpu_flash_attention_bm128_equals_bm64_bit_for_bit(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int spec[][2] = {{300, 0}, {257, 1}, {129, 128}, {1, 1}};
    enum { NS = 4, NH = 4, NKV = 2, HD = 128 };
    RxBatch b = shared_prefix_batch(spec, NS, 151);
    RadixIndex ix;
    int32_t cu_q[NS + 1];
    if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs) ||
        radix_compact_cu_q(&ix, b.cu_seqlens, b.n_seqs, cu_q)) {
        expect(0, "%s", radix_error());
        rx_batch_free(&b);
        return;
    }
    int32_t *seq_start = seq_starts(&b);
    uint64_t rng = 152;
    for (int compact = 0; compact <= 1; compact++) {
        const int n = compact ? ix.n_compact : b.n_tokens;
        const size_t nq = (size_t)n * NH * HD, nk = (size_t)n * NKV * HD;
        float *q = rand_floats(nq, -4, 4, &rng), *k = rand_floats(nk, -4, 4, &rng), *v = rand_floats(nk, -2, 2, &rng);
        float *ref = floats(nq), *a_ref = floats(nq), *got = floats(nq);
        round_to_bf16(q, nq), round_to_bf16(k, nk), round_to_bf16(v, nk);
        const int32_t *cq = compact ? cu_q : b.cu_seqlens, *kv_row = compact ? ix.scatter : NULL;
        attention_ref_and_abs(q, k, v, ref, a_ref, n, compact ? ix.gather : NULL, seq_start, kv_row, nk, NH, NKV, HD);
        const char *what = compact ? "compact, BM 64" : "baseline, BM 64";
        int rc = flash_attention_on_gpu(q, k, v, got, cq, b.cu_seqlens, kv_row, NS, n, NH, NKV, HD,
                                        RX_ATTN_FLASH_BM64);
        expect_flash_close(what, rc, got, ref, a_ref, nq);
        flash_bm128_as_bm64(what, rc, got, q, k, v, cq, b.cu_seqlens, kv_row, NS, n, NH, NKV, HD);
        free(q); free(k); free(v); free(ref); free(a_ref); free(got);
    }
    free(seq_start);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

/* The flash kernel's query tile, 64 or 128 rows: the per-launch rule (gpu_flash_block_m) takes 128 only for a launch
 * that fills the device (one query tile of 128 x 8 heads here: 64; 2^24 queries x 32 heads: 128), the forced kinds
 * force; and a forward on the GPU with BM = 128 equals BM = 64 bit for bit, in baseline, radix and compact mode, on
 * P = 1 shapes (sequences sharing one token) of lengths off the tile: 128, 127, 100, 65, 2, 1 (GQA 4:2, head_dim
 * 128). */
static void test_gpu_flash_tile_rule_and_forward_bm128_equals_bm64(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    const int32_t small[2] = {0, 128}, huge[2] = {0, 1 << 24};
    int r_small = gpu_flash_block_m(RX_ATTN_FLASH, small, 1, 8);
    int r_huge = gpu_flash_block_m(RX_ATTN_FLASH, huge, 1, 32);
    int f64 = gpu_flash_block_m(RX_ATTN_FLASH_BM64, huge, 1, 32);
    int f128 = gpu_flash_block_m(RX_ATTN_FLASH_BM128, small, 1, 8);
    note("the rule: 128 queries x 8 heads -> BM %d, 2^24 x 32 -> BM %d; forced: %d, %d", r_small, r_huge, f64, f128);
    expect(r_small == 64 && r_huge == 128 && f64 == 64 && f128 == 128, "the tile rule: %d %d %d %d", r_small, r_huge,
           f64, f128);
    Qwen3Config cfg = flash_config();
    GpuModel *g = NULL;
    if (gpu_model_random(&g, &cfg, 141)) {
        expect(0, "gpu_model_random: %s", radix_error());
        return;
    }
    int lens[6] = {128, 127, 100, 65, 2, 1};
    int32_t ids[6 * 128];
    uint64_t rng = 142;
    for (int s = 0, at = 0; s < 6; s++)          /* every sequence starts with token 7, then its own random ids */
        for (int i = 0; i < lens[s]; i++) ids[at++] = i == 0 ? 7 : 8 + rng_int(&rng, cfg.vocab_size - 8);
    RxBatch b = batch_of(6, lens, ids, NULL);
    size_t n = (size_t)b.n_tokens * cfg.vocab_size;
    float *l64 = floats(n), *l128 = floats(n);
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    for (int m = 0; m < 3; m++) {
        int rc = gpu_set_attention(g, RX_ATTN_FLASH_BM64) ||
                 gpu_forward(g, &b, modes[m], RX_AUTO_THRESHOLD, 0, l64, NULL) ||
                 gpu_set_attention(g, RX_ATTN_FLASH_BM128) ||
                 gpu_forward(g, &b, modes[m], RX_AUTO_THRESHOLD, 0, l128, NULL);
        size_t differ = 0;
        for (size_t i = 0; rc == 0 && i < n; i++) differ += memcmp(&l64[i], &l128[i], sizeof(float)) != 0;
        note("%s: N = %d, logits of BM 128 vs BM 64: %zu of %zu differ (must be 0)", rx_mode_name(modes[m]),
             b.n_tokens, differ, n);
        expect(rc == 0 && differ == 0, "%s: rc %d, %zu logits differ: %s", rx_mode_name(modes[m]), rc, differ,
               radix_error());
    }
    free(l64); free(l128);
    rx_batch_free(&b);
    gpu_model_free(g);
}

/* The GPU forward on a head_dim-128 model (so the flash kernel runs) against the C reference in every mode, and the
 * paper's Table 7, forward half, with the naive kernel in the role of the paper's reference (SDPA, no radix): logits
 * (max, mean) |diff| of
 *   (a) the radix/compact toggle under each attention: radix and compact vs baseline of the same kernel
 *   (b) the attention swap without radix: flash baseline vs naive baseline
 *   (c) the attention swap with radix: flash radix (and compact) vs naive baseline, as the paper compares them
 * Each GPU run within rx_bf16_tolerance of the C reference (which counts the flash kernel's rounding of P);
 * compact == radix bit for bit under each kernel. */
static void test_gpu_forward_flash_table7(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    Qwen3Config cfg = flash_config();
    Qwen3Model m;
    GpuModel *g = NULL;
    if (qwen3_random(&m, &cfg, 111)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    if (gpu_model_upload(&g, &m)) { expect(0, "gpu_model_upload: %s", radix_error()); qwen3_free(&m); return; }
    note("model: hidden %d, %d layers, %d heads, %d kv heads, head_dim %d; logits (max, mean) |diff|", cfg.hidden_size,
         cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    note("%-20s %4s | (a) naive radix   naive compact    flash radix      flash compact  | (b) flash base   | "
         "(c) flash radix  flash compact  | worst vs C ref", "pattern", "N");
    for (size_t p = 0; p < sizeof table7a / sizeof table7a[0]; p++) {
        RxBatch b = pattern_batch(&table7a[p], cfg.vocab_size, 120 + p);
        size_t n = (size_t)b.n_tokens * cfg.vocab_size;
        float *ref = floats(n), *out[2][3];                          /* out[flash][mode] */
        int rc = qwen3_forward_ref(&m, &b, RX_BASELINE, ref);
        for (int f = 0; f < 2; f++)
            for (int k = 0; k < 3; k++) {
                out[f][k] = floats(n);
                rc = rc || gpu_set_attention(g, f ? RX_ATTN_FLASH : RX_ATTN_NAIVE) ||
                     gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 0, out[f][k], NULL);
            }
        expect(rc == 0, "%s: %s", table7a[p].name, radix_error());
        if (rc == 0) {
            char cells[7][40];
            const float *pairs[7][2] = {{out[0][1], out[0][0]}, {out[0][2], out[0][0]}, {out[1][1], out[1][0]},
                                        {out[1][2], out[1][0]}, {out[1][0], out[0][0]}, {out[1][1], out[0][0]},
                                        {out[1][2], out[0][0]}};
            for (int i = 0; i < 7; i++)
                snprintf(cells[i], sizeof cells[i], "(%.2g, %.2g)", max_abs_diff(pairs[i][0], pairs[i][1], n),
                         mean_abs_diff(pairs[i][0], pairs[i][1], n));
            double worst = 0, tol = rx_bf16_tolerance(&cfg) * max_abs(ref, n);
            for (int f = 0; f < 2; f++)
                for (int k = 0; k < 3; k++) {                  /* a NaN stays NaN (fmax would drop it) and fails */
                    double d = max_abs_diff(out[f][k], ref, n);
                    worst = isnan(worst) || isnan(d) ? NAN : fmax(worst, d);
                }
            note("%-20s %4d | %-16s %-16s %-16s %-14s | %-16s | %-16s %-14s | %.3g (tol %.3g)", table7a[p].name,
                 b.n_tokens, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], worst, tol);
            expect(worst <= tol, "%s: a GPU run is %.3g from the C reference > %.3g", table7a[p].name, worst, tol);
            for (int f = 0; f < 2; f++)
                expect(!memcmp(out[f][1], out[f][2], n * sizeof(float)), "%s: %s compact differs from radix",
                       table7a[p].name, f ? "flash" : "naive");
        }
        for (int f = 0; f < 2; f++)
            for (int k = 0; k < 3; k++) free(out[f][k]);
        free(ref);
        rx_batch_free(&b);
    }
    gpu_model_free(g);
    qwen3_free(&m);
}

/* The flash launch asks for its 85 KiB of shared memory through cudaFuncSetAttribute, a per-device setting that
 * cudaDeviceReset() drops (as cudaSetDevice to another GPU would not have it). Two GpuModels of a head_dim-128 config,
 * one forward each, with a device reset between: both must run, and give the same logits (same weights, same batch). */
static void test_gpu_flash_forward_survives_device_reset(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    Qwen3Config cfg = flash_config();
    RxBatch b = pattern_batch(&table7a[5], cfg.vocab_size, 131);
    size_t n = (size_t)b.n_tokens * cfg.vocab_size;
    float *out[2] = {floats(n), floats(n)};
    int rc[2] = {-1, -1};
    for (int i = 0; i < 2; i++) {
        GpuModel *g = NULL;
        if (i == 1 && gpu_test_device_reset()) { expect(0, "cudaDeviceReset: %s", radix_error()); break; }
        rc[i] = gpu_model_random(&g, &cfg, 132) || gpu_set_attention(g, RX_ATTN_FLASH) ||
                gpu_forward(g, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, out[i], NULL);
        expect(rc[i] == 0, "model %d (%s the device reset): %s", i + 1, i ? "after" : "before", radix_error());
        gpu_model_free(g);
    }
    note("flash forward before and after cudaDeviceReset(): %s, %s", rc[0] ? "failed" : "ran",
         rc[1] ? "failed" : "ran");
    if (rc[0] == 0 && rc[1] == 0) expect_identical("logits after the reset vs before", out[1], out[0], n);
    free(out[0]); free(out[1]);
    rx_batch_free(&b);
}

static void test_config_default_head_dim_checked(void) {
    /* Found by fuzzing (make fuzz, target config): without "head_dim", a default of hidden/heads could be 0 (hidden 1,
     * 2 heads), a model of zero-width heads. Qwen3Config's default is 128 whatever hidden/heads; here 2 heads and
     * the default 32 kv heads do not divide, which is refused. */
    const char *c0 = "{\"model_type\":\"qwen3\","
                     "\"vocab_size\":8,\"hidden_size\":1,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                     "\"num_attention_heads\":2}";
    Qwen3Config c;
    int rc = rx_parse_config(&c, c0, strlen(c0), "config.json");
    expect(rc != 0 && strstr(radix_error(), "num_attention_heads 2 is not a multiple of num_key_value_heads 32"),
           "hidden 1, 2 heads, no head_dim: rc %d, head_dim %d, '%s'", rc, c.head_dim, radix_error());
    note_rejected(rc, 0, "hidden 1, 2 heads, no head_dim, no num_key_value_heads");
}

/* ---- a corpus of broken checkpoints: each a copy of a fixture with one corruption, written here, never committed */
typedef enum { EDIT, WRITE, RESIZE, HEADER_LEN, REMOVE, DIRECTORY, NO_READ, APPEND } Corruption;
typedef struct {
    const char *what, *fixture, *file;
    Corruption how;
    const char *from, *to;  /* EDIT: the first `from` becomes `to` (in a .safetensors file, inside its header);
                               WRITE: the file's new content is `to`; APPEND: a tensor `from` ("dtype" and "shape" as
                               `to`) holding a copy of the data's first n bytes */
    long n;                 /* RESIZE: bytes added at the end (negative: cut); HEADER_LEN: added to the header length */
    const char *msg;        /* what qwen3_load's message must contain */
} Broken;

/* Applies one corruption to the checkpoint in dir; returns 0, or 1 when it cannot be made here. */
static int corrupt(const char *dir, const Broken *b) {
    char p[512];
    size_t len;
    uint8_t *bytes;
    snprintf(p, sizeof p, "%s/%s", dir, b->file);
    switch (b->how) {
    case EDIT: edit_file(dir, b->file, b->from, b->to); break;
    case WRITE: write_file(dir, b->file, b->to, strlen(b->to)); break;
    case RESIZE: case HEADER_LEN:
        bytes = read_file(p, &len);
        bytes = (uint8_t *)realloc(bytes, len + (b->n > 0 ? (size_t)b->n : 0));
        if (b->how == RESIZE) {
            if (b->n > 0) memset(bytes + len, 0, (size_t)b->n);
            len = (size_t)((long)len + b->n);
        } else {
            uint64_t h = 0;
            for (int i = 7; i >= 0; i--) h = h << 8 | bytes[i];
            h += (uint64_t)b->n;
            for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(h >> (8 * i));
        }
        write_file(dir, b->file, bytes, len);
        free(bytes);
        break;
    case APPEND: append_tensor_copy(dir, b->from, b->to, 0, (size_t)b->n); break;
    case REMOVE: unlink(p); break;
    case DIRECTORY: unlink(p); mkdir(p, 0700); break;
    case NO_READ:                   /* root reads a mode-000 file all the same: DIRECTORY stands in for it */
        if (geteuid() == 0) return 1;
        chmod(p, 0);
        break;
    }
    return 0;
}

static void test_broken_checkpoint_corpus(void) {
    if (!have_fixtures()) return;
    const char *T = "tiny-tied", *U = "tiny-untied", *ST = "model.safetensors", *CFG = "config.json",
               *IDX = "model.safetensors.index.json", *SHARD = "model-00004-of-00004.safetensors";
    char *huge = (char *)malloc((1 << 20) + 8);         /* a config.json of 1 MiB + 5 bytes: over map_file's limit  */
    memset(huge, ' ', (1 << 20) + 3);
    strcpy(huge + (1 << 20) + 3, "{}");
    const Broken corpus[] = {
        /* safetensors: every rejection of the official reader (docs/qwen3.md), then ours */
        {"file of 3 bytes", T, ST, WRITE, NULL, "abc", 0, "3 bytes, shorter than the 8-byte"},
        {"empty file", T, ST, WRITE, NULL, "", 0, "0 bytes, shorter than the 8-byte"},
        {"header length over 100,000,000", T, ST, HEADER_LEN, NULL, NULL, 100000000,
         "exceeds the 100000000-byte limit"},
        {"header length beyond the file", T, ST, HEADER_LEN, NULL, NULL, 1000000, "points beyond the end"},
        {"header length into the JSON", T, ST, HEADER_LEN, NULL, NULL, -1000, "invalid JSON near byte 1472"},
        {"header not UTF-8 (overlong '/')", T, ST, EDIT, "\"pt\"", "\"p\xc0\xaf\"", 0, "its JSON is not valid UTF-8"},
        {"header not JSON", T, ST, EDIT, "\"F32\",\"shape\"", "\"F32\" \"shape\"", 0, "invalid JSON near byte"},
        {"shape not an array", T, ST, EDIT, "[512,64]", "\"512x64\"", 0, "needs \"dtype\", \"shape\" and two"},
        {"three data_offsets", T, ST, EDIT, "[0,131072]", "[0,131072,0]", 0, "needs \"dtype\", \"shape\" and two"},
        {"__metadata__ not strings", T, ST, EDIT, "\"pt\"", "1", 0, "__metadata__ must map strings to strings"},
        {"unknown dtype", T, ST, EDIT, "\"F32\"", "\"F31\"", 0, "unknown dtype \"F31\""},
        {"negative shape entry", T, ST, EDIT, "[512,64]", "[-512,64]", 0, "not a non-negative integer"},
        {"rank 9", T, ST, EDIT, "[512,64]", "[1,1,1,1,1,1,1,512,64]", 0, "rank 9, more than 8"},
        {"shape byte size overflows", T, ST, EDIT, "[512,64]", "[512,64,4294967296,4294967296]", 0,
         "overflows 64 bits"},
        {"data_offsets overflow", T, ST, EDIT, "[0,131072]", "[0,18446744073709551616]", 0,
         "not non-negative integers"},
        {"size disagrees with shape", T, ST, EDIT, "[512,64]", "[512,63]", 0, "spans 131072 bytes but its shape"},
        {"end before begin", T, ST, EDIT, "[0,131072]", "[131072,0]", 0, "end 0 before begin 131072"},
        {"gap before a tensor", T, ST, EDIT, "[0,131072]", "[4,131076]", 0,
         "starts at byte 4 of the data, expected 0 (a gap)"},
        {"overlapping tensors", T, ST, EDIT, "[131072,131328]", "[131068,131324]", 0, "(an overlap)"},
        {"truncated data", T, ST, RESIZE, NULL, NULL, -4, "(truncated file)"},
        {"trailing bytes", T, ST, RESIZE, NULL, NULL, 4, "(trailing bytes)"},
        {"duplicate tensor name", T, ST, EDIT, "\"model.norm.weight\"", "\"model.layers.0.input_layernorm.weight\"", 0,
         "key \"model.layers.0.input_layernorm.weight\" appears twice at the top level"},
        {"q_proj.bias, attention_bias false", T, ST, APPEND, "model.layers.0.self_attn.q_proj.bias",
         "\"dtype\":\"F32\",\"shape\":[128]", 512, "tensor 'model.layers.0.self_attn.q_proj.bias' adds a bias to "
         "'model.layers.0.self_attn.q_proj.weight', but Qwen3 has none there (\"attention_bias\" is false"},
        {"dtype I32 (unsupported)", T, ST, EDIT, "\"model.norm.weight\":{\"dtype\":\"F32\"",
         "\"model.norm.weight\":{\"dtype\":\"I32\"", 0, "dtype I32; only F32, F16 and BF16"},
        {"missing tensor", T, ST, EDIT, "\"model.norm.weight\"", "\"model.norx.weight\"", 0,
         "missing tensor 'model.norm.weight'"},
        /* config.json */
        {"config.json missing", T, CFG, REMOVE, NULL, NULL, 0, "config.json: cannot open: No such file"},
        {"config.json a directory", T, CFG, DIRECTORY, NULL, NULL, 0, "config.json: not a regular file"},
        {"config.json over 1 MiB", T, CFG, WRITE, NULL, huge, 0, "more than the 1 MiB such a file may have"},
        {"config.json nested 1000 deep", T, CFG, WRITE, NULL, deep_json(), 0, "JSON nested deeper than 64 levels"},
        {"config.json cut short", T, CFG, WRITE, NULL, "{\"vocab_size\": 512,", 0, "invalid JSON near byte 19"},
        {"config.json saved as UTF-16", T, CFG, WRITE, NULL, "\xFF\xFE{", 0,
         "config.json: is UTF-16 little-endian, not UTF-8 (it starts with the byte-order mark FF FE); save it as "
         "UTF-8"},
        {"vocab_size given twice", T, CFG, EDIT, "\"vocab_size\": 512", "\"vocab_size\": 512, \"vocab_size\": 600", 0,
         "config.json: key \"vocab_size\" appears twice at the top level"},
        {"no model_type", T, CFG, EDIT, "\"model_type\": \"qwen3\",", "", 0, "config.json: no \"model_type\"; add"},
        {"architectures LlamaForCausalLM", T, CFG, EDIT, "\"Qwen3ForCausalLM\"", "\"LlamaForCausalLM\"", 0,
         "config.json: \"architectures\" names \"LlamaForCausalLM\""},
        {"hidden_size zero", T, CFG, EDIT, "\"hidden_size\": 64", "\"hidden_size\": 0", 0,
         "\"hidden_size\" must be an integer in [1, 65536]"},
        {"layers negative", T, CFG, EDIT, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": -2", 0,
         "\"num_hidden_layers\" must be"},
        {"intermediate_size absurd", T, CFG, EDIT, "\"intermediate_size\": 128", "\"intermediate_size\": 1000000000000",
         0, "\"intermediate_size\" must be an integer in [1, 262144]"},
        {"integer overflows 64 bits", T, CFG, EDIT, "\"max_position_embeddings\": 128",
         "\"max_position_embeddings\": 100000000000000000000000", 0, "\"max_position_embeddings\" must be an integer"},
        {"rope_theta overflows a double", T, CFG, EDIT, "\"rope_theta\": 1000000.0", "\"rope_theta\": 1e999", 0,
         "\"rope_theta\" must be a number in (1, 1e+12)"},
        {"heads not a multiple of kv heads", T, CFG, EDIT, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3",
         0, "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
        {"vocab disagrees with the embedding", T, CFG, EDIT, "\"vocab_size\": 512", "\"vocab_size\": 600", 0,
         "shape [512, 64] but config.json implies [600, 64]"},
        {"head_dim disagrees with q_proj", T, CFG, EDIT, "\"head_dim\": 32", "\"head_dim\": 16", 0,
         "but config.json implies"},
        {"attention_bias true", T, CFG, EDIT, "\"attention_bias\": false", "\"attention_bias\": true", 0,
         "\"attention_bias\" is true; the q/k/v/o projection biases are not implemented"},
        {"hidden_act gelu", T, CFG, EDIT, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", 0,
         "\"hidden_act\" is \"gelu\"; only \"silu\" is supported"},
        {"hidden_act gelu_pytorch_tanh", T, CFG, EDIT, "\"hidden_act\": \"silu\"",
         "\"hidden_act\": \"gelu_pytorch_tanh\"", 0, "\"hidden_act\" is \"gelu_pytorch_tanh\"; only \"silu\""},
        {"hidden_act relu", T, CFG, EDIT, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"relu\"", 0,
         "\"hidden_act\" is \"relu\"; only \"silu\""},
        {"layer 1 slides (max_window_layers 1)", "tiny-sliding-full", CFG, EDIT, "\"max_window_layers\": 2",
         "\"max_window_layers\": 1", 0,
         "\"use_sliding_window\" is true and \"max_window_layers\" 1 < \"num_hidden_layers\" 2"},
        {"layer_types says sliding", T, CFG, EDIT, "\"full_attention\"", "\"sliding_attention\"", 0,
         "\"layer_types\"[0] is \"sliding_attention\"; only \"full_attention\""},
        {"use_sliding_window not a bool", T, CFG, EDIT, "\"use_sliding_window\": false", "\"use_sliding_window\": 0", 0,
         "\"use_sliding_window\" must be true or false"},
        {"untied without lm_head.weight", T, CFG, EDIT, "\"tie_word_embeddings\": true",
         "\"tie_word_embeddings\": false", 0, ": missing tensor 'lm_head.weight'"},
        /* shards and their index */
        {"shard name with ../", U, IDX, EDIT, "\"model-00004", "\"../model-00004", 0, "is not a plain file name"},
        {"shard name absolute", U, IDX, EDIT, "\"model-00004-of-00004.safetensors\"", "\"/etc/passwd\"", 0,
         "\"/etc/passwd\" for tensor 'lm_head.weight' is not a plain file name"},
        {"empty weight_map", U, IDX, WRITE, NULL, "{\"weight_map\": {}}", 0, "needs a non-empty \"weight_map\" object"},
        {"shard missing", U, SHARD, REMOVE, NULL, NULL, 0,
         "model-00004-of-00004.safetensors: cannot open: No such file"},
        {"shard a directory", U, SHARD, DIRECTORY, NULL, NULL, 0,
         "model-00004-of-00004.safetensors: not a regular file"},
        {"shard unreadable (mode 000)", U, SHARD, NO_READ, NULL, NULL, 0, "cannot open: Permission denied"},
        {"tensor in two shards", U, SHARD, EDIT, "\"lm_head.weight\"", "\"model.norm.weight\"", 0,
         "tensor 'model.norm.weight' appears in both"},
        {"weight_map names the wrong shard", U, IDX, EDIT, "\"model.norm.weight\": \"model-00003",
         "\"model.norm.weight\": \"model-00002", 0, "weight_map puts tensor 'model.norm.weight' in "
         "model-00002-of-00004.safetensors, but it is in model-00003-of-00004.safetensors"},
        {"weight_map leaves a tensor out", U, IDX, EDIT,
         "\"model.embed_tokens.weight\": \"model-00001-of-00004.safetensors\",", "", 0,
         "weight_map leaves out tensor 'model.embed_tokens.weight', which model-00001-of-00004.safetensors holds"},
        {"weight_map names a tensor no shard has", U, IDX, EDIT, "\"model.norm.weight\"", "\"model.norx.weight\"", 0,
         "weight_map puts tensor 'model.norx.weight' in model-00003-of-00004.safetensors, which does not hold it"},
    };
    int n = (int)(sizeof corpus / sizeof corpus[0]), made = 0;
    for (int i = 0; i < n; i++) {
        char *d = copy_fixture(corpus[i].fixture);
        if (corrupt(d, &corpus[i])) {
            note("%-34s    not made: running as root, which reads a mode-000 file (see 'shard a directory')",
                 corpus[i].what);
            remove_dir(d);
            continue;
        }
        expect_load_fails(d, corpus[i].what, corpus[i].msg);
        made++;
    }
    free(huge);
    summary("%d broken checkpoints written and rejected with the expected message (%d in the table)", made, n);
    expect(made >= 25, "only %d broken checkpoints", made);
}

/* ---------------------------------------------------------------------------------------------------- the CLI */
/* Runs a command; returns its exit code and its stdout+stderr in out. */
static int run_cmd(const char *cmd, char *out, size_t n) {
    char full[1024];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    size_t got = p ? fread(out, 1, n - 1, p) : 0;
    out[got] = 0;
    int st = p ? pclose(p) : -1;
    return st < 0 ? -1 : WEXITSTATUS(st);
}

/* The CLI under test: ./radixmlp, or $RADIXMLP_CLI (make test-asan sets it to the sanitized host-only build). */
static const char *cli(void) {
    const char *c = getenv("RADIXMLP_CLI");
    return c && *c ? c : "./radixmlp";
}

static int have_cli(void) {
    if (access(cli(), X_OK) == 0) return have_fixtures();
    char why[300];
    snprintf(why, sizeof why, "%s is not built (run `make`)", cli());
    skip_test(why);
    return 0;
}

/* A rejection as the CLI must give it: exit code want_rc (1: bad input, 2: a bad command line) and exactly one line,
 * "radixmlp: <why>", that contains msg. */
static void expect_one_line(const char *what, int want_rc, int rc, const char *out, const char *msg) {
    const char *nl = strchr(out, '\n');
    expect(rc == want_rc && !strncmp(out, "radixmlp: ", 10) && nl && !nl[1] && strstr(out, msg),
           "%s: exit %d, want %d and one line with '%s':\n%s", what, rc, want_rc, msg, out);
    note("%-28s exit %d, %.*s", what, rc, (int)strcspn(out, "\n"), out);
}
static void expect_one_line_error(const char *what, int rc, const char *out, const char *msg) {
    expect_one_line(what, 1, rc, out, msg);
}

/* A loader test, here because it reads what qwen3_load prints on stderr through the CLI. Tensors that config.json
 * does not use and that change nothing it computes (an unknown name; a third layer's weights, and a bias of one, in
 * a 2-layer config) load, as transformers loads them, with one warning line: the count and the first three names. */
static void test_unused_tensors_load_with_one_warning(void) {
    if (!have_cli()) return;
    static const struct { const char *name, *dtype_shape; size_t bytes; } extra[] = {
        {"foo.bar", "\"dtype\":\"F32\",\"shape\":[4]", 16},
        {"model.layers.2.input_layernorm.weight", "\"dtype\":\"F32\",\"shape\":[64]", 256},
        {"model.layers.2.mlp.up_proj.weight", "\"dtype\":\"F32\",\"shape\":[128,64]", 32768},
        {"model.layers.2.self_attn.q_norm.weight", "\"dtype\":\"F32\",\"shape\":[32]", 128},
        {"model.layers.2.self_attn.q_proj.bias", "\"dtype\":\"F32\",\"shape\":[128]", 512},
    };
    char *d = copy_fixture("tiny-tied"), cmd[1024], out[8192];
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        append_tensor_copy(d, extra[i].name, extra[i].dtype_shape, 0, extra[i].bytes);
    Qwen3Model m;
    int rc = qwen3_load(&m, d);
    expect(rc == 0 && m.n_tensors == 29, "tiny-tied + 5 unused tensors: rc %d, '%s'", rc, rc ? radix_error() : "");
    if (rc == 0) qwen3_free(&m);
    snprintf(cmd, sizeof cmd, "%s --check --model %s", cli(), d);
    rc = run_cmd(cmd, out, sizeof out);
    int warnings = 0;
    for (const char *at = out; (at = strstr(at, "warning")); at++) warnings++;
    const char *line = strstr(out, "radixmlp: warning: ");
    const char *want = "5 tensors that config.json does not use, ignored as transformers ignores them: 'foo.bar', "
                       "'model.layers.2.input_layernorm.weight', 'model.layers.2.mlp.up_proj.weight', ...\n";
    expect(rc == 0 && warnings == 1 && line && strstr(line, want),
           "--check: exit %d, %d warnings, want one with '%s':\n%s", rc, warnings, want, out);
    note("exit %d, %.*s", rc, line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    remove_dir(d);
}

static void test_cli(void) {
    if (!have_cli()) return;
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "%s --check --model %s/tiny-untied", cli(), fixtures());
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0 && strstr(out, "every tensor the config needs is present"),
           "--check on a good model: rc %d\n%s", rc, out);
    Qwen3Model m;                                        /* the parameter count, in a unit that fits */
    char want[64], path[512];
    snprintf(path, sizeof path, "%s/tiny-untied", fixtures());
    if (qwen3_load(&m, path) == 0) {
        long long params = 0;
        for (int i = 0; i < m.n_tensors; i++) {
            long long numel = 1;
            for (int k = 0; k < m.tensors[i].rank; k++) numel *= m.tensors[i].shape[k];
            params += numel;
        }
        snprintf(want, sizeof want, "%d tensors, %.1f K parameters,", m.n_tensors, params / 1e3);
        expect(params >= 1000 && params < 1000000 && strstr(out, want), "--check: want '%s' (%lld parameters):\n%s",
               want, params, out);
        note("--check on tiny-untied: '%s' (%lld parameters)", want, params);
        qwen3_free(&m);
    } else expect(0, "load tiny-untied: %s", radix_error());
    char *d = copy_fixture("tiny-tied");
    edit_file(d, "config.json", "\"vocab_size\": 512", "\"vocab_size\": 600");
    snprintf(cmd, sizeof cmd, "%s --check --model %s", cli(), d);
    rc = run_cmd(cmd, out, sizeof out);
    expect_one_line_error("--check on a bad model", rc, out, "config.json implies [600, 64]");
    remove_dir(d);
    snprintf(cmd, sizeof cmd, "%s --model %s/tiny-bf16 --tokens %s/batches/mixed.txt --cpu --mode radix",
             cli(), fixtures(), fixtures());
    rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0 && strstr(out, "sequence 4: next token"), "running a checkpoint: rc %d\n%s", rc, out);
    const char *bad[] = {"--mode fast", "--model", "--frobnicate", "--tokens x.txt", "--last-only", "--embed",
                         "--embed e.f32 --check --model m", "--model m --tokens t --embed e.f32 --last-only",
                         "--model m --tokens t --embed e.f32 --dump-logits l.f32"};
    for (int i = 0; i < 9; i++) {
        snprintf(cmd, sizeof cmd, "%s %s", cli(), bad[i]);
        rc = run_cmd(cmd, out, sizeof out);
        expect_one_line(bad[i], 2, rc, out, "radixmlp: ");
    }
    snprintf(cmd, sizeof cmd, "%s --frobnicate", cli());  /* one line that points at --help, not the whole usage */
    expect_one_line("an unknown flag", 2, run_cmd(cmd, out, sizeof out), out, "unknown argument '--frobnicate' "
                    "(radixmlp --help lists them)");
}

/* args [768] = pattern (at most 511 characters) with FIX replaced by the fixtures folder, OUT by the output file. */
static void cli_args(char *args, const char *pattern, const char *out_file) {
    size_t at = 0;
    for (const char *p = pattern; *p && at < 512;)
        if (!strncmp(p, "FIX", 3) || !strncmp(p, "OUT", 3)) {
            at += (size_t)snprintf(args + at, 768 - at, "%s", *p == 'F' ? fixtures() : out_file);
            p += 3;
        } else args[at++] = *p++;
    args[at] = 0;
}

/* Every flag that does not apply to the action the command line chose is an error (exit 2, one line), and nothing
 * runs: the output file a wrongly placed flag names is never written. */
static void test_cli_rejects_flags_of_other_actions(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX", cmd[1024], out[4096], f[512];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    snprintf(f, sizeof f, "%s/out.f32", dir);
    const char *M = "--model FIX/tiny-bf16", *T = "--tokens FIX/batches/mixed.txt",
               *R = "--requests FIX/batches/mixed.txt";
    const struct { const char *a, *b, *c, *msg; } cases[] = {
        {R, M, "--embed OUT", "--embed does not apply to --requests FILE; it goes with --model DIR --tokens FILE"},
        {R, M, "--last-only", "--last-only does not apply to --requests FILE"},
        {"--check", M, "--dump-logits OUT", "--dump-logits does not apply to --check"},
        {"--check", M, T, "--tokens does not apply to --check"},
        {"--show-index", T, "--cpu", "--cpu does not apply to --show-index"},
        {"--show-index", T, M, "--model does not apply to --show-index"},
        {M, T, "--show-cache", "--show-cache does not apply to --model DIR --tokens FILE; it goes with --requests"},
        {M, T, "--batch 2", "--batch does not apply to --model DIR --tokens FILE; it goes with --requests FILE"},
        {"--dump-logits OUT", "", "", "--dump-logits does not apply to the demo"},
        {"--check", "--show-index", R, "choose one of --check, --show-index and --requests"},
        {M, T, "--cpu --cpu", "--cpu is given twice"},
        {M, T, "--generate 4", "--generate does not apply to --model DIR --tokens FILE; it goes with --requests FILE"},
        {R, M, "--out OUT", "--out goes with --generate N"},
        {R, M, "--temperature 0.5", "--temperature goes with --generate N"},
        {R, M, "--ignore-eos", "--ignore-eos goes with --generate N"},
        {R, M, "--generate 4 --top-k 5", "--top-k applies to sampling: give --temperature T above 0"},
        {R, M, "--generate 4 --temperature 0 --seed 3", "--seed applies to sampling: give --temperature T above 0"},
        {R, M, "--generate 4 --top-p 0.5 --out OUT", "--top-p applies to sampling: give --temperature T above 0"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char pattern[512], args[768];
        snprintf(pattern, sizeof pattern, "%s %s %s", cases[i].a, cases[i].b, cases[i].c);
        cli_args(args, pattern, f);
        snprintf(cmd, sizeof cmd, "%s %s", cli(), args);
        expect_one_line(args, 2, run_cmd(cmd, out, sizeof out), out, cases[i].msg);
        expect(access(f, F_OK) != 0, "'%s' wrote %s", args, f);
        unlink(f);
    }
    summary("%d command lines with a flag of another action: exit 2, one line each, nothing written", n);
    remove_dir(dir);
}

/* Output paths are checked before the work: a directory, or a file in a folder that does not exist, is refused with
 * one line before the model is even loaded (the forward would otherwise run first, and its summary print). */
static void test_cli_checks_output_paths_first(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX", cmd[1024], out[4096];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const struct { const char *what, *args, *msg; } cases[] = {
        {"--dump-logits a directory", "--tokens %s/batches/mixed.txt --dump-logits %s", "cannot write: Is a directory"},
        {"--embed in no folder", "--tokens %s/batches/mixed.txt --embed %s/none/e.f32", "cannot write: No such file"},
        {"--stats a directory", "--requests %s/batches/mixed.txt --stats %s", ": cannot write: Is a directory"},
        {"--dump-logits in no folder", "--requests %s/batches/mixed.txt --dump-logits %s/none/l.f32",
         "cannot write: No such file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, cases[i].args, fixtures(), dir);
        snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-bf16 %s", cli(), fixtures(), args);
        expect_one_line_error(cases[i].what, run_cmd(cmd, out, sizeof out), out, cases[i].msg);
    }
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-bf16 --tokens %s/batches/mixed.txt --dump-logits %s/l.f32",
             cli(), fixtures(), fixtures(), dir);
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0 && strstr(out, "wrote "), "a writable --dump-logits: exit %d\n%s", rc, out);
    remove_dir(dir);
}

/* No input may hang the program: a FIFO in place of config.json, model.safetensors or the tokens file is refused at
 * once (open() of a FIFO waits for a writer unless told not to). `timeout 60` ends a hang: exit 124, a failure. */
static void test_cli_fifo_inputs_are_refused_not_waited_on(void) {
    if (!have_cli()) return;
    const char *names[3] = {"config.json", "model.safetensors", "t.txt"};
    for (int i = 0; i < 3; i++) {
        char *d = copy_fixture("tiny-tied"), p[512], cmd[1024], out[4096];
        snprintf(p, sizeof p, "%s/%s", d, names[i]);
        unlink(p);
        if (mkfifo(p, 0644)) { expect(0, "mkfifo %s: %s", p, strerror(errno)); remove_dir(d); continue; }
        if (i < 2) write_file(d, "t.txt", "1 2 3\n", 6);
        snprintf(cmd, sizeof cmd, "timeout 60 %s --cpu --model %s --tokens %s/t.txt", cli(), d, d);
        char what[64];
        snprintf(what, sizeof what, "a FIFO as %s", names[i]);
        expect_one_line_error(what, run_cmd(cmd, out, sizeof out), out, "not a regular file");
        remove_dir(d);
    }
}

/* --last-only and --embed through the CLI (the C reference, --cpu): the dumps' shapes, and their values against the
 * full logits' last rows (bit for bit) and transformers' pooled embeddings (1e-4 of max|hf|, as in the reference
 * group). */
static void test_cli_last_only_and_embed(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX", cmd[1024], out[16384], p[512];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const char *files[3] = {"full.f32", "last.f32", "emb.f32"};
    const char *args[3] = {"--model %s/tiny-tied --dump-logits %s/full.f32",
                           "--model %s/tiny-tied --last-only --dump-logits %s/last.f32",
                           "--model %s/tiny-embedding --embed %s/emb.f32"};
    float *dumps[3] = {NULL, NULL, NULL};
    size_t lens[3] = {0, 0, 0}, want[3] = {27 * 512, 5 * 512, 5 * 32};   /* mixed.txt: N = 27, 5 sequences */
    for (int i = 0; i < 3; i++) {
        char a[512];
        snprintf(a, sizeof a, args[i], fixtures(), dir);
        snprintf(cmd, sizeof cmd, "%s --cpu --mode compact --tokens %s/batches/mixed.txt %s", cli(), fixtures(), a);
        int rc = run_cmd(cmd, out, sizeof out);
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        dumps[i] = (float *)read_file(p, &lens[i]);
        expect(rc == 0 && dumps[i] && lens[i] == want[i] * sizeof(float), "'%s': exit %d, %zu bytes (want %zu)\n%s",
               cmd, rc, lens[i], want[i] * sizeof(float), out);
        char *wrote = strstr(out, "wrote ");
        if (rc == 0 && wrote) note("%.*s", (int)strcspn(wrote, "\n"), wrote);
        unlink(p);
    }
    rmdir(dir);
    if (!test_failed) {
        static const int last_rows[5] = {9, 15, 16, 20, 26};    /* cu_seqlens[s+1] - 1 for lines of 10, 6, 1, 4, 6 */
        for (int s = 0; s < 5; s++)
            memcpy(dumps[0] + (size_t)s * 512, dumps[0] + (size_t)last_rows[s] * 512, 512 * sizeof(float));
        expect_identical("--last-only vs the full dump's last rows", dumps[1], dumps[0], 5 * 512);
        snprintf(p, sizeof p, "%s/embeddings/tiny-embedding-mixed.f32", fixtures());
        float *hf = (float *)read_file(p, &lens[0]);
        double d = 0.0, tol = 0.0;
        char why[WHY] = "";
        expect(hf && close_verdict(dumps[2], hf, 5 * 32, 1e-4, &d, &tol, why), "--embed vs transformers: %s",
               hf ? why : "fixture missing");
        summary("--last-only: [5, 512], the full dump's last rows bit for bit; --embed: [5, 32], max|diff| %.3g from "
                "transformers' pooled embeddings (tol %.3g)", d, tol);
        free(hf);
    }
    for (int i = 0; i < 3; i++) free(dumps[i]);
    char *d = untied_embedding_copy();                   /* no LM head: logits are refused, with one line */
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s --tokens %s/batches/mixed.txt", cli(), d, fixtures());
    expect_one_line_error("logits of an embedding model", run_cmd(cmd, out, sizeof out), out, "has no LM head");
    remove_dir(d);
}
/* --score YES,NO: P(yes) of each sequence of fixtures/batches/rerank.txt (7 reranking pairs: a shared template head,
 * two queries, passages of their own, a shared tail, one pair repeated) against transformers' model-card scores
 * (fixtures/rerank/MODEL-rerank.txt, make_fixtures.py --rerank, YES 300 and NO 301) on the three tiny checkpoints.
 * The tolerance follows from the logits': they are within 1e-4 x max|logit| of transformers' (reference group), and
 * max|logit| of these last tokens is below 3.5, so yes - no moves by at most 7e-4 and P, whose slope is at most 1/4,
 * by 1.75e-4: tol 2e-4. The --out file is the same bytes in every mode (baseline, radix, compact); on tiny-bf16 also
 * at 1 and 2 threads, on the definition path and the widest (RADIXMLP_CPU); without --out the same numbers are the
 * run's text. Wrong uses are refused with exit 2 and one line (an id beyond the model's vocabulary, found in its
 * config.json, with exit 1), and write nothing. */
static void test_cli_score_matches_transformers_and_every_mode(void) {
    if (!have_cli()) return;
    static const char *models[3] = {"tiny-tied", "tiny-untied", "tiny-bf16"};
    static const char *modes[3] = {"baseline", "radix", "compact"};
    static const char *paths[2] = {"definition", "auto"};
    char dir[] = "/tmp/radixmlp-cli-XXXXXX", cmd[1024], out[8192], p[512];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    snprintf(p, sizeof p, "%s/s.txt", dir);
    double worst = 0;
    int runs = 0;
    for (int mi = 0; mi < 3 && !test_failed; mi++) {
        char *first = NULL, want_path[512];
        size_t first_len = 0, len;
        for (int k = 0; k < (mi == 2 ? 12 : 3) && !test_failed; k++) {   /* 3 modes (x 1, 2 threads x 2 paths) */
            snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=%d RADIXMLP_CPU=%s %s --cpu --model %s/%s --tokens "
                     "%s/batches/rerank.txt --mode %s --score 300,301 --out %s", 1 + k / 3 % 2, paths[k / 6], cli(),
                     fixtures(), models[mi], fixtures(), modes[k % 3], p);
            int rc = run_cmd(cmd, out, sizeof out);
            char *got = (char *)read_file(p, &len);
            expect(rc == 0 && got && strstr(out, "wrote ") && !strstr(out, "P(yes) ="), "'%s': exit %d\n%s", cmd, rc,
                   out);
            if (!first) {
                first = got;
                first_len = got ? len : 0;
                continue;
            }
            expect(got && len == first_len && !memcmp(got, first, len), "%s, %s, %d thread(s), %s: --out differs "
                   "from baseline's:\n%s---\n%s", models[mi], modes[k % 3], 1 + k / 3 % 2, paths[k / 6],
                   got ? got : "(none)", first);
            free(got);
            unlink(p);
            runs++;
        }
        snprintf(want_path, sizeof want_path, "%s/rerank/%s-rerank.txt", fixtures(), models[mi]);
        char *want = (char *)read_file(want_path, &len), *a = first, *b = want;
        int n = 0;
        double d = 0;
        for (char *ea, *eb; a && b && *b; a = ea, b = eb, n++) {
            double x = strtod(a, &ea), y = strtod(b, &eb);
            if (ea == a || eb == b) break;
            d = fmax(d, fabs(x - y));
        }
        expect(want && n == 7 && a && strspn(a, "\n") == strlen(a) && d <= 2e-4,
               "%s: %d scores of 7, max|ours - transformers| %.3g (tol 2e-4)", models[mi], n, d);
        note("%-11s 7 scores, max|P(yes) - transformers' model-card P(yes)| = %.3g (tol 2e-4)", models[mi], d);
        worst = fmax(worst, d);
        snprintf(cmd, sizeof cmd, "%s --cpu --model %s/%s --tokens %s/batches/rerank.txt --score 300,301", cli(),
                 fixtures(), models[mi], fixtures());
        int rc = run_cmd(cmd, out, sizeof out);
        char *t = out;
        a = first;
        for (int s = 0; rc == 0 && a && s < 7; s++) {   /* the text: "sequence s: P(yes) = " and the file's line */
            char head[48];
            size_t nl = strcspn(a, "\n");
            snprintf(head, sizeof head, "sequence %d: P(yes) = ", s);
            t = strstr(t, head);
            expect(t && !strncmp(t + strlen(head), a, nl + 1), "without --out: no line '%s%.*s'", head, (int)nl, a);
            if (!t) break;
            a += nl + 1;
        }
        expect(rc == 0, "'%s': exit %d\n%s", cmd, rc, out);
        free(first);
        free(want);
    }
    const char *T = "--tokens FIX/batches/rerank.txt", *M = "--model FIX/tiny-tied";
    const struct { const char *a, *b, *msg; } bad[] = {
        {T, "--score 300", "--score takes two token ids, YES,NO"},
        {T, "--score 300,301,302", "--score takes two token ids, YES,NO"},
        {T, "--score 300,-1", "--score takes two token ids, YES,NO"},
        {T, "--score yes,no", "--score takes two token ids, YES,NO"},
        {T, "--score 300,300", "YES and NO are one id"},
        {T, "--score 300,301 --embed OUT", "it takes no --embed"},
        {T, "--score 300,301 --dump-logits OUT", "--dump-logits only with --last-only"},
        {T, "--out OUT", "--out goes with --score YES,NO"},
        {T, "--score 300,301 --generate 4", "--generate does not apply to --model DIR --tokens FILE"},
        {"--requests FIX/batches/rerank.txt", "--score 300,301", "--score does not apply to --requests FILE"},
    };
    int n_bad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < n_bad; i++) {
        char pattern[512], args[768];
        snprintf(pattern, sizeof pattern, "%s %s %s", M, bad[i].a, bad[i].b);
        cli_args(args, pattern, p);
        snprintf(cmd, sizeof cmd, "%s --cpu %s", cli(), args);
        expect_one_line(bad[i].b, 2, run_cmd(cmd, out, sizeof out), out, bad[i].msg);
        expect(access(p, F_OK) != 0, "'%s' wrote %s", args, p);
        unlink(p);
    }
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --tokens %s/batches/rerank.txt --score 300,512 --out %s",
             cli(), fixtures(), fixtures(), p);                     /* found in config.json: bad data, exit 1 */
    expect_one_line_error("--score 300,512", run_cmd(cmd, out, sizeof out), out,
                          "--score 300,512: the NO id 512 is not below this model's vocabulary size 512");
    expect(access(p, F_OK) != 0, "--score 300,512 wrote %s", p);
    remove_dir(dir);
    summary("--score 300,301 on 3 checkpoints: max|P(yes) - transformers'| %.3g (tol 2e-4); %d runs (3 modes; on "
            "tiny-bf16 x 1, 2 threads x definition, widest path) gave the same --out bytes as baseline, and the same "
            "numbers as the text without --out; %d wrong uses refused with exit 2, an id beyond the vocabulary with 1, "
            "nothing written", worst, runs, n_bad);
}

/* Batches of copies, as a reranking batch of duplicates: more sequences than compact rows (S > N'), where the LM
 * head of --last-only packs S rows and the layers N'. Files of 13, 14, 15 and 16 lines of "5 6 7 8" and 64 lines of
 * "5"; every mode, full and --last-only, 1 and 2 threads (OMP_NUM_THREADS): exit 0, and the dump equal to the
 * baseline's with 1 thread, bit for bit. Then --requests: 16 copies at --batch 16 and 20000 at --batch 1024, each
 * request's logits the --last-only logits of one copy alone. (A buffer sized for N' rows and filled with S was a heap
 * overflow here: ASan's build of this test, make test-asan, names it.) */
static void test_cli_copies_more_sequences_than_rows(void) {
    if (!have_cli()) return;
    static const struct { int lines; const char *line; } files[] = {
        {13, "5 6 7 8"}, {14, "5 6 7 8"}, {15, "5 6 7 8"}, {16, "5 6 7 8"}, {64, "5"}};
    char dir[] = "/tmp/radixmlp-copies-XXXXXX", cmd[2048], out[4096], p[512], base[512];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    int runs = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0] && !test_failed; f++) {
        snprintf(p, sizeof p, "%s/copies.txt", dir);
        FILE *t = fopen(p, "w");
        for (int i = 0; t && i < files[f].lines; i++) fprintf(t, "%s\n", files[f].line);
        if (!t || fclose(t)) { expect(0, "%s: cannot write", p); break; }
        for (int last = 0; last < 2; last++) {
            float *want = NULL;
            size_t n_want = 0;
            for (int k = 0; k < 6 && !test_failed; k++) {             /* baseline, radix, compact x 1, 2 threads */
                const char *mode = rx_mode_name((RxMode)(k % 3));
                snprintf(base, sizeof base, "%s/%s-%d.f32", dir, mode, 1 + k / 3);
                snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=%d %s --cpu --model %s/tiny-tied --tokens %s --mode %s%s "
                         "--dump-logits %s", 1 + k / 3, cli(), fixtures(), p, mode, last ? " --last-only" : "", base);
                int rc = run_cmd(cmd, out, sizeof out);
                size_t n = 0;
                float *got = (float *)read_file(base, &n);
                unlink(base);
                expect(rc == 0 && got && n > 0, "'%s': exit %d\n%s", cmd, rc, out);
                if (k == 0) {
                    want = got;
                    n_want = n;
                    continue;
                }
                char what[160];
                snprintf(what, sizeof what, "%d x '%s'%s, %s, %d threads vs baseline, 1 thread", files[f].lines,
                         files[f].line, last ? ", --last-only" : "", mode, 1 + k / 3);
                expect(n == n_want, "%s: %zu bytes, want %zu", what, n, n_want);
                if (got && want && n == n_want) expect_identical(what, got, want, n / sizeof(float));
                free(got);
                runs++;
            }
            free(want);
        }
    }
    static const int serve[][2] = {{16, 16}, {20000, 1024}};        /* requests, --batch */
    float *one = NULL;
    size_t n_one = 0;
    snprintf(p, sizeof p, "%s/one.txt", dir);
    FILE *t = fopen(p, "w");
    if (t) fprintf(t, "5 6 7 8\n");
    if (!t || fclose(t)) expect(0, "%s: cannot write", p);
    snprintf(base, sizeof base, "%s/one.f32", dir);
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --tokens %s --last-only --dump-logits %s", cli(),
             fixtures(), p, base);
    expect(run_cmd(cmd, out, sizeof out) == 0 && (one = (float *)read_file(base, &n_one)) && n_one == 512 * 4,
           "'%s'\n%s", cmd, out);
    for (int s = 0; s < 2 && one && !test_failed; s++) {
        snprintf(p, sizeof p, "%s/requests.txt", dir);
        t = fopen(p, "w");
        for (int i = 0; t && i < serve[s][0]; i++) fprintf(t, "5 6 7 8\n");
        if (!t || fclose(t)) { expect(0, "%s: cannot write", p); break; }
        snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s --batch %d --dump-logits %s/r.f32",
                 cli(), fixtures(), p, serve[s][1], dir);
        int rc = run_cmd(cmd, out, sizeof out);
        snprintf(base, sizeof base, "%s/r.f32", dir);
        size_t n = 0;
        float *got = (float *)read_file(base, &n);
        expect(rc == 0 && got && n == (size_t)serve[s][0] * 512 * 4, "'%s': exit %d, %zu bytes\n%s", cmd, rc, n, out);
        int same = 0;
        for (int r = 0; got && n == (size_t)serve[s][0] * 512 * 4 && r < serve[s][0]; r++)
            same += !memcmp(got + (size_t)r * 512, one, 512 * sizeof(float)) && isfinite(one[0]);
        expect(same == serve[s][0], "--requests %d copies at --batch %d: %d of them equal one copy's --last-only "
               "logits", serve[s][0], serve[s][1], same);
        free(got);
        unlink(base);
    }
    free(one);
    remove_dir(dir);
    summary("copies (13 to 16 x 4 tokens, 64 x 1): %d runs of radix and compact, full and --last-only, 1 and 2 "
            "threads, equal the baseline bit for bit; --requests 16 copies at --batch 16 and 20000 at --batch 1024: "
            "every request's logits those of one copy alone", runs);
}


/* --show-index on the paper's toy example prints the index maps of Section 3.2, and needs no model. */
/* rx_cpu_path and $RADIXMLP_CPU: "auto" is the widest path the CPU has; a name it does not know, or a path the CPU
 * cannot run, is refused with the reason and changes nothing. The programs check $RADIXMLP_CPU before any work: a
 * bad one is one line and exit 2 (radixmlp, bench), a good one runs. */
static void test_cpu_path_choice_and_env(void) {
    const char *paths[RX_PATHS], *path0 = rx_cpu_path(NULL), *got;
    char list[RX_LIST], cmd[1024], out[4096];
    int n = cpu_paths(paths, list);
    got = rx_cpu_path("auto");
    expect(got && !strcmp(got, paths[n - 1]), "auto picks %s, not the widest path this CPU has (%s)", got, list);
    got = rx_cpu_path("definition");
    expect(got && !strcmp(got, "definition") && !strcmp(paths[0], "definition"), "rx_cpu_path(\"definition\"): %s, "
           "'%s'; paths {%s}", got, radix_error(), list);
    rx_cpu_path("portable");
    got = rx_cpu_path("avx3");
    expect(!got && strstr(radix_error(), "no CPU path \"avx3\"") && !strcmp(rx_cpu_path(NULL), "portable"),
           "rx_cpu_path(\"avx3\"): %s, '%s', then %s in effect", got, radix_error(), rx_cpu_path(NULL));
    if (n < RX_PATHS) {                                /* a path the CPU lacks (asked again: cpu_paths noted why) */
        got = rx_cpu_path("avx512");
        expect(!got && strstr(radix_error(), "this CPU cannot run the avx512 path") &&
               !strcmp(rx_cpu_path(NULL), "portable"), "rx_cpu_path(\"avx512\") without AVX-512: %s, '%s'", got,
               radix_error());
    }
    rx_cpu_path(path0);
    if (!have_cli()) return;
    snprintf(cmd, sizeof cmd, "RADIXMLP_CPU=avx3 %s --show-index --tokens %s/batches/mixed.txt", cli(), fixtures());
    expect_one_line("RADIXMLP_CPU=avx3 radixmlp", 2, run_cmd(cmd, out, sizeof out), out,
                    "RADIXMLP_CPU: no CPU path \"avx3\" (auto, definition, portable, avx2 or avx512)");
    snprintf(cmd, sizeof cmd, "RADIXMLP_CPU=portable %s --show-index --tokens %s/batches/mixed.txt", cli(), fixtures());
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0, "'%s': exit %d:\n%s", cmd, rc, out);
    char dump[2][64];
    for (int k = 0; k < 2; k++) {                      /* the definition's logits and the default path's: the same */
        snprintf(dump[k], sizeof dump[k], "/tmp/radixmlp-cpu-%s-%d.f32", k ? "auto" : "definition", (int)getpid());
        snprintf(cmd, sizeof cmd, "RADIXMLP_CPU=%s %s --model %s/tiny-tied --tokens %s/batches/mixed.txt --cpu "
                 "--mode radix --dump-logits %s", k ? "auto" : "definition", cli(), fixtures(), fixtures(), dump[k]);
        rc = run_cmd(cmd, out, sizeof out);
        expect(rc == 0, "'%s': exit %d:\n%s", cmd, rc, out);
    }
    size_t n_def = 0, n_auto = 0;
    uint8_t *def = read_file(dump[0], &n_def), *fast = read_file(dump[1], &n_auto);
    expect(def && fast && n_def > 0 && n_def == n_auto && !memcmp(def, fast, n_def), "RADIXMLP_CPU=definition and "
           "auto: logits files of %zu and %zu bytes, not the same bits", n_def, n_auto);
    free(def);
    free(fast);
    remove(dump[0]);
    remove(dump[1]);
    int benches = access("./bench", X_OK) == 0;
    if (benches) {
        rc = run_cmd("RADIXMLP_CPU=avx3 ./bench --table 5", out, sizeof out);
        expect(rc == 2 && strstr(out, "bench: RADIXMLP_CPU: no CPU path \"avx3\"") && !strchr(out, '\n')[1],
               "RADIXMLP_CPU=avx3 ./bench --table 5: exit %d, want 2 and one line:\n%s", rc, out);
    } else note("./bench is not built: its check of RADIXMLP_CPU is not run");
    summary("paths {%s}; auto = %s; an unknown name%s refused, the path unchanged; RADIXMLP_CPU=avx3: exit 2, one "
            "line, from radixmlp%s; RADIXMLP_CPU=definition radixmlp --cpu: the default path's logits, bit for bit",
            list, paths[n - 1], n < RX_PATHS ? " and a path the CPU lacks" : "", benches ? " and bench" : "");
}

static void test_show_index_prints_toy_example(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-idx-XXXXXX", cmd[1024], out[4096];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    write_file(dir, "toy.txt", "1 2 3\n1 2 4\n", 12);
    snprintf(cmd, sizeof cmd, "%s --show-index --tokens %s/toy.txt", cli(), dir);
    int rc = run_cmd(cmd, out, sizeof out);
    const char *gather = "I_gather  [N']  compact row -> its first original row = [0, 1, 2, 5]\n",
               *scatter = "I_scatter [N]   original row -> its compact row       = [0, 1, 2, 0, 1, 3]\n";
    expect(rc == 0 && strstr(out, gather) && strstr(out, scatter) &&
           strstr(out, "`-- c0..c1: 2 tokens @0..1  (2 seqs)"),
           "'%s': exit %d, want the toy example's trie, gather [0,1,2,5] and scatter [0,1,2,0,1,3]:\n%s", cmd, rc, out);
    snprintf(cmd, sizeof cmd, "%s --show-index", cli());
    int rc_bad = run_cmd(cmd, out, sizeof out);
    expect(rc_bad == 2, "'%s' without --tokens: exit %d, expected 2", cmd, rc_bad);
    note("[1,2,3], [1,2,4]: exit %d, gather [0, 1, 2, 5] and scatter [0, 1, 2, 0, 1, 3] printed as expected; "
         "without --tokens: exit %d", rc, rc_bad);
    /* a large batch: the maps are cut to their first 64 entries, and the output says so */
    static char big[20000];
    size_t at = 0;
    for (int s = 0; s < 100; s++) {                      /* 50 equal lines of 20 tokens, then 50 distinct ones */
        for (int i = 0; i < 20; i++)
            at += (size_t)snprintf(big + at, sizeof big - at, "%d ", s < 50 ? i : 1000 + s * 20 + i);
        big[at - 1] = '\n';
    }
    write_file(dir, "big.txt", big, at);
    snprintf(cmd, sizeof cmd, "%s --show-index --tokens %s/big.txt", cli(), dir);
    static char bigout[65536];
    rc = run_cmd(cmd, bigout, sizeof bigout);
    size_t longest = 0;
    for (const char *p = bigout; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != 0))
        if (strcspn(p, "\n") > longest) longest = strcspn(p, "\n");
    expect(rc == 0 && strstr(bigout, ", ...]  (the first 64 of 2000 entries)") &&
           strstr(bigout, ", ...]  (the first 64 of 1020 entries)") && longest < 600,
           "--show-index on 2000 tokens: exit %d, longest line %zu bytes, want both maps cut to 64 entries:\n%.2000s",
           rc, longest, bigout);
    note("2000 tokens (N' = 1020): exit %d, each map cut to its first 64 entries, longest line %zu bytes", rc, longest);
    remove_dir(dir);
}

/* The docs as a fresh clone reads them:
 * - every output file a shell command in README.md, docs/tutorial.md or docs/exercises.md names (--dump-logits,
 *   --embed, --stats, --csv, --svg, > redirects) lies in /tmp, not in the repository (the README's toy.txt,
 *   logits.f32 and t4-paper.svg did), except a committed figure under docs/ that the command remakes;
 * - no line cites a path outside the repository (a clone holds no ../shared);
 * - tutorial section 21's first Part II command shows a hit (with mixed.txt and page size 16, every request was
 *   shorter than one page: hit rate 0.0%);
 * - the README names every fixtures/tiny-* checkpoint (it said "three" of eight). */
static void test_docs_commands_write_to_tmp_and_part2_hits(void) {
    if (!have_cli()) return;
    const char *docs[4] = {"README.md", "docs/tutorial.md", "docs/exercises.md", "docs/results.md"};
    const char *outs[6] = {"--dump-logits ", "--embed ", "--stats ", "--csv ", "--svg ", "> "};
    int checked = 0;
    char first_part2[1024] = "";
    for (int k = 0; k < 4; k++) {
        size_t len;
        char *text = (char *)read_file(docs[k], &len);
        if (!text) { skip_test("the docs are not in the working directory"); return; }
        int in_code = 0, section = 0;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (!strncmp(line, "```", 3)) in_code = !in_code;
            if (!strncmp(line, "## ", 3)) section = atoi(line + 3);
            expect(!strstr(line, "../shared") && !strstr(line, "/work/"), "%s cites a path outside the repository: %s",
                   docs[k], line);
            const char *cmd = line + strspn(line, " ");      /* a shell command, or the continuation of one */
            if (!in_code || (strncmp(cmd, "./", 2) && strncmp(cmd, "--", 2) && strncmp(cmd, "printf ", 7) &&
                             !strstr(cmd, "&& ./"))) continue;       /* `make bench && ./bench ...` too */
            for (int o = 0; o < 6; o++)
                for (const char *p = strstr(line, outs[o]); p; p = strstr(p + 1, outs[o])) {
                    const char *path = p + strlen(outs[o]);
                    expect(!strncmp(path, "/tmp/", 5), "%s: %swrites %.*s into the repository (a tracked file)",
                           docs[k], outs[o], (int)strcspn(path, " "), path);
                    checked++;
                }
            if (k == 1 && section == 21 && !first_part2[0] && !strncmp(line, "./radixmlp ", 11) &&
                strstr(line, "--requests"))
                snprintf(first_part2, sizeof first_part2, "%s %.*s", cli(), (int)strcspn(line + 11, "#"), line + 11);
        }
        free(text);
    }
    size_t len;                                         /* the README names every fixture checkpoint ("three": 8) */
    char *readme = (char *)read_file(docs[0], &len);
    DIR *d = opendir(fixtures());
    int named = 0, folders = 0;
    for (struct dirent *e; readme && d && (e = readdir(d));) {
        char name[300];
        if (strncmp(e->d_name, "tiny-", 5)) continue;
        snprintf(name, sizeof name, "`fixtures/%s`", e->d_name);
        folders++;
        named += strstr(readme, name) != NULL;
        expect(strstr(readme, name) != NULL, "README.md does not name %s", name);
    }
    if (d) closedir(d);
    free(readme);
    char out[8192];
    long cached = -1;
    int rc = first_part2[0] ? run_cmd(first_part2, out, sizeof out) : -1;
    const char *c = rc == 0 ? strstr(out, "cached tokens ") : NULL;
    if (c) cached = atol(c + strlen("cached tokens "));
    expect(cached > 0, "tutorial section 21's first Part II command '%s': exit %d, %ld cached tokens\n%s", first_part2,
           rc, cached, rc >= 0 ? out : "");
    summary("%d output paths in the docs' commands, all in /tmp; section 21's first Part II command caches %ld tokens;"
            " the README names %d of %d fixture checkpoints", checked, cached, named, folders);
}

/* -------------------------------------------------------------------------------------------------- the bench */
/* Runs ./bench ARGS --csv into a temporary file; returns the CSV's text (to free; NULL if none) and the exit code. */
static char *bench_csv(const char *args, char *out, size_t n, int *rc) {
    char path[] = "/tmp/radixmlp-csv-XXXXXX", cmd[512];
    int fd = mkstemp(path);
    if (fd < 0) { expect(0, "mkstemp"); *rc = -1; return NULL; }
    close(fd);
    snprintf(cmd, sizeof cmd, "./bench %s --csv %s", args, path);
    *rc = run_cmd(cmd, out, n);
    size_t len;
    char *csv = (char *)read_file(path, &len);
    unlink(path);
    return csv;
}

/* bench --table 4 --cpu --quick: the C reference's Table 4 needs no GPU. Each CSV row must hold the batch's shape
 * (N = B(P+S), N' = P + B*S), positive times, speedups that are base / mode, the nearest paper row's gamma; the run
 * prints the matmul's GFLOP/s, and --svg draws this run's two series and the paper's 15 points. */
static void test_bench_cpu_table4_quick(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[16384], svg[] = "/tmp/radixmlp-svg-XXXXXX", args[128];
    int rc, fd = mkstemp(svg), rows = 0;
    if (fd < 0) { expect(0, "mkstemp"); return; }
    close(fd);
    snprintf(args, sizeof args, "--table 4 --cpu --quick --reps 1 --svg %s", svg);
    char *csv = bench_csv(args, out, sizeof out, &rc);
    expect(rc == 0, "'bench %s' exited %d:\n%s", args, rc, out);
    expect(strstr(out, "GFLOP/s") != NULL, "no matmul GFLOP/s line in:\n%s", out);
    const char *paths[RX_PATHS], *all[3] = {"portable", "avx2", "avx512"};
    char list[RX_LIST], want[96];
    int n_paths = cpu_paths(paths, list);
    for (int p = 0; p < 3; p++) {              /* a 1-thread rate line for each path the CPU has, and no other */
        int has = 0;
        char what[64];
        for (int k = 0; k < n_paths; k++) has |= !strcmp(paths[k], all[p]);
        snprintf(what, sizeof what, "tiled (rx_matmul_packed_ref), %s", all[p]);
        snprintf(want, sizeof want, "%-40s  1 thread ", what);
        expect(!strstr(out, want) == !has, "%s: a rate line '%s' %s", list, want, has ? "missing" : "printed");
    }
    snprintf(want, sizeof want, "a loop of %s FMAs", paths[n_paths - 1]);
    expect(!strcmp(paths[n_paths - 1], "portable") || strstr(out, want), "no peak line '%s' (the widest path)", want);
    for (char *line = csv ? strtok(csv, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int B, P, S, N, Nc, pP, pS;
        double g, base, radix, compact, rx, cx, pg;
        char *f = strchr(line, ',');                    /* model,device,B,P,S,N,N_compact,gamma,base_ms,... */
        f = f ? strchr(f + 1, ',') : NULL;
        if (!f || sscanf(f + 1, "%d,%d,%d,%d,%d,%lf,%lf,%lf,%lf,%lf,%lf,%d,%d,%lf", &B, &P, &S, &N, &Nc, &g, &base,
                         &radix, &compact, &rx, &cx, &pP, &pS, &pg) != 14) continue;
        rows++;
        expect(N == B * (P + S) && Nc == P + B * S, "P %d S %d: N %d N' %d, expected %d %d", P, S, N, Nc, B * (P + S),
               P + B * S);
        /* times are printed to 0.1 ms and speedups to 0.01: x must lie in what the rounded times allow */
        expect(base > 0.05 && radix > 0.05 && compact > 0.05 &&
               rx > (base - 0.05) / (radix + 0.05) - 0.005 && rx < (base + 0.05) / (radix - 0.05) + 0.005 &&
               cx > (base - 0.05) / (compact + 0.05) - 0.005 && cx < (base + 0.05) / (compact - 0.05) + 0.005,
               "P %d S %d: times %g %g %g ms, speedups %g %g are not base / mode", P, S, base, radix, compact, rx, cx);
        expect(fabs(pg - (pP + 32.0 * pS) / (32.0 * (pP + pS))) < 1e-3 && fabs(g - (double)Nc / N) < 1e-3,
               "P %d S %d: gamma %g, paper row P %d S %d gamma %g", P, S, g, pP, pS, pg);
    }
    expect(rows == 2, "%d data rows in the CSV, expected 2", rows);
    size_t len = 0;
    char *s = (char *)read_file(svg, &len);
    int circles = 0, diamonds = 0;
    for (char *c = s; c && (c = strstr(c, "<circle")); c++) circles++;
    for (char *c = s; c && (c = strstr(c, "<path")); c++) diamonds++;
    expect(circles == 2 + 1 && diamonds == 15 + 1, "the SVG has %d circles and %d diamonds, expected 3 and 16 "
           "(the legend's included)", circles, diamonds);
    unlink(svg);
    summary("bench --table 4 --cpu --quick: matmul rates on paths {%s}, the peak on %s; %d rows with N = B(P+S), "
            "N' = P + B*S, speedup = base/mode; SVG with the paper's 15 points", list, paths[n_paths - 1], rows);
    free(s);
    free(csv);
}

/* bench --table 2 --cpu --quick: one width; f_c from FLOPs and from time both in (0, 1], both predictions between 1
 * and r, the observed speedups positive. */
static void test_bench_cpu_table2_quick(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[16384];
    int rc, rows = 0;
    char *csv = bench_csv("--table 2 --cpu --quick --reps 1", out, sizeof out, &rc);
    expect(rc == 0, "'bench --table 2 --cpu --quick' exited %d:\n%s", rc, out);
    for (char *line = csv ? strtok(csv, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int N, Nc;
        double r, fc, pc, ft, pt, rx, cx;
        char *f = strchr(line, ',');                    /* device,model,N,N_compact,r,f_c_flops,... */
        f = f ? strchr(f + 1, ',') : NULL;
        if (!f || sscanf(f + 1, "%d,%d,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &N, &Nc, &r, &fc, &pc, &ft, &pt, &rx, &cx) != 9)
            continue;
        rows++;
        expect(fc > 0 && fc <= 1 && ft > 0 && ft <= 1 && pc >= 1 && pc <= r + 0.01 && pt >= 1 && pt <= r + 0.01 &&
               rx > 0 && cx > 0, "f_c %g %g, predicted %g %g (r %g), observed %g %g", fc, ft, pc, pt, r, rx, cx);
        note("N %d, N' %d: f_c %.3f (FLOPs) %.3f (time), predicted %.2f %.2f, observed radix %.2f compact %.2f",
             N, Nc, fc, ft, pc, pt, rx, cx);
    }
    expect(rows == 1, "%d data rows in the CSV, expected 1", rows);
    summary("bench --table 2 --cpu --quick: both f_c in (0, 1], both predictions in [1, r]");
    free(csv);
}

/* bench --workload reranker --cpu: the paper's reranking workload on the C reference, 2 pairs a request. Each CSV
 * row: N' = N - (pairs - 1) x the shared head (variant A: system 60 + instruction 22 + query 10-20 + tag 5; B: 60 + 5,
 * the query behind the passage), gamma = N'/N, positive times, x = base / mode, every mode's scores equal baseline's
 * ("2 of 2": a difference stops the run), and the paper's gamma beside it (0.61, 0.71). Wrong sizes are refused. */
static void test_bench_reranker_cpu_scores_equal_in_every_mode(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[16384];
    int rc, rows = 0;
    char *csv = bench_csv("--workload reranker --cpu --pairs 2 --reps 1", out, sizeof out, &rc);
    expect(rc == 0 && strstr(out, "Reranking on the CPU"), "'bench --workload reranker --cpu' exited %d:\n%s", rc,
           out);
    for (char *line = csv ? strtok(csv, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char variant[64], scores[64];
        int pairs, N, Nc;
        double g, ms[3], x[2], cpu_ms[3], pg;
        char *f = strchr(line, ',');                    /* model,device,variant,pairs,N,N_compact,gamma,... */
        f = f ? strchr(f + 1, ',') : NULL;
        if (!f || sscanf(f + 1, "%63[^,],%d,%d,%d,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%*f,%*f,%63[^,],%lf", variant,
                         &pairs, &N, &Nc, &g, &ms[0], &ms[1], &ms[2], &x[0], &x[1], &cpu_ms[0], &cpu_ms[1], &cpu_ms[2],
                         scores, &pg) != 15)
            continue;
        int flipped = variant[0] == 'B', head = N - Nc;
        rows++;
        expect(pairs == 2 && (flipped ? head == 65 : head >= 97 && head <= 107) && fabs(g - (double)Nc / N) < 1e-3 &&
               ms[0] > 0 && ms[1] > 0 && ms[2] > 0 && fabs(x[0] - ms[0] / ms[1]) < 0.02 * x[0] + 0.01 &&
               !strcmp(scores, "2 of 2") && pg == (flipped ? 0.71 : 0.61),
               "%s: %d pairs, N %d, N' %d (shared head %d), gamma %g, ms %g %g %g, x %g, scores '%s', paper gamma %g",
               variant, pairs, N, Nc, head, g, ms[0], ms[1], ms[2], x[0], scores, pg);
        note("%-13s N %4d, N' %4d (a shared head of %3d), gamma %.3f, radix x %.2f, compact x %.2f, scores %s", variant,
             N, Nc, head, g, x[0], x[1], scores);
    }
    expect(rows == 2, "%d data rows in the CSV, expected 2 (variants A and B)", rows);
    free(csv);
    const char *bad[] = {"./bench --workload reranker --cpu --pairs 0", "./bench --workload reranker --cpu --pairs 65",
                         "./bench --workload reranker --pairs 4", "./bench --workload reranker --cpu --model 4b"};
    for (int i = 0; i < 4; i++) {
        rc = run_cmd(bad[i], out, sizeof out);
        expect(rc == 2 && strstr(out, "bench: "), "'%s': exit %d, expected 2 with a message:\n%s", bad[i], rc, out);
    }
    summary("bench --workload reranker --cpu --pairs 2: variants A and B, N' = N - the shared head, every mode's "
            "scores equal baseline's; 4 wrong command lines refused");
}

static void test_bench_table5_csv(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[8192];
    int rc;
    char *csv = bench_csv("--table 5 --quick", out, sizeof out, &rc);
    expect(rc == 0, "'bench --table 5 --quick' exited %d:\n%s", rc, out);
    int lines = 0, commas0 = -1, ragged = 0, found = 0;
    for (char *line = csv ? strtok(csv, "\n") : NULL; line; line = strtok(NULL, "\n"), lines++) {
        int commas = 0;
        for (char *c = line; *c; c++) commas += *c == ',';
        if (commas0 < 0) commas0 = commas;
        ragged |= commas != commas0;
        int B, L, shared, N, Nc;   /* cpu,configuration,B,L,shared,N,N_compact,... */
        char *f = strchr(line, ',');
        f = f ? strchr(f + 1, ',') : NULL;
        if (f && sscanf(f + 1, "%d,%d,%d,%d,%d", &B, &L, &shared, &N, &Nc) == 5 &&
            B == 32 && L == 512 && shared == 128) {
            /* a shared prefix P and B unique suffixes S: N = B(P+S), N' = P + B*S (the paper's Table 4 caption) */
            expect(N == 32 * 512 && Nc == 128 + 32 * 384, "32x512 ratio 0.25: N = %d, N' = %d, expected %d, %d", N, Nc,
                   32 * 512, 128 + 32 * 384);
            found = 1;
        }
    }
    expect(lines >= 2 && !ragged, "the CSV has %d lines, %s", lines, ragged ? "with ragged rows" : "all of one width");
    expect(found, "no 32 x 512 ratio 0.25 row in the CSV");
    summary("bench --table 5 --quick: %d CSV lines of %d fields; 32x512 at 0.25 has N' = P + B*S = 12416",
            lines, commas0 + 1);
    free(csv);
}

static void test_bench_replot_draws_every_series(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    /* A made-up Table 4 CSV (test input, not a measurement): two prefixes x two suffixes. */
    const char *csv =
        "model,device,P,S,N,N_compact,gamma,base_ms,radix_ms,compact_ms,radix_x,compact_x,radix_ktok_s,paper_radix_ms,"
        "paper_base_ms,paper_x\n"
        "4b,test,128,256,12288,8320,0.677,10,8,7,1.25,1.43,1,190.5,261.6,1.37\n"
        "4b,test,2048,256,73728,10240,0.139,100,25,20,4.00,5.00,1,399.7,1655.8,4.14\n"
        "4b,test,128,1024,36864,32896,0.892,30,28,27,1.07,1.11,1,748.0,792.4,1.06\n"
        "4b,test,2048,1024,98304,34816,0.354,200,90,80,2.22,2.50,1,1019.4,2318.1,2.27\n";
    char dir[] = "/tmp/radixmlp-svg-XXXXXX", cmd[1024], out[4096], svg_path[256];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    write_file(dir, "t4.csv", csv, strlen(csv));
    snprintf(svg_path, sizeof svg_path, "%s/t4.svg", dir);
    snprintf(cmd, sizeof cmd, "./bench --replot %s/t4.csv --svg %s", dir, svg_path);
    int rc = run_cmd(cmd, out, sizeof out);
    size_t len = 0;
    char *svg = (char *)read_file(svg_path, &len);
    expect(rc == 0 && svg, "'%s' exited %d:\n%s", cmd, rc, out);
    if (svg) {
        int lines = 0;
        for (char *p = svg; (p = strstr(p, "<polyline")); p++) lines++;
        expect(!strncmp(svg, "<svg", 4) && strstr(svg, "</svg>"), "not a complete SVG document");
        /* radix, compact and the paper's dashed line for each of the two suffix lengths */
        expect(lines == 6, "%d polylines, expected 6 (3 series x 2 suffix lengths)", lines);
        /* the y axis spans 0..6 over pixels 430..60, so a 4.00x radix speedup sits at 430 - 4/6 * 370 = 183.3 */
        expect(strstr(svg, "600.0,183.3") != NULL, "the 4.00x point at P = 2048 is not at y = 183.3");
        summary("replot: %zu-byte SVG, %d series; the 4.00x point lands where the axis says", len, lines);
    }
    free(svg);
    unlink(svg_path);
    snprintf(svg_path, sizeof svg_path, "%s/t4.csv", dir);
    unlink(svg_path);
    rmdir(dir);
}

/* fixtures/table4-paper.csv, the README's no-GPU --replot example: the paper's numbers only, so only its two dashed
 * lines are drawn, and nothing is labelled as this code's measurement. */
static void test_bench_replot_of_papers_table4(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char path[] = "/tmp/radixmlp-t4p-XXXXXX", cmd[1024], out[4096];
    int fd = mkstemp(path);
    if (fd < 0) { expect(0, "mkstemp"); return; }
    close(fd);
    snprintf(cmd, sizeof cmd, "./bench --replot %s/table4-paper.csv --svg %s", fixtures(), path);
    int rc = run_cmd(cmd, out, sizeof out);
    size_t len = 0;
    char *svg = (char *)read_file(path, &len);
    int lines = 0, dashed = 0;   /* bench writes a dashed series as <polyline ... stroke-dasharray="7 4" points=... */
    for (char *p = svg; p && (p = strstr(p, "<polyline")); p++) lines++;
    for (char *p = svg; p && (p = strstr(p, "stroke-dasharray=\"7 4\" points=")); p++) dashed++;
    expect(rc == 0 && svg && lines == 2 && dashed == 2,
           "'%s': exit %d, %d polylines (%d dashed), expected 2 dashed ones (the paper's S = 256 and 1024):\n%s",
           cmd, rc, lines, dashed, out);
    expect(svg && !strstr(svg, ">radix, S =") && !strstr(svg, ">compact, S ="), "a radix or compact series was drawn");
    note("replot of the paper's Table 4: exit %d, %d polylines (%d dashed), no radix or compact series",
         rc, lines, dashed);
    free(svg);
    unlink(path);
}

static void test_bench_rejects_bad_arguments(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[4096];
    const char *bad[] = {"./bench --table 9", "./bench --reps 0", "./bench --frobnicate", "./bench --table",
                         "./bench --attention --table 4", "./bench --table 5 --gpu"};
    for (int i = 0; i < 6; i++) {
        int rc = run_cmd(bad[i], out, sizeof out);
        expect(rc == 2 && strstr(out, "bench: "), "'%s': exit %d, expected 2 with a message:\n%s", bad[i], rc, out);
    }
    if (!gpu_available()) {
        int rc = run_cmd("./bench --table 4 --quick", out, sizeof out);
        expect(rc == 1 && strstr(out, "needs a CUDA device") && strstr(out, "on the CPU: add --cpu"),
               "--table 4 without a GPU: exit %d, want 1 and the --cpu alternative\n%s", rc, out);
        note("without a GPU: %s", out);
        rc = run_cmd("./bench --attention --quick", out, sizeof out);
        const char *nl = strchr(out, '\n');
        expect(rc == 1 && strstr(out, "--attention needs a CUDA device") && nl && !nl[1],
               "--attention without a GPU: exit %d, expected 1 and one line\n%s", rc, out);
        note("without a GPU: %s", out);
        rc = run_cmd("./bench --prefix-cache --gpu", out, sizeof out);
        expect(rc == 1 && strstr(out, "--prefix-cache --gpu needs a CUDA device"),
               "--prefix-cache --gpu without a GPU: exit %d\n%s", rc, out);
    }
}

/* bench at radixmlp's standard: every input through the same file checks (a device, a FIFO, a folder or a 3 GB sparse
 * file is refused at once, never read or waited on), a flag that does not apply to the run or is given twice is an
 * error, an output never overwrites the input, a write error fails. Each: one line "bench: ..." (`timeout 60` only
 * ends a hang: the runs take under a second, and a busy machine must not fail them). */
static void test_bench_refuses_bad_inputs_flags_and_writes(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char dir[] = "/tmp/radixmlp-bench-XXXXXX", p[600];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    snprintf(p, sizeof p, "%s/fifo", dir);
    expect(mkfifo(p, 0644) == 0, "mkfifo %s", p);
    snprintf(p, sizeof p, "%s/sparse.csv", dir);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
    expect(f && truncate(p, 3LL << 30) == 0, "a 3 GB sparse file at %s", p);
    snprintf(p, sizeof p, "%s/p.csv", dir);
    f = fopen(p, "w");
    if (f) { fputs("P,S,radix_x\n16,256,1.5\n", f); fclose(f); }
    const struct { const char *args; int rc; const char *msg; } cases[] = {
        {"--replot /dev/zero --svg D/a.svg", 1, "bench: /dev/zero: not a regular file"},
        {"--replot D/fifo --svg D/a.svg", 1, "/fifo: not a regular file"},
        {"--replot D/sparse.csv --svg D/a.svg", 1, "/sparse.csv: 3221225472 bytes, more than the 16 MiB"},
        {"--replot D --svg D/a.svg", 1, "not a regular file"},
        {"--replot D/p.csv --svg D/../DN/p.csv", 2, "--svg names the --replot input file"},
        {"--table 4 --csv D/t.csv --svg D/./t.csv", 2, "--svg and --csv name the same file"},
        {"--table 4 --cpu --model 4b", 2, "--model does not apply to --table 4 --cpu"},
        {"--table 5 --model 4b", 2, "--model does not apply to --table 5"},
        {"--prefix-cache --model 4b", 2, "--model does not apply to --prefix-cache"},
        {"--replot D/p.csv --svg D/a.svg --model 4b", 2, "--model does not apply to --replot"},
        {"--replot D/p.csv --svg D/a.svg --csv D/c.csv", 2, "--csv does not apply to --replot"},
        {"--replot D/p.csv --svg D/a.svg --reps 3", 2, "--reps does not apply to --replot"},
        {"--replot D/p.csv --svg D/a.svg --quick", 2, "--quick does not apply to --replot"},
        {"--table 5 --reps 3", 2, "--reps does not apply to --table 5"},
        {"--table 5 --cpu", 2, "--cpu does not apply to --table 5"},
        {"--table 6 --svg D/a.svg", 2, "--svg does not apply to --table 6"},
        {"--table 4 --table 4", 2, "this option is given twice: '--table'"},
        {"--table 5 --csv D/a.csv --csv D/b.csv", 2, "this option is given twice: '--csv'"},
        {"--table 2 --model 4b --model 8b", 2, "this option is given twice: '--model'"},
        {"--table 5 --csv ''", 2, "this option needs a value, not \"\": '--csv'"},
        {"--replot D/p.csv --svg /dev/full", 1, "bench: /dev/full: cannot write: No space left on device"},
        {"--table 5 --quick --csv /dev/full", 1, "bench: /dev/full: cannot write: No space left on device"},
        {"--help >/dev/full", 1, "bench: <stdout>: cannot write: No space left on device"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char args[1024], cmd[1200], out[16384];
        size_t at = 0;
        for (const char *c = cases[i].args; *c && at < sizeof args - 300; c++) {   /* D: the folder, DN: its name */
            if (c[0] == 'D' && c[1] == 'N') {
                at += (size_t)snprintf(args + at, 300, "%s", strrchr(dir, '/') + 1);
                c++;
            } else if (*c == 'D') at += (size_t)snprintf(args + at, 300, "%s", dir);
            else args[at++] = *c;
        }
        args[at] = 0;
        snprintf(cmd, sizeof cmd, "{ timeout 60 ./bench %s; } 2>&1 >/dev/null | grep -v '^bench: table 5, '", args);
        int rc = run_cmd(cmd, out, sizeof out);
        snprintf(cmd, sizeof cmd, "{ timeout 60 ./bench %s; } >/dev/null 2>&1", args);
        rc = run_cmd(cmd, p, sizeof p);                                  /* the exit status, not grep's */
        const char *nl = strchr(out, '\n');
        expect(rc == cases[i].rc && !strncmp(out, "bench: ", 7) && nl && !nl[1] && strstr(out, cases[i].msg),
               "bench %s: exit %d, want %d and one line with '%s':\n%s", args, rc, cases[i].rc, cases[i].msg, out);
        note("%-44.44s exit %d, %.*s", cases[i].args, rc, (int)strcspn(out, "\n"), out);
    }
    snprintf(p, sizeof p, "%s/p.csv", dir);
    f = fopen(p, "r");
    char head[16] = "";
    expect(f && fgets(head, sizeof head, f) && !strcmp(head, "P,S,radix_x\n"), "the --replot input was overwritten");
    if (f) fclose(f);
    summary("%d bad bench command lines: the expected exit status and one line each, the input intact", n);
    remove_dir(dir);
}

static void test_cli_rejects_bad_tokens(void) {
    /* tiny-tied: vocab 512, max_position_embeddings 128; a line of 129 tokens reaches position 128 */
    if (!have_cli()) return;
    char long_line[129 * 2 + 2] = "";
    for (int i = 0; i < 129; i++) strcat(long_line, "7 ");
    strcat(long_line, "\n");
    /* the same problems read as file:line under --tokens and --requests; bytes that are not printable ASCII are
     * shown escaped (a raw NUL used to end the message there) */
    struct { const char *what, *tokens; size_t len; const char *msg; } cases[] = {
        {"token id = vocab size", "1 2 3\n4 512 6\n", 0, "t.txt:2: token id 512 is outside the vocabulary [0, 512)"},
        {"token id beyond int32", "1 99999999999\n", 0, "t.txt:1: token id too large"},
        {"negative token id", "1 2\n3 -4\n", 0, "t.txt:2: '-' is not part of a token id"},
        {"non-numeric token id", "1 two\n", 0, "t.txt:1: 't' is not part of a token id"},
        {"a NUL byte", "1 2\n3 \0 4\n", 10, "t.txt:2: '\\x00' is not part of a token id (ids are non-negative"},
        {"a byte above ASCII", "1 2\n3\xff\n", 0, "t.txt:2: '\\xff' is not part of a token id"},
        {"empty line", "1 2\n\n3\n", 0, "t.txt:2: empty line"},
        {"empty file", "", 0, "no sequences"},
        {"129 tokens, max 128", long_line, 0, "t.txt:1: 129 tokens, more than max_position_embeddings 128"},
        {"lines that end in \\r alone", "1 2 3\r4 5 6\r", 0, "t.txt:1: a carriage return (byte 5) inside the line: "
         "lines end with \\n or \\r\\n, not \\r alone"},
    };
    char dir[] = "/tmp/radixmlp-cli-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int as_requests = 0; as_requests < 2; as_requests++) {
            char cmd[1024], out[4096], what[96];
            write_file(dir, "t.txt", cases[i].tokens, cases[i].len ? cases[i].len : strlen(cases[i].tokens));
            snprintf(cmd, sizeof cmd, "%s --model %s/tiny-tied --%s %s/t.txt", cli(), fixtures(),
                     as_requests ? "requests" : "tokens", dir);
            snprintf(what, sizeof what, "%s (%s)", cases[i].what, as_requests ? "--requests" : "--tokens");
            expect_one_line_error(what, run_cmd(cmd, out, sizeof out), out, cases[i].msg);
        }
    remove_dir(dir);
}

/* Plants value at element `at` of tensor `name` (F32 or BF16) in the .safetensors file of dir that holds it (a
 * shard, or model.safetensors), found through the file's header. */
static void plant_value(const char *dir, const char *name, long at, float value) {
    char key[160];
    int planted = 0;
    snprintf(key, sizeof key, "\"%s\"", name);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && !planted && (e = readdir(d));) {
        char p[768];
        size_t len, hlen = 0, begin = 0;
        if (!strstr(e->d_name, ".safetensors") || strstr(e->d_name, ".json")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        uint8_t *b = read_file(p, &len);
        for (int i = 7; b && i >= 0; i--) hlen = hlen << 8 | b[i];
        char *h = b ? (char *)malloc(hlen + 1) : NULL, *entry = NULL, *end = NULL, *offsets = NULL, *dtype = NULL;
        if (h) {
            memcpy(h, b + 8, hlen);
            h[hlen] = 0;
            entry = strstr(h, key);
        }
        if (entry) end = strchr(entry, '}');                         /* this tensor's entry: {dtype, shape, offsets} */
        if (end) *end = 0;
        if (end) offsets = strstr(entry, "\"data_offsets\"");
        if (end) dtype = strstr(entry, "\"dtype\"");
        if (offsets && dtype && sscanf(strchr(offsets, '[') + 1, "%zu", &begin) == 1) {
            int bf16 = strstr(dtype, "BF16") != NULL;
            uint32_t u;
            memcpy(&u, &value, 4);
            uint16_t top = (uint16_t)(u >> 16);
            memcpy(b + 8 + hlen + begin + (size_t)at * (bf16 ? 2 : 4), bf16 ? (void *)&top : (void *)&u, bf16 ? 2 : 4);
            write_file(dir, e->d_name, b, len);
            planted = 1;
        }
        free(h);
        free(b);
    }
    if (d) closedir(d);
    if (!planted) { printf("plant_value: no tensor %s in %s\n", name, dir); exit(2); }
}

/* A NaN or Inf never passes: --check names the first tensor holding one and the element; a forward whose logits or
 * embeddings come out non-finite fails and names the first row and column (here: the rows after token 5, whose
 * embedding row holds the NaN). */
static void test_cli_nonfinite_weights_and_outputs_fail(void) {
    if (!have_cli()) return;
    const float nan = NAN, inf = INFINITY;
    const struct { const char *fixture, *tensor; long at; float value; const char *run, *msg; } cases[] = {
        {"tiny-untied", "model.embed_tokens.weight", 5 * 64 + 3, nan, "--check",
         "tensor 'model.embed_tokens.weight' holds nan at element 323 of 32768"},
        {"tiny-untied", "model.norm.weight", 7, -inf, "--check", "tensor 'model.norm.weight' holds -inf at element 7"},
        {"tiny-embedding", "embed_tokens.weight", 5 * 32, nan, "--check", "tensor 'embed_tokens.weight' holds nan"},
        {"tiny-untied", "model.embed_tokens.weight", 5 * 64 + 3, nan, "--cpu --tokens T",
         "the logits [N, vocab] hold nan at row 4, column 0"},
        {"tiny-untied", "model.embed_tokens.weight", 5 * 64 + 3, nan, "--cpu --last-only --tokens T",
         "the logits [n_seqs, vocab] hold nan at row 1, column 0"},
        {"tiny-embedding", "embed_tokens.weight", 5 * 32, nan, "--cpu --embed E --tokens T",
         "the embeddings [n_seqs, hidden] hold nan at row 1, column 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *d = copy_fixture(cases[i].fixture), cmd[1024], out[8192], run[512];
        write_file(d, "t.txt", "1 2 3\n4 5 6\n", 12);
        plant_value(d, cases[i].tensor, cases[i].at, cases[i].value);
        snprintf(run, sizeof run, "%s", cases[i].run);
        char *t = strstr(run, " T"), *e = strstr(run, " E ");
        if (e) snprintf(run, sizeof run, "--cpu --embed %s/e.f32 --tokens %s/t.txt", d, d);
        else if (t) snprintf(t, sizeof run - (size_t)(t - run), " %s/t.txt", d);
        snprintf(cmd, sizeof cmd, "%s --model %s %s", cli(), d, run);
        int rc = run_cmd(cmd, out, sizeof out);
        if (!strstr(run, "--tokens")) {           /* --check: one line; a forward prints N and N' first */
            expect_one_line_error(cases[i].run, rc, out, cases[i].msg);
        } else {
            const char *err = strstr(out, "radixmlp: ");
            expect(rc == 1 && err && strstr(err, cases[i].msg) < strchr(err, '\n') && strstr(err, cases[i].msg) &&
                   !strstr(out, "wrote ") && !strstr(out, "next token"),
                   "%s %s: exit %d, want 1, a line with '%s', no next token, nothing written:\n%s", cases[i].fixture,
                   cases[i].run, rc, cases[i].msg, out);
            note("%-15s %-26s exit %d, %.*s", cases[i].fixture, cases[i].run, rc, err ? (int)strcspn(err, "\n") : 0,
                 err ? err : "");
        }
        remove_dir(d);
    }
}

/* No output overwrites an input or another output, however its path is spelled; nothing runs, nothing is written. */
static void test_cli_outputs_never_clobber_inputs(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX", cmd[1536], out[4096], args[1024];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    char *m = copy_fixture("tiny-tied"), model[256];
    snprintf(model, sizeof model, "%s", m);
    const char *tokens = "1 2 3\n1 2 4\n";
    const struct { const char *args, *msg; } cases[] = {
        {"--tokens D/t.txt --dump-logits D/t.txt", "--dump-logits D/t.txt: that is the input D/t.txt"},
        {"--tokens D/t.txt --embed D/../DN/t.txt", "that is the input D/t.txt"},
        {"--tokens D/t.txt --dump-logits M/model.safetensors", "that is the input M/model.safetensors"},
        {"--tokens D/t.txt --dump-logits M/config.json", "that is the input M/config.json"},
        {"--requests D/t.txt --stats D/t.txt", "--stats D/t.txt: that is the input D/t.txt"},
        {"--requests D/t.txt --stats D/x --dump-logits D/./x", "--stats D/x: --dump-logits writes that file too"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[1024];
        size_t at = 0, k = 0;
        write_file(dir, "t.txt", tokens, strlen(tokens));
        for (const char *p = cases[i].args; *p && at < sizeof args - 300; p++) {   /* D: dir, DN: its name, M: model */
            if (p[0] == 'D' && p[1] == 'N') {
                at += (size_t)snprintf(args + at, 300, "%s", strrchr(dir, '/') + 1);
                p++;
            } else if (*p == 'D') at += (size_t)snprintf(args + at, 300, "%s", dir);
            else if (*p == 'M') at += (size_t)snprintf(args + at, 300, "%s", model);
            else args[at++] = *p;
        }
        args[at] = 0;
        for (const char *p = cases[i].msg; *p && k < sizeof msg - 300; p++)
            if (*p == 'D') k += (size_t)snprintf(msg + k, 300, "%s", dir);
            else if (*p == 'M') k += (size_t)snprintf(msg + k, 300, "%s", model);
            else msg[k++] = *p;
        msg[k] = 0;
        snprintf(cmd, sizeof cmd, "%s --cpu --model %s %s", cli(), model, args);
        expect_one_line(cases[i].args, 2, run_cmd(cmd, out, sizeof out), out, msg);   /* the command line's mistake */
        size_t len;
        char p[600];
        snprintf(p, sizeof p, "%s/t.txt", dir);
        uint8_t *b = read_file(p, &len);
        expect(b && len == strlen(tokens) && !memcmp(b, tokens, len), "%s: the tokens file changed", cases[i].args);
        free(b);
        snprintf(p, sizeof p, "%s/x", dir);
        expect(access(p, F_OK) != 0, "%s: wrote %s", cases[i].args, p);
    }
    snprintf(cmd, sizeof cmd, "%s --check --model %s", cli(), model);   /* the checkpoint is intact */
    expect(run_cmd(cmd, out, sizeof out) == 0, "the model changed:\n%s", out);
    remove_dir(m);
    remove_dir(dir);
}

/* Every write is checked: stdout on a full disk (/dev/full) fails with one line naming it, for every action. */
static void test_cli_write_errors_fail(void) {
    if (!have_cli()) return;
    char cmd[1024], out[4096];
    const char *runs[3] = {"--help", "--show-index --tokens %s/batches/mixed.txt", "--check --model %s/tiny-tied"};
    for (int i = 0; i < 3; i++) {
        char args[512];
        snprintf(args, sizeof args, runs[i], fixtures());
        snprintf(cmd, sizeof cmd, "{ %s %s >/dev/full; }", cli(), args);   /* stderr to the pipe, stdout to /dev/full */
        expect_one_line_error(args, run_cmd(cmd, out, sizeof out), out, "<stdout>: cannot write: No space left");
    }
}

/* Messages a user can act on: a BOM in config.json, another model_type, an empty --model. */
static void test_cli_config_and_value_messages(void) {
    if (!have_cli()) return;
    char *d = copy_fixture("tiny-tied"), cmd[1024], out[4096], p[600];
    size_t len;
    snprintf(p, sizeof p, "%s/config.json", d);
    uint8_t *cfg = read_file(p, &len), *bom = (uint8_t *)malloc(len + 3);
    memcpy(bom, "\xEF\xBB\xBF", 3);
    memcpy(bom + 3, cfg, len);
    write_file(d, "config.json", bom, len + 3);
    snprintf(cmd, sizeof cmd, "%s --check --model %s", cli(), d);
    expect_one_line_error("a BOM in config.json", run_cmd(cmd, out, sizeof out), out,
                          "config.json: starts with a UTF-8 byte-order mark (EF BB BF): save it as UTF-8 without one");
    write_file(d, "config.json", cfg, len);
    edit_file(d, "config.json", "\"qwen3\"", "\"llama\"");
    expect_one_line_error("model_type llama", run_cmd(cmd, out, sizeof out), out,
                          "\"model_type\" is \"llama\"; this code computes Qwen3 only (\"qwen3\")");
    snprintf(cmd, sizeof cmd, "%s --check --model ''", cli());
    expect_one_line("--model ''", 2, run_cmd(cmd, out, sizeof out), out, "--model needs a value, not an empty string");
    free(cfg);
    free(bom);
    remove_dir(d);
}

/* ------------------------------------------------------------------------------------------ part ii: the kv cache */
/* The caches are tested on bookkeeping-only pools (no K/V) except the random trace, whose pool holds one float per
 * slot: a fingerprint of the token history that produced it, written by a stand-in forward. A cache that ever hands
 * out a page computed for another history, or for another model, fails the fingerprint check. */
static RxPrefixCache *cache_of(RxKvPool *pool, RxCacheKind kind, int n_pages, int page_size, int kv) {
    RxPrefixCache *c = NULL;
    if (rx_kv_pool_init(pool, n_pages, page_size, kv, kv) || rx_cache_create(&c, kind, pool)) {
        printf("cache_of: %s\n", radix_error());
        exit(2);
    }
    return c;
}

/* The audit passes (refs = cache's + requests', free list exact) and returns the stats. */
static RxCacheStats audit(const RxPrefixCache *c, const char *when) {
    RxCacheStats s;
    expect(rx_cache_audit(c, &s) == 0, "%s: audit: %s", when, radix_error());
    return s;
}

static void draw_cache(char *buf, size_t n, const RxPrefixCache *c) {   /* rx_cache_draw into buf */
    memset(buf, 0, n);
    FILE *f = fmemopen(buf, n - 1, "w");
    rx_cache_draw(f, c);
    fclose(f);
}

static void expect_draw(const RxPrefixCache *c, const char *want, const char *what) {
    char buf[4096];
    draw_cache(buf, sizeof buf, c);
    expect(!strcmp(buf, want), "%s: the tree is\n%s\nexpected\n%s", what, buf, want);
}

/* A test-held reference on n fresh pages, as a request's own pages. */
static void alloc_pages(RxKvPool *pool, int32_t *pages, int n) {
    for (int j = 0; j < n; j++) pages[j] = rx_kv_page_alloc(pool);
}
static void release_pages(RxKvPool *pool, const int32_t *pages, int n) {
    for (int j = 0; j < n; j++) rx_kv_page_release(pool, pages[j]);
}

static void test_cache_radix_insert_match_split_at_page_boundaries(void) {
    RxKvPool pool;
    RxPrefixCache *c = cache_of(&pool, RX_CACHE_RADIX, 16, 2, 0);
    int32_t a[3], b[3], d[2], got[8];
    const int32_t ta[] = {1, 2, 3, 4, 5, 6, 0}, tb[] = {1, 2, 3, 4, 7, 7}, td[] = {1, 2, 3, 9};
    alloc_pages(&pool, a, 3); alloc_pages(&pool, b, 3); alloc_pages(&pool, d, 2);      /* pages 0-2, 3-5, 6-7 */
    expect(rx_cache_insert(c, 1, ta, 6, a) == 3, "the first insert adopts its 3 pages");
    expect(rx_cache_lookup(c, 1, ta, 7, got) == 6 && got[0] == 0 && got[2] == 2,
           "lookup of 7 tokens: 6 cached, pages 0 1 2");
    expect(rx_cache_lookup(c, 1, ta, 5, got) == 4, "lookup of 5 tokens: only 2 whole pages can match");
    expect(rx_cache_lookup(c, 1, td, 4, got) == 2, "[1 2 3 9]: parts mid-page 2, so only page 1 matches");
    expect(rx_cache_insert(c, 1, tb, 6, b) == 1, "[1 2 3 4 7 7] adopts 1 page: pages 3 and 4 duplicate 0 and 1");
    expect_draw(c, "model 1\n`-- [1 2 | 3 4]  pages 0 1  lock 0\n    |-- [5 6]  page 2  lock 0\n"
                   "    `-- [7 7]  page 5  lock 0\n", "split after 2 pages");
    expect(rx_cache_lookup(c, 1, tb, 5, got) == 4 && got[0] == 0 && got[1] == 1, "[1 2 3 4 7]: 4, pages 0 1 (not 3 4)");
    expect(rx_cache_insert(c, 1, td, 4, d) == 1, "[1 2 3 9] adopts its second page");
    expect_draw(c, "model 1\n`-- [1 2]  page 0  lock 0\n    |-- [3 4]  page 1  lock 0\n"
                   "    |   |-- [5 6]  page 2  lock 0\n    |   `-- [7 7]  page 5  lock 0\n"
                   "    `-- [3 9]  page 7  lock 0\n", "split after 1 page");
    RxCacheStats s = audit(c, "after the inserts");
    expect(s.nodes == 5 && s.cached_pages == 5 && s.request_pages == 8, "nodes %d, cached pages %d, request pages %d;"
           " expected 5, 5, 8", s.nodes, s.cached_pages, s.request_pages);
    release_pages(&pool, a, 3); release_pages(&pool, b, 3); release_pages(&pool, d, 2);
    s = audit(c, "after the requests released");
    expect(s.request_pages == 0 && pool.n_free == 16 - 5, "request pages %d, free %d; expected 0, 11", s.request_pages,
           pool.n_free);
    rx_cache_free(c);
    expect(pool.n_free == 16, "after rx_cache_free: %d of 16 pages free", pool.n_free);
    note("insert [1 2|3 4|5 6], [1 2|3 4|7 7], [1 2|3 9]: splits after 2 and 1 pages, duplicate pages not adopted");
    rx_kv_pool_free(&pool);
}

/* Admit, (forward), finish one request; returns its cached_len. */
static int serve(RxPrefixCache *c, const int32_t *tokens, int len, uint64_t model) {
    RxRequest r;
    rx_request_init(&r, tokens, len, model);
    int rc = rx_request_admit(c, &r);
    expect(rc == 0, "admit of %d tokens: %d (%s)", len, rc, radix_error());
    if (rc) return -1;
    int cached = r.cached_len;
    expect(rx_request_finish(c, &r) == 0 && r.state == RX_REQ_FINISHED, "finish: %s", radix_error());
    return cached;
}

static void test_cache_match_capped_at_len_minus_one(void) {
    for (int kind = RX_CACHE_RADIX; kind <= RX_CACHE_HASH; kind++) {
        RxKvPool pool;
        RxPrefixCache *c = cache_of(&pool, (RxCacheKind)kind, 16, 4, 0);
        const int32_t t[] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
        int first = serve(c, t, 8, 1), again = serve(c, t, 8, 1), longer = serve(c, t, 9, 1), one = serve(c, t, 1, 1);
        int four = serve(c, t, 4, 1), five = serve(c, t, 5, 1);
        expect(first == 0 && again == 4 && longer == 8 && one == 0 && four == 0 && five == 4,
               "%s: cached %d %d %d %d %d %d, expected 0 4 8 0 0 4", rx_cache_kind_name((RxCacheKind)kind), first,
               again, longer, one, four, five);
        note("%-5s page 4: 8 tokens cold 0, again %d (not 8: the last token is computed), 9 tokens %d, 1 token %d,"
             " 4 tokens %d, 5 tokens %d", rx_cache_kind_name((RxCacheKind)kind), again, longer, one, four, five);
        RxCacheStats s = audit(c, "end");
        expect(s.request_pages == 0, "%d pages still held by requests", s.request_pages);
        rx_cache_free(c); rx_kv_pool_free(&pool);
    }
}

static void test_cache_model_id_namespaces(void) {
    for (int kind = RX_CACHE_RADIX; kind <= RX_CACHE_HASH; kind++) {
        RxKvPool pool;
        RxPrefixCache *c = cache_of(&pool, (RxCacheKind)kind, 16, 2, 0);
        const int32_t t[] = {3, 1, 4, 1, 5, 9, 2};
        int first = serve(c, t, 7, 100), other = serve(c, t, 7, 200), same = serve(c, t, 7, 100);
        expect(first == 0 && other == 0 && same == 6, "%s: model 100 cold %d, model 200 %d, model 100 again %d;"
               " expected 0 0 6", rx_cache_kind_name((RxCacheKind)kind), first, other, same);
        note("%-5s same 7 tokens: model 100 cold %d, model 200 %d (namespaced), model 100 again %d",
             rx_cache_kind_name((RxCacheKind)kind), first, other, same);
        rx_cache_free(c); rx_kv_pool_free(&pool);
    }
}

static void test_cache_lock_refs_prevent_eviction(void) {
    RxKvPool pool;
    RxPrefixCache *c = cache_of(&pool, RX_CACHE_RADIX, 8, 2, 0);
    const int32_t ta[] = {1, 2, 3, 4, 5}, tb[] = {1, 2, 3, 4, 9}, tc[] = {1, 2, 8, 8, 8};
    serve(c, ta, 5, 1);                                                  /* caches [1 2 | 3 4] */
    RxRequest b, r2;
    rx_request_init(&b, tb, 5, 1);
    rx_request_init(&r2, tc, 5, 1);
    expect(rx_request_admit(c, &b) == 0 && b.cached_len == 4, "b: cached %d, expected 4", b.cached_len);
    int free_b = rx_cache_evict(c, 8);
    int32_t got[2];
    expect(free_b == 8 - 3 && rx_cache_lookup(c, 1, tb, 4, got) == 4, "b locks [1 2 | 3 4]: evict(all) leaves %d"
           " free (expected 5) and the prefix cached", free_b);
    expect(rx_request_admit(c, &r2) == 0 && r2.cached_len == 2, "c: cached %d, expected 2", r2.cached_len);
    expect_draw(c, "model 1\n`-- [1 2]  page 0  lock 2\n    `-- [3 4]  page 1  lock 1\n",
                "the split inherits b's lock");
    rx_request_abort(c, &b);
    int free_c = rx_cache_evict(c, 8);
    expect_draw(c, "model 1\n`-- [1 2]  page 0  lock 1\n", "after b aborts, [3 4] is evictable, [1 2] is not");
    expect(free_c == 8 - 1 - 2, "free after evict with c running: %d, expected 5", free_c);
    rx_request_abort(c, &r2);
    expect(rx_cache_evict(c, 8) == 8, "after c aborts too, everything is evictable");
    RxCacheStats s = audit(c, "end");
    expect(s.evicted_pages == 2 && s.nodes == 0, "evicted %ld pages, %d nodes left; expected 2, 0", s.evicted_pages,
           s.nodes);
    note("locked: evict frees only unlocked pages (%d then %d free); a split node inherits the lock (lock 2)", free_b,
         free_c);
    rx_cache_free(c); rx_kv_pool_free(&pool);
}

static void test_cache_eviction_takes_lru_leaf_and_cascades(void) {
    RxKvPool pool;
    RxPrefixCache *c = cache_of(&pool, RX_CACHE_RADIX, 16, 2, 0);
    const int32_t t1[] = {1, 2, 3, 3, 4, 4, 0}, t2[] = {1, 2, 3, 3, 5, 5, 0}, t3[] = {1, 2, 6, 6, 0};
    serve(c, t1, 7, 1); serve(c, t2, 7, 1); serve(c, t3, 5, 1);          /* [4 4] is the least recently used leaf */
    expect_draw(c, "model 1\n`-- [1 2]  page 0  lock 0\n    |-- [3 3]  page 1  lock 0\n"
                   "    |   |-- [4 4]  page 2  lock 0\n    |   `-- [5 5]  page 3  lock 0\n"
                   "    `-- [6 6]  page 4  lock 0\n", "three prompts");
    int f0 = pool.n_free, f1 = rx_cache_evict(c, f0 + 1);
    expect_draw(c, "model 1\n`-- [1 2]  page 0  lock 0\n    |-- [3 3]  page 1  lock 0\n"
                   "    |   `-- [5 5]  page 3  lock 0\n    `-- [6 6]  page 4  lock 0\n", "one leaf evicted");
    int f2 = rx_cache_evict(c, f1 + 1);
    expect_draw(c, "model 1\n`-- [1 2]  page 0  lock 0\n    `-- [6 6]  page 4  lock 0\n",
                "[5 5] evicted, and [3 3], left an unlocked leaf, with it");
    expect(f1 - f0 == 1 && f2 - f1 == 2, "freed %d then %d pages, expected 1 then 2 (cascade)", f1 - f0, f2 - f1);
    expect(rx_cache_lookup(c, 1, t3, 4, (int32_t[4]){0}) == 4, "the trunk and the recent leaf stay cached");
    note("evictions freed %d page, then %d (leaf [5 5] + its parent [3 3]); trunk [1 2] and [6 6] stay",
         f1 - f0, f2 - f1);
    audit(c, "end");
    rx_cache_free(c); rx_kv_pool_free(&pool);
}

static void test_cache_hash_eviction_orphans_descendants(void) {
    const int32_t ta[] = {1, 2, 3, 4, 5, 6, 0}, tb[] = {7, 7, 8, 8, 0};
    for (int kind = RX_CACHE_RADIX; kind <= RX_CACHE_HASH; kind++) {
        RxKvPool pool;
        RxPrefixCache *c = cache_of(&pool, (RxCacheKind)kind, 16, 2, 0);
        serve(c, ta, 7, 1); serve(c, tb, 5, 1);                          /* chains of 3 and 2 pages, a older */
        int f0 = pool.n_free, freed = rx_cache_evict(c, f0 + 1) - f0;    /* make room for one page */
        RxCacheStats s = audit(c, "after one eviction");
        int32_t got[3];
        int a = rx_cache_lookup(c, 1, ta, 7, got), b = rx_cache_lookup(c, 1, tb, 5, got);
        expect(rx_cache_lookup(c, 1, ta, 7, NULL) == a && rx_cache_lookup(c, 1, tb, 5, NULL) == b,
               "%s: a lookup with pages_out NULL finds the same lengths", rx_cache_kind_name((RxCacheKind)kind));
        note("%-5s evict for one page: %ld evicted, %d freed, %d entries left, %d orphans (unreachable, held);"
             " a finds %d cached, b %d", rx_cache_kind_name((RxCacheKind)kind), s.evicted_pages, freed, s.nodes,
             s.orphans, a, b);
        if (kind == RX_CACHE_HASH) {                       /* the map's own picture marks them */
            char buf[1024];
            draw_cache(buf, sizeof buf, c);
            int marked = 0;
            for (const char *p = buf; (p = strstr(p, "(orphan)")); p++) marked++;
            expect(marked == 2, "rx_cache_draw marks %d entries as orphans, expected 2:\n%s", marked, buf);
        }
        if (kind == RX_CACHE_HASH)
            expect(s.evicted_pages == 1 && s.orphans == 2 && s.cached_pages == 4 && a == 0 && b == 4,
                   "hash: the LRU page is a's first; its 2 descendants stay cached as orphans that nothing can reach");
        else
            expect(s.evicted_pages == 3 && s.orphans == 0 && s.cached_pages == 2 && a == 0 && b == 4,
                   "radix: the LRU leaf goes whole (3 pages); nothing unreachable stays behind");
        rx_cache_free(c); rx_kv_pool_free(&pool);
    }
}

static void test_cache_request_larger_than_pool_is_an_error(void) {
    for (int kind = RX_CACHE_OFF; kind <= RX_CACHE_HASH; kind++) {
        RxKvPool pool;
        RxPrefixCache *c = cache_of(&pool, (RxCacheKind)kind, 2, 4, 0);
        const int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        RxRequest r;
        rx_request_init(&r, t, 9, 1);
        int rc = rx_request_admit(c, &r);
        expect(rc == -1 && strstr(radix_error(), "needs 3 pages of 4 tokens, but the KV pool has only 2"),
               "%s: admit returned %d: %s", rx_cache_kind_name((RxCacheKind)kind), rc, radix_error());
        expect(pool.n_free == 2 && r.state == RX_REQ_WAITING, "the failed admission took nothing");
        if (kind == RX_CACHE_OFF) note("%s", radix_error());
        rx_cache_free(c); rx_kv_pool_free(&pool);
    }
}

/* ---- the random trace: the caches against a brute-force model ---- */
#define TRACE_MAX_LEN 12
typedef struct { uint64_t model; int len; int32_t tok[TRACE_MAX_LEN]; int32_t page; } Prefix;
typedef struct { Prefix *v; int n, cap; } Prefixes;

static void collect_prefix(Prefixes *ps, uint64_t model, const int32_t *tokens, int len, int32_t page) {
    if (ps->n == ps->cap) ps->v = (Prefix *)realloc(ps->v, (size_t)(ps->cap = 2 * ps->cap + 16) * sizeof(Prefix));
    Prefix *p = &ps->v[ps->n++];
    p->model = model; p->len = len < TRACE_MAX_LEN ? len : TRACE_MAX_LEN; p->page = page;
    memcpy(p->tok, tokens, (size_t)p->len * sizeof(int32_t));
}

static int find_prefix(const Prefixes *ps, uint64_t model, const int32_t *tokens, int len) {
    for (int i = 0; i < ps->n; i++)
        if (ps->v[i].model == model && ps->v[i].len == len && !memcmp(ps->v[i].tok, tokens, (size_t)len * 4)) return i;
    return -1;
}

/* The prefixes in ever that the cache holds, each with the page that ends it: a prefix is cached when a lookup of
 * exactly its tokens matches all of them. */
static Prefixes cached_prefixes(RxPrefixCache *c, const Prefixes *ever, int P) {
    Prefixes now = {NULL, 0, 0};
    int32_t pages[TRACE_MAX_LEN];
    for (int i = 0; i < ever->n; i++) {
        const Prefix *p = &ever->v[i];
        if (rx_cache_lookup(c, p->model, p->tok, p->len, pages) == p->len)
            collect_prefix(&now, p->model, p->tok, p->len, pages[p->len / P - 1]);
    }
    return now;
}

static float fingerprint(uint64_t model, const int32_t *tokens, int n) {   /* of the history tokens[0..n) */
    uint64_t h = model * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        h = (h ^ (uint64_t)(uint32_t)tokens[i]) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 29;
    }
    return (float)(h % 1000003u);                                  /* an integer below 2^24: exact in a float */
}

typedef struct { RxRequest r; int32_t tok[TRACE_MAX_LEN]; } TraceReq;

static void trace_step_checks(RxPrefixCache *c, const RxKvPool *pool, const TraceReq *req, int n_req,
                              Prefixes *ever, int step, int *bad) {
    RxCacheStats s;
    if (rx_cache_audit(c, &s)) { expect(0, "step %d: audit: %s", step, radix_error()); *bad = 1; }
    Prefixes now = cached_prefixes(c, ever, pool->page_size);
    if (now.n != s.cached_pages - s.orphans) {                    /* each page a lookup can reach ends one prefix */
        expect(0, "step %d: lookups find %d of the prefixes ever inserted, but the cache holds %d reachable pages",
               step, now.n, s.cached_pages - s.orphans);
        *bad = 1;
    }
    long refs = 0, held = 0;
    for (int p = 0; p < pool->n_pages; p++) refs += pool->ref[p];
    for (int i = 0; i < n_req; i++) if (req[i].r.state == RX_REQ_RUNNING) held += req[i].r.n_pages;
    long cache_refs = refs - held;                                 /* what the cache must hold: one per cached page */
    if (cache_refs != s.cached_pages) {
        expect(0, "step %d: refs %ld, but the cache holds %d pages and the requests %ld refs", step, refs,
               s.cached_pages, held);
        *bad = 1;
    }
    for (int i = 0; i < now.n && !*bad; i++) {
        const Prefix *p = &now.v[i];
        int P = pool->page_size;
        if (p->len > P && find_prefix(&now, p->model, p->tok, p->len - P) < 0) {
            expect(0, "step %d: cached prefix of %d tokens without its parent", step, p->len);
            *bad = 1;
        }
        for (int k = 0; k < P; k++)                                /* the page holds the K/V of exactly this history */
            if (pool->k[(size_t)p->page * P + k] != fingerprint(p->model, p->tok, p->len - P + k + 1)) {
                expect(0, "step %d: page %d slot %d holds K of another history", step, p->page, k); *bad = 1; break;
            }
    }
    for (int i = 0; i < n_req && !*bad; i++) {                     /* locks: a running request's prefix stays cached */
        const RxRequest *r = &req[i].r;
        if (r->state != RX_REQ_RUNNING) continue;
        for (int n = pool->page_size; n <= r->cached_len && s.kind == RX_CACHE_RADIX; n += pool->page_size)
            if (find_prefix(&now, r->model_id, r->tokens, n) < 0) {
                expect(0, "step %d: a locked prefix was evicted", step);
                *bad = 1;
            }
    }
    free(now.v);
}

/* Random admits, finishes, aborts and preempts of short prompts over 3 token values and 2 models, under a pool of
 * 16 pages of 2 tokens: prefixes repeat, requests wait for room, the cache evicts all the time. After every step:
 * the audit (every page's ref = the cache's + the requests', the free list exact), the refs against the running
 * requests' page tables, every cached prefix was once inserted, has its parent, and its pages hold the K/V
 * fingerprints of exactly its history; running requests' prefixes stay cached (radix); and every admission's
 * cached length equals the brute-force longest cached page-aligned prefix of its first len - 1 tokens. */
static void test_cache_random_trace_balances_refs(void) {
    for (int kind = RX_CACHE_OFF; kind <= RX_CACHE_HASH; kind++) {
        RxKvPool pool;
        RxPrefixCache *c = cache_of(&pool, (RxCacheKind)kind, 16, 2, 1);
        enum { N_REQ = 5 };
        TraceReq req[N_REQ];
        Prefixes ever = {NULL, 0, 0};
        uint64_t rng = 1234 + kind;
        int bad = 0, counts[6] = {0}, hits = 0, step;
        for (int i = 0; i < N_REQ; i++) {
            rx_request_init(&req[i].r, req[i].tok, 0, 0);
            req[i].r.state = RX_REQ_FINISHED;
        }
        for (step = 0; step < 3000 && !bad; step++) {
            TraceReq *q = &req[rng_int(&rng, N_REQ)];
            RxRequest *r = &q->r;
            int op = rng_int(&rng, 4);
            if (r->state == RX_REQ_FINISHED || r->state == RX_REQ_ABORTED) {          /* a new prompt arrives */
                int len = 1 + rng_int(&rng, TRACE_MAX_LEN);
                for (int i = 0; i < len; i++) q->tok[i] = rng_int(&rng, 3);
                rx_request_init(r, q->tok, len, 1 + (uint64_t)rng_int(&rng, 2));
            }
            if (r->state == RX_REQ_WAITING) {
                Prefixes before = cached_prefixes(c, &ever, pool.page_size);
                int want = 0;
                for (int n = pool.page_size; n <= r->len - 1; n += pool.page_size)
                    if (find_prefix(&before, r->model_id, r->tokens, n) >= 0) want = n; else break;
                free(before.v);
                int rc = rx_request_admit(c, r);
                counts[rc == 0 ? 0 : 1]++;
                if (rc < 0) { expect(0, "step %d: admit failed: %s", step, radix_error()); bad = 1; }
                if (rc == 0 && r->cached_len != want) {
                    expect(0, "step %d: cached_len %d, the brute force finds %d", step, r->cached_len, want); bad = 1;
                }
                if (rc == 0) {                                     /* the forward: K of the suffix into own pages */
                    hits += r->cached_len;
                    for (int i = r->cached_len; i < r->len; i++)
                        pool.k[(size_t)r->pages[i / 2] * 2 + i % 2] = fingerprint(r->model_id, r->tokens, i + 1);
                    for (int i = 0; i < r->cached_len && !bad; i++)
                        if (pool.k[(size_t)r->pages[i / 2] * 2 + i % 2] != fingerprint(r->model_id, r->tokens, i + 1)) {
                            expect(0, "step %d: a cached page holds another history's K", step); bad = 1;
                        }
                }
            } else if (r->state == RX_REQ_RUNNING) {
                if (op <= 1) {
                    for (int n = pool.page_size; n <= r->len; n += pool.page_size) {     /* what finish inserts */
                        Prefix p = {r->model_id, n, {0}, -1};
                        memcpy(p.tok, r->tokens, (size_t)n * 4);
                        if (find_prefix(&ever, p.model, p.tok, n) < 0) collect_prefix(&ever, p.model, p.tok, n, -1);
                    }
                    expect(rx_request_finish(c, r) == 0, "finish: %s", radix_error());
                    counts[2]++;
                } else if (op == 2) {
                    rx_request_abort(c, r);
                    counts[3]++;
                } else {                                             /* preempt: abort, then wait again */
                    rx_request_abort(c, r);
                    rx_request_init(r, r->tokens, r->len, r->model_id);
                    counts[4]++;
                }
            }
            trace_step_checks(c, &pool, req, N_REQ, &ever, step, &bad);
        }
        for (int i = 0; i < N_REQ; i++) rx_request_abort(c, &req[i].r);
        RxCacheStats s = audit(c, "after the trace");
        expect(s.request_pages == 0 && pool.n_free + s.cached_pages == pool.n_pages,
               "%s: %d pages held by requests, %d free + %d cached of %d", rx_cache_kind_name((RxCacheKind)kind),
               s.request_pages, pool.n_free, s.cached_pages, pool.n_pages);
        note("%-5s %d steps: %d admitted (%d had to wait), %d finished, %d aborted, %d preempted; %d tokens from the"
             " cache, %ld pages evicted; at the end %d pages held by requests, %d cached, %d free",
             rx_cache_kind_name((RxCacheKind)kind), step, counts[0], counts[1], counts[2], counts[3], counts[4], hits,
             s.evicted_pages, s.request_pages, s.cached_pages, pool.n_free);
        expect(kind == RX_CACHE_OFF ||
               (hits > 0 && s.evicted_pages > 0 && counts[1] > 0 && counts[3] > 0 && counts[4] > 0),
               "the trace must exercise hits, evictions, waits, aborts and preemptions");
        rx_cache_free(c);
        expect(pool.n_free == pool.n_pages, "after rx_cache_free: %d of %d pages free", pool.n_free, pool.n_pages);
        free(ever.v);
        rx_kv_pool_free(&pool);
    }
}

/* ------------------------------------------------------------------------- part ii: prefill on a cached prefix */
/* The forward's side of the KV prefix cache, specified without the cache: each test fills an RxKvPool itself and
 * hands out page ids by hand, in the order a cache would. The rule every test checks: prefilling a suffix on top of
 * cached K/V gives the last-token logits, and writes the K/V, that a full recomputation of the whole sequence gives,
 * bit for bit, in every mode. */
#define PF_MAX_LEN 96                   /* tokens per request: below the fixtures' max_position_embeddings 128 */

typedef struct { RxKvPool pool; int next_page; } TestPool;

/* Every slot starts as NaN: a slot read before anything wrote it poisons the logits, and the comparison fails. */
static int test_pool_make(TestPool *t, int n_pages, int page_size, const Qwen3Config *c) {
    RxKvPool *p = &t->pool;
    memset(t, 0, sizeof *t);
    p->n_pages = n_pages;
    p->page_size = page_size;
    p->n_layers = c->n_layers;
    p->kv_dim = c->n_kv_heads * c->head_dim;
    size_t n = (size_t)n_pages * page_size * p->n_layers * p->kv_dim;
    p->k = (float *)malloc(n * sizeof(float));
    p->v = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; p->k && p->v && i < n; i++) p->k[i] = p->v[i] = NAN;
    return p->k && p->v ? 0 : -1;
}

static void test_pool_free(TestPool *t) { free(t->pool.k); free(t->pool.v); }

/* K (or V) of every layer at position `pos` of a sequence with page table `pages`: [n_layers * kv_dim] */
static const float *pool_slot(const RxKvPool *p, const float *kv, const int32_t *pages, int pos) {
    return kv + (size_t)(pages[pos / p->page_size] * p->page_size + pos % p->page_size) * p->n_layers * p->kv_dim;
}

/* Bit-for-bit equality of n floats, every one finite (a NaN equal to a NaN is no match). */
static int same_bits_finite(const float *a, const float *b, size_t n, double *max_diff) {
    int ok = 1;
    *max_diff = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) { *max_diff = INFINITY; return 0; }
        ok &= !memcmp(&a[i], &b[i], sizeof(float));
        *max_diff = fmax(*max_diff, fabs((double)a[i] - b[i]));
    }
    return ok;
}

/* One request as the cache hands it to the forward: its tokens, the cached part, its page table, its prefix key. */
typedef struct { int32_t tok[PF_MAX_LEN]; int len, cached; int32_t pages[PF_MAX_LEN]; int32_t key; } PfRequest;

/* Pages for positions cached .. len-1 of r, handed out in order (the cached ones are already in r->pages). */
static void pf_own_pages(PfRequest *r, TestPool *t) {
    int P = t->pool.page_size;
    for (int j = r->cached / P; j < (r->len + P - 1) / P; j++) r->pages[j] = t->next_page++;
    r->key = r->cached ? r->pages[r->cached / P - 1] : -1;   /* the last cached page names the whole prefix */
}

/* Prefills the suffixes of n requests in one batch: last-token logits [n, vocab], rows computed, and the batch. */
static int pf_run(const Qwen3Model *m, TestPool *t, PfRequest *r, int n, RxMode mode, float *logits, int *rows,
                  RxBatch *b) {
    const int32_t *seqs[16], *pages[16];
    int lens[16];
    int32_t cached[16], key[16];
    for (int s = 0; s < n; s++) {
        seqs[s] = r[s].tok + r[s].cached;
        lens[s] = r[s].len - r[s].cached;
        cached[s] = r[s].cached;
        key[s] = r[s].key;
        pages[s] = r[s].pages;
    }
    if (rx_batch_make(b, seqs, lens, n)) return -1;
    for (int s = 0; s < n; s++)                          /* the suffix continues after the cached tokens */
        for (int i = b->cu_seqlens[s]; i < b->cu_seqlens[s + 1]; i++) b->position_ids[i] += cached[s];
    RxPrefill pf = {.pool = &t->pool, .cached_len = cached, .pages = pages, .prefix_key = key};
    if (qwen3_prefill_ref(m, b, &pf, mode, logits, rows) == 0) return 0;
    rx_batch_free(b);
    return -1;
}

/* The full recomputation: qwen3_forward_ref (baseline, no cache) on the whole requests; last-token logits. */
static int pf_full_logits(const Qwen3Model *m, const PfRequest *r, int n, float *last) {
    const int32_t *seqs[16];
    int lens[16], V = m->cfg.vocab_size;
    for (int s = 0; s < n; s++) {
        seqs[s] = r[s].tok;
        lens[s] = r[s].len;
    }
    RxBatch b;
    if (rx_batch_make(&b, seqs, lens, n)) return -1;
    float *all = (float *)malloc(sizeof(float) * (size_t)b.n_tokens * V);
    int rc = !all || qwen3_forward_ref(m, &b, RX_BASELINE, all);
    for (int s = 0; !rc && s < n; s++)
        memcpy(last + (size_t)s * V, all + (size_t)(b.cu_seqlens[s + 1] - 1) * V, sizeof(float) * V);
    free(all);
    rx_batch_free(&b);
    return rc ? -1 : 0;
}

/* Layer 0's K and V of a token, from the building blocks alone (embedding, input norm, k/v projections, k_norm and
 * RoPE): an oracle for the pool's contents that goes through neither the forward nor the pool. */
static void layer0_kv(const Qwen3Model *m, int32_t tok, int32_t pos, float *k, float *v) {
    const Qwen3Config *c = &m->cfg;
    int H = c->hidden_size, KVD = c->n_kv_heads * c->head_dim;
    float *emb = (float *)malloc(sizeof(float) * (size_t)c->vocab_size * H);
    float *w = (float *)malloc(sizeof(float) * (size_t)KVD * H), *x = (float *)malloc(sizeof(float) * H);
    float *nw = (float *)malloc(sizeof(float) * H);
    rx_tensor_to_f32(m->embed, emb);
    rx_tensor_to_f32(m->layers[0].input_norm, nw);
    rx_rmsnorm_ref(x, emb + (size_t)tok * H, nw, 1, H, (float)c->rms_norm_eps);
    rx_tensor_to_f32(m->layers[0].k_proj, w);
    rx_matmul_ref(k, x, w, 1, H, KVD);
    rx_tensor_to_f32(m->layers[0].k_norm, nw);
    rx_qk_norm_rope_ref(k, nw, &pos, 1, c->n_kv_heads, c->head_dim, (float)c->rms_norm_eps, c->rope_theta);
    rx_tensor_to_f32(m->layers[0].v_proj, w);
    rx_matmul_ref(v, x, w, 1, H, KVD);
    free(emb); free(w); free(x); free(nw);
}

/* One random request trace on model m with page size P, prefilled in `mode`:
 *   - 3 prefixes (1 .. 60 tokens), prefilled once from nothing (cached_len 0) to fill their pages;
 *   - 8 requests, each a cut of a prefix plus 0 .. 10 new tokens, a third of them copying an earlier request's
 *     suffix (so that compaction has something to merge); request 0 is a whole prefix, so the len - 1 cap binds;
 *   - each request's cached_len: 0, one page, as many pages as the cache could hold, or a random page count,
 *     never past the len - 1 cap or the part it really shares with the prefix.
 * Checks: last-token logits == qwen3_forward_ref on the whole requests, bit for bit; every slot of every request's
 * page table (cached and new) == the K/V of a full recomputation (each request prefilled alone from nothing) bit
 * for bit; layer 0 of those == the building-block oracle. */
static void pf_trace(const Qwen3Model *m, const char *model, int P, RxMode mode, uint64_t seed) {
    const Qwen3Config *c = &m->cfg;
    int V = c->vocab_size, KVD = c->n_kv_heads * c->head_dim;
    uint64_t rng = seed;
    TestPool t, full;
    if (test_pool_make(&t, 11 * (PF_MAX_LEN / P + 1), P, c) || test_pool_make(&full, PF_MAX_LEN / P + 1, P, c)) {
        expect(0, "out of memory for the pools");
        test_pool_free(&t); test_pool_free(&full);
        return;
    }
    PfRequest pre[3], req[8];
    memset(pre, 0, sizeof pre); memset(req, 0, sizeof req);
    for (int j = 0; j < 3; j++) {                       /* prefix 1: prefix 0 with one token changed */
        pre[j].len = 1 + rng_int(&rng, 60);
        for (int i = 0; i < pre[j].len; i++)
            pre[j].tok[i] = j == 1 && i < pre[0].len ? pre[0].tok[i] : 1 + rng_int(&rng, V - 1);
        if (j == 1) pre[1].tok[rng_int(&rng, pre[1].len)] ^= 1;
        pf_own_pages(&pre[j], &t);
    }
    float *logits = (float *)malloc(sizeof(float) * 8 * V), *want = (float *)malloc(sizeof(float) * 8 * V);
    RxBatch b;
    int rows, rc = pf_run(m, &t, pre, 3, mode, logits, &rows, &b);
    expect(rc == 0, "%s P=%d %s: prefilling the prefixes: %s", model, P, rx_mode_name(mode), radix_error());
    if (!rc) rx_batch_free(&b);
    int from[8];                                         /* the prefix each request continues */
    for (int s = 0; s < 8 && !rc; s++) {
        PfRequest *r = &req[s];
        int copy = s > 0 && rng_int(&rng, 2) == 0 ? rng_int(&rng, s) : -1;
        int j = from[s] = s == 0 ? 0 : copy >= 0 ? from[copy] : rng_int(&rng, 3), other = (j + 1) % 3;
        if (copy >= 0 && rng_int(&rng, 2) && pre[other].len >= req[copy].cached) {
            *r = req[copy];                              /* the same new tokens after another cached prefix */
            memcpy(r->tok, pre[other].tok, sizeof(int32_t) * (size_t)r->cached);
            j = from[s] = other;
        } else if (copy >= 0) {                          /* the same request again: same prefix, same new tokens */
            *r = req[copy];
        } else {
            r->len = s == 0 ? pre[j].len : rng_int(&rng, pre[j].len + 1);
            memcpy(r->tok, pre[j].tok, sizeof(int32_t) * (size_t)r->len);
            int extra = s == 0 ? 0 : rng_int(&rng, 11);
            for (int i = 0; i < extra || r->len == 0; i++) r->tok[r->len++] = 1 + rng_int(&rng, V - 1);
        }
        int shared = 0;                                  /* what the request really shares with the prefix */
        while (shared < r->len && shared < pre[j].len && r->tok[shared] == pre[j].tok[shared]) shared++;
        int cap = shared < r->len - 1 ? shared : r->len - 1;
        if (cap > pre[j].len) cap = pre[j].len;
        cap = cap / P * P;                               /* page-aligned, at most len - 1 */
        if (copy < 0) {
            int pick = rng_int(&rng, 4);
            r->cached = pick == 0   ? 0                          /* nothing cached */
                        : pick == 1 ? (cap >= P ? P : 0)         /* one page       */
                        : pick == 2 ? cap                        /* all it can     */
                                    : rng_int(&rng, cap / P + 1) * P;
            if (s == 0) r->cached = cap;
        }
        memcpy(r->pages, pre[j].pages, sizeof(int32_t) * (size_t)(r->cached / P));
        pf_own_pages(r, &t);
    }
    int n_cached = 0;
    for (int s = 0; s < 8; s++) n_cached += req[s].cached;
    if (!rc) {
        rc = pf_run(m, &t, req, 8, mode, logits, &rows, &b);
        expect(rc == 0, "%s P=%d %s: prefill: %s", model, P, rx_mode_name(mode), radix_error());
    }
    if (!rc) {
        int nc = -1;
        {   /* N': the keyed trie over the suffixes, for the note */
            int32_t key[8];
            RadixIndex ix;
            for (int s = 0; s < 8; s++) key[s] = req[s].key;
            if (!radix_index_build_keyed(&ix, b.input_ids, b.position_ids, b.cu_seqlens, 8, key)) nc = ix.n_compact;
            check_against_keyed_oracle(&ix, &b, key, "keyed trie of the trace");
            radix_index_free(&ix);
        }
        expect(rows == (mode == RX_BASELINE ? b.n_tokens : nc), "%s: %d rows computed, expected %d", rx_mode_name(mode),
               rows, mode == RX_BASELINE ? b.n_tokens : nc);
        double d;
        expect(pf_full_logits(m, req, 8, want) == 0, "full recomputation: %s", radix_error());
        int same = same_bits_finite(logits, want, (size_t)8 * V, &d);
        expect(same, "%s P=%d %s: prefill logits differ from full recomputation (max |diff| %g)", model, P,
               rx_mode_name(mode), d);
        /* The K/V: each request alone, from nothing, into its own pages of a second pool. */
        double dkv = 0, d0 = 0;
        int kv_same = 1, l0_same = 1;
        float *k0 = (float *)malloc(sizeof(float) * KVD), *v0 = (float *)malloc(sizeof(float) * KVD);
        for (int s = 0; s < 8 && !test_failed; s++) {
            PfRequest alone = req[s];
            alone.cached = 0;
            pf_own_pages(&alone, &full);
            RxBatch fb;
            float *l1 = (float *)malloc(sizeof(float) * V);
            if (pf_run(m, &full, &alone, 1, RX_BASELINE, l1, NULL, &fb) == 0) rx_batch_free(&fb);
            else expect(0, "full prefill: %s", radix_error());
            free(l1);
            for (int p = 0; p < req[s].len && !test_failed; p++) {
                size_t n = (size_t)c->n_layers * KVD;
                double dk, dv;
                kv_same &= same_bits_finite(pool_slot(&t.pool, t.pool.k, req[s].pages, p),
                                            pool_slot(&full.pool, full.pool.k, alone.pages, p), n, &dk);
                kv_same &= same_bits_finite(pool_slot(&t.pool, t.pool.v, req[s].pages, p),
                                            pool_slot(&full.pool, full.pool.v, alone.pages, p), n, &dv);
                dkv = fmax(dkv, fmax(dk, dv));
                if (mode != RX_BASELINE) continue;      /* the oracle is slow: once per trace is enough */
                layer0_kv(m, req[s].tok[p], p, k0, v0);
                l0_same &= same_bits_finite(pool_slot(&t.pool, t.pool.k, req[s].pages, p), k0, KVD, &dk);
                l0_same &= same_bits_finite(pool_slot(&t.pool, t.pool.v, req[s].pages, p), v0, KVD, &dv);
                d0 = fmax(d0, fmax(dk, dv));
            }
            full.next_page = 0;
        }
        free(k0); free(v0);
        expect(kv_same, "%s P=%d %s: K/V in the pages differ from a full recomputation's (max |diff| %g)", model, P,
               rx_mode_name(mode), dkv);
        expect(l0_same, "%s P=%d %s: layer-0 K/V differ from the building-block oracle (max |diff| %g)", model, P,
               rx_mode_name(mode), d0);
        char oracle[32] = "";
        if (mode == RX_BASELINE) snprintf(oracle, sizeof oracle, ", layer-0 oracle %g", d0);
        note("%-11s P=%-2d %-8s %3d tokens = %3d cached + %3d new (N), N' = %3d, %3d rows; max|diff| logits %g, "
             "K/V %g%s (tol 0, bits)", model, P, rx_mode_name(mode), n_cached + b.n_tokens, n_cached, b.n_tokens, nc,
             rows, d, dkv, oracle);
        rx_batch_free(&b);
    }
    free(logits); free(want);
    test_pool_free(&t); test_pool_free(&full);
}

static void test_prefill_equals_full_recomputation_on_random_traces(void) {
    const int pages[] = {1, 4, 16};
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 21)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    for (int pi = 0; pi < 3; pi++)
        for (int mode = RX_BASELINE; mode <= RX_COMPACT; mode++)
            pf_trace(&m, "random", pages[pi], (RxMode)mode, 500 + 10 * pi + mode);
    qwen3_free(&m);
    if (!have_fixtures()) return;
    const char *models[] = {"tiny-tied", "tiny-untied", "tiny-bf16"};
    for (int mi = 0; mi < 3; mi++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", fixtures(), models[mi]);
        if (qwen3_load(&m, p)) { expect(0, "%s: %s", models[mi], radix_error()); continue; }
        for (int pi = 0; pi < 3; pi++)
            for (int mode = RX_BASELINE; mode <= RX_COMPACT; mode++)
                pf_trace(&m, models[mi], pages[pi], (RxMode)mode, 700 + 100 * mi + 10 * pi + mode);
        qwen3_free(&m);
    }
}

/* Item 3's two rules on a random model, P = 4. Prefix A (8 tokens, two pages) is cached once; prefix B is A with one
 * token changed inside its first page, cached in pages of its own. S is 5 new tokens at positions 8..12.
 *   A+S, A+S, A+S[:2]+T: same prefix key -> the first two share all 5 rows, the third shares the first 2: N' = 8.
 *   A+S, B+S:            same tokens at the same positions, different prefix keys -> never merged: N' = 10.
 * An unkeyed trie would merge A+S and B+S (N' = 5) and give B+S the logits of A+S: the test shows they differ.
 * Returns how many of the three modes' forwards failed; 0: logits holds the last mode's (compact) logits. */
static int pf_keying_case(const Qwen3Model *m, TestPool *t, PfRequest *r, int n, int want_nc, const char *what,
                          float *logits) {
    float *want = (float *)malloc(sizeof(float) * (size_t)n * m->cfg.vocab_size);
    int failed = 0;
    for (int mode = RX_BASELINE; mode <= RX_COMPACT; mode++) {
        RxBatch b;
        int rows = -1;
        for (int s = 0; s < n; s++) { t->next_page = 8 + 4 * s; pf_own_pages(&r[s], t); }   /* fresh own pages */
        int rc = pf_run(m, t, r, n, (RxMode)mode, logits, &rows, &b);
        expect(rc == 0, "%s: %s", what, radix_error());
        failed += rc != 0;
        if (rc) continue;
        double d;
        expect(pf_full_logits(m, r, n, want) == 0, "%s", radix_error());
        int same = same_bits_finite(logits, want, (size_t)n * m->cfg.vocab_size, &d);
        expect(same, "%s %s: logits differ from full recomputation by %g", what, rx_mode_name((RxMode)mode), d);
        int want_rows = mode == RX_BASELINE ? b.n_tokens : want_nc;
        expect(rows == want_rows, "%s %s: %d rows computed, expected %d", what, rx_mode_name((RxMode)mode), rows,
               want_rows);
        RadixIndex plain;                               /* what a trie without prefix keys would have done */
        radix_index_build(&plain, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs);
        if (mode == RX_COMPACT) {
            note("%s: N = %d new tokens after %d cached, N' = %d (an unkeyed trie: %d), logits vs full "
                 "recomputation: max|diff| %g", what, b.n_tokens, r[0].cached * n, rows, plain.n_compact, d);
            printf("    ");
            RxPrefill pf = {.pool = &t->pool, .cached_len = NULL, .pages = NULL, .prefix_key = NULL};
            int32_t cached[8], key[8];
            const int32_t *pages[8];
            for (int s = 0; s < n; s++) {
                cached[s] = r[s].cached;
                key[s] = r[s].key;
                pages[s] = r[s].pages;
            }
            pf.cached_len = cached;
            pf.prefix_key = key;
            pf.pages = pages;
            expect(rx_prefill_print(stdout, &b, &pf, rows) == 0, "rx_prefill_print: %s", radix_error());
        }
        radix_index_free(&plain);
        rx_batch_free(&b);
    }
    free(want);
    return failed;
}

/* The model, a pool of 64 pages of 4, A and B cached, and S. */
static int pf_keying_setup(Qwen3Model *m, TestPool *t, PfRequest *a, PfRequest *bb, int32_t *suffix) {
    Qwen3Config cfg = tiny_config();
    if (qwen3_random(m, &cfg, 31)) { expect(0, "qwen3_random: %s", radix_error()); return -1; }
    if (test_pool_make(t, 64, 4, &cfg)) { expect(0, "out of memory for the pool"); qwen3_free(m); return -1; }
    uint64_t rng = 77;
    memset(a, 0, sizeof *a); memset(bb, 0, sizeof *bb);
    a->len = 8;
    for (int i = 0; i < 8; i++) a->tok[i] = 1 + rng_int(&rng, m->cfg.vocab_size - 1);
    *bb = *a;
    bb->tok[1] = a->tok[1] % (m->cfg.vocab_size - 1) + 1;      /* one token differs, inside the first page */
    for (int i = 0; i < 5; i++) suffix[i] = 1 + rng_int(&rng, m->cfg.vocab_size - 1);
    RxBatch b;
    float *l = (float *)malloc(sizeof(float) * 2 * m->cfg.vocab_size);
    PfRequest both[2] = {*a, *bb};
    t->next_page = 0;
    pf_own_pages(&both[0], t); pf_own_pages(&both[1], t);    /* A in pages 0-1, B in pages 2-3 */
    if (pf_run(m, t, both, 2, RX_BASELINE, l, NULL, &b) == 0) rx_batch_free(&b);
    else expect(0, "caching A and B: %s", radix_error());
    free(l);
    *a = both[0], *bb = both[1];
    return 0;
}

static PfRequest pf_continue(const PfRequest *prefix, const int32_t *suffix, int n_suffix) {
    PfRequest r = *prefix;
    memcpy(r.tok + r.len, suffix, sizeof(int32_t) * (size_t)n_suffix);
    r.len += n_suffix;
    r.cached = prefix->len;                              /* both of its pages */
    return r;
}

static void test_same_suffix_after_same_prefix_merges(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    TestPool t;
    PfRequest a, b, r[3];
    int32_t s[5], s2[5];
    if (pf_keying_setup(&m, &t, &a, &b, s)) return;
    memcpy(s2, s, sizeof s);
    /* T: shares the first 2 tokens of S */
    s2[2] = s[2] % (cfg.vocab_size - 1) + 1;
    s2[3] = s[4];
    s2[4] = s[3];
    r[0] = pf_continue(&a, s, 5);
    r[1] = pf_continue(&a, s, 5);
    r[2] = pf_continue(&a, s2, 5);
    float *logits = (float *)malloc(sizeof(float) * 3 * cfg.vocab_size);
    if (pf_keying_case(&m, &t, r, 3, 8, "A+S, A+S, A+S[:2]+T", logits) == 0)    /* compared only when computed */
        expect(!memcmp(logits, logits + cfg.vocab_size, sizeof(float) * cfg.vocab_size),
               "the two A+S requests got different logits");
    free(logits);
    test_pool_free(&t);
    qwen3_free(&m);
}

static void test_same_suffix_after_different_prefix_not_merged(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    TestPool t;
    PfRequest a, b, r[2];
    int32_t s[5];
    if (pf_keying_setup(&m, &t, &a, &b, s)) return;
    r[0] = pf_continue(&a, s, 5);
    r[1] = pf_continue(&b, s, 5);
    float *logits = (float *)malloc(sizeof(float) * 2 * cfg.vocab_size);
    if (pf_keying_case(&m, &t, r, 2, 10, "A+S, B+S (A, B differ at position 1)", logits) == 0) {
        double d = max_abs_diff(logits, logits + cfg.vocab_size, (size_t)cfg.vocab_size);
        expect(d > 0, "A+S and B+S got the same logits: the prefix did not matter");
        note("A+S vs B+S logits: max|diff| %g (> 0: merging them would have been wrong)", d);
    }
    free(logits);
    test_pool_free(&t);
    qwen3_free(&m);
}

/* radix_index_build_keyed against the brute-force oracle, on random batches with random keys from a small set
 * (so equal keys are common); with no keys it is radix_index_build. */
static void test_keyed_trie_matches_bruteforce_oracle(void) {
    uint64_t rng = 99;
    long tokens = 0, compact = 0;
    for (int t = 0; t < 2000 && !test_failed; t++) {
        int n_seqs = 1 + rng_int(&rng, 8), lens[8], at = 0, vocab = 1 + rng_int(&rng, 3);
        int32_t ids[8 * 10], pos[8 * 10], key[8];
        for (int s = 0; s < n_seqs; s++) {
            lens[s] = rng_int(&rng, 10);
            key[s] = rng_int(&rng, 4) - 1;                       /* -1 (nothing cached), 0, 1 or 2 */
            int start = rng_int(&rng, 2) * 4;                     /* suffixes after 0 or 4 cached tokens */
            for (int i = 0; i < lens[s]; i++) {
                ids[at + i] = rng_int(&rng, vocab);
                pos[at + i] = start + i;
            }
            at += lens[s];
        }
        RxBatch b = batch_of(n_seqs, lens, ids, pos);
        int nc = build_on_both_paths(&b, key, "keyed batch");
        tokens += b.n_tokens;
        compact += nc;
        rx_batch_free(&b);
    }
    int32_t bad[1] = {-2}, id[1] = {1}, p0[1] = {0}, cu[2] = {0, 1};
    RadixIndex ix;
    expect(radix_index_build_keyed(&ix, id, p0, cu, 1, bad) != 0 && strstr(radix_error(), "root key -2"),
           "root key -2 accepted: '%s'", radix_error());
    summary("2000 random batches, keys in {-1, 0, 1, 2}: %ld tokens -> %ld compact rows, all as the oracle says, "
            "built by Algorithm 2's scan and by its refinements; key -2 -> %s", tokens, compact, radix_error());
}

/* Bad RxPrefill inputs: each rejected with one sentence, nothing written. */
static void test_prefill_rejects_bad_inputs(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    TestPool t;
    if (qwen3_random(&m, &cfg, 41) || test_pool_make(&t, 8, 4, &cfg)) { expect(0, "setup: %s", radix_error()); return; }
    /* two sequences of 3 new tokens after 4 cached ones: pages {0, 1} and {0, 2} */
    int32_t ids[] = {5, 6, 7, 8, 9, 10}, pos[] = {4, 5, 6, 4, 5, 6};
    int lens[] = {3, 3};
    struct { const char *what, *msg; int32_t cached[2], key[2], p0[2], p1[2], pos0; int layers; } cases[] = {
        {"negative cached_len", "sequence 0: cached_len -4 is negative", {-4, 4}, {0, 0}, {0, 1}, {0, 2}, 4, 2},
        {"a decode step's own partial page shared", "page 0 is written by sequence 0 and also written by sequence 1",
         {3, 3}, {0, 0}, {0, 1}, {0, 2}, 3, 2},
        {"page id = n_pages", "page table entry 1 is page 8, outside the pool's 8 pages",
         {4, 4}, {0, 0}, {0, 8}, {0, 2}, 4, 2},
        {"negative page id", "page table entry 0 is page -1", {4, 4}, {0, 0}, {-1, 1}, {0, 2}, 4, 2},
        {"positions not after cached_len", "new token 0 is at position 3; after 4 cached tokens it must be at 4",
         {4, 4}, {0, 0}, {0, 1}, {0, 2}, 3, 2},
        {"cached tokens without a prefix key", "prefix key -1; it must be the page of the last cached token, 0",
         {4, 4}, {-1, 0}, {0, 1}, {0, 2}, 4, 2},
        {"a prefix key that names another prefix",
         "sequence 1: prefix key 2; it must be the page of the last cached token, 0",
         {4, 4}, {0, 2}, {0, 1}, {0, 2}, 4, 2},
        {"one page written by two sequences", "page 1 is written by sequence 0 and also written by sequence 1",
         {4, 4}, {0, 0}, {0, 1}, {0, 1}, 4, 2},
        {"a cached page written over", "page 0 is written by sequence 1 and also read by sequence 0",
         {4, 0}, {0, -1}, {0, 1}, {0, 2}, 4, 2},
        {"a pool for another model", "the KV pool holds 3 layers x 64 floats per token; the model needs 2 x 64",
         {4, 4}, {0, 0}, {0, 1}, {0, 2}, 4, 3},
    };
    float *logits = (float *)malloc(sizeof(float) * 2 * cfg.vocab_size);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RxBatch b = batch_of(2, lens, ids, pos);
        for (int s = 0; s < 2; s++)
            for (int j = 0; j < 3; j++) b.position_ids[3 * s + j] = (s ? cases[i].cached[1] : cases[i].pos0) + j;
        const int32_t *pages[2] = {cases[i].p0, cases[i].p1};
        t.pool.n_layers = cases[i].layers;
        RxPrefill pf = {.pool = &t.pool, .cached_len = cases[i].cached, .pages = pages, .prefix_key = cases[i].key};
        int rc = qwen3_prefill_ref(&m, &b, &pf, RX_COMPACT, logits, NULL);
        expect(rc != 0 && strstr(radix_error(), cases[i].msg) && !strchr(radix_error(), '\n'),
               "%s: rc %d, '%s' lacks '%s'", cases[i].what, rc, radix_error(), cases[i].msg);
        note("%-42s -> %s", cases[i].what, radix_error());
        t.pool.n_layers = cfg.n_layers;
        rx_batch_free(&b);
    }
    size_t n = (size_t)t.pool.n_pages * t.pool.page_size * cfg.n_layers * t.pool.kv_dim, written = 0;
    for (size_t i = 0; i < n; i++) written += !isnan(t.pool.k[i]) || !isnan(t.pool.v[i]);
    expect(written == 0, "a rejected prefill wrote %zu floats into the pool", written);
    free(logits);
    test_pool_free(&t);
    qwen3_free(&m);
}

/* Serving fuzzed against recomputation without the cache: a trace drawn from bytes (libFuzzer's, or the seeded
 * driver's), served by rx_serve, each request's last-token logits compared with its own baseline forward, no cache,
 * bit for bit. Requests: copies of earlier ones (duplicates), a stem's first tokens then their own, single tokens;
 * batches of 1 to 4, 1 to 1024, or 1024; a pool with room for the whole trace, or one just above the largest
 * request, which forces eviction. Style 3 (byte 0): every request a copy of one short one, batch 1024, as a
 * reranking batch of duplicates: more sequences than compact rows in one prefill. Every page comes back at the end. */
enum { SRV_REQS = 64, SRV_LEN = 48, SRV_GEN = 6 };
typedef struct {
    int n_req, lens[SRV_REQS];
    int32_t toks[SRV_REQS][SRV_LEN];
    int32_t after[SRV_REQS];           /* generating traces: request s may continue an earlier one (@K)        */
    int32_t eos[1];
    RxGenerate gen;                    /* gen.max_new 0: a prefill-only trace (o.gen NULL)                     */
    RxServeOptions o;
} SrvCase;
typedef struct {
    int traces, requests, duplicates, batch_max, preemptions;
    long cached, cached_generated, evicted, steps_checked, generated;
} SrvStats;

static void srv_case_draw(FuzzIn *in, SrvCase *sc, int vocab) {
    int32_t stems[3][SRV_LEN];
    int style = fuzz_byte(in) % 4, tight = fuzz_byte(in) & 1, big = 1;
    memset(sc, 0, sizeof *sc);
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < SRV_LEN; i++) stems[g][i] = (int32_t)(1 + (fuzz_byte(in) * 7 + i) % (vocab - 1));
    sc->n_req = 1 + fuzz_byte(in) % SRV_REQS;
    for (int s = 0; s < sc->n_req; s++) {
        int kind = fuzz_byte(in) % 4, g = fuzz_byte(in) % 3, shared = fuzz_byte(in) % SRV_LEN;
        int len = kind == 3 ? 1 : 1 + fuzz_byte(in) % (style == 3 ? 8 : SRV_LEN);
        if (style == 3) kind = 0;                                        /* copies of one short request */
        if (kind == 0 && s > 0) {                                        /* a copy of an earlier request */
            int j = style == 3 ? 0 : fuzz_byte(in) % s;
            len = sc->lens[j];
            memcpy(sc->toks[s], sc->toks[j], sizeof(int32_t) * (size_t)len);
        } else {
            for (int i = 0; i < len; i++) sc->toks[s][i] = i < shared ? stems[g][i] : 1 + fuzz_byte(in) % (vocab - 1);
        }
        sc->lens[s] = len;
        if (len > big) big = len;
    }
    uint8_t d[6];                      /* read first: an initializer list's calls may run in any order */
    for (int i = 0; i < 6; i++) d[i] = (uint8_t)fuzz_byte(in);
    RxServeOptions o = {
        .cache = (RxCacheKind)(d[0] % 3),
        .page_size = 1 + d[1] % 8,
        .n_pages = 0,
        .batch = style == 0 ? 1 + d[2] % 4 : style == 1 ? 1 + (d[2] * 256 + d[3]) % 1024 : 1024,   /* 2, 3: 1024 */
        .lpm = d[4] & 1,
        .mode = (RxMode)(d[5] % 4),
        .model_id = 42,
        .trace = NULL,
        .show_cache = NULL,
        .gpu = NULL,
    };
    for (int i = 0; i < 6; i++) d[i] = (uint8_t)fuzz_byte(in);    /* generation: max_new, T, top-k, top-p, eos */
    int gen = style != 3 && d[0] % 3 != 0;
    sc->gen = (RxGenerate){
        .max_new = gen ? 1 + d[1] % SRV_GEN : 0,
        .temperature = d[2] & 1 ? 0.0f : 0.5f + (d[2] >> 1) % 4 * 0.5f,
        .top_k = d[3] % 3 == 0 ? 0 : 1 + d[3] % 40,
        .top_p = d[4] % 2 ? 1.0f : 0.5f + (d[4] >> 1) % 5 * 0.1f,
        .seed = d[5],
        .eos = sc->eos,
        .n_eos = d[5] % 4 == 0,
    };
    sc->eos[0] = (int32_t)(d[1] % vocab);
    for (int s = 0; s < sc->n_req; s++) {           /* a turn 2: only of a turn 1, to stay within the positions */
        int k = gen && s > 0 && fuzz_byte(in) % 3 == 0 ? fuzz_byte(in) % s : -1;
        sc->after[s] = k >= 0 && sc->after[k] < 0 ? k : -1;
        int most = (sc->after[s] >= 0 ? sc->lens[k] + sc->gen.max_new : 0) + sc->lens[s] + sc->gen.max_new;
        if (most > big) big = most;
    }
    if (gen) {
        o.gen = &sc->gen;
        o.after = sc->after;
    }
    if (tight) o.n_pages = (big + o.page_size - 1) / o.page_size + fuzz_byte(in) % 4;   /* one request, and a bit */
    sc->o = o;
}

/* rx_serve's on_logits in the fuzzer: every logits row of every step, prefill or decode, equals a full forward of
 * the history that gave it, without the cache, bit for bit. */
typedef struct { const Qwen3Model *m; const char *what; long checked; float *ref; } StepCheck;
static int srv_step_check(void *ctx, int request, const int32_t *history, int len, const float *logits) {
    StepCheck *k = (StepCheck *)ctx;
    RxBatch b;
    char what[300];
    if (rx_batch_make(&b, &history, &len, 1) || qwen3_forward_ref_last(k->m, &b, RX_BASELINE, k->ref, NULL)) {
        expect(0, "%s: the recomputation of request %d: %s", k->what, request, radix_error());
        rx_batch_free(&b);
        return -1;
    }
    rx_batch_free(&b);
    snprintf(what, sizeof what, "%s: request %d, the logits of its history of %d tokens vs a full forward", k->what,
             request, len);
    k->checked++;
    return expect_identical(what, logits, k->ref, (size_t)k->m->cfg.vocab_size) ? 0 : -1;
}

static void srv_case_check(const Qwen3Model *m, const SrvCase *sc, SrvStats *st) {
    int V = m->cfg.vocab_size, n = sc->n_req;
    const int32_t *ptr[SRV_REQS];
    int32_t cached_of[SRV_REQS];
    float *got = floats((size_t)n * V), *all = floats((size_t)SRV_LEN * V);
    RxServeStats ss;
    for (int s = 0; s < n; s++) ptr[s] = sc->toks[s];
    char what[160];
    snprintf(what, sizeof what, "%d requests, %s, page %d, pool %d, batch %d, %s, %s, generate %d (T %g, top-k %d, "
             "top-p %g, %d eos)", n, rx_cache_kind_name(sc->o.cache), sc->o.page_size, sc->o.n_pages, sc->o.batch,
             sc->o.lpm ? "lpm" : "fcfs", rx_mode_name(sc->o.mode), sc->gen.max_new, sc->gen.temperature,
             sc->gen.top_k, sc->gen.top_p, sc->gen.n_eos);
    SrvCase c = *sc;                   /* the options point into this copy */
    int32_t out[SRV_REQS][SRV_GEN];
    int n_out[SRV_REQS];
    StepCheck k = {.m = m, .what = what, .checked = 0, .ref = floats((size_t)V)};
    if (c.o.gen) {
        c.o.gen = &c.gen;
        c.o.after = c.after;
        c.gen.eos = c.eos;
        c.gen.out = &out[0][0];
        c.gen.n_out = n_out;
        c.gen.on_logits = srv_step_check;
        c.gen.ctx = &k;
    }
    int ok = !rx_serve(m, ptr, sc->lens, n, &c.o, got, NULL, cached_of, &ss);
    expect(ok, "%s: rx_serve: %s", what, radix_error());
    for (int s = 0; ok && c.o.gen && s < n && !test_failed; s++) {      /* it stops at max_new or its first eos */
        const int32_t *row = &out[0][0] + (size_t)s * c.gen.max_new;      /* out is [n, max_new] */
        int stops = n_out[s] == c.gen.max_new || (c.gen.n_eos && n_out[s] > 0 && row[n_out[s] - 1] == c.eos[0]);
        for (int j = 0; j + 1 < n_out[s] && c.gen.n_eos; j++) stops &= row[j] != c.eos[0];
        expect(n_out[s] >= 1 && n_out[s] <= c.gen.max_new && stops, "%s: request %d generated %d tokens, not stopping "
               "at max_new %d or its first eos %d", what, s, n_out[s], c.gen.max_new, c.eos[0]);
    }
    for (int s = 0; ok && s < n && !test_failed; s++) {
        if (c.o.gen && c.after[s] >= 0) continue;        /* a turn 2's prompt is not its line: the steps checked it */
        RxBatch b;
        if (rx_batch_make(&b, &ptr[s], &sc->lens[s], 1) || qwen3_forward_ref(m, &b, RX_BASELINE, all)) {
            expect(0, "%s: the recomputation of request %d: %s", what, s, radix_error());
            break;
        }
        char rw[224];
        snprintf(rw, sizeof rw, "%s: request %d (%d tokens, %d cached) vs its own forward", what, s, sc->lens[s],
                 cached_of[s]);
        expect_identical(rw, got + (size_t)s * V, all + (size_t)(sc->lens[s] - 1) * V, (size_t)V);
        for (int j = 0; j < s && !test_failed; j++)
            if (sc->lens[j] == sc->lens[s] && !memcmp(sc->toks[j], sc->toks[s], sizeof(int32_t) * sc->lens[s])) {
                st->duplicates++;
                break;
            }
        rx_batch_free(&b);
    }
    expect(!ok || (ss.request_pages == 0 && ss.held_after_flush == 0), "%s: %d request pages, %d held after the flush",
           what, ss.request_pages, ss.held_after_flush);
    st->traces++;
    st->requests += n;
    st->cached += ok ? ss.cached_tokens : 0;
    st->cached_generated += ok ? ss.cached_generated : 0;
    st->evicted += ok ? ss.evicted_pages : 0;
    st->preemptions += ok ? ss.preemptions : 0;
    st->generated += ok ? ss.generated_tokens : 0;
    st->steps_checked += k.checked;
    expect(!ok || !c.o.gen || k.checked >= ss.generated_tokens, "%s: %ld logits rows checked for %ld tokens generated",
           what, k.checked, ss.generated_tokens);
    if (sc->o.batch > st->batch_max) st->batch_max = sc->o.batch;
    free(k.ref);
    free(got);
    free(all);
}

#define SRV_TRACES 40
static void test_cache_serve_fuzz_equals_recomputation_without_cache(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 5)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    SrvStats st = {0};
    uint64_t rng = 77;
    for (int t = 0; t < SRV_TRACES && !test_failed; t++) {
        uint8_t bytes[4096];
        FuzzIn in = random_bytes(bytes, sizeof bytes, &rng);
        SrvCase sc;
        srv_case_draw(&in, &sc, cfg.vocab_size);
        srv_case_check(&m, &sc, &st);
    }
    expect(st.cached > 0 && st.evicted > 0 && st.duplicates > 0 && st.batch_max == 1024 && st.preemptions > 0 &&
           st.cached_generated > 0 && st.generated > 0 && st.steps_checked >= st.generated,
           "the traces must hit the cache (%ld tokens, %ld generated by an earlier turn), evict (%ld pages), repeat "
           "requests (%d), reach batch 1024 (%d), preempt (%d) and check every step (%ld rows, %ld generated)",
           st.cached, st.cached_generated, st.evicted, st.duplicates, st.batch_max, st.preemptions, st.steps_checked,
           st.generated);
    summary("%d random traces, %d requests (%d duplicates; batches up to %d; %ld tokens from the cache, %ld of them "
            "generated; %ld pages evicted; %d preemptions; %ld tokens generated): each prompt's and each decode step's "
            "logits equal a forward of the whole history without the cache, bit for bit (%ld rows); no page leaked",
            st.traces, st.requests, st.duplicates, st.batch_max, st.cached, st.cached_generated, st.evicted,
            st.preemptions, st.generated, st.steps_checked);
    qwen3_free(&m);
}

/* ---- generation ---- */
/* A conversation trace for the generation tests: 8 requests of 5 to 16 tokens, four after one 8-token stem, a
 * repeat, and two turn 2s (@K: requests 5 and 7 continue 0 and 2). */
enum { GEN_REQS = 8, GEN_NEW = 9 };
typedef struct {
    int32_t toks[GEN_REQS][16], after[GEN_REQS], out[GEN_REQS][GEN_NEW];
    const int32_t *ptr[GEN_REQS];
    int lens[GEN_REQS], n_out[GEN_REQS];
} GenTrace;
static void gen_trace(GenTrace *t, int vocab) {
    uint64_t rng = 2024;
    memset(t, 0, sizeof *t);
    for (int s = 0; s < GEN_REQS; s++) {
        t->lens[s] = 5 + rng_int(&rng, 12);
        for (int i = 0; i < t->lens[s]; i++) t->toks[s][i] = s < 4 && i < 8 ? 7 + i : 1 + rng_int(&rng, vocab - 1);
        t->ptr[s] = t->toks[s];
        t->after[s] = s == 5 ? 0 : s == 7 ? 2 : -1;
    }
    t->lens[6] = t->lens[1];
    memcpy(t->toks[6], t->toks[1], sizeof t->toks[1]);
}

/* Serves the trace with options o (o->gen: its generation settings, into t->out and t->n_out). 0 or -1. */
static int gen_serve(const Qwen3Model *m, GenTrace *t, RxServeOptions o, RxGenerate g, RxServeStats *st) {
    g.out = &t->out[0][0];
    g.n_out = t->n_out;
    o.gen = &g;
    o.after = t->after;
    o.model_id = 9;
    return rx_serve(m, t->ptr, t->lens, GEN_REQS, &o, NULL, NULL, NULL, st);
}

/* Seeded sampling: each request draws from its own generator, so its tokens are the same whatever else happens: the
 * batch size, the schedule, the cache, a pool tight enough to evict and preempt, the mode, the threads and the CPU
 * path. Greedy likewise. The reference: batch 1, no cache, the definition path, one thread. */
static void test_generation_same_tokens_across_batches_schedules_threads_paths(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 12)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    const char *paths[RX_PATHS], *path0 = rx_cpu_path(NULL);
    char list[RX_LIST];
    int n_paths = cpu_paths(paths, list), threads0 = rx_threads(0), runs = 0, preemptions = 0;
    GenTrace ref, got;
    int32_t greedy[GEN_REQS][GEN_NEW];
    gen_trace(&ref, cfg.vocab_size);
    RxServeOptions base = {.cache = RX_CACHE_OFF, .page_size = 4, .n_pages = 0, .batch = 1, .lpm = 0,
                           .mode = RX_BASELINE};
    for (int sampled = 0; sampled < 2 && !test_failed; sampled++) {
        RxGenerate g = {.max_new = GEN_NEW, .temperature = sampled ? 4.0f : 0.0f, .top_k = sampled ? 200 : 0,
                        .top_p = sampled ? 0.9f : 1.0f, .seed = 31};
        RxServeStats st;
        rx_cpu_path("definition");
        rx_threads(1);
        if (gen_serve(&m, &ref, base, g, &st)) { expect(0, "the reference run: %s", radix_error()); break; }
        struct { RxCacheKind cache; int pages, batch, lpm; RxMode mode; } v[] = {
            {RX_CACHE_RADIX, 0, 3, 0, RX_COMPACT}, {RX_CACHE_RADIX, 10, 4, 1, RX_RADIX},
            {RX_CACHE_HASH, 11, 8, 0, RX_COMPACT}, {RX_CACHE_HASH, 14, 2, 1, RX_AUTO},
            {RX_CACHE_OFF, 10, 8, 0, RX_RADIX},
        };
        for (int p = 0; p < n_paths && !test_failed; p++)
            for (size_t k = 0; k < sizeof v / sizeof v[0] && !test_failed; k++) {
                RxServeOptions o = {.cache = v[k].cache, .page_size = 4, .n_pages = v[k].pages, .batch = v[k].batch,
                                    .lpm = v[k].lpm, .mode = v[k].mode};
                gen_trace(&got, cfg.vocab_size);
                rx_cpu_path(paths[p]);
                rx_threads(1 + (int)(k % 2));
                int rc = gen_serve(&m, &got, o, g, &st);
                expect(rc == 0, "%s, %s pool %d batch %d: rx_serve: %s", paths[p], rx_cache_kind_name(o.cache),
                       o.n_pages, o.batch, radix_error());
                for (int s = 0; rc == 0 && s < GEN_REQS && !test_failed; s++)
                    expect(got.n_out[s] == ref.n_out[s] &&
                           !memcmp(got.out[s], ref.out[s], sizeof(int32_t) * (size_t)ref.n_out[s]),
                           "%s, %s, %s, pool %d, batch %d, %s: request %d generated other tokens than the reference",
                           sampled ? "sampled" : "greedy", paths[p], rx_cache_kind_name(o.cache), o.n_pages, o.batch,
                           o.lpm ? "lpm" : "fcfs", s);
                preemptions += st.preemptions;
                runs++;
            }
        note("%s: request 1 generated %d %d %d %d ...", sampled ? "sampled (T 4, top-k 200, top-p 0.9)" : "greedy",
             ref.out[1][0], ref.out[1][1], ref.out[1][2], ref.out[1][3]);
        if (!sampled) memcpy(greedy, ref.out, sizeof greedy);
        else expect(memcmp(greedy, ref.out, sizeof greedy), "sampling drew the greedy tokens: a test of nothing");
        /* A pool of 9 pages: request 7 (31 prompt tokens + 9 to generate: 10 pages) is refused, the rest served. */
        RxServeOptions o = {.cache = RX_CACHE_RADIX, .page_size = 4, .n_pages = 9, .batch = 4, .mode = RX_COMPACT};
        gen_trace(&got, cfg.vocab_size);
        int rc = gen_serve(&m, &got, o, g, &st);
        expect(rc != 0 && strstr(radix_error(), "request 7: refused: 31 prompt tokens and 9 to generate need 10 "
                                 "pages of 4 tokens, but the KV pool has only 9") && st.refused == 1 &&
               got.n_out[7] == 0 && st.request_pages == 0, "a pool of 9 pages: rc %d, %d refused, %d pages held: %s",
               rc, st.refused, st.request_pages, radix_error());
        for (int s = 0; s < 7 && !test_failed; s++)
            expect(got.n_out[s] == ref.n_out[s] && !memcmp(got.out[s], ref.out[s], sizeof got.out[s]),
                   "a pool of 9 pages: request %d, served beside a refused one, generated other tokens", s);
        note("a pool of 9 pages -> %s", radix_error());
    }
    rx_cpu_path(path0);
    rx_threads(threads0);
    expect(preemptions > 0, "no run preempted a request (%d runs)", runs);
    summary("%d runs (greedy and sampled; radix, hash and no cache; batch 1 to 8; fcfs and lpm; pools that evict and "
            "preempt, %d preemptions; 1 and 2 threads; paths %s): every request's tokens equal the reference's; in a "
            "pool it cannot fit alone one request is refused in one line and the others are served",
            runs, preemptions, list);
    qwen3_free(&m);
}

/* ---- the lpm scheduler: a window, decisions kept ---- */
/* A trace for the scheduler's decisions: n requests of 3 to 20 tokens, most after one of 12 stems (what lpm reorders),
 * some repeats; with generation, one request in five a turn 2 (@K) of an earlier turn 1. */
enum { SCHED_MAX = 320, SCHED_LEN = 24 };
typedef struct {
    int n, lens[SCHED_MAX], n_out[SCHED_MAX];
    int32_t toks[SCHED_MAX][SCHED_LEN], after[SCHED_MAX], out[SCHED_MAX][4], batch_of[SCHED_MAX];
    int32_t cached_of[SCHED_MAX];
    const int32_t *ptr[SCHED_MAX];
} SchedTrace;
static void sched_trace(SchedTrace *t, int n, int turns, uint64_t seed, int vocab) {
    uint64_t rng = seed;
    int32_t stems[12][SCHED_LEN];
    memset(t, 0, sizeof *t);
    t->n = n;
    for (int g = 0; g < 12; g++)
        for (int i = 0; i < SCHED_LEN; i++) stems[g][i] = 1 + rng_int(&rng, vocab - 1);
    for (int s = 0; s < n; s++) {
        int g = rng_int(&rng, 12), shared = rng_int(&rng, 16), j = s ? rng_int(&rng, s) : 0;
        t->lens[s] = 3 + rng_int(&rng, 18);
        for (int i = 0; i < t->lens[s]; i++) t->toks[s][i] = i < shared ? stems[g][i] : 1 + rng_int(&rng, vocab - 1);
        if (s && rng_int(&rng, 8) == 0) {                                   /* a repeat of an earlier request */
            t->lens[s] = t->lens[j];
            memcpy(t->toks[s], t->toks[j], sizeof t->toks[s]);
        }
        t->after[s] = turns && s && rng_int(&rng, 5) == 0 && t->after[j] < 0 ? j : -1;
        t->ptr[s] = t->toks[s];
    }
}

/* Serves a trace; returns the FNV-1a digest of the decisions: rx_serve's result, each request's step (batch_of), its
 * cached prefix at first admission (cached_of) and generated tokens, and the counts (steps, cached tokens,
 * preemptions, recomputed tokens, evicted pages, refused). 0 where rx_serve failed (and a FAIL line). */
static uint64_t sched_digest(const Qwen3Model *m, SchedTrace *t, RxServeOptions o, int max_new, RxServeStats *st) {
    RxGenerate g = {.max_new = max_new, .temperature = 0, .top_p = 1, .out = &t->out[0][0], .n_out = t->n_out};
    o.gen = max_new ? &g : NULL;
    o.after = max_new ? t->after : NULL;
    o.model_id = 3;
    int rc = rx_serve(m, t->ptr, t->lens, t->n, &o, NULL, t->batch_of, t->cached_of, st);
    expect(rc == 0, "rx_serve of %d requests: %s", t->n, radix_error());
    if (rc) return 0;
    uint64_t h = 1469598103934665603ull;
    long counts[6] = {st->n_batches, st->cached_tokens, st->preemptions, st->recomputed_tokens, st->evicted_pages,
                      st->refused};
    const void *parts[4] = {t->batch_of, t->cached_of, t->out, counts};
    size_t sizes[4] = {sizeof(int32_t) * (size_t)t->n, sizeof(int32_t) * (size_t)t->n, sizeof t->out, sizeof counts};
    for (int p = 0; p < 4; p++)
        for (size_t i = 0; i < sizes[p]; i++) h = (h ^ ((const uint8_t *)parts[p])[i]) * 1099511628211ull;
    return h;
}

/* A random Qwen3 so small (hidden 16, 1 layer) that a serving run's time is its scheduling's; -1 after a failure. */
static int sched_model(Qwen3Model *m, Qwen3Config *cfg, int vocab, uint64_t seed) {
    *cfg = tiny_config();
    cfg->vocab_size = vocab;
    cfg->hidden_size = 16;
    cfg->intermediate_size = 32;
    cfg->n_layers = 1;
    cfg->head_dim = 8;
    if (!qwen3_random(m, cfg, seed)) return 0;
    expect(0, "qwen3_random: %s", radix_error());
    return -1;
}

/* A walk of the radix cache finds each child by hashing its first page: the root gets a child for every prompt whose
 * first page no earlier one had, and lpm looks its window of waiting requests up every step, so a walk that scanned
 * the children made a run's work grow with the square of its requests. Counted, not timed: n random 16-token
 * requests (no page shared; a pool for them all, so nothing is evicted) at n = 300 and 1200 (4x: the buckets double
 * twice, to the same load), both caches, fcfs and lpm, page sizes 4 and 16, batch 1; the pages compared per request
 * at 1200 must be within 1.5x of those at 300 (the scan: 4x, the queue's quadrupling). */
static void test_cache_compared_pages_grow_linearly_with_requests(void) {
    enum { FEW = 300, MANY = 1200, LEN = 16 };
    Qwen3Config cfg;
    Qwen3Model m;
    if (sched_model(&m, &cfg, 512, 78)) return;
    int32_t *tok = (int32_t *)malloc((size_t)MANY * LEN * sizeof(int32_t));
    const int32_t **ptr = (const int32_t **)malloc(MANY * sizeof *ptr);
    int *lens = (int *)malloc(MANY * sizeof(int));
    uint64_t rng = 79;
    for (int s = 0; s < MANY; s++) {
        for (int i = 0; i < LEN; i++) tok[s * LEN + i] = rng_int(&rng, cfg.vocab_size);
        ptr[s] = tok + s * LEN;
        lens[s] = LEN;
    }
    double worst = 0;
    for (int k = 0; k < 8 && !test_failed; k++) {
        RxServeOptions o = {.cache = k & 1 ? RX_CACHE_HASH : RX_CACHE_RADIX, .page_size = k & 2 ? 16 : 4,
                            .batch = 1, .lpm = k >= 4, .mode = RX_COMPACT, .model_id = 1};
        double per[2];
        for (int r = 0; r < 2; r++) {
            RxServeStats st;
            int n = r ? MANY : FEW;
            expect(rx_serve(&m, ptr, lens, n, &o, NULL, NULL, NULL, &st) == 0, "rx_serve: %s", radix_error());
            per[r] = (double)st.compared_pages / n;
        }
        worst = fmax(worst, per[1] / per[0]);
        expect(per[1] <= 1.5 * per[0], "%s, %s, page size %d: %.1f pages compared per request of %d, %.1f of %d",
               rx_cache_kind_name(o.cache), o.lpm ? "lpm" : "fcfs", o.page_size, per[0], FEW, per[1], MANY);
        note("%-5s %-4s page size %2d: pages compared per request %7.1f of %d, %7.1f of %d",
             rx_cache_kind_name(o.cache), o.lpm ? "lpm" : "fcfs", o.page_size, per[0], FEW, per[1], MANY);
    }
    summary("pages compared per request at %d requests / at %d: at most %.2fx (tolerance 1.5x)", MANY, FEW, worst);
    free(tok);
    free(ptr);
    free(lens);
    qwen3_free(&m);
}

/* --schedule lpm orders only the queue's first 128 waiting requests (RX_LPM_WINDOW in radixmlp.cu: a step costs a
 * window, not the queue). Its decisions where the old code sorted the whole queue every step: DIGEST holds the
 * digests that code (commit 1219fc9) gave on these traces, fcfs and lpm; radix and hash caches; batches 1 to 4; pools
 * that evict and preempt; turn 2s. Now: fcfs, and lpm with a window as long as the queue, give the same digests;
 * so does lpm's default window on the traces of at most 128 requests (the queue never outgrows it). On the longer
 * ones it differs, as it should: a request past the window waits in arrival order, where the whole sort took the
 * longest cached prefix in the queue (the last check: request 200 repeats request 0, whose prompt is cached). */
static void test_lpm_window_keeps_decisions(void) {
    Qwen3Config cfg;
    Qwen3Model m;
    if (sched_model(&m, &cfg, 64, 77)) return;
    static const struct {
        int n, turns, lpm, batch, page, pool, max_new;
        RxCacheKind cache;
        uint64_t digest;
    } cases[] = {
        {60, 0, 1, 1, 4, 0, 0, RX_CACHE_RADIX, 0xba47da5cdb29d637ull},
        {60, 1, 1, 2, 4, 0, 3, RX_CACHE_RADIX, 0x4d00ede58688e084ull},
        {120, 1, 1, 3, 2, 40, 3, RX_CACHE_RADIX, 0x1b6b733979b61128ull},
        {120, 0, 1, 1, 4, 12, 0, RX_CACHE_HASH, 0x83f06a14a5daac5aull},
        {128, 1, 1, 4, 4, 30, 2, RX_CACHE_HASH, 0x32387c0caf8bc704ull},
        {100, 1, 0, 3, 2, 40, 3, RX_CACHE_RADIX, 0x57d02db08c75e4e7ull},
        {300, 0, 1, 1, 4, 0, 0, RX_CACHE_RADIX, 0x4adb47d301dbc337ull},
        {300, 1, 1, 4, 2, 60, 3, RX_CACHE_RADIX, 0x884a884042e0ad29ull},
        {300, 1, 1, 2, 4, 25, 2, RX_CACHE_HASH, 0xc7923d59eb9166d5ull},
        {300, 1, 0, 4, 2, 60, 3, RX_CACHE_RADIX, 0x0a4a7675cbd0f3dfull},
        {300, 0, 0, 1, 4, 12, 0, RX_CACHE_HASH, 0xcd38178aa2c1c624ull},
        {120, 1, 1, 4, 2, 26, 4, RX_CACHE_RADIX, 0x430eb652ead04824ull},
        {300, 1, 1, 4, 2, 26, 4, RX_CACHE_HASH, 0xfc85cdda4aa9358cull},
        {120, 1, 0, 4, 2, 26, 4, RX_CACHE_RADIX, 0x5449bedc53925f8bull},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    SchedTrace *t = (SchedTrace *)malloc(sizeof *t);
    int same_window = 0, other_window = 0, preemptions = 0;
    long evicted = 0;
    for (int k = 0; k < n_cases && !test_failed; k++) {
        RxServeOptions o = {.cache = cases[k].cache, .page_size = cases[k].page, .n_pages = cases[k].pool,
                            .batch = cases[k].batch, .lpm = cases[k].lpm, .mode = RX_COMPACT};
        RxServeStats st;
        char what[160];
        snprintf(what, sizeof what, "%d requests%s, %s, %s, batch %d, page %d, pool %d", cases[k].n,
                 cases[k].turns ? " with turn 2s" : "", cases[k].lpm ? "lpm" : "fcfs",
                 rx_cache_kind_name(o.cache), o.batch, o.page_size, o.n_pages);
        o.lpm_window = cases[k].n;                                  /* the whole queue, as the old sort */
        sched_trace(t, cases[k].n, cases[k].turns, 1000 + (uint64_t)k, cfg.vocab_size);
        uint64_t d = sched_digest(&m, t, o, cases[k].max_new, &st);
        expect(d == cases[k].digest, "%s: decisions digest 0x%016llx, the old code's 0x%016llx", what,
               (unsigned long long)d, (unsigned long long)cases[k].digest);
        preemptions += st.preemptions;
        evicted += st.evicted_pages;
        if (!cases[k].lpm) continue;
        o.lpm_window = 0;                                           /* the default window */
        sched_trace(t, cases[k].n, cases[k].turns, 1000 + (uint64_t)k, cfg.vocab_size);
        d = sched_digest(&m, t, o, cases[k].max_new, &st);
        if (cases[k].n <= 128) {
            expect(d == cases[k].digest, "%s, default window: decisions digest 0x%016llx, the old code's 0x%016llx",
                   what, (unsigned long long)d, (unsigned long long)cases[k].digest);
            same_window++;
        } else {
            expect(d && d != cases[k].digest, "%s, default window: the same decisions as the whole sort", what);
            other_window++;
        }
    }
    /* Past the window: 300 requests of 8 tokens of their own (the first two name the request), at batch 1;
     * request 200 repeats request 0, whose first page of 4 is cached once it ran. The whole sort runs it second;
     * the window at step 73, when it enters the window (requests 73 to 200), and then at once. */
    for (int s = 0; s < 300; s++) {
        t->lens[s] = 8;
        t->ptr[s] = t->toks[s];
        for (int i = 0; i < 8; i++) t->toks[s][i] = 1 + (s * 5 + i * 3) % (cfg.vocab_size - 1);
        t->toks[s][0] = 1 + s % (cfg.vocab_size - 1);
        t->toks[s][1] = 1 + s / (cfg.vocab_size - 1);
    }
    t->n = 300;
    memcpy(t->toks[200], t->toks[0], sizeof t->toks[0]);
    for (int whole = 0; whole < 2 && !test_failed; whole++) {
        RxServeOptions o = {.cache = RX_CACHE_RADIX, .page_size = 4, .batch = 1, .lpm = 1, .mode = RX_COMPACT,
                            .lpm_window = whole ? 300 : 0};
        RxServeStats st;
        sched_digest(&m, t, o, 0, &st);
        expect(whole ? t->batch_of[200] == 1 : t->batch_of[1] == 1 && t->batch_of[200] == 200 - 128 + 1,
               "window %d: request 200 ran at step %d, request 1 at step %d", whole ? 300 : 128, t->batch_of[200],
               t->batch_of[1]);
        note("window %3d: request 200 (a repeat of request 0, %d tokens cached) runs at step %d, request 1 at step %d",
             whole ? 300 : 128, t->cached_of[200], t->batch_of[200], t->batch_of[1]);
    }
    free(t);
    expect(preemptions > 0 && evicted > 0, "no trace preempted (%d) or evicted (%ld): a test of less", preemptions,
           evicted);
    summary("%d traces (fcfs and lpm, radix and hash, batch 1 to 4, %d preemptions, %ld pages evicted): the old "
            "code's decisions, digest for digest, with lpm's window as long as the queue; the default window too on "
            "the %d lpm traces of at most 128 requests, other decisions on the %d longer ones", n_cases, preemptions,
            evicted, same_window, other_window);
    qwen3_free(&m);
}

/* Multi-turn: a turn 2 (@K) hits turn 1's prompt and its generated tokens, page-aligned, with either cache; its
 * tokens and logits equal a run without the cache (the step check compares every logits row with a full forward). */
static void test_generation_turn_two_hits_turn_one_generated_tokens(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 13)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    int32_t turn1[10], turn2[5], out[2][8], cached_of[2];
    int n_out[2], lens[2] = {10, 5};
    for (int i = 0; i < 10; i++) turn1[i] = 3 + 17 * i % 500;
    for (int i = 0; i < 5; i++) turn2[i] = 100 + i;
    const int32_t *ptr[2] = {turn1, turn2}, after[2] = {-1, 0};
    StepCheck k = {.m = &m, .what = "multi-turn", .checked = 0, .ref = floats((size_t)cfg.vocab_size)};
    int32_t ref_out[2][8];
    for (int kind = 0; kind < 3 && !test_failed; kind++) {           /* off (the reference), radix, hash */
        RxCacheKind c = kind == 0 ? RX_CACHE_OFF : kind == 1 ? RX_CACHE_RADIX : RX_CACHE_HASH;
        RxGenerate g = {.max_new = 8, .temperature = 0, .top_p = 1, .out = &out[0][0], .n_out = n_out,
                        .on_logits = srv_step_check, .ctx = &k};
        RxServeOptions o = {.cache = c, .page_size = 4, .batch = 2, .mode = RX_COMPACT, .model_id = 1, .gen = &g,
                            .after = after};
        RxServeStats st;
        int rc = rx_serve(&m, ptr, lens, 2, &o, NULL, NULL, cached_of, &st);
        expect(rc == 0, "%s: rx_serve: %s", rx_cache_kind_name(c), radix_error());
        if (rc) break;
        /* turn 2's prompt: 10 + 8 + 5 = 23 tokens; turn 1 cached its whole pages of 10 + 7 tokens with K/V: 4 pages,
         * 16 tokens, 6 of them generated */
        int want = kind ? 16 : 0;
        expect(st.prompt_tokens == 10 + 23 && cached_of[1] == want && st.cached_generated == (kind ? 6 : 0),
               "%s: turn 2 cached %d tokens (%ld generated) of %ld prompt tokens; expected %d (%d generated) of 33",
               rx_cache_kind_name(c), cached_of[1], st.cached_generated, st.prompt_tokens, want, kind ? 6 : 0);
        if (kind == 0) memcpy(ref_out, out, sizeof out);
        expect(!memcmp(out, ref_out, sizeof out), "%s: the turns generated other tokens than without the cache",
               rx_cache_kind_name(c));
        note("%-5s turn 2: %d of 23 prompt tokens cached, %ld of them generated by turn 1", rx_cache_kind_name(c),
             cached_of[1], st.cached_generated);
    }
    summary("turn 2 (@1) hits turn 1's prompt and 6 of its generated tokens (4 pages of 4) with radix and hash, none "
            "with the cache off; its tokens and every logits row (%ld) equal a run without the cache", k.checked);
    free(k.ref);
    qwen3_free(&m);
}

/* --generate on the command line: a conversation file (turn 2s and a turn 3 included) gives the same --out with the
 * cache off, radix and hash, in batches, in a pool tight enough to preempt; so do sampled runs (--temperature, --seed).
 * The stats count each turn's whole prompt; the summary counts the cached tokens an earlier turn generated. */
/* Greedy generation against transformers' own: fixtures/generate/MODEL-BATCH.txt holds generate(do_sample=False)'s
 * 12 tokens per request (fixtures/make_fixtures.py --generate; the smallest top-2 margin there is 3.5e-4, far above
 * the fp32 differences). --out must equal it byte for byte, in every mode, with the cache off and on, one request at
 * a time and all at once, and in a pool so small that pages are evicted. */
static void test_cli_generate_matches_transformers_greedy(void) {
    if (!have_cli()) return;
    static const char *models[] = {"tiny-tied", "tiny-untied", "tiny-bf16"}, *batches[] = {"shared_prefix", "mixed"};
    static const char *runs[] = {
        "--mode baseline --prefix-cache off --batch 1",
        "--mode radix --prefix-cache radix --page-size 4",
        "--mode compact --prefix-cache hash --page-size 2 --batch 2",
        "--mode compact --prefix-cache radix --page-size 4 --cache-pages 8",
    };
    char dir[] = "/tmp/radixmlp-gen-XXXXXX", cmd[1024], out[8192], path[512];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    int n = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int bi = 0; bi < 2; bi++) {
            snprintf(path, sizeof path, "%s/generate/%s-%s.txt", fixtures(), models[mi], batches[bi]);
            size_t want_len = 0, got_len = 0;
            char *want = (char *)read_file(path, &want_len);
            expect(want != NULL, "cannot read %s", path);
            for (int k = 0; want && k < 4; k++, n++) {
                snprintf(cmd, sizeof cmd, "%s --cpu --model %s/%s --requests %s/batches/%s.txt %s --generate 12 "
                         "--out %s/o.txt", cli(), fixtures(), models[mi], fixtures(), batches[bi], runs[k], dir);
                int rc = run_cmd(cmd, out, sizeof out);
                snprintf(path, sizeof path, "%s/o.txt", dir);
                char *got = (char *)read_file(path, &got_len);
                expect(rc == 0 && got && got_len == want_len && !memcmp(got, want, want_len),
                       "%s x %s, %s: exit %d, --out differs from transformers' greedy tokens:\n%.*s---\n%.*s",
                       models[mi], batches[bi], runs[k], rc, got ? (int)got_len : 0, got ? got : "",
                       (int)want_len, want);
                free(got);
            }
            free(want);
        }
    note("%d runs (3 models x 2 batches x 4 modes, caches and pools): every --out equals transformers' generate", n);
    snprintf(path, sizeof path, "%s/o.txt", dir);
    remove(path);
    rmdir(dir);
}

static void test_cli_generate_same_output_with_and_without_cache(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-gen-XXXXXX", cmd[2048], out[16384], path[300];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const char *req = "5 6 7 8 9 10 11 12 13 14\n5 6 7 8 9 10 11 12 20 21\n30 31 32 33 34\n@1 40 41 42\n@4 50\n";
    write_file(dir, "r.txt", req, strlen(req));
    const char *runs[] = {
        "--prefix-cache off --batch 1",
        "--prefix-cache radix --page-size 4 --batch 3",
        "--prefix-cache hash --page-size 4 --batch 4 --schedule lpm",
        "--prefix-cache radix --page-size 4 --batch 4 --cache-pages 10",
        "--prefix-cache hash --page-size 2 --batch 4 --cache-pages 19 --mode baseline",
    };
    int n_runs = (int)(sizeof runs / sizeof runs[0]), preempted = 0, cached_generated = 0;
    for (int sampled = 0; sampled < 2 && !test_failed; sampled++) {
        char *first = NULL;
        for (int k = 0; k < n_runs && !test_failed; k++) {
            snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s/r.txt %s --generate 8 %s --out "
                     "%s/o.txt --stats %s/s.csv", cli(), fixtures(), dir, runs[k],
                     sampled ? "--temperature 3 --top-k 100 --seed 5" : "", dir, dir);
            int rc = run_cmd(cmd, out, sizeof out);
            size_t len = 0, slen = 0;
            snprintf(path, sizeof path, "%s/o.txt", dir);
            char *o = (char *)read_file(path, &len);
            snprintf(path, sizeof path, "%s/s.csv", dir);
            char *csv = (char *)read_file(path, &slen);
            expect(rc == 0 && o && csv, "'%s': exit %d\n%s", cmd, rc, out);
            if (rc || !o || !csv) { free(o); free(csv); break; }
            int lines = 0, ids = 0, p3 = 0, p4 = 0;
            for (char *q = o; *q; q++) {                   /* lines, and ids: where a run of digits starts */
                lines += *q == '\n';
                ids += isdigit((unsigned char)*q) && (q == o || !isdigit((unsigned char)q[-1]));
            }
            const char *r3 = strstr(csv, "\n3,"), *r4 = strstr(csv, "\n4,");
            int ok = r3 && r4 && sscanf(r3, "\n3,%*d,%d", &p3) == 1 && sscanf(r4, "\n4,%*d,%d", &p4) == 1;
            expect(lines == 5 && ids == 40 && ok && p3 == 10 + 8 + 3 && p4 == p3 + 8 + 1,
                   "%s: %d lines, %d ids (want 5, 40); turn prompts %d and %d (want 21 and 30)", runs[k], lines, ids,
                   p3, p4);
            if (!first) first = o;
            else expect(!strcmp(o, first), "%s%s: --out differs from the run without the cache:\n%s---\n%s", runs[k],
                        sampled ? " (sampled)" : "", o, first);
            const char *pre = strstr(out, "preemptions "), *cg = strstr(out, "of the cached tokens ");
            int n_pre = 0, n_cg = 0;
            if (pre) sscanf(pre, "preemptions %d", &n_pre);
            if (cg) sscanf(cg, "of the cached tokens %d", &n_cg);
            preempted += n_pre;
            cached_generated += n_cg;
            note("%-7s %-72s preemptions %d, cached generated tokens %d", sampled ? "sampled" : "greedy", runs[k],
                 n_pre, n_cg);
            if (o != first) free(o);
            free(csv);
        }
        free(first);
    }
    expect(preempted > 0 && cached_generated > 0, "no run preempted (%d) or hit generated tokens (%d)", preempted,
           cached_generated);
    summary("%d runs of --generate 8 over 5 requests (two turn 2s): --out is the same with the cache off, radix and "
            "hash, in pools that preempt (%d preemptions); stats count each turn's whole prompt", 2 * n_runs,
            preempted);
    remove_dir(dir);
}

/* ---- the --requests CLI ---- */
/* 14 requests for tiny-bf16 (vocab 512): three system prompts of 9, 13 and 20 tokens, questions that share their
 * first tokens, a repeat, a one-token request, and one request unlike the others; written to dir/requests.txt. */
static int write_requests(const char *dir, int32_t seqs[][40], int *lens) {
    uint64_t rng = 99;
    int32_t sys[3][20];
    char text[8192] = "";
    int n = 14;
    for (int g = 0; g < 3; g++) for (int i = 0; i < 20; i++) sys[g][i] = 1 + rng_int(&rng, 511);
    for (int s = 0; s < n; s++) {
        int g = s % 3, head = g == 0 ? 9 : g == 1 ? 13 : 20, len = head + 1 + rng_int(&rng, 12);
        for (int i = 0; i < len; i++) seqs[s][i] = i < head ? sys[g][i] : 1 + rng_int(&rng, 511);
        if (s >= 6 && s < 9) for (int i = head; i < head + 3; i++) seqs[s][i] = 7 + i;  /* a common question stem */
        lens[s] = len;
    }
    memcpy(seqs[9], seqs[4], sizeof seqs[9]); lens[9] = lens[4];                     /* a repeat */
    lens[10] = 1;                                                                      /* one token */
    for (int i = 0; i < 33; i++) seqs[11][i] = 1 + rng_int(&rng, 511);                 /* nothing shared */
    lens[11] = 33;
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < lens[s]; i++)
            snprintf(text + strlen(text), sizeof text - strlen(text), "%s%d", i ? " " : "", seqs[s][i]);
        strcat(text, "\n");
    }
    write_file(dir, "requests.txt", text, strlen(text));
    return n;
}

/* The cached tokens of each request, from the definition: batches of B in file order, unlimited pool; request s
 * reuses the longest prefix, whole pages and at most len - 1 tokens, that a request of an earlier batch cached
 * (its whole pages). */
static int expected_cached(int32_t seqs[][40], const int *lens, int s, int B, int P) {
    int best = 0;
    for (int j = 0; j < s / B * B; j++) {
        int l = 0;
        while (l < lens[s] && l < lens[j] && seqs[s][l] == seqs[j][l]) l++;
        int c = l < lens[j] / P * P ? l : lens[j] / P * P;
        if (c > (lens[s] - 1) / P * P) c = (lens[s] - 1) / P * P;
        c = c / P * P;
        if (c > best) best = c;
    }
    return best;
}

/* What the --requests tests share: write_requests' file in a fresh directory, tiny-bf16 loaded, and the oracle,
 * each request alone from scratch on the C reference: last-token logits want [n, vocab]. */
typedef struct { char dir[32], path[512]; int32_t seqs[14][40]; int lens[14], n; Qwen3Model m; float *want; } ReqCase;

static int requests_case(ReqCase *r) {
    snprintf(r->dir, sizeof r->dir, "/tmp/radixmlp-req-XXXXXX");
    if (!mkdtemp(r->dir)) { expect(0, "mkdtemp"); return -1; }
    r->n = write_requests(r->dir, r->seqs, r->lens);
    snprintf(r->path, sizeof r->path, "%s/tiny-bf16", fixtures());
    if (qwen3_load(&r->m, r->path)) { expect(0, "load: %s", radix_error()); remove_dir(r->dir); return -1; }
    int V = r->m.cfg.vocab_size;
    float *all = floats((size_t)40 * V);
    r->want = floats((size_t)r->n * V);
    for (int s = 0; s < r->n; s++) {
        const int32_t *p = r->seqs[s];
        RxBatch b;
        rx_batch_make(&b, &p, &r->lens[s], 1);
        expect(qwen3_forward_ref(&r->m, &b, RX_BASELINE, all) == 0, "full forward: %s", radix_error());
        memcpy(r->want + (size_t)s * V, all + (size_t)(r->lens[s] - 1) * V, (size_t)V * sizeof(float));
        rx_batch_free(&b);
    }
    free(all);
    return 0;
}
static void requests_case_free(ReqCase *r) {
    free(r->want);
    qwen3_free(&r->m);
    remove_dir(r->dir);
}

static void test_cli_requests_match_full_recomputation(void) {
    ReqCase rq;
    if (!have_cli() || requests_case(&rq)) return;
    char cmd[1024], out[16384];
    const char *dir = rq.dir, *path = rq.path;
    const float *want = rq.want;
    int32_t (*seqs)[40] = rq.seqs;
    const int *lens = rq.lens, n = rq.n, V = rq.m.cfg.vocab_size;
    const struct { const char *flags; int B, P, exact_cache; } runs[] = {
        {"", 1, 16, 1},                                    /* the defaults: radix, page 16, batch 1, fcfs */
        {"--prefix-cache radix --page-size 4 --batch 3 --mode compact --show-batches", 3, 4, 1},
        {"--prefix-cache radix --page-size 4 --batch 3 --mode baseline", 3, 4, 1},
        {"--prefix-cache hash --page-size 4 --batch 3", 3, 4, 1},
        {"--prefix-cache off --page-size 4 --batch 4", 4, 4, 1},
        {"--prefix-cache radix --page-size 2 --batch 2 --schedule lpm", 2, 2, 0},
        {"--prefix-cache radix --page-size 4 --cache-pages 12 --batch 2", 2, 4, 0},    /* eviction pressure */
        {"--prefix-cache hash --page-size 4 --cache-pages 12 --batch 2 --schedule lpm", 2, 4, 0},
        {"--prefix-cache radix --page-size 4 --batch 5 --mode radix", 5, 4, 1},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s --model %s --requests %s/requests.txt --dump-logits %s/d.f32 --stats %s/s.csv --cpu %s",
                 cli(), path, dir, dir, dir, runs[k].flags);
        int rc = run_cmd(cmd, out, sizeof out);
        char dump[600], csvp[600];
        snprintf(dump, sizeof dump, "%s/d.f32", dir);
        snprintf(csvp, sizeof csvp, "%s/s.csv", dir);
        size_t len = 0, clen = 0;
        float *got = rc == 0 ? (float *)read_file(dump, &len) : NULL;
        char *csv = rc == 0 ? (char *)read_file(csvp, &clen) : NULL;
        expect(rc == 0 && got && len == (size_t)n * V * sizeof(float), "'%s': exit %d, dump of %zu bytes\n%s", cmd, rc,
               len, out);
        if (!got || !csv) { free(got); free(csv); continue; }
        int finite = 1;
        for (size_t i = 0; i < (size_t)n * V; i++) finite &= isfinite(got[i]) != 0;
        double d = max_abs_diff(got, want, (size_t)n * V);
        expect(finite && d == 0, "%s: max |dump - full recomputation| = %g (tolerance 0, bit for bit), finite %d",
               runs[k].flags, d, finite);
        /* the stats: the header, one row per request in file order, cached tokens as the definition says */
        int rows = 0, bad = 0, cached_sum = 0;
        char *line = strtok(csv, "\n");
        expect(line && !strcmp(line, "request,batch,prompt_tokens,cached_tokens,generated_tokens"),
               "stats header '%s'", line ? line : "");
        for (line = strtok(NULL, "\n"); line; line = strtok(NULL, "\n"), rows++) {
            int r, b, pt, ct, gt;
            if (sscanf(line, "%d,%d,%d,%d,%d", &r, &b, &pt, &ct, &gt) != 5 || r != rows || pt != lens[rows] || gt ||
                ct % runs[k].P ||
                ct > lens[rows] - 1 || (runs[k].exact_cache && !strstr(runs[k].flags, "lpm") &&
                                        (b != rows / runs[k].B || ct != (strstr(runs[k].flags, "off") ? 0 :
                                         expected_cached(seqs, lens, rows, runs[k].B, runs[k].P))))) {
                if (!bad) expect(0, "%s: stats row '%s'", runs[k].flags, line);
                bad = 1;
            }
            cached_sum += ct;
        }
        expect(rows == n, "%d stats rows, expected %d", rows, n);
        char want_sum[64];
        snprintf(want_sum, sizeof want_sum, "cached tokens %d,", cached_sum);
        expect(strstr(out, want_sum) && strstr(out, "hit rate") && strstr(out, "compact rows computed") &&
               strstr(out, "after the final flush: 0 pages held by requests"), "%s: summary\n%s", runs[k].flags, out);
        if (strstr(runs[k].flags, "--show-batches")) {     /* one line per forward; their rows add up to the total */
            int lines = 0, batches = -1;
            long rows_sum = 0, total = -1;
            for (const char *p = strstr(out, "batch 0: prefill:"); p; p = strstr(p + 1, "\nbatch ")) {
                const char *r = strstr(p, "(N'); ");
                int computed;
                if (r && sscanf(r, "(N'); %d rows computed", &computed) == 1) {
                    rows_sum += computed;
                    lines++;
                }
            }
            const char *sum = strstr(out, "\nrequests "), *rc_line = strstr(out, "compact rows computed ");
            if (sum) sscanf(sum, "\nrequests %*d in %d batches", &batches);
            if (rc_line) sscanf(rc_line, "compact rows computed %ld", &total);
            expect(lines > 0 && lines == batches && rows_sum == total,
                   "--show-batches: %d batch lines for %d batches, their rows %ld vs the summary's %ld\n%s", lines,
                   batches, rows_sum, total, out);
        }
        note("%-72s max|diff| %g (tol 0), %d stats rows, %d tokens cached",
             runs[k].flags[0] ? runs[k].flags : "(defaults)", d, rows, cached_sum);
        free(got); free(csv);
    }
    requests_case_free(&rq);
}

static void test_cli_requests_rejects_bad_input(void) {
    if (!have_cli()) return;
    char long_line[129 * 2 + 2] = "";
    for (int i = 0; i < 129; i++) strcat(long_line, "7 ");
    strcat(long_line, "\n");
    struct { const char *what, *tokens, *flags, *msg; } cases[] = {
        {"token id = vocab size", "1 2 3\n4 512 6\n", "",
         "requests.txt:2: token id 512 is outside the vocabulary [0, 512)"},
        {"non-numeric token id", "1 2\n3 x\n", "", ":2: 'x' is not part of a token id"},
        {"empty line", "1 2\n\n3\n", "", ":2: empty line"},
        {"empty file", "", "", "no sequences"},
        {"129 tokens, max 128", long_line, "", ":1: 129 tokens, more than max_position_embeddings 128"},
        {"request beyond the pool", "1 2 3\n1 2 3 4 5 6 7 8 9\n", "--page-size 4 --cache-pages 2",
         ":2: a request of 9 tokens needs 3 pages of 4 tokens, but --cache-pages is 2"},
    };
    char dir[] = "/tmp/radixmlp-cli-XXXXXX", cmd[1024], out[4096];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(dir, "requests.txt", cases[i].tokens, strlen(cases[i].tokens));
        snprintf(cmd, sizeof cmd, "%s --model %s/tiny-bf16 --requests %s/requests.txt %s", cli(), fixtures(), dir,
                 cases[i].flags);
        expect_one_line_error(cases[i].what, run_cmd(cmd, out, sizeof out), out, cases[i].msg);
    }
    const char *bad[] = {"--prefix-cache lru", "--page-size 0", "--batch x", "--batch 1025", "--schedule sjf",
                         "--cache-pages -3", "--tokens x.txt"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s --model %s/tiny-bf16 --requests %s/requests.txt %s",
                 cli(), fixtures(), dir, bad[i]);
        int rc = run_cmd(cmd, out, sizeof out);
        expect(rc == 2 && !strncmp(out, "radixmlp: ", 10), "'%s': exit %d, expected 2\n%s", bad[i], rc, out);
        note("%-28s exit %d, %.*s", bad[i], rc, (int)strcspn(out, "\n"), out);
    }
    snprintf(cmd, sizeof cmd, "%s --model %s/tiny-bf16 --tokens %s/requests.txt --batch 2", cli(), fixtures(), dir);
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 2 && strstr(out, "goes with --requests FILE"), "cache flags without --requests: exit %d\n%s", rc, out);
    remove_dir(dir);
}

/* --show-cache on exercise 13's four requests (page size 2, batch 1, a pool of 5 pages), against the trees worked
 * out by hand: B splits A's edge after two pages and moves page 2 into the new child [9 9]; C needs 2 own pages with
 * 1 free, so the LRU unlocked leaf [9 9] goes ([4 4] is on C's locked path). */
static void test_cli_show_cache_draws_splits_and_evictions(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-req-XXXXXX", cmd[1024], out[16384];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const char *abcd = "5 6 7 8 9 9 1\n5 6 7 8 4 4 2\n5 6 7 8 4 4 3 3 0\n5 6 7 8 9 9 3 3 1\n";
    write_file(dir, "abcd.txt", abcd, strlen(abcd));
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s/abcd.txt --page-size 2 --cache-pages 5 "
             "--show-cache", cli(), fixtures(), dir);
    int rc = run_cmd(cmd, out, sizeof out);
    char *block[5] = {NULL, NULL, NULL, NULL, NULL};   /* the drawing after batch k, cut at the next one */
    for (int k = 0; k < 4; k++) {
        char head[64];
        snprintf(head, sizeof head, "cache after batch %d: ", k);
        block[k] = strstr(out, head);
    }
    if ((block[4] = strstr(out, "\n4 requests"))) block[4]++;                  /* the summary */
    int found = rc == 0 && block[0] && block[1] && block[2] && block[3] && block[4];
    if (found) for (int k = 1; k < 5; k++) block[k][-1] = 0;                   /* each block a string of its own */
    expect(found, "'%s': exit %d, want four 'cache after batch k' drawings:\n%s", cmd, rc, out);
    if (found) {
        expect(strstr(block[0], "edges 1, pages cached 3, pages evicted so far 0") &&
               strstr(block[0], "`-- [5 6 | 7 8 | 9 9]  pages 0 1 2  lock 0") != NULL,
               "after A: one edge of pages 0 1 2:\n%s", block[0]);
        expect(strstr(block[1], "`-- [5 6 | 7 8]  pages 0 1  lock 0\n    |-- [9 9]  page 2  lock 0\n"
                                "    `-- [4 4]  page 3  lock 0") != NULL,
               "after B: the split moves page 2 to [9 9]:\n%s", block[1]);
        expect(strstr(block[2], "pages evicted so far 1") && !strstr(block[2], "[9 9]") &&
               strstr(block[2], "`-- [4 4]  page 3  lock 0\n        `-- [3 3]  page 4  lock 0"),
               "after C: [9 9] evicted (1 page), [3 3] below [4 4]:\n%s", block[2]);
        expect(strstr(block[3], "pages evicted so far 3") != NULL, "after D: 3 pages evicted in all:\n%s", block[3]);
        note("after B: [5 6 | 7 8] pages 0 1 with children [9 9] page 2 (moved by the split) and [4 4] page 3; after "
             "C: [9 9] evicted; after D: 3 pages evicted");
    }
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s/abcd.txt --page-size 2", cli(), fixtures(),
             dir);
    rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0 && !strstr(out, "cache after batch"),
           "without --show-cache: exit %d, drawings printed:\n%s", rc, out);
    remove_dir(dir);
}

static void test_bench_prefix_cache_csv(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[16384];
    int rc;
    char *csv = bench_csv("--prefix-cache --reps 1", out, sizeof out, &rc);
    expect(rc == 0 && strstr(out, "fcfs vs lpm") && strstr(out, "add up"),
           "'bench --prefix-cache' exited %d:\n%s", rc, out);
    int lines = 0, ragged = 0, commas0 = -1, matched = 0;
    for (char *line = csv ? strtok(csv, "\n") : NULL; line; line = strtok(NULL, "\n"), lines++) {
        int commas = 0;
        for (char *c = line; *c; c++) commas += *c == ',';
        if (commas0 < 0) commas0 = commas;
        ragged |= commas != commas0;
        char name[64], kind[16];
        int req, prompt, cached;   /* cpu,scenario,requests,prompt_tokens,cache,cached_tokens,... */
        char *f = strchr(line, ',');
        if (f && sscanf(f + 1, "%63[^,],%d,%d,%15[^,],%d", name, &req, &prompt, kind, &cached) == 5) {
            /* where the shapes are the nanoGPT comparison's, so are its cached tokens: 7 x 16, 23 x 24, 7 x 24,
             * 4 x 5 x 16 */
            int theirs = !strcmp(name, "shared_prefix_basic")      ? 112
                       : !strcmp(name, "high_reuse_many_requests") ? 552
                       : !strcmp(name, "branching_conversation")   ? 168
                       : !strcmp(name, "multi_prefix_groups")      ? 320
                                                                   : -1;
            if (theirs >= 0 && strcmp(kind, "off")) {
                expect(cached == theirs, "%s %s: %d cached, the nanoGPT table %d", name, kind, cached, theirs);
                matched++;
            }
        }
    }
    expect(lines == 1 + 6 * 3 && !ragged,
           "the CSV has %d lines (expected 19), %s", lines, ragged ? "ragged" : "one width");
    expect(matched == 8, "%d hash/radix rows of the first four scenarios checked, expected 8", matched);
    summary("bench --prefix-cache: %d CSV lines; hash and radix cache 112, 552, 168, 320 tokens, as the nanoGPT table",
            lines);
    free(csv);
    const char *bad[] = {"./bench --prefix-cache --table 5", "./bench --prefix-cache --reps 0",
                         "./bench --prefix-cache --svg x.svg"};
    for (int i = 0; i < 3; i++) {
        rc = run_cmd(bad[i], out, sizeof out);
        expect(rc == 2 && strstr(out, "bench: "), "'%s': exit %d, expected 2 with a message:\n%s", bad[i], rc, out);
    }
}

/* ------------------------------------------------------------------------------------------------------- main */
/* ------------------------------------------------------------------------------------- gpu: part ii, gpu_prefill */
/* gpu_prefill against qwen3_prefill_ref on random request traces through a real cache. One host RxKvPool holds the
 * bookkeeping and, for the C reference, fp32 K/V (NaN at the start); a GPU pool of the same pages holds gpu_prefill's
 * bf16 K/V (NaN at the start, checked). Each batch is prefilled by the C reference and by the GPU in all three modes,
 * in an order that rotates so that every mode is the last to write the pages in some batches. Checked per batch:
 *   - each GPU mode's last-token logits vs the C reference's within rx_bf16_tolerance (bf16, tutorial section 11);
 *   - radix and compact vs the GPU baseline within the same, compact == radix bit for bit (same rows, same keys);
 *   - the K/V of every position of every admitted request, cached by an earlier batch or written by this one, in
 *     the GPU pool vs the host pool, within the same of their max (a slot never written is NaN and fails).
 * Then each request finishes (its pages go into the cache) or, one in four, aborts; the pool is small, so admitting
 * evicts. */
typedef struct {
    double logits, modes, kv;
    long batches, shared, cached, evicted, requests, short_seqs;
    int max_cached, max_suffix;      /* the longest cached prefix and computed suffix of a sequence */
} GpuPfStats;

static void gpu_prefill_batch(const Qwen3Model *m, GpuModel *g, GpuKvPool *gk, RxKvPool *pool, RxRequest **adm,
                              int n, int turn, GpuPfStats *st, const char *what) {
    const int V = m->cfg.vocab_size, W = m->cfg.n_layers * m->cfg.n_kv_heads * m->cfg.head_dim, P = pool->page_size;
    const double tol_c = rx_bf16_tolerance(&m->cfg);
    const int32_t *seqs[16], *tables[16];
    int lens[16];
    int32_t cached[16], key[16];
    long positions = 0;
    for (int s = 0; s < n; s++) {
        seqs[s] = adm[s]->tokens + adm[s]->cached_len;
        lens[s] = adm[s]->len - adm[s]->cached_len;
        cached[s] = adm[s]->cached_len;
        key[s] = adm[s]->prefix_key;
        tables[s] = adm[s]->pages;
        positions += adm[s]->len;
        st->max_cached = cached[s] > st->max_cached ? cached[s] : st->max_cached;
        st->max_suffix = lens[s] > st->max_suffix ? lens[s] : st->max_suffix;
        st->short_seqs += adm[s]->len <= 64;
    }
    RxBatch b;
    if (rx_batch_make(&b, seqs, lens, n)) { expect(0, "rx_batch_make: %s", radix_error()); return; }
    for (int s = 0; s < n; s++)
        for (int i = b.cu_seqlens[s]; i < b.cu_seqlens[s + 1]; i++) b.position_ids[i] += cached[s];
    RxPrefill pf = {.pool = pool, .cached_len = cached, .pages = tables, .prefix_key = key};
    size_t nl = (size_t)n * V, slots = (size_t)pool->n_pages * P * W;
    float *ref = floats(nl), *out[3] = {floats(nl), floats(nl), floats(nl)};
    float *gk_k = floats(slots), *gk_v = floats(slots);
    float *got = floats(2 * positions * W), *want = floats(2 * positions * W);
    int rc = qwen3_prefill_ref(m, &b, &pf, RX_BASELINE, ref, NULL), rows[3] = {0, 0, 0};
    expect(rc == 0, "%s: qwen3_prefill_ref: %s", what, radix_error());
    for (int k = 0; k < 3 && rc == 0; k++) {            /* mode (turn + 1 + k) % 3 last: it leaves its K/V */
        int mode = (turn + 1 + k) % 3;
        rc = gpu_prefill(g, gk, &b, &pf, (RxMode)mode, out[mode], &rows[mode], NULL);
        expect(rc == 0, "%s: gpu_prefill %s: %s", what, rx_mode_name((RxMode)mode), radix_error());
    }
    if (rc == 0) {
        char why[WHY];
        double d, tol;
        for (int k = 0; k < 3; k++) {
            expect(close_verdict(out[k], ref, nl, tol_c, &d, &tol, why), "%s: GPU %s vs the C reference: %s",
                   what, rx_mode_name((RxMode)k), why);
            st->logits = fmax(st->logits, d / max_abs(ref, nl));
        }
        for (int k = 1; k < 3; k++) {
            expect(close_verdict(out[k], out[0], nl, tol_c, &d, &tol, why), "%s: GPU %s vs GPU baseline: %s", what,
                   rx_mode_name((RxMode)k), why);
            st->modes = fmax(st->modes, d / max_abs(out[0], nl));
        }
        char both[128];
        snprintf(both, sizeof both, "%s: GPU compact vs GPU radix", what);
        expect_identical(both, out[2], out[1], nl);
        expect(rows[0] == b.n_tokens && rows[1] == rows[2] && rows[2] <= b.n_tokens, "%s: rows %d %d %d of N = %d",
               what, rows[0], rows[1], rows[2], b.n_tokens);
        /* the pages: every position of every request, K then V, GPU pool vs host pool */
        rc = gpu_kv_pool_read(gk, gk_k, gk_v);
        expect(rc == 0, "%s: gpu_kv_pool_read: %s", what, radix_error());
        size_t at = 0;
        for (int s = 0; s < n && rc == 0; s++)
            for (int p = 0; p < adm[s]->len; p++, at += 2 * (size_t)W) {
                size_t slot = ((size_t)adm[s]->pages[p / P] * P + p % P) * W;
                memcpy(got + at, gk_k + slot, W * sizeof(float)), memcpy(got + at + W, gk_v + slot, W * sizeof(float));
                memcpy(want + at, pool->k + slot, W * sizeof(float));
                memcpy(want + at + W, pool->v + slot, W * sizeof(float));
            }
        if (rc == 0) {
            expect(close_verdict(got, want, at, tol_c, &d, &tol, why), "%s: K/V of the pages, GPU vs C: %s", what,
                   why);
            st->kv = fmax(st->kv, d / max_abs(want, at));
        }
        st->batches++;
        st->shared += rows[2] < b.n_tokens;
    }
    free(ref); free(out[0]); free(out[1]); free(out[2]); free(gk_k); free(gk_v); free(got); free(want);
    rx_batch_free(&b);
}

/* One trace: 12 requests of up to len_max tokens on 2 random stems (each request a stem's first 0 .. len_max * 4/5
 * tokens, then its own; one in three repeats an earlier request, so that batches hold equal prefixes and equal
 * suffixes), page size P, batches of up to B, a pool of B requests' pages plus 2: admitting evicts. */
static void gpu_prefill_trace(const Qwen3Model *m, GpuModel *g, RxCacheKind kind, int P, int B, int len_max,
                              uint64_t seed, GpuPfStats *st) {
    enum { NREQ = 12, LEN = 200 };
    const Qwen3Config *c = &m->cfg;
    const int V = c->vocab_size, W = c->n_layers * c->n_kv_heads * c->head_dim;
    const int n_pages = B * ((len_max + P - 1) / P) + 2;
    uint64_t rng = seed;
    int32_t tok[NREQ][LEN], stem[2][LEN];
    int len[NREQ];
    for (int j = 0; j < 2; j++) for (int i = 0; i < len_max; i++) stem[j][i] = 1 + rng_int(&rng, V - 1);
    for (int s = 0; s < NREQ; s++) {
        if (s > 0 && rng_int(&rng, 3) == 0) {
            int from = rng_int(&rng, s);
            memcpy(tok[s], tok[from], sizeof tok[s]);
            len[s] = len[from];
            continue;
        }
        int j = rng_int(&rng, 2), shared = rng_int(&rng, len_max * 4 / 5 + 1);
        len[s] = 1 + rng_int(&rng, len_max);
        for (int i = 0; i < len[s]; i++) tok[s][i] = i < shared ? stem[j][i] : 1 + rng_int(&rng, V - 1);
    }
    char what[96] = "trace";
    RxKvPool pool;
    RxPrefixCache *cache = NULL;
    GpuKvPool *gk = NULL;
    if (rx_kv_pool_init(&pool, n_pages, P, c->n_layers, W / c->n_layers) || rx_cache_create(&cache, kind, &pool) ||
        gpu_kv_pool_create(&gk, g, &pool)) {
        expect(0, "the pools: %s", radix_error());
        rx_cache_free(cache); rx_kv_pool_free(&pool);
        return;
    }
    size_t slots = (size_t)n_pages * P * W;
    for (size_t i = 0; i < slots; i++) pool.k[i] = pool.v[i] = NAN;
    float *k0 = floats(slots), *v0 = floats(slots);
    int nan = gpu_kv_pool_read(gk, k0, v0) == 0;
    for (size_t i = 0; nan && i < slots; i++) nan = isnan(k0[i]) && isnan(v0[i]);
    expect(nan, "a new GPU KV pool must read back as NaN everywhere");
    free(k0); free(v0);
    RxRequest req[NREQ];
    for (int s = 0; s < NREQ; s++) rx_request_init(&req[s], tok[s], len[s], 9);
    for (int next = 0, turn = 0; next < NREQ && !test_failed; turn++) {
        RxRequest *adm[16];
        int n = 0, rc = 0;
        while (n < B && next < NREQ && (rc = rx_request_admit(cache, &req[next])) == 0) adm[n++] = &req[next++];
        expect(rc >= 0 && n > 0, "admit: %s (%d admitted)", radix_error(), n);
        if (rc < 0 || n == 0) break;
        snprintf(what, sizeof what, "%s P=%d B=%d batch %d", rx_cache_kind_name(kind), P, B, turn);
        gpu_prefill_batch(m, g, gk, &pool, adm, n, turn, st, what);
        for (int s = 0; s < n; s++) {
            st->cached += adm[s]->cached_len;
            st->requests++;
            if (rng_int(&rng, 4) == 0) rx_request_abort(cache, adm[s]);
            else expect(rx_request_finish(cache, adm[s]) == 0, "finish: %s", radix_error());
        }
    }
    RxCacheStats cs = audit(cache, what);
    st->evicted += cs.evicted_pages;
    for (int s = 0; s < NREQ; s++) rx_request_abort(cache, &req[s]);
    rx_cache_free(cache);
    expect(pool.n_free == pool.n_pages, "%s: %d of %d pages free after the flush", what, pool.n_free, pool.n_pages);
    gpu_kv_pool_free(gk);
    rx_kv_pool_free(&pool);
}

/* Part II's GPU test models: tiny_config with 3 layers, so that every stride differs from every other. head_dim 32
 * (the naive kernel): query rows 128 apart, the batch's key rows 64, the pool's 192 (3 layers x 64), heads 32;
 * head_dim 128 (flash): 512, 256, 768, 128. A kernel that used one stride for another reads the wrong elements. */
static Qwen3Config part2_config(int head_dim) {
    Qwen3Config c = tiny_config();
    c.n_layers = 3;
    c.head_dim = head_dim;
    c.max_position_embeddings = 256;   /* requests of up to 150 tokens */
    return c;
}

static void gpu_prefill_traces(const Qwen3Config *cfg, RxAttention attention, const int *pages, int n_pages,
                               int len_max, uint64_t seed) {
    Qwen3Model m;
    GpuModel *g = NULL;
    if (qwen3_random(&m, cfg, seed)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    if (gpu_model_upload(&g, &m) || gpu_set_attention(g, attention)) {
        expect(0, "gpu_model_upload: %s", radix_error());
        gpu_model_free(g); qwen3_free(&m);
        return;
    }
    GpuPfStats st = {0};
    for (int i = 0; i < n_pages && !test_failed; i++)
        gpu_prefill_trace(&m, g, i % 2 ? RX_CACHE_HASH : RX_CACHE_RADIX, pages[i], 1 + (i + 2) % 4, len_max,
                          seed + 10 * i, &st);
    expect(st.cached > 0 && st.evicted > 0 && st.shared > 0, "the traces must hit the cache (%ld), evict (%ld) and "
           "share rows inside a batch (%ld batches)", st.cached, st.evicted, st.shared);
    if (len_max > 64)                                   /* the flash kernel's key tiles: 64 keys */
        expect(st.max_cached > 64 && st.max_suffix > 64 && st.short_seqs > 0, "the traces must cache a prefix over "
               "one key tile (%d), compute a suffix over one (%d) and hold sequences of one tile or less (%ld)",
               st.max_cached, st.max_suffix, st.short_seqs);
    summary("head_dim %d, %d layers, %s attention, requests up to %d tokens, %d traces: %ld requests in %ld "
            "batches (%ld with rows shared), %ld tokens cached (longest prefix %d, longest suffix %d), %ld pages "
            "evicted; max|diff|/max|ref|: logits vs C %.3g, radix/compact vs baseline %.3g, K/V %.3g (tol %.3g each)",
            cfg->head_dim, cfg->n_layers, attention == RX_ATTN_FLASH ? "flash" : "naive", len_max, n_pages, st.requests,
            st.batches, st.shared, st.cached, st.max_cached, st.max_suffix, st.evicted, st.logits, st.modes, st.kv,
            rx_bf16_tolerance(cfg));
    gpu_model_free(g);
    qwen3_free(&m);
}

/* The naive kernel on requests of up to 40 tokens; the flash kernel on requests of up to 150: cached prefixes and
 * suffixes of several 64-key tiles, lengths off tile multiples, and some sequences of one tile or less. */
static void test_gpu_prefill_matches_c_reference_on_random_traces(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int pages[] = {1, 4, 16, 4};
    Qwen3Config small = part2_config(32), big = part2_config(128);
    gpu_prefill_traces(&small, RX_ATTN_NAIVE, pages, 4, 40, 900);
    gpu_prefill_traces(&big, RX_ATTN_FLASH, pages + 1, 2, 150, 950);
}

/* Generation on the GPU: rx_serve with o->gpu decodes through gpu_prefill on the device pool. Each step's logits
 * are within the bf16 budget of the C reference's forward of the same history. Where the C reference's top-2 margin
 * exceeds twice the budget (each of the two logits may move by one budget), the GPU's greedy token is the C
 * reference's; where it does not, the two may part, and the C reference is then asked about the GPU's history. A
 * request whose every margin held generates exactly the C reference's tokens. */
typedef struct { const Qwen3Model *m; double tol_rel; float *ref; long rows, compared; int *parted; } GpuGenCheck;
static int gpu_gen_step(void *ctx, int request, const int32_t *history, int len, const float *logits) {
    GpuGenCheck *k = (GpuGenCheck *)ctx;
    const int V = k->m->cfg.vocab_size;
    RxBatch b;
    char what[160];
    if (rx_batch_make(&b, &history, &len, 1) || qwen3_forward_ref_last(k->m, &b, RX_BASELINE, k->ref, NULL)) {
        expect(0, "the C reference of request %d: %s", request, radix_error());
        rx_batch_free(&b);
        return -1;
    }
    rx_batch_free(&b);
    double d, tol;
    char why[WHY];
    snprintf(what, sizeof what, "request %d, a history of %d tokens: the GPU's logits vs the C reference's", request,
             len);
    if (!close_verdict(logits, k->ref, (size_t)V, k->tol_rel, &d, &tol, why)) {
        expect(0, "%s: %s", what, why);
        return -1;
    }
    int top = 0, second = -1, got = 0;
    for (int i = 1; i < V; i++) {
        if (k->ref[i] > k->ref[top]) { second = top; top = i; }
        else if (second < 0 || k->ref[i] > k->ref[second]) second = i;
        if (logits[i] > logits[got]) got = i;
    }
    k->rows++;
    if (k->ref[top] - k->ref[second] <= 2 * tol) { k->parted[request] = 1; return 0; }
    k->compared++;
    expect(got == top, "%s: greedy token %d, the C reference's %d by a margin of %g > 2 x %g", what, got, top,
           k->ref[top] - k->ref[second], tol);
    return got == top ? 0 : -1;
}

static void test_gpu_generation_within_bf16_budget_of_c_reference(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    for (int dims = 0; dims < 2 && !test_failed; dims++) {            /* the naive kernel, then the flash kernel */
        Qwen3Config cfg = part2_config(dims ? 128 : 32);
        Qwen3Model m;
        GpuModel *g = NULL;
        if (qwen3_random(&m, &cfg, 60 + dims) || gpu_model_upload(&g, &m) ||
            gpu_set_attention(g, dims ? RX_ATTN_FLASH : RX_ATTN_NAIVE)) {
            expect(0, "setup: %s", radix_error());
            gpu_model_free(g);
            qwen3_free(&m);
            return;
        }
        int parted[GEN_REQS] = {0}, same = 0, preemptions = 0;
        GpuGenCheck k = {.m = &m, .tol_rel = rx_bf16_tolerance(&cfg), .ref = floats((size_t)cfg.vocab_size),
                         .rows = 0, .compared = 0, .parted = parted};
        GenTrace ref, got;
        gen_trace(&ref, cfg.vocab_size);
        RxGenerate gen = {.max_new = GEN_NEW, .top_p = 1};
        RxServeStats st;
        RxServeOptions o = {.cache = RX_CACHE_OFF, .page_size = 4, .batch = 1, .mode = RX_BASELINE};
        expect(gen_serve(&m, &ref, o, gen, &st) == 0, "the C reference's run: %s", radix_error());
        gen.on_logits = gpu_gen_step;
        gen.ctx = &k;
        for (int c = 0; c < 2 && !test_failed; c++) {
            RxServeOptions og = {.cache = c ? RX_CACHE_HASH : RX_CACHE_RADIX, .page_size = 4, .n_pages = c ? 0 : 10,
                                 .batch = 4, .mode = RX_COMPACT, .gpu = g};
            gen_trace(&got, cfg.vocab_size);
            expect(gen_serve(&m, &got, og, gen, &st) == 0, "the GPU's run: %s", radix_error());
            preemptions += st.preemptions;
            for (int s = 0; s < GEN_REQS && !test_failed; s++) {
                if (parted[s] || (got.after[s] >= 0 && parted[got.after[s]])) continue;
                expect(got.n_out[s] == ref.n_out[s] && !memcmp(got.out[s], ref.out[s], sizeof got.out[s]),
                       "request %d: every margin held, yet the GPU generated other tokens than the C reference", s);
                same++;
            }
        }
        expect(k.compared > 0 && same > 0 && preemptions > 0, "head_dim %d: %ld steps compared, %d requests the "
               "same, %d preemptions: the test compared nothing or did not preempt", cfg.head_dim, k.compared, same,
               preemptions);
        note("head_dim %3d (%s): %ld steps within %.4g x max|ref| of the C reference; greedy tokens equal at %ld with "
             "a margin above twice that; %d of %d requests generated the C reference's tokens; %d preemptions",
             cfg.head_dim, dims ? "flash" : "naive", k.rows, k.tol_rel, k.compared, same, 2 * GEN_REQS, preemptions);
        free(k.ref);
        gpu_model_free(g);
        qwen3_free(&m);
    }
}

/* --requests on the GPU: without --cpu the CLI serves with gpu_prefill and says so; the last-token logits within the
 * bf16 budget of each request's full recomputation on the C reference, and not equal to it (the C reference's are,
 * bit for bit: cli/requests_match_full_recomputation); the same leak audit. --cpu says the C
 * reference ran. */
static void test_gpu_cli_requests_runs_on_the_gpu(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    ReqCase rq;
    if (!have_cli() || requests_case(&rq)) return;
    char cmd[2048], out[16384], dump[64];
    const int n = rq.n, V = rq.m.cfg.vocab_size;
    snprintf(dump, sizeof dump, "%s/d.f32", rq.dir);
    const char *flags[] = {"--page-size 4 --batch 3", "--page-size 4 --cache-pages 12 --batch 2 --mode radix",
                           "--prefix-cache hash --page-size 1 --batch 4 --mode baseline"};
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "%s --model %s --requests %s/requests.txt --dump-logits %s %s", cli(), rq.path,
                 rq.dir, dump, flags[k]);
        int rc = run_cmd(cmd, out, sizeof out);
        size_t len = 0;
        float *got = rc == 0 ? (float *)read_file(dump, &len) : NULL;
        expect(rc == 0 && got && len == (size_t)n * V * sizeof(float), "'%s': exit %d\n%s", cmd, rc, out);
        expect(strstr(out, "the GPU, bf16") && strstr(out, "after the final flush: 0 pages held by requests"),
               "%s: the summary does not say the GPU ran, or no leak audit\n%s", flags[k], out);
        if (got && len == (size_t)n * V * sizeof(float)) {
            char what[128];
            snprintf(what, sizeof what, "--requests %s vs full recomputation", flags[k]);
            expect_close(what, 0, got, rq.want, (size_t)n * V, rx_bf16_tolerance(&rq.m.cfg));
            /* the printed label proves nothing; bf16 logits do: the C reference's equal these bit for bit */
            double d = max_abs_diff(got, rq.want, (size_t)n * V);
            expect(d > 0, "%s: the logits equal the fp32 C reference's bit for bit: they were not computed in bf16 "
                   "on the GPU", flags[k]);
        }
        free(got);
    }
    snprintf(cmd, sizeof cmd, "%s --model %s --requests %s/requests.txt --cpu", cli(), rq.path, rq.dir);
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0 && strstr(out, "the C reference on the CPU") && !strstr(out, "the GPU"), "--cpu: exit %d\n%s", rc,
           out);
    requests_case_free(&rq);
}

/* ------------------------------------------------------------------------ gpu: what the allocator returns, 64-bit */
#if defined(__SANITIZE_THREAD__)
#define TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_UNDER_TSAN 1
#endif
#endif
#ifndef TEST_UNDER_TSAN
#define TEST_UNDER_TSAN 0
#endif

/* Runs this binary's test `name` again in a child whose environment adds env (a GPU ignores the emulator's
 * variables), and passes when the child does. RADIXMLP_TEST_CHILD marks the child, which runs the test's body. */
static int in_child(void) { return getenv("RADIXMLP_TEST_CHILD") != NULL; }
static void run_in_child(const char *env, const char *name) {
    char self[1024], cmd[2048], out[16384];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) { expect(0, "readlink /proc/self/exe: %s", strerror(errno)); return; }
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "RADIXMLP_TEST_CHILD=1 %s '%s' %s", env, self, name);
    int rc = run_cmd(cmd, out, sizeof out);
    fputs(out, stdout);
    expect(rc == 0, "'%s': exit %d", cmd, rc);
}

/* A new GPU KV pool is NaN everywhere because pool_alloc fills it, not because the allocator returned NaN bytes: the
 * check runs where new device memory is zero (CUDA_EMU_MALLOC_FILL=0x00 on the emulator, whose default 0xff is a
 * bf16 NaN and would hide a missing fill); an uninitialised buffer is read first to show what the allocator gives. */
static void test_gpu_new_pool_is_nan_over_zeroed_memory(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    if (!in_child()) { run_in_child("CUDA_EMU_MALLOC_FILL=0x00", "new_pool_is_nan_over_zeroed_memory"); return; }
    Qwen3Config cfg = tiny_config();
    const size_t slots = 8 * 4, n = slots * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim;
    GpuModel *g = NULL;
    GpuKvPool *gk = NULL;
    RxKvPool pool;
    void *raw = NULL;
    float *k = floats(n), *v = floats(n);
    size_t zeros = 0, nans = 0;
    int rc = gpu_upload(&raw, NULL, n * 2) || gpu_download_bf16(k, raw, n);
    for (size_t i = 0; rc == 0 && i < n; i++) zeros += k[i] == 0.0f;
    rc = rc || gpu_model_random(&g, &cfg, 5) || rx_kv_pool_init(&pool, 8, 4, cfg.n_layers, n / slots / cfg.n_layers) ||
         gpu_kv_pool_create(&gk, g, &pool) || gpu_kv_pool_read(gk, k, v);
    expect(rc == 0, "the pools: %s", radix_error());
    for (size_t i = 0; rc == 0 && i < n; i++) nans += isnan(k[i]) + isnan(v[i]);
    note("an uninitialised buffer of %zu bf16: %zu zeros; a new GPU KV pool [32 slots, %zu]: %zu of %zu NaN", n, zeros,
         n / slots, nans, 2 * n);
    expect(rc == 0 && nans == 2 * n, "a new GPU KV pool must read back as NaN everywhere: %zu of %zu", nans, 2 * n);
    if (rc == 0) rx_kv_pool_free(&pool);
    gpu_kv_pool_free(gk);
    gpu_model_free(g);
    gpu_free(raw);
    free(k); free(v);
}

/* Offsets past 2^31 and 2^32 elements: K and V buffers of 2^32 + 32K bf16 elements each (8 GiB), of which only the
 * rows used are touched (the emulator's cudaMalloc leaves them unfilled with CUDA_EMU_MALLOC_FILL=none; an 8 GiB
 * fill would touch every page). Two sequences of 70 and 20 keys (head_dim 128, 2 kv heads: rows of 256 elements)
 * are stored by the row-copy kernel into rows that cross element 2^31 (in the first sequence's second key tile)
 * and 2^32, read back through it, and attended by both kernels; everything must equal the same work on a packed
 * 90-row buffer bit for bit (same inputs, same order of operations). An index * stride in 32 bits wraps and reads or
 * writes the wrong row (ASan on the emulator reports it outside the buffer). Skipped where the device lacks the
 * memory, or under ThreadSanitizer (the racecheck build), which would write shadow for all 16 GiB. */
static void test_gpu_kernels_index_rows_past_2_31_elements(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
#if TEST_UNDER_TSAN
    skip_test("ThreadSanitizer shadows every byte of a new allocation: 16 GiB of sparse buffers would be touched");
    return;
#endif
    enum { D = 128, NH = 4, NKV = 2, KVD = NKV * D, QD = NH * D, T = 90 };
    const int64_t big_rows = ((int64_t)1 << 32) / KVD + 128, edge31 = ((int64_t)1 << 31) / KVD;
    const size_t big_bytes = (size_t)big_rows * KVD * 2;
    size_t free_b = 0;
    if (gpu_memory_free(&free_b) || free_b < 2 * big_bytes + ((size_t)1 << 30)) {
        char why[160];
        snprintf(why, sizeof why, "the device has %.1f GiB free; this test needs 2 x %.1f GiB + 1 GiB",
                 free_b / 1073741824.0, big_bytes / 1073741824.0);
        skip_test(why);
        return;
    }
    if (!in_child()) { run_in_child("CUDA_EMU_MALLOC_FILL=none", "kernels_index_rows_past_2_31_elements"); return; }
    const int32_t cu[3] = {0, 70, 90};
    int32_t kv_row[T], seq_start[T];
    for (int t = 0; t < T; t++) {
        kv_row[t] = (int32_t)(t < 70 ? edge31 - 60 + t : 2 * edge31 - 10 + (t - 70));   /* rows 0..59 below 2^31 */
        seq_start[t] = t < 70 ? 0 : 70;
    }
    uint64_t rng = 2031;
    float *q = rand_floats((size_t)T * QD, -1.0f, 1.0f, &rng);
    float *kv[2] = {rand_floats((size_t)T * KVD, -1.0f, 1.0f, &rng), rand_floats((size_t)T * KVD, -1.0f, 1.0f, &rng)};
    float *got = floats((size_t)T * QD), *want = floats((size_t)T * QD), *back = floats((size_t)T * 257);
    void *big[2] = {NULL, NULL};
    DevBufs d = {0};
    void *d_q = dev_bf16(&d, q, (size_t)T * QD), *d_k = dev_bf16(&d, kv[0], (size_t)T * KVD);
    void *d_v = dev_bf16(&d, kv[1], (size_t)T * KVD), *d_out = dev_bf16(&d, NULL, (size_t)T * QD);
    void *d_back = dev_bf16(&d, NULL, (size_t)T * 257);
    const int32_t *d_row = (const int32_t *)dev_raw(&d, kv_row, sizeof kv_row);
    const int32_t *d_start = (const int32_t *)dev_raw(&d, seq_start, sizeof seq_start);
    int rc = d.failed || gpu_upload(&big[0], NULL, big_bytes) || gpu_upload(&big[1], NULL, big_bytes);
    for (int h = 0; h < 2 && rc == 0; h++)       /* K and V where attention reads them: 16-byte chunks */
        rc = gpu_rows_to_index(big[h], KVD * 2, d_row, h ? d_v : d_k, NULL, T, KVD * 2);
    /* The row-copy kernel both ways in 2-byte chunks (rows 257 elements apart: not a multiple of 16 bytes), so that
     * its index * stride counts elements and crosses 2^31 and 2^32 (in 16-byte chunks that takes 32 GiB): K's rows
     * into the V buffer at rows 8355960.. and 16711930.., then read back. */
    int32_t odd_row[T];
    for (int t = 0; t < T; t++)
        odd_row[t] = (int32_t)(t < 70 ? (1u << 31) / 257 - 40 + t : (1ull << 32) / 257 - 5 + t - 70);
    const int32_t *d_odd = (const int32_t *)dev_raw(&d, odd_row, sizeof odd_row);
    rc = rc || d.failed || gpu_rows_to_index(big[1], 257 * 2, d_odd, d_k, NULL, T, KVD * 2) ||
         gpu_rows_by_index(d_back, big[1], d_odd, T, 257 * 2) || gpu_download_bf16(back, d_back, (size_t)T * 257);
    round_to_bf16(kv[0], (size_t)T * KVD);
    for (int t = 0; t < T; t++) memmove(back + (size_t)t * KVD, back + (size_t)t * 257, KVD * sizeof(float));
    if (rc == 0) expect_identical("K rows stored 257 elements apart past 2^31, 2^32, read back", back, kv[0],
                                  (size_t)T * KVD);
    for (int h = 0; h < 2 && rc == 0; h++)       /* the V rows again: the 2-byte copies above overwrote some */
        rc = gpu_rows_to_index(big[h], KVD * 2, d_row, h ? d_v : d_k, NULL, T, KVD * 2);
    for (int flash = 0; flash < 2 && rc == 0; flash++) {
        rc = flash ? gpu_flash_attention(d_out, d_q, d_k, d_v, cu, cu, NULL, 2, NH, NKV, D, RX_ATTN_FLASH)
                   : gpu_attention(d_out, d_q, d_k, d_v, KVD, T, NULL, d_start, NULL, NH, NKV, D);
        rc = rc || gpu_download_bf16(want, d_out, (size_t)T * QD);
        rc = rc || (flash ? gpu_flash_attention(d_out, d_q, big[0], big[1], cu, cu, d_row, 2, NH, NKV, D, RX_ATTN_FLASH)
                          : gpu_attention(d_out, d_q, big[0], big[1], KVD, T, NULL, d_start, d_row, NH, NKV, D));
        rc = rc || gpu_download_bf16(got, d_out, (size_t)T * QD);
        if (rc == 0) expect_identical(flash ? "flash attention, keys past 2^31 vs packed" :
                                              "naive attention, keys past 2^31 vs packed", got, want, (size_t)T * QD);
    }
    expect(rc == 0, "the GPU calls: %s", radix_error());
    note("K, V [%lld rows, %d] each (%.1f GiB); rows %lld..%lld cross element 2^31, %lld..%lld element 2^32; rows "
         "257 apart %d..%d and %d..%d: the copies and both kernels bit for bit", (long long)big_rows, KVD,
         big_bytes / 1073741824.0, (long long)kv_row[0], (long long)kv_row[69], (long long)kv_row[70],
         (long long)kv_row[89], odd_row[0], odd_row[69], odd_row[70], odd_row[89]);
    gpu_free(big[0]);
    gpu_free(big[1]);
    dev_finish(&d, 0, NULL, NULL, 0);
    free(q); free(kv[0]); free(kv[1]); free(got); free(want); free(back);
}

/* ------------------------------------------------------------------------- gpu: the budget at Qwen3-4B's depth */
/* rx_bf16_tolerance at Qwen3-4B's width (hidden 2560, intermediate 9728, 32 heads, 8 kv heads, head_dim 128; vocab
 * 512 is enough) and two depths, 2 and 36 layers: the GPU forward's logits against the C reference's within the
 * budget of each depth, in every mode. Random weights; to keep the host's memory small, the 36 layers cycle through 4
 * distinct random layers (the GPU still holds 36 uploaded copies, 7.3 GB). Opt-in (RADIXMLP_DEEP=1; make gpu-check
 * sets it): through the emulator it takes minutes. */
static void test_gpu_budget_holds_at_qwen3_4b_depth(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    if (!getenv("RADIXMLP_DEEP")) { skip_test("opt-in: RADIXMLP_DEEP=1 runs it (make gpu-check does)"); return; }
    Qwen3Config cfg = {.vocab_size = 512, .hidden_size = 2560, .intermediate_size = 9728, .n_layers = 4,
                       .n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .max_position_embeddings = 4096,
                       .rope_theta = 1e6, .rms_norm_eps = 1e-6, .tie_word_embeddings = 1};
    static const int32_t s0[3] = {3, 1, 4}, s1[3] = {3, 1, 5};    /* N = 6, N' = 4: as few tokens as show it */
    const int32_t *seqs[2] = {s0, s1};
    int lens[2] = {3, 3};
    Qwen3Model base;
    RxBatch b;
    if (qwen3_random(&base, &cfg, 36) || rx_batch_make(&b, seqs, lens, 2)) {
        expect(0, "the model: %s", radix_error());
        return;
    }
    static const int depths[2] = {2, 36};
    const size_t n = (size_t)b.n_tokens * cfg.vocab_size;
    float *ref = floats(n), *got = floats(n);
    for (int k = 0; k < 2 && !test_failed; k++) {
        Qwen3Model m = base;                       /* a view: layer l is base's layer l % 4 */
        m.cfg.n_layers = depths[k];
        m.layers = (Qwen3Layer *)malloc((size_t)depths[k] * sizeof(Qwen3Layer));
        for (int l = 0; l < depths[k]; l++) m.layers[l] = base.layers[l % 4];
        GpuModel *g = NULL;
        time_t t0 = time(NULL);
        int rc = qwen3_forward_ref(&m, &b, RX_BASELINE, ref) || gpu_model_upload(&g, &m);
        expect(rc == 0, "%d layers: %s", depths[k], radix_error());
        for (int mode = RX_BASELINE; mode <= RX_COMPACT && rc == 0; mode++) {
            char what[96];
            snprintf(what, sizeof what, "%d layers, hidden 2560, %s vs the C reference", depths[k],
                     rx_mode_name((RxMode)mode));
            expect_close(what, gpu_forward(g, &b, (RxMode)mode, RX_AUTO_THRESHOLD, 0, got, NULL), got, ref, n,
                         rx_bf16_tolerance(&m.cfg));
        }
        note("%d layers: budget %.4f, %.0f s wall (the C reference here, then %s)", depths[k],
             rx_bf16_tolerance(&m.cfg), difftime(time(NULL), t0), gpu_device_name());
        gpu_model_free(g);
        free(m.layers);
    }
    free(ref); free(got);
    rx_batch_free(&b);
    qwen3_free(&base);
}

/* ---------------------------------------------------------------------------- gpu: device memory comes back */
/* The device's free memory (cudaMemGetInfo) is the same before and after each of: a model, a pool, a successful
 * prefill, a refused prefill, and a serving run that fails mid-way (a later request is larger than the pool, after
 * earlier batches ran on the GPU); on the emulator and a GPU alike, no difference allowed. The first round is a
 * warm-up and is not compared: the CUDA runtime loads a module's kernels and cuBLAS sizes its workspace on first use,
 * lazily, and keep them, so only after one full round can a difference be a leak. */
static void mem_same(const char *what, size_t before, int compare) {
    size_t after = 0;
    int rc = gpu_memory_free(&after);
    if (!compare) return;
    note("%-44s free before %zu, after %zu: difference %lld bytes", what, before, after,
         (long long)after - (long long)before);
    expect(rc == 0 && after == before, "%s: device memory %zu free before, %zu after: %lld bytes not returned", what,
           before, after, (long long)before - (long long)after);
}
static void test_gpu_device_memory_returns_to_where_it_started(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    Qwen3Config cfg = part2_config(128);
    enum { P = 4 };
    static const int32_t seq0[6] = {5, 6, 7, 8, 9, 10}, seq1[3] = {5, 6, 11}, bad[2] = {5, 100000};
    static const int32_t long_req[40] = {1, 2, 3};
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 77)) { expect(0, "qwen3_random: %s", radix_error()); return; }
    for (int round = 0; round < 2 && !test_failed; round++) {
        const int cmp = round == 1;
        size_t f_start = 0, f_model = 0, f_pool = 0;
        GpuModel *g = NULL;
        GpuKvPool *gk = NULL;
        RxKvPool pool;
        gpu_memory_free(&f_start);
        if (gpu_model_upload(&g, &m)) { expect(0, "gpu_model_upload: %s", radix_error()); break; }
        gpu_memory_free(&f_model);
        if (rx_kv_pool_init(&pool, 8, P, cfg.n_layers, cfg.n_kv_heads * cfg.head_dim) ||
            gpu_kv_pool_create(&gk, g, &pool)) {
            expect(0, "the pools: %s", radix_error());
            gpu_model_free(g);
            break;
        }
        gpu_memory_free(&f_pool);
        int32_t pages[2][2], cached[2] = {0, 0}, key[2] = {-1, -1};
        for (int i = 0; i < 4; i++) pages[i / 2][i % 2] = rx_kv_page_alloc(&pool);
        const int32_t *tables[2] = {pages[0], pages[1]}, *seqs[2] = {seq0, seq1}, *bads[2] = {seq0, bad};
        int lens[2] = {6, 3}, bad_lens[2] = {6, 2};
        RxPrefill pf = {.pool = &pool, .cached_len = cached, .pages = tables, .prefix_key = key};
        RxBatch b, bb;
        float logits[2 * 512];
        int rc = rx_batch_make(&b, seqs, lens, 2) || rx_batch_make(&bb, bads, bad_lens, 2);
        expect(rc == 0, "rx_batch_make: %s", radix_error());
        if (rc == 0) {
            rc = gpu_prefill(g, gk, &b, &pf, RX_COMPACT, logits, NULL, NULL);
            expect(rc == 0, "gpu_prefill: %s", radix_error());
            mem_same("a successful prefill (compact)", f_pool, cmp);
            rc = gpu_prefill(g, gk, &bb, &pf, RX_COMPACT, logits, NULL, NULL);
            expect(rc != 0, "gpu_prefill of token 100000 (vocab 512) was not refused");
            mem_same("a refused prefill (token out of vocabulary)", f_pool, cmp);
            rx_batch_free(&b);
            rx_batch_free(&bb);
        }
        gpu_kv_pool_free(gk);
        rx_kv_pool_free(&pool);
        mem_same("a KV pool [32 slots, 3 layers, 256], freed", f_model, cmp);
        const int32_t *reqs[3] = {seq0, seq1, long_req};
        int req_lens[3] = {6, 3, 40};
        RxServeOptions o = {.cache = RX_CACHE_RADIX, .page_size = P, .n_pages = 4, .batch = 1, .mode = RX_RADIX,
                            .model_id = 3, .gpu = g};
        RxServeStats st;
        rc = rx_serve(&m, reqs, req_lens, 3, &o, NULL, NULL, NULL, &st);
        expect(rc != 0, "rx_serve with a request of 10 pages in a pool of 4 did not fail");
        mem_same("a serving run that fails at its third request", f_model, cmp);
        gpu_model_free(g);
        mem_same("a model, freed", f_start, cmp);
    }
    qwen3_free(&m);
}

/* ---- hostile inputs: values a plot cannot show, stdout as an output, $OMP_NUM_THREADS, NaN in served logits */
/* $OMP_NUM_THREADS is checked at start by all three programs (rx_check_env): a count from 1 to 1024, or a list of
 * them. libgomp reads it before main and only warns about "", "abc", 0 or -4 (and then runs on every core); it took
 * 2147483647 and failed later for want of memory. Each is now the program's one line, exit 2, after libgomp's own
 * warning where it gives one, and nothing else runs; "4,2" and " 2" are accepted. */
static void test_cli_omp_num_threads_checked_at_start(void) {
    if (!have_cli()) return;
    char self[1024], dir[] = "/tmp/radixmlp-omp-XXXXXX";
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0 || !mkdtemp(dir)) { expect(0, "readlink /proc/self/exe or mkdtemp: %s", strerror(errno)); return; }
    self[len] = 0;
    const char *values[] = {"", "0", "abc", "-4", "2147483647", "1025", "4,0", "2x", "4,2", " 2"};
    const char *name[3] = {"radixmlp", "bench", "test_radixmlp"};
    char run[3][1024];
    snprintf(run[0], sizeof run[0], "%s --show-index --tokens %s/batches/mixed.txt", cli(), fixtures());
    snprintf(run[1], sizeof run[1], "./bench --replot %s/table4-paper.csv --svg %s/p.svg", fixtures(), dir);
    snprintf(run[2], sizeof run[2], "%.1000s empty_batch", self);
    int checked = 0;
    for (int p = 0; p < 3; p++) {
        if (p == 1 && access("./bench", X_OK) != 0) continue;
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            char cmd[1200], out[8192], want[128];
            int good = v >= 8, others = 0;
            snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS='%s' %.1100s", values[v], run[p]);
            int rc = run_cmd(cmd, out, sizeof out);
            snprintf(want, sizeof want, "%s: OMP_NUM_THREADS: '%s' is not a thread count from 1 to 1024", name[p],
                     values[v]);
            const char *ours = strstr(out, want);
            for (const char *l = out; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
                others += l[0] != '\n' && strncmp(l, "libgomp: ", 9) && l != ours;
            if (good) expect(rc == 0 && !ours, "%s with OMP_NUM_THREADS='%s': exit %d, want 0:\n%s", name[p],
                             values[v], rc, out);
            else expect(rc == 2 && ours && !others, "%s with OMP_NUM_THREADS='%s': exit %d, want 2 and only '%s' "
                        "(after libgomp's warning, if any):\n%s", name[p], values[v], rc, want, out);
            checked++;
        }
        note("%-14s OMP_NUM_THREADS '', 0, abc, -4, 2147483647, 1025, 4,0, 2x: exit 2; '4,2', ' 2': exit 0", name[p]);
    }
    summary("%d runs: a bad OMP_NUM_THREADS stops each program at start with one line of its own", checked);
    remove_dir(dir);
}

/* fmt with each '@' replaced by dir and each '^' by the fixtures folder: the command lines and messages of a test
 * that writes into a temporary folder. */
static void at_dir(char *out, size_t n, const char *fmt, const char *dir) {
    size_t k = 0;
    for (const char *c = fmt; *c && k + strlen(dir) + strlen(fixtures()) + 1 < n; c++)
        if (*c == '@' || *c == '^') k += (size_t)snprintf(out + k, n - k, "%s", *c == '@' ? dir : fixtures());
        else out[k++] = *c;
    out[k] = 0;
}

/* --replot checks every number against what the plot can show, so that any CSV plots in bounded time and size: a
 * speedup above 0 and at most 1000 (1e6 wrote a 124 MB SVG, 1e308 1.7 GB: a grid line per 1.0), P and S whole
 * token counts up to 2^20; anything else is one line naming the row, the column and the value, exit 1. A plot up to
 * 1000x draws about ten y grid lines (a step of 100), and a UTF-8 byte order mark before the header is skipped. The
 * SVG's size is the bound checked, not the time taken (which a busy machine stretches); `timeout 60` only ends a
 * hang, whose exit status 124 fails the case. */
static void test_bench_replot_bounds_values_and_reads_a_bom(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char dir[] = "/tmp/radixmlp-replot-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const struct { const char *what, *csv; int rc; const char *msg; } cases[] = {
        {"radix_x 1e6", "P,S,radix_x\n16,256,1e6\n", 1,
         "x.csv, data row 1: radix_x is '1e6'; a speedup must be a number above 0 and at most 1000"},
        {"radix_x 1e308 on row 2", "P,S,radix_x\n16,256,1.5\n32,256,1e308\n", 1, "data row 2: radix_x is '1e308'"},
        {"radix_x inf", "P,S,radix_x\n16,256,inf\n", 1, "data row 1: radix_x is 'inf'; a speedup must be"},
        {"paper_x nan", "P,S,radix_x,paper_x\n16,256,1.5,nan\n", 1, "data row 1: paper_x is 'nan'"},
        {"negative speedups", "P,S,radix_x,compact_x\n16,256,-2,-1\n", 1,
         "data row 1: radix_x is '-2'; a speedup must be a number above 0"},
        {"compact_x 0", "P,S,radix_x,compact_x\n16,256,2,0\n", 1, "data row 1: compact_x is '0'"},
        {"P 1e308", "P,S,radix_x\n1e308,256,1.5\n", 1, "data row 1: P is '1e308'; it must be a whole number of tokens"},
        {"S 2.5", "P,S,radix_x\n16,2.5,1.5\n", 1, "data row 1: S is '2.5'"},
        {"radix_x 1.5x", "P,S,radix_x\n16,256,1.5x\n", 1, "data row 1: radix_x is '1.5x'"},
        {"a UTF-8 byte order mark", "\xEF\xBB\xBFP,S,radix_x\n16,256,1.5\n", 0, "bench: wrote "},
        {"radix_x 1000, the most", "P,S,radix_x\n16,256,1000\n32,256,2\n", 0, "bench: wrote "},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char cmd[1024], out[4096], svg[300];
        size_t len = 0;
        write_file(dir, "x.csv", cases[i].csv, strlen(cases[i].csv));
        at_dir(cmd, sizeof cmd, "timeout 60 ./bench --replot @/x.csv --svg @/x.svg", dir);
        at_dir(svg, sizeof svg, "@/x.svg", dir);
        int rc = run_cmd(cmd, out, sizeof out);
        uint8_t *b = (uint8_t *)read_file(svg, &len);
        const char *nl = strchr(out, '\n');
        expect(rc == cases[i].rc && !strncmp(out, "bench: ", 7) && nl && !nl[1] && strstr(out, cases[i].msg) &&
               (rc ? !b : b && len < 16384), "%s: exit %d, want %d, one line with '%s', %s (here %zu bytes):\n%s",
               cases[i].what, rc, cases[i].rc, cases[i].msg, cases[i].rc ? "no SVG" : "an SVG under 16 KB",
               b ? len : 0, out);
        note("%-24s exit %d, SVG %6zu bytes: %.*s", cases[i].what, rc, b ? len : 0, (int)strcspn(out, "\n"), out);
        free(b);
        unlink(svg);
    }
    summary("%d replot CSVs: each refused in one line naming its row, or plotted in under 16 KB", n);
    remove_dir(dir);
}

/* Under --requests, a NaN or Inf in any request's last-token logits fails the run as it fails --tokens, with or
 * without --dump-logits: one line naming the request by its line in the file, its row and the column; exit 1; no
 * summary, no --stats file, no dump (here: token 5's embedding row holds a NaN, and request 2 is "4 5 6"). */
static void test_cli_requests_nonfinite_logits_fail_naming_the_line(void) {
    if (!have_cli()) return;
    char *d = copy_fixture("tiny-untied");
    write_file(d, "t.txt", "1 2 3\n4 5 6\n", 12);
    plant_value(d, "model.embed_tokens.weight", 5 * 64 + 3, NAN);
    const char *runs[] = {"--stats @/s.csv", "--stats @/s.csv --dump-logits @/l.f32 --batch 2",
                          "--dump-logits @/l.f32 --schedule lpm"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char args[1024], cmd[1600], out[8192], want[600], p[600];
        at_dir(args, sizeof args, runs[i], d);
        snprintf(cmd, sizeof cmd, "%s --cpu --model %s --requests %s/t.txt %s", cli(), d, d, args);
        int rc = run_cmd(cmd, out, sizeof out);
        snprintf(want, sizeof want, "radixmlp: %s/t.txt:2: the logits [vocab] of its last token hold nan at column 0",
                 d);
        const char *err = strstr(out, "radixmlp: "), *nl = err ? strchr(err, '\n') : NULL;
        int written = 0;
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s", d, k ? "l.f32" : "s.csv");
            written |= access(p, F_OK) == 0;
        }
        expect(rc == 1 && err && !strncmp(err, want, strlen(want)) && nl && !nl[1] && !written &&
               !strstr(out, "wrote ") && !strstr(out, "hit rate"),
               "--requests %s: exit %d, want 1, a last line '%s...', no summary, nothing written:\n%s", runs[i], rc,
               want, out);
        note("%-48s exit %d, %.*s", runs[i], rc, err ? (int)strcspn(err, "\n") : 0, err ? err : "");
    }
    remove_dir(d);
}

/* An output file that is stdout (/dev/stdout, /dev/fd/1, /proc/self/fd/1, or the file stdout is sent to) would be
 * truncated under the text and overwritten by it: a mistake in the command line, one line, exit 2, nothing written.
 * /dev/null is the one stream an output may share with the text. */
static void test_cli_outputs_are_never_stdout(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    write_file(dir, "t.txt", "1 2 3\n1 2 4\n", 12);
    const struct { const char *args, *out; int rc; const char *msg; } cases[] = {
        {"--model ^/tiny-tied --tokens @/t.txt --dump-logits /dev/stdout", "@/out", 2,
         "--dump-logits /dev/stdout: that is stdout, where the text goes; write the output to a file"},
        {"--model ^/tiny-tied --tokens @/t.txt --dump-logits /dev/fd/1", "@/out", 2,
         "--dump-logits /dev/fd/1: that is stdout"},
        {"--model ^/tiny-tied --tokens @/t.txt --last-only --dump-logits /proc/self/fd/1", "@/out", 2,
         "--dump-logits /proc/self/fd/1: that is stdout"},
        {"--model ^/tiny-tied --tokens @/t.txt --dump-logits @/out", "@/out", 2, "--dump-logits @/out: that is stdout"},
        {"--model ^/tiny-embedding --tokens @/t.txt --embed /dev/stdout", "@/out", 2, "--embed /dev/stdout: that is"},
        {"--model ^/tiny-tied --requests @/t.txt --stats /dev/stdout", "@/out", 2, "--stats /dev/stdout: that is"},
        {"--model ^/tiny-tied --requests @/t.txt --dump-logits /dev/stdout", "@/out", 2, "--dump-logits /dev/stdout"},
        {"--model ^/tiny-tied --tokens @/t.txt --dump-logits /dev/null", "/dev/null", 0, ""},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char args[1024], msg[512], out_path[300], cmd[1600], out[8192];
        at_dir(args, sizeof args, cases[i].args, dir);
        at_dir(msg, sizeof msg, cases[i].msg, dir);
        at_dir(out_path, sizeof out_path, cases[i].out, dir);
        snprintf(cmd, sizeof cmd, "{ %s --cpu %s >%s; }", cli(), args, out_path);   /* stderr to the pipe */
        int rc = run_cmd(cmd, out, sizeof out);
        if (cases[i].rc) {
            expect_one_line(cases[i].args, cases[i].rc, rc, out, msg);
            struct stat st;
            expect(stat(out_path, &st) == 0 && st.st_size == 0, "%s: %s is not empty", cases[i].args, out_path);
        } else {
            expect(rc == 0 && !out[0], "%s >/dev/null: exit %d, want 0 and nothing on stderr:\n%s", cases[i].args, rc,
                   out);
            note("%-28.28s exit %d", cases[i].args, rc);
        }
    }
    remove_dir(dir);
}

/* bench: --csv or --svg on stdout would mix with the markdown tables (and truncate what is already there), so it is
 * refused, exit 2, before any work; --replot prints nothing to stdout, so its plot may go there. */
static void test_bench_outputs_are_never_stdout(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char dir[] = "/tmp/radixmlp-bench-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const struct { const char *args; int rc; const char *msg; } cases[] = {
        {"--table 5 --quick --csv /dev/stdout", 2, "bench: --csv names stdout, where the tables go: '/dev/stdout'"},
        {"--table 5 --quick --csv @/out", 2, "bench: --csv names stdout, where the tables go: '@/out'"},
        {"--table 4 --cpu --quick --svg /dev/fd/1", 2, "bench: --svg names stdout, where the tables go: '/dev/fd/1'"},
        {"--replot ^/table4-paper.csv --svg /dev/stdout", 0, "bench: wrote /dev/stdout"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char args[1024], msg[512], cmd[1600], out[4096], path[300];
        at_dir(args, sizeof args, cases[i].args, dir);
        at_dir(msg, sizeof msg, cases[i].msg, dir);
        snprintf(cmd, sizeof cmd, "{ timeout 60 ./bench %s >%s/out; }", args, dir);
        int rc = run_cmd(cmd, out, sizeof out);
        snprintf(path, sizeof path, "%s/out", dir);
        size_t len = 0;
        uint8_t *b = read_file(path, &len);
        const char *nl = strchr(out, '\n');
        expect(rc == cases[i].rc && nl && !nl[1] && strstr(out, msg) &&
               (rc ? b && len == 0 : b && !strncmp((char *)b, "<svg", 4)),
               "bench %s >out: exit %d, want %d, one line with '%s', and %s in out:\n%s", args, rc, cases[i].rc, msg,
               cases[i].rc ? "nothing" : "the SVG", out);
        note("%-44.44s exit %d, out %5zu bytes, %.*s", cases[i].args, rc, len, (int)strcspn(out, "\n"), out);
        free(b);
        unlink(path);
    }
    remove_dir(dir);
}

/* One rule for the exit status of both programs: 2 for a wrong command line, found before any file is read (an output
 * that is an input, sizes out of range, a flag that does not apply); 1 for bad data or a failed run (a tokens file's
 * contents, a request longer than the pool the flags made, an output that cannot be written, a folder among them). */
static void test_cli_exit_status_2_for_arguments_1_for_data(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    write_file(dir, "t.txt", "1 2 3\n1 2 4\n", 12);
    write_file(dir, "bad.txt", "1 2 3\n1 999 4\n", 14);
    write_file(dir, "turn.txt", "1 2 3\n@2 4 5\n", 13);
    write_file(dir, "turn2.txt", "1 2 3\n@1 4 5 6\n", 15);
    write_file(dir, "bare.txt", "1 2 3\n#1\n", 9);                 /* '#' for '@': at_dir would replace an at */
    write_file(dir, "bare_crlf.txt", "1 2 3\r\n#1 \r\n", 12);
    write_file(dir, "first.txt", "#1 2 3\n", 7);
    edit_file(dir, "first.txt", "#", "@");
    edit_file(dir, "bare.txt", "#", "@");
    edit_file(dir, "bare_crlf.txt", "#", "@");
    const struct { const char *args; int rc; const char *msg; } cases[] = {
        {"--requests @/t.txt --generate 0", 2, "--generate takes an integer from 1 to 1048576, not '0'"},
        {"--requests @/t.txt --generate 2 --temperature 1 --top-p 1.5", 2,
         "--top-p takes a number above 0 and at most 1, not '1.5'"},
        {"--requests @/t.txt --generate 2 --temperature -1", 2,
         "--temperature takes a number from 0 and at most 100, not '-1'"},
        {"--requests @/turn.txt", 1, "K, K an earlier line's number (1 to 1)"},     /* at_dir would replace an at */
        {"--requests @/first.txt", 1, "K continues an earlier line K, and line 1 has none before it"},
        {"--tokens @/turn2.txt", 1, "' is not part of a token id"},                 /* sign in the message        */
        {"--requests @/t.txt --generate 3 --cache-pages 1 --page-size 4", 1, "t.txt:1: a request of 5 tokens (its "
         "prompt and what it generates) needs 2 pages of 4 tokens, but --cache-pages is 1"},
        {"--requests @/t.txt --generate 127", 1, "t.txt:1: a prompt of 3 tokens and 127 to generate reach position "
         "128, beyond max_position_embeddings 128: give a smaller --generate"},
        {"--requests @/turn2.txt --generate 62", 1, "turn2.txt:2: a prompt of up to 68 tokens and 62 to generate "
         "reach position 128, beyond max_position_embeddings 128"},          /* line 1's answer: at most 62 tokens */
        {"--requests @/t.txt --generate 2 --temperature 1 --top-p 1e-300", 2, "--top-p takes a number above 0 and at "
         "most 1, not '1e-300': a nonzero value must be at least 1.17549e-38"},
        {"--requests @/t.txt --generate 2 --temperature 1e-50", 2, "--temperature takes a number from 0 and at most "
         "100, not '1e-50': a nonzero value must be at least 1.17549e-38"},
        {"--requests @/t.txt --generate 2 --temperature 1e-50 --top-k 3", 2, "--temperature takes a number from 0 "
         "and at most 100, not '1e-50': a nonzero value must be at least 1.17549e-38"},
        {"--requests @/t.txt --generate 2 --temperature 1 --top-p 1e-308", 2, "not '1e-308': a nonzero value must"},
        {"--requests @/bare.txt", 1, "1 has no tokens after it: a turn adds at least one token to request 1's "
         "conversation"},
        {"--requests @/bare_crlf.txt", 1, "1 has no tokens after it: a turn adds at least one token to request 1's"},
        {"--tokens @/t.txt --dump-logits @/t.txt", 2, "--dump-logits @/t.txt: that is the input @/t.txt"},
        {"--requests @/t.txt --cache-pages 16777216 --page-size 4096", 2,
         "--cache-pages 16777216 x --page-size 4096 is 68719476736 token slots; a KV pool holds at most 2147483647"},
        {"--requests @/t.txt --cache-pages 1048576 --page-size 4096", 2, "is 4294967296 token slots"},
        {"--requests @/t.txt --batch 0", 2, "--batch takes an integer from 1 to 1024, not '0'"},
        {"--tokens @/t.txt --stats @/s.csv", 2, "--stats does not apply to --model DIR --tokens FILE"},
        {"--tokens @/bad.txt", 1, "bad.txt:2: token id 999 is outside the vocabulary [0, 512)"},
        {"--requests @/t.txt --cache-pages 1 --page-size 2", 1,
         "t.txt:1: a request of 3 tokens needs 2 pages of 2 tokens, but --cache-pages is 1"},
        {"--tokens @/t.txt --dump-logits @/none/l.f32", 1, "@/none/l.f32: cannot write: No such file"},
        {"--tokens @/t.txt --dump-logits @", 1, "--dump-logits @: cannot write: Is a directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1024], msg[600], cmd[1600], out[8192];
        at_dir(args, sizeof args, cases[i].args, dir);
        at_dir(msg, sizeof msg, cases[i].msg, dir);
        snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied %s", cli(), fixtures(), args);
        expect_one_line(cases[i].args, cases[i].rc, run_cmd(cmd, out, sizeof out), out, msg);
    }
    remove_dir(dir);
}

/* Runs radixmlp on model folder dir with args ("@" stands for dir); its exit code, its text in out, and the
 * --out file's first two lines (dir/gen.out) in gen. */
static int run_in(const char *dir, const char *args, char *out, size_t n, char *gen, size_t gn) {
    char a[1024], cmd[1600], path[600];
    at_dir(a, sizeof a, args, dir);
    snprintf(path, sizeof path, "%s/gen.out", dir);
    unlink(path);
    snprintf(cmd, sizeof cmd, "%s --model %s %s", cli(), dir, a);
    int rc = run_cmd(cmd, out, n);
    size_t len = 0;
    uint8_t *b = read_file(path, &len);
    snprintf(gen, gn, "%s", b ? (const char *)b : "(no --out file)");
    free(b);
    return rc;
}

/* Copies fixtures/NAME (a file, or every file of a folder) into dir. */
static void copy_into(const char *dir, const char *name) {
    char src[512], p[800];
    size_t len = 0;
    snprintf(src, sizeof src, "%s/%s", fixtures(), name);
    DIR *d = opendir(src);
    if (!d) {
        uint8_t *b = read_file(src, &len);
        if (b) write_file(dir, strrchr(src, '/') + 1, b, len);
        else expect(0, "cannot read %s", src);
        free(b);
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        snprintf(p, sizeof p, "%s/%s", src, e->d_name);
        uint8_t *b = e->d_name[0] != '.' ? read_file(p, &len) : NULL;
        if (b) write_file(dir, e->d_name, b, len);
        free(b);
    }
    closedir(d);
}

/* tiny-tied copied into a temporary folder, fixtures/eos/prompts.txt beside it: the generation tests' checkpoint. */
static char *generation_folder(void) {
    char *d = copy_fixture("tiny-tied");
    copy_into(d, "eos/prompts.txt");
    return d;
}

/* Where generation stops, as transformers' generate() takes the eos ids: from generation_config.json alone when the
 * folder has one (null or absent there: it runs on, whatever config.json says), from config.json only when it has
 * none. Each folder of fixtures/eos holds a config.json and a generation_config.json or none, and what generate()
 * wrote for its prompts on tiny-tied's weights (make_fixtures.py --eos): --out must equal it, and the summary name
 * the file. An eos id outside the vocabulary is refused by --generate only, in the file it reads: --tokens and
 * --check never use them. */
static void test_cli_eos_ids_as_transformers_generate_takes_them(void) {
    if (!have_cli()) return;
    char *d = generation_folder(), out[8192], gen[4096], src[512], file[600];
    size_t len = 0;
    const char *run = "--cpu --requests @/prompts.txt --generate 8 --out @/gen.out";
    const struct { const char *name, *stops; } eos[] = {
        {"config-only", "stops at eos ids 198 in config.json (no generation_config.json)"},
        {"both", "stops at eos ids 273 in generation_config.json"},
        {"generation-config-without-eos", "no eos id in generation_config.json"},
        {"generation-config-null", "no eos id in generation_config.json"},
        {"generation-config-list", "stops at eos ids 198 203 in generation_config.json"},
    };
    for (int i = 0; i < 5; i++) {
        snprintf(file, sizeof file, "%s/generation_config.json", d);
        unlink(file);
        snprintf(src, sizeof src, "eos/%s", eos[i].name);
        copy_into(d, src);
        snprintf(file, sizeof file, "%s/eos/%s/generate.txt", fixtures(), eos[i].name);
        char *want = (char *)read_file(file, &len);
        int rc = run_in(d, run, out, sizeof out, gen, sizeof gen);
        expect(rc == 0 && want && !strcmp(gen, want) && strstr(out, eos[i].stops),
               "eos/%s: exit %d, want '%s' in the text, --out:\n%s(transformers' generate():\n%s)\n%s", eos[i].name,
               rc, eos[i].stops, gen, want ? want : "(none)", out);
        note("eos/%-30s --out as transformers' (%.*s), '%s'", eos[i].name, (int)strcspn(gen, "\n"), gen, eos[i].stops);
        free(want);
    }
    /* eos ids outside the vocabulary [0, 512): refused by --generate alone, in the file it reads, named */
    write_file(d, "generation_config.json", "{\"eos_token_id\": [203, 512]}", 28);
    edit_file(d, "config.json", "\"eos_token_id\": null", "\"eos_token_id\": -1");
    int rc = run_in(d, "--check", out, sizeof out, gen, sizeof gen);
    expect(rc == 0 && strstr(out, "generation: eos ids in config.json: -1 (not used: --generate takes "
                             "generation_config.json's, as transformers does); in generation_config.json: 203 512 "
                             "(outside the vocabulary: --generate refuses it)"),
           "--check with eos ids -1 and 512 (vocab 512): exit %d\n%s", rc, out);
    rc = run_in(d, "--cpu --tokens @/prompts.txt", out, sizeof out, gen, sizeof gen);
    expect(rc == 0 && strstr(out, "sequence 1: next token"), "--tokens with eos ids -1 and 512: exit %d\n%s", rc, out);
    rc = run_in(d, run, out, sizeof out, gen, sizeof gen);
    snprintf(file, sizeof file, "%s/generation_config.json: eos_token_id 512 is outside the vocabulary [0, 512): "
             "generation would never stop at it; fix the file, or give --ignore-eos", d);
    expect_one_line("--generate, eos 512 in generation_config.json", 1, rc, out, file);
    snprintf(file, sizeof file, "%s --ignore-eos", run);
    rc = run_in(d, file, out, sizeof out, gen, sizeof gen);
    expect(rc == 0, "--generate --ignore-eos with eos id 512: exit %d\n%s", rc, out);
    snprintf(file, sizeof file, "%s/generation_config.json", d);
    unlink(file);
    rc = run_in(d, "--check", out, sizeof out, gen, sizeof gen);
    expect(rc == 0 && strstr(out, "generation: eos ids in config.json: -1 (outside the vocabulary: --generate refuses "
                             "it); no generation_config.json"), "--check with eos id -1 alone: exit %d\n%s", rc, out);
    rc = run_in(d, run, out, sizeof out, gen, sizeof gen);
    snprintf(file, sizeof file, "%s/config.json: eos_token_id -1 is outside the vocabulary [0, 512)", d);
    expect_one_line("--generate, eos -1 in config.json, no generation_config.json", 1, rc, out, file);
    summary("11 runs: generation stops at the eos ids of generation_config.json alone, else of config.json, --out as "
            "transformers' generate(); eos ids outside the vocabulary refused by --generate alone, in its file");
    remove_dir(d);
}

/* generation_config.json's sampling defaults apply unless a flag overrides them (do_sample false is greedy whatever
 * the temperature), and a malformed one is an error naming the file, never skipped. Greedy on tiny-tied, 8 tokens:
 * transformers' (fixtures/eos/generation-config-without-eos), 479 479 479 198 2 ... and 100 203 479 273 ... */
static void test_cli_generation_config_as_transformers(void) {
    if (!have_cli()) return;
    char *d = generation_folder(), out[8192], gen[4096], src[512], file[600];
    size_t len = 0;
    const char *run = "--cpu --requests @/prompts.txt --generate 8 --out @/gen.out";
    snprintf(file, sizeof file, "%s/eos/generation-config-without-eos/generate.txt", fixtures());
    char *greedy = (char *)read_file(file, &len);
    int rc = run_in(d, "--cpu --requests @/prompts.txt --generate 1 --out @/gen.out", out, sizeof out, gen, 4096);
    expect(greedy && rc == 0 && strstr(out, "generation: up to 1 token, greedy"), "--generate 1: exit %d\n%s", rc, out);
    const struct { const char *what, *json, *args, *want_out, *want_text; } cases[] = {
        {"--ignore-eos", "eos_list.json", "--ignore-eos", greedy, "eos ids ignored (--ignore-eos)"},
        {"do_sample false: greedy, whatever its temperature", "greedy_with_temperature.json", "", greedy,
         "greedy (do_sample false in generation_config.json)"},
        {"its sampling defaults", "sampling.json", "", NULL,
         "sampled (do_sample true in generation_config.json): temperature 0.6 (generation_config.json), top-k 20 "
         "(generation_config.json), top-p 0.95 (generation_config.json), seed 0"},
        {"the flags override them", "sampling.json", "--temperature 2 --top-k 0 --top-p 0.5 --seed 3", NULL,
         "sampled: temperature 2 (--temperature), top-k off (--top-k), top-p 0.5 (--top-p), seed 3"},
        {"--temperature 0 overrides do_sample true", "sampling.json", "--temperature 0",
         "479 479 479 198\n100 203\n", "greedy (--temperature 0)"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    char sampled_file[4096] = "", sampled_flags[4096] = "";
    for (int i = 0; i < n; i++) {
        snprintf(src, sizeof src, "%s/generation_config/%s", fixtures(), cases[i].json);
        uint8_t *b = read_file(src, &len);
        if (!b) { expect(0, "cannot read %s", src); break; }
        write_file(d, "generation_config.json", b, len);
        free(b);
        char a[512];
        snprintf(a, sizeof a, "%s %s", run, cases[i].args);
        rc = run_in(d, a, out, sizeof out, gen, sizeof gen);
        expect(rc == 0 && (!cases[i].want_out || !strcmp(gen, cases[i].want_out)) && strstr(out, cases[i].want_text),
               "%s: exit %d, want '%s' in the text, --out:\n%s(want:\n%s)\n%s", cases[i].what, rc, cases[i].want_text,
               gen, cases[i].want_out ? cases[i].want_out : "any", out);
        if (i == 2) snprintf(sampled_file, sizeof sampled_file, "%s", gen);
        note("%-55.55s --out %.*s", cases[i].what, (int)strcspn(gen, "\n"), gen);
    }
    /* the file's defaults are used: the same tokens as those values given as flags, other than greedy's */
    snprintf(file, sizeof file, "%s --temperature 0.6 --top-k 20 --top-p 0.95", run);
    rc = run_in(d, file, out, sizeof out, sampled_flags, sizeof sampled_flags);
    expect(rc == 0 && *sampled_file && !strcmp(sampled_file, sampled_flags) &&
           strcmp(sampled_file, "479 479 479 198\n100 203\n"),
           "sampling.json's defaults drew\n%sthe same values as flags drew\n%s", sampled_file, sampled_flags);
    /* a sampling flag on a greedy run is a command-line mistake, the file's do_sample false or not */
    rc = run_in(d, "--cpu --requests @/prompts.txt --generate 8 --top-k 5", out, sizeof out, gen, sizeof gen);
    expect(rc == 0 && strstr(out, "top-k 5 (--top-k)"), "--top-k 5 with sampling.json: exit %d\n%s", rc, out);
    snprintf(src, sizeof src, "%s/generation_config/greedy_with_temperature.json", fixtures());
    uint8_t *b = read_file(src, &len);
    if (b) write_file(d, "generation_config.json", b, len);
    free(b);
    rc = run_in(d, "--cpu --requests @/prompts.txt --generate 8 --top-k 5", out, sizeof out, gen, sizeof gen);
    expect_one_line("--top-k, do_sample false", 2, rc, out, "--top-k applies to sampling: give --temperature T above 0 "
                    "(without it: greedy, by do_sample false in generation_config.json)");
    /* malformed: an error naming the file and the line, for every action that loads the model */
    snprintf(src, sizeof src, "%s/generation_config/malformed.json", fixtures());
    b = read_file(src, &len);
    if (b) write_file(d, "generation_config.json", b, len);
    free(b);
    const char *actions[] = {"--check", "--cpu --tokens @/prompts.txt", run};
    for (int a = 0; a < 3; a++) {
        rc = run_in(d, actions[a], out, sizeof out, gen, sizeof gen);
        snprintf(file, sizeof file, "%s/generation_config.json: invalid JSON near byte 54 (line 4)", d);
        expect_one_line(actions[a], 1, rc, out, file);
    }
    summary("%d runs: sampling defaults taken and overridden, a malformed file named with its line, 'up to 1 token'",
            n + 7);
    free(greedy);
    remove_dir(d);
}

/* A turn refused for lack of pool space, and the turn after it (@2), are refused in one line naming the first one's
 * line; the other requests are served and their outputs written (--out, --stats, --dump-logits: the same as a run of
 * them alone), the refused ones' rows empty or NaN; exit 1. A CRLF file's "@1\r" parses as "@1" does. */
static void test_cli_refused_turn_keeps_the_others_outputs(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX", cmd[2048], out[8192], path[600];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const char *text = "1 2 3 4\n#1 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24\n#2 7\n";
    write_file(dir, "r.txt", text, strlen(text));
    edit_file(dir, "r.txt", "#", "@");
    edit_file(dir, "r.txt", "#", "@");
    write_file(dir, "one.txt", "1 2 3 4\n", 8);
    write_file(dir, "out.txt", "old\n", 4);                      /* outputs there before: replaced */
    const char *flags = "--generate 4 --cache-pages 2 --page-size 8";
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s/one.txt %s --out %s/one.out --stats "
             "%s/one.csv --dump-logits %s/one.f32", cli(), fixtures(), dir, flags, dir, dir, dir);
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0, "the first line alone: exit %d\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s/r.txt %s --out %s/out.txt --stats "
             "%s/s.csv --dump-logits %s/l.f32", cli(), fixtures(), dir, flags, dir, dir, dir);
    rc = run_cmd(cmd, out, sizeof out);
    char want[1024], *last = strstr(out, "radixmlp: ");
    snprintf(want, sizeof want, "radixmlp: %s/r.txt:2: refused: 28 prompt tokens and 4 to generate need 4 pages of 8 "
             "tokens, but the KV pool has only 2 (2 requests refused); the other requests' outputs are written", dir);
    expect(rc == 1 && last && !strncmp(last, want, strlen(want)) && !strstr(last + 1, "radixmlp: ") &&
           !strstr(out, "none can run"), "refused turn: exit %d, want 1 and one error line '%s':\n%s", rc, want, out);
    size_t n1 = 0, n3 = 0, c1 = 0, c3 = 0, l1 = 0, l3 = 0;
    snprintf(path, sizeof path, "%s/one.out", dir);
    char *o1 = (char *)read_file(path, &n1);
    snprintf(path, sizeof path, "%s/out.txt", dir);
    char *o3 = (char *)read_file(path, &n3);
    snprintf(path, sizeof path, "%s/one.csv", dir);
    char *s1 = (char *)read_file(path, &c1);
    snprintf(path, sizeof path, "%s/s.csv", dir);
    char *s3 = (char *)read_file(path, &c3);
    snprintf(path, sizeof path, "%s/one.f32", dir);
    float *f1 = (float *)read_file(path, &l1);
    snprintf(path, sizeof path, "%s/l.f32", dir);
    float *f3 = (float *)read_file(path, &l3);
    if (o1 && o3 && s1 && s3 && f1 && f3) {
        char want_out[256], want_csv[512];
        snprintf(want_out, sizeof want_out, "%s\n\n", o1);        /* line 1's tokens, then two empty lines */
        snprintf(want_csv, sizeof want_csv, "%s1,,,,0\n2,,,,0\n", s1);
        int nan_rows = 1;
        for (int v = 0; v < 2 * 512 && l3 == 3 * 512 * sizeof(float); v++) nan_rows &= isnan(f3[512 + v]);
        expect(!strcmp(o3, want_out) && !strcmp(s3, want_csv) && l1 == 512 * sizeof(float) &&
               l3 == 3 * 512 * sizeof(float) && !memcmp(f1, f3, l1) && nan_rows,
               "--out\n%s(want\n%s), --stats\n%s(want\n%s), --dump-logits %zu bytes, row 0 %s line 1's alone, rows 1 "
               "and 2 %s", o3, want_out, s3, want_csv, l3, l3 >= l1 && !memcmp(f1, f3, l1) ? "equals" : "differs from",
               nan_rows ? "NaN" : "not NaN");
        note("--out '%.*s' then 2 empty lines; --stats rows 1 and 2 '1,,,,0', '2,,,,0'; logits rows 1 and 2 NaN",
             (int)strcspn(o3, "\n"), o3);
    } else expect(0, "an output is missing (%s %s %s %s %s %s)", o1 ? "" : "one.out", o3 ? "" : "out.txt",
                  s1 ? "" : "one.csv", s3 ? "" : "s.csv", f1 ? "" : "one.f32", f3 ? "" : "l.f32");
    free(o1); free(o3); free(s1); free(s3); free(f1); free(f3);
    /* CRLF: "@1\r" is "@1" (the refusal above is not needed: a pool of enough pages) */
    write_file(dir, "lf.txt", "1 2 3 4\n#1 5\n", 13);
    write_file(dir, "crlf.txt", "1 2 3 4\r\n#1\t5\r\n", 15);
    edit_file(dir, "lf.txt", "#", "@");
    edit_file(dir, "crlf.txt", "#", "@");
    write_file(dir, "crlf0.txt", "1 2\r\n#1\r\n", 9);
    edit_file(dir, "crlf0.txt", "#", "@");
    char got[2][256];
    for (int f = 0; f < 2; f++) {
        snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s/%s --generate 3 --out %s/t.out", cli(),
                 fixtures(), dir, f ? "crlf.txt" : "lf.txt", dir);
        rc = run_cmd(cmd, out, sizeof out);
        snprintf(path, sizeof path, "%s/t.out", dir);
        size_t len = 0;
        char *b = (char *)read_file(path, &len);
        snprintf(got[f], sizeof got[f], "%s", b ? b : "(none)");
        free(b);
        expect(rc == 0, "%s: exit %d\n%s", f ? "crlf.txt" : "lf.txt", rc, out);
    }
    expect(!strcmp(got[0], got[1]) && strchr(got[0], '\n') && strchr(strchr(got[0], '\n') + 1, '\n'),
           "the CRLF file generated\n%sthe LF file\n%s", got[1], got[0]);
    snprintf(cmd, sizeof cmd, "%s --cpu --model %s/tiny-tied --requests %s/crlf0.txt", cli(), fixtures(), dir);
    expect_one_line("a bare turn in a CRLF file", 1, run_cmd(cmd, out, sizeof out), out,
                    "crlf0.txt:2: @1 has no tokens after it");
    summary("a refused turn and the turn after it: exit 1, one line naming line 2; line 1's --out, --stats and "
            "--dump-logits equal a run of it alone; CRLF turns parse as LF ones");
    remove_dir(dir);
}

/* The outputs of a run are all written or none is: when one cannot be written (/dev/full), or the text cannot
 * (stdout on /dev/full; stdout a pipe whose reader is gone: SIGPIPE at the first write), every file that was there
 * before stays as it was, no temporary file is left, and no line says "wrote"; a run that succeeds replaces them
 * all, and says so of each (stdout to a file here). */
static void test_cli_outputs_all_or_nothing(void) {
    if (!have_cli()) return;
    char dir[] = "/tmp/radixmlp-cli-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    write_file(dir, "r.txt", "1 2 3\n4 5 6\n", 12);
    const char *serve = "--requests @/r.txt --generate 3", *outs[3] = {"s.csv", "o.txt", "l.f32"};
    const struct { const char *what, *args; int rc; } cases[] = {
        {"--out /dev/full", "%s --stats @/s.csv --out /dev/full --dump-logits @/l.f32", 1},
        {"--dump-logits /dev/full", "%s --stats @/s.csv --out @/o.txt --dump-logits /dev/full", 1},
        {"--score's --out beside --dump-logits /dev/full", "--tokens @/r.txt --score 1,2 --last-only --out @/o.txt "
         "--dump-logits /dev/full", 1},
        {"stdout /dev/full", "%s --stats @/s.csv --out @/o.txt --dump-logits @/l.f32 > /dev/full", 1},
        {"SIGPIPE", "%s --stats @/s.csv --out @/o.txt --dump-logits @/l.f32 >&5", 141},
        {"a run that succeeds", "%s --stats @/s.csv --out @/o.txt --dump-logits @/l.f32 > @/.said", 0},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char args[600], at[1200], cmd[2048], out[4096], path[700];
        for (int k = 0; k < 3; k++) write_file(dir, outs[k], "keep\n", 5);
        snprintf(args, sizeof args, cases[i].args, serve);
        at_dir(at, sizeof at, args, dir);
        snprintf(cmd, sizeof cmd, "mkfifo %1$s/.p; exec 4<>%1$s/.p 5>%1$s/.p 4<&-; rm %1$s/.p; %2$s --cpu --model "
                 "%3$s/tiny-tied %4$s", dir, cli(), fixtures(), at);     /* fd 5: a pipe with no reader left */
        int rc = run_cmd(cmd, out, sizeof out), kept = 0, files = 0;
        for (int k = 0; k < 3; k++) {
            size_t len = 0;
            snprintf(path, sizeof path, "%s/%s", dir, outs[k]);
            char *b = (char *)read_file(path, &len);
            kept += b && len == 5 && !memcmp(b, "keep\n", 5);
            free(b);
        }
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));) files += e->d_name[0] != '.';
        if (d) closedir(d);
        size_t len = 0;
        snprintf(path, sizeof path, "%s/.said", dir);
        char *said = i < n - 1 ? strdup(out) : (char *)read_file(path, &len);
        int wrote = 0;
        for (const char *w = said; w && (w = strstr(w, "wrote ")); w++) wrote++;
        expect(rc == cases[i].rc && files == 4 && kept == (i < n - 1 ? 3 : 0) && wrote == (i < n - 1 ? 0 : 3),
               "%s: exit %d (want %d), %d files (want r.txt and 3 outputs), %d outputs as they were (want %d), %d "
               "lines say 'wrote' (want %d)\n%s", cases[i].what, rc, cases[i].rc, files, kept, i < n - 1 ? 3 : 0,
               wrote, i < n - 1 ? 0 : 3, said ? said : out);
        note("%-48s exit %3d, %d of 3 outputs as they were, %d files, %d 'wrote'", cases[i].what, rc, kept, files,
             wrote);
        free(said);
    }
    remove_dir(dir);
}

/* Runs `sh -c cmd` with SIGINT and SIGHUP at their defaults (`cmd &` in a script would start it with SIGINT
 * ignored, as POSIX has it, and a program keeps a signal it finds ignored), and sends it sig once the file progress
 * is not empty. The exit status as a shell gives it: 128 + the signal that ended it. */
static int run_and_signal(const char *cmd, const char *progress, int sig) {
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int status = 0, sent = 0;
    struct stat st;
    while (pid > 0 && waitpid(pid, &status, sent ? 0 : WNOHANG) == 0) {
        if (!stat(progress, &st) && st.st_size > 0) sent = !kill(pid, sig);
        else usleep(10000);
    }
    return pid < 0 ? -1 : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* An output is written whole or not at all (rx_output_open): bench --csv FILE is renamed onto FILE when the run
 * succeeds, so that a run that fails (its tables cannot be written: stdout is /dev/full) or is stopped leaves a FILE
 * there before as it was, and no temporary file beside it. Each stop at a known point, whatever the machine's speed:
 * SIGINT and SIGHUP once --generate has printed its first progress line (17 more steps are left), SIGPIPE at the
 * first write to stdout, a pipe whose reader is gone before bench starts (`bench | head -c 10` in the worst case). */
static void test_bench_csv_untouched_by_failed_runs(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char dir[] = "/tmp/radixmlp-bench-XXXXXX", cmd[1024], out[8192], path[600], err[600];
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    const struct { const char *what, *cmd; int sig, rc; } cases[] = {
        {"stdout /dev/full", "./bench --table 5 --quick --csv %s/t.csv > /dev/full", 0, 1},
        {"SIGINT after line 1", "exec ./bench --generate --csv %1$s/t.csv 2> %1$s/.err > /dev/null", SIGINT, 130},
        {"SIGHUP after line 1", "exec ./bench --generate --csv %1$s/t.csv 2> %1$s/.err > /dev/null", SIGHUP, 129},
        {"SIGPIPE", "mkfifo %1$s/.p; exec 4<>%1$s/.p 5>%1$s/.p 4<&-; rm %1$s/.p; "        /* no reader left */
                    "./bench --table 5 --quick --csv %1$s/t.csv >&5 2>/dev/null", 0, 141},
        {"a run that succeeds", "./bench --table 5 --quick --csv %s/t.csv > /dev/null", 0, 0},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        write_file(dir, "t.csv", "keep\n", 5);
        snprintf(path, sizeof path, "%s/t.csv", dir);
        chmod(path, 0640);
        snprintf(cmd, sizeof cmd, cases[i].cmd, dir);
        snprintf(err, sizeof err, "%s/.err", dir);
        unlink(err);
        int rc = cases[i].sig ? run_and_signal(cmd, err, cases[i].sig) : run_cmd(cmd, out, sizeof out), files = 0;
        size_t len = 0;
        char *b = (char *)read_file(path, &len);
        struct stat st;
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));) files += e->d_name[0] != '.';
        if (d) closedir(d);
        int kept = b && !strcmp(b, "keep\n"), mode = !stat(path, &st) ? (int)(st.st_mode & 0777) : -1;
        expect(rc == cases[i].rc && files == 1 && (i < n - 1 ? kept : b && !strncmp(b, "cpu,configuration", 17)) &&
               mode == 0640, "%s: exit %d (want %d), %d files in the folder (want t.csv alone), mode %o, t.csv %s",
               cases[i].what, rc, cases[i].rc, files, mode, b ? b : "(none)");
        note("%-20s exit %3d, t.csv %s, mode %o, %d file%s in its folder", cases[i].what, rc,
             kept ? "as it was" : "the new table", mode, files, files == 1 ? "" : "s");
        free(b);
    }
    remove_dir(dir);
}

typedef struct { const char *group, *name; void (*fn)(void); } Test;
static const Test tests[] = {
    {"trie", "toy_example_matches_paper", test_toy_example_matches_paper},
    {"trie", "random_batches_match_bruteforce_oracle", test_random_batches_match_bruteforce_oracle},
    {"trie", "empty_batch", test_empty_batch},
    {"trie", "zero_length_sequences", test_zero_length_sequences},
    {"trie", "one_sequence_is_identity", test_one_sequence_is_identity},
    {"trie", "identical_sequences_share_everything", test_identical_sequences_share_everything},
    {"trie", "prefix_of_another_sequence", test_prefix_of_another_sequence},
    {"trie", "same_token_after_different_prefix_not_merged", test_same_token_after_different_prefix_not_merged},
    {"trie", "same_token_at_different_position_not_merged", test_same_token_at_different_position_not_merged},
    {"trie", "position_ids_not_starting_at_zero", test_position_ids_not_starting_at_zero},
    {"trie", "nothing_shared", test_nothing_shared},
    {"trie", "invalid_input_rejected", test_invalid_input_rejected},
    {"trie", "draw_trie_of_toy_example", test_draw_trie_of_toy_example},
    {"loader", "safetensors_rejections", test_safetensors_rejections},
    {"loader", "safetensors_edge_cases_accepted", test_safetensors_edge_cases_accepted},
    {"loader", "half_formats_decode_exactly", test_half_formats_decode_exactly},
    {"loader", "misaligned_tensor_data_loads_as_aligned", test_misaligned_tensor_data_loads_as_aligned},
    {"loader", "config_parsing", test_config_parsing},
    {"loader", "json_key_holding_nul_is_another_key", test_json_key_holding_nul_is_another_key},
    {"loader", "json_encodings_named", test_json_encodings_named},
    {"loader", "shard_index_names", test_shard_index_names},
    {"loader", "fixture_checkpoints_load", test_fixture_checkpoints_load},
    {"loader", "checkpoint_variants_accepted", test_checkpoint_variants_accepted},
    {"loader", "config_default_head_dim_checked", test_config_default_head_dim_checked},
    {"loader", "config_variants_load_as_transformers_reads_them", test_config_variants_load_as_transformers_reads_them},
    {"loader", "broken_checkpoint_corpus", test_broken_checkpoint_corpus},
    {"loader", "unused_tensors_load_with_one_warning", test_unused_tensors_load_with_one_warning},
    {"loader", "single_file_preferred_over_shard_index", test_single_file_preferred_over_shard_index},
    {"reference", "comparisons_fail_on_nan_and_inf", test_comparisons_fail_on_nan_and_inf},
    {"reference", "reference_matches_transformers", test_reference_matches_transformers},
    {"reference", "radix_and_compact_equal_baseline_table7a", test_reference_radix_equals_baseline_table7a},
    {"reference", "matmul_packed_equals_definition_bit_for_bit", test_matmul_packed_equals_definition_bit_for_bit},
    {"reference", "exp_matches_double_on_every_path", test_exp_matches_double_on_every_path},
    {"reference", "attention_ref_matches_double_every_layout", test_attention_ref_matches_double_every_layout},
    {"reference", "random_model_identical_for_1_and_2_threads", test_random_model_identical_for_1_and_2_threads},
    {"reference", "logits_identical_for_1_and_2_threads_every_mode_and_cpu_path",
     test_logits_identical_for_1_and_2_threads_every_mode_and_cpu_path},
    {"reference", "last_token_logits_and_embeddings", test_last_token_logits_and_embeddings},
    {"reference", "rerank_scores_are_softmax_of_two_logits", test_rerank_scores_are_softmax_of_two_logits},
    {"reference", "forward_fuzz_radix_compact_equal_baseline_equals_double",
     test_forward_fuzz_radix_compact_equal_baseline_equals_double},
    {"reference", "forward_rejects_bad_batches", test_forward_rejects_bad_batches},
    {"reference", "auto_mode_compacts_only_below_threshold", test_auto_mode_compacts_only_below_threshold},
    {"reference", "tokens_file", test_tokens_file},
    {"gpu", "functions_fail_cleanly_without_device", test_gpu_functions_fail_cleanly_without_device},
    {"gpu", "rows_by_index_copies_rows_exactly", test_gpu_rows_by_index},
    {"gpu", "rmsnorm_kernel_matches_reference", test_gpu_rmsnorm},
    {"gpu", "qk_norm_rope_kernel_matches_reference", test_gpu_qk_norm_rope},
    {"gpu", "silu_mul_kernel_matches_reference", test_gpu_silu_mul},
    {"gpu", "gemm_matches_reference", test_gpu_gemm},
    {"gpu", "attention_matches_reference_in_all_index_modes", test_gpu_attention},
    {"gpu", "forward_matches_c_reference", test_gpu_forward_matches_reference},
    {"gpu", "kernels_and_forward_match_reference_on_random_shapes", test_gpu_random_shapes},
    {"gpu", "forward_on_config_variants", test_gpu_forward_on_config_variants},
    {"gpu", "radix_and_compact_match_baseline_table7a", test_gpu_radix_and_compact_match_baseline_table7a},
    {"gpu", "last_only_logits_equal_rows_of_full_logits", test_gpu_last_only_logits_equal_rows_of_full_logits},
    {"gpu", "embed_matches_c_reference", test_gpu_embed_matches_c_reference},
    {"gpu", "forward_is_deterministic", test_gpu_forward_is_deterministic},
    {"gpu", "auto_mode_picks_compact_only_below_threshold", test_gpu_auto_mode_picks_compact_only_below_threshold},
    {"gpu", "forward_rejects_bad_batches", test_gpu_forward_rejects_bad_batches},
    {"gpu", "timers_return_positive_medians", test_gpu_timers_return_positive_medians},
    {"gpu", "flash_attention_matches_reference_in_all_index_modes", test_gpu_flash_attention},
    {"gpu", "flash_attention_matches_naive_at_table4_shape", test_gpu_flash_attention_matches_naive_at_table4_shape},
    {"gpu", "attention_auto_is_flash_for_head_dim_128_naive_on_the_definition_path", test_gpu_attention_choice},
    {"gpu", "flash_attention_bm128_equals_bm64_bit_for_bit", test_gpu_flash_attention_bm128_equals_bm64_bit_for_bit},
    {"gpu", "flash_tile_rule_and_forward_bm128_equals_bm64", test_gpu_flash_tile_rule_and_forward_bm128_equals_bm64},
    {"gpu", "forward_flash_matches_reference_table7", test_gpu_forward_flash_table7},
    {"gpu", "attention_timer_runs_every_layout", test_gpu_attention_timer},
    {"gpu", "prefill_matches_c_reference_on_random_traces", test_gpu_prefill_matches_c_reference_on_random_traces},
    {"gpu", "cli_requests_runs_on_the_gpu", test_gpu_cli_requests_runs_on_the_gpu},
    {"gpu", "generation_within_bf16_budget_of_c_reference", test_gpu_generation_within_bf16_budget_of_c_reference},
    {"gpu", "new_pool_is_nan_over_zeroed_memory", test_gpu_new_pool_is_nan_over_zeroed_memory},
    {"gpu", "kernels_index_rows_past_2_31_elements", test_gpu_kernels_index_rows_past_2_31_elements},
    {"gpu", "device_memory_returns_to_where_it_started", test_gpu_device_memory_returns_to_where_it_started},
    {"gpu", "budget_holds_at_qwen3_4b_depth", test_gpu_budget_holds_at_qwen3_4b_depth},
    {"gpu", "flash_forward_survives_device_reset", test_gpu_flash_forward_survives_device_reset},
    {"cli", "cli", test_cli},
    {"cli", "show_index_prints_toy_example", test_show_index_prints_toy_example},
    {"cli", "cpu_path_choice_and_RADIXMLP_CPU", test_cpu_path_choice_and_env},
    {"cli", "last_only_and_embed", test_cli_last_only_and_embed},
    {"cli", "score_matches_transformers_and_every_mode", test_cli_score_matches_transformers_and_every_mode},
    {"cli", "copies_more_sequences_than_rows", test_cli_copies_more_sequences_than_rows},
    {"cli", "rejects_flags_of_other_actions", test_cli_rejects_flags_of_other_actions},
    {"cli", "checks_output_paths_before_the_work", test_cli_checks_output_paths_first},
    {"cli", "fifo_inputs_are_refused_not_waited_on", test_cli_fifo_inputs_are_refused_not_waited_on},
    {"cli", "docs_commands_write_to_tmp_and_part2_hits", test_docs_commands_write_to_tmp_and_part2_hits},
    {"bench", "table5_csv_has_the_papers_rows", test_bench_table5_csv},
    {"bench", "replot_draws_every_series", test_bench_replot_draws_every_series},
    {"bench", "rejects_bad_arguments", test_bench_rejects_bad_arguments},
    {"bench", "refuses_bad_inputs_flags_and_writes", test_bench_refuses_bad_inputs_flags_and_writes},
    {"bench", "replot_of_papers_table4_draws_only_its_lines", test_bench_replot_of_papers_table4},
    {"cli", "cli_rejects_bad_tokens", test_cli_rejects_bad_tokens},
    {"cli", "nonfinite_weights_and_outputs_fail", test_cli_nonfinite_weights_and_outputs_fail},
    {"cli", "outputs_never_clobber_inputs", test_cli_outputs_never_clobber_inputs},
    {"cli", "write_errors_fail", test_cli_write_errors_fail},
    {"cli", "outputs_all_or_nothing", test_cli_outputs_all_or_nothing},
    {"cli", "config_and_value_messages", test_cli_config_and_value_messages},
    {"cache", "radix_insert_match_split_at_page_boundaries", test_cache_radix_insert_match_split_at_page_boundaries},
    {"cache", "match_capped_at_len_minus_one", test_cache_match_capped_at_len_minus_one},
    {"cache", "model_id_namespaces", test_cache_model_id_namespaces},
    {"cache", "lock_refs_prevent_eviction", test_cache_lock_refs_prevent_eviction},
    {"cache", "eviction_takes_lru_leaf_and_cascades", test_cache_eviction_takes_lru_leaf_and_cascades},
    {"cache", "hash_eviction_orphans_descendants", test_cache_hash_eviction_orphans_descendants},
    {"cache", "request_larger_than_pool_is_an_error", test_cache_request_larger_than_pool_is_an_error},
    {"cache", "random_trace_balances_refs", test_cache_random_trace_balances_refs},
    {"prefill", "keyed_trie_matches_bruteforce_oracle", test_keyed_trie_matches_bruteforce_oracle},
    {"prefill", "equals_full_recomputation_on_random_traces", test_prefill_equals_full_recomputation_on_random_traces},
    {"prefill", "same_suffix_after_same_prefix_merges", test_same_suffix_after_same_prefix_merges},
    {"prefill", "same_suffix_after_different_prefix_not_merged", test_same_suffix_after_different_prefix_not_merged},
    {"prefill", "rejects_bad_inputs", test_prefill_rejects_bad_inputs},
    {"cache", "serve_fuzz_equals_recomputation_without_cache",
     test_cache_serve_fuzz_equals_recomputation_without_cache},
    {"cache", "generation_same_tokens_across_batches_schedules_threads_paths",
     test_generation_same_tokens_across_batches_schedules_threads_paths},
    {"cache", "lpm_window_keeps_decisions", test_lpm_window_keeps_decisions},
    {"cache", "compared_pages_grow_linearly_with_requests", test_cache_compared_pages_grow_linearly_with_requests},
    {"cache", "generation_turn_two_hits_turn_one_generated_tokens",
     test_generation_turn_two_hits_turn_one_generated_tokens},
    {"cache", "cli_generate_matches_transformers_greedy", test_cli_generate_matches_transformers_greedy},
    {"cache", "cli_generate_same_output_with_and_without_cache", test_cli_generate_same_output_with_and_without_cache},
    {"cache", "cli_requests_match_full_recomputation", test_cli_requests_match_full_recomputation},
    {"cache", "cli_requests_rejects_bad_input", test_cli_requests_rejects_bad_input},
    {"cache", "cli_show_cache_draws_splits_and_evictions", test_cli_show_cache_draws_splits_and_evictions},
    {"bench", "prefix_cache_csv_and_errors", test_bench_prefix_cache_csv},
    {"bench", "cpu_table4_quick_rows_and_plot", test_bench_cpu_table4_quick},
    {"bench", "cpu_table2_quick_amdahl_both_ways", test_bench_cpu_table2_quick},
    {"bench", "reranker_cpu_scores_equal_in_every_mode", test_bench_reranker_cpu_scores_equal_in_every_mode},
    {"cli", "omp_num_threads_checked_at_start", test_cli_omp_num_threads_checked_at_start},
    {"bench", "replot_bounds_values_and_reads_a_bom", test_bench_replot_bounds_values_and_reads_a_bom},
    {"cli", "requests_nonfinite_logits_fail_naming_the_line", test_cli_requests_nonfinite_logits_fail_naming_the_line},
    {"cli", "outputs_are_never_stdout", test_cli_outputs_are_never_stdout},
    {"bench", "outputs_are_never_stdout", test_bench_outputs_are_never_stdout},
    {"cli", "exit_status_2_for_arguments_1_for_data", test_cli_exit_status_2_for_arguments_1_for_data},
    {"cli", "eos_ids_as_transformers_generate_takes_them", test_cli_eos_ids_as_transformers_generate_takes_them},
    {"cli", "generation_config_as_transformers_reads_it", test_cli_generation_config_as_transformers},
    {"cli", "refused_turn_keeps_the_others_outputs", test_cli_refused_turn_keeps_the_others_outputs},
    {"bench", "failed_or_interrupted_run_leaves_csv_untouched", test_bench_csv_untouched_by_failed_runs},
};

#ifndef RADIXMLP_FUZZ
/* Does ARG name test t: its group, its name, or group/name as --list prints it? */
static int test_named(const Test *t, const char *arg) {
    size_t g = strlen(t->group);
    return !strcmp(arg, t->group) || !strcmp(arg, t->name) ||
           (!strncmp(arg, t->group, g) && arg[g] == '/' && !strcmp(arg + g + 1, t->name));
}

int main(int argc, char **argv) {
    int n = (int)(sizeof tests / sizeof tests[0]), passed = 0, failed = 0, skipped = 0;
    if (argc == 2 && !strcmp(argv[1], "--help")) {
        printf("usage: test_radixmlp [--list | --help | GROUP|NAME|GROUP/NAME ...]\n"
               "  no argument      run every test; the last line reads \"N passed, N failed, N skipped\"\n"
               "  GROUP|NAME ...   run only these groups or tests (GROUP/NAME as --list prints it, or NAME alone)\n"
               "  --list           print every test as GROUP/NAME, one a line\n"
               "  --help           this text\n"
               "Exit status: 0 all selected tests passed or skipped; 1 a test failed; 2 a wrong command line.\n"
               "GPU tests report themselves skipped without a GPU. RADIXMLP_CPU and OMP_NUM_THREADS choose the C\n"
               "reference's path and threads; RADIXMLP_CLI and RADIXMLP_DEEP: see the tests that read them.\n");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) {      /* every group and test name, one "group/name" a line */
        for (int i = 0; i < n; i++) printf("%s/%s\n", tests[i].group, tests[i].name);
        return 0;
    }
    for (int a = 1; a < argc; a++)
        if (argv[a][0] == '-') {
            fprintf(stderr, "test_radixmlp: %s: %s (see --help)\n", argv[a],
                    !strcmp(argv[a], "--list") ? "--list goes alone" : "no such option");
            return 2;
        }
    for (int a = 1; a < argc; a++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= test_named(&tests[i], argv[a]);
        if (!found) {
            fprintf(stderr, "test_radixmlp: %s: no test or group of that name (see --list)\n", argv[a]);
            return 2;
        }
    }
    if (rx_check_env()) { fprintf(stderr, "test_radixmlp: %s\n", radix_error()); return 2; }
    for (int i = 0; i < n; i++) {
        int selected = argc < 2;
        for (int a = 1; a < argc; a++) selected |= test_named(&tests[i], argv[a]);
        if (!selected) continue;
        printf("%s/%s\n", tests[i].group, tests[i].name);
        fflush(stdout);
        test_failed = test_skipped = 0;
        tests[i].fn();
        if (test_failed) {
            failed++;
            printf("  FAILED\n");
        } else if (test_skipped) skipped++;
        else passed++;
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

#else
/* ---------------------------------------------------------------------------------------------------- fuzzing */
/* libFuzzer entry points (`make fuzz`, docs/fuzzing.md): this file without its main(), RADIXMLP_FUZZ choosing one:
 *   1 rx_parse_safetensors   2 rx_parse_config   3 rx_parse_shard_index   4 radix_index_build
 *   5 the C reference forward (every mode against the baseline and the forward in double)   6 rx_serve
 * Any input must be accepted or rejected cleanly (the sanitizers catch the rest); a rejection must say why; an
 * acceptance must keep its promises, checked with expect(). A failed expect() aborts: libFuzzer reports a crash
 * and saves the input. Seeds: fixtures/fuzz/<target>/. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_end(void) {
    if (test_failed) { fflush(stdout); abort(); }
    return 0;
}

#if RADIXMLP_FUZZ <= 3
/* A file name unique to this input: a parser's message starts with it, so a rejection is seen to say why. */
static const char *fuzz_name(void) {
    static char name[32];
    static unsigned long count;
    snprintf(name, sizeof name, "input-%lu", ++count);
    return name;
}

static int fuzz_done(int rc, const char *name) {
    size_t k = strlen(name);
    expect(rc == 0 || (!strncmp(radix_error(), name, k) && radix_error()[k] == ':'),
           "rejected without its own message (last message: '%s')", radix_error());
    return fuzz_end();
}
#endif

#if RADIXMLP_FUZZ == 1
static volatile uint8_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *name = fuzz_name();
    RxTensor *t;
    int n, rc = rx_parse_safetensors(data, size, name, &t, &n);
    if (rc == 0) {                  /* the tensors, sorted by distinct names, tile the bytes after the header */
        uint64_t hlen = 0, covered = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
        const uint8_t *buf = data + 8 + hlen;
        for (int i = 0; i < n && !test_failed; i++) {
            const uint8_t *p = (const uint8_t *)t[i].data;
            uint64_t numel = 1;
            for (int d = 0; d < t[i].rank; d++) numel *= (uint64_t)t[i].shape[d];
            expect(i == 0 || strcmp(t[i - 1].name, t[i].name) < 0, "names not sorted and distinct at %d", i);
            expect(p >= buf && p + t[i].nbytes <= data + size, "tensor '%s' outside the data", t[i].name);
            expect(t[i].dtype == RX_OTHER_DTYPE || numel * (t[i].dtype == RX_F32 ? 4 : 2) == t[i].nbytes,
                   "tensor '%s': %zu bytes for %llu elements", t[i].name, t[i].nbytes, (unsigned long long)numel);
            if (t[i].nbytes) fuzz_sink ^= p[0] ^ p[t[i].nbytes - 1];   /* AddressSanitizer checks both ends */
            covered += t[i].nbytes;
        }
        expect(test_failed || covered == size - 8 - hlen, "tensors cover %llu of %llu data bytes",
               (unsigned long long)covered, (unsigned long long)(size - 8 - hlen));
        for (int i = 0; i < n; i++) free(t[i].name);
        free(t);
    }
    return fuzz_done(rc, name);
}

#elif RADIXMLP_FUZZ == 2
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *name = fuzz_name();
    Qwen3Config c;
    int rc = rx_parse_config(&c, (const char *)data, size, name);
    if (rc == 0)                    /* every dimension usable, nothing a size computation could overflow on */
        expect(c.vocab_size >= 1 && c.vocab_size <= 1 << 22 && c.hidden_size >= 1 && c.hidden_size <= 1 << 16 &&
               c.intermediate_size >= 1 && c.intermediate_size <= 1 << 18 && c.n_layers >= 1 && c.n_layers <= 1024 &&
               c.n_heads >= 1 && c.n_heads <= 1024 && c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0 &&
               c.head_dim >= 2 && c.head_dim <= 1024 && c.head_dim % 2 == 0 && c.max_position_embeddings >= 1 &&
               c.rope_theta > 1 && c.rope_theta < 1e12 && c.rms_norm_eps > 0 && c.rms_norm_eps < 1,
               "accepted vocab %d hidden %d intermediate %d layers %d heads %d/%d head_dim %d max_pos %d "
               "theta %g eps %g",
               c.vocab_size, c.hidden_size, c.intermediate_size, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
               c.max_position_embeddings, c.rope_theta, c.rms_norm_eps);
    return fuzz_done(rc, name);
}

#elif RADIXMLP_FUZZ == 3
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *name = fuzz_name();
    char **shards;
    int n, rc = rx_parse_shard_index((const char *)data, size, name, &shards, &n);
    if (rc == 0) {                  /* distinct plain file names in the model folder */
        expect(n >= 1, "accepted an index with no shard");
        for (int i = 0; i < n; i++) {
            const char *s = shards[i];
            expect(s[0] && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, ".."),
                   "accepted the shard name \"%s\"", s);
            for (int k = 0; k < i; k++) expect(strcmp(shards[k], s) != 0, "shard \"%s\" listed twice", s);
        }
        for (int i = 0; i < n; i++) free(shards[i]);
        free(shards);
    }
    return fuzz_done(rc, name);
}

#elif RADIXMLP_FUZZ == 4
/* Bytes -> a ragged batch: [bad][kind][n_seqs][cu_seqlens[0] if bad & 2][one length per sequence][tokens...], zeros
 * past the end. bad >= 192 makes it invalid on purpose, as radix_index_build must reject: n_seqs < 0 (bit 0),
 * cu_seqlens[0] != 0 (1), cu_seqlens stepping back (2), NULL cu_seqlens (3), input_ids (4) or position_ids (5).
 * kind: token ids from a vocabulary of 1..8 (bits 0-2; small, so prefixes are shared) or raw int32 (bit 3);
 * positions 0..L-1 (bits 4-5 = 0), shifted per sequence (1), random 0..3 (2) or raw int32 (3); bit 6: root keys
 * (Part II's cached-prefix keys, radix_index_build_keyed) from -1..2, one byte per sequence after the tokens. */

static int32_t fuzz_i32(FuzzIn *in) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v = v << 8 | (uint32_t)fuzz_byte(in);
    return (int32_t)v;
}

/* What a successful build promises: gather strictly increasing into [0, N), scatter into [0, N'), each maps the other
 * back; and for small batches, equality with the brute-force oracle. */
static void check_index(const RadixIndex *ix, const RxBatch *b, const int32_t *root_key) {
    int n = b->n_tokens, nc = ix->n_compact;
    expect(ix->n_tokens == n && (n ? nc >= 1 && nc <= n : nc == 0),
           "N = %d, N' = %d for %d tokens", ix->n_tokens, nc, n);
    for (int c = 0; c < nc && !test_failed; c++)
        expect(ix->gather[c] >= 0 && ix->gather[c] < n && (c == 0 || ix->gather[c - 1] < ix->gather[c]) &&
               ix->scatter[ix->gather[c]] == c, "gather[%d] = %d: out of order, or scatter does not map it back",
               c, ix->gather[c]);
    for (int i = 0; i < n && !test_failed; i++)
        expect(ix->scatter[i] >= 0 && ix->scatter[i] < nc,
               "scatter[%d] = %d is outside [0, %d)", i, ix->scatter[i], nc);
    if (!test_failed && n <= 64) check_against_keyed_oracle(ix, b, root_key, "fuzz batch");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    FuzzIn in = {data, data + size};
    int bad = fuzz_byte(&in), kind = fuzz_byte(&in), n_seqs = fuzz_byte(&in) % 17;
    bad = bad >= 192 ? bad : 0;
    if (bad & 1) n_seqs = -1 - n_seqs;
    int32_t cu[18] = {bad & 2 ? 1 + fuzz_byte(&in) % 3 : 0};
    int valid = n_seqs == 0 || (n_seqs > 0 && !(bad & 8) && cu[0] == 0), n_alloc = cu[0];
    for (int s = 0; s < n_seqs; s++) {
        int len = fuzz_byte(&in), step = bad & 4 && len & 128 ? -1 - (len & 3) : len & 31;
        cu[s + 1] = cu[s] + step;
        valid &= step >= 0;
        n_alloc = cu[s + 1] > n_alloc ? cu[s + 1] : n_alloc;
    }
    int n = n_seqs > 0 ? cu[n_seqs] : 0;
    valid &= n == 0 || !(bad & 48);
    /* exactly as large as the batch claims, so that AddressSanitizer sees any read past it */
    int32_t *ids = (int32_t *)calloc((size_t)n_alloc, 4), *pos = (int32_t *)calloc((size_t)n_alloc, 4);
    for (int s = 0; s < n_seqs; s++) {
        int shift = (kind >> 4 & 3) == 1 ? fuzz_byte(&in) : 0;
        for (int i = cu[s] > 0 ? cu[s] : 0; i < cu[s + 1]; i++) {
            ids[i] = kind & 8 ? fuzz_i32(&in) : fuzz_byte(&in) % (1 + (kind & 7));
            pos[i] = (kind >> 4 & 3) == 2 ? fuzz_byte(&in) % 4
                   : (kind >> 4 & 3) == 3 ? fuzz_i32(&in)
                                          : i - cu[s] + shift;
        }
    }
    int32_t key[17];
    for (int s = 0; s < n_seqs && s < 17; s++) key[s] = fuzz_byte(&in) % 4 - 1;
    RadixIndex ix;
    int rc = radix_index_build_keyed(&ix, bad & 16 ? NULL : ids, bad & 32 ? NULL : pos, bad & 8 ? NULL : cu, n_seqs,
                                     kind & 64 ? key : NULL);
    expect((rc == 0) == valid, "%s a%s batch: %s", rc ? "rejected" : "accepted", valid ? " valid" : "n invalid",
           rc ? radix_error() : "");
    if (rc) {
        expect(!ix.gather && !ix.scatter && !ix.n_tokens && !ix.n_compact, "a failed build left the index set");
    } else if (!test_failed) {
        RxBatch b = {n_seqs, n, ids, pos, cu};
        check_index(&ix, &b, kind & 64 ? key : NULL);
        radix_draw_trie(devnull, &ix, ids, pos, cu, n_seqs);
        const char *path0 = rx_cpu_path(NULL);             /* the trie's refinements change nothing: the definition */
        rx_cpu_path("definition");                          /* path (Algorithm 2's scan alone) gives the same maps */
        RadixIndex d;
        int rd = radix_index_build_keyed(&d, ids, pos, cu, n_seqs, kind & 64 ? key : NULL);
        rx_cpu_path(path0);
        expect(rd == 0 && d.n_compact == ix.n_compact &&
               (n == 0 || (!memcmp(d.gather, ix.gather, (size_t)ix.n_compact * 4) &&
                           !memcmp(d.scatter, ix.scatter, (size_t)n * 4))),
               "the definition path's trie differs from the %s path's", path0);
        radix_index_free(&d);
    }
    radix_index_free(&ix);
    free(ids); free(pos);
    return fuzz_end();
}

#elif RADIXMLP_FUZZ == 5
/* Bytes -> a random tiny model and batch (fwd_case_draw), checked as the seeded driver checks its cases
 * (fwd_case_check): radix and compact equal the baseline bit for bit, the baseline near the forward in double. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *paths[RX_PATHS];
    static char list[RX_LIST];
    static int n_paths;
    if (!n_paths) n_paths = cpu_paths(paths, list);
    FuzzIn in = {data, data + size};
    FwdCase fc;
    FwdStats st = {0};
    fwd_case_draw(&in, &fc, n_paths);
    fwd_case_check(&fc, paths, &st);
    return fuzz_end();
}

#elif RADIXMLP_FUZZ == 6
/* Bytes -> a request trace (srv_case_draw), served and checked as the seeded driver checks its traces
 * (srv_case_check): each request's logits equal its own forward without the cache, bit for bit; no page leaks. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Qwen3Model m;
    static int ready;
    if (!ready) {
        Qwen3Config cfg = tiny_config();
        if (qwen3_random(&m, &cfg, 5)) { fprintf(stderr, "qwen3_random: %s\n", radix_error()); abort(); }
        ready = 1;
    }
    FuzzIn in = {data, data + size};
    SrvCase sc;
    SrvStats st = {0};
    srv_case_draw(&in, &sc, m.cfg.vocab_size);
    srv_case_check(&m, &sc, &st);
    return fuzz_end();
}
#endif
#endif /* RADIXMLP_FUZZ */

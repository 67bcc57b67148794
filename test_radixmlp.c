/* test_radixmlp.c - the specification of radixmlp, as tests.
 *
 *   ./test_radixmlp              every test
 *   ./test_radixmlp trie loader  the tests of these groups (or names): trie, loader, reference, gpu, cli, bench
 *
 * Each test prints what it compared. The last line is "N passed, N failed, N skipped"; the exit code is non-zero
 * on any failure. GPU tests report themselves skipped, with the reason, where there is no CUDA device.
 * Fixtures (tiny Qwen3 checkpoints and transformers' logits) are read from $RADIXMLP_FIXTURES or ./fixtures. */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("    ");
    vprintf(fmt, ap);
    printf("\n");
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

static float *rand_floats(size_t n, float lo, float hi, uint64_t *rng) {
    float *x = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; x && i < n; i++) x[i] = lo + (hi - lo) * (float)((rng_next(rng) >> 40) * 0x1.0p-24);
    return x;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static double mean_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d += fabs((double)a[i] - b[i]);
    return n ? d / n : 0;
}

static double max_abs(const float *a, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i]));
    return d;
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
 * (token, position) histories, from the start of their sequences, are equal. */
static void check_against_oracle(const RadixIndex *ix, const RxBatch *b, const char *what) {
    int n = b->n_tokens, bad = 0;
    int *start = (int *)malloc(sizeof(int) * (size_t)(n + 1));
    for (int s = 0; s < b->n_seqs; s++)
        for (int i = b->cu_seqlens[s]; i < b->cu_seqlens[s + 1]; i++) start[i] = b->cu_seqlens[s];
    expect(ix->n_tokens == n, "%s: n_tokens %d, expected %d", what, ix->n_tokens, n);
    int classes = 0;
    for (int i = 0; i < n && !bad; i++) {
        int first = 1;                                  /* is i the first token with its history? */
        for (int j = 0; j < n && !bad; j++) {
            int li = i - start[i], lj = j - start[j], same = li == lj;
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
    if (!bad) expect(ix->n_compact == classes, "%s: N' = %d, the oracle finds %d distinct histories", what, ix->n_compact,
                     classes);
    free(start);
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
    expect(ix.n_tokens == 6 && !memcmp(ix.scatter, scatter, sizeof scatter), "scatter differs from the paper's [0,1,2,0,1,3]");
    note("gather = [%d,%d,%d,%d], scatter = [%d,%d,%d,%d,%d,%d]", ix.gather[0], ix.gather[1], ix.gather[2],
         ix.gather[3], ix.scatter[0], ix.scatter[1], ix.scatter[2], ix.scatter[3], ix.scatter[4], ix.scatter[5]);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

static void test_random_batches_match_bruteforce_oracle(void) {
    uint64_t rng = 1234;
    int batches = 3000;
    long tokens = 0, compact = 0;
    for (int t = 0; t < batches && !test_failed; t++) {
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
        RadixIndex ix;
        char what[64];
        snprintf(what, sizeof what, "random batch %d", t);
        if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, n_seqs)) {
            expect(0, "%s: %s", what, radix_error());
        } else {
            check_against_oracle(&ix, &b, what);
            tokens += ix.n_tokens; compact += ix.n_compact;
            radix_index_free(&ix);
        }
        rx_batch_free(&b);
    }
    note("%d random batches, %ld tokens -> %ld compact rows (overall gamma %.2f), all equal to the oracle",
         batches, tokens, compact, tokens ? (double)compact / tokens : 0);
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
        {"input_ids NULL", NULL, pos, cu, 2, "input_ids or position_ids is NULL"},
        {"position_ids NULL", ids, NULL, cu, 2, "input_ids or position_ids is NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RadixIndex ix;
        int rc = radix_index_build(&ix, cases[i].ids, cases[i].pos, cases[i].cu, cases[i].n_seqs);
        expect(rc != 0 && strstr(radix_error(), cases[i].msg), "%s: rc %d, message '%s'", cases[i].what, rc,
               radix_error());
        expect(!ix.gather && !ix.scatter && !ix.n_tokens, "%s: a failed build must leave the index empty", cases[i].what);
        note("%-22s -> %s", cases[i].what, radix_error());
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
                            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate tensor 'a'"},
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
        note("zero-sized, rank-0 and I64 tensors parsed; data pointers inside the buffer");
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
    note("F16 and BF16: 7 bit patterns each (normal, negative, max, subnormal, inf, 1/3, -0) decode exactly");
}

static void test_config_parsing(void) {
    Qwen3Config c;
    const char *good = "{\"vocab_size\":151936,\"hidden_size\":1024,\"intermediate_size\":3072,\"num_hidden_layers\":28,"
                       "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"head_dim\":128,\"rms_norm_eps\":1e-06,"
                       "\"max_position_embeddings\":40960,\"tie_word_embeddings\":true,\"rope_scaling\":null,"
                       "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1000000.0},\"architectures\":[\"Qwen3ForCausalLM\"]}";
    expect(rx_parse_config(&c, good, strlen(good), "config.json") == 0, "Qwen3-0.6B config rejected: %s", radix_error());
    expect(c.head_dim == 128 && c.n_kv_heads == 8 && c.rope_theta == 1e6 && c.tie_word_embeddings &&
           c.max_position_embeddings == 40960, "Qwen3-0.6B config misread (head_dim %d, theta %g)", c.head_dim, c.rope_theta);
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
        {"sliding window", "\"rope_scaling\":null", "\"use_sliding_window\":true", "sliding"},
        {"theta zero", "\"rope_theta\":1000000.0", "\"rope_theta\":0", "rope_theta"},
        {"tie not a bool", "\"tie_word_embeddings\":true", "\"tie_word_embeddings\":\"yes\"", "true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[1024];
        const char *at = strstr(good, cases[i].from);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - good), good, cases[i].to, at + strlen(cases[i].from));
        int rc = rx_parse_config(&c, buf, strlen(buf), "config.json");
        expect(rc != 0 && strstr(radix_error(), cases[i].msg), "%s: rc %d, message '%s'", cases[i].what, rc, radix_error());
        note("%-28s -> %s", cases[i].what, radix_error());
    }
    const char *top = "{\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":2,\"rope_theta\":500000}";
    expect(rx_parse_config(&c, top, strlen(top), "config.json") == 0 && c.rope_theta == 5e5 && c.head_dim == 4 &&
           c.n_kv_heads == 2, "top-level rope_theta and HF defaults (head_dim = hidden/heads, kv = heads) not applied");
}

static void test_shard_index_names(void) {
    const char *bad[] = {"../x.safetensors", "/abs.safetensors", "sub/x.safetensors", "..", "", "a\\\\b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[256];
        char **shards;
        int n;
        snprintf(buf, sizeof buf, "{\"metadata\":{\"total_size\":4},\"weight_map\":{\"w\":\"%s\"}}", bad[i]);
        int rc = rx_parse_shard_index(buf, strlen(buf), "index.json", &shards, &n);
        expect(rc != 0 && strstr(radix_error(), "not a plain file name"), "shard \"%s\": rc %d, '%s'", bad[i], rc, radix_error());
        note("shard name %-20s -> %s", bad[i], radix_error());
    }
    const char *good = "{\"weight_map\":{\"a\":\"m-1.safetensors\",\"b\":\"m-2.safetensors\",\"c\":\"m-1.safetensors\"}}";
    char **shards;
    int n;
    expect(rx_parse_shard_index(good, strlen(good), "index.json", &shards, &n) == 0 && n == 2, "good index: %s", radix_error());
    for (int i = 0; i < n; i++) free(shards[i]);
    free(shards);
    const char *none = "{\"metadata\":{}}";
    expect(rx_parse_shard_index(none, strlen(none), "index.json", &shards, &n) != 0, "index without weight_map accepted");
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

static int have_fixtures(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/tiny-tied/config.json", fixtures());
    if (access(p, R_OK) == 0) return 1;
    expect(0, "fixtures not found at %s (set RADIXMLP_FIXTURES or run from the repository root)", fixtures());
    return 0;
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
    /* tied although the checkpoint stores lm_head.weight: the head is the embedding */
    d = copy_fixture("tiny-untied");
    edit_file(d, "config.json", "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    expect(qwen3_load(&m, d) == 0, "tied with lm_head present rejected: %s", radix_error());
    if (!test_failed) { expect(m.lm_head == m.embed, "tied model must use the embedding as head"); qwen3_free(&m); }
    remove_dir(d);
}

/* ------------------------------------------------------------------------------------------- the C reference */
static void test_reference_matches_transformers(void) {
    /* transformers' eager fp32 forward (fixtures/make_fixtures.py) vs ours: the two sum in different orders, so
     * they agree to fp32 rounding, not bit for bit. Tolerance: max|ours - hf| / max|hf| <= 1e-4. */
    if (!have_fixtures()) return;
    const char *models[] = {"tiny-tied", "tiny-untied", "tiny-bf16"}, *batches[] = {"single", "shared_prefix", "mixed"};
    for (int mi = 0; mi < 3; mi++) {
        char p[512];
        Qwen3Model m;
        snprintf(p, sizeof p, "%s/%s", fixtures(), models[mi]);
        if (qwen3_load(&m, p)) { expect(0, "%s: %s", models[mi], radix_error()); continue; }
        for (int bi = 0; bi < 3; bi++) {
            RxBatch b;
            size_t len;
            snprintf(p, sizeof p, "%s/batches/%s.txt", fixtures(), batches[bi]);
            if (rx_batch_read(&b, p)) { expect(0, "%s", radix_error()); continue; }
            snprintf(p, sizeof p, "%s/logits/%s-%s.f32", fixtures(), models[mi], batches[bi]);
            float *hf = (float *)read_file(p, &len);
            size_t n = (size_t)b.n_tokens * m.cfg.vocab_size;
            expect(hf && len == n * sizeof(float), "%s: missing or not [%d, %d] float32", p, b.n_tokens, m.cfg.vocab_size);
            float *ours = (float *)malloc(n * sizeof(float)), *other = (float *)malloc(n * sizeof(float));
            if (hf && len == n * sizeof(float) && qwen3_forward_ref(&m, &b, RX_BASELINE, ours) == 0) {
                double rel = max_abs_diff(ours, hf, n) / max_abs(hf, n);
                expect(rel <= 1e-4, "%s x %s: relative error %.2e > 1e-4", models[mi], batches[bi], rel);
                for (int mode = RX_RADIX; mode <= RX_COMPACT; mode++) {
                    expect(qwen3_forward_ref(&m, &b, (RxMode)mode, other) == 0, "%s", radix_error());
                    expect(max_abs_diff(other, ours, n) == 0, "%s x %s: %s differs from baseline by %g", models[mi],
                           batches[bi], rx_mode_name((RxMode)mode), max_abs_diff(other, ours, n));
                }
                note("%-11s x %-13s N=%2d  max|ours - transformers| / max|transformers| = %.2e (tol 1e-4); "
                     "radix, compact == baseline", models[mi], batches[bi], b.n_tokens, rel);
            } else if (hf && len == n * sizeof(float)) {
                expect(0, "forward failed: %s", radix_error());
            }
            free(hf); free(ours); free(other);
            rx_batch_free(&b);
        }
        qwen3_free(&m);
    }
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
    Qwen3Config c = {512, 64, 128, 2, 4, 2, 32, 128, 1e6, 1e-6, 1};
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
            expect(rmax == 0 && cmax == 0, "%s: radix %g, compact %g away from baseline", table7a[p].name, rmax, cmax);
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

static void test_forward_rejects_bad_batches(void) {
    Qwen3Config cfg = tiny_config();
    Qwen3Model m;
    if (qwen3_random(&m, &cfg, 3)) { expect(0, "%s", radix_error()); return; }
    int lens[] = {3};
    int32_t ids[] = {1, 512, 2}, pos[] = {0, 1, 128};
    float *out = (float *)malloc(3 * 512 * sizeof(float));
    RxBatch b = batch_of(1, lens, ids, NULL);
    expect(qwen3_forward_ref(&m, &b, RX_BASELINE, out) != 0 && strstr(radix_error(), "outside the vocabulary"),
           "token id 512 with vocab 512: '%s'", radix_error());
    note("token id = vocab  -> %s", radix_error());
    b.input_ids[1] = 5;
    memcpy(b.position_ids, pos, sizeof pos);
    expect(qwen3_forward_ref(&m, &b, RX_RADIX, out) != 0 && strstr(radix_error(), "max_position_embeddings"),
           "position 128 with max 128: '%s'", radix_error());
    note("position = max    -> %s", radix_error());
    free(out);
    rx_batch_free(&b);
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
    note("threshold %.2f: N'/N = 0.94 -> compact, 0.95 -> baseline", RX_AUTO_THRESHOLD);
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
            note("%-18s -> %s", cases[i].msg, radix_error());
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

/* The whole forward in bf16 against the fp32 reference: every weight is rounded once, and every activation is
 * rounded after each of ~15 ops per layer (2 norms, 3 projections, q/k norm and RoPE, attention, o_proj, 2 residual
 * adds, gate, up, silu*up, down) and 3 at the end (final norm, lm_head). Independent roundings add in quadrature:
 * with a rounding error of standard deviation 2^-8/sqrt(3) ~ 0.0023 of the value, sqrt(2 * 15 + 3) * 0.0023 ~ 0.013
 * of a typical value for this 2-layer model. max|diff| / max|ref| compares two tails: we expect ~1e-2, allow 2e-2. */
#define FORWARD_TOL 2e-2

static void round_to_bf16(float *x, size_t n) {   /* in place, to nearest even, like the upload (inputs are finite) */
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&x[i], &u, sizeof u);
    }
}

static float *floats(size_t n) { return (float *)malloc(n * sizeof(float)); }

/* rc is the GPU call's result; passes when it succeeded and max|got - ref| <= tol_rel * max|ref|. */
static void expect_close(const char *what, int rc, const float *got, const float *ref, size_t n, double tol_rel) {
    expect(rc == 0, "%s: the GPU call failed: %s", what, radix_error());
    if (rc != 0) return;
    double d = max_abs_diff(got, ref, n), tol = tol_rel * max_abs(ref, n);
    note("%-58s max|diff| %.3g  tol %.3g", what, d, tol);
    expect(d <= tol, "%s: max|diff| %.3g > tol %.3g", what, d, tol);
}

static void test_gpu_rows_by_index(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    /* {rows_in, rows_out, dim}: a single row; 257 rows out of 3 (repeated indices, as a scatter has); dim 1001 makes
     * rows of 2002 and 4004 bytes, not multiples of 16, which take the 2-byte path instead of the 16-byte one */
    static const int shapes[][3] = {{1, 1, 8}, {3, 257, 1000}, {257, 3, 72}, {5, 9, 1001}};
    uint64_t rng = 11;
    for (int c = 0; c < 4; c++)
        for (int elem = 2; elem <= 4; elem += 2) {
            int ri = shapes[c][0], ro = shapes[c][1], dim = shapes[c][2];
            float *in = rand_floats((size_t)ri * dim, -4.0f, 4.0f, &rng), *ref = floats((size_t)ro * dim);
            float *got = floats((size_t)ro * dim);
            int32_t *idx = (int32_t *)malloc((size_t)ro * sizeof(int32_t));
            if (elem == 2) round_to_bf16(in, (size_t)ri * dim);
            for (int r = 0; r < ro; r++) {
                idx[r] = rng_int(&rng, ri);
                memcpy(ref + (size_t)r * dim, in + (size_t)idx[r] * dim, (size_t)dim * sizeof(float));
            }
            char what[96];
            snprintf(what, sizeof what, "rows_by_index %s [%d, %d] -> [%d, %d] (a copy: exact)",
                     elem == 2 ? "bf16" : "fp32", ri, dim, ro, dim);
            int rc = gpu_test_rows_by_index(got, in, idx, ro, ri, dim, elem);
            expect_close(what, rc, got, ref, (size_t)ro * dim, 0.0);
            free(in); free(ref); free(got); free(idx);
        }
}

static void test_gpu_rmsnorm(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int shapes[][2] = {{1, 72}, {3, 1000}, {257, 64}, {2, 4096}, {5, 1001}};   /* {rows, dim} */
    uint64_t rng = 12;
    for (int c = 0; c < 5; c++) {
        int rows = shapes[c][0], dim = shapes[c][1];
        size_t n = (size_t)rows * dim;
        float *x = rand_floats(n, -2.0f, 2.0f, &rng), *w = rand_floats((size_t)dim, 0.5f, 1.5f, &rng);
        float *ref = floats(n), *got = floats(n);
        round_to_bf16(x, n);
        round_to_bf16(w, (size_t)dim);
        rx_rmsnorm_ref(ref, x, w, rows, dim, 1e-6f);
        char what[96];
        snprintf(what, sizeof what, "rmsnorm [%d, %d]", rows, dim);
        /* two roundings, Hugging Face's order: x * rsqrt(...) to bf16, then w * that to bf16 */
        expect_close(what, gpu_test_rmsnorm(got, x, w, rows, dim, 1e-6f), got, ref, n, 3 * BF16_U);
        free(x); free(w); free(ref); free(got);
    }
}

static void test_gpu_qk_norm_rope(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    /* {rows, n_heads, head_dim}; head_dim 72 has 36 rotate-half pairs: some lanes own two, others one */
    static const int shapes[][3] = {{1, 1, 32}, {3, 4, 72}, {257, 2, 128}, {2, 3, 256}};
    uint64_t rng = 13;
    for (int c = 0; c < 4; c++) {
        int rows = shapes[c][0], heads = shapes[c][1], hd = shapes[c][2];
        size_t n = (size_t)rows * heads * hd;
        float *x = rand_floats(n, -2.0f, 2.0f, &rng), *w = rand_floats((size_t)hd, 0.5f, 1.5f, &rng);
        float *ref = floats(n), *got = floats(n);
        int32_t *pos = (int32_t *)malloc((size_t)rows * sizeof(int32_t));
        round_to_bf16(x, n);
        round_to_bf16(w, (size_t)hd);
        for (int r = 0; r < rows; r++) pos[r] = rng_int(&rng, 4096);
        memcpy(ref, x, n * sizeof(float));
        memcpy(got, x, n * sizeof(float));
        rx_qk_norm_rope_ref(ref, w, pos, rows, heads, hd, 1e-6f, 1e6);
        char what[96];
        snprintf(what, sizeof what, "qk_norm_rope [%d, %d heads x %d]", rows, heads, hd);
        /* the norm's two roundings, then the rotation mixes two such values, then one more rounding:
         * (2 sqrt 2 + 1) 2^-8 of the pair's length; the fp32 angle is computed as in the reference */
        expect_close(what, gpu_test_qk_norm_rope(got, w, pos, rows, heads, hd, 1e-6f, 1e6), got, ref, n, 5 * BF16_U);
        free(x); free(w); free(ref); free(got); free(pos);
    }
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
        expect_close(what, gpu_test_silu_mul(got, gate, up, n), got, ref, n, 2 * BF16_U);   /* one rounding */
        free(gate); free(up); free(ref); free(got);
    }
}

static void test_gpu_gemm(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int shapes[][3] = {{1, 64, 64}, {3, 1000, 72}, {257, 72, 1000}, {5, 1024, 3}};   /* rows, in, out */
    uint64_t rng = 15;
    for (int c = 0; c < 4; c++) {
        int rows = shapes[c][0], in = shapes[c][1], out = shapes[c][2];
        float s = 1.0f / sqrtf((float)in);
        float *x = rand_floats((size_t)rows * in, -1.0f, 1.0f, &rng), *w = rand_floats((size_t)out * in, -s, s, &rng);
        float *ref = floats((size_t)rows * out), *got = floats((size_t)rows * out);
        round_to_bf16(x, (size_t)rows * in);
        round_to_bf16(w, (size_t)out * in);
        rx_matmul_ref(ref, x, w, rows, in, out);
        char what[96];
        snprintf(what, sizeof what, "gemm [%d, %d] @ [%d, %d]^T", rows, in, out, in);
        /* one rounding of y; fp32 sums in another order differ by ~in * 2^-24 relative, far below it */
        expect_close(what, gpu_test_gemm(got, x, w, rows, in, out), got, ref, (size_t)rows * out, 2 * BF16_U);
        free(x); free(w); free(ref); free(got);
    }
}

/* Attention in its three index modes on a shared-prefix batch: sequences 0-2 share a 5-token prefix (sequence 2 is
 * the prefix itself), sequence 3 shares nothing. */
static void test_gpu_attention(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int heads[][3] = {{4, 2, 32}, {2, 2, 72}, {8, 1, 128}};   /* n_heads, n_kv, head_dim: GQA MHA MQA */
    int lens[4] = {9, 7, 5, 4};
    int32_t ids[25] = {5, 6, 7, 8, 9, 1, 2, 3, 4,   5, 6, 7, 8, 9, 3, 3,   5, 6, 7, 8, 9,   6, 6, 7, 8};
    RxBatch b = batch_of(4, lens, ids, NULL);
    RadixIndex ix;
    if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs)) {
        expect(0, "radix_index_build: %s", radix_error());
        rx_batch_free(&b);
        return;
    }
    int N = b.n_tokens, Nc = ix.n_compact;
    int32_t *seq_start = (int32_t *)malloc((size_t)N * sizeof(int32_t));
    for (int s = 0; s < b.n_seqs; s++)
        for (int t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; t++) seq_start[t] = b.cu_seqlens[s];
    note("batch: N = %d, N' = %d", N, Nc);
    uint64_t rng = 16;
    for (int c = 0; c < 3; c++) {
        int nh = heads[c][0], nkv = heads[c][1], hd = heads[c][2], qd = nh * hd, kvd = nkv * hd;
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
        int rc = gpu_test_attention(q, k, v, got_n, N, NULL, seq_start, NULL, N, N, nh, nkv, hd);
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
        rc = gpu_test_attention(q, k, v, got_n, N, NULL, seq_start, NULL, N, N, nh, nkv, hd);
        expect_close("attention radix (scattered rows)", rc, got_n, ref_n, nq, 2 * BF16_U);
        /* compact: the N' rows themselves, q_orig = I_gather, kv_row = I_scatter */
        expect(rx_attention_ref(qc, kc, vc, ref_c, Nc, ix.gather, seq_start, ix.scatter, nh, nkv, hd) == 0, "%s",
               radix_error());
        int rc_c = gpu_test_attention(qc, kc, vc, got_c, Nc, ix.gather, seq_start, ix.scatter, N, Nc, nh, nkv, hd);
        expect_close("attention compact (q_orig = I_gather, kv_row = I_scatter)", rc_c, got_c, ref_c, nq_c,
                     2 * BF16_U);
        /* compact is the radix sandwich without the copies: its row j is row I_gather[j] of radix, bit for bit */
        double d = 0.0;
        for (int j = 0; rc == 0 && rc_c == 0 && j < Nc; j++)
            d = fmax(d, max_abs_diff(got_c + (size_t)j * qd, got_n + (size_t)ix.gather[j] * qd, (size_t)qd));
        note("attention compact row j vs radix row I_gather[j]: max|diff| %g (must be 0)", d);
        expect(d == 0.0, "compact attention differs from the gathered radix attention by %g", d);
        free(q); free(k); free(v); free(qc); free(kc); free(vc);
        free(ref_n); free(got_n); free(ref_c); free(got_c);
    }
    free(seq_start);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

/* The whole forward on a tiny random model (head_dim != hidden/heads, GQA), tied and untied, against the C
 * reference, in every mode. */
static void test_gpu_forward_matches_reference(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const RxMode modes[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    for (int tied = 0; tied <= 1; tied++) {
        Qwen3Config cfg = tiny_config();
        cfg.tie_word_embeddings = tied;
        Qwen3Model m;
        GpuModel *g = NULL;
        if (qwen3_random(&m, &cfg, 7 + (uint64_t)tied)) { expect(0, "qwen3_random: %s", radix_error()); return; }
        if (gpu_model_upload(&g, &m)) { expect(0, "gpu_model_upload: %s", radix_error()); qwen3_free(&m); return; }
        RxBatch b = pattern_batch(&table7a[5], cfg.vocab_size, 21);   /* complex_sharing */
        size_t n = (size_t)b.n_tokens * cfg.vocab_size;
        float *ref = floats(n), *got = floats(n);
        int rc_ref = qwen3_forward_ref(&m, &b, RX_BASELINE, ref);
        expect(rc_ref == 0, "qwen3_forward_ref: %s", radix_error());
        for (int k = 0; rc_ref == 0 && k < 3; k++) {
            char what[96];
            snprintf(what, sizeof what, "forward %s, %s, vs the C reference (bf16 budget)", rx_mode_name(modes[k]),
                     tied ? "tied" : "untied");
            expect_close(what, gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 0, got, NULL), got, ref, n, FORWARD_TOL);
        }
        free(ref); free(got);
        rx_batch_free(&b);
        gpu_model_free(g);
        qwen3_free(&m);
    }
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
             gpu_forward(g, &b, RX_RADIX, RX_AUTO_THRESHOLD, 0, radix, &ir) || gpu_forward(g, &b, RX_COMPACT, RX_AUTO_THRESHOLD, 0, comp, &ic);
        expect(rc == 0, "%s: %s", table7a[p].name, radix_error());
        if (rc == 0) {
            double tol = FORWARD_TOL * max_abs(base, n), dr = max_abs_diff(radix, base, n);
            double dc = max_abs_diff(comp, base, n), dcr = max_abs_diff(comp, radix, n);
            note("%-20s %4d %4d   (%.3g, %.3g)%*s(%.3g, %.3g)%*s%.3g", table7a[p].name, b.n_tokens, ir.n_compact, dr,
                 mean_abs_diff(radix, base, n), 8, "", dc, mean_abs_diff(comp, base, n), 8, "", tol);
            expect(ir.n_compact == ix.n_compact && ic.n_compact == ix.n_compact, "%s: N' = %d, %d; the trie has %d",
                   table7a[p].name, ir.n_compact, ic.n_compact, ix.n_compact);
            expect(dr <= tol && dc <= tol, "%s: radix %.3g, compact %.3g from baseline > %.3g", table7a[p].name, dr,
                   dc, tol);
            expect(dcr == 0.0, "%s: compact differs from radix by %g; they must be bit-identical", table7a[p].name,
                   dcr);
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
        int rc = gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 0, a, NULL) || gpu_forward(g, &b, modes[k], RX_AUTO_THRESHOLD, 0, c, NULL);
        expect(rc == 0, "%s: %s", rx_mode_name(modes[k]), radix_error());
        int same = rc == 0 && memcmp(a, c, n * sizeof(float)) == 0;
        note("%-8s the same batch twice: %s", rx_mode_name(modes[k]), same ? "bit-identical" : "DIFFERENT");
        expect(rc != 0 || same, "%s: two runs of the same batch differ", rx_mode_name(modes[k]));
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
        note("rejected: %s", radix_error());
        expect(rc != 0 && radix_error()[0] != '\0', "an invalid batch (case %d) was accepted", c);
        *field = saved;
    }
    rx_batch_free(&b);
    gpu_model_free(g);
}

static void test_gpu_timers_return_positive_medians(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    double t_index = -1.0, t_copy = -1.0, t_gemm = -1.0;
    int rc = gpu_time_index_select(100, 128, 200, 2, 5, &t_index) || gpu_time_copy((size_t)1 << 20, 5, &t_copy) ||
             gpu_time_gemm(64, 72, 1000, 5, &t_gemm);
    note("on %s: index_select %.4f ms, copy of 1 MiB %.4f ms, gemm 64x72x1000 %.4f ms", gpu_device_name(), t_index,
         t_copy, t_gemm);
    expect(rc == 0, "a timer failed: %s", radix_error());
    expect(t_index > 0 && t_copy > 0 && t_gemm > 0, "a median is not positive");
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
    expect(gpu_test_gemm(y, x, x, 1, 4, 1) != 0, "gpu_test_gemm succeeded without a device");
    expect(gpu_test_rmsnorm(y, x, x, 1, 4, 1e-6f) != 0, "gpu_test_rmsnorm succeeded without a device");
    expect(gpu_time_copy(1024, 3, &ms) != 0, "gpu_time_copy succeeded without a device");
    expect(gpu_forward(NULL, &b, RX_BASELINE, RX_AUTO_THRESHOLD, 0, NULL, NULL) != 0, "gpu_forward succeeded without a model");
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

/* The flash kernel in its three index modes on sequences of lengths {1, 15, 16, 17, 63, 64, 65, 129, 300} (partial,
 * exact and one-over tiles of 16 and 64) sharing prefixes p_s in {0, 1, 63, 64, 65, 200}, three of them fully shared
 * (no query rows in compact mode); GQA 4:1, MHA, MQA; q and k in +-2 (softmax spread over many keys) or in +-6
 * (peaky: scores ~ +-12, a few keys carry the weight, so a wrongly masked or missing key shows). */
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
        fully += p == L, wrong += p != want;
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
        int rc = gpu_test_flash_attention(q, k, v, got, b.cu_seqlens, b.cu_seqlens, NULL, n_seqs, N, nh, nkv, hd);
        expect_flash_close(what, rc, got, ref, a_ref, nq);
        /* radix: the compact rows scattered to the N original rows, then the baseline call */
        for (int t = 0; t < N; t++) {
            memcpy(q + (size_t)t * qd, qc + (size_t)ix.scatter[t] * qd, (size_t)qd * sizeof(float));
            memcpy(k + (size_t)t * kvd, kc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
            memcpy(v + (size_t)t * kvd, vc + (size_t)ix.scatter[t] * kvd, (size_t)kvd * sizeof(float));
        }
        attention_ref_and_abs(q, k, v, ref, a_ref, N, NULL, seq_start, NULL, nkn, nh, nkv, hd);
        snprintf(what, sizeof what, "flash radix (%s)", cfg);
        int rc_r = gpu_test_flash_attention(q, k, v, got_r, b.cu_seqlens, b.cu_seqlens, NULL, n_seqs, N, nh, nkv, hd);
        expect_flash_close(what, rc_r, got_r, ref, a_ref, nq);
        /* compact: the N' rows, queries the blocks cu_q, keys through I_scatter */
        attention_ref_and_abs(qc, kc, vc, ref_c, a_ref_c, Nc, ix.gather, seq_start, ix.scatter, nkc, nh, nkv, hd);
        snprintf(what, sizeof what, "flash compact (%s)", cfg);
        int rc_c = gpu_test_flash_attention(qc, kc, vc, got_c, cu_q, b.cu_seqlens, ix.scatter, n_seqs, Nc, nh, nkv,
                                            hd);
        expect_flash_close(what, rc_c, got_c, ref_c, a_ref_c, nqc);
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
        rows[i] = r, orig[i] = ix.gather[r];
        memcpy(qs + (size_t)i * qd, q + (size_t)r * qd, (size_t)qd * sizeof(float));
    }
    int rc = gpu_test_flash_attention(q, k, v, got, cu_q, b.cu_seqlens, ix.scatter, B, Nc, NH, NKV, HD);
    for (int i = 0; rc == 0 && i < SAMPLE; i++)
        memcpy(flash + (size_t)i * qd, got + (size_t)rows[i] * qd, (size_t)qd * sizeof(float));
    attention_ref_and_abs(qs, k, v, ref, a_ref, SAMPLE, orig, seq_start, ix.scatter, nkv, NH, NKV, HD);
    int rc_n = gpu_test_attention(qs, k, v, naive, SAMPLE, orig, seq_start, ix.scatter, N, Nc, NH, NKV, HD);
    expect_flash_close("flash vs the reference, 64 sampled rows", rc, flash, ref, a_ref, ns);
    for (size_t i = 0; i < ns; i++) both[i] = a_ref[i] + fabsf(ref[i]);   /* flash's A + |ref|, naive's |ref| */
    expect_flash_close("flash vs naive, the same rows", rc || rc_n, flash, naive, both, ns);
    free(q); free(k); free(v); free(got); free(qs); free(ref); free(a_ref); free(naive); free(flash); free(both);
    free(seq_start);
    radix_index_free(&ix);
    rx_batch_free(&b);
}

/* bench --attention's timer, on a small batch: every layout with either kernel runs and gives a positive median. */
static void test_gpu_attention_timer(void) {
    if (!gpu_available()) { skip_test(radix_error()); return; }
    static const int spec[][2] = {{70, 0}, {70, 40}, {40, 40}};   /* a shared prefix, and a fully shared sequence */
    static const RxMode layouts[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};
    RxBatch b = shared_prefix_batch(spec, 3, 131);
    for (int k = 0; k < 3; k++)
        for (int naive = 0; naive <= 1; naive++) {
            double ms = -1.0;
            int rc = gpu_time_attention(&b, layouts[k], naive ? RX_ATTN_NAIVE : RX_ATTN_FLASH, 2, 1, 128, 1, &ms);
            note("gpu_time_attention %-8s %s: %.3f ms (the emulator's time)", rx_mode_name(layouts[k]),
                 naive ? "naive" : "flash", ms);
            expect(rc == 0 && ms > 0, "%s, %s: rc %d, %g ms: %s", rx_mode_name(layouts[k]), naive ? "naive" : "flash",
                   rc, ms, radix_error());
        }
    double ms;
    expect(gpu_time_attention(&b, RX_COMPACT, RX_ATTN_FLASH, 2, 1, 64, 1, &ms) != 0 && strstr(radix_error(), "128"),
           "the flash timer accepted head_dim 64");
    rx_batch_free(&b);
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
    free(a); free(f); free(nv);
    rx_batch_free(&b);
    gpu_model_free(g);
    gpu_model_free(h);
}

/* The GPU forward on a head_dim-128 model (so the flash kernel runs) against the C reference in every mode, and the
 * paper's Table 7, forward half, with the naive kernel in the role of the paper's reference (SDPA, no radix): logits
 * (max, mean) |diff| of
 *   (a) the radix/compact toggle under each attention: radix and compact vs baseline of the same kernel
 *   (b) the attention swap without radix: flash baseline vs naive baseline
 *   (c) the attention swap with radix: flash radix (and compact) vs naive baseline, as the paper compares them
 * Each GPU run within FORWARD_TOL of the C reference (the flash kernel adds one bf16 rounding, of P, to the ~33 of
 * the budget); compact == radix bit for bit under each kernel. */
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
            double worst = 0, tol = FORWARD_TOL * max_abs(ref, n);
            for (int f = 0; f < 2; f++)
                for (int k = 0; k < 3; k++) worst = fmax(worst, max_abs_diff(out[f][k], ref, n));
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


static void test_config_default_head_dim_checked(void) {
    /* Found by fuzzing (make fuzz, target config): without "head_dim", HF's default hidden/heads can be 0 (hidden 1,
     * 2 heads), and it used to be accepted unchecked: a model of zero-width heads. */
    const char *c0 = "{\"vocab_size\":8,\"hidden_size\":1,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                     "\"num_attention_heads\":2}";
    Qwen3Config c;
    int rc = rx_parse_config(&c, c0, strlen(c0), "config.json");
    expect(rc != 0 && strstr(radix_error(), "\"head_dim\" is missing and its default, 0, is not in [2, 1024]"),
           "hidden 1, 2 heads, no head_dim: rc %d, head_dim %d, '%s'", rc, c.head_dim, radix_error());
    note("hidden 1, 2 heads, no head_dim -> %s", radix_error());
}

/* ---- a corpus of broken checkpoints: each a copy of a fixture with one corruption, written here, never committed */
typedef enum { EDIT, WRITE, RESIZE, HEADER_LEN, REMOVE, DIRECTORY, NO_READ } Corruption;
typedef struct {
    const char *what, *fixture, *file;
    Corruption how;
    const char *from, *to;  /* EDIT: the first `from` becomes `to` (in a .safetensors file, inside its header);
                               WRITE: the file's new content is `to` */
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
    char *huge = (char *)malloc((1 << 20) + 8);         /* a config.json of 1 MiB + 5 bytes: over read_text's limit */
    memset(huge, ' ', (1 << 20) + 3);
    strcpy(huge + (1 << 20) + 3, "{}");
    const Broken corpus[] = {
        /* safetensors: every rejection of the official reader (QWEN3.md), then ours */
        {"file of 3 bytes", T, ST, WRITE, NULL, "abc", 0, "3 bytes, shorter than the 8-byte"},
        {"empty file", T, ST, WRITE, NULL, "", 0, "0 bytes, shorter than the 8-byte"},
        {"header length over 100,000,000", T, ST, HEADER_LEN, NULL, NULL, 100000000, "exceeds the 100000000-byte limit"},
        {"header length beyond the file", T, ST, HEADER_LEN, NULL, NULL, 1000000, "points beyond the end"},
        {"header length into the JSON", T, ST, HEADER_LEN, NULL, NULL, -1000, "invalid JSON near byte 1472"},
        {"header not UTF-8 (overlong '/')", T, ST, EDIT, "\"pt\"", "\"p\xc0\xaf\"", 0, "header is not valid UTF-8"},
        {"header not JSON", T, ST, EDIT, "\"F32\",\"shape\"", "\"F32\" \"shape\"", 0, "invalid JSON near byte"},
        {"shape not an array", T, ST, EDIT, "[512,64]", "\"512x64\"", 0, "needs \"dtype\", \"shape\" and two"},
        {"three data_offsets", T, ST, EDIT, "[0,131072]", "[0,131072,0]", 0, "needs \"dtype\", \"shape\" and two"},
        {"__metadata__ not strings", T, ST, EDIT, "\"pt\"", "1", 0, "__metadata__ must map strings to strings"},
        {"unknown dtype", T, ST, EDIT, "\"F32\"", "\"F31\"", 0, "unknown dtype \"F31\""},
        {"negative shape entry", T, ST, EDIT, "[512,64]", "[-512,64]", 0, "not a non-negative integer"},
        {"rank 9", T, ST, EDIT, "[512,64]", "[1,1,1,1,1,1,1,512,64]", 0, "rank 9, more than 8"},
        {"shape byte size overflows", T, ST, EDIT, "[512,64]", "[512,64,4294967296,4294967296]", 0, "overflows 64 bits"},
        {"data_offsets overflow", T, ST, EDIT, "[0,131072]", "[0,18446744073709551616]", 0, "not non-negative integers"},
        {"size disagrees with shape", T, ST, EDIT, "[512,64]", "[512,63]", 0, "spans 131072 bytes but its shape"},
        {"end before begin", T, ST, EDIT, "[0,131072]", "[131072,0]", 0, "end 0 before begin 131072"},
        {"gap before a tensor", T, ST, EDIT, "[0,131072]", "[4,131076]", 0, "starts at byte 4 of the data, expected 0 (a gap)"},
        {"overlapping tensors", T, ST, EDIT, "[131072,131328]", "[131068,131324]", 0, "(an overlap)"},
        {"truncated data", T, ST, RESIZE, NULL, NULL, -4, "(truncated file)"},
        {"trailing bytes", T, ST, RESIZE, NULL, NULL, 4, "(trailing bytes)"},
        {"duplicate tensor name", T, ST, EDIT, "\"model.norm.weight\"", "\"model.layers.0.input_layernorm.weight\"", 0,
         "duplicate tensor 'model.layers.0.input_layernorm.weight'"},
        {"dtype I32 (unsupported)", T, ST, EDIT, "\"model.norm.weight\":{\"dtype\":\"F32\"",
         "\"model.norm.weight\":{\"dtype\":\"I32\"", 0, "dtype I32; only F32, F16 and BF16"},
        {"missing tensor", T, ST, EDIT, "\"model.norm.weight\"", "\"model.norx.weight\"", 0, "missing tensor 'model.norm.weight'"},
        /* config.json */
        {"config.json missing", T, CFG, REMOVE, NULL, NULL, 0, "config.json: cannot open: No such file"},
        {"config.json a directory", T, CFG, DIRECTORY, NULL, NULL, 0, "config.json: read error"},
        {"config.json over 1 MiB", T, CFG, WRITE, NULL, huge, 0, "config.json: larger than 1048576 bytes"},
        {"config.json nested 1000 deep", T, CFG, WRITE, NULL, deep_json(), 0, "JSON nested deeper than 64 levels"},
        {"config.json cut short", T, CFG, WRITE, NULL, "{\"vocab_size\": 512,", 0, "invalid JSON near byte 19"},
        {"hidden_size zero", T, CFG, EDIT, "\"hidden_size\": 64", "\"hidden_size\": 0", 0, "\"hidden_size\" must be an integer in [1, 65536]"},
        {"layers negative", T, CFG, EDIT, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": -2", 0, "\"num_hidden_layers\" must be"},
        {"intermediate_size absurd", T, CFG, EDIT, "\"intermediate_size\": 128", "\"intermediate_size\": 1000000000000", 0,
         "\"intermediate_size\" must be an integer in [1, 262144]"},
        {"integer overflows 64 bits", T, CFG, EDIT, "\"max_position_embeddings\": 128",
         "\"max_position_embeddings\": 100000000000000000000000", 0, "\"max_position_embeddings\" must be an integer"},
        {"rope_theta overflows a double", T, CFG, EDIT, "\"rope_theta\": 1000000.0", "\"rope_theta\": 1e999", 0,
         "\"rope_theta\" must be a number in (1, 1e+12)"},
        {"heads not a multiple of kv heads", T, CFG, EDIT, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", 0,
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
        {"vocab disagrees with the embedding", T, CFG, EDIT, "\"vocab_size\": 512", "\"vocab_size\": 600", 0,
         "shape [512, 64] but config.json implies [600, 64]"},
        {"head_dim disagrees with q_proj", T, CFG, EDIT, "\"head_dim\": 32", "\"head_dim\": 16", 0, "but config.json implies"},
        {"untied without lm_head.weight", T, CFG, EDIT, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", 0,
         ": missing tensor 'lm_head.weight'"},
        /* shards and their index */
        {"shard name with ../", U, IDX, EDIT, "\"model-00004", "\"../model-00004", 0, "is not a plain file name"},
        {"shard name absolute", U, IDX, EDIT, "\"model-00004-of-00004.safetensors\"", "\"/etc/passwd\"", 0,
         "\"/etc/passwd\" for tensor 'lm_head.weight' is not a plain file name"},
        {"empty weight_map", U, IDX, WRITE, NULL, "{\"weight_map\": {}}", 0, "needs a non-empty \"weight_map\" object"},
        {"shard missing", U, SHARD, REMOVE, NULL, NULL, 0, "model-00004-of-00004.safetensors: cannot open: No such file"},
        {"shard a directory", U, SHARD, DIRECTORY, NULL, NULL, 0, "model-00004-of-00004.safetensors: not a regular file"},
        {"shard unreadable (mode 000)", U, SHARD, NO_READ, NULL, NULL, 0, "cannot open: Permission denied"},
        {"tensor in two shards", U, SHARD, EDIT, "\"lm_head.weight\"", "\"model.norm.weight\"", 0,
         "tensor 'model.norm.weight' appears in both"},
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
    note("%d broken checkpoints written and rejected with the expected message (%d in the table)", made, n);
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

/* A rejection as the CLI must give it: exit code 1 and exactly one line, "radixmlp: <why>", that contains msg. */
static void expect_one_line_error(const char *what, int rc, const char *out, const char *msg) {
    const char *nl = strchr(out, '\n');
    expect(rc == 1 && !strncmp(out, "radixmlp: ", 10) && nl && !nl[1] && strstr(out, msg),
           "%s: exit %d, want 1 and one line with '%s':\n%s", what, rc, msg, out);
    note("%-28s exit %d, %.*s", what, rc, (int)strcspn(out, "\n"), out);
}

static void test_cli(void) {
    if (!have_cli()) return;
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "%s --check --model %s/tiny-untied", cli(), fixtures());
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0 && strstr(out, "every tensor the config needs is present"), "--check on a good model: rc %d\n%s", rc, out);
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
    const char *bad[] = {"--mode fast", "--model", "--frobnicate", "--tokens x.txt"};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "%s %s", cli(), bad[i]);
        rc = run_cmd(cmd, out, sizeof out);
        expect(rc == 2, "'%s': exit %d, expected 2", cmd, rc);
    }
}

/* -------------------------------------------------------------------------------------------------- the bench */
static void test_bench_table5_csv(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[8192], path[] = "/tmp/radixmlp-t5-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) { expect(0, "mkstemp"); return; }
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "./bench --table 5 --quick --csv %s", path);
    int rc = run_cmd(cmd, out, sizeof out);
    expect(rc == 0, "'%s' exited %d:\n%s", cmd, rc, out);
    size_t len;
    char *csv = (char *)read_file(path, &len);
    int lines = 0, commas0 = -1, ragged = 0, found = 0;
    for (char *line = csv ? strtok(csv, "\n") : NULL; line; line = strtok(NULL, "\n"), lines++) {
        int commas = 0;
        for (char *c = line; *c; c++) commas += *c == ',';
        if (commas0 < 0) commas0 = commas;
        ragged |= commas != commas0;
        int B, L, shared, N, Nc;   /* cpu,configuration,B,L,shared,N,N_compact,... */
        char *f = strchr(line, ',');
        f = f ? strchr(f + 1, ',') : NULL;
        if (f && sscanf(f + 1, "%d,%d,%d,%d,%d", &B, &L, &shared, &N, &Nc) == 5 && B == 32 && L == 512 && shared == 128) {
            /* a shared prefix P and B unique suffixes S: N = B(P+S), N' = P + B*S (the paper's Table 4 caption) */
            expect(N == 32 * 512 && Nc == 128 + 32 * 384, "32x512 ratio 0.25: N = %d, N' = %d, expected %d, %d", N, Nc,
                   32 * 512, 128 + 32 * 384);
            found = 1;
        }
    }
    expect(lines >= 2 && !ragged, "the CSV has %d lines, %s", lines, ragged ? "with ragged rows" : "all of one width");
    expect(found, "no 32 x 512 ratio 0.25 row in the CSV");
    note("bench --table 5 --quick: %d CSV lines of %d fields; 32x512 at 0.25 has N' = P + B*S = 12416", lines, commas0 + 1);
    free(csv);
    unlink(path);
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
        note("replot: %zu-byte SVG, %d series; the 4.00x point lands where the axis says", len, lines);
    }
    free(svg);
    unlink(svg_path);
    snprintf(svg_path, sizeof svg_path, "%s/t4.csv", dir);
    unlink(svg_path);
    rmdir(dir);
}

static void test_bench_rejects_bad_arguments(void) {
    if (access("./bench", X_OK) != 0) { skip_test("./bench is not built (run `make`)"); return; }
    char out[4096];
    const char *bad[] = {"./bench --table 9", "./bench --reps 0", "./bench --frobnicate", "./bench --table",
                         "./bench --attention --table 4"};
    for (int i = 0; i < 5; i++) {
        int rc = run_cmd(bad[i], out, sizeof out);
        expect(rc == 2 && strstr(out, "bench: "), "'%s': exit %d, expected 2 with a message:\n%s", bad[i], rc, out);
    }
    if (!gpu_available()) {
        int rc = run_cmd("./bench --table 4 --quick", out, sizeof out);
        expect(rc == 1 && strstr(out, "needs a CUDA device"), "--table 4 without a GPU: exit %d\n%s", rc, out);
        note("without a GPU: %s", out);
        rc = run_cmd("./bench --attention --quick", out, sizeof out);
        const char *nl = strchr(out, '\n');
        expect(rc == 1 && strstr(out, "--attention needs a CUDA device") && nl && !nl[1],
               "--attention without a GPU: exit %d, expected 1 and one line\n%s", rc, out);
        note("without a GPU: %s", out);
    }
}

static void test_cli_rejects_bad_tokens(void) {
    /* tiny-tied: vocab 512, max_position_embeddings 128; a line of 129 tokens reaches position 128 */
    if (!have_cli()) return;
    char long_line[129 * 2 + 2] = "";
    for (int i = 0; i < 129; i++) strcat(long_line, "7 ");
    strcat(long_line, "\n");
    struct { const char *what, *tokens, *msg; } cases[] = {
        {"token id = vocab size", "1 2 3\n4 512 6\n", "token id 512 at batch position 4 is outside the vocabulary [0, 512)"},
        {"token id beyond int32", "1 99999999999\n", ":1: token id too large"},
        {"negative token id", "1 2\n3 -4\n", ":2: '-' is not part of a token id"},
        {"non-numeric token id", "1 two\n", ":1: 't' is not part of a token id"},
        {"empty line", "1 2\n\n3\n", ":2: empty line"},
        {"empty file", "", "no sequences"},
        {"position 128 of max 128", long_line, "position 128 at batch position 128 is beyond max_position_embeddings 128"},
    };
    char dir[] = "/tmp/radixmlp-cli-XXXXXX";
    if (!mkdtemp(dir)) { expect(0, "mkdtemp"); return; }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024], out[4096];
        write_file(dir, "t.txt", cases[i].tokens, strlen(cases[i].tokens));
        snprintf(cmd, sizeof cmd, "%s --model %s/tiny-tied --tokens %s/t.txt", cli(), fixtures(), dir);
        expect_one_line_error(cases[i].what, run_cmd(cmd, out, sizeof out), out, cases[i].msg);
    }
    remove_dir(dir);
}

/* ------------------------------------------------------------------------------------------------------- main */
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
    {"loader", "config_parsing", test_config_parsing},
    {"loader", "shard_index_names", test_shard_index_names},
    {"loader", "fixture_checkpoints_load", test_fixture_checkpoints_load},
    {"loader", "checkpoint_variants_accepted", test_checkpoint_variants_accepted},
    {"loader", "config_default_head_dim_checked", test_config_default_head_dim_checked},
    {"loader", "broken_checkpoint_corpus", test_broken_checkpoint_corpus},
    {"reference", "reference_matches_transformers", test_reference_matches_transformers},
    {"reference", "radix_and_compact_equal_baseline_table7a", test_reference_radix_equals_baseline_table7a},
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
    {"gpu", "radix_and_compact_match_baseline_table7a", test_gpu_radix_and_compact_match_baseline_table7a},
    {"gpu", "last_only_logits_equal_rows_of_full_logits", test_gpu_last_only_logits_equal_rows_of_full_logits},
    {"gpu", "forward_is_deterministic", test_gpu_forward_is_deterministic},
    {"gpu", "auto_mode_picks_compact_only_below_threshold", test_gpu_auto_mode_picks_compact_only_below_threshold},
    {"gpu", "forward_rejects_bad_batches", test_gpu_forward_rejects_bad_batches},
    {"gpu", "timers_return_positive_medians", test_gpu_timers_return_positive_medians},
    {"gpu", "flash_attention_matches_reference_in_all_index_modes", test_gpu_flash_attention},
    {"gpu", "flash_attention_matches_naive_at_table4_shape", test_gpu_flash_attention_matches_naive_at_table4_shape},
    {"gpu", "attention_auto_takes_flash_only_for_head_dim_128", test_gpu_attention_choice},
    {"gpu", "forward_flash_matches_reference_table7", test_gpu_forward_flash_table7},
    {"gpu", "attention_timer_runs_every_layout", test_gpu_attention_timer},
    {"cli", "cli", test_cli},
    {"bench", "table5_csv_has_the_papers_rows", test_bench_table5_csv},
    {"bench", "replot_draws_every_series", test_bench_replot_draws_every_series},
    {"bench", "rejects_bad_arguments", test_bench_rejects_bad_arguments},
    {"cli", "cli_rejects_bad_tokens", test_cli_rejects_bad_tokens},
};

#ifndef RADIXMLP_FUZZ
int main(int argc, char **argv) {
    int n = (int)(sizeof tests / sizeof tests[0]), passed = 0, failed = 0, skipped = 0, ran = 0;
    for (int i = 0; i < n; i++) {
        int selected = argc < 2;
        for (int a = 1; a < argc; a++) selected |= !strcmp(argv[a], tests[i].group) || !strcmp(argv[a], tests[i].name);
        if (!selected) continue;
        ran++;
        printf("%s/%s\n", tests[i].group, tests[i].name);
        fflush(stdout);
        test_failed = test_skipped = 0;
        tests[i].fn();
        if (test_failed) failed++, printf("  FAILED\n");
        else if (test_skipped) skipped++;
        else passed++;
        fflush(stdout);
    }
    if (!ran) { fprintf(stderr, "test_radixmlp: no test or group named like that\n"); return 2; }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

#else
/* ---------------------------------------------------------------------------------------------------- fuzzing */
/* libFuzzer entry points (`make fuzz`, docs/fuzzing.md): this file without its main(), RADIXMLP_FUZZ choosing one:
 *   1 rx_parse_safetensors   2 rx_parse_config   3 rx_parse_shard_index   4 radix_index_build
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
               "accepted vocab %d hidden %d intermediate %d layers %d heads %d/%d head_dim %d max_pos %d theta %g eps %g",
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
 * positions 0..L-1 (bits 4-5 = 0), shifted per sequence (1), random 0..3 (2) or raw int32 (3). */
typedef struct { const uint8_t *p, *end; } FuzzIn;
static int fuzz_byte(FuzzIn *in) { return in->p < in->end ? *in->p++ : 0; }
static int32_t fuzz_i32(FuzzIn *in) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v = v << 8 | (uint32_t)fuzz_byte(in);
    return (int32_t)v;
}

/* What a successful build promises: gather strictly increasing into [0, N), scatter into [0, N'), each maps the other
 * back; and for small batches, equality with the brute-force oracle. */
static void check_index(const RadixIndex *ix, const RxBatch *b) {
    int n = b->n_tokens, nc = ix->n_compact;
    expect(ix->n_tokens == n && (n ? nc >= 1 && nc <= n : nc == 0), "N = %d, N' = %d for %d tokens", ix->n_tokens, nc, n);
    for (int c = 0; c < nc && !test_failed; c++)
        expect(ix->gather[c] >= 0 && ix->gather[c] < n && (c == 0 || ix->gather[c - 1] < ix->gather[c]) &&
               ix->scatter[ix->gather[c]] == c, "gather[%d] = %d: out of order, or scatter does not map it back",
               c, ix->gather[c]);
    for (int i = 0; i < n && !test_failed; i++)
        expect(ix->scatter[i] >= 0 && ix->scatter[i] < nc, "scatter[%d] = %d is outside [0, %d)", i, ix->scatter[i], nc);
    if (!test_failed && n <= 64) check_against_oracle(ix, b, "fuzz batch");
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
            pos[i] = (kind >> 4 & 3) == 2 ? fuzz_byte(&in) % 4 : (kind >> 4 & 3) == 3 ? fuzz_i32(&in) : i - cu[s] + shift;
        }
    }
    RadixIndex ix;
    int rc = radix_index_build(&ix, bad & 16 ? NULL : ids, bad & 32 ? NULL : pos, bad & 8 ? NULL : cu, n_seqs);
    expect((rc == 0) == valid, "%s a%s batch: %s", rc ? "rejected" : "accepted", valid ? " valid" : "n invalid",
           rc ? radix_error() : "");
    if (rc) {
        expect(!ix.gather && !ix.scatter && !ix.n_tokens && !ix.n_compact, "a failed build left the index set");
    } else if (!test_failed) {
        RxBatch b = {n_seqs, n, ids, pos, cu};
        check_index(&ix, &b);
        radix_draw_trie(devnull, &ix, ids, pos, cu, n_seqs);
    }
    radix_index_free(&ix);
    free(ids); free(pos);
    return fuzz_end();
}
#endif
#endif /* RADIXMLP_FUZZ */

/* bench.c - the paper's benchmarks, measured here and printed beside the paper's own numbers.
 *
 *   ./bench --table 4 [--model 4b] [--quick] [--reps N] [--csv t4.csv] [--svg t4.svg]
 *                       Table 4: forward latency, B=32 sequences of a shared prefix P + a unique suffix S
 *   ./bench --table 2   Table 2: the Amdahl model (f_c, r = N/N') vs the observed speedup, three models
 *   ./bench --table 4 --cpu [--quick] [--csv F] [--svg F]   Table 4 on the CPU: the C reference at Qwen3-0.6B's
 *                       width, 1 layer, B = 8 (first the matmul's GFLOP/s); needs no GPU
 *   ./bench --table 2 --cpu [--quick]   Table 2 on the CPU: f_c from FLOPs and from time, the three widths
 *   ./bench --table 5   Table 5: CPU index construction (radix_index_build); needs no GPU
 *   ./bench --table 6   Table 6: the gather/scatter (index_select) kernel vs a device-to-device copy
 *   ./bench --attention [--model 4b] [--quick]   attention alone at the Table 4 shapes: the flash kernel (query
 *                       tiles of 64 and of 128 rows) and the naive one in the baseline, radix and compact layouts
 *   ./bench --workload reranker    synthetic MS MARCO-shaped reranking batches (Tables 1 and 3, synthetic)
 *   ./bench --workload reranker --cpu [--pairs N]   the same on the C reference at Qwen3-0.6B's width, 1 layer,
 *                       scored as radixmlp --score scores (every mode's scores checked equal); needs no GPU
 *   ./bench --prefix-cache [--gpu] Part II: the KV prefix cache, six radix vs hash scenarios; the C reference (no GPU
 *                                  needed), or gpu_prefill with GPU times
 *   ./bench --replot t4.csv --svg t4.svg    re-plot a recorded Table 4 CSV; needs no GPU
 *
 * How things are measured:
 *   forward     gpu_forward(last_only=1, logits=NULL). info.forward_ms is timed with CUDA events inside the
 *               library around the GPU forward; the CPU trie is not in it (the paper builds it asynchronously).
 *               Each mode's warm-up copies its logits back: one NaN or Inf and the configuration is an error.
 *               One warm-up call per mode, then `reps` rounds of baseline, radix, compact in turn; medians.
 *   index       radix_index_build on one CPU thread, CLOCK_MONOTONIC, median and mean over >= 0.2 s.
 *   kernels     gpu_rows_by_index, gpu_copy, gpu_gemm on random device buffers (uploaded from the host, never
 *               zero), timed by gpu_time_median: CUDA events, median after a warm-up.
 *   --cpu       qwen3_forward_ref_last, wall time (CLOCK_MONOTONIC) and process CPU time per forward, each mode
 *               the median of `reps` forwards after one untimed forward of its own, whose logits are checked
 *               (finite; radix and compact == baseline bit for bit).
 * Token ids are random in [1, vocab) from fixed seeds; weights are random bf16 (gpu_model_random: qwen3_random's
 * model, rounded). That model is made on the host in fp32 first: 4 bytes of host memory per parameter (computed,
 * not measured: ~33 GB for the 8B configuration, untied, while it is uploaded).
 * Every number taken from the paper sits in a column whose name starts with "paper".
 * Results go to stdout as markdown (and --csv FILE), progress to stderr.                                    */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, popen */
#endif
#include "radixmlp.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the paper's numbers ------------------------------------------------------------------------------------- */
/* H100 80GB, fp16, candle-cuda / TEI; Table 5: the Rust crate on "a standard Intel server CPU". */
typedef struct { int P, S; double radix_ms, base_ms, speedup; } PaperT4;
static const PaperT4 PAPER_T4[] = {   /* Qwen3-4B, B = 32 */
    {1, 256, 188.4, 184.0, 0.98},    {16, 256, 190.5, 191.6, 1.01},   {32, 256, 192.4, 200.9, 1.04},
    {128, 256, 190.5, 261.6, 1.37},  {256, 256, 202.4, 344.8, 1.70},  {512, 256, 218.6, 523.7, 2.40},
    {1024, 256, 263.9, 888.0, 3.36}, {2048, 256, 399.7, 1655.8, 4.14},
    {1, 1024, 742.2, 727.2, 0.98},   {32, 1024, 743.9, 732.0, 0.98},  {128, 1024, 748.0, 792.4, 1.06},
    {256, 1024, 747.5, 885.5, 1.18}, {512, 1024, 780.2, 1074.0, 1.38}, {1024, 1024, 839.8, 1494.0, 1.78},
    {2048, 1024, 1019.4, 2318.1, 2.27},
};
typedef struct { double f_c, predicted, observed, base_ms, radix_ms; } PaperT2;   /* P=2048, S=256, B=32 */
typedef struct { double gamma_a, base_a, radix_a, gamma_b, base_b, radix_b; } PaperT3; /* TEI p50 seconds */
#define PAPER_T1_06B (0.78 / 0.54)   /* Table 1, Qwen3-0.6B: TEI mean latency, base / radix, dataset (b) */

/* ---- the models (docs/qwen3.md) ------------------------------------------------------------------------------ */
/* Qwen3Config field order: vocab, hidden, intermediate, layers, heads, kv heads, head_dim, max positions,
 * rope theta, rms eps, tied embeddings. */
typedef struct { const char *key, *name; Qwen3Config cfg; PaperT2 t2; PaperT3 t3; } ModelSpec;
static const ModelSpec MODELS[3] = {
    {.key = "0.6b",
     .name = "Qwen3-0.6B",
     .cfg = {.vocab_size = 151936, .hidden_size = 1024, .intermediate_size = 3072, .n_layers = 28,
             .n_heads = 16, .n_kv_heads = 8, .head_dim = 128, .max_position_embeddings = 40960,
             .rope_theta = 1e6, .rms_norm_eps = 1e-6, .tie_word_embeddings = 1},
     .t2 = {0.73, 2.68, 2.74, 394, 144},
     .t3 = {0.61, 0.78, 0.55, 0.71, 0.70, 0.57}},
    {.key = "4b",
     .name = "Qwen3-4B",
     .cfg = {.vocab_size = 151936, .hidden_size = 2560, .intermediate_size = 9728, .n_layers = 36,
             .n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .max_position_embeddings = 40960,
             .rope_theta = 1e6, .rms_norm_eps = 1e-6, .tie_word_embeddings = 1},
     .t2 = {0.88, 4.14, 4.14, 1656, 400},
     .t3 = {0.61, 3.65, 2.39, 0.71, 3.33, 2.52}},
    {.key = "8b",
     .name = "Qwen3-8B",
     .cfg = {.vocab_size = 151936, .hidden_size = 4096, .intermediate_size = 12288, .n_layers = 36,
             .n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .max_position_embeddings = 40960,
             .rope_theta = 1e6, .rms_norm_eps = 1e-6, .tie_word_embeddings = 0},
     .t2 = {0.92, 4.82, 4.98, 2866, 576},
     .t3 = {0.61, 5.75, 3.66, 0.71, 5.23, 3.88}},
};
#define VOCAB 151936
#define SEED 20250101u
static const RxMode MODES[3] = {RX_BASELINE, RX_RADIX, RX_COMPACT};

/* ---- small helpers: random ids, medians, the clock, the device line ------------------------------------------ */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int32_t rand_id(uint64_t *s) { return 1 + (int32_t)(splitmix(s) % (VOCAB - 1)); } /* never token 0 */
static int rand_in(uint64_t *s, int lo, int hi) { return lo + (int)(splitmix(s) % (uint64_t)(hi - lo + 1)); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(const double *v, int n)   /* of a copy: v keeps its order */
{
    double *t = malloc(n * sizeof *t), m;
    memcpy(t, v, n * sizeof *t);
    qsort(t, n, sizeof *t, cmp_double);
    m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static double cpu_s(void)   /* CPU time of this process, all its threads, in seconds */
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static double amdahl(double f, double r) { return 1.0 / ((1.0 - f) + f / r); }

/* radixmlp.h does not expose cudaDeviceProp, so the clocks come from nvidia-smi where it is installed. */
static void print_device(void)
{
    char clocks[128] = "";
    FILE *p = popen("nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader 2>/dev/null", "r");
    if (p) {
        if (!fgets(clocks, sizeof clocks, p)) clocks[0] = '\0';
        pclose(p);
    }
    clocks[strcspn(clocks, "\n")] = '\0';
    printf("device: %s; clocks at start (SM, max SM, memory; nvidia-smi): %s\n\n", gpu_device_name(),
           clocks[0] ? clocks : "not available");
}

/* ---- batches ------------------------------------------------------------------------------------------------- */
/* n_seqs sequences = head (the same ids in all) + own[s] ids of their own + tail (the same ids in all). */
static void fill_random(int32_t *v, int n, uint64_t *rng) { for (int i = 0; i < n; i++) v[i] = rand_id(rng); }

/* The first own id differs between all sequences (base + s), so sequences part right after the head and
 * N' = n_head + sum(own + tail) exactly, as in the paper's Table 4. The tail is path-specific, so unshared. */
static int make_batch(RxBatch *b, int n_seqs, const int32_t *head, int n_head, const int *own,
                      const int32_t *tail, int n_tail, uint64_t *rng)
{
    int32_t **seqs = calloc(n_seqs, sizeof *seqs);
    int *lens = calloc(n_seqs, sizeof *lens), rc;
    int32_t base = rand_id(rng);
    for (int s = 0; s < n_seqs; s++) {
        lens[s] = n_head + own[s] + n_tail;
        seqs[s] = malloc((lens[s] + 1) * sizeof **seqs);
        memcpy(seqs[s], head, n_head * sizeof *head);
        fill_random(seqs[s] + n_head, own[s], rng);
        if (own[s] > 0) seqs[s][n_head] = 1 + (base + s) % (VOCAB - 1);
        if (n_tail) memcpy(seqs[s] + n_head + own[s], tail, n_tail * sizeof *tail);
    }
    rc = rx_batch_make(b, (const int32_t *const *)seqs, lens, n_seqs);
    if (rc) fprintf(stderr, "bench: rx_batch_make failed: %s\n", radix_error());
    for (int s = 0; s < n_seqs; s++) free(seqs[s]);
    free(seqs);
    free(lens);
    return rc;
}

/* B sequences of a random shared prefix of `shared` ids and `unique` ids of their own. */
static int make_prefix_batch(RxBatch *b, int n_seqs, int shared, int unique, uint64_t seed)
{
    uint64_t rng = seed;
    int32_t *head = malloc((shared + 1) * sizeof *head);
    int *own = malloc(n_seqs * sizeof *own), rc;
    fill_random(head, shared, &rng);
    for (int s = 0; s < n_seqs; s++) own[s] = unique;
    rc = make_batch(b, n_seqs, head, shared, own, NULL, 0, &rng);
    free(head);
    free(own);
    return rc;
}

/* ---- output: markdown on stdout, the same rows as CSV in --csv ----------------------------------------------- */
#define CELL 64
typedef struct { int n; char c[24][CELL]; } Row;
typedef struct { const char *md, *csv; } Col;   /* the markdown header and the CSV column name */
static FILE *g_csv;                             /* --csv FILE (rx_output_open: replaced if the run succeeds), or NULL */

static void cell(Row *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->c[r->n++], CELL, fmt, ap);
    va_end(ap);
}
static void cell_num(Row *r, const char *fmt, double v) { if (v < 0) cell(r, "-"); else cell(r, fmt, v); }

/* lead_names: columns only the CSV carries (the markdown says them once, above the table), e.g. the device. */
static void table_begin(const char *title, const Col *cols, int n, const char *lead_names)
{
    printf("## %s\n\n|", title);
    for (int i = 0; i < n; i++) printf(" %s |", cols[i].md);
    printf("\n|");
    for (int i = 0; i < n; i++) printf("---|");
    printf("\n");
    if (g_csv) {
        fprintf(g_csv, "%s", lead_names);
        for (int i = 0; i < n; i++) fprintf(g_csv, ",%s", cols[i].csv);
        fprintf(g_csv, "\n");
    }
}
static void table_row(const Row *r, const char *lead)
{
    printf("|");
    for (int i = 0; i < r->n; i++) printf(" %s |", r->c[i]);
    printf("\n");
    fflush(stdout);
    if (g_csv) {
        fprintf(g_csv, "%s", lead);
        for (int i = 0; i < r->n; i++) {   /* "-" (no value) becomes an empty field, a comma a ';' */
            fputc(',', g_csv);
            for (const char *c = strcmp(r->c[i], "-") ? r->c[i] : ""; *c; c++) fputc(*c == ',' ? ';' : *c, g_csv);
        }
        fprintf(g_csv, "\n");
        fflush(g_csv);
    }
}
static void csv_safe(char *dst, size_t n, const char *src)   /* a value for a CSV field: one line, no commas */
{
    snprintf(dst, n, "%s", src);
    dst[strcspn(dst, "\r\n")] = '\0';
    for (char *p = dst; *p; p++) if (*p == ',') *p = ';';
}

/* ---- timing forward passes: baseline, radix and compact on one batch ----------------------------------------- */
/* ms[k]: median info.forward_ms of MODES[k]; *radix: the radix run's info (N and N'). The warm-up of each mode copies
 * its last-token logits [n_seqs, vocab] back and checks them: a forward that produces a NaN or Inf is an error,
 * never a time (the timed rounds copy nothing back). */
static int time_modes(GpuModel *g, const RxBatch *b, int vocab, int reps, double ms[3], GpuRunInfo *radix)
{
    size_t n = (size_t)b->n_seqs * vocab, bad = 0;
    double *t = malloc(3 * reps * sizeof *t);
    float *logits = malloc(n * sizeof *logits);
    GpuRunInfo info;
    int rc = !t || !logits;
    if (rc) fprintf(stderr, "bench: out of host memory for [%d, %d] logits\n", b->n_seqs, vocab);
    for (int r = -1; r < reps && !rc; r++)   /* round -1 is the warm-up: not recorded */
        for (int k = 0; k < 3 && !rc; k++) {
            rc = gpu_forward(g, b, MODES[k], RX_AUTO_THRESHOLD, 1, r < 0 ? logits : NULL, &info) != 0;
            if (rc) fprintf(stderr, "bench: gpu_forward (%s) failed: %s\n", rx_mode_name(MODES[k]), radix_error());
            if (!rc && r < 0) rx_max_abs_diff(logits, NULL, n, &bad);
            if (!rc && r < 0 && bad < n) {
                fprintf(stderr, "bench: the %s forward produced a non-finite logit (%g, sequence %zu, token id %zu): "
                        "not timed\n", rx_mode_name(MODES[k]), logits[bad], bad / vocab, bad % vocab);
                rc = 1;
            }
            if (!rc && r >= 0) t[k * reps + r] = info.forward_ms;
            if (!rc && MODES[k] == RX_RADIX) *radix = info;
        }
    for (int k = 0; k < 3 && !rc; k++) ms[k] = median(t + k * reps, reps);
    free(t);
    free(logits);
    return rc;
}

static int upload(GpuModel **g, const ModelSpec *m)
{
    fprintf(stderr, "bench: generating random %s weights on the host, then uploading them\n", m->name);
    if (gpu_model_random(g, &m->cfg, SEED) == 0) return 0;
    fprintf(stderr, "bench: gpu_model_random(%s) failed: %s\n", m->name, radix_error());
    return 1;
}

/* ---- timing one kernel alone (Tables 2 and 6): random device buffers, gpu_time_median ------------------------ */
typedef struct {
    GpuModel *g;                 /* gemm: the model whose cuBLAS handle runs it (gpu_gemm)                    */
    void *out, *in, *w, *idx;    /* device buffers                                                           */
    int rows, n, k;              /* index_select: rows out; gemm: out [rows, n] = in [rows, k] @ w^T, w [n, k] */
    size_t bytes;                /* index_select: bytes per row; copy: bytes                                 */
} Kernel;
static int run_index_select(void *ctx)
{
    const Kernel *a = ctx;
    return gpu_rows_by_index(a->out, a->in, a->idx, a->rows, a->bytes);
}
static int run_copy(void *ctx)
{
    const Kernel *a = ctx;
    return gpu_copy(a->out, a->in, a->bytes);
}
static int run_gemm(void *ctx)
{
    const Kernel *a = ctx;
    return gpu_gemm(a->g, a->out, a->in, a->w, a->rows, a->k, a->n);
}
static void kernel_free(Kernel *a)
{
    gpu_free(a->out);
    gpu_free(a->in);
    gpu_free(a->w);
    gpu_free(a->idx);
}

/* A device copy of n random values in (-scale, scale), bf16 (elem 2) or fp32 (elem 4); never zero: (k + 0.5) / 2^23 - 1
 * for a 24-bit k is exact in double and at least 2^-24 away from 0. */
static int upload_random(void **dev, size_t n, int elem, float scale, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    int rc;
    if (!x) {
        fprintf(stderr, "bench: out of host memory for %zu random values\n", n);
        return 1;
    }
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)(((splitmix(&seed) >> 40) + 0.5) / 8388608.0 - 1.0);
    rc = elem == 2 ? gpu_upload_bf16(dev, x, n) : gpu_upload(dev, x, n * sizeof *x);
    if (rc) fprintf(stderr, "bench: uploading %zu random values failed: %s\n", n, radix_error());
    free(x);
    return rc;
}

/* index_select (Table 6): out [rows_out, dim] = in [rows_in, dim][idx], in random, idx a fixed pseudo-random sequence;
 * then the roofline, a device-to-device copy of the same bytes (what it wrote, random rows too) into a new buffer. */
static int time_index_select(int rows_in, int dim, int rows_out, int elem, int reps, double *ms, double *copy_ms)
{
    Kernel a = {0}, copy = {0};
    int32_t *idx = malloc(rows_out * sizeof *idx);
    int rc;
    if (!idx) {
        fprintf(stderr, "bench: out of host memory for %d indices\n", rows_out);
        return 1;
    }
    for (int r = 0; r < rows_out; r++) idx[r] = (int32_t)(((uint32_t)r * 2654435761u) % (uint32_t)rows_in);
    a.rows = rows_out;
    a.bytes = (size_t)dim * elem;
    copy.bytes = rows_out * a.bytes;
    rc = upload_random(&a.in, (size_t)rows_in * dim, elem, 1.0f, SEED);
    rc = rc || gpu_upload(&a.idx, idx, rows_out * sizeof *idx) || gpu_upload(&a.out, NULL, copy.bytes) ||
         gpu_time_median(run_index_select, &a, reps, ms);
    copy.in = a.out;
    rc = rc || gpu_upload(&copy.out, NULL, copy.bytes) || gpu_time_median(run_copy, &copy, reps, copy_ms);
    if (rc) fprintf(stderr, "bench: timing index_select %dx%d -> %d rows failed: %s\n", rows_in, dim, rows_out,
                    radix_error());
    free(idx);
    kernel_free(&a);
    gpu_free(copy.out);
    return rc;
}

/* The GEMM of a projection (Table 2): y [m, n] = x [m, k] @ W^T, W [n, k]; x random in +-1, W in +-1/sqrt(k)
 * (nn.Linear's scale), on g's cuBLAS handle, as g's forward runs it. 2mnk FLOPs. */
static int time_gemm(GpuModel *g, int m, int n, int k, int reps, double *ms)
{
    Kernel a = {0};
    int rc;
    a.g = g;
    a.rows = m;
    a.n = n;
    a.k = k;
    rc = upload_random(&a.in, (size_t)m * k, 2, 1.0f, SEED + 1) ||
         upload_random(&a.w, (size_t)n * k, 2, 1.0f / sqrtf((float)k), SEED + 2);
    rc = rc || gpu_upload(&a.out, NULL, (size_t)m * n * 2) || gpu_time_median(run_gemm, &a, reps, ms);
    if (rc) fprintf(stderr, "bench: timing the GEMM [%d, %d] @ [%d, %d]^T failed: %s\n", m, k, n, k, radix_error());
    kernel_free(&a);
    return rc;
}

/* ---- Table 4: speedup over prefix length (Section 4.2), and its SVG plot ------------------------------------- */
typedef struct { int P, S; double radix, compact, paper; } Point;   /* speedups over baseline; paper < 0: none */

static const PaperT4 *paper_t4(int P, int S)
{
    for (size_t i = 0; i < sizeof PAPER_T4 / sizeof *PAPER_T4; i++)
        if (PAPER_T4[i].P == P && PAPER_T4[i].S == S) return &PAPER_T4[i];
    return NULL;
}

static int table4(const ModelSpec *m, int reps, int quick, Point *pts, int *n_pts)
{
    static const int PREFIX[] = {1, 16, 32, 128, 256, 512, 1024, 2048}, QUICK[] = {1, 128, 2048};
    static const int SUFFIX[] = {256, 1024};
    static const Col cols[] = {
        {"P", "P"}, {"S", "S"}, {"N", "N"}, {"N'", "N_compact"}, {"gamma", "gamma"}, {"base ms", "base_ms"},
        {"radix ms", "radix_ms"}, {"compact ms", "compact_ms"}, {"radix x", "radix_x"}, {"compact x", "compact_x"},
        {"radix ktok/s", "radix_ktok_s"}, {"paper radix ms", "paper_radix_ms"},
        {"paper base ms", "paper_base_ms"}, {"paper x", "paper_x"}};
    const int *prefix = quick ? QUICK : PREFIX, n_prefix = quick ? 3 : 8, B = 32;
    char title[160], lead[256], dev[128];
    GpuModel *g;
    if (upload(&g, m)) return 1;
    csv_safe(dev, sizeof dev, gpu_device_name());
    snprintf(lead, sizeof lead, "%s,%s", m->name, dev);
    snprintf(title, sizeof title, "Table 4: %s forward pass, B = %d, shared prefix P + unique suffix S", m->name, B);
    table_begin(title, cols, 14, "model,device");
    *n_pts = 0;
    for (int si = 0; si < 2; si++)
        for (int pi = 0; pi < n_prefix; pi++) {
            int P = prefix[pi], S = SUFFIX[si];
            const PaperT4 *p = paper_t4(P, S);
            double ms[3];
            RxBatch b;
            GpuRunInfo info;
            Row r = {0};
            fprintf(stderr, "bench: table 4, %s, P = %d, S = %d, %d reps\n", m->name, P, S, reps);
            if (make_prefix_batch(&b, B, P, S, SEED + 1000 * P + S)) { gpu_model_free(g); return 1; }
            if (time_modes(g, &b, m->cfg.vocab_size, reps, ms, &info)) {
                rx_batch_free(&b);
                gpu_model_free(g);
                return 1;
            }
            rx_batch_free(&b);
            cell(&r, "%d", P); cell(&r, "%d", S); cell(&r, "%d", info.n_tokens); cell(&r, "%d", info.n_compact);
            cell(&r, "%.3f", (double)info.n_compact / info.n_tokens);
            cell(&r, "%.1f", ms[0]); cell(&r, "%.1f", ms[1]); cell(&r, "%.1f", ms[2]);
            cell(&r, "%.2f", ms[0] / ms[1]); cell(&r, "%.2f", ms[0] / ms[2]);
            cell(&r, "%.0f", info.n_tokens / ms[1]);
            cell_num(&r, "%.1f", p ? p->radix_ms : -1); cell_num(&r, "%.1f", p ? p->base_ms : -1);
            cell_num(&r, "%.2f", p ? p->speedup : -1);
            table_row(&r, lead);
            pts[(*n_pts)++] = (Point){P, S, ms[0] / ms[1], ms[0] / ms[2], p ? p->speedup : -1};
        }
    gpu_model_free(g);
    printf("\nx = baseline ms / mode ms, medians of %d after a warm-up; ktok/s: N original tokens per second, radix.\n"
           "The paper's columns: Qwen3-4B on an H100 with candle-cuda, fp16 (its Table 4)", reps);
    printf("%s\n\n", strcmp(m->key, "4b") ? "; this run's model differs, compare shapes only." : ".");
    return 0;
}

static int cmp_point(const void *a, const void *b)
{
    const Point *x = a, *y = b;
    return x->S != y->S ? (x->S > y->S) - (x->S < y->S) : (x->P > y->P) - (x->P < y->P);
}
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '&') fputs("&amp;", f); else if (*s == '<') fputs("&lt;", f); else fputc(*s, f);
}

static void marker(FILE *f, int kind, double x, double y, const char *color)   /* 0: circle, 1: square */
{
    if (kind == 0) fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", x, y, color);
    if (kind == 1)
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"%s\"/>\n", x - 3.5, y - 3.5, color);
}

/* The y grid's step: the smallest 1, 2 or 5 x 10^k at or above `at_least` (and at least 1), so that a plot up to
 * 10 x at_least draws about ten lines whatever its values. */
static double grid_step(double at_least)
{
    double step = 1;
    for (int k = 0; step < at_least; k++) step *= k % 3 == 1 ? 2.5 : 2;   /* 1, 2, 5, 10, 20, 50, 100, ... */
    return step;
}

/* A line plot of speedup vs P (log2 axis): per suffix length S, radix (circles), compact (squares) and the
 * paper's radix speedups (dashed); a dotted line marks break-even (1x). A series with no values is left out. */
static int write_svg(const char *path, Point *pt, int n, const char *title)
{
    static const char *HUE[4][2] = {{"#1f5fa8", "#5fb4e8"}, {"#c0392b", "#f39c12"}, {"#2e8b57", "#9acd32"},
                                    {"#6a3d9a", "#cab2d6"}};   /* per S: {radix and paper, compact} */
    static const char *NAME[3] = {"radix", "compact", "paper radix"};
    const double W = 820, H = 500, X0 = 80, X1 = 600, Y0 = 60, Y1 = 430;   /* the plot area [X0,X1] x [Y0,Y1] */
    int S[4], nS = 0, lo = 30, hi = 0;
    double ymax = 1.0, step;
    FILE *f = rx_output_open(path);                      /* renamed onto path when the run succeeds */
    if (!f) { fprintf(stderr, "bench: %s\n", radix_error()); return 1; }
    qsort(pt, n, sizeof *pt, cmp_point);
    for (int i = 0; i < n; i++) {
        if (nS == 0 || S[nS - 1] != pt[i].S) { if (nS == 4) { n = i; break; } S[nS++] = pt[i].S; }
        lo = (int)fmin(lo, floor(log2(pt[i].P)));
        hi = (int)fmax(hi, ceil(log2(pt[i].P)));
        ymax = fmax(ymax, fmax(pt[i].radix, fmax(pt[i].compact, pt[i].paper)));
    }
    hi = hi > lo ? hi : lo + 1;
    step = ymax <= 3 ? 0.5 : grid_step(ymax / 10);
    ymax = step * ceil(ymax * 1.05 / step);
#define SX(P) (X0 + (log2(P) - lo) / (hi - lo) * (X1 - X0))
#define SY(v) (Y1 - (v) / ymax * (Y1 - Y0))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
               "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"13\">\n<rect width=\"100%%\" "
               "height=\"100%%\" fill=\"white\"/>\n<text x=\"%g\" y=\"30\" text-anchor=\"middle\" font-size=\"16\" "
               "font-weight=\"bold\">", W, H, W, H, W / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    for (double v = 0; v <= ymax + 1e-9; v += step)   /* y grid and labels */
        fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e3e3e3\"/><text x=\"%g\" y=\"%.1f\" "
                   "text-anchor=\"end\">%g</text>\n", X0, SY(v), X1, SY(v), X0 - 8, SY(v) + 4, v);
    for (int k = lo; k <= hi; k++)                    /* x grid, ticks and labels at powers of two */
        fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#e3e3e3\"/><line x1=\"%.1f\" "
                   "y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"black\"/><text x=\"%.1f\" y=\"%g\" "
                   "text-anchor=\"middle\">%d</text>\n",
                SX(1 << k), Y0, SX(1 << k), Y1, SX(1 << k), Y1, SX(1 << k), Y1 + 5, SX(1 << k), Y1 + 20, 1 << k);
    fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"2 3\"/>\n"
               "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n"
               "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">shared prefix length P (tokens, log2 scale)</text>\n"
               "<text transform=\"translate(28 %g) rotate(-90)\" text-anchor=\"middle\">speedup over baseline (x)"
               "</text>\n", X0, SY(1.0), X1, SY(1.0), X0, Y0, X1 - X0, Y1 - Y0, (X0 + X1) / 2, Y1 + 45, (Y0 + Y1) / 2);
    for (int s = 0, first = 0, last, legend = 0; s < nS; s++, first = last) {
        for (last = first; last < n && pt[last].S == S[s];) last++;
        for (int kind = 0; kind < 3; kind++) {   /* 0 radix, 1 compact, 2 the paper's radix */
            const char *color = HUE[s][kind == 1], *dash = kind == 2 ? " stroke-dasharray=\"7 4\"" : "";
            int any = 0;
            for (int i = first; i < last; i++)
                any |= (kind == 0 ? pt[i].radix : kind == 1 ? pt[i].compact : pt[i].paper) >= 0;
            if (!any) continue;
            double ly = Y0 + 10 + legend++ * 22;   /* this series' legend line */
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color, dash);
            for (int i = first; i < last; i++) {
                double v = kind == 0 ? pt[i].radix : kind == 1 ? pt[i].compact : pt[i].paper;
                if (v >= 0) fprintf(f, "%.1f,%.1f ", SX(pt[i].P), SY(v));
            }
            fprintf(f, "\"/>\n");
            for (int i = first; i < last; i++)
                if ((kind == 0 ? pt[i].radix : pt[i].compact) >= 0)
                    marker(f, kind, SX(pt[i].P), SY(kind == 0 ? pt[i].radix : pt[i].compact), color);
            fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                       "<text x=\"%g\" y=\"%.1f\">%s, S = %d</text>\n",
                    X1 + 20, ly, X1 + 50, ly, color, dash, X1 + 58, ly + 4, NAME[kind], S[s]);
            marker(f, kind, X1 + 35, ly, color);
        }
    }
#undef SX
#undef SY
    fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"11\" fill=\"#555\">dashed: the paper's Table 4 (Qwen3-4B, "
               "H100, fp16)</text>\n</svg>\n", X0, H - 12);
    if (!rx_output_close(f, "bench: wrote %s", path)) return 0;
    fprintf(stderr, "bench: %s\n", radix_error());
    return 1;
}

/* Field `text` of data row `row`, column `col`, as a number in (0, hi] (a whole one if whole): -1 if it is empty,
 * else 0, or 1 after one line that names the row, the column and the value, and says why (`rule`). */
static int csv_number(const char *path, int row, const char *col, const char *text, double hi, int whole,
                      const char *rule, double *v)
{
    char *end;
    *v = -1;
    if (!text[0]) return 0;
    *v = strtod(text, &end);
    if (end != text && !*end && *v > 0 && *v <= hi && (!whole || *v == floor(*v))) return 0;   /* NaN fails too */
    fprintf(stderr, "bench: %s, data row %d: %s is '%s'; %s\n", path, row, col, text, rule);
    return 1;
}

/* Reads the Table 4 CSV that --table 4 --csv wrote (columns found by name), for --replot. Every number is checked
 * against what the plot can show: P and S from 1 to 2^20 tokens, a speedup above 0 and at most 1000 (Table 4's
 * compression N/N' is at most B = 32; above 1000 is a typo or a broken run), else one line naming the row. */
static int read_t4_csv(const char *path, Point *pt, int max, int *n, char *title, size_t title_size)
{
    enum { MODEL, DEVICE, P, S, RADIX, COMPACT, PAPER, N, NCOL };
    static const char *want[NCOL] = {"model", "device", "P", "S", "radix_x", "compact_x", "paper_x", "N"};
    int at[NCOL], nf, header = 1, rc = 1;
    char *text, *line, *next, *field[64];
    size_t len;
    if (rx_read_text(path, 16u << 20, &text, &len)) {   /* a regular file of at most 16 MiB: never a FIFO or device */
        fprintf(stderr, "bench: %s\n", radix_error());
        return 1;
    }
    line = strncmp(text, "\xEF\xBB\xBF", 3) ? text : text + 3;   /* a UTF-8 byte order mark, as spreadsheets save */
    for (*n = 0; line && *n < max; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line[strcspn(line, "\r")] = '\0';
        if (!line[0] || line[0] == '#') continue;   /* blank lines and comments (what the file is, where from) */
        field[0] = line;
        nf = 1;
        for (char *c = line; *c && nf < 64; c++) {
            if (*c == ',') {
                *c = '\0';
                field[nf++] = c + 1;
            }
        }
        if (header) {   /* find the columns by name */
            for (int k = 0; k < NCOL; k++) {
                at[k] = -1;
                for (int i = 0; i < nf; i++) if (!strcmp(field[i], want[k])) at[k] = i;
                if (at[k] < 0 && k >= P && k <= RADIX) {
                    fprintf(stderr, "bench: %s is not a Table 4 CSV (no column '%s')\n", path, want[k]);
                    goto done;
                }
            }
            header = 0;
            continue;
        }
#define FIELD(k) (at[k] >= 0 && at[k] < nf ? field[at[k]] : "")
        double v[NCOL];
        for (int k = P; k < N; k++) {
            const char *rule = k <= S ? "it must be a whole number of tokens from 1 to 1048576"
                                      : "a speedup must be a number above 0 and at most 1000 (empty: none)";
            if (csv_number(path, *n + 1, want[k], FIELD(k), k <= S ? 1 << 20 : 1000, k <= S, rule, &v[k])) goto done;
        }
        pt[*n] = (Point){(int)v[P], (int)v[S], v[RADIX], v[COMPACT], v[PAPER]};
        if (pt[*n].P < 1 || pt[*n].S < 1 || (pt[*n].radix < 0 && pt[*n].paper < 0)) {   /* the paper's: no radix_x */
            fprintf(stderr, "bench: %s, data row %d: no P or S, or neither radix_x nor paper_x\n", path, *n + 1);
            goto done;
        }
        if (*n == 0) {                   /* B = N / (P + S): each sequence of a Table 4 batch has P + S tokens */
            long tokens = atol(FIELD(N)), b = tokens / (pt[0].P + pt[0].S);
            char batch[32] = "";
            if (b > 0 && b * (pt[0].P + pt[0].S) == tokens) snprintf(batch, sizeof batch, ", B = %ld", b);
            snprintf(title, title_size, "RadixMLP speedup, %s%s (%s)", FIELD(MODEL), batch, FIELD(DEVICE));
        }
        (*n)++;
#undef FIELD
    }
    rc = *n == 0;
    if (rc) fprintf(stderr, "bench: %s has no data rows (a header, then a row per P and S)\n", path);
done:
    free(text);
    return rc;
}

/* ---- Table 2: the Amdahl model ------------------------------------------------------------------------------- */
/* A layer's position-wise GEMMs cost 8d^2 + 6 d d_int FLOPs per token (q, k, v, o counted as four d x d
 * projections; gate, up, down), attention 4 L d. Only the position-wise part shrinks, by r = N/N', so the
 * predicted speedup is 1 / ((1 - f_c) + f_c / r). */
static int table2(const ModelSpec *only, int reps)
{
    static const Col cols[] = {
        {"model", "model"}, {"N", "N"}, {"N'", "N_compact"}, {"r", "r"}, {"f_c", "f_c"},
        {"predicted x", "predicted_x"}, {"GEMM share", "gemm_share"}, {"predicted x (GEMM share)", "gemm_predicted_x"},
        {"radix x", "radix_x"}, {"compact x", "compact_x"}, {"base ms", "base_ms"}, {"radix ms", "radix_ms"},
        {"compact ms", "compact_ms"}, {"GEMM TFLOP/s", "gemm_tflops"}, {"paper f_c", "paper_f_c"},
        {"paper predicted x", "paper_predicted_x"}, {"paper observed x", "paper_observed_x"},
        {"paper base ms", "paper_base_ms"}, {"paper radix ms", "paper_radix_ms"}};
    const int P = 2048, S = 256, B = 32, L = P + S;
    char lead[128];
    RxBatch b;
    if (make_prefix_batch(&b, B, P, S, SEED + 1000 * P + S)) return 1;
    csv_safe(lead, sizeof lead, gpu_device_name());
    table_begin("Table 2: Amdahl model vs observed, P = 2048, S = 256, B = 32", cols, 19, "device");
    for (int mi = 0; mi < 3; mi++) {
        const ModelSpec *m = &MODELS[mi];
        const Qwen3Config *c = &m->cfg;
        double d = c->hidden_size, di = c->intermediate_size, q = (double)c->n_heads * c->head_dim;
        double kv = (double)c->n_kv_heads * c->head_dim, ms[3], gemm_ms = 0, flops, r, f_c, share;
        /* the seven projections of one layer on the N baseline rows: {n, k, how many} of [N,k] @ [k,n] */
        const int shapes[5][3] = {{(int)q, (int)d, 1}, {(int)kv, (int)d, 2}, {(int)d, (int)q, 1},
                                  {(int)di, (int)d, 2}, {(int)d, (int)di, 1}};
        GpuModel *g;
        GpuRunInfo info;
        Row row = {0};
        if (only && only != m) continue;
        if (upload(&g, m)) { rx_batch_free(&b); return 1; }
        fprintf(stderr, "bench: table 2, %s, %d reps\n", m->name, reps);
        if (time_modes(g, &b, m->cfg.vocab_size, reps, ms, &info)) { gpu_model_free(g); rx_batch_free(&b); return 1; }
        flops = 0;
        for (int i = 0; i < 5; i++) {
            double t;
            if (time_gemm(g, b.n_tokens, shapes[i][0], shapes[i][1], reps, &t)) {
                gpu_model_free(g);
                rx_batch_free(&b);
                return 1;
            }
            gemm_ms += shapes[i][2] * t;
            flops += shapes[i][2] * 2.0 * b.n_tokens * shapes[i][0] * shapes[i][1];
        }
        gpu_model_free(g);
        r = (double)info.n_tokens / info.n_compact;
        f_c = (8 * d * d + 6 * d * di) / (8 * d * d + 6 * d * di + 4.0 * L * d);
        share = c->n_layers * gemm_ms / ms[0];   /* measured: the projections' share of the baseline forward */
        cell(&row, "%s", m->name); cell(&row, "%d", info.n_tokens); cell(&row, "%d", info.n_compact);
        cell(&row, "%.2f", r); cell(&row, "%.2f", f_c); cell(&row, "%.2f", amdahl(f_c, r));
        cell(&row, "%.2f", share); cell(&row, "%.2f", amdahl(fmin(share, 1.0), r));
        cell(&row, "%.2f", ms[0] / ms[1]); cell(&row, "%.2f", ms[0] / ms[2]);
        cell(&row, "%.1f", ms[0]); cell(&row, "%.1f", ms[1]); cell(&row, "%.1f", ms[2]);
        cell(&row, "%.0f", flops / gemm_ms * 1e-9);
        cell(&row, "%.2f", m->t2.f_c); cell(&row, "%.2f", m->t2.predicted); cell(&row, "%.2f", m->t2.observed);
        cell(&row, "%.0f", m->t2.base_ms); cell(&row, "%.0f", m->t2.radix_ms);
        table_row(&row, lead);
    }
    rx_batch_free(&b);
    printf("\nf_c = (8d^2 + 6 d d_int) / (8d^2 + 6 d d_int + 4 L d), L = %d (the paper's formula); predicted = "
           "1 / ((1 - f_c) + f_c / r).\nGEMM share = layers x (the seven projections timed alone on N rows, "
           "gpu_gemm) / base ms: a measured lower bound of f_c.\nThe paper's columns: its Table 2 "
           "(H100, candle-cuda, fp16).\n\n", L);
    return 0;
}

/* ---- Table 5: the trie and its indices on the CPU (Algorithm 2), one thread ---------------------------------- */
typedef struct { const char *label; int B, L, shared; double paper_us, paper_mtok; const char *crate; } IndexCase;
static const IndexCase T5[] = {   /* shared = prefix ratio x L; paper_us < 0: not in the paper */
    {"batch 4 x 512, ratio 0.25", 4, 512, 128, 44.34, 46.1, "-"},
    {"batch 8 x 512, ratio 0.25", 8, 512, 128, 153.15, 26.8, "-"},
    {"batch 16 x 512, ratio 0.25", 16, 512, 128, 304.94, 26.7, "-"},
    {"batch 32 x 512, ratio 0.25", 32, 512, 128, 576.46, 28.4, "0.35-0.58 ms"},
    {"batch 64 x 512, ratio 0.25", 64, 512, 128, 1160, 28.4, "-"},
    {"batch 256 x 512, ratio 0.25", 256, 512, 128, 4680, 28.0, "-"},
    {"batch 2048 x 512, ratio 0.25", 2048, 512, 128, 60750, 17.3, "60 ms"},
    {"32 x seq 128, ratio 0.25", 32, 128, 32, 146.02, 28.1, "-"},
    {"32 x seq 256, ratio 0.25", 32, 256, 64, 295.74, 27.8, "-"},
    {"32 x seq 512, ratio 0.25", 32, 512, 128, 605.01, 27.2, "0.35-0.58 ms"},
    {"32 x seq 1024, ratio 0.25", 32, 1024, 256, 1220, 27.1, "-"},
    {"32 x seq 2048, ratio 0.25", 32, 2048, 512, 2290, 28.7, "-"},
    {"32 x 512, ratio 0.0", 32, 512, 0, 750.06, 22.0, "-"},
    {"32 x 512, ratio 0.25", 32, 512, 128, 655.93, 25.2, "0.35-0.58 ms"},
    {"32 x 512, ratio 0.5", 32, 512, 256, 455.32, 36.3, "-"},
    {"32 x 512, ratio 0.75", 32, 512, 384, 293.80, 56.3, "-"},
    {"32 x 512, ratio 1.0", 32, 512, 512, 129.98, 127.4, "-"},
    {"single sequence 512", 1, 512, 0, 0.28907, 1800, "-"},
    {"identical sequences 32 x 512", 32, 512, 512, 125.64, 130.7, "-"},
    {"no overlap 32 x 512", 32, 512, 0, 750.41, 21.9, "-"},
    {"32 x (128 shared + 200 unique)", 32, 328, 128, -1, -1, "0.20 ms"},
};

static void cpu_name(char *out, size_t n)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(out, n, "unknown CPU");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            csv_safe(out, n, strchr(line, ':') + 2);
            break;
        }
    if (f) fclose(f);
}

static int table5(int quick)
{
    static const Col cols[] = {
        {"configuration", "configuration"}, {"B", "B"}, {"L", "L"}, {"shared", "shared"}, {"N", "N"},
        {"N'", "N_compact"}, {"samples", "samples"}, {"median us", "median_us"}, {"mean us", "mean_us"},
        {"Mtok/s (mean)", "mtok_s"}, {"paper mean us", "paper_mean_us"}, {"paper Mtok/s", "paper_mtok_s"},
        {"paper crate, 2-core here", "paper_crate_here"}};
    const double min_s = quick ? 0.02 : 0.2;   /* per configuration */
    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    const int definition = !strcmp(rx_cpu_path(NULL), "definition");
    printf("cpu: %s (one thread)%s\n\n", cpu, definition ? "; RADIXMLP_CPU=definition: Algorithm 2 alone, the "
           "trie without its two refinements" : "");
    table_begin("Table 5: CPU index construction, radix_index_build", cols, 13, "cpu");
    for (size_t ci = 0; ci < sizeof T5 / sizeof *T5; ci++) {
        const IndexCase *c = &T5[ci];
        RxBatch b;
        RadixIndex warm, *ix;
        double t0, t1, *sample, sum = 0, med;
        int inner, n = 0, cap = 4096;
        Row row = {0};
        fprintf(stderr, "bench: table 5, %s\n", c->label);
        if (make_prefix_batch(&b, c->B, c->shared, c->L - c->shared, SEED + ci)) return 1;
        t0 = now_s();   /* the warm-up build also sizes the inner loop: a sample lasts >= 50 us */
        if (radix_index_build(&warm, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs)) {
            fprintf(stderr, "bench: radix_index_build failed: %s\n", radix_error());
            rx_batch_free(&b);
            return 1;
        }
        t1 = now_s() - t0;
        inner = t1 >= 50e-6 ? 1 : (int)fmin(10000, ceil(50e-6 / fmax(t1, 1e-8)));
        ix = calloc(inner, sizeof *ix);
        sample = malloc(cap * sizeof *sample);
        for (double start = now_s(); n < 5 || (now_s() - start < min_s && n < cap); n++) {
            t0 = now_s();
            for (int i = 0; i < inner; i++)   /* freed outside the clock: we time building only */
                radix_index_build(&ix[i], b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs);
            sample[n] = (now_s() - t0) / inner * 1e6;
            sum += sample[n];
            for (int i = 0; i < inner; i++) radix_index_free(&ix[i]);
        }
        med = median(sample, n);
        cell(&row, "%s", c->label); cell(&row, "%d", c->B); cell(&row, "%d", c->L); cell(&row, "%d", c->shared);
        cell(&row, "%d", warm.n_tokens); cell(&row, "%d", warm.n_compact); cell(&row, "%d", n);
        cell(&row, "%.2f", med); cell(&row, "%.2f", sum / n); cell(&row, "%.1f", warm.n_tokens / (sum / n));
        cell_num(&row, "%.2f", c->paper_us); cell_num(&row, "%.1f", c->paper_mtok); cell(&row, "%s", c->crate);
        table_row(&row, cpu);
        radix_index_free(&warm);
        rx_batch_free(&b);
        free(ix);
        free(sample);
    }
    printf("\nA sample times consecutive radix_index_build calls (radix_index_free is not timed); median and mean\n"
           "over >= 5 samples and >= %.2f s. The paper's columns: its Table 5, the Rust crate (cargo bench, mean\n"
           "of 50) on \"a standard Intel server CPU\". The same crate on one of this project's 2-core machines\n"
           "measured (median) 0.35-0.58 ms for 32 x 512 at ratio 0.25, 60 ms for 2048 x 512 and 0.20 ms for\n"
           "32 x (128 shared + 200 unique): the fair comparison for this table.\n\n", min_s);
    return 0;
}

/* ---- Table 6: the gather/scatter kernel ---------------------------------------------------------------------- */
/* index_select along dim 0: out[i, :] = in[index[i], :] */
typedef struct { const char *shape; int rows_in, dim, rows_out, elem; double candle_us, paper_us; } SelectCase;
static const SelectCase T6[] = {   /* 3-D inputs flatten to [rows, product of the rest] */
    {"100x128", 100, 128, 200, 4, 16.436, 12.645},         {"100x128", 100, 128, 200, 2, 16.676, 12.505},
    {"16000x1024", 16000, 1024, 12000, 4, 340.410, 46.250}, {"16000x1024", 16000, 1024, 12000, 2, 106.553, 28.435},
    {"16000x1024", 16000, 1024, 70000, 4, 1980, 204.540},  {"16000x1024", 16000, 1024, 70000, 2, 1073, 106.728},
    {"100000x2048", 100000, 2048, 500000, 4, 45636, 2828}, {"100000x2048", 100000, 2048, 500000, 2, 33665, 1469},
    {"10x100x128", 10, 12800, 200, 4, 33.675, 16.217},     {"10x100x128", 10, 12800, 200, 2, 33.953, 17.115},
    {"2000x64x256", 2000, 16384, 10000, 4, 3737, 432.668}, {"2000x64x256", 2000, 16384, 10000, 2, 2880, 211.468},
};

static int table6(int reps)
{
    static const Col cols[] = {
        {"input shape", "input_shape"}, {"out rows", "out_rows"}, {"dtype", "dtype"}, {"MB moved", "mb_moved"},
        {"kernel us", "kernel_us"}, {"kernel GB/s", "kernel_gbs"}, {"copy GB/s", "copy_gbs"},
        {"% of copy", "pct_of_copy"}, {"paper kernel us", "paper_kernel_us"}, {"paper candle us", "paper_candle_us"}};
    char lead[128];
    csv_safe(lead, sizeof lead, gpu_device_name());
    table_begin("Table 6: index_select (gather/scatter) along dim 0", cols, 10, "device");
    for (size_t i = 0; i < sizeof T6 / sizeof *T6; i++) {
        const SelectCase *c = &T6[i];
        double bytes = (double)c->rows_out * c->dim * c->elem, ms, copy_ms;   /* written; as many read */
        Row row = {0};
        fprintf(stderr, "bench: table 6, %s -> %d rows, %s\n", c->shape, c->rows_out, c->elem == 2 ? "F16" : "F32");
        if (time_index_select(c->rows_in, c->dim, c->rows_out, c->elem, reps, &ms, &copy_ms)) return 1;
        cell(&row, "%s", c->shape); cell(&row, "%d", c->rows_out); cell(&row, "%s", c->elem == 2 ? "F16" : "F32");
        cell(&row, "%.1f", 2 * bytes * 1e-6); cell(&row, "%.2f", ms * 1e3);
        cell(&row, "%.0f", 2 * bytes / ms * 1e-6); cell(&row, "%.0f", 2 * bytes / copy_ms * 1e-6);
        cell(&row, "%.0f%%", 100 * copy_ms / ms);
        cell(&row, "%g", c->paper_us); cell(&row, "%g", c->candle_us);
        table_row(&row, lead);
    }
    printf("\nGB/s = (bytes read + bytes written) / time, the 4-byte indices not counted. copy: gpu_copy of "
           "the bytes index_select wrote\n(device to device) in this run. Medians of %d after a warm-up. The paper's "
           "columns: its Table 6 (H100 80GB HBM3).\n\n", reps);
    return 0;
}

/* ---- a synthetic reranking workload (MS MARCO-shaped, Section 4.1 (b) and (c)) ------------------------------- */
/*   A (regular):  [system + instruction][query][doc tag] | passage | [suffix]   the query is shared
 *   B (flipped):  [system][doc tag] | passage | [query tag][query][suffix]      the query comes last
 * [..] is template text, identical in every pair of a request; | marks where the pairs part. Lengths in tokens
 * are estimates for the Qwen3-Reranker template (docs/qwen3.md); the ids are random. With these lengths gamma comes
 * out near 0.60 (A) and 0.72 (B); the paper measured about 0.61 and 0.71 on MS MARCO. */
enum { RR_PAIRS = 64, RR_SYSTEM = 60, RR_INSTRUCT = 22, RR_DOC_TAG = 5, RR_QUERY_TAG = 5, RR_SUFFIX = 12 };

static int reranker_batch(RxBatch *b, int flipped, int pairs, uint64_t seed)   /* pairs <= RR_PAIRS */
{
    uint64_t rng = seed;
    int32_t head[128], tail[64];
    int own[RR_PAIRS], n_head, n_tail, query = rand_in(&rng, 10, 20);
    for (int s = 0; s < pairs; s++) own[s] = flipped ? rand_in(&rng, 65, 200) : rand_in(&rng, 75, 200);
    n_head = RR_SYSTEM + (flipped ? 0 : RR_INSTRUCT + query) + RR_DOC_TAG;
    n_tail = (flipped ? RR_QUERY_TAG + query : 0) + RR_SUFFIX;
    fill_random(head, n_head, &rng);
    fill_random(tail, n_tail, &rng);
    return make_batch(b, pairs, head, n_head, own, tail, n_tail, &rng);
}

static int reranker(const ModelSpec *only, int reps, int quick)
{
    static const Col cols[] = {
        {"model", "model"}, {"variant", "variant"}, {"requests", "requests"}, {"mean N", "mean_N"},
        {"mean N'", "mean_N_compact"}, {"gamma", "gamma"}, {"base ms", "base_ms"}, {"radix ms", "radix_ms"},
        {"compact ms", "compact_ms"}, {"radix x", "radix_x"}, {"compact x", "compact_x"},
        {"paper gamma", "paper_gamma"}, {"paper e2e x (TEI p50)", "paper_e2e_x"}};
    const int requests = quick ? 1 : 4;   /* one forward pass = one request of 64 pairs */
    char lead[128];
    csv_safe(lead, sizeof lead, gpu_device_name());
    table_begin("Synthetic reranking workload (MS MARCO-shaped, random ids): forward pass per request of 64 pairs",
                cols, 13, "device");
    for (int mi = 0; mi < 3; mi++) {
        const ModelSpec *m = &MODELS[mi];
        GpuModel *g;
        if (only && only != m) continue;
        if (upload(&g, m)) return 1;
        for (int flipped = 0; flipped < 2; flipped++) {
            double sum[3] = {0, 0, 0}, n = 0, nc = 0, ms[3];
            const PaperT3 *p = &m->t3;
            Row row = {0};
            for (int q = 0; q < requests; q++) {
                RxBatch b;
                GpuRunInfo info;
                fprintf(stderr, "bench: reranker, %s, variant %c, request %d/%d\n", m->name, "AB"[flipped], q + 1,
                        requests);
                if (reranker_batch(&b, flipped, RR_PAIRS, SEED + 100 * flipped + q)) { gpu_model_free(g); return 1; }
                if (time_modes(g, &b, m->cfg.vocab_size, reps, ms, &info)) {
                rx_batch_free(&b);
                gpu_model_free(g);
                return 1;
            }
                rx_batch_free(&b);
                for (int k = 0; k < 3; k++) sum[k] += ms[k];
                n += info.n_tokens;
                nc += info.n_compact;
            }
            cell(&row, "%s", m->name); cell(&row, "%s", flipped ? "B flipped" : "A query first");
            cell(&row, "%d", requests); cell(&row, "%.0f", n / requests); cell(&row, "%.0f", nc / requests);
            cell(&row, "%.3f", nc / n);
            for (int k = 0; k < 3; k++) cell(&row, "%.2f", sum[k] / requests);
            cell(&row, "%.2f", sum[0] / sum[1]); cell(&row, "%.2f", sum[0] / sum[2]);
            cell(&row, "%.2f", flipped ? p->gamma_b : p->gamma_a);
            cell(&row, "%.2f", flipped ? p->base_b / p->radix_b : p->base_a / p->radix_a);
            table_row(&row, lead);
        }
        gpu_model_free(g);
    }
    printf("\nSYNTHETIC: random token ids in the shape of the paper's MS MARCO batches (64 pairs per request, "
           "passages 75-200 tokens, 65-200 flipped);\nforward pass only, medians of %d per request, x = "
           "sum of base ms / sum of mode ms. The paper's columns: its Table 3, end-to-end TEI p50 latency\n"
           "on the real data set (tokenization, batching and HTTP included), so compare trends, not values.\n\n",
           reps);
    return 0;
}

/* ---- Part II: the KV prefix cache (six radix vs hash scenarios), on the CPU ---------------------------------- */
/* A nanoGPT-scale comparison of a flat hash-chain block cache with a radix tree (a blog post whose code is
 * github.com/czhou578/multimodal-inference-visualizer, nanogpt-radix-tree-.py: a 57K-parameter model on a CPU,
 * 4-token blocks) reports six scenarios. We rebuild them from what it says of them (requests, prompt tokens,
 * shared prefixes, a cache of 8 blocks under eviction pressure) on a random model of the shape of
 * fixtures/tiny-bf16, and serve them with rx_serve (the C reference, one request per forward, as there). Our pool
 * holds the cache and the running request's own pages together, so "a cache of 8 blocks" becomes a pool of 8 + 6
 * pages (one 24-token request). Hit rate here: cached tokens / prompt tokens. The nanoGPT table's hit-rate column
 * counts something else (its cached tokens are the same as ours where the shapes match, its rates are not
 * cached / prompt). */
typedef struct {
    const char *name;
    int n_req, n_groups, prefix, unique;   /* n_groups prompts of `prefix` tokens, each request adds `unique`    */
    int pool_pages;                        /* 0: enough for every request                                       */
    double nanogpt[2][4];                  /* the nanoGPT table's flat, radix: cached, hit rate %, x off, evictions */
} CacheScenario;
static const CacheScenario SCENARIOS[] = {
    {"shared_prefix_basic", 8, 1, 16, 8, 0, {{112, 77.8, 0.94, 0}, {112, 87.5, 1.02, 0}}},
    {"high_reuse_many_requests", 24, 1, 24, 4, 0, {{552, 85.2, 0.77, 0}, {552, 95.8, 0.82, 0}}},
    {"branching_conversation", 8, 1, 24, 8, 0, {{168, 84.0, 0.87, 0}, {168, 87.5, 1.10, 0}}},
    {"multi_prefix_groups", 24, 4, 16, 8, 0, {{320, 76.9, 0.70, 0}, {320, 83.3, 0.91, 0}}},
    {"low_reuse_control", 8, 8, 0, 24, 0, {{0, 0.0, 0.87, 0}, {0, 0.0, 0.99, 0}}},
    {"eviction_pressure", 24, 6, 16, 8, 8 + 6, {{0, 0.0, 0.76, 136}, {288, 79.2, 0.91, 0}}},
};
#define PC_PAGE 4                          /* the nanoGPT comparison's block size */
static const Qwen3Config TINY = {                 /* fixtures/tiny-bf16's shape */
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

typedef struct { int n; int32_t **seqs; int *lens; } Requests;

static void requests_free(Requests *r)
{
    for (int i = 0; i < r->n; i++) free(r->seqs[i]);
    free(r->seqs); free(r->lens);
}

/* Request i belongs to group i % n_groups (interleaved arrival) or i / (n / n_groups) (group after group): the
 * group's prompt, then `unique` ids of its own (the first differs between all requests, so they part there). */
static Requests scenario_requests(int n, int n_groups, int prefix, int stem, int unique, int interleave, uint64_t seed)
{
    Requests r = {n, calloc(n, sizeof(int32_t *)), calloc(n, sizeof(int))};
    int32_t *prompts = malloc(((size_t)n_groups * (prefix + stem) + 1) * sizeof(int32_t));
    uint64_t rng = seed;
    for (int i = 0; i < n_groups * (prefix + stem); i++)
        prompts[i] = 1 + (int32_t)(splitmix(&rng) % (TINY.vocab_size - 1));
    for (int i = 0; i < n; i++) {
        int g = interleave ? i % n_groups : i / ((n + n_groups - 1) / n_groups), len = prefix + stem + unique;
        r.seqs[i] = malloc(len * sizeof(int32_t));
        r.lens[i] = len;
        memcpy(r.seqs[i], prompts + (size_t)g * (prefix + stem), (prefix + stem) * sizeof(int32_t));
        for (int k = prefix + stem; k < len; k++) r.seqs[i][k] = 1 + (int32_t)(splitmix(&rng) % (TINY.vocab_size - 1));
        if (unique) r.seqs[i][prefix + stem] = 1 + i % (TINY.vocab_size - 1);
    }
    free(prompts);
    return r;
}

/* rx_serve of each of n option sets, in turn, for one warm-up round and `reps` timed rounds (taking turns spreads
 * the noise of a shared machine evenly); ms[k]: the median time of set k (wall time on the CPU; with o->gpu the
 * prefills' GPU time, CUDA events, the host's scheduling excluded), st[k]: its (deterministic) stats. */
static int serve_rounds(const Qwen3Model *m, const Requests *r, const RxServeOptions *o, int n, int reps,
                        RxServeStats *st, double *ms)
{
    double *t = malloc((size_t)n * reps * sizeof *t);
    for (int round = -1; round < reps; round++)
        for (int k = 0; k < n; k++) {
            if (rx_serve(m, (const int32_t *const *)r->seqs, r->lens, r->n, &o[k], NULL, NULL, NULL, &st[k])) {
                fprintf(stderr, "bench: rx_serve failed: %s\n", radix_error());
                free(t);
                return 1;
            }
            if (st[k].request_pages || st[k].held_after_flush) {
                fprintf(stderr, "bench: rx_serve leaked %d pages\n", st[k].request_pages + st[k].held_after_flush);
                free(t);
                return 1;
            }
            if (o[k].gpu && !(st[k].gpu_ms > 0)) {       /* only the device's own events time a GPU run */
                fprintf(stderr, "bench: the GPU run reported no device time: it did not run on the GPU\n");
                free(t);
                return 1;
            }
            if (round >= 0) t[k * reps + round] = o[k].gpu ? st[k].gpu_ms : st[k].ms;
        }
    for (int k = 0; k < n; k++) ms[k] = median(t + k * reps, reps);
    free(t);
    return 0;
}

/* lpm's cost over the queue's length (RX_LPM_WINDOW in radixmlp.cu): n requests of 16 tokens (one of 64 prompts of 8
 * tokens, then 8 of their own, interleaved), all waiting at the start, served one per step (n steps) through the radix
 * cache in a pool of 48 pages of 8 tokens, on a model so small (hidden 16, 1 layer) that the forwards cost little
 * beside the scheduling. fcfs, lpm, and lpm with a window as long as the queue (a sort of the whole queue every step,
 * as lpm ran before): the process's CPU time per request, one run each. Flat in n where a step's cost does not grow
 * with the queue. The hit rate shows that the window still groups a prompt's requests (fcfs evicts between them). */
static int lpm_queue_table(int quick)
{
    static const Col cols[] = {
        {"requests", "requests"}, {"fcfs us/request", "fcfs_us"}, {"lpm us/request", "lpm_us"},
        {"lpm, whole queue sorted, us/request", "lpm_whole_us"}, {"fcfs hit rate", "fcfs_hit"},
        {"lpm hit rate", "lpm_hit"}, {"lpm, whole queue, hit rate", "lpm_whole_hit"}};
    Qwen3Config c = TINY;
    Qwen3Model m;
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.n_layers = 1;
    c.head_dim = 8;
    if (qwen3_random(&m, &c, SEED)) { fprintf(stderr, "bench: qwen3_random: %s\n", radix_error()); return 1; }
    table_begin("lpm's cost over the queue: CPU time per request, n requests waiting at the start, batch 1",
                cols, 7, "");
    for (int n = quick ? 250 : 500; n <= (quick ? 1000 : 4000); n *= 2) {
        Requests r = scenario_requests(n, 64, 8, 0, 8, 1, SEED + n);
        Row row = {0};
        double us[3], hit[3];
        for (int k = 0; k < 3; k++) {
            RxServeOptions o = {.cache = RX_CACHE_RADIX, .page_size = 8, .n_pages = 48, .batch = 1, .lpm = k > 0,
                                .lpm_window = k == 2 ? n : 0, .mode = RX_COMPACT, .model_id = 1};
            RxServeStats st;
            double c0 = cpu_s();
            fprintf(stderr, "bench: lpm's cost, %d requests, %s\n", n, k == 0 ? "fcfs" : k == 1 ? "lpm" :
                    "lpm sorting the whole queue");
            if (rx_serve(&m, (const int32_t *const *)r.seqs, r.lens, r.n, &o, NULL, NULL, NULL, &st)) {
                fprintf(stderr, "bench: rx_serve failed: %s\n", radix_error());
                requests_free(&r);
                qwen3_free(&m);
                return 1;
            }
            us[k] = (cpu_s() - c0) * 1e6 / n;
            hit[k] = 100.0 * st.cached_tokens / st.prompt_tokens;
        }
        cell(&row, "%d", n);
        for (int k = 0; k < 3; k++) cell(&row, "%.0f", us[k]);
        for (int k = 0; k < 3; k++) cell(&row, "%.1f%%", hit[k]);
        table_row(&row, "");
        requests_free(&r);
    }
    qwen3_free(&m);
    printf("\nus/request: the process's CPU time of one rx_serve, divided by n. A random Qwen3 of vocab 512, hidden 16,"
           " 1 layer; radix\ncache, page size 8, a pool of 48 pages, mode compact. lpm orders the first 128 waiting "
           "requests each step; sorting\nthe whole queue (lpm_window = n) costs a lookup per waiting request per step."
           "\n\n");
    return 0;
}

/* gpu: every scenario served by gpu_prefill on the device (K/V in a GPU pool), GPU times; else the C reference. */
static int prefix_cache_tables(int reps, int gpu)
{
    static const Col cols[] = {
        {"scenario", "scenario"}, {"requests", "requests"}, {"prompt tok", "prompt_tokens"}, {"cache", "cache"},
        {"cached tok", "cached_tokens"}, {"hit rate", "hit_rate"}, {"ms", "ms"}, {"tok/s", "tok_s"},
        {"x off", "x_off"}, {"evictions", "evicted_pages"}, {"nanoGPT cached tok", "nanogpt_cached_tokens"},
        {"nanoGPT hit rate", "nanogpt_hit_rate"}, {"nanoGPT x off", "nanogpt_x_off"},
        {"nanoGPT evictions", "nanogpt_evictions"}};
    static const RxCacheKind KINDS[3] = {RX_CACHE_OFF, RX_CACHE_HASH, RX_CACHE_RADIX};
    Qwen3Model m;
    GpuModel *g = NULL;
    char cpu[128];
    if (qwen3_random(&m, &TINY, SEED)) { fprintf(stderr, "bench: qwen3_random: %s\n", radix_error()); return 1; }
    if (gpu && gpu_model_upload(&g, &m)) {
        fprintf(stderr, "bench: gpu_model_upload: %s\n", radix_error());
        qwen3_free(&m);
        return 1;
    }
    cpu_name(cpu, sizeof cpu);
    if (g) snprintf(cpu, sizeof cpu, "%s", gpu_device_name());
    if (g) printf("gpu: %s; gpu_prefill (bf16), ms = the prefills' GPU time (CUDA events), the host's scheduling "
                  "excluded.", cpu);
    else printf("cpu: %s, %d thread%s (OMP_NUM_THREADS); the C reference (fp32), not a GPU.", cpu, rx_threads(0),
                rx_threads(0) == 1 ? "" : "s");
    printf(" A random Qwen3 of fixtures/tiny-bf16's shape\n(vocab 512, hidden 64, 2 layers); page size %d, batch 1, "
           "fcfs, mode compact; median of %d runs.\n\n", PC_PAGE, reps);
    table_begin(g ? "Part II: six radix vs hash scenarios, off vs hash vs radix (GPU timings)"
                  : "Part II: six radix vs hash scenarios, off vs hash vs radix (CPU timings)",
                cols, 14, g ? "gpu" : "cpu");
    for (size_t si = 0; si < sizeof SCENARIOS / sizeof *SCENARIOS; si++) {
        const CacheScenario *sc = &SCENARIOS[si];
        Requests r = scenario_requests(sc->n_req, sc->n_groups, sc->prefix, 0, sc->unique, 0, SEED + si);
        RxServeOptions o[3];
        RxServeStats st[3];
        double ms[3];
        fprintf(stderr, "bench: prefix cache, %s\n", sc->name);
        for (int k = 0; k < 3; k++)
            o[k] = (RxServeOptions){.cache = KINDS[k], .page_size = PC_PAGE, .n_pages = sc->pool_pages, .batch = 1,
                                    .lpm = 0, .mode = RX_COMPACT, .model_id = 1, .trace = NULL, .show_cache = NULL,
                                    .gpu = g};
        if (serve_rounds(&m, &r, o, 3, reps, st, ms)) {
            requests_free(&r);
            gpu_model_free(g);
            qwen3_free(&m);
            return 1;
        }
        for (int k = 0; k < 3; k++) {
            Row row = {0};
            const double *theirs = KINDS[k] == RX_CACHE_OFF ? NULL : sc->nanogpt[KINDS[k] == RX_CACHE_RADIX];
            cell(&row, "%s", sc->name); cell(&row, "%d", sc->n_req); cell(&row, "%ld", st[k].prompt_tokens);
            cell(&row, "%s", rx_cache_kind_name(KINDS[k])); cell(&row, "%ld", st[k].cached_tokens);
            cell(&row, "%.1f%%", 100.0 * st[k].cached_tokens / st[k].prompt_tokens); cell(&row, "%.2f", ms[k]);
            cell(&row, "%.0f", st[k].prompt_tokens / ms[k] * 1e3); cell(&row, "%.2fx", ms[0] / ms[k]);
            cell(&row, "%ld", st[k].evicted_pages);
            if (!theirs) for (int c = 0; c < 4; c++) cell(&row, "-");
            else {
                cell(&row, "%.0f", theirs[0]); cell(&row, "%.1f%%", theirs[1]);
                cell(&row, "%.2fx", theirs[2]); cell(&row, "%.0f", theirs[3]);
            }
            table_row(&row, cpu);
        }
        requests_free(&r);
    }
    printf("\nHit rate: cached / prompt tokens. The nanoGPT columns are the table of a nanoGPT-scale radix vs hash\n"
           "cache comparison (github.com/czhou578/multimodal-inference-visualizer, nanogpt-radix-tree-.py: a\n"
           "57K-parameter model on a CPU, 4-token blocks), and its hit rates count other things: radix, the share\n"
           "of requests that hit at all (7 of 8 = 87.5%%); flat, the share of block lookups that hit (28 of 36 =\n"
           "77.8%%). Its cached tokens are comparable, and ours equal them where the shapes are its. "
           "Evictions: pages whose\n"
           "cache reference was dropped. eviction_pressure: 6 groups of 4 requests arriving group after group, a pool\n"
           "of 14 pages (its 8-block cache plus one running request's 6 pages). x off > 1 here because\n"
           "%s dominates; in the nanoGPT comparison the cache's overhead did.\n\n",
           g ? "the GPU forward (gpu_prefill)" : "the C reference's fp32 forward");

    FILE *csv = g_csv;                                     /* the CSV holds the first table only */
    g_csv = NULL;
    static const Col sched_cols[] = {{"arrival", "arrival"}, {"cache", "cache"}, {"schedule", "schedule"},
        {"cached tok", "cached_tokens"}, {"hit rate", "hit_rate"}, {"evictions", "evicted_pages"}, {"ms", "ms"}};
    table_begin("eviction_pressure, requests interleaved across the 6 groups: fcfs vs lpm", sched_cols, 7, "");
    const CacheScenario *ep = &SCENARIOS[5];
    Requests r = scenario_requests(ep->n_req, ep->n_groups, ep->prefix, 0, ep->unique, 1, SEED + 5);
    RxServeOptions so[8];
    RxServeStats sst[8];
    double sms[8];
    for (int k = 0; k < 8; k++)                            /* hash, radix x fcfs, lpm x batch 1, 6 */
        so[k] = (RxServeOptions){.cache = KINDS[1 + k / 4], .page_size = PC_PAGE, .n_pages = 8 + 6 * (k % 2 ? 6 : 1),
                                 .batch = k % 2 ? 6 : 1, .lpm = k / 2 % 2, .mode = RX_COMPACT, .model_id = 1,
                                 .trace = NULL, .show_cache = NULL, .gpu = g};
    if (serve_rounds(&m, &r, so, 8, reps, sst, sms)) {
        requests_free(&r);
        gpu_model_free(g);
        qwen3_free(&m);
        return 1;
    }
    for (int k = 0; k < 8; k++) {
        Row row = {0};
        cell(&row, "round-robin");
        cell(&row, "%s", rx_cache_kind_name(so[k].cache));
        cell(&row, "%s, batch %d", so[k].lpm ? "lpm" : "fcfs", so[k].batch);
        cell(&row, "%ld", sst[k].cached_tokens);
        cell(&row, "%.1f%%", 100.0 * sst[k].cached_tokens / sst[k].prompt_tokens);
        cell(&row, "%ld", sst[k].evicted_pages);
        cell(&row, "%.2f", sms[k]);
        table_row(&row, "");
    }
    requests_free(&r);
    printf("\nThe pool is 8 pages plus 6 per request of the batch. lpm sorts the waiting requests by their cached\n"
           "prefix before each batch: the tree is walked depth first, and a group's prompt is reused while "
           "cached.\n\n");

    static const Col mix_cols[] = {{"cache", "cache"}, {"mode", "mode"}, {"N (prompt tok)", "prompt_tokens"},
        {"cached tok", "cached_tokens"}, {"rows computed", "rows"}, {"ms", "ms"}, {"tok/s", "tok_s"},
        {"x off baseline", "x"}};
    table_begin("Cache and compaction add up: 32 requests = 48-token system prompt + 8-token question stem + 6 own,"
                " batch 8, page 16", mix_cols, 8, "");
    r = scenario_requests(32, 1, 48, 8, 6, 0, SEED + 7);
    RxServeOptions mo[4];
    RxServeStats mst[4];
    double mms[4];
    for (int k = 0; k < 4; k++)                            /* off, radix x baseline, compact */
        mo[k] = (RxServeOptions){.cache = KINDS[k / 2 * 2], .page_size = 16, .n_pages = 0, .batch = 8, .lpm = 0,
                                 .mode = k % 2 ? RX_COMPACT : RX_BASELINE, .model_id = 1, .trace = NULL,
                                 .show_cache = NULL, .gpu = g};
    if (serve_rounds(&m, &r, mo, 4, reps, mst, mms)) { requests_free(&r); gpu_model_free(g); qwen3_free(&m); return 1; }
    for (int k = 0; k < 4; k++) {
        Row row = {0};
        cell(&row, "%s", rx_cache_kind_name(mo[k].cache)); cell(&row, "%s", rx_mode_name(mo[k].mode));
        cell(&row, "%ld", mst[k].prompt_tokens); cell(&row, "%ld", mst[k].cached_tokens);
        cell(&row, "%ld", mst[k].rows_computed); cell(&row, "%.2f", mms[k]);
        cell(&row, "%.0f", mst[k].prompt_tokens / mms[k] * 1e3); cell(&row, "%.2fx", mms[0] / mms[k]);
        table_row(&row, "");
    }
    requests_free(&r);
    printf("\nThe first batch finds nothing cached: compaction computes its shared system prompt and stem once. Later\n"
           "batches read the prompt's 3 pages from the cache, and compaction merges their equal stems (same cached\n"
           "prefix, same tokens, same positions). %s\n\n", g ? "GPU timings of gpu_prefill (CUDA events)." :
           "CPU timings of the C reference.");
    int rc = gpu ? 0 : lpm_queue_table(0);                 /* the CPU's scheduling: no GPU to time */
    g_csv = csv;
    gpu_model_free(g);
    qwen3_free(&m);
    return rc;
}

/* ---- attention alone: the flash and the naive kernel at the Table 4 shapes -------------------------------------- */
/* A model's attention (Qwen3-4B: 32 heads on 8 kv heads, head_dim 128) over the batches of Table 4, in the three
 * layouts of gpu_forward, with three kernels: the flash kernel with query tiles of 64 rows (one m16 fragment per warp)
 * and of 128 (two, FlashAttention-2's split), and the naive one. "rule" is the tile the flash kernel's per-launch
 * rule takes for each layout (gpu_flash_block_m), so that a run shows whether it takes the faster one. FLOPs:
 * 4 * head_dim * heads per causal (query, key) pair (q k^T and P V, 2 each), counting the pairs each layout computes:
 * every position of every sequence in baseline and radix, only the N' compact queries (each sequence's unshared
 * suffix, against its whole history) in compact mode. */
static double causal_pairs(const RxBatch *b, const int32_t *cu_q)   /* cu_q NULL: every position is a query */
{
    double pairs = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        double L = b->cu_seqlens[s + 1] - b->cu_seqlens[s], p = cu_q ? L - (cu_q[s + 1] - cu_q[s]) : 0;
        pairs += (L * (L + 1) - p * (p + 1)) / 2;   /* queries p .. L-1 see p+1 .. L keys */
    }
    return pairs;
}

static int attention_bench(const ModelSpec *m, int reps, int quick)
{
    static const int PREFIX[] = {1, 16, 32, 128, 256, 512, 1024, 2048}, QUICK[] = {1, 2048}, SUFFIX[] = {256, 1024};
    static const char *LAYOUT[3] = {"base", "radix", "compact"};
    static const Col cols[] = {
        {"P", "P"}, {"S", "S"}, {"N", "N"}, {"N'", "N_compact"}, {"rule BM b/r/c", "rule_bm"},
        {"base BM 64 ms", "base_bm64_ms"}, {"TFLOP/s", "base_bm64_tflops"},
        {"base BM 128 ms", "base_bm128_ms"}, {"TFLOP/s", "base_bm128_tflops"},
        {"base naive ms", "base_naive_ms"}, {"TFLOP/s", "base_naive_tflops"},
        {"radix BM 64 ms", "radix_bm64_ms"}, {"TFLOP/s", "radix_bm64_tflops"},
        {"radix BM 128 ms", "radix_bm128_ms"}, {"TFLOP/s", "radix_bm128_tflops"},
        {"radix naive ms", "radix_naive_ms"}, {"TFLOP/s", "radix_naive_tflops"},
        {"compact BM 64 ms", "compact_bm64_ms"}, {"TFLOP/s", "compact_bm64_tflops"},
        {"compact BM 128 ms", "compact_bm128_ms"}, {"TFLOP/s", "compact_bm128_tflops"},
        {"compact naive ms", "compact_naive_ms"}, {"TFLOP/s", "compact_naive_tflops"}};
    static const RxAttention KERNEL[3] = {RX_ATTN_FLASH_BM64, RX_ATTN_FLASH_BM128, RX_ATTN_NAIVE};
    static const char *KERNEL_NAME[3] = {"flash BM 64", "flash BM 128", "naive"};
    const Qwen3Config *c = &m->cfg;
    const int *prefix = quick ? QUICK : PREFIX, n_prefix = quick ? 2 : 8, B = 32;
    char title[160], lead[256], dev[128];
    csv_safe(dev, sizeof dev, gpu_device_name());
    snprintf(lead, sizeof lead, "%s,%s", m->name, dev);
    snprintf(title, sizeof title, "Attention alone: %s (%d heads on %d kv heads, head_dim %d), B = %d, shared prefix P"
             " + suffix S", m->name, c->n_heads, c->n_kv_heads, c->head_dim, B);
    const int32_t one[2] = {0, 1};                 /* BM 128 is built for compute capability 9.0 and newer */
    const int bm128 = gpu_flash_block_m(RX_ATTN_FLASH_BM128, one, 1, 1) == 128;
    if (!bm128) fprintf(stderr, "bench: no BM 128 columns: %s\n", radix_error());
    table_begin(title, cols, 23, "model,device");
    for (int si = 0; si < 2; si++)
        for (int pi = 0; pi < n_prefix; pi++) {
            int P = prefix[pi], S = SUFFIX[si];
            RxBatch b;
            RadixIndex ix;
            Row r = {0};
            if (make_prefix_batch(&b, B, P, S, SEED + 1000 * P + S)) return 1;
            int32_t *cu_q = malloc((B + 1) * sizeof *cu_q);
            if (radix_index_build(&ix, b.input_ids, b.position_ids, b.cu_seqlens, b.n_seqs) ||
                radix_compact_cu_q(&ix, b.cu_seqlens, b.n_seqs, cu_q)) {
                fprintf(stderr, "bench: %s\n", radix_error());
                rx_batch_free(&b);
                free(cu_q);
                return 1;
            }
            double flops[3] = {causal_pairs(&b, NULL), causal_pairs(&b, NULL), causal_pairs(&b, cu_q)};
            cell(&r, "%d", P); cell(&r, "%d", S); cell(&r, "%d", b.n_tokens); cell(&r, "%d", ix.n_compact);
            cell(&r, "%d/%d/%d", gpu_flash_block_m(RX_ATTN_FLASH, b.cu_seqlens, B, c->n_heads),
                 gpu_flash_block_m(RX_ATTN_FLASH, b.cu_seqlens, B, c->n_heads),
                 gpu_flash_block_m(RX_ATTN_FLASH, cu_q, B, c->n_heads));
            for (int k = 0; k < 3; k++)
                for (int kn = 0; kn < 3; kn++) {
                    double ms;
                    if (KERNEL[kn] == RX_ATTN_FLASH_BM128 && !bm128) {
                        cell(&r, "-");
                        cell(&r, "-");
                        continue;
                    }
                    fprintf(stderr, "bench: attention, P = %d, S = %d, %s, %s kernel, %d reps\n", P, S, LAYOUT[k],
                            KERNEL_NAME[kn], reps);
                    if (gpu_time_attention(&b, MODES[k], KERNEL[kn], c->n_heads, c->n_kv_heads, c->head_dim, reps,
                                           &ms)) {
                        fprintf(stderr, "bench: gpu_time_attention failed: %s\n", radix_error());
                        radix_index_free(&ix);
                        rx_batch_free(&b);
                        free(cu_q);
                        return 1;
                    }
                    cell(&r, "%.2f", ms);
                    cell(&r, "%.1f", 4.0 * c->head_dim * c->n_heads * flops[k] / (ms * 1e9));
                }
            table_row(&r, lead);
            radix_index_free(&ix);
            rx_batch_free(&b);
            free(cu_q);
        }
    printf("\nms: CUDA events around the attention kernel alone (radix: with the scatter of q, k, v to the N rows and "
           "the gather\nof the output, Algorithm 1 lines 20-23), median of %d after a warm-up; random bf16 q, k, v. "
           "TFLOP/s = 4 * head_dim * heads *\n(causal query-key pairs) / time, where compact counts only its N' "
           "queries. BM: the flash kernel's query tile (rows), 64 or\n128; rule: the one it takes per launch in "
           "baseline/radix/compact (-: BM 128 is not built for this device). PyTorch SDPA on\nthe same shapes (same "
           "GPU, same session): python fixtures/bench_torch.py --attention --model %s\n\n", reps, m->key);
    return 0;
}

/* ---- the CPU tables: Tables 4 and 2 on the C reference (--cpu), and the matmul rate ------------------------- */
/* The same effect on any processor: the position-wise work of the C reference scales with N', its attention with N
 * (radix) or with the N' queries (compact). Random fp32 weights at a model's width, CPU_LAYERS layers, a small
 * vocabulary (the LM head runs on the B last tokens only, so its size barely counts; ids are folded into it). Wall
 * time of qwen3_forward_ref_last per forward (CLOCK_MONOTONIC) and the process's CPU time, the median of `reps`
 * forwards of each mode after one of its own (cpu_time_modes). */
#define CPU_LAYERS 1
#define CPU_VOCAB 8192

static void print_cpu(void)
{
    char name[128], mhz[64] = "?", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    cpu_name(name, sizeof name);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7) && strchr(line, ':')) {
            csv_safe(mhz, sizeof mhz, strchr(line, ':') + 2);
            break;
        }
    if (f) fclose(f);
    printf("device: CPU %s, %s MHz, the C reference on %d thread%s (OMP_NUM_THREADS)\n\n", name, mhz, rx_threads(0),
           rx_threads(0) > 1 ? "s" : "");
}

static int cpu_model(Qwen3Model *m, const ModelSpec *spec)
{
    Qwen3Config c = spec->cfg;
    c.n_layers = CPU_LAYERS;
    c.vocab_size = CPU_VOCAB;
    if (qwen3_random(m, &c, SEED) == 0) return 0;
    fprintf(stderr, "bench: qwen3_random(%s width) failed: %s\n", spec->name, radix_error());
    return 1;
}

/* A token id folded into [1, CPU_VOCAB): distinct ids below CPU_VOCAB stay distinct. */
static int32_t cpu_id(int32_t id) { return 1 + (id - 1) % (CPU_VOCAB - 1); }

/* The model of the tables at Qwen3-0.6B's width (cpu_model) into *m, the CSV's lead columns (model, device) into
 * lead [200], and the table's title and header: "WHAT on the CPU: C reference, Qwen3-0.6B width (..), DETAIL". */
static int cpu_06b_table(Qwen3Model *m, char *lead, const char *what, const char *detail, const Col *cols, int n)
{
    char title[300], name[128];
    if (cpu_model(m, &MODELS[0])) return 1;
    cpu_name(name, sizeof name);
    snprintf(lead, 200, "Qwen3-0.6B width %d layer%s,CPU %s %d threads", CPU_LAYERS, CPU_LAYERS > 1 ? "s" : "", name,
             rx_threads(0));
    snprintf(title, sizeof title, "%s on the CPU: C reference, Qwen3-0.6B width (%d layer%s, random fp32 weights), %s",
             what, CPU_LAYERS, CPU_LAYERS > 1 ? "s" : "", detail);
    table_begin(title, cols, n, "model,device");
    return 0;
}

/* B sequences of a shared prefix P and unique suffixes S (as Table 4), ids folded into [1, CPU_VOCAB): the suffixes'
 * distinct first ids stay distinct, so N' = P + B*S still. */
static int cpu_prefix_batch(RxBatch *b, int B, int P, int S)
{
    if (make_prefix_batch(b, B, P, S, SEED + 1000 * P + S)) return 1;
    for (int i = 0; i < b->n_tokens; i++) b->input_ids[i] = cpu_id(b->input_ids[i]);
    return 0;
}

/* Mode k's scores from its last-token logits [n_seqs, vocab]: baseline's (k = 0) into scores [n_seqs], every other
 * mode's compared with them, bit for bit. 0, or 1 with a message. */
static int score_mode(const Qwen3Model *m, const RxBatch *b, const float *logits, const int32_t *yes_no, int k,
                      float *scores)
{
    float *mine = k ? malloc(b->n_seqs * sizeof *mine) : scores;
    int rc = !mine || rx_rerank_scores(logits, b->n_seqs, m->cfg.vocab_size, yes_no[0], yes_no[1], mine);
    if (rc) fprintf(stderr, "bench: scoring the %s logits failed: %s\n", rx_mode_name(MODES[k]), radix_error());
    if (!rc && k && memcmp(mine, scores, b->n_seqs * sizeof *mine)) {
        fprintf(stderr, "bench: the %s scores differ from the baseline's\n", rx_mode_name(MODES[k]));
        rc = 1;
    }
    if (k) free(mine);
    return rc;
}

/* ms[k]: median wall ms of MODES[k] over reps forwards, cpu_ms[k]: the median process CPU ms of the same forwards (all
 * threads: on a busy machine the steadier figure); *n_compact: N'. Each mode is timed in a block of its own, after
 * one forward of it that is not timed (r = -1), as docs/bench_torch_cpu.py times transformers: the first forward
 * packs the model's weights (once per model), and after another mode's bigger buffers the allocator hands back
 * fresh pages, whose faults a steady stream of one shape does not pay. The untimed forwards' logits are checked:
 * finite, radix and compact equal to baseline. yes_no (or NULL): reranking's two token ids; scores [n_seqs] gets
 * baseline's P(yes) of each sequence (rx_rerank_scores, --score's code), and each mode's own scores, from its own
 * logits, are checked equal to them. */
static int cpu_time_modes(const Qwen3Model *m, const RxBatch *b, int reps, double ms[3], double cpu_ms[3],
                          int *n_compact, const int32_t *yes_no, float *scores)
{
    size_t n = (size_t)b->n_seqs * m->cfg.vocab_size, bad = 0;
    double *t = malloc(6 * reps * sizeof *t), *c = t + 3 * reps;
    float *logits = malloc(3 * n * sizeof *logits);
    RadixIndex ix;
    int rc = !t || !logits;
    if (rc) fprintf(stderr, "bench: out of host memory for [%d, %d] logits\n", b->n_seqs, m->cfg.vocab_size);
    if (!rc && radix_index_build(&ix, b->input_ids, b->position_ids, b->cu_seqlens, b->n_seqs) == 0) {
        *n_compact = ix.n_compact;
        radix_index_free(&ix);
    }
    for (int k = 0; k < 3 && !rc; k++)
        for (int r = -1; r < reps && !rc; r++) {
            double t0 = now_s(), c0 = cpu_s();
            rc = qwen3_forward_ref_last(m, b, MODES[k], logits + k * n, NULL) != 0;
            if (r >= 0) {
                t[k * reps + r] = 1e3 * (now_s() - t0);
                c[k * reps + r] = 1e3 * (cpu_s() - c0);
            }
            if (rc)
                fprintf(stderr, "bench: qwen3_forward_ref_last (%s) failed: %s\n", rx_mode_name(MODES[k]),
                        radix_error());
            if (!rc && r < 0 && (rx_max_abs_diff(logits + k * n, NULL, n, &bad), bad < n)) {
                fprintf(stderr, "bench: the %s forward produced a non-finite logit: not timed\n",
                        rx_mode_name(MODES[k]));
                rc = 1;
            }
            if (!rc && r < 0 && k > 0 && memcmp(logits + k * n, logits, n * sizeof *logits)) {
                fprintf(stderr, "bench: the %s logits differ from the baseline's: the C reference is broken\n",
                        rx_mode_name(MODES[k]));
                rc = 1;
            }
            if (!rc && r < 0 && yes_no && score_mode(m, b, logits + k * n, yes_no, k, scores)) rc = 1;
        }
    for (int k = 0; k < 3 && !rc; k++) {
        ms[k] = median(t + k * reps, reps);
        cpu_ms[k] = median(c + k * reps, reps);
    }
    free(t);
    free(logits);
    return rc;
}

/* The core's fp32 peak, GFLOP/s per core: a loop of independent FMAs (12 chains, 2 FLOPs a lane) on the widest
 * vectors the C reference uses here (rx_cpu_path "auto"), timed by the process's CPU time on one thread, the best
 * of 3. 0 where the CPU has neither AVX2 + FMA nor AVX-512. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
enum { PEAK_STEPS = 20000000 };
__attribute__((target("avx2,fma"))) static float fma_loop_avx2(float x, float y)         /* 12 * 8 lanes a step */
{
    __m256 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm256_set1_ps((float)k);
    for (long i = 0; i < PEAK_STEPS; i++)
#pragma GCC unroll 12
        for (int k = 0; k < 12; k++) a[k] = _mm256_fmadd_ps(a[k], _mm256_set1_ps(x), _mm256_set1_ps(y));
    for (int k = 1; k < 12; k++) a[0] = _mm256_add_ps(a[0], a[k]);
    return _mm256_cvtss_f32(a[0]);
}
__attribute__((target("avx512f"))) static float fma_loop_avx512(float x, float y)        /* 12 * 16 lanes a step */
{
    __m512 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < PEAK_STEPS; i++)
#pragma GCC unroll 12
        for (int k = 0; k < 12; k++) a[k] = _mm512_fmadd_ps(a[k], _mm512_set1_ps(x), _mm512_set1_ps(y));
    for (int k = 1; k < 12; k++) a[0] = _mm512_add_ps(a[0], a[k]);
    return _mm512_reduce_add_ps(a[0]);
}
static double fma_peak_gflops(const char *path)
{
    int lanes = !strcmp(path, "avx512") ? 16 : !strcmp(path, "avx2") ? 8 : 0;
    double best = 0;
    for (int r = 0; r < 3 && lanes; r++) {
        double c0 = cpu_s();
        float sink = lanes == 16 ? fma_loop_avx512(0.999999f, 1e-7f) : fma_loop_avx2(0.999999f, 1e-7f);
        double g = 12.0 * lanes * 2 * PEAK_STEPS / (cpu_s() - c0) * 1e-9;
        best = sink != 12345.0f && g > best ? g : best;          /* sink: keeps the loop from being optimized away */
    }
    return best;
}
#else
static double fma_peak_gflops(const char *path) { (void)path; return 0; }
#endif

/* GFLOP/s of the forward's matmul (rx_matmul_packed_ref) at one of Qwen3-0.6B's shapes, [rows, 1024] @ [1024, 3072]
 * (gate_proj), at 64 and 256 rows, on each instruction-set path the CPU has (rx_cpu_path; the same bits) on 1
 * thread, the widest on all threads, beside the plain loop it equals bit for bit (rx_matmul_ref) and the core's FMA
 * peak. */
static int cpu_matmul_rate(int quick)
{
    const int max_rows = 256, in = 1024, out = 3072, threads = rx_threads(0);
    const char *path0 = rx_cpu_path(NULL);
    uint64_t rng = SEED;
    float *x = malloc((size_t)max_rows * in * sizeof *x), *w = malloc((size_t)in * out * sizeof *w),
          *wp = NULL, *y = malloc((size_t)max_rows * out * sizeof *y),
          *xp = malloc(rx_packed_x_floats(max_rows, in) * sizeof *xp);
    RxTensor W = {.dtype = RX_F32, .rank = 2, .shape = {out, in}, .nbytes = (size_t)out * in * sizeof *w};
    if (posix_memalign((void **)&wp, 64, rx_packed_floats(out, in) * sizeof *wp))  /* aligned as model_pack_ref's */
        wp = NULL;
    if (!x || !w || !wp || !y || !xp) {
        fprintf(stderr, "bench: out of host memory for the matmul\n");
        free(x); free(w); free(wp); free(y); free(xp);
        return 1;
    }
    for (size_t i = 0; i < (size_t)max_rows * in; i++) x[i] = (float)(splitmix(&rng) % 2001) / 1000.0f - 1.0f;
    for (size_t i = 0; i < (size_t)in * out; i++) w[i] = (float)(splitmix(&rng) % 2001) / 32000.0f - 0.03f;
    W.data = w;                                             /* w [out, in], as a weight in a checkpoint */
    rx_pack_weight(wp, &W);
    const char *widest = rx_cpu_path("auto");
    double peak = fma_peak_gflops(widest);
    const int reps = quick ? 5 : 15;                        /* a 64-row call takes ms: the median needs many */
    printf("matmul [rows, %d] @ [%d, %d] (Qwen3-0.6B's gate_proj), median of %d readings (each 4096 / rows calls) "
           "after a warm-up: GFLOP/s of wall time,\n"
           "and per core: FLOPs / the process's CPU time (what one core delivers while it runs, even on a busy "
           "machine)\n  fp32 peak of one core (a loop of %s FMAs): %.1f GFLOP/s\n", in, in, out, reps, widest, peak);
    for (int rows = 64; rows <= max_rows; rows *= 4) {
        if (quick && rows > 64) break;
        static const char *const PATH[5] = {"portable", "portable", "avx2", "avx512", "auto"};
        for (int v = 0; v < 5; v++) {   /* 0: the plain loop; 1-3: each path on 1 thread; 4: the widest, all threads */
            int n_rows = v < 2 ? 6 : rows;                  /* the plain loops are slow: 6 rows give their rate */
            /* A reading is calls of the matmul, 30 ms or more: the kernel counts another thread's CPU time at
             * its scheduler tick (4 ms), so a reading of one 2 ms call would miss or double it. */
            int calls = v >= 2 ? 4096 / rows : 1;          /* the plain loops (v < 2) take 50 ms a call */
            double t[15], c[15], flops = 2.0 * n_rows * in * out * calls;
            const char *path = rx_cpu_path(PATH[v]);
            if (!path || (v == 4 && threads == 1)) continue;   /* a path this CPU lacks; all threads = 1 thread */
            rx_threads(v == 4 ? threads : 1);
            for (int r = -1; r < reps; r++) {               /* round -1: the warm-up */
                double t0 = now_s(), c0 = cpu_s();
                for (int k = 0; k < calls; k++)
                    if (v == 0) rx_matmul_ref(y, x, w, n_rows, in, out);   /* w read as [out, in]: the same work */
                    else rx_matmul_packed_ref(y, x, wp, n_rows, in, out, xp);
                if (r >= 0) {
                    t[r] = now_s() - t0;
                    c[r] = cpu_s() - c0;
                }
            }
            char what[80];
            snprintf(what, sizeof what, "%s, %s", v ? "tiled (rx_matmul_packed_ref)" : "definition (rx_matmul_ref)",
                     v ? path : "plain C");
            double per_core = flops / median(c, reps) * 1e-9;
            printf("  %3d rows  %-40s %2d thread%s  %6.1f GFLOP/s  %6.1f GFLOP/s per core", v < 2 ? n_rows : rows, what,
                   v == 4 ? threads : 1, v == 4 && threads > 1 ? "s" : " ", flops / median(t, reps) * 1e-9, per_core);
            if (peak > 0) printf(" (%.0f%% of peak)", 100 * per_core / peak);
            printf("\n");
        }
    }
    printf("\n");
    rx_threads(threads);
    rx_cpu_path(path0);
    free(x); free(w); free(wp); free(y); free(xp);
    return 0;
}

/* The paper's Table 4 row (Qwen3-4B, H100) whose gamma is nearest: gamma = N'/N = (P + 32 S) / (32 (P + S)). */
static const PaperT4 *paper_t4_nearest(double gamma, double *paper_gamma)
{
    const PaperT4 *best = NULL;
    for (size_t i = 0; i < sizeof PAPER_T4 / sizeof *PAPER_T4; i++) {
        const PaperT4 *p = &PAPER_T4[i];
        double g = (p->P + 32.0 * p->S) / (32.0 * (p->P + p->S));
        if (!best || fabs(g - gamma) < fabs(*paper_gamma - gamma)) {
            best = p;
            *paper_gamma = g;
        }
    }
    return best;
}

static int cpu_table4(int reps, int quick, Point *pts, int *n_pts)
{
    static const int PREFIX[] = {16, 64, 256, 512}, QUICK_P[] = {8, 64}, SUFFIX[] = {16, 64}, QUICK_S[] = {8};
    static const Col cols[] = {
        {"B", "B"}, {"P", "P"}, {"S", "S"}, {"N", "N"}, {"N'", "N_compact"}, {"gamma", "gamma"},
        {"base ms", "base_ms"}, {"radix ms", "radix_ms"}, {"compact ms", "compact_ms"}, {"radix x", "radix_x"},
        {"compact x", "compact_x"}, {"paper P", "paper_P"}, {"paper S", "paper_S"}, {"paper gamma", "paper_gamma"},
        {"paper base ms", "paper_base_ms"}, {"paper radix ms", "paper_radix_ms"}, {"paper x", "paper_x"},
        {"base CPU ms", "base_cpu_ms"}, {"radix CPU ms", "radix_cpu_ms"}, {"compact CPU ms", "compact_cpu_ms"}};
    const int B = quick ? 4 : 8, n_prefix = quick ? 2 : 4, n_suffix = quick ? 1 : 2;
    const int *prefix = quick ? QUICK_P : PREFIX, *suffix = quick ? QUICK_S : SUFFIX;
    char detail[100], lead[200];
    Qwen3Model m;
    snprintf(detail, sizeof detail, "B = %d, shared prefix P + unique suffix S", B);
    if (cpu_06b_table(&m, lead, "Table 4", detail, cols, 20)) return 1;
    *n_pts = 0;
    for (int si = 0; si < n_suffix; si++)
        for (int pi = 0; pi < n_prefix; pi++) {
            int P = prefix[pi], S = suffix[si], Nc = 0;
            double ms[3], cpu_ms[3], pg = 0, gamma;
            RxBatch b;
            Row r = {0};
            fprintf(stderr, "bench: table 4 --cpu, P = %d, S = %d, %d reps\n", P, S, reps);
            if (cpu_prefix_batch(&b, B, P, S)) { qwen3_free(&m); return 1; }
            if (cpu_time_modes(&m, &b, reps, ms, cpu_ms, &Nc, NULL, NULL)) {
                rx_batch_free(&b);
                qwen3_free(&m);
                return 1;
            }
            gamma = (double)Nc / b.n_tokens;
            const PaperT4 *p = paper_t4_nearest(gamma, &pg);
            cell(&r, "%d", B); cell(&r, "%d", P); cell(&r, "%d", S); cell(&r, "%d", b.n_tokens); cell(&r, "%d", Nc);
            cell(&r, "%.3f", gamma);
            cell(&r, "%.1f", ms[0]); cell(&r, "%.1f", ms[1]); cell(&r, "%.1f", ms[2]);
            cell(&r, "%.2f", ms[0] / ms[1]); cell(&r, "%.2f", ms[0] / ms[2]);
            cell(&r, "%d", p->P); cell(&r, "%d", p->S); cell(&r, "%.3f", pg);
            cell(&r, "%.1f", p->base_ms); cell(&r, "%.1f", p->radix_ms); cell(&r, "%.2f", p->speedup);
            cell(&r, "%.0f", cpu_ms[0]); cell(&r, "%.0f", cpu_ms[1]); cell(&r, "%.0f", cpu_ms[2]);
            table_row(&r, lead);
            pts[(*n_pts)++] = (Point){P, S, ms[0] / ms[1], ms[0] / ms[2], -1};
            rx_batch_free(&b);
        }
    qwen3_free(&m);
    printf("\nx = baseline ms / mode ms: wall time of one forward (qwen3_forward_ref_last, "
           "logits of the B last tokens),"
           " each mode the median of %d after an untimed one (CPU ms: the process's CPU time, all threads);\n"
           "radix and compact logits equal baseline bit for bit (checked). The paper's columns: "
           "the row of its Table 4 (Qwen3-4B, H100,\nfp16, B = 32) with the nearest gamma = N'/N, the paper's "
           "numbers, not a measurement of this code.\n\n", reps);
    return 0;
}

/* Table 2 on the CPU: the Amdahl model for the three models' widths, f_c twice: the paper's FLOP formula, and
 * measured time, f_c = 1 - (attention ms / baseline ms) with attention timed alone (rx_attention_ref at the baseline
 * layout, once per layer). */
static int cpu_table2(const ModelSpec *only, int reps, int quick)
{
    static const Col cols[] = {
        {"width", "model"}, {"N", "N"}, {"N'", "N_compact"}, {"r", "r"}, {"f_c (FLOPs)", "f_c_flops"},
        {"predicted x (FLOPs)", "predicted_x_flops"}, {"f_c (time)", "f_c_time"},
        {"predicted x (time)", "predicted_x_time"}, {"radix x", "radix_x"}, {"compact x", "compact_x"},
        {"base ms", "base_ms"}, {"attention ms", "attention_ms"}, {"radix ms", "radix_ms"},
        {"compact ms", "compact_ms"}, {"paper f_c", "paper_f_c"}, {"paper predicted x", "paper_predicted_x"},
        {"paper observed x", "paper_observed_x"}};
    const int B = 4, P = quick ? 32 : 256, S = quick ? 8 : 32, L = P + S;
    char lead[200], name[128], title[200];
    RxBatch b;
    if (cpu_prefix_batch(&b, B, P, S)) return 1;
    cpu_name(name, sizeof name);
    snprintf(lead, sizeof lead, "CPU %s %d threads", name, rx_threads(0));
    snprintf(title, sizeof title, "Table 2 on the CPU: Amdahl model vs observed, C reference, %d layer%s, P = %d, "
             "S = %d, B = %d", CPU_LAYERS, CPU_LAYERS > 1 ? "s" : "", P, S, B);
    table_begin(title, cols, 17, "device");
    for (int mi = 0; mi < 3; mi++) {
        const ModelSpec *ms_ = &MODELS[mi];
        const Qwen3Config *c = &ms_->cfg;
        double d = c->hidden_size, di = c->intermediate_size, ms[3], att_ms, f_c, f_t, r;
        int Nc = 0, N = b.n_tokens, QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
        Qwen3Model m;
        Row row = {0};
        if (only && only != ms_) continue;
        if (quick && mi > 0) continue;                        /* --quick: Qwen3-0.6B's width only */
        fprintf(stderr, "bench: table 2 --cpu, %s width, %d reps\n", ms_->name, reps);
        if (cpu_model(&m, ms_)) { rx_batch_free(&b); return 1; }
        double cpu_ms[3];
        int rc = cpu_time_modes(&m, &b, reps, ms, cpu_ms, &Nc, NULL, NULL);
        qwen3_free(&m);
        if (rc) { rx_batch_free(&b); return 1; }
        {   /* attention alone at the baseline layout: N query rows, keys t0..i of the same sequence */
            uint64_t rng = SEED;
            float *q = malloc((size_t)N * QD * sizeof *q), *kv = malloc((size_t)N * KVD * sizeof *kv),
                  *o = malloc((size_t)N * QD * sizeof *o);
            int32_t *start = malloc((size_t)N * sizeof *start);
            double t[16];
            if (!q || !kv || !o || !start) {
                fprintf(stderr, "bench: out of host memory\n");
                rx_batch_free(&b);
                return 1;
            }
            for (size_t i = 0; i < (size_t)N * QD; i++) q[i] = (float)(splitmix(&rng) % 2001) / 1000.0f - 1.0f;
            for (size_t i = 0; i < (size_t)N * KVD; i++) kv[i] = (float)(splitmix(&rng) % 2001) / 1000.0f - 1.0f;
            for (int s = 0; s < b.n_seqs; s++)
                for (int i = b.cu_seqlens[s]; i < b.cu_seqlens[s + 1]; i++) start[i] = b.cu_seqlens[s];
            for (int k = 0; k < reps && k < 16; k++) {
                double t0 = now_s();
                rx_attention_ref(q, kv, kv, o, N, NULL, start, NULL, c->n_heads, c->n_kv_heads, c->head_dim);
                t[k] = 1e3 * (now_s() - t0);
            }
            att_ms = CPU_LAYERS * median(t, reps < 16 ? reps : 16);
            free(q); free(kv); free(o); free(start);
        }
        r = (double)N / Nc;
        f_c = (8 * d * d + 6 * d * di) / (8 * d * d + 6 * d * di + 4.0 * L * d);
        f_t = fmax(0.0, 1.0 - att_ms / ms[0]);
        cell(&row, "%s", ms_->name); cell(&row, "%d", N); cell(&row, "%d", Nc); cell(&row, "%.2f", r);
        cell(&row, "%.3f", f_c); cell(&row, "%.2f", amdahl(f_c, r)); cell(&row, "%.3f", f_t);
        cell(&row, "%.2f", amdahl(f_t, r)); cell(&row, "%.2f", ms[0] / ms[1]); cell(&row, "%.2f", ms[0] / ms[2]);
        cell(&row, "%.0f", ms[0]); cell(&row, "%.0f", att_ms); cell(&row, "%.0f", ms[1]); cell(&row, "%.0f", ms[2]);
        cell(&row, "%.2f", ms_->t2.f_c); cell(&row, "%.2f", ms_->t2.predicted); cell(&row, "%.2f", ms_->t2.observed);
        table_row(&row, lead);
    }
    rx_batch_free(&b);
    printf("\nf_c (FLOPs) = (8d^2 + 6 d d_int) / (8d^2 + 6 d d_int + 4 L d), L = %d (the paper's formula); f_c (time) "
           "= 1 - attention ms / base ms,\nattention timed alone (rx_attention_ref, baseline layout, x %d layer%s); "
           "predicted = 1 / ((1 - f_c) + f_c / r). Medians of %d.\nThe paper's columns: its Table 2 (H100, Qwen3 at "
           "full depth, P = 2048, S = 256, B = 32), not a measurement of this code.\n\n", L, CPU_LAYERS,
           CPU_LAYERS == 1 ? "" : "s", reps);
    return 0;
}

/* The reranking workload on the CPU (--workload reranker --cpu): reranker_batch's synthetic MS MARCO-shaped requests,
 * variants A and B, `pairs` (query, passage) pairs each, on the C reference at Qwen3-0.6B's width (cpu_model: its
 * ids folded into CPU_VOCAB). Default 16 pairs: gamma hardly depends on the count (the shared head is ~100 tokens, each
 * pair's own ~150), and 64, the paper's requests, take four times as long. Each forward scored as --score scores it,
 * Qwen3-Reranker's ids for "yes" and "no" folded like the batch; every mode's scores equal baseline's (checked). */
enum { RR_YES = 9693, RR_NO = 2152 };   /* Qwen3-Reranker's "yes" and "no" */
static int cpu_reranker(int pairs, int reps)
{
    static const Col cols[] = {
        {"variant", "variant"}, {"pairs", "pairs"}, {"N", "N"}, {"N'", "N_compact"}, {"gamma", "gamma"},
        {"base ms", "base_ms"}, {"radix ms", "radix_ms"}, {"compact ms", "compact_ms"}, {"radix x", "radix_x"},
        {"compact x", "compact_x"}, {"base CPU ms", "base_cpu_ms"}, {"radix CPU ms", "radix_cpu_ms"},
        {"compact CPU ms", "compact_cpu_ms"}, {"radix x CPU", "radix_x_cpu"}, {"compact x CPU", "compact_x_cpu"},
        {"scores == base", "scores_equal"}, {"paper gamma", "paper_gamma"},
        {"paper TEI p50 x (Table 3)", "paper_t3_x"}, {"paper TEI mean x (Table 1)", "paper_t1_x"}};
    const int32_t yes_no[2] = {cpu_id(RR_YES), cpu_id(RR_NO)};
    const PaperT3 *p = &MODELS[0].t3;
    char detail[100], lead[200];
    Qwen3Model m;
    snprintf(detail, sizeof detail, "synthetic MS MARCO-shaped requests of %d pairs", pairs);
    if (cpu_06b_table(&m, lead, "Reranking", detail, cols, 19)) return 1;
    for (int flipped = 0; flipped < 2; flipped++) {
        double ms[3], cpu_ms[3];
        float *scores = malloc(pairs * sizeof *scores);
        int Nc = 0, rc;
        RxBatch b;
        Row r = {0};
        fprintf(stderr, "bench: reranker --cpu, variant %c, %d pairs, %d reps\n", "AB"[flipped], pairs, reps);
        if (!scores || reranker_batch(&b, flipped, pairs, SEED + 100 * flipped)) {
            free(scores);
            qwen3_free(&m);
            return 1;
        }
        for (int i = 0; i < b.n_tokens; i++) b.input_ids[i] = cpu_id(b.input_ids[i]);
        rc = cpu_time_modes(&m, &b, reps, ms, cpu_ms, &Nc, yes_no, scores);
        cell(&r, "%s", flipped ? "B flipped" : "A query first"); cell(&r, "%d", pairs); cell(&r, "%d", b.n_tokens);
        cell(&r, "%d", Nc); cell(&r, "%.3f", (double)Nc / b.n_tokens);
        cell(&r, "%.0f", ms[0]); cell(&r, "%.0f", ms[1]); cell(&r, "%.0f", ms[2]);
        cell(&r, "%.2f", ms[0] / ms[1]); cell(&r, "%.2f", ms[0] / ms[2]);
        cell(&r, "%.0f", cpu_ms[0]); cell(&r, "%.0f", cpu_ms[1]); cell(&r, "%.0f", cpu_ms[2]);
        cell(&r, "%.2f", cpu_ms[0] / cpu_ms[1]); cell(&r, "%.2f", cpu_ms[0] / cpu_ms[2]);
        cell(&r, "%d of %d", pairs, pairs); cell(&r, "%.2f", flipped ? p->gamma_b : p->gamma_a);
        cell(&r, "%.2f", flipped ? p->base_b / p->radix_b : p->base_a / p->radix_a);
        cell_num(&r, "%.2f", flipped ? -1 : PAPER_T1_06B);
        rx_batch_free(&b);
        free(scores);
        if (rc) { qwen3_free(&m); return 1; }
        table_row(&r, lead);
    }
    qwen3_free(&m);
    printf("\nSYNTHETIC: random token ids in the shape of the paper's MS MARCO requests (passages 75-200 tokens, "
           "65-200 flipped), %d pairs a request;\nforward pass only (qwen3_forward_ref_last), each mode the median of "
           "%d after an untimed one; x = baseline ms / mode ms, of wall time, and x CPU\nof the process's CPU time "
           "(all threads; on a busy machine the steadier). Scored with --score's code (rx_rerank_scores, ids\n%d and "
           "%d): every mode's scores equal baseline's bit for bit (checked; a difference is an error, not a row). The "
           "paper's\ncolumns: Qwen3-0.6B in TEI on the real data set, end to end (Table 3: p50, Table 1: mean over "
           "1287 requests of 64\npairs), an H100, tokenization, batching and HTTP included: compare trends, not "
           "values.\n\n", pairs, reps, RR_YES, RR_NO);
    return 0;
}

/* The CPU Table 4 as SVG: speedup over baseline against the compression N/N' = 1/gamma (linear axes), this run's
 * radix (circles) and compact (squares) beside all fifteen rows of the paper's Table 4 (diamonds, the paper's
 * H100 and Qwen3-4B). x is recomputed from each Point's P and S at batch size B. */
static int write_cpu_svg(const char *path, const Point *pt, int n, int B, const char *title)
{
    const double W = 800, H = 480, X0 = 70, X1 = 560, Y0 = 60, Y1 = 410;
    double xmax = 8, ymax = 5;
    FILE *f = rx_output_open(path);                      /* renamed onto path when the run succeeds */
    if (!f) { fprintf(stderr, "bench: %s\n", radix_error()); return 1; }
    for (int i = 0; i < n; i++) {
        double c = (double)B * (pt[i].P + pt[i].S) / (pt[i].P + B * pt[i].S);
        xmax = fmax(xmax, ceil(c));
        ymax = fmax(ymax, ceil(fmax(pt[i].radix, pt[i].compact)));
    }
#define SX(v) (X0 + ((v) - 1.0) / (xmax - 1.0) * (X1 - X0))
#define SY(v) (Y1 - (v) / ymax * (Y1 - Y0))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
               "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"13\">\n<rect width=\"100%%\" "
               "height=\"100%%\" fill=\"white\"/>\n<text x=\"%g\" y=\"30\" text-anchor=\"middle\" font-size=\"15\" "
               "font-weight=\"bold\">", W, H, W, H, W / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    for (int v = 0; v <= ymax; v++)
        fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e3e3e3\"/><text x=\"%g\" y=\"%.1f\" "
                   "text-anchor=\"end\">%d</text>\n", X0, SY(v), X1, SY(v), X0 - 8, SY(v) + 4, v);
    for (int v = 1; v <= xmax; v++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#e3e3e3\"/><text x=\"%.1f\" y=\"%g\" "
                   "text-anchor=\"middle\">%d</text>\n", SX(v), Y0, SX(v), Y1, SX(v), Y1 + 20, v);
    fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"2 3\"/>\n"
               "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n"
               "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">compression N/N' = 1/gamma</text>\n"
               "<text transform=\"translate(26 %g) rotate(-90)\" text-anchor=\"middle\">speedup over baseline (x)"
               "</text>\n", X0, SY(1.0), SX(fmin(xmax, ymax)), SY(fmin(xmax, ymax)), X0, Y0, X1 - X0, Y1 - Y0,
            (X0 + X1) / 2, Y1 + 42, (Y0 + Y1) / 2);
    for (size_t i = 0; i < sizeof PAPER_T4 / sizeof *PAPER_T4; i++) {   /* the paper's points: diamonds */
        const PaperT4 *p = &PAPER_T4[i];
        double x = SX(32.0 * (p->P + p->S) / (p->P + 32.0 * p->S)), y = SY(p->speedup);
        fprintf(f, "<path d=\"M%.1f %.1f l5 5 l-5 5 l-5 -5 z\" fill=\"none\" stroke=\"#888\" stroke-width=\"1.5\"/>\n",
                x, y - 5);
    }
    for (int i = 0; i < n; i++) {
        double x = SX((double)B * (pt[i].P + pt[i].S) / (pt[i].P + B * pt[i].S));
        marker(f, 0, x, SY(pt[i].radix), "#1f5fa8");
        marker(f, 1, x, SY(pt[i].compact), "#f39c12");
    }
    fprintf(f, "<circle cx=\"%g\" cy=\"%g\" r=\"4\" fill=\"#1f5fa8\"/><text x=\"%g\" y=\"%g\">radix, this CPU</text>\n"
               "<rect x=\"%g\" y=\"%g\" width=\"7\" height=\"7\" fill=\"#f39c12\"/><text x=\"%g\" y=\"%g\">compact, "
               "this CPU</text>\n<path d=\"M%g %g l5 5 l-5 5 l-5 -5 z\" fill=\"none\" stroke=\"#888\" "
               "stroke-width=\"1.5\"/><text x=\"%g\" y=\"%g\">the paper's Table 4</text>\n<text x=\"%g\" y=\"%g\" "
               "font-size=\"11\" fill=\"#555\">(radix; Qwen3-4B, H100, fp16,</text>\n<text x=\"%g\" y=\"%g\" "
               "font-size=\"11\" fill=\"#555\">B = 32: the paper's numbers)</text>\n<text x=\"%g\" y=\"%g\" "
               "font-size=\"11\" fill=\"#555\">dotted: x = 1 and x = N/N'</text>\n</svg>\n",
            X1 + 30, Y0 + 10, X1 + 42, Y0 + 14, X1 + 26.5, Y0 + 28.5, X1 + 42, Y0 + 36, X1 + 30, Y0 + 49, X1 + 42,
            Y0 + 58, X1 + 42, Y0 + 74, X1 + 42, Y0 + 88, X1 + 30, Y0 + 110);
#undef SX
#undef SY
    if (!rx_output_close(f, "bench: wrote %s", path)) return 0;
    fprintf(stderr, "bench: %s\n", radix_error());
    return 1;
}

/* ---- Part II: generation on the cache, a multi-turn chat ------------------------------------------------------ */
/* 8 conversations of 3 turns on a random Qwen3 of the demo's shape (vocab 2048, hidden 256, 4 layers): turn 1 is a
 * shared 32-token system prompt and 16 tokens of its own; turns 2 and 3 (@K) repeat the conversation so far and add
 * 8 tokens. Each turn generates 16 tokens (greedy, no eos), 8 requests running at once, page size 8. With the cache
 * off every turn prefills its whole prompt; hash and radix find the system prompt and the earlier turns, generated
 * tokens included. A step mixes prompts and decode tokens, so both rates are over the run's whole time. */
#define GEN_CONV 8
#define GEN_TURNS 3
static int generate_table(int reps, int gpu, int quick)
{
    static const Col cols[] = {
        {"cache", "cache"}, {"prompt tok", "prompt_tokens"}, {"cached tok", "cached_tokens"},
        {"of them generated", "cached_generated"}, {"hit rate", "hit_rate"}, {"generated tok", "generated_tokens"},
        {"ms", "ms"}, {"CPU ms", "cpu_ms"}, {"prompt tok/s", "prompt_tok_s"}, {"generated tok/s", "generated_tok_s"},
        {"x off", "x_off"}};
    static const RxCacheKind KINDS[3] = {RX_CACHE_OFF, RX_CACHE_HASH, RX_CACHE_RADIX};
    const Qwen3Config cfg = {.vocab_size = 2048, .hidden_size = 256, .intermediate_size = 768, .n_layers = 4,
                             .n_heads = 8, .n_kv_heads = 4, .head_dim = 64, .max_position_embeddings = 4096,
                             .rope_theta = 1e6, .rms_norm_eps = 1e-6, .tie_word_embeddings = 1};
    const int n = GEN_CONV * GEN_TURNS, max_new = 16;
    int32_t toks[GEN_CONV * GEN_TURNS][48], after[GEN_CONV * GEN_TURNS], lens[GEN_CONV * GEN_TURNS];
    const int32_t *ptr[GEN_CONV * GEN_TURNS];
    uint64_t rng = SEED;
    for (int i = 0; i < n; i++) {                   /* request i: turn i / GEN_CONV of conversation i % GEN_CONV */
        int turn = i / GEN_CONV;
        lens[i] = turn ? 8 : 48;
        after[i] = turn ? i - GEN_CONV : -1;
        for (int k = 0; k < lens[i]; k++)
            toks[i][k] = !turn && k < 32 ? 100 + k : 1 + (int32_t)(splitmix(&rng) % (cfg.vocab_size - 1));
        ptr[i] = toks[i];
    }
    Qwen3Model m;
    GpuModel *g = NULL;
    char dev[128];
    int32_t *out = malloc(sizeof(int32_t) * (size_t)n * max_new);
    int *n_out = malloc(sizeof(int) * (size_t)n);
    if (qwen3_random(&m, &cfg, SEED)) { fprintf(stderr, "bench: qwen3_random: %s\n", radix_error()); return 1; }
    if (gpu && gpu_model_upload(&g, &m)) {
        fprintf(stderr, "bench: gpu_model_upload: %s\n", radix_error());
        qwen3_free(&m);
        return 1;
    }
    cpu_name(dev, sizeof dev);
    if (g) snprintf(dev, sizeof dev, "%s", gpu_device_name());
    if (g) printf("gpu: %s; gpu_prefill (bf16), ms = the steps' GPU time (CUDA events).", dev);
    else printf("cpu: %s, %d thread%s (OMP_NUM_THREADS); the C reference (fp32).", dev, rx_threads(0),
                rx_threads(0) == 1 ? "" : "s");
    printf(" A random Qwen3 (vocab 2048, hidden 256, 4 layers);\n%d conversations x %d turns, --generate %d, batch 8, "
           "page size 8, mode compact; median of %d runs; CPU ms: this process's CPU time.\n\n", GEN_CONV, GEN_TURNS,
           max_new, reps);
    table_begin(g ? "Part II: generation, a multi-turn chat, off vs hash vs radix (GPU timings)"
                  : "Part II: generation, a multi-turn chat, off vs hash vs radix (CPU timings)", cols, 11,
                g ? "gpu" : "cpu");
    RxServeStats st[3];
    double ms[3], cpu_ms[3], *t = malloc(sizeof(double) * 2 * (size_t)reps * 3);
    int rc = 0;
    for (int round = -1; round < reps && !rc; round++)
        for (int k = 0; k < 3 && !rc; k++) {
            RxGenerate gen = {.max_new = max_new, .top_p = 1, .out = out, .n_out = n_out};
            RxServeOptions o = {.cache = KINDS[k], .page_size = 8, .batch = 8, .mode = RX_COMPACT, .model_id = 1,
                                .gpu = g, .gen = &gen, .after = after};
            struct timespec c0, c1;
            char run[32] = "warm-up, not timed";                 /* progress: a warm-up of each takes seconds */
            if (round >= 0) snprintf(run, sizeof run, "timed run %d of %d", round + 1, reps);
            fprintf(stderr, "bench: generation, cache %s: %s (%d requests x %d tokens)\n",
                    rx_cache_kind_name(KINDS[k]), run, n, max_new);
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
            rc = rx_serve(&m, ptr, lens, n, &o, NULL, NULL, NULL, &st[k]);
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
            if (rc) fprintf(stderr, "bench: rx_serve failed: %s\n", radix_error());
            if (round < 0 || rc) continue;
            t[(k * reps + round) * 2] = g ? st[k].gpu_ms : st[k].ms;
            t[(k * reps + round) * 2 + 1] = (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) * 1e-6;
        }
    for (int k = 0; k < 3 && !rc; k++) {
        double w[64], c[64];
        for (int r = 0; r < reps && r < 64; r++) {
            w[r] = t[(k * reps + r) * 2];
            c[r] = t[(k * reps + r) * 2 + 1];
        }
        ms[k] = median(w, reps < 64 ? reps : 64);
        cpu_ms[k] = median(c, reps < 64 ? reps : 64);
    }
    for (int k = 0; k < 3 && !rc; k++) {
        Row row = {0};
        cell(&row, "%s", rx_cache_kind_name(KINDS[k])); cell(&row, "%ld", st[k].prompt_tokens);
        cell(&row, "%ld", st[k].cached_tokens); cell(&row, "%ld", st[k].cached_generated);
        cell(&row, "%.1f%%", 100.0 * st[k].cached_tokens / st[k].prompt_tokens);
        cell(&row, "%ld", st[k].generated_tokens); cell(&row, "%.1f", ms[k]); cell(&row, "%.1f", cpu_ms[k]);
        cell(&row, "%.0f", st[k].prompt_tokens / ms[k] * 1e3); cell(&row, "%.0f", st[k].generated_tokens / ms[k] * 1e3);
        cell(&row, "%.2fx", ms[0] / ms[k]);
        table_row(&row, dev);
    }
    if (!rc) printf("\nHit rate: cached / prompt tokens; \"of them generated\": cached tokens an earlier turn "
                    "generated.\n%s\n", quick ? "(--quick: fewer repeats)" : "");
    free(t);
    free(out);
    free(n_out);
    gpu_model_free(g);
    qwen3_free(&m);
    return rc;
}

/* ---- main: arguments, the GPU check, dispatch ---------------------------------------------------------------- */
static const char *USAGE =
    "usage: bench (--table 2|4|5|6 [--cpu] | --attention | --workload reranker [--cpu] | --prefix-cache [--gpu]\n"
    "             | --generate [--gpu]\n"
    "             | --replot CSV --svg FILE) [options]\n"
    "  --table 4             Qwen3-4B forward latency, B = 32, prefix P x suffix S (the paper's Table 4); needs a GPU\n"
    "  --table 2             Amdahl model vs observed speedup at P = 2048, S = 256, three models (Table 2); GPU\n"
    "  --table 4 --cpu       Table 4 on the CPU: the C reference at Qwen3-0.6B's width, 1 layer, B = 8 (first the\n"
    "                        matmul's GFLOP/s); needs no GPU. OMP_NUM_THREADS sets the threads\n"
    "  --table 2 --cpu       Table 2 on the CPU: f_c from FLOPs and from time, the three widths; needs no GPU\n"
    "  --table 5             CPU index construction, radix_index_build, one thread (Table 5); needs no GPU\n"
    "  --table 6             gather/scatter kernel vs device copy bandwidth (Table 6); GPU\n"
    "  --attention           attention alone, flash (BM 64, BM 128) and naive kernels, Table 4 shapes; GPU\n"
    "  --workload reranker   synthetic MS MARCO-shaped reranking batches, variants A and B (flipped); GPU\n"
    "  --workload reranker --cpu   the same on the C reference at Qwen3-0.6B's width, 1 layer, N pairs a request\n"
    "                        (--pairs, default 16, 4 with --quick), scored as radixmlp --score; needs no GPU\n"
    "  --prefix-cache        Part II: the KV prefix cache, six radix vs hash scenarios, off vs hash vs radix, on a\n"
    "                        random Qwen3 of fixtures/tiny-bf16's shape; the C reference (no GPU needed)\n"
    "  --prefix-cache --gpu  the same served on the GPU (gpu_prefill), GPU times\n"
    "  --generate            Part II: generation on the cache, a multi-turn chat (8 x 3 turns, 16 tokens each),\n"
    "                        off vs hash vs radix: prompt and generated tokens/s; the C reference (no GPU needed)\n"
    "  --generate --gpu      the same on the GPU (gpu_prefill), GPU times\n"
    "  --replot CSV          re-plot a CSV written by --table 4 --csv, or fixtures/table4-paper.csv; needs --svg\n"
    "options, each at most once, and only where it applies (anything else is an error):\n"
    "  --model 0.6b|4b|8b    --table 4, --attention (default 4b); --table 2 [--cpu] and --workload: that model only\n"
    "  --pairs N             --workload reranker --cpu: (query, passage) pairs a request, 1 to 64 (the paper's)\n"
    "  --reps N              timed repeats after one warm-up (default 5, 3 with --cpu, 15 for --prefix-cache, 2\n"
    "                        with --quick; x4 in Table 6); not --table 5 (timed for 0.2 s each) or --replot\n"
    "  --quick               fewer rows and repeats, for smoke runs; not --replot\n"
    "  --csv FILE            also write the table as CSV (one header row); not --replot\n"
    "  --svg FILE            --table 4 [--cpu] or --replot: plot the speedups as SVG\n"
    "  --help                this text\n"
    "Times are printed with the number of CPU threads they ran on (OMP_NUM_THREADS, 1 to 1024; on a busy\n"
    "machine OMP_WAIT_POLICY=passive keeps waiting threads off other processes' cores).\n"
    "Results go to stdout as markdown, progress to stderr. Outputs never overwrite an input, nor stdout\n"
    "(/dev/stdout, or the file stdout is sent to), but --replot, which prints nothing there, may plot to it.\n"
    "Exit status: 0 ok; 2 a wrong command line (a flag, a value, an output path); 1 bad data or a failed run.\n";

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "bench: %s%s%s%s (see --help)\n", msg, arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
    return 2;
}

/* What a command line runs, and for each flag the runs it applies to: any other flag is an error. */
enum { R_T4, R_T4_CPU, R_T2, R_T2_CPU, R_T5, R_T6, R_ATTENTION, R_RERANKER, R_RERANKER_CPU, R_CACHE, R_CACHE_GPU,
       R_GEN, R_GEN_GPU, R_REPLOT, N_RUNS };
static const char *const RUN_NAME[N_RUNS] = {"--table 4", "--table 4 --cpu", "--table 2", "--table 2 --cpu",
    "--table 5", "--table 6", "--attention", "--workload reranker", "--workload reranker --cpu", "--prefix-cache",
    "--prefix-cache --gpu", "--generate", "--generate --gpu", "--replot"};
enum { F_TABLE, F_WORKLOAD, F_ATTENTION, F_CACHE, F_GENERATE, F_REPLOT, F_CPU, F_GPU, F_MODEL, F_PAIRS, F_REPS, F_QUICK,
       F_CSV, F_SVG, N_FLAGS };
#define ON(r) (1 << (r))
#define ALL ((1 << N_RUNS) - 1)
static const struct { const char *name; int takes_value, runs; } FLAGS[N_FLAGS] = {   /* in the enum's order */
    {"--table", 1, ALL}, {"--workload", 1, ALL}, {"--attention", 0, ALL}, {"--prefix-cache", 0, ALL},
    {"--generate", 0, ALL}, {"--replot", 1, ALL}, {"--cpu", 0, ON(R_T4_CPU) | ON(R_T2_CPU) | ON(R_RERANKER_CPU)},
    {"--gpu", 0, ON(R_CACHE_GPU) | ON(R_GEN_GPU)},
    {"--model", 1, ON(R_T4) | ON(R_T2) | ON(R_T2_CPU) | ON(R_ATTENTION) | ON(R_RERANKER)},
    {"--pairs", 1, ON(R_RERANKER_CPU)},
    {"--reps", 1, ALL & ~ON(R_T5) & ~ON(R_REPLOT)}, {"--quick", 0, ALL & ~ON(R_REPLOT)},
    {"--csv", 1, ALL & ~ON(R_REPLOT)}, {"--svg", 1, ON(R_T4) | ON(R_T4_CPU) | ON(R_REPLOT)},
};

int main(int argc, char **argv)
{
    const char *val[N_FLAGS] = {NULL};   /* each flag given: its value, or its own name if it takes none */
    const ModelSpec *model = NULL;
    int table = 0, reps = 0, run, rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int f = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            if (!rx_output_close(stdout, NULL)) return 0;
            fprintf(stderr, "bench: %s\n", radix_error());
            return 1;
        }
        while (f < N_FLAGS && strcmp(a, FLAGS[f].name)) f++;
        if (f == N_FLAGS) return usage_error("unknown option", a);
        if (val[f]) return usage_error("this option is given twice:", a);
        if (FLAGS[f].takes_value && i + 1 == argc) return usage_error("this option needs a value:", a);
        if (FLAGS[f].takes_value && !argv[i + 1][0]) return usage_error("this option needs a value, not \"\":", a);
        val[f] = FLAGS[f].takes_value ? argv[++i] : a;
    }
    if (rx_check_env()) return usage_error(radix_error(), NULL);          /* a bad $RADIXMLP_CPU or $OMP_NUM_THREADS */
    if (val[F_TABLE] && (strlen(val[F_TABLE]) != 1 || !strchr("2456", val[F_TABLE][0])))
        return usage_error("--table takes 2, 4, 5 or 6, not", val[F_TABLE]);
    if (val[F_WORKLOAD] && strcmp(val[F_WORKLOAD], "reranker"))
        return usage_error("--workload takes reranker, not", val[F_WORKLOAD]);
    if (!!val[F_TABLE] + !!val[F_WORKLOAD] + !!val[F_ATTENTION] + !!val[F_CACHE] + !!val[F_GENERATE] +
        !!val[F_REPLOT] != 1)
        return usage_error("choose exactly one of --table N, --attention, --workload reranker, --prefix-cache, "
                           "--generate, --replot CSV", NULL);
    table = val[F_TABLE] ? val[F_TABLE][0] - '0' : 0;
    run = table == 4 ? (val[F_CPU] ? R_T4_CPU : R_T4) : table == 2 ? (val[F_CPU] ? R_T2_CPU : R_T2)
        : table == 5 ? R_T5 : table == 6 ? R_T6 : val[F_ATTENTION] ? R_ATTENTION
        : val[F_WORKLOAD] ? (val[F_CPU] ? R_RERANKER_CPU : R_RERANKER)
        : val[F_CACHE] ? (val[F_GPU] ? R_CACHE_GPU : R_CACHE) : val[F_GENERATE] ? (val[F_GPU] ? R_GEN_GPU : R_GEN)
        : R_REPLOT;
    for (int f = 0; f < N_FLAGS; f++)
        if (val[f] && !(FLAGS[f].runs & ON(run))) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s does not apply to %s", FLAGS[f].name, RUN_NAME[run]);
            return usage_error(msg, NULL);
        }
    if (run == R_REPLOT && !val[F_SVG]) return usage_error("--replot needs --svg FILE", NULL);
    for (int m = 0; val[F_MODEL] && m < 3; m++) if (!strcmp(val[F_MODEL], MODELS[m].key)) model = &MODELS[m];
    if (val[F_MODEL] && !model) return usage_error("--model takes 0.6b, 4b or 8b, not", val[F_MODEL]);
    if (val[F_REPS]) {
        char *end;
        long n = strtol(val[F_REPS], &end, 10);
        if (*end || end == val[F_REPS] || n < 1 || n > 10000)
            return usage_error("--reps takes a count from 1 to 10000, not", val[F_REPS]);
        reps = (int)n;
    }
    int pairs = val[F_QUICK] ? 4 : 16;   /* --workload reranker --cpu */
    if (val[F_PAIRS]) {
        char *end;
        long n = strtol(val[F_PAIRS], &end, 10);
        if (*end || end == val[F_PAIRS] || n < 1 || n > RR_PAIRS)
            return usage_error("--pairs takes a count from 1 to 64, not", val[F_PAIRS]);
        pairs = (int)n;
    }
    {   /* an output never overwrites the input (--replot) or the other output, however the paths are spelled */
        const char *csv = val[F_CSV], *svg = val[F_SVG], *in = val[F_REPLOT];
        if (svg && in && rx_same_file(svg, in)) return usage_error("--svg names the --replot input file", svg);
        if (svg && csv && rx_same_file(svg, csv)) return usage_error("--svg and --csv name the same file", svg);
        if (csv && rx_is_stdout(csv)) return usage_error("--csv names stdout, where the tables go:", csv);
        if (svg && run != R_REPLOT && rx_is_stdout(svg))   /* --replot prints nothing there: its plot may go */
            return usage_error("--svg names stdout, where the tables go:", svg);
    }
    const int quick = !!val[F_QUICK], cpu = !!val[F_CPU], gpu = !!val[F_GPU];
    const char *csv = val[F_CSV], *svg = val[F_SVG];
    if (!reps) reps = quick ? 2 : run == R_CACHE || run == R_CACHE_GPU ? 15 : cpu ? 3 : 5;   /* as --help says */
    if (run == R_REPLOT) {
        Point pts[64];
        int n;
        char title[256] = "";
        rc = read_t4_csv(val[F_REPLOT], pts, 64, &n, title, sizeof title) || write_svg(svg, pts, n, title);
    } else if (!cpu && run != R_T5 && run != R_CACHE && run != R_GEN && !gpu_available()) {
        fprintf(stderr, "bench: %s needs a CUDA device: %s%s%s\n", RUN_NAME[run], radix_error(),
                run == R_T4 || run == R_T2 ? "; on the CPU: add --cpu" : "",
                run == R_CACHE_GPU || run == R_GEN_GPU ? "; on the CPU: leave out --gpu" : "");
        return 1;
    } else if (csv && !(g_csv = rx_output_open(csv))) {
        fprintf(stderr, "bench: %s\n", radix_error());
        return 1;
    } else if (cpu) {   /* the C reference: no GPU needed */
        print_cpu();
        rc = run == R_RERANKER_CPU ? cpu_reranker(pairs, reps) : cpu_matmul_rate(quick);
        if (!rc && table == 4) {
            Point pts[16];
            int n = 0;
            char title[256], name[128];
            rc = cpu_table4(reps, quick, pts, &n);
            cpu_name(name, sizeof name);
            snprintf(title, sizeof title, "RadixMLP on the CPU: Qwen3-0.6B width, B = %d (%s, %d threads)",
                     quick ? 4 : 8, name, rx_threads(0));
            if (!rc && svg) rc = write_cpu_svg(svg, pts, n, quick ? 4 : 8, title);
        } else if (!rc && table == 2) rc = cpu_table2(model, reps, quick);
    } else {
        if (run != R_T5 && run != R_CACHE && run != R_GEN) print_device();
        if (table == 4) {
            Point pts[16];
            int n = 0;
            char title[256], dev[128];
            const ModelSpec *m = model ? model : &MODELS[1];
            rc = table4(m, reps, quick, pts, &n);
            csv_safe(dev, sizeof dev, gpu_device_name());
            snprintf(title, sizeof title, "RadixMLP speedup, %s, B = 32 (%s)", m->name, dev);
            if (!rc && svg) rc = write_svg(svg, pts, n, title);
        } else if (run == R_ATTENTION) rc = attention_bench(model ? model : &MODELS[1], reps, quick);
        else if (table == 2) rc = table2(model, reps);
        else if (table == 5) rc = table5(quick);
        else if (table == 6) rc = table6(quick ? reps : 4 * reps);
        else if (run == R_CACHE || run == R_CACHE_GPU) rc = prefix_cache_tables(reps, gpu);
        else if (run == R_GEN || run == R_GEN_GPU) rc = generate_table(reps, gpu, quick);
        else rc = reranker(model, reps, quick);
    }
    /* the tables on stdout, then the CSV; every output replaced only when all are written whole (rx_output_open) */
    if (rx_output_close(stdout, NULL) || (!rc && g_csv && rx_output_close(g_csv, NULL))) {
        fprintf(stderr, "bench: %s\n", radix_error());
        rc = 1;
    }
    if (rx_outputs_finish(!rc, stderr)) {
        fprintf(stderr, "bench: %s\n", radix_error());
        rc = 1;
    }
    return rc ? 1 : 0;
}

/* radixmlp.h - the C API of radixmlp.cu, usable from C99.
 *
 * Token spaces, the one idea to keep in mind while reading:
 *   N  = tokens in the ragged batch (original space, what the user sent)
 *   N' = unique trie nodes          (compact space, what RadixMLP computes on)
 *   gamma = N'/N, compression r = N/N'.
 */
#ifndef RADIXMLP_H
#define RADIXMLP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every function that can fail returns 0 on success and non-zero on failure; the failure's one-sentence
 * explanation (naming the file and tensor where there is one) is then in radix_error(). */
const char *radix_error(void);

/* The one comparison every check uses (the tests, the demo, the benchmark): max |a[i] - b[i]| over i < n, or
 * max |a[i]| when b is NULL. NaN and Inf never pass: the result is NaN as soon as an a[i] or b[i] is NaN or +-Inf,
 * so that `d <= tol` and `d == 0` are both false on a poisoned output; *first_bad (when not NULL) is then the index
 * of the first such element, else n. */
double rx_max_abs_diff(const float *a, const float *b, size_t n, size_t *first_bad);

/* Files, as every command reads and writes them (the CLI and the benchmark alike):
 * rx_read_text: a private copy of a whole input file, at most max_bytes, NUL-terminated; anything but a regular file
 *   (a directory, a FIFO, /dev/zero) is refused at once. Free *text with free().
 * rx_same_file: 1 if two paths name one file however spelled (the same inode, or for a path not yet there, the same
 *   folder and name), so that an output never overwrites an input or another output.
 * rx_is_stdout: 1 if path is the file or pipe stdout goes to however spelled (/dev/stdout, /dev/fd/1, its own name),
 *   /dev/null excepted: an output file there would mix with the text the program prints.
 * rx_output_open: an output file of a run, which replaces path only when all the run's outputs are written whole:
 *   it opens a temporary file beside path (path must outlive the run); rx_output_close flushes and closes it, or
 *   flushes stdout (0, or -1 with "PATH: cannot write: why"), and keeps the line that will say it was written (said,
 *   a printf format, or NULL). rx_outputs_finish(ok, say) then renames each output opened since onto its path when
 *   ok, each was closed and none (stdout included) failed, and prints their lines to say; else it removes them all
 *   and says nothing. A run that fails, or is stopped by SIGINT, SIGTERM, SIGHUP or SIGPIPE
 *   (rx_output_open catches those it finds at their default), leaves every path as it was. An output that is not a
 *   regular file (/dev/null, a FIFO), or is stdout, is written in place. */
#define RX_TMP_PATH 4200
int  rx_read_text(const char *path, size_t max_bytes, char **text, size_t *len);
int  rx_same_file(const char *a, const char *b);
int  rx_is_stdout(const char *path);
FILE *rx_output_open(const char *path);
int  rx_output_close(FILE *f, const char *said, ...) __attribute__((format(printf, 2, 3)));
int  rx_outputs_finish(int ok, FILE *say);

/* ---------------------------------------------------------------------------------------------------------------
 * Algorithm 2: the prefix trie and its compaction indices
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct {
    int n_tokens;     /* N  : tokens in the ragged batch          */
    int n_compact;    /* N' : unique trie nodes                   */
    int32_t *gather;  /* [N'] compact -> first original position  */
    int32_t *scatter; /* [N]  original -> compact                 */
} RadixIndex;

int  radix_index_build(RadixIndex *ix, const int32_t *input_ids, const int32_t *position_ids,
                       const int32_t *cu_seqlens, int n_seqs);   /* returns 0 on success */
void radix_index_free(RadixIndex *ix);
/* Compact mode's query layout, cu_q [n_seqs+1]: the positions of sequence s that no earlier sequence holds are its
 * last L_s - p_s ones, and their compact rows are the block cu_q[s] .. cu_q[s+1]-1, in order (a fact about the trie's
 * numbering, checked here). Fully shared sequences get empty blocks. Returns 0, or -1 (internal error). */
int  radix_compact_cu_q(const RadixIndex *ix, const int32_t *cu_seqlens, int n_seqs, int32_t *cu_q);

/* Draws the trie of a (small) batch as ASCII, one line per node, e.g. for the paper's toy example:
 *   root
 *   `-- c0..c1: 2 tokens @0..1  (2 seqs)       a chain every sequence through it follows to its end
 *       |-- c2: token 3 @2  (1 seq)
 *       `-- c3: token 4 @2  (1 seq)                                                                     */
void radix_draw_trie(FILE *out, const RadixIndex *ix, const int32_t *input_ids, const int32_t *position_ids,
                     const int32_t *cu_seqlens, int n_seqs);

/* ---------------------------------------------------------------------------------------------------------------
 * A ragged batch: sequences concatenated, no padding
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct {
    int n_seqs;
    int n_tokens;           /* N                                        */
    int32_t *input_ids;     /* [N]                                      */
    int32_t *position_ids;  /* [N]   0..L-1 within each sequence        */
    int32_t *cu_seqlens;    /* [n_seqs+1], cu_seqlens[0] = 0, [n_seqs] = N */
} RxBatch;

/* Builds a batch from n_seqs arrays of token ids (positions 0..L-1). */
int  rx_batch_make(RxBatch *b, const int32_t *const *seqs, const int *lens, int n_seqs);
/* Reads a tokens file: one sequence per line, token ids separated by spaces. */
int  rx_batch_read(RxBatch *b, const char *path);
/* Reads a requests file: rx_batch_read's lines, each of which may begin with @K (K: an earlier line, from 1), a turn
 * that continues request K's conversation; *after [n_seqs] (malloc'd): K - 1, or -1 for a line without @K. */
int  rx_requests_read(RxBatch *b, int32_t **after, const char *path);
void rx_batch_free(RxBatch *b);

/* ---------------------------------------------------------------------------------------------------------------
 * Qwen3 checkpoints (safetensors) and the model description
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum { RX_F32 = 0, RX_F16 = 1, RX_BF16 = 2, RX_OTHER_DTYPE = 3 } RxDtype;

#define RX_MAX_RANK 8
typedef struct {
    char *name;                  /* as in the file, e.g. "model.layers.0.mlp.up_proj.weight" */
    RxDtype dtype;
    const char *dtype_name;      /* "BF16", "I64", ...                                       */
    int rank;
    int64_t shape[RX_MAX_RANK];
    const void *data;            /* little-endian, row-major; inside an mmap or owned memory  */
    size_t nbytes;
    const char *file;            /* the file it came from, for error messages                 */
} RxTensor;

#define RX_MAX_EOS 8
typedef struct {
    int vocab_size, hidden_size, intermediate_size, n_layers;
    int n_heads, n_kv_heads, head_dim;
    int max_position_embeddings;
    double rope_theta, rms_norm_eps;
    int tie_word_embeddings;
    int32_t eos_token_id[RX_MAX_EOS]; int n_eos;   /* "eos_token_id": an int or a list (absent: none, n_eos 0);
                                                      checked against the vocabulary only where generation stops at
                                                      them (rx_eos_check), so a bad one never blocks a forward   */
} Qwen3Config;
/* generation_config.json (transformers' GenerationConfig), when a checkpoint has one: the end-of-sequence ids, which
 * replace config.json's (generate() reads config.json's only without this file), and the sampling defaults that
 * flags override. */
typedef struct {
    int present;                                   /* the file exists and was read                               */
    int32_t eos_token_id[RX_MAX_EOS]; int n_eos;   /* its "eos_token_id": an int, a list, null or absent          */
    int do_sample;                                 /* -1: absent (or null); else 0 or 1                          */
    double temperature, top_p;                     /* -1: absent (or null)                                       */
    int top_k;                                     /* -1: absent (or null); 0: off, as in transformers          */
} RxGenerationConfig;
int rx_parse_generation_config(RxGenerationConfig *g, const char *json, size_t len, const char *file);
/* Each of ids [n] that is not a token of a vocabulary of vocab: one line naming file, or 0. */
int rx_eos_check(const int32_t *ids, int n, int vocab, const char *file);
/* The bf16 GPU forward's budget against the fp32 C reference, max|gpu - ref| / max|ref|, for model c: it grows with
 * the number of bf16 roundings on a logit's path, 19 per layer and 3 in the head (the formula: radixmlp.cu). */
double rx_bf16_tolerance(const Qwen3Config *c);

typedef struct {             /* views of one decoder layer's weights, [out, in] as nn.Linear stores them */
    const RxTensor *input_norm;     /* [hidden]                              */
    const RxTensor *q_proj;         /* [n_heads*head_dim, hidden]            */
    const RxTensor *k_proj;         /* [n_kv*head_dim, hidden]               */
    const RxTensor *v_proj;         /* [n_kv*head_dim, hidden]               */
    const RxTensor *o_proj;         /* [hidden, n_heads*head_dim]            */
    const RxTensor *q_norm;         /* [head_dim]                            */
    const RxTensor *k_norm;         /* [head_dim]                            */
    const RxTensor *post_norm;      /* [hidden]  post_attention_layernorm    */
    const RxTensor *gate_proj;      /* [intermediate, hidden]                */
    const RxTensor *up_proj;        /* [intermediate, hidden]                */
    const RxTensor *down_proj;      /* [hidden, intermediate]                */
} Qwen3Layer;

typedef struct {
    Qwen3Config cfg;
    const RxTensor *embed;          /* [vocab, hidden]                       */
    Qwen3Layer *layers;             /* [n_layers]                            */
    const RxTensor *final_norm;     /* [hidden]                              */
    const RxTensor *lm_head;        /* [vocab, hidden]; == embed when tied;  NULL for an untied embedding checkpoint
                                       (Qwen3Model: flat names, no lm_head.weight), which gives embeddings only */
    RxGenerationConfig generation;  /* DIR/generation_config.json; .present 0 without one                       */
    /* ownership: the loaded files and tensor table */
    RxTensor *tensors; int n_tensors;
    void *priv;
} Qwen3Model;

/* Loads DIR/config.json (and DIR/generation_config.json when there is one) and DIR/model.safetensors or the shards
 * of DIR/model.safetensors.index.json, validating
 * everything (docs/qwen3.md lists the checks). Weights stay in their file dtype (F32, F16, BF16), memory-mapped. */
int  qwen3_load(Qwen3Model *m, const char *dir);
/* A random model held in memory (fp32, 4 bytes a parameter), for the demo, tests and benchmark: no download. */
int  qwen3_random(Qwen3Model *m, const Qwen3Config *cfg, uint64_t seed);
void qwen3_free(Qwen3Model *m);

/* Converts a tensor's elements (F32, F16 or BF16) to fp32, exactly: both half formats are subsets of fp32. */
void rx_tensor_to_f32(const RxTensor *t, float *dst);

/* The raw parsers, exposed for tests and fuzzing. Each returns 0 or sets radix_error(). */
int  rx_parse_config(Qwen3Config *cfg, const char *json, size_t len, const char *file);
int  rx_parse_safetensors(const uint8_t *bytes, size_t len, const char *file, RxTensor **tensors, int *n_tensors);
int  rx_parse_shard_index(const char *json, size_t len, const char *file, char ***shards, int *n_shards);

/* ---------------------------------------------------------------------------------------------------------------
 * The forward pass (Algorithm 1)
 * ------------------------------------------------------------------------------------------------------------- */
typedef enum {
    RX_BASELINE = 0,  /* every op on the N original rows                                              */
    RX_RADIX    = 1,  /* position-wise ops on N' compact rows; scatter -> attention -> gather (paper)    */
    RX_COMPACT  = 2,  /* everything on N' rows; attention reads keys through I_scatter (beyond paper)  */
    RX_AUTO     = 3   /* compact if gamma < threshold, else baseline                                   */
} RxMode;
const char *rx_mode_name(RxMode mode);
int rx_mode_parse(const char *s, RxMode *mode);
/* What RX_AUTO runs: RX_COMPACT when gamma = N'/N < threshold, else RX_BASELINE (like TEI's radix-mlp-threshold). */
#define RX_AUTO_THRESHOLD 0.95
RxMode rx_auto_mode(int n_compact, int n_tokens, double threshold);

/* The plain-C fp32 reference forward. logits: [N, vocab] in original token order.
 * Every weight is upcast to fp32; every sum accumulates in fp32 in a fixed order. */
int qwen3_forward_ref(const Qwen3Model *m, const RxBatch *b, RxMode mode, float *logits);
/* The same forward, for each sequence's last token only (what reranking and embedding read); either may be NULL:
 *   logits [n_seqs, vocab]   its logits, bit for bit the rows qwen3_forward_ref gives
 *   embed  [n_seqs, hidden]  its final hidden state after the final norm, L2-normalised: last-token pooling, as
 *                            sentence-transformers pools a Qwen3-Embedding model                              */
int qwen3_forward_ref_last(const Qwen3Model *m, const RxBatch *b, RxMode mode, float *logits, float *embed);
/* Reranker scores, as the Qwen3-Reranker model card computes them: scores [n_seqs] = P(yes), the softmax over the
 * two logits [yes, no] of each row of logits [n_seqs, vocab] (each sequence's last token). 0, or -1 when yes and no
 * are not two different ids in [0, vocab). */
int rx_rerank_scores(const float *logits, int n_seqs, int vocab, int32_t yes, int32_t no, float *scores);

/* The plain-C causal attention for ragged batches, shared by every mode (and the oracle of the CUDA kernel).
 *   q   [n_q, n_heads*head_dim]  query rows (N original rows, or N' compact rows)
 *   k,v [*,  n_kv*head_dim]      key/value rows, addressed through kv_row
 *   out [n_q, n_heads*head_dim]
 * Query row r stands for token g = q_orig ? q_orig[r] : r of attention's token space (the N original positions in
 * Part I; every cached and new position in Part II's prefill); it attends to tokens t = seq_start[g] .. g, whose
 * key/value rows are kv_row ? kv_row[t] : t.                                                                        */
int  rx_attention_ref(const float *q, const float *k, const float *v, float *out, int n_q,
                      const int32_t *q_orig, const int32_t *seq_start, const int32_t *kv_row,
                      int n_heads, int n_kv_heads, int head_dim);

/* The reference's position-wise building blocks, fp32, row-major; exposed as the oracles of the CUDA kernels. */
void rx_rmsnorm_ref(float *out, const float *x, const float *w, int rows, int dim, float eps);  /* [rows, dim] */
/* y = x @ w^T, the definition: each output a chain of fmaf over i = 0 .. in-1 in order, from 0. */
void rx_matmul_ref(float *y, const float *x, const float *w, int rows, int in, int out);
/* Part III (speed): the same y = x @ w^T, bit for bit, tiled, vectorized across outputs and threaded (what the
 * forward runs on every path but "definition"), on the weight packed by rx_pack_weight: W [out, in] of any dtype ->
 * wp, rx_packed_floats(out, in) floats in panels of 32 outputs (out*in, rounded up to whole panels; any alignment
 * works, 64 bytes runs fastest). xp: room for x
 * packed into tiles of 6 rows, rx_packed_x_floats(rows, in) floats (the caller's, so that a forward allocates it
 * once); x NULL: xp already holds x, packed by a call with the same rows and in. */
size_t rx_packed_floats(int out, int in);
size_t rx_packed_x_floats(int rows, int in);
void rx_pack_weight(float *wp, const RxTensor *W);
void rx_matmul_packed_ref(float *y, const float *x, const float *wp, int rows, int in, int out, float *xp);
/* The C reference's path: want "definition" (Part I's plain definitions, one thread), "portable" (Part III's fast
 * code in plain C fmaf), "avx2" (AVX2 + FMA), "avx512" (AVX-512F) or "auto" (the widest this CPU has, never the
 * definition) sets it; NULL leaves it (first use: $RADIXMLP_CPU, else auto). Returns the path in effect, or NULL,
 * leaving it, for a name it does not know or a path this CPU cannot run (radix_error() says which). Every path gives
 * the same bits. */
const char *rx_cpu_path(const char *want);
/* Threads of the C reference (OpenMP; always 1 in a build without it): n > 0 sets the count, n <= 0 leaves it
 * (OMP_NUM_THREADS, or every core). Returns the count in effect. The results never depend on it. */
int  rx_threads(int n);
/* The environment the programs read, checked at start: $RADIXMLP_CPU as rx_cpu_path(NULL) does, and $OMP_NUM_THREADS,
 * a count from 1 to 1024 or a list of them (4,2: the first counts). 0, or -1 with radix_error() saying which. */
int  rx_check_env(void);
/* In place on x [rows, n_heads*head_dim]: per-head RMSNorm with w [head_dim], then rotate-half RoPE at pos[rows]. */
void rx_qk_norm_rope_ref(float *x, const float *w, const int32_t *pos, int rows, int n_heads, int head_dim,
                         float eps, double rope_theta);
void rx_silu_mul_ref(float *out, const float *gate, const float *up, size_t n);               /* silu(g) * u  */
/* y[i] = exp(a * x[i] + b), the exponential the reference's softmax and SiLU use: within 1.5 ulp, the same bits on
 * every CPU path (y may be x). */
void rx_exp_ref(float *y, const float *x, float a, float b, size_t n);

/* ---------------------------------------------------------------------------------------------------------------
 * The GPU forward (radixmlp.cu's CUDA half). Without a CUDA device every function here fails cleanly.
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct GpuModel GpuModel;

/* 1 if a CUDA device can be used; otherwise 0 and why (e.g. "no GPU found (the CUDA runtime says: ...)") in
 * radix_error(). */
int  gpu_available(void);
/* The device name, or "" without one. */
const char *gpu_device_name(void);
/* Uploads a model, converting every weight to bf16. */
int  gpu_model_upload(GpuModel **g, const Qwen3Model *m);
/* qwen3_random's model for the same seed, rounded to bf16 (the benchmark's model: no checkpoint). */
int  gpu_model_random(GpuModel **g, const Qwen3Config *cfg, uint64_t seed);
void gpu_model_free(GpuModel *g);

/* The attention kernel of gpu_forward. RX_ATTN_AUTO (the default): the tensor-core flash kernel where it applies
 * (head_dim 128, every Qwen3 model), the naive one otherwise and on the definition path (RADIXMLP_CPU=definition).
 * RX_ATTN_NAIVE: one warp per query and head, the kernel to read first and the oracle of the other. RX_ATTN_FLASH:
 * fails here if the model's head_dim is not 128.
 * The flash kernel's query tile is 64 or 128 rows, chosen per launch (gpu_flash_block_m); RX_ATTN_FLASH_BM64 and
 * RX_ATTN_FLASH_BM128 force one (bench --attention times both), with the same results bit for bit. */
typedef enum {
    RX_ATTN_AUTO = 0,
    RX_ATTN_NAIVE = 1,
    RX_ATTN_FLASH = 2,
    RX_ATTN_FLASH_BM64 = 3,
    RX_ATTN_FLASH_BM128 = 4
} RxAttention;
int  gpu_set_attention(GpuModel *g, RxAttention attention);

typedef struct {
    RxMode mode;            /* the mode actually run (RX_AUTO resolves to another)        */
    int n_tokens, n_compact;
    double index_ms;        /* CPU: building the trie                                      */
    double forward_ms;      /* GPU: CUDA events around the whole forward                   */
} GpuRunInfo;

/* Runs Algorithm 1 on the GPU.
 *   last_only = 0: logits [N, vocab] for every token, original order
 *   last_only = 1: logits [n_seqs, vocab], the last token of each sequence
 *   logits may be NULL (benchmark: compute, do not copy back).
 *   auto_threshold: for RX_AUTO, use compact when gamma = N'/N < auto_threshold (0.95 by default). */
int gpu_forward(GpuModel *g, const RxBatch *b, RxMode mode, double auto_threshold, int last_only,
                float *logits, GpuRunInfo *info);
/* As gpu_forward with last_only, but instead of logits (no LM head): embed [n_seqs, hidden], each sequence's last-token
 * state after the final norm (bf16), L2-normalised in fp32, as qwen3_forward_ref_last gives it. */
int gpu_embed(GpuModel *g, const RxBatch *b, RxMode mode, double auto_threshold, float *embed, GpuRunInfo *info);

/* The GPU a piece at a time, for test_radixmlp.c (each kernel against its rx_*_ref oracle) and bench.c (timings).
 * A device buffer is a void * (C has no bf16 type); index arguments are int32_t arrays in device memory. Every
 * function returns 0, or -1 with one line in radix_error() (every CUDA call is checked); without a device each fails.
 * The kernels are queued in order on the default stream; a copy to the host waits for them. */
int  gpu_upload(void **dev, const void *host, size_t bytes);    /* a copy of host's bytes (int32 indices, fp32);    */
                                                                /* host NULL: uninitialised. *dev is NULL on failure */
int  gpu_upload_bf16(void **dev, const float *host, size_t n);  /* [n] bf16: host rounded to nearest even; host NULL: */
                                                                /* uninitialised                                    */
int  gpu_download_bf16(float *host, const void *dev, size_t n); /* host [n] = fp32 of the bf16 device array dev     */
void gpu_free(void *dev);                                       /* NULL: nothing                                    */
int  gpu_copy(void *dst, const void *src, size_t bytes);        /* host or device, either way; device to device is  */
                                                                /* the memory roofline (Table 6)                    */
int  gpu_memory_free(size_t *free_bytes);                       /* the device's free memory (cudaMemGetInfo)        */

/* Each kernel of gpu_forward alone, through the launcher the forward calls, on device buffers, bf16 unless said. */
/* out [rows_out, row_bytes] = in [*, row_bytes] [idx]: gather, scatter, embedding (idx [rows_out]); row_bytes even. */
int gpu_rows_by_index(void *out, const void *in, const int32_t *idx, int rows_out, size_t row_bytes);
/* Part II's K/V store (its own kernel, kv_store_kernel): out row dst[r] (rows out_stride_bytes apart) = in row
 * idx[r] (NULL: r), for r < n_rows; dst not NULL. */
int gpu_rows_to_index(void *out, size_t out_stride_bytes, const int32_t *dst, const void *in, const int32_t *idx,
                      int n_rows, size_t row_bytes);
/* x, out [rows, dim]; w [dim]. */
int gpu_rmsnorm(void *out, const void *x, const void *w, int rows, int dim, float eps);
/* In place on x [rows, n_heads*head_dim]; w [head_dim]; pos [rows]; inv_freq [head_dim/2] fp32, RoPE's frequencies
 * 1 / theta^(2i/head_dim). */
int gpu_qk_norm_rope(void *x, const void *w, const int32_t *pos, const float *inv_freq, int rows, int n_heads,
                     int head_dim, float eps);
int gpu_silu_mul(void *out, const void *gate, const void *up, size_t n);                 /* out, gate, up [n]         */
/* y [rows, out] = x [rows, in] @ w^T, w [out, in], on g's cuBLAS handle: the handle every GEMM of g's forward runs on,
 * with the math mode that forward promises. A handle takes milliseconds and memory to make, too much for a call a
 * benchmark repeats, so the caller brings one; any GpuModel serves (a tiny gpu_model_random for a test). */
int gpu_gemm(GpuModel *g, void *y, const void *x, const void *w, int rows, int in, int out);
/* The naive kernel, as rx_attention_ref: q, out [n_q, n_heads*head_dim]; k, v [*, n_kv*head_dim], rows kv_stride
 * elements apart (n_kv*head_dim when packed), addressed through kv_row; q_orig [n_q] or NULL; seq_start and kv_row
 * (or NULL) [T], T attention's tokens (N in Part I). */
int gpu_attention(void *out, const void *q, const void *k, const void *v, int64_t kv_stride, int n_q,
                  const int32_t *q_orig, const int32_t *seq_start, const int32_t *kv_row, int n_heads, int n_kv_heads,
                  int head_dim);
/* The flash kernel (head_dim 128) in its varlen layout: query i of sequence s is row cu_q[s] + i, at key position
 * Lk_s - Lq_s + i (Lq_s = cu_q[s+1] - cu_q[s], Lk_s = cu_k[s+1] - cu_k[s] >= Lq_s); key t of sequence s is row
 * kv_row ? kv_row[cu_k[s] + t] : cu_k[s] + t. q, out [cu_q[n_seqs], n_heads*head_dim]; k, v [*, n_kv*head_dim];
 * kv_row [cu_k[n_seqs]] or NULL. cu_q and cu_k [n_seqs+1] are host arrays: the call makes the kernel's work list
 * from them and uploads all three. Baseline: cu_q = cu_k = cu_seqlens; compact: cu_q from radix_compact_cu_q,
 * cu_k = cu_seqlens, kv_row = I_scatter. kernel: RX_ATTN_FLASH (the query tile chosen per launch), or
 * RX_ATTN_FLASH_BM64 or RX_ATTN_FLASH_BM128. */
int gpu_flash_attention(void *out, const void *q, const void *k, const void *v, const int32_t *cu_q,
                        const int32_t *cu_k, const int32_t *kv_row, int n_seqs, int n_heads, int n_kv_heads,
                        int head_dim, RxAttention kernel);
/* The flash kernel's query tile height for a launch over these queries (cu_q [n_seqs+1], host) and heads: 64 or 128
 * (kernel RX_ATTN_FLASH_BM64 or _BM128: that one; RX_ATTN_FLASH: the per-launch rule, flash_block_m in radixmlp.cu,
 * which asks the current device); -1 on a CUDA error. */
int gpu_flash_block_m(RxAttention kernel, const int32_t *cu_q, int n_seqs, int n_heads);

/* The benchmarks' timer: CUDA events around each of reps calls of run(ctx) (0: success), after one warm-up call that
 * is not counted; *median_ms = their median. A failing run stops it with that run's error. */
int gpu_time_median(int (*run)(void *ctx), void *ctx, int reps, double *median_ms);
/* Attention alone (bench --attention): the causal attention of batch b with random bf16 q, k, v, as gpu_forward runs
 * it in `layout`: RX_BASELINE on the N rows; RX_RADIX the scatter of q, k, v to the N rows, attention, and the gather
 * back (Algorithm 1, lines 20-23); RX_COMPACT on the N' rows, keys read through I_scatter. kernel: any RxAttention. */
int gpu_time_attention(const RxBatch *b, RxMode layout, RxAttention kernel, int n_heads, int n_kv_heads, int head_dim,
                       int reps, double *median_ms);
/* cudaDeviceReset(): frees everything of this process on the device and drops per-device settings. */
int gpu_test_device_reset(void);
/* Each kernel's launch (for the resource gate, `make resource-gate`; no device): the kernel's name, threads per block,
 * the dynamic shared memory its launch passes, and the bytes the kernel's own carve-up of that memory spans.
 * Returns the number of kernels; *shapes points to a static table (NULL, 0 in a host-only build). */
typedef struct { const char *kernel; int threads, launch_smem, kernel_smem; } GpuLaunchShape;
int gpu_launch_shapes(const GpuLaunchShape **shapes);

/* ---------------------------------------------------------------------------------------------------------------
 * Part II: across requests, a paged KV prefix cache
 * ------------------------------------------------------------------------------------------------------------- */
/* A paged KV pool: n_pages pages of page_size token slots. A slot holds K and V of every layer for one token.
 * Slot s = page * page_size + i holds token position (page's first position + i) of whichever sequence owns it.
 * n_layers = kv_dim = 0 makes a pool of bookkeeping only (k = v = NULL), for tests of the caches alone. */
typedef struct {
    int n_pages, page_size;
    int n_layers, kv_dim;            /* kv_dim = n_kv_heads * head_dim                                        */
    float *k, *v;                    /* [n_pages * page_size, n_layers, kv_dim] fp32, slot-major              */
    int32_t *ref;                    /* [n_pages] references held on each page (the cache's and requests')   */
    int32_t *free_list; int n_free;  /* [n_pages] stack of free page ids                                      */
} RxKvPool;
int  rx_kv_pool_init(RxKvPool *p, int n_pages, int page_size, int n_layers, int kv_dim);
void rx_kv_pool_free(RxKvPool *p);
/* address of K (or V) of layer l at slot (page, i): p->k + ((size_t)(page * page_size + i) * n_layers + l) * kv_dim */
int  rx_kv_page_alloc(RxKvPool *p);                    /* a free page, now with 1 reference; -1 when none is free */
void rx_kv_page_retain(RxKvPool *p, int32_t page);     /* one more reference                                   */
void rx_kv_page_release(RxKvPool *p, int32_t page);    /* one fewer; the last one puts the page on the free list */

/* The prefix cache: which page-aligned token prefixes have their K/V in the pool, under which model id.
 *   RX_CACHE_RADIX  a radix tree (RadixAttention): edges are runs of whole pages; LRU eviction of unlocked leaves
 *   RX_CACHE_HASH   a flat map hash(parent hash, page tokens) -> page, LRU over pages (the hash-chained baseline)
 *   RX_CACHE_OFF    caches nothing: every request prefills every token
 * The cache holds one reference on every page it maps; requests hold their own.                                 */
typedef enum { RX_CACHE_OFF = 0, RX_CACHE_RADIX = 1, RX_CACHE_HASH = 2 } RxCacheKind;
const char *rx_cache_kind_name(RxCacheKind kind);
int  rx_cache_kind_parse(const char *s, RxCacheKind *kind);

typedef struct RxPrefixCache RxPrefixCache;
int  rx_cache_create(RxPrefixCache **c, RxCacheKind kind, RxKvPool *pool);
void rx_cache_free(RxPrefixCache *c);        /* drops the cache's references (requests must be released first) */
/* The longest cached page-aligned prefix of tokens[0..n): its length in tokens, its pages in pages_out (room for
 * n / page_size; NULL: the length alone). A pure lookup: no lock, no LRU update (the lpm scheduler asks it of every
 * waiting request); it only counts the pages it compares (RxCacheStats).                                         */
int  rx_cache_lookup(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n, int32_t *pages_out);
/* Caches the first n / page_size whole pages of tokens, whose K/V are in pages[]. Prefixes already cached keep
 * their pages (a duplicate page is not adopted); the cache takes a reference on each page it adopts, and returns
 * how many it adopted (or -1 out of memory).                                                                       */
int  rx_cache_insert(RxPrefixCache *c, uint64_t model_id, const int32_t *tokens, int n, const int32_t *pages);
/* Evicts (LRU) until the pool has n_free free pages or nothing more can be evicted; returns the free count. */
int  rx_cache_evict(RxPrefixCache *c, int n_free);
/* Draws the radix tree (or the hash map's entries), one edge per line, e.g. with page size 2:
 *   model 7
 *   `-- [5 6 | 7 8]  pages 0 1  lock 1
 *       |-- [9 9]  page 2  lock 0
 *       `-- [4 4]  page 3  lock 1                                                                                 */
void rx_cache_draw(FILE *out, const RxPrefixCache *c);

typedef struct {
    RxCacheKind kind;
    int  nodes;            /* radix: edges in the tree; hash: entries in the map                             */
    int  cached_pages;     /* pages the cache holds a reference on                                          */
    int  orphans;          /* hash: entries no lookup can reach (their chain to the root was evicted); radix: 0 */
    int  request_pages;    /* pages some request holds a reference on                                        */
    long evicted_pages;    /* pages whose cache reference eviction has dropped, since creation              */
    long compared_pages;   /* pages of tokens lookups, inserts and admissions compared with cached ones, since
                              creation: about one per page walked, however many prompts are cached             */
} RxCacheStats;
/* Recounts everything from the structures and checks them against the pool: every page's ref equals the cache's
 * references plus the requests', the free list holds exactly the pages with no reference, once each. Returns 0,
 * or -1 with the first inconsistency in radix_error().                                                            */
int  rx_cache_audit(const RxPrefixCache *c, RxCacheStats *s);

/* A request's life, as a serving scheduler drives it: admit -> (the forward writes its suffix K/V) -> finish | abort.
 * A scheduler that preempts a request aborts it and initialises it again: it waits, and is matched again. */
typedef enum { RX_REQ_WAITING = 0, RX_REQ_RUNNING = 1, RX_REQ_FINISHED = 2, RX_REQ_ABORTED = 3 } RxRequestState;
typedef struct {
    const int32_t *tokens; int len;  /* the prompt                                                               */
    uint64_t model_id;               /* the cache's namespace: K/V of another model is never reused              */
    RxRequestState state;
    int cached_len;                  /* tokens 0..cached_len-1 came from the cache at admission: page-aligned   */
    int kv_len;                      /* tokens whose K/V are in its pages: cached_len, then what forwards wrote */
    int32_t *pages; int n_pages;     /* [ceil(len / page_size)] page table: cached pages, then the request's own */
    int32_t prefix_key;              /* the last cached page (it determines the whole cached history), -1: none  */
    int32_t lock_node;               /* radix: the deepest node this request locks, -1: none                     */
} RxRequest;
void rx_request_init(RxRequest *r, const int32_t *tokens, int len, uint64_t model_id);
/* Matches the longest cached page-aligned prefix of tokens[0..len-1) (len - 1: the last token is always computed,
 * it gives the logits), locks it, takes a reference on each cached page, and allocates own pages for the rest,
 * evicting when the pool is short. Returns 0 (running), 1 (no room now: running requests hold the pages; nothing
 * changed, retry after one finishes) or -1 (never fits: the request needs more pages than the pool has).          */
int  rx_request_admit(RxPrefixCache *c, RxRequest *r);
/* Grows the page table to cover tokens[0..len) (a decode step's new token may cross a page boundary), evicting
 * when the pool is short. Returns 0, 1 (no room: running requests hold every page; the caller preempts one) or -1. */
int  rx_request_grow(RxPrefixCache *c, RxRequest *r, int len);
/* Caches the whole pages of tokens[0..kv_len) now (generation does it at each page boundary), and moves the radix
 * lock down to them so that eviction leaves them be while the request runs. Returns 0 or -1. */
int  rx_request_cache(RxPrefixCache *c, RxRequest *r);
/* After the forward wrote the request's K/V: caches its whole pages, unlocks, drops the request's references. */
int  rx_request_finish(RxPrefixCache *c, RxRequest *r);
void rx_request_abort(RxPrefixCache *c, RxRequest *r);    /* unlock and release; caches nothing; final           */

/* Algorithm 2's trie with one root per key: root_key [n_seqs] names what precedes sequence s (the cached prefix, -1
 * for nothing), and two tokens share a compact row only if their sequences' keys are equal too. root_key == NULL is
 * radix_index_build. */
int  radix_index_build_keyed(RadixIndex *ix, const int32_t *input_ids, const int32_t *position_ids,
                             const int32_t *cu_seqlens, int n_seqs, const int32_t *root_key);

/* What the forward needs to prefill a batch whose sequences continue cached prefixes.
 * The RxBatch holds only the unmatched suffixes: sequence s has L_s new tokens at positions
 * cached_len[s] .. cached_len[s] + L_s - 1 (its position_ids say so).                                          */
typedef struct {
    RxKvPool *pool;
    const int32_t *cached_len;        /* [n_seqs] tokens 0..cached_len-1 of sequence s are already in the pool:
                                         a page-aligned cached prefix, or (a decode step) its whole history       */
    const int32_t *const *pages;      /* [n_seqs] page table of sequence s: pages[s][j] holds positions
                                         j*page_size .. (j+1)*page_size-1; covers cached_len + L_s positions.
                                         Cached pages first (shared, read only), then the request's own pages,
                                         into which the forward writes the new K/V.                               */
    const int32_t *prefix_key;        /* [n_seqs] identity of the cached prefix: the page holding its last token
                                         (checked), which determines the whole history; -1 when nothing is cached.
                                         In-batch compaction merges suffix rows only between equal keys.         */
} RxPrefill;

/* The C reference forward on cached prefixes. Computes only the suffix rows (compacted as `mode` says, with the
 * trie keyed by (prefix_key, token, position)), reads cached K/V through the page tables, writes the new K/V into
 * the pages, and returns last-token logits [n_seqs, vocab]. All cached_len 0 -> same as a fresh forward. Its logits
 * equal a full recomputation of the whole sequences bit for bit.
 * n_compact_out (may be NULL): the rows it computed on, N' in radix and compact mode, N in baseline mode.      */
int qwen3_prefill_ref(const Qwen3Model *m, const RxBatch *suffixes, const RxPrefill *pf, RxMode mode,
                      float *last_logits, int *n_compact_out);

/* Part II on the GPU. The K/V live in device memory, bf16, laid out as RxKvPool's [slot, n_layers, kv_dim]; the
 * bookkeeping (page refs, free list, the cache) stays in a host RxKvPool of the same n_pages and page_size, whose
 * page ids index both. That host pool needs no K/V arrays: make it with n_layers = kv_dim = 0.                   */
typedef struct GpuKvPool GpuKvPool;
/* A pool for g's shape, mirroring host's pages (host must outlive it), every value NaN (bf16 0xffff) until a
 * prefill writes it. */
int  gpu_kv_pool_create(GpuKvPool **p, const GpuModel *g, const RxKvPool *host);
void gpu_kv_pool_free(GpuKvPool *p);
/* The whole pool copied back as fp32, k and v [n_pages * page_size, n_layers, kv_dim] each (tests). */
int  gpu_kv_pool_read(const GpuKvPool *p, float *k, float *v);
/* The GPU twin of qwen3_prefill_ref: the same pf (pf->pool the host pool of kv's pages), the new K/V written into
 * kv's slots, attention (flash or naive, as gpu_set_attention says) reading every key through the pool slots,
 * last-token logits [n_seqs, vocab] (may be NULL). rows_out (may be NULL): rows computed, N' or N. info: as
 * gpu_forward's (forward_ms: the GPU time of the prefill), may be NULL.                                          */
int  gpu_prefill(GpuModel *g, GpuKvPool *kv, const RxBatch *suffixes, const RxPrefill *pf, RxMode mode,
                 float *last_logits, int *rows_out, GpuRunInfo *info);

/* One line that puts the token spaces of a prefill side by side, e.g.
 *   "prefill: 4 sequences, 160 tokens = 128 cached + 32 new (N); 9 distinct new histories (N'); 9 rows computed"
 * rows_computed: what qwen3_prefill_ref returned in n_compact_out. pf may be NULL (nothing cached).            */
int rx_prefill_print(FILE *out, const RxBatch *suffixes, const RxPrefill *pf, int rows_computed);
/* Generation: after a request's prefill, each step appends the token sampled from its newest logits and runs it as a
 * one-token prefill on the cached history, until max_new tokens or an end-of-sequence token. */
typedef struct {
    int max_new;                     /* tokens to generate per request, >= 1                                         */
    float temperature;               /* 0: greedy (argmax; the lowest id on a tie); > 0: sample from softmax(z / T) */
    int top_k;                       /* sample among the k most likely only; 0: all                                */
    float top_p;                     /* ... and among the fewest whose probability reaches p; 1: all               */
    uint64_t seed;                   /* request i's generator starts from (seed, i): rx_sampler_seed               */
    const int32_t *eos; int n_eos;   /* a request stops after generating one of these (none: n_eos 0)             */
    int32_t *out;                    /* [n_requests, max_new] out: request i's generated ids, in row i              */
    int *n_out;                      /* [n_requests] out: how many request i generated                             */
    /* Called with every logits row a forward gives a request: history [len], whose last token gave logits [vocab]
     * (the tests recompute each one without the cache). Non-zero fails the run. NULL: none.                        */
    int (*on_logits)(void *ctx, int request, const int32_t *history, int len, const float *logits);
    void *ctx;
} RxGenerate;
uint64_t rx_sampler_seed(uint64_t seed, int request);     /* request i's generator state, from seed and i      */
/* The next token from logits [vocab]: greedy at temperature 0 (no draw), else one draw of *rng from softmax(z / T)
 * cut to the top_k most likely, then to the fewest whose probability reaches top_p. -1: out of memory.            */
int32_t rx_sample(const float *logits, int vocab, const RxGenerate *g, uint64_t *rng);

/* Serves requests through a prefix cache on the C reference (a serving engine's scheduler loop). Each step grows the
 * running requests' page tables (evicting, then preempting the newest running request, which is requeued), admits
 * waiting requests up to `batch` running, in arrival order (fcfs) or longest cached prefix first (lpm), and runs one
 * qwen3_prefill_ref (gpu_prefill when o->gpu is set) on every running request's tokens that have no K/V yet: a new
 * request's uncached prompt, a decoding request's newest token. Without o->gen a request finishes after its
 * prefill. At the end it audits the pool and flushes the cache. last_logits [n, vocab] (the prompt's last token),
 * batch_of [n] (the step of its prefill) and cached_of [n] (tokens from the cache at its first admission) are in
 * request order; each may be NULL. A NaN or Inf in any logits fails the run, naming the request. A request that
 * cannot fit in the pool even alone is refused, and so are the later turns (@K) of a refused one: the others are
 * served, their outputs and st complete, then rx_serve returns 1, radix_error() naming the first refused. -1: failed.*/
typedef struct {
    RxCacheKind cache;
    int page_size;
    int n_pages;                     /* the KV pool; 0: enough pages for every request at once                     */
    int batch;                       /* requests running at once (each step's sequences)                           */
    int lpm;                         /* 0: fcfs, 1: longest cached prefix first                                    */
    int lpm_window;                  /* lpm orders the first lpm_window waiting requests, the rest wait in arrival
                                        order behind them (0: 128; radixmlp.cu, RX_LPM_WINDOW, says why)           */
    RxMode mode;                     /* of qwen3_prefill_ref                                                       */
    uint64_t model_id;
    FILE *trace;                     /* each step's rx_prefill_print line (N, N', cached, computed); NULL: none   */
    FILE *show_cache;                /* the cache after each step: counts and rx_cache_draw; NULL: none           */
    GpuModel *gpu;                   /* non-NULL: prefill with gpu_prefill on this model (K/V in a GpuKvPool)     */
    const char *source;              /* the requests' file: a message names request i "source:i+1"; NULL: "request i" */
    const RxGenerate *gen;           /* generate after the prefill; NULL: prefill only                             */
    const int32_t *after;            /* [n] multi-turn: request i's prompt is request after[i]'s prompt and generated
                                        tokens, then its own tokens; it waits until after[i] (< i) finishes.
                                        -1 (or NULL for all): a prompt of its own tokens only                      */
} RxServeOptions;
typedef struct {
    int n_batches;                       /* forwards (steps)                                                       */
    long prompt_tokens, cached_tokens;   /* hit rate = cached_tokens / prompt_tokens (at each first admission)     */
    long cached_generated;               /* of cached_tokens: tokens an earlier turn generated                     */
    long generated_tokens;
    long rows_computed;                  /* rows the forwards computed: N' of the suffixes in compact mode         */
    long evicted_pages;
    long compared_pages;                 /* the cache's (RxCacheStats): a page or so per page walked, in any queue */
    int preemptions, refused;
    long recomputed_tokens;              /* tokens prefilled again after a preemption                              */
    int pool_pages, cache_pages;         /* at the end, before the flush                                           */
    int request_pages;                   /* pages held by requests at the end: 0 unless something leaked          */
    int held_after_flush;                /* pages not free after the cache's flush: 0 unless something leaked     */
    double ms;                           /* wall time of the scheduling loop, forwards included                   */
    double gpu_ms;                       /* with o->gpu: the prefills' GPU time (CUDA events); 0 on the CPU       */
} RxServeStats;
int rx_serve(const Qwen3Model *m, const int32_t *const *tokens, const int *lens, int n, const RxServeOptions *o,
             float *last_logits, int32_t *batch_of, int32_t *cached_of, RxServeStats *st);

#ifdef __cplusplus
}
#endif
#endif /* RADIXMLP_H */

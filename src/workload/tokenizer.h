/* tokenizer — a prompt's length as the target counts it, from the model's own tokenizer.json
 * (Hugging Face tokenizers' format) or its GGUF file, read locally: nothing is downloaded.
 *
 * Byte-level BPE only, the family of GPT-2, Llama 3, Qwen 2 and most recent models: the
 * text is split by the pre-tokenizer's rule (GPT-2's ByteLevel split, or Llama 3's Split
 * pattern), each piece's bytes are mapped to byte-level symbols and merged by the merges'
 * ranks (a piece that is a whole vocabulary entry stays one with ignore_merges), and the
 * count is the symbols left plus the special tokens the post-processor adds to a single
 * sequence (a BOS). Anything else is refused by name: another model type (WordPiece,
 * Unigram ...), a normalizer, a SentencePiece-style pre-tokenizer (Metaspace), another
 * Split pattern. Non-ASCII characters count as letters (\p{L}) in the split rules; added
 * tokens written in the text are counted as text.
 *
 * A GGUF model file (llama.cpp's; gguf.h reads its head only) works the same: a "gpt2"
 * tokenizer model, its tokens and merges, the pre-tokenizer named gpt-2 or llama3 /
 * llama-bpe / llama-v3 (ignore_merges with Llama 3's), and the BOS and EOS the file says it
 * adds (tokenizer.ggml.add_bos_token, add_eos_token; without the first, llama.cpp's default:
 * a BOS for Llama 3's pre-tokenizer only). A "llama" (SentencePiece) model is refused. */
#ifndef STALLSCOPE_WORKLOAD_TOKENIZER_H
#define STALLSCOPE_WORKLOAD_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

typedef struct workload_tokenizer workload_tokenizer;

/* Load path (a tokenizer.json, or a GGUF file: told by its first bytes). 0 with *out, or -1
 * with err ("FILE: why"). */
int workload_tokenizer_load(const char *path, workload_tokenizer **out, char *err);
/* The ids text[0..len) encodes to, the post-processor's special tokens included. */
int64_t workload_tokenizer_count(const workload_tokenizer *tok, const char *text, size_t len);
void workload_tokenizer_free(workload_tokenizer *tok);

#endif

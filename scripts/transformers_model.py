#!/usr/bin/env python3
"""Builds a model directory `transformers serve` can load: a Qwen3 of the Qwen3-8B shape (or a small one
with --tiny, for trying the run on a CPU) with random bf16 weights, and a word-level tokenizer whose
vocabulary maps the word `wN` to token id N.

serverbench sends text prompts as words ` w123 w456 …` (one word per token id), so with this tokenizer
every prompt reaches the model as exactly the token ids serverbench meant, and `usage.prompt_tokens` can
be checked against the prompt's length. The model has no end-of-sequence token, so every request
generates exactly `max_tokens` tokens.

Usage: transformers_model.py OUT_DIR [--tiny] [--device cuda]
"""

import argparse
import json
import os

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

# The Qwen3-8B shape (serverbench's presets/models/qwen3-8b.yaml).
QWEN3_8B = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
TINY = dict(QWEN3_8B, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32)


def tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    vocab = {f"w{i}": i for i in range(vocab_size)}
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    # Split on whitespace only: `w123` stays one word.
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # No decoder: decoded words are joined by spaces, so every streamed token is non-empty text.
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="w0", model_max_length=1 << 30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model for trying the run on a CPU")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    shape = TINY if a.tiny else QWEN3_8B
    config = Qwen3Config(**shape, eos_token_id=None, bos_token_id=None, pad_token_id=None,
                         torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device(a.device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    # No end-of-sequence token: generation always runs to max_new_tokens.
    model.generation_config = GenerationConfig(eos_token_id=None, bos_token_id=None, pad_token_id=None,
                                               do_sample=False)
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out)
    tokenizer(shape["vocab_size"]).save_pretrained(a.out)
    params = sum(p.numel() for p in model.parameters())
    with open(os.path.join(a.out, "serverbench.json"), "w") as f:
        json.dump({"shape": shape, "parameters": params, "dtype": "bfloat16", "weights": "random, seed 0"}, f)
    print(f"wrote {a.out}: {params / 1e9:.2f} B parameters, vocabulary {shape['vocab_size']}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a model directory that `vllm serve DIR --load-format dummy` can serve: the Qwen3-8B shape
(serverbench's presets/models/qwen3-8b.yaml, the same shape as scripts/transformers_model.py)
as config.json, and the project's word-level tokenizer (the word `wN` is token id N), with NO weights:
vLLM's dummy loader initialises random weights on the GPU.

serverbench's text prompts are words ` w123 w456 …`, one word per token id, so a text prompt reaches the
model as exactly the ids serverbench meant and `usage.prompt_tokens` can be checked against it. The model
has no end-of-sequence token. Needs transformers and tokenizers only (no torch, no GPU).

The tokenizer carries a chat template (CHAT_TEMPLATE) for `/v1/chat/completions`, which the AgentX protocol
sends (`--protocol agentx --api chat`): the messages' contents joined by spaces, with no role markers, no
special tokens and nothing for the generation prompt, and the cache-bust marker AgentX puts at the start of
a session's first user message (`[rid:<12 hex digits>]` and two newlines) left out. The simulator counts
no tokens for the marker (it moves the tree instance's block ids instead, as the replayer's token ids
follow), and a word-level tokenizer would read it as one unknown word; without it `usage.prompt_tokens`
is the workload's prompt length exactly, as with token-id prompts.

With --moe the config is the Qwen3-30B-A3B shape instead (QWEN3_30B_A3B, `Qwen3MoeForCausalLM`: 48 layers,
128 experts of which 8 per token, no shared expert), with the same tokenizer (the same 151,936-word vocabulary);
`MOE=1 scripts/vllm_run.sh` serves it. Its numbers are Qwen3-30B-A3B's own config.json's (see QWEN3_30B_A3B).

Usage: make_model.py OUT_DIR [--tokenizer-only | --moe]   (--tokenizer-only: only the tokenizer, beside a checkpoint)
"""

import json
import os
import sys

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config

QWEN3_8B = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    # Qwen3-8B's own is 40,960; the larger limit lets one server take both H200 vLLM deployments, the
    # 40,960-token one and the 200,000-token one (the context the corpus's Claude Code sessions ran in).
    max_position_embeddings=262144,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)

# Qwen3-30B-A3B (--moe), as its config.json on the Hugging Face hub has it (read 2026-12-03 from a verbatim copy of
# lmstudio-community/Qwen3-30B-A3B-MLX-4bit's config.json, which is Qwen/Qwen3-30B-A3B's plus MLX's quantization
# fields): every layer sparse (decoder_sparse_step 1, mlp_only_layers []), so intermediate_size (a dense MLP's
# width) is never used; the router's top-8 weights renormalised (norm_topk_prob). head_dim is given: the
# config class would otherwise read it as hidden_size / heads (64). No weights: vLLM's dummy loader draws them.
QWEN3_30B_A3B = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    moe_intermediate_size=768,
    num_hidden_layers=48,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    num_experts=128,
    num_experts_per_tok=8,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    norm_topk_prob=True,
    max_position_embeddings=40960,
    max_window_layers=48,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    use_sliding_window=False,
    sliding_window=None,
    tie_word_embeddings=False,
)


# Every message's text, joined by spaces; a leading AgentX cache-bust marker `[rid:…]` dropped (see above).
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- set c = m['content'] if m['content'] is string else '' -%}"
    "{%- if c.startswith('[rid:') and ']' in c -%}{%- set c = c.split(']', 1)[1] -%}{%- endif -%}"
    "{{ c ~ ' ' }}"
    "{%- endfor -%}"
)


def write_tokenizer(out: str) -> None:
    """The word-level tokenizer: `wN` is token id N, for every id of the Qwen3 vocabulary."""
    vocab = {f"w{i}": i for i in range(QWEN3_8B["vocab_size"])}
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # `w123` stays one word
    # No decoder: decoded words are joined by spaces, so every streamed token is non-empty text.
    tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="w0", model_max_length=1 << 30)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out)


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if "--tokenizer-only" in sys.argv[2:]:
        # beside a checkpoint written by scripts/verify_model.py (the verification demo)
        write_tokenizer(out)
        print(f"wrote {out}: the word-level tokenizer")
        return
    if "--moe" in sys.argv[2:]:
        from transformers import Qwen3MoeConfig
        config = Qwen3MoeConfig(**QWEN3_30B_A3B, eos_token_id=None, bos_token_id=None, pad_token_id=None,
                                torch_dtype="bfloat16", architectures=["Qwen3MoeForCausalLM"])
        assert config.head_dim == 128 and config.num_experts == 128, "the config class dropped a field"
        config.save_pretrained(out)
        write_tokenizer(out)
        with open(os.path.join(out, "serverbench.json"), "w") as f:
            json.dump({"shape": QWEN3_30B_A3B, "dtype": "bfloat16", "weights": "none: vllm --load-format dummy"}, f)
        print(f"wrote {out}: config.json (Qwen3-30B-A3B) and the word-level tokenizer, no weights")
        return
    config = Qwen3Config(**QWEN3_8B, eos_token_id=None, bos_token_id=None, pad_token_id=None,
                         torch_dtype="bfloat16", architectures=["Qwen3ForCausalLM"])
    config.save_pretrained(out)
    write_tokenizer(out)
    with open(os.path.join(out, "serverbench.json"), "w") as f:
        json.dump({"shape": QWEN3_8B, "dtype": "bfloat16", "weights": "none: vllm --load-format dummy"}, f)
    print(f"wrote {out}: config.json and the word-level tokenizer, no weights")


if __name__ == "__main__":
    main()

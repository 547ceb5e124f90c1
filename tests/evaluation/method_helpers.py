"""Prompts and small helpers shared by the method tests (PCD, Ms-PoE, Attention Buckets, the method stack)."""

from evaluation.generation import collate, tokenize_prompts

PROMPTS = ["The first prompt, a little longer than the others.", "Second one", "third prompt here"]


def tokens(outputs):
    """Generated token ids of each output."""
    return [o.token_ids for o in outputs]


def batch_of(tokenizer, prompts=PROMPTS):
    """A left-padded generation batch of `prompts`."""
    return collate(tokenize_prompts(tokenizer, prompts), tokenizer.pad_token_id)


def gqa_llama(tokenizer, num_hidden_layers: int = 2, max_position_embeddings: int = 256):
    """A small Llama with grouped-query attention (4 query heads, 2 key/value heads), sized to `tokenizer`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=0,
        eos_token_id=1,
    )
    return LlamaForCausalLM(config).eval()

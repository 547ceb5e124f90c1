"""Prompts and small helpers shared by the method tests (PCD, Ms-PoE, Attention Buckets, the method stack)."""

from evaluation.generation import collate, tokenize_prompts

PROMPTS = ["The first prompt, a little longer than the others.", "Second one", "third prompt here"]


def tokens(outputs):
    """Generated token ids of each output."""
    return [o.token_ids for o in outputs]


def batch_of(tokenizer, prompts=PROMPTS):
    """A left-padded generation batch of `prompts`."""
    return collate(tokenize_prompts(tokenizer, prompts), tokenizer.pad_token_id)

"""Data: the character tokenizer, the Tiny Shakespeare corpus and the Lightning DataModule."""

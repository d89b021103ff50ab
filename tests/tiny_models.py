"""The tiny GPT-2 and Llama configs the measuring children train on the CPU (hidden 64, vocabulary 512).

One definition for ``measure_child.py``, ``finetune_child.py`` and ``plan_phases_child.py``, which
run in one process and import it from their own folder (a script's ``sys.path[0]``, and on pytest's path).
"""

GPT2 = {"n_embd": 64, "n_head": 4, "vocab_size": 512, "n_positions": 128}
LLAMA = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
         "vocab_size": 512, "max_position_embeddings": 128}

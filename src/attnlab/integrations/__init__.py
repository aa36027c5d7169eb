"""attnlab inside other libraries. Each integration is optional and sits on top of everything: it calls
``attnlab.api`` (§5–§8) and nothing below it, and importing this package imports none of the other
libraries.

hf   Hugging Face transformers: ``attnlab.integrations.hf.register()`` makes ``attn_implementation="attnlab"``
     run training and prefill through ``flash_attention`` / ``flash_attention_varlen`` and decoding
     through ``flash_decode`` (``pip install 'attnlab[hf]'``)
"""

"""rlxjax-digits: a Flower App federating LoRA adapters through rlxjax's compiled step."""

"""Code 05 (lecture §8): KV cache, prefill vs decode, Flash-Decoding in the tiny transformer."""
from attnlab.demos import run_demo

if __name__ == "__main__":
    run_demo(5)
